//! The one way events leave the proxy: an [`Outlet`] hands them to the sink
//! and keeps the proxy failing closed once the sink has failed.
//!
//! On a connection worker, events wait in a short per-thread queue and reach
//! the sink when the worker is about to sleep, or as soon as `MAX_QUEUED` are
//! waiting. Why: handing one over costs a `write(2)` of its JSON line and,
//! with an audit database, waking the audit writer's thread. Done inline,
//! both sat between reading a client's request and forwarding it, and
//! between reading the response and passing it on, on every request (see
//! BENCHMARKS.md). Waiting in the queue is what `EventSink::emit` already
//! promised ("queued, not durable"): if the sink fails when the queue is
//! handed over, nothing more is forwarded. `--audit-sync` does not queue: a
//! decision is durable before its request is forwarded.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use airlock_record::ExecId;

use crate::events::{Event, EventSink, SinkError};

/// How many events a worker holds back at most, so a worker that never goes
/// idle under load still hands them over in small batches.
const MAX_QUEUED: usize = 64;

/// Events waiting on this thread, each with the outlet it goes to.
type Queue = Vec<(Arc<Outlet>, Event)>;

thread_local! {
    /// `None` on threads that do not queue (anything but a worker).
    static QUEUE: RefCell<Option<Queue>> = const { RefCell::new(None) };
}

/// A sink with its fail-closed switch.
pub(crate) struct Outlet {
    sink: Arc<dyn EventSink>,
    failed: AtomicBool,
}

impl Outlet {
    pub(crate) fn new(sink: Arc<dyn EventSink>) -> Arc<Self> {
        Arc::new(Self {
            sink,
            failed: AtomicBool::new(false),
        })
    }

    /// The exec that owns a sandbox-side socket, if the sink can tell.
    pub(crate) fn attribute(&self, client: SocketAddr, udp: bool) -> Option<ExecId> {
        self.sink.attribute(client, udp)
    }

    /// True once the sink has failed.
    pub(crate) fn failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// Queue `event` (on a worker) or hand it over now (elsewhere).
    pub(crate) fn emit(self: &Arc<Self>, event: Event) -> Result<(), SinkError> {
        let event = QUEUE.with_borrow_mut(|queue| match queue {
            Some(queue) => {
                queue.push((self.clone(), event));
                None
            }
            None => Some(event),
        });
        match event {
            Some(event) => self.hand_over(vec![event]),
            None => {
                if QUEUE.with_borrow(|q| q.as_ref().is_some_and(|q| q.len() >= MAX_QUEUED)) {
                    flush_this_thread();
                }
                Ok(())
            }
        }
    }

    /// Hand `event` over now, after whatever this thread queued, and wait
    /// until everything handed over is durable.
    pub(crate) async fn emit_durably(&self, event: Event) -> Result<(), SinkError> {
        flush_this_thread();
        self.hand_over(vec![event])?;
        if let Err(e) = self.sink.sync().await {
            self.fail(&e);
            return Err(e);
        }
        self.sink.confirm().await
    }

    fn hand_over(&self, events: Vec<Event>) -> Result<(), SinkError> {
        let result = self.sink.emit_all(events);
        if let Err(e) = &result {
            self.fail(e);
        }
        result
    }

    fn fail(&self, e: &SinkError) {
        if !self.failed.swap(true, Ordering::AcqRel) {
            tracing::error!("{e}; refusing all further traffic");
        }
    }
}

/// Make this thread queue its events; it must call [`flush_this_thread`]
/// before it sleeps and before it ends.
pub(crate) fn queue_on_this_thread() {
    QUEUE.set(Some(Vec::with_capacity(MAX_QUEUED)));
}

/// Hand every event this thread queued to its sink, in order.
pub(crate) fn flush_this_thread() {
    let Some(mut queued) = QUEUE.with_borrow_mut(|q| q.as_mut().map(std::mem::take)) else {
        return;
    };
    while !queued.is_empty() {
        let outlet = queued[0].0.clone();
        let same = queued
            .iter()
            .position(|(o, _)| !Arc::ptr_eq(o, &outlet))
            .unwrap_or(queued.len());
        let batch = queued.drain(..same).map(|(_, event)| event).collect();
        // A failure is remembered by the outlet: nothing more is forwarded.
        let _ = outlet.hand_over(batch);
    }
    // Keep the allocation for the next batch.
    QUEUE.with_borrow_mut(|q| {
        if let Some(q) = q
            && q.is_empty()
        {
            *q = queued;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{ConnId, MemorySink};

    fn closed(id: u64) -> Event {
        Event::ConnectionClosed {
            ts: crate::events::TimestampUs(0),
            conn: ConnId(id),
            error: None,
            connection: Box::new(airlock_record::TcpConnection {
                exec_id: None,
                connection: Some(ConnId(id)),
                dst: "192.0.2.1:443".into(),
                host: None,
                port: 443,
                decision: crate::events::Verdict::Allow,
                rule: None,
                reason: None,
                bytes_up: 0,
                bytes_down: 0,
                duration_ms: None,
            }),
        }
    }

    fn ids(sink: &MemorySink) -> Vec<u64> {
        sink.0
            .lock()
            .unwrap()
            .iter()
            .map(|e| match e {
                Event::ConnectionClosed { conn, .. } => conn.0,
                _ => unreachable!(),
            })
            .collect()
    }

    #[test]
    fn a_queueing_thread_hands_events_over_in_order_when_flushed_or_full() {
        let sink = Arc::new(MemorySink::default());
        let outlet = Outlet::new(sink.clone());
        std::thread::scope(|s| {
            s.spawn(|| {
                queue_on_this_thread();
                outlet.emit(closed(1)).unwrap();
                outlet.emit(closed(2)).unwrap();
                assert!(ids(&sink).is_empty(), "held back until flushed");
                flush_this_thread();
                assert_eq!(ids(&sink), [1, 2]);
                for id in 3..3 + MAX_QUEUED as u64 {
                    outlet.emit(closed(id)).unwrap();
                }
                assert_eq!(
                    ids(&sink).len(),
                    2 + MAX_QUEUED,
                    "a full queue is handed over"
                );
            });
        });
        // Any other thread hands over at once.
        outlet.emit(closed(99)).unwrap();
        assert_eq!(ids(&sink).last(), Some(&99));
    }

    struct Broken;
    impl EventSink for Broken {
        fn emit(&self, _: Event) -> Result<(), SinkError> {
            Err(SinkError("disk full".into()))
        }
    }

    #[test]
    fn a_sink_failure_found_when_flushing_refuses_everything_after() {
        let outlet = Outlet::new(Arc::new(Broken));
        std::thread::scope(|s| {
            s.spawn(|| {
                queue_on_this_thread();
                outlet.emit(closed(1)).unwrap();
                flush_this_thread();
            });
        });
        assert!(outlet.failed(), "the proxy now refuses all traffic");
    }
}
