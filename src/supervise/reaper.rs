//! The reaper: the one place in meshwrap that waits for any child. (One
//! other waits for one known pid, when no pass runs: the spawn, for its
//! child whose exec failed.)
//!
//! As PID 1 meshwrap inherits every orphan in its PID namespace; otherwise it
//! asks to become a child subreaper so the command's orphans come to it
//! instead of to the node's init. Either way each SIGCHLD (which coalesce, so
//! one may stand for many exits) triggers one pass that reaps every zombie
//! there is. A second waiter (tokio's `Child::wait`, a `waitpid(pid)`
//! elsewhere) could steal the command's status, so there is none.
//!
//! The pass also reports the command being stopped (`WUNTRACED`): a command
//! stopped by its terminal waits for a SIGCONT that only its job control can
//! send, and a waiter that cannot see the stop waits with it forever.

use libc::{c_int, pid_t};

/// Makes orphaned descendants reparent to meshwrap when it is not PID 1.
pub fn become_subreaper() -> std::io::Result<()> {
    if std::process::id() == 1 {
        return Ok(());
    }
    // SAFETY: PR_SET_CHILD_SUBREAPER takes one integer argument and touches no memory of ours.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// What became of the watched child in a reap pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Watched {
    /// It has terminated; the raw wait status, its zombie reaped.
    Ended(c_int),
    /// It was stopped by this signal (it is still there).
    Stopped(c_int),
}

/// Reaps every exited child without blocking, and notes whether `watched`
/// ended or was stopped. Returns that, and how many others were reaped.
/// Stops of other children (adopted orphans) are passed over.
pub fn reap(watched: Option<pid_t>) -> (Option<Watched>, u32) {
    let mut found = None;
    let mut others = 0;
    loop {
        let mut status: c_int = 0;
        // SAFETY: `status` is a valid, writable c_int for the duration of the call.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG | libc::WUNTRACED) };
        match pid {
            0 => break,
            -1 if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) => continue,
            // ECHILD: no children left at all.
            -1 => break,
            // A stop is reported once, so this loop still ends.
            pid if libc::WIFSTOPPED(status) => {
                if Some(pid) == watched {
                    found = Some(Watched::Stopped(libc::WSTOPSIG(status)));
                }
            }
            pid if Some(pid) == watched => found = Some(Watched::Ended(status)),
            _ => others += 1,
        }
    }
    (found, others)
}
