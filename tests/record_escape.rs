//! The reader's terminal is an attack surface: a sandboxed program that puts
//! terminal control sequences, carriage returns, newlines or bidi overrides
//! in its argv, its working directory, the names of files it writes or
//! renames, or the URLs it requests must not be able to erase, rewrite,
//! reorder or forge what `airlock audit timeline`, `audit files` (listing
//! and restore) and `audit sessions` show the responder, nor airlock's own
//! refusal notices on the caller's terminal. Every such field is printed escaped
//! (`\x1b`, `\r`, `\u{202e}`, a backslash as `\\`), while `--json` keeps the
//! exact bytes as data.
//!
//! One real session runs every variant through every field: argv of an
//! exec'd program, the cwd of an exec, a file written in the workspace and
//! the name it is renamed to, and a request target sent with curl through
//! the proxy (refused by the default policy, which is enough to be recorded).

use std::path::PathBuf;
use std::process::{Command, Output};

use airlock_test_support::audit_cli::first_session_id;
use airlock_test_support::isolation::Isolation;
use airlock_test_support::per_isolation;

const AIRLOCK: &str = airlock_test_support::airlock_bin!();

/// One hostile string and how the CLI must show it.
struct Variant {
    raw: &'static str,
    shown: &'static str,
    /// Whether the proxy can record it in a URL: an HTTP request target
    /// cannot carry C0 controls or DEL (RFC 9112 section 3.2; the proxy
    /// answers 400 and records no exchange), but any other bytes it can.
    in_url: bool,
}

const VARIANTS: &[Variant] = &[
    // Erase the line (ECMA-48 EL).
    Variant {
        raw: "\x1b[2K",
        shown: "\\x1b[2K",
        in_url: false,
    },
    // Set the window title (xterm OSC 0), ended by BEL.
    Variant {
        raw: "\x1b]0;pwned\x07",
        shown: "\\x1b]0;pwned\\x07",
        in_url: false,
    },
    // Return to column 0 and overwrite.
    Variant {
        raw: "ok\rEVIL",
        shown: "ok\\rEVIL",
        in_url: false,
    },
    // Forge a line of its own in the timeline.
    Variant {
        raw: "\n    +0.001s 00:00:00.000     #1 exec  forged",
        shown: "\\n    +0.001s 00:00:00.000     #1 exec  forged",
        in_url: false,
    },
    // DEL and backspace.
    Variant {
        raw: "del\x7fbs\x08",
        shown: "del\\x7fbs\\x08",
        in_url: false,
    },
    // Right-to-left override: "evil\u{202e}gpj.exe" reads "evilexe.jpg".
    Variant {
        raw: "evil\u{202e}gpj.exe",
        shown: "evil\\u{202e}gpj.exe",
        in_url: true,
    },
    // Bidi isolates (the Trojan Source set).
    Variant {
        raw: "\u{2066}iso\u{2069}\u{2067}x\u{2069}",
        shown: "\\u{2066}iso\\u{2069}\\u{2067}x\\u{2069}",
        in_url: true,
    },
    // The 8-bit CSI (C1 control) as UTF-8: clear the screen on terminals
    // that honour C1 controls.
    Variant {
        raw: "\u{9b}2J",
        shown: "\\u{9b}2J",
        in_url: true,
    },
    // Zero-width and byte-order-mark characters that make two names look alike.
    Variant {
        raw: "zw\u{200b}\u{feff}j\u{200d}",
        shown: "zw\\u{200b}\\u{feff}j\\u{200d}",
        in_url: true,
    },
    // Text that looks like an escape must not print like one.
    Variant {
        raw: "\\x1b[2K",
        shown: "\\\\x1b[2K",
        in_url: true,
    },
    Variant {
        raw: "\\u{202e}",
        shown: "\\\\u{202e}",
        in_url: true,
    },
];

/// For each variant (its 1-based number `i`, payload `p`): an exec with
/// argv `argv{i}_{p}_end`, an exec whose cwd is `dir{i}_{p}_end` and a file
/// `inner` written there, a file `file{i}_{p}_end` renamed to `moved{i}_{p}_end`, and a request for
/// `/url{i}_{p}_end`. curl's own complaints go to /dev/null so that
/// airlock's stderr holds only airlock's lines.
const SCRIPT: &str = r#"
i=0
for p in "$@"; do
  i=$((i+1))
  /bin/true "argv${i}_${p}_end"
  mkdir "dir${i}_${p}_end"
  (cd "dir${i}_${p}_end" && /bin/true "incwd${i}" && printf y > inner)
  printf x > "file${i}_${p}_end"
  mv "file${i}_${p}_end" "moved${i}_${p}_end"
  curl -sS -m 10 -o /dev/null --request-target "/url${i}_${p}_end" http://example.test/ 2>/dev/null || true
done
"#;

struct Session {
    isolation: Isolation,
    dir: tempfile::TempDir,
    db: PathBuf,
    id: String,
    run: Output,
}

impl Session {
    fn run(isolation: Isolation) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let workspace = dir.path().join("ws");
        std::fs::create_dir(&workspace).unwrap();
        let db = dir.path().join("audit/audit.db");
        let run = Command::new(AIRLOCK)
            .arg("run")
            .args(isolation.args())
            .arg("--workspace")
            .arg(&workspace)
            .arg("--audit-db")
            .arg(&db)
            .arg("--audit-key")
            .arg(dir.path().join("audit/audit.key"))
            .args(["--", "sh", "-c", SCRIPT, "sh"])
            .args(VARIANTS.iter().map(|v| v.raw))
            .output()
            .unwrap();
        assert!(run.status.success(), "{run:?}");
        Self {
            isolation,
            id: first_session_id(AIRLOCK, &db, &run),
            dir,
            db,
            run,
        }
    }

    /// `airlock audit ARGS` for this session's database; its stdout, which
    /// must be UTF-8 (the escaper never produces anything else).
    fn audit(&self, args: &[&str]) -> String {
        let out = Command::new(AIRLOCK)
            .arg("audit")
            .args(args)
            .arg("--audit-db")
            .arg(&self.db)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).expect("audit output is UTF-8")
    }
}

/// A character a terminal acts on or that disguises text, which must never
/// reach the reader raw: controls other than the line feed that ends each
/// line, C1 controls, and the bidi and invisible characters the variants use.
fn is_dangerous(c: char) -> bool {
    (c.is_control() && c != '\n')
        || matches!(
            c,
            '\u{200b}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
                | '\u{feff}'
        )
}

fn assert_clean(what: &str, text: &str) {
    if let Some((at, c)) = text.char_indices().find(|(_, c)| is_dangerous(*c)) {
        let from = text[..at].rfind('\n').map_or(0, |n| n + 1);
        panic!(
            "{what}: raw {c:?} at byte {at}, in line {:?}",
            &text[from..text[at..].find('\n').map_or(text.len(), |n| at + n)]
        );
    }
}

fn assert_shows(what: &str, text: &str, needle: &str) {
    assert!(text.contains(needle), "{what} lacks {needle:?}:\n{text}");
}

fn hostile_argv_cwd_file_names_and_urls_print_escaped_under(isolation: Isolation) {
    let s = Session::run(isolation);

    let timeline = s.audit(&["timeline", &s.id]);
    assert_clean("timeline", &timeline);
    // No forged line: every line is a header or starts with a timestamp.
    for line in timeline.lines().skip(2) {
        let t = line.trim_start();
        assert!(
            t.starts_with('+') || t.starts_with("note: ") || t.starts_with("(session"),
            "a line the record did not make: {line:?}\n{timeline}"
        );
    }
    let files = s.audit(&["files", &s.id]);
    assert_clean("files", &files);
    for line in files.lines() {
        assert!(
            line.starts_with('#'),
            "a line the record did not make: {line:?}"
        );
    }

    let mut recorded_urls = 0;
    for (n, v) in VARIANTS.iter().enumerate() {
        let i = n + 1;
        let shown = |field: &str| format!("{field}{i}_{}_end", v.shown);
        // argv, quoted as a shell word (an escaped word is always quoted).
        assert_shows("timeline", &timeline, &format!("'{}'", shown("argv")));
        // The cwd of the exec run inside the directory.
        let incwd = timeline
            .lines()
            .find(|l| l.contains(&format!("/bin/true incwd{i} ")))
            .unwrap_or_else(|| panic!("no exec of incwd{i}:\n{timeline}"));
        assert_shows("exec line", incwd, &format!("/{}", shown("dir")));
        // The file, its rename target and a file in the directory, in both
        // listings.
        let rename = files
            .lines()
            .find(|l| l.contains(&format!("/{} -> ", shown("file"))));
        let moved = format!("/{}", shown("moved"));
        match (rename, s.isolation) {
            (Some(rename), _) => {
                // Under gVisor a rename carries the hash it saw: `  (1 B, ...)`.
                let to = rename.split(" -> ").nth(1).unwrap_or_default();
                assert!(
                    to.ends_with(&moved) || to.contains(&format!("{moved}  (")),
                    "{rename}"
                );
                for (what, listing) in [("timeline", &timeline), ("files", &files)] {
                    assert_shows(what, listing, &format!("/{}", shown("file")));
                }
            }
            (None, Isolation::Namespaces) => panic!("no rename of file{i}:\n{files}"),
            // The documented difference (docs/isolation.md): a file created
            // and renamed before gVisor's next look is one create under its
            // last name.
            (None, Isolation::Gvisor) => assert!(
                files
                    .lines()
                    .any(|l| l.contains(" create ") && l.contains(&moved)),
                "neither a rename of file{i} nor a create of {moved}:\n{files}"
            ),
        }
        for (what, listing) in [("timeline", &timeline), ("files", &files)] {
            assert_shows(what, listing, &moved);
            assert_shows(what, listing, &format!("/{}/inner", shown("dir")));
        }
        // The URL, when HTTP can carry it at all.
        let url = format!("http://example.test/{}", shown("url"));
        if v.in_url {
            let line = timeline
                .lines()
                .find(|l| l.contains(&url))
                .unwrap_or_else(|| panic!("no request for {url}:\n{timeline}"));
            assert!(
                line.contains("http  GET ") && line.contains("[deny"),
                "{line}"
            );
            recorded_urls += 1;
        } else {
            // curl's argv shows it; no exchange does.
            let path = format!("/url{i}_");
            assert!(
                !timeline
                    .lines()
                    .any(|l| l.contains("http  ") && l.contains(&path)),
                "{timeline}"
            );
        }
    }
    assert_eq!(recorded_urls, VARIANTS.iter().filter(|v| v.in_url).count());

    // Restoring names every file it writes back.
    let restored = s.dir.path().join("restored");
    let restore = s.audit(&["files", &s.id, "--restore", restored.to_str().unwrap()]);
    assert_clean("files --restore", &restore);
    for (n, v) in VARIANTS.iter().enumerate() {
        let moved = format!("/moved{}_{}_end (1 B)", n + 1, v.shown);
        assert!(
            restore
                .lines()
                .any(|l| l.starts_with("restored ") && l.ends_with(&moved)),
            "{moved:?} not restored:\n{restore}"
        );
    }

    // The session list shows the command line, hostile arguments included.
    let sessions = s.audit(&["sessions"]);
    assert_clean("sessions", &sessions);
    assert_eq!(sessions.lines().count(), 2, "{sessions}");
    for v in VARIANTS {
        assert_shows("sessions", &sessions, v.shown);
    }

    // airlock's own refusal notices on the caller's terminal name the URL.
    let stderr = String::from_utf8(s.run.stderr.clone()).expect("stderr is UTF-8");
    assert_clean("airlock run's stderr", &stderr);
    assert_shows(
        "airlock run's stderr",
        &stderr,
        "refused GET http://example.test/url6_evil\\u{202e}gpj.exe_end",
    );
}

per_isolation!(sync hostile_argv_cwd_file_names_and_urls_print_escaped_under =>
    hostile_argv_cwd_file_names_and_urls_print_escaped,
    under_gvisor_hostile_argv_cwd_file_names_and_urls_print_escaped);

/// `--json` is data, not display: JSON's own escaping keeps a terminal
/// safe, and the exact strings the program used are there to compare.
fn json_output_keeps_the_exact_strings_under(isolation: Isolation) {
    let s = Session::run(isolation);
    let timeline: serde_json::Value =
        serde_json::from_str(&s.audit(&["timeline", &s.id, "--json"])).unwrap();
    let events = timeline["events"].as_array().unwrap();
    for (n, v) in VARIANTS.iter().enumerate() {
        let i = n + 1;
        let argv = format!("argv{i}_{}_end", v.raw);
        assert!(
            events
                .iter()
                .any(|e| e["kind"] == "exec" && e["argv"][1] == argv.as_str()),
            "no exec with {argv:?}"
        );
        let moved = format!("/moved{i}_{}_end", v.raw);
        // Under gVisor a file created and renamed before its next look is
        // one create under its last name (docs/isolation.md).
        let field = |e: &serde_json::Value| match (s.isolation, e["op"].as_str()) {
            (Isolation::Gvisor, Some("create")) => e["path"].as_str().map(str::to_owned),
            _ => e["rename_to"].as_str().map(str::to_owned),
        };
        assert!(
            events
                .iter()
                .any(|e| e["kind"] == "file" && field(e).is_some_and(|to| to.ends_with(&moved))),
            "no rename to {moved:?}"
        );
        if v.in_url {
            let url = format!("http://example.test/url{i}_{}_end", v.raw);
            assert!(
                events
                    .iter()
                    .any(|e| e["kind"] == "http" && e["url"] == url.as_str()),
                "no request for {url:?}"
            );
        }
    }
}

per_isolation!(sync json_output_keeps_the_exact_strings_under =>
    json_output_keeps_the_exact_strings,
    under_gvisor_json_output_keeps_the_exact_strings);
