//! Quitting: the quit contract of docs/meshwrap.md, row by row. At most
//! one quit accepted (answered 2xx), and never none while the sidecar
//! lives: a quit not handled (5xx, 408, 429), or closed unanswered by a
//! sidecar that still listens, is sent again within `--quit-timeout`; a
//! 2xx is never repeated; 403, 404, 405 and the rest of 3xx and 4xx are
//! errors naming their cause, not resent; a quit that went out and hangs
//! is awaited, not resent. A failed quit never changes the exit status.

use crate::support::*;

#[test]
fn exactly_one_quit_per_url_even_for_an_instant_command() {
    let first = FakeSidecar::ready();
    let second = FakeSidecar::ready();
    for run in 1..=200 {
        Meshwrap::new()
            .args(first.flags())
            .args(["--quit-url", &second.quit_url(), "true"])
            .run()
            .assert_code(0);
        assert_eq!((first.quits(), second.quits()), (run, run), "after run {run}");
    }
}

#[test]
fn policy_decides_whether_to_quit() {
    let cases = [
        ("always", 0, 1),
        ("always", 3, 1),
        ("on-success", 0, 1),
        ("on-success", 3, 0),
        ("never", 0, 0),
        ("never", 3, 0),
    ];
    for (policy, code, quits) in cases {
        let sidecar = FakeSidecar::ready();
        let run = wrapped(&sidecar)
            .args(["--quit-policy", policy, "sh", "-c", &format!("exit {code}")])
            .run();
        run.assert_code(code);
        run.check(
            sidecar.quits() == quits,
            &format!("{policy} after exit {code}: {quits} quits expected"),
        );
        if quits == 0 {
            run.assert_stderr_has("not quitting the sidecar");
        }
    }
}

#[test]
fn policy_from_the_environment() {
    let sidecar = FakeSidecar::ready();
    wrapped(&sidecar)
        .env("MESHWRAP_QUIT_POLICY", "never")
        .arg("true")
        .run()
        .assert_code(0);
    assert_eq!(sidecar.quits(), 0);
}

#[test]
fn client_errors_are_logged_with_their_cause_and_not_retried() {
    for (status, cause) in [
        (403, "only from loopback"),
        (404, "not enabled"),
        (405, "does not take POST"),
    ] {
        let sidecar = FakeSidecar::ready();
        sidecar.set_quit(&[Reply::Status(status)]);
        wrapped(&sidecar)
            .args(["sh", "-c", "exit 4"])
            .run()
            .assert_code(4)
            .assert_stderr_has(&format!("error: could not quit the sidecar: {status}"))
            .assert_stderr_has(cause);
        assert_eq!(sidecar.quits(), 1, "{status} is not retried");
    }
}

#[test]
fn a_quit_not_handled_is_sent_again_until_the_sidecar_takes_it() {
    for status in [500, 503, 408, 429] {
        let sidecar = FakeSidecar::ready();
        sidecar.set_quit(&[Reply::Status(status), Reply::Status(status), Reply::Status(200)]);
        wrapped(&sidecar)
            .args(["sh", "-c", "exit 7"])
            .run()
            .assert_code(7)
            .assert_stderr_has("sidecar quit url=")
            .assert_stderr_lacks("error");
        assert_eq!(
            (sidecar.quits(), sidecar.accepted_quits()),
            (3, 1),
            "{status}: sent until taken, once"
        );
    }
}

#[test]
fn a_sidecar_that_never_handles_the_quit_is_an_error_at_the_quit_timeout() {
    let sidecar = FakeSidecar::ready();
    sidecar.set_quit(&[Reply::Status(503)]);
    let run = wrapped(&sidecar)
        .args(["--quit-timeout", "300ms", "sh", "-c", "exit 5"])
        .run();
    run.assert_code(5).assert_stderr_has(
        "error: could not quit the sidecar: it answered HTTP 503 (not handled) to every quit within 300ms",
    );
    run.check(sidecar.quits() > 1, "a 503 is sent again");
    run.check(
        run.elapsed < std::time::Duration::from_secs(5),
        "the retries outlived --quit-timeout",
    );
}

#[test]
fn other_client_errors_and_redirects_are_not_resent() {
    for (status, words) in [
        (301, "it answered HTTP 301; not sending the quit again"),
        (400, "HTTP 400: the sidecar rejected the request"),
        (418, "HTTP 418: the sidecar rejected the request"),
    ] {
        let sidecar = FakeSidecar::ready();
        sidecar.set_quit(&[Reply::Status(status), Reply::Status(200)]);
        wrapped(&sidecar)
            .args(["sh", "-c", "exit 4"])
            .run()
            .assert_code(4)
            .assert_stderr_has(&format!("error: could not quit the sidecar: {words}"));
        assert_eq!(sidecar.quits(), 1, "{status} is not resent");
    }
}

#[test]
fn an_answer_that_is_not_http_is_an_error_and_not_resent() {
    let sidecar = FakeSidecar::ready();
    sidecar.set_quit(&[Reply::Garbage, Reply::Status(200)]);
    wrapped(&sidecar)
        .args(["sh", "-c", "exit 4"])
        .run()
        .assert_code(4)
        .assert_stderr_has("it answered something that is not HTTP");
    assert_eq!(sidecar.quits(), 1);
}

#[test]
fn a_close_or_a_reset_before_an_answer_from_a_sidecar_that_still_listens_is_sent_again() {
    for reply in [Reply::Close, Reply::Reset] {
        let sidecar = FakeSidecar::ready();
        sidecar.set_quit(&[reply.clone(), Reply::Status(200)]);
        wrapped(&sidecar)
            .args(["sh", "-c", "exit 3"])
            .run()
            .assert_code(3)
            .assert_stderr_has("sidecar quit url=")
            .assert_stderr_lacks("error");
        sidecar.settle();
        assert_eq!(
            (sidecar.quits(), sidecar.accepted_quits()),
            (2, 1),
            "{reply:?}: the quit was not taken, so it is sent again, and taken once"
        );
    }
}

#[test]
fn a_sidecar_that_keeps_closing_the_quit_unanswered_is_warned_about_at_the_quit_timeout() {
    let sidecar = FakeSidecar::ready();
    sidecar.set_quit(&[Reply::Close]);
    let run = wrapped(&sidecar)
        .args(["--quit-timeout", "300ms", "sh", "-c", "exit 3"])
        .run();
    run.assert_code(3)
        .assert_stderr_has("the sidecar closed the connection without answering and still listens at --quit-timeout")
        .assert_stderr_lacks("error");
    run.check(sidecar.quits() > 1, "sent again while it still listened");
}

#[test]
fn a_refused_quit_is_retried_until_the_sidecar_answers() {
    let sidecar = FakeSidecar::refusing();
    let mut mw = Meshwrap::new()
        .args(["-v", "--sidecar", "none", "--quit-url", &sidecar.quit_url()])
        .args(["sh", "-c", "exit 4"])
        .spawn();
    mw.wait_stderr("quit not sent, retrying");
    mw.wait_stderr("quit not sent, retrying");
    sidecar.listen();
    mw.finish().assert_code(4).assert_stderr_has("sidecar quit url=");
    assert_eq!(sidecar.quits(), 1);
}

/// A loopback port that takes no connection: its listener's accept queue
/// (backlog 0) is full, so the kernel drops further SYNs and a connect
/// waits. The listener and the connections that fill it are held.
fn black_hole() -> (std::net::TcpListener, Vec<std::net::TcpStream>, u16) {
    use std::os::fd::AsRawFd;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    // SAFETY: listen again on a socket the listener owns: only its backlog changes.
    assert_eq!(unsafe { libc::listen(listener.as_raw_fd(), 0) }, 0);
    let addr = listener.local_addr().unwrap();
    let mut held = Vec::new();
    for _ in 0..16 {
        match std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_millis(200)) {
            Ok(stream) => held.push(stream),
            Err(_) => return (listener, held, addr.port()),
        }
    }
    panic!("the accept queue never filled");
}

#[test]
fn a_quits_connect_is_bounded_by_what_is_left_of_the_quit_timeout() {
    let (_listener, _held, port) = black_hole();
    let url = format!("http://127.0.0.1:{port}/quitquitquit");
    let run = Meshwrap::new()
        .args(["--sidecar", "none", "--quit-url", &url])
        .args([
            "--quit-timeout",
            "300ms",
            "--request-timeout",
            "20s",
            "sh",
            "-c",
            "exit 5",
        ])
        .run();
    run.assert_code(5)
        .assert_stderr_has("could not quit the sidecar: no quit could be sent before --quit-timeout ran out");
    run.check(
        run.elapsed < std::time::Duration::from_secs(5),
        "the connect outlived --quit-timeout (bounded by --request-timeout instead)",
    );
}

/// Runs of an instant command against sidecars that take the quit in each
/// way the contract names (2xx at once or late) or first leave it untaken
/// (503, a close or a reset before any answer, then 200), or close as they
/// exit: each run checked for its exit status and for exactly one quit
/// accepted (answered 2xx; for the sidecar that exits on it, one POST).
/// MESHWRAP_SOAK_RUNS sets how many (200 by default; the notes' figures are
/// from 10,000).
#[test]
fn soak_every_run_keeps_its_status_and_has_exactly_one_quit_accepted() {
    let runs: usize = std::env::var("MESHWRAP_SOAK_RUNS").map_or(200, |n| n.parse().unwrap());
    let replies = [
        Reply::Status(200),
        Reply::Status(204),
        Reply::Late(20, 200),
        Reply::Status(503),
        Reply::Close,
        Reply::Reset,
        Reply::ExitWithoutAnswer,
    ];
    let (mut lost, mut duplicate, mut missing) = (0, 0, 0);
    for run in 0..runs {
        let sidecar = FakeSidecar::ready();
        let reply = replies[run % replies.len()].clone();
        sidecar.set_quit(&[reply.clone(), Reply::Status(200)]);
        let code = (run * 7 % 256) as i32;
        let done = wrapped(&sidecar)
            .args(["--quit-timeout", "2s", "sh", "-c", &format!("exit {code}")])
            .run();
        // A quit meshwrap gave up waiting for may still be on its way in.
        sidecar.settle();
        let accepted = if matches!(reply, Reply::ExitWithoutAnswer) {
            sidecar.quits()
        } else {
            sidecar.accepted_quits()
        };
        lost += usize::from(done.code() != code);
        duplicate += usize::from(accepted > 1);
        missing += usize::from(accepted == 0);
        if done.code() != code || accepted != 1 {
            eprintln!(
                "run {run} ({reply:?}): exit {} for {code}, {accepted} quits accepted",
                done.code()
            );
        }
    }
    eprintln!("soak: {runs} runs, {lost} lost statuses, {duplicate} duplicate accepted quits, {missing} missing quits");
    assert_eq!((lost, duplicate, missing), (0, 0, 0));
}

#[test]
fn a_quit_that_went_out_unanswered_is_waited_for_within_the_quit_timeout_and_not_resent() {
    let sidecar = FakeSidecar::ready();
    sidecar.set_quit(&[Reply::Hang]);
    let run = wrapped(&sidecar)
        .args([
            "--quit-timeout",
            "300ms",
            "--request-timeout",
            "50ms",
            "sh",
            "-c",
            "exit 42",
        ])
        .run();
    run.assert_code(42)
        .assert_stderr_has("warn: quit sent, no answer within 300ms")
        .assert_stderr_lacks("could not quit");
    assert_eq!(sidecar.quits(), 1, "a quit that went out is never sent again");
    // The fake holds the connection for as long as the test lives; meshwrap must not.
    run.check(
        run.elapsed < std::time::Duration::from_secs(10),
        "meshwrap waited on a hanging quit",
    );
}

#[test]
fn a_quit_answered_after_the_request_timeout_is_sent_once() {
    let sidecar = FakeSidecar::ready();
    sidecar.set_quit(&[Reply::Late(1500, 200)]);
    wrapped(&sidecar)
        .args(["--request-timeout", "1s", "sh", "-c", "exit 3"])
        .run()
        .assert_code(3)
        .assert_stderr_has("sidecar quit")
        .assert_stderr_lacks("warn");
    assert_eq!(sidecar.quits(), 1);
}

#[test]
fn the_same_quit_url_given_twice_and_by_a_preset_is_posted_once() {
    let (ready, quit) = FakeSidecar::pair(-1);
    let url = quit.quit_url().replace("http://", "HTTP://");
    Meshwrap::new()
        .args(["--sidecar", &format!("istio=127.0.0.1:{}", ready.port())])
        .args(["--quit-url", &quit.quit_url(), "--quit-url", &url, "true"])
        .run()
        .assert_code(0);
    assert_eq!(quit.quits(), 1);
}

#[test]
fn without_a_wait_a_sidecar_that_exits_on_quit_without_answering_is_told_once() {
    let sidecar = FakeSidecar::ready();
    sidecar.set_quit(&[Reply::ExitWithoutAnswer]);
    let run = wrapped(&sidecar).args(["--no-wait", "sh", "-c", "exit 6"]).run();
    run.assert_code(6)
        .assert_stderr_has("its port now refuses: it exited")
        .assert_stderr_lacks("error");
    assert_eq!(sidecar.quits(), 1);
}

#[test]
fn the_smallest_quit_timeout_still_sends_the_quit() {
    let sidecar = FakeSidecar::ready();
    wrapped(&sidecar)
        .args(["--quit-timeout", "1ns", "true"])
        .run()
        .assert_code(0);
    sidecar.wait_for("one quit", |requests| requests.iter().any(|r| r.method == "POST"));
    assert_eq!(sidecar.quits(), 1);
}

#[test]
fn a_quit_timeout_beyond_the_clock_keeps_the_status_and_quits() {
    let sidecar = FakeSidecar::ready();
    wrapped(&sidecar)
        .args(["--quit-timeout", "4000000000000000h", "sh", "-c", "exit 9"])
        .run()
        .assert_code(9)
        .assert_stderr_has("sidecar quit");
    assert_eq!(sidecar.quits(), 1);
}

#[test]
fn a_failed_quit_keeps_the_exit_status() {
    let sidecar = FakeSidecar::ready();
    // A refusal for good (a 500 is sent again until --quit-timeout, whose
    // end may fall in a request: a warning, not this error).
    sidecar.set_quit(&[Reply::Status(404)]);
    wrapped(&sidecar)
        .args(["sh", "-c", "exit 42"])
        .run()
        .assert_code(42)
        .assert_stderr_has("error: could not quit");
}

#[test]
fn a_sidecar_seen_ready_that_now_refuses_is_already_gone() {
    let sidecar = FakeSidecar::ready();
    let mut mw = wrapped(&sidecar)
        .args(["sh", "-c", "echo started; read line; exit 0"])
        .spawn();
    mw.wait_stdout("started");
    sidecar.stop();
    mw.close_stdin();
    let run = mw.finish();
    run.assert_code(0)
        .assert_stderr_has("sidecar already gone")
        .assert_stderr_lacks("error");
    assert_eq!(sidecar.quits(), 0);
}

#[test]
fn a_sidecar_never_seen_ready_is_retried_while_refusing() {
    let sidecar = FakeSidecar::refusing();
    let mut mw = wrapped(&sidecar).args(["-v", "--no-wait", "true"]).spawn();
    mw.wait_stderr("quit not sent, retrying");
    sidecar.listen();
    mw.finish().assert_code(0).assert_stderr_has("sidecar quit");
    assert_eq!(sidecar.quits(), 1);
}

#[test]
fn a_sidecar_that_exits_on_quit_is_told_once() {
    let sidecar = FakeSidecar::ready();
    sidecar.exit_on_quit();
    wrapped(&sidecar)
        .arg("true")
        .run()
        .assert_code(0)
        .assert_stderr_has("sidecar quit");
    assert_eq!(sidecar.quits(), 1);
}

#[test]
fn quit_delay_waits_before_quitting() {
    let sidecar = FakeSidecar::ready();
    let mut mw = wrapped(&sidecar)
        .args(["--quit-delay", "1s", "sh", "-c", "echo done"])
        .spawn();
    mw.wait_stdout("done");
    let done = std::time::Instant::now();
    mw.finish().assert_code(0).assert_stderr_has("(--quit-delay)");
    let quit = sidecar
        .requests()
        .into_iter()
        .find(|r| r.method == "POST")
        .expect("a quit");
    // A lower bound only: the quit came at least most of a second after the command's last line.
    assert!(quit.at.duration_since(done) >= std::time::Duration::from_millis(700));
}

#[test]
fn a_signal_cuts_the_quit_delay_short() {
    let sidecar = FakeSidecar::ready();
    let mut mw = wrapped(&sidecar)
        .args(["--quit-delay", "10m", "sh", "-c", "exit 3"])
        .spawn();
    mw.wait_stderr("(--quit-delay)");
    mw.signal(libc::SIGTERM);
    mw.finish()
        .assert_code(3)
        .assert_stderr_has("a signal ended --quit-delay");
    assert_eq!(sidecar.quits(), 1);
}

#[test]
fn no_quit_means_no_quit_delay() {
    let sidecar = FakeSidecar::ready();
    wrapped(&sidecar)
        .args(["--quit-delay", "10m", "--quit-policy", "never", "true"])
        .run()
        .assert_code(0)
        .assert_stderr_lacks("--quit-delay");
}

#[test]
fn verify_quit_sees_the_sidecar_exit() {
    let sidecar = FakeSidecar::ready();
    sidecar.exit_on_quit();
    wrapped(&sidecar)
        .args(["--verify-quit", "true"])
        .run()
        .assert_code(0)
        .assert_stderr_has("sidecar exited after the quit");
}

#[test]
fn verify_quit_warns_when_the_sidecar_keeps_running() {
    let sidecar = FakeSidecar::ready();
    wrapped(&sidecar)
        .args(["--verify-quit", "--quit-timeout", "300ms", "sh", "-c", "exit 4"])
        .run()
        .assert_code(4)
        .assert_stderr_has("warn: the sidecar accepted the quit but is still running");
    assert_eq!(sidecar.quits(), 1, "verifying does not quit again");
}
