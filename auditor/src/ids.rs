//! New session ids: the record's model has no I/O, so the random bits are
//! drawn here.

use airlock_record::SessionId;

use crate::AuditError;

pub(crate) fn new_session_id(now_ms: u64) -> Result<SessionId, AuditError> {
    let mut random = [0u8; 10];
    getrandom::fill(&mut random).map_err(|e| AuditError::Random(e.to_string()))?;
    Ok(SessionId::new(now_ms, random))
}
