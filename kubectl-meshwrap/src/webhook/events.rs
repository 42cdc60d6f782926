//! Kubernetes Events that say what the webhook did to a pod, where the
//! pod's user looks: on the pod's controller (a Job, a TFJob, ...), or on
//! its namespace when it has none. A Job's pods are created by the Job
//! controller, so an admission warning reaches no person; an event on the
//! Job shows in `kubectl describe job`. Linkerd's injector does the same
//! (`controller/proxy-injector/webhook.go`, linkerd2 edge-26.8.3: reasons
//! `Injected` and `InjectionSkipped` on the parent workload).
//!
//! Reasons (see `docs/webhook.md`): `Injected` (Normal), `InjectedNative`
//! (Normal), and `InjectionSkipped`: Warning where the pod runs unwrapped
//! and may hang, Normal where it was left alone on purpose (opted out, the
//! node's network, Windows). A skip's note is the transform's own sentence,
//! the one `inject` reports.
//!
//! The API is `events.k8s.io/v1` with a series, as client-go's
//! `tools/events` records (client-go v0.36.3,
//! `tools/events/event_broadcaster.go`): the first occurrence is created,
//! later ones only count, and the count is written with a merge PATCH of
//! `series`. One series per owner, reason, type and note, and per webhook
//! replica (`reportingInstance`), so a Job's 1,000 pods make one event per
//! replica, not 1,000.
//!
//! What it guards against:
//! - delaying or failing an admission: the admission only offers a notice
//!   to a bounded queue (`--events-queue`) and never waits; a full queue
//!   drops it, counted in `/metrics`. One task, the poster, takes notices
//!   from the queue into the cache, and keeps taking them while requests
//!   to the API server are in flight: up to [`WRITERS`] at once, each on a
//!   connection of its own and within `--events-timeout`, each its own
//!   task. So a slow API server slows the writes, not the aggregation, and
//!   the cache (bounded, below), not the queue, absorbs a burst of new
//!   owners; client-go does the same with a goroutine per event
//!   (`tools/events/event_broadcaster.go`, `recordToSink`), unbounded;
//! - the races that opens: a series is written by one request at a time
//!   (marked in flight until its answer is learnt, and not due meanwhile);
//!   occurrences counted while its request is out are written by its next
//!   one, since a write records the count it sent, not the count on its
//!   return; a series forgotten while its request is out is forgotten,
//!   its answer ignored;
//! - memory growing with the owners seen: the series are kept in a cache
//!   of `--events-cache` entries, the least recently seen forgotten first
//!   (client-go's correlator keeps 4,096 in an LRU too); an occurrence
//!   forgotten before its count was written is counted as dropped;
//! - one write per pod: a series' count is written at most once per
//!   `--events-interval`, and once more when the webhook stops;
//! - hammering an API server that is down: after a failed request the
//!   poster waits (1 s, doubling to 30 s) before writing again, counting
//!   meanwhile; a 404 on a PATCH (the event expired) creates it again.
//!
//! An event about a Namespace, which is cluster-scoped, would have to live
//! in `default` (the API server's rule for an event with an `eventTime`
//! and a `regarding` without a namespace: `legacyValidateEvent`,
//! kubernetes `pkg/apis/core/validation/events.go`), where the pod's user
//! may not look: its `regarding` names the pod's namespace as its
//! namespace too, so it lives there.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hyper::Method;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

use super::admission::Decision;
use super::apiserver::{Access, Client, Endpoint, Reply};
use super::log;
use crate::transform::DELIBERATE;

/// `reportingController`: a qualified name, as the API server requires.
pub const REPORTING_CONTROLLER: &str = "meshwrap.io/webhook";
/// `action`: what the webhook does (or did not) to the pods.
pub const ACTION: &str = "Inject";
/// A pod wrapped.
pub const INJECTED: &str = "Injected";
/// A pod whose mesh proxies were made native sidecars instead.
pub const INJECTED_NATIVE: &str = "InjectedNative";
/// A pod not wrapped.
pub const SKIPPED: &str = "InjectionSkipped";
/// The API server's limits: a note's bytes, `reportingInstance`, a name.
const NOTE_LIMIT: usize = 1024;
const INSTANCE_LIMIT: usize = 128;
const NAME_LIMIT: usize = 253;
/// The last writes when the webhook stops: with the shutdown delay (5 s)
/// and the drain (20 s), within the pod's 30 s of grace.
const LAST_WRITES: Duration = Duration::from_secs(3);
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// Requests to the API server in flight at once, at most, each on its own
/// HTTP/1.1 connection: at 100 ms an answer, 160 writes a second, twice a
/// burst of 75 new owners a second (BENCHMARKS.md, events). Bounded, where
/// client-go's goroutine per event is not: the API server's budget for
/// mutating requests in flight (`--max-mutating-requests-inflight`, 200 by
/// default: kubernetes/apiserver `pkg/server/options/server_run_options.go`)
/// is shared with every client. Which side: a burst of Events waits in the
/// cache rather than crowd out the pod creations themselves.
pub const WRITERS: usize = 16;
const MAX_BACKOFF: Duration = Duration::from_secs(30);

#[derive(Clone, Debug)]
pub struct Config {
    pub enabled: bool,
    /// `--api-server`; none: the in-cluster variables.
    pub api_server: Option<Endpoint>,
    pub token: PathBuf,
    pub ca: PathBuf,
    pub queue: usize,
    pub cache: usize,
    pub interval: Duration,
    pub timeout: Duration,
}

/// What an event is about: the pod's controller, or its namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Regarding {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: Option<String>,
}

/// One admission's event, before it is aggregated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    /// The pod's namespace: the event's, and its `regarding`'s.
    pub namespace: String,
    pub regarding: Regarding,
    pub warning: bool,
    pub reason: &'static str,
    pub note: String,
}

impl Notice {
    /// What makes two notices one series.
    fn key(&self) -> Arc<str> {
        let r = &self.regarding;
        let uid = r.uid.as_deref().unwrap_or("");
        let kind = if self.warning { "Warning" } else { "Normal" };
        let parts = [
            self.namespace.as_str(),
            r.api_version.as_str(),
            r.kind.as_str(),
            r.name.as_str(),
            uid,
            kind,
            self.reason,
            self.note.as_str(),
        ];
        parts.join("\u{0}").into()
    }
}

/// The event one decision calls for, if any: wraps and skips, not pods
/// already wrapped, requests left alone, a reinvocation's repeat, or a dry
/// run (the configuration promises `sideEffects: None`, see
/// `admission::dry_run`; which side: the API server's promise is kept, and
/// the dry run's user reads the decision in the answer's warnings).
pub fn notice(d: &Decision) -> Option<Notice> {
    if d.dry_run {
        return None;
    }
    let (reason, warning, note) = match (d.outcome, d.code) {
        ("injected", "native") => (INJECTED_NATIVE, false, d.reason.clone()),
        ("injected", _) => (INJECTED, false, format!("pod wrapped: {}", d.reason)),
        ("skipped", _) if d.repeat => return None,
        ("skipped", code) => (
            SKIPPED,
            !DELIBERATE.contains(&code),
            format!("pod not wrapped: {}", d.reason),
        ),
        _ => return None,
    };
    if d.namespace.is_empty() {
        return None;
    }
    let regarding = match &d.controller {
        Some(c) => Regarding {
            api_version: c.api_version.clone(),
            kind: c.kind.clone(),
            name: c.name.clone(),
            uid: Some(c.uid.clone()).filter(|u| !u.is_empty()),
        },
        None => Regarding {
            api_version: "v1".into(),
            kind: "Namespace".into(),
            name: d.namespace.clone(),
            uid: None,
        },
    };
    Some(Notice {
        namespace: d.namespace.clone(),
        regarding,
        warning,
        reason,
        note: bounded(note, NOTE_LIMIT),
    })
}

/// `text` cut to at most `limit` bytes on a character boundary, `...` last.
fn bounded(mut text: String, limit: usize) -> String {
    if text.len() > limit {
        let mut end = limit - 3;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str("...");
    }
    text
}

/// What `/metrics` reads.
#[derive(Default)]
struct Counters {
    queue_full: AtomicU64,
    evicted: AtomicU64,
    refused: AtomicU64,
    shutdown: AtomicU64,
    /// (create, patch) × (ok, refused, failed).
    writes: [[AtomicU64; 3]; 2],
    series: AtomicUsize,
}

const RESULTS: [&str; 3] = ["ok", "refused", "failed"];

/// The webhook's side of the events: offers notices, renders the metrics,
/// and stops the poster.
pub struct Events {
    sender: Option<mpsc::Sender<Notice>>,
    capacity: usize,
    counters: Arc<Counters>,
    stop: Mutex<Option<(oneshot::Sender<()>, JoinHandle<()>)>>,
    /// How long the last writes may take when the webhook stops.
    flush: Duration,
}

impl Events {
    pub fn off() -> Events {
        Events {
            sender: None,
            capacity: 0,
            counters: Arc::default(),
            stop: Mutex::new(None),
            flush: Duration::ZERO,
        }
    }

    /// Starts the poster, or says once in the log why events are off.
    /// Within the runtime.
    pub fn start(config: &Config) -> Events {
        if !config.enabled {
            log::info("events are off", &[("reason", json!("--events off"))]);
            return Events::off();
        }
        let located = super::apiserver::locate(config.api_server.as_ref());
        let access = located.map(|endpoint| Access {
            endpoint,
            token: config.token.clone(),
            ca: config.ca.clone(),
            timeout: config.timeout,
        });
        let made = access.and_then(|access| Client::new(access.clone()).map(|client| (client, access)));
        let (client, access) = match made {
            Ok(made) => made,
            Err(why) => {
                log::warn("events are off", &[("reason", json!(why))]);
                return Events::off();
            }
        };
        let (sender, receiver) = mpsc::channel(config.queue);
        let (stop, stopped) = oneshot::channel();
        let counters = Arc::new(Counters::default());
        let poster = Poster::new(client, access, config, counters.clone());
        log::info(
            "events are on",
            &[
                ("api_server", json!(poster.endpoint())),
                ("instance", json!(poster.instance)),
            ],
        );
        let task = tokio::spawn(poster.run(receiver, stopped));
        Events {
            sender: Some(sender),
            capacity: config.queue,
            counters,
            stop: Mutex::new(Some((stop, task))),
            flush: config.timeout.min(LAST_WRITES),
        }
    }

    /// Offers the decision's event to the queue; never waits.
    pub fn record(&self, d: &Decision) {
        let (Some(sender), Some(notice)) = (&self.sender, notice(d)) else {
            return;
        };
        if let Err(mpsc::error::TrySendError::Full(_)) = sender.try_send(notice) {
            self.counters.queue_full.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Lets the poster write what it counted, within one request's timeout
    /// (3 s at most).
    pub async fn finish(&self) {
        let stop = self.stop.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some((stop, task)) = stop {
            let _ = stop.send(());
            let bound = self.flush + Duration::from_millis(500);
            if tokio::time::timeout(bound, task).await.is_err() {
                log::warn("events: the last writes did not finish in time", &[]);
            }
        }
    }

    /// The events' series in the Prometheus text format.
    pub fn render(&self, out: &mut String) {
        use std::fmt::Write;
        let c = &self.counters;
        out.push_str(
            "# HELP meshwrap_webhook_events_dropped_total Pod events not written: the queue was full, the series was forgotten before its count was written, the API server refused it, or the webhook stopped first.\n",
        );
        out.push_str("# TYPE meshwrap_webhook_events_dropped_total counter\n");
        for (reason, count) in [
            ("queue-full", &c.queue_full),
            ("evicted", &c.evicted),
            ("refused", &c.refused),
            ("shutdown", &c.shutdown),
        ] {
            let _ = writeln!(
                out,
                "meshwrap_webhook_events_dropped_total{{reason=\"{reason}\"}} {}",
                count.load(Ordering::Relaxed)
            );
        }
        out.push_str(
            "# HELP meshwrap_webhook_event_writes_total Requests to the API server for events, by request and result (refused: a 4xx; failed: no answer, or a 5xx or 429).\n",
        );
        out.push_str("# TYPE meshwrap_webhook_event_writes_total counter\n");
        for (request, results) in ["create", "patch"].iter().zip(&c.writes) {
            for (result, count) in RESULTS.iter().zip(results) {
                let _ = writeln!(
                    out,
                    "meshwrap_webhook_event_writes_total{{request=\"{request}\",result=\"{result}\"}} {}",
                    count.load(Ordering::Relaxed)
                );
            }
        }
        out.push_str("# HELP meshwrap_webhook_events_queued Pod events waiting for the poster.\n");
        out.push_str("# TYPE meshwrap_webhook_events_queued gauge\n");
        let queued = self.sender.as_ref().map_or(0, |s| self.capacity - s.capacity());
        let _ = writeln!(out, "meshwrap_webhook_events_queued {queued}");
        out.push_str("# HELP meshwrap_webhook_event_series Event series remembered.\n");
        out.push_str("# TYPE meshwrap_webhook_event_series gauge\n");
        let _ = writeln!(
            out,
            "meshwrap_webhook_event_series {}",
            c.series.load(Ordering::Relaxed)
        );
    }
}

/// `reportingInstance`: this replica, by its pod's name (the hostname).
fn poster_instance() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let host = host.trim();
    let name = if host.is_empty() { "kubectl-meshwrap" } else { host };
    bounded(name.to_string(), INSTANCE_LIMIT)
}

/// One series: a notice, how often it was seen, and what the API server has.
struct Series {
    notice: Notice,
    tick: u64,
    /// The event's name, chosen before its first create.
    name: String,
    first: SystemTime,
    last: SystemTime,
    count: u32,
    /// The count the API server holds; 0 until it is created.
    written: u32,
    /// When it was first seen, and last written.
    seen: Instant,
    last_write: Option<Instant>,
    /// A request for it is out: it is not due until its answer is learnt.
    in_flight: bool,
}

impl Series {
    /// When it is next to be written: never while a request for it is out,
    /// at once when not created yet, an interval after its last write when
    /// it counted more since.
    fn due(&self, interval: Duration) -> Option<Instant> {
        if self.in_flight {
            return None;
        }
        if self.written == 0 {
            return Some(self.seen);
        }
        (self.count > self.written).then(|| self.last_write.unwrap_or(self.seen) + interval)
    }
}

/// The series, least recently seen first out when it is full.
struct Cache {
    capacity: usize,
    tick: u64,
    series: HashMap<Arc<str>, Series>,
    order: BTreeMap<u64, Arc<str>>,
    /// Event names are `NAME.HEX` of nanoseconds, made strictly increasing.
    last_nanos: u128,
}

impl Cache {
    fn new(capacity: usize) -> Cache {
        Cache {
            capacity,
            tick: 0,
            series: HashMap::new(),
            order: BTreeMap::new(),
            last_nanos: 0,
        }
    }

    /// Counts one occurrence; returns the occurrences of a series forgotten
    /// to make room that were never written, and when the series is due.
    fn observe(&mut self, notice: Notice, at: SystemTime, interval: Duration) -> (u32, Option<Instant>) {
        self.tick += 1;
        let key = notice.key();
        if let Some(series) = self.series.get_mut(&key) {
            self.order.remove(&series.tick);
            series.tick = self.tick;
            series.count = series.count.saturating_add(1);
            series.last = at;
            let due = series.due(interval);
            self.order.insert(self.tick, key);
            return (0, due);
        }
        let mut lost = 0;
        if self.series.len() >= self.capacity
            && let Some((_, oldest)) = self.order.pop_first()
            && let Some(gone) = self.series.remove(&oldest)
        {
            lost = gone.count - gone.written.min(gone.count);
        }
        let name = self.name_for(&notice.regarding.name, at);
        self.series.insert(
            key.clone(),
            Series {
                notice,
                tick: self.tick,
                name,
                first: at,
                last: at,
                count: 1,
                written: 0,
                seen: Instant::now(),
                last_write: None,
                in_flight: false,
            },
        );
        self.order.insert(self.tick, key);
        (lost, Some(Instant::now()))
    }

    /// A new event name for an object: client-go's `NAME.%x` of the time
    /// in nanoseconds (`tools/record/util.GenerateEventName`), within the
    /// 253 characters of a DNS subdomain.
    fn name_for(&mut self, object: &str, at: SystemTime) -> String {
        let nanos = at.duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos();
        self.last_nanos = nanos.max(self.last_nanos + 1);
        let suffix = format!(".{:x}", self.last_nanos);
        let mut prefix = object.to_string();
        prefix.truncate(NAME_LIMIT - suffix.len());
        let prefix = prefix.trim_end_matches(['.', '-']);
        let subdomain = prefix.split('.').all(|l| {
            !l.is_empty()
                && !l.starts_with('-')
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        });
        format!("{}{suffix}", if subdomain { prefix } else { "meshwrap" })
    }

    /// The series due soonest, and when.
    fn soonest(&self, interval: Duration) -> Option<(Instant, Arc<str>)> {
        self.series
            .iter()
            .filter_map(|(k, s)| s.due(interval).map(|at| (at, k.clone())))
            .min_by_key(|(at, _)| *at)
    }

    /// Series with occurrences the API server does not have.
    fn unwritten(&self) -> Vec<Arc<str>> {
        let mut keys: Vec<(u64, Arc<str>)> = self
            .series
            .iter()
            .filter(|(_, s)| s.written < s.count)
            .map(|(k, s)| (s.tick, k.clone()))
            .collect();
        keys.sort();
        keys.into_iter().map(|(_, k)| k).collect()
    }
}

/// What one write came to.
enum Written {
    Ok,
    /// A PATCH found no event (expired or deleted): create it again.
    Gone,
    /// A create found the name taken: choose another.
    Taken,
    /// A 4xx: this write will never succeed as it is.
    Refused(String),
    /// No answer, or a 5xx or 429: try again later.
    Failed(String),
}

/// A write's answer, with the connection it went out on.
struct Done {
    client: Client,
    key: Arc<str>,
    create: bool,
    count: u32,
    answer: Result<Reply, String>,
}

/// The task that aggregates notices and writes them.
struct Poster {
    /// Connections free for a write; [`WRITERS`] in all with those out.
    clients: Vec<Client>,
    /// To make a connection again, should a write's task be lost.
    access: Access,
    writes: JoinSet<Done>,
    cache: Cache,
    counters: Arc<Counters>,
    instance: String,
    interval: Duration,
    failures: u32,
    resume_at: Option<Instant>,
    last_error: String,
    /// When a series may be due, at the earliest: kept as notices come,
    /// computed again (a scan of the cache) only after a write.
    wake: Option<Instant>,
}

impl Poster {
    fn new(client: Client, access: Access, config: &Config, counters: Arc<Counters>) -> Poster {
        let mut clients = vec![client];
        // Each reads the token and the CA once, as the first did.
        clients.extend((1..WRITERS).filter_map(|_| Client::new(access.clone()).ok()));
        Poster {
            clients,
            access,
            writes: JoinSet::new(),
            cache: Cache::new(config.cache),
            counters,
            instance: poster_instance(),
            interval: config.interval,
            failures: 0,
            resume_at: None,
            last_error: String::new(),
            wake: None,
        }
    }

    fn endpoint(&self) -> String {
        self.access.endpoint.to_string()
    }

    async fn run(mut self, mut notices: mpsc::Receiver<Notice>, mut stop: oneshot::Receiver<()>) {
        loop {
            // No free connection: nothing to wake for until one is back.
            let wake = self
                .wake
                .filter(|_| !self.clients.is_empty())
                .map(|at| match self.resume_at {
                    Some(resume) => at.max(resume),
                    None => at,
                });
            let sleep = async {
                match wake {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = &mut stop => break,
                notice = notices.recv() => match notice {
                    Some(notice) => self.observe(notice),
                    None => break,
                },
                Some(done) = self.writes.join_next(), if !self.writes.is_empty() => self.finished(done),
                () = sleep => self.start_due(),
            }
        }
        notices.close();
        while let Ok(notice) = notices.try_recv() {
            self.observe(notice);
        }
        self.flush().await;
    }

    fn observe(&mut self, notice: Notice) {
        let (lost, due) = self.cache.observe(notice, SystemTime::now(), self.interval);
        self.wake = match (self.wake, due) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.counters.evicted.fetch_add(u64::from(lost), Ordering::Relaxed);
        self.counters.series.store(self.cache.series.len(), Ordering::Relaxed);
    }

    /// Sends every series that is due, as far as free connections go, and
    /// learns when the next one is.
    fn start_due(&mut self) {
        let now = Instant::now();
        if self.resume_at.is_some_and(|at| at > now) {
            return;
        }
        while !self.clients.is_empty()
            && let Some((at, key)) = self.cache.soonest(self.interval)
            && at <= now
        {
            self.start(key);
        }
        self.wake = self.cache.soonest(self.interval).map(|(at, _)| at);
    }

    /// Sends one series' create or patch on a free connection, as a task of
    /// its own; false: no free connection, or no such series.
    fn start(&mut self, key: Arc<str>) -> bool {
        let Some(series) = self.cache.series.get_mut(&key) else {
            return false;
        };
        let Some(mut client) = self.clients.pop() else {
            return false;
        };
        series.in_flight = true;
        let create = series.written == 0;
        let count = series.count;
        let (method, path, content_type, body) = request(series, &self.instance);
        self.writes.spawn(async move {
            let answer = client.send(method, &path, content_type, body).await;
            Done {
                client,
                key,
                create,
                count,
                answer,
            }
        });
        true
    }

    /// A write's answer: its connection is free again, and the series and
    /// the backoff learn from it.
    fn finished(&mut self, done: Result<Done, tokio::task::JoinError>) {
        let done = match done {
            Ok(done) => done,
            Err(e) => {
                // A write's task cannot panic; should it, its connection is
                // made again so the poster keeps its WRITERS.
                log::warn("events: a write was lost", &[("error", json!(e.to_string()))]);
                if let Ok(client) = Client::new(self.access.clone()) {
                    self.clients.push(client);
                }
                return;
            }
        };
        // The most recently used first: a sequential trickle keeps one
        // kept-alive connection.
        self.clients.push(done.client);
        if let Some(series) = self.cache.series.get_mut(&done.key) {
            series.in_flight = false;
        }
        let written = judge(done.create, done.answer);
        let slot = match &written {
            Written::Ok => 0,
            Written::Gone | Written::Taken | Written::Refused(_) => 1,
            Written::Failed(_) => 2,
        };
        self.counters.writes[usize::from(!done.create)][slot].fetch_add(1, Ordering::Relaxed);
        self.learn(&done.key, done.create, done.count, written);
        self.wake = self.cache.soonest(self.interval).map(|(at, _)| at);
    }

    /// The last writes when the webhook stops: the answers of the writes
    /// out, then every series with unwritten occurrences, once, [`WRITERS`]
    /// at a time, within one request's timeout (3 s at most) in all.
    async fn flush(&mut self) {
        let deadline = Instant::now() + self.access.timeout.min(LAST_WRITES);
        // The writes out first: their answers say what is left to write.
        while !self.writes.is_empty() {
            match tokio::time::timeout_at(deadline, self.writes.join_next()).await {
                Ok(Some(done)) => self.finished(done),
                Ok(None) | Err(_) => break,
            }
        }
        // Then each series once (no backoff: the webhook is going).
        let mut left = self.cache.unwritten().into_iter();
        while Instant::now() < deadline {
            while !self.clients.is_empty()
                && let Some(key) = left.next()
            {
                self.start(key);
            }
            match tokio::time::timeout_at(deadline, self.writes.join_next()).await {
                Ok(Some(done)) => self.finished(done),
                Ok(None) | Err(_) => break,
            }
        }
        self.writes.abort_all();
        let lost: u32 = self
            .cache
            .series
            .values()
            .map(|s| s.count - s.written.min(s.count))
            .sum();
        self.counters.shutdown.fetch_add(u64::from(lost), Ordering::Relaxed);
    }

    /// Updates the series and the backoff after a write.
    fn learn(&mut self, key: &Arc<str>, create: bool, count: u32, written: Written) {
        let now = Instant::now();
        let renamed = match (&written, self.cache.series.get(key)) {
            (_, None) => return,
            (Written::Gone | Written::Taken, Some(s)) => {
                let object = s.notice.regarding.name.clone();
                Some(self.cache.name_for(&object, SystemTime::now()))
            }
            _ => None,
        };
        let Some(series) = self.cache.series.get_mut(key) else {
            return;
        };
        let error = match written {
            Written::Ok => {
                series.written = count;
                series.last_write = Some(now);
                self.failures = 0;
                self.resume_at = None;
                self.last_error.clear();
                return;
            }
            // Created again at once, under a new name.
            Written::Gone => {
                series.written = 0;
                series.name = renamed.unwrap_or_default();
                return;
            }
            // Unlikely (names hold the time in nanoseconds): a new name,
            // after the backoff, so a server that always says so is not
            // asked in a loop.
            Written::Taken => {
                series.name = renamed.unwrap_or_default();
                "409: an event of that name exists".to_string()
            }
            Written::Refused(why) => {
                // Not tried again: only what is seen later is written.
                let lost = count - series.written.min(count);
                self.counters.refused.fetch_add(u64::from(lost), Ordering::Relaxed);
                series.written = count;
                series.last_write = Some(now);
                why
            }
            Written::Failed(why) => why,
        };
        self.failures += 1;
        let backoff = FIRST_BACKOFF.saturating_mul(1 << self.failures.min(6).saturating_sub(1));
        self.resume_at = Some(now + backoff.min(MAX_BACKOFF));
        if error != self.last_error {
            log::warn(
                "event not written",
                &[
                    ("request", json!(if create { "create" } else { "patch" })),
                    ("error", json!(error)),
                ],
            );
            self.last_error = error;
        }
    }
}

/// A series' create (not created yet) or the merge PATCH of its count:
/// (method, path, content type, body).
fn request(series: &Series, instance: &str) -> (Method, String, &'static str, Vec<u8>) {
    let namespace = &series.notice.namespace;
    if series.written == 0 {
        let path = format!("/apis/events.k8s.io/v1/namespaces/{namespace}/events");
        let body = event(series, instance);
        (Method::POST, path, "application/json", body.to_string().into_bytes())
    } else {
        let path = format!("/apis/events.k8s.io/v1/namespaces/{namespace}/events/{}", series.name);
        let body = json!({"series": series_of(series)});
        (
            Method::PATCH,
            path,
            "application/merge-patch+json",
            body.to_string().into_bytes(),
        )
    }
}

/// What an answer means for the series.
fn judge(create: bool, answer: Result<Reply, String>) -> Written {
    match answer {
        Ok(reply) if (200..300).contains(&reply.status) => Written::Ok,
        Ok(reply) if reply.status == 404 && !create => Written::Gone,
        Ok(reply) if reply.status == 409 && create => Written::Taken,
        Ok(reply) if reply.status == 429 || reply.status >= 500 => {
            Written::Failed(format!("{}: {}", reply.status, reply.message()))
        }
        Ok(reply) => Written::Refused(format!("{}: {}", reply.status, reply.message())),
        Err(why) => Written::Failed(why),
    }
}

fn micro(at: SystemTime) -> String {
    log::micro_time(at.duration_since(UNIX_EPOCH).unwrap_or_default())
}

fn series_of(s: &Series) -> Value {
    json!({"count": s.count, "lastObservedTime": micro(s.last)})
}

/// The `events.k8s.io/v1` Event a series is created as.
fn event(s: &Series, instance: &str) -> Value {
    let n = &s.notice;
    let mut regarding = json!({
        "apiVersion": n.regarding.api_version,
        "kind": n.regarding.kind,
        "name": n.regarding.name,
        "namespace": n.namespace,
    });
    if let Some(uid) = &n.regarding.uid {
        regarding["uid"] = json!(uid);
    }
    let mut event = json!({
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": s.name, "namespace": n.namespace},
        "eventTime": micro(s.first),
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": instance,
        "action": ACTION,
        "reason": n.reason,
        "type": if n.warning { "Warning" } else { "Normal" },
        "note": n.note,
        "regarding": regarding,
    });
    if s.count >= 2 {
        event["series"] = series_of(s);
    }
    event
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::webhook::admission::Controller;

    fn decision(outcome: &'static str, code: &'static str, reason: &str) -> Decision {
        Decision {
            outcome,
            code,
            reason: reason.into(),
            container: None,
            uid: "u".into(),
            namespace: "team-a".into(),
            pod: "p".into(),
            owner: Some("Job/train".into()),
            controller: Some(Controller {
                api_version: "batch/v1".into(),
                kind: "Job".into(),
                name: "train".into(),
                uid: "job-uid".into(),
            }),
            patched: true,
            repeat: false,
            dry_run: false,
        }
    }

    #[test]
    fn wraps_and_skips_get_an_event_and_nothing_else_does() {
        let wrapped = notice(&decision(
            "injected",
            "injected",
            "container main, mesh istio, quit policy always",
        ))
        .unwrap();
        assert_eq!((wrapped.reason, wrapped.warning), (INJECTED, false));
        assert_eq!(
            wrapped.note,
            "pod wrapped: container main, mesh istio, quit policy always"
        );
        assert_eq!(wrapped.regarding.kind, "Job");
        assert_eq!(wrapped.regarding.uid.as_deref(), Some("job-uid"));
        let skipped = notice(&decision("skipped", "no-command", "container c has no command")).unwrap();
        assert_eq!((skipped.reason, skipped.warning), (SKIPPED, true));
        assert_eq!(skipped.note, "pod not wrapped: container c has no command");
        let deliberate = notice(&decision("skipped", "opted-out", "opted out")).unwrap();
        assert_eq!((deliberate.reason, deliberate.warning), (SKIPPED, false));
        let native = notice(&decision(
            "injected",
            "native",
            "native: annotated, not wrapped (istio)",
        ))
        .unwrap();
        assert_eq!(native.reason, INJECTED_NATIVE);
        let mut repeat = decision("skipped", "no-command", "x");
        repeat.repeat = true;
        assert_eq!(notice(&repeat), None);
        for outcome in [
            ("injected", "injected"),
            ("injected", "native"),
            ("skipped", "no-command"),
        ] {
            let mut dry = decision(outcome.0, outcome.1, "x");
            dry.dry_run = true;
            assert_eq!(notice(&dry), None, "a dry run has no side effect: {outcome:?}");
        }
        for outcome in ["unchanged", "ignored", "error"] {
            assert_eq!(notice(&decision(outcome, "x", "y")), None, "{outcome}");
        }
        let mut bare = decision("skipped", "no-command", "x");
        bare.controller = None;
        let on_namespace = notice(&bare).unwrap().regarding;
        assert_eq!(
            (on_namespace.kind.as_str(), on_namespace.name.as_str()),
            ("Namespace", "team-a")
        );
        let long = notice(&decision("skipped", "conflict", &"é".repeat(900))).unwrap();
        assert!(long.note.len() <= NOTE_LIMIT && long.note.ends_with("..."));
    }

    fn owner(name: &str) -> Notice {
        let mut d = decision("skipped", "no-command", "no command");
        d.controller.as_mut().unwrap().name = name.into();
        notice(&d).unwrap()
    }

    const H: Duration = Duration::from_secs(3600);

    #[test]
    fn a_series_counts_and_the_least_recently_seen_is_forgotten_first() {
        let mut cache = Cache::new(2);
        let t = SystemTime::now();
        assert_eq!(cache.observe(owner("a"), t, H).0, 0);
        assert_eq!(cache.observe(owner("a"), t, H).0, 0);
        assert_eq!(cache.observe(owner("b"), t, H).0, 0);
        // a seen again: b is the least recently seen, and goes for c.
        assert_eq!(cache.observe(owner("a"), t, H).0, 0);
        assert_eq!(cache.observe(owner("c"), t, H).0, 1);
        let mut names: Vec<(String, u32)> = cache
            .series
            .values()
            .map(|s| (s.notice.regarding.name.clone(), s.count))
            .collect();
        names.sort();
        assert_eq!(names, [("a".to_string(), 3), ("c".to_string(), 1)]);
        assert_eq!(cache.order.len(), 2);
    }

    #[test]
    fn a_series_is_due_at_once_until_created_then_an_interval_after_its_last_write() {
        let mut cache = Cache::new(4);
        let now = Instant::now();
        let (_, due) = cache.observe(owner("a"), SystemTime::now(), H);
        assert!(due.unwrap() <= Instant::now());
        let series = cache.series.values_mut().next().unwrap();
        (series.written, series.last_write) = (1, Some(now));
        assert_eq!(series.due(H), None, "nothing new to write");
        let (_, due) = cache.observe(owner("a"), SystemTime::now(), H);
        assert_eq!(due, Some(now + H));
        assert_eq!(cache.unwritten().len(), 1);
    }

    #[test]
    fn a_series_with_a_request_out_is_not_due_and_its_next_write_carries_what_was_counted_meanwhile() {
        let mut cache = Cache::new(4);
        cache.observe(owner("a"), SystemTime::now(), Duration::ZERO);
        let key = cache.series.keys().next().unwrap().clone();
        let series = cache.series.get_mut(&key).unwrap();
        let (method, path, _, _) = request(series, "i");
        assert_eq!(
            (method, path.as_str()),
            (Method::POST, "/apis/events.k8s.io/v1/namespaces/team-a/events")
        );
        series.in_flight = true;
        assert_eq!(cache.soonest(Duration::ZERO), None, "one request at a time per series");
        // Counted while the create is out; the create carried count 1.
        let (_, due) = cache.observe(owner("a"), SystemTime::now(), Duration::ZERO);
        assert_eq!(due, None);
        let series = cache.series.get_mut(&key).unwrap();
        (series.in_flight, series.written, series.last_write) = (false, 1, Some(Instant::now()));
        assert!(series.due(Duration::ZERO).is_some(), "the second occurrence is due");
        let (method, _, _, body) = request(series, "i");
        assert_eq!(method, Method::PATCH);
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["series"]["count"], 2);
    }

    #[test]
    fn event_names_are_dns_subdomains_and_never_repeat() {
        let mut cache = Cache::new(1);
        let t = UNIX_EPOCH + Duration::from_nanos(0x10);
        assert_eq!(cache.name_for("train", t), "train.10");
        assert_eq!(cache.name_for("train", t), "train.11");
        let long = cache.name_for(&"a".repeat(300), t);
        assert!(long.len() <= NAME_LIMIT && long.ends_with(".12"), "{long}");
        assert_eq!(cache.name_for("Not_A-Name", t), "meshwrap.13");
        // Cut at a dash: the label may not end with it.
        let cut = cache.name_for(&format!("{}-{}", "a".repeat(249), "b".repeat(9)), t);
        assert_eq!(cut, format!("{}.14", "a".repeat(249)));
    }

    #[test]
    fn answers_are_judged_as_client_go_judges_them() {
        let reply = |status: u16| {
            Ok(Reply {
                status,
                body: bytes::Bytes::from_static(b"{\"message\":\"m\"}"),
            })
        };
        assert!(matches!(judge(true, reply(201)), Written::Ok));
        assert!(matches!(judge(false, reply(200)), Written::Ok));
        assert!(matches!(judge(false, reply(404)), Written::Gone));
        assert!(matches!(judge(true, reply(409)), Written::Taken));
        assert!(matches!(judge(true, reply(403)), Written::Refused(m) if m == "403: m"));
        assert!(matches!(judge(true, reply(404)), Written::Refused(_)));
        assert!(matches!(judge(false, reply(503)), Written::Failed(_)));
        assert!(matches!(judge(false, reply(429)), Written::Failed(_)));
        assert!(matches!(judge(true, Err("refused".into())), Written::Failed(_)));
    }
}
