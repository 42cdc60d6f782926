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
