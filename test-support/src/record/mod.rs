//! `airlock run` with an audit database, its record read back through the
//! CLI a responder uses (`audit export`, `audit files --restore`), and
//! compared with what is on disk once the sandbox is gone. Every check
//! collects its failures, so one run of a test names every variant the
//! record gets wrong, each with the records it had for the path.

mod failures;
mod sandbox;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

pub use failures::Failures;
pub use sandbox::Sandbox;

use crate::audit_cli::audit_cli;
use crate::disk::{sha256_hex, tree};

/// What one session put on record, and the workspace as it was before it.
#[derive(Debug)]
pub struct Record {
    pub id: String,
    pub status: i32,
    pub stdout: String,
    pub stderr: String,
    pub events: Vec<Value>,
    pub elapsed: Duration,
    before: BTreeMap<PathBuf, Vec<u8>>,
    pub ws: PathBuf,
    airlock: String,
    db: PathBuf,
    restored: PathBuf,
}

/// An event without the bulky environment, for failure messages.
pub fn brief(e: &Value) -> String {
    let mut e = e.clone();
    if let Some(map) = e.as_object_mut() {
        for k in [
            "env_names",
            "env_values_nonsecret",
            "session",
            "ts",
            "ts_us",
        ] {
            map.remove(k);
        }
        // A test's own `sh -c SCRIPT` would drown the message.
        if let Some(argv) = map.get_mut("argv").and_then(Value::as_array_mut) {
            for arg in argv {
                if let Some(s) = arg.as_str().filter(|s| s.len() > 80) {
                    let cut: String = s.chars().take(60).collect();
                    *arg = Value::String(format!("{cut}..."));
                }
            }
        }
    }
    e.to_string()
}

impl Record {
    /// The command must have ended as the script said, or nothing it did
    /// can be trusted to have happened.
    pub fn assert_ok(&self) {
        assert_eq!(
            self.status, 0,
            "the command failed\nstdout: {}\nstderr: {}",
            self.stdout, self.stderr
        );
    }

    pub fn ws_path(&self, rel: &str) -> String {
        self.ws.join(rel).to_str().unwrap().to_owned()
    }

    pub fn files(&self) -> impl Iterator<Item = &Value> {
        self.events.iter().filter(|e| e["kind"] == "file")
    }

    pub fn execs(&self) -> impl Iterator<Item = &Value> {
        self.events.iter().filter(|e| e["kind"] == "exec")
    }

    /// Every file event that names `path` (as its path, rename target, or
    /// one of the inode's names), for failure messages.
    pub fn about(&self, path: &str) -> String {
        let lines: Vec<String> = self
            .files()
            .filter(|e| {
                e["path"] == path
                    || e["rename_to"] == path
                    || e["names"]
                        .as_array()
                        .is_some_and(|n| n.iter().any(|n| n == path))
            })
            .map(brief)
            .collect();
        if lines.is_empty() {
            format!("  (no file record of {path})")
        } else {
            format!("  records of {path}:\n    {}", lines.join("\n    "))
        }
    }

    /// `about`, while there are few enough failures to show (it scans the
    /// whole record, and a stress run can fail for every one of its files).
    fn about_while_few(&self, failures: &Failures, path: &str) -> String {
        if failures.len() < 40 {
            self.about(path)
        } else {
            String::new()
        }
    }

    /// The exec whose argv contains `arg` (the tests give every exec a
    /// unique argument, so it can be found whatever path was recorded).
    pub fn exec_with_arg(&self, arg: &str) -> Option<&Value> {
        self.exec_with_arg_except(arg, None)
    }

    /// As `exec_with_arg`, leaving out execs of the program `launcher`
    /// (argv[0]), whose own argv names the program it goes on to run.
    pub fn exec_with_arg_except(&self, arg: &str, launcher: Option<&str>) -> Option<&Value> {
        self.execs().find(|e| {
            let argv = e["argv"].as_array();
            argv.is_some_and(|a| a.iter().any(|v| v == arg))
                && launcher.is_none_or(|l| argv.and_then(|a| a.first()).is_none_or(|a0| a0 != l))
        })
    }

    pub fn all_execs(&self) -> String {
        self.execs().map(brief).collect::<Vec<_>>().join("\n    ")
    }

    /// What the record says each path holds at the end, replaying file
    /// events as `audit files --restore` does: path → sha256 (None: known
    /// to exist but without a hash). Directories and exec images are left
    /// out.
    pub fn replay(&self) -> BTreeMap<String, Option<String>> {
        let mut files: BTreeMap<String, Option<String>> = BTreeMap::new();
        for e in self.files() {
            let path = e["path"].as_str().unwrap_or_default().to_owned();
            let sha = e["sha256"].as_str().map(str::to_owned);
            match e["op"].as_str().unwrap_or_default() {
                "create" | "modify" | "truncate" if !path.ends_with('/') => {
                    files.insert(path, sha);
                }
                "rename" => {
                    let moved = files.remove(&path);
                    if let Some(to) = e["rename_to"].as_str() {
                        // A directory's rename moves what is under it. More
                        // generous than restore may be: the restore check
                        // stays the judge of that.
                        let (from_dir, to_dir) = (
                            format!("{}/", path.trim_end_matches('/')),
                            format!("{}/", to.trim_end_matches('/')),
                        );
                        let under: Vec<String> = files
                            .keys()
                            .filter(|k| k.starts_with(&from_dir))
                            .cloned()
                            .collect();
                        for k in under {
                            let state = files.remove(&k).unwrap();
                            files.insert(format!("{to_dir}{}", &k[from_dir.len()..]), state);
                        }
                        let state = match moved {
                            Some(s) if e["stored_content"].is_null() => s,
                            _ => sha,
                        };
                        if !to.ends_with('/') {
                            files.insert(to.to_owned(), state);
                        }
                    }
                }
                "delete" => {
                    files.remove(&path);
                }
                _ => {}
            }
        }
        files
    }

    /// `audit files SESSION --restore DIR`, once; returns DIR.
    pub fn restore(&self) -> &Path {
        if !self.restored.exists() {
            let restored = self.restored.to_str().unwrap();
            let out = audit_cli(
                &self.airlock,
                &self.db,
                &["files", &self.id, "--restore", restored],
            );
            assert!(out.status.success(), "restore: {out:?}");
        }
        &self.restored
    }

    /// The restored copy of the workspace.
    pub fn restored_ws(&self) -> PathBuf {
        self.restore()
            .join(self.ws.strip_prefix("/").unwrap())
            .to_owned()
    }

    /// The end-state promise: for every regular file in the workspace that
    /// the session created or changed, the last recorded sha256 is its
    /// on-disk sha256 and restore gives its bytes (unless `hash_only_over`
    /// bytes, where the hash must still match); nothing restored differs
    /// from the disk; and nothing is restored that is not on disk.
    pub fn check_end_state(&self, failures: &mut Failures, hash_only_over: Option<usize>) {
        let disk = tree(&self.ws);
        let restored = tree(&self.restored_ws());
        let replay = self.replay();
        for (rel, bytes) in &disk {
            if self.before.get(rel) == Some(bytes) {
                continue; // untouched by the session
            }
            let path = self.ws.join(rel).to_str().unwrap().to_owned();
            let want = sha256_hex(bytes);
            match replay.get(&path) {
                Some(Some(sha)) if *sha == want => {}
                got => failures.add(format!(
                    "{path}: on disk {} bytes sha256 {want}, the record ends with {got:?}\n{}",
                    bytes.len(),
                    self.about_while_few(failures, &path)
                )),
            }
            if hash_only_over.is_some_and(|cap| bytes.len() > cap) {
                continue;
            }
            match restored.get(rel) {
                Some(r) if r == bytes => {}
                Some(r) => failures.add(format!(
                    "{path}: restore gives {} bytes (sha256 {}), disk has {} (sha256 {want})\n{}",
                    r.len(),
                    sha256_hex(r),
                    bytes.len(),
                    self.about_while_few(failures, &path)
                )),
                None => failures.add(format!(
                    "{path}: on disk, not restored\n{}",
                    self.about_while_few(failures, &path)
                )),
            }
        }
        for (rel, bytes) in &restored {
            let path = self.ws.join(rel).to_str().unwrap().to_owned();
            match disk.get(rel) {
                Some(d) if d == bytes => {}
                Some(_) => {} // reported above
                None => failures.add(format!(
                    "{path}: restored ({} bytes) but not on disk at the end\n{}",
                    bytes.len(),
                    self.about_while_few(failures, &path)
                )),
            }
        }
    }

    /// No file record may carry a path the kernel would not print: a
    /// lexical `..`/`.`, a magic link (`/proc/…/cwd`, `/proc/…/fd`,
    /// `/dev/fd`), or a symlink on the way.
    pub fn check_paths_are_real(&self, failures: &mut Failures) {
        for e in self.files() {
            for key in ["path", "rename_to"] {
                let Some(path) = e[key].as_str() else {
                    continue;
                };
                let trimmed = path.trim_end_matches('/');
                let lexical = Path::new(trimmed)
                    .components()
                    .any(|c| matches!(c, std::path::Component::ParentDir))
                    || trimmed.split('/').any(|c| c == ".");
                let magic = trimmed.starts_with("/proc/") || trimmed.starts_with("/dev/fd");
                let via_link = Path::new(trimmed).parent().is_some_and(|parent| {
                    parent.starts_with(&self.ws)
                        && std::fs::canonicalize(parent).is_ok_and(|c| c != parent)
                });
                failures.check(!lexical && !magic && !via_link, || {
                    format!(
                        "a file record names a path the kernel did not: {}",
                        brief(e)
                    )
                });
            }
        }
    }
}
