//! Fail closed: when the store cannot be written, record() errors and
//! healthy() turns false instead of silently dropping events.

use airlock_auditor::HttpExchange;
use airlock_auditor::Verdict;
use std::path::{Path, PathBuf};
use std::process::Command;

use airlock_auditor::{AuditError, AuditEvent, AuditStore, SigningKeySource};
use airlock_test_support::audit_store::{dns, env, info, thirty_event_session};
use airlock_test_support::skip_or_fail;

/// A tmpfs mounted for the test, unmounted on drop.
struct Mount(PathBuf);

impl Mount {
    fn tmpfs(at: &Path, size: &str) -> Option<Self> {
        std::fs::create_dir_all(at).ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        ok.then(|| Self(at.to_path_buf()))
    }

    fn bind_readonly(from: &Path, at: &Path) -> Option<Self> {
        std::fs::create_dir_all(at).ok()?;
        let ok = Command::new("mount")
            .args(["--bind", "-o", "ro"])
            .arg(from)
            .arg(at)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        ok.then(|| Self(at.to_path_buf()))
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn big_http(i: usize) -> AuditEvent {
    AuditEvent::Http(HttpExchange {
        request_headers: vec![("content-type".into(), "application/octet-stream".into())],
        request_body: Some(vec![(i % 251) as u8; 32 * 1024]),
        status: Some(200),
        bytes_up: 32 * 1024,
        ms_to_headers: Some(3.0),
        ms_total: Some(4.0),
        ..HttpExchange::decided(
            "POST".into(),
            format!("https://api.example.com/upload/{i}"),
            "HTTP/1.1".into(),
            Verdict::Allow,
        )
    })
}

#[test]
fn full_disk_makes_record_fail_and_healthy_false() {
    let e = env();
    let Some(_mnt) = Mount::tmpfs(&e.dir.path().join("tiny"), "1M") else {
        skip_or_fail("cannot mount tmpfs (needs root)");
        return;
    };
    let db = e.dir.path().join("tiny/audit.db");
    let store = AuditStore::open(&db, SigningKeySource::KeyFile(e.key.clone())).expect("open");
    let rec = store.begin_session(info(&["fill"])).expect("begin");
    assert!(rec.healthy());
    let mut first_error = None;
    for i in 0..2000 {
        let r = rec
            .record(big_http(i))
            .and_then(|_| if i % 4 == 0 { rec.sync() } else { Ok(()) });
        if let Err(err) = r {
            first_error = Some(err);
            break;
        }
    }
    let err = first_error.expect("a 1 MiB filesystem must fill up");
    assert!(matches!(err, AuditError::WriterFailed(_)), "{err}");
    assert!(err.to_string().contains("full"), "names the problem: {err}");
    assert!(
        err.to_string().contains("free disk space"),
        "names the fix: {err}"
    );
    assert!(!rec.healthy());
    // It stays failed: nothing is accepted off the record afterwards.
    assert!(rec.record(dns("after.example")).is_err());
    assert!(rec.sync().is_err());
    assert!(rec.finish(Default::default()).is_err());
}

#[test]
fn read_only_store_cannot_be_opened_for_recording() {
    let e = env();
    // Create a valid database first, then expose it read-only.
    thirty_event_session(&e.store());
    let Some(_mnt) = Mount::bind_readonly(e.dir.path(), &e.dir.path().join("ro")) else {
        skip_or_fail("cannot bind-mount (needs root)");
        return;
    };
    let ro_db = e.dir.path().join("ro/audit.db");
    let err = AuditStore::open(&ro_db, SigningKeySource::Ephemeral)
        .expect_err("recording into a read-only store must fail");
    assert!(err.to_string().contains("audit"), "{err}");
    assert!(!err.to_string().contains('\n'), "one line: {err}");
}

#[test]
fn filesystem_filling_up_under_a_running_session_fails_closed() {
    // Another process fills the filesystem while a session is recording:
    // the writer's next commit fails and the recorder reports it.
    let e = env();
    let dir = e.dir.path().join("live");
    let Some(_mnt) = Mount::tmpfs(&dir, "64M") else {
        skip_or_fail("cannot mount tmpfs (needs root)");
        return;
    };
    let db = dir.join("audit.db");
    let store = AuditStore::open(&db, SigningKeySource::Ephemeral).unwrap();
    let rec = store.begin_session(info(&["x"])).unwrap();
    rec.record(dns("a.example")).unwrap();
    rec.sync().unwrap();
    let filler = dir.join("filler");
    let _ = Command::new("dd")
        .args(["if=/dev/zero", "bs=1M", "count=80"])
        .arg(format!("of={}", filler.display()))
        .stderr(std::process::Stdio::null())
        .status();
    let mut failed = false;
    for i in 0..200 {
        if rec.record(big_http(i)).and_then(|_| rec.sync()).is_err() {
            failed = true;
            break;
        }
    }
    assert!(failed, "writes to a full filesystem must fail");
    assert!(!rec.healthy());
}
