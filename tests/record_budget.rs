//! A session's record has a size limit (`--audit-max-session`): a sandbox
//! cannot grow the host's audit database without bound by writing, printing
//! or sending more than the budget. Past the budget every event is still
//! recorded (hash, size, metadata), one notice in the hash chain says from
//! which event content stops being kept, and the record still verifies.
//! Tested with real `airlock run` / `airlock session`, real SQLite.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use airlock_test_support::audit_cli::{audit_cli, export_jsonl, first_session_id};
use airlock_test_support::disk::Tmpfs;
use airlock_test_support::isolation::Isolation;
use airlock_test_support::per_isolation;
use airlock_test_support::pki::TestPki;
use airlock_test_support::upstream::Upstream;

const AIRLOCK: &str = airlock_test_support::airlock_bin!();
const MIB: u64 = 1 << 20;
/// What a session's record may take beyond its budget: every event's
/// metadata, the search index, checkpoints, SQLite's pages.
const OVERHEAD: u64 = 2 * MIB;
const NOTICE: &str = "record budget spent";
/// SHA-256 of no bytes: the stored content of an empty version.
const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// A workspace and a private audit database; `run` under `isolation`.
struct Env {
    dir: tempfile::TempDir,
    isolation: Isolation,
}

impl Env {
    fn new() -> Self {
        Self::under(Isolation::Namespaces)
    }

    fn under(isolation: Isolation) -> Self {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        std::fs::create_dir(dir.path().join("ws")).unwrap();
        Self { dir, isolation }
    }

    fn workspace(&self) -> PathBuf {
        self.dir.path().join("ws")
    }

    fn db(&self) -> PathBuf {
        self.dir.path().join("audit/audit.db")
    }

    fn key(&self) -> PathBuf {
        self.dir.path().join("audit/audit.key")
    }

    /// The options every command here shares.
    fn record_args(&self) -> Vec<String> {
        let p = |p: PathBuf| p.to_string_lossy().into_owned();
        vec![
            "--workspace".into(),
            p(self.workspace()),
            "--audit-db".into(),
            p(self.db()),
            "--audit-key".into(),
            p(self.key()),
        ]
    }

    /// `airlock run` with `extra` options, then `command`.
    fn run(&self, extra: &[&str], command: &[&str]) -> (String, Output) {
        let out = Command::new(AIRLOCK)
            .arg("run")
            .args(self.isolation.args())
            .args(self.record_args())
            .args(extra)
            .arg("--")
            .args(command)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", show(&out));
        (first_session_id(AIRLOCK, &self.db(), &out), out)
    }

    /// Bytes the audit database takes on disk (with its journal).
    fn db_bytes(&self) -> u64 {
        ["", "-wal", "-shm"]
            .iter()
            .map(|suffix| {
                let mut p = self.db().into_os_string();
                p.push(suffix);
                std::fs::metadata(p).map_or(0, |m| m.len())
            })
            .sum()
    }

    fn audit(&self, args: &[&str]) -> String {
        let out = audit_cli(AIRLOCK, &self.db(), args);
        assert!(out.status.success(), "{}", show(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// What `audit verify` says of the session, asserting it is intact.
    fn assert_intact(&self, id: &str) {
        let key = self.key();
        let said = self.audit(&["verify", id, "--audit-key", key.to_str().unwrap()]);
        assert!(said.contains("intact"), "{said}");
    }

    /// The session's events; asserts exactly one budget notice and returns
    /// the events and the notice's seq.
    fn events_and_notice(&self, id: &str) -> (Vec<serde_json::Value>, u64) {
        let events = export_jsonl(AIRLOCK, &self.db(), id);
        let notices: Vec<_> = events
            .iter()
            .filter(|e| e["kind"] == "note" && e["text"].as_str().unwrap().contains(NOTICE))
            .collect();
        assert_eq!(notices.len(), 1, "exactly one notice: {notices:#?}");
        let seq = notices[0]["seq"].as_u64().unwrap();
        let from = seq + 1;
        assert!(
            notices[0]["text"]
                .as_str()
                .unwrap()
                .contains(&format!("from event {from} on")),
            "{}",
            notices[0]
        );
        (events, seq)
    }
}

fn show(out: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// File versions of `name` in the workspace, in record order.
fn versions<'a>(events: &'a [serde_json::Value], prefix: &str) -> Vec<&'a serde_json::Value> {
    events
        .iter()
        .filter(|e| {
            e["kind"] == "file"
                && matches!(e["op"].as_str(), Some("create" | "modify"))
                && e["path"].as_str().unwrap().contains(prefix)
        })
        .collect()
}

/// Every version before the notice keeps its content, every one after it
/// keeps only its hash and size, and says why. An empty version costs the
/// budget nothing, so it keeps its (empty) content wherever it falls: under
/// gVisor a look can catch a file between its open and its first write.
fn assert_hash_only_after(files: &[&serde_json::Value], notice: u64) {
    let empty = |e: &serde_json::Value| e["size"] == 0;
    for e in files.iter().filter(|e| empty(e)) {
        assert_eq!(e["stored_content"], EMPTY_SHA256, "empty version: {e}");
        assert!(e.get("content_over_budget").is_none(), "{e}");
    }
    let (kept, dropped): (Vec<&&serde_json::Value>, Vec<_>) = files
        .iter()
        .filter(|e| !empty(e))
        .partition(|e| e["seq"].as_u64().unwrap() < notice);
    assert!(!kept.is_empty() && !dropped.is_empty(), "{files:#?}");
    for e in kept {
        assert!(e["stored_content"].is_string(), "kept before: {e}");
        assert!(e.get("content_over_budget").is_none(), "{e}");
    }
    for e in dropped {
        assert!(e["stored_content"].is_null(), "content after: {e}");
        assert_eq!(e["content_over_budget"], true, "{e}");
        assert!(e["sha256"].as_str().is_some_and(|h| h.len() == 64), "{e}");
        assert!(e["size"].as_u64().is_some_and(|s| s > 0), "{e}");
    }
}

/// The attack: a 2 MiB /tmp, one 1 MiB file rewritten many times.
/// Without a budget every version was kept (60 MiB here; 201 MiB in the
/// issue).
#[test]
fn rewriting_one_file_many_times_keeps_content_only_up_to_the_budget() {
    let env = Env::new();
    let (id, _) = env.run(
        &["--tmp-size", "2M", "--audit-max-session", "2M"],
        &[
            "sh",
            "-c",
            "for i in $(seq 60); do dd if=/dev/urandom of=/tmp/one bs=1M count=1 status=none; done",
        ],
    );
    let grew = env.db_bytes();
    assert!(
        grew <= 2 * MIB + OVERHEAD,
        "the database grew to {grew} bytes for a 2 MiB budget"
    );
    let (events, notice) = env.events_and_notice(&id);
    let files = versions(&events, "/tmp/one");
    assert_eq!(files.len(), 60, "every version is on record");
    assert_hash_only_after(&files, notice);
    // The first version without content comes right after the notice.
    assert!(files.iter().any(|e| e["seq"] == notice + 1));
    env.assert_intact(&id);
    // The timeline shows the notice; `audit files` and restore say why a
    // version is hash only, and restore writes nothing wrong.
    let timeline = env.audit(&["timeline", &id]);
    assert!(timeline.contains(NOTICE), "{timeline}");
    let listed = env.audit(&["files", &id]);
    assert!(listed.contains("hash only (over the budget)"), "{listed}");
    let restored = env.dir.path().join("restored");
    let said = env.audit(&["files", &id, "--restore", restored.to_str().unwrap()]);
    assert!(
        said.contains("hash only  /tmp/one") && said.contains("hash only (over the budget)"),
        "{said}"
    );
    assert!(
        !restored.join("tmp/one").exists(),
        "restored a wrong version"
    );
}

/// Many different files: the budget is per session, not per file.
/// (`iflag=fullblock`: gVisor's /dev/urandom answers a 64 KiB read with
/// about 4 KiB, and dd's one read would write only that.)
fn many_different_files_share_one_budget_under(isolation: Isolation) {
    let env = Env::under(isolation);
    let (id, _) = env.run(
        &["--audit-max-session", "1M"],
        &[
            "sh",
            "-c",
            "for i in $(seq 100); do dd if=/dev/urandom of=f$i bs=64k count=1 iflag=fullblock status=none; done",
        ],
    );
    let grew = env.db_bytes();
    assert!(grew <= MIB + OVERHEAD, "grew to {grew} bytes");
    let (events, notice) = env.events_and_notice(&id);
    let ws = env.workspace().to_string_lossy().into_owned();
    let files = versions(&events, &ws);
    let paths: std::collections::BTreeSet<&str> =
        files.iter().filter_map(|e| e["path"].as_str()).collect();
    assert_eq!(paths.len(), 100, "every file is on record");
    match isolation {
        Isolation::Namespaces => assert_eq!(files.len(), 100, "one version per file"),
        // A look that lands while dd is between its open and its write
        // records the file as it then was (empty or partial), and the look
        // after its close the final content: a documented difference
        // (docs/isolation.md, "What the record sees under gVisor").
        Isolation::Gvisor => assert!(files.len() >= 100, "{} versions", files.len()),
    }
    assert_hash_only_after(&files, notice);
    // Every file is still on disk and on record by hash.
    for i in 1..=100 {
        let path = env.workspace().join(format!("f{i}"));
        let bytes = std::fs::read(&path).unwrap();
        let hash = airlock_test_support::disk::sha256_hex(&bytes);
        assert!(
            files
                .iter()
                .any(|e| e["path"] == path.to_str().unwrap() && e["sha256"] == hash),
            "{} not on record",
            path.display()
        );
    }
    env.assert_intact(&id);
}

per_isolation!(sync many_different_files_share_one_budget_under => many_different_files_share_one_budget, under_gvisor_many_different_files_share_one_budget);

/// Output: the caller still gets all of it; the record keeps it up to the
/// budget. Big printed output was the other way to fill the database.
fn big_output_is_delivered_but_kept_only_up_to_the_budget_under(isolation: Isolation) {
    let env = Env::under(isolation);
    let (id, out) = env.run(
        &["--audit-max-session", "1M", "--no-tty"],
        &["sh", "-c", "yes budget-output | head -c 16777216"],
    );
    assert_eq!(out.stdout.len(), 16 << 20, "the caller got every byte");
    let grew = env.db_bytes();
    assert!(grew <= MIB + OVERHEAD, "grew to {grew} bytes");
    let (events, notice) = env.events_and_notice(&id);
    let output: Vec<_> = events.iter().filter(|e| e["kind"] == "output").collect();
    let kept_after = output
        .iter()
        .filter(|e| e["seq"].as_u64().unwrap() > notice)
        .filter(|e| !e["data"].as_str().unwrap_or_default().is_empty())
        .count();
    assert_eq!(kept_after, 0, "output kept after the notice");
    assert!(
        output
            .iter()
            .any(|e| e["seq"].as_u64().unwrap() < notice && e["data"].is_string()),
        "output before the notice is kept"
    );
    env.assert_intact(&id);
}

per_isolation!(sync big_output_is_delivered_but_kept_only_up_to_the_budget_under => big_output_is_delivered_but_kept_only_up_to_the_budget, under_gvisor_big_output_is_delivered_but_kept_only_up_to_the_budget);

/// Request and response bodies through the proxy count too; every request
/// is still recorded and forwarded (the budget never refuses traffic).
async fn big_request_bodies_are_kept_only_up_to_the_budget_under(isolation: Isolation) {
    let pki = TestPki::new();
    let upstream = Upstream::start(Some(pki.server_config(&["api.test"]))).await;
    let env = Env::under(isolation);
    let policy = env.dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        format!(
            "version = 1\n[[allow]]\nhost = \"api.test\"\nport = {}\n",
            upstream.port()
        ),
    )
    .unwrap();
    let url = format!("https://api.test:{}/echo", upstream.port());
    let script = format!(
        "for i in $(seq 40); do head -c 45000 /dev/urandom | base64 -w0 > /tmp/b; \
         curl -sS -o /dev/null -w '%{{http_code}}\\n' --data-binary @/tmp/b '{url}?n='$i; done"
    );
    let ca = pki.ca_pem.to_string_lossy().into_owned();
    let policy = policy.to_string_lossy().into_owned();
    let env = std::sync::Arc::new(env);
    let e = env.clone();
    let (id, out) = tokio::task::spawn_blocking(move || {
        e.run(
            &[
                "--audit-max-session",
                "1M",
                "--policy",
                &policy,
                "--upstream-ca",
                &ca,
                "--resolve",
                "api.test:127.0.0.1",
            ],
            &["sh", "-c", &script],
        )
    })
    .await
    .unwrap();
    let codes = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(codes.lines().filter(|l| *l == "200").count(), 40, "{codes}");
    assert_eq!(upstream.hits(), 40);
    let grew = env.db_bytes();
    assert!(grew <= MIB + OVERHEAD, "grew to {grew} bytes");
    let (events, notice) = env.events_and_notice(&id);
    let http: Vec<_> = events
        .iter()
        .filter(|e| e["kind"] == "http" && e["status"] == 200)
        .collect();
    assert_eq!(http.len(), 40, "every exchange is on record");
    for e in &http {
        if e["seq"].as_u64().unwrap() > notice {
            assert!(e["request_body"].is_null(), "body after the notice: {e}");
            assert!(e["response_body"].is_null(), "body after the notice: {e}");
            assert_eq!(e["request_body_truncated"], true, "{e}");
            assert!(e["bytes_up"].as_u64().unwrap() > 0, "{e}");
        } else {
            assert!(e["request_body"].is_string(), "body before: {e}");
        }
    }
    assert!(http.iter().any(|e| e["seq"].as_u64().unwrap() > notice));
    env.assert_intact(&id);
}

per_isolation!(tokio big_request_bodies_are_kept_only_up_to_the_budget_under => big_request_bodies_are_kept_only_up_to_the_budget, under_gvisor_big_request_bodies_are_kept_only_up_to_the_budget);

/// A live session's budget spans its steps: one notice, at the step that
/// spent it, and the steps after keep hashes only.
#[test]
fn a_session_budget_spans_its_steps() {
    let env = Env::new();
    let mut start = vec!["session".to_owned(), "start".to_owned()];
    start.extend(env.record_args());
    start.extend(["--audit-max-session".into(), "1M".into()]);
    let out = Command::new(AIRLOCK).args(&start).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let id = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    let step = |name: &str| {
        let out = Command::new(AIRLOCK)
            .args(["session", "exec", &id, "--", "sh", "-c"])
            .arg(format!(
                "dd if=/dev/urandom of={name} bs=700k count=1 status=none"
            ))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    };
    step("a");
    step("b");
    step("c");
    // The live session's id names its record in `session ls`.
    let ls = Command::new(AIRLOCK)
        .args(["session", "ls", "--json"])
        .output()
        .unwrap();
    let ls: serde_json::Value = serde_json::from_slice(&ls.stdout).unwrap();
    let audit_id = ls
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id.as_str())
        .and_then(|s| s["audit_session"].as_str())
        .unwrap_or_else(|| panic!("{id} not listed: {ls}"))
        .to_owned();
    let out = Command::new(AIRLOCK)
        .args(["session", "stop", &id])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let grew = env.db_bytes();
    assert!(grew <= MIB + OVERHEAD, "grew to {grew} bytes");
    let (events, notice) = env.events_and_notice(&audit_id);
    let ws = env.workspace().to_string_lossy().into_owned();
    let files = versions(&events, &ws);
    let of = |name: &str| {
        let path = format!("{ws}/{name}");
        files
            .iter()
            .find(|e| e["path"] == path.as_str())
            .unwrap_or_else(|| panic!("no record of {name}: {files:#?}"))
    };
    assert!(of("a")["stored_content"].is_string());
    assert_eq!(of("b")["content_over_budget"], true);
    assert_eq!(of("c")["content_over_budget"], true);
    assert_eq!(
        of("b")["seq"],
        notice + 1,
        "the notice is at the step that spent it"
    );
    env.assert_intact(&audit_id);
}

/// `--audit-max-session` takes sizes like every size option, and bad ones
/// are refused with one line.
#[test]
fn a_bad_budget_is_refused_with_one_line() {
    let env = Env::new();
    for bad in ["lots", "0", "-1M", "1Q"] {
        let out = Command::new(AIRLOCK)
            .arg("run")
            .args(env.record_args())
            .arg(format!("--audit-max-session={bad}"))
            .args(["--", "true"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{bad}: {}", show(&out));
        assert!(
            stderr.contains("--audit-max-session") && stderr.contains("invalid size"),
            "{bad}: {stderr}"
        );
    }
}

/// A filesystem with less than the floor free: fill a small tmpfs, then ask
/// `run`, `session start` and `proxy` to record there.
fn nearly_full_disk() -> (Tmpfs, PathBuf) {
    let fs = Tmpfs::mount("2M");
    std::fs::write(fs.path().join("filler"), vec![7u8; 1700 << 10]).unwrap();
    let db = fs.path().join("audit.db");
    (fs, db)
}

fn assert_refused_for_space(out: &Output, db: &Path) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<_> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {}", show(out));
    let line = lines[0];
    assert!(
        line.starts_with("airlock: ")
            && line.contains(&db.display().to_string())
            && line.contains("free")
            && line.contains("below the floor of 512.0 KiB")
            && line.contains("--audit-db"),
        "{line}"
    );
    assert!(!out.status.success());
    assert!(!db.exists(), "created the database anyway");
}

#[test]
fn a_nearly_full_audit_disk_is_refused_at_start() {
    let env = Env::new();
    let (_fs, db) = nearly_full_disk();
    let marker = env.workspace().join("ran");
    let db_arg = db.to_string_lossy().into_owned();
    let key = env.key().to_string_lossy().into_owned();
    let ws = env.workspace().to_string_lossy().into_owned();

    let run = Command::new(AIRLOCK)
        .args(["run", "--workspace", &ws, "--audit-db", &db_arg])
        .args(["--audit-key", &key, "--", "touch"])
        .arg(&marker)
        .output()
        .unwrap();
    assert_refused_for_space(&run, &db);
    assert_eq!(run.status.code(), Some(125), "{}", show(&run));
    assert!(!marker.exists(), "the command ran");

    let session = Command::new(AIRLOCK)
        .args([
            "session",
            "start",
            "--workspace",
            &ws,
            "--audit-db",
            &db_arg,
        ])
        .args(["--audit-key", &key])
        .output()
        .unwrap();
    assert_refused_for_space(&session, &db);

    let ca = env.dir.path().join("ca");
    let init = Command::new(AIRLOCK)
        .args(["ca", "init", "--dir"])
        .arg(&ca)
        .output()
        .unwrap();
    assert!(init.status.success(), "{}", show(&init));
    let policy = env.dir.path().join("policy.toml");
    std::fs::write(&policy, "version = 1\n").unwrap();
    let proxy = Command::new(AIRLOCK)
        .args(["proxy", "--listen", "127.0.0.1:0", "--policy"])
        .arg(&policy)
        .arg("--ca-dir")
        .arg(&ca)
        .args(["--audit-db", &db_arg, "--audit-key", &key])
        .output()
        .unwrap();
    assert_refused_for_space(&proxy, &db);
}

/// `airlock proxy` shares the audit options: its record of bodies has the
/// same budget, and every request past it is still forwarded and recorded.
#[tokio::test(flavor = "multi_thread")]
async fn the_proxy_keeps_bodies_only_up_to_the_budget() {
    use airlock_test_support::client::curl;
    use airlock_test_support::proxy::{AirlockProxy, ProxyOptions};

    let pki = TestPki::new();
    let upstream = Upstream::start(Some(pki.server_config(&["api.test"]))).await;
    let env = Env::new();
    let policy = format!(
        "version = 1\n[[allow]]\nhost = \"api.test\"\nport = {}\n",
        upstream.port()
    );
    let mut opts = ProxyOptions::new(&policy);
    opts.upstream_ca = Some(&pki.ca_pem);
    opts.resolve = vec!["api.test:127.0.0.1".into()];
    opts.extra = vec![
        "--audit-db".into(),
        env.db().to_string_lossy().into_owned(),
        "--audit-key".into(),
        env.key().to_string_lossy().into_owned(),
        "--audit-max-session".into(),
        "512K".into(),
    ];
    let mut proxy = AirlockProxy::start(AIRLOCK, opts);
    let url = format!("https://api.test:{}/echo", upstream.port());
    let body = "b".repeat(60_000);
    for _ in 0..30 {
        let (code, _, out) = curl(&proxy, &["--data-binary", &body, &url]).await;
        assert_eq!(code, 200, "{out:?}");
    }
    assert_eq!(proxy.stop(), Some(0));
    assert_eq!(upstream.hits(), 30);
    let grew = env.db_bytes();
    assert!(grew <= MIB / 2 + OVERHEAD, "grew to {grew} bytes");
    let sessions = airlock_test_support::audit_cli::sessions(AIRLOCK, &env.db());
    let id = sessions[0]["id"].as_str().unwrap().to_owned();
    let (events, notice) = env.events_and_notice(&id);
    let http: Vec<_> = events
        .iter()
        .filter(|e| e["kind"] == "http" && e["status"] == 200)
        .collect();
    assert_eq!(http.len(), 30, "every exchange is on record");
    assert!(
        http.iter()
            .filter(|e| e["seq"].as_u64().unwrap() > notice)
            .all(|e| e["request_body"].is_null() && e["request_body_truncated"] == true)
    );
    env.assert_intact(&id);
}
