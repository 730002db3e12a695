//! Airlock under faults: upstreams that break mid-response, failing TLS and
//! DNS, an audit store that fills up, policy reloads under load, `kill -9` of
//! the proxy, and a sandboxed command that kills its parent. Each case checks
//! that Airlock fails closed, loses no audit data it acknowledged, and leaves
//! nothing behind.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use airlock_test_support::audit_cli::audit_cli;
use airlock_test_support::client::{ClientOutput, curl};
use airlock_test_support::disk::Tmpfs;
use airlock_test_support::pki::TestPki;
use airlock_test_support::proxy::{AirlockProxy, ProxyOptions, init_ca};
use airlock_test_support::server::TestServer;
use airlock_test_support::upstream::Upstream;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const AIRLOCK: &str = airlock_test_support::airlock_bin!();

fn audit(db: &Path, args: &[&str]) -> (Option<i32>, String) {
    let out = audit_cli(AIRLOCK, db, args);
    (
        out.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// Every session in `db` verifies with `key`: intact, or (for a session cut
/// short by a crash) a valid chain and signatures up to where it stopped.
/// Returns how many sessions there were.
fn verify_all(db: &Path, key: &Path, may_be_unfinished: bool) -> usize {
    let (code, json) = audit(db, &["sessions", "--json"]);
    assert_eq!(code, Some(0), "the audit database does not open: {json}");
    let start = json.find('[').unwrap_or(0);
    let sessions: serde_json::Value = serde_json::from_str(&json[start..]).unwrap();
    let sessions = sessions.as_array().unwrap();
    for s in sessions {
        let id = s["id"].as_str().unwrap();
        let (code, out) = audit(db, &["verify", id, "--audit-key", key.to_str().unwrap()]);
        let intact = code == Some(0) && out.contains("intact");
        let cut_short = may_be_unfinished
            && out.contains("INCOMPLETE")
            && out.contains("never finished")
            && out.contains("signed by the trusted key");
        assert!(intact || cut_short, "session {id} does not verify: {out}");
    }
    sessions.len()
}

/// A plain-TCP upstream that answers every request with `head` and `body`,
/// then resets the connection (SO_LINGER 0) before the promised length.
async fn breaking_upstream(head: &'static str, body: usize) -> TestServer {
    TestServer::tcp(move |mut s| async move {
        let mut buf = vec![0u8; 8192];
        let mut got = Vec::new();
        // An HTTP upstream reads the whole head; a broken TLS one
        // answers the first bytes (the ClientHello) with junk.
        loop {
            match s.read(&mut buf).await {
                Ok(n) if n > 0 => got.extend_from_slice(&buf[..n]),
                _ => return,
            }
            if head.is_empty() || got.windows(4).any(|w| w == b"\r\n\r\n") {
                break;
            }
        }
        if head.is_empty() {
            let _ = s.write_all(b"SSH-2.0-not-tls\r\n").await;
        }
        let _ = s.write_all(head.as_bytes()).await;
        let _ = s.write_all(&vec![b'x'; body]).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        #[allow(deprecated)]
        let _ = s.set_linger(Some(Duration::ZERO));
        drop(s);
    })
    .await
}

#[tokio::test]
async fn upstream_reset_mid_body_and_broken_tls() {
    let reset = breaking_upstream("HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n", 4096).await;
    let garbage = breaking_upstream("", 0).await;
    let (reset_port, garbage_port) = (reset.port(), garbage.port());
    let pki = TestPki::new();
    let good = Upstream::start(Some(pki.server_config(&["api.test"]))).await;
    let policy = format!(
        "version = 1\n[[allow]]\nhost = \"api.test\"\nports = [{reset_port}, {garbage_port}, {}]\n",
        good.port()
    );
    let mut opts = ProxyOptions::new(&policy);
    opts.upstream_ca = Some(&pki.ca_pem);
    opts.resolve = vec!["api.test:127.0.0.1".into()];
    let proxy = AirlockProxy::start(AIRLOCK, opts);

    // Plain HTTP, reset mid-body: the client sees a truncated transfer, not a clean end.
    for _ in 0..5 {
        let (_, _, out) = curl(&proxy, &[&format!("http://api.test:{reset_port}/big")]).await;
        assert_ne!(out.status, 0, "a truncated body looked complete: {out:?}");
    }
    // HTTPS to a port that answers the ClientHello with junk and resets: 502.
    let (code, body, out) = curl(&proxy, &[&format!("https://api.test:{garbage_port}/x")]).await;
    assert_eq!(code, 502, "{out:?}");
    assert!(
        body.to_lowercase().contains("tls") || body.contains("upstream"),
        "{body}"
    );
    // The record says the response broke: its end names the error.
    let events = proxy.events();
    assert!(
        events.iter().any(|e| e["kind"] == "response"
            && e["reason"].as_str().is_some_and(|r| !r.is_empty())),
        "the broken response is not recorded as such: {events:#?}"
    );
    let (code, _, out) = curl(&proxy, &[&format!("https://api.test:{}/echo", good.port())]).await;
    assert_eq!(code, 200, "{out:?}");
}

#[tokio::test]
async fn dns_failure_is_a_502_not_a_hang() {
    // An allowed name with no pin that no resolver can answer.
    let policy = "version = 1\n[[allow]]\nhost = \"no-such-host.invalid\"\n";
    let proxy = AirlockProxy::start(AIRLOCK, ProxyOptions::new(policy));
    let started = Instant::now();
    let (code, body, out) = curl(&proxy, &["https://no-such-host.invalid/x"]).await;
    assert!(code == 502 || code == 0, "{out:?}");
    if code == 502 {
        assert!(body.contains("no-such-host.invalid"), "{body}");
    }
    assert!(started.elapsed() < Duration::from_secs(20));
    // Still alive and still refusing what it should.
    let (code, _, _) = curl(&proxy, &["https://example.com/"]).await;
    assert_eq!(code, 403);
}

/// A tmpfs of `size`, unmounted on drop.
/// `airlock proxy` allowing `api.test` (any method on /echo and /sse, pinned
/// to loopback), recording to the audit store `db` signed with `key`.
fn audited_proxy(
    pki: &TestPki,
    upstream: &Upstream,
    db: &Path,
    key: &Path,
    audit_sync: bool,
) -> AirlockProxy {
    let policy = format!(
        "version = 1\n[[allow]]\nhost = \"api.test\"\nport = {}\npaths = [\"/echo\", \"/sse\"]\n",
        upstream.port()
    );
    let mut opts = ProxyOptions::new(&policy);
    opts.upstream_ca = Some(&pki.ca_pem);
    opts.resolve = vec!["api.test:127.0.0.1".into()];
    opts.extra = vec![
        "--audit-db".into(),
        db.to_str().unwrap().into(),
        "--audit-key".into(),
        key.to_str().unwrap().into(),
    ];
    if audit_sync {
        opts.extra.push("--audit-sync".into());
    }
    AirlockProxy::start(AIRLOCK, opts)
}

/// The audit store fills up: new requests are refused (503), the proxy
/// stops with a clear error, and the database still opens and verifies.
#[tokio::test]
async fn audit_store_full_stops_the_session_and_stays_verifiable() {
    let pki = TestPki::new();
    let upstream = Upstream::start(Some(pki.server_config(&["api.test"]))).await;
    let fs = Tmpfs::mount("1M");
    let db = fs.path().join("audit.db");
    let keydir = tempfile::tempdir().unwrap();
    let key = keydir.path().join("audit.key");
    let mut proxy = audited_proxy(&pki, &upstream, &db, &key, true);
    let url = format!("https://api.test:{}/echo", upstream.port());
    let body = "x".repeat(60 * 1024);
    let mut codes = Vec::new();
    for _ in 0..60 {
        let (code, _, _) = curl(&proxy, &["--data-binary", &body, &url]).await;
        codes.push(code);
        if code != 200 {
            break;
        }
    }
    let first_failure = codes.iter().position(|c| *c != 200);
    assert!(
        first_failure.is_some(),
        "a 1 MiB store never filled: {codes:?}"
    );
    // Refused, not forwarded unrecorded: 503 (or the connection closed as the process stopped).
    let refused = codes[first_failure.unwrap()];
    assert!(refused == 503 || refused == 0, "{codes:?}");
    let hits_at_failure = upstream.hits();
    // The process stops by itself, with a reason.
    let status = wait_exit(&mut proxy, Duration::from_secs(10));
    assert!(
        matches!(status, Some(c) if c != 0),
        "the proxy kept running (or exited 0) with a full audit store: {status:?}"
    );
    let stderr = proxy.stderr.lock().unwrap().join("\n");
    assert!(stderr.contains("audit"), "{stderr}");
    assert_eq!(
        upstream.hits(),
        hits_at_failure,
        "forwarded after the store failed"
    );
    // Every request the upstream saw was recorded first (--audit-sync):
    // what is in the database verifies, on the full filesystem itself.
    assert!(verify_all(&db, &key, true) >= 1);
}

/// `chattr` on each path (ioctl_iflags(2)); true when every call succeeded.
fn chattr(flag: &str, paths: &[PathBuf]) -> bool {
    let existing: Vec<&PathBuf> = paths.iter().filter(|p| p.exists()).collect();
    Command::new("chattr")
        .arg(flag)
        .args(existing)
        .status()
        .is_ok_and(|s| s.success())
}

/// Files made immutable for a test, made mutable again on drop (even when
/// the test fails), so the temporary directory can be removed.
struct Immutable(Vec<PathBuf>);

impl Drop for Immutable {
    fn drop(&mut self) {
        chattr("-i", &self.0);
    }
}

/// The audit store becomes read-only mid-session. The database, its WAL and
/// its directory are made immutable (ioctl_iflags(2): on ext4 even writes
/// through descriptors opened earlier fail with EPERM), which is what a
/// store remounted read-only looks like to SQLite. New requests are refused,
/// the proxy stops with a reason, nothing is forwarded unrecorded, and once
/// the flag is cleared the database opens and verifies.
#[tokio::test]
async fn audit_store_turning_read_only_stops_the_session_and_stays_verifiable() {
    let pki = TestPki::new();
    let upstream = Upstream::start(Some(pki.server_config(&["api.test"]))).await;
    // Not tmpfs: tmpfs lets writes through descriptors opened before +i.
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let db = dir.path().join("audit.db");
    let key = dir.path().join("audit.key");
    let mut proxy = audited_proxy(&pki, &upstream, &db, &key, true);
    let url = format!("https://api.test:{}/echo", upstream.port());
    for _ in 0..3 {
        assert_eq!(curl(&proxy, &[&url]).await.0, 200);
    }
    // Not the `-shm` WAL index: SQLite maps it (mmap(2)), and a store whose
    // mapped pages cannot be written faults with SIGBUS instead of returning
    // an error (see "Issues found by this pass" in docs/threat-model.md).
    let files: Vec<PathBuf> = ["audit.db", "audit.db-wal", "audit.db-journal"]
        .iter()
        .map(|f| dir.path().join(f))
        .chain([dir.path().to_owned()])
        .collect();
    let frozen = Immutable(files.clone());
    assert!(
        chattr("+i", &files),
        "chattr +i failed (needs root and a filesystem with inode flags)"
    );
    let hits_before = upstream.hits();
    let mut codes = Vec::new();
    for _ in 0..3 {
        codes.push(curl(&proxy, &[&url]).await.0);
    }
    let status = wait_exit(&mut proxy, Duration::from_secs(10));
    drop(frozen);
    assert!(
        codes.iter().all(|c| *c == 503 || *c == 0),
        "requests were answered after the store turned read-only: {codes:?}"
    );
    assert_eq!(
        upstream.hits(),
        hits_before,
        "forwarded after the store turned read-only"
    );
    assert!(
        matches!(status, Some(c) if c != 0),
        "the proxy kept running (or exited 0) with a read-only audit store: {status:?}"
    );
    let stderr = proxy.stderr.lock().unwrap().join("\n");
    assert!(stderr.contains("audit"), "{stderr}");
    assert_eq!(verify_all(&db, &key, true), 1);
}

/// An audit store that is read-only from the start: `airlock proxy` refuses
/// to start, with one line naming the problem, instead of running unrecorded.
#[tokio::test]
async fn read_only_audit_store_refuses_to_start() {
    let fs = Tmpfs::mount("1M");
    let ok = Command::new("mount")
        .args(["-o", "remount,ro"])
        .arg(fs.path())
        .status()
        .unwrap()
        .success();
    assert!(ok, "remount read-only");
    let keydir = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let ca = work.path().join("ca");
    let policy = work.path().join("policy.toml");
    std::fs::write(&policy, "version = 1\n").unwrap();
    init_ca(AIRLOCK, &ca);
    let mut child = Command::new(AIRLOCK)
        .args(["proxy", "--listen", "127.0.0.1:0", "--policy"])
        .arg(&policy)
        .arg("--ca-dir")
        .arg(&ca)
        .arg("--audit-db")
        .arg(fs.path().join("audit.db"))
        .arg("--audit-key")
        .arg(keydir.path().join("audit.key"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("airlock proxy kept running with a read-only audit store");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success(), "{stderr}");
    assert!(!stderr.contains("listening"), "it listened: {stderr}");
    assert!(stderr.contains("audit"), "{stderr}");
}

fn wait_exit(proxy: &mut AirlockProxy, within: Duration) -> Option<i32> {
    let pid = nix::unistd::Pid::from_raw(proxy.pid() as i32);
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        match nix::sys::wait::waitpid(pid, Some(nix::sys::wait::WaitPidFlag::WNOHANG)) {
            Ok(nix::sys::wait::WaitStatus::Exited(_, code)) => return Some(code),
            Ok(nix::sys::wait::WaitStatus::Signaled(..)) => return None,
            _ => std::thread::sleep(Duration::from_millis(100)),
        }
    }
    None
}

/// SIGHUP twenty times while clients make requests (the policy file replaced
/// each time): not one fails.
#[tokio::test]
async fn sighup_reload_under_load_drops_nothing() {
    let pki = TestPki::new();
    let upstream = Upstream::start(Some(pki.server_config(&["api.test"]))).await;
    let policy = |extra: &str| {
        format!(
            "version = 1\n[[allow]]\nhost = \"api.test\"\nport = {}\npaths = [\"/echo\"{extra}]\n",
            upstream.port()
        )
    };
    let text = policy("");
    let mut opts = ProxyOptions::new(&text);
    opts.upstream_ca = Some(&pki.ca_pem);
    opts.resolve = vec!["api.test:127.0.0.1".into()];
    let proxy = AirlockProxy::start(AIRLOCK, opts);
    let url = format!("https://api.test:{}/echo", upstream.port());
    // No pause after start-up: the signal handlers are installed before the
    // proxy announces its address (src/serve.rs, `Signals`), so a SIGHUP
    // that soon is a reload, not SIGHUP's default action (signal(7)).
    let mut clients = Vec::new();
    for worker in 0..3 {
        let proxy_url = proxy.proxy_url();
        let ca = proxy.ca_pem.clone();
        let url = url.clone();
        clients.push(tokio::spawn(async move {
            let mut codes = Vec::new();
            for round in 0..6 {
                // 20 requests per curl: keep-alive reuse across reloads...
                let mut cmd = tokio::process::Command::new("curl");
                cmd.args(["-sS", "--max-time", "30", "-o", "/dev/null", "--proxy"])
                    .arg(&proxy_url)
                    .arg("--cacert")
                    .arg(&ca)
                    .args(["-w", "\n%{http_code}\n"]);
                if (worker + round) % 2 == 0 {
                    cmd.arg("--http2");
                }
                for _ in 0..20 {
                    cmd.arg(&url);
                }
                let out = cmd.output().await.unwrap();
                // Bodies and codes share stdout; a code is a line of three digits.
                let text = String::from_utf8_lossy(&out.stdout).into_owned();
                let mut got: Vec<u16> = text
                    .lines()
                    .filter(|l| l.len() == 3)
                    .filter_map(|l| l.parse().ok())
                    .collect();
                got.resize(20, 0); // a request that printed nothing failed
                codes.extend(got);
            }
            codes
        }));
    }
    let pid = nix::unistd::Pid::from_raw(proxy.pid() as i32);
    for i in 0..20 {
        let extra = if i % 2 == 0 { ", \"/other\"" } else { "" };
        // Rewritten in place (truncate, then write), as `>` or an editor
        // does. The proxy also watches the file; it must never put the
        // empty, truncated file (a valid deny-everything policy) in force,
        // so it reloads only a file that has settled (src/policy_watch.rs).
        std::fs::write(&proxy.policy, policy(extra)).unwrap();
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut all = Vec::new();
    for c in clients {
        all.extend(c.await.unwrap());
    }
    assert_eq!(all.len(), 3 * 6 * 20, "some requests never completed");
    let failed: Vec<_> = all.iter().filter(|c| **c != 200).collect();
    assert!(
        failed.is_empty(),
        "{} of {} requests failed: {failed:?} {:?}",
        failed.len(),
        all.len(),
        proxy.stderr.lock().unwrap()
    );
    let reloads = proxy
        .stderr
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains("reloaded policy"))
        .count();
    assert!(reloads >= 10, "only {reloads} reloads happened");
}

/// `kill -9` of `airlock proxy` mid-session, with a stream open and requests
/// in flight: no process or listener is left, and the audit database opens
/// and verifies.
#[tokio::test]
async fn kill_9_of_the_proxy_leaves_a_verifiable_record() {
    let pki = TestPki::new();
    let upstream = Upstream::start(Some(pki.server_config(&["api.test"]))).await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("audit.db");
    let key = dir.path().join("audit.key");
    let proxy = audited_proxy(&pki, &upstream, &db, &key, false);
    let addr = proxy.addr;
    let base = format!("https://api.test:{}", upstream.port());
    for _ in 0..5 {
        assert_eq!(curl(&proxy, &[&format!("{base}/echo")]).await.0, 200);
    }
    // A long-lived stream and a burst of requests in flight.
    let sse = tokio::process::Command::new("curl")
        .args(["-sS", "-N", "--max-time", "20", "--proxy"])
        .arg(proxy.proxy_url())
        .arg("--cacert")
        .arg(&proxy.ca_pem)
        .arg(format!("{base}/sse"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut burst = Vec::new();
    for _ in 0..5 {
        let mut cmd = tokio::process::Command::new("curl");
        cmd.args(["-sS", "--max-time", "10", "-o", "/dev/null", "--proxy"])
            .arg(proxy.proxy_url())
            .arg("--cacert")
            .arg(&proxy.ca_pem)
            .arg(format!("{base}/echo"))
            .stderr(std::process::Stdio::null());
        burst.push(cmd.spawn().unwrap());
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pid = proxy.pid();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    drop(proxy); // reaps it
    for mut c in burst {
        let _ = c.wait().await;
    }
    let mut sse = sse;
    let _ = sse.kill().await;
    // No residue: the process is gone and nothing listens on its port.
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "proxy process left behind"
    );
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "something still listens on the proxy's port"
    );
    // The database opens and its session verifies up to the kill.
    assert_eq!(verify_all(&db, &key, true), 1);
}

/// Inside `airlock run`, the command kills itself, its parent, or everything
/// it can see: airlock ends cleanly and no process of the sandbox is left.
#[tokio::test]
async fn sandboxed_command_killing_its_parent_or_everything() {
    for (name, script) in [
        ("parent", "sleep 777.1 & kill -9 $PPID; sleep 2"),
        ("everything", "sleep 777.2 & kill -9 -1; sleep 2"),
        ("itself", "sleep 777.3 & kill -9 $$; sleep 2"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let started = Instant::now();
        let out = tokio::time::timeout(
            Duration::from_secs(60),
            tokio::process::Command::new(AIRLOCK)
                .arg("run")
                .arg("--workspace")
                .arg(&ws)
                // Not in an ancestor of the workspace: the audit store is
                // hidden from the sandbox, and so would the workspace be.
                .arg("--audit-db")
                .arg(dir.path().join("audit/audit.db"))
                .arg("--audit-key")
                .arg(dir.path().join("audit/audit.key"))
                .args(["--timeout", "30s", "--", "sh", "-c", script])
                .output(),
        )
        .await
        .unwrap_or_else(|_| panic!("{name}: airlock run hung"))
        .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        // Exits by itself (not killed by a signal from inside) and says how it ended.
        assert!(
            out.status.code().is_some(),
            "{name}: airlock itself was killed: {:?} {stderr}",
            out.status
        );
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{name}: took until the timeout"
        );
        // No residue: nothing on the host runs the command's sleep.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let marker = match name {
            "parent" => "777.1",
            "everything" => "777.2",
            _ => "777.3",
        };
        let left: Vec<String> = std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok())
            .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
            .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
            .filter(|c| c.starts_with("sleep") && c.contains(marker))
            .collect();
        assert!(left.is_empty(), "{name}: processes left behind: {left:?}");
        // The session is on record and verifies.
        assert_eq!(
            verify_all(
                &dir.path().join("audit/audit.db"),
                &dir.path().join("audit/audit.key"),
                false
            ),
            1,
            "{name}: {stderr}"
        );
    }
}

/// `airlock run` fails closed too: when its audit store fills up mid-session
/// the sandbox is stopped (exit 125, saying why) instead of running on
/// unrecorded, and what was recorded still verifies.
#[tokio::test]
async fn run_session_stops_when_its_audit_store_fills() {
    let fs = Tmpfs::mount("1M");
    let db = fs.path().join("audit.db");
    let keydir = tempfile::tempdir().unwrap();
    let key = keydir.path().join("audit.key");
    let ws = tempfile::tempdir_in("/var/tmp").unwrap();
    // 100 files of 64 KiB of random bytes, each recorded with its content:
    // far more than the 1 MiB store holds. `dd` opens each file itself, so
    // each is captured when its `dd` exits, mid-session. (A shell's `> f` is
    // opened by the shell and captured when the shell ends, which would make
    // this a test of the session's end.)
    let started = Instant::now();
    let out = tokio::process::Command::new(AIRLOCK)
        .arg("run")
        .arg("--workspace")
        .arg(ws.path())
        .arg("--audit-db")
        .arg(&db)
        .arg("--audit-key")
        .arg(&key)
        .args(["--timeout", "60s", "--", "sh", "-c"])
        .arg("for i in $(seq 100); do dd if=/dev/urandom of=f$i bs=64k count=1 status=none; done; sleep 30; echo finished")
        .output()
        .await
        .unwrap();
    let out = ClientOutput::from(out);
    assert_eq!(out.status, 125, "{out:?}");
    assert!(!out.stdout.contains("finished"), "{out:?}");
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "the session ran on after its store failed: {:?}",
        started.elapsed()
    );
    // One line: what happened, why, and what to do.
    assert_eq!(out.stderr.lines().count(), 1, "{out:?}");
    assert!(
        out.stderr
            .contains("the audit store failed, so the session was stopped")
            && out.stderr.contains("database or disk is full")
            && out.stderr.contains("free disk space"),
        "{out:?}"
    );
    assert!(verify_all(&db, &key, true) >= 1);
}
