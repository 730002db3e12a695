//! A batch's rows as the node stores them, packed into one buffer: the
//! bytes the chain hash and the signatures cover, copied once out of the
//! local record and never decoded, re-encoded or held as a `String` each.
//!
//! Each row's fields are laid end to end as a big-endian `i32` length (-1
//! for a NULL) and the field's bytes, integers as 8 big-endian bytes: the
//! field layout of a tuple in PostgreSQL's binary COPY. A central store
//! then writes a row as its own prefix and one copy of these bytes, and
//! any other destination reads the fields back with [`PackedEvent`]'s and
//! [`PackedTerms`]' accessors.

use std::ops::Range;

use crate::search::Terms;

/// A batch's events, in seq order, each (seq, ts_us, kind, exec_id,
/// payload, hash); its buffers are kept across batches.
pub type ShipEvents = Packed;
/// A batch's search-term rows, in seq order, each (seq, ts_us, kind, host,
/// method, verdict, url, path, command).
pub type ShipTerms = Packed;

/// Rows packed as above.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Packed {
    bytes: Vec<u8>,
    rows: Vec<Row>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Row {
    seq: u64,
    ts_us: i64,
    /// Where the event's packed fields are in `bytes`.
    at: Range<usize>,
}

/// One packed row: an event, or an event's search terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PackedEvent<'a> {
    pub seq: u64,
    pub ts_us: i64,
    /// Every field, as laid out above.
    pub fields: &'a [u8],
}

/// Search-term rows are read with the same type.
pub type PackedTerms<'a> = PackedEvent<'a>;

/// The fields an event packs, borrowed from wherever it is read.
#[derive(Debug, Clone, Copy)]
pub struct EventFields<'a> {
    pub seq: u64,
    pub ts_us: i64,
    pub kind: &'a [u8],
    pub exec_id: Option<&'a [u8]>,
    pub payload: &'a [u8],
    pub hash: &'a [u8],
}

/// Fields a packed event holds, and where each is among them.
const KIND: usize = 2;
const EXEC_ID: usize = 3;
const PAYLOAD: usize = 4;
const HASH: usize = 5;

impl Packed {
    /// Empties it, keeping its buffers for the next batch.
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.rows.clear();
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The last event's seq.
    pub fn last_seq(&self) -> Option<u64> {
        self.rows.last().map(|r| r.seq)
    }

    /// Appends one event (after the last: the caller reads in seq order).
    pub fn push(&mut self, e: EventFields<'_>) {
        self.push_row(
            e.seq,
            e.ts_us,
            &[Some(e.kind), e.exec_id, Some(e.payload), Some(e.hash)],
        );
    }

    /// Appends one search-term row of event `seq`.
    pub fn push_terms(&mut self, seq: u64, ts_us: i64, kind: &[u8], t: &Terms) {
        self.push_row(
            seq,
            ts_us,
            &[
                Some(kind),
                text(&t.host),
                text(&t.method),
                text(&t.verdict),
                text(&t.url),
                text(&t.path),
                text(&t.command),
            ],
        );
    }

    /// Appends a row of `seq`, `ts_us` and `rest`.
    pub fn push_row(&mut self, seq: u64, ts_us: i64, rest: &[Option<&[u8]>]) {
        let start = self.bytes.len();
        let b = &mut self.bytes;
        b.reserve(
            24 + rest
                .iter()
                .map(|f| 4 + f.map_or(0, <[u8]>::len))
                .sum::<usize>(),
        );
        put_field(b, Some(&seq.to_be_bytes()));
        put_field(b, Some(&ts_us.to_be_bytes()));
        for field in rest {
            put_field(b, *field);
        }
        self.rows.push(Row {
            seq,
            ts_us,
            at: start..self.bytes.len(),
        });
    }

    /// Drops the rows of every event up to `seq`.
    pub fn skip_through(&mut self, seq: u64) {
        let keep = self.rows.partition_point(|r| r.seq <= seq);
        let Some(first) = self.rows.get(keep) else {
            self.clear();
            return;
        };
        let cut = first.at.start;
        self.bytes.drain(..cut);
        self.rows.drain(..keep);
        for row in &mut self.rows {
            row.at = row.at.start - cut..row.at.end - cut;
        }
    }

    /// The events, in the order they were pushed.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = PackedEvent<'_>> + '_ {
        self.rows.iter().map(|r| PackedEvent {
            seq: r.seq,
            ts_us: r.ts_us,
            fields: &self.bytes[r.at.clone()],
        })
    }
}

fn text(field: &Option<String>) -> Option<&[u8]> {
    field.as_deref().map(str::as_bytes)
}

fn put_field(b: &mut Vec<u8>, field: Option<&[u8]>) {
    match field {
        Some(bytes) => {
            // A field over 2 GiB cannot be stored by SQLite either
            // (SQLITE_MAX_LENGTH is at most 2^31 - 1).
            let len = i32::try_from(bytes.len()).unwrap_or(i32::MAX);
            b.extend_from_slice(&len.to_be_bytes());
            b.extend_from_slice(bytes);
        }
        None => b.extend_from_slice(&(-1i32).to_be_bytes()),
    }
}

impl<'a> PackedEvent<'a> {
    /// The `n`th field's bytes (None for a NULL).
    pub fn field(&self, n: usize) -> Option<&'a [u8]> {
        let mut rest = self.fields;
        for i in 0.. {
            let (len, tail) = rest.split_first_chunk::<4>()?;
            let len = i32::from_be_bytes(*len);
            let len = usize::try_from(len).ok();
            if i == n {
                return len.and_then(|l| tail.get(..l));
            }
            rest = tail.get(len.unwrap_or(0)..)?;
        }
        None
    }

    /// An event's or a term row's kind.
    pub fn kind(&self) -> &'a [u8] {
        self.field(KIND).unwrap_or_default()
    }

    /// An event's fields.
    pub fn exec_id(&self) -> Option<&'a [u8]> {
        self.field(EXEC_ID)
    }

    pub fn payload(&self) -> &'a [u8] {
        self.field(PAYLOAD).unwrap_or_default()
    }

    pub fn hash(&self) -> &'a [u8] {
        self.field(HASH).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_fields_read_back_as_they_were_pushed() {
        let mut events = ShipEvents::default();
        for (seq, exec) in [(1, Some(&b"9:1"[..])), (2, None)] {
            events.push(EventFields {
                seq,
                ts_us: -5,
                kind: b"http",
                exec_id: exec,
                payload: b"{\"kind\":\"http\"}",
                hash: &[7; 32],
            });
        }
        let got: Vec<_> = events.iter().collect();
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].seq, got[0].ts_us), (1, -5));
        assert_eq!(got[0].kind(), b"http");
        assert_eq!(got[0].exec_id(), Some(&b"9:1"[..]));
        assert_eq!(got[1].exec_id(), None);
        assert_eq!(got[1].payload(), b"{\"kind\":\"http\"}");
        assert_eq!(got[1].hash(), &[7; 32]);
        // The binary COPY layout: an int8 field is 8 bytes long.
        assert_eq!(&got[0].fields[..12], &[0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 1]);
        let mut terms = ShipTerms::default();
        let t = Terms {
            host: Some("com.example".into()),
            ..Terms::default()
        };
        terms.push_terms(3, 4, b"dns", &t);
        let row = terms.iter().next().unwrap();
        assert_eq!(
            (row.seq, row.kind(), row.field(3)),
            (3, &b"dns"[..], Some(&b"com.example"[..]))
        );
        assert_eq!(row.field(4), None);
        events.skip_through(1);
        let rest: Vec<_> = events.iter().collect();
        assert_eq!(rest.len(), 1);
        assert_eq!((rest[0].seq, rest[0].exec_id()), (2, None));
        assert_eq!(rest[0].payload(), b"{\"kind\":\"http\"}");
        events.skip_through(7);
        assert!(events.is_empty());
        assert_eq!(events.last_seq(), None);
    }
}
