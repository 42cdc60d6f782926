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

/// Decides what to add to the pod template at `place` in `doc`.
pub fn plan(doc: &Value, place: &Place, opts: &Options) -> Outcome {
    let Some(spec) = get(doc, &place.spec).filter(|s| s.is_object()) else {
        return skip("no-pod-spec", "no pod spec");
    };
    let meta = get(doc, &place.metadata);
    let annotation = |name: &str| text(meta.and_then(|m| m.get("annotations")).and_then(|a| a.get(name)));
    let label = |name: &str| text(meta.and_then(|m| m.get("labels")).and_then(|a| a.get(name)));
    if annotation(STATUS).is_some() {
        return Outcome::Unchanged(format!("already injected ({STATUS})"));
    }
    if annotation(INJECT) == Some("false") || label(INJECT) == Some("false") {
        return skip("opted-out", format!("opted out: {INJECT} is \"false\""));
    }
    let pod_level = get(doc, &place.volumes).unwrap_or(spec);
    if pod_level.get("hostNetwork") == Some(&Value::Bool(true)) || spec.get("hostNetwork") == Some(&Value::Bool(true)) {
        return skip(
            "host-network",
            "hostNetwork: a pod on the node's network has no sidecar to wait for",
        );
    }
    let windows = |s: &Value| {
        text(s.pointer("/os/name")) == Some("windows")
            || text(s.pointer("/nodeSelector/kubernetes.io~1os")) == Some("windows")
    };
    if windows(spec) || windows(pod_level) {
        return skip("windows", "a Windows pod: meshwrap is a Linux binary");
    }

    // The containers to choose from, each with its path.
    let mut candidates: Vec<(String, Path, &Value)> = Vec::new();
    if place.argo {
        if spec.get("containerSet").is_some() {
            return skip(
                "argo-container-set",
                "an Argo containerSet template: wrap its main container by hand",
            );
        }
        for field in ["container", "script"] {
            if let Some(c) = spec.get(field) {
                candidates.push(("main".into(), under(&place.spec, &[key(field)]), c));
            }
        }
    } else if let Some(Value::Array(list)) = spec.get("containers") {
        for (i, c) in list.iter().enumerate() {
            let name = text(c.get("name")).unwrap_or("").to_string();
            candidates.push((name, under(&place.spec, &[key("containers"), Seg::Index(i)]), c));
        }
    }
    let runs_meshwrap =
        |c: &Value| text(c.pointer("/command/0")).is_some_and(|p| p == "meshwrap" || p.ends_with("/meshwrap"));
    if let Some((name, _, _)) = candidates.iter().find(|(_, _, c)| runs_meshwrap(c)) {
        return Outcome::Unchanged(format!("container {name} already runs meshwrap"));
    }
    let regular: Vec<&(String, Path, &Value)> = candidates
        .iter()
        .filter(|(name, _, _)| !KNOWN_SIDECARS.contains(&name.as_str()) || place.argo)
        .collect();
    let chosen = if let Some(wanted) = annotation(CONTAINER) {
        match candidates.iter().find(|(n, _, _)| n == wanted) {
            Some(c) if KNOWN_SIDECARS.contains(&wanted) && !place.argo => {
                return skip("bad-annotation", format!("{CONTAINER} names {}, a sidecar", c.0));
            }
            Some(c) => c,
            None => {
                return skip(
                    "bad-annotation",
                    format!("{CONTAINER} names {wanted}, which is not a container of the pod"),
                );
            }
        }
    } else if let Some(c) = annotation("kubectl.kubernetes.io/default-container")
        .and_then(|wanted| regular.iter().copied().find(|(n, _, _)| n == wanted))
    {
        c
    } else if let Some(c) = place
        .default_container
        .and_then(|wanted| regular.iter().copied().find(|(n, _, _)| n == wanted))
    {
        c
    } else if regular.len() == 1 {
        regular[0]
    } else if regular.is_empty() {
        return skip("no-container", "no container to wrap");
    } else {
        let names: Vec<&str> = regular.iter().map(|(n, _, _)| n.as_str()).collect();
        return skip(
            "ambiguous-container",
            format!(
                "{} containers ({}) and none is the default: name one with the {CONTAINER} annotation",
                names.len(),
                names.join(", ")
            ),
        );
    };
    let (name, path, container) = chosen;
    match container.get("command") {
        Some(Value::Array(items)) if !items.is_empty() && items.iter().all(Value::is_string) => {}
        _ => {
            return skip(
                "no-command",
                format!(
                    "container {name} has no command, and the image's ENTRYPOINT cannot be known here: set its command"
                ),
            );
        }
    }

    // The options: annotations over flags over what the pod implies.
    let policy = match annotation(QUIT_POLICY).map(str::to_string).or(opts.quit_policy.clone()) {
        Some(p) if ["always", "on-success", "never"].contains(&p.as_str()) => p,
        Some(p) => {
            return skip(
                "bad-annotation",
                format!("{QUIT_POLICY}: \"{p}\" is not always, on-success or never"),
            );
        }
        None => policy_for(doc, place),
    };
    if place.argo && policy != "never" {
        return skip(
            "bad-annotation",
            format!("quit policy {policy} on an Argo step: Argo stops the sidecars itself, so its steps take never"),
        );
    }
    let image = annotation(IMAGE).unwrap_or(&opts.image).to_string();
    let timeout = annotation(TIMEOUT).map(str::to_string).or(opts.timeout.clone());
    if let Some(t) = &timeout
        && meshwrap::duration::parse(t).is_none()
    {
        return skip(
            "bad-annotation",
            format!("{TIMEOUT}: \"{t}\" is not a duration (e.g. 90s, 10m, 1h)"),
        );
    }
    // A sidecar the pod spec already names (rather than one a mesh injects
    // later) picks its preset; a native one (an init container that keeps
    // running) is stopped by the kubelet, so meshwrap must not quit it and
    // no guard is needed.
    let init = spec
        .get("initContainers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let native: Vec<&Value> = init
        .iter()
        .filter(|c| text(c.get("restartPolicy")) == Some("Always"))
        .collect();
    let regular_sidecar = candidates
        .iter()
        .any(|(n, _, _)| n != "wait" && KNOWN_SIDECARS.contains(&n.as_str()));
    let native_only = !native.is_empty() && !regular_sidecar && !place.argo;
    let named = candidates
        .iter()
        .map(|(n, _, _)| n.as_str())
        .chain(native.iter().filter_map(|c| text(c.get("name"))))
        .find_map(preset_of);
    let sidecar = annotation(SIDECAR)
        .map(str::to_string)
        .or(opts.sidecar.clone())
        .or(named.map(str::to_string));
    if let Some(s) = &sidecar
        && let Err(e) = meshwrap::sidecar::preset::parse(s)
    {
        return skip("bad-annotation", format!("{SIDECAR}: {e}"));
    }
    let guard = policy != "never" && !native_only;

    // What must not be in the way.
    let volumes_path = &place.volumes;
    let existing_volumes: Vec<&Value> = get(doc, volumes_path)
        .and_then(|v| v.get("volumes"))
        .and_then(Value::as_array)
        .map(|v| v.iter().collect())
        .unwrap_or_default();
    let mounts: Vec<&Value> = container
        .get("volumeMounts")
        .and_then(Value::as_array)
        .map(|v| v.iter().collect())
        .unwrap_or_default();
    let mounted_at = |dir: &str| mounts.iter().find(|m| text(m.get("mountPath")) == Some(dir));
    for dir in [BIN_DIR, GUARD_DIR] {
        if mounted_at(dir).is_some() {
            return skip(
                "conflict",
                format!("container {name} already mounts something at {dir}"),
            );
        }
    }
    let taken = |list: &[Value], what: &str| list.iter().filter_map(|c| text(c.get("name"))).any(|n| n == what);
    let siblings = |field: &str| spec.get(field).and_then(Value::as_array).cloned().unwrap_or_default();
    if taken(&siblings("containers"), GUARD_CONTAINER) || taken(&siblings("initContainers"), INSTALL_CONTAINER) {
        return skip(
            "conflict",
            format!("a container named {GUARD_CONTAINER} or {INSTALL_CONTAINER} is already there"),
        );
    }

    let bin_volume = match opts.delivery {
        Delivery::InitContainer => json!({"name": BIN_VOLUME, "emptyDir": {"sizeLimit": "16Mi"}}),
        Delivery::ImageVolume => {
            json!({"name": BIN_VOLUME, "image": {"reference": image, "pullPolicy": "IfNotPresent"}})
        }
    };
    let guard_volume = json!({"name": GUARD_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}});
    let podinfo_volume = json!({
        "name": PODINFO_VOLUME,
        "downwardAPI": {"items": [{"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}}]}
    });
    // The pod's own annotations volume, when the container mounts one where
    // meshwrap reads it.
    let podinfo = match mounted_at(PODINFO_DIR).and_then(|m| text(m.get("name"))) {
        Some(own) => own.to_string(),
        None => PODINFO_VOLUME.to_string(),
    };
    let mut new_volumes = Vec::new();
    let mut wanted = vec![bin_volume];
    if guard {
        wanted.push(guard_volume);
    }
    if podinfo == PODINFO_VOLUME {
        wanted.push(podinfo_volume);
    }
    for volume in wanted {
        let vname = text(volume.get("name")).unwrap_or_default();
        match existing_volumes.iter().find(|v| text(v.get("name")) == Some(vname)) {
            // An Argo workflow's volumes are shared by its steps.
            Some(v) if **v == volume => {}
            Some(_) => return skip("conflict", format!("the pod already has a volume named {vname}")),
            None => new_volumes.push(volume),
        }
    }

    let mut flags = vec!["--quit-policy".to_string(), policy.clone()];
    if guard {
        flags.extend(["--guard-dir".into(), GUARD_DIR.into()]);
    }
    if let Some(s) = &sidecar {
        flags.extend(["--sidecar".into(), s.clone()]);
    }
    if native_only {
        flags.extend(["--native-sidecar".into(), "true".into()]);
    }
    if let Some(t) = &timeout {
        flags.extend(["--timeout".into(), t.clone()]);
    }

    let mut ops = Vec::new();
    let mut prefix = vec![json!(format!("{BIN_DIR}/meshwrap"))];
    prefix.extend(flags.iter().map(|f| json!(f)));
    prefix.push(json!("--"));
    ops.push(Op::Insert {
        path: under(path, &[key("command")]),
        index: 0,
        values: prefix,
    });
    let mut new_mounts = vec![json!({"name": BIN_VOLUME, "mountPath": BIN_DIR, "readOnly": true})];
    if guard {
        new_mounts.push(json!({"name": GUARD_VOLUME, "mountPath": GUARD_DIR}));
    }
    if podinfo == PODINFO_VOLUME {
        new_mounts.push(json!({"name": PODINFO_VOLUME, "mountPath": PODINFO_DIR, "readOnly": true}));
    }
    put(doc, path, "volumeMounts", false, new_mounts, &mut ops);
    if opts.delivery == Delivery::InitContainer {
        let install = hardened(json!({
            "name": INSTALL_CONTAINER,
            "image": image,
            "args": ["install", BIN_DIR],
            "volumeMounts": [{"name": BIN_VOLUME, "mountPath": BIN_DIR}]
        }));
        put(doc, &place.spec, "initContainers", true, vec![install], &mut ops);
    }
    if guard {
        let mut args = vec![json!("guard")];
        args.extend(flags.iter().map(|f| json!(f)));
        let guard = hardened(json!({
            "name": GUARD_CONTAINER,
            "image": image,
            "args": args,
            "volumeMounts": [
                {"name": GUARD_VOLUME, "mountPath": GUARD_DIR},
                {"name": podinfo, "mountPath": PODINFO_DIR, "readOnly": true}
            ]
        }));
        put(doc, &place.spec, "containers", false, vec![guard], &mut ops);
    }
    put(doc, volumes_path, "volumes", false, new_volumes, &mut ops);

    let status = json!({
        "version": VERSION,
        "container": name,
        "quitPolicy": policy,
        "guard": guard,
        "delivery": opts.delivery.name(),
    })
    .to_string();
    match status_op(doc, &place.metadata, status) {
        Some(op) => ops.push(op),
        None => return skip("no-metadata", "no place for the pod's metadata"),
    }
    Outcome::Injected {
        container: name.clone(),
        policy,
        guard,
        ops,
    }
}
