//! The Helm chart (charts/meshwrap) and the Helm 4 post-renderer plugin
//! (plugins/helm-meshwrap), with real Helm: PyPI's helm-python-sdk, which
//! carries Helm 4.2 as a library, driven by tests/helm/helm.py (one request
//! per process). Without it (`pip install helm-python-sdk==0.2.2`) each test
//! says so and is skipped; in CI (`.ci/run` installs it) it fails instead.
//!
//! - one truth, two front doors: for the same settings the chart and
//!   `kubectl-meshwrap manifests` make the same objects, compared object by
//!   object; Secrets and generated keys by shape (a webhook serving the
//!   rendered certificate is reached under the Service's name by a client
//!   trusting only the rendered caBundle), not bytes;
//! - what each documented set of values renders is its golden, which the root
//!   crate's schema test validates strictly (tests/schemas.rs), and lints
//!   strictly;
//! - self-managed certificates are kept across upgrades and rotated on
//!   purpose, Helm's `lookup` reading a stand-in API server;
//! - existing certificates (a Secret the user manages): nothing secret or
//!   random rendered, exactly the given caBundle, the named Secret mounted;
//! - the rendered matchConditions evaluate, as the API server would, to the
//!   expected decision without error (tests/common/conditions.rs);
//! - the plugin loads through Helm's own loader and injects a rendered chart,
//!   hooks too, as Helm runs it.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use base64::Engine;
use common::https::*;
use common::*;
use serde_json::{Value, json};

const WEBHOOK_IMAGE: &str = "registry.example.com/kubectl-meshwrap:0.1.0";

/// A fresh folder of its own: tests run in parallel.
fn scratch(name: &str) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let dir = std::env::temp_dir().join(format!("meshwrap-chart-{name}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn chart() -> String {
    repo().join("charts/meshwrap").to_string_lossy().into_owned()
}

/// Whether helm-python-sdk imports (once per test binary).
fn helm_ready() -> bool {
    static READY: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let ok = *READY.get_or_init(|| {
        Command::new("python3")
            .args(["-c", "import helm_python"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    have(
        ok,
        "real Helm: python3 -c 'import helm_python' failed; pip install helm-python-sdk==0.2.2 (Helm 4.2 as a library)",
    )
}

struct Helm {
    /// The answer, or Helm's error.
    answer: Result<Value, String>,
    stderr: String,
}

/// One request to real Helm, with Helm's homes in a scratch folder, and
/// `env` (HELM_PLUGINS, PATH) set before the library loads.
fn helm_with(request: Value, env: &[(&str, &str)]) -> Helm {
    let home = scratch("helm-home");
    let mut cmd = Command::new("python3");
    cmd.arg(repo().join("kubectl-meshwrap/tests/helm/helm.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, dir) in [
        ("HELM_CACHE_HOME", "cache"),
        ("HELM_CONFIG_HOME", "config"),
        ("HELM_DATA_HOME", "data"),
        ("HELM_PLUGINS", "plugins"),
    ] {
        cmd.env(k, home.join(dir));
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("python3");
    serde_json::to_writer(child.stdin.take().unwrap(), &request).unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let value: Value =
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("helm.py answered no JSON ({e}): {stdout}\n{stderr}"));
    let _ = std::fs::remove_dir_all(&home);
    let answer = match value.get("error") {
        Some(error) => Err(error.as_str().unwrap_or_default().to_string()),
        None => {
            assert_eq!(value["helm"], "v4.2.3", "the Helm this test was written against");
            Ok(value)
        }
    };
    Helm { answer, stderr }
}

fn helm(request: Value) -> Result<Value, String> {
    helm_with(request, &[]).answer
}

fn documents(text: &str) -> Vec<Value> {
    let (docs, error) = kubectl_meshwrap::yaml::tree::parse(text);
    assert!(error.is_none(), "{error:?}\n{text}");
    docs.iter().map(|d| d.root.to_json()).filter(|d| !d.is_null()).collect()
}

/// A documented set of values (charts/meshwrap/ci/NAME-values.yaml).
fn values(name: &str) -> Value {
    let path = repo().join(format!("charts/meshwrap/ci/{name}-values.yaml"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    documents(&text).pop().unwrap_or(json!({}))
}

/// Every object the chart renders, in template order, and NOTES.txt.
fn render(values: &Value, namespace: &str, kube_version: Option<&str>) -> Result<(Vec<Value>, String), String> {
    let mut request = json!({"op": "render", "chart": chart(), "values": values, "namespace": namespace});
    if let Some(v) = kube_version {
        request["kube_version"] = json!(v);
    }
    let answer = helm(request)?;
    objects_of(&answer["manifests"])
}

fn objects_of(manifests: &Value) -> Result<(Vec<Value>, String), String> {
    let files: BTreeMap<String, String> = serde_json::from_value(manifests.clone()).unwrap();
    let mut objects = Vec::new();
    let mut notes = String::new();
    for (name, text) in files {
        if name.ends_with("NOTES.txt") {
            notes = text;
        } else {
            objects.extend(documents(&text));
        }
    }
    Ok((objects, notes))
}

fn manifests(args: &[&str]) -> Vec<Value> {
    let mut all = vec!["manifests", "--image", IMAGE, "--webhook-image", WEBHOOK_IMAGE];
    all.extend(args);
    let run = kubectl_meshwrap(&all, "");
    assert_eq!(run.code, 0, "{args:?}: {}", run.stderr);
    documents(&run.stdout)
}

fn b64(v: &Value) -> String {
    String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(v.as_str().unwrap_or_else(|| panic!("not base64 text: {v}")))
            .unwrap(),
    )
    .unwrap()
}

/// The labels Helm's conventions add and manifests has no use for.
const HELM_LABELS: [&str; 4] = [
    "helm.sh/chart",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
];

/// Certificates, keys and bundles, which differ by construction, checked
/// by shape and replaced; Helm's own labels and the chart's bookkeeping
/// annotations on its Secret taken out.
fn comparable(mut doc: Value) -> Value {
    if let Some(labels) = doc["metadata"]["labels"].as_object_mut() {
        labels.retain(|k, _| !HELM_LABELS.contains(&k.as_str()));
    }
    if doc["kind"] == "Secret" {
        let data = doc["data"].as_object_mut().unwrap();
        for (key, pem) in [
            ("ca.crt", "CERTIFICATE"),
            ("ca.key", "PRIVATE KEY"),
            ("tls.crt", "CERTIFICATE"),
            ("tls.key", "PRIVATE KEY"),
        ] {
            let text = b64(&data[key]);
            assert!(
                text.starts_with("-----BEGIN ") && text.contains(pem),
                "{key} is not a PEM {pem}"
            );
            data[key] = json!("(PEM)");
        }
        if let Some(annotations) = doc["metadata"].get_mut("annotations").and_then(Value::as_object_mut) {
            annotations.remove("meshwrap.io/tls-generation");
            annotations.remove("meshwrap.io/ca-generation");
            annotations.remove("meshwrap.io/previous-ca");
            if annotations.is_empty() {
                doc["metadata"].as_object_mut().unwrap().remove("annotations");
            }
        }
    }
    if doc["kind"] == "MutatingWebhookConfiguration" {
        for w in doc["webhooks"].as_array_mut().unwrap() {
            if let Some(bundle) = w["clientConfig"].get("caBundle") {
                assert!(b64(bundle).starts_with("-----BEGIN CERTIFICATE-----"));
                w["clientConfig"]["caBundle"] = json!("(PEM bundle)");
            }
        }
    }
    doc
}

fn key(doc: &Value) -> String {
    format!(
        "{} {}",
        doc["kind"].as_str().unwrap(),
        doc["metadata"]["name"].as_str().unwrap()
    )
}

/// The two front doors' objects, compared one by one.
fn assert_same_objects(case: &str, chart: &[Value], printed: &[Value]) {
    // Helm creates the release's namespace (--create-namespace); a chart
    // does not template its own. manifests prints it for the namespace it
    // owns.
    let printed: Vec<&Value> = printed.iter().filter(|d| d["kind"] != "Namespace").collect();
    let by_key = |docs: Vec<&Value>| -> BTreeMap<String, Value> {
        docs.into_iter().map(|d| (key(d), comparable(d.clone()))).collect()
    };
    let (ours, theirs) = (by_key(chart.iter().collect()), by_key(printed));
    assert_eq!(
        ours.keys().collect::<Vec<_>>(),
        theirs.keys().collect::<Vec<_>>(),
        "{case}: the chart and manifests make different objects"
    );
    for (k, object) in &ours {
        assert!(
            object == &theirs[k],
            "{case}: {k} differs\nchart:     {}\nmanifests: {}",
            object,
            theirs[k]
        );
    }
}

/// A webhook serving the rendered certificate is reached under the
/// Service's names by a client that trusts only the rendered caBundle.
fn assert_bundle_reaches_the_certificate(objects: &[Value], namespace: &str) -> (String, String) {
    let secret = objects.iter().find(|d| d["kind"] == "Secret").expect("a Secret");
    let configuration = objects
        .iter()
        .find(|d| d["kind"] == "MutatingWebhookConfiguration")
        .unwrap();
    let bundle = b64(&configuration["webhooks"][0]["clientConfig"]["caBundle"]);
    assert_eq!(bundle, b64(&configuration["webhooks"][1]["clientConfig"]["caBundle"]));
    let (cert, key) = (b64(&secret["data"]["tls.crt"]), b64(&secret["data"]["tls.key"]));
    // A folder of its own (Webhook::start_with's is named by this and the
    // process): tests calling this run in parallel, and one writing its
    // pair over another's made the other's handshake fail.
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let webhook = Webhook::start_with(&format!("chart-tls-{n}"), &cert, &key, &[]);
    for name in [
        format!("meshwrap-webhook.{namespace}.svc"),
        format!("meshwrap-webhook.{namespace}.svc.cluster.local"),
    ] {
        let mut client = Client::connect_named(webhook.port, client_config(&bundle), &name).unwrap();
        assert_eq!(client.get("/healthz").unwrap().status, 200);
    }
    assert!(Client::connect_named(webhook.port, client_config(&bundle), "elsewhere.example.com").is_err());
    (bundle, b64(&secret["data"]["ca.crt"]))
}

/// (what, the chart's values, namespace, Kubernetes version, manifests' flags)
type Case<'a> = (&'a str, &'a Value, &'a str, Option<&'a str>, Vec<&'a str>);

#[test]
fn the_chart_and_manifests_make_the_same_objects_for_the_same_settings() {
    if !helm_ready() {
        return;
    }
    let defaults = values("default");
    let self_managed = values("self-managed");
    // Existing certificates, without the ServiceMonitor manifests has no
    // flag for; manifests reads the CA as PEM from a file.
    let mut existing = values("existing");
    existing["serviceMonitor"]["enabled"] = json!(false);
    let ca_file = scratch("existing-ca").join("ca.crt");
    std::fs::write(&ca_file, b64(&existing["certificates"]["existing"]["caBundle"])).unwrap();
    let ca_file = ca_file.to_string_lossy().into_owned();
    let cases: [Case; 6] = [
        ("defaults", &defaults, "meshwrap-system", None, vec![]),
        (
            "defaults on 1.30",
            &defaults,
            "meshwrap-system",
            Some("v1.30.0"),
            vec!["--kube-version", "1.30"],
        ),
        (
            "defaults on 1.29",
            &defaults,
            "meshwrap-system",
            Some("v1.29.8"),
            vec!["--kube-version", "v1.29.8"],
        ),
        (
            "defaults in the user's namespace",
            &defaults,
            "platform-tools",
            None,
            vec!["--namespace", "platform-tools"],
        ),
        (
            "self-managed, every pod option changed, events off, pod CIDRs",
            &self_managed,
            "mesh-tools",
            Some("v1.28.15"),
            vec![
                "--namespace",
                "mesh-tools",
                "--kube-version",
                "1.28",
                "--self-signed",
                "--mesh",
                "linkerd,vault",
                "--native",
                "prefer",
                "--sidecar",
                "istio",
                "--timeout",
                "2m",
                "--quit-policy",
                "on-success",
                "--delivery",
                "image-volume",
                "--run-as-user",
                "none",
                "--resources",
                "requests.cpu=20m,limits.memory=64Mi",
                "--events",
                "off",
                "--pod-cidr",
                "10.244.0.0/16,fd00:10:244::/56",
            ],
        ),
        (
            "existing certificates",
            &existing,
            "meshwrap-system",
            None,
            vec!["--tls-secret", "meshwrap-serving-tls", "--ca-bundle", &ca_file],
        ),
    ];
    for (case, values, namespace, kube, args) in cases {
        let (objects, _) = render(values, namespace, kube).unwrap_or_else(|e| panic!("{case}: {e}"));
        let printed = manifests(&args);
        assert_same_objects(case, &objects, &printed);
        // Both sides' certificates verify as the API server would use them.
        if objects.iter().any(|d| d["kind"] == "Secret") {
            assert_bundle_reaches_the_certificate(&objects, namespace);
            assert_bundle_reaches_the_certificate(&printed, namespace);
        }
    }
}

/// The documented sets of values: each renders to its golden (the root
/// crate's schema test validates the goldens strictly) and lints strictly.
const DOCUMENTED: [&str; 5] = ["default", "self-managed", "operations", "servicemonitor", "existing"];

fn golden_text(objects: &[Value]) -> String {
    let mut text = String::from(
        "# What real Helm renders for charts/meshwrap/ci/ of the same name (kubectl-meshwrap/tests/chart.rs);\n\
         # certificates, keys and bundles are made at each render and redacted here.\n",
    );
    // A bundle the chart made with its Secret is random; one given
    // (certificates.mode=existing) is kept as it is.
    let made = objects.iter().any(|d| d["kind"] == "Secret");
    for doc in objects {
        let mut doc = doc.clone();
        if doc["kind"] == "Secret" {
            for (_, v) in doc["data"].as_object_mut().unwrap().iter_mut() {
                *v = json!("(random PEM, base64)");
            }
        }
        if doc["kind"] == "MutatingWebhookConfiguration" {
            for w in doc["webhooks"].as_array_mut().unwrap() {
                if made && w["clientConfig"].get("caBundle").is_some() {
                    w["clientConfig"]["caBundle"] = json!("(random CA, base64)");
                }
            }
        }
        text.push_str(&kubectl_meshwrap::yaml::emit::documents(&[doc]));
    }
    text
}

#[test]
fn each_documented_set_of_values_renders_its_golden_and_lints_strictly() {
    if !helm_ready() {
        return;
    }
    let dir = repo().join("kubectl-meshwrap/tests/chart");
    let _ = std::fs::create_dir_all(&dir);
    let mut files: Vec<String> = std::fs::read_dir(repo().join("charts/meshwrap/ci"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    let mut documented: Vec<String> = DOCUMENTED.iter().map(|n| format!("{n}-values.yaml")).collect();
    documented.sort();
    assert_eq!(files, documented, "charts/meshwrap/ci/ and DOCUMENTED differ");
    for name in DOCUMENTED {
        let values = values(name);
        let (objects, notes) = render(&values, "meshwrap-system", None).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            notes.contains("meshwrap.io/inject=enabled"),
            "{name}: NOTES.txt: {notes}"
        );
        let path = dir.join(format!("{name}.yaml"));
        let actual = golden_text(&objects);
        if std::env::var_os("MESHWRAP_BLESS").is_some() {
            std::fs::write(&path, &actual).unwrap();
        }
        let expected = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            expected == actual,
            "{} differs:\n{}",
            path.display(),
            diff(&expected, &actual)
        );
        // helm lint --strict, on the oldest and the newest Kubernetes.
        for kube in ["v1.28.0", "v1.36.0"] {
            let report = helm(json!({"op": "lint", "chart": chart(), "values": values,
                                     "namespace": "meshwrap-system", "kube_version": kube}))
            .unwrap();
            let serious: Vec<&Value> = report["messages"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|m| m["severity"].as_u64().unwrap() >= 2)
                .collect();
            assert!(
                serious.is_empty() && report["errors"].as_array().unwrap().is_empty(),
                "{name} on {kube}: {report}"
            );
        }
    }
}

#[test]
fn bad_values_are_refused_with_what_they_accept() {
    if !helm_ready() {
        return;
    }
    let good = values("default");
    let with = |patch: Value| {
        let mut v = good.clone();
        json_patch::merge(&mut v, &patch);
        v
    };
    // values.schema.json, as Helm checks it before rendering.
    for (patch, says) in [
        (json!({"inject": {"native": "maybe"}}), "/inject/native"),
        (json!({"inject": {"workloads": "services"}}), "/inject/workloads"),
        (json!({"inject": {"mesh": ["consul"]}}), "/inject/mesh/0"),
        (json!({"inject": {"quitPolicy": "sometimes"}}), "/inject/quitPolicy"),
        (json!({"inject": {"timeout": "ten minutes"}}), "/inject/timeout"),
        (json!({"inject": {"runAsUser": "root"}}), "/inject/runAsUser"),
        // What the webhook refuses at start (MESHWRAP_SIDECAR, MESHWRAP_IMAGE):
        // a crash-looping webhook refuses every pod under failurePolicy Fail.
        (json!({"inject": {"sidecar": "istoi"}}), "/inject/sidecar"),
        (
            json!({"inject": {"image": "Registry.Example.com/Mesh Wrap:0.1"}}),
            "/inject/image",
        ),
        (
            json!({"admission": {"failurePolicy": "Retry"}}),
            "/admission/failurePolicy",
        ),
        (
            json!({"admission": {"timeoutSeconds": 31}}),
            "/admission/timeoutSeconds",
        ),
        (
            json!({"webhook": {"server": {"maxSourceShare": "0%"}}}),
            "/webhook/server/maxSourceShare",
        ),
        (
            json!({"webhook": {"server": {"idleTimeout": "two minutes"}}}),
            "/webhook/server/idleTimeout",
        ),
        (json!({"certificates": {"mode": "vault"}}), "/certificates/mode"),
        (
            json!({"certificates": {"mode": "existing"}}),
            "/certificates/existing/secretName",
        ),
        (
            json!({"certificates": {"mode": "existing", "existing": {"secretName": "tls"}}}),
            "/certificates/existing/caBundle",
        ),
        (
            json!({"certificates": {"mode": "existing", "existing": {"secretName": "tls", "caBundle": "-----BEGIN CERTIFICATE-----"}}}),
            "/certificates/existing/caBundle",
        ),
        (
            json!({"certificates": {"mode": "existing", "existing": {"secretName": "TLS_secret", "caBundle": "aGk="}}}),
            "/certificates/existing/secretName",
        ),
        (json!({"evnts": {"enabled": false}}), "evnts"),
    ] {
        let error = helm(json!({"op": "schema", "chart": chart(), "values": with(patch.clone())})).unwrap_err();
        assert!(error.contains(says), "{patch}: {error}");
    }
    // And what the templates check.
    for (values, namespace, says) in [
        (
            json!({"webhook": {"image": {"repository": "r"}}}),
            "meshwrap-system",
            "inject.image is required",
        ),
        (
            json!({"inject": {"image": "i"}}),
            "meshwrap-system",
            "webhook.image.repository is required",
        ),
        (
            good.clone(),
            "kube-system",
            "never installed into a system namespace or default",
        ),
        (
            good.clone(),
            "default",
            "never installed into a system namespace or default",
        ),
        (
            with(json!({"podMonitor": {"enabled": true}, "serviceMonitor": {"enabled": true}})),
            "meshwrap-system",
            "choose one",
        ),
        (
            with(json!({"networkPolicy": {"podCIDRs": ["pods"]}})),
            "meshwrap-system",
            "podCIDRs",
        ),
    ] {
        let error = render(&values, namespace, None).unwrap_err();
        assert!(error.contains(says), "{values} in {namespace}: {error}");
    }
    // What the schema lets through and the templates refuse: base64 of
    // something that is not a certificate, or that holds a key.
    let pem = |text: &str| base64::engine::general_purpose::STANDARD.encode(text);
    for (bundle, says) in [
        (pem("hello"), "certificates.existing.caBundle is not a PEM certificate"),
        (
            pem(
                "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n-----BEGIN PRIVATE KEY-----\nMIGH\n-----END PRIVATE KEY-----\n",
            ),
            "certificates.existing.caBundle holds a private key",
        ),
    ] {
        let values = with(json!({"certificates": {"mode": "existing",
                                                  "existing": {"secretName": "tls", "caBundle": bundle}}}));
        let error = render(&values, "meshwrap-system", None)
            .err()
            .unwrap_or_else(|| panic!("rendered, though the templates should refuse it: {says}"));
        assert!(error.contains(says), "{error}");
    }
    // And, where the schema is skipped (helm install
    // --skip-schema-validation), the templates name the missing value.
    for (existing, says) in [
        (
            json!({}),
            "certificates.existing.secretName is required with certificates.mode=existing",
        ),
        (
            json!({"secretName": "tls"}),
            "certificates.existing.caBundle is required with certificates.mode=existing",
        ),
    ] {
        let values = with(json!({"certificates": {"mode": "existing", "existing": existing}}));
        let error = helm(
            json!({"op": "install", "chart": chart(), "name": "meshwrap", "values": values,
                                "namespace": "meshwrap-system", "skip_schema_validation": true}),
        )
        .unwrap_err();
        assert!(error.contains(says), "{error}");
    }
}

fn secret_of(objects: &[Value]) -> Value {
    objects.iter().find(|d| d["kind"] == "Secret").unwrap().clone()
}

fn render_upgrade(values: &Value, existing: Option<&Value>) -> Vec<Value> {
    let objects: Vec<&Value> = existing.into_iter().collect();
    let answer = helm(json!({"op": "render_with_lookup", "chart": chart(), "values": values,
                             "namespace": "meshwrap-system", "objects": objects}))
    .unwrap();
    objects_of(&answer["manifests"]).unwrap().0
}

fn pems(bundle: &str) -> Vec<String> {
    bundle
        .split_inclusive("-----END CERTIFICATE-----\n")
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

/// The webhook container's environment, by name.
fn webhook_env(objects: &[Value]) -> BTreeMap<String, Value> {
    let deployment = objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("a Deployment");
    let env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .expect("env");
    env.iter()
        .map(|e| (e["name"].as_str().unwrap().to_string(), e["value"].clone()))
        .collect()
}

#[test]
fn the_workloads_value_reaches_the_webhook_only_where_it_is_not_batch() {
    if !helm_ready() {
        return;
    }
    let (defaults, _) = render(&values("default"), "meshwrap-system", None).unwrap();
    assert!(!webhook_env(&defaults).contains_key("MESHWRAP_WORKLOADS"));
    let mut all = values("default");
    json_patch::merge(&mut all, &json!({"inject": {"workloads": "all"}}));
    let (objects, _) = render(&all, "meshwrap-system", None).unwrap();
    assert_eq!(webhook_env(&objects)["MESHWRAP_WORKLOADS"], "all");
}

#[test]
fn the_servers_load_limits_reach_the_webhook_only_where_set() {
    if !helm_ready() {
        return;
    }
    let names = [
        "MESHWRAP_MAX_CONNECTIONS",
        "MESHWRAP_MAX_HANDSHAKES",
        "MESHWRAP_MAX_SOURCE_SHARE",
        "MESHWRAP_CLIENT_TIMEOUT",
        "MESHWRAP_IDLE_TIMEOUT",
    ];
    let (defaults, _) = render(&values("default"), "meshwrap-system", None).unwrap();
    let env = webhook_env(&defaults);
    for name in names {
        assert!(
            !env.contains_key(name),
            "{name} set by default: the webhook's own default stands"
        );
    }
    let mut set = values("default");
    json_patch::merge(
        &mut set,
        &json!({"webhook": {"server": {"maxConnections": 1024, "maxHandshakes": "128",
            "maxSourceShare": "10%", "clientTimeout": "5s", "idleTimeout": "100s"}}}),
    );
    let (objects, _) = render(&set, "meshwrap-system", None).unwrap();
    let env = webhook_env(&objects);
    for (name, value) in names.iter().zip(["1024", "128", "10%", "5s", "100s"]) {
        assert_eq!(env.get(*name), Some(&json!(value)), "{name}");
    }
}

/// Evictions the PodDisruptionBudget allows with every replica ready, as
/// the disruption controller counts them for an integer minAvailable
/// (kubernetes pkg/controller/disruption: currentHealthy - desiredHealthy).
fn disruptions_allowed(replicas: i64, pdb: &Value) -> i64 {
    replicas - pdb["spec"]["minAvailable"].as_i64().expect("an integer minAvailable")
}

#[test]
fn the_disruption_budget_never_blocks_a_drain_and_one_replica_renders_none() {
    if !helm_ready() {
        return;
    }
    let with = |patch: Value| {
        let mut v = values("default");
        json_patch::merge(&mut v, &patch);
        v
    };
    let pdb = |objects: &[Value]| objects.iter().find(|o| o["kind"] == "PodDisruptionBudget").cloned();
    // One replica: minAvailable 1 would allow no eviction ever (drains and
    // node upgrades hang), so there is no budget.
    let (one, _) = render(&with(json!({"webhook": {"replicas": 1}})), "meshwrap-system", None).unwrap();
    let deployment = one.iter().find(|o| o["kind"] == "Deployment").unwrap();
    assert_eq!(deployment["spec"]["replicas"], 1);
    assert_eq!(pdb(&one), None, "one replica: no PodDisruptionBudget");
    // The defaults (two) and the operations values (three, minAvailable 2)
    // each allow one eviction at a time.
    for (values, replicas) in [(values("default"), 2), (values("operations"), 3)] {
        let (objects, _) = render(&values, "meshwrap-system", None).unwrap();
        let budget = pdb(&objects).expect("a PodDisruptionBudget with more than one replica");
        assert_eq!(disruptions_allowed(replicas, &budget), 1, "{budget}");
    }
    // A minAvailable that allows none is refused with the values named.
    for min in [json!(3), json!("100%")] {
        let values = with(json!({"webhook": {"replicas": 3, "podDisruptionBudget": {"minAvailable": min}}}));
        let error = render(&values, "meshwrap-system", None).unwrap_err();
        assert!(
            error.contains("webhook.podDisruptionBudget.minAvailable") && error.contains("webhook.replicas 3"),
            "{error}"
        );
    }
}

/// Whether a webhook serving `secret`'s pair is reached, under the
/// Service's name, by a client trusting only `bundle` (as the API server).
fn trusts(bundle: &str, secret: &Value) -> bool {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let webhook = Webhook::start_with(
        &format!("chart-trusts-{n}"),
        &b64(&secret["data"]["tls.crt"]),
        &b64(&secret["data"]["tls.key"]),
        &[],
    );
    Client::connect_named(
        webhook.port,
        client_config(bundle),
        "meshwrap-webhook.meshwrap-system.svc",
    )
    .is_ok()
}

fn bundle_of(objects: &[Value]) -> String {
    let configuration = objects
        .iter()
        .find(|d| d["kind"] == "MutatingWebhookConfiguration")
        .unwrap();
    b64(&configuration["webhooks"][0]["clientConfig"]["caBundle"])
}

#[test]
fn self_managed_certificates_are_kept_on_upgrade_and_rotated_on_purpose_without_a_trust_gap() {
    if !helm_ready() {
        return;
    }
    let mut values = values("default");
    values["certificates"] = json!({"mode": "self-managed"});
    // Install: no Secret yet, a new CA (its key kept in the Secret) and a
    // serving pair; the pods mount only the serving pair.
    let installed = render_upgrade(&values, None);
    let (bundle, ca) = assert_bundle_reaches_the_certificate(&installed, "meshwrap-system");
    assert_eq!(pems(&bundle), [ca.trim()]);
    let secret = secret_of(&installed);
    assert_eq!(secret["metadata"]["annotations"]["meshwrap.io/tls-generation"], "1");
    assert_eq!(secret["metadata"]["annotations"]["meshwrap.io/ca-generation"], "1");
    assert!(b64(&secret["data"]["ca.key"]).contains("PRIVATE KEY"));
    let deployment = installed.iter().find(|d| d["kind"] == "Deployment").unwrap();
    assert_eq!(
        deployment["spec"]["template"]["spec"]["volumes"][0]["secret"]["items"],
        json!([{"key": "tls.crt", "path": "tls.crt"}, {"key": "tls.key", "path": "tls.key"}]),
        "the CA's key is never mounted"
    );

    // Upgrade: the Secret the cluster holds is kept byte for byte, and the
    // bundle trusts its CA.
    let upgraded = render_upgrade(&values, Some(&secret));
    assert_eq!(secret_of(&upgraded)["data"], secret["data"]);
    assert_eq!(bundle_of(&upgraded), bundle);

    // The same objects as manifests --self-signed, shape for shape, is the
    // first test's; here what the API server trusts at each step.
    assert!(trusts(&bundle, &secret));
    assert!(
        !trusts(&bundle, &secret_of(&render_upgrade(&values, None))),
        "another install's CA"
    );
}

#[test]
fn rotating_the_serving_certificate_keeps_its_ca_so_a_rollback_and_a_second_rotation_stay_trusted() {
    if !helm_ready() {
        return;
    }
    let mut values = values("default");
    values["certificates"] = json!({"mode": "self-managed"});
    let rev1 = render_upgrade(&values, None);
    let secret1 = secret_of(&rev1);
    // generation 2: a new serving pair, signed by the same CA; the bundle
    // is the same bytes.
    values["certificates"]["selfManaged"] = json!({"generation": 2});
    let rev2 = render_upgrade(&values, Some(&secret1));
    let secret2 = secret_of(&rev2);
    assert_ne!(secret2["data"]["tls.key"], secret1["data"]["tls.key"]);
    assert_eq!(secret2["data"]["ca.crt"], secret1["data"]["ca.crt"]);
    assert_eq!(secret2["data"]["ca.key"], secret1["data"]["ca.key"]);
    assert_eq!(secret2["metadata"]["annotations"]["meshwrap.io/tls-generation"], "2");
    assert_eq!(bundle_of(&rev2), bundle_of(&rev1));
    // generation 3 before the kubelet swapped the pods' Secret to rev2's.
    values["certificates"]["selfManaged"] = json!({"generation": 3});
    let rev3 = render_upgrade(&values, Some(&secret2));
    let secret3 = secret_of(&rev3);
    // Every revision's bundle (a forward upgrade, `helm rollback`, which
    // applies an older revision's bundle as it was stored, and a second
    // rotation) trusts every revision's certificate a pod may still serve
    // while the kubelet swaps its Secret volume.
    for (what, bundle) in [
        ("rev1", bundle_of(&rev1)),
        ("rev2", bundle_of(&rev2)),
        ("rev3", bundle_of(&rev3)),
    ] {
        for (served, secret) in [("rev1", &secret1), ("rev2", &secret2), ("rev3", &secret3)] {
            assert!(
                trusts(&bundle, secret),
                "{what}'s caBundle does not trust {served}'s certificate"
            );
        }
    }
}

#[test]
fn rotating_the_ca_is_a_separate_step_that_keeps_the_two_previous_cas_trusted() {
    if !helm_ready() {
        return;
    }
    let mut values = values("default");
    values["certificates"] = json!({"mode": "self-managed"});
    let rev1 = render_upgrade(&values, None);
    let secret1 = secret_of(&rev1);
    let ca1 = b64(&secret1["data"]["ca.crt"]);
    let mut revisions = vec![(rev1, secret1)];
    for generation in 2..=4 {
        values["certificates"]["selfManaged"] = json!({"caGeneration": generation});
        let previous = revisions.last().unwrap().1.clone();
        let rev = render_upgrade(&values, Some(&previous));
        let secret = secret_of(&rev);
        assert_ne!(secret["data"]["ca.key"], previous["data"]["ca.key"], "a new CA");
        assert_eq!(
            secret["metadata"]["annotations"]["meshwrap.io/ca-generation"],
            generation.to_string()
        );
        revisions.push((rev, secret));
    }
    let cas: Vec<String> = revisions
        .iter()
        .map(|(_, s)| b64(&s["data"]["ca.crt"]).trim().to_string())
        .collect();
    // Newest first: its own CA, then the two before it.
    assert_eq!(pems(&bundle_of(&revisions[1].0)), [cas[1].clone(), cas[0].clone()]);
    assert_eq!(
        pems(&bundle_of(&revisions[2].0)),
        [cas[2].clone(), cas[1].clone(), cas[0].clone()]
    );
    assert_eq!(
        pems(&bundle_of(&revisions[3].0)),
        [cas[3].clone(), cas[2].clone(), cas[1].clone()]
    );
    // Two CA rotations within the kubelet's swap: the pods' first
    // certificate is still trusted.
    assert!(trusts(&bundle_of(&revisions[2].0), &revisions[0].1));
    // A later upgrade keeps the rotated pair and the bundle.
    let last = &revisions[3];
    let later = render_upgrade(&values, Some(&last.1));
    assert_eq!(secret_of(&later)["data"], last.1["data"]);
    assert_eq!(bundle_of(&later), bundle_of(&last.0));

    // An older chart's Secret (no CA key, no ca-generation): kept whole
    // while nothing rotates, so the upgrade to this chart changes no trust.
    let mut older = revisions[0].1.clone();
    older["data"].as_object_mut().unwrap().remove("ca.key");
    older["metadata"]["annotations"]
        .as_object_mut()
        .unwrap()
        .remove("meshwrap.io/ca-generation");
    values["certificates"]["selfManaged"] = json!({});
    let kept = render_upgrade(&values, Some(&older));
    assert_eq!(secret_of(&kept)["data"], older["data"]);
    assert_eq!(pems(&bundle_of(&kept)), [ca1.trim()]);
    // A Secret the chart did not make (manifests', cert-manager's), or an
    // older chart's at its next rotation (it cannot sign without the CA's
    // key): a new CA, the old one trusted.
    let mut foreign = revisions[0].1.clone();
    foreign["metadata"]["annotations"] = json!({});
    for (secret, selfmanaged) in [(foreign, json!({})), (older, json!({"generation": 2}))] {
        values["certificates"]["selfManaged"] = selfmanaged;
        let replaced = render_upgrade(&values, Some(&secret));
        let (bundle, new_ca) = assert_bundle_reaches_the_certificate(&replaced, "meshwrap-system");
        assert_ne!(new_ca, ca1);
        assert_eq!(pems(&bundle), [new_ca.trim(), ca1.trim()]);
        assert!(trusts(&bundle, &secret));
    }
}

#[test]
fn existing_certificates_render_no_secret_and_exactly_the_given_ca_bundle_every_time() {
    if !helm_ready() {
        return;
    }
    let values = values("existing");
    let given = &values["certificates"]["existing"];
    let (objects, notes) = render(&values, "meshwrap-system", None).unwrap();
    let kinds: Vec<&str> = objects.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    for kind in ["Secret", "Issuer", "Certificate"] {
        assert!(!kinds.contains(&kind), "{kind} in {kinds:?}");
    }
    let configuration = objects
        .iter()
        .find(|d| d["kind"] == "MutatingWebhookConfiguration")
        .unwrap();
    assert!(
        configuration["metadata"].get("annotations").is_none(),
        "{configuration}"
    );
    for webhook in configuration["webhooks"].as_array().unwrap() {
        assert_eq!(webhook["clientConfig"]["caBundle"], given["caBundle"]);
    }
    let deployment = objects.iter().find(|d| d["kind"] == "Deployment").unwrap();
    assert_eq!(
        deployment["spec"]["template"]["spec"]["volumes"],
        json!([{"name": "tls", "secret": {"secretName": given["secretName"], "items": [
            {"key": "tls.crt", "path": "tls.crt"}, {"key": "tls.key", "path": "tls.key"}]}}])
    );
    // The ServiceMonitor verifies the webhook with the same CA, from a
    // ConfigMap (the user's Secret need not hold a ca.crt).
    let ca = objects.iter().find(|d| d["kind"] == "ConfigMap").unwrap();
    assert_eq!(ca["data"]["ca.crt"].as_str().unwrap(), b64(&given["caBundle"]));
    let monitor = objects.iter().find(|d| d["kind"] == "ServiceMonitor").unwrap();
    assert_eq!(
        monitor["spec"]["endpoints"][0]["tlsConfig"]["ca"],
        json!({"configMap": {"name": ca["metadata"]["name"], "key": "ca.crt"}})
    );
    assert!(notes.contains("meshwrap-serving-tls"), "{notes}");
    // Every render is the same (helm template, as Argo CD renders).
    assert_eq!(render(&values, "meshwrap-system", None).unwrap().0, objects);
    // manifests --tls-secret --ca-bundle: the same bundle, byte for byte.
    let ca_file = scratch("existing-same-ca").join("ca.crt");
    std::fs::write(&ca_file, b64(&given["caBundle"])).unwrap();
    let printed = manifests(&[
        "--tls-secret",
        "meshwrap-serving-tls",
        "--ca-bundle",
        ca_file.to_str().unwrap(),
    ]);
    let printed = printed
        .iter()
        .find(|d| d["kind"] == "MutatingWebhookConfiguration")
        .unwrap();
    for webhook in printed["webhooks"].as_array().unwrap() {
        assert_eq!(webhook["clientConfig"]["caBundle"], given["caBundle"]);
    }

    // A Secret made elsewhere (here by manifests --self-signed) and its CA:
    // a webhook serving that Secret is reached under the Service's name by
    // a client trusting only the bundle the chart rendered.
    let made = manifests(&["--self-signed"]);
    let secret = made.iter().find(|d| d["kind"] == "Secret").unwrap();
    let mut own = values.clone();
    own["certificates"]["existing"] = json!({"secretName": "platform-tls", "caBundle": secret["data"]["ca.crt"]});
    let (objects, _) = render(&own, "meshwrap-system", None).unwrap();
    let configuration = objects
        .iter()
        .find(|d| d["kind"] == "MutatingWebhookConfiguration")
        .unwrap();
    let bundle = b64(&configuration["webhooks"][0]["clientConfig"]["caBundle"]);
    let webhook = Webhook::start_with(
        "chart-existing",
        &b64(&secret["data"]["tls.crt"]),
        &b64(&secret["data"]["tls.key"]),
        &[],
    );
    let mut client = Client::connect_named(
        webhook.port,
        client_config(&bundle),
        "meshwrap-webhook.meshwrap-system.svc",
    )
    .unwrap();
    assert_eq!(client.get("/healthz").unwrap().status, 200);
}

#[test]
fn the_chart_packages_as_the_release_with_the_crates_version() {
    if !helm_ready() {
        return;
    }
    let answer = helm(json!({"op": "metadata", "chart": chart()})).unwrap();
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(answer["metadata"]["version"], version);
    assert_eq!(answer["metadata"]["appVersion"], version);
    assert_eq!(answer["metadata"]["apiVersion"], "v2");
    let dir = scratch("chart-package");
    let answer = helm(json!({"op": "package", "chart": chart(), "destination": dir})).unwrap();
    let path = PathBuf::from(answer["path"].as_str().unwrap());
    assert_eq!(path, dir.join(format!("meshwrap-{version}.tgz")));
    // The documented value sets stay out of the package (.helmignore).
    let list = Command::new("tar").arg("tzf").arg(&path).output().unwrap();
    let names = String::from_utf8_lossy(&list.stdout);
    assert!(names.contains("meshwrap/values.schema.json") && names.contains("meshwrap/templates/NOTES.txt"));
    assert!(!names.contains("/ci/"), "{names}");
    let _ = std::fs::remove_dir_all(dir);
}

// ---- the Helm 4 post-renderer plugin ---------------------------------------

fn plugin_dir() -> PathBuf {
    repo().join("plugins/helm-meshwrap")
}

/// Helm's plugin folder holding `plugin.yaml` (and the script) as given.
fn plugins_with(manifest: &str) -> PathBuf {
    let dir = scratch("helm-plugins");
    let plugin = dir.join("helm-meshwrap");
    std::fs::create_dir_all(&plugin).unwrap();
    std::fs::write(plugin.join("plugin.yaml"), manifest).unwrap();
    std::fs::copy(plugin_dir().join("post-render"), plugin.join("post-render")).unwrap();
    dir
}

fn path_with_kubectl_meshwrap() -> String {
    let bin_dir = Path::new(bin()).parent().unwrap();
    format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default())
}

/// `helm install --dry-run=client train tests/helm/train --post-renderer
/// meshwrap [--post-renderer-args ...]`, through Helm's plugin loader.
fn install_through_plugin(plugins: &Path, values: Value, args: &[&str], env: &[(&str, &str)]) -> Helm {
    let path = path_with_kubectl_meshwrap();
    let plugins = plugins.to_string_lossy().into_owned();
    let mut all = vec![("HELM_PLUGINS", plugins.as_str()), ("PATH", path.as_str())];
    all.extend(env);
    helm_with(
        json!({"op": "install", "chart": repo().join("kubectl-meshwrap/tests/helm/train"), "values": values,
               "namespace": "team-a", "post_renderer": "meshwrap", "post_renderer_args": args}),
        &all,
    )
}

#[test]
fn the_plugin_manifest_is_what_helm_4_accepts_and_carries_the_release_version() {
    let text = std::fs::read_to_string(plugin_dir().join("plugin.yaml")).unwrap();
    let manifest = documents(&text).pop().unwrap();
    // Helm 4.2's MetadataV1 keys, and no config: a postrenderer/v1 plugin
    // has none (internal/plugin/schema/postrenderer.go).
    let keys: Vec<&str> = manifest.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        ["apiVersion", "type", "name", "version", "runtime", "runtimeConfig"]
    );
    assert_eq!(manifest["type"], "postrenderer/v1");
    assert_eq!(manifest["version"], env!("CARGO_PKG_VERSION"));
    if !helm_ready() {
        return;
    }
    // Helm's own loader takes it (it ignores a plugin it cannot load, so
    // the install would say "not found"), and the same loader refuses each
    // thing Helm 4.2 is strict about: the check can fail.
    let ok = install_through_plugin(&plugins_with(&text), json!({}), &["--image", IMAGE], &[]);
    assert!(ok.answer.is_ok(), "{:?}\n{}", ok.answer, ok.stderr);
    for (broken, says) in [
        (
            text.replace("version: 0.1.0", "version: v0.1.0"),
            "must be valid semver",
        ),
        (format!("{text}config:\n  image: x\n"), "field image not found"),
        (format!("{text}usage: inject\n"), "field usage not found"),
        (
            text.replace("apiVersion: v1", "apiVersion: v2"),
            "invalid plugin apiVersion",
        ),
    ] {
        let run = install_through_plugin(&plugins_with(&broken), json!({}), &["--image", IMAGE], &[]);
        let error = run.answer.unwrap_err();
        assert!(error.contains("not found"), "{error}");
        assert!(run.stderr.contains(says), "{says}: {}", run.stderr);
    }
}

#[test]
fn the_plugin_injects_a_rendered_chart_as_helm_4_runs_it() {
    if !helm_ready() {
        return;
    }
    let plugins = plugins_with(&std::fs::read_to_string(plugin_dir().join("plugin.yaml")).unwrap());
    // Options from --post-renderer-args, or from the environment.
    for (args, env) in [
        (vec!["--image", IMAGE], vec![]),
        (vec![], vec![("MESHWRAP_IMAGE", IMAGE)]),
    ] {
        let run = install_through_plugin(&plugins, json!({}), &args, &env);
        let release = run.answer.unwrap_or_else(|e| panic!("{e}\n{}", run.stderr));
        let manifest = release["manifest"].as_str().unwrap();
        let job = documents(manifest).into_iter().find(|d| d["kind"] == "Job").unwrap();
        let pod = &job["spec"]["template"];
        assert!(
            pod["metadata"]["annotations"]["meshwrap.io/status"]
                .as_str()
                .unwrap()
                .contains("\"container\":\"train\""),
            "{manifest}"
        );
        assert_eq!(pod["spec"]["containers"][0]["command"][0], "/mesh/meshwrap");
        assert_eq!(pod["spec"]["initContainers"][0]["image"], IMAGE);
        // The chart's Deployment (no command) is a service: left alone, and
        // it fails nothing.
        let deployment = documents(manifest)
            .into_iter()
            .find(|d| d["kind"] == "Deployment")
            .unwrap();
        assert!(
            deployment["spec"]["template"]["spec"].get("initContainers").is_none(),
            "{manifest}"
        );
        // inject's report reaches the user on success too, although Helm 4
        // keeps a plugin's stderr to itself.
        assert!(
            run.stderr
                .contains("Job/train-train spec.template: injected: container train")
                && run.stderr.contains("1 long-running workload left alone"),
            "{}",
            run.stderr
        );
        assert!(!run.stderr.contains("Deployment/"), "{}", run.stderr);
    }
    // Hooks are post-rendered too (a test hook with no command cannot be
    // wrapped), and a skip fails the install with inject's reason where the
    // user sees it, although Helm 4 keeps a plugin's stderr to itself.
    let run = install_through_plugin(&plugins, json!({"hookCommand": null}), &["--image", IMAGE], &[]);
    let error = run.answer.unwrap_err();
    assert!(error.contains("plugin \"meshwrap\" exited with error"), "{error}");
    assert!(
        run.stderr
            .contains("Pod/train-check pod: skipped: container check has no command"),
        "{}",
        run.stderr
    );
    // No image: one line saying so, and the install fails.
    let run = install_through_plugin(&plugins, json!({}), &[], &[]);
    assert!(run.answer.is_err());
    assert!(
        run.stderr.contains("--image (MESHWRAP_IMAGE) is required"),
        "{}",
        run.stderr
    );
}

#[test]
fn the_post_render_script_is_a_helm_3_post_renderer_too() {
    // Helm 3 runs --post-renderer PATH with the chart on stdin, stdout back,
    // and shows the script's stderr in its error.
    let template = "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: train\nspec:\n  template:\n    metadata:\n      labels:\n        sidecar.istio.io/inject: \"true\"\n    spec:\n      restartPolicy: Never\n      containers:\n        - name: train\n          image: registry.example.com/train:1.0\n";
    let run = |stdin: &str| {
        let mut child = Command::new(plugin_dir().join("post-render"))
            .args(["--image", IMAGE])
            .env("PATH", path_with_kubectl_meshwrap())
            .env_remove("HELM_PLUGIN_NAME")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
        child.wait_with_output().unwrap()
    };
    let with_command = template.replace(
        "          image: registry.example.com/train:1.0\n",
        "          image: registry.example.com/train:1.0\n          command: [python, train.py]\n",
    );
    let out = run(&with_command);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("/mesh/meshwrap"));
    let report = String::from_utf8_lossy(&out.stderr);
    assert!(
        report.contains("meshwrap post-renderer:\n") && report.contains("Job/train spec.template: injected"),
        "{report}"
    );
    let out = run(template);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("container train has no command"), "{stderr}");
}

// ---- docs -----------------------------------------------------------------

/// Every leaf of values.yaml as (dotted path, YAML text of its default).
fn leaves(prefix: &str, value: &Value, out: &mut Vec<(String, String)>) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (k, v) in map {
                let path = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                leaves(&path, v, out);
            }
        }
        _ => out.push((prefix.to_string(), shown(value))),
    }
}

/// A default as the docs show it: a string bare unless YAML would read it as
/// something else (empty, a number, a boolean), the rest as JSON.
fn shown(value: &Value) -> String {
    match value {
        Value::String(s) if !s.is_empty() && s.parse::<f64>().is_err() && !["true", "false"].contains(&s.as_str()) => {
            s.clone()
        }
        _ => serde_json::to_string(value).unwrap(),
    }
}

#[test]
fn docs_webhook_md_lists_every_value_with_its_default() {
    let text = std::fs::read_to_string(repo().join("charts/meshwrap/values.yaml")).unwrap();
    let mut expected = Vec::new();
    leaves("", &documents(&text).pop().unwrap(), &mut expected);
    let docs = std::fs::read_to_string(repo().join("docs/webhook.md")).unwrap();
    // The table's rows: | `path` | `default` | meaning |
    let mut listed = Vec::new();
    for line in docs.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.split(" | ").collect();
        let (path, default) = (cells[0].trim_start_matches("| "), cells.get(1).copied().unwrap_or(""));
        if let (Some(path), Some(default)) = (
            path.strip_prefix('`').and_then(|p| p.strip_suffix('`')),
            default.strip_prefix('`').and_then(|d| d.strip_suffix('`')),
        ) && expected.iter().any(|(p, _)| p == path)
        {
            listed.push((path.to_string(), default.to_string()));
        }
    }
    assert_eq!(
        listed, expected,
        "docs/webhook.md's values table and charts/meshwrap/values.yaml differ"
    );
}

/// The chart's matchConditions as real Helm renders them, evaluated as the
/// API server evaluates them (tests/common/conditions.rs; manifests' are
/// in tests/manifests.rs): no pod makes one fail, and each sample pod is
/// left alone or sent as it should be.
#[test]
fn the_charts_match_conditions_evaluate_without_error_to_the_expected_decision() {
    if !helm_ready() {
        return;
    }
    for namespace in ["meshwrap-system", "platform-tools"] {
        let (objects, _) = render(&values("default"), namespace, Some("v1.30.0")).unwrap();
        let configuration = objects
            .iter()
            .find(|d| d["kind"] == "MutatingWebhookConfiguration")
            .unwrap();
        let decided = conditions::assert_match_conditions_decide_as_expected(configuration, namespace);
        assert_eq!(decided, 2 * conditions::samples(namespace).len());
    }
}
