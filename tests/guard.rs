//! `meshwrap guard` and `--guard-dir`: when the kernel kills meshwrap with its
//! command, the guard quits the sidecar in its place; otherwise it does
//! nothing. Exactly one quit per run reaches the sidecar, from one of the two.
//! Each test runs the real binary twice, as the pod would: meshwrap around a
//! command, and the guard beside it, sharing a directory.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::exit_status::tempdir;
use crate::support::pod::child_of;
use crate::support::*;

/// Marker the guard logs once its watch is set up.
const WATCHING: &str = "guard: watching meshwrap's run";

fn guard_dir() -> PathBuf {
    tempdir().join("guard")
}

/// The guard beside meshwrap: the same sidecar flags and directory.
fn guard(sidecar: &FakeSidecar, dir: &Path, extra: &[&str]) -> Running {
    let mut guard = Meshwrap::new();
    guard
        .arg("guard")
        .args(sidecar.flags())
        .arg("--guard-dir")
        .arg(dir)
        .args(extra);
    let mut running = guard.spawn();
    running.wait_stderr(WATCHING);
    running
}

/// meshwrap pointed at `sidecar`, sharing the guard directory `dir`.
fn wrapped_in(sidecar: &FakeSidecar, dir: &Path) -> Meshwrap {
    let mut meshwrap = wrapped(sidecar);
    meshwrap.arg("--guard-dir").arg(dir);
    meshwrap
}

/// meshwrap around a command that says it started and then sleeps.
fn wrapped_sleeper(sidecar: &FakeSidecar, dir: &Path, extra: &[&str]) -> Running {
    let mut running = wrapped_in(sidecar, dir)
        .args(extra)
        .args(["--", "sh", "-c", "echo started; exec sleep 60"])
        .spawn();
    running.wait_stdout("started");
    running
}

/// CPU time (user and system) a process has used, in milliseconds.
fn cpu_ms(pid: i32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name, which is in parentheses: utime is the 12th, stime the 13th.
    let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
    // SAFETY: sysconf takes a plain integer.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    (fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()) * 1000 / ticks
}

/// What the OOM group kill does: SIGKILL to meshwrap and its command at once.
fn group_kill(meshwrap: &Running) {
    let command = child_of(meshwrap.pid());
    // SAFETY: kill takes plain integers.
    unsafe {
        libc::kill(meshwrap.pid(), libc::SIGKILL);
        libc::kill(command, libc::SIGKILL);
    }
}

#[test]
fn after_a_normal_run_the_guard_exits_without_a_second_quit() {
    let sidecar = FakeSidecar::ready();
    let dir = guard_dir();
    let guard = guard(&sidecar, &dir, &[]);
    wrapped_in(&sidecar, &dir).args(["--", "true"]).run().assert_code(0);
    let run = guard.finish();
    run.assert_code(0)
        .assert_stderr_has("meshwrap finished its run and sent the quit");
    assert_eq!(sidecar.quits(), 1, "one quit, from meshwrap");
}

#[test]
fn after_a_group_kill_the_guard_sends_the_one_quit() {
    let sidecar = FakeSidecar::ready();
    let dir = guard_dir();
    let guard = guard(&sidecar, &dir, &[]);
    let meshwrap = wrapped_sleeper(&sidecar, &dir, &[]);
    assert_eq!(sidecar.quits(), 0);
    group_kill(&meshwrap);
    let run = guard.finish();
    run.assert_code(0)
        .assert_stderr_has("meshwrap was killed with its command; quitting the sidecar in its place")
        .assert_stderr_has("sidecar quit");
    assert_eq!(sidecar.quits(), 1, "one quit, from the guard");
}

#[test]
fn the_guards_quit_after_a_group_kill_is_the_termination_message() {
    let sidecar = FakeSidecar::ready();
    let dir = guard_dir();
    let log = dir.parent().unwrap().join("termination-log");
    std::fs::write(&log, "").unwrap();
    let flag = format!("--termination-log={}", log.display());
    let guard = guard(&sidecar, &dir, &[&flag]);
    let meshwrap = wrapped_sleeper(&sidecar, &dir, &[]);
    group_kill(&meshwrap);
    guard.finish().assert_code(0);
    assert_eq!(sidecar.quits(), 1);
    let message = std::fs::read_to_string(&log).unwrap();
    assert!(
        message.starts_with("meshwrap guard: meshwrap ended without quitting the sidecar"),
        "{message:?}"
    );
}

#[test]
fn a_guard_started_after_the_kill_still_quits() {
    let sidecar = FakeSidecar::ready();
    let dir = guard_dir();
    let meshwrap = wrapped_sleeper(&sidecar, &dir, &[]);
    group_kill(&meshwrap);
    meshwrap.finish();
    guard(&sidecar, &dir, &[]).finish().assert_code(0);
    assert_eq!(sidecar.quits(), 1);
}

#[test]
fn a_guard_started_after_the_run_does_nothing() {
    let sidecar = FakeSidecar::ready();
    let dir = guard_dir();
    wrapped_in(&sidecar, &dir).args(["--", "true"]).run().assert_code(0);
    guard(&sidecar, &dir, &[])
        .finish()
        .assert_code(0)
        .assert_stderr_has("nothing to do");
    assert_eq!(sidecar.quits(), 1, "meshwrap's quit only");
}

#[test]
fn orphans_of_the_command_do_not_keep_the_lock() {
    // meshwrap alone is killed; the command lives on as an orphan with
    // every descriptor it inherited. The guard must still see meshwrap gone.
    let sidecar = FakeSidecar::ready();
    let dir = guard_dir();
    let guard = guard(&sidecar, &dir, &[]);
    let meshwrap = wrapped_sleeper(&sidecar, &dir, &[]);
    let command = child_of(meshwrap.pid());
    meshwrap.signal(libc::SIGKILL);
    let run = guard.finish();
    // SAFETY: kill takes plain integers.
    unsafe { libc::kill(command, libc::SIGKILL) };
    run.assert_code(0)
        .assert_stderr_has("quitting the sidecar in its place");
    assert_eq!(sidecar.quits(), 1);
}

#[test]
fn a_kill_during_the_readiness_wait_quits_once_the_sidecar_listens() {
    let sidecar = FakeSidecar::refusing();
    let dir = guard_dir();
    let mut guard = guard(&sidecar, &dir, &[]);
    let mut meshwrap = wrapped_in(&sidecar, &dir)
        .args(["--log-level", "debug", "--", "true"])
        .spawn();
    meshwrap.wait_stderr("guard: holding the lock");
    meshwrap.signal(libc::SIGKILL);
    guard.wait_stderr("meshwrap was killed with its command");
    assert_eq!(sidecar.quits(), 0, "nothing listens yet");
    sidecar.listen();
    guard.finish().assert_code(0).assert_stderr_has("sidecar quit");
    assert_eq!(sidecar.quits(), 1);
}

#[test]
fn a_kill_in_the_middle_of_meshwraps_quit_is_followed_by_a_second_quit_said_as_such() {
    let sidecar = FakeSidecar::ready();
    sidecar.set_quit(&[Reply::Hang]);
    let dir = guard_dir();
    let guard = guard(&sidecar, &dir, &[]);
    let meshwrap = wrapped_in(&sidecar, &dir).args(["--", "true"]).spawn();
    sidecar.wait_for("meshwrap's quit", |r| r.iter().any(|r| r.method == "POST"));
    sidecar.set_quit(&[Reply::Status(200)]);
    meshwrap.signal(libc::SIGKILL);
    let run = guard.finish();
    run.assert_code(0)
        .assert_stderr_has("killed while quitting the sidecar; quitting again, so the sidecar may get a second quit");
    assert_eq!(sidecar.quits(), 2);
}

#[test]
fn on_success_a_killed_run_is_not_quit_and_the_restarted_run_quits_once() {
    let sidecar = FakeSidecar::ready();
    let dir = guard_dir();
    let policy = ["--quit-policy", "on-success"];
    let mut guard = guard(&sidecar, &dir, &policy);
    let first = wrapped_sleeper(&sidecar, &dir, &policy);
    group_kill(&first);
    guard.wait_stderr("not quitting, waiting for the restarted container's run");
    assert_eq!(sidecar.quits(), 0);
    // Something else writes in the directory: the guard wakes, and must not
    // judge the killed run again.
    std::fs::write(dir.join("unrelated"), "x").unwrap();
    // The kubelet restarts the container: the next generation succeeds.
    wrapped_in(&sidecar, &dir)
        .args(policy)
        .args(["--", "true"])
        .run()
        .assert_code(0);
    let run = guard.finish();
    run.assert_code(0).assert_stderr_has("generation=2");
    let judged = run.stderr.matches("waiting for the restarted container's run").count();
    run.check(judged == 1, "the killed run is judged once");
    assert_eq!(sidecar.quits(), 1, "the restarted run's own quit");
}

#[test]
fn on_success_a_failed_run_waits_for_the_restart() {
    let sidecar = FakeSidecar::ready();
    let dir = guard_dir();
    let policy = ["--quit-policy", "on-success"];
    let mut guard = guard(&sidecar, &dir, &policy);
    let run = |code: &str| {
        wrapped_in(&sidecar, &dir)
            .args(policy)
            .args(["--", "sh", "-c", &format!("exit {code}")])
            .run()
    };
    run("3").assert_code(3);
    guard.wait_stderr("the command failed and --quit-policy is on-success");
    assert_eq!(sidecar.quits(), 0);
    run("0").assert_code(0);
    guard.finish().assert_code(0);
    assert_eq!(sidecar.quits(), 1);
}

#[test]
fn an_exit_code_the_kubelet_restarts_on_waits_for_the_restart() {
    let sidecar = FakeSidecar::ready();
    let dir = guard_dir();
    let rules = ["--no-quit-on-exit", "42,137"];
    let mut guard = guard(&sidecar, &dir, &rules);
    let run = |code: &str| {
        wrapped_in(&sidecar, &dir)
            .args(rules)
            .args(["--", "sh", "-c", &format!("exit {code}")])
            .run()
    };
    run("42").assert_code(42);
    guard.wait_stderr("--no-quit-on-exit); waiting for the restarted container's run");
    assert_eq!(sidecar.quits(), 0, "exit 42 restarts the container: no quit");
    // A group kill ends the container with 137, which restarts it too.
    let killed = wrapped_sleeper(&sidecar, &dir, &rules);
    group_kill(&killed);
    guard.wait_stderr("generation=2");
    assert_eq!(sidecar.quits(), 0, "a kill restarts the container: no quit");
    run("0").assert_code(0);
    guard.finish().assert_code(0);
    assert_eq!(sidecar.quits(), 1, "the restarted run's own quit");
}

#[test]
fn sigterm_ends_the_guard_at_once_without_a_quit() {
    let sidecar = FakeSidecar::ready();
    let dir = guard_dir();
    let guard = guard(&sidecar, &dir, &[]);
    let meshwrap = wrapped_sleeper(&sidecar, &dir, &[]);
    guard.signal(libc::SIGTERM);
    let run = guard.finish();
    run.assert_code(0)
        .assert_stderr_has("guard: stopped (the pod is being deleted)");
    run.check(run.elapsed < Duration::from_secs(5), "ended at once");
    drop(meshwrap);
    assert_eq!(sidecar.quits(), 0);
}

#[test]
fn with_a_native_sidecar_the_guard_exits_at_once() {
    let sidecar = FakeSidecar::ready();
    let dir = guard_dir();
    let annotations = dir.with_file_name("annotations");
    std::fs::write(
        &annotations,
        r#"sidecar.istio.io/status="{\"initContainers\":[\"istio-init\",\"istio-proxy\"],\"containers\":[]}""#,
    )
    .unwrap();
    let preset = format!("istio=127.0.0.1:{}", sidecar.port());
    Meshwrap::new()
        .args(["guard", "--sidecar", &preset, "--guard-dir"])
        .arg(&dir)
        .arg("--pod-annotations")
        .arg(&annotations)
        .run()
        .assert_code(0)
        .assert_stderr_has("runs as a native sidecar")
        .assert_stderr_has("nothing to guard");
    for none in [&["--sidecar", "none"][..], &["--quit-policy", "never"]] {
        Meshwrap::new()
            .args(["guard", "--guard-dir"])
            .arg(&dir)
            .args(none)
            .run()
            .assert_code(0)
            .assert_stderr_has("nothing to guard");
    }
    assert_eq!(sidecar.quits(), 0);
}

#[test]
fn a_run_that_never_starts_is_given_up_on_after_the_start_timeout() {
    for (policy, quits) in [("always", 1), ("on-success", 0)] {
        let sidecar = FakeSidecar::ready();
        let dir = guard_dir();
        let started = Instant::now();
        let run = guard(&sidecar, &dir, &["--start-timeout", "300ms", "--quit-policy", policy]).finish();
        run.assert_code(0)
            .assert_stderr_has("no meshwrap run started within 300ms (--start-timeout)");
        run.check(started.elapsed() >= Duration::from_millis(300), "waited the bound");
        assert_eq!(sidecar.quits(), quits, "--quit-policy {policy}");
    }
}

#[test]
fn a_run_under_way_is_not_cut_short_by_the_start_timeout() {
    let sidecar = FakeSidecar::ready();
    let dir = guard_dir();
    let mut guard = guard(&sidecar, &dir, &["--start-timeout", "200ms"]);
    let mut meshwrap = wrapped_in(&sidecar, &dir)
        .args(["--", "sh", "-c", "echo started; read line; echo done"])
        .spawn();
    meshwrap.wait_stdout("started");
    // Well past the bound: the guard must still be waiting for this run,
    // asleep (an expired bound left armed would spin).
    let cpu_before = cpu_ms(guard.pid());
    let gave_up = guard.exits_within(Duration::from_millis(600));
    assert!(!gave_up, "the guard gave up on a running run");
    let spent = cpu_ms(guard.pid()) - cpu_before;
    assert!(spent < 100, "the guard spent {spent} ms of CPU in 600 ms while waiting");
    meshwrap.write_stdin(b"go\n");
    meshwrap.finish().assert_code(0);
    guard
        .finish()
        .assert_code(0)
        .assert_stderr_lacks("no meshwrap run started");
    assert_eq!(sidecar.quits(), 1);
}

#[test]
fn a_second_wrapped_container_on_the_same_directory_is_refused() {
    let sidecar = FakeSidecar::ready();
    let dir = guard_dir();
    let first = wrapped_sleeper(&sidecar, &dir, &[]);
    let second = wrapped_in(&sidecar, &dir).args(["--", "sh", "-c", "echo ran"]).run();
    second
        .assert_code(125)
        .assert_stdout("")
        .assert_stderr_has("another meshwrap holds its lock; wrap only one container per pod");
    drop(first);
    assert_eq!(sidecar.polls(), 1, "the second one waited for nothing");
}

#[test]
fn a_refusal_beside_a_live_lock_holder_never_quits_the_sidecar_it_uses() {
    let sidecar = FakeSidecar::ready();
    let dir = guard_dir();
    let mut first = wrapped_in(&sidecar, &dir)
        .args(["--", "sh", "-c", "echo started; read line; exit 0"])
        .spawn();
    first.wait_stdout("started");
    // The kubelet creates the file; meshwrap only writes it.
    let termination = tempdir().join("termination-log");
    std::fs::write(&termination, "").unwrap();
    let second = wrapped_in(&sidecar, &dir)
        .args(["--termination-log", termination.to_str().unwrap()])
        .args(["--", "sh", "-c", "echo ran"])
        .run();
    second
        .assert_code(125)
        .assert_stderr_has("another meshwrap holds its lock")
        .assert_stderr_has("not quitting the sidecar: the meshwrap that holds --guard-dir uses it");
    let message = std::fs::read_to_string(&termination).unwrap_or_default();
    assert!(
        message.contains("another meshwrap holds its lock"),
        "termination log: {message:?}"
    );
    assert_eq!(sidecar.quits(), 0, "the holder's command still runs on this sidecar");
    first.close_stdin();
    first.finish().assert_code(0);
    assert_eq!(sidecar.quits(), 1, "the holder quits it, once, at its end");
}

#[test]
fn guard_usage_errors_exit_125_with_one_line() {
    for (args, says) in [
        (&["guard"][..], "meshwrap guard needs --guard-dir DIR"),
        (
            &["guard", "--guard-dir", "/tmp/x", "--", "sleep"],
            "meshwrap guard takes no COMMAND",
        ),
        (
            &["guard", "--guard-dir", "/tmp/x", "--start-timeout", "soon"],
            "invalid --start-timeout 'soon'",
        ),
    ] {
        let run = Meshwrap::new().args(args).run();
        run.assert_code(125).assert_stderr_has(says);
        run.check(run.stderr.lines().count() == 1, "one line");
    }
}

#[test]
fn without_inotify_the_guard_looks_every_50ms_and_still_quits() {
    // A node out of inotify instances for the guard's user (128 by default):
    // the same limit, set to 0 in a user namespace of the guard's own.
    let sidecar = FakeSidecar::ready();
    let dir = guard_dir();
    let guard_line = "echo 0 > /proc/sys/user/max_inotify_instances && exec \"$@\"";
    let mut guard = Meshwrap::program("unshare");
    guard
        .args(["--user", "--map-root-user", "sh", "-c", guard_line, "sh"])
        .arg(crate::support::command::meshwrap_bin())
        .arg("guard")
        .args(sidecar.flags())
        .arg("--guard-dir")
        .arg(&dir);
    let mut guard = guard.spawn();
    guard.wait_stderr(WATCHING);
    let meshwrap = wrapped_sleeper(&sidecar, &dir, &[]);
    group_kill(&meshwrap);
    let run = guard.finish();
    run.assert_code(0)
        .assert_stderr_has("cannot watch the directory with inotify; looking every 50ms instead")
        .assert_stderr_has("quitting the sidecar in its place");
    assert_eq!(sidecar.quits(), 1);
}

/// A guard directory as a run leaves it once meshwrap is gone: a lock no
/// one holds, and `state` (a record, or a directory to make reading it fail).
fn left_behind(state: Option<&str>) -> PathBuf {
    let dir = guard_dir();
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("lock"), "").unwrap();
    match state {
        Some(record) => std::fs::write(dir.join("state"), record).unwrap(),
        None => std::fs::create_dir(dir.join("state")).unwrap(),
    }
    dir
}

#[test]
fn a_record_with_a_key_this_guard_does_not_know_is_still_judged() {
    // A newer meshwrap beside this guard (version skew) writes a key it has never seen.
    let sidecar = FakeSidecar::ready();
    let dir = left_behind(Some(
        "generation=1\nphase=running\npolicy=always\nready=true\nfrom-the-future=1\n",
    ));
    let run = guard(&sidecar, &dir, &[]).finish();
    run.assert_code(0)
        .assert_stderr_has("quitting the sidecar in its place");
    assert_eq!(sidecar.quits(), 1);
}

#[test]
fn a_read_error_that_passes_is_retried_and_the_quit_still_goes_out() {
    let sidecar = FakeSidecar::ready();
    let dir = left_behind(None);
    let mut running = guard(&sidecar, &dir, &[]);
    running.wait_stderr("cannot read --guard-dir; looking every 50ms");
    // The record becomes readable (renamed into place, as meshwrap writes it).
    std::fs::remove_dir(dir.join("state")).unwrap();
    std::fs::write(
        dir.join(".state.tmp"),
        "generation=1\nphase=running\npolicy=always\nready=true\n",
    )
    .unwrap();
    std::fs::rename(dir.join(".state.tmp"), dir.join("state")).unwrap();
    let run = running.finish();
    run.assert_code(0)
        .assert_stderr_has("quitting the sidecar in its place");
    assert_eq!(sidecar.quits(), 1);
}

#[test]
fn a_read_error_that_lasts_ends_the_guard_with_exit_0_and_no_quit() {
    let sidecar = FakeSidecar::ready();
    let dir = left_behind(None);
    let run = guard(&sidecar, &dir, &[]).finish();
    run.assert_code(0)
        .assert_stderr_has("after 5s exiting 0 without a quit");
    assert_eq!(sidecar.quits(), 0);
}
