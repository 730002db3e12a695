//! Exports for other tools: HAR 1.2 (HTTP), JSON lines (SIEM) and asciicast
//! v2 (terminal).

pub mod cast;
pub mod har;
pub mod jsonl;
