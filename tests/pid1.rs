//! meshwrap as PID 1 of its own PID namespace, as in a container: orphans are
//! reaped, SIGTERM is forwarded, the exit status is right. Needs root for
//! `unshare --pid`; elsewhere each test says it was skipped and why, and in
//! CI (POD_TESTS_REQUIRED) it fails instead. When not PID 1, meshwrap is a
//! child subreaper, and the same reaping test runs there.

use crate::support::*;

/// `unshare --pid --fork --mount-proc meshwrap ...`, or `None` with the reason printed.
fn as_pid1(test: &str) -> Option<Meshwrap> {
    if skip_unless_able(test, lacks_root_or(&["/usr/bin/unshare"])) {
        return None;
    }
    let mut mw = Meshwrap::program("/usr/bin/unshare");
    mw.args(["--pid", "--fork", "--mount-proc"])
        .arg(crate::support::command::meshwrap_bin());
    Some(mw)
}

#[test]
fn as_pid1_orphans_are_reaped_and_the_status_is_kept() {
    let Some(mut mw) = as_pid1("as_pid1_orphans_are_reaped") else {
        return;
    };
    let sidecar = FakeSidecar::ready();
    let mut mw = mw
        .args(sidecar.flags())
        .args([probe_bin(), "orphans".into(), "100".into()])
        .spawn();
    mw.wait_stdout("reaped 100");
    mw.wait_stdout("ppid 1");
    mw.close_stdin();
    mw.finish().assert_code(0);
    assert_eq!(sidecar.quits(), 1);
}

#[test]
fn as_pid1_sigterm_is_forwarded_and_exits_143() {
    let Some(mut mw) = as_pid1("as_pid1_sigterm_is_forwarded") else {
        return;
    };
    let sidecar = FakeSidecar::ready();
    let mut mw = mw
        .args(sidecar.flags())
        .args(["sh", "-c", "echo ready; exec sleep 60"])
        .spawn();
    mw.wait_stdout("ready");
    // unshare does not forward signals; send SIGTERM to meshwrap itself, its child.
    let meshwrap = crate::support::pod::child_of(mw.pid());
    // SAFETY: kill takes plain integers.
    assert_eq!(unsafe { libc::kill(meshwrap, libc::SIGTERM) }, 0);
    mw.finish()
        .assert_code(143)
        .assert_stderr_has("status=\"signal SIGTERM\"");
    assert_eq!(sidecar.quits(), 1);
}

#[test]
fn as_subreaper_orphans_are_reaped() {
    let sidecar = FakeSidecar::ready();
    let mut mw = wrapped(&sidecar)
        .args([probe_bin(), "orphans".into(), "100".into()])
        .spawn();
    mw.wait_stdout("reaped 100");
    let ppid = mw.wait_for(Stream::Stdout, "ppid ", false);
    assert_eq!(ppid, format!("ppid {}", mw.pid()), "the probe's parent is meshwrap");
    mw.close_stdin();
    mw.finish().assert_code(0);
}

#[test]
fn as_pid1_the_libc_reserved_signals_32_to_34_reach_the_command() {
    let Some(mut mw) = as_pid1("as_pid1_the_libc_reserved_signals") else {
        return;
    };
    let mut mw = mw.args(["--sidecar", "none", &probe_bin(), "signals"]).spawn();
    mw.wait_stdout("ready");
    let meshwrap = crate::support::pod::child_of(mw.pid());
    for sig in [32, 33, 34] {
        // SAFETY: kill takes plain integers.
        assert_eq!(unsafe { libc::kill(meshwrap, sig) }, 0);
        mw.wait_stdout(&format!("signal {sig}"));
    }
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(meshwrap, libc::SIGTERM) }, 0);
    mw.finish().assert_code(0);
}

#[test]
fn as_pid1_orphans_are_reaped_while_waiting_for_the_sidecar() {
    // The readiness wait reads the signalfd itself (no runtime yet): a
    // SIGCHLD for an orphan the namespace hands PID 1 must be reaped there
    // too, or a zombie would sit in the process table for the whole wait.
    let test = "as_pid1_orphans_are_reaped_while_waiting";
    let Some(mut mw) = as_pid1(test) else { return };
    if skip_unless_able(test, lacks(&["/usr/bin/nsenter"])) {
        return;
    }
    let sidecar = FakeSidecar::ready();
    sidecar.set_ready(&[Reply::Status(503)]);
    let mut mw = mw
        .args(sidecar.flags())
        .args(["-v", "--timeout", "30s", "true"])
        .spawn();
    mw.wait_stderr("saw=\"HTTP 503\"");
    let meshwrap = crate::support::pod::child_of(mw.pid());
    // A shell in meshwrap's PID namespace starts a sleep and exits: the
    // sleep is an orphan, and the namespace's init, meshwrap, adopts it.
    let entered = std::process::Command::new("/usr/bin/nsenter")
        .args(["-t", &meshwrap.to_string(), "-p", "--", "sh", "-c", "sleep 1 & exit 0"])
        .status()
        .unwrap();
    assert!(entered.success(), "nsenter: {entered}");
    let children = || std::fs::read_to_string(format!("/proc/{meshwrap}/task/{meshwrap}/children")).unwrap_or_default();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let orphan = loop {
        if let Some(pid) = children().split_whitespace().next() {
            break pid.to_string();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "meshwrap never adopted the orphan"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    // Once the sleep exits, its zombie must go: reaped by meshwrap.
    while std::path::Path::new(&format!("/proc/{orphan}")).exists() {
        let state = std::fs::read_to_string(format!("/proc/{orphan}/stat")).unwrap_or_default();
        assert!(
            std::time::Instant::now() < deadline,
            "the orphan {orphan} was not reaped during the wait: {state}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    sidecar.set_ready(&[Reply::Status(200)]);
    mw.finish()
        .assert_code(0)
        .assert_stderr_has("reaped orphaned processes");
}
