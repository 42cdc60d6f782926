//! A fake DNS server for tests: UDP on port 53 of an address of its own in
//! 127.0.0.0/8 (root only), answering A queries for one name with
//! 127.0.0.1, AAAA queries with no address, and counting the queries for
//! that name. Or, when silent, counting and never answering: a resolver that
//! hangs. meshwrap is pointed at it by a mount namespace in which
//! /etc/resolv.conf names it ([`Dns::resolv_conf`]).

use std::net::UdpSocket;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

pub struct Dns {
    pub ip: String,
    pub name: String,
    queries: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    dir: PathBuf,
}

impl Dns {
    /// Answers queries for `name` (A: 127.0.0.1), or never answers if `silent`.
    pub fn start(name: &str, silent: bool) -> Dns {
        static NEXT: AtomicU8 = AtomicU8::new(1);
        let ip = format!(
            "127.77.{}.{}",
            std::process::id() % 250,
            NEXT.fetch_add(1, Ordering::SeqCst)
        );
        let socket = UdpSocket::bind((ip.as_str(), 53)).expect("bind a fake DNS server on port 53 (needs root)");
        socket.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        let (queries, stop) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicBool::new(false)));
        let (count, halt, wanted) = (queries.clone(), stop.clone(), name.to_string());
        thread::spawn(move || {
            let mut buf = [0u8; 512];
            while !halt.load(Ordering::SeqCst) {
                let Ok((n, from)) = socket.recv_from(&mut buf) else {
                    continue;
                };
                let Some((qname, qtype, end)) = question(&buf[..n]) else {
                    continue;
                };
                if qname != wanted {
                    continue;
                }
                count.fetch_add(1, Ordering::SeqCst);
                if !silent {
                    let _ = socket.send_to(&answer(&buf[..end], qtype), from);
                }
            }
        });
        let dir = crate::exit_status::tempdir();
        std::fs::write(
            dir.join("resolv.conf"),
            format!("nameserver {ip}\noptions timeout:5 attempts:1\n"),
        )
        .unwrap();
        Dns {
            ip,
            name: name.into(),
            queries,
            stop,
            dir,
        }
    }

    /// A resolv.conf that names this server.
    pub fn resolv_conf(&self) -> PathBuf {
        self.dir.join("resolv.conf")
    }

    /// Queries for the name so far (A and AAAA each count).
    pub fn queries(&self) -> usize {
        self.queries.load(Ordering::SeqCst)
    }

    /// Waits (bounded) until at least `n` queries came.
    pub fn wait_for_queries(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.queries() < n {
            assert!(Instant::now() < deadline, "fake DNS: {} of {n} queries", self.queries());
            thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Dns {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// The question's name, type, and where the question ends.
fn question(packet: &[u8]) -> Option<(String, u16, usize)> {
    let mut i = 12;
    let mut labels = Vec::new();
    loop {
        let len = *packet.get(i)? as usize;
        i += 1;
        if len == 0 {
            break;
        }
        labels.push(String::from_utf8_lossy(packet.get(i..i + len)?).to_ascii_lowercase());
        i += len;
    }
    let qtype = u16::from_be_bytes([*packet.get(i)?, *packet.get(i + 1)?]);
    Some((labels.join("."), qtype, i + 4))
}

/// The response to `query` (header and question): A 127.0.0.1, or no address.
fn answer(query: &[u8], qtype: u16) -> Vec<u8> {
    let mut out = query.to_vec();
    out[2] = 0x81; // response, recursion desired
    out[3] = 0x80; // recursion available, no error
    let a = qtype == 1;
    out[6..8].copy_from_slice(&[0, u8::from(a)]); // answers
    out[8..12].copy_from_slice(&[0, 0, 0, 0]); // authority, additional
    if a {
        out.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 0, 0, 4, 127, 0, 0, 1]);
    }
    out
}
