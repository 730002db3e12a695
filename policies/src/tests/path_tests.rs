use super::{allowed, decide, policy};
use crate::glob::PathGlob;
use crate::path::normalize;
use crate::{Decision, DenyReason};

fn exact(p: &str) -> String {
    normalize(p)
        .map(|n| n.exact)
        .unwrap_or_else(|e| panic!("{p}: {e:?}"))
}

fn loose(p: &str) -> String {
    normalize(p)
        .map(|n| n.loose)
        .unwrap_or_else(|e| panic!("{p}: {e:?}"))
}

#[test]
fn normalisation_decodes_unreserved_and_collapses_slashes() {
    assert_eq!(exact("/a/b?x=1"), "/a/b");
    assert_eq!(exact("/%61%62c"), "/abc");
    assert_eq!(exact("/a%7eb"), "/a~b");
    assert_eq!(exact("/a%3ab"), "/a%3Ab");
    assert_eq!(exact("/a///b"), "/a/b");
    assert_eq!(exact("/a/"), "/a/");
    assert_eq!(exact("/"), "/");
    assert_eq!(exact("/caf%C3%A9"), "/caf%C3%A9");
    assert_eq!(loose("/CAF%C3%A9"), "/café");
    assert_eq!(exact("*"), "*");
    assert_eq!(loose("/ADMIN;jsessionid=1/x"), "/admin/x");
    assert_eq!(loose("/Admin%3Bx"), "/admin");
}

/// Found by the `path_evaluate` fuzz target: a segment that is only
/// `;params` is empty once a Tomcat-style server strips them, so it must
/// collapse like `//` or a deny rule on "/admin/**" misses the request.
#[test]
fn param_only_segments_collapse_so_deny_rules_still_match() {
    assert_eq!(loose("/;mH//admin/;//h"), "/admin/h");
    assert_eq!(loose("/%3Bx/ADMIN"), "/admin");
    assert_eq!(loose("/admin/;x"), "/admin/");
    let p = policy(
        r#"
version = 1
default = "allow"
[[deny]]
host = "api.example.com"
paths = ["/admin", "/admin/**"]
"#,
    );
    for path in [
        "/;mH//admin/;//h",
        "/;x/admin",
        "/%3bx/Admin/y",
        "/a;b/../admin",
    ] {
        assert!(
            !allowed(&decide(&p, "api.example.com", "GET", path)),
            "{path} reached /admin"
        );
    }
}

#[test]
fn ambiguous_paths_are_refused() {
    for bad in [
        "/a/../b",
        "/a/./b",
        "/..",
        "/a/%2e%2e/b",
        "/a/%2E./b",
        "/a/.%2e",
        "/a%2fb",
        "/a%2Fb",
        "/a%5cb",
        "/a\\b",
        "/a\0b",
        "/a\tb",
        "/a%00b",
        "/a%0ab",
        "/a%zz",
        "/a%4",
        "/a%",
        "relative",
        "",
        "http://host/x",
        "/a/..;x/b",
        "/a/%2e%2e;x/b",
        "/a/..%3bx/b",
        "/a%252e%252e/b",
        "/a#frag",
    ] {
        assert!(normalize(bad).is_err(), "{bad:?} should be refused");
    }
}

#[test]
fn globs() {
    let g = PathGlob::new("/repos/**");
    for ok in ["/repos", "/repos/", "/repos/a", "/repos/a/b/c"] {
        assert!(g.matches(ok), "{ok}");
    }
    assert!(!g.matches("/reposx"));
    assert!(!g.matches("/other/repos"));
    let star = PathGlob::new("/users/*/keys");
    assert!(star.matches("/users/bob/keys"));
    assert!(!star.matches("/users/bob/x/keys"));
    let q = PathGlob::new("/v?/x");
    assert!(q.matches("/v1/x"));
    assert!(!q.matches("/v10/x"));
    let mid = PathGlob::new("/a/**/z");
    assert!(mid.matches("/a/z"));
    assert!(mid.matches("/a/b/c/z"));
    assert!(!mid.matches("/a/b/c"));
    let partial = PathGlob::new("/files/*.whl");
    assert!(partial.matches("/files/x-1.0.whl"));
    assert!(!partial.matches("/files/x.tar.gz"));
    assert!(PathGlob::new("/user").matches("/user"));
    assert!(!PathGlob::new("/user").matches("/user/"));
}

const RULES: &str = r#"
version = 1
[[allow]]
host = "api.example.com"
paths = ["/public/**", "/Admin-docs"]

[[deny]]
host = "api.example.com"
paths = ["/public/admin/**"]
"#;

#[test]
fn allow_rules_match_the_normalized_path_exactly() {
    let p = policy(RULES);
    assert!(allowed(&decide(
        &p,
        "api.example.com",
        "GET",
        "/public/a?x=../../etc"
    )));
    assert!(allowed(&decide(&p, "api.example.com", "GET", "/public//a")));
    assert!(allowed(&decide(
        &p,
        "api.example.com",
        "GET",
        "/%70ublic/a"
    )));
    assert!(allowed(&decide(
        &p,
        "api.example.com",
        "GET",
        "/Admin-docs"
    )));
    // Case-sensitive for allow rules.
    assert!(!allowed(&decide(&p, "api.example.com", "GET", "/PUBLIC/a")));
    assert!(!allowed(&decide(
        &p,
        "api.example.com",
        "GET",
        "/admin-docs"
    )));
    // Params are kept for allow rules: "/Admin-docs;x" is not "/Admin-docs".
    assert!(!allowed(&decide(
        &p,
        "api.example.com",
        "GET",
        "/Admin-docs;x"
    )));
    // Escaping out of the allowed prefix.
    for trick in [
        "/public/../private",
        "/public/%2e%2e/private",
        "/public%2f..%2fprivate",
        "/public\\..\\private",
    ] {
        let d = decide(&p, "api.example.com", "GET", trick);
        assert!(
            matches!(&d, Decision::Deny(denial) if matches!(denial.reason, DenyReason::AmbiguousPath { .. })),
            "{trick}: {d:?}"
        );
    }
}

#[test]
fn deny_rules_also_match_case_and_params_variants() {
    let p = policy(RULES);
    for sneaky in [
        "/public/admin/x",
        "/public/ADMIN/x",
        "/public/Admin;a=b/x",
        "/public//admin/x",
        "/public/%61dmin/x",
        "/public/adm%49n/x",
        "/public/admin%3Bx/y",
        "/PUBLIC/admin",
        "/public/admin",
    ] {
        let d = decide(&p, "api.example.com", "GET", sneaky);
        assert!(
            matches!(&d, Decision::Deny(denial) if denial.reason == DenyReason::DeniedByRule),
            "{sneaky}: {d:?}"
        );
    }
    assert!(allowed(&decide(
        &p,
        "api.example.com",
        "GET",
        "/public/administrator"
    )));
}

#[test]
fn ambiguous_paths_are_denied_even_with_default_allow() {
    for default in ["allow", "report"] {
        let p = policy(&format!(
            "version = 1\ndefault = \"{default}\"\n[[deny]]\nhost = \"x.example\"\n"
        ));
        let d = decide(&p, "api.example.com", "GET", "/a/../b");
        assert!(
            matches!(d, Decision::Deny(ref denial) if matches!(denial.reason, DenyReason::AmbiguousPath { .. })),
            "{d:?}"
        );
    }
}

#[test]
fn many_double_stars_on_a_long_path_stay_fast() {
    let g = PathGlob::new("/**/a/**/b/**/c/**/d/**/e");
    let long = "/x".repeat(5000);
    let start = std::time::Instant::now();
    assert!(!g.matches(&long));
    assert!(start.elapsed() < std::time::Duration::from_secs(2));
    assert!(g.matches("/a/b/c/d/e"));
    assert!(g.matches("/q/a/q/b/c/q/q/d/e"));
}

/// `;params` are routed away by Tomcat, Jetty and Spring: an allow glob
/// must match the path as sent *and* as such a server routes it.
const PARAM_RULES: &str = r#"
version = 1
[[allow]]
host = "api.example.com"
paths = [
    "/files/*.whl",
    "/users/*/keys",
    "/v?/status",
    "/public/**",
    "/docs/**/index.html",
    "/items;v=2",
    "/plain",
]
"#;

#[test]
fn a_star_or_question_mark_never_matches_across_a_path_parameter() {
    let p = policy(PARAM_RULES);
    for path in [
        // Tomcat serves these as /files/internal-admin, /users/keys, ...
        "/files/internal-admin;.whl",
        "/files/internal-admin;x=1.whl",
        "/files/internal-admin%3B.whl",
        "/files/internal-admin%3b.whl",
        "/files/;.whl",
        "/files/x.whl;",
        "/users/;x/keys",
        "/users/bob/keys;x/../x",
        "/v;/status",
        "/v1;/status",
        "/docs/a/index.html;x",
        "/docs/a/x;index.html",
        "/plain;x",
        "/items;v=3",
        "/items",
        "/items;v=2x",
        "/;x/plain",
    ] {
        assert!(
            !allowed(&decide(&p, "api.example.com", "GET", path)),
            "{path} allowed"
        );
    }
    for path in [
        "/files/x-1.0.whl",
        "/files/x.whl?a=;b",
        "/users/bob;jsessionid=1/keys",
        "/v1/status",
        "/public/a;jsessionid=1",
        "/public/a;x/b;y",
        "/public/;x",
        "/docs/a;v=1/index.html",
        "/docs/index.html",
        "/items;v=2",
        "/plain",
    ] {
        assert!(
            allowed(&decide(&p, "api.example.com", "GET", path)),
            "{path} refused"
        );
    }
}

#[test]
fn the_routed_reading_strips_parameters_and_collapses_what_they_emptied() {
    let routed = |p: &str| {
        normalize(p)
            .map(|n| n.routed)
            .unwrap_or_else(|e| panic!("{e:?}"))
    };
    assert_eq!(routed("/files/admin;.whl"), "/files/admin");
    assert_eq!(routed("/files/admin%3b.whl"), "/files/admin");
    assert_eq!(routed("/a;x/b;y=1,2"), "/a/b");
    assert_eq!(routed("/;x/admin"), "/admin");
    assert_eq!(routed("/a/;x"), "/a/");
    assert_eq!(routed("/;x"), "/");
    assert_eq!(routed("/a/b"), "/a/b");
    let glob = PathGlob::new("/files/*.whl");
    assert!(glob.allows(&normalize("/files/a.whl").unwrap_or_else(|e| panic!("{e:?}"))));
    assert!(!glob.allows(&normalize("/files/a;.whl").unwrap_or_else(|e| panic!("{e:?}"))));
    // Deny rules are unchanged: any reading that matches denies.
    assert!(glob.matches("/files/a;.whl"));
}

#[test]
fn a_path_starting_with_two_slashes_is_refused_as_a_network_path() {
    let p = policy(PARAM_RULES);
    for path in ["//public/a", "///public/a", "//api.example.com/public/a"] {
        let d = decide(&p, "api.example.com", "GET", path);
        assert!(
            matches!(&d, Decision::Deny(denial) if matches!(&denial.reason, DenyReason::AmbiguousPath { detail } if detail.contains("'//host/path'"))),
            "{path}: {d:?}"
        );
    }
    assert!(allowed(&decide(&p, "api.example.com", "GET", "/public//a")));
}
