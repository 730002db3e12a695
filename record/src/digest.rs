//! SHA-256 as the record spells it: lowercase hex.

use std::fmt::Write;

use sha2::{Digest, Sha256};

/// SHA-256 (lowercase hex) of bytes in memory.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Lowercase hex of a digest (or any bytes).
pub fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}
