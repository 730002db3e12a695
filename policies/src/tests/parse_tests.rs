use super::{parse_error, policy};
use crate::{DefaultAction, Policy};

#[test]
fn unknown_field_names_line_column_table_and_suggestion() {
    let err = parse_error("version = 1\n\n[[allow]]\nhots = \"a.com\"\n");
    assert_eq!(
        err,
        "policy.toml:4:1: unknown field `hots` in [[allow]]; did you mean `host`? (valid fields: host, hosts, port, ports, methods, paths, max_requests, body, protocol, tls, upgrade, mcp, description)"
    );
}

#[test]
fn unknown_top_level_and_nested_fields() {
    let err = parse_error("version = 1\n[[alow]]\nhost = \"a.com\"\n");
    assert!(
        err.starts_with(
            "policy.toml:2:3: unknown field `alow` at top level; did you mean `allow`?"
        ),
        "{err}"
    );
    let err = parse_error(
        "[[allow]]\nhost = \"a.com\"\nmethods = [\"POST\"]\n[allow.body]\namount = { mx = 3 }\n",
    );
    assert!(
        err.starts_with(
            "policy.toml:5:12: unknown field `mx` in [allow.body]; did you mean `max`?"
        ),
        "{err}"
    );
    let err = parse_error("[[deny]]\nhost = \"a.com\"\nmax_requests = 3\n");
    assert!(
        err.starts_with("policy.toml:3:1: unknown field `max_requests` in [[deny]]"),
        "{err}"
    );
    let err = parse_error(
        "[[credential]]\nname = \"x\"\nhosts = [\"a.com\"]\nheader = \"A\"\nvalue = \"${env:A}\"\nplacehoder = \"X\"\n",
    );
    assert!(err.starts_with("policy.toml:6:1: unknown field `placehoder` in [[credential]]; did you mean `placeholder`?"), "{err}");
}

#[test]
fn type_and_value_errors_have_positions() {
    let err = parse_error("[[allow]]\nhost = \"a.com\"\nport = 70000\n");
    assert!(err.starts_with("policy.toml:3:8: "), "{err}");
    let err = parse_error("[[allow]]\nhost = \"a.com\"\nport = \"x\"\n");
    assert!(err.starts_with("policy.toml:3:8: invalid type"), "{err}");
    let err = parse_error("default = \"block\"\n");
    assert!(err.starts_with("policy.toml:1:11: "), "{err}");
    let err = parse_error("version = 2\n");
    assert_eq!(
        err,
        "policy.toml:1:11: unsupported version 2; this airlock understands `version = 1`"
    );
    let err = parse_error("[[allow]]\nhost = \"a..b\"\n");
    assert_eq!(
        err,
        "policy.toml:2:8: invalid host \"a..b\": empty label; hosts look like \"api.example.com\" or \"*.example.com\""
    );
    let err = parse_error("[[allow]]\nhost = \"a.com\"\nmethods = [\"GET\", \"BAD METHOD\"]\n");
    assert!(
        err.starts_with("policy.toml:3:19: \"BAD METHOD\" is not an HTTP method"),
        "{err}"
    );
    let err = parse_error("[[allow]]\nhost = \"a.com\"\npaths = [\"v1/x\"]\n");
    assert!(
        err.starts_with(
            "policy.toml:3:10: invalid path pattern: path \"v1/x\" does not start with '/'"
        ),
        "{err}"
    );
    let err = parse_error("[[allow]]\nhost = \"a.com\"\npaths = [\"/a/../b\"]\n");
    assert!(
        err.starts_with("policy.toml:3:10: invalid path pattern: dot segment"),
        "{err}"
    );
    let err = parse_error("x = [\n");
    assert!(err.starts_with("policy.toml:1:"), "{err}");
}

#[test]
fn structural_rule_errors() {
    let err = parse_error("[[allow]]\nmethods = [\"GET\"]\n");
    assert!(
        err.starts_with("policy.toml:1:1: [[allow]] needs `host = \"...\"` or `hosts = [...]`"),
        "{err}"
    );
    let err = parse_error("[[allow]]\nhost = \"a.com\"\nhosts = [\"b.com\"]\n");
    assert!(
        err.starts_with("policy.toml:3:9: [[allow]] has both `host` and `hosts`"),
        "{err}"
    );
    let err = parse_error("[[allow]]\nhost = \"a.com\"\nport = 1\nports = [2]\n");
    assert!(err.contains("both `port` and `ports`"), "{err}");
    let err = parse_error("[[allow]]\nhost = \"a.com\"\nprotocol = \"tcp\"\n");
    assert!(
        err.starts_with("policy.toml:1:1: a `protocol = \"tcp\"` rule needs `port = N`"),
        "{err}"
    );
    let err = parse_error(
        "[[allow]]\nhost = \"a.com\"\nport = 22\nprotocol = \"tcp\"\nmethods = [\"GET\"]\n",
    );
    assert!(
        err.starts_with(
            "policy.toml:5:11: `methods` cannot be enforced on a `protocol = \"tcp\"` rule"
        ),
        "{err}"
    );
    let err = parse_error("[[allow]]\nhost = \"a.com\"\ntls = \"passthrough\"\npaths = [\"/x\"]\n");
    assert!(
        err.starts_with(
            "policy.toml:4:9: `paths` cannot be enforced on a `tls = \"passthrough\"` rule"
        ),
        "{err}"
    );
    let err = parse_error("[[allow]]\nhost = \"a.com\"\ntls = \"passthrough\"\nmax_requests = 5\n");
    assert!(err.contains("`max_requests` cannot be enforced"), "{err}");
    let err = parse_error(
        "[[allow]]\nhost = \"a.com\"\nport = 22\nprotocol = \"tcp\"\n[allow.body]\nx = { max = 1 }\n",
    );
    assert!(err.contains("`body` cannot be enforced"), "{err}");
    let err = parse_error("[[allow]]\nhost = \"a.com\"\nmethods = []\n");
    assert!(err.contains("`methods` is empty"), "{err}");
    let err = parse_error(
        "[[allow]]\nhost = \"a.com\"\nmethods = [\"POST\"]\n[allow.body]\nx = { max = \"ten\" }\n",
    );
    assert!(
        err.starts_with("policy.toml:5:13: expected a number"),
        "{err}"
    );
    let err = parse_error(
        "[[allow]]\nhost = \"a.com\"\nmethods = [\"POST\"]\n[allow.body]\nx = { min = 5, max = 1 }\n",
    );
    assert!(err.contains("min is greater than max"), "{err}");
}

#[test]
fn empty_and_minimal_policies() {
    let p = policy("");
    assert_eq!(p.default_action(), DefaultAction::Deny);
    assert!(p.lint().is_empty());
    let p = policy("version = 1\n");
    assert_eq!(p.text(), "version = 1\n");
    assert_eq!(p.source_name(), "policy.toml");
    let d = Policy::deny_all();
    assert_eq!(d.source_name(), "<deny-all>");
    assert_eq!(d.default_action(), DefaultAction::Deny);
    assert!(Policy::parse("again.toml", d.text()).is_ok());
}

#[test]
fn methods_are_upper_cased_and_rule_refs_point_at_headers() {
    let p = policy("version = 1\n\n[[allow]]\nhost = \"a.com\"\nmethods = [\"get\"]\n");
    let d = super::decide(&p, "a.com", "GET", "/");
    match d {
        crate::Decision::Allow(a) => {
            let rule = a.rule.unwrap_or_else(|| panic!("rule expected"));
            assert_eq!(rule.to_string(), "policy.toml:3");
            assert_eq!(rule.line, 3);
            assert_eq!(rule.index, 0);
        }
        other => panic!("{other:?}"),
    }
    // Request methods are compared exactly: "get" is not "GET".
    assert!(!super::decide(&p, "a.com", "get", "/").is_allowed());
}

#[test]
fn rule_keys_are_stable_across_reloads_and_moves() {
    let a = policy("version = 1\n[[allow]]\nhost = \"a.com\"\nmax_requests = 3\n");
    let b = policy(
        "# moved down\nversion = 1\n\n[[allow]]\ndescription = \"x\"\nhost = \"A.com\"\nmax_requests = 3\n",
    );
    let c = policy("version = 1\n[[allow]]\nhost = \"a.com\"\nmax_requests = 4\n");
    let key = |p: &Policy| match super::decide(p, "a.com", "GET", "/") {
        crate::Decision::Allow(a) => a.rule.map(|r| r.key()).unwrap_or_default(),
        other => panic!("{other:?}"),
    };
    assert_eq!(key(&a), key(&b));
    assert_ne!(key(&a), key(&c));
    assert!(key(&a).starts_with("allow-"));
}

#[test]
fn policy_is_send_sync_and_cheap_to_clone() {
    fn assert_send_sync<T: Send + Sync + Clone>() {}
    assert_send_sync::<Policy>();
    assert_send_sync::<crate::Decision>();
    assert_send_sync::<crate::ConnectionDecision>();
    let p = policy("version = 1\n");
    let q = p.clone();
    assert!(std::ptr::eq(p.text(), q.text()));
}

#[test]
fn json_schema_is_json_and_mentions_every_key() {
    let schema = Policy::json_schema();
    let value: serde_json::Value = serde_json::from_str(&schema).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        value["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    let props = &value["properties"];
    for key in ["version", "default", "allow", "deny", "credential"] {
        assert!(props.get(key).is_some(), "schema lacks {key}");
    }
    for word in [
        "max_requests",
        "one_of",
        "max_length",
        "placeholder",
        "passthrough",
        "tcp",
        "report",
    ] {
        assert!(schema.contains(word), "schema lacks {word}");
    }
    assert_eq!(value["additionalProperties"], false);
}

#[test]
fn friendly_structure_messages() {
    let err = parse_error("[allow]\nhost = \"a.com\"\n");
    assert!(err.starts_with("policy.toml:1:1: invalid type: map, expected a sequence; rules are lists of tables: write [[allow]]"), "{err}");
    let err =
        parse_error("[[credential]]\nname = \"x\"\nhosts = [\"a.com\"]\nvalue = \"${env:A}\"\n");
    assert_eq!(
        err,
        "policy.toml:1:1: missing field `header` in [[credential]]"
    );
    let err = parse_error("[[allow]]\nhost = \"a.com\"\n[allow.body]\namount = 5\n");
    assert_eq!(
        err,
        "policy.toml:4:10: body constraint for `amount` must be a table like { max = 100 }, not integer `5`"
    );
    let err = parse_error("[[allow]]\nhost = \"a.com\"\nmethods = \"GET\"\n");
    assert!(
        err.ends_with("expected a sequence, i.e. a list like [\"GET\"] or [443]"),
        "{err}"
    );
}

#[test]
fn rule_descriptions_are_looked_up_by_reference() {
    let p = policy("version = 1\n[[allow]]\ndescription = \"read the API\"\nhost = \"a.com\"\n");
    let crate::Decision::Allow(a) = super::decide(&p, "a.com", "GET", "/") else {
        panic!()
    };
    let rule = a.rule.unwrap_or_else(|| panic!("rule"));
    assert_eq!(p.rule_description(&rule), Some("read the API"));
    let other = policy("version = 1\n[[allow]]\nhost = \"b.com\"\n");
    assert_eq!(other.rule_description(&rule), None);
}

#[test]
fn an_unknown_value_gets_the_same_did_you_mean_as_an_unknown_field() {
    for (text, expected) in [
        (
            "version = 1\ndefault = \"dney\"\n",
            "policy.toml:2:11: unknown value \"dney\" for `default`; did you mean \"deny\"? (one of: deny, allow, report)",
        ),
        (
            "version = 1\ndefault = \"Deny\"\n",
            "policy.toml:2:11: unknown value \"Deny\" for `default`; did you mean \"deny\"? (one of: deny, allow, report)",
        ),
        (
            "version = 1\n[[allow]]\nhost = \"a.com\"\nprotocol = \"htp\"\n",
            "policy.toml:4:12: unknown value \"htp\" for `protocol`; did you mean \"http\"? (one of: http, tcp)",
        ),
        (
            "version = 1\n[[allow]]\nhost = \"a.com\"\ntls = \"passthru\"\n",
            "policy.toml:4:7: unknown value \"passthru\" for `tls`; did you mean \"passthrough\"? (one of: intercept, passthrough)",
        ),
        // Nothing close: the values alone.
        (
            "version = 1\ndefault = \"maybe\"\n",
            "policy.toml:2:11: unknown value \"maybe\" for `default` (one of: deny, allow, report)",
        ),
    ] {
        assert_eq!(parse_error(text), expected, "{text}");
    }
}

#[test]
fn a_number_written_as_a_string_says_to_drop_the_quotes() {
    for (text, expected) in [
        (
            "version = 1\n[[allow]]\nhost = \"a.com\"\nports = [\"443\"]\n",
            "policy.toml:4:10: \"443\" is a string, and a number is expected here: write 443 without quotes",
        ),
        (
            "version = 1\n[[allow]]\nhost = \"a.com\"\nports = [443, \"8443\"]\n",
            "policy.toml:4:15: \"8443\" is a string, and a number is expected here: write 8443 without quotes",
        ),
        (
            "version = 1\n[[allow]]\nhost = \"a.com\"\nport = \"8443\"\n",
            "policy.toml:4:8: \"8443\" is a string, and a number is expected here: write 8443 without quotes",
        ),
        (
            "version = 1\n[[allow]]\nhost = \"a.com\"\nmax_requests = \"10\"\n",
            "policy.toml:4:16: \"10\" is a string, and a number is expected here: write 10 without quotes",
        ),
    ] {
        assert_eq!(parse_error(text), expected, "{text}");
    }
    // A string that is no number keeps the type error, in the user's words.
    let err = parse_error("version = 1\n[[allow]]\nhost = \"a.com\"\nports = [\"https\"]\n");
    assert!(
        err.contains("\"https\"") && !err.contains("without quotes"),
        "{err}"
    );
}
