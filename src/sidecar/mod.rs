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
pub mod probe;
pub mod quit;
pub mod ready;

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
/// quit of native ones; logs each decision once. With `auto` (`--sidecar
/// auto`), the presets beyond Istio are guesses kept only where the pod's
/// annotations show their injector's mark.
pub fn plan(ready: &[Target], quit: &[Target], native: Native, annotations: &std::path::Path, auto: bool) -> Plan {
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
    let known = facts.is_some();
    // No file: nothing is known to be absent or native.
    let facts = facts.unwrap_or_default();
    let mut dropped: Vec<&str> = Vec::new();
    for (name, mark) in pod::MARKERS {
        if !ready.iter().chain(quit).any(|t| is(t, name)) {
            continue;
        }
        // Auto's presets beyond Istio are guesses: kept only where marked.
        let guess = auto && name != "istio";
        match facts.of(name).and_then(|s| s.absent.as_ref()) {
            Some(why) if !guess => log!(Info, format!("skipping the {name} sidecar: {why}")),
            None if known && guess => {
                log!(Info, format!("found the {name} sidecar ({mark})"));
                continue;
            }
            None if !guess => continue,
            _ => {}
        }
        dropped.push(name);
    }
    let kept = |t: &&Target| !t.preset.is_some_and(|p| dropped.contains(&p.name));
    let ready: Vec<Target> = ready.iter().filter(kept).cloned().collect();
    let mut quit: Vec<Target> = quit.iter().filter(kept).cloned().collect();
    if let (true, Some(port)) = (auto, facts.vault_port) {
        for t in quit.iter_mut().filter(|t| is(t, "vault")) {
            t.endpoint = preset::parse(&format!("vault=127.0.0.1:{port}"))
                .ok()
                .and_then(|s| s.quit)
                .unwrap_or(t.endpoint.clone());
        }
    }
    drop_native_quits(&mut quit, native, &facts);
    Plan {
        ready: distinct(ready).into_iter().map(|t| t.endpoint).collect(),
        quit: distinct(quit),
    }
}

/// Native sidecars are stopped by the kubelet: never quit them.
fn drop_native_quits(quit: &mut Vec<Target>, native: Native, facts: &pod::Facts) {
    if native == Native::Yes && !quit.is_empty() {
        log!(
            Info,
            "not quitting the sidecars: --native-sidecar true (the kubelet stops native sidecars)"
        );
        quit.clear();
    }
    if native != Native::Auto {
        return;
    }
    for (name, _) in pod::MARKERS {
        if facts.of(name).is_some_and(|s| s.native) && quit.iter().any(|t| is(t, name)) {
            log!(
                Info,
                format!(
                    "not quitting the {name} sidecar: it runs as a native sidecar (an init container that keeps running), which the kubelet stops"
                )
            );
            quit.retain(|t| !is(t, name));
        }
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

/// Whether the target came from the preset `name`.
fn is(target: &Target, name: &str) -> bool {
    target.preset.is_some_and(|p| p.name == name)
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
