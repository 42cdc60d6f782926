//! The webhook, as the API server sees it: the real binary over real TLS on
//! loopback. A checklist:
//!
//! - every AdmissionReview fixture in `admission/` gets the patch that turns
//!   its pod into `NAME.out.json` (applied with a JSON Patch library), and
//!   the patched pod sent again gets no patch;
//! - a field no type knows survives;
//! - every pod template of inject's goldens comes out of the webhook as it
//!   comes out of `inject`;
//! - a client that trusts the CA talks, one that does not is refused;
//! - a certificate rotated while requests run fails none of them;
//! - 400, 413, 415, 404 and 405, each with its reason, and the server lives on;
//! - a slowloris client is cut off, and others are served meanwhile;
//! - above --max-connections a connection is closed at accept and counted,
//!   above --max-handshakes it waits for a slot; no address holds more than
//!   --max-source-share (its own newcomer's cases are in `fairness.rs`);
//!   when full, a newcomer from a lighter address gets in and the heaviest
//!   address's oldest connection still in its handshake or first request
//!   gives way, never one answering; the state per address goes with its
//!   last connection; a client that never reads its answers is cut off
//!   by the request deadline; an idle keep-alive connection by --idle-timeout;
//! - request bodies in flight share a budget: one it cannot cover is
//!   answered 503 with Retry-After at once, an ordinary pod still gets in;
//! - SIGTERM: not ready, requests in flight finish, exit 0;
//! - metrics and one JSON log line per decision;
//! - bad flags and bad certificates: one line, exit 2, nothing served.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine;
use common::https::*;
use serde_json::{Value, json};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/admission")
}

fn load(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The response's patch applied to `object`: (patched, operations).
fn apply(response: &Value, object: &Value) -> (Value, Vec<Value>) {
    let mut pod = object.clone();
    let Some(patch) = response["response"]["patch"].as_str() else {
        assert!(response["response"].get("patchType").is_none());
        return (pod, Vec::new());
    };
    assert_eq!(response["response"]["patchType"], "JSONPatch");
    let bytes = base64::engine::general_purpose::STANDARD.decode(patch).unwrap();
    let ops: Vec<Value> = serde_json::from_slice(&bytes).unwrap();
    let parsed: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
    json_patch::patch(&mut pod, &parsed).unwrap_or_else(|e| panic!("the patch does not apply: {e}\n{ops:#?}"));
    (pod, ops)
}

fn review_of(pod: &Value, uid: &str) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": pod.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or("team-a"),
            "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:job-controller"},
            "object": pod,
            "dryRun": false
        }
    })
}

fn post(client: &mut Client, review: &Value) -> Value {
    let response = client.post(review.to_string().as_bytes()).unwrap();
    assert_eq!(response.status, 200, "{}", response.text());
    let answer = response.json();
    assert_eq!(answer["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(answer["kind"], "AdmissionReview");
    assert_eq!(answer["response"]["uid"], review["request"]["uid"]);
    assert_eq!(answer["response"]["allowed"], true, "the webhook never blocks a pod");
    answer
}

#[test]
fn every_fixture_is_patched_into_its_golden_and_a_second_pass_changes_nothing() {
    let bless = std::env::var_os("MESHWRAP_BLESS").is_some();
    let ca = Ca::new("fixtures CA");
    let webhook = Webhook::start("fixtures", &ca, &[]);
    let mut client = webhook.client(&ca);
    let mut names: Vec<String> = std::fs::read_dir(fixtures())
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".review.json").map(str::to_string)
        })
        .collect();
    names.sort();
    assert!(names.len() >= 11, "{names:?}");
    let mut failures = Vec::new();
    for name in &names {
        let review = load(&fixtures().join(format!("{name}.review.json")));
        let answer = post(&mut client, &review);
        let object = if review["request"]["operation"] == "DELETE" {
            &review["request"]["oldObject"]
        } else {
            &review["request"]["object"]
        };
        let (pod, ops) = apply(&answer, object);
        for op in &ops {
            assert_eq!(op["op"], "add", "{name}: only additions, never a rewrite: {op}");
        }
        let golden = json!({
            "patched": !ops.is_empty(),
            "warnings": answer["response"].get("warnings").cloned().unwrap_or(json!([])),
            "pod": pod,
        });
        let path = fixtures().join(format!("{name}.out.json"));
        let text = serde_json::to_string_pretty(&golden).unwrap() + "\n";
        if bless {
            std::fs::write(&path, &text).unwrap();
        } else if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
            failures.push(format!("{name}: differs from {}:\n{text}", path.display()));
        }
        // What the webhook wrote, sent again (as reinvocation does): no patch.
        if review["request"]["operation"] == "CREATE" && !ops.is_empty() {
            let again = post(&mut client, &review_of(&pod, "again"));
            assert!(
                again["response"].get("patch").is_none(),
                "{name}: a second pass patched again: {again}"
            );
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_fixtures_decide_what_the_issue_says() {
    // The goldens, read for what matters, so a blessed mistake still fails.
    let out = |name: &str| load(&fixtures().join(format!("{name}.out.json")));
    let status = |v: &Value| -> Value {
        v.pointer("/pod/metadata/annotations/meshwrap.io~1status")
            .and_then(Value::as_str)
            .map(|s| serde_json::from_str(s).unwrap())
            .unwrap_or(Value::Null)
    };
    let command = |v: &Value, container: &str| -> Vec<String> {
        v["pod"]["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == container)
            .unwrap()["command"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_string())
            .collect()
    };

    let tf = out("tfjob-worker");
    assert_eq!(status(&tf)["container"], "tensorflow");
    assert_eq!(
        command(&tf, "tensorflow")[..3],
        ["/mesh/meshwrap", "--quit-policy", "always"]
    );
    let proxy = tf["pod"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "istio-proxy");
    assert!(proxy.unwrap().get("command").is_none(), "the proxy is never wrapped");

    let pt = out("pytorchjob-worker");
    assert_eq!(status(&pt)["quitPolicy"], "on-success", "restartPolicy OnFailure");
    let inits: Vec<&str> = pt["pod"]["spec"]["initContainers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(inits, ["meshwrap-install", "init-pytorch"]);

    let argo = out("argo-pod");
    assert_eq!(status(&argo)["container"], "main");
    assert_eq!(status(&argo)["quitPolicy"], "never", "Argo stops its sidecars itself");
    assert_eq!(command(&argo, "wait")[0], "argoexec");

    let native = out("native-sidecar");
    assert!(command(&native, "etl").join(" ").contains("--native-sidecar true"));
    assert_eq!(status(&native)["guard"], false);

    for (name, reason) in [
        ("no-command", "has no command"),
        ("host-network", "hostNetwork"),
        ("windows", "Windows"),
    ] {
        let v = out(name);
        assert!(status(&v)["skipped"].as_str().unwrap().contains(reason), "{name}: {v}");
        assert!(v["warnings"][0].as_str().unwrap().contains(reason), "{name}: {v}");
    }
    for name in [
        "already-wrapped",
        "opt-out",
        "delete",
        "update",
        "deployment",
        "kube-system",
    ] {
        assert_eq!(out(name)["patched"], false, "{name}");
    }
    // #36 point 6: a pod Trainer built from an injected runtime, whose node
    // command a TrainJob replaced, is wrapped again (settings from node's
    // MESHWRAP_* env, or from the status where an older runtime lacks it);
    // a prepared node with no command at all is admitted with the reason.
    let overridden = out("trainer-node-overridden");
    assert_eq!(overridden["patched"], true);
    assert_eq!(command(&overridden, "node")[..3], ["/mesh/meshwrap", "--", "bash"]);
    let old = out("trainer-node-old-runtime");
    assert_eq!(
        command(&old, "node")[..6],
        [
            "/mesh/meshwrap",
            "--quit-policy",
            "on-success",
            "--guard-dir",
            "/run/meshwrap",
            "--"
        ]
    );
    let bare = out("trainer-node-no-command");
    assert_eq!(bare["patched"], false);
    assert!(
        bare["warnings"][0].as_str().unwrap().contains("spec.trainer.command"),
        "{bare}"
    );
    let again = out("skipped-before");
    assert_eq!(status(&again)["container"], "etl", "a skipped pod is decided again");

    // #28: a native switch set otherwise is left and the pod wrapped, never
    // stamped native (H1); Linkerd's stable "false" over alpha "true" is a
    // regular proxy, quit and guarded (H2); a Cloud SQL proxy's moved ports
    // reach meshwrap (H3); the labels are mounted for Dapr's mark (M2).
    let annotation = |v: &Value, key: &str| v["pod"]["metadata"]["annotations"][key].clone();
    let switched = out("native-switch-false-pod");
    assert_eq!(status(&switched).get("native"), None, "{switched}");
    assert_eq!(status(&switched)["guard"], true);
    assert_eq!(
        annotation(&switched, "config.linkerd.io/proxy-enable-native-sidecar"),
        "false"
    );
    let precedence = out("linkerd-native-precedence-pod");
    assert!(!command(&precedence, "etl").contains(&"--native-sidecar".to_string()));
    assert_eq!(status(&precedence)["guard"], true);
    assert_eq!(
        annotation(&precedence, "config.linkerd.io/proxy-admin-shutdown"),
        "enabled"
    );
    let cloudsql = out("cloudsql-ports-pod");
    assert!(
        command(&cloudsql, "etl").contains(&"cloudsql=127.0.0.1:9190/127.0.0.1:9192".to_string()),
        "{cloudsql}"
    );
    let dapr = out("dapr-pod");
    let podinfo = dapr["pod"]["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "meshwrap-podinfo")
        .unwrap()
        .clone();
    assert_eq!(
        podinfo["downwardAPI"]["items"][1],
        json!({"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}})
    );
}

#[test]
fn a_field_no_type_knows_survives_the_patch() {
    let ca = Ca::new("unknown-field CA");
    let webhook = Webhook::start("unknown-field", &ca, &[]);
    let review = load(&fixtures().join("tfjob-worker.review.json"));
    let answer = post(&mut webhook.client(&ca), &review);
    let (pod, ops) = apply(&answer, &review["request"]["object"]);
    assert!(!ops.is_empty());
    assert_eq!(pod["spec"]["madeUpFutureSpecField"], json!({"level": 3}));
    assert_eq!(
        pod["spec"]["containers"][0]["futureContainerField"],
        json!({"madeUp": true, "note": "a field newer than every client library"})
    );
    // And the patch names only what it adds.
    for op in &ops {
        let path = op["path"].as_str().unwrap();
        assert!(!path.contains("future") && !path.contains("madeUp"), "{path}");
    }
}

/// Every pod template of inject's goldens (but Argo's templates, which are
/// not pods), as a pod the way its controller would create it.
fn pods_of(doc: &Value, place: &kubectl_meshwrap::transform::Place, kind: &str) -> Value {
    use kubectl_meshwrap::patch::get;
    use kubectl_meshwrap::transform::Restart;
    let mut metadata = get(doc, &place.metadata).cloned().unwrap_or(json!({}));
    if metadata.is_null() {
        metadata = json!({});
    }
    let mut spec = get(doc, &place.spec).cloned().unwrap();
    // The API server defaults restartPolicy, so a pod always has one; a
    // controller's pods have what its template implies.
    if let Restart::PodSpec(default) = &place.restart
        && spec.get("restartPolicy").is_none()
    {
        spec["restartPolicy"] = json!(default);
    }
    if let Restart::Replica(Some(policy)) = &place.restart {
        // The operator's mapping of a replica's policy onto its pods.
        let pod_policy = if policy == "ExitCode" { "Never" } else { policy.as_str() };
        spec["restartPolicy"] = json!(pod_policy);
        metadata["ownerReferences"] = json!([{
            "apiVersion": "kubeflow.org/v1", "kind": kind, "name": "job", "uid": "u", "controller": true
        }]);
    }
    // A long-running kind's pods, owned as their controller owns them.
    let owner = match kind {
        "Deployment" | "ReplicaSet" => Some(("apps/v1", "ReplicaSet")),
        "StatefulSet" | "DaemonSet" => Some(("apps/v1", kind)),
        "ReplicationController" => Some(("v1", kind)),
        _ => None,
    };
    if let Some((api_version, kind)) = owner {
        metadata["ownerReferences"] = json!([{
            "apiVersion": api_version, "kind": kind, "name": "owner", "uid": "u", "controller": true
        }]);
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec})
}

#[test]
fn every_pod_template_of_injects_goldens_comes_out_of_the_webhook_as_out_of_inject() {
    use kubectl_meshwrap::transform::Restart;
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let ca = Ca::new("both-ways CA");
    let (mut compared, mut trainer_nodes) = (0, 0);
    let mut inputs: Vec<PathBuf> = std::fs::read_dir(&golden)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_str().unwrap().contains(".in."))
        .collect();
    inputs.sort();
    for input in inputs {
        let name = input.file_name().unwrap().to_str().unwrap().to_string();
        let stem = name.split(".in.").next().unwrap();
        let output = golden.join(name.replace(".in.", ".out."));
        // A document inject could not edit losslessly (YAML anchors, a
        // layout it cannot append to) is left as it was: that is the text
        // editor's limit, not a decision to compare.
        let report = std::fs::read_to_string(golden.join(format!("{stem}.report"))).unwrap_or_default();
        let text_limited: Vec<String> = report
            .lines()
            .filter(|l| l.contains(": error: ") || l.contains("YAML anchors") || l.contains("a YAML alias at line"))
            .filter_map(|l| l.split(": ").nth(2))
            .map(|w| w.split(' ').next().unwrap_or("").to_string())
            .collect();
        // The pod options inject was given; --template-path only finds places.
        let flags: Vec<String> = std::fs::read_to_string(golden.join(format!("{stem}.args")))
            .map(|s| s.lines().map(str::to_string).collect())
            .unwrap_or_default();
        let pod_flags: Vec<&str> = flags
            .iter()
            .map(String::as_str)
            .filter(|f| !f.starts_with("--template-path") && !f.starts_with("--strict"))
            .collect();
        let taught: Vec<kubectl_meshwrap::workloads::TemplatePath> = flags
            .iter()
            .filter_map(|f| f.strip_prefix("--template-path="))
            .map(|t| t.parse().unwrap())
            .collect();
        let parse = |path: &Path| -> Vec<Value> {
            let (docs, error) = kubectl_meshwrap::yaml::tree::parse(&std::fs::read_to_string(path).unwrap());
            if error.is_some() {
                return Vec::new();
            }
            docs.iter().map(|d| d.root.to_json()).collect()
        };
        let (before, after) = (parse(&input), parse(&output));
        if before.len() != after.len() {
            continue;
        }
        let webhook = Webhook::start(&format!("both-{stem}"), &ca, &pod_flags);
        let mut client = webhook.client(&ca);
        for (doc, done) in before.iter().zip(&after) {
            for workload in kubectl_meshwrap::workloads::find(doc, &taught) {
                if text_limited.contains(&format!("{}/{}", workload.kind, workload.name)) {
                    continue;
                }
                let Ok(places) = workload.places else { continue };
                for place in places {
                    if place.argo || place.restart == Restart::Argo {
                        continue;
                    }
                    let pod = pods_of(doc, &place, &workload.kind);
                    let mut expected = pods_of(done, &place, &workload.kind);
                    // A Trainer runtime's trainer node gets inject's
                    // MESHWRAP_* env for a TrainJob's command, which a pod
                    // (built after the TrainJob's override) has no use for;
                    // one with no command inject prepares, unwrapped, which
                    // the webhook, seeing no command, skips.
                    if kubectl_meshwrap::trainer::is_runtime(&workload.kind)
                        && kubectl_meshwrap::trainer::overridden(doc, &place)
                    {
                        let node = |p: &Value| {
                            p["spec"]["containers"]
                                .as_array()
                                .unwrap()
                                .iter()
                                .position(|c| c["name"] == "node")
                        };
                        let Some(i) = node(&pod) else { continue };
                        if pod["spec"]["containers"][i].get("command").is_none() {
                            continue;
                        }
                        let theirs = &mut expected["spec"]["containers"][i];
                        let env = theirs["env"].as_array_mut().unwrap();
                        env.retain(|e| !e["name"].as_str().unwrap().starts_with("MESHWRAP_"));
                        if env.is_empty() && pod["spec"]["containers"][i].get("env").is_none() {
                            theirs.as_object_mut().unwrap().remove("env");
                        }
                        trainer_nodes += 1;
                    }
                    let answer = post(&mut client, &review_of(&pod, "both"));
                    let (mut patched, _) = apply(&answer, &pod);
                    // A skip is written down by the webhook only.
                    let skipped = patched
                        .pointer("/metadata/annotations/meshwrap.io~1status")
                        .and_then(Value::as_str)
                        .is_some_and(|s| s.contains("\"skipped\""));
                    if skipped {
                        let annotations = patched["metadata"]["annotations"].as_object_mut().unwrap();
                        annotations.remove("meshwrap.io/status");
                        if annotations.is_empty() && pod["metadata"].get("annotations").is_none() {
                            patched["metadata"].as_object_mut().unwrap().remove("annotations");
                        }
                    }
                    assert_eq!(
                        patched, expected,
                        "{stem}: {} {}: the webhook and inject disagree",
                        workload.kind, place.label
                    );
                    compared += 1;
                }
            }
        }
    }
    assert!(compared >= 30, "only {compared} templates compared");
    assert!(trainer_nodes >= 1, "no Trainer runtime's trainer node compared");
}

#[test]
fn a_client_that_trusts_the_ca_is_served_and_one_that_does_not_is_refused() {
    let ca = Ca::new("trusted CA");
    let webhook = Webhook::start("trust", &ca, &[]);
    let mut client = webhook.client(&ca);
    assert_eq!(client.get("/healthz").unwrap().status, 200);
    assert_eq!(client.get("/readyz").unwrap().status, 200);
    let stranger = Ca::new("another CA");
    let refused = Client::connect(webhook.port, &stranger);
    let error = refused
        .err()
        .expect("a client trusting another CA must not connect")
        .to_string();
    assert!(
        error.contains("UnknownIssuer") || error.contains("certificate"),
        "{error}"
    );
}

#[test]
fn tls_1_2_and_1_3_are_both_spoken() {
    let ca = Ca::new("versions CA");
    let webhook = Webhook::start("versions", &ca, &[]);
    for version in [&rustls::version::TLS12, &rustls::version::TLS13] {
        let mut roots = rustls::RootCertStore::empty();
        use rustls::pki_types::pem::PemObject;
        roots
            .add(rustls::pki_types::CertificateDer::from_pem_slice(ca.pem.as_bytes()).unwrap())
            .unwrap();
        let config =
            rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(rustls::crypto::ring::default_provider()))
                .with_protocol_versions(&[version])
                .unwrap()
                .with_root_certificates(roots)
                .with_no_client_auth();
        let mut client = Client::connect_with(webhook.port, std::sync::Arc::new(config)).unwrap();
        assert_eq!(client.stream.conn.protocol_version(), Some(version.version));
        assert_eq!(client.get("/healthz").unwrap().status, 200);
    }
}

#[test]
fn a_certificate_rotated_under_load_fails_no_request() {
    let ca = Ca::new("rotation CA");
    let webhook = Webhook::start("rotation", &ca, &[]);
    let review = load(&fixtures().join("job-pod.review.json")).to_string();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let answered = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    // Waits until the workers have had `more` answers past what they had.
    let after = |more: usize| {
        let target = answered.load(std::sync::atomic::Ordering::SeqCst) + more;
        let deadline = Instant::now() + Duration::from_secs(20);
        while answered.load(std::sync::atomic::Ordering::SeqCst) < target {
            assert!(Instant::now() < deadline, "the load stalled");
            std::thread::yield_now();
        }
    };
    // Clients that reconnect for every request (each a new handshake) and
    // one that keeps its connection across the rotation.
    let mut workers = Vec::new();
    for fresh in [true, true, true, false] {
        let (stop, answered, review, port, config) = (
            stop.clone(),
            answered.clone(),
            review.clone(),
            webhook.port,
            client_config(&ca.pem),
        );
        workers.push(std::thread::spawn(move || {
            let (mut ok, mut failed, mut serials) = (0, Vec::new(), std::collections::BTreeSet::new());
            let mut client = Client::connect_with(port, config.clone()).unwrap();
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                if fresh {
                    match Client::connect_with(port, config.clone()) {
                        Ok(c) => client = c,
                        Err(e) => {
                            failed.push(format!("connect: {e}"));
                            continue;
                        }
                    }
                }
                serials.insert(client.peer_serial_subject());
                match client.post(review.as_bytes()) {
                    Ok(r) if r.status == 200 => {
                        ok += 1;
                        answered.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                    Ok(r) => failed.push(format!("status {}", r.status)),
                    Err(e) => failed.push(format!("request: {e}")),
                }
            }
            (ok, failed, serials)
        }));
    }
    // Let the load run, rotate, and wait for the reload to be logged and seen.
    after(50);
    let (cert, key) = ca.serving(2);
    replace(&webhook.dir.join("tls.key"), &key);
    replace(&webhook.dir.join("tls.crt"), &cert);
    webhook.wait_for("certificate reloaded");
    let deadline = Instant::now() + Duration::from_secs(10);
    while webhook.client(&ca).peer_serial_subject() != "serving 2" {
        assert!(
            Instant::now() < deadline,
            "new connections never got the new certificate"
        );
    }
    // And the load runs on over the new certificate.
    after(50);
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut total = 0;
    let mut seen = std::collections::BTreeSet::new();
    for worker in workers {
        let (ok, failed, serials) = worker.join().unwrap();
        assert!(failed.is_empty(), "failed requests during the rotation: {failed:?}");
        total += ok;
        seen.extend(serials);
    }
    assert!(total >= 100, "only {total} requests ran");
    assert!(seen.contains("serving 1") && seen.contains("serving 2"), "{seen:?}");
}

#[test]
fn a_key_that_does_not_match_keeps_the_previous_certificate() {
    let ca = Ca::new("mismatch CA");
    let webhook = Webhook::start("mismatch", &ca, &[]);
    let (_, other_key) = ca.serving(3);
    replace(&webhook.dir.join("tls.key"), &other_key);
    let warning = webhook.wait_for("certificate files changed but cannot be used; keeping the previous one");
    assert!(
        warning["error"].as_str().unwrap().contains("do not go together"),
        "{warning}"
    );
    let mut client = webhook.client(&ca);
    assert_eq!(client.peer_serial_subject(), "serving 1");
    assert_eq!(client.get("/healthz").unwrap().status, 200);
}

#[test]
fn bad_requests_get_400_413_415_404_and_405_with_a_reason_and_the_server_lives_on() {
    let ca = Ca::new("errors CA");
    let webhook = Webhook::start("errors", &ca, &[]);
    // method, path, Content-Type, body, status, what the answer says
    type Case = (&'static str, &'static str, &'static str, Vec<u8>, u16, &'static str);
    let cases: Vec<Case> = vec![
        (
            "POST",
            "/mutate",
            "application/json",
            b"{not json".to_vec(),
            400,
            "not JSON",
        ),
        (
            "POST",
            "/mutate",
            "application/json",
            br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"x"}}"#.to_vec(),
            400,
            "admission.k8s.io/v1beta1",
        ),
        (
            "POST",
            "/mutate",
            "application/json",
            br#"{"apiVersion":"v1","kind":"Pod"}"#.to_vec(),
            400,
            "expected an admission.k8s.io/v1 AdmissionReview",
        ),
        (
            "POST",
            "/mutate",
            "application/json",
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.to_vec(),
            400,
            "no request",
        ),
        ("POST", "/mutate", "text/plain", b"{}".to_vec(), 415, "application/json"),
        ("POST", "/mutate", "", b"{}".to_vec(), 415, "got none"),
        ("GET", "/mutate", "", Vec::new(), 405, "POST an AdmissionReview"),
        ("GET", "/nowhere", "", Vec::new(), 404, "/mutate"),
    ];
    for (method, path, content_type, body, status, reason) in cases {
        let mut client = webhook.client(&ca);
        let response = client.request(method, path, content_type, &body).unwrap();
        assert_eq!(
            response.status,
            status,
            "{method} {path} {content_type}: {}",
            response.text()
        );
        assert!(response.text().contains(reason), "{status}: {}", response.text());
    }
    // A body declared too large is refused from its headers, before it is
    // sent (as a client that waits for "100 Continue" would see it).
    let mut client = webhook.client(&ca);
    client
        .send_raw(
            b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 3145729\r\n\r\n",
        )
        .unwrap();
    let response = client.read_response().unwrap();
    assert_eq!(response.status, 413, "{}", response.text());
    assert!(response.text().contains("3145729 bytes") && response.text().contains("3 MiB"));
    // A body that grows past the limit without declaring its length: 3 MiB
    // in chunks, then one byte more.
    let mut client = webhook.client(&ca);
    let chunk = vec![b' '; 64 * 1024];
    let mut request =
        b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            .to_vec();
    for _ in 0..48 {
        request.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        request.extend_from_slice(&chunk);
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"1\r\n ");
    client.send_raw(&request).unwrap();
    let response = client.read_response().unwrap();
    assert_eq!(response.status, 413, "{}", response.text());
    // Still serving, and a valid review is still answered.
    let review = load(&fixtures().join("job-pod.review.json"));
    post(&mut webhook.client(&ca), &review);
}

#[test]
fn a_slowloris_client_is_cut_off_and_others_are_served_meanwhile() {
    let ca = Ca::new("slowloris CA");
    let webhook = Webhook::start("slowloris", &ca, &["--client-timeout", "1s"]);
    let started = Instant::now();
    // Headers that never end.
    let mut headers = webhook.client(&ca);
    headers
        .send_raw(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: app")
        .unwrap();
    // A body that never ends.
    let mut body = webhook.client(&ca);
    body.send_raw(
        b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{",
    )
    .unwrap();
    // A TCP connection that never starts TLS.
    let mut silent = std::net::TcpStream::connect(("127.0.0.1", webhook.port)).unwrap();
    silent.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    // Others are served meanwhile.
    let review = load(&fixtures().join("job-pod.review.json"));
    post(&mut webhook.client(&ca), &review);

    let closed_within = |what: &str, result: std::io::Result<Response>| {
        let took = started.elapsed();
        match result {
            Err(_) => {}
            Ok(r) => assert_eq!(r.status, 408, "{what}: {}", r.text()),
        }
        assert!(took < Duration::from_secs(8), "{what}: held for {took:?}");
    };
    closed_within("headers", headers.read_response());
    closed_within("body", body.read_response());
    let mut buffer = [0u8; 16];
    use std::io::Read;
    let n = silent.read(&mut buffer).unwrap_or(0);
    assert_eq!(n, 0, "the silent connection got bytes");
    assert!(started.elapsed() < Duration::from_secs(8));
}

#[test]
fn above_its_caps_a_connection_waits_for_a_handshake_slot_or_is_closed_at_accept_and_counted() {
    let ca = Ca::new("caps CA");
    // Two connections a source (67% of 3, rounded up), so that one address
    // at the cap does not make room from its own idle connections (that
    // rule is tested below); the clients dial from three addresses.
    let webhook = Webhook::start(
        "caps",
        &ca,
        &[
            "--max-connections",
            "3",
            "--max-handshakes",
            "1",
            "--max-source-share",
            "50%",
        ],
    );
    let mut watcher = client_from(&webhook, &ca, host(8, 9)).unwrap();
    assert_eq!(watcher.get("/healthz").unwrap().status, 200);
    // A TCP connection that never starts TLS holds the one handshake slot.
    let silent = tcp_from(host(8, 1), webhook.port, Duration::from_secs(20)).unwrap();
    watcher.wait_metric("meshwrap_webhook_handshakes", 1);
    // The next one is not refused: it waits for the slot (an API server's
    // cold burst dials more at once than there are slots, all from one
    // address), and gets it once the silent one is gone.
    let (port, config) = (webhook.port, client_config(&ca.pem));
    let second = std::thread::spawn(move || {
        Client::connect_from(host(8, 1), port, config, Duration::from_secs(20)).and_then(|mut c| c.get("/healthz"))
    });
    watcher.wait_metric("meshwrap_webhook_waiting", 1);
    drop(silent);
    assert_eq!(second.join().unwrap().unwrap().status, 200);
    watcher.wait_metric("meshwrap_webhook_waiting", 0);
    assert_eq!(
        watcher.metric("meshwrap_webhook_connections_shed_total{reason=\"max-handshakes\"}"),
        0
    );
    let mut third = client_from(&webhook, &ca, host(8, 2)).unwrap();
    assert_eq!(third.get("/healthz").unwrap().status, 200);
    let mut fourth = client_from(&webhook, &ca, host(8, 2)).unwrap();
    assert_eq!(fourth.get("/healthz").unwrap().status, 200);
    // Three open, none still being set up: a fourth from an address below its
    // share is closed at accept.
    watcher.wait_metric("meshwrap_webhook_connections", 3);
    assert!(
        client_from(&webhook, &ca, host(8, 3)).is_err(),
        "a fourth connection was let in"
    );
    assert_eq!(
        watcher.metric("meshwrap_webhook_connections_shed_total{reason=\"max-connections\"}"),
        1
    );
    assert_eq!(watcher.metric("meshwrap_webhook_connections"), 3);
    // The connections it kept still work.
    post(&mut fourth, &load(&fixtures().join("job-pod.review.json")));
}

/// 127.0.0.0/8 is all local: each of these is a client host of its own.
fn host(c: u8, d: u8) -> std::net::Ipv4Addr {
    std::net::Ipv4Addr::new(127, 0, c, d)
}

fn client_from(webhook: &Webhook, ca: &Ca, source: std::net::Ipv4Addr) -> std::io::Result<Client> {
    Client::connect_from(source, webhook.port, client_config(&ca.pem), Duration::from_secs(20))
}

/// A slowloris client from `source`: its handshake done, then part of a header.
fn slow_from(webhook: &Webhook, ca: &Ca, source: std::net::Ipv4Addr) -> Client {
    let mut client = client_from(webhook, ca, source).unwrap();
    client
        .send_raw(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: app")
        .unwrap();
    client
}

/// Whether `client` is open now: a read finds nothing yet, without waiting.
fn open_now(client: &mut Client) -> bool {
    use std::io::Read;
    client.stream.sock.set_nonblocking(true).unwrap();
    let mut buffer = [0u8; 64];
    let open = matches!(client.stream.read(&mut buffer), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
    client.stream.sock.set_nonblocking(false).unwrap();
    open
}

const SHED_SHARE: &str = "meshwrap_webhook_connections_shed_total{reason=\"source-share\"}";
const SHED_CONNECTIONS: &str = "meshwrap_webhook_connections_shed_total{reason=\"max-connections\"}";
const EVICTED_REQUEST: &str = "meshwrap_webhook_connections_evicted_total{phase=\"request\"}";
const EVICTED_HANDSHAKE: &str = "meshwrap_webhook_connections_evicted_total{phase=\"handshake\"}";

/// A connection from `source` that is answering: requests pipelined and
/// never read, until the server, blocked writing their answers, stops
/// reading (a write of ours blocks).
fn answering_from(webhook: &Webhook, ca: &Ca, source: std::net::Ipv4Addr) -> Client {
    let mut answering = client_from(webhook, ca, source).unwrap();
    small_buffer(&answering, libc::SO_RCVBUF);
    answering
        .stream
        .sock
        .set_write_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let batch = b"GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n".repeat(64);
    let blocked = (0..100_000).any(|_| match answering.send_raw(&batch) {
        Ok(()) => false,
        Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => true,
        Err(e) => panic!("cut off while answering: {e}"),
    });
    assert!(blocked, "the server never stopped reading");
    answering
}

#[test]
fn no_source_address_holds_more_than_its_share_of_the_connections() {
    let ca = Ca::new("share CA");
    // The default share, 25%: 2 of 8 connections for each source address.
    let webhook = Webhook::start("share", &ca, &["--max-connections", "8", "--client-timeout", "30s"]);
    let mut watcher = client_from(&webhook, &ca, host(1, 9)).unwrap();
    assert_eq!(watcher.get("/healthz").unwrap().status, 200);
    // Two connections of one address, both answering: none may give way.
    let _first = answering_from(&webhook, &ca, host(1, 1));
    let _second = answering_from(&webhook, &ca, host(1, 1));
    // The third from the same address is closed at accept, with 5 of 8 slots free.
    assert!(
        client_from(&webhook, &ca, host(1, 1)).is_err(),
        "a third connection from one address"
    );
    assert_eq!(watcher.metric(SHED_SHARE), 1);
    assert_eq!(watcher.metric("meshwrap_webhook_connections"), 3);
    // Another address is served.
    post(
        &mut client_from(&webhook, &ca, host(1, 2)).unwrap(),
        &load(&fixtures().join("job-pod.review.json")),
    );
    assert_eq!(watcher.metric(SHED_SHARE), 1);
}

#[test]
fn when_full_a_newcomer_from_a_lighter_address_gets_in_and_the_heaviest_addresss_oldest_slow_client_gives_way() {
    let ca = Ca::new("evict CA");
    let webhook = Webhook::start(
        "evict",
        &ca,
        &[
            "--max-connections",
            "5",
            "--max-source-share",
            "100%",
            "--client-timeout",
            "30s",
        ],
    );
    let mut watcher = client_from(&webhook, &ca, host(2, 9)).unwrap();
    assert_eq!(watcher.get("/healthz").unwrap().status, 200);
    // Three slow clients from one address, one from another: the server is full.
    let mut heavy: Vec<Client> = (0..3).map(|_| slow_from(&webhook, &ca, host(2, 1))).collect();
    let mut light = slow_from(&webhook, &ca, host(2, 2));
    assert_eq!(watcher.metric("meshwrap_webhook_connections"), 5);
    // The server has seen their handshakes end (they are in their first request).
    watcher.wait_metric("meshwrap_webhook_handshakes", 0);
    // A newcomer from a third address gets in and is served.
    let mut newcomer = client_from(&webhook, &ca, host(2, 3)).unwrap();
    post(&mut newcomer, &load(&fixtures().join("job-pod.review.json")));
    assert_eq!(watcher.metric(EVICTED_REQUEST), 1);
    // The one that gave way is the heaviest address's oldest.
    assert!(
        closed_by_server(&mut heavy[0]),
        "the oldest slow client of the heaviest address was kept"
    );
    assert!(open_now(&mut heavy[1]) && open_now(&mut heavy[2]) && open_now(&mut light));
    // The heavy address holds 2 of 5 among 4 addresses, above its fair share (1.25): refused.
    assert!(
        client_from(&webhook, &ca, host(2, 1)).is_err(),
        "the heavy address got a slot"
    );
    assert_eq!(watcher.metric(SHED_CONNECTIONS), 1);
    assert_eq!(watcher.metric(EVICTED_REQUEST), 1);
}

#[test]
fn when_the_handshakes_are_full_a_newcomer_from_another_address_takes_the_oldest_ones_place() {
    let ca = Ca::new("evict handshake CA");
    let webhook = Webhook::start(
        "evict-handshake",
        &ca,
        &[
            "--max-handshakes",
            "2",
            "--max-source-share",
            "100%",
            "--client-timeout",
            "30s",
        ],
    );
    let mut watcher = client_from(&webhook, &ca, host(3, 9)).unwrap();
    // Answered: its handshake is over as the server counts.
    assert_eq!(watcher.get("/healthz").unwrap().status, 200);
    // Two TCP connections that never start TLS hold both handshake slots.
    let silent: Vec<std::net::TcpStream> = (0..2)
        .map(|_| tcp_from(host(3, 1), webhook.port, Duration::from_secs(20)).unwrap())
        .collect();
    watcher.wait_metric("meshwrap_webhook_handshakes", 2);
    let mut newcomer = client_from(&webhook, &ca, host(3, 2)).unwrap();
    post(&mut newcomer, &load(&fixtures().join("job-pod.review.json")));
    assert_eq!(watcher.metric(EVICTED_HANDSHAKE), 1);
    let read = |mut tcp: &std::net::TcpStream, wait: Option<Duration>| {
        use std::io::Read;
        tcp.set_read_timeout(wait).unwrap();
        tcp.set_nonblocking(wait.is_none()).unwrap();
        tcp.read(&mut [0u8; 16])
    };
    assert!(
        matches!(read(&silent[0], Some(Duration::from_secs(20))), Ok(0) | Err(_)),
        "the oldest handshake was kept"
    );
    assert!(
        matches!(read(&silent[1], None), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the younger handshake was closed"
    );
}

#[test]
fn a_burst_of_new_connections_from_one_address_is_not_refused_while_handshake_slots_are_free() {
    // An API server whose pool is cold (after a restart, or a burst of pod
    // creations) dials as many connections at once as it has admissions,
    // all from one address: each refused one is a failed pod creation. At
    // the default 25% share, one address's 20 handshakes at once are more
    // than a share of the 64 handshake slots, and all get in.
    let ca = Ca::new("burst CA");
    let webhook = Webhook::start("burst", &ca, &["--client-timeout", "30s"]);
    let mut watcher = client_from(&webhook, &ca, host(5, 9)).unwrap();
    assert_eq!(watcher.get("/healthz").unwrap().status, 200);
    // Twenty TCP connections that have not finished TLS yet, from one address.
    let _pending: Vec<std::net::TcpStream> = (0..20)
        .map(|_| tcp_from(host(5, 1), webhook.port, Duration::from_secs(20)).unwrap())
        .collect();
    watcher.wait_metric("meshwrap_webhook_handshakes", 20);
    // One more from the same address completes and is served.
    let mut last = client_from(&webhook, &ca, host(5, 1)).unwrap();
    post(&mut last, &load(&fixtures().join("job-pod.review.json")));
    assert_eq!(watcher.metric(SHED_SHARE), 0);
    assert_eq!(watcher.metric(EVICTED_HANDSHAKE), 0);
}

#[test]
fn a_connection_answering_a_request_is_never_evicted() {
    let ca = Ca::new("answering CA");
    let webhook = Webhook::start(
        "answering",
        &ca,
        &[
            "--max-connections",
            "3",
            "--max-source-share",
            "100%",
            "--client-timeout",
            "60s",
        ],
    );
    let mut watcher = client_from(&webhook, &ca, host(4, 9)).unwrap();
    assert_eq!(watcher.get("/healthz").unwrap().status, 200);
    // The oldest of its address: requests pipelined and never read, until
    // the server, blocked writing their answers, stops reading (a write of
    // ours blocks): it is answering.
    let _answering = answering_from(&webhook, &ca, host(4, 1));
    // A younger slow client of the same address: the server is full.
    let mut slow = slow_from(&webhook, &ca, host(4, 1));
    assert_eq!(watcher.metric("meshwrap_webhook_connections"), 3);
    // The server has seen its handshake end (it is in its first request).
    watcher.wait_metric("meshwrap_webhook_handshakes", 0);
    // A newcomer gets in; the one that gave way is the slow one, not the older one answering.
    let mut newcomer = client_from(&webhook, &ca, host(4, 2)).unwrap();
    post(&mut newcomer, &load(&fixtures().join("job-pod.review.json")));
    assert!(closed_by_server(&mut slow), "the slow client was kept");
    assert_eq!(watcher.metric(EVICTED_REQUEST), 1);
    // Full again, with no connection still in its handshake or first
    // request: a newcomer is refused, and none is evicted for it.
    assert!(
        client_from(&webhook, &ca, host(4, 3)).is_err(),
        "a fourth connection got in"
    );
    assert_eq!(watcher.metric(SHED_CONNECTIONS), 1);
    assert_eq!(watcher.metric(EVICTED_REQUEST), 1);
    assert_eq!(watcher.metric("meshwrap_webhook_connections"), 3);
}

#[test]
fn the_state_kept_per_address_goes_with_the_addresses_last_connection() {
    let ca = Ca::new("sources CA");
    let webhook = Webhook::start("sources", &ca, &["--max-connections", "16", "--client-timeout", "30s"]);
    let mut watcher = client_from(&webhook, &ca, host(5, 255)).unwrap();
    // Served once, so it never gives way (a connection before its first request would).
    assert_eq!(watcher.get("/healthz").unwrap().status, 200);
    // 500 addresses each hold a TCP connection that never starts TLS (each
    // newcomer from an address holding nothing takes the oldest's place).
    let mut held = Vec::new();
    for i in 0..500u16 {
        let source = std::net::Ipv4Addr::new(127, 5, (i / 250) as u8, (i % 250) as u8 + 1);
        if let Ok(tcp) = tcp_from(source, webhook.port, Duration::from_secs(20)) {
            held.push(tcp);
        }
    }
    // The server accepts in order: once a handshake dialled after them is
    // done, it has taken (or refused) them all.
    let marker = client_from(&webhook, &ca, host(5, 254)).unwrap();
    let sources = watcher.metric("meshwrap_webhook_sources");
    assert!(
        (3..=16).contains(&sources),
        "{sources} sources tracked for 16 connection slots"
    );
    assert!(watcher.metric("meshwrap_webhook_connections") <= 16);
    drop((held, marker));
    // Only the watcher's address is left.
    watcher.wait_metric("meshwrap_webhook_sources", 1);
    watcher.wait_metric("meshwrap_webhook_connections", 1);
}

#[test]
fn a_client_that_pipelines_and_never_reads_is_cut_off_by_the_request_deadline() {
    let ca = Ca::new("no-read CA");
    let webhook = Webhook::start("no-read", &ca, &["--client-timeout", "1s"]);
    let mut reader = webhook.client(&ca);
    assert_eq!(reader.get("/healthz").unwrap().status, 200);
    let mut greedy = webhook.client(&ca);
    // A write that blocks for 20 s means the server kept the connection.
    greedy
        .stream
        .sock
        .set_write_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let batch = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n".repeat(1000);
    let started = Instant::now();
    let mut failed = None;
    // Up to 150 MB of requests, far more than the socket buffers hold.
    for _ in 0..4000 {
        if let Err(e) = greedy.send_raw(&batch) {
            failed = Some(e);
            break;
        }
    }
    let took = started.elapsed();
    let error = failed.expect("150 MB of pipelined requests were all taken in");
    assert!(
        !matches!(
            error.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
        "the server held the connection while its answers went unread: {error} after {took:?}"
    );
    assert!(took < Duration::from_secs(8), "held for {took:?}");
    assert_eq!(
        reader.metric("meshwrap_webhook_connections_timed_out_total{bound=\"request\"}"),
        1
    );
    post(&mut reader, &load(&fixtures().join("job-pod.review.json")));
}

/// Sends the head of a /mutate request declaring `length` bytes, and one.
fn hold_body(webhook: &Webhook, ca: &Ca, length: usize) -> Client {
    let mut client = webhook.client(ca);
    client
        .send_raw(
            format!(
                "POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n\r\n{{"
            )
            .as_bytes(),
        )
        .unwrap();
    client
}

#[test]
fn bodies_in_flight_share_a_budget_and_one_it_cannot_cover_is_answered_503_at_once() {
    // The budget: 16 MiB shared, and 4 MiB for bodies of at most 64 KiB.
    const SHARED: usize = 16 * 1024 * 1024;
    let ca = Ca::new("bodies CA");
    let webhook = Webhook::start("bodies", &ca, &["--client-timeout", "10s"]);
    let mut watcher = webhook.client(&ca);
    // Five near-3 MiB bodies, and one that fills the shared budget exactly.
    let mut held: Vec<Client> = (0..5).map(|_| hold_body(&webhook, &ca, 3_000_000)).collect();
    held.push(hold_body(&webhook, &ca, SHARED - 15_000_000));
    watcher.wait_metric("meshwrap_webhook_body_bytes", SHARED as u64);
    // One more is answered at once, before its body is sent: 503, Retry-After.
    let started = Instant::now();
    let mut refused = hold_body(&webhook, &ca, 3_000_000);
    let response = refused.read_response().unwrap();
    assert_eq!(response.status, 503, "{}", response.text());
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    assert!(
        response.headers.iter().any(|(k, v)| k == "retry-after" && v == "1"),
        "{:?}",
        response.headers
    );
    assert!(response.text().contains("budget"), "{}", response.text());
    assert_eq!(
        watcher.metric("meshwrap_webhook_requests_total{outcome=\"error\",reason=\"busy\"}"),
        1
    );
    // An ordinary pod still gets in: small bodies have their own lane.
    post(&mut watcher, &load(&fixtures().join("job-pod.review.json")));
    // The budget comes back when the bodies' connections end.
    drop(held);
    watcher.wait_metric("meshwrap_webhook_body_bytes", 0);
    let mut big = webhook.client(&ca);
    let response = big.post(&vec![b' '; 3_000_000]).unwrap();
    assert_eq!(
        response.status,
        400,
        "read whole, then refused as no review: {}",
        response.text()
    );
}

/// Sets a socket buffer option of `client`'s socket to 4 KB.
fn small_buffer(client: &Client, option: libc::c_int) {
    use std::os::unix::io::AsRawFd;
    let size: libc::c_int = 4096;
    // SAFETY: setsockopt on an open socket, with a pointer to a c_int and its size.
    let r = unsafe {
        libc::setsockopt(
            client.stream.sock.as_raw_fd(),
            libc::SOL_SOCKET,
            option,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0);
}

#[test]
fn a_client_that_never_reads_can_park_only_a_bounded_amount_in_the_servers_socket_buffers() {
    let ca = Ca::new("socket buffers CA");
    let webhook = Webhook::start("socket-buffers", &ca, &["--client-timeout", "30s"]);
    let mut greedy = webhook.client(&ca);
    // Its own buffers small, so what it manages to send sits in the server's.
    small_buffer(&greedy, libc::SO_SNDBUF);
    small_buffer(&greedy, libc::SO_RCVBUF);
    greedy
        .stream
        .sock
        .set_write_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    // Requests that ask for much (a 404's text each), pipelined unread.
    let request = b"GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n".repeat(64);
    let mut sent = 0usize;
    let started = Instant::now();
    // Until a write blocks (the server stopped taking them), at most 64 MB or 20 s.
    while sent < 64 << 20 && started.elapsed() < Duration::from_secs(20) {
        match greedy.send_raw(&request) {
            Ok(()) => sent += request.len(),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => break,
            Err(e) => panic!("cut off before its writes blocked: {e}"),
        }
    }
    assert!(sent > 0);
    // The server's side of this connection, as the kernel reports it
    // (`ss`, from iproute2): its buffer limits (rb, tb) stay at the fixed
    // 16 KiB, doubled; autotuned, they start at 128 KB and grow.
    let local = greedy.stream.sock.local_addr().unwrap().port();
    let ss = std::process::Command::new("ss")
        .args(["-tmnH", "state", "established"])
        .arg(format!("( sport = :{} and dport = :{local} )", webhook.port))
        .output()
        .unwrap_or_else(|e| panic!("this test needs ss (iproute2): {e}"));
    let text = String::from_utf8_lossy(&ss.stdout).into_owned();
    let limit = |name: &str| -> u64 {
        let at = text
            .find(&format!(",{name}"))
            .unwrap_or_else(|| panic!("no {name} in ss's answer: {text}"));
        let digits: String = text[at + name.len() + 1..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().unwrap()
    };
    let (rb, tb) = (limit("rb"), limit("tb"));
    assert!(
        rb <= 32768 && tb <= 32768,
        "the server's socket buffers are rb {rb}, tb {tb} bytes (sent {sent}): {text}"
    );
}

#[test]
fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() {
    let ca = Ca::new("idle CA");
    let webhook = Webhook::start("idle", &ca, &["--idle-timeout", "1s", "--client-timeout", "30s"]);
    let mut idle = webhook.client(&ca);
    assert_eq!(idle.get("/healthz").unwrap().status, 200);
    let started = Instant::now();
    // The client's read times out after 20 s: a server that keeps the
    // connection (hyper's header timer alone would, for 30 s) fails here.
    let error = match idle.read_response() {
        Ok(r) => panic!("an answer to no request: {}", r.status),
        Err(e) => e,
    };
    let took = started.elapsed();
    assert_eq!(
        error.kind(),
        std::io::ErrorKind::UnexpectedEof,
        "{error} after {took:?}"
    );
    assert!(took < Duration::from_secs(8), "held for {took:?}");
    let mut other = webhook.client(&ca);
    assert_eq!(
        other.metric("meshwrap_webhook_connections_timed_out_total{bound=\"idle\"}"),
        1
    );
}

#[test]
fn sigterm_turns_readiness_off_finishes_requests_in_flight_and_exits_0() {
    let ca = Ca::new("drain CA");
    let mut webhook = Webhook::start("drain", &ca, &["--shutdown-delay", "2s"]);
    let review = load(&fixtures().join("job-pod.review.json")).to_string();
    // A request in flight: headers and half of the body sent.
    let mut in_flight = webhook.client(&ca);
    let (first, second) = review.as_bytes().split_at(review.len() / 2);
    let mut head = format!(
        "POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        review.len()
    )
    .into_bytes();
    head.extend_from_slice(first);
    in_flight.send_raw(&head).unwrap();
    let mut idle = webhook.client(&ca);
    assert_eq!(idle.get("/readyz").unwrap().status, 200);

    webhook.signal(libc::SIGTERM);
    webhook.wait_for("stopping: /readyz answers 503; serving on while the endpoints update");
    // Not ready, but still serving new connections during the delay.
    let mut late = webhook.client(&ca);
    let readyz = late.get("/readyz").unwrap();
    assert_eq!(readyz.status, 503, "{}", readyz.text());
    webhook.wait_for("draining");
    in_flight.send_raw(second).unwrap();
    let response = in_flight.read_response().unwrap();
    assert_eq!(response.status, 200, "{}", response.text());
    assert_eq!(webhook.exit_code(Duration::from_secs(10)), Some(0));
    assert!(webhook.log_lines().iter().any(|l| l["msg"] == "drained"));
    // The idle keep-alive connection was closed, not left hanging.
    assert!(idle.get("/healthz").is_err());
}

#[test]
fn metrics_count_outcomes_and_latency_and_every_decision_is_one_json_log_line() {
    let ca = Ca::new("metrics CA");
    let webhook = Webhook::start("metrics", &ca, &[]);
    let mut client = webhook.client(&ca);
    for name in ["tfjob-worker", "no-command", "update", "already-wrapped"] {
        post(&mut client, &load(&fixtures().join(format!("{name}.review.json"))));
    }
    let _ = client.request("POST", "/mutate", "text/plain", b"{}");
    let mut client = webhook.client(&ca);
    let metrics = client.get("/metrics").unwrap();
    assert_eq!(metrics.status, 200);
    let text = metrics.text();
    for line in [
        "meshwrap_webhook_requests_total{outcome=\"injected\",reason=\"injected\"} 1",
        "meshwrap_webhook_requests_total{outcome=\"skipped\",reason=\"no-command\"} 1",
        "meshwrap_webhook_requests_total{outcome=\"ignored\",reason=\"not-pod-create\"} 1",
        "meshwrap_webhook_requests_total{outcome=\"unchanged\",reason=\"unchanged\"} 1",
        "meshwrap_webhook_requests_total{outcome=\"error\",reason=\"content-type\"} 1",
        "meshwrap_webhook_request_duration_seconds_bucket{le=\"+Inf\"} 5",
        "meshwrap_webhook_request_duration_seconds_count 5",
    ] {
        assert!(text.lines().any(|l| l == line), "no `{line}` in:\n{text}");
    }
    let decisions: Vec<Value> = webhook
        .log_lines()
        .into_iter()
        .filter(|l| l["msg"] == "admission")
        .collect();
    assert_eq!(decisions.len(), 4, "{decisions:#?}");
    let tf = &decisions[0];
    assert_eq!(tf["outcome"], "injected");
    assert_eq!(tf["pod"], "mnist-worker-0");
    assert_eq!(tf["namespace"], "team-a");
    assert_eq!(tf["owner"], "TFJob/mnist");
    assert_eq!(tf["container"], "tensorflow");
    assert!(tf["time"].as_str().unwrap().ends_with('Z') && tf["level"] == "info");
    assert_eq!(decisions[1]["outcome"], "skipped");
    assert!(decisions[1]["reason"].as_str().unwrap().contains("no command"));
}

#[test]
fn bad_flags_and_bad_certificates_are_one_line_and_nothing_is_served() {
    use common::kubectl_meshwrap;
    let run = kubectl_meshwrap(&["webhook", "--image", common::IMAGE], "");
    assert_eq!(run.code, 2);
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("--tls-cert") && run.stderr.contains("--tls-key"),
        "{}",
        run.stderr
    );

    let dir = temp_dir("bad-flags");
    let (cert, _) = Ca::new("x").serving(1);
    let (_, key) = Ca::new("y").serving(1);
    std::fs::write(dir.join("tls.crt"), cert).unwrap();
    std::fs::write(dir.join("tls.key"), key).unwrap();
    let (c, k) = (dir.join("tls.crt"), dir.join("tls.key"));
    let (c, k) = (c.to_str().unwrap(), k.to_str().unwrap());
    for (args, says) in [
        (vec!["--tls-cert", c, "--tls-key", k], "--image"),
        (
            vec![
                "--tls-cert",
                c,
                "--tls-key",
                k,
                "--image",
                common::IMAGE,
                "--listen",
                "127.0.0.1:0",
            ],
            "do not go together",
        ),
        (
            vec![
                "--tls-cert",
                "/nonexistent/tls.crt",
                "--tls-key",
                k,
                "--image",
                common::IMAGE,
            ],
            "/nonexistent/tls.crt",
        ),
        (
            vec!["--tls-cert", c, "--tls-key", k, "--client-timeout", "0s"],
            "--client-timeout",
        ),
        (
            vec!["--tls-cert", c, "--tls-key", k, "--listen", "localhost"],
            "--listen",
        ),
        (
            vec!["--tls-cert", c, "--tls-key", k, "--shutdown-delay", "soon"],
            "--shutdown-delay",
        ),
        (
            vec!["--tls-cert", c, "--tls-key", k, "--max-connections", "0"],
            "--max-connections",
        ),
        (
            vec!["--tls-cert", c, "--tls-key", k, "--max-handshakes", "many"],
            "--max-handshakes",
        ),
        (
            vec!["--tls-cert", c, "--tls-key", k, "--idle-timeout", "0s"],
            "--idle-timeout",
        ),
        (
            vec!["--tls-cert", c, "--tls-key", k, "--max-source-share", "0%"],
            "--max-source-share",
        ),
        (
            vec!["--tls-cert", c, "--tls-key", k, "--max-source-share", "25"],
            "--max-source-share",
        ),
    ] {
        let mut all = vec!["webhook"];
        all.extend(args);
        let run = kubectl_meshwrap(&all, "");
        assert_eq!(run.code, 2, "{all:?}: {}", run.stderr);
        assert_eq!(run.stderr.lines().count(), 1, "{all:?}: {}", run.stderr);
        assert!(run.stderr.contains(says), "{all:?}: {}", run.stderr);
        assert!(!run.stderr.contains("listening"), "{}", run.stderr);
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A pod of `owner` (apiVersion, kind), as its controller creates it.
fn owned_pod(owner: (&str, &str)) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "p-", "namespace": "team-a", "labels": {"sidecar.istio.io/inject": "true"},
                     "ownerReferences": [{"apiVersion": owner.0, "kind": owner.1, "name": "o", "uid": "u", "controller": true}]},
        "spec": {"restartPolicy": "Always", "containers": [{"name": "app", "image": "x", "command": ["serve"]}]}
    })
}

#[test]
fn a_long_running_controllers_pods_are_left_alone_unless_all_workloads_are_asked_for() {
    let ca = Ca::new("workloads CA");
    let batch = Webhook::start("workloads-batch", &ca, &[]);
    let mut client = batch.client(&ca);
    for owner in [
        ("apps/v1", "ReplicaSet"),
        ("apps/v1", "StatefulSet"),
        ("apps/v1", "DaemonSet"),
        ("v1", "ReplicationController"),
        ("ray.io/v1", "RayCluster"),
    ] {
        let answer = post(&mut client, &review_of(&owned_pod(owner), "lr"));
        let response = &answer["response"];
        assert_eq!(response["allowed"], true, "{owner:?}");
        assert!(response.get("patch").is_none(), "{owner:?}: {answer}");
        assert!(response.get("warnings").is_none(), "{owner:?}: {answer}");
    }
    // A Job's pod in the same namespace is wrapped.
    let answer = post(&mut client, &review_of(&owned_pod(("batch/v1", "Job")), "job"));
    assert!(answer["response"].get("patch").is_some(), "{answer}");
    let all = Webhook::start("workloads-all", &ca, &["--workloads", "all"]);
    let mut client = all.client(&ca);
    let answer = post(&mut client, &review_of(&owned_pod(("apps/v1", "ReplicaSet")), "all"));
    assert!(answer["response"].get("patch").is_some(), "{answer}");
}
