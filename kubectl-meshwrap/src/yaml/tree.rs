//! A YAML stream as a tree of nodes that remember where they are in the text.
//!
//! The tree is built from saphyr-parser's events and is read-only: it exists
//! so that `edit` can find byte positions (where a sequence's first `-` is,
//! where a block mapping's last line ends) and so that the transform can see
//! the same document as JSON. Nothing is ever re-serialised from it.
//!
//! saphyr's markers count characters, not bytes, and a scalar's end marker is
//! not always where its text ends (a quoted scalar's runs on to the next
//! token), so positions are mapped from character index to byte by a cursor
//! that moves with the parse ([`Offsets`]: linear per document), and only
//! starts are trusted; a block collection's end is the start of the token
//! after it.
//! Anything that could make an edit ambiguous (an anchor, an alias, a tag, a
//! merge key) is recorded on the node so the caller can leave the document
//! alone.
//!
//! Where saphyr stops at a flow collection or quoted scalar whose lines are
//! not indented past its key (which PyYAML and kubectl read), the rest of
//! the stream is read from [`relax`]'s shadow copy, with positions mapped
//! back to this text; the check of an edit ([`reads_as`]) reads the same
//! way.

use std::borrow::Cow;

use saphyr_parser::{Event, Input, Marker, Parser, ScalarStyle};

use super::relax;
use serde_json::{Map, Value};

/// A node's content. A scalar's text is borrowed from the input unless the
/// parser had to unescape or fold it: most of a document costs no copy.
#[derive(Debug)]
pub enum Kind<'a> {
    Scalar { text: Cow<'a, str>, style: ScalarStyle },
    Seq(Vec<Node<'a>>),
    Map(Vec<(Node<'a>, Node<'a>)>),
    Alias,
}

#[derive(Debug)]
pub struct Node<'a> {
    pub kind: Kind<'a>,
    /// Byte where the node starts: a scalar's first character, a block
    /// collection's first token, a flow collection's bracket.
    pub start: usize,
    /// A flow collection: the byte after its closing bracket. A block
    /// collection: where the next token starts. A scalar: saphyr's end.
    pub end: usize,
    pub flow: bool,
    /// An anchor, a tag, an alias or a merge key here or beneath.
    pub decorated: bool,
}

/// One document of a stream: its root and the bytes it spans.
#[derive(Debug)]
pub struct Document<'a> {
    pub root: Node<'a>,
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

/// Byte offsets from saphyr's markers, which count characters, not bytes.
///
/// A cursor remembers the last marker mapped (its character index and byte
/// offset) and walks from there: markers arrive nearly in order, so a whole
/// document costs one pass over its text, whatever its line lengths. (Mapping
/// line and column instead cost a scan of the line per marker: quadratic on
/// one long line holding a non-ASCII character.) An all-ASCII text maps
/// directly.
pub(super) struct Offsets<'a> {
    text: &'a str,
    /// Characters the parser read before `text`.
    skip: usize,
    ascii: bool,
    /// The last marker mapped: (character index, byte offset).
    cursor: std::cell::Cell<(usize, usize)>,
    /// Characters the cursor has stepped over, for the test of its cost.
    #[cfg(test)]
    walked: std::cell::Cell<usize>,
}

impl<'a> Offsets<'a> {
    pub(super) fn new(text: &'a str, skip: usize) -> Self {
        Offsets {
            text,
            skip,
            ascii: text.is_ascii(),
            cursor: std::cell::Cell::new((0, 0)),
            #[cfg(test)]
            walked: std::cell::Cell::new(0),
        }
    }

    /// A marker's byte offset: O(1) on ASCII text, else O(the distance from
    /// the previous marker).
    pub(super) fn byte(&self, m: &Marker) -> usize {
        self.of_char(m.index().saturating_sub(self.skip))
    }

    fn of_char(&self, want: usize) -> usize {
        if self.ascii {
            return want.min(self.text.len());
        }
        let (mut chars, mut byte) = self.cursor.get();
        while chars < want && byte < self.text.len() {
            byte += 1;
            while !self.text.is_char_boundary(byte) {
                byte += 1;
            }
            chars += 1;
        }
        while chars > want && byte > 0 {
            byte -= 1;
            while !self.text.is_char_boundary(byte) {
                byte -= 1;
            }
            chars -= 1;
        }
        #[cfg(test)]
        self.walked.set(self.walked.get() + chars.abs_diff(self.cursor.get().0));
        self.cursor.set((chars, byte));
        byte
    }
}

/// Parses `text` and hands each document to `each` as soon as it ends, so
/// only one document's tree exists at a time. A document's `end` is where
/// its end was found (the next `---`, or the stream's end). Returns the
/// syntax error that stopped the stream, if one did.
/// Where the strict parse stops at a flow collection or quoted scalar whose
/// lines are not indented past its key (which PyYAML and kubectl read), the
/// rest of the stream is read from [`relax`]'s shadow copy, positions mapped
/// back: the documents already handed over are not handed again.
pub fn parse_each<'a>(text: &'a str, mut each: impl FnMut(Document<'a>)) -> Option<ParseError> {
    let mut delivered = 0;
    let error = build(text, Parser::new_from_str(text), 0, |d| {
        delivered += 1;
        each(d)
    })?;
    let Some(shadow) = relax::relax(text) else {
        return Some(error);
    };
    let mut seen = 0;
    build(&shadow.text, Parser::new_from_str(&shadow.text), 0, |d| {
        seen += 1;
        if seen > delivered {
            each(shadow.restore(d))
        }
    })
}

/// A block scalar that ends the input with no line break after its last
/// line reads without one (YAML 1.2.2 8.1.1.2: chomping keeps a final line
/// break only where there is one; PyYAML and kubectl read `|\n  x` as
/// "x"), where saphyr adds one. Without this, the JSON would hold a value
/// the input does not, and an edit that adds a line after the scalar (and
/// so gives it its break) would read back as unchanged.
fn unbroken_at_end<'a>(input: &str, end: usize, value: Cow<'a, str>, style: ScalarStyle) -> Cow<'a, str> {
    if block_scalar_ends_input_unbroken(input, end, style) && value.ends_with('\n') {
        let mut value = value.into_owned();
        value.pop();
        return Cow::Owned(value);
    }
    value
}

/// A block scalar (`|`, `>`) of this `style` ending at byte `end` is the
/// last thing in `input`, with no line break after it: nothing can follow
/// it losslessly (`stream` refuses an edit there).
pub fn block_scalar_ends_input_unbroken(input: &str, end: usize, style: ScalarStyle) -> bool {
    matches!(style, ScalarStyle::Literal | ScalarStyle::Folded)
        && !input.ends_with(['\n', '\r'])
        && input
            .get(end..)
            .is_some_and(|rest| rest.trim_matches([' ', '\t']).is_empty())
}

/// Read before a JSON value: tells saphyr the value cannot be a mapping key
/// (`{...}: x`). Without it saphyr holds every token of a flow collection
/// that starts a line until the collection ends, in case it is one: some 50
/// times the size of a minified JSON List, where the tree is a few times.
const JSON_LEAD: &str = "--- ";

/// [`parse_each`] for one JSON value: `led` is [`lead`]'s value, and
/// positions are in the JSON text after its lead.
pub fn parse_json_each<'a>(led: &'a str, each: impl FnMut(Document<'a>)) -> Option<ParseError> {
    let text = led.strip_prefix(JSON_LEAD).expect("a JSON value behind its lead");
    build(text, Parser::new_from_str(led), JSON_LEAD.len(), each)
}

/// A JSON value behind the text that tells saphyr it is not a key.
pub fn lead(json: &str) -> String {
    format!("{JSON_LEAD}{json}")
}

/// The tree from `parser`'s events over `text`, behind `skip` ASCII
/// characters the parser reads first (and positions leave out).
fn build<'a, I: Input>(
    text: &'a str,
    mut parser: Parser<'a, I>,
    skip: usize,
    mut each: impl FnMut(Document<'a>),
) -> Option<ParseError> {
    let lines = Offsets::new(text, skip);
    let mut stack: Vec<(Node<'a>, Option<Node<'a>>)> = Vec::new();
    let mut root: Option<Node<'a>> = None;
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
                flow: false,
                decorated: true,
            },
            Event::Scalar(value, style, anchor, tag) => {
                let end = lines.byte(&span.end);
                Node {
                    kind: Kind::Scalar {
                        text: unbroken_at_end(text, end, value, style),
                        style,
                    },
                    start,
                    end,
                    flow: false,
                    decorated: anchor != 0 || tag.is_some(),
                }
            }
            Event::SequenceStart(anchor, ref tag) | Event::MappingStart(anchor, ref tag) => {
                let seq = matches!(event, Event::SequenceStart(..));
                stack.push((open(text, start, seq, anchor != 0 || tag.is_some()), None));
                continue;
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let Some((node, _)) = stack.pop() else { continue };
                let end = if node.flow { lines.byte(&span.end) } else { start };
                close(node, end)
            }
        };
        match stack.last_mut() {
            None => root = Some(node),
            Some((parent, pending_key)) => attach(parent, pending_key, node),
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

/// A collection starting at `start` (a sequence when `seq`), empty so far.
fn open<'a>(text: &str, start: usize, seq: bool, decorated: bool) -> Node<'a> {
    Node {
        kind: if seq {
            Kind::Seq(Vec::new())
        } else {
            Kind::Map(Vec::new())
        },
        start,
        end: start,
        flow: text[start..].starts_with(if seq { '[' } else { '{' }),
        decorated,
    }
}

/// A finished collection, ending at `end`, its spare room given back (a
/// document's tree stays near its size).
fn close(mut node: Node<'_>, end: usize) -> Node<'_> {
    node.end = end;
    match &mut node.kind {
        Kind::Seq(items) => items.shrink_to_fit(),
        Kind::Map(entries) => entries.shrink_to_fit(),
        _ => {}
    }
    node
}

/// Attaches a finished node to its parent: an item, a key (then waiting in
/// `pending_key` for its value), or a value.
fn attach<'a>(parent: &mut Node<'a>, pending_key: &mut Option<Node<'a>>, node: Node<'a>) {
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

/// Parses every document of `text`. Documents before a syntax error are
/// returned with the error; each runs until the next one starts (comments
/// between two documents go with the first), the first from the stream's
/// start.
/// The documents own their text (a caller may drop `text`); the stream's
/// path, [`parse_each`], borrows it instead.
pub fn parse(text: &str) -> (Vec<Document<'static>>, Option<ParseError>) {
    let mut docs: Vec<Document<'static>> = Vec::new();
    let error = parse_each(text, |d| {
        docs.push(Document {
            root: d.root.into_owned(),
            start: d.start,
            end: d.end,
        })
    });
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

/// Whether `text` is exactly one document whose JSON (as [`Node::to_json`]
/// reads it) is `expected`. Checked against the parser's events as they
/// come, with no tree and no second JSON: the check of an edit costs one
/// parse, not another copy of the document. `json`: `text` is one JSON
/// value (read as [`parse_json_each`] reads it). `stand_in`: for a value of
/// `expected` that stands in for another (by address), that other, made when
/// it is reached and dropped after (a List's items kept compact).
pub fn reads_as(text: &str, expected: &Value, json: bool, stand_in: &dyn Fn(&Value) -> Option<Value>) -> bool {
    if json {
        return Matcher::run(Parser::new_from_str(&lead(text)), expected, stand_in);
    }
    // Else as `parse_each` reads it: from the shadow copy if the strict
    // parse stops where relax::relax can read on (checked on a mismatch
    // only, so a document that reads right costs one parse).
    Matcher::run(Parser::new_from_str(text), expected, stand_in)
        || relax::relax(text).is_some_and(|shadow| Matcher::run(Parser::new_from_str(&shadow.text), expected, stand_in))
}

/// Compares the parser's events with a value, node by node.
struct Matcher<'a, 's, I: Input> {
    parser: Parser<'a, I>,
    stand_in: &'s dyn Fn(&Value) -> Option<Value>,
}

impl<'a, I: Input> Matcher<'a, '_, I> {
    fn run(parser: Parser<'a, I>, expected: &Value, stand_in: &dyn Fn(&Value) -> Option<Value>) -> bool {
        let mut m = Matcher { parser, stand_in };
        let mut documents = 0;
        loop {
            match m.next() {
                None => return false,
                Some(Event::StreamEnd) => return documents == 1,
                Some(Event::StreamStart | Event::DocumentStart(_) | Event::DocumentEnd) => {}
                Some(event) => {
                    documents += 1;
                    if documents > 1 || !m.slot(event, expected) {
                        return false;
                    }
                }
            }
        }
    }

    /// The next event; None on a syntax error or the end.
    fn next(&mut self) -> Option<Event<'a>> {
        loop {
            match self.parser.next_event()? {
                Ok((Event::Nothing, _)) => continue,
                Ok((event, _)) => return Some(event),
                Err(_) => return None,
            }
        }
    }

    /// The node `event` starts must be `want` (or what `want` stands in for).
    fn slot(&mut self, event: Event<'a>, want: &Value) -> bool {
        match (self.stand_in)(want) {
            Some(real) => self.node(event, &real),
            None => self.node(event, want),
        }
    }

    fn node(&mut self, event: Event<'a>, want: &Value) -> bool {
        match (event, want) {
            (Event::Scalar(text, style, ..), _) => *want == scalar_json(&text, style),
            (Event::Alias(_), _) => want.is_null(),
            (Event::SequenceStart(..), Value::Array(items)) => self.items(items),
            (Event::MappingStart(..), Value::Object(map)) => self.entries(map),
            _ => false,
        }
    }

    /// A sequence's items, up to its end: each one, and no more.
    fn items(&mut self, items: &[Value]) -> bool {
        let mut n = 0;
        loop {
            match self.next() {
                Some(Event::SequenceEnd) => return n == items.len(),
                Some(event) if n < items.len() => {
                    if !self.slot(event, &items[n]) {
                        return false;
                    }
                    n += 1;
                }
                _ => return false,
            }
        }
    }

    /// A mapping's entries, up to its end: each key once, each one `map`
    /// holds, with its value.
    fn entries(&mut self, map: &Map<String, Value>) -> bool {
        let mut seen = std::collections::HashSet::new();
        loop {
            let key = match self.next() {
                Some(Event::MappingEnd) => return seen.len() == map.len(),
                Some(Event::Scalar(text, style, ..)) => key_text(&text, style),
                _ => return false,
            };
            let Some(want) = map.get(&key) else { return false };
            if !seen.insert(key) {
                return false;
            }
            let Some(event) = self.next() else { return false };
            if !self.slot(event, want) {
                return false;
            }
        }
    }
}

impl<'a> Node<'a> {
    /// The node with its text copied out of the input.
    pub fn into_owned(self) -> Node<'static> {
        let kind = match self.kind {
            Kind::Scalar { text, style } => Kind::Scalar {
                text: Cow::Owned(text.into_owned()),
                style,
            },
            Kind::Seq(items) => Kind::Seq(items.into_iter().map(Node::into_owned).collect()),
            Kind::Map(entries) => Kind::Map(
                entries
                    .into_iter()
                    .map(|(k, v)| (k.into_owned(), v.into_owned()))
                    .collect(),
            ),
            Kind::Alias => Kind::Alias,
        };
        Node {
            kind,
            start: self.start,
            end: self.end,
            flow: self.flow,
            decorated: self.decorated,
        }
    }

    /// The node at `path` beneath this one.
    pub fn at(&self, path: &[crate::patch::Seg]) -> Option<&Node<'a>> {
        path.iter().try_fold(self, |node, seg| match seg {
            crate::patch::Seg::Key(k) => node.get(k),
            crate::patch::Seg::Index(i) => node.index(*i),
        })
    }

    pub fn get(&self, key: &str) -> Option<&Node<'a>> {
        match &self.kind {
            Kind::Map(entries) => entries
                .iter()
                .find(|(k, _)| matches!(&k.kind, Kind::Scalar { text, .. } if text == key))
                .map(|(_, v)| v),
            _ => None,
        }
    }

    pub fn index(&self, i: usize) -> Option<&Node<'a>> {
        match &self.kind {
            Kind::Seq(items) => items.get(i),
            _ => None,
        }
    }

    /// The first key, depth first, that its mapping holds twice (as
    /// [`Node::to_json`] reads keys).
    pub fn duplicate_key(&self) -> Option<&Node<'a>> {
        match &self.kind {
            Kind::Seq(items) => items.iter().find_map(Node::duplicate_key),
            Kind::Map(entries) => {
                let mut seen = std::collections::HashSet::new();
                for (k, _) in entries {
                    let text = match &k.kind {
                        Kind::Scalar { text, style } => key_text(text, *style),
                        _ => k.to_json().to_string(),
                    };
                    if !seen.insert(text) {
                        return Some(k);
                    }
                }
                entries.iter().find_map(|(_, v)| v.duplicate_key())
            }
            _ => None,
        }
    }

    /// The first mapping key, depth first, that is a collection (`? [a]`,
    /// `{a: 1}: x`): JSON has no such key, and kubectl refuses it.
    pub fn complex_key(&self) -> Option<&Node<'a>> {
        match &self.kind {
            Kind::Seq(items) => items.iter().find_map(Node::complex_key),
            Kind::Map(entries) => entries.iter().find_map(|(k, v)| match k.kind {
                Kind::Seq(_) | Kind::Map(_) => Some(k),
                _ => v.complex_key(),
            }),
            _ => None,
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(&self.kind, Kind::Scalar { text, style: ScalarStyle::Plain } if is_null(text))
    }

    /// The document as JSON, with plain scalars resolved as kubectl reads
    /// them ([`plain`]) and everything else a string.
    pub fn to_json(&self) -> Value {
        match &self.kind {
            Kind::Alias => Value::Null,
            Kind::Scalar { text, style } => scalar_json(text, *style),
            Kind::Seq(items) => Value::Array(items.iter().map(Node::to_json).collect()),
            Kind::Map(entries) => {
                let mut map = Map::with_capacity(entries.len());
                for (k, v) in entries {
                    let key = match &k.kind {
                        Kind::Scalar { text, style } => key_text(text, *style),
                        _ => k.to_json().to_string(),
                    };
                    map.insert(key, v.to_json());
                }
                Value::Object(map)
            }
        }
    }
}

/// The first node beneath `node` (depth first) that reads otherwise than
/// `want`: an item or a key it has and `want` lacks, a value that differs,
/// or the collection that lacks what `want` has. `at` (a JSON pointer to
/// `node`) is extended to it. None when `node` reads as `want`. For a
/// refusal's message: each level costs its subtree's JSON.
pub fn first_difference<'n, 'a>(node: &'n Node<'a>, want: &Value, at: &mut String) -> Option<&'n Node<'a>> {
    if node.to_json() == *want {
        return None;
    }
    let deeper = match (&node.kind, want) {
        (Kind::Map(entries), Value::Object(map)) => entries.iter().find_map(|(k, v)| {
            let key = match &k.kind {
                Kind::Scalar { text, style } => key_text(text, *style),
                _ => k.to_json().to_string(),
            };
            let pointer = format!("{at}/{}", key.replace('~', "~0").replace('/', "~1"));
            match map.get(&key) {
                None => Some((k, pointer)),
                Some(w) => {
                    let mut inner = pointer;
                    first_difference(v, w, &mut inner).map(|n| (n, inner))
                }
            }
        }),
        (Kind::Seq(items), Value::Array(wants)) => items.iter().zip(wants).enumerate().find_map(|(i, (n, w))| {
            let mut inner = format!("{at}/{i}");
            first_difference(n, w, &mut inner).map(|n| (n, inner))
        }),
        _ => None,
    };
    match deeper {
        Some((n, pointer)) => {
            *at = pointer;
            Some(n)
        }
        None => Some(node),
    }
}

fn is_null(text: &str) -> bool {
    matches!(text, "" | "~" | "null" | "Null" | "NULL")
}

/// A scalar's JSON: a plain one resolved ([`plain`]), any other a string.
fn scalar_json(text: &str, style: ScalarStyle) -> Value {
    if style == ScalarStyle::Plain {
        plain(text)
    } else {
        Value::String(text.to_string())
    }
}

/// A mapping key as kubectl's JSON has it: a plain boolean key is written
/// `true` or `false` (sigs.k8s.io/yaml formats a YAML 1.1 boolean key so);
/// anything else is its text.
fn key_text(text: &str, style: ScalarStyle) -> String {
    match (style, yaml11_bool(text)) {
        (ScalarStyle::Plain, Some(b)) => b.to_string(),
        _ => text.to_string(),
    }
}

/// The booleans of YAML 1.1 as go-yaml v2 resolves them (its resolve
/// table), which is what kubectl reads through sigs.k8s.io/yaml: exactly
/// these spellings, no other case mix (`yEs` stays a string).
fn yaml11_bool(text: &str) -> Option<bool> {
    match text {
        "y" | "Y" | "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => Some(true),
        "n" | "N" | "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => Some(false),
        _ => None,
    }
}

/// A plain scalar as kubectl reads it: null, YAML 1.1's booleans
/// (`yes`/`no`/`on`/`off`/`y`/`n` too), integers, floats, else a string.
fn plain(text: &str) -> Value {
    if is_null(text) {
        return Value::Null;
    }
    if let Some(b) = yaml11_bool(text) {
        return Value::Bool(b);
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

    #[test]
    fn a_block_scalar_at_the_end_without_a_line_break_reads_without_one_as_pyyaml_does() {
        let value = |text: &str| {
            let (docs, error) = parse(text);
            assert!(error.is_none(), "{text:?}");
            docs[0].root.to_json()["a"].clone()
        };
        assert_eq!(value("a: |\n  x"), "x");
        assert_eq!(value("a: |\n  x\n"), "x\n");
        assert_eq!(value("a: |+\n  x"), "x");
        assert_eq!(value("a: >\n  x y"), "x y");
        assert_eq!(value("a: |-\n  x"), "x");
        assert_eq!(value("a: |\n  x\nb: 1"), "x\n");
    }
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
    fn plain_scalars_resolve_as_kubectl_reads_them() {
        let (docs, _) = parse("[1, -2, 1.5, true, ~, '1', x, 0x10, 1e3, 1.2.3]");
        assert_eq!(
            docs[0].root.to_json(),
            serde_json::json!([1, -2, 1.5, true, null, "1", "x", 16, 1000.0, "1.2.3"])
        );
    }

    #[test]
    fn yaml_1_1_booleans_are_go_yaml_v2s_table_for_plain_scalars_and_keys_only() {
        let (docs, _) =
            parse("[y, Y, yes, Yes, YES, on, On, ON, n, N, no, No, NO, off, Off, OFF, yEs, oN, 'yes', \"no\", nO]");
        let mut want: Vec<serde_json::Value> = [true; 8].into_iter().chain([false; 8]).map(Into::into).collect();
        want.extend(["yEs", "oN", "yes", "no", "nO"].map(Into::into));
        assert_eq!(docs[0].root.to_json(), serde_json::Value::Array(want));
        let (docs, _) = parse("yes: 1\n'no': 2\n");
        assert_eq!(docs[0].root.to_json(), serde_json::json!({"true": 1, "no": 2}));
    }

    #[test]
    fn offsets_cost_one_pass_over_a_long_line_with_non_ascii_text() {
        // One line of 20,000 flow items after an "é": the cursor walks the
        // line about once (a scan from the line's start per marker walked it
        // once per token).
        let text = format!("[\"é\", {}]", vec!["1"; 20_000].join(", "));
        let offsets = Offsets::new(&text, 0);
        let mut parser = Parser::new_from_str(&text);
        while let Some(Ok((event, span))) = parser.next_event() {
            let at = offsets.byte(&span.start);
            if let Event::Scalar(value, ..) = event {
                assert!(text[at..].starts_with(['"', value.chars().next().unwrap_or(' ')]));
            }
        }
        let chars = text.chars().count();
        assert!(
            offsets.walked.get() <= 3 * chars,
            "{} steps for {chars} characters",
            offsets.walked.get()
        );
        // Backwards too, and past the end.
        assert_eq!(offsets.of_char(2), 2);
        assert_eq!(offsets.of_char(3), 4);
        assert_eq!(offsets.of_char(usize::MAX), text.len());
    }

    fn reads_as_plainly(text: &str, want: &Value, json: bool) -> bool {
        reads_as(text, want, json, &|_| None)
    }

    #[test]
    fn reads_as_checks_every_value_each_key_once_and_one_document() {
        let want = serde_json::json!({"a": [1, "x"], "b": {"c": true}});
        assert!(reads_as_plainly("a: [1, x]\nb: {c: yes}\n", &want, false));
        assert!(reads_as_plainly(
            "{\"a\": [1, \"x\"], \"b\": {\"c\": true}}",
            &want,
            true
        ));
        for text in [
            "a: [1, x]\nb: {c: no}\n",
            "a: [1, x, 2]\nb: {c: true}\n",
            "a: [1, x]\nb: {c: true, d: 1}\n",
            "a: [1, x]\na: [1, x]\nb: {c: true}\n",
            "a: [1, x]\n",
            "a: [1, x]\nb: {c: true}\n---\nz: 1\n",
            "a: [1, x\n",
        ] {
            assert!(!reads_as_plainly(text, &want, false), "{text}");
        }
    }

    #[test]
    fn the_first_difference_is_the_deepest_place_that_reads_otherwise() {
        let text = "a:\n  b: [1, 2]\n  c: {d: x, e: w}\n";
        let (docs, _) = parse(text);
        let root = &docs[0].root;
        let differs = |want: Value| {
            let mut at = String::new();
            first_difference(root, &want, &mut at).map(|n| (at, &text[n.start..n.start + 1]))
        };
        use serde_json::json;
        assert_eq!(differs(json!({"a": {"b": [1, 2], "c": {"d": "x", "e": "w"}}})), None);
        assert_eq!(
            differs(json!({"a": {"b": [1, 3], "c": {"d": "x", "e": "w"}}})),
            Some(("/a/b/1".into(), "2"))
        );
        // A key the plan lacks: the key; a key the text lacks: its mapping.
        assert_eq!(
            differs(json!({"a": {"b": [1, 2], "c": {"d": "x"}}})),
            Some(("/a/c/e".into(), "e"))
        );
        assert_eq!(
            differs(json!({"a": {"b": [1, 2], "c": {"d": "x", "e": "w", "f": 1}}})),
            Some(("/a/c".into(), "{"))
        );
        assert_eq!(
            differs(json!({"a": {"b": [1, 2, 3], "c": {"d": "x", "e": "w"}}})),
            Some(("/a/b".into(), "["))
        );
    }

    #[test]
    fn duplicate_keys_are_found_at_any_depth() {
        let (docs, _) = parse("a:\n  b: 1\n  c: [{d: 1, d: 2}]\n");
        let dup = docs[0].root.duplicate_key().unwrap();
        assert!(matches!(&dup.kind, Kind::Scalar { text, .. } if text == "d"));
        let (docs, _) = parse("a: {b: 1}\nc: {b: 1}\n");
        assert!(docs[0].root.duplicate_key().is_none());
    }

    #[test]
    fn keys_that_are_collections_are_found_at_any_depth() {
        for (text, line) in [("a:\n  - b: 1\n    ? [x]\n    : y\n", 3), ("a: {{b: 1}: c}\n", 1)] {
            let (docs, _) = parse(text);
            let key = docs[0].root.complex_key().unwrap();
            assert_eq!(crate::yaml::edit::line_of(text, key.start), line, "{text}");
        }
        let (docs, _) = parse("a:\n  - b: [1]\n");
        assert!(docs[0].root.complex_key().is_none());
    }
}
