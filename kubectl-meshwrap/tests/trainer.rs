//! Kubeflow Trainer v2 through the real binary, against Trainer's own
//! runtimes and examples (`../shared/upstream-corpus/kubeflow+trainer`, at
//! the commit its SOURCE names; never copied into the project):
//!
//! - every pod Trainer would build from an injected runtime and an injected
//!   TrainJob (its builder's rule applied here: the TrainJob's command and
//!   args replace the trainer Job's `node` container's, its env is merged;
//!   kubeflow/trainer v2.3.0 pkg/runtime/framework/plugins/jobset/builder.go
//!   Builder.Trainer) that has meshwrap's guard starts its wrapped container
//!   through meshwrap, with meshwrap's settings: no guard waits beside an
//!   unwrapped command;
//! - a TrainJob with no command, on a runtime of Trainer's whose node has
//!   none, is a skip naming `spec.trainer.command`, and nothing is written;
//! - the KRM function decides a TrainJob against the runtime in its
//!   ResourceList (the one test here that needs no ../shared).
//!
//! Without ../shared: a failure in CI (CI or POD_TESTS_REQUIRED set),
//! elsewhere one line and the test passes unchecked.

mod common;

use std::path::PathBuf;

use common::*;
use serde_json::{Value, json};

const ANCESTOR: &str = "trainer.kubeflow.org/trainjob-ancestor-step";

/// Trainer's own files, from ../shared beside the checkout ([`upstream`]).
fn corpus() -> Option<PathBuf> {
    upstream("kubeflow+trainer")
}

fn documents(text: &str) -> Vec<Value> {
    let (docs, error) = kubectl_meshwrap::yaml::tree::parse(text);
    assert!(error.is_none(), "{error:?}");
    docs.iter().map(|d| d.root.to_json()).filter(Value::is_object).collect()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect()
}

/// Trainer's builder rule for the Job labelled as the trainer: the
/// TrainJob's command and args replace `node`'s, its env is upserted.
fn build(runtime: &Value, trainjob: &Value) -> Vec<Value> {
    let trainer = &trainjob["spec"]["trainer"];
    let mut pods = Vec::new();
    for job in runtime["spec"]["template"]["spec"]["replicatedJobs"]
        .as_array()
        .unwrap()
    {
        let mut pod = job["template"]["spec"]["template"].clone();
        if job["template"]["metadata"]["labels"][ANCESTOR] == "trainer" {
            for c in pod["spec"]["containers"].as_array_mut().unwrap() {
                if c["name"] != "node" {
                    continue;
                }
                for field in ["command", "args", "image"] {
                    if !trainer[field].is_null() {
                        c[field] = trainer[field].clone();
                    }
                }
                for var in trainer["env"].as_array().into_iter().flatten() {
                    let env = c.as_object_mut().unwrap().entry("env").or_insert(json!([]));
                    let env = env.as_array_mut().unwrap();
                    env.retain(|e| e["name"] != var["name"]);
                    env.push(var.clone());
                }
            }
        }
        pods.push(pod);
    }
    pods
}

/// Why the pod `pod` would run a guard beside an unwrapped command, if so.
fn guard_beside_unwrapped(pod: &Value) -> Option<String> {
    let containers = pod["spec"]["containers"].as_array().unwrap();
    containers.iter().find(|c| c["name"] == "meshwrap-guard")?;
    let status: Value = serde_json::from_str(pod["metadata"]["annotations"]["meshwrap.io/status"].as_str()?).ok()?;
    let wrapped = containers.iter().find(|c| c["name"] == status["container"])?;
    let command = strings(&wrapped["command"]);
    let env = strings(&json!(
        wrapped["env"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| e["name"].clone())
            .collect::<Vec<_>>()
    ));
    let settings = command.contains(&"--quit-policy".to_string()) || env.contains(&"MESHWRAP_QUIT_POLICY".to_string());
    match command.first().map(String::as_str) {
        Some("/mesh/meshwrap") if settings => None,
        _ => Some(format!("{}: {command:?}, env {env:?}", status["container"])),
    }
}

#[test]
fn no_pod_trainer_builds_from_its_injected_runtimes_and_examples_has_a_guard_beside_an_unwrapped_command() {
    let Some(dir) = corpus() else {
        return;
    };
    let inputs = ["manifests/base/runtimes", "examples/yaml", "examples/flux"];
    let mut argv = vec![
        "inject".to_string(),
        "--image".into(),
        IMAGE.into(),
        "--allow-skip".into(),
    ];
    for input in inputs {
        argv.extend(["-f".to_string(), dir.join(input).display().to_string()]);
    }
    let run = kubectl_meshwrap(&argv, "");
    assert_eq!(run.code, 0, "{}", run.stderr);
    let docs = documents(&run.stdout);
    let runtimes: Vec<&Value> = docs
        .iter()
        .filter(|d| d["kind"] == "TrainingRuntime" || d["kind"] == "ClusterTrainingRuntime")
        .collect();
    let (mut built, mut guarded, mut flux) = (0, 0, 0);
    for job in docs.iter().filter(|d| d["kind"] == "TrainJob") {
        let name = job["metadata"]["name"].as_str().unwrap();
        let runtime = runtimes
            .iter()
            .find(|r| r["metadata"]["name"] == job["spec"]["runtimeRef"]["name"])
            .unwrap();
        // Trainer's flux plugin replaces the command whatever it is: such
        // a runtime and its TrainJobs are skipped, for the webhook.
        if runtime["spec"]["mlPolicy"].get("flux").is_some() {
            let line = format!("TrainJob/{name} spec.trainer: skipped: its runtime ClusterTrainingRuntime");
            assert!(
                run.stderr
                    .lines()
                    .any(|l| l.contains(&line) && l.contains("flux") && l.contains("webhook")),
                "TrainJob {name}: {}",
                run.stderr
            );
            flux += 1;
            continue;
        }
        assert_eq!(
            strings(&job["spec"]["trainer"]["command"])[..2],
            ["/mesh/meshwrap", "--"],
            "TrainJob {name}"
        );
        // The runtime it names, and, as if it named them, every other.
        for runtime in &runtimes {
            for pod in build(runtime, job) {
                if let Some(why) = guard_beside_unwrapped(&pod) {
                    panic!(
                        "TrainJob {name} on {}: a guard beside an unwrapped command: {why}",
                        runtime["metadata"]["name"]
                    );
                }
                built += 1;
                guarded += usize::from(pod.to_string().contains("meshwrap-guard"));
            }
        }
    }
    assert!(
        built >= 100 && guarded >= 60,
        "only {built} pods built, {guarded} with a guard"
    );
    assert_eq!(flux, 3, "Trainer's flux examples");
    // Each runtime whose trainer node has no command says what its
    // TrainJobs must do.
    let prepared = run.stderr.lines().filter(|l| l.contains("node has no command")).count();
    let warned = run
        .stderr
        .lines()
        .filter(|l| {
            l.contains("node has no command")
                && l.contains("warning: every TrainJob using this runtime must set spec.trainer.command")
        })
        .count();
    assert!(prepared >= 6 && warned == prepared, "{}", run.stderr);
}

#[test]
fn a_trainjob_with_no_command_on_trainers_torch_runtime_is_a_skip_naming_spec_trainer_command() {
    let Some(dir) = corpus() else {
        return;
    };
    let trainjob = "apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: bare}
spec:
  runtimeRef: {name: torch-distributed}
  trainer: {numNodes: 2}
";
    let runtime = dir.join("manifests/base/runtimes/torch_distributed.yaml");
    let argv = ["inject", "--image", IMAGE, "-f", runtime.to_str().unwrap(), "-f", "-"];
    let run = kubectl_meshwrap(&argv, trainjob);
    assert_eq!((run.code, run.stdout.as_str()), (1, ""), "{}", run.stderr);
    assert!(
        run.stderr.contains(
            "stdin: TrainJob/bare spec.trainer: skipped: neither spec.trainer.command nor the node container of \
             its runtime ClusterTrainingRuntime torch-distributed sets a command"
        ) && run.stderr.contains("set spec.trainer.command"),
        "{}",
        run.stderr
    );
}

#[test]
fn the_krm_function_decides_a_trainjob_against_the_runtime_in_its_resource_list() {
    let list = r#"apiVersion: config.kubernetes.io/v1
kind: ResourceList
functionConfig:
  apiVersion: v1
  kind: ConfigMap
  metadata: {name: meshwrap}
  data: {image: registry.example.com/meshwrap:0.1.0}
items:
  - apiVersion: trainer.kubeflow.org/v1alpha1
    kind: TrainJob
    metadata: {name: bare}
    spec:
      runtimeRef: {name: entrypoint}
  - apiVersion: trainer.kubeflow.org/v1alpha1
    kind: ClusterTrainingRuntime
    metadata: {name: entrypoint}
    spec:
      template:
        spec:
          replicatedJobs:
            - name: node
              template:
                metadata:
                  labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}
                spec:
                  template:
                    spec:
                      containers:
                        - {name: node, image: pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime}
"#;
    let run = kubectl_meshwrap(&["fn"], list);
    // The runtime comes after the TrainJob, in the same list: it is known.
    assert!(
        run.stdout.contains(
            "TrainJob/bare spec.trainer: neither spec.trainer.command nor the node container of its runtime \
             ClusterTrainingRuntime entrypoint sets a command"
        ),
        "{}\n{}",
        run.stdout,
        run.stderr
    );
}
