//! Quitting sidecars: POST each distinct quit URL, all in parallel, under
//! one total budget (`--quit-timeout`), until the sidecar takes the quit.
//!
//! The contract (docs/meshwrap.md, "The quit contract", has it as a table,
//! and tests/quit.rs tests each row): at most one quit accepted, and never
//! none while the sidecar lives. Where meshwrap cannot know whether the
//! sidecar took a quit, it takes the side that lets the pod complete: a
//! quit too many costs a sidecar that was ending anyway, a quit too few a
//! pod that runs forever.
//! - 2xx: taken. Never sent again.
//! - 5xx, 408 or 429: not handled (RFC 9110 15.6: the server could not
//!   fulfil it; 15.5.9 and RFC 6585 4: try again later). Sent again, with
//!   backoff, within the budget.
//! - 403, 404, 405 and the other 3xx and 4xx: the sidecar refuses this
//!   request for good; an error naming the likely cause, not resent (the
//!   same bytes would get the same answer).
//! - closed or reset before any answer: its port is looked at with bare
//!   connects (no request) for [`GRACE`]. If it refuses, the sidecar has
//!   exited: quit. If it still accepts, it did not exit, so the quit was
//!   not taken, and it is sent again. A sidecar whose preset says it closes
//!   as it exits (the Cloud SQL proxy) counts as quit at once.
//! - no answer: the request went out and may be acted on; awaited until the
//!   budget ends, never resent (it would race the first), then a warning.
//! - not HTTP: an error, not resent.
//! - not sent at all (a refused or timed-out connect, a write that did not
//!   finish): sent again with backoff. A port that refuses after the
//!   sidecar was seen ready means it has exited: nothing left to quit.
//!
//! Each attempt's connect is bounded by the smaller of `--request-timeout`
//! and what is left of the budget, so a black-holed host cannot hold a quit
//! past it; the first attempt's connect gets at least [`FIRST_CONNECT`], so
//! even `--quit-timeout 1ns` sends the quit (a loopback connect takes
//! microseconds).
//!
//! The races this guards against: a sidecar that exits as it takes the quit
//! closes the connection first and its listener a moment later, so a close
//! is followed by a look at the port for a grace period, not taken for
//! "still running" at the first accepted connect; a sidecar still in its
//! grace when the budget ends is warned about, not told again.
//!
//! One exception to the retries: after a wait in which no sidecar answered
//! anything (every poll refused), meshwrap is stopping because the sidecar
//! never came (a signal, or `--timeout`), and it is most likely not there at
//! all. Then a quit that cannot be sent gets one attempt, and a pod being
//! deleted does not spend `--quit-timeout` retrying a port that has never
//! listened. A sidecar that does answer is still retried as above.

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
    /// It refused the quit for good (3xx, 4xx other than 408 and 429, not
    /// HTTP), or answered "not handled" (5xx, 408, 429) to every one sent
    /// within the budget.
    Rejected,
    /// The quit went out and no answer came within the budget (or its
    /// connection was closed unanswered and the sidecar still listened
    /// when the budget ended).
    Unanswered,
    /// The budget ran out before a quit could be sent.
    GaveUp,
}

/// POSTs every URL, concurrently, until each takes its quit (or refuses it
/// for good), within `budget` in total. `seen_ready`: the sidecar answered
/// ready during the wait; `once`: it answered nothing at all, so a quit
/// that cannot be sent gets one attempt.
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
    // The last "not handled" status, for the error if the budget ends in
    // the request after it.
    let mut not_handled = None;
    loop {
        attempt.number += 1;
        let remaining = deadline.saturating_duration_since(Instant::now());
        let connect = connect_bound(request_timeout, remaining, attempt.number);
        let result = client.request(Method::POST, connect, remaining).await;
        let ms = started.elapsed().as_millis();
        let why = match verdict(target, &result, &attempt) {
            Verdict::Settled(outcome) => return last_word(target, &result, outcome, &attempt, (ms, not_handled)),
            Verdict::WatchPort => match closed_unanswered(&target.endpoint, deadline, started).await {
                Some(outcome) => return outcome,
                None => "the sidecar closed the connection without answering and still listens".to_string(),
            },
            Verdict::Again(why) => why,
        };
        if let Ok(status) = result {
            not_handled = Some(status);
        }
        if once && matches!(result, Err(Failure::Unsent(_))) {
            log!(
                Warn,
                "could not quit the sidecar, and not retrying: it answered nothing while meshwrap waited for it",
                url = url,
                error = &why
            );
            return Outcome::GaveUp;
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return out_of_time(url, &result, &why, &attempt, started.elapsed().as_millis());
        }
        if matches!(result, Err(Failure::Unsent(_))) {
            log!(Debug, "quit not sent, retrying", url = url, error = &why);
        } else {
            log!(Info, "quit not taken, sending it again", url = url, reason = &why);
        }
        tokio::time::sleep(backoff.min(remaining)).await;
        backoff = (backoff * 2).min(RETRY_MAX);
    }
}

/// The quit when no runtime could be made (`lib.rs`, `without_runtime`):
/// each URL in turn, by the same contract ([`verdict`]), on blocking
/// sockets, within `budget` in all. Slower with several URLs (one after the
/// other), and a close is followed by looks at a loopback port only; but
/// the quit goes out.
pub fn quit_all_blocking(targets: &[Target], budget: Duration, request_timeout: Duration, seen_ready: bool) {
    let deadline = std::time::Instant::now() + budget;
    for target in targets {
        quit_one_blocking(target, budget, deadline, request_timeout, seen_ready);
    }
}

fn quit_one_blocking(
    target: &Target,
    budget: Duration,
    deadline: std::time::Instant,
    request_timeout: Duration,
    seen_ready: bool,
) -> Outcome {
    let url = target.endpoint.url.as_str();
    let started = std::time::Instant::now();
    let mut attempt = Attempt {
        number: 0,
        seen_ready,
        budget,
    };
    let mut backoff = RETRY_FIRST;
    let left = || deadline.saturating_duration_since(std::time::Instant::now());
    loop {
        attempt.number += 1;
        let connect = connect_bound(request_timeout, left(), attempt.number);
        let result = http::request_blocking(&target.endpoint, Method::POST, connect, left());
        let ms = started.elapsed().as_millis();
        let why = match verdict(target, &result, &attempt) {
            Verdict::Settled(outcome) => return settle(target, &result, outcome, &attempt, ms),
            Verdict::WatchPort => {
                let grace_end = std::time::Instant::now() + GRACE.min(left());
                while std::time::Instant::now() < grace_end {
                    if super::probe::refuses(&target.endpoint) {
                        return settle(target, &result, Outcome::ClosedAsItExited, &attempt, ms);
                    }
                    std::thread::sleep(RETRY_FIRST);
                }
                "the sidecar closed the connection without answering and still listens".to_string()
            }
            Verdict::Again(why) => why,
        };
        if left().is_zero() {
            return out_of_time(url, &result, &why, &attempt, started.elapsed().as_millis());
        }
        log!(Info, "quit not taken, sending it again", url = url, reason = &why);
        std::thread::sleep(backoff.min(left()));
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

/// What one attempt's result means for the quit (the contract's table).
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// Nothing more to send: this is how the quit ended.
    Settled(Outcome),
    /// Closed or reset before any answer: look at the port.
    WatchPort,
    /// Not taken (not sent, or not handled): send it again, and why.
    Again(String),
}

/// The contract's table: what came back, and what meshwrap does.
fn verdict(target: &Target, result: &Result<u16, Failure>, attempt: &Attempt) -> Verdict {
    match result {
        Ok(status) if (200..300).contains(status) => Verdict::Settled(Outcome::Quit(*status)),
        // Not handled, and the sidecar lives: a quit too few is a pod that
        // never completes, so it is sent again (RFC 9110 15.6, 15.5.9).
        Ok(status) if *status >= 500 || *status == 408 || *status == 429 => Verdict::Again(format!("HTTP {status}")),
        Ok(_) => Verdict::Settled(Outcome::Rejected),
        Err(Failure::Closed | Failure::Io(_)) if target.preset.is_some_and(|p| p.exits_before_answering) => {
            Verdict::Settled(Outcome::ClosedAsItExited)
        }
        Err(Failure::Closed | Failure::Io(_)) => Verdict::WatchPort,
        Err(Failure::Unsent(why)) if matches!(**why, Failure::Refused) && attempt.seen_ready => {
            Verdict::Settled(Outcome::AlreadyGone)
        }
        Err(Failure::Unsent(why)) => Verdict::Again(format!("not sent: {why}")),
        // Sent and pending: the sidecar may act on it yet; a second one
        // would race it. Awaited, not resent.
        Err(Failure::Unanswered) => Verdict::Settled(Outcome::Unanswered),
        Err(Failure::Garbage(_) | Failure::Refused | Failure::TimedOut) => Verdict::Settled(Outcome::Rejected),
    }
}

/// How a settled quit ended: a budget that ran out in the request after a
/// "not handled" answer is that answer's error (the sidecar never took a
/// quit); anything else as [`settle`] logs it.
fn last_word(
    target: &Target,
    result: &Result<u16, Failure>,
    outcome: Outcome,
    attempt: &Attempt,
    (ms, not_handled): (u128, Option<u16>),
) -> Outcome {
    match (&outcome, not_handled) {
        (Outcome::Unanswered, Some(status)) => out_of_time(&target.endpoint.url, &Ok(status), "", attempt, ms),
        _ => settle(target, result, outcome, attempt, ms),
    }
}

/// Logs how a settled quit ended, and returns it.
fn settle(target: &Target, result: &Result<u16, Failure>, outcome: Outcome, attempt: &Attempt, ms: u128) -> Outcome {
    let url = target.endpoint.url.as_str();
    match (&outcome, result) {
        (Outcome::Quit(status), _) => log!(Info, "sidecar quit", url = url, status = *status, ms = ms),
        (Outcome::Rejected, Ok(status)) => rejected(target, *status, ms),
        (Outcome::Rejected, Err(failure)) => log!(
            Error,
            "could not quit the sidecar: it answered something that is not HTTP; not sending the quit again",
            url = url,
            error = &failure.to_string(),
            ms = ms
        ),
        (Outcome::ClosedAsItExited, _) => log!(
            Info,
            "sidecar quit (it closed the connection as it exited)",
            url = url,
            ms = ms
        ),
        (Outcome::AlreadyGone, _) => log!(
            Info,
            "sidecar already gone (its quit port refuses connections)",
            url = url,
            ms = ms
        ),
        (Outcome::Unanswered, _) => unanswered(url, attempt, ms),
        (Outcome::GaveUp, _) => {}
    }
    outcome
}

/// The budget ended while the quit was still not taken: an error (a quit
/// never sent, or answered "not handled" every time), or a warning (a
/// sidecar that closed without answering, still listening: it may be
/// exiting slowly on the quit).
fn out_of_time(url: &str, result: &Result<u16, Failure>, why: &str, attempt: &Attempt, ms: u128) -> Outcome {
    match result {
        Err(Failure::Closed | Failure::Io(_)) => {
            log!(
                Warn,
                "quit sent; the sidecar closed the connection without answering and still listens at --quit-timeout: it may be exiting on the quit",
                url = url,
                attempts = attempt.number,
                ms = ms
            );
            Outcome::Unanswered
        }
        Ok(status) => {
            log!(
                Error,
                format!(
                    "could not quit the sidecar: it answered HTTP {status} (not handled) to every quit within {} (--quit-timeout)",
                    crate::duration::format(attempt.budget)
                ),
                url = url,
                attempts = attempt.number,
                ms = ms
            );
            Outcome::Rejected
        }
        Err(_) => {
            log!(
                Error,
                "could not quit the sidecar: no quit could be sent before --quit-timeout ran out",
                url = url,
                error = why,
                attempts = attempt.number,
                ms = ms
            );
            Outcome::GaveUp
        }
    }
}

/// A quit that went out and got no answer in the budget: never resent.
fn unanswered(url: &str, attempt: &Attempt, ms: u128) {
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
}

/// How long a sidecar that closed a quit's connection unanswered has to
/// stop listening before the quit counts as not taken. A sidecar exiting on
/// the quit closes the connection and its listener within one exit; one
/// that is still listening after this did not exit.
const GRACE: Duration = Duration::from_millis(100);

/// A quit that went out and whose connection was closed or reset before
/// any answer: `Some` when the sidecar's port refuses within [`GRACE`] (it
/// exited on the quit), `None` when it still listens (send again).
async fn closed_unanswered(endpoint: &Endpoint, deadline: Instant, started: Instant) -> Option<Outcome> {
    let grace_end = deadline.min(Instant::now() + GRACE);
    if gone_by(endpoint, grace_end).await {
        log!(
            Info,
            "sidecar quit (it closed the connection without answering, and its port now refuses: it exited)",
            url = &endpoint.url,
            ms = started.elapsed().as_millis()
        );
        return Some(Outcome::ClosedAsItExited);
    }
    None
}

/// A 3xx or 4xx answer: the sidecar refuses this quit for good; the error says why.
fn rejected(target: &Target, status: u16, ms: u128) {
    let url = target.endpoint.url.as_str();
    let cause = if (400..500).contains(&status) {
        let hint = target.preset.and_then(|p| p.not_found_hint).filter(|_| status == 404);
        hint.map_or_else(|| rejection_cause(status), |hint| format!("404 Not Found: {hint}"))
    } else {
        format!("it answered HTTP {status}; not sending the quit again (the same request would get the same answer)")
    };
    log!(
        Error,
        format!("could not quit the sidecar: {cause}"),
        url = url,
        status = status,
        ms = ms
    );
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

    fn target(exits_before_answering: bool) -> Target {
        let endpoint = http::Endpoint::parse("http://127.0.0.1:1/quitquitquit").unwrap();
        let preset = if exits_before_answering {
            crate::sidecar::preset::PRESETS.iter().find(|p| p.name == "cloudsql")
        } else {
            None
        };
        Target { endpoint, preset }
    }

    fn verdict_of(result: Result<u16, Failure>, seen_ready: bool) -> Verdict {
        let attempt = Attempt {
            number: 1,
            seen_ready,
            budget: Duration::from_secs(5),
        };
        verdict(&target(false), &result, &attempt)
    }

    #[test]
    fn the_contract_table_each_row() {
        use Verdict::*;
        let unsent = |f| Err(Failure::Unsent(Box::new(f)));
        assert_eq!(verdict_of(Ok(200), true), Settled(Outcome::Quit(200)));
        assert_eq!(verdict_of(Ok(204), true), Settled(Outcome::Quit(204)));
        for status in [500, 502, 503, 504, 408, 429] {
            assert!(
                matches!(verdict_of(Ok(status), true), Again(_)),
                "{status} is sent again"
            );
        }
        for status in [301, 400, 403, 404, 405, 418] {
            assert_eq!(verdict_of(Ok(status), true), Settled(Outcome::Rejected), "{status}");
        }
        assert_eq!(verdict_of(Err(Failure::Closed), true), WatchPort);
        let reset = std::io::Error::from(std::io::ErrorKind::Other);
        assert_eq!(verdict_of(Err(Failure::Io(reset)), true), WatchPort);
        assert_eq!(verdict_of(Err(Failure::Unanswered), true), Settled(Outcome::Unanswered));
        assert_eq!(
            verdict_of(Err(Failure::Garbage("x".into())), true),
            Settled(Outcome::Rejected)
        );
        assert_eq!(
            verdict_of(unsent(Failure::Refused), true),
            Settled(Outcome::AlreadyGone)
        );
        assert!(matches!(verdict_of(unsent(Failure::Refused), false), Again(_)));
        assert!(matches!(verdict_of(unsent(Failure::TimedOut), true), Again(_)));
    }

    #[test]
    fn a_sidecar_whose_preset_closes_as_it_exits_is_quit_by_the_close() {
        let attempt = Attempt {
            number: 1,
            seen_ready: true,
            budget: Duration::from_secs(5),
        };
        let closed = verdict(&target(true), &Err(Failure::Closed), &attempt);
        assert_eq!(closed, Verdict::Settled(Outcome::ClosedAsItExited));
    }

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
