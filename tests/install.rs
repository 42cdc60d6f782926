//! `meshwrap install DIR`: an atomic copy of the binary, mode 0755, for init
//! containers whose image has no `cp` or shell.

use std::os::unix::fs::PermissionsExt;

use crate::exit_status::tempdir;
use crate::support::command::meshwrap_bin;
use crate::support::*;

#[test]
fn install_copies_the_binary_and_prints_the_destination() {
    let dir = tempdir().join("mesh/bin");
    let run = Meshwrap::new().arg("install").arg(&dir).run();
    let destination = dir.join("meshwrap");
    run.assert_code(0)
        .assert_stdout(&format!("{}\n", destination.display()));
    let mode = std::fs::metadata(&destination).unwrap().permissions().mode() & 0o7777;
    run.check(mode == 0o755, &format!("mode {mode:o}"));
    run.check(
        std::fs::read(&destination).unwrap() == std::fs::read(meshwrap_bin()).unwrap(),
        "the installed file is the binary",
    );
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    run.check(names == ["meshwrap"], "no temporary file is left behind");
    Meshwrap::program(&destination).arg("--version").run().assert_code(0);
}

#[test]
fn install_replaces_a_copy_that_is_running() {
    let dir = tempdir();
    Meshwrap::new().arg("install").arg(&dir).run().assert_code(0);
    let installed = dir.join("meshwrap");
    // A pod restarted on the same volume: the old copy is still executing.
    let mut running = Meshwrap::program(&installed)
        .args([
            "--no-wait",
            "--quit-policy",
            "never",
            "sh",
            "-c",
            "echo up; read x; exit 0",
        ])
        .spawn();
    running.wait_stdout("up");
    Meshwrap::new().arg("install").arg(&dir).run().assert_code(0);
    running.close_stdin();
    running.finish().assert_code(0);
}

#[test]
fn install_refuses_a_file() {
    let file = tempdir().join("a-file");
    std::fs::write(&file, "x").unwrap();
    Meshwrap::new()
        .arg("install")
        .arg(&file)
        .run()
        .assert_code(125)
        .assert_stdout("")
        .assert_stderr_has("not a directory");
}

#[test]
fn install_refuses_a_directory_it_cannot_write() {
    let dir = tempdir().join("read-only");
    std::fs::create_dir(&dir).unwrap();
    let run = if is_root() {
        // Root ignores permission bits; a read-only mount stops it.
        let script = format!(
            "mount -t tmpfs -o ro none {0} && {1} install {0}",
            dir.display(),
            meshwrap_bin().display()
        );
        Meshwrap::program("/usr/bin/unshare")
            .args(["--mount", "sh", "-c", &script])
            .run()
    } else {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o555)).unwrap();
        Meshwrap::new().arg("install").arg(&dir).run()
    };
    run.assert_code(125).assert_stderr_has("not writable");
}

#[test]
fn install_needs_exactly_one_directory() {
    Meshwrap::new()
        .arg("install")
        .run()
        .assert_code(125)
        .assert_stderr_has("meshwrap install DIR");
    Meshwrap::new().args(["install", "a", "b"]).run().assert_code(125);
}

#[test]
fn after_a_double_dash_install_is_a_command() {
    let sidecar = FakeSidecar::ready();
    let run = wrapped(&sidecar).args(["--", "install", "--version"]).run();
    run.assert_code(0);
    run.check(run.stdout.contains("coreutils"), "the install program ran");
}

/// meshwrap as PID 1 of a PID namespace of its own, as in a container.
fn as_pid1() -> Meshwrap {
    let mut mw = Meshwrap::program("/usr/bin/unshare");
    mw.args(["--pid", "--fork", "--mount-proc"]).arg(meshwrap_bin());
    mw
}

#[test]
fn concurrent_installs_into_one_directory_all_succeed_as_pid_1() {
    if skip_unless_able("concurrent_installs", lacks_root_or(&["/usr/bin/unshare"])) {
        return;
    }
    let dir = tempdir();
    // Every installer is pid 1 of its own container, as in a pod's init containers.
    let running: Vec<Running> = (0..8).map(|_| as_pid1().arg("install").arg(&dir).spawn()).collect();
    for run in running {
        run.finish().assert_code(0);
    }
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["meshwrap"], "one binary, no temporary file left");
    assert!(std::fs::read(dir.join("meshwrap")).unwrap() == std::fs::read(meshwrap_bin()).unwrap());
}

#[test]
fn a_leftover_temporary_file_neither_fails_an_install_nor_is_removed_by_it() {
    if skip_unless_able("a_leftover_temporary_file", lacks_root_or(&["/usr/bin/unshare"])) {
        return;
    }
    let dir = tempdir();
    // What a killed install by pid 1 left behind, and some other installer's file.
    for name in [".meshwrap.1.tmp", ".meshwrap.0123456789abcdef.tmp"] {
        std::fs::write(dir.join(name), "partial").unwrap();
    }
    as_pid1().arg("install").arg(&dir).run().assert_code(0);
    for name in [".meshwrap.1.tmp", ".meshwrap.0123456789abcdef.tmp"] {
        assert_eq!(
            std::fs::read_to_string(dir.join(name)).unwrap(),
            "partial",
            "{name} untouched"
        );
    }
    assert!(std::fs::read(dir.join("meshwrap")).unwrap() == std::fs::read(meshwrap_bin()).unwrap());
}

/// meshwrap with its stdout a pipe whose reader is gone.
fn with_stdout_closed(mw: &mut Meshwrap) -> &mut Meshwrap {
    use std::os::unix::process::CommandExt;
    // SAFETY: runs in the forked child before exec; pipe, close and dup2 are async-signal-safe.
    unsafe {
        mw.command().pre_exec(|| {
            let mut fds = [0; 2];
            libc::pipe(fds.as_mut_ptr());
            libc::close(fds[0]);
            libc::dup2(fds[1], 1);
            libc::close(fds[1]);
            Ok(())
        });
    }
    mw
}

#[test]
fn a_closed_stdout_neither_aborts_nor_fails_install_help_or_explain() {
    let dir = tempdir();
    with_stdout_closed(Meshwrap::new().arg("install").arg(&dir))
        .run()
        .assert_code(0);
    assert!(dir.join("meshwrap").exists(), "installed");
    for flag in ["--help", "--explain"] {
        with_stdout_closed(Meshwrap::new().args([flag, "true"]))
            .run()
            .assert_code(0)
            .assert_stderr_lacks("panicked");
    }
}
