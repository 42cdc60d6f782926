//! End to end: a pod built from network and PID namespaces and istio-init's
//! iptables rules (see support/pod.rs), reproducing the two mesh failures
//! users see and showing meshwrap fixing them. Each test is one scenario.
//! They need root, ip and iptables; without them each test says it was
//! skipped and why (in CI, where POD_TESTS_REQUIRED is set, it fails instead).

use std::path::Path;
use std::time::Duration;

use crate::support::command::meshwrap_bin;
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
pub(crate) struct MeshedPod {
    pub(crate) node: Node,
    pub(crate) ns: String,
    meshwrap: String,
    fakemesh: String,
    _remote: Option<Running>,
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
        _remote: Some(remote),
    }
}

impl MeshedPod {
    /// A pod namespace of `node`'s without the redirect or the remote host
    /// (tests/consul.rs: a real Envoy stands in for the proxy).
    pub(crate) fn bare(node: Node, ns: String) -> MeshedPod {
        let meshwrap = node.empty_dir_with_meshwrap().to_string_lossy().into_owned();
        MeshedPod {
            node,
            ns,
            meshwrap,
            fakemesh: String::new(),
            _remote: None,
        }
    }

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

/// The commands of a pod with a guard: meshwrap and the guard share the
/// guard emptyDir and the same options, as `inject` writes them.
struct Guarded {
    pod: MeshedPod,
    dir: String,
    options: Vec<String>,
}

impl Guarded {
    fn new(options: &[&str]) -> Guarded {
        let pod = meshed_pod();
        let dir = pod.node.empty_dir("meshwrap-guard").to_string_lossy().into_owned();
        let mut all = vec!["--guard-dir".to_string(), dir.clone()];
        all.extend(options.iter().map(|o| o.to_string()));
        Guarded { pod, dir, options: all }
    }

    fn options(&self) -> Vec<&str> {
        self.options.iter().map(String::as_str).collect()
    }

    pub(crate) fn guard(&self) -> Running {
        self.pod.node.guard(&self.pod.ns, &self.pod.meshwrap, &self.options())
    }

    /// The app container: meshwrap with the shared options around `command`.
    pub(crate) fn app(&self, command: &[&str]) -> Running {
        let mut line = vec![self.pod.meshwrap.as_str()];
        line.extend(self.options());
        line.push("--");
        line.extend_from_slice(command);
        self.pod.node.app(&self.pod.ns, &line)
    }

    /// The app container, once its command runs (a long training step).
    fn training(&self) -> Running {
        let mut app = self.app(&["sh", "-c", "echo training; exec sleep 60"]);
        app.wait_stdout("training");
        app
    }
}

#[test]
fn pod_8_a_group_kill_leaves_the_pod_stuck_without_a_guard_and_failed_137_with_one() {
    if pod::skip("pod_8") {
        return;
    }
    // Without a guard: the kernel kills meshwrap too, nobody quits the sidecar.
    let pod = meshed_pod();
    let mut sidecar = pod.sidecar(Duration::ZERO);
    let mut app = pod.node.app(
        &pod.ns,
        &[&pod.meshwrap, "--", "sh", "-c", "echo training; exec sleep 60"],
    );
    app.wait_stdout("training");
    assert!(pod::group_kill(&app) >= 2, "meshwrap and its command");
    let app = app.finish();
    assert_eq!(app.container_code(), 137);
    assert_eq!(
        pod::phase(137, &mut sidecar),
        Phase::StuckNotReady,
        "the failure, reproduced"
    );

    // With the guard: exactly one quit, from the guard, within 100 ms.
    let pod = Guarded::new(&[]);
    let mut sidecar = pod.pod.sidecar(Duration::ZERO);
    let mut guard = pod.guard();
    let app = pod.training();
    let killed = pod.pod.node.at();
    pod::group_kill(&app);
    sidecar.wait_stdout("sidecar: quit received, exiting");
    let quit_after = pod.pod.node.at() - killed;
    println!("the guard's quit reached the sidecar {quit_after} ms after the group kill");
    assert!(quit_after <= 100, "the quit came {quit_after} ms after the kill");
    let app = app.finish();
    assert_eq!(app.container_code(), 137);
    guard.wait_stderr("quitting the sidecar in its place");
    assert_eq!(
        pod::phase_with(137, &mut [&mut sidecar, &mut guard]),
        Phase::Failed(137)
    );
    let guard = guard.finish();
    guard.assert_code(0);
    assert_eq!(guard.stderr.matches("sidecar quit ").count(), 1, "one quit\n{guard}");
}

#[test]
fn pod_9_after_a_success_the_guard_exits_with_meshwrap_and_sends_no_second_quit() {
    if pod::skip("pod_9") {
        return;
    }
    let pod = Guarded::new(&[]);
    let mut sidecar = pod.pod.sidecar(PROXY_DELAY);
    let mut guard = pod.guard();
    let url = dataset_url();
    let app = pod.app(&[&pod.pod.fakemesh, "fetch", &url, "0"]).finish();
    app.assert_code(0).assert_stderr_has("sidecar quit");
    assert_eq!(pod::phase_with(0, &mut [&mut sidecar, &mut guard]), Phase::Succeeded);
    let guard = guard.finish();
    guard
        .assert_code(0)
        .assert_stderr_has("meshwrap finished its run and sent the quit; nothing to do")
        .assert_stderr_lacks("sidecar quit");
    let sidecar = sidecar.finish();
    assert_eq!(sidecar.stdout.matches("quit received").count(), 1);
}

#[test]
fn pod_10_on_success_a_group_killed_run_restarts_and_the_pod_completes_with_one_quit() {
    if pod::skip("pod_10") {
        return;
    }
    let pod = Guarded::new(&["--quit-policy", "on-success"]);
    let mut sidecar = pod.pod.sidecar(Duration::ZERO);
    let mut guard = pod.guard();
    let first = pod.training();
    pod::group_kill(&first);
    assert_eq!(first.finish().container_code(), 137);
    guard.wait_stderr("not quitting, waiting for the restarted container's run");
    assert!(
        !sidecar.exits_within(Duration::ZERO),
        "the sidecar stays for the restart"
    );
    // restartPolicy OnFailure: the kubelet starts the container again.
    let second = pod.app(&["sh", "-c", "echo trained"]).finish();
    second.assert_code(0).assert_stderr_has("sidecar quit");
    assert_eq!(pod::phase_with(0, &mut [&mut sidecar, &mut guard]), Phase::Succeeded);
    guard.finish().assert_code(0).assert_stderr_lacks("sidecar quit");
    assert_eq!(sidecar.finish().stdout.matches("quit received").count(), 1);
}

#[test]
fn pod_11_a_group_kill_during_the_readiness_wait_still_completes_the_pod() {
    if pod::skip("pod_11") {
        return;
    }
    let pod = Guarded::new(&["--log-level", "debug"]);
    let mut sidecar = pod.pod.sidecar(PROXY_DELAY);
    let mut guard = pod.guard();
    let mut app = pod.app(&["sh", "-c", "echo training"]);
    app.wait_stderr("guard: holding the lock");
    pod::group_kill(&app);
    let app = app.finish();
    assert_eq!(app.container_code(), 137);
    assert!(!app.stdout.contains("training"), "the command never ran");
    sidecar.wait_stdout("sidecar: quit received, exiting");
    guard.wait_stderr("meshwrap was killed with its command");
    assert_eq!(
        pod::phase_with(137, &mut [&mut sidecar, &mut guard]),
        Phase::Failed(137)
    );
}

#[test]
fn pod_12_a_group_kill_during_meshwraps_quit_sends_a_second_quit_said_as_such() {
    if pod::skip("pod_12") {
        return;
    }
    let pod = Guarded::new(&[]);
    let mut sidecar = pod.pod.node.draining_sidecar(&pod.pod.ns, Duration::from_millis(500));
    let mut guard = pod.guard();
    let app = pod.app(&["sh", "-c", "echo trained"]);
    sidecar.wait_stdout("sidecar: quit received, draining");
    pod::group_kill(&app);
    assert_eq!(app.finish().container_code(), 137);
    sidecar.wait_stdout("sidecar: quit received, draining");
    guard.wait_stderr("killed while quitting the sidecar; quitting again, so the sidecar may get a second quit");
    assert_eq!(
        pod::phase_with(137, &mut [&mut sidecar, &mut guard]),
        Phase::Failed(137)
    );
}

#[test]
fn pod_13_deleting_the_pod_ends_the_guard_at_once() {
    if pod::skip("pod_13") {
        return;
    }
    let pod = Guarded::new(&[]);
    let sidecar = pod.pod.sidecar(Duration::ZERO);
    let guard = pod.guard();
    let app = pod.training();
    // The kubelet sends SIGTERM to every container's PID 1.
    for pid in [pod::child_of(app.pid()), pod::child_of(guard.pid()), sidecar.pid()] {
        // SAFETY: kill takes plain integers.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    }
    let guard = guard.finish();
    guard
        .assert_code(0)
        .assert_stderr_has("guard: stopped (the pod is being deleted)");
    guard.check(guard.elapsed < Duration::from_secs(5), "at once");
    app.finish().assert_code(143);
}

#[test]
fn pod_14_with_a_native_sidecar_the_guard_exits_at_once() {
    if pod::skip("pod_14") {
        return;
    }
    let pod = Guarded::new(&[]);
    let podinfo = pod.pod.node.empty_dir("podinfo").join("annotations");
    std::fs::write(
        &podinfo,
        r#"sidecar.istio.io/status="{\"initContainers\":[\"istio-init\",\"istio-proxy\"],\"containers\":[]}""#,
    )
    .unwrap();
    let podinfo = podinfo.to_string_lossy().into_owned();
    let mut command = vec![pod.pod.meshwrap.as_str(), "guard"];
    command.extend(pod.options());
    command.extend(["--pod-annotations", &podinfo]);
    let guard = pod.pod.node.app(&pod.pod.ns, &command).finish();
    guard
        .assert_code(0)
        .assert_stderr_has("runs as a native sidecar")
        .assert_stderr_has("nothing to guard");
}

#[test]
fn pod_15_a_wrapped_container_that_never_starts_meshwrap_does_not_hold_the_pod() {
    if pod::skip("pod_15") {
        return;
    }
    let pod = Guarded::new(&["--start-timeout", "1s"]);
    let mut sidecar = pod.pod.sidecar(Duration::ZERO);
    let mut guard = pod.guard();
    // The image has no /mesh: the container's command is not found.
    let missing = format!("{}/nowhere/meshwrap", pod.dir);
    let app = pod.pod.node.app(&pod.pod.ns, &[&missing, "--", "true"]).finish();
    let code = app.container_code();
    assert_ne!(code, 0);
    guard.wait_stderr("no meshwrap run started within 1s (--start-timeout); quitting the sidecar");
    assert_eq!(
        pod::phase_with(code, &mut [&mut sidecar, &mut guard]),
        Phase::Failed(code)
    );
}

#[test]
fn pod_16_a_real_oom_kill_under_a_memory_limit_fails_the_pod_with_137_and_one_quit() {
    if pod::skip("pod_16") {
        return;
    }
    // This machine's memory controller is cgroup v1: the kernel kills the
    // largest process (the command), not the whole group, so meshwrap lives
    // to quit and record its run, and the guard has nothing to do.
    let mut pod = Guarded::new(&[]);
    let cgroup = pod.pod.node.memory_cgroup(64 << 20);
    let mut sidecar = pod.pod.sidecar(Duration::ZERO);
    let mut guard = pod.guard();
    let mut line = vec![pod.pod.meshwrap.as_str()];
    line.extend(pod.options());
    let probe = probe_bin();
    line.extend(["--", &probe, "hog"]);
    let app = pod.pod.node.app_in(&pod.pod.ns, &cgroup, &line).finish();
    assert_eq!(app.container_code(), 137, "{app}");
    app.assert_stderr_has("status=\"signal SIGKILL\"")
        .assert_stderr_has("sidecar quit");
    assert!(pod::oom_kills(&cgroup) >= 1, "the kernel's OOM killer did it");
    assert_eq!(
        pod::phase_with(137, &mut [&mut sidecar, &mut guard]),
        Phase::Failed(137)
    );
    guard.finish().assert_code(0).assert_stderr_has("nothing to do");
}

/// A pod template as inject wrote it (the tests that compare examples/ and
/// the goldens with inject's output prove the file is that), laid out on the
/// simulated node as its spec says: each volume a fresh directory, the
/// Downward API's holding the template's annotations and what the mesh
/// injectors write (`marks`), and each container's args with every
/// mountPath put where its volume's directory is.
pub(crate) struct Wrapped {
    template: serde_yaml::Value,
    volumes: std::collections::HashMap<String, String>,
    pub(crate) annotations: std::path::PathBuf,
}

fn strings(v: &serde_yaml::Value) -> Vec<String> {
    v.as_sequence()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

impl Wrapped {
    /// The template of `file`'s document named `name` (the first, if none).
    pub(crate) fn load(pod: &MeshedPod, file: &str, name: Option<&str>, marks: &[&str]) -> Wrapped {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
        let text = std::fs::read_to_string(&path).unwrap();
        let doc = serde_yaml::Deserializer::from_str(&text)
            .map(|d| <serde_yaml::Value as serde::Deserialize>::deserialize(d).unwrap())
            .find(|d| name.is_none_or(|n| d["metadata"]["name"].as_str() == Some(n)))
            .unwrap_or_else(|| panic!("{file}: no document {name:?}"));
        Wrapped::laid_out(pod, doc["spec"]["template"].clone(), marks)
    }

    /// The pod Argo makes of `file`'s Workflow template `name`: its
    /// metadata, its `container` as the container `main` (Argo's name for
    /// it), its init containers, and the Workflow's volumes.
    pub(crate) fn load_argo(pod: &MeshedPod, file: &str, name: &str, marks: &[&str]) -> Wrapped {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
        let doc: serde_yaml::Value = serde_yaml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let step = doc["spec"]["templates"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|t| t["name"].as_str() == Some(name))
            .unwrap_or_else(|| panic!("{file}: no template {name}"));
        let mut main = step["container"].clone();
        main["name"] = "main".into();
        let mut spec = serde_yaml::Mapping::new();
        spec.insert("containers".into(), serde_yaml::Value::Sequence(vec![main]));
        spec.insert("initContainers".into(), step["initContainers"].clone());
        spec.insert("volumes".into(), doc["spec"]["volumes"].clone());
        let mut template = serde_yaml::Mapping::new();
        template.insert("metadata".into(), step["metadata"].clone());
        template.insert("spec".into(), serde_yaml::Value::Mapping(spec));
        Wrapped::laid_out(pod, serde_yaml::Value::Mapping(template), marks)
    }

    /// `template` laid out on the node (see the type's note).
    fn laid_out(pod: &MeshedPod, template: serde_yaml::Value, marks: &[&str]) -> Wrapped {
        let mut volumes = std::collections::HashMap::new();
        let mut annotations = None;
        for volume in template["spec"]["volumes"].as_sequence().unwrap() {
            let vname = volume["name"].as_str().unwrap();
            let dir = pod.node.empty_dir(vname);
            if let Some(items) = volume["downwardAPI"]["items"].as_sequence() {
                let file = |field: &str| {
                    let mut text = String::new();
                    if let Some(map) = template["metadata"][field].as_mapping() {
                        for (k, v) in map {
                            text.push_str(&format!("{}={:?}\n", k.as_str().unwrap(), v.as_str().unwrap()));
                        }
                    }
                    text
                };
                let mut text = file("annotations");
                for mark in marks {
                    text.push_str(mark);
                    text.push('\n');
                }
                std::fs::write(dir.join("annotations"), text).unwrap();
                annotations = Some(dir.join("annotations"));
                // The labels, where the volume mounts them (Dapr's mark is a label).
                if items.iter().any(|i| i["fieldRef"]["fieldPath"] == "metadata.labels") {
                    std::fs::write(dir.join("labels"), file("labels")).unwrap();
                }
            }
            volumes.insert(vname.to_string(), dir.to_string_lossy().into_owned());
        }
        let annotations = annotations.expect("inject mounts the pod's annotations");
        Wrapped {
            template,
            volumes,
            annotations,
        }
    }

    fn container(&self, list: &str, name: &str) -> serde_yaml::Value {
        self.template["spec"][list]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|c| c["name"].as_str() == Some(name))
            .unwrap_or_else(|| panic!("no {list} {name}"))
            .clone()
    }

    /// A container's args with each mountPath replaced by its volume's directory.
    fn mapped(&self, container: &serde_yaml::Value, args: &[String]) -> Vec<String> {
        let mounts: Vec<(String, String)> = container["volumeMounts"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|m| {
                let dir = self.volumes[m["name"].as_str().unwrap()].clone();
                (m["mountPath"].as_str().unwrap().to_string(), dir)
            })
            .collect();
        args.iter()
            .map(|a| {
                mounts
                    .iter()
                    .find_map(|(at, dir)| {
                        (a == at)
                            .then(|| dir.clone())
                            .or_else(|| a.strip_prefix(&format!("{at}/")).map(|rest| format!("{dir}/{rest}")))
                    })
                    .unwrap_or_else(|| a.clone())
            })
            .collect()
    }

    /// meshwrap's default --pod-annotations, where the container mounts the Downward API.
    fn podinfo(&self, container: &serde_yaml::Value) -> String {
        let file = self.mapped(container, &["/etc/podinfo/annotations".into()]).remove(0);
        format!("MESHWRAP_POD_ANNOTATIONS={file}")
    }

    /// The init container: the image's entrypoint (meshwrap) with its args.
    pub(crate) fn install(&self) {
        let install = self.container("initContainers", "meshwrap-install");
        let run = Meshwrap::new()
            .args(self.mapped(&install, &strings(&install["args"])))
            .run();
        run.assert_code(0);
    }

    /// The guard container, once it watches.
    pub(crate) fn guard(&self, pod: &MeshedPod) -> Running {
        let mut guard = self.guard_started(pod);
        guard.wait_stderr("guard: watching meshwrap's run");
        guard
    }

    /// The guard container, started.
    pub(crate) fn guard_started(&self, pod: &MeshedPod) -> Running {
        let spec = self.container("containers", "meshwrap-guard");
        let bin = meshwrap_bin().to_string_lossy().into_owned();
        let mut line = vec!["env".to_string(), self.podinfo(&spec), bin];
        line.extend(self.mapped(&spec, &strings(&spec["args"])));
        pod.node
            .app(&pod.ns, &line.iter().map(String::as_str).collect::<Vec<_>>())
    }

    /// What Argo's wait container runs in the proxy's container `proxy`
    /// once the step's main container has ended (argo-workflows v4.1.2
    /// `workflow/signal/signal.go`, `killCommand`): the command of the pod's
    /// `workflows.argoproj.io/kill-cmd-PROXY` annotation, exec'd there with
    /// the mounts its injector gave the container from the pod annotation
    /// `mounts` (consul-k8s's user volume mounts) in place.
    pub(crate) fn argo_kill(&self, pod: &MeshedPod, proxy: &str, mounts: &str) -> Running {
        let annotation = |key: &str| {
            let text = self.template["metadata"]["annotations"][key].as_str();
            text.unwrap_or_else(|| panic!("no {key} annotation")).to_string()
        };
        let argv: Vec<String> =
            serde_json::from_str(&annotation(&format!("workflows.argoproj.io/kill-cmd-{proxy}"))).unwrap();
        let mounts: serde_yaml::Value = serde_yaml::from_str(&annotation(mounts)).unwrap();
        let mut container = serde_yaml::Mapping::new();
        container.insert("volumeMounts".into(), mounts);
        let container = serde_yaml::Value::Mapping(container);
        let mut line = vec!["env".to_string(), self.podinfo(&container)];
        line.extend(self.mapped(&container, &argv));
        pod.node
            .app(&pod.ns, &line.iter().map(String::as_str).collect::<Vec<_>>())
    }

    /// The wrapped container: its meshwrap prefix, then `command` in place
    /// of the user's own.
    pub(crate) fn app(&self, pod: &MeshedPod, name: &str, command: &[&str]) -> Running {
        let spec = self.container("containers", name);
        let prefix = strings(&spec["command"]);
        let dash = prefix.iter().position(|a| a == "--").unwrap();
        let mut line = vec!["env".to_string(), self.podinfo(&spec)];
        line.extend(self.mapped(&spec, &prefix[..=dash]));
        line.extend(command.iter().map(|s| s.to_string()));
        pod.node
            .app(&pod.ns, &line.iter().map(String::as_str).collect::<Vec<_>>())
    }
}

/// What Istio's injector writes on a pod with a classic sidecar.
const ISTIO_CLASSIC: &str = r#"sidecar.istio.io/status="{\"initContainers\":[\"istio-init\"],\"containers\":[\"istio-proxy\"],\"volumes\":[\"istio-envoy\"],\"imagePullSecrets\":null,\"revision\":\"default\"}""#;
const LINKERD_MARK: &str = r#"linkerd.io/proxy-version="stable-2.20.0""#;
const VAULT_MARK: &str = r#"vault.hashicorp.com/agent-inject-status="injected""#;

/// The Job example (examples/kubernetes/job-init-container.yaml) run as its
/// spec says; only the user's command after `--` becomes the dataset
/// download, and the Downward API file holds what Istio's injector and
/// inject wrote.
#[test]
fn pod_17_the_job_example_as_inject_wrote_it_completes_with_exactly_one_quit() {
    if pod::skip("pod_17") {
        return;
    }
    istio_job_completes_with_one_quit("examples/kubernetes/job-init-container.yaml");
}

/// An Istio Job as inject wrote it: the dataset comes through the sidecar,
/// the pod completes, and the sidecar got exactly one quit (meshwrap's).
fn istio_job_completes_with_one_quit(file: &str) {
    let pod = meshed_pod();
    let job = Wrapped::load(&pod, file, None, &[ISTIO_CLASSIC]);
    job.install();
    let mut sidecar = pod.sidecar(PROXY_DELAY);
    let mut guard = job.guard(&pod);
    let url = dataset_url();
    let app = job.app(&pod, "train", &[&pod.fakemesh, "fetch", &url, "0"]).finish();
    app.assert_code(0).assert_stderr_has("sidecar quit");
    assert!(app.stdout.contains("app: fetched 4096 bytes"), "{}", app.stdout);
    assert_eq!(pod::phase_with(0, &mut [&mut sidecar, &mut guard]), Phase::Succeeded);
    guard.finish().assert_code(0).assert_stderr_lacks("sidecar quit");
    let sidecar = sidecar.finish();
    assert_eq!(sidecar.stdout.matches("quit received").count(), 1, "{}", sidecar.stdout);
}

impl MeshedPod {
    /// Another mesh's proxy (`fakemesh proxy`), configured from the pod's annotations.
    fn proxy(&self, kind: &str, delay: Duration, annotations: &Path) -> Running {
        let delay = delay.as_millis().to_string();
        let annotations = annotations.to_string_lossy();
        let mut proxy = self
            .node
            .exec(&self.ns, &[&self.fakemesh, "proxy", kind, &delay, &annotations]);
        proxy.wait_stdout(&format!("{kind}: container started, not listening yet"));
        proxy
    }
}

/// The app checks that the proxy answers: it runs only once the proxy is ready.
fn linkerd_app_line(pod: &MeshedPod) -> [&str; 4] {
    [pod.fakemesh.as_str(), "fetch", "http://127.0.0.1:4191/ready", "0"]
}

#[test]
fn pod_18_a_linkerd_job_as_inject_wrote_it_waits_for_the_proxy_and_shuts_it_down() {
    if pod::skip("pod_18") {
        return;
    }
    let pod = meshed_pod();
    let job = Wrapped::load(&pod, "examples/kubernetes/job-linkerd.yaml", None, &[LINKERD_MARK]);
    job.install();
    let mut proxy = pod.proxy("linkerd", PROXY_DELAY, &job.annotations);
    let mut guard = job.guard(&pod);
    let app = job.app(&pod, "train", &linkerd_app_line(&pod)).finish();
    app.assert_code(0)
        .assert_stderr_has("found the linkerd sidecar (linkerd.io/proxy-version)")
        .assert_stderr_has("sidecar quit");
    assert!(
        app.stdout.contains("app: fetched 5 bytes"),
        "started after the proxy was ready: {}",
        app.stdout
    );
    assert_eq!(pod::phase_with(0, &mut [&mut proxy, &mut guard]), Phase::Succeeded);
    let proxy = proxy.finish();
    assert_eq!(proxy.stdout.matches("quit received").count(), 1, "{}", proxy.stdout);
}

#[test]
fn pod_19_a_linkerd_pod_without_its_shutdown_switch_names_it_and_keeps_the_commands_status() {
    if pod::skip("pod_19") {
        return;
    }
    let pod = meshed_pod();
    let job = Wrapped::load(&pod, "examples/kubernetes/job-linkerd.yaml", None, &[LINKERD_MARK]);
    // The pod as wrapped by hand, without inject's switch: Linkerd's default.
    let text = std::fs::read_to_string(&job.annotations).unwrap();
    let off: String = text
        .lines()
        .filter(|l| !l.contains("proxy-admin-shutdown"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&job.annotations, off).unwrap();
    job.install();
    let mut proxy = pod.proxy("linkerd", Duration::ZERO, &job.annotations);
    proxy.wait_stdout("linkerd: up");
    let app = job.app(&pod, "train", &linkerd_app_line(&pod)).finish();
    app.assert_code(0)
        .assert_stderr_has("could not quit the sidecar: 404 Not Found")
        .assert_stderr_has("config.linkerd.io/proxy-admin-shutdown: enabled");
    assert_eq!(
        pod::phase_with(0, &mut [&mut proxy]),
        Phase::StuckNotReady,
        "the proxy kept running"
    );
}

#[test]
fn pod_20_an_istio_and_vault_job_waits_for_istio_and_quits_both_once() {
    if pod::skip("pod_20") {
        return;
    }
    let pod = meshed_pod();
    let job = Wrapped::load(
        &pod,
        "examples/kubernetes/job-istio-vault.yaml",
        None,
        &[ISTIO_CLASSIC, VAULT_MARK],
    );
    job.install();
    let mut sidecar = pod.sidecar(PROXY_DELAY);
    let mut vault = pod.proxy("vault", Duration::ZERO, &job.annotations);
    vault.wait_stdout("vault: up");
    let mut guard = job.guard(&pod);
    let url = dataset_url();
    let app = job.app(&pod, "train", &[&pod.fakemesh, "fetch", &url, "0"]).finish();
    app.assert_code(0).assert_stderr_has("found the vault sidecar");
    assert!(app.stdout.contains("app: fetched 4096 bytes"), "{}", app.stdout);
    assert_eq!(
        pod::phase_with(0, &mut [&mut sidecar, &mut vault, &mut guard]),
        Phase::Succeeded
    );
    let (sidecar, vault) = (sidecar.finish(), vault.finish());
    assert_eq!(sidecar.stdout.matches("quit received").count(), 1, "{}", sidecar.stdout);
    assert_eq!(vault.stdout.matches("quit received").count(), 1, "{}", vault.stdout);
}

#[test]
fn pod_21_a_vault_job_as_inject_wrote_it_completes() {
    if pod::skip("pod_21") {
        return;
    }
    let pod = meshed_pod();
    let job = Wrapped::load(&pod, "examples/kubernetes/job-vault.yaml", None, &[VAULT_MARK]);
    job.install();
    let mut vault = pod.proxy("vault", Duration::ZERO, &job.annotations);
    vault.wait_stdout("vault: up");
    let mut guard = job.guard(&pod);
    let app = job.app(&pod, "export", &["sh", "-c", "echo app: exported"]).finish();
    app.assert_code(0).assert_stderr_has("sidecar quit");
    assert_eq!(pod::phase_with(0, &mut [&mut vault, &mut guard]), Phase::Succeeded);
}

#[test]
fn pod_22_a_classic_istio_pod_with_a_native_fluent_bit_still_quits_istio() {
    if pod::skip("pod_22") {
        return;
    }
    istio_job_completes_with_one_quit("examples/kubernetes/job-native-fluent-bit.yaml");
}

#[test]
fn pod_23_restart_rules_keep_the_sidecar_for_the_restarted_command_then_quit_once() {
    if pod::skip("pod_23") {
        return;
    }
    let pod = meshed_pod();
    let job = Wrapped::load(
        &pod,
        "kubectl-meshwrap/tests/golden/restart-rules.out.yaml",
        None,
        &[ISTIO_CLASSIC],
    );
    job.install();
    let mut sidecar = pod.sidecar(Duration::ZERO);
    let mut guard = job.guard(&pod);
    // The first run is preempted: exit 42, which the kubelet restarts in place.
    let first = job.app(&pod, "train", &["sh", "-c", "exit 42"]).finish();
    first.assert_code(42).assert_stderr_has("--no-quit-on-exit");
    guard.wait_stderr("waiting for the restarted container's run");
    // The restarted command still reaches the dataset through the sidecar.
    let url = dataset_url();
    let second = job.app(&pod, "train", &[&pod.fakemesh, "fetch", &url, "0"]).finish();
    second.assert_code(0).assert_stderr_has("sidecar quit");
    assert!(second.stdout.contains("app: fetched 4096 bytes"), "{}", second.stdout);
    assert_eq!(pod::phase_with(0, &mut [&mut sidecar, &mut guard]), Phase::Succeeded);
    let sidecar = sidecar.finish();
    assert_eq!(sidecar.stdout.matches("quit received").count(), 1, "{}", sidecar.stdout);
}

impl Wrapped {
    /// The Cloud SQL proxy container `name`, run as its spec says: its args
    /// and its variables, read by `fakemesh cloudsql` as the proxy reads them.
    fn cloudsql_proxy(&self, pod: &MeshedPod, name: &str, delay: Duration) -> Running {
        let spec = self.container("containers", name);
        let mut line = vec!["env".to_string()];
        for var in spec["env"].as_sequence().into_iter().flatten() {
            line.push(format!(
                "{}={}",
                var["name"].as_str().unwrap(),
                var["value"].as_str().unwrap()
            ));
        }
        line.extend([pod.fakemesh.clone(), "cloudsql".into(), delay.as_millis().to_string()]);
        line.extend(strings(&spec["args"]));
        let mut proxy = pod
            .node
            .exec(&pod.ns, &line.iter().map(String::as_str).collect::<Vec<_>>());
        proxy.wait_stdout("cloudsql: container started, not listening yet");
        proxy
    }
}

/// #28 H3: a Cloud SQL proxy moved off 9090/9091, by its flags and by its
/// CSQL_PROXY_* variables, as inject wrote the pod: meshwrap waits for its
/// moved /startup, the command runs, and one quit reaches its moved admin port.
#[test]
fn pod_24_a_cloudsql_proxy_on_moved_ports_is_waited_for_and_quit_once_on_its_admin_port() {
    if pod::skip("pod_24") {
        return;
    }
    for (job_name, proxy_name, admin) in [("by-flags", "cloud-sql-proxy", 9192), ("by-variables", "sql", 9392)] {
        let pod = meshed_pod();
        let file = "kubectl-meshwrap/tests/golden/cloudsql-ports.out.yaml";
        let job = Wrapped::load(&pod, file, Some(job_name), &[]);
        job.install();
        let mut proxy = job.cloudsql_proxy(&pod, proxy_name, PROXY_DELAY);
        let mut guard = job.guard(&pod);
        let app = job
            .app(&pod, "report", &["sh", "-c", "echo app: report written"])
            .finish();
        app.assert_code(0).assert_stderr_has("sidecar quit");
        assert!(app.stdout.contains("app: report written"), "{job_name}: {}", app.stdout);
        assert_eq!(
            pod::phase_with(0, &mut [&mut proxy, &mut guard]),
            Phase::Succeeded,
            "{job_name}"
        );
        let proxy = proxy.finish();
        assert_eq!(proxy.stdout.matches("quit received").count(), 1, "{}", proxy.stdout);
        assert!(
            proxy.stdout.contains(&format!("quit received on :{admin}")),
            "{}",
            proxy.stdout
        );
    }
}

/// #28 M2: a pod that asked for Dapr, whose daprd was never injected (the
/// injector's failurePolicy is Ignore): its labels are mounted and carry no
/// dapr.io/sidecar-injected, so the command runs at once and nothing is
/// waited for or quit.
#[test]
fn pod_25_a_dapr_pod_whose_daprd_was_never_injected_runs_its_command_at_once() {
    if pod::skip("pod_25") {
        return;
    }
    let pod = meshed_pod();
    let file = "kubectl-meshwrap/tests/golden/dapr-opt-in.out.yaml";
    let job = Wrapped::load(&pod, file, Some("dapr-true-not-injected"), &[]);
    assert!(
        job.annotations.with_file_name("labels").exists(),
        "inject mounts the labels"
    );
    job.install();
    // The guard reads the same files: nothing to guard, so it exits at once.
    job.guard_started(&pod)
        .finish()
        .assert_code(0)
        .assert_stderr_has("no sidecar for meshwrap to quit in this pod; nothing to guard");
    let app = job.app(&pod, "main", &["sh", "-c", "echo app: ran"]).finish();
    app.assert_code(0)
        .assert_stderr_has("no ready URL to wait for; starting the command")
        .assert_stderr_has("no quit URL; no sidecar to quit");
    assert!(app.stdout.contains("app: ran"), "{}", app.stdout);
}

/// #28 H2: a Linkerd pod whose stable native key is "false" while the
/// 2.15-era alpha key (copied from its namespace) says "true": Linkerd runs
/// a regular proxy, and meshwrap quits it once.
#[test]
fn pod_26_linkerd_stable_false_over_alpha_true_is_quit_once() {
    if pod::skip("pod_26") {
        return;
    }
    let pod = meshed_pod();
    let file = "kubectl-meshwrap/tests/golden/linkerd-native-precedence.out.yaml";
    let job = Wrapped::load(&pod, file, Some("stable-false-alpha-true"), &[LINKERD_MARK]);
    job.install();
    let mut proxy = pod.proxy("linkerd", PROXY_DELAY, &job.annotations);
    let mut guard = job.guard(&pod);
    let app = job.app(&pod, "train", &linkerd_app_line(&pod)).finish();
    // Linkerd 2.15-2.18 would read the alpha key as native; no injector
    // version is on the pod, so that is not proven: a regular proxy, quit.
    app.assert_code(0)
        .assert_stderr_has("taking the linkerd sidecar as a regular container, and quitting it")
        .assert_stderr_has("sidecar quit");
    assert_eq!(pod::phase_with(0, &mut [&mut proxy, &mut guard]), Phase::Succeeded);
    let proxy = proxy.finish();
    assert_eq!(proxy.stdout.matches("quit received").count(), 1, "{}", proxy.stdout);
}
