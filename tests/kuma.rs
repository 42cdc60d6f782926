//! Kuma and Kong Mesh (#39): meshwrap waits on kuma-dp's readiness reporter
//! and never quits it, since nothing in the pod can (from 2.14 Envoy's
//! admin is on a Unix socket, its TCP port needs the control plane's
//! certificate): the control plane quits a Job's regular sidecar once every
//! other container has ended, the kubelet a native one. The Job is the one
//! `kubectl meshwrap inject` wrote (kubectl-meshwrap/tests/golden/kuma-job.out.yaml),
//! with kuma's injector mark added. A stand-in reporter modelled on
//! kumahq/kuma v2.14.3 `app/kuma-dp/pkg/dataplane/readiness/component.go`
//! answers `/ready` on 9902: 503 `NOT_READY` until it is ready, then 200
//! `READY`; it logs every request it gets. Needs root and ip (a network
//! namespace of the test's own for the fixed port); without them the test
//! says it was skipped (in CI, where POD_TESTS_REQUIRED is set, it fails).

use crate::pod::{MeshedPod, Wrapped};
use crate::support::pod::{self, Node};
use crate::support::*;

const GOLDEN: &str = "kubectl-meshwrap/tests/golden/kuma-job.out.yaml";
/// What kuma's injector adds (injector.go NewAnnotations, v2.14.3).
const MARK: &str = r#"kuma.io/sidecar-injected="true""#;

/// The reporter: NOT_READY for `ready_after` seconds, then READY.
const REPORTER: &str = r#"
import http.server, sys, time
ready_at, log = time.monotonic() + float(sys.argv[1]), sys.argv[2]
class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *args):
        pass
    def any(self):
        ready = time.monotonic() >= ready_at
        state, status = (b"READY", 200) if ready else (b"NOT_READY", 503)
        if self.path != "/ready":
            state, status = b"404 page not found", 404
        with open(log, "a") as f:
            f.write("%s %s %d\n" % (self.command, self.path, status))
        self.send_response(status)
        self.send_header("content-type", "text/plain")
        self.send_header("content-length", str(len(state)))
        self.end_headers()
        self.wfile.write(state)
    do_GET = do_POST = do_PUT = any
server = http.server.ThreadingHTTPServer(("0.0.0.0", 9902), Handler)
print("reporter: listening", flush=True)
server.serve_forever()
"#;

#[test]
fn kuma_1_an_injected_job_waits_for_the_reporter_and_never_quits_kuma_dp() {
    if pod::skip("kuma_1") {
        return;
    }
    let mut node = Node::new();
    let ns = node.namespace("kuma");
    let pod = MeshedPod::bare(node, ns);
    let job = Wrapped::load(&pod, GOLDEN, Some("kuma-report"), &[MARK]);
    job.install();
    let dir = pod.node.empty_dir("kuma-sidecar");
    std::fs::write(dir.join("reporter.py"), REPORTER).unwrap();
    let log = dir.join("requests.log");
    let script = dir.join("reporter.py").to_string_lossy().into_owned();
    let mut reporter = pod
        .node
        .exec(&pod.ns, &["python3", &script, "0.5", &log.to_string_lossy()]);
    reporter.wait_stdout("reporter: listening");
    let app = job.app(&pod, "report", &["sh", "-c", "echo app: ran"]).finish();
    app.assert_code(0)
        .assert_stderr_has("found the kuma sidecar (kuma.io/sidecar-injected)")
        .assert_stderr_has("no quit URL; no sidecar to quit");
    assert!(app.stdout.contains("app: ran"), "{}", app.stdout);
    let requests = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = requests.lines().collect();
    assert!(lines.len() >= 2 && lines[0] == "GET /ready 503", "{lines:?}");
    assert_eq!(lines.last(), Some(&"GET /ready 200"), "{lines:?}");
    assert!(
        lines.iter().all(|l| l.starts_with("GET /ready ")),
        "only polls: {lines:?}"
    );
    // kuma-dp runs on: the control plane (or the kubelet) stops it.
    assert!(!reporter.exits_within(std::time::Duration::from_millis(200)));
}

/// `--explain` says why Kuma has no quit.
#[test]
fn kuma_2_explain_says_the_control_plane_or_the_kubelet_stops_the_proxy() {
    let run = Meshwrap::new().args(["--sidecar", "kuma", "--explain"]).run();
    run.assert_code(0);
    let quit = run.stdout.lines().find(|l| l.starts_with("quit-url"));
    run.check(
        quit.is_some_and(|l| {
            l.contains("none: nothing in the pod can quit kuma-dp")
                && l.contains("the control plane quits a Job's regular sidecar")
                && l.contains("(preset kuma)")
        }),
        "the quit row says who stops kuma-dp",
    );
    run.check(run.stdout.contains("http://127.0.0.1:9902/ready"), "Kuma's readiness");
}
