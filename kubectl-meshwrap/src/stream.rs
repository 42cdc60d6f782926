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

/// An input's new text, and an entry per pod template.
pub struct Result {
    pub text: String,
    pub entries: Vec<Entry>,
}

/// Where one document's text lies in the input.
struct Span {
    start: usize,
    end: usize,
}

/// Runs every document of `text` through the transform.
pub fn run(text: &str, opts: &Options, taught: &[TemplatePath], extra: Option<&dyn Fn(&Value) -> Vec<Op>>) -> Result {
    let mut out = String::with_capacity(text.len() + text.len() / 4);
    let mut entries = Vec::new();
    let mut cursor = 0;
    for span in documents(text, &mut entries) {
        out.push_str(&text[cursor..span.start]);
        out.push_str(&document(
            &text[span.start..span.end],
            opts,
            taught,
            extra,
            &mut entries,
        ));
        cursor = span.end;
    }
    out.push_str(&text[cursor..]);
    Result { text: out, entries }
}

fn is_json(text: &str) -> bool {
    text.trim_start().starts_with(['{', '['])
}

/// The documents' spans: YAML documents, or top-level JSON values (which
/// `kubectl` accepts one after another, and YAML does not).
fn documents(text: &str, entries: &mut Vec<Entry>) -> Vec<Span> {
    if is_json(text) {
        return json_values(text);
    }
    let (docs, error) = tree::spans(text);
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
    docs.into_iter().map(|(start, end)| Span { start, end }).collect()
}

/// Top-level JSON values, by brackets and strings.
fn json_values(text: &str) -> Vec<Span> {
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
                    spans.push(Span { start, end: i + 1 });
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

fn node_at<'a>(root: &'a tree::Node, path: &[patch::Seg]) -> Option<&'a tree::Node> {
    path.iter().try_fold(root, |n, seg| match seg {
        patch::Seg::Key(k) => n.get(k),
        patch::Seg::Index(i) => n.index(*i),
    })
}

/// One document's new text.
fn document(
    text: &str,
    opts: &Options,
    taught: &[TemplatePath],
    extra: Option<&dyn Fn(&Value) -> Vec<Op>>,
    entries: &mut Vec<Entry>,
) -> String {
    let (docs, _) = tree::parse(text);
    let Some(doc) = docs.into_iter().find(|d| matches!(d.root.kind, tree::Kind::Map(_))) else {
        return text.to_string();
    };
    let original = doc.root.to_json();
    let mut working = original.clone();
    let mut ops: Vec<Op> = Vec::new();
    let mut mine = Vec::new();
    for workload in workloads::find(&original, taught) {
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
                mine.push((entry(Verdict::Skipped, &original, what(""), why), None));
                continue;
            }
        };
        if places.is_empty() {
            mine.push((
                entry(Verdict::Skipped, &original, what(""), "no pod template found".into()),
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
                } => {
                    for op in &planned {
                        patch::apply(&mut working, op);
                    }
                    ops.extend(planned);
                    let guard = if guard { "guard" } else { "no guard" };
                    let message = format!("container {container}, --quit-policy {policy}, {guard}");
                    mine.push((
                        entry(Verdict::Injected, &original, what(&place.label), message),
                        Some(place),
                    ));
                }
                Outcome::Unchanged(why) => {
                    mine.push((entry(Verdict::Unchanged, &original, what(&place.label), why), None))
                }
                Outcome::Skipped(why) => mine.push((entry(Verdict::Skipped, &original, what(&place.label), why), None)),
            }
        }
    }
    if let Some(extra) = extra {
        let more = extra(&working);
        for op in &more {
            patch::apply(&mut working, op);
        }
        ops.extend(more);
    }
    let finish =
        |mine: Vec<(Entry, Option<Place>)>, entries: &mut Vec<Entry>| entries.extend(mine.into_iter().map(|(e, _)| e));
    if ops.is_empty() {
        finish(mine, entries);
        return text.to_string();
    }
    // Anchors, tags, merge keys or template syntax where the edits go: the
    // document stays as it is.
    let tangled = mine
        .iter()
        .filter_map(|(_, p)| p.as_ref())
        .flat_map(regions)
        .any(|path| {
            node_at(&doc.root, &path)
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
        return text.to_string();
    }
    let folded = patch::fold(&ops);
    let edited = edit::edits(text, &doc.root, &folded).map(|edits| edit::apply(text, &edits));
    let verified = edited.ok().filter(|new| {
        let (again, error) = tree::parse(new);
        error.is_none() && again.len() == 1 && again[0].root.to_json() == working
    });
    match verified {
        Some(new) => {
            finish(mine, entries);
            new
        }
        None => {
            refuse(
                mine,
                entries,
                "could not edit this document's layout without changing it: left as it is (please report it)",
            );
            text.to_string()
        }
    }
}
