//! The pod's annotations (Downward API): native sidecars are waited for but
//! never quit; sidecars the pod does not have (not injected, opted out,
//! ambient mode) are skipped; a malformed file warns and changes nothing.

use std::path::PathBuf;

use crate::exit_status::tempdir;
use crate::support::*;

fn status(init: &str) -> String {
    format!(
        r#"sidecar.istio.io/status="{{\"initContainers\":[{init}],\"containers\":[\"istio-proxy\"],\"volumes\":[\"istio-envoy\"],\"imagePullSecrets\":null,\"revision\":\"default\"}}""#
    )
}

const NATIVE: &str = r#"\"istio-init\",\"istio-proxy\""#;
const CLASSIC: &str = r#"\"istio-init\""#;

fn annotations(lines: &[&str]) -> PathBuf {
    let file = tempdir().join("annotations");
    let mut text = String::from("kubectl.kubernetes.io/default-container=\"train\"\n");
    for line in lines {
        text.push_str(line);
        text.push('\n');
    }
    std::fs::write(&file, text).unwrap();
    file
}

/// meshwrap with the istio preset pointed at two fakes, and these annotations.
fn istio(file: &PathBuf, extra: &[&str]) -> (Run, FakeSidecar, FakeSidecar) {
    let (ready, quit) = FakeSidecar::pair(-1);
    let preset = format!("istio=127.0.0.1:{}", ready.port());
    let run = Meshwrap::new()
        .args(["--sidecar", &preset, "--pod-annotations"])
        .arg(file)
        .args(extra)
        .args(["sh", "-c", "echo started"])
        .run();
    (run, ready, quit)
}

#[test]
fn a_native_istio_sidecar_is_waited_for_but_not_quit() {
    let (run, ready, quit) = istio(&annotations(&[&status(NATIVE)]), &[]);
    run.assert_code(0)
        .assert_stdout("started\n")
        .assert_stderr_has("runs as a native sidecar");
    assert_eq!((ready.polls(), quit.quits()), (1, 0));
}

#[test]
fn a_classic_istio_sidecar_is_quit() {
    let (run, ready, quit) = istio(&annotations(&[&status(CLASSIC)]), &[]);
    run.assert_code(0).assert_stderr_lacks("native");
    assert_eq!((ready.polls(), quit.quits()), (1, 1));
}

#[test]
fn native_sidecar_flag_overrides_the_annotations() {
    let (run, ready, quit) = istio(&annotations(&[&status(CLASSIC)]), &["--native-sidecar", "true"]);
    run.assert_code(0).assert_stderr_has("--native-sidecar true");
    assert_eq!((ready.polls(), quit.quits()), (1, 0));
    let (run, _, quit) = istio(&annotations(&[&status(NATIVE)]), &["--native-sidecar", "false"]);
    run.assert_code(0);
    assert_eq!(quit.quits(), 1);
}

#[test]
fn a_pod_without_the_sidecar_skips_it_and_starts_at_once() {
    let cases = [
        (vec![], "Istio did not inject this pod"),
        (vec![r#"sidecar.istio.io/inject="false""#], "opted out of injection"),
        (vec![r#"ambient.istio.io/redirection="enabled""#], "ambient mode"),
    ];
    for (lines, why) in cases {
        let (run, ready, quit) = istio(&annotations(&lines), &[]);
        run.assert_code(0)
            .assert_stdout("started\n")
            .assert_stderr_has("skipping the istio sidecar: ")
            .assert_stderr_has(why)
            .assert_stderr_has("no ready URL to wait for");
        assert_eq!((ready.polls(), quit.quits()), (0, 0), "{why}");
    }
}

#[test]
fn istios_default_urls_are_skipped_too() {
    // No --sidecar: the default URLs are Istio's, and nothing listens on them here.
    let file = annotations(&[r#"ambient.istio.io/redirection="enabled""#]);
    Meshwrap::new()
        .arg("--pod-annotations")
        .arg(&file)
        .args(["--timeout", "2s", "sh", "-c", "echo started"])
        .run()
        .assert_code(0)
        .assert_stdout("started\n")
        .assert_stderr_has("skipping the istio sidecar");
}

#[test]
fn only_the_absent_preset_is_skipped() {
    let (ready, quit) = FakeSidecar::pair(-1);
    let linkerd = FakeSidecar::ready();
    linkerd.set_paths("/ready", "/shutdown");
    let file = annotations(&[&status(CLASSIC)]);
    let run = Meshwrap::new()
        .args(["--sidecar", &format!("istio=127.0.0.1:{}", ready.port())])
        .args(["--sidecar", &format!("linkerd=127.0.0.1:{}", linkerd.port())])
        .arg("--pod-annotations")
        .arg(&file)
        .arg("true")
        .run();
    run.assert_code(0)
        .assert_stderr_has("skipping the linkerd sidecar: Linkerd did not inject");
    assert_eq!(
        (ready.polls(), quit.quits(), linkerd.polls(), linkerd.quits()),
        (1, 1, 0, 0)
    );
}

#[test]
fn a_malformed_file_warns_and_keeps_the_classic_behaviour() {
    for lines in [
        vec!["this is not key=\"value\" format"],
        vec![r#"sidecar.istio.io/status="{not json""#],
    ] {
        let (run, ready, quit) = istio(&annotations(&lines), &[]);
        run.assert_code(0)
            .assert_stderr_has("warn: ignoring the pod annotations");
        assert_eq!((ready.polls(), quit.quits()), (1, 1));
    }
}

#[test]
fn a_missing_file_keeps_the_classic_behaviour() {
    let (run, ready, quit) = istio(&tempdir().join("no-such-file"), &[]);
    run.assert_code(0)
        .assert_stderr_lacks("annotations")
        .assert_stderr_lacks("skipping");
    assert_eq!((ready.polls(), quit.quits()), (1, 1));
}

/// meshwrap with the istio preset and an annotations file that is not a
/// readable Downward API file: it warns once, keeps its configured
/// sidecars, and runs the command at once.
fn warns_and_keeps_the_sidecars(file: &std::path::Path, why: &str) {
    let (run, ready, quit) = istio(&file.to_path_buf(), &[]);
    run.assert_code(0)
        .assert_stdout("started\n")
        .assert_stderr_has("warn: ignoring the pod annotations")
        .assert_stderr_has(why);
    assert_eq!((ready.polls(), quit.quits()), (1, 1));
}

#[test]
fn a_fifo_as_the_annotations_file_is_not_waited_on() {
    let fifo = tempdir().join("annotations");
    let path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo reads the NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
    warns_and_keeps_the_sidecars(&fifo, "not a regular file");
}

#[test]
fn an_endless_device_as_the_annotations_file_is_not_read() {
    warns_and_keeps_the_sidecars(std::path::Path::new("/dev/zero"), "not a regular file");
}

#[test]
fn an_annotations_file_larger_than_any_pods_annotations_is_not_read() {
    let file = tempdir().join("annotations");
    std::fs::write(&file, format!("a=\"{}\"\n", "x".repeat(2 << 20))).unwrap();
    warns_and_keeps_the_sidecars(&file, "larger than 1024 KiB");
}

#[test]
fn a_deeply_nested_istio_status_is_read_without_overflowing_the_stack() {
    // 80,000 levels: 160 KB, within the annotation limit.
    let deep = format!("{}{}", "[".repeat(80_000), "]".repeat(80_000));
    let line = format!(r#"sidecar.istio.io/status="{{\"deep\":{deep},\"initContainers\":[{NATIVE}]}}""#);
    let (run, ready, quit) = istio(&annotations(&[&line]), &[]);
    run.assert_code(0)
        .assert_stdout("started\n")
        .assert_stderr_has("runs as a native sidecar");
    assert_eq!((ready.polls(), quit.quits()), (1, 0));
    // Unterminated at that depth: a warning, and nothing changes.
    let line = format!(r#"sidecar.istio.io/status="{{\"deep\":{}}}""#, "[".repeat(80_000));
    warns_and_keeps_the_sidecars(&annotations(&[&line]), "is not the JSON Istio writes");
}
