//! What the transform asks for: additions only, at paths into the document.
//!
//! Every change meshwrap makes to a pod is an addition (items put into a
//! sequence, a key put into a mapping), never a rewrite of what is there:
//! the command gets a prefix inserted before its first item, mounts and
//! volumes are appended. That is what lets every front end apply the same
//! plan without re-serialising anything: `yaml::edit` turns it into text
//! insertions, the webhook into JSON Patch `add` operations, and
//! [`apply`] into the JSON the other two are checked against.

use serde_json::Value;

/// One step of a path: a mapping key or a sequence index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seg {
    Key(String),
    Index(usize),
}

pub type Path = Vec<Seg>;

pub fn key(k: &str) -> Seg {
    Seg::Key(k.to_string())
}

#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// Put `values` into the sequence at `path`, before item `index` (its
    /// length appends).
    Insert {
        path: Path,
        index: usize,
        values: Vec<Value>,
    },
    /// Give the mapping at `path` the key `key`, which it lacks (or holds
    /// null).
    Add { path: Path, key: String, value: Value },
}

pub fn get<'a>(doc: &'a Value, path: &[Seg]) -> Option<&'a Value> {
    path.iter().try_fold(doc, |node, seg| match seg {
        Seg::Key(k) => node.get(k.as_str()),
        Seg::Index(i) => node.get(*i),
    })
}

fn get_mut<'a>(doc: &'a mut Value, path: &[Seg]) -> Option<&'a mut Value> {
    path.iter().try_fold(doc, |node, seg| match seg {
        Seg::Key(k) => node.get_mut(k.as_str()),
        Seg::Index(i) => node.get_mut(*i),
    })
}

/// Applies `op` to `doc`; false (and `doc` unchanged) when its target is
/// missing or of the wrong shape.
pub fn apply(doc: &mut Value, op: &Op) -> bool {
    match op {
        Op::Insert { path, index, values } => match get_mut(doc, path) {
            Some(Value::Array(items)) if *index <= items.len() => {
                items.splice(*index..*index, values.iter().cloned());
                true
            }
            _ => false,
        },
        Op::Add { path, key, value } => match get_mut(doc, path) {
            Some(Value::Object(map)) if map.get(key).is_none_or(Value::is_null) => {
                map.insert(key.clone(), value.clone());
                true
            }
            _ => false,
        },
    }
}

/// A JSON Pointer (RFC 6901) for `path`.
pub fn pointer(path: &[Seg]) -> String {
    let mut out = String::new();
    for seg in path {
        out.push('/');
        match seg {
            Seg::Key(k) => out.push_str(&k.replace('~', "~0").replace('/', "~1")),
            Seg::Index(i) => out.push_str(&i.to_string()),
        }
    }
    out
}

/// The plan as JSON Patch `add` operations, in order.
pub fn json_patch(ops: &[Op]) -> Vec<Value> {
    let mut out = Vec::new();
    for op in ops {
        match op {
            Op::Insert { path, index, values } => {
                for (i, value) in values.iter().enumerate() {
                    let mut at = path.clone();
                    at.push(Seg::Index(index + i));
                    out.push(serde_json::json!({"op": "add", "path": pointer(&at), "value": value}));
                }
            }
            Op::Add { path, key, value } => {
                let mut at = path.clone();
                at.push(Seg::Key(key.clone()));
                out.push(serde_json::json!({"op": "add", "path": pointer(&at), "value": value}));
            }
        }
    }
    out
}

/// `path` with `prefix` in front.
pub fn under(prefix: &[Seg], path: &[Seg]) -> Path {
    prefix.iter().chain(path).cloned().collect()
}

/// The plan rewritten so that no op reaches into what an earlier op adds
/// (such ops are merged into that op's value) and every index counts the
/// document's own items, as a text editor needs. Applying the result to the
/// original document gives what applying `ops` in order gives.
pub fn fold(ops: &[Op]) -> Vec<Op> {
    let mut out: Vec<Op> = Vec::new();
    'next: for op in ops {
        let (path, index) = match op {
            Op::Insert { path, index, .. } => (path, Some(*index)),
            Op::Add { path, .. } => (path, None),
        };
        // Into a value an earlier op adds: change that value instead.
        for earlier in out.iter_mut().rev() {
            match earlier {
                Op::Add { path: at, key, value } => {
                    if let Some(rest) = path.strip_prefix(at.as_slice())
                        && let Some((Seg::Key(k), rest)) = rest.split_first()
                        && k == key
                    {
                        let mut inner = op.clone();
                        set_path(&mut inner, rest.to_vec());
                        apply(value, &inner);
                        continue 'next;
                    }
                }
                Op::Insert {
                    path: at,
                    index: first,
                    values,
                } => {
                    if let Some(rest) = path.strip_prefix(at.as_slice()) {
                        if let Some((Seg::Index(i), rest)) = rest.split_first()
                            && (*first..*first + values.len()).contains(i)
                        {
                            let mut inner = op.clone();
                            set_path(&mut inner, rest.to_vec());
                            apply(&mut values[*i - *first], &inner);
                            continue 'next;
                        }
                        if rest.is_empty()
                            && let (Some(i), Op::Insert { values: more, .. }) = (index, op)
                            && (*first..=*first + values.len()).contains(&i)
                        {
                            let at = i - *first;
                            values.splice(at..at, more.iter().cloned());
                            continue 'next;
                        }
                    }
                }
            }
        }
        // Otherwise: count indices past earlier insertions in the original.
        let mut op = op.clone();
        for earlier in out.iter().rev() {
            if let Op::Insert {
                path: at,
                index: first,
                values,
            } = earlier
            {
                let shift = |i: &mut usize| {
                    if *i >= *first + values.len() {
                        *i -= values.len();
                    }
                };
                match &mut op {
                    Op::Insert { path, index, .. } if path == at => shift(index),
                    Op::Insert { path, .. } | Op::Add { path, .. } => {
                        if path.starts_with(at)
                            && let Some(Seg::Index(i)) = path.get_mut(at.len())
                        {
                            shift(i);
                        }
                    }
                }
            }
        }
        out.push(op);
    }
    out
}

fn set_path(op: &mut Op, to: Path) {
    match op {
        Op::Insert { path, .. } | Op::Add { path, .. } => *path = to,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn inserts_and_adds_and_refuses_what_does_not_fit() {
        let mut doc = json!({"a": [1, 2], "m": {"k": null}});
        assert!(apply(
            &mut doc,
            &Op::Insert {
                path: vec![key("a")],
                index: 0,
                values: vec![json!(0)]
            }
        ));
        assert!(apply(
            &mut doc,
            &Op::Insert {
                path: vec![key("a")],
                index: 3,
                values: vec![json!(3)]
            }
        ));
        assert!(apply(
            &mut doc,
            &Op::Add {
                path: vec![key("m")],
                key: "k".into(),
                value: json!(1)
            }
        ));
        assert!(!apply(
            &mut doc,
            &Op::Add {
                path: vec![key("m")],
                key: "k".into(),
                value: json!(2)
            }
        ));
        assert!(!apply(
            &mut doc,
            &Op::Insert {
                path: vec![key("a")],
                index: 9,
                values: vec![]
            }
        ));
        assert_eq!(doc, json!({"a": [0, 1, 2, 3], "m": {"k": 1}}));
    }

    #[test]
    fn folding_merges_ops_into_what_earlier_ops_add_and_keeps_the_result() {
        let doc = json!({"s": {"v": [{"n": "a"}], "c": [1, 2]}});
        let ops = vec![
            Op::Add {
                path: vec![key("s")],
                key: "w".into(),
                value: json!([1]),
            },
            Op::Insert {
                path: vec![key("s"), key("w")],
                index: 1,
                values: vec![json!(2)],
            },
            Op::Insert {
                path: vec![key("s"), key("v")],
                index: 0,
                values: vec![json!({"n": "z"})],
            },
            Op::Add {
                path: vec![key("s"), key("v"), Seg::Index(0)],
                key: "x".into(),
                value: json!(1),
            },
            Op::Add {
                path: vec![key("s"), key("v"), Seg::Index(1)],
                key: "y".into(),
                value: json!(1),
            },
            Op::Insert {
                path: vec![key("s"), key("c")],
                index: 2,
                values: vec![json!(3)],
            },
            Op::Insert {
                path: vec![key("s"), key("c")],
                index: 3,
                values: vec![json!(4)],
            },
        ];
        let mut sequential = doc.clone();
        ops.iter().for_each(|op| assert!(apply(&mut sequential, op)));
        let folded = fold(&ops);
        assert_eq!(folded.len(), 4, "{folded:?}");
        assert!(folded.contains(&Op::Add {
            path: vec![key("s"), key("v"), Seg::Index(0)],
            key: "y".into(),
            value: json!(1)
        }));
        // Folded ops touch only the original document: applied in reverse
        // position order (as text edits are), they give the same result.
        let mut at_once = doc.clone();
        for op in folded.iter().rev() {
            assert!(apply(&mut at_once, op), "{op:?}");
        }
        assert_eq!(at_once, sequential);
    }

    #[test]
    fn pointers_escape_slashes_and_tildes() {
        assert_eq!(
            pointer(&[key("metadata"), key("meshwrap.io/st~atus"), Seg::Index(2)]),
            "/metadata/meshwrap.io~1st~0atus/2"
        );
    }
}
