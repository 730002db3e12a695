//! Counters for operators, derived from the same events the audit sees, and
//! rendered in the Prometheus text exposition format (version 0.0.4, see
//! <https://prometheus.io/docs/instrumenting/exposition_formats/>).
//!
//! Written by hand rather than with a metrics crate: a dozen series do not
//! justify a dependency, and the format is a few lines of text.
//!
//! Host labels are bounded: after [`MAX_HOST_LABELS`] distinct hosts every new
//! one is counted as `other`, so a client cycling through random names cannot
//! grow the process's memory or a Prometheus server's series count.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use crate::events::{Event, Verdict};

/// Distinct `host` label values kept before new hosts become `other`.
pub const MAX_HOST_LABELS: usize = 1000;
/// The label used once [`MAX_HOST_LABELS`] is reached.
pub const OTHER_HOST: &str = "other";
/// Upper bounds (seconds) of the request latency histogram's buckets.
pub const LATENCY_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

/// Everything `/metrics` reports. Cheap to update from any task.
#[derive(Debug, Default)]
pub struct Metrics {
    requests: Mutex<RequestCounts>,
    latency: Histogram,
    dns: VerdictCounts,
    connections: VerdictCounts,
    connections_open: AtomicI64,
    events: AtomicU64,
    audit_lag_us: AtomicU64,
    audit_unhealthy: AtomicU64,
    reloads: AtomicU64,
    reload_failures: AtomicU64,
    approvals: ApprovalCounts,
    shipping: ShippingSource,
}

/// How far the record is shipped to a central store (`--audit-ship`), read
/// when `/metrics` is asked: the binary runs the shipper, the proxy only
/// reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ShippingGauges {
    /// Events recorded here and not yet in the central store.
    pub pending_events: u64,
    /// How long the oldest of them has waited.
    pub lag: Duration,
    pub shipped_events: u64,
    pub errors: u64,
}

type ReadShipping = Box<dyn Fn() -> ShippingGauges + Send + Sync>;

#[derive(Default)]
struct ShippingSource(std::sync::OnceLock<ReadShipping>);

impl std::fmt::Debug for ShippingSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.get().is_some() {
            "shipping"
        } else {
            "not shipping"
        })
    }
}

/// Held requests, by how their wait ended.
#[derive(Debug, Default)]
struct ApprovalCounts {
    requested: AtomicU64,
    /// Indexed as [`APPROVAL_OUTCOMES`].
    ended: [AtomicU64; 4],
}

/// The `outcome` label values of `airlock_approvals_total`.
const APPROVAL_OUTCOMES: [&str; 4] = ["approved", "denied", "expired", "abandoned"];

/// Requests by host label, then by decision (indexed as [`DECISIONS`]).
/// Keyed by host alone so that counting a known host looks it up by `&str`
/// and allocates nothing: this runs for every request.
#[derive(Debug, Default)]
struct RequestCounts(HashMap<String, [u64; 3]>);

/// The `decision` label values, in the order [`RequestCounts`] keeps them.
const DECISIONS: [&str; 3] = ["allow", "deny", "report"];

#[derive(Debug, Default)]
struct VerdictCounts {
    allow: AtomicU64,
    deny: AtomicU64,
    report: AtomicU64,
}

impl VerdictCounts {
    fn add(&self, verdict: Verdict) {
        let counter = match verdict {
            Verdict::Allow => &self.allow,
            Verdict::Deny => &self.deny,
            Verdict::Report => &self.report,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn all(&self) -> [(&'static str, u64); 3] {
        [
            ("allow", self.allow.load(Ordering::Relaxed)),
            ("deny", self.deny.load(Ordering::Relaxed)),
            ("report", self.report.load(Ordering::Relaxed)),
        ]
    }
}

#[derive(Debug, Default)]
struct Histogram {
    /// Non-cumulative counts per bucket; the last slot is +Inf.
    buckets: [AtomicU64; LATENCY_BUCKETS.len() + 1],
    sum_us: AtomicU64,
    count: AtomicU64,
}

impl Histogram {
    fn observe(&self, micros: u64) {
        let seconds = micros as f64 / 1e6;
        let slot = LATENCY_BUCKETS
            .iter()
            .position(|le| seconds <= *le)
            .unwrap_or(LATENCY_BUCKETS.len());
        if let Some(bucket) = self.buckets.get(slot) {
            bucket.fetch_add(1, Ordering::Relaxed);
        }
        self.sum_us.fetch_add(micros, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }
}

fn decision_index(verdict: Verdict) -> usize {
    match verdict {
        Verdict::Allow => 0,
        Verdict::Deny => 1,
        Verdict::Report => 2,
    }
}

/// The host part of a request URL as the proxy records it (`https://h:p/x`),
/// lowercased. Sliced rather than parsed, and borrowed when it is already
/// lowercase (the proxy's own URLs always are): this runs for every request.
fn host_of(url: &str) -> Cow<'_, str> {
    let Some((_, rest)) = url.split_once("://") else {
        return Cow::Borrowed("unknown");
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let authority = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.split(':').next().unwrap_or_default(),
    };
    if host.is_empty() {
        Cow::Borrowed("unknown")
    } else if host.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(host.to_ascii_lowercase())
    } else {
        Cow::Borrowed(host)
    }
}

impl Metrics {
    /// Count one event (called for every event the proxy emits).
    pub fn observe(&self, event: &Event) {
        self.events.fetch_add(1, Ordering::Relaxed);
        match event {
            Event::Dns { query, .. } => self.dns.add(query.decision),
            Event::Connection { connection, .. } => {
                self.connections.add(connection.decision);
                self.connections_open.fetch_add(1, Ordering::Relaxed);
            }
            Event::ConnectionClosed { .. } => {
                self.connections_open.fetch_sub(1, Ordering::Relaxed);
            }
            Event::Request { exchange, .. } => {
                self.count_request(exchange.decision, host_of(&exchange.url));
            }
            Event::Response { exchange, .. } => {
                // Until the response ended (an upgrade's: until its 101).
                let total_ms = exchange.ms_total.unwrap_or_default();
                self.latency.observe((total_ms * 1000.0) as u64);
            }
            Event::ApprovalRequested { .. } => {
                self.approvals.requested.fetch_add(1, Ordering::Relaxed);
            }
            Event::ApprovalDecided { decided, .. } => {
                if let Some(at) = APPROVAL_OUTCOMES.iter().position(|o| *o == decided.outcome) {
                    self.approvals.ended[at].fetch_add(1, Ordering::Relaxed);
                }
            }
            // Counted as the requests that carried them.
            Event::McpCall { .. } => {}
        }
    }

    fn count_request(&self, verdict: Verdict, host: Cow<'_, str>) {
        let decision = decision_index(verdict);
        let Ok(mut counts) = self.requests.lock() else {
            return;
        };
        if let Some(n) = counts.0.get_mut(host.as_ref()) {
            n[decision] += 1;
            return;
        }
        let distinct = counts.0.len() - usize::from(counts.0.contains_key(OTHER_HOST));
        let label = if distinct < MAX_HOST_LABELS {
            host.into_owned()
        } else {
            OTHER_HOST.to_owned()
        };
        counts.0.entry(label).or_default()[decision] += 1;
    }

    /// How long the audit store took, last time, to make everything queued durable.
    pub fn set_audit_lag(&self, lag: Duration) {
        let micros = u64::try_from(lag.as_micros()).unwrap_or(u64::MAX);
        self.audit_lag_us.store(micros, Ordering::Relaxed);
    }

    /// Report shipping from `read` (once; later calls are ignored).
    pub fn set_shipping(&self, read: impl Fn() -> ShippingGauges + Send + Sync + 'static) {
        let _ = self.shipping.0.set(Box::new(read));
    }

    /// Whether the audit store is failing (then the proxy refuses everything).
    pub fn set_audit_healthy(&self, healthy: bool) {
        self.audit_unhealthy
            .store(u64::from(!healthy), Ordering::Relaxed);
    }

    /// Count a policy reload attempt.
    pub fn policy_reloaded(&self, ok: bool) {
        let counter = if ok {
            &self.reloads
        } else {
            &self.reload_failures
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Connections currently open through the proxy.
    pub fn open_connections(&self) -> i64 {
        self.connections_open.load(Ordering::Relaxed)
    }

    /// The Prometheus text exposition of every series.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(4096);
        self.render_requests(&mut out);
        self.render_latency(&mut out);
        header(
            &mut out,
            "airlock_dns_queries_total",
            "counter",
            "DNS queries answered, by decision.",
        );
        for (decision, n) in self.dns.all() {
            let _ = writeln!(
                out,
                "airlock_dns_queries_total{{decision=\"{decision}\"}} {n}"
            );
        }
        header(
            &mut out,
            "airlock_connections_total",
            "counter",
            "Captured TCP connections, by connection-level decision.",
        );
        for (decision, n) in self.connections.all() {
            let _ = writeln!(
                out,
                "airlock_connections_total{{decision=\"{decision}\"}} {n}"
            );
        }
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        gauge(
            &mut out,
            "airlock_connections_open",
            "Client connections currently open.",
            self.open_connections().max(0).to_string(),
        );
        gauge(
            &mut out,
            "airlock_audit_lag_seconds",
            "Time the audit store last took to make every queued event durable.",
            seconds(load(&self.audit_lag_us)),
        );
        gauge(
            &mut out,
            "airlock_audit_failed",
            "1 once the audit store failed (all traffic is then refused).",
            load(&self.audit_unhealthy).to_string(),
        );
        counter(
            &mut out,
            "airlock_events_total",
            "Events emitted to the audit sinks.",
            load(&self.events),
        );
        counter(
            &mut out,
            "airlock_policy_reloads_total",
            "Successful policy reloads.",
            load(&self.reloads),
        );
        counter(
            &mut out,
            "airlock_policy_reload_failures_total",
            "Policy reloads rejected (the previous policy stayed in force).",
            load(&self.reload_failures),
        );
        self.render_approvals(&mut out);
        self.render_shipping(&mut out);
        out
    }

    fn render_shipping(&self, out: &mut String) {
        let Some(read) = self.shipping.0.get() else {
            return;
        };
        let now = read();
        gauge(
            out,
            "airlock_audit_ship_pending_events",
            "Events recorded here and not yet in the central store.",
            now.pending_events.to_string(),
        );
        gauge(
            out,
            "airlock_audit_ship_lag_seconds",
            "How long the oldest event not yet in the central store has waited.",
            seconds(u64::try_from(now.lag.as_micros()).unwrap_or(u64::MAX)),
        );
        counter(
            out,
            "airlock_audit_shipped_events_total",
            "Events shipped to the central store.",
            now.shipped_events,
        );
        counter(
            out,
            "airlock_audit_ship_errors_total",
            "Failed attempts to reach or write the central store.",
            now.errors,
        );
    }

    fn render_approvals(&self, out: &mut String) {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let ended: u64 = self.approvals.ended.iter().map(load).sum();
        gauge(
            out,
            "airlock_approvals_pending",
            "Requests an [[ask]] rule holds for a person's decision now.",
            load(&self.approvals.requested)
                .saturating_sub(ended)
                .to_string(),
        );
        header(
            out,
            "airlock_approvals_total",
            "counter",
            "Held requests whose wait ended, by outcome.",
        );
        for (outcome, n) in APPROVAL_OUTCOMES.iter().zip(&self.approvals.ended) {
            let _ = writeln!(
                out,
                "airlock_approvals_total{{outcome=\"{outcome}\"}} {}",
                load(n)
            );
        }
    }

    fn render_requests(&self, out: &mut String) {
        header(
            out,
            "airlock_requests_total",
            "counter",
            "HTTP requests, by decision and host.",
        );
        let Ok(counts) = self.requests.lock() else {
            return;
        };
        let mut rows: Vec<_> = counts
            .0
            .iter()
            .flat_map(|(host, n)| DECISIONS.iter().zip(n).map(move |(d, n)| (*d, host, *n)))
            .filter(|(_, _, n)| *n > 0)
            .collect();
        rows.sort();
        for (decision, host, n) in rows {
            let _ = writeln!(
                out,
                "airlock_requests_total{{decision=\"{decision}\",host=\"{}\"}} {n}",
                escape(host)
            );
        }
    }

    fn render_latency(&self, out: &mut String) {
        let name = "airlock_request_duration_seconds";
        header(
            out,
            name,
            "histogram",
            "From a request reaching the proxy to the end of its response.",
        );
        let mut cumulative = 0;
        for (i, le) in LATENCY_BUCKETS.iter().enumerate() {
            cumulative += self.latency.buckets[i].load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{le=\"{le}\"}} {cumulative}");
        }
        let count = self.latency.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let _ = writeln!(
            out,
            "{name}_sum {}",
            seconds(self.latency.sum_us.load(Ordering::Relaxed))
        );
        let _ = writeln!(out, "{name}_count {count}");
    }
}

fn seconds(micros: u64) -> String {
    format!("{}", micros as f64 / 1e6)
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

fn gauge(out: &mut String, name: &str, help: &str, value: String) {
    header(out, name, "gauge", help);
    let _ = writeln!(out, "{name} {value}");
}

fn counter(out: &mut String, name: &str, help: &str, value: u64) {
    header(out, name, "counter", help);
    let _ = writeln!(out, "{name} {value}");
}

/// Label values escape backslash, double quote and newline.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{ConnId, RequestId, TimestampUs, test_exchange};

    fn request(url: &str, verdict: Verdict) -> Event {
        Event::Request {
            ts: TimestampUs(0),
            conn: ConnId(1),
            request: RequestId(1),
            credentials: Vec::new(),
            rule_to_add: None,
            exchange: Box::new(test_exchange(url, verdict)),
        }
    }

    #[test]
    fn requests_are_counted_by_decision_and_host() {
        let m = Metrics::default();
        m.observe(&request("https://api.test/a", Verdict::Allow));
        m.observe(&request("https://api.test:8443/b", Verdict::Allow));
        m.observe(&request("http://evil.test/", Verdict::Deny));
        let text = m.render();
        assert!(text.contains("airlock_requests_total{decision=\"allow\",host=\"api.test\"} 2"));
        assert!(text.contains("airlock_requests_total{decision=\"deny\",host=\"evil.test\"} 1"));
    }

    #[test]
    fn host_labels_are_capped() {
        let m = Metrics::default();
        for i in 0..MAX_HOST_LABELS + 5 {
            m.observe(&request(&format!("https://h{i}.test/"), Verdict::Deny));
        }
        let text = m.render();
        assert!(text.contains("host=\"other\"} 5"), "{text}");
        let series = text
            .lines()
            .filter(|l| l.starts_with("airlock_requests_total{"))
            .count();
        assert_eq!(series, MAX_HOST_LABELS + 1);
    }

    #[test]
    fn latency_histogram_is_cumulative() {
        let m = Metrics::default();
        for total_us in [500, 20_000, 20_000_000] {
            let mut exchange = test_exchange("https://example.com/", Verdict::Allow);
            exchange.status = Some(200);
            exchange.ms_total = Some(total_us as f64 / 1000.0);
            m.observe(&Event::Response {
                ts: TimestampUs(0),
                conn: ConnId(1),
                request: RequestId(1),
                exchange: Box::new(exchange),
            });
        }
        let text = m.render();
        assert!(text.contains("airlock_request_duration_seconds_bucket{le=\"0.001\"} 1"));
        assert!(text.contains("airlock_request_duration_seconds_bucket{le=\"0.025\"} 2"));
        assert!(text.contains("airlock_request_duration_seconds_bucket{le=\"10\"} 2"));
        assert!(text.contains("airlock_request_duration_seconds_bucket{le=\"+Inf\"} 3"));
        assert!(text.contains("airlock_request_duration_seconds_count 3"));
    }

    #[test]
    fn hosts_are_sliced_from_recorded_urls() {
        assert_eq!(host_of("https://api.test/a"), "api.test");
        assert_eq!(host_of("https://API.Test:8443/b?c"), "api.test");
        assert_eq!(host_of("http://[2001:db8::1]:80/"), "2001:db8::1");
        assert_eq!(host_of("http://user@h.test#f"), "h.test");
        assert_eq!(host_of("/relative"), "unknown");
        assert_eq!(host_of("http:///"), "unknown");
        assert!(matches!(host_of("https://api.test/a"), Cow::Borrowed(_)));
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
