//! The guard's side: wait, without polling, until meshwrap's run is over,
//! then say whether the sidecar still needs its quit.
//!
//! The guard sleeps on one inotify descriptor for the guard directory, its
//! signalfd and, while no run is under way, the start bound. It wakes when a
//! file there is closed after writing (meshwrap's lock descriptor is closed
//! by the kernel when meshwrap dies, after the lock is released) or renamed
//! into place (a new record), and then judges under the shared lock (see the
//! module above). The wake-ups are few: each of meshwrap's four records
//! per run (a create, a close and a rename) and the close at its exit.
//! Where the node has no inotify instance left for the guard's user, it looks
//! every 50 ms instead of failing the pod (see `Events`).
//!
//! Races it guards against:
//! - **The guard starts first.** No record, or only an older generation's:
//!   nothing to judge, and the lock says nothing either way. It waits for a
//!   new generation, bounded by `--start-timeout`.
//! - **meshwrap starts while the guard judges.** The guard's shared lock
//!   makes meshwrap wait (bounded), so the record judged is the one its
//!   writer left behind when it exited.
//! - **A record half-written.** Records are renamed into place whole.
//! - **An I/O error on one look** (a record or lock briefly unreadable, an
//!   inotify read that fails): the guard turns to looking every 50 ms, and
//!   after 100 failed looks in a row gives up without a quit and exits 0,
//!   like every other way it ends: a guard that exited non-zero would fail a
//!   pod whose job succeeded.
//! - **An event missed between a judgement and the next sleep.** inotify
//!   queues events from the moment the watch exists, which is before the
//!   first judgement, so every change after a judgement wakes the next sleep.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::Duration;

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

use super::{LOCK, Phase, Quit, Record, read_record, try_lock};
use crate::config::QuitPolicy;
use crate::log;
use crate::supervise::{self, Signals, signals};

/// What the guard leaves to do when it stops watching.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing: meshwrap finished its run, or no quit is due.
    Nothing,
    /// Quit the sidecar in meshwrap's place. `seen_ready`: the sidecar was
    /// up, so a refused quit means it is gone already.
    Quit { seen_ready: bool },
    /// A termination signal arrived (the pod is being deleted).
    Stopped(libc::c_int),
}

/// What one look at the directory shows.
enum Verdict {
    /// No new run has begun.
    NotStarted,
    /// meshwrap holds the lock.
    Running,
    /// The run that wrote this record is over.
    Over(Record),
}

/// The guard's watch on its directory. Keep it until the quit has gone out:
/// closing an inotify descriptor waits for the kernel's SRCU grace period,
/// which took 7 ms here, and a quit sent after it would wait as long.
pub struct Watch<'d> {
    dir: &'d Path,
    events: Events,
}

impl<'d> Watch<'d> {
    /// Creates the directory if needed and starts watching it.
    /// A directory that cannot be created is not an error: the guard then
    /// finds no run, and the start bound decides.
    pub fn new(dir: &'d Path) -> io::Result<Watch<'d>> {
        let _ = std::fs::create_dir_all(dir);
        let events = Events::watch(dir);
        log!(Info, "guard: watching meshwrap's run", dir = &dir.display().to_string());
        Ok(Watch { dir, events })
    }

    /// Waits until a run is over or nothing is left to guard. `policy` and
    /// the bound apply while no run has been recorded; a recorded run
    /// carries meshwrap's own policy.
    pub async fn until_over(
        &mut self,
        policy: QuitPolicy,
        no_quit: &[(u8, u8)],
        start_timeout: Option<Duration>,
        signals: &mut Signals,
    ) -> io::Result<Outcome> {
        let dir = self.dir;
        // Runs up to this generation have been judged (a restart is awaited).
        let mut judged = 0;
        let mut bound = start_timeout.map(|t| Box::pin(tokio::time::sleep(t)));
        let mut failures = 0;
        loop {
            let verdict = match judge(dir, judged) {
                Ok(verdict) => {
                    failures = 0;
                    verdict
                }
                Err(e) => {
                    if failures == 0 {
                        log!(
                            Warn,
                            "guard: cannot read --guard-dir; looking every 50ms, and after 5s exiting 0 without a quit",
                            error = &e.to_string()
                        );
                    }
                    failures += 1;
                    if failures > RETRIES {
                        return Ok(Outcome::Nothing);
                    }
                    self.events = Events::Interval;
                    Verdict::NotStarted
                }
            };
            match verdict {
                Verdict::NotStarted => {}
                // A run under way is not bound; only a start is.
                Verdict::Running => bound = None,
                Verdict::Over(record) => {
                    warn_if_policies_differ(record.policy, policy);
                    match decide(&record, no_quit) {
                        Some(outcome) => return Ok(outcome),
                        None => {
                            // The kubelet restarts the container: the same bound
                            // applies to the next run's start.
                            judged = record.generation;
                            bound = start_timeout.map(|t| Box::pin(tokio::time::sleep(t)));
                        }
                    }
                }
            }
            let expired = async {
                match bound.as_mut() {
                    Some(sleep) => sleep.await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                result = self.events.changed() => if result.is_err() {
                    self.events = Events::Interval;
                },
                () = expired => {
                    // A run may have begun as the bound ran out: judged again above.
                    if let Ok(Verdict::NotStarted) = judge(dir, judged) {
                        return Ok(never_started(policy, start_timeout.unwrap_or_default()));
                    }
                }
                sig = signals.recv() => match sig {
                    sig if signals::is_termination(sig) => return Ok(Outcome::Stopped(sig)),
                    libc::SIGCHLD => supervise::reap_orphans(),
                    _ => {}
                },
            }
        }
    }
}

/// A recorded run carries meshwrap's own policy, which the guard follows.
fn warn_if_policies_differ(meshwraps: QuitPolicy, guards: QuitPolicy) {
    if meshwraps != guards {
        log!(
            Warn,
            format!(
                "guard: meshwrap ran with --quit-policy {} but the guard has {}; following meshwrap's",
                meshwraps.name(),
                guards.name()
            )
        );
    }
}

/// Looks at the directory under the shared lock.
fn judge(dir: &Path, judged: u64) -> io::Result<Verdict> {
    let lock = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(dir.join(LOCK))
    {
        Ok(lock) => lock,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Verdict::NotStarted),
        Err(e) => return Err(e),
    };
    if !try_lock(&lock, libc::F_RDLCK)? {
        return Ok(Verdict::Running);
    }
    let record = read_record(dir);
    // Closing the descriptor releases the shared lock.
    drop::<File>(lock);
    Ok(match record? {
        Some(record) if record.generation > judged => Verdict::Over(record),
        _ => Verdict::NotStarted,
    })
}

/// What a finished or killed run leaves to do; `None`: wait for the next run.
/// `no_quit`: exit codes on which the kubelet restarts the container.
fn decide(record: &Record, no_quit: &[(u8, u8)]) -> Option<Outcome> {
    let generation = record.generation;
    let code = record.exit.map_or_else(|| "exec".to_string(), |c| c.to_string());
    if restarted(record, no_quit) {
        return None;
    }
    match (record.phase, record.policy) {
        (Phase::Done, QuitPolicy::OnSuccess) if record.exit.is_some_and(|c| c != 0) => {
            log!(
                Info,
                "guard: the command failed and --quit-policy is on-success; waiting for the restarted container's run",
                generation = generation,
                code = &code
            );
            None
        }
        (Phase::Done, _) => {
            let quit = if record.quit == Some(Quit::Sent) {
                "sent"
            } else {
                "skipped"
            };
            log!(
                Info,
                format!("guard: meshwrap finished its run and {quit} the quit; nothing to do"),
                generation = generation,
                code = &code
            );
            Some(Outcome::Nothing)
        }
        (Phase::Quitting, _) => {
            log!(
                Warn,
                "guard: meshwrap was killed while quitting the sidecar; quitting again, so the sidecar may get a second quit",
                generation = generation,
                code = &code
            );
            Some(Outcome::Quit { seen_ready: true })
        }
        (_, QuitPolicy::Always) => {
            log!(
                Info,
                "guard: meshwrap was killed with its command; quitting the sidecar in its place",
                generation = generation,
                phase = if record.phase == Phase::Waiting {
                    "waiting"
                } else {
                    "running"
                }
            );
            Some(Outcome::Quit {
                seen_ready: record.ready,
            })
        }
        (_, QuitPolicy::OnSuccess) => {
            log!(
                Info,
                "guard: meshwrap was killed with its command; --quit-policy on-success: not quitting, waiting for the restarted container's run",
                generation = generation
            );
            None
        }
        (_, QuitPolicy::Never) => {
            log!(
                Info,
                "guard: meshwrap was killed with its command; --quit-policy never: nothing to do",
                generation = generation
            );
            Some(Outcome::Nothing)
        }
    }
}

/// Whether the kubelet restarts the container after this run: its exit
/// code, or 137 (SIGKILL) for a group kill, is one of `--no-quit-on-exit`.
fn restarted(record: &Record, no_quit: &[(u8, u8)]) -> bool {
    let exit = if record.phase == Phase::Done {
        record.exit
    } else {
        Some(137)
    };
    let restarted = exit.is_some_and(|c| no_quit.iter().any(|&(low, high)| (low..=high).contains(&c)));
    if restarted {
        log!(
            Info,
            "guard: the kubelet restarts the container on this exit code (--no-quit-on-exit); waiting for the restarted container's run",
            generation = record.generation,
            code = exit.unwrap_or_default()
        );
    }
    restarted
}

/// No run began within the bound: the wrapped container never started
/// meshwrap (no /mesh in its image, a mistyped path), or not yet.
fn never_started(policy: QuitPolicy, bound: Duration) -> Outcome {
    let after = crate::duration::format(bound);
    if policy == QuitPolicy::Always {
        log!(
            Warn,
            format!(
                "guard: no meshwrap run started within {after} (--start-timeout); quitting the sidecar so the pod can complete"
            )
        );
        Outcome::Quit { seen_ready: false }
    } else {
        log!(
            Warn,
            format!(
                "guard: no meshwrap run started within {after} (--start-timeout); --quit-policy {}: exiting without a quit",
                policy.name()
            )
        );
        Outcome::Nothing
    }
}

/// How often the guard looks when inotify cannot be had, or a look failed.
const FALLBACK_INTERVAL: Duration = Duration::from_millis(50);
/// Looks in a row that may fail before the guard gives up (5 s).
const RETRIES: u32 = 100;

/// What wakes the guard: inotify on the guard directory (files closed after
/// writing, created, or renamed into it), or, where the node has no inotify
/// instance left for this user (128 by default, shared by every pod of the
/// uid), a look every [`FALLBACK_INTERVAL`]. A guard that failed there would
/// fail a pod whose job succeeded; one that looks 20 times a second costs
/// about 1 ms of CPU a second and still quits within the interval.
enum Events {
    Inotify(AsyncFd<OwnedFd>),
    Interval,
}

impl Events {
    fn watch(dir: &Path) -> Events {
        match Events::inotify(dir) {
            Ok(fd) => Events::Inotify(fd),
            Err(e) => {
                log!(
                    Warn,
                    format!(
                        "guard: cannot watch the directory with inotify; looking every {} instead",
                        crate::duration::format(FALLBACK_INTERVAL)
                    ),
                    error = &e.to_string()
                );
                Events::Interval
            }
        }
    }

    fn inotify(dir: &Path) -> io::Result<AsyncFd<OwnedFd>> {
        // SAFETY: inotify_init1 takes flags only and returns a new descriptor or -1.
        let raw = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: inotify_init1 returned a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let path = std::ffi::CString::new(dir.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in the path"))?;
        let mask = libc::IN_CLOSE_WRITE | libc::IN_CREATE | libc::IN_MOVED_TO;
        // SAFETY: the descriptor is open and `path` is a NUL-terminated string that outlives the call.
        if unsafe { libc::inotify_add_watch(fd.as_raw_fd(), path.as_ptr(), mask) } < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the OwnedFd stays open, and the same descriptor, for as long as the AsyncFd holds it.
        unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }.map_err(|e| e.into_parts().1)
    }

    /// Waits until something changed, and drains what is queued.
    async fn changed(&mut self) -> io::Result<()> {
        let Events::Inotify(fd) = self else {
            tokio::time::sleep(FALLBACK_INTERVAL).await;
            return Ok(());
        };
        loop {
            let mut ready = fd.readable().await?;
            match ready.try_io(|fd| drain(fd.get_ref().as_raw_fd())) {
                Ok(result) => return result,
                Err(_would_block) => continue,
            }
        }
    }
}

/// Reads queued events until none is left; Ok once at least one was read.
fn drain(fd: libc::c_int) -> io::Result<()> {
    let mut buffer = [0u8; 4096];
    let mut read_any = false;
    loop {
        // SAFETY: the buffer is valid for writes of its full size.
        let n = unsafe { libc::read(fd, buffer.as_mut_ptr().cast(), buffer.len()) };
        if n > 0 {
            read_any = true;
            continue;
        }
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock if read_any => Ok(()),
            io::ErrorKind::Interrupted => continue,
            _ => Err(e),
        };
    }
}
