//! JSON values written as block YAML, for the manifests this tool prints
//! (never for a user's file: those are edited in place by [`super::edit`]).
//!
//! A string is written plain only when no YAML reader could take it for
//! anything else: a conservative character set, and never a word or number
//! that YAML 1.1 or 1.2 would read as a bool, null or number. Everything
//! else is double-quoted with JSON's escapes, which YAML reads the same.

use serde_json::Value;

/// Whether `s` can be written plain: a conservative character set, no
/// leading indicator, and nothing a YAML reader would resolve otherwise.
fn plain(s: &str) -> bool {
    !non_string(s)
        && !s.starts_with(['-', '.', '/', '+'])
        && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
}

/// The one rule: whether a YAML 1.1 or 1.2 reader could resolve the plain
/// scalar `s` to something other than a string (a null, a bool, a number in
/// any base, an infinity or NaN, a timestamp, or the merge and value keys).
/// It errs on the side of quoting.
fn non_string(s: &str) -> bool {
    const WORDS: [&str; 27] = [
        "", "~", "null", "Null", "NULL", "true", "True", "TRUE", "false", "False", "FALSE", "yes", "Yes", "YES", "no",
        "No", "NO", "on", "On", "ON", "off", "Off", "OFF", "y", "Y", "n", "N",
    ];
    WORDS.contains(&s) || s == "<<" || s == "=" || number(s) || date(s)
}

/// Integers (decimal, 0x, 0o, 0b, YAML 1.1's leading-0 octal, `_`
/// separators, `:` sexagesimal) and floats (`.5`, `1e3`, `.inf`, `.NaN`),
/// signed or not.
fn number(s: &str) -> bool {
    let body = s.strip_prefix(['+', '-']).unwrap_or(s);
    let lower = body.to_ascii_lowercase();
    if matches!(lower.as_str(), ".inf" | ".nan") {
        return true;
    }
    let radix = [("0x", 16), ("0o", 8), ("0b", 2)]
        .into_iter()
        .find_map(|(prefix, radix)| lower.strip_prefix(prefix).map(|digits| (digits, radix)));
    if let Some((digits, radix)) = radix {
        return !digits.is_empty() && digits.chars().all(|c| c == '_' || c.is_digit(radix));
    }
    body.starts_with(|c: char| c.is_ascii_digit() || c == '.')
        && body.chars().any(|c| c.is_ascii_digit())
        && body.chars().all(|c| c.is_ascii_digit() || "._:eE+-".contains(c))
}

/// YAML 1.1's timestamps begin with a four-digit year and a dash.
fn date(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 5 && b[..4].iter().all(u8::is_ascii_digit) && b[4] == b'-'
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
    fn what_a_yaml_reader_would_take_for_a_non_string_is_quoted() {
        for s in [
            "",
            "~",
            "null",
            "NULL",
            "true",
            "False",
            "yes",
            "No",
            "on",
            "OFF",
            "y",
            "N",
            "<<",
            "=",
            "0",
            "10",
            "-1",
            "+1",
            "1.5",
            ".5",
            "1e3",
            "1E-3",
            "1_000",
            "0x10",
            "0X1f",
            "0o17",
            "0b101",
            "0b1_0",
            "017",
            "1:20",
            ".inf",
            "-.Inf",
            ".NaN",
            "2001-12-14",
            "2001-12-14t21",
            "12.",
        ] {
            assert!(super::non_string(s), "{s:?} would be read as a string?");
            assert!(!super::plain(s), "{s:?} written plain");
        }
    }

    #[test]
    fn words_and_names_stay_plain() {
        for s in [
            "meshwrap-system",
            "0x",
            "0xg",
            "0o8",
            "0b2",
            "87600h",
            "32Mi",
            "50m",
            "e2e",
            "v1",
            "apps/v1",
            "inf",
            "nan",
            "yesterday",
            "onion",
            "n1",
            "x10",
            "kubernetes.io/hostname",
            "1a",
        ] {
            assert!(!super::non_string(s), "{s:?} is a string");
        }
        assert!(super::plain("0x") && super::plain("87600h") && super::plain("e2e"));
    }

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
