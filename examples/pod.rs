//! The meshwrap demo: a pod's life on this machine, without and with meshwrap.
//!
//!     cargo run --release --example pod
//!
//! An in-process fake Istio sidecar behaves as a real one does at pod start:
//! connections are refused for about a second (Envoy's listener is not up),
//! then readiness answers 503 for a moment, then 200. The "training" command
//! downloads its dataset through the sidecar and exits. First it runs
//! directly, as a plain manifest would run it; then wrapped by the real
//! meshwrap binary (built by this demo with the same cargo). Each run prints
//! a timeline.

use std::io::{BufRead, BufReader, Read};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::sync::mpsc::{Sender, channel};
use std::thread;
use std::time::{Duration, Instant};

/// How long the sidecar refuses connections, then how long it answers 503.
const REFUSED_FOR: Duration = Duration::from_millis(1000);
const STARTING_FOR: Duration = Duration::from_millis(300);
/// How long a pod whose app has exited is watched before it counts as stuck.
const STUCK_AFTER: Duration = Duration::from_secs(2);

#[path = "common/http.rs"]
mod http;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("train") {
        std::process::exit(train(&args[2]));
    }
    let meshwrap = build_meshwrap();
    println!(
        "A pod whose Istio sidecar needs {} ms to come up, and a command that",
        (REFUSED_FOR + STARTING_FOR).as_millis()
    );
    println!("downloads its dataset through the mesh, trains, and exits.\n");

    println!("== without meshwrap: command: [\"train\"]");
    let pod = Pod::start();
    let status = pod.run(Command::new(std::env::current_exe().unwrap()).args(["train", &pod.dataset_url()]));
    pod.finish(status);

    println!("\n== with meshwrap: command: [\"meshwrap\", \"--\", \"train\"]");
    let pod = Pod::start();
    let status = pod.run(
        Command::new(&meshwrap)
            .args(["--ready-url", &pod.ready_url(), "--quit-url", &pod.quit_url(), "--"])
            .arg(std::env::current_exe().unwrap())
            .args(["train", &pod.dataset_url()]),
    );
    pod.finish(status);
}

/// The "training" command: fetch the dataset through the sidecar, then train.
fn train(url: &str) -> i32 {
    println!("started");
    match http::get(url) {
        Ok((200, body)) => println!("downloaded {} bytes through the mesh", body.len()),
        Ok((status, _)) => {
            println!("dataset download failed: HTTP {status}");
            return 1;
        }
        Err(e) => {
            println!("dataset download failed: {e}");
            return 1;
        }
    }
    thread::sleep(Duration::from_millis(200));
    println!("trained");
    0
}

/// Builds meshwrap in release mode with the cargo that runs this demo.
fn build_meshwrap() -> std::path::PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--quiet", "--release", "-p", "meshwrap", "--bin", "meshwrap"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .expect("run cargo build");
    assert!(
        status.success(),
        "cargo build --release -p meshwrap --bin meshwrap failed"
    );
    let exe = std::env::current_exe().unwrap();
    // target/release/examples/pod -> target/release/meshwrap
    exe.parent().unwrap().parent().unwrap().join("meshwrap")
}

/// One pod: a fake sidecar, a clock, and a timeline.
struct Pod {
    port: u16,
    born: Instant,
    events: Sender<(Instant, String)>,
    timeline: std::sync::mpsc::Receiver<(Instant, String)>,
    sidecar: thread::JoinHandle<()>,
}

impl Pod {
    fn start() -> Pod {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let born = Instant::now();
        let (events, timeline) = channel();
        let sidecar_events = events.clone();
        let sidecar = thread::spawn(move || sidecar(port, born, sidecar_events));
        Pod {
            port,
            born,
            events,
            timeline,
            sidecar,
        }
    }

    fn ready_url(&self) -> String {
        format!("http://127.0.0.1:{}/healthz/ready", self.port)
    }
    fn quit_url(&self) -> String {
        format!("http://127.0.0.1:{}/quitquitquit", self.port)
    }
    fn dataset_url(&self) -> String {
        format!("http://127.0.0.1:{}/dataset", self.port)
    }

    /// Runs the app container's command; its stdout lines join the timeline.
    fn run(&self, command: &mut Command) -> std::process::ExitStatus {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the command");
        let events = self.events.clone();
        let stdout = child.stdout.take().unwrap();
        let reader = thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = events.send((Instant::now(), format!("command: {line}")));
            }
        });
        let mut log = String::new();
        child.stderr.take().unwrap().read_to_string(&mut log).unwrap();
        let status = child.wait().unwrap();
        reader.join().unwrap();
        let _ = self
            .events
            .send((Instant::now(), format!("app container exited: {}", describe(status))));
        for line in log.lines() {
            println!("    | {line}");
        }
        status
    }

    /// Waits for the sidecar to exit (or calls the pod stuck), then prints the timeline.
    fn finish(self, status: std::process::ExitStatus) {
        let exited = Instant::now();
        while !self.sidecar.is_finished() && exited.elapsed() < STUCK_AFTER {
            thread::sleep(Duration::from_millis(10));
        }
        let stuck = !self.sidecar.is_finished();
        if stuck {
            let _ = self.events.send((
                Instant::now(),
                format!("sidecar still running {} s after the app exited", STUCK_AFTER.as_secs()),
            ));
            // End the demo's sidecar, as `kubectl delete pod` would.
            let _ = http::get(&self.quit_url());
        }
        self.sidecar.join().unwrap();
        drop(self.events);
        let mut events: Vec<_> = self.timeline.iter().collect();
        events.sort_by_key(|(at, _)| *at);
        for (at, what) in events {
            println!("  +{:>5} ms  {what}", at.duration_since(self.born).as_millis());
        }
        let phase = match (stuck, status.code()) {
            (true, _) => "pod stuck at 1/2 NotReady: the Job never completes".to_string(),
            (false, Some(0)) => "pod Completed (Succeeded)".to_string(),
            (false, _) => format!("pod Failed ({})", describe(status)),
        };
        println!("  => {phase}");
    }
}

fn describe(status: std::process::ExitStatus) -> String {
    match status.code() {
        Some(code) => format!("exit {code}"),
        None => format!("{status}"),
    }
}

/// The fake sidecar: refused, then 503, then ready; exits on quitquitquit.
fn sidecar(port: u16, born: Instant, events: Sender<(Instant, String)>) {
    let say = |what: &str| {
        let _ = events.send((Instant::now(), format!("sidecar: {what}")));
    };
    say("container started, Envoy not listening yet (connections refused)");
    thread::sleep(REFUSED_FOR.saturating_sub(born.elapsed()));
    let listener = TcpListener::bind(("127.0.0.1", port)).expect("bind the sidecar's port");
    say("listening, not ready yet (readiness answers 503)");
    let ready_at = born + REFUSED_FOR + STARTING_FOR;
    let exited = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (ready_events, ready_exited) = (events.clone(), exited.clone());
    thread::spawn(move || {
        thread::sleep(ready_at.saturating_duration_since(Instant::now()));
        if !ready_exited.load(std::sync::atomic::Ordering::SeqCst) {
            let _ = ready_events.send((Instant::now(), "sidecar: ready (readiness answers 200)".into()));
        }
    });
    for stream in listener.incoming() {
        let Ok(mut stream) = stream else { continue };
        let line = http::read_request_line(&mut stream);
        let ready = Instant::now() >= ready_at;
        let (status, body) = match line.split_whitespace().take(2).collect::<Vec<_>>().as_slice() {
            ["GET", "/healthz/ready"] if ready => (200, String::new()),
            ["GET", "/healthz/ready"] => (503, String::new()),
            ["GET", "/dataset"] if ready => (200, "0123456789abcdef".repeat(64)),
            ["GET", "/dataset"] => (503, "no healthy upstream".into()),
            ["POST", "/quitquitquit"] | ["GET", "/quitquitquit"] => (200, "OK".into()),
            _ => (404, String::new()),
        };
        http::respond(&mut stream, &format!("{status} X"), body.as_bytes());
        if line.contains("/quitquitquit") {
            exited.store(true, std::sync::atomic::Ordering::SeqCst);
            say(&format!(
                "received {} and exits",
                line.split_whitespace().take(2).collect::<Vec<_>>().join(" ")
            ));
            return;
        }
    }
}
