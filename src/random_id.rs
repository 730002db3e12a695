//! Fresh random ids, for names that must not collide: a live session's id
//! and the file name of an approvals socket. Below both `session` and
//! `approvals`, so neither reaches into the other for it.

use anyhow::Context;

/// 16 random hex digits.
pub(crate) fn random_id() -> anyhow::Result<String> {
    let mut bytes = [0u8; 8];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
        .context("reading /dev/urandom for a fresh id")?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}
