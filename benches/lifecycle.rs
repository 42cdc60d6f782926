//! `cargo bench --bench lifecycle [-- --quick]`: what meshwrap costs and how
//! fast it is, measured on the release binary as a whole process, against an
//! in-process fake sidecar on loopback, next to the recipe users paste today:
//!
//!     until curl -sf READY_URL; do sleep 1; done; CMD; curl -sf -XPOST QUIT_URL
//!
//! One clock (CLOCK_MONOTONIC) spans the processes: the command meshwrap runs
//! is this benchmark binary again (`--helper MODE`), which prints that clock
//! when it starts, when a signal reaches it, and just before it exits. Each
//! figure is a median and p95 over repeated runs. The full run prints a
//! markdown table and writes it to BENCHMARKS.md, with the readiness latency
//! distribution plotted in images/readiness-latency.svg; `--quick` runs a few
//! repetitions of each for CI and writes nothing.
//!
//! `--poll frugal` is measured beside linkerd-await, the peer it must beat
//! clearly (at most 0.8 times its CPU over a 5 s wait, half its median
//! latency), when MESHWRAP_BENCH_PEER names a linkerd-await binary (built
//! outside this repository); without it the peer rows say so and frugal is
//! judged against the peer's figures from an earlier run.
//!
//! The `envoy` section measures readiness against the real Envoy 1.40.0
//! (benches/lifecycle/envoy.rs): latency from Envoy's own "all dependencies
//! initialized" stamp to the command's start, and CPU over a 5 s wait beside
//! two stand-ins; `--only envoy` runs it alone and writes its block of
//! BENCHMARKS.md in place.
//!
//! A poll's CPU is judged against its floor, measured in the same run by
//! this binary's own bare loop on the same schedule (`--helper sleeps` and
//! `--helper requests`); callgrind and strace, when installed, count its
//! instructions and system calls.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// Where kubectl-meshwrap's benchmark (kubectl-meshwrap/benches/inject.rs)
/// writes its section of BENCHMARKS.md.
const INJECT_MARKER: &str = "<!-- kubectl-meshwrap inject benchmark -->";

/// The first line of benches/LIMITS.md, which the lifecycle section ends with.
const LIMITS_HEADING: &str = "## What limits each figure";

#[path = "../examples/common/http.rs"]
mod http;

#[path = "lifecycle/envoy.rs"]
mod envoy;

fn now_ns() -> u64 {
    // SAFETY: an all-zero timespec is valid; clock_gettime writes one timespec.
    let ts = unsafe {
        let mut ts: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
        ts
    };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--helper") {
        helper(&args[i + 1]);
    }
    let quick = args.iter().any(|a| a == "--quick");
    // `--only SECTION` (startup, readiness, quit, ...) for profiling one figure; writes nothing.
    let only = args.iter().position(|a| a == "--only").map(|i| args[i + 1].clone());
    let bench = Bench::new(quick, only);
    bench.run();
}

// ---------------------------------------------------------------------------
// The helper child.

fn say(line: String) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn blocked(signals: &[i32]) -> libc::sigset_t {
    // SAFETY: sigset_t is plain data, initialised by sigemptyset; the mask is ours.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for &s in signals {
            libc::sigaddset(&mut set, s);
        }
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

fn helper(mode: &str) -> ! {
    let start = now_ns();
    match mode {
        // Startup, readiness and quit: the first and the last instruction.
        "run" => {
            say(format!("start {start}"));
            say(format!("exit {}", now_ns()));
        }
        // Readiness against the real Envoy: the first instruction on the
        // wall clock, which Envoy's log stamps are on.
        "realtime" => say(format!("start {}", envoy::realtime_ns())),
        // Signal latency: the moment SIGTERM is taken.
        "signal" => {
            let set = blocked(&[libc::SIGTERM]);
            say(format!("ready {start}"));
            // SAFETY: `set` is initialised.
            unsafe { libc::sigwaitinfo(&set, std::ptr::null_mut()) };
            say(format!("signal {}", now_ns()));
        }
        // A signal flood: count SIGUSR1 until SIGTERM, then die of SIGTERM.
        "count" => {
            let set = blocked(&[libc::SIGUSR1, libc::SIGTERM]);
            say(format!("ready {start}"));
            let mut usr1 = 0u64;
            loop {
                // SAFETY: `set` is initialised.
                let sig = unsafe { libc::sigwaitinfo(&set, std::ptr::null_mut()) };
                if sig == libc::SIGUSR1 {
                    usr1 += 1;
                } else if sig == libc::SIGTERM {
                    say(format!("usr1 {usr1}"));
                    // SAFETY: restores the default action and unblocks it, so the raise kills us.
                    unsafe {
                        libc::signal(libc::SIGTERM, libc::SIG_DFL);
                        libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
                        libc::raise(libc::SIGTERM);
                    }
                }
            }
        }
        // Memory: stay until stdin closes.
        "sleep" => {
            say(format!("ready {start}"));
            let _ = std::io::stdin().read(&mut [0u8; 1]);
        }
        // The floor of a poll's CPU (`Bench::poll_floor`): `--helper sleeps
        // SECS PORT` sleeps on the fast schedule for SECS; `requests` also
        // sends a bare GET on one kept connection to PORT after each wake-up.
        "sleeps" | "requests" => floor_loop(mode == "requests"),
        other => panic!("unknown helper mode {other}"),
    }
    std::process::exit(0);
}

/// The floor loop: what a poll costs at the least, with nothing of meshwrap's
/// own. The sleeps follow the fast schedule (10 ms + t/80, at most 90 ms),
/// so the wake-ups come as often as meshwrap's; prints `wakeups N`.
fn floor_loop(requests: bool) {
    let args: Vec<String> = std::env::args().collect();
    let secs: f64 = args[args.len() - 2].parse().unwrap();
    let port: u16 = args[args.len() - 1].parse().unwrap();
    let mut conn = requests.then(|| TcpStream::connect(("127.0.0.1", port)).unwrap());
    let request = format!("GET /ready HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n\r\n");
    let (begun, mut wakeups) = (now_ns(), 0u64);
    let mut buf = [0u8; 4096];
    while (now_ns() - begun) as f64 / 1e9 < secs {
        if let Some(conn) = &mut conn {
            conn.write_all(request.as_bytes()).unwrap();
            let mut got = 0;
            while !whole_answer(&buf[..got]) {
                got += conn.read(&mut buf[got..]).unwrap();
            }
        }
        wakeups += 1;
        let t = Duration::from_nanos(now_ns() - begun);
        thread::sleep((Duration::from_millis(10) + t / 80).min(Duration::from_millis(90)));
    }
    say(format!("wakeups {wakeups}"));
}

/// One run of the floor loop (`--helper MODE SECS PORT`): its CPU in ms
/// (user + system, from wait4) and its wake-ups.
fn floor_run(mode: &str, secs: f64, port: u16) -> (f64, u64) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--helper", mode, &secs.to_string(), &port.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lines = lines_of(child.stdout.take().unwrap());
    let mut r = Running { child, lines };
    let wakeups = r.value("wakeups ");
    (ms(r.wait().1), wakeups)
}

/// Whether `bytes` hold one whole HTTP answer, as the sidecars here frame
/// theirs: a `content-length` body (the stand-ins) or a chunked one ending
/// in its last chunk (Envoy's admin), so the next request on the kept
/// connection reads its own answer.
fn whole_answer(bytes: &[u8]) -> bool {
    let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&bytes[..end]).to_ascii_lowercase();
    let length: Option<usize> = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map(|n| n.trim().parse().unwrap());
    match length {
        Some(n) => bytes.len() >= end + 4 + n,
        None => bytes.ends_with(b"0\r\n\r\n"),
    }
}

// ---------------------------------------------------------------------------
// The fake sidecar: refused until it listens, then 503 or 200 as told.

struct Sidecar {
    port: u16,
    /// The port's socket, bound but not listening (so connections are
    /// refused) until `listen`: nothing else can take the port meanwhile.
    reserved: Mutex<Option<std::os::fd::OwnedFd>>,
    ready: Arc<AtomicBool>,
    /// Writes each answer's head and body apart, 2 ms between, as Python's
    /// http.server does (set before `listen`).
    split: Arc<AtomicBool>,
    requests: Arc<AtomicU64>,
    /// Connections accepted.
    connections: Arc<AtomicU64>,
    quit_at: Arc<Mutex<Vec<u64>>>,
    listening: Mutex<Option<(Arc<AtomicBool>, thread::JoinHandle<()>)>>,
}

impl Sidecar {
    fn new() -> Sidecar {
        // A port below the ephemeral range, held by a bound socket until it listens.
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let (port, reserved) = loop {
            let port = 21000 + (std::process::id() as u64 % 300 * 20 + NEXT.fetch_add(1, Ordering::SeqCst)) % 9000;
            if let Some(fd) = bound(port as u16) {
                break (port as u16, fd);
            }
        };
        Sidecar {
            port,
            reserved: Mutex::new(Some(reserved)),
            ready: Arc::new(AtomicBool::new(false)),
            split: Arc::new(AtomicBool::new(false)),
            requests: Arc::new(AtomicU64::new(0)),
            connections: Arc::new(AtomicU64::new(0)),
            quit_at: Arc::new(Mutex::new(Vec::new())),
            listening: Mutex::new(None),
        }
    }

    fn ready_url(&self) -> String {
        format!("http://127.0.0.1:{}/healthz/ready", self.port)
    }
    fn quit_url(&self) -> String {
        format!("http://127.0.0.1:{}/quitquitquit", self.port)
    }

    /// Starts listening; returns the moment the port began accepting connections.
    fn listen(&self) -> u64 {
        let listener = match self.reserved.lock().unwrap().take() {
            Some(fd) => {
                use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd};
                // SAFETY: listen on the socket this sidecar owns; from_raw_fd takes that ownership over.
                unsafe {
                    assert_eq!(
                        libc::listen(fd.as_raw_fd(), 128),
                        0,
                        "listen on the fake sidecar's port"
                    );
                    TcpListener::from_raw_fd(fd.into_raw_fd())
                }
            }
            None => TcpListener::bind(("127.0.0.1", self.port)).expect("bind the fake sidecar"),
        };
        let accepting = now_ns();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        // Connections stay open between requests, as Go's and Envoy's servers
        // keep them, and are served by threads started beforehand: a thread
        // created per connection would put its start-up into meshwrap's figures.
        let (queue, connections) = std::sync::mpsc::channel::<TcpStream>();
        let connections = Arc::new(Mutex::new(connections));
        for _ in 0..4 {
            let connections = connections.clone();
            let (ready, requests, quit_at) = (self.ready.clone(), self.requests.clone(), self.quit_at.clone());
            let split = self.split.load(Ordering::SeqCst);
            thread::spawn(move || {
                loop {
                    let Ok(mut conn) = connections.lock().unwrap().recv() else {
                        return;
                    };
                    loop {
                        let line = http::read_request_line(&mut conn);
                        if line.is_empty() {
                            // Closed: a connect-and-close probe (meshwrap's check of a refusing port) or the client is done.
                            break;
                        }
                        let at = now_ns();
                        requests.fetch_add(1, Ordering::SeqCst);
                        let status = if line.starts_with("POST /quitquitquit") {
                            quit_at.lock().unwrap().push(at);
                            "200 OK"
                        } else if ready.load(Ordering::SeqCst) {
                            "200 OK"
                        } else {
                            "503 Service Unavailable"
                        };
                        if split {
                            let body = b"not ready";
                            let _ = conn.set_nodelay(true);
                            let _ = conn.write_all(http::head(status, body.len(), false).as_bytes());
                            thread::sleep(Duration::from_millis(2));
                            let _ = conn.write_all(body);
                        } else {
                            http::respond_with(&mut conn, status, b"", false);
                        }
                    }
                }
            });
        }
        let connections = self.connections.clone();
        let handle = thread::spawn(move || {
            for conn in listener.incoming() {
                connections.fetch_add(1, Ordering::SeqCst);
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                if let Ok(conn) = conn {
                    let _ = queue.send(conn);
                }
            }
        });
        *self.listening.lock().unwrap() = Some((flag, handle));
        accepting
    }

    fn stop(&self) {
        if let Some((stop, handle)) = self.listening.lock().unwrap().take() {
            stop.store(true, Ordering::SeqCst);
            let _ = TcpStream::connect(("127.0.0.1", self.port));
            // The listener is closed only when the thread has returned.
            let _ = handle.join();
        }
    }
}

/// A TCP socket bound to 127.0.0.1:`port` and not listening, or None if the port is taken.
fn bound(port: u16) -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: plain socket calls on a descriptor this function owns; the
    // sockaddr is a live struct passed with its own size.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return None;
        }
        let fd = std::os::fd::OwnedFd::from_raw_fd(fd);
        let one: libc::c_int = 1;
        let raw = std::os::fd::AsRawFd::as_raw_fd(&fd);
        libc::setsockopt(raw, libc::SOL_SOCKET, libc::SO_REUSEADDR, (&raw const one).cast(), 4);
        let mut addr: libc::sockaddr_in = std::mem::zeroed();
        addr.sin_family = libc::AF_INET as libc::sa_family_t;
        addr.sin_port = port.to_be();
        addr.sin_addr.s_addr = u32::from(std::net::Ipv4Addr::LOCALHOST).to_be();
        let len = size_of::<libc::sockaddr_in>() as libc::socklen_t;
        (libc::bind(raw, (&raw const addr).cast(), len) == 0).then_some(fd)
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        self.stop();
    }
}

// ---------------------------------------------------------------------------
// Running a wrapper (meshwrap or the bash recipe) around the helper.

#[derive(Clone, Copy, PartialEq)]
enum Wrapper {
    Meshwrap,
    /// meshwrap built with another readiness schedule (the binary's path),
    /// run with `--poll frugal` when the schedule is a frugal one.
    Schedule(&'static str, bool),
    /// The shipped binary with `--poll frugal`.
    Frugal,
    /// linkerd-await (MESHWRAP_BENCH_PEER): `--port`, and `--timeout` if given.
    Peer(&'static str),
    Baseline,
    Direct,
    Shell,
}

struct Running {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Running {
    /// The number after `word` in the next line that starts with it (bounded wait).
    fn value(&mut self, word: &str) -> u64 {
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(30))
                .unwrap_or_else(|_| panic!("no `{word}` line"));
            if let Some(rest) = line.strip_prefix(word) {
                return rest.trim().parse().unwrap();
            }
        }
    }

    /// Waits (bounded) for a line containing `text`.
    fn line_with(&mut self, text: &str) {
        while !self
            .lines
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("no line with `{text}`"))
            .contains(text)
        {}
    }

    /// Waits for exit; returns the exit code and the process's CPU time (user+sys, ns).
    fn wait(mut self) -> (i32, u64) {
        // The `sleep` helper ends when its stdin closes.
        drop(self.child.stdin.take());
        let mut status = 0;
        // SAFETY: an all-zero rusage is valid; wait4 fills `status` and `usage` for our own child.
        let usage = unsafe {
            let mut usage: libc::rusage = std::mem::zeroed();
            libc::wait4(self.child.id() as i32, &mut status, 0, &mut usage);
            usage
        };
        let cpu = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
        let code = if libc::WIFEXITED(status) {
            libc::WEXITSTATUS(status)
        } else {
            128 + libc::WTERMSIG(status)
        };
        (code, cpu(usage.ru_utime) + cpu(usage.ru_stime))
    }
}

const STATIC_BIN: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/target/x86_64-unknown-linux-musl/release/meshwrap"
);

/// How .ci/release builds the shipped binary's crate: static and non-PIE
/// (`cargo rustc`, so the flag reaches meshwrap's binary crate alone).
const SHIPPED: [&str; 3] = ["--", "-C", "relocation-model=static"];

/// The shipped static binary, built now from this source with the cargo that
/// runs the benchmark, as .ci/release builds it; cargo's own release build
/// of meshwrap when the musl target is not installed.
fn meshwrap_bin() -> &'static str {
    static BIN: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let built = Command::new(cargo)
            .args([
                "rustc",
                "--quiet",
                "--release",
                "--target",
                "x86_64-unknown-linux-musl",
                // meshwrap alone: built with the workspace's other crate,
                // it would get that crate's tokio and hyper features.
                "-p",
                "meshwrap",
                "--bin",
                "meshwrap",
            ])
            .args(SHIPPED)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .is_ok_and(|s| s.success());
        if built {
            STATIC_BIN
        } else {
            env!("CARGO_BIN_EXE_meshwrap")
        }
    })
}

/// linkerd-await, if MESHWRAP_BENCH_PEER names its binary.
fn peer_bin() -> Option<&'static str> {
    let path = std::env::var("MESHWRAP_BENCH_PEER").ok()?;
    std::path::Path::new(&path)
        .is_file()
        .then(|| &*Box::leak(path.into_boxed_str()))
}

/// callgrind's count of the instructions `bin ARGS` runs (its own, not its
/// children's); with `before`, only those before the first call of that
/// function (which needs a binary with its symbols).
fn callgrind(bin: &str, args: &[&str], before: Option<&str>) -> Option<u64> {
    let out = std::env::temp_dir().join(format!("meshwrap-bench-callgrind.{}", std::process::id()));
    let mut cmd = Command::new("valgrind");
    cmd.arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out.display()));
    if let Some(function) = before {
        cmd.arg(format!("--dump-before={function}"));
    }
    let output = cmd.arg(bin).args(args).stdout(Stdio::null()).output().ok();
    // With --dump-before, the first dump (OUT.1) holds what ran before it.
    let first = std::path::PathBuf::from(format!("{}.1", out.display()));
    let counted = match before {
        None => output.and_then(|o| {
            let text = String::from_utf8_lossy(&o.stderr).into_owned();
            let line = text.lines().find(|l| l.contains("I   refs:"))?;
            line.rsplit(' ').next()?.replace(',', "").parse::<u64>().ok()
        }),
        Some(_) => std::fs::read_to_string(&first).ok().and_then(|text| {
            let line = text.lines().find(|l| l.starts_with("totals:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        }),
    };
    let _ = std::fs::remove_file(&out);
    let _ = std::fs::remove_file(&first);
    counted
}

/// The shipped binary's code with its symbols (callgrind needs them to stop
/// counting at a function), built under target/schedules.
fn unstripped_bin() -> &'static str {
    static BIN: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();
    BIN.get_or_init(|| build_variant(&[("CARGO_PROFILE_RELEASE_STRIP", "false")], "meshwrap-unstripped"))
}

/// linkerd-await's figures from run3 (2026-11), for when it cannot run here:
/// median readiness latency in the 1-3 s window, and CPU over a 5 s wait (ms).
const PEER_RUN3: (f64, f64) = (505.0, 2.4);

/// The lines a pipe carries, as they arrive.
fn lines_of(pipe: impl Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    let (tx, lines) = std::sync::mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    lines
}

/// `meshwrap guard` beside a run, pointed at the same sidecar and directory,
/// once it watches (its log, on stderr, is its only output).
fn start_guard(sidecar: &Sidecar, dir: &std::path::Path) -> Running {
    let mut child = Command::new(meshwrap_bin())
        .arg("guard")
        .args(["--ready-url", &sidecar.ready_url(), "--quit-url", &sidecar.quit_url()])
        .arg("--guard-dir")
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = lines_of(child.stderr.take().unwrap());
    let mut guard = Running { child, lines };
    guard.line_with("guard: watching");
    guard
}

/// A field of /proc/PID/status in MiB (VmHWM: peak resident memory; RssAnon:
/// the private part now, without the binary's clean, shareable file pages).
fn status_mib(pid: u32, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: f64 = status
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    kb / 1024.0
}

fn peak_rss_mib(pid: u32) -> f64 {
    status_mib(pid, "VmHWM:")
}

fn start(wrapper: Wrapper, sidecars: &[&Sidecar], mode: &str, extra: &[&str]) -> Running {
    let me = std::env::current_exe().unwrap();
    let helper = format!("{} --helper {mode}", me.display());
    let mut cmd = match wrapper {
        Wrapper::Meshwrap | Wrapper::Schedule(..) | Wrapper::Frugal => {
            let (bin, frugal) = match wrapper {
                Wrapper::Schedule(bin, frugal) => (bin, frugal),
                _ => (meshwrap_bin(), wrapper == Wrapper::Frugal),
            };
            let mut cmd = Command::new(bin);
            cmd.arg("-q");
            if frugal {
                cmd.args(["--poll", "frugal"]);
            }
            for s in sidecars {
                cmd.args(["--ready-url", &s.ready_url(), "--quit-url", &s.quit_url()]);
            }
            cmd.args(extra).arg("--").arg(&me).args(["--helper", mode]);
            cmd
        }
        Wrapper::Baseline => {
            let s = sidecars[0];
            let script = format!(
                "until curl -sf {} >/dev/null; do sleep 1; done; {helper}; curl -sf -XPOST {} >/dev/null",
                s.ready_url(),
                s.quit_url()
            );
            let mut cmd = Command::new("bash");
            cmd.args(["-c", &script]);
            cmd
        }
        Wrapper::Peer(bin) => {
            let mut cmd = Command::new(bin);
            cmd.args(["--port", &sidecars[0].port.to_string()]);
            if let Some(i) = extra.iter().position(|&a| a == "--timeout") {
                cmd.args(["--timeout", extra[i + 1]]);
            }
            cmd.arg("--").arg(&me).args(["--helper", mode]);
            cmd
        }
        Wrapper::Direct => {
            let mut cmd = Command::new(&me);
            cmd.args(["--helper", mode]);
            cmd
        }
        // The cheapest wrapper that stays alive: a shell that forks, execs and waits.
        Wrapper::Shell => {
            let mut cmd = Command::new("sh");
            cmd.args(["-c", &format!("{helper}; :")]);
            cmd
        }
    };
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lines = lines_of(child.stdout.take().unwrap());
    Running { child, lines }
}

// ---------------------------------------------------------------------------
// Statistics and the report.

#[derive(Clone)]
struct Sample(Vec<f64>);

impl Sample {
    fn quantile(&self, q: f64) -> f64 {
        let mut v = self.0.clone();
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[((v.len() - 1) as f64 * q).round() as usize]
    }
    fn median(&self) -> f64 {
        self.quantile(0.5)
    }
    fn p95(&self) -> f64 {
        self.quantile(0.95)
    }
}

fn fmt(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

struct Row {
    figure: String,
    meshwrap: String,
    baseline: String,
    target: String,
    met: Option<bool>,
}

struct Bench {
    quick: bool,
    only: Option<String>,
    runs: usize,
    baseline_runs: usize,
    has_baseline: bool,
    rows: Mutex<Vec<Row>>,
    notes: Mutex<Vec<String>>,
    /// The real Envoy's block of BENCHMARKS.md (benches/lifecycle/envoy.rs).
    envoy_md: Mutex<Option<String>>,
}

impl Bench {
    fn new(quick: bool, only: Option<String>) -> Bench {
        let has = |tool: &str| {
            Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .output()
                .is_ok_and(|o| o.status.success())
        };
        Bench {
            quick,
            only,
            runs: if quick { 5 } else { 100 },
            baseline_runs: if quick { 2 } else { 20 },
            has_baseline: has("bash") && has("curl"),
            rows: Mutex::new(Vec::new()),
            notes: Mutex::new(Vec::new()),
            envoy_md: Mutex::new(None),
        }
    }

    fn row(&self, figure: &str, meshwrap: String, baseline: String, target: &str, met: Option<bool>) {
        println!("{figure}: meshwrap {meshwrap}; baseline {baseline}");
        self.rows.lock().unwrap().push(Row {
            figure: figure.into(),
            meshwrap,
            baseline,
            target: target.into(),
            met,
        });
    }

    /// Runs per readiness window: three times as many within 3 s, where a
    /// batch is short and a median's noise is most of its margin.
    fn runs_in(&self, window: (u64, u64)) -> usize {
        if window.1 <= 3000 { 3 * self.runs } else { self.runs }
    }

    /// Whether a measured figure meets its target; not judged in a --quick run,
    /// whose few runs (and 1 s waits) are a smoke test, not a measurement.
    fn judged(&self, met: bool) -> Option<bool> {
        (!self.quick).then_some(met)
    }

    fn note(&self, note: String) {
        println!("note: {note}");
        self.notes.lock().unwrap().push(note);
    }

    fn run(&self) {
        if !self.has_baseline {
            self.note("bash or curl is missing: the baseline column is empty".into());
        }
        // Build (or find) the binary before any clock starts.
        self.note(format!(
            "meshwrap measured: {}",
            meshwrap_bin()
                .trim_start_matches(env!("CARGO_MANIFEST_DIR"))
                .trim_start_matches('/')
        ));
        let wanted = |section: &str| self.only.as_deref().is_none_or(|only| only == section);
        let sections: [(&str, &dyn Fn()); 10] = [
            ("startup", &|| self.startup()),
            ("quit", &|| self.quit()),
            ("signal", &|| self.signal()),
            ("memory", &|| self.memory()),
            ("cpu", &|| self.cpu_while_waiting()),
            ("scaling", &|| self.scaling()),
            ("flood", &|| self.flood()),
            ("guard", &|| self.guard()),
            ("size", &|| self.binary_size()),
            ("envoy", &|| self.real_envoy()),
        ];
        let readiness = wanted("readiness").then(|| self.readiness());
        let schedules = if wanted("schedules") { self.schedules() } else { None };
        for (name, section) in sections {
            if wanted(name) {
                section();
            }
        }
        self.report(readiness, schedules);
    }

    /// `meshwrap -- helper` vs `helper`, sidecar already ready: spawn to the helper's first instruction.
    fn startup(&self) {
        let sidecar = Sidecar::new();
        sidecar.ready.store(true, Ordering::SeqCst);
        sidecar.listen();
        let once = |wrapper: Wrapper| {
            let before = now_ns();
            let mut r = start(wrapper, &[&sidecar], "run", &[]);
            let first = r.value("start ");
            r.wait();
            ms(first - before)
        };
        // Interleaved, so drift in this noisy VM's speed hits every column alike.
        let mut wrappers = vec![Wrapper::Direct, Wrapper::Meshwrap, Wrapper::Shell];
        if self.has_baseline {
            wrappers.push(Wrapper::Baseline);
        }
        let mut times = vec![Vec::new(); wrappers.len()];
        // Three times the runs of the other figures: a run is a few
        // milliseconds, and the ratio to sh's is judged within a tenth.
        for run in 0..3 * self.runs {
            for (i, &wrapper) in wrappers.iter().enumerate() {
                // The baseline is slow and steady: fewer runs of it suffice.
                if wrapper != Wrapper::Baseline || run < self.runs.min(50) {
                    times[i].push(once(wrapper));
                }
            }
        }
        let median = |i: usize| Sample(times[i].clone()).median();
        let direct = median(0);
        let overhead = median(1) - direct;
        let baseline = if self.has_baseline {
            format!("{} ms", fmt(median(3) - direct))
        } else {
            "n/a".into()
        };
        self.row(
            "startup overhead (median, vs running the command directly)",
            format!("{} ms", fmt(overhead)),
            baseline,
            "<= 1 ms",
            self.judged(overhead <= 1.0),
        );
        self.note(format!("spawning the helper directly takes {} ms (fork, exec, runtime start): that cost is in both columns' absolute times and subtracted here", fmt(direct)));
        let shell = median(2) - direct;
        self.row(
            "startup overhead of `sh -c 'CMD; :'` (the cheapest wrapper that stays alive: no wait, no signals)",
            format!("{} ms", fmt(shell)),
            "".into(),
            "reference",
            None,
        );
        self.row(
            "startup overhead, meshwrap's over `sh -c`'s (the two rows above)",
            format!("{:.2}x", overhead / shell),
            "".into(),
            "<= 0.6x",
            self.judged(overhead <= 0.6 * shell),
        );
        self.instructions_per_start();
    }

    /// callgrind's count of the instructions of one start (`--sidecar none`,
    /// so no wait and no quit): the whole run, and the part before the
    /// command is spawned (the runtime that supervises it is made after),
    /// counted on an unstripped build of the same code, in a full run only.
    fn instructions_per_start(&self) {
        let args = ["-q", "--sidecar", "none", "--", "/bin/true"];
        let Some(whole) = callgrind(meshwrap_bin(), &args, None) else {
            self.note("instructions per start: valgrind is not installed".into());
            return;
        };
        let until_spawn = if self.quick {
            "not counted in a --quick run".to_string()
        } else {
            callgrind(unstripped_bin(), &args, Some("clone")).map_or("n/a".into(), |n| n.to_string())
        };
        self.row(
            "instructions per start (callgrind, `meshwrap -q --sidecar none -- /bin/true`): until the command is spawned / the whole run",
            format!("{until_spawn} / {whole}"),
            "".into(),
            "",
            None,
        );
    }

    /// The sidecar turns ready at a random moment within each window after
    /// the wrapper starts; refused -> 200 and 503 -> 200.
    fn readiness(&self) -> Readiness {
        let mut seed = now_ns();
        let mut windows = Vec::new();
        for &(window, target, p95_target) in &WINDOWS {
            let n = self.runs_in(window);
            let refused = latencies(Wrapper::Meshwrap, true, window, n, &mut seed);
            let answering = latencies(Wrapper::Meshwrap, false, window, n, &mut seed);
            for (state, sample) in [("refused -> 200", &refused), ("503 -> 200", &answering)] {
                // The windows within 3 s have a p95 target too.
                let (met, target_text) = match p95_target {
                    Some(p95) => (
                        sample.median() <= target && sample.p95() <= p95,
                        format!("<= {target} ms median, <= {p95} ms p95"),
                    ),
                    None => (sample.median() <= target, format!("<= {target} ms median")),
                };
                self.row(
                    &format!(
                        "readiness latency, {state}, sidecar ready {} after start (median / p95)",
                        window_name(window)
                    ),
                    format!("{} / {} ms", fmt(sample.median()), fmt(sample.p95())),
                    "".into(),
                    &target_text,
                    self.judged(met),
                );
            }
            windows.push((window, refused, answering));
        }
        let baseline = if self.has_baseline {
            let b = latencies(Wrapper::Baseline, true, WINDOWS[1].0, self.baseline_runs, &mut seed);
            self.row(
                "readiness latency of the bash + curl recipe, sidecar ready 1-3 s after start (median / p95)",
                "".into(),
                format!("{} / {} ms", fmt(b.median()), fmt(b.p95())),
                "reference",
                None,
            );
            Some(b)
        } else {
            None
        };
        let frugal = self.frugal_readiness(&mut seed);
        self.note(format!("readiness: the sidecar turns ready at a random moment in each window after the wrapper starts (stratified: one in each of as many equal slices of the window as there are runs) (an Istio proxy in a cluster typically takes 1-3 s: it waits for its configuration from istiod); the 503 case answers 503 from the start. Latency is from the flip to the command's first instruction, so it includes meshwrap's spawn of the command. {} runs per window and state within 3 s, {} in the 8-12 s window, 10 at a time in the shortest window and 25 in the others (each mostly sleeps: a few per cent of a core in all)", self.runs_in(WINDOWS[0].0), self.runs));
        Readiness {
            windows,
            baseline,
            frugal,
        }
    }

    /// `--poll frugal` against linkerd-await in the typical window (1-3 s):
    /// the target is at most half of the peer's median latency.
    fn frugal_readiness(&self, seed: &mut u64) -> Vec<(String, Sample)> {
        let window = WINDOWS[1].0;
        let n = self.runs_in(window);
        let mut plotted = Vec::new();
        for (state, refused) in [("refused -> 200", true), ("503 -> 200", false)] {
            let frugal = latencies(Wrapper::Frugal, refused, window, n, seed);
            let peer = peer_bin().map(|bin| latencies(Wrapper::Peer(bin), refused, window, n, seed));
            let (peer_text, peer_median) = match &peer {
                Some(p) => (
                    format!("linkerd-await: {} / {} ms", fmt(p.median()), fmt(p.p95())),
                    p.median(),
                ),
                None => (
                    format!("linkerd-await: {} ms median (run3, 2026-11)", fmt(PEER_RUN3.0)),
                    PEER_RUN3.0,
                ),
            };
            self.row(
                &format!(
                    "--poll frugal vs linkerd-await: readiness latency, {state}, sidecar ready 1-3 s after start (median / p95)"
                ),
                format!("{} / {} ms", fmt(frugal.median()), fmt(frugal.p95())),
                peer_text,
                "median <= half of linkerd-await's",
                self.judged(frugal.median() <= peer_median / 2.0),
            );
            plotted.push((format!("meshwrap --poll frugal, 1-3 s, {state}"), frugal));
            if let Some(p) = peer {
                plotted.push((format!("linkerd-await, 1-3 s, {state}"), p));
            }
        }
        if peer_bin().is_none() {
            self.note("linkerd-await: MESHWRAP_BENCH_PEER names no binary, so it was not run; frugal is judged against its run3 figures (2026-11: 505 ms median latency in 1-3 s, 2.4 ms CPU over a 5 s wait)".into());
        } else {
            self.note("linkerd-await (the peer): built from its repository outside this one and run as `linkerd-await --port PORT [--timeout 5s] -- CMD` against the same fake sidecar, in the same run; it polls localhost:PORT/ready with a fixed 1 s backoff".into());
        }
        plotted
    }

    /// The readiness schedule's trade-off: each candidate built into the
    /// real binary, its latency in each window (503 -> 200) against the CPU
    /// it spends waiting in the first 5 s and in the minute after.
    fn schedules(&self) -> Option<Vec<Candidate>> {
        if self.quick {
            self.note("schedules: not compared in a --quick run".into());
            return None;
        }
        let mut seed = now_ns() ^ 0x5eed;
        let mut built: Vec<(&'static str, bool, Wrapper)> = SCHEDULES
            .iter()
            .map(|&(name, spec, frugal)| {
                let chosen = spec == if frugal { DEFAULT_FRUGAL } else { DEFAULT_SCHEDULE };
                (
                    name,
                    chosen,
                    Wrapper::Schedule(build_with_schedule(spec, frugal), frugal),
                )
            })
            .collect();
        if let Some(bin) = peer_bin() {
            built.push(("L: linkerd-await (a fixed 1 s backoff)", false, Wrapper::Peer(bin)));
        }
        let mut candidates = Vec::new();
        for (name, chosen, wrapper) in built {
            let (first5, minute) = self.cpu_of(wrapper);
            let medians: Vec<f64> = WINDOWS
                .iter()
                .map(|&(window, ..)| latencies(wrapper, false, window, self.runs_in(window), &mut seed).median())
                .collect();
            let frugal = matches!(wrapper, Wrapper::Schedule(_, true));
            let (kind, target) = match wrapper {
                Wrapper::Peer(_) => ("", "reference"),
                _ if frugal => (" (frugal)", "1-3 s <= half of L's; CPU <= 0.8x L's"),
                _ => ("", "10 / 22 / 50 ms; 20 ms; 0.2 %"),
            };
            self.row(
                &format!(
                    "schedule {name}{kind}{}: median latency 0.05-0.5 / 1-3 / 8-12 s; CPU over the first 5 s; CPU after",
                    if chosen { " (the default)" } else { "" }
                ),
                format!(
                    "{} / {} / {} ms; {} ms; {} % of a core",
                    fmt(medians[0]),
                    fmt(medians[1]),
                    fmt(medians[2]),
                    fmt(first5),
                    fmt(minute / 600.0)
                ),
                "".into(),
                target,
                None,
            );
            candidates.push(Candidate {
                name,
                medians,
                first5,
                per_minute: minute,
                chosen,
            });
        }
        self.note("schedules: each candidate is the real static binary built with MESHWRAP_BENCH_SCHEDULE (fast: first interval, slowdown, longest interval) or MESHWRAP_BENCH_FRUGAL (frugal, run with --poll frugal: from, step, until, later); latency is 503 -> 200, as many runs per window as above; CPU is over a 5 s wait (the median of three) and a 35 s wait for a sidecar that answers 503, each wait alone, and 'after' is the difference, per minute; L, when present, is linkerd-await measured the same way".into());
        Some(candidates)
    }

    /// CPU of `wrapper` waiting for a 503-answering sidecar, each wait alone
    /// (with company, CPU caches stay warmer and every figure reads low):
    /// the median of three 5 s waits, and per minute after them, from a 35 s
    /// wait whose last 30 s stand for the minute (by 5 s every candidate
    /// polls at its longest interval).
    fn cpu_of(&self, wrapper: Wrapper) -> (f64, f64) {
        let waited = |secs: u64| {
            let sidecar = Sidecar::new();
            sidecar.listen();
            let timeout = format!("{secs}s");
            let r = start(
                wrapper,
                &[&sidecar],
                "run",
                &["--timeout", &timeout, "--quit-policy", "never"],
            );
            ms(r.wait().1)
        };
        let five = Sample((0..3).map(|_| waited(5)).collect()).median();
        (five, (waited(35) - five) * 2.0)
    }

    /// The command's last instruction -> the sidecar receiving the POST.
    fn quit(&self) {
        let measure = |wrapper: Wrapper, n: usize| {
            Sample(
                (0..n)
                    .map(|_| {
                        let sidecar = Sidecar::new();
                        sidecar.ready.store(true, Ordering::SeqCst);
                        sidecar.listen();
                        let mut r = start(wrapper, &[&sidecar], "run", &[]);
                        let last = r.value("exit ");
                        r.wait();
                        let quit = sidecar.quit_at.lock().unwrap()[0];
                        ms(quit.saturating_sub(last))
                    })
                    .collect(),
            )
        };
        let m = measure(Wrapper::Meshwrap, self.runs);
        let b = if self.has_baseline {
            format!("{} ms", fmt(measure(Wrapper::Baseline, self.runs.min(50)).median()))
        } else {
            "n/a".into()
        };
        self.row(
            "quit latency (median)",
            format!("{} ms", fmt(m.median())),
            b,
            "<= 1 ms",
            self.judged(m.median() <= 1.0),
        );
    }

    /// `kill -TERM meshwrap` -> the command's handler.
    fn signal(&self) {
        let sidecar = Sidecar::new();
        sidecar.ready.store(true, Ordering::SeqCst);
        sidecar.listen();
        let s = Sample(
            (0..self.runs)
                .map(|_| {
                    let mut r = start(Wrapper::Meshwrap, &[&sidecar], "signal", &[]);
                    r.value("ready ");
                    let sent = now_ns();
                    // SAFETY: kill takes plain integers.
                    unsafe { libc::kill(r.child.id() as i32, libc::SIGTERM) };
                    let got = r.value("signal ");
                    r.wait();
                    ms(got - sent)
                })
                .collect(),
        );
        self.row(
            "signal latency (median)",
            format!("{} ms", fmt(s.median())),
            "n/a (bash does not forward)".into(),
            "<= 1 ms",
            self.judged(s.median() <= 1.0),
        );
    }

    /// Peak RSS (VmHWM) of the wrapper while the command runs.
    fn memory(&self) {
        let sidecar = Sidecar::new();
        sidecar.ready.store(true, Ordering::SeqCst);
        sidecar.listen();
        let hwm = |wrapper: Wrapper| {
            let mut r = start(wrapper, &[&sidecar], "sleep", &[]);
            r.value("ready ");
            let mib = peak_rss_mib(r.child.id());
            r.wait();
            mib
        };
        let m = hwm(Wrapper::Meshwrap);
        let b = if self.has_baseline {
            format!("{} MiB (bash)", fmt(hwm(Wrapper::Baseline)))
        } else {
            "n/a".into()
        };
        self.row(
            "peak RSS while the command runs",
            format!("{} MiB", fmt(m)),
            b,
            "<= 1.5 MiB",
            self.judged(m <= 1.5),
        );
    }

    /// CPU of `wrapper` over a wait of `span` for a sidecar that refuses or
    /// answers 503, and the requests it sent; the median of three waits (one
    /// in --quick, and one of the slow, steady bash recipe): single runs on
    /// this VM move by a fifth.
    fn median_wait(&self, wrapper: Wrapper, refused: bool, span: Duration) -> (f64, u64) {
        let timeout = format!("{}ms", span.as_millis().max(1));
        let wait = || {
            let sidecar = Sidecar::new();
            if !refused {
                sidecar.listen();
            }
            let r = start(
                wrapper,
                &[&sidecar],
                "run",
                &["--timeout", &timeout, "--quit-policy", "never"],
            );
            if wrapper == Wrapper::Baseline {
                thread::sleep(span);
                // SAFETY: kill takes plain integers.
                unsafe { libc::kill(r.child.id() as i32, libc::SIGKILL) };
            }
            let (_, cpu) = r.wait();
            (ms(cpu), sidecar.requests.load(Ordering::SeqCst))
        };
        let n = if self.quick || wrapper == Wrapper::Baseline {
            1
        } else {
            3
        };
        let mut runs: Vec<(f64, u64)> = (0..n).map(|_| wait()).collect();
        runs.sort_by(|a, b| a.0.total_cmp(&b.0));
        runs[runs.len() / 2]
    }

    /// --poll frugal against linkerd-await, each alone, the same way: at
    /// most 0.8 times the peer's CPU.
    fn frugal_cpu(&self, secs: u64) {
        let span = Duration::from_secs(secs);
        let (frugal_cpu, frugal_requests) = self.median_wait(Wrapper::Frugal, false, span);
        let (peer_text, peer_cpu) = match peer_bin() {
            Some(bin) => {
                let (cpu, reqs) = self.median_wait(Wrapper::Peer(bin), false, span);
                (format!("linkerd-await: {} ms, {reqs} requests", fmt(cpu)), cpu)
            }
            None => (
                format!("linkerd-await: {} ms (run3, 2026-11)", fmt(PEER_RUN3.1)),
                PEER_RUN3.1,
            ),
        };
        self.row(
            &format!("--poll frugal vs linkerd-await: CPU over a {secs} s wait, 503-answering sidecar"),
            format!(
                "{} ms, {frugal_requests} requests ({:.2}x)",
                fmt(frugal_cpu),
                frugal_cpu / peer_cpu
            ),
            peer_text,
            "<= 0.8x linkerd-await's",
            self.judged(frugal_cpu <= 0.8 * peer_cpu),
        );
    }

    fn cpu_while_waiting(&self) {
        let secs = if self.quick { 1 } else { 5 };
        let span = Duration::from_secs(secs);
        let (refused_cpu, _) = self.median_wait(Wrapper::Meshwrap, true, span);
        let (answering_cpu, requests) = self.median_wait(Wrapper::Meshwrap, false, span);
        self.frugal_cpu(secs);
        let rate = requests as f64 / secs as f64;
        let b = if self.has_baseline {
            let (cpu, reqs) = self.median_wait(Wrapper::Baseline, false, span);
            format!(
                "{} ms, {} requests/s (bash and curl)",
                fmt(cpu),
                fmt(reqs as f64 / secs as f64)
            )
        } else {
            "n/a".into()
        };
        self.row(
            &format!("CPU over a {secs} s wait: 503-answering sidecar"),
            format!("{} ms, {} requests/s", fmt(answering_cpu), fmt(rate)),
            b,
            "<= 20 ms, <= 40 requests/s",
            // The targets are for 5 s; a --quick run waits 1 s and is not judged.
            self.judged(answering_cpu <= 20.0 && rate <= 40.0),
        );
        self.row(
            &format!("CPU over a {secs} s wait: refused (proxy not up)"),
            format!("{} ms", fmt(refused_cpu)),
            "".into(),
            // A refused connect costs the kernel about what a 503 poll does
            // (its reset); the 20 ms target is the 503 wait's, as the schedule
            // rows and frugal's row measure it.
            "<= 25 ms",
            self.judged(refused_cpu <= 25.0),
        );
        self.poll_costs(span);
    }

    /// What one poll costs, against its floor measured in the same run: a
    /// poll's CPU is the wait's less a start with one poll (`--timeout
    /// 1ms`), per poll after the first; the floor is the same schedule's
    /// wake-ups in a bare loop (`floor_loop`), with and without a GET on a
    /// kept connection, per wake-up after a start with none. Each of three
    /// rounds measures all four one after the other, so that a slow phase
    /// of the VM weighs on meshwrap and the floor alike; the medians of the
    /// rounds are reported.
    fn poll_costs(&self, span: Duration) {
        let once = Duration::from_millis(1);
        let per_poll = |refused: bool| {
            let wait = |span| {
                let sidecar = Sidecar::new();
                if !refused {
                    sidecar.listen();
                }
                let timeout = format!("{}ms", Duration::as_millis(&span));
                let r = start(
                    Wrapper::Meshwrap,
                    &[&sidecar],
                    "run",
                    &["--timeout", &timeout, "--quit-policy", "never"],
                );
                (ms(r.wait().1), sidecar.requests.load(Ordering::SeqCst))
            };
            let ((cpu, requests), (cpu_once, requests_once)) = (wait(span), wait(once));
            // Both states follow one schedule: a refused wait polls as often as
            // an answered one, whose polls the sidecar counts.
            (cpu, cpu_once, requests.saturating_sub(requests_once))
        };
        let rounds = if self.quick { 1 } else { 3 };
        let mut measured: Vec<[f64; 4]> = Vec::new();
        let mut polls = 0;
        for _ in 0..rounds {
            let (answered, answered_once, n) = per_poll(false);
            let (refused, refused_once, _) = per_poll(true);
            polls = n.max(1);
            measured.push([
                (answered - answered_once) * 1000.0 / polls as f64,
                (refused - refused_once) * 1000.0 / polls as f64,
                self.poll_floor("sleeps", span),
                self.poll_floor("requests", span),
            ]);
        }
        let median = |i: usize| Sample(measured.iter().map(|m| m[i]).collect()).median();
        self.row(
            "CPU per poll: 503-answering sidecar (a request on the kept connection: two wake-ups) / refused (one wake-up); the floor, a bare loop on the same schedule: a sleep's wake-up / a sleep and a bare GET on a kept connection",
            format!("{} / {} us", fmt(median(0)), fmt(median(1))),
            format!("floor: {} / {} us", fmt(median(2)), fmt(median(3))),
            "reference",
            None,
        );
        self.note(format!(
            "CPU per poll: meshwrap's CPU over a {} s wait less that of a start with one poll (`--timeout 1ms`), over the polls between ({polls} in the last round); the floor is this benchmark's own process sleeping on the fast schedule for as long (`thread::sleep`, one wake-up each), with or without a GET on one kept connection to the same kind of fake sidecar after each wake-up, less its start, per wake-up; the median of {rounds} rounds, each measuring all four in turn. A 503 poll has two wake-ups (the sleep's and the answer's) and the kernel's loopback TCP both ways: the bare GET is its floor, the sleep alone the floor of any poll",
            span.as_secs(),
        ));
        self.instructions_per_poll();
        self.syscalls_per_poll();
    }

    /// The bare loop's CPU per wake-up, in us: `mode` for `span`, less a
    /// run of no time.
    fn poll_floor(&self, mode: &str, span: Duration) -> f64 {
        let sidecar = Sidecar::new();
        sidecar.listen();
        let (none, _) = floor_run(mode, 0.0, sidecar.port);
        let (cpu, wakeups) = floor_run(mode, span.as_secs_f64(), sidecar.port);
        (cpu - none) * 1000.0 / wakeups.max(1) as f64
    }

    /// callgrind's count of meshwrap's instructions per poll of a
    /// 503-answering sidecar: two waits (1 s and 2 s, slowed by valgrind),
    /// the difference over the difference in requests.
    fn instructions_per_poll(&self) {
        let counted = |secs: u64| {
            let sidecar = Sidecar::new();
            sidecar.listen();
            let n = callgrind(
                meshwrap_bin(),
                &[
                    "-q",
                    "--ready-url",
                    &sidecar.ready_url(),
                    "--quit-policy",
                    "never",
                    "--timeout",
                    &format!("{secs}s"),
                    "--",
                    "/bin/true",
                ],
                None,
            )?;
            Some((n, sidecar.requests.load(Ordering::SeqCst)))
        };
        match (counted(1), counted(2)) {
            (Some((i1, r1)), Some((i2, r2))) if r2 > r1 => self.row(
                "instructions per poll of a 503-answering sidecar (callgrind: a 2 s wait less a 1 s one, per request)",
                format!("{}", (i2 - i1) / (r2 - r1)),
                "".into(),
                "",
                None,
            ),
            _ => self.note("instructions per poll: valgrind is not installed".into()),
        }
    }

    /// System calls per poll (strace -f): a 2 s wait less a 1 ms one, per
    /// poll, for a 503-answering sidecar (its requests are the polls) and a
    /// refused port (the polls are the connects refused: one each, however
    /// many calls a poll makes).
    fn syscalls_per_poll(&self) {
        let traced = |refused: bool, timeout: &str| -> Option<(u64, u64)> {
            let sidecar = Sidecar::new();
            if !refused {
                sidecar.listen();
            }
            let out = std::env::temp_dir().join(format!("meshwrap-bench-strace.{}", std::process::id()));
            let status = Command::new("strace")
                .args(["-f", "-o"])
                .arg(&out)
                .args([meshwrap_bin(), "-q", "--ready-url", &sidecar.ready_url()])
                .args(["--quit-policy", "never", "--timeout", timeout, "--", "/bin/true"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .ok()?;
            let trace = std::fs::read_to_string(&out).ok();
            let _ = std::fs::remove_file(&out);
            let trace = trace.filter(|_| status.code().is_some())?;
            // One line a call; not the process's exit or a signal's delivery,
            // nor the second half of a call another thread interrupted.
            let calls = trace
                .lines()
                .filter(|l| !l.contains("+++") && !l.contains("---") && !l.contains("resumed>"))
                .count() as u64;
            let polls = if refused {
                trace.lines().filter(|l| l.contains("ECONNREFUSED")).count() as u64
            } else {
                sidecar.requests.load(Ordering::SeqCst)
            };
            Some((calls, polls))
        };
        let per_poll = |refused: bool| {
            let (c1, p1) = traced(refused, "1ms")?;
            let (c2, p2) = traced(refused, "2s")?;
            (p2 > p1).then(|| (c2 - c1) as f64 / (p2 - p1) as f64)
        };
        match (per_poll(false), per_poll(true)) {
            (Some(answered), Some(refused)) => self.row(
                "system calls per poll (strace -f: a 2 s wait less a 1 ms one, per poll): 503-answering sidecar / refused",
                format!("{answered:.1} / {refused:.1}"),
                "".into(),
                "",
                None,
            ),
            _ => self.note("system calls per poll: strace is not installed".into()),
        }
    }

    /// Readiness and quit with 1, 4 and 16 endpoints.
    fn scaling(&self) {
        for n in [1usize, 4, 16] {
            let sidecars: Vec<Sidecar> = (0..n).map(|_| Sidecar::new()).collect();
            let refs: Vec<&Sidecar> = sidecars.iter().collect();
            let (mut ready, mut quit) = (Vec::new(), Vec::new());
            for _ in 0..self.runs.min(30) {
                for s in &sidecars {
                    s.stop();
                    s.ready.store(false, Ordering::SeqCst);
                    s.quit_at.lock().unwrap().clear();
                    s.listen();
                }
                let mut r = start(Wrapper::Meshwrap, &refs, "run", &[]);
                thread::sleep(Duration::from_millis(100));
                let ready_at = now_ns();
                for s in &sidecars {
                    s.ready.store(true, Ordering::SeqCst);
                }
                let first = r.value("start ");
                let last = r.value("exit ");
                r.wait();
                ready.push(ms(first.saturating_sub(ready_at)));
                let latest = sidecars.iter().map(|s| s.quit_at.lock().unwrap()[0]).max().unwrap();
                quit.push(ms(latest.saturating_sub(last)));
            }
            self.row(
                &format!("{n} endpoint(s): readiness (503 -> 200) / quit, median"),
                format!("{} / {} ms", fmt(Sample(ready).median()), fmt(Sample(quit).median())),
                "".into(),
                "",
                None,
            );
        }
    }

    /// 10,000 SIGUSR1 to meshwrap, then SIGTERM: what arrives, the exit, CPU per signal.
    fn flood(&self) {
        let sidecar = Sidecar::new();
        sidecar.ready.store(true, Ordering::SeqCst);
        sidecar.listen();
        let count = if self.quick { 1000 } else { 10_000 };
        let mut r = start(Wrapper::Meshwrap, &[&sidecar], "count", &[]);
        r.value("ready ");
        let pid = r.child.id() as i32;
        for _ in 0..count {
            // SAFETY: kill takes plain integers.
            unsafe { libc::kill(pid, libc::SIGUSR1) };
        }
        // SAFETY: as above.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let arrived = r.value("usr1 ");
        let (code, cpu) = r.wait();
        assert_eq!(code, 143, "the final SIGTERM must get through");
        self.row(
            &format!("{count} SIGUSR1 then SIGTERM"),
            format!(
                "{arrived} forwarded (standard signals coalesce), exit {code}, {} us CPU per signal sent",
                fmt(cpu as f64 / 1000.0 / count as f64)
            ),
            "".into(),
            "SIGTERM gets through, exit 143",
            Some(code == 143),
        );
    }

    /// `meshwrap guard` beside meshwrap: the quit it sends after a group kill
    /// (meshwrap and its command SIGKILLed together), and its memory and CPU
    /// over a run next to meshwrap's own.
    fn guard(&self) {
        let sidecar = Sidecar::new();
        sidecar.ready.store(true, Ordering::SeqCst);
        sidecar.listen();
        let dir = std::env::temp_dir().join(format!("meshwrap-bench-guard-{}", std::process::id()));
        // A fresh guard directory, the guard watching it, and meshwrap's command started.
        let beside_guard = || {
            let _ = std::fs::remove_dir_all(&dir);
            let guard = start_guard(&sidecar, &dir);
            let mut r = start(
                Wrapper::Meshwrap,
                &[&sidecar],
                "sleep",
                &["--guard-dir", dir.to_str().unwrap()],
            );
            r.value("ready ");
            (guard, r)
        };
        let latency = Sample(
            (0..self.runs)
                .map(|_| {
                    let (guard, r) = beside_guard();
                    let pid = r.child.id();
                    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap();
                    let command: i32 = children.split_whitespace().next().unwrap().parse().unwrap();
                    sidecar.quit_at.lock().unwrap().clear();
                    let killed = now_ns();
                    // SAFETY: kill takes plain integers.
                    unsafe {
                        libc::kill(pid as i32, libc::SIGKILL);
                        libc::kill(command, libc::SIGKILL);
                    }
                    guard.wait();
                    r.wait();
                    let quits = sidecar.quit_at.lock().unwrap().clone();
                    assert_eq!(quits.len(), 1, "exactly one quit, from the guard");
                    ms(quits[0].saturating_sub(killed))
                })
                .collect(),
        );
        self.row(
            "guard: its quit after a group kill of meshwrap and the command (median / p95)",
            format!("{} / {} ms", fmt(latency.median()), fmt(latency.p95())),
            "n/a (nothing quits)".into(),
            "<= 100 ms",
            self.judged(latency.p95() <= 100.0),
        );
        // One run of a command that lives `secs`, with the guard beside it.
        let secs = if self.quick { 1 } else { 5 };
        let (guard, r) = beside_guard();
        thread::sleep(Duration::from_secs(secs));
        let (guard_pid, meshwrap_pid) = (guard.child.id(), r.child.id());
        let (guard_rss, meshwrap_rss) = (peak_rss_mib(guard_pid), peak_rss_mib(meshwrap_pid));
        let (guard_anon, meshwrap_anon) = (status_mib(guard_pid, "RssAnon:"), status_mib(meshwrap_pid, "RssAnon:"));
        let (_, meshwrap_cpu) = r.wait();
        let (_, guard_cpu) = guard.wait();
        let _ = std::fs::remove_dir_all(&dir);
        let beside = |what: &str, guard: String, meshwrap: String, met: bool| {
            self.row(
                &format!("guard: {what} over a {secs} s run (meshwrap's own in brackets)"),
                format!("{guard} ({meshwrap})"),
                "".into(),
                "<= meshwrap's",
                self.judged(met),
            );
        };
        let mib = |x: f64| format!("{} MiB", fmt(x));
        beside("peak RSS", mib(guard_rss), mib(meshwrap_rss), guard_rss <= meshwrap_rss);
        beside(
            "private memory (RssAnon)",
            mib(guard_anon),
            mib(meshwrap_anon),
            guard_anon <= meshwrap_anon,
        );
        beside(
            "CPU",
            format!("{} ms", fmt(ms(guard_cpu))),
            format!("{} ms", fmt(ms(meshwrap_cpu))),
            guard_cpu <= meshwrap_cpu,
        );
        self.note("guard: its peak RSS is mostly the binary's own pages (about 0.8 MiB of file-backed, clean page cache, shared by every process that maps the same image layer); the guard's code paths touch about 90 KiB more of them than meshwrap's while a command runs. Its private memory is what it costs on top".into());
    }

    fn binary_size(&self) {
        match std::fs::metadata(STATIC_BIN)
            .ok()
            .filter(|_| meshwrap_bin() == STATIC_BIN)
        {
            Some(m) => self.row(
                "static binary (x86_64 musl)",
                format!("{} bytes", m.len()),
                "".into(),
                "<= 1 MiB less 24 KiB of headroom (1,024,000 bytes)",
                Some(m.len() <= 1_048_576 - 24 * 1024),
            ),
            None => self.note("no static binary to measure: rustup target add x86_64-unknown-linux-musl".into()),
        }
    }

    fn report(&self, readiness: Option<Readiness>, schedules: Option<Vec<Candidate>>) {
        let mut md = String::from(
            "# Benchmarks\n\nProduced by `cargo bench --bench lifecycle` (see benches/lifecycle.rs); do not edit by hand.\n",
        );
        md += "Baseline: `until curl -sf READY; do sleep 1; done; CMD; curl -sf -XPOST QUIT`.\n\n";
        md += "| figure | meshwrap | baseline | target | met |\n|---|---|---|---|---|\n";
        for r in self.rows.lock().unwrap().iter() {
            let met = match r.met {
                Some(true) => "yes",
                Some(false) => "**no**",
                None => "",
            };
            md += &format!(
                "| {} | {} | {} | {} | {} |\n",
                r.figure, r.meshwrap, r.baseline, r.target, met
            );
        }
        md += "\n![Readiness latency](images/readiness-latency.svg)\n\n";
        md += "![The schedule's trade-off](images/schedule-tradeoff.svg)\n\n## Notes\n\n";
        for n in self.notes.lock().unwrap().iter() {
            md += &format!("- {n}\n");
        }
        println!("\n{md}");
        let root = env!("CARGO_MANIFEST_DIR");
        let envoy_md = self.envoy_md.lock().unwrap().clone();
        if let Some(block) = &envoy_md {
            println!("{block}");
        }
        // `--only envoy` writes the real Envoy's block alone, in place.
        if let (Some("envoy"), false, Some(block)) = (self.only.as_deref(), self.quick, &envoy_md) {
            let path = format!("{root}/BENCHMARKS.md");
            let old = std::fs::read_to_string(&path).unwrap_or_default();
            std::fs::write(&path, envoy::splice(&old, block, LIMITS_HEADING)).unwrap();
            println!("(--only envoy: its block of BENCHMARKS.md written)");
            return;
        }
        let (Some(readiness), Some(schedules)) = (readiness, schedules) else {
            println!("(--quick or --only: BENCHMARKS.md and the plots are not written)");
            return;
        };
        if self.quick || self.only.is_some() {
            return;
        }
        let explained = std::fs::read_to_string(format!("{root}/benches/LIMITS.md")).unwrap_or_default();
        // kubectl-meshwrap's benchmark owns what follows its marker: keep it.
        let inject = std::fs::read_to_string(format!("{root}/BENCHMARKS.md"))
            .ok()
            .and_then(|old| old.find(INJECT_MARKER).map(|at| old[at..].to_string()))
            .unwrap_or_default();
        let inject = if inject.is_empty() {
            String::new()
        } else {
            format!("\n{inject}")
        };
        // The real Envoy's block: this run's, or the last one's when Envoy was missing.
        let old = std::fs::read_to_string(format!("{root}/BENCHMARKS.md")).unwrap_or_default();
        let envoy_block = envoy_md.or_else(|| {
            let (from, to) = (old.find(envoy::MARKER)?, old.find(envoy::END)? + envoy::END.len());
            Some(format!("{}\n", &old[from..to]))
        });
        let envoy_block = envoy_block.map_or(String::new(), |b| b + "\n");
        std::fs::write(
            format!("{root}/BENCHMARKS.md"),
            md + "\n" + &envoy_block + &explained + &inject,
        )
        .unwrap();
        let mut all: Vec<(String, &Sample, &str, bool)> = Vec::new();
        for ((window, refused, answering), color) in readiness.windows.iter().zip(["#2e9e4f", "#1f6fd0", "#8a4fbf"]) {
            all.push((
                format!("meshwrap, {}, refused -> 200", window_name(*window)),
                refused,
                color,
                true,
            ));
            all.push((
                format!("meshwrap, {}, 503 -> 200", window_name(*window)),
                answering,
                color,
                false,
            ));
        }
        if let Some(baseline) = &readiness.baseline {
            all.push(("bash + curl recipe, 1-3 s".into(), baseline, "#d05050", false));
        }
        for (name, sample) in &readiness.frugal {
            let color = if name.starts_with("linkerd") {
                "#e08a00"
            } else {
                "#0a8f8f"
            };
            all.push((name.clone(), sample, color, name.contains("refused")));
        }
        std::fs::write(format!("{root}/images/readiness-latency.svg"), plot(&all)).unwrap();
        std::fs::write(
            format!("{root}/images/schedule-tradeoff.svg"),
            tradeoff_plot(&schedules),
        )
        .unwrap();
    }
}

/// When the sidecar turns ready after the wrapper starts (ms), and the
/// targets for the median latency there and its p95: the window an Istio
/// proxy in a cluster typically takes (1-3 s), one shorter and one longer.
const WINDOWS: [((u64, u64), f64, Option<f64>); 3] = [
    ((50, 500), 10.0, Some(25.0)),
    ((1000, 3000), 22.0, Some(55.0)),
    ((8000, 12000), 50.0, None),
];

/// Trials run at once: each mostly sleeps, and the longest window takes
/// 12 s. Fewer while the sidecar turns ready within 0.5 s, where every
/// wrapper polls every 5-20 ms and more of them would contend for the CPU.
fn trials_at_once(window: (u64, u64)) -> usize {
    if window.1 <= 500 { 10 } else { 25 }
}

/// The candidates compared: fast ones (first interval (ms), slowdown,
/// longest interval (ms)), and frugal ones (true: a poll at once, then from
/// FROM every STEP until UNTIL, then every LATER, all in ms).
/// A (5 ms + t/32, at most 100 ms) and B (the same, at most 50 ms) lost to
/// C in earlier runs, and D (5 ms + t/48) to C once a poll cost more; they
/// are no longer measured: each candidate costs the full run three minutes.
/// C was the default until a cheaper poll paid for E's extra polls.
const SCHEDULES: [(&str, &str, bool); 4] = [
    ("E: 10 ms + t/80, at most 90 ms", "10,80,90", false),
    ("C: 8 ms + t/48, at most 100 ms", "8,48,100", false),
    ("F: 0, every 400 ms from 1 to 3 s, then 1 s", "1000,400,3000,1000", true),
    ("G: 0, every 500 ms from 1 to 3 s, then 1 s", "1000,500,3000,1000", true),
];

/// The schedules src/sidecar/ready.rs uses when none is set at build time.
const DEFAULT_SCHEDULE: &str = "10,80,90";
const DEFAULT_FRUGAL: &str = "1000,400,3000,1000";

fn window_name((from, to): (u64, u64)) -> String {
    let s = |ms: u64| {
        if ms.is_multiple_of(1000) {
            format!("{}", ms / 1000)
        } else {
            format!("{}", ms as f64 / 1000.0)
        }
    };
    format!("{}-{} s", s(from), s(to))
}

struct Readiness {
    windows: Vec<((u64, u64), Sample, Sample)>,
    baseline: Option<Sample>,
    /// `--poll frugal` and linkerd-await in the 1-3 s window.
    frugal: Vec<(String, Sample)>,
}

struct Candidate {
    name: &'static str,
    /// Median latency in each window, ms.
    medians: Vec<f64>,
    /// CPU over the first 5 s of a wait, ms.
    first5: f64,
    /// CPU over the minute after, ms.
    per_minute: f64,
    chosen: bool,
}

/// `n` readiness latencies (ms) of `wrapper`, the sidecar turning ready at a
/// random moment in `window` (ms after the start), `trials_at_once` at a time.
///
/// The moments are stratified: the window is cut into `n` equal slices and
/// each trial's moment is random within its own slice (the slices in random
/// order). Where the flip falls against the poll schedule is what the
/// latency depends on, and plain random moments clump: with 100 of them a
/// window's median moved by 5 ms or more from run to run.
fn latencies(wrapper: Wrapper, refused: bool, window: (u64, u64), n: usize, seed: &mut u64) -> Sample {
    let mut random = || {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        *seed
    };
    let span_us = (window.1 - window.0) * 1000;
    let mut moments: Vec<Duration> = (0..n as u64)
        .map(|k| Duration::from_micros(window.0 * 1000 + (k * span_us + random() % span_us) / n as u64))
        .collect();
    for i in (1..moments.len()).rev() {
        moments.swap(i, (random() % (i as u64 + 1)) as usize);
    }
    let mut all = Vec::new();
    while all.len() < n {
        let take = trials_at_once(window).min(n - all.len());
        let delays: Vec<Duration> = moments.drain(..take).collect();
        thread::scope(|scope| {
            let trials: Vec<_> = delays
                .into_iter()
                .map(|delay| {
                    scope.spawn(move || {
                        let sidecar = Sidecar::new();
                        if !refused {
                            sidecar.listen();
                        }
                        let mut r = start(wrapper, &[&sidecar], "run", &[]);
                        thread::sleep(delay);
                        // Refused -> 200: ready from the moment the port accepts.
                        let mut ready_at = now_ns();
                        sidecar.ready.store(true, Ordering::SeqCst);
                        if refused {
                            ready_at = sidecar.listen();
                        }
                        let first = r.value("start ");
                        r.wait();
                        ms(first.saturating_sub(ready_at))
                    })
                })
                .collect();
            all.extend(trials.into_iter().map(|t| t.join().unwrap()));
        });
    }
    Sample(all)
}

/// The static binary built with this readiness schedule (the shipped one's
/// path scheme, under target/schedules).
fn build_with_schedule(spec: &str, frugal: bool) -> &'static str {
    let var = if frugal {
        "MESHWRAP_BENCH_FRUGAL"
    } else {
        "MESHWRAP_BENCH_SCHEDULE"
    };
    let kind = if frugal { "frugal-" } else { "" };
    build_variant(&[(var, spec)], &format!("meshwrap-{kind}{}", spec.replace(',', "-")))
}

/// meshwrap built with these variables set, under target/schedules, copied
/// to target/schedules/NAME (the static musl binary, or the host's release
/// build when the musl target is missing).
fn build_variant(vars: &[(&str, &str)], name: &str) -> &'static str {
    let root = env!("CARGO_MANIFEST_DIR");
    let dir = format!("{root}/target/schedules");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let musl = ["--target", "x86_64-unknown-linux-musl"];
    let build = |target: &[&str]| {
        let musl = !target.is_empty();
        Command::new(&cargo)
            .arg(if musl { "rustc" } else { "build" })
            .args([
                "--quiet",
                "--release",
                "-p",
                "meshwrap",
                "--bin",
                "meshwrap",
                "--target-dir",
                &dir,
            ])
            .args(target)
            .args(if musl { &SHIPPED[..] } else { &[] })
            .envs(vars.iter().copied())
            .current_dir(root)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let built = if build(&musl) {
        format!("{dir}/x86_64-unknown-linux-musl/release/meshwrap")
    } else {
        assert!(build(&[]), "cannot build meshwrap with {vars:?}");
        format!("{dir}/release/meshwrap")
    };
    let copy = format!("{dir}/{name}");
    std::fs::copy(&built, &copy).unwrap();
    Box::leak(copy.into_boxed_str())
}

/// Cumulative distributions on a log-scaled millisecond axis; a dashed line
/// for refused -> 200.
fn plot(series: &[(String, &Sample, &str, bool)]) -> String {
    let legend = 16.0 * series.len() as f64 + 10.0;
    let (w, h, left, right, top, bottom) = (760.0, 380.0 + legend, 60.0, 20.0, 40.0, 50.0 + legend);
    let (lo, hi) = (0.1f64.log10(), 2000f64.log10());
    let x = |ms: f64| left + (ms.max(0.1).log10() - lo) / (hi - lo) * (w - left - right);
    let y = |q: f64| top + (1.0 - q) * (h - top - bottom);
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\">\n<rect width=\"{w}\" height=\"{h}\" fill=\"#fff\"/>\n<text x=\"{left}\" y=\"24\" font-size=\"15\" font-weight=\"bold\">Readiness latency (CDF): sidecar ready -> command's first instruction</text>\n"
    );
    for tick in [0.1, 1.0, 10.0, 100.0, 1000.0] {
        let tx = x(tick);
        svg += &format!(
            "<line x1=\"{tx:.1}\" y1=\"{top}\" x2=\"{tx:.1}\" y2=\"{:.1}\" stroke=\"#ddd\"/><text x=\"{tx:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#555\">{tick} ms</text>\n",
            h - bottom,
            h - bottom + 16.0
        );
    }
    for q in [0.0, 0.5, 1.0] {
        svg += &format!(
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"#555\">{q}</text>\n",
            left - 6.0,
            y(q) + 4.0
        );
    }
    svg += &format!(
        "<line x1=\"{left}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#888\"/>\n",
        h - bottom,
        w - right,
        h - bottom
    );
    for (i, (name, sample, color, dashed)) in series.iter().enumerate() {
        let mut v = sample.0.clone();
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let points: Vec<String> = v
            .iter()
            .enumerate()
            .map(|(k, ms)| format!("{:.1},{:.1}", x(*ms), y((k + 1) as f64 / v.len() as f64)))
            .collect();
        let dash = if *dashed { " stroke-dasharray=\"5,3\"" } else { "" };
        svg += &format!(
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\"{dash} points=\"{}\"/>\n",
            points.join(" ")
        );
        let ly = h - legend + 4.0 + 16.0 * i as f64;
        svg += &format!(
            "<line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"{color}\" stroke-width=\"3\"{dash}/><text x=\"{:.1}\" y=\"{:.1}\">{name}: median {} ms</text>\n",
            left + 8.0,
            ly - 4.0,
            left + 24.0,
            ly - 4.0,
            left + 30.0,
            ly,
            fmt(sample.median())
        );
    }
    svg += "</svg>\n";
    svg
}

/// Latency against CPU, one point per schedule and window: on the left the
/// two shorter windows against the CPU of the first 5 s, on the right the
/// longest window against the CPU of the minute after. Dotted lines are
/// the targets; the default schedule's points are filled.
fn tradeoff_plot(candidates: &[Candidate]) -> String {
    let (w, h) = (900.0, 480.0);
    let colors = ["#2e9e4f", "#1f6fd0", "#8a4fbf"];
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\">\n<rect width=\"{w}\" height=\"{h}\" fill=\"#fff\"/>\n<text x=\"20\" y=\"24\" font-size=\"15\" font-weight=\"bold\">Readiness schedules, fast (C, D) and frugal (F, G), and linkerd-await (L): median latency (503 -> 200) against CPU</text>\n"
    );
    // One panel: x in CPU units, y in ms; points (x, y, color, label, filled).
    // Both axes are logarithmic, three decades from `x_min` and from 2 ms:
    // the frugal schedules and linkerd-await spend a tenth of the fast
    // ones' CPU and take ten times their latency.
    let mut panel = |x0: f64,
                     title: &str,
                     x_label: &str,
                     x_min: f64,
                     x_target: f64,
                     points: Vec<(f64, f64, &str, String, bool)>,
                     y_targets: &[(f64, &str)]| {
        let (pw, ph, top) = (360.0, 280.0, 60.0);
        let (x_max, y_min, y_max) = (x_min * 1000.0, 2.0, 2000.0);
        let x0 = x0 + 20.0;
        let log = |v: f64, lo: f64, hi: f64| (v.clamp(lo, hi) / lo).log10() / (hi / lo).log10();
        let x = |v: f64| x0 + 50.0 + log(v, x_min, x_max) * pw;
        let y = |v: f64| top + ph - log(v, y_min, y_max) * ph;
        svg += &format!(
            "<text x=\"{:.1}\" y=\"48\" font-weight=\"bold\">{title}</text>\n",
            x0 + 50.0
        );
        svg += &format!(
            "<rect x=\"{:.1}\" y=\"{top}\" width=\"{pw}\" height=\"{ph}\" fill=\"none\" stroke=\"#888\"/>\n",
            x0 + 50.0
        );
        for i in 0..=3 {
            let v = x_min * 10f64.powi(i);
            svg += &format!(
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#555\">{}</text>\n",
                x(v),
                top + ph + 16.0,
                fmt(v)
            );
            let t = y_min * 10f64.powi(i);
            svg += &format!(
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"#555\">{t:.0} ms</text>\n",
                x0 + 46.0,
                y(t) + 4.0
            );
        }
        svg += &format!(
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#333\">{x_label}</text>\n",
            x0 + 50.0 + pw / 2.0,
            top + ph + 34.0
        );
        svg += &format!(
            "<line x1=\"{:.1}\" y1=\"{top}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#c33\" stroke-dasharray=\"2,3\"/>\n",
            x(x_target),
            x(x_target),
            top + ph
        );
        for (t, color) in y_targets {
            svg += &format!(
                "<line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"{color}\" stroke-dasharray=\"2,3\"/>\n",
                x0 + 50.0,
                y(*t),
                x0 + 50.0 + pw,
                y(*t)
            );
        }
        for (i, (px, py, color, label, filled)) in points.into_iter().enumerate() {
            let fill = if filled { color } else { "#fff" };
            // Labels alternate above and below, so close points stay readable.
            let dy = if i % 2 == 0 { 15.0 } else { -7.0 };
            svg += &format!(
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"5\" fill=\"{fill}\" stroke=\"{color}\" stroke-width=\"2\"/><text x=\"{:.1}\" y=\"{:.1}\" fill=\"#333\">{label}</text>\n",
                x(px),
                y(py),
                x(px) + 6.0,
                y(py) + dy
            );
        }
    };
    let letter = |c: &Candidate| c.name.split(':').next().unwrap_or("?").to_string();
    let mut left_points = Vec::new();
    for c in candidates {
        for (i, color) in colors.iter().enumerate().take(2) {
            left_points.push((c.first5, c.medians[i], *color, letter(c), c.chosen));
        }
    }
    let right_points = candidates
        .iter()
        .map(|c| (c.per_minute / 600.0, c.medians[2], colors[2], letter(c), c.chosen))
        .collect();
    panel(
        0.0,
        "ready 0.05-0.5 s (green), 1-3 s (blue)",
        "CPU over the first 5 s of a wait (ms; target 20)",
        0.1,
        20.0,
        left_points,
        &[(10.0, colors[0]), (22.0, colors[1])],
    );
    panel(
        420.0,
        "ready 8-12 s (purple)",
        "CPU after the first 5 s (% of a core; target 0.2)",
        0.001,
        0.2,
        right_points,
        &[(50.0, colors[2])],
    );
    for (i, c) in candidates.iter().enumerate() {
        svg += &format!(
            "<text x=\"{:.1}\" y=\"{:.1}\" fill=\"#333\">{}{}</text>\n",
            50.0 + 370.0 * (i % 2) as f64,
            410.0 + 16.0 * (i / 2) as f64,
            c.name,
            if c.chosen { " (the default: filled points)" } else { "" }
        );
    }
    svg += "</svg>\n";
    svg
}
