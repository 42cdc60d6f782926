//! Signal reception: every forwardable signal and SIGCHLD are blocked and
//! read from one signalfd, set up before meshwrap does anything else.
//!
//! Why a signalfd rather than a handler per signal:
//! - **PID 1 keeps what it blocks.** The kernel drops a signal sent to PID 1
//!   whose action is the default, unless the signal is blocked: blocked
//!   signals stay pending, and the signalfd reads them. So blocking first
//!   is what makes a SIGTERM that arrives during start-up count.
//! - **Cheap start.** One sigprocmask and one signalfd, where a handler per
//!   signal cost about 110 rt_sigaction calls and an allocation churn that
//!   musl's malloc turned into a hundred mmap/munmap pairs at every start.
//! - **The sender is known.** Each read carries a siginfo, so a SIGPIPE the
//!   kernel raised for meshwrap's own broken stderr (sent "by" meshwrap's
//!   own pid) is not forwarded to the command as if a user had sent it.
//!
//! The mask is inherited across fork and exec, so the command is started
//! with an empty mask (see `spawn`). Every thread must block these signals,
//! or the kernel would deliver them there with their default action; the
//! mask is set before the runtime exists, and threads inherit it. Standard
//! signals coalesce in the kernel while pending, real-time ones queue; the
//! kernel hands out the lowest-numbered pending signal first, so a flood of
//! one signal cannot keep SIGTERM from being read.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use libc::c_int;
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

/// Signals meshwrap never forwards: uncatchable ones, SIGCHLD (it reports our
/// own children), and fault signals, which the kernel sends to the faulting
/// process itself and which mean nothing to a healthy child.
const NOT_FORWARDED: [c_int; 10] = [
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

/// Every signal meshwrap forwards: 1-31 but the above, and the real-time ones.
pub fn forwardable() -> impl Iterator<Item = c_int> {
    (1..32)
        .filter(|s| !NOT_FORWARDED.contains(s))
        .chain(libc::SIGRTMIN()..=libc::SIGRTMAX())
}

/// The signals that stop the readiness wait: the ones that mean "shut down".
pub fn is_termination(sig: c_int) -> bool {
    matches!(sig, libc::SIGTERM | libc::SIGINT | libc::SIGHUP | libc::SIGQUIT)
}

/// The set meshwrap blocks and reads: SIGCHLD and every forwardable signal.
fn received() -> libc::sigset_t {
    // SAFETY: sigemptyset initialises the set before sigaddset adds to it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in forwardable().chain([libc::SIGCHLD]) {
            libc::sigaddset(&mut set, sig);
        }
        set
    }
}

/// Blocks SIGCHLD and every forwardable signal, and unblocks everything else
/// a parent may have blocked. Call before any thread exists.
pub fn block() -> io::Result<()> {
    // An ignored SIGCHLD survives exec and makes the kernel reap children
    // itself, status and all; blocking does not stop that, the default does.
    // SAFETY: signal takes plain integers; SIG_DFL installs no handler.
    unsafe { libc::signal(libc::SIGCHLD, libc::SIG_DFL) };
    let set = received();
    // SAFETY: `set` is a valid, initialised sigset_t.
    match unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut()) } {
        0 => Ok(()),
        e => Err(io::Error::from_raw_os_error(e)),
    }
}

pub struct Signals {
    fd: AsyncFd<OwnedFd>,
    /// Signals read but not yet handed out (one read may return several).
    pending: VecDeque<c_int>,
    /// meshwrap's pid, the sender the kernel names for signals it raises for us.
    me: u32,
}

impl Signals {
    /// Opens the signalfd for the blocked set. Must run inside the runtime,
    /// after `block`.
    pub fn install() -> io::Result<Signals> {
        let set = received();
        // SAFETY: `set` is initialised; -1 asks for a new descriptor.
        let fd = unsafe { libc::signalfd(-1, &set, libc::SFD_NONBLOCK | libc::SFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: signalfd returned a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: the OwnedFd stays open, and the same descriptor, for as long as the AsyncFd holds it.
        let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }.map_err(|e| e.into_parts().1)?;
        Ok(Signals {
            fd,
            pending: VecDeque::new(),
            me: std::process::id(),
        })
    }

    /// The next signal received (SIGCHLD included).
    pub async fn recv(&mut self) -> c_int {
        loop {
            if let Some(sig) = self.pending.pop_front() {
                return sig;
            }
            let Ok(mut ready) = self.fd.readable().await else {
                // Only at runtime shutdown; nothing will arrive any more.
                return std::future::pending().await;
            };
            // Reading until WouldBlock clears the readiness; a signalfd read
            // cannot fail otherwise with a buffer this size.
            let _ = ready.try_io(|fd| read_signals(fd.get_ref().as_raw_fd(), self.me, &mut self.pending));
        }
    }
}

/// Reads every queued signal into `into`; WouldBlock when none is left.
fn read_signals(fd: c_int, me: u32, into: &mut VecDeque<c_int>) -> io::Result<()> {
    // SAFETY: an all-zero signalfd_siginfo is a valid value of this plain struct.
    let mut infos: [libc::signalfd_siginfo; 16] = unsafe { std::mem::zeroed() };
    // SAFETY: the buffer is valid for writes of its full size.
    let n = unsafe { libc::read(fd, infos.as_mut_ptr().cast(), size_of_val(&infos)) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let count = n as usize / size_of::<libc::signalfd_siginfo>();
    for info in &infos[..count] {
        let sig = info.ssi_signo as c_int;
        // The kernel raises SIGPIPE for a write of meshwrap's own to a closed pipe
        // (its stderr gone) in meshwrap's name; that one is not the command's business.
        if sig == libc::SIGPIPE && info.ssi_pid == me {
            continue;
        }
        into.push_back(sig);
    }
    Ok(())
}

/// Clears the calling thread's signal mask. Async-signal-safe, so the spawn
/// hook uses it too.
pub fn unblock_all() -> io::Result<()> {
    // SAFETY: `empty` is a valid sigset_t, initialised by sigemptyset before use.
    let result = unsafe {
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::pthread_sigmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut())
    };
    if result == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(result))
    }
}

/// `SIGTERM`, `SIGRTMIN+3`, ... for logs.
pub fn name(sig: c_int) -> String {
    const NAMES: [&str; 32] = [
        "0",
        "SIGHUP",
        "SIGINT",
        "SIGQUIT",
        "SIGILL",
        "SIGTRAP",
        "SIGABRT",
        "SIGBUS",
        "SIGFPE",
        "SIGKILL",
        "SIGUSR1",
        "SIGSEGV",
        "SIGUSR2",
        "SIGPIPE",
        "SIGALRM",
        "SIGTERM",
        "SIGSTKFLT",
        "SIGCHLD",
        "SIGCONT",
        "SIGSTOP",
        "SIGTSTP",
        "SIGTTIN",
        "SIGTTOU",
        "SIGURG",
        "SIGXCPU",
        "SIGXFSZ",
        "SIGVTALRM",
        "SIGPROF",
        "SIGWINCH",
        "SIGIO",
        "SIGPWR",
        "SIGSYS",
    ];
    match usize::try_from(sig) {
        Ok(n) if n > 0 && n < NAMES.len() => NAMES[n].to_string(),
        _ if sig >= libc::SIGRTMIN() && sig <= libc::SIGRTMAX() => format!("SIGRTMIN+{}", sig - libc::SIGRTMIN()),
        _ => format!("signal {sig}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forwards_what_the_issue_lists() {
        let all: Vec<c_int> = forwardable().collect();
        for sig in [
            libc::SIGTERM,
            libc::SIGINT,
            libc::SIGHUP,
            libc::SIGQUIT,
            libc::SIGUSR1,
            libc::SIGWINCH,
            libc::SIGCONT,
        ] {
            assert!(all.contains(&sig), "{}", name(sig));
        }
        for sig in NOT_FORWARDED {
            assert!(!all.contains(&sig), "{}", name(sig));
        }
        assert!(all.contains(&libc::SIGRTMIN()) && all.contains(&libc::SIGRTMAX()));
    }

    #[test]
    fn names() {
        assert_eq!(name(libc::SIGTERM), "SIGTERM");
        assert_eq!(name(libc::SIGRTMIN() + 2), "SIGRTMIN+2");
    }
}
