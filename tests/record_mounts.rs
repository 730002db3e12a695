//! Everything the sandbox can write is recorded or unwritable (issue 20,
//! "Writable places outside the workspace"). A probe inside a real
//! `airlock run` reads the sandbox's own /proc/self/mountinfo (no list of
//! mounts is written down here), tries to create a file in the root and in a
//! subdirectory of every read-write mount that stores files, and reports what
//! happened. Each file it managed to create must be on record with its
//! SHA-256; each one it did not must have been refused by the kernel. Run as
//! root (the sandbox's uid 0 without capabilities) and as an ordinary user
//! (user namespaces), which build the same mounts by different means.

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use airlock_test_support::audit_cli::{export_jsonl, first_session_id};
use airlock_test_support::disk::sha256_hex;
use airlock_test_support::isolation::Isolation;
use serde_json::Value;

const AIRLOCK: &str = airlock_test_support::airlock_bin!();

/// File system types the probe leaves alone, each a kernel interface whose
/// entries are kernel objects rather than stored files. Creating entries in
/// some of them has side effects (a directory in cgroupfs is a new cgroup)
/// or fails with errors that say nothing about storage.
const EXCLUDED: &[(&str, &str)] = &[
    (
        "proc",
        "process and kernel state; files cannot be created (proc(5))",
    ),
    (
        "sysfs",
        "attributes of kernel objects; files cannot be created (sysfs(5))",
    ),
    (
        "devpts",
        "terminal nodes the kernel makes on each open of ptmx (pts(4))",
    ),
    (
        "cgroup",
        "a directory is a control group, a file a controller knob (cgroups(7))",
    ),
    (
        "cgroup2",
        "a directory is a control group, a file a controller knob (cgroups(7))",
    ),
    (
        "mqueue",
        "message queues of the sandbox's own IPC namespace, gone with it (mq_overview(7))",
    ),
    (
        "securityfs",
        "LSM policy interfaces; files are kernel objects",
    ),
    ("debugfs", "kernel debugging interface; no stored data"),
    ("tracefs", "kernel tracing interface; no stored data"),
    (
        "binfmt_misc",
        "each entry registers an interpreter with the kernel",
    ),
    (
        "configfs",
        "each directory creates a kernel object (configfs docs)",
    ),
    ("fusectl", "one control file per FUSE connection"),
];

/// The probe: the mount table, one report per read-write mount that stores
/// files, and the /dev checks, as one JSON object on stdout.
const PROBE: &str = r#"
import errno, json, os, sys

excluded = set(sys.argv[1].split(","))
tag = sys.argv[2]

def unescape(field):
    # proc_pid_mountinfo(5): space, tab, newline and backslash come as \ooo.
    b, out, i = field.encode(), bytearray(), 0
    while i < len(b):
        if b[i] == 0x5C and i + 3 < len(b) and all(0x30 <= c <= 0x37 for c in b[i + 1:i + 4]):
            out.append(int(b[i + 1:i + 4], 8))
            i += 4
        else:
            out.append(b[i])
            i += 1
    return os.fsdecode(bytes(out))

def mnt_id(path):
    # The mount this path really reaches, as the kernel says (proc_pid_fdinfo(5)).
    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        with open(f"/proc/self/fdinfo/{fd}") as info:
            for line in info:
                key, _, value = line.partition(":")
                if key == "mnt_id":
                    return int(value)
    finally:
        os.close(fd)

def failed(path, e):
    return {"path": path, "errno": errno.errorcode.get(e.errno, str(e.errno))}

def create(path, content):
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    except OSError as e:
        return failed(path, e)
    with os.fdopen(fd, "wb") as f:
        f.write(content.encode())
    return {"path": path, "content": content}

def mkdir(path):
    try:
        os.mkdir(path)
    except OSError as e:
        return failed(path, e)
    return {"path": path, "dir": True}

def subdir_on(root, mid):
    # An existing directory on this very mount, two levels deep at most.
    level = [root]
    for _ in range(2):
        deeper = []
        for d in level:
            try:
                entries = sorted(os.scandir(d), key=lambda e: e.name)
            except OSError:
                continue
            for e in entries:
                try:
                    if e.is_dir(follow_symlinks=False) and mnt_id(e.path) == mid:
                        return e.path
                except OSError:
                    continue
                deeper.append(e.path)
        level = deeper
    return None

report = {"mounts": []}
with open("/proc/self/mountinfo") as table:
    lines = table.read().splitlines()
for line in lines:
    f = line.split(" ")
    sep = f.index("-")
    m = {"id": int(f[0]), "point": unescape(f[4]), "opts": f[5].split(","), "fstype": f[sep + 1]}
    report["mounts"].append(m)
    if "rw" not in m["opts"] or m["fstype"] in excluded:
        continue
    try:
        here = mnt_id(m["point"])
    except OSError as e:
        m["reach"] = "unreachable: " + errno.errorcode.get(e.errno, str(e.errno))
        continue
    # gVisor's fdinfo has no mnt_id: there every mount listed is tried.
    if here is not None and here != m["id"]:
        m["reach"] = f"shadowed by mount {here}"
        continue
    if os.path.islink(m["point"]) or not os.path.isdir(m["point"]):
        m["reach"] = "file"
        m["mode"] = oct(os.stat(m["point"]).st_mode)
        continue
    m["reach"] = "here"
    name = f"airlock-probe-{tag}-{m['id']}"
    base = os.path.join(m["point"], name)
    attempts = [create(base, f"{tag}: {base} in the root of {m['fstype']}\n")]
    made = mkdir(base + ".d")
    attempts.append(made)
    sub = base + ".d" if "errno" not in made else subdir_on(m["point"], m["id"])
    if sub is None:
        m["subdir"] = "none on this mount"
    else:
        path = os.path.join(sub, name)
        attempts.append(create(path, f"{tag}: {path} in a subdirectory\n"))
    m["attempts"] = attempts

report["dev_mount"] = mnt_id("/dev")
report["dev_x"] = create("/dev/x", "stashed where no record looks\n")
report["dev_dir"] = mkdir("/dev/airlock-stash")
try:
    # As a shell's `> /dev/null` does it: O_TRUNC on a device node is ignored.
    with open("/dev/null", "wb") as null:
        null.write(b"discarded\n")
    report["dev_null"] = "written"
except OSError as e:
    report["dev_null"] = failed("/dev/null", e)["errno"]
try:
    # Same mode as now: harmless should it ever succeed, but the node belongs
    # to the host and its attributes must not be the sandbox's to change.
    os.chmod("/dev/null", 0o666)
    report["dev_null_chmod"] = "changed"
except OSError as e:
    report["dev_null_chmod"] = failed("/dev/null", e)["errno"]
report["dev_shm"] = create(f"/dev/shm/airlock-shm-{tag}", f"{tag}: shared memory\n")
print(json.dumps(report))
"#;

/// The errors that mean "the kernel refused to store it here".
const REFUSED: [&str; 3] = ["EROFS", "EACCES", "EPERM"];

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn which(program: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|d| d.join(program))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{program} is needed to run airlock as an ordinary user"))
}

/// What the probe saw and what the record holds.
struct Probe {
    report: Value,
    events: Vec<Value>,
    workspace: PathBuf,
}

/// Run the probe in `airlock run`, as root or through runuser as `user`.
fn probe(user: Option<&str>) -> Probe {
    probe_under(Isolation::Namespaces, user)
}

/// The same, under `isolation`.
fn probe_under(isolation: Isolation, user: Option<&str>) -> Probe {
    let tag = user.map_or("root", |_| "user");
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let audit = dir.path().join("audit");
    std::fs::create_dir(&audit).unwrap();
    let mut airlock = PathBuf::from(AIRLOCK);
    let mut command = match user {
        None => Command::new(&airlock),
        Some(user) => {
            // Everything the user needs in one world-accessible directory,
            // including a copy of the binary (the target dir stays untouched).
            let add = Command::new(which("useradd"))
                .args(["-m", user])
                .output()
                .unwrap();
            assert!(
                add.status.success() || String::from_utf8_lossy(&add.stderr).contains("exists"),
                "useradd: {add:?}"
            );
            for d in [dir.path(), &ws, &audit] {
                chmod(d, 0o777);
            }
            airlock = dir.path().join("airlock");
            std::fs::copy(AIRLOCK, &airlock).unwrap();
            chmod(&airlock, 0o755);
            let mut c = Command::new(which("runuser"));
            c.args(["-u", user, "--", "env"])
                .arg(format!("HOME=/home/{user}"))
                .arg("PATH=/usr/local/bin:/usr/bin:/bin")
                .arg(&airlock);
            c
        }
    };
    let excluded: Vec<&str> = EXCLUDED.iter().map(|(fs, _)| *fs).collect();
    let out = command
        .arg("run")
        .args(isolation.args())
        .arg("--workspace")
        .arg(&ws)
        .arg("--audit-db")
        .arg(audit.join("audit.db"))
        .arg("--audit-key")
        .arg(audit.join("audit.key"))
        .args(["--timeout", "120s", "--", "/usr/bin/python3", "-c", PROBE])
        .arg(excluded.join(","))
        .arg(tag)
        .output()
        .unwrap();
    assert!(out.status.success(), "airlock run: {out:?}");
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("probe report: {e}: {out:?}"));

    let db: OsString = audit.join("audit.db").into();
    let id = first_session_id(AIRLOCK, Path::new(&db), &"the probe run");
    let events = export_jsonl(AIRLOCK, Path::new(&db), &id);
    Probe {
        report,
        events,
        workspace: std::fs::canonicalize(&ws).unwrap(),
    }
}

impl Probe {
    /// The last file record of `path`; its hash is the file's final content.
    fn last_record(&self, path: &str) -> Option<&Value> {
        self.events
            .iter()
            .rfind(|e| e["kind"] == "file" && e["path"] == path)
    }

    /// A created file is on record with its content; anything else was refused.
    fn assert_recorded_or_refused(&self, attempt: &Value) {
        let path = attempt["path"].as_str().unwrap();
        if let Some(content) = attempt["content"].as_str() {
            let record = self
                .last_record(path)
                .unwrap_or_else(|| panic!("{path} was written but is not on record: {attempt}"));
            assert_eq!(
                record["sha256"],
                sha256_hex(content.as_bytes()),
                "{path}: {record}"
            );
        } else if attempt["dir"] != true {
            let errno = attempt["errno"].as_str().unwrap();
            assert!(
                REFUSED.contains(&errno),
                "{path}: failed with {errno}, not a refusal to store: {attempt}"
            );
        }
    }

    fn mounts(&self) -> &Vec<Value> {
        self.report["mounts"].as_array().unwrap()
    }

    // The table goes into the test's log, for whoever reads a failure.
    #[allow(clippy::print_stderr)]
    fn check(&self) {
        eprintln!("mount table inside the sandbox:");
        for m in self.mounts() {
            eprintln!(
                "  {:>4} {:<40} {:<10} {:<40} {}",
                m["id"],
                m["point"].as_str().unwrap(),
                m["fstype"].as_str().unwrap(),
                m["opts"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|o| o.as_str().unwrap())
                    .collect::<Vec<_>>()
                    .join(","),
                m.get("reach").and_then(Value::as_str).unwrap_or("-"),
            );
        }
        let mut checked = Vec::new();
        for m in self.mounts() {
            let Some(reach) = m.get("reach").and_then(Value::as_str) else {
                continue;
            };
            let point = m["point"].as_str().unwrap();
            match reach {
                "here" => {
                    checked.push(point);
                    let attempts = m["attempts"].as_array().unwrap();
                    // Root, a directory made in it (or a refusal), and a file in a
                    // subdirectory unless the mount has none the probe could use.
                    assert!(attempts.len() == 3 || m["subdir"].is_string(), "{m}");
                    for a in attempts {
                        self.assert_recorded_or_refused(a);
                    }
                }
                // A mount covered by another one is reached by no path, but the
                // sandbox makes even those read-only (mount_setattr(2),
                // AT_RECURSIVE), so one left writable is a regression too.
                _ => panic!(
                    "{point}: a read-write {} mount the probe cannot check ({reach}): {m}",
                    m["fstype"]
                ),
            }
        }
        // Not vacuous: the places that are writable by design were found and
        // written to, and each write is on record.
        for expected in [self.workspace.to_str().unwrap(), "/tmp", "/dev/shm"] {
            assert!(
                checked.contains(&expected),
                "{expected} was not among the checked mounts {checked:?}"
            );
            let m = self
                .mounts()
                .iter()
                .find(|m| m["point"] == expected && m["reach"] == "here")
                .unwrap();
            assert!(
                m["attempts"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|a| a["content"].is_string() || a["dir"] == true),
                "{expected} should be writable: {m}"
            );
        }

        // /dev: a read-only tmpfs whose devices still work.
        let dev = self
            .mounts()
            .iter()
            .find(|m| m["id"] == self.report["dev_mount"])
            .unwrap();
        assert_eq!(dev["fstype"], "tmpfs", "{dev}");
        assert!(
            dev["opts"].as_array().unwrap().contains(&"ro".into()),
            "{dev}"
        );
        assert_eq!(self.report["dev_x"]["errno"], "EROFS", "{}", self.report);
        assert_eq!(self.report["dev_dir"]["errno"], "EROFS", "{}", self.report);
        assert!(self.last_record("/dev/x").is_none());
        assert_eq!(self.report["dev_null"], "written", "{}", self.report);
        assert_eq!(self.report["dev_null_chmod"], "EROFS", "{}", self.report);
        let shm = &self.report["dev_shm"];
        assert!(shm["content"].is_string(), "{shm}");
        self.assert_recorded_or_refused(shm);
    }
}

#[test]
fn every_writable_mount_is_recorded_or_refused_as_root() {
    probe(None).check();
}

#[test]
fn every_writable_mount_is_recorded_or_refused_as_an_ordinary_user() {
    probe(Some("airlock-mounts-test")).check();
}

/// Under gVisor the writable places are the workspace, recorded as under
/// namespaces, and gVisor's own memory filesystems `/tmp`, `/dev` (with
/// `/dev/shm`) and `/run`: the sentry's memory, never the host's, gone
/// with the sandbox, and not recorded (the documented difference,
/// docs/isolation.md). No other mount is writable: a new one fails here.
#[test]
fn under_gvisor_only_the_workspace_and_gvisors_own_memory_filesystems_are_writable() {
    let p = probe_under(Isolation::Gvisor, None);
    let workspace = p.workspace.to_str().unwrap();
    let mut writable: Vec<&str> = p
        .mounts()
        .iter()
        .filter(|m| m.get("reach").is_some())
        .map(|m| {
            assert_eq!(m["reach"], "here", "{m}");
            m["point"].as_str().unwrap()
        })
        .collect();
    writable.sort_unstable();
    let mut expected = vec!["/dev", "/run", "/tmp", workspace];
    expected.sort_unstable();
    assert_eq!(writable, expected, "{:#}", p.report);
    let gvisors_own = |path: &str| {
        ["/tmp/", "/dev/", "/run/"]
            .iter()
            .any(|d| path.starts_with(d))
    };
    for m in p.mounts().iter().filter(|m| m["reach"] == "here") {
        for a in m["attempts"].as_array().unwrap() {
            let path = a["path"].as_str().unwrap();
            assert!(a["content"].is_string() || a["dir"] == true, "{a}");
            if m["point"] == workspace {
                p.assert_recorded_or_refused(a);
            } else {
                assert!(gvisors_own(path), "{a}");
                assert!(p.last_record(path).is_none(), "{path} on record?");
            }
        }
    }
    for stash in ["dev_x", "dev_shm"] {
        let a = &p.report[stash];
        assert!(a["content"].is_string(), "{stash}: {a}");
        assert!(p.last_record(a["path"].as_str().unwrap()).is_none(), "{a}");
    }
}
