//! A registered secret never reaches the database file, wherever it appears
//! in an event.

use airlock_auditor::Verdict;
use airlock_auditor::{AuditEvent, ExecId, FileOp, OutputStream};
use airlock_auditor::{Exec, HttpExchange};
use airlock_test_support::audit_store::{dns, env, exec, file, info, output};

const SECRET: &str = "ghp_S3cr3tT0kenValue42";

#[test]
fn registered_secret_never_appears_in_the_database_bytes() {
    let e = env();
    let store = e.store();
    store.redactor().add("GITHUB_TOKEN", SECRET).unwrap();
    let rec = store
        .begin_session(info(&[
            "curl",
            "-H",
            &format!("Authorization: token {SECRET}"),
        ]))
        .unwrap();
    let mut ex = exec("e1", None, &["curl", "-H", &format!("token {SECRET}")]);
    if let AuditEvent::Exec(Exec {
        env_values_nonsecret,
        ..
    }) = &mut ex
    {
        env_values_nonsecret.insert("LEAKY".into(), format!("x{SECRET}y").into());
        env_values_nonsecret.insert(SECRET.into(), "as a key".into());
    }
    rec.record(ex).unwrap();
    rec.record(AuditEvent::Http(HttpExchange {
        exec_id: Some(ExecId::new("e1")),
        request_headers: vec![("authorization".into(), format!("Bearer {SECRET}"))],
        request_body: Some(format!("{{\"token\":\"{SECRET}\"}}").into_bytes()),
        status: Some(200),
        response_body: Some(format!("echo {SECRET} echo").into_bytes()),
        bytes_up: 1,
        bytes_down: 1,
        ..HttpExchange::decided(
            "GET".into(),
            format!("https://api.github.com/user?access_token={SECRET}"),
            "HTTP/2".into(),
            Verdict::Allow,
        )
    }))
    .unwrap();
    rec.record(file(
        "/work/.env",
        FileOp::Create,
        Some(format!("TOKEN={SECRET}\n").as_bytes()),
    ))
    .unwrap();
    rec.record(output(
        OutputStream::Stdout,
        format!("your token is {SECRET}\n").as_bytes(),
    ))
    .unwrap();
    rec.record(dns(&format!("{SECRET}.exfil.example"))).unwrap();
    let id = rec.session_id().clone();
    rec.finish(Default::default()).unwrap();

    let mut bytes = std::fs::read(&e.db).unwrap();
    for side in ["audit.db-wal", "audit.db-shm"] {
        bytes.extend(std::fs::read(e.dir.path().join(side)).unwrap_or_default());
    }
    assert!(bytes.len() > 4096);
    // Nor in another case or with its labels reversed (the search index
    // keys hosts that way), which a redactor matching exact bytes would miss
    // if it ran after the change.
    let reversed: String = SECRET.rsplit('.').collect::<Vec<_>>().join(".");
    for form in [SECRET.to_owned(), SECRET.to_ascii_lowercase(), reversed] {
        assert!(
            !bytes.windows(form.len()).any(|w| w == form.as_bytes()),
            "secret found in the database files as {form:?}"
        );
    }

    // And the events still say what happened, with the secret named.
    let events = store.events(&id, None).unwrap();
    let all = format!("{events:?}");
    assert!(all.contains("[secret:GITHUB_TOKEN]"));
    let restored = e.dir.path().join("r");
    airlock_auditor::restore::restore(&store, &id, &restored).unwrap();
    assert_eq!(
        std::fs::read_to_string(restored.join("work/.env")).unwrap(),
        "TOKEN=[secret:GITHUB_TOKEN]\n"
    );
    let r = store
        .verify(&id, &airlock_auditor::TrustAnchor::KeyFile(e.key.clone()))
        .unwrap();
    assert!(r.is_intact(), "{r:#?}");
}
