//! Real OCI runtimes: runc 1.1.5 and crun 1.8.1 (Debian's) run the static
//! meshwrap as PID 1 of a FROM-scratch bundle whose only other file is
//! busybox-static, as a pod's container runs the shipped image. Every case
//! runs under each runtime (`CASE::runc`, `CASE::crun`), and within each
//! twice: under containerd's default seccomp profile (support/seccomp.rs,
//! whose `clone` rule refuses namespace flags and whose `clone3` answers
//! ENOSYS) and unconfined.
//!
//! They need root, the runtimes, busybox-static and a static meshwrap in
//! MESHWRAP_TEST_BIN: .ci/run's second integration run (the release's musl
//! binary, POD_TESTS_REQUIRED) runs them; the first, on cargo's dynamic
//! glibc build, skips them with a line (support/oci.rs says why).
//!
//! Synchronisation is by markers: the command prints a line once it runs,
//! the guard logs once it watches; every wait is bounded ([`BOUND`]).

use crate::support::oci::{Container, Network, Runtime, SECCOMP, Seccomp, Spec, lacks, not_this_run};
use crate::support::pod::child_of;
use crate::support::*;

/// Runs `case` under both runtimes, as `NAME::runc` and `NAME::crun`.
macro_rules! under_each_runtime {
    ($($case:ident),* $(,)?) => {$(
        mod $case {
            use crate::support::oci::Runtime;
            #[test]
            fn runc() {
                super::each_seccomp(stringify!($case), Runtime::Runc, super::$case);
            }
            #[test]
            fn crun() {
                super::each_seccomp(stringify!($case), Runtime::Crun, super::$case);
            }
        }
    )*};
}

under_each_runtime!(
    statuses,
    kill_term_gives_143,
    orphans_are_reaped,
    one_quit_reaches_the_sidecar,
    guard_quits_after_a_group_kill
);

/// Runs `case` with containerd's profile and without, unless the runtime
/// cannot run here (a skip outside CI, a failure in it).
fn each_seccomp(name: &str, runtime: Runtime, case: fn(Runtime, Seccomp)) {
    let test = format!("oci::{name}::{}", runtime.name());
    if let Some(why) = not_this_run() {
        // Not a skip that hides a failure: the run on the static binary has it.
        println!("skipped {test} in this run: {why}");
        return;
    }
    if skip_unless_able(&test, lacks(runtime)) {
        return;
    }
    for seccomp in SECCOMP {
        case(runtime, seccomp);
    }
}

/// meshwrap's arguments before `--`, then the command.
fn meshwrap_args<'a>(flags: &'a [String], command: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["/meshwrap"];
    args.extend(flags.iter().map(String::as_str));
    args.push("--");
    args.extend(command);
    args
}

/// meshwrap with no sidecar around `command`, in a network namespace of its own.
fn alone(command: &[&str], seccomp: Seccomp) -> Spec {
    let flags = ["--sidecar".to_string(), "none".to_string()];
    Spec::new(&meshwrap_args(&flags, command), seccomp)
}

/// A command that says it runs, then sleeps: the marker for a signal.
const SLEEPER: [&str; 3] = ["/bin/sh", "-c", "echo started; exec /bin/sleep 60"];

/// Prints the command's seccomp mode (/proc/self/status): 2 is a filter.
const SECCOMP_MODE: &str =
    "while read -r key value; do [ \"$key\" = Seccomp: ] && echo \"seccomp $value\"; done < /proc/self/status; exit 0";

fn statuses(runtime: Runtime, seccomp: Seccomp) {
    // First, that the profile is in force (or not) where the command runs.
    let run = Container::new(runtime, &alone(&["/bin/sh", "-c", SECCOMP_MODE], seccomp))
        .run()
        .finish();
    let mode = if seccomp == Seccomp::ContainerdDefault {
        "2"
    } else {
        "0"
    };
    run.assert_code(0).assert_stdout(&format!("seccomp {mode}\n"));
    let cases: [(&[&str], i32); 5] = [
        (&["/bin/true"], 0),
        (&["/bin/sh", "-c", "exit 3"], 3),
        (&["/not-executable"], 126),
        (&["/no/such/command"], 127),
        (&["/bin/sh", "-c", "kill -KILL $$"], 137),
    ];
    for (command, code) in cases {
        let container = Container::new(runtime, &alone(command, seccomp));
        let run = container.run().finish();
        let what = format!(
            "{} under {seccomp:?}: {command:?} should end the container with {code}",
            runtime.name()
        );
        run.check(run.container_code() == code, &what);
    }
}

fn kill_term_gives_143(runtime: Runtime, seccomp: Seccomp) {
    let container = Container::new(runtime, &alone(&SLEEPER, seccomp));
    let mut running = container.run();
    running.wait_stdout("started");
    // `runc kill ID TERM` / `crun kill ID TERM`: SIGTERM to the init, meshwrap,
    // which forwards it; the command dies of it.
    container.kill("TERM");
    let run = running.finish();
    let what = format!("{} kill TERM under {seccomp:?}: 128+15 expected", runtime.name());
    run.check(run.container_code() == 143, &what);
}

/// A background sleep whose parent shell (a command substitution's) exits
/// at once, so the namespace's init, meshwrap, adopts it; the command then
/// watches its /proc entry go, bounded (5 s), and says whether it went.
const ORPHAN: &str = "pid=$(/bin/sleep 0.2 >/dev/null 2>&1 & echo $!); \
    read -r _ _ _ parent _ < /proc/$pid/stat; echo \"orphan parent $parent\"; \
    i=0; while [ -e /proc/$pid ] && [ $i -lt 100 ]; do i=$((i+1)); /bin/sleep 0.05; done; \
    if [ -e /proc/$pid ]; then echo \"left: $(cat /proc/$pid/stat)\"; exit 1; fi; echo reaped";

fn orphans_are_reaped(runtime: Runtime, seccomp: Seccomp) {
    let flags = ["--sidecar".to_string(), "none".to_string(), "-v".to_string()];
    let spec = Spec::new(&meshwrap_args(&flags, &["/bin/sh", "-c", ORPHAN]), seccomp);
    let container = Container::new(runtime, &spec);
    let run = container.run().finish();
    let what = format!(
        "{} under {seccomp:?}: the orphan should be adopted by meshwrap (PID 1) and reaped",
        runtime.name()
    );
    run.check(run.container_code() == 0, &what)
        .check(
            run.stdout.contains("orphan parent 1\n") && run.stdout.ends_with("reaped\n"),
            &what,
        )
        .assert_stderr_has("reaped orphaned processes");
}

fn one_quit_reaches_the_sidecar(runtime: Runtime, seccomp: Seccomp) {
    let sidecar = FakeSidecar::ready();
    let mut spec = Spec::new(&meshwrap_args(&sidecar.flags(), &["/bin/sh", "-c", "exit 3"]), seccomp);
    spec.network = Network::Tests;
    let container = Container::new(runtime, &spec);
    let run = container.run().finish();
    run.check(run.container_code() == 3, "the command's status after the quit");
    run.check(
        sidecar.quits() == 1 && sidecar.accepted_quits() == 1,
        &format!(
            "{} under {seccomp:?}: one accepted quit expected, saw {}",
            runtime.name(),
            sidecar.quits()
        ),
    );
}

/// The guard in one container, meshwrap in another, the guard directory a
/// host directory bind-mounted into both; both join the sidecar's network.
fn guard_quits_after_a_group_kill(runtime: Runtime, seccomp: Seccomp) {
    let sidecar = FakeSidecar::ready();
    let dir = crate::exit_status::tempdir().join("guard");
    std::fs::create_dir_all(&dir).unwrap();
    let in_pod = |args: &[&str]| {
        let mut spec = Spec::new(args, seccomp);
        spec.network = Network::Tests;
        spec.guard_dir = Some(dir.clone());
        spec
    };
    let mut flags = sidecar.flags();
    flags.extend(["--guard-dir".to_string(), "/run/meshwrap".to_string()]);
    let mut guard_args = vec!["/meshwrap", "guard"];
    guard_args.extend(flags.iter().map(String::as_str));
    let guard = Container::new(runtime, &in_pod(&guard_args));
    let mut guarding = guard.run();
    guarding.wait_stderr("guard: watching meshwrap's run");
    let wrapped = Container::new(runtime, &in_pod(&meshwrap_args(&flags, &SLEEPER)));
    let mut running = wrapped.run();
    running.wait_stdout("started");
    assert_eq!(sidecar.quits(), 0, "no quit while the command runs");
    // The OOM group kill: SIGKILL to the init, meshwrap, and its command at once.
    let init = wrapped.init_pid();
    let command = child_of(init);
    // SAFETY: kill takes plain integers.
    unsafe {
        libc::kill(init, libc::SIGKILL);
        libc::kill(command, libc::SIGKILL);
    }
    let killed = running.finish();
    killed.check(
        killed.container_code() == 137,
        "the wrapped container should end killed (137)",
    );
    let run = guarding.finish();
    run.assert_code(0)
        .assert_stderr_has("meshwrap was killed with its command; quitting the sidecar in its place");
    run.check(
        sidecar.quits() == 1,
        &format!(
            "{} under {seccomp:?}: one quit, from the guard; saw {}",
            runtime.name(),
            sidecar.quits()
        ),
    );
}

/// The rule that tells a static binary from a dynamic one: a PT_INTERP
/// program header, read from a 64-bit little-endian ELF.
#[test]
fn a_binary_with_a_program_interpreter_is_dynamic() {
    use crate::support::oci::has_interpreter;
    // An ELF header (64 bytes) whose program headers start at 64, 56 bytes
    // each, one of them; then that header, whose type is `kind`.
    let elf = |kind: u8| {
        let mut bytes = vec![0u8; 64 + 56];
        bytes[..4].copy_from_slice(b"\x7fELF");
        bytes[0x20] = 64;
        bytes[0x36] = 56;
        bytes[0x38] = 1;
        bytes[64] = kind;
        bytes
    };
    assert!(has_interpreter(&elf(3)), "PT_INTERP");
    assert!(!has_interpreter(&elf(1)), "PT_LOAD only");
    assert!(!has_interpreter(b"\x7fELF"), "truncated: no header to read");
    // cargo's build of meshwrap is glibc's, dynamic.
    let cargo_build = std::fs::read(env!("CARGO_BIN_EXE_meshwrap")).unwrap();
    assert!(has_interpreter(&cargo_build), "cargo's glibc build");
}
