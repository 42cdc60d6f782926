//! A Kubernetes pod built from the Linux primitives kubelet and istio-init
//! use, for the end-to-end tests in tests/pod.rs:
//!
//! - a network namespace per pod, loopback up, and a veth link to its peer:
//!   the remote host's namespace, or another pod's;
//! - istio-init's redirect: every outbound TCP connection not to loopback
//!   goes to port 15001, except the proxy's own (uid 1337);
//! - the sidecar: `fakemesh sidecar`, started with a delay, as uid 1337;
//! - an emptyDir: a fresh directory filled by `meshwrap install DIR`;
//! - the app container: in the pod's network namespace and a PID namespace of
//!   its own (`fakemesh container`, a runtime that reports 128+N for a
//!   signal death as the kubelet does), so the first process (meshwrap, when
//!   wrapped) is PID 1;
//! - the guard container: `meshwrap guard`, PID 1 of a PID namespace of its
//!   own, sharing a second emptyDir with the app container;
//! - the OOM group kill: every process of the app container's PID namespace
//!   SIGKILLed in one pass, which is what the kernel does to a cgroup with
//!   `memory.oom.group` set (this machine's memory controller is cgroup v1,
//!   which has no group kill; see `oom_cgroup` for a real OOM kill there).
//!
//! Everything a test creates is removed when its `Node` is dropped, also when
//! the test fails: processes are killed, then the namespaces (and with them
//! the veth links and iptables rules) are deleted. Names carry the test
//! process's pid and a counter, so concurrent tests and runs never collide.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::command::{Meshwrap, Running, cargo_bin_dir};

/// Istio's proxy uid, exempt from the redirect.
pub const PROXY_UID: &str = "1337";
/// How long a pod may keep its sidecar after the app exited before it counts as stuck.
pub const STUCK_AFTER: Duration = Duration::from_secs(2);

/// Why the pod tests cannot run here, if they cannot.
pub fn unavailable() -> Option<String> {
    super::lacks_root_or(&["/usr/sbin/ip", "/usr/sbin/iptables", "/usr/bin/unshare"])
}

/// Skips the test with a printed reason, unless POD_TESTS_REQUIRED is set
/// (CI sets it, so there a missing tool fails instead of skipping).
pub fn skip(test: &str) -> bool {
    super::skip_unless_able(test, unavailable())
}

fn fakemesh_bin() -> String {
    let bin = cargo_bin_dir().join("examples/fakemesh");
    assert!(
        bin.exists(),
        "{} is missing: run the tests with `cargo test`, which builds examples",
        bin.display()
    );
    bin.to_string_lossy().into_owned()
}

fn sh(args: &[&str]) {
    let out = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The machine under test: its namespaces and processes, removed on drop.
pub struct Node {
    prefix: String,
    namespaces: Vec<String>,
    cgroups: Vec<PathBuf>,
    pub born: Instant,
}

static NEXT: AtomicUsize = AtomicUsize::new(0);

impl Node {
    pub fn new() -> Node {
        let prefix = format!("mw{}x{}", std::process::id(), NEXT.fetch_add(1, Ordering::SeqCst));
        Node {
            prefix,
            namespaces: Vec::new(),
            cgroups: Vec::new(),
            born: Instant::now(),
        }
    }

    /// A network namespace with loopback up.
    pub fn namespace(&mut self, role: &str) -> String {
        let name = format!("{}{role}", self.prefix);
        sh(&["ip", "netns", "add", &name]);
        self.namespaces.push(name.clone());
        sh(&["ip", "-n", &name, "link", "set", "lo", "up"]);
        name
    }

    /// Links two namespaces with a veth pair, addressed a/24 and b/24.
    pub fn link(&mut self, (ns_a, addr_a): (&str, &str), (ns_b, addr_b): (&str, &str)) {
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        // Interface names are at most 15 bytes.
        let (a, b) = (
            format!("mwv{}a{n}", std::process::id() % 100_000),
            format!("mwv{}b{n}", std::process::id() % 100_000),
        );
        sh(&[
            "ip", "link", "add", &a, "netns", ns_a, "type", "veth", "peer", "name", &b, "netns", ns_b,
        ]);
        for (ns, dev, addr) in [(ns_a, &a, addr_a), (ns_b, &b, addr_b)] {
            sh(&["ip", "-n", ns, "addr", "add", &format!("{addr}/24"), "dev", dev]);
            sh(&["ip", "-n", ns, "link", "set", dev, "up"]);
        }
    }

    /// istio-init's outbound capture in a pod namespace.
    pub fn mesh_redirect(&self, ns: &str) {
        sh(&[
            "ip",
            "netns",
            "exec",
            ns,
            "iptables",
            "-t",
            "nat",
            "-A",
            "OUTPUT",
            "-p",
            "tcp",
            "!",
            "-d",
            "127.0.0.0/8",
            "-m",
            "owner",
            "!",
            "--uid-owner",
            PROXY_UID,
            "-j",
            "REDIRECT",
            "--to-ports",
            "15001",
        ]);
    }

    /// Runs a process in a namespace.
    pub fn exec(&self, ns: &str, args: &[&str]) -> Running {
        Meshwrap::program("ip").args(["netns", "exec", ns]).args(args).spawn()
    }

    /// The sidecar container, listening after `delay`.
    pub fn sidecar(&self, ns: &str, delay: Duration) -> Running {
        let delay = delay.as_millis().to_string();
        let mut sidecar = self.exec(ns, &[&fakemesh_bin(), "sidecar", PROXY_UID, &delay]);
        sidecar.wait_stdout("sidecar: container started, not listening yet");
        sidecar
    }

    /// The remote host, serving `bytes` on addr:80.
    pub fn remote(&self, ns: &str, addr: &str, bytes: usize) -> Running {
        let mut remote = self.exec(
            ns,
            &[&fakemesh_bin(), "serve", &format!("{addr}:80"), &bytes.to_string()],
        );
        remote.wait_stdout("remote: serving");
        remote
    }

    /// The init container: a fresh emptyDir filled by `meshwrap install`.
    pub fn empty_dir_with_meshwrap(&self) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "{}-emptydir-{}",
            self.prefix,
            NEXT.fetch_add(1, Ordering::SeqCst)
        ));
        let run = Meshwrap::new().arg("install").arg(&dir).run();
        run.assert_code(0);
        dir.join("meshwrap")
    }

    /// A sidecar that takes `quit_takes` to answer a quit and exit.
    pub fn draining_sidecar(&self, ns: &str, quit_takes: Duration) -> Running {
        let quit = quit_takes.as_millis().to_string();
        let mut sidecar = self.exec(ns, &[&fakemesh_bin(), "sidecar", PROXY_UID, "0", &quit]);
        sidecar.wait_stdout("sidecar: up");
        sidecar
    }

    /// A fresh, empty emptyDir.
    pub fn empty_dir(&self, name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "{}-{name}-{}",
            self.prefix,
            NEXT.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// The guard container, `meshwrap guard ARGS` as PID 1 of its own PID
    /// namespace, once it watches (`meshwrap` is the emptyDir's copy).
    pub fn guard(&self, ns: &str, meshwrap: &str, args: &[&str]) -> Running {
        let mut command = vec![meshwrap, "guard"];
        command.extend_from_slice(args);
        let mut guard = self.app(ns, &command);
        guard.wait_stderr("guard: watching meshwrap's run");
        guard
    }

    /// The app container: `command` as PID 1 of a new PID namespace in `ns`.
    pub fn app(&self, ns: &str, command: &[&str]) -> Running {
        let runtime = fakemesh_bin();
        let mut args = vec![runtime.as_str(), "container"];
        args.extend_from_slice(command);
        self.exec(ns, &args)
    }

    /// The app container in a cgroup of its own (see [`Node::memory_cgroup`]).
    /// The cgroup is joined before entering the network namespace, whose
    /// `ip netns exec` mounts a /sys without the cgroup tree.
    pub fn app_in(&self, ns: &str, cgroup: &Path, command: &[&str]) -> Running {
        let join = format!("echo $$ > {}/cgroup.procs && exec \"$@\"", cgroup.display());
        let runtime = fakemesh_bin();
        Meshwrap::program("sh")
            .args(["-c", &join, "sh", "ip", "netns", "exec", ns, &runtime, "container"])
            .args(command)
            .spawn()
    }

    /// A cgroup v1 memory cgroup limited to `bytes`, swap included, as the
    /// kubelet sets a container's memory limit. Fails the test where this
    /// machine has no v1 memory controller to create it in.
    pub fn memory_cgroup(&mut self, bytes: u64) -> PathBuf {
        let root = Path::new("/sys/fs/cgroup/memory");
        assert!(
            root.join("memory.limit_in_bytes").exists(),
            "no cgroup v1 memory controller at {}: the real OOM test needs one",
            root.display()
        );
        let dir = root.join(format!("{}-app", self.prefix));
        std::fs::create_dir(&dir).unwrap();
        self.cgroups.push(dir.clone());
        std::fs::write(dir.join("memory.limit_in_bytes"), bytes.to_string()).unwrap();
        // Without swap in the limit, the kernel would swap instead of killing.
        let _ = std::fs::write(dir.join("memory.memsw.limit_in_bytes"), bytes.to_string());
        dir
    }

    pub fn fakemesh(&self) -> String {
        fakemesh_bin()
    }

    /// Milliseconds since the node was set up, for timelines.
    pub fn at(&self) -> u128 {
        self.born.elapsed().as_millis()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        // Kill whatever still runs in our namespaces, then delete them.
        for ns in &self.namespaces {
            let _ = Command::new("ip").args(["netns", "pids", ns]).output().map(|out| {
                for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                    let _ = Command::new("kill").args(["-KILL", pid]).status();
                }
            });
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
        for cgroup in &self.cgroups {
            // Its processes are gone with the namespaces; a few may still be exiting.
            let deadline = Instant::now() + Duration::from_secs(5);
            while std::fs::remove_dir(cgroup).is_err() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let emptydirs = std::fs::read_dir(std::env::temp_dir()).into_iter().flatten().flatten();
        for dir in emptydirs.filter(|d| {
            d.file_name()
                .to_string_lossy()
                .starts_with(&format!("{}-", self.prefix))
        }) {
            let _ = std::fs::remove_dir_all(dir.path());
        }
    }
}

/// The pod's phase once its app container has exited.
#[derive(Debug, PartialEq, Eq)]
pub enum Phase {
    Succeeded,
    Failed(i32),
    /// The sidecar still ran STUCK_AFTER after the app exited.
    StuckNotReady,
}

/// Kubelet's view: Completed when every container has exited.
pub fn phase(app_code: i32, sidecar: &mut Running) -> Phase {
    if !sidecar.exits_within(STUCK_AFTER) {
        return Phase::StuckNotReady;
    }
    if app_code == 0 {
        Phase::Succeeded
    } else {
        Phase::Failed(app_code)
    }
}

/// The OOM group kill of a container started by [`Node::app`]: SIGKILL to
/// every process in its PID namespace, in one pass. Returns how many.
pub fn group_kill(app: &Running) -> usize {
    let pid1 = child_of(app.pid());
    let ns = std::fs::read_link(format!("/proc/{pid1}/ns/pid")).unwrap();
    let members: Vec<i32> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| std::fs::read_link(format!("/proc/{pid}/ns/pid")).is_ok_and(|n| n == ns))
        .collect();
    for pid in &members {
        // SAFETY: kill takes plain integers.
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }
    members.len()
}

/// How many times the kernel's OOM killer acted in a v1 memory cgroup.
pub fn oom_kills(cgroup: &Path) -> u64 {
    let control = std::fs::read_to_string(cgroup.join("memory.oom_control")).unwrap();
    control
        .lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no oom_kill count in memory.oom_control:\n{control}"))
}

/// The kubelet's view of a pod with a guard: Completed once every container
/// has exited (`others`: the sidecar and the guard).
pub fn phase_with(app_code: i32, others: &mut [&mut Running]) -> Phase {
    if !others.iter_mut().all(|c| c.exits_within(STUCK_AFTER)) {
        return Phase::StuckNotReady;
    }
    if app_code == 0 {
        Phase::Succeeded
    } else {
        Phase::Failed(app_code)
    }
}

/// The host pid of `pid`'s only child (the PID 1 that the runtime forked).
pub fn child_of(pid: i32) -> i32 {
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap();
    children.split_whitespace().next().expect("a child").parse().unwrap()
}
