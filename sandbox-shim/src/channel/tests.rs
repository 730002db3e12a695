//! Round trips and refusals of every control message.

use super::*;

fn null() -> OwnedFd {
    std::fs::File::open("/dev/null").unwrap().into()
}

fn round_trip(msg: Message) -> Message {
    let (a, b) = pair().unwrap();
    send(&a, &msg).unwrap();
    recv(&b).unwrap().expect("a message")
}

#[test]
fn every_message_survives_the_round_trip() {
    assert!(matches!(round_trip(Message::Go), Message::Go));
    assert!(matches!(round_trip(Message::Ready), Message::Ready));
    assert!(matches!(round_trip(Message::Traced), Message::Traced));
    assert!(matches!(
        round_trip(Message::InitPid(Pid::from_raw(4242))),
        Message::InitPid(pid) if pid.as_raw() == 4242
    ));
    assert!(matches!(round_trip(Message::Exit(-7)), Message::Exit(-7)));
    assert!(matches!(
        round_trip(Message::InitDied(9)),
        Message::InitDied(9)
    ));
    assert!(matches!(round_trip(Message::Bye), Message::Bye));
    assert!(matches!(
        round_trip(Message::InitDied(9)),
        Message::InitDied(9)
    ));
    for failure in [
        Failure::UserNamespaces("unshare(CLONE_NEWUSER) failed with EPERM".into()),
        Failure::Setup("mount tmpfs on /tmp: EPERM".into()),
        Failure::Setup(String::new()),
    ] {
        match round_trip(Message::Failed(failure.clone())) {
            Message::Failed(got) => assert_eq!(got, failure),
            other => panic!("{other:?}"),
        }
    }
    assert!(matches!(
        round_trip(Message::Terminal(null())),
        Message::Terminal(_)
    ));
    assert!(matches!(
        round_trip(Message::TraceMe(null())),
        Message::TraceMe(_)
    ));
    assert!(matches!(
        round_trip(Message::Network {
            transparent: null(),
            dns_udp: null(),
            dns_tcp: null(),
        }),
        Message::Network { .. }
    ));
}

#[test]
fn every_step_message_survives_the_round_trip() {
    let s = StepId(123_456);
    assert!(matches!(
        round_trip(Message::KillStep(s)),
        Message::KillStep(got) if got == s
    ));
    assert!(matches!(
        round_trip(Message::SignalStep(s, 2)),
        Message::SignalStep(got, 2) if got == s
    ));
    assert!(matches!(
        round_trip(Message::StepExit(s, 9)),
        Message::StepExit(got, 9) if got == s
    ));
    assert!(matches!(
        round_trip(Message::StepFailed(s, "fork: EAGAIN".into())),
        Message::StepFailed(got, text) if got == s && text == "fork: EAGAIN"
    ));
    assert!(matches!(
        round_trip(Message::StepTerminal(s, null())),
        Message::StepTerminal(got, _) if got == s
    ));
    assert!(matches!(
        round_trip(Message::Exec { step: s, request: null(), stdio: Some([null(), null(), null()]) }),
        Message::Exec { step, stdio: Some(_), .. } if step == s
    ));
    assert!(matches!(
        round_trip(Message::Exec { step: s, request: null(), stdio: None }),
        Message::Exec { step, stdio: None, .. } if step == s
    ));
}

#[test]
fn a_long_step_failure_is_cut_to_fit_and_still_sent() {
    let (a, b) = pair().unwrap();
    send(&a, &step_failed(StepId(1), "x".repeat(2 * MAX_MSG))).unwrap();
    match recv(&b).unwrap() {
        Some(Message::StepFailed(StepId(1), text)) => {
            assert!(text.ends_with("message limit]"), "{text}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_exec_with_the_wrong_descriptors_still_names_its_step() {
    let payload = [&[EXEC][..], &5u64.to_le_bytes()].concat();
    for n in [0, 2, 3] {
        let fds = (0..n).map(|_| null()).collect();
        assert_eq!(
            decode(&payload, fds).unwrap_err(),
            DecodeError::ExecFds {
                step: StepId(5),
                got: n
            }
        );
    }
    assert!(decode(&[EXEC, 1, 2], vec![null()]).is_err());
}

#[test]
fn eof_is_none() {
    let (a, b) = pair().unwrap();
    drop(a);
    assert!(recv(&b).unwrap().is_none());
}

#[test]
fn an_oversized_message_is_refused_not_cut() {
    let (a, _b) = pair().unwrap();
    let text = "x".repeat(MAX_MSG);
    let err = send(&a, &Message::Failed(Failure::Setup(text))).unwrap_err();
    assert!(
        matches!(err, ChannelError::TooLong { len } if len == MAX_MSG + 2),
        "{err}"
    );
    // The largest that fits goes through whole.
    let text = "y".repeat(MAX_MSG - 2);
    match round_trip(Message::Failed(Failure::Setup(text.clone()))) {
        Message::Failed(Failure::Setup(got)) => assert_eq!(got, text),
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_oversized_message_from_elsewhere_is_reported() {
    let (a, b) = pair().unwrap();
    let big = vec![GO; MAX_MSG + 100];
    sendmsg::<()>(
        a.as_raw_fd(),
        &[IoSlice::new(&big)],
        &[],
        MsgFlags::empty(),
        None,
    )
    .unwrap();
    assert!(matches!(
        recv(&b),
        Err(ChannelError::Malformed(DecodeError::Truncated))
    ));
}

#[test]
fn a_fitted_failure_fits_and_says_it_was_cut() {
    let long = "é".repeat(MAX_MSG);
    let Failure::Setup(text) = Failure::Setup(long).fitted() else {
        unreachable!()
    };
    assert!(text.len() + 2 <= MAX_MSG);
    assert!(text.ends_with("message limit]"));
    let short = Failure::UserNamespaces("short".into());
    assert_eq!(short.clone().fitted(), short);
}

#[test]
fn malformed_messages_are_errors() {
    assert_eq!(
        decode(b"Z", Vec::new()).unwrap_err(),
        DecodeError::UnknownTag(b'Z')
    );
    assert_eq!(
        decode(b"P12", Vec::new()).unwrap_err(),
        DecodeError::BadPayload { tag: 'P' }
    );
    assert_eq!(
        decode(b"N", vec![null(), null()]).unwrap_err().to_string(),
        "the sandbox handed over fewer than 3 network sockets"
    );
    assert!(decode(b"EQtext", Vec::new()).is_err());
}
