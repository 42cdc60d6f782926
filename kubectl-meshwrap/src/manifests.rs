//! `kubectl-meshwrap manifests`: everything that installs the webhook, as
//! one YAML stream for `kubectl apply -f -`.
//!
//! The choices that keep a cluster safe when the webhook is wrong or down:
//! - `failurePolicy: Fail`, because an unwrapped batch pod hangs forever
//!   (the silent failure of an injector set to Ignore); the selector is
//!   narrow so that only pods that asked for meshwrap can be blocked, and
//!   the webhook's own namespace and kube-system are never selected, so it
//!   can always be repaired;
//! - two replicas on different nodes, a PodDisruptionBudget and readiness
//!   on `/readyz`, so a drain or a rollout never leaves no webhook;
//! - the webhook reads one thing from the API server, each pod's Namespace
//!   (which meshes its labels and annotations turn on, `webhook::namespaces`),
//!   and writes one, Events (why a pod was wrapped or skipped, on its
//!   owner). With both on (the default) its ServiceAccount may `get`
//!   namespaces and `create` and `patch` events, nothing else, and only the
//!   webhook's pod gets a token: the ServiceAccount keeps
//!   `automountServiceAccountToken: false` and the pod sets it to true, so
//!   the token is at the path every in-cluster client reads
//!   (`/var/run/secrets/kubernetes.io/serviceaccount`), rotated by the
//!   kubelet, and no other pod naming the account gets one. Each switched
//!   off takes its RBAC with it; both off, no token either. A read that is
//!   refused or late never refuses a pod: it is decided as offline inject
//!   decides it;
//! - `matchConditions` (GA in Kubernetes 1.30, beta and on by default in
//!   1.28 and 1.29) let the API server itself leave alone the pods that
//!   opted out by annotation, which no selector can see, and the webhook's
//!   own namespace and kube-system, without calling the webhook: less load,
//!   and fewer pods blocked while it is down. They are printed unless
//!   `--kube-version` names a cluster older than 1.30, the same rule as the
//!   chart's (`.Capabilities.KubeVersion`): on a 1.28 or 1.29 cluster whose
//!   feature gate is off the API server drops the field, and the webhook
//!   leaves those pods alone itself, as it always did. Each expression
//!   guards every map it reads with `has()`, so none can fail to evaluate
//!   (an evaluation error would count as the webhook failing, and
//!   `failurePolicy: Fail` would refuse the pod);
//! - the serving certificate comes from a CA (cert-manager's, or one made
//!   here with `--self-signed`), so renewing the serving certificate never
//!   changes the caBundle the API server trusts, and no request fails while
//!   the two catch up with each other;
//! - the tool creates (and labels PSA `restricted`) only a namespace it
//!   owns: its default one, or any with `--create-namespace`. An existing
//!   namespace named with `--namespace` is left as it is, and the system
//!   namespaces (and `default`, whose pods the webhook would then never
//!   wrap) are refused;
//! - with `--pod-cidr`, a NetworkPolicy admits the webhook's port only from
//!   outside the pod network, where the API server is; without it none is
//!   printed, because where the API server's connections come from varies
//!   (a host address on kubeadm, a konnectivity agent's pod on some managed
//!   clusters, a VPC address that shares the pods' range on EKS), and a
//!   policy that guessed wrong would block every wrapped pod's creation;
//! - with `--tls-secret NAME --ca-bundle FILE` (the chart's
//!   `certificates.mode=existing`) the webhook serves with a Secret the
//!   user manages (sealed-secrets, external-secrets, Vault) and the API
//!   server trusts the CA given: nothing secret or random is printed, so the
//!   output can be committed and every run is the same. The bundle must be
//!   PEM certificates and nothing else (the webhook configuration is
//!   readable cluster-wide, so a private key there would leak);
//! - rotation never leaves the API server without trust. A second
//!   `--self-signed` run makes a new CA; `--previous-ca` puts the CAs the
//!   API server trusts now (the configuration's caBundle) into the new
//!   caBundle beside the new one, so both the old and the new serving
//!   certificate verify while the kubelet swaps the Secret. The Secret
//!   holds the CA's key (`ca.key`) as the chart's does (the chart signs a
//!   rotated serving certificate with the same CA, so a `helm rollback`
//!   keeps trust, docs/webhook.md); the Deployment mounts only `tls.crt`
//!   and `tls.key`. With cert-manager, the CA's key is never rotated
//!   (`rotationPolicy: Never`), so a reissued CA certificate has the same
//!   subject and key, and serving certificates signed before it still
//!   verify against the bundle the cainjector copies.

use base64::Engine;
use serde_json::{Value, json};

use crate::transform::{CONTAINER, IMAGE, INJECT, Options, QUIT_POLICY, SIDECAR, TIMEOUT};

pub const NAME: &str = "meshwrap-webhook";
/// The ClusterRole and ClusterRoleBinding that let the webhook post Events.
pub const EVENTS_ROLE: &str = "meshwrap-webhook-events";
/// The ClusterRole and ClusterRoleBinding that let it read Namespaces.
pub const NAMESPACES_ROLE: &str = "meshwrap-webhook-namespaces";
/// The MutatingWebhookConfiguration's name, which sorts before the injectors'.
pub const WEBHOOK_CONFIGURATION: &str = "0-meshwrap";
const TLS_SECRET: &str = "meshwrap-webhook-tls";
const PORT: u16 = 9443;

/// Namespaces the webhook is never installed into: Kubernetes' own, and
/// `default`, which its selectors would then exclude from wrapping.
const REFUSED: [&str; 4] = ["kube-system", "kube-public", "kube-node-lease", "default"];

pub struct Request {
    pub namespace: String,
    /// Print the Namespace object (the tool owns the namespace).
    pub create_namespace: bool,
    pub webhook_image: String,
    pub self_signed: bool,
    /// PEM CAs to keep trusting beside a new `--self-signed` CA.
    pub previous_ca: Option<String>,
    /// A Secret the user manages, for the webhook to serve with
    /// (`--tls-secret`), and the PEM CA bundle that trusts it (`--ca-bundle`).
    pub tls_secret: Option<String>,
    pub ca_bundle: Option<String>,
    /// The cluster's pod network(s), for the NetworkPolicy.
    pub pod_cidrs: Vec<String>,
    /// The cluster's version (major, minor), when given: `matchConditions`
    /// only from 1.30.
    pub kube_version: Option<(u32, u32)>,
    /// The webhook posts Events (its RBAC and token go with it).
    pub events: bool,
    /// The webhook reads each pod's Namespace (the same).
    pub namespaces: bool,
    pub options: Options,
}

/// The first Kubernetes version whose API has `matchConditions` GA.
pub const MATCH_CONDITIONS_SINCE: (u32, u32) = (1, 30);

/// A Kubernetes version as `kubectl version` or a provider prints it
/// (`1.30`, `v1.30.2`, `1.29.8-eks-a737599`, `v1.31.1+k3s1`): (major, minor).
pub fn parse_kube_version(text: &str) -> Result<(u32, u32), String> {
    let bad = || "a Kubernetes version such as 1.30 or v1.29.8".to_string();
    let text = text.strip_prefix('v').unwrap_or(text);
    let mut parts = text.splitn(3, '.');
    let major = parts.next().and_then(|m| m.parse().ok()).ok_or_else(bad)?;
    let minor_text = parts.next().ok_or_else(bad)?;
    let digits = minor_text.bytes().take_while(u8::is_ascii_digit).count();
    let rest = &minor_text[digits..];
    if !(rest.is_empty() || rest.starts_with(['-', '+'])) {
        return Err(bad());
    }
    let minor = minor_text[..digits].parse().map_err(|_| bad())?;
    if major != 1 {
        return Err(bad());
    }
    if minor < 28 {
        return Err(format!(
            "Kubernetes 1.{minor} is older than meshwrap supports: 1.28 and newer, as the chart's kubeVersion (>=1.28.0-0)"
        ));
    }
    Ok((major, minor))
}

/// `matchConditions` go into the configuration: unless the cluster is
/// older than 1.30 (unknown: yes, see the module's notes).
pub fn match_conditions(kube_version: Option<(u32, u32)>) -> bool {
    kube_version.is_none_or(|v| v >= MATCH_CONDITIONS_SINCE)
}

/// The namespace's name, checked: a DNS label (what Kubernetes accepts)
/// and not one of [`REFUSED`].
pub fn check_namespace(name: &str) -> Result<(), String> {
    if REFUSED.contains(&name) {
        return Err(format!(
            "{name} is refused: the webhook is never installed into a system namespace or default; choose its own, e.g. meshwrap-system"
        ));
    }
    let label = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if label {
        Ok(())
    } else {
        Err(
            "a namespace name: 1 to 63 lowercase letters, digits and '-', starting and ending with a letter or digit"
                .into(),
        )
    }
}

/// A Secret's name: a DNS subdomain (what Kubernetes accepts).
pub fn check_secret_name(name: &str) -> Result<(), String> {
    let label = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if name.len() <= 253 && name.split('.').all(label) {
        Ok(())
    } else {
        Err("a Secret's name: lowercase letters, digits, '-' and '.', as meshwrap-serving-tls".into())
    }
}

/// A CIDR such as 10.244.0.0/16 or fd00::/48: (is IPv6, text).
pub fn check_cidr(cidr: &str) -> Result<bool, String> {
    let bad = || "a network in CIDR form, such as 10.244.0.0/16 or fd00:10:244::/56".to_string();
    let (address, prefix) = cidr.split_once('/').ok_or_else(bad)?;
    let address: std::net::IpAddr = address.parse().map_err(|_| bad())?;
    let prefix: u8 = prefix.parse().map_err(|_| bad())?;
    let max = if address.is_ipv6() { 128 } else { 32 };
    if prefix == 0 || prefix > max {
        return Err(bad());
    }
    Ok(address.is_ipv6())
}

fn base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The Service's DNS names, as the API server dials it.
fn dns_names(namespace: &str) -> Vec<String> {
    vec![
        NAME.to_string(),
        format!("{NAME}.{namespace}"),
        format!("{NAME}.{namespace}.svc"),
        format!("{NAME}.{namespace}.svc.cluster.local"),
    ]
}

/// A CA and the serving certificate it signs, as PEM.
struct Pair {
    ca: String,
    ca_key: String,
    cert: String,
    key: String,
}

/// A CA, and a serving certificate it signs.
fn self_signed(namespace: &str) -> Result<Pair, String> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    };
    let e = |e: rcgen::Error| format!("--self-signed: {e}");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let year = 1970 + (now.as_secs() / 31_556_952) as i32;
    let (from, until) = (
        rcgen::date_time_ymd(year - 1, 1, 1),
        rcgen::date_time_ymd(year + 10, 1, 1),
    );

    let ca_key = KeyPair::generate().map_err(e)?;
    let mut ca = CertificateParams::new(Vec::new()).map_err(e)?;
    ca.distinguished_name.push(DnType::CommonName, "meshwrap webhook CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca.not_before = from;
    ca.not_after = until;
    let ca_cert = ca.self_signed(&ca_key).map_err(e)?;
    let ca_key_pem = ca_key.serialize_pem();
    let issuer = Issuer::new(ca, ca_key);

    let key = KeyPair::generate().map_err(e)?;
    let mut serving = CertificateParams::new(dns_names(namespace)).map_err(e)?;
    serving
        .distinguished_name
        .push(DnType::CommonName, format!("{NAME}.{namespace}.svc"));
    serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    serving.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    serving.not_before = from;
    serving.not_after = until;
    let cert = serving.signed_by(&key, &issuer).map_err(e)?;
    Ok(Pair {
        ca: ca_cert.pem(),
        ca_key: ca_key_pem,
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

fn env(name: &str, value: &str) -> Value {
    json!({"name": name, "value": value})
}

/// The bundle the API server trusts: the new CA, then each previous one
/// (each checked to be a PEM certificate, and not repeated).
fn ca_bundle(new_ca: &str, previous: Option<&str>) -> Result<String, String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut bundle = new_ca.to_string();
    let Some(previous) = previous else {
        return Ok(bundle);
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(previous.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("--previous-ca: {e}"))?;
    if certs.is_empty() {
        return Err(
            "--previous-ca: no PEM certificate in it; give the CA the webhook serves with now (its Secret's ca.crt)"
                .into(),
        );
    }
    for cert in certs {
        let pem = pem_of(&cert);
        if !bundle.contains(&pem) {
            bundle.push_str(&pem);
        }
    }
    Ok(bundle)
}

/// Reads `--previous-ca`.
pub fn read_previous_ca(path: &std::path::Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("--previous-ca {}: {e}", path.display()))
}

/// Reads `--ca-bundle`.
pub fn read_ca_bundle(path: &std::path::Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("--ca-bundle {}: {e}", path.display()))
}

/// `--tls-secret` and `--ca-bundle`, checked together: the caBundle
/// (base64 of the file as given), or None without them.
fn existing_bundle(req: &Request) -> Result<Option<String>, String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let hint = "the CA (PEM) that signed the certificate in the Secret, which the API server must trust";
    if let (Some(secret), true) = (&req.tls_secret, req.self_signed) {
        return Err(format!(
            "--tls-secret {secret} and --self-signed: choose one (your Secret, or one made here)"
        ));
    }
    let pem = match (&req.tls_secret, &req.ca_bundle) {
        (None, None) => return Ok(None),
        (Some(_), None) => return Err(format!("--tls-secret needs --ca-bundle FILE: {hint}")),
        (None, Some(_)) => return Err("--ca-bundle goes with --tls-secret NAME, the Secret it trusts".into()),
        (Some(_), Some(pem)) => pem,
    };
    if pem.contains("PRIVATE KEY") {
        return Err("--ca-bundle holds a private key: give only the CA certificate(s); the webhook configuration is readable cluster-wide".into());
    }
    let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("--ca-bundle: {e}"))?;
    if certs.is_empty() {
        return Err(format!("--ca-bundle: no PEM certificate in it; give {hint}"));
    }
    Ok(Some(base64(pem.as_bytes())))
}

fn pem_of(der: &[u8]) -> String {
    let text = base64(der);
    let mut pem = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in text.as_bytes().chunks(64) {
        pem.push_str(std::str::from_utf8(line).unwrap_or_default());
        pem.push('\n');
    }
    pem.push_str("-----END CERTIFICATE-----\n");
    pem
}

/// What every object of the install carries.
struct Common<'a> {
    ns: &'a str,
    labels: Value,
}

impl Common<'_> {
    fn meta(&self, name: &str) -> Value {
        json!({"name": name, "namespace": self.ns, "labels": self.labels})
    }
}

fn namespace(ns: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": ns, "labels": {
            "pod-security.kubernetes.io/enforce": "restricted",
            "app.kubernetes.io/part-of": "meshwrap"
        }}
    })
}

fn service_account(c: &Common) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ServiceAccount", "metadata": c.meta(NAME),
        "automountServiceAccountToken": false
    })
}

/// What posting Events needs: `create` and `patch` on events in
/// events.k8s.io, the only API the poster writes (`/apis/events.k8s.io/v1`,
/// webhook/events.rs), and nothing else. RBAC is per API group: a grant on
/// the core group (`""`) would never be used, and would only widen what a
/// stolen token could write. Which side: no pod depends on the grant (the
/// events are advisory), so it is the least that lets them be written.
fn events_rbac(c: &Common) -> [Value; 2] {
    let rule = json!({"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]});
    cluster_role(c, EVENTS_ROLE, rule)
}

/// What reading each pod's Namespace needs: `get` on namespaces, the only
/// read (`GET /api/v1/namespaces/NAME`, webhook/namespaces.rs); no `list`
/// or `watch`, which would hand a stolen token every namespace's labels at
/// once. Which side: a refused read costs only switches nobody reads (the
/// pod is decided as offline), so it is the least that lets it be made.
fn namespaces_rbac(c: &Common) -> [Value; 2] {
    let rule = json!({"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]});
    cluster_role(c, NAMESPACES_ROLE, rule)
}

/// A ClusterRole of one rule, bound to the webhook's ServiceAccount.
fn cluster_role(c: &Common, name: &str, rule: Value) -> [Value; 2] {
    let meta = json!({"name": name, "labels": c.labels});
    [
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": meta,
            "rules": [rule]
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": c.ns}]
        }),
    ]
}

/// The Secret of `--self-signed`, and the caBundle (base64) to trust it.
/// It holds the CA's key (`ca.key`), as the chart's does, so a later
/// serving certificate can be signed by the same CA without a caBundle
/// change; the Deployment mounts only `tls.crt` and `tls.key`.
fn self_signed_secret(c: &Common, previous_ca: Option<&str>) -> Result<(Value, String), String> {
    let pair = self_signed(c.ns)?;
    let bundle = ca_bundle(&pair.ca, previous_ca)?;
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": c.meta(TLS_SECRET), "type": "kubernetes.io/tls",
        "data": {"ca.crt": base64(pair.ca.as_bytes()), "ca.key": base64(pair.ca_key.as_bytes()),
                 "tls.crt": base64(pair.cert.as_bytes()), "tls.key": base64(pair.key.as_bytes())}
    });
    Ok((secret, base64(bundle.as_bytes())))
}

/// cert-manager's chain: a self-signed Issuer, a CA whose key is kept
/// across reissues, an Issuer of that CA, and the serving certificate.
fn cert_manager(c: &Common) -> [Value; 4] {
    let key = |rotation: &str| json!({"algorithm": "ECDSA", "size": 256, "rotationPolicy": rotation});
    [
        json!({"apiVersion": "cert-manager.io/v1", "kind": "Issuer", "metadata": c.meta("meshwrap-selfsigned"),
               "spec": {"selfSigned": {}}}),
        json!({"apiVersion": "cert-manager.io/v1", "kind": "Certificate", "metadata": c.meta("meshwrap-ca"),
               "spec": {"isCA": true, "commonName": "meshwrap webhook CA", "secretName": "meshwrap-ca",
                        "duration": "87600h", "privateKey": key("Never"),
                        "issuerRef": {"kind": "Issuer", "name": "meshwrap-selfsigned"}}}),
        json!({"apiVersion": "cert-manager.io/v1", "kind": "Issuer", "metadata": c.meta("meshwrap-ca"),
               "spec": {"ca": {"secretName": "meshwrap-ca"}}}),
        json!({"apiVersion": "cert-manager.io/v1", "kind": "Certificate", "metadata": c.meta(NAME),
               "spec": {"secretName": TLS_SECRET, "dnsNames": dns_names(c.ns), "duration": "2160h",
                        "renewBefore": "720h", "privateKey": key("Always"),
                        "issuerRef": {"kind": "Issuer", "name": "meshwrap-ca"}}}),
    ]
}

fn service(c: &Common) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service", "metadata": c.meta(NAME),
        "spec": {"selector": {"app.kubernetes.io/name": NAME},
                 "ports": [{"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP"}]}
    })
}

/// The webhook container's environment: its flags, and what reaches pods.
fn webhook_env(opts: &Options, events: bool, namespaces: bool) -> Vec<Value> {
    let mut envs = vec![
        env("MESHWRAP_TLS_CERT", "/tls/tls.crt"),
        env("MESHWRAP_TLS_KEY", "/tls/tls.key"),
        env("MESHWRAP_LISTEN", &format!("0.0.0.0:{PORT}")),
        json!({"name": "MESHWRAP_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}),
        env("MESHWRAP_IMAGE", &opts.image),
        env("MESHWRAP_DELIVERY", opts.delivery.name()),
        env("MESHWRAP_EVENTS", if events { "on" } else { "off" }),
        env("MESHWRAP_NAMESPACES", if namespaces { "on" } else { "off" }),
    ];
    for (name, value) in [
        ("MESHWRAP_SIDECAR", &opts.sidecar),
        ("MESHWRAP_TIMEOUT", &opts.timeout),
        ("MESHWRAP_QUIT_POLICY", &opts.quit_policy),
    ] {
        if let Some(v) = value {
            envs.push(env(name, v));
        }
    }
    if !opts.meshes.is_empty() {
        let names: Vec<&str> = opts.meshes.iter().map(|m| m.facts().name).collect();
        envs.push(env("MESHWRAP_MESH", &names.join(",")));
    }
    if let Some(native) = opts.native.flag() {
        envs.push(env("MESHWRAP_NATIVE", native));
    }
    let defaults = Options::default();
    if opts.run_as_user != defaults.run_as_user {
        let uid = opts.run_as_user.map_or_else(|| "none".to_string(), |u| u.to_string());
        envs.push(env("MESHWRAP_RUN_AS_USER", &uid));
    }
    if opts.resources != defaults.resources {
        envs.push(env("MESHWRAP_RESOURCES", &resources_flag(opts.resources.as_ref())));
    }
    envs
}

/// `requests.cpu=10m,...` from a container's resources (`none` for none).
fn resources_flag(resources: Option<&Value>) -> String {
    let Some(Value::Object(kinds)) = resources else {
        return "none".into();
    };
    let mut items = Vec::new();
    for (kind, values) in kinds {
        for (resource, quantity) in values.as_object().into_iter().flatten() {
            items.push(format!("{kind}.{resource}={}", quantity.as_str().unwrap_or_default()));
        }
    }
    items.join(",")
}

fn container(req: &Request) -> Value {
    let probe = |path: &str| json!({"httpGet": {"path": path, "port": "https", "scheme": "HTTPS"}, "periodSeconds": 5, "timeoutSeconds": 2});
    json!({
        "name": "webhook",
        "image": req.webhook_image,
        "args": ["webhook"],
        "env": webhook_env(&req.options, req.events, req.namespaces),
        "ports": [{"name": "https", "containerPort": PORT, "protocol": "TCP"}],
        "readinessProbe": probe("/readyz"),
        "livenessProbe": probe("/healthz"),
        "resources": {"requests": {"cpu": "50m", "memory": "32Mi"},
                      "limits": {"cpu": "1", "memory": "64Mi"}},
        "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                            "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [{"name": "tls", "mountPath": "/tls", "readOnly": true}]
    })
}

fn deployment(c: &Common, req: &Request) -> Value {
    let tls_secret = req.tls_secret.as_deref().unwrap_or(TLS_SECRET);
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": c.meta(NAME),
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app.kubernetes.io/name": NAME}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
            "template": {
                "metadata": {
                    "labels": {"app.kubernetes.io/name": NAME, "app.kubernetes.io/part-of": "meshwrap",
                               "sidecar.istio.io/inject": "false"},
                    "annotations": {"sidecar.istio.io/inject": "false", "linkerd.io/inject": "disabled"}
                },
                "spec": {
                    "serviceAccountName": NAME,
                    "automountServiceAccountToken": req.events || req.namespaces,
                    "terminationGracePeriodSeconds": 30,
                    "securityContext": {"runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532,
                                        "seccompProfile": {"type": "RuntimeDefault"}},
                    "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
                        "weight": 100,
                        "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                                            "labelSelector": {"matchLabels": {"app.kubernetes.io/name": NAME}}}
                    }]}},
                    "containers": [container(req)],
                    // Only the serving pair: a self-signed Secret also
                    // holds the CA's key, which the pods never need.
                    "volumes": [{"name": "tls", "secret": {"secretName": tls_secret, "items": [
                        {"key": "tls.crt", "path": "tls.crt"}, {"key": "tls.key", "path": "tls.key"}]}}]
                }
            }
        }
    })
}

fn disruption_budget(c: &Common) -> Value {
    json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": c.meta(NAME),
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app.kubernetes.io/name": NAME}}}
    })
}

/// Ingress to the webhook's port from anywhere but the pod network(s):
/// the API server (and the kubelet's probes, which come from the node).
fn network_policy(c: &Common, pod_cidrs: &[String]) -> Result<Value, String> {
    let (mut v4, mut v6) = (Vec::new(), Vec::new());
    for cidr in pod_cidrs {
        if check_cidr(cidr).map_err(|e| format!("--pod-cidr {cidr}: {e}"))? {
            v6.push(cidr.clone());
        } else {
            v4.push(cidr.clone());
        }
    }
    let mut from = Vec::new();
    for (all, except) in [("0.0.0.0/0", v4), ("::/0", v6)] {
        if !except.is_empty() {
            from.push(json!({"ipBlock": {"cidr": all, "except": except}}));
        }
    }
    Ok(json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": c.meta(NAME),
        "spec": {
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": NAME}},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": from, "ports": [{"port": "https", "protocol": "TCP"}]}]
        }
    }))
}

/// What the API server decides without calling the webhook: a pod that
/// opted out (the annotation no selector can see, and the label), and a pod
/// in the webhook's own namespace or kube-system (the namespace selector's
/// rule again, so it holds whatever the selector says). CEL over the
/// AdmissionRequest; `has()` guards every map, so none can fail to evaluate.
pub fn conditions(ns: &str) -> Value {
    let opted_out = |field: &str| {
        format!(
            "!has(object.metadata.{field}) || !('{INJECT}' in object.metadata.{field}) || object.metadata.{field}['{INJECT}'] != 'false'"
        )
    };
    json!([
        {"name": "not-opted-out-by-annotation", "expression": opted_out("annotations")},
        {"name": "not-opted-out-by-label", "expression": opted_out("labels")},
        {"name": "not-a-never-selected-namespace", "expression": format!("!(request.namespace in ['{ns}', 'kube-system'])")},
    ])
}

/// One of the two webhooks: which pods it sees, and how it is reached.
fn webhook(c: &Common, name: &str, ca_bundle: Option<&str>, namespaces: Value, objects: Value) -> Value {
    let mut client = json!({"service": {"name": NAME, "namespace": c.ns, "path": "/mutate", "port": 443}});
    if let Some(bundle) = ca_bundle {
        client["caBundle"] = json!(bundle);
    }
    json!({
        "name": name,
        "admissionReviewVersions": ["v1"],
        "clientConfig": client,
        "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                   "resources": ["pods"], "scope": "Namespaced"}],
        "namespaceSelector": namespaces,
        "objectSelector": objects,
        "failurePolicy": "Fail",
        "matchPolicy": "Equivalent",
        "sideEffects": "None",
        "timeoutSeconds": 5,
        "reinvocationPolicy": "IfNeeded"
    })
}

/// Both webhooks, with `matchConditions` when the cluster has them.
fn with_conditions(mut webhook: Value, c: &Common, conditions: bool) -> Value {
    if conditions {
        webhook["matchConditions"] = self::conditions(c.ns);
    }
    webhook
}

fn webhook_configuration(c: &Common, ca_bundle: Option<&str>, conditions: bool) -> Value {
    let never = json!({"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": [c.ns, "kube-system"]});
    let mut configuration = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        // The API server calls mutating webhooks in the order of their
        // configurations' names: "0-" puts meshwrap before every mesh's
        // injector (dapr-, istio-, linkerd-, vault-), so the quit switches it
        // adds are there when each injector reads the pod's annotations.
        "metadata": {"name": WEBHOOK_CONFIGURATION, "labels": c.labels},
        "webhooks": [
            // Every pod of a labelled namespace, but those that opt out.
            with_conditions(webhook(
                c,
                "namespace.inject.meshwrap.io",
                ca_bundle,
                json!({"matchExpressions": [
                    {"key": INJECT, "operator": "In", "values": ["enabled"]}, never.clone()]}),
                json!({"matchExpressions": [{"key": INJECT, "operator": "NotIn", "values": ["false"]}]}),
            ), c, conditions),
            // A labelled pod in any other namespace.
            with_conditions(webhook(
                c,
                "pod.inject.meshwrap.io",
                ca_bundle,
                json!({"matchExpressions": [
                    {"key": INJECT, "operator": "NotIn", "values": ["enabled"]}, never]}),
                json!({"matchLabels": {INJECT: "true"}}),
            ), c, conditions),
        ]
    });
    if ca_bundle.is_none() {
        configuration["metadata"]["annotations"] =
            json!({"cert-manager.io/inject-ca-from": format!("{}/{NAME}", c.ns)});
    }
    configuration
}

/// The request's flags, checked together before anything is made: the
/// line for a bad one (a usage error, exit 2), naming the flag and what it
/// accepts. What is left to fail after this is the making itself.
pub fn check(req: &Request) -> Result<(), String> {
    check_namespace(&req.namespace).map_err(|e| format!("--namespace {}: {e}", req.namespace))?;
    if req.previous_ca.is_some() && !req.self_signed {
        return Err(
            "--previous-ca goes with --self-signed: cert-manager keeps its CA's key, so its bundle needs no help"
                .into(),
        );
    }
    existing_bundle(req)?;
    ca_bundle("", req.previous_ca.as_deref()).map(|_| ())
}

/// Every object, in the order `kubectl apply` should create them.
pub fn objects(req: &Request) -> Result<Vec<Value>, String> {
    check(req)?;
    let c = Common {
        ns: &req.namespace,
        labels: json!({"app.kubernetes.io/name": NAME, "app.kubernetes.io/part-of": "meshwrap"}),
    };
    let mut out = Vec::new();
    if req.create_namespace || req.namespace == crate::cli::NAMESPACE {
        out.push(namespace(c.ns));
    }
    out.push(service_account(&c));
    if req.events {
        out.extend(events_rbac(&c));
    }
    if req.namespaces {
        out.extend(namespaces_rbac(&c));
    }
    // The user's Secret (nothing to make), one made here, or cert-manager's.
    let mut bundle = existing_bundle(req)?;
    if bundle.is_none() && req.self_signed {
        let (secret, ca) = self_signed_secret(&c, req.previous_ca.as_deref())?;
        out.push(secret);
        bundle = Some(ca);
    } else if bundle.is_none() {
        out.extend(cert_manager(&c));
    }
    out.extend([service(&c), deployment(&c, req), disruption_budget(&c)]);
    if !req.pod_cidrs.is_empty() {
        out.push(network_policy(&c, &req.pod_cidrs)?);
    }
    out.push(webhook_configuration(
        &c,
        bundle.as_deref(),
        match_conditions(req.kube_version),
    ));
    Ok(out)
}

/// The YAML stream, with a header that says what it is and how options
/// reach pods.
pub fn render(req: &Request) -> Result<String, String> {
    let objects = objects(req)?;
    let mut header = format!(
        "# meshwrap's admission webhook (kubectl-meshwrap {}), from `kubectl-meshwrap manifests`.\n\
         # Label a namespace meshwrap.io/inject=enabled, or a pod meshwrap.io/inject: \"true\".\n\
         # Per-pod annotations: {CONTAINER}, {QUIT_POLICY}, {IMAGE}, {TIMEOUT}, {SIDECAR}.\n",
        crate::transform::VERSION
    );
    if req.pod_cidrs.is_empty() {
        header.push_str(
            "# No NetworkPolicy: with --pod-cidr (the cluster's pod network) one admits the webhook's port only from outside it.\n",
        );
    }
    if req.self_signed {
        header.push_str(
            "# To rotate, run again with --previous-ca set to the caBundle trusted now (0-meshwrap's): the API server then trusts the old CAs and the new.\n",
        );
    }
    if let Some(secret) = &req.tls_secret {
        header.push_str(&format!(
            "# The webhook serves with the Secret {secret} (kubernetes.io/tls), which you manage; the caBundle is --ca-bundle's.\n"
        ));
    }
    Ok(header + &crate::yaml::emit::documents(&objects))
}
