//! The readiness wait: poll each ready URL until it has answered 2xx once.
//!
//! Two states of a sidecar that is not ready cost very different amounts to
//! poll. While nothing listens, a connect to a loopback port is refused inside
//! one syscall, so that state is polled every few milliseconds: the command
//! starts within a few milliseconds of the listener coming up. Once the
//! listener answers (503 while Envoy initialises, a garbage or hanging answer),
//! every poll is a real request to the proxy, so the interval backs off gently
//! to a cap, keeping a long wait well under 40 requests a second.

use std::time::Duration;

use hyper::Method;
use tokio::time::Instant;

use super::http::{self, Endpoint, Failure};
use crate::log;

/// How often a port that refuses connections is tried again.
pub const REFUSED_INTERVAL: Duration = Duration::from_millis(5);
/// First and longest interval while the listener answers "not ready".
pub const ANSWERING_FIRST: Duration = Duration::from_millis(5);
pub const ANSWERING_MAX: Duration = Duration::from_millis(50);

/// What the last poll of one URL saw, so logs note changes, not every poll.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Seen {
    Nothing,
    Refused,
    Answered(String),
}

/// The delay before the next poll, given what this poll saw and the last delay.
fn next_delay(refused: bool, previous: Duration) -> Duration {
    if refused {
        REFUSED_INTERVAL
    } else {
        (previous.max(ANSWERING_FIRST) * 3 / 2).min(ANSWERING_MAX)
    }
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
    let mut delay = Duration::ZERO;
    let mut seen = Seen::Nothing;
    loop {
        polls += 1;
        let started = Instant::now();
        let result = http::request(endpoint, Method::GET, request_timeout).await;
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
            seen = now;
        }
        delay = next_delay(seen == Seen::Refused, delay);
        // A poll that took long (a hanging endpoint) already waited; never poll
        // back-to-back, though, so a fast-failing answer cannot spin the CPU.
        let waited = started.elapsed();
        tokio::time::sleep(delay.saturating_sub(waited).max(Duration::from_millis(1))).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_polls_stay_fast() {
        assert_eq!(next_delay(true, ANSWERING_MAX), REFUSED_INTERVAL);
    }

    #[test]
    fn answering_polls_back_off_to_a_cap_under_40_per_second() {
        let mut delay = Duration::ZERO;
        let mut elapsed = Duration::ZERO;
        let mut polls = 0;
        while elapsed < Duration::from_secs(5) {
            delay = next_delay(false, delay);
            elapsed += delay;
            polls += 1;
        }
        assert_eq!(delay, ANSWERING_MAX);
        assert!(polls <= 5 * 40, "{polls} polls in 5 s");
    }
}
