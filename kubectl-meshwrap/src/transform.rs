//! The one decision every front end shares: given a document (raw JSON, never
//! a typed struct) and where one pod template sits in it, what to add so the
//! pod runs its command under meshwrap, or why not.
//!
//! The result is a list of additions ([`Op`]) and a reason, nothing else: the
//! same plan becomes text insertions in `inject` and JSON Patch in the
//! webhook, so the two cannot disagree, and fields this code has never heard
//! of survive because nothing is rebuilt.
//!
//! What it guards against:
//! - two wrapped containers in one pod, each quitting the sidecar: exactly
//!   one container is chosen, or none;
//! - a pod whose quit policy fights its restart policy: the policy comes from
//!   the restart behaviour unless an annotation says otherwise;
//! - wrapping twice: the status annotation, or a command that already runs
//!   meshwrap, means "unchanged";
//! - a name or a mount path meshwrap needs that the pod already uses for
//!   something else: the pod is skipped, never half-wrapped.

use serde_json::{Value, json};

use meshwrap::meshes::{self, Key, Read};

use crate::mesh::{self, Found, Kind};
use crate::patch::{Op, Path, Seg, get, key, under};
use crate::restart;

pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// What was done to a pod, and by which version.
pub const STATUS: &str = "meshwrap.io/status";
pub const CONTAINER: &str = "meshwrap.io/container";
pub const QUIT_POLICY: &str = "meshwrap.io/quit-policy";
pub const IMAGE: &str = "meshwrap.io/image";
pub const TIMEOUT: &str = "meshwrap.io/timeout";
pub const SIDECAR: &str = "meshwrap.io/sidecar";
/// The UID what meshwrap adds runs as, or `none` (the platform's choice, as
/// OpenShift's restricted SCC assigns).
pub const RUN_AS_USER: &str = "meshwrap.io/run-as-user";
/// The resources of what meshwrap adds (`requests.cpu=10m,...`), or `none`.
pub const RESOURCES: &str = "meshwrap.io/resources";
/// meshwrap's own UID in its image, and the default.
pub const DEFAULT_UID: u32 = 65532;
pub const DEFAULT_RESOURCES: &str = "requests.cpu=10m,requests.memory=8Mi,limits.cpu=100m,limits.memory=32Mi";
/// `"true"`: make the mesh's proxy native instead of wrapping; `"prefer"`:
/// that, or the wrapper where the mesh has no native switch; `"false"`.
pub const NATIVE: &str = "meshwrap.io/native";
/// Argo's per-container kill command, `ARGO_KILL` + the container's name.
pub const ARGO_KILL: &str = "workflows.argoproj.io/kill-cmd-";
/// `"false"` on a pod (label or annotation) leaves it alone.
pub const INJECT: &str = "meshwrap.io/inject";

pub const BIN_VOLUME: &str = "meshwrap-bin";
pub const GUARD_VOLUME: &str = "meshwrap-guard";
pub const PODINFO_VOLUME: &str = "meshwrap-podinfo";
pub const INSTALL_CONTAINER: &str = "meshwrap-install";
pub const GUARD_CONTAINER: &str = "meshwrap-guard";
pub const BIN_DIR: &str = "/mesh";
pub const GUARD_DIR: &str = "/run/meshwrap";
/// meshwrap's default `--pod-annotations` is `PODINFO_DIR/annotations`.
pub const PODINFO_DIR: &str = "/etc/podinfo";

/// Containers that are sidecars, never the workload: the meshes' proxies,
/// Argo's `wait`, meshwrap's guard.
pub const KNOWN_SIDECARS: [&str; 9] = [
    meshes::ISTIO.proxy,
    meshes::LINKERD.proxy,
    meshes::DAPR.proxy,
    meshes::VAULT.proxy,
    meshes::CLOUDSQL.proxy,
    meshes::CONSUL.proxy,
    meshes::KUMA.proxy,
    "wait",
    GUARD_CONTAINER,
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// An init container copies the binary into an emptyDir.
    InitContainer,
    /// The meshwrap image itself is mounted read-only (`volumes[].image`).
    ImageVolume,
}

impl Delivery {
    pub fn name(self) -> &'static str {
        match self {
            Delivery::InitContainer => "init-container",
            Delivery::ImageVolume => "image-volume",
        }
    }
}

/// Whether to make the mesh's proxy a native sidecar instead of wrapping.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Native {
    /// Wrap (the default).
    #[default]
    Off,
    /// Set each mesh's per-pod native switch; refuse a mesh without one.
    On,
    /// As `On`, but wrap where a mesh has no native switch.
    Prefer,
}

impl Native {
    /// The option's value, where it is not the default.
    pub fn flag(self) -> Option<&'static str> {
        match self {
            Native::Off => None,
            Native::On => Some("true"),
            Native::Prefer => Some("prefer"),
        }
    }

    pub fn parse(value: &str) -> Option<Native> {
        match value {
            "false" | "off" => Some(Native::Off),
            "true" | "on" => Some(Native::On),
            "prefer" => Some(Native::Prefer),
            _ => None,
        }
    }
}

/// The options every front end takes; pod annotations override them.
#[derive(Clone, Debug)]
pub struct Options {
    pub image: String,
    /// meshwrap's `--sidecar` items, comma-separated as `MESHWRAP_SIDECAR`
    /// gives them (`auto`, a preset, `NAME=PLACE[/QUIT_PLACE]`).
    pub sidecar: Option<String>,
    pub timeout: Option<String>,
    pub quit_policy: Option<String>,
    pub delivery: Delivery,
    /// `--mesh`: the meshes a namespace injects, which a manifest cannot show.
    pub meshes: Vec<Kind>,
    /// `--mesh auto`: what the namespace injects is not known, so a pod that
    /// shows no mesh a namespace can turn on gets every such mesh's switches
    /// (inert where that mesh is absent). `--mesh NAMES` or `none` says what
    /// the namespace injects.
    pub namespace_unseen: bool,
    /// `--workloads all`: wrap long-running kinds too (Deployments and the
    /// like, `operators::LONG_RUNNING`) and their pods; by default only
    /// batch work is wrapped, and those are left alone unreported.
    pub all_workloads: bool,
    pub native: Native,
    /// The UID of what meshwrap adds; `None`: the platform assigns one.
    pub run_as_user: Option<u32>,
    /// The resources of what meshwrap adds; `None`: none (a LimitRange's).
    pub resources: Option<Value>,
}

/// `N` (not 0: the containers run as non-root) or `none`.
pub fn parse_run_as_user(value: &str) -> Result<Option<u32>, String> {
    match value {
        "none" => Ok(None),
        _ => match value.parse::<u32>() {
            Ok(0) => Err("0 is root, which runAsNonRoot forbids: give a UID above 0, or none".into()),
            Ok(uid) => Ok(Some(uid)),
            Err(_) => Err(format!("\"{value}\" is not a UID above 0 or none")),
        },
    }
}

/// `requests.cpu=10m,limits.memory=32Mi,...` or `none`, as the container's
/// `resources`.
pub fn parse_resources(value: &str) -> Result<Option<Value>, String> {
    if value == "none" {
        return Ok(None);
    }
    let accepts = "KIND.RESOURCE=QUANTITY items, comma-separated (KIND: requests or limits; e.g. \
                   requests.cpu=10m,limits.memory=32Mi), or none";
    let mut resources = serde_json::Map::new();
    for item in value.split(',') {
        let parsed = item.split_once('=').and_then(|(name, quantity)| {
            let (kind, resource) = name.trim().split_once('.')?;
            let ok = ["requests", "limits"].contains(&kind) && !resource.is_empty() && is_quantity(quantity.trim());
            ok.then(|| (kind, resource, quantity.trim()))
        });
        let Some((kind, resource, quantity)) = parsed else {
            return Err(format!("\"{item}\" is not one of {accepts}"));
        };
        let entry = resources.entry(kind).or_insert_with(|| json!({}));
        entry[resource] = json!(quantity);
    }
    Ok(Some(Value::Object(resources)))
}

/// A Kubernetes quantity: a decimal number and an optional suffix.
fn is_quantity(q: &str) -> bool {
    let digits = q.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(q.len());
    let (number, suffix) = q.split_at(digits);
    let suffixes = [
        "", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei",
    ];
    number.parse::<f64>().is_ok() && !number.starts_with('.') && suffixes.contains(&suffix)
}

impl Default for Options {
    fn default() -> Options {
        Options {
            image: String::new(),
            sidecar: None,
            timeout: None,
            quit_policy: None,
            delivery: Delivery::InitContainer,
            meshes: Vec::new(),
            namespace_unseen: true,
            all_workloads: false,
            native: Native::Off,
            run_as_user: Some(DEFAULT_UID),
            resources: parse_resources(DEFAULT_RESOURCES).unwrap_or_default(),
        }
    }
}

/// What decides the quit policy when nothing names one.
#[derive(Clone, Debug, PartialEq)]
pub enum Restart {
    /// The pod spec's `restartPolicy`, or this when it has none.
    PodSpec(&'static str),
    /// A Kubeflow replica's `restartPolicy` (it overrides the pod's).
    Replica(Option<String>),
    /// An Argo step: Argo stops the sidecars itself.
    Argo,
    /// The pod spec's `restartPolicy`; when it has none, there is no default
    /// to assume, and the template is skipped for this reason.
    Required(String),
    /// No restart policy can be told: skipped for this reason.
    Unknown(String),
}

/// Where one pod template's parts are, from the document's root.
#[derive(Clone, Debug)]
pub struct Place {
    /// For reports: where in the document, or the replica's name.
    pub label: String,
    /// The pod's metadata (annotations go here; created when missing).
    pub metadata: Path,
    /// The pod spec, or an Argo template (which holds `container` or
    /// `script` and `initContainers`).
    pub spec: Path,
    /// The object that holds `volumes`: the pod spec, or Argo's workflow spec.
    pub volumes: Path,
    pub argo: bool,
    pub restart: Restart,
    /// The container the kind's operator names (`tensorflow`, `main`, ...).
    pub default_container: Option<&'static str>,
}

#[derive(Debug, PartialEq)]
pub enum Outcome {
    Injected {
        container: String,
        policy: String,
        guard: bool,
        ops: Vec<Op>,
        /// What else was added or left, for the report (a switch turned
        /// on, one the user set otherwise, a mesh Argo cannot stop).
        notes: Vec<String>,
    },
    /// `--native`: the meshes' native switches were set; nothing wrapped.
    Native { meshes: String, ops: Vec<Op> },
    /// Already wrapped: nothing to do.
    Unchanged(String),
    /// Not wrapped, and why.
    Skipped(Skip),
}

/// Why a pod is not wrapped: a short code that names the kind of reason (a
/// metrics label, so it never holds names) and the sentence a user reads.
#[derive(Clone, Debug, PartialEq)]
pub struct Skip {
    pub code: &'static str,
    pub why: String,
}

/// Skips that leave a pod alone on purpose: it opted out, or it has no
/// sidecar to wait for (the node's network, Windows). Nothing is half-wrapped
/// there, so `inject` reports them as unchanged, not as skips that fail it.
pub const DELIBERATE: [&str; 3] = ["opted-out", "host-network", "windows"];

/// A report's sentence with the plan's notes after it, `; `-separated.
pub fn with_notes(mut message: String, notes: &[String]) -> String {
    for note in notes {
        message.push_str("; ");
        message.push_str(note);
    }
    message
}

fn skip(code: &'static str, why: impl Into<String>) -> Outcome {
    Outcome::Skipped(Skip { code, why: why.into() })
}

fn text(v: Option<&Value>) -> Option<&str> {
    v.and_then(Value::as_str)
}

/// Puts `values` into the list `field` of the mapping at `path`: first or
/// last when the list is there, as a new list when it is not (or is null).
fn put(doc: &Value, path: &Path, field: &str, first: bool, values: Vec<Value>, ops: &mut Vec<Op>) {
    if values.is_empty() {
        return;
    }
    match get(doc, path).and_then(|v| v.get(field)) {
        Some(Value::Array(items)) => ops.push(Op::Insert {
            path: under(path, &[key(field)]),
            index: if first { 0 } else { items.len() },
            values,
        }),
        _ => ops.push(Op::Add {
            path: path.clone(),
            key: field.into(),
            value: Value::Array(values),
        }),
    }
}

/// How what meshwrap adds fits the platform: its UID and its resources.
#[derive(Clone, Debug, PartialEq)]
struct Fit {
    run_as_user: Option<u32>,
    resources: Option<Value>,
}

/// The restricted profile's securityContext, with the UID the platform
/// allows (or none, for it to assign), and the resources asked for.
fn hardened(mut container: Value, fit: &Fit) -> Value {
    let mut security = serde_json::Map::new();
    security.insert("runAsNonRoot".into(), json!(true));
    if let Some(uid) = fit.run_as_user {
        security.insert("runAsUser".into(), json!(uid));
        security.insert("runAsGroup".into(), json!(uid));
    }
    let rest = json!({
        "readOnlyRootFilesystem": true,
        "allowPrivilegeEscalation": false,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"}
    });
    security.extend(
        rest.as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.clone())),
    );
    container["securityContext"] = Value::Object(security);
    if let Some(resources) = &fit.resources {
        container["resources"] = resources.clone();
    }
    container
}

/// The UID and resources: the pod's annotations over the options.
fn fit(pod: &Pod, opts: &Options) -> Result<Fit, Outcome> {
    let bad = |name: &str, why: String| skip("bad-annotation", format!("{name}: {why}"));
    let run_as_user = match pod.annotation(RUN_AS_USER) {
        Some(v) => parse_run_as_user(v).map_err(|why| bad(RUN_AS_USER, why))?,
        None => opts.run_as_user,
    };
    let resources = match pod.annotation(RESOURCES) {
        Some(v) => parse_resources(v).map_err(|why| bad(RESOURCES, why))?,
        None => opts.resources.clone(),
    };
    Ok(Fit { run_as_user, resources })
}

/// The restart policy the pod template inherits (a Kubeflow replica's
/// overrides the pod's); `None` for an Argo step, which Argo ends itself;
/// skipped where none can be told (`operators.rs` has no default).
fn restart_policy(doc: &Value, place: &Place) -> Result<Option<String>, Outcome> {
    let own = || text(get(doc, &place.spec).and_then(|s| s.get("restartPolicy")));
    Ok(Some(match &place.restart {
        Restart::Argo => return Ok(None),
        Restart::Replica(policy) => policy.clone().unwrap_or_else(|| "Never".into()),
        Restart::PodSpec(default) => own().unwrap_or(default).to_string(),
        Restart::Required(why) => own().ok_or_else(|| skip("restart-policy", why.clone()))?.to_string(),
        Restart::Unknown(why) => return Err(skip("restart-policy", why.clone())),
    }))
}

/// The op that gives the pod whose metadata is at `metadata` the status
/// annotation `status` (see [`annotation_ops`]); None when there is no
/// place for metadata. A webhook's JSON Patch `add` of it also replaces a
/// status already there.
pub fn status_op(doc: &Value, metadata: &[Seg], status: String) -> Option<Op> {
    annotation_ops(doc, metadata, vec![(STATUS.to_string(), status)])?.pop()
}

/// The ops that give the pod whose metadata is at `metadata` these
/// annotations: into its annotations, as a new annotations mapping, or as
/// new metadata; None when there is no place for metadata.
fn annotation_ops(doc: &Value, metadata: &[Seg], entries: Vec<(String, String)>) -> Option<Vec<Op>> {
    let map = |entries: Vec<(String, String)>| -> Value {
        Value::Object(entries.into_iter().map(|(k, v)| (k, Value::String(v))).collect())
    };
    Some(match get(doc, metadata) {
        Some(Value::Object(m)) if m.get("annotations").is_some_and(Value::is_object) => entries
            .into_iter()
            .map(|(key, value)| Op::Add {
                path: under(metadata, &[crate::patch::key("annotations")]),
                key,
                value: Value::String(value),
            })
            .collect(),
        Some(Value::Object(_)) => vec![Op::Add {
            path: metadata.to_vec(),
            key: "annotations".into(),
            value: map(entries),
        }],
        _ => {
            let (parent, last) = metadata.split_at(metadata.len().saturating_sub(1));
            let Some(Seg::Key(field)) = last.first() else {
                return None;
            };
            vec![Op::Add {
                path: parent.to_vec(),
                key: field.clone(),
                value: json!({"annotations": map(entries)}),
            }]
        }
    })
}

/// Decides what to add to the pod template at `place` in `doc`: the
/// decisions in order, each a named step below, then the additions.
pub fn plan(doc: &Value, place: &Place, opts: &Options) -> Outcome {
    match decide(doc, place, opts) {
        Ok((pod, decision)) => additions(&pod, &decision, opts),
        Err(outcome) => outcome,
    }
}

/// The meshes the plan sees in the pod template at `place` (asked for,
/// already there, or named by `--mesh`), by name, for a report.
pub fn meshes_at(doc: &Value, place: &Place, opts: &Options) -> Vec<&'static str> {
    Pod::at(doc, place)
        .map(|pod| {
            meshes(&pod, opts)
                .iter()
                .filter(|f| !f.unseen)
                .map(|f| f.kind.facts().name)
                .collect()
        })
        .unwrap_or_default()
}

fn decide<'a>(doc: &'a Value, place: &'a Place, opts: &Options) -> Result<(Pod<'a>, Decision<'a>), Outcome> {
    let pod = Pod::at(doc, place)?;
    refusal(&pod)?;
    meshwrap_keys(&pod)?;
    let every = meshes(&pod, opts);
    // What the pod shows decides; what an unseen namespace may add gets
    // its switches only.
    let found: Vec<Found> = every.iter().filter(|f| !f.unseen).copied().collect();
    let native_notes = native_instead(&pod, opts, &found)?;
    let candidates = candidates(&pod)?;
    already_wrapped(&candidates)?;
    let chosen = pick_container(&pod, &candidates)?;
    needs_command(&chosen)?;
    let (policy, no_quit) = quit_policy(&pod, &chosen, opts)?;
    let (image, timeout) = settings(&pod, opts)?;
    let fit = fit(&pod, opts)?;
    let (mesh, cloudsql) = mesh(&pod, &every, opts, policy != "never")?;
    // A mesh an unseen namespace may add is quit (fail safe): only where
    // every mesh, seen or not, is one nothing in the pod quits is there no guard.
    let guard = policy != "never" && !mesh.native_only && !nothing_to_quit(&every);
    conflicts(&pod, &chosen)?;
    let podinfo = podinfo_volume(&chosen);
    let switches = switches(&pod, &every, policy != "never", cloudsql, &podinfo);
    let volumes = volumes(&pod, opts, &image, guard, &podinfo)?;
    Ok((
        pod,
        Decision {
            chosen,
            policy,
            no_quit,
            image,
            timeout,
            fit,
            mesh,
            guard,
            switches,
            native_notes,
            podinfo,
            volumes,
        },
    ))
}

/// One pod template and its parts, as the steps read it.
struct Pod<'a> {
    doc: &'a Value,
    place: &'a Place,
    spec: &'a Value,
    meta: Option<&'a Value>,
}

impl<'a> Pod<'a> {
    fn at(doc: &'a Value, place: &'a Place) -> Result<Pod<'a>, Outcome> {
        let spec = get(doc, &place.spec)
            .filter(|s| s.is_object())
            .ok_or_else(|| skip("no-pod-spec", "no pod spec"))?;
        Ok(Pod {
            doc,
            place,
            spec,
            meta: get(doc, &place.metadata),
        })
    }
    fn annotation(&self, name: &str) -> Option<&'a str> {
        self.metadata_value("annotations", name)
    }
    fn label(&self, name: &str) -> Option<&'a str> {
        self.metadata_value("labels", name)
    }
    /// An annotation's or label's value as the pod will have it: the
    /// template's own, else (an Argo template) what Argo adds to it.
    fn metadata_value(&self, map: &str, name: &str) -> Option<&'a str> {
        let own = text(self.meta.and_then(|m| m.get(map)).and_then(|a| a.get(name)));
        own.or_else(|| {
            self.inherited()
                .find_map(|m| text(m.get(map).and_then(|a| a.get(name))))
        })
    }
    /// An Argo template's inherited metadata, in Argo's precedence after
    /// the template's own (argoproj/argo-workflows v3.7.18: operator.go
    /// `mergedTemplateDefaultsInto` merges `templateDefaults` under the
    /// template, then workflowpod.go `addMetadata` writes
    /// `spec.podMetadata` first and the template's over it). A switch
    /// meshwrap writes goes on the template's own, which wins.
    fn inherited(&self) -> impl Iterator<Item = &'a Value> + use<'a, '_> {
        let workflow = self.place.argo.then(|| get(self.doc, &self.place.volumes)).flatten();
        [["templateDefaults", "metadata"], ["podMetadata", ""]]
            .into_iter()
            .filter_map(move |[a, b]| {
                let v = workflow?.get(a)?;
                if b.is_empty() { Some(v) } else { v.get(b) }
            })
    }
    /// A key's value, as the mesh facts ask for it.
    fn get(&self, key: Key) -> Option<&'a str> {
        match key.place {
            meshes::Place::Annotation => self.annotation(key.name),
            meshes::Place::Label => self.label(key.name),
        }
    }
    /// What holds the pod-level fields: the pod spec, or Argo's workflow spec.
    fn pod_level(&self) -> &'a Value {
        get(self.doc, &self.place.volumes).unwrap_or(self.spec)
    }
    /// A list of the pod spec's (`containers`, `initContainers`), or none.
    fn list(&self, field: &str) -> &'a [Value] {
        self.spec
            .get(field)
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice)
    }
}

/// One container that could be wrapped, with its path from the root.
struct Candidate<'a> {
    name: String,
    path: Path,
    container: &'a Value,
}

/// The mesh decision: the presets to name on meshwrap's command line (none:
/// meshwrap's own `--sidecar auto` reads the pod at run time), and whether
/// every mesh's proxy is a native sidecar the kubelet stops by itself.
#[derive(Debug, PartialEq)]
struct Mesh {
    sidecar: Vec<String>,
    native_only: bool,
}

/// What turns each mesh's quit on, and what is reported.
#[derive(Debug, Default, PartialEq)]
struct Switches {
    /// Annotations to add to the pod.
    annotations: Vec<(String, String)>,
    /// Flags to add to a proxy container's args: (its path, the flags).
    args: Option<(Path, Vec<&'static str>)>,
    notes: Vec<String>,
}

/// Everything decided about one pod, for [`additions`].
struct Decision<'a> {
    chosen: Candidate<'a>,
    policy: String,
    /// Exit codes the kubelet restarts the container on (`--no-quit-on-exit`).
    no_quit: Vec<(u8, u8)>,
    image: String,
    timeout: Option<String>,
    fit: Fit,
    mesh: Mesh,
    guard: bool,
    switches: Switches,
    /// `--native` asked for, and why the pod is wrapped instead.
    native_notes: Vec<String>,
    /// The volume mounted at [`PODINFO_DIR`]: the pod's own, or meshwrap's.
    podinfo: String,
    volumes: Vec<Value>,
}

/// Pods left alone whatever their containers: already injected, opted
/// out, on the node's network, or Windows.
fn refusal(pod: &Pod) -> Result<(), Outcome> {
    if pod.annotation(STATUS).is_some() {
        return Err(Outcome::Unchanged(format!("already injected ({STATUS})")));
    }
    // A plain `false` in YAML reads as a boolean (kubectl's YAML 1.1 too):
    // the user's intent is the same.
    let opted_out = |field: &str| {
        let value = pod
            .meta
            .into_iter()
            .chain(pod.inherited())
            .find_map(|m| m.get(field)?.get(INJECT));
        matches!(value, Some(Value::Bool(false))) || value.and_then(Value::as_str) == Some("false")
    };
    if opted_out("annotations") || opted_out("labels") {
        return Err(skip("opted-out", format!("opted out: {INJECT} is \"false\"")));
    }
    let host_network = |s: &Value| s.get("hostNetwork") == Some(&Value::Bool(true));
    if host_network(pod.pod_level()) || host_network(pod.spec) {
        return Err(skip(
            "host-network",
            "hostNetwork: a pod on the node's network has no sidecar to wait for",
        ));
    }
    let windows = |s: &Value| {
        text(s.pointer("/os/name")) == Some("windows")
            || text(s.pointer("/nodeSelector/kubernetes.io~1os")) == Some("windows")
    };
    if windows(pod.spec) || windows(pod.pod_level()) {
        return Err(skip("windows", "a Windows pod: meshwrap is a Linux binary"));
    }
    pod_spec_patch(pod)
}

/// An Argo template whose pod a `podSpecPatch` may give another command:
/// Argo merges each patch (the workflow's, then the template's, which
/// `templateDefaults` may supply) over the pod spec after the template is
/// built, and a container's `command` there replaces meshwrap's wrap
/// (argoproj/argo-workflows v3.7.18 workflowpod.go `processPodSpecPatch`,
/// util.go `ApplyPodSpecPatch`: a strategic merge, containers by name).
/// The patch is text, often with `{{...}}` in it, so any patch that names
/// `command` is refused with where it is; the rest cannot change it.
fn pod_spec_patch(pod: &Pod) -> Result<(), Outcome> {
    if !pod.place.argo {
        return Ok(());
    }
    let workflow = get(pod.doc, &pod.place.volumes);
    let patches = [
        ("the template's podSpecPatch", pod.spec.get("podSpecPatch")),
        (
            "templateDefaults.podSpecPatch",
            workflow.and_then(|w| w.pointer("/templateDefaults/podSpecPatch")),
        ),
        (
            "the workflow's podSpecPatch",
            workflow.and_then(|w| w.get("podSpecPatch")),
        ),
    ];
    match patches
        .into_iter()
        .find(|(_, patch)| patch.and_then(Value::as_str).is_some_and(|p| p.contains("command")))
    {
        Some((which, _)) => Err(skip(
            "pod-spec-patch",
            format!(
                "{which} names a command, which Argo merges over the container's after inject's wrap: put the \
                 command in the template's container instead"
            ),
        )),
        None => Ok(()),
    }
}

/// The `meshwrap.io/` annotations a pod template may carry; as a label,
/// only the opt-in and opt-out.
const POD_KEYS: [&str; 10] = [
    STATUS,
    CONTAINER,
    QUIT_POLICY,
    IMAGE,
    TIMEOUT,
    SIDECAR,
    RUN_AS_USER,
    RESOURCES,
    NATIVE,
    INJECT,
];

/// Every `meshwrap.io/` key on the pod is one meshwrap reads, and its
/// opt-in or opt-out is `true` or `false`: a misspelt key (`quitpolicy`,
/// `timout`) or an opt-out of `"no"` would otherwise be ignored and the pod
/// wrapped with the defaults. Either is a skip naming the key (and the
/// closest known one); the webhook admits such a pod unwrapped, with the
/// reason as a Warning Event.
fn meshwrap_keys(pod: &Pod) -> Result<(), Outcome> {
    for (field, known) in [("annotations", &POD_KEYS[..]), ("labels", &[INJECT][..])] {
        let Some(map) = pod.meta.and_then(|m| m.get(field)).and_then(Value::as_object) else {
            continue;
        };
        for (name, value) in map.iter().filter(|(k, _)| k.starts_with("meshwrap.io/")) {
            if !known.contains(&name.as_str()) {
                let near = crate::closest(name, known).map_or(String::new(), |k| format!(" (did you mean {k}?)"));
                let place = &field[..field.len() - 1];
                return Err(skip(
                    "bad-annotation",
                    format!(
                        "{name}: not a meshwrap.io/ {place} meshwrap reads{near}; it reads {}",
                        known.join(", ")
                    ),
                ));
            }
            let switch = matches!(value, Value::Bool(_)) || matches!(value.as_str(), Some("true" | "false"));
            if name == INJECT && !switch {
                return Err(skip(
                    "bad-annotation",
                    format!("{INJECT}: {value} is not \"true\" or \"false\" (\"false\" leaves the pod alone)"),
                ));
            }
        }
    }
    Ok(())
}

/// The containers to choose from: an Argo template's one, or the pod's.
fn candidates<'a>(pod: &Pod<'a>) -> Result<Vec<Candidate<'a>>, Outcome> {
    let mut candidates = Vec::new();
    if pod.place.argo {
        if pod.spec.get("containerSet").is_some() {
            return Err(skip(
                "argo-container-set",
                "an Argo containerSet template: wrap its main container by hand",
            ));
        }
        for field in ["container", "script"] {
            if let Some(container) = pod.spec.get(field) {
                let path = under(&pod.place.spec, &[key(field)]);
                candidates.push(Candidate {
                    name: "main".into(),
                    path,
                    container,
                });
            }
        }
        return Ok(candidates);
    }
    for (i, container) in pod.list("containers").iter().enumerate() {
        candidates.push(Candidate {
            name: text(container.get("name")).unwrap_or("").to_string(),
            path: under(&pod.place.spec, &[key("containers"), Seg::Index(i)]),
            container,
        });
    }
    Ok(candidates)
}

/// A container whose command already runs meshwrap: nothing to do.
fn already_wrapped(candidates: &[Candidate]) -> Result<(), Outcome> {
    let runs_meshwrap =
        |c: &Value| text(c.pointer("/command/0")).is_some_and(|p| p == "meshwrap" || p.ends_with("/meshwrap"));
    match candidates.iter().find(|c| runs_meshwrap(c.container)) {
        Some(c) => Err(Outcome::Unchanged(format!(
            "container {} already runs meshwrap",
            c.name
        ))),
        None => Ok(()),
    }
}

/// Which container to wrap: the annotation's, then the pod's default
/// container, then the kind's, then the only one that is not a sidecar.
fn pick_container<'a>(pod: &Pod, candidates: &[Candidate<'a>]) -> Result<Candidate<'a>, Outcome> {
    let is_sidecar = |name: &str| KNOWN_SIDECARS.contains(&name) && !pod.place.argo;
    let regular: Vec<&Candidate<'a>> = candidates.iter().filter(|c| !is_sidecar(&c.name)).collect();
    let named = |wanted: Option<&str>| wanted.and_then(|w| regular.iter().copied().find(|c| c.name == w));
    let chosen = if let Some(wanted) = pod.annotation(CONTAINER) {
        match candidates.iter().find(|c| c.name == wanted) {
            Some(c) if is_sidecar(wanted) => {
                return Err(skip(
                    "bad-annotation",
                    format!("{CONTAINER} names {}, a sidecar", c.name),
                ));
            }
            Some(c) => c,
            None => {
                return Err(skip(
                    "bad-annotation",
                    format!("{CONTAINER} names {wanted}, which is not a container of the pod"),
                ));
            }
        }
    } else if let Some(c) = named(pod.annotation("kubectl.kubernetes.io/default-container")) {
        c
    } else if let Some(c) = named(pod.place.default_container) {
        c
    } else {
        match regular.as_slice() {
            [only] => only,
            [] => return Err(skip("no-container", "no container to wrap")),
            several => return Err(ambiguous(several)),
        }
    };
    Ok(Candidate {
        name: chosen.name.clone(),
        path: chosen.path.clone(),
        container: chosen.container,
    })
}

fn ambiguous(several: &[&Candidate]) -> Outcome {
    let names: Vec<&str> = several.iter().map(|c| c.name.as_str()).collect();
    skip(
        "ambiguous-container",
        format!(
            "{} containers ({}) and none is the default: name one with the {CONTAINER} annotation",
            names.len(),
            names.join(", ")
        ),
    )
}

/// meshwrap goes in front of the command, so the command must be written.
fn needs_command(chosen: &Candidate) -> Result<(), Outcome> {
    match chosen.container.get("command") {
        Some(Value::Array(items)) if !items.is_empty() && items.iter().all(Value::is_string) => Ok(()),
        _ => Err(skip("no-command", no_command(chosen))),
    }
}

/// What to do about a container with no command: the image's ENTRYPOINT
/// (and CMD, where it has no args) is what runs, which only the registry
/// knows. KubeRay writes a submitter's command itself when it has none
/// (ray-operator/controllers/ray/common/job.go, GetK8sJobCommand).
fn no_command(chosen: &Candidate) -> String {
    let image = chosen.container.get("image").and_then(Value::as_str).unwrap_or("IMAGE");
    if chosen.name == "ray-job-submitter" {
        return format!(
            "container {} has no command, so KubeRay writes one itself (ray job submit ... -- the entrypoint), \
             which inject cannot see: set its command to the ray job submit line",
            chosen.name
        );
    }
    format!(
        "container {} has no command, and the image's ENTRYPOINT cannot be known here: set its command to the \
         image's ENTRYPOINT followed by its CMD where the container has no args (crane config {image}, or docker \
         inspect {image}, shows them)",
        chosen.name
    )
}

/// The quit policy: the annotation, then the option, then what the
/// container's restart behaviour calls for (its own restart policy over the
/// pod's, and its restart rules); with the exit codes that restart it.
fn quit_policy(pod: &Pod, chosen: &Candidate, opts: &Options) -> Result<(String, Vec<(u8, u8)>), Outcome> {
    let (derived, no_quit) = match restart_policy(pod.doc, pod.place)? {
        None => ("never", Vec::new()),
        Some(inherited) => restart::restarts(chosen.container, &inherited)
            .map(|set| restart::quit_policy(&set))
            .map_err(|why| skip("restart-rules", format!("container {}: {why}", chosen.name)))?,
    };
    let policy = match pod
        .annotation(QUIT_POLICY)
        .map(str::to_string)
        .or(opts.quit_policy.clone())
    {
        Some(p) if ["always", "on-success", "never"].contains(&p.as_str()) => p,
        Some(p) => {
            return Err(skip(
                "bad-annotation",
                format!("{QUIT_POLICY}: \"{p}\" is not always, on-success or never"),
            ));
        }
        None => derived.to_string(),
    };
    if pod.place.argo && policy != "never" {
        return Err(skip(
            "bad-annotation",
            format!("quit policy {policy} on an Argo step: Argo stops the sidecars itself, so its steps take never"),
        ));
    }
    Ok((policy, no_quit))
}

/// The image and the readiness timeout: annotations over options.
fn settings(pod: &Pod, opts: &Options) -> Result<(String, Option<String>), Outcome> {
    let image = pod.annotation(IMAGE).unwrap_or(&opts.image).to_string();
    if image.trim().is_empty() {
        return Err(skip(
            "bad-annotation",
            format!("{IMAGE} is empty: it names the meshwrap image, e.g. registry.example.com/meshwrap:0.1.0"),
        ));
    }
    // A pod whose image no runtime can pull never starts: not wrapped so.
    if let Err(why) = crate::image_reference(&image) {
        return Err(skip("bad-annotation", format!("{IMAGE}: {why}")));
    }
    let timeout = pod.annotation(TIMEOUT).map(str::to_string).or(opts.timeout.clone());
    if let Some(t) = &timeout
        && meshwrap::duration::parse(t).is_none()
    {
        return Err(skip(
            "bad-annotation",
            format!("{TIMEOUT}: \"{t}\" is not a duration (e.g. 90s, 10m, 1h)"),
        ));
    }
    Ok((image, timeout))
}

/// The meshes of this pod, from its template and `--mesh`.
fn meshes(pod: &Pod, opts: &Options) -> Vec<Found> {
    with_template(pod, |template| {
        mesh::find(template, &opts.meshes, opts.namespace_unseen)
    })
}

/// Runs `f` on the pod as the mesh table reads a template.
fn with_template<R>(pod: &Pod, f: impl FnOnce(&mesh::Template) -> R) -> R {
    let (annotation, label) = (|name: &str| pod.annotation(name), |name: &str| pod.label(name));
    let template = mesh::Template {
        annotation: &annotation,
        label: &label,
        containers: pod.list("containers"),
        init_containers: pod.list("initContainers"),
    };
    f(&template)
}

/// The items of a `--sidecar` list (comma-separated, as `MESHWRAP_SIDECAR`).
fn sidecar_items(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(str::to_string)
        .collect()
}

/// Every mesh found is one nothing in the pod may quit (Kuma: its control
/// plane or the kubelet stops it), so a guard would have nothing to do.
fn nothing_to_quit(found: &[Found]) -> bool {
    !found.is_empty() && found.iter().all(|f| f.kind.facts().no_quit.is_some())
}

/// The presets meshwrap is told about, and whether every mesh is native.
/// Only a sidecar no annotation reveals is named: a Cloud SQL proxy the
/// spec declares, at the places its flags and variables give (added to
/// `auto`; an annotation or option that names other presets wins).
fn mesh<'a>(
    pod: &Pod<'a>,
    found: &[Found],
    opts: &Options,
    quits: bool,
) -> Result<(Mesh, Option<(Path, mesh::CloudSql)>), Outcome> {
    // A mesh an unseen namespace may add is not native (nothing proves
    // it): its proxy is quit, and the guard stays.
    let native_only = !found.is_empty() && found.iter().all(|f| f.native) && !pod.place.argo;
    let named = pod
        .annotation(SIDECAR)
        .or(opts.sidecar.as_deref())
        .map(sidecar_items)
        .unwrap_or_default();
    for item in &named {
        if !item.eq_ignore_ascii_case("auto")
            && let Err(e) = meshwrap::sidecar::preset::parse(item)
        {
            return Err(skip("bad-annotation", format!("{SIDECAR}: {e}")));
        }
    }
    let cloudsql = cloudsql(pod, found, quits)?;
    let preset = |item: &String| item.split('=').next().unwrap_or("").trim().to_ascii_lowercase();
    let auto = named.is_empty() || named.iter().any(|item| preset(item) == "auto");
    let mut sidecar = named.clone();
    if let Some((_, plan)) = &cloudsql
        && auto
        && !named.iter().any(|item| preset(item) == meshes::CLOUDSQL.name)
    {
        match &plan.sidecar {
            Ok(item) if item.is_empty() => {}
            Ok(item) => {
                if sidecar.is_empty() {
                    sidecar.push("auto".into());
                }
                sidecar.push(item.clone());
            }
            Err(why) => return Err(skip("cloudsql-ports", why.clone())),
        }
    }
    Ok((Mesh { sidecar, native_only }, cloudsql))
}

/// The pod's Cloud SQL Auth Proxy, where the spec declares one: its path
/// and what it needs. A v1 proxy (`gce-proxy`) has none of v2's flags and
/// no quit endpoint: refused where a quit is due and the kubelet does not
/// stop it, otherwise left alone and not waited for.
fn cloudsql<'a>(pod: &Pod<'a>, found: &[Found], quits: bool) -> Result<Option<(Path, mesh::CloudSql)>, Outcome> {
    let Some(f) = found.iter().find(|f| f.kind == Kind::CloudSql) else {
        return Ok(None);
    };
    let Some((init, index)) = with_template(pod, |template| mesh::proxy_container(template, Kind::CloudSql)) else {
        return Ok(None);
    };
    let field = if init { "initContainers" } else { "containers" };
    let proxy = &pod.list(field)[index];
    let path = under(&pod.place.spec, &[key(field), Seg::Index(index)]);
    if !mesh::cloudsql_v1(proxy) {
        return Ok(Some((path, mesh::cloudsql(proxy))));
    }
    if quits && !f.native {
        return Err(skip(
            "cloudsql-v1",
            format!(
                "the Cloud SQL proxy is v1 ({}), which has no quit endpoint, so nothing could end it and the pod would \
                 never complete: use the v2 proxy (gcr.io/cloud-sql-connectors/cloud-sql-proxy) or run it as a native \
                 sidecar (an init container with restartPolicy: Always)",
                meshes::CLOUDSQL_V1_IMAGE
            ),
        ));
    }
    let v1 = mesh::CloudSql {
        add: Vec::new(),
        against: Vec::new(),
        sidecar: Ok(String::new()),
        notes: vec!["the Cloud SQL proxy is v1, which has none of v2's flags: it is not waited for".into()],
    };
    Ok(Some((path, v1)))
}

/// What each mesh needs for meshwrap's quit to work (when a quit is due):
/// Linkerd's and Vault's quit endpoints are off unless the pod turns them
/// on; a Cloud SQL proxy needs `--health-check` for its readiness and
/// `--quitquitquit` for its quit; an Argo step's proxy may need Argo's
/// kill command (and the switch that command needs). A value the user set
/// otherwise is reported, not changed.
/// `podinfo`: the volume of the pod's annotations, for a kill command
/// that runs meshwrap in the proxy's container.
fn switches(
    pod: &Pod,
    found: &[Found],
    quits: bool,
    cloudsql: Option<(Path, mesh::CloudSql)>,
    podinfo: &str,
) -> Switches {
    let mut out = Switches::default();
    for f in found.iter().filter(|f| !f.native && !f.unseen) {
        mesh_switches(pod, f.kind.facts(), quits, podinfo, &mut out);
    }
    if let Some((path, plan)) = cloudsql {
        let native = found.iter().any(|f| f.kind == Kind::CloudSql && f.native);
        cloudsql_args(path, plan, quits && !native, &mut out);
    }
    unseen_switches(pod, found, quits, podinfo, &mut out);
    if let Some(note) = init_before_istio(pod, found) {
        out.notes.push(note);
    }
    out
}

/// The note for the pod's own init containers under Istio's classic
/// sidecar: they run before it starts, while the capture (istio-init's, or
/// Istio CNI's) already sends their outbound TCP to 15001, where nothing
/// listens yet; only the proxy's UID, 1337, is let through (istio 1.30.3
/// `tools/istio-iptables/pkg/capture/run.go`: `--uid-owner` RETURN; the
/// exclusion annotation: `injection-template.yaml`). No
/// wrap can fix that, so it is said. Native sidecars (restartPolicy
/// Always) and Istio's and meshwrap's own are not the user's init work.
fn init_before_istio(pod: &Pod, found: &[Found]) -> Option<String> {
    if !found.iter().any(|f| f.kind == Kind::Istio && !f.native && !f.unseen) {
        return None;
    }
    let inits = pod.spec.get("initContainers").and_then(Value::as_array)?;
    let own: Vec<&str> = inits
        .iter()
        .filter(|c| text(c.get("restartPolicy")) != Some("Always"))
        .filter_map(|c| text(c.get("name")))
        .filter(|n| !["istio-init", "istio-validation", INSTALL_CONTAINER].contains(n))
        .collect();
    if own.is_empty() {
        return None;
    }
    Some(format!(
        "init container {} runs before Istio's sidecar, with its outbound TCP captured and no proxy yet: \
         run it as UID 1337, exclude what it reaches (traffic.sidecar.istio.io/excludeOutboundIPRanges), \
         or make the sidecar native",
        own.join(", ")
    ))
}

/// One mesh's quit switch (when a quit is due) and Argo's kill command.
fn mesh_switches(pod: &Pod, facts: &meshes::Mesh, quits: bool, podinfo: &str, out: &mut Switches) {
    if quits {
        quit_switch(pod, facts, out);
        job_settings(pod, facts, out);
    }
    // An Argo step (Argo's restart rule): its template offline, or the pod
    // Argo made of it at admission (Argo reads the kill command from the
    // live pod's annotations). A kill command that runs meshwrap quits as
    // meshwrap does: what a Job's quit needs, Argo's does too.
    let argo_step = pod.place.restart == Restart::Argo;
    if argo_step && argo_kill(pod, facts, podinfo, out) && !quits {
        job_settings(pod, facts, out);
    }
}

/// The switches of the meshes an unseen namespace may turn on, with one
/// note that names them and how to say what the namespace injects.
fn unseen_switches(pod: &Pod, found: &[Found], quits: bool, podinfo: &str, out: &mut Switches) {
    let unseen: Vec<&Found> = found.iter().filter(|f| f.unseen).collect();
    if unseen.is_empty() {
        return;
    }
    let mut more = Switches::default();
    for f in &unseen {
        mesh_switches(pod, f.kind.facts(), quits, podinfo, &mut more);
    }
    let names: Vec<&str> = unseen.iter().map(|f| f.kind.facts().name).collect();
    let keys: Vec<&str> = more.annotations.iter().map(|(k, _)| k.as_str()).collect();
    // Nothing written for them (no quit due, no Argo step): nothing to say.
    if keys.is_empty() {
        return;
    }
    out.notes.push(format!(
        "the namespace is not seen here and may inject {}: set {} for them (inert without them); --mesh names \
         what it injects, or none",
        names.join(" or "),
        keys.join(", ")
    ));
    out.annotations.extend(more.annotations);
}

/// The mesh's quit switch, turned on unless the pod set it (a value its
/// injector reads as on is left; any other is reported).
fn quit_switch(pod: &Pod, facts: &meshes::Mesh, out: &mut Switches) {
    let Some(switch) = &facts.quit_switch else {
        return;
    };
    let key = switch.key.name;
    match pod.annotation(key) {
        None if out.annotations.iter().any(|(k, _)| k == key) => {}
        None => {
            out.annotations.push((key.into(), switch.on.into()));
            out.notes.push(format!(
                "set {key}: {}, which turns {}'s quit on",
                switch.on, facts.name
            ));
        }
        Some(v) if switch.parser.read(v) == Read::On => {}
        Some(v) => out.notes.push(format!(
            "{key} is \"{v}\": left as set, so the {} proxy will refuse meshwrap's quit",
            facts.name
        )),
    }
}

/// The settings the table says a Job's pod needs (Consul's shutdown grace
/// period), each only where the user set none and its switch is not off:
/// a value the user set stays, reported where it differs.
fn job_settings(pod: &Pod, facts: &meshes::Mesh, out: &mut Switches) {
    for setting in facts.job_settings {
        let key = setting.key.name;
        match pod.annotation(key) {
            _ if !setting.applies(&|k| pod.get(k)) => {}
            None if out.annotations.iter().any(|(k, _)| k == key) => {}
            None => {
                out.annotations.push((key.into(), setting.value.into()));
                out.notes
                    .push(format!("set {key}: \"{}\": {}", setting.value, setting.why));
            }
            Some(v) if v == setting.value => {}
            Some(v) => out.notes.push(format!(
                "{key} is \"{v}\": left as set (meshwrap would write \"{}\")",
                setting.value
            )),
        }
    }
}

/// Argo stops an injected proxy with `kill` through `/bin/sh`, which
/// distroless proxy images lack: the table gives the command that works
/// (and a command that asks the proxy's quit endpoint gets its switch; one
/// that runs meshwrap gets meshwrap mounted into the proxy's container).
/// `true` when it wrote one that runs meshwrap.
fn argo_kill(pod: &Pod, facts: &meshes::Mesh, podinfo: &str, out: &mut Switches) -> bool {
    let key = format!("{ARGO_KILL}{}", facts.proxy);
    match (&facts.argo_kill, pod.annotation(&key)) {
        (_, Some(_)) => {}
        (Some(kill), None) => {
            if let Some(mounts) = kill.mounts
                && !mount_meshwrap(pod, facts, mounts, podinfo, out)
            {
                return false;
            }
            out.notes
                .push(format!("set {key}, so Argo can stop {} without a shell", facts.proxy));
            out.annotations.push((key, kill.command.into()));
            if kill.needs_quit_switch {
                quit_switch(pod, facts, out);
            }
            return kill.mounts.is_some();
        }
        (None, None) if [meshes::DAPR.name, meshes::CLOUDSQL.name].contains(&facts.name) => out.notes.push(format!(
            "Argo stops {} through /bin/sh, which its image lacks: give it {key} or make it a native sidecar",
            facts.proxy
        )),
        (None, None) => {}
    }
    false
}

/// The volume mounts that put meshwrap (at [`BIN_DIR`]) and the pod's
/// annotations (at [`PODINFO_DIR`]) into the proxy's container, through
/// its injector's annotation `mounts`, which it appends to the
/// container's own (consul-k8s v2.0.3 `consul_dataplane_sidecar.go`).
/// `false`, with a note, where the user set that annotation: never changed.
fn mount_meshwrap(pod: &Pod, facts: &meshes::Mesh, mounts: meshes::Key, podinfo: &str, out: &mut Switches) -> bool {
    let value = serde_json::json!([
        {"name": BIN_VOLUME, "mountPath": BIN_DIR, "readOnly": true},
        {"name": podinfo, "mountPath": PODINFO_DIR, "readOnly": true},
    ]);
    if pod.annotation(mounts.name).is_some() {
        out.notes.push(format!(
            "{} is set: left as set, so Argo cannot stop {} (add {value} to it, and set {ARGO_KILL}{} to {})",
            mounts.name,
            facts.proxy,
            facts.proxy,
            facts.argo_kill.as_ref().map_or("", |k| k.command),
        ));
        return false;
    }
    out.notes.push(format!(
        "set {}, so {} has meshwrap and the pod's annotations for Argo's kill command",
        mounts.name, facts.proxy
    ));
    out.annotations.push((mounts.name.to_string(), value.to_string()));
    true
}

/// The Cloud SQL proxy's missing flags, added to its args, and its notes.
fn cloudsql_args(proxy: Path, plan: mesh::CloudSql, quits: bool, out: &mut Switches) {
    let mut add = plan.add;
    add.retain(|flag| quits || *flag != meshes::CLOUDSQL_QUITQUITQUIT.flag);
    for flag in plan.against {
        out.notes.push(format!(
            "the Cloud SQL proxy has {flag}: left as set, so it will refuse meshwrap's quit or readiness"
        ));
    }
    out.notes.extend(plan.notes);
    if !add.is_empty() {
        out.notes
            .push(format!("added {} to the Cloud SQL proxy's args", add.join(" ")));
        out.args = Some((proxy, add));
    }
}

/// `--native`: where every mesh of the pod has a per-pod native switch, set
/// those switches instead of wrapping (an `Outcome::Native` as the early
/// answer); refuse a mesh without one unless the wrapper is the fallback.
/// A native switch the pod sets to a value some version of its injector
/// does not read as native is left as set and reported, and the pod is
/// wrapped instead: the notes.
fn native_instead(pod: &Pod, opts: &Options, found: &[Found]) -> Result<Vec<String>, Outcome> {
    let mode = match pod.annotation(NATIVE) {
        Some(v) => Native::parse(v).ok_or_else(|| {
            skip(
                "bad-annotation",
                format!("{NATIVE}: \"{v}\" is not true, prefer or false"),
            )
        })?,
        None => opts.native,
    };
    if mode == Native::Off {
        return Ok(Vec::new());
    }
    let set_otherwise: Vec<String> = found
        .iter()
        .filter(|f| !f.native)
        .filter_map(|f| {
            let (key, value) = f.kind.facts().native_set_otherwise(&|k| pod.get(k))?;
            Some(format!(
                "native: {key} is \"{value}\": left as set, so {}'s proxy runs as a regular container; wrapped instead",
                f.kind.facts().name
            ))
        })
        .collect();
    if !set_otherwise.is_empty() {
        return Ok(set_otherwise);
    }
    let fallback = mode == Native::Prefer;
    let lacking: Vec<&str> = found
        .iter()
        .filter(|f| !f.native && f.kind.facts().native.is_empty())
        .map(|f| f.kind.facts().name)
        .collect();
    match (found.is_empty(), lacking.is_empty()) {
        (true, _) | (_, false) if fallback => Ok(Vec::new()),
        (true, _) => Err(skip(
            "native",
            "native: no mesh found for the pod to switch; name it with --mesh",
        )),
        (_, false) => Err(skip(
            "native",
            format!(
                "native: {} has no per-pod native switch; wrap it instead (--native prefer, or {NATIVE}: prefer, falls back to the wrapper)",
                lacking.join(", ")
            ),
        )),
        _ => Err(native_switches(pod, found)),
    }
}

/// The annotations that make every found mesh's proxy native (the key each
/// version of its injector reads first), and the status.
fn native_switches(pod: &Pod, found: &[Found]) -> Outcome {
    let mut entries = Vec::new();
    for f in found.iter().filter(|f| !f.native) {
        for key in f.kind.facts().native_keys() {
            if pod.annotation(key).is_none() {
                entries.push((key.to_string(), "true".to_string()));
            }
        }
    }
    let names: Vec<&str> = found.iter().map(|f| f.kind.facts().name).collect();
    entries.push((STATUS.into(), json!({"version": VERSION, "native": names}).to_string()));
    match annotation_ops(pod.doc, &pod.place.metadata, entries) {
        Some(ops) => Outcome::Native {
            meshes: names.join(", "),
            ops,
        },
        None => skip("no-metadata", "no place for the pod's metadata"),
    }
}

/// What must not be in the way: mounts at meshwrap's directories and
/// containers (of either list: names are unique across both) with
/// meshwrap's names.
fn conflicts(pod: &Pod, chosen: &Candidate) -> Result<(), Outcome> {
    for dir in [BIN_DIR, GUARD_DIR] {
        if mounted_at(chosen, dir).is_some() {
            return Err(skip(
                "conflict",
                format!("container {} already mounts something at {dir}", chosen.name),
            ));
        }
    }
    let names = pod.list("containers").iter().chain(pod.list("initContainers"));
    if let Some(taken) = names
        .filter_map(|c| text(c.get("name")))
        .find(|n| [GUARD_CONTAINER, INSTALL_CONTAINER].contains(n))
    {
        return Err(skip(
            "conflict",
            format!("a container named {taken} is already there, and meshwrap needs that name"),
        ));
    }
    Ok(())
}

/// The chosen container's mount at `dir`, if any (`/mesh/` is `/mesh`).
fn mounted_at<'a>(chosen: &Candidate<'a>, dir: &str) -> Option<&'a Value> {
    let mounts = chosen.container.get("volumeMounts").and_then(Value::as_array)?;
    let clean = |p: &str| p.trim_end_matches('/').to_string();
    mounts
        .iter()
        .find(|m| text(m.get("mountPath")).is_some_and(|p| clean(p) == dir))
}

/// The pod's own annotations volume, when the container mounts one where
/// meshwrap reads it; otherwise meshwrap's.
fn podinfo_volume(chosen: &Candidate) -> String {
    match mounted_at(chosen, PODINFO_DIR).and_then(|m| text(m.get("name"))) {
        Some(own) => own.to_string(),
        None => PODINFO_VOLUME.to_string(),
    }
}

/// The volumes to add; one of the same name must be the same volume (an
/// Argo workflow's volumes are shared by its steps), or the pod is skipped.
fn volumes(pod: &Pod, opts: &Options, image: &str, guard: bool, podinfo: &str) -> Result<Vec<Value>, Outcome> {
    let mut wanted = vec![match opts.delivery {
        Delivery::InitContainer => json!({"name": BIN_VOLUME, "emptyDir": {"sizeLimit": "16Mi"}}),
        Delivery::ImageVolume => {
            json!({"name": BIN_VOLUME, "image": {"reference": image, "pullPolicy": "IfNotPresent"}})
        }
    }];
    if guard {
        wanted.push(json!({"name": GUARD_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}));
    }
    if podinfo == PODINFO_VOLUME {
        wanted.push(json!({
            "name": PODINFO_VOLUME,
            "downwardAPI": {"items": [
                {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}},
                {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}
            ]}
        }));
    }
    let existing = pod
        .pod_level()
        .get("volumes")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    let mut added = Vec::new();
    for volume in wanted {
        let name = text(volume.get("name")).unwrap_or_default();
        match existing.iter().find(|v| text(v.get("name")) == Some(name)) {
            Some(v) if *v == volume => {}
            Some(_) => return Err(skip("conflict", format!("the pod already has a volume named {name}"))),
            None => added.push(volume),
        }
    }
    Ok(added)
}

/// meshwrap's flags, shared by the wrapped command and the guard.
fn flags(d: &Decision) -> Vec<String> {
    let mut flags = vec!["--quit-policy".to_string(), d.policy.clone()];
    if !d.no_quit.is_empty() {
        flags.extend(["--no-quit-on-exit".into(), restart::flag(&d.no_quit)]);
    }
    if d.guard {
        flags.extend(["--guard-dir".into(), GUARD_DIR.into()]);
    }
    for s in &d.mesh.sidecar {
        flags.extend(["--sidecar".into(), s.clone()]);
    }
    if d.mesh.native_only {
        flags.extend(["--native-sidecar".into(), "true".into()]);
    }
    if let Some(t) = &d.timeout {
        flags.extend(["--timeout".into(), t.clone()]);
    }
    flags
}

/// The additions, in order: the command prefix, the mounts, the install
/// init container, the guard, the volumes, the status annotation.
fn additions(pod: &Pod, d: &Decision, opts: &Options) -> Outcome {
    let flags = flags(d);
    let (doc, place, path) = (pod.doc, pod.place, &d.chosen.path);
    let mut ops = Vec::new();
    let mut prefix = vec![json!(format!("{BIN_DIR}/meshwrap"))];
    prefix.extend(flags.iter().map(|f| json!(f)));
    prefix.push(json!("--"));
    ops.push(Op::Insert {
        path: under(path, &[key("command")]),
        index: 0,
        values: prefix,
    });
    let mut mounts = vec![json!({"name": BIN_VOLUME, "mountPath": BIN_DIR, "readOnly": true})];
    if d.guard {
        mounts.push(json!({"name": GUARD_VOLUME, "mountPath": GUARD_DIR}));
    }
    if d.podinfo == PODINFO_VOLUME {
        mounts.push(json!({"name": PODINFO_VOLUME, "mountPath": PODINFO_DIR, "readOnly": true}));
    }
    put(doc, path, "volumeMounts", false, mounts, &mut ops);
    if opts.delivery == Delivery::InitContainer {
        put(
            doc,
            &place.spec,
            "initContainers",
            true,
            vec![install_container(d)],
            &mut ops,
        );
    }
    if d.guard {
        put(
            doc,
            &place.spec,
            "containers",
            false,
            vec![guard_container(d, &flags)],
            &mut ops,
        );
    }
    put(doc, &place.volumes, "volumes", false, d.volumes.clone(), &mut ops);
    if let Some((proxy, flags)) = &d.switches.args {
        put(
            doc,
            proxy,
            "args",
            false,
            flags.iter().map(|f| json!(f)).collect(),
            &mut ops,
        );
    }
    let mut annotations = d.switches.annotations.clone();
    annotations.push((STATUS.into(), status(d, opts)));
    match annotation_ops(doc, &place.metadata, annotations) {
        Some(more) => ops.extend(more),
        None => return skip("no-metadata", "no place for the pod's metadata"),
    }
    Outcome::Injected {
        container: d.chosen.name.clone(),
        policy: d.policy.clone(),
        guard: d.guard,
        ops,
        notes: notes(d),
    }
}

/// The status annotation: what was done, and by which version.
fn status(d: &Decision, opts: &Options) -> String {
    json!({
        "version": VERSION,
        "container": d.chosen.name,
        "quitPolicy": d.policy,
        "guard": d.guard,
        "delivery": opts.delivery.name(),
    })
    .to_string()
}

/// What the report says beyond the container and the policy.
fn notes(d: &Decision) -> Vec<String> {
    let mut notes = d.native_notes.clone();
    notes.extend(d.switches.notes.iter().cloned());
    if !d.no_quit.is_empty() {
        let codes = restart::flag(&d.no_quit);
        notes.insert(
            0,
            format!("--no-quit-on-exit {codes}: the kubelet restarts the container on those"),
        );
    }
    notes
}

/// The init container that copies meshwrap into its volume.
fn install_container(d: &Decision) -> Value {
    let container = json!({
        "name": INSTALL_CONTAINER,
        "image": d.image,
        "args": ["install", BIN_DIR],
        "volumeMounts": [{"name": BIN_VOLUME, "mountPath": BIN_DIR}]
    });
    hardened(container, &d.fit)
}

/// The guard container: meshwrap's own flags after `guard`.
fn guard_container(d: &Decision, flags: &[String]) -> Value {
    let mut args = vec![json!("guard")];
    args.extend(flags.iter().map(|f| json!(f)));
    let container = json!({
        "name": GUARD_CONTAINER,
        "image": d.image,
        "args": args,
        "volumeMounts": [
            {"name": GUARD_VOLUME, "mountPath": GUARD_DIR},
            {"name": d.podinfo, "mountPath": PODINFO_DIR, "readOnly": true}
        ]
    });
    hardened(container, &d.fit)
}
