//! A stand-in for consul-dataplane's lifecycle server, beside a real Envoy
//! (support/envoy.rs) for tests/consul.rs. It is modelled on
//! hashicorp/consul-dataplane v2.0.1 `pkg/consuldp/lifecycle.go` and
//! `pkg/envoy/proxy.go`, and configured from the pod's annotations the way
//! hashicorp/consul-k8s v2.0.3 translates them into the dataplane's flags
//! (`control-plane/connect-inject/webhook/consul_dataplane_sidecar.go`,
//! `lifecycle/lifecycle_configuration.go`, the Helm chart's defaults):
//!
//! - it listens on 127.0.0.1:`-graceful-port` (20600 unless annotated), which
//!   consul-k8s passes whether or not the lifecycle is on;
//! - the shutdown path, any method: 200 with an empty body at once, then in
//!   the background: with drain on, `POST /drain_listeners?inboundonly&graceful&skip_exit`
//!   to Envoy's admin; the rest of the shutdown grace period (counted from
//!   the request); `POST /quitquitquit` to Envoy's admin;
//! - the startup path: 200 once Envoy's `/ready` says so or the startup grace
//!   period ends, whichever comes first, and at once when that period is 0
//!   (the chart's default): never a readiness signal;
//! - with the lifecycle off, the dataplane's own defaults: no drain, no
//!   grace period, `/graceful_shutdown` and `/graceful_startup`.
//!
//! It exits once Envoy accepted its quit, as consul-dataplane exits with
//! its Envoy. Every request it gets is one line in its log file (`METHOD PATH`), which
//! the tests read after Envoy exited.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::command::Running;
use super::pod::Node;

/// The dataplane's lifecycle settings, as consul-k8s derives them from a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lifecycle {
    pub port: u16,
    pub shutdown_path: String,
    pub startup_path: String,
    pub grace_seconds: u64,
    pub drain: bool,
    pub startup_grace_seconds: u64,
}

const PREFIX: &str = "consul.hashicorp.com/";

impl Lifecycle {
    /// What consul-k8s (Helm chart defaults) would pass for these annotations.
    pub fn of(annotations: &HashMap<String, String>) -> Lifecycle {
        let get = |key: &str| annotations.get(&format!("{PREFIX}{key}")).filter(|v| !v.is_empty());
        let boolean = |key: &str, default: bool| get(key).map_or(default, |v| go_bool(v).unwrap_or(default));
        let number = |key: &str, default: u64| get(key).map_or(default, |v| v.parse().unwrap());
        let port = get("sidecar-proxy-lifecycle-graceful-port").map_or(20600, |v| v.parse().unwrap());
        if !boolean("enable-sidecar-proxy-lifecycle", true) {
            return Lifecycle {
                port,
                shutdown_path: "/graceful_shutdown".into(),
                startup_path: "/graceful_startup".into(),
                grace_seconds: 0,
                drain: false,
                startup_grace_seconds: 0,
            };
        }
        let path = |key: &str, default: &str| get(key).map_or(default.to_string(), |v| v.clone());
        Lifecycle {
            port,
            shutdown_path: path("sidecar-proxy-lifecycle-graceful-shutdown-path", "/graceful_shutdown"),
            startup_path: path("sidecar-proxy-lifecycle-graceful-startup-path", "/graceful_startup"),
            grace_seconds: number("sidecar-proxy-lifecycle-shutdown-grace-period-seconds", 30),
            drain: boolean("enable-sidecar-proxy-lifecycle-shutdown-drain-listeners", true),
            startup_grace_seconds: number("sidecar-proxy-lifecycle-startup-grace-period-seconds", 0),
        }
    }

    /// The same, read from a Downward API annotations file (`key="value"`).
    pub fn of_file(path: &Path) -> Lifecycle {
        let text = std::fs::read_to_string(path).unwrap();
        let map = text
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.trim_matches('"').to_string()))
            .collect();
        Lifecycle::of(&map)
    }
}

fn go_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// The running stand-in and its request log.
pub struct Dataplane {
    pub process: Running,
    log: PathBuf,
}

impl Dataplane {
    /// Starts the stand-in in `ns` beside Envoy's admin at `admin_port`, and
    /// returns once it listens.
    pub fn start(node: &Node, ns: &str, lifecycle: &Lifecycle, admin_port: u16) -> Dataplane {
        let dir = node.empty_dir("consul-dataplane");
        let script = dir.join("lifecycle.py");
        std::fs::write(&script, SCRIPT).unwrap();
        let log = dir.join("requests.log");
        let args = [
            "python3".to_string(),
            script.to_string_lossy().into_owned(),
            lifecycle.port.to_string(),
            admin_port.to_string(),
            lifecycle.shutdown_path.clone(),
            lifecycle.startup_path.clone(),
            lifecycle.grace_seconds.to_string(),
            u8::from(lifecycle.drain).to_string(),
            lifecycle.startup_grace_seconds.to_string(),
            log.to_string_lossy().into_owned(),
        ];
        let mut process = node.exec(ns, &args.iter().map(String::as_str).collect::<Vec<_>>());
        process.wait_stdout("lifecycle: listening");
        Dataplane { process, log }
    }

    /// The requests it got, as `METHOD PATH`.
    pub fn requests(&self) -> Vec<String> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines().map(str::to_string).collect()
    }
}

/// The stand-in itself (Python 3, which the Envoy wheel needs anyway).
const SCRIPT: &str = r#"
import http.client, http.server, os, sys, threading, time, urllib.parse
port, admin, shutdown_path, startup_path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
grace, drain, startup_grace, log = float(sys.argv[5]), sys.argv[6] == "1", float(sys.argv[7]), sys.argv[8]
lock = threading.Lock()

def record(line):
    with lock, open(log, "a") as f:
        f.write(line + "\n")

def envoy(method, path):
    try:
        c = http.client.HTTPConnection("127.0.0.1", admin, timeout=2)
        c.request(method, path)
        status = c.getresponse().status
        c.close()
        return status
    except OSError as e:
        record("envoy error " + str(e))
        return None

def graceful_shutdown(started):
    if drain:
        envoy("POST", "/drain_listeners?inboundonly&graceful&skip_exit")
    time.sleep(max(0.0, started + grace - time.monotonic()))
    status = envoy("POST", "/quitquitquit")
    record("sent /quitquitquit: %s" % status)
    if status == 200:
        # consul-dataplane exits when its Envoy does.
        os._exit(0)

def graceful_startup():
    deadline = time.monotonic() + startup_grace
    while startup_grace > 0 and time.monotonic() < deadline:
        if envoy("GET", "/ready") == 200:
            return
        time.sleep(0.05)

class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *args):
        pass
    def any(self):
        record(self.command + " " + self.path)
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        path = urllib.parse.urlsplit(self.path).path
        if path == shutdown_path:
            threading.Thread(target=graceful_shutdown, args=(time.monotonic(),)).start()
            status = 200
        elif path == startup_path:
            graceful_startup()
            status = 200
        else:
            status = 404
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()
    do_GET = do_POST = do_PUT = do_DELETE = any

server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
print("lifecycle: listening", flush=True)
server.serve_forever()
"#;
