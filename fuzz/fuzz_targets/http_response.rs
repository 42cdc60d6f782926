//! A fuzzed sidecar answer fed through meshwrap's HTTP clients, for both a
//! readiness GET (`probe::get_once`, no runtime) and a quit POST: a loopback
//! listener answers with the fuzz input, cut in two writes where its first
//! byte says, and closes. The client must classify it (a status or a
//! failure) within its timeout, never panic or hang. And the body reader
//! (`http::Body`, chunked and `content-length`) must come to the same end
//! at the same byte whether the input is fed whole or cut there.
#![no_main]

use std::io::{Read, Write};
use std::sync::OnceLock;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use meshwrap::sidecar::http::{Body, Framing};
use meshwrap::sidecar::{Endpoint, http, probe};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

struct Rig {
    runtime: tokio::runtime::Runtime,
    listener: TcpListener,
    endpoint: Endpoint,
    /// For the readiness GET, which blocks: answered from a thread.
    blocking: std::net::TcpListener,
    blocking_endpoint: Endpoint,
}

fn rig() -> &'static Rig {
    static RIG: OnceLock<Rig> = OnceLock::new();
    RIG.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let listener = runtime.block_on(TcpListener::bind("127.0.0.1:0")).unwrap();
        let port = listener.local_addr().unwrap().port();
        let endpoint = Endpoint::parse(&format!("http://127.0.0.1:{port}/ready")).unwrap();
        let blocking = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = blocking.local_addr().unwrap().port();
        let blocking_endpoint = Endpoint::parse(&format!("http://127.0.0.1:{port}/ready")).unwrap();
        Rig {
            runtime,
            listener,
            endpoint,
            blocking,
            blocking_endpoint,
        }
    })
}

/// Answers one connection with `answer` once the request head has arrived.
async fn answer_once(listener: &TcpListener, answer: &[u8]) {
    let Ok((mut stream, _)) = listener.accept().await else { return };
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let (first, second) = answer.split_at(cut(answer));
    let _ = stream.write_all(first).await;
    let _ = stream.write_all(second).await;
    let _ = stream.shutdown().await;
}

/// Where the input is cut: its first byte, within its length.
fn cut(answer: &[u8]) -> usize {
    answer.first().map_or(0, |&b| usize::from(b) % (answer.len() + 1))
}

/// The body reader on `bytes` fed whole and fed in two parts: how far it
/// got (bytes taken, done) or that it refused, the same both ways.
fn body_agrees(framing: Framing, bytes: &[u8]) {
    let outcome = |parts: &[&[u8]]| {
        let mut body = Body::new(framing).unwrap();
        let mut taken = 0;
        for part in parts {
            if body.done() {
                break;
            }
            match body.feed(part) {
                Ok(n) => taken += n,
                Err(_) => return None,
            }
        }
        Some((taken, body.done()))
    };
    let (first, second) = bytes.split_at(cut(bytes));
    assert_eq!(outcome(&[bytes]), outcome(&[first, second]), "{framing:?}");
}

/// The same, from a thread, for the blocking GET.
fn answer_once_blocking(listener: &std::net::TcpListener, answer: &[u8]) {
    let Ok((mut stream, _)) = listener.accept() else { return };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let (first, second) = answer.split_at(cut(answer));
    let _ = stream.write_all(first);
    let _ = stream.write_all(second);
}

fuzz_target!(|answer: &[u8]| {
    body_agrees(Framing::Chunked, answer);
    body_agrees(Framing::Length(answer.len() / 2 + 1), answer);
    let rig = rig();
    let timeout = Duration::from_millis(200);
    let got = std::thread::scope(|scope| {
        scope.spawn(|| answer_once_blocking(&rig.blocking, answer));
        probe::get_once(&rig.blocking_endpoint, timeout)
    });
    if let Ok(status) = got {
        assert!((100..1000).contains(&status));
    }
    rig.runtime.block_on(async {
        let mut client = http::Client::new(&rig.endpoint);
        let (_, got) = tokio::join!(
            answer_once(&rig.listener, answer),
            client.request(http::Method::POST, timeout, timeout)
        );
        if let Ok(status) = got {
            assert!((100..1000).contains(&status));
        }
    });
});
