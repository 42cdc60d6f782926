//! Reading, as PyYAML and kubectl do, a flow collection or quoted scalar in
//! block context whose later lines are not indented past its key.
//!
//! YAML 1.2 indents every line of a flow node in a block collection past
//! the collection (s-l+flow-in-block(n): n+1), and saphyr holds to that;
//! PyYAML ignores indentation inside flow context and quoted scalars, and so
//! does kubectl: sigs.k8s.io/yaml reads through its copy of gopkg.in/yaml.v2,
//! whose scannerc.go (yaml_parser_roll_indent, yaml_parser_unroll_indent:
//! "In the flow context, do nothing", `parser.flow_level > 0`) tracks no
//! indentation inside brackets, and whose yaml_parser_scan_flow_scalar
//! skips a quoted scalar's continuation blanks with no indentation check
//! (libyaml's scanner, as PyYAML's). Argo Workflows' examples, applied with
//! kubectl, write `args: ["` ... `"]` with the closing `"]` at the key's
//! column, and `flags: [` ... `]` likewise.
//!
//! Design: a shadow copy of the text is parsed instead, in which each line
//! inside such a construct gets leading spaces enough to pass the strict
//! rule. Those spaces cannot change the value: at a line's start inside a
//! flow collection they are separation (insignificant), and inside a quoted
//! scalar they are the line prefix that folding strips (YAML 1.2.2 7.3:
//! s-flow-line-prefix). Positions from the shadow's tree are mapped back to
//! the original text through the table of insertions ([`Shadow::original`]):
//! every insertion is at a line start inside a flow node, never in block
//! structure, so a block node's position maps exactly and a scalar's text is
//! the same.
//!
//! Only where the strict parse failed: [`relax`] parses the text's events
//! (no tree); at an error it finds the construct that was open (the
//! outermost flow collection, else the quoted scalar at or just before the
//! error), pads the lines after its first up to its closing character, and
//! parses again. A round is kept only if every line it padded lies, in the
//! new parse, inside a flow collection or quoted scalar that opened in block
//! context and closed (what the padding is claimed to be harmless in; so the
//! parse got past it); otherwise, or when a round finds nothing to pad, the
//! relaxation stops and the first error left is the one reported. At most [`MAX_ROUNDS`] constructs are relaxed in one
//! stream (each round parses the stream again): past that the error stands.

use std::collections::BTreeMap;

use saphyr_parser::{Event, Parser, ScalarStyle};

use super::tree::{Document, Kind, Node, Offsets};

/// Constructs relaxed in one stream at most (each costs one parse of it).
pub const MAX_ROUNDS: usize = 128;

/// The text as parsed, with the spaces added and where.
#[derive(Debug)]
pub struct Shadow {
    pub text: String,
    /// Per insertion, in order: (byte in the shadow where its spaces start,
    /// byte in the original, spaces inserted up to and including it).
    table: Vec<(usize, usize, usize)>,
}

impl Shadow {
    fn new(original: &str, inserts: &BTreeMap<usize, usize>) -> Shadow {
        let mut text = String::with_capacity(original.len() + inserts.values().sum::<usize>());
        let mut table = Vec::with_capacity(inserts.len());
        let (mut from, mut total) = (0, 0);
        for (&at, &count) in inserts {
            text.push_str(&original[from..at]);
            table.push((at + total, at, total + count));
            text.extend(std::iter::repeat_n(' ', count));
            total += count;
            from = at;
        }
        text.push_str(&original[from..]);
        Shadow { text, table }
    }

    /// A document of the shadow as the original text has it: its text
    /// copied out, its positions mapped.
    pub fn restore(&self, doc: Document<'_>) -> Document<'static> {
        let mut root = doc.root.into_owned();
        self.remap(&mut root);
        Document {
            root,
            start: self.original(doc.start),
            end: self.original(doc.end),
        }
    }

    fn remap(&self, node: &mut Node<'_>) {
        node.start = self.original(node.start);
        node.end = self.original(node.end);
        match &mut node.kind {
            Kind::Seq(items) => items.iter_mut().for_each(|n| self.remap(n)),
            Kind::Map(entries) => entries.iter_mut().for_each(|(k, v)| {
                self.remap(k);
                self.remap(v);
            }),
            _ => {}
        }
    }

    /// The original text's byte for a byte of the shadow: one inside added
    /// spaces is the start of the line they were added to.
    pub fn original(&self, byte: usize) -> usize {
        let i = self.table.partition_point(|&(at, ..)| at <= byte);
        let Some(&(at, orig, total)) = i.checked_sub(1).map(|i| &self.table[i]) else {
            return byte;
        };
        let count = total - i.checked_sub(2).map_or(0, |j| self.table[j].2);
        if byte < at + count { orig } else { byte - total }
    }
}

/// What one parse of the events found.
#[derive(Debug, Default)]
struct Probe {
    /// Where it stopped: (byte, its line).
    error: Option<(usize, usize)>,
    /// At the error: the start of the outermost flow collection open.
    open_flow: Option<usize>,
    /// Multi-line flow collections and quoted scalars that opened in block
    /// context, in order: (start, byte after the closing character).
    spans: Vec<(usize, usize)>,
}

/// The events of `text`, up to its end or its first error.
fn probe(text: &str) -> Probe {
    let offsets = Offsets::new(text, 0);
    let mut parser = Parser::new_from_str(text);
    let mut out = Probe::default();
    // Per open collection, whether it is flow; how many of them are; the
    // outermost flow's start.
    let (mut stack, mut flows, mut outer) = (Vec::<bool>::new(), 0usize, 0);
    let multi_line = |(s, e): (usize, usize)| text.get(s..e).is_some_and(|t| t.contains('\n'));
    while let Some(next) = parser.next_event() {
        let (event, span) = match next {
            Ok(e) => e,
            Err(e) => {
                out.error = Some((offsets.byte(e.marker()), e.marker().line()));
                out.open_flow = (flows > 0).then_some(outer);
                break;
            }
        };
        let start = offsets.byte(&span.start);
        match event {
            Event::SequenceStart(..) | Event::MappingStart(..) => {
                let flow = text[start..].starts_with(['[', '{']);
                if flow && flows == 0 {
                    outer = start;
                }
                flows += usize::from(flow);
                stack.push(flow);
            }
            // The guard pops every end; a flow one is counted off.
            Event::SequenceEnd | Event::MappingEnd if stack.pop() == Some(true) => {
                flows -= 1;
                let span = (outer, offsets.byte(&span.end));
                if flows == 0 && multi_line(span) {
                    out.spans.push(span);
                }
            }
            Event::Scalar(_, ScalarStyle::SingleQuoted | ScalarStyle::DoubleQuoted, ..) if flows == 0 => {
                if let Some(end) = quoted_end(text.as_bytes(), start)
                    && multi_line((start, end))
                {
                    out.spans.push((start, end));
                }
            }
            _ => {}
        }
    }
    out
}

/// The byte after the quoted scalar opening at `at` (`"` or `'`), if it
/// closes.
fn quoted_end(b: &[u8], at: usize) -> Option<usize> {
    let quote = *b.get(at)?;
    let mut i = at + 1;
    while i < b.len() {
        match (quote, b[i]) {
            (b'"', b'\\') => i += 1,
            (b'\'', b'\'') if b.get(i + 1) == Some(&b'\'') => i += 1,
            (q, c) if q == c => return Some(i + 1),
            _ => {}
        }
        i += 1;
    }
    None
}

/// The byte after the flow collection or quoted scalar opening at `at`:
/// brackets counted, quoted scalars and comments skipped. A quote opens a
/// scalar only where a token starts (after a bracket, `,`, `:`, `?` or at
/// the opening); elsewhere it is part of a plain scalar.
fn construct_end(text: &str, at: usize) -> Option<usize> {
    let b = text.as_bytes();
    let (mut depth, mut i, mut token) = (0usize, at, true);
    while i < b.len() {
        match b[i] {
            b'"' | b'\'' if token => {
                i = quoted_end(b, i)?;
                if depth == 0 {
                    return Some(i);
                }
                token = false;
                continue;
            }
            b'[' | b'{' => (depth, token) = (depth + 1, true),
            b']' | b'}' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i + 1);
                }
                token = false;
            }
            b'#' if i > at && matches!(b[i - 1], b' ' | b'\t' | b'\n' | b'\r') => {
                i = text[i..].find('\n').map_or(b.len(), |n| i + n);
                continue;
            }
            b',' | b':' | b'?' => token = true,
            b' ' | b'\t' | b'\n' | b'\r' => {}
            _ => token = false,
        }
        if depth == 0 {
            return None;
        }
        i += 1;
    }
    None
}

/// Where the construct the parse stopped in opens: the outermost flow
/// collection open, else a quoted scalar at the error or the last one
/// opening on the error's line or the line before.
fn opener(text: &str, probe: &Probe) -> Option<usize> {
    if let Some(at) = probe.open_flow {
        return Some(at);
    }
    let (at, _) = probe.error?;
    let b = text.as_bytes();
    if matches!(b.get(at), Some(b'"' | b'\'')) {
        return Some(at);
    }
    let line = text[..at].rfind('\n').map_or(0, |n| n + 1);
    let from = text[..line.saturating_sub(1)].rfind('\n').map_or(0, |n| n + 1);
    (from..at)
        .rev()
        .find(|&i| matches!(b[i], b'"' | b'\'') && quoted_end(b, i).is_none_or(|end| end > at))
}

/// The spaces to add, (line start, count), so that each non-empty line
/// after the first of the construct `at..end` is indented past the column
/// where it opens.
fn paddings(text: &str, at: usize, end: usize) -> Vec<(usize, usize)> {
    let line = text[..at].rfind('\n').map_or(0, |n| n + 1);
    let need = text[line..at].chars().count() + 1;
    let mut out = Vec::new();
    for (n, _) in text[at..end].match_indices('\n') {
        let start = at + n + 1;
        if start >= end {
            break;
        }
        let indent = text[start..].bytes().take_while(|&c| c == b' ').count();
        let empty = matches!(text.as_bytes().get(start + indent), None | Some(b'\n' | b'\r'));
        if indent < need && !empty {
            out.push((start, need - indent));
        }
    }
    out
}

/// Whether every byte of `at` lies strictly inside one of `spans` (sorted,
/// disjoint).
fn covered(spans: &[(usize, usize)], at: &[usize]) -> bool {
    at.iter().all(|&p| {
        let i = spans.partition_point(|&(s, _)| s < p);
        i > 0 && p < spans[i - 1].1
    })
}

/// The shadow of `text` in which the constructs that stopped its strict
/// parse read as PyYAML reads them, if there were any and at least one
/// could be relaxed; None otherwise (the strict parse stands).
pub fn relax(text: &str) -> Option<Shadow> {
    let mut inserts = BTreeMap::new();
    let mut shadow = Shadow::new(text, &inserts);
    let mut last = probe(text);
    for _ in 0..MAX_ROUNDS {
        if last.error.is_none() {
            break;
        }
        let Some(open) = opener(&shadow.text, &last) else { break };
        let Some(end) = construct_end(&shadow.text, open) else {
            break;
        };
        let pads = paddings(&shadow.text, open, end);
        if pads.is_empty() {
            break;
        }
        let mut next = inserts.clone();
        for &(line, count) in &pads {
            *next.entry(shadow.original(line)).or_insert(0) += count;
        }
        let candidate = Shadow::new(text, &next);
        let found = probe(&candidate.text);
        let padded: Vec<usize> = pads
            .iter()
            .map(|&(l, _)| candidate_line(&candidate, shadow.original(l)))
            .collect();
        if !covered(&found.spans, &padded) {
            break;
        }
        (inserts, shadow, last) = (next, candidate, found);
    }
    (!inserts.is_empty()).then_some(shadow)
}

/// Where the line that starts at byte `original` of the text starts in the
/// shadow (before any spaces added to it).
fn candidate_line(shadow: &Shadow, original: usize) -> usize {
    let i = shadow.table.partition_point(|&(_, orig, _)| orig < original);
    let before = i.checked_sub(1).map_or(0, |j| shadow.table[j].2);
    original + before
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::yaml::tree::parse;

    /// The documents of `text` as JSON, failing on a parse error.
    fn read(text: &str) -> Value {
        let (docs, error) = parse(text);
        assert!(error.is_none(), "{text:?}: {error:?}");
        Value::Array(docs.iter().map(|d| d.root.to_json()).collect())
    }

    /// Each input as PyYAML 6 reads it (yaml.safe_load_all, as printed by
    /// json.dumps), which saphyr alone refuses.
    #[test]
    fn constructs_not_indented_past_their_key_read_as_pyyaml_reads_them() {
        let cases: &[(&str, Value)] = &[
            (
                "a:\n  args: [\"\n  x &&\n  y\n  \"]\n  b: 1\n",
                json!([{"a": {"args": [" x && y "], "b": 1}}]),
            ),
            (
                "flags: [\n  \"--v\"  # c\n]\nb: 1\n",
                json!([{"flags": ["--v"], "b": 1}]),
            ),
            ("a:\n  b: \"x\n  y\"\n  c: 2\n", json!([{"a": {"b": "x y", "c": 2}}])),
            ("a:\n  b: 'it''s\n  z'\n", json!([{"a": {"b": "it's z"}}])),
            (
                "a:\n  b: [\"é\n  ü\"]\n  c: d\n",
                json!([{"a": {"b": ["é ü"], "c": "d"}}]),
            ),
            (
                "a:\n  b: [x,\n  z]\n---\nc:\n  d: {e: 1,\n  f: \"g\n  h\"}\n",
                json!([{"a": {"b": ["x", "z"]}}, {"c": {"d": {"e": 1, "f": "g h"}}}]),
            ),
            (
                "- args: [\"\n  x\n  \"]\n  c: 1\n",
                json!([[{"args": [" x "], "c": 1}]]),
            ),
            ("a:\n  b: [it's,\n  c # d\n  ]\n", json!([{"a": {"b": ["it's", "c"]}}])),
            ("a:\n  b: \"x\\\n  y\"\n", json!([{"a": {"b": "xy"}}])),
            ("a:\n  b: [\"x\n\n  y\"]\n", json!([{"a": {"b": ["x\ny"]}}])),
        ];
        for (text, want) in cases {
            assert!(
                relax(text).is_some(),
                "strict saphyr read {text:?}: the case tests nothing"
            );
            assert_eq!(read(text), *want, "{text:?}");
        }
    }

    /// Positions come back in the original text: each key and value starts
    /// where its text is, after the padded lines too, multibyte text included.
    #[test]
    fn positions_map_back_to_the_original_text() {
        let text = "a:\n  b: [\"é\n  ü\"]\n  c: d\n  e: [\n  1]\nf: g\n";
        let (docs, error) = parse(text);
        assert!(error.is_none());
        let Kind::Map(top) = &docs[0].root.kind else { panic!() };
        let Kind::Map(inner) = &top[0].1.kind else { panic!() };
        let starts: Vec<&str> = inner
            .iter()
            .flat_map(|(k, v)| [&text[k.start..], &text[v.start..]])
            .collect();
        assert!(
            starts[0].starts_with("b: ") && starts[1].starts_with("[\"é"),
            "{starts:?}"
        );
        assert!(starts[2].starts_with("c: d") && starts[3].starts_with("d\n"));
        assert!(starts[4].starts_with("e: [") && starts[5].starts_with("[\n  1]"));
        assert_eq!(&text[inner[0].1.start..inner[0].1.end], "[\"é\n  ü\"]");
        assert_eq!(&text[inner[2].1.start..inner[2].1.end], "[\n  1]");
        // The inner mapping ends where `f` starts, as an edit after it needs.
        assert!(text[top[0].1.end..].starts_with("f: g"));
        assert!(text[top[1].0.start..].starts_with("f: g"));
        assert_eq!(docs[0].end, text.len());
    }

    #[test]
    fn the_table_maps_shadow_bytes_to_original_ones() {
        let mut inserts = BTreeMap::new();
        inserts.insert(2, 3);
        inserts.insert(5, 1);
        let shadow = Shadow::new("abcdefg", &inserts);
        assert_eq!(shadow.text, "ab   cde fg");
        let back: Vec<usize> = (0..=shadow.text.len()).map(|b| shadow.original(b)).collect();
        assert_eq!(back, [0, 1, 2, 2, 2, 2, 3, 4, 5, 5, 6, 7]);
        assert_eq!(candidate_line(&shadow, 2), 2);
        assert_eq!(candidate_line(&shadow, 5), 8);
    }

    #[test]
    fn a_construct_ends_at_its_closing_character() {
        fn end(t: &str) -> Option<&str> {
            construct_end(t, 0).map(|e| &t[..e])
        }
        assert_eq!(
            end("[a, \"]\", 'b''c]', # ]\n [x]] tail"),
            Some("[a, \"]\", 'b''c]', # ]\n [x]]")
        );
        assert_eq!(end("[it's, b] c"), Some("[it's, b]"));
        assert_eq!(end("{a: \"x\\\"]\"} c"), Some("{a: \"x\\\"]\"}"));
        assert_eq!(end("\"a\nb\" c"), Some("\"a\nb\""));
        assert_eq!(end("[a, b"), None);
        assert_eq!(end("]"), None);
        assert_eq!(end("x"), None);
    }

    #[test]
    fn paddings_indent_each_line_with_text_past_the_opening_column() {
        let text = "k:\n  a: [\"\n  x\n\n      y\n  \"]\nz: 1\n";
        let at = text.find('[').unwrap();
        let end = construct_end(text, at).unwrap();
        let pads: Vec<(&str, usize)> = paddings(text, at, end)
            .into_iter()
            .map(|(l, n)| (&text[l..l + 3], n))
            .collect();
        // `[` is at column 5: lines need 6 spaces; the empty line and the
        // one already past are left; `z` is after the construct.
        assert_eq!(pads, [("  x", 4), ("  \"", 4)]);
    }

    /// A construct never closed keeps saphyr's error and line; past one
    /// relaxed, the next error is the one reported, at its own line (5).
    #[test]
    fn what_cannot_be_relaxed_keeps_the_strict_error_and_its_line() {
        for (text, line) in [
            ("a:\n  b: [x,\n  y\n", 3),
            ("a:\n  b: \"x\n  y\n", 2),
            ("a: 1\n b: 2\n", 2),
            ("a:\n  b: [x,\n  y]\n  c: d\n e: f\n", 5),
        ] {
            let (_, error) = parse(text);
            let error = error.unwrap_or_else(|| panic!("{text:?} parsed"));
            assert_eq!(error.line, line, "{text:?}: {error:?}");
        }
    }

    #[test]
    fn ordinary_input_is_never_shadowed() {
        assert!(relax("a:\n  b: [x,\n    y]\n").is_none());
        assert!(relax("a: [x\n").is_none());
        assert!(relax("a: 1\n b: 2\n").is_none());
    }

    /// A padded line must lie inside the construct in the new parse: one
    /// that would turn block text into flow text is never kept.
    #[test]
    fn only_lines_inside_a_construct_count_as_covered() {
        assert!(covered(&[(2, 10), (20, 30)], &[3, 9, 21]));
        assert!(!covered(&[(2, 10), (20, 30)], &[10]));
        assert!(!covered(&[(2, 10)], &[2]));
        assert!(!covered(&[], &[1]));
    }

    /// The edit's check reads an edited document as the parse does.
    #[test]
    fn reads_as_reads_the_relaxed_text() {
        let text = "a:\n  args: [\"\n  x\n  \"]\n  b: 1\n";
        let no_stand_in = |_: &Value| None;
        assert!(crate::yaml::tree::reads_as(
            text,
            &json!({"a": {"args": [" x "], "b": 1}}),
            false,
            &no_stand_in
        ));
        assert!(!crate::yaml::tree::reads_as(
            text,
            &json!({"a": {"args": ["x"], "b": 1}}),
            false,
            &no_stand_in
        ));
    }

    /// The documents before the construct came from the strict parse and
    /// are not handed over a second time.
    #[test]
    fn documents_before_the_construct_are_read_once() {
        let text = "a: 1\n---\nb: 2\n---\nc:\n  d: [x,\n  z]\n---\ne: 3\n";
        assert_eq!(
            read(text),
            json!([{"a": 1}, {"b": 2}, {"c": {"d": ["x", "z"]}}, {"e": 3}])
        );
        let (docs, _) = parse(text);
        let starts: Vec<&str> = docs.iter().map(|d| &text[d.start..d.end]).collect();
        assert_eq!(
            starts,
            ["a: 1\n", "---\nb: 2\n", "---\nc:\n  d: [x,\n  z]\n", "---\ne: 3\n"]
        );
    }

    /// Each construct costs a parse of the stream: past MAX_ROUNDS of them
    /// the next stays refused, at its line.
    #[test]
    fn relaxing_stops_after_max_rounds_constructs() {
        let stream = |n: usize| vec!["c:\n  d: [x,\n  z]\n"; n].join("---\n");
        let (docs, error) = parse(&stream(MAX_ROUNDS));
        assert!(error.is_none(), "{error:?}");
        assert_eq!(docs.len(), MAX_ROUNDS);
        let (docs, error) = parse(&stream(MAX_ROUNDS + 1));
        assert_eq!(docs.len(), MAX_ROUNDS);
        assert_eq!(error.map(|e| e.line), Some(4 * MAX_ROUNDS + 3));
    }

    /// A quote inside a plain scalar opens nothing: padding the line after
    /// it would make that line part of the plain scalar (`b 'c - d'`), which
    /// PyYAML refuses as saphyr does. The padded line is in no construct of
    /// the new parse, so the round is dropped and the error stands.
    #[test]
    fn a_quote_inside_a_plain_scalar_is_no_construct_to_relax() {
        for text in ["a: b 'c\n- d'\n", "a: b \"c\n- d\"\n"] {
            assert!(relax(text).is_none(), "{text:?}");
            let (_, error) = parse(text);
            assert_eq!(error.map(|e| e.line), Some(2), "{text:?}");
        }
    }
}
