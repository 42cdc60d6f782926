//! The few lines of HTTP/1.1 that the demo, fakemesh, the benchmark and the
//! tests' fake sidecar need: read a request's first line, answer with a
//! status and a body, and GET a URL. Included with `#[path]`; meshwrap
//! itself speaks HTTP through hyper (src/sidecar/http.rs).

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Reads a request head, up to the blank line; returns its first line
/// (`GET /path HTTP/1.1`), or what arrived before the peer closed.
pub fn read_request_line(stream: &mut TcpStream) -> String {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&head).lines().next().unwrap_or("").to_string()
}

/// Answers `status` (`200 OK`) with `body`, and `connection: close`.
pub fn respond(stream: &mut TcpStream, status: &str, body: &[u8]) {
    respond_with(stream, status, body, true);
}

/// Answers `status` with `body`; without `close` the connection stays open for
/// the next request (HTTP/1.1's default, what Go's and Envoy's servers do).
pub fn respond_with(stream: &mut TcpStream, status: &str, body: &[u8], close: bool) {
    let mut response = head(status, body.len(), close).into_bytes();
    response.extend_from_slice(body);
    // One write, as Go's and Envoy's servers send a small answer: a body in a
    // second write would wait for the client's delayed ACK (Nagle).
    let _ = stream.write_all(&response);
}

/// A response head announcing a body of `length` bytes.
pub fn head(status: &str, length: usize, close: bool) -> String {
    let connection = if close { "connection: close\r\n" } else { "" };
    format!("HTTP/1.1 {status}\r\ncontent-length: {length}\r\n{connection}\r\n")
}

/// GETs an `http://IP:PORT/PATH` URL; returns the status code and the body.
pub fn get(url: &str) -> std::io::Result<(u16, Vec<u8>)> {
    let rest = url.strip_prefix("http://").expect("an http:// URL");
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let addr: SocketAddr = host.parse().expect("IP:PORT");
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n"
    )?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response)?;
    let text = String::from_utf8_lossy(&response);
    let status = text.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let start = response.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4);
    let body = start
        .map(|i| response[i..].to_vec())
        .ok_or_else(|| std::io::Error::other("no HTTP response"))?;
    Ok((status, body))
}
