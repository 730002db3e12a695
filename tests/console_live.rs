//! The console's live view follows every kind of session that writes the
//! database while it runs: a live session (`airlock session`, its steps
//! sent from another process) and a standalone proxy (`airlock proxy`,
//! whose recorder is the sidecar's). `airlock run` is followed in the
//! browser by tests/console.rs, and `airlock sidecar` in a pod by
//! tests/sidecar.rs. Each refusal must reach the stream within a second of
//! the request, and the stream must end when the session does.

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use airlock_test_support::audit_cli::sessions;
use airlock_test_support::client::curl;
use airlock_test_support::console::{Console, since_recorded};
use airlock_test_support::pki::TestPki;
use airlock_test_support::proxy::{AirlockProxy, ProxyOptions};
use airlock_test_support::upstream::Upstream;

const AIRLOCK: &str = airlock_test_support::airlock_bin!();

fn policy(port: u16) -> String {
    format!(
        r#"version = 1
[[allow]]
host = "api.test"
port = {port}
methods = ["GET"]
paths = ["/echo"]
"#
    )
}

fn airlock(args: &[&str]) -> Output {
    std::process::Command::new(AIRLOCK)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

/// The one session of `mode` in the database.
fn session_of_mode(db: &Path, mode: &str) -> String {
    let listed = sessions(AIRLOCK, db);
    let found: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["mode"] == mode)
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(found.len(), 1, "{listed:#}");
    found[0].to_owned()
}

fn is_refusal_of(path: &'static str) -> impl Fn(&str, &serde_json::Value) -> bool {
    move |event, data| {
        event == "ev"
            && data["kind"] == "http"
            && data["verdict"] == "deny"
            && data["summary"].as_str().is_some_and(|s| s.contains(path))
    }
}

/// The event reached the reader less than a second after the recorder
/// stamped it.
fn assert_shown_within_a_second_of_recording(ev: &serde_json::Value) {
    let lag = since_recorded(ev);
    assert!(
        lag < Duration::from_secs(1),
        "shown {lag:?} after it was recorded: {ev}"
    );
}

// Multi-threaded: the steps block this thread while the upstream answers.
#[tokio::test(flavor = "multi_thread")]
async fn the_live_view_follows_a_live_session_and_a_proxy_as_they_record() {
    let pki = TestPki::new();
    let upstream = Upstream::start(Some(pki.server_config(&["api.test"]))).await;
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let db = dir.path().join("audit/audit.db");
    let key = dir.path().join("audit/audit.key");
    let policy_file = dir.path().join("policy.toml");
    std::fs::write(&policy_file, policy(upstream.port())).unwrap();
    let s = |p: &Path| p.to_str().unwrap().to_owned();
    let base = format!("https://api.test:{}", upstream.port());

    // A live session, started before the console (as a responder finds it).
    let started = airlock(&[
        "session",
        "start",
        "--policy",
        &s(&policy_file),
        "--workspace",
        &s(&workspace),
        "--upstream-ca",
        &s(&pki.ca_pem),
        "--resolve",
        "api.test:127.0.0.1",
        "--audit-db",
        &s(&db),
        "--audit-key",
        &s(&key),
    ]);
    assert_eq!(started.status.code(), Some(0), "{started:?}");
    let live = String::from_utf8(started.stdout).unwrap().trim().to_owned();
    let first = airlock(&["session", "exec", &live, "--", "true"]);
    assert_eq!(first.status.code(), Some(0), "{first:?}");

    // A standalone proxy on the same database.
    let text = policy(upstream.port());
    let mut opts = ProxyOptions::new(&text);
    opts.upstream_ca = Some(&pki.ca_pem);
    opts.resolve = vec!["api.test:127.0.0.1".into()];
    opts.extra = vec!["--audit-db".into(), s(&db), "--audit-key".into(), s(&key)];
    let mut proxy = AirlockProxy::start(AIRLOCK, opts);
    let (code, _, _) = curl(&proxy, &[&format!("{base}/echo")]).await;
    assert_eq!(code, 200);

    let console = Console::start(AIRLOCK, &db, &key).await;
    let session_id = session_of_mode(&db, "session");
    let proxy_id = session_of_mode(&db, "proxy");
    let mut session_stream = console.live(&session_id, 0).await;
    let mut proxy_stream = console.live(&proxy_id, 0).await;
    // What was recorded before the stream opened comes first.
    session_stream
        .until(Duration::from_secs(5), |e, d| {
            e == "ev" && d["kind"] == "step_start"
        })
        .await;
    proxy_stream
        .until(Duration::from_secs(5), |e, d| {
            e == "ev" && d["verdict"] == "allow" && d["kind"] == "http"
        })
        .await;

    let url = format!("{base}/session-refused");
    let live_for_step = live.clone();
    let step = tokio::task::spawn_blocking(move || {
        airlock(&[
            "session",
            "exec",
            &live_for_step,
            "--",
            "curl",
            "-sS",
            "-o",
            "/dev/null",
            &url,
        ])
    });
    let (ev, _) = session_stream
        .until(Duration::from_secs(20), is_refusal_of("/session-refused"))
        .await;
    assert!(step.await.unwrap().status.success());
    assert_shown_within_a_second_of_recording(&ev);

    let (code, _, _) = curl(&proxy, &[&format!("{base}/proxy-refused")]).await;
    assert_eq!(code, 403);
    let (ev, _) = proxy_stream
        .until(Duration::from_secs(5), is_refusal_of("/proxy-refused"))
        .await;
    assert_shown_within_a_second_of_recording(&ev);

    // Each stream ends with its session.
    let stopped = airlock(&["session", "stop", &live]);
    assert_eq!(stopped.status.code(), Some(0), "{stopped:?}");
    session_stream
        .until(Duration::from_secs(10), |e, _| e == "end")
        .await;
    assert_eq!(proxy.stop(), Some(0));
    proxy_stream
        .until(Duration::from_secs(10), |e, _| e == "end")
        .await;
}
