//! Names and arguments as the kernel handed them over: bytes, kept exactly.
//!
//! A Linux path, argument or environment entry is any bytes but NUL. They
//! are nearly always UTF-8, but a hostile program chooses them: `run\xff.sh`
//! (a payload) and `run\u{FFFD}.sh` (innocent) are two files, and a lossy
//! conversion would record both as the second. [`OsText`] keeps the bytes.
//!
//! Stored (and exported as JSON) as a plain string when the bytes are
//! UTF-8, which is what every record made before this type existed holds,
//! so those verify unchanged; otherwise as `{"escaped": "run\\xff.sh"}`,
//! the escaped form of [`crate::escape::bytes`], which reads back to exactly
//! these bytes. Printed ([`fmt::Display`]) in that same escaped form, so two
//! different names never print the same.

use std::borrow::Cow;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::escape;

/// A path, argument or environment entry, byte for byte.
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OsText(Vec<u8>);

impl OsText {
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.0
    }

    /// The text itself when it is UTF-8 (as nearly all is).
    pub fn as_str(&self) -> Option<&str> {
        std::str::from_utf8(&self.0).ok()
    }

    /// As a path on this machine, byte for byte.
    pub fn as_path(&self) -> &Path {
        Path::new(OsStr::from_bytes(&self.0))
    }

    /// The one printed form: UTF-8 as is (controls and invisible characters
    /// escaped), other bytes as `\xHH`, `\` as `\\`. Reversible with
    /// [`escape::unescape`]; borrowed when nothing needed escaping.
    pub fn escaped(&self) -> Cow<'_, str> {
        escape::bytes(&self.0)
    }

    /// The text itself when it is UTF-8, else its escaped form: what the
    /// search index holds for a name, and so what a search for it is
    /// turned into (a literal `run\xff.sh` and the bytes `run<ff>.sh` both
    /// match it; each prints apart in the results).
    pub fn text_or_escaped(&self) -> Cow<'_, str> {
        match self.as_str() {
            Some(text) => Cow::Borrowed(text),
            None => self.escaped(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn starts_with(&self, prefix: &str) -> bool {
        self.0.starts_with(prefix.as_bytes())
    }

    pub fn ends_with(&self, suffix: &str) -> bool {
        self.0.ends_with(suffix.as_bytes())
    }

    /// What follows `prefix`, when this starts with it.
    pub fn strip_prefix(&self, prefix: &Self) -> Option<&[u8]> {
        self.0.strip_prefix(prefix.as_bytes())
    }

    /// Whether a JSON object is the stored form of a name that is not UTF-8.
    pub fn is_escaped_form(map: &serde_json::Map<String, serde_json::Value>) -> bool {
        map.len() == 1 && map.get("escaped").is_some_and(serde_json::Value::is_string)
    }

    /// This followed by `suffix`.
    pub fn with_suffix(&self, suffix: &[u8]) -> Self {
        Self([self.as_bytes(), suffix].concat())
    }
}

impl fmt::Display for OsText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.escaped())
    }
}

impl fmt::Debug for OsText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{}\"", self.escaped())
    }
}

impl AsRef<[u8]> for OsText {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl From<Vec<u8>> for OsText {
    fn from(bytes: Vec<u8>) -> Self {
        Self(bytes)
    }
}

impl From<&[u8]> for OsText {
    fn from(bytes: &[u8]) -> Self {
        Self(bytes.to_vec())
    }
}

impl From<String> for OsText {
    fn from(s: String) -> Self {
        Self(s.into_bytes())
    }
}

impl From<&str> for OsText {
    fn from(s: &str) -> Self {
        Self(s.as_bytes().to_vec())
    }
}

impl From<OsString> for OsText {
    fn from(s: OsString) -> Self {
        Self(s.into_vec())
    }
}

impl From<&OsStr> for OsText {
    fn from(s: &OsStr) -> Self {
        Self(s.as_bytes().to_vec())
    }
}

impl From<PathBuf> for OsText {
    fn from(p: PathBuf) -> Self {
        p.into_os_string().into()
    }
}

impl From<&Path> for OsText {
    fn from(p: &Path) -> Self {
        p.as_os_str().into()
    }
}

impl PartialEq<str> for OsText {
    fn eq(&self, other: &str) -> bool {
        self.0 == other.as_bytes()
    }
}

impl PartialEq<&str> for OsText {
    fn eq(&self, other: &&str) -> bool {
        self.0 == other.as_bytes()
    }
}

impl PartialEq<String> for OsText {
    fn eq(&self, other: &String) -> bool {
        self.0 == other.as_bytes()
    }
}

impl Serialize for OsText {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.as_str() {
            Some(text) => s.serialize_str(text),
            None => Escaped {
                escaped: self.escaped().into_owned(),
            }
            .serialize(s),
        }
    }
}

/// The stored form of bytes that are not UTF-8.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Escaped {
    escaped: String,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Stored {
    Text(String),
    Escaped(Escaped),
}

impl<'de> Deserialize<'de> for OsText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Stored::deserialize(d)? {
            Stored::Text(text) => Ok(text.into()),
            Stored::Escaped(Escaped { escaped }) => {
                escape::unescape(&escaped).map(OsText).ok_or_else(|| {
                    serde::de::Error::custom(format!("not an escaped name: {escaped:?}"))
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(b: &[u8]) -> OsText {
        OsText::from(b)
    }

    #[test]
    fn utf8_is_stored_as_the_plain_string_older_records_hold() {
        let json = serde_json::to_string(&name("/tmp/ok é.sh".as_bytes())).unwrap();
        assert_eq!(json, r#""/tmp/ok é.sh""#);
        let back: OsText = serde_json::from_str(&json).unwrap();
        assert_eq!(back, "/tmp/ok é.sh");
    }

    #[test]
    fn other_bytes_are_stored_escaped_and_read_back_exactly() {
        let raw = name(b"/tmp/run\xff.sh");
        let json = serde_json::to_string(&raw).unwrap();
        assert_eq!(json, r#"{"escaped":"/tmp/run\\xff.sh"}"#);
        let back: OsText = serde_json::from_str(&json).unwrap();
        assert_eq!(back, raw);
    }

    #[test]
    fn names_a_lossy_conversion_would_merge_print_apart() {
        let names = [
            name(b"run\xff.sh"),
            name("run\u{fffd}.sh".as_bytes()),
            name(b"run\\xff.sh"),
            name(b"run\xfe.sh"),
            name(b"run\xc3.sh"),
        ];
        let mut printed = std::collections::HashSet::new();
        let mut stored = std::collections::HashSet::new();
        for n in &names {
            assert!(printed.insert(n.to_string()), "{n} printed twice");
            assert!(stored.insert(serde_json::to_string(n).unwrap()));
        }
        assert_eq!(names[0].to_string(), "run\\xff.sh");
        assert_eq!(names[2].to_string(), "run\\\\xff.sh");
    }

    #[test]
    fn a_malformed_escaped_name_is_an_error_not_a_guess() {
        assert!(serde_json::from_str::<OsText>(r#"{"escaped":"\\q"}"#).is_err());
        assert!(serde_json::from_str::<OsText>(r#"{"escaped":"a","x":1}"#).is_err());
    }
}
