//! Quitting sidecars: POST each distinct quit URL once, all in parallel,
//! under one total budget.
//!
//! "Once" is the contract: a quit that a sidecar may have acted on is never
//! sent again. So a POST is retried only when the sidecar cannot have taken
//! it: the connection was refused or could not be made, it was reset or
//! closed before any answer, or the answer was 5xx. A POST that went out and
//! gets no answer is waited for until the budget runs out, never resent
//! (`--request-timeout` bounds only the connect). A 2xx ends that URL for
//! good; other answers (4xx with its likely cause, 3xx, not HTTP) end it with
//! an error. The first attempt goes out whatever the budget, so even
//! `--quit-timeout 1ns` sends the quit.
//!
//! One exception to the retries: after a wait in which no sidecar answered
//! anything (every poll refused), meshwrap is stopping because the sidecar
//! never came (a signal, or `--timeout`), and it is most likely not there at
//! all. Then each URL gets one attempt: "once" still holds (fewer sends can
//! only keep it), and a pod being deleted does not spend `--quit-timeout`
//! retrying a port that has never listened.
//!
//! A port that refuses after the sidecar was reached (seen ready, or it took
//! an earlier attempt and closed without answering) means the sidecar has
//! exited: there is nothing left to quit, and nothing is retried.

use std::time::Duration;

use tokio::time::Instant;

use super::http::{self, Endpoint, Failure, Method};
use super::preset::Preset;
use crate::log;

const RETRY_FIRST: Duration = Duration::from_millis(20);
const RETRY_MAX: Duration = Duration::from_millis(250);

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
    /// does so, or its port refused the next attempt).
    ClosedAsItExited,
    /// It answered something a retry cannot change.
    Rejected,
    /// The quit went out and no answer came within the budget.
    Unanswered,
    /// The budget ran out before any sidecar took the quit.
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
        reached: false,
        seen_ready,
        budget,
    };
    let mut backoff = RETRY_FIRST;
    let mut client = http::Client::new(&target.endpoint);
    loop {
        attempt.number += 1;
        let remaining = deadline.saturating_duration_since(Instant::now());
        let result = client.request(Method::POST, request_timeout, remaining).await;
        if let Some(outcome) = settled(target, &result, &attempt, started.elapsed().as_millis()) {
            return outcome;
        }
        attempt.reached |= !matches!(result, Err(Failure::Refused | Failure::TimedOut | Failure::Io(_)));
        if once {
            log!(
                Warn,
                "could not quit the sidecar, and not retrying: it answered nothing while meshwrap waited for it",
                url = url,
                error = &result.map_or_else(|f| f.to_string(), |s| format!("HTTP {s}"))
            );
            return Outcome::GaveUp;
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            log!(
                Error,
                "could not quit the sidecar: it took no quit before --quit-timeout ran out",
                url = url,
                attempts = attempt.number,
                ms = started.elapsed().as_millis()
            );
            return Outcome::GaveUp;
        }
        tokio::time::sleep(backoff.min(remaining)).await;
        backoff = (backoff * 2).min(RETRY_MAX);
    }
}

/// What one URL's quit loop knows when an answer (or its absence) comes.
struct Attempt {
    /// 1 for the first POST.
    number: u32,
    /// An earlier attempt reached the sidecar (it accepted the connection).
    reached: bool,
    /// The sidecar answered 2xx to a ready URL during the wait.
    seen_ready: bool,
    budget: Duration,
}

/// Whether this answer settles the quit (logged, with its outcome), or
/// `None`: the sidecar cannot have taken it, so it may be sent again.
fn settled(target: &Target, result: &Result<u16, Failure>, attempt: &Attempt, ms: u128) -> Option<Outcome> {
    let url = target.endpoint.url.as_str();
    let outcome = match result {
        Ok(status) if (200..300).contains(status) => {
            log!(Info, "sidecar quit", url = url, status = *status, ms = ms);
            Outcome::Quit(*status)
        }
        // A sidecar that exits as it takes the quit may never answer it.
        Err(Failure::Closed) if target.preset.is_some_and(|p| p.exits_before_answering) => {
            log!(
                Info,
                "sidecar quit (it closed the connection as it exited)",
                url = url,
                ms = ms
            );
            Outcome::ClosedAsItExited
        }
        Err(Failure::Refused) if attempt.reached => {
            log!(
                Info,
                "sidecar quit (it closed the connection without answering, and its port now refuses: it exited)",
                url = url,
                ms = ms
            );
            Outcome::ClosedAsItExited
        }
        Err(Failure::Refused) if attempt.seen_ready => {
            log!(
                Info,
                "sidecar already gone (its quit port refuses connections)",
                url = url,
                ms = ms
            );
            Outcome::AlreadyGone
        }
        Err(Failure::Unanswered) => return Some(unanswered(url, attempt, ms)),
        Ok(status) if *status < 500 => return Some(rejected(target, *status, ms)),
        Err(Failure::Garbage(what)) => {
            log!(
                Error,
                "could not quit the sidecar: it answered something that is not HTTP; not retrying",
                url = url,
                error = what,
                ms = ms
            );
            Outcome::Rejected
        }
        // Not taken: 5xx, refused, reset or closed before an answer, no connection.
        Ok(status) => {
            log!(Debug, "quit not accepted yet, retrying", url = url, status = *status);
            return None;
        }
        Err(failure) => {
            log!(
                Debug,
                "quit not taken, retrying",
                url = url,
                error = &failure.to_string()
            );
            return None;
        }
    };
    Some(outcome)
}

/// A quit that went out and got no answer in the budget: never resent.
fn unanswered(url: &str, attempt: &Attempt, ms: u128) -> Outcome {
    if attempt.number == 1 {
        log!(
            Warn,
            format!(
                "quit sent, no answer within {} (--quit-timeout); not sending it again",
                crate::duration::format(attempt.budget)
            ),
            url = url,
            ms = ms
        );
        return Outcome::Unanswered;
    }
    // A retry that the budget cut off while it waited: the earlier tries
    // were not taken, so the quit most likely failed.
    log!(
        Error,
        "could not quit the sidecar: it took no quit before --quit-timeout ran out (the last try got no answer in time)",
        url = url,
        attempts = attempt.number,
        ms = ms
    );
    Outcome::GaveUp
}

/// A 3xx or 4xx answer: a retry cannot change it; the error says why.
fn rejected(target: &Target, status: u16, ms: u128) -> Outcome {
    let url = target.endpoint.url.as_str();
    let cause = if (400..500).contains(&status) {
        let hint = target.preset.and_then(|p| p.not_found_hint).filter(|_| status == 404);
        hint.map_or_else(|| rejection_cause(status), |hint| format!("404 Not Found: {hint}"))
    } else {
        format!("it answered HTTP {status}; not retrying")
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

/// Polls until the sidecar's port refuses connections (it has exited), or
/// the budget ends: then warns that it accepted the quit but kept running.
async fn verify_gone(endpoint: &Endpoint, deadline: Instant) {
    let started = Instant::now();
    let mut client = http::Client::new(endpoint);
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if matches!(client.connect_within(remaining).await, Err(Failure::Refused)) {
            log!(
                Info,
                "sidecar exited after the quit",
                url = &endpoint.url,
                ms = started.elapsed().as_millis()
            );
            return;
        }
        if remaining.is_zero() {
            log!(
                Warn,
                "the sidecar accepted the quit but is still running when --quit-timeout ran out",
                url = &endpoint.url
            );
            return;
        }
        tokio::time::sleep(RETRY_FIRST.min(remaining)).await;
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
