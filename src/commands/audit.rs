//! `airlock audit ...`: read back, export, restore and verify what sessions
//! recorded. Thin layer over `airlock_auditor`; all logic lives there.
//!
//! Text output prints every recorded string through `escape::text` (the
//! program under audit chose most of them and must not be able to rewrite
//! the reader's terminal); `--json` output is left as data.

mod keys;
mod ocsf_export;
mod ship;
mod undo;

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use airlock_auditor::export::{cast, har, jsonl, ocsf};
use airlock_auditor::search::{LabelFilter, ScopeError, SessionScope};
use airlock_auditor::ship::ShipMark;
use airlock_auditor::{
    Access, AuditError, AuditStore, EventKind, OsText, RecordStore, SearchQuery, SessionId,
    SessionSummary, TrustAnchor, VerifyReport, escape, humanize, restore, timeline,
};
use anyhow::{Context, Result, anyhow};
use clap::{Args, Subcommand, ValueEnum};

/// Exit status for usage errors (bad arguments, unknown session), as for
/// clap's own argument errors.
use crate::exit::USAGE;

#[derive(Debug, Args)]
pub(crate) struct AuditArgs {
    #[command(subcommand)]
    cmd: AuditCommand,
}

#[derive(Debug, Args)]
pub(super) struct DbArg {
    /// Audit database [default: $XDG_DATA_HOME/airlock/audit.db or
    /// ~/.local/share/airlock/audit.db]
    #[arg(long, value_name = "FILE", env = "AIRLOCK_AUDIT_DB", global = true)]
    audit_db: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum AuditCommand {
    /// List recorded sessions, with the node that recorded each and its labels.
    Sessions {
        #[command(flatten)]
        db: DbArg,
        #[command(flatten)]
        scope: ScopeArgs,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Show one session as a chronological, process-tree-indented timeline.
    Timeline {
        /// Session id or unique prefix.
        session: String,
        #[command(flatten)]
        db: DbArg,
        /// Only these kinds (comma-separated): exec,exit,file,dns,tcp,http,output,note,resize,step_start,step_end,approval_requested,approval_decided.
        #[arg(long, value_delimiter = ',', value_parser = parse_kind)]
        kind: Vec<EventKind>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Export a session as HAR (HTTP), JSON lines (all events) or asciicast
    /// (terminal); or every session (or one) as OCSF events for a SIEM,
    /// once or following the database (docs/ocsf.md).
    Export(ExportArgs),
    /// List the files a session wrote, show what one held before and after
    /// it, restore them as they were at its end, or undo the session.
    Files {
        /// Session id or unique prefix.
        session: String,
        #[command(flatten)]
        db: DbArg,
        /// Recreate the files under DIR (absolute sandbox paths become relative to DIR).
        #[arg(long, value_name = "DIR", conflicts_with_all = ["undo", "diff"])]
        restore: Option<PathBuf>,
        /// Show what the file PATH (its path in the sandbox) held before the
        /// session and what the session left there, as a unified diff.
        #[arg(long, value_name = "PATH", conflicts_with = "undo")]
        diff: Option<std::ffi::OsString>,
        /// Put the workspace (and --rw grants) back as they were before the
        /// session, from its verified record. Refuses, naming each file,
        /// where the disk changed since the session ended or an original
        /// cannot be restored.
        #[arg(long)]
        undo: bool,
        /// With --undo: go ahead anyway, overwriting later changes and
        /// leaving unrestorable files as the session left them.
        #[arg(long, requires = "undo")]
        force: bool,
        /// With --undo: put the workspace back in DIR (a copy of it) instead
        /// of where the session had it.
        #[arg(long, value_name = "DIR", requires = "undo")]
        to: Option<PathBuf>,
        /// With --undo or --restore: the key the record must verify with
        /// [default: the local audit key]. Not an error without them: it
        /// is often exported (AIRLOCK_AUDIT_KEY) for every command.
        #[arg(long, value_name = "FILE", env = "AIRLOCK_AUDIT_KEY")]
        audit_key: Option<PathBuf>,
    },
    /// Find events across every session: which sessions talked to a host,
    /// wrote a file or ran a command. Exit 0 when something matched, 1 when
    /// nothing did.
    Search(SearchArgs),
    /// Open the forensic console: a read-only web UI on loopback, at a URL
    /// with a random access token (docs/console.md).
    Serve(super::console::ServeArgs),
    /// Copy local records into a central store (postgres://…), once or
    /// following them as they grow; what it already holds is not copied twice.
    Ship(ship::ShipArgs),
    /// The node keys a central store (--audit-db postgres://…) trusts:
    /// enroll, list and revoke them.
    Keys(keys::KeysArgs),
    /// Check that sessions were not altered: exit 0 only when intact.
    Verify {
        /// Session id or unique prefix.
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        session: Option<String>,
        /// Verify every session.
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        db: DbArg,
        /// Trusted key: the audit key file or a public key file [default: the
        /// local audit key, if it exists; on a central store, its enrolled
        /// node keys (`audit keys`), which this narrows to one].
        #[arg(long, value_name = "FILE", env = "AIRLOCK_AUDIT_KEY")]
        audit_key: Option<PathBuf>,
        /// Print JSON reports.
        #[arg(long)]
        json: bool,
    },
}

/// `airlock audit search`: every filter given must match.
#[derive(Debug, Args)]
struct SearchArgs {
    #[command(flatten)]
    db: DbArg,
    /// A host (case-insensitive), or *.DOMAIN for every name under DOMAIN:
    /// DNS queries, connections, HTTP requests, approvals and MCP calls.
    #[arg(long, value_name = "H")]
    host: Option<String>,
    /// Text an HTTP request's URL contains.
    #[arg(long, value_name = "TEXT")]
    url: Option<String>,
    /// An HTTP method, e.g. POST, or an MCP message's method, e.g. tools/call.
    #[arg(long, value_name = "M")]
    method: Option<String>,
    /// How a request, connection or DNS query was decided.
    #[arg(long, value_enum)]
    verdict: Option<Verdict>,
    /// A file path inside the sandbox (a relative one is taken from the current directory, as the workspace is mounted at its own path), DIR/ for every file under DIR, or a bare NAME for every file of that name. Any bytes, as the file was named, or as the timeline prints the name.
    #[arg(long, value_name = "PATH")]
    file: Option<std::ffi::OsString>,
    /// Text an executed command line (or the program's path) contains.
    #[arg(long, value_name = "TEXT")]
    command: Option<String>,
    /// An MCP tool's name, exactly as the server spells it: every call of
    /// it (`mcp_call` events), whatever its verdict.
    #[arg(long, value_name = "NAME")]
    tool: Option<String>,
    /// Only events this recent (e.g. 2h, 30m), or since an RFC 3339 time.
    #[arg(long, value_name = "DURATION")]
    since: Option<String>,
    /// Only events up to this RFC 3339 time (e.g. 2026-11-25T18:00:00Z), or this long ago.
    #[arg(long, value_name = "TIME")]
    until: Option<String>,
    /// Only this session (id or unique prefix).
    #[arg(long, value_name = "S")]
    session: Option<String>,
    #[command(flatten)]
    scope: ScopeArgs,
    /// One JSON object per line: session, seq, ts, exec_id, kind, event.
    #[arg(long)]
    json: bool,
}

/// Which sessions, by who ran them: `audit sessions` and `audit search`.
#[derive(Debug, Args)]
struct ScopeArgs {
    /// Only sessions labelled KEY=VALUE when recorded (repeatable: every one must hold; the value is everything after the first '=', matched exactly).
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label_filter)]
    labels: Vec<LabelFilter>,
    /// Only sessions recorded on this node (its host name, as `airlock audit sessions` shows it).
    #[arg(long, value_name = "NAME")]
    node: Option<String>,
}

impl ScopeArgs {
    fn scope(self) -> Result<SessionScope, ScopeError> {
        let scope = SessionScope {
            labels: self.labels,
            node: self.node,
        };
        scope.check().map(|()| scope)
    }
}

fn parse_label_filter(text: &str) -> Result<LabelFilter, ScopeError> {
    text.parse()
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Verdict {
    Allow,
    Deny,
    Report,
}

/// `airlock audit export`.
#[derive(Debug, Args)]
struct ExportArgs {
    /// Session id or unique prefix (with --format ocsf: every session when left out).
    session: Option<String>,
    #[command(flatten)]
    db: DbArg,
    #[arg(long, value_enum)]
    format: ExportFormat,
    /// Output file ("-" for standard output; --format ocsf's default).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    #[command(flatten)]
    ocsf: ocsf_export::OcsfArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ExportFormat {
    Har,
    Jsonl,
    Cast,
    /// OCSF 1.8 events, one JSON object per line (docs/ocsf.md).
    Ocsf,
}

fn parse_kind(text: &str) -> Result<EventKind, String> {
    EventKind::parse(text).ok_or_else(|| {
        let names: Vec<&str> = EventKind::ALL.iter().map(|k| k.as_str()).collect();
        format!(
            "unknown event kind {text:?}; use one of {}",
            names.join(",")
        )
    })
}

pub(super) fn db_path(db: &DbArg) -> Result<PathBuf> {
    match &db.audit_db {
        Some(p) => Ok(p.clone()),
        None => crate::paths::default_audit_db().map_err(|_| {
            anyhow!("cannot locate the audit database: HOME is not set; pass --audit-db FILE")
        }),
    }
}

fn open(db: &DbArg) -> Result<AuditStore> {
    let path = db_path(db)?;
    Ok(airlock_auditor::open_store(&path, Access::ReadOnly)?)
}

/// `--file` as the record spells paths: a relative path with a directory
/// in it (`./notes.txt`, `src/main.rs`, `../x/`) is taken from the current
/// directory, as every CLI takes it, since the workspace is mounted at its
/// own path; `.` and `..` are resolved by name, as the sandbox saw them. A
/// bare name stays one: it matches a file of that name anywhere.
fn sandbox_path(given: &std::ffi::OsStr) -> OsText {
    use std::os::unix::ffi::OsStrExt;
    let bytes = given.as_bytes();
    if bytes.starts_with(b"/") || !bytes.contains(&b'/') {
        return OsText::from(given);
    }
    let Ok(cwd) = std::env::current_dir() else {
        return OsText::from(given);
    };
    let mut parts: Vec<&[u8]> = cwd
        .components()
        .filter_map(|c| match c {
            std::path::Component::Normal(p) => Some(p.as_bytes()),
            _ => None,
        })
        .collect();
    for part in bytes.split(|&b| b == b'/') {
        match part {
            b"" | b"." => {}
            b".." => {
                parts.pop();
            }
            name => parts.push(name),
        }
    }
    let dir: &[u8] = if bytes.ends_with(b"/") { b"/" } else { b"" };
    OsText::from([&b"/"[..], &parts.join(&b'/'), dir].concat())
}

/// Prints a usage-type error and returns exit status 2.
fn usage(err: impl std::fmt::Display) -> ExitCode {
    eprintln!("airlock: {err}");
    ExitCode::from(USAGE)
}

pub(crate) fn run(args: AuditArgs) -> Result<ExitCode> {
    match args.cmd {
        AuditCommand::Sessions { db, scope, json } => {
            let scope = match scope.scope() {
                Ok(s) => s,
                Err(e) => return Ok(usage(e)),
            };
            sessions(&open(&db)?, &scope, json)
        }
        AuditCommand::Timeline {
            session,
            db,
            kind,
            json,
        } => {
            let store = open(&db)?;
            let id = match store.resolve_session(&session) {
                Ok(id) => id,
                Err(e) => return Ok(usage(e)),
            };
            let summary = store.session(&id)?;
            let events = store.events(&id, None)?;
            let filter = (!kind.is_empty()).then_some(kind.as_slice());
            let mut out = std::io::stdout().lock();
            if json {
                serde_json::to_writer_pretty(
                    &mut out,
                    &timeline::render_json(&summary, &events, filter),
                )?;
                writeln!(out)?;
            } else {
                out.write_all(timeline::render_text(&summary, &events, filter).as_bytes())?;
            }
            Ok(ExitCode::SUCCESS)
        }
        AuditCommand::Export(args) => export_command(args),
        AuditCommand::Files {
            session,
            db,
            restore,
            diff,
            undo,
            force,
            to,
            audit_key,
        } => {
            let store = open(&db)?;
            let id = match store.resolve_session(&session) {
                Ok(id) => id,
                Err(e) => return Ok(usage(e)),
            };
            match (restore, diff) {
                _ if undo => undo::run(&store, &id, audit_key, force, to.as_deref()),
                (Some(dir), _) => {
                    let location = db_path(&db)?;
                    match trust_for(&location, audit_key) {
                        Ok(TrustAnchor::None) if !is_central(&location) => {
                            eprintln!("airlock: warning: {NO_TRUSTED_KEY}");
                            restore_files(&store, &id, &dir, &TrustAnchor::None)
                        }
                        Ok(trust) => restore_files(&store, &id, &dir, &trust),
                        Err(e) => Ok(usage(e)),
                    }
                }
                (None, Some(path)) => undo::diff(&store, &id, &OsText::from(path)),
                (None, None) => list_files(&store, &id),
            }
        }
        AuditCommand::Verify {
            session,
            all,
            db,
            audit_key,
            json,
        } => verify(&db, session.as_deref(), all, audit_key, json),
        AuditCommand::Search(args) => search(args),
        AuditCommand::Ship(args) => ship::run(args),
        AuditCommand::Serve(args) => super::console::serve(args),
        AuditCommand::Keys(args) => keys::run(args),
    }
}

/// A point in time given as an RFC 3339 time or as a duration back from now.
fn parse_time(flag: &str, text: &str) -> Result<i64, String> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let now = i64::try_from(now.as_micros()).unwrap_or(i64::MAX);
    humanize::time_bound(text, now).ok_or_else(|| {
        format!(
            "invalid {flag} {text:?}: give a duration back from now (2h, 30m, 1d) or an RFC 3339 time (2026-11-25T18:00:00Z)"
        )
    })
}

fn search(args: SearchArgs) -> Result<ExitCode> {
    let since_us = match args.since.as_deref().map(|t| parse_time("--since", t)) {
        Some(Err(e)) => return Ok(usage(e)),
        Some(Ok(t)) => Some(t),
        None => None,
    };
    let until_us = match args.until.as_deref().map(|t| parse_time("--until", t)) {
        Some(Err(e)) => return Ok(usage(e)),
        Some(Ok(t)) => Some(t),
        None => None,
    };
    let query = SearchQuery {
        host: args.host,
        url: args.url,
        method: args.method,
        verdict: args.verdict.map(|v| match v {
            Verdict::Allow => "allow".to_owned(),
            Verdict::Deny => "deny".to_owned(),
            Verdict::Report => "report".to_owned(),
        }),
        file: args
            .file
            .as_deref()
            .map(|f| sandbox_path(f).text_or_escaped().into_owned()),
        command: args.command,
        tool: args.tool,
        since_us,
        until_us,
        session: args.session,
        sessions: None,
    };
    if let Err(e) = query.check() {
        return Ok(usage(e));
    }
    let scope = match args.scope.scope() {
        Ok(s) => s,
        Err(e) => return Ok(usage(e)),
    };
    let store = match open(&args.db) {
        Ok(s) => s,
        Err(e) => return Ok(usage(e)),
    };
    let results = match scope.search(&store, &query) {
        Ok(r) => r,
        Err(
            e @ (AuditError::UnknownSession(_)
            | AuditError::AmbiguousSession { .. }
            | AuditError::BadSessionId(_)
            | AuditError::Query(_)),
        ) => return Ok(usage(e)),
        Err(e) => return Err(e.into()),
    };
    // On stderr, so that --json output stays one object per line.
    if results.scanned_sessions > 0 {
        eprintln!(
            "note: {} session(s) recorded before the search index existed were scanned rather than looked up",
            results.scanned_sessions
        );
    }
    let mut out = std::io::stdout().lock();
    for hit in &results.hits {
        let ev = &hit.event;
        if args.json {
            serde_json::to_writer(
                &mut out,
                &serde_json::json!({
                    "session": hit.session,
                    "seq": ev.seq,
                    "ts": humanize::rfc3339(ev.ts_us),
                    "exec_id": ev.exec_id,
                    "kind": ev.kind.as_str(),
                    "event": ev.event,
                }),
            )?;
            writeln!(out)?;
        } else {
            let exec = ev
                .exec_id
                .as_ref()
                .map_or_else(|| "-".to_owned(), |e| escape::text(e.as_str()).into_owned());
            writeln!(
                out,
                "{}  {}  exec {:<12}  {}",
                hit.session.as_str().chars().take(14).collect::<String>(),
                humanize::short_time(ev.ts_us),
                exec,
                timeline::describe(&ev.event)
            )?;
        }
    }
    Ok(if results.hits.is_empty() {
        ExitCode::from(crate::exit::REFUSED)
    } else {
        ExitCode::SUCCESS
    })
}

/// How far the central store has a session: "all", "up to event N", or
/// "-" when nothing of it was shipped from here.
fn shipped_text(mark: Option<&ShipMark>, events: u64) -> String {
    match mark {
        None => "-".into(),
        Some(m) if m.shipped.ended => "all".into(),
        Some(m) => match m.shipped.up_to {
            Some(seq) if seq.get() >= events => format!("up to {seq} (live)"),
            Some(seq) => format!("up to event {seq}"),
            None => "none yet".into(),
        },
    }
}

fn sessions(store: &dyn RecordStore, scope: &SessionScope, json: bool) -> Result<ExitCode> {
    let mut list = store.sessions()?;
    list.retain(|s| scope.admits(&s.info));
    let marks = store.ship_marks()?;
    let mut out = std::io::stdout().lock();
    if json {
        let items: Vec<serde_json::Value> = list
            .iter()
            .map(|s| {
                serde_json::json!({
                    "id": s.id,
                    "started": humanize::rfc3339(s.started_us),
                    "ended": s.ended_us.map(humanize::rfc3339),
                    "duration_s": s.ended_us.map(|e| (e.saturating_sub(s.started_us)) as f64 / 1e6),
                    "exit_status": s.end.as_ref().and_then(|e| e.exit_status),
                    "signal": s.end.as_ref().and_then(|e| e.signal),
                    "end_reason": s.end.as_ref().and_then(|e| e.reason.clone()),
                    "command": s.info.command,
                    "mode": s.info.mode,
                    "isolation": s.info.isolation,
                    "policy": s.info.policy_name,
                    "policy_sha256": s.info.policy_sha256(),
                    "policy_text": s.info.policy_text,
                    "limits": s.info.limits,
                    "airlock_version": s.info.airlock_version,
                    "host": s.info.host,
                    "labels": s.info.labels,
                    "events": s.events,
                    "steps": s.steps,
                    "key_fingerprint": s.key_fingerprint,
                    "shipped": marks.get(&s.id).map(|m| serde_json::json!({
                        "up_to": m.shipped.up_to,
                        "ended": m.shipped.ended,
                        "at": humanize::rfc3339(m.at_us),
                    })),
                })
            })
            .collect();
        serde_json::to_writer_pretty(&mut out, &items)?;
        writeln!(out)?;
        return Ok(ExitCode::SUCCESS);
    }
    // The node and labels columns as wide as the longest shown (up to a
    // cap, past which one long value pushes only its own line out).
    let nodes: Vec<String> = list.iter().map(|s| node_text(&s.info.host)).collect();
    let labels: Vec<String> = list.iter().map(|s| labels_text(&s.info.labels)).collect();
    let width = |texts: &[String], header: &str, cap: usize| {
        texts
            .iter()
            .map(|t| t.chars().count())
            .chain([header.len()])
            .max()
            .unwrap_or(0)
            .min(cap)
    };
    let (node_w, labels_w) = (width(&nodes, "NODE", 24), width(&labels, "LABELS", 48));
    let exits: Vec<String> = list.iter().map(exit_text).collect();
    let exit_w = width(&exits, "EXIT", EXIT_WIDTH);
    // Shipped from here (`--audit-ship`): how far the central store has
    // each session; a column only where something was shipped.
    let shipped: Vec<String> = list
        .iter()
        .map(|s| shipped_text(marks.get(&s.id), s.events))
        .collect();
    let shipped_w = match marks.is_empty() {
        true => 0,
        false => width(&shipped, "SHIPPED", 24) + 2,
    };
    writeln!(
        out,
        "{:<14} {:<19} {:>9} {:<exit_w$} {:>7}{:<shipped_w$}  {:<10}  {:<node_w$}  {:<labels_w$}  COMMAND",
        "ID",
        "START (UTC)",
        "DURATION",
        "EXIT",
        "EVENTS",
        if marks.is_empty() { "" } else { "  SHIPPED" },
        "ISOLATION",
        "NODE",
        "LABELS"
    )?;
    let rows = list
        .iter()
        .zip(&exits)
        .zip(&nodes)
        .zip(&labels)
        .zip(&shipped);
    for ((((s, exit), node), labels), shipped) in rows {
        let duration = match s.ended_us {
            Some(e) if s.end.is_some() => humanize::duration(e.saturating_sub(s.started_us)),
            _ => "-".into(),
        };
        writeln!(
            out,
            "{:<14} {:<19} {:>9} {:<exit_w$} {:>7}{:<shipped_w$}  {:<10}  {:<node_w$}  {:<labels_w$}  {}",
            s.id.as_str().chars().take(14).collect::<String>(),
            humanize::short_time(s.started_us),
            duration,
            exit,
            s.events,
            match shipped_w {
                0 => String::new(),
                _ => format!("  {shipped}"),
            },
            s.info.isolation.as_str(),
            node,
            labels,
            timeline::session_title(s, store.first_step_command(s)?.as_deref())
        )?;
    }
    if list.is_empty() && !scope.is_everything() {
        // On stderr: the table stays a table.
        eprintln!("note: no recorded session matches {}", scope_text(scope));
    }
    Ok(ExitCode::SUCCESS)
}

/// The most the EXIT column holds: an exit status or a signal always fits,
/// and a reason Airlock gave for ending a session (an error's whole chain,
/// for one) is cut here, so one session cannot push every column after it.
/// Its timeline (`audit timeline`) has it whole.
const EXIT_WIDTH: usize = 24;

/// How a session ended as the table shows it, at most [`EXIT_WIDTH`]
/// characters.
fn exit_text(s: &SessionSummary) -> String {
    let Some(end) = s.end.as_ref().filter(|_| s.ended_us.is_some()) else {
        return "unfinished".to_owned();
    };
    let text = escape::text(&end.describe()).into_owned();
    if text.chars().count() <= EXIT_WIDTH {
        return text;
    }
    let kept: String = text.chars().take(EXIT_WIDTH - 1).collect();
    format!("{kept}…")
}

/// A session's node as the table shows it: `-` when none was recorded.
fn node_text(host: &str) -> String {
    if host.is_empty() {
        "-".to_owned()
    } else {
        escape::text(host).into_owned()
    }
}

/// A session's labels as the table shows them, `key=value` by key, comma
/// separated: `-` for none (so for every session recorded before labels).
fn labels_text(labels: &std::collections::BTreeMap<String, String>) -> String {
    if labels.is_empty() {
        return "-".to_owned();
    }
    let pairs: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{}={}", escape::text(k), escape::text(v)))
        .collect();
    pairs.join(",")
}

/// The filters as they were given, for a note that nothing matched.
fn scope_text(scope: &SessionScope) -> String {
    let mut parts: Vec<String> = scope
        .labels
        .iter()
        .map(|l| format!("--label {}", escape::text(&l.to_string())))
        .collect();
    if let Some(node) = &scope.node {
        parts.push(format!("--node {}", escape::text(node)));
    }
    parts.join(" ")
}

fn export_command(args: ExportArgs) -> Result<ExitCode> {
    let ExportArgs {
        session,
        db,
        format,
        out,
        ocsf,
    } = args;
    if format == ExportFormat::Ocsf {
        return ocsf_export::run(&db, session.as_deref(), out.as_deref(), ocsf);
    }
    if let Some(flag) = ocsf.given() {
        return Ok(usage(format!(
            "{flag} works with --format ocsf only; drop it, or export OCSF events"
        )));
    }
    let Some(session) = session else {
        return Ok(usage(
            "give the session to export (an id or unique prefix, as `airlock audit sessions` lists them)",
        ));
    };
    let Some(out) = out else {
        return Ok(usage(
            "give where to write the export: --out FILE, or --out - for standard output",
        ));
    };
    let store = open(&db)?;
    let id = match store.resolve_session(&session) {
        Ok(id) => id,
        Err(e) => return Ok(usage(e)),
    };
    export(&store, &id, format, &out)?;
    Ok(ExitCode::SUCCESS)
}

fn export(store: &dyn RecordStore, id: &SessionId, format: ExportFormat, out: &Path) -> Result<()> {
    let summary = store.session(id)?;
    let events = store.events(id, None)?;
    let mut sink: Box<dyn Write> = if out == Path::new("-") {
        Box::new(std::io::stdout().lock())
    } else {
        let f = File::create(out).with_context(|| {
            format!(
                "cannot create {}; check the directory exists and is writable",
                out.display()
            )
        })?;
        Box::new(BufWriter::new(f))
    };
    match format {
        ExportFormat::Har => har::write(&summary, &events, &mut sink)?,
        ExportFormat::Jsonl => jsonl::write(id, &events, &mut sink)?,
        ExportFormat::Cast => cast::write(&summary, &events, &mut sink)?,
        ExportFormat::Ocsf => ocsf::write(&summary, &events, &mut sink)?,
    }
    sink.flush()
        .with_context(|| format!("cannot write {}", out.display()))?;
    Ok(())
}

fn list_files(store: &dyn RecordStore, id: &SessionId) -> Result<ExitCode> {
    let events = store.events(id, Some(&[EventKind::File]))?;
    let mut out = std::io::stdout().lock();
    for ev in &events {
        writeln!(out, "#{:<6} {}", ev.seq, timeline::describe(&ev.event))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn restore_files(
    store: &dyn RecordStore,
    id: &SessionId,
    dir: &Path,
    trust: &TrustAnchor,
) -> Result<ExitCode> {
    let check = store.verify(id, trust)?;
    if !check.is_intact() {
        eprintln!("airlock: warning: {}", check.summary());
    }
    let report = restore::restore(store, id, dir)?;
    let mut out = std::io::stdout().lock();
    for (path, size) in &report.restored {
        writeln!(
            out,
            "restored   {} ({})",
            path.escaped(),
            humanize::size(*size)
        )?;
    }
    for (path, sha, size) in &report.hash_only {
        let why = match report.over_budget.contains(path) {
            true => "hash only (over the budget): the session's --audit-max-session was spent",
            false => "content not captured or over the size cap",
        };
        writeln!(
            out,
            "hash only  {} ({}, sha256 {}): {why}",
            path.escaped(),
            size.map_or("size unknown".into(), humanize::size),
            escape::text(sha.as_deref().unwrap_or("unknown"))
        )?;
    }
    for (path, name) in &report.xattrs {
        writeln!(out, "xattr      {} {}", path.escaped(), name.escaped())?;
    }
    for (path, name, why) in &report.xattrs_refused {
        writeln!(
            out,
            "refused    {} {}: {}",
            path.escaped(),
            name.escaped(),
            escape::text(why)
        )?;
    }
    for path in &report.deleted {
        writeln!(out, "deleted    {}", path.escaped())?;
    }
    for (path, why) in &report.refused {
        writeln!(out, "refused    {}: {}", path.escaped(), escape::text(why))?;
    }
    writeln!(
        out,
        "{} file(s) restored under {}",
        report.restored.len(),
        dir.display()
    )?;
    Ok(ExitCode::SUCCESS)
}

/// Whether `--audit-db` names a central store (`postgres://…`).
pub(super) fn is_central(db: &Path) -> bool {
    db.to_str()
        .is_some_and(airlock_auditor::postgres::is_postgres_url)
}

/// Said when a local record is read with no key to check its signatures.
const NO_TRUSTED_KEY: &str = "no trusted key (no --audit-key and no local audit key): checking consistency only, a re-signed log would pass";

/// The trust anchor for the store at `db`: a central store trusts its
/// enrolled node keys, so there only an explicit key counts (it narrows
/// them to that one), never this machine's own; a local record trusts
/// [`default_trust`].
pub(super) fn trust_for(db: &Path, explicit: Option<PathBuf>) -> Result<TrustAnchor> {
    if is_central(db) && explicit.is_none() {
        return Ok(TrustAnchor::None);
    }
    default_trust(explicit)
}

/// The explicit key, else the local audit key if there is one.
pub(super) fn default_trust(explicit: Option<PathBuf>) -> Result<TrustAnchor> {
    if let Some(p) = explicit {
        // Fail early with a clear message rather than per session.
        airlock_auditor::load_public_key(&p)?;
        return Ok(TrustAnchor::KeyFile(p));
    }
    Ok(match crate::paths::default_audit_key() {
        Ok(p) if p.exists() => TrustAnchor::KeyFile(p),
        _ => TrustAnchor::None,
    })
}

fn verify(
    db: &DbArg,
    session: Option<&str>,
    all: bool,
    audit_key: Option<PathBuf>,
    json: bool,
) -> Result<ExitCode> {
    let store = match open(db) {
        Ok(s) => s,
        Err(e) => return Ok(usage(e)),
    };
    let location = db_path(db)?;
    let trust = match trust_for(&location, audit_key) {
        Ok(t) => t,
        Err(e) => return Ok(usage(e)),
    };
    if matches!(trust, TrustAnchor::None) && !json && !is_central(&location) {
        eprintln!("warning: {NO_TRUSTED_KEY}");
    }
    let ids: Vec<SessionId> = if all {
        store.sessions()?.into_iter().map(|s| s.id).collect()
    } else {
        match store.resolve_session(session.unwrap_or_default()) {
            Ok(id) => vec![id],
            Err(e) => return Ok(usage(e)),
        }
    };
    let mut reports: Vec<VerifyReport> = Vec::with_capacity(ids.len());
    for id in &ids {
        reports.push(store.verify(id, &trust)?);
    }
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, &reports)?;
        writeln!(out)?;
    } else {
        for r in &reports {
            writeln!(out, "{}", r.summary())?;
            for p in r.problems.iter().skip(1) {
                writeln!(out, "    also: {p}")?;
            }
        }
    }
    Ok(if reports.iter().all(|r| r.is_intact()) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(crate::exit::REFUSED)
    })
}
