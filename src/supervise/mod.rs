//! The PID-1 machinery: spawn the command, forward signals to it, reap every
//! zombie, and turn the command's end into an exit code.
//!
//! Everything runs on one thread (a current-thread runtime), which is what
//! makes the following races impossible rather than unlikely:
//! - **Lost signals.** Handlers are registered before the spawn (see
//!   `signals`); a signal that arrives between the spawn and the first poll
//!   waits in tokio's queue and is forwarded then.
//! - **A stolen status.** `reaper::reap` is the only `waitpid` caller. The
//!   command's pid is known before any reap pass can run, because spawning is
//!   synchronous on this same thread; so the pass that collects the command's
//!   zombie always knows it is the command's. (std's spawn waits for its own
//!   pid only when exec failed, before returning, on this thread too.)
//! - **Signalling a recycled pid.** Signals are forwarded only until the
//!   command is reaped; an unreaped zombie keeps its pid (and its process
//!   group id) from being reused.
//! - **An inherited signal state.** meshwrap clears its own mask at start (a
//!   blocked SIGTERM would never reach it), and the `pre_exec` hook clears the
//!   command's mask and resets every disposition (an ignored signal stays
//!   ignored across exec); on a terminal it also hands the foreground to the
//!   command's new process group so Ctrl-C reaches it.

pub mod reaper;
pub mod signals;
pub mod status;

use std::ffi::OsString;
use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

use libc::pid_t;

use crate::log;
pub use signals::Signals;
pub use status::Status;

/// Where forwarded signals go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ForwardTo {
    /// The command's process only.
    Child,
    /// Every process in the command's process group.
    Group,
}

/// A started command, not yet reaped.
pub struct Child {
    pub pid: pid_t,
}

/// Why the command could not be started, with the exit code that reports it.
pub struct SpawnError {
    pub code: u8,
    pub error: io::Error,
}

/// Starts the command in its own process group with a clean signal state.
pub fn spawn(command: &[OsString]) -> Result<Child, SpawnError> {
    let (program, args) = command.split_first().ok_or_else(|| SpawnError {
        code: 125,
        error: io::Error::other("no command given"),
    })?;
    // Decided before the fork: the hook below may only make async-signal-safe calls.
    // SAFETY: isatty only inspects file descriptor 0.
    let on_terminal = unsafe { libc::isatty(0) } == 1;
    let mut cmd = Command::new(program);
    cmd.args(args).process_group(0);
    // SAFETY: the hook runs in the forked child before exec and makes only
    // async-signal-safe calls (signal, tcsetpgrp, getpid, rt_sigaction,
    // pthread_sigmask); it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if on_terminal {
                // A background group calling tcsetpgrp gets SIGTTOU unless it is ignored.
                libc::signal(libc::SIGTTOU, libc::SIG_IGN);
                libc::tcsetpgrp(0, libc::getpid());
            }
            reset_dispositions();
            // std does not reset the mask in every version; do not rely on it.
            signals::unblock_all()
        });
    }
    match cmd.spawn() {
        // The std handle is dropped without waiting: the reaper owns the status.
        Ok(child) => Ok(Child {
            pid: child.id() as pid_t,
        }),
        Err(error) => Err(SpawnError {
            code: not_started_code(&error),
            error,
        }),
    }
}

/// 127 for a command that is not there, 126 for one that cannot run.
fn not_started_code(error: &io::Error) -> u8 {
    match error.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ENOTDIR) => 127,
        _ => 126,
    }
}

/// Replaces meshwrap with the command (`--exec`), with the same clean signal
/// state a spawned command gets. Returns only if exec failed.
pub fn exec(command: &[OsString]) -> SpawnError {
    let Some((program, args)) = command.split_first() else {
        return SpawnError {
            code: 125,
            error: io::Error::other("no command given"),
        };
    };
    let mut cmd = Command::new(program);
    cmd.args(args);
    // SAFETY: the hook runs just before execve, in this process, and makes only
    // async-signal-safe calls (rt_sigaction, pthread_sigmask).
    unsafe {
        cmd.pre_exec(|| {
            reset_dispositions();
            signals::unblock_all()
        });
    }
    let error = cmd.exec();
    SpawnError {
        code: not_started_code(&error),
        error,
    }
}

/// Sets every signal's disposition to default, in the forked child.
///
/// The raw syscall, not libc's `signal`: glibc and musl refuse to touch the
/// signals they reserve (32-34), yet a parent may have left those ignored, and
/// an ignored signal stays ignored across exec.
fn reset_dispositions() {
    // The kernel's struct sigaction, all zero: SIG_DFL, no flags, no restorer,
    // empty mask. Zero means the same in every architecture's layout.
    let default_action = [0u64; 4];
    for sig in 1..=libc::SIGRTMAX() {
        if sig != libc::SIGKILL && sig != libc::SIGSTOP {
            // SAFETY: rt_sigaction reads `default_action` (large enough for the
            // kernel's struct with an 8-byte mask) and writes nothing back.
            unsafe {
                libc::syscall(
                    libc::SYS_rt_sigaction,
                    sig,
                    default_action.as_ptr(),
                    std::ptr::null_mut::<u8>(),
                    8usize,
                )
            };
        }
    }
}

impl Child {
    /// Forwards signals and reaps zombies until the command has ended.
    pub async fn supervise(&self, forward_to: ForwardTo, signals: &mut Signals) -> Status {
        loop {
            // Reap first: the command may have exited before this loop ran.
            let (found, orphans) = reaper::reap(Some(self.pid));
            if orphans > 0 {
                log!(Debug, "reaped orphaned processes", count = orphans);
            }
            if let Some(raw) = found {
                return Status::from_wait(raw);
            }
            let mut sig = signals.recv().await;
            while sig != libc::SIGCHLD {
                self.forward(sig, forward_to);
                sig = signals.recv().await;
            }
        }
    }

    fn forward(&self, sig: libc::c_int, forward_to: ForwardTo) {
        let target = match forward_to {
            ForwardTo::Child => self.pid,
            ForwardTo::Group => -self.pid,
        };
        // SAFETY: kill takes plain integers; libc::kill also reaches real-time
        // signals, which nix's Signal type cannot represent.
        let result = unsafe { libc::kill(target, sig) };
        if result == 0 {
            log!(Debug, "forwarded signal", signal = &signals::name(sig), to = target);
        } else {
            let error = io::Error::last_os_error().to_string();
            log!(
                Debug,
                "could not forward signal",
                signal = &signals::name(sig),
                to = target,
                error = &error
            );
        }
    }
}

/// Reaps whatever has exited while no command runs (orphans adopted as PID 1).
pub fn reap_orphans() {
    let (_, orphans) = reaper::reap(None);
    if orphans > 0 {
        log!(Debug, "reaped orphaned processes", count = orphans);
    }
}
