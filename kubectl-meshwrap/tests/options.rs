//! The pod options every front end takes (--mesh, --native, --run-as-user,
//! --resources): a bad value is one line naming the flag or variable and
//! what it accepts, exit 2, and nothing written; the webhook refuses to
//! start on one too.

mod common;

use common::*;

const JOB: &str = "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec:\n  template:\n    spec:\n      restartPolicy: Never\n      containers:\n        - {name: c, image: x, command: [run]}\n";

fn refused(args: &[&str], env: &[(&str, &str)], names: &str, accepts: &str) {
    let mut line = vec!["inject", "--image", IMAGE];
    line.extend(args);
    let run = run_in(None, &line, JOB, env);
    assert_eq!(run.code, 2, "{args:?} {env:?}: {}", run.stderr);
    assert!(run.stdout.is_empty(), "nothing written");
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    assert!(
        run.stderr.contains(names) && run.stderr.contains(accepts),
        "{}",
        run.stderr
    );
}

#[test]
fn bad_pod_options_are_one_line_that_names_them() {
    refused(&["--run-as-user", "0"], &[], "--run-as-user", "runAsNonRoot");
    refused(&["--run-as-user", "me"], &[], "--run-as-user", "a UID above 0 or none");
    refused(
        &[],
        &[("MESHWRAP_RUN_AS_USER", "-5")],
        "--run-as-user",
        "a UID above 0 or none",
    );
    refused(&["--resources", "cpu=1"], &[], "--resources", "requests or limits");
    refused(
        &["--resources", "limits.memory=lots"],
        &[],
        "--resources",
        "KIND.RESOURCE=QUANTITY",
    );
    refused(
        &["--mesh", "istoi"],
        &[],
        "--mesh",
        "auto, none, istio, linkerd, vault, dapr, consul, kuma or cloudsql",
    );
    refused(&["--native", "maybe"], &[], "--native", "prefer");
}

#[test]
fn run_as_user_none_leaves_the_uid_to_the_platform_and_resources_none_adds_none() {
    let run = kubectl_meshwrap(
        &[
            "inject",
            "--image",
            IMAGE,
            "--run-as-user",
            "none",
            "--resources",
            "none",
            "-f",
            "-",
        ],
        JOB,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        !run.stdout.contains("runAsUser") && !run.stdout.contains("resources:"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("runAsNonRoot: true"), "{}", run.stdout);
    let run = kubectl_meshwrap(
        &["inject", "--image", IMAGE, "--run-as-user", "1000680000", "-f", "-"],
        JOB,
    );
    assert!(run.stdout.contains("runAsUser: 1000680000"), "{}", run.stdout);
}

const LIST: &str = "apiVersion: config.kubernetes.io/v1
kind: ResourceList
items:
  - apiVersion: batch/v1
    kind: Job
    metadata: {name: train}
    spec:
      template:
        spec:
          restartPolicy: Never
          containers:
            - {name: train, image: trainer, command: [python, train.py]}
functionConfig:
  apiVersion: v1
  kind: ConfigMap
  metadata: {name: meshwrap}
  data:
    image: registry.example.com/meshwrap:0.1.0
";

#[test]
fn the_krm_function_takes_mesh_native_run_as_user_and_resources() {
    let config = "    mesh: linkerd\n    runAsUser: none\n    resources: limits.memory=64Mi\n";
    let list = format!("{LIST}{config}");
    let run = kubectl_meshwrap(&["fn"], &list);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains("config.linkerd.io/proxy-admin-shutdown: enabled"),
        "{}",
        run.stdout
    );
    assert!(
        !run.stdout.contains("runAsUser: 65532") && run.stdout.contains("limits: {memory: 64Mi}"),
        "{}",
        run.stdout
    );
    let native = kubectl_meshwrap(&["fn"], &format!("{LIST}    mesh: istio\n    native: \"true\"\n"));
    assert!(
        native.stdout.contains("sidecar.istio.io/nativeSidecar"),
        "{}",
        native.stdout
    );
    for (bad, says) in [
        ("    mesh: istoi\n", "functionConfig: mesh \"istoi\" is not auto, none,"),
        ("    native: maybe\n", "functionConfig: native \"maybe\""),
        ("    runAsUser: \"0\"\n", "functionConfig: runAsUser: 0 is root"),
        ("    resources: lots\n", "functionConfig: resources:"),
    ] {
        let run = kubectl_meshwrap(&["fn"], &format!("{LIST}{bad}"));
        assert_eq!(run.code, 1, "{bad}");
        assert!(run.stderr.contains(says), "{bad}: {}", run.stderr);
    }
}

/// H1 through the KRM function: `native: "true"` on a template whose
/// Linkerd stable native key is "false" leaves it, wraps the command, and
/// never stamps the pod native.
#[test]
fn the_krm_functions_native_wraps_a_pod_whose_native_switch_is_set_otherwise() {
    let list = LIST.replace(
        "        spec:\n          restartPolicy",
        "        metadata:\n          annotations:\n            linkerd.io/inject: enabled\n            \
         config.linkerd.io/proxy-enable-native-sidecar: \"false\"\n        spec:\n          restartPolicy",
    );
    let run = kubectl_meshwrap(&["fn"], &format!("{list}    native: \"true\"\n"));
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("/mesh/meshwrap"), "wrapped: {}", run.stdout);
    assert!(
        !run.stdout.contains(r#""native":"#),
        "not stamped native: {}",
        run.stdout
    );
    assert!(
        run.stdout
            .contains("config.linkerd.io/proxy-enable-native-sidecar: \"false\""),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout
            .contains("left as set, so linkerd's proxy runs as a regular container"),
        "reported in the results: {}",
        run.stdout
    );
}

/// L3: --sidecar takes what meshwrap's takes (auto, a comma list in
/// MESHWRAP_SIDECAR, NAME=PLACE/QUIT_PLACE); a bad item is one line.
#[test]
fn sidecar_takes_auto_and_lists_as_meshwraps_does() {
    let run = kubectl_meshwrap(&["inject", "--image", IMAGE, "--sidecar", "auto", "-f", "-"], JOB);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("--sidecar, auto,"), "{}", run.stdout);
    let run = run_in(
        None,
        &["inject", "--image", IMAGE, "-f", "-"],
        JOB,
        &[("MESHWRAP_SIDECAR", "istio,vault")],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains("--sidecar, istio, --sidecar, vault,"),
        "{}",
        run.stdout
    );
    let run = kubectl_meshwrap(
        &[
            "inject",
            "--image",
            IMAGE,
            "--sidecar",
            "cloudsql=127.0.0.1:9190/127.0.0.1:9192",
            "-f",
            "-",
        ],
        JOB,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    refused(&["--sidecar", "consulx"], &[], "--sidecar", "'consulx' is not a preset");
}
