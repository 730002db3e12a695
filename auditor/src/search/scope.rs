//! Which sessions a reader looks at, by who ran them: their labels
//! (`--label KEY=VALUE` when they were recorded) and their node (the host
//! that recorded them). Resolved here, above the engine: the matching
//! sessions are picked from [`RecordStore::sessions`] and a search is
//! restricted to that set ([`SearchQuery::sessions`]), so an engine never
//! has to know what a label is, only how to keep to a set of sessions.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use crate::{AuditError, RecordStore, SearchQuery, SearchResults, SessionId, SessionInfo};

/// One `KEY=VALUE` a session's labels must hold, exactly (both sides
/// case-sensitive; the value is everything after the first `=`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelFilter {
    pub key: String,
    pub value: String,
}

/// A label filter that is not `KEY=VALUE`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScopeError {
    #[error("label filter {0:?} has no '='; write KEY=VALUE, e.g. pod=agent-7")]
    NoEquals(String),
    #[error("label filter {0:?} has no key before '='; write KEY=VALUE, e.g. pod=agent-7")]
    NoKey(String),
    #[error("--node is empty; give the node's name as `airlock audit sessions` shows it")]
    BlankNode,
}

impl FromStr for LabelFilter {
    type Err = ScopeError;

    fn from_str(text: &str) -> Result<Self, ScopeError> {
        let (key, value) = text
            .split_once('=')
            .ok_or_else(|| ScopeError::NoEquals(text.to_owned()))?;
        if key.is_empty() {
            return Err(ScopeError::NoKey(text.to_owned()));
        }
        Ok(Self {
            key: key.to_owned(),
            value: value.to_owned(),
        })
    }
}

impl fmt::Display for LabelFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.key, self.value)
    }
}

/// The sessions to look at: every label given must be held and the node
/// must match (AND). Empty: every session, those recorded before labels
/// existed included; with a filter, such a session (no labels) matches no
/// label.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionScope {
    pub labels: Vec<LabelFilter>,
    /// The node's name exactly, as recorded in [`SessionInfo::host`].
    pub node: Option<String>,
}

impl SessionScope {
    /// Checks the scope: a node given must name something.
    pub fn check(&self) -> Result<(), ScopeError> {
        match &self.node {
            Some(node) if node.trim().is_empty() => Err(ScopeError::BlankNode),
            _ => Ok(()),
        }
    }

    /// No filter: every session.
    pub fn is_everything(&self) -> bool {
        self.labels.is_empty() && self.node.is_none()
    }

    /// Whether a session with this info is in scope.
    pub fn admits(&self, info: &SessionInfo) -> bool {
        self.node.as_ref().is_none_or(|node| *node == info.host)
            && self
                .labels
                .iter()
                .all(|l| info.labels.get(&l.key) == Some(&l.value))
    }

    /// The ids of the store's sessions in scope, oldest first.
    pub fn sessions(&self, store: &dyn RecordStore) -> Result<Vec<SessionId>, AuditError> {
        Ok(store
            .sessions()?
            .into_iter()
            .filter(|s| self.admits(&s.info))
            .map(|s| s.id)
            .collect())
    }

    /// `query` over the sessions in scope only: the set is handed to the
    /// engine as [`SearchQuery::sessions`] (narrowed further by any set the
    /// query already had).
    pub fn search(
        &self,
        store: &dyn RecordStore,
        query: &SearchQuery,
    ) -> Result<SearchResults, AuditError> {
        if self.is_everything() {
            return store.search(query);
        }
        let mut in_scope = self.sessions(store)?;
        if let Some(already) = &query.sessions {
            let already: BTreeSet<&SessionId> = already.iter().collect();
            in_scope.retain(|id| already.contains(id));
        }
        store.search(&SearchQuery {
            sessions: Some(in_scope),
            ..query.clone()
        })
    }
}
