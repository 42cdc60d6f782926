//! examples/: every manifest parses, has the API version and kind its
//! controller expects, and every command that invokes meshwrap uses flags
//! meshwrap accepts (checked by running `meshwrap --explain` with them), with
//! a quit policy that fits the restartPolicy beside it.

use std::path::{Path, PathBuf};

use serde_yaml::Value;

use crate::support::*;

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files(&path, out);
        } else {
            out.push(path);
        }
    }
}

/// The wrapped examples: not their unwrapped sources, nor the kustomize
/// recipe (its Job is wrapped by kustomize, at build time).
fn examples() -> Vec<PathBuf> {
    let mut out = Vec::new();
    files(&Path::new(env!("CARGO_MANIFEST_DIR")).join("examples"), &mut out);
    out.retain(|p| {
        !p.components()
            .any(|c| c.as_os_str() == "unwrapped" || c.as_os_str() == "kustomize")
    });
    out.sort();
    out
}

/// Every mapping in the document, depth first.
fn mappings<'a>(value: &'a Value, out: &mut Vec<&'a serde_yaml::Mapping>) {
    match value {
        Value::Mapping(m) => {
            out.push(m);
            m.values().for_each(|v| mappings(v, out));
        }
        Value::Sequence(s) => s.iter().for_each(|v| mappings(v, out)),
        _ => {}
    }
}

fn strings(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_sequence)
        .map(|s| {
            s.iter()
                .map(|v| v.as_str().expect("command items are strings").to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// A container's command line (command, then args), if it invokes meshwrap.
fn meshwrap_command(container: &serde_yaml::Mapping) -> Option<Vec<String>> {
    let mut line = strings(container.get("command"));
    line.extend(strings(container.get("args")));
    let invokes = line.first().is_some_and(|p| p.ends_with("/meshwrap"));
    invokes.then_some(line)
}

/// Runs `meshwrap --explain` with the flags before `--`; returns the quit policy.
fn explain(file: &Path, line: &[String]) -> String {
    let dash = line
        .iter()
        .position(|a| a == "--")
        .unwrap_or_else(|| panic!("{}: {line:?} has no `--` before the wrapped command", file.display()));
    assert!(
        dash + 1 < line.len(),
        "{}: nothing is wrapped in {line:?}",
        file.display()
    );
    let run = Meshwrap::new().args(&line[1..dash]).arg("--explain").run();
    run.assert_code(0);
    let policy = run
        .stdout
        .lines()
        .find(|l| l.starts_with("quit-policy"))
        .expect("quit-policy line");
    policy.split_whitespace().nth(1).unwrap().to_string()
}

fn manifests() -> Vec<(PathBuf, String, Value)> {
    examples()
        .into_iter()
        .filter(|f| f.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .map(|file| {
            let text = std::fs::read_to_string(&file).unwrap();
            let doc: Value = serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            (file, text, doc)
        })
        .collect()
}

#[test]
fn every_manifest_wraps_its_command_with_flags_meshwrap_accepts() {
    let mut checked = 0;
    for (file, _text, doc) in manifests() {
        let api = (
            doc["apiVersion"].as_str().unwrap_or(""),
            doc["kind"].as_str().unwrap_or(""),
        );
        let expected_container = match api {
            ("batch/v1", "Job") | ("argoproj.io/v1alpha1", "Workflow") => None,
            ("kubeflow.org/v1", "TFJob") => Some("tensorflow"),
            ("kubeflow.org/v1", "PyTorchJob") => Some("pytorch"),
            other => panic!("{}: unexpected apiVersion/kind {other:?}", file.display()),
        };
        let mut all = Vec::new();
        mappings(&doc, &mut all);
        let mut wrapped = 0;
        for m in &all {
            if let Some(line) = meshwrap_command(m).filter(|_| m.contains_key("image")) {
                wrapped += 1;
                explain(&file, &line);
                if let Some(name) = expected_container {
                    assert_eq!(m.get("name").and_then(Value::as_str), Some(name), "{}", file.display());
                }
            }
            // restartPolicy sits beside a replica's `template` or in a pod spec;
            // every command wrapped beneath it must quit the sidecar to match.
            if let Some(restart) = m
                .get("restartPolicy")
                .and_then(Value::as_str)
                .filter(|_| !m.contains_key("image"))
            {
                let subtree = Value::Mapping((*m).clone());
                let mut inner = Vec::new();
                mappings(&subtree, &mut inner);
                for line in inner.iter().filter_map(|c| meshwrap_command(c)) {
                    let policy = explain(&file, &line);
                    let fits = match restart {
                        "OnFailure" => policy == "on-success",
                        _ => policy == "always",
                    };
                    assert!(
                        fits,
                        "{}: restartPolicy {restart} with --quit-policy {policy}",
                        file.display()
                    );
                }
            }
            // An init container installs meshwrap where the wrapped command finds it.
            if let [install, dir] = strings(m.get("args")).as_slice()
                && install == "install"
            {
                let path = format!("{dir}/meshwrap");
                assert!(
                    all.iter().any(|c| strings(c.get("command")).first() == Some(&path)),
                    "{}: nothing runs {path}",
                    file.display()
                );
            }
        }
        assert!(wrapped > 0, "{}: no container invokes meshwrap", file.display());
        checked += 1;
    }
    assert_eq!(
        checked, 9,
        "the nine manifests: six Jobs (Istio, native sidecar, Linkerd, Vault, Istio and Vault, native fluent-bit), \
         TFJob, PyTorchJob, Argo Workflow"
    );
}

/// Every pod template in a document: a mapping with `containers`, or an Argo
/// template with `container`.
fn pods(doc: &Value) -> Vec<&serde_yaml::Mapping> {
    let mut all = Vec::new();
    mappings(doc, &mut all);
    all.into_iter()
        .filter(|m| m.contains_key("containers") || m.contains_key("container"))
        .collect()
}

/// A pod's regular containers.
fn containers(pod: &serde_yaml::Mapping) -> Vec<&serde_yaml::Mapping> {
    match (pod.get("containers"), pod.get("container")) {
        (Some(Value::Sequence(list)), _) => list.iter().filter_map(Value::as_mapping).collect(),
        (_, Some(Value::Mapping(one))) => vec![one],
        _ => Vec::new(),
    }
}

/// meshwrap's options in a command line (between the program, or `guard`,
/// and `--`), with `--flag=value` split, so two lists compare as given.
fn options(line: &[String]) -> Vec<String> {
    let start = usize::from(line.get(1).is_some_and(|a| a == "guard")) + 1;
    line[start..]
        .iter()
        .take_while(|a| *a != "--")
        .flat_map(|a| match a.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => vec![flag.to_string(), value.to_string()],
            _ => vec![a.clone()],
        })
        .collect()
}

/// The value after `flag` in an option list.
fn option<'a>(options: &'a [String], flag: &str) -> Option<&'a str> {
    options.iter().position(|o| o == flag).map(|i| options[i + 1].as_str())
}

/// A container's command line (command, then args), whatever its program.
fn command_line(container: &serde_yaml::Mapping) -> Vec<String> {
    let mut line = strings(container.get("command"));
    line.extend(strings(container.get("args")));
    line
}

/// Where a container mounts the volume named `name`, and whether read-only.
fn mount(container: &serde_yaml::Mapping, name: &str) -> Option<(String, bool)> {
    container.get("volumeMounts")?.as_sequence()?.iter().find_map(|m| {
        (m["name"].as_str() == Some(name)).then(|| {
            (
                m["mountPath"].as_str().unwrap_or("").to_string(),
                m["readOnly"].as_bool().unwrap_or(false),
            )
        })
    })
}

/// The name of the volume a container mounts at `path`.
fn mounted_at(container: &serde_yaml::Mapping, path: &str) -> Option<String> {
    container
        .get("volumeMounts")?
        .as_sequence()?
        .iter()
        .find_map(|m| (m["mountPath"].as_str() == Some(path)).then(|| m["name"].as_str().unwrap_or("").to_string()))
}

/// Every volume defined anywhere in the document, by name.
fn volumes(doc: &Value) -> Vec<&serde_yaml::Mapping> {
    let mut all = Vec::new();
    mappings(doc, &mut all);
    all.into_iter()
        .filter_map(|m| m.get("volumes")?.as_sequence())
        .flatten()
        .filter_map(Value::as_mapping)
        .collect()
}

#[test]
fn istio_injection_is_a_pod_label_never_an_annotation() {
    for (file, _, doc) in manifests() {
        let mut all = Vec::new();
        mappings(&doc, &mut all);
        for m in all {
            if let Some(Value::Mapping(annotations)) = m.get("annotations") {
                assert!(
                    !annotations.contains_key("sidecar.istio.io/inject"),
                    "{}: sidecar.istio.io/inject is an annotation; Istio's injector selects on the label",
                    file.display()
                );
            }
        }
    }
}

#[test]
fn every_pod_that_quits_its_sidecar_has_a_guard_with_the_same_options() {
    let mut guarded = 0;
    for (file, _, doc) in manifests() {
        for pod in pods(&doc) {
            let containers = containers(pod);
            let Some((at, line)) = containers
                .iter()
                .enumerate()
                .find_map(|(i, c)| meshwrap_command(c).map(|l| (i, l)))
            else {
                continue;
            };
            let policy = explain(&file, &line);
            let wrapped = options(&line);
            let native = option(&wrapped, "--native-sidecar") == Some("true");
            let guard = containers
                .iter()
                .enumerate()
                .find(|(_, c)| command_line(c).first().is_some_and(|a| a == "guard"));
            if policy == "never" || native {
                assert!(guard.is_none(), "{}: a guard with nothing to quit", file.display());
                continue;
            }
            let (guard_at, guard) =
                guard.unwrap_or_else(|| panic!("{}: --quit-policy {policy} without a guard container", file.display()));
            guarded += 1;
            let mut line = vec!["meshwrap".to_string()];
            line.extend(command_line(guard));
            assert_eq!(
                options(&line),
                wrapped,
                "{}: the guard's options differ",
                file.display()
            );
            assert!(
                guard_at > at,
                "{}: the guard starts before the job container",
                file.display()
            );
            let dir = option(&wrapped, "--guard-dir").unwrap_or_else(|| panic!("{}: no --guard-dir", file.display()));
            let volume = mounted_at(containers[at], dir).expect("the guard dir is a volume in the job container");
            assert_eq!(
                mount(guard, &volume),
                Some((dir.to_string(), false)),
                "{}",
                file.display()
            );
        }
    }
    assert_eq!(
        guarded, 8,
        "the Istio, Linkerd, Vault, Istio and Vault, and fluent-bit Jobs, the TFJob worker, the PyTorchJob master \
         and worker"
    );
}

#[test]
fn meshwrap_and_its_guard_read_the_pods_annotations() {
    for (file, _, doc) in manifests() {
        let volumes = volumes(&doc);
        for pod in pods(&doc) {
            for container in containers(pod) {
                let line = command_line(container);
                let is_guard = line.first().is_some_and(|a| a == "guard");
                let Some(line) = meshwrap_command(container).or(is_guard.then_some(line)) else {
                    continue;
                };
                let mut full = vec!["meshwrap".to_string()];
                full.extend(line.into_iter().skip(usize::from(!is_guard)));
                if option(&options(&full), "--native-sidecar") == Some("true") {
                    continue;
                }
                let name = mounted_at(container, "/etc/podinfo")
                    .unwrap_or_else(|| panic!("{}: nothing mounted at /etc/podinfo", file.display()));
                let volume = volumes
                    .iter()
                    .find(|v| v["name"].as_str() == Some(&name))
                    .unwrap_or_else(|| panic!("{}: no volume {name}", file.display()));
                let item = &volume["downwardAPI"]["items"][0];
                assert_eq!(
                    (item["path"].as_str(), item["fieldRef"]["fieldPath"].as_str()),
                    (Some("annotations"), Some("metadata.annotations")),
                    "{}: {name} is not the Downward API's annotations",
                    file.display()
                );
            }
        }
    }
}

#[test]
fn what_meshwrap_adds_runs_restricted_and_reads_mesh_read_only() {
    for (file, _, doc) in manifests() {
        let mut all = Vec::new();
        mappings(&doc, &mut all);
        for c in all.iter().filter(|m| m.contains_key("image")) {
            let line = command_line(c);
            if matches!(line.first().map(String::as_str), Some("install" | "guard")) {
                let sc = &c["securityContext"];
                let name = c["name"].as_str().unwrap_or("?");
                let says = |ok: bool, what: &str| assert!(ok, "{}: {name}: {what}", file.display());
                says(sc["runAsNonRoot"].as_bool() == Some(true), "runAsNonRoot");
                says(sc["runAsUser"].as_u64().is_some_and(|u| u > 0), "an explicit runAsUser");
                says(
                    sc["readOnlyRootFilesystem"].as_bool() == Some(true),
                    "readOnlyRootFilesystem",
                );
                says(
                    sc["allowPrivilegeEscalation"].as_bool() == Some(false),
                    "no privilege escalation",
                );
                says(
                    sc["capabilities"]["drop"][0].as_str() == Some("ALL"),
                    "drops ALL capabilities",
                );
                says(
                    sc["seccompProfile"]["type"].as_str() == Some("RuntimeDefault"),
                    "seccomp RuntimeDefault",
                );
                says(c["resources"]["limits"]["memory"].is_string(), "a memory limit");
            }
            if line.first().is_some_and(|p| p.starts_with("/mesh/")) {
                let volume = mounted_at(c, "/mesh").expect("/mesh is mounted");
                assert_eq!(
                    mount(c, &volume).map(|m| m.1),
                    Some(true),
                    "{}: /mesh is writable",
                    file.display()
                );
            }
        }
    }
}

#[test]
fn the_dockerfile_example_makes_meshwrap_the_entrypoint_prefix() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/docker/Dockerfile.entrypoint-prefix");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.contains("COPY --from=meshwrap /meshwrap /meshwrap"),
        "copies the binary from the meshwrap image"
    );
    let entrypoint = text
        .lines()
        .find(|l| l.starts_with("ENTRYPOINT"))
        .expect("an ENTRYPOINT");
    assert_eq!(entrypoint, r#"ENTRYPOINT ["/meshwrap", "--"]"#);
    assert!(
        text.lines().any(|l| l.starts_with("CMD [")),
        "the training command is CMD"
    );
    // The documented build context is the example's folder: what it copies is there.
    let context = file.parent().unwrap();
    for line in text.lines().filter(|l| l.starts_with("COPY ") && !l.contains("--from")) {
        let source = line.split_whitespace().nth(1).unwrap();
        assert!(
            context.join(source).exists(),
            "{line}: no {source} in {}",
            context.display()
        );
    }
}
