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
