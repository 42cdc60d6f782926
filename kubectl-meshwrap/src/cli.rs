//! The flags (each also an environment variable), checked and resolved into
//! plain requests before anything is read or written. A bad value is one
//! line naming the flag and what it accepts.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::transform::{Delivery, Options};
use crate::webhook::apiserver::Endpoint;
use crate::workloads::TemplatePath;

#[derive(Parser, Debug)]
#[command(
    name = "kubectl-meshwrap",
    version,
    about = "Put meshwrap into pod templates: Jobs, Kubeflow jobs, Argo workflows and more",
    long_about = "Put meshwrap into pod templates, so a batch pod in a service mesh waits for its sidecar, \
                  quits it when the command ends, and completes.\n\nWith no arguments and a ResourceList on \
                  stdin, runs as a KRM function (kustomize, kpt)."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Rewrite manifests so their pods run under meshwrap (stdout, or --in-place)
    Inject(Inject),
    /// Run as a KRM function: a ResourceList on stdin, the result on stdout
    Fn(Shared),
    /// Serve the mutating admission webhook that wraps labelled pods (HTTPS)
    Webhook(Box<Webhook>),
    /// Print the manifests that install the webhook (kubectl apply -f -)
    Manifests(Manifests),
}

#[derive(Args, Debug)]
pub struct Inject {
    /// A file, a folder (walked for .yaml, .yml and .json) or - for stdin; repeatable (default: stdin)
    #[arg(
        short = 'f',
        long = "filename",
        value_name = "PATH",
        env = "MESHWRAP_FILENAME",
        value_delimiter = ','
    )]
    pub files: Vec<String>,
    /// Rewrite the files themselves (atomically) instead of printing
    #[arg(long = "in-place", short = 'i', env = "MESHWRAP_IN_PLACE")]
    pub in_place: bool,
    /// Print what --in-place would change, as a unified diff (git apply, patch -p1), and change nothing
    #[arg(long = "diff", env = "MESHWRAP_DIFF", conflicts_with = "in_place")]
    pub diff: bool,
    /// Write what could be wrapped even when a pod template was skipped (by default a skip fails the run and
    /// nothing is written, so a job is never applied half-wrapped)
    #[arg(long = "allow-skip", env = "MESHWRAP_ALLOW_SKIP", conflicts_with = "strict")]
    pub allow_skip: bool,
    #[command(flatten)]
    pub shared: Shared,
}

#[derive(Args, Debug)]
pub struct Shared {
    #[command(flatten)]
    pub pod: PodOptions,
    /// Teach a kind: KIND=PATH to its pod templates, e.g. MyJob=spec.workers[].template
    #[arg(
        long = "template-path",
        value_name = "KIND=PATH",
        env = "MESHWRAP_TEMPLATE_PATH",
        value_delimiter = ','
    )]
    pub template_paths: Vec<TemplatePath>,
    /// Fail (exit 1) when any workload is skipped: inject's default (kept for scripts); the KRM function's opt-in
    #[arg(long, env = "MESHWRAP_STRICT")]
    pub strict: bool,
}

/// What goes into a wrapped pod; every front end takes these.
#[derive(Args, Debug, Clone)]
pub struct PodOptions {
    /// The meshwrap image (required by inject; the meshwrap.io/image annotation overrides it per pod)
    #[arg(long, value_name = "IMAGE", env = "MESHWRAP_IMAGE", value_parser = image)]
    pub image: Option<String>,
    /// As meshwrap's --sidecar: auto, a preset (istio, linkerd, ...), none, NAME=HOST:PORT or
    /// NAME=HOST:PORT/HOST:PORT; repeatable, and the variable takes a comma-separated list
    #[arg(long, value_name = "NAME[=HOST[:PORT]]", env = "MESHWRAP_SIDECAR", value_parser = sidecar,
          value_delimiter = ',', action = clap::ArgAction::Append)]
    pub sidecar: Vec<String>,
    /// As meshwrap's --timeout: how long to wait for the sidecar (default: meshwrap's, 10m)
    #[arg(long, value_name = "DURATION", env = "MESHWRAP_TIMEOUT", value_parser = duration)]
    pub timeout: Option<String>,
    /// As meshwrap's --quit-policy (default: from the pod's restart policy)
    #[arg(long = "quit-policy", value_name = "POLICY", env = "MESHWRAP_QUIT_POLICY",
          value_parser = ["always", "on-success", "never"])]
    pub quit_policy: Option<String>,
    /// How meshwrap gets into the pod: an init container copies it, or the image is mounted as a volume
    #[arg(long, value_name = "HOW", env = "MESHWRAP_DELIVERY", default_value = "init-container",
          value_parser = ["init-container", "image-volume"])]
    pub delivery: String,
    /// The meshes the namespace injects, which a manifest cannot show: istio, linkerd, vault, dapr,
    /// consul, kuma, cloudsql, none (only what the pod template shows), or auto (not known: a pod that
    /// shows no mesh also gets the switches of each mesh a namespace can turn on). Comma-separated
    #[arg(long, value_name = "MESH", env = "MESHWRAP_MESH", default_value = "auto", value_delimiter = ',',
          value_parser = mesh)]
    pub mesh: Vec<String>,
    /// Make each mesh's proxy a native sidecar (its per-pod switch) instead of wrapping: true, prefer
    /// (wrap where a mesh has none, as Vault), or false; the meshwrap.io/native annotation overrides it
    #[arg(long, value_name = "WHEN", env = "MESHWRAP_NATIVE", default_value = "false", num_args = 0..=1,
          default_missing_value = "true", value_parser = ["true", "prefer", "false"])]
    pub native: String,
    /// Which workloads to wrap: batch (Jobs, CronJobs, the operators' kinds, Argo, bare pods, and the
    /// pods they own), or all (Deployments, StatefulSets, DaemonSets, ReplicaSets,
    /// ReplicationControllers, RayClusters and RayServices too, and their pods)
    #[arg(long, value_name = "WHICH", env = "MESHWRAP_WORKLOADS", default_value = "batch",
          value_parser = ["batch", "all"])]
    pub workloads: String,
    /// The UID meshwrap's containers run as, or none to leave it to the platform (OpenShift's restricted
    /// SCC assigns one from the namespace's range); the meshwrap.io/run-as-user annotation overrides it
    #[arg(long = "run-as-user", value_name = "UID|none", env = "MESHWRAP_RUN_AS_USER", default_value = "65532",
          value_parser = run_as_user)]
    pub run_as_user: String,
    /// The resources of meshwrap's containers, KIND.RESOURCE=QUANTITY comma-separated, or none (a
    /// LimitRange's); the meshwrap.io/resources annotation overrides it
    #[arg(long, value_name = "SPEC|none", env = "MESHWRAP_RESOURCES", default_value = crate::transform::DEFAULT_RESOURCES,
          value_parser = resources)]
    pub resources: String,
}

fn run_as_user(s: &str) -> Result<String, String> {
    crate::transform::parse_run_as_user(s).map(|_| s.to_string())
}

fn resources(s: &str) -> Result<String, String> {
    crate::transform::parse_resources(s).map(|_| s.to_string())
}

#[derive(Args, Debug)]
pub struct Webhook {
    /// The serving certificate (PEM, chain first); re-read when it changes
    #[arg(long = "tls-cert", value_name = "FILE", env = "MESHWRAP_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// Its private key (PEM); re-read when it changes
    #[arg(long = "tls-key", value_name = "FILE", env = "MESHWRAP_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
    /// Where to listen
    #[arg(
        long,
        value_name = "ADDR:PORT",
        env = "MESHWRAP_LISTEN",
        default_value = "0.0.0.0:9443"
    )]
    pub listen: SocketAddr,
    /// The webhook's own namespace, never wrapped (kube-system never is either)
    #[arg(long, value_name = "NAME", env = "MESHWRAP_NAMESPACE", default_value = NAMESPACE)]
    pub namespace: String,
    /// How long a client may take over its TLS handshake, or a request from its first byte to its answer's write
    #[arg(long = "client-timeout", value_name = "DURATION", env = "MESHWRAP_CLIENT_TIMEOUT",
          default_value = "10s", value_parser = positive_duration)]
    pub client_timeout: Duration,
    /// How long a keep-alive connection may wait for its next request (above Go's 90s, so the API server closes first)
    #[arg(long = "idle-timeout", value_name = "DURATION", env = "MESHWRAP_IDLE_TIMEOUT",
          default_value = "120s", value_parser = positive_duration)]
    pub idle_timeout: Duration,
    /// Connections open at once; above it a new one is closed at accept (about 40 KB each)
    #[arg(long = "max-connections", value_name = "N", env = "MESHWRAP_MAX_CONNECTIONS",
          default_value = "512", value_parser = at_least_one)]
    pub max_connections: usize,
    /// TLS handshakes under way at once; above it a new connection waits for a slot (within --client-timeout)
    #[arg(long = "max-handshakes", value_name = "N", env = "MESHWRAP_MAX_HANDSHAKES",
          default_value = "64", value_parser = at_least_one)]
    pub max_handshakes: usize,
    /// The most one source address (a whole IPv6 address) may hold of --max-connections; at it, its own oldest slow or idle connection gives way (handshakes are not capped per address)
    #[arg(long = "max-source-share", value_name = "PERCENT", env = "MESHWRAP_MAX_SOURCE_SHARE",
          default_value = "25%", value_parser = percent)]
    pub max_source_share: u8,
    /// After SIGTERM, how long to keep serving (not ready) while the Service's endpoints update
    #[arg(long = "shutdown-delay", value_name = "DURATION", env = "MESHWRAP_SHUTDOWN_DELAY",
          default_value = "5s", value_parser = any_duration)]
    pub shutdown_delay: Duration,
    /// Then how long requests in flight may take to finish
    #[arg(long = "drain-timeout", value_name = "DURATION", env = "MESHWRAP_DRAIN_TIMEOUT",
          default_value = "20s", value_parser = any_duration)]
    pub drain_timeout: Duration,
    #[command(flatten)]
    pub events: EventOptions,
    #[command(flatten)]
    pub pod: PodOptions,
}

/// The webhook's Kubernetes Events (see `webhook::events`).
#[derive(Args, Debug)]
pub struct EventOptions {
    /// Post a Kubernetes Event on each wrapped or skipped pod's owner (or its namespace); off outside a cluster
    #[arg(long, value_name = "on|off", env = "MESHWRAP_EVENTS", default_value = "on",
          value_parser = ["on", "off"])]
    pub events: String,
    /// Read each pod's Namespace for the meshes its labels and annotations turn on; off, or unreadable within --namespace-timeout: every mesh a namespace may turn on gets its switches, as offline inject (off outside a cluster)
    #[arg(long, value_name = "on|off", env = "MESHWRAP_NAMESPACES", default_value = "on",
          value_parser = ["on", "off"])]
    pub namespaces: String,
    /// How long a pod's decision may wait for its Namespace's read
    #[arg(long = "namespace-timeout", value_name = "DURATION", env = "MESHWRAP_NAMESPACE_TIMEOUT",
          default_value = "1s", value_parser = positive_duration)]
    pub namespace_timeout: Duration,
    /// The API server for events and namespaces (default: in a pod, https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT)
    #[arg(long = "api-server", value_name = "URL", env = "MESHWRAP_API_SERVER", value_parser = api_server)]
    pub api_server: Option<Endpoint>,
    /// The bearer token, read again for every request (projected tokens rotate)
    #[arg(
        long = "api-token",
        value_name = "FILE",
        env = "MESHWRAP_API_TOKEN",
        default_value = "/var/run/secrets/kubernetes.io/serviceaccount/token"
    )]
    pub api_token: PathBuf,
    /// The CA bundle that signs the API server's certificate
    #[arg(
        long = "api-ca",
        value_name = "FILE",
        env = "MESHWRAP_API_CA",
        default_value = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
    )]
    pub api_ca: PathBuf,
    /// Events waiting for the API server; above it one is dropped and counted
    #[arg(long = "events-queue", value_name = "N", env = "MESHWRAP_EVENTS_QUEUE",
          default_value = "1000", value_parser = at_least_one)]
    pub events_queue: usize,
    /// Event series remembered (per owner and reason); above it the least recently seen is forgotten
    #[arg(long = "events-cache", value_name = "N", env = "MESHWRAP_EVENTS_CACHE",
          default_value = "4096", value_parser = at_least_one)]
    pub events_cache: usize,
    /// The least time between two writes of one series' count
    #[arg(long = "events-interval", value_name = "DURATION", env = "MESHWRAP_EVENTS_INTERVAL",
          default_value = "30s", value_parser = any_duration)]
    pub events_interval: Duration,
    /// How long one request to the API server may take (and the last writes when the webhook stops, 3s at most)
    #[arg(long = "events-timeout", value_name = "DURATION", env = "MESHWRAP_EVENTS_TIMEOUT",
          default_value = "5s", value_parser = positive_duration)]
    pub events_timeout: Duration,
}

impl EventOptions {
    pub fn config(&self) -> crate::webhook::events::Config {
        crate::webhook::events::Config {
            enabled: self.events == "on",
            api_server: self.api_server.clone(),
            token: self.api_token.clone(),
            ca: self.api_ca.clone(),
            queue: self.events_queue,
            cache: self.events_cache,
            interval: self.events_interval,
            timeout: self.events_timeout,
        }
    }

    pub fn namespaces(&self) -> crate::webhook::namespaces::Config {
        crate::webhook::namespaces::Config {
            enabled: self.namespaces == "on",
            api_server: self.api_server.clone(),
            token: self.api_token.clone(),
            ca: self.api_ca.clone(),
            timeout: self.namespace_timeout,
        }
    }
}

#[derive(Args, Debug)]
pub struct Manifests {
    /// The namespace to install the webhook into (not a system namespace, nor default)
    #[arg(long, value_name = "NAME", env = "MESHWRAP_NAMESPACE", default_value = NAMESPACE,
          value_parser = namespace_name)]
    pub namespace: String,
    /// Print the Namespace object too (always for the default one): the tool then owns it and labels it PSA restricted
    #[arg(long = "create-namespace", env = "MESHWRAP_CREATE_NAMESPACE")]
    pub create_namespace: bool,
    /// With --self-signed: the CAs trusted now (PEM: 0-meshwrap's caBundle, or the Secret's ca.crt), kept beside the new one
    #[arg(long = "previous-ca", value_name = "FILE", env = "MESHWRAP_PREVIOUS_CA")]
    pub previous_ca: Option<PathBuf>,
    /// A Secret you manage (type kubernetes.io/tls: tls.crt, tls.key) for the webhook to serve with, instead of cert-manager; with --ca-bundle
    #[arg(long = "tls-secret", value_name = "NAME", env = "MESHWRAP_TLS_SECRET", value_parser = secret_name)]
    pub tls_secret: Option<String>,
    /// With --tls-secret: the CA (PEM) that signed its certificate, for the API server to trust
    #[arg(long = "ca-bundle", value_name = "FILE", env = "MESHWRAP_CA_BUNDLE")]
    pub ca_bundle: Option<PathBuf>,
    /// The cluster's pod network (repeatable): print a NetworkPolicy that admits the webhook's port only from outside it
    #[arg(long = "pod-cidr", value_name = "CIDR", env = "MESHWRAP_POD_CIDR", value_delimiter = ',',
          value_parser = pod_cidr)]
    pub pod_cidrs: Vec<String>,
    /// The webhook's own image (kubectl-meshwrap)
    #[arg(long = "webhook-image", value_name = "IMAGE", env = "MESHWRAP_WEBHOOK_IMAGE")]
    pub webhook_image: Option<String>,
    /// Generate a CA and a serving certificate and embed the CA bundle, instead of using cert-manager
    #[arg(long = "self-signed", env = "MESHWRAP_SELF_SIGNED")]
    pub self_signed: bool,
    /// The cluster's Kubernetes version: matchConditions are printed for 1.30 and newer (default: printed)
    #[arg(long = "kube-version", value_name = "VERSION", env = "MESHWRAP_KUBE_VERSION",
          value_parser = kube_version)]
    pub kube_version: Option<(u32, u32)>,
    /// Whether the webhook posts Events on the owners of the pods it wraps or skips (off: no RBAC for them; with --namespaces off too, no token)
    #[arg(long, value_name = "on|off", env = "MESHWRAP_EVENTS", default_value = "on",
          value_parser = ["on", "off"])]
    pub events: String,
    /// Whether the webhook reads each pod's Namespace for the meshes it turns on (off: no RBAC for it; pods get every mesh's switches, as offline inject)
    #[arg(long, value_name = "on|off", env = "MESHWRAP_NAMESPACES", default_value = "on",
          value_parser = ["on", "off"])]
    pub namespaces: String,
    #[command(flatten)]
    pub pod: PodOptions,
}

fn kube_version(s: &str) -> Result<(u32, u32), String> {
    crate::manifests::parse_kube_version(s)
}

/// Where `manifests` installs the webhook unless told otherwise.
pub const NAMESPACE: &str = "meshwrap-system";

pub(crate) fn duration(s: &str) -> Result<String, String> {
    meshwrap::duration::parse(s)
        .map(|_| s.to_string())
        .ok_or_else(|| "a duration such as 90s, 10m or 1h".to_string())
}

fn any_duration(s: &str) -> Result<Duration, String> {
    meshwrap::duration::parse(s).ok_or_else(|| "a duration such as 500ms, 5s or 1m".to_string())
}

fn positive_duration(s: &str) -> Result<Duration, String> {
    any_duration(s).and_then(|d| {
        if d.is_zero() {
            Err("a duration above zero, such as 5s".into())
        } else {
            Ok(d)
        }
    })
}

fn api_server(s: &str) -> Result<Endpoint, String> {
    Endpoint::parse(s)
}

fn mesh(s: &str) -> Result<String, String> {
    if s == "auto" || s == "none" || crate::mesh::Kind::parse(s).is_some() {
        Ok(s.to_string())
    } else {
        Err(crate::mesh::accepted())
    }
}

fn namespace_name(s: &str) -> Result<String, String> {
    crate::manifests::check_namespace(s).map(|()| s.to_string())
}

fn secret_name(s: &str) -> Result<String, String> {
    crate::manifests::check_secret_name(s).map(|()| s.to_string())
}

fn pod_cidr(s: &str) -> Result<String, String> {
    crate::manifests::check_cidr(s).map(|_| s.to_string())
}

fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err("a whole number of at least 1, such as 512".into()),
    }
}

fn percent(s: &str) -> Result<u8, String> {
    match s.strip_suffix('%').map(str::parse::<u8>) {
        Some(Ok(n)) if (1..=100).contains(&n) => Ok(n),
        _ => Err("a percentage from 1% to 100%, such as 25%".into()),
    }
}

/// An image reference runtimes can pull (`crate::image_reference`).
pub(crate) fn image(s: &str) -> Result<String, String> {
    crate::image_reference(s).map(|()| s.to_string())
}

pub(crate) fn sidecar(s: &str) -> Result<String, String> {
    let s = s.trim();
    if s.eq_ignore_ascii_case("auto") {
        return Ok(s.to_string());
    }
    meshwrap::sidecar::preset::parse(s)
        .map(|_| s.to_string())
        .map_err(|why| format!("{why}; expected {}", meshwrap::sidecar::preset::accepts()))
}

impl PodOptions {
    pub fn options(&self) -> Options {
        Options {
            image: self.image.clone().unwrap_or_default(),
            sidecar: (!self.sidecar.is_empty()).then(|| self.sidecar.join(",")),
            timeout: self.timeout.clone(),
            quit_policy: self.quit_policy.clone(),
            delivery: if self.delivery == "image-volume" {
                Delivery::ImageVolume
            } else {
                Delivery::InitContainer
            },
            meshes: self.mesh.iter().filter_map(|m| crate::mesh::Kind::parse(m)).collect(),
            namespace_unseen: self.mesh.iter().all(|m| m == "auto"),
            native: crate::transform::Native::parse(&self.native).unwrap_or_default(),
            all_workloads: self.workloads == "all",
            run_as_user: crate::transform::parse_run_as_user(&self.run_as_user)
                .unwrap_or(Some(crate::transform::DEFAULT_UID)),
            resources: crate::transform::parse_resources(&self.resources).unwrap_or_default(),
        }
    }
}
