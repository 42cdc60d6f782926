//! The readiness wait: poll each ready URL until it has answered 2xx once.
//!
//! The poll interval trades start latency against CPU during a long wait. It
//! is a function of how long the endpoint has been in its current state
//! (refused, or answering but not ready): 10 ms, growing by 1 ms for every
//! 80 ms spent in the state, up to 90 ms. An Istio proxy typically turns
//! ready 1-3 s after it starts (it waits for istiod's configuration); there
//! the interval is 22-48 ms, so the command starts about half an interval
//! after the sidecar turns ready, while a sidecar that stays unready costs
//! about 160 polls in the first 5 s and eleven a second after. The benchmark
//! chose these numbers from the measured trade-off (BENCHMARKS.md, which
//! has the figures): a steeper start costs fewer polls but more latency in
//! the typical window; a lower longest interval cuts the latency of a
//! sidecar that takes 8-12 s but costs every long wait more CPU. A cheaper
//! poll paid for the denser schedule (it was 8 ms + t/48, at most 100 ms).
//!
//! What a poll costs is its wake-ups and the kernel's loopback TCP, not
//! meshwrap's own instructions: after a sleep the caches are cold
//! (BENCHMARKS.md's notes measure a poll against a bare wake-up and a bare
//! request in the same run). So the wait has no runtime: one loop sleeps in
//! one `ppoll` on every URL's socket, the caller's signalfd and the next
//! deadline (the earliest of every URL's next poll and request timeout, and
//! the caller's `until`: one timer for every URL), and each poll is as lean
//! as `probe` can make it:
//! - **Refused** (nothing listens yet: the proxy container is still
//!   starting). Two `connect`s on a socket kept from the last refusal, and
//!   the one wake-up of the sleep.
//! - **Answering, not ready** (503 while Envoy initialises). The connection
//!   is kept and reused while the sidecar keeps it open, so a poll is one
//!   `send` and one `recv`, and the two wake-ups: the sleep's and the answer's.
//!
//! The clock restarts when the state changes, so a listener that comes up
//! after a long refusal is polled fast again while it initialises.
//!
//! Each URL's last answer is kept on a [`Board`], read by the progress lines
//! and the timeout error; it is written only when the answer changes, so a
//! poll costs nothing more for it.
//!
//! `--poll frugal` is the other profile, for nodes that run thousands of
//! short pods, where the CPU of every wait adds up: about as few polls over
//! a 5 s wait as linkerd-await's fixed 1 s backoff, placed where proxies turn
//! ready. One poll at once (a sidecar that is already up costs nothing more),
//! none until 1 s, every 400 ms until 3 s (the typical Istio start), then
//! every second, never slower than that backoff. Its clock is the whole wait,
//! not the state: a change of state does not buy more polls. The benchmark
//! chose the numbers from the same trade-off plot as the fast profile's.

use std::cell::{Cell, RefCell};
use std::os::fd::{OwnedFd, RawFd};
use std::time::{Duration, Instant};

use super::http::{Endpoint, Failure};
use super::probe::{Probe, sleep_on};
use crate::log;

/// How the readiness wait spends its polls (`--poll`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Profile {
    /// Notice readiness within tens of milliseconds (the default).
    #[default]
    Fast,
    /// Spend about as many polls as a 1 s backoff, placed where proxies turn ready.
    Frugal,
}

impl Profile {
    /// How long after a poll that took `took` the next one is due, the poll
    /// having ended `in_state` after the endpoint entered its state and
    /// `in_wait` after the wait began. The fast interval counts from the
    /// poll's start, so a poll that took long (a hanging endpoint) has
    /// already waited; the frugal grid counts from the wait's start, so it
    /// is not shifted (taking `took` off it again put each grid poll early
    /// by as much, and a timer that fires on time then polled twice: just
    /// before the grid point and just after). Never back-to-back, so a
    /// fast-failing answer cannot spin the CPU.
    fn wait_after(self, took: Duration, in_state: Duration, in_wait: Duration) -> Duration {
        let wait = match self {
            Profile::Fast => next_delay(in_state).saturating_sub(took),
            Profile::Frugal => frugal_delay(in_wait),
        };
        wait.max(Duration::from_millis(1))
    }
}

/// The fast schedule: the first interval in ms, the slowdown, the longest
/// interval in ms. The benchmark compares schedules on the real binary by
/// building it with `MESHWRAP_BENCH_SCHEDULE="FIRST,SLOWDOWN,MAX"` set;
/// nothing reads it at run time.
const SCHEDULE: [u64; 3] = match option_env!("MESHWRAP_BENCH_SCHEDULE") {
    Some(text) => numbers(text.as_bytes()),
    None => [10, 80, 90],
};

/// The frugal schedule, in ms since the wait began: polls at 0, then from
/// FROM every STEP until UNTIL, then every LATER. The benchmark builds
/// candidates with `MESHWRAP_BENCH_FRUGAL="FROM,STEP,UNTIL,LATER"`.
const FRUGAL: [u64; 4] = match option_env!("MESHWRAP_BENCH_FRUGAL") {
    Some(text) => numbers(text.as_bytes()),
    None => [1000, 400, 3000, 1000],
};
/// The shortest interval.
const FIRST_INTERVAL: Duration = Duration::from_millis(SCHEDULE[0]);
/// The interval grows by 1/SLOWDOWN of the time spent in a state.
const SLOWDOWN: u32 = SCHEDULE[1] as u32;
/// The longest interval.
const MAX_INTERVAL: Duration = Duration::from_millis(SCHEDULE[2]);

/// `"A,B,C"` as N numbers above 0 but the first, at compile time (a
/// malformed value fails the build).
const fn numbers<const N: usize>(text: &[u8]) -> [u64; N] {
    const BAD: &str = "MESHWRAP_BENCH_SCHEDULE is FIRST_MS,SLOWDOWN,MAX_MS and MESHWRAP_BENCH_FRUGAL is FROM_MS,STEP_MS,UNTIL_MS,LATER_MS";
    let (mut out, mut n, mut i) = ([0u64; N], 0, 0);
    while i < text.len() {
        match text[i] {
            b',' if n + 1 < N => n += 1,
            c @ b'0'..=b'9' => out[n] = out[n] * 10 + (c - b'0') as u64,
            _ => panic!("{}", BAD),
        }
        i += 1;
    }
    let mut k = 1;
    while k < N {
        assert!(out[k] > 0, "{}", BAD);
        k += 1;
    }
    assert!(n + 1 == N, "{}", BAD);
    out
}

/// What the last poll of one URL saw, so logs note changes, not every poll.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Seen {
    Nothing,
    Refused,
    /// An answer that is not 2xx.
    Status(u16),
    /// No answer: why, and whether the sidecar took the connection (it closed
    /// it or garbled the answer).
    Failed(String, bool),
}

impl Seen {
    /// Nothing listens: the state whose clock runs apart from every answer's.
    fn refused(&self) -> bool {
        *self == Seen::Refused
    }

    /// Something listens and took the connection.
    fn answered(&self) -> bool {
        matches!(self, Seen::Status(_) | Seen::Failed(_, true))
    }
}

impl std::fmt::Display for Seen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Seen::Nothing => Ok(()),
            Seen::Refused => f.write_str("connection refused"),
            Seen::Status(status) => write!(f, "HTTP {status}"),
            Seen::Failed(why, _) => f.write_str(why),
        }
    }
}

/// The delay before the next poll, given how long the endpoint has been in its state.
fn next_delay(in_state: Duration) -> Duration {
    (FIRST_INTERVAL + in_state / SLOWDOWN).min(MAX_INTERVAL)
}

/// The frugal delay before the next poll, `in_wait` after the wait began:
/// on a grid (FROM, FROM + STEP, ...) until UNTIL, then (UNTIL + LATER, ...),
/// so a slow poll does not shift the polls after it.
fn frugal_delay(in_wait: Duration) -> Duration {
    let [from, step, until, later] = FRUGAL.map(Duration::from_millis);
    let to_next = |start: Duration, step: Duration| {
        let into_step = (in_wait - start).as_nanos() % step.as_nanos();
        step - Duration::from_nanos(into_step as u64)
    };
    if in_wait < from {
        from - in_wait
    } else if in_wait < until {
        to_next(from, step)
    } else {
        to_next(until, later)
    }
}

/// What each ready URL last answered, for the progress lines and the
/// timeout error. One thread runs every poll, so plain cells do.
#[derive(Default)]
pub struct Board {
    /// Per URL, in order: its last answer, or "ready".
    last: Vec<RefCell<String>>,
    /// Some URL answered something other than a refusal.
    answered: Cell<bool>,
    /// Per URL: since when it has answered 404 without a break.
    not_found_since: Vec<Cell<Option<Instant>>>,
}

impl Board {
    pub fn new(endpoints: usize) -> Board {
        Board {
            last: (0..endpoints).map(|_| RefCell::new("no answer yet".into())).collect(),
            answered: Cell::new(false),
            not_found_since: (0..endpoints).map(|_| Cell::new(None)).collect(),
        }
    }

    /// The URLs that have answered nothing but 404 for at least `for_at_least`.
    pub fn not_found<'e>(&self, endpoints: &'e [Endpoint], for_at_least: Duration) -> Vec<&'e str> {
        let now = Instant::now();
        endpoints
            .iter()
            .zip(&self.not_found_since)
            .filter(|(_, since)| since.get().is_some_and(|at| now.duration_since(at) >= for_at_least))
            .map(|(e, _)| e.url.as_str())
            .collect()
    }

    /// `URL (last: ANSWER)` for every URL not ready yet, comma-separated.
    pub fn pending(&self, endpoints: &[Endpoint]) -> String {
        let lines: Vec<String> = endpoints
            .iter()
            .zip(&self.last)
            .filter(|(_, last)| *last.borrow() != "ready")
            .map(|(e, last)| format!("{} (last: {})", e.url, last.borrow()))
            .collect();
        lines.join(", ")
    }

    /// Whether any sidecar answered anything at all during the wait.
    pub fn answered(&self) -> bool {
        self.answered.get()
    }
}

/// What ended a stretch of the wait ([`Wait::run`]).
#[derive(Debug, PartialEq, Eq)]
pub enum Woke {
    /// Every URL has answered 2xx once, after this many requests in all.
    Ready(u32),
    /// The caller's `until` came.
    Until,
    /// The caller's descriptor is readable (a signal is queued).
    Readable,
}

/// The readiness wait: every ready URL polled on the profile's schedule from
/// one loop, which sleeps in one `ppoll` until the next poll is due, an
/// answer arrives, a request runs out of time, or the caller's descriptor
/// turns readable. It never returns on its own otherwise: the caller
/// bounds it (`until`).
pub struct Wait<'e> {
    urls: Vec<Url<'e>>,
    request_timeout: Duration,
    profile: Profile,
    begun: Instant,
    /// The poll set, kept between sleeps: the caller's descriptor first,
    /// then one entry for each URL that waits on one (`owners` says which).
    fds: Vec<libc::pollfd>,
    owners: Vec<usize>,
}

/// Sockets a finished wait leaves open (the connections the sidecars kept),
/// closed when this is dropped: after the command has started, since closing
/// a TCP connection sends a FIN through the loopback at the closer's cost
/// (about 12 us measured), which a start need not wait for.
#[derive(Default)]
pub struct Connections {
    /// Held only to be closed when dropped.
    _sockets: Vec<OwnedFd>,
}

/// One ready URL's place in the wait.
struct Url<'e> {
    endpoint: &'e Endpoint,
    probe: Probe<'e>,
    seen: Seen,
    /// When its current state began (the fast profile's clock).
    since: Instant,
    /// When the poll under way began.
    started: Instant,
    /// When the next poll is due; `None` while one is under way or once ready.
    due: Option<Instant>,
    polls: u32,
    ready: bool,
}

impl<'e> Wait<'e> {
    /// A wait whose first poll of every URL is due at once.
    pub fn new(endpoints: &'e [Endpoint], request_timeout: Duration, profile: Profile) -> Wait<'e> {
        let begun = Instant::now();
        let urls = endpoints
            .iter()
            .map(|endpoint| Url {
                endpoint,
                probe: Probe::new(endpoint),
                seen: Seen::Nothing,
                since: begun,
                started: begun,
                due: Some(begun),
                polls: 0,
                ready: false,
            })
            .collect();
        Wait {
            urls,
            request_timeout,
            profile,
            begun,
            fds: Vec::with_capacity(endpoints.len() + 1),
            owners: Vec::with_capacity(endpoints.len()),
        }
    }

    /// Polls until every URL has answered 2xx once, `until` comes, or
    /// `wake` turns readable; may be called again after the last two.
    pub fn run(&mut self, board: &Board, until: Instant, wake: RawFd) -> Woke {
        loop {
            if self.urls.iter().all(|u| u.ready) {
                return Woke::Ready(self.urls.iter().map(|u| u.polls).sum());
            }
            let now = Instant::now();
            // Before starting a poll that is due as well: its answer would
            // come after `until` (`--timeout`, or a progress line first).
            if now >= until {
                return Woke::Until;
            }
            self.start_due(board, now);
            if self.urls.iter().all(|u| u.ready) {
                continue;
            }
            let next = self.urls.iter().filter_map(Url::next_event).fold(until, Instant::min);
            self.fill(wake);
            sleep_on(&mut self.fds, next.saturating_duration_since(now));
            if self.fds[0].revents != 0 {
                return Woke::Readable;
            }
            let now = Instant::now();
            for k in 1..self.fds.len() {
                if self.fds[k].revents != 0 {
                    let i = self.owners[k - 1];
                    if let Some(result) = self.urls[i].probe.ready() {
                        self.settle(i, result, now, board);
                    }
                }
            }
            for i in 0..self.urls.len() {
                if self.urls[i].probe.deadline().is_some_and(|d| d <= now) {
                    let result = self.urls[i].probe.time_out();
                    self.settle(i, result, now, board);
                }
            }
        }
    }

    /// The connections the wait leaves open, to be closed later.
    pub fn into_connections(self) -> Connections {
        Connections {
            _sockets: self.urls.into_iter().flat_map(|u| u.probe.into_sockets()).collect(),
        }
    }

    /// Starts every poll that is due.
    fn start_due(&mut self, board: &Board, now: Instant) {
        for i in 0..self.urls.len() {
            let url = &mut self.urls[i];
            if url.due.is_none_or(|due| due > now) {
                continue;
            }
            url.due = None;
            url.polls += 1;
            url.started = now;
            if let Some(result) = url.probe.start(later(now, self.request_timeout)) {
                self.settle(i, result, now, board);
            }
        }
    }

    /// The poll set: `wake`, then what each URL waits on.
    fn fill(&mut self, wake: RawFd) {
        let entry = |fd, events| libc::pollfd { fd, events, revents: 0 };
        self.fds.clear();
        self.owners.clear();
        self.fds.push(entry(wake, libc::POLLIN));
        for (i, url) in self.urls.iter().enumerate() {
            if let Some((fd, events)) = url.probe.interest() {
                self.fds.push(entry(fd, events));
                self.owners.push(i);
            }
        }
    }

    /// One URL's answer (or its absence): done if 2xx, else noted (the log
    /// and the board hear of changes only) and the next poll scheduled.
    fn settle(&mut self, i: usize, result: Result<u16, Failure>, now: Instant, board: &Board) {
        let url = &mut self.urls[i];
        let now_seen = match result {
            Ok(status) if (200..300).contains(&status) => {
                log!(
                    Debug,
                    "ready url answered",
                    url = &url.endpoint.url,
                    status = status,
                    polls = url.polls
                );
                *board.last[i].borrow_mut() = "ready".into();
                board.answered.set(true);
                url.ready = true;
                return;
            }
            Ok(status) => Seen::Status(status),
            Err(Failure::Refused) => Seen::Refused,
            Err(failure) => Seen::Failed(
                failure.to_string(),
                matches!(failure, Failure::Closed | Failure::Garbage(_)),
            ),
        };
        let since = &board.not_found_since[i];
        if now_seen != Seen::Status(404) {
            since.set(None);
        } else if since.get().is_none() {
            since.set(Some(now));
        }
        // An answer, or a connection that was taken and closed or garbled.
        if now_seen.answered() {
            board.answered.set(true);
        }
        if now_seen != url.seen {
            let what = now_seen.to_string();
            log!(Debug, "sidecar not ready yet", url = &url.endpoint.url, saw = &what);
            *board.last[i].borrow_mut() = what;
            if url.seen == Seen::Nothing || url.seen.refused() != now_seen.refused() {
                url.since = url.started;
                // A host name is looked up again once per change of state, not per poll.
                if url.seen != Seen::Nothing {
                    url.probe.forget_addresses();
                }
            }
            url.seen = now_seen;
        }
        let wait = self
            .profile
            .wait_after(now - url.started, now - url.since, now - self.begun);
        url.due = Some(later(now, wait));
    }
}

impl Url<'_> {
    /// When this URL needs the loop next: its next poll, or its request's deadline.
    fn next_event(&self) -> Option<Instant> {
        self.due.or_else(|| self.probe.deadline())
    }
}

/// `after` from `now`; a span too long for the clock means no bound in practice.
fn later(now: Instant, after: Duration) -> Instant {
    now.checked_add(after)
        .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 3600))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Polls sent within `span` to a sidecar that stays in one state, and the last interval.
    fn polls_within(span: Duration) -> (u32, Duration) {
        poll_times(Profile::Fast, span).1
    }

    /// When `profile` polls within `span` (ms) of a wait in one state, each
    /// poll taking no time; the number of polls and the last interval.
    fn poll_times(profile: Profile, span: Duration) -> (Vec<u64>, (u32, Duration)) {
        poll_times_taking(profile, span, Duration::ZERO)
    }

    /// The same with polls that take `took`, and a timer that fires on time.
    fn poll_times_taking(profile: Profile, span: Duration, took: Duration) -> (Vec<u64>, (u32, Duration)) {
        let (mut t, mut interval, mut at) = (Duration::ZERO, Duration::ZERO, Vec::new());
        while t < span {
            at.push(t.as_millis() as u64);
            let end = t + took;
            let next = end + profile.wait_after(took, end, end);
            (interval, t) = (next - t, next);
        }
        let polls = at.len() as u32;
        (at, (polls, interval))
    }

    #[test]
    fn frugal_polls_at_once_then_where_proxies_turn_ready_then_each_second() {
        let (at, _) = poll_times(Profile::Frugal, Duration::from_secs(5));
        assert_eq!(at, [0, 1000, 1400, 1800, 2200, 2600, 3000, 4000]);
        // Never slower than a 1 s backoff, later on.
        assert_eq!(frugal_delay(Duration::from_secs(60)), Duration::from_secs(1));
        // On the grid: a poll that ended late does not shift the next one.
        assert_eq!(frugal_delay(Duration::from_millis(1450)), Duration::from_millis(350));
        assert_eq!(frugal_delay(Duration::from_millis(3)), Duration::from_millis(997));
        // Polls that take time stay on the grid, once per grid point.
        let (at, _) = poll_times_taking(Profile::Frugal, Duration::from_secs(5), Duration::from_millis(7));
        assert_eq!(at, [0, 1000, 1400, 1800, 2200, 2600, 3000, 4000]);
    }

    #[test]
    fn a_fast_interval_counts_from_the_polls_start() {
        let (at, _) = poll_times_taking(Profile::Fast, Duration::from_millis(40), Duration::from_millis(3));
        assert_eq!(at, [0, 10, 20, 30]);
        // A hanging poll (cut at its request timeout) is followed after a millisecond.
        let took = Duration::from_secs(1);
        assert_eq!(Profile::Fast.wait_after(took, took, took), Duration::from_millis(1));
    }

    #[test]
    fn frugal_spends_a_sixteenth_of_the_fast_profiles_polls() {
        let (_, (frugal, _)) = poll_times(Profile::Frugal, Duration::from_secs(5));
        let (fast, _) = polls_within(Duration::from_secs(5));
        assert!(frugal * 16 <= fast, "{frugal} frugal polls, {fast} fast ones");
        // Its median latency for a flip in 1-3 s: at most half a 1 s backoff's 500 ms.
        let (at, _) = poll_times(Profile::Frugal, Duration::from_secs(4));
        let mut waits: Vec<u64> = (1000..3000)
            .map(|flip| at.iter().find(|&&p| p >= flip).unwrap() - flip)
            .collect();
        waits.sort_unstable();
        assert!(waits[waits.len() / 2] <= 250, "median {} ms", waits[waits.len() / 2]);
    }

    #[test]
    fn schedules_are_read_as_numbers() {
        assert_eq!(numbers::<3>(b"8,48,100"), [8, 48, 100]);
        assert_eq!(numbers::<4>(b"0,1,2,3"), [0, 1, 2, 3]);
    }

    #[test]
    fn polls_start_fast_and_slow_down_with_the_wait() {
        assert_eq!(next_delay(Duration::ZERO), FIRST_INTERVAL);
        // A state that lasted 2 s (the typical proxy start) is left within
        // 40 ms of its end: the median latency there is under 20 ms.
        assert!(next_delay(Duration::from_secs(2)) <= Duration::from_millis(40));
        // 160 polls over the first 5 s: within the benchmark's CPU budget, and
        // far under 40 requests a second for a sidecar that answers 503.
        let (polls, delay) = polls_within(Duration::from_secs(5));
        assert_eq!(polls, 160);
        assert!(delay < MAX_INTERVAL, "the longest interval from {delay:?} at 5 s");
        // Then eleven polls a second (a few more until it reaches 90 ms at 6.4 s).
        let (sixty, _) = polls_within(Duration::from_secs(60));
        assert!(
            sixty - polls <= 55 * 1000 / 90 + 5,
            "{} polls from 5 s to 60 s",
            sixty - polls
        );
    }
}
