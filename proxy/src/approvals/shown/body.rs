//! A held body as an approver reads it: JSON and forms as fields, text as
//! lines, anything else as bytes, each within a bound that says in numbers
//! what it leaves out.

use std::collections::{HashMap, HashSet};

use percent_encoding::percent_decode;
use serde::{Deserialize, Serialize};

use super::headers::is_method_field;
use super::json::{self, Leaf};
use super::{Held, Redactor};

/// Keys sent twice that a warning names; the fields flag every one.
const DUPLICATES_NAMED: usize = 20;

/// How much of a body a view shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bound {
    /// Characters of values or text, in all.
    pub chars: usize,
    /// Fields or lines.
    pub items: usize,
    /// Characters of one field's value (so one long value cannot push the
    /// fields after it out of the view).
    pub value_chars: usize,
    /// Bytes of a body shown as hex.
    pub hex_bytes: usize,
}

impl Bound {
    /// What `airlock approvals`, the API's listing and the webhook show:
    /// generous enough for any form or JSON document a person can read.
    pub const LISTING: Self = Self {
        chars: 64 * 1024,
        items: 500,
        value_chars: 4 * 1024,
        hex_bytes: 1024,
    };
    /// Everything (`airlock approvals show ID`); a held body is at most
    /// 1 MiB.
    pub const WHOLE: Self = Self {
        chars: usize::MAX,
        items: usize::MAX,
        value_chars: usize::MAX,
        hex_bytes: usize::MAX,
    };

    pub fn is_whole(&self) -> bool {
        *self == Self::WHOLE
    }
}

/// How the body is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BodyForm {
    Empty,
    /// `fields`, from a JSON document.
    Json,
    /// `fields`, from `application/x-www-form-urlencoded`.
    Form,
    /// `lines` of UTF-8 text.
    Text,
    /// `hex`: not UTF-8.
    Binary,
    /// `hex`: a Content-Encoding (gzip, br, ...) Airlock does not decode.
    Encoded,
}

/// A JSON value's type, or a form value's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ValueKind {
    String,
    Number,
    Bool,
    Null,
    /// `{}` or `[]`.
    Empty,
}

/// One value of a JSON or form body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Field {
    /// `amount`, `items[0].price`, `a["odd key"]`; a form's key as sent.
    pub path: String,
    pub value: String,
    pub kind: ValueKind,
    /// The key was sent more than once (in its object, or in the form).
    pub duplicate: bool,
    /// Characters of the value not shown (0: all of it is).
    pub cut_chars: u64,
}

/// What the bound left out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hidden {
    /// Fields, lines or hex rows not shown.
    pub items: u64,
    /// Bytes of the body they hold (about, for fields).
    pub bytes: u64,
}

/// The body as shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShownBody {
    pub bytes: u64,
    pub form: BodyForm,
    /// Why it is shown this way when that is not what it claims to be.
    pub note: Option<String>,
    pub fields: Vec<Field>,
    pub lines: Vec<String>,
    /// `offset  hex  ascii` rows of 16 bytes.
    pub hex: Vec<String>,
    /// Past the bound: how much is not shown. None: all of it is.
    pub hidden: Option<Hidden>,
}

impl ShownBody {
    fn new(bytes: usize, form: BodyForm) -> Self {
        Self {
            bytes: bytes as u64,
            form,
            note: None,
            fields: Vec::new(),
            lines: Vec::new(),
            hex: Vec::new(),
            hidden: None,
        }
    }
}

/// The first Content-Type and Content-Encoding sent (a second of either is
/// a header warning already).
fn header<'a>(held: Held<'a>, name: &str) -> Option<&'a str> {
    held.headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

pub(super) fn shown(
    held: Held<'_>,
    redactor: &Redactor,
    bound: &Bound,
    warnings: &mut Vec<String>,
) -> ShownBody {
    let body = redactor.bytes(held.body);
    let size = held.body.len();
    if body.is_empty() {
        return ShownBody::new(size, BodyForm::Empty);
    }
    let content_type = header(held, "content-type")
        .unwrap_or("")
        .to_ascii_lowercase();
    let essence = content_type.split(';').next().unwrap_or("").trim();
    if let Some(encoding) = header(held, "content-encoding")
        .map(str::trim)
        .filter(|e| !e.is_empty() && !e.eq_ignore_ascii_case("identity"))
    {
        warnings.push(format!(
            "the body is {encoding}-encoded ({size} bytes): Airlock does not decode it, so what it says is not shown"
        ));
        let mut shown = hex(&body, size, BodyForm::Encoded, bound);
        shown.note = Some(format!("{encoding}-encoded; not decoded"));
        return shown;
    }
    let mut note = None;
    if let Some(charset) = content_type
        .split(';')
        .skip(1)
        .filter_map(|p| p.trim().strip_prefix("charset="))
        .map(|c| c.trim_matches('"'))
        .find(|c| !matches!(*c, "utf-8" | "utf8" | "us-ascii"))
    {
        warnings.push(format!(
            "the body's declared charset is {charset}: the server may read its bytes otherwise than as shown here (UTF-8)"
        ));
    }
    let says_json = essence == "application/json" || essence.ends_with("+json");
    let looks_json = matches!(body.trim_ascii_start().first(), Some(b'{' | b'['));
    if says_json || looks_json {
        match json::parse(&body) {
            Ok(node) => {
                method_fields(
                    held,
                    json::top_level(&node).filter_map(|(k, v)| match v {
                        json::Node::Str(s) => Some((k.to_owned(), s.clone())),
                        _ => None,
                    }),
                    warnings,
                );
                return fields_view(size, BodyForm::Json, (redactor, bound), warnings, |visit| {
                    json::flatten(&node, visit)
                });
            }
            Err(e) if says_json => {
                let why = format!(
                    "Content-Type says {essence} but the body is not JSON ({e}); shown as it is"
                );
                warnings.push(why.clone());
                note = Some(why);
            }
            Err(_) => {}
        }
    }
    if essence == "application/x-www-form-urlencoded" {
        let pairs = form_pairs(&body);
        method_fields(held, pairs.iter().cloned(), warnings);
        // Counted once: a 1 MiB form can hold 300,000 pairs.
        let mut counts: HashMap<&str, usize> = HashMap::with_capacity(pairs.len());
        for (key, _) in &pairs {
            *counts.entry(key.as_str()).or_default() += 1;
        }
        return fields_view(size, BodyForm::Form, (redactor, bound), warnings, |visit| {
            for (key, value) in &pairs {
                let duplicate = counts[key.as_str()] > 1;
                let leaf = Leaf {
                    path: key.clone(),
                    value: value.clone(),
                    kind: ValueKind::String,
                    duplicate,
                };
                if !visit(leaf) {
                    return;
                }
            }
        });
    }
    let mut shown = match std::str::from_utf8(&body) {
        Ok(text) => lines(text, size, bound),
        Err(_) => hex(&body, size, BodyForm::Binary, bound),
    };
    shown.note = note;
    shown
}

/// `_method=DELETE` in a form or at a JSON body's top level.
fn method_fields(
    held: Held<'_>,
    pairs: impl Iterator<Item = (String, String)>,
    warnings: &mut Vec<String>,
) {
    for (key, value) in pairs.filter(|(k, _)| is_method_field(k)) {
        warnings.push(format!(
            "method override: the body's field {key} = {value} may make the server treat this {} as {value}",
            held.method
        ));
    }
}

/// Fields within the bound, with warnings for keys sent twice.
fn fields_view(
    size: usize,
    form: BodyForm,
    (redactor, bound): (&Redactor, &Bound),
    warnings: &mut Vec<String>,
    each: impl FnOnce(&mut dyn FnMut(Leaf) -> bool),
) -> ShownBody {
    let mut shown = ShownBody::new(size, form);
    let mut chars = 0usize;
    let mut hidden = Hidden { items: 0, bytes: 0 };
    // In order, each once; the set keeps a body of many keys linear.
    let mut duplicates: Vec<String> = Vec::new();
    let mut seen: HashSet<String> = HashSet::new();
    each(&mut |mut leaf: Leaf| {
        // Decoded (`\u0041`, `%41`), a value could spell a secret its
        // bytes did not.
        leaf.path = redactor.text(&leaf.path);
        leaf.value = redactor.text(&leaf.value);
        if leaf.duplicate && seen.insert(leaf.path.clone()) {
            duplicates.push(leaf.path.clone());
        }
        let length = leaf.value.chars().count();
        if shown.fields.len() >= bound.items || chars >= bound.chars {
            hidden.items += 1;
            hidden.bytes += (leaf.path.len() + leaf.value.len()) as u64;
            return true;
        }
        let room = bound.value_chars.min(bound.chars - chars);
        let value: String = leaf.value.chars().take(room).collect();
        chars += value.chars().count();
        shown.fields.push(Field {
            path: leaf.path,
            cut_chars: (length - value.chars().count()) as u64,
            value,
            kind: leaf.kind,
            duplicate: leaf.duplicate,
        });
        true
    });
    if !duplicates.is_empty() {
        let what = match form {
            BodyForm::Form => "form",
            _ => "JSON",
        };
        let named = duplicates.len().min(DUPLICATES_NAMED);
        let more = match duplicates.len() - named {
            0 => String::new(),
            more => format!(" and {more} other keys"),
        };
        warnings.push(format!(
            "the {what} body sends {}{more} more than once; servers differ on which value counts",
            duplicates[..named].join(", ")
        ));
    }
    if hidden.items > 0 {
        shown.hidden = Some(hidden);
    }
    shown
}

/// Text as lines, within the bound.
fn lines(text: &str, size: usize, bound: &Bound) -> ShownBody {
    let mut shown = ShownBody::new(size, BodyForm::Text);
    let mut chars = 0usize;
    let mut shown_bytes = 0usize;
    for line in text.split('\n') {
        if shown.lines.len() >= bound.items || chars >= bound.chars {
            break;
        }
        let room = bound.chars - chars;
        let part: String = line.chars().take(room).collect();
        chars += part.chars().count();
        let whole_line = part.len() == line.len();
        // The line's newline too, when the line is shown whole.
        shown_bytes += part.len() + usize::from(whole_line);
        shown.lines.push(part);
        if !whole_line {
            break;
        }
    }
    let shown_bytes = shown_bytes.min(text.len());
    if shown_bytes < text.len() {
        let rest = &text[shown_bytes..];
        shown.hidden = Some(Hidden {
            items: rest.split('\n').count() as u64,
            bytes: rest.len() as u64,
        });
    }
    shown
}

/// Bytes as hex rows, within the bound.
fn hex(body: &[u8], size: usize, form: BodyForm, bound: &Bound) -> ShownBody {
    let mut shown = ShownBody::new(size, form);
    let end = body.len().min(bound.hex_bytes);
    for (row, chunk) in body[..end].chunks(16).enumerate() {
        let hex: Vec<String> = chunk.iter().map(|b| format!("{b:02x}")).collect();
        let ascii: String = chunk
            .iter()
            .map(|&b| {
                if b.is_ascii_graphic() || b == b' ' {
                    char::from(b)
                } else {
                    '.'
                }
            })
            .collect();
        shown
            .hex
            .push(format!("{:08x}  {:<47}  {ascii}", row * 16, hex.join(" ")));
    }
    if end < body.len() {
        let rest = body.len() - end;
        shown.hidden = Some(Hidden {
            items: rest.div_ceil(16) as u64,
            bytes: rest as u64,
        });
    }
    shown
}

/// `application/x-www-form-urlencoded` pairs, decoded (`+` is a space),
/// every one kept, in order.
pub(super) fn form_pairs(body: &[u8]) -> Vec<(String, String)> {
    let decode = |part: &[u8]| {
        let spaced: Vec<u8> = part
            .iter()
            .map(|&b| if b == b'+' { b' ' } else { b })
            .collect();
        String::from_utf8_lossy(&percent_decode(&spaced).collect::<Vec<u8>>()).into_owned()
    };
    body.split(|&b| b == b'&')
        .filter(|part| !part.is_empty())
        .map(|part| match part.iter().position(|&b| b == b'=') {
            Some(at) => (decode(&part[..at]), decode(&part[at + 1..])),
            None => (decode(part), String::new()),
        })
        .collect()
}
