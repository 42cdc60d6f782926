//! A fake sidecar for tests: a tiny HTTP/1 server on 127.0.0.1 whose answers
//! can be changed while meshwrap polls it, and which records every request.
//!
//! Routes: `GET /healthz/ready` answers with the ready replies, `POST
//! /quitquitquit` with the quit replies, anything else 404. Connections are
//! kept open between requests unless told otherwise ([`Connections`]). Each route takes a
//! list of replies used in order, the last one repeating. It can also refuse
//! connections (not listening yet, or gone), which is the state of a sidecar
//! before Envoy's listener is up and after it has exited.

use std::io::Write;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// How the fake answers one request.
#[derive(Clone, Debug)]
pub enum Reply {
    Status(u16),
    /// A status with the body a real sidecar sends (`LIVE`, `not ready`, ...).
    Body(u16, &'static str),
    /// Never answers (the connection is held until the fake is dropped).
    Hang,
    /// Answers bytes that are not HTTP.
    Garbage,
    /// Closes the connection without answering.
    Close,
    /// Resets the connection (RST) without answering, once it has read the
    /// whole request.
    Reset,
    /// Closes the connection without answering and stops listening: a
    /// sidecar that exits as it takes a quit.
    ExitWithoutAnswer,
    /// Answers this status only after this many milliseconds (a slow sidecar).
    Late(u64, u16),
    /// Sends the head of an answer with this status at once and its body
    /// only after [`FakeSidecar::release_bodies`].
    HeldBody(u16),
    /// Answers with `transfer-encoding: chunked`, as Envoy's admin does:
    /// the head, then each chunk and the last chunk in writes of their own.
    Chunked(u16),
    /// Writes the head and the body apart, 2 ms between, as Python's
    /// `http.server` does (`send_header`s, then `wfile.write`).
    Split(u16),
}

/// What the fake does with a connection after answering on it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Connections {
    /// Keeps it open for the next request (Go's and Envoy's default).
    #[default]
    KeepAlive,
    /// Answers with `connection: close`, then closes it.
    CloseEach,
    /// Answers as if keeping it open, then closes it 1 ms later (an idle
    /// timeout that fires between two polls).
    DropIdle,
}

#[derive(Clone, Debug)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub at: Instant,
    /// Which accepted connection carried it, counting from 0.
    pub connection: usize,
}

#[derive(Default)]
struct State {
    ready: Vec<Reply>,
    quit: Vec<Reply>,
    ready_path: String,
    quit_path: String,
    /// Stop listening right after answering a quit with 2xx, like Istio's agent.
    exit_on_quit: bool,
    connections: Connections,
    accepted: usize,
    /// Connections served to their end.
    finished: usize,
    requests: Vec<Request>,
    /// Quits answered 2xx: taken.
    accepted_quits: usize,
    /// The connections the client closed (meshwrap), by number.
    closed_by_client: Vec<usize>,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
    closed: AtomicBool,
    bodies_released: AtomicBool,
}

#[path = "../../examples/common/http.rs"]
mod http;

pub struct FakeSidecar {
    port: u16,
    shared: Arc<Shared>,
    listener: Mutex<Option<thread::JoinHandle<()>>>,
}

impl FakeSidecar {
    /// A sidecar that is up and ready: 200 to readiness and quit.
    pub fn ready() -> FakeSidecar {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a fake sidecar");
        let fake = FakeSidecar::new(listener.local_addr().unwrap().port());
        fake.serve(listener);
        fake
    }

    /// A sidecar that is not listening yet: connections are refused until [`listen`].
    ///
    /// Its port is picked below the kernel's ephemeral range, so that no
    /// client socket (meshwrap's own connections included) can take it
    /// before `listen` binds it.
    pub fn refusing() -> FakeSidecar {
        use std::sync::atomic::AtomicU16;
        static NEXT: AtomicU16 = AtomicU16::new(0);
        let base = 20_000 + (std::process::id() % 500) as u16 * 20;
        for _ in 0..1000 {
            let port = base + NEXT.fetch_add(1, Ordering::SeqCst) % 10_000;
            // Free now; nobody else on this machine binds ports in this range.
            if TcpListener::bind(("127.0.0.1", port)).is_ok() {
                return FakeSidecar::new(port);
            }
        }
        panic!("no free port for a fake sidecar below the ephemeral range");
    }

    fn new(port: u16) -> FakeSidecar {
        let state = State {
            ready: vec![Reply::Status(200)],
            quit: vec![Reply::Status(200)],
            ready_path: "/healthz/ready".into(),
            quit_path: "/quitquitquit".into(),
            ..State::default()
        };
        FakeSidecar {
            port,
            shared: Arc::new(Shared {
                state: Mutex::new(state),
                changed: Condvar::new(),
                closed: AtomicBool::new(false),
                bodies_released: AtomicBool::new(false),
            }),
            listener: Mutex::new(None),
        }
    }

    /// Two sidecars serving at ports `distance` apart (a preset's two ports), or None.
    pub fn pair(distance: i32) -> (FakeSidecar, FakeSidecar) {
        for _ in 0..1000 {
            let first = FakeSidecar::refusing();
            let Ok(second_port) = u16::try_from(i32::from(first.port) + distance) else {
                continue;
            };
            let Ok(second) = TcpListener::bind(("127.0.0.1", second_port)) else {
                continue;
            };
            let Ok(first_listener) = TcpListener::bind(("127.0.0.1", first.port)) else {
                continue;
            };
            first.serve(first_listener);
            let other = FakeSidecar::new(second_port);
            other.serve(second);
            return (first, other);
        }
        panic!("no two free ports {distance} apart");
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Serves readiness and quit at these paths instead of Istio's.
    pub fn set_paths(&self, ready: &str, quit: &str) {
        let mut state = self.shared.state.lock().unwrap();
        (state.ready_path, state.quit_path) = (ready.into(), quit.into());
    }

    /// Starts listening on the sidecar's port.
    pub fn listen(&self) {
        self.serve(TcpListener::bind(("127.0.0.1", self.port)).expect("bind the fake sidecar's port"));
    }

    fn serve(&self, listener: TcpListener) {
        self.shared.closed.store(false, Ordering::SeqCst);
        let shared = self.shared.clone();
        let port = self.port;
        *self.listener.lock().unwrap() = Some(thread::spawn(move || serve(listener, shared, port)));
    }

    /// Waits (up to 10 s) until every connection made to it so far has been
    /// served to its end, so that all a client which has exited sent is
    /// recorded. A connect of its own is accepted after every earlier one
    /// (the accept queue is first in, first out).
    pub fn settle(&self) {
        let before = self.shared.state.lock().unwrap().accepted;
        let sentinel =
            !self.shared.closed.load(Ordering::SeqCst) && TcpStream::connect(("127.0.0.1", self.port)).is_ok();
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut state = self.shared.state.lock().unwrap();
        while (sentinel && state.accepted <= before && !self.shared.closed.load(Ordering::SeqCst))
            || state.finished < state.accepted
        {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "the fake sidecar did not settle in 10 s");
            state = self.shared.changed.wait_timeout(state, left).unwrap().0;
        }
    }

    /// Stops listening: from now on connections are refused.
    pub fn stop(&self) {
        self.shared.closed.store(true, Ordering::SeqCst);
        // Wake the accept call so the listener is dropped.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(handle) = self.listener.lock().unwrap().take() {
            handle.join().unwrap();
        }
    }

    pub fn set_ready(&self, replies: &[Reply]) {
        self.shared.state.lock().unwrap().ready = replies.to_vec();
    }

    pub fn set_quit(&self, replies: &[Reply]) {
        self.shared.state.lock().unwrap().quit = replies.to_vec();
    }

    pub fn set_connections(&self, connections: Connections) {
        self.shared.state.lock().unwrap().connections = connections;
    }

    /// How many connections carried at least one request.
    pub fn connections_used(&self) -> usize {
        let mut used: Vec<usize> = self.requests().iter().map(|r| r.connection).collect();
        used.sort_unstable();
        used.dedup();
        used.len()
    }

    /// Lets the bodies of `HeldBody` answers go out.
    pub fn release_bodies(&self) {
        self.shared.bodies_released.store(true, Ordering::SeqCst);
    }

    pub fn exit_on_quit(&self) {
        self.shared.state.lock().unwrap().exit_on_quit = true;
    }

    pub fn ready_url(&self) -> String {
        format!("http://127.0.0.1:{}/healthz/ready", self.port)
    }

    pub fn quit_url(&self) -> String {
        format!("http://127.0.0.1:{}/quitquitquit", self.port)
    }

    /// The flags that point meshwrap at this fake for both readiness and quit.
    pub fn flags(&self) -> Vec<String> {
        vec![
            "--ready-url".into(),
            self.ready_url(),
            "--quit-url".into(),
            self.quit_url(),
        ]
    }

    pub fn requests(&self) -> Vec<Request> {
        self.shared.state.lock().unwrap().requests.clone()
    }

    pub fn count(&self, method: &str, path: &str) -> usize {
        self.requests()
            .iter()
            .filter(|r| r.method == method && r.path == path)
            .count()
    }

    pub fn quits(&self) -> usize {
        let path = self.shared.state.lock().unwrap().quit_path.clone();
        self.count("POST", &path)
    }

    /// Quits the fake answered with 2xx (the ones a sidecar takes).
    pub fn accepted_quits(&self) -> usize {
        self.shared.state.lock().unwrap().accepted_quits
    }

    pub fn polls(&self) -> usize {
        let path = self.shared.state.lock().unwrap().ready_path.clone();
        self.count("GET", &path)
    }

    /// Waits up to `bound` until the client has closed connection number
    /// `connection`; whether it did.
    pub fn closed_by_client_within(&self, connection: usize, bound: Duration) -> bool {
        let deadline = Instant::now() + bound;
        let mut state = self.shared.state.lock().unwrap();
        while !state.closed_by_client.contains(&connection) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            state = self.shared.changed.wait_timeout(state, left).unwrap().0;
        }
        true
    }

    /// Waits (bounded) until `done` holds for the recorded requests.
    pub fn wait_for(&self, what: &str, done: impl Fn(&[Request]) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut state = self.shared.state.lock().unwrap();
        while !done(&state.requests) {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "fake sidecar: timed out waiting for {what}; saw {:?}",
                state.requests
            );
            state = self.shared.changed.wait_timeout(state, left).unwrap().0;
        }
    }
}

impl Drop for FakeSidecar {
    fn drop(&mut self) {
        self.stop();
    }
}

fn serve(listener: TcpListener, shared: Arc<Shared>, port: u16) {
    for stream in listener.incoming() {
        if shared.closed.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = stream else { continue };
        let shared = shared.clone();
        let id = {
            let mut state = shared.state.lock().unwrap();
            state.accepted += 1;
            state.accepted - 1
        };
        thread::spawn(move || serve_connection(stream, shared, port, id));
    }
}

fn serve_connection(mut stream: TcpStream, shared: Arc<Shared>, port: u16, id: usize) {
    while answer(&mut stream, &shared, port, id) {}
    if shared.state.lock().unwrap().connections == Connections::DropIdle {
        thread::sleep(Duration::from_millis(1));
    }
    if !resetting(&stream) {
        let _ = stream.shutdown(Shutdown::Both);
    }
    shared.state.lock().unwrap().finished += 1;
    shared.changed.notify_all();
}

/// Answers one request; true when the connection stays open for another.
fn answer(stream: &mut TcpStream, shared: &Shared, port: u16, id: usize) -> bool {
    let line = http::read_request_line(stream);
    let mut words = line.split_whitespace();
    let (method, path) = (
        words.next().unwrap_or("").to_string(),
        words.next().unwrap_or("").to_string(),
    );
    if method.is_empty() {
        // Closed without a request: meshwrap's refused-port probe, or the end of a kept connection.
        let mut state = shared.state.lock().unwrap();
        state.closed_by_client.push(id);
        shared.changed.notify_all();
        return false;
    }
    let (reply, exit_after, connections) = {
        let mut state = shared.state.lock().unwrap();
        let state = &mut *state;
        let replies = match method.as_str() {
            "GET" if path == state.ready_path => &mut state.ready,
            "POST" if path == state.quit_path => &mut state.quit,
            _ => &mut vec![Reply::Status(404)],
        };
        let reply = if replies.len() > 1 {
            replies.remove(0)
        } else {
            replies[0].clone()
        };
        let code = match reply {
            Reply::Status(code)
            | Reply::Body(code, _)
            | Reply::Late(_, code)
            | Reply::HeldBody(code)
            | Reply::Chunked(code)
            | Reply::Split(code) => code,
            _ => 0,
        };
        if method == "POST" && path == state.quit_path && (200..300).contains(&code) {
            state.accepted_quits += 1;
        }
        let exit_after = (state.exit_on_quit && path == state.quit_path && matches!(reply, Reply::Status(200..=299)))
            || matches!(reply, Reply::ExitWithoutAnswer);
        state.requests.push(Request {
            method,
            path,
            at: Instant::now(),
            connection: id,
        });
        shared.changed.notify_all();
        (reply, exit_after, state.connections)
    };
    let close = connections == Connections::CloseEach || exit_after;
    let answered = match reply {
        Reply::Body(code, body) => {
            http::respond_with(stream, &format!("{code} X"), body.as_bytes(), close);
            true
        }
        Reply::Status(code) => {
            let body = if code == 200 { "OK" } else { "not ready" };
            http::respond_with(stream, &format!("{code} X"), body.as_bytes(), close);
            true
        }
        Reply::Hang => {
            while !shared.closed.load(Ordering::SeqCst) {
                thread::sleep(Duration::from_millis(20));
            }
            false
        }
        Reply::Garbage => {
            let _ = stream.write_all(b"\x00\x01garbage, not http\r\n\r\n");
            false
        }
        Reply::Close | Reply::ExitWithoutAnswer => false,
        Reply::Reset => {
            reset(stream);
            false
        }
        Reply::Late(ms, code) => {
            thread::sleep(Duration::from_millis(ms));
            http::respond_with(stream, &format!("{code} X"), b"OK", close);
            true
        }
        Reply::Chunked(code) => {
            let connection = if close { "connection: close\r\n" } else { "" };
            let head = format!("HTTP/1.1 {code} X\r\ntransfer-encoding: chunked\r\n{connection}\r\n");
            // Each write its own segment, as from Envoy (TCP_NODELAY).
            let _ = stream.set_nodelay(true);
            for part in [head.as_str(), "5\r\nLIVE\n\r\n", "0\r\n\r\n"] {
                let _ = stream.write_all(part.as_bytes());
            }
            true
        }
        Reply::Split(code) => {
            let body = b"not ready";
            let _ = stream.set_nodelay(true);
            let _ = stream.write_all(http::head(&format!("{code} X"), body.len(), close).as_bytes());
            thread::sleep(Duration::from_millis(2));
            let _ = stream.write_all(body);
            true
        }
        Reply::HeldBody(code) => {
            let body = b"held back";
            let _ = stream.write_all(http::head(&format!("{code} X"), body.len(), close).as_bytes());
            while !shared.bodies_released.load(Ordering::SeqCst) && !shared.closed.load(Ordering::SeqCst) {
                thread::sleep(Duration::from_millis(5));
            }
            let _ = stream.write_all(body);
            true
        }
    };
    if exit_after {
        let _ = stream.shutdown(Shutdown::Both);
        shared.closed.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", port));
    }
    answered && !close && connections == Connections::KeepAlive
}

/// Whether [`reset`] was called on `stream` (a shutdown would send FIN first).
fn resetting(stream: &TcpStream) -> bool {
    use std::os::fd::AsRawFd;
    let mut linger = libc::linger {
        l_onoff: 0,
        l_linger: 0,
    };
    let mut size = size_of_val(&linger) as libc::socklen_t;
    // SAFETY: a plain getsockopt on a descriptor `stream` owns, into a live
    // struct of `size` bytes.
    let ok = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&raw mut linger).cast(),
            &mut size,
        )
    } == 0;
    ok && linger.l_onoff != 0 && linger.l_linger == 0
}

/// Makes the connection's close a reset: SO_LINGER on, with no time to
/// linger, so the kernel sends RST instead of FIN.
fn reset(stream: &TcpStream) {
    use std::os::fd::AsRawFd;
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: a plain setsockopt on a descriptor `stream` owns, with a
    // pointer to a live struct and its size.
    unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&raw const linger).cast(),
            size_of_val(&linger) as libc::socklen_t,
        );
    }
}
