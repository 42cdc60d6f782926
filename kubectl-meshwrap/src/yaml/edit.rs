//! Turns a plan of additions into text insertions, leaving every byte that is
//! not added where it was: comments, key order, quoting, flow style, blank
//! lines and the documents the plan does not touch.
//!
//! Where text goes:
//! - into a block sequence before item i: just before that item's `-`, at
//!   its column;
//! - at the end of a block collection: after its last line of content, found
//!   by walking back from the next token over blank and comment lines, but
//!   never into the last scalar (a `|` script may hold lines that look like
//!   comments);
//! - into a flow collection: JSON after the last item, or after the bracket,
//!   on a line of its own when the items are one per line (JSON stays JSON);
//! - a key that holds null: its value is replaced by a flow value.
//!
//! Several additions may meet at one offset: a block collection ends where
//! its last item (and that item's own last collection) ends, and the place
//! before a block item at column 0 is where the item before it ends. They
//! are ordered by the depth of the collection that receives them, deepest
//! first, so the plan's order does not matter (the Cloud SQL proxy's new
//! `args` key, then the guard container appended after the proxy). Keys
//! for one empty flow mapping (`annotations: {}`) become one edit, their
//! entries separated. A refusal is one line: the line, what could not be
//! inserted, and why.
//!
//! New content is block YAML at the surrounding indentation (small maps and
//! lists of scalars in flow style), its strings plain only when no YAML
//! reader could take them for anything but a string. The caller re-parses
//! the result and compares it with the plan applied to JSON, so a layout
//! this module gets wrong costs an unchanged document, never a wrong one.

use saphyr_parser::ScalarStyle;
use serde_json::Value;

use super::tree::{Kind, Node};
use crate::patch::{Op, Seg};

/// Replace `remove` bytes at `at` with `insert`.
#[derive(Clone, Debug)]
pub struct Edit {
    pub at: usize,
    pub remove: usize,
    pub insert: String,
}

/// The text edits that carry out `ops` (already folded: no op targets what
/// another adds) on the document `root` within `text`.
pub fn edits(text: &str, root: &Node, ops: &[Op]) -> Result<Vec<Edit>, String> {
    Editor::new(text, root).edits(ops)
}

/// One document's layout, read once (its line ending and whether it is
/// JSON), for any number of plans: each plan then costs what its edits
/// touch, not the document's length.
pub struct Editor<'a> {
    text: &'a str,
    root: &'a Node<'a>,
    nl: &'static str,
    flow: fn(&Value) -> String,
}

impl<'a> Editor<'a> {
    pub fn new(text: &'a str, root: &'a Node<'a>) -> Self {
        // The document's own line ending and style, not the stream's.
        let own = &text[root.start.min(text.len())..root.end.clamp(root.start, text.len())];
        let nl = if own.contains("\r\n") { "\r\n" } else { "\n" };
        // JSON stays JSON; a YAML flow collection gets YAML's flow style.
        let flow: fn(&Value) -> String = if text.trim_start().starts_with('{') {
            json
        } else {
            flow_yaml
        };
        Editor { text, root, nl, flow }
    }

    /// The text edits that carry out `ops` (already folded), in the order
    /// of the text, whatever the order of `ops`. Where several land at one
    /// offset, what goes into the deeper collection comes first ([`depth`]);
    /// keys for one empty flow mapping become one edit, its entries
    /// separated. Refused: one line naming the line, what could not be
    /// inserted, and why.
    pub fn edits(&self, ops: &[Op]) -> Result<Vec<Edit>, String> {
        let (text, root, nl, flow) = (self.text, self.root, self.nl, self.flow);
        let mut out: Vec<(Edit, usize)> = Vec::new();
        // An empty flow mapping's opening brace -> its edit in `out`.
        let mut empty_maps: Vec<(usize, usize)> = Vec::new();
        for op in ops {
            let target = find(root, path_of(op)).map_err(|why| self.refusal(op, None, &why))?;
            let edit = match op {
                Op::Insert { index, values, .. } => insert(text, nl, flow, target, *index, values),
                Op::Add { key, value, .. } => add(text, nl, flow, target, key, value),
            }
            .map_err(|why| self.refusal(op, Some(target), &why))?;
            if into_empty_flow_map(target, op) {
                if let Some(&(_, i)) = empty_maps.iter().find(|(open, _)| *open == target.start) {
                    out[i].0.insert.push_str(", ");
                    out[i].0.insert.push_str(&edit.insert);
                    continue;
                }
                empty_maps.push((target.start, out.len()));
            }
            out.push((edit, depth(op)));
        }
        out.sort_by_key(|(e, depth)| (e.at, std::cmp::Reverse(*depth)));
        Ok(out.into_iter().map(|(e, _)| e).collect())
    }

    /// The line that says what `op` could not insert, where, and why.
    fn refusal(&self, op: &Op, target: Option<&Node>, why: &str) -> String {
        // The target, else the deepest node on its way that exists.
        let near = target.unwrap_or_else(|| {
            let path = path_of(op);
            (0..path.len())
                .rev()
                .find_map(|n| self.root.at(&path[..n]))
                .unwrap_or(self.root)
        });
        format!(
            "line {}: could not insert {} into {}: {why}",
            line_of(self.text, near.start),
            what(op),
            crate::patch::pointer(path_of(op))
        )
    }
}

/// How deep the collection that receives `op`'s content lies. At one
/// offset only nested collections meet (a block collection ends where its
/// last item, and that item's own last collection, end; flow collections
/// end at their own brackets), so the deeper one is the inner one, and its
/// content goes first: the proxy's new `args` key before the container
/// appended after it, a list's items before a key added to the mapping
/// that holds it.
fn depth(op: &Op) -> usize {
    path_of(op).len()
}

fn path_of(op: &Op) -> &[crate::patch::Seg] {
    match op {
        Op::Insert { path, .. } | Op::Add { path, .. } => path,
    }
}

/// Whether `op` puts a key into the empty flow mapping `target` (`{}`).
fn into_empty_flow_map(target: &Node, op: &Op) -> bool {
    matches!((&target.kind, op), (Kind::Map(entries), Op::Add { key, .. })
        if target.flow && entries.is_empty() && target.get(key).is_none())
}

/// What `op` adds, for a refusal: the key, or the items (by name when
/// they have one).
pub fn what(op: &Op) -> String {
    match op {
        Op::Add { key, .. } => format!("the key {key:?}"),
        Op::Insert { values, .. } => {
            let one = |v: &Value| match v.get("name").and_then(Value::as_str) {
                Some(name) => format!("{name:?}"),
                None => {
                    let s = json(v);
                    match s.char_indices().nth(37) {
                        Some((cut, _)) => format!("{}...", &s[..cut]),
                        None => s,
                    }
                }
            };
            let items: Vec<String> = values.iter().take(3).map(one).collect();
            let more = if values.len() > 3 { ", ..." } else { "" };
            let noun = if values.len() == 1 { "item" } else { "items" };
            format!("{} {noun} ({}{more})", values.len(), items.join(", "))
        }
    }
}

/// Of `edits` (sorted, at positions in the text they were applied to), the
/// first whose inserted text, in the edited text, meets `span` (also
/// there): else the last inserted before it, else the first.
pub fn culprit(edits: &[Edit], span: std::ops::Range<usize>) -> Option<&Edit> {
    let mut shift: isize = 0;
    let mut before = None;
    for e in edits {
        let start = (e.at as isize + shift) as usize;
        let end = start + e.insert.len();
        if start <= span.end && end >= span.start {
            return Some(e);
        }
        if start <= span.start {
            before = Some(e);
        }
        shift += e.insert.len() as isize - e.remove as isize;
    }
    before.or(edits.first())
}

/// The bytes of 1-based line `line` of `text`.
pub fn line_span(text: &str, line: usize) -> std::ops::Range<usize> {
    let mut start = 0;
    for _ in 1..line {
        match text[start..].find('\n') {
            Some(i) => start += i + 1,
            None => break,
        }
    }
    start..next_line(text, start)
}

/// An edit's first line of content, for a refusal: what it inserts.
pub fn snippet(e: &Edit) -> String {
    let line = e
        .insert
        .lines()
        .map(|l| l.trim().trim_start_matches(',').trim())
        .find(|l| !l.is_empty())
        .unwrap_or("");
    match line.char_indices().nth(60) {
        Some((cut, _)) => format!("{}...", &line[..cut]),
        None => line.to_string(),
    }
}

/// 1-based line of byte `at`.
pub fn line_of(text: &str, at: usize) -> usize {
    text.as_bytes()[..at.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// `text` with `edits` (sorted by position) applied.
pub fn apply(text: &str, edits: &[Edit]) -> String {
    let mut out = String::with_capacity(text.len() + edits.iter().map(|e| e.insert.len()).sum::<usize>());
    let mut cursor = 0;
    for e in edits {
        out.push_str(&text[cursor..e.at]);
        out.push_str(&e.insert);
        cursor = e.at + e.remove;
    }
    out.push_str(&text[cursor..]);
    out
}

fn find<'a, 't>(root: &'a Node<'t>, path: &[Seg]) -> Result<&'a Node<'t>, String> {
    root.at(path)
        .ok_or_else(|| format!("nothing at {}", crate::patch::pointer(path)))
}

fn insert(
    text: &str,
    nl: &str,
    flow: fn(&Value) -> String,
    seq: &Node,
    index: usize,
    values: &[Value],
) -> Result<Edit, String> {
    let Kind::Seq(items) = &seq.kind else {
        return Err("not a sequence".into());
    };
    if index > items.len() {
        return Err("index past the end".into());
    }
    if seq.flow {
        return Ok(flow_insert(text, nl, seq.start, items, index, values, flow));
    }
    // Every item's `-` is at the first one's column.
    let first_dash = dash_before(text, items[0].start);
    let col = first_dash - line_start(text, first_dash);
    let mut insert = String::new();
    if index < items.len() {
        let dash = dash_before(text, items[index].start);
        for v in values {
            insert.push_str("- ");
            insert.push_str(&item(v, col + 2, nl));
            insert.push_str(nl);
            insert.push_str(&" ".repeat(col));
        }
        return Ok(Edit {
            at: dash,
            remove: 0,
            insert,
        });
    }
    let at = block_end(text, seq);
    if at == text.len() && !text.ends_with('\n') {
        insert.push_str(nl);
    }
    for v in values {
        insert.push_str(&" ".repeat(col));
        insert.push_str("- ");
        insert.push_str(&item(v, col + 2, nl));
        insert.push_str(nl);
    }
    Ok(Edit { at, remove: 0, insert })
}

fn add(text: &str, nl: &str, flow: fn(&Value) -> String, map: &Node, key: &str, value: &Value) -> Result<Edit, String> {
    let Kind::Map(entries) = &map.kind else {
        return Err("not a mapping".into());
    };
    if let Some(existing) = map.get(key) {
        if !existing.is_null() {
            return Err(format!("{key} is already set"));
        }
        // `key: ~`, `key: null` or `key:` with nothing: the value in flow style.
        let Kind::Scalar { text: scalar, .. } = &existing.kind else {
            return Err(format!("{key} is not null"));
        };
        if existing.end <= existing.start {
            // An empty value is marked at its key's `:`: write after it.
            let colon = text[existing.start..]
                .find(':')
                .map_or(existing.start, |i| existing.start + i + 1);
            return Ok(Edit {
                at: colon,
                remove: 0,
                insert: format!(" {}", json(value)),
            });
        }
        let written = if scalar == "~" { 1 } else { scalar.len() };
        return Ok(Edit {
            at: existing.start,
            remove: written,
            insert: json(value),
        });
    }
    if map.flow {
        let entry = format!("{}: {}", flow(&Value::String(key.into())), flow(value));
        return Ok(flow_append_entry(text, nl, map.start, entries, entry));
    }
    let col = map.start - line_start(text, map.start);
    let at = block_end(text, map);
    let mut insert = String::new();
    if at == text.len() && !text.ends_with('\n') {
        insert.push_str(nl);
    }
    insert.push_str(&" ".repeat(col));
    insert.push_str(&scalar(&Value::String(key.into())));
    insert.push(':');
    insert.push_str(&value_after_key(value, col, nl));
    insert.push_str(nl);
    Ok(Edit { at, remove: 0, insert })
}

/// Inserts rendered `values` into a flow sequence whose `[` is at `open`.
fn flow_insert(
    text: &str,
    nl: &str,
    open: usize,
    items: &[Node],
    index: usize,
    values: &[Value],
    render: impl Fn(&Value) -> String,
) -> Edit {
    let rendered: Vec<String> = values.iter().map(render).collect();
    if items.is_empty() {
        return Edit {
            at: open + 1,
            remove: 0,
            insert: rendered.join(", "),
        };
    }
    if index < items.len() {
        let at = items[index].start;
        let sep = separator(text, nl, at);
        let mut insert = String::new();
        for r in rendered {
            insert.push_str(&r);
            insert.push_str(&sep);
        }
        return Edit { at, remove: 0, insert };
    }
    let last = &items[items.len() - 1];
    let at = node_end(text, last);
    let sep = separator(text, nl, last.start);
    let mut insert = String::new();
    for r in rendered {
        insert.push_str(&sep);
        insert.push_str(&r);
    }
    Edit { at, remove: 0, insert }
}

/// Appends `entry` (`"key": value`) to a flow mapping whose `{` is at `open`.
fn flow_append_entry(text: &str, nl: &str, open: usize, entries: &[(Node, Node)], entry: String) -> Edit {
    let Some((key, value)) = entries.last() else {
        return Edit {
            at: open + 1,
            remove: 0,
            insert: entry,
        };
    };
    Edit {
        at: node_end(text, value),
        remove: 0,
        insert: format!("{}{entry}", separator(text, nl, key.start)),
    }
}

/// What goes before a new item of a flow collection, `at` being where an
/// item beside it starts: on a line of its own, indented like that item,
/// when the items are one per line (pretty JSON); `, ` otherwise.
fn separator(text: &str, nl: &str, at: usize) -> String {
    if starts_line(text, at) {
        format!(",{nl}{}", " ".repeat(at - line_start(text, at)))
    } else {
        ", ".to_string()
    }
}

/// Where a node's own text ends (flow context): after a collection's
/// bracket, a quoted scalar's closing quote, a plain scalar's last character.
fn node_end(text: &str, node: &Node) -> usize {
    match &node.kind {
        Kind::Seq(_) | Kind::Map(_) => node.end,
        Kind::Scalar {
            style: ScalarStyle::SingleQuoted,
            ..
        } => {
            let bytes = text.as_bytes();
            let mut i = node.start + 1;
            while i < bytes.len() {
                if bytes[i] == b'\'' {
                    if bytes.get(i + 1) == Some(&b'\'') {
                        i += 2;
                        continue;
                    }
                    return i + 1;
                }
                i += 1;
            }
            text.len()
        }
        Kind::Scalar {
            style: ScalarStyle::DoubleQuoted,
            ..
        } => {
            let bytes = text.as_bytes();
            let mut i = node.start + 1;
            while i < bytes.len() {
                match bytes[i] {
                    b'\\' => i += 2,
                    b'"' => return i + 1,
                    _ => i += 1,
                }
            }
            text.len()
        }
        _ => {
            let end = node.end.max(node.start);
            node.start + text[node.start..end].trim_end().len()
        }
    }
}

/// The `-` that introduces the block sequence item starting at `at` (for a
/// block scalar, `at` is its first line of content, after its `|` header).
/// Between the dash and the item there may be a block scalar's header, a
/// comment (`- # the app`), and blank or comment-only lines.
fn dash_before(text: &str, at: usize) -> usize {
    let mut end = at;
    // Each step goes back one line, over lines with nothing but a comment.
    loop {
        let line = line_start(text, end);
        let mut before = without_comment(&text[line..end]).trim_end();
        if let Some(header) = before.rfind(['|', '>'])
            && before[header + 1..]
                .chars()
                .all(|c| c == '+' || c == '-' || c.is_ascii_digit())
        {
            before = before[..header].trim_end();
        }
        if let Some(rest) = before.strip_suffix('-')
            && (rest.is_empty() || rest.ends_with([' ', '\t']))
        {
            return line + rest.len();
        }
        if !before.trim().is_empty() || line == 0 {
            return at;
        }
        end = line - 1;
    }
}

/// A line's text before its comment: a `#` at its start or after a blank
/// (the line being the stretch before an item, with no quotes in it).
fn without_comment(line: &str) -> &str {
    let bytes = line.as_bytes();
    let hash = (0..bytes.len()).find(|&i| bytes[i] == b'#' && (i == 0 || matches!(bytes[i - 1], b' ' | b'\t')));
    hash.map_or(line, |i| &line[..i])
}

fn line_start(text: &str, at: usize) -> usize {
    text[..at].rfind('\n').map_or(0, |i| i + 1)
}

/// Whether only whitespace precedes `at` on its line (looking back no
/// further than that whitespace: a minified document is one long line).
fn starts_line(text: &str, at: usize) -> bool {
    let before = text[..at].trim_end_matches([' ', '\t']);
    before.is_empty() || before.ends_with('\n')
}

/// The last scalar of a node, depth first: where insertion must stop
/// walking back.
fn last_scalar<'a, 't>(node: &'a Node<'t>) -> &'a Node<'t> {
    match &node.kind {
        Kind::Seq(items) => items.last().map_or(node, last_scalar),
        Kind::Map(entries) => entries.last().map_or(node, |(_, v)| last_scalar(v)),
        _ => node,
    }
}

/// Where a line appended to the block collection `node` goes: the start of
/// the line after its last line of content.
fn block_end(text: &str, node: &Node) -> usize {
    let last = last_scalar(node);
    let floor = line_start(text, last.start);
    let block_scalar = match &last.kind {
        Kind::Scalar {
            style: ScalarStyle::Literal | ScalarStyle::Folded,
            ..
        } => Some(last.start - floor),
        _ => None,
    };
    let next = node.end.min(text.len());
    let mut at = if next == text.len() {
        next
    } else {
        line_start(text, next)
    };
    if at == text.len() && !text.is_empty() && !text.ends_with('\n') {
        // The last line has no newline: if it is content, append after it.
        let start = line_start(text, at);
        let line = &text[start..];
        if start <= floor || !(line.trim().is_empty() || line.trim_start().starts_with('#')) {
            return text.len();
        }
        at = start;
    }
    while at > floor {
        let prev = line_start(text, at - 1);
        if prev <= floor {
            break;
        }
        let line = &text[prev..at];
        let content = line.trim_start();
        let indent = line.len() - content.len();
        let blank = content.trim().is_empty();
        let comment = content.starts_with('#') && block_scalar.is_none_or(|col| indent < col);
        if blank || comment {
            at = prev;
        } else {
            break;
        }
    }
    let at = if at <= floor { next_line(text, floor) } else { at };
    if keeps_blank_lines(last) {
        past_blank_lines(text, at, next)
    } else {
        at
    }
}

/// A `|+` or `>+` scalar ending in blank lines: they are its content, so
/// nothing may go in front of them.
fn keeps_blank_lines(node: &Node) -> bool {
    matches!(&node.kind, Kind::Scalar {
        style: ScalarStyle::Literal | ScalarStyle::Folded,
        text,
    } if text.ends_with("\n\n"))
}

/// The start of the first line at or after `at` (and before `limit`) that
/// is not blank.
fn past_blank_lines(text: &str, mut at: usize, limit: usize) -> usize {
    while at < limit.min(text.len()) {
        let end = next_line(text, at);
        if !text[at..end].trim().is_empty() {
            break;
        }
        at = end;
    }
    at
}

fn next_line(text: &str, at: usize) -> usize {
    text[at..].find('\n').map_or(text.len(), |i| at + i + 1)
}

/// A value in JSON: what goes into a flow collection.
fn json(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

/// A scalar: plain when nothing but a string can be read from it.
fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) if plain_safe(s) => s.clone(),
        // JSON in a string reads best in single quotes, where `"` is plain.
        Value::String(s) if s.contains('"') && !s.contains('\'') && !s.chars().any(char::is_control) => {
            format!("'{s}'")
        }
        _ => json(v),
    }
}

fn plain_safe(s: &str) -> bool {
    let Some(first) = s.chars().next() else { return false };
    let ok_first = first.is_ascii_alphanumeric() || matches!(first, '/' | '.' | '_') || (first == '-' && s.len() > 1);
    ok_first
        && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '_' | '-' | '=' | ':'))
        && !s.ends_with(':')
        // YAML 1.1 reads 1:20 as a number in base 60.
        && !s.chars().all(|c| c.is_ascii_digit() || c == ':')
        && !matches!(
            s.to_ascii_lowercase().as_str(),
            "true" | "false" | "yes" | "no" | "on" | "off" | "y" | "n" | "null" | ".inf" | "-.inf" | ".nan"
        )
        && s.parse::<f64>().is_err()
        && !s.starts_with("0x")
        && !s.starts_with("0o")
        && !s.starts_with("---")
}

fn is_scalar(v: &Value) -> bool {
    !matches!(v, Value::Array(_) | Value::Object(_))
}

/// A small map of scalars or a list of scalars, written `{a: 1}` / `[a, b]`
/// when that fits on a short line.
fn inline(v: &Value) -> Option<String> {
    match v {
        Value::Array(items) if items.iter().all(is_scalar) => Some(flow_yaml(v)),
        Value::Object(map) if map.values().all(is_scalar) => Some(flow_yaml(v)).filter(|s| s.len() <= 72),
        _ if is_scalar(v) => Some(scalar(v)),
        _ => None,
    }
}

/// A value in YAML's flow style (plain scalars never hold `,[]{}`).
fn flow_yaml(v: &Value) -> String {
    match v {
        Value::Array(items) => format!("[{}]", items.iter().map(flow_yaml).collect::<Vec<_>>().join(", ")),
        Value::Object(map) => format!(
            "{{{}}}",
            map.iter()
                .map(|(k, v)| format!("{}: {}", scalar(&Value::String(k.clone())), flow_yaml(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        _ => scalar(v),
    }
}

/// What follows `key:` in block style, for a key at column `col`.
fn value_after_key(v: &Value, col: usize, nl: &str) -> String {
    if let Some(s) = inline(v) {
        return format!(" {s}");
    }
    let inner = " ".repeat(col + 2);
    let mut out = String::new();
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                out.push_str(nl);
                out.push_str(&inner);
                out.push_str(&scalar(&Value::String(k.clone())));
                out.push(':');
                out.push_str(&value_after_key(v, col + 2, nl));
            }
        }
        Value::Array(items) => {
            for v in items {
                out.push_str(nl);
                out.push_str(&inner);
                out.push_str("- ");
                out.push_str(&item(v, col + 4, nl));
            }
        }
        _ => {}
    }
    out
}

/// A sequence item's text after its `- `, the item's content at column `col`.
fn item(v: &Value, col: usize, nl: &str) -> String {
    match v {
        Value::Object(map) if !map.is_empty() && inline(v).is_none() => {
            let mut out = String::new();
            for (i, (k, v)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(nl);
                    out.push_str(&" ".repeat(col));
                }
                out.push_str(&scalar(&Value::String(k.clone())));
                out.push(':');
                out.push_str(&value_after_key(v, col, nl));
            }
            out
        }
        _ => inline(v).unwrap_or_else(|| json(v)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::patch::key;
    use crate::yaml::tree::parse;
    use serde_json::json;

    fn run(text: &str, ops: &[Op]) -> String {
        let (docs, err) = parse(text);
        assert!(err.is_none());
        let edits = edits(text, &docs[0].root, ops).unwrap();
        let out = apply(text, &edits);
        let (again, err) = parse(&out);
        assert!(err.is_none(), "{out}");
        let mut expected = docs[0].root.to_json();
        for op in ops {
            assert!(crate::patch::apply(&mut expected, op));
        }
        assert_eq!(again[0].root.to_json(), expected, "{out}");
        out
    }

    #[test]
    fn a_block_sequence_gets_items_before_its_first_and_after_its_last() {
        let text =
            "c:\n  - python # the interpreter\n  - |\n    # not a comment\n    print(1)\n\n  # trailing\nnext: 1\n";
        let out = run(
            text,
            &[
                Op::Insert {
                    path: vec![key("c")],
                    index: 2,
                    values: vec![json!({"a": 1, "b": [1, 2], "c": {"d": "e"}, "f": {"g": [{"h": 1}]}})],
                },
                Op::Insert {
                    path: vec![key("c")],
                    index: 0,
                    values: vec![json!("/mesh/meshwrap"), json!("--")],
                },
            ],
        );
        assert_eq!(
            out,
            "c:\n  - /mesh/meshwrap\n  - --\n  - python # the interpreter\n  - |\n    # not a comment\n    print(1)\n  - a: 1\n    b: [1, 2]\n    c: {d: e}\n    f:\n      g:\n        - {h: 1}\n\n  # trailing\nnext: 1\n"
        );
    }

    #[test]
    fn a_flow_sequence_and_json_stay_flow() {
        assert_eq!(
            run(
                "c: [\"python\", 'x']\n",
                &[Op::Insert {
                    path: vec![key("c")],
                    index: 2,
                    values: vec![json!("y")]
                }]
            ),
            "c: [\"python\", 'x', \"y\"]\n"
        );
        let pretty = "{\n  \"c\": [\n    \"a\"\n  ],\n  \"m\": {}\n}";
        assert_eq!(
            run(
                pretty,
                &[
                    Op::Insert {
                        path: vec![key("c")],
                        index: 0,
                        values: vec![json!("z")]
                    },
                    Op::Add {
                        path: vec![],
                        key: "n".into(),
                        value: json!({"k": [1]})
                    },
                    Op::Add {
                        path: vec![key("m")],
                        key: "k".into(),
                        value: json!(1)
                    },
                ]
            ),
            "{\n  \"c\": [\n    \"z\",\n    \"a\"\n  ],\n  \"m\": {\"k\": 1},\n  \"n\": {\"k\":[1]}\n}"
        );
    }

    #[test]
    fn keys_go_after_the_mappings_last_line_and_nulls_are_filled() {
        let out = run(
            "spec:\n  a: 1\n  b: ~\n  c:\n# about d\nd: 2",
            &[
                Op::Add {
                    path: vec![key("spec")],
                    key: "z".into(),
                    value: json!([{"name": "x"}]),
                },
                Op::Add {
                    path: vec![key("spec")],
                    key: "b".into(),
                    value: json!([1]),
                },
                Op::Add {
                    path: vec![key("spec")],
                    key: "c".into(),
                    value: json!({"x": 1}),
                },
                Op::Add {
                    path: vec![],
                    key: "e".into(),
                    value: json!("s p"),
                },
            ],
        );
        assert_eq!(
            out,
            "spec:\n  a: 1\n  b: [1]\n  c: {\"x\":1}\n  z:\n    - {name: x}\n# about d\nd: 2\ne: \"s p\"\n"
        );
    }

    #[test]
    fn an_item_whose_dash_is_followed_by_a_comment_gets_items_before_its_dash() {
        let out = run(
            "c:\n- # the app\n  name: x\n-\n  # next\n  name: y\n",
            &[Op::Insert {
                path: vec![key("c")],
                index: 1,
                values: vec![json!("z")],
            }],
        );
        assert_eq!(out, "c:\n- # the app\n  name: x\n- z\n-\n  # next\n  name: y\n");
        let out = run(
            "c:\n- # the app\n  name: x\n",
            &[Op::Insert {
                path: vec![key("c")],
                index: 0,
                values: vec![json!("z")],
            }],
        );
        assert_eq!(out, "c:\n- z\n- # the app\n  name: x\n");
    }

    #[test]
    fn a_keep_chomped_scalars_blank_lines_stay_its_own() {
        let out = run(
            "m:\n  s: |+\n    a\n\n\n# after\nn: 1\n",
            &[Op::Add {
                path: vec![key("m")],
                key: "t".into(),
                value: json!(1),
            }],
        );
        assert_eq!(out, "m:\n  s: |+\n    a\n\n\n  t: 1\n# after\nn: 1\n");
    }

    /// `doc` with `ops` (folded: indices count its own items) applied as
    /// JSON: the deepest first, and in a sequence the last index first, so
    /// no op moves what another points at.
    fn planned(doc: &Value, ops: &[Op]) -> Value {
        let mut ops = ops.to_vec();
        ops.sort_by_key(|op| {
            let index = match op {
                Op::Insert { index, .. } => *index,
                Op::Add { .. } => 0,
            };
            std::cmp::Reverse((path_of(op).len(), index))
        });
        let mut doc = doc.clone();
        for op in &ops {
            assert!(crate::patch::apply(&mut doc, op), "{op:?}");
        }
        doc
    }

    /// `ops` in `orderings` shuffled orders (and as given): each time the
    /// edited text reads as the plan.
    fn in_any_order(text: &str, ops: &[Op], orderings: usize) {
        let (docs, err) = parse(text);
        assert!(err.is_none());
        let want = planned(&docs[0].root.to_json(), ops);
        let mut ops = ops.to_vec();
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..orderings {
            let edits = edits(text, &docs[0].root, &ops).unwrap_or_else(|e| panic!("{e}\n{ops:?}"));
            let out = apply(text, &edits);
            let (again, err) = parse(&out);
            assert!(err.is_none(), "{out}\n{ops:?}");
            assert_eq!(again[0].root.to_json(), want, "{out}\n{ops:?}");
            // Fisher-Yates with xorshift: the next order.
            for i in (1..ops.len()).rev() {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                ops.swap(i, (seed % (i as u64 + 1)) as usize);
            }
        }
    }

    fn ins(path: &[Seg], index: usize, values: Vec<Value>) -> Op {
        Op::Insert {
            path: path.to_vec(),
            index,
            values,
        }
    }

    fn add_key(path: &[Seg], k: &str, value: Value) -> Op {
        Op::Add {
            path: path.to_vec(),
            key: k.into(),
            value,
        }
    }

    #[test]
    fn insertions_at_one_offset_read_as_planned_in_any_order() {
        use Seg::Index;
        let c = || key("c");
        // Items at the mapping's column: the end of item 0, its `args`, and
        // the place before item 1 are one offset; so are the end of item 1,
        // its `ports`, the end of `c` and the mapping `m` after it.
        let compact = "c:\n- name: a\n  args:\n  - x\n- name: b\n  ports:\n  - p\nm: {}\ns: []\n";
        let indented =
            "spec:\n  c:\n    - name: a\n      args:\n        - x\n    - name: b\n      ports:\n        - p\n  m: {}\n";
        let ops = |pre: &[Seg]| {
            let at = |rest: &[Seg]| crate::patch::under(pre, rest);
            vec![
                add_key(&at(&[c(), Index(0)]), "env", json!([{"name": "E", "value": "1"}])),
                ins(&at(&[c(), Index(0), key("args")]), 1, vec![json!("y")]),
                ins(&at(&[c()]), 1, vec![json!({"name": "z", "args": ["--"]})]),
                add_key(&at(&[c(), Index(1)]), "args", json!(["--health-check"])),
                ins(&at(&[c(), Index(1), key("ports")]), 1, vec![json!("r")]),
                ins(&at(&[c()]), 2, vec![json!({"name": "g"}), json!("h")]),
                add_key(&at(&[key("m")]), "k1", json!(1)),
                add_key(&at(&[key("m")]), "k/2", json!("v w")),
                add_key(&at(&[key("m")]), "k3", json!({"a": [1]})),
                add_key(pre, "t", json!({"u": 1})),
            ]
        };
        let mut flat = ops(&[]);
        flat.push(ins(&[key("s")], 0, vec![json!("a"), json!("b")]));
        in_any_order(compact, &flat, 400);
        in_any_order(indented, &ops(&[key("spec")]), 400);
        let pretty = "{\n  \"c\": [\n    {\"name\": \"a\", \"args\": [\"x\"]},\n    {\"name\": \"b\", \"m\": {}}\n  ],\n  \"m\": {}\n}";
        in_any_order(
            pretty,
            &[
                add_key(&[c(), Index(1), key("m")], "k1", json!(1)),
                add_key(&[c(), Index(1), key("m")], "k2", json!([2])),
                ins(&[c(), Index(0), key("args")], 1, vec![json!("y")]),
                add_key(&[c(), Index(1)], "z", json!(null)),
                ins(&[c()], 2, vec![json!({"name": "g"})]),
                add_key(&[key("m")], "a", json!("x")),
                add_key(&[key("m")], "b", json!({})),
                add_key(&[], "t", json!(true)),
            ],
            300,
        );
    }

    #[test]
    fn the_proxys_new_args_go_before_the_container_appended_after_it() {
        // The Cloud SQL proxy, last and without args, gets its flags; the
        // guard is appended after it: both at the proxy's last line's end.
        let text =
            "containers:\n- name: app\n  command: [/app]\n- name: proxy\n  command: [/cloud-sql-proxy, \"p:r:d\"]\n";
        let guard = ins(&[key("containers")], 2, vec![json!({"name": "meshwrap-guard"})]);
        let args = add_key(&[key("containers"), Seg::Index(1)], "args", json!(["--quitquitquit"]));
        let want = "containers:\n- name: app\n  command: [/app]\n- name: proxy\n  command: [/cloud-sql-proxy, \"p:r:d\"]\n  args: [--quitquitquit]\n- {name: meshwrap-guard}\n";
        assert_eq!(run(text, &[guard.clone(), args.clone()]), want);
        assert_eq!(run(text, &[args, guard]), want);
    }

    #[test]
    fn keys_put_into_an_empty_flow_mapping_are_separated() {
        let ops = [
            add_key(&[key("metadata"), key("annotations")], "a.io/x", json!("true")),
            add_key(&[key("metadata"), key("annotations")], "b", json!("{\"v\":1}")),
            add_key(&[key("metadata"), key("annotations")], "c", json!(1)),
        ];
        assert_eq!(
            run("metadata:\n  annotations: {}\n", &ops),
            "metadata:\n  annotations: {a.io/x: \"true\", b: '{\"v\":1}', c: 1}\n"
        );
        assert_eq!(
            run("{\"metadata\": {\"annotations\": {\n}}}", &ops[..2]),
            "{\"metadata\": {\"annotations\": {\"a.io/x\": \"true\", \"b\": \"{\\\"v\\\":1}\"\n}}}"
        );
    }

    #[test]
    fn a_refusal_names_the_line_and_what_it_could_not_insert() {
        let text = "a: 1\nspec:\n  c: x\n  d: [1]\n";
        let (docs, _) = parse(text);
        let refused = |op: Op| edits(text, &docs[0].root, &[op]).unwrap_err();
        assert_eq!(
            refused(ins(
                &[key("spec"), key("c")],
                0,
                vec![json!("/mesh/meshwrap"), json!("--")]
            )),
            "line 3: could not insert 2 items (\"/mesh/meshwrap\", \"--\") into /spec/c: not a sequence"
        );
        assert_eq!(
            refused(add_key(&[key("spec")], "d", json!([2]))),
            "line 3: could not insert the key \"d\" into /spec: d is already set"
        );
        assert_eq!(
            refused(add_key(&[key("spec"), key("e"), key("f")], "g", json!(1))),
            "line 3: could not insert the key \"g\" into /spec/e/f: nothing at /spec/e/f"
        );
        assert_eq!(
            refused(ins(&[key("spec"), key("d")], 5, vec![json!({"name": "guard"})])),
            "line 4: could not insert 1 item (\"guard\") into /spec/d: index past the end"
        );
    }

    #[test]
    fn the_culprit_is_the_edit_whose_text_meets_what_reads_otherwise() {
        let edits = [
            Edit {
                at: 2,
                remove: 0,
                insert: "abc".into(),
            },
            Edit {
                at: 5,
                remove: 1,
                insert: "\n  - x\n".into(),
            },
        ];
        // "01abc234\n  - x\n6..." : the second edit's text is at 8..15.
        assert_eq!(culprit(&edits, 3..4).unwrap().at, 2);
        assert_eq!(culprit(&edits, 10..12).unwrap().at, 5);
        assert_eq!(culprit(&edits, 6..7).unwrap().at, 2, "the last one before");
        assert_eq!(culprit(&edits, 0..1).unwrap().at, 2, "else the first");
        assert_eq!(snippet(&edits[1]), "- x");
        assert_eq!(line_span("a\nbc\nd", 2), 2..5);
        assert_eq!(line_span("a\nbc\nd", 3), 5..6);
    }

    #[test]
    fn strings_are_plain_only_when_nothing_else_can_be_read() {
        for s in [
            "true", "no", "1", "1.5", "0x1", "", "a b", "a: b", "-", "#x", "~", "null", "1e3", "*a", "&a", "1:20", "a:",
        ] {
            assert!(!plain_safe(s), "{s}");
        }
        for s in [
            "/mesh/meshwrap",
            "--quit-policy",
            "always",
            "10m",
            "a=b",
            "registry.example.com/x:0.1.0",
        ] {
            assert!(plain_safe(s), "{s}");
        }
    }
}
