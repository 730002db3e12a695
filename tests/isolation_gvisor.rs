//! `airlock run --isolation gvisor`: the command runs under gVisor's kernel
//! (runsc), with the same one way out (the proxy, which captures every TCP
//! connection and DNS query), the same filesystem view and limits, and a
//! record that says which isolation ran it. These tests fail, never skip,
//! when runsc is missing: `scripts/setup` installs it.

use std::path::{Path, PathBuf};
use std::process::Command;

use airlock_test_support::audit_cli::{audit_ok, first_session_id, sessions};
use airlock_test_support::client::ClientOutput;
use airlock_test_support::isolation::Isolation;
use airlock_test_support::per_isolation;
use airlock_test_support::pki::TestPki;
use airlock_test_support::upstream::{Extra, Upstream};

const AIRLOCK: &str = airlock_test_support::airlock_bin!();

/// An allowed TLS upstream `api.test` on the host's loopback, a policy
/// allowing GET /echo* on it, and a private workspace and audit database.
struct Fixture {
    pki: TestPki,
    upstream: Upstream,
    dir: tempfile::TempDir,
}

impl Fixture {
    async fn new() -> Self {
        let pki = TestPki::new();
        let upstream =
            Upstream::start_with(Some(pki.server_config(&["api.test"])), Extra::default()).await;
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("ws")).unwrap();
        std::fs::create_dir_all(dir.path().join("state")).unwrap();
        Self { pki, upstream, dir }
    }

    fn port(&self) -> u16 {
        self.upstream.port()
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

    fn policy(&self) -> PathBuf {
        let path = self.dir.path().join("policy.toml");
        std::fs::write(
            &path,
            format!(
                "version = 1\n[[allow]]\nhost = \"api.test\"\nport = {}\nmethods = [\"GET\"]\npaths = [\"/echo\", \"/echo/**\"]\n",
                self.port()
            ),
        )
        .unwrap();
        path
    }

    /// `airlock run --isolation gvisor` with the fixture's policy, pins and
    /// CA, `extra` options, then `command`.
    async fn run(&self, extra: &[&str], command: &[&str]) -> ClientOutput {
        let out = tokio::process::Command::new(AIRLOCK)
            .args(["run", "--isolation", "gvisor", "--policy"])
            .arg(self.policy())
            .arg("--workspace")
            .arg(self.workspace())
            .arg("--upstream-ca")
            .arg(&self.pki.ca_pem)
            .args(["--resolve", "api.test:127.0.0.1"])
            .arg("--audit-db")
            .arg(self.db())
            .arg("--audit-key")
            .arg(self.key())
            .args(match extra.contains(&"--timeout") {
                true => &[][..],
                false => &["--timeout", "60s"][..],
            })
            .args(extra)
            // Where airlock keeps runsc's state: checked empty afterwards.
            .env("TMPDIR", self.dir.path().join("state"))
            .arg("--")
            .args(command)
            .output()
            .await
            .unwrap();
        ClientOutput::from(out)
    }

    /// The session's timeline, as `airlock audit timeline` prints it.
    fn timeline(&self, context: &dyn std::fmt::Debug) -> String {
        let id = first_session_id(AIRLOCK, &self.db(), context);
        audit_ok(AIRLOCK, &self.db(), &["timeline", &id])
    }
}

impl Fixture {
    /// Each session's runsc state and bundle live in a directory of their
    /// own, removed at the end, with the container deleted.
    fn no_leftover_runsc_sandboxes(&self) {
        let left: Vec<_> = std::fs::read_dir(self.dir.path().join("state"))
            .unwrap()
            .filter_map(Result::ok)
            .collect();
        assert!(left.is_empty(), "runsc state left behind: {left:?}");
    }
}

#[test]
fn runsc_is_installed_for_these_tests() {
    let out = Command::new("runsc").arg("--version").output();
    assert!(
        out.is_ok_and(|o| o.status.success()),
        "runsc is missing: run scripts/setup (Debian package runsc)"
    );
}

#[test]
fn an_unknown_isolation_is_refused_in_one_line_naming_the_choices() {
    for spelling in ["kata", "GVISOR", "", "gvisor "] {
        let out = Command::new(AIRLOCK)
            .args(["run", "--isolation", spelling, "--no-audit", "--", "true"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{spelling:?}: {stderr}");
        assert!(stderr.starts_with("airlock: "), "{stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
        assert!(
            stderr.contains("namespaces") && stderr.contains("gvisor"),
            "{stderr}"
        );
    }
}

#[test]
fn without_runsc_gvisor_is_refused_at_start_naming_the_debian_package() {
    // A PATH with everything of the host's but runsc.
    let dir = tempfile::tempdir().unwrap();
    for bin in ["/usr/sbin", "/usr/bin", "/sbin", "/bin"] {
        for entry in std::fs::read_dir(bin).into_iter().flatten().flatten() {
            let name = entry.file_name();
            let link = dir.path().join(&name);
            if name != "runsc" && !link.exists() {
                let _ = std::os::unix::fs::symlink(entry.path(), link);
            }
        }
    }
    let ws = tempfile::tempdir().unwrap();
    let out = Command::new(AIRLOCK)
        .env("PATH", dir.path())
        .args(["run", "--isolation", "gvisor", "--no-audit", "--workspace"])
        .arg(ws.path())
        .args(["--", "true"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.starts_with("airlock: "), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("package runsc"), "{stderr}");
}

#[test]
fn what_gvisor_cannot_mean_the_same_is_refused_in_one_line_saying_why() {
    let ws = tempfile::tempdir().unwrap();
    for (args, why) in [
        (&["run", "-t"][..], "--no-tty"),
        (&["run", "--pids", "64"][..], "gVisor's own threads"),
    ] {
        let out = Command::new(AIRLOCK)
            .args(args)
            .args(["--isolation", "gvisor", "--no-audit", "--workspace"])
            .arg(ws.path())
            .args(match args[0] {
                "run" => &["--", "true"][..],
                _ => &[][..],
            })
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {stderr}");
        assert!(
            stderr.starts_with("airlock: ") && stderr.contains(why),
            "{args:?}: {stderr}"
        );
        assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
    }
}

#[tokio::test]
async fn the_command_runs_on_gvisors_kernel_and_the_session_records_gvisor() {
    let f = Fixture::new().await;
    let out = f.run(&[], &["sh", "-c", "dmesg | head -1; uname -r"]).await;
    assert_eq!(out.status, 0, "{out:?}");
    // gVisor's kernel says so at boot; the host's would not be read at all
    // (no CAP_SYSLOG in a namespace sandbox).
    assert!(out.stdout.contains("gVisor"), "{out:?}");
    let list = sessions(AIRLOCK, &f.db());
    assert_eq!(list[0]["isolation"], "gvisor", "{list}");
    let table = audit_ok(AIRLOCK, &f.db(), &["sessions"]);
    let header = table.lines().next().unwrap();
    assert!(header.contains("ISOLATION"), "{table}");
    assert!(
        table.lines().nth(1).unwrap().contains(" gvisor "),
        "{table}"
    );
    // The default stays namespaces, and says so.
    let out = Command::new(AIRLOCK)
        .arg("run")
        .arg("--workspace")
        .arg(f.workspace())
        .arg("--audit-db")
        .arg(f.db())
        .arg("--audit-key")
        .arg(f.key())
        .args(["--", "true"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let list = sessions(AIRLOCK, &f.db());
    assert_eq!(list[1]["isolation"], "namespaces", "{list}");
    // The console's session list and session page say the same.
    let console = airlock_test_support::console::Console::start(AIRLOCK, &f.db(), &f.key()).await;
    let get = |path: String| {
        let token = console.token().to_owned();
        let url = format!("http://{}{path}", console.authority());
        async move {
            let out = tokio::process::Command::new("curl")
                .args(["-sS", "-f", "-H"])
                .arg(format!("Authorization: Bearer {token}"))
                .arg(url)
                .output()
                .await
                .unwrap();
            assert!(out.status.success(), "{out:?}");
            serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
        }
    };
    let rows = get("/api/sessions".into()).await;
    let gvisor_id = list[0]["id"].as_str().unwrap();
    for row in rows["sessions"].as_array().unwrap() {
        let want = if row["id"] == gvisor_id {
            "gvisor"
        } else {
            "namespaces"
        };
        assert_eq!(row["isolation"], want, "{rows}");
    }
    let page = get(format!("/api/sessions/{gvisor_id}")).await;
    assert_eq!(page["isolation"], "gvisor", "{page}");
    f.no_leftover_runsc_sandboxes();
}

#[tokio::test]
async fn curl_and_python_under_gvisor_reach_an_allowed_tls_upstream_only_through_the_proxy() {
    let f = Fixture::new().await;
    let allowed = format!("https://api.test:{}/echo", f.port());
    let denied = format!("https://api.test:{}/admin", f.port());
    let script = format!(
        "curl -sS -w ' %{{http_code}}\\n' {allowed}; curl -sS {denied}; curl -sS -m 10 https://unlisted.test/; echo unlisted=$?"
    );
    let out = f.run(&[], &["sh", "-c", &script]).await;
    assert_eq!(out.status, 0, "{out:?}");
    assert!(out.stdout.contains("\"method\":\"GET\""), "{out:?}");
    assert!(out.stdout.contains(" 200\n"), "{out:?}");
    assert!(
        out.stdout.contains("Airlock refused this request."),
        "{out:?}"
    );
    assert!(out.stdout.contains("paths = [\"/admin\"]"), "{out:?}");
    assert!(out.stdout.contains("host = \"unlisted.test\""), "{out:?}");

    let python = format!(
        r#"
import urllib.request, urllib.error
print(urllib.request.urlopen("{allowed}", timeout=20).status)
try:
    urllib.request.urlopen("{denied}", timeout=20)
except urllib.error.HTTPError as e:
    print(e.code, e.headers["x-airlock-decision"])
"#
    );
    let out = f.run(&[], &["python3", "-c", &python]).await;
    assert_eq!(out.stdout, "200\n403 deny\n", "{out:?}");
    // Every DNS query and connection the sentry made is in the record.
    let timeline = f.timeline(&out);
    assert!(timeline.contains("dns   api.test A"), "{timeline}");
    assert!(
        timeline.contains(&format!(
            "http  GET https://api.test:{}/echo -> 200",
            f.port()
        )),
        "{timeline}"
    );
    assert!(timeline.contains("-> 403  [deny]"), "{timeline}");
    f.no_leftover_runsc_sandboxes();
}

/// Inside gVisor: every way out but the proxy, tried. Prints one line per
/// attempt, `NAME: blocked` or `NAME: ESCAPED ...`.
const ESCAPES: &str = r#"
import socket, sys
port = int(sys.argv[1])

def attempt(name, f):
    try:
        r = f()
        print(name + ": ESCAPED " + repr(r))
    except Exception as e:
        print(name + ": blocked (" + type(e).__name__ + ")")

def udp(addr):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(3)
    s.sendto(b"x" * 32, addr)
    return s.recvfrom(64)

def raw():
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    s.settimeout(3)
    s.sendto(b"\x08\x00\xf7\xff\x00\x00\x00\x00", ("1.1.1.1", 0))
    return s.recvfrom(64)

def host_loopback():
    # The upstream listens on the host's loopback: not the sandbox's.
    s = socket.create_connection(("127.0.0.1", port), timeout=3)
    s.sendall(b"\x16\x03\x01\x00\x05hello")
    return s.recv(16)

def direct_ip():
    # Captured like any TCP connection: the proxy answers, and refuses it.
    s = socket.create_connection(("93.184.216.34", 80), timeout=5)
    s.sendall(b"GET / HTTP/1.1\r\nHost: 93.184.216.34\r\nConnection: close\r\n\r\n")
    data = s.recv(4096).decode(errors="replace")
    if " 403 " in data.split("\r\n")[0]:
        raise PermissionError("airlock 403")
    return data[:40]

def ipv6():
    s = socket.create_connection(("2606:4700:4700::1111", 443), timeout=3)
    return "connected"

def unix_host():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect("/run/podman/podman.sock")
    return "connected"

attempt("udp 8.8.8.8:443 (quic)", lambda: udp(("8.8.8.8", 443)))
attempt("udp 1.1.1.1:123", lambda: udp(("1.1.1.1", 123)))
attempt("raw icmp", raw)
attempt("host loopback", host_loopback)
attempt("direct ip", direct_ip)
attempt("ipv6", ipv6)
attempt("host unix socket", unix_host)
"#;

#[tokio::test]
async fn under_gvisor_udp_raw_ipv6_direct_ip_and_host_sockets_go_nowhere() {
    let f = Fixture::new().await;
    let port = f.port().to_string();
    let out = f.run(&[], &["python3", "-c", ESCAPES, &port]).await;
    assert_eq!(out.status, 0, "{out:?}");
    assert_eq!(out.stdout.lines().count(), 7, "{out:?}");
    for line in out.stdout.lines() {
        assert!(line.contains(": blocked"), "{line}\n{out:?}");
    }
    // The direct-IP attempt reached the proxy and was refused on record.
    let timeline = f.timeline(&out);
    assert!(timeline.contains("93.184.216.34"), "{timeline}");
    f.no_leftover_runsc_sandboxes();
}

#[tokio::test]
async fn under_gvisor_the_filesystem_view_matches_the_namespace_sandbox() {
    let f = Fixture::new().await;
    let extra = tempfile::tempdir().unwrap();
    let ro = extra.path().join("ro");
    let rw = extra.path().join("rw");
    let hidden = extra.path().join("hidden");
    for d in [&ro, &rw, &hidden] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(ro.join("r.txt"), "readable").unwrap();
    std::fs::write(hidden.join("secret.txt"), "s3cret").unwrap();
    let ws = f.workspace();
    let script = format!(
        r#"
echo ws > {ws}/w.txt && echo "workspace: written"
cat {ro}/r.txt; echo
echo x > {ro}/x 2>/dev/null && echo "ro: WRITTEN" || echo "ro: refused"
echo rw > {rw}/rw.txt && echo "rw: written"
cat {hidden}/secret.txt 2>/dev/null && echo "hidden: SEEN" || echo "hidden: not there"
echo x > /etc/airlock-gvisor-test 2>/dev/null && echo "etc: WRITTEN" || echo "etc: refused"
echo t > /tmp/t && echo "tmp: written"
pwd
"#,
        ws = ws.display(),
        ro = ro.display(),
        rw = rw.display(),
        hidden = hidden.display(),
    );
    let ro_arg = ro.display().to_string();
    let rw_arg = rw.display().to_string();
    let hide_arg = hidden.display().to_string();
    let out = f
        .run(
            &["--ro", &ro_arg, "--rw", &rw_arg, "--hide", &hide_arg],
            &["sh", "-c", &script],
        )
        .await;
    assert_eq!(out.status, 0, "{out:?}");
    let expected = format!(
        "workspace: written\nreadable\nro: refused\nrw: written\nhidden: not there\netc: refused\ntmp: written\n{}\n",
        ws.display()
    );
    assert_eq!(out.stdout, expected, "{out:?}");
    assert_eq!(std::fs::read_to_string(ws.join("w.txt")).unwrap(), "ws\n");
    assert_eq!(std::fs::read_to_string(rw.join("rw.txt")).unwrap(), "rw\n");
    assert!(!Path::new("/etc/airlock-gvisor-test").exists());
    assert!(!Path::new("/tmp/t").exists() || std::fs::read_to_string("/tmp/t").unwrap() != "t\n");
    // What the sandbox wrote is in the record (reconciled at the end).
    let timeline = f.timeline(&out);
    assert!(
        timeline.contains(&format!("{}/w.txt", ws.display())),
        "{timeline}"
    );
    assert!(
        timeline.contains(&format!("{}/rw.txt", rw.display())),
        "{timeline}"
    );
    f.no_leftover_runsc_sandboxes();
}

#[tokio::test]
async fn under_gvisor_the_timeout_user_and_tmp_size_hold() {
    let f = Fixture::new().await;
    let started = std::time::Instant::now();
    let out = f.run(&["--timeout", "2s"], &["sleep", "30"]).await;
    assert_eq!(out.status, 124, "{out:?}");
    assert!(out.stderr.contains("time limit"), "{out:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(20));

    let out = f.run(&["--user", "1000:1000"], &["id", "-u"]).await;
    assert_eq!(out.stdout, "1000\n", "{out:?}");

    // --memory bounds the whole sandbox (gVisor's kernel included): a
    // 400 MiB allocation under 64M is killed.
    let out = f
        .run(
            &["--memory", "64M"],
            &[
                "python3",
                "-c",
                "x = bytearray(400 << 20); print('ALLOCATED')",
            ],
        )
        .await;
    assert_ne!(out.status, 0, "{out:?}");
    assert!(!out.stdout.contains("ALLOCATED"), "{out:?}");

    let out = f
        .run(
            &["--tmp-size", "1M"],
            &[
                "sh",
                "-c",
                "dd if=/dev/zero of=/tmp/big bs=1M count=4 2>/dev/null && echo FILLED || echo full",
            ],
        )
        .await;
    assert_eq!(out.stdout, "full\n", "{out:?}");
    f.no_leftover_runsc_sandboxes();
}

#[tokio::test]
async fn execs_under_gvisor_are_recorded_from_gvisors_own_trace_points() {
    let f = Fixture::new().await;
    let ws = f.workspace();
    std::fs::write(ws.join("script.sh"), "#!/bin/sh\necho from-script\n").unwrap();
    std::fs::set_permissions(
        ws.join("script.sh"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    // Several spellings of "run a program": a shell, Python's subprocess
    // and os.execv (no shell), a #! script, env's exec.
    let python = "import os, subprocess; subprocess.run(['/usr/bin/printf', 'by-subprocess\\n']); os.execv('/bin/echo', ['echo', 'by-execv'])";
    let script =
        format!("API_TOKEN=hunter2 /usr/bin/env true; ./script.sh; python3 -c \"{python}\"");
    let out = f.run(&[], &["sh", "-c", &script]).await;
    assert_eq!(out.status, 0, "{out:?}");
    assert_eq!(
        out.stdout, "from-script\nby-subprocess\nby-execv\n",
        "{out:?}"
    );
    let id = first_session_id(AIRLOCK, &f.db(), &out);
    let events = airlock_test_support::audit_cli::export_jsonl(AIRLOCK, &f.db(), &id);
    let execs: Vec<&serde_json::Value> = events.iter().filter(|e| e["kind"] == "exec").collect();
    let argvs: Vec<String> = execs
        .iter()
        .map(|e| {
            e["argv"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|s| s.as_str().unwrap_or("?").to_owned())
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .unwrap_or_else(|| e.to_string())
        })
        .collect();
    for expected in [
        "sh -c",
        "/usr/bin/env true",
        "/usr/bin/printf by-subprocess\n",
        "echo by-execv",
    ] {
        assert!(
            argvs.iter().any(|a| a.starts_with(expected)),
            "{expected:?} not among {argvs:#?}"
        );
    }
    assert!(
        argvs.iter().any(|a| a.contains("script.sh")),
        "the #! script is not among {argvs:#?}"
    );
    // A secret-looking variable keeps its name, never its value.
    let env = execs
        .iter()
        .find(|e| e["argv"][0] == "/usr/bin/env")
        .unwrap();
    let names = env["env_names"].to_string();
    assert!(names.contains("\"API_TOKEN\""), "{env}");
    assert!(
        env["env_values_nonsecret"].get("API_TOKEN").is_none(),
        "{env}"
    );
    assert!(
        env["env_values_nonsecret"]["SSL_CERT_FILE"] == "/run/airlock/ca-bundle.pem",
        "{env}"
    );
    // The record still verifies.
    let key = f.key().display().to_string();
    let verify = audit_ok(AIRLOCK, &f.db(), &["verify", &id, "--audit-key", &key]);
    assert!(verify.contains("intact"), "{verify}");
    f.no_leftover_runsc_sandboxes();
}

/// gVisor serializes its execve point as protobuf, whose strings must be
/// UTF-8: an exec whose argument, working directory or environment is not
/// UTF-8 gets no point at all. A hostile program must not run unseen that
/// way: each such exec is still on record (its strings unknown, said in a
/// note), and the execs gVisor did report stay as they were. Under
/// namespaces the same names are on record byte for byte
/// (tests/record_names.rs).
#[tokio::test]
async fn under_gvisor_an_exec_whose_strings_are_not_utf8_is_still_on_record() {
    let f = Fixture::new().await;
    // Each spelling: an argument, the working directory (in a subshell: a
    // shell that leaves such a directory exports it in OLDPWD, which makes
    // every later exec's environment one that is not UTF-8), an
    // environment value; with reported execs around them.
    let script = r#"/bin/echo "$(printf 'a\377b')" >/dev/null
/bin/true reported-1
(mkdir -p "$(printf 'd\376')" && cd "$(printf 'd\376')" && /bin/true in-a-dir)
X="$(printf '\375')" /bin/true with-env
/bin/true reported-2"#;
    let out = f.run(&[], &["sh", "-c", script]).await;
    assert_eq!(out.status, 0, "{out:?}");
    let id = first_session_id(AIRLOCK, &f.db(), &out);
    let events = airlock_test_support::audit_cli::export_jsonl(AIRLOCK, &f.db(), &id);
    let execs: Vec<&serde_json::Value> = events.iter().filter(|e| e["kind"] == "exec").collect();
    let argv = |e: &serde_json::Value| e["argv"].to_string();
    // echo, mkdir (its argument), true in the directory, true with the
    // variable: four execs gVisor could not report.
    let unreported: Vec<_> = execs
        .iter()
        .filter(|e| e["argv"].as_array().is_some_and(|a| a.is_empty()))
        .collect();
    assert_eq!(unreported.len(), 4, "{execs:#?}");
    let notes = events
        .iter()
        .filter(|e| {
            e["kind"] == "note"
                && e["text"]
                    .as_str()
                    .is_some_and(|t| t.contains("gVisor did not report"))
        })
        .count();
    assert_eq!(notes, 4, "{events:#?}");
    for marker in ["reported-1", "reported-2"] {
        assert_eq!(
            execs
                .iter()
                .filter(|e| argv(e) == format!("[\"/bin/true\",\"{marker}\"]"))
                .count(),
            1,
            "{execs:#?}"
        );
    }
    let key = f.key().display().to_string();
    let verify = audit_ok(AIRLOCK, &f.db(), &["verify", &id, "--audit-key", &key]);
    assert!(verify.contains("intact"), "{verify}");
    f.no_leftover_runsc_sandboxes();
}

/// The file records of the fixture's first session, as (op, path,
/// rename_to, sha256, reconciled), from `airlock audit export`.
fn file_records(f: &Fixture, context: &dyn std::fmt::Debug) -> Vec<serde_json::Value> {
    let id = first_session_id(AIRLOCK, &f.db(), context);
    airlock_test_support::audit_cli::export_jsonl(AIRLOCK, &f.db(), &id)
        .into_iter()
        .filter(|e| e["kind"] == "file")
        .collect()
}

fn sha256_hex(bytes: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn under_gvisor_writes_renames_deletes_and_mkdirs_are_recorded_as_they_happen_not_only_at_the_end()
 {
    let f = Fixture::new().await;
    let ws = f.workspace();
    for name in ["old.txt", "gone.txt", "keep.txt", "py-old", "py-gone"] {
        std::fs::write(ws.join(name), format!("{name} before\n")).unwrap();
    }
    std::fs::create_dir(ws.join("empty-dir")).unwrap();
    let w = ws.display().to_string();
    // The shell's spellings, then Python's (no shell, its own syscalls).
    let python = format!(
        "import os; d='{w}'; open(d+'/py-new','w').write('from python\\n'); os.rename(d+'/py-old', d+'/py-renamed'); os.remove(d+'/py-gone'); os.makedirs(d+'/py-dir/sub'); os.rmdir(d+'/empty-dir')"
    );
    let script = format!(
        "cd {w} && echo hello > new.txt && mv old.txt renamed.txt && rm gone.txt && mkdir newdir && echo more >> keep.txt && python3 -c \"{python}\""
    );
    let out = f.run(&[], &["sh", "-c", &script]).await;
    assert_eq!(out.status, 0, "{out:?}");
    let files = file_records(&f, &out);
    let find = |op: &str, path: &str| {
        files
            .iter()
            .filter(|e| e["op"] == op && e["path"] == format!("{w}/{path}"))
            .collect::<Vec<_>>()
    };
    // Each operation is on record once, from the trace points: not
    // "found at session end" (a delete, a rename and a mkdir the reconcile
    // cannot see at all).
    let expect_one = |op: &str, path: &str| {
        let found = find(op, path);
        assert_eq!(found.len(), 1, "{op} {path}: {found:#?} among {files:#?}");
        assert!(
            found[0].get("reconciled").is_none_or(|r| r == false),
            "{op} {path} only from the reconcile: {files:#?}"
        );
        found[0].clone()
    };
    let new = expect_one("create", "new.txt");
    assert_eq!(new["sha256"], sha256_hex(b"hello\n"), "{new}");
    let py_new = expect_one("create", "py-new");
    assert_eq!(py_new["sha256"], sha256_hex(b"from python\n"), "{py_new}");
    let keep = expect_one("modify", "keep.txt");
    assert_eq!(
        keep["sha256"],
        sha256_hex(b"keep.txt before\nmore\n"),
        "{keep}"
    );
    let renamed = expect_one("rename", "old.txt");
    assert_eq!(
        renamed["rename_to"],
        format!("{w}/renamed.txt"),
        "{renamed}"
    );
    let py_renamed = expect_one("rename", "py-old");
    assert_eq!(
        py_renamed["rename_to"],
        format!("{w}/py-renamed"),
        "{py_renamed}"
    );
    expect_one("delete", "gone.txt");
    expect_one("delete", "py-gone");
    expect_one("delete", "empty-dir/");
    expect_one("create", "newdir/");
    expect_one("create", "py-dir/");
    expect_one("create", "py-dir/sub/");
    // The reconcile repeats none of them.
    let reconciled: Vec<_> = files.iter().filter(|e| e["reconciled"] == true).collect();
    assert!(reconciled.is_empty(), "{reconciled:#?}");
    // The timeline shows them where they happened.
    let timeline = f.timeline(&out);
    assert!(
        timeline.contains("delete   ") && timeline.contains("gone.txt"),
        "{timeline}"
    );
    let key = f.key().display().to_string();
    let id = first_session_id(AIRLOCK, &f.db(), &out);
    let verify = audit_ok(AIRLOCK, &f.db(), &["verify", &id, "--audit-key", &key]);
    assert!(verify.contains("intact"), "{verify}");
    f.no_leftover_runsc_sandboxes();
}

#[tokio::test(flavor = "multi_thread")]
async fn under_gvisor_a_symlink_in_the_workspace_never_puts_what_it_points_at_on_record() {
    let f = Fixture::new().await;
    let ws = f.workspace();
    // A host file outside every mount the sandbox sees, and a directory of
    // them: airlock (root) could read both, the sandbox cannot.
    let outside = f.dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "TOPSECRET-host-only\n").unwrap();
    let secret_sha = sha256_hex(b"TOPSECRET-host-only\n");
    let o = outside.display().to_string();
    let w = ws.display().to_string();
    // Links made, renamed over a written file, and a directory link a
    // walk would descend: each spelling makes airlock look again.
    let script = format!(
        "cd {w} && ln -s {o}/secret.txt s && ln -s {o} d && echo x > t && mv s t2 && ln -sf {o}/secret.txt t && mkdir m && mv d m/d && python3 -c \"import os; os.symlink('{o}/secret.txt', 'p'); os.rename('p', 'q')\""
    );
    let out = f.run(&[], &["sh", "-c", &script]).await;
    assert_eq!(out.status, 0, "{out:?}");
    let files = file_records(&f, &out);
    let leaked: Vec<_> = files
        .iter()
        .filter(|e| {
            e["sha256"] == secret_sha
                || e["path"].as_str().is_some_and(|p| p.contains("secret.txt"))
                || e["path"]
                    .as_str()
                    .is_some_and(|p| p.starts_with(&format!("{w}/m/d/")))
        })
        .collect();
    assert!(leaked.is_empty(), "{leaked:#?}");
    // The links themselves are on record, with their targets: every record
    // of q carries the target's text, never what it points at. How many
    // there are is timing: a look that lists p, then finds it renamed
    // before it reads the target, records p without one, and the next look
    // records q's target (`a_file_renamed_between_a_looks_stat_and_its_read_is_captured_by_the_next_look`).
    let q = format!("{w}/q");
    let linked: Vec<_> = files
        .iter()
        .filter(|e| e["path"] == q || e["rename_to"] == q)
        .collect();
    let target = format!("{o}/secret.txt");
    assert!(!linked.is_empty(), "{files:#?}");
    for record in &linked {
        assert_eq!(
            record["sha256"],
            sha256_hex(target.as_bytes()),
            "{files:#?}"
        );
    }
    let reconciled: Vec<_> = files.iter().filter(|e| e["reconciled"] == true).collect();
    assert!(reconciled.is_empty(), "{reconciled:#?}");
    let id = first_session_id(AIRLOCK, &f.db(), &out);
    for file in ["audit.db", "audit.db-wal"] {
        let bytes = std::fs::read(f.db().with_file_name(file)).unwrap_or_default();
        assert!(
            !bytes.windows(9).any(|w| w == b"TOPSECRET"),
            "the secret's bytes are in {file} ({id})"
        );
    }
    f.no_leftover_runsc_sandboxes();
}

/// Relative paths mean what they mean to the namespace sandbox: from
/// airlock's working directory. Run from inside the workspace, `--hide
/// secret` hides the workspace's `secret/`, and `--audit-db ../audit.db`
/// puts the record in the workspace's parent, which is hidden while the
/// workspace inside it shows through. Under gVisor both failed before:
/// runsc refused the relative hide's spec, and `..` hid the workspace.
fn relative_hide_and_audit_paths_mean_the_same_as_under_namespaces(isolation: Isolation) {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(ws.join("secret")).unwrap();
    std::fs::write(ws.join("secret/s.txt"), "TOPSECRET\n").unwrap();
    std::fs::write(dir.path().join("beside.txt"), "beside the workspace\n").unwrap();
    let out = Command::new(AIRLOCK)
        .current_dir(&ws)
        .arg("run")
        .args(isolation.args())
        .arg("--workspace")
        .arg(&ws)
        .args(["--hide", "secret", "--audit-db", "../audit.db"])
        .args(["--audit-key", "../audit.key", "--timeout", "60s", "--"])
        .args([
            "sh",
            "-c",
            "cat secret/s.txt ../beside.txt 2>/dev/null; pwd",
        ])
        .output()
        .unwrap();
    let out = ClientOutput::from(out);
    assert_eq!(out.status, 0, "{isolation:?}: {out:?}");
    assert_eq!(
        out.stdout,
        format!("{}\n", ws.display()),
        "{isolation:?}: {out:?}"
    );
    let list = sessions(AIRLOCK, &dir.path().join("audit.db"));
    assert_eq!(list[0]["isolation"], isolation.name(), "{list}");
}

per_isolation!(sync relative_hide_and_audit_paths_mean_the_same_as_under_namespaces =>
    relative_hide_and_audit_paths_are_resolved_from_the_working_directory,
    under_gvisor_relative_hide_and_audit_paths_are_resolved_from_the_working_directory);

/// A reader slowed by its own work (each look walks a workspace of 5,000
/// files) while 100 processes write and exec at once: runsc's remote sink
/// used to drop every point the socket had no room for (17 of 100 execs
/// on record, notes of thousands of dropped points). Now the task that
/// fired a point waits for the record: every exec and every file is on
/// record, and no point was dropped.
#[tokio::test(flavor = "multi_thread")]
async fn under_gvisor_a_burst_of_execs_while_the_record_is_busy_loses_none() {
    let f = Fixture::new().await;
    let many = f.workspace().join("many");
    std::fs::create_dir(&many).unwrap();
    for i in 0..5000 {
        std::fs::write(many.join(i.to_string()), "").unwrap();
    }
    let script = "for i in $(seq 100); do echo $i > f$i; /bin/true burst-$i & done; wait";
    let out = f.run(&[], &["sh", "-c", script]).await;
    assert_eq!(out.status, 0, "{out:?}");
    let id = first_session_id(AIRLOCK, &f.db(), &out);
    let events = airlock_test_support::audit_cli::export_jsonl(AIRLOCK, &f.db(), &id);
    let notes: Vec<_> = events.iter().filter(|e| e["kind"] == "note").collect();
    assert!(notes.is_empty(), "{notes:#?}");
    let ws = f.workspace().display().to_string();
    for i in 1..=100 {
        let arg = format!("burst-{i}");
        assert!(
            events
                .iter()
                .any(|e| e["kind"] == "exec" && e["argv"][1] == arg.as_str()),
            "/bin/true {arg} is not on record"
        );
        let path = format!("{ws}/f{i}");
        assert!(
            events.iter().any(|e| e["kind"] == "file"
                && e["path"] == path.as_str()
                && e["sha256"] == sha256_hex(format!("{i}\n").as_bytes())),
            "{path} is not on record"
        );
    }
    f.no_leftover_runsc_sandboxes();
}
