//! Durations as users write them in manifests: `500ms`, `10s`, `2m`, `1h`,
//! combinations such as `1m30s`, and a bare number meaning seconds.
//!
//! The unit set is Go's (`ns`, `us`/`µs`, `ms`, `s`, `m`, `h`) so that values
//! copied from scuttle's or Istio's settings keep their meaning. Fractions are
//! accepted (`1.5s`); signs are not, since every duration here is a bound.

use std::time::Duration;

/// What a duration value may look like, for error messages.
pub const ACCEPTS: &str = "a duration such as 500ms, 10s, 2m, 1h or 1m30s, or a number of seconds";

/// Parses a duration; `None` when the text is not one.
///
/// Only a value written as zero is zero: one too small for a nanosecond
/// (`0.0000000001s`) is a nanosecond, since zero means "no bound" to some
/// options and a tiny bound must never turn into none.
pub fn parse(text: &str) -> Option<Duration> {
    let text = text.trim();
    let parsed = parse_exact(text)?;
    let written_as_zero = !text.contains(|c: char| ('1'..='9').contains(&c));
    Some(if parsed.is_zero() && !written_as_zero {
        Duration::from_nanos(1)
    } else {
        parsed
    })
}

fn parse_exact(text: &str) -> Option<Duration> {
    if text.is_empty() {
        return None;
    }
    if let Some(seconds) = parse_number(text) {
        return Duration::try_from_secs_f64(seconds).ok();
    }
    let mut rest = text;
    let mut total = Duration::ZERO;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number = parse_number(&rest[..digits])?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let nanos_per_unit = match &rest[..unit_len] {
            "ns" => 1.0,
            "us" | "µs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total = total.checked_add(Duration::try_from_secs_f64(number * nanos_per_unit / 1e9).ok()?)?;
    }
    Some(total)
}

/// A plain decimal number: digits with at most one dot, no sign, no exponent.
fn parse_number(text: &str) -> Option<f64> {
    let valid = !text.is_empty()
        && text != "."
        && text.chars().all(|c| c.is_ascii_digit() || c == '.')
        && text.matches('.').count() <= 1;
    if valid { text.parse().ok() } else { None }
}

/// Formats a duration the way it is parsed, for `--explain` and logs.
pub fn format(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 && !d.is_zero() {
        return format!("{}us", d.as_micros());
    }
    let (h, m, s, ms) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000);
    let mut out = String::new();
    for (value, unit) in [(h, "h"), (m, "m"), (s, "s"), (ms, "ms")] {
        if value > 0 {
            out.push_str(&format!("{value}{unit}"));
        }
    }
    if out.is_empty() { "0".into() } else { out }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_what_manifests_use() {
        let cases = [
            ("500ms", 500),
            ("10s", 10_000),
            ("2m", 120_000),
            ("1h", 3_600_000),
            ("1m30s", 90_000),
            ("1h2m3s4ms", 3_723_004),
            ("7", 7_000),
            ("0.25", 250),
            ("1.5s", 1_500),
            ("0", 0),
            ("1500us", 1),
        ];
        for (text, ms) in cases {
            assert_eq!(parse(text).map(|d| d.as_millis()), Some(ms), "{text}");
        }
    }

    #[test]
    fn a_value_too_small_for_a_nanosecond_is_not_zero() {
        for text in ["0.0000000001s", "0.1ns", "0.0000000000001"] {
            assert_eq!(parse(text), Some(Duration::from_nanos(1)), "{text}");
        }
        for text in ["0", "0s", "0.0", "0h0m"] {
            assert_eq!(parse(text), Some(Duration::ZERO), "{text}");
        }
    }

    #[test]
    fn rejects_what_is_not_a_duration() {
        for text in ["", "5x", "-1s", "+1s", "s", "1.2.3s", "1 s", "10sec", "1e3", ".", "ms5"] {
            assert_eq!(parse(text), None, "{text:?}");
        }
    }

    #[test]
    fn formats_round_trip() {
        for text in ["10m", "5s", "1s", "500ms", "1m30s", "0"] {
            assert_eq!(format(parse(text).unwrap()), text);
        }
    }
}
