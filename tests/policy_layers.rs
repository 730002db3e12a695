//! Layered policies end to end: a project policy that `extends` a base.
//! The base's deny wins over the project's allow, every decision (`policy
//! test`, the 403 body) names the base file and line, `policy check` fails
//! on a project rule a base deny overrides, and a change to the base file
//! reloads a running proxy.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use airlock_test_support::client::{ClientOutput, curl};
use airlock_test_support::pki::TestPki;
use airlock_test_support::proxy::{AirlockProxy, ProxyOptions};
use airlock_test_support::upstream::Upstream;

const AIRLOCK: &str = airlock_test_support::airlock_bin!();

fn airlock(args: &[&str]) -> Output {
    std::process::Command::new(AIRLOCK)
        .args(args)
        .output()
        .unwrap()
}

fn show(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Line 2 of the base: a deny of `/echo/secret` on api.test.
fn base(port: u16) -> String {
    format!(
        "version = 1\n[[deny]]\nhost = \"api.test\"\nport = {port}\npaths = [\"/echo/secret\"]\ndescription = \"org-wide\"\n"
    )
}

/// Line 4 of the project: an allow of all of `/echo/**`, which the base's
/// deny partly overrides.
fn project(extends: &str, port: u16) -> String {
    format!(
        "version = 1\nextends = [{extends:?}]\n\n[[allow]]\nhost = \"api.test\"\nport = {port}\nmethods = [\"GET\"]\npaths = [\"/echo\", \"/echo/**\"]\n"
    )
}

/// `org/base.toml` and `project.toml` (extending `org/base.toml`) in `dir`.
fn write_pair(dir: &Path, port: u16) -> PathBuf {
    std::fs::create_dir_all(dir.join("org")).unwrap();
    std::fs::write(dir.join("org/base.toml"), base(port)).unwrap();
    let top = dir.join("project.toml");
    std::fs::write(&top, project("org/base.toml", port)).unwrap();
    top
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn policy_test_names_the_base_file_and_line_of_a_base_deny() {
    let dir = tempfile::tempdir().unwrap();
    let top = write_pair(dir.path(), 443);
    let top = top.to_str().unwrap();
    let base = dir.path().join("org/base.toml");
    let base = base.display();

    let out = airlock(&["policy", "test", top, "GET", "https://api.test/echo/secret"]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(
        text(&out.stdout).contains(&format!("(decided by {base}:2)")),
        "{}",
        show(&out)
    );
    let out = airlock(&["policy", "test", top, "GET", "https://api.test/echo/hi"]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert!(
        text(&out.stdout).contains(&format!("allow by {top}:4")),
        "{}",
        show(&out)
    );
}

#[test]
fn policy_check_fails_on_a_project_allow_a_base_deny_overrides() {
    let dir = tempfile::tempdir().unwrap();
    let top = write_pair(dir.path(), 443);
    let top = top.to_str().unwrap();
    let base = dir.path().join("org/base.toml");
    let out = airlock(&["policy", "check", top]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(&format!(
            "{top}:4:1: error: this allow rule cannot override the base policy's deny rule at {}:2",
            base.display()
        )),
        "{}",
        show(&out)
    );
    assert!(stdout.contains("1 error"), "{}", show(&out));

    // Narrowed so that the deny no longer reaches it: accepted.
    std::fs::write(
        top,
        "version = 1\nextends = [\"org/base.toml\"]\n[[allow]]\nhost = \"api.test\"\npaths = [\"/echo/public\"]\n",
    )
    .unwrap();
    let out = airlock(&["policy", "check", top]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert!(text(&out.stdout).contains(": ok ("), "{}", show(&out));
}

#[test]
fn policy_check_reports_cycles_missing_bases_and_duplicate_credentials_at_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.toml");
    let b = dir.path().join("b.toml");
    std::fs::write(&a, "version = 1\nextends = [\"b.toml\"]\n").unwrap();
    std::fs::write(&b, "version = 1\n\nextends = [\"a.toml\"]\n").unwrap();
    let out = airlock(&["policy", "check", a.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    assert!(
        text(&out.stderr).contains(&format!("{}:3:12: `extends` cycle", b.display())),
        "{}",
        show(&out)
    );

    std::fs::write(&a, "version = 1\nextends = [\"gone.toml\"]\n").unwrap();
    let out = airlock(&["policy", "check", a.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    assert!(
        text(&out.stderr).contains(&format!(
            "{}:2:12: cannot read base policy \"gone.toml\"",
            a.display()
        )),
        "{}",
        show(&out)
    );

    let credential = "[[credential]]\nname = \"gh\"\nhost = \"api.github.com\"\nheader = \"Authorization\"\nvalue = \"${env:GH}\"\n";
    std::fs::write(&b, format!("version = 1\n{credential}")).unwrap();
    std::fs::write(
        &a,
        format!("version = 1\nextends = [\"b.toml\"]\n\n{credential}"),
    )
    .unwrap();
    let out = airlock(&["policy", "check", a.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    assert!(
        text(&out.stderr).contains(&format!(
            "{}:4:1: credential \"gh\" is already defined at {}:2",
            a.display(),
            b.display()
        )),
        "{}",
        show(&out)
    );
}

#[test]
fn the_json_schema_knows_extends() {
    let out = airlock(&["policy", "schema"]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert!(text(&out.stdout).contains("\"extends\""), "{}", show(&out));
}

#[tokio::test]
async fn airlock_run_refuses_what_the_base_denies_naming_the_base_file_and_line() {
    let pki = TestPki::new();
    let upstream = Upstream::start(Some(pki.server_config(&["api.test"]))).await;
    let dir = tempfile::tempdir().unwrap();
    let top = write_pair(dir.path(), upstream.port());
    let workspace = dir.path().join("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let url = |path: &str| format!("https://api.test:{}{path}", upstream.port());
    let script = format!(
        "curl -sS -w '\\n%{{http_code}}\\n' {}; curl -sS -w '\\n%{{http_code}}\\n' {}",
        url("/echo/hi"),
        url("/echo/secret")
    );
    let out = tokio::process::Command::new(AIRLOCK)
        .arg("run")
        .arg("--policy")
        .arg(&top)
        .arg("--workspace")
        .arg(&workspace)
        .arg("--upstream-ca")
        .arg(&pki.ca_pem)
        .args(["--resolve", "api.test:127.0.0.1"])
        .arg("--audit-db")
        .arg(dir.path().join("audit/audit.db"))
        .arg("--audit-key")
        .arg(dir.path().join("audit/audit.key"))
        .arg("--timeout")
        .arg("60s")
        .args(["--", "sh", "-c", &script])
        .output()
        .await
        .unwrap();
    let out = ClientOutput::from(out);
    let base = dir.path().join("org/base.toml");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(
        lines.contains(&"200"),
        "the project's allow applies: {out:?}"
    );
    assert_eq!(lines.last(), Some(&"403"), "{out:?}");
    assert!(
        out.stdout
            .contains(&format!("[[deny]] rule at {}:2", base.display())),
        "the 403 names the base's rule: {out:?}"
    );
}

#[tokio::test]
async fn a_change_to_the_base_file_reloads_the_proxy() {
    let pki = TestPki::new();
    let upstream = Upstream::start(Some(pki.server_config(&["api.test"]))).await;
    let port = upstream.port();
    // The base lives outside the proxy's own directory: named absolutely.
    let org = tempfile::tempdir().unwrap();
    let base = org.path().join("base.toml");
    std::fs::write(&base, "version = 1\n").unwrap();
    let text = project(base.to_str().unwrap(), port);
    let mut opts = ProxyOptions::new(&text);
    opts.upstream_ca = Some(&pki.ca_pem);
    opts.resolve = vec!["api.test:127.0.0.1".into()];
    let proxy = AirlockProxy::start(AIRLOCK, opts);
    let secret = format!("https://api.test:{port}/echo/secret");
    assert_eq!(curl(&proxy, &[&secret]).await.0, 200);

    // No SIGHUP: the file change alone reloads.
    std::fs::write(&base, self::base(port)).unwrap();
    let mut answer = (0, String::new());
    for _ in 0..100 {
        let (code, body, _) = curl(&proxy, &[&secret]).await;
        answer = (code, body);
        if code == 403 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(answer.0, 403, "the new base deny never applied: {answer:?}");
    assert!(
        answer.1.contains(&format!("{}:2", base.display())),
        "{answer:?}"
    );
    // The record names the base's rule too.
    let named = format!("{}:2", base.display());
    let mut recorded = false;
    for _ in 0..50 {
        recorded = proxy
            .events()
            .iter()
            .any(|e| e["rule"].as_str() == Some(named.as_str()));
        if recorded {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(recorded, "no event names {named}: {:?}", proxy.events());
    let reloads = proxy
        .stderr
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains("reloaded policy"))
        .count();
    assert!(reloads >= 1, "{:?}", proxy.stderr.lock().unwrap());

    // A broken base is refused and the policy in force stays.
    std::fs::write(&base, "version = 1\n[[deny]]\nhots = 1\n").unwrap();
    for _ in 0..100 {
        if proxy
            .stderr
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("policy reload failed"))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(curl(&proxy, &[&secret]).await.0, 403);
    let hi = format!("https://api.test:{port}/echo/hi");
    assert_eq!(curl(&proxy, &[&hi]).await.0, 200);
}
