//! One AdmissionReview in, one AdmissionReview out: pure, no I/O, so the
//! fuzz target, the tests and the server all drive the same code.
//!
//! The pod is never decoded into a typed struct and re-encoded: the answer is
//! [`transform::plan`]'s additions as JSON Patch `add` operations against the
//! request's own JSON, so a field newer than this code survives untouched.
//! That is the trap of an injector that diffs a re-marshalled typed pod.
//!
//! Which pods reach this code is the MutatingWebhookConfiguration's business
//! (namespace label, pod label; see `manifests`). This side only refuses what
//! must never be touched even if the configuration is wrong: another
//! operation or resource, the webhook's own namespace and `kube-system`, and
//! a pod that opted out.
//!
//! Reinvocation (`reinvocationPolicy: IfNeeded`) guards: a pod this webhook
//! wrapped carries the status annotation and gets no patch. A pod it skipped
//! carries a "skipped" status, and is decided again, because Istio's
//! injector may have added the sidecar since; the patch then replaces the
//! status, and an unchanged decision gives no patch at all.

use base64::Engine;
use serde_json::{Map, Value, json};

use crate::patch::{json_patch, key};
use crate::trainer::{self, Completion};
use crate::transform::{self, INJECT, Options, Outcome, Place, Restart, STATUS};
use crate::workloads;

/// The API server's limit on a request body; a larger AdmissionReview is
/// not one the API server sent.
pub const MAX_BODY: usize = 3 * 1024 * 1024;

/// Kubernetes truncates longer warnings.
const MAX_WARNING: usize = 256;

/// What every decision needs besides the request.
#[derive(Clone, Debug)]
pub struct Settings {
    pub options: Options,
    /// The webhook's own namespace: never selected.
    pub namespace: String,
}

/// What was decided, for the log line, the metrics and the tests.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// injected, skipped, unchanged or ignored.
    pub outcome: &'static str,
    /// A short code for the metrics (never a name).
    pub code: &'static str,
    pub reason: String,
    pub container: Option<String>,
    pub uid: String,
    pub namespace: String,
    /// The pod's name, or its generateName followed by `*`.
    pub pod: String,
    /// Its controller, as `Kind/name`.
    pub owner: Option<String>,
    /// Its controller's reference in full: what its events are about.
    pub controller: Option<Controller>,
    pub patched: bool,
    /// A reinvocation that found the pod skipped for the same reason as
    /// before: decided already, so nothing new to tell.
    pub repeat: bool,
    /// The request is a dry run (`request.dryRun`): it is decided and
    /// answered as any other, and has no side effect (no Event).
    pub dry_run: bool,
}

/// The pod's controller, as its ownerReference names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Controller {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
}

/// The answer: the AdmissionReview to send back and what it decided.
pub struct Answer {
    pub review: Value,
    pub decision: Decision,
}

fn text<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// The decision for one AdmissionReview body, or why it is not one (a 400).
pub fn review(body: &[u8], settings: &Settings) -> Result<Answer, String> {
    review_parsed(parse(body)?, settings)
}

/// The body as JSON, or why it is not (a 400).
pub fn parse(body: &[u8]) -> Result<Value, String> {
    serde_json::from_slice(body).map_err(|e| format!("the body is not JSON: {e}"))
}

/// The namespace the request's pod is created in (empty if none is said):
/// what the server reads before the decision (`namespaces`).
pub fn namespace_of(doc: &Value) -> &str {
    match text(doc, "/request/namespace") {
        "" => text(doc, "/request/object/metadata/namespace"),
        namespace => namespace,
    }
}

/// The decision for one AdmissionReview, parsed; `Err` as [`review`]'s.
pub fn review_parsed(doc: Value, settings: &Settings) -> Result<Answer, String> {
    let (api, kind) = (text(&doc, "/apiVersion"), text(&doc, "/kind"));
    if api != "admission.k8s.io/v1" || kind != "AdmissionReview" {
        return Err(format!(
            "expected an admission.k8s.io/v1 AdmissionReview, got {} {}",
            if api.is_empty() { "(no apiVersion)" } else { api },
            if kind.is_empty() { "(no kind)" } else { kind },
        ));
    }
    let Some(request) = doc.get("request").filter(|r| r.is_object()) else {
        return Err("the AdmissionReview has no request".into());
    };
    let uid = match request.get("uid") {
        Some(Value::String(uid)) if !uid.is_empty() => uid.clone(),
        _ => return Err("the AdmissionReview's request has no uid".into()),
    };
    let object = request.get("object").unwrap_or(&Value::Null);
    let mut decision = described(request, object, &uid);
    let mut response = Map::new();
    response.insert("uid".into(), Value::String(uid));
    response.insert("allowed".into(), Value::Bool(true));
    if let Some((outcome, code, reason)) = left_alone(request, object, &decision.namespace, settings)? {
        (decision.outcome, decision.code, decision.reason) = (outcome, code, reason);
    } else {
        let patch = decide(object, settings, &mut decision);
        if !decision.reason.is_empty() && decision.outcome == "skipped" {
            response.insert("warnings".into(), json!([warning(&decision.reason)]));
        }
        if !patch.is_empty() {
            decision.patched = true;
            let bytes = serde_json::to_vec(&patch).map_err(|e| format!("the patch: {e}"))?;
            response.insert("patchType".into(), json!("JSONPatch"));
            response.insert(
                "patch".into(),
                json!(base64::engine::general_purpose::STANDARD.encode(bytes)),
            );
        }
    }
    Ok(Answer {
        review: json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}),
        decision,
    })
}

/// The decision's description of the request, before anything is decided.
fn described(request: &Value, object: &Value, uid: &str) -> Decision {
    let namespace = match text(request, "/namespace") {
        "" => text(object, "/metadata/namespace"),
        ns => ns,
    }
    .to_string();
    let pod = match (text(object, "/metadata/name"), text(object, "/metadata/generateName")) {
        ("", "") => "(unnamed)".to_string(),
        ("", generate) => format!("{generate}*"),
        (name, _) => name.to_string(),
    };
    Decision {
        outcome: "ignored",
        code: "",
        reason: String::new(),
        container: None,
        uid: uid.to_string(),
        namespace,
        pod,
        owner: controller(object).map(|(kind, _, name)| format!("{kind}/{name}")),
        controller: controller_reference(object),
        patched: false,
        repeat: false,
        dry_run: dry_run(request),
    }
}

/// Whether the request is a dry run. The configuration declares
/// `sideEffects: None`, and the API server sends such webhooks dry-run
/// requests too (kubectl `--dry-run=server`, server-side diffs), because
/// "SideEffectClassNone means that calling the webhook will have no side
/// effects" (kubernetes/api admissionregistration/v1/types.go; a webhook
/// with side effects would declare `NoneOnDryRun`: "if the request being
/// reviewed has the dry-run attribute, the side effects will be
/// suppressed"; the API server's dispatch: kubernetes/apiserver
/// pkg/admission/plugin/webhook/mutating/dispatcher.go at 24a394e, lines
/// 248-255). An Event is a side effect, so a dry run posts none. A missing
/// or non-boolean field is no dry run (the API server always sends a bool);
/// which side: the Event is posted, the pod is unaffected either way.
pub fn dry_run(request: &Value) -> bool {
    request.get("dryRun").and_then(Value::as_bool).unwrap_or(false)
}

/// Requests the webhook leaves alone before deciding anything: not a Pod
/// CREATE, a namespace never selected, a pod that opted out. `Err`: a Pod
/// CREATE without its pod (a 400).
fn left_alone(
    request: &Value,
    object: &Value,
    namespace: &str,
    settings: &Settings,
) -> Result<Option<(&'static str, &'static str, String)>, String> {
    let operation = text(request, "/operation");
    let is_pod = text(request, "/kind/group").is_empty()
        && text(request, "/kind/version") == "v1"
        && text(request, "/kind/kind") == "Pod"
        && text(request, "/subResource").is_empty();
    if !is_pod || operation != "CREATE" {
        let sub = match text(request, "/subResource") {
            "" => String::new(),
            sub => format!(" ({sub})"),
        };
        let what = format!(
            "only Pod CREATE is wrapped, not {} {}{sub}",
            or(operation, "(no operation)"),
            or(text(request, "/kind/kind"), "(no kind)")
        );
        return Ok(Some(("ignored", "not-pod-create", what)));
    }
    if !object.is_object() {
        return Err("the Pod CREATE request has no object".into());
    }
    if namespace == settings.namespace || namespace == "kube-system" {
        return Ok(Some((
            "ignored",
            "namespace",
            format!("namespace {namespace} is never selected"),
        )));
    }
    // A service's pod: no quit is ever due, and a Warning that its "Job"
    // may never complete would be noise (`--workloads all` wraps it).
    if let Some((kind, group, name)) = controller(object)
        && !settings.options.all_workloads
        && crate::operators::long_running(group, kind)
    {
        return Ok(Some((
            "ignored",
            "long-running",
            format!("its controller {kind}/{name} runs until deleted: left alone (--workloads all wraps it)"),
        )));
    }
    let opted_out = [
        object.pointer("/metadata/labels").and_then(|l| l.get(INJECT)),
        object.pointer("/metadata/annotations").and_then(|a| a.get(INJECT)),
    ]
    .contains(&Some(&json!("false")));
    if opted_out {
        return Ok(Some((
            "skipped",
            "opted-out",
            format!("opted out: {INJECT} is \"false\""),
        )));
    }
    Ok(None)
}

/// `value`, or `none` where it is empty.
fn or<'a>(value: &'a str, none: &'a str) -> &'a str {
    if value.is_empty() { none } else { value }
}

/// One admission warning, within the API server's bound.
fn warning(reason: &str) -> String {
    let mut warning = format!("meshwrap: pod not wrapped: {reason}");
    if warning.len() > MAX_WARNING {
        let mut end = MAX_WARNING - 3;
        while !warning.is_char_boundary(end) {
            end -= 1;
        }
        warning.truncate(end);
        warning.push_str("...");
    }
    warning
}

/// The pod's controller: kind, API group and name.
fn controller(pod: &Value) -> Option<(&str, &str, &str)> {
    pod.pointer("/metadata/ownerReferences")?
        .as_array()?
        .iter()
        .find(|r| r.get("controller") == Some(&Value::Bool(true)))
        .map(|r| {
            let group = text(r, "/apiVersion").split_once('/').map_or("", |(g, _)| g);
            (text(r, "/kind"), group, text(r, "/name"))
        })
}

/// The pod's controller's ownerReference, where it names a kind and a name.
fn controller_reference(pod: &Value) -> Option<Controller> {
    let reference = pod
        .pointer("/metadata/ownerReferences")?
        .as_array()?
        .iter()
        .find(|r| r.get("controller") == Some(&Value::Bool(true)))?;
    let field = |name: &str| text(reference, name).to_string();
    let found = Controller {
        api_version: field("/apiVersion"),
        kind: field("/kind"),
        name: field("/name"),
        uid: field("/uid"),
    };
    (!found.api_version.is_empty() && !found.kind.is_empty() && !found.name.is_empty()).then_some(found)
}

/// Where the pod's parts are, and what its creator implies: the container a
/// Kubeflow operator names, or an Argo step (Argo stops the sidecars itself).
fn place(pod: &Value) -> Place {
    let argo = pod
        .pointer("/metadata/labels/workflows.argoproj.io~1workflow")
        .is_some()
        || pod
            .pointer("/metadata/annotations/workflows.argoproj.io~1node-name")
            .is_some();
    let default_container = match controller(pod) {
        _ if argo => Some("main"),
        Some((kind, "kubeflow.org", _)) => workloads::kubeflow(kind).map(|(_, container)| container),
        _ => None,
    };
    Place {
        label: "pod".into(),
        metadata: vec![key("metadata")],
        spec: vec![key("spec")],
        volumes: vec![key("spec")],
        argo: false,
        restart: if argo {
            Restart::Argo
        } else {
            // A bare pod's default, and what a controller writes anyway.
            Restart::PodSpec("Always")
        },
        default_container,
    }
}

/// The status a skipped pod carries; the same reason gives the same bytes.
fn skipped_status(reason: &str) -> String {
    json!({"version": transform::VERSION, "skipped": reason}).to_string()
}

/// Plans the pod and fills in `decision`; returns the JSON Patch.
fn decide(pod: &Value, settings: &Settings, decision: &mut Decision) -> Vec<Value> {
    // A status this webhook wrote when it skipped the pod is decided again,
    // as if it were not there (see the module's note on reinvocation).
    let previous = pod
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(STATUS))
        .and_then(Value::as_str)
        .and_then(|s| serde_json::from_str::<Value>(s).ok())
        .and_then(|s| s.get("skipped").and_then(Value::as_str).map(str::to_string));
    let stripped;
    let pod = if previous.is_some() {
        let mut copy = pod.clone();
        if let Some(Value::Object(annotations)) = copy.pointer_mut("/metadata/annotations") {
            annotations.remove(STATUS);
        }
        stripped = copy;
        &stripped
    } else {
        pod
    };
    // A status this webhook or inject wrote, over a wrapped container whose
    // command no longer starts meshwrap (a TrainJob replaced it): the wrap
    // is completed, not "already injected" (its guard would wait forever).
    if let Some(completion) = previous.is_none().then(|| trainer::complete(pod)).flatten() {
        return completed(completion, decision);
    }
    let place = place(pod);
    match transform::plan(pod, &place, &settings.options) {
        Outcome::Injected {
            container,
            policy,
            guard,
            ops,
            notes,
        } => {
            decision.outcome = "injected";
            decision.code = "injected";
            let meshes = transform::meshes_at(pod, &place, &settings.options);
            decision.reason = format!(
                "container {container}, {}, quit policy {policy}{}",
                match meshes.as_slice() {
                    [] => "no mesh seen in the pod".to_string(),
                    [one] => format!("mesh {one}"),
                    more => format!("meshes {}", more.join(", ")),
                },
                if guard { ", with the guard" } else { "" }
            );
            decision.reason = transform::with_notes(std::mem::take(&mut decision.reason), &notes);
            decision.container = Some(container);
            json_patch(&ops)
        }
        Outcome::Native { meshes, ops } => {
            decision.outcome = "injected";
            decision.code = "native";
            decision.reason = format!("native: annotated, not wrapped ({meshes})");
            json_patch(&ops)
        }
        Outcome::Unchanged(why) => {
            decision.outcome = "unchanged";
            decision.code = "unchanged";
            decision.reason = why;
            Vec::new()
        }
        Outcome::Skipped(skip) => {
            decision.outcome = "skipped";
            decision.code = skip.code;
            if previous.as_deref() == Some(skip.why.as_str()) {
                decision.reason = skip.why;
                decision.repeat = true;
                return Vec::new();
            }
            let status = skipped_status(&skip.why);
            decision.reason = skip.why;
            transform::status_op(pod, &[key("metadata")], status)
                .map(|op| json_patch(&[op]))
                .unwrap_or_default()
        }
    }
}

/// A wrap completed ([`trainer::complete`]), or why it cannot be (admitted
/// as it is: the pod's creation is never refused for it).
fn completed(completion: Completion, decision: &mut Decision) -> Vec<Value> {
    match completion {
        Completion::Wrap { container, op } => {
            decision.outcome = "injected";
            decision.code = "completed";
            decision.reason = format!(
                "container {container}: prepared for meshwrap, but its command (replaced, as a TrainJob's \
                 spec.trainer.command replaces node's) did not start it: wrapped again"
            );
            decision.container = Some(container);
            json_patch(&[op])
        }
        Completion::NoCommand { container, why } => {
            decision.outcome = "skipped";
            decision.code = "no-command";
            decision.reason = why;
            decision.container = Some(container);
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dry_run_is_the_requests_dry_run_field_set_to_true() {
        assert!(dry_run(&json!({"dryRun": true})));
        assert!(!dry_run(&json!({"dryRun": false})));
        assert!(!dry_run(&json!({})));
        assert!(!dry_run(&json!({"dryRun": "true"})));
    }
}
