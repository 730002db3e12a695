//! What every OCSF event carries, whatever its class: the class and
//! activity, the time, `metadata` (product, version, a stable uid, the
//! session's labels as tags), the node as `device`, the session and the exec
//! behind the event as `actor`, the verdict as `action`/`disposition`, the
//! rule as `firewall_rule`, and airlock's own words, verbatim, under
//! `unmapped.airlock`.

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use super::ExecInfo;
use crate::{ExecId, Note, SessionSummary, StoredEvent, Verdict};

/// The OCSF schema version the events follow (the newest that the
/// validator in the tests, `ocsf-json-schema`, ships).
pub const OCSF_VERSION: &str = "1.8.0";

/// The profiles every event declares: `host` (the node as `device`, the
/// exec as `actor` on network classes) and `security_control` (the verdict
/// as `action`/`disposition`, the rule as `firewall_rule`, the policy).
const PROFILES: [&str; 2] = ["host", "security_control"];

/// One OCSF event class.
#[derive(Debug, Clone, Copy)]
pub(super) struct Class {
    uid: u32,
    name: &'static str,
    category_uid: u32,
    category_name: &'static str,
}

pub(super) const HTTP_ACTIVITY: Class = Class::network(4002, "HTTP Activity");
pub(super) const DNS_ACTIVITY: Class = Class::network(4003, "DNS Activity");
pub(super) const NETWORK_ACTIVITY: Class = Class::network(4001, "Network Activity");
pub(super) const PROCESS_ACTIVITY: Class = Class::system(1007, "Process Activity");
pub(super) const FILE_ACTIVITY: Class = Class::system(1001, "File System Activity");
/// An MCP message is a call of a server's API (its tool) rather than an
/// HTTP request: API Activity's `api.operation` names the tool, which a
/// SIEM filters on, where HTTP Activity would bury it in a body.
pub(super) const API_ACTIVITY: Class = Class {
    uid: 6003,
    name: "API Activity",
    category_uid: 6,
    category_name: "Application Activity",
};
const BASE_EVENT: Class = Class {
    uid: 0,
    name: "Base Event",
    category_uid: 0,
    category_name: "Uncategorized",
};

impl Class {
    const fn network(uid: u32, name: &'static str) -> Self {
        Self {
            uid,
            name,
            category_uid: 4,
            category_name: "Network Activity",
        }
    }

    const fn system(uid: u32, name: &'static str) -> Self {
        Self {
            uid,
            name,
            category_uid: 1,
            category_name: "System Activity",
        }
    }

    /// The class's system and file events require `actor` and `device`;
    /// the network classes have them through the `host` profile.
    fn is_system(self) -> bool {
        self.category_uid == 1
    }
}

/// An activity of a class: its id and caption (99 is "Other", with
/// airlock's own name).
#[derive(Debug, Clone, Copy)]
pub(super) struct Activity(pub(super) u32, pub(super) &'static str);

/// What mapping one event needs: its session and the execs seen so far.
#[derive(Debug, Clone, Copy)]
pub(super) struct Context<'a> {
    pub(super) summary: &'a SessionSummary,
    pub(super) execs: &'a HashMap<ExecId, ExecInfo>,
    pub(super) ev: &'a StoredEvent,
}

/// An OCSF event being built.
#[derive(Debug)]
pub(super) struct Event<'a> {
    cx: Context<'a>,
    class: Class,
    fields: Map<String, Value>,
    airlock: Map<String, Value>,
}

impl<'a> Event<'a> {
    pub(super) fn new(cx: Context<'a>, class: Class, activity: Activity) -> Self {
        let Activity(activity_id, activity_name) = activity;
        let mut fields = Map::new();
        let mut put = |k: &str, v: Value| {
            fields.insert(k.to_owned(), v);
        };
        put("class_uid", class.uid.into());
        put("class_name", class.name.into());
        put("category_uid", class.category_uid.into());
        put("category_name", class.category_name.into());
        put("activity_id", activity_id.into());
        put("activity_name", activity_name.into());
        put("type_uid", (class.uid * 100 + activity_id).into());
        put(
            "type_name",
            format!("{}: {}", class.name, activity_name).into(),
        );
        put("time", millis(cx.ev.ts_us).into());
        put("severity_id", 1.into());
        put("severity", "Informational".into());
        put("metadata", metadata(cx));
        put("device", device(cx.summary));
        let mut airlock = Map::new();
        airlock.insert("session".into(), cx.summary.id.as_str().into());
        airlock.insert("seq".into(), cx.ev.seq.get().into());
        airlock.insert("kind".into(), cx.ev.kind.as_str().into());
        if let Some(exec) = &cx.ev.exec_id {
            airlock.insert("exec_id".into(), exec.as_str().into());
        }
        let mut event = Self {
            cx,
            class,
            fields,
            airlock,
        };
        event.actor(cx.ev.exec_id.as_ref());
        event
    }

    /// Sets a field of the event (replacing what was there).
    pub(super) fn set(&mut self, key: &str, value: Value) -> &mut Self {
        if !value.is_null() {
            self.fields.insert(key.to_owned(), value);
        }
        self
    }

    /// Keeps one of airlock's own fields, verbatim, in `unmapped.airlock`.
    pub(super) fn keep(&mut self, key: &str, value: Value) -> &mut Self {
        if !value.is_null() {
            self.airlock.insert(key.to_owned(), value);
        }
        self
    }

    pub(super) fn message(&mut self, text: String) -> &mut Self {
        self.set("message", text.into())
    }

    /// The policy's verdict: `action` (Allowed/Denied) and `disposition`
    /// (Allowed, Blocked, or Detected for `report`: allowed, but `deny`
    /// would have blocked it), kept verbatim as `unmapped.airlock.verdict`.
    pub(super) fn verdict(&mut self, verdict: Verdict) -> &mut Self {
        let (action, disposition, severity) = match verdict {
            Verdict::Allow => ((1, "Allowed"), (1, "Allowed"), (1, "Informational")),
            Verdict::Deny => ((2, "Denied"), (2, "Blocked"), (3, "Medium")),
            Verdict::Report => ((1, "Allowed"), (15, "Detected"), (2, "Low")),
        };
        self.outcome(action, disposition, severity);
        self.keep("verdict", verdict.as_str().into())
    }

    /// `action`, `disposition` and `severity` as (id, caption) pairs.
    pub(super) fn outcome(
        &mut self,
        action: (u32, &str),
        disposition: (u32, &str),
        severity: (u32, &str),
    ) -> &mut Self {
        self.set("action_id", action.0.into())
            .set("action", action.1.into())
            .set("disposition_id", disposition.0.into())
            .set("disposition", disposition.1.into())
            .set("severity_id", severity.0.into())
            .set("severity", severity.1.into())
    }

    /// The rule that decided (`policy.toml:12`) as `firewall_rule`, with
    /// its reason; the session's policy as `policy` (its file and the
    /// SHA-256 of its text).
    pub(super) fn rule(&mut self, rule: Option<&str>, reason: Option<&str>) -> &mut Self {
        let info = &self.cx.summary.info;
        let mut policy = Map::new();
        if !info.policy_name.is_empty() {
            policy.insert("name".into(), info.policy_name.clone().into());
        }
        policy.insert("uid".into(), info.policy_sha256().into());
        policy.insert("is_applied".into(), true.into());
        self.set("policy", Value::Object(policy));
        if let Some(rule) = rule {
            let mut fw = Map::new();
            fw.insert("uid".into(), rule.into());
            fw.insert("name".into(), rule.into());
            if let Some(reason) = reason {
                fw.insert("desc".into(), reason.into());
            }
            self.set("firewall_rule", Value::Object(fw));
            self.keep("rule", rule.into());
        }
        self.keep("reason", reason.into())
    }

    /// `actor`: the session, and the exec behind the event (its id, and
    /// its pid and command line when its exec record was seen).
    pub(super) fn actor(&mut self, exec: Option<&ExecId>) -> &mut Self {
        let mut actor = Map::new();
        actor.insert(
            "session".into(),
            json!({"uid": self.cx.summary.id.as_str()}),
        );
        actor.insert("app_name".into(), "airlock".into());
        if let Some(exec) = exec {
            actor.insert("process".into(), self.process(exec));
        }
        self.set("actor", Value::Object(actor))
    }

    /// The person behind the event (who decided an approval), as `actor.user`.
    pub(super) fn actor_user(&mut self, name: &str) -> &mut Self {
        if let Some(Value::Object(actor)) = self.fields.get_mut("actor") {
            actor.insert("user".into(), json!({ "name": name }));
        }
        self
    }

    /// The OCSF `process` for an exec: its id as `uid`, and what its exec
    /// record said when it was seen.
    pub(super) fn process(&self, exec: &ExecId) -> Value {
        let mut process = Map::new();
        process.insert("uid".into(), exec.as_str().into());
        if let Some(info) = self.cx.execs.get(exec) {
            process.insert("pid".into(), info.pid.into());
            process.insert("cmd_line".into(), info.cmd_line.clone().into());
            process.insert("path".into(), info.path.clone().into());
            process.insert("name".into(), base_name(&info.path).into());
        }
        Value::Object(process)
    }

    pub(super) fn build(self) -> Value {
        let Self {
            cx,
            class,
            mut fields,
            airlock,
        } = self;
        if class.is_system() && !fields.contains_key("actor") {
            fields.insert(
                "actor".into(),
                json!({"session": {"uid": cx.summary.id.as_str()}}),
            );
        }
        fields.insert("unmapped".into(), json!({ "airlock": airlock }));
        Value::Object(fields)
    }
}

/// Microseconds since the epoch as OCSF's milliseconds.
pub(super) fn millis(ts_us: i64) -> i64 {
    ts_us.div_euclid(1000)
}

/// The last component of a path.
pub(super) fn base_name(path: &str) -> &str {
    path.trim_end_matches('/')
        .rsplit('/')
        .next()
        .filter(|n| !n.is_empty())
        .unwrap_or(path)
}

/// `metadata`: Airlock as the product, the OCSF version and profiles, a
/// uid stable per event (`SESSION-SEQ`, what a SIEM deduplicates on), the
/// seq as `sequence`, and the session's labels as `tags`.
fn metadata(cx: Context<'_>) -> Value {
    let tags: Vec<Value> = cx
        .summary
        .info
        .labels
        .iter()
        .map(|(k, v)| json!({"name": k, "value": v}))
        .collect();
    let mut m = json!({
        "version": OCSF_VERSION,
        "product": {
            "name": "Airlock",
            "vendor_name": "Airlock",
            "version": env!("CARGO_PKG_VERSION"),
        },
        "profiles": PROFILES,
        "uid": format!("{}-{}", cx.summary.id, cx.ev.seq),
        "sequence": cx.ev.seq.get(),
        "log_name": "airlock audit",
    });
    if let Some(obj) = m.as_object_mut() {
        if !tags.is_empty() {
            obj.insert("tags".into(), Value::Array(tags));
        }
        if let Some(corr) = correlation(cx.ev) {
            obj.insert("correlation_uid".into(), corr.into());
        }
    }
    m
}

/// Links the records of one exchange or connection (decided, then ended)
/// and of one approval (requested, then decided).
fn correlation(ev: &StoredEvent) -> Option<String> {
    use crate::AuditEvent as E;
    match &ev.event {
        E::Http(h) => h.exchange.map(|x| format!("exchange-{x}")),
        E::Tcp(t) => t.connection.map(|c| format!("connection-{c}")),
        E::ApprovalRequested(a) => Some(format!("approval-{}", a.approval)),
        E::ApprovalDecided(a) => Some(format!("approval-{}", a.approval)),
        // An MCP message shares its exchange's uid: the HTTP request it rode on.
        E::McpCall(m) => m.exchange.map(|x| format!("exchange-{x}")),
        _ => None,
    }
}

/// `device`: the node the session ran on (`SessionInfo.host`).
fn device(summary: &SessionSummary) -> Value {
    let host = if summary.info.host.is_empty() {
        "unknown"
    } else {
        summary.info.host.as_str()
    };
    json!({"hostname": host, "type_id": 0, "type": "Unknown"})
}

/// A note from airlock itself (a policy reload, the budget spent): a Base
/// Event, activity Other, with the note as its message.
pub(super) fn note(cx: &Context<'_>, note: &Note) -> Value {
    let mut e = Event::new(*cx, BASE_EVENT, Activity(99, "Note"));
    e.message(note.text.clone());
    e.build()
}
