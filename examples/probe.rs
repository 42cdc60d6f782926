//! `probe`: a tiny command for meshwrap to wrap in tests and benchmarks. It
//! reports what a command sees under meshwrap, one line per event on stdout:
//!
//! - `probe signals [--fork]`: blocks every catchable signal, prints `ready`,
//!   then `signal N` for each one it receives, and exits 0 after SIGTERM. With
//!   `--fork` it also starts a child that does the same; then every line starts
//!   with `leader ` (the probe) or `member ` (its child, in the same process
//!   group), for `--forward-to group`.
//! - `probe orphans N`: leaves N orphaned processes behind, lets them exit,
//!   and prints `reaped N` once none of them is left as a zombie (or `zombies
//!   K` after 10 s); then prints `ppid P` and waits for a line on stdin.
//!
//! - `probe hog`: prints `hogging`, then allocates and touches memory 16 MiB
//!   at a time until the kernel kills it (an OOM kill under a memory limit);
//!   at 1 GiB it gives up, prints `no limit` and exits 3.
//!
//! - `probe pending SIG COMMAND...`: execs COMMAND with SIG blocked and
//!   already pending, as if it had arrived at COMMAND's first instruction.
//! - `probe subreaper`: prints `subreaper 1` if it is a child subreaper
//!   (it would adopt its orphaned descendants), `subreaper 0` if not.
//!
//! It blocks signals and takes them with `rt_sigtimedwait` instead of
//! installing handlers, so no signal can arrive before it is ready to report it.

use std::io::{BufRead, Write};
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["signals"] => signals(""),
        ["signals", "--fork"] => fork_signals(),
        ["orphans", n] => orphans(n.parse().expect("orphans N")),
        ["hog"] => hog(),
        ["subreaper"] => subreaper(),
        ["pending", sig, command @ ..] if !command.is_empty() => pending(sig.parse().expect("pending SIG"), command),
        _ => {
            eprintln!("usage: probe signals [--fork] | orphans N | hog | subreaper | pending SIG COMMAND...");
            std::process::exit(2);
        }
    }
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Every signal but SIGCHLD as the kernel's 64-bit mask: libc's sigset
/// functions leave out the signals libc reserves (32-34), which meshwrap
/// forwards too, so the probe talks to the kernel directly.
static CATCHABLE: u64 = !(1 << (libc::SIGCHLD - 1));

/// Adds `mask` (the kernel's form) to the blocked signals.
fn block(mask: u64) {
    // SAFETY: rt_sigprocmask reads the 8-byte mask; the old mask is not asked for.
    unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_BLOCK,
            &raw const mask,
            std::ptr::null_mut::<u64>(),
            8usize,
        )
    };
}

fn signals(prefix: &str) -> ! {
    block(CATCHABLE);
    say(&format!("{prefix}ready"));
    loop {
        // SAFETY: rt_sigtimedwait reads the 8-byte mask; no siginfo, no timeout.
        let sig = unsafe {
            libc::syscall(
                libc::SYS_rt_sigtimedwait,
                &raw const CATCHABLE,
                std::ptr::null_mut::<libc::siginfo_t>(),
                std::ptr::null::<libc::timespec>(),
                8usize,
            )
        };
        if sig > 0 {
            say(&format!("{prefix}signal {sig}"));
            if sig == libc::SIGTERM as i64 {
                std::process::exit(0);
            }
        }
    }
}

/// Blocks `sig`, sends it to itself and execs `command`, which so starts
/// with that signal blocked and pending (both survive execve), as if it had
/// arrived at its first instruction.
fn pending(sig: i32, command: &[&str]) {
    use std::os::unix::process::CommandExt;
    block(1 << (sig - 1));
    // SAFETY: getpid and kill take plain integers.
    unsafe { libc::kill(libc::getpid(), sig) };
    let error = std::process::Command::new(command[0]).args(&command[1..]).exec();
    eprintln!("probe: cannot exec {}: {error}", command[0]);
    std::process::exit(127);
}

/// Whether this process would adopt its orphaned descendants.
fn subreaper() {
    let mut flag: libc::c_int = 0;
    // SAFETY: PR_GET_CHILD_SUBREAPER writes one int to the pointer given.
    unsafe { libc::prctl(libc::PR_GET_CHILD_SUBREAPER, &raw mut flag) };
    say(&format!("subreaper {flag}"));
}

fn fork_signals() -> ! {
    // SAFETY: this program is single-threaded, so fork is safe to follow with any code.
    match unsafe { libc::fork() } {
        0 => {
            // The member must not outlive a test that signals only the leader.
            // SAFETY: prctl with PR_SET_PDEATHSIG takes a signal number.
            unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
            signals("member ")
        }
        -1 => panic!("fork failed"),
        _ => signals("leader "),
    }
}

fn orphans(n: usize) {
    let mut pipe = [0; 2];
    // SAFETY: `pipe` has room for the two descriptors.
    assert_eq!(unsafe { libc::pipe(pipe.as_mut_ptr()) }, 0);
    let (read_end, write_end) = (pipe[0], pipe[1]);
    let mut report = [0; 2];
    // SAFETY: as above.
    assert_eq!(unsafe { libc::pipe(report.as_mut_ptr()) }, 0);
    // SAFETY: single-threaded; the children only make async-signal-safe calls.
    let middle = unsafe { libc::fork() };
    if middle == 0 {
        for _ in 0..n {
            // SAFETY: as above.
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                // SAFETY: drops the pipe ends this orphan must not hold (the parent
                // waits for EOF on both), then blocks until the release, then exits.
                unsafe {
                    libc::close(write_end);
                    libc::close(report[0]);
                    libc::close(report[1]);
                    let mut byte = 0u8;
                    libc::read(read_end, (&mut byte as *mut u8).cast(), 1);
                    libc::_exit(0);
                }
            }
            let bytes = pid.to_ne_bytes();
            // SAFETY: writes the 4 bytes of `bytes`.
            unsafe { libc::write(report[1], bytes.as_ptr().cast(), bytes.len()) };
        }
        // SAFETY: leaving the grandchildren orphaned is the point.
        unsafe { libc::_exit(0) };
    }
    // SAFETY: closing our copies; the middle process holds its own.
    unsafe {
        libc::close(report[1]);
        libc::close(read_end);
    }
    // SAFETY: `middle` is our own child; the status is not needed.
    unsafe { libc::waitpid(middle, std::ptr::null_mut(), 0) };
    let mut pids = Vec::new();
    let mut buf = [0u8; 4];
    // SAFETY: reads 4 bytes into `buf` until the middle process's end closes.
    while unsafe { libc::read(report[0], buf.as_mut_ptr().cast(), 4) } == 4 {
        pids.push(i32::from_ne_bytes(buf));
    }
    assert_eq!(pids.len(), n, "forked {} of {n}", pids.len());
    // Every orphan is alive and reparented now; closing the pipe lets them all exit.
    // SAFETY: our last copy of the write end.
    unsafe { libc::close(write_end) };
    let deadline = Instant::now() + Duration::from_secs(10);
    let left = loop {
        let left = pids
            .iter()
            .filter(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists())
            .count();
        if left == 0 || Instant::now() > deadline {
            break left;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    say(&if left == 0 {
        format!("reaped {n}")
    } else {
        format!("zombies {left}")
    });
    // SAFETY: getppid cannot fail.
    say(&format!("ppid {}", unsafe { libc::getppid() }));
    let _ = std::io::stdin().lock().lines().next();
}

fn hog() {
    say("hogging");
    let mut held: Vec<Vec<u8>> = Vec::new();
    loop {
        // Touched, not just reserved, so the pages count against the limit.
        held.push(vec![1u8; 16 << 20]);
        if held.len() == 64 {
            say("no limit");
            std::process::exit(3);
        }
    }
}
