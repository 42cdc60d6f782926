//! Starting the command with a clean signal state, in its own process group.
//!
//! The child must not inherit meshwrap's signal state: a blocked signal stays
//! blocked and an ignored one stays ignored across exec, and meshwrap's
//! parent may have left either (cargo's process chain leaves signal 32
//! ignored, `nohup` leaves SIGHUP ignored). So every disposition is reset to
//! default and the mask is emptied between the fork and the exec.
//!
//! Two ways to do that, chosen per run:
//! - **A vfork-style child** (the usual case: no terminal): `clone` with
//!   CLONE_VM and CLONE_VFORK, as glibc's and musl's `posix_spawn` do, which
//!   returns in about a quarter of the time of std's fork path (measured:
//!   180-215 us against 670-690 us for this 1 MB process). The child runs on
//!   a stack inside the parent's frame, makes its own process group, resets
//!   every disposition with the raw syscall (`signal` refuses the signals
//!   libc reserves: 32-33 in glibc, 32-34 in musl), empties its mask and
//!   execs, searching PATH as musl's `execvp` does; an exec error comes back
//!   through shared memory.
//!   Not `posix_spawn` itself: musl's blocks every signal around the clone
//!   and then restores a copy of the old mask with 32-34 taken out (its
//!   `pthread_sigmask` hides them from the old mask it returns: musl 1.2.5,
//!   src/process/posix_spawn.c `__posix_spawnx` and
//!   src/thread/pthread_sigmask.c), so the static binary was left with the
//!   libc-reserved signals unblocked after every spawn: the next one sent
//!   killed meshwrap instead of reaching the command. This child needs no
//!   such round trip: meshwrap installs no signal handler that could run
//!   in it (no Rust `main`, so not even std's stack-overflow one), every
//!   signal it forwards is already blocked in the parent, and the parent's
//!   mask is never touched. (An emulator that turns CLONE_VFORK into a fork, as
//!   qemu-user does, loses the shared error: a failed exec then reads as the
//!   command exiting 127.)
//! - **fork + pre_exec** when meshwrap is in the foreground of its
//!   controlling terminal: the child must also make its new process group
//!   the terminal's foreground (so Ctrl-C reaches it, and reading the
//!   terminal does not stop it), which the vfork child does not do: a
//!   terminal start is rare and interactive, so it keeps std's fork path.

use std::ffi::{CString, OsString};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicI32, Ordering};

use libc::{c_char, pid_t};

use super::signals;

/// Why the command could not be started, with the exit code that reports it.
pub struct SpawnError {
    pub code: u8,
    pub error: io::Error,
}

impl SpawnError {
    fn new(error: io::Error) -> SpawnError {
        // 127 for a command that is not there, 126 for one that cannot run.
        let code = match error.raw_os_error() {
            Some(libc::ENOENT) | Some(libc::ENOTDIR) => 127,
            _ => 126,
        };
        SpawnError { code, error }
    }

    /// No process could be made for the command (`clone` failed): meshwrap's
    /// own failure, 125, not the command's 126 (nothing was looked up or
    /// executed).
    fn no_process(error: io::Error) -> SpawnError {
        SpawnError { code: 125, error }
    }

    /// A `clone` failure that may pass: the pod's pids.max or RLIMIT_NPROC
    /// reached (EAGAIN) while other processes are ending.
    fn transient(&self) -> bool {
        self.code == 125 && self.error.raw_os_error() == Some(libc::EAGAIN)
    }

    /// What most likely stopped the `clone`, for the log.
    pub fn cause(&self) -> Option<&'static str> {
        if self.code != 125 {
            return None;
        }
        match self.error.raw_os_error() {
            Some(libc::EAGAIN) => Some("the pod's process limit (the cgroup's pids.max) or RLIMIT_NPROC is reached"),
            Some(libc::ENOMEM) => Some("out of memory (the container's memory limit)"),
            _ => None,
        }
    }

    fn no_command() -> SpawnError {
        SpawnError {
            code: 125,
            error: io::Error::other("no command given"),
        }
    }
}

/// How often a `clone` that failed with EAGAIN is tried again, and the
/// first pause (doubled each time: 10 to 320 ms, 630 ms in all), as shells
/// retry a fork. Signals stay queued meanwhile (they are blocked).
const CLONE_RETRIES: u32 = 6;
const CLONE_PAUSE: std::time::Duration = std::time::Duration::from_millis(10);

/// Starts the command in its own process group; returns its pid, and the
/// controlling terminal if meshwrap gave the command its foreground.
pub fn spawn(command: &[OsString]) -> Result<(pid_t, Option<OwnedFd>), SpawnError> {
    let mut pause = CLONE_PAUSE;
    for _ in 0..CLONE_RETRIES {
        match spawn_once(command) {
            Err(e) if e.transient() => {
                crate::log!(
                    Info,
                    "could not make a process for the command; trying again",
                    error = &e.error.to_string(),
                    after_ms = pause.as_millis()
                );
                std::thread::sleep(pause);
                pause *= 2;
            }
            done => return done,
        }
    }
    spawn_once(command)
}

fn spawn_once(command: &[OsString]) -> Result<(pid_t, Option<OwnedFd>), SpawnError> {
    if command.is_empty() {
        return Err(SpawnError::no_command());
    }
    match foreground_terminal() {
        Some(tty) => fork_spawn(command, &tty).map(|pid| (pid, Some(tty))),
        None => vfork_spawn(command).map(|pid| (pid, None)),
    }
}

/// meshwrap's controlling terminal, if meshwrap is in its foreground.
///
/// The terminal is the session's, not stdin's: under `script ... < /dev/null`
/// or Kubernetes' `tty: true` without `stdin: true`, stdin is no terminal,
/// yet a command that reads `/dev/tty` from a background group is stopped.
/// And only a foreground meshwrap may hand the foreground on: a `meshwrap &`
/// under job control that took it would take it from the shell.
fn foreground_terminal() -> Option<OwnedFd> {
    // SAFETY: open takes a NUL-terminated path; O_NOCTTY keeps a terminal
    // from becoming ours by this open. ENXIO means there is none.
    let fd = unsafe {
        libc::open(
            c"/dev/tty".as_ptr(),
            libc::O_RDWR | libc::O_NOCTTY | libc::O_NONBLOCK | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return None;
    }
    // SAFETY: open returned a new descriptor that nothing else owns.
    let tty = unsafe { OwnedFd::from_raw_fd(fd) };
    in_foreground(&tty).then_some(tty)
}

/// Whether meshwrap's process group is the terminal's foreground.
pub(super) fn in_foreground(tty: &OwnedFd) -> bool {
    // SAFETY: tcgetpgrp and getpgrp take and return plain integers.
    unsafe { libc::tcgetpgrp(tty.as_raw_fd()) == libc::getpgrp() }
}

/// The command's arguments as C strings; a NUL inside one is an error.
fn c_strings(command: &[OsString]) -> Result<Vec<CString>, SpawnError> {
    command
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| SpawnError::new(io::Error::new(io::ErrorKind::InvalidInput, e)))
}

/// Where the child looks for the program, in order, as musl's `execvp` does:
/// the program itself if it names a path (has a `/`), else each directory of
/// PATH (musl's default, /usr/local/bin:/bin:/usr/bin, when it is unset)
/// joined with it, an empty directory meaning the current one, a directory
/// too long for a path skipped. Or the errno that stops it before any
/// child is made: ENOENT for an empty name (or no candidate at all),
/// ENAMETOOLONG for a bare name longer than NAME_MAX.
fn candidates(program: &CString, path: Option<&[u8]>) -> Result<Vec<CString>, libc::c_int> {
    let name = program.as_bytes();
    if name.contains(&b'/') {
        return Ok(vec![program.clone()]);
    }
    if name.len() > NAME_MAX {
        return Err(libc::ENAMETOOLONG);
    }
    if name.is_empty() {
        return Err(libc::ENOENT);
    }
    let path = path.unwrap_or(b"/usr/local/bin:/bin:/usr/bin");
    let found: Vec<CString> = path
        .split(|&b| b == b':')
        .filter(|dir| dir.len() < libc::PATH_MAX as usize)
        .filter_map(|dir| {
            let mut full = dir.to_vec();
            if !dir.is_empty() {
                full.push(b'/');
            }
            full.extend_from_slice(name);
            CString::new(full).ok()
        })
        .collect();
    if found.is_empty() { Err(libc::ENOENT) } else { Ok(found) }
}

/// Linux's longest file name (the libc crate has no constant for it).
const NAME_MAX: usize = 255;

/// What the vfork child is given. The parent prepares all of it, so the
/// child allocates nothing and makes only raw system calls.
struct Plan {
    paths: Vec<CString>,
    /// NULL-terminated, pointing into the caller's `CString`s.
    argv: Vec<*const c_char>,
    /// The errno of the exec that failed last, written by the child before it
    /// exits; 0 if the exec succeeded.
    error: AtomicI32,
}

/// The child's stack, inside the parent's frame: the parent is suspended
/// (CLONE_VFORK) until the child has exec'd or exited. It has no guard page:
/// an overflow would overwrite the parent's frames below it. The child uses
/// well under 1 KiB (a few small frames and system calls), and must stay
/// that trivial.
const CHILD_STACK: usize = 8192;

#[repr(C, align(16))]
struct ChildStack([MaybeUninit<u8>; CHILD_STACK]);

/// Starts the command in a vfork-style child that shares meshwrap's memory
/// until its exec (see the module docs).
fn vfork_spawn(command: &[OsString]) -> Result<pid_t, SpawnError> {
    let args = c_strings(command)?;
    let path = std::env::var_os("PATH");
    let mut argv: Vec<*const c_char> = args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let paths = candidates(&args[0], path.as_ref().map(|p| p.as_bytes()))
        .map_err(|errno| SpawnError::new(io::Error::from_raw_os_error(errno)))?;
    let plan = Plan {
        paths,
        argv,
        error: AtomicI32::new(0),
    };
    let mut stack = ChildStack([MaybeUninit::uninit(); CHILD_STACK]);
    let top = stack.0.as_mut_ptr_range().end.cast::<libc::c_void>();
    // SAFETY: `child` runs on `stack`, which outlives it: CLONE_VFORK keeps
    // this thread suspended, and `stack` and `plan` in place, until the child
    // has exec'd or exited. The child only reads `plan` and writes its atomic.
    let pid = unsafe {
        libc::clone(
            child,
            top,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            (&raw const plan).cast_mut().cast(),
        )
    };
    if pid < 0 {
        return Err(SpawnError::no_process(io::Error::last_os_error()));
    }
    match plan.error.load(Ordering::SeqCst) {
        0 => Ok(pid),
        errno => {
            reap_failed(pid);
            Err(SpawnError::new(io::Error::from_raw_os_error(errno)))
        }
    }
}

/// The child of `vfork_spawn`: its own process group, a clean signal state,
/// then the exec. Only async-signal-safe, allocation-free calls: it runs in
/// meshwrap's memory, on a borrowed stack.
extern "C" fn child(plan: *mut libc::c_void) -> libc::c_int {
    // SAFETY: the parent passed a `Plan` that lives until this child exits or execs.
    let plan = unsafe { &*plan.cast::<Plan>() };
    let errno = exec_plan(plan);
    plan.error.store(errno, Ordering::SeqCst);
    // SAFETY: ends this child only; it runs no destructor and no exit hook.
    unsafe { libc::_exit(127) }
}

/// Runs the child's steps; returns the errno that stopped it.
fn exec_plan(plan: &Plan) -> libc::c_int {
    // Never 0, which would read as a successful exec.
    let errno = || match io::Error::last_os_error().raw_os_error() {
        Some(e) if e > 0 => e,
        _ => libc::EINVAL,
    };
    // SAFETY: setpgid takes plain integers.
    if unsafe { libc::setpgid(0, 0) } != 0 {
        return errno();
    }
    if clean_signal_state().is_err() {
        return errno();
    }
    // As musl's execvp: a missing file or directory tries the next
    // candidate; a refused one too, but is reported if no other runs.
    let (mut last, mut refused) = (libc::ENOENT, false);
    for path in &plan.paths {
        // SAFETY: NUL-terminated path, NULL-terminated argv of C strings the
        // parent keeps alive, and libc's own environment array.
        unsafe { libc::execve(path.as_ptr(), plan.argv.as_ptr(), environ.cast_const()) };
        last = errno();
        match last {
            libc::EACCES => refused = true,
            libc::ENOENT | libc::ENOTDIR => {}
            _ => return last,
        }
    }
    if refused { libc::EACCES } else { last }
}

/// Collects a child whose exec failed, before the caller returns: no reap
/// pass runs on this thread until then, so the zombie is never mistaken for
/// the command's end.
fn reap_failed(pid: pid_t) {
    let mut status = 0;
    // SAFETY: waitpid writes the status into `status`.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0
        && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted
    {}
}

// SAFETY: `environ` is libc's own global (glibc and musl alike), declared
// with its C type; it is only read, as the array execve is given.
unsafe extern "C" {
    /// libc's environment, which std's `env::set_var` also writes (meshwrap
    /// never calls it); `mut`, as libc may change it.
    static mut environ: *mut *const c_char;
}

/// The terminal case: fork, and in the child take the terminal's foreground.
fn fork_spawn(command: &[OsString], tty: &OwnedFd) -> Result<pid_t, SpawnError> {
    let tty = tty.as_raw_fd();
    let mut cmd = Command::new(&command[0]);
    cmd.args(&command[1..]).process_group(0);
    // SAFETY: the hook runs in the forked child before exec and makes only
    // async-signal-safe calls (signal, tcsetpgrp, getpid, rt_sigaction,
    // rt_sigprocmask); it allocates nothing. `tty` is open in the child until
    // the exec closes it.
    unsafe {
        cmd.pre_exec(move || {
            // A background group calling tcsetpgrp gets SIGTTOU unless it is ignored.
            libc::signal(libc::SIGTTOU, libc::SIG_IGN);
            libc::tcsetpgrp(tty, libc::getpid());
            clean_signal_state()
        });
    }
    // The std handle is dropped without waiting: the reaper owns the status.
    cmd.spawn().map(|child| child.id() as pid_t).map_err(SpawnError::new)
}

/// Why `exec` returned.
pub enum ExecError {
    /// A termination signal arrived before the command could start.
    Interrupted(libc::c_int),
    /// The command could not be executed.
    Failed(SpawnError),
}

/// Replaces meshwrap with the command (`--exec`), with the same clean signal
/// state a spawned command gets. Returns only if it did not exec.
///
/// A signal still queued at the exec would be lost: the kernel delivers it
/// once the mask is emptied, with the default action, which kills meshwrap
/// (SIGUSR1: 138) or, as PID 1, drops it. So the signalfd is read empty at
/// the last moment, after the dispositions are reset and before the mask is
/// emptied: a termination signal among them cancels the exec (the caller
/// exits 128+n without running the command, as it does for one that arrives
/// during the wait); the others are dropped, as during the wait. Only a
/// signal that lands in the microseconds between that read and the execve
/// meets the default action.
pub fn exec(command: &[OsString], signals: &super::Signals) -> ExecError {
    let Some((program, args)) = command.split_first() else {
        return ExecError::Failed(SpawnError::no_command());
    };
    let fd = signals.raw_fd();
    let interrupted = std::sync::Arc::new(std::sync::atomic::AtomicI32::new(0));
    let seen = interrupted.clone();
    let mut cmd = Command::new(program);
    cmd.args(args);
    // SAFETY: the hook runs just before execve, in this process, and makes only
    // async-signal-safe calls (rt_sigaction, read, rt_sigprocmask) and no allocation.
    unsafe {
        cmd.pre_exec(move || {
            reset_dispositions();
            if let Some(sig) = signals::termination_queued(fd) {
                seen.store(sig, std::sync::atomic::Ordering::SeqCst);
                return Err(io::Error::from_raw_os_error(libc::EINTR));
            }
            signals::unblock_all()
        });
    }
    let error = cmd.exec();
    match interrupted.load(std::sync::atomic::Ordering::SeqCst) {
        0 => ExecError::Failed(SpawnError::new(error)),
        sig => ExecError::Interrupted(sig),
    }
}

/// Every disposition at default and nothing blocked, just before exec, in
/// either kind of child. Async-signal-safe.
fn clean_signal_state() -> io::Result<()> {
    reset_dispositions();
    // std does not reset the mask in every version; do not rely on it.
    signals::unblock_all()
}

/// Sets every signal's disposition to default, in the child.
///
/// The raw syscall, not libc's `signal`: glibc and musl refuse to touch the
/// signals they reserve (32-34), yet a parent may have left those ignored.
fn reset_dispositions() {
    // The kernel's struct sigaction, all zero: SIG_DFL, no flags, no restorer,
    // empty mask. Zero means the same in every architecture's layout.
    let default_action = [0u64; 4];
    for sig in 1..=libc::SIGRTMAX() {
        if sig != libc::SIGKILL && sig != libc::SIGSTOP {
            // SAFETY: rt_sigaction reads `default_action` (large enough for the
            // kernel's struct with an 8-byte mask) and writes nothing back.
            unsafe {
                libc::syscall(
                    libc::SYS_rt_sigaction,
                    sig,
                    default_action.as_ptr(),
                    std::ptr::null_mut::<u8>(),
                    8usize,
                )
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str) -> CString {
        CString::new(s).unwrap()
    }

    #[test]
    fn a_program_with_a_slash_is_the_only_candidate() {
        assert_eq!(candidates(&c("./train"), Some(b"/bin")), Ok(vec![c("./train")]));
        assert_eq!(candidates(&c("/usr/bin/python"), None), Ok(vec![c("/usr/bin/python")]));
    }

    #[test]
    fn an_empty_name_has_no_candidate_and_a_too_long_directory_is_skipped() {
        assert_eq!(candidates(&c(""), Some(b"/bin")), Err(libc::ENOENT));
        let long = format!("/{}", "d".repeat(libc::PATH_MAX as usize));
        assert_eq!(
            candidates(&c("sh"), Some(format!("{long}:/bin").as_bytes())),
            Ok(vec![c("/bin/sh")])
        );
    }

    #[test]
    fn an_empty_name_or_a_too_long_bare_name_is_refused_before_any_child() {
        assert_eq!(candidates(&c(&"n".repeat(NAME_MAX + 1)), None), Err(libc::ENAMETOOLONG));
        assert_eq!(candidates(&c(""), None), Err(libc::ENOENT));
        assert!(candidates(&c(&"n".repeat(NAME_MAX)), None).is_ok());
        let path = c(&format!("/{}", "n".repeat(NAME_MAX + 1)));
        assert_eq!(
            candidates(&path, None),
            Ok(vec![path.clone()]),
            "a path is execve's to judge"
        );
    }

    #[test]
    fn a_bare_name_is_looked_for_in_each_directory_of_path_in_order() {
        assert_eq!(
            candidates(&c("python"), Some(b"/opt/bin::/usr/bin")),
            Ok(vec![c("/opt/bin/python"), c("python"), c("/usr/bin/python")])
        );
        assert_eq!(
            candidates(&c("sh"), None),
            Ok(vec![c("/usr/local/bin/sh"), c("/bin/sh"), c("/usr/bin/sh")])
        );
    }
}
