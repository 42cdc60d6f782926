//! One ready URL's GET, without a runtime: a non-blocking socket that the
//! readiness loop (`ready`) waits on with one `ppoll` for every URL.
//!
//! A poll is the wake-up that starts it and, if the sidecar listens, the one
//! its answer brings; on these machines a wake-up from idle and the
//! kernel's loopback TCP are most of a poll's CPU (caches are cold after a
//! sleep), so a poll makes as few system calls and touches as little memory
//! as it can:
//! - **On the connection the sidecar kept open** (a 503 while Envoy
//!   initialises, or any answer on a kept connection): one `send` of a
//!   request built once, and one `recv` when the answer has arrived. The
//!   kept connection is watched while idle, so a close (or stray bytes) is
//!   seen when it happens rather than checked for before each request.
//! - **On a new connection** (the first poll, or after a close): `connect`
//!   twice, then `send`. On loopback the kernel has completed the handshake,
//!   or taken the refusal, when the first `connect` returns "in progress";
//!   the second says which, without a wait (elsewhere it says "still in
//!   progress", and the socket is waited on for writing).
//! - **Refused** (nothing listens yet: the proxy container is still
//!   starting): those two `connect`s, on a socket kept from the last
//!   refusal, which the kernel resets as it reports one. Creating and
//!   closing a socket per poll cost about a third more CPU.
//!
//! No `TCP_NODELAY`: a request is one write of about a hundred bytes on a
//! connection with nothing unacknowledged (the previous answer acknowledged
//! the previous request), which Nagle never holds back.
//!
//! Every request is bounded by its deadline (the caller's
//! `--request-timeout`). The races it guards against are `http`'s: a sidecar
//! may close a kept connection even as a request goes out on it, so a GET
//! that finds it closed before any answer is repeated once on a new
//! connection within the same deadline (a GET is safe to repeat). The
//! status counts as soon as the head is in; the body is read to its end,
//! whatever its framing (`content-length` or chunked, as Envoy's admin
//! answers) and however it is cut into segments (Python's `http.server`
//! writes the head and the body apart), and the connection is reused once it
//! is all in. What of a body trails its head is not waited for: it is read
//! when the next poll is due, so it costs no wake-up (a wake-up is most of a
//! poll's CPU). A body still owed then costs the connection, never a wait;
//! so do one over 4 KiB, one that ends only at the close, and bytes nobody
//! asked for.
//!
//! A host name is looked up on a thread of its own (getaddrinfo has no
//! timeout), at most one per URL at a time and [`MAX_LOOKUPS`] in all: a
//! lookup still under way when its request timed out is waited for by the
//! next request rather than started again, and the addresses are kept until
//! the caller forgets them (the endpoint changed state) or a connect to all
//! of them fails. The thread signals its end by closing a pipe, which the
//! loop waits on like a socket. A lookup stuck in a silent resolver never
//! holds meshwrap's exit: the process ends without joining it.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::http::{self, Endpoint, Failure, Method};

/// Host-name lookup threads alive at once, over every URL.
pub const MAX_LOOKUPS: usize = 4;

/// Lookup threads alive now.
static LOOKUPS: AtomicUsize = AtomicUsize::new(0);

/// What the loop waits for on a probe's behalf: a descriptor and `poll` events.
pub type Interest = (RawFd, libc::c_short);

pub struct Probe<'e> {
    endpoint: &'e Endpoint,
    /// The GET's bytes, built once.
    request: Vec<u8>,
    /// The connection the sidecar kept open after the last answer, idle.
    kept: Option<OwnedFd>,
    /// What of the last answer's body has yet to arrive on `kept`: it is
    /// read when the next poll is due, and `kept` is reused only if it is
    /// all in by then.
    owed: Option<http::Body>,
    /// The request under way.
    flight: Option<Flight>,
    /// Its answer so far (kept between requests, so a poll allocates nothing).
    buf: Vec<u8>,
    /// What the host name resolved to (an IP literal's one address, once known).
    addrs: Vec<SocketAddr>,
    lookup: Option<Lookup>,
    /// A socket a refused connect left unconnected (and whether it is IPv6),
    /// for the next attempt: the kernel resets it as it reports the refusal,
    /// which saves creating and closing a socket for each poll of a port
    /// that refuses.
    spare: Option<(OwnedFd, bool)>,
}

struct Flight {
    /// `None` while the host name is looked up.
    socket: Option<OwnedFd>,
    deadline: Instant,
    /// On the kept connection: a close before any answer is retried on a new one.
    reused: bool,
    /// Bytes of the request sent so far.
    sent: usize,
    /// The address to try after this one fails to connect.
    next: usize,
}

struct Lookup {
    thread: JoinHandle<io::Result<Vec<SocketAddr>>>,
    /// The read end of a pipe whose write end the thread holds: readable
    /// (at its end of file) once the thread is done.
    done: OwnedFd,
}

impl<'e> Probe<'e> {
    pub fn new(endpoint: &'e Endpoint) -> Probe<'e> {
        Probe {
            endpoint,
            request: endpoint.request(Method::GET),
            kept: None,
            owed: None,
            flight: None,
            buf: Vec::new(),
            addrs: Vec::new(),
            lookup: None,
            spare: None,
        }
    }

    /// Its sockets: the kept connection, the spare, the request's.
    pub fn into_sockets(self) -> impl Iterator<Item = OwnedFd> {
        let flight = self.flight.and_then(|f| f.socket);
        self.kept.into_iter().chain(self.spare.map(|(s, _)| s)).chain(flight)
    }

    /// Forgets the addresses a host name resolved to, so the next connect
    /// looks it up again: for when the endpoint's state has changed.
    pub fn forget_addresses(&mut self) {
        if self.endpoint.ip_port().is_none() {
            self.addrs.clear();
        }
    }

    /// Starts a GET that must be answered by `deadline`; its result if it
    /// is already known (a refused loopback port, a failed lookup).
    pub fn start(&mut self, deadline: Instant) -> Option<Result<u16, Failure>> {
        // The rest of the last body has had the interval to come: read what
        // is there now. Still owed when the next poll is due: the connection goes.
        if self.owed.is_some() {
            self.idle_readable();
        }
        if self.owed.take().is_some() {
            self.kept = None;
        }
        self.buf.clear();
        let mut flight = Flight {
            socket: None,
            deadline,
            reused: false,
            sent: 0,
            next: 0,
        };
        if let Some(kept) = self.kept.take() {
            flight.socket = Some(kept);
            flight.reused = true;
            self.flight = Some(flight);
            return self.send();
        }
        self.flight = Some(flight);
        self.connect_next()
    }

    /// What to wait for: the request under way, else the kept connection
    /// (readable only when the sidecar closes it or sends something unasked),
    /// but not while the rest of its last body is owed: that is read when the
    /// next poll is due (`start`), so a body written after its head costs no
    /// wake-up of its own.
    pub fn interest(&self) -> Option<Interest> {
        match &self.flight {
            Some(Flight {
                socket: Some(socket),
                sent,
                ..
            }) => {
                let events = if *sent < self.request.len() {
                    libc::POLLOUT
                } else {
                    libc::POLLIN
                };
                Some((socket.as_raw_fd(), events))
            }
            Some(Flight { socket: None, .. }) => self.lookup.as_ref().map(|l| (l.done.as_raw_fd(), libc::POLLIN)),
            None if self.owed.is_some() => None,
            None => self.kept.as_ref().map(|k| (k.as_raw_fd(), libc::POLLIN)),
        }
    }

    /// When the request under way runs out of time.
    pub fn deadline(&self) -> Option<Instant> {
        self.flight.as_ref().map(|f| f.deadline)
    }

    /// What `interest` named is ready; the GET's result once it is known.
    pub fn ready(&mut self) -> Option<Result<u16, Failure>> {
        match &self.flight {
            None => {
                self.idle_readable();
                None
            }
            Some(Flight { socket: None, .. }) => self.looked_up(),
            Some(f) if f.sent < self.request.len() => self.send(),
            Some(_) => self.receive(),
        }
    }

    /// The kept connection is readable while idle, or the next poll is due
    /// with a body owed: the rest of the last body, read to its end; a close,
    /// or bytes nobody asked for, and the connection goes.
    fn idle_readable(&mut self) {
        let (Some(kept), Some(owed)) = (&self.kept, &mut self.owed) else {
            self.kept = None;
            self.owed = None;
            return;
        };
        self.buf.clear();
        let whole = match read_some(kept.as_raw_fd(), &mut self.buf) {
            Ok(None) => return,
            Ok(Some(n)) if n > 0 => owed.feed(&self.buf).is_ok_and(|n| n == self.buf.len()),
            _ => false,
        };
        if !whole {
            self.kept = None;
            self.owed = None;
        } else if owed.done() {
            self.owed = None;
        }
    }

    /// The request under way has run out of time: `TimedOut`. A lookup goes
    /// on, for the next request to wait for.
    pub fn time_out(&mut self) -> Result<u16, Failure> {
        self.flight = None;
        Err(Failure::TimedOut)
    }

    /// Connects to the next address (looking the host name up first if
    /// need be) and sends the request.
    fn connect_next(&mut self) -> Option<Result<u16, Failure>> {
        if self.addrs.is_empty() {
            match self.endpoint.ip_port() {
                Some(addr) => self.addrs.push(addr),
                None => return self.look_up(),
            }
        }
        let flight = self.flight.as_mut()?;
        let Some(&addr) = self.addrs.get(flight.next) else {
            return self.finish(Err(Failure::Refused));
        };
        flight.next += 1;
        let (socket, was_spare) = match self.spare.take() {
            Some((socket, v6)) if v6 == addr.is_ipv6() => (socket, true),
            _ => match new_socket(addr) {
                Ok(socket) => (socket, false),
                Err(e) => return self.failed_connect(e.into()),
            },
        };
        match connect(&socket, addr) {
            Connect::Done => {
                flight.socket = Some(socket);
                self.send()
            }
            // Not loopback, or the kernel was slow: wait until it is writable.
            Connect::Pending => {
                flight.socket = Some(socket);
                None
            }
            Connect::Failed(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {
                // The kernel has reset the socket for another connect.
                self.spare = Some((socket, addr.is_ipv6()));
                self.failed_connect(Failure::Refused)
            }
            // A kept socket the kernel would not connect again: a new one.
            Connect::Failed(_) if was_spare => {
                flight.next -= 1;
                self.connect_next()
            }
            Connect::Failed(e) => self.failed_connect(e.into()),
        }
    }

    /// This address took no connection: the next one, or the failure when
    /// none is left (and the name may lead elsewhere now: looked up again).
    fn failed_connect(&mut self, failure: Failure) -> Option<Result<u16, Failure>> {
        let flight = self.flight.as_mut()?;
        flight.socket = None;
        if flight.next < self.addrs.len() {
            return self.connect_next();
        }
        self.forget_addresses();
        self.finish(Err(failure))
    }

    /// Sends what is left of the request; on to the answer once it is out.
    fn send(&mut self) -> Option<Result<u16, Failure>> {
        let flight = self.flight.as_mut()?;
        let socket = flight.socket.as_ref()?.as_raw_fd();
        let rest = &self.request[flight.sent..];
        // SAFETY: `rest` is valid for reads of its length; the socket is ours.
        let n = unsafe { libc::send(socket, rest.as_ptr().cast(), rest.len(), libc::MSG_NOSIGNAL) };
        if n >= 0 {
            flight.sent += n as usize;
            return None;
        }
        let error = io::Error::last_os_error();
        match error.kind() {
            // Still connecting (not on loopback), or a full buffer: wait for POLLOUT.
            io::ErrorKind::WouldBlock => None,
            _ if flight.sent == 0 && !flight.reused => self.failed_connect(error.into()),
            _ => self.broken(error.into()),
        }
    }

    /// The connection failed before the answer: a kept one the sidecar
    /// closed under the request is tried once more, on a new connection.
    fn broken(&mut self, failure: Failure) -> Option<Result<u16, Failure>> {
        let reused = self.flight.as_ref().is_some_and(|f| f.reused);
        match failure {
            Failure::Closed if reused => self.retry_on_new_connection(),
            failure => self.finish(Err(failure)),
        }
    }

    /// Reads what has arrived; the status once a whole head is in.
    fn receive(&mut self) -> Option<Result<u16, Failure>> {
        let flight = self.flight.as_mut()?;
        let socket = flight.socket.as_ref()?.as_raw_fd();
        let buf = &mut self.buf;
        match read_some(socket, buf) {
            Ok(None) => return None,
            Ok(Some(0)) => return self.broken(Failure::Closed),
            Ok(Some(_)) => {}
            Err(e) => return self.broken(e.into()),
        }
        loop {
            let head = match http::parse_head(buf) {
                Ok(Some(head)) => head,
                Ok(None) if buf.len() >= http::MAX_HEAD => {
                    let what = format!("a response head over {} bytes", http::MAX_HEAD);
                    return self.finish(Err(Failure::Garbage(what)));
                }
                Ok(None) => return None,
                Err(e) => return self.finish(Err(e)),
            };
            if head.interim() {
                buf.drain(..head.len);
                continue;
            }
            // The status is known now; the body may follow in later
            // segments. The connection is kept while its body is read to its
            // end (`owed`), and reused only once it is all in.
            let body = head.body;
            if head.keep_alive
                && let Some(mut owed) = http::Body::new(body)
                && owed.feed(&buf[head.len..]).is_ok_and(|n| n == buf.len() - head.len)
            {
                self.kept = flight.socket.take();
                self.owed = (!owed.done()).then_some(owed);
            }
            return self.finish(Ok(head.status));
        }
    }

    /// The kept connection was closed under the request: once more, on a new one.
    fn retry_on_new_connection(&mut self) -> Option<Result<u16, Failure>> {
        let flight = self.flight.as_mut()?;
        self.buf.clear();
        *flight = Flight {
            socket: None,
            deadline: flight.deadline,
            reused: false,
            sent: 0,
            next: 0,
        };
        self.connect_next()
    }

    fn finish(&mut self, result: Result<u16, Failure>) -> Option<Result<u16, Failure>> {
        self.flight = None;
        Some(result)
    }

    /// Starts a lookup of the host name, unless one is under way already
    /// (for an earlier request that timed out): then it is waited for.
    fn look_up(&mut self) -> Option<Result<u16, Failure>> {
        if self.lookup.is_some() {
            return None;
        }
        let Some((name, port)) = self.endpoint.name_port() else {
            return self.finish(Err(Failure::Refused));
        };
        match Lookup::start(name.to_string(), port) {
            Ok(lookup) => {
                self.lookup = Some(lookup);
                None
            }
            Err(e) => self.finish(Err(Failure::Io(e))),
        }
    }

    /// The lookup thread is done: connect to what it found.
    fn looked_up(&mut self) -> Option<Result<u16, Failure>> {
        let lookup = self.lookup.take()?;
        let name = self.endpoint.name_port().map_or("", |(name, _)| name);
        match lookup.thread.join() {
            Ok(Ok(addrs)) if !addrs.is_empty() => {
                self.addrs = addrs;
                self.connect_next()
            }
            Ok(Ok(_)) => self.finish(Err(Failure::Io(io::Error::other(format!("{name} has no address"))))),
            Ok(Err(e)) => self.finish(Err(Failure::Io(e))),
            Err(_) => self.finish(Err(Failure::Io(io::Error::other("the host-name lookup failed")))),
        }
    }
}

impl Lookup {
    fn start(name: String, port: u16) -> io::Result<Lookup> {
        let (done, end) = pipe()?;
        if LOOKUPS.fetch_add(1, Ordering::SeqCst) >= MAX_LOOKUPS {
            LOOKUPS.fetch_sub(1, Ordering::SeqCst);
            return Err(io::Error::other(format!(
                "{MAX_LOOKUPS} host-name lookups are already under way"
            )));
        }
        let thread = std::thread::Builder::new()
            .name("lookup".into())
            .stack_size(256 * 1024)
            .spawn(move || {
                let found = std::net::ToSocketAddrs::to_socket_addrs(&(name.as_str(), port)).map(Iterator::collect);
                LOOKUPS.fetch_sub(1, Ordering::SeqCst);
                drop(end);
                found
            });
        match thread {
            Ok(thread) => Ok(Lookup { thread, done }),
            Err(e) => {
                LOOKUPS.fetch_sub(1, Ordering::SeqCst);
                Err(e)
            }
        }
    }
}

/// One GET of `endpoint` on a new connection, waited for here and bounded
/// by `timeout`: the readiness wait's request on its own (for the fuzz
/// target and tests).
pub fn get_once(endpoint: &Endpoint, timeout: Duration) -> Result<u16, Failure> {
    let deadline = Instant::now() + timeout;
    let mut probe = Probe::new(endpoint);
    if let Some(result) = probe.start(deadline) {
        return result;
    }
    loop {
        let now = Instant::now();
        let Some((fd, events)) = probe.interest().filter(|_| now < deadline) else {
            return probe.time_out();
        };
        let mut fds = [libc::pollfd { fd, events, revents: 0 }];
        sleep_on(&mut fds, deadline - now);
        if fds[0].revents != 0
            && let Some(result) = probe.ready()
        {
            return result;
        }
    }
}

/// Sleeps in `ppoll` until one of `fds` is ready or `timeout` has passed.
/// Should `ppoll` fail (it cannot, short of memory), a short plain sleep
/// keeps the caller's loop from spinning.
pub(super) fn sleep_on(fds: &mut [libc::pollfd], timeout: Duration) {
    let spec = libc::timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as _,
        tv_nsec: timeout.subsec_nanos() as _,
    };
    // SAFETY: `fds` is valid for reads and writes of its length; `spec` is a
    // valid timespec; no signal mask is passed.
    let n = unsafe { libc::ppoll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, &spec, std::ptr::null()) };
    if n < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
        std::thread::sleep(timeout.min(Duration::from_millis(100)));
    }
}

/// For a loopback IP endpoint, whether its port refuses connections right
/// now; `false` when it is not loopback or did not refuse (then only a real
/// request can tell). One non-blocking connect, no reactor: on loopback the
/// kernel has taken the refusal by the time `connect` returns (see
/// [`connect`]). The quit uses it for its last look at a sidecar that closed
/// on the quit without answering, when its budget has run out.
pub fn refuses(endpoint: &Endpoint) -> bool {
    let Some(addr) = endpoint.ip_port() else { return false };
    addr.ip().is_loopback()
        && new_socket(addr).is_ok_and(|socket| {
            matches!(connect(&socket, addr), Connect::Failed(e) if e.raw_os_error() == Some(libc::ECONNREFUSED))
        })
}

/// A new non-blocking TCP socket for `addr`'s family.
fn new_socket(addr: SocketAddr) -> io::Result<OwnedFd> {
    let family = if addr.is_ipv6() { libc::AF_INET6 } else { libc::AF_INET };
    // SAFETY: socket takes plain integers and returns a new descriptor or -1.
    let fd = unsafe { libc::socket(family, libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the descriptor is new and owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// How a non-blocking connect went.
enum Connect {
    Done,
    /// Under way: the socket turns writable when it is done either way.
    Pending,
    Failed(io::Error),
}

/// Connects `socket` to `addr`, without waiting. On loopback the kernel has
/// completed the handshake, or taken the refusal, by the time `connect`
/// returns "in progress" (the answer waits on the socket's lock until the
/// call releases it), so a second `connect` says which: 0, or the refusal.
/// Elsewhere it says "already in progress", and the socket is waited on.
fn connect(socket: &OwnedFd, addr: SocketAddr) -> Connect {
    let sockaddr = SockAddr::from(addr);
    let (ptr, len) = sockaddr.raw();
    for first in [true, false] {
        // SAFETY: `ptr` points to a live sockaddr of `len` bytes; the socket is ours.
        if unsafe { libc::connect(socket.as_raw_fd(), ptr, len) } == 0 {
            return Connect::Done;
        }
        let error = io::Error::last_os_error();
        match error.raw_os_error() {
            Some(libc::EINPROGRESS) if first => {}
            Some(libc::EINPROGRESS | libc::EALREADY) => return Connect::Pending,
            Some(libc::EISCONN) => return Connect::Done,
            _ => return Connect::Failed(error),
        }
    }
    Connect::Pending
}

/// A socket address in the kernel's form.
enum SockAddr {
    V4(libc::sockaddr_in),
    V6(libc::sockaddr_in6),
}

impl From<SocketAddr> for SockAddr {
    fn from(addr: SocketAddr) -> SockAddr {
        // SAFETY: all-zero sockaddr structs are valid; the fields that matter are set below.
        let (mut v4, mut v6): (libc::sockaddr_in, libc::sockaddr_in6) = unsafe { std::mem::zeroed() };
        match addr {
            SocketAddr::V4(a) => {
                v4.sin_family = libc::AF_INET as libc::sa_family_t;
                v4.sin_port = a.port().to_be();
                v4.sin_addr.s_addr = u32::from(*a.ip()).to_be();
                SockAddr::V4(v4)
            }
            SocketAddr::V6(a) => {
                v6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
                v6.sin6_port = a.port().to_be();
                v6.sin6_addr.s6_addr = a.ip().octets();
                v6.sin6_flowinfo = a.flowinfo();
                v6.sin6_scope_id = a.scope_id();
                SockAddr::V6(v6)
            }
        }
    }
}

impl SockAddr {
    fn raw(&self) -> (*const libc::sockaddr, libc::socklen_t) {
        match self {
            SockAddr::V4(a) => (
                (a as *const libc::sockaddr_in).cast(),
                size_of_val(a) as libc::socklen_t,
            ),
            SockAddr::V6(a) => (
                (a as *const libc::sockaddr_in6).cast(),
                size_of_val(a) as libc::socklen_t,
            ),
        }
    }
}

/// A close-on-exec pipe: (read end, write end).
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors are new and owned by nothing else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Appends what the socket holds (up to 1 KiB): `Some(0)` at the end of the
/// stream, `None` when nothing has arrived.
fn read_some(socket: RawFd, buf: &mut Vec<u8>) -> io::Result<Option<usize>> {
    buf.reserve(1024);
    let spare = buf.spare_capacity_mut();
    // SAFETY: `spare` is valid for writes of its length (at least 1 KiB); the socket is ours.
    let n = unsafe { libc::recv(socket, spare.as_mut_ptr().cast(), 1024, libc::MSG_DONTWAIT) };
    if n >= 0 {
        // SAFETY: recv initialised the first `n` bytes of the spare capacity.
        unsafe { buf.set_len(buf.len() + n as usize) };
        return Ok(Some(n as usize));
    }
    let error = io::Error::last_os_error();
    if error.kind() == io::ErrorKind::WouldBlock {
        Ok(None)
    } else {
        Err(error)
    }
}
