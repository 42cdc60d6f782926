//! A wait that explains itself and a failure the pod's status shows: a
//! progress line at 5 s, 15 s, 30 s, 60 s and then every minute, naming
//! each URL not ready yet and its last answer (with one hint when this is
//! plainly no pod); a timeout error that names them too; one quit attempt,
//! not --quit-timeout's retries, for a sidecar that answered nothing in the
//! whole wait; and the one line meshwrap (or its guard) writes to the
//! termination log when it fails itself or a signal stops the wait.

use crate::exit_status::tempdir;
use crate::support::*;

#[test]
fn the_wait_says_what_it_waits_for_and_the_timeout_names_each_url_and_its_last_answer() {
    let sidecar = FakeSidecar::ready();
    sidecar.set_ready(&[Reply::Status(503)]);
    let run = wrapped(&sidecar).args(["--timeout", "6s", "--", "true"]).run();
    run.assert_code(125);
    let url = sidecar.ready_url();
    run.assert_stderr_has(&format!(
        "still waiting for the sidecar after 5s: {url} (last: HTTP 503)"
    ))
    .assert_stderr_has("this is no Kubernetes pod; outside a mesh, use --sidecar none")
    .assert_stderr_has(&format!(
        "sidecar not ready in time (--timeout): {url} (last: HTTP 503)"
    ));
    // It answered during the wait: the quit is sent with its usual retries.
    assert_eq!(sidecar.quits(), 1);
}

#[test]
fn inside_a_pod_the_progress_line_has_no_hint() {
    let sidecar = FakeSidecar::ready();
    sidecar.set_ready(&[Reply::Status(503)]);
    let annotations = tempdir().join("annotations");
    std::fs::write(&annotations, "app=\"x\"\n").unwrap();
    let run = wrapped(&sidecar)
        .arg("--pod-annotations")
        .arg(&annotations)
        .args(["--timeout", "5500ms", "--", "true"])
        .run();
    run.assert_code(125)
        .assert_stderr_has("still waiting for the sidecar after 5s")
        .assert_stderr_lacks("no Kubernetes pod");
}

#[test]
fn a_sidecar_that_never_answered_gets_one_quit_attempt_not_retries() {
    // The quit port refuses too: a quit that never went out, which would
    // otherwise be retried for the whole --quit-timeout.
    let never = FakeSidecar::refusing();
    let mut mw = Meshwrap::new()
        .args([
            "--ready-url",
            &never.ready_url(),
            "--quit-url",
            &never.quit_url(),
            "--quit-timeout",
            "60s",
            "-v",
            "--",
            "true",
        ])
        .spawn();
    mw.wait_stderr("saw=\"connection refused\"");
    mw.signal(libc::SIGTERM);
    let run = mw.finish();
    run.assert_code(143)
        .assert_stderr_has("not retrying: it answered nothing while meshwrap waited for it");
    run.check(
        !run.stderr.contains("quit not sent, retrying"),
        "one attempt, not --quit-timeout's retries",
    );
}

#[test]
fn meshwraps_own_failure_is_the_termination_message() {
    let log = tempdir().join("termination-log");
    std::fs::write(&log, "").unwrap();
    let never = FakeSidecar::refusing();
    let run = wrapped(&never)
        .arg("--termination-log")
        .arg(&log)
        .args(["--timeout", "200ms", "--", "true"])
        .run();
    run.assert_code(125);
    let message = std::fs::read_to_string(&log).unwrap();
    assert!(
        message.starts_with("meshwrap: sidecar not ready in time (--timeout): http://127.0.0.1:")
            && message.ends_with("(last: connection refused); not running the command\n"),
        "{message:?}"
    );
    // A signal during the wait.
    std::fs::write(&log, "").unwrap();
    let mut mw = wrapped(&never)
        .arg("--termination-log")
        .arg(&log)
        .args(["-v", "--", "true"])
        .spawn();
    mw.wait_stderr("saw=\"connection refused\"");
    mw.signal(libc::SIGTERM);
    mw.finish().assert_code(143);
    let message = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        message,
        "meshwrap: SIGTERM arrived while waiting for the sidecar; the command never ran\n"
    );
}

#[test]
fn meshwraps_refusals_before_the_wait_are_the_termination_message_and_quit_the_sidecar() {
    let dir = tempdir();
    let log = dir.join("termination-log");
    let not_a_dir = dir.join("a-file");
    std::fs::write(&not_a_dir, "").unwrap();
    let guard_dir = not_a_dir.join("guard");
    let guard_dir = guard_dir.to_str().unwrap();
    for (flags, said) in [
        (vec!["--exec"], "meshwrap: --exec: meshwrap would have to stay to quit"),
        (vec!["--guard-dir", guard_dir], "meshwrap: --guard-dir"),
    ] {
        std::fs::write(&log, "").unwrap();
        let sidecar = FakeSidecar::ready();
        let run = wrapped(&sidecar)
            .arg("--termination-log")
            .arg(&log)
            .args(&flags)
            .args(["sh", "-c", "echo ran"])
            .run();
        run.assert_code(125).assert_stdout("").assert_stderr_has(said);
        let message = std::fs::read_to_string(&log).unwrap();
        assert!(
            message.starts_with(said) && message.ends_with('\n') && message.lines().count() == 1,
            "{flags:?}: {message:?}"
        );
        assert_eq!(sidecar.quits(), 1, "{flags:?}: the sidecar is quit");
        assert_eq!(sidecar.polls(), 0, "{flags:?}: nothing waited for");
    }
    // --quit-policy on-success: exit 125 is no success, so no quit.
    let sidecar = FakeSidecar::ready();
    wrapped(&sidecar)
        .args(["--quit-policy", "on-success", "--guard-dir", guard_dir, "true"])
        .run()
        .assert_code(125);
    assert_eq!(sidecar.quits(), 0);
}

#[test]
fn no_termination_log_is_created_where_none_is_mounted() {
    let log = tempdir().join("not-mounted");
    let never = FakeSidecar::refusing();
    wrapped(&never)
        .arg("--termination-log")
        .arg(&log)
        .args(["--timeout", "100ms", "--", "true"])
        .run()
        .assert_code(125);
    assert!(!log.exists(), "meshwrap created {}", log.display());
}

/// A ready URL that answers, but only 404, is there with a wrong path:
/// after its first minute the wait says so (and not before).
#[test]
fn a_ready_url_answering_404_for_a_minute_is_said_to_have_a_wrong_path() {
    let sidecar = FakeSidecar::ready();
    sidecar.set_ready(&[Reply::Status(404)]);
    let mut mw = wrapped(&sidecar).args(["--timeout", "2m", "true"]).spawn();
    let minute = std::time::Duration::from_secs(80);
    mw.wait_stderr_within("still waiting for the sidecar after 30s", minute);
    mw.wait_stderr_within("still waiting for the sidecar after 1m", minute);
    let line = mw.wait_stderr("answered 404 Not Found for over a minute: its path is likely wrong");
    assert!(line.contains(&sidecar.ready_url()), "{line}");
    mw.signal(libc::SIGTERM);
    let run = mw.finish();
    run.assert_code(143);
    let hint_at = run.stderr.find("path is likely wrong").unwrap();
    let minute_at = run.stderr.find("still waiting for the sidecar after 1m").unwrap();
    assert!(hint_at > minute_at, "not said before the first minute:\n{}", run.stderr);
}
