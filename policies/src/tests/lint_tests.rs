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

#[test]
fn an_ask_rule_a_deny_rule_always_overrides_is_flagged() {
    let l = lints(
        "version = 1\n[[ask]]\nhost = \"x.a.com\"\nmethods = [\"post\"]\npaths = [\"/pay\"]\n[[deny]]\nhost = \"*.a.com\"\nmethods = [\"POST\", \"PUT\"]\n",
    );
    assert_eq!(
        l,
        vec![
            "policy.toml:2:1: warning: this ask rule can never match: the deny rule at line 6 refuses every request it covers (deny rules come first); narrow or remove one of them"
        ]
    );
    // A deny rule covering only part of it leaves the rest to ask about.
    assert!(lints("version = 1\n[[ask]]\nhost = \"a.com\"\n[[deny]]\nhost = \"a.com\"\npaths = [\"/admin\"]\n").is_empty());
    assert!(
        lints("version = 1\n[[ask]]\nhost = \"a.com\"\n[[deny]]\nhost = \"a.com\"\nport = 80\n")
            .is_empty()
    );
}

#[test]
fn an_ask_rule_an_earlier_one_always_holds_first_is_flagged() {
    let l = lints(
        "version = 1\n[[ask]]\nhost = \"a.com\"\n[[ask]]\nhost = \"a.com\"\nmethods = [\"POST\"]\nreason = \"never shown\"\n",
    );
    assert_eq!(
        l,
        vec![
            "policy.toml:4:1: warning: this ask rule can never match: the ask rule at line 2 already holds every request it does (the first matching ask rule decides); merge the two or remove this one"
        ]
    );
    // Body constraints on the earlier rule let requests through to the later one.
    assert!(lints("version = 1\n[[ask]]\nhost = \"a.com\"\nmethods = [\"POST\"]\n[ask.body]\nx = { max = 1 }\n[[ask]]\nhost = \"a.com\"\nmethods = [\"POST\"]\n").is_empty());
}

#[test]
fn an_ask_rule_on_a_tunnelled_host_and_port_says_the_tunnel_is_gone() {
    let l = lints(
        "version = 1\n[[allow]]\nhost = \"*.vendor.example\"\ntls = \"passthrough\"\n[[ask]]\nhost = \"upload.vendor.example\"\nmethods = [\"POST\"]\n",
    );
    assert_eq!(
        l,
        vec![
            "policy.toml:5:1: warning: the passthrough rule at line 2 would tunnel upload.vendor.example:443, but this ask rule must see requests there, so those connections are inspected and never tunnelled; narrow the hosts or ports of one of the two rules"
        ]
    );
    let l = lints(
        "version = 1\n[[allow]]\nhost = \"git.example\"\nport = 22\nprotocol = \"tcp\"\n[[ask]]\nhost = \"*\"\nport = 22\n",
    );
    assert_eq!(l.len(), 1, "{l:?}");
    assert!(
        l[0].contains("the tcp rule at line 2 would tunnel git.example:22"),
        "{l:?}"
    );
    // Different ports: the tunnel stands.
    assert!(lints("version = 1\n[[allow]]\nhost = \"git.example\"\nport = 22\nprotocol = \"tcp\"\n[[ask]]\nhost = \"git.example\"\n").is_empty());
}

#[test]
fn ask_rule_approvers_named_twice_and_bodies_on_bodiless_methods_are_flagged() {
    let l = lints(
        "version = 1\n[[ask]]\nhost = \"a.com\"\napprovers = [\"alice\", \"bob\", \"alice\"]\n",
    );
    assert_eq!(
        l,
        vec![
            "policy.toml:2:1: warning: `approvers` lists \"alice\" more than once; list each name once"
        ]
    );
    let l = lints("version = 1\n[[ask]]\nhost = \"a.com\"\n[ask.body]\nx = { max = 1 }\n");
    assert_eq!(l.len(), 1, "{l:?}");
    assert!(
        l[0].contains("`body` constraints on an ask rule that matches methods without a body (or any method): such requests are always held"),
        "{l:?}"
    );
}

#[test]
fn ask_rules_count_as_restrictions_and_as_users_of_credentials() {
    // default = "allow" with an ask rule holds something: no warning.
    assert!(lints("version = 1\ndefault = \"allow\"\n[[ask]]\nhost = \"a.com\"\n").is_empty());
    // A credential for a host only an ask rule covers is injected once approved.
    assert!(lints("version = 1\n[[ask]]\nhost = \"a.com\"\n[[credential]]\nname = \"n\"\nhosts = [\"a.com\"]\nheader = \"X\"\nvalue = \"${env:X}\"\n").is_empty());
}

#[test]
fn a_method_no_registry_knows_is_a_warning_with_the_standard_one_it_resembles() {
    for (written, best) in [
        ("GTE", "GET"),
        ("gte", "GET"),
        ("POTS", "POST"),
        ("DELET", "DELETE"),
        ("PTACH", "PATCH"),
    ] {
        for kind in ["allow", "deny", "ask"] {
            let l = lints(&format!(
                "version = 1\n[[{kind}]]\nhost = \"a.com\"\nmethods = [\"GET\", \"{written}\"]\n"
            ));
            let upper = written.to_ascii_uppercase();
            assert!(
                l.contains(&format!(
                    "policy.toml:2:1: warning: method \"{upper}\" is not a standard HTTP method, so this rule matches only a client that sends exactly that; did you mean \"{best}\"?"
                )),
                "{kind} {written}: {l:?}"
            );
        }
    }
    // Nothing close: the standard methods are listed instead.
    let l = lints("version = 1\n[[allow]]\nhost = \"a.com\"\nmethods = [\"FROBNICATE\"]\n");
    assert_eq!(
        l,
        vec![
            "policy.toml:2:1: warning: method \"FROBNICATE\" is not a standard HTTP method, so this rule matches only a client that sends exactly that (standard methods: GET, HEAD, POST, PUT, DELETE, CONNECT, OPTIONS, TRACE, PATCH)"
        ]
    );
    // Registered methods, WebDAV's included, and lower case: no warning.
    assert!(
        lints("version = 1\n[[allow]]\nhost = \"a.com\"\nmethods = [\"get\", \"PATCH\", \"PROPFIND\", \"MKCOL\", \"QUERY\", \"VERSION-CONTROL\"]\n")
            .is_empty()
    );
}
