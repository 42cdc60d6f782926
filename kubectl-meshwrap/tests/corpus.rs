//! Upstream's own example manifests through inject: every file of
//! `../shared/upstream-corpus/` (Argo Workflows' `examples/`, KubeRay's
//! samples, Kubeflow Trainer's examples and runtimes, unmodified; each
//! folder's `SOURCE` names the commit), judged by rules, never against
//! expected outputs (upstream files stay out of the project):
//!
//! - each pod template is wrapped, left alone with a note, or skipped with
//!   its reason; no document is refused as unreadable;
//! - the output only adds: the input's bytes are all there, in order;
//! - every document that validates against its schema before inject
//!   validates after it (`corpus/validate_pairs.py`, with ../shared's
//!   schemas and the corpus's own CRDs);
//! - a second run changes nothing;
//! - long-running kinds (`operators::LONG_RUNNING`) come out as they went in.
//!
//! Without ../shared the test fails in CI (CI or POD_TESTS_REQUIRED) and
//! elsewhere says so in one line and skips.

mod common;

use std::path::{Path, PathBuf};

use common::*;

fn shared() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared")
}

fn corpus() -> PathBuf {
    shared().join("upstream-corpus")
}

/// The corpus's manifests, by project, sorted.
fn files() -> Vec<PathBuf> {
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
    for project in ["argoproj+argo-workflows", "ray-project+kuberay", "kubeflow+trainer"] {
        walk(&corpus().join(project), &mut out);
    }
    out.sort();
    out
}

/// The documents of a stream as JSON, with their kinds.
fn documents(text: &str) -> Vec<serde_json::Value> {
    let (docs, _) = kubectl_meshwrap::yaml::tree::parse(text);
    docs.iter().map(|d| d.root.to_json()).collect()
}

/// What one report line says of a corpus file, or why it is wrong.
fn judge_line(line: &str) -> Result<&'static str, String> {
    for (verdict, name) in [
        (": injected: ", "wrapped"),
        (": unchanged: ", "untouched"),
        (": skipped: ", "skipped"),
    ] {
        if let Some((_, why)) = line.split_once(verdict) {
            // A skip must say why and what to do: never a bare "no pod template".
            if name == "skipped" && (why.trim().is_empty() || why.contains("no pod template found")) {
                return Err(format!("an unexplained skip: {line}"));
            }
            return Ok(name);
        }
    }
    if line.contains(": error: ") {
        return Err(format!("refused: {line}"));
    }
    Ok("summary")
}

/// One corpus file through inject: what is wrong with it, and the verdict
/// of each report line. Its input and output go to `pairs` as `n.in.yaml`
/// and `n.out.yaml` for the schema half.
fn judge_file(file: &Path, n: usize, pairs: &Path) -> (Vec<String>, Vec<&'static str>) {
    let (mut failures, mut verdicts) = (Vec::new(), Vec::new());
    let name = file.strip_prefix(corpus()).unwrap().display().to_string();
    let input = std::fs::read_to_string(file).unwrap();
    let run = kubectl_meshwrap(&["inject", "--image", IMAGE, "--allow-skip", "-f", "-"], &input);
    for line in run.stderr.lines() {
        match judge_line(line) {
            Ok(verdict) => verdicts.push(verdict),
            Err(why) => failures.push(format!("{name}: {why}")),
        }
    }
    if run.code != 0 {
        failures.push(format!("{name}: exit {}", run.code));
        return (failures, verdicts);
    }
    if !only_adds(&input, &run.stdout) {
        failures.push(format!("{name}: the output does not keep every byte of the input"));
    }
    let again = kubectl_meshwrap(&["inject", "--image", IMAGE, "--allow-skip", "-f", "-"], &run.stdout);
    if again.stdout != run.stdout {
        failures.push(format!("{name}: a second run changes it"));
    }
    for (before, after) in documents(&input).iter().zip(documents(&run.stdout).iter()) {
        let group = before["apiVersion"]
            .as_str()
            .unwrap_or("")
            .rsplit_once('/')
            .map_or("", |(g, _)| g);
        let kind = before["kind"].as_str().unwrap_or("");
        if kubectl_meshwrap::operators::long_running(group, kind) && before != after {
            failures.push(format!("{name}: the long-running {kind} was changed"));
        }
    }
    std::fs::write(pairs.join(format!("{n}.in.yaml")), &input).unwrap();
    std::fs::write(pairs.join(format!("{n}.out.yaml")), &run.stdout).unwrap();
    std::fs::write(pairs.join(format!("{n}.name")), &name).unwrap();
    (failures, verdicts)
}

#[test]
fn every_upstream_example_is_wrapped_left_alone_or_skipped_with_its_reason_and_only_gains() {
    if upstream("corpus.tsv").is_none() {
        return;
    }
    let pairs = temp_dir("corpus-pairs");
    let (mut failures, mut counts) = (Vec::new(), std::collections::BTreeMap::new());
    let files = files();
    assert!(files.len() > 300, "{} files: the corpus is not all there", files.len());
    // Four at a time: each file is two runs of the binary.
    let judged: Vec<(Vec<String>, Vec<&'static str>)> = std::thread::scope(|scope| {
        let chunks: Vec<_> = files.chunks(files.len().div_ceil(4)).enumerate().collect();
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|(c, chunk)| {
                let pairs = &pairs;
                let offset = c * files.len().div_ceil(4);
                scope.spawn(move || {
                    chunk
                        .iter()
                        .enumerate()
                        .map(|(i, file)| judge_file(file, offset + i, pairs))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    for (wrong, verdicts) in judged {
        failures.extend(wrong);
        for verdict in verdicts {
            *counts.entry(verdict).or_insert(0) += 1;
        }
    }
    let schemas = std::process::Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/validate_pairs.py"))
        .arg(&pairs)
        .arg(shared())
        .output()
        .expect("python3 runs the schema half (CI installs python3-jsonschema and python3-yaml)");
    failures.extend(String::from_utf8_lossy(&schemas.stdout).lines().map(str::to_string));
    if !schemas.status.success() && schemas.stdout.is_empty() {
        failures.push(format!(
            "validate_pairs.py: {}",
            String::from_utf8_lossy(&schemas.stderr)
        ));
    }
    println!(
        "{} files; pod templates: {counts:?}; {}",
        files.len(),
        String::from_utf8_lossy(&schemas.stderr).trim()
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
