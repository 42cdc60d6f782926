//! A minimal HTTP/1 client for sidecar admin endpoints, on hyper's
//! `client::conn::http1`: one fresh connection per request, no pool, no TLS.
//!
//! Sidecar admin endpoints are plain HTTP on loopback, answer in microseconds,
//! and meshwrap sends a handful of requests per run, so a pool would only add
//! size. Every request is bounded as a whole (connect + response head) by the
//! caller's timeout; the body is never read, since only the status matters.
//!
//! Failures are classified because callers treat them differently: a refused
//! connection while waiting means "not listening yet" (poll again soon), while
//! after the sidecar was seen ready it means "already gone".

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Empty;
use hyper::{Method, Request, header};
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
    /// `host[:port]`, sent as the Host header.
    authority: String,
    path: String,
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
        let Some(rest) = url.strip_prefix("http://") else {
            return Err(if url.starts_with("https://") {
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
        Ok(Endpoint {
            url: url.to_string(),
            host,
            port,
            authority: authority.to_string(),
            path,
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

    /// The socket addresses to try, in order.
    async fn addrs(&self) -> io::Result<Vec<SocketAddr>> {
        match &self.host {
            Host::Ip(ip) => Ok(vec![SocketAddr::new(*ip, self.port)]),
            // Only named hosts pay for a resolver thread; defaults are IP literals.
            Host::Name(name) => Ok(tokio::net::lookup_host((name.as_str(), self.port)).await?.collect()),
        }
    }
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
            Ok(p) if p > 0 => p,
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
    /// now, found with one non-blocking connect outside the runtime's reactor
    /// (a refused loopback connect fails within microseconds). `false` when
    /// it is not loopback, accepted the connection, or did not answer within
    /// a millisecond: then a real request has to tell.
    ///
    /// This is what makes polling a sidecar that is not up yet cheap: a full
    /// tokio connect costs about ten syscalls and two reactor wake-ups.
    pub fn refuses(&self) -> bool {
        let Host::Ip(ip) = self.host else { return false };
        if !ip.is_loopback() {
            return false;
        }
        let addr = SocketAddr::new(ip, self.port);
        matches!(
            std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(1)),
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused
        )
    }
}

/// Sends one request with an empty body; returns the response status code.
pub async fn request(endpoint: &Endpoint, method: Method, timeout: Duration) -> Result<u16, Failure> {
    match tokio::time::timeout(timeout, exchange(endpoint, method)).await {
        Ok(result) => result,
        Err(_) => Err(Failure::TimedOut),
    }
}

async fn exchange(endpoint: &Endpoint, method: Method) -> Result<u16, Failure> {
    let stream = connect(endpoint).await?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(TokioIo::new(stream))
        .await
        .map_err(classify)?;
    let mut request = Request::builder()
        .method(method.clone())
        .uri(endpoint.path.as_str())
        .header(header::HOST, endpoint.authority.as_str())
        .header(header::USER_AGENT, concat!("meshwrap/", env!("CARGO_PKG_VERSION")));
    if method == Method::POST {
        request = request.header(header::CONTENT_LENGTH, "0");
    }
    let request = request
        .body(Empty::new())
        .map_err(|e| Failure::Io(io::Error::other(e)))?;
    // The connection future drives the socket and must be polled alongside
    // the response. A sidecar that answers and closes at once (Connection:
    // close, or exiting after quitquitquit) ends the connection in the same
    // poll that delivers the response, so a clean end is followed by taking
    // the response it delivered; an error end carries the real cause (a parse
    // error for garbage), which the response side would only see as "closed".
    let mut response = std::pin::pin!(sender.send_request(request));
    let mut connection = std::pin::pin!(connection);
    let response = tokio::select! {
        biased;
        response = &mut response => response,
        ended = &mut connection => match ended {
            Ok(()) => response.await,
            Err(e) => return Err(classify(e)),
        },
    };
    response.map(|r| r.status().as_u16()).map_err(classify)
}

/// Opens (and drops) a connection, bounded by `timeout`: whether anything listens.
pub async fn connect_within(endpoint: &Endpoint, timeout: Duration) -> Result<(), Failure> {
    match tokio::time::timeout(timeout, connect(endpoint)).await {
        Ok(result) => result.map(drop),
        Err(_) => Err(Failure::TimedOut),
    }
}

async fn connect(endpoint: &Endpoint) -> Result<TcpStream, Failure> {
    let mut last = Failure::Refused;
    for addr in endpoint.addrs().await? {
        match TcpStream::connect(addr).await {
            Ok(stream) => {
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Err(e) => last = e.into(),
        }
    }
    Err(last)
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
            (e.host.clone(), e.port, e.path.as_str()),
            (Host::Ip([127, 0, 0, 1].into()), 15021, "/healthz/ready")
        );
        let e = Endpoint::parse("http://[::1]:15020/quitquitquit").unwrap();
        assert_eq!(
            (e.host.clone(), e.port, e.authority.as_str()),
            (Host::Ip("::1".parse().unwrap()), 15020, "[::1]:15020")
        );
        let e = Endpoint::parse("http://LocalHost").unwrap();
        assert_eq!(
            (e.host, e.port, e.path.as_str()),
            (Host::Name("localhost".into()), 80, "/")
        );
        let e = Endpoint::parse("http://h:1?x=1").unwrap();
        assert_eq!(e.path, "/?x=1");
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
            "",
        ] {
            assert!(Endpoint::parse(url).is_err(), "{url:?}");
        }
    }
}
