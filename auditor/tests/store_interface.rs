//! The store interface: readers and verify go through `RecordStore`, so a
//! second store is checked exactly as SQLite is, and SQL is written in one
//! module only.
//!
//! The second store here holds a copy of an SQLite session's rows in
//! memory, as a central store would hold what a node shipped to it; the
//! tests then tamper with that copy the way someone with write access to
//! that store would.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use airlock_auditor::{
    AuditError, AuditStore, CheckpointRow, EventKind, EventRow, FileOp, IndexRow, RecordStore,
    Redactor, SearchQuery, SearchResults, Seq, SessionId, SessionInfo, SessionRecorder, SessionRow,
    SessionRows, SessionSummary, StoredEvent, TrustAnchor, VerifyOutcome, VerifyReport,
    VerifyingKey,
};
use airlock_test_support::audit_store::{Env, assert_tampered, dns, env, file, info};

/// A store holding a copy of one session's rows; everything but verify's
/// rows is read from the store it was copied from.
#[derive(Debug)]
struct CopiedStore {
    source: AuditStore,
    session: SessionRow,
    checkpoints: Vec<CheckpointRow>,
    indexed: bool,
    events: Vec<EventRow>,
    index: Vec<IndexRow>,
    contents: HashMap<String, Vec<u8>>,
}

impl CopiedStore {
    /// Copies every row of `id` that verify reads out of `source`.
    fn copy(source: AuditStore, id: &SessionId) -> Self {
        let mut copy = None;
        source
            .read_rows(id, &mut |rows| {
                let session = rows.session()?;
                let checkpoints = rows.checkpoints()?;
                let indexed = rows.indexed()?;
                let mut events = Vec::new();
                while let Some(e) = rows.next_event()? {
                    events.push(e);
                }
                let mut index = Vec::new();
                while let Some(r) = rows.next_index_row()? {
                    index.push(r);
                }
                let mut contents = HashMap::new();
                for e in &events {
                    let value: serde_json::Value = serde_json::from_str(&e.payload).unwrap();
                    if let Some(sha) = value.get("stored_content").and_then(|v| v.as_str()) {
                        let data = rows.content(sha)?.expect("content is stored");
                        contents.insert(sha.to_owned(), data);
                    }
                }
                copy = Some((session, checkpoints, indexed, events, index, contents));
                Ok(())
            })
            .expect("rows read");
        let (session, checkpoints, indexed, events, index, contents) = copy.expect("rows read");
        Self {
            source,
            session,
            checkpoints,
            indexed,
            events,
            index,
            contents,
        }
    }
}

/// The copy's rows, handed out in order.
struct CopiedRows<'a> {
    store: &'a CopiedStore,
    next_event: usize,
    next_index: usize,
}

impl SessionRows for CopiedRows<'_> {
    fn session(&mut self) -> Result<SessionRow, AuditError> {
        Ok(self.store.session.clone())
    }

    fn checkpoints(&mut self) -> Result<Vec<CheckpointRow>, AuditError> {
        Ok(self.store.checkpoints.clone())
    }

    fn indexed(&mut self) -> Result<bool, AuditError> {
        Ok(self.store.indexed)
    }

    fn next_event(&mut self) -> Result<Option<EventRow>, AuditError> {
        self.next_event += 1;
        Ok(self.store.events.get(self.next_event - 1).cloned())
    }

    fn next_index_row(&mut self) -> Result<Option<IndexRow>, AuditError> {
        self.next_index += 1;
        Ok(self.store.index.get(self.next_index - 1).cloned())
    }

    fn content(&mut self, sha256: &str) -> Result<Option<Vec<u8>>, AuditError> {
        Ok(self.store.contents.get(sha256).cloned())
    }
}

impl RecordStore for CopiedStore {
    fn public_key(&self) -> Option<VerifyingKey> {
        None
    }

    fn redactor(&self) -> &Redactor {
        self.source.redactor()
    }

    fn begin_session(&self, _info: SessionInfo) -> Result<SessionRecorder, AuditError> {
        Err(AuditError::ReadOnly)
    }

    fn sessions(&self) -> Result<Vec<SessionSummary>, AuditError> {
        self.source.sessions()
    }

    fn session(&self, id: &SessionId) -> Result<SessionSummary, AuditError> {
        self.source.session(id)
    }

    fn resolve_session(&self, text: &str) -> Result<SessionId, AuditError> {
        self.source.resolve_session(text)
    }

    fn events(
        &self,
        session: &SessionId,
        kinds: Option<&[EventKind]>,
    ) -> Result<Vec<StoredEvent>, AuditError> {
        self.source.events(session, kinds)
    }

    fn events_after(
        &self,
        session: &SessionId,
        after: Seq,
    ) -> Result<Vec<StoredEvent>, AuditError> {
        self.source.events_after(session, after)
    }

    fn content(&self, sha256: &str) -> Result<Option<Vec<u8>>, AuditError> {
        Ok(self.contents.get(sha256).cloned())
    }

    fn search(&self, query: &SearchQuery) -> Result<SearchResults, AuditError> {
        self.source.search(query)
    }

    fn data_version(&self) -> Result<i64, AuditError> {
        self.source.data_version()
    }

    fn read_rows(
        &self,
        _session: &SessionId,
        read: &mut dyn FnMut(&mut dyn SessionRows) -> Result<(), AuditError>,
    ) -> Result<(), AuditError> {
        read(&mut CopiedRows {
            store: self,
            next_event: 0,
            next_index: 0,
        })
    }
}

/// A finished session of 30 events (dns, and a file with content at seq
/// 15), signed at 10, 20 and 30; and the trust anchor for its key.
fn recorded(e: &Env) -> (SessionId, TrustAnchor) {
    let store = e.store();
    let rec = store.begin_session(info(&["python3", "x.py"])).unwrap();
    for i in 1..=30 {
        let event = if i == 15 {
            file("/work/notes.txt", FileOp::Create, Some(b"kept content"))
        } else {
            dns(&format!("host{i}.example.com"))
        };
        rec.record(event).unwrap();
        if i % 10 == 0 && i < 30 {
            rec.sync().unwrap();
        }
    }
    let id = rec.session_id().clone();
    rec.finish(Default::default()).unwrap();
    (id, TrustAnchor::KeyFile(e.key.clone()))
}

/// Verify over a store given as the interface only.
fn verify(store: &dyn RecordStore, id: &SessionId, trust: &TrustAnchor) -> VerifyReport {
    store.verify(id, trust).expect("verify runs")
}

#[test]
fn a_second_store_holding_the_same_rows_verifies_exactly_as_sqlite_does() {
    let e = env();
    let (id, trust) = recorded(&e);
    let sqlite = AuditStore::open_readonly(&e.db).unwrap();
    let by_sqlite = verify(&sqlite, &id, &trust);
    let copy = CopiedStore::copy(AuditStore::open_readonly(&e.db).unwrap(), &id);
    assert!(copy.indexed && !copy.index.is_empty() && copy.contents.len() == 1);
    let by_copy = verify(&copy, &id, &trust);
    assert_eq!(by_sqlite.outcome, VerifyOutcome::Intact, "{by_sqlite:#?}");
    assert_eq!(
        serde_json::to_value(&by_copy).unwrap(),
        serde_json::to_value(&by_sqlite).unwrap()
    );
}

#[test]
fn a_row_changed_deleted_or_added_in_a_second_store_is_named_as_in_sqlite() {
    let e = env();
    let (id, trust) = recorded(&e);
    let fresh = || CopiedStore::copy(AuditStore::open_readonly(&e.db).unwrap(), &id);

    // An event's payload rewritten.
    let mut s = fresh();
    s.events[6].payload = s.events[6].payload.replace("host7", "evil7");
    assert_tampered(
        &verify(&s, &id, &trust),
        7,
        "does not match its recorded hash",
    );

    // An event deleted.
    let mut s = fresh();
    s.events.remove(11);
    assert_tampered(&verify(&s, &id, &trust), 12, "seq 12 is missing");

    // An event added, as a copy of another.
    let mut s = fresh();
    let dup = s.events[4].clone();
    s.events.insert(5, dup);
    assert_tampered(&verify(&s, &id, &trust), 5, "occurs more than once");

    // The session's tail deleted.
    let mut s = fresh();
    s.events.truncate(20);
    assert_tampered(&verify(&s, &id, &trust), 21, "were deleted (truncated)");

    // The end record deleted too, to pass for a session still running.
    let mut s = fresh();
    s.events.truncate(20);
    s.session.ended_us = None;
    s.session.end_json = None;
    s.session.final_seq = None;
    assert_tampered(&verify(&s, &id, &trust), 30, "invalid signature");

    // A checkpoint's signature altered.
    let mut s = fresh();
    s.checkpoints[1].signature[0] ^= 1;
    let r = verify(&s, &id, &trust);
    assert_eq!(r.outcome, VerifyOutcome::Tampered, "{r:#?}");
    assert!(
        r.problems.iter().any(|p| p.contains("invalid signature")),
        "{r:#?}"
    );

    // The file content an event names, changed and deleted.
    let mut s = fresh();
    s.contents.values_mut().for_each(|d| d[0] ^= 1);
    assert_tampered(&verify(&s, &id, &trust), 15, "was modified");
    let mut s = fresh();
    s.contents.clear();
    assert_tampered(&verify(&s, &id, &trust), 15, "was deleted");

    // The search index row that finds an event, deleted.
    let mut s = fresh();
    s.index.retain(|r| r.seq != 9);
    assert_tampered(
        &verify(&s, &id, &trust),
        9,
        "the search index does not match",
    );
}

/// Lines that run SQL or name the SQLite crate: what must appear only
/// under `auditor/src/sqlite/`.
const SQL_MARKERS: [&str; 11] = [
    "rusqlite",
    ".prepare(",
    ".prepare_cached(",
    ".execute(",
    ".execute_batch(",
    ".query_row(",
    ".query_map(",
    ".pragma_update(",
    "SELECT ",
    "INSERT INTO",
    "CREATE TABLE",
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn sql_is_written_only_in_the_store_modules() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let sqlite = root.join("auditor/src/sqlite");
    let postgres = root.join("auditor/src/postgres");
    let mut files = Vec::new();
    for dir in ["auditor/src", "src", "console/src"] {
        rust_files(&root.join(dir), &mut files);
    }
    assert!(files.len() > 50, "the sources were found: {}", files.len());
    let mut outside = Vec::new();
    for path in files
        .iter()
        .filter(|p| !p.starts_with(&sqlite) && !p.starts_with(&postgres))
    {
        let text = std::fs::read_to_string(path).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if code.starts_with("//") {
                continue;
            }
            if SQL_MARKERS.iter().any(|m| line.contains(m)) {
                outside.push(format!("{}:{}: {}", path.display(), n + 1, code));
            }
        }
    }
    assert!(
        outside.is_empty(),
        "SQL outside auditor/src/sqlite/ and auditor/src/postgres/:\n{}",
        outside.join("\n")
    );
}
