//! The readiness poll's sleep: a timerfd, so that each sleep is one wake-up.
//!
//! tokio's timer wheel wakes the thread at each 64 ms slot boundary that a
//! deadline lies beyond, to move the timer down a level; a 30 ms sleep that
//! crosses a boundary costs two wake-ups. On these machines a wake-up from
//! idle is most of a poll's CPU (caches are cold after a sleep): measured,
//! 125 polls over 5 s took 193 wake-ups with tokio's sleep. A timerfd armed
//! per sleep fires once, at the deadline, through the same reactor.
//!
//! Should the timerfd be unavailable (a seccomp profile that forbids it),
//! tokio's sleep does the job at the old cost.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

pub struct Timer {
    fd: Option<AsyncFd<OwnedFd>>,
}

impl Timer {
    pub fn new() -> Timer {
        Timer { fd: timerfd().ok() }
    }

    /// Sleeps for `duration` (at least a nanosecond).
    pub async fn sleep(&mut self, duration: Duration) {
        if let Some(fd) = &self.fd {
            if arm(fd.get_ref(), duration).is_ok() && expired(fd).await.is_ok() {
                return;
            }
            // The reactor or the timer failed: tokio's sleep from now on.
            self.fd = None;
        }
        tokio::time::sleep(duration).await;
    }
}

fn timerfd() -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: timerfd_create takes plain integers and returns a new descriptor or -1.
    let fd = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the descriptor is new and owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: the OwnedFd stays open, and the same descriptor, for as long as the AsyncFd holds it.
    unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }.map_err(|e| e.into_parts().1)
}

/// Arms the timer to fire once, `duration` from now (replacing any earlier setting).
fn arm(fd: &OwnedFd, duration: Duration) -> io::Result<()> {
    // A zero it_value would disarm the timer instead of firing it at once.
    let duration = duration.max(Duration::from_nanos(1));
    let spec = libc::itimerspec {
        it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
        it_value: libc::timespec {
            tv_sec: duration.as_secs().min(i32::MAX as u64) as _,
            tv_nsec: duration.subsec_nanos() as libc::c_long,
        },
    };
    // SAFETY: `spec` is a valid itimerspec; the old value is not asked for.
    if unsafe { libc::timerfd_settime(fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Waits until the armed timer has fired, and consumes the expiry.
async fn expired(fd: &AsyncFd<OwnedFd>) -> io::Result<()> {
    loop {
        let mut ready = fd.readable().await?;
        let mut expirations = [0u8; 8];
        // SAFETY: reads at most 8 bytes into an 8-byte buffer.
        let n = unsafe { libc::read(fd.get_ref().as_raw_fd(), expirations.as_mut_ptr().cast(), 8) };
        // Consumed or not, the next expiry is a new edge: clearing here saves
        // the next sleep a read that could only say "not yet".
        ready.clear_ready();
        if n == 8 {
            return Ok(());
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::WouldBlock {
            return Err(error);
        }
    }
}
