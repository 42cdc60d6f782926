//! A minimal HTTP/1 client for sidecar admin endpoints, on hyper's
//! `client::conn::http1`: no pool, no TLS.
//!
//! Sidecar admin endpoints are plain HTTP on loopback and answer in
//! microseconds. A quit gets a fresh connection; the readiness polls of one
//! URL reuse theirs while the sidecar keeps it open, since a new connection
//! and handshake cost four times a request's CPU on a cold cache. One
//! [`Client`] per URL, holding that connection and the addresses its host
//! name resolved to, is all the pool there is. Every request is bounded by
//! the caller's timeouts; the body is never read beyond what has arrived,
//! since only the status matters.
//!
//! Failures are classified because callers treat them differently: a refused
//! connection while waiting means "not listening yet" (poll again soon), while
//! after the sidecar was seen ready it means "already gone".

use std::future::{Future, poll_fn};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Empty;
use hyper::body::Body;
use hyper::header::HeaderValue;
use hyper::{Method, Request, Uri, header};
use hyper_util::rt::TokioIo;
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
    /// The request target (path and query) and Host header, parsed once: a
    /// readiness poll repeats them hundreds of times.
    target: Uri,
    host_header: HeaderValue,
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
        let target = Uri::try_from(path.as_str()).map_err(|_| "the path is not a valid request target".to_string())?;
        let host_header =
            HeaderValue::try_from(authority).map_err(|_| "the host is not a valid Host header".to_string())?;
        Ok(Endpoint {
            url: url.to_string(),
            host,
            port,
            authority: authority.to_string(),
            target,
            host_header,
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

impl Endpoint {
    /// For a loopback IP endpoint, whether its port refuses connections right
    /// now. `false` when it is not loopback or did not refuse: then a real
    /// request has to tell.
    ///
    /// One non-blocking connect outside the reactor: on loopback the kernel
    /// handles the SYN and its RST within the connect call, so the refusal is
    /// already recorded when connect returns (EINPROGRESS) and SO_ERROR reads
    /// it. Four syscalls, where a reactor connect takes ten and two wake-ups.
    pub fn refuses(&self) -> bool {
        let Host::Ip(ip) = self.host else { return false };
        ip.is_loopback() && connect_refused(SocketAddr::new(ip, self.port))
    }
}

fn connect_refused(addr: SocketAddr) -> bool {
    // SAFETY: all-zero sockaddr structs are valid; each is filled in before use
    // and passed with its own size.
    let (mut v4, mut v6): (libc::sockaddr_in, libc::sockaddr_in6) = unsafe { std::mem::zeroed() };
    let (family, sockaddr, len) = match addr {
        SocketAddr::V4(a) => {
            v4.sin_family = libc::AF_INET as libc::sa_family_t;
            v4.sin_port = a.port().to_be();
            v4.sin_addr.s_addr = u32::from(*a.ip()).to_be();
            (
                libc::AF_INET,
                (&raw const v4).cast::<libc::sockaddr>(),
                size_of_val(&v4),
            )
        }
        SocketAddr::V6(a) => {
            v6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            v6.sin6_port = a.port().to_be();
            v6.sin6_addr.s6_addr = a.ip().octets();
            (
                libc::AF_INET6,
                (&raw const v6).cast::<libc::sockaddr>(),
                size_of_val(&v6),
            )
        }
    };
    // SAFETY: plain syscalls on a descriptor this function owns and closes;
    // `sockaddr` points to a live struct of `len` bytes, `error` to 4 bytes.
    unsafe {
        let fd = libc::socket(family, libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return false;
        }
        let refused = if libc::connect(fd, sockaddr, len as libc::socklen_t) == 0 {
            false
        } else {
            match io::Error::last_os_error().raw_os_error() {
                Some(libc::ECONNREFUSED) => true,
                Some(libc::EINPROGRESS) => {
                    let mut error: libc::c_int = 0;
                    let mut size = size_of_val(&error) as libc::socklen_t;
                    libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_ERROR, (&raw mut error).cast(), &mut size) == 0
                        && error == libc::ECONNREFUSED
                }
                _ => false,
            }
        };
        libc::close(fd);
        refused
    }
}

/// One endpoint's client: the connection the sidecar kept open, and the
/// addresses its host name resolved to. Each readiness wait and each quit
/// has its own.
pub struct Client<'e> {
    endpoint: &'e Endpoint,
    kept: Option<Connection>,
    addrs: Addresses,
}

impl<'e> Client<'e> {
    pub fn new(endpoint: &'e Endpoint) -> Client<'e> {
        Client {
            endpoint,
            kept: None,
            addrs: Addresses::default(),
        }
    }

    /// Forgets the addresses a host name resolved to, so the next connect
    /// looks it up again: for when the endpoint's state has changed.
    pub fn forget_addresses(&mut self) {
        self.addrs.resolved.clear();
    }

    /// GETs the endpoint on the kept connection if the sidecar has kept it
    /// open, else on a new one, which is kept if the sidecar keeps it open.
    ///
    /// A sidecar may close an idle connection at any time, even as the
    /// request goes out; a GET is safe to repeat, so a kept connection that
    /// turns out closed is replaced by a new one within the same `timeout`.
    pub async fn get(&mut self, timeout: Duration) -> Result<u16, Failure> {
        let Client { endpoint, kept, addrs } = self;
        within(timeout, async {
            if let Some(mut connection) = kept.take() {
                match connection.send(endpoint.request(Method::GET)).await {
                    Err(Failure::Closed) => {}
                    result => {
                        *kept = connection.reusable(&result);
                        return result;
                    }
                }
            }
            let mut connection = Connection::open(addrs.connect(endpoint).await?).await?;
            let result = connection.send(endpoint.request(Method::GET)).await;
            *kept = connection.reusable(&result);
            result
        })
        .await
    }

    /// Sends one request with an empty body on a new connection; returns
    /// the response status code.
    ///
    /// Two bounds, because a request that went out may have been acted on:
    /// the connect is bounded by `connect_timeout` (`TimedOut`: nothing was
    /// sent), the answer by `answer_within` (`Unanswered`: it was sent). The
    /// request itself, a hundred bytes on a new connection, goes into the
    /// socket buffer at the first poll of the answer's wait, so even a zero
    /// `answer_within` sends it.
    pub async fn request(
        &mut self,
        method: Method,
        connect_timeout: Duration,
        answer_within: Duration,
    ) -> Result<u16, Failure> {
        let Client { endpoint, addrs, .. } = self;
        let mut connection = within(connect_timeout, async {
            Connection::open(addrs.connect(endpoint).await?).await
        })
        .await?;
        tokio::time::timeout(answer_within, connection.send(endpoint.request(method)))
            .await
            .unwrap_or(Err(Failure::Unanswered))
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
/// per poll and a thread per query: the addresses are kept until the caller
/// forgets them (the endpoint's state changed) or a connect to all of them
/// fails; and a lookup still under way when its request timed out is not
/// started again but waited for by the next request.
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

/// `exchange`, or `TimedOut` once `timeout` has passed.
async fn within<T>(timeout: Duration, exchange: impl Future<Output = Result<T, Failure>>) -> Result<T, Failure> {
    tokio::time::timeout(timeout, exchange)
        .await
        .unwrap_or(Err(Failure::TimedOut))
}

impl Endpoint {
    fn request(&self, method: Method) -> Request<Empty<Bytes>> {
        let post = method == Method::POST;
        let mut request = Request::new(Empty::new());
        *request.method_mut() = method;
        *request.uri_mut() = self.target.clone();
        let headers = request.headers_mut();
        headers.insert(header::HOST, self.host_header.clone());
        headers.insert(
            header::USER_AGENT,
            HeaderValue::from_static(concat!("meshwrap/", env!("CARGO_PKG_VERSION"))),
        );
        if post {
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("0"));
        }
        request
    }
}

type Driver = hyper::client::conn::http1::Connection<TokioIo<TcpStream>, Empty<Bytes>>;

/// One HTTP/1 connection: hyper's request handle and the future that drives
/// the socket, which is polled only while a request is under way.
pub struct Connection {
    sender: hyper::client::conn::http1::SendRequest<Empty<Bytes>>,
    driver: Pin<Box<Driver>>,
    /// The driver has finished, or the connection broke: neither polled nor reused any more.
    ended: bool,
}

impl Connection {
    async fn open(stream: TcpStream) -> Result<Connection, Failure> {
        let (sender, driver) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(classify)?;
        Ok(Connection {
            sender,
            driver: Box::pin(driver),
            ended: false,
        })
    }

    /// Sends one request and returns the response's status. `Closed` when the
    /// connection was closed before the request could go out or be answered.
    async fn send(&mut self, request: Request<Empty<Bytes>>) -> Result<u16, Failure> {
        let Connection { sender, driver, ended } = self;
        // Driving the connection first notices a sidecar that closed it while idle.
        poll_fn(|cx| {
            if let Poll::Ready(result) = drive(driver.as_mut(), ended, cx) {
                return Poll::Ready(Err(result.err().unwrap_or(Failure::Closed)));
            }
            sender.poll_ready(cx).map_err(classify)
        })
        .await?;
        let response = with_driver(driver, ended, sender.send_request(request))
            .await?
            .map_err(classify)?;
        let status = response.status().as_u16();
        // The status is the answer; the body (a few bytes) only decides whether
        // the connection can be reused, because hyper closes one whose body
        // was dropped unread. So take what has arrived, never wait for more:
        // a body that trails its head (two writes, Nagle and a delayed ACK:
        // 40 ms) costs this connection, not the command's start.
        let mut body = response.into_body();
        let complete = poll_fn(|cx| {
            loop {
                // Moves whatever the socket holds into the body first.
                let _ = drive(driver.as_mut(), ended, cx);
                match Pin::new(&mut body).poll_frame(cx) {
                    Poll::Ready(Some(Ok(_))) => {}
                    Poll::Ready(None) => return Poll::Ready(true),
                    Poll::Ready(Some(Err(_))) | Poll::Pending => return Poll::Ready(false),
                }
            }
        })
        .await;
        if !complete {
            *ended = true;
        }
        Ok(status)
    }

    /// This connection, if it is still open after an answered request.
    fn reusable(self, result: &Result<u16, Failure>) -> Option<Connection> {
        (result.is_ok() && !self.ended).then_some(self)
    }
}

/// Polls `future` to completion, driving the connection alongside: the
/// driver is what moves bytes between the socket and `future`.
///
/// A sidecar that answers and closes at once (Connection: close, or exiting
/// after quitquitquit) ends the driver in the same poll that delivers the
/// response, so after a clean end `future` is polled on for what was
/// delivered; an error end carries the real cause (a parse error for
/// garbage), which `future` would only see as "closed".
async fn with_driver<T>(
    driver: &mut Pin<Box<Driver>>,
    ended: &mut bool,
    future: impl Future<Output = T>,
) -> Result<T, Failure> {
    let mut future = std::pin::pin!(future);
    poll_fn(|cx| {
        if let Poll::Ready(output) = future.as_mut().poll(cx) {
            return Poll::Ready(Ok(output));
        }
        match drive(driver.as_mut(), ended, cx) {
            Poll::Ready(Err(failure)) => Poll::Ready(Err(failure)),
            Poll::Ready(Ok(())) => future.as_mut().poll(cx).map(Ok),
            Poll::Pending => Poll::Pending,
        }
    })
    .await
}

/// Polls the driver unless it has already finished.
fn drive(driver: Pin<&mut Driver>, ended: &mut bool, cx: &mut Context<'_>) -> Poll<Result<(), Failure>> {
    if *ended {
        return Poll::Pending;
    }
    let result = std::task::ready!(driver.poll(cx));
    *ended = true;
    Poll::Ready(result.map_err(classify))
}

fn classify(e: hyper::Error) -> Failure {
    if e.is_incomplete_message() || e.is_closed() || e.is_canceled() {
        return Failure::Closed;
    }
    if e.is_parse() || e.is_parse_status() {
        return Failure::Garbage(e.to_string());
    }
    let mut source = std::error::Error::source(&e);
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<io::Error>() {
            return io::Error::new(io.kind(), io.to_string()).into();
        }
        source = cause.source();
    }
    Failure::Garbage(e.to_string())
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
}
