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
    run.assert_code(125)
        .assert_stdout("")
        .assert_stderr_has("--exec")
        .assert_stderr_has("--quit-policy never");
    run.check(run.stderr.lines().count() == 1, "one line");
    assert_eq!(sidecar.requests().len(), 0, "nothing waited for");
}

#[test]
fn exec_with_nothing_to_quit_and_a_missing_command() {
    Meshwrap::new()
        .env("MESHWRAP_EXEC", "true")
        .args(["--sidecar", "none", "/nonexistent/command"])
        .run()
        .assert_code(127);
}
