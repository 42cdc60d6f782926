//! The pod-level guard: what finishes meshwrap's run when the kernel kills
//! meshwrap together with its command (the cgroup v2 OOM group kill, or any
//! container-wide SIGKILL), so the pod still completes.
//!
//! No process in the app container survives a group kill, so the other half
//! lives in a second container of the same pod (`meshwrap guard`), which
//! shares a small volume, the guard directory, with meshwrap:
//!
//! - `lock`: meshwrap holds a POSIX write lock on it for as long as it lives.
//!   POSIX record locks belong to the process: a fork never inherits them, and
//!   the descriptor is close-on-exec, so neither the command nor its orphans
//!   can keep the lock after meshwrap is gone. The kernel drops it when
//!   meshwrap dies, however it dies.
//! - `state`: meshwrap's [`Record`] of the run, rewritten whole by rename, so a
//!   reader sees the old record or the new one, never half of one. It moves
//!   forward through `waiting` (the readiness wait), `running` (the command),
//!   `quitting` (written before the first quit request goes out) and `done`.
//!
//! The guard judges only while it holds a shared lock on `lock`, which it
//! can take only once no meshwrap holds the write lock; and meshwrap writes
//! `state` only while it holds the write lock. So a record the guard reads is
//! final: the run that wrote it is over, and no new run can begin until the
//! guard lets go (meshwrap retries its lock for a bounded time). A record that
//! is not `done` then means meshwrap was killed, and the guard applies the
//! quit policy in its place: exactly one quit per run, from one of the two.
//! The one exception is a kill between meshwrap's quit and its `done`
//! (`quitting`): the guard cannot know whether the sidecar got it, quits
//! again, and says so.
//!
//! Generations count runs in one pod: a container that the kubelet restarts
//! (restartPolicy OnFailure) starts the next one, and the guard waits for it.

pub mod hold;
pub mod watch;

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::config::QuitPolicy;

pub use hold::Hold;

/// The lock file meshwrap holds while it lives.
const LOCK: &str = "lock";
/// meshwrap's record of the current run.
const STATE: &str = "state";
/// Where the next record is written before it is renamed over `state`.
/// One fixed name is safe: only the holder of the write lock writes.
const STATE_TMP: &str = ".state.tmp";

/// How far meshwrap's run got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Waiting for the sidecar; the command has not started.
    Waiting,
    /// The command runs (the sidecar was seen ready, unless `ready` is false).
    Running,
    /// The command ended with `exit`, and a quit is about to go out.
    Quitting,
    /// Finished: the quit was sent or skipped as `quit` says.
    Done,
}

/// What meshwrap did about quitting the sidecar at the end of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quit {
    /// The quit requests went out (whatever the sidecar answered).
    Sent,
    /// The policy or the pod said no quit (never, on-success after a
    /// failure, no quit URL, a native sidecar, `--exec`).
    Skipped,
}

/// One run, as meshwrap records it in `state`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub generation: u64,
    pub phase: Phase,
    pub policy: QuitPolicy,
    /// Whether meshwrap saw the sidecar ready (a quit to a port that now
    /// refuses then means the sidecar is gone).
    pub ready: bool,
    /// The command's exit code (`quitting` and `done`; none after `--exec`).
    pub exit: Option<u8>,
    /// `done` only.
    pub quit: Option<Quit>,
}

impl Record {
    fn to_text(&self) -> String {
        let phase = match self.phase {
            Phase::Waiting => "waiting",
            Phase::Running => "running",
            Phase::Quitting => "quitting",
            Phase::Done => "done",
        };
        let mut text = format!(
            "generation={}\nphase={phase}\npolicy={}\nready={}\n",
            self.generation,
            self.policy.name(),
            self.ready
        );
        if let Some(exit) = self.exit {
            text.push_str(&format!("exit={exit}\n"));
        }
        if let Some(quit) = self.quit {
            text.push_str(if quit == Quit::Sent {
                "quit=sent\n"
            } else {
                "quit=skipped\n"
            });
        }
        text
    }

    /// Parses a record; `None` for anything meshwrap does not write. A key
    /// it does not know is passed over: a newer meshwrap beside an older
    /// guard (version skew) must not fail the pod.
    pub fn parse(text: &str) -> Option<Record> {
        let mut record = Record {
            generation: 0,
            phase: Phase::Waiting,
            policy: QuitPolicy::Always,
            ready: false,
            exit: None,
            quit: None,
        };
        let mut seen = 0u8;
        for line in text.lines() {
            let (key, value) = line.split_once('=')?;
            match key {
                "generation" => record.generation = value.parse().ok()?,
                "phase" => {
                    record.phase = match value {
                        "waiting" => Phase::Waiting,
                        "running" => Phase::Running,
                        "quitting" => Phase::Quitting,
                        "done" => Phase::Done,
                        _ => return None,
                    }
                }
                "policy" => {
                    record.policy = match value {
                        "always" => QuitPolicy::Always,
                        "on-success" => QuitPolicy::OnSuccess,
                        "never" => QuitPolicy::Never,
                        _ => return None,
                    }
                }
                "ready" => record.ready = value.parse().ok()?,
                "exit" => record.exit = Some(value.parse().ok()?),
                "quit" => {
                    record.quit = Some(match value {
                        "sent" => Quit::Sent,
                        "skipped" => Quit::Skipped,
                        _ => return None,
                    })
                }
                _ => {}
            }
            seen += u8::from(matches!(key, "generation" | "phase" | "policy"));
        }
        (seen == 3 && record.generation > 0).then_some(record)
    }
}

/// Reads the record; `Ok(None)` when there is none yet.
fn read_record(dir: &Path) -> io::Result<Option<Record>> {
    match fs::read_to_string(dir.join(STATE)) {
        Ok(text) => Record::parse(&text)
            .map(Some)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "not a meshwrap guard record")),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Replaces the record atomically (write a temporary file, rename it over).
fn write_record(dir: &Path, record: &Record) -> io::Result<()> {
    let tmp = dir.join(STATE_TMP);
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .custom_flags(libc::O_CLOEXEC)
        .open(&tmp)?;
    file.write_all(record.to_text().as_bytes())?;
    drop(file);
    fs::rename(&tmp, dir.join(STATE))
}

/// A POSIX record lock on the whole file, without waiting: `Ok(false)` when
/// another process holds a conflicting one.
fn try_lock(file: &File, kind: libc::c_int) -> io::Result<bool> {
    // SAFETY: an all-zero flock is a valid value of this plain struct.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = kind as libc::c_short;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    // l_start 0 and l_len 0: the whole file, however long it grows.
    // SAFETY: F_SETLK reads the flock struct, which lives across the call.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETLK, &lock) } == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EAGAIN | libc::EACCES) => Ok(false),
        _ => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_as_written() {
        for record in [
            Record {
                generation: 1,
                phase: Phase::Waiting,
                policy: QuitPolicy::OnSuccess,
                ready: false,
                exit: None,
                quit: None,
            },
            Record {
                generation: 7,
                phase: Phase::Done,
                policy: QuitPolicy::Always,
                ready: true,
                exit: Some(137),
                quit: Some(Quit::Sent),
            },
        ] {
            assert_eq!(Record::parse(&record.to_text()), Some(record));
        }
    }

    #[test]
    fn anything_else_is_no_record() {
        for text in [
            "",
            "generation=1\nphase=done\n",
            "generation=0\nphase=done\npolicy=always\n",
            "generation=1\nphase=gone\npolicy=always\n",
            "generation=1\nphase=done\npolicy=always\nexit=300\n",
            "garbage",
        ] {
            assert_eq!(Record::parse(text), None, "{text:?}");
        }
    }

    #[test]
    fn a_key_from_a_newer_meshwrap_is_passed_over() {
        let record = Record::parse("generation=2\nphase=running\npolicy=never\nready=true\nsince=17\n").unwrap();
        assert_eq!((record.generation, record.phase), (2, Phase::Running));
    }
}
