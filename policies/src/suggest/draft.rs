//! A whole policy written from what sessions did (`airlock policy
//! suggest`): the caller feeds in what went through and what was refused,
//! and [`Draft::render`] writes it the way a person would. No I/O: reading
//! the record is the binary's business.

use std::collections::{BTreeMap, BTreeSet};

use super::collapse::collapse_path;
use super::mcp::{McpSeen, exact_tool, known_method};
use super::toml_string;
use crate::credential::{Credential, TemplatePart, is_token};
use crate::decision::RequestInfo;
use crate::host::{Host, HostPattern};
use crate::path::normalize;

/// How a connection that carried no HTTP went through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Tunnel {
    /// Opaque bytes: a `protocol = "tcp"` rule.
    Tcp,
    /// TLS not intercepted: a `tls = "passthrough"` rule.
    Passthrough,
}

/// What one (host, port) carried over HTTP: per path glob, its methods.
#[derive(Debug, Default)]
struct Endpoint {
    /// glob → methods used on it.
    paths: BTreeMap<String, BTreeSet<String>>,
    /// Globs on which a WebSocket upgrade was asked for.
    upgrades: BTreeSet<String>,
    /// glob → (requests, smallest example URL).
    seen: BTreeMap<String, (u64, String)>,
    /// MCP server path glob → what its messages did. Such a path gets
    /// rules of its own, with the `mcp` table on the one for POST: a rule's
    /// `mcp` table makes the proxy read every POST it allows as MCP.
    mcp: BTreeMap<String, McpSeen>,
}

/// A policy being drafted from records.
#[derive(Debug, Default)]
pub struct Draft {
    http: BTreeMap<(String, u16), Endpoint>,
    tunnels: BTreeMap<(String, u16), (Tunnel, u64)>,
    /// One line each, with how many times it happened.
    refused: BTreeMap<String, u64>,
    /// What went through but no rule is suggested for, one line each with
    /// the reason, and how many times.
    unsuggested: BTreeMap<String, u64>,
    /// Every (host, port) that carried an HTTP request, suggested or not:
    /// never a tcp or passthrough rule.
    carried_http: BTreeSet<(String, u16)>,
    credentials: BTreeMap<String, Credential>,
    /// Names that were resolved (a rule for the host also lets deny mode resolve it).
    resolved: BTreeSet<String>,
    /// Credentials injected on some host, whose block is not known.
    unknown_credentials: BTreeMap<String, BTreeSet<String>>,
    notes: Vec<String>,
}

impl Draft {
    pub fn new() -> Self {
        Self::default()
    }

    /// A request that went through (`upgrade`: it asked for a WebSocket).
    /// `url` is only an example for the rule's comment. A request no rule
    /// can allow without allowing more than it did is listed as not
    /// suggested, with the reason.
    pub fn request(&mut self, req: &RequestInfo<'_>, url: &str, upgrade: bool) {
        let (host, port, method) = (req.host, req.port, req.method);
        self.carried_http(host, port);
        let path = match suggestable(req) {
            Ok(path) => path,
            Err(why) => {
                self.not_suggested(&format!("{method} {url}"), &why);
                return;
            }
        };
        let endpoint = self
            .http
            .entry((host.as_str().to_owned(), port))
            .or_default();
        let glob = collapse_path(&path);
        endpoint
            .paths
            .entry(glob.clone())
            .or_default()
            .insert(method.to_owned());
        if upgrade {
            endpoint.upgrades.insert(glob.clone());
        }
        let example = example_url(url);
        let seen = endpoint.seen.entry(glob).or_insert((0, example.clone()));
        seen.0 += 1;
        if example < seen.1 {
            seen.1 = example;
        }
    }

    /// An MCP message that went through to the server at `host`, `port`
    /// and `path` (a request path): `tools/call` of `tool`, or another
    /// method. One a rule cannot name exactly is listed as not suggested.
    pub fn mcp_message(
        &mut self,
        host: &Host,
        port: u16,
        path: &str,
        method: &str,
        tool: Option<&str>,
    ) {
        let what = format!(
            "MCP {method}{} on {host}:{port}{path}",
            tool.map(|t| format!(" {t}")).unwrap_or_default()
        );
        let checked = match (method, tool) {
            ("tools/call", Some(t)) => exact_tool(t),
            ("tools/call", None) => Err(NotSuggested::ToolName),
            (m, _) => known_method(m),
        };
        let path = match checked.and_then(|()| {
            normalize(path)
                .map(|p| p.exact)
                .map_err(|e| NotSuggested::AmbiguousPath(e.0))
        }) {
            Ok(path) => path,
            Err(why) => {
                // Whole: a `?` in a tool's name is no query.
                *self
                    .unsuggested
                    .entry(format!("{what} — {why}"))
                    .or_insert(0) += 1;
                return;
            }
        };
        let seen = self
            .http
            .entry((host.as_str().to_owned(), port))
            .or_default()
            .mcp
            .entry(collapse_path(&path))
            .or_default();
        match tool {
            Some(t) if method == "tools/call" => *seen.tools.entry(t.to_owned()).or_insert(0) += 1,
            _ => {
                seen.methods.insert(method.to_owned());
            }
        }
    }

    /// A connection that went through carrying no HTTP.
    pub fn tunnel(&mut self, host: &Host, port: u16, tunnel: Tunnel) {
        let entry = self
            .tunnels
            .entry((host.as_str().to_owned(), port))
            .or_insert((tunnel, 0));
        // Seen both ways: a tcp rule tunnels what passthrough would too.
        entry.0 = entry.0.min(tunnel);
        entry.1 += 1;
    }

    /// Something that was refused, in one line ("GET https://... — reason").
    pub fn refuse(&mut self, what: String) {
        *self.refused.entry(what).or_insert(0) += 1;
    }

    /// Something that went through but gets no rule, and why.
    pub fn not_suggested(&mut self, what: &str, why: &NotSuggested) {
        // The query may carry tokens; the path is enough to decide.
        let what = what.split_once('?').map_or(what, |(w, _)| w);
        *self
            .unsuggested
            .entry(format!("{what} — {why}"))
            .or_insert(0) += 1;
    }

    /// A (host, port) that carried an HTTP request, whatever became of it:
    /// it never gets a tcp or passthrough rule, which would let every
    /// method and path through uninspected.
    pub fn carried_http(&mut self, host: &Host, port: u16) {
        self.carried_http.insert((host.as_str().to_owned(), port));
    }

    /// A DNS name the sessions resolved.
    pub fn resolved(&mut self, name: &Host) {
        self.resolved.insert(name.as_str().to_owned());
    }

    /// A `[[credential]]` block of a policy the sessions ran under. It is
    /// kept when it applies to a host the draft allows over HTTP; the first
    /// block of a name wins.
    pub fn credential(&mut self, credential: &Credential) {
        self.credentials
            .entry(credential.name.clone())
            .or_insert_with(|| credential.clone());
    }

    /// A credential injected on `host` whose block is not known (events
    /// name credentials, not their sources).
    pub fn unknown_credential(&mut self, name: &str, host: &str) {
        self.unknown_credentials
            .entry(name.to_owned())
            .or_default()
            .insert(host.to_owned());
    }

    /// A line for the header comment.
    pub fn note(&mut self, text: &str) {
        self.notes.push(text.to_owned());
    }

    /// The policy: `default = "deny"`, rules sorted by host and port, one
    /// per host, port and group of methods.
    pub fn render(&self) -> String {
        let mut out = String::from(
            "# Suggested by `airlock policy suggest`: it allows what the recorded\n\
             # traffic did and denies the rest. Review each rule before enforcing it.\n",
        );
        for note in &self.notes {
            out.push_str(&format!("# {}\n", comment(note)));
        }
        out.push_str("version = 1\ndefault = \"deny\"\n");
        let mut http_hosts: Vec<Host> = Vec::new();
        for ((host, port), endpoint) in &self.http {
            if let Ok(h) = Host::parse(host) {
                http_hosts.push(h);
            }
            for rule in endpoint.rules() {
                out.push('\n');
                out.push_str(&rule.render(host, *port));
            }
        }
        let mut tunnels_not_suggested = Vec::new();
        for ((host, port), (tunnel, count)) in &self.tunnels {
            // A tcp or passthrough rule would take the port over from HTTP,
            // and let every method and path through uninspected.
            let key = (host.clone(), *port);
            if self.http.contains_key(&key) {
                continue;
            }
            if self.carried_http.contains(&key) {
                tunnels_not_suggested.push(format!(
                    "{count} connection{} to {host}:{port} with no request a rule can allow — {}",
                    plural(*count),
                    NotSuggested::CarriedHttp
                ));
                continue;
            }
            out.push_str(&format!(
                "\n# {count} connection{} with no HTTP seen in {}\n[[allow]]\nhost = {}\nport = {port}\n{}\n",
                plural(*count),
                match tunnel {
                    Tunnel::Tcp => "them (tunnelled as bytes)",
                    Tunnel::Passthrough => "them (TLS passed through, not intercepted)",
                },
                toml_string(host),
                match tunnel {
                    Tunnel::Tcp => "protocol = \"tcp\"",
                    Tunnel::Passthrough => "tls = \"passthrough\"",
                },
            ));
        }
        for credential in self.credentials.values() {
            if let Some(block) = render_credential(credential, &http_hosts) {
                out.push('\n');
                out.push_str(&block);
            }
        }
        for (name, hosts) in &self.unknown_credentials {
            if self.credentials.contains_key(name) {
                continue;
            }
            let hosts: Vec<&str> = hosts.iter().map(String::as_str).collect();
            out.push_str(&format!(
                "\n# Credential \"{}\" was injected on {}; its block was not in the record.\n\
                 # Copy its [[credential]] block (with its ${{env:...}} or ${{file:...}} source)\n\
                 # from the policy that ran.\n",
                comment(name),
                comment(&hosts.join(", ")),
            ));
        }
        let ruled: BTreeSet<&str> = self
            .http
            .keys()
            .chain(self.tunnels.keys())
            .chain(&self.carried_http)
            .map(|(host, _)| host.as_str())
            .collect();
        let unconnected: Vec<&str> = self
            .resolved
            .iter()
            .map(String::as_str)
            .filter(|name| !ruled.contains(name))
            .collect();
        if !unconnected.is_empty() {
            out.push_str(&format!(
                "\n# Resolved but never connected to; with no rule for them, deny mode\n\
                 # will not resolve them: {}\n",
                comment(&unconnected.join(", "))
            ));
        }
        if !self.refused.is_empty() {
            out.push_str(
                "\n# Refused when recorded, and still refused by this policy (decide for each):\n",
            );
            for (what, count) in &self.refused {
                out.push_str(&counted_line(what, *count));
            }
        }
        if !self.unsuggested.is_empty() || !tunnels_not_suggested.is_empty() {
            out.push_str(
                "\n# Not suggested: these went through when recorded, but any rule for them\n\
                 # would allow more than they did, so this policy refuses them:\n",
            );
            for (what, count) in &self.unsuggested {
                out.push_str(&counted_line(what, *count));
            }
            for what in &tunnels_not_suggested {
                out.push_str(&format!("#   {}\n", comment(what)));
            }
        }
        out
    }

    /// What went through but got no rule: one line each ("METHOD URL —
    /// reason", without the query), with how many times.
    pub fn unsuggested(&self) -> impl Iterator<Item = (&str, u64)> {
        self.unsuggested.iter().map(|(what, n)| (what.as_str(), *n))
    }
}

/// Why a request that went through gets no rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotSuggested {
    #[error("not an HTTP method a rule can name")]
    NotAMethod,
    #[error(
        "allow rules name methods in upper case and compare them exactly, so no rule allows {method:?}; one for {upper:?} would allow a method the traffic did not use"
    )]
    NotUpperCase { method: String, upper: String },
    #[error(
        "the asterisk-form target `*` names no path; a rule for it would have to allow every path"
    )]
    AsteriskForm,
    #[error("the request target is not a path (origin form), so no path rule matches it")]
    NotOriginForm,
    #[error("ambiguous path ({0})")]
    AmbiguousPath(String),
    #[error(
        "it carried HTTP, and a tcp or passthrough rule would let every method and path through uninspected"
    )]
    CarriedHttp,
    #[error(
        "no rule names this tool exactly (tool names in rules are globs, without whitespace, control or invisible characters), and a glob would allow other tools"
    )]
    ToolName,
    #[error("not an MCP method a rule's `methods` can name")]
    McpMethod,
    #[error(
        "a person approved it when recorded; an allow rule would let it through unasked. Keep an [[ask]] rule with mcp = {{ tools = [...] }} for it"
    )]
    Approved,
}

/// The normalised path a rule for this request names, or why no rule can
/// allow it without allowing more.
pub(super) fn suggestable(req: &RequestInfo<'_>) -> Result<String, NotSuggested> {
    let method = req.method;
    if !is_token(method) || method == "*" {
        return Err(NotSuggested::NotAMethod);
    }
    if method.bytes().any(|b| b.is_ascii_lowercase()) {
        return Err(NotSuggested::NotUpperCase {
            method: method.to_owned(),
            upper: method.to_ascii_uppercase(),
        });
    }
    if req.path_and_query == "*" {
        return Err(NotSuggested::AsteriskForm);
    }
    if !req.path_and_query.starts_with('/') {
        return Err(NotSuggested::NotOriginForm);
    }
    normalize(req.path_and_query)
        .map(|p| p.exact)
        .map_err(|e| NotSuggested::AmbiguousPath(e.0))
}

/// One `[[allow]]` rule of an endpoint.
struct Rule<'e> {
    methods: BTreeSet<String>,
    paths: Vec<String>,
    /// What an MCP server's messages did, for its POST rule.
    mcp: Option<&'e McpSeen>,
    upgrade: bool,
    requests: u64,
    example: String,
}

impl Endpoint {
    /// Paths grouped by the set of methods used on them: one rule per
    /// group, and an MCP server's path in rules of its own.
    fn rules(&self) -> Vec<Rule<'_>> {
        let mut groups: BTreeMap<(&BTreeSet<String>, Option<&String>), Rule<'_>> = BTreeMap::new();
        for (glob, methods) in &self.paths {
            let mcp = self.mcp.get_key_value(glob);
            let rule = groups
                .entry((methods, mcp.map(|(k, _)| k)))
                .or_insert_with(|| Rule {
                    methods: methods.clone(),
                    paths: Vec::new(),
                    mcp: mcp
                        .map(|(_, seen)| seen)
                        .filter(|_| methods.contains("POST")),
                    upgrade: false,
                    requests: 0,
                    example: String::new(),
                });
            rule.paths.push(glob.clone());
            rule.upgrade |= self.upgrades.contains(glob);
            if let Some((n, example)) = self.seen.get(glob) {
                rule.requests += n;
                if rule.example.is_empty() || *example < rule.example {
                    rule.example.clone_from(example);
                }
            }
        }
        groups.into_values().collect()
    }
}

impl Rule<'_> {
    fn render(&self, host: &str, port: u16) -> String {
        let mut out = format!(
            "# {} request{}, e.g. {}\n[[allow]]\nhost = {}\nports = [{port}]\n",
            self.requests,
            plural(self.requests),
            comment(&self.example),
            toml_string(host),
        );
        let methods: Vec<String> = self.methods.iter().map(|m| toml_string(m)).collect();
        out.push_str(&format!("methods = [{}]\n", methods.join(", ")));
        // Always a list of paths: a rule without one would allow every path.
        let paths: Vec<String> = self.paths.iter().map(|p| toml_string(p)).collect();
        out.push_str(&format!("paths = [{}]\n", paths.join(", ")));
        if self.upgrade && self.methods.contains("GET") {
            out.push_str("upgrade = [\"websocket\"]\n");
        }
        if let Some(seen) = self.mcp {
            out.push_str(&seen.render());
        }
        out
    }
}

/// The credential's block as written, its hosts narrowed to those the
/// draft allows over HTTP (a credential for hosts no rule allows draws a
/// lint warning); None when it applies to none of them. The value is its
/// template (`${env:...}`, `${file:...}`), never a secret.
fn render_credential(c: &Credential, http_hosts: &[Host]) -> Option<String> {
    let hosts: Vec<&HostPattern> = c
        .hosts
        .iter()
        .filter(|p| http_hosts.iter().any(|h| p.matches(h)))
        .collect();
    if hosts.is_empty() {
        return None;
    }
    let mut value = String::new();
    for part in &c.value.parts {
        match part {
            TemplatePart::Literal(s) => value.push_str(s),
            TemplatePart::Env(name) => value.push_str(&format!("${{env:{name}}}")),
            TemplatePart::File(path) => value.push_str(&format!("${{file:{path}}}")),
        }
    }
    let hosts: Vec<String> = hosts.iter().map(|h| toml_string(&h.to_string())).collect();
    let mut out = format!(
        "[[credential]]\nname = {}\nhosts = [{}]\nheader = {}\nvalue = {}\n",
        toml_string(&c.name),
        hosts.join(", "),
        toml_string(&c.header),
        toml_string(&value),
    );
    if let Some(p) = &c.placeholder {
        out.push_str(&format!("placeholder = {}\n", toml_string(p)));
    }
    Some(out)
}

/// A URL for a comment: without its query (which may carry tokens), cut
/// to a readable length.
fn example_url(url: &str) -> String {
    let url = url.split_once('?').map_or(url, |(u, _)| u);
    let mut out: String = url.chars().take(200).collect();
    if out.len() < url.len() {
        out.push('…');
    }
    out
}

/// Recorded text, made safe for one TOML comment line: control characters
/// (a newline would end the comment and start TOML) and invisible
/// direction or zero-width characters are written as escapes.
/// `#   WHAT (N times)`, one comment line of a listing.
fn counted_line(what: &str, count: u64) -> String {
    let times = match count {
        0 | 1 => String::new(),
        n => format!(" ({n} times)"),
    };
    format!("#   {}{times}\n", comment(what))
}

pub(crate) fn comment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        let invisible = matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{FEFF}' | '\u{2028}' | '\u{2029}');
        if c.is_control() || invisible {
            out.push_str(&c.escape_unicode().to_string());
        } else {
            out.push(c);
        }
    }
    out
}

fn plural(n: u64) -> &'static str {
    if n == 1 { "" } else { "s" }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Policy;

    fn host(s: &str) -> Host {
        Host::parse(s).unwrap()
    }

    /// A GET or POST that went through, as the binary hands it over.
    fn seen(d: &mut Draft, host: &Host, port: u16, method: &str, path: &str) {
        let req = RequestInfo::https(host, port, method, path);
        d.request(&req, &format!("https://{host}:{port}{path}"), false);
    }

    fn draft() -> Draft {
        let mut d = Draft::new();
        let api = host("api.test");
        for (m, p) in [
            ("GET", "/a/1"),
            ("GET", "/a/2?x=1"),
            ("GET", "/b"),
            ("POST", "/upload"),
            ("GET", "/files/tool-1.2.3.tar.gz"),
        ] {
            seen(&mut d, &api, 8443, m, p);
        }
        seen(&mut d, &host("pypi.org"), 443, "GET", "/simple/");
        d.tunnel(&host("git.test"), 22, Tunnel::Tcp);
        d.resolved(&host("api.test"));
        d.resolved(&host("probe.test"));
        d.refuse("GET https://api.test:8443/a/../x — ambiguous path\n[[allow]]".to_owned());
        d
    }

    #[test]
    fn a_draft_is_one_rule_per_host_port_and_method_group_and_lints_clean() {
        let text = draft().render();
        let policy = Policy::parse("suggested.toml", &text).unwrap();
        assert_eq!(policy.lint(), Vec::new(), "{text}");
        assert!(
            text.contains(
                "# 4 requests, e.g. https://api.test:8443/a/1\n[[allow]]\nhost = \"api.test\"\nports = [8443]\nmethods = [\"GET\"]\npaths = [\"/a/*\", \"/b\", \"/files/tool-*.tar.gz\"]\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("methods = [\"POST\"]\npaths = [\"/upload\"]\n"),
            "{text}"
        );
        assert!(
            text.contains("host = \"git.test\"\nport = 22\nprotocol = \"tcp\"\n"),
            "{text}"
        );
        assert!(text.contains("default = \"deny\""), "{text}");
        assert!(
            text.contains("# will not resolve them: probe.test\n"),
            "{text}"
        );
    }

    #[test]
    fn recorded_text_cannot_break_out_of_a_comment() {
        let text = draft().render();
        assert!(
            text.contains("#   GET https://api.test:8443/a/../x — ambiguous path\\u{a}[[allow]]\n"),
            "{text}"
        );
        // The injected header stayed inside the comment: the four rules only.
        let policy = Policy::parse("suggested.toml", &text).unwrap();
        assert_eq!(policy.lint(), Vec::new());
        assert_eq!(text.matches("\n[[allow]]\n").count(), 4, "{text}");
    }

    #[test]
    fn the_same_records_in_another_order_give_the_same_policy() {
        let mut d = Draft::new();
        let api = host("api.test");
        seen(&mut d, &api, 8443, "GET", "/b");
        seen(&mut d, &api, 8443, "GET", "/a/2");
        let mut e = Draft::new();
        seen(&mut e, &api, 8443, "GET", "/a/2");
        seen(&mut e, &api, 8443, "GET", "/b");
        assert_eq!(d.render(), e.render());
    }

    #[test]
    fn a_credential_keeps_its_template_and_narrows_to_allowed_hosts() {
        let recorded = Policy::parse(
            "p.toml",
            "[[credential]]\nname = \"tok\"\nhosts = [\"api.test\", \"other.test\"]\nheader = \"Authorization\"\nvalue = \"Bearer ${env:TOKEN}\"\n\n[[credential]]\nname = \"unused\"\nhost = \"x.test\"\nheader = \"X\"\nvalue = \"${file:/run/x}\"\n",
        )
        .unwrap();
        let mut d = draft();
        for c in recorded.credentials() {
            d.credential(c);
        }
        let text = d.render();
        assert!(
            text.contains("name = \"tok\"\nhosts = [\"api.test\"]\nheader = \"Authorization\"\nvalue = \"Bearer ${env:TOKEN}\"\n"),
            "{text}"
        );
        assert!(!text.contains("unused"), "{text}");
        let policy = Policy::parse("suggested.toml", &text).unwrap();
        assert_eq!(policy.lint(), Vec::new(), "{text}");
    }

    fn allowed(policy: &Policy, host: &Host, port: u16, method: &str, path: &str) -> bool {
        let req = RequestInfo::https(host, port, method, path);
        policy.evaluate(&req, None).is_allowed()
    }

    #[test]
    fn a_recorded_glob_path_is_allowed_literally_and_allows_nothing_else() {
        let api = host("api.test");
        for path in [
            "/**",
            "/*",
            "/admin/*/*",
            "/admin/**/all",
            "/admin/users/a*",
            "/%2A%2A",
        ] {
            let mut d = Draft::new();
            seen(&mut d, &api, 443, "DELETE", path);
            let text = d.render();
            if path == "/**" {
                assert!(text.contains("paths = ['/\\*\\*']\n"), "{text}");
            }
            let policy = Policy::parse("suggested.toml", &text).unwrap();
            assert_eq!(policy.lint(), Vec::new(), "{text}");
            assert!(allowed(&policy, &api, 443, "DELETE", path), "{text}");
            for other in ["/admin/users/all", "/admin/x/y", "/", "/x"] {
                assert!(
                    !allowed(&policy, &api, 443, "DELETE", other),
                    "{other}: {text}"
                );
            }
        }
    }

    #[test]
    fn asterisk_form_and_lower_case_methods_are_listed_as_not_suggested_with_the_reason() {
        let api = host("api.test");
        let mut d = Draft::new();
        for (method, path) in [
            ("DELETE", "*"),
            ("OPTIONS", "*"),
            ("delete", "/x"),
            ("GET", "/ok"),
        ] {
            seen(&mut d, &api, 443, method, path);
        }
        let text = d.render();
        let policy = Policy::parse("suggested.toml", &text).unwrap();
        assert!(allowed(&policy, &api, 443, "GET", "/ok"), "{text}");
        for (method, path) in [
            ("DELETE", "/admin/users/all"),
            ("OPTIONS", "/admin"),
            ("DELETE", "/x"),
            ("OPTIONS", "*"),
            ("DELETE", "*"),
        ] {
            assert!(
                !allowed(&policy, &api, 443, method, path),
                "{method} {path}: {text}"
            );
        }
        let (_, listed) = text
            .split_once("# Not suggested:")
            .unwrap_or_else(|| panic!("{text}"));
        assert!(
            listed.contains(
                "#   DELETE https://api.test:443* — the asterisk-form target `*` names no path"
            ),
            "{text}"
        );
        assert!(
            listed.contains("#   OPTIONS https://api.test:443* — the asterisk-form"),
            "{text}"
        );
        assert!(
            listed.contains(
                "#   delete https://api.test:443/x — allow rules name methods in upper case"
            ),
            "{text}"
        );
        assert_eq!(d.unsuggested().count(), 3);
        assert_eq!(text.matches("\n[[allow]]\n").count(), 1, "{text}");
    }

    #[test]
    fn a_host_and_port_that_carried_http_never_becomes_a_tunnel() {
        let api = host("api.test");
        let mut d = Draft::new();
        seen(&mut d, &api, 8443, "DELETE", "*");
        d.tunnel(&api, 8443, Tunnel::Tcp);
        let mut refused = Draft::new();
        refused.carried_http(&api, 8443);
        refused.tunnel(&api, 8443, Tunnel::Passthrough);
        for d in [d, refused] {
            let text = d.render();
            assert!(!text.contains("protocol = \"tcp\""), "{text}");
            assert!(!text.contains("passthrough\""), "{text}");
            assert!(text.contains("#   1 connection to api.test:8443 with no request a rule can allow — it carried HTTP"), "{text}");
            let policy = Policy::parse("suggested.toml", &text).unwrap();
            assert!(
                !allowed(&policy, &api, 8443, "DELETE", "/admin/users/all"),
                "{text}"
            );
        }
    }

    #[test]
    fn a_recorded_host_is_never_a_wildcard_and_a_trailing_dot_names_the_same_host() {
        for wild in ["*.api.test", "*", "a*.test", "api.*"] {
            assert!(Host::parse(wild).is_err(), "{wild}");
        }
        let mut d = Draft::new();
        seen(&mut d, &host("API.test."), 443, "GET", "/x");
        let text = d.render();
        assert!(text.contains("host = \"api.test\"\n"), "{text}");
        let policy = Policy::parse("suggested.toml", &text).unwrap();
        assert!(
            allowed(&policy, &host("api.test"), 443, "GET", "/x"),
            "{text}"
        );
        assert!(
            !allowed(&policy, &host("x.api.test"), 443, "GET", "/x"),
            "{text}"
        );
    }
}
