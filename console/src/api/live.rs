//! A running session, followed: server-sent events
//! (html.spec.whatwg.org/multipage/server-sent-events.html) carrying each
//! new record within a poll interval of its commit.
//!
//! The recorder is another process writing the same database, so there is
//! nothing to subscribe to; the stream polls for rows after the last one
//! sent, on the store's `(sid, seq)` index.

use std::sync::Arc;
use std::time::{Duration, Instant};

use airlock_auditor::timeline::Depths;
use airlock_record::{Seq, SessionId, StoredEvent};
use bytes::Bytes;
use http::Response;
use tokio::sync::mpsc;

use super::{Params, resolve};
use crate::ConsoleError;
use crate::render::Listed;
use crate::respond::{self, Body};
use crate::server::State;

/// Well inside the "within a second" a person watching expects.
const POLL: Duration = Duration::from_millis(250);
/// A comment line this often keeps proxies and browsers from timing the
/// stream out, and finds out when the reader has gone.
const HEARTBEAT: Duration = Duration::from_secs(15);

pub(super) async fn stream(state: Arc<State>, id: String, params: &Params) -> Response<Body> {
    let after = match params.get("after").map(str::parse::<u64>) {
        None => Seq(0),
        Some(Ok(n)) => Seq(n),
        Some(Err(_)) => {
            return respond::error(&ConsoleError::BadRequest(
                "after= must be an event number".into(),
            ));
        }
    };
    let lookup = Arc::clone(&state);
    let id = match tokio::task::spawn_blocking(move || resolve(&lookup, &id)).await {
        Ok(Ok(id)) => id,
        Ok(Err(e)) => return respond::error(&e),
        Err(e) => return respond::error(&ConsoleError::Task(e)),
    };
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(async move {
        if let Err(e) = follow(state, id, after, tx).await {
            tracing::debug!(error = %e, "console: live stream ended");
        }
    });
    respond::event_stream(rx)
}

/// What one poll found.
struct Poll {
    events: Vec<StoredEvent>,
    ended: bool,
}

async fn follow(
    state: Arc<State>,
    id: SessionId,
    after: Seq,
    tx: mpsc::Sender<Bytes>,
) -> Result<(), ConsoleError> {
    // Depths need every exec from the start, so the first read is whole.
    let mut depths = Depths::default();
    let mut last = Seq(0);
    let mut first = true;
    let mut quiet_since = Instant::now();
    loop {
        let from = if first { Seq(0) } else { last };
        let poll = read(&state, &id, from, first).await?;
        first = false;
        for ev in &poll.events {
            let listed = Listed::of(ev, &mut depths);
            last = last.max(ev.seq);
            if ev.seq > after {
                let data = serde_json::to_string(&listed).unwrap_or_default();
                if !send(&tx, format!("event: ev\ndata: {data}\n\n")).await {
                    return Ok(());
                }
                quiet_since = Instant::now();
            }
        }
        if poll.ended {
            send(&tx, "event: end\ndata: {}\n\n".to_owned()).await;
            return Ok(());
        }
        if quiet_since.elapsed() >= HEARTBEAT {
            if !send(&tx, ": still here\n\n".to_owned()).await {
                return Ok(());
            }
            quiet_since = Instant::now();
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Events after `from` (all of them when `whole`), and whether the session
/// had ended before they were read, so none recorded before its end is
/// missed.
async fn read(
    state: &Arc<State>,
    id: &SessionId,
    from: Seq,
    whole: bool,
) -> Result<Poll, ConsoleError> {
    let state = Arc::clone(state);
    let id = id.clone();
    tokio::task::spawn_blocking(move || {
        let ended = state.store.session(&id)?.ended_us.is_some();
        let events = if whole {
            state.store.events(&id, None)?
        } else {
            state.store.events_after(&id, from)?
        };
        Ok(Poll { events, ended })
    })
    .await?
}

/// False when the reader has gone.
async fn send(tx: &mpsc::Sender<Bytes>, message: String) -> bool {
    tx.send(Bytes::from(message)).await.is_ok()
}
