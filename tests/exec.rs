//! `--exec`: after the wait meshwrap becomes the command (same pid), but only
//! when no quit will be needed.

use crate::support::*;

#[test]
fn exec_replaces_meshwrap_with_the_command() {
    let sidecar = FakeSidecar::ready();
    let mut mw = wrapped(&sidecar)
        .args(["--exec", "--quit-policy", "never", "sh", "-c", "echo pid $$; exit 7"])
        .spawn();
    let line = mw.wait_for(Stream::Stdout, "pid ", false);
    assert_eq!(
        line,
        format!("pid {}", mw.pid()),
        "the command runs as meshwrap's own process"
    );
    mw.finish().assert_code(7);
    assert_eq!((sidecar.polls(), sidecar.quits()), (1, 0), "waited, never quit");
}

#[test]
fn exec_is_refused_while_a_quit_would_be_needed() {
    let sidecar = FakeSidecar::ready();
    let run = wrapped(&sidecar).args(["--exec", "sh", "-c", "echo ran"]).run();
    run.assert_code(125).assert_stdout("");
    let first = run.stderr.lines().next().unwrap_or_default();
    run.check(
        first.starts_with("meshwrap: --exec: ") && first.contains("--quit-policy never"),
        "one line says why, first",
    );
    // Nothing waited for; the sidecar that may be running is quit, as
    // after any exit 125 (tests/wait_speaks.rs).
    assert_eq!(sidecar.polls(), 0, "nothing waited for");
    assert_eq!(sidecar.quits(), 1);
}

#[test]
fn exec_with_nothing_to_quit_and_a_missing_command() {
    Meshwrap::new()
        .env("MESHWRAP_EXEC", "true")
        .args(["--sidecar", "none", "/nonexistent/command"])
        .run()
        .assert_code(127);
}

#[test]
fn exec_with_a_signal_already_pending_still_runs_the_command() {
    // SIGUSR1 arrives before meshwrap has done anything: it must neither
    // kill meshwrap at the exec (138) nor reach the command late.
    Meshwrap::program(probe_bin())
        .args(["pending".to_string(), libc::SIGUSR1.to_string()])
        .arg(crate::support::command::meshwrap_bin())
        .args(["--exec", "--sidecar", "none", "sh", "-c", "echo ran; exit 7"])
        .run()
        .assert_code(7)
        .assert_stdout("ran\n");
}

#[test]
fn as_pid1_exec_with_a_sigterm_pending_does_not_run_the_command_and_exits_143() {
    if skip_unless_able(
        "as_pid1_exec_with_a_sigterm_pending",
        lacks_root_or(&["/usr/bin/unshare"]),
    ) {
        return;
    }
    // As PID 1 a SIGTERM with its default action is dropped: without the
    // last drain before the exec the command would run as if none came.
    Meshwrap::program("/usr/bin/unshare")
        .args(["--pid", "--fork", "--mount-proc", &probe_bin(), "pending"])
        .arg(libc::SIGTERM.to_string())
        .arg(crate::support::command::meshwrap_bin())
        .args(["--exec", "--sidecar", "none", "sh", "-c", "echo ran; exit 7"])
        .run()
        .assert_code(143)
        .assert_stdout("")
        .assert_stderr_has("interrupted before the command started; not running it signal=SIGTERM");
}

#[test]
fn exec_does_not_leave_the_command_a_child_subreaper() {
    Meshwrap::new()
        .args(["--exec", "--sidecar", "none", &probe_bin(), "subreaper"])
        .run()
        .assert_code(0)
        .assert_stdout("subreaper 0\n");
}
