//! Signal registration: one tokio stream per catchable signal, created before
//! meshwrap does anything else.
//!
//! Registering first matters twice. PID 1 receives only the signals it has a
//! handler for (the kernel drops the rest), so a SIGTERM that arrived before
//! registration would be lost; and a handler makes a signal that was ignored by
//! meshwrap's parent reset to default across the command's exec. tokio's
//! handler only records the signal and wakes the runtime, so nothing unsafe
//! runs in signal context; repeats of one signal that arrive between two polls
//! coalesce, exactly as standard signals coalesce in the kernel.

use std::future::poll_fn;
use std::task::Poll;

use libc::c_int;
use tokio::signal::unix::{Signal, SignalKind, signal};

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

pub struct Signals {
    streams: Vec<(c_int, Signal)>,
    /// Where the next poll starts, so a flood of one signal cannot starve others.
    next: usize,
}

impl Signals {
    /// Registers SIGCHLD and every forwardable signal. Must run inside the runtime.
    pub fn install() -> std::io::Result<Signals> {
        // A mask inherited from meshwrap's parent would hold back the very
        // signals meshwrap must forward (a blocked SIGTERM never arrives).
        unblock_all()?;
        let mut streams = vec![(libc::SIGCHLD, signal(SignalKind::child())?)];
        for sig in forwardable() {
            streams.push((sig, signal(SignalKind::from_raw(sig))?));
        }
        Ok(Signals { streams, next: 0 })
    }

    /// The next signal received (SIGCHLD included).
    pub async fn recv(&mut self) -> c_int {
        poll_fn(|cx| {
            let count = self.streams.len();
            for offset in 0..count {
                let index = (self.next + offset) % count;
                let (sig, stream) = &mut self.streams[index];
                // `None` means the driver is gone, which only happens at runtime
                // shutdown; treat it as "nothing arrived".
                if let Poll::Ready(Some(())) = stream.poll_recv(cx) {
                    self.next = (index + 1) % count;
                    return Poll::Ready(*sig);
                }
            }
            Poll::Pending
        })
        .await
    }
}

/// Clears the calling thread's signal mask. Async-signal-safe, so the spawn
/// hook uses it too.
pub fn unblock_all() -> std::io::Result<()> {
    // SAFETY: `empty` is a valid sigset_t, initialised by sigemptyset before use.
    let result = unsafe {
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::pthread_sigmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut())
    };
    if result == 0 {
        Ok(())
    } else {
        Err(std::io::Error::from_raw_os_error(result))
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
