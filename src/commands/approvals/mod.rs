//! `airlock approvals`, `airlock approve ID` and `airlock deny ID`: a
//! person's side of `[[ask]]` rules, from any terminal of the session's
//! owner, against every running `run`, `session`, `proxy` and `sidecar`.

mod shown;

use std::collections::HashSet;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use airlock_auditor::escape;
use airlock_proxy::approvals::ApprovalId;
use airlock_proxy::approvals::shown::Shown;
use serde_json::{Value, json};

use crate::approvals::client;

/// How often `--watch` looks for new requests.
const WATCH_EVERY: Duration = Duration::from_millis(500);

#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct ListArgs {
    #[command(subcommand)]
    command: Option<ApprovalsCommand>,
    /// Only this session's requests (its id, a prefix of it, or its name).
    #[arg(long, value_name = "SESSION")]
    session: Option<String>,
    /// One JSON object per request (with --watch, one line each as they come).
    #[arg(long)]
    json: bool,
    /// Keep watching: each new request as it is held, then how it ended (decided, expired) as it happens (Ctrl-C ends).
    #[arg(long)]
    watch: bool,
}

#[derive(clap::Subcommand)]
enum ApprovalsCommand {
    /// One request whole: every header and its whole body (or its decision).
    Show(ShowArgs),
}

#[derive(clap::Args)]
struct ShowArgs {
    /// The request's id, as `airlock approvals` shows it.
    id: String,
    /// The API's JSON: `{"pending": ..}` or `{"decided": ..}`.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum ScopeArg {
    /// This request only.
    Once,
    /// Also later requests the same rule matches with the same method, host, port and path.
    Session,
}

#[derive(clap::Args)]
pub(crate) struct ApproveArgs {
    /// The request's id, as `airlock approvals` shows it.
    id: String,
    /// How far the approval reaches.
    #[arg(long, value_enum, default_value = "once")]
    scope: ScopeArg,
    /// A note for the record.
    #[arg(long, value_name = "TEXT")]
    note: Option<String>,
}

#[derive(clap::Args)]
pub(crate) struct DenyArgs {
    /// The request's id, as `airlock approvals` shows it.
    id: String,
    /// Why; the client's 403 shows it, and the record keeps it.
    #[arg(long, value_name = "TEXT")]
    note: Option<String>,
}

pub(crate) fn list(args: ListArgs) -> anyhow::Result<ExitCode> {
    if let Some(ApprovalsCommand::Show(show)) = args.command {
        return show_one(&show);
    }
    runtime()?.block_on(async {
        let mut shown = HashSet::new();
        // Watching: what is held now, to tell how each one ended.
        let mut held: HashSet<String> = HashSet::new();
        loop {
            let Some(pending) = pending_of(args.session.as_deref()).await? else {
                // Only --session can name what is not there.
                let given = args.session.as_deref().unwrap_or_default();
                eprintln!(
                    "airlock: no running session matches {given:?}; `airlock session ls` lists live sessions, and `airlock approvals` without --session what every running airlock holds"
                );
                return Ok(ExitCode::from(crate::exit::REFUSED));
            };
            let new: Vec<&Value> = pending
                .iter()
                .filter(|p| shown.insert(p["id"].as_str().unwrap_or_default().to_owned()))
                .collect();
            match (args.json, args.watch) {
                (true, false) => println!("{}", serde_json::to_string_pretty(&pending)?),
                (true, true) => new.iter().for_each(|p| println!("{p}")),
                (false, _) => new.iter().for_each(|p| print!("{}", describe(p))),
            }
            if args.watch {
                let now: HashSet<String> = pending
                    .iter()
                    .filter_map(|p| p["id"].as_str().map(str::to_owned))
                    .collect();
                for id in held.difference(&now) {
                    let ended = ended(id).await;
                    match args.json {
                        true => println!("{ended}"),
                        false => print!("{}", describe_ended(id, &ended)),
                    }
                }
                held = now;
            }
            if !args.watch {
                if pending.is_empty() && !args.json {
                    eprintln!("airlock: no request is waiting for approval");
                }
                return Ok(ExitCode::SUCCESS);
            }
            tokio::time::sleep(WATCH_EVERY).await;
        }
    })
}

/// `airlock approvals show ID`.
fn show_one(args: &ShowArgs) -> anyhow::Result<ExitCode> {
    let Some(id) = ApprovalId::parse(&args.id) else {
        eprintln!(
            "airlock: {:?} is not an approval id; copy one from `airlock approvals`",
            args.id
        );
        return Ok(ExitCode::from(crate::exit::USAGE));
    };
    let answer = match runtime()?.block_on(client::show(&id)) {
        Ok(answer) => answer,
        Err(e) => {
            eprintln!("airlock: {}", crate::one_line(&e));
            return Ok(ExitCode::from(crate::exit::REFUSED));
        }
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&answer)?);
        return Ok(ExitCode::SUCCESS);
    }
    match (&answer["pending"], &answer["decided"]) {
        (Value::Null, decided) => {
            let text =
                |key: &str| escape::text(decided[key].as_str().unwrap_or_default()).into_owned();
            let by = match decided["by"].as_str() {
                Some(by) => format!(" by {}", escape::text(by)),
                None => String::new(),
            };
            println!(
                "{}  {} {}\n  {}{by}; the request is no longer held",
                text("id"),
                text("method"),
                text("url"),
                text("outcome"),
            );
        }
        (pending, _) => print!("{}", describe(pending)),
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn approve(args: ApproveArgs) -> anyhow::Result<ExitCode> {
    let scope = match args.scope {
        ScopeArg::Once => "once",
        ScopeArg::Session => "session",
    };
    let decision = json!({ "decision": "approve", "scope": scope, "note": args.note });
    decide(&args.id, &decision)
}

pub(crate) fn deny(args: DenyArgs) -> anyhow::Result<ExitCode> {
    let decision = json!({ "decision": "deny", "note": args.note });
    decide(&args.id, &decision)
}

fn decide(id: &str, decision: &Value) -> anyhow::Result<ExitCode> {
    match runtime()?.block_on(client::decide(id, decision)) {
        Ok(decided) => {
            let outcome = decided["outcome"].as_str().unwrap_or("decided");
            let scope = match decided["scope"].as_str() {
                Some("session") => " for this session".to_owned(),
                Some(scope) => format!(" {scope}"),
                None => String::new(),
            };
            // The note, as the client's 403 (or the record) carries it.
            let note = match decision["note"].as_str() {
                Some(note) => format!("; note: {}", escape::text(note)),
                None => String::new(),
            };
            println!(
                "{outcome}{scope}: {} {} (approval {id}, by {}){note}",
                escape::text(decided["method"].as_str().unwrap_or_default()),
                escape::text(decided["url"].as_str().unwrap_or_default()),
                decided["by"].as_str().unwrap_or("you"),
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("airlock: {}", crate::one_line(&e));
            Ok(ExitCode::from(crate::exit::REFUSED))
        }
    }
}

/// How a request that is no longer held ended, as its session's API says
/// (`{"decided": ...}`), or `{"gone": ID}` when no running session knows it
/// any more (its session ended).
async fn ended(id: &str) -> Value {
    let answer = match ApprovalId::parse(id) {
        Some(id) => client::show(&id).await.ok(),
        None => None,
    };
    match answer {
        Some(answer) if !answer["decided"].is_null() => json!({ "decided": answer["decided"] }),
        _ => json!({ "gone": id }),
    }
}

/// A watcher's line for a request that is no longer held: who decided what,
/// or that it expired.
fn describe_ended(id: &str, ended: &Value) -> String {
    let decided = &ended["decided"];
    let text = |key: &str| escape::text(decided[key].as_str().unwrap_or_default()).into_owned();
    let id = escape::text(id);
    if decided.is_null() {
        return format!("{id}  no longer held: its session ended\n\n");
    }
    let scope = match decided["scope"].as_str() {
        Some("session") => " for this session",
        Some("once") => " once",
        _ => "",
    };
    let how = match (decided["outcome"].as_str(), decided["by"].as_str()) {
        (Some("expired"), _) => "expired: nobody decided in time".to_owned(),
        (Some(outcome), Some(by)) => format!("{outcome}{scope} by {}", escape::text(by)),
        (Some(outcome), None) => format!("{outcome}{scope}"),
        (None, _) => "decided".to_owned(),
    };
    let note = match decided["note"].as_str() {
        Some(note) => format!("; note: {}", escape::text(note)),
        None => String::new(),
    };
    format!(
        "{id}  {} {}\n  {how}{note}\n\n",
        text("method"),
        text("url")
    )
}

/// Every pending request, oldest first, of the sessions `session` picks;
/// None when it picks no running session.
async fn pending_of(session: Option<&str>) -> anyhow::Result<Option<Vec<Value>>> {
    // A live session's name is resolved to its id, which is what its
    // approvals socket answers with; anything else (a `run`'s or a proxy's
    // record id, or a prefix of one) is matched as given.
    let resolved = match session {
        Some(given) => Some(
            crate::session::registry::Registry::open()?
                .resolve(given)
                .await
                .unwrap_or_else(|_| given.to_owned()),
        ),
        None => None,
    };
    let session = resolved.as_deref();
    let picked: Vec<client::Listed> = client::list()
        .await?
        .into_iter()
        .filter(|l| session.is_none_or(|s| l.session == s || l.session.starts_with(s)))
        .collect();
    if session.is_some() && picked.is_empty() {
        return Ok(None);
    }
    let mut pending: Vec<Value> = picked.into_iter().flat_map(|l| l.pending).collect();
    pending.sort_by_key(|p| p["requested_at_us"].as_u64().unwrap_or_default());
    Ok(Some(pending))
}

/// A few lines a person reads before deciding. Everything the sandbox
/// chose (method, URL, headers, body) is escaped: this is a live terminal.
fn describe(p: &Value) -> String {
    let text = |key: &str| escape::text(p[key].as_str().unwrap_or_default()).into_owned();
    let id = text("id");
    let now = micros_now();
    let waited = now.saturating_sub(p["requested_at_us"].as_u64().unwrap_or(now));
    let left = p["expires_at_us"]
        .as_u64()
        .unwrap_or(now)
        .saturating_sub(now);
    let reason = match p["reason"].as_str() {
        Some(reason) => format!(": {}", escape::text(reason)),
        None => String::new(),
    };
    let approvers = match p["approvers"].as_array() {
        Some(names) if !names.is_empty() => names
            .iter()
            .filter_map(Value::as_str)
            .map(|n| escape::text(n).into_owned())
            .collect::<Vec<_>>()
            .join(", "),
        _ => "the session's owner".to_owned(),
    };
    let sender = &p["sender"];
    let sent_by = match sender["command"].as_array() {
        Some(argv) => {
            // Quoted as a shell would take it (and escaped: the sandbox
            // chose it), so that `-H content-type: application/json` reads
            // as the one argument it was.
            let argv: Vec<String> = argv
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect();
            let argv = airlock_auditor::timeline::command_line(&argv);
            let mut place = Vec::new();
            if let Some(exec) = sender["exec"].as_str() {
                place.push(format!("exec {}", escape::text(exec)));
            }
            // A step by its label (an agent's tool-call id) when it has one.
            match (sender["label"].as_str(), sender["step"].as_u64()) {
                (Some(label), _) => place.push(format!("step {}", escape::text(label))),
                (None, Some(step)) => place.push(format!("step {step}")),
                (None, None) => {}
            }
            match place.is_empty() {
                true => argv,
                false => format!("{argv} ({})", place.join(", ")),
            }
        }
        None => format!("{} (command unknown)", text("client")),
    };
    // The view model, or (from an older airlock's socket) nothing but
    // the body's size: never a silent cut.
    let shown = match serde_json::from_value::<Shown>(p["shown"].clone()) {
        Ok(shown) => shown::render(&shown, &id),
        Err(_) => format!(
            "  body: {} bytes, not shown; see it with `airlock approvals show {id} --json`\n",
            p["body_bytes"].as_u64().unwrap_or(0)
        ),
    };
    format!(
        "{id}  {} {}\n  session {}, sent by {sent_by}\n  rule {}{reason}\n  waiting {}, denied in {} unless decided; approvers: {approvers}\n{shown}  body sha256 {}\n  decide: airlock approve {id} [--scope session] | airlock deny {id} [--note TEXT]\n\n",
        text("method"),
        text("url"),
        text("session"),
        text("rule"),
        human(waited),
        human(left),
        text("body_sha256"),
    )
}

fn human(micros: u64) -> String {
    humantime::format_duration(Duration::from_secs(micros / 1_000_000)).to_string()
}

fn micros_now() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since.as_micros()).unwrap_or(u64::MAX)
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}
