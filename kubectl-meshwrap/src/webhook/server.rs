//! The HTTPS server around [`admission::review`]: TLS, routes, limits,
//! timeouts, logs, metrics and shutdown.
//!
//! With `failurePolicy: Fail`, a webhook that does not answer blocks pod
//! creation, so every wait here is bounded and every error is an HTTP
//! answer, never a crash:
//! - a client that is slow to finish the TLS handshake, or a request from
//!   its first byte to the flush of its answer (a slowloris, a client that
//!   never reads, a wedged peer), is cut off after `--client-timeout`; an
//!   idle keep-alive connection after `--idle-timeout`;
//! - above `--max-connections` open, a new connection is closed at accept,
//!   so a flood costs CPU, not the memory limit (see [`super::limits`]),
//!   unless the source address holding the most connections still in
//!   their handshake or first request (more than the newcomer's) gives way
//!   for it, its oldest such; no source holds more than
//!   `--max-source-share`, and at it its own oldest slow or idle connection
//!   gives way for its newcomer (see [`super::fair`]); above
//!   `--max-handshakes` under way, a new connection that no other source's
//!   handshake gives way to waits for a slot, within `--client-timeout`
//!   (see [`super::waiting`]): the API server's cold burst is let in;
//! - a body above the API server's own 3 MiB limit is refused (413) by its
//!   Content-Length, or as soon as it grows past it, without being buffered;
//!   bodies held at once share a budget, and a request it cannot cover is
//!   answered 503 with Retry-After before its body is read (see
//!   [`super::limits`]): 512 connections with near-3 MiB bodies would
//!   otherwise need 1.5 GiB;
//! - the kernel's buffers per connection are fixed at [`SOCKET_BUFFER`]
//!   (set on the listener, which accepted sockets inherit) instead of
//!   autotuned up to megabytes: a client that pipelines and never reads
//!   fills both, and 200 such clients held 80 MB of socket memory, which
//!   cgroup v2 charges to the pod's limit;
//! - SIGTERM turns `/readyz` to 503 first and keeps serving for
//!   `--shutdown-delay`, because the Service's endpoints are updated after
//!   the pod is told to stop, and a connection refused meanwhile would fail
//!   someone's pod creation; only then does it stop accepting, let the
//!   requests in flight finish (idle keep-alive connections are closed), and
//!   exit, bounded by `--drain-timeout`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, RETRY_AFTER};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio_rustls::TlsAcceptor;

use super::admission::{self, MAX_BODY, Settings};
use super::events::{self, Events};
use super::fair::{Admitted, Caps, Fair, RETRY_WAITING, Refused, Ticket};
use super::limits::{BODY_BUDGET, BodyBudget, Deadline, Expired, Held, SMALL_BODY, SMALL_LANE, Timed};
use super::log;
use super::metrics::Metrics;
use super::namespaces::{self, Namespaces};
use super::tls::{Certificates, Reload};
use super::waiting::Waiting;

/// How often the certificate files are read again.
const RELOAD_EVERY: Duration = Duration::from_secs(1);

#[derive(Clone, Debug)]
pub struct Config {
    pub listen: SocketAddr,
    pub tls_cert: PathBuf,
    pub tls_key: PathBuf,
    pub client_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: usize,
    pub max_handshakes: usize,
    /// The share of each cap one source address may hold, in percent.
    pub max_source_share: u8,
    pub shutdown_delay: Duration,
    pub drain_timeout: Duration,
    pub settings: Settings,
    pub events: events::Config,
    pub namespaces: namespaces::Config,
}

struct State {
    settings: Settings,
    metrics: Metrics,
    draining: AtomicBool,
    client_timeout: Duration,
    idle_timeout: Duration,
    fair: Arc<Fair>,
    bodies: Arc<BodyBudget>,
    /// Offered each decision after its answer is built; never waited for.
    events: Events,
    /// Each pod's namespace, read before its decision, within a deadline.
    namespaces: Namespaces,
}

/// hyper's read and write buffers, each: a webhook's request headers are
/// small, and a larger buffer would be held by every connection.
const HTTP_BUFFER: usize = 16 * 1024;
/// rustls's buffers of records not yet written, per connection.
const TLS_BUFFER: usize = 32 * 1024;
/// SO_RCVBUF and SO_SNDBUF of each connection (the kernel doubles them for
/// its bookkeeping): about 64 KB a connection at most, 32 MB for 512, and a
/// 3 MiB body still arrives in well under a second in a cluster.
pub const SOCKET_BUFFER: u32 = 16 * 1024;

/// Runs the webhook until SIGTERM (or SIGINT) and its drain; the exit code.
pub fn run(config: Config) -> i32 {
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            log::error("cannot start", &[("error", json!(e.to_string()))]);
            return 1;
        }
    };
    let code = runtime.block_on(serve(config));
    // Handshakes still under way when the drain ended are not waited for.
    runtime.shutdown_timeout(Duration::from_millis(100));
    code
}

async fn serve(config: Config) -> i32 {
    let (certificates, acceptor) = match tls(&config) {
        Ok(pair) => pair,
        Err((code, e)) => {
            log::error("cannot serve", &[("error", json!(e))]);
            return code;
        }
    };
    let (term, int) = match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
        (Ok(t), Ok(i)) => (t, i),
        _ => {
            log::error("cannot serve", &[("error", json!("cannot handle SIGTERM"))]);
            return 1;
        }
    };
    let listener = match bind(config.listen) {
        Ok(l) => l,
        Err(e) => {
            log::error(
                "cannot serve",
                &[("error", json!(format!("--listen {}: {e}", config.listen)))],
            );
            return 2;
        }
    };
    let address = listener.local_addr().map_or(config.listen, |a| a);
    log::info(
        "listening",
        &[
            ("address", json!(address.to_string())),
            ("namespace", json!(config.settings.namespace)),
            ("image", json!(config.settings.options.image)),
        ],
    );
    tokio::spawn(reload(certificates));
    let state = state(&config);
    let graceful = GracefulShutdown::new();
    serve_until_stopped(&listener, &acceptor, &state, &graceful, &config, (term, int)).await;
    drop(listener);
    drain(graceful, config.drain_timeout).await;
    state.events.finish().await;
    0
}

/// What every connection shares.
fn state(config: &Config) -> Arc<State> {
    Arc::new(State {
        settings: config.settings.clone(),
        metrics: Metrics::default(),
        draining: AtomicBool::new(false),
        client_timeout: config.client_timeout,
        idle_timeout: config.idle_timeout,
        fair: Fair::new(Caps {
            connections: config.max_connections,
            handshakes: config.max_handshakes,
            source_share: config.max_source_share,
        }),
        bodies: BodyBudget::new(BODY_BUDGET, SMALL_LANE, SMALL_BODY),
        events: Events::start(&config.events),
        namespaces: Namespaces::start(&config.namespaces),
    })
}

/// The accept loop, with the connections waiting for a slot, until the
/// drain's delay after SIGTERM (or SIGINT) has passed.
async fn serve_until_stopped(
    listener: &TcpListener,
    acceptor: &TlsAcceptor,
    state: &Arc<State>,
    graceful: &GracefulShutdown,
    config: &Config,
    (mut term, mut int): (Signal, Signal),
) {
    let serving = Serving {
        acceptor,
        state,
        graceful,
    };
    let mut waiting = Waiting::new(config.max_connections, config.client_timeout);
    let mut stop_at: Option<tokio::time::Instant> = None;
    loop {
        let (stop, expiry) = (stop_at, waiting.next_expiry());
        tokio::select! {
            accepted = listener.accept() => serving.accept(accepted, &mut waiting).await,
            () = state.fair.freed(), if !waiting.is_empty() => serving.unwait(&mut waiting),
            // A connection just set up grows slow with time: no event says so.
            () = tokio::time::sleep(RETRY_WAITING), if !waiting.is_empty() => serving.unwait(&mut waiting),
            () = sleep_until(expiry) => {
                // Waited --client-timeout for a slot: closed, as a handshake
                // that long would have been.
                for (tcp, why) in waiting.expired(tokio::time::Instant::now()) {
                    state.metrics.shed(why);
                    drop(tcp);
                }
            }
            _ = term.recv(), if stop_at.is_none() => {
                stop_at = Some(begin_drain(state, "SIGTERM", config.shutdown_delay));
            }
            _ = int.recv(), if stop_at.is_none() => {
                stop_at = Some(begin_drain(state, "SIGINT", config.shutdown_delay));
            }
            () = sleep_until(stop) => break,
        }
        state.fair.set_waiting(waiting.len());
    }
}

/// Sleeps until `at`, or forever.
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The certificates (re-read as they change) and the TLS acceptor over
/// them; `Err((exit code, why))`.
fn tls(config: &Config) -> Result<(Arc<Certificates>, TlsAcceptor), (i32, String)> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certificates = Certificates::load(config.tls_cert.clone(), config.tls_key.clone(), provider.clone())
        .map(Arc::new)
        .map_err(|e| (2, e))?;
    let builder = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| (1, e.to_string()))?;
    let mut tls = builder.with_no_client_auth().with_cert_resolver(certificates.clone());
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok((certificates, TlsAcceptor::from(Arc::new(tls))))
}

/// A connection waiting for a slot, and why it waits (its reason if it
/// waits too long).
type Parked = (TcpStream, Refused);

/// What the accept loop hands each connection it lets in.
struct Serving<'a> {
    acceptor: &'a TlsAcceptor,
    state: &'a Arc<State>,
    graceful: &'a GracefulShutdown,
}

impl Serving<'_> {
    /// One accepted connection: served in a task of its own within the caps
    /// and its source's share (another may give way for it), kept waiting
    /// for a handshake slot, or closed at once.
    async fn accept(&self, accepted: std::io::Result<(TcpStream, SocketAddr)>, waiting: &mut Waiting<Parked>) {
        // Evicted connections are closed before more are admitted (see `fair`).
        self.state.fair.settled().await;
        let (tcp, peer) = match accepted {
            Ok(pair) => pair,
            // Out of descriptors, most likely: let some connections end.
            Err(_) => return tokio::time::sleep(Duration::from_millis(10)).await,
        };
        // Those waiting already go first, as far as slots have freed.
        self.unwait(waiting);
        match self.state.fair.admit(peer.ip()) {
            Ok(admitted) => self.spawn(tcp, admitted),
            // Only a handshake slot is missing, or its source's own
            // connections are all being set up: the side taken is the API
            // server's (its cold burst is one address's), so the connection
            // waits, within --client-timeout, instead of being refused (see
            // `waiting`).
            Err(why) if why.waits() => {
                if let Some((shed, why)) = waiting.push((tcp, why), peer.ip(), tokio::time::Instant::now()) {
                    self.state.metrics.shed(why);
                    drop(shed);
                }
            }
            // Closed at once: the client sees its connection reset or ended.
            Err(why) => {
                self.state.metrics.shed(why);
                drop(tcp);
            }
        }
    }

    /// Lets in connections that wait while slots are free (or given way),
    /// those whose source holds the fewest handshakes first, until no
    /// handshake slot is left; one whose source's own connections are still
    /// being set up waits on; one refused otherwise (its source at its share,
    /// every connection answering) is closed.
    fn unwait(&self, waiting: &mut Waiting<Parked>) {
        let ips: Vec<std::net::IpAddr> = waiting.ips().collect();
        let mut done: Vec<(usize, Result<Admitted, Refused>)> = Vec::new();
        for at in self.state.fair.order(ips.iter().copied()) {
            match self.state.fair.admit(ips[at]) {
                Err(Refused::Handshakes) => break,
                Err(Refused::SetUp) => {
                    if let Some(parked) = waiting.get_mut(at) {
                        parked.1 = Refused::SetUp;
                    }
                }
                outcome => done.push((at, outcome)),
            }
        }
        // Taken out from the last, so the indexes hold.
        done.sort_unstable_by_key(|(at, _)| std::cmp::Reverse(*at));
        for (at, outcome) in done {
            let Some(((tcp, _), _)) = waiting.remove(at) else {
                continue;
            };
            match outcome {
                Ok(admitted) => self.spawn(tcp, admitted),
                Err(why) => {
                    self.state.metrics.shed(why);
                    drop(tcp);
                }
            }
        }
        self.state.fair.set_waiting(waiting.len());
    }

    fn spawn(&self, tcp: TcpStream, admitted: Admitted) {
        for phase in admitted.evicted {
            self.state.metrics.evicted(phase);
        }
        tokio::spawn(connection(
            tcp,
            admitted.ticket,
            self.acceptor.clone(),
            self.state.clone(),
            self.graceful.watcher(),
        ));
    }
}

/// Lets the requests in flight finish, within `--drain-timeout`.
async fn drain(graceful: GracefulShutdown, timeout: Duration) {
    let open = graceful.count();
    log::info("draining", &[("connections", json!(open))]);
    match tokio::time::timeout(timeout, graceful.shutdown()).await {
        Ok(()) => log::info("drained", &[]),
        Err(_) => log::warn(
            "drain timed out; closing the connections left",
            &[("drain_timeout", json!(format!("{timeout:?}")))],
        ),
    }
}

/// The listening socket, with the buffer sizes its connections inherit.
fn bind(address: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if address.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.set_recv_buffer_size(SOCKET_BUFFER)?;
    socket.set_send_buffer_size(SOCKET_BUFFER)?;
    socket.bind(address)?;
    socket.listen(1024)
}

fn begin_drain(state: &State, signal: &str, delay: Duration) -> tokio::time::Instant {
    state.draining.store(true, Ordering::SeqCst);
    log::info(
        "stopping: /readyz answers 503; serving on while the endpoints update",
        &[
            ("signal", json!(signal)),
            ("shutdown_delay", json!(format!("{delay:?}"))),
        ],
    );
    tokio::time::Instant::now() + delay
}

async fn reload(certificates: Arc<Certificates>) {
    let mut last_error = String::new();
    let mut tick = tokio::time::interval(RELOAD_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match certificates.reload() {
            Reload::Same => {}
            Reload::Loaded => {
                last_error.clear();
                log::info("certificate reloaded", &[]);
            }
            Reload::Kept(e) if e != last_error => {
                log::warn(
                    "certificate files changed but cannot be used; keeping the previous one",
                    &[("error", json!(e))],
                );
                last_error = e;
            }
            Reload::Kept(_) => {}
        }
    }
}

/// One connection, from its handshake to its end: closed by a bound, by
/// the client, by the drain, or when it gives way to a newcomer.
async fn connection(tcp: TcpStream, ticket: Ticket, acceptor: TlsAcceptor, state: Arc<State>, watcher: Watcher) {
    let _ = tcp.set_nodelay(true);
    ticket.watch(std::os::fd::AsRawFd::as_raw_fd(&tcp));
    let ticket = Arc::new(ticket);
    let handshake = tokio::time::timeout(state.client_timeout, acceptor.accept(tcp));
    let mut tls = tokio::select! {
        done = handshake => match done {
            Ok(Ok(stream)) => stream,
            // A failed or too slow handshake: nothing to answer.
            Ok(Err(_)) => return,
            Err(_) => {
                state.metrics.closed("handshake");
                return;
            }
        },
        // Counted at eviction; dropping the handshake closes the socket.
        () = ticket.evicted() => return,
    };
    ticket.handshaken();
    tls.get_mut().1.set_buffer_limit(Some(TLS_BUFFER));
    let deadline = Deadline::with_ticket(state.client_timeout, state.idle_timeout, Some(ticket.clone()));
    let io = TokioIo::new(Timed::new(tls, deadline.clone()));
    let (cycle, shared, place) = (deadline.clone(), state.clone(), ticket.clone());
    let service = service_fn(move |req| {
        let (state, cycle, ticket) = (shared.clone(), cycle.clone(), place.clone());
        // A request buffered behind another begins its cycle here.
        cycle.begin();
        async move {
            let answer = handle(req, &state, &ticket).await;
            cycle.answered();
            answer
        }
    });
    let mut builder = http1::Builder::new();
    // No header timer of hyper's: the deadline bounds the header, the body
    // and the answer's write as one, and the idle time between requests.
    builder
        .timer(TokioTimer::new())
        .max_buf_size(HTTP_BUFFER)
        .keep_alive(true);
    let served = watcher.watch(builder.serve_connection(io, service));
    tokio::select! {
        _ = served => {}
        expired = deadline.expired() => {
            // Dropping the connection closes it, whatever it was waiting for.
            state.metrics.closed(if expired == Expired::Request { "request" } else { "idle" });
        }
        // Only before its first request arrived whole, or idle between
        // requests for its own source's newcomer (see `fair`).
        () = ticket.evicted() => {}
    }
}

fn answer(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    if let Ok(v) = content_type.parse() {
        response.headers_mut().insert(CONTENT_TYPE, v);
    }
    response
}

fn plain(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    answer(status, "text/plain; charset=utf-8", format!("{body}\n"))
}

async fn handle(req: Request<Incoming>, state: &State, ticket: &Ticket) -> Result<Response<Full<Bytes>>, Infallible> {
    let started = Instant::now();
    // A request without a body has arrived whole with its head; a review
    // once its body has (in `mutate`).
    if !(req.method() == Method::POST && req.uri().path() == "/mutate") {
        ticket.answering();
    }
    Ok(match (req.method(), req.uri().path()) {
        (&Method::GET, "/healthz") => plain(StatusCode::OK, "ok"),
        (&Method::GET, "/readyz") if state.draining.load(Ordering::SeqCst) => {
            plain(StatusCode::SERVICE_UNAVAILABLE, "draining")
        }
        (&Method::GET, "/readyz") => plain(StatusCode::OK, "ok"),
        (&Method::GET, "/metrics") => {
            let mut text = state.metrics.render(state.fair.counts(), state.bodies.in_flight());
            state.events.render(&mut text);
            answer(StatusCode::OK, "text/plain; version=0.0.4; charset=utf-8", text)
        }
        (&Method::POST, "/mutate") => mutate(req, state, started, ticket).await,
        (_, "/mutate") => plain(StatusCode::METHOD_NOT_ALLOWED, "POST an AdmissionReview to /mutate"),
        _ => plain(
            StatusCode::NOT_FOUND,
            "not found: the webhook serves /mutate, /healthz, /readyz and /metrics",
        ),
    })
}

/// An error answer: counted, logged, and the connection closed when the body
/// may not have been read.
fn refuse(
    state: &State,
    started: Instant,
    status: StatusCode,
    code: &'static str,
    why: String,
    close: bool,
) -> Response<Full<Bytes>> {
    state.metrics.record("error", code, started.elapsed());
    log::warn(
        "request refused",
        &[("status", json!(status.as_u16())), ("reason", json!(why))],
    );
    let mut response = plain(status, &why);
    if close {
        response
            .headers_mut()
            .insert(CONNECTION, hyper::header::HeaderValue::from_static("close"));
    }
    response
}

async fn mutate(req: Request<Incoming>, state: &State, started: Instant, ticket: &Ticket) -> Response<Full<Bytes>> {
    let content_type = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let essence = content_type.split(';').next().unwrap_or("").trim();
    if !essence.eq_ignore_ascii_case("application/json") {
        let got = if content_type.is_empty() { "none" } else { content_type };
        let why = format!("Content-Type must be application/json, got {got}");
        return refuse(
            state,
            started,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "content-type",
            why,
            true,
        );
    }
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(size) = declared.filter(|s| *s > MAX_BODY as u64) {
        let why = too_large(&format!("{size} bytes"));
        return refuse(state, started, StatusCode::PAYLOAD_TOO_LARGE, "too-large", why, true);
    }
    let (body, held) = match read_body(req.into_body(), declared, state).await {
        Ok(read) => read,
        Err(e) => return refuse_body(state, started, e),
    };
    ticket.answering();
    let doc = admission::parse(&body);
    let seen = match &doc {
        Ok(doc) => {
            let namespace = admission::namespace_of(doc);
            state.namespaces.options_for(namespace, &state.settings.options).await
        }
        Err(_) => None,
    };
    let settings = seen.map(|options| Settings {
        options,
        namespace: state.settings.namespace.clone(),
    });
    let settings = settings.as_ref().unwrap_or(&state.settings);
    decide(body, held, state, started, |_| {
        doc.and_then(|doc| admission::review_parsed(doc, settings))
    })
}

/// The review of a body read whole, and its answer. The body's budget is
/// held until the review built from it, and the body, have been dropped:
/// the parse is in memory as long as the body is.
fn decide(
    body: Bytes,
    held: Held,
    state: &State,
    started: Instant,
    review: impl FnOnce(&[u8]) -> Result<admission::Answer, String>,
) -> Response<Full<Bytes>> {
    let response = match review(&body) {
        Ok(reviewed) => {
            let took = started.elapsed();
            state
                .metrics
                .record(reviewed.decision.outcome, reviewed.decision.code, took);
            log_decision(&reviewed.decision, took);
            state.events.record(&reviewed.decision);
            match serde_json::to_vec(&reviewed.review) {
                Ok(body) => answer(StatusCode::OK, "application/json", body),
                Err(e) => refuse(
                    state,
                    started,
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    e.to_string(),
                    false,
                ),
            }
        }
        Err(why) => refuse(state, started, StatusCode::BAD_REQUEST, "bad-request", why, false),
    };
    drop(body);
    drop(held);
    response
}

fn too_large(size: &str) -> String {
    format!("the body is {size}, above the API server's limit of {MAX_BODY} bytes (3 MiB)")
}

/// The answer to a body that could not be read whole.
fn refuse_body(state: &State, started: Instant, error: BodyError) -> Response<Full<Bytes>> {
    match error {
        BodyError::TooLarge => refuse(
            state,
            started,
            StatusCode::PAYLOAD_TOO_LARGE,
            "too-large",
            too_large("larger"),
            true,
        ),
        BodyError::Busy(bytes) => {
            let why = format!(
                "the webhook holds {} bytes of request bodies already, and {bytes} more do not fit in its budget of {BODY_BUDGET} bytes; retry",
                state.bodies.in_flight()
            );
            let mut response = refuse(state, started, StatusCode::SERVICE_UNAVAILABLE, "busy", why, true);
            response
                .headers_mut()
                .insert(RETRY_AFTER, hyper::header::HeaderValue::from_static("1"));
            response
        }
        BodyError::Read(e) => refuse(
            state,
            started,
            StatusCode::BAD_REQUEST,
            "bad-request",
            format!("reading the body: {e}"),
            true,
        ),
        BodyError::Timeout => refuse(
            state,
            started,
            StatusCode::REQUEST_TIMEOUT,
            "timeout",
            format!("the body did not arrive within {:?}", state.client_timeout),
            true,
        ),
    }
}

/// One JSON line per decision.
fn log_decision(d: &admission::Decision, took: Duration) {
    let mut fields: Vec<(&str, Value)> = vec![
        ("uid", json!(d.uid)),
        ("namespace", json!(d.namespace)),
        ("pod", json!(d.pod)),
        ("outcome", json!(d.outcome)),
        ("reason", json!(d.reason)),
        ("patched", json!(d.patched)),
        ("micros", json!(took.as_micros() as u64)),
    ];
    if let Some(owner) = &d.owner {
        fields.push(("owner", json!(owner)));
    }
    if let Some(container) = &d.container {
        fields.push(("container", json!(container)));
    }
    log::info("admission", &fields);
}

enum BodyError {
    TooLarge,
    /// The budget for bodies in flight cannot cover this many more bytes.
    Busy(usize),
    Read(hyper::Error),
    Timeout,
}

/// The whole body, within `--client-timeout`, with the budget it holds:
/// its declared length is taken before any of it is read; a body without
/// one takes each chunk as it arrives.
async fn read_body(body: Incoming, declared: Option<u64>, state: &State) -> Result<(Bytes, Held), BodyError> {
    let expected = declared.map_or(0, |d| d as usize);
    let mut held = state.bodies.take(expected).ok_or(BodyError::Busy(expected))?;
    let collect = async {
        let mut body = body;
        let mut whole = bytes::BytesMut::with_capacity(expected);
        while let Some(frame) = body.frame().await {
            let Ok(data) = frame.map_err(BodyError::Read)?.into_data() else {
                continue;
            };
            if whole.len() + data.len() > MAX_BODY {
                return Err(BodyError::TooLarge);
            }
            let beyond = (whole.len() + data.len()).saturating_sub(expected.max(whole.len()));
            if beyond > 0 && !held.grow(beyond) {
                return Err(BodyError::Busy(beyond));
            }
            whole.extend_from_slice(&data);
        }
        Ok(whole.freeze())
    };
    match tokio::time::timeout(state.client_timeout, collect).await {
        Ok(Ok(bytes)) => Ok((bytes, held)),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(BodyError::Timeout),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transform::Options;

    /// A server's state whose body budget is `budget` bytes, all shared.
    fn state(budget: usize) -> State {
        State {
            settings: Settings {
                options: Options {
                    image: "registry.example.com/meshwrap:0.1.0".into(),
                    ..Options::default()
                },
                namespace: "meshwrap-system".into(),
            },
            metrics: Metrics::default(),
            draining: AtomicBool::new(false),
            client_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
            fair: Fair::new(Caps {
                connections: 4,
                handshakes: 4,
                source_share: 100,
            }),
            bodies: BodyBudget::new(budget, 0, 0),
            events: Events::off(),
            namespaces: Namespaces::off(),
        }
    }

    #[test]
    fn a_bodys_budget_is_held_until_the_review_built_from_it_is_dropped() {
        let body = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/admission/job-pod.review.json"
        ))
        .unwrap();
        // A budget of exactly this body, taken as `read_body` takes it.
        let state = state(body.len());
        let held = state.bodies.take(body.len()).unwrap();
        let mut during = None;
        // The hook runs the review and looks at the budget while the review
        // it built is alive: the marker, rather than a race with a scrape.
        let response = decide(Bytes::from(body.clone()), held, &state, Instant::now(), |b| {
            let reviewed = admission::review(b, &state.settings);
            during = Some((state.bodies.in_flight(), state.bodies.take(1).is_none()));
            reviewed
        });
        assert_eq!(
            during,
            Some((body.len(), true)),
            "(held, and nothing more fits) during the review"
        );
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(state.bodies.in_flight(), 0, "given back once the review is dropped");
    }
}
