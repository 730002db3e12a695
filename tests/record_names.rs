//! Issue 29, item 3: names that are not UTF-8. A path, argument or
//! environment entry is any bytes but NUL, and the sandboxed program chooses
//! them. A lossy conversion made `run\xff.sh` (a payload) and
//! `run\u{FFFD}.sh` (innocent) one recorded path, restore wrote the payload
//! under the innocent name, and an exec of a program whose name was not
//! UTF-8 was missing from the record altogether (its /proc status did not
//! read as text). Here every kind of name is tried in the real
//! `airlock run`, and each output is checked: the JSONL export keeps the
//! bytes, the timeline, `audit files` and search print each name in one
//! escaped form that no other name prints as, restore writes the exact
//! bytes, and verify says intact.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::process::Command;
use std::time::Duration;

use airlock_test_support::audit_cli::{audit_cli, audit_ok};
use airlock_test_support::isolation::Isolation;
use airlock_test_support::per_isolation;
use airlock_test_support::record::{Record, Sandbox, brief};
use serde_json::{Value, json};

const AIRLOCK: &str = airlock_test_support::airlock_bin!();

/// The session's names, made with printf's octal escapes (dash's printf
/// has no \x): invalid bytes in a file name, in a directory component, in
/// a symlink's target, in an executed program's name, its argument, its
/// working directory and its environment (a name and a value).
const SCRIPT: &str = r#"
set -e
payload=$(printf 'run\377.sh'); innocent=$(printf 'run\357\277\275.sh')
printf payload > "$payload"
printf innocent > "$innocent"
printf literal > 'run\xff.sh'
dir=$(printf 'd\376'); mkdir "$dir"; printf inner > "$dir/f"
ln -s "$(printf 'tar\375get')" link
prog=$(printf 'ev\377il'); cp /bin/echo "$prog"
cd "$dir"
env "$(printf 'K\373')=plain" "V=$(printf 'v\372')" "../$prog" "$(printf 'arg\374')" > /dev/null
"#;

fn run(isolation: Isolation) -> (Sandbox, Record) {
    let sb = Sandbox::new(AIRLOCK);
    let r = sb.run(&isolation.args(), SCRIPT, Duration::from_secs(30));
    r.assert_ok();
    (sb, r)
}

fn ws_bytes(r: &Record, rel: &[u8]) -> Vec<u8> {
    [r.ws.as_os_str().as_bytes(), b"/", rel].concat()
}

/// How the JSONL export holds a name: the string itself when UTF-8, else
/// `{"escaped": ...}`.
fn stored(name: &[u8]) -> Value {
    match std::str::from_utf8(name) {
        Ok(text) => json!(text),
        Err(_) => json!({ "escaped": printed(name) }),
    }
}

/// The one printed form: UTF-8 as is, other bytes as \xHH, `\` as `\\`.
fn printed(name: &[u8]) -> String {
    let mut out = String::new();
    for chunk in name.utf8_chunks() {
        out.push_str(&chunk.valid().replace('\\', "\\\\"));
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

fn file_event<'r>(r: &'r Record, path: &[u8]) -> Option<&'r Value> {
    let want = stored(path);
    r.files().find(|e| e["path"] == want && e["op"] == "create")
}

fn verify(sb: &Sandbox, r: &Record) -> String {
    let key = sb.dir.path().join("audit/audit.key");
    let out = audit_cli(
        AIRLOCK,
        &sb.dir.path().join("audit/audit.db"),
        &["verify", &r.id, "--audit-key", key.to_str().unwrap()],
    );
    assert!(out.status.success(), "audit verify: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn file_names_that_differ_only_in_bytes_that_are_not_utf8_stay_apart_everywhere_under(
    isolation: Isolation,
) {
    let (sb, r) = run(isolation);
    let db = sb.dir.path().join("audit/audit.db");
    let names: [(&[u8], &[u8]); 4] = [
        (b"run\xff.sh", b"payload"),
        ("run\u{fffd}.sh".as_bytes(), b"innocent"),
        (b"run\\xff.sh", b"literal"),
        (b"d\xfe/f", b"inner"),
    ];
    // The record: each name with its own content's hash.
    for (name, content) in names {
        let path = ws_bytes(&r, name);
        let e = file_event(&r, &path).unwrap_or_else(|| {
            panic!(
                "no create of {}:\n    {}",
                printed(&path),
                r.files().map(brief).collect::<Vec<_>>().join("\n    ")
            )
        });
        assert_eq!(
            e["sha256"],
            airlock_test_support::disk::sha256_hex(content),
            "{}",
            brief(e)
        );
    }
    assert!(
        r.files()
            .any(|e| e["path"] == stored(&ws_bytes(&r, b"d\xfe/"))),
        "the directory is on record under its own name"
    );

    // The timeline and `audit files` print each name once, in the escaped
    // form, and no two alike.
    let timeline = audit_ok(AIRLOCK, &db, &["timeline", &r.id]);
    let files = audit_ok(AIRLOCK, &db, &["files", &r.id]);
    for (name, _) in names {
        let shown = printed(&ws_bytes(&r, name));
        for (what, out) in [("timeline", &timeline), ("audit files", &files)] {
            let lines = out
                .lines()
                .filter(|l| l.split_whitespace().any(|w| w == shown))
                .count();
            assert_eq!(lines, 1, "{what} prints {shown} once:\n{out}");
        }
    }
    assert!(timeline.contains("run\\xff.sh") && timeline.contains("run\\\\xff.sh"));

    // Restore writes the exact bytes under the exact names, and nothing
    // under a name the session did not use.
    let restored = r.restored_ws();
    for (name, content) in names {
        let at = restored.join(OsStr::from_bytes(name));
        assert_eq!(
            std::fs::read(&at).unwrap_or_else(|e| panic!("{}: {e}", at.display())),
            content
        );
    }
    let link = std::fs::read(restored.join("link")).unwrap();
    assert_eq!(link, b"tar\xfdget", "the symlink's target, byte for byte");
    let mut listed: Vec<Vec<u8>> = std::fs::read_dir(&restored)
        .unwrap()
        .map(|e| e.unwrap().file_name().as_bytes().to_vec())
        .collect();
    listed.sort();
    let mut want: Vec<Vec<u8>> = [
        &b"d\xfe"[..],
        b"ev\xffil",
        b"link",
        b"run\\xff.sh",
        b"run\xff.sh",
        "run\u{fffd}.sh".as_bytes(),
    ]
    .map(<[u8]>::to_vec)
    .to_vec();
    want.sort();
    assert_eq!(listed, want, "restored names");

    // Search finds a name given as its bytes or as it prints.
    let raw = ws_bytes(&r, b"run\xff.sh");
    let out = Command::new(AIRLOCK)
        .args(["audit", "search", "--audit-db"])
        .arg(&db)
        .arg("--file")
        .arg(OsStr::from_bytes(&raw))
        .output()
        .unwrap();
    let found = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "search: {out:?}");
    assert!(found.contains(&printed(&raw)), "{found}");
    assert!(!found.contains('\u{fffd}'), "{found}");

    assert!(verify(&sb, &r).contains("intact"), "verify");
}

per_isolation!(sync file_names_that_differ_only_in_bytes_that_are_not_utf8_stay_apart_everywhere_under =>
    file_names_that_differ_only_in_bytes_that_are_not_utf8_stay_apart_everywhere,
    under_gvisor_file_names_that_differ_only_in_bytes_that_are_not_utf8_stay_apart_everywhere);

#[test]
fn an_exec_with_names_that_are_not_utf8_is_on_record_byte_for_byte() {
    let (sb, r) = run(Isolation::Namespaces);
    let prog = ws_bytes(&r, b"ev\xffil");
    // The exec of the copied echo (env's own argv names it too).
    let e = r
        .execs()
        .find(|e| e["argv"][0] == stored(b"../ev\xffil"))
        .unwrap_or_else(|| panic!("no exec of {}:\n    {}", printed(&prog), r.all_execs()));
    assert_eq!(e["path"], stored(&prog), "{}", brief(e));
    assert_eq!(e["argv"][1], stored(b"arg\xfc"), "{}", brief(e));
    assert_eq!(e["cwd"], stored(&ws_bytes(&r, b"d\xfe")), "{}", brief(e));
    let env_names = e["env_names"].as_array().unwrap();
    assert!(env_names.contains(&stored(b"K\xfb")), "{env_names:?}");
    assert_eq!(e["env_values_nonsecret"]["V"], stored(b"v\xfa"));
    // A name that is not text cannot be a JSON key: its value is left out.
    assert!(
        !e["env_values_nonsecret"]
            .as_object()
            .unwrap()
            .values()
            .any(|v| v == "plain"),
        "{}",
        e["env_values_nonsecret"]
    );

    let db = sb.dir.path().join("audit/audit.db");
    let timeline = audit_ok(AIRLOCK, &db, &["timeline", &r.id]);
    let line = timeline
        .lines()
        .find(|l| l.contains("exec") && l.contains(&printed(&prog)))
        .unwrap_or_else(|| panic!("no exec line:\n{timeline}"));
    assert!(line.contains(&printed(&prog)), "{line}");
    assert!(line.contains(&format!("cwd {}", printed(&ws_bytes(&r, b"d\xfe")))));
    assert!(verify(&sb, &r).contains("intact"), "verify");
}

/// Under gVisor the same session's execs whose strings are not UTF-8 are
/// the documented difference (docs/isolation.md): gVisor sends no execve
/// point for them (protobuf strings are UTF-8), so each is on record with
/// its path, argv, cwd and environment empty and a note saying why, never
/// under a lossy name that another program's could equal. Here that is
/// every exec after `sh`: mkdir, ln, cp, env and the copied echo (each has
/// an argument, a working directory or a `PWD` that is not UTF-8).
#[test]
fn under_gvisor_an_exec_with_names_that_are_not_utf8_is_on_record_with_its_strings_unknown() {
    let (sb, r) = run(Isolation::Gvisor);
    let execs: Vec<&Value> = r.execs().collect();
    let unknown: Vec<&&Value> = execs
        .iter()
        .filter(|e| e["argv"].as_array().is_some_and(Vec::is_empty))
        .collect();
    assert_eq!(unknown.len(), 5, "execs:\n    {}", r.all_execs());
    for e in &unknown {
        assert_eq!(
            (&e["path"], &e["cwd"]),
            (&json!(""), &json!("")),
            "{}",
            brief(e)
        );
        assert_eq!(e["env_names"], json!([]), "{}", brief(e));
    }
    let notes = r
        .events
        .iter()
        .filter(|e| {
            e["kind"] == "note"
                && e["text"]
                    .as_str()
                    .is_some_and(|t| t.starts_with("gVisor did not report"))
        })
        .count();
    assert_eq!(
        notes,
        unknown.len(),
        "a note for each exec gVisor did not report"
    );
    // The one exec gVisor did report, the shell, keeps its strings.
    assert_eq!(
        execs[0]["argv"],
        json!(["sh", "-c", SCRIPT]),
        "{}",
        brief(execs[0])
    );
    // No exec is on record under a lossy name (the session's one name
    // with a real U+FFFD is a file's, `run\u{fffd}.sh`, made by a builtin).
    for e in &execs {
        assert!(
            !e.to_string().contains('\u{fffd}'),
            "a lossy name: {}",
            brief(e)
        );
    }
    let db = sb.dir.path().join("audit/audit.db");
    let timeline = audit_ok(AIRLOCK, &db, &["timeline", &r.id]);
    for line in timeline.lines().filter(|l| l.contains(" exec ")) {
        assert!(!line.contains('\u{fffd}'), "{line}");
    }
    assert!(verify(&sb, &r).contains("intact"), "verify");
}

#[test]
fn airlock_own_command_line_may_hold_any_bytes() {
    let sb = Sandbox::new(AIRLOCK);
    let db = sb.dir.path().join("audit/audit.db");
    let out = Command::new(AIRLOCK)
        .current_dir(&sb.ws)
        .args(["run", "--no-tty", "--workspace"])
        .arg(&sb.ws)
        .arg("--audit-db")
        .arg(&db)
        .arg("--audit-key")
        .arg(sb.dir.path().join("audit/audit.key"))
        .args(["--", "printf", "%s"])
        .arg(OsStr::from_bytes(b"a\xffb"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(out.stdout, b"a\xffb");
    let sessions: Value =
        serde_json::from_str(&audit_ok(AIRLOCK, &db, &["sessions", "--json"])).unwrap();
    let command = &sessions[0]["command"];
    assert_eq!(
        command.as_array().and_then(|c| c.last()),
        Some(&json!({ "escaped": "a\\xffb" })),
        "{command}"
    );
}

/// OCI's config is JSON, so `--isolation gvisor` cannot pass runsc an
/// argument that is not UTF-8 (docs/isolation.md): it refuses in one line
/// naming the argument by its escaped bytes (never a lossy U+FFFD) and the
/// way out, and runs nothing.
#[test]
fn under_gvisor_a_command_line_that_is_not_utf8_is_refused_in_one_line_naming_its_bytes() {
    let sb = Sandbox::new(AIRLOCK);
    let odd = sb.dir.path().join(OsStr::from_bytes(b"ro\xfe"));
    std::fs::create_dir(&odd).unwrap();
    let shown_odd = format!("{}/ro\\xfe", sb.dir.path().display());
    // An argument, and a mount's path.
    let argument = [
        OsStr::new("--"),
        OsStr::new("touch"),
        OsStr::from_bytes(b"a\xffb"),
    ];
    let mount = [
        OsStr::new("--ro"),
        odd.as_os_str(),
        OsStr::new("--"),
        OsStr::new("true"),
    ];
    for (extra, refused) in [
        (&argument[..], "the command's argument 'a\\xffb'".to_owned()),
        (&mount[..], format!("a path '{shown_odd}'")),
    ] {
        let out = Command::new(AIRLOCK)
            .current_dir(&sb.ws)
            .args(["run", "--no-tty", "--isolation", "gvisor", "--workspace"])
            .arg(&sb.ws)
            .arg("--audit-db")
            .arg(sb.dir.path().join("audit/audit.db"))
            .arg("--audit-key")
            .arg(sb.dir.path().join("audit/audit.key"))
            .args(extra)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(125), "{out:?}");
        let stderr = String::from_utf8(out.stderr).expect("the refusal is UTF-8");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            stderr.starts_with(&format!("airlock: {refused} is not UTF-8"))
                && stderr.contains("use --isolation namespaces"),
            "{stderr}"
        );
    }
    assert_eq!(std::fs::read_dir(&sb.ws).unwrap().count(), 0, "nothing ran");
    // Refused before the session starts: no session on record as
    // unfinished for a command that never ran.
    let db = sb.dir.path().join("audit/audit.db");
    if db.exists() {
        let sessions = audit_ok(AIRLOCK, &db, &["sessions", "--json"]);
        assert_eq!(
            serde_json::from_str::<Value>(&sessions).unwrap(),
            json!([]),
            "{sessions}"
        );
    }
}

/// Under gVisor the files are listed the same; the programs whose names
/// are not UTF-8 are in the tree with their strings unknown (the documented
/// difference above), never under a lossy name.
async fn the_console_lists_each_file_and_program_under_its_own_printed_name_under(
    isolation: Isolation,
) {
    let (sb, r) = run(isolation);
    let dir = sb.dir.path().join("audit");
    let console = airlock_test_support::console::Console::start(
        AIRLOCK,
        &dir.join("audit.db"),
        &dir.join("audit.key"),
    )
    .await;
    let get = |what: &str| {
        let out = Command::new("curl")
            .args(["-sS", "--fail", "-H"])
            .arg(format!("Authorization: Bearer {}", console.token()))
            .arg(format!(
                "http://{}/api/sessions/{}/{what}",
                console.authority(),
                r.id
            ))
            .output()
            .expect("curl");
        assert!(out.status.success(), "GET {what}: {out:?}");
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let files = get("files");
    let listed: Vec<&str> = files["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["path"].as_str())
        .collect();
    for name in [
        &b"run\xff.sh"[..],
        "run\u{fffd}.sh".as_bytes(),
        b"run\\xff.sh",
    ] {
        let shown = printed(&ws_bytes(&r, name));
        assert_eq!(
            listed.iter().filter(|p| **p == shown).count(),
            1,
            "{shown} in {listed:?}"
        );
    }
    let tree = get("tree");
    let prog = printed(&ws_bytes(&r, b"ev\xffil"));
    let shown = tree.to_string();
    match isolation {
        Isolation::Namespaces => assert!(
            shown.contains(&serde_json::to_string(&prog).unwrap()),
            "{prog} in {tree}"
        ),
        Isolation::Gvisor => assert!(!shown.contains('\u{fffd}'), "a lossy name in {tree}"),
    }
}

per_isolation!(tokio the_console_lists_each_file_and_program_under_its_own_printed_name_under =>
    the_console_lists_each_file_and_program_under_its_own_printed_name,
    under_gvisor_the_console_lists_each_file_under_its_own_printed_name);
