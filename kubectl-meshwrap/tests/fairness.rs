//! The webhook's fairness never refuses the API server itself (issue 37,
//! part 4): the real binary over real TLS on loopback, at its default caps
//! (512 connections, 64 handshakes, 25% a source). A checklist:
//!
//! - a source at its share makes room from its own oldest idle or slow
//!   connection for its newcomer: 128 connections that finished TLS and
//!   sent nothing, from the API server's address, no longer shut out its
//!   next one; a kept-alive connection idle between requests gives way
//!   too, one answering never (tests/webhook.rs);
//! - the API server's cold burst, 200 new connections at once from one
//!   address each sending one review, is answered whole: past the 64
//!   handshake slots the connections wait for one, none is refused;
//! - a newcomer at its address's share, whose other connections are all
//!   just dialled, waits for one of them to be done rather than cut it or
//!   be refused.
//!
//! 127.0.0.0/8 is all local, so each address stands for a host. Every wait
//! is on the server's own counts (`/metrics`), read from an address of its
//! own, never on a sleep.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::https::*;

fn host(c: u8, d: u8) -> std::net::Ipv4Addr {
    std::net::Ipv4Addr::new(127, 0, c, d)
}

fn client_from(webhook: &Webhook, ca: &Ca, source: std::net::Ipv4Addr) -> std::io::Result<Client> {
    Client::connect_from(source, webhook.port, client_config(&ca.pem), Duration::from_secs(20))
}

fn review() -> Vec<u8> {
    std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/admission/job-pod.review.json"
    ))
    .unwrap()
}

/// A /metrics series, 0 when the server does not show it.
fn series(client: &mut Client, name: &str) -> u64 {
    let text = client.get("/metrics").unwrap().text();
    let prefix = format!("{name} ");
    text.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .map_or(0, |v| v.trim().parse().unwrap())
}

const SHED_SHARE: &str = "meshwrap_webhook_connections_shed_total{reason=\"source-share\"}";
const SHED_HANDSHAKES: &str = "meshwrap_webhook_connections_shed_total{reason=\"max-handshakes\"}";

#[test]
fn idle_connections_from_the_api_servers_address_do_not_shut_out_its_next_one() {
    let ca = Ca::new("lockout CA");
    let webhook = Webhook::start("lockout", &ca, &["--events", "off"]);
    let mut watcher = client_from(&webhook, &ca, host(6, 9)).unwrap();
    assert_eq!(watcher.get("/healthz").unwrap().status, 200);
    // Whoever shares the API server's address holds its whole share (25% of
    // 512) with connections that finish TLS and send nothing.
    let api = host(6, 1);
    let mut idle: Vec<Client> = (0..128).map(|_| client_from(&webhook, &ca, api).unwrap()).collect();
    watcher.wait_metric("meshwrap_webhook_connections", 129);
    watcher.wait_metric("meshwrap_webhook_handshakes", 0);
    // The API server's next connection is served: it takes the place of
    // its address's oldest connection that sent nothing.
    let mut next = client_from(&webhook, &ca, api).expect("the API server's next connection was refused");
    let answer = next.post(&review()).unwrap();
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(watcher.metric(SHED_SHARE), 0);
    assert!(closed_by_server(&mut idle[0]), "the oldest idle connection was kept");
    // Its address still holds no more than its share.
    assert_eq!(watcher.metric("meshwrap_webhook_connections"), 129);
    // Now idle between requests, kept alive, it gives way in turn to the
    // next one when the rest are slow (longest idle first, after the slow).
    let mut kept = next;
    drop(idle.drain(1..));
    watcher.wait_metric("meshwrap_webhook_connections", 2);
    let mut later: Vec<Client> = (0..127).map(|_| client_from(&webhook, &ca, api).unwrap()).collect();
    for client in &mut later {
        assert_eq!(client.get("/healthz").unwrap().status, 200);
    }
    // 128 kept-alive connections of the address, every one idle: the next
    // takes the longest idle one's place (`kept`, answered first).
    let mut last = client_from(&webhook, &ca, api).expect("refused while its address held only idle connections");
    assert_eq!(last.post(&review()).unwrap().status, 200);
    assert!(closed_by_server(&mut kept), "the longest idle connection was kept");
    assert_eq!(
        watcher.metric("meshwrap_webhook_connections_evicted_total{phase=\"idle\"}"),
        1
    );
    assert_eq!(watcher.metric(SHED_SHARE), 0);
}

#[test]
fn the_api_servers_cold_burst_of_200_connections_from_one_address_is_answered_whole() {
    let ca = Ca::new("cold burst CA");
    let webhook = Webhook::start("cold-burst", &ca, &["--events", "off", "--client-timeout", "30s"]);
    let mut watcher = client_from(&webhook, &ca, host(7, 9)).unwrap();
    assert_eq!(watcher.get("/healthz").unwrap().status, 200);
    // 200 connections dialled at once from one address, as an API server
    // with a cold pool does for 200 reviews in flight (HTTP/1.1: one each).
    let api = host(7, 1);
    let tcp: Vec<std::net::TcpStream> = (0..200)
        .map(|_| tcp_from(api, webhook.port, Duration::from_secs(20)).unwrap())
        .collect();
    // The server has taken every one of them (into a handshake slot, to
    // wait for one, or refused) before any handshake is finished.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let taken = series(&mut watcher, "meshwrap_webhook_handshakes")
            + series(&mut watcher, "meshwrap_webhook_waiting")
            + series(&mut watcher, SHED_HANDSHAKES);
        if taken == 200 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the server took {taken} of 200");
    }
    assert_eq!(series(&mut watcher, "meshwrap_webhook_handshakes"), 64);
    // Now the 200 handshakes and reviews, at once; like client-go, a client
    // keeps 25 connections idle and closes the others after their answer.
    let kept = Arc::new(AtomicUsize::new(0));
    let config = client_config(&ca.pem);
    let body = Arc::new(review());
    let clients: Vec<_> = tcp
        .into_iter()
        .map(|tcp| {
            let (config, body, kept) = (config.clone(), body.clone(), kept.clone());
            std::thread::spawn(move || {
                let mut client = Client::over(tcp, config, "localhost", Duration::from_secs(30))
                    .map_err(|e| format!("handshake: {e}"))?;
                let answer = client.post(&body).map_err(|e| format!("review: {e}"))?;
                let keep = kept.fetch_add(1, Ordering::Relaxed) < 25;
                Ok::<_, String>((answer.status, keep.then_some(client)))
            })
        })
        .collect();
    let outcomes: Vec<Result<(u16, Option<Client>), String>> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    let answered = outcomes.iter().filter(|o| matches!(o, Ok((200, _)))).count();
    let first_failure = outcomes.iter().find_map(|o| o.as_ref().err());
    assert_eq!(
        answered, 200,
        "answered {answered} of 200; first failure: {first_failure:?}"
    );
    assert_eq!(series(&mut watcher, SHED_HANDSHAKES), 0);
    assert_eq!(series(&mut watcher, "meshwrap_webhook_waiting"), 0);
}

#[test]
fn a_newcomer_at_its_share_waits_while_its_addresss_connections_are_being_set_up() {
    let ca = Ca::new("set up CA");
    // 25% of 8: two connections an address.
    let webhook = Webhook::start("set-up", &ca, &["--events", "off", "--max-connections", "8"]);
    let mut watcher = client_from(&webhook, &ca, host(9, 9)).unwrap();
    assert_eq!(watcher.get("/healthz").unwrap().status, 200);
    // Two connections of the API server's burst, just dialled: their TLS
    // has not begun (each would give way only after a second).
    let api = host(9, 1);
    let first = tcp_from(api, webhook.port, Duration::from_secs(20)).unwrap();
    let second = tcp_from(api, webhook.port, Duration::from_secs(20)).unwrap();
    watcher.wait_metric("meshwrap_webhook_handshakes", 2);
    // A third from the address, at its share: it waits.
    let (port, config) = (webhook.port, client_config(&ca.pem));
    let third = std::thread::spawn(move || {
        Client::connect_from(api, port, config, Duration::from_secs(20)).and_then(|mut c| c.post(&review()))
    });
    watcher.wait_metric("meshwrap_webhook_waiting", 1);
    assert_eq!(series(&mut watcher, SHED_SHARE), 0);
    // The first is done (answered, then closed): the third takes its place.
    let config = client_config(&ca.pem);
    first.set_nodelay(true).unwrap();
    let mut first = Client::over(first, config, "localhost", Duration::from_secs(20)).unwrap();
    assert_eq!(first.post(&review()).unwrap().status, 200);
    drop(first);
    let answer = third.join().unwrap().expect("the third connection was refused");
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(series(&mut watcher, SHED_SHARE), 0);
    assert_eq!(series(&mut watcher, "meshwrap_webhook_waiting"), 0);
    drop(second);
}
