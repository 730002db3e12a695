//! The MCP messages (`mcp_call`) an HTTP exchange carried, for its HAR
//! entry's `_mcp`: each message's latest record as stored (the JSONL
//! object's fields), in the order they were recorded. A POSTed batch
//! carries several.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::{AuditEvent, ExchangeId, McpCall, StoredEvent};

/// The session's MCP messages by the exchange they rode on.
#[derive(Debug, Default)]
pub(super) struct Messages {
    by_exchange: BTreeMap<ExchangeId, Vec<Value>>,
    /// Messages recorded without an exchange.
    loose: Vec<Value>,
}

impl Messages {
    /// From events already collapsed to each message's latest record.
    pub(super) fn collect(events: &[StoredEvent]) -> Self {
        let mut m = Self::default();
        for ev in events {
            let AuditEvent::McpCall(call @ McpCall { exchange, .. }) = &ev.event else {
                continue;
            };
            let mut v = serde_json::to_value(call).unwrap_or(Value::Null);
            if let Some(obj) = v.as_object_mut() {
                obj.insert("_seq".into(), ev.seq.get().into());
            }
            match exchange {
                Some(x) => m.by_exchange.entry(*x).or_default().push(v),
                None => m.loose.push(v),
            }
        }
        m
    }

    /// The messages of exchange `x`, once (an exchange has one entry).
    pub(super) fn take(&mut self, x: ExchangeId) -> Option<Value> {
        self.by_exchange.remove(&x).map(Value::Array)
    }

    /// Every message not taken by an entry, if any.
    pub(super) fn rest(self) -> Option<Value> {
        let mut all = self.loose;
        all.extend(self.by_exchange.into_values().flatten());
        (!all.is_empty()).then_some(Value::Array(all))
    }
}
