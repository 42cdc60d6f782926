//! scuttle's environment variables, honoured when meshwrap's own are not
//! set, so `scuttle CMD` can become `meshwrap -- CMD` in a manifest.

use crate::support::*;

/// A fake Envoy admin API (`/ready`, `/quitquitquit`) and its base URL.
fn envoy() -> (FakeSidecar, String) {
    let envoy = FakeSidecar::ready();
    envoy.set_paths("/ready", "/quitquitquit");
    let api = format!("http://127.0.0.1:{}", envoy.port());
    (envoy, api)
}

fn base(fake: &FakeSidecar) -> String {
    format!("http://127.0.0.1:{}", fake.port())
}

#[test]
fn envoy_admin_api_and_istio_quit_api() {
    let (envoy, api) = envoy();
    envoy.set_ready(&[Reply::Body(503, "PRE_INITIALIZING"), Reply::Body(200, "LIVE")]);
    let istio = FakeSidecar::ready();
    Meshwrap::new()
        .env("ENVOY_ADMIN_API", &api)
        .env("ISTIO_QUIT_API", &base(&istio))
        .arg("true")
        .run()
        .assert_code(0);
    assert_eq!((envoy.polls(), envoy.quits(), istio.quits()), (2, 0, 1));
}

#[test]
fn envoy_admin_api_alone_quits_envoy() {
    let (envoy, api) = envoy();
    Meshwrap::new()
        .env("ENVOY_ADMIN_API", &api)
        .arg("true")
        .run()
        .assert_code(0);
    assert_eq!((envoy.polls(), envoy.quits()), (1, 1));
}

#[test]
fn without_envoy_admin_api_nothing_is_waited_for_as_in_scuttle() {
    let istio = FakeSidecar::ready();
    istio.set_ready(&[Reply::Status(503)]);
    Meshwrap::new()
        .env("ISTIO_QUIT_API", &base(&istio))
        .args(["sh", "-c", "echo started"])
        .run()
        .assert_code(0)
        .assert_stdout("started\n");
    assert_eq!((istio.polls(), istio.quits()), (0, 1));
}

#[test]
fn generic_quit_endpoints_are_all_posted() {
    let (a, b) = (FakeSidecar::ready(), FakeSidecar::ready());
    let endpoints = format!("{},{}", a.quit_url(), b.quit_url());
    Meshwrap::new()
        .env("GENERIC_QUIT_ENDPOINTS", &endpoints)
        .arg("true")
        .run()
        .assert_code(0);
    assert_eq!((a.quits(), b.quits()), (1, 1));
}

#[test]
fn never_kill_istio_and_on_failure() {
    let istio = FakeSidecar::ready();
    let quit_api = base(&istio);
    Meshwrap::new()
        .env("ISTIO_QUIT_API", &quit_api)
        .env("NEVER_KILL_ISTIO", "true")
        .arg("true")
        .run()
        .assert_code(0);
    assert_eq!(istio.quits(), 0);
    for (code, quits) in [(1, 0), (0, 1)] {
        Meshwrap::new()
            .env("ISTIO_QUIT_API", &quit_api)
            .env("NEVER_KILL_ISTIO_ON_FAILURE", "true")
            .args(["sh", "-c", &format!("exit {code}")])
            .run()
            .assert_code(code);
        assert_eq!(istio.quits(), quits, "after exit {code}");
    }
}

#[test]
fn start_without_envoy_skips_the_wait_but_still_quits() {
    let (envoy, api) = envoy();
    envoy.set_ready(&[Reply::Status(503)]);
    Meshwrap::new()
        .env("ENVOY_ADMIN_API", &api)
        .env("START_WITHOUT_ENVOY", "true")
        .env("QUIT_WITHOUT_ENVOY_TIMEOUT", "1ms")
        .arg("true")
        .run()
        .assert_code(0);
    assert_eq!((envoy.polls(), envoy.quits()), (0, 1));
}

#[test]
fn wait_for_envoy_timeout_runs_the_command_anyway() {
    let (envoy, api) = envoy();
    envoy.set_ready(&[Reply::Status(503)]);
    Meshwrap::new()
        .env("ENVOY_ADMIN_API", &api)
        .env("WAIT_FOR_ENVOY_TIMEOUT", "300ms")
        .args(["sh", "-c", "echo started"])
        .run()
        .assert_code(0)
        .assert_stdout("started\n");
}

#[test]
fn quit_without_envoy_timeout_fails_and_wins_over_wait_for_envoy_timeout() {
    let (envoy, api) = envoy();
    envoy.set_ready(&[Reply::Status(503)]);
    Meshwrap::new()
        .env("ENVOY_ADMIN_API", &api)
        .env("WAIT_FOR_ENVOY_TIMEOUT", "1m30s")
        .env("QUIT_WITHOUT_ENVOY_TIMEOUT", "300ms")
        .args(["sh", "-c", "echo started"])
        .run()
        .assert_code(125)
        .assert_stdout("");
}

#[test]
fn scuttle_logging_false_keeps_quiet() {
    let (_envoy, api) = envoy();
    let run = Meshwrap::new()
        .env("ENVOY_ADMIN_API", &api)
        .env("SCUTTLE_LOGGING", "false")
        .arg("true")
        .run();
    run.assert_code(0);
    run.check(run.stderr.is_empty(), "nothing logged below error");
}

#[test]
fn meshwraps_own_settings_win() {
    let istio = FakeSidecar::ready();
    Meshwrap::new()
        .env("ISTIO_QUIT_API", &base(&istio))
        .env("NEVER_KILL_ISTIO", "true")
        .env("MESHWRAP_QUIT_POLICY", "always")
        .arg("true")
        .run()
        .assert_code(0);
    assert_eq!(istio.quits(), 1);
}

#[test]
fn explain_names_the_scuttle_variables() {
    let run = Meshwrap::new()
        .env("ENVOY_ADMIN_API", "http://127.0.0.1:15000")
        .env("ISTIO_QUIT_API", "http://127.0.0.1:15020")
        .env("NEVER_KILL_ISTIO_ON_FAILURE", "true")
        .env("WAIT_FOR_ENVOY_TIMEOUT", "1m30s")
        .arg("--explain")
        .run();
    run.assert_code(0);
    for (name, value, var) in [
        ("ready-url", "http://127.0.0.1:15000/ready", "ENVOY_ADMIN_API"),
        ("quit-url", "http://127.0.0.1:15020/quitquitquit", "ISTIO_QUIT_API"),
        ("quit-policy", "on-success", "NEVER_KILL_ISTIO_ON_FAILURE"),
        ("timeout", "1m30s", "WAIT_FOR_ENVOY_TIMEOUT"),
        ("on-timeout", "run", "WAIT_FOR_ENVOY_TIMEOUT"),
    ] {
        let line = run
            .stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or("");
        run.check(
            line.contains(value) && line.ends_with(&format!("(scuttle env {var})")),
            &format!("{name} from {var}"),
        );
    }
}

#[test]
fn a_bad_scuttle_duration_is_bad_input() {
    let run = Meshwrap::new()
        .env("WAIT_FOR_ENVOY_TIMEOUT", "5x")
        .args(["sh", "-c", "echo ran"])
        .run();
    run.assert_code(125)
        .assert_stdout("")
        .assert_stderr_has("WAIT_FOR_ENVOY_TIMEOUT");
}
