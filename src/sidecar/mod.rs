//! Talking to sidecars: wait until every ready URL has answered 2xx once, and
//! POST every quit URL once when the command has ended.
//!
//! A URL given twice (by a preset and by `--quit-url`, however written) is
//! one URL: [`plan`] keeps the first, so no sidecar is told to quit twice.
//!
//! Both phases run one small loop per URL, concurrently on the one runtime
//! thread (`join_all` below), so several sidecars cost no extra threads. Neither
//! phase knows about signals or deadlines beyond its own: the caller races the
//! readiness wait against signals and `--timeout`, and quitting carries its own
//! total budget, so every wait in here is bounded by the caller's numbers.

pub mod http;
pub mod pod;
pub mod preset;
pub mod quit;
pub mod ready;
mod timer;

pub use http::Endpoint;

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::task::Poll;

use crate::log;
use quit::Target;

/// Whether the sidecars run as Kubernetes native sidecars (init containers
/// with restartPolicy Always), which the kubelet stops by itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Native {
    /// Decide from the pod's annotations (Istio's status lists istio-proxy
    /// among the init containers).
    Auto,
    Yes,
    No,
}

/// What this run waits for and quits, once the pod's annotations are known.
pub struct Plan {
    pub ready: Vec<Endpoint>,
    pub quit: Vec<Target>,
}

/// Drops the presets whose sidecar is known not to be in this pod, and the
/// quit of native sidecars; logs each decision once.
pub fn plan(ready: &[Target], quit: &[Target], native: Native, annotations: &std::path::Path) -> Plan {
    let facts = match pod::read(annotations) {
        Ok(facts) => facts,
        Err(why) => {
            log!(
                Warn,
                "ignoring the pod annotations; using the configured sidecars",
                file = &annotations.display().to_string(),
                error = &why
            );
            None
        }
    };
    // No file: nothing is known to be absent or native.
    let facts = facts.unwrap_or_default();
    let mut absent: Vec<&str> = Vec::new();
    for (name, why) in [("istio", &facts.istio_absent), ("linkerd", &facts.linkerd_absent)] {
        let configured = ready
            .iter()
            .chain(quit)
            .any(|t| t.preset.is_some_and(|p| p.name == name));
        if let (Some(why), true) = (why, configured) {
            log!(Info, format!("skipping the {name} sidecar: {why}"));
            absent.push(name);
        }
    }
    let kept = |t: &&Target| !t.preset.is_some_and(|p| absent.contains(&p.name));
    let mut quit: Vec<Target> = quit.iter().filter(kept).cloned().collect();
    match native {
        Native::Yes if !quit.is_empty() => {
            log!(
                Info,
                "not quitting the sidecars: --native-sidecar true (the kubelet stops native sidecars)"
            );
            quit.clear();
        }
        Native::Auto if facts.istio_native && quit.iter().any(is_istio) => {
            log!(
                Info,
                "not quitting the istio sidecar: it runs as a native sidecar (istio-proxy is an init container), which the kubelet stops"
            );
            quit.retain(|t| !is_istio(t));
        }
        _ => {}
    }
    let ready: Vec<Target> = ready.iter().filter(kept).cloned().collect();
    Plan {
        ready: distinct(ready).into_iter().map(|t| t.endpoint).collect(),
        quit: distinct(quit),
    }
}

/// One target per resource, the first kept (a preset's, with its quirks,
/// before the same URL given again with --quit-url): a sidecar is told once.
fn distinct(targets: Vec<Target>) -> Vec<Target> {
    let mut kept: Vec<Target> = Vec::with_capacity(targets.len());
    for target in targets {
        if !kept.iter().any(|k| k.endpoint.same_resource(&target.endpoint)) {
            kept.push(target);
        }
    }
    kept
}

fn is_istio(target: &Target) -> bool {
    target.preset.is_some_and(|p| p.name == "istio")
}

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
