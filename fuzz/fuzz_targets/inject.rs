//! inject's editor on any text: never a panic; every document of the output
//! is either byte for byte the input's, or reads (with the same parser the
//! tool uses) as the input's JSON with, for each workload, either nothing or
//! exactly the planned additions; a document left as it was while something
//! was planned has an error or skip reported; and a second run over the
//! output changes nothing.
#![no_main]

use kubectl_meshwrap::patch::{self, Path, Seg};
use kubectl_meshwrap::stream::{self, Verdict};
use kubectl_meshwrap::transform::{self, Delivery, Options, Outcome};
use kubectl_meshwrap::workloads;
use kubectl_meshwrap::yaml::tree;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fn options() -> Options {
    Options {
        image: "registry.example.com/meshwrap:0.1.0".into(),
        delivery: Delivery::InitContainer,
        ..Options::default()
    }
}

/// The document with every planned addition, and where its workloads are.
fn planned(doc: &Value, opts: &Options) -> (Value, Vec<Path>) {
    let mut working = doc.clone();
    let mut at = Vec::new();
    for workload in workloads::find(doc, &[]) {
        at.push(workload.at.clone());
        for place in workload.places.unwrap_or_default() {
            if let Outcome::Injected { ops, .. } = transform::plan(&working, &place, opts) {
                for op in &ops {
                    patch::apply(&mut working, op);
                }
            }
        }
    }
    (working, at)
}

fn set(doc: &mut Value, path: &[Seg], to: Value) {
    let Some((last, parent)) = path.split_last() else {
        *doc = to;
        return;
    };
    let parent = parent.iter().try_fold(doc, |v, s| match s {
        Seg::Key(k) => v.get_mut(k.as_str()),
        Seg::Index(i) => v.get_mut(*i),
    });
    match (parent, last) {
        (Some(p), Seg::Key(k)) => p[k.as_str()] = to,
        (Some(p), Seg::Index(i)) => p[*i] = to,
        _ => {}
    }
}

/// Each workload of `out` is the input's or the planned one; the rest is the
/// input's. Whether anything was planned and left out.
fn check_document(input: &Value, out: &Value, opts: &Options) -> bool {
    let (expected, places) = planned(input, opts);
    let (mut rest_in, mut rest_out) = (input.clone(), out.clone());
    let mut left_out = false;
    for at in &places {
        let mine = patch::get(out, at);
        let before = patch::get(input, at);
        let after = patch::get(&expected, at);
        assert!(
            mine == before || mine == after,
            "workload at {} is neither the input nor the plan:\n{mine:?}\nplanned:\n{after:?}",
            patch::pointer(at)
        );
        left_out |= mine == before && before != after;
        set(&mut rest_in, at, Value::Null);
        set(&mut rest_out, at, Value::Null);
    }
    if places.iter().all(|p| !p.is_empty()) {
        // Outside the workloads (a KRM list's own fields): as it was.
        assert_eq!(rest_in, rest_out, "outside the workloads, the document changed");
    }
    left_out
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let opts = options();
    // The input's own Trainer runtimes, for its TrainJobs, as inject reads
    // every input's first; the second run reads the output's.
    let mut runtimes = kubectl_meshwrap::trainer::Runtimes::default();
    runtimes.learn(text, &opts);
    let (out, entries) = stream::run_to_string(text, &opts, &[], None, &runtimes);
    let mut runtimes_out = kubectl_meshwrap::trainer::Runtimes::default();
    runtimes_out.learn(&out, &opts);
    let (again, _) = stream::run_to_string(&out, &opts, &[], None, &runtimes_out);
    assert_eq!(again, out, "a second run changed the output");
    let body = text.strip_prefix('\u{feff}').unwrap_or(text);
    if body.trim_start().starts_with(['{', '[']) || out == text {
        return;
    }
    let out_body = out.strip_prefix('\u{feff}').unwrap_or(&out);
    let (docs_in, error_in) = tree::parse(body);
    let (docs_out, error_out) = tree::parse(out_body);
    assert_eq!(error_in.is_some(), error_out.is_some(), "the output's parse differs:\n{out}");
    assert_eq!(docs_in.len(), docs_out.len(), "documents merged or split:\n{out}");
    let reported = entries
        .iter()
        .any(|e| matches!(e.verdict, Verdict::Error | Verdict::Skipped));
    for (a, b) in docs_in.iter().zip(&docs_out) {
        let (input, output) = (a.root.to_json(), b.root.to_json());
        let left_out = check_document(&input, &output, &opts);
        assert!(!left_out || reported, "additions left out with no report:\n{out}");
    }
});
