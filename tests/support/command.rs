//! Running the real meshwrap binary, with failures that explain themselves:
//! every assertion that fails prints the command line, the exit status and
//! everything the process wrote to stdout and stderr.
//!
//! Every wait here is bounded, and synchronisation is by markers: a test waits
//! for a line the command (or meshwrap's log) prints, never for a fixed time.

use std::ffi::OsStr;
use std::fmt;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// How long any single run or marker may take before the test fails.
pub const BOUND: Duration = Duration::from_secs(20);

/// The meshwrap under test: cargo's build of this source, or the binary
/// MESHWRAP_TEST_BIN names (.ci/run runs the integration tests again on the
/// shipped static, non-PIE one that .ci/release built).
pub fn meshwrap_bin() -> PathBuf {
    match std::env::var_os("MESHWRAP_TEST_BIN") {
        Some(bin) => {
            let bin = PathBuf::from(bin);
            assert!(bin.is_file(), "MESHWRAP_TEST_BIN={} is not a file", bin.display());
            bin
        }
        None => PathBuf::from(env!("CARGO_BIN_EXE_meshwrap")),
    }
}

/// The directory where `cargo test` builds meshwrap and its examples.
pub fn cargo_bin_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_meshwrap"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The `probe` example (see examples/probe.rs), built by `cargo test` beside meshwrap.
pub fn probe_bin() -> String {
    let probe = cargo_bin_dir().join("examples/probe");
    assert!(
        probe.exists(),
        "{} is missing: run the tests with `cargo test`, which builds examples",
        probe.display()
    );
    probe.to_string_lossy().into_owned()
}

/// A meshwrap command line under construction.
pub struct Meshwrap {
    cmd: Command,
    shown: Vec<String>,
}

impl Meshwrap {
    pub fn new() -> Meshwrap {
        Meshwrap::program(meshwrap_bin())
    }

    /// Another program run the same way (e.g. `unshare ... meshwrap`).
    pub fn program(program: impl AsRef<OsStr>) -> Meshwrap {
        let mut cmd = Command::new(program.as_ref());
        // The test's own environment must not configure meshwrap, directly or
        // through scuttle's variables.
        for (key, _) in std::env::vars_os() {
            let name = key.to_string_lossy();
            if name.starts_with("MESHWRAP_") || meshwrap::scuttle::VARS.contains(&name.as_ref()) {
                cmd.env_remove(key);
            }
        }
        Meshwrap {
            cmd,
            shown: vec![program.as_ref().to_string_lossy().into_owned()],
        }
    }

    pub fn arg(&mut self, arg: impl AsRef<OsStr>) -> &mut Meshwrap {
        self.shown.push(arg.as_ref().to_string_lossy().into_owned());
        self.cmd.arg(arg);
        self
    }

    pub fn args<I: IntoIterator<Item = S>, S: AsRef<OsStr>>(&mut self, args: I) -> &mut Meshwrap {
        for arg in args {
            self.arg(arg);
        }
        self
    }

    pub fn env(&mut self, key: &str, value: &str) -> &mut Meshwrap {
        self.shown.insert(0, format!("{key}={value}"));
        self.cmd.env(key, value);
        self
    }

    /// Access to the std command for unusual set-ups (signal state, cwd).
    pub fn command(&mut self) -> &mut Command {
        &mut self.cmd
    }

    /// Runs to completion with empty stdin; fails the test if it takes longer than [`BOUND`].
    pub fn run(&mut self) -> Run {
        self.spawn().finish()
    }

    /// Starts it with piped stdio; lines are collected as they arrive.
    pub fn spawn(&mut self) -> Running {
        let mut child = self
            .cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.shown.join(" ")));
        let (tx, lines) = channel();
        let stdout = collect(child.stdout.take().unwrap(), Stream::Stdout, tx.clone());
        let stderr = collect(child.stderr.take().unwrap(), Stream::Stderr, tx);
        Running {
            shown: self.shown.join(" "),
            stdin: child.stdin.take(),
            child,
            lines,
            unmatched: Vec::new(),
            stdout,
            stderr,
            started: Instant::now(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

fn collect(mut pipe: impl Read + Send + 'static, stream: Stream, tx: Sender<(Stream, String)>) -> Arc<Mutex<Vec<u8>>> {
    let all = Arc::new(Mutex::new(Vec::new()));
    let sink = all.clone();
    thread::spawn(move || {
        let mut reader = BufReader::new(&mut pipe);
        let mut line = Vec::new();
        while reader.read_until(b'\n', &mut line).unwrap_or(0) > 0 {
            sink.lock().unwrap().extend_from_slice(&line);
            let _ = tx.send((stream, String::from_utf8_lossy(&line).trim_end().to_string()));
            line.clear();
        }
    });
    all
}

/// A running meshwrap.
pub struct Running {
    shown: String,
    stdin: Option<ChildStdin>,
    child: Child,
    lines: Receiver<(Stream, String)>,
    /// Lines received but not yet matched by a wait, so markers may arrive in any order.
    unmatched: Vec<(Stream, String)>,
    stdout: Arc<Mutex<Vec<u8>>>,
    stderr: Arc<Mutex<Vec<u8>>>,
    started: Instant,
}

impl Running {
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Waits for a line on `stream` that is `text` (`exact`) or contains it; returns it.
    pub fn wait_for(&mut self, stream: Stream, text: &str, exact: bool) -> String {
        self.wait_for_within(stream, text, exact, BOUND)
    }

    /// A log line containing `text`, waited for up to `bound` (for what
    /// meshwrap says only after a minute).
    pub fn wait_stderr_within(&mut self, text: &str, bound: Duration) -> String {
        self.wait_for_within(Stream::Stderr, text, false, bound)
    }

    fn wait_for_within(&mut self, stream: Stream, text: &str, exact: bool, bound: Duration) -> String {
        let matches = |s: Stream, line: &str| s == stream && (line == text || (!exact && line.contains(text)));
        if let Some(i) = self.unmatched.iter().position(|(s, line)| matches(*s, line)) {
            return self.unmatched.remove(i).1;
        }
        let deadline = Instant::now() + bound;
        loop {
            match self
                .lines
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                Ok((s, line)) if matches(s, &line) => return line,
                Ok(other) => self.unmatched.push(other),
                Err(RecvTimeoutError::Timeout) => {
                    self.fail(&format!("no {stream:?} line matching {text:?} within {bound:?}"))
                }
                Err(RecvTimeoutError::Disconnected) => self.fail(&format!(
                    "the process closed {stream:?} before printing a line matching {text:?}"
                )),
            }
        }
    }

    /// Waits for the command to print exactly this line.
    pub fn wait_stdout(&mut self, line: &str) -> String {
        self.wait_for(Stream::Stdout, line, true)
    }

    /// Waits for a log line containing `text`.
    pub fn wait_stderr(&mut self, text: &str) -> String {
        self.wait_for(Stream::Stderr, text, false)
    }

    pub fn stdout_so_far(&self) -> String {
        String::from_utf8_lossy(&self.stdout.lock().unwrap()).into_owned()
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: kill takes plain integers.
        assert_eq!(unsafe { libc::kill(self.pid(), sig) }, 0, "kill({}, {sig})", self.pid());
    }

    pub fn write_stdin(&mut self, bytes: &[u8]) {
        self.stdin.as_mut().expect("stdin still open").write_all(bytes).unwrap();
    }

    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Whether the process exits within `limit` (it is left running if not).
    pub fn exits_within(&mut self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            if self.child.try_wait().unwrap().is_some() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// Waits (bounded) for the process to exit and returns everything it printed.
    pub fn finish(mut self) -> Run {
        self.stdin = None;
        // BOUND from the start, and a few seconds from now for a test that
        // let it run longer on purpose (a wait that speaks after a minute).
        let deadline = (self.started + BOUND).max(Instant::now() + Duration::from_secs(5));
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                self.fail(&format!("still running after {BOUND:?}; killed"));
            }
            thread::sleep(Duration::from_millis(2));
        };
        // The pipes close when the process and everything holding them exit;
        // an orphan that still holds one must not hang the test.
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline
            && self.lines.recv_timeout(Duration::from_millis(50)) != Err(RecvTimeoutError::Disconnected)
        {}
        let raw_stdout = self.stdout.lock().unwrap().clone();
        let stderr = String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned();
        Run {
            shown: self.shown.clone(),
            status,
            stdout: String::from_utf8_lossy(&raw_stdout).into_owned(),
            stderr,
            raw_stdout,
            elapsed: self.started.elapsed(),
        }
    }

    fn fail(&mut self, why: &str) -> ! {
        let _ = self.child.kill();
        let _ = self.child.wait();
        panic!(
            "{why}\ncommand: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.shown,
            self.stdout_so_far(),
            String::from_utf8_lossy(&self.stderr.lock().unwrap())
        );
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A finished run.
pub struct Run {
    shown: String,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub raw_stdout: Vec<u8>,
    pub elapsed: Duration,
}

impl fmt::Display for Run {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "command: {}\nstatus: {:?} after {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.shown, self.status, self.elapsed, self.stdout, self.stderr
        )
    }
}

impl Run {
    /// The exit code; fails if the process was killed by a signal.
    pub fn code(&self) -> i32 {
        self.status
            .code()
            .unwrap_or_else(|| panic!("meshwrap was killed by a signal\n{self}"))
    }

    /// The exit code as the kubelet reports a container's: its own code, or
    /// 128+N when signal N killed it.
    pub fn container_code(&self) -> i32 {
        use std::os::unix::process::ExitStatusExt;
        self.status
            .code()
            .or_else(|| self.status.signal().map(|s| 128 + s))
            .unwrap_or_else(|| panic!("no exit code or signal\n{self}"))
    }

    pub fn assert_code(&self, expected: i32) -> &Run {
        assert_eq!(self.code(), expected, "unexpected exit code\n{self}");
        self
    }

    pub fn assert_stderr_has(&self, text: &str) -> &Run {
        assert!(self.stderr.contains(text), "stderr lacks {text:?}\n{self}");
        self
    }

    pub fn assert_stderr_lacks(&self, text: &str) -> &Run {
        assert!(!self.stderr.contains(text), "stderr has {text:?}\n{self}");
        self
    }

    pub fn assert_stdout(&self, expected: &str) -> &Run {
        assert_eq!(self.stdout, expected, "unexpected stdout\n{self}");
        self
    }

    /// Fails with the whole run shown unless `ok` holds.
    pub fn check(&self, ok: bool, what: &str) -> &Run {
        assert!(ok, "{what}\n{self}");
        self
    }
}
