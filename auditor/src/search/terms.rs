//! What an event can be searched by: the values `airlock audit search`
//! matches (`event_terms` rows), taken from the event as it is stored.

use crate::{
    ApprovalDecided, ApprovalRequested, DnsQuery, Exec, Exit, FileChange, HttpExchange, McpCall,
    Note, Output, Resize, StepEnd, StepStart, TcpConnection, Untraced,
};
use crate::{AuditEvent, EventKind, FileOp, OsText, Redactor};

/// A name as the index holds it: the text itself when it is UTF-8 (as every
/// index written before names were kept as bytes holds it, so `verify`'s
/// recomputation still matches), else its escaped form (see [`OsText`]).
fn term(name: &OsText) -> String {
    name.text_or_escaped().into_owned()
}

/// One `event_terms` row's searchable values. An event with several values
/// of one kind (a rename's two paths) has one row per value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Terms {
    /// Lower-case, labels reversed: see [`host_key`].
    pub host: Option<String>,
    /// Upper-case.
    pub method: Option<String>,
    /// Lower-case: "allow", "deny", "report".
    pub verdict: Option<String>,
    pub url: Option<String>,
    /// A file's path (a `file` event), or an MCP tool's name (an
    /// `mcp_call`): the event's object. Searches say which kind they mean
    /// (`--file` only `file` rows, `--tool` only `mcp_call` rows), so a
    /// tool named like a path is never a file, nor the reverse; one
    /// indexed column serves both without a schema change.
    pub path: Option<String>,
    /// The exec's path and its argv joined by spaces, on two lines, or a
    /// live session step's command.
    pub command: Option<String>,
}

impl Terms {
    /// Scrubs registered secrets, as the recorder scrubs the payload: the
    /// index must never hold what the record does not. Done on the values
    /// as recorded, before [`Self::normalized`]: a secret lower-cased or
    /// with its labels reversed would no longer be found by the redactor.
    fn scrubbed(mut self, redactor: &Redactor) -> Self {
        if redactor.is_empty() {
            return self;
        }
        for field in [
            &mut self.host,
            &mut self.method,
            &mut self.verdict,
            &mut self.url,
            &mut self.path,
            &mut self.command,
        ]
        .into_iter()
        .flatten()
        {
            redactor.scrub_string(field);
        }
        self
    }

    /// The forms search compares: the host keyed (see [`host_key`]), the
    /// method upper-case, the verdict lower-case.
    fn normalized(mut self) -> Self {
        self.host = self.host.map(|h| host_key(&h));
        self.method = self.method.map(|m| m.to_ascii_uppercase());
        self.verdict = self.verdict.map(|v| v.to_ascii_lowercase());
        self
    }
}

/// Whether events of `kind` can have rows (the others never do, so a
/// reader checking the index need not parse them).
pub(crate) fn is_indexed_kind(kind: EventKind) -> bool {
    !matches!(
        kind,
        EventKind::Exit
            | EventKind::Output
            | EventKind::Note
            | EventKind::Untraced
            | EventKind::Resize
            | EventKind::StepEnd
    )
}

/// The rows an event gets, scrubbed with `redactor` (empty for events
/// nothing searches by, such as terminal output).
pub(crate) fn of(event: &AuditEvent, redactor: &Redactor) -> Vec<Terms> {
    let rows = match event {
        AuditEvent::Exec(Exec { path, argv, .. }) => vec![Terms {
            command: Some(format!(
                "{}\n{}",
                term(path),
                argv.iter().map(term).collect::<Vec<_>>().join(" ")
            )),
            ..Terms::default()
        }],
        AuditEvent::StepStart(StepStart { command, .. }) => vec![Terms {
            command: Some(command.join(" ")),
            ..Terms::default()
        }],
        AuditEvent::File(FileChange {
            path,
            op,
            rename_to,
            ..
        }) => {
            let mut rows = vec![Terms {
                path: Some(term(path)),
                ..Terms::default()
            }];
            if let (FileOp::Rename, Some(to)) = (op, rename_to) {
                rows.push(Terms {
                    path: Some(term(to)),
                    ..Terms::default()
                });
            }
            rows
        }
        AuditEvent::Dns(DnsQuery { name, decision, .. }) => vec![Terms {
            host: Some(name.clone()),
            verdict: Some(decision.as_str().to_owned()),
            ..Terms::default()
        }],
        AuditEvent::Tcp(TcpConnection {
            host,
            dst,
            decision,
            ..
        }) => vec![Terms {
            host: Some(host.as_deref().unwrap_or_else(|| dst_ip(dst)).to_owned()),
            verdict: Some(decision.as_str().to_owned()),
            ..Terms::default()
        }],
        AuditEvent::Http(HttpExchange {
            method,
            url,
            decision,
            ..
        }) => vec![Terms {
            host: url_host(url).map(str::to_owned),
            method: Some(method.clone()),
            verdict: Some(decision.as_str().to_owned()),
            url: Some(url.clone()),
            ..Terms::default()
        }],
        AuditEvent::ApprovalRequested(ApprovalRequested { method, url, .. })
        | AuditEvent::ApprovalDecided(ApprovalDecided { method, url, .. }) => vec![Terms {
            host: url_host(url).map(str::to_owned),
            method: Some(method.clone()),
            url: Some(url.clone()),
            ..Terms::default()
        }],
        AuditEvent::Exit(Exit { .. })
        | AuditEvent::Output(Output { .. })
        | AuditEvent::Note(Note { .. })
        | AuditEvent::Untraced(Untraced { .. })
        | AuditEvent::Resize(Resize { .. })
        | AuditEvent::StepEnd(StepEnd { .. }) => Vec::new(),
        // The server's host, the JSON-RPC method and the tool, so that
        // `--tool`, `--host` and `--method tools/call` find the call.
        AuditEvent::McpCall(McpCall {
            server,
            method,
            tool,
            decision,
            ..
        }) => vec![Terms {
            host: Some(server.host.clone()),
            method: Some(method.clone()),
            verdict: Some(decision.as_str().to_owned()),
            path: tool.clone(),
            ..Terms::default()
        }],
    };
    rows.into_iter()
        .map(|t| t.scrubbed(redactor).normalized())
        .collect()
}

/// A host name as the index keys it: lower-case, without a trailing dot,
/// labels reversed ("API.example.com." becomes "com.example.api"), so that
/// every name under a domain sorts together.
pub(crate) fn host_key(host: &str) -> String {
    let host = host.trim().trim_end_matches('.').to_ascii_lowercase();
    // An IPv6 address has no labels to reverse.
    if host.contains(':') {
        return host;
    }
    host.rsplit('.').collect::<Vec<_>>().join(".")
}

/// The host of an absolute URL ("https://user@Host:443/x" gives "Host").
pub(crate) fn url_host(url: &str) -> Option<&str> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if let Some(v6) = host_port.strip_prefix('[') {
        v6.split(']').next().unwrap_or(v6)
    } else {
        host_port.split(':').next().unwrap_or(host_port)
    };
    (!host.is_empty()).then_some(host)
}

/// The address of "ip:port" or "[v6]:port".
fn dst_ip(dst: &str) -> &str {
    match dst.rsplit_once(':') {
        Some((ip, _)) => ip.trim_start_matches('[').trim_end_matches(']'),
        None => dst,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_keys_reverse_labels_so_a_domain_is_a_prefix() {
        assert_eq!(host_key("API.Example.com."), "com.example.api");
        assert_eq!(host_key("127.0.0.1"), "1.0.0.127");
        assert_eq!(host_key("::1"), "::1");
    }

    #[test]
    fn url_hosts_leave_out_user_port_and_path() {
        assert_eq!(url_host("https://u:p@Api.test:8443/x?y"), Some("Api.test"));
        assert_eq!(url_host("http://[::1]:80/"), Some("::1"));
        assert_eq!(url_host("https:///nohost"), None);
    }
}
