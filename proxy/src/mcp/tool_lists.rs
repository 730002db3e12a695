//! What one session's MCP servers have said, across exchanges: each
//! server's last tool list (a changed description is how a poisoned tool
//! shows itself), the calls forwarded and not yet answered (on the older
//! HTTP+SSE transport the answer comes on another exchange, the GET
//! stream), and those GET streams by the endpoint each announced, so that a
//! refused call's error goes where that transport's client reads answers.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use airlock_record::McpTool;
use serde_json::Value;
use tokio::sync::mpsc::UnboundedSender;

use super::Forwarded;

/// Most calls kept waiting for their answer per proxy; beyond it an answer
/// is still filtered and recorded, only without its call's tool name.
const MAX_PENDING: usize = 4096;

/// Where airlock's own answers for an SSE stream's client are queued.
type AnswerQueue = UnboundedSender<Vec<u8>>;

/// A server's tools: each one's description and input schema, by name.
type ToolList = BTreeMap<String, (Option<String>, Option<Value>)>;

#[derive(Debug, Default)]
pub(crate) struct ToolLists {
    lists: Mutex<HashMap<String, ToolList>>,
    pending: Mutex<HashMap<(String, String), Forwarded>>,
    /// Open SSE streams of the older transport, by server and the
    /// endpoint (path and query) their `endpoint` event named.
    streams: Mutex<HashMap<(String, String), AnswerQueue>>,
}

impl ToolLists {
    /// Remember `tools` as `server`'s list; the names whose description or
    /// input schema differ from its previous list.
    pub(crate) fn observe(&self, server: &str, tools: &[McpTool]) -> Vec<String> {
        let Ok(mut lists) = self.lists.lock() else {
            return Vec::new();
        };
        let now: ToolList = tools
            .iter()
            .map(|t| {
                (
                    t.name.clone(),
                    (t.description.clone(), t.input_schema.clone()),
                )
            })
            .collect();
        let changed = match lists.get(server) {
            Some(before) => now
                .iter()
                .filter(|(name, now)| before.get(*name).is_some_and(|b| b != *now))
                .map(|(name, _)| name.clone())
                .collect(),
            None => Vec::new(),
        };
        lists.insert(server.to_owned(), now);
        changed
    }

    pub(crate) fn forwarded(&self, server: &str, id: String, call: Forwarded) {
        if let Ok(mut pending) = self.pending.lock()
            && pending.len() < MAX_PENDING
        {
            pending.insert((server.to_owned(), id), call);
        }
    }

    pub(crate) fn answered(&self, server: &str, id: &str) -> Option<Forwarded> {
        self.pending
            .lock()
            .ok()?
            .remove(&(server.to_owned(), id.to_owned()))
    }

    /// An SSE stream announced `endpoint`: messages POSTed there are
    /// answered on it.
    pub(crate) fn stream_opened(
        &self,
        server: &str,
        endpoint: String,
        to: UnboundedSender<Vec<u8>>,
    ) {
        if let Ok(mut streams) = self.streams.lock() {
            streams.retain(|_, s| !s.is_closed());
            streams.insert((server.to_owned(), endpoint), to);
        }
    }

    /// The stream that answers POSTs to `endpoint`, if one is open.
    pub(crate) fn stream_for(
        &self,
        server: &str,
        endpoint: &str,
    ) -> Option<UnboundedSender<Vec<u8>>> {
        let streams = self.streams.lock().ok()?;
        streams
            .get(&(server.to_owned(), endpoint.to_owned()))
            .filter(|s| !s.is_closed())
            .cloned()
    }
}
