//! Real OCI runtimes (runc, crun) running the static meshwrap as PID 1 of a
//! FROM-scratch bundle, for tests/oci.rs.
//!
//! - **The binary.** Only a static one can run in a rootfs that holds
//!   nothing but itself and busybox, so these tests take meshwrap from
//!   MESHWRAP_TEST_BIN and nowhere else: .ci/run's second integration run
//!   points it at `.ci/release`'s static musl, non-PIE build (with
//!   POD_TESTS_REQUIRED, so there they fail rather than skip). Without it
//!   (cargo's glibc build, which is dynamic, as in the first `cargo test`
//!   run) they skip with one line, in CI too; with it naming a dynamic
//!   binary they fail under POD_TESTS_REQUIRED. A musl binary lying in
//!   target/ is never picked up on its own: it may be older than the source.
//! - **The rootfs** is built once per test process and shared, read-only:
//!   `/meshwrap`, `/bin/busybox` (Debian's busybox-static) with the applet
//!   links the cases use, `/not-executable` (mode 0644) and the mount points.
//! - **Each container** has its own bundle directory (config.json, whose
//!   `root.path` names the shared rootfs) and its own `--root` state
//!   directory, so nothing leaks into /run/runc or /run/crun; Drop deletes
//!   it (`delete --force`, bounded) whatever the test did.
//! - **crun 1.8.1** refuses a hybrid cgroup layout (v1 controllers with the
//!   v2 hierarchy at /sys/fs/cgroup/unified): "cgroups in hybrid mode not
//!   supported, drop all controllers from cgroupv2". Every crun command
//!   here (run, kill, delete) then runs under `unshare --mount
//!   --propagation private`, whose shell unmounts the v2 hierarchy in that
//!   private mount namespace only and execs crun, which then sees plain v1.
//!   runc 1.1.5 takes the hybrid layout as it is.
//! - **The network.** The status, signal and reaping cases give the
//!   container a network namespace of its own (loopback only), as
//!   `runc spec` does. The quit and guard cases join the test's network
//!   namespace by path, as containerd joins every container of a pod to
//!   the sandbox's: the fake sidecar listens on the test's 127.0.0.1,
//!   which is then the container's loopback too, and counts each quit.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{Meshwrap, Running, lacks_root_or, seccomp};

/// The OCI runtimes under test, as Debian ships them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runtime {
    Runc,
    Crun,
}

/// Whether the container runs under containerd's default seccomp profile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seccomp {
    ContainerdDefault,
    Unconfined,
}

/// Both, for every case.
pub const SECCOMP: [Seccomp; 2] = [Seccomp::ContainerdDefault, Seccomp::Unconfined];

/// The container's network namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Network {
    /// A new one, loopback only.
    Own,
    /// The test process's, joined by path (a pod's sandbox namespace).
    Tests,
}

impl Runtime {
    pub fn name(self) -> &'static str {
        match self {
            Runtime::Runc => "runc",
            Runtime::Crun => "crun",
        }
    }

    fn path(self) -> &'static str {
        match self {
            Runtime::Runc => "/usr/bin/runc",
            Runtime::Crun => "/usr/bin/crun",
        }
    }

    /// The runtime with `root` as its state directory, in a mount
    /// namespace it accepts.
    fn command(self, root: &Path) -> Meshwrap {
        let mut cmd = if self == Runtime::Crun && hybrid_cgroups() {
            let mut cmd = Meshwrap::program("unshare");
            cmd.args(["--mount", "--propagation", "private", "--", "sh", "-c"])
                .arg("umount /sys/fs/cgroup/unified && exec \"$0\" \"$@\"")
                .arg(self.path());
            cmd
        } else {
            Meshwrap::program(self.path())
        };
        cmd.arg("--root").arg(root);
        cmd
    }
}

/// Whether cgroup v2 is mounted at /sys/fs/cgroup/unified beside v1.
fn hybrid_cgroups() -> bool {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    mounts
        .lines()
        .any(|line| line.split(' ').nth(4) == Some("/sys/fs/cgroup/unified") && line.contains(" - cgroup2 "))
}

/// Why this test run is not one for these tests, if it is not: without
/// MESHWRAP_TEST_BIN the binary under test is cargo's build, dynamic, which
/// cannot run in a FROM-scratch rootfs (the first `cargo test` of .ci/run,
/// before .ci/release has built the static one; its second run sets it).
pub fn not_this_run() -> Option<&'static str> {
    std::env::var_os("MESHWRAP_TEST_BIN")
        .is_none()
        .then_some("needs a static meshwrap in MESHWRAP_TEST_BIN (.ci/run's second integration run sets it to .ci/release's musl build)")
}

/// What keeps `runtime` from running here, if anything: root, the tools,
/// and a static meshwrap in MESHWRAP_TEST_BIN.
pub fn lacks(runtime: Runtime) -> Option<String> {
    lacks_root_or(&[runtime.path(), "/bin/busybox", "/usr/bin/unshare"])
        .or_else(static_busybox)
        .or_else(|| static_meshwrap().err())
}

/// Debian's `busybox` package is dynamic, and conflicts with busybox-static.
fn static_busybox() -> Option<String> {
    let elf = std::fs::read("/bin/busybox").unwrap_or_default();
    has_interpreter(&elf).then(|| "/bin/busybox is dynamically linked: install busybox-static (CI does)".into())
}

/// The static meshwrap to put in the rootfs, or why there is none.
fn static_meshwrap() -> Result<PathBuf, String> {
    let Some(bin) = std::env::var_os("MESHWRAP_TEST_BIN") else {
        return Err(not_this_run().unwrap_or_default().into());
    };
    let bin = PathBuf::from(bin);
    let elf = std::fs::read(&bin).map_err(|e| format!("MESHWRAP_TEST_BIN={}: {e}", bin.display()))?;
    if has_interpreter(&elf) {
        return Err(format!(
            "MESHWRAP_TEST_BIN={} is dynamically linked; a FROM-scratch rootfs needs a static binary",
            bin.display()
        ));
    }
    Ok(bin)
}

/// Whether a 64-bit little-endian ELF file asks for a program interpreter
/// (PT_INTERP): a dynamic executable, which needs a libc the rootfs lacks.
pub fn has_interpreter(elf: &[u8]) -> bool {
    let word = |at: usize, len: usize| -> u64 {
        elf.get(at..at + len)
            .map(|b| b.iter().rev().fold(0u64, |n, &x| n << 8 | u64::from(x)))
            .unwrap_or(0)
    };
    let (phoff, phentsize, phnum) = (word(0x20, 8) as usize, word(0x36, 2) as usize, word(0x38, 2) as usize);
    (0..phnum).any(|i| word(phoff + i * phentsize, 4) == 3)
}

/// The shared read-only rootfs, built on first use.
fn rootfs() -> &'static Path {
    static ROOTFS: OnceLock<PathBuf> = OnceLock::new();
    ROOTFS.get_or_init(|| {
        let root = crate::exit_status::tempdir().join("rootfs");
        for dir in ["bin", "proc", "dev", "sys", "run/meshwrap"] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
        }
        let meshwrap = static_meshwrap().unwrap_or_else(|why| panic!("{why}"));
        std::fs::copy(&meshwrap, root.join("meshwrap")).unwrap();
        std::fs::copy("/bin/busybox", root.join("bin/busybox")).unwrap();
        for applet in ["sh", "sleep", "true", "cat"] {
            std::os::unix::fs::symlink("busybox", root.join("bin").join(applet)).unwrap();
        }
        // A file that is there but cannot be executed: 126.
        std::fs::write(root.join("not-executable"), "#!/bin/sh\necho ran\n").unwrap();
        root
    })
}

/// A container under construction: its process and its namespaces.
pub struct Spec {
    pub args: Vec<String>,
    pub seccomp: Seccomp,
    pub network: Network,
    /// A host directory bind-mounted at /run/meshwrap (the guard directory).
    pub guard_dir: Option<PathBuf>,
}

impl Spec {
    pub fn new(args: &[&str], seccomp: Seccomp) -> Spec {
        Spec {
            args: args.iter().map(|s| s.to_string()).collect(),
            seccomp,
            network: Network::Own,
            guard_dir: None,
        }
    }

    /// config.json, modelled on `runc spec` (1.1.5) with no terminal and a
    /// read-only root.
    fn config(&self, rootfs: &Path) -> Value {
        let caps = ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"];
        let mut namespaces = vec![
            json!({"type": "pid"}),
            json!({"type": "ipc"}),
            json!({"type": "uts"}),
            json!({"type": "mount"}),
        ];
        namespaces.push(match self.network {
            Network::Own => json!({"type": "network"}),
            Network::Tests => json!({"type": "network", "path": format!("/proc/{}/ns/net", std::process::id())}),
        });
        let mut linux = json!({
            "namespaces": namespaces,
            "resources": {"devices": [{"allow": false, "access": "rwm"}]},
            "maskedPaths": ["/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug", "/sys/firmware", "/proc/scsi"],
            "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"],
        });
        if self.seccomp == Seccomp::ContainerdDefault {
            linux["seccomp"] = seccomp::containerd_default();
        }
        json!({
            "ociVersion": "1.0.2",
            "process": {
                "terminal": false,
                "user": {"uid": 0, "gid": 0},
                "args": self.args,
                "env": ["PATH=/bin"],
                "cwd": "/",
                "capabilities": {"bounding": caps, "effective": caps, "permitted": caps, "ambient": caps},
                "noNewPrivileges": true,
            },
            "root": {"path": rootfs, "readonly": true},
            "hostname": "oci-test",
            "mounts": self.mounts(),
            "linux": linux,
        })
    }

    fn mounts(&self) -> Vec<Value> {
        let mut mounts = vec![
            json!({"destination": "/proc", "type": "proc", "source": "proc"}),
            json!({"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]}),
            json!({"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", "ro"]}),
        ];
        if let Some(dir) = &self.guard_dir {
            mounts.push(
                json!({"destination": "/run/meshwrap", "type": "bind", "source": dir, "options": ["rbind", "rw"]}),
            );
        }
        mounts
    }
}

/// One container: its bundle, its runtime's state directory and its id.
pub struct Container {
    pub runtime: Runtime,
    root: PathBuf,
    bundle: PathBuf,
    pub id: String,
}

impl Container {
    pub fn new(runtime: Runtime, spec: &Spec) -> Container {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = crate::exit_status::tempdir();
        let (root, bundle) = (dir.join("state"), dir.join("bundle"));
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&bundle).unwrap();
        let config = serde_json::to_string_pretty(&spec.config(rootfs())).unwrap();
        std::fs::write(bundle.join("config.json"), config).unwrap();
        let id = format!(
            "meshwrap-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        );
        Container {
            runtime,
            root,
            bundle,
            id,
        }
    }

    /// `run` in the foreground: the container's stdio is the runtime's, piped.
    pub fn run(&self) -> Running {
        let mut cmd = self.runtime.command(&self.root);
        cmd.arg("run").arg("--bundle").arg(&self.bundle).arg(&self.id);
        cmd.spawn()
    }

    /// `kill CONTAINER SIGNAL`: the runtime signals the container's init.
    pub fn kill(&self, signal: &str) {
        let run = self.runtime.command(&self.root).args(["kill", &self.id, signal]).run();
        run.check(run.status.success(), "the runtime's kill failed");
    }

    /// The container's init (meshwrap), as a host pid, from `state`.
    pub fn init_pid(&self) -> i32 {
        let run = self.runtime.command(&self.root).args(["state", &self.id]).run();
        let state: Value = serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("state: {e}\n{run}"));
        state["pid"]
            .as_i64()
            .unwrap_or_else(|| panic!("state has no pid\n{run}")) as i32
    }
}

impl Drop for Container {
    /// Deletes the container if it is still there, within 10 s; `run` in the
    /// foreground deletes it itself when it ends, so usually nothing is left.
    fn drop(&mut self) {
        let mut cmd = self.runtime.command(&self.root);
        cmd.args(["delete", "--force", &self.id]);
        let delete = cmd
            .command()
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let Ok(mut child) = delete.spawn() else { return };
        let deadline = Instant::now() + Duration::from_secs(10);
        while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
        let _ = std::fs::remove_dir_all(self.bundle.parent().unwrap());
    }
}
