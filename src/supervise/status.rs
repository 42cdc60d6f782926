//! How the command ended, and the exit code meshwrap reports for it.
//!
//! A signal survives as 128+n (SIGKILL, and so the OOM killer, gives 137), so
//! that Kubeflow and Kubernetes read "killed" as retryable instead of the 255
//! that some Go wrappers report.

use libc::c_int;

use super::signals;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Exited(u8),
    Signaled(c_int),
}

impl Status {
    /// Decodes a raw `waitpid` status for a child that has terminated.
    pub fn from_wait(raw: c_int) -> Status {
        if libc::WIFSIGNALED(raw) {
            Status::Signaled(libc::WTERMSIG(raw))
        } else {
            // An exit code is the low 8 bits of what the child passed to exit().
            Status::Exited(libc::WEXITSTATUS(raw) as u8)
        }
    }

    pub fn exit_code(self) -> u8 {
        match self {
            Status::Exited(code) => code,
            Status::Signaled(sig) => u8::try_from(128 + sig).unwrap_or(255),
        }
    }

    /// `exit 3` or `signal SIGKILL`, for logs.
    pub fn describe(self) -> String {
        match self {
            Status::Exited(code) => format!("exit {code}"),
            Status::Signaled(sig) => format!("signal {}", signals::name(sig)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_map_to_128_plus_n() {
        assert_eq!(Status::Signaled(libc::SIGKILL).exit_code(), 137);
        assert_eq!(Status::Signaled(libc::SIGTERM).exit_code(), 143);
        assert_eq!(
            Status::Signaled(libc::SIGRTMAX()).exit_code(),
            (128 + libc::SIGRTMAX()) as u8
        );
        assert_eq!(Status::Exited(3).exit_code(), 3);
    }

    #[test]
    fn decodes_wait_statuses() {
        assert_eq!(Status::from_wait(3 << 8), Status::Exited(3));
        assert_eq!(Status::from_wait(libc::SIGKILL), Status::Signaled(libc::SIGKILL));
    }
}
