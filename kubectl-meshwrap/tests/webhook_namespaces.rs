//! The webhook reads each pod's Namespace (`webhook::namespaces`), with the
//! real binary against the stand-in API server (`common::apiserver`). A
//! checklist:
//!
//! - a namespace that turns Linkerd on (its annotation) gives its pods
//!   Linkerd's shutdown switch, and the decision names the mesh; one that
//!   turns Istio on (its label) gives them Istio, and not Linkerd's switch;
//! - a namespace that turns no mesh on gives its pods no switch of a mesh
//!   they do not show;
//! - a namespace that cannot be read (403, a hanging API server) decides
//!   its pods as offline inject does, with every switch, within
//!   `--namespace-timeout`, says why in the log, and is not read again for
//!   the next pod;
//! - a burst of pods in one namespace costs one read;
//! - `--namespaces off`, and a webhook outside a cluster, read nothing and
//!   decide as offline inject.

mod common;

use std::time::{Duration, Instant};

use base64::Engine;
use common::apiserver::{Mode, StandIn};
use common::https::*;
use serde_json::{Value, json};

const LINKERD_SHUTDOWN: &str = "config.linkerd.io/proxy-admin-shutdown";

/// A Job's pod in `namespace` that shows no mesh.
fn pod(namespace: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "train-",
            "namespace": namespace,
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train",
                                 "uid": "c0ffee00-0000-4000-8000-000000000002", "controller": true}],
        },
        "spec": {"restartPolicy": "Never",
                 "containers": [{"name": "train", "image": "registry.example.com/train:1", "command": ["python", "train.py"]}]},
    })
}

/// The annotations the answer's patch adds to the pod (its JSON Patch
/// applied), and the answer.
fn admitted(client: &mut Client, namespace: &str, uid: usize) -> (Value, Value) {
    let mut pod = pod(namespace);
    let response = client
        .post(common::pod_review(&pod, uid).to_string().as_bytes())
        .unwrap();
    assert_eq!(response.status, 200, "{}", response.text());
    let answer = response.json();
    assert_eq!(answer["response"]["allowed"], true);
    let patch = answer["response"]["patch"].as_str().expect("a patch");
    let bytes = base64::engine::general_purpose::STANDARD.decode(patch).unwrap();
    let patch: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
    json_patch::patch(&mut pod, &patch).unwrap();
    (pod["metadata"]["annotations"].clone(), answer)
}

/// The webhook pointed at `api`, with events off (their requests are the
/// events tests' business).
fn webhook(name: &str, ca: &Ca, api: &StandIn, extra: &[&str]) -> Webhook {
    let mut flags = api.flags();
    flags.extend(["--events", "off"].map(String::from));
    flags.extend(extra.iter().map(|s| s.to_string()));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let webhook = Webhook::start(name, ca, &flags);
    webhook.wait_for("namespaces are read");
    webhook
}

/// The reason of the webhook's next decision line, which must be a wrap.
fn injected_reason(webhook: &Webhook) -> String {
    let line = webhook.wait_for("admission");
    assert_eq!(line["outcome"], "injected", "{line}");
    line["reason"].as_str().unwrap_or("").to_string()
}

#[test]
fn a_namespace_that_turns_a_mesh_on_gives_its_pods_that_meshs_switches_only() {
    let ca = Ca::new("namespaces");
    let api = StandIn::start("namespaces-on", Mode::Answer);
    api.set_namespace("mesh-l", json!({}), json!({"linkerd.io/inject": "enabled"}));
    api.set_namespace("mesh-i", json!({"istio-injection": "enabled"}), json!({}));
    let webhook = webhook("namespaces-on", &ca, &api, &[]);
    let mut client = webhook.client(&ca);

    let (annotations, _) = admitted(&mut client, "mesh-l", 1);
    assert_eq!(annotations[LINKERD_SHUTDOWN], "enabled", "{annotations:#}");
    let reason = injected_reason(&webhook);
    assert!(reason.contains("mesh linkerd"), "{reason}");

    let (annotations, _) = admitted(&mut client, "mesh-i", 2);
    assert!(annotations.get(LINKERD_SHUTDOWN).is_none(), "{annotations:#}");
    let reason = injected_reason(&webhook);
    assert!(reason.contains("mesh istio"), "{reason}");

    let reads = api.namespace_reads();
    let paths: Vec<&str> = reads.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(paths, ["/api/v1/namespaces/mesh-l", "/api/v1/namespaces/mesh-i"]);
    assert_eq!(reads[0].header("authorization"), Some("Bearer token-one"));
}

#[test]
fn a_namespace_that_turns_no_mesh_on_gives_its_pods_no_stray_switch() {
    let ca = Ca::new("namespaces");
    let api = StandIn::start("namespaces-none", Mode::Answer);
    api.set_namespace("plain", json!({"team": "ml"}), json!({}));
    let webhook = webhook("namespaces-none", &ca, &api, &[]);
    let mut client = webhook.client(&ca);
    let (annotations, _) = admitted(&mut client, "plain", 1);
    assert!(annotations.get(LINKERD_SHUTDOWN).is_none(), "{annotations:#}");
    let reason = injected_reason(&webhook);
    assert!(
        reason.contains("no mesh seen in the pod") && !reason.contains("not seen here"),
        "{reason}"
    );
}

/// What offline inject writes for a Job's pod that shows no mesh: every
/// switch a Job needs (Linkerd's; Istio needs none outside Argo).
fn assert_unseen(annotations: &Value) {
    assert_eq!(annotations[LINKERD_SHUTDOWN], "enabled", "{annotations:#}");
}

#[test]
fn a_namespace_that_cannot_be_read_is_decided_as_offline_with_every_switch_and_read_once() {
    let ca = Ca::new("namespaces");
    let api = StandIn::start("namespaces-403", Mode::Answer);
    api.set_namespace_mode(Mode::Status(403));
    let webhook = webhook("namespaces-403", &ca, &api, &[]);
    let mut client = webhook.client(&ca);
    let (annotations, _) = admitted(&mut client, "ml", 1);
    assert_unseen(&annotations);
    let line = webhook.wait_for("namespace not read");
    let reason = line["reason"].as_str().unwrap_or("");
    assert!(reason.contains("403") && reason.contains("get on namespaces"), "{line}");
    // The failure is remembered: the next pod is decided without a read.
    let (annotations, _) = admitted(&mut client, "ml", 2);
    assert_unseen(&annotations);
    assert_eq!(api.namespace_reads().len(), 1);
}

#[test]
fn a_hanging_api_server_holds_a_pod_no_longer_than_the_namespace_timeout() {
    let ca = Ca::new("namespaces");
    let api = StandIn::start("namespaces-hang", Mode::Answer);
    api.set_namespace_mode(Mode::Hang);
    let webhook = webhook("namespaces-hang", &ca, &api, &["--namespace-timeout", "300ms"]);
    let mut client = webhook.client(&ca);
    let start = Instant::now();
    let (annotations, _) = admitted(&mut client, "ml", 1);
    let took = start.elapsed();
    assert_unseen(&annotations);
    // Bounded by the deadline (300 ms), not the admission's 10 s or the
    // API server's silence; the margin is for a loaded machine.
    assert!(took < Duration::from_secs(3), "answered after {took:?}");
    assert!(
        took >= Duration::from_millis(300),
        "answered after {took:?}: did it wait at all?"
    );
    let line = webhook.wait_for("namespace not read");
    assert!(
        line["reason"].as_str().unwrap_or("").contains("no answer within"),
        "{line}"
    );
    let (annotations, _) = admitted(&mut client, "ml", 2);
    assert_unseen(&annotations);
    assert_eq!(api.namespace_reads().len(), 1, "the failure is remembered");
}

#[test]
fn a_burst_of_pods_in_one_namespace_costs_one_read() {
    let ca = Ca::new("namespaces");
    let api = StandIn::start("namespaces-burst", Mode::Answer);
    api.set_namespace("mesh-l", json!({}), json!({"linkerd.io/inject": "enabled"}));
    // Slow, so every pod of the burst arrives while the read is under way.
    api.set_namespace_mode(Mode::Slow(Duration::from_millis(300)));
    let webhook = webhook("namespaces-burst", &ca, &api, &[]);
    let (port, ca) = (webhook.port, &ca);
    std::thread::scope(|scope| {
        let clients: Vec<_> = (0..20)
            .map(|i| {
                scope.spawn(move || {
                    let mut client = Client::connect(port, ca).unwrap();
                    admitted(&mut client, "mesh-l", i).0
                })
            })
            .collect();
        for client in clients {
            let annotations = client.join().unwrap();
            assert_eq!(annotations[LINKERD_SHUTDOWN], "enabled", "{annotations:#}");
        }
    });
    assert_eq!(api.namespace_reads().len(), 1);
}

#[test]
fn namespaces_off_and_outside_a_cluster_read_nothing_and_decide_as_offline() {
    let ca = Ca::new("namespaces");
    let api = StandIn::start("namespaces-off", Mode::Answer);
    api.set_namespace("plain", json!({}), json!({}));
    let mut flags = api.flags();
    flags.extend(["--events", "off", "--namespaces", "off"].map(String::from));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let webhook = Webhook::start("namespaces-off", &ca, &flags);
    let line = webhook.wait_for("namespaces are not read");
    assert_eq!(line["reason"], "--namespaces off");
    let (annotations, _) = admitted(&mut webhook.client(&ca), "plain", 1);
    assert_unseen(&annotations);
    assert!(api.namespace_reads().is_empty());

    // No --api-server and no KUBERNETES_SERVICE_HOST: said once, and served.
    let outside = Webhook::start("namespaces-outside", &ca, &["--events", "off"]);
    let line = outside.wait_for("namespaces are not read");
    assert!(
        line["reason"]
            .as_str()
            .unwrap_or("")
            .contains("KUBERNETES_SERVICE_HOST"),
        "{line}"
    );
    let (annotations, _) = admitted(&mut outside.client(&ca), "plain", 2);
    assert_unseen(&annotations);
}
