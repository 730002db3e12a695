//! Telling a step's client which of its requests an `[[ask]]` rule holds,
//! while it waits: the same line `airlock run` prints, with the commands
//! that decide it (`session exec` prints it; `airlock mcp` puts it in the
//! tool's result). The session's server has no terminal of the client's, so
//! the client asks the session's approvals socket (the one `airlock
//! approvals` reads) for the requests its step sent.

use std::collections::HashSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::notices::{Held, holding_line};

/// How often the client looks; a request is held for seconds at least.
const LOOK_EVERY: Duration = Duration::from_millis(300);

/// Until aborted: print a line for each request of `step` (every step when
/// unknown) in `session` as it is held.
pub(crate) async fn announce(session: String, step: Option<u64>) {
    watch(session, step, |line| crate::terminal::eprint_line(&line)).await;
}

/// Until aborted: `tell` the line of each request of `step` (every step
/// when unknown) in `session` once, as it is held.
pub(crate) async fn watch(session: String, step: Option<u64>, mut tell: impl FnMut(String)) {
    let mut told: HashSet<String> = HashSet::new();
    loop {
        if let Ok(listed) = crate::approvals::client::list().await {
            let pending = listed
                .into_iter()
                .filter(|l| l.session == session)
                .flat_map(|l| l.pending);
            for p in pending {
                let mine = step.is_none_or(|s| p["sender"]["step"].as_u64() == Some(s));
                let Some(id) = p["id"].as_str() else { continue };
                if mine && told.insert(id.to_owned()) {
                    tell(line(id, &p));
                }
            }
        }
        tokio::time::sleep(LOOK_EVERY).await;
    }
}

fn line(id: &str, p: &Value) -> String {
    let text = |key: &str| p[key].as_str().unwrap_or_default();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
    let left = p["expires_at_us"]
        .as_u64()
        .unwrap_or(now)
        .saturating_sub(now);
    holding_line(&Held {
        approval: id,
        method: text("method"),
        url: text("url"),
        rule: text("rule"),
        reason: p["reason"].as_str(),
        within: Duration::from_micros(left),
    })
}
