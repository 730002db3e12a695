//! A strict JSON reader for body constraints: keeps numbers as their exact
//! text and refuses duplicate keys (RFC 8259 §4 leaves them undefined, and
//! different parsers keep different ones — a classic smuggling trick).

use std::collections::BTreeMap;

/// Nesting deeper than this is refused rather than risking the stack.
const MAX_DEPTH: usize = 128;

/// A parsed JSON value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Json {
    Null,
    Bool(bool),
    /// The number exactly as written.
    Number(String),
    String(String),
    Array(Vec<Self>),
    Object(BTreeMap<String, Self>),
}

/// Why a document was refused. Display is a short description ending with
/// the byte offset where reading stopped; callers quote it in denials.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum JsonError {
    #[error("trailing data at byte {at}")]
    TrailingData { at: usize },
    #[error("expected '{expected}' at byte {at}")]
    Expected { expected: char, at: usize },
    #[error("nesting too deep at byte {at}")]
    TooDeep { at: usize },
    #[error("unexpected character at byte {at}")]
    UnexpectedCharacter { at: usize },
    #[error("unexpected end of document at byte {at}")]
    UnexpectedEnd { at: usize },
    #[error("invalid literal at byte {at}")]
    InvalidLiteral { at: usize },
    #[error("expected a string key at byte {at}")]
    ExpectedKey { at: usize },
    /// No offset: the key names the problem.
    #[error("duplicate key {key:?}")]
    DuplicateKey { key: String },
    #[error("expected ',' or '}}' at byte {at}")]
    ExpectedObjectEnd { at: usize },
    #[error("expected ',' or ']' at byte {at}")]
    ExpectedArrayEnd { at: usize },
    #[error("invalid number at byte {at}")]
    InvalidNumber { at: usize },
    #[error("control character in string at byte {at}")]
    ControlCharacter { at: usize },
    #[error("unterminated string at byte {at}")]
    UnterminatedString { at: usize },
    #[error("unterminated escape at byte {at}")]
    UnterminatedEscape { at: usize },
    #[error("invalid escape at byte {at}")]
    InvalidEscape { at: usize },
    #[error("invalid \\u escape at byte {at}")]
    InvalidUnicodeEscape { at: usize },
    #[error("lone surrogate at byte {at}")]
    LoneSurrogate { at: usize },
}

/// Parses a complete JSON document.
pub(crate) fn parse(text: &str) -> Result<Json, JsonError> {
    let mut reader = Reader {
        bytes: text.as_bytes(),
        text,
        pos: 0,
    };
    reader.skip_ws();
    let value = reader.value(0)?;
    reader.skip_ws();
    if reader.pos != reader.bytes.len() {
        return Err(JsonError::TrailingData { at: reader.pos });
    }
    Ok(value)
}

struct Reader<'a> {
    bytes: &'a [u8],
    text: &'a str,
    pos: usize,
}

impl Reader<'_> {
    fn skip_ws(&mut self) {
        while matches!(self.bytes.get(self.pos), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn expect(&mut self, byte: u8) -> Result<(), JsonError> {
        if self.bytes.get(self.pos) == Some(&byte) {
            self.pos += 1;
            Ok(())
        } else {
            Err(JsonError::Expected {
                expected: char::from(byte),
                at: self.pos,
            })
        }
    }

    fn value(&mut self, depth: usize) -> Result<Json, JsonError> {
        if depth > MAX_DEPTH {
            return Err(JsonError::TooDeep { at: self.pos });
        }
        match self.bytes.get(self.pos) {
            Some(b'{') => self.object(depth),
            Some(b'[') => self.array(depth),
            Some(b'"') => self.string().map(Json::String),
            Some(b't') => self.literal("true", Json::Bool(true)),
            Some(b'f') => self.literal("false", Json::Bool(false)),
            Some(b'n') => self.literal("null", Json::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(JsonError::UnexpectedCharacter { at: self.pos }),
            None => Err(JsonError::UnexpectedEnd { at: self.pos }),
        }
    }

    fn literal(&mut self, word: &str, value: Json) -> Result<Json, JsonError> {
        if self.bytes[self.pos..].starts_with(word.as_bytes()) {
            self.pos += word.len();
            Ok(value)
        } else {
            Err(JsonError::InvalidLiteral { at: self.pos })
        }
    }

    fn object(&mut self, depth: usize) -> Result<Json, JsonError> {
        self.expect(b'{')?;
        let mut map = BTreeMap::new();
        self.skip_ws();
        if self.bytes.get(self.pos) == Some(&b'}') {
            self.pos += 1;
            return Ok(Json::Object(map));
        }
        loop {
            self.skip_ws();
            if self.bytes.get(self.pos) != Some(&b'"') {
                return Err(JsonError::ExpectedKey { at: self.pos });
            }
            let key = self.string()?;
            self.skip_ws();
            self.expect(b':')?;
            self.skip_ws();
            let value = self.value(depth + 1)?;
            if map.contains_key(&key) {
                return Err(JsonError::DuplicateKey { key });
            }
            map.insert(key, value);
            self.skip_ws();
            match self.bytes.get(self.pos) {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(Json::Object(map));
                }
                _ => return Err(JsonError::ExpectedObjectEnd { at: self.pos }),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<Json, JsonError> {
        self.expect(b'[')?;
        let mut items = Vec::new();
        self.skip_ws();
        if self.bytes.get(self.pos) == Some(&b']') {
            self.pos += 1;
            return Ok(Json::Array(items));
        }
        loop {
            self.skip_ws();
            items.push(self.value(depth + 1)?);
            self.skip_ws();
            match self.bytes.get(self.pos) {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(Json::Array(items));
                }
                _ => return Err(JsonError::ExpectedArrayEnd { at: self.pos }),
            }
        }
    }

    fn number(&mut self) -> Result<Json, JsonError> {
        let start = self.pos;
        if self.bytes.get(self.pos) == Some(&b'-') {
            self.pos += 1;
        }
        match self.bytes.get(self.pos) {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => self.digits(),
            _ => return Err(JsonError::InvalidNumber { at: self.pos }),
        }
        if self.bytes.get(self.pos) == Some(&b'.') {
            self.pos += 1;
            if !self.bytes.get(self.pos).is_some_and(u8::is_ascii_digit) {
                return Err(JsonError::InvalidNumber { at: self.pos });
            }
            self.digits();
        }
        if matches!(self.bytes.get(self.pos), Some(b'e' | b'E')) {
            self.pos += 1;
            if matches!(self.bytes.get(self.pos), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            if !self.bytes.get(self.pos).is_some_and(u8::is_ascii_digit) {
                return Err(JsonError::InvalidNumber { at: self.pos });
            }
            self.digits();
        }
        Ok(Json::Number(self.text[start..self.pos].to_owned()))
    }

    fn digits(&mut self) {
        while self.bytes.get(self.pos).is_some_and(u8::is_ascii_digit) {
            self.pos += 1;
        }
    }

    fn string(&mut self) -> Result<String, JsonError> {
        self.expect(b'"')?;
        let mut out = String::new();
        loop {
            let start = self.pos;
            while let Some(b) = self.bytes.get(self.pos) {
                if *b == b'"' || *b == b'\\' || *b < 0x20 {
                    break;
                }
                self.pos += 1;
            }
            out.push_str(&self.text[start..self.pos]);
            match self.bytes.get(self.pos) {
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    self.pos += 1;
                    self.escape(&mut out)?;
                }
                Some(_) => return Err(JsonError::ControlCharacter { at: self.pos }),
                None => return Err(JsonError::UnterminatedString { at: self.pos }),
            }
        }
    }

    fn escape(&mut self, out: &mut String) -> Result<(), JsonError> {
        let Some(b) = self.bytes.get(self.pos).copied() else {
            return Err(JsonError::UnterminatedEscape { at: self.pos });
        };
        self.pos += 1;
        let ch = match b {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => self.unicode_escape()?,
            _ => return Err(JsonError::InvalidEscape { at: self.pos }),
        };
        out.push(ch);
        Ok(())
    }

    fn hex4(&mut self) -> Result<u32, JsonError> {
        let text = self
            .text
            .get(self.pos..self.pos + 4)
            .filter(|t| t.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or(JsonError::InvalidUnicodeEscape { at: self.pos })?;
        self.pos += 4;
        u32::from_str_radix(text, 16).map_err(|_| JsonError::InvalidUnicodeEscape { at: self.pos })
    }

    /// Lone surrogates are refused: they cannot be represented in UTF-8 and
    /// parsers disagree on how to replace them.
    fn unicode_escape(&mut self) -> Result<char, JsonError> {
        let first = self.hex4()?;
        let code = if (0xd800..0xdc00).contains(&first) {
            if !self.bytes[self.pos..].starts_with(b"\\u") {
                return Err(JsonError::LoneSurrogate { at: self.pos });
            }
            self.pos += 2;
            let second = self.hex4()?;
            if !(0xdc00..0xe000).contains(&second) {
                return Err(JsonError::LoneSurrogate { at: self.pos });
            }
            0x10000 + ((first - 0xd800) << 10) + (second - 0xdc00)
        } else {
            first
        };
        char::from_u32(code).ok_or(JsonError::LoneSurrogate { at: self.pos })
    }
}
