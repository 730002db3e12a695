//! Text that came from the sandbox, made safe to print on a reader's
//! terminal.
//!
//! Argv, paths, URLs, host and DNS names, reasons and command output are all
//! chosen (or influenced) by the program under audit. Printed raw, an ESC
//! starts a terminal control sequence (ECMA-48: erase a line, move the
//! cursor, retitle the window), a CR overwrites what the line said, and a
//! bidi override (Unicode UAX #9) shows the characters after it in another
//! order than they are stored. An attacker can make the responder read
//! something other than what happened. Every human-readable renderer runs
//! such text through [`text`] (or [`bytes`] for raw data); JSON output needs
//! no help, as JSON string escaping (RFC 8259 section 7) already covers the
//! controls and the reader's tool decides how to show the rest.
//!
//! The rule, chosen so that the escaped form reads back to exactly one
//! original and cannot be forged by the original itself:
//! - `\` becomes `\\`, so a literal `\x1b` in a file name prints as `\\x1b`
//!   and never looks like an escaped ESC;
//! - tab, line feed and carriage return become `\t`, `\n`, `\r`;
//! - other C0 controls (U+0000-U+001F) and DEL (U+007F) become `\xHH`;
//! - C1 controls (U+0080-U+009F), bidi controls, and characters that are
//!   invisible or zero-width (see [`DECEPTIVE`]) become `\u{HHHH}`, the
//!   form of a Rust char literal;
//! - in [`bytes`], a byte that is not part of valid UTF-8 becomes `\xHH`
//!   (always 80-ff there, so it cannot be mistaken for a control above).
//!
//! Everything else, including ordinary non-ASCII letters, is printed as is.

use std::borrow::Cow;
use std::fmt::Write;
use std::ops::RangeInclusive;

/// Characters a terminal does not act on but that hide or disguise text:
/// C1 controls; the Unicode format characters (general category Cf: bidi
/// marks, embeddings, overrides and isolates, zero-width joiners and
/// spaces, the byte order mark, tag characters used to smuggle ASCII past a
/// reader); line and paragraph separators (Zl, Zp), which some terminals
/// break lines at; and letters and marks that render as nothing (Hangul
/// fillers, the combining grapheme joiner, variation selectors).
const DECEPTIVE: &[RangeInclusive<u32>] = &[
    0x0080..=0x009F,   // C1 controls (CSI is U+009B)
    0x00AD..=0x00AD,   // soft hyphen
    0x034F..=0x034F,   // combining grapheme joiner
    0x0600..=0x0605,   // Arabic number signs (Cf)
    0x061C..=0x061C,   // Arabic letter mark (bidi)
    0x06DD..=0x06DD,   // Arabic end of ayah (Cf)
    0x070F..=0x070F,   // Syriac abbreviation mark (Cf)
    0x0890..=0x0891,   // Arabic pound/piastre marks above (Cf)
    0x08E2..=0x08E2,   // Arabic disputed end of ayah (Cf)
    0x115F..=0x1160,   // Hangul choseong/jungseong fillers
    0x17B4..=0x17B5,   // Khmer inherent vowels (invisible)
    0x180B..=0x180F,   // Mongolian variation selectors, vowel separator
    0x200B..=0x200F,   // zero-width space/non-joiner/joiner, LRM, RLM
    0x2028..=0x202E,   // line/paragraph separators, bidi embeddings and overrides
    0x2060..=0x206F,   // word joiner, invisible operators, bidi isolates, deprecated format
    0x3164..=0x3164,   // Hangul filler
    0xFE00..=0xFE0F,   // variation selectors
    0xFEFF..=0xFEFF,   // zero-width no-break space (byte order mark)
    0xFFA0..=0xFFA0,   // halfwidth Hangul filler
    0xFFF9..=0xFFFB,   // interlinear annotation controls
    0x110BD..=0x110BD, // Kaithi number sign (Cf)
    0x110CD..=0x110CD, // Kaithi number sign above (Cf)
    0x13430..=0x1343F, // Egyptian hieroglyph format controls
    0x1BCA0..=0x1BCA3, // shorthand format controls
    0x1D173..=0x1D17A, // musical symbol format controls
    0xE0000..=0xE0FFF, // tags and variation selectors supplement
];

fn deceptive(c: char) -> bool {
    let c = u32::from(c);
    DECEPTIVE.iter().any(|r| r.contains(&c))
}

/// Whether `c` is printed as something other than itself.
fn needs_escape(c: char) -> bool {
    c == '\\' || c.is_ascii_control() || deceptive(c)
}

fn push_escaped(out: &mut String, c: char) {
    match c {
        '\\' => out.push_str("\\\\"),
        '\t' => out.push_str("\\t"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        // Writing to a String cannot fail.
        c if c.is_ascii_control() => {
            let _ = write!(out, "\\x{:02x}", u32::from(c));
        }
        c if deceptive(c) => {
            let _ = write!(out, "{}", c.escape_unicode());
        }
        c => out.push(c),
    }
}

fn push_text(out: &mut String, s: &str) {
    for c in s.chars() {
        push_escaped(out, c);
    }
}

/// `s` made safe for a terminal (the rule is in the module docs); borrowed
/// when nothing needed escaping, which is the common case.
pub fn text(s: &str) -> Cow<'_, str> {
    if !s.chars().any(needs_escape) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    push_text(&mut out, s);
    Cow::Owned(out)
}

/// Raw bytes (command output, message payloads) made safe for a terminal:
/// valid UTF-8 as in [`text`], every other byte as `\xHH`, so the output
/// names the bytes that were there rather than a replacement character.
pub fn bytes(data: &[u8]) -> Cow<'_, str> {
    if let Ok(s) = std::str::from_utf8(data) {
        return text(s);
    }
    let mut out = String::with_capacity(data.len() + 8);
    for chunk in data.utf8_chunks() {
        push_text(&mut out, chunk.valid());
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    Cow::Owned(out)
}

/// The bytes that [`bytes`] (or [`text`]) printed as `shown`, or `None` when
/// `shown` is not something they print (a lone `\\`, an unknown escape, a
/// bad hex number). `unescape(&bytes(b)) == Some(b)` for every `b`: the
/// printed form names exactly one original.
pub fn unescape(shown: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(shown.len());
    let mut chars = shown.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            let mut buf = [0u8; 4];
            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            continue;
        }
        match chars.next()? {
            '\\' => out.push(b'\\'),
            't' => out.push(b'\t'),
            'n' => out.push(b'\n'),
            'r' => out.push(b'\r'),
            'x' => {
                let hex: String = chars.by_ref().take(2).collect();
                if hex.len() != 2 {
                    return None;
                }
                out.push(u8::from_str_radix(&hex, 16).ok()?);
            }
            'u' => {
                if chars.next()? != '{' {
                    return None;
                }
                let hex: String = chars.by_ref().take_while(|&c| c != '}').collect();
                let c = char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?;
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
            _ => return None,
        }
    }
    Some(out)
}

/// A preview of raw bytes: at most `max` characters of `data` (an invalid
/// byte counts as one), escaped as in [`bytes`], with `"` escaped too, in
/// double quotes so that leading and trailing spaces show. Cut before
/// escaping, so an escape is never cut in half.
pub fn preview(data: &[u8], max: usize) -> String {
    let mut out = String::with_capacity(data.len().min(max) + 2);
    out.push('"');
    let mut left = max;
    'chunks: for chunk in data.utf8_chunks() {
        for c in chunk.valid().chars() {
            if left == 0 {
                break 'chunks;
            }
            left -= 1;
            if c == '"' {
                out.push_str("\\\"");
            } else {
                push_escaped(&mut out, c);
            }
        }
        for b in chunk.invalid() {
            if left == 0 {
                break 'chunks;
            }
            left -= 1;
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_borrowed_unchanged() {
        for s in ["", "/usr/bin/true", "héllo wörld", "日本語.txt", "a\"b'c"] {
            assert!(matches!(text(s), Cow::Borrowed(t) if t == s), "{s:?}");
        }
    }

    #[test]
    fn terminal_controls_are_escaped() {
        assert_eq!(text("\x1b[2Kgone"), "\\x1b[2Kgone");
        assert_eq!(text("\x1b]0;title\x07"), "\\x1b]0;title\\x07");
        assert_eq!(text("ok\rEVIL"), "ok\\rEVIL");
        assert_eq!(text("a\nb\tc"), "a\\nb\\tc");
        assert_eq!(text("\0\x7f"), "\\x00\\x7f");
        // C1: CSI and NEL as characters (U+009B, U+0085).
        assert_eq!(text("\u{9b}2K\u{85}"), "\\u{9b}2K\\u{85}");
    }

    #[test]
    fn bidi_and_invisible_characters_are_escaped() {
        assert_eq!(text("evil\u{202e}txt.exe"), "evil\\u{202e}txt.exe");
        for c in [
            '\u{202a}',
            '\u{202b}',
            '\u{202c}',
            '\u{202d}',
            '\u{202e}',
            '\u{2066}',
            '\u{2067}',
            '\u{2068}',
            '\u{2069}',
            '\u{200b}',
            '\u{200d}',
            '\u{200e}',
            '\u{200f}',
            '\u{061c}',
            '\u{feff}',
            '\u{2028}',
            '\u{2029}',
            '\u{3164}',
            '\u{e0041}',
            '\u{fe0f}',
        ] {
            let shown = text(&c.to_string()).into_owned();
            assert_eq!(shown, format!("\\u{{{:x}}}", u32::from(c)), "{c:?}");
        }
    }

    #[test]
    fn a_backslash_cannot_forge_an_escape() {
        // The text "\x1b" (four characters) must not print like an ESC.
        assert_eq!(text("\\x1b"), "\\\\x1b");
        assert_eq!(text("\\u{202e}"), "\\\\u{202e}");
        assert_ne!(text("\\x1b"), text("\x1b"));
        assert_eq!(text("C:\\dir"), "C:\\\\dir");
    }

    #[test]
    fn escaping_is_injective_on_tricky_inputs() {
        // Distinct inputs that a sloppy escaper would print alike.
        let inputs = [
            "\x1b",
            "\\x1b",
            "\\\x1b",
            "\\\\x1b",
            "\u{1b}",
            "\r",
            "\\r",
            "\u{202e}",
            "\\u{202e}",
            "\u{9b}",
            "\\x9b",
        ];
        let mut seen = std::collections::HashMap::new();
        for s in inputs {
            if let Some(other) = seen.insert(text(s).into_owned(), s) {
                assert_eq!(other, s, "{other:?} and {s:?} print the same");
            }
        }
    }

    #[test]
    fn no_output_contains_a_raw_control_or_bidi_character() {
        let all: String = (0u32..0x3000).filter_map(char::from_u32).collect();
        let shown = text(&all);
        for c in shown.chars() {
            assert!(!c.is_control() && !deceptive(c), "{c:?} survived escaping");
        }
    }

    #[test]
    fn bytes_show_invalid_utf8_as_hex() {
        assert_eq!(bytes(b"ok\x1b[2K"), "ok\\x1b[2K");
        assert_eq!(bytes(b"a\xffb\xc3"), "a\\xffb\\xc3");
        assert_eq!(bytes("é\u{202e}".as_bytes()), "é\\u{202e}");
        assert_eq!(bytes(b"\\xff"), "\\\\xff");
    }

    #[test]
    fn unescaping_gives_back_exactly_what_was_printed() {
        let inputs: [&[u8]; 9] = [
            b"run\xff.sh",
            "run\u{fffd}.sh".as_bytes(),
            b"run\\xff.sh",
            b"\x1b[2K\r\n\t\\",
            "evil\u{202e}txt".as_bytes(),
            b"\xc3",
            b"\xc3\xa9",
            b"",
            b"\\u{202e}",
        ];
        for b in inputs {
            assert_eq!(unescape(&bytes(b)).as_deref(), Some(b), "{b:?}");
        }
        for bad in ["\\", "\\q", "\\x4", "\\xzz", "\\u{110000}", "\\u202e"] {
            assert_eq!(unescape(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn previews_show_edges_escape_quotes_and_cut_before_escaping() {
        assert_eq!(preview(b" a\"b ", 60), "\" a\\\"b \"");
        assert_eq!(preview(b"\x1b[2K", 60), "\"\\x1b[2K\"");
        assert_eq!(preview(b"", 60), "\"\"");
        // Two characters: the ESC is kept whole, never cut to "\x".
        assert_eq!(preview(b"\x1b\x1b\x1b", 2), "\"\\x1b\\x1b\"");
        assert_eq!(preview("\u{202e}abc".as_bytes(), 2), "\"\\u{202e}a\"");
        assert_eq!(preview(b"\xff\xfe\xfd", 2), "\"\\xff\\xfe\"");
    }
}
