//! The command line: clap definitions, every option also an environment
//! variable, resolved into one plain [`Config`].
//!
//! clap only collects strings here; every value is checked in [`resolve`],
//! which knows whether it came from a flag, a variable or a default, so that a
//! bad value is reported as "--timeout" or as "MESHWRAP_TIMEOUT", whichever the
//! user actually wrote. The doc comments below are the `--help` text, which the
//! README shows as its usage section.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, CommandFactory, FromArgMatches, Parser};

use crate::duration;
use crate::log::{Format, Level};
use crate::sidecar::http;
use crate::sidecar::preset::{self, Sidecar};
use crate::sidecar::quit::Target;
use crate::sidecar::{Endpoint, Native};
use crate::supervise::ForwardTo;

pub const DEFAULT_READY_URL: &str = "http://127.0.0.1:15021/healthz/ready";
pub const DEFAULT_QUIT_URL: &str = "http://127.0.0.1:15020/quitquitquit";

const GUARD_ABOUT: &str = "\
Run beside a wrapped container, in a container of its own: if the kernel kills
meshwrap together with its command (an OOM group kill), quit the sidecar in its
place, so the pod completes. Give it the wrapped meshwrap's options and the same
--guard-dir; it ignores those that only concern the command.";

const GUARD_AFTER_HELP: &str = "\
Exit status:
  0      in every handled case (a non-zero guard would fail a succeeded pod)
  125    bad usage";

const AFTER_HELP: &str = "\
Example:
  meshwrap -- python train.py --epochs 10
  Waits for the Istio sidecar, runs the command, then tells the sidecar to quit.

  meshwrap install /mesh
  Copies meshwrap into /mesh (for an init container and a shared emptyDir).

  meshwrap guard --guard-dir /run/meshwrap [OPTIONS]
  In a container of its own: quits the sidecar if the kernel kills meshwrap
  with its command (meshwrap guard --help).

Exit status:
  N      the command exited with N
  128+S  the command was killed by signal S (137: SIGKILL or OOM, 143: SIGTERM),
         or TERM, INT, HUP or QUIT (S) arrived before the command started
  127    the command was not found
  126    the command was found but could not be executed
  125    meshwrap failed: bad usage or configuration, the sidecar was not ready
         in time (--on-timeout fail), or an internal error";

/// Wait for the service-mesh sidecar, run COMMAND, forward signals to it, reap
/// zombies, tell the sidecar to quit when COMMAND ends, and exit with its status.
#[derive(Parser, Debug)]
#[command(name = "meshwrap", version, after_help = AFTER_HELP)]
#[command(override_usage = "meshwrap [OPTIONS] [--] <COMMAND> [ARG]...")]
struct Args {
    /// A sidecar to wait for and quit, by name: istio (the default), envoy,
    /// linkerd, cloudsql, vault, dapr or none. NAME=HOST or NAME=HOST:PORT
    /// moves its endpoints (its other port keeps its distance). Repeatable;
    /// --ready-url and --quit-url add to the presets' endpoints. The variable
    /// takes a comma-separated list.
    #[arg(long, value_name = "NAME[=HOST[:PORT]]", allow_hyphen_values = true, env = "MESHWRAP_SIDECAR",
          action = ArgAction::Append)]
    sidecar: Vec<String>,

    /// GET this URL until it answers 2xx before starting COMMAND. Repeatable;
    /// with several, every one must have answered 2xx once. The variable takes
    /// a comma-separated list.
    #[arg(long = "ready-url", value_name = "URL", allow_hyphen_values = true, env = "MESHWRAP_READY_URL", action = ArgAction::Append,
          default_value = DEFAULT_READY_URL)]
    ready_url: Vec<String>,

    /// POST (empty body) to this URL when COMMAND has ended. Repeatable; several
    /// are sent in parallel. The variable takes a comma-separated list.
    #[arg(long = "quit-url", value_name = "URL", allow_hyphen_values = true, env = "MESHWRAP_QUIT_URL", action = ArgAction::Append,
          default_value = DEFAULT_QUIT_URL)]
    quit_url: Vec<String>,

    /// Skip the readiness wait and start COMMAND at once. The variable takes true or false.
    #[arg(long = "no-wait", env = "MESHWRAP_NO_WAIT", action = ArgAction::SetTrue,
          value_parser = clap::value_parser!(String), default_value = "false")]
    no_wait: String,

    /// Whether the sidecars are Kubernetes native sidecars, which are waited
    /// for but never quit (the kubelet stops them): auto (decide from the pod
    /// annotations), true or false.
    #[arg(
        long = "native-sidecar",
        allow_hyphen_values = true,
        value_name = "auto|true|false",
        env = "MESHWRAP_NATIVE_SIDECAR",
        default_value = "auto"
    )]
    native_sidecar: String,

    /// The pod's annotations as the Downward API mounts them. They tell
    /// whether each preset's sidecar is in the pod (skipped if not) and whether
    /// Istio's is native. A missing file means nothing is known.
    #[arg(long = "pod-annotations", allow_hyphen_values = true, value_name = "FILE",
          env = "MESHWRAP_POD_ANNOTATIONS", default_value = crate::sidecar::pod::DEFAULT_PATH)]
    pod_annotations: String,

    /// After the wait, replace meshwrap with COMMAND (execve), leaving nothing
    /// between it and the kernel. Only when no quit is needed; the variable
    /// takes true or false.
    #[arg(long, env = "MESHWRAP_EXEC", action = ArgAction::SetTrue,
          value_parser = clap::value_parser!(String), default_value = "false")]
    exec: String,

    /// Bound on the whole readiness wait; 0 means no bound. Durations look like
    /// 500ms, 10s, 2m, 1h, 1m30s, or a number of seconds.
    #[arg(
        long,
        value_name = "DURATION",
        allow_hyphen_values = true,
        env = "MESHWRAP_TIMEOUT",
        default_value = "10m"
    )]
    timeout: String,

    /// What to do when --timeout runs out: fail (exit 125 without running
    /// COMMAND) or run (warn and run it anyway).
    #[arg(
        long = "on-timeout",
        allow_hyphen_values = true,
        value_name = "fail|run",
        env = "MESHWRAP_ON_TIMEOUT",
        default_value = "fail"
    )]
    on_timeout: String,

    /// When to quit the sidecar: always; on-success (for restartPolicy
    /// OnFailure, whose restarted container needs the sidecar); never.
    #[arg(
        long = "quit-policy",
        allow_hyphen_values = true,
        value_name = "always|on-success|never",
        env = "MESHWRAP_QUIT_POLICY",
        default_value = "always"
    )]
    quit_policy: String,

    /// Wait this long after COMMAND ends before quitting the sidecar (for a
    /// telemetry flush or an upload that needs the mesh). TERM, INT, HUP or
    /// QUIT cut it short.
    #[arg(
        long = "quit-delay",
        allow_hyphen_values = true,
        value_name = "DURATION",
        env = "MESHWRAP_QUIT_DELAY",
        default_value = "0"
    )]
    quit_delay: String,

    /// After a quit is accepted, poll until the sidecar's port stops answering
    /// (within --quit-timeout), and warn if it kept running. The variable
    /// takes true or false.
    #[arg(long = "verify-quit", env = "MESHWRAP_VERIFY_QUIT", action = ArgAction::SetTrue,
          value_parser = clap::value_parser!(String), default_value = "false")]
    verify_quit: String,

    /// Total budget for all quit requests, retries included.
    #[arg(
        long = "quit-timeout",
        allow_hyphen_values = true,
        value_name = "DURATION",
        env = "MESHWRAP_QUIT_TIMEOUT",
        default_value = "5s"
    )]
    quit_timeout: String,

    /// Bound on one HTTP request (connect and response).
    #[arg(
        long = "request-timeout",
        allow_hyphen_values = true,
        value_name = "DURATION",
        env = "MESHWRAP_REQUEST_TIMEOUT",
        default_value = "1s"
    )]
    request_timeout: String,

    /// Forward signals to COMMAND only (child), or to its whole process group (group).
    #[arg(
        long = "forward-to",
        allow_hyphen_values = true,
        value_name = "child|group",
        env = "MESHWRAP_FORWARD_TO",
        default_value = "child"
    )]
    forward_to: String,

    /// Log line format on stderr: text or json.
    #[arg(
        long = "log-format",
        allow_hyphen_values = true,
        value_name = "text|json",
        env = "MESHWRAP_LOG_FORMAT",
        default_value = "text"
    )]
    log_format: String,

    /// Log level: error, warn, info or debug.
    #[arg(long = "log-level", allow_hyphen_values = true, value_name = "LEVEL", env = "MESHWRAP_LOG", default_value = "info",
          conflicts_with_all = ["quiet", "verbose"])]
    log_level: String,

    /// Log errors only (--log-level error).
    #[arg(short, long, conflicts_with = "verbose")]
    quiet: bool,

    /// Log everything (--log-level debug).
    #[arg(short, long)]
    verbose: bool,

    /// A directory shared with `meshwrap guard` in another container of the
    /// pod (a small emptyDir): meshwrap locks it and records its run there, so
    /// the guard can quit the sidecar if the kernel kills meshwrap with the
    /// command (an OOM group kill).
    #[arg(
        long = "guard-dir",
        allow_hyphen_values = true,
        value_name = "DIR",
        env = "MESHWRAP_GUARD_DIR"
    )]
    guard_dir: Option<String>,

    /// meshwrap guard only: how long to wait for meshwrap's first run (or a
    /// restarted container's next one) before giving up; then, with
    /// --quit-policy always, quit the sidecar so the pod can complete. 0 means
    /// no bound. meshwrap itself ignores it, so both can share one option list.
    #[arg(
        long = "start-timeout",
        allow_hyphen_values = true,
        value_name = "DURATION",
        env = "MESHWRAP_START_TIMEOUT",
        default_value = "1h"
    )]
    start_timeout: String,

    /// Print the resolved settings, each with where it came from, and exit
    /// without waiting or running anything.
    #[arg(long)]
    explain: bool,

    /// The command to run and its arguments, passed as given (never through a shell).
    #[arg(value_name = "COMMAND", trailing_var_arg = true)]
    command: Vec<OsString>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnTimeout {
    Fail,
    Run,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuitPolicy {
    Always,
    OnSuccess,
    Never,
}

impl QuitPolicy {
    pub fn name(self) -> &'static str {
        match self {
            QuitPolicy::Always => "always",
            QuitPolicy::OnSuccess => "on-success",
            QuitPolicy::Never => "never",
        }
    }
}

/// Everything a run needs, checked.
#[derive(Clone, Debug)]
pub struct Config {
    pub ready_urls: Vec<Target>,
    pub quit_urls: Vec<Target>,
    pub native: Native,
    pub pod_annotations: PathBuf,
    pub exec: bool,
    pub wait: bool,
    /// `None`: wait for readiness without bound.
    pub timeout: Option<Duration>,
    pub on_timeout: OnTimeout,
    pub quit_policy: QuitPolicy,
    pub quit_delay: Duration,
    pub verify_quit: bool,
    pub quit_timeout: Duration,
    pub request_timeout: Duration,
    pub forward_to: ForwardTo,
    pub log_format: Format,
    pub log_level: Level,
    /// `--guard-dir`: where meshwrap and its guard meet.
    pub guard_dir: Option<PathBuf>,
    /// The guard's bound on waiting for a run to start; `None`: no bound.
    pub start_timeout: Option<Duration>,
    pub command: Vec<OsString>,
}

/// Which program the command line is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `meshwrap [OPTIONS] -- COMMAND`
    Wrap,
    /// `meshwrap guard [OPTIONS]`: the same options, no command.
    Guard,
}

/// What the command line asks for.
pub enum Parsed {
    Run(Config),
    /// Print this on stdout and exit 0 (`--help`, `--version`, `--explain`).
    Print(String),
    /// One line for stderr; exit 125.
    Invalid(String),
}

/// Parses and checks the command line and environment.
pub fn parse(args: impl IntoIterator<Item = OsString>, mode: Mode) -> Parsed {
    let command = match mode {
        Mode::Wrap => Args::command(),
        Mode::Guard => Args::command()
            .name("meshwrap guard")
            .override_usage("meshwrap guard --guard-dir DIR [OPTIONS]")
            .about(GUARD_ABOUT)
            .after_help(GUARD_AFTER_HELP)
            .mut_arg("command", |a| a.hide(true)),
    };
    let matches = match command.try_get_matches_from(args) {
        Ok(matches) => matches,
        Err(e) => {
            use clap::error::ErrorKind;
            return match e.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => Parsed::Print(e.to_string()),
                _ => Parsed::Invalid(first_line(&e.to_string())),
            };
        }
    };
    let args = match Args::from_arg_matches(&matches) {
        Ok(args) => args,
        Err(e) => return Parsed::Invalid(first_line(&e.to_string())),
    };
    match resolve(&args, &matches) {
        Ok((_, explained)) if args.explain => Parsed::Print(explain(&explained)),
        Ok((config, _)) if mode == Mode::Guard => match (&config.guard_dir, config.command.first()) {
            (None, _) => Parsed::Invalid(
                "meshwrap guard needs --guard-dir DIR (or MESHWRAP_GUARD_DIR): the directory shared with the wrapped meshwrap"
                    .into(),
            ),
            (_, Some(arg)) => Parsed::Invalid(format!(
                "meshwrap guard takes no COMMAND, but got '{}': give it meshwrap's options only",
                arg.to_string_lossy()
            )),
            (Some(_), None) => Parsed::Run(config),
        },
        Ok((config, _)) if config.command.is_empty() => {
            Parsed::Invalid("missing COMMAND: usage: meshwrap [OPTIONS] [--] <COMMAND> [ARG]...".into())
        }
        Ok((config, _)) => Parsed::Run(config),
        Err(line) => Parsed::Invalid(line),
    }
}

fn first_line(clap_error: &str) -> String {
    let line = clap_error.lines().next().unwrap_or("invalid command line");
    format!("{} (see meshwrap --help)", line.trim_start_matches("error: "))
}

/// Whether the user set this value (by flag or variable), not its default.
fn given(matches: &ArgMatches, id: &str) -> bool {
    !matches!(matches.value_source(id), Some(ValueSource::DefaultValue) | None)
}

/// Where a value came from, as `--explain` prints it.
#[derive(Clone, Copy)]
enum Origin {
    Flag(&'static str),
    Env(&'static str),
    Default(&'static str),
    Preset(&'static str),
    Scuttle(&'static str),
}

impl Origin {
    /// What to call the value in an error: what the user wrote.
    fn name(self) -> &'static str {
        match self {
            Origin::Flag(flag) | Origin::Default(flag) => flag,
            Origin::Env(var) | Origin::Preset(var) | Origin::Scuttle(var) => var,
        }
    }
    fn describe(self) -> String {
        match self {
            Origin::Flag(_) => "flag".into(),
            Origin::Env(var) => format!("env {var}"),
            Origin::Default(_) => "default".into(),
            Origin::Preset(name) => format!("preset {name}"),
            Origin::Scuttle(var) => format!("scuttle env {var}"),
        }
    }
}

/// Resolves values in order, recording each for `--explain`.
struct Resolver<'m> {
    matches: &'m ArgMatches,
    explain: Explained,
}

impl Resolver<'_> {
    fn origin(&self, id: &str, flag: &'static str, env: &'static str) -> Origin {
        match self.matches.value_source(id) {
            Some(ValueSource::CommandLine) => Origin::Flag(flag),
            Some(ValueSource::EnvVariable) => Origin::Env(env),
            _ => Origin::Default(flag),
        }
    }

    /// One value, checked by `check`, which returns `None` when it is invalid.
    fn one<T>(
        &mut self,
        (id, flag, env): (&str, &'static str, &'static str),
        raw: &str,
        accepts: &str,
        check: impl Fn(&str) -> Option<T>,
    ) -> Result<T, String> {
        let origin = self.origin(id, flag, env);
        let value = check(raw).ok_or_else(|| format!("invalid {} '{raw}': expected {accepts}", origin.name()))?;
        self.explain.push((&flag[2..], raw.to_string(), origin));
        Ok(value)
    }

    /// scuttle's value for a setting the user did not give, recorded for `--explain`.
    fn scuttled<T: Copy>(
        &mut self,
        id: &str,
        name: &'static str,
        value: Option<(T, &'static str)>,
        shown: impl Fn(T) -> String,
    ) -> Option<T> {
        let (value, var) = value.filter(|_| !given(self.matches, id))?;
        self.explain.push((name, shown(value), Origin::Scuttle(var)));
        Some(value)
    }

    /// The sidecar presets; empty when none was given (Istio's endpoints are then the defaults).
    fn sidecars(&mut self, raw: &[String]) -> Result<Vec<Sidecar>, String> {
        let origin = self.origin("sidecar", "--sidecar", "MESHWRAP_SIDECAR");
        let items = list_items(origin, raw);
        let mut sidecars = Vec::new();
        for item in &items {
            let sidecar = preset::parse(item).map_err(|why| {
                format!(
                    "invalid {} '{item}': {why}; expected {}",
                    origin.name(),
                    preset::accepts()
                )
            })?;
            sidecars.push(sidecar);
        }
        if !sidecars.is_empty() {
            self.explain.push(("sidecar", items.join(","), origin));
            for s in &sidecars {
                let by = Origin::Preset(s.preset.name);
                for (kind, endpoint) in [("ready-url", &s.ready), ("quit-url", &s.quit)] {
                    if let Some(endpoint) = endpoint {
                        self.explain.push((kind, endpoint.url.clone(), by));
                    }
                }
            }
        }
        Ok(sidecars)
    }

    /// A repeatable URL list; the variable's form is comma-separated.
    fn urls(
        &mut self,
        (id, flag, env): (&str, &'static str, &'static str),
        raw: &[String],
    ) -> Result<Vec<Endpoint>, String> {
        let origin = self.origin(id, flag, env);
        let items = list_items(origin, raw);
        let mut endpoints = Vec::new();
        for item in &items {
            if item.is_empty() {
                return Err(format!(
                    "invalid {}: an empty URL in the list; expected {}",
                    origin.name(),
                    http::ACCEPTS
                ));
            }
            let endpoint = Endpoint::parse(item)
                .map_err(|why| format!("invalid {} '{item}': {why}; expected {}", origin.name(), http::ACCEPTS))?;
            endpoints.push(endpoint);
        }
        self.explain.push((&flag[2..], items.join(","), origin));
        Ok(endpoints)
    }
}

/// A repeatable value's items: one per flag, or the variable's comma-separated list.
fn list_items(origin: Origin, raw: &[String]) -> Vec<&str> {
    match origin {
        Origin::Env(_) => raw.iter().flat_map(|v| v.split(',')).map(str::trim).collect(),
        _ => raw.iter().map(String::as_str).collect(),
    }
}

fn choice<T: Copy>(options: &[(&str, T)]) -> impl Fn(&str) -> Option<T> {
    move |raw| {
        options
            .iter()
            .find(|(name, _)| raw.eq_ignore_ascii_case(name))
            .map(|(_, v)| *v)
    }
}

fn positive_duration(raw: &str) -> Option<Duration> {
    duration::parse(raw).filter(|d| !d.is_zero())
}

/// Every setting's value and origin, in order, for `--explain`.
type Explained = Vec<(&'static str, String, Origin)>;

/// The `--explain` table; built only when asked for (formatting it costs a
/// tenth of meshwrap's start-up instructions).
fn explain(explained: &Explained) -> String {
    let width = explained.iter().map(|(_, value, _)| value.len()).max().unwrap_or(0);
    explained
        .iter()
        .map(|(name, value, origin)| format!("{name:<16} {value:<width$}  ({})\n", origin.describe()))
        .collect()
}

fn resolve(args: &Args, matches: &ArgMatches) -> Result<(Config, Explained), String> {
    let mut r = Resolver {
        matches,
        explain: Vec::new(),
    };
    // Presets contribute endpoints; explicit URLs add to them. With no preset,
    // Istio's URLs are each URL flag's default, as they always were.
    let sidecars = r.sidecars(&args.sidecar)?;
    let given = |id| given(matches, id);
    // A default URL is Istio's, so it is skipped with Istio when the pod has none.
    let tag = |id| (!given(id)).then_some(&preset::PRESETS[0]);
    let mut ready_urls: Vec<Target> = sidecars
        .iter()
        .filter_map(|s| {
            s.ready.clone().map(|endpoint| Target {
                endpoint,
                preset: Some(s.preset),
            })
        })
        .collect();
    let scuttle = crate::scuttle::from_env()?;
    // scuttle's URLs stand in for the defaults, never for what was given.
    let scuttle_urls =
        |given: bool, urls: Option<&Vec<(String, &'static str)>>, kind: &'static str, r: &mut Resolver| {
            let Some(urls) = urls.filter(|_| !given && sidecars.is_empty()) else {
                return Ok(None);
            };
            let mut targets = Vec::new();
            for (url, var) in urls {
                let endpoint = Endpoint::parse(url)
                    .map_err(|why| format!("invalid {var} '{url}': {why}; expected {}", http::ACCEPTS))?;
                r.explain.push((kind, url.clone(), Origin::Scuttle(var)));
                targets.push(Target { endpoint, preset: None });
            }
            Ok::<_, String>(Some(targets))
        };
    if let Some(targets) = scuttle_urls(
        given("ready_url"),
        scuttle.as_ref().map(|s| &s.ready),
        "ready-url",
        &mut r,
    )? {
        ready_urls = targets;
    } else if sidecars.is_empty() || given("ready_url") {
        let explicit = r.urls(("ready_url", "--ready-url", "MESHWRAP_READY_URL"), &args.ready_url)?;
        ready_urls.extend(explicit.into_iter().map(|endpoint| Target {
            endpoint,
            preset: tag("ready_url"),
        }));
    }
    let mut quit_urls: Vec<Target> = sidecars
        .iter()
        .filter_map(|s| {
            s.quit.clone().map(|endpoint| Target {
                endpoint,
                preset: Some(s.preset),
            })
        })
        .collect();
    if let Some(targets) = scuttle_urls(given("quit_url"), scuttle.as_ref().map(|s| &s.quit), "quit-url", &mut r)? {
        quit_urls = targets;
    } else if sidecars.is_empty() || given("quit_url") {
        let explicit = r.urls(("quit_url", "--quit-url", "MESHWRAP_QUIT_URL"), &args.quit_url)?;
        quit_urls.extend(explicit.into_iter().map(|endpoint| Target {
            endpoint,
            preset: tag("quit_url"),
        }));
    }
    let no_wait = match r.scuttled(
        "no_wait",
        "no-wait",
        scuttle.as_ref().and_then(|s| s.no_wait).map(|var| (true, var)),
        |_| "true".to_string(),
    ) {
        Some(value) => value,
        None => r.one(
            ("no_wait", "--no-wait", "MESHWRAP_NO_WAIT"),
            &args.no_wait,
            "true or false",
            choice(&[("true", true), ("false", false)]),
        )?,
    };
    let timeout = match r.scuttled(
        "timeout",
        "timeout",
        scuttle.as_ref().and_then(|s| s.timeout).map(|(t, _, var)| (t, var)),
        duration::format,
    ) {
        Some(value) => value,
        None => r.one(
            ("timeout", "--timeout", "MESHWRAP_TIMEOUT"),
            &args.timeout,
            &format!("{} (0 for no bound)", duration::ACCEPTS),
            duration::parse,
        )?,
    };
    let native = r.one(
        ("native_sidecar", "--native-sidecar", "MESHWRAP_NATIVE_SIDECAR"),
        &args.native_sidecar,
        "auto, true or false",
        choice(&[("auto", Native::Auto), ("true", Native::Yes), ("false", Native::No)]),
    )?;
    let pod_annotations = r.one(
        ("pod_annotations", "--pod-annotations", "MESHWRAP_POD_ANNOTATIONS"),
        &args.pod_annotations,
        "a file path",
        |raw| (!raw.is_empty()).then(|| PathBuf::from(raw)),
    )?;
    let exec = r.one(
        ("exec", "--exec", "MESHWRAP_EXEC"),
        &args.exec,
        "true or false",
        choice(&[("true", true), ("false", false)]),
    )?;
    let on_timeout = match r.scuttled(
        "on_timeout",
        "on-timeout",
        scuttle
            .as_ref()
            .and_then(|s| s.timeout)
            .map(|(_, fail, var)| (if fail { OnTimeout::Fail } else { OnTimeout::Run }, var)),
        |v| {
            if v == OnTimeout::Fail {
                "fail".to_string()
            } else {
                "run".to_string()
            }
        },
    ) {
        Some(value) => value,
        None => r.one(
            ("on_timeout", "--on-timeout", "MESHWRAP_ON_TIMEOUT"),
            &args.on_timeout,
            "fail or run",
            choice(&[("fail", OnTimeout::Fail), ("run", OnTimeout::Run)]),
        )?,
    };
    let quit_policy = match r.scuttled(
        "quit_policy",
        "quit-policy",
        scuttle.as_ref().and_then(|s| s.quit_policy),
        |p| p.name().to_string(),
    ) {
        Some(value) => value,
        None => r.one(
            ("quit_policy", "--quit-policy", "MESHWRAP_QUIT_POLICY"),
            &args.quit_policy,
            "always, on-success or never",
            choice(&[
                ("always", QuitPolicy::Always),
                ("on-success", QuitPolicy::OnSuccess),
                ("never", QuitPolicy::Never),
            ]),
        )?,
    };
    let quit_delay = r.one(
        ("quit_delay", "--quit-delay", "MESHWRAP_QUIT_DELAY"),
        &args.quit_delay,
        duration::ACCEPTS,
        duration::parse,
    )?;
    let verify_quit = r.one(
        ("verify_quit", "--verify-quit", "MESHWRAP_VERIFY_QUIT"),
        &args.verify_quit,
        "true or false",
        choice(&[("true", true), ("false", false)]),
    )?;
    let above_zero = format!("{} above 0", duration::ACCEPTS);
    let quit_timeout = r.one(
        ("quit_timeout", "--quit-timeout", "MESHWRAP_QUIT_TIMEOUT"),
        &args.quit_timeout,
        &above_zero,
        positive_duration,
    )?;
    let request_timeout = r.one(
        ("request_timeout", "--request-timeout", "MESHWRAP_REQUEST_TIMEOUT"),
        &args.request_timeout,
        &above_zero,
        positive_duration,
    )?;
    let forward_to = r.one(
        ("forward_to", "--forward-to", "MESHWRAP_FORWARD_TO"),
        &args.forward_to,
        "child or group",
        choice(&[("child", ForwardTo::Child), ("group", ForwardTo::Group)]),
    )?;
    let log_format = r.one(
        ("log_format", "--log-format", "MESHWRAP_LOG_FORMAT"),
        &args.log_format,
        "text or json",
        choice(&[("text", Format::Text), ("json", Format::Json)]),
    )?;
    let log_level = if args.quiet || args.verbose {
        let (flag, level) = if args.quiet {
            ("--quiet", Level::Error)
        } else {
            ("--verbose", Level::Debug)
        };
        r.explain.push(("log-level", level.name().into(), Origin::Flag(flag)));
        level
    } else if let Some(level) = r.scuttled(
        "log_level",
        "log-level",
        scuttle.as_ref().and_then(|s| s.log_level),
        |l| l.name().to_string(),
    ) {
        level
    } else {
        r.one(
            ("log_level", "--log-level", "MESHWRAP_LOG"),
            &args.log_level,
            "error, warn, info or debug",
            choice(&[
                ("error", Level::Error),
                ("warn", Level::Warn),
                ("info", Level::Info),
                ("debug", Level::Debug),
            ]),
        )?
    };
    let guard_dir = match &args.guard_dir {
        Some(raw) => Some(r.one(
            ("guard_dir", "--guard-dir", "MESHWRAP_GUARD_DIR"),
            raw,
            "a directory path",
            |raw| (!raw.is_empty()).then(|| PathBuf::from(raw)),
        )?),
        None => None,
    };
    let start_timeout = r.one(
        ("start_timeout", "--start-timeout", "MESHWRAP_START_TIMEOUT"),
        &args.start_timeout,
        &format!("{} (0 for no bound)", duration::ACCEPTS),
        duration::parse,
    )?;
    let command = args.command.clone();
    let shown: Vec<String> = command.iter().map(|a| a.to_string_lossy().into_owned()).collect();
    let shown = if shown.is_empty() {
        "(none)".to_string()
    } else {
        shown.join(" ")
    };
    r.explain.push(("command", shown, Origin::Flag("COMMAND")));

    let config = Config {
        ready_urls,
        quit_urls,
        native,
        pod_annotations,
        exec,
        wait: !no_wait,
        timeout: Some(timeout).filter(|t| !t.is_zero()),
        on_timeout,
        quit_policy,
        quit_delay,
        verify_quit,
        quit_timeout,
        request_timeout,
        forward_to,
        log_format,
        log_level,
        guard_dir,
        start_timeout: Some(start_timeout).filter(|t| !t.is_zero()),
        command,
    };
    Ok((config, r.explain))
}

#[cfg(test)]
mod tests {
    #[test]
    fn clap_definitions_are_consistent() {
        <super::Args as clap::CommandFactory>::command().debug_assert();
    }
}
