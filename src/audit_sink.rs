//! Turns the proxy's events into audit records: each event is one record
//! (see `airlock_proxy::events::Event`), already attributed to its exec.

use std::net::SocketAddr;
use std::sync::Arc;

use airlock_auditor::{ExecId, SessionRecorder};
use airlock_proxy::events::{Event, EventSink, SinkError, SyncFuture};

/// Finds the exec that owns a sandbox-side socket (peer address, is UDP).
pub(crate) type Attribute = Arc<dyn Fn(SocketAddr, bool) -> Option<ExecId> + Send + Sync>;

pub(crate) struct AuditSink {
    recorder: SessionRecorder,
    attribute: Option<Attribute>,
}

impl AuditSink {
    pub(crate) fn new(recorder: SessionRecorder) -> Arc<Self> {
        Self::attributed(recorder, None)
    }

    /// Records attributed to the exec that opened each connection or sent each query.
    pub(crate) fn attributed(recorder: SessionRecorder, attribute: Option<Attribute>) -> Arc<Self> {
        Arc::new(Self {
            recorder,
            attribute,
        })
    }
}

impl EventSink for AuditSink {
    fn emit(&self, event: Event) -> Result<(), SinkError> {
        self.recorder
            .record(event.into_record())
            .map(|_| ())
            .map_err(|e| SinkError(e.to_string()))
    }

    fn attribute(&self, client: SocketAddr, udp: bool) -> Option<ExecId> {
        self.attribute.as_ref().and_then(|f| f(client, udp))
    }

    fn sync(&self) -> SyncFuture<'_> {
        let recorder = self.recorder.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || recorder.sync())
                .await
                .map_err(|e| SinkError(e.to_string()))?
                .map_err(|e| SinkError(e.to_string()))
        })
    }
}

/// Sends every event to several sinks; fails if any of them fails.
pub(crate) struct Tee(pub Vec<Arc<dyn EventSink>>);

impl EventSink for Tee {
    fn emit(&self, event: Event) -> Result<(), SinkError> {
        let mut result = Ok(());
        for sink in &self.0 {
            if let Err(e) = sink.emit(event.clone()) {
                result = Err(e);
            }
        }
        result
    }

    fn emit_all(&self, events: Vec<Event>) -> Result<(), SinkError> {
        let mut result = Ok(());
        for sink in &self.0 {
            if let Err(e) = sink.emit_all(events.clone()) {
                result = Err(e);
            }
        }
        result
    }

    /// The first sink that can tell.
    fn attribute(&self, client: SocketAddr, udp: bool) -> Option<ExecId> {
        self.0.iter().find_map(|sink| sink.attribute(client, udp))
    }

    fn sync(&self) -> SyncFuture<'_> {
        Box::pin(async move {
            for sink in &self.0 {
                sink.sync().await?;
            }
            Ok(())
        })
    }
}
