//! A YAML stream as a tree of nodes that remember where they are in the text.
//!
//! The tree is built from saphyr-parser's events and is read-only: it exists
//! so that `edit` can find byte positions (where a sequence's first `-` is,
//! where a block mapping's last line ends) and so that the transform can see
//! the same document as JSON. Nothing is ever re-serialised from it.
//!
//! saphyr's markers count characters, not bytes, and a scalar's end marker is
//! not always where its text ends (a quoted scalar's runs on to the next
//! token), so positions are taken from line and column, and only starts are
//! trusted; a block collection's end is the start of the token after it.
//! Anything that could make an edit ambiguous (an anchor, an alias, a tag, a
//! merge key) is recorded on the node so the caller can leave the document
//! alone.

use saphyr_parser::{Event, Marker, Parser, ScalarStyle};
use serde_json::{Map, Value};

#[derive(Debug)]
pub enum Kind {
    Scalar { text: String, style: ScalarStyle },
    Seq(Vec<Node>),
    Map(Vec<(Node, Node)>),
    Alias,
}

#[derive(Debug)]
pub struct Node {
    pub kind: Kind,
    /// Byte where the node starts: a scalar's first character, a block
    /// collection's first token, a flow collection's bracket.
    pub start: usize,
    /// A flow collection: the byte after its closing bracket. A block
    /// collection: where the next token starts. A scalar: saphyr's end.
    pub end: usize,
    /// The column of `start`, in characters.
    pub col: usize,
    pub flow: bool,
    /// An anchor, a tag, an alias or a merge key here or beneath.
    pub decorated: bool,
}

/// One document of a stream: its root and the bytes it spans.
#[derive(Debug)]
pub struct Document {
    pub root: Node,
    /// Where the document's text starts (its `---`, or its first token).
    pub start: usize,
    /// Where the next document's text starts, or the end of the stream.
    pub end: usize,
}

/// Where a stream stopped parsing, if it did not parse to its end.
#[derive(Debug)]
pub struct ParseError {
    pub line: usize,
    pub message: String,
}

/// Byte offsets from saphyr's line and column markers.
struct Lines<'a> {
    text: &'a str,
    starts: Vec<usize>,
    /// Per line: whether it is all ASCII, where a column is a byte offset.
    ascii: Vec<bool>,
}

impl<'a> Lines<'a> {
    fn new(text: &'a str) -> Self {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        let ascii = (0..starts.len())
            .map(|i| text[starts[i]..starts.get(i + 1).copied().unwrap_or(text.len())].is_ascii())
            .collect();
        Lines { text, starts, ascii }
    }

    /// A marker's byte offset (saphyr counts columns in characters). Each
    /// call costs O(1) on an ASCII line: a JSON document on one line has
    /// many tokens, and a scan per token made it quadratic.
    fn byte(&self, m: &Marker) -> usize {
        let index = m.line().saturating_sub(1);
        let Some(&line_start) = self.starts.get(index) else {
            return self.text.len();
        };
        let line_end = self.starts.get(index + 1).copied().unwrap_or(self.text.len());
        if self.ascii[index] {
            return (line_start + m.col()).min(line_end);
        }
        let line = &self.text[line_start..line_end];
        line_start + line.char_indices().nth(m.col()).map_or(line.len(), |(i, _)| i)
    }
}

/// Parses `text` and hands each document to `each` as soon as it ends, so
/// only one document's tree exists at a time. A document's `end` is where
/// its end was found (the next `---`, or the stream's end). Returns the
/// syntax error that stopped the stream, if one did.
pub fn parse_each(text: &str, mut each: impl FnMut(Document)) -> Option<ParseError> {
    let lines = Lines::new(text);
    let mut parser = Parser::new_from_str(text);
    let mut stack: Vec<(Node, Option<Node>)> = Vec::new();
    let mut root: Option<Node> = None;
    let mut doc_start = 0;
    let mut error = None;
    loop {
        let (event, span) = match parser.next_event() {
            None => break,
            Some(Ok(e)) => e,
            Some(Err(e)) => {
                error = Some(ParseError {
                    line: e.marker().line(),
                    message: e.info().to_string(),
                });
                break;
            }
        };
        let start = lines.byte(&span.start);
        let col = span.start.col();
        let node = match event {
            Event::StreamStart | Event::Nothing => continue,
            Event::StreamEnd => break,
            Event::DocumentStart(_) => {
                doc_start = start;
                continue;
            }
            Event::DocumentEnd => {
                if let Some(root) = root.take() {
                    each(Document {
                        root,
                        start: doc_start,
                        end: start,
                    });
                }
                continue;
            }
            Event::Alias(_) => Node {
                kind: Kind::Alias,
                start,
                end: lines.byte(&span.end),
                col,
                flow: false,
                decorated: true,
            },
            Event::Scalar(text, style, anchor, tag) => Node {
                kind: Kind::Scalar {
                    text: text.into_owned(),
                    style,
                },
                start,
                end: lines.byte(&span.end),
                col,
                flow: false,
                decorated: anchor != 0 || tag.is_some(),
            },
            Event::SequenceStart(anchor, ref tag) | Event::MappingStart(anchor, ref tag) => {
                let seq = matches!(event, Event::SequenceStart(..));
                let flow = text[start..].starts_with(if seq { '[' } else { '{' });
                stack.push((
                    Node {
                        kind: if seq {
                            Kind::Seq(Vec::new())
                        } else {
                            Kind::Map(Vec::new())
                        },
                        start,
                        end: start,
                        col,
                        flow,
                        decorated: anchor != 0 || tag.is_some(),
                    },
                    None,
                ));
                continue;
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let Some((mut node, _)) = stack.pop() else { continue };
                node.end = if node.flow { lines.byte(&span.end) } else { start };
                node
            }
        };
        // Attach the finished node to its parent, or make it the root.
        match stack.last_mut() {
            None => root = Some(node),
            Some((parent, pending_key)) => {
                parent.decorated |= node.decorated;
                match &mut parent.kind {
                    Kind::Seq(items) => items.push(node),
                    Kind::Map(entries) => match pending_key.take() {
                        None => {
                            if matches!(&node.kind, Kind::Scalar { text, style: ScalarStyle::Plain } if text == "<<") {
                                parent.decorated = true;
                            }
                            *pending_key = Some(node);
                        }
                        Some(key) => entries.push((key, node)),
                    },
                    _ => {}
                }
            }
        }
    }
    // A document with no end event (the stream's last, implicit).
    if let Some(root) = root.take().filter(|_| error.is_none()) {
        each(Document {
            root,
            start: doc_start,
            end: text.len(),
        });
    }
    error
}

/// Parses every document of `text`. Documents before a syntax error are
/// returned with the error; each runs until the next one starts (comments
/// between two documents go with the first), the first from the stream's
/// start.
pub fn parse(text: &str) -> (Vec<Document>, Option<ParseError>) {
    let mut docs: Vec<Document> = Vec::new();
    let error = parse_each(text, |d| docs.push(d));
    for i in 1..docs.len() {
        docs[i - 1].end = docs[i].start;
    }
    if let Some(first) = docs.first_mut() {
        first.start = 0;
    }
    if let Some(last) = docs.last_mut()
        && error.is_none()
    {
        last.end = text.len();
    }
    (docs, error)
}

impl Node {
    /// The node at `path` beneath this one.
    pub fn at(&self, path: &[crate::patch::Seg]) -> Option<&Node> {
        path.iter().try_fold(self, |node, seg| match seg {
            crate::patch::Seg::Key(k) => node.get(k),
            crate::patch::Seg::Index(i) => node.index(*i),
        })
    }

    pub fn get(&self, key: &str) -> Option<&Node> {
        match &self.kind {
            Kind::Map(entries) => entries
                .iter()
                .find(|(k, _)| matches!(&k.kind, Kind::Scalar { text, .. } if text == key))
                .map(|(_, v)| v),
            _ => None,
        }
    }

    pub fn index(&self, i: usize) -> Option<&Node> {
        match &self.kind {
            Kind::Seq(items) => items.get(i),
            _ => None,
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(&self.kind, Kind::Scalar { text, style: ScalarStyle::Plain } if is_null(text))
    }

    /// The document as JSON, with plain scalars resolved by YAML 1.2's core
    /// schema (null, booleans, numbers) and everything else a string.
    pub fn to_json(&self) -> Value {
        match &self.kind {
            Kind::Alias => Value::Null,
            Kind::Scalar { text, style } => {
                if *style == ScalarStyle::Plain {
                    plain(text)
                } else {
                    Value::String(text.clone())
                }
            }
            Kind::Seq(items) => Value::Array(items.iter().map(Node::to_json).collect()),
            Kind::Map(entries) => {
                let mut map = Map::new();
                for (k, v) in entries {
                    let key = match &k.kind {
                        Kind::Scalar { text, .. } => text.clone(),
                        _ => k.to_json().to_string(),
                    };
                    map.insert(key, v.to_json());
                }
                Value::Object(map)
            }
        }
    }
}

fn is_null(text: &str) -> bool {
    matches!(text, "" | "~" | "null" | "Null" | "NULL")
}

fn plain(text: &str) -> Value {
    if is_null(text) {
        return Value::Null;
    }
    match text {
        "true" | "True" | "TRUE" => return Value::Bool(true),
        "false" | "False" | "FALSE" => return Value::Bool(false),
        _ => {}
    }
    let digits = text.strip_prefix(['-', '+']).unwrap_or(text);
    if !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && let Ok(n) = text.trim_start_matches('+').parse::<i64>()
    {
        return Value::from(n);
    }
    if let Some(hex) = text.strip_prefix("0x")
        && let Ok(n) = i64::from_str_radix(hex, 16)
    {
        return Value::from(n);
    }
    if let Some(oct) = text.strip_prefix("0o")
        && let Ok(n) = i64::from_str_radix(oct, 8)
    {
        return Value::from(n);
    }
    let float_like = text.bytes().any(|b| b.is_ascii_digit())
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'-' | b'+'));
    if float_like
        && let Ok(f) = text.parse::<f64>()
        && let Some(n) = serde_json::Number::from_f64(f)
    {
        return Value::Number(n);
    }
    Value::String(text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_are_bytes_even_after_multibyte_text() {
        let text = "a: \"é\"\nb:\n  - x\n";
        let (docs, err) = parse(text);
        assert!(err.is_none());
        let b = docs[0].root.get("b").unwrap();
        assert_eq!(&text[b.start..b.start + 1], "-");
        assert_eq!(&text[b.index(0).unwrap().start..][..1], "x");
    }

    #[test]
    fn documents_split_at_their_markers() {
        let text = "a: 1\n---\nb: 2\n# tail\n";
        let (docs, _) = parse(text);
        assert_eq!(docs.len(), 2);
        assert_eq!(&text[docs[0].start..docs[0].end], "a: 1\n");
        assert_eq!(&text[docs[1].start..docs[1].end], "---\nb: 2\n# tail\n");
    }

    #[test]
    fn anchors_tags_and_merge_keys_mark_their_ancestors() {
        for text in [
            "a:\n  b: &x 1\n",
            "a:\n  b: !!str 1\n",
            "a:\n  <<: {c: 1}\n",
            "x: &y 1\na:\n  b: *y\n",
        ] {
            let (docs, _) = parse(text);
            assert!(docs[0].root.get("a").unwrap().decorated, "{text}");
        }
        let (docs, _) = parse("a:\n  b: 1\n");
        assert!(!docs[0].root.decorated);
    }

    #[test]
    fn plain_scalars_resolve_like_yaml_1_2() {
        let (docs, _) = parse("[1, -2, 1.5, true, ~, '1', x, 0x10, 1e3, 1.2.3]");
        assert_eq!(
            docs[0].root.to_json(),
            serde_json::json!([1, -2, 1.5, true, null, "1", "x", 16, 1000.0, "1.2.3"])
        );
    }
}
