//! An Istio-shaped pod around the real Envoy (support/istio.rs): Istio's
//! capture, Envoy as uid 1337 with a bootstrap modelled on Istio's, an
//! upstream whose cluster warms late, and a pilot-agent stand-in on 15020.
//! meshwrap's istio preset waits for 15021's /healthz/ready (through Envoy
//! to the agent), the command's first request goes through the capture and
//! Envoy to the upstream, and the quit on 15020 ends the proxy container in
//! either of Istio's ways. They need root, ip, iptables-restore, setpriv,
//! python3 and Envoy; without them each says it was skipped and why (in CI,
//! where POD_TESTS_REQUIRED is set, it fails instead).

use std::time::{Duration, Instant};

use crate::support::Stream;
use crate::support::istio::{self, DATASET_BYTES, IstioPod};
use crate::support::pod::{self, Phase, STUCK_AFTER};

/// The `Uid:` line of Envoy's /proc status, once setpriv (which sets the
/// ids, then execs Envoy in the same process) has become Envoy. Envoy lives
/// at least until it is LIVE, a second later, so this is bounded.
fn envoy_uid(pid: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() != "envoy") {
        assert!(Instant::now() < deadline, "pid {pid} never became Envoy");
        std::thread::sleep(Duration::from_millis(5));
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .unwrap_or_default()
        .to_string()
}

/// The pod's run: the download refused before the proxy starts, then the
/// wrapped download through it; returns the proxy container, quit.
fn wrapped_download_succeeds(pod: &IstioPod, mode: &str) -> crate::support::Running {
    // Before Envoy starts, the capture leads the app's connection to 15001,
    // where nothing listens yet.
    let early = pod.app(None).finish();
    early.assert_code(1);
    early.check(
        early.stdout.contains("app: fetch failed: Connection refused"),
        "refused before the proxy starts",
    );
    let mut app = pod.app(Some(&["--log-level", "debug"]));
    app.wait_stderr("sidecar not ready yet");
    let mut proxy = pod.proxy(mode);
    let started = proxy.wait_for(Stream::Stdout, "agent: started Envoy, pid ", false);
    let uid = envoy_uid(started.rsplit(' ').next().unwrap());
    assert!(
        uid.starts_with("Uid:") && uid.split_whitespace().skip(1).all(|id| id == "1337"),
        "Envoy runs as uid 1337: {uid}"
    );
    let app = app.finish();
    app.assert_code(0).assert_stderr_has("sidecar quit");
    app.check(
        app.stdout.contains(&format!("app: fetched {DATASET_BYTES} bytes")),
        "the first request went through the capture and Envoy to the upstream",
    );
    proxy.wait_stdout("agent: quit received");
    proxy
}

#[test]
fn istio_1_the_first_request_goes_through_envoy_and_quit_kills_it_at_once_as_in_1_26() {
    if istio::skip("istio_1") {
        return;
    }
    let mut pod = IstioPod::new();
    let mut proxy = wrapped_download_succeeds(&pod, "1.26");
    proxy.wait_stdout("agent: quit: Envoy killed at once (Istio 1.26+)");
    assert_eq!(pod::phase_with(0, &mut [&mut proxy]), Phase::Succeeded);
    let proxy = proxy.finish();
    proxy.check(!proxy.stdout.contains("quit received again"), "one quit");
    pod.remote.wait_stdout(&format!("remote: served {DATASET_BYTES} bytes"));
    pod.dns.wait_stdout("dns: answered upstream.mesh.test type 1");
}

#[test]
fn istio_2_as_in_1_24_and_1_25_the_quit_drains_5_s_and_the_pod_completes_after() {
    if istio::skip("istio_2") {
        return;
    }
    let pod = IstioPod::new();
    let mut proxy = wrapped_download_succeeds(&pod, "1.25");
    proxy.wait_stdout("agent: quit: draining for 5s (Istio 1.24-1.25)");
    let draining = Instant::now();
    assert!(
        proxy.exits_within(Duration::from_secs(5) + STUCK_AFTER),
        "the proxy container still runs after its drain"
    );
    let drained = draining.elapsed();
    assert!(
        drained >= Duration::from_millis(4500),
        "exited {drained:?} into the drain"
    );
    let proxy = proxy.finish();
    proxy.check(!proxy.stdout.contains("quit received again"), "one quit");
    proxy.check(
        proxy.stdout.contains("agent: quit: drain over, Envoy killed"),
        "drained",
    );
}
