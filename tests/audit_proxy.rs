//! The proxy's decisions as an incident responder reads them back:
//! `airlock proxy --audit-db` then `airlock audit ...`.

use std::process::Command;

use airlock_test_support::client::curl;
use airlock_test_support::pki::TestPki;
use airlock_test_support::proxy::{AirlockProxy, ProxyOptions};
use airlock_test_support::upstream::Upstream;

const AIRLOCK: &str = airlock_test_support::airlock_bin!();

const SECRET: &str = "sk-audit-secret-7f3a9c2e";

#[tokio::test]
async fn proxy_session_is_recorded_verifiable_and_secret_free() {
    let pki = TestPki::new();
    let upstream = Upstream::start(Some(pki.server_config(&["api.test"]))).await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("audit.db");
    let key = dir.path().join("audit.key");
    let policy = format!(
        r#"version = 1
[[allow]]
host = "api.test"
port = {port}
methods = ["GET", "POST"]
paths = ["/echo"]

[[credential]]
name = "api"
hosts = ["api.test"]
header = "Authorization"
value = "Bearer ${{env:API_TOKEN}}"
"#,
        port = upstream.port()
    );
    let mut opts = ProxyOptions::new(&policy);
    opts.upstream_ca = Some(&pki.ca_pem);
    opts.resolve = vec!["api.test:127.0.0.1".into()];
    opts.env = vec![("API_TOKEN", SECRET)];
    opts.extra = vec![
        "--audit-db".into(),
        db.to_str().unwrap().into(),
        "--audit-key".into(),
        key.to_str().unwrap().into(),
    ];
    let mut proxy = AirlockProxy::start(AIRLOCK, opts);
    let echo = format!("https://api.test:{}/echo", upstream.port());
    let (code, _, _) = curl(&proxy, &["--data", "hello=world", &echo]).await;
    assert_eq!(code, 200);
    let (code, _, _) = curl(
        &proxy,
        &[&format!("https://api.test:{}/admin", upstream.port())],
    )
    .await;
    assert_eq!(code, 403);
    assert_eq!(proxy.stop(), Some(0));

    let audit = |args: &[&str]| {
        let out = Command::new(AIRLOCK)
            .arg("audit")
            .args(args)
            .arg("--audit-db")
            .arg(&db)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, sessions, err) = audit(&["sessions", "--json"]);
    assert_eq!(code, Some(0), "{err}");
    let sessions: serde_json::Value = serde_json::from_str(&sessions).unwrap();
    let id = sessions[0]["id"].as_str().unwrap().to_owned();

    let har_path = dir.path().join("session.har");
    let (code, _, err) = audit(&[
        "export",
        &id,
        "--format",
        "har",
        "--out",
        har_path.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{err}");
    let har: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&har_path).unwrap()).unwrap();
    let entries = har["log"]["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 2, "one entry per exchange: {entries:#?}");
    let allowed = &entries[0];
    assert_eq!(allowed["request"]["method"], "POST");
    assert_eq!(allowed["response"]["status"], 200);
    assert_eq!(allowed["request"]["postData"]["text"], "hello=world");
    let denied = &entries[1];
    assert_eq!(denied["response"]["status"], 403);

    let (code, timeline, _) = audit(&["timeline", &id]);
    assert_eq!(code, Some(0));
    assert!(timeline.contains("/admin"), "{timeline}");

    let (code, verify, err) = audit(&["verify", &id, "--audit-key", key.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{verify}{err}");

    for file in ["audit.db", "audit.db-wal"] {
        if let Ok(bytes) = std::fs::read(dir.path().join(file)) {
            assert!(
                !bytes.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()),
                "secret found in {file}"
            );
        }
    }
}
