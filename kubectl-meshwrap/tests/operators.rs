//! Operators' restart defaults through the real binary, where a template's
//! restart policy cannot be told: no default to assume (a Job's template), an
//! operator version the table does not know, a value no one runs. Each is
//! skipped with the field to set, and nothing is written. (The defaults that
//! are known are in the `operator-defaults` golden and `src/operators.rs`.)

mod common;

use common::*;

const JOB: &str = "apiVersion: batch/v1
kind: Job
metadata: {name: etl}
spec:
  template:
    spec:
      containers:
        - {name: etl, image: etl:1, command: [/etl]}
";

#[test]
fn a_job_without_restart_policy_is_skipped_naming_the_field_and_nothing_is_written() {
    let run = kubectl_meshwrap(&["inject", "--image", IMAGE, "-f", "-"], JOB);
    assert_eq!((run.code, run.stdout.as_str()), (1, ""), "{}", run.stderr);
    assert!(
        run.stderr.contains(
            "Job/etl spec.template: skipped: no restartPolicy, and a Job's pod template has no default \
             (it takes Never or OnFailure): set spec.template.spec.restartPolicy"
        ),
        "{}",
        run.stderr
    );
    // --allow-skip lets it through as it was.
    let run = kubectl_meshwrap(&["inject", "--image", IMAGE, "--allow-skip", "-f", "-"], JOB);
    assert_eq!((run.code, run.stdout.as_str()), (0, JOB), "{}", run.stderr);
    // Named, it is wrapped by it.
    let named = JOB.replace(
        "    spec:\n      containers",
        "    spec:\n      restartPolicy: OnFailure\n      containers",
    );
    let run = kubectl_meshwrap(&["inject", "--image", IMAGE, "-f", "-"], &named);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stderr.contains("--quit-policy on-success"), "{}", run.stderr);
}

#[test]
fn an_mpijob_of_a_version_the_table_does_not_know_is_skipped_naming_the_replica_field() {
    let doc = "apiVersion: kubeflow.org/v1alpha2
kind: MPIJob
metadata: {name: old}
spec:
  mpiReplicaSpecs:
    Launcher:
      replicas: 1
      template:
        spec:
          containers:
            - {name: mpi, image: mpi:1, command: [mpirun, pi]}
";
    let run = kubectl_meshwrap(&["inject", "--image", IMAGE, "-f", "-"], doc);
    assert_eq!((run.code, run.stdout.as_str()), (1, ""), "{}", run.stderr);
    assert!(
        run.stderr.contains(
            "MPIJob/old Launcher: skipped: no restartPolicy, and meshwrap knows no default for replica Launcher \
             of a kubeflow.org/v1alpha2 MPIJob: set spec.mpiReplicaSpecs.Launcher.restartPolicy"
        ),
        "{}",
        run.stderr
    );
}

#[test]
fn a_restart_policy_kubernetes_does_not_know_is_skipped_with_its_value() {
    let doc = JOB.replace(
        "    spec:\n      containers",
        "    spec:\n      restartPolicy: Onfailure\n      containers",
    );
    let run = kubectl_meshwrap(&["inject", "--image", IMAGE, "-f", "-"], &doc);
    assert_eq!((run.code, run.stdout.as_str()), (1, ""), "{}", run.stderr);
    assert!(
        run.stderr.contains(
            "skipped: container etl: the restartPolicy it inherits \"Onfailure\" is not Always, OnFailure or Never"
        ),
        "{}",
        run.stderr
    );
}
