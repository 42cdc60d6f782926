//! A fuzzed sidecar answer fed through meshwrap's HTTP clients, for both a
//! readiness GET (`probe::get_once`, no runtime) and a quit POST: a loopback
//! listener answers with the fuzz input and closes. The client must classify
//! it (a status or a failure) within its timeout, never panic or hang.
#![no_main]

use std::io::{Read, Write};
use std::sync::OnceLock;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
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
    let _ = stream.write_all(answer).await;
    let _ = stream.shutdown().await;
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
    let _ = stream.write_all(answer);
}

fuzz_target!(|answer: &[u8]| {
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
