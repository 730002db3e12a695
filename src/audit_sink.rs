//! Turns the proxy's events into audit records: each event is one record
//! (see `airlock_proxy::events::Event`), already attributed to its exec.

use std::net::SocketAddr;
use std::sync::Arc;

use airlock_auditor::{ExecId, SessionRecorder};
use airlock_proxy::events::{Event, EventSink, SinkError, SyncFuture};

use crate::ship::ShipGate;

/// Finds the exec that owns a sandbox-side socket (peer address, is UDP).
pub(crate) type Attribute = Arc<dyn Fn(SocketAddr, bool) -> Option<ExecId> + Send + Sync>;

pub(crate) struct AuditSink {
    recorder: SessionRecorder,
    attribute: Option<Attribute>,
    /// `--audit-ship-required`: decisions wait for the central store.
    gate: Option<Arc<ShipGate>>,
}

impl AuditSink {
    pub(crate) fn new(recorder: SessionRecorder) -> Self {
        Self {
            recorder,
            attribute: None,
            gate: None,
        }
    }

    /// Records attributed to the exec that opened each connection or sent each query.
    pub(crate) fn attributed(self, attribute: Option<Attribute>) -> Self {
        Self { attribute, ..self }
    }

    /// Decisions held until their events are shipped (`--audit-ship-required`).
    pub(crate) fn gated(self, gate: Option<ShipGate>) -> Self {
        Self {
            gate: gate.map(Arc::new),
            ..self
        }
    }
}

impl EventSink for AuditSink {
    fn emit(&self, event: Event) -> Result<(), SinkError> {
        let seq = self
            .recorder
            .record(event.into_record())
            .map_err(|e| SinkError(e.to_string()))?;
        if let Some(gate) = &self.gate {
            gate.recorded(seq);
        }
        Ok(())
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

    fn confirm(&self) -> SyncFuture<'_> {
        let gate = self.gate.clone();
        Box::pin(async move {
            match gate {
                Some(gate) => tokio::task::spawn_blocking(move || gate.confirm())
                    .await
                    .map_err(|e| SinkError(e.to_string()))?,
                None => Ok(()),
            }
        })
    }
}

/// Sends every event to several sinks; fails if any of them fails. A sink
/// gets only the events it wants, each sink but the last a copy.
pub(crate) struct Tee(pub(crate) Vec<Arc<dyn EventSink>>);

impl EventSink for Tee {
    fn emit(&self, event: Event) -> Result<(), SinkError> {
        let mut result = Ok(());
        let Some((last, others)) = self.0.split_last() else {
            return result;
        };
        for sink in others.iter().filter(|sink| sink.wants(&event)) {
            if let Err(e) = sink.emit(event.clone()) {
                result = Err(e);
            }
        }
        if last.wants(&event)
            && let Err(e) = last.emit(event)
        {
            result = Err(e);
        }
        result
    }

    fn emit_all(&self, mut events: Vec<Event>) -> Result<(), SinkError> {
        let mut result = Ok(());
        let Some((last, others)) = self.0.split_last() else {
            return result;
        };
        for sink in others {
            let wanted: Vec<Event> = events.iter().filter(|e| sink.wants(e)).cloned().collect();
            if !wanted.is_empty()
                && let Err(e) = sink.emit_all(wanted)
            {
                result = Err(e);
            }
        }
        events.retain(|e| last.wants(e));
        if !events.is_empty()
            && let Err(e) = last.emit_all(events)
        {
            result = Err(e);
        }
        result
    }

    fn wants(&self, event: &Event) -> bool {
        self.0.iter().any(|sink| sink.wants(event))
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

    fn confirm(&self) -> SyncFuture<'_> {
        Box::pin(async move {
            for sink in &self.0 {
                sink.confirm().await?;
            }
            Ok(())
        })
    }
}
