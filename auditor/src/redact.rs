//! Defensive secret scrubbing. Callers are expected to redact already; this
//! catches what they missed, before anything is hashed or stored, so a secret
//! can never reach the database file.

use crate::{FileChange, HttpExchange, Output};
use std::sync::{Arc, RwLock};

use memchr::memmem;

use serde::Deserialize;

use crate::{AuditError, AuditEvent, OsText};

/// Shared list of secret values to scrub; clones share the list, so secrets
/// registered after a session started still apply to it.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    secrets: Arc<RwLock<Vec<Secret>>>,
}

#[derive(Debug)]
struct Secret {
    value: Vec<u8>,
    replacement: Vec<u8>,
}

impl Redactor {
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `value` so that any occurrence is replaced by
    /// `[secret:NAME]`.
    pub fn add(&self, name: &str, value: &str) -> Result<(), AuditError> {
        if value.is_empty() {
            return Err(AuditError::Secret {
                name: name.to_string(),
                problem: "the value is empty; there is nothing to scrub".into(),
            });
        }
        let mut list = self.secrets.write().unwrap_or_else(|p| p.into_inner());
        if list.iter().any(|s| s.value == value.as_bytes()) {
            return Ok(());
        }
        list.push(Secret {
            value: value.as_bytes().to_vec(),
            replacement: format!("[secret:{name}]").into_bytes(),
        });
        // Longest first, so a secret that contains another is replaced whole.
        list.sort_by_key(|s| std::cmp::Reverse(s.value.len()));
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.secrets
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
    }

    /// Replaces registered secrets in `bytes`; returns true if anything changed.
    pub fn scrub_bytes(&self, bytes: &mut Vec<u8>) -> bool {
        let list = self.secrets.read().unwrap_or_else(|p| p.into_inner());
        let mut changed = false;
        for s in list.iter() {
            if memmem::find(bytes, &s.value).is_none() {
                continue;
            }
            let mut out = Vec::with_capacity(bytes.len());
            let mut rest: &[u8] = bytes;
            while let Some(i) = memmem::find(rest, &s.value) {
                out.extend_from_slice(&rest[..i]);
                out.extend_from_slice(&s.replacement);
                rest = &rest[i + s.value.len()..];
            }
            out.extend_from_slice(rest);
            *bytes = out;
            changed = true;
        }
        changed
    }

    pub fn scrub_string(&self, text: &mut String) -> bool {
        let mut bytes = std::mem::take(text).into_bytes();
        let changed = self.scrub_bytes(&mut bytes);
        // Secrets and replacements are whole UTF-8 strings, so replacing them
        // in valid UTF-8 yields valid UTF-8; lossy conversion is only a guard.
        *text = match String::from_utf8(bytes) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        };
        changed
    }

    /// Scrubs the raw byte fields of an event (bodies, file content, terminal
    /// output). String fields are scrubbed on the JSON form by [`Self::scrub_json`].
    pub(crate) fn scrub_event_bytes(&self, event: &mut AuditEvent) {
        match event {
            AuditEvent::Http(HttpExchange {
                request_body,
                response_body,
                websocket,
                ..
            }) => {
                for body in [request_body, response_body].into_iter().flatten() {
                    self.scrub_bytes(body);
                }
                for message in websocket.iter_mut().flat_map(|w| w.messages.iter_mut()) {
                    self.scrub_bytes(&mut message.payload);
                }
            }
            AuditEvent::File(FileChange {
                content: Some(c), ..
            }) => {
                self.scrub_bytes(c);
            }
            AuditEvent::Output(Output { data, .. }) => {
                self.scrub_bytes(data);
            }
            _ => {}
        }
    }

    /// Scrubs every string and object key in a JSON value.
    pub(crate) fn scrub_json(&self, value: &mut serde_json::Value) {
        if let serde_json::Value::Object(map) = &*value
            && OsText::is_escaped_form(map)
        {
            self.scrub_escaped_name(value);
            return;
        }
        match value {
            serde_json::Value::String(s) => {
                self.scrub_string(s);
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(|v| self.scrub_json(v)),
            serde_json::Value::Object(map) => {
                let entries: Vec<(String, serde_json::Value)> =
                    std::mem::take(map).into_iter().collect();
                for (mut k, mut v) in entries {
                    self.scrub_string(&mut k);
                    self.scrub_json(&mut v);
                    map.insert(k, v);
                }
            }
            _ => {}
        }
    }

    /// A name that is not UTF-8 (see [`OsText`]) is scrubbed as the bytes it
    /// stands for: a secret holding `\` or a control character reads
    /// differently escaped.
    fn scrub_escaped_name(&self, value: &mut serde_json::Value) {
        let Ok(name) = OsText::deserialize(&*value) else {
            return;
        };
        let mut bytes = name.into_bytes();
        if self.scrub_bytes(&mut bytes) {
            *value = serde_json::to_value(OsText::from(bytes)).unwrap_or_default();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Redactor;

    #[test]
    fn longest_secret_wins_and_all_occurrences_go() {
        let r = Redactor::new();
        r.add("SHORT", "abc").unwrap();
        r.add("LONG", "abcdef").unwrap();
        let mut s = "x abcdef y abc z abcdef".to_string();
        assert!(r.scrub_string(&mut s));
        assert_eq!(s, "x [secret:LONG] y [secret:SHORT] z [secret:LONG]");
        let mut v = serde_json::json!({"abc": ["abc", {"k": "1abc2"}]});
        r.scrub_json(&mut v);
        assert_eq!(
            v,
            serde_json::json!({"[secret:SHORT]": ["[secret:SHORT]", {"k": "1[secret:SHORT]2"}]})
        );
        assert!(r.add("EMPTY", "").is_err());
    }

    #[test]
    fn a_secret_is_scrubbed_from_a_name_that_is_not_utf8() {
        let r = Redactor::new();
        r.add("TOKEN", "s3cr\\et").unwrap();
        let name = crate::OsText::from(b"/tmp/\xffs3cr\\et".to_vec());
        let mut v = serde_json::to_value(&name).unwrap();
        assert!(v.is_object(), "{v}");
        r.scrub_json(&mut v);
        let back: crate::OsText = serde_json::from_value(v).unwrap();
        assert_eq!(back.as_bytes(), b"/tmp/\xff[secret:TOKEN]");
    }
}
