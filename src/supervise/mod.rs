//! The PID-1 machinery: spawn the command, forward signals to it, reap every
//! zombie, and turn the command's end into an exit code.
//!
//! Everything runs on one thread (a current-thread runtime, or, where none
//! can be made, `Child::supervise_blocking`'s `ppoll` loop), which is what
//! makes the following races impossible rather than unlikely:
//! - **Lost signals.** The forwarded signals are blocked before the runtime
//!   starts (see `signals`); one that arrives between the spawn and the first
//!   read stays pending in the kernel and is forwarded then.
//! - **A stolen status.** `reaper::reap` is the only `waitpid` caller. The
//!   command's pid is known before any reap pass can run, because spawning is
//!   synchronous on this same thread; so the pass that collects the command's
//!   zombie always knows it is the command's. (The vfork spawn and std's
//!   spawn reap their own child only when its exec failed, before returning,
//!   on this thread too.)
//! - **Signalling a recycled pid.** Signals are forwarded only until the
//!   command is reaped; an unreaped zombie keeps its pid (and its process
//!   group id) from being reused.
//! - **An inherited signal state.** meshwrap sets its own mask at start (a
//!   blocked SIGTERM would never reach it), and the command starts with an
//!   empty mask and every disposition at default (see `spawn`).
//! - **A stop nobody sees.** A command stopped by its terminal waits for a
//!   SIGCONT from job control, which watches meshwrap, not it. The reaper
//!   reports stops, and meshwrap stops with the command and continues it
//!   when continued itself (`Child::stopped`).
//! - **A signal lost at `--exec`.** Signals still queued when meshwrap
//!   becomes the command would meet their default action at the exec (kill
//!   meshwrap, or vanish for PID 1); they are read at the last moment
//!   instead (`spawn::exec`).

pub mod reaper;
pub mod signals;
mod spawn;
pub mod status;

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use libc::pid_t;

use crate::log;
pub use signals::Signals;
pub use spawn::{ExecError, SpawnError, exec};
pub use status::Status;

use reaper::Watched;

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
    /// The controlling terminal, when meshwrap gave the command its foreground.
    tty: Option<OwnedFd>,
}

/// Starts the command in its own process group with a clean signal state.
pub fn spawn(command: &[OsString]) -> Result<Child, SpawnError> {
    spawn::spawn(command).map(|(pid, tty)| Child { pid, tty })
}

impl Child {
    /// Forwards signals and reaps zombies until the command has ended.
    pub async fn supervise(&self, forward_to: ForwardTo, signals: &mut Signals) -> Status {
        loop {
            // Reap first: the command may have exited before this loop ran.
            if let Some(status) = self.reap_pass() {
                return status;
            }
            let mut sig = signals.recv().await;
            while sig != libc::SIGCHLD {
                self.forward(sig, forward_to);
                sig = signals.recv().await;
            }
        }
    }

    /// [`Child::supervise`] without a runtime, for when none could be made
    /// after the spawn: the same reap-first loop, sleeping in `ppoll` on
    /// the signalfd. (A stop by the terminal is handled the same way.)
    pub fn supervise_blocking(&self, forward_to: ForwardTo, signals: &mut Signals) -> Status {
        loop {
            if let Some(status) = self.reap_pass() {
                return status;
            }
            loop {
                match signals.try_recv() {
                    Some(libc::SIGCHLD) => break,
                    Some(sig) => self.forward(sig, forward_to),
                    None => signals::sleep_until_readable(signals.poll_fd()),
                }
            }
        }
    }

    /// One reap pass: the command's status once it has ended (a stop is
    /// handled here), orphans collected either way.
    fn reap_pass(&self) -> Option<Status> {
        let (found, orphans) = reaper::reap(Some(self.pid));
        if orphans > 0 {
            log!(Debug, "reaped orphaned processes", count = orphans);
        }
        match found {
            Some(Watched::Ended(raw)) => Some(Status::from_wait(raw)),
            Some(Watched::Stopped(sig)) => {
                self.stopped(sig);
                None
            }
            None => None,
        }
    }

    /// The command was stopped. By its terminal (SIGTSTP, SIGTTIN,
    /// SIGTTOU), it is part of a job whose shell waits on meshwrap, not on
    /// it: meshwrap stops too, so the shell sees the job stopped, and once
    /// continued (`fg`, `bg`) gives the command the terminal again if it is
    /// meshwrap's to give, and continues it. As PID 1 nothing could
    /// continue meshwrap, so it goes straight on; a command stopped for
    /// reading a terminal meshwrap cannot give it stays stopped (a SIGCONT
    /// from outside resumes it) rather than stop again at once, forever.
    /// A plain SIGSTOP is someone's to undo with SIGCONT.
    fn stopped(&self, sig: libc::c_int) {
        log!(Info, "the command was stopped", signal = &signals::name(sig));
        if !matches!(sig, libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU) {
            return;
        }
        let foreground = || self.tty.as_ref().is_some_and(spawn::in_foreground);
        // SAFETY: getpid and kill take and return plain integers.
        unsafe {
            if libc::getpid() != 1 {
                // Returns once meshwrap is continued.
                libc::kill(libc::getpid(), libc::SIGSTOP);
            } else if sig != libc::SIGTSTP && !foreground() {
                log!(
                    Warn,
                    "the command is stopped reading a terminal whose foreground meshwrap (PID 1) cannot give it; send it SIGCONT to resume it"
                );
                return;
            }
        }
        if let Some(tty) = self.tty.as_ref().filter(|_| foreground()) {
            // SAFETY: tcsetpgrp takes plain integers; SIGTTOU is blocked, so
            // a meshwrap that lost the foreground meanwhile would not stop.
            unsafe { libc::tcsetpgrp(tty.as_raw_fd(), self.pid) };
        }
        // SAFETY: kill takes plain integers; the group is the command's own.
        unsafe { libc::kill(-self.pid, libc::SIGCONT) };
        log!(Info, "the command was continued");
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
