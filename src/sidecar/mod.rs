//! Talking to sidecars: wait until every ready URL has answered 2xx once, and
//! POST every quit URL once when the command has ended.
//!
//! Both phases run one small loop per URL, concurrently on the one runtime
//! thread (`join_all` below), so several sidecars cost no extra threads. Neither
//! phase knows about signals or deadlines beyond its own: the caller races the
//! readiness wait against signals and `--timeout`, and quitting carries its own
//! total budget, so every wait in here is bounded by the caller's numbers.

pub mod http;
pub mod preset;
pub mod quit;
pub mod ready;

pub use http::Endpoint;

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::task::Poll;

/// Runs futures concurrently on the current task; outputs in input order.
async fn join_all<F: Future>(futures: impl IntoIterator<Item = F>) -> Vec<F::Output> {
    let mut pending: Vec<Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = pending.iter().map(|_| None).collect();
    poll_fn(|cx| {
        for (future, output) in pending.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none()
                && let Poll::Ready(value) = future.as_mut().poll(cx)
            {
                *output = Some(value);
            }
        }
        if outputs.iter().all(Option::is_some) {
            Poll::Ready(outputs.iter_mut().filter_map(Option::take).collect())
        } else {
            Poll::Pending
        }
    })
    .await
}
