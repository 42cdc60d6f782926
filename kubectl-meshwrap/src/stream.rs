//! One input (a YAML stream, or JSON objects one after another) through the
//! transform, document by document, as text in and text out.
//!
//! A document is rewritten only if all of these hold:
//! - it parsed;
//! - the places meshwrap would edit carry no anchor, alias, tag, merge key
//!   or Helm template syntax (`{{`);
//! - the edited text re-parses to exactly the plan applied to its JSON.
//!
//! Otherwise it is left byte for byte as it was, and the entry says why.
//! Documents are handled one at a time, so memory follows the largest
//! document, not the stream.

use serde_json::Value;

use crate::patch::{self, Op, Path};
use crate::transform::{self, Options, Outcome, Place};
use crate::workloads::{self, TemplatePath};
use crate::yaml::{edit, tree};

/// More additions to each document, planned from its JSON once injected and
/// from its entries (the KRM function's results).
pub type Extra<'a> = &'a dyn Fn(&Value, &[Entry]) -> Vec<Op>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Injected,
    Unchanged,
    Skipped,
    Error,
}

/// What happened to one pod template (or to a document that could not be
/// read).
#[derive(Clone, Debug)]
pub struct Entry {
    pub verdict: Verdict,
    /// `Kind/name`, and where in it.
    pub what: String,
    pub message: String,
    /// The object it concerns, for a KRM result's resourceRef.
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub namespace: String,
}

/// Runs every document of `text` through the transform, handing the new
/// text to `sink` piece by piece (untouched stretches as they are); returns
/// an entry per pod template.
pub fn run(
    text: &str,
    opts: &Options,
    taught: &[TemplatePath],
    extra: Option<Extra>,
    sink: &mut dyn FnMut(&str),
) -> Vec<Entry> {
    let mut entries = Vec::new();
    let mut cursor = 0;
    let mut emit = |edits: Vec<edit::Edit>, cursor: &mut usize| {
        for e in edits {
            sink(&text[*cursor..e.at]);
            sink(&e.insert);
            *cursor = e.at + e.remove;
        }
    };
    if is_json(text) {
        // JSON objects one after another (kubectl takes them; YAML does not):
        // each is a document of its own.
        for (start, end) in json_values(text) {
            let chunk = &text[start..end];
            let (docs, _) = tree::parse(chunk);
            if let Some(doc) = docs.first() {
                let edits = document(chunk, doc, opts, taught, extra, &mut entries);
                let shifted = edits
                    .into_iter()
                    .map(|e| edit::Edit { at: e.at + start, ..e })
                    .collect();
                emit(shifted, &mut cursor);
            }
        }
    } else {
        let error = tree::parse_each(text, |doc| {
            let edits = document(text, &doc, opts, taught, extra, &mut entries);
            emit(edits, &mut cursor);
        });
        if let Some(e) = error {
            entries.push(Entry {
                verdict: Verdict::Error,
                what: format!("line {}", e.line),
                message: format!(
                    "not YAML from here on ({}): left as it is{}",
                    e.message,
                    if text.contains("{{") {
                        " (a Helm template? render it first, or use inject as a post-renderer)"
                    } else {
                        ""
                    }
                ),
                api_version: String::new(),
                kind: String::new(),
                name: String::new(),
                namespace: String::new(),
            });
        }
    }
    sink(&text[cursor..]);
    entries
}

/// [`run`] into a string.
pub fn run_to_string(
    text: &str,
    opts: &Options,
    taught: &[TemplatePath],
    extra: Option<Extra>,
) -> (String, Vec<Entry>) {
    let mut out = String::with_capacity(text.len() + text.len() / 2);
    let entries = run(text, opts, taught, extra, &mut |piece| out.push_str(piece));
    (out, entries)
}

fn is_json(text: &str) -> bool {
    text.trim_start().starts_with(['{', '['])
}

/// Top-level JSON values, by brackets and strings.
fn json_values(text: &str) -> Vec<(usize, usize)> {
    let bytes = text.as_bytes();
    let mut spans = Vec::new();
    let (mut depth, mut in_string, mut escaped, mut start) = (0usize, false, false, 0);
    for (i, &b) in bytes.iter().enumerate() {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                if depth == 0 {
                    start = i;
                }
                depth += 1;
            }
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    spans.push((start, i + 1));
                }
            }
            _ => {}
        }
    }
    spans
}

fn entry(verdict: Verdict, doc: &Value, what: String, message: String) -> Entry {
    let field = |p: &str| doc.pointer(p).and_then(Value::as_str).unwrap_or("").to_string();
    Entry {
        verdict,
        what,
        message,
        api_version: field("/apiVersion"),
        kind: field("/kind"),
        name: field("/metadata/name"),
        namespace: field("/metadata/namespace"),
    }
}

/// The nodes whose text an injection into `place` edits, or must stay
/// plain around: the pod template (its spec and metadata), and where the
/// volumes go.
fn regions(place: &Place) -> Vec<Path> {
    let template = place.spec[..place.spec.len().saturating_sub(1)].to_vec();
    if place.argo {
        vec![place.spec.clone(), place.volumes.clone()]
    } else {
        vec![template]
    }
}

/// The edits (at positions in `text`) that inject one document, `doc`,
/// parsed from `text`: none when nothing is injected.
fn document(
    text: &str,
    doc: &tree::Document,
    opts: &Options,
    taught: &[TemplatePath],
    extra: Option<Extra>,
    entries: &mut Vec<Entry>,
) -> Vec<edit::Edit> {
    if !matches!(doc.root.kind, tree::Kind::Map(_)) {
        return Vec::new();
    }
    let original = doc.root.to_json();
    let found = workloads::find(&original, taught);
    if found.is_empty() && extra.is_none() {
        return Vec::new();
    }
    let mut working = original.clone();
    let mut ops: Vec<Op> = Vec::new();
    let mut mine = Vec::new();
    for workload in found {
        let object = patch::get(&original, &workload.at).unwrap_or(&original);
        let what = |label: &str| {
            format!(
                "{}/{}{}",
                workload.kind,
                workload.name,
                if label.is_empty() {
                    String::new()
                } else {
                    format!(" {label}")
                }
            )
        };
        let places = match workload.places {
            Ok(places) => places,
            Err(why) => {
                mine.push((entry(Verdict::Skipped, object, what(""), why), None));
                continue;
            }
        };
        if places.is_empty() {
            mine.push((
                entry(Verdict::Skipped, object, what(""), "no pod template found".into()),
                None,
            ));
        }
        for place in places {
            match transform::plan(&working, &place, opts) {
                Outcome::Injected {
                    container,
                    policy,
                    guard,
                    ops: planned,
                    notes,
                } => {
                    for op in &planned {
                        patch::apply(&mut working, op);
                    }
                    ops.extend(planned);
                    let guard = if guard { "guard" } else { "no guard" };
                    let mut message = format!("container {container}, --quit-policy {policy}, {guard}");
                    for note in notes {
                        message.push_str("; ");
                        message.push_str(&note);
                    }
                    mine.push((
                        entry(Verdict::Injected, object, what(&place.label), message),
                        Some(place),
                    ));
                }
                Outcome::Native { meshes, ops: planned } => {
                    for op in &planned {
                        patch::apply(&mut working, op);
                    }
                    ops.extend(planned);
                    let message = format!("native: annotated, not wrapped ({meshes})");
                    mine.push((
                        entry(Verdict::Injected, object, what(&place.label), message),
                        Some(place),
                    ));
                }
                Outcome::Unchanged(why) => {
                    mine.push((entry(Verdict::Unchanged, object, what(&place.label), why), None))
                }
                Outcome::Skipped(skip) => {
                    mine.push((entry(Verdict::Skipped, object, what(&place.label), skip.why), None))
                }
            }
        }
    }
    if let Some(extra) = extra {
        let so_far: Vec<Entry> = mine.iter().map(|(e, _)| e.clone()).collect();
        let more = extra(&working, &so_far);
        for op in &more {
            patch::apply(&mut working, op);
        }
        ops.extend(more);
    }
    let finish =
        |mine: Vec<(Entry, Option<Place>)>, entries: &mut Vec<Entry>| entries.extend(mine.into_iter().map(|(e, _)| e));
    if ops.is_empty() {
        finish(mine, entries);
        return Vec::new();
    }
    // Anchors, tags, merge keys or template syntax where the edits go: the
    // document stays as it is.
    let tangled = mine
        .iter()
        .filter_map(|(_, p)| p.as_ref())
        .flat_map(regions)
        .any(|path| {
            doc.root
                .at(&path)
                .is_some_and(|n| n.decorated || text[n.start..n.end.max(n.start).min(text.len())].contains("{{"))
        });
    let refuse = |mine: Vec<(Entry, Option<Place>)>, entries: &mut Vec<Entry>, why: &str| {
        for (mut e, place) in mine {
            if place.is_some() {
                e.verdict = if why.starts_with("could not") {
                    Verdict::Error
                } else {
                    Verdict::Skipped
                };
                e.message = why.to_string();
            }
            entries.push(e);
        }
    };
    if tangled {
        refuse(
            mine,
            entries,
            "YAML anchors, aliases, tags, merge keys or template syntax where meshwrap would edit: left byte for byte as it is",
        );
        return Vec::new();
    }
    let folded = patch::fold(&ops);
    // The edited document, on its own, must read as the plan says.
    let verified = edit::edits(text, &doc.root, &folded).ok().filter(|edits| {
        let end = edits
            .iter()
            .map(|e| e.at + e.remove)
            .chain([doc.end, doc.root.end])
            .max()
            .unwrap_or(doc.end);
        let local: Vec<edit::Edit> = edits
            .iter()
            .map(|e| edit::Edit {
                at: e.at - doc.start,
                remove: e.remove,
                insert: e.insert.clone(),
            })
            .collect();
        let new = edit::apply(&text[doc.start..end.min(text.len())], &local);
        let (again, error) = tree::parse(&new);
        error.is_none() && again.len() == 1 && again[0].root.to_json() == working
    });
    match verified {
        Some(edits) => {
            finish(mine, entries);
            edits
        }
        None => {
            refuse(
                mine,
                entries,
                "could not edit this document's layout without changing it: left as it is (please report it)",
            );
            Vec::new()
        }
    }
}
