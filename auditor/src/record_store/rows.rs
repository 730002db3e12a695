//! The rows a store keeps, as verify reads them back: plain values, the
//! same for every store, with nothing in them trusted yet.

use crate::search::Terms;

/// A session's own row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRow {
    pub started_us: i64,
    pub info_json: String,
    pub public_key: Vec<u8>,
    /// The fingerprint stored beside the key (what readers are shown).
    pub stored_fp: String,
    pub ended_us: Option<i64>,
    pub end_json: Option<String>,
    pub final_seq: Option<i64>,
}

/// One signed checkpoint, its signature not yet checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointRow {
    pub seq: u64,
    pub hash: Vec<u8>,
    pub is_final: bool,
    pub signature: Vec<u8>,
}

/// One event as stored: the chained fields and the hash stored with them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRow {
    pub seq: u64,
    pub ts_us: i64,
    pub kind: String,
    pub exec_id: Option<String>,
    pub payload: String,
    /// The chain hash stored with the event.
    pub stored: Vec<u8>,
}

/// One search index row: a searchable value of event `seq`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexRow {
    pub seq: u64,
    pub ts_us: i64,
    pub kind: String,
    pub terms: Terms,
}
