//! Where a resumable OCSF export stands: per session, the seq of the last
//! event written, and the length of the output file once those lines were
//! in it. Saved by writing a new file and renaming it over the old one, so
//! a reader killed at any point finds the old cursor or the new one whole.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{Seq, SessionId};

/// Why a cursor could not be read or written, or an output file checked
/// against it.
#[derive(Debug, thiserror::Error)]
pub enum CursorError {
    #[error("cannot read cursor {path}: {source}; check the path, or give a new --cursor FILE")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "cursor {path} is not an airlock OCSF cursor ({source}); give another --cursor FILE, or remove it to export from the beginning"
    )]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("cannot save cursor {path}: {source}; check the directory is writable")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "cannot check {path} against the cursor: {source}; check the file is readable and writable"
    )]
    Output {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Per session, the last seq written; and the output file's length after
/// the lines written up to them (when the output is a file).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    #[serde(default)]
    pub sessions: BTreeMap<SessionId, Seq>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out_len: Option<u64>,
}

impl Cursor {
    /// The cursor saved at `path`, or an empty one when there is none yet.
    pub fn load(path: &Path) -> Result<Self, CursorError> {
        let text = match std::fs::read(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(source) => {
                return Err(CursorError::Read {
                    path: path.to_owned(),
                    source,
                });
            }
        };
        serde_json::from_slice(&text).map_err(|source| CursorError::Parse {
            path: path.to_owned(),
            source,
        })
    }

    /// Saves the cursor at `path`: to a temporary file beside it, synced,
    /// then renamed over it (and the directory synced), so that it is
    /// never seen half written.
    pub fn save(&self, path: &Path) -> Result<(), CursorError> {
        let err = |source| CursorError::Write {
            path: path.to_owned(),
            source,
        };
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let mut name = path.file_name().unwrap_or_default().to_owned();
        name.push(".tmp");
        let tmp = dir.join(name);
        let mut f = File::create(&tmp).map_err(err)?;
        let text = serde_json::to_vec(self).map_err(|e| err(std::io::Error::other(e)))?;
        f.write_all(&text).map_err(err)?;
        f.sync_all().map_err(err)?;
        std::fs::rename(&tmp, path).map_err(err)?;
        File::open(dir).and_then(|d| d.sync_all()).map_err(err)?;
        Ok(())
    }

    /// The last seq written of `session` (0: none).
    pub fn last(&self, session: &SessionId) -> Seq {
        self.sessions.get(session).copied().unwrap_or(Seq(0))
    }

    /// Records that `seq` of `session` is written.
    pub fn advance(&mut self, session: &SessionId, seq: Seq) {
        let last = self.sessions.entry(session.clone()).or_insert(Seq(0));
        *last = (*last).max(seq);
    }

    /// Brings the cursor level with the output file it was saved with:
    /// lines written after the cursor was last saved (a consumer killed
    /// between the two) are read back, and the cursor advanced past the
    /// events they hold, so they are not written again; a line cut short
    /// by the kill is cut off. A file shorter than the cursor says (rotated
    /// away) is appended to as it is. Returns the file, open for appending.
    pub fn reconcile(&mut self, out: &Path) -> Result<File, CursorError> {
        let err = |source| CursorError::Output {
            path: out.to_owned(),
            source,
        };
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(out)
            .map_err(err)?;
        let len = file.metadata().map_err(err)?.len();
        let from = self.out_len.unwrap_or(0);
        if len > from {
            file.seek(SeekFrom::Start(from)).map_err(err)?;
            let mut tail = Vec::new();
            file.read_to_end(&mut tail).map_err(err)?;
            let whole = tail.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            for line in tail[..whole].split(|&b| b == b'\n') {
                if let Some((session, seq)) = written(line) {
                    self.advance(&session, seq);
                }
            }
            if whole < tail.len() {
                file.set_len(from + whole as u64).map_err(err)?;
            }
        }
        self.out_len = Some(file.metadata().map_err(err)?.len());
        Ok(file)
    }
}

/// The session and seq of an OCSF line airlock wrote.
fn written(line: &[u8]) -> Option<(SessionId, Seq)> {
    let value: serde_json::Value = serde_json::from_slice(line).ok()?;
    let airlock = value.get("unmapped")?.get("airlock")?;
    let session = airlock.get("session")?.as_str()?;
    let seq = airlock.get("seq")?.as_u64()?;
    Some((SessionId::from_stored(session.to_owned()), Seq(seq)))
}
