//! Kubeflow Trainer v2: a TrainJob runs the pod templates of its runtime (a
//! TrainingRuntime or ClusterTrainingRuntime), except that its
//! `spec.trainer.command`, `args` and `image` REPLACE the `node` container's
//! in the Job labelled as the trainer, and its `env` is merged into them
//! (the facts, cited: `operators::TRAINER_OVERRIDE`, `TRAINER_RUNTIME_REF`
//! and `TRAINER_PODS`). So meshwrap's command prefix,
//! written into a runtime, is gone the moment a TrainJob sets a command,
//! while the guard and the quit switches stay: under `on-success` that guard
//! gives up after `--start-timeout` without a quit, and the pod never ends.
//!
//! The design, and the side each decision takes (a quit too many costs a
//! sidecar that was ending anyway; a quit too few costs a pod that runs
//! forever):
//! - An injected runtime's trainer `node` container also gets meshwrap's
//!   settings as `MESHWRAP_*` env (the flags of its prefix, which meshwrap
//!   reads from env as well). Trainer merges env, it does not replace it, so
//!   the settings survive a TrainJob's override.
//! - A TrainJob's `spec.trainer.command` is wrapped as `/mesh/meshwrap --
//!   CMD`: the settings come from that env, so a TrainJob needs to know
//!   nothing of its runtime's mesh or restart policy.
//! - A runtime whose `node` has no command (Trainer's own runtimes: the
//!   image's ENTRYPOINT runs, which cannot be known here) gets the init
//!   container, volumes, guard, switches and env, but no wrap: its report
//!   warns that each TrainJob on it must set `spec.trainer.command` and be
//!   injected (or the webhook must complete its pods). That is the one place
//!   inject writes a guard beside a command it cannot see wrapped; it says
//!   so, on every such runtime.
//! - A TrainJob is decided against its runtime when the runtime is in the
//!   same run (`Runtimes`, read from every input before anything is
//!   planned): a runtime not injected is a skip (a wrapped command would
//!   find no `/mesh/meshwrap`; an unwrapped one its runtime's guard-less
//!   pod, which is the runtime's own skip to fix); a command nowhere is a
//!   skip naming `spec.trainer.command`. A runtime not in the run cannot be
//!   checked: the command is wrapped anyway (if the runtime was not
//!   injected, `node` fails at once for want of `/mesh/meshwrap`, which is
//!   seen; left unwrapped beside an injected runtime's guard it would never
//!   end, which is not), and the report says what it assumed.
//! - The webhook, given a pod whose status says meshwrap wrapped a
//!   container that no longer starts meshwrap (a TrainJob replaced its
//!   command), completes the wrap instead of calling the pod "already
//!   injected": [`complete`].

use std::collections::HashMap;

use serde_json::{Value, json};

use crate::patch::{self, Op, Path, Seg, get, key, under};
use crate::transform::{self, BIN_DIR, GUARD_CONTAINER, GUARD_DIR, Options, Outcome, Place, STATUS};
use crate::workloads;

pub const GROUP: &str = "trainer.kubeflow.org";
/// The label on a runtime's replicated Job that Trainer's builder reads.
pub const ANCESTOR: &str = "trainer.kubeflow.org/trainjob-ancestor-step";
/// The ancestor value of the Job whose `node` a TrainJob's trainer overrides.
pub const ANCESTOR_TRAINER: &str = "trainer";
/// The container a TrainJob's trainer overrides.
pub const NODE: &str = "node";

/// meshwrap's flags (as the prefix gives them) and the variables meshwrap
/// reads for each (meshwrap's `src/cli/args.rs`, `env =`). A repeated flag's
/// values join with commas, as `MESHWRAP_SIDECAR` reads them.
pub const ENV: [(&str, &str); 6] = [
    ("--quit-policy", "MESHWRAP_QUIT_POLICY"),
    ("--no-quit-on-exit", "MESHWRAP_NO_QUIT_ON_EXIT"),
    ("--guard-dir", "MESHWRAP_GUARD_DIR"),
    ("--sidecar", "MESHWRAP_SIDECAR"),
    ("--native-sidecar", "MESHWRAP_NATIVE_SIDECAR"),
    ("--timeout", "MESHWRAP_TIMEOUT"),
];
/// The variable every injected trainer `node` carries: its mark.
const MARK: &str = "MESHWRAP_QUIT_POLICY";

pub fn is_runtime(kind: &str) -> bool {
    kind == "TrainingRuntime" || kind == "ClusterTrainingRuntime"
}

/// A Trainer TrainJob (its API group's, not a kind of the same name).
pub fn is_trainjob(object: &Value) -> bool {
    text(object.get("kind")) == Some("TrainJob")
        && text(object.get("apiVersion")).is_some_and(|a| a.starts_with("trainer.kubeflow.org/"))
}

fn text(v: Option<&Value>) -> Option<&str> {
    v.and_then(Value::as_str)
}

/// Whether the pod template at `place` (a runtime's
/// `replicatedJobs[i].template.spec.template`) is in the Job whose `node`
/// a TrainJob's trainer overrides: that Job's ancestor label is `trainer`.
pub fn overridden(doc: &Value, place: &Place) -> bool {
    let job = &place.spec[..place.spec.len().saturating_sub(3)];
    let labels = get(doc, job).and_then(|j| j.pointer("/metadata/labels"));
    text(labels.and_then(|l| l.get(ANCESTOR))) == Some(ANCESTOR_TRAINER)
}

/// The `node` container of the pod template at `place`: its path and value.
fn node<'a>(doc: &'a Value, place: &Place) -> Option<(Path, &'a Value)> {
    let containers = get(doc, &place.spec)?.get("containers")?.as_array()?;
    let i = containers.iter().position(|c| text(c.get("name")) == Some(NODE))?;
    Some((under(&place.spec, &[key("containers"), Seg::Index(i)]), &containers[i]))
}

fn has_command(container: &Value) -> bool {
    container
        .get("command")
        .and_then(Value::as_array)
        .is_some_and(|c| !c.is_empty())
}

fn runs_meshwrap(command: &[Value]) -> bool {
    text(command.first()).is_some_and(|p| p == "meshwrap" || p.ends_with("/meshwrap"))
}

/// The `MESHWRAP_*` variables that say what a command prefix's flags say.
pub fn env_of(prefix: &[Value]) -> Vec<(&'static str, String)> {
    let mut out: Vec<(&'static str, String)> = Vec::new();
    let mut items = prefix.iter().skip(1).filter_map(Value::as_str);
    while let Some(flag) = items.next() {
        if flag == "--" {
            break;
        }
        let Some((_, name)) = ENV.iter().find(|(f, _)| *f == flag) else {
            continue;
        };
        let value = items.next().unwrap_or_default();
        match out.iter_mut().find(|(n, _)| n == name) {
            Some((_, joined)) => {
                joined.push(',');
                joined.push_str(value);
            }
            None => out.push((name, value.to_string())),
        }
    }
    out
}

/// A runtime's pod template: as [`transform::plan`] decides it, and, in the
/// Job a TrainJob's trainer overrides, with meshwrap's settings as `node`'s
/// env and the warning; a `node` with no command is prepared, not wrapped.
pub fn plan_runtime(doc: &Value, place: &Place, opts: &Options) -> Outcome {
    let outcome = transform::plan(doc, place, opts);
    let Some((path, container)) = node(doc, place).filter(|_| overridden(doc, place)) else {
        return outcome;
    };
    if let Some(why) = rewrites_command(doc, place) {
        return Outcome::Skipped(transform::Skip {
            code: "trainer-flux",
            why: why.into(),
        });
    }
    match outcome {
        Outcome::Injected { ref container, .. } if container != NODE => outcome,
        Outcome::Injected {
            policy,
            guard,
            ops,
            notes,
            ..
        } => with_env(doc, &path, (policy, guard), ops, notes, false),
        Outcome::Skipped(skip) if skip.code == "no-command" && !has_command(container) => {
            prepared(doc, place, &path, opts).unwrap_or(Outcome::Skipped(skip))
        }
        other => other,
    }
}

/// Why Trainer runs a command of its own in the trainer `node` of the
/// runtime holding `place`, whatever the runtime or a TrainJob says: its
/// flux plugin replaces the TrainJob's command with its entrypoint, given
/// the original command as one string. Inject would leave a guard beside
/// that unwrapped command (and a wrapped TrainJob command would run inside
/// Flux), so such a runtime is the webhook's, which sees the pod's command.
fn rewrites_command(doc: &Value, place: &Place) -> Option<&'static str> {
    let runtime = get(doc, &place.spec[..place.spec.len().saturating_sub(9)])?;
    runtime.pointer("/spec/mlPolicy/flux").map(|_| {
        "mlPolicy.flux: Trainer's flux plugin replaces node's command with its own entrypoint \
         (/bin/bash /etc/flux-config/entrypoint.sh CMD), which inject cannot wrap: leave this runtime and its \
         TrainJobs to the webhook, which wraps the pods Trainer builds"
    })
}

/// A `node` with no command: planned as if it had one, less the wrap.
fn prepared(doc: &Value, place: &Place, node: &Path, opts: &Options) -> Option<Outcome> {
    let mut copy = doc.clone();
    patch::apply(
        &mut copy,
        &Op::Add {
            path: node.clone(),
            key: "command".into(),
            value: json!(["meshwrap-placeholder"]),
        },
    );
    let Outcome::Injected {
        container,
        policy,
        guard,
        ops,
        notes,
    } = transform::plan(&copy, place, opts)
    else {
        return None;
    };
    (container == NODE).then(|| with_env(doc, node, (policy, guard), ops, notes, true))
}

/// The plan's ops with `node`'s env added (from the command prefix, which
/// is dropped when `unwrapped`), and the note the report carries.
fn with_env(
    doc: &Value,
    node: &Path,
    (policy, guard): (String, bool),
    mut ops: Vec<Op>,
    mut notes: Vec<String>,
    unwrapped: bool,
) -> Outcome {
    let command = under(node, &[key("command")]);
    let at = ops
        .iter()
        .position(|op| matches!(op, Op::Insert { path, index: 0, .. } if *path == command));
    let prefix = match at {
        Some(i) if unwrapped => match ops.remove(i) {
            Op::Insert { values, .. } => values,
            _ => Vec::new(),
        },
        Some(i) => match &ops[i] {
            Op::Insert { values, .. } => values.clone(),
            _ => Vec::new(),
        },
        None => Vec::new(),
    };
    let (env_ops, kept) = env_ops(doc, node, env_of(&prefix));
    ops.extend(env_ops);
    notes.extend(kept);
    notes.push(if unwrapped { UNWRAPPED } else { WRAPPED }.to_string());
    Outcome::Injected {
        container: NODE.into(),
        policy,
        guard,
        ops,
        notes,
    }
}

const WRAPPED: &str = "warning: a TrainJob that sets spec.trainer.command replaces node's command and meshwrap's \
prefix with it (the MESHWRAP_* env added here stays: Trainer merges env): inject those TrainJobs too, which wraps \
their command, or let the webhook complete their pods";
const UNWRAPPED: &str = "node has no command (its image's ENTRYPOINT runs, which cannot be known here), so it is \
not wrapped: the guard, volumes and MESHWRAP_* env are there for a TrainJob's command; warning: every TrainJob \
using this runtime must set spec.trainer.command and be injected too, or the webhook must complete its pods, \
else the guard waits beside an unwrapped command and gives up after --start-timeout without quitting the sidecar";

/// The ops that add `vars` to the container at `node` (a variable it sets
/// already is left as set, and said).
fn env_ops(doc: &Value, node: &Path, vars: Vec<(&'static str, String)>) -> (Vec<Op>, Vec<String>) {
    let existing = get(doc, node).and_then(|c| c.get("env")).and_then(Value::as_array);
    let set = |name: &str| {
        existing
            .into_iter()
            .flatten()
            .any(|e| text(e.get("name")) == Some(name))
    };
    let kept = vars
        .iter()
        .filter(|(n, _)| set(n))
        .map(|(n, _)| format!("node sets {n} already: left as set, and a TrainJob's wrapped command reads it"))
        .collect();
    let values: Vec<Value> = vars
        .into_iter()
        .filter(|(n, _)| !set(n))
        .map(|(name, value)| json!({"name": name, "value": value}))
        .collect();
    if values.is_empty() {
        return (Vec::new(), kept);
    }
    let op = match existing {
        Some(items) => Op::Insert {
            path: under(node, &[key("env")]),
            index: items.len(),
            values,
        },
        None => Op::Add {
            path: node.clone(),
            key: "env".into(),
            value: Value::Array(values),
        },
    };
    (vec![op], kept)
}

/// What a runtime in the run is, for the TrainJobs that name it.
#[derive(Clone, Debug, PartialEq)]
pub enum Runtime {
    /// Its trainer `node` carries meshwrap's env; `command`: node has one.
    Injected { command: bool },
    /// Its mesh's proxy was made native: nothing to wrap or quit.
    Native,
    /// No Job Trainer's builder overrides: a TrainJob's trainer reaches no
    /// container.
    NoTrainer,
    /// Not injected, and why.
    NotInjected(String),
}

/// The runtimes of every input, by (kind, namespace, name); a
/// ClusterTrainingRuntime's namespace is "".
#[derive(Debug, Default)]
pub struct Runtimes(HashMap<(String, String, String), Runtime>);

impl Runtimes {
    /// Every runtime of one input's text (YAML documents, or JSON objects
    /// one after another); what does not parse is the main run's to report.
    pub fn learn(&mut self, text: &str, opts: &Options) {
        let body = text.strip_prefix('\u{feff}').unwrap_or(text);
        if body.trim_start().starts_with('{') {
            let values = serde_json::Deserializer::from_str(body).into_iter::<Value>();
            values.map_while(Result::ok).for_each(|v| self.learn_object(&v, opts));
        } else {
            crate::yaml::tree::parse_each(body, |doc| self.learn_object(&doc.root.to_json(), opts));
        }
    }

    fn learn_object(&mut self, doc: &Value, opts: &Options) {
        for w in workloads::find(doc, &[]).into_iter().filter(|w| is_runtime(&w.kind)) {
            let Some(object) = get(doc, &w.at) else { continue };
            let namespace = match w.kind.as_str() {
                "TrainingRuntime" => text(object.pointer("/metadata/namespace")).unwrap_or(""),
                _ => "",
            };
            let state = match &w.places {
                Ok(places) => state(doc, places, opts),
                Err(why) => Runtime::NotInjected(why.clone()),
            };
            self.0.insert((w.kind.clone(), namespace.into(), w.name.clone()), state);
        }
    }

    fn get(&self, kind: &str, namespace: &str, name: &str) -> Option<&Runtime> {
        let namespace = if kind == "ClusterTrainingRuntime" {
            ""
        } else {
            namespace
        };
        self.0.get(&(kind.into(), namespace.into(), name.into()))
    }
}

/// What a runtime whose templates are `places` in `doc` is once injected.
fn state(doc: &Value, places: &[Place], opts: &Options) -> Runtime {
    let Some(place) = places.iter().find(|p| overridden(doc, p) && node(doc, p).is_some()) else {
        return Runtime::NoTrainer;
    };
    let mut after = doc.clone();
    match plan_runtime(doc, place, opts) {
        Outcome::Injected { ops, .. } => ops.iter().for_each(|op| {
            patch::apply(&mut after, op);
        }),
        Outcome::Native { .. } => return Runtime::Native,
        Outcome::Skipped(skip) => return Runtime::NotInjected(skip.why),
        Outcome::Unchanged(_) => {}
    }
    let Some((_, node)) = node(&after, place) else {
        return Runtime::NoTrainer;
    };
    let env = node.get("env").and_then(Value::as_array);
    if !env.into_iter().flatten().any(|e| text(e.get("name")) == Some(MARK)) {
        return Runtime::NotInjected(format!(
            "its node container has no {MARK}: injected by a meshwrap that did not prepare it for a TrainJob's \
             command"
        ));
    }
    Runtime::Injected {
        command: has_command(node),
    }
}

/// What inject does with one TrainJob.
#[derive(Debug)]
pub enum Job {
    /// `spec.trainer.command` wrapped: the ops, the report's message, and
    /// the place the edit touches.
    Wrap(Vec<Op>, String, Place),
    /// Nothing to do, and why (not a skip: the run does not fail).
    Leave(String),
    /// Not wrapped, and what to do (a skip: the run fails).
    Skip(String),
}

/// The decision for a TrainJob, from its command and its runtime's state.
#[derive(Debug, PartialEq)]
enum Decision {
    Wrap(String),
    Leave(String),
    Skip(String),
}

/// The TrainJob at `at` in `doc`, against the runtimes of the run.
pub fn trainjob(doc: &Value, at: &Path, runtimes: &Runtimes) -> Job {
    let Some(object) = get(doc, at) else {
        return Job::Skip("not an object".into());
    };
    let (kind, name) = match runtime_ref(object) {
        Ok(found) => found,
        Err(why) => return Job::Skip(why),
    };
    let namespace = text(object.pointer("/metadata/namespace")).unwrap_or("");
    let runtime = runtimes.get(&kind, namespace, &name);
    let command = match trainer_command(object) {
        Ok(command) => command,
        Err(why) => return Job::Skip(why),
    };
    match decide(command, runtime, &format!("{kind} {name}")) {
        Decision::Wrap(note) => {
            let trainer = under(at, &[key("spec"), key("trainer")]);
            let op = Op::Insert {
                path: under(&trainer, &[key("command")]),
                index: 0,
                values: vec![json!(format!("{BIN_DIR}/meshwrap")), json!("--")],
            };
            let message = format!(
                "spec.trainer.command wrapped ({BIN_DIR}/meshwrap --: its settings come from node's MESHWRAP_* env); \
                 {note}"
            );
            Job::Wrap(vec![op], message, place(at, &trainer))
        }
        Decision::Leave(why) => Job::Leave(why),
        Decision::Skip(why) => Job::Skip(why),
    }
}

/// Where a TrainJob's edit goes, for the stream's checks: `spec.trainer`.
fn place(at: &Path, trainer: &Path) -> Place {
    Place {
        label: "spec.trainer".into(),
        metadata: under(at, &[key("metadata")]),
        spec: under(trainer, &[key("command")]),
        volumes: trainer.clone(),
        argo: false,
        restart: transform::Restart::Unknown(String::new()),
        default_container: Some(NODE),
    }
}

/// The runtime a TrainJob names: its kind (defaults from the CRD) and name.
fn runtime_ref(object: &Value) -> Result<(String, String), String> {
    let r = object.pointer("/spec/runtimeRef");
    let field = |f: &str| text(r.and_then(|r| r.get(f)));
    let name = field("name").filter(|n| !n.is_empty()).ok_or_else(|| {
        "spec.runtimeRef.name is missing: it names the TrainingRuntime or ClusterTrainingRuntime the TrainJob runs"
            .to_string()
    })?;
    let group = field("apiGroup").unwrap_or(GROUP);
    let kind = field("kind").unwrap_or("ClusterTrainingRuntime");
    if group != GROUP || !is_runtime(kind) {
        return Err(format!(
            "spec.runtimeRef names {group} {kind}, not a TrainingRuntime or ClusterTrainingRuntime of {GROUP}: \
             meshwrap does not know how its pods are built"
        ));
    }
    Ok((kind.to_string(), name.to_string()))
}

/// `spec.trainer.command`: none, or a list of strings. An empty list
/// still replaces node's command (Trainer tests for nil, not for empty), so
/// the image's ENTRYPOINT would run unwrapped: refused.
fn trainer_command(object: &Value) -> Result<Option<&[Value]>, String> {
    match object.pointer("/spec/trainer/command") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(items)) if !items.is_empty() && items.iter().all(Value::is_string) => Ok(Some(items)),
        Some(Value::Array(items)) if items.is_empty() => Err("spec.trainer.command is empty: Trainer replaces \
            node's command with it, so the image's ENTRYPOINT would run unwrapped; set the command, or remove the field"
            .into()),
        Some(_) => Err("spec.trainer.command: not a list of strings".into()),
    }
}

/// Trainer's torchtune entrypoint, which its torch plugin recognises by
/// equality and rewrites (`operators::TRAINER_OVERRIDE`).
pub const TORCHTUNE_ENTRYPOINT: [&str; 2] = ["tune", "run"];

fn is_torchtune(command: &[Value]) -> bool {
    command.len() == 2
        && command
            .iter()
            .zip(TORCHTUNE_ENTRYPOINT)
            .all(|(c, t)| c.as_str() == Some(t))
}

const TORCHTUNE: &str = "spec.trainer.command is [tune, run], Trainer's torchtune entrypoint, which its torch \
plugin recognises only as it is and rewrites: wrapped, it would not be torchtune any more; leave it unwrapped and \
let the webhook wrap the pods Trainer builds (without it, the runtime's guard waits beside an unwrapped command)";

/// The TrainJob rule. Each arm says which side it takes where it cannot
/// know (see the module's notes).
fn decide(command: Option<&[Value]>, runtime: Option<&Runtime>, shown: &str) -> Decision {
    use Decision::*;
    match (command, runtime) {
        (Some(c), _) if runs_meshwrap(c) => Leave("spec.trainer.command already runs meshwrap".into()),
        (Some(c), _) if is_torchtune(c) => Skip(TORCHTUNE.into()),
        (_, Some(Runtime::NotInjected(why))) => Skip(format!(
            "its runtime {shown} is not injected ({why}); a TrainJob's command wrapped alone would find no \
             {BIN_DIR}/meshwrap"
        )),
        (_, Some(Runtime::Native)) => Leave(format!(
            "nothing to wrap: its runtime {shown}'s mesh proxy was made native (the kubelet stops it)"
        )),
        (_, Some(Runtime::NoTrainer)) => Leave(format!(
            "nothing to wrap: its runtime {shown} has no Job labelled {ANCESTOR}: {ANCESTOR_TRAINER}, so \
             spec.trainer reaches no container"
        )),
        (None, Some(Runtime::Injected { command: true })) => Leave(format!(
            "nothing to wrap: without spec.trainer.command, node runs its runtime {shown}'s wrapped command"
        )),
        (None, Some(Runtime::Injected { command: false })) => Skip(format!(
            "neither spec.trainer.command nor the node container of its runtime {shown} sets a command, and the \
             image's ENTRYPOINT cannot be known here: set spec.trainer.command (inject then wraps it); as it is, the \
             runtime's guard would wait beside an unwrapped command"
        )),
        // Cannot know: the runtime's own report said whether its node has
        // a command; leaving the TrainJob as it is changes nothing.
        (None, None) => Leave(format!(
            "nothing to wrap: without spec.trainer.command, node runs its runtime {shown}'s command; warning: \
             {shown} is not in this input: if inject said its node has no command, set spec.trainer.command"
        )),
        (Some(_), Some(Runtime::Injected { .. })) => Wrap(format!("its runtime {shown} is injected in this run")),
        // Cannot know: wrapped, the side that fails where it is seen.
        (Some(_), None) => Wrap(format!(
            "warning: its runtime {shown} is not in this input, so whether it was injected cannot be checked: if \
             not, node fails to start (no {BIN_DIR}/meshwrap); inject the two in one run to have it checked"
        )),
    }
}

/// What the webhook does with a pod meshwrap prepared whose wrapped
/// container no longer starts meshwrap.
#[derive(Debug, PartialEq)]
pub enum Completion {
    /// The op that puts meshwrap back in front of its command.
    Wrap { container: String, op: Op },
    /// It has no command to put meshwrap in front of: why.
    NoCommand { container: String, why: String },
}

/// A pod whose status says meshwrap wrapped a container, which mounts
/// meshwrap's binary, but whose command does not start it: a TrainJob's
/// `spec.trainer.command` replaced the runtime's (or anything else did).
/// Its guard would wait beside an unwrapped command, so the wrap is
/// completed: the settings from the container's `MESHWRAP_*` env, or,
/// where a runtime injected before that env lacks it, from the status.
pub fn complete(pod: &Value) -> Option<Completion> {
    let status = text(pod.pointer("/metadata/annotations").and_then(|a| a.get(STATUS)))?;
    let status: Value = serde_json::from_str(status).ok()?;
    let name = text(status.get("container"))?;
    let containers = pod.pointer("/spec/containers")?.as_array()?;
    let i = containers.iter().position(|c| text(c.get("name")) == Some(name))?;
    let container = &containers[i];
    let mounts = container.get("volumeMounts").and_then(Value::as_array);
    let prepared = mounts
        .into_iter()
        .flatten()
        .any(|m| text(m.get("mountPath")) == Some(BIN_DIR));
    let command = container.get("command").and_then(Value::as_array);
    if !prepared || command.is_some_and(|c| runs_meshwrap(c)) {
        return None;
    }
    if command.is_none_or(|c| c.is_empty()) {
        return Some(Completion::NoCommand {
            container: name.into(),
            why: format!(
                "container {name} was prepared for meshwrap but has no command (its runtime's node has none, and \
                 no spec.trainer.command replaced it): set the TrainJob's spec.trainer.command; its guard gives up \
                 after --start-timeout without quitting the sidecar"
            ),
        });
    }
    let env = container.get("env").and_then(Value::as_array);
    let mut prefix = vec![json!(format!("{BIN_DIR}/meshwrap"))];
    if !env.into_iter().flatten().any(|e| text(e.get("name")) == Some(MARK)) {
        prefix.extend(flags_of(&status, containers));
    }
    prefix.push(json!("--"));
    let op = Op::Insert {
        path: vec![key("spec"), key("containers"), Seg::Index(i), key("command")],
        index: 0,
        values: prefix,
    };
    Some(Completion::Wrap {
        container: name.into(),
        op,
    })
}

/// The flags the status records: the quit policy, and the guard's folder
/// when the guard is there.
fn flags_of(status: &Value, containers: &[Value]) -> Vec<Value> {
    let mut flags = Vec::new();
    if let Some(policy) = text(status.get("quitPolicy")) {
        flags.extend([json!("--quit-policy"), json!(policy)]);
    }
    if containers.iter().any(|c| text(c.get("name")) == Some(GUARD_CONTAINER)) {
        flags.extend([json!("--guard-dir"), json!(GUARD_DIR)]);
    }
    flags
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<Value> {
        items.iter().map(|s| json!(s)).collect()
    }

    #[test]
    fn a_prefix_becomes_the_variables_meshwrap_reads_repeated_flags_joined() {
        let prefix = strings(&[
            "/mesh/meshwrap",
            "--quit-policy",
            "on-success",
            "--guard-dir",
            "/run/meshwrap",
            "--sidecar",
            "auto",
            "--sidecar",
            "cloudsql=127.0.0.1:9190",
            "--timeout",
            "5m",
            "--",
            "--quit-policy",
            "never",
        ]);
        assert_eq!(
            env_of(&prefix),
            [
                ("MESHWRAP_QUIT_POLICY", "on-success".to_string()),
                ("MESHWRAP_GUARD_DIR", "/run/meshwrap".into()),
                ("MESHWRAP_SIDECAR", "auto,cloudsql=127.0.0.1:9190".into()),
                ("MESHWRAP_TIMEOUT", "5m".into()),
            ]
        );
    }

    #[test]
    fn every_variable_is_one_meshwrap_reads_for_its_flag() {
        let args = include_str!("../../src/cli/args.rs");
        for (flag, name) in ENV {
            let at = args
                .find(&format!("env = \"{name}\""))
                .unwrap_or_else(|| panic!("{name}"));
            let long = flag.trim_start_matches("--");
            let before = &args[..at];
            let attribute = &before[before.rfind("#[arg(").unwrap()..];
            let field = args[at..].split("pub ").nth(1).and_then(|f| f.split(':').next());
            let named = attribute.contains(&format!("long = \"{long}\""));
            let derived = attribute.contains("long,") && field == Some(long.replace('-', "_").as_str());
            assert!(named || derived, "{name} is not the variable of {flag}: {attribute}");
        }
    }

    #[test]
    fn only_the_job_labelled_as_the_trainer_is_overridden() {
        let doc = |label: Value| {
            json!({"spec": {"template": {"spec": {"replicatedJobs": [{"name": "node", "template": {
                "metadata": {"labels": label},
                "spec": {"template": {"spec": {"containers": [{"name": "node"}]}}}}}]}}}})
        };
        let runtime = json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
            "metadata": {"name": "r"}, "spec": doc(json!({}))["spec"].clone()});
        let found = workloads::find(&runtime, &[]);
        let place = &found[0].places.as_ref().unwrap()[0];
        assert!(overridden(&doc(json!({ANCESTOR: "trainer"})), place));
        assert!(!overridden(&doc(json!({ANCESTOR: "dataset-initializer"})), place));
        assert!(!overridden(&doc(json!({})), place));
    }

    #[test]
    fn the_runtime_ref_defaults_as_the_crd_does_and_refuses_other_groups() {
        let job = |r: Value| json!({"spec": {"runtimeRef": r}});
        assert_eq!(
            runtime_ref(&job(json!({"name": "t"}))),
            Ok(("ClusterTrainingRuntime".into(), "t".into()))
        );
        assert_eq!(
            runtime_ref(&job(json!({"name": "t", "kind": "TrainingRuntime"}))),
            Ok(("TrainingRuntime".into(), "t".into()))
        );
        assert!(
            runtime_ref(&job(json!({"name": "t", "apiGroup": "x.io"})))
                .unwrap_err()
                .contains("x.io")
        );
        assert!(
            runtime_ref(&job(json!({})))
                .unwrap_err()
                .contains("spec.runtimeRef.name")
        );
    }

    #[test]
    fn an_empty_command_is_refused_as_it_still_replaces_nodes() {
        let job = |c: Value| json!({"spec": {"trainer": {"command": c}}});
        assert_eq!(trainer_command(&json!({})), Ok(None));
        assert!(trainer_command(&job(json!([]))).unwrap_err().contains("ENTRYPOINT"));
        assert!(trainer_command(&job(json!([1]))).is_err());
        assert_eq!(trainer_command(&job(json!(["a"]))).unwrap().unwrap().len(), 1);
    }

    #[test]
    fn the_trainjob_rule_arm_by_arm() {
        let cmd = strings(&["python", "train.py"]);
        let wrapped = strings(&["/mesh/meshwrap", "--", "python"]);
        let tune = strings(&["tune", "run"]);
        let injected = |command| Some(Runtime::Injected { command });
        let not = Runtime::NotInjected("opted out".into());
        let kind = |d: Decision| match d {
            Decision::Wrap(_) => "wrap",
            Decision::Leave(_) => "leave",
            Decision::Skip(_) => "skip",
        };
        type Case<'a> = (Option<&'a [Value]>, Option<Runtime>, &'a str);
        let cases: [Case; 10] = [
            (Some(&cmd), injected(true), "wrap"),
            (Some(&cmd), injected(false), "wrap"),
            (Some(&cmd), None, "wrap"),
            (Some(&wrapped), None, "leave"),
            (Some(&tune), injected(true), "skip"),
            (Some(&cmd), Some(not.clone()), "skip"),
            (None, Some(not), "skip"),
            (None, injected(true), "leave"),
            (None, injected(false), "skip"),
            (None, None, "leave"),
        ];
        for (command, runtime, expected) in cases {
            assert_eq!(
                kind(decide(command, runtime.as_ref(), "R")),
                expected,
                "{command:?} {runtime:?}"
            );
        }
        let Decision::Skip(why) = decide(None, injected(false).as_ref(), "R") else {
            panic!()
        };
        assert!(why.contains("set spec.trainer.command"), "{why}");
        let Decision::Wrap(note) = decide(Some(&cmd), None, "R") else {
            panic!()
        };
        assert!(
            note.starts_with("warning: its runtime R is not in this input"),
            "{note}"
        );
        assert!(!is_torchtune(&strings(&["tune", "run", "x"])));
    }

    fn prepared_pod(command: Option<Value>, env: bool) -> Value {
        let mut node = json!({"name": "node", "volumeMounts": [{"name": "meshwrap-bin", "mountPath": "/mesh"}]});
        if let Some(c) = command {
            node["command"] = c;
        }
        if env {
            node["env"] = json!([{"name": MARK, "value": "on-success"}]);
        }
        json!({"metadata": {"annotations": {STATUS: r#"{"container":"node","quitPolicy":"on-success","guard":true}"#}},
            "spec": {"containers": [node, {"name": GUARD_CONTAINER}]}})
    }

    #[test]
    fn a_prepared_container_whose_command_does_not_start_meshwrap_is_completed() {
        let Some(Completion::Wrap { op, .. }) = complete(&prepared_pod(Some(json!(["python"])), true)) else {
            panic!()
        };
        let Op::Insert { values, .. } = op else { panic!() };
        assert_eq!(values, strings(&["/mesh/meshwrap", "--"]));
        let Some(Completion::Wrap { op, .. }) = complete(&prepared_pod(Some(json!(["python"])), false)) else {
            panic!()
        };
        let Op::Insert { values, .. } = op else { panic!() };
        assert_eq!(
            values,
            strings(&[
                "/mesh/meshwrap",
                "--quit-policy",
                "on-success",
                "--guard-dir",
                GUARD_DIR,
                "--"
            ])
        );
        assert!(matches!(
            complete(&prepared_pod(None, true)),
            Some(Completion::NoCommand { .. })
        ));
        assert_eq!(
            complete(&prepared_pod(Some(json!(["/mesh/meshwrap", "--", "x"])), true)),
            None
        );
        let mut unprepared = prepared_pod(Some(json!(["python"])), true);
        unprepared["spec"]["containers"][0]["volumeMounts"] = json!([]);
        assert_eq!(complete(&unprepared), None, "not a container meshwrap prepared");
    }
}
