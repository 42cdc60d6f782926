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
//! - **The sender is known.** Each read carries a siginfo, so a SIGPIPE or
//!   SIGXFSZ the kernel raised for meshwrap's own write to stderr (sent "by"
//!   meshwrap's own pid) is not forwarded to the command as if a user had
//!   sent it.
//! - **Every signal number.** The mask is the kernel's 64-bit one, set with
//!   raw syscalls: both libcs refuse to put the signals they reserve (32-34
//!   in musl) into a `sigset_t`, and one meshwrap did not block would kill
//!   it, or vanish as PID 1.
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

/// The kernel's signals: 1 to 64. Above 31 all are real-time signals to
/// the kernel, though each libc keeps the first few (32-33 in glibc, 32-34
/// in musl) for itself and starts its `SIGRTMIN` after them.
const LAST: c_int = 64;

/// Every signal meshwrap forwards: 1-31 but the above, and every real-time
/// signal, the libc-reserved 32-34 included. Those are ordinary signals to
/// the command (a glibc program calls 34 SIGRTMIN), and a signal meshwrap
/// neither blocks nor handles would kill it (162 for 34) or, as PID 1, be
/// dropped; meshwrap uses no libc feature that needs them (thread
/// cancellation, timers with thread notification, setuid across threads).
pub fn forwardable() -> impl Iterator<Item = c_int> {
    (1..=LAST).filter(|s| !NOT_FORWARDED.contains(s))
}

/// The signals that stop the readiness wait: the ones that mean "shut down".
pub fn is_termination(sig: c_int) -> bool {
    matches!(sig, libc::SIGTERM | libc::SIGINT | libc::SIGHUP | libc::SIGQUIT)
}

/// The set meshwrap blocks and reads, SIGCHLD and every forwardable
/// signal, as the kernel's 64-bit mask (bit n-1 for signal n). Raw, because
/// both libcs refuse to put their reserved signals into a `sigset_t`.
/// Computed once, at compile time: folding the iterator at each start took
/// about 8,000 instructions.
fn received() -> u64 {
    const RECEIVED: u64 = {
        let (mut mask, mut sig) = (1u64 << (libc::SIGCHLD - 1), 1);
        while sig <= LAST {
            let mut forwarded = true;
            let mut i = 0;
            while i < NOT_FORWARDED.len() {
                forwarded &= NOT_FORWARDED[i] != sig;
                i += 1;
            }
            if forwarded {
                mask |= 1 << (sig - 1);
            }
            sig += 1;
        }
        mask
    };
    RECEIVED
}

/// Sets the calling thread's mask to exactly `mask` (kernel form).
/// Async-signal-safe, so the spawn hook uses it too.
fn set_mask(mask: u64) -> io::Result<()> {
    // SAFETY: rt_sigprocmask reads 8 bytes from `mask`, which outlives the
    // call, and writes nothing (no old mask asked for).
    let result = unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            &raw const mask,
            std::ptr::null_mut::<u64>(),
            size_of::<u64>(),
        )
    };
    if result == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Blocks SIGCHLD and every forwardable signal, and unblocks everything else
/// a parent may have blocked. Call before any thread exists.
pub fn block() -> io::Result<()> {
    // An ignored SIGCHLD survives exec and makes the kernel reap children
    // itself, status and all; blocking does not stop that, the default does.
    // SAFETY: signal takes plain integers; SIG_DFL installs no handler.
    unsafe { libc::signal(libc::SIGCHLD, libc::SIG_DFL) };
    set_mask(received())
}

pub struct Signals {
    /// The signalfd's registration with the runtime, made at the first
    /// `recv`: the readiness wait reads the signalfd before any runtime
    /// exists (`try_recv`). Declared first, so it is dropped (deregistered)
    /// before the descriptor closes. One runtime per process: a registration
    /// outlives none.
    registered: Option<AsyncFd<Raw>>,
    /// None once [`Signals::close`] gave its descriptor back.
    fd: Option<OwnedFd>,
    /// Signals read but not yet handed out (one read may return several).
    pending: VecDeque<c_int>,
    /// meshwrap's pid, the sender the kernel names for signals it raises for us.
    me: u32,
}

/// The signalfd as the runtime sees it: borrowed from `Signals::fd`.
struct Raw(c_int);

impl AsRawFd for Raw {
    fn as_raw_fd(&self) -> c_int {
        self.0
    }
}

impl Signals {
    /// Opens the signalfd for the blocked set, after `block`. Needs no
    /// runtime: one is made only once the command has started.
    pub fn open() -> io::Result<Signals> {
        let set = received();
        // SAFETY: signalfd4 reads the 8-byte mask, which outlives the call;
        // -1 asks for a new descriptor.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_signalfd4,
                -1,
                &raw const set,
                size_of::<u64>(),
                libc::SFD_NONBLOCK | libc::SFD_CLOEXEC,
            )
        } as c_int;
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Signals {
            registered: None,
            // SAFETY: signalfd returned a new descriptor that nothing else owns.
            fd: Some(unsafe { OwnedFd::from_raw_fd(fd) }),
            pending: VecDeque::new(),
            me: std::process::id(),
        })
    }

    /// The next signal received (SIGCHLD included). Must run inside the runtime.
    pub async fn recv(&mut self) -> c_int {
        loop {
            if let Some(sig) = self.pending.pop_front() {
                return sig;
            }
            if self.registered.is_none() {
                let raw = Raw(self.raw_fd());
                // SAFETY: `fd` stays open, and the same descriptor, for as
                // long as the registration exists: it is dropped first.
                match unsafe { AsyncFd::register_with_interest(raw, Interest::READABLE) } {
                    Ok(fd) => self.registered = Some(fd),
                    // The reactor refused it: nothing could wake this.
                    Err(_) => return std::future::pending().await,
                }
            }
            let Some(registered) = &self.registered else { continue };
            let Ok(mut ready) = registered.readable().await else {
                // Only at runtime shutdown; nothing will arrive any more.
                return std::future::pending().await;
            };
            // Reading until WouldBlock clears the readiness; a signalfd read
            // cannot fail otherwise with a buffer this size.
            let _ = ready.try_io(|fd| read_signals(fd.get_ref().as_raw_fd(), self.me, &mut self.pending));
        }
    }

    /// The next signal already received, without waiting and without a
    /// runtime (the readiness wait's loop polls `fd` itself).
    pub fn try_recv(&mut self) -> Option<c_int> {
        if self.pending.is_empty() {
            // WouldBlock when none is queued; a signalfd read cannot fail otherwise.
            let _ = read_signals(self.raw_fd(), self.me, &mut self.pending);
        }
        self.pending.pop_front()
    }

    /// The signalfd, readable while a signal is queued; -1 once closed
    /// (`poll` ignores it, a read fails with EBADF and yields nothing).
    pub fn poll_fd(&self) -> c_int {
        self.raw_fd()
    }

    /// Gives the signalfd's descriptor back, for a process at its
    /// RLIMIT_NOFILE that needs one for its last request (the quit without
    /// a runtime). Signals stay blocked: from here on they are not read.
    pub fn close(&mut self) {
        self.registered = None;
        self.fd = None;
    }
}

impl Signals {
    /// The signals already read from the signalfd and not yet handed out
    /// (SIGCHLD left out). For `--exec`, which must handle them before it
    /// goes; what is still queued in the kernel, `spawn::exec` reads last.
    pub fn take_read(&mut self) -> Vec<c_int> {
        std::mem::take(&mut self.pending)
            .into_iter()
            .filter(|&sig| sig != libc::SIGCHLD)
            .collect()
    }

    /// The signalfd (-1 once closed), for the readiness wait's poll and
    /// the last drain just before an exec (see `spawn::exec`).
    pub(super) fn raw_fd(&self) -> c_int {
        self.fd.as_ref().map_or(-1, AsRawFd::as_raw_fd)
    }
}

/// The first termination signal still queued on `fd`, reading it empty
/// without allocating (the others are dropped, as while waiting for the
/// sidecar). Async-signal-safe.
pub(super) fn termination_queued(fd: c_int) -> Option<c_int> {
    let mut found = None;
    loop {
        // SAFETY: an all-zero signalfd_siginfo is a valid value of this plain struct.
        let mut infos: [libc::signalfd_siginfo; 16] = unsafe { std::mem::zeroed() };
        // SAFETY: the buffer is valid for writes of its full size.
        let n = unsafe { libc::read(fd, infos.as_mut_ptr().cast(), size_of_val(&infos)) };
        if n <= 0 {
            return found;
        }
        let count = n as usize / size_of::<libc::signalfd_siginfo>();
        for info in &infos[..count] {
            let sig = info.ssi_signo as c_int;
            if found.is_none() && is_termination(sig) {
                found = Some(sig);
            }
        }
    }
}

/// Sleeps until `fd` (the signalfd) is readable: the blocking supervisor's
/// wait. A descriptor of -1 (closed) is never readable, so the sleep is
/// bounded to a second then, and an interrupted or failed `ppoll` returns
/// at once (the caller reads, finds nothing, and sleeps again).
pub fn sleep_until_readable(fd: c_int) {
    let mut fds = [libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }];
    let second = libc::timespec { tv_sec: 1, tv_nsec: 0 };
    let timeout = if fd < 0 { &raw const second } else { std::ptr::null() };
    // SAFETY: `fds` is valid for reads and writes of its length; the
    // timeout, when given, points at a live timespec; no mask is passed.
    unsafe { libc::ppoll(fds.as_mut_ptr(), 1, timeout, std::ptr::null()) };
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
        // The kernel raises SIGPIPE for a write of meshwrap's own to a closed
        // pipe (its stderr gone), and SIGXFSZ for one past RLIMIT_FSIZE (its
        // stderr a file), in meshwrap's name; neither is the command's business.
        if matches!(sig, libc::SIGPIPE | libc::SIGXFSZ) && info.ssi_pid == me {
            continue;
        }
        into.push_back(sig);
    }
    Ok(())
}

/// Clears the calling thread's signal mask, libc-reserved signals included.
/// Async-signal-safe, so the spawn hook uses it too.
pub fn unblock_all() -> io::Result<()> {
    set_mask(0)
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
        for reserved in 32..=34 {
            assert!(all.contains(&reserved), "signal {reserved}");
        }
        assert_eq!(received().count_ones() as usize, all.len() + 1);
        let folded = all.iter().chain(&[libc::SIGCHLD]).fold(0u64, |m, s| m | 1 << (s - 1));
        assert_eq!(received(), folded);
    }

    #[test]
    fn names() {
        assert_eq!(name(libc::SIGTERM), "SIGTERM");
        assert_eq!(name(libc::SIGRTMIN() + 2), "SIGRTMIN+2");
    }
}
