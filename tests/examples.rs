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

fn examples() -> Vec<PathBuf> {
    let mut out = Vec::new();
    files(&Path::new(env!("CARGO_MANIFEST_DIR")).join("examples"), &mut out);
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

#[test]
fn every_manifest_wraps_its_command_with_flags_meshwrap_accepts() {
    let mut checked = 0;
    for file in examples()
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "yaml" || e == "yml"))
    {
        let text = std::fs::read_to_string(file).unwrap();
        let doc: Value = serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
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
                explain(file, &line);
                if let Some(name) = expected_container {
                    assert_eq!(m.get("name").and_then(Value::as_str), Some(name), "{}", file.display());
                }
            }
            // restartPolicy sits beside a replica's `template` or in a pod spec;
            // every command wrapped beneath it must quit the sidecar to match.
            if let Some(restart) = m.get("restartPolicy").and_then(Value::as_str) {
                let subtree = Value::Mapping((*m).clone());
                let mut inner = Vec::new();
                mappings(&subtree, &mut inner);
                for line in inner.iter().filter_map(|c| meshwrap_command(c)) {
                    let policy = explain(file, &line);
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
                    text.contains(&format!("- {path}")),
                    "{}: nothing runs {path}",
                    file.display()
                );
            }
        }
        assert!(wrapped > 0, "{}: no container invokes meshwrap", file.display());
        checked += 1;
    }
    assert_eq!(checked, 4, "the four manifests: Job, TFJob, PyTorchJob, Argo Workflow");
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
}
