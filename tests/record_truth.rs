//! Issue 20, "the record tells the truth": a hostile program, tried the way
//! an attacker would, must not be able to write or run anything that the
//! record misses or misdescribes. One test per class of attack from the
//! issue, each in several variants, each asserting the exact record (path,
//! sha256, op, or absence) and that `audit files --restore` gives the final
//! on-disk content. The programs are real: sh, python3, and C compiled with
//! gcc at test time, run by the real `airlock run` in real namespaces.
//!
//! The record format asserted is the observer redesign's (issue 20): exec
//! `path` = readlink(/proc/PID/exe) at the exec stop, `sha256` and `image`
//! of the executed image, "image" file events for images with no path on
//! disk; file `path` = the kernel-resolved name; failed operations absent.
//!
//! The /dev and writable-mount class and the terminal-escape class have
//! their own tests elsewhere.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use airlock_test_support::disk::sha256_hex;
use airlock_test_support::isolation::Isolation;
use airlock_test_support::per_isolation;
use airlock_test_support::record::{Failures, Record, Sandbox, brief};
use serde_json::Value;

const AIRLOCK: &str = airlock_test_support::airlock_bin!();

/// A copy of /usr/bin/true with `marker` appended: it runs like true (the
/// ELF loader ignores trailing bytes) but has a sha256 of its own, so the
/// record's hash says which program ran.
fn marked_true(dest: &Path, marker: &str) -> Vec<u8> {
    let mut bytes = std::fs::read("/usr/bin/true").expect("/usr/bin/true is needed");
    bytes.extend_from_slice(format!("\n#{marker}\n").as_bytes());
    if let Some(dir) = dest.parent() {
        std::fs::create_dir_all(dir).unwrap();
    }
    std::fs::write(dest, &bytes).unwrap();
    std::fs::set_permissions(dest, std::fs::Permissions::from_mode(0o755)).unwrap();
    bytes
}

/// The exec found by its unique argument must name `path`, have `image`,
/// and hash to the bytes that ran. Returns the exec record if there is one.
fn check_exec<'a>(
    r: &'a Record,
    f: &mut Failures,
    arg: &str,
    path: &str,
    image: &str,
    bytes: &[u8],
) -> Option<&'a Value> {
    check_exec_except(r, f, arg, None, path, image, bytes)
}

/// As `check_exec`, not counting execs of `launcher` (see
/// `Record::exec_with_arg_except`).
fn check_exec_except<'a>(
    r: &'a Record,
    f: &mut Failures,
    arg: &str,
    launcher: Option<&str>,
    path: &str,
    image: &str,
    bytes: &[u8],
) -> Option<&'a Value> {
    let Some(e) = r.exec_with_arg_except(arg, launcher) else {
        f.add(format!(
            "[{arg}] no exec record (expected path {path}); execs:\n    {}",
            r.all_execs()
        ));
        return None;
    };
    let sha = sha256_hex(bytes);
    f.check(
        e["path"] == path && e["image"] == image && e["sha256"] == sha,
        || {
            format!(
                "[{arg}] exec record should have path {path:?}, image {image:?}, sha256 {sha}; it is\n    {}",
                brief(e)
            )
        },
    );
    Some(e)
}

/// An exec of an image with no path on disk has an "image" file event
/// carrying its bytes, and restore writes them to
/// .airlock-exec-images/exec<N>.
fn check_image_event(r: &Record, f: &mut Failures, arg: &str, exec: &Value, bytes: &[u8]) {
    let sha = sha256_hex(bytes);
    let image = r
        .files()
        .find(|e| e["op"] == "image" && e["exec_id"] == exec["exec_id"]);
    match image {
        Some(e) => f.check(
            e["path"] == exec["path"] && e["sha256"] == sha && e["size"] == bytes.len(),
            || {
                format!(
                    "[{arg}] image event should have path {}, sha256 {sha}, size {}; it is\n    {}",
                    exec["path"],
                    bytes.len(),
                    brief(e)
                )
            },
        ),
        None => f.add(format!(
            "[{arg}] no \"image\" file event for exec {}",
            brief(exec)
        )),
    }
    let id = exec["exec_id"].as_str().unwrap_or("?");
    let restored = r
        .restore()
        .join(".airlock-exec-images")
        .join(format!("exec{id}"));
    match std::fs::read(&restored) {
        Ok(got) => f.check(got == bytes, || {
            format!(
                "[{arg}] restored image {} has sha256 {}, the image that ran {sha}",
                restored.display(),
                sha256_hex(&got)
            )
        }),
        Err(e) => f.add(format!(
            "[{arg}] restore did not write the image {}: {e}",
            restored.display()
        )),
    }
}

/// The last record for `rel` must be a write of `content`, under exactly
/// that (real) path.
fn check_written(r: &Record, f: &mut Failures, rel: &str, content: &str) {
    let path = r.ws_path(rel);
    let sha = sha256_hex(content.as_bytes());
    let on_disk = std::fs::read(&path).ok();
    f.check(on_disk.as_deref() == Some(content.as_bytes()), || {
        format!("[{rel}] the script did not write {content:?} there: {on_disk:?}")
    });
    let got = r.replay().get(&path).cloned();
    f.check(got == Some(Some(sha.clone())), || {
        format!(
            "[{rel}] the record should end with sha256 {sha} for {path}, it has {got:?}\n{}",
            r.about(&path)
        )
    });
}

/// Class 1: paths resolved by the wrong rules. Writes and execs through a
/// symlink followed by `..`, through /proc/self/cwd, /dev/fd/N and
/// /proc/self/fd/N (N a directory descriptor), and relative to a directory
/// descriptor (openat). The kernel resolves `link/..` to the parent of the
/// link's target, not to the directory holding the link; the record must
/// name the file the kernel wrote and the program it ran.
///
/// Under gVisor the writes are checked the same way; an exec's record
/// there has the path and argv gVisor's trace point gives, no hash of the
/// image (docs/isolation.md), so each exec is checked by its argument only.
// The session's time goes into the test's log (not a #[test] fn itself).
#[allow(clippy::print_stderr)]
fn writes_and_execs_through_links_are_recorded_under_the_real_path_under(isolation: Isolation) {
    let sb = Sandbox::new(AIRLOCK);
    std::fs::create_dir_all(sb.ws.join("a/b/c")).unwrap();
    std::os::unix::fs::symlink("a/b/c", sb.ws.join("link")).unwrap();
    let progs = [
        ("v-exec-symlink-dotdot", "prog_sym"),
        ("v-exec-proc-cwd", "prog_cwd"),
        ("v-exec-dev-fd", "prog_fd"),
        ("v-exec-new-link-dotdot", "prog_inner"),
    ];
    let bytes: Vec<Vec<u8>> = progs
        .iter()
        .map(|(arg, name)| marked_true(&sb.ws.join("a/b/c").join(name), arg))
        .collect();
    let script = r#"
set -e
# link -> a/b/c, so link/../.. is a, not the workspace's parent.
echo via-symlink > link/../../viasym.txt
(cd a/b && echo via-cwd > /proc/self/cwd/viacwd.txt)
exec 7<a/b/c
echo via-devfd > /dev/fd/7/viafd.txt
echo via-procfd > /proc/self/fd/7/../viaprocfd.txt
ln -s a/b/c inner
echo via-new-link > inner/../../innerdot.txt
python3 -c '
import os
d = os.open("a/b/c", os.O_RDONLY | os.O_DIRECTORY)
fd = os.open("../../pyat.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644, dir_fd=d)
os.write(fd, b"via-dirfd\n")
'
python3 -c 'open("/proc/self/cwd/link/../pycwd.txt", "w").write("py-cwd-link\n")'
link/../../b/c/prog_sym v-exec-symlink-dotdot
(cd a/b/c && /proc/self/cwd/prog_cwd v-exec-proc-cwd)
/dev/fd/7/prog_fd v-exec-dev-fd
inner/../c/prog_inner v-exec-new-link-dotdot
exec 7<&-
rm inner
"#;
    let r = sb.run(&isolation.args(), script, Duration::from_secs(60));
    r.assert_ok();
    let mut f = Failures::default();
    for (rel, content) in [
        ("a/viasym.txt", "via-symlink\n"),
        ("a/b/viacwd.txt", "via-cwd\n"),
        ("a/b/c/viafd.txt", "via-devfd\n"),
        ("a/b/viaprocfd.txt", "via-procfd\n"),
        ("a/innerdot.txt", "via-new-link\n"),
        ("a/pyat.txt", "via-dirfd\n"),
        ("a/b/pycwd.txt", "py-cwd-link\n"),
    ] {
        check_written(&r, &mut f, rel, content);
    }
    for ((arg, name), bytes) in progs.iter().zip(&bytes) {
        let path = r.ws_path(&format!("a/b/c/{name}"));
        match isolation {
            Isolation::Namespaces => {
                check_exec(&r, &mut f, arg, &path, "file", bytes);
            }
            Isolation::Gvisor => f.check(r.exec_with_arg(arg).is_some(), || {
                format!("[{arg}] no exec record; execs:\n    {}", r.all_execs())
            }),
        }
    }
    r.check_paths_are_real(&mut f);
    r.check_end_state(&mut f, None);
    f.finish("writes and execs through links");
    eprintln!("session took {:?}", r.elapsed);
}

per_isolation!(sync writes_and_execs_through_links_are_recorded_under_the_real_path_under => writes_and_execs_through_links_are_recorded_under_the_real_path, under_gvisor_writes_through_links_are_recorded_under_the_real_path);

const FEXECVE_C: &str = r#"
/* fexecve IMAGE NAME MODE ARGV...: copy IMAGE into a memfd named NAME and
 * fexecve(3) it. MODE "keep" leaves the memfd inheritable, "cloexec" sets
 * MFD_CLOEXEC, "cloexec-expect-fail" also sets it and exits 0 when the exec
 * fails (a #! script in a close-on-exec memfd cannot run: execve(2)). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
extern char **environ;
int main(int argc, char **argv) {
    if (argc < 5) return 2;
    int in = open(argv[1], O_RDONLY);
    if (in < 0) { perror(argv[1]); return 3; }
    int cloexec = strncmp(argv[3], "cloexec", 7) == 0;
    int fd = memfd_create(argv[2], cloexec ? MFD_CLOEXEC : 0);
    if (fd < 0) { perror("memfd_create"); return 4; }
    char buf[65536];
    ssize_t n;
    while ((n = read(in, buf, sizeof buf)) > 0)
        if (write(fd, buf, n) != n) return 5;
    close(in);
    fexecve(fd, argv + 4, environ);
    perror("fexecve");
    return strcmp(argv[3], "cloexec-expect-fail") == 0 ? 0 : 6;
}
"#;

/// Class 2: fileless and magic-link execs. A memfd image (python's
/// os.memfd_create + execv of /proc/self/fd/N, and C fexecve), a deleted
/// file run through its descriptor, an ordinary file through
/// /proc/self/fd/N and /proc/self/cwd, and a #! script from a memfd. The
/// record names what the kernel ran (readlink of /proc/PID/exe), hashes
/// the bytes that ran, and keeps the bytes of images that have no path so
/// restore brings them back; an exec that failed is not on record.
#[test]
fn fileless_and_magic_link_execs_record_the_image_that_ran() {
    fileless_and_magic_link_execs_under(Isolation::Namespaces)
}

/// Under gVisor the same execs are on record by the path gVisor's
/// execve point names, which is the one the namespace sandbox records
/// (`/memfd:NAME (deleted)`, `PATH (deleted)`, the real path behind
/// `/proc/self/fd/N` and `/proc/self/cwd`), but without the image: no
/// hash, no image kind, no copy of a fileless image's bytes, so restore
/// cannot bring a memfd payload back (the documented difference,
/// docs/isolation.md: the trace point carries no image, and the image is
/// gVisor's, not a host file airlock could read). A `#!` script in a
/// memfd does not run under gVisor's kernel: it hands the interpreter the
/// memfd's name, which no path opens, and the exec on record is that
/// name's. A failed exec is not on record under either.
#[test]
fn under_gvisor_fileless_and_magic_link_execs_are_on_record_by_path_without_their_image() {
    fileless_and_magic_link_execs_under(Isolation::Gvisor)
}

fn check_fileless_under_gvisor(r: &Record, f: &mut Failures, launcher: Option<&str>) {
    let doomed = format!("{} (deleted)", r.ws_path("doomed"));
    let (p_fd, p_cwd) = (r.ws_path("p_fd"), r.ws_path("sub/p_cwd"));
    for (arg, path) in [
        ("v-memfd-py", "/memfd:payload (deleted)"),
        ("v-memfd-c", "/memfd:cpayload (deleted)"),
        ("v-deleted", doomed.as_str()),
        ("v-procfd", p_fd.as_str()),
        ("v-proccwd", p_cwd.as_str()),
        ("v-memfd-script", "/memfd:scriptfd (deleted)"),
    ] {
        let Some(e) = r.exec_with_arg_except(arg, launcher) else {
            f.add(format!(
                "[{arg}] no exec record; execs:\n    {}",
                r.all_execs()
            ));
            continue;
        };
        f.check(
            e["path"] == path && e["sha256"].is_null() && e["image"].is_null(),
            || {
                format!(
                    "[{arg}] should have path {path:?} and no image: {}",
                    brief(e)
                )
            },
        );
        let image = r
            .files()
            .find(|i| i["op"] == "image" && i["exec_id"] == e["exec_id"]);
        f.check(image.is_none(), || {
            format!("[{arg}] an image event under gVisor: {image:?}")
        });
    }
    f.check(
        r.stderr.contains("cannot open /memfd:scriptfd (deleted)")
            && !r.ws.join("memscript.out").exists(),
        || format!("the memfd #! script ran under gVisor: {}", r.stderr),
    );
    let failed = r.exec_with_arg_except("v-failed-exec", launcher);
    f.check(failed.is_none(), || {
        format!("[v-failed-exec] a failed fexecve is on record as run: {failed:?}")
    });
    f.check(!r.restore().join(".airlock-exec-images").exists(), || {
        "restore wrote exec images under gVisor".into()
    });
}

// The session's time goes into the test's log (not a #[test] fn itself).
#[allow(clippy::print_stderr)]
fn fileless_and_magic_link_execs_under(isolation: Isolation) {
    let sb = Sandbox::new(AIRLOCK);
    let fexecve = sb.gcc("fexecve", FEXECVE_C, &[]);
    let mem_py = marked_true(&sb.tools.join("mem_py"), "v-memfd-py");
    let mem_c = marked_true(&sb.tools.join("mem_c"), "v-memfd-c");
    let doomed = marked_true(&sb.ws.join("doomed"), "v-deleted");
    let p_fd = marked_true(&sb.ws.join("p_fd"), "v-procfd");
    let p_cwd = marked_true(&sb.ws.join("sub/p_cwd"), "v-proccwd");
    let script_text = "#!/bin/sh\necho \"script ran $1\" > memscript.out\n";
    sb.tool("memscript", script_text);
    let script = format!(
        r#"
set -e
python3 -c '
import os, sys
data = open(sys.argv[1], "rb").read()
fd = os.memfd_create("payload", 0)
v = memoryview(data)
while v:
    v = v[os.write(fd, v):]
os.execv("/proc/self/fd/%d" % fd, ["payload", "v-memfd-py"])
' "$T/mem_py"
{fexecve} "$T/mem_c" cpayload cloexec cpayload v-memfd-c
python3 -c '
import os
fd = os.open("doomed", os.O_RDONLY)
os.set_inheritable(fd, True)
os.unlink("doomed")
os.execv("/proc/self/fd/%d" % fd, ["doomed", "v-deleted"])
'
exec 9<p_fd
/proc/self/fd/9 v-procfd
exec 9<&-
(cd sub && /proc/self/cwd/p_cwd v-proccwd)
{fexecve} "$T/memscript" scriptfd keep memscript v-memfd-script{may_fail}
{fexecve} "$T/memscript" failing cloexec-expect-fail memscript v-failed-exec
"#,
        fexecve = fexecve.display(),
        may_fail = match isolation {
            Isolation::Namespaces => "",
            Isolation::Gvisor => " || true",
        },
    );
    let r = sb.run(&isolation.args(), &script, Duration::from_secs(60));
    r.assert_ok();
    let mut f = Failures::default();
    let launcher = fexecve.to_str();
    if isolation == Isolation::Gvisor {
        check_fileless_under_gvisor(&r, &mut f, launcher);
        f.finish("fileless and magic-link execs under gVisor");
        return;
    }
    let fileless = [
        (
            "v-memfd-py",
            "/memfd:payload (deleted)".to_owned(),
            "memfd",
            &mem_py,
        ),
        (
            "v-memfd-c",
            "/memfd:cpayload (deleted)".to_owned(),
            "memfd",
            &mem_c,
        ),
        (
            "v-deleted",
            format!("{} (deleted)", r.ws_path("doomed")),
            "deleted",
            &doomed,
        ),
    ];
    for (arg, path, image, bytes) in fileless {
        if let Some(exec) = check_exec_except(&r, &mut f, arg, launcher, &path, image, bytes) {
            check_image_event(&r, &mut f, arg, exec, bytes);
        }
    }
    for (arg, rel, bytes) in [
        ("v-procfd", "p_fd", &p_fd),
        ("v-proccwd", "sub/p_cwd", &p_cwd),
    ] {
        if let Some(exec) = check_exec(&r, &mut f, arg, &r.ws_path(rel), "file", bytes) {
            // An image with a path on disk needs no copy of its bytes.
            let image = r
                .files()
                .find(|e| e["op"] == "image" && e["exec_id"] == exec["exec_id"]);
            f.check(image.is_none(), || {
                format!("[{arg}] an image event for a file image: {image:?}")
            });
        }
    }
    // The #! script from a memfd: the kernel ran /bin/sh on /dev/fd/N; the
    // record says which script bytes the interpreter was given.
    let sh = std::fs::read(std::fs::canonicalize("/bin/sh").unwrap()).unwrap();
    let sh_path = std::fs::canonicalize("/bin/sh").unwrap();
    if let Some(exec) = check_exec_except(
        &r,
        &mut f,
        "v-memfd-script",
        launcher,
        sh_path.to_str().unwrap(),
        "file",
        &sh,
    ) {
        let want = sha256_hex(script_text.as_bytes());
        f.check(exec["script"]["sha256"] == want, || {
            format!(
                "[v-memfd-script] script.sha256 should be {want}: {}",
                brief(exec)
            )
        });
    }
    // The launcher's own exec names the argument too; any other is the
    // failed exec recorded as run.
    let failed = r.exec_with_arg_except("v-failed-exec", launcher);
    f.check(failed.is_none(), || {
        format!(
            "[v-failed-exec] a failed fexecve is on record as run: {}",
            brief(failed.unwrap())
        )
    });
    r.check_end_state(&mut f, None);
    f.finish("fileless and magic-link execs");
    eprintln!("session took {:?}", r.elapsed);
}

const MARKER_C: &str = r#"
/* marker OUT: write MARK (a compile-time constant, so each build has its own
 * sha256) to OUT: the program that really ran leaves its name behind. */
#include <stdio.h>
int main(int argc, char **argv) {
    if (argc < 2) return 2;
    FILE *f = fopen(argv[1], "w");
    if (!f) return 3;
    fputs(MARK, f);
    return fclose(f) ? 4 : 0;
}
"#;

const RACE_C: &str = r#"
/* race MODE A B DIR N: N times, fork a child in which a sibling thread flips
 * one byte of a path buffer between A and B (same length, one byte apart,
 * so every read of it is one of the two) while the child's main thread
 * passes that buffer to the kernel:
 *   exec: execv(buf, {"racer-child", "DIR/i"}): A and B are marker programs;
 *   open: open(buf, O_CREAT) of DIR/i/A or DIR/i/B and write "iteration i".
 * Whatever the observer reads from the buffer, before or after the kernel
 * does, may differ from what the kernel used. Exits non-zero if any child
 * failed. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char buf[4096];
static size_t at;
static char ca, cb;
static volatile int started;

static void *flip(void *unused) {
    (void)unused;
    volatile char *p = buf + at;
    started = 1;
    for (;;) {
        *p = ca;
        *p = cb;
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 6) return 2;
    const char *mode = argv[1], *a = argv[2], *b = argv[3], *dir = argv[4];
    int n = atoi(argv[5]), bad = 0;
    if (strlen(a) != strlen(b)) return 2;
    for (size_t i = 0; a[i]; i++)
        if (a[i] != b[i]) { at = i; ca = a[i]; cb = b[i]; }
    mkdir(dir, 0755);
    for (int i = 0; i < n; i++) {
        char out[256], sub[256];
        snprintf(out, sizeof out, "%s/%d", dir, i);
        snprintf(sub, sizeof sub, "%s/%d/", dir, i);
        int exec = strcmp(mode, "exec") == 0;
        if (exec) {
            snprintf(buf, sizeof buf, "%s", a);
        } else {
            mkdir(out, 0755);
            snprintf(buf, sizeof buf, "%s%s", sub, a);
        }
        size_t base = exec ? 0 : strlen(sub);
        pid_t pid = fork();
        if (pid < 0) { perror("fork"); return 1; }
        if (pid == 0) {
            at += base;
            pthread_t t;
            if (pthread_create(&t, NULL, flip, NULL)) _exit(10);
            while (!started) {}
            if (exec) {
                char *av[] = {"racer-child", out, NULL};
                execv(buf, av);
                _exit(127);
            }
            int fd = open(buf, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (fd < 0) _exit(11);
            dprintf(fd, "iteration %d\n", i);
            close(fd);
            _exit(0);
        }
        int status;
        if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status)) {
            fprintf(stderr, "iteration %d: status %d\n", i, status);
            bad++;
        }
    }
    return bad ? 1 : 0;
}
"#;

/// Class 3: time of check against time of use. A sibling thread flips the
/// path buffer while execve or open runs, 200 times each in one session.
/// For every exec the recorded path and sha256 are those of the program
/// that actually ran (it wrote its own marker); for every open the file
/// that was created is on record, and the name that was not created is not.
#[test]
fn racing_threads_cannot_swap_the_recorded_path() {
    const N: usize = 200;
    let sb = Sandbox::new(AIRLOCK);
    sb.gcc("race", RACE_C, &[]);
    let mark_a = sb.gcc("markA", MARKER_C, &["-DMARK=\"A\""]);
    let mark_b = sb.gcc("markB", MARKER_C, &["-DMARK=\"B\""]);
    let (bytes_a, bytes_b) = (
        std::fs::read(&mark_a).unwrap(),
        std::fs::read(&mark_b).unwrap(),
    );
    assert_ne!(sha256_hex(&bytes_a), sha256_hex(&bytes_b));
    let script = format!(
        r#"
set -e
"$T/race" exec "$T/markA" "$T/markB" ran {N}
"$T/race" open fileA fileB opened {N}
"#
    );
    let r = sb.run(&[], &script, Duration::from_secs(90));
    r.assert_ok();
    let mut f = Failures::default();
    let (mut ran_a, mut ran_b, mut wrong_program, mut ghosts) = (0, 0, 0, 0);
    for i in 0..N {
        let arg = format!("ran/{i}");
        let marker = std::fs::read_to_string(sb.ws.join(&arg)).unwrap_or_default();
        let (path, bytes) = match marker.as_str() {
            "A" => (&mark_a, &bytes_a),
            "B" => (&mark_b, &bytes_b),
            other => panic!("iteration {i} left marker {other:?}"),
        };
        if marker == "A" {
            ran_a += 1
        } else {
            ran_b += 1
        }
        let count = r
            .execs()
            .filter(|e| {
                e["argv"]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|v| *v == *arg))
            })
            .count();
        f.check(count == 1, || format!("[{arg}] {count} exec records"));
        let recorded = r.exec_with_arg(&arg).map(|e| e["path"].clone());
        if recorded.is_some_and(|p| p != path.to_str().unwrap()) {
            wrong_program += 1;
        }
        check_exec(&r, &mut f, &arg, path.to_str().unwrap(), "file", bytes);
    }
    let (mut opened_a, mut opened_b) = (0, 0);
    let replay = r.replay();
    for i in 0..N {
        let a = r.ws_path(&format!("opened/{i}/fileA"));
        let b = r.ws_path(&format!("opened/{i}/fileB"));
        let (made, not_made) = match (Path::new(&a).exists(), Path::new(&b).exists()) {
            (true, false) => (a, b),
            (false, true) => (b, a),
            other => panic!("iteration {i}: fileA, fileB exist: {other:?}"),
        };
        if made.ends_with('A') {
            opened_a += 1
        } else {
            opened_b += 1
        }
        let want = sha256_hex(format!("iteration {i}\n").as_bytes());
        f.check(replay.get(&made) == Some(&Some(want.clone())), || {
            format!("[{made}] created with sha256 {want}\n{}", r.about(&made))
        });
        let ghost = r.files().any(|e| e["path"] == not_made.as_str());
        ghosts += usize::from(ghost);
        f.check(!ghost, || {
            format!(
                "[{not_made}] never existed but is on record\n{}",
                r.about(&not_made)
            )
        });
    }
    r.check_end_state(&mut f, None);
    eprintln!(
        "exec race: A ran {ran_a}, B ran {ran_b}, {wrong_program} recorded as the other program; \
         open race: A {opened_a}, B {opened_b}, {ghosts} files on record that never existed; \
         session took {:?}",
        r.elapsed
    );
    f.finish("racing path buffers");
}

/// Class 4: content captured at the wrong moment. The record must hold the
/// content a file has once its last writer is done, however the writes
/// reached it:
/// - a descriptor inherited by a background child that writes 37 MB after
///   the opener exited;
/// - a descriptor passed over a unix socket (SCM_RIGHTS) to a process that
///   writes after the opener exited;
/// - a file renamed after open and then written, and a file whose
///   directory is renamed while it is open;
/// - writes through a hard link made in the session and one made before;
/// - a MAP_SHARED mapping written after its descriptor was closed.
#[test]
fn content_is_captured_after_the_last_writer_is_done() {
    let sb = Sandbox::new(AIRLOCK);
    std::fs::write(sb.ws.join("pre1"), "made before the session\n").unwrap();
    std::fs::hard_link(sb.ws.join("pre1"), sb.ws.join("pre2")).unwrap();
    let script = r#"
set -e
# The opener exits at once; its background child keeps fd 3 and writes.
sh -c 'exec 3>big.bin; echo opener >&3
  (sleep 0.5; head -c 37000000 /dev/urandom >&3; echo tail >&3; : > big.done) &
  exit 0'
# A descriptor passed on over a socket, written after its opener exited.
python3 -c '
import os, socket, time
a, b = socket.socketpair()
if os.fork() == 0:
    a.close()
    _, fds, _, _ = socket.recv_fds(b, 16, 1)
    time.sleep(0.5)
    for i in range(3000):
        os.write(fds[0], b"passed-on line %d\n" % i)
    os.close(fds[0])
    open("passed.done", "w").close()
    os._exit(0)
b.close()
fd = os.open("passed.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, b"from the opener\n")
socket.send_fds(a, [b"x"], [fd])
os._exit(0)
'
# Renamed after open, then written.
exec 4>orig.txt; echo one >&4; mv orig.txt moved.txt; echo two >&4; exec 4>&-
# The directory renamed while a file in it is open.
mkdir dd; exec 5>dd/in.txt; echo a >&5; mv dd dd2; echo b >&5; exec 5>&-
# Hard links: made here, and made before the session.
echo base > h1; ln h1 h2; echo via-h2 >> h2; echo via-h1 >> h1
echo via-pre2 >> pre2
# A shared mapping written after its descriptor is closed.
python3 -c '
import mmap
with open("mm.bin", "wb") as f:
    f.write(b"." * 8192)
f = open("mm.bin", "r+b")
m = mmap.mmap(f.fileno(), 8192)
f.close()
m[100:119] = b"written-after-close"
m.flush()
m.close()
'
while [ ! -e big.done ] || [ ! -e passed.done ]; do sleep 0.1; done
"#;
    let r = sb.run(
        &["--audit-max-file", "64M"],
        script,
        Duration::from_secs(120),
    );
    r.assert_ok();
    let mut f = Failures::default();
    let size = std::fs::metadata(sb.ws.join("big.bin")).unwrap().len();
    f.check(size == 37_000_000 + 12, || {
        format!("big.bin is {size} bytes on disk")
    });
    // Exact final records of the names a responder looks at (the end-state
    // check below covers every file; these say which variant broke).
    for rel in [
        "big.bin",
        "passed.txt",
        "moved.txt",
        "dd2/in.txt",
        "h1",
        "h2",
        "pre1",
        "pre2",
        "mm.bin",
    ] {
        let path = r.ws_path(rel);
        let want = sha256_hex(&std::fs::read(&path).unwrap());
        let got = r.replay().get(&path).cloned();
        f.check(got == Some(Some(want.clone())), || {
            format!(
                "[{rel}] on disk sha256 {want}, the record ends with {got:?}\n{}",
                r.about(&path)
            )
        });
    }
    for gone in ["orig.txt", "dd/in.txt"] {
        let path = r.ws_path(gone);
        f.check(!r.replay().contains_key(&path), || {
            format!(
                "[{gone}] renamed away, but the record still has it\n{}",
                r.about(&path)
            )
        });
    }
    r.check_end_state(&mut f, None);
    f.finish("content captured at the wrong moment");
    eprintln!("session took {:?}", r.elapsed);
}

/// Class 5: failed syscalls. Renames, unlinks, rmdirs, links, mkdirs,
/// exclusive creates, truncates and chmods that the kernel refused (each
/// checked for its exact errno inside the sandbox, by python and by the
/// coreutils a user would type) are not on record as done, and restore
/// still gives every file they left untouched.
// The session's time goes into the test's log (not a #[test] fn itself).
#[allow(clippy::print_stderr)]
fn failed_operations_are_not_recorded_as_done_under(isolation: Isolation) {
    let sb = Sandbox::new(AIRLOCK);
    let script = r#"
set -e
echo keep > keep.txt; echo other > other.txt
mkdir dir full; echo inner > dir/inner.txt; echo x > full/x
python3 -c '
import ctypes, errno, os
def expect(err, f, *a):
    try:
        f(*a)
    except OSError as e:
        if e.errno != err:
            raise SystemExit(f"{f.__name__}{a}: {e}, expected {errno.errorcode[err]}")
        return
    raise SystemExit(f"{f.__name__}{a} succeeded")
libc = ctypes.CDLL(None, use_errno=True)
def renameat2(a, b, flags):
    if libc.renameat2(-100, a.encode(), -100, b.encode(), flags):
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
expect(errno.ENOENT, os.rename, "missing", "keep.txt")
expect(errno.ENOENT, os.rename, "keep.txt", "nodir/keep.txt")
expect(errno.ENOTDIR, os.rename, "dir", "keep.txt")
expect(errno.EISDIR, os.rename, "keep.txt", "full")
# RENAME_NOREPLACE; the gVisor kernel does not implement the flag (EINVAL).
noreplace = errno.EINVAL if os.environ["ISOLATION"] == "gvisor" else errno.EEXIST
expect(noreplace, renameat2, "keep.txt", "other.txt", 1)
expect(errno.EISDIR, os.unlink, "dir")
expect(errno.ENOENT, os.unlink, "ghost")
expect(errno.ENOTEMPTY, os.rmdir, "full")
expect(errno.EEXIST, os.link, "keep.txt", "other.txt")
expect(errno.EEXIST, os.mkdir, "keep.txt")
expect(errno.EEXIST, os.open, "keep.txt", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_TRUNC)
expect(errno.EISDIR, os.open, "dir", os.O_WRONLY | os.O_TRUNC)
expect(errno.ENOENT, os.truncate, "ghost-truncate", 0)
expect(errno.ENOENT, os.chmod, "ghost-chmod", 0o600)
'
# The same through the tools a user types.
! mv missing-mv keep.txt 2>/dev/null
! mv keep.txt nodir-mv/ 2>/dev/null
! rm dir 2>/dev/null
! rmdir full 2>/dev/null
! ln keep.txt other.txt 2>/dev/null
! mkdir keep.txt 2>/dev/null
[ "$(cat keep.txt)" = keep ] && [ "$(cat other.txt)" = other ] && [ -f dir/inner.txt ] && [ -f full/x ]
"#;
    let env = format!("ISOLATION={}", isolation.name());
    let args = [&isolation.args()[..], &["--env", &env]].concat();
    let r = sb.run(&args, script, Duration::from_secs(60));
    r.assert_ok();
    let mut f = Failures::default();
    // The exact record: one create per name the script made, with its
    // content; nothing else (no rename, delete, chmod, truncate, or
    // "modify" from an open that failed).
    let made = [
        ("keep.txt", Some("keep\n")),
        ("other.txt", Some("other\n")),
        ("dir/", None),
        ("full/", None),
        ("dir/inner.txt", Some("inner\n")),
        ("full/x", Some("x\n")),
    ];
    for (rel, content) in made {
        let path = r.ws_path(rel);
        let records: Vec<&Value> = r.files().filter(|e| e["path"] == path).collect();
        let want = content.map(|c| sha256_hex(c.as_bytes()));
        // A directory may go unrecorded (it has no content to restore); a
        // file may not.
        let exact = match records.as_slice() {
            [] => content.is_none(),
            [one] => one["op"] == "create" && one["sha256"].as_str() == want.as_deref(),
            // Under gVisor a look can fall between `>`'s create and its
            // write: the file is then on record as made empty, then
            // written, which is what happened (not a failed operation).
            [create, writes @ ..] if isolation == Isolation::Gvisor => {
                create["op"] == "create"
                    && writes.iter().all(|w| w["op"] == "modify")
                    && writes.last().and_then(|w| w["sha256"].as_str()) == want.as_deref()
            }
            _ => false,
        };
        f.check(exact, || {
            format!(
                "[{rel}] should have exactly one record (at most one for a directory), a create with sha256 {want:?}\n{}",
                r.about(&path)
            )
        });
    }
    for e in r.files() {
        let known = made.iter().any(|(rel, _)| e["path"] == r.ws_path(rel));
        f.check(known, || {
            format!("a failed operation is on record: {}", brief(e))
        });
    }
    r.check_end_state(&mut f, None);
    f.finish("failed operations");
    eprintln!("session took {:?}", r.elapsed);
}

per_isolation!(sync failed_operations_are_not_recorded_as_done_under => failed_operations_are_not_recorded_as_done, under_gvisor_failed_operations_are_not_recorded_as_done);
