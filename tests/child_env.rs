//! What the command inherits: a clean signal state, and its own stdio bytes
//! untouched (meshwrap never writes to stdout).

use std::os::unix::process::CommandExt;

use crate::support::*;

#[test]
fn the_command_starts_with_no_blocked_or_ignored_signals() {
    let sidecar = FakeSidecar::ready();
    let mut mw = wrapped(&sidecar);
    // grep, not the probe: Rust programs ignore SIGPIPE before main runs.
    mw.args(["grep", "-E", "^Sig(Blk|Ign):", "/proc/self/status"]);
    // Start meshwrap the way a careless parent would: some signals ignored,
    // some blocked. meshwrap installs no handlers (it reads a signalfd), so
    // only the reset in meshwrap's spawn clears them.
    // SAFETY: runs in the forked child before exec; signal and sigprocmask are async-signal-safe.
    unsafe {
        mw.command().pre_exec(|| {
            for sig in [libc::SIGUSR2, libc::SIGTRAP, libc::SIGSYS, libc::SIGPIPE, libc::SIGHUP] {
                libc::signal(sig, libc::SIG_IGN);
            }
            // Signals 32 and 34 are reserved by libc, whose signal() refuses
            // them; parents (cargo's process chain, for one) still leave them
            // ignored. The kernel's struct sigaction with SIG_IGN (1) first.
            let ignore = [1u64, 0, 0, 0];
            for sig in [32, 34] {
                libc::syscall(
                    libc::SYS_rt_sigaction,
                    sig,
                    ignore.as_ptr(),
                    std::ptr::null_mut::<u8>(),
                    8usize,
                );
            }
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGUSR1);
            libc::sigaddset(&mut set, libc::SIGINT);
            libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            Ok(())
        });
    }
    let run = mw.run();
    run.assert_code(0)
        .assert_stdout("SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n");
}

#[test]
fn stdin_and_stdout_bytes_pass_through_unchanged() {
    let sidecar = FakeSidecar::ready();
    let input: Vec<u8> = (0..64 * 1024).map(|i| (i * 7 % 256) as u8).collect();
    let mut mw = wrapped(&sidecar).arg("cat").spawn();
    mw.write_stdin(&input);
    mw.close_stdin();
    let run = mw.finish();
    run.assert_code(0);
    run.check(run.raw_stdout == input, "stdout is exactly what cat read from stdin");
}

#[test]
fn arguments_are_passed_as_given_without_a_shell() {
    let sidecar = FakeSidecar::ready();
    wrapped(&sidecar)
        .args(["printf", "%s|", "a b", "$HOME", "*", "--", "-v", "'q'"])
        .run()
        .assert_code(0)
        .assert_stdout("a b|$HOME|*|--|-v|'q'|");
}

#[test]
fn on_a_terminal_the_command_gets_the_foreground() {
    let sidecar = FakeSidecar::ready();
    // script runs meshwrap on a new pseudo-terminal; the command prints its
    // process group and the terminal's foreground group (fields 5 and 8).
    let inner = format!("{} cut -d' ' -f5,8 /proc/self/stat", meshwrap_line(&sidecar));
    let Some(run) = on_a_terminal("on_a_terminal_the_command_gets_the_foreground", &inner) else {
        return;
    };
    run.assert_code(0)
        .check(in_foreground(&run), "the command's group is the terminal's foreground");
}

/// Runs `inner` (a shell command line) on a new pseudo-terminal under script.
fn on_a_terminal(test: &str, inner: &str) -> Option<Run> {
    if skip_unless_able(test, lacks(&["/usr/bin/script"])) {
        return None;
    }
    Some(
        Meshwrap::program("/usr/bin/script")
            .args(["-qec", inner, "/dev/null"])
            .run(),
    )
}

/// Whether the command's process group (field 5 of /proc/self/stat, which
/// it printed with field 8) was the terminal's foreground group.
fn in_foreground(run: &Run) -> bool {
    let groups: Vec<&str> = run.stdout.split_whitespace().collect();
    groups.len() == 2 && groups[0] == groups[1]
}

/// meshwrap's command line for `script`, pointed at `sidecar`.
fn meshwrap_line(sidecar: &FakeSidecar) -> String {
    format!(
        "{} -q --ready-url {} --quit-url {}",
        crate::support::command::meshwrap_bin().display(),
        sidecar.ready_url(),
        sidecar.quit_url()
    )
}

#[test]
fn with_stdin_not_a_terminal_the_command_still_gets_the_sessions_terminal() {
    let sidecar = FakeSidecar::ready();
    // stdin is /dev/null, but the session has a terminal (Kubernetes' tty:
    // true without stdin: true): a command in a background group that read
    // /dev/tty would be stopped for good.
    let inner = format!(
        "{} cut -d' ' -f5,8 /proc/self/stat < /dev/null",
        meshwrap_line(&sidecar)
    );
    let Some(run) = on_a_terminal("with_stdin_not_a_terminal", &inner) else {
        return;
    };
    run.assert_code(0)
        .check(in_foreground(&run), "the command's group is the terminal's foreground");
}

#[test]
fn a_backgrounded_meshwrap_leaves_the_terminal_to_the_shell() {
    let sidecar = FakeSidecar::ready();
    // Under job control `&` puts meshwrap in a background group of its own;
    // its command must not take the foreground from the shell.
    let inner = format!(
        "sh -c 'set -m; {} cut -d\" \" -f5,8 /proc/self/stat & wait'",
        meshwrap_line(&sidecar)
    );
    let Some(run) = on_a_terminal("a_backgrounded_meshwrap", &inner) else {
        return;
    };
    run.assert_code(0);
    run.check(
        run.stdout.split_whitespace().count() == 2 && !in_foreground(&run),
        "the terminal's foreground stayed with the shell",
    );
}
