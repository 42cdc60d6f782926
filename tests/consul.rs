//! Consul on Kubernetes against the real Envoy 1.40.0 (#39): Envoy stands
//! in for consul-dataplane's proxy with its admin on 19000, and a stand-in
//! lifecycle server modelled on consul-dataplane's (support/consul.rs) on
//! 20600. The Job is the one `kubectl meshwrap inject` wrote
//! (kubectl-meshwrap/tests/golden/consul-job.out.yaml, which the webhook's
//! tests prove it writes too), laid out by tests/pod.rs's `Wrapped`, with
//! the annotations consul-k8s adds at injection (its mark and version).
//!
//! What is checked from the proxy's side: Envoy's admin access log (the
//! polls of `/ready`, the drain and the quits) and the stand-in's request
//! log. The Job completes when Envoy got exactly one accepted quit, and
//! that quit came from the lifecycle server, after the one graceful
//! shutdown meshwrap asked for; nothing reached Envoy's `/quitquitquit`
//! from meshwrap. They need root, ip and Envoy; without them each says it
//! was skipped (in CI, where POD_TESTS_REQUIRED is set, it fails instead).

use std::time::Duration;

use crate::pod::{MeshedPod, Wrapped};
use crate::support::consul::{Dataplane, Lifecycle};
use crate::support::envoy::{self, Envoy, Warm};
use crate::support::pod::{self, Node, Phase};

/// Envoy turns LIVE this long after it starts (time enough, on a loaded
/// machine, for meshwrap to start and see it warming).
const WARMS: Duration = Duration::from_secs(3);
const ADMIN: u16 = 19000;
const GOLDEN: &str = "kubectl-meshwrap/tests/golden/consul-job.out.yaml";
const ARGO_GOLDEN: &str = "kubectl-meshwrap/tests/golden/argo-consul.out.yaml";
/// What consul-k8s's injector adds to the pod (mesh_webhook.go, v2.0.3).
const MARKS: [&str; 2] = [
    r#"consul.hashicorp.com/connect-inject-status="injected""#,
    r#"consul.hashicorp.com/consul-k8s-version="v2.0.3""#,
];

fn consul_pod() -> MeshedPod {
    let mut node = Node::new();
    let ns = node.namespace("consul");
    MeshedPod::bare(node, ns)
}

/// Envoy exited on exactly one accepted quit, sent by the lifecycle server
/// after the drain where on; the stand-in got exactly one graceful shutdown.
fn one_quit_through_the_lifecycle_server(envoy: &Envoy, dataplane: &Dataplane, lifecycle: &Lifecycle) {
    let quits = envoy.requests("POST", "/quitquitquit");
    assert_eq!((quits.len(), envoy.accepted_quits()), (1, 1), "{quits:?}");
    let asked: Vec<String> = dataplane.requests();
    let shutdowns = asked.iter().filter(|r| r.ends_with(&lifecycle.shutdown_path)).count();
    assert_eq!(shutdowns, 1, "graceful shutdowns asked: {asked:?}");
    assert!(asked.iter().any(|r| r == "sent /quitquitquit: 200"), "{asked:?}");
    let drains = envoy.requests("POST", "/drain_listeners?inboundonly&graceful&skip_exit");
    assert_eq!(drains.len(), usize::from(lifecycle.drain), "{:?}", envoy.admin_log());
    assert!(
        !asked.iter().any(|r| r.contains("graceful_startup")),
        "graceful startup is no readiness signal: {asked:?}"
    );
}

/// meshwrap waited for Envoy's own /ready: 503 first, and stopped at its 200.
fn waited_for_envoys_ready(envoy: &Envoy) {
    let statuses: Vec<u16> = envoy.polls().iter().map(|r| r.status).collect();
    assert!(statuses.len() >= 2 && statuses[0] == 503, "polls: {statuses:?}");
    assert_eq!(statuses.last(), Some(&200), "polls: {statuses:?}");
}

/// Runs the golden's Job `name` to its end against `proxies` Envoys and
/// stand-ins (the i-th with its admin on 19000+i, its lifecycle on its
/// graceful port+i, as consul-k8s lays out a multi-port pod).
fn run_job(name: &str, proxies: u16) {
    let pod = consul_pod();
    let job = Wrapped::load(&pod, GOLDEN, Some(name), &MARKS);
    let lifecycle = Lifecycle::of_file(&job.annotations);
    job.install();
    let mut guard = job.guard(&pod);
    // Envoy last, so that it is still warming when meshwrap starts.
    let mut proxy = Vec::new();
    for i in 0..proxies {
        let envoy = Envoy::start_on(&pod.node, &pod.ns, Warm::After(WARMS), ADMIN + i);
        let own = Lifecycle {
            port: lifecycle.port + i,
            ..lifecycle.clone()
        };
        let dataplane = Dataplane::start(&pod.node, &pod.ns, &own, ADMIN + i);
        proxy.push((envoy, dataplane, own));
    }
    let app = job.app(&pod, "migrate", &["sh", "-c", "echo app: ran"]).finish();
    app.assert_code(0)
        .assert_stderr_has("found the consul sidecar (consul.hashicorp.com/connect-inject-status)")
        .assert_stderr_has("sidecar quit")
        .assert_stderr_lacks("Envoy admin");
    assert!(app.stdout.contains("app: ran"), "{}", app.stdout);
    for (_, _, own) in &proxy {
        app.assert_stderr_has(&format!("127.0.0.1:{}{}", own.port, own.shutdown_path));
    }
    let mut others: Vec<&mut crate::support::Running> = Vec::new();
    for (envoy, dataplane, _) in proxy.iter_mut() {
        others.push(&mut envoy.process);
        others.push(&mut dataplane.process);
    }
    others.push(&mut guard);
    assert_eq!(pod::phase_with(0, &mut others), Phase::Succeeded, "{lifecycle:?}");
    for (envoy, dataplane, own) in &proxy {
        waited_for_envoys_ready(envoy);
        one_quit_through_the_lifecycle_server(envoy, dataplane, own);
    }
}

/// inject's Job (grace period "0" written, the Helm chart's lifecycle on
/// with its drain): Envoy is waited for, drained and quit once, through the
/// lifecycle server, and the pod completes at once, not 30 s later.
#[test]
fn consul_1_an_injected_job_completes_against_envoy_with_one_quit_through_the_lifecycle_server() {
    if envoy::skip("consul_1") {
        return;
    }
    run_job("consul-migrate", 1);
}

/// The user's lifecycle "false" stays: the dataplane's own defaults (no
/// drain, no grace period, /graceful_shutdown), and the Job completes.
#[test]
fn consul_2_with_the_lifecycle_off_the_job_still_completes_with_one_quit_and_no_drain() {
    if envoy::skip("consul_2") {
        return;
    }
    run_job("consul-lifecycle-off", 1);
}

/// An Argo step (kubectl-meshwrap/tests/golden/argo-consul.out.yaml): its
/// meshwrap never quits (Argo's wait container still needs the mesh), and
/// Argo's kill command, run in the dataplane's container with the mounts
/// consul-k8s gives it from the pod's annotation, quits once through the
/// lifecycle server; the pod completes, with no grace period waited out.
#[test]
fn consul_4_an_argo_step_is_stopped_by_argos_kill_command_through_the_lifecycle_server() {
    if envoy::skip("consul_4") {
        return;
    }
    let pod = consul_pod();
    let step = Wrapped::load_argo(&pod, ARGO_GOLDEN, "main", &MARKS);
    let lifecycle = Lifecycle::of_file(&step.annotations);
    assert_eq!(lifecycle.grace_seconds, 0, "inject's grace period: {lifecycle:?}");
    step.install();
    let mut envoy = Envoy::start_on(&pod.node, &pod.ns, Warm::After(WARMS), ADMIN);
    let mut dataplane = Dataplane::start(&pod.node, &pod.ns, &lifecycle, ADMIN);
    let app = step.app(&pod, "main", &["sh", "-c", "echo step: ran"]).finish();
    app.assert_code(0)
        .assert_stderr_has("found the consul sidecar (consul.hashicorp.com/connect-inject-status)")
        .assert_stderr_has("--quit-policy never");
    assert!(
        dataplane.requests().is_empty(),
        "meshwrap's step quit nothing: {:?}",
        dataplane.requests()
    );
    let kill = step
        .argo_kill(
            &pod,
            "consul-dataplane",
            "consul.hashicorp.com/consul-sidecar-user-volume-mount",
        )
        .finish();
    kill.assert_code(0)
        .assert_stderr_has(&format!("127.0.0.1:{}{}", lifecycle.port, lifecycle.shutdown_path))
        .assert_stderr_has("sidecar quit")
        .assert_stderr_lacks("Envoy admin");
    assert_eq!(
        pod::phase_with(0, &mut [&mut envoy.process, &mut dataplane.process]),
        Phase::Succeeded
    );
    waited_for_envoys_ready(&envoy);
    one_quit_through_the_lifecycle_server(&envoy, &dataplane, &lifecycle);
}

/// A multi-port pod (connect-service lists two services): meshwrap waits
/// for both Envoys (19000, 19001) and quits both through their lifecycle
/// servers (20600, 20601), once each.
#[test]
fn consul_3_a_multi_port_job_waits_for_and_quits_each_dataplane_once() {
    if envoy::skip("consul_3") {
        return;
    }
    run_job("consul-multi-port", 2);
}
