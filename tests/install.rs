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
