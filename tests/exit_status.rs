//! meshwrap exits with the command's status: N for exit N, 128+S for signal S,
//! 127 when the command is missing, 126 when it cannot be executed.

use std::os::unix::process::CommandExt;

use crate::support::*;

#[test]
fn exit_codes_pass_through() {
    let sidecar = FakeSidecar::ready();
    for code in [0, 1, 2, 3, 42, 126, 127, 128, 255] {
        wrapped(&sidecar)
            .args(["sh", "-c", &format!("exit {code}")])
            .run()
            .assert_code(code);
    }
}

#[test]
fn a_killed_command_exits_128_plus_the_signal() {
    let sidecar = FakeSidecar::ready();
    for (sig, code) in [("TERM", 143), ("HUP", 129), ("QUIT", 131), ("KILL", 137)] {
        // No core file for QUIT.
        let script = format!("ulimit -c 0; kill -{sig} $$");
        wrapped(&sidecar)
            .args(["sh", "-c", &script])
            .run()
            .assert_code(code)
            .assert_stderr_has(&format!("status=\"signal SIG{sig}\""));
    }
}

#[test]
fn a_missing_command_exits_127_and_still_quits() {
    let sidecar = FakeSidecar::ready();
    wrapped(&sidecar)
        .arg("/nonexistent/command")
        .run()
        .assert_code(127)
        .assert_stderr_has("command not found");
    wrapped(&sidecar).arg("no-such-command-on-path").run().assert_code(127);
    // An empty name is no file at all, as execvp has it, not a PATH directory.
    wrapped(&sidecar).arg("").run().assert_code(127);
    assert_eq!(sidecar.quits(), 3, "each failed start still quits the sidecar");
}

#[test]
fn a_command_that_cannot_be_executed_exits_126() {
    let sidecar = FakeSidecar::ready();
    let dir = tempdir();
    let script = dir.join("not-executable.sh");
    std::fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
    wrapped(&sidecar)
        .arg(&script)
        .run()
        .assert_code(126)
        .assert_stderr_has("could not be executed");
    wrapped(&sidecar).arg(&dir).run().assert_code(126);
}

/// PATH is searched as execvp searches it: a file that cannot be executed
/// does not stop the search, an executable one later on PATH runs, and only
/// when none does is the refusal reported (126, not 127).
#[test]
fn a_bare_command_is_searched_for_on_path_past_a_file_that_cannot_run() {
    use std::os::unix::fs::PermissionsExt;
    let sidecar = FakeSidecar::ready();
    let (refused, runnable) = (tempdir(), tempdir());
    std::fs::write(refused.join("job"), "#!/bin/sh\nexit 3\n").unwrap();
    std::fs::write(runnable.join("job"), "#!/bin/sh\nexit 7\n").unwrap();
    std::fs::set_permissions(runnable.join("job"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = |dirs: &[&std::path::Path]| {
        let dirs: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        format!("{}:/usr/bin:/bin", dirs.join(":"))
    };
    wrapped(&sidecar)
        .env(
            "PATH",
            &path(&[&refused, std::path::Path::new("/nonexistent"), &runnable]),
        )
        .arg("job")
        .run()
        .assert_code(7);
    wrapped(&sidecar)
        .env("PATH", &path(&[&refused]))
        .arg("job")
        .run()
        .assert_code(126)
        .assert_stderr_has("could not be executed");
}

pub fn tempdir() -> std::path::PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "meshwrap-test-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn a_parent_that_ignores_sigchld_does_not_cost_the_exit_status() {
    // An ignored SIGCHLD survives exec, and with it the kernel reaps children
    // itself: the command's status would be gone before meshwrap asked.
    let sidecar = FakeSidecar::ready();
    let mut mw = wrapped(&sidecar);
    mw.args(["sh", "-c", "exit 7"]);
    // SAFETY: runs in the forked child before exec; signal is async-signal-safe.
    unsafe {
        mw.command().pre_exec(|| {
            libc::signal(libc::SIGCHLD, libc::SIG_IGN);
            Ok(())
        });
    }
    mw.run().assert_code(7);
}

/// A pids cgroup (v1, as this machine's; the kubelet's pod cgroup sets
/// pids.max the same way) holding only meshwrap, allowed `max` processes.
struct PidsCgroup(std::path::PathBuf);

impl PidsCgroup {
    fn new(max: u32) -> PidsCgroup {
        let root = std::path::Path::new("/sys/fs/cgroup/pids");
        assert!(
            root.join("cgroup.procs").exists(),
            "no cgroup v1 pids controller at {}",
            root.display()
        );
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let dir = root.join(format!("meshwrap-test-{}-{n}", std::process::id()));
        std::fs::create_dir(&dir).unwrap();
        let cgroup = PidsCgroup(dir);
        cgroup.set_max(max);
        cgroup
    }

    fn set_max(&self, max: u32) {
        std::fs::write(self.0.join("pids.max"), max.to_string()).unwrap();
    }

    /// meshwrap with `args`, moved into the cgroup before it starts.
    fn meshwrap(&self, args: &[&str]) -> Meshwrap {
        let procs = self.0.join("cgroup.procs");
        let mut mw = Meshwrap::program("/bin/sh");
        mw.args(["-c", "echo $$ > \"$0\" && exec \"$@\""])
            .arg(procs)
            .arg(crate::support::command::meshwrap_bin())
            .args(args);
        mw
    }
}

impl Drop for PidsCgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

#[test]
fn a_process_that_cannot_be_made_is_meshwraps_failure_125_with_its_cause() {
    if skip_unless_able(
        "clone at pids.max",
        lacks_root_or(&["/sys/fs/cgroup/pids/cgroup.procs"]),
    ) {
        return;
    }
    let sidecar = FakeSidecar::ready();
    let cgroup = PidsCgroup::new(1);
    let dir = tempdir();
    let termination = dir.join("termination-log");
    std::fs::write(&termination, "").unwrap();
    let mut mw = cgroup.meshwrap(&["--termination-log", termination.to_str().unwrap()]);
    mw.args(sidecar.flags()).args(["--", "/bin/true"]);
    let run = mw.run();
    run.assert_code(125)
        .assert_stderr_has(
            "error: could not make a process for the command: the pod's process limit (the cgroup's pids.max)",
        )
        .assert_stderr_has("trying again")
        .assert_stderr_lacks("could not be executed");
    let message = std::fs::read_to_string(&termination).unwrap();
    assert!(
        message.contains("could not make a process"),
        "termination log: {message:?}"
    );
    assert_eq!(
        sidecar.quits(),
        1,
        "a sidecar is still quit on 125, as --quit-policy always says"
    );
}

#[test]
fn a_process_limit_that_passes_is_retried_and_the_command_runs() {
    if skip_unless_able(
        "clone at pids.max",
        lacks_root_or(&["/sys/fs/cgroup/pids/cgroup.procs"]),
    ) {
        return;
    }
    let sidecar = FakeSidecar::ready();
    let cgroup = PidsCgroup::new(1);
    let mut mw = cgroup.meshwrap(&[]);
    mw.args(sidecar.flags()).args(["--", "sh", "-c", "exit 3"]);
    let mut running = mw.spawn();
    running.wait_stderr("could not make a process for the command; trying again");
    cgroup.set_max(16);
    running.finish().assert_code(3).assert_stderr_has("command started");
}

/// meshwrap with `args` under RLIMIT_NOFILE 4: stdio and the signalfd take
/// all four descriptors, so the runtime (an epoll and an eventfd, made
/// after the spawn) cannot be made.
fn at_four_descriptors(args: &[String]) -> Meshwrap {
    let mut mw = Meshwrap::program("/bin/sh");
    mw.args(["-c", "ulimit -n 4 && exec \"$0\" \"$@\""])
        .arg(crate::support::command::meshwrap_bin())
        .args(args);
    mw
}

#[test]
fn a_runtime_that_cannot_be_made_after_the_spawn_leaves_the_command_running_and_still_quits() {
    let sidecar = FakeSidecar::ready();
    let termination = tempdir().join("termination-log");
    std::fs::write(&termination, "").unwrap();
    let mut args = vec!["--no-wait".to_string(), "--quit-url".into(), sidecar.quit_url()];
    args.extend(["--termination-log".into(), termination.to_string_lossy().into_owned()]);
    args.extend(["--", "sh", "-c", "echo started; read line; echo finished; exit 3"].map(String::from));
    let mut running = at_four_descriptors(&args).spawn();
    running.wait_stdout("started");
    running.close_stdin();
    let run = running.finish();
    run.assert_code(3)
        .assert_stderr_has("cannot start the runtime; supervising the command without it")
        .assert_stderr_has("sidecar quit url=");
    run.check(run.stdout.contains("finished"), "the command ran to its end");
    assert_eq!(sidecar.accepted_quits(), 1);
    let message = std::fs::read_to_string(&termination).unwrap();
    assert!(
        message.contains("cannot start the runtime"),
        "termination log: {message:?}"
    );
}

#[test]
fn without_the_runtime_signals_are_still_forwarded() {
    let sidecar = FakeSidecar::ready();
    let mut args = vec!["--no-wait".to_string(), "--quit-url".into(), sidecar.quit_url()];
    args.extend(["--", "sh", "-c", "echo started; exec sleep 60"].map(String::from));
    let mut running = at_four_descriptors(&args).spawn();
    running.wait_stdout("started");
    running.wait_stderr("supervising the command without it");
    running.signal(libc::SIGTERM);
    running.finish().assert_code(143).assert_stderr_has("sidecar quit url=");
    assert_eq!(sidecar.accepted_quits(), 1);
}

#[test]
fn a_refusal_without_a_runtime_still_quits() {
    let sidecar = FakeSidecar::ready();
    let args = ["--exec", "--no-wait", "--quit-url", &sidecar.quit_url(), "--", "true"].map(String::from);
    at_four_descriptors(&args)
        .run()
        .assert_code(125)
        .assert_stderr_has("--exec: meshwrap would have to stay")
        .assert_stderr_has("cannot start the runtime")
        .assert_stderr_has("sidecar quit url=");
    assert_eq!(sidecar.accepted_quits(), 1);
}
