//! The webhook bench's clients other than the steady load: slow clients,
//! clients that never read, and fresh legitimate connections, each dialling
//! from a source address of its own on loopback (127.0.0.0/8 is all local,
//! so each address stands for a host; the webhook shares its slots by
//! source address). Every loop ends by a count and a time.

use std::net::Ipv4Addr;
use std::os::unix::io::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::https::Client;

/// The manifests' webhook timeoutSeconds: the API server gives up after it.
pub const API_TIMEOUT: Duration = Duration::from_secs(5);

/// One client's TLS connection from `source`, bounded by `within` everywhere.
pub fn dial(
    source: Ipv4Addr,
    port: u16,
    config: &Arc<rustls::ClientConfig>,
    within: Duration,
) -> std::io::Result<Client> {
    Client::connect_from(source, port, config.clone(), within)
}

/// Whether the server has closed this connection, read without blocking
/// through TLS (session tickets after the handshake are records too, not
/// an end); any answer to a half-sent header is an end as well.
fn closed_by_server(client: &mut Client) -> bool {
    use std::io::Read;
    let mut buffer = [0u8; 512];
    !matches!(client.stream.read(&mut buffer), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

#[derive(Default, Clone)]
pub struct SlowStats {
    pub dials: usize,
    pub held: usize,
    pub refused: usize,
    /// Seconds from a held connection's partial header to its cut.
    pub cut: Vec<f64>,
    pub peak_open: usize,
    pub left: usize,
}

impl SlowStats {
    pub fn add(&mut self, other: SlowStats) {
        self.dials += other.dials;
        self.held += other.held;
        self.refused += other.refused;
        self.cut.extend(other.cut);
        self.peak_open += other.peak_open;
        self.left += other.left;
    }
}

/// A slow client's place: its address, its connection and since when it
/// holds it, and when it may dial again.
struct Slot {
    source: Ipv4Addr,
    held: Option<(Client, Instant)>,
    retry_at: Instant,
}

/// What a slow client sends once its handshake is done: part of a header.
pub const PARTIAL_HEADER: &[u8] = b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: app";

/// One thread's share of the slow clients, a slot for each of `sources`
/// (the address each dials from): each slot holds a connection that
/// finished its handshake and sent `partial` (part of a header, or nothing:
/// an idle TLS connection); a slot whose dial was refused, or whose
/// connection the server cut, dials again 2 s later. Until `until`, and at
/// most `dials` dials a slot on average.
pub fn slow_share(
    port: u16,
    config: Arc<rustls::ClientConfig>,
    sources: Vec<Ipv4Addr>,
    partial: &'static [u8],
    dials: usize,
    until: Instant,
) -> SlowStats {
    let mut slots: Vec<Slot> = sources
        .into_iter()
        .map(|source| Slot {
            source,
            held: None,
            retry_at: Instant::now(),
        })
        .collect();
    let mut stats = SlowStats::default();
    let mut dials_left = slots.len() * dials;
    while Instant::now() < until {
        let pass = Instant::now();
        for Slot {
            source,
            held: slot,
            retry_at,
        } in slots.iter_mut()
        {
            if Instant::now() >= until {
                break;
            }
            if let Some((client, since)) = slot.as_mut() {
                if closed_by_server(client) {
                    stats.cut.push(since.elapsed().as_secs_f64());
                    *slot = None;
                    *retry_at = Instant::now() + Duration::from_secs(2);
                }
                continue;
            }
            if dials_left == 0 || Instant::now() < *retry_at {
                continue;
            }
            dials_left -= 1;
            stats.dials += 1;
            let held = dial(*source, port, &config, Duration::from_secs(5)).and_then(|mut c| {
                if !partial.is_empty() {
                    c.send_raw(partial)?;
                }
                c.stream.sock.set_nonblocking(true)?;
                Ok(c)
            });
            match held {
                Ok(c) => {
                    stats.held += 1;
                    *slot = Some((c, Instant::now()));
                }
                Err(_) => {
                    stats.refused += 1;
                    *retry_at = Instant::now() + Duration::from_secs(2);
                }
            }
        }
        stats.peak_open = stats.peak_open.max(slots.iter().filter(|s| s.held.is_some()).count());
        let rest = Duration::from_millis(100).saturating_sub(pass.elapsed());
        std::thread::sleep(rest.min(until.saturating_duration_since(Instant::now())));
    }
    stats.left = dials_left;
    stats
}

/// How long a non-reading round was held: from its first byte, and from
/// its first write that blocked (the server had stopped reading: its
/// answers were not flushed); +inf when never cut.
#[derive(Clone, Copy)]
pub struct Held {
    pub from_first: f64,
    pub from_blocked: f64,
}

/// One non-reading client from `source`: rounds of (connect, pipeline
/// requests without reading, until the server cuts it off), each round at
/// most 30 s, until `until`; and the dials refused.
pub fn no_read_client(
    source: Ipv4Addr,
    port: u16,
    config: Arc<rustls::ClientConfig>,
    until: Instant,
) -> (Vec<Held>, usize) {
    let batch = b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n".repeat(200);
    let (mut held, mut refused) = (Vec::new(), 0);
    for _ in 0..20 {
        if Instant::now() >= until {
            break;
        }
        let Ok(mut client) = dial(source, port, &config, Duration::from_secs(5)) else {
            refused += 1;
            std::thread::sleep(Duration::from_millis(500));
            continue;
        };
        small_receive_buffer(&client);
        let _ = client.stream.sock.set_write_timeout(Some(Duration::from_millis(500)));
        held.push(pipeline_unread(&mut client, &batch));
    }
    (held, refused)
}

fn small_receive_buffer(client: &Client) {
    let small: libc::c_int = 4096;
    // SAFETY: setsockopt on an open socket with a pointer to a c_int of its size.
    unsafe {
        libc::setsockopt(
            client.stream.sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&small as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

/// Sends `batch` again and again, reading nothing, until the server cuts
/// the connection (or 30 s).
fn pipeline_unread(client: &mut Client, batch: &[u8]) -> Held {
    let started = Instant::now();
    let mut blocked: Option<Instant> = None;
    while started.elapsed() < Duration::from_secs(30) {
        match client.send_raw(batch) {
            Ok(()) => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                // The write may have waited up to its 500 ms timeout.
                blocked.get_or_insert_with(|| Instant::now() - Duration::from_millis(500));
            }
            Err(_) => {
                return Held {
                    from_first: started.elapsed().as_secs_f64(),
                    from_blocked: blocked.map_or(0.0, |b| b.elapsed().as_secs_f64()),
                };
            }
        }
    }
    Held {
        from_first: f64::INFINITY,
        from_blocked: f64::INFINITY,
    }
}

/// What fresh legitimate connections met.
#[derive(Default)]
pub struct Fresh {
    /// Answered 200 within [`API_TIMEOUT`] of the dial.
    pub served: usize,
    /// Closed before the handshake ended (at accept, or evicted).
    pub refused: usize,
    /// Failed after the handshake (cut, or not a 200).
    pub failed: usize,
    /// Answered 200, but after the API server would have given up.
    pub late: usize,
    /// Milliseconds from the dial to the answer, of those answered.
    pub latencies: Vec<f64>,
}

impl Fresh {
    pub fn tried(&self) -> usize {
        self.served + self.refused + self.failed + self.late
    }
}

/// A fresh connection from `source` every `every`, as an API server opens
/// one when its pool needs it, each posting one review, until `until`.
pub fn fresh(
    source: Ipv4Addr,
    port: u16,
    config: Arc<rustls::ClientConfig>,
    body: Vec<u8>,
    every: Duration,
    until: Instant,
) -> Fresh {
    let mut f = Fresh::default();
    let mut next = Instant::now();
    while next < until {
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        let at = Instant::now();
        next += every;
        let Ok(mut client) = dial(source, port, &config, API_TIMEOUT) else {
            f.refused += 1;
            continue;
        };
        match client.post(&body) {
            Ok(r) if r.status == 200 => {
                let took = at.elapsed();
                f.latencies.push(took.as_secs_f64() * 1000.0);
                if took < API_TIMEOUT {
                    f.served += 1;
                } else {
                    f.late += 1;
                }
            }
            _ => f.failed += 1,
        }
    }
    f.latencies.sort_by(f64::total_cmp);
    f
}
