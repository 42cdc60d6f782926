//! Operators' restart defaults, in one table: for each kind whose pod
//! templates kubectl-meshwrap wraps, the `restartPolicy` its pods run under
//! when the manifest names none, read from the operator's (or the API
//! server's) own defaulting code, with the repository, path and released
//! version that says so beside it. Nothing else in kubectl-meshwrap states
//! these facts; the docs point here.
//!
//! The quit policy is drawn from this (see `restart.rs`), and a wrong default
//! is the worst kind of wrong: a template assumed `Never` that runs under
//! `OnFailure` gets `--quit-policy always`, so a failed run quits the sidecar
//! and the kubelet restarts the command in place, in a pod whose sidecar has
//! gone: it waits out `--timeout`, exits 125, and so on until the backoff
//! limit. So a default is taken only where upstream's code gives one for
//! that apiVersion and replica type; where it gives none (a Job's template,
//! an operator version this table does not know), the template is skipped
//! with the field to set, never guessed.
//!
//! Beside it, one table per subject of what Kubeflow Trainer v2 does to
//! the pods it builds, which `trainer.rs` rests on ([`TRAINER_OVERRIDE`],
//! [`TRAINER_RUNTIME_REF`], [`TRAINER_PODS`]), cited the same way.
//!
//! Each fact has its own unit test below, named after it, that runs the
//! manifest through [`crate::workloads::find`] and [`crate::transform::plan`]
//! to the quit policy inject writes.

/// What a pod gets for `restartPolicy` when its manifest names none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestartDefault {
    /// Written in by the operator or the API server.
    Policy(&'static str),
    /// Nothing: the object (or the Job the operator makes of it) is refused
    /// unless it names one of these.
    Required(&'static str),
}

/// One fact: pods of `kind` in API `group` at `version` (`*`: every
/// version), replica type `replica` (`*`: every one, or a kind without
/// replicas), get `default`, as `source` says.
#[derive(Debug)]
pub struct Fact {
    pub group: &'static str,
    pub version: &'static str,
    pub kinds: &'static [&'static str],
    pub replica: &'static str,
    pub default: RestartDefault,
    pub source: &'static str,
}

const JOB: RestartDefault = RestartDefault::Required("Never or OnFailure");

/// The table. Each training-operator row also holds in kubeflow/trainer
/// v1.9.4 (the same code, renamed repository).
pub const FACTS: &[Fact] = &[
    // Kubeflow training-operator v1: SetDefaults_<Kind> calls
    // setDefaultRestartPolicy(spec, <Kind>DefaultRestartPolicy) for every
    // replica spec that names none (defaulting_utils.go).
    Fact {
        group: "kubeflow.org",
        version: "v1",
        kinds: &["TFJob"],
        replica: "*",
        default: RestartDefault::Policy("Never"),
        source: concat!(
            "kubeflow/training-operator v1.9.0 pkg/apis/kubeflow.org/v1/tensorflow_types.go ",
            "TFJobDefaultRestartPolicy = RestartPolicyNever, set by tensorflow_defaults.go SetDefaults_TFJob"
        ),
    },
    Fact {
        group: "kubeflow.org",
        version: "v1",
        kinds: &["PyTorchJob"],
        replica: "*",
        default: RestartDefault::Policy("OnFailure"),
        source: concat!(
            "kubeflow/training-operator v1.9.0 pkg/apis/kubeflow.org/v1/pytorch_types.go ",
            "PyTorchJobDefaultRestartPolicy = RestartPolicyOnFailure, set by pytorch_defaults.go SetDefaults_PyTorchJob"
        ),
    },
    Fact {
        group: "kubeflow.org",
        version: "v1",
        kinds: &["XGBoostJob"],
        replica: "*",
        default: RestartDefault::Policy("Never"),
        source: concat!(
            "kubeflow/training-operator v1.9.0 pkg/apis/kubeflow.org/v1/xgboost_types.go ",
            "XGBoostJobDefaultRestartPolicy = RestartPolicyNever, set by xgboost_defaults.go SetDefaults_XGBoostJob"
        ),
    },
    Fact {
        group: "kubeflow.org",
        version: "v1",
        kinds: &["JAXJob"],
        replica: "*",
        default: RestartDefault::Policy("Never"),
        source: concat!(
            "kubeflow/training-operator v1.9.0 pkg/apis/kubeflow.org/v1/jax_types.go ",
            "JAXJobDefaultRestartPolicy = RestartPolicyNever, set by jax_defaults.go SetDefaults_JAXJob"
        ),
    },
    Fact {
        group: "kubeflow.org",
        version: "v1",
        kinds: &["PaddleJob"],
        replica: "*",
        default: RestartDefault::Policy("OnFailure"),
        source: concat!(
            "kubeflow/training-operator v1.9.0 pkg/apis/kubeflow.org/v1/paddlepaddle_types.go ",
            "PaddleJobDefaultRestartPolicy = RestartPolicyOnFailure (since v1.6.0), set by ",
            "paddlepaddle_defautls.go SetDefaults_PaddleJob (paddlepaddle_defaults.go in kubeflow/trainer v1.9.4)"
        ),
    },
    // training-operator's own MPIJob (kubeflow.org/v1) defaults only its two
    // replica types, both Never; its validation refuses any other.
    Fact {
        group: "kubeflow.org",
        version: "v1",
        kinds: &["MPIJob"],
        replica: "Launcher",
        default: RestartDefault::Policy("Never"),
        source: concat!(
            "kubeflow/training-operator v1.9.0 pkg/apis/kubeflow.org/v1/mpi_types.go ",
            "MPIJobDefaultRestartPolicy = RestartPolicyNever, set for Launcher and Worker by mpi_defaults.go SetDefaults_MPIJob"
        ),
    },
    Fact {
        group: "kubeflow.org",
        version: "v1",
        kinds: &["MPIJob"],
        replica: "Worker",
        default: RestartDefault::Policy("Never"),
        source: concat!(
            "kubeflow/training-operator v1.9.0 pkg/apis/kubeflow.org/v1/mpi_types.go ",
            "MPIJobDefaultRestartPolicy = RestartPolicyNever, set for Launcher and Worker by mpi_defaults.go SetDefaults_MPIJob"
        ),
    },
    // mpi-operator's MPIJob (kubeflow.org/v2beta1): the Launcher, a Job,
    // defaults to OnFailure; the Workers, plain pods, to Never.
    Fact {
        group: "kubeflow.org",
        version: "v2beta1",
        kinds: &["MPIJob"],
        replica: "Launcher",
        default: RestartDefault::Policy("OnFailure"),
        source: concat!(
            "kubeflow/mpi-operator v0.8.0 pkg/apis/kubeflow/v2beta1/constants.go ",
            "DefaultLauncherRestartPolicy = RestartPolicyOnFailure (since v0.4.0), set by default.go ",
            "setDefaultsTypeLauncher, copied onto the launcher Job's pod template by ",
            "pkg/controller/mpi_job_controller.go setRestartPolicy"
        ),
    },
    Fact {
        group: "kubeflow.org",
        version: "v2beta1",
        kinds: &["MPIJob"],
        replica: "Worker",
        default: RestartDefault::Policy("Never"),
        source: concat!(
            "kubeflow/mpi-operator v0.8.0 pkg/apis/kubeflow/v2beta1/constants.go ",
            "DefaultRestartPolicy = RestartPolicyNever, set by default.go setDefaultsTypeWorker"
        ),
    },
    // JobSet's mutating webhook fills every replicated Job's pod template.
    Fact {
        group: "jobset.x-k8s.io",
        version: "*",
        kinds: &["JobSet"],
        replica: "*",
        default: RestartDefault::Policy("OnFailure"),
        source: concat!(
            "kubernetes-sigs/jobset v0.12.0 pkg/webhooks/jobset_webhook.go Default: ",
            "\"Default pod restart policy to OnFailure\" for each replicatedJobs[].template.spec.template ",
            "that names none (the same since v0.1.0)"
        ),
    },
    // Trainer v2 writes no restartPolicy: it applies a JobSet built from the
    // runtime's template, and JobSet's webhook defaults it.
    Fact {
        group: "trainer.kubeflow.org",
        version: "*",
        kinds: &["TrainingRuntime", "ClusterTrainingRuntime"],
        replica: "*",
        default: RestartDefault::Policy("OnFailure"),
        source: concat!(
            "kubeflow/trainer v2.3.0 pkg/runtime/framework/plugins/jobset/builder.go builds a JobSet from ",
            "spec.template and pkg/controller/trainjob_controller.go applies it (no code in pkg/ sets restartPolicy); ",
            "go.mod pins sigs.k8s.io/jobset v0.12.0, whose webhook defaults OnFailure (see JobSet)"
        ),
    },
    // KubeRay copies a user's submitterPodTemplate as it is into a Job.
    Fact {
        group: "ray.io",
        version: "*",
        kinds: &["RayJob"],
        replica: "*",
        default: JOB,
        source: concat!(
            "ray-project/kuberay v1.7.0 ray-operator/controllers/ray/common/job.go GetSubmitterTemplate returns ",
            "spec.submitterPodTemplate as given (Never only in the template it makes itself), and ",
            "rayjob_controller.go createNewK8sJob makes it a batch/v1 Job's template (see Job)"
        ),
    },
    // Argo writes Never into every step's pod; podSpecPatch may change it.
    // meshwrap's Argo steps take `never` whatever it is (Argo stops the
    // sidecars itself), so no quit is ever sent under a restarting step.
    Fact {
        group: "argoproj.io",
        version: "*",
        kinds: &[
            "Workflow",
            "WorkflowTemplate",
            "ClusterWorkflowTemplate",
            "CronWorkflow",
        ],
        replica: "*",
        default: RestartDefault::Policy("Never"),
        source: concat!(
            "argoproj/argo-workflows v4.1.2 workflow/controller/workflowpod.go podBuilder.build: ",
            "RestartPolicy: apiv1.RestartPolicyNever (createWorkflowPod, the same, in v3.5.0-v4.0.0); then ",
            "util.ApplyPodSpecPatch applies the workflow's and the template's podSpecPatch over it; ",
            "retryStrategy retries in new pods"
        ),
    },
    // Kubernetes itself.
    Fact {
        group: "",
        version: "*",
        kinds: &["Pod"],
        replica: "*",
        default: RestartDefault::Policy("Always"),
        source: concat!(
            "kubernetes/kubernetes pkg/apis/core/v1/defaults.go SetDefaults_PodSpec ",
            "(obj.RestartPolicy = v1.RestartPolicyAlways); kubernetes/api v0.36.3 (Kubernetes 1.36) ",
            "core/v1/types.go PodSpec.RestartPolicy \"Default to Always\" (the same in v0.28.0)"
        ),
    },
    Fact {
        group: "apps",
        version: "*",
        kinds: &["Deployment", "StatefulSet", "DaemonSet", "ReplicaSet"],
        replica: "*",
        default: RestartDefault::Policy("Always"),
        source: concat!(
            "kubernetes/api v0.36.3 apps/v1/types.go DeploymentSpec, StatefulSetSpec, DaemonSetSpec .Template: ",
            "\"The only allowed template.spec.restartPolicy value is Always\"; kubernetes/kubernetes ",
            "pkg/apis/apps/validation/validation.go ValidatePodTemplateSpecForReplicaSet refuses any other for a ",
            "ReplicaSet; SetDefaults_PodSpec writes it"
        ),
    },
    Fact {
        group: "",
        version: "*",
        kinds: &["ReplicationController"],
        replica: "*",
        default: RestartDefault::Policy("Always"),
        source: concat!(
            "kubernetes/api v0.36.3 core/v1/types.go ReplicationControllerSpec.Template: ",
            "\"The only allowed template.spec.restartPolicy value is Always\"; SetDefaults_PodSpec writes it"
        ),
    },
    Fact {
        group: "batch",
        version: "*",
        kinds: &["Job", "CronJob"],
        replica: "*",
        default: JOB,
        source: concat!(
            "kubernetes/api v0.36.3 batch/v1/types.go JobSpec.Template: \"The only allowed ",
            "template.spec.restartPolicy values are Never or OnFailure\" (the same in v0.28.0); ",
            "kubernetes/kubernetes pkg/apis/batch/validation/validation.go validateJobSpec refuses the ",
            "Always that SetDefaults_PodSpec writes into a template that names none"
        ),
    },
];

/// Kinds whose pods run until deleted: their controller recreates a pod
/// that ends, and their pod templates accept only `restartPolicy: Always`
/// (kubernetes pkg/apis/apps/validation/validation.go,
/// ValidatePodTemplateSpecForReplicaSet for Deployments and ReplicaSets,
/// and the same rule for StatefulSets, DaemonSets and, in
/// pkg/apis/core/validation, ReplicationControllers), and KubeRay's
/// RayCluster and RayService, whose head and worker groups run until the
/// resource is deleted (a RayJob's own cluster goes with the job; its
/// submitter is a Job).
/// `--workloads batch`, the default, leaves them and their pods alone: no
/// quit is ever due, and a Job's Warning on a service pod is noise.
/// As (API group, kind).
pub const LONG_RUNNING: &[(&str, &str)] = &[
    ("apps", "Deployment"),
    ("apps", "StatefulSet"),
    ("apps", "DaemonSet"),
    ("apps", "ReplicaSet"),
    ("", "ReplicationController"),
    ("ray.io", "RayCluster"),
    ("ray.io", "RayService"),
];

/// Whether `kind` of API group `group` runs until deleted ([`LONG_RUNNING`]).
pub fn long_running(group: &str, kind: &str) -> bool {
    LONG_RUNNING.contains(&(group, kind))
}

/// A kind taught with `--template-path`: its operator is unknown, so this is
/// meshwrap's own assumption, not upstream's: the template's
/// `restartPolicy`, else Never.
pub const TAUGHT: &str = "Never";

/// The fact for pods of `kind` at `api_version` (`group/version`, or
/// `version` for the core group), replica type `replica` (`""` for kinds
/// without replicas); None where the table knows no default.
pub fn lookup(api_version: &str, kind: &str, replica: &str) -> Option<&'static Fact> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    FACTS.iter().find(|f| {
        f.group == group
            && (f.version == "*" || f.version == version)
            && f.kinds.contains(&kind)
            && (f.replica == "*" || f.replica == replica)
    })
}

/// The pod `restartPolicy` a Kubeflow replica's own `restartPolicy` gives
/// its pods: the operator writes it over the pod template's, whatever that
/// says, and runs `ExitCode` (its own value: it recreates the pod on a
/// retryable exit code) as Never. kubeflow/training-operator v1.9.0
/// pkg/core/pod.go SetRestartPolicy (called from
/// pkg/controller.v1/common/pod.go, which warns "Restart policy in pod
/// template will be overwritten by restart policy in replica spec");
/// kubeflow/mpi-operator v0.8.0 pkg/controller/mpi_job_controller.go
/// setRestartPolicy.
pub fn replica_pod_policy(replica_policy: &str) -> &str {
    match replica_policy {
        "ExitCode" => "Never",
        other => other,
    }
}

/// One behaviour of an upstream that a rule of kubectl-meshwrap rests on,
/// with the repository, path, version and lines that say so.
#[derive(Debug)]
pub struct Cited {
    pub fact: &'static str,
    pub source: &'static str,
}

/// Kubeflow Trainer v2: what a TrainJob's `spec.trainer` does to the pods
/// Trainer builds from its runtime (`trainer.rs` rests on each row).
pub const TRAINER_OVERRIDE: &[Cited] = &[
    Cited {
        fact: "the trainer's container is the one named node, in the replicated Job whose template's labels carry \
               trainer.kubeflow.org/trainjob-ancestor-step: trainer; no other Job or container is overridden",
        source: "kubeflow/trainer v2.3.0 pkg/runtime/framework/plugins/jobset/builder.go Builder.Trainer lines \
                 113-127; pkg/constants/constants.go lines 41 (LabelTrainJobAncestor), 66 (AncestorTrainer), 69 (Node)",
    },
    Cited {
        fact: "spec.trainer.image, command and args, each when not nil, replace node's: meshwrap's command prefix \
               goes with the command (an empty list is not nil, and replaces it too)",
        source: "kubeflow/trainer v2.3.0 pkg/runtime/framework/plugins/jobset/builder.go Builder.Trainer lines \
                 128-138 (Containers[j].Command = command)",
    },
    Cited {
        fact: "spec.trainer.env is upserted into node's env by name: the runtime's other variables (meshwrap's \
               MESHWRAP_*) stay",
        source: "kubeflow/trainer v2.3.0 pkg/runtime/framework/plugins/jobset/builder.go Builder.Trainer lines \
                 142-153; pkg/apply/apply.go UpsertEnvVars line 37 (byEnvVarName)",
    },
    Cited {
        fact: "a TrainJob command equal to [tune, run] turns on the torch plugin's torchtune handling, which rewrites \
               the command; any other command (a wrapped one) does not",
        source: "kubeflow/trainer v2.3.0 pkg/runtime/framework/plugins/torch/torch.go lines 81 and 175 \
                 (slices.Equal(trainJob.Spec.Trainer.Command, constants.TorchTuneEntrypoint)); \
                 pkg/constants/constants.go line 315",
    },
    Cited {
        fact: "with mlPolicy.flux, the flux plugin sets the TrainJob's command to [/bin/bash, \
               /etc/flux-config/entrypoint.sh, CMD], CMD the runtime's or TrainJob's command and args joined into \
               one string, and clears args: node never runs a command inject wrote",
        source: "kubeflow/trainer v2.3.0 pkg/runtime/framework/plugins/flux/flux.go EnforceMLPolicy lines 134-152, \
                 getOriginalCommand lines 377-400",
    },
];

/// Kubeflow Trainer v2: how a TrainJob names its runtime (`trainer.rs`
/// finds a TrainJob's runtime in the run by these).
pub const TRAINER_RUNTIME_REF: &[Cited] = &[
    Cited {
        fact: "spec.runtimeRef.name names the runtime; apiGroup defaults to trainer.kubeflow.org and kind to \
               ClusterTrainingRuntime",
        source: "kubeflow/trainer v2.3.0 pkg/apis/trainer/v1alpha1/trainjob_types.go RuntimeRef lines 156-178 \
                 (+kubebuilder:default)",
    },
    Cited {
        fact: "a namespaced TrainingRuntime must be in the TrainJob's namespace; a ClusterTrainingRuntime has none",
        source: "kubeflow/trainer v2.3.0 pkg/apis/trainer/v1alpha1/trainjob_types.go lines 157-159",
    },
    Cited {
        fact: "spec.trainer is immutable (self == oldSelf): a TrainJob is wrapped before it is created, or its pods \
               by the webhook",
        source: "kubeflow/trainer v2.3.0 pkg/apis/trainer/v1alpha1/trainjob_types.go line 114",
    },
];

/// Kubeflow Trainer v2: what a TrainJob can put on its pods, and what the
/// pods Trainer builds carry (the webhook's view of them).
pub const TRAINER_PODS: &[Cited] = &[
    Cited {
        fact: "a TrainJob has no pod template; spec.runtimePatches may add labels and annotations to a replicated \
               Job's pod template and patch a few spec fields, but no container's command, and no env of node",
        source: "kubeflow/trainer v2.3.0 pkg/apis/trainer/v1alpha1/trainjob_types.go RuntimePatches line 124, \
                 PodTemplatePatch lines 378-387, ContainerPatch lines 466-486 (env, volumeMounts, securityContext; env not for node)",
    },
    Cited {
        fact: "the JobSet is built from the runtime's spec.template, so its pod templates' annotations (meshwrap's \
               status) and containers (the guard, node's mounts and env) reach the pods",
        source: "kubeflow/trainer v2.3.0 pkg/runtime/core/trainingruntime.go newRuntimeInfo lines 140-183 \
                 (WithTemplateSpecObjApply of the runtime's JobSet spec)",
    },
    Cited {
        fact: "trainer.kubeflow.org/trainjob-ancestor-step is a label of the replicated Job's template, read there, \
               not of the pod template: the webhook tells a pod meshwrap prepared by meshwrap's own marks (its \
               status annotation, the /mesh mount of the container it names), not by Trainer's labels",
        source: "kubeflow/trainer v2.3.0 pkg/runtime/framework/plugins/jobset/builder.go lines 116-118 \
                 (rJob.Template.ObjectMetaApplyConfiguration.Labels)",
    },
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transform::{Options, Outcome, plan};
    use crate::workloads::{TemplatePath, find};
    use serde_json::{Value, json};

    /// Each pod template of `doc` (taught `taught`), by its label: the quit
    /// policy inject writes, or `skipped: <why>`.
    fn policies_taught(doc: Value, taught: &[TemplatePath]) -> Vec<(String, String)> {
        let opts = Options {
            image: "registry.example.com/meshwrap:1".into(),
            ..Options::default()
        };
        let mut out = Vec::new();
        for workload in find(&doc, taught) {
            for place in workload.places.expect("a workload") {
                let result = match plan(&doc, &place, &opts) {
                    Outcome::Injected { policy, .. } => policy,
                    Outcome::Skipped(skip) => format!("skipped: {}", skip.why),
                    other => format!("{other:?}"),
                };
                out.push((place.label.clone(), result));
            }
        }
        out
    }

    fn policies(doc: Value) -> Vec<(String, String)> {
        policies_taught(doc, &[])
    }

    fn container() -> Value {
        json!({"name": "main", "image": "trainer:1", "command": ["python", "train.py"]})
    }

    fn pod_spec(restart: Option<&str>) -> Value {
        let mut spec = json!({"containers": [container()]});
        if let Some(policy) = restart {
            spec["restartPolicy"] = json!(policy);
        }
        spec
    }

    /// A Kubeflow job of `kind` at `api`: one replica per (name,
    /// restartPolicy), each template with one container and no
    /// restartPolicy of its own unless `template` says.
    fn kubeflow(api: &str, kind: &str, replicas: &[(&str, Option<&str>)], template: Option<&str>) -> Value {
        let field = crate::workloads::kubeflow(kind).expect("a Kubeflow kind").0;
        let mut specs = serde_json::Map::new();
        for (name, policy) in replicas {
            let mut replica = json!({"replicas": 1, "template": {"spec": pod_spec(template)}});
            if let Some(policy) = policy {
                replica["restartPolicy"] = json!(policy);
            }
            specs.insert(name.to_string(), replica);
        }
        json!({"apiVersion": api, "kind": kind, "metadata": {"name": "j"}, "spec": {field: specs}})
    }

    fn pair(label: &str, policy: &str) -> (String, String) {
        (label.to_string(), policy.to_string())
    }

    // The quit policies these defaults call for: Never -> always,
    // OnFailure -> on-success, Always -> never (restart.rs).

    #[test]
    fn tfjob_v1_replicas_default_to_never() {
        let doc = kubeflow(
            "kubeflow.org/v1",
            "TFJob",
            &[("Chief", None), ("PS", None), ("Worker", None)],
            None,
        );
        assert_eq!(
            policies(doc),
            [pair("Chief", "always"), pair("PS", "always"), pair("Worker", "always")]
        );
    }

    #[test]
    fn pytorchjob_v1_replicas_default_to_on_failure() {
        let doc = kubeflow(
            "kubeflow.org/v1",
            "PyTorchJob",
            &[("Master", None), ("Worker", None)],
            None,
        );
        assert_eq!(
            policies(doc),
            [pair("Master", "on-success"), pair("Worker", "on-success")]
        );
    }

    #[test]
    fn xgboostjob_v1_replicas_default_to_never() {
        let doc = kubeflow(
            "kubeflow.org/v1",
            "XGBoostJob",
            &[("Master", None), ("Worker", None)],
            None,
        );
        assert_eq!(policies(doc), [pair("Master", "always"), pair("Worker", "always")]);
    }

    #[test]
    fn jaxjob_v1_replicas_default_to_never() {
        let doc = kubeflow("kubeflow.org/v1", "JAXJob", &[("Worker", None)], None);
        assert_eq!(policies(doc), [pair("Worker", "always")]);
    }

    #[test]
    fn paddlejob_v1_replicas_default_to_on_failure() {
        let doc = kubeflow(
            "kubeflow.org/v1",
            "PaddleJob",
            &[("Master", None), ("Worker", None)],
            None,
        );
        assert_eq!(
            policies(doc),
            [pair("Master", "on-success"), pair("Worker", "on-success")]
        );
    }

    #[test]
    fn mpijob_v1_launcher_and_worker_default_to_never() {
        let doc = kubeflow(
            "kubeflow.org/v1",
            "MPIJob",
            &[("Launcher", None), ("Worker", None)],
            None,
        );
        assert_eq!(policies(doc), [pair("Launcher", "always"), pair("Worker", "always")]);
    }

    #[test]
    fn mpijob_v2beta1_launcher_defaults_to_on_failure() {
        let doc = kubeflow("kubeflow.org/v2beta1", "MPIJob", &[("Launcher", None)], None);
        assert_eq!(policies(doc), [pair("Launcher", "on-success")]);
    }

    #[test]
    fn mpijob_v2beta1_worker_defaults_to_never() {
        let doc = kubeflow("kubeflow.org/v2beta1", "MPIJob", &[("Worker", None)], None);
        assert_eq!(policies(doc), [pair("Worker", "always")]);
    }

    #[test]
    fn a_replicas_own_restart_policy_wins_over_the_default() {
        let doc = kubeflow(
            "kubeflow.org/v2beta1",
            "MPIJob",
            &[("Launcher", Some("Never")), ("Worker", Some("OnFailure"))],
            None,
        );
        assert_eq!(
            policies(doc),
            [pair("Launcher", "always"), pair("Worker", "on-success")]
        );
        let doc = kubeflow("kubeflow.org/v1", "PaddleJob", &[("Worker", Some("Never"))], None);
        assert_eq!(policies(doc), [pair("Worker", "always")]);
    }

    #[test]
    fn a_kubeflow_replicas_policy_overwrites_its_pod_templates() {
        // The template's own restartPolicy is written over by the replica's,
        // named or defaulted.
        let doc = kubeflow(
            "kubeflow.org/v1",
            "PyTorchJob",
            &[("Master", None), ("Worker", Some("Never"))],
            Some("Always"),
        );
        assert_eq!(policies(doc), [pair("Master", "on-success"), pair("Worker", "always")]);
        let doc = kubeflow("kubeflow.org/v2beta1", "MPIJob", &[("Launcher", None)], Some("Never"));
        assert_eq!(policies(doc), [pair("Launcher", "on-success")]);
    }

    #[test]
    fn kubeflow_exit_code_runs_its_pods_under_never() {
        assert_eq!(replica_pod_policy("ExitCode"), "Never");
        assert_eq!(replica_pod_policy("OnFailure"), "OnFailure");
        let doc = kubeflow("kubeflow.org/v1", "TFJob", &[("Worker", Some("ExitCode"))], None);
        assert_eq!(policies(doc), [pair("Worker", "always")]);
    }

    #[test]
    fn a_kubeflow_version_or_replica_type_the_table_does_not_know_is_skipped_naming_the_field() {
        let doc = kubeflow("kubeflow.org/v1alpha2", "MPIJob", &[("Launcher", None)], None);
        let [(label, result)] = &policies(doc)[..] else {
            panic!()
        };
        assert_eq!(label, "Launcher");
        assert!(
            result.starts_with("skipped: ") && result.contains("spec.mpiReplicaSpecs.Launcher.restartPolicy"),
            "{result}"
        );
        assert!(result.contains("kubeflow.org/v1alpha2"), "{result}");
        // mpi-operator runs Launcher and Worker only.
        let doc = kubeflow("kubeflow.org/v2beta1", "MPIJob", &[("launcher", None)], None);
        let [(_, result)] = &policies(doc)[..] else { panic!() };
        assert!(
            result.contains("spec.mpiReplicaSpecs.launcher.restartPolicy"),
            "{result}"
        );
        // Named, it is taken as it is.
        let doc = kubeflow(
            "kubeflow.org/v1alpha2",
            "MPIJob",
            &[("Launcher", Some("OnFailure"))],
            None,
        );
        assert_eq!(policies(doc), [pair("Launcher", "on-success")]);
    }

    fn replicated_jobs(restart: Option<&str>) -> Value {
        json!({"replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": pod_spec(restart)}}}}]})
    }

    #[test]
    fn jobset_replicated_jobs_default_to_on_failure() {
        let doc = json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "js"},
            "spec": replicated_jobs(None)});
        assert_eq!(
            policies(doc),
            [pair("spec.replicatedJobs[0].template.spec.template", "on-success")]
        );
        let named = json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "js"},
            "spec": replicated_jobs(Some("Never"))});
        assert_eq!(
            policies(named),
            [pair("spec.replicatedJobs[0].template.spec.template", "always")]
        );
    }

    #[test]
    fn every_trainer_fact_cites_the_release_it_was_read_at() {
        for table in [TRAINER_OVERRIDE, TRAINER_RUNTIME_REF, TRAINER_PODS] {
            assert!(!table.is_empty());
            for c in table {
                assert!(c.source.starts_with("kubeflow/trainer v2.3.0 pkg/"), "{c:?}");
                assert!(c.source.contains("line"), "{c:?}");
            }
        }
    }

    #[test]
    fn trainer_runtimes_default_to_on_failure_through_jobset() {
        for kind in ["TrainingRuntime", "ClusterTrainingRuntime"] {
            let doc = json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": kind, "metadata": {"name": "rt"},
                "spec": {"template": {"spec": replicated_jobs(None)}}});
            assert_eq!(
                policies(doc),
                [pair(
                    "spec.template.spec.replicatedJobs[0].template.spec.template",
                    "on-success"
                )],
                "{kind}"
            );
        }
    }

    #[test]
    fn rayjob_submitter_has_no_default_and_needs_never_or_on_failure() {
        let doc = |restart| {
            json!({"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "r"},
                "spec": {"entrypoint": "python x.py", "submitterPodTemplate": {"spec": pod_spec(restart)}}})
        };
        let [(_, result)] = &policies(doc(None))[..] else {
            panic!()
        };
        assert!(
            result.starts_with("skipped: ")
                && result.contains("Never or OnFailure")
                && result.contains("spec.submitterPodTemplate.spec.restartPolicy"),
            "{result}"
        );
        assert_eq!(
            policies(doc(Some("Never"))),
            [pair("spec.submitterPodTemplate", "always")]
        );
    }

    #[test]
    fn argo_step_pods_take_never_and_meshwrap_quits_nothing_there() {
        // Even with a podSpecPatch that restarts the step in place: Argo
        // stops the sidecars itself, so meshwrap sends no quit at all.
        let doc = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": {"name": "w"},
            "spec": {"entrypoint": "main", "podSpecPatch": "restartPolicy: OnFailure",
                "templates": [{"name": "main", "container": container(), "podSpecPatch": "restartPolicy: OnFailure"}]}});
        assert_eq!(
            lookup("argoproj.io/v1alpha1", "Workflow", "").unwrap().default,
            RestartDefault::Policy("Never")
        );
        assert_eq!(policies(doc), [pair("template main", "never")]);
    }

    #[test]
    fn pod_defaults_to_always() {
        let doc = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": pod_spec(None)});
        assert_eq!(policies(doc), [pair("pod", "never")]);
        let named =
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": pod_spec(Some("OnFailure"))});
        assert_eq!(policies(named), [pair("pod", "on-success")]);
    }

    #[test]
    fn deployment_statefulset_daemonset_replicaset_and_replicationcontroller_default_to_always() {
        for (api, kind) in [
            ("apps/v1", "Deployment"),
            ("apps/v1", "StatefulSet"),
            ("apps/v1", "DaemonSet"),
            ("apps/v1", "ReplicaSet"),
            ("v1", "ReplicationController"),
        ] {
            let doc = json!({"apiVersion": api, "kind": kind, "metadata": {"name": "d"},
                "spec": {"template": {"spec": pod_spec(None)}}});
            assert_eq!(policies(doc), [pair("spec.template", "never")], "{kind}");
        }
    }

    #[test]
    fn job_and_cronjob_have_no_default_and_need_never_or_on_failure() {
        let job = |restart| {
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
                "spec": {"template": {"spec": pod_spec(restart)}}})
        };
        let cron = |restart| {
            json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c"},
                "spec": {"schedule": "@daily", "jobTemplate": {"spec": {"template": {"spec": pod_spec(restart)}}}}})
        };
        for (doc, field) in [
            (job(None), "spec.template.spec.restartPolicy"),
            (cron(None), "spec.jobTemplate.spec.template.spec.restartPolicy"),
        ] {
            let [(_, result)] = &policies(doc)[..] else { panic!() };
            assert!(
                result.starts_with("skipped: ") && result.contains("Never or OnFailure") && result.contains(field),
                "{result}"
            );
        }
        assert_eq!(policies(job(Some("Never"))), [pair("spec.template", "always")]);
        assert_eq!(policies(job(Some("OnFailure"))), [pair("spec.template", "on-success")]);
        assert_eq!(
            policies(cron(Some("OnFailure"))),
            [pair("spec.jobTemplate.spec.template", "on-success")]
        );
    }

    #[test]
    fn a_taught_kind_is_assumed_never_which_is_meshwrap_s_own_assumption() {
        assert_eq!(TAUGHT, "Never");
        let taught: TemplatePath = "MyJob=spec.template".parse().unwrap();
        let doc = |restart| {
            json!({"apiVersion": "example.com/v1", "kind": "MyJob", "metadata": {"name": "m"},
                "spec": {"template": {"spec": pod_spec(restart)}}})
        };
        assert_eq!(
            policies_taught(doc(None), std::slice::from_ref(&taught)),
            [pair("spec.template", "always")]
        );
        assert_eq!(
            policies_taught(doc(Some("OnFailure")), &[taught]),
            [pair("spec.template", "on-success")]
        );
    }

    #[test]
    fn every_fact_cites_a_repository_path_and_version() {
        for fact in FACTS {
            let s = fact.source;
            let repo = s.split(' ').next().unwrap();
            assert!(repo.split('/').count() == 2, "{s}");
            let versioned = s.split(' ').any(|w| {
                w.strip_prefix('v')
                    .is_some_and(|v| v.split('.').count() == 3 && v.split('.').all(|n| n.parse::<u32>().is_ok()))
            });
            assert!(versioned && s.contains(".go "), "{s}");
        }
    }

    #[test]
    fn every_kind_workloads_knows_has_a_fact() {
        for (api, kind) in [
            ("v1", "Pod"),
            ("batch/v1", "Job"),
            ("batch/v1", "CronJob"),
            ("apps/v1", "Deployment"),
            ("v1", "ReplicationController"),
            ("jobset.x-k8s.io/v1alpha2", "JobSet"),
            ("trainer.kubeflow.org/v1alpha1", "TrainingRuntime"),
            ("trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime"),
            ("ray.io/v1", "RayJob"),
            ("argoproj.io/v1alpha1", "CronWorkflow"),
        ] {
            assert!(lookup(api, kind, "").is_some(), "{api} {kind}");
        }
        for kind in ["TFJob", "PyTorchJob", "XGBoostJob", "PaddleJob", "JAXJob", "MPIJob"] {
            assert!(lookup("kubeflow.org/v1", kind, "Worker").is_some(), "{kind}");
        }
        assert!(lookup("kubeflow.org/v2beta1", "MPIJob", "Launcher").is_some());
        assert!(lookup("kubeflow.org/v2beta1", "TFJob", "Worker").is_none());
        assert!(lookup("kubeflow.org/v1", "MPIJob", "Server").is_none());
    }
}
