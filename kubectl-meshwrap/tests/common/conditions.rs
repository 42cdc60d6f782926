//! The API server's side of the webhook configuration's `matchConditions`:
//! the expressions exactly as `manifests` prints them or the chart renders
//! them, compiled and evaluated with a CEL interpreter (the `cel` crate; the
//! API server uses cel-go) against pods bound as the API server binds them.
//!
//! What the API server does, as k8s.io/apiserver v0.36.3 says:
//! - pkg/admission/plugin/cel/compile.go, `createEnvForOpts`: `object` and
//!   `oldObject` are declared `cel.DynType`, `request` is the typed
//!   `kubernetes.AdmissionRequest` (`BuildRequestType`), and `authorizer`
//!   is there when an authorizer is given;
//! - pkg/admission/plugin/cel/condition.go, `objectToResolveVal`: `object`
//!   is the versioned typed object through
//!   `runtime.DefaultUnstructuredConverter.ToUnstructured`, which leaves out
//!   an `omitempty` field that is empty (k8s.io/apimachinery v0.36.3
//!   pkg/runtime/converter.go, `structToUnstructured` and `isEmpty`: a nil or
//!   empty map). ObjectMeta's `labels` and `annotations` are `omitempty`
//!   (pkg/apis/meta/v1/types.go), so a pod with none, or with `{}`, has no
//!   such key, and reading `object.metadata.annotations` is then an error
//!   unless `has()` guards it. `oldObject` is null on CREATE;
//! - condition.go, `CreateAdmissionRequest`: `request` has `kind`,
//!   `resource`, `requestKind`, `requestResource`, `name` (`omitempty`: a pod
//!   named by `generateName` has none yet), `namespace`, `operation`,
//!   `userInfo`, `dryRun` and `options`, converted the same way;
//! - pkg/admission/plugin/webhook/matchconditions/matcher.go, `Match`: if
//!   any condition is false the webhook is not called, whatever the others
//!   did; else if any failed to evaluate, the failurePolicy decides (`Fail`:
//!   the request is refused); else the webhook is called;
//! - pkg/admission/plugin/webhook/generic/webhook.go, `ShouldCallHook`: the
//!   selectors and rules are matched first, so the conditions only ever see
//!   what the rules let through: here a Pod CREATE, which
//!   [`assert_match_conditions_decide_as_expected`] also checks.
//!
//! What this does not do: cel-go's type check at compile time, and the
//! `authorizer` library. Every condition must read only `object`,
//! `oldObject` and `request` (checked), `request` is bound with every field
//! the API server's has for a pod, so a misspelt one fails here, and every
//! condition must evaluate to a boolean on every sample.

use serde_json::{Value, json};

/// What the API server does with the request, from the conditions' results.
#[derive(Debug, PartialEq)]
pub enum Decision {
    /// Every condition true: the webhook is called.
    Call,
    /// This condition (the first false one) left the pod alone.
    Skip(String),
    /// No condition false, one or more failed: `failurePolicy: Fail`
    /// refuses the pod.
    Refuse(String),
}

/// matcher.go's `Match`, over each condition's (name, result).
pub fn decide(results: &[(String, Result<bool, String>)]) -> Decision {
    if let Some((name, _)) = results.iter().find(|(_, r)| r == &Ok(false)) {
        return Decision::Skip(name.clone());
    }
    let errors: Vec<String> = results
        .iter()
        .filter_map(|(name, r)| r.as_ref().err().map(|e| format!("{name}: {e}")))
        .collect();
    if errors.is_empty() {
        Decision::Call
    } else {
        Decision::Refuse(errors.join("; "))
    }
}

/// The variables the stand-in binds (it has no authorizer).
const BOUND: [&str; 3] = ["object", "oldObject", "request"];

/// One webhook's conditions, compiled: (name, program).
pub fn compile(conditions: &Value) -> Vec<(String, cel::Program)> {
    let list = conditions
        .as_array()
        .unwrap_or_else(|| panic!("matchConditions is not a list: {conditions}"));
    assert!(!list.is_empty(), "no matchConditions");
    list.iter()
        .map(|c| {
            let name = c["name"].as_str().unwrap().to_string();
            let expression = c["expression"].as_str().unwrap();
            let program = cel::Program::compile(expression)
                .unwrap_or_else(|e| panic!("{name}: {expression:?} does not compile: {e:?}"));
            for variable in program.references().variables() {
                assert!(
                    BOUND.contains(&variable),
                    "{name}: reads {variable}, which this stand-in does not bind ({BOUND:?})"
                );
            }
            (name, program)
        })
        .collect()
}

/// Each condition's result for one request.
pub fn evaluate(
    conditions: &[(String, cel::Program)],
    object: &Value,
    request: &Value,
) -> Vec<(String, Result<bool, String>)> {
    let mut context = cel::Context::default();
    context.add_variable("object", object).unwrap();
    context.add_variable("oldObject", Value::Null).unwrap();
    context.add_variable("request", request).unwrap();
    conditions
        .iter()
        .map(|(name, program)| {
            let result = match program.execute(&context) {
                Ok(cel::Value::Bool(b)) => Ok(b),
                Ok(other) => Err(format!("evaluates to {other:?}, not a boolean")),
                Err(e) => Err(format!("{e:?}")),
            };
            (name.clone(), result)
        })
        .collect()
}

/// The AdmissionRequest of a pod's CREATE in `namespace`, as
/// `CreateAdmissionRequest` makes it for a pod the Job controller creates
/// (no `name` yet: it comes from `generateName`).
pub fn pod_create_request(namespace: &str) -> Value {
    let kind = json!({"group": "", "version": "v1", "kind": "Pod"});
    let resource = json!({"group": "", "version": "v1", "resource": "pods"});
    json!({
        "uid": "",
        "kind": kind, "resource": resource,
        "requestKind": kind, "requestResource": resource,
        "namespace": namespace,
        "operation": "CREATE",
        "userInfo": {"username": "system:serviceaccount:kube-system:job-controller",
                     "uid": "0b7f4c34-3c6e-4f1a-9d7e-1f6b5a2c9e10",
                     "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"],
                     "extra": {}},
        "dryRun": false,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}
    })
}

/// A pod as `object` binds it: `metadata` as given (labels and
/// annotations absent where the pod has none), a container with a command.
pub fn pod(metadata: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": metadata,
        "spec": {"restartPolicy": "Never",
                 "containers": [{"name": "train", "image": "registry.example.com/train:1.0",
                                 "command": ["python", "train.py"], "resources": {}}]},
        "status": {}
    })
}

/// (what, namespace, metadata, the API server's decision).
pub type Sample = (&'static str, String, Value, Decision);

/// The pods the conditions must decide, for a webhook in `own`.
pub fn samples(own: &str) -> Vec<Sample> {
    let skip = |name: &str| Decision::Skip(name.to_string());
    let (annotation, label, namespace) = (
        || skip("not-opted-out-by-annotation"),
        || skip("not-opted-out-by-label"),
        || skip("not-a-never-selected-namespace"),
    );
    let team = || "team-a".to_string();
    let job = json!({"generateName": "train-", "namespace": "team-a", "creationTimestamp": null,
                     "labels": {"batch.kubernetes.io/job-name": "train", "job-name": "train"},
                     "annotations": {"sidecar.istio.io/inject": "true"},
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train",
                                          "uid": "6a1b3c9e-1d2f-4e5a-8b7c-0d9e8f7a6b5c",
                                          "controller": true, "blockOwnerDeletion": true}]});
    let with = |patch: Value| {
        let mut m = job.clone();
        json_patch::merge(&mut m, &patch);
        m
    };
    vec![
        ("a Job's pod to be wrapped", team(), job.clone(), Decision::Call),
        (
            "a pod with no labels and no annotations (the keys absent)",
            team(),
            json!({"name": "bare", "namespace": "team-a"}),
            Decision::Call,
        ),
        (
            "a pod with no metadata maps at all, not even a name",
            team(),
            json!({}),
            Decision::Call,
        ),
        (
            "labelled \"true\" in an unlabelled namespace",
            "platform".into(),
            json!({"name": "p", "labels": {"meshwrap.io/inject": "true"}}),
            Decision::Call,
        ),
        (
            "annotations and labels without meshwrap.io/inject",
            team(),
            with(json!({"annotations": {"a": "b"}, "labels": {"c": "d"}})),
            Decision::Call,
        ),
        (
            "annotated \"true\"",
            team(),
            with(json!({"annotations": {"meshwrap.io/inject": "true"}})),
            Decision::Call,
        ),
        (
            "annotated \"\"",
            team(),
            with(json!({"annotations": {"meshwrap.io/inject": ""}})),
            Decision::Call,
        ),
        (
            "annotated \"False\" (the webhook opts out on \"false\" only)",
            team(),
            with(json!({"annotations": {"meshwrap.io/inject": "False"}})),
            Decision::Call,
        ),
        (
            "opted out by label",
            team(),
            with(json!({"labels": {"meshwrap.io/inject": "false"}})),
            label(),
        ),
        (
            "opted out by annotation",
            team(),
            with(json!({"annotations": {"meshwrap.io/inject": "false"}})),
            annotation(),
        ),
        (
            "opted out by annotation, with no labels",
            team(),
            json!({"name": "p", "annotations": {"meshwrap.io/inject": "false"}}),
            annotation(),
        ),
        (
            "opted out by label, with no annotations",
            team(),
            json!({"name": "p", "labels": {"meshwrap.io/inject": "false"}}),
            label(),
        ),
        (
            "labelled \"true\" and annotated \"false\"",
            "platform".into(),
            json!({"name": "p", "labels": {"meshwrap.io/inject": "true"}, "annotations": {"meshwrap.io/inject": "false"}}),
            annotation(),
        ),
        (
            "in the webhook's own namespace",
            own.into(),
            json!({"name": "meshwrap-webhook-0"}),
            namespace(),
        ),
        (
            "in kube-system",
            "kube-system".into(),
            with(json!({"namespace": "kube-system"})),
            namespace(),
        ),
        (
            "in kube-public (not never-selected)",
            "kube-public".into(),
            json!({"name": "p"}),
            Decision::Call,
        ),
        (
            "in a namespace whose name starts with the webhook's",
            format!("{own}-2"),
            json!({}),
            Decision::Call,
        ),
    ]
}

/// Every webhook of `configuration`: its rules let only Pod CREATE through,
/// and its conditions evaluate without error, to a boolean, on every
/// sample, to the decision the sample expects. Returns how many were decided.
pub fn assert_match_conditions_decide_as_expected(configuration: &Value, own: &str) -> usize {
    let mut decided = 0;
    let webhooks = configuration["webhooks"].as_array().unwrap();
    assert_eq!(webhooks.len(), 2);
    for webhook in webhooks {
        let name = webhook["name"].as_str().unwrap();
        assert_eq!(
            webhook["rules"],
            json!([{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                    "resources": ["pods"], "scope": "Namespaced"}]),
            "{name}: the conditions are checked for a Pod CREATE only (oldObject null, request.namespace set)"
        );
        let conditions = compile(&webhook["matchConditions"]);
        for (what, namespace, metadata, expected) in samples(own) {
            let results = evaluate(&conditions, &pod(metadata), &pod_create_request(&namespace));
            for (condition, result) in &results {
                assert!(
                    result.is_ok(),
                    "{name}, {what}: {condition} does not evaluate ({}); failurePolicy Fail would refuse the pod",
                    result.as_ref().unwrap_err()
                );
            }
            assert_eq!(decide(&results), expected, "{name}, {what}: {results:?}");
            decided += 1;
        }
    }
    decided
}
