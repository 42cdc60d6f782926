//! JSON values written as block YAML, for the manifests this tool prints
//! (never for a user's file: those are edited in place by [`super::edit`]).
//!
//! A string is written plain only when no YAML reader could take it for
//! anything else: a conservative character set, and never a word or number
//! that YAML 1.1 or 1.2 would read as a bool, null or number. Everything
//! else is double-quoted with JSON's escapes, which YAML reads the same.

use serde_json::Value;

fn plain(s: &str) -> bool {
    let special = [
        "", "~", "null", "Null", "NULL", "true", "True", "TRUE", "false", "False", "FALSE", "yes", "Yes", "YES", "no",
        "No", "NO", "on", "On", "ON", "off", "Off", "OFF", "y", "Y", "n", "N",
    ];
    !special.contains(&s)
        && s.parse::<f64>().is_err()
        && !s.starts_with(['-', '.', '/', '+'])
        && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
        && !s.chars().all(|c| c.is_ascii_digit() || "._-+".contains(c))
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) if plain(s) => s.clone(),
        Value::String(s) => Value::String(s.clone()).to_string(),
        Value::Array(a) if a.is_empty() => "[]".into(),
        Value::Object(o) if o.is_empty() => "{}".into(),
        other => other.to_string(),
    }
}

fn collection(v: &Value) -> bool {
    match v {
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
        _ => false,
    }
}

fn write(v: &Value, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    match v {
        Value::Object(map) if !map.is_empty() => {
            for (k, item) in map {
                let k = scalar(&Value::String(k.clone()));
                if collection(item) {
                    out.push_str(&format!("{pad}{k}:\n"));
                    // Sequences under a key sit at the key's indentation.
                    let inner = if item.is_array() { indent } else { indent + 2 };
                    write(item, inner, out);
                } else {
                    out.push_str(&format!("{pad}{k}: {}\n", scalar(item)));
                }
            }
        }
        Value::Array(items) if !items.is_empty() => {
            for item in items {
                if collection(item) {
                    // The first line of the item follows the dash.
                    let mut inner = String::new();
                    write(item, indent + 2, &mut inner);
                    out.push_str(&format!("{pad}- {}", &inner[indent + 2..]));
                } else {
                    out.push_str(&format!("{pad}- {}\n", scalar(item)));
                }
            }
        }
        other => out.push_str(&format!("{pad}{}\n", scalar(other))),
    }
}

/// One document per value, each opened with `---`.
pub fn documents(values: &[Value]) -> String {
    let mut out = String::new();
    for v in values {
        out.push_str("---\n");
        write(v, 0, &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn what_it_writes_reads_back_as_the_same_json() {
        let value = json!({
            "a": "plain-text.v1/x", "b": "true", "c": "10", "d": "", "e": "a: b", "f": [], "g": {},
            "h": [{"x": 1, "y": [1, "2"]}, [3, [4]], "s"], "i": {"j": {"k": null}}, "l": 1.5, "m": "-x", "n": "1e3",
            "o": "line\nbreak", "p": false, "meshwrap.io/inject": "enabled"
        });
        let text = super::documents(std::slice::from_ref(&value));
        let (docs, error) = crate::yaml::tree::parse(&text);
        assert!(error.is_none(), "{text}");
        assert_eq!(docs[0].root.to_json(), value, "{text}");
    }
}
