//! What inject writes where the mesh may come from the namespace, which a
//! manifest cannot show: with `--mesh auto` (the default), a pod that shows
//! no mesh a namespace can turn on (Istio, Linkerd) gets the switches each
//! would need (Linkerd's shutdown switch, Argo's kill commands), inert
//! where that mesh is absent, and the report says the namespace was not
//! seen. `--mesh NAMES` or `--mesh none` says what the namespace injects.

mod common;

use common::*;

const JOB: &str = "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec:\n  template:\n    spec:\n      restartPolicy: Never\n      containers:\n        - {name: c, image: x, command: [run]}\n";

const STEP: &str = "apiVersion: argoproj.io/v1alpha1\nkind: Workflow\nmetadata: {generateName: w-}\nspec:\n  entrypoint: main\n  templates:\n    - name: main\n      container: {image: x, command: [run]}\n";

const LINKERD_SHUTDOWN: &str = "config.linkerd.io/proxy-admin-shutdown: enabled";
const UNSEEN: &str = "the namespace is not seen here and may inject istio or linkerd";

fn inject(input: &str, more: &[&str]) -> Run {
    let mut args = vec!["inject", "--image", IMAGE];
    args.extend(more);
    let run = kubectl_meshwrap(&args, input);
    assert_eq!(run.code, 0, "{more:?}: {}", run.stderr);
    run
}

#[test]
fn a_job_that_shows_no_mesh_gets_linkerds_shutdown_switch_and_the_report_says_why() {
    let run = inject(JOB, &[]);
    assert!(run.stdout.contains(LINKERD_SHUTDOWN), "{}", run.stdout);
    assert!(run.stderr.contains(UNSEEN), "{}", run.stderr);
    assert!(
        run.stderr
            .contains("set config.linkerd.io/proxy-admin-shutdown for them"),
        "{}",
        run.stderr
    );
    // The guard stays: nothing proves the namespace's proxy native.
    assert!(run.stdout.contains("meshwrap-guard"), "{}", run.stdout);
}

#[test]
fn mesh_names_what_the_namespace_injects_and_none_says_nothing() {
    for more in [&["--mesh", "none"][..], &["--mesh", "istio"]] {
        let run = inject(JOB, more);
        assert!(!run.stdout.contains("linkerd"), "{more:?}: {}", run.stdout);
        assert!(!run.stderr.contains(UNSEEN), "{more:?}: {}", run.stderr);
    }
    let named = inject(JOB, &["--mesh", "linkerd"]);
    assert!(named.stdout.contains(LINKERD_SHUTDOWN), "{}", named.stdout);
    assert!(!named.stderr.contains(UNSEEN), "{}", named.stderr);
}

#[test]
fn an_argo_step_that_shows_no_mesh_gets_the_kill_commands_of_both() {
    let run = inject(STEP, &[]);
    for key in [
        "workflows.argoproj.io/kill-cmd-istio-proxy",
        "workflows.argoproj.io/kill-cmd-linkerd-proxy",
        "config.linkerd.io/proxy-admin-shutdown",
    ] {
        assert!(run.stdout.contains(key), "{key}: {}", run.stdout);
    }
    let none = inject(STEP, &["--mesh", "none"]);
    assert!(!none.stdout.contains("kill-cmd"), "{}", none.stdout);
}

#[test]
fn a_pod_that_shows_its_mesh_or_opts_out_gets_nothing_for_the_namespace() {
    let istio = JOB.replace(
        "    spec:\n      restartPolicy",
        "    metadata:\n      labels: {sidecar.istio.io/inject: \"true\"}\n    spec:\n      restartPolicy",
    );
    let run = inject(&istio, &[]);
    assert!(!run.stdout.contains("linkerd"), "{}", run.stdout);
    assert!(!run.stderr.contains("namespace is not seen"), "{}", run.stderr);
    let opted_out = JOB.replace(
        "    spec:\n      restartPolicy",
        "    metadata:\n      annotations: {linkerd.io/inject: disabled}\n    spec:\n      restartPolicy",
    );
    let run = inject(&opted_out, &[]);
    assert!(!run.stdout.contains(LINKERD_SHUTDOWN), "{}", run.stdout);
    // Istio needs no switch for a Job: nothing written, nothing said.
    assert!(!run.stderr.contains("namespace is not seen"), "{}", run.stderr);
    let step = STEP.replace(
        "    - name: main\n",
        "    - name: main\n      metadata:\n        annotations: {linkerd.io/inject: disabled}\n",
    );
    let run = inject(&step, &[]);
    assert!(
        run.stderr
            .contains("may inject istio: set workflows.argoproj.io/kill-cmd-istio-proxy for them"),
        "{}",
        run.stderr
    );
    assert!(!run.stdout.contains("kill-cmd-linkerd"), "{}", run.stdout);
}

#[test]
fn a_native_sidecar_pod_in_an_unseen_namespace_keeps_the_guard_and_the_quit() {
    let native = JOB.replace(
        "      containers:",
        "      initContainers:\n        - {name: cloud-sql-proxy, image: gcr.io/cloud-sql-connectors/cloud-sql-proxy:2.14.1, restartPolicy: Always, args: [p:r:db]}\n      containers:",
    );
    let run = inject(&native, &[]);
    assert!(run.stdout.contains("meshwrap-guard"), "{}", run.stdout);
    assert!(!run.stdout.contains("--native-sidecar"), "{}", run.stdout);
    let none = inject(&native, &["--mesh", "none"]);
    assert!(none.stdout.contains("--native-sidecar"), "{}", none.stdout);
    assert!(!none.stdout.contains("meshwrap-guard"), "{}", none.stdout);
}

#[test]
fn the_krm_function_takes_mesh_none_too() {
    let list = format!(
        "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- {}\nfunctionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata: {{name: c}}\n  data:\n    image: {IMAGE}\n    mesh: none\n",
        JOB.trim_end().replace('\n', "\n  ")
    );
    let run = kubectl_meshwrap(&["fn"], &list);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("meshwrap-guard"), "{}", run.stdout);
    assert!(!run.stdout.contains("linkerd"), "{}", run.stdout);
}

const DEPLOYMENT: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: api}\nspec:\n  selector: {matchLabels: {app: api}}\n  template:\n    metadata: {labels: {app: api}}\n    spec:\n      containers:\n        - {name: api, image: x, command: [serve]}\n";

#[test]
fn a_chart_with_services_gets_its_jobs_wrapped_and_its_services_left_alone_unreported() {
    let chart = format!("{DEPLOYMENT}---\n{JOB}");
    let run = inject(&chart, &[]);
    assert!(run.stdout.starts_with(DEPLOYMENT), "{}", run.stdout);
    assert_eq!(run.stdout.matches("/mesh/meshwrap").count(), 1, "{}", run.stdout);
    assert!(!run.stderr.contains("Deployment/api"), "{}", run.stderr);
    assert!(
        run.stderr
            .contains("1 pod template wrapped, 0 skipped, 0 untouched; 1 long-running workload left alone"),
        "{}",
        run.stderr
    );
    let all = inject(&chart, &["--workloads", "all"]);
    assert_eq!(all.stdout.matches("/mesh/meshwrap").count(), 2, "{}", all.stdout);
    let env = run_in(
        None,
        &["inject", "--image", IMAGE],
        &chart,
        &[("MESHWRAP_WORKLOADS", "all")],
    );
    assert_eq!(env.stdout, all.stdout);
    let bad = run_in(
        None,
        &["inject", "--image", IMAGE, "--workloads", "services"],
        &chart,
        &[],
    );
    assert_eq!(bad.code, 2);
    assert!(
        bad.stdout.is_empty() && bad.stderr.contains("--workloads"),
        "{}",
        bad.stderr
    );
}

#[test]
fn the_krm_function_leaves_services_out_of_its_results_and_takes_workloads() {
    let list = |config: &str| {
        format!(
            "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- {}\nfunctionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata: {{name: c}}\n  data:\n    image: {IMAGE}\n{config}",
            DEPLOYMENT.trim_end().replace('\n', "\n  ")
        )
    };
    let run = kubectl_meshwrap(&["fn"], &list(""));
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        !run.stdout.contains("/mesh/meshwrap") && !run.stdout.contains("results"),
        "{}",
        run.stdout
    );
    let all = kubectl_meshwrap(&["fn"], &list("    workloads: all\n"));
    assert!(all.stdout.contains("/mesh/meshwrap"), "{}", all.stdout);
    let bad = kubectl_meshwrap(&["fn"], &list("    workloads: some\n"));
    assert_ne!(bad.code, 0);
    assert!(
        bad.stderr
            .contains("functionConfig: workloads \"some\" is not batch or all"),
        "{}",
        bad.stderr
    );
}
