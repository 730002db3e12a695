//! `airlock audit export --format ocsf [--follow] [--since T] [--cursor FILE]`:
//! OCSF events of every session (or one) as JSON lines, once or as they are
//! committed. The mapping and the cursor are `airlock_auditor::export::ocsf`;
//! this wires them to the output and waits for the store to change.
//!
//! Exactly once: with `--out FILE` and `--cursor`, each batch is appended
//! to FILE and synced, and only then the cursor (each session's last seq and
//! FILE's length) is saved by rename. A run killed between the two is
//! reconciled at the next start: the lines past the cursor's length are read
//! back and the cursor advanced past them, and a line cut short is cut off.
//! To standard output a line may be written before its cursor is saved and
//! is then written again after a restart: at least once, deduplicated by
//! `metadata.uid`.

use std::fs::File;
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use airlock_auditor::export::ocsf::{Cursor, OcsfStream};
use airlock_auditor::{RecordStore, SessionId};
use anyhow::{Context, Result};
use clap::Args;

use super::{DbArg, open, parse_time, usage};

/// How often a follower looks at the store's version (one cheap query).
const POLL: Duration = Duration::from_millis(200);
/// How often it reads the store anyway, for a store whose version says
/// nothing about other writers.
const REREAD: Duration = Duration::from_secs(2);

/// The options only `--format ocsf` takes.
#[derive(Debug, Args)]
pub(super) struct OcsfArgs {
    /// With --format ocsf: keep running and print new events as they are
    /// committed, of every session (or one), sessions started later included.
    #[arg(long)]
    follow: bool,
    /// With --format ocsf: only events this recent (2h, 30m) or since an
    /// RFC 3339 time.
    #[arg(long, value_name = "T")]
    since: Option<String>,
    /// With --format ocsf: where the export stands (each session's last
    /// event written), read at start and saved after each write, so that a
    /// consumer restarted after any kill goes on where it stopped; with
    /// --out FILE, exactly once (docs/ocsf.md).
    #[arg(long, value_name = "FILE")]
    cursor: Option<PathBuf>,
    /// With --format ocsf: only this session (id or unique prefix), as the
    /// SESSION argument.
    #[arg(
        long = "session",
        id = "only_session",
        value_name = "S",
        conflicts_with = "session"
    )]
    only_session: Option<String>,
}

impl OcsfArgs {
    /// The first option given that only --format ocsf takes.
    pub(super) fn given(&self) -> Option<&'static str> {
        if self.follow {
            Some("--follow")
        } else if self.since.is_some() {
            Some("--since")
        } else if self.cursor.is_some() {
            Some("--cursor")
        } else if self.only_session.is_some() {
            Some("--session")
        } else {
            None
        }
    }
}

/// Where the lines go: standard output, or a file whose length the cursor
/// keeps.
enum Sink {
    Stdout,
    File { file: File, path: PathBuf },
}

impl Sink {
    /// Writes a batch whole and makes it durable; returns the file's new
    /// length.
    fn write(&mut self, batch: &[u8]) -> std::io::Result<Option<u64>> {
        match self {
            Self::Stdout => {
                let mut out = std::io::stdout().lock();
                out.write_all(batch)?;
                out.flush()?;
                Ok(None)
            }
            Self::File { file, .. } => {
                file.write_all(batch)?;
                file.sync_data()?;
                Ok(Some(file.metadata()?.len()))
            }
        }
    }

    fn name(&self) -> String {
        match self {
            Self::Stdout => "standard output".into(),
            Self::File { path, .. } => path.display().to_string(),
        }
    }
}

pub(super) fn run(
    db: &DbArg,
    session: Option<&str>,
    out: Option<&Path>,
    args: OcsfArgs,
) -> Result<ExitCode> {
    let since_us = match args.since.as_deref().map(|t| parse_time("--since", t)) {
        Some(Err(e)) => return Ok(usage(e)),
        Some(Ok(t)) => Some(t),
        None => None,
    };
    let mut cursor = match args.cursor.as_deref().map(Cursor::load) {
        Some(Err(e)) => return Ok(usage(e)),
        Some(Ok(c)) => c,
        None => Cursor::default(),
    };
    let store = match open(db) {
        Ok(s) => s,
        Err(e) => return Ok(usage(e)),
    };
    let only: Option<SessionId> = match args.only_session.as_deref().or(session) {
        Some(text) => match store.resolve_session(text) {
            Ok(id) => Some(id),
            Err(e) => return Ok(usage(e)),
        },
        None => None,
    };
    let mut sink = match out.filter(|p| *p != Path::new("-")) {
        None => Sink::Stdout,
        Some(path) if args.cursor.is_some() => match cursor.reconcile(path) {
            Ok(file) => Sink::File {
                file,
                path: path.to_owned(),
            },
            Err(e) => return Ok(usage(e)),
        },
        Some(path) => Sink::File {
            file: File::create(path).with_context(|| {
                format!(
                    "cannot create {}; check the directory exists and is writable",
                    path.display()
                )
            })?,
            path: path.to_owned(),
        },
    };
    let mut saved = None;
    let mut stream = OcsfStream::new(&store, only, since_us);
    loop {
        let version = store.data_version()?;
        let mut batch = Vec::new();
        stream.poll(&mut cursor, &mut batch)?;
        if !batch.is_empty() {
            match sink.write(&batch) {
                Ok(len) => cursor.out_len = len.or(cursor.out_len),
                // The reader went away (`| head`): nothing more to do.
                Err(e) if e.kind() == ErrorKind::BrokenPipe => return Ok(ExitCode::SUCCESS),
                Err(e) => {
                    return Err(e).with_context(|| format!("cannot write {}", sink.name()));
                }
            }
        }
        if let Some(path) = &args.cursor
            && saved.as_ref() != Some(&cursor)
        {
            cursor.save(path)?;
            saved = Some(cursor.clone());
        }
        if !args.follow {
            return Ok(ExitCode::SUCCESS);
        }
        wait_for_change(&store, version)?;
    }
}

/// Returns once the store changed since `version`, or after [`REREAD`].
fn wait_for_change(store: &dyn RecordStore, version: i64) -> Result<()> {
    let start = Instant::now();
    while start.elapsed() < REREAD {
        std::thread::sleep(POLL);
        if store.data_version()? != version {
            break;
        }
    }
    Ok(())
}
