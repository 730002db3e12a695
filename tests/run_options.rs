//! `airlock run`'s options as a user types them: the environment the command
//! gets (clean, plus `--env` and `--pass-env`), the defaults (`.` as the
//! workspace, deny-all without `--policy`), extra mounts (`--ro`, `--rw`,
//! `--hide`), `--tmp-size`, `--user`, the home and host secrets that are
//! hidden, and the kernel interfaces seccomp refuses. No network upstream is
//! needed: every test runs the real binary with `--no-audit` unless it is
//! about auditing.

use std::path::Path;

use airlock_test_support::client::ClientOutput;
use airlock_test_support::skip_or_fail;

const AIRLOCK: &str = airlock_test_support::airlock_bin!();

/// `airlock run --no-audit ARGS -- COMMAND` in `cwd`, with only PATH and `env`
/// in airlock's environment.
fn airlock_run(cwd: &Path, args: &[&str], command: &[&str], env: &[(&str, &str)]) -> ClientOutput {
    let out = std::process::Command::new(AIRLOCK)
        .current_dir(cwd)
        .args(["run", "--no-audit", "--timeout", "60s"])
        .args(args)
        .arg("--")
        .args(command)
        // Only what the test names, so TERM or LC_ALL of whoever runs the
        // suite cannot change what the sandbox is expected to see.
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    ClientOutput::from(out)
}

fn env_lines(stdout: &str) -> Vec<&str> {
    let mut lines: Vec<&str> = stdout.lines().collect();
    lines.sort_unstable();
    lines
}

#[test]
fn the_environment_is_clean_and_holds_only_what_was_asked_for() {
    let ws = tempfile::tempdir().unwrap();
    let host_env = [
        ("AWS_SECRET_ACCESS_KEY", "host-secret-do-not-pass"),
        ("PASSED_ON", "from the host"),
        ("LANG", "C.UTF-8"),
    ];
    let out = airlock_run(
        ws.path(),
        &["--env", "GREETING=hello world", "--pass-env", "PASSED_ON"],
        &["/usr/bin/env"],
        &host_env,
    );
    assert_eq!(out.status, 0, "{out:?}");
    let lines = env_lines(&out.stdout);
    assert!(lines.contains(&"GREETING=hello world"), "{lines:?}");
    assert!(lines.contains(&"PASSED_ON=from the host"), "{lines:?}");
    assert!(lines.contains(&"HOME=/tmp"), "{lines:?}");
    assert!(lines.contains(&"LANG=C.UTF-8"), "{lines:?}");
    for variable in [
        "SSL_CERT_FILE",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "NODE_EXTRA_CA_CERTS",
        "GIT_SSL_CAINFO",
        "PIP_CERT",
    ] {
        assert!(
            lines.iter().any(|l| l.starts_with(&format!("{variable}="))),
            "{variable} missing: {lines:?}"
        );
    }
    assert!(
        !out.stdout.contains("host-secret-do-not-pass"),
        "a host variable leaked into the sandbox: {lines:?}"
    );
    // Nothing beyond the documented set: PATH, HOME, LANG, the six CA
    // variables and the two asked for.
    assert_eq!(lines.len(), 3 + 6 + 2, "{lines:?}");

    // Asking for a variable that is not set is a one-line error, exit 125.
    let out = airlock_run(
        ws.path(),
        &["--pass-env", "NOT_SET_ANYWHERE"],
        &["true"],
        &[],
    );
    assert_eq!(out.status, 125, "{out:?}");
    assert_eq!(out.stderr.lines().count(), 1, "{out:?}");
    assert!(
        out.stderr.contains("--pass-env NOT_SET_ANYWHERE"),
        "{out:?}"
    );

    // A malformed --env is refused before anything runs: exit 125, naming the fix.
    let out = airlock_run(ws.path(), &["--env", "NOEQUALS"], &["true"], &[]);
    assert_eq!(out.status, 125, "{out:?}");
    assert!(out.stderr.contains("KEY=VALUE"), "{out:?}");
}

/// A credential's secret never enters the sandbox, even when the caller
/// asks: by `--pass-env` of the variable it comes from, or inside an
/// `--env` value. The refusal names the variable, never the secret.
#[test]
fn a_credentials_secret_is_refused_in_the_environment_however_it_is_asked_for() {
    let ws = tempfile::tempdir().unwrap();
    let policy = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        policy.path(),
        "version = 1\n[[credential]]\nname = \"api\"\nhosts = [\"api.test\"]\nheader = \"Authorization\"\nvalue = \"Bearer ${env:OPTIONS_TOKEN}\"\nplaceholder = \"OPTIONS_TOKEN\"\n",
    )
    .unwrap();
    let secret = "tok-3f9a1c-never-inside";
    let env = [("OPTIONS_TOKEN", secret)];
    let policy = policy.path().to_str().unwrap();
    let inside = format!("AUTH=Bearer {secret}");
    for (options, variable) in [
        (vec!["--pass-env", "OPTIONS_TOKEN"], "OPTIONS_TOKEN"),
        (vec!["--env", inside.as_str()], "AUTH"),
    ] {
        let mut args = vec!["--policy", policy];
        args.extend(&options);
        let out = airlock_run(ws.path(), &args, &["/usr/bin/env"], &env);
        assert_eq!(out.status, 125, "{options:?}: {out:?}");
        assert_eq!(
            out.stderr.trim_end(),
            format!(
                "airlock: {variable} carries the secret of credential api; secrets never enter the sandbox (use the credential's placeholder instead)"
            )
        );
        assert!(out.stdout.is_empty(), "{out:?}");
    }
    // The placeholder is what the command gets.
    let out = airlock_run(ws.path(), &["--policy", policy], &["/usr/bin/env"], &env);
    assert_eq!(out.status, 0, "{out:?}");
    assert!(!out.stdout.contains(secret), "{out:?}");
    assert!(out.stdout.contains("OPTIONS_TOKEN="), "{out:?}");
}

#[test]
fn the_sandbox_gets_a_fixed_path_and_the_hosts_only_when_passed() {
    let ws = tempfile::tempdir().unwrap();
    let fixed = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
    let host_path = "/root/.pyenv/shims:/opt/host-only/bin:/usr/local/bin:/usr/bin:/bin";
    let path_of = |args: &[&str], env: &[(&str, &str)]| {
        let out = std::process::Command::new(AIRLOCK)
            .current_dir(ws.path())
            .args(["run", "--no-audit", "--timeout", "60s"])
            .args(args)
            .args(["--", "/usr/bin/env"])
            .env_clear()
            .envs(env.iter().copied())
            .output()
            .unwrap();
        let out = ClientOutput::from(out);
        assert_eq!(out.status, 0, "{out:?}");
        let paths: Vec<String> = out
            .stdout
            .lines()
            .filter(|l| l.starts_with("PATH="))
            .map(str::to_owned)
            .collect();
        assert_eq!(paths.len(), 1, "{out:?}");
        paths[0].clone()
    };
    // The host's PATH, whatever it holds, stays outside.
    assert_eq!(path_of(&[], &[("PATH", host_path)]), fixed);
    // So does its absence.
    assert_eq!(path_of(&[], &[]), fixed);
    // Passed when asked for, in either spelling.
    assert_eq!(
        path_of(&["--pass-env", "PATH"], &[("PATH", host_path)]),
        format!("PATH={host_path}")
    );
    assert_eq!(
        path_of(
            &["--env", "PATH=/opt/mine/bin:/usr/bin"],
            &[("PATH", host_path)]
        ),
        "PATH=/opt/mine/bin:/usr/bin"
    );
}

#[test]
fn defaults_are_the_current_directory_and_no_network() {
    let ws = tempfile::tempdir_in("/var/tmp").unwrap();
    // No --workspace: the current directory is the workspace and the working
    // directory. No --policy: every request is refused by the proxy.
    let out = airlock_run(
        ws.path(),
        &[],
        &[
            "sh",
            "-c",
            "pwd; echo made-inside > made.txt; curl -sS -m 10 -o /dev/null -w '%{http_code}\\n' http://203.0.113.7/",
        ],
        &[],
    );
    let canonical = ws.path().canonicalize().unwrap();
    assert_eq!(
        out.stdout,
        format!("{}\n403\n", canonical.display()),
        "{out:?}"
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join("made.txt")).unwrap(),
        "made-inside\n"
    );
}

#[test]
fn ro_rw_hide_and_tmp_size_as_typed() {
    let ws = tempfile::tempdir_in("/var/tmp").unwrap();
    let extra = tempfile::tempdir_in("/var/tmp").unwrap();
    let ro = extra.path().join("ro");
    let rw = extra.path().join("rw");
    let hidden = extra.path().join("hidden");
    for dir in [&ro, &rw, &hidden] {
        std::fs::create_dir(dir).unwrap();
        std::fs::write(dir.join("file.txt"), "on the host\n").unwrap();
    }
    let script = format!(
        "cat {ro}/file.txt; (echo x > {ro}/new) 2>/dev/null && echo ro-writable; \
         echo written-inside > {rw}/new && echo rw-ok; \
         cat {hidden}/file.txt 2>/dev/null || echo hidden-ok; \
         head -c 3145728 /dev/zero > /tmp/big 2>/dev/null && echo tmp-unbounded || echo tmp-full; rm -f /tmp/big; \
         head -c 524288 /dev/zero > /tmp/small && echo tmp-ok",
        ro = ro.display(),
        rw = rw.display(),
        hidden = hidden.display(),
    );
    let out = airlock_run(
        ws.path(),
        &[
            "--ro",
            ro.to_str().unwrap(),
            "--rw",
            rw.to_str().unwrap(),
            "--hide",
            hidden.to_str().unwrap(),
            "--tmp-size",
            "2M",
        ],
        &["sh", "-c", &script],
        &[],
    );
    assert_eq!(
        out.stdout, "on the host\nrw-ok\nhidden-ok\ntmp-full\ntmp-ok\n",
        "{out:?}"
    );
    assert!(!ro.join("new").exists());
    assert_eq!(
        std::fs::read_to_string(rw.join("new")).unwrap(),
        "written-inside\n"
    );
    // Hiding does not touch the host's file.
    assert_eq!(
        std::fs::read_to_string(hidden.join("file.txt")).unwrap(),
        "on the host\n"
    );
}

#[test]
fn user_option_runs_the_command_as_that_user() {
    if !nix::unistd::geteuid().is_root() {
        skip_or_fail("--user is root only");
        return;
    }
    let ws = tempfile::tempdir_in("/var/tmp").unwrap();
    std::fs::set_permissions(
        ws.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let out = airlock_run(
        ws.path(),
        &["--user", "65534:65534"],
        &[
            "sh",
            "-c",
            "id -u; id -g; touch owned; grep CapEff /proc/self/status",
        ],
        &[],
    );
    assert_eq!(out.status, 0, "{out:?}");
    assert!(
        out.stdout
            .starts_with("65534\n65534\nCapEff:\t0000000000000000\n"),
        "{out:?}"
    );
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        std::fs::metadata(ws.path().join("owned")).unwrap().uid(),
        65534
    );

    let out = airlock_run(ws.path(), &["--user", "nobody-by-name"], &["true"], &[]);
    assert_eq!(out.status, 125, "{out:?}");
    assert!(out.stderr.contains("expected UID or UID:GID"), "{out:?}");
}

/// Removes what a test put on the host, even when the test fails.
struct RemoveOnDrop(Vec<std::path::PathBuf>);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        for path in &self.0 {
            let _ = std::fs::remove_dir_all(path).or_else(|_| std::fs::remove_file(path));
        }
    }
}

#[test]
fn cloud_and_container_credentials_are_hidden() {
    if !nix::unistd::geteuid().is_root() {
        skip_or_fail("needs root to plant /run/secrets");
        return;
    }
    // A home full of the usual credentials, with the workspace inside it.
    let home = tempfile::tempdir_in("/var/tmp").unwrap();
    let secrets = [
        ".ssh/id_ed25519",
        ".aws/credentials",
        ".config/gcloud/application_default_credentials.json",
        ".docker/config.json",
        ".kube/config",
        ".gnupg/private-keys-v1.d/key.key",
        ".netrc",
        ".git-credentials",
    ];
    for secret in secrets {
        let path = home.path().join(secret);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "home-secret-marker\n").unwrap();
    }
    let ws = home.path().join("project");
    std::fs::create_dir(&ws).unwrap();
    // A container-style secret on the host, when the machine has none.
    let mut cleanup = RemoveOnDrop(Vec::new());
    let run_secrets = Path::new("/run/secrets");
    if !run_secrets.exists() {
        std::fs::create_dir(run_secrets).unwrap();
        cleanup.0.push(run_secrets.to_owned());
    }
    let planted = run_secrets.join(format!("airlock-test-{}", std::process::id()));
    std::fs::write(&planted, "run-secret-marker\n").unwrap();
    cleanup.0.push(planted.clone());

    let mut script = String::new();
    for secret in secrets {
        script.push_str(&format!(
            "cat {}/{secret} 2>/dev/null; ",
            home.path().display()
        ));
    }
    script.push_str(&format!(
        "cat {} 2>/dev/null; ls /run/secrets 2>/dev/null; echo checked",
        planted.display()
    ));
    let out = airlock_run(
        &ws,
        &[],
        &["sh", "-c", &script],
        &[("HOME", home.path().to_str().unwrap())],
    );
    assert_eq!(out.stdout, "checked\n", "{out:?}");
}

/// Syscalls an unprivileged process could otherwise make (keyrings, ptrace,
/// bpf, perf, io_uring, userfaultfd, namespaces) and those that touch the
/// kernel itself (modules, kexec, reboot) all fail with EPERM inside, while
/// the same calls outside the sandbox get past the permission check (and fail
/// on the deliberately bad arguments instead). Calls go through libc's
/// syscall(2), so no library can paper over the result.
#[cfg(target_arch = "x86_64")]
#[test]
fn seccomp_refuses_kernel_and_process_manipulation() {
    const PROBE: &str = r#"
import ctypes, errno, json
libc = ctypes.CDLL(None, use_errno=True)
L = ctypes.c_long
calls = {
    "bpf": (321, [-1, 0, 0]),
    "perf_event_open": (298, [0, 0, -1, -1, 0]),
    "keyctl": (250, [0, -3, 0]),
    "add_key": (248, [0, 0, 0, 0, -3]),
    "ptrace": (101, [-1, 0, 0, 0]),
    "userfaultfd": (323, [-1]),
    "io_uring_setup": (425, [0, 0]),
    "unshare": (272, [0]),
    "process_vm_readv": (310, [1, 0, 0, 0, 0, 0]),
    "init_module": (175, [0, 0, 0]),
    "delete_module": (176, [0, 0]),
    "kexec_load": (246, [0, 0, 0, 0xdead]),
    "reboot": (169, [0, 0, 0, 0]),
}
out = {}
for name, (nr, args) in calls.items():
    ctypes.set_errno(0)
    r = libc.syscall(L(nr), *[L(a) for a in args])
    out[name] = "ok" if r >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")
status = dict(l.split(":\t", 1) for l in open("/proc/self/status").read().splitlines() if ":\t" in l)
out["Seccomp"] = status.get("Seccomp", "?").strip()
out["NoNewPrivs"] = status.get("NoNewPrivs", "?").strip()
print(json.dumps(out))
"#;
    let ws = tempfile::tempdir_in("/var/tmp").unwrap();
    let inside = airlock_run(ws.path(), &[], &["/usr/bin/python3", "-c", PROBE], &[]);
    assert_eq!(inside.status, 0, "{inside:?}");
    let inside: serde_json::Value = serde_json::from_str(inside.stdout.trim()).unwrap();
    for (name, result) in inside.as_object().unwrap() {
        match name.as_str() {
            "Seccomp" => assert_eq!(result, "2", "not under a seccomp filter: {inside}"),
            "NoNewPrivs" => assert_eq!(result, "1", "no_new_privs is not set: {inside}"),
            _ => assert_eq!(result, "EPERM", "{name} was not refused: {inside}"),
        }
    }

    // Control: outside, as root, the calls an unprivileged process may make
    // get past the permission check, so EPERM inside is the filter's doing.
    if nix::unistd::geteuid().is_root() {
        let outside = std::process::Command::new("/usr/bin/python3")
            .args(["-c", PROBE])
            .output()
            .unwrap();
        let outside: serde_json::Value = serde_json::from_slice(&outside.stdout).unwrap();
        if outside["Seccomp"] != "0" {
            // A test runner inside a container may already be filtered.
            eprintln!("control skipped: the test itself runs under a seccomp filter: {outside}");
            return;
        }
        for name in [
            "bpf",
            "perf_event_open",
            "keyctl",
            "add_key",
            "ptrace",
            "unshare",
            "process_vm_readv",
        ] {
            assert_ne!(outside[name], "EPERM", "{name} outside: {outside}");
        }
    }
}
