//! meshwrap's side of the guard protocol (`--guard-dir`): take the lock at
//! start, record each phase of the run, and let the kernel release the lock
//! when meshwrap exits.
//!
//! The lock is taken before the readiness wait, so a kill during the wait is
//! seen by the guard as well. Contention is brief and bounded: the guard
//! holds its shared lock only for the read of one small file, and a previous
//! run's meshwrap is gone before the kubelet starts the next. A lock still
//! held after [`LOCK_PATIENCE`] means a second wrapped container shares the
//! directory, which would quit the sidecar twice: meshwrap refuses to start.
//!
//! A record that cannot be written after the start is logged and otherwise
//! ignored: the guard then reads the previous phase and may quit a second
//! time, which is better than failing a run that has already begun.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{LOCK, Phase, Quit, Record, read_record, try_lock, write_record};
use crate::config::QuitPolicy;
use crate::log;

/// How long meshwrap retries a lock someone else holds.
const LOCK_PATIENCE: Duration = Duration::from_secs(2);

/// Why the directory could not be taken: one line for the user, and
/// whether a live meshwrap holds it (and will quit the sidecar itself).
#[derive(Debug)]
pub struct Refusal {
    pub line: String,
    pub held_by_another: bool,
}

/// meshwrap's hold on the guard directory for one run.
pub struct Hold {
    dir: PathBuf,
    /// Kept open for the whole run: closing it would release the lock.
    _lock: File,
    record: Record,
}

impl Hold {
    /// Locks the directory and records a new run as waiting. The error is
    /// one line for the user; nothing has been waited for or run.
    pub fn take(dir: &Path, policy: QuitPolicy) -> Result<Hold, Refusal> {
        let fail = |what: &str, e: io::Error| Refusal {
            line: format!("--guard-dir {}: {what}: {e}", dir.display()),
            held_by_another: false,
        };
        fs::create_dir_all(dir).map_err(|e| fail("cannot create it", e))?;
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .open(dir.join(LOCK))
            .map_err(|e| fail("cannot open its lock file", e))?;
        // std opens every file close-on-exec: the command never inherits it.
        let started = Instant::now();
        while !try_lock(&lock, libc::F_WRLCK).map_err(|e| fail("cannot lock it", e))? {
            if started.elapsed() >= LOCK_PATIENCE {
                return Err(Refusal {
                    line: format!(
                        "--guard-dir {}: another meshwrap holds its lock; wrap only one container per pod \
                         (two would each quit the sidecar)",
                        dir.display()
                    ),
                    held_by_another: true,
                });
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        // A record we cannot parse is replaced: it was not written by this protocol.
        let previous = read_record(dir).ok().flatten().map_or(0, |r| r.generation);
        let record = Record {
            generation: previous + 1,
            phase: Phase::Waiting,
            policy,
            ready: false,
            exit: None,
            quit: None,
        };
        write_record(dir, &record).map_err(|e| fail("cannot write its state file", e))?;
        log!(
            Debug,
            "guard: holding the lock",
            dir = &dir.display().to_string(),
            generation = record.generation
        );
        Ok(Hold {
            dir: dir.to_path_buf(),
            _lock: lock,
            record,
        })
    }

    /// The command is about to start.
    pub fn running(&mut self, ready: bool) {
        self.record.ready = ready;
        self.advance(Phase::Running);
    }

    /// The command ended with `exit` and a quit is about to go out.
    pub fn quitting(&mut self, exit: u8) {
        self.record.exit = Some(exit);
        self.advance(Phase::Quitting);
    }

    /// The run is over; `exit` is `None` after `--exec`.
    pub fn done(&mut self, exit: Option<u8>, quit: Quit) {
        self.record.exit = exit;
        self.record.quit = Some(quit);
        self.advance(Phase::Done);
    }

    fn advance(&mut self, phase: Phase) {
        self.record.phase = phase;
        if let Err(e) = write_record(&self.dir, &self.record) {
            log!(
                Warn,
                "guard: cannot record the run's progress; the guard may quit the sidecar a second time",
                dir = &self.dir.display().to_string(),
                error = &e.to_string()
            );
        }
    }
}
