use super::{decide, policy};
use crate::{ConnectionDecision, Decision, DenyReason, Policy};

const EXAMPLES: [(&str, &str); 5] = [
    ("pypi.toml", include_str!("../../examples/pypi.toml")),
    (
        "github-readonly.toml",
        include_str!("../../examples/github-readonly.toml"),
    ),
    ("llm-api.toml", include_str!("../../examples/llm-api.toml")),
    (
        "deny-all.toml",
        include_str!("../../examples/deny-all.toml"),
    ),
    ("mcp.toml", include_str!("../../examples/mcp.toml")),
];

#[test]
fn every_example_parses_without_warnings_and_matches_the_schema_keys() {
    let schema: serde_json::Value =
        serde_json::from_str(&Policy::json_schema()).unwrap_or_else(|e| panic!("{e}"));
    let props = schema["properties"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    for (name, text) in EXAMPLES {
        let p = Policy::parse(name, text).unwrap_or_else(|e| panic!("{e}"));
        let lints: Vec<String> = p.lint().iter().map(ToString::to_string).collect();
        assert!(lints.is_empty(), "{name}: {lints:?}");
        let doc: toml::Table = toml::from_str(text).unwrap_or_else(|e| panic!("{e}"));
        for key in doc.keys() {
            assert!(
                props.contains_key(key),
                "{name}: schema lacks top-level key {key}"
            );
        }
    }
    // Every example file in the folder is covered by this test.
    let listed: Vec<&str> = EXAMPLES.iter().map(|(n, _)| *n).collect();
    assert_eq!(listed.len(), 5);
}

#[test]
fn pypi_example_allows_pip_and_nothing_else() {
    let p = policy(EXAMPLES[0].1);
    assert!(decide(&p, "pypi.org", "GET", "/simple/requests/").is_allowed());
    assert!(
        decide(
            &p,
            "files.pythonhosted.org",
            "GET",
            "/packages/ab/cd/requests-2.32.0-py3-none-any.whl"
        )
        .is_allowed()
    );
    assert!(!decide(&p, "pypi.org", "POST", "/legacy/").is_allowed());
    assert!(!decide(&p, "upload.pypi.org", "POST", "/legacy/").is_allowed());
}

#[test]
fn github_example() {
    let p = policy(EXAMPLES[1].1);
    assert!(decide(&p, "api.github.com", "GET", "/repos/rust-lang/rust").is_allowed());
    assert!(
        decide(
            &p,
            "github.com",
            "GET",
            "/rust-lang/rust.git/info/refs?service=git-upload-pack"
        )
        .is_allowed()
    );
    assert!(
        decide(
            &p,
            "github.com",
            "POST",
            "/rust-lang/rust.git/git-upload-pack"
        )
        .is_allowed()
    );
    assert!(decide(&p, "codeload.github.com", "GET", "/a/b/tar.gz/main").is_allowed());
    let push = decide(&p, "github.com", "POST", "/a/b.git/git-receive-pack");
    assert!(
        matches!(push, Decision::Deny(ref d) if d.reason == DenyReason::DeniedByRule),
        "{push:?}"
    );
    assert!(!decide(&p, "api.github.com", "DELETE", "/repos/a/b").is_allowed());
    let [cred] = p.credentials() else {
        panic!("one credential")
    };
    assert_eq!(cred.placeholder.as_deref(), Some("GITHUB_TOKEN"));
    // The placeholder names the variable; its value is a dummy.
    assert!(
        EXAMPLES[1]
            .1
            .contains("airlock-placeholder-github_token-<hex>")
    );
    assert!(
        !EXAMPLES[1]
            .1
            .contains("set to\n# the placeholder \"GITHUB_TOKEN\"")
    );
}

#[test]
fn credential_hosts_are_https_only_in_examples() {
    for index in [1, 2] {
        let p = policy(EXAMPLES[index].1);
        for cred in p.credentials() {
            for pattern in &cred.hosts {
                let h = super::host(&pattern.to_string());
                assert!(
                    matches!(p.connection(&h, 80), ConnectionDecision::Deny(_)),
                    "{}: {h} is reachable on port 80",
                    EXAMPLES[index].0
                );
                assert_eq!(p.connection(&h, 443), ConnectionDecision::Inspect);
            }
        }
    }
}

#[test]
fn pypi_example_names_the_real_run_command() {
    assert!(
        EXAMPLES[0]
            .1
            .contains("airlock run --policy policies/examples/pypi.toml --workspace \"$(mktemp -d)\" -- pip install requests")
    );
}

#[test]
fn llm_example() {
    let p = policy(EXAMPLES[2].1);
    match decide(&p, "api.anthropic.com", "POST", "/v1/messages") {
        Decision::Allow(a) => assert_eq!(a.max_requests, Some(200)),
        other => panic!("{other:?}"),
    }
    assert!(decide(&p, "api.openai.com", "POST", "/v1/responses").is_allowed());
    assert!(!decide(&p, "api.openai.com", "GET", "/v1/files").is_allowed());
    let headers: Vec<&str> = p.credentials().iter().map(|c| c.header.as_str()).collect();
    assert_eq!(headers, ["x-api-key", "Authorization"]);
}

#[test]
fn deny_all_example() {
    let p = policy(EXAMPLES[3].1);
    assert!(!decide(&p, "example.com", "GET", "/").is_allowed());
    assert!(matches!(
        p.connection(&super::host("example.com"), 443),
        ConnectionDecision::Deny(_)
    ));
}
