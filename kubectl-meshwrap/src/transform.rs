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

use crate::patch::{Op, Path, Seg, get, key, under};

pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// What was done to a pod, and by which version.
pub const STATUS: &str = "meshwrap.io/status";
pub const CONTAINER: &str = "meshwrap.io/container";
pub const QUIT_POLICY: &str = "meshwrap.io/quit-policy";
pub const IMAGE: &str = "meshwrap.io/image";
pub const TIMEOUT: &str = "meshwrap.io/timeout";
pub const SIDECAR: &str = "meshwrap.io/sidecar";
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

/// Containers that are sidecars, never the workload.
pub const KNOWN_SIDECARS: [&str; 7] = [
    "istio-proxy",
    "linkerd-proxy",
    "daprd",
    "vault-agent",
    "cloud-sql-proxy",
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

/// The options every front end takes; pod annotations override them.
#[derive(Clone, Debug)]
pub struct Options {
    pub image: String,
    pub sidecar: Option<String>,
    pub timeout: Option<String>,
    pub quit_policy: Option<String>,
    pub delivery: Delivery,
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
    },
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

/// The restricted profile's securityContext and small resources, for what
/// meshwrap adds.
fn hardened(mut container: Value) -> Value {
    container["securityContext"] = json!({
        "runAsNonRoot": true,
        "runAsUser": 65532,
        "runAsGroup": 65532,
        "readOnlyRootFilesystem": true,
        "allowPrivilegeEscalation": false,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"}
    });
    container["resources"] = json!({
        "requests": {"cpu": "10m", "memory": "8Mi"},
        "limits": {"cpu": "100m", "memory": "32Mi"}
    });
    container
}

/// The quit policy a restart behaviour calls for.
fn policy_for(doc: &Value, place: &Place) -> String {
    let restart = match &place.restart {
        Restart::Argo => return "never".into(),
        Restart::Replica(policy) => policy.clone().unwrap_or_else(|| "Never".into()),
        Restart::PodSpec(default) => text(get(doc, &place.spec).and_then(|s| s.get("restartPolicy")))
            .unwrap_or(default)
            .to_string(),
    };
    match restart.as_str() {
        "OnFailure" => "on-success",
        "Always" => "never",
        _ => "always",
    }
    .into()
}

/// The meshwrap preset for a sidecar container's usual name (Istio's is
/// meshwrap's default, so it needs none).
fn preset_of(container: &str) -> Option<&'static str> {
    Some(match container {
        "linkerd-proxy" => "linkerd",
        "cloud-sql-proxy" => "cloudsql",
        "vault-agent" => "vault",
        "daprd" => "dapr",
        _ => return None,
    })
}

/// The op that gives the pod whose metadata is at `metadata` the status
/// annotation `status`: into its annotations, a new annotations mapping, or
/// new metadata; None when there is no place for metadata. A webhook's JSON
/// Patch `add` of it also replaces a status already there.
pub fn status_op(doc: &Value, metadata: &[Seg], status: String) -> Option<Op> {
    let mut annotations = serde_json::Map::new();
    annotations.insert(STATUS.into(), Value::String(status));
    Some(match get(doc, metadata) {
        Some(Value::Object(m)) if m.get("annotations").is_some_and(Value::is_object) => Op::Add {
            path: under(metadata, &[key("annotations")]),
            key: STATUS.into(),
            value: annotations.remove(STATUS)?,
        },
        Some(Value::Object(_)) => Op::Add {
            path: metadata.to_vec(),
            key: "annotations".into(),
            value: Value::Object(annotations),
        },
        _ => {
            let (parent, last) = metadata.split_at(metadata.len().saturating_sub(1));
            let Some(Seg::Key(field)) = last.first() else {
                return None;
            };
            Op::Add {
                path: parent.to_vec(),
                key: field.clone(),
                value: json!({"annotations": annotations}),
            }
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

fn decide<'a>(doc: &'a Value, place: &'a Place, opts: &Options) -> Result<(Pod<'a>, Decision<'a>), Outcome> {
    let pod = Pod::at(doc, place)?;
    refusal(&pod)?;
    let candidates = candidates(&pod)?;
    already_wrapped(&candidates)?;
    let chosen = pick_container(&pod, &candidates)?;
    needs_command(&chosen)?;
    let policy = quit_policy(&pod, opts)?;
    let (image, timeout) = settings(&pod, opts)?;
    let mesh = mesh(&pod, &candidates, opts)?;
    let guard = policy != "never" && !mesh.native_only;
    conflicts(&pod, &chosen)?;
    let podinfo = podinfo_volume(&chosen);
    let volumes = volumes(&pod, opts, &image, guard, &podinfo)?;
    Ok((
        pod,
        Decision {
            chosen,
            policy,
            image,
            timeout,
            mesh,
            guard,
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
        text(self.meta.and_then(|m| m.get("annotations")).and_then(|a| a.get(name)))
    }
    fn label(&self, name: &str) -> Option<&'a str> {
        text(self.meta.and_then(|m| m.get("labels")).and_then(|a| a.get(name)))
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

/// The mesh decision: the preset to name, and whether the mesh's proxy is
/// a native sidecar the kubelet stops by itself.
#[derive(Debug, PartialEq)]
struct Mesh {
    sidecar: Option<String>,
    native_only: bool,
}

/// Everything decided about one pod, for [`additions`].
struct Decision<'a> {
    chosen: Candidate<'a>,
    policy: String,
    image: String,
    timeout: Option<String>,
    mesh: Mesh,
    guard: bool,
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
    if pod.annotation(INJECT) == Some("false") || pod.label(INJECT) == Some("false") {
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
        _ => Err(skip(
            "no-command",
            format!(
                "container {} has no command, and the image's ENTRYPOINT cannot be known here: set its command",
                chosen.name
            ),
        )),
    }
}

/// The quit policy: the annotation, then the option, then what the pod's
/// restart behaviour calls for.
fn quit_policy(pod: &Pod, opts: &Options) -> Result<String, Outcome> {
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
        None => policy_for(pod.doc, pod.place),
    };
    if pod.place.argo && policy != "never" {
        return Err(skip(
            "bad-annotation",
            format!("quit policy {policy} on an Argo step: Argo stops the sidecars itself, so its steps take never"),
        ));
    }
    Ok(policy)
}

/// The image and the readiness timeout: annotations over options.
fn settings(pod: &Pod, opts: &Options) -> Result<(String, Option<String>), Outcome> {
    let image = pod.annotation(IMAGE).unwrap_or(&opts.image).to_string();
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

/// The mesh: a sidecar the pod spec already names (rather than one a mesh
/// injects later) picks its preset; a native one (an init container that
/// keeps running) is stopped by the kubelet, so meshwrap must not quit it
/// and no guard is needed.
fn mesh(pod: &Pod, candidates: &[Candidate], opts: &Options) -> Result<Mesh, Outcome> {
    let native: Vec<&Value> = pod
        .list("initContainers")
        .iter()
        .filter(|c| text(c.get("restartPolicy")) == Some("Always"))
        .collect();
    let regular_sidecar = candidates
        .iter()
        .any(|c| c.name != "wait" && KNOWN_SIDECARS.contains(&c.name.as_str()));
    let native_only = !native.is_empty() && !regular_sidecar && !pod.place.argo;
    let named = candidates
        .iter()
        .map(|c| c.name.as_str())
        .chain(native.iter().filter_map(|c| text(c.get("name"))))
        .find_map(preset_of);
    let sidecar = pod
        .annotation(SIDECAR)
        .map(str::to_string)
        .or(opts.sidecar.clone())
        .or(named.map(str::to_string));
    if let Some(s) = &sidecar
        && let Err(e) = meshwrap::sidecar::preset::parse(s)
    {
        return Err(skip("bad-annotation", format!("{SIDECAR}: {e}")));
    }
    Ok(Mesh { sidecar, native_only })
}

/// What must not be in the way: mounts at meshwrap's directories and
/// containers with meshwrap's names.
fn conflicts(pod: &Pod, chosen: &Candidate) -> Result<(), Outcome> {
    for dir in [BIN_DIR, GUARD_DIR] {
        if mounted_at(chosen, dir).is_some() {
            return Err(skip(
                "conflict",
                format!("container {} already mounts something at {dir}", chosen.name),
            ));
        }
    }
    let taken = |list: &[Value], what: &str| list.iter().filter_map(|c| text(c.get("name"))).any(|n| n == what);
    if taken(pod.list("containers"), GUARD_CONTAINER) || taken(pod.list("initContainers"), INSTALL_CONTAINER) {
        return Err(skip(
            "conflict",
            format!("a container named {GUARD_CONTAINER} or {INSTALL_CONTAINER} is already there"),
        ));
    }
    Ok(())
}

/// The chosen container's mount at `dir`, if any.
fn mounted_at<'a>(chosen: &Candidate<'a>, dir: &str) -> Option<&'a Value> {
    let mounts = chosen.container.get("volumeMounts").and_then(Value::as_array)?;
    mounts.iter().find(|m| text(m.get("mountPath")) == Some(dir))
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
            "downwardAPI": {"items": [{"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}}]}
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
    if d.guard {
        flags.extend(["--guard-dir".into(), GUARD_DIR.into()]);
    }
    if let Some(s) = &d.mesh.sidecar {
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
            vec![install_container(&d.image)],
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
    let status = json!({
        "version": VERSION,
        "container": d.chosen.name,
        "quitPolicy": d.policy,
        "guard": d.guard,
        "delivery": opts.delivery.name(),
    })
    .to_string();
    match status_op(doc, &place.metadata, status) {
        Some(op) => ops.push(op),
        None => return skip("no-metadata", "no place for the pod's metadata"),
    }
    Outcome::Injected {
        container: d.chosen.name.clone(),
        policy: d.policy.clone(),
        guard: d.guard,
        ops,
    }
}

/// The init container that copies meshwrap into its volume.
fn install_container(image: &str) -> Value {
    hardened(json!({
        "name": INSTALL_CONTAINER,
        "image": image,
        "args": ["install", BIN_DIR],
        "volumeMounts": [{"name": BIN_VOLUME, "mountPath": BIN_DIR}]
    }))
}

/// The guard container: meshwrap's own flags after `guard`.
fn guard_container(d: &Decision, flags: &[String]) -> Value {
    let mut args = vec![json!("guard")];
    args.extend(flags.iter().map(|f| json!(f)));
    hardened(json!({
        "name": GUARD_CONTAINER,
        "image": d.image,
        "args": args,
        "volumeMounts": [
            {"name": GUARD_VOLUME, "mountPath": GUARD_DIR},
            {"name": d.podinfo, "mountPath": PODINFO_DIR, "readOnly": true}
        ]
    }))
}
