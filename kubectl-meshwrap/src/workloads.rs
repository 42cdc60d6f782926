//! Where pod templates live, kind by kind (from the upstream API types), and
//! what a document that holds containers somewhere unknown is told.
//!
//! An unknown kind with `containers` beneath it is never passed through in
//! silence: it is reported, and `--template-path KIND=PATH` teaches it.
//!
//! Each template also carries its restart behaviour: the `restartPolicy` its
//! pods run under when it names none, by kind, apiVersion and replica type,
//! from the table in `operators.rs` (the only place that states them). Where
//! the table has no default (a Job's template, an operator version it does
//! not know), the template says which field to set instead of a guess.

use serde_json::Value;

use crate::operators::{self, RestartDefault};
use crate::patch::{Path, Seg, get, key, under};
use crate::transform::{Place, Restart};

/// A taught kind: `KIND=PATH`, where PATH's steps are keys, `[]` (every item
/// of a list) or `*` (every value of a map), as in `spec.workers[].template`.
#[derive(Clone, Debug)]
pub struct TemplatePath {
    pub kind: String,
    pub steps: Vec<Step>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    Key(String),
    Each,
}

impl std::str::FromStr for TemplatePath {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let accepts = "KIND=PATH, e.g. MyJob=spec.workers[].template (`[]`: every item, `*`: every map value)";
        let (kind, path) = s.split_once('=').ok_or_else(|| format!("\"{s}\" is not {accepts}"))?;
        let mut steps = Vec::new();
        for part in path.split('.') {
            let (name, each) = match part.strip_suffix("[]") {
                Some(name) => (name, true),
                None => (part, false),
            };
            match name {
                "" if each => {}
                "" => return Err(format!("\"{s}\" has an empty step: {accepts}")),
                "*" => steps.push(Step::Each),
                _ => steps.push(Step::Key(name.to_string())),
            }
            if each {
                steps.push(Step::Each);
            }
        }
        if kind.is_empty() || steps.is_empty() {
            return Err(format!("\"{s}\" is not {accepts}"));
        }
        Ok(TemplatePath {
            kind: kind.to_string(),
            steps,
        })
    }
}

/// One workload of a document: a top-level object or a List's item.
#[derive(Debug)]
pub struct Workload {
    /// Where the object is: the document itself, or a List's item.
    pub at: Path,
    pub kind: String,
    pub name: String,
    /// Its pod templates, or why it has none we may touch.
    pub places: Result<Vec<Place>, String>,
}

fn expand(doc: &Value, at: Path, steps: &[Step], out: &mut Vec<Path>) {
    let Some((step, rest)) = steps.split_first() else {
        out.push(at);
        return;
    };
    match (step, get(doc, &at)) {
        (Step::Key(k), Some(v)) if v.get(k.as_str()).is_some() => expand(doc, under(&at, &[key(k)]), rest, out),
        (Step::Each, Some(Value::Array(items))) => {
            for i in 0..items.len() {
                expand(doc, under(&at, &[Seg::Index(i)]), rest, out);
            }
        }
        (Step::Each, Some(Value::Object(map))) => {
            for k in map.keys() {
                expand(doc, under(&at, &[key(k)]), rest, out);
            }
        }
        _ => {}
    }
}

fn has_containers(v: &Value) -> bool {
    match v {
        Value::Object(map) => map.contains_key("containers") || map.values().any(has_containers),
        Value::Array(items) => items.iter().any(has_containers),
        _ => false,
    }
}

/// A pod template (with `metadata` and `spec`) at `at`.
fn template(at: Path, label: String, restart: Restart, default_container: Option<&'static str>) -> Place {
    Place {
        label,
        metadata: under(&at, &[key("metadata")]),
        spec: under(&at, &[key("spec")]),
        volumes: under(&at, &[key("spec")]),
        argo: false,
        restart,
        default_container,
    }
}

fn label(path: &Path) -> String {
    let mut out = String::new();
    for seg in path {
        match seg {
            Seg::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// Kubeflow training operator kinds: the replica specs' field and the
/// container the operator names. (Their restart defaults depend on the
/// apiVersion and the replica type: `operators.rs`.)
pub fn kubeflow(kind: &str) -> Option<(&'static str, &'static str)> {
    Some(match kind {
        "TFJob" => ("tfReplicaSpecs", "tensorflow"),
        "PyTorchJob" => ("pytorchReplicaSpecs", "pytorch"),
        "XGBoostJob" => ("xgbReplicaSpecs", "xgboost"),
        "PaddleJob" => ("paddleReplicaSpecs", "paddle"),
        "JAXJob" => ("jaxReplicaSpecs", "jax"),
        "MPIJob" => ("mpiReplicaSpecs", "mpi"),
        _ => return None,
    })
}

/// The restart behaviour of a template of `kind` at `api` (not a Kubeflow
/// replica) whose path is `template`: the table's default, or, where it has
/// none, the field to set.
fn restart_of(api: &str, kind: &str, template: &str) -> Restart {
    match operators::lookup(api, kind, "").map(|f| f.default) {
        Some(RestartDefault::Policy(policy)) => Restart::PodSpec(policy),
        Some(RestartDefault::Required(accepts)) => Restart::Required(format!(
            "no restartPolicy, and a {kind}'s pod template has no default (it takes {accepts}): \
             set {template}.spec.restartPolicy"
        )),
        None => Restart::Required(format!(
            "no restartPolicy, and meshwrap knows no default for a {api} {kind}: set {template}.spec.restartPolicy"
        )),
    }
}

/// The restart behaviour of the Kubeflow replica `replica` (spec `spec`,
/// under `spec.FIELD`) of a `kind` at `api`: its own `restartPolicy`, else
/// its operator's default for that apiVersion and replica type, as its
/// operator runs it on the pods (over the template's).
fn replica_restart(api: &str, kind: &str, field: &str, replica: &str, spec: &Value) -> Restart {
    let default = || match operators::lookup(api, kind, replica).map(|f| f.default) {
        Some(RestartDefault::Policy(policy)) => Some(policy),
        _ => None,
    };
    match spec.get("restartPolicy").and_then(Value::as_str).or_else(default) {
        Some(policy) => Restart::Replica(Some(operators::replica_pod_policy(policy).to_string())),
        None => Restart::Unknown(format!(
            "no restartPolicy, and meshwrap knows no default for replica {replica} of a {api} {kind}: \
             set spec.{field}.{replica}.restartPolicy"
        )),
    }
}

/// The workloads of one document.
pub fn find(doc: &Value, taught: &[TemplatePath]) -> Vec<Workload> {
    let mut out = Vec::new();
    find_at(doc, Vec::new(), taught, &mut out);
    out
}

fn find_at(doc: &Value, at: Path, taught: &[TemplatePath], out: &mut Vec<Workload>) {
    let Some(object) = get(doc, &at).filter(|v| v.is_object()) else {
        return;
    };
    let kind = object.get("kind").and_then(Value::as_str).unwrap_or("").to_string();
    if kind == "List" || (kind.ends_with("List") && object.get("items").is_some_and(Value::is_array)) {
        let count = object["items"].as_array().map_or(0, Vec::len);
        for i in 0..count {
            find_at(doc, under(&at, &[key("items"), Seg::Index(i)]), taught, out);
        }
        return;
    }
    let places = match taught.iter().find(|t| t.kind == kind) {
        Some(t) => Some(Ok(taught_places(doc, &at, t))),
        None => places_of(doc, &at, object, &kind),
    };
    if let Some(places) = places {
        out.push(Workload {
            name: object_name(object),
            at,
            kind,
            places,
        });
    }
}

/// `metadata.name`, or `generateName` with a `*`.
fn object_name(object: &Value) -> String {
    let meta = |field: &str| object.pointer(&format!("/metadata/{field}")).and_then(Value::as_str);
    match (meta("name"), meta("generateName")) {
        (Some(name), _) => name.to_string(),
        (None, Some(prefix)) => format!("{prefix}*"),
        (None, None) => "(unnamed)".into(),
    }
}

/// A kind taught with `--template-path`: its templates, as plain pods.
fn taught_places(doc: &Value, at: &Path, t: &TemplatePath) -> Vec<Place> {
    let mut paths = Vec::new();
    expand(doc, at.clone(), &t.steps, &mut paths);
    paths
        .into_iter()
        .map(|path| {
            let label = label(&path);
            template(path, label, Restart::PodSpec(operators::TAUGHT), None)
        })
        .collect()
}

/// Where each known kind keeps its pod templates (from the upstream API
/// types): a table, one arm per kind. `None`: not a workload.
fn places_of(doc: &Value, at: &Path, object: &Value, kind: &str) -> Option<Result<Vec<Place>, String>> {
    let api = object.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let group = api.split_once('/').map_or("", |(g, _)| g);
    let p = |rest: &[&str]| -> Path { under(at, &rest.iter().map(|k| key(k)).collect::<Vec<_>>()) };
    let one = |path: &[&str], default| {
        let label = path.join(".");
        let restart = restart_of(api, kind, &label);
        Some(Ok(vec![template(p(path), label, restart, default)]))
    };
    let each = |steps: &str, default| Some(Ok(each_template(doc, at, steps, restart_of(api, kind, ""), default)));
    match (group, kind) {
        ("", "Pod") => Some(Ok(vec![Place {
            label: "pod".into(),
            metadata: p(&["metadata"]),
            spec: p(&["spec"]),
            volumes: p(&["spec"]),
            argo: false,
            restart: restart_of(api, kind, ""),
            default_container: None,
        }])),
        ("batch", "Job") => one(&["spec", "template"], None),
        ("batch", "CronJob") => one(&["spec", "jobTemplate", "spec", "template"], None),
        ("apps", "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet") | ("", "ReplicationController") => {
            one(&["spec", "template"], None)
        }
        ("kubeflow.org", k) if kubeflow(k).is_some() => Some(Ok(kubeflow_places(object, at, api, k))),
        ("jobset.x-k8s.io", "JobSet") => each("spec.replicatedJobs[].template.spec.template", None),
        ("trainer.kubeflow.org", "TrainingRuntime" | "ClusterTrainingRuntime") => each(
            "spec.template.spec.replicatedJobs[].template.spec.template",
            Some("node"),
        ),
        // No pod template of its own: its spec.trainer.command overrides its
        // runtime's node container, decided by `trainer::trainjob`.
        ("trainer.kubeflow.org", "TrainJob") => Some(Ok(Vec::new())),
        ("ray.io", "RayJob") if object.pointer("/spec/submitterPodTemplate").is_some() => {
            one(&["spec", "submitterPodTemplate"], Some("ray-job-submitter"))
        }
        // No template here: `nothing_to_wrap` says why, as a note.
        ("ray.io", "RayJob" | "RayCluster" | "RayService") => Some(Ok(Vec::new())),
        ("argoproj.io", "Workflow" | "WorkflowTemplate" | "ClusterWorkflowTemplate" | "CronWorkflow") => {
            let spec = if kind == "CronWorkflow" {
                p(&["spec", "workflowSpec"])
            } else {
                p(&["spec"])
            };
            Some(Ok(argo_places(doc, spec)))
        }
        _ if has_containers(object) => Some(Err(format!(
            "unknown kind {}{kind} holds containers: not changed; teach it with --template-path {kind}=PATH (e.g. spec.template)",
            if api.is_empty() {
                String::new()
            } else {
                format!("{api} ")
            }
        ))),
        _ => None,
    }
}

/// Why a workload of a known kind with no pod template to wrap is fine as
/// it is (a note, not a skip: the run does not fail), or `None` when it
/// should have had one.
pub fn nothing_to_wrap(object: &Value, kind: &str) -> Option<String> {
    let at = |p: &str| object.pointer(p).and_then(Value::as_str);
    let spec = if kind == "CronWorkflow" {
        "/spec/workflowSpec"
    } else {
        "/spec"
    };
    match kind {
        "Workflow" | "CronWorkflow" if object.pointer(&format!("{spec}/workflowTemplateRef")).is_some() => {
            let name = at(&format!("{spec}/workflowTemplateRef/name")).unwrap_or("?");
            Some(format!(
                "nothing to wrap: it runs the templates of the WorkflowTemplate {name} (workflowTemplateRef): inject that one"
            ))
        }
        "Workflow" | "WorkflowTemplate" | "ClusterWorkflowTemplate" | "CronWorkflow" => Some(
            "nothing to wrap: no container or script template (steps, dag, resource, suspend, http and plugin templates run no command of yours)".into(),
        ),
        "RayJob" => Some(match at("/spec/submissionMode").unwrap_or("K8sJobMode") {
            "HTTPMode" => "nothing to wrap: with submissionMode HTTPMode the operator submits the job over HTTP; there is no submitter pod".into(),
            "InteractiveMode" => "nothing to wrap: with submissionMode InteractiveMode the job is submitted by hand; there is no submitter pod".into(),
            "SidecarMode" => "nothing to wrap: with submissionMode SidecarMode the submitter is a container of the head pod, which runs until the cluster goes".into(),
            _ => return None,
        }),
        "RayCluster" | "RayService" => Some(format!(
            "left alone: a {kind}'s head and worker groups run until deleted (teach a path with --template-path {kind}=PATH to wrap one)"
        )),
        _ => None,
    }
}

/// Every template a built-in path with `[]` steps reaches, each with
/// `restart` (a default: none of these kinds requires a field).
fn each_template(doc: &Value, at: &Path, steps: &str, restart: Restart, default: Option<&'static str>) -> Vec<Place> {
    let taught: TemplatePath = format!("x={steps}").parse().expect("a built-in path");
    let mut paths = Vec::new();
    expand(doc, at.clone(), &taught.steps, &mut paths);
    paths
        .into_iter()
        .map(|path| {
            let label = label(&path[at.len()..].to_vec());
            template(path, label, restart.clone(), default)
        })
        .collect()
}

/// A Kubeflow job's replicas, each with its own restart policy.
fn kubeflow_places(object: &Value, at: &Path, api: &str, kind: &str) -> Vec<Place> {
    let (field, container) = kubeflow(kind).unwrap_or_default();
    let replicas = object.pointer(&format!("/spec/{field}")).and_then(Value::as_object);
    replicas
        .into_iter()
        .flatten()
        .map(|(replica, spec)| {
            let restart = replica_restart(api, kind, field, replica, spec);
            let path = under(at, &[key("spec"), key(field), key(replica), key("template")]);
            template(path, replica.clone(), restart, Some(container))
        })
        .collect()
}

/// An Argo workflow's templates that hold a container of their own.
fn argo_places(doc: &Value, spec: Path) -> Vec<Place> {
    let templates = get(doc, &spec)
        .and_then(|s| s.get("templates"))
        .and_then(Value::as_array);
    let mut places = Vec::new();
    for (i, t) in templates.into_iter().flatten().enumerate() {
        if !["container", "script", "containerSet"]
            .iter()
            .any(|f| t.get(*f).is_some())
        {
            continue; // steps, dag, resource, suspend: no container of their own
        }
        let entry = under(&spec, &[key("templates"), Seg::Index(i)]);
        let name = t.get("name").and_then(Value::as_str).unwrap_or("?");
        places.push(Place {
            label: format!("template {name}"),
            metadata: under(&entry, &[key("metadata")]),
            spec: entry,
            volumes: spec.clone(),
            argo: true,
            restart: Restart::Argo,
            default_container: Some("main"),
        });
    }
    places
}
