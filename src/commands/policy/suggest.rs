//! `airlock policy suggest SESSION...` and `--from-events FILE`: write a
//! policy that allows what recorded traffic did and denies the rest. This
//! file only reads (the record opened read-only, or a JSON-lines events
//! file); the shaping is `airlock_policy::Draft`'s.

use airlock_auditor::{DnsQuery, HttpExchange, McpCall, TcpConnection};
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use airlock_auditor::{AuditEvent, EventKind, collapse_exchanges};
use airlock_policy::{
    ConnectionDecision, DefaultAction, Draft, Host, NotSuggested, Policy, RequestInfo, Scheme,
    Tunnel,
};
use anyhow::{Context, bail};
use serde_json::Value;

use super::recorded::Recorded;
use super::replay::{address_of, asks_websocket};
use super::request::Target;

#[derive(Debug, clap::Args)]
pub(crate) struct SuggestArgs {
    #[command(flatten)]
    recorded: Recorded,
    /// Read a JSON-lines events file (`airlock proxy --events`, `airlock sidecar --events`) instead of the record.
    #[arg(long, value_name = "FILE")]
    from_events: Option<PathBuf>,
    /// Write the policy here instead of to stdout.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
}

pub(super) fn run(args: SuggestArgs) -> anyhow::Result<ExitCode> {
    if args.from_events.is_some() && args.recorded.given() {
        anyhow::bail!(
            "--from-events reads an events file, not the record: drop the sessions, --since, --label and --node, or drop --from-events"
        );
    }
    let mut draft = Draft::new();
    match &args.from_events {
        Some(file) => from_events(&mut draft, file)?,
        None => from_record(&mut draft, &args)?,
    }
    let text = draft.render();
    match &args.out {
        Some(path) => std::fs::write(path, &text)
            .with_context(|| format!("writing {}; check the directory exists", path.display()))?,
        None => print!("{text}"),
    }
    Ok(ExitCode::SUCCESS)
}

fn from_record(draft: &mut Draft, args: &SuggestArgs) -> anyhow::Result<()> {
    let chosen = args.recorded.open()?;
    let (store, ids) = (&chosen.store, &chosen.ids);
    let names: Vec<String> = ids.iter().map(ToString::to_string).collect();
    draft.note(&format!(
        "From session{} {}.",
        plural(names.len()),
        names.join(", ")
    ));
    for id in ids {
        let summary = store
            .session(id)
            .with_context(|| format!("reading session {id}"))?;
        // The policy the session ran under: its credentials' sources, and
        // how it handled connections that carried no HTTP.
        let recorded = Policy::parse(&summary.info.policy_name, &summary.info.policy_text).ok();
        if let Some(policy) = &recorded {
            for credential in policy.credentials() {
                draft.credential(credential);
            }
        }
        let events = chosen.within(
            store
                .events(
                    id,
                    Some(&[
                        EventKind::Dns,
                        EventKind::Tcp,
                        EventKind::Http,
                        EventKind::McpCall,
                    ]),
                )
                .with_context(|| format!("reading session {id}"))?,
        );
        read_session(draft, &collapse_exchanges(&events), recorded.as_ref());
    }
    Ok(())
}

/// One session's records into the draft: requests first, so a connection
/// is known to have carried HTTP before it is looked at. Any request on a
/// host and port, refused or not, suggested or not, rules out a tcp or
/// passthrough rule there (the record does not link requests to their
/// connection, so this is judged per host and port, which is stricter).
fn read_session(
    draft: &mut Draft,
    events: &[airlock_auditor::StoredEvent],
    recorded: Option<&Policy>,
) {
    let mut http: HashSet<(String, u16)> = HashSet::new();
    for event in events {
        if let AuditEvent::Http(HttpExchange {
            method,
            url,
            request_headers,
            decision,
            reason,
            http_version,
            websocket,
            ..
        }) = &event.event
        {
            let seen = Seen {
                method,
                url,
                decision: decision.as_str(),
                reason: reason.as_deref(),
                upgrade: websocket.is_some() || asks_websocket(http_version, request_headers),
            };
            if let Some(endpoint) = seen.add_to(draft) {
                http.insert(endpoint);
            }
        }
    }
    for event in events {
        match &event.event {
            AuditEvent::Tcp(TcpConnection {
                host,
                dst,
                port,
                decision,
                reason,
                bytes_up,
                ..
            }) => {
                let host = host.as_deref().unwrap_or_else(|| address_of(dst));
                if decision == "deny" {
                    draft.refuse(refusal(
                        &format!("connection {host}:{port}"),
                        reason.as_deref(),
                    ));
                    continue;
                }
                let Ok(h) = Host::parse(host) else { continue };
                if http.contains(&(h.as_str().to_owned(), *port)) {
                    continue;
                }
                let tunnel = match recorded.map(|p| (p.connection(&h, *port), p.default_action())) {
                    Some((ConnectionDecision::Tunnel { .. }, _)) => Some(Tunnel::Tcp),
                    Some((ConnectionDecision::Passthrough { .. }, _)) => Some(Tunnel::Passthrough),
                    // Deny mode closes what is neither HTTP nor TLS without a tcp rule:
                    // a connection that carried no request there went nowhere.
                    Some((_, DefaultAction::Deny)) => None,
                    // Report and allow modes tunnel it uninspected.
                    _ => (*bytes_up > 0).then_some(Tunnel::Tcp),
                };
                if let Some(tunnel) = tunnel {
                    draft.tunnel(&h, *port, tunnel);
                }
            }
            AuditEvent::Dns(DnsQuery {
                name,
                qtype,
                decision,
                rule,
                ..
            }) => dns(draft, name, qtype, decision.as_str(), rule.as_deref()),
            AuditEvent::McpCall(call) => mcp(draft, call),
            _ => {}
        }
    }
}

/// A recorded MCP message: the tools and methods that went through name
/// themselves in the server's rule; what was refused is listed; a call a
/// person approved stays theirs to decide.
fn mcp(draft: &mut Draft, call: &McpCall) {
    let McpCall {
        server,
        method,
        tool,
        decision,
        reason,
        approval,
        ..
    } = call;
    let what = format!(
        "MCP {method}{} on {}:{}{}",
        tool.as_deref().map(|t| format!(" {t}")).unwrap_or_default(),
        server.host,
        server.port,
        server.path
    );
    if decision == "deny" {
        draft.refuse(refusal(&what, reason.as_deref()));
        return;
    }
    // The client's answer to the server's own request: allowed on any
    // server an mcp table grants, so no rule names it.
    if call.channel == "response" && method.is_empty() {
        return;
    }
    if approval.is_some() {
        draft.not_suggested(&what, &NotSuggested::Approved);
        return;
    }
    let Ok(host) = Host::parse(&server.host) else {
        draft.refuse(refusal(&what, Some("the recorded host cannot be parsed")));
        return;
    };
    draft.mcp_message(&host, server.port, &server.path, method, tool.as_deref());
}

/// A recorded request, as far as suggesting needs it.
struct Seen<'a> {
    method: &'a str,
    url: &'a str,
    /// The verdict on record: "allow", "report" or "deny".
    decision: &'a str,
    reason: Option<&'a str>,
    /// It asked for a WebSocket upgrade.
    upgrade: bool,
}

impl Seen<'_> {
    /// Into the draft: allowed if it went through, listed if it was
    /// refused or cannot be allowed narrowly. The host and port it was
    /// sent to, whatever its verdict, when the URL names them.
    fn add_to(&self, draft: &mut Draft) -> Option<(String, u16)> {
        let what = format!("{} {}", self.method, self.url);
        let endpoint = RecordedUrl::split(self.url);
        if let Some(url) = &endpoint {
            draft.carried_http(&url.host, url.port);
        }
        let endpoint_key = endpoint
            .as_ref()
            .map(|u| (u.host.as_str().to_owned(), u.port));
        if self.decision == "deny" {
            draft.refuse(refusal(&what, self.reason));
            return endpoint_key;
        }
        let Some(url) = endpoint else {
            draft.refuse(refusal(&what, Some("the recorded URL cannot be parsed")));
            return None;
        };
        if url.target == "*" {
            draft.not_suggested(&what, &NotSuggested::AsteriskForm);
            return endpoint_key;
        }
        if !url.target.starts_with('/') {
            draft.not_suggested(&what, &NotSuggested::NotOriginForm);
            return endpoint_key;
        }
        // The request as recorded, not as a lenient URL parser reads it
        // (`http::Uri` takes "https://h:8443*" for port 443, path "/").
        let req = RequestInfo {
            scheme: url.scheme,
            host: &url.host,
            port: url.port,
            method: self.method,
            path_and_query: url.target,
        };
        draft.request(&req, self.url, self.upgrade);
        endpoint_key
    }
}

/// A recorded URL split strictly: `scheme://authority` then the request
/// target exactly as recorded (`/path?q`, or `*` for the asterisk form,
/// which the proxy records as `https://host:port*`).
struct RecordedUrl<'a> {
    scheme: Scheme,
    host: Host,
    port: u16,
    target: &'a str,
}

impl<'a> RecordedUrl<'a> {
    fn split(url: &'a str) -> Option<Self> {
        let (scheme, rest) = if let Some(rest) = url.strip_prefix("https://") {
            (Scheme::Https, rest)
        } else {
            (Scheme::Http, url.strip_prefix("http://")?)
        };
        let end = rest.find(['/', '?', '#', '*']).unwrap_or(rest.len());
        let (authority, target) = rest.split_at(end);
        let (host, port_text) = match authority.strip_prefix('[') {
            Some(v6) => v6.split_once(']')?,
            None => authority.split_at(authority.find(':').unwrap_or(authority.len())),
        };
        let port = match port_text.strip_prefix(':') {
            Some(port) => port.parse::<u16>().ok().filter(|p| *p != 0)?,
            None if port_text.is_empty() => match scheme {
                Scheme::Https => 443,
                Scheme::Http => 80,
            },
            None => return None,
        };
        Some(RecordedUrl {
            scheme,
            host: Host::parse(host).ok()?,
            port,
            target,
        })
    }
}

/// A recorded DNS query: listed if refused, else a name that was resolved.
fn dns(draft: &mut Draft, name: &str, qtype: &str, decision: &str, reason: Option<&str>) {
    if decision == "deny" {
        draft.refuse(refusal(&format!("DNS {qtype} {name}"), reason));
    } else if let Ok(host) = Host::parse(name.trim_end_matches('.')) {
        draft.resolved(&host);
    }
}

fn refusal(what: &str, reason: Option<&str>) -> String {
    // The query may carry tokens; the path is enough to decide.
    let what = what.split_once('?').map_or(what, |(w, _)| w);
    match reason {
        Some(r) => format!("{what} — {r}"),
        None => what.to_owned(),
    }
}

/// One connection of an events file, as far as its events tell.
#[derive(Default)]
struct EventConn {
    target: Option<(String, u16)>,
    handling: String,
    verdict: String,
    reason: Option<String>,
    requests: u64,
    bytes_up: u64,
    error: Option<String>,
}

fn from_events(draft: &mut Draft, file: &Path) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("reading events file {}", file.display()))?;
    draft.note(&format!("From events file {}.", file.display()));
    read_events(draft, &file.display().to_string(), &text)
}

/// The JSON lines of an events file (`name`, for errors) into the draft.
fn read_events(draft: &mut Draft, name: &str, text: &str) -> anyhow::Result<()> {
    let mut conns: BTreeMap<u64, EventConn> = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let event: Value = serde_json::from_str(line).with_context(|| {
            format!(
                "{name}:{}: not a JSON event; expected the JSON lines of `airlock proxy --events`",
                n + 1
            )
        })?;
        let str_of = |k: &str| event.get(k).and_then(Value::as_str).unwrap_or_default();
        let opt = |k: &str| event.get(k).and_then(Value::as_str).map(str::to_owned);
        // The record's names, or the ones files written before 2026-11-27 used.
        let decision = event
            .get("decision")
            .or_else(|| event.get("verdict"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        let conn = event.get("conn").and_then(Value::as_u64);
        match str_of("kind") {
            "request" => {
                let headers: Vec<(String, String)> = event
                    .get("request_headers")
                    .or_else(|| event.get("headers"))
                    .and_then(|h| serde_json::from_value(h.clone()).ok())
                    .unwrap_or_default();
                let (method, url) = (str_of("method"), str_of("url"));
                let reason = opt("reason");
                Seen {
                    method,
                    url,
                    decision,
                    reason: reason.as_deref(),
                    upgrade: asks_websocket(str_of("http_version"), &headers),
                }
                .add_to(draft);
                if let Some(c) = conn {
                    conns.entry(c).or_default().requests += 1;
                }
                if let Some(names) = event.get("credentials").and_then(Value::as_array)
                    && let Ok(t) = Target::parse(url)
                {
                    for name in names.iter().filter_map(Value::as_str) {
                        draft.unknown_credential(name, t.host.as_str());
                    }
                }
            }
            "connection" => {
                let Some(c) = conn else { continue };
                let entry = conns.entry(c).or_default();
                entry.target = split_target(str_of("target"));
                entry.handling = str_of("handling").to_owned();
                entry.verdict = decision.to_owned();
                entry.reason = opt("reason");
            }
            "connection_closed" => {
                let Some(c) = conn else { continue };
                let entry = conns.entry(c).or_default();
                entry.bytes_up = event.get("bytes_up").and_then(Value::as_u64).unwrap_or(0);
                entry.error = opt("error");
            }
            "dns" => dns(
                draft,
                str_of("name"),
                str_of("qtype"),
                decision,
                // The record keeps a query's reason as its `rule`.
                opt("rule").or_else(|| opt("reason")).as_deref(),
            ),
            // Each message is on record when decided (with its arguments,
            // its approval) and again with its answer: the decided line
            // counts, as the record's latest-but-filled one does above.
            "mcp_call" => {
                if event.get("result").is_some_and(|r| !r.is_null()) {
                    continue;
                }
                match serde_json::from_value::<McpCall>(event.clone()) {
                    Ok(call) => mcp(draft, &call),
                    Err(e) => bail!(
                        "{name}:{}: an mcp_call event that does not read as one ({e}); expected the JSON lines of `airlock proxy --events`",
                        n + 1
                    ),
                }
            }
            "" => bail!(
                "{name}:{}: an event without `kind`; expected the JSON lines of `airlock proxy --events`",
                n + 1
            ),
            _ => {}
        }
    }
    for conn in conns.values() {
        let Some((host, port)) = &conn.target else {
            continue;
        };
        if conn.verdict == "deny" || conn.handling == "refused" {
            let what = format!("connection {host}:{port}");
            draft.refuse(refusal(&what, conn.reason.as_deref()));
            continue;
        }
        let Ok(h) = Host::parse(host) else { continue };
        let tunnel = match conn.handling.as_str() {
            "tunnel" => Some(Tunnel::Tcp),
            "passthrough" => Some(Tunnel::Passthrough),
            // Inspected but no request: tunnelled as bytes (report and allow
            // modes) when it sent some and was not closed for it.
            _ if conn.requests == 0 && conn.bytes_up > 0 => match &conn.error {
                None => Some(Tunnel::Tcp),
                Some(e) => {
                    let what = format!("connection {host}:{port}");
                    draft.refuse(refusal(&what, Some(e)));
                    None
                }
            },
            _ => None,
        };
        if let Some(tunnel) = tunnel {
            draft.tunnel(&h, *port, tunnel);
        }
    }
    Ok(())
}

/// "api.test:443" → ("api.test", 443); "[::1]:22" → ("::1", 22).
fn split_target(target: &str) -> Option<(String, u16)> {
    let (host, port) = target.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some((host.to_owned(), port.parse().ok()?))
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_events_target_splits_into_host_and_port() {
        assert_eq!(split_target("api.test:443"), Some(("api.test".into(), 443)));
        assert_eq!(split_target("[::1]:22"), Some(("::1".into(), 22)));
        assert_eq!(split_target("nohost"), None);
    }

    #[test]
    fn events_of_a_tunnel_a_refusal_and_a_credential_become_rules_and_comments() {
        let events = [
            r#"{"kind":"connection","conn":1,"target":"git.test:22","handling":"tunnel","verdict":"allow","rule":"p.toml:3","reason":null}"#,
            r#"{"kind":"connection_closed","conn":1,"bytes_up":10,"bytes_down":20,"duration_us":5,"error":null}"#,
            r#"{"kind":"connection","conn":2,"target":"api.test:443","handling":"inspect","verdict":"allow","rule":null,"reason":null}"#,
            r#"{"kind":"request","conn":2,"request":1,"method":"GET","url":"https://api.test/v1/items/42?token=x","http_version":"HTTP/1.1","headers":[["authorization","[secret:api]"]],"verdict":"allow","rule":"p.toml:7","reason":null,"credentials":["api"],"refused_status":null}"#,
            r#"{"kind":"request","conn":2,"request":2,"method":"DELETE","url":"https://api.test/v1/items/42","http_version":"HTTP/1.1","headers":[],"verdict":"deny","rule":null,"reason":"no rule allows this method for this host","credentials":[],"refused_status":403}"#,
            r#"{"kind":"connection","conn":3,"target":"evil.test:443","handling":"refused","verdict":"deny","rule":null,"reason":"no rule allows this host"}"#,
        ]
        .join("\n");
        let mut draft = Draft::new();
        read_events(&mut draft, "events.jsonl", &events).unwrap();
        let text = draft.render();
        for expected in [
            "host = \"git.test\"\nport = 22\nprotocol = \"tcp\"\n",
            "methods = [\"GET\"]\npaths = [\"/v1/items/*\"]\n",
            "# Credential \"api\" was injected on api.test;",
            "#   DELETE https://api.test/v1/items/42 — no rule allows this method",
            "#   connection evil.test:443 — no rule allows this host",
        ] {
            assert!(text.contains(expected), "{expected:?} in {text}");
        }
        assert!(!text.contains("token=x"), "{text}");
        let policy = Policy::parse("s.toml", &text).unwrap();
        assert_eq!(policy.lint(), Vec::new(), "{text}");
    }

    #[test]
    fn an_events_line_that_is_not_json_is_an_error_naming_the_line() {
        let mut draft = Draft::new();
        let err = read_events(&mut draft, "e.jsonl", "{\"kind\":\"dns\"}\n\nnope\n").unwrap_err();
        assert!(
            err.to_string().starts_with("e.jsonl:3: not a JSON event"),
            "{err}"
        );
    }

    #[test]
    fn a_recorded_url_splits_strictly_into_host_port_and_target() {
        let split = |url| RecordedUrl::split(url).map(|u| (u.host.to_string(), u.port, u.target));
        assert_eq!(
            split("https://api.test:8443/a?b"),
            Some(("api.test".into(), 8443, "/a?b"))
        );
        assert_eq!(
            split("https://api.test:8443*"),
            Some(("api.test".into(), 8443, "*"))
        );
        assert_eq!(
            split("http://api.test*"),
            Some(("api.test".into(), 80, "*"))
        );
        assert_eq!(split("https://[::1]:22/x"), Some(("::1".into(), 22, "/x")));
        assert_eq!(
            split("https://API.test./x"),
            Some(("api.test".into(), 443, "/x"))
        );
        for bad in [
            "https://*.api.test/x",
            "https://api.test:0/x",
            "https://api.test:99999/x",
            "https://api.test:44x/x",
            "ftp://api.test/x",
            "https://user@api.test/x",
        ] {
            assert!(split(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn an_asterisk_form_request_in_an_events_file_is_listed_and_its_connection_is_no_tunnel() {
        let events = [
            r#"{"kind":"connection","conn":1,"target":"api.test:8443","handling":"inspect","verdict":"allow","rule":null,"reason":null}"#,
            r#"{"kind":"request","conn":1,"request":1,"method":"DELETE","url":"https://api.test:8443*","http_version":"HTTP/1.1","headers":[],"verdict":"report","rule":null,"reason":null,"credentials":[],"refused_status":null}"#,
            r#"{"kind":"connection_closed","conn":1,"bytes_up":60,"bytes_down":20,"duration_us":5,"error":null}"#,
            r#"{"kind":"connection","conn":2,"target":"api.test:8443","handling":"inspect","verdict":"allow","rule":null,"reason":null}"#,
            r#"{"kind":"connection_closed","conn":2,"bytes_up":60,"bytes_down":20,"duration_us":5,"error":null}"#,
        ]
        .join("\n");
        let mut draft = Draft::new();
        read_events(&mut draft, "events.jsonl", &events).unwrap();
        let text = draft.render();
        assert!(!text.contains("[[allow]]"), "{text}");
        assert!(
            text.contains(
                "#   DELETE https://api.test:8443* — the asterisk-form target `*` names no path"
            ),
            "{text}"
        );
        assert!(
            text.contains("#   1 connection to api.test:8443 with no request a rule can allow — it carried HTTP"),
            "{text}"
        );
    }

    #[test]
    fn an_events_files_mcp_calls_become_the_servers_tools_counted_once_each() {
        let call = |id: u64, tool: &str, decision: &str, extra: &str| {
            format!(
                r#"{{"kind":"mcp_call","ts":1,"conn":1,"request":{id},"exchange":{id},"server":{{"host":"pay.test","port":443,"path":"/mcp"}},"rpc_id":{id},"method":"tools/call","tool":"{tool}","arguments":{{}},"channel":"post","decision":"{decision}","rule":"p.toml:1"{extra}}}"#
            )
        };
        let post = |id: u64| {
            format!(
                r#"{{"kind":"request","conn":1,"request":{id},"method":"POST","url":"https://pay.test/mcp","http_version":"HTTP/1.1","request_headers":[],"decision":"allow","rule":null,"reason":null}}"#
            )
        };
        let events = [
            post(1),
            call(1, "transfer", "allow", ""),
            // The answered line repeats the call: counted once.
            call(
                1,
                "transfer",
                "allow",
                r#","result":{"bytes":9,"is_error":false,"first_bytes":"{}"}"#,
            ),
            post(2),
            call(2, "refund", "allow", r#","approval":"ab12""#),
            post(3),
            call(3, "delete_all", "deny", r#","reason":"not allowed""#),
        ]
        .join("\n");
        let mut draft = Draft::new();
        read_events(&mut draft, "events.jsonl", &events).unwrap();
        let text = draft.render();
        assert!(
            text.contains(
                "# MCP tools called: transfer ×1\nmcp = { tools = [\"transfer\"], methods = [\"initialize\"] }\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("#   MCP tools/call refund on pay.test:443/mcp — a person approved it"),
            "{text}"
        );
        assert!(
            text.contains("#   MCP tools/call delete_all on pay.test:443/mcp — not allowed"),
            "{text}"
        );
        let policy = Policy::parse("suggested.toml", &text).unwrap();
        assert_eq!(policy.lint(), Vec::new(), "{text}");
    }

    #[test]
    fn a_refusal_line_drops_the_query() {
        assert_eq!(
            refusal(
                "GET https://a.test/x?token=1",
                Some("no rule allows this host")
            ),
            "GET https://a.test/x — no rule allows this host"
        );
    }
}
