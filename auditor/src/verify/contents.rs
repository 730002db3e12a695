//! File contents are stored by hash outside the chain; the chained payload
//! names the hash, so a changed or deleted blob shows here.

use super::context::Verification;
use crate::AuditError;
use crate::chain;

impl Verification<'_> {
    /// For file events, checks the stored content blob still has the hash
    /// the (chained) payload names.
    pub(super) fn check_content(
        &mut self,
        seq: u64,
        payload: &str,
    ) -> Result<Option<String>, AuditError> {
        let Ok(value) = serde_json::from_str::<serde_json::Value>(payload) else {
            return Ok(Some(format!("seq {seq} has a payload that is not JSON")));
        };
        let Some(sha) = value.get("stored_content").and_then(|v| v.as_str()) else {
            return Ok(None);
        };
        let data = self.rows.content(sha)?;
        Ok(match data {
            None => Some(format!(
                "seq {seq}: the file content it references ({sha}) was deleted"
            )),
            Some(d) if chain::sha256_hex(&d) != sha => Some(format!(
                "seq {seq}: the file content it references was modified"
            )),
            Some(_) => None,
        })
    }
}
