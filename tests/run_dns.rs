//! The sandbox's resolver answers every well-formed name, so a denial reads
//! the same whether the host or the path is what no rule allows, while the
//! map of names it hands out stays bounded and nothing is forwarded.

use std::process::Command;

use airlock_test_support::audit_cli::first_session_id;
use airlock_test_support::isolation::Isolation;
use airlock_test_support::per_isolation;

const AIRLOCK: &str = airlock_test_support::airlock_bin!();

/// Inside the sandbox: resolve one name, flood the resolver with more unique
/// names than its map keeps, then connect to the first name's address and to
/// an address that was never handed out. Prints one JSON object.
const PROBE: &str = r#"
import json, socket, struct

def query(sock, qid, name):
    q = struct.pack(">HHHHHH", qid & 0xFFFF, 0x0100, 1, 0, 0, 0)
    for label in name.split("."):
        q += bytes([len(label)]) + label.encode()
    q += b"\0" + struct.pack(">HH", 1, 1)
    sock.send(q)

def connect(ip):
    s = socket.socket()
    s.settimeout(5)
    try:
        s.connect((ip, 80))
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = s.recv(4096)
        return "answered: " + data.decode(errors="replace").split("\r\n")[0] if data else "closed"
    except (ConnectionResetError, BrokenPipeError):
        return "closed"
    except OSError as e:
        return "error: " + type(e).__name__
    finally:
        s.close()

first = socket.gethostbyname("first.unlisted.test")
before = connect(first)
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.connect(("127.0.0.53", 53))
sock.settimeout(10)
flood = 33000
# Keep at most 64 queries in flight so no reply is dropped.
sent = received = 0
while received < flood:
    while sent < flood and sent - received < 64:
        query(sock, sent, "n%d.flood.test" % sent)
        sent += 1
    sock.recv(512)
    received += 1
print(json.dumps({
    "first": first,
    "before": before,
    "after": connect(first),
    "again": socket.gethostbyname("first.unlisted.test"),
    "never": connect("198.19.255.200"),
}))
"#;

fn unlisted_names_resolve_and_the_name_map_is_bounded_under(isolation: Isolation) {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let db = dir.path().join("audit/audit.db");
    let out = Command::new(AIRLOCK)
        .arg("run")
        .args(isolation.args())
        .arg("--workspace")
        .arg(&workspace)
        .arg("--audit-db")
        .arg(&db)
        .args(["--timeout", "120s", "--", "python3", "-c", PROBE])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let probe: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();

    // Before the flood the name's address reaches the proxy, which refuses
    // the request with the same 403 as for a path no rule allows.
    assert!(
        probe["first"].as_str().unwrap().starts_with("198.1"),
        "{probe}"
    );
    assert_eq!(
        probe["before"], "answered: HTTP/1.1 403 Forbidden",
        "{probe}"
    );
    // After more names than the map keeps, the evicted address names nothing
    // and its connection is refused; asking again gives a new address.
    assert_eq!(probe["after"], "closed", "{probe}");
    assert_ne!(probe["again"], probe["first"], "{probe}");
    assert_eq!(probe["never"], "closed", "{probe}");
    // Without --policy the advice is to pass one.
    assert!(
        stderr.contains("to allow it, add [[allow]] host = \"first.unlisted.test\" and pass it with --policy FILE"),
        "{stderr}"
    );

    // Every query is on record, and both refused connections say why.
    let id = first_session_id(AIRLOCK, &db, &"the run above");
    let jsonl = dir.path().join("events.jsonl");
    let export = Command::new(AIRLOCK)
        .args(["audit", "export", &id, "--format", "jsonl", "--out"])
        .arg(&jsonl)
        .arg("--audit-db")
        .arg(&db)
        .output()
        .unwrap();
    assert!(export.status.success(), "{export:?}");
    let events: Vec<serde_json::Value> = std::fs::read_to_string(&jsonl)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let dns = events.iter().filter(|e| e["kind"] == "dns").count();
    assert!(dns >= 33_002, "{dns} DNS events recorded");
    let evicted: Vec<_> = events
        .iter()
        .filter(|e| {
            e["kind"] == "tcp"
                && e["decision"] == "deny"
                && e["reason"]
                    .as_str()
                    .is_some_and(|r| r.contains("was never handed out by Airlock's DNS"))
        })
        .collect();
    assert_eq!(evicted.len(), 2, "{evicted:?}");
}

per_isolation!(sync unlisted_names_resolve_and_the_name_map_is_bounded_under => unlisted_names_resolve_and_the_name_map_is_bounded, under_gvisor_unlisted_names_resolve_and_the_name_map_is_bounded);

fn without_a_policy_the_refusal_says_to_pass_one_under(isolation: Isolation) {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(AIRLOCK)
        .arg("run")
        .args(isolation.args())
        .arg("--workspace")
        .arg(dir.path())
        .arg("--no-audit")
        .args(["--", "curl", "-sS", "http://unlisted.test/x"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("Airlock refused this request."), "{stdout}");
    assert!(
        stdout.contains("To allow it, pass --policy FILE with this rule:"),
        "{stdout}"
    );
    assert!(stdout.contains("host = \"unlisted.test\""), "{stdout}");
    assert!(!stdout.contains("<deny-all>:"), "{stdout}");
}

per_isolation!(sync without_a_policy_the_refusal_says_to_pass_one_under => without_a_policy_the_refusal_says_to_pass_one, under_gvisor_without_a_policy_the_refusal_says_to_pass_one);
