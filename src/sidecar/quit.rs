//! Quitting sidecars: POST each distinct quit URL once, all in parallel,
//! under one total budget (`--quit-timeout`).
//!
//! The contract: once a quit request has been written in full, the sidecar
//! may have taken it, and it is never sent again, whatever follows: an
//! answer of any status, a close or a reset before any answer, something
//! that is not HTTP, or no answer in time. A POST is retried, with a short
//! backoff, only when it provably never reached the sidecar
//! ([`Failure::Unsent`]): the connection was refused or could not be made
//! in time, or the request could not be written in full. Each attempt's
//! connect is bounded by the smaller of `--request-timeout` and what is
//! left of the budget, so a black-holed host cannot hold a quit past it;
//! the first attempt's connect gets at least [`FIRST_CONNECT`], so even
//! `--quit-timeout 1ns` sends the quit (a loopback connect takes
//! microseconds).
//!
//! After the request went out in full:
//! - 2xx: quit.
//! - 3xx, 4xx (logged with its likely cause), 5xx, or not HTTP: an error.
//! - closed or reset before any answer: the sidecar may be exiting on the
//!   quit (the Cloud SQL proxy's preset says it does). Its port is watched
//!   with bare connects (no request) until it refuses, so it exited, or
//!   until the budget ends: then a warning, since it may have taken the quit.
//! - no answer: waited for until the budget runs out, then a warning.
//!
//! The races this guards against: a sidecar that exits as it takes the quit
//! closes the connection first and its listener a moment later, so one
//! refused connect is awaited, not assumed; a sidecar that acted on a quit
//! and then failed to answer it is not told twice (RFC 9110 9.2.2: a client
//! does not retry a non-idempotent request on its own once it was sent).
//!
//! One exception to the retries: after a wait in which no sidecar answered
//! anything (every poll refused), meshwrap is stopping because the sidecar
//! never came (a signal, or `--timeout`), and it is most likely not there at
//! all. Then each URL gets one attempt: "once" still holds (fewer sends can
//! only keep it), and a pod being deleted does not spend `--quit-timeout`
//! retrying a port that has never listened.
//!
//! A port that refuses after the sidecar was seen ready means the sidecar
//! has exited: there is nothing left to quit, and nothing is retried.

use std::time::Duration;

use tokio::time::Instant;

use super::http::{self, Endpoint, Failure, Method};
use super::preset::Preset;
use crate::log;

const RETRY_FIRST: Duration = Duration::from_millis(20);
const RETRY_MAX: Duration = Duration::from_millis(250);

/// The least the first attempt's connect is given, whatever is left of the
/// budget: the quit goes out at least once.
const FIRST_CONNECT: Duration = Duration::from_millis(100);

/// A quit URL, and the preset it came from (for that sidecar's quirks).
#[derive(Clone)]
pub struct Target {
    pub endpoint: Endpoint,
    pub preset: Option<&'static Preset>,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.endpoint.url, self.preset.map_or("url", |p| p.name))
    }
}

/// How one quit URL ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The sidecar answered 2xx.
    Quit(u16),
    /// It was seen ready before and its port now refuses: it is gone.
    AlreadyGone,
    /// It closed the connection without answering and exited (its preset
    /// does so, or its port refused once the quit went out).
    ClosedAsItExited,
    /// It answered something that is not 2xx.
    Rejected,
    /// The quit went out and no answer came within the budget (or the
    /// connection was closed unanswered and the sidecar still listens).
    Unanswered,
    /// The budget ran out before a quit could be sent.
    GaveUp,
}

/// POSTs every URL once, concurrently, within `budget` in total.
/// `seen_ready`: the sidecar answered ready during the wait; `once`: it
/// answered nothing at all, so each URL gets one attempt, no retries.
pub async fn quit_all(
    targets: &[Target],
    budget: Duration,
    request_timeout: Duration,
    (seen_ready, once): (bool, bool),
    verify: bool,
) -> Vec<Outcome> {
    let deadline = deadline_after(budget);
    super::join_all(targets.iter().map(|t| async move {
        let outcome = quit_one(t, budget, deadline, request_timeout, (seen_ready, once)).await;
        if verify && matches!(outcome, Outcome::Quit(_) | Outcome::ClosedAsItExited) {
            verify_gone(&t.endpoint, deadline).await;
        }
        outcome
    }))
    .await
}

/// `budget` from now; a budget too large for the clock means no bound in practice.
fn deadline_after(budget: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(budget)
        .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 3600))
}

/// How long an attempt's connect may take: `--request-timeout`, cut to what
/// is left of the budget (the first attempt's to no less than
/// [`FIRST_CONNECT`]).
fn connect_bound(request_timeout: Duration, remaining: Duration, attempt: u32) -> Duration {
    let floor = if attempt == 1 { FIRST_CONNECT } else { Duration::ZERO };
    request_timeout.min(remaining.max(floor))
}

async fn quit_one(
    target: &Target,
    budget: Duration,
    deadline: Instant,
    request_timeout: Duration,
    (seen_ready, once): (bool, bool),
) -> Outcome {
    let url = target.endpoint.url.as_str();
    let started = Instant::now();
    let mut attempt = Attempt {
        number: 0,
        seen_ready,
        budget,
    };
    let mut backoff = RETRY_FIRST;
    let mut client = http::Client::new(&target.endpoint);
    loop {
        attempt.number += 1;
        let remaining = deadline.saturating_duration_since(Instant::now());
        let connect = connect_bound(request_timeout, remaining, attempt.number);
        let result = client.request(Method::POST, connect, remaining).await;
        if dropped_unanswered(target, &result) {
            return closed_unanswered(&target.endpoint, deadline, started).await;
        }
        if let Some(outcome) = settled(target, &result, &attempt, started.elapsed().as_millis()) {
            return outcome;
        }
        // Only a quit that was not sent comes here.
        let error = result.map_or_else(|f| f.to_string(), |s| format!("HTTP {s}"));
        if once {
            log!(
                Warn,
                "could not quit the sidecar, and not retrying: it answered nothing while meshwrap waited for it",
                url = url,
                error = &error
            );
            return Outcome::GaveUp;
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            log!(
                Error,
                "could not quit the sidecar: no quit could be sent before --quit-timeout ran out",
                url = url,
                error = &error,
                attempts = attempt.number,
                ms = started.elapsed().as_millis()
            );
            return Outcome::GaveUp;
        }
        log!(Debug, "quit not sent, retrying", url = url, error = &error);
        tokio::time::sleep(backoff.min(remaining)).await;
        backoff = (backoff * 2).min(RETRY_MAX);
    }
}

/// What one URL's quit loop knows when an answer (or its absence) comes.
struct Attempt {
    /// 1 for the first POST.
    number: u32,
    /// The sidecar answered 2xx to a ready URL during the wait.
    seen_ready: bool,
    budget: Duration,
}

/// Whether the quit went out in full and its connection was closed, reset
/// or broken before any answer, from a sidecar not known to exit so.
fn dropped_unanswered(target: &Target, result: &Result<u16, Failure>) -> bool {
    matches!(result, Err(Failure::Closed | Failure::Io(_))) && !target.preset.is_some_and(|p| p.exits_before_answering)
}

/// Whether this answer settles the quit (logged, with its outcome), or
/// `None`: the quit never reached the sidecar, so it may be sent again.
fn settled(target: &Target, result: &Result<u16, Failure>, attempt: &Attempt, ms: u128) -> Option<Outcome> {
    let url = target.endpoint.url.as_str();
    let outcome = match result {
        Ok(status) if (200..300).contains(status) => {
            log!(Info, "sidecar quit", url = url, status = *status, ms = ms);
            Outcome::Quit(*status)
        }
        Ok(status) => return Some(rejected(target, *status, ms)),
        // A sidecar that exits as it takes the quit may never answer it.
        Err(Failure::Closed | Failure::Io(_)) => {
            log!(
                Info,
                "sidecar quit (it closed the connection as it exited)",
                url = url,
                ms = ms
            );
            Outcome::ClosedAsItExited
        }
        Err(Failure::Unsent(why)) if matches!(**why, Failure::Refused) && attempt.seen_ready => {
            log!(
                Info,
                "sidecar already gone (its quit port refuses connections)",
                url = url,
                ms = ms
            );
            Outcome::AlreadyGone
        }
        Err(Failure::Unsent(_)) => return None,
        Err(Failure::Unanswered) => return Some(unanswered(url, attempt, ms)),
        Err(failure) => {
            log!(
                Error,
                "could not quit the sidecar: it answered something that is not HTTP; not sending the quit again",
                url = url,
                error = &failure.to_string(),
                ms = ms
            );
            Outcome::Rejected
        }
    };
    Some(outcome)
}

/// A quit that went out and got no answer in the budget: never resent.
fn unanswered(url: &str, attempt: &Attempt, ms: u128) -> Outcome {
    log!(
        Warn,
        format!(
            "quit sent, no answer within {} (--quit-timeout); not sending it again",
            crate::duration::format(attempt.budget)
        ),
        url = url,
        attempts = attempt.number,
        ms = ms
    );
    Outcome::Unanswered
}

/// A quit that went out and whose connection was closed or reset before
/// any answer: never resent. The sidecar may be exiting on it, so its port
/// is watched until it refuses or the budget ends.
async fn closed_unanswered(endpoint: &Endpoint, deadline: Instant, started: Instant) -> Outcome {
    let url = endpoint.url.as_str();
    if gone_by(endpoint, deadline).await {
        log!(
            Info,
            "sidecar quit (it closed the connection without answering, and its port now refuses: it exited)",
            url = url,
            ms = started.elapsed().as_millis()
        );
        return Outcome::ClosedAsItExited;
    }
    log!(
        Warn,
        "quit sent; the sidecar closed the connection without answering and still listens at --quit-timeout: it may have taken the quit, which is not sent again",
        url = url,
        ms = started.elapsed().as_millis()
    );
    Outcome::Unanswered
}

/// A 3xx, 4xx or 5xx answer: the quit is not sent again; the error says why.
fn rejected(target: &Target, status: u16, ms: u128) -> Outcome {
    let url = target.endpoint.url.as_str();
    let cause = if (400..500).contains(&status) {
        let hint = target.preset.and_then(|p| p.not_found_hint).filter(|_| status == 404);
        hint.map_or_else(|| rejection_cause(status), |hint| format!("404 Not Found: {hint}"))
    } else {
        format!("it answered HTTP {status}; not sending the quit again (the sidecar may have taken it)")
    };
    log!(
        Error,
        format!("could not quit the sidecar: {cause}"),
        url = url,
        status = status,
        ms = ms
    );
    Outcome::Rejected
}

/// Polls with bare connects until the sidecar's port refuses them (true:
/// it has exited), or `deadline` passes (false; a loopback port is probed
/// once more then, without the reactor).
async fn gone_by(endpoint: &Endpoint, deadline: Instant) -> bool {
    let mut client = http::Client::new(endpoint);
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return super::probe::refuses(endpoint);
        }
        if matches!(client.connect_within(remaining).await, Err(Failure::Refused)) {
            return true;
        }
        tokio::time::sleep(RETRY_FIRST.min(remaining)).await;
    }
}

/// Polls until the sidecar's port refuses connections (it has exited), or
/// the budget ends: then warns that it accepted the quit but kept running.
async fn verify_gone(endpoint: &Endpoint, deadline: Instant) {
    let started = Instant::now();
    if gone_by(endpoint, deadline).await {
        log!(
            Info,
            "sidecar exited after the quit",
            url = &endpoint.url,
            ms = started.elapsed().as_millis()
        );
    } else {
        log!(
            Warn,
            "the sidecar accepted the quit but is still running when --quit-timeout ran out",
            url = &endpoint.url
        );
    }
}

/// What a 4xx answer to a quit POST most likely means.
fn rejection_cause(status: u16) -> String {
    match status {
        403 => "403 Forbidden: the sidecar accepts quit only from loopback; run meshwrap in the sidecar's pod and use a 127.0.0.1 or [::1] URL".into(),
        404 => "404 Not Found: the quit endpoint is not enabled or the URL is wrong (Linkerd's shutdown endpoint, for one, is off by default)".into(),
        405 => "405 Method Not Allowed: this URL does not take POST; check the quit URL".into(),
        other => format!("HTTP {other}: the sidecar rejected the request; not retrying"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connect_gets_the_smaller_of_the_request_timeout_and_what_is_left_the_first_at_least_its_floor() {
        let ms = Duration::from_millis;
        assert_eq!(connect_bound(ms(10_000), ms(300), 1), ms(300));
        assert_eq!(connect_bound(ms(10_000), ms(300), 2), ms(300));
        assert_eq!(connect_bound(ms(200), ms(5_000), 3), ms(200));
        assert_eq!(connect_bound(ms(1_000), Duration::ZERO, 1), FIRST_CONNECT);
        assert_eq!(connect_bound(ms(50), Duration::ZERO, 1), ms(50));
        assert_eq!(connect_bound(ms(1_000), Duration::ZERO, 2), Duration::ZERO);
    }
}
