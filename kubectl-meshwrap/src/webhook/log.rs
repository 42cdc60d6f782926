//! One JSON object per line on stderr, as log pipelines parse them: the
//! time (RFC 3339, UTC), the level, the message, then the fields.
//!
//! Each line is built whole and written with one call under stderr's lock,
//! so lines from concurrent requests never interleave; a closed stderr is
//! ignored rather than taking the webhook down.

use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};

/// `seconds` since the epoch as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
fn rfc3339(since_epoch: std::time::Duration) -> String {
    let secs = since_epoch.as_secs();
    let (days, rest) = ((secs / 86_400) as i64, secs % 86_400);
    // Howard Hinnant's days-to-civil algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3_600,
        rest % 3_600 / 60,
        rest % 60,
        since_epoch.subsec_millis()
    )
}

/// `since_epoch` as Kubernetes writes a MicroTime:
/// `YYYY-MM-DDTHH:MM:SS.uuuuuuZ`.
pub fn micro_time(since_epoch: std::time::Duration) -> String {
    let seconds = rfc3339(since_epoch);
    format!("{}.{:06}Z", &seconds[..19], since_epoch.subsec_micros())
}

fn line(level: &str, msg: &str, fields: &[(&str, Value)]) {
    let mut object = Map::new();
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    object.insert("time".into(), Value::String(rfc3339(now)));
    object.insert("level".into(), Value::String(level.into()));
    object.insert("msg".into(), Value::String(msg.into()));
    for (k, v) in fields {
        object.insert((*k).into(), v.clone());
    }
    let mut text = Value::Object(object).to_string();
    text.push('\n');
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

pub fn info(msg: &str, fields: &[(&str, Value)]) {
    line("info", msg, fields);
}

pub fn warn(msg: &str, fields: &[(&str, Value)]) {
    line("warn", msg, fields);
}

pub fn error(msg: &str, fields: &[(&str, Value)]) {
    line("error", msg, fields);
}

#[cfg(test)]
mod tests {
    use super::{micro_time, rfc3339};
    use std::time::Duration;

    #[test]
    fn dates_across_leap_years_and_centuries() {
        assert_eq!(rfc3339(Duration::ZERO), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            rfc3339(Duration::from_millis(951_782_400_123)),
            "2000-02-29T00:00:00.123Z"
        );
        assert_eq!(rfc3339(Duration::from_secs(1_795_478_399)), "2026-11-23T23:59:59.000Z");
        assert_eq!(
            micro_time(Duration::from_micros(951_782_400_123_456)),
            "2000-02-29T00:00:00.123456Z"
        );
    }
}
