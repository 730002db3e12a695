//! A held request's headers and body on a terminal, from the proxy's view
//! model (`airlock_proxy::approvals::shown`): warnings first, then every
//! header that can change what the request does, then the body as fields,
//! lines or hex, and, past the bound, how much is not shown and the
//! command that shows it. Everything the sandbox chose is escaped.

use std::fmt::Write;

use airlock_auditor::escape;
use airlock_proxy::approvals::shown::{BodyForm, Field, Shown, ValueKind};

/// The lines, each indented by two spaces, ending in a newline.
pub(super) fn render(shown: &Shown, id: &str) -> String {
    let mut out = String::new();
    for warning in &shown.warnings {
        let _ = writeln!(out, "  ! {}", escape::text(warning));
    }
    headers(&mut out, shown);
    body(&mut out, shown, id);
    out
}

fn headers(out: &mut String, shown: &Shown) {
    match (shown.headers.is_empty(), shown.whole) {
        (true, _) => out.push_str("  headers: none that change what it does\n"),
        (false, true) => out.push_str("  headers (all):\n"),
        (false, false) => out.push_str("  headers:\n"),
    }
    for header in &shown.headers {
        let note = match &header.note {
            Some(note) => format!("    [{}]", escape::text(note)),
            None => String::new(),
        };
        let _ = writeln!(
            out,
            "    {}: {}{note}",
            escape::text(&header.name),
            escape::text(&header.value)
        );
    }
    if !shown.inert_headers.is_empty() {
        let names: Vec<String> = shown
            .inert_headers
            .iter()
            .map(|n| escape::text(n).into_owned())
            .collect();
        let _ = writeln!(out, "    (also sent, inert: {})", names.join(", "));
    }
}

fn body(out: &mut String, shown: &Shown, id: &str) {
    let body = &shown.body;
    let form = match body.form {
        BodyForm::Empty => {
            out.push_str("  body: empty\n");
            return;
        }
        BodyForm::Json => "JSON",
        BodyForm::Form => "form",
        BodyForm::Text => "text",
        BodyForm::Binary => "binary, as hex",
        BodyForm::Encoded => "encoded, as hex",
    };
    let note = match &body.note {
        Some(note) => format!(" ({})", escape::text(note)),
        None => String::new(),
    };
    let _ = writeln!(out, "  body: {} bytes, {form}{note}:", body.bytes);
    for field in &body.fields {
        let _ = writeln!(out, "    {}", field_line(field));
    }
    for line in &body.lines {
        let _ = writeln!(out, "    | {}", escape::text(line));
    }
    for row in &body.hex {
        // Printable ASCII and '.' only, but escaped all the same.
        let _ = writeln!(out, "    {}", escape::text(row));
    }
    if let Some(hidden) = &body.hidden {
        let what = match (body.form, hidden.items) {
            (BodyForm::Json | BodyForm::Form, 1) => "field",
            (BodyForm::Json | BodyForm::Form, _) => "fields",
            (BodyForm::Text, 1) => "line",
            (BodyForm::Text, _) => "lines",
            (_, 1) => "row of hex",
            _ => "rows of hex",
        };
        let _ = writeln!(
            out,
            "  ... NOT SHOWN: {} more {what} ({} bytes of the body); see all of it with `airlock approvals show {id}`",
            hidden.items, hidden.bytes
        );
    }
    let cut: u64 = body.fields.iter().map(|f| f.cut_chars).sum();
    if cut > 0 && body.hidden.is_none() {
        let _ = writeln!(
            out,
            "  ... NOT SHOWN: {cut} characters of long values; see all of it with `airlock approvals show {id}`"
        );
    }
}

fn field_line(field: &Field) -> String {
    let value = match field.kind {
        ValueKind::String => format!("\"{}\"", escape::text(&field.value)),
        _ => escape::text(&field.value).into_owned(),
    };
    let mut notes = Vec::new();
    if field.duplicate {
        notes.push("key sent more than once".to_owned());
    }
    if field.cut_chars > 0 {
        notes.push(format!("{} more characters not shown", field.cut_chars));
    }
    let notes = match notes.is_empty() {
        true => String::new(),
        false => format!("    [{}]", notes.join("; ")),
    };
    format!("{} = {value}{notes}", escape::text(&field.path))
}
