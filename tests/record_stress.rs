//! Issue 20's stress test: the record stays true under load. 100 processes
//! write 30,000 files in the workspace (and append to every tenth again),
//! while background writers keep writing when the command exits: one holds
//! a descriptor open, one appends, one rewrites, one keeps creating files.
//! They are killed when the session ends. Afterwards every file on disk has
//! a record whose last sha256 is its on-disk sha256, and restore gives its
//! bytes.

use std::time::Duration;

use airlock_test_support::disk::tree;
use airlock_test_support::record::{Failures, Sandbox};

const AIRLOCK: &str = airlock_test_support::airlock_bin!();

const PROCESSES: usize = 100;
const FILES_EACH: usize = 300;

/// The background writers, in python so that each writes at a bounded rate
/// (a shell loop would write hundreds of MB before the session ends) and
/// starts once. Each says it started by creating bg/started-NAME, so the
/// command only exits once all of them are writing.
const BACKGROUND: &str = r#"
import os, sys, time
kind = sys.argv[1]
open("bg/started-" + kind, "w").close()
n = 0
if kind == "held":
    # One descriptor, never closed: its content is whatever the file holds
    # when the writer is killed.
    fd = os.open("bg/held", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    while True:
        os.write(fd, b"held %d\n" % n)
        n += 1
        time.sleep(0.001)
while True:
    if kind == "append":
        with open("bg/appended", "a") as f:
            f.write("append %d\n" % n)
    elif kind == "rewrite":
        with open("bg/rewritten", "w") as f:
            f.write("rewrite %d\n" % n)
    elif kind == "create":
        with open("bg/new%d" % min(n, 1500), "a") as f:
            f.write("new %d\n" % n)
    n += 1
    time.sleep(0.002)
"#;

#[test]
fn thirty_thousand_files_and_writers_cut_off_at_the_end_are_on_record() {
    let sb = Sandbox::new(AIRLOCK);
    sb.tool("bg.py", BACKGROUND);
    let script = format!(
        r#"
set -e
mkdir bg
for kind in held append rewrite create; do python3 "$T/bg.py" $kind & done
pids=
for p in $(seq {PROCESSES}); do
  (
    mkdir d$p
    i=0; while [ $i -lt {FILES_EACH} ]; do echo "$p $i" > d$p/f$i; i=$((i+1)); done
    i=0; while [ $i -lt {FILES_EACH} ]; do echo again >> d$p/f$i; i=$((i+10)); done
  ) &
  pids="$pids $!"
done
for p in $pids; do wait $p; done
for kind in held append rewrite create; do
  while [ ! -e bg/started-$kind ]; do sleep 0.05; done
done
# Exit while the background writers are still writing.
"#
    );
    let r = sb.run(&[], &script, Duration::from_secs(110));
    r.assert_ok();
    let disk = tree(&sb.ws);
    let written = disk
        .keys()
        .filter(|p| p.to_str().is_some_and(|p| p.starts_with('d')))
        .count();
    assert_eq!(
        written,
        PROCESSES * FILES_EACH,
        "the writers did not finish"
    );
    let mut f = Failures::default();
    for name in ["held", "appended", "rewritten", "new0"] {
        f.check(
            disk.contains_key(&std::path::PathBuf::from("bg").join(name)),
            || format!("bg/{name} was never written: the background writers did not run"),
        );
    }
    r.check_paths_are_real(&mut f);
    r.check_end_state(&mut f, None);
    eprintln!(
        "{} files on disk, {} events, session took {:?}",
        disk.len(),
        r.events.len(),
        r.elapsed
    );
    f.finish("stress");
}
