//! The serde model of the TOML file, exactly as written (with spans for
//! error messages). Validation into matchable rules happens in `compile`.
//! The JSON Schema is generated from these types.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;
use toml::Spanned;

use crate::decision::DefaultAction;

/// An Airlock egress policy (version 1).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "Airlock policy")]
pub(crate) struct RawPolicy {
    /// Base policies this file builds on, paths relative to this file. Their
    /// deny rules and credentials apply here too; this file can add allow
    /// and ask rules but never override a base deny.
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub extends: Option<Spanned<Vec<Spanned<String>>>>,
    /// Format version; must be 1. Omitted = 1.
    #[serde(default)]
    #[schemars(with = "u32")]
    pub version: Option<Spanned<i64>>,
    /// What happens to traffic no rule allows: "deny" (default), "allow",
    /// or "report" (allow everything, record what deny would have blocked).
    #[serde(default)]
    #[schemars(with = "DefaultAction")]
    pub default: Option<Spanned<DefaultAction>>,
    /// Allow rules, tried in file order.
    #[serde(default)]
    #[schemars(with = "Vec<RawAllow>")]
    pub allow: Vec<Spanned<RawAllow>>,
    /// Deny rules; they override ask and allow rules.
    #[serde(default)]
    #[schemars(with = "Vec<RawDeny>")]
    pub deny: Vec<Spanned<RawDeny>>,
    /// Ask rules: requests they match wait for a person's approval. They
    /// override allow rules; deny rules override them.
    #[serde(default)]
    #[schemars(with = "Vec<RawAsk>")]
    pub ask: Vec<Spanned<RawAsk>>,
    /// Credentials the proxy injects so secrets never enter the sandbox.
    #[serde(default)]
    #[schemars(with = "Vec<RawCredential>")]
    pub credential: Vec<Spanned<RawCredential>>,
}

/// Transport of an allow rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Protocol {
    /// HTTP or HTTPS, inspected per request (default).
    Http,
    /// An opaque TCP tunnel; only host and port are enforced.
    Tcp,
}

/// TLS handling of an allow rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum TlsMode {
    /// Intercept TLS with the session CA and inspect requests (default).
    Intercept,
    /// Tunnel TLS without interception; the proxy checks SNI == host.
    Passthrough,
}

/// One `[[allow]]` rule.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAllow {
    /// Host pattern: "api.example.com", "*.example.com" (subdomains, not the apex), "*", an IP or a CIDR.
    #[serde(default)]
    #[schemars(with = "String")]
    pub host: Option<Spanned<String>>,
    /// Several host patterns (instead of `host`).
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub hosts: Option<Spanned<Vec<Spanned<String>>>>,
    /// One port (instead of `ports`).
    #[serde(default)]
    #[schemars(with = "u16")]
    pub port: Option<Spanned<u16>>,
    /// Ports; default [80, 443] (passthrough: [443]); required for protocol = "tcp".
    #[serde(default)]
    #[schemars(with = "Vec<u16>")]
    pub ports: Option<Spanned<Vec<Spanned<u16>>>>,
    /// HTTP methods; omitted = any method.
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub methods: Option<Spanned<Vec<Spanned<String>>>>,
    /// Path globs (`*` one segment, `**` any depth, `?` one char); omitted = any path.
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub paths: Option<Spanned<Vec<Spanned<String>>>>,
    /// Per-session request quota for this rule.
    #[serde(default)]
    #[schemars(with = "u64")]
    pub max_requests: Option<Spanned<u64>>,
    /// Constraints on JSON or form fields of the request body; dotted names address nested fields.
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, RawConstraint>")]
    pub body: RawBody,
    /// "http" (default) or "tcp".
    #[serde(default)]
    #[schemars(with = "Protocol")]
    pub protocol: Option<Spanned<Protocol>>,
    /// "intercept" (default) or "passthrough".
    #[serde(default)]
    #[schemars(with = "TlsMode")]
    pub tls: Option<Spanned<TlsMode>>,
    /// HTTP/1.1 protocol upgrades this rule grants (`Connection: upgrade` +
    /// `Upgrade: X`, answered by `101 Switching Protocols`): only
    /// "websocket", which the proxy relays frame by frame, recorded and
    /// scrubbed. Omitted = none: a request asking to upgrade is refused
    /// with 403. "h2c" is never granted (the proxy speaks HTTP/2 itself).
    #[serde(default)]
    #[schemars(with = "Vec<UpgradeName>")]
    pub upgrade: Option<Spanned<Vec<Spanned<String>>>>,
    /// The rule's host, port and paths are an MCP server: every POST to
    /// that host and port is read as JSON-RPC and each message decided by
    /// tool (see docs/policy.md, "MCP servers").
    #[serde(default)]
    #[schemars(with = "RawMcp")]
    pub mcp: Option<Spanned<RawMcp>>,
    /// Free text for humans.
    #[serde(default)]
    pub description: Option<String>,
}

/// A protocol an allow rule can grant an upgrade to (schema only; compile
/// checks the written text so that an unknown value gets a helpful error).
#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code, reason = "describes the schema; never constructed")]
pub(crate) enum UpgradeName {
    /// RFC 6455 WebSocket, relayed frame by frame (recorded, scrubbed).
    Websocket,
}

/// One `[[deny]]` rule.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDeny {
    /// Host pattern, as in allow rules.
    #[serde(default)]
    #[schemars(with = "String")]
    pub host: Option<Spanned<String>>,
    /// Several host patterns (instead of `host`).
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub hosts: Option<Spanned<Vec<Spanned<String>>>>,
    /// One port (instead of `ports`).
    #[serde(default)]
    #[schemars(with = "u16")]
    pub port: Option<Spanned<u16>>,
    /// Ports; omitted = every port.
    #[serde(default)]
    #[schemars(with = "Vec<u16>")]
    pub ports: Option<Spanned<Vec<Spanned<u16>>>>,
    /// HTTP methods; omitted = any method.
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub methods: Option<Spanned<Vec<Spanned<String>>>>,
    /// Path globs; omitted = any path. Also matched case-insensitively, without `;params` and without a trailing `/`.
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub paths: Option<Spanned<Vec<Spanned<String>>>>,
    /// Free text for humans.
    #[serde(default)]
    pub description: Option<String>,
}

/// One `[[ask]]` rule: an HTTP request it matches is held until a person
/// approves or denies it (or its timeout passes, which denies it).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAsk {
    /// Host pattern, as in allow rules.
    #[serde(default)]
    #[schemars(with = "String")]
    pub host: Option<Spanned<String>>,
    /// Several host patterns (instead of `host`).
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub hosts: Option<Spanned<Vec<Spanned<String>>>>,
    /// One port (instead of `ports`).
    #[serde(default)]
    #[schemars(with = "u16")]
    pub port: Option<Spanned<u16>>,
    /// Ports; default [80, 443].
    #[serde(default)]
    #[schemars(with = "Vec<u16>")]
    pub ports: Option<Spanned<Vec<Spanned<u16>>>>,
    /// HTTP methods; omitted = any method.
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub methods: Option<Spanned<Vec<Spanned<String>>>>,
    /// Path globs (`*` one segment, `**` any depth, `?` one char); omitted = any path.
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub paths: Option<Spanned<Vec<Spanned<String>>>>,
    /// Constraints on JSON or form fields of the request body, as in allow
    /// rules: the rule holds only requests whose body passes them. A body
    /// that is missing, too large, unparseable or ambiguous is held too.
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, RawConstraint>")]
    pub body: RawBody,
    /// Why a person must approve; shown to the approver.
    #[serde(default)]
    #[schemars(with = "String")]
    pub reason: Option<Spanned<String>>,
    /// How long a request waits for a decision before it is denied: a whole
    /// number and a unit, "30s", "2m", "1h" or "1m30s"; from "1s" to "24h".
    /// Default "2m".
    #[serde(default)]
    #[schemars(
        with = "String",
        regex(pattern = r"^([0-9]+h([0-9]+m)?([0-9]+s)?|[0-9]+m([0-9]+s)?|[0-9]+s)$")
    )]
    pub timeout: Option<Spanned<toml::Value>>,
    /// Who may approve or deny (user or token names); omitted = the session's owner.
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub approvers: Option<Spanned<Vec<Spanned<String>>>>,
    /// Hold only these MCP tool calls (not the HTTP requests): each call of
    /// a tool named here waits for a person, who sees the tool and its
    /// arguments. Only `tools` and `tool` (with `arguments`) apply.
    #[serde(default)]
    #[schemars(with = "RawMcp")]
    pub mcp: Option<Spanned<RawMcp>>,
    /// Free text for humans.
    #[serde(default)]
    pub description: Option<String>,
}

/// The `mcp` table of an allow or ask rule.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMcp {
    /// Tools allowed (or, on an ask rule, held) without further conditions:
    /// exact names or globs (`*` any run of characters, `?` one).
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub tools: Option<Strings>,
    /// Tools with conditions: `[[allow.mcp.tool]] name = "transfer"`,
    /// `max_calls = 3`, `arguments = { amount = { max = 1000 } }`.
    #[serde(default)]
    #[schemars(with = "Vec<RawMcpTool>")]
    pub tool: Vec<Spanned<RawMcpTool>>,
    /// JSON-RPC methods other than `tools/call` this server may be sent,
    /// exactly as MCP names them; omitted = every method of the MCP
    /// specification (`initialize`, `ping`, `tools/list`, `resources/read`,
    /// `prompts/get`, the client's notifications, ...). Allow rules only.
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub methods: Option<Strings>,
}

/// One `[[allow.mcp.tool]]` (or `[[ask.mcp.tool]]`).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMcpTool {
    /// The tool's name, or a glob.
    #[schemars(with = "String")]
    pub name: Spanned<String>,
    /// Per-session call quota for this entry (every tool it names counts
    /// against it). Allow rules only.
    #[serde(default)]
    #[schemars(with = "u64")]
    pub max_calls: Option<Spanned<u64>>,
    /// Constraints on `params.arguments`, in the body-constraint language.
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, RawConstraint>")]
    pub arguments: RawBody,
}

/// A list of strings as written, each with its span.
pub(crate) type Strings = Spanned<Vec<Spanned<String>>>;

/// The request fields every kind of rule has, borrowed, for their one
/// compiler (`RequestMatcher::compile`). They are written out in each
/// struct because serde's `flatten` does not work with
/// `deny_unknown_fields`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RawRequest<'a> {
    pub host: Option<&'a Spanned<String>>,
    pub hosts: Option<&'a Strings>,
    pub port: Option<&'a Spanned<u16>>,
    pub ports: Option<&'a Spanned<Vec<Spanned<u16>>>>,
    pub methods: Option<&'a Strings>,
    pub paths: Option<&'a Strings>,
}

/// `request()` for each kind of rule: the same six fields in each.
macro_rules! request_fields {
    ($($rule:ty),+) => {$(
        impl $rule {
            pub(crate) fn request(&self) -> RawRequest<'_> {
                RawRequest {
                    host: self.host.as_ref(),
                    hosts: self.hosts.as_ref(),
                    port: self.port.as_ref(),
                    ports: self.ports.as_ref(),
                    methods: self.methods.as_ref(),
                    paths: self.paths.as_ref(),
                }
            }
        }
    )+};
}

request_fields!(RawAllow, RawDeny, RawAsk);

/// The `body` table of an allow or ask rule, as written.
pub(crate) type RawBody = Option<Spanned<BTreeMap<String, Spanned<TableOnly<RawConstraint>>>>>;

/// A struct that may only be written as a TOML table. serde's derived
/// struct visitor also accepts a sequence, filling fields by position, so
/// `amount = [100, 1]` would silently mean max 100, min 1; and a rule key
/// written after `[allow.body]` (`methods = ["GET"]`) would be read as a
/// constraint. Anything but a table is refused as "expected struct
/// RawConstraint", which `SourceMap::toml_error` turns into advice.
#[derive(Debug)]
pub(crate) struct TableOnly<T>(pub T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for TableOnly<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TableVisitor<T>(std::marker::PhantomData<T>);

        impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for TableVisitor<T> {
            type Value = TableOnly<T>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("struct RawConstraint")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<Self::Value, A::Error> {
                // The same map access is handed on, so nested `Spanned`
                // values and error positions work as with a plain derive.
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(TableOnly)
            }
        }

        deserializer.deserialize_map(TableVisitor(std::marker::PhantomData))
    }
}

/// A constraint on one body field.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawConstraint {
    /// Largest allowed number.
    #[serde(default)]
    #[schemars(with = "f64")]
    pub max: Option<Spanned<toml::Value>>,
    /// Smallest allowed number.
    #[serde(default)]
    #[schemars(with = "f64")]
    pub min: Option<Spanned<toml::Value>>,
    /// Allowed values (strings, numbers or booleans).
    #[serde(default)]
    #[schemars(with = "Vec<serde_json::Value>")]
    pub one_of: Option<Spanned<Vec<Spanned<toml::Value>>>>,
    /// The only allowed value.
    #[serde(default)]
    #[schemars(with = "serde_json::Value")]
    pub equals: Option<Spanned<toml::Value>>,
    /// Longest allowed string, in characters.
    #[serde(default)]
    #[schemars(with = "u64")]
    pub max_length: Option<Spanned<u64>>,
    /// If true, the field may be absent (default false: absence is a violation).
    #[serde(default)]
    pub optional: Option<bool>,
}

/// One `[[credential]]`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCredential {
    /// A name for logs and messages.
    #[schemars(with = "String")]
    pub name: Spanned<String>,
    /// Host patterns the credential is injected for.
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub hosts: Option<Spanned<Vec<Spanned<String>>>>,
    /// One host pattern (instead of `hosts`).
    #[serde(default)]
    #[schemars(with = "String")]
    pub host: Option<Spanned<String>>,
    /// Header to set, e.g. "Authorization".
    #[schemars(with = "String")]
    pub header: Spanned<String>,
    /// Header value; `${env:NAME}` and `${file:/path}` are replaced by the secret.
    #[schemars(with = "String")]
    pub value: Spanned<String>,
    /// A dummy the sandbox sees instead of the secret (e.g. in an env var);
    /// the proxy swaps it for the real value.
    #[serde(default)]
    #[schemars(with = "String")]
    pub placeholder: Option<Spanned<String>>,
    /// Free text for humans.
    #[serde(default)]
    #[allow(dead_code, reason = "accepted for humans; no behaviour")]
    pub description: Option<String>,
}
