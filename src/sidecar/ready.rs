//! The readiness wait: poll each ready URL until it has answered 2xx once.
//!
//! The poll interval trades start latency against CPU during a long wait. It
//! is a function of how long the endpoint has been in its current state
//! (refused, or answering but not ready): 8 ms, growing by 1 ms for every
//! 48 ms spent in the state, up to 100 ms. An Istio proxy typically turns
//! ready 1-3 s after it starts (it waits for istiod's configuration); there
//! the interval is 29-71 ms, so the command starts about 25 ms (median)
//! after the sidecar turns ready, while a sidecar that stays unready costs
//! about 130 polls in the first 5 s and ten a second after. The benchmark
//! chose these numbers from the measured trade-off (BENCHMARKS.md): a
//! steeper start (5 ms + t/32) costs fewer polls but 30-35 ms in the
//! typical window; a lower longest interval (50 ms) halves the latency of
//! a sidecar that takes 8-12 s but doubles the CPU of every long wait.
//!
//! CPU, not syscalls, is what a poll costs on these machines: after a 5 ms
//! sleep the caches are cold, and a refused loopback connect that takes 7 us
//! in a tight loop takes 100-170 us (measured by the benchmark). So polls are
//! few rather than cheap, and each is as lean as it can be:
//! - **Refused** (nothing listens yet: the proxy container is still starting).
//!   A bare non-blocking connect says so in four syscalls, outside the
//!   reactor.
//! - **Answering, not ready** (503 while Envoy initialises). The connection
//!   is kept and reused while the sidecar keeps it open, so a poll is one
//!   write and one read, not a connect and an HTTP handshake.
//!
//! The clock restarts when the state changes, so a listener that comes up
//! after a long refusal is polled fast again while it initialises.

use std::time::Duration;

use tokio::time::Instant;

use super::http::{self, Endpoint, Failure};
use super::timer::Timer;
use crate::log;

/// The schedule: the first interval in ms, the slowdown, the longest
/// interval in ms. The benchmark compares schedules on the real binary by
/// building it with `MESHWRAP_BENCH_SCHEDULE="FIRST,SLOWDOWN,MAX"` set;
/// nothing reads it at run time.
const SCHEDULE: [u64; 3] = match option_env!("MESHWRAP_BENCH_SCHEDULE") {
    Some(text) => three_numbers(text.as_bytes()),
    None => [8, 48, 100],
};
/// The shortest interval.
const FIRST_INTERVAL: Duration = Duration::from_millis(SCHEDULE[0]);
/// The interval grows by 1/SLOWDOWN of the time spent in a state.
const SLOWDOWN: u32 = SCHEDULE[1] as u32;
/// The longest interval.
const MAX_INTERVAL: Duration = Duration::from_millis(SCHEDULE[2]);

/// `"A,B,C"` as three numbers, at compile time (a malformed value fails the build).
const fn three_numbers(text: &[u8]) -> [u64; 3] {
    let (mut out, mut n, mut i) = ([0u64; 3], 0, 0);
    while i < text.len() {
        match text[i] {
            b',' => n += 1,
            c @ b'0'..=b'9' => out[n] = out[n] * 10 + (c - b'0') as u64,
            _ => panic!("MESHWRAP_BENCH_SCHEDULE is three numbers: FIRST_MS,SLOWDOWN,MAX_MS"),
        }
        i += 1;
    }
    assert!(
        n == 2 && out[1] > 0,
        "MESHWRAP_BENCH_SCHEDULE is three numbers: FIRST_MS,SLOWDOWN,MAX_MS"
    );
    out
}

/// What the last poll of one URL saw, so logs note changes, not every poll.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Seen {
    Nothing,
    Refused,
    Answered(String),
}

/// The delay before the next poll, given how long the endpoint has been in its state.
fn next_delay(in_state: Duration) -> Duration {
    (FIRST_INTERVAL + in_state / SLOWDOWN).min(MAX_INTERVAL)
}

/// Polls every endpoint until each has answered 2xx once; returns the number
/// of requests sent. Never returns otherwise: the caller bounds it.
pub async fn wait_all(endpoints: &[Endpoint], request_timeout: Duration) -> u32 {
    super::join_all(endpoints.iter().map(|e| wait_one(e, request_timeout)))
        .await
        .into_iter()
        .sum()
}

async fn wait_one(endpoint: &Endpoint, request_timeout: Duration) -> u32 {
    let mut polls = 0;
    let mut seen = Seen::Nothing;
    let mut since = Instant::now();
    let mut client = http::Client::new(endpoint);
    // Made at the first sleep: most waits end at their first poll.
    let mut timer: Option<Timer> = None;
    loop {
        polls += 1;
        let started = Instant::now();
        // While the port refuses, a bare connect says so at a fraction of a request's cost.
        let result = if seen == Seen::Refused && endpoint.refuses() {
            Err(Failure::Refused)
        } else {
            client.get(request_timeout).await
        };
        let now = match &result {
            Ok(status) if (200..300).contains(status) => {
                log!(
                    Debug,
                    "ready url answered",
                    url = &endpoint.url,
                    status = *status,
                    polls = polls
                );
                return polls;
            }
            Ok(status) => Seen::Answered(format!("HTTP {status}")),
            Err(Failure::Refused) => Seen::Refused,
            Err(failure) => Seen::Answered(failure.to_string()),
        };
        if now != seen {
            let what = match &now {
                Seen::Refused => "connection refused".to_string(),
                Seen::Answered(what) => what.clone(),
                Seen::Nothing => String::new(),
            };
            log!(Debug, "sidecar not ready yet", url = &endpoint.url, saw = &what);
            if std::mem::discriminant(&now) != std::mem::discriminant(&seen) {
                since = started;
                // A host name is looked up again once per change of state, not per poll.
                if seen != Seen::Nothing {
                    client.forget_addresses();
                }
            }
            seen = now;
        }
        let delay = next_delay(since.elapsed());
        // A poll that took long (a hanging endpoint) already waited; never poll
        // back-to-back, though, so a fast-failing answer cannot spin the CPU.
        let waited = started.elapsed();
        timer
            .get_or_insert_with(Timer::new)
            .sleep(delay.saturating_sub(waited).max(Duration::from_millis(1)))
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Polls sent within `span` to a sidecar that stays in one state, and the last interval.
    fn polls_within(span: Duration) -> (u32, Duration) {
        let (mut t, mut delay, mut polls) = (Duration::ZERO, Duration::ZERO, 0);
        while t < span {
            delay = next_delay(t);
            t += delay;
            polls += 1;
        }
        (polls, delay)
    }

    #[test]
    fn polls_start_fast_and_slow_down_with_the_wait() {
        assert_eq!(next_delay(Duration::ZERO), FIRST_INTERVAL);
        // A state that lasted 2 s (the typical proxy start) is left within 50 ms of its end.
        assert!(next_delay(Duration::from_secs(2)) <= Duration::from_millis(50));
        // 129 polls over the first 5 s: within the benchmark's CPU budget, and
        // far under 40 requests a second for a sidecar that answers 503.
        let (polls, delay) = polls_within(Duration::from_secs(5));
        assert_eq!((polls, delay), (129, MAX_INTERVAL));
        // Once the interval has grown: ten polls a second.
        let (sixty, _) = polls_within(Duration::from_secs(60));
        assert!(sixty - polls <= 55 * 10 + 1, "{} polls from 5 s to 60 s", sixty - polls);
    }
}
