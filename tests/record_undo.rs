//! Issue 29, item 6, "what changed": the record keeps what a file that
//! existed before the session held before the session changed it, so every
//! modification has a real before and after (`audit files --diff`), and
//! `audit files SESSION --undo` puts the workspace back as it was, proven
//! from the signed record. Real sessions (`airlock run` with sh, python3,
//! coreutils) in real namespaces; the workspace is compared with a full
//! snapshot (type, mode, bytes, link target of every entry) taken before
//! the session.

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use airlock_test_support::audit_cli::{audit_cli, export_jsonl, first_session_id};
use airlock_test_support::disk::sha256_hex;
use serde_json::Value;

const AIRLOCK: &str = airlock_test_support::airlock_bin!();

/// A workspace, an audit database and its key, in one temporary directory.
struct Bench {
    dir: tempfile::TempDir,
    ws: PathBuf,
    db: PathBuf,
    key: PathBuf,
}

impl Bench {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir(&ws).unwrap();
        Self {
            db: dir.path().join("audit/audit.db"),
            key: dir.path().join("audit/audit.key"),
            ws,
            dir,
        }
    }

    /// `airlock run` of `sh -c script` in the workspace; returns the session id.
    fn run(&self, extra: &[&str], script: &str) -> String {
        let out = Command::new(AIRLOCK)
            .current_dir(&self.ws)
            .arg("run")
            .arg("--workspace")
            .arg(&self.ws)
            .arg("--audit-db")
            .arg(&self.db)
            .arg("--audit-key")
            .arg(&self.key)
            .args(["--timeout", "60s", "--no-tty"])
            .args(extra)
            .args(["--", "sh", "-c", script])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "the session failed: {}", show(&out));
        first_session_id(AIRLOCK, &self.db, &out)
    }

    fn audit(&self, args: &[&str]) -> Output {
        audit_cli(AIRLOCK, &self.db, args)
    }

    /// `audit files ID --undo --audit-key KEY` and `extra`.
    fn undo(&self, id: &str, extra: &[&str]) -> Output {
        let key = self.key.to_str().unwrap();
        let mut args = vec!["files", id, "--undo", "--audit-key", key];
        args.extend_from_slice(extra);
        self.audit(&args)
    }

    fn path(&self, rel: &str) -> String {
        self.ws.join(rel).to_str().unwrap().to_owned()
    }
}

fn show(out: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Every entry below `root`: its kind, permission bits and bytes (a file's
/// SHA-256, a link's target).
fn snapshot(root: &Path) -> BTreeMap<String, String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let path = e.path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let rel = path.strip_prefix(root).unwrap().display().to_string();
            let mode = meta.mode() & 0o7777;
            let what = if meta.file_type().is_symlink() {
                format!("link -> {}", std::fs::read_link(&path).unwrap().display())
            } else if meta.is_dir() {
                walk(root, &path, out);
                format!("dir {mode:o}")
            } else {
                format!(
                    "file {mode:o} {}",
                    sha256_hex(&std::fs::read(&path).unwrap())
                )
            };
            out.insert(rel, what);
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

fn write(path: &Path, data: &[u8], mode: u32) {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).unwrap();
    }
    std::fs::write(path, data).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A workspace with a file for every way a session can change one.
fn every_way_workspace(ws: &Path) {
    let w = |rel: &str, data: &[u8], mode: u32| write(&ws.join(rel), data, mode);
    w("mod.txt", b"line1\nline2\nline3\n", 0o644);
    w("append.txt", b"kept\n", 0o644);
    w("trunc.txt", b"will be emptied\n", 0o644);
    let bin: Vec<u8> = (0..=255u8).cycle().take(3000).collect();
    w("ptrunc.bin", &bin, 0o640);
    w("otrunc.txt", b"opened with O_TRUNC\n", 0o644);
    w("del.txt", b"deleted in the session\n", 0o644);
    w("mv.txt", b"renamed in the session\n", 0o644);
    w("src.txt", b"moved over victim\n", 0o644);
    w("victim.txt", b"overwritten by a rename\n", 0o600);
    w("run.sh", b"#!/bin/sh\necho hi\n", 0o755);
    w("secret.txt", b"private\n", 0o600);
    w("sub/deep.txt", b"deep\n", 0o644);
    w("sub/inner/x", b"x\n", 0o644);
    w("hard.txt", b"one inode\n", 0o644);
    w("untouched.txt", b"never touched\n", 0o644);
    std::fs::create_dir(ws.join("empty")).unwrap();
    std::fs::create_dir(ws.join("becomes-file")).unwrap();
    std::os::unix::fs::symlink("mod.txt", ws.join("link")).unwrap();
}

/// A session that changes the workspace in every way, in several spellings
/// (sh redirections, coreutils, python's os calls).
const EVERY_WAY: &str = r#"set -e
sed -i s/line2/LINE2/ mod.txt
echo appended >> append.txt
: > trunc.txt
python3 -c 'import os; os.truncate("ptrunc.bin", 10)'
python3 -c 'import os; fd = os.open("otrunc.txt", os.O_WRONLY | os.O_TRUNC); os.write(fd, b"new\n"); os.close(fd)'
rm del.txt
mv mv.txt moved.txt
mv src.txt victim.txt
chmod 600 run.sh
chmod 644 secret.txt
echo leaked >> secret.txt
mv sub sub2
echo changed > sub2/deep.txt
rmdir empty
rmdir becomes-file
echo now a file > becomes-file
rm link
ln -s append.txt link
ln hard.txt hard2.txt
echo through the new name >> hard2.txt
echo new > created.txt
mkdir -p newdir/inner
echo nested > newdir/inner/f
ln -s created.txt newlink
python3 -c 'import os; os.rename("moved.txt", "moved-again.txt"); os.chmod("moved-again.txt", 0o700)'
"#;

/// The file records of a session, as `audit export --format jsonl` has them.
fn file_events(b: &Bench, id: &str) -> Vec<Value> {
    export_jsonl(AIRLOCK, &b.db, id)
        .into_iter()
        .filter(|e| e["kind"] == "file")
        .collect()
}

#[test]
fn undo_puts_back_a_workspace_the_session_changed_in_every_way_byte_for_byte_and_mode_for_mode() {
    let b = Bench::new();
    every_way_workspace(&b.ws);
    let before = snapshot(&b.ws);
    let id = b.run(&[], EVERY_WAY);
    let after = snapshot(&b.ws);
    assert_ne!(before, after, "the session changed nothing");

    // The record holds what each pre-existing file held, before its change.
    let files = file_events(&b, &id);
    let originals: BTreeMap<String, &Value> = files
        .iter()
        .filter(|e| e["op"] == "original")
        .map(|e| (e["path"].as_str().unwrap().to_owned(), e))
        .collect();
    for (rel, bytes) in [
        ("mod.txt", &b"line1\nline2\nline3\n"[..]),
        ("append.txt", b"kept\n"),
        ("trunc.txt", b"will be emptied\n"),
        ("otrunc.txt", b"opened with O_TRUNC\n"),
        ("del.txt", b"deleted in the session\n"),
        ("mv.txt", b"renamed in the session\n"),
        ("victim.txt", b"overwritten by a rename\n"),
        ("src.txt", b"moved over victim\n"),
        ("secret.txt", b"private\n"),
        ("sub/deep.txt", b"deep\n"),
        ("sub/inner/x", b"x\n"),
        ("hard.txt", b"one inode\n"),
    ] {
        let Some(o) = originals.get(&b.path(rel)) else {
            panic!("no original of {rel} on record: {files:#?}");
        };
        assert_eq!(o["sha256"], sha256_hex(bytes), "original of {rel}: {o}");
    }
    assert_eq!(
        originals[&b.path("run.sh")]["mode"],
        0o100_755, // S_IFREG | 0755
        "run.sh's original mode"
    );
    assert!(
        !originals.contains_key(&b.path("untouched.txt"))
            && !originals.contains_key(&b.path("created.txt")),
        "an original for a file the session did not change or created: {originals:#?}"
    );
    // Each original comes before the first change of its file.
    for (path, o) in &originals {
        let first_change = files
            .iter()
            .filter(|e| e["op"] != "original" && (e["path"] == **path || e["rename_to"] == **path))
            .map(|e| e["seq"].as_u64().unwrap())
            .min();
        if let Some(seq) = first_change {
            assert!(
                o["seq"].as_u64().unwrap() < seq,
                "the original of {path} is recorded after its change: {o}"
            );
        }
    }

    let out = b.undo(&id, &[]);
    assert!(out.status.success(), "undo: {}", show(&out));
    let undone = snapshot(&b.ws);
    assert_eq!(
        before,
        undone,
        "the workspace after undo is not what it was before the session\n{}",
        show(&out)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    for line in [
        format!(
            "moved back {} <- {}",
            b.path("mv.txt"),
            b.path("moved-again.txt")
        ),
        format!("removed    {}", b.path("created.txt")),
        format!("recreated  {}", b.path("empty")),
    ] {
        assert!(said.contains(&line), "undo did not say {line:?}: {said}");
    }
    // Undone twice: the disk no longer holds the session's end.
    let again = b.undo(&id, &[]);
    assert_eq!(again.status.code(), Some(1), "{}", show(&again));
    assert_eq!(snapshot(&b.ws), before, "a refused undo changed the disk");
}

#[test]
fn undo_to_a_copy_of_the_workspace_leaves_the_original_as_the_session_left_it() {
    let b = Bench::new();
    every_way_workspace(&b.ws);
    let before = snapshot(&b.ws);
    let id = b.run(&[], EVERY_WAY);
    let after = snapshot(&b.ws);
    let copy = b.dir.path().join("copy");
    let cp = Command::new("cp")
        .arg("-a")
        .arg(&b.ws)
        .arg(&copy)
        .status()
        .unwrap();
    assert!(cp.success());
    let out = b.undo(&id, &["--to", copy.to_str().unwrap()]);
    assert!(out.status.success(), "undo --to: {}", show(&out));
    assert_eq!(
        snapshot(&copy),
        before,
        "the copy is not the workspace before"
    );
    assert_eq!(snapshot(&b.ws), after, "undo --to touched the workspace");

    let missing = b.dir.path().join("no-such-dir");
    let out = b.undo(&id, &["--to", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("airlock: --to ")
            && err.contains("not a directory")
            && err.lines().count() == 1,
        "{err}"
    );
}

#[test]
fn the_cli_diff_shows_what_a_modified_pre_existing_file_held_before_and_after() {
    let b = Bench::new();
    write(&b.ws.join("mod.txt"), b"line1\nline2\nline3\n", 0o644);
    write(&b.ws.join("append.txt"), b"kept\n", 0o644);
    write(&b.ws.join("del.txt"), b"gone\n", 0o644);
    let id = b.run(
        &[],
        "sed -i s/line2/LINE2/ mod.txt && echo more >> append.txt && rm del.txt && echo new > new.txt",
    );
    let diff = |rel: &str| {
        let out = b.audit(&["files", &id, "--diff", &b.path(rel)]);
        assert!(out.status.success(), "--diff {rel}: {}", show(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let d = diff("mod.txt");
    let m = b.path("mod.txt");
    for want in [
        format!("--- {m} (before the session)"),
        format!("+++ {m} (after the session)"),
        "-line2".into(),
        "+LINE2".into(),
        " line1".into(),
    ] {
        assert!(d.lines().any(|l| l == want), "no line {want:?} in:\n{d}");
    }
    let d = diff("append.txt");
    assert!(
        d.lines().any(|l| l == " kept") && d.lines().any(|l| l == "+more"),
        "{d}"
    );
    assert!(!d.lines().any(|l| l.starts_with("-k")), "{d}");
    let d = diff("del.txt");
    assert!(
        d.lines().any(|l| l == "-gone") && d.contains("+++ /dev/null"),
        "{d}"
    );
    let d = diff("new.txt");
    assert!(
        d.contains("--- /dev/null") && d.lines().any(|l| l == "+new"),
        "{d}"
    );

    let out = b.audit(&["files", &id, "--diff", &b.path("never.txt")]);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("airlock: session "));
}

#[test]
fn undo_refuses_naming_each_path_the_disk_changed_since_the_session_unless_forced() {
    let b = Bench::new();
    every_way_workspace(&b.ws);
    let before = snapshot(&b.ws);
    let id = b.run(&[], EVERY_WAY);
    // After the session: three kinds of later change.
    std::fs::write(b.ws.join("mod.txt"), "edited after the session\n").unwrap();
    std::fs::remove_file(b.ws.join("created.txt")).unwrap();
    std::fs::write(b.ws.join("del.txt"), "recreated after the session\n").unwrap();
    std::fs::set_permissions(b.ws.join("run.sh"), std::fs::Permissions::from_mode(0o700)).unwrap();
    let later = snapshot(&b.ws);

    let out = b.undo(&id, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    for rel in ["mod.txt", "created.txt", "del.txt", "run.sh"] {
        let line = format!("changed since the session  {}:", b.path(rel));
        assert!(said.contains(&line), "undo did not name {rel}: {said}");
    }
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("airlock: undo refused, nothing was changed: 4 path(s) changed")
            && err.contains("--force")
            && err.lines().count() == 1,
        "{err}"
    );
    assert_eq!(snapshot(&b.ws), later, "a refused undo changed the disk");

    let out = b.undo(&id, &["--force"]);
    assert!(out.status.success(), "undo --force: {}", show(&out));
    assert_eq!(
        snapshot(&b.ws),
        before,
        "--force did not put the workspace back"
    );
}

#[test]
fn a_file_past_the_content_cap_is_named_and_undo_restores_nothing_of_it_unless_forced() {
    let b = Bench::new();
    let big: Vec<u8> = (0..8192u32).map(|i| (i * 7 % 251) as u8).collect();
    write(&b.ws.join("big.bin"), &big, 0o644);
    write(&b.ws.join("big-moved.bin"), &big[..5000], 0o644);
    write(&b.ws.join("small.txt"), b"small\n", 0o644);
    let before = snapshot(&b.ws);
    let id = b.run(
        &["--audit-max-file", "4K"],
        "echo tail >> big.bin && mv big-moved.bin elsewhere.bin && echo changed > small.txt",
    );
    let after = snapshot(&b.ws);
    // The record kept the big original's hash, not its bytes.
    let files = file_events(&b, &id);
    let original = files
        .iter()
        .find(|e| e["op"] == "original" && e["path"] == b.path("big.bin"))
        .unwrap_or_else(|| panic!("no original of big.bin: {files:#?}"));
    assert_eq!(original["sha256"], sha256_hex(&big), "{original}");
    assert_eq!(original["content_over_cap"], true, "{original}");

    let out = b.undo(&id, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains(&format!(
            "cannot be restored         {}: content past the size cap (--audit-max-file)",
            b.path("big.bin")
        )),
        "{said}"
    );
    // Past the cap too, but its bytes are still on disk under the new name:
    // that one can be moved back, so it is not named.
    assert!(!said.contains(&b.path("big-moved.bin")), "{said}");
    assert_eq!(snapshot(&b.ws), after, "a refused undo changed the disk");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("1 file(s) cannot be restored"),
        "{}",
        show(&out)
    );

    // --force: everything else is undone, the big file is left as the
    // session left it, and the exit status says the undo is incomplete.
    let out = b.undo(&id, &["--force"]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let mut want = before.clone();
    want.insert("big.bin".into(), after["big.bin"].clone());
    assert_eq!(snapshot(&b.ws), want, "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("airlock: undo incomplete:") && err.contains("1 file(s) left"),
        "{err}"
    );
}

#[test]
fn a_tampered_or_unproven_record_is_refused_and_nothing_is_undone() {
    let b = Bench::new();
    write(&b.ws.join("a.txt"), b"original a\n", 0o644);
    let id = b.run(&[], "echo changed > a.txt && echo new > b.txt");
    let after = snapshot(&b.ws);

    // No trusted key: the record proves nothing.
    let out = b.audit(&["files", &id, "--undo", "--audit-key", "/nonexistent/key"]);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    // Another key: signed, but not by the key we trust.
    let other = Bench::new();
    other.run(&[], "true");
    let out = b.audit(&[
        "files",
        &id,
        "--undo",
        "--audit-key",
        other.key.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("untrusted key"),
        "{}",
        show(&out)
    );
    assert_eq!(snapshot(&b.ws), after);

    // The original's hash edited in the database: the chain breaks.
    let sql = Command::new("sqlite3")
        .arg(&b.db)
        .arg(
            "UPDATE events SET payload = replace(payload, '\"op\":\"original\"', '\"op\":\"modify\"') \
             WHERE payload LIKE '%\"op\":\"original\"%'; SELECT changes();",
        )
        .output()
        .expect("sqlite3 is needed to tamper with the record");
    assert!(sql.status.success(), "{}", show(&sql));
    assert_ne!(
        String::from_utf8_lossy(&sql.stdout).trim(),
        "0",
        "nothing tampered"
    );
    let out = b.undo(&id, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("airlock: the record does not prove what to undo:")
            && err.contains("TAMPERED")
            && err.lines().count() == 1,
        "{err}"
    );
    assert_eq!(snapshot(&b.ws), after, "undo acted on a tampered record");
}

#[test]
fn the_original_is_on_record_however_the_session_reaches_the_file() {
    let b = Bench::new();
    let names = [
        "via-symlink.txt",
        "via-proc-cwd.txt",
        "via-dirfd.txt",
        "via-mmap.bin",
        "via-truncate-s.txt",
        "via-new-link.txt",
        "via-fd-dup.txt",
    ];
    for name in names {
        write(
            &b.ws.join("d").join(name),
            format!("{name} before\n").as_bytes(),
            0o644,
        );
    }
    let before = snapshot(&b.ws);
    let id = b.run(
        &[],
        r#"set -e
cd d
ln -s via-symlink.txt l && echo through a symlink >> l && rm l
echo through proc >> /proc/self/cwd/via-proc-cwd.txt
python3 - <<'PY'
import mmap, os
d = os.open(".", os.O_RDONLY)
fd = os.open("via-dirfd.txt", os.O_WRONLY | os.O_APPEND, dir_fd=d)
os.write(fd, b"through a dirfd\n")
fd = os.open("via-mmap.bin", os.O_RDWR)
m = mmap.mmap(fd, 4)
m[0:4] = b"MMAP"
m.close()
os.close(fd)
fd = os.open("/dev/fd/%d/via-fd-dup.txt" % d, os.O_WRONLY | os.O_TRUNC)
os.write(os.dup(fd), b"dup\n")
PY
truncate -s 3 via-truncate-s.txt
ln via-new-link.txt other-name && echo through the new name >> other-name && rm other-name
"#,
    );
    let files = file_events(&b, &id);
    for name in names {
        let path = b.path(&format!("d/{name}"));
        let want = sha256_hex(format!("{name} before\n").as_bytes());
        assert!(
            files
                .iter()
                .any(|e| e["op"] == "original" && e["path"] == path && e["sha256"] == want),
            "no original of {name} with its content before the session: {files:#?}"
        );
    }
    assert_ne!(snapshot(&b.ws), before, "the session changed nothing");
    let out = b.undo(&id, &[]);
    assert!(out.status.success(), "undo: {}", show(&out));
    assert_eq!(snapshot(&b.ws), before, "{}", show(&out));
}

/// Every entry below `root` by its name's bytes: (kind, bytes); for the
/// names `snapshot` would print alike.
fn raw_snapshot(root: &Path) -> BTreeMap<Vec<u8>, (bool, Vec<u8>)> {
    use std::os::unix::ffi::OsStrExt;
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(root).unwrap().flatten() {
        let path = e.path();
        let is_dir = path.is_dir();
        let data = if is_dir {
            Vec::new()
        } else {
            std::fs::read(&path).unwrap()
        };
        out.insert(e.file_name().as_bytes().to_vec(), (is_dir, data));
    }
    out
}

#[test]
fn undo_puts_back_names_that_are_not_utf8_byte_for_byte() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let b = Bench::new();
    let at = |name: &[u8]| b.ws.join(OsStr::from_bytes(name));
    // Two names a lossy conversion would make one.
    write(&at(b"old\xfe.txt"), b"the payload's neighbour\n", 0o644);
    write(&at("old\u{fffd}.txt".as_bytes()), b"innocent\n", 0o644);
    write(&at(b"moved\xfd"), b"moved\n", 0o644);
    let before = raw_snapshot(&b.ws);
    let id = b.run(
        &[],
        r#"
        echo changed >> "$(printf 'old\376.txt')"
        printf payload > "$(printf 'run\377.sh')"
        mv "$(printf 'moved\375')" plain-now
        "#,
    );
    assert_ne!(raw_snapshot(&b.ws), before);
    let out = b.undo(&id, &[]);
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(raw_snapshot(&b.ws), before, "{}", show(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("run\\xff.sh"),
        "undo names what it removed: {said}"
    );
}

/// A file's extended attributes, name -> value.
fn xattrs_of(path: &Path) -> BTreeMap<String, Vec<u8>> {
    let out = Command::new("getfattr")
        .args(["--absolute-names", "-d", "-m", "-", "-e", "hex"])
        .arg(path)
        .output()
        .expect("getfattr (the attr package; scripts/setup installs it)");
    assert!(out.status.success(), "getfattr: {}", show(&out));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once("=0x"))
        .map(|(name, hex)| {
            let value = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect();
            (name.to_owned(), value)
        })
        .collect()
}

#[test]
fn undo_puts_back_the_extended_attributes_a_file_had_before_the_session() {
    let b = Bench::new();
    let tagged = b.ws.join("tagged.txt");
    write(&tagged, b"tagged\n", 0o644);
    let set = |name: &str, value: &str| {
        let out = Command::new("setfattr")
            .args(["-n", name, "-v", value])
            .arg(&tagged)
            .output()
            .expect("setfattr (the attr package; scripts/setup installs it)");
        assert!(out.status.success(), "setfattr: {}", show(&out));
    };
    set("user.origin", "human");
    set("user.gone", "kept");
    let before = xattrs_of(&tagged);
    let id = b.run(
        &[],
        "python3 -c 'import os\n\
         os.setxattr(\"tagged.txt\", \"user.origin\", b\"agent\")\n\
         os.setxattr(\"tagged.txt\", \"user.added\", b\"payload\")\n\
         os.removexattr(\"tagged.txt\", \"user.gone\")'",
    );
    assert_ne!(xattrs_of(&tagged), before);
    // What it had is on record before the first change.
    let files = file_events(&b, &id);
    let original = files
        .iter()
        .find(|e| e["op"] == "original" && e["xattr"]["name"] == "user.origin")
        .unwrap_or_else(|| panic!("no original of user.origin: {files:#?}"));
    assert_eq!(original["sha256"], sha256_hex(b"human"), "{original}");

    let out = b.undo(&id, &[]);
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(xattrs_of(&tagged), before, "{}", show(&out));
    assert_eq!(std::fs::read(&tagged).unwrap(), b"tagged\n");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("user.added removed"), "{said}");
}

/// gVisor's record has no `original` (docs/isolation.md: the content
/// before a file's first change would have to be copied before the command
/// runs). So undo of a gVisor session can put back only what the session
/// added: the files and directories it created are removed, and every file
/// that was there before and was changed, deleted, renamed or chmodded is
/// named as one undo cannot restore, never "restored" to not existing.
/// Nothing changes without `--force`; with it the created paths go and the
/// named ones stay as the session left them, exit 1.
#[test]
fn under_gvisor_undo_removes_what_the_session_created_and_names_each_file_it_has_no_original_for() {
    let b = Bench::new();
    write(&b.ws.join("mod.txt"), b"before\n", 0o644);
    write(&b.ws.join("del.txt"), b"deleted in the session\n", 0o644);
    write(&b.ws.join("mv.txt"), b"renamed in the session\n", 0o644);
    write(&b.ws.join("mode.sh"), b"#!/bin/sh\n", 0o755);
    write(&b.ws.join("sub/deep.txt"), b"deep\n", 0o644);
    write(&b.ws.join("untouched.txt"), b"never touched\n", 0o644);
    let before = snapshot(&b.ws);
    // Each change by its own program, so each look sees it alone.
    let id = b.run(
        &["--isolation", "gvisor"],
        "set -e
echo changed > mod.txt
rm del.txt
mv mv.txt moved.txt
chmod 600 mode.sh
python3 -c 'open(\"sub/deep.txt\", \"a\").write(\"more\\n\")'
echo new > created.txt
mkdir -p newdir/inner
echo nested > newdir/inner/f",
    );
    let after = snapshot(&b.ws);
    let unknown = [
        "mod.txt",
        "del.txt",
        "mv.txt",
        "moved.txt",
        "mode.sh",
        "sub/deep.txt",
    ];

    // The diff does not claim a changed file did not exist before.
    let out = b.audit(&["files", &id, "--diff", &b.path("mod.txt")]);
    assert!(out.status.success(), "{}", show(&out));
    let d = String::from_utf8_lossy(&out.stdout);
    assert!(
        !d.contains("did not exist")
            && d.contains("(before the session, not on record)")
            && d.contains("a gVisor session, which records none"),
        "{d}"
    );

    let out = b.undo(&id, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    for rel in unknown {
        let line = format!("cannot be restored         {}: ", b.path(rel));
        let line = said
            .lines()
            .find(|l| l.starts_with(&line))
            .unwrap_or_else(|| panic!("undo did not name {rel}:\n{}", show(&out)));
        assert!(line.contains("gVisor"), "{line}");
    }
    for rel in ["created.txt", "newdir", "untouched.txt"] {
        assert!(
            !said.contains(&format!("{} ", b.path(rel)))
                && !said.contains(&format!("{}:", b.path(rel))),
            "{rel} named:\n{said}"
        );
    }
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("airlock: undo refused, nothing was changed: 6 file(s) cannot be restored")
            && err.contains("--force")
            && err.lines().count() == 1,
        "{err}"
    );
    assert_eq!(snapshot(&b.ws), after, "a refused undo changed the disk");

    let out = b.undo(&id, &["--force"]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let mut want = after.clone();
    for created in ["created.txt", "newdir", "newdir/inner", "newdir/inner/f"] {
        want.remove(created);
    }
    assert_eq!(snapshot(&b.ws), want, "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("airlock: undo incomplete:") && err.contains("6 file(s) left"),
        "{err}"
    );
    // What the session created is gone; nothing it found was lost.
    for (rel, what) in &before {
        if !unknown.contains(&rel.as_str()) {
            assert_eq!(snapshot(&b.ws).get(rel), Some(what), "{rel}");
        }
    }
}
