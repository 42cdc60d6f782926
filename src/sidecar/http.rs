//! A minimal HTTP/1.1 client for sidecar admin endpoints: URLs, requests
//! and response heads, and the quit's requests on tokio's `TcpStream`. No
//! pool, no TLS, no general-purpose HTTP library.
//!
//! Sidecar admin endpoints are plain HTTP on loopback and answer in
//! microseconds, and meshwrap needs only a GET's or an empty POST's status.
//! A general client (hyper, with `http`'s header tables) cost a large share
//! of a binary that must stay under 1,024,000 bytes; this is the part of HTTP/1.1
//! that those answers use. A quit gets a fresh connection. The readiness
//! polls' GETs run without a runtime, on the connection the sidecar keeps
//! open (`probe`), and share the request and head parsing here.
//!
//! Every wait is bounded: the caller's timeouts bound each request, a
//! response head larger than [`MAX_HEAD`] is refused as garbage, and the body
//! is never waited for: only the status matters, so a request returns once
//! the head has arrived. (For a GET, what of the body came with it decides
//! whether the connection can be reused: all of it, by `content-length`,
//! and no `connection: close`; a body that trails its head costs that
//! connection, not the command's start.) A POST is never repeated once it
//! went out, since the sidecar may have acted on it.
//!
//! Failures are classified because callers treat them differently: a refused
//! connection while waiting means "not listening yet" (poll again soon), while
//! after the sidecar was seen ready it means "already gone"; and a quit's
//! failure says whether the request was written in full (`Unsent` until
//! then), since only one that was not may be sent again.

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::net::TcpStream;

/// What a URL value may look like, for error messages.
pub const ACCEPTS: &str = "an http:// URL such as http://127.0.0.1:15021/healthz/ready";

/// A parsed `http://` URL, resolved as far as it can be without I/O.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// The URL as the user wrote it, for logs.
    pub url: String,
    host: Host,
    port: u16,
    /// `host[:port]`, as written.
    authority: String,
    /// The request target (path and query), checked once.
    target: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Host {
    /// IP literals connect without name resolution.
    Ip(IpAddr),
    Name(String),
}

impl Endpoint {
    /// Parses an `http://` URL; the error says what is wrong with it.
    pub fn parse(url: &str) -> Result<Endpoint, String> {
        let Some(rest) = strip_scheme(url, "http://") else {
            return Err(if strip_scheme(url, "https://").is_some() {
                "https is not supported (sidecar admin endpoints are plain http)".into()
            } else {
                "it does not start with http://".into()
            });
        };
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let path = if path.starts_with('?') {
            format!("/{path}")
        } else {
            path.to_string()
        };
        if path.contains(|c: char| c.is_whitespace() || c.is_control()) || path.contains('#') {
            return Err("the path has spaces, control characters or a fragment".into());
        }
        if authority.contains('@') {
            return Err("user information in the URL is not supported".into());
        }
        let (host, port) = split_host_port(authority)?;
        if !host.starts_with('[') && host.contains(':') {
            return Err(format!(
                "'{authority}': an IPv6 address must be in brackets, as in http://[::1]:15021/"
            ));
        }
        let host = if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            Host::Ip(IpAddr::V6(
                v6.parse().map_err(|_| format!("'{host}' is not an IPv6 address"))?,
            ))
        } else if let Ok(ip) = host.parse::<IpAddr>() {
            Host::Ip(ip)
        } else if !host.is_empty() && host.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.') {
            Host::Name(host.to_ascii_lowercase())
        } else {
            return Err(format!("'{host}' is not a host name or IP address"));
        };
        if !path.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("the path is not a valid request target (ASCII without spaces)".into());
        }
        Ok(Endpoint {
            url: url.to_string(),
            host,
            port,
            authority: authority.to_string(),
            target: path,
        })
    }

    /// The host as written in a URL (an IPv6 address in brackets).
    pub fn host_text(&self) -> String {
        match &self.host {
            Host::Ip(IpAddr::V6(ip)) => format!("[{ip}]"),
            Host::Ip(ip) => ip.to_string(),
            Host::Name(name) => name.clone(),
        }
    }

    /// The same host and target on another port.
    pub fn with_port(&self, port: u16) -> Option<Endpoint> {
        Endpoint::parse(&format!("http://{}:{port}{}", self.host_text(), self.target)).ok()
    }

    /// The port, if the URL gave one.
    pub fn explicit_port(&self) -> Option<u16> {
        self.authority
            .rsplit_once(':')
            .filter(|(_, p)| !p.contains(']'))
            .map(|_| self.port)
    }

    /// Whether both name the same resource (same host, port and target),
    /// however each was written.
    pub fn same_resource(&self, other: &Endpoint) -> bool {
        (&self.host, self.port, &self.target) == (&other.host, other.port, &other.target)
    }

    /// Where to connect, for an IP literal (no lookup needed).
    pub(super) fn ip_port(&self) -> Option<SocketAddr> {
        match self.host {
            Host::Ip(ip) => Some(SocketAddr::new(ip, self.port)),
            Host::Name(_) => None,
        }
    }

    /// The host name to look up, and the port, for a host that is not an IP literal.
    pub(super) fn name_port(&self) -> Option<(&str, u16)> {
        match &self.host {
            Host::Name(name) => Some((name, self.port)),
            Host::Ip(_) => None,
        }
    }
}

/// `url` after `scheme`, which is matched case-insensitively (RFC 3986).
fn strip_scheme<'a>(url: &'a str, scheme: &str) -> Option<&'a str> {
    let written = url.get(..scheme.len())?;
    written.eq_ignore_ascii_case(scheme).then(|| &url[scheme.len()..])
}

fn split_host_port(authority: &str) -> Result<(&str, u16), String> {
    let (host, port) = match authority.rfind(':') {
        // A colon inside brackets belongs to an IPv6 address, not to a port.
        Some(i) if !authority[i..].contains(']') => (&authority[..i], Some(&authority[i + 1..])),
        _ => (authority, None),
    };
    if host.is_empty() {
        return Err("it has no host".into());
    }
    let port = match port {
        None => 80,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) => n,
            _ => return Err(format!("'{p}' is not a port number (1-65535)")),
        },
    };
    Ok((host, port))
}

/// Why a request got no HTTP answer.
#[derive(Debug)]
pub enum Failure {
    /// Nothing listens on the port (or the host is unreachable).
    Refused,
    /// No answer within the request timeout.
    TimedOut,
    /// The request went out (a quit), and no answer came before the caller's
    /// bound: the sidecar may have acted on it.
    Unanswered,
    /// The peer closed or reset the connection before answering.
    Closed,
    /// The peer answered something that is not HTTP/1.
    Garbage(String),
    /// Any other I/O error, name resolution included.
    Io(io::Error),
    /// A request ([`Client::request`]) that did not go out in full, and why:
    /// no connection (refused, timed out, no route or address), or its write
    /// failed or did not finish. The peer cannot have acted on it. Every
    /// other failure of a request comes after it was written in full.
    Unsent(Box<Failure>),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Refused => f.write_str("connection refused"),
            Failure::TimedOut => f.write_str("timed out"),
            Failure::Unanswered => f.write_str("sent, no answer in time"),
            Failure::Closed => f.write_str("connection closed before a response"),
            Failure::Garbage(e) => write!(f, "invalid response: {e}"),
            Failure::Io(e) => write!(f, "{e}"),
            Failure::Unsent(why) => write!(f, "not sent: {why}"),
        }
    }
}

impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Self {
        match e.kind() {
            io::ErrorKind::ConnectionRefused => Failure::Refused,
            io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::UnexpectedEof => Failure::Closed,
            _ => Failure::Io(e),
        }
    }
}

/// The request methods meshwrap sends: a readiness GET, a quit POST.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Method(&'static str);

impl Method {
    pub const GET: Method = Method("GET");
    pub const POST: Method = Method("POST");
}

/// The largest response head (status line and headers) read; a sidecar's is
/// a few hundred bytes. A larger one is garbage, not a reason to keep reading.
pub const MAX_HEAD: usize = 8 * 1024;

/// The largest body taken to keep a connection: a larger one closes it.
pub(super) const MAX_BODY: usize = 4 * 1024;

/// One endpoint's client for quits: the addresses its host name resolved
/// to. Each quit has its own. (The readiness wait's GETs are `probe`'s.)
pub struct Client<'e> {
    endpoint: &'e Endpoint,
    addrs: Addresses,
}

impl<'e> Client<'e> {
    pub fn new(endpoint: &'e Endpoint) -> Client<'e> {
        Client {
            endpoint,
            addrs: Addresses::default(),
        }
    }

    /// Sends one request with an empty body on a new connection; returns
    /// the response status code.
    ///
    /// A request that went out may have been acted on, so the failures say
    /// which side of that line they fall: [`Failure::Unsent`] until the
    /// request is written in full (the connect is bounded by
    /// `connect_timeout`), anything else after (`Closed`, `Garbage`, `Io`,
    /// or `Unanswered` when no answer came within `answer_within`). The
    /// request itself, a hundred bytes on a new connection, goes into the
    /// socket buffer at the first poll of the answer's wait (tokio's timeout
    /// polls its future before its clock), so even a zero `answer_within`
    /// sends it.
    pub async fn request(
        &mut self,
        method: Method,
        connect_timeout: Duration,
        answer_within: Duration,
    ) -> Result<u16, Failure> {
        let Client { endpoint, addrs } = self;
        let unsent = |why| Failure::Unsent(Box::new(why));
        let stream = within(connect_timeout, addrs.connect(endpoint)).await.map_err(unsent)?;
        let request = endpoint.request(method);
        let written = std::cell::Cell::new(false);
        let answer = tokio::time::timeout(answer_within, async {
            write_all(&stream, &request).await.map_err(unsent)?;
            written.set(true);
            read_response(&stream).await
        })
        .await;
        match answer {
            Ok(response) => response.map(|r| r.status),
            Err(_) if written.get() => Err(Failure::Unanswered),
            Err(_) => Err(unsent(Failure::TimedOut)),
        }
    }

    /// Opens (and drops) a connection, bounded by `timeout`: whether anything listens.
    pub async fn connect_within(&mut self, timeout: Duration) -> Result<(), Failure> {
        within(timeout, self.addrs.connect(self.endpoint)).await.map(drop)
    }
}

/// Where a host name leads, looked up at most once at a time.
///
/// A lookup runs on a blocking thread (getaddrinfo has no timeout of its
/// own), so two rules keep a slow or silent resolver from costing a query
/// per attempt and a thread per query: the addresses are kept until a
/// connect to all of them fails; and a lookup still under way when its
/// request timed out is not started again but waited for by the next request.
#[derive(Default)]
struct Addresses {
    resolved: Vec<SocketAddr>,
    lookup: Option<tokio::task::JoinHandle<io::Result<Vec<SocketAddr>>>>,
}

impl Addresses {
    async fn get(&mut self, endpoint: &Endpoint) -> Result<Vec<SocketAddr>, Failure> {
        let name = match &endpoint.host {
            Host::Ip(ip) => return Ok(vec![SocketAddr::new(*ip, endpoint.port)]),
            Host::Name(name) => name,
        };
        if !self.resolved.is_empty() {
            return Ok(self.resolved.clone());
        }
        let port = endpoint.port;
        let lookup = self.lookup.get_or_insert_with(|| {
            let name = name.clone();
            tokio::task::spawn_blocking(move || {
                std::net::ToSocketAddrs::to_socket_addrs(&(name.as_str(), port)).map(Iterator::collect)
            })
        });
        // Dropped here by a timeout, the lookup stays for the next request.
        let result = lookup.await;
        self.lookup = None;
        match result {
            Ok(Ok(addrs)) if !addrs.is_empty() => {
                self.resolved = addrs;
                Ok(self.resolved.clone())
            }
            Ok(Ok(_)) => Err(Failure::Io(io::Error::other(format!("{name} has no address")))),
            Ok(Err(e)) => Err(Failure::Io(e)),
            Err(e) => Err(Failure::Io(io::Error::other(e.to_string()))),
        }
    }

    /// A connected stream to the first address that takes it.
    async fn connect(&mut self, endpoint: &Endpoint) -> Result<TcpStream, Failure> {
        let mut last = Failure::Refused;
        for addr in self.get(endpoint).await? {
            match TcpStream::connect(addr).await {
                Ok(stream) => {
                    let _ = stream.set_nodelay(true);
                    return Ok(stream);
                }
                Err(e) => last = e.into(),
            }
        }
        // None took it: the name may lead elsewhere now.
        self.resolved.clear();
        Err(last)
    }
}

/// One request on a new blocking connection, for the quit when no runtime
/// could be made (`sidecar::quit::quit_all_blocking`). The failures fall on
/// the same sides of "sent in full" as [`Client::request`]'s.
pub fn request_blocking(
    endpoint: &Endpoint,
    method: Method,
    connect_timeout: Duration,
    answer_within: Duration,
) -> Result<u16, Failure> {
    use std::io::{Read, Write};
    let unsent = |why| Failure::Unsent(Box::new(why));
    let addrs: Vec<SocketAddr> = match &endpoint.host {
        Host::Ip(ip) => vec![SocketAddr::new(*ip, endpoint.port)],
        Host::Name(name) => std::net::ToSocketAddrs::to_socket_addrs(&(name.as_str(), endpoint.port))
            .map_err(|e| unsent(Failure::Io(e)))?
            .collect(),
    };
    // A zero timeout is refused by std; a millisecond is the least bound.
    let at_least = |d: Duration| d.max(Duration::from_millis(1));
    let mut last = Failure::Refused;
    let mut stream = None;
    for addr in addrs {
        match std::net::TcpStream::connect_timeout(&addr, at_least(connect_timeout)) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = e.into(),
        }
    }
    let mut stream = stream.ok_or_else(|| unsent(last))?;
    let deadline = std::time::Instant::now() + answer_within;
    stream
        .set_write_timeout(Some(at_least(answer_within)))
        .map_err(|e| unsent(e.into()))?;
    stream
        .write_all(&endpoint.request(method))
        .map_err(|e| unsent(e.into()))?;
    let mut buf = Vec::new();
    loop {
        if let Some(status) = final_status(&mut buf)? {
            return Ok(status);
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return Err(Failure::Unanswered);
        }
        let mut chunk = [0u8; 1024];
        match stream.read(&mut chunk) {
            Ok(0) => return Err(Failure::Closed),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                return Err(Failure::Unanswered);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// `exchange`, or `TimedOut` once `timeout` has passed.
async fn within<T>(timeout: Duration, exchange: impl Future<Output = Result<T, Failure>>) -> Result<T, Failure> {
    tokio::time::timeout(timeout, exchange)
        .await
        .unwrap_or(Err(Failure::TimedOut))
}

impl Endpoint {
    /// The request's bytes: one write, so it leaves in one segment.
    pub(super) fn request(&self, method: Method) -> Vec<u8> {
        let length = if method == Method::POST {
            "content-length: 0\r\n"
        } else {
            ""
        };
        format!(
            "{} {} HTTP/1.1\r\nhost: {}\r\nuser-agent: meshwrap/{}\r\n{length}\r\n",
            method.0,
            self.target,
            self.authority,
            env!("CARGO_PKG_VERSION")
        )
        .into_bytes()
    }
}

/// What meshwrap takes from a response.
#[derive(Debug, PartialEq, Eq)]
struct Response {
    status: u16,
}

/// Reads a response's head (and what of its body came with it).
async fn read_response(stream: &TcpStream) -> Result<Response, Failure> {
    let mut buf = Vec::new();
    loop {
        if let Some(status) = final_status(&mut buf)? {
            return Ok(Response { status });
        }
        stream.readable().await?;
        if read_some(stream, &mut buf)? == Some(0) {
            return Err(Failure::Closed);
        }
    }
}

async fn write_all(stream: &TcpStream, mut bytes: &[u8]) -> Result<(), Failure> {
    while !bytes.is_empty() {
        stream.writable().await?;
        match stream.try_write(bytes) {
            Ok(0) => return Err(Failure::Closed),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Appends what the socket holds (up to 1 KiB): `Some(0)` at the end of the
/// stream, `None` when nothing has arrived (the reactor's readiness was stale).
fn read_some(stream: &TcpStream, buf: &mut Vec<u8>) -> Result<Option<usize>, Failure> {
    let mut chunk = [0u8; 1024];
    match stream.try_read(&mut chunk) {
        Ok(n) => {
            buf.extend_from_slice(&chunk[..n]);
            Ok(Some(n))
        }
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The final answer's status once its head is in `buf` (interim 1xx heads
/// dropped from it), `None` while more is needed; garbage, or a head over
/// [`MAX_HEAD`], is a failure.
fn final_status(buf: &mut Vec<u8>) -> Result<Option<u16>, Failure> {
    while let Some(head) = parse_head(buf)? {
        if !head.interim() {
            return Ok(Some(head.status));
        }
        buf.drain(..head.len);
    }
    if buf.len() >= MAX_HEAD {
        return Err(Failure::Garbage(format!("a response head over {MAX_HEAD} bytes")));
    }
    Ok(None)
}

/// A response head, as far as meshwrap reads it.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Head {
    pub(super) status: u16,
    /// Its length in bytes, blank line included.
    pub(super) len: usize,
    /// How the body's end is found (RFC 9112 6.3).
    pub(super) body: Framing,
    /// HTTP/1.1 without `connection: close`, or HTTP/1.0 with `keep-alive`.
    pub(super) keep_alive: bool,
}

impl Head {
    /// A 1xx answer other than 101, which a final answer follows.
    pub(super) fn interim(&self) -> bool {
        (100..200).contains(&self.status) && self.status != 101
    }
}

/// The head at the start of `buf`: `None` while it is incomplete, `Garbage`
/// as soon as what arrived cannot be the start of an HTTP/1 response.
pub(super) fn parse_head(buf: &[u8]) -> Result<Option<Head>, Failure> {
    const VERSION: &[u8] = b"HTTP/1.";
    let n = buf.len().min(VERSION.len());
    if buf[..n] != VERSION[..n] {
        return Err(garbage("it does not start with HTTP/1."));
    }
    let Some(len) = head_end(buf) else { return Ok(None) };
    let mut lines = buf[..len]
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let (http11, status) = status_line(lines.next().unwrap_or_default())?;
    let mut head = Head {
        status,
        len,
        body: Framing::UntilClose,
        keep_alive: http11,
    };
    let (mut length, mut coding) = (None, None);
    for line in lines.filter(|l| !l.is_empty()) {
        let (name, value) = header(line)?;
        if name.eq_ignore_ascii_case(b"content-length") {
            let parsed = std::str::from_utf8(value).ok().and_then(|v| v.parse().ok());
            length = Some(parsed.ok_or_else(|| garbage("an invalid content-length"))?);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            // The last coding of the last field decides (RFC 9112 6.3: chunked
            // last is chunked framing; anything else runs until the close).
            let last = value.rsplit(|&b| b == b',').next().map(<[u8]>::trim_ascii);
            coding = Some(last.is_some_and(|c| c.eq_ignore_ascii_case(b"chunked")));
        } else if name.eq_ignore_ascii_case(b"connection") {
            for token in value.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
                if token.eq_ignore_ascii_case(b"close") {
                    head.keep_alive = false;
                } else if token.eq_ignore_ascii_case(b"keep-alive") && !http11 {
                    head.keep_alive = true;
                }
            }
        }
    }
    head.body = match (coding, length) {
        (Some(true), None) => Framing::Chunked,
        // Both given: a smuggling shape; the body is read by the coding and
        // the connection not kept (RFC 9112 6.1).
        (Some(true), Some(_)) => {
            head.keep_alive = false;
            Framing::Chunked
        }
        (Some(false), _) => Framing::UntilClose,
        (None, Some(length)) => Framing::Length(length),
        (None, None) => Framing::UntilClose,
    };
    if head.body == Framing::UntilClose {
        head.keep_alive = false;
    }
    if matches!(status, 100..=199 | 204 | 304) {
        head.body = Framing::Length(0);
        head.keep_alive = head.keep_alive || (http11 && coding.is_none() && length.is_none());
    }
    Ok(Some(head))
}

/// How a response's body ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// `content-length` bytes.
    Length(usize),
    /// `transfer-encoding: chunked`: chunks to the last, then trailers.
    Chunked,
    /// At the close of the connection: it cannot be kept.
    UntilClose,
}

/// A body being read to its end, fed what arrives in any segmentation: the
/// readiness wait keeps a connection only once its last answer's body is
/// all in (Envoy's admin answers chunked; Python's `http.server` writes the
/// head and the body apart). At most [`MAX_BODY`] bytes of framing and data
/// are taken: a longer body costs the connection, never a wait.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Body {
    state: Chunk,
    /// Bytes fed so far.
    taken: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Chunk {
    /// This many bytes of a `content-length` body to come.
    Length(usize),
    /// A chunk-size line: the size so far (hex digits), and whether an
    /// extension (`;...`) began.
    Size(usize, u8, bool),
    /// This many bytes of chunk data to come, then its line end.
    Data(usize),
    /// The line end after chunk data: whether its CR was seen.
    DataEnd(bool),
    /// At the start of a trailer line (or the last, empty, one).
    TrailerStart,
    /// Inside a trailer line, or after the CR of the empty last line.
    Trailer,
    LastLf,
    Done,
}

impl Body {
    /// `None` for a body that ends only at the close.
    pub fn new(framing: Framing) -> Option<Body> {
        let state = match framing {
            Framing::Length(0) => Chunk::Done,
            Framing::Length(n) => Chunk::Length(n),
            Framing::Chunked => Chunk::Size(0, 0, false),
            Framing::UntilClose => return None,
        };
        Some(Body { state, taken: 0 })
    }

    pub fn done(&self) -> bool {
        self.state == Chunk::Done
    }

    /// Takes the body's bytes from the start of `bytes`: `Ok(n)`, the number
    /// taken (all of them unless the body ended within); `Err` for framing
    /// that is not HTTP, or a body over [`MAX_BODY`].
    pub fn feed(&mut self, bytes: &[u8]) -> Result<usize, Failure> {
        let mut i = 0;
        while i < bytes.len() && !self.done() {
            i += self.step(&bytes[i..])?;
        }
        self.taken += i;
        if self.taken > MAX_BODY {
            return Err(garbage("a body over 4 KiB"));
        }
        Ok(i)
    }

    /// One step of the state machine on the start of `bytes` (never empty):
    /// how many bytes it took.
    fn step(&mut self, bytes: &[u8]) -> Result<usize, Failure> {
        let b = bytes[0];
        let bad = || garbage("bad chunked framing");
        self.state = match self.state {
            Chunk::Length(n) => {
                let k = n.min(bytes.len());
                self.state = if k == n { Chunk::Done } else { Chunk::Length(n - k) };
                return Ok(k);
            }
            Chunk::Data(n) => {
                let k = n.min(bytes.len());
                self.state = if k == n {
                    Chunk::DataEnd(false)
                } else {
                    Chunk::Data(n - k)
                };
                return Ok(k);
            }
            Chunk::Size(size, digits, false) if b.is_ascii_hexdigit() => {
                let digit = (b as char).to_digit(16).unwrap_or(0) as usize;
                if digits >= 4 {
                    return Err(garbage("a chunk over 4 KiB"));
                }
                Chunk::Size(size * 16 + digit, digits + 1, false)
            }
            Chunk::Size(size, digits, _) if b == b'\n' && digits > 0 => match size {
                0 => Chunk::TrailerStart,
                size => Chunk::Data(size),
            },
            Chunk::Size(size, digits, _) if digits > 0 && (b == b';' || b == b'\r' || b == b' ' || b == b'\t') => {
                Chunk::Size(size, digits, true)
            }
            Chunk::Size(size, digits, true) if b != b'\n' => Chunk::Size(size, digits, true),
            Chunk::DataEnd(false) if b == b'\r' => Chunk::DataEnd(true),
            Chunk::DataEnd(_) if b == b'\n' => Chunk::Size(0, 0, false),
            Chunk::TrailerStart if b == b'\r' => Chunk::LastLf,
            Chunk::TrailerStart | Chunk::LastLf if b == b'\n' => Chunk::Done,
            Chunk::TrailerStart | Chunk::Trailer if b != b'\n' => Chunk::Trailer,
            Chunk::Trailer => Chunk::TrailerStart,
            _ => return Err(bad()),
        };
        Ok(1)
    }
}

/// Where the head ends: after the first empty line (CRLF or bare LF).
fn head_end(buf: &[u8]) -> Option<usize> {
    (0..buf.len()).find_map(|i| match &buf[i..] {
        [b'\n', b'\n', ..] => Some(i + 2),
        [b'\n', b'\r', b'\n', ..] => Some(i + 3),
        _ => None,
    })
}

/// `HTTP/1.x NNN reason`: whether it is HTTP/1.1 (or later 1.x), and the status.
fn status_line(line: &[u8]) -> Result<(bool, u16), Failure> {
    let (version, rest) = line.split_at_checked(8).ok_or_else(|| garbage("a short status line"))?;
    let code = rest.strip_prefix(b" ").and_then(|r| r.get(..3));
    let status = code
        .filter(|c| c.iter().all(u8::is_ascii_digit) && rest.get(4).is_none_or(|&b| b == b' '))
        .map(|c| c.iter().fold(0u16, |n, d| n * 10 + u16::from(d - b'0')))
        .filter(|s| (100..1000).contains(s))
        .ok_or_else(|| garbage("an invalid status code"))?;
    match version[7] {
        b'0' => Ok((false, status)),
        b'1'..=b'9' => Ok((true, status)),
        _ => Err(garbage("an invalid HTTP version")),
    }
}

/// `name: value`, the value without the spaces around it.
fn header(line: &[u8]) -> Result<(&[u8], &[u8]), Failure> {
    let colon = line.iter().position(|&b| b == b':');
    match colon.map(|i| line.split_at(i)) {
        Some((name, value)) if !name.is_empty() && name.iter().all(u8::is_ascii_graphic) => {
            Ok((name, value[1..].trim_ascii()))
        }
        _ => Err(garbage("an invalid header line")),
    }
}

fn garbage(what: &str) -> Failure {
    Failure::Garbage(what.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_sidecars_use() {
        let e = Endpoint::parse("http://127.0.0.1:15021/healthz/ready").unwrap();
        assert_eq!(
            (e.host.clone(), e.port, e.target.to_string().as_str()),
            (Host::Ip([127, 0, 0, 1].into()), 15021, "/healthz/ready")
        );
        let e = Endpoint::parse("http://[::1]:15020/quitquitquit").unwrap();
        assert_eq!(
            (e.host.clone(), e.port, e.authority.as_str()),
            (Host::Ip("::1".parse().unwrap()), 15020, "[::1]:15020")
        );
        let e = Endpoint::parse("http://LocalHost").unwrap();
        assert_eq!(
            (e.host, e.port, e.target.to_string().as_str()),
            (Host::Name("localhost".into()), 80, "/")
        );
        let e = Endpoint::parse("http://h:1?x=1").unwrap();
        assert_eq!(e.target, "/?x=1");
        let e = Endpoint::parse("HTTP://127.0.0.1:15020/quitquitquit").unwrap();
        assert_eq!((e.port, e.target.to_string().as_str()), (15020, "/quitquitquit"));
    }

    #[test]
    fn rejects_what_is_not_plain_http() {
        for url in [
            "https://127.0.0.1/",
            "127.0.0.1:15021",
            "http://",
            "http://:80/",
            "http://h:0/",
            "http://h:99999/",
            "http://h:x/",
            "http://[::1/",
            "http://[zz]:1/",
            "http://u@h/",
            "http://h h/",
            "http://h/a b",
            "http://h/caf\u{e9}",
            "http://2001:db8::1:8080/",
            "http://::1:15021/",
            "http://::1/",
            "http://h:+80/",
            "http://h:080x/",
            "HTTPS://h/",
            "",
        ] {
            assert!(Endpoint::parse(url).is_err(), "{url:?}");
        }
    }

    fn head(text: &str) -> Result<Option<Head>, Failure> {
        parse_head(text.as_bytes())
    }

    #[test]
    fn a_head_gives_the_status_and_whether_the_connection_is_kept() {
        let h = head("HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nLIVE\n")
            .unwrap()
            .unwrap();
        assert_eq!(
            (h.status, h.len, h.body, h.keep_alive),
            (200, 38, Framing::Length(5), true)
        );
        let h = head("HTTP/1.1 503 X\r\nContent-Length: 9\r\nConnection: close\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!((h.status, h.body, h.keep_alive), (503, Framing::Length(9), false));
        // HTTP/1.0 closes unless told otherwise; a bare LF ends lines too.
        let h = head("HTTP/1.0 200 OK\ncontent-length: 0\n\n").unwrap().unwrap();
        assert_eq!((h.len, h.keep_alive), (35, false));
        let h = head("HTTP/1.0 200\r\nconnection: Keep-Alive\r\ncontent-length: 0\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(h.keep_alive);
        // Chunked (Envoy's admin) keeps the connection; a body that ends at
        // the close, or another final coding, does not (RFC 9112 6.3).
        let h = head("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!((h.body, h.keep_alive), (Framing::Chunked, true));
        let h = head("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked, gzip\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!((h.body, h.keep_alive), (Framing::UntilClose, false));
        let h = head("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-length: 3\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!((h.body, h.keep_alive), (Framing::Chunked, false), "both: not kept");
        let h = head("HTTP/1.1 200 OK\r\n\r\n").unwrap().unwrap();
        assert_eq!((h.body, h.keep_alive), (Framing::UntilClose, false));
        let h = head("HTTP/1.1 204 No Content\r\n\r\n").unwrap().unwrap();
        assert_eq!((h.body, h.keep_alive), (Framing::Length(0), true));
        assert!(head("HTTP/1.1 100 Continue\r\n\r\n").unwrap().unwrap().interim());
    }

    /// Feeds `body` cut at every place (and byte by byte): the same end, at
    /// the same byte, whatever the segmentation.
    fn ends_after(framing: Framing, body: &[u8]) -> Result<usize, ()> {
        let whole = {
            let mut b = Body::new(framing).unwrap();
            b.feed(body)
                .map_err(drop)
                .and_then(|n| if b.done() { Ok(n) } else { Err(()) })
        };
        for cut in 0..=body.len() {
            let mut b = Body::new(framing).unwrap();
            let first = b.feed(&body[..cut]);
            let split = first.map_err(drop).and_then(|n| {
                if n < cut || b.done() {
                    return if b.done() { Ok(n) } else { Err(()) };
                }
                let m = b.feed(&body[cut..]).map_err(drop)?;
                if b.done() { Ok(n + m) } else { Err(()) }
            });
            assert_eq!(split, whole, "cut at {cut} of {:?}", String::from_utf8_lossy(body));
        }
        let mut b = Body::new(framing).unwrap();
        let mut taken = 0;
        for byte in body {
            if b.done() {
                break;
            }
            taken += b.feed(std::slice::from_ref(byte)).map_err(drop)?;
        }
        assert_eq!(if b.done() { Ok(taken) } else { Err(()) }, whole, "byte by byte");
        whole
    }

    #[test]
    fn a_chunked_body_is_read_to_its_end_in_any_segmentation() {
        // Envoy 1.40's admin /ready: "LIVE\n" in one chunk, then the last.
        let envoy = b"5\r\nLIVE\n\r\n0\r\n\r\n";
        assert_eq!(ends_after(Framing::Chunked, envoy), Ok(envoy.len()));
        let more = b"5\r\nLIVE\n\r\n0\r\n\r\nHTTP/1.1";
        assert_eq!(ends_after(Framing::Chunked, more), Ok(envoy.len()), "stops at its end");
        let ext_trailer = b"a;name=x\r\n0123456789\r\n0\r\nx-trailer: 1\r\n\r\n";
        assert_eq!(ends_after(Framing::Chunked, ext_trailer), Ok(ext_trailer.len()));
        let bare_lf = b"3\nabc\n0\n\n";
        assert_eq!(ends_after(Framing::Chunked, bare_lf), Ok(bare_lf.len()));
        for bad in [&b"x\r\n"[..], b"\r\n", b"3\r\nabcX", b"0\r\n\rX", b"10000\r\n"] {
            assert_eq!(
                ends_after(Framing::Chunked, bad),
                Err(()),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let mut big = b"fff\r\n".to_vec();
        big.extend([b'x'; 0xfff]);
        big.extend(b"\r\nfff\r\n");
        big.extend([b'x'; 0xfff]);
        assert!(Body::new(Framing::Chunked).unwrap().feed(&big).is_err(), "over 4 KiB");
    }

    #[test]
    fn a_content_length_body_is_read_to_its_end_in_any_segmentation() {
        assert_eq!(ends_after(Framing::Length(5), b"LIVE\n"), Ok(5));
        assert_eq!(ends_after(Framing::Length(3), b"abcdef"), Ok(3));
        assert!(Body::new(Framing::Length(0)).unwrap().done());
        assert!(Body::new(Framing::UntilClose).is_none());
    }

    #[test]
    fn an_incomplete_head_waits_and_garbage_is_seen_at_once() {
        for partial in [
            "",
            "HT",
            "HTTP/1.1 200 OK\r\n",
            "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r",
        ] {
            assert!(matches!(head(partial), Ok(None)), "{partial:?}");
        }
        for bad in [
            "\x00\x01garbage",
            "SSH-2.0-OpenSSH",
            "HTTP/2 200\r\n\r\n",
            "HTTP/1.1 20 OK\r\n\r\n",
            "HTTP/1.1 2000 OK\r\n\r\n",
            "HTTP/1.1 099 X\r\n\r\n",
            "HTTP/1.x 200 OK\r\n\r\n",
            "HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
            "HTTP/1.1 200 OK\r\n folded: x\r\n\r\n",
            "HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n",
        ] {
            assert!(matches!(head(bad), Err(Failure::Garbage(_))), "{bad:?}");
        }
    }

    #[test]
    fn requests_are_plain_http_1_1() {
        let e = Endpoint::parse("http://[::1]:15020/quitquitquit?x=1").unwrap();
        let post = String::from_utf8(e.request(Method::POST)).unwrap();
        assert_eq!(
            post,
            format!(
                "POST /quitquitquit?x=1 HTTP/1.1\r\nhost: [::1]:15020\r\nuser-agent: meshwrap/{}\r\ncontent-length: 0\r\n\r\n",
                env!("CARGO_PKG_VERSION")
            )
        );
        let get = String::from_utf8(e.request(Method::GET)).unwrap();
        assert!(get.starts_with("GET /quitquitquit?x=1 HTTP/1.1\r\n") && !get.contains("content-length"));
    }
}
