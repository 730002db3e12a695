//! Exports for other tools: HAR 1.2 (HTTP), JSON lines and OCSF (SIEM) and asciicast
//! v2 (terminal).

pub mod cast;
pub mod har;
pub mod jsonl;
pub mod ocsf;
