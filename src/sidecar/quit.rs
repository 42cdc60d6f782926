//! Quitting sidecars: POST each quit URL once, all in parallel, under one
//! total budget.
//!
//! A 2xx ends that URL for good, so no sidecar is ever told twice. Answers that
//! a retry cannot change (403, 404, 405 and other 4xx) end it with an error that
//! names the likely cause. Everything else (refused, reset, timed out, 5xx) is
//! retried with a short backoff until the budget is spent, with one exception:
//! a sidecar that was seen ready and now refuses connections has already exited
//! (the kubelet or someone else stopped it), so there is nothing left to quit.

use std::time::Duration;

use hyper::Method;
use tokio::time::Instant;

use super::http::{self, Endpoint, Failure};
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
    /// Its preset exits before answering, and it closed the connection.
    ClosedAsItExited,
    /// It answered a status that retrying cannot change.
    Rejected(u16),
    /// The budget ran out.
    GaveUp,
}

/// POSTs every URL once, concurrently, within `budget` in total.
pub async fn quit_all(
    targets: &[Target],
    budget: Duration,
    request_timeout: Duration,
    seen_ready: bool,
    verify: bool,
) -> Vec<Outcome> {
    let deadline = Instant::now() + budget;
    super::join_all(targets.iter().map(|t| async move {
        let outcome = quit_one(t, deadline, request_timeout, seen_ready).await;
        if verify && matches!(outcome, Outcome::Quit(_) | Outcome::ClosedAsItExited) {
            verify_gone(&t.endpoint, deadline).await;
        }
        outcome
    }))
    .await
}

async fn quit_one(target: &Target, deadline: Instant, request_timeout: Duration, seen_ready: bool) -> Outcome {
    let endpoint = &target.endpoint;
    let started = Instant::now();
    let mut backoff = RETRY_FIRST;
    let mut attempts = 0u32;
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            log!(
                Error,
                "could not quit the sidecar: gave up when --quit-timeout ran out",
                url = &endpoint.url,
                attempts = attempts,
                ms = started.elapsed().as_millis()
            );
            return Outcome::GaveUp;
        }
        attempts += 1;
        let result = http::request(endpoint, Method::POST, request_timeout.min(remaining)).await;
        let ms = started.elapsed().as_millis();
        match result {
            Ok(status) if (200..300).contains(&status) => {
                log!(Info, "sidecar quit", url = &endpoint.url, status = status, ms = ms);
                return Outcome::Quit(status);
            }
            // A sidecar that exits as it takes the quit may never answer it.
            Err(Failure::Closed) if target.preset.is_some_and(|p| p.exits_before_answering) => {
                log!(
                    Info,
                    "sidecar quit (it closed the connection as it exited)",
                    url = &endpoint.url,
                    ms = ms
                );
                return Outcome::ClosedAsItExited;
            }
            Ok(status) if (400..500).contains(&status) => {
                let hint = target.preset.and_then(|p| p.not_found_hint).filter(|_| status == 404);
                let cause = hint.map_or_else(|| rejection_cause(status), |hint| format!("404 Not Found: {hint}"));
                log!(
                    Error,
                    format!("could not quit the sidecar: {cause}"),
                    url = &endpoint.url,
                    status = status,
                    ms = ms
                );
                return Outcome::Rejected(status);
            }
            Err(Failure::Refused) if seen_ready => {
                log!(
                    Info,
                    "sidecar already gone (its quit port refuses connections)",
                    url = &endpoint.url,
                    ms = ms
                );
                return Outcome::AlreadyGone;
            }
            Ok(status) => log!(
                Debug,
                "quit not accepted yet, retrying",
                url = &endpoint.url,
                status = status
            ),
            Err(failure) => log!(
                Debug,
                "quit failed, retrying",
                url = &endpoint.url,
                error = &failure.to_string()
            ),
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        tokio::time::sleep(backoff.min(remaining)).await;
        backoff = (backoff * 2).min(RETRY_MAX);
    }
}

/// Polls until the sidecar's port refuses connections (it has exited), or
/// the budget ends: then warns that it accepted the quit but kept running.
async fn verify_gone(endpoint: &Endpoint, deadline: Instant) {
    let started = Instant::now();
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if matches!(http::connect_within(endpoint, remaining).await, Err(Failure::Refused)) {
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
