use super::policy;

fn lints(text: &str) -> Vec<String> {
    policy(text)
        .lint()
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn shadowed_rules() {
    let l = lints(
        "version = 1\n[[allow]]\nhost = \"a.com\"\nmethods = [\"GET\"]\n\n[[allow]]\nhost = \"a.com\"\nmethods = [\"get\"]\npaths = [\"/x\"]\n",
    );
    assert_eq!(
        l,
        vec![
            "policy.toml:6:1: warning: this allow rule can never match: the allow rule at line 2 already allows everything it does"
        ]
    );
    // A quota or body on the earlier rule means the later one still matters.
    assert!(lints("version = 1\n[[allow]]\nhost = \"a.com\"\nmax_requests = 3\n[[allow]]\nhost = \"a.com\"\n").is_empty());
    // Narrower earlier rule: fine.
    assert!(lints("version = 1\n[[allow]]\nhost = \"a.com\"\npaths = [\"/x\"]\n[[allow]]\nhost = \"a.com\"\n").is_empty());
    let l = lints("version = 1\n[[allow]]\nhost = \"*.a.com\"\n[[allow]]\nhost = \"x.a.com\"\n");
    assert_eq!(l.len(), 1, "{l:?}");
}

#[test]
fn rules_blocked_by_host_wide_deny() {
    let l = lints("version = 1\n[[allow]]\nhost = \"x.a.com\"\n[[deny]]\nhost = \"*.a.com\"\n");
    assert_eq!(
        l,
        vec![
            "policy.toml:2:1: warning: this allow rule can never match: the deny rule at line 4 blocks all of its hosts and ports"
        ]
    );
    assert!(lints("version = 1\n[[allow]]\nhost = \"x.a.com\"\n[[deny]]\nhost = \"*.a.com\"\nmethods = [\"POST\"]\n").is_empty());
    assert!(lints("version = 1\n[[allow]]\nhost = \"x.a.com\"\n[[deny]]\nhost = \"*.a.com\"\nports = [80]\n").is_empty());
}

#[test]
fn credentials_default_allow_and_body_lints() {
    let l = lints(
        "version = 1\n[[credential]]\nname = \"n\"\nhosts = [\"a.com\"]\nheader = \"X\"\nvalue = \"sk-live-123\"\n",
    );
    assert_eq!(
        l,
        vec![
            "policy.toml:2:1: warning: credential \"n\": secret literal in policy file; use ${env:NAME} or ${file:PATH}",
            "policy.toml:2:1: warning: credential \"n\" is never used: no HTTP allow rule allows a.com (credentials cannot be injected into tcp/passthrough tunnels)",
        ]
    );
    let l = lints("version = 1\ndefault = \"allow\"\n");
    assert_eq!(
        l,
        vec![
            "policy.toml:2:11: warning: default allow: rules only add quotas/credentials; nothing is blocked"
        ]
    );
    let l = lints("version = 1\n[[allow]]\nhost = \"a.com\"\n[allow.body]\nx = { max = 1 }\n");
    assert_eq!(l.len(), 1, "{l:?}");
    assert!(
        l[0].contains("`body` constraints on a rule that allows methods without a body"),
        "{l:?}"
    );
    assert!(lints("version = 1\n[[allow]]\nhost = \"a.com\"\nmethods = [\"POST\", \"PUT\"]\n[allow.body]\nx = { max = 1 }\n").is_empty());
    // Credentials cannot be injected into an opaque tunnel.
    let l = lints(
        "version = 1\n[[allow]]\nhost = \"a.com\"\nport = 22\nprotocol = \"tcp\"\n[[credential]]\nname = \"n\"\nhosts = [\"a.com\"]\nheader = \"X\"\nvalue = \"${env:X}\"\n",
    );
    assert_eq!(l.len(), 1, "{l:?}");
    // Credential for a subdomain pattern allowed by a wildcard rule is used.
    assert!(lints("version = 1\n[[allow]]\nhost = \"*.a.com\"\n[[credential]]\nname = \"n\"\nhosts = [\"x.a.com\"]\nheader = \"X\"\nvalue = \"${env:X}\"\n").is_empty());
}
