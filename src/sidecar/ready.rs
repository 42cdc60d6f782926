//! The readiness wait: poll each ready URL until it has answered 2xx once.
//!
//! The poll interval trades start latency against CPU during a long wait. It
//! is a function of how long the endpoint has been in its current state:
//! 5 ms, growing by 1 ms for every 40 ms spent in the state, up to 100 ms.
//! So a sidecar that turns ready soon after a change is seen within a few
//! milliseconds, and one that stays unready costs ten polls a second.
//!
//! - **Refused** (nothing listens yet: the proxy container is still starting).
//!   The first 2 s stay at 5 ms, the window in which proxies come up; only
//!   then does the interval grow. Measured on these machines, a refused
//!   loopback connect after a sleep costs about 0.2 ms of CPU (cold caches,
//!   conntrack), so 5 ms forever would cost 4% of a core.
//! - **Answering, not ready** (503 while Envoy initialises, a garbage or
//!   hanging answer). Every poll is a real request to the proxy, so the
//!   interval grows from the first answer: 12.5 ms after 300 ms of 503s, and
//!   under 30 requests a second over the first 5 s.
//!
//! The clock restarts when the state changes, so a listener that comes up
//! after a long refusal is polled fast again while it initialises.

use std::time::Duration;

use hyper::Method;
use tokio::time::Instant;

use super::http::{self, Endpoint, Failure};
use crate::log;

/// The shortest interval, in either state.
pub const FIRST_INTERVAL: Duration = Duration::from_millis(5);
/// How long a refusing port is polled at the shortest interval.
pub const FAST_WINDOW: Duration = Duration::from_secs(2);
/// The interval grows by 1/SLOWDOWN of the time spent in a state.
const SLOWDOWN: u32 = 40;
/// The longest interval, in either state.
pub const MAX_INTERVAL: Duration = Duration::from_millis(100);

/// What the last poll of one URL saw, so logs note changes, not every poll.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Seen {
    Nothing,
    Refused,
    Answered(String),
}

/// The delay before the next poll, given whether the port refused and how
/// long the endpoint has been in that state.
fn next_delay(refused: bool, in_state: Duration) -> Duration {
    let grace = if refused { FAST_WINDOW } else { Duration::ZERO };
    (FIRST_INTERVAL + in_state.saturating_sub(grace) / SLOWDOWN).min(MAX_INTERVAL)
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
    loop {
        polls += 1;
        let started = Instant::now();
        // While the port refuses, a bare connect says so at a fraction of a request's cost.
        let result = if seen == Seen::Refused && endpoint.refuses() {
            Err(Failure::Refused)
        } else {
            http::request(endpoint, Method::GET, request_timeout).await
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
            }
            seen = now;
        }
        let delay = next_delay(seen == Seen::Refused, since.elapsed());
        // A poll that took long (a hanging endpoint) already waited; never poll
        // back-to-back, though, so a fast-failing answer cannot spin the CPU.
        let waited = started.elapsed();
        tokio::time::sleep(delay.saturating_sub(waited).max(Duration::from_millis(1))).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Polls sent within `span` to a sidecar that stays in one state, and the last interval.
    fn polls_within(refused: bool, span: Duration) -> (u32, Duration) {
        let (mut t, mut delay, mut polls) = (Duration::ZERO, Duration::ZERO, 0);
        while t < span {
            delay = next_delay(refused, t);
            t += delay;
            polls += 1;
        }
        (polls, delay)
    }

    #[test]
    fn a_refusing_port_is_polled_fast_then_gently() {
        assert_eq!(next_delay(true, Duration::from_millis(1999)), FIRST_INTERVAL);
        assert_eq!(polls_within(true, FAST_WINDOW).0, 400);
        let (ten, _) = polls_within(true, Duration::from_secs(10));
        let (sixty, delay) = polls_within(true, Duration::from_secs(60));
        assert_eq!(delay, MAX_INTERVAL);
        // Once the interval has grown: ten polls a second.
        assert!(sixty - ten <= 50 * 10 + 1, "{} polls from 10 s to 60 s", sixty - ten);
    }

    #[test]
    fn answering_polls_start_fast_and_stay_under_40_a_second() {
        assert_eq!(next_delay(false, Duration::ZERO), FIRST_INTERVAL);
        // A 503 phase of 300 ms is still seen within 12.5 ms of its end.
        assert!(next_delay(false, Duration::from_millis(300)) <= Duration::from_micros(12_500));
        let (polls, delay) = polls_within(false, Duration::from_secs(5));
        assert_eq!(delay, MAX_INTERVAL);
        assert!(polls <= 5 * 40, "{polls} polls in 5 s");
    }
}
