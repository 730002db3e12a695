//! Recorded events and bytes as the page shows them.
//!
//! Everything here is data for the script to put into text nodes; nothing
//! is markup. Bodies and file contents come out as pretty JSON, text, or a
//! hex dump, whichever reads best, and say when the record was cut short.

use airlock_record::{ApprovalDecided, DnsQuery, HttpExchange, TcpConnection};
use std::fmt::Write as _;

use airlock_auditor::timeline::{self, Depths};
use airlock_record::{AuditEvent, StoredEvent};
use serde::Serialize;

/// An event as the timeline lists it (`Ev` in docs/console.md).
#[derive(Debug, Serialize)]
pub(crate) struct Listed {
    seq: u64,
    ts_us: i64,
    kind: &'static str,
    exec_id: Option<String>,
    depth: usize,
    summary: String,
    verdict: Option<String>,
    /// `http:N` / `tcp:N`: a later record with the same key replaces this one.
    key: Option<String>,
}

impl Listed {
    pub(crate) fn of(ev: &StoredEvent, depths: &mut Depths) -> Self {
        Self {
            seq: ev.seq.get(),
            ts_us: ev.ts_us,
            kind: ev.kind.as_str(),
            exec_id: ev.event.exec_id().map(|e| e.as_str().to_owned()),
            depth: depths.next(&ev.event),
            summary: timeline::describe(&ev.event),
            verdict: verdict(&ev.event).map(str::to_owned),
            key: key(&ev.event),
        }
    }
}

/// How a request, connection or name lookup was decided.
pub(crate) fn verdict(event: &AuditEvent) -> Option<&str> {
    match event {
        AuditEvent::Http(HttpExchange { decision, .. })
        | AuditEvent::Tcp(TcpConnection { decision, .. })
        | AuditEvent::Dns(DnsQuery { decision, .. }) => Some(decision.as_str()),
        AuditEvent::ApprovalDecided(ApprovalDecided { outcome, .. }) if outcome != "approved" => {
            Some("deny")
        }
        _ => None,
    }
}

fn key(event: &AuditEvent) -> Option<String> {
    match event {
        AuditEvent::Http(HttpExchange {
            exchange: Some(id), ..
        }) => Some(format!("http:{id}")),
        AuditEvent::Tcp(TcpConnection {
            connection: Some(id),
            ..
        }) => Some(format!("tcp:{id}")),
        _ => None,
    }
}

/// Bytes as the page shows them.
#[derive(Debug, Serialize)]
pub(crate) struct Shown {
    /// "json" (pretty-printed), "text", "hex" or "none".
    encoding: &'static str,
    text: String,
    bytes: usize,
    /// The record holds only the first part.
    truncated: bool,
}

/// Hex dumps stop here: past this a download serves better than a page.
const HEX_LIMIT: usize = 64 * 1024;

pub(crate) fn bytes(data: Option<&[u8]>, truncated: bool) -> Shown {
    let data = data.unwrap_or_default();
    let (encoding, text) = if data.is_empty() {
        ("none", String::new())
    } else if let Some(pretty) = pretty_json(data) {
        ("json", pretty)
    } else if let Ok(text) = std::str::from_utf8(data) {
        ("text", text.to_owned())
    } else {
        ("hex", hex_dump(&data[..data.len().min(HEX_LIMIT)]))
    };
    Shown {
        encoding,
        text,
        bytes: data.len(),
        truncated: truncated || (encoding == "hex" && data.len() > HEX_LIMIT),
    }
}

/// Valid JSON laid out again as it was written, token for token: never
/// parsed into a map and printed back, which would keep one of two keys
/// sent twice (`{"amount": 5, "amount": 999999}`) and round numbers past a
/// double's precision, so a page would show something else than was sent.
fn pretty_json(data: &[u8]) -> Option<String> {
    let first = data.iter().find(|b| !b.is_ascii_whitespace())?;
    if *first != b'{' && *first != b'[' {
        return None;
    }
    serde_json::from_slice::<serde::de::IgnoredAny>(data).ok()?;
    Some(reindent(std::str::from_utf8(data).ok()?))
}

/// Two spaces a level, a line a member; strings copied as they are.
fn reindent(json: &str) -> String {
    let mut out = String::with_capacity(json.len() * 2);
    let mut depth = 0usize;
    let mut chars = json.chars().peekable();
    let (mut in_string, mut escaped) = (false, false);
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        out.extend(std::iter::repeat_n("  ", depth));
    };
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            c if c.is_whitespace() => {}
            '"' => {
                in_string = true;
                out.push(c);
            }
            '{' | '[' => {
                out.push(c);
                let close = if c == '{' { '}' } else { ']' };
                while chars.next_if(|n| n.is_whitespace()).is_some() {}
                if chars.next_if_eq(&close).is_some() {
                    out.push(close);
                } else {
                    depth += 1;
                    newline(&mut out, depth);
                }
            }
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(c);
            }
            ',' => {
                out.push(c);
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            c => out.push(c),
        }
    }
    out
}

/// `00000000  de ad be ef …  |....|`, sixteen bytes a line.
fn hex_dump(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len() * 4);
    for (i, chunk) in data.chunks(16).enumerate() {
        let _ = write!(out, "{:08x} ", i * 16);
        for (j, b) in chunk.iter().enumerate() {
            let gap = if j == 8 { "  " } else { " " };
            let _ = write!(out, "{gap}{b:02x}");
        }
        for j in chunk.len()..16 {
            out.push_str(if j == 8 { "    " } else { "   " });
        }
        out.push_str("  |");
        out.extend(chunk.iter().map(|&b| {
            if b.is_ascii_graphic() || b == b' ' {
                char::from(b)
            } else {
                '.'
            }
        }));
        out.push_str("|\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_read_as_json_text_or_hex() {
        let json = bytes(Some(br#"{"a":[1,2]}"#), false);
        assert_eq!(json.encoding, "json");
        assert!(json.text.contains("\n  \"a\": ["));
        let text = bytes(Some(b"hello <b>"), true);
        assert_eq!(
            (text.encoding, text.text.as_str(), text.truncated),
            ("text", "hello <b>", true)
        );
        let bin = bytes(Some(&[0, 1, 0xff, b'A']), false);
        assert_eq!(bin.encoding, "hex");
        assert_eq!(
            bin.text,
            "00000000  00 01 ff 41                                       |...A|\n"
        );
        assert_eq!(bytes(None, false).encoding, "none");
        // Not JSON after all: shown as the text it is.
        assert_eq!(bytes(Some(b"{oops"), false).encoding, "text");
    }

    #[test]
    fn json_is_shown_as_sent_with_every_key_and_digit() {
        let sent = br#"{"amount":5, "note":"a,b:{c}\"]", "amount" : 999999, "big":123456789012345678901234567890, "e":{}, "l":[ ], "n":[1,[2]]}"#;
        let shown = bytes(Some(sent), false);
        assert_eq!(shown.encoding, "json");
        assert_eq!(
            shown.text,
            "{\n  \"amount\": 5,\n  \"note\": \"a,b:{c}\\\"]\",\n  \"amount\": 999999,\n  \"big\": 123456789012345678901234567890,\n  \"e\": {},\n  \"l\": [],\n  \"n\": [\n    1,\n    [\n      2\n    ]\n  ]\n}"
        );
    }
}
