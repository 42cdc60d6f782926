//! Every catchable signal sent to meshwrap reaches the command, every repeat
//! too; `--forward-to group` reaches the whole process group.

use std::os::unix::process::CommandExt;

use crate::support::*;

/// What meshwrap forwards: 1-31 but KILL, STOP, CHLD and the fault signals,
/// plus every real-time signal, the libc-reserved 32-34 included.
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
    (1..=64).filter(|s| !skip.contains(s)).collect()
}

#[test]
fn every_catchable_signal_reaches_the_command() {
    let sidecar = FakeSidecar::ready();
    let mut mw = wrapped(&sidecar).args([probe_bin(), "signals".into()]).spawn();
    mw.wait_stdout("ready");
    // SIGTERM makes the probe exit, so it goes last.
    let mut sigs: Vec<i32> = forwardable().into_iter().filter(|&s| s != libc::SIGTERM).collect();
    sigs.push(libc::SIGTERM);
    assert!(
        [32, 33, 34, libc::SIGRTMIN(), libc::SIGRTMAX()]
            .iter()
            .all(|s| sigs.contains(s))
    );
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

/// The mask meshwrap holds while it runs: SIGCHLD and every forwarded
/// signal, nothing else (bit n-1 for signal n, as /proc shows it).
fn meshwraps_mask() -> u64 {
    forwardable()
        .into_iter()
        .chain([libc::SIGCHLD])
        .fold(0, |mask, sig| mask | 1 << (sig - 1))
}

/// A signal-mask line (`SigBlk:`) of /proc/PID/status.
fn mask_of(pid: i32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap();
    u64::from_str_radix(line[field.len()..].trim(), 16).unwrap()
}

#[test]
fn a_mask_left_by_meshwraps_parent_stays_neither_on_meshwrap_nor_on_the_command() {
    let sidecar = FakeSidecar::ready();
    let mut mw = wrapped(&sidecar);
    // A plain command with default dispositions: only an unblocked SIGTERM ends it.
    mw.args(["sh", "-c", "echo ready; exec sleep 60"]);
    // SAFETY: runs in the forked child before exec; sigprocmask is async-signal-safe.
    unsafe {
        mw.command().pre_exec(|| {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            // Two signals meshwrap forwards, and two it leaves to the kernel.
            for sig in [libc::SIGTERM, libc::SIGUSR1, libc::SIGABRT, libc::SIGSEGV] {
                libc::sigaddset(&mut set, sig);
            }
            libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            Ok(())
        });
    }
    let mut mw = mw.spawn();
    mw.wait_stdout("ready");
    // Logged once posix_spawn has returned: glibc's blocks every signal in
    // meshwrap until the command has exec'd, and "ready" may come first.
    mw.wait_stderr("command started");
    assert_eq!(
        mask_of(mw.pid(), "SigBlk:"),
        meshwraps_mask(),
        "meshwrap's mask is its own set, not its parent's added to it"
    );
    mw.signal(libc::SIGTERM);
    mw.finish()
        .assert_code(143)
        .assert_stderr_has("status=\"signal SIGTERM\"");
}

#[test]
fn the_libc_reserved_signals_32_to_34_reach_the_command_and_do_not_kill_meshwrap() {
    let mut mw = Meshwrap::new()
        .args(["--sidecar", "none", &probe_bin(), "signals"])
        .spawn();
    mw.wait_stdout("ready");
    for sig in [32, 33, 34] {
        mw.signal(sig);
        mw.wait_stdout(&format!("signal {sig}"));
    }
    mw.signal(libc::SIGTERM);
    mw.finish().assert_code(0);
}

#[test]
fn a_sigxfsz_from_meshwraps_own_log_write_is_not_forwarded() {
    let sidecar = FakeSidecar::ready();
    let log = std::env::temp_dir().join(format!("meshwrap-xfsz-{}.log", std::process::id()));
    let log_c = std::ffi::CString::new(log.to_str().unwrap()).unwrap();
    let mut mw = wrapped(&sidecar);
    mw.args([probe_bin(), "signals".into()]);
    // SAFETY: runs in the forked child before exec; open, dup2, close and
    // setrlimit are async-signal-safe, and the path was made before the fork.
    unsafe {
        mw.command().pre_exec(move || {
            // meshwrap's stderr: a file it may not grow (`ulimit -f 0`), so
            // every log line raises SIGXFSZ in meshwrap's own name.
            let fd = libc::open(log_c.as_ptr(), libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC, 0o600);
            libc::dup2(fd, 2);
            libc::close(fd);
            let none = libc::rlimit {
                rlim_cur: 0,
                rlim_max: libc::RLIM_INFINITY,
            };
            libc::setrlimit(libc::RLIMIT_FSIZE, &none);
            Ok(())
        });
    }
    let mut mw = mw.spawn();
    mw.wait_stdout("ready");
    // "command started" raised SIGXFSZ before meshwrap read any signal; it
    // is read before SIGWINCH (25 < 28), so a forwarded one would show first.
    mw.signal(libc::SIGWINCH);
    mw.wait_stdout(&format!("signal {}", libc::SIGWINCH));
    mw.signal(libc::SIGTERM);
    let run = mw.finish();
    let _ = std::fs::remove_file(&log);
    run.assert_code(0)
        .assert_stdout(&format!("ready\nsignal {}\nsignal {}\n", libc::SIGWINCH, libc::SIGTERM));
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

/// The state letter of /proc/PID/stat (R, S, T, ...).
fn state_of(pid: i32) -> char {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit_once(") ")
        .and_then(|(_, rest)| rest.chars().next())
        .unwrap_or('?')
}

#[test]
fn a_command_stopped_by_job_control_stops_meshwrap_and_resumes_with_it() {
    let sidecar = FakeSidecar::ready();
    let mut mw = wrapped(&sidecar)
        .args(["sh", "-c", "echo stopping; kill -TSTP $$; echo resumed"])
        .spawn();
    mw.wait_stdout("stopping");
    // Bounded: meshwrap must stop too, as a job's process would.
    let deadline = std::time::Instant::now() + BOUND;
    while state_of(mw.pid()) != 'T' {
        assert!(
            std::time::Instant::now() < deadline,
            "meshwrap did not stop with its command"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    mw.signal(libc::SIGCONT);
    mw.wait_stdout("resumed");
    mw.finish()
        .assert_code(0)
        .assert_stderr_has("the command was stopped signal=SIGTSTP")
        .assert_stderr_has("the command was continued");
}
