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

/// What the pod's files say of one marked preset, as the run takes it and
/// `--explain` prints it (both from here, so they cannot disagree).
pub struct Verdict {
    pub keep: bool,
    /// The sidecar runs as a native one (its quit is dropped).
    pub native: bool,
    /// Why, as `--explain` prints it.
    pub why: String,
    /// What the run logs, if anything.
    pub log: Option<String>,
}

/// The verdict on the marked preset `name`, from the annotations file as
/// read (`Err`: unreadable; `Ok(None)`: no file). With `auto`, the presets
/// beyond Istio are guesses, kept only where the pod's files show them.
pub fn verdict(name: &str, facts: Result<Option<&pod::Facts>, &str>, auto: bool) -> Verdict {
    let guess = auto && name != "istio";
    let (keep, why, native) = match facts.map(|f| f.map(|f| f.of(name))) {
        Err(error) if guess => (
            false,
            format!("skipped: the annotations file is unreadable ({error}), so nothing shows it"),
            false,
        ),
        Err(error) => (
            true,
            format!("kept: the annotations file is unreadable ({error})"),
            false,
        ),
        Ok(None) if guess => (false, "skipped: no annotations file to show it".into(), false),
        Ok(None) if auto => (true, "kept: no annotations file, so Istio as always".into(), false),
        Ok(None) | Ok(Some(None)) => (true, "kept: nothing in the pod's files says otherwise".into(), false),
        Ok(Some(Some(seen))) => match &seen.absent {
            Some(absent) => (false, format!("skipped: {absent}"), false),
            None if seen.native => (true, format!("in the pod ({}), native: not quit", seen.shown_by), true),
            None => match &seen.unproven {
                Some(why) => (
                    true,
                    format!(
                        "in the pod ({}), taken as a regular container and quit: {why}",
                        seen.shown_by
                    ),
                    false,
                ),
                None => (true, format!("in the pod ({})", seen.shown_by), false),
            },
        },
    };
    let log = match facts {
        Ok(Some(f)) => match f.of(name).map(|s| (&s.absent, s.shown_by)) {
            Some((Some(absent), _)) if !guess => Some(format!("skipping the {name} sidecar: {absent}")),
            Some((None, _)) if f.of(name).is_some_and(|s| s.unproven.is_some()) => Some(format!(
                "taking the {name} sidecar as a regular container, and quitting it: {}",
                f.of(name).and_then(|s| s.unproven.as_deref()).unwrap_or("")
            )),
            Some((None, by)) if guess => Some(format!("found the {name} sidecar ({by})")),
            _ => None,
        },
        _ => None,
    };
    Verdict { keep, native, why, log }
}

/// Drops the presets whose sidecar is known not to be in this pod, and the
/// quit of native ones; logs each decision once. With `auto` (`--sidecar
/// auto`), the presets beyond Istio are guesses kept only where the pod's
/// annotations show their injector's mark, and their endpoints follow the
/// ports the pod's annotations moved.
pub fn plan(ready: &[Target], quit: &[Target], native: Native, annotations: &std::path::Path, auto: bool) -> Plan {
    let read = pod::read(annotations);
    if let Err(why) = &read {
        log!(
            Warn,
            "ignoring the pod annotations; using the configured sidecars",
            file = &annotations.display().to_string(),
            error = why.as_str()
        );
    }
    let facts = read.as_ref().map(Option::as_ref).map_err(String::as_str);
    for warning in facts.ok().flatten().map_or(&[][..], |f| f.warnings.as_slice()) {
        log!(Warn, format!("ignoring a pod annotation: {warning}"));
    }
    let mut dropped: Vec<&str> = Vec::new();
    let mut natives: Vec<&str> = Vec::new();
    for mesh in crate::meshes::MARKED {
        if !ready.iter().chain(quit).any(|t| is(t, mesh.name)) {
            continue;
        }
        let verdict = verdict(mesh.name, facts, auto);
        if let Some(line) = &verdict.log {
            log!(Info, line.as_str());
        }
        if !verdict.keep {
            dropped.push(mesh.name);
        } else if verdict.native {
            natives.push(mesh.name);
        }
    }
    let kept = |t: &&Target| !t.preset.is_some_and(|p| dropped.contains(&p.name));
    let mut ready: Vec<Target> = ready.iter().filter(kept).cloned().collect();
    let mut quit: Vec<Target> = quit.iter().filter(kept).cloned().collect();
    if let (true, Ok(Some(facts))) = (auto, facts) {
        follow_moves(&mut ready, facts, true);
        follow_moves(&mut quit, facts, false);
        fan_out(&mut ready, facts);
        fan_out(&mut quit, facts);
    }
    drop_native_quits(&mut quit, native, &natives);
    warn_admin_quits(&quit);
    Plan {
        ready: distinct(ready).into_iter().map(|t| t.endpoint).collect(),
        quit: distinct(quit),
    }
}

/// The ports the pod's annotations moved (Linkerd's admin port, Istio's
/// status port, Vault's listener, Consul's graceful port) and the quit path
/// they gave (Consul's), for the presets `auto` took as they are.
fn follow_moves(targets: &mut [Target], facts: &pod::Facts, ready: bool) {
    for target in targets {
        let Some(preset) = target.preset else { continue };
        let Some(seen) = facts.of(preset.name) else { continue };
        let port = if ready { seen.ready_port } else { seen.quit_port };
        let path = if ready { None } else { seen.quit_path.as_deref() };
        if port.is_none() && path.is_none() {
            continue;
        }
        let moved = match port {
            Some(port) if ready => format!("{}=127.0.0.1:{port}", preset.name),
            Some(port) => format!("{}=127.0.0.1/127.0.0.1:{port}", preset.name),
            None => preset.name.to_string(),
        };
        let moved = preset::parse(&moved)
            .ok()
            .and_then(|s| if ready { s.ready } else { s.quit })
            .and_then(|e| match path {
                Some(path) => Endpoint::parse(&format!("http://{}:{}{path}", e.host_text(), e.explicit_port()?)).ok(),
                None => Some(e),
            });
        if let Some(endpoint) = moved {
            target.endpoint = endpoint;
        }
    }
}

/// One endpoint per proxy where the pod runs several (Consul's multi-port
/// pods: the i-th on each port plus i), each waited for and quit.
fn fan_out(targets: &mut Vec<Target>, facts: &pod::Facts) {
    let mut more = Vec::new();
    for target in targets.iter() {
        let Some(seen) = target.preset.and_then(|p| facts.of(p.name)) else {
            continue;
        };
        let Some(port) = target.endpoint.explicit_port() else {
            continue;
        };
        for i in 1..seen.instances {
            if let Some(endpoint) = port.checked_add(i).and_then(|p| target.endpoint.with_port(p)) {
                more.push(Target {
                    endpoint,
                    preset: target.preset,
                });
            }
        }
    }
    targets.extend(more);
}

/// A quit pointed at a proxy's own admin where its mesh forbids it
/// (Consul's Envoy, whose dataplane restarts it): warned once, with why.
/// The user's URL is still used: they may know better (warn, not refuse).
fn warn_admin_quits(quit: &[Target]) {
    for mesh in crate::meshes::MESHES {
        let Some(admin) = &mesh.admin_quit else { continue };
        let Ok(forbidden) = Endpoint::parse(&format!("http://127.0.0.1:{}{}", admin.port, admin.path)) else {
            continue;
        };
        if let Some(t) = quit.iter().find(|t| t.endpoint.same_resource(&forbidden)) {
            log!(
                Warn,
                format!(
                    "the quit {} is {}'s Envoy admin: {}",
                    t.endpoint.url, mesh.name, admin.why
                )
            );
        }
    }
}

/// Native sidecars are stopped by the kubelet: never quit them.
fn drop_native_quits(quit: &mut Vec<Target>, native: Native, natives: &[&str]) {
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
    for name in natives {
        if quit.iter().any(|t| is(t, name)) {
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
