//! End to end: a pod built from network and PID namespaces and istio-init's
//! iptables rules (see support/pod.rs), reproducing the two mesh failures
//! users see and showing meshwrap fixing them. Each test is one scenario.
//! They need root, ip and iptables; without them each test says it was
//! skipped and why (in CI, where POD_TESTS_REQUIRED is set, it fails instead).

use std::time::Duration;

use crate::support::pod::{self, Node, Phase};
use crate::support::*;

const POD: &str = "10.200.0.1";
const REMOTE: &str = "10.200.0.2";
const DATASET_BYTES: usize = 4096;
/// The sidecar comes up this long after the pod starts.
const PROXY_DELAY: Duration = Duration::from_millis(800);

fn dataset_url() -> String {
    format!("http://{REMOTE}:80/dataset")
}

/// A pod namespace with the mesh redirect, linked to a remote host serving
/// the dataset, and meshwrap installed in its emptyDir by the init container.
struct MeshedPod {
    node: Node,
    ns: String,
    meshwrap: String,
    fakemesh: String,
    _remote: Running,
}

fn meshed_pod() -> MeshedPod {
    let mut node = Node::new();
    let ns = node.namespace("pod");
    let remote_ns = node.namespace("remote");
    node.link((&ns, POD), (&remote_ns, REMOTE));
    node.mesh_redirect(&ns);
    let remote = node.remote(&remote_ns, REMOTE, DATASET_BYTES);
    let meshwrap = node.empty_dir_with_meshwrap().to_string_lossy().into_owned();
    let fakemesh = node.fakemesh();
    MeshedPod {
        node,
        ns,
        meshwrap,
        fakemesh,
        _remote: remote,
    }
}

impl MeshedPod {
    /// The app container running `args` (meshwrap's, or none) around the dataset download.
    fn fetch(&self, meshwrap_args: Option<&[&str]>, exit_code: &str) -> Running {
        let url = dataset_url();
        let download = [self.fakemesh.as_str(), "fetch", &url, exit_code];
        let command: Vec<&str> = match meshwrap_args {
            Some(args) => [&[self.meshwrap.as_str()], args, &["--"], &download[..]].concat(),
            None => download.to_vec(),
        };
        self.node.app(&self.ns, &command)
    }

    /// The sidecar container, and wait until it listens unless it is delayed.
    fn sidecar(&self, delay: Duration) -> Running {
        let mut sidecar = self.node.sidecar(&self.ns, delay);
        if delay.is_zero() {
            sidecar.wait_stdout("sidecar: up");
        }
        sidecar
    }
}

#[test]
fn pod_1_without_meshwrap_the_download_is_refused_and_the_pod_never_completes() {
    if pod::skip("pod_1") {
        return;
    }
    let pod = meshed_pod();
    let mut sidecar = pod.sidecar(PROXY_DELAY);
    let app = pod.fetch(None, "0").finish();
    app.assert_code(1);
    app.check(
        app.stdout.contains("app: fetch failed: Connection refused"),
        "the download is refused",
    );
    assert_eq!(
        pod::phase(app.code(), &mut sidecar),
        Phase::StuckNotReady,
        "the sidecar outlives the app"
    );
}

#[test]
fn pod_2_with_meshwrap_the_download_succeeds_and_the_pod_completes() {
    if pod::skip("pod_2") {
        return;
    }
    let pod = meshed_pod();
    let mut sidecar = pod.sidecar(PROXY_DELAY);
    let mut app = pod.fetch(Some(&[]), "0");
    sidecar.wait_stdout("sidecar: up");
    let up = pod.node.at();
    app.wait_stdout("app: started");
    let started = pod.node.at();
    sidecar.wait_stdout("sidecar: quit received, exiting");
    let quit = pod.node.at();
    let app = app.finish();
    app.assert_code(0).assert_stderr_has("sidecar quit");
    app.check(
        app.stdout.contains(&format!("app: fetched {DATASET_BYTES} bytes")),
        "the download went through the mesh",
    );
    let sidecar = sidecar.finish();
    sidecar.assert_code(0);
    let forwarded = format!("sidecar: forwarding to {REMOTE}:80");
    sidecar.check(sidecar.stdout.contains(&forwarded), "through the sidecar");
    sidecar.check(sidecar.stdout.matches("quit received").count() == 1, "exactly one quit");
    println!("timeline: sidecar up +{up} ms, command started +{started} ms, quit +{quit} ms, pod Succeeded");
}

#[test]
fn pod_3_a_failing_command_fails_the_pod_or_keeps_the_sidecar_per_policy() {
    if pod::skip("pod_3") {
        return;
    }
    for (policy, expected) in [("always", Phase::Failed(3)), ("on-success", Phase::StuckNotReady)] {
        let pod = meshed_pod();
        let mut sidecar = pod.sidecar(PROXY_DELAY);
        let app = pod.fetch(Some(&["--quit-policy", policy]), "3").finish();
        app.assert_code(3);
        assert_eq!(pod::phase(app.code(), &mut sidecar), expected, "--quit-policy {policy}");
    }
}

#[test]
fn pod_4_deleting_the_pod_terminates_the_command_with_143() {
    if pod::skip("pod_4") {
        return;
    }
    let pod = meshed_pod();
    let sidecar = pod.sidecar(Duration::ZERO);
    let mut app = pod.node.app(
        &pod.ns,
        &[&pod.meshwrap, "--", "sh", "-c", "echo running; exec sleep 60"],
    );
    app.wait_stdout("running");
    // The kubelet sends SIGTERM to every container's PID 1.
    let pid1 = pod::child_of(app.pid());
    // SAFETY: kill takes plain integers.
    unsafe {
        assert_eq!(libc::kill(pid1, libc::SIGTERM), 0);
        assert_eq!(libc::kill(sidecar.pid(), libc::SIGTERM), 0);
    }
    app.finish()
        .assert_code(143)
        .assert_stderr_has("status=\"signal SIGTERM\"");
}

#[test]
fn pod_5_a_sidecar_that_never_starts_fails_without_running_the_command() {
    if pod::skip("pod_5") {
        return;
    }
    let pod = meshed_pod();
    let app = pod
        .fetch(Some(&["--timeout", "2s", "--quit-timeout", "500ms"]), "0")
        .finish();
    app.assert_code(125)
        .assert_stdout("")
        .assert_stderr_has("not ready in time");
}

#[test]
fn pod_6_meshwrap_as_pid_1_reaps_50_orphans() {
    if pod::skip("pod_6") {
        return;
    }
    let pod = meshed_pod();
    let mut sidecar = pod.sidecar(Duration::ZERO);
    let mut app = pod
        .node
        .app(&pod.ns, &[&pod.meshwrap, "--", &probe_bin(), "orphans", "50"]);
    app.wait_stdout("reaped 50");
    app.wait_stdout("ppid 1");
    app.close_stdin();
    app.finish().assert_code(0);
    assert_eq!(pod::phase(0, &mut sidecar), Phase::Succeeded);
}

#[test]
fn pod_7_two_tfjob_workers_reach_each_other_through_their_meshes() {
    if pod::skip("pod_7") {
        return;
    }
    let mut node = Node::new();
    let (a, b) = (node.namespace("wa"), node.namespace("wb"));
    let (addr_a, addr_b) = ("10.201.0.1", "10.201.0.2");
    node.link((&a, addr_a), (&b, addr_b));
    node.mesh_redirect(&a);
    node.mesh_redirect(&b);
    let fakemesh = node.fakemesh();
    let mut sidecars = [
        node.sidecar(&a, Duration::from_millis(300)),
        node.sidecar(&b, Duration::from_millis(1200)),
    ];
    let meshwrap = node.empty_dir_with_meshwrap();
    let worker = |ns: &str, peer: &str| {
        let peer_url = format!("http://{peer}:9000/shard");
        node.app(
            ns,
            &[
                meshwrap.to_str().unwrap(),
                "--",
                &fakemesh,
                "worker",
                "0.0.0.0:9000",
                &peer_url,
            ],
        )
    };
    let workers = [worker(&a, addr_b), worker(&b, addr_a)];
    for (worker, sidecar) in workers.into_iter().zip(sidecars.iter_mut()) {
        let run = worker.finish();
        run.assert_code(0)
            .check(run.stdout.contains("worker: reached peer"), "reached its peer");
        assert_eq!(pod::phase(0, sidecar), Phase::Succeeded);
    }
}
