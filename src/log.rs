//! meshwrap's own log lines, on stderr only: stdout belongs to the command.
//!
//! Text lines read `meshwrap: <message> key=value ...` (with `warn:`, `error:`
//! or `debug:` before the message at those levels); JSON lines are one object
//! each with `level`, `msg` and the same fields. This is a few dozen lines
//! instead of `tracing-subscriber` because every byte of the static binary is
//! copied into every pod, and meshwrap logs a handful of lines per run.
//!
//! Each line is formatted whole and written with one `write` call so lines from
//! meshwrap never interleave mid-line with the command's own stderr. Control
//! characters are escaped, so a value (a command name) cannot end a line and
//! forge the next. Nothing here panics on a closed or full stream: `print!`
//! would, and after the spawn a panic kills PID 1.

use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::OnceLock;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Error,
    Warn,
    Info,
    Debug,
}

impl Level {
    pub fn name(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warn => "warn",
            Level::Info => "info",
            Level::Debug => "debug",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
}

/// A field value: numbers stay numbers in JSON.
pub enum Value<'a> {
    Str(&'a str),
    Num(i128),
}

impl<'a> From<&'a str> for Value<'a> {
    fn from(s: &'a str) -> Self {
        Value::Str(s)
    }
}
impl<'a> From<&'a String> for Value<'a> {
    fn from(s: &'a String) -> Self {
        Value::Str(s)
    }
}
macro_rules! num_value {
    ($($t:ty),*) => {$(
        impl From<$t> for Value<'_> {
            fn from(n: $t) -> Self { Value::Num(n as i128) }
        }
    )*};
}
num_value!(u8, u16, u32, u64, u128, usize, i32);

struct Logger {
    level: Level,
    format: Format,
}

static LOGGER: OnceLock<Logger> = OnceLock::new();

/// Sets level and format once; lines logged before that use `info` and text.
pub fn init(level: Level, format: Format) {
    let _ = LOGGER.set(Logger { level, format });
}

fn logger() -> &'static Logger {
    LOGGER.get_or_init(|| Logger {
        level: Level::Info,
        format: Format::Text,
    })
}

pub fn enabled(level: Level) -> bool {
    level <= logger().level
}

pub fn log(level: Level, msg: &str, fields: &[(&str, Value)]) {
    if !enabled(level) {
        return;
    }
    let line = match logger().format {
        Format::Text => text_line(level, msg, fields),
        Format::Json => json_line(level, msg, fields),
    };
    // A failed write to stderr cannot be reported anywhere; the run goes on.
    let _ = std::io::stderr().write_all(line.as_bytes());
}

fn text_line(level: Level, msg: &str, fields: &[(&str, Value)]) -> String {
    let mut line = String::from("meshwrap: ");
    if level != Level::Info {
        line.push_str(level.name());
        line.push_str(": ");
    }
    // A control character in a message (which may quote a user's value)
    // could end the line or move the cursor: it is written escaped.
    for c in msg.chars() {
        if c.is_control() {
            line.extend(c.escape_debug());
        } else {
            line.push(c);
        }
    }
    for (key, value) in fields {
        let _ = match value {
            Value::Num(n) => write!(line, " {key}={n}"),
            // Quoted with Rust's escapes, so a newline or an escape sequence
            // in a command name cannot print a line meshwrap did not write.
            Value::Str(s)
                if s.is_empty() || s.contains(|c: char| c == ' ' || c == '"' || c == '=' || c.is_control()) =>
            {
                write!(line, " {key}={s:?}")
            }
            Value::Str(s) => write!(line, " {key}={s}"),
        };
    }
    line.push('\n');
    line
}

fn json_line(level: Level, msg: &str, fields: &[(&str, Value)]) -> String {
    let mut line = format!("{{\"level\":\"{}\",\"msg\":", level.name());
    push_json_str(&mut line, msg);
    for (key, value) in fields {
        line.push(',');
        push_json_str(&mut line, key);
        line.push(':');
        match value {
            Value::Num(n) => {
                let _ = write!(line, "{n}");
            }
            Value::Str(s) => push_json_str(&mut line, s),
        }
    }
    line.push_str("}\n");
    line
}

fn push_json_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Writes `text` to stdout (`--help`, `--explain`, `install`'s path).
/// Never panics: `print!` does when stdout is a closed pipe, and that would
/// turn a succeeded install into an abort.
pub fn stdout(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

/// Writes one unformatted line to stderr (a usage error), never panicking.
pub fn stderr_line(line: &str) {
    let _ = std::io::stderr().write_all(format!("{line}\n").as_bytes());
}

/// Writes `line` as the container's termination message (the kubelet shows
/// it in the pod's status, up to 4096 bytes). Only into a file that is
/// there (the kubelet mounts it): outside a pod nothing is created. Opened
/// without blocking, so a FIFO cannot hang meshwrap.
pub fn termination_message(path: &std::path::Path, line: &str) {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path);
    if let Ok(mut file) = file {
        let mut end = line.len().min(4095);
        while !line.is_char_boundary(end) {
            end -= 1;
        }
        let _ = file.write_all(format!("{}\n", &line[..end]).as_bytes());
    }
}

/// `log!(Info, "message", key = value, ...)`
#[macro_export]
macro_rules! log {
    ($level:ident, $msg:expr $(, $key:ident = $value:expr)* $(,)?) => {
        if $crate::log::enabled($crate::log::Level::$level) {
            $crate::log::log(
                $crate::log::Level::$level,
                &$msg,
                &[$((stringify!($key), $crate::log::Value::from($value))),*],
            )
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_quotes_values_with_spaces() {
        let line = text_line(
            Level::Warn,
            "quit failed",
            &[
                ("url", "http://x/q".into()),
                ("why", "timed out".into()),
                ("ms", 5u64.into()),
            ],
        );
        assert_eq!(
            line,
            "meshwrap: warn: quit failed url=http://x/q why=\"timed out\" ms=5\n"
        );
    }

    #[test]
    fn text_escapes_control_characters() {
        let line = text_line(
            Level::Info,
            "bad\rmsg",
            &[("command", "x\nmeshwrap: sidecar quit\u{1b}[2K".into())],
        );
        assert_eq!(
            line,
            "meshwrap: bad\\rmsg command=\"x\\nmeshwrap: sidecar quit\\u{1b}[2K\"\n"
        );
    }

    #[test]
    fn json_escapes() {
        let line = json_line(Level::Info, "a \"b\"\n", &[("n", 3u32.into()), ("s", "x\\y".into())]);
        assert_eq!(
            line,
            "{\"level\":\"info\",\"msg\":\"a \\\"b\\\"\\n\",\"n\":3,\"s\":\"x\\\\y\"}\n"
        );
    }
}
