//! `kubectl-meshwrap manifests`: what it prints is its golden (which the
//! root crate's schema test validates against Kubernetes' OpenAPI), what the
//! issue asks of each object holds, and `--self-signed` prints a CA bundle
//! that a client trusting it can use to reach the webhook serving the
//! printed certificate.

mod common;

use std::path::{Path, PathBuf};

use base64::Engine;
use common::https::*;
use common::*;
use serde_json::{Value, json};

const WEBHOOK_IMAGE: &str = "registry.example.com/kubectl-meshwrap:0.1.0";

fn goldens() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/manifests")
}

fn documents(text: &str) -> Vec<Value> {
    let (docs, error) = kubectl_meshwrap::yaml::tree::parse(text);
    assert!(error.is_none(), "{error:?}\n{text}");
    docs.iter().map(|d| d.root.to_json()).collect()
}

fn by_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

fn b64(s: &Value) -> String {
    String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(s.as_str().unwrap())
            .unwrap(),
    )
    .unwrap()
}

/// The random parts of a --self-signed run, replaced so it can be a golden.
fn redacted(docs: &[Value]) -> String {
    let mut text = String::new();
    for doc in docs {
        let mut doc = doc.clone();
        if doc["kind"] == "Secret" {
            for (_, v) in doc["data"].as_object_mut().unwrap().iter_mut() {
                *v = json!("(random PEM, base64)");
            }
        }
        if doc["kind"] == "MutatingWebhookConfiguration" {
            for w in doc["webhooks"].as_array_mut().unwrap() {
                w["clientConfig"]["caBundle"] = json!("(random CA, base64)");
            }
        }
        text.push_str(&kubectl_meshwrap::yaml::emit::documents(&[doc]));
    }
    text
}

fn check_golden(name: &str, actual: &str) {
    let path = goldens().join(name);
    if std::env::var_os("MESHWRAP_BLESS").is_some() {
        std::fs::write(&path, actual).unwrap();
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        expected == actual,
        "{} differs:\n{}",
        path.display(),
        diff(&expected, actual)
    );
}

#[test]
fn the_cert_manager_install_is_its_golden_and_safe_by_construction() {
    let run = kubectl_meshwrap(&["manifests", "--image", IMAGE, "--webhook-image", WEBHOOK_IMAGE], "");
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stderr, "");
    check_golden("cert-manager.yaml", &run.stdout);
    let docs = documents(&run.stdout);
    let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "Namespace",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "ClusterRole",
            "ClusterRoleBinding",
            "Issuer",
            "Certificate",
            "Issuer",
            "Certificate",
            "Service",
            "Deployment",
            "PodDisruptionBudget",
            "MutatingWebhookConfiguration"
        ]
    );
    // The account gives no token to pods that name it; the webhook's pod
    // asks for one itself (events_get_rbac_... has the rest).
    assert_eq!(
        by_kind(&docs, "ServiceAccount")[0]["automountServiceAccountToken"],
        false
    );

    let deployment = by_kind(&docs, "Deployment")[0];
    assert_eq!(deployment["spec"]["replicas"], 2);
    let pod = &deployment["spec"]["template"];
    assert_eq!(pod["metadata"]["labels"]["sidecar.istio.io/inject"], "false");
    assert_eq!(pod["metadata"]["annotations"]["sidecar.istio.io/inject"], "false");
    assert!(pod["spec"]["affinity"]["podAntiAffinity"].is_object());
    let container = &pod["spec"]["containers"][0];
    assert_eq!(container["image"], WEBHOOK_IMAGE);
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(container["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(container["securityContext"]["capabilities"]["drop"], json!(["ALL"]));
    assert_eq!(pod["spec"]["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["spec"]["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let env: Vec<&str> = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert!(
        env.contains(&"MESHWRAP_IMAGE") && env.contains(&"MESHWRAP_NAMESPACE"),
        "{env:?}"
    );
    // The drain fits in the grace period: 5 s delay + 20 s drain < 30 s.
    assert_eq!(pod["spec"]["terminationGracePeriodSeconds"], 30);
    assert_eq!(by_kind(&docs, "PodDisruptionBudget")[0]["spec"]["minAvailable"], 1);

    // A reissued CA keeps its key, so serving certificates it signed before
    // still verify; the serving key itself is rotated.
    let certificates = by_kind(&docs, "Certificate");
    assert_eq!(certificates[0]["spec"]["isCA"], true);
    assert_eq!(certificates[0]["spec"]["privateKey"]["rotationPolicy"], "Never");
    assert_eq!(certificates[1]["spec"]["privateKey"]["rotationPolicy"], "Always");
    assert!(by_kind(&docs, "NetworkPolicy").is_empty());
    assert!(run.stdout.contains("# No NetworkPolicy: with --pod-cidr"));

    let configuration = by_kind(&docs, "MutatingWebhookConfiguration")[0];
    assert_eq!(
        configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
        "meshwrap-system/meshwrap-webhook"
    );
    let webhooks = configuration["webhooks"].as_array().unwrap();
    assert_eq!(webhooks.len(), 2);
    for w in webhooks {
        assert_eq!(w["failurePolicy"], "Fail");
        assert_eq!(w["sideEffects"], "None");
        assert_eq!(w["matchPolicy"], "Equivalent");
        assert_eq!(w["reinvocationPolicy"], "IfNeeded");
        assert!(w["timeoutSeconds"].as_u64().unwrap() <= 10);
        assert_eq!(w["rules"][0]["operations"], json!(["CREATE"]));
        assert_eq!(w["rules"][0]["resources"], json!(["pods"]));
        assert_eq!(w["clientConfig"]["service"]["path"], "/mutate");
        let never = w["namespaceSelector"]["matchExpressions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["key"] == "kubernetes.io/metadata.name")
            .unwrap();
        assert_eq!(never["operator"], "NotIn");
        assert_eq!(never["values"], json!(["meshwrap-system", "kube-system"]));
    }
    assert_eq!(
        webhooks[0]["namespaceSelector"]["matchExpressions"][0],
        json!({"key": "meshwrap.io/inject", "operator": "In", "values": ["enabled"]})
    );
    assert_eq!(
        webhooks[0]["objectSelector"]["matchExpressions"][0],
        json!({"key": "meshwrap.io/inject", "operator": "NotIn", "values": ["false"]})
    );
    assert_eq!(
        webhooks[1]["objectSelector"]["matchLabels"],
        json!({"meshwrap.io/inject": "true"})
    );
}

#[test]
fn self_signed_embeds_a_ca_bundle_that_reaches_the_webhook_serving_its_certificate() {
    let run = kubectl_meshwrap(
        &[
            "manifests",
            "--self-signed",
            "--namespace",
            "mesh-tools",
            "--create-namespace",
            "--image",
            IMAGE,
            "--webhook-image",
            WEBHOOK_IMAGE,
            "--quit-policy",
            "on-success",
        ],
        "",
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let docs = documents(&run.stdout);
    check_golden("self-signed.yaml", &redacted(&docs));
    assert!(by_kind(&docs, "Issuer").is_empty() && by_kind(&docs, "Certificate").is_empty());
    let secret = by_kind(&docs, "Secret")[0];
    assert_eq!(secret["type"], "kubernetes.io/tls");
    // The CA's key, as the chart keeps it, and never mounted in the pods.
    assert!(b64(&secret["data"]["ca.key"]).contains("PRIVATE KEY"));
    assert_eq!(
        by_kind(&docs, "Deployment")[0]["spec"]["template"]["spec"]["volumes"][0]["secret"]["items"],
        json!([{"key": "tls.crt", "path": "tls.crt"}, {"key": "tls.key", "path": "tls.key"}])
    );
    let (cert, key) = (b64(&secret["data"]["tls.crt"]), b64(&secret["data"]["tls.key"]));
    let configuration = by_kind(&docs, "MutatingWebhookConfiguration")[0];
    let bundle = b64(&configuration["webhooks"][0]["clientConfig"]["caBundle"]);
    assert_eq!(bundle, b64(&configuration["webhooks"][1]["clientConfig"]["caBundle"]));
    assert!(configuration["metadata"].get("annotations").is_none());

    // The webhook serving the printed certificate, reached under the
    // Service's name by a client that trusts only the printed bundle.
    let webhook = Webhook::start_with("self-signed", &cert, &key, &[]);
    for name in [
        "meshwrap-webhook.mesh-tools.svc",
        "meshwrap-webhook.mesh-tools.svc.cluster.local",
    ] {
        let mut client = Client::connect_named(webhook.port, client_config(&bundle), name).unwrap();
        assert_eq!(client.get("/healthz").unwrap().status, 200);
    }
    assert!(Client::connect_named(webhook.port, client_config(&bundle), "elsewhere.example.com").is_err());
    // A second run makes another CA.
    let again = kubectl_meshwrap(
        &[
            "manifests",
            "--self-signed",
            "--image",
            IMAGE,
            "--webhook-image",
            WEBHOOK_IMAGE,
        ],
        "",
    );
    assert!(!again.stdout.contains(secret["data"]["tls.key"].as_str().unwrap()));
}

/// `--tls-secret NAME --ca-bundle FILE` (the chart's
/// certificates.mode=existing): the webhook mounts the Secret you manage,
/// the API server trusts exactly the file's CA, and nothing secret or random
/// is printed, so the output can be committed.
#[test]
fn a_secret_you_manage_is_mounted_and_exactly_its_ca_trusted_with_nothing_secret_printed() {
    let ca_file = goldens().join("example-ca.pem");
    let ca = ca_file.to_str().unwrap();
    let args = ["--tls-secret", "meshwrap-serving-tls", "--ca-bundle", ca];
    let run = manifests(&args);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stderr, "");
    check_golden("existing-secret.yaml", &run.stdout);
    assert_eq!(manifests(&args).stdout, run.stdout, "every run is the same");
    let docs = documents(&run.stdout);
    for kind in ["Secret", "Issuer", "Certificate"] {
        assert!(by_kind(&docs, kind).is_empty(), "{kind}");
    }
    let configuration = by_kind(&docs, "MutatingWebhookConfiguration")[0];
    assert!(
        configuration["metadata"].get("annotations").is_none(),
        "no cert-manager injection"
    );
    let pem = std::fs::read(&ca_file).unwrap();
    for webhook in configuration["webhooks"].as_array().unwrap() {
        assert_eq!(
            webhook["clientConfig"]["caBundle"],
            base64::engine::general_purpose::STANDARD.encode(&pem)
        );
    }
    let deployment = by_kind(&docs, "Deployment")[0];
    assert_eq!(
        deployment["spec"]["template"]["spec"]["volumes"],
        json!([{"name": "tls", "secret": {"secretName": "meshwrap-serving-tls", "items": [
            {"key": "tls.crt", "path": "tls.crt"}, {"key": "tls.key", "path": "tls.key"}]}}])
    );

    // Half of it, both ways at once, or a bundle that is not one: one line
    // naming the flag, and nothing printed.
    let dir = common::temp_dir("ca-bundles");
    let (key, empty) = (dir.join("with-key.pem"), dir.join("empty.pem"));
    let text = String::from_utf8(pem).unwrap();
    std::fs::write(
        &key,
        format!("{text}-----BEGIN PRIVATE KEY-----\nMIGH\n-----END PRIVATE KEY-----\n"),
    )
    .unwrap();
    std::fs::write(&empty, "not a certificate\n").unwrap();
    let (key, empty) = (key.to_str().unwrap(), empty.to_str().unwrap());
    for (args, says) in [
        (vec!["--tls-secret", "tls"], "--tls-secret needs --ca-bundle"),
        (vec!["--ca-bundle", ca], "--ca-bundle goes with --tls-secret"),
        (
            vec!["--tls-secret", "tls", "--ca-bundle", ca, "--self-signed"],
            "--self-signed: choose one",
        ),
        // The conflict first, not the missing bundle (newcomer-2026-12 #29).
        (
            vec!["--tls-secret", "tls", "--self-signed"],
            "--self-signed: choose one",
        ),
        (
            vec!["--tls-secret", "tls", "--ca-bundle", key],
            "--ca-bundle holds a private key",
        ),
        (
            vec!["--tls-secret", "tls", "--ca-bundle", empty],
            "--ca-bundle: no PEM certificate",
        ),
        (
            vec!["--tls-secret", "tls", "--ca-bundle", "/nonexistent/ca.pem"],
            "--ca-bundle /nonexistent/ca.pem",
        ),
        (vec!["--tls-secret", "TLS_secret", "--ca-bundle", ca], "--tls-secret"),
        (
            vec!["--tls-secret", "tls", "--ca-bundle", ca, "--previous-ca", ca],
            "--previous-ca goes with --self-signed",
        ),
    ] {
        let run = manifests(&args);
        // Bad input is a usage error, as every other flag's: exit 2.
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
        assert_eq!(run.stdout, "", "{args:?}");
        assert_eq!(run.stderr.lines().count(), 1, "{args:?}: {}", run.stderr);
        assert!(run.stderr.contains(says), "{args:?}: {}", run.stderr);
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn manifests_without_its_images_is_one_line_and_prints_nothing() {
    for (args, says) in [
        (vec!["manifests", "--webhook-image", WEBHOOK_IMAGE], "--image"),
        (vec!["manifests", "--image", IMAGE], "--webhook-image"),
        (
            vec![
                "manifests",
                "--image",
                IMAGE,
                "--webhook-image",
                WEBHOOK_IMAGE,
                "--quit-policy",
                "sometimes",
            ],
            "--quit-policy",
        ),
    ] {
        let run = kubectl_meshwrap(&args, "");
        assert_eq!(run.code, 2, "{args:?}");
        assert_eq!(run.stdout, "", "{args:?}");
        assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
        assert!(run.stderr.contains(says), "{}", run.stderr);
    }
}

fn manifests(extra: &[&str]) -> common::Run {
    let mut args = vec!["manifests", "--image", IMAGE, "--webhook-image", WEBHOOK_IMAGE];
    args.extend(extra);
    kubectl_meshwrap(&args, "")
}

#[test]
fn system_namespaces_and_bad_names_are_refused_with_one_line() {
    for (namespace, says) in [
        ("kube-system", "never installed into a system namespace or default"),
        ("kube-public", "never installed into a system namespace or default"),
        ("kube-node-lease", "never installed into a system namespace or default"),
        ("default", "never installed into a system namespace or default"),
        ("Mesh_Tools", "1 to 63 lowercase letters"),
        ("-x", "1 to 63 lowercase letters"),
    ] {
        let flag = format!("--namespace={namespace}");
        let run = manifests(&[&flag, "--self-signed"]);
        assert_eq!(run.code, 2, "{namespace}: {}", run.stderr);
        assert_eq!(run.stdout, "", "{namespace}");
        assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
        assert!(
            run.stderr.contains("--namespace") && run.stderr.contains(says),
            "{namespace}: {}",
            run.stderr
        );
    }
}

#[test]
fn a_namespace_is_printed_only_when_the_tool_owns_it() {
    let kinds = |run: &common::Run| -> Vec<String> {
        assert_eq!(run.code, 0, "{}", run.stderr);
        documents(&run.stdout)
            .iter()
            .map(|d| d["kind"].as_str().unwrap().to_string())
            .collect()
    };
    // An existing namespace of the user's: not created, not relabelled.
    let theirs = manifests(&["--namespace", "platform-tools"]);
    assert!(!kinds(&theirs).contains(&"Namespace".to_string()));
    assert!(theirs.stdout.contains("namespace: platform-tools"));
    let owned = manifests(&["--namespace", "platform-tools", "--create-namespace"]);
    let docs = documents(&owned.stdout);
    assert_eq!(by_kind(&docs, "Namespace")[0]["metadata"]["name"], "platform-tools");
    // The default namespace is the tool's own.
    assert_eq!(kinds(&manifests(&[]))[0], "Namespace");
}

#[test]
fn a_namespace_yaml_would_read_as_a_number_is_written_as_a_string() {
    let run = manifests(&["--namespace", "0x10", "--create-namespace"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("name: \"0x10\"\n"), "{}", run.stdout);
    assert!(!run.stdout.contains("namespace: 0x10"), "{}", run.stdout);
    for doc in documents(&run.stdout) {
        if let Some(ns) = doc["metadata"].get("namespace") {
            assert_eq!(ns, "0x10");
        }
    }
    let docs = documents(&run.stdout);
    assert_eq!(by_kind(&docs, "Namespace")[0]["metadata"]["name"], "0x10");
}

#[test]
fn with_pod_cidrs_a_network_policy_admits_the_port_only_from_outside_the_pod_network() {
    let run = manifests(&["--pod-cidr", "10.244.0.0/16,fd00:10:244::/56"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(!run.stdout.contains("# No NetworkPolicy"));
    check_golden("pod-cidr.yaml", &run.stdout);
    let docs = documents(&run.stdout);
    let policy = by_kind(&docs, "NetworkPolicy")[0];
    assert_eq!(policy["spec"]["policyTypes"], json!(["Ingress"]));
    assert_eq!(
        policy["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/name"],
        "meshwrap-webhook"
    );
    let rule = &policy["spec"]["ingress"][0];
    assert_eq!(rule["ports"], json!([{"port": "https", "protocol": "TCP"}]));
    assert_eq!(
        rule["from"],
        json!([
            {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.244.0.0/16"]}},
            {"ipBlock": {"cidr": "::/0", "except": ["fd00:10:244::/56"]}}
        ])
    );
    for bad in ["10.244.0.0", "10.244.0.0/33", "pods", "10.244.0.0/0"] {
        let run = manifests(&["--pod-cidr", bad]);
        assert_eq!(run.code, 2, "{bad}");
        assert_eq!(run.stdout, "");
        assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
        assert!(
            run.stderr.contains("--pod-cidr") && run.stderr.contains("CIDR"),
            "{}",
            run.stderr
        );
    }
}

/// (CA, certificate, key, caBundle) of a --self-signed run, PEM.
fn self_signed_run(extra: &[&str]) -> (String, String, String, String) {
    let mut args = vec!["--self-signed"];
    args.extend(extra);
    let run = manifests(&args);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let docs = documents(&run.stdout);
    let data = &by_kind(&docs, "Secret")[0]["data"];
    let configuration = by_kind(&docs, "MutatingWebhookConfiguration")[0];
    let bundle = b64(&configuration["webhooks"][0]["clientConfig"]["caBundle"]);
    assert_eq!(bundle, b64(&configuration["webhooks"][1]["clientConfig"]["caBundle"]));
    (
        b64(&data["ca.crt"]),
        b64(&data["tls.crt"]),
        b64(&data["tls.key"]),
        bundle,
    )
}

#[test]
fn a_self_signed_rotation_with_the_previous_ca_trusts_the_old_and_the_new_certificate() {
    let (old_ca, old_cert, old_key, old_bundle) = self_signed_run(&[]);
    assert_eq!(old_bundle, old_ca);
    let dir = common::temp_dir("rotation");
    let previous = dir.join("ca.crt");
    std::fs::write(&previous, &old_ca).unwrap();
    let (new_ca, new_cert, new_key, bundle) = self_signed_run(&["--previous-ca", previous.to_str().unwrap()]);
    assert_ne!(new_ca, old_ca);
    assert!(
        bundle.starts_with(&new_ca) && bundle.contains(old_ca.trim()),
        "{bundle}"
    );
    // The Secret carries the new CA alone.
    assert!(!new_ca.contains(old_ca.trim()));

    let name = "meshwrap-webhook.meshwrap-system.svc";
    // A pod still serving the old certificate, and one serving the new:
    // the rotated bundle reaches both; the old bundle alone, only the old.
    let old = Webhook::start_with("rotation-old", &old_cert, &old_key, &[]);
    let new = Webhook::start_with("rotation-new", &new_cert, &new_key, &[]);
    for port in [old.port, new.port] {
        let mut client = Client::connect_named(port, client_config(&bundle), name).unwrap();
        assert_eq!(client.get("/healthz").unwrap().status, 200);
    }
    assert!(Client::connect_named(new.port, client_config(&old_bundle), name).is_err());

    // What --previous-ca accepts.
    std::fs::write(&previous, "not a certificate").unwrap();
    let run = manifests(&["--self-signed", "--previous-ca", previous.to_str().unwrap()]);
    assert_eq!((run.code, run.stdout.as_str()), (2, ""), "{}", run.stderr);
    assert!(run.stderr.contains("--previous-ca"), "{}", run.stderr);
    let run = manifests(&["--self-signed", "--previous-ca", "/nonexistent/ca.crt"]);
    assert_eq!((run.code, run.stderr.lines().count()), (2, 1), "{}", run.stderr);
    assert!(
        run.stderr.contains("--previous-ca /nonexistent/ca.crt"),
        "{}",
        run.stderr
    );
    let run = manifests(&["--previous-ca", previous.to_str().unwrap()]);
    assert!(
        run.code == 2 && run.stderr.contains("--previous-ca goes with --self-signed"),
        "{}",
        run.stderr
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn the_webhook_runs_before_every_mesh_injector_so_its_quit_switches_reach_them() {
    // The API server calls mutating webhooks in the order of their
    // configurations' names; these are the injectors' own.
    let run = manifests(&[]);
    let docs = documents(&run.stdout);
    let configuration = by_kind(&docs, "MutatingWebhookConfiguration")[0];
    let name = configuration["metadata"]["name"].as_str().unwrap();
    for injector in [
        "dapr-sidecar-injector",
        "istio-revision-tag-default",
        "istio-sidecar-injector",
        "linkerd-proxy-injector-webhook-config",
        "vault-agent-injector-cfg",
    ] {
        assert!(name < injector, "{name} sorts after {injector}");
    }
}

#[test]
fn the_webhook_deployment_carries_mesh_and_native() {
    let run = manifests(&["--mesh", "linkerd,vault", "--native", "prefer"]);
    let docs = documents(&run.stdout);
    let deployment = by_kind(&docs, "Deployment")[0];
    let env = &deployment["spec"]["template"]["spec"]["containers"][0]["env"];
    let value = |name: &str| {
        env.as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .map(|e| e["value"].as_str().unwrap().to_string())
    };
    assert_eq!(value("MESHWRAP_MESH").as_deref(), Some("linkerd,vault"));
    assert_eq!(value("MESHWRAP_NATIVE").as_deref(), Some("prefer"));
    let plain = documents(&manifests(&[]).stdout);
    let env = &by_kind(&plain, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]["env"];
    assert!(!env.to_string().contains("MESHWRAP_MESH"), "the default adds nothing");
}

fn env_of(deployment: &Value) -> Vec<(String, String)> {
    deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_string(),
                e["value"].as_str().unwrap_or("(valueFrom)").to_string(),
            )
        })
        .collect()
}

#[test]
fn namespaces_get_get_on_namespaces_only_and_off_takes_its_rbac_away() {
    // On by default: `get` on namespaces, the webhook's one read, and no
    // `list` or `watch`; bound to the webhook's account.
    let docs = documents(&manifests(&[]).stdout);
    let roles = by_kind(&docs, "ClusterRole");
    let role = roles
        .iter()
        .find(|r| r["metadata"]["name"] == "meshwrap-webhook-namespaces")
        .expect("the namespaces ClusterRole");
    assert_eq!(
        role["rules"],
        json!([{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]}])
    );
    let binding = by_kind(&docs, "ClusterRoleBinding")
        .into_iter()
        .find(|b| b["metadata"]["name"] == "meshwrap-webhook-namespaces")
        .expect("its binding");
    assert_eq!(
        binding["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "meshwrap-webhook-namespaces"})
    );
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": "meshwrap-webhook", "namespace": "meshwrap-system"}])
    );
    let deployment = by_kind(&docs, "Deployment")[0];
    assert!(env_of(deployment).contains(&("MESHWRAP_NAMESPACES".into(), "on".into())));

    // Off: its RBAC goes, the events' stays, and the webhook is told.
    let docs = documents(&manifests(&["--namespaces", "off"]).stdout);
    let roles: Vec<&str> = by_kind(&docs, "ClusterRole")
        .iter()
        .map(|r| r["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["meshwrap-webhook-events"]);
    let deployment = by_kind(&docs, "Deployment")[0];
    assert!(env_of(deployment).contains(&("MESHWRAP_NAMESPACES".into(), "off".into())));
    assert_eq!(
        deployment["spec"]["template"]["spec"]["automountServiceAccountToken"],
        true
    );

    let bad = manifests(&["--namespaces", "sometimes"]);
    assert_eq!((bad.code, bad.stdout.as_str()), (2, ""));
    assert_eq!(bad.stderr.lines().count(), 1, "{}", bad.stderr);
    assert!(
        bad.stderr.contains("--namespaces") && bad.stderr.contains("on, off"),
        "{}",
        bad.stderr
    );
}

#[test]
fn events_get_create_and_patch_on_events_and_a_token_on_the_webhook_pod_only() {
    // On by default: a ClusterRole that allows exactly what posting events
    // needs, bound to the webhook's account, and a token for its pod alone.
    let docs = documents(&manifests(&[]).stdout);
    let role = by_kind(&docs, "ClusterRole")[0];
    assert_eq!(role["metadata"]["name"], "meshwrap-webhook-events");
    assert_eq!(
        role["rules"],
        json!([{"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]}])
    );
    let binding = by_kind(&docs, "ClusterRoleBinding")[0];
    assert_eq!(
        binding["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "meshwrap-webhook-events"})
    );
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": "meshwrap-webhook", "namespace": "meshwrap-system"}])
    );
    assert_eq!(
        by_kind(&docs, "ServiceAccount")[0]["automountServiceAccountToken"],
        false
    );
    let deployment = by_kind(&docs, "Deployment")[0];
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["automountServiceAccountToken"], true);
    assert_eq!(pod["serviceAccountName"], "meshwrap-webhook");
    assert!(env_of(deployment).contains(&("MESHWRAP_EVENTS".into(), "on".into())));
    // The binding follows the namespace.
    let docs = documents(&manifests(&["--namespace", "platform-tools"]).stdout);
    assert_eq!(
        by_kind(&docs, "ClusterRoleBinding")[0]["subjects"][0]["namespace"],
        "platform-tools"
    );

    // Off: no RBAC for events, and the webhook is told; with namespaces
    // off too, no RBAC and no token at all.
    for (off, namespaces) in [
        (manifests(&["--events", "off"]), true),
        (manifests(&["--events", "off", "--namespaces", "off"]), false),
        (
            run_in(
                None,
                &["manifests", "--image", IMAGE, "--webhook-image", WEBHOOK_IMAGE],
                "",
                &[("MESHWRAP_EVENTS", "off"), ("MESHWRAP_NAMESPACES", "off")],
            ),
            false,
        ),
    ] {
        assert_eq!(off.code, 0, "{}", off.stderr);
        let docs = documents(&off.stdout);
        let roles: Vec<&str> = by_kind(&docs, "ClusterRole")
            .iter()
            .map(|r| r["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            roles,
            if namespaces {
                vec!["meshwrap-webhook-namespaces"]
            } else {
                vec![]
            }
        );
        let deployment = by_kind(&docs, "Deployment")[0];
        assert_eq!(
            deployment["spec"]["template"]["spec"]["automountServiceAccountToken"],
            namespaces
        );
        assert!(env_of(deployment).contains(&("MESHWRAP_EVENTS".into(), "off".into())));
    }
    let bad = manifests(&["--events", "maybe"]);
    assert_eq!((bad.code, bad.stdout.as_str()), (2, ""));
    assert_eq!(bad.stderr.lines().count(), 1, "{}", bad.stderr);
    assert!(
        bad.stderr.contains("--events") && bad.stderr.contains("on, off"),
        "{}",
        bad.stderr
    );
}

#[test]
fn the_network_policy_never_restricts_egress_so_events_reach_the_api_server() {
    let docs = documents(&manifests(&["--pod-cidr", "10.244.0.0/16"]).stdout);
    let policy = by_kind(&docs, "NetworkPolicy")[0];
    assert_eq!(policy["spec"]["policyTypes"], json!(["Ingress"]));
    assert!(policy["spec"].get("egress").is_none());
}

fn match_conditions(docs: &[Value]) -> Vec<Value> {
    by_kind(docs, "MutatingWebhookConfiguration")[0]["webhooks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.get("matchConditions").cloned().unwrap_or(Value::Null))
        .collect()
}

#[test]
fn match_conditions_leave_opted_out_pods_and_the_never_selected_namespaces_to_the_api_server() {
    let expected = json!([
        {"name": "not-opted-out-by-annotation",
         "expression": "!has(object.metadata.annotations) || !('meshwrap.io/inject' in object.metadata.annotations) || object.metadata.annotations['meshwrap.io/inject'] != 'false'"},
        {"name": "not-opted-out-by-label",
         "expression": "!has(object.metadata.labels) || !('meshwrap.io/inject' in object.metadata.labels) || object.metadata.labels['meshwrap.io/inject'] != 'false'"},
        {"name": "not-a-never-selected-namespace",
         "expression": "!(request.namespace in ['mesh-tools', 'kube-system'])"}
    ]);
    // Printed with no version given, and from 1.30 in any spelling.
    for version in [
        None,
        Some("1.30"),
        Some("v1.30.2"),
        Some("1.31.1-eks-a737599"),
        Some("v1.36.0+k3s1"),
    ] {
        let mut args = vec!["--namespace", "mesh-tools"];
        if let Some(v) = version {
            args.extend(["--kube-version", v]);
        }
        let run = manifests(&args);
        assert_eq!(run.code, 0, "{version:?}: {}", run.stderr);
        assert_eq!(
            match_conditions(&documents(&run.stdout)),
            [expected.clone(), expected.clone()],
            "{version:?}"
        );
    }
    // Not for a cluster that may not have the field.
    for version in ["1.28", "v1.29.8", "1.29.1-gke.100"] {
        let run = manifests(&["--kube-version", version]);
        assert_eq!(run.code, 0, "{version}: {}", run.stderr);
        assert_eq!(
            match_conditions(&documents(&run.stdout)),
            [Value::Null, Value::Null],
            "{version}"
        );
    }
    for bad in ["latest", "1", "2.0", "1.x", "1.30beta"] {
        let run = manifests(&["--kube-version", bad]);
        assert_eq!((run.code, run.stdout.as_str()), (2, ""), "{bad}");
        assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
        assert!(
            run.stderr.contains("--kube-version") && run.stderr.contains("1.30"),
            "{}",
            run.stderr
        );
    }
}

/// The matchConditions as printed, evaluated as the API server evaluates
/// them (tests/common/conditions.rs): no pod makes one fail (failurePolicy
/// Fail would refuse it), and each sample pod is left alone or sent as it
/// should be, in the default namespace and another.
#[test]
fn match_conditions_evaluate_without_error_to_the_expected_decision_for_every_kind_of_pod() {
    for (own, args) in [
        ("meshwrap-system", vec![]),
        (
            "platform-tools",
            vec!["--namespace", "platform-tools", "--kube-version", "1.30"],
        ),
    ] {
        let run = manifests(&args);
        assert_eq!(run.code, 0, "{}", run.stderr);
        let docs = documents(&run.stdout);
        let configuration = by_kind(&docs, "MutatingWebhookConfiguration")[0];
        let decided = conditions::assert_match_conditions_decide_as_expected(configuration, own);
        assert_eq!(decided, 2 * conditions::samples(own).len());
    }
    // The API server skips a pod for an opt-out exactly where the webhook
    // itself (the same decision as inject's) would leave it alone.
    for (what, _, metadata, expected) in conditions::samples("meshwrap-system") {
        let mut pod = conditions::pod(metadata);
        pod["metadata"]["name"] = json!("p");
        let run = kubectl_meshwrap(&["inject", "--image", IMAGE, "--allow-skip"], &pod.to_string());
        let opted_out = run.stderr.contains("opted out: meshwrap.io/inject is \"false\"");
        let by_opt_out = matches!(&expected, conditions::Decision::Skip(c) if c.starts_with("not-opted-out"));
        assert_eq!(opted_out, by_opt_out, "{what}: {}", run.stderr);
    }
}

/// The chart's `kubeVersion: >=1.28.0-0`, the same for `--kube-version`
/// (newcomer-2026-12 #29): one line naming the flag and what it accepts.
#[test]
fn a_kube_version_older_than_1_28_is_refused_as_the_chart_refuses_it() {
    for old in ["1.27", "v1.27.9", "1.20"] {
        let run = manifests(&["--kube-version", old]);
        assert_eq!((run.code, run.stdout.as_str()), (2, ""), "{old}");
        assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
        assert!(
            run.stderr.contains("--kube-version") && run.stderr.contains("1.28 and newer"),
            "{}",
            run.stderr
        );
    }
    assert_eq!(manifests(&["--kube-version", "1.28"]).code, 0);
}
