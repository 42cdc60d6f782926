//! Every catchable signal sent to meshwrap reaches the command, every repeat
//! too; `--forward-to group` reaches the whole process group.

use std::os::unix::process::CommandExt;

use crate::support::*;

/// What meshwrap forwards: 1-31 but KILL, STOP, CHLD and the fault signals,
/// plus the real-time signals.
fn forwardable() -> Vec<i32> {
    let skip = [
        libc::SIGKILL,
        libc::SIGSTOP,
        libc::SIGCHLD,
        libc::SIGILL,
        libc::SIGFPE,
        libc::SIGSEGV,
        libc::SIGBUS,
        libc::SIGABRT,
        libc::SIGTRAP,
        libc::SIGSYS,
    ];
    (1..32)
        .filter(|s| !skip.contains(s))
        .chain(libc::SIGRTMIN()..=libc::SIGRTMAX())
        .collect()
}

#[test]
fn every_catchable_signal_reaches_the_command() {
    let sidecar = FakeSidecar::ready();
    let mut mw = wrapped(&sidecar).args([probe_bin(), "signals".into()]).spawn();
    mw.wait_stdout("ready");
    // SIGTERM makes the probe exit, so it goes last.
    let mut sigs: Vec<i32> = forwardable().into_iter().filter(|&s| s != libc::SIGTERM).collect();
    sigs.push(libc::SIGTERM);
    assert!(sigs.contains(&(libc::SIGRTMIN())) && sigs.contains(&(libc::SIGRTMIN() + 5)));
    for sig in sigs {
        mw.signal(sig);
        mw.wait_stdout(&format!("signal {sig}"));
    }
    mw.finish().assert_code(0);
}

#[test]
fn repeated_signals_are_each_forwarded() {
    let sidecar = FakeSidecar::ready();
    let mut mw = wrapped(&sidecar).args([probe_bin(), "signals".into()]).spawn();
    mw.wait_stdout("ready");
    for _ in 0..5 {
        mw.signal(libc::SIGUSR1);
        mw.wait_stdout(&format!("signal {}", libc::SIGUSR1));
    }
    mw.signal(libc::SIGTERM);
    let run = mw.finish();
    run.assert_code(0);
    let usr1 = run
        .stdout
        .lines()
        .filter(|l| *l == format!("signal {}", libc::SIGUSR1))
        .count();
    run.check(usr1 == 5, "five SIGUSR1 forwarded");
}

#[test]
fn forward_to_group_reaches_a_grandchild() {
    let sidecar = FakeSidecar::ready();
    let mut mw = wrapped(&sidecar)
        .args(["--forward-to", "group", &probe_bin(), "signals", "--fork"])
        .spawn();
    mw.wait_stdout("leader ready");
    mw.wait_stdout("member ready");
    mw.signal(libc::SIGUSR2);
    mw.wait_stdout(&format!("member signal {}", libc::SIGUSR2));
    // TERM ends the leader, and the member dies with it.
    mw.signal(libc::SIGTERM);
    mw.finish().assert_code(0);
}

#[test]
fn forward_to_child_spares_the_rest_of_the_group() {
    let sidecar = FakeSidecar::ready();
    let mut mw = wrapped(&sidecar).args([&probe_bin(), "signals", "--fork"]).spawn();
    mw.wait_stdout("leader ready");
    mw.wait_stdout("member ready");
    mw.signal(libc::SIGUSR2);
    mw.wait_stdout(&format!("leader signal {}", libc::SIGUSR2));
    mw.signal(libc::SIGTERM);
    let run = mw.finish();
    run.assert_code(0);
    run.check(
        !run.stdout.contains("member signal"),
        "only the command itself was signalled",
    );
}

#[test]
fn sigterm_to_meshwrap_ends_a_sleeping_command_with_143() {
    let sidecar = FakeSidecar::ready();
    let mut mw = wrapped(&sidecar)
        .args(["sh", "-c", "echo ready; exec sleep 60"])
        .spawn();
    mw.wait_stdout("ready");
    mw.signal(libc::SIGTERM);
    mw.finish().assert_code(143).assert_stderr_has("sidecar quit");
    assert_eq!(sidecar.quits(), 1);
}

#[test]
fn signals_blocked_by_meshwraps_parent_still_reach_the_command() {
    let sidecar = FakeSidecar::ready();
    let mut mw = wrapped(&sidecar);
    mw.args([probe_bin(), "signals".into()]);
    // SAFETY: runs in the forked child before exec; sigprocmask is async-signal-safe.
    unsafe {
        mw.command().pre_exec(|| {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGTERM);
            libc::sigaddset(&mut set, libc::SIGUSR1);
            libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            Ok(())
        });
    }
    let mut mw = mw.spawn();
    mw.wait_stdout("ready");
    mw.signal(libc::SIGUSR1);
    mw.wait_stdout(&format!("signal {}", libc::SIGUSR1));
    mw.signal(libc::SIGTERM);
    mw.finish().assert_code(0);
}

#[test]
fn a_sigpipe_from_meshwraps_own_broken_stderr_is_not_forwarded() {
    let sidecar = FakeSidecar::ready();
    let mut mw = wrapped(&sidecar);
    mw.args([probe_bin(), "signals".into()]);
    // SAFETY: runs in the forked child before exec; pipe, close and dup2 are async-signal-safe.
    unsafe {
        mw.command().pre_exec(|| {
            // meshwrap's stderr: a pipe nobody reads, so every log line raises SIGPIPE.
            let mut fds = [0; 2];
            libc::pipe(fds.as_mut_ptr());
            libc::close(fds[0]);
            libc::dup2(fds[1], 2);
            libc::close(fds[1]);
            Ok(())
        });
    }
    let mut mw = mw.spawn();
    mw.wait_stdout("ready");
    // "command started" was logged before meshwrap reads any signal, so its
    // SIGPIPE is pending by now, and it is read before SIGTERM (13 < 15).
    mw.signal(libc::SIGTERM);
    mw.finish()
        .assert_code(0)
        .assert_stdout(&format!("ready\nsignal {}\n", libc::SIGTERM));
}
