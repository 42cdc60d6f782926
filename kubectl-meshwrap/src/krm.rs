//! The KRM function: a `ResourceList` on stdin, the same list on stdout with
//! its items injected and a `results` entry per pod template, as the
//! kustomize functions spec (and kpt) expect of a transformer.
//!
//! A ResourceList is just a List to the transform, so its items go through
//! the very path `inject` takes, edited in place; the results are one more
//! addition to the same document. An item that cannot be edited stays as it
//! was, with an error result naming it; the other items are still injected
//! and every result is written. Options come from the functionConfig's
//! `data` (a ConfigMap) or `spec`, flags filling what it leaves out.

use std::io::{Read, Write};

use serde_json::{Value, json};

use crate::patch::{Op, key};
use crate::stream::{self, Entry, Verdict};
use crate::transform::{Delivery, Options};
use crate::workloads::TemplatePath;

fn severity(v: Verdict) -> &'static str {
    match v {
        Verdict::Injected | Verdict::Unchanged | Verdict::LongRunning => "info",
        Verdict::Skipped => "warning",
        Verdict::Error => "error",
    }
}

/// The keys a functionConfig's `data` or `spec` may hold, as the flags of
/// the same names take them.
const KEYS: [&str; 11] = [
    "image",
    "sidecar",
    "timeout",
    "quitPolicy",
    "delivery",
    "mesh",
    "native",
    "runAsUser",
    "resources",
    "strict",
    "workloads",
];

/// A key of the functionConfig the function does not take is an error that
/// names it and the closest key it does take: an ignored `timout` would
/// leave the pods with the default.
fn unknown_keys(config: Option<&Value>) -> Result<(), String> {
    for section in ["data", "spec"] {
        let Some(fields) = config.and_then(|c| c.get(section)).and_then(Value::as_object) else {
            continue;
        };
        if let Some(key) = fields.keys().find(|k| !KEYS.contains(&k.as_str())) {
            let closest = crate::closest(key, &KEYS);
            return Err(format!(
                "functionConfig: {section}.{key} is not a key the function takes{}; it takes {}",
                closest.map_or(String::new(), |c| format!(" (did you mean {c}?)")),
                KEYS.join(", ")
            ));
        }
    }
    Ok(())
}

/// Options from the functionConfig, over `flags`.
fn options(list: &Value, flags: &Options) -> Result<(Options, bool), String> {
    let config = list.get("functionConfig");
    unknown_keys(config)?;
    let field = |name: &str| {
        config
            .and_then(|c| {
                c.get("data")
                    .and_then(|d| d.get(name))
                    .or_else(|| c.get("spec").and_then(|s| s.get(name)))
            })
            .and_then(|v| match v {
                Value::String(s) => Some(s.clone()),
                Value::Bool(b) => Some(b.to_string()),
                _ => None,
            })
    };
    let mut opts = flags.clone();
    if let Some(image) = field("image") {
        crate::image_reference(&image).map_err(|why| format!("functionConfig: image {why}"))?;
        opts.image = image;
    }
    if opts.image.is_empty() {
        return Err(
            "functionConfig: image is required (the meshwrap image, e.g. registry.example.com/meshwrap:0.1.0)".into(),
        );
    }
    // Checked here as the flags are, so a bad value is this one line, not
    // a skip that blames an annotation the user never wrote.
    if let Some(sidecar) = field("sidecar") {
        for item in sidecar.split(',') {
            crate::cli::sidecar(item).map_err(|why| format!("functionConfig: sidecar \"{item}\": {why}"))?;
        }
        opts.sidecar = Some(sidecar);
    }
    if let Some(timeout) = field("timeout") {
        crate::cli::duration(&timeout).map_err(|why| format!("functionConfig: timeout \"{timeout}\" is not {why}"))?;
        opts.timeout = Some(timeout);
    }
    if let Some(policy) = field("quitPolicy") {
        if !["always", "on-success", "never"].contains(&policy.as_str()) {
            return Err(format!(
                "functionConfig: quitPolicy \"{policy}\" is not always, on-success or never"
            ));
        }
        opts.quit_policy = Some(policy);
    }
    if let Some(d) = field("delivery") {
        opts.delivery = match d.as_str() {
            "init-container" => Delivery::InitContainer,
            "image-volume" => Delivery::ImageVolume,
            _ => {
                return Err(format!(
                    "functionConfig: delivery \"{d}\" is not init-container or image-volume"
                ));
            }
        };
    }
    pod_fit(&field, &mut opts)?;
    let strict = match field("strict").as_deref() {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => return Err(format!("functionConfig: strict \"{other}\" is not true or false")),
    };
    Ok((opts, strict))
}

/// The functionConfig's mesh, native, runAsUser and resources fields, as
/// the flags of the same names take them.
fn pod_fit(field: &dyn Fn(&str) -> Option<String>, opts: &mut Options) -> Result<(), String> {
    if let Some(meshes) = field("mesh") {
        opts.meshes.clear();
        let names: Vec<&str> = meshes.split(',').map(str::trim).collect();
        opts.namespace_unseen = names.iter().all(|m| *m == "auto");
        for name in names.into_iter().filter(|m| *m != "auto" && *m != "none") {
            let kind = crate::mesh::Kind::parse(name)
                .ok_or_else(|| format!("functionConfig: mesh \"{name}\" is not {}", crate::mesh::accepted()))?;
            opts.meshes.push(kind);
        }
    }
    if let Some(which) = field("workloads") {
        opts.all_workloads = match which.as_str() {
            "batch" => false,
            "all" => true,
            _ => return Err(format!("functionConfig: workloads \"{which}\" is not batch or all")),
        };
    }
    if let Some(native) = field("native") {
        opts.native = crate::transform::Native::parse(&native)
            .ok_or_else(|| format!("functionConfig: native \"{native}\" is not true, prefer or false"))?;
    }
    if let Some(uid) = field("runAsUser") {
        opts.run_as_user =
            crate::transform::parse_run_as_user(&uid).map_err(|why| format!("functionConfig: runAsUser: {why}"))?;
    }
    if let Some(resources) = field("resources") {
        opts.resources =
            crate::transform::parse_resources(&resources).map_err(|why| format!("functionConfig: resources: {why}"))?;
    }
    Ok(())
}

/// Runs the function on stdin; the exit code.
pub fn run(flags: &Options, taught: &[TemplatePath], strict_flag: bool) -> i32 {
    let mut text = String::new();
    if let Err(e) = std::io::stdin().read_to_string(&mut text) {
        crate::say(&format!("stdin: {e}"));
        return 1;
    }
    // Only the list's kind and functionConfig, not a copy of its items.
    let mut list = None;
    let body = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let _ = crate::yaml::tree::parse_each(body, |d| {
        if list.is_none() {
            let field = |k: &str| d.root.get(k).map(|n| n.to_json());
            list = Some(json!({"kind": field("kind"), "functionConfig": field("functionConfig")}));
        }
    });
    let Some(list) = list.filter(|l| l.get("kind").and_then(Value::as_str) == Some("ResourceList")) else {
        crate::say("stdin: not a ResourceList (kind: ResourceList, apiVersion: config.kubernetes.io/v1)");
        return 1;
    };
    let (opts, strict) = match options(&list, flags) {
        Ok(o) => o,
        Err(e) => {
            crate::say(&e);
            return 1;
        }
    };
    let strict = strict || strict_flag;
    // The results are one more addition to the list, planned from its entries.
    let result = |e: &Entry| {
        let mut r = json!({
            "message": format!("{}: {}", e.what, e.message),
            "severity": if strict && e.verdict == Verdict::Skipped { "error" } else { severity(e.verdict) },
        });
        if !e.kind.is_empty() {
            r["resourceRef"] = json!({"apiVersion": e.api_version, "kind": e.kind, "name": e.name});
            if !e.namespace.is_empty() {
                r["resourceRef"]["namespace"] = json!(e.namespace);
            }
        }
        r
    };
    let add_results = |doc: &Value, entries: &[Entry]| -> Vec<Op> {
        let results: Vec<Value> = entries
            .iter()
            .filter(|e| e.verdict != Verdict::LongRunning)
            .map(result)
            .collect();
        if results.is_empty() {
            return Vec::new();
        }
        match doc.get("results") {
            Some(Value::Array(existing)) => vec![Op::Insert {
                path: vec![key("results")],
                index: existing.len(),
                values: results,
            }],
            _ => vec![Op::Add {
                path: Vec::new(),
                key: "results".into(),
                value: Value::Array(results),
            }],
        }
    };
    // The ResourceList's runtimes, for its TrainJobs (one input: all of it).
    let mut runtimes = crate::trainer::Runtimes::default();
    runtimes.learn(&text, &opts);
    let (done, entries) = stream::run_to_string(&text, &opts, taught, Some(&add_results), &runtimes);
    let errors = entries.iter().any(|e| e.verdict == Verdict::Error)
        || (strict && entries.iter().any(|e| e.verdict == Verdict::Skipped));
    let mut stdout = std::io::stdout().lock();
    if stdout.write_all(done.as_bytes()).and_then(|()| stdout.flush()).is_err() {
        return 1;
    }
    // The spec: a result of severity error fails the function.
    i32::from(errors)
}
