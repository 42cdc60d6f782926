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
//! - no RBAC at all and no service account token: the webhook reads nothing
//!   from the API server;
//! - the serving certificate comes from a CA (cert-manager's, or one made
//!   here with `--self-signed`), so renewing the serving certificate never
//!   changes the caBundle the API server trusts, and no request fails while
//!   the two catch up with each other.

use base64::Engine;
use serde_json::{Value, json};

use crate::transform::{CONTAINER, IMAGE, INJECT, Options, QUIT_POLICY, SIDECAR, TIMEOUT};

pub const NAME: &str = "meshwrap-webhook";
const TLS_SECRET: &str = "meshwrap-webhook-tls";
const PORT: u16 = 9443;

pub struct Request {
    pub namespace: String,
    pub webhook_image: String,
    pub self_signed: bool,
    pub options: Options,
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

/// A CA, and a serving certificate it signs: (CA PEM, certificate PEM, key PEM).
fn self_signed(namespace: &str) -> Result<(String, String, String), String> {
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
    Ok((ca_cert.pem(), cert.pem(), key.serialize_pem()))
}

fn env(name: &str, value: &str) -> Value {
    json!({"name": name, "value": value})
}

/// Every object, in the order `kubectl apply` should create them.
pub fn objects(req: &Request) -> Result<Vec<Value>, String> {
    let ns = req.namespace.as_str();
    let labels = json!({"app.kubernetes.io/name": NAME, "app.kubernetes.io/part-of": "meshwrap"});
    let meta = |name: &str| json!({"name": name, "namespace": ns, "labels": labels});
    let mut out = vec![
        json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": ns, "labels": {
                "pod-security.kubernetes.io/enforce": "restricted",
                "app.kubernetes.io/part-of": "meshwrap"
            }}
        }),
        json!({
            "apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(NAME),
            "automountServiceAccountToken": false
        }),
    ];

    let mut ca_bundle = None;
    if req.self_signed {
        let (ca, cert, key) = self_signed(ns)?;
        ca_bundle = Some(base64(ca.as_bytes()));
        out.push(json!({
            "apiVersion": "v1", "kind": "Secret", "metadata": meta(TLS_SECRET), "type": "kubernetes.io/tls",
            "data": {"ca.crt": base64(ca.as_bytes()), "tls.crt": base64(cert.as_bytes()), "tls.key": base64(key.as_bytes())}
        }));
    } else {
        let ecdsa = json!({"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Always"});
        out.extend([
            json!({"apiVersion": "cert-manager.io/v1", "kind": "Issuer", "metadata": meta("meshwrap-selfsigned"),
                   "spec": {"selfSigned": {}}}),
            json!({"apiVersion": "cert-manager.io/v1", "kind": "Certificate", "metadata": meta("meshwrap-ca"),
                   "spec": {"isCA": true, "commonName": "meshwrap webhook CA", "secretName": "meshwrap-ca",
                            "duration": "87600h", "privateKey": ecdsa,
                            "issuerRef": {"kind": "Issuer", "name": "meshwrap-selfsigned"}}}),
            json!({"apiVersion": "cert-manager.io/v1", "kind": "Issuer", "metadata": meta("meshwrap-ca"),
                   "spec": {"ca": {"secretName": "meshwrap-ca"}}}),
            json!({"apiVersion": "cert-manager.io/v1", "kind": "Certificate", "metadata": meta(NAME),
                   "spec": {"secretName": TLS_SECRET, "dnsNames": dns_names(ns), "duration": "2160h",
                            "renewBefore": "720h", "privateKey": ecdsa,
                            "issuerRef": {"kind": "Issuer", "name": "meshwrap-ca"}}}),
        ]);
    }

    let opts = &req.options;
    let mut envs = vec![
        env("MESHWRAP_TLS_CERT", "/tls/tls.crt"),
        env("MESHWRAP_TLS_KEY", "/tls/tls.key"),
        env("MESHWRAP_LISTEN", &format!("0.0.0.0:{PORT}")),
        json!({"name": "MESHWRAP_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}),
        env("MESHWRAP_IMAGE", &opts.image),
        env("MESHWRAP_DELIVERY", opts.delivery.name()),
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
    let probe = |path: &str| json!({"httpGet": {"path": path, "port": "https", "scheme": "HTTPS"}, "periodSeconds": 5, "timeoutSeconds": 2});
    out.push(json!({
        "apiVersion": "v1", "kind": "Service", "metadata": meta(NAME),
        "spec": {"selector": {"app.kubernetes.io/name": NAME},
                 "ports": [{"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP"}]}
    }));
    out.push(json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta(NAME),
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
                    "automountServiceAccountToken": false,
                    "terminationGracePeriodSeconds": 30,
                    "securityContext": {"runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532,
                                        "seccompProfile": {"type": "RuntimeDefault"}},
                    "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
                        "weight": 100,
                        "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                                            "labelSelector": {"matchLabels": {"app.kubernetes.io/name": NAME}}}
                    }]}},
                    "containers": [{
                        "name": "webhook",
                        "image": req.webhook_image,
                        "args": ["webhook"],
                        "env": envs,
                        "ports": [{"name": "https", "containerPort": PORT, "protocol": "TCP"}],
                        "readinessProbe": probe("/readyz"),
                        "livenessProbe": probe("/healthz"),
                        "resources": {"requests": {"cpu": "50m", "memory": "32Mi"},
                                      "limits": {"cpu": "1", "memory": "64Mi"}},
                        "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                                            "capabilities": {"drop": ["ALL"]}},
                        "volumeMounts": [{"name": "tls", "mountPath": "/tls", "readOnly": true}]
                    }],
                    "volumes": [{"name": "tls", "secret": {"secretName": TLS_SECRET}}]
                }
            }
        }
    }));
    out.push(json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": meta(NAME),
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app.kubernetes.io/name": NAME}}}
    }));

    let never = json!({"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": [ns, "kube-system"]});
    let webhook = |name: &str, namespaces: Value, objects: Value| {
        let mut client = json!({"service": {"name": NAME, "namespace": ns, "path": "/mutate", "port": 443}});
        if let Some(bundle) = &ca_bundle {
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
    };
    let mut configuration = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "meshwrap", "labels": labels},
        "webhooks": [
            // Every pod of a labelled namespace, but those that opt out.
            webhook(
                "namespace.inject.meshwrap.io",
                json!({"matchExpressions": [
                    {"key": INJECT, "operator": "In", "values": ["enabled"]}, never.clone()]}),
                json!({"matchExpressions": [{"key": INJECT, "operator": "NotIn", "values": ["false"]}]}),
            ),
            // A labelled pod in any other namespace.
            webhook(
                "pod.inject.meshwrap.io",
                json!({"matchExpressions": [
                    {"key": INJECT, "operator": "NotIn", "values": ["enabled"]}, never]}),
                json!({"matchLabels": {INJECT: "true"}}),
            ),
        ]
    });
    if !req.self_signed {
        configuration["metadata"]["annotations"] = json!({"cert-manager.io/inject-ca-from": format!("{ns}/{NAME}")});
    }
    out.push(configuration);
    Ok(out)
}

/// The YAML stream, with a header that says what it is and how options
/// reach pods.
pub fn render(req: &Request) -> Result<String, String> {
    let objects = objects(req)?;
    let header = format!(
        "# meshwrap's admission webhook (kubectl-meshwrap {}), from `kubectl-meshwrap manifests`.\n\
         # Label a namespace meshwrap.io/inject=enabled, or a pod meshwrap.io/inject: \"true\".\n\
         # Per-pod annotations: {CONTAINER}, {QUIT_POLICY}, {IMAGE}, {TIMEOUT}, {SIDECAR}.\n",
        crate::transform::VERSION
    );
    Ok(header + &crate::yaml::emit::documents(&objects))
}
