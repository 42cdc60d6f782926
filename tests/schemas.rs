//! examples/ against the upstream schemas in ../shared/k8s-schemas (upstream
//! files stay out of the project; its README says where each came from):
//! every manifest validates strictly, with unknown fields rejected
//! as `kubectl --validate=strict` and the API server's fieldValidation=Strict
//! reject them, and as published. The semantics schemas cannot express
//! (labels, policies, mounts) are checked in examples.rs.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `../shared/k8s-schemas` beside the checkout, where the upstream schemas
/// are (CI always has it).
fn shared_schemas() -> PathBuf {
    root().join("../shared/k8s-schemas")
}

/// Whether `test` must skip: the upstream schemas are not beside the
/// checkout. In CI (CI or POD_TESTS_REQUIRED set) that fails the test
/// instead; elsewhere one line says so, and a fresh clone's tests pass.
fn without_schemas(test: &str) -> bool {
    let missing = (!shared_schemas().join("k8s/swagger-release-1.36.json").is_file())
        .then(|| format!("{} is missing (CI has it)", shared_schemas().display()));
    let required = std::env::var_os("CI").is_some() || std::env::var_os("POD_TESTS_REQUIRED").is_some();
    match missing {
        Some(why) if required => panic!("{test} cannot run: {why}"),
        Some(why) => {
            println!("skipped {test}: {why}");
            true
        }
        None => false,
    }
}

/// A file of the upstream schemas, by its path under `../shared/k8s-schemas`.
fn load_json(path: &str) -> Value {
    let text = std::fs::read_to_string(shared_schemas().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap()
}

fn load_yaml_docs(path: &Path) -> Vec<Value> {
    use serde::Deserialize;
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    // kubectl reads past a byte order mark; so does inject, which keeps it.
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    serde_yaml::Deserializer::from_str(text)
        .map(|doc| Value::deserialize(doc).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .filter(|doc| !doc.is_null())
        .collect()
}

/// A schema checker: a name for the report, and the errors it finds.
struct Check {
    name: String,
    validator: jsonschema::Validator,
}

impl Check {
    fn errors(&self, doc: &Value) -> Vec<String> {
        self.validator
            .iter_errors(doc)
            .map(|e| format!("[{}] at {}: {e}", self.name, e.instance_path()))
            .collect()
    }
}

fn draft4(name: &str, schema: &Value) -> Check {
    Check {
        name: name.into(),
        validator: jsonschema::options()
            .with_draft(jsonschema::Draft::Draft4)
            .build(schema)
            .unwrap_or_else(|e| panic!("{name}: {e}")),
    }
}

// ---- Kubernetes ---------------------------------------------------------

/// The swagger definitions as JSON Schema: int-or-string as both types, a
/// `$ref`'s siblings dropped (draft 4 ignores them), Quantity also a number
/// (YAML numbers are accepted); with `strict`, every object with properties
/// closed to others, the rule of yannh/kubernetes-json-schema's -strict.
fn kubernetes_definitions(strict: bool) -> Value {
    fn fix(node: &mut Value) {
        match node {
            Value::Object(map) => {
                if map.get("format").and_then(Value::as_str) == Some("int-or-string") {
                    map.insert("type".into(), json!(["integer", "string"]));
                }
                if map.contains_key("$ref") {
                    map.retain(|k, _| k == "$ref");
                }
                map.values_mut().for_each(fix);
            }
            Value::Array(items) => items.iter_mut().for_each(fix),
            _ => {}
        }
    }
    let mut definitions = load_json("k8s/swagger-release-1.36.json")["definitions"].take();
    fix(&mut definitions);
    let definitions = definitions.as_object_mut().unwrap();
    if strict {
        for definition in definitions.values_mut().filter_map(Value::as_object_mut) {
            if definition.contains_key("properties") && !definition.contains_key("additionalProperties") {
                definition.insert("additionalProperties".into(), json!(false));
            }
        }
    }
    definitions["io.k8s.apimachinery.pkg.api.resource.Quantity"]["type"] = json!(["string", "number"]);
    Value::Object(definitions.clone())
}

fn kubernetes_checks(kind: &str, definition: &str, file: &str) -> Vec<Check> {
    let mut checks = Vec::new();
    for strict in [true, false] {
        let schema =
            json!({"$ref": format!("#/definitions/{definition}"), "definitions": kubernetes_definitions(strict)});
        let name = format!(
            "Kubernetes 1.36 OpenAPI, {} ({kind})",
            if strict { "strict" } else { "as published" }
        );
        checks.push(draft4(&name, &schema));
    }
    let dir = "k8s/kubernetes-validate/v1.35.0-local-strict";
    let definitions = load_json(&format!("{dir}/_definitions.json"));
    // Its refs name /api/_definitions.json against the schema's $id.
    let registry = jsonschema::Registry::new()
        .add("https://kubernetes.io/api/_definitions.json", definitions)
        .and_then(|builder| builder.prepare())
        .unwrap();
    let registry: &'static jsonschema::Registry = Box::leak(Box::new(registry));
    let validator = jsonschema::options()
        .with_registry(registry)
        .build(&load_json(&format!("{dir}/{file}")))
        .unwrap();
    checks.push(Check {
        name: format!("kubernetes-validate 1.35 strict ({kind})"),
        validator,
    });
    checks
}

// ---- CRDs -----------------------------------------------------------------

fn crd_schema(path: &str, kind: &str, version: &str) -> Value {
    for doc in load_yaml_docs(&shared_schemas().join(path)) {
        if doc["kind"] != "CustomResourceDefinition" || doc["spec"]["names"]["kind"] != kind {
            continue;
        }
        for v in doc["spec"]["versions"].as_array().unwrap() {
            if v["name"] == version {
                return v["schema"]["openAPIV3Schema"].clone();
            }
        }
    }
    panic!("{path}: no {kind} {version}");
}

/// A CRD's structural schema as JSON Schema. `x-kubernetes-int-or-string` is
/// a type, `nullable` adds null, and `x-kubernetes-preserve-unknown-fields`
/// turns strictness off beneath it. With `strict`, objects with properties
/// reject others: what fieldValidation=Strict (kubectl's default since 1.27)
/// reports as an unknown field, where the API server would otherwise prune it
/// silently.
fn crd_to_json_schema(schema: &Value, strict: bool) -> Value {
    fn walk(node: &mut Value, preserve: bool, strict: bool) {
        let Value::Object(map) = node else { return };
        let preserve = preserve || map.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true));
        if map.get("x-kubernetes-int-or-string") == Some(&json!(true)) {
            map.remove("type");
            map.entry("anyOf")
                .or_insert_with(|| json!([{"type": "integer"}, {"type": "string"}]));
        }
        if map.get("nullable") == Some(&json!(true))
            && let Some(Value::String(t)) = map.get("type").cloned()
        {
            map.insert("type".into(), json!([t, "null"]));
        }
        if strict && !preserve && map.contains_key("properties") && !map.contains_key("additionalProperties") {
            map.insert("additionalProperties".into(), json!(false));
        }
        for (key, value) in map.iter_mut() {
            match (key.as_str(), value) {
                ("properties" | "patternProperties" | "definitions", Value::Object(children)) => {
                    children.values_mut().for_each(|v| walk(v, preserve, strict));
                }
                ("items" | "additionalProperties" | "not", child) => walk(child, preserve, strict),
                ("allOf" | "anyOf" | "oneOf", Value::Array(children)) => {
                    children.iter_mut().for_each(|v| walk(v, preserve, strict));
                }
                _ => {}
            }
        }
    }
    let mut schema = schema.clone();
    walk(&mut schema, false, strict);
    schema
}

fn crd_checks(label: &str, path: &str, kind: &str) -> Vec<Check> {
    let version = match kind {
        "Workflow" | "TrainJob" | "TrainingRuntime" | "ClusterTrainingRuntime" | "Application" => "v1alpha1",
        "HelmRelease" => "v2",
        _ => "v1",
    };
    let schema = crd_schema(path, kind, version);
    [true, false]
        .map(|strict| {
            let how = if strict { "strict" } else { "as published" };
            draft4(&format!("{label}, {how}"), &crd_to_json_schema(&schema, strict))
        })
        .into()
}

/// Argo's own JSON Schema of a Workflow (or another of its kinds), as
/// published and strict.
fn argo_json_schema_checks(kind: &str) -> Vec<Check> {
    [false, true]
        .map(|strict| {
            let mut schema: Map<String, Value> = load_json("argo/schema.json").as_object().unwrap().clone();
            schema.remove("oneOf");
            schema.remove("type");
            schema.insert(
                "$ref".into(),
                json!(format!("#/definitions/io.argoproj.workflow.v1alpha1.{kind}")),
            );
            if strict {
                for definition in schema["definitions"].as_object_mut().unwrap().values_mut() {
                    let definition = definition.as_object_mut().unwrap();
                    if definition.contains_key("properties") && !definition.contains_key("additionalProperties") {
                        definition.insert("additionalProperties".into(), json!(false));
                    }
                }
            }
            let how = if strict { "strict" } else { "as published" };
            Check {
                name: format!("argo-workflows api/jsonschema, {how} ({kind})"),
                validator: jsonschema::validator_for(&Value::Object(schema)).unwrap(),
            }
        })
        .into()
}

/// The checks for a document's apiVersion and kind; none for a kind we have
/// no schema for.
fn checks_for(doc: &Value) -> Vec<Check> {
    match (doc["apiVersion"].as_str(), doc["kind"].as_str()) {
        (Some("batch/v1"), Some("Job")) => kubernetes_checks("Job", "io.k8s.api.batch.v1.Job", "job-batch-v1.json"),
        (Some("v1"), Some("Pod")) => kubernetes_checks("Pod", "io.k8s.api.core.v1.Pod", "pod-v1.json"),
        (Some("kubeflow.org/v1"), Some("TFJob")) => crd_checks(
            "training-operator 1.9 TFJob CRD",
            "kubeflow/kubeflow.org_tfjobs.yaml",
            "TFJob",
        ),
        (Some("kubeflow.org/v1"), Some("PyTorchJob")) => crd_checks(
            "training-operator 1.9 PyTorchJob CRD",
            "kubeflow/kubeflow.org_pytorchjobs.yaml",
            "PyTorchJob",
        ),
        // Kubeflow Trainer's CRDs, from ../shared/upstream-corpus (beside
        // ../shared/k8s-schemas, which the paths here start from).
        (
            Some("trainer.kubeflow.org/v1alpha1"),
            Some(kind @ ("TrainJob" | "TrainingRuntime" | "ClusterTrainingRuntime")),
        ) => crd_checks(
            &format!("kubeflow/trainer {kind} CRD"),
            &format!(
                "../upstream-corpus/_crds/kubeflow+trainer/manifests/base/crds/trainer.kubeflow.org_{}s.yaml",
                kind.to_ascii_lowercase()
            ),
            kind,
        ),
        (Some("argoproj.io/v1alpha1"), Some("Workflow")) => {
            let mut checks = crd_checks(
                "argo-workflows Workflow CRD (full)",
                "argo/argoproj.io_workflows.full.yaml",
                "Workflow",
            );
            checks.extend(argo_json_schema_checks("Workflow"));
            checks
        }
        (
            Some("argoproj.io/v1alpha1"),
            Some(kind @ ("WorkflowTemplate" | "ClusterWorkflowTemplate" | "CronWorkflow")),
        ) => argo_json_schema_checks(kind),
        (Some("argoproj.io/v1alpha1"), Some("Application")) => {
            crd_checks("argo-cd Application CRD", "argo-cd/application-crd.yaml", "Application")
        }
        (Some("helm.toolkit.fluxcd.io/v2"), Some("HelmRelease")) => crd_checks(
            "flux helm-controller HelmRelease CRD",
            "flux/helm.toolkit.fluxcd.io_helmreleases.yaml",
            "HelmRelease",
        ),
        (Some("batch/v1"), Some("CronJob")) => swagger_checks("CronJob", "io.k8s.api.batch.v1.CronJob"),
        (Some("apps/v1"), Some(kind @ ("Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet"))) => {
            swagger_checks(kind, &format!("io.k8s.api.apps.v1.{kind}"))
        }
        (Some("v1"), Some(kind @ ("ReplicationController" | "ConfigMap" | "PodTemplate"))) => {
            swagger_checks(kind, &format!("io.k8s.api.core.v1.{kind}"))
        }
        _ => Vec::new(),
    }
}

/// The Kubernetes OpenAPI's checks alone (kubernetes-validate ships only
/// Job and Pod).
fn swagger_checks(kind: &str, definition: &str) -> Vec<Check> {
    [true, false]
        .map(|strict| {
            let schema =
                json!({"$ref": format!("#/definitions/{definition}"), "definitions": kubernetes_definitions(strict)});
            let how = if strict { "strict" } else { "as published" };
            draft4(&format!("Kubernetes 1.36 OpenAPI, {how} ({kind})"), &schema)
        })
        .into()
}

fn manifests() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(&root().join("examples"), &mut out);
    // deploy/ installs the webhook through Argo CD and Flux: checked here,
    // against their CRDs (../shared/k8s-schemas' own checker has no Argo CD
    // or Flux kinds, and examples/ holds only what it checks).
    walk(&root().join("deploy"), &mut out);
    // The unwrapped sources are inject's input (kubectl-meshwrap's golden test
    // reads them); the kustomize recipe's Job is wrapped at build time.
    out.retain(|p| {
        !p.components()
            .any(|c| c.as_os_str() == "unwrapped" || c.as_os_str() == "kustomize")
    });
    out.sort();
    out
}

#[test]
fn every_example_manifest_validates_against_the_upstream_schemas() {
    if without_schemas("every_example_manifest_validates_against_the_upstream_schemas") {
        return;
    }
    let mut failures = Vec::new();
    let mut checked = 0;
    for file in manifests() {
        for doc in load_yaml_docs(&file) {
            // Flux's source-controller CRDs are not in ../shared/k8s-schemas:
            // the GitRepository beside the HelmRelease is left to kubectl.
            if doc["apiVersion"] == "source.toolkit.fluxcd.io/v1" && doc["kind"] == "GitRepository" {
                continue;
            }
            let checks = checks_for(&doc);
            assert!(
                !checks.is_empty(),
                "{}: no vendored schema for {} {}",
                file.display(),
                doc["apiVersion"],
                doc["kind"]
            );
            for check in &checks {
                checked += 1;
                for error in check.errors(&doc) {
                    failures.push(format!("{}: {error}", file.display()));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    println!("{checked} schema checks passed");
}

#[test]
fn a_misspelled_field_fails_every_strict_check() {
    if without_schemas("a_misspelled_field_fails_every_strict_check") {
        return;
    }
    // The strict checks must be able to fail: each example with one field
    // misspelled in its pod spec (restartPolicy is in every pod spec's schema).
    for file in manifests() {
        for mut doc in load_yaml_docs(&file) {
            let checks = checks_for(&doc);
            // A document with no pod spec (Argo CD's Application, Flux's
            // HelmRelease) gets a misspelled field in its own spec.
            if !misspell_first(&mut doc, "containers")
                && let Some(spec) = doc.get_mut("spec").and_then(Value::as_object_mut)
            {
                spec.insert("releaseNamee".into(), json!("x"));
            }
            for check in checks.iter().filter(|c| c.name.contains("strict")) {
                assert!(
                    !check.errors(&doc).is_empty(),
                    "{}: [{}] accepts an unknown field",
                    file.display(),
                    check.name
                );
            }
        }
    }
}

/// Adds `restartPolicyy` beside the first `key` (or Argo's `container`) found.
fn misspell_first(doc: &mut Value, key: &str) -> bool {
    match doc {
        Value::Object(map) if map.contains_key(key) || map.contains_key("container") => {
            map.insert("restartPolicyy".into(), json!("Never"));
            true
        }
        Value::Object(map) => map.values_mut().any(|v| misspell_first(v, key)),
        Value::Array(items) => items.iter_mut().any(|v| misspell_first(v, key)),
        _ => false,
    }
}

// ---- what kubectl-meshwrap writes ---------------------------------------------

/// Every pod template in a document (an object with `spec.containers`), as
/// a PodTemplateSpec: its metadata and spec.
fn pod_templates(doc: &Value, out: &mut Vec<Value>) {
    match doc {
        Value::Object(map) => {
            if map
                .get("spec")
                .is_some_and(|s| s.get("containers").is_some_and(Value::is_array))
            {
                let mut template = Map::new();
                for key in ["metadata", "spec"] {
                    if let Some(v) = map.get(key) {
                        template.insert(key.into(), v.clone());
                    }
                }
                out.push(Value::Object(template));
            }
            map.values().for_each(|v| pod_templates(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| pod_templates(v, out)),
        _ => {}
    }
}

/// Goldens whose input is, by design, something this test's reader cannot
/// take as kubectl does, or the API server would refuse: they test how
/// inject reads odd input, and inject leaves the odd part as it is.
const NOT_API_OBJECTS: [(&str, &str); 5] = [
    (
        "yaml11-booleans",
        "YAML 1.1 booleans (yes, Off, Y): kubectl's reader takes them, this YAML 1.2 one reads strings",
    ),
    (
        "optout-boolean",
        "a boolean annotation value, which the API server refuses; inject still reads it as opting out",
    ),
    (
        "duplicate-key",
        "a key twice in one mapping, refused by kubectl's strict decoding and left by inject",
    ),
    (
        "not-an-object",
        "a YAML sequence where an object belongs, reported and left by inject",
    ),
    (
        "helm-action",
        "an unrendered Helm action YAML reads as a mapping: no API object until Helm renders it; left by inject",
    ),
];

fn injected_outputs() -> Vec<PathBuf> {
    let dir = root().join("kubectl-meshwrap/tests/golden");
    for (name, _) in NOT_API_OBJECTS {
        assert!(
            dir.join(format!("{name}.in.yaml")).exists(),
            "NOT_API_OBJECTS names {name}, which has no golden"
        );
    }
    let odd = |p: &Path| {
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        NOT_API_OBJECTS
            .iter()
            .any(|(odd, _)| name.starts_with(&format!("{odd}.")))
    };
    let mut out: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().contains(".out.") && !odd(p))
        .collect();
    out.sort();
    out
}

fn documents_of(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    if text.trim_start().starts_with('{') {
        // JSON objects one after another, as kubectl takes them.
        serde_json::Deserializer::from_str(&text)
            .into_iter::<Value>()
            .map(|v| v.unwrap_or_else(|e| panic!("{}: {e}", path.display())))
            .collect()
    } else {
        load_yaml_docs(path)
    }
}

#[test]
fn everything_inject_writes_validates_strictly_against_the_upstream_schemas() {
    if without_schemas("everything_inject_writes_validates_strictly_against_the_upstream_schemas") {
        return;
    }
    // Whole documents where a schema is vendored (List items one by one);
    // every pod template, of any kind, against Kubernetes' PodTemplateSpec.
    let template_checks: Vec<Check> = [true, false]
        .map(|strict| {
            let schema = json!({
                "$ref": "#/definitions/io.k8s.api.core.v1.PodTemplateSpec",
                "definitions": kubernetes_definitions(strict)
            });
            let how = if strict { "strict" } else { "as published" };
            draft4(&format!("Kubernetes 1.36 OpenAPI, {how} (PodTemplateSpec)"), &schema)
        })
        .into();
    let mut failures = Vec::new();
    let (mut whole, mut templates) = (0, 0);
    let mut cache: std::collections::HashMap<String, Vec<Check>> = std::collections::HashMap::new();
    for file in injected_outputs() {
        for doc in documents_of(&file) {
            let items = match doc["kind"].as_str() {
                Some("List") => doc["items"].as_array().cloned().unwrap_or_default(),
                _ => vec![doc.clone()],
            };
            for item in items {
                let kind = format!("{} {}", item["apiVersion"], item["kind"]);
                for check in cache.entry(kind).or_insert_with(|| checks_for(&item)).iter() {
                    whole += 1;
                    failures.extend(
                        check
                            .errors(&item)
                            .into_iter()
                            .map(|e| format!("{}: {e}", file.display())),
                    );
                }
            }
            let mut found = Vec::new();
            pod_templates(&doc, &mut found);
            for template in &found {
                for check in &template_checks {
                    templates += 1;
                    failures.extend(
                        check
                            .errors(template)
                            .into_iter()
                            .map(|e| format!("{}: {e}", file.display())),
                    );
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        whole > 40 && templates > 50,
        "{whole} document checks, {templates} template checks"
    );
    println!("{whole} document checks and {templates} pod template checks passed");
}

// ---- the webhook ----------------------------------------------------------

/// The checks for an object of the webhook's install (what `manifests`
/// prints and what the chart renders): Kubernetes' own kinds against the
/// OpenAPI, cert-manager's and the Prometheus Operator's against their CRDs.
fn install_checks(doc: &Value) -> Result<Vec<Check>, String> {
    let kind = doc["kind"].as_str().unwrap_or("").to_string();
    Ok(match (doc["apiVersion"].as_str().unwrap_or(""), kind.as_str()) {
        ("v1", k @ ("Namespace" | "ServiceAccount" | "Secret" | "Service" | "ConfigMap")) => {
            swagger_checks(k, &format!("io.k8s.api.core.v1.{k}"))
        }
        ("apps/v1", "Deployment") => checks_for(doc),
        ("policy/v1", "PodDisruptionBudget") => swagger_checks(&kind, "io.k8s.api.policy.v1.PodDisruptionBudget"),
        ("networking.k8s.io/v1", "NetworkPolicy") => swagger_checks(&kind, "io.k8s.api.networking.v1.NetworkPolicy"),
        ("rbac.authorization.k8s.io/v1", k @ ("ClusterRole" | "ClusterRoleBinding")) => {
            swagger_checks(k, &format!("io.k8s.api.rbac.v1.{k}"))
        }
        ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration") => swagger_checks(
            &kind,
            "io.k8s.api.admissionregistration.v1.MutatingWebhookConfiguration",
        ),
        ("cert-manager.io/v1", "Issuer") => crd_checks(
            "cert-manager Issuer CRD",
            "cert-manager/cert-manager.io_issuers.yaml",
            "Issuer",
        ),
        ("cert-manager.io/v1", "Certificate") => crd_checks(
            "cert-manager Certificate CRD",
            "cert-manager/cert-manager.io_certificates.yaml",
            "Certificate",
        ),
        ("monitoring.coreos.com/v1", "PodMonitor") => crd_checks(
            "Prometheus Operator PodMonitor CRD",
            "prometheus-operator/monitoring.coreos.com_podmonitors.yaml",
            "PodMonitor",
        ),
        ("monitoring.coreos.com/v1", "ServiceMonitor") => crd_checks(
            "Prometheus Operator ServiceMonitor CRD",
            "prometheus-operator/monitoring.coreos.com_servicemonitors.yaml",
            "ServiceMonitor",
        ),
        (api, k) => return Err(format!("{api} {k}: no schema chosen for it")),
    })
}

/// Every document of the YAML files in `dir` against [`install_checks`]:
/// (checks run, kinds seen).
fn check_install_files(dir: &Path) -> (usize, std::collections::BTreeSet<String>) {
    let mut failures = Vec::new();
    let (mut checked, mut kinds) = (0, std::collections::BTreeSet::new());
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 2, "{files:?}");
    for file in files {
        for doc in load_yaml_docs(&file) {
            kinds.insert(doc["kind"].as_str().unwrap_or("").to_string());
            let checks = install_checks(&doc).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            for check in checks {
                checked += 1;
                failures.extend(
                    check
                        .errors(&doc)
                        .into_iter()
                        .map(|e| format!("{}: {e}", file.display())),
                );
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    (checked, kinds)
}

/// What `kubectl-meshwrap manifests` prints (its goldens, which
/// kubectl-meshwrap's tests compare with the binary's output), every kind
/// included, strictly and as published.
#[test]
fn everything_manifests_prints_validates_against_the_upstream_schema() {
    if without_schemas("everything_manifests_prints_validates_against_the_upstream_schema") {
        return;
    }
    let (checked, kinds) = check_install_files(&root().join("kubectl-meshwrap/tests/manifests"));
    assert!(checked >= 30, "{checked} checks");
    for kind in ["Issuer", "Certificate", "ClusterRole", "NetworkPolicy", "Secret"] {
        assert!(kinds.contains(kind), "no {kind} among {kinds:?}");
    }
}

/// What the Helm chart renders with each documented set of values (the
/// goldens kubectl-meshwrap/tests/chart.rs compares with real Helm's
/// render), strictly and as published: cert-manager's and the Prometheus
/// Operator's kinds against their CRDs.
#[test]
fn everything_the_chart_renders_validates_against_the_upstream_schemas() {
    if without_schemas("everything_the_chart_renders_validates_against_the_upstream_schemas") {
        return;
    }
    let (checked, kinds) = check_install_files(&root().join("kubectl-meshwrap/tests/chart"));
    assert!(checked >= 40, "{checked} checks");
    for kind in [
        "Issuer",
        "Certificate",
        "Secret",
        "PodMonitor",
        "ServiceMonitor",
        "NetworkPolicy",
        "ClusterRole",
        "ConfigMap",
    ] {
        assert!(kinds.contains(kind), "no {kind} among {kinds:?}");
    }
}

#[test]
fn a_misspelled_field_fails_the_strict_crd_checks_of_the_install() {
    if without_schemas("a_misspelled_field_fails_the_strict_crd_checks_of_the_install") {
        return;
    }
    for (doc, field) in [
        (
            json!({"apiVersion": "cert-manager.io/v1", "kind": "Issuer", "metadata": {"name": "x"},
                "spec": {"selfSigned": {}, "selfSignd": {}}}),
            "selfSignd",
        ),
        (
            json!({"apiVersion": "cert-manager.io/v1", "kind": "Certificate", "metadata": {"name": "x"},
                "spec": {"secretName": "s", "issuerRef": {"name": "i"}, "dnsName": ["a"]}}),
            "dnsName",
        ),
        (
            json!({"apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor", "metadata": {"name": "x"},
                "spec": {"selector": {}, "podMetricsEndpoints": [{"port": "https", "schem": "https"}]}}),
            "schem",
        ),
        (
            json!({"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor", "metadata": {"name": "x"},
                "spec": {"selector": {}, "endpoints": [{"port": "https", "tlsConfg": {}}]}}),
            "tlsConfg",
        ),
    ] {
        let checks = install_checks(&doc).unwrap();
        for check in &checks {
            let errors = check.errors(&doc);
            if check.name.contains("strict") {
                assert!(
                    errors.iter().any(|e| e.contains(field)),
                    "[{}] accepts {field}: {errors:?}",
                    check.name
                );
            } else {
                assert!(errors.is_empty(), "[{}]: {errors:?}", check.name);
            }
        }
    }
}

/// Every pod the webhook's patch made in its fixtures is a valid Pod, once
/// the fields the fixtures made up (to prove they survive) are taken out.
#[test]
fn every_pod_the_webhook_patched_validates_strictly() {
    if without_schemas("every_pod_the_webhook_patched_validates_strictly") {
        return;
    }
    let checks = kubernetes_checks("Pod", "io.k8s.api.core.v1.Pod", "pod-v1.json");
    let dir = root().join("kubectl-meshwrap/tests/admission");
    let mut failures = Vec::new();
    let mut pods = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if !path.to_str().unwrap().ends_with(".out.json") {
            continue;
        }
        let out: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        if out["patched"] != true {
            continue;
        }
        let mut pod = out["pod"].clone();
        if let Some(spec) = pod["spec"].as_object_mut() {
            spec.remove("madeUpFutureSpecField");
        }
        for c in pod["spec"]["containers"].as_array_mut().unwrap() {
            c.as_object_mut().unwrap().remove("futureContainerField");
        }
        pods += 1;
        for check in &checks {
            failures.extend(
                check
                    .errors(&pod)
                    .into_iter()
                    .map(|e| format!("{}: {e}", path.display())),
            );
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(pods >= 8, "{pods} pods");
}
