//! The `envoy` preset against the real Envoy 1.40.0 (see support/envoy.rs:
//! where the binary comes from, its bootstrap, how it warms late): meshwrap
//! waits for Envoy's own `/ready` on 127.0.0.1:15000, runs the command,
//! POSTs `/quitquitquit`, and Envoy exits by itself. What meshwrap sent is
//! counted from Envoy's side, in its admin access log: polls, quits and the
//! connections the polls came on (their source ports).
//!
//! Each test has a network namespace of its own (loopback only), so every
//! Envoy's admin is on the preset's port. They need root, ip and Envoy;
//! without them each says it was skipped and why (in CI, where
//! POD_TESTS_REQUIRED is set, it fails instead).

use std::time::Duration;

use crate::support::command::meshwrap_bin;
use crate::support::envoy::{self, Envoy, Warm};
use crate::support::pod::{Node, STUCK_AFTER};
use crate::support::*;

/// Envoy turns LIVE this long after it starts.
const WARMS: Duration = Duration::from_secs(1);

/// `meshwrap --sidecar envoy ARGS -- COMMAND` in the pod's namespace.
fn meshwrap(node: &Node, ns: &str, args: &[&str], command: &[&str]) -> Running {
    let bin = meshwrap_bin().to_string_lossy().into_owned();
    let line = [&[bin.as_str(), "--sidecar", "envoy"], args, &["--"], command].concat();
    node.exec(ns, &line)
}

/// Envoy exited by itself (on the quit), with status 0, and logged exactly
/// one quit, which it accepted.
fn exited_on_one_quit(envoy: Envoy) -> Envoy {
    let mut envoy = envoy;
    assert!(
        envoy.exits_within(STUCK_AFTER),
        "Envoy still runs {STUCK_AFTER:?} after meshwrap ended"
    );
    let quits = envoy.requests("POST", "/quitquitquit");
    assert_eq!(envoy.accepted_quits(), 1, "exactly one accepted quit: {quits:?}");
    assert_eq!(quits.len(), 1, "one quit sent: {quits:?}");
    envoy
}

/// The polls saw Envoy not ready (503) first, and the last one saw it LIVE:
/// meshwrap waited for /ready, and stopped polling at its first 200.
fn waited_for_live(envoy: &Envoy) {
    let polls = envoy.polls();
    let statuses: Vec<u16> = polls.iter().map(|r| r.status).collect();
    assert!(statuses.len() >= 2 && statuses[0] == 503, "polls: {statuses:?}");
    assert_eq!(statuses.iter().filter(|&&s| s == 200).count(), 1, "polls: {statuses:?}");
    assert_eq!(statuses.last(), Some(&200), "polls: {statuses:?}");
}

#[test]
fn envoy_1_the_preset_waits_for_live_and_keeps_the_commands_status_0_n_137() {
    if envoy::skip("envoy_1") {
        return;
    }
    for (script, code) in [("exit 0", 0), ("exit 7", 7), ("kill -KILL $$", 137)] {
        let (node, ns) = envoy::pod();
        let envoy = Envoy::start(&node, &ns, Warm::After(WARMS));
        let command = format!("echo started; {script}");
        let run = meshwrap(&node, &ns, &[], &["sh", "-c", &command]).finish();
        run.assert_code(code)
            .assert_stdout("started\n")
            .assert_stderr_has("sidecar quit");
        let envoy = exited_on_one_quit(envoy);
        waited_for_live(&envoy);
    }
}

#[test]
fn envoy_2_term_during_the_wait_and_during_the_command_gives_143_and_quits_envoy() {
    if envoy::skip("envoy_2") {
        return;
    }
    // During the wait: an Envoy that is never ready.
    let (node, ns) = envoy::pod();
    let envoy = Envoy::start(&node, &ns, Warm::Never);
    let mut mw = meshwrap(&node, &ns, &["--log-level", "debug"], &["sh", "-c", "echo started"]);
    mw.wait_stderr("sidecar not ready yet");
    mw.signal(libc::SIGTERM);
    mw.finish()
        .assert_code(143)
        .assert_stdout("")
        .assert_stderr_has("interrupted while waiting for the sidecar");
    let envoy = exited_on_one_quit(envoy);
    assert!(envoy.polls().iter().all(|r| r.status == 503), "{:?}", envoy.polls());

    // During the command.
    let (node, ns) = envoy::pod();
    let envoy = Envoy::start(&node, &ns, Warm::After(WARMS));
    let mut mw = meshwrap(&node, &ns, &[], &["sh", "-c", "echo running; exec sleep 60"]);
    mw.wait_stdout("running");
    mw.signal(libc::SIGTERM);
    mw.finish()
        .assert_code(143)
        .assert_stderr_has("status=\"signal SIGTERM\"");
    waited_for_live(&exited_on_one_quit(envoy));
}

#[test]
fn envoy_3_a_wait_that_times_out_runs_nothing_exits_125_and_quits_envoy() {
    if envoy::skip("envoy_3") {
        return;
    }
    let (node, ns) = envoy::pod();
    let envoy = Envoy::start(&node, &ns, Warm::Never);
    let run = meshwrap(&node, &ns, &["--timeout", "1s"], &["sh", "-c", "echo started"]).finish();
    run.assert_code(125)
        .assert_stdout("")
        .assert_stderr_has("sidecar not ready in time (--timeout)");
    let envoy = exited_on_one_quit(envoy);
    let polls = envoy.polls();
    assert!(polls.len() >= 2 && polls.iter().all(|r| r.status == 503), "{polls:?}");
}

#[test]
fn envoy_4_envoy_sigkilled_while_the_command_runs_keeps_the_commands_status() {
    if envoy::skip("envoy_4") {
        return;
    }
    let (node, ns) = envoy::pod();
    let mut envoy = Envoy::start(&node, &ns, Warm::After(WARMS));
    let mut mw = meshwrap(&node, &ns, &[], &["sh", "-c", "echo running; read line; exit 5"]);
    mw.wait_stdout("running");
    envoy.process.signal(libc::SIGKILL);
    assert!(envoy.exits_within(STUCK_AFTER), "SIGKILLed Envoy still runs");
    mw.write_stdin(b"go\n");
    let run = mw.finish();
    run.assert_code(5)
        .assert_stderr_has("sidecar already gone (its quit port refuses connections)");
    run.check(
        run.elapsed < Duration::from_secs(5),
        "the quit of a gone Envoy is not retried for --quit-timeout",
    );
}

#[test]
fn envoy_5_fast_polls_often_and_frugal_seldom_each_on_one_connection() {
    if envoy::skip("envoy_5") {
        return;
    }
    let mut counts = Vec::new();
    for poll in ["fast", "frugal"] {
        let (node, ns) = envoy::pod();
        let envoy = Envoy::start(&node, &ns, Warm::After(WARMS));
        let run = meshwrap(&node, &ns, &["--poll", poll], &["sh", "-c", "echo started"]).finish();
        run.assert_code(0).assert_stdout("started\n");
        let envoy = exited_on_one_quit(envoy);
        waited_for_live(&envoy);
        // Frugal's polls, a second apart, keep Envoy's connection too.
        assert_eq!(envoy.poll_connections(), 1, "--poll {poll}: {:?}", envoy.polls());
        counts.push(envoy.polls().len());
    }
    let (fast, frugal) = (counts[0], counts[1]);
    println!("polls of an Envoy LIVE after {WARMS:?}: fast {fast}, frugal {frugal}");
    // Fast: 10 ms plus 1 ms per 80 ms waited, some 60 polls in a second.
    assert!(fast >= 20, "fast polled {fast} times in {WARMS:?}");
    // Frugal: at once, then every 400 ms from 1 s: two or three polls.
    assert!((2..=4).contains(&frugal), "frugal polled {frugal} times in {WARMS:?}");
}

#[test]
fn envoy_6_every_poll_of_the_wait_comes_on_one_kept_connection() {
    if envoy::skip("envoy_6") {
        return;
    }
    let (node, ns) = envoy::pod();
    let envoy = Envoy::start(&node, &ns, Warm::After(WARMS));
    let run = meshwrap(&node, &ns, &[], &["sh", "-c", "echo started"]).finish();
    run.assert_code(0);
    let envoy = exited_on_one_quit(envoy);
    waited_for_live(&envoy);
    let polls = envoy.polls();
    // Envoy's admin answers chunked: each answer's body is read to its end
    // and the connection reused.
    assert!(polls.len() >= 20, "{} polls", polls.len());
    assert_eq!(
        envoy.poll_connections(),
        1,
        "{} polls on {} connections (source ports), not 1",
        polls.len(),
        envoy.poll_connections()
    );
}
