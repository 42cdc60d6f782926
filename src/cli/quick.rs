//! The common command line without clap's start-up cost.
//!
//! clap's derive builds the whole `Command` (every option's flag, variable,
//! default and help text, each variable read with `getenv`) before it looks
//! at the first argument: about two-thirds of the instructions of a start.
//! Most starts are the same shape: long options with values, `-q` or `-v`,
//! `--explain`, then the command. This reads that shape straight into the same [`Args`],
//! with the same value sources, and gives up on anything else by returning
//! `None`: help and version, other short flags, an unknown or repeated option, clap's
//! conflicts (`-q` with `-v` or a log level), a
//! missing or empty value, a value that begins with `-`, text that is not
//! UTF-8 before the command. clap then parses the line from scratch, so
//! every error, every help text and every odd case is still clap's.
//!
//! One hazard: the table below restates what `args.rs` declares. Two tests
//! guard it: one checks every entry against clap's own definition (name,
//! variable, default, repeatable or not), and `tests/fast_parse.rs` parses a
//! corpus of command lines and environments both ways and compares the
//! results, value sources included.

use std::ffi::OsString;

use super::args::{Args, DEFAULT_QUIT_URL, DEFAULT_READY_URL};
use super::{Source, Sources};

/// How an option takes its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `--name VALUE` or `--name=VALUE`, once.
    One,
    /// Repeatable; the variable gives one value.
    Many,
    /// `--name` alone means "true"; the variable gives its text as is.
    Switch,
}

/// One option as this path reads it (`id` is clap's id: the field's name).
pub struct Opt {
    pub id: &'static str,
    pub long: &'static str,
    pub env: &'static str,
    pub kind: Kind,
    pub default: Option<&'static str>,
    set: fn(&mut Args, Vec<String>),
}

/// The last value of a non-repeatable option (it has exactly one).
fn one(mut values: Vec<String>) -> String {
    values.pop().unwrap_or_default()
}

macro_rules! opt {
    ($id:ident, $long:literal, $env:literal, $kind:ident, $default:expr) => {
        Opt {
            id: stringify!($id),
            long: $long,
            env: $env,
            kind: Kind::$kind,
            default: $default,
            set: |args, values| args.$id = From::from(values_for!($kind, values)),
        }
    };
}

macro_rules! values_for {
    (Many, $values:ident) => {
        $values
    };
    ($other:ident, $values:ident) => {
        one($values)
    };
}

/// Every option of `args.rs` but `--help` and `--version` (which always go
/// to clap) and the plain switches `-q`, `-v` and `--explain` (read below).
pub static OPTIONS: &[Opt] = &[
    opt!(sidecar, "sidecar", "MESHWRAP_SIDECAR", Many, None),
    opt!(
        ready_url,
        "ready-url",
        "MESHWRAP_READY_URL",
        Many,
        Some(DEFAULT_READY_URL)
    ),
    opt!(quit_url, "quit-url", "MESHWRAP_QUIT_URL", Many, Some(DEFAULT_QUIT_URL)),
    opt!(no_wait, "no-wait", "MESHWRAP_NO_WAIT", Switch, Some("false")),
    opt!(poll, "poll", "MESHWRAP_POLL", One, Some("fast")),
    opt!(
        native_sidecar,
        "native-sidecar",
        "MESHWRAP_NATIVE_SIDECAR",
        One,
        Some("auto")
    ),
    opt!(
        pod_annotations,
        "pod-annotations",
        "MESHWRAP_POD_ANNOTATIONS",
        One,
        Some(crate::sidecar::pod::DEFAULT_PATH)
    ),
    opt!(exec, "exec", "MESHWRAP_EXEC", Switch, Some("false")),
    opt!(timeout, "timeout", "MESHWRAP_TIMEOUT", One, Some("10m")),
    opt!(on_timeout, "on-timeout", "MESHWRAP_ON_TIMEOUT", One, Some("fail")),
    opt!(quit_policy, "quit-policy", "MESHWRAP_QUIT_POLICY", One, Some("always")),
    opt!(
        no_quit_on_exit,
        "no-quit-on-exit",
        "MESHWRAP_NO_QUIT_ON_EXIT",
        One,
        Some("")
    ),
    opt!(quit_delay, "quit-delay", "MESHWRAP_QUIT_DELAY", One, Some("0")),
    opt!(
        verify_quit,
        "verify-quit",
        "MESHWRAP_VERIFY_QUIT",
        Switch,
        Some("false")
    ),
    opt!(quit_timeout, "quit-timeout", "MESHWRAP_QUIT_TIMEOUT", One, Some("5s")),
    opt!(
        request_timeout,
        "request-timeout",
        "MESHWRAP_REQUEST_TIMEOUT",
        One,
        Some("1s")
    ),
    opt!(forward_to, "forward-to", "MESHWRAP_FORWARD_TO", One, Some("child")),
    opt!(log_format, "log-format", "MESHWRAP_LOG_FORMAT", One, Some("text")),
    opt!(log_level, "log-level", "MESHWRAP_LOG", One, Some("info")),
    opt!(
        termination_log,
        "termination-log",
        "MESHWRAP_TERMINATION_LOG",
        One,
        Some(crate::config::DEFAULT_TERMINATION_LOG)
    ),
    opt!(guard_dir, "guard-dir", "MESHWRAP_GUARD_DIR", One, None),
    opt!(
        start_timeout,
        "start-timeout",
        "MESHWRAP_START_TIMEOUT",
        One,
        Some("1h")
    ),
];

/// Reads `argv` (program name first) and the variables `env` gives, or
/// `None` where clap must decide.
pub fn parse(argv: &[OsString], env: impl Fn(&str) -> Option<OsString>) -> Option<(Args, Sources)> {
    let mut given: Vec<Vec<String>> = vec![Vec::new(); OPTIONS.len()];
    let mut args = Args::default();
    let mut rest = argv.iter().skip(1);
    while let Some(arg) = rest.next() {
        let text = arg.to_str()?;
        if text == "--" {
            args.command.extend(rest.cloned());
            break;
        }
        if let Some(slot) = level_switch(&mut args, text) {
            if *slot {
                return None;
            }
            *slot = true;
            continue;
        }
        let Some(long) = text.strip_prefix("--") else {
            if text.starts_with('-') {
                return None;
            }
            // The first word of the command: the rest is its arguments.
            args.command.push(arg.clone());
            args.command.extend(rest.cloned());
            break;
        };
        let (name, inline) = match long.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (long, None),
        };
        if name == "explain" && inline.is_none() && !args.explain {
            args.explain = true;
            continue;
        }
        let i = OPTIONS.iter().position(|o| o.long == name)?;
        let value = match (OPTIONS[i].kind, inline) {
            (Kind::Switch, None) => "true",
            (Kind::Switch, Some(_)) => return None,
            (_, Some(value)) => value,
            (_, None) => rest.next()?.to_str()?,
        };
        let repeated = OPTIONS[i].kind != Kind::Many && !given[i].is_empty();
        if repeated || value.is_empty() || value.starts_with('-') {
            return None;
        }
        given[i].push(value.to_string());
    }
    let sources = values(&mut args, given, env)?;
    // clap refuses -q with -v, and either with a --log-level or MESHWRAP_LOG.
    let level_given = matches!(sources.get("log_level"), Some(Source::Flag | Source::Env));
    if (args.quiet || args.verbose) && (level_given || args.quiet == args.verbose) {
        return None;
    }
    Some((args, sources))
}

/// `-q`, `--quiet`, `-v` or `--verbose`: the switch it sets.
fn level_switch<'a>(args: &'a mut Args, text: &str) -> Option<&'a mut bool> {
    match text {
        "-q" | "--quiet" => Some(&mut args.quiet),
        "-v" | "--verbose" => Some(&mut args.verbose),
        _ => None,
    }
}

/// Each option's value: from its flags, else its variable, else its default.
fn values(args: &mut Args, given: Vec<Vec<String>>, env: impl Fn(&str) -> Option<OsString>) -> Option<Sources> {
    let mut sources = Sources::default();
    for (opt, values) in OPTIONS.iter().zip(given) {
        let (values, source) = if !values.is_empty() {
            (values, Source::Flag)
        } else if let Some(value) = env(opt.env) {
            (vec![value.into_string().ok()?], Source::Env)
        } else if let Some(default) = opt.default {
            (vec![default.to_string()], Source::Default)
        } else {
            continue;
        };
        sources.0.push((opt.id, source));
        (opt.set)(args, values);
    }
    Some(sources)
}

#[cfg(test)]
mod tests {
    use clap::{ArgAction, CommandFactory};

    use super::*;

    /// The table says what args.rs says, option by option.
    #[test]
    fn the_table_is_clap_s_definition() {
        let command = Args::command();
        let mut seen = Vec::new();
        for arg in command.get_arguments() {
            let id = arg.get_id().as_str();
            if ["help", "version", "command"].contains(&id) {
                continue;
            }
            if ["quiet", "verbose", "explain"].contains(&id) {
                assert!(matches!(arg.get_action(), ArgAction::SetTrue) && arg.get_env().is_none());
                let short = arg.get_short().map(String::from);
                assert_eq!(short.as_deref(), id.get(..1).filter(|_| id != "explain"), "{id}");
                continue;
            }
            let opt = OPTIONS
                .iter()
                .find(|o| o.id == id)
                .unwrap_or_else(|| panic!("{id} is not in OPTIONS"));
            assert_eq!(arg.get_long(), Some(opt.long), "{id}");
            assert_eq!(arg.get_env().and_then(|e| e.to_str()), Some(opt.env), "{id}");
            let defaults: Vec<_> = arg.get_default_values().iter().map(|d| d.to_str().unwrap()).collect();
            assert_eq!(defaults, opt.default.into_iter().collect::<Vec<_>>(), "{id}");
            let kind = match arg.get_action() {
                ArgAction::Append => Kind::Many,
                ArgAction::SetTrue => Kind::Switch,
                ArgAction::Set => Kind::One,
                other => panic!("{id}: {other:?}"),
            };
            assert_eq!(kind, opt.kind, "{id}");
            assert!(arg.is_allow_hyphen_values_set() || kind == Kind::Switch, "{id}");
            seen.push(id);
        }
        assert_eq!(seen.len(), OPTIONS.len(), "OPTIONS has an entry clap does not");
    }

    fn quick(line: &[&str]) -> Option<Args> {
        let argv: Vec<OsString> = std::iter::once("meshwrap")
            .chain(line.iter().copied())
            .map(Into::into)
            .collect();
        parse(&argv, |_| None).map(|(args, _)| args)
    }

    #[test]
    fn the_common_shapes_are_read_here() {
        let args = quick(&[
            "--timeout",
            "5s",
            "--sidecar=linkerd",
            "--no-wait",
            "--",
            "python",
            "-u",
        ])
        .unwrap();
        assert_eq!((args.timeout.as_str(), args.no_wait.as_str()), ("5s", "true"));
        assert_eq!(args.sidecar, ["linkerd"]);
        assert_eq!(args.command, ["python", "-u"]);
        let args = quick(&["python", "--timeout", "5s"]).unwrap();
        assert_eq!(args.command, ["python", "--timeout", "5s"]);
        assert_eq!(args.timeout, "10m");
    }

    #[test]
    fn anything_else_goes_to_clap() {
        for line in [
            &["--help"][..],
            &["-h"],
            &["--version"],
            &["-q", "-v", "--", "true"],
            &["-q", "--log-level", "warn", "--", "true"],
            &["-qv", "--", "true"],
            &["--nonsense", "--", "true"],
            &["--timeout", "1s", "--timeout", "2s", "--", "true"],
            &["--timeout"],
            &["--timeout", "--", "true"],
            &["--timeout=", "--", "true"],
            &["--no-wait=true", "--", "true"],
            &["--explain", "--explain"],
            &["-"],
        ] {
            assert!(quick(line).is_none(), "{line:?}");
        }
    }
}
