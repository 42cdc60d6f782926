//! Sidecar presets: each one's endpoints, answered the way the real sidecar
//! answers, and their quirks (Linkerd's disabled shutdown endpoint, the Cloud
//! SQL proxy exiting before it answers a quit).

use crate::support::*;

/// The meshwrap flag that points `preset` at a fake's port.
fn at(preset: &str, fake: &FakeSidecar) -> String {
    format!("{preset}=127.0.0.1:{}", fake.port())
}

#[test]
fn istio_preset_uses_its_two_ports() {
    let (ready, quit) = FakeSidecar::pair(-1);
    ready.set_ready(&[Reply::Status(503), Reply::Status(200)]);
    Meshwrap::new()
        .args(["--sidecar", &at("istio", &ready), "true"])
        .run()
        .assert_code(0);
    assert_eq!((ready.polls(), quit.quits()), (2, 1));
}

#[test]
fn envoy_preset_waits_for_live() {
    let envoy = FakeSidecar::ready();
    envoy.set_paths("/ready", "/quitquitquit");
    envoy.set_ready(&[
        Reply::Body(503, "PRE_INITIALIZING"),
        Reply::Body(503, "INITIALIZING"),
        Reply::Body(200, "LIVE"),
    ]);
    envoy.set_quit(&[Reply::Body(200, "OK")]);
    Meshwrap::new()
        .args(["--sidecar", &at("envoy", &envoy), "true"])
        .run()
        .assert_code(0);
    assert_eq!((envoy.polls(), envoy.quits()), (3, 1));
}

#[test]
fn linkerd_preset_waits_and_shuts_down() {
    let linkerd = FakeSidecar::ready();
    linkerd.set_paths("/ready", "/shutdown");
    linkerd.set_ready(&[Reply::Body(503, "not ready"), Reply::Body(200, "ready")]);
    Meshwrap::new()
        .args(["--sidecar", &at("linkerd", &linkerd), "true"])
        .run()
        .assert_code(0);
    assert_eq!((linkerd.polls(), linkerd.quits()), (2, 1));
}

#[test]
fn linkerd_without_the_shutdown_endpoint_says_how_to_enable_it() {
    let linkerd = FakeSidecar::ready();
    linkerd.set_paths("/ready", "/shutdown");
    linkerd.set_quit(&[Reply::Body(404, "shutdown endpoint is not enabled")]);
    Meshwrap::new()
        .args(["--sidecar", &at("linkerd", &linkerd), "sh", "-c", "exit 5"])
        .run()
        .assert_code(5)
        .assert_stderr_has("shutdown endpoint is not enabled")
        .assert_stderr_has("config.linkerd.io/proxy-admin-shutdown: enabled");
    assert_eq!(linkerd.quits(), 1, "a 404 is not retried");
}

#[test]
fn cloudsql_closing_the_connection_as_it_exits_counts_as_quit() {
    let (ready, quit) = FakeSidecar::pair(1);
    ready.set_paths("/startup", "/quitquitquit");
    quit.set_quit(&[Reply::Close]);
    Meshwrap::new()
        .args(["--sidecar", &at("cloudsql", &ready), "true"])
        .run()
        .assert_code(0)
        .assert_stderr_has("sidecar quit (it closed the connection as it exited)");
    assert_eq!(quit.quits(), 1, "not retried");
    // The same answer from a plain quit URL that still listens: it did not
    // exit, so it did not take the quit, which is sent again.
    let plain = FakeSidecar::ready();
    plain.set_quit(&[Reply::Close]);
    let run = wrapped(&plain).args(["--quit-timeout", "300ms", "true"]).run();
    run.assert_code(0)
        .assert_stderr_has("closed the connection without answering and still listens");
    run.check(plain.quits() > 1, "sent again while it still listened");
}

/// #28 H3: a Cloud SQL proxy whose admin port is not at the preset's
/// distance from its HTTP port: `cloudsql=PLACE/QUIT_PLACE` (flag or
/// variable) waits at the first place and quits at the second, once.
#[test]
fn cloudsql_with_its_quit_placed_apart_waits_and_quits_where_told() {
    for by_variable in [false, true] {
        let (ready, quit) = (FakeSidecar::ready(), FakeSidecar::ready());
        for fake in [&ready, &quit] {
            fake.set_paths("/startup", "/quitquitquit");
        }
        let value = format!("cloudsql=127.0.0.1:{}/127.0.0.1:{}", ready.port(), quit.port());
        let mut meshwrap = Meshwrap::new();
        if by_variable {
            meshwrap.env("MESHWRAP_SIDECAR", &format!("none,{value}"));
        } else {
            meshwrap.args(["--sidecar", &value]);
        }
        meshwrap.arg("true").run().assert_code(0);
        assert_eq!(
            (ready.polls(), ready.quits(), quit.polls(), quit.quits()),
            (1, 0, 0, 1),
            "by variable: {by_variable}"
        );
    }
}

#[test]
fn a_quit_place_for_a_preset_without_a_quit_is_one_line() {
    let run = Meshwrap::new()
        .args(["--sidecar", "none=127.0.0.1/127.0.0.1:9", "true"])
        .run();
    run.assert_code(125)
        .assert_stderr_has("invalid --sidecar 'none=127.0.0.1/127.0.0.1:9': none has no quit endpoint to place");
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
}

#[test]
fn vault_preset_has_nothing_to_wait_for_and_quits() {
    let vault = FakeSidecar::ready();
    vault.set_paths("/unused", "/agent/v1/quit");
    Meshwrap::new()
        .args(["--sidecar", &at("vault", &vault), "sh", "-c", "echo started"])
        .run()
        .assert_code(0)
        .assert_stdout("started\n")
        .assert_stderr_has("no ready URL to wait for");
    assert_eq!((vault.polls(), vault.quits()), (0, 1));
}

#[test]
fn dapr_preset_takes_204_for_ready_and_shutdown() {
    let dapr = FakeSidecar::ready();
    dapr.set_paths("/v1.0/healthz/outbound", "/v1.0/shutdown");
    dapr.set_ready(&[Reply::Status(500), Reply::Body(204, "")]);
    dapr.set_quit(&[Reply::Body(204, "")]);
    Meshwrap::new()
        .args(["--sidecar", &at("dapr", &dapr), "true"])
        .run()
        .assert_code(0)
        .assert_stderr_has("status=204");
    assert_eq!((dapr.polls(), dapr.quits()), (2, 1));
}

#[test]
fn none_preset_waits_for_nothing_and_quits_nothing() {
    Meshwrap::new()
        .args(["--sidecar", "none", "sh", "-c", "echo started"])
        .run()
        .assert_code(0)
        .assert_stdout("started\n")
        .assert_stderr_has("no quit URL");
}

#[test]
fn two_presets_at_once_are_both_waited_for_and_quit() {
    let (istio_ready, istio_quit) = FakeSidecar::pair(-1);
    let (sql_ready, sql_quit) = FakeSidecar::pair(1);
    sql_ready.set_paths("/startup", "/quitquitquit");
    sql_ready.set_ready(&[Reply::Status(503), Reply::Status(200)]);
    let sidecars = format!("{},{}", at("istio", &istio_ready), at("cloudsql", &sql_ready));
    Meshwrap::new()
        .env("MESHWRAP_SIDECAR", &sidecars)
        .arg("true")
        .run()
        .assert_code(0);
    assert_eq!((istio_ready.polls(), sql_ready.polls()), (1, 2));
    assert_eq!((istio_quit.quits(), sql_quit.quits()), (1, 1));
}

#[test]
fn explicit_urls_add_to_the_presets() {
    let (ready, quit) = FakeSidecar::pair(-1);
    let extra = FakeSidecar::ready();
    Meshwrap::new()
        .args([
            "--sidecar",
            &at("istio", &ready),
            "--quit-url",
            &extra.quit_url(),
            "true",
        ])
        .run()
        .assert_code(0);
    assert_eq!((quit.quits(), extra.quits(), extra.polls()), (1, 1, 0));
}

#[test]
fn explain_lists_what_each_preset_contributed() {
    let run = Meshwrap::new()
        .args(["--sidecar", "linkerd", "--sidecar", "cloudsql=10.0.0.9", "--explain"])
        .run();
    run.assert_code(0);
    for line in [
        "http://127.0.0.1:4191/ready",
        "http://127.0.0.1:4191/shutdown",
        "http://10.0.0.9:9090/startup",
        "http://10.0.0.9:9091/quitquitquit",
    ] {
        let shown = run.stdout.lines().find(|l| l.contains(line));
        run.check(
            shown.is_some_and(|l| l.contains("(preset ")),
            &format!("{line} from its preset"),
        );
    }
    run.check(
        !run.stdout.contains("15021"),
        "Istio's defaults are not used with --sidecar",
    );
}

#[test]
fn an_unknown_preset_is_bad_input() {
    for (args, env, name) in [
        (vec!["--sidecar", "consulx"], None, "--sidecar"),
        (vec![], Some("istio,,linkerd"), "MESHWRAP_SIDECAR"),
    ] {
        let mut mw = Meshwrap::new();
        if let Some(value) = env {
            mw.env("MESHWRAP_SIDECAR", value);
        }
        let run = mw.args(args).args(["sh", "-c", "echo ran"]).run();
        run.assert_code(125).assert_stdout("").assert_stderr_has(name);
        run.check(run.stderr.lines().count() == 1, "one line");
    }
}

#[test]
fn vault_without_its_quit_endpoint_names_the_annotation_that_enables_it() {
    let vault = FakeSidecar::ready();
    vault.set_paths("/unused", "/agent/v1/quit");
    vault.set_quit(&[Reply::Body(404, "")]);
    Meshwrap::new()
        .args(["--sidecar", &at("vault", &vault), "sh", "-c", "exit 3"])
        .run()
        .assert_code(3)
        .assert_stderr_has("vault.hashicorp.com/agent-enable-quit: \"true\"");
    assert_eq!(vault.quits(), 1, "a 404 is not retried");
}

#[test]
fn no_quit_on_the_exit_codes_the_kubelet_restarts_on() {
    for (code, quits) in [(42, 0), (0, 1), (43, 0), (44, 1)] {
        let sidecar = FakeSidecar::ready();
        let run = wrapped(&sidecar)
            .args(["--no-quit-on-exit", "42,43", "sh", "-c", &format!("exit {code}")])
            .run();
        run.assert_code(code);
        assert_eq!(sidecar.quits(), quits, "exit {code}");
        if quits == 0 {
            run.assert_stderr_has("--no-quit-on-exit");
        }
    }
    // The variable, with a range.
    let sidecar = FakeSidecar::ready();
    wrapped(&sidecar)
        .env("MESHWRAP_NO_QUIT_ON_EXIT", "2-255")
        .args(["sh", "-c", "exit 7"])
        .run()
        .assert_code(7);
    assert_eq!(sidecar.quits(), 0);
}

/// consul-k8s #1791: Envoy's own quit at consul-dataplane's admin (19000)
/// makes the dataplane's liveness probe restart it; a quit URL pointed
/// there is used as given, with a warning that says why and where to quit.
#[test]
fn a_quit_url_at_consuls_envoy_admin_is_warned_about() {
    let run = Meshwrap::new()
        .args(["--sidecar", "none", "--quit-url", "http://127.0.0.1:19000/quitquitquit"])
        .args(["sh", "-c", "echo ran"])
        .run();
    run.assert_code(0)
        .assert_stdout("ran\n")
        .assert_stderr_has("warn: the quit http://127.0.0.1:19000/quitquitquit is consul's Envoy admin")
        .assert_stderr_has("consul-k8s #1791")
        .assert_stderr_has("127.0.0.1:20600/graceful_shutdown");
    let elsewhere = Meshwrap::new()
        .args(["--sidecar", "none", "--quit-url", "http://127.0.0.1:15000/quitquitquit"])
        .args(["sh", "-c", "echo ran"])
        .run();
    elsewhere.assert_code(0).assert_stderr_lacks("Envoy admin");
}
