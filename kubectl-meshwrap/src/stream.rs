//! One input (a YAML stream, or JSON objects one after another) through the
//! transform, document by document, as text in and text out.
//!
//! A document is rewritten only if all of these hold:
//! - it parsed;
//! - the places meshwrap would edit carry no anchor, alias, tag, merge key
//!   or Helm template action (a `{{` that YAML read as a collection; in a
//!   string, as Argo's parameters are, `{{...}}` is data);
//! - the edited text re-parses to exactly the plan applied to its JSON.
//!
//! Otherwise it is left byte for byte as it was, and the entry says why.
//! Each workload of a document (a List's or ResourceList's item) is a unit
//! that is edited or refused on its own: one item that cannot be edited
//! leaves that item as it was and the others injected (the units whose edit
//! reads back wrong are found by halving the set). The entry of a unit
//! that reads back wrong names the cause: a comment inside brackets, a
//! duplicate key or a key that is a collection anywhere in the document
//! (either fails every unit's check), else the line and the text whose
//! insertion made the unit read otherwise, and where. Finding it parses the
//! edited document again, on that failure only.
//!
//! A UTF-8 byte order mark at the start is read past (kubectl drops it) and
//! kept in the output, which stays the input plus additions. A document that
//! is not an object but mentions containers is reported, never passed over.
//!
//! Memory: documents are handled one at a time, so it follows the largest
//! document, not the stream. For one document it holds the tree (scalars
//! borrowed from the input), the JSON with its planned additions, the text
//! edits and, while the edit is checked, the edited text: no second tree or
//! JSON (the check runs on the parser's events). BENCHMARKS.md measures it.

use std::collections::HashMap;

use serde_json::Value;

use crate::patch::{self, Op, Path, Seg};
use crate::trainer::{self, Runtimes};
use crate::transform::{self, Options, Outcome, Place};
use crate::workloads::{self, TemplatePath};
use crate::yaml::{edit, tree};

/// More additions to each document, planned from its JSON once injected and
/// from its entries (the KRM function's results). A List's items are nulls
/// in that JSON (each is held as text meanwhile): the additions go outside
/// them.
pub type Extra<'a> = &'a dyn Fn(&Value, &[Entry]) -> Vec<Op>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Injected,
    Unchanged,
    Skipped,
    Error,
    /// A long-running workload, left alone by `--workloads batch`: counted,
    /// never reported one by one.
    LongRunning,
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

/// A UTF-8 byte order mark, which kubectl drops before it reads a file.
const BOM: &str = "\u{feff}";

/// Runs every document of `text` through the transform, handing the new
/// text to `sink` piece by piece (untouched stretches as they are); returns
/// an entry per pod template. A byte order mark at the start is read past,
/// as kubectl does, and kept in the output (which stays the input plus
/// additions).
pub fn run(
    text: &str,
    opts: &Options,
    taught: &[TemplatePath],
    extra: Option<Extra>,
    runtimes: &Runtimes,
    sink: &mut dyn FnMut(&str),
) -> Vec<Entry> {
    let body = text.strip_prefix(BOM).unwrap_or(text);
    sink(&text[..text.len() - body.len()]);
    let cx = Context {
        opts,
        taught,
        extra,
        runtimes,
        json: false,
    };
    let mut entries = Vec::new();
    let mut cursor = 0;
    let mut emit = |edits: Vec<edit::Edit>, shift: usize| {
        for e in edits {
            sink(&body[cursor..e.at + shift]);
            sink(&e.insert);
            cursor = e.at + shift + e.remove;
        }
    };
    if is_json(body) {
        // JSON objects one after another (kubectl takes them; YAML does not):
        // each is a document of its own.
        let (values, stray) = json_values(body);
        if let Some((at, why)) = stray {
            entries.push(entry(
                Verdict::Error,
                &Value::Null,
                format!("line {}", line_of(body, at)),
                format!("not JSON: {why}: left as it is"),
            ));
        }
        for (start, end) in values {
            let chunk = &body[start..end];
            let cx = Context { json: true, ..cx };
            let led = tree::lead(chunk);
            let error = tree::parse_json_each(&led, |doc| emit(document(chunk, &doc, &cx, &mut entries), start));
            if let Some(e) = error {
                entries.push(not_yaml(body, line_of(body, start) + e.line - 1, e.message));
            }
        }
    } else if let Some(e) = tree::parse_each(body, |doc| emit(document(body, &doc, &cx, &mut entries), 0)) {
        entries.push(not_yaml(body, e.line, e.message));
    }
    sink(&body[cursor..]);
    entries
}

/// The entry for a stream that stops parsing at `line`.
fn not_yaml(text: &str, line: usize, why: String) -> Entry {
    let helm = if why.contains("indentation in quoted scalar") || why.contains("indentation in flow construct") {
        // YAML 1.2 indents a flow node in a block mapping past its key
        // (s-l+flow-in-block(n): n+1), continuation lines included; PyYAML
        // and kubectl's go-yaml let a line at the key's column through, as
        // Argo's examples write `args: ["` ... `"]`. yaml::relax reads such a
        // construct as they do, when it closes and there are at most
        // MAX_ROUNDS of them: this one it could not.
        format!(
            " (a quoted string or a [...] or {{...}} here continues on a line not indented past its key: inject reads that as kubectl does only where it finds the construct's end (and at most {} in a file), and it found none here: check it is closed, or indent its lines past the key)",
            crate::yaml::relax::MAX_ROUNDS
        )
    } else if text.contains("{{") {
        " (a Helm template? render it first, or use inject as a post-renderer)".to_string()
    } else {
        String::new()
    };
    entry(
        Verdict::Error,
        &Value::Null,
        format!("line {line}"),
        format!("not YAML from here on ({why}): left as it is{helm}"),
    )
}

/// [`run`] into a string.
pub fn run_to_string(
    text: &str,
    opts: &Options,
    taught: &[TemplatePath],
    extra: Option<Extra>,
    runtimes: &Runtimes,
) -> (String, Vec<Entry>) {
    let mut out = String::with_capacity(text.len() + text.len() / 2);
    let entries = run(text, opts, taught, extra, runtimes, &mut |piece| out.push_str(piece));
    (out, entries)
}

fn is_json(text: &str) -> bool {
    text.trim_start().starts_with(['{', '['])
}

/// Top-level JSON values, by brackets and strings.
/// Where a JSON stream stops being JSON values, and why.
type Stray = (usize, &'static str);

/// The spans of the JSON values one after another in `text`, and where
/// the text stops being such values (an object never closed, a trailing
/// comma or other bytes between them), with why: kubectl refuses those, so
/// inject must not pass them through as if nothing were wrong.
fn json_values(text: &str) -> (Vec<(usize, usize)>, Option<Stray>) {
    let bytes = text.as_bytes();
    let mut spans = Vec::new();
    let mut stray = None;
    let (mut depth, mut in_string, mut escaped, mut start) = (0usize, false, false, 0);
    for (i, &b) in bytes.iter().enumerate() {
        if depth == 0 && !in_string && !b.is_ascii_whitespace() && !matches!(b, b'{' | b'[') {
            stray.get_or_insert((i, "text outside any JSON object or array"));
            continue;
        }
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
    if depth > 0 || in_string {
        stray.get_or_insert((start, "the JSON value that starts here never ends"));
    }
    (spans, stray)
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

/// One document being edited: the text it is in, its tree, and whether it
/// is one JSON value.
struct Doc<'t, 'a> {
    text: &'t str,
    tree: &'t tree::Document<'a>,
    json: bool,
    /// A key anywhere in it that fails every edit, said as a refusal:
    /// looked for only once a unit fails, and once per document.
    odd_key: std::cell::OnceCell<Option<String>>,
}

impl Doc<'_, '_> {
    /// A duplicate key or a key that is a collection, anywhere in the
    /// document, makes every edit fail its check (the check reads each key
    /// once, and as a string; a path may lead to the copy the plan did not
    /// read), so it is the cause to name first.
    fn odd_key(&self) -> Option<&str> {
        self.odd_key
            .get_or_init(|| {
                let root = &self.tree.root;
                duplicate_key(self.text, Some(root)).or_else(|| {
                    root.complex_key().map(|k| format!(
                        "a mapping key that is a collection at line {}: JSON has no such key and kubectl refuses it; write it as a string (left as it is)",
                        line_of(self.text, k.start)
                    ))
                })
            })
            .as_deref()
    }
}

/// What one document is run with.
struct Context<'a> {
    opts: &'a Options,
    taught: &'a [TemplatePath],
    extra: Option<Extra<'a>>,
    /// The Trainer runtimes of the run, for its TrainJobs.
    runtimes: &'a Runtimes,
    /// The document is one JSON value.
    json: bool,
}

/// One workload of a document, planned: its entries (each injected one with
/// its place) and the additions that inject it. A unit is edited, or
/// refused, as a whole; units never reach into each other (each is its own
/// object, or the document's only one).
struct Unit {
    /// Where its object is in the document.
    at: Path,
    entries: Vec<(Entry, Option<Place>)>,
    /// Its additions, until they are text edits.
    ops: Vec<Op>,
    /// It has additions, and they go in (not refused).
    live: bool,
    /// It had additions, and was refused: the document's JSON must lose them.
    refused: bool,
    /// Its object as planned, as JSON text, while the document's JSON holds
    /// a null in its place (a List's items: a few times smaller as text
    /// than as values; the check reads it back when it gets there).
    compact: Option<String>,
}

impl Unit {
    /// Refused: nothing of it is edited, and its injected entries say why.
    fn refuse(&mut self, verdict: Verdict, why: &str) {
        self.refused |= self.live;
        self.live = false;
        self.ops = Vec::new();
        for (e, place) in &mut self.entries {
            if place.take().is_some() {
                e.verdict = verdict;
                e.message = why.to_string();
            }
        }
    }
}

const TANGLED: &str =
    "YAML anchors, aliases, tags, merge keys or template syntax where meshwrap would edit: left byte for byte as it is";
const UNEDITABLE: &str =
    "could not edit this layout without changing what it reads as: left as it is (please report the layout)";
const FLOW_COMMENT: &str = "a comment inside a flow collection ([...] or {...}) where meshwrap would add: left as it is (move the comment out of the brackets, or write the collection in block style)";

/// Why `unit`, whose `edits` read back wrong, could not be edited: a
/// comment in a flow collection, an odd key in the document, else the
/// line and what could not be inserted there ([`misread`]).
fn why_uneditable(d: &Doc, unit: &Unit, edits: &[edit::Edit], working: &Value) -> String {
    let flow_comment = unit
        .entries
        .iter()
        .filter_map(|(_, p)| p.as_ref())
        .flat_map(regions)
        .filter_map(|path| d.tree.root.at(&path))
        .any(|node| flow_comment(d.text, node));
    if flow_comment {
        return FLOW_COMMENT.into();
    }
    if let Some(why) = d.odd_key() {
        return why.into();
    }
    if let Some(line) = last_block_scalar_unbroken(d.text, &d.tree.root) {
        return format!(
            "the block scalar at line {line} ends the file with no final newline: a line added after it would give its value one; left as it is (end the file with a newline)"
        );
    }
    misread(d, unit, edits, working).unwrap_or_else(|| UNEDITABLE.into())
}

/// The line of a block scalar (`|`, `>`) that ends `text` with no line
/// break after it, if one does: nothing can be added after it losslessly.
fn last_block_scalar_unbroken(text: &str, node: &tree::Node) -> Option<usize> {
    let last = match &node.kind {
        tree::Kind::Map(pairs) => pairs.last().map(|(_, v)| v),
        tree::Kind::Seq(items) => items.last(),
        tree::Kind::Scalar { style, .. } => {
            return tree::block_scalar_ends_input_unbroken(text, node.end, *style).then(|| line_of(text, node.start));
        }
        tree::Kind::Alias => None,
    };
    last.and_then(|n| last_block_scalar_unbroken(text, n))
}

/// The first place where `unit`, edited by `edits` (its own), reads
/// otherwise than planned, said as the line and the text that could not be
/// inserted there. Only for a refusal: it parses the edited document again.
fn misread(d: &Doc, unit: &Unit, edits: &[edit::Edit], working: &Value) -> Option<String> {
    let want: Value = match &unit.compact {
        Some(text) => serde_json::from_str(text).ok()?,
        None => patch::get(working, &unit.at)?.clone(),
    };
    let (local, new) = edited(d, edits);
    let (docs, error) = tree::parse(&new);
    let (span, place) = match (error, docs.first().and_then(|doc| doc.root.at(&unit.at))) {
        (Some(e), _) => (edit::line_span(&new, e.line), "does not parse".to_string()),
        (None, Some(node)) if docs.len() == 1 => {
            let mut at = patch::pointer(&unit.at);
            let node = tree::first_difference(node, &want, &mut at)?;
            (node.start..node.end.max(node.start), format!("reads otherwise at {at}"))
        }
        _ => (0..new.len(), "is not one document".to_string()),
    };
    let culprit = edit::culprit(&local, span)?;
    // A new line goes after the one before it; anything else into its line.
    let at = culprit.at + d.tree.start;
    let (line, where_) = if at > 0 && d.text.as_bytes()[at - 1] == b'\n' {
        (line_of(d.text, at - 1), "after it")
    } else {
        (line_of(d.text, at), "there")
    };
    Some(format!(
        "line {line}: could not insert `{}` {where_}: the document then {place}; left as it is (please report the layout)",
        edit::snippet(culprit)
    ))
}

/// Whether a flow collection at or under `node` holds a comment.
fn flow_comment(text: &str, node: &tree::Node) -> bool {
    match &node.kind {
        _ if node.flow => has_comment(&text[node.start..node.end.clamp(node.start, text.len())]),
        tree::Kind::Seq(items) => items.iter().any(|n| flow_comment(text, n)),
        tree::Kind::Map(entries) => entries.iter().any(|(_, v)| flow_comment(text, v)),
        _ => false,
    }
}

/// Whether flow-style `text` holds a `#` comment (outside quotes).
fn has_comment(text: &str) -> bool {
    let (mut quote, mut prev) = (None, b' ');
    for &b in text.as_bytes() {
        match (quote, b) {
            (None, b'"' | b'\'') => quote = Some(b),
            (None, b'#') if prev.is_ascii_whitespace() => return true,
            (Some(q), _) if b == q && !(q == b'"' && prev == b'\\') => quote = None,
            _ => {}
        }
        prev = b;
    }
    false
}

/// The edits (at positions in `text`) that inject one document, `doc`,
/// parsed from `text`: none when nothing is injected. Its entries go to
/// `entries`, one per pod template.
fn document(text: &str, doc: &tree::Document, cx: &Context, entries: &mut Vec<Entry>) -> Vec<edit::Edit> {
    let Some(mut working) = object(text, doc, entries) else {
        return Vec::new();
    };
    let found = workloads::find(&working, cx.taught);
    if found.is_empty() && cx.extra.is_none() {
        return Vec::new();
    }
    let mut units: Vec<Unit> = found
        .into_iter()
        .map(|w| {
            let mut unit = plan_unit(&mut working, w, cx.opts, cx.runtimes);
            compact(&mut working, &mut unit);
            unit
        })
        .collect();
    for unit in units.iter_mut() {
        if let Some(line) = doc.root.at(&unit.at).and_then(first_alias).map(|at| line_of(text, at)) {
            aliased(unit, line);
        }
    }
    for unit in units.iter_mut().filter(|u| u.live) {
        if let Some(why) = duplicate_key(text, doc.root.at(&unit.at)) {
            unit.refuse(Verdict::Error, &why);
        } else if let Some(line) = tangled(text, doc, unit) {
            unit.refuse(Verdict::Skipped, &format!("{TANGLED} (line {line})"));
        }
    }
    restore(&mut working, doc, &mut units);
    let editor = edit::Editor::new(text, &doc.root);
    let d = Doc {
        text,
        tree: doc,
        json: cx.json,
        odd_key: std::cell::OnceCell::new(),
    };
    let edits = edit_units(&d, &editor, &mut units, &mut working);
    finish(&d, &editor, cx, units, working, edits, entries)
}

/// The document's root as JSON, when it is an object. Anything else holding
/// containers is reported, never passed over in silence.
fn object(text: &str, doc: &tree::Document, entries: &mut Vec<Entry>) -> Option<Value> {
    if matches!(doc.root.kind, tree::Kind::Map(_)) {
        return Some(doc.root.to_json());
    }
    let what = match doc.root.kind {
        tree::Kind::Seq(_) => "a YAML sequence",
        _ => "a scalar",
    };
    let body = &text[doc.root.start.min(text.len())..doc.root.end.clamp(doc.root.start, text.len())];
    if body.contains("containers") {
        entries.push(entry(
            Verdict::Skipped,
            &Value::Null,
            format!("line {}", line_of(text, doc.root.start)),
            format!("{what} where an object was expected mentions containers: kubectl reads no object from it either; left as it is (make the document a mapping with apiVersion and kind)"),
        ));
    }
    None
}

/// 1-based line of byte `at`.
fn line_of(text: &str, at: usize) -> usize {
    text.as_bytes()[..at.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// Plans every pod template of `workload` on `working` (which gets the
/// additions).
fn plan_unit(working: &mut Value, workload: workloads::Workload, opts: &Options, runtimes: &Runtimes) -> Unit {
    let object = patch::get(working, &workload.at).unwrap_or(working);
    let about = entry(Verdict::Skipped, object, String::new(), String::new());
    let what = |label: &str| {
        let label = if label.is_empty() {
            String::new()
        } else {
            format!(" {label}")
        };
        format!("{}/{}{label}", workload.kind, workload.name)
    };
    let say = |verdict, what, message| Entry {
        verdict,
        what,
        message,
        ..about.clone()
    };
    let mut unit = Unit {
        at: workload.at.clone(),
        entries: Vec::new(),
        ops: Vec::new(),
        live: false,
        refused: false,
        compact: None,
    };
    let group = object.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let group = group.rsplit_once('/').map_or("", |(g, _)| g);
    if !opts.all_workloads && crate::operators::long_running(group, &workload.kind) {
        unit.entries
            .push((say(Verdict::LongRunning, what(""), String::new()), None));
        return unit;
    }
    if trainer::is_trainjob(object) {
        let (verdict, message, place) = trainjob(working, &workload.at, runtimes, &mut unit);
        unit.entries.push((say(verdict, what("spec.trainer"), message), place));
        return unit;
    }
    let places = match workload.places {
        Ok(places) => places,
        Err(why) => {
            unit.entries.push((say(Verdict::Skipped, what(""), why), None));
            return unit;
        }
    };
    if places.is_empty() {
        let e = match workloads::nothing_to_wrap(object, &workload.kind) {
            Some(why) => say(Verdict::Unchanged, what(""), why),
            None if workload.kind == "RayJob" => say(
                Verdict::Skipped,
                what(""),
                "no spec.submitterPodTemplate: KubeRay makes the submitter pod itself, which inject cannot see; give the RayJob a submitterPodTemplate with the submitter's command (ray job submit ...) to wrap it".into(),
            ),
            None => say(Verdict::Skipped, what(""), "no pod template found".into()),
        };
        unit.entries.push((e, None));
    }
    for place in places {
        let label = what(&place.label);
        let outcome = if trainer::is_runtime(&workload.kind) {
            trainer::plan_runtime(working, &place, opts)
        } else {
            transform::plan(working, &place, opts)
        };
        let (verdict, message, injected) = judged(outcome, working, &mut unit);
        unit.entries
            .push((say(verdict, label, message), injected.then_some(place)));
    }
    unit
}

/// A TrainJob ([`trainer::trainjob`]): its verdict and message, its ops
/// applied to `working` and kept, and its place once wrapped.
fn trainjob(working: &mut Value, at: &Path, runtimes: &Runtimes, unit: &mut Unit) -> (Verdict, String, Option<Place>) {
    match trainer::trainjob(working, at, runtimes) {
        trainer::Job::Wrap(ops, message, place) => {
            for op in &ops {
                patch::apply(working, op);
            }
            unit.ops.extend(ops);
            unit.live = true;
            (Verdict::Injected, message, Some(place))
        }
        trainer::Job::Leave(why) => (Verdict::Unchanged, why, None),
        trainer::Job::Skip(why) => (Verdict::Skipped, why, None),
    }
}

/// What one plan means for the unit: its ops applied to the working JSON
/// and kept, and the report's verdict and message.
fn judged(outcome: Outcome, working: &mut Value, unit: &mut Unit) -> (Verdict, String, bool) {
    let mut keep = |ops: Vec<patch::Op>| {
        for op in &ops {
            patch::apply(working, op);
        }
        unit.ops.extend(ops);
        unit.live = true;
    };
    match outcome {
        Outcome::Injected {
            container,
            policy,
            guard,
            ops,
            notes,
        } => {
            keep(ops);
            let guard = if guard { "guard" } else { "no guard" };
            let message = format!("container {container}, --quit-policy {policy}, {guard}");
            let message = transform::with_notes(message, &notes);
            (Verdict::Injected, message, true)
        }
        Outcome::Native { meshes, ops } => {
            keep(ops);
            (
                Verdict::Injected,
                format!("native: annotated, not wrapped ({meshes})"),
                true,
            )
        }
        Outcome::Unchanged(why) => (Verdict::Unchanged, why, false),
        // Left alone on purpose (opted out, or no sidecar to wait for):
        // nothing half-wrapped, so not a skip that fails inject.
        Outcome::Skipped(skip) if transform::DELIBERATE.contains(&skip.code) => (Verdict::Unchanged, skip.why, false),
        Outcome::Skipped(skip) => (Verdict::Skipped, skip.why, false),
    }
}

/// A duplicate key anywhere in a workload's object, said as the reason to
/// refuse it: kubectl's strict decoding (its default validation) rejects a
/// duplicate field, and a lenient reader keeps only the last, so neither
/// copy is safely "the" one to edit.
fn duplicate_key(text: &str, object: Option<&tree::Node>) -> Option<String> {
    let dup = object?.duplicate_key()?;
    let name = match &dup.kind {
        tree::Kind::Scalar { text, .. } => text.clone(),
        _ => "(a complex key)".into(),
    };
    Some(format!(
        "duplicate key {name:?} at line {}: kubectl's strict validation refuses it and a lenient reader keeps only the last; remove one of them (left as it is)",
        line_of(text, dup.start)
    ))
}

/// Where a place `unit` injects holds anchors, aliases, tags, merge keys
/// or a Helm template action, where an edit could mean something else:
/// the line of the first. `{{...}}` inside a string (Argo's parameters,
/// `{{workflow.name}}`) is data the edit keeps byte for byte: it never
/// blocks one.
fn tangled(text: &str, doc: &tree::Document, unit: &Unit) -> Option<usize> {
    unit.entries
        .iter()
        .filter_map(|(_, p)| p.as_ref())
        .flat_map(regions)
        .filter_map(|path| doc.root.at(&path))
        .find(|n| n.decorated || helm_action(text, n))
        .map(|n| line_of(text, decoration(n).unwrap_or(n.start)))
}

/// Where the first decoration beneath `node` is: the decorated node whose
/// children are not (its anchor, tag or alias).
fn decoration(node: &tree::Node) -> Option<usize> {
    if !node.decorated {
        return None;
    }
    let children: Vec<&tree::Node> = match &node.kind {
        tree::Kind::Map(pairs) => pairs.iter().flat_map(|(k, v)| [k, v]).collect(),
        tree::Kind::Seq(items) => items.iter().collect(),
        _ => Vec::new(),
    };
    children.into_iter().find_map(decoration).or(Some(node.start))
}

/// The first alias in `node`, by where it starts.
fn first_alias(node: &tree::Node) -> Option<usize> {
    match &node.kind {
        tree::Kind::Alias => Some(node.start),
        tree::Kind::Map(pairs) => pairs
            .iter()
            .find_map(|(k, v)| first_alias(k).or_else(|| first_alias(v))),
        tree::Kind::Seq(items) => items.iter().find_map(first_alias),
        tree::Kind::Scalar { .. } => None,
    }
}

/// An object with an alias in it: the plan read the alias as nothing (its
/// JSON is null there), so no entry of it stands. Every one becomes a skip
/// that says where and what to do; nothing of it is edited.
fn aliased(unit: &mut Unit, line: usize) {
    let why = format!(
        "a YAML alias at line {line}, which meshwrap reads as written, not as what it points to: expand the \
         aliases first (yq 'explode(.)' FILE), then inject"
    );
    unit.refuse(Verdict::Skipped, &why);
    for (e, _) in &mut unit.entries {
        e.verdict = Verdict::Skipped;
        e.message = why.clone();
    }
}

/// A `{{ ... }}` that YAML read as structure, not as a string: a flow
/// collection whose text opens with `{{` (`image: {{ .Values.image }}`
/// parses as a mapping in a mapping). That is an unrendered Helm template,
/// whose rendering would move what an edit added.
fn helm_action(text: &str, node: &tree::Node) -> bool {
    let opens = |n: &tree::Node| text.get(n.start..).is_some_and(|t| t.starts_with("{{"));
    match &node.kind {
        tree::Kind::Map(_) | tree::Kind::Seq(_) if node.flow && opens(node) => true,
        tree::Kind::Map(pairs) => pairs.iter().any(|(k, v)| helm_action(text, k) || helm_action(text, v)),
        tree::Kind::Seq(items) => items.iter().any(|n| helm_action(text, n)),
        tree::Kind::Scalar { .. } | tree::Kind::Alias => false,
    }
}

/// Takes the additions of refused units back out of `working`: their
/// objects as the document has them (units are disjoint objects).
fn restore(working: &mut Value, doc: &tree::Document, units: &mut [Unit]) {
    for unit in units.iter_mut().filter(|u| u.refused) {
        without_additions(working, doc, &unit.at);
        unit.compact = None;
    }
}

/// Puts a planned List item's object into `unit.compact`, a null in its
/// place. Not the document's own object, and not one holding a float (whose
/// text might not read back bit for bit).
fn compact(working: &mut Value, unit: &mut Unit) {
    if unit.at.is_empty() {
        return;
    }
    let Some(object) = value_at(working, &unit.at) else {
        return;
    };
    if has_float(object) {
        return;
    }
    unit.compact = serde_json::to_string(object).ok();
    if unit.compact.is_some() {
        *object = Value::Null;
    }
}

fn value_at<'v>(value: &'v mut Value, at: &[Seg]) -> Option<&'v mut Value> {
    at.iter().try_fold(value, |v, seg| match seg {
        Seg::Key(k) => v.get_mut(k.as_str()),
        Seg::Index(i) => v.get_mut(*i),
    })
}

fn has_float(v: &Value) -> bool {
    match v {
        Value::Number(n) => n.is_f64(),
        Value::Array(items) => items.iter().any(has_float),
        Value::Object(map) => map.values().any(has_float),
        _ => false,
    }
}

/// The units' compact objects by the address of the null standing in for
/// each in `value` (whose units `keep` says stand in).
fn stand_ins<'u>(value: &Value, units: &'u [Unit], keep: impl Fn(usize) -> bool) -> HashMap<usize, &'u str> {
    let mut out = HashMap::new();
    for (i, unit) in units.iter().enumerate() {
        if let Some(text) = unit.compact.as_deref().filter(|_| keep(i))
            && let Some(hole) = patch::get(value, &unit.at)
        {
            out.insert(hole as *const Value as usize, text);
        }
    }
    out
}

/// The object at `at` in `working` as the document's text has it.
fn without_additions(working: &mut Value, doc: &tree::Document, at: &[Seg]) {
    let Some(node) = doc.root.at(at) else { return };
    if let Some(target) = value_at(working, at) {
        *target = node.to_json();
    }
}

/// The edits of one unit, on their own, or why the editor refused them.
fn unit_edits(editor: &edit::Editor, unit: &Unit) -> Result<Vec<edit::Edit>, String> {
    editor.edits(&patch::fold(&unit.ops))
}

/// Edits every unit that can be edited; refuses the rest (found by halving
/// the set, so k refusals among n units cost O(k log n) checks of the
/// document, not n). `working` ends as the document with the edited units'
/// additions.
fn edit_units(d: &Doc, editor: &edit::Editor, units: &mut [Unit], working: &mut Value) -> Vec<edit::Edit> {
    // Each unit's additions become text, and are dropped: the text is a
    // fraction of their size as JSON values.
    let mut per_unit: Vec<Option<Vec<edit::Edit>>> = Vec::with_capacity(units.len());
    for unit in units.iter_mut() {
        let edits = if unit.live {
            Some(unit_edits(editor, unit))
        } else {
            None
        };
        unit.ops = Vec::new();
        per_unit.push(match edits {
            Some(Ok(edits)) => Some(edits),
            Some(Err(why)) => {
                unit.refuse(Verdict::Error, d.odd_key().unwrap_or(&why));
                None
            }
            None => None,
        });
    }
    restore(working, d.tree, units);
    let all: Vec<usize> = (0..units.len()).filter(|&i| units[i].live).collect();
    if all.is_empty() {
        return Vec::new();
    }
    let mut edits = merged(&all, &per_unit);
    if reads_as_planned(d, &edits, working, &stand_ins(working, units, |_| true)) {
        return edits;
    }
    // Some unit's edit reads back wrong: keep the units that check out.
    let (mut good, mut bad) = (Vec::new(), Vec::new());
    if all.len() == 1 {
        bad.push(all[0]);
    } else {
        let (left, right) = all.split_at(all.len() / 2);
        bisect(d, working, units, &per_unit, left, &mut good, &mut bad);
        bisect(d, working, units, &per_unit, right, &mut good, &mut bad);
    }
    for &i in &bad {
        let why = why_uneditable(d, &units[i], per_unit[i].as_deref().unwrap_or_default(), working);
        units[i].refuse(Verdict::Error, &why);
        per_unit[i] = None;
    }
    restore(working, d.tree, units);
    edits = merged(&good, &per_unit);
    if good.is_empty() || reads_as_planned(d, &edits, working, &stand_ins(working, units, |_| true)) {
        return edits;
    }
    for (unit, edits) in units.iter_mut().zip(&per_unit).filter(|(u, _)| u.live) {
        let why = why_uneditable(d, unit, edits.as_deref().unwrap_or_default(), working);
        unit.refuse(Verdict::Error, &why);
    }
    restore(working, d.tree, units);
    Vec::new()
}

/// The edits of the units in `set`, in the order of the text (at one place,
/// a unit's own order, and units in order).
fn merged(set: &[usize], per_unit: &[Option<Vec<edit::Edit>>]) -> Vec<edit::Edit> {
    let mut edits: Vec<edit::Edit> = set
        .iter()
        .flat_map(|&i| per_unit[i].iter().flatten().cloned())
        .collect();
    edits.sort_by_key(|e| e.at);
    edits
}

/// Splits `set` into the units whose edits, together, read back as planned
/// and those that do not.
fn bisect(
    d: &Doc,
    working: &Value,
    units: &[Unit],
    per_unit: &[Option<Vec<edit::Edit>>],
    set: &[usize],
    good: &mut Vec<usize>,
    bad: &mut Vec<usize>,
) {
    let mut in_set = vec![false; units.len()];
    set.iter().for_each(|&i| in_set[i] = true);
    let mut expected = working.clone();
    for (i, unit) in units.iter().enumerate() {
        if unit.live && !in_set[i] {
            without_additions(&mut expected, d.tree, &unit.at);
        }
    }
    let holes = stand_ins(&expected, units, |i| in_set[i] || !units[i].live);
    if reads_as_planned(d, &merged(set, per_unit), &expected, &holes) {
        good.extend_from_slice(set);
        return;
    }
    drop(expected);
    if set.len() == 1 {
        bad.push(set[0]);
        return;
    }
    let (left, right) = set.split_at(set.len() / 2);
    bisect(d, working, units, per_unit, left, good, bad);
    bisect(d, working, units, per_unit, right, good, bad);
}

/// Whether the document, edited by `edits` and read on its own, is exactly
/// `expected`.
fn reads_as_planned(d: &Doc, edits: &[edit::Edit], expected: &Value, holes: &HashMap<usize, &str>) -> bool {
    let (_, new) = edited(d, edits);
    let stand_in = |v: &Value| {
        let text = holes.get(&(v as *const Value as usize))?;
        Some(serde_json::from_str(text).unwrap_or(Value::Null))
    };
    tree::reads_as(&new, expected, d.json, &stand_in)
}

/// The document's text on its own with `edits` applied, and the edits at
/// positions in that text.
fn edited(d: &Doc, edits: &[edit::Edit]) -> (Vec<edit::Edit>, String) {
    let (text, doc) = (d.text, d.tree);
    let end = edits
        .iter()
        .map(|e| e.at + e.remove)
        .chain([doc.end, doc.root.end])
        .max()
        .unwrap_or(doc.end)
        .min(text.len());
    let local: Vec<edit::Edit> = edits
        .iter()
        .map(|e| edit::Edit {
            at: e.at - doc.start,
            remove: e.remove,
            insert: e.insert.clone(),
        })
        .collect();
    let new = edit::apply(&text[doc.start..end], &local);
    (local, new)
}

/// The extra additions (the KRM results), planned from the final entries,
/// then the entries out: the document's edits.
#[allow(clippy::too_many_arguments)]
fn finish(
    d: &Doc,
    editor: &edit::Editor,
    cx: &Context,
    units: Vec<Unit>,
    mut working: Value,
    mut edits: Vec<edit::Edit>,
    entries: &mut Vec<Entry>,
) -> Vec<edit::Edit> {
    let mine: Vec<Entry> = units.iter().flat_map(|u| &u.entries).map(|(e, _)| e.clone()).collect();
    if let Some(extra) = cx.extra {
        let more = extra(&working, &mine);
        if !more.is_empty() {
            for op in &more {
                patch::apply(&mut working, op);
            }
            let added = editor.edits(&patch::fold(&more)).ok().and_then(|extra_edits| {
                let mut all = edits.clone();
                all.extend(extra_edits);
                all.sort_by_key(|e| e.at);
                reads_as_planned(d, &all, &working, &stand_ins(&working, &units, |_| true)).then_some(all)
            });
            match added {
                Some(all) => edits = all,
                None => {
                    entries.extend(mine);
                    entries.push(entry(
                        Verdict::Error,
                        &working,
                        format!("line {}", line_of(d.text, d.tree.start)),
                        "could not add the results to this document (please report it)".into(),
                    ));
                    return edits;
                }
            }
        }
    }
    entries.extend(mine);
    edits
}

#[cfg(test)]
mod tests {
    use super::*;

    fn has_helm_action(text: &str) -> bool {
        let mut found = false;
        assert!(tree::parse_each(text, |doc| found |= helm_action(text, &doc.root)).is_none());
        found
    }

    #[test]
    fn a_helm_action_read_as_yaml_is_one_and_argo_parameters_in_strings_are_data() {
        assert!(has_helm_action("image: {{ .Values.image }}\n"));
        assert!(has_helm_action(
            "spec:\n  containers:\n    - image: {{ .Values.image }}\n"
        ));
        assert!(!has_helm_action("args: [\"{{inputs.parameters.message}}\"]\n"));
        assert!(!has_helm_action("value: \"{{workflow.name}} says hello\"\n"));
        assert!(!has_helm_action("args:\n  - echo {{inputs.parameters.x}}\n"));
        assert!(!has_helm_action("command: [echo, '{{x}}']\nlabels: {a: b}\n"));
    }
}
