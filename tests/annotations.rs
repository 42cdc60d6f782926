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
        (
            vec![r#"ambient.istio.io/redirection="enabled""#],
            "ambient.istio.io/redirection: \"enabled\"",
        ),
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
    let (run, ready, quit) = istio(&annotations(&["this is not key=\"value\" format"]), &[]);
    run.assert_code(0)
        .assert_stderr_has("warn: ignoring the pod annotations");
    assert_eq!((ready.polls(), quit.quits()), (1, 1));
    // A malformed Istio status is a warning about Istio alone; its sidecar
    // is taken as a regular one, waited for and quit.
    let (run, ready, quit) = istio(&annotations(&[r#"sidecar.istio.io/status="{not json""#]), &[]);
    run.assert_code(0)
        .assert_stderr_has("warn: ignoring a pod annotation: sidecar.istio.io/status is not the JSON Istio writes");
    assert_eq!((ready.polls(), quit.quits()), (1, 1));
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
    // Unterminated at that depth: a warning, and Istio's sidecar is quit as a regular one.
    let line = format!(r#"sidecar.istio.io/status="{{\"deep\":{}}}""#, "[".repeat(80_000));
    let (run, ready, quit) = istio(&annotations(&[&line]), &[]);
    run.assert_code(0).assert_stderr_has("is not the JSON Istio writes");
    assert_eq!((ready.polls(), quit.quits()), (1, 1));
}

/// `meshwrap --explain` with this annotations file: the auto rows.
fn explained(file: &std::path::Path, extra: &[&str]) -> String {
    let run = Meshwrap::new()
        .arg("--pod-annotations")
        .arg(file)
        .args(extra)
        .args(["--explain", "--", "true"])
        .run();
    run.assert_code(0);
    run.stdout.clone()
}

fn row<'a>(explained: &'a str, name: &str) -> &'a str {
    explained
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .unwrap_or_else(|| panic!("no {name} row in:\n{explained}"))
}

#[test]
fn auto_takes_each_mesh_whose_injector_marked_the_pod_and_says_which_annotation() {
    let file = annotations(&[
        r#"linkerd.io/proxy-version="edge-26.8.3""#,
        r#"vault.hashicorp.com/agent-inject-status="injected""#,
    ]);
    let out = explained(&file, &[]);
    assert!(row(&out, "sidecar").contains("auto"), "{out}");
    assert!(
        row(&out, "linkerd").contains("in the pod (linkerd.io/proxy-version)"),
        "{out}"
    );
    assert!(
        row(&out, "vault").contains("in the pod (vault.hashicorp.com/agent-inject-status)"),
        "{out}"
    );
    assert!(row(&out, "istio").contains("skipped: Istio did not inject"), "{out}");
    assert!(row(&out, "dapr").contains("skipped"), "{out}");
    assert!(row(&out, "linkerd").ends_with("(pod annotations)"), "{out}");
}

#[test]
fn auto_without_an_annotations_file_is_istio_as_always() {
    let out = explained(&tempdir().join("none"), &[]);
    assert!(row(&out, "istio").contains("kept: no annotations file"), "{out}");
    for name in ["linkerd", "vault", "dapr"] {
        assert!(row(&out, name).contains("skipped: no annotations file"), "{out}");
    }
}

#[test]
fn auto_reads_native_switches_and_vaults_pre_populate_only() {
    let file = annotations(&[
        &status(NATIVE),
        r#"vault.hashicorp.com/agent-inject-status="injected""#,
        r#"vault.hashicorp.com/agent-pre-populate-only="true""#,
        r#"linkerd.io/proxy-version="edge-26.8.3""#,
        r#"linkerd.io/created-by="linkerd/proxy-injector edge-26.8.3""#,
        r#"config.linkerd.io/proxy-enable-native-sidecar="true""#,
        r#"config.alpha.linkerd.io/proxy-enable-native-sidecar="true""#,
    ]);
    let out = explained(&file, &[]);
    assert!(row(&out, "istio").contains("native: not quit"), "{out}");
    assert!(row(&out, "linkerd").contains("native: not quit"), "{out}");
    assert!(
        row(&out, "vault").contains("skipped: vault.hashicorp.com/agent-pre-populate-only"),
        "{out}"
    );
}

#[test]
fn dapr_is_found_by_its_label_when_labels_are_mounted() {
    let file = annotations(&[r#"dapr.io/enabled="true""#]);
    assert!(row(&explained(&file, &[]), "dapr").contains("in the pod"));
    std::fs::write(file.with_file_name("labels"), "app=\"train\"\n").unwrap();
    assert!(row(&explained(&file, &[]), "dapr").contains("skipped: Dapr did not inject"));
    std::fs::write(file.with_file_name("labels"), "dapr.io/sidecar-injected=\"true\"\n").unwrap();
    assert!(row(&explained(&file, &[]), "dapr").contains("in the pod (dapr.io/sidecar-injected)"));
}

/// meshwrap with the linkerd preset pointed at a fake, and these annotations
/// beside Linkerd's mark: (the run, the fake's polls and quits).
fn linkerd_with(lines: &[&str]) -> (Run, usize, usize) {
    let linkerd = FakeSidecar::ready();
    linkerd.set_paths("/ready", "/shutdown");
    let mut all = vec![r#"linkerd.io/proxy-version="stable-2.20.0""#];
    all.extend_from_slice(lines);
    let run = Meshwrap::new()
        .args([
            "--sidecar",
            &format!("linkerd=127.0.0.1:{}", linkerd.port()),
            "--pod-annotations",
        ])
        .arg(annotations(&all))
        .arg("true")
        .run();
    (run, linkerd.polls(), linkerd.quits())
}

#[test]
fn a_linkerd_pod_with_a_native_proxy_is_waited_for_but_not_quit() {
    // The keys every Linkerd version reads, as inject --native writes them,
    // on a pod injected by a Linkerd that reads them (2.20's edge-26.7.1).
    let (run, polls, quits) = linkerd_with(&[
        r#"linkerd.io/created-by="linkerd/proxy-injector edge-26.7.1""#,
        r#"config.linkerd.io/proxy-enable-native-sidecar="true""#,
        r#"config.beta.linkerd.io/proxy-enable-native-sidecar="true""#,
        r#"config.alpha.linkerd.io/proxy-enable-native-sidecar="true""#,
    ]);
    run.assert_code(0)
        .assert_stderr_has("not quitting the linkerd sidecar: it runs as a native sidecar");
    assert_eq!((polls, quits), (1, 0));
}

/// Native only where proven: the same keys on a pod whose injector reads
/// none of them (stable-2.14, before linkerd/linkerd2 #11465), or on a pod
/// that does not show its injector's version, are a regular proxy: quit.
#[test]
fn linkerd_native_keys_from_an_injector_that_does_not_read_them_still_quit() {
    for created_by in [
        Some(r#"linkerd.io/created-by="linkerd/proxy-injector stable-2.14.10""#),
        None,
    ] {
        let mut lines = vec![
            r#"config.linkerd.io/proxy-enable-native-sidecar="true""#,
            r#"config.beta.linkerd.io/proxy-enable-native-sidecar="true""#,
            r#"config.alpha.linkerd.io/proxy-enable-native-sidecar="true""#,
        ];
        lines.extend(created_by);
        let (run, polls, quits) = linkerd_with(&lines);
        run.assert_code(0)
            .assert_stderr_has("taking the linkerd sidecar as a regular container, and quitting it");
        assert_eq!((polls, quits), (1, 1), "{created_by:?}");
    }
}

/// Dapr writes no version on the pod, and Dapr up to 1.17 never reads
/// `dapr.io/enable-native-sidecar` (dapr/dapr #9450, v1.18.0): never proof.
#[test]
fn a_dapr_native_switch_is_never_proof_and_daprd_is_quit() {
    let file = annotations(&[r#"dapr.io/enable-native-sidecar="true""#, r#"dapr.io/enabled="true""#]);
    let out = explained(&file, &[]);
    assert!(
        row(&out, "dapr").contains("taken as a regular container and quit: dapr.io/enable-native-sidecar is set"),
        "{out}"
    );
}

#[test]
fn linkerd_stable_false_wins_over_alpha_true_and_the_proxy_is_quit_once() {
    // Linkerd 2.20 reads config.linkerd.io/ first: a regular proxy.
    let (run, polls, quits) = linkerd_with(&[
        r#"config.linkerd.io/proxy-enable-native-sidecar="false""#,
        r#"config.alpha.linkerd.io/proxy-enable-native-sidecar="true""#,
    ]);
    run.assert_code(0).assert_stderr_lacks("native sidecar");
    assert_eq!((polls, quits), (1, 1));
}

#[test]
fn linkerd_native_keys_that_not_every_version_reads_as_native_still_quit() {
    for lines in [
        // Unparsable: Linkerd keeps its cluster default, which no file shows.
        vec![
            r#"config.linkerd.io/proxy-enable-native-sidecar="yes""#,
            r#"config.alpha.linkerd.io/proxy-enable-native-sidecar="true""#,
        ],
        // Only 2.20 reads the stable key: 2.15 to 2.19 run a regular proxy.
        vec![r#"config.linkerd.io/proxy-enable-native-sidecar="true""#],
        // 2.19 reads beta over alpha.
        vec![
            r#"config.beta.linkerd.io/proxy-enable-native-sidecar="false""#,
            r#"config.alpha.linkerd.io/proxy-enable-native-sidecar="true""#,
        ],
    ] {
        let (run, polls, quits) = linkerd_with(&lines);
        run.assert_code(0);
        assert_eq!((polls, quits), (1, 1), "{lines:?}");
    }
}

#[test]
fn auto_follows_the_ports_the_pods_annotations_moved() {
    // Linkerd's config.linkerd.io/admin-port moves its readiness and its shutdown.
    let linkerd = FakeSidecar::ready();
    linkerd.set_paths("/ready", "/shutdown");
    let port = linkerd.port().to_string();
    let admin = format!("config.linkerd.io/admin-port=\"{port}\"");
    let file = annotations(&[r#"linkerd.io/proxy-version="stable-2.20.0""#, &admin]);
    Meshwrap::new()
        .args(["--sidecar", "auto", "--pod-annotations"])
        .arg(&file)
        .arg("true")
        .run()
        .assert_code(0)
        .assert_stderr_has("found the linkerd sidecar");
    assert_eq!((linkerd.polls(), linkerd.quits()), (1, 1));
}

/// The quit URLs of a run's plan: `--exec` refuses to run while a quit is
/// due, and names them.
fn planned_quits(file: &std::path::Path) -> String {
    // The refusal quits what it names (nothing listens here: one attempt
    // each, within the short budget); its own line lists the plan.
    let run = Meshwrap::new()
        .args(["--exec", "--quit-timeout", "1ms", "--pod-annotations"])
        .arg(file)
        .args(["--", "true"])
        .run();
    run.assert_code(125);
    let refusal = run
        .stderr
        .lines()
        .find(|l| l.contains("--exec: meshwrap would have to stay"));
    refusal
        .unwrap_or_else(|| panic!("no --exec refusal in:\n{}", run.stderr))
        .to_string()
}

#[test]
fn explain_agrees_with_the_run_when_the_annotations_file_is_unreadable() {
    let file = annotations(&[
        "this is not key=\"value\" format",
        r#"linkerd.io/proxy-version="edge-25.4.1""#,
    ]);
    let out = explained(&file, &[]);
    assert!(
        row(&out, "istio").contains("kept: the annotations file is unreadable"),
        "{out}"
    );
    for name in ["linkerd", "vault", "dapr"] {
        assert!(
            row(&out, name).contains("skipped: the annotations file is unreadable"),
            "{out}"
        );
    }
    let quits = planned_quits(&file);
    assert!(
        quits.contains(":15020/quitquitquit") && !quits.contains(":4191/"),
        "{quits}"
    );
}

#[test]
fn a_malformed_istio_status_leaves_the_other_meshes_to_auto() {
    let file = annotations(&[
        r#"linkerd.io/proxy-version="edge-25.4.1""#,
        r#"sidecar.istio.io/status="not json""#,
    ]);
    let out = explained(&file, &[]);
    assert!(
        row(&out, "istio").contains("in the pod (sidecar.istio.io/status)"),
        "{out}"
    );
    assert!(
        row(&out, "linkerd").contains("in the pod (linkerd.io/proxy-version)"),
        "{out}"
    );
    let quits = planned_quits(&file);
    assert!(
        quits.contains(":15020/quitquitquit") && quits.contains(":4191/shutdown"),
        "{quits}"
    );
}

#[test]
fn explain_names_the_key_that_decided_dapr() {
    let file = annotations(&[r#"dapr.io/enabled="yes""#]);
    assert!(row(&explained(&file, &[]), "dapr").contains("in the pod (dapr.io/enabled)"));
    std::fs::write(file.with_file_name("labels"), "dapr.io/sidecar-injected=\"true\"\n").unwrap();
    assert!(row(&explained(&file, &[]), "dapr").contains("in the pod (dapr.io/sidecar-injected)"));
}

#[test]
fn a_vault_pod_is_quit_only_where_vault_injected_a_sidecar() {
    for (lines, quits) in [
        (vec![r#"vault.hashicorp.com/agent-inject-status="injected""#], 1),
        (
            vec![
                r#"vault.hashicorp.com/agent-inject-status="injected""#,
                r#"vault.hashicorp.com/agent-pre-populate-only="true""#,
            ],
            0,
        ),
        (vec![], 0),
    ] {
        let vault = FakeSidecar::ready();
        vault.set_paths("/unused", "/agent/v1/quit");
        Meshwrap::new()
            .args([
                "--sidecar",
                &format!("vault=127.0.0.1:{}", vault.port()),
                "--pod-annotations",
            ])
            .arg(annotations(&lines))
            .arg("true")
            .run()
            .assert_code(0);
        assert_eq!(vault.quits(), quits, "{lines:?}");
    }
}
