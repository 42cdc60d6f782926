//! Resolution: clap's strings, the presets and scuttle's variables become a
//! checked [`Config`], in named steps that each record where their values
//! came from (for `--explain` and for error lines that name what the user
//! actually wrote: "--timeout" or "MESHWRAP_TIMEOUT").
//!
//! The steps, in the order `--explain` lists them:
//! 1. [`endpoints`]: the sidecar presets, then scuttle's URLs or the URL
//!    flags (with no preset, Istio's URLs are the URL flags' defaults);
//! 2. [`wait`]: whether, how long, how often ([`poll`]), and what a timeout does;
//! 3. [`pod`]: native sidecars, the pod annotations file, `--exec`;
//! 4. [`quitting`]: the quit policy, delay, verification and budgets;
//! 5. [`logging`] and the guard's settings;
//! 6. [`check`]: what no single option can say (a guard needs a directory and
//!    no command; a run needs a command).
//!
//! A scuttle variable stands in for a setting only where the user gave
//! neither meshwrap's flag nor its variable. The pod's annotations are facts
//! of the pod, not settings: the engine reads them when the run starts
//! (`sidecar::plan`), so the guard and the wrapper decide from the same file.

use std::path::PathBuf;
use std::time::Duration;

use super::args::Args;
use super::{Mode, Source, Sources};
use crate::config::{Config, OnTimeout, QuitPolicy};
use crate::duration;
use crate::log::{Format, Level};
use crate::scuttle::Scuttle;
use crate::sidecar::http;
use crate::sidecar::preset::{self, Sidecar};
use crate::sidecar::quit::Target;
use crate::sidecar::ready::Profile;
use crate::sidecar::{Endpoint, Native};
use crate::supervise::ForwardTo;

/// Resolves every setting; the error is one line naming what was wrong.
pub fn resolve(args: &Args, sources: &Sources) -> Result<(Config, Explained), String> {
    let mut r = Resolver {
        sources,
        explain: Vec::new(),
        auto: false,
    };
    let scuttle = crate::scuttle::from_env()?;
    let scuttle = scuttle.as_ref();
    let (ready_urls, quit_urls) = endpoints(&mut r, args, scuttle)?;
    let (wait, timeout) = wait(&mut r, args, scuttle)?;
    let poll = poll(&mut r, args)?;
    let (native, pod_annotations, exec) = pod(&mut r, args)?;
    let on_timeout = on_timeout(&mut r, args, scuttle)?;
    let q = quitting(&mut r, args, scuttle)?;
    let forward_to = r.one(
        ("forward_to", "--forward-to", "MESHWRAP_FORWARD_TO"),
        &args.forward_to,
        "child or group",
        choice(&[("child", ForwardTo::Child), ("group", ForwardTo::Group)]),
    )?;
    let (log_format, log_level) = logging(&mut r, args, scuttle)?;
    let (guard_dir, start_timeout) = guard(&mut r, args)?;
    let termination_log = r.one(
        ("termination_log", "--termination-log", "MESHWRAP_TERMINATION_LOG"),
        &args.termination_log,
        "a file path, or empty for none",
        |raw| Some((!raw.is_empty()).then(|| PathBuf::from(raw))),
    )?;
    r.explain
        .push(("command", shown_command(args), Origin::Flag("COMMAND")));
    let config = Config {
        ready_urls,
        quit_urls,
        auto: r.auto,
        native,
        pod_annotations,
        exec,
        wait,
        poll,
        timeout,
        on_timeout,
        quit_policy: q.policy,
        no_quit_on_exit: q.no_quit_on_exit,
        quit_delay: q.delay,
        verify_quit: q.verify,
        quit_timeout: q.timeout,
        request_timeout: q.request_timeout,
        forward_to,
        log_format,
        log_level,
        termination_log,
        guard_dir,
        start_timeout,
        command: args.command.clone(),
    };
    Ok((config, r.explain))
}

/// The checks between options, after every value is valid on its own.
pub fn check(config: &Config, mode: Mode) -> Result<(), String> {
    match (mode, &config.guard_dir, config.command.first()) {
        (Mode::Guard, None, _) => Err(
            "meshwrap guard needs --guard-dir DIR (or MESHWRAP_GUARD_DIR): the directory shared with the wrapped meshwrap"
                .into(),
        ),
        (Mode::Guard, _, Some(arg)) => Err(format!(
            "meshwrap guard takes no COMMAND, but got '{}': give it meshwrap's options only",
            arg.to_string_lossy()
        )),
        (Mode::Wrap, _, None) => Err("missing COMMAND: usage: meshwrap [OPTIONS] [--] <COMMAND> [ARG]...".into()),
        _ => Ok(()),
    }
}

/// Step 1: the ready and quit URLs. Presets contribute endpoints; explicit
/// URLs add to them. scuttle's URLs stand in for the defaults, never for
/// what was given.
fn endpoints(r: &mut Resolver, args: &Args, scuttle: Option<&Scuttle>) -> Result<(Vec<Target>, Vec<Target>), String> {
    // auto by default, unless URLs or scuttle's variables say where to go.
    let auto_by_default = scuttle.is_none() && !given(r.sources, "ready_url") && !given(r.sources, "quit_url");
    let sidecars = r.sidecars(&args.sidecar, auto_by_default)?;
    let ready = r.targets(
        &sidecars,
        |s| &s.ready,
        ("ready_url", "--ready-url", "MESHWRAP_READY_URL"),
        &args.ready_url,
        scuttle.map(|s| &s.ready),
    )?;
    let quit = r.targets(
        &sidecars,
        |s| &s.quit,
        ("quit_url", "--quit-url", "MESHWRAP_QUIT_URL"),
        &args.quit_url,
        scuttle.map(|s| &s.quit),
    )?;
    Ok((ready, quit))
}

/// Step 2: whether to wait, and the bound on it (`None`: no bound).
fn wait(r: &mut Resolver, args: &Args, scuttle: Option<&Scuttle>) -> Result<(bool, Option<Duration>), String> {
    let scuttled = scuttle.and_then(|s| s.no_wait).map(|var| (true, var));
    let no_wait = match r.scuttled("no_wait", "no-wait", scuttled, |_| "true".to_string()) {
        Some(value) => value,
        None => r.one(
            ("no_wait", "--no-wait", "MESHWRAP_NO_WAIT"),
            &args.no_wait,
            "true or false",
            boolean,
        )?,
    };
    let scuttled = scuttle.and_then(|s| s.timeout).map(|(t, _, var)| (t, var));
    let timeout = match r.scuttled("timeout", "timeout", scuttled, duration::format) {
        Some(value) => value,
        None => r.one(
            ("timeout", "--timeout", "MESHWRAP_TIMEOUT"),
            &args.timeout,
            &format!("{} (0 for no bound)", duration::ACCEPTS),
            duration::parse,
        )?,
    };
    Ok((!no_wait, Some(timeout).filter(|t| !t.is_zero())))
}

/// Step 3: what meshwrap is told about the pod, and whether it stays.
fn pod(r: &mut Resolver, args: &Args) -> Result<(Native, PathBuf, bool), String> {
    let native = r.one(
        ("native_sidecar", "--native-sidecar", "MESHWRAP_NATIVE_SIDECAR"),
        &args.native_sidecar,
        "auto, true or false",
        choice(&[("auto", Native::Auto), ("true", Native::Yes), ("false", Native::No)]),
    )?;
    let annotations = r.one(
        ("pod_annotations", "--pod-annotations", "MESHWRAP_POD_ANNOTATIONS"),
        &args.pod_annotations,
        "a file path",
        path,
    )?;
    let exec = r.one(
        ("exec", "--exec", "MESHWRAP_EXEC"),
        &args.exec,
        "true or false",
        boolean,
    )?;
    Ok((native, annotations, exec))
}

/// Step 2, continued: how the wait spends its polls.
fn poll(r: &mut Resolver, args: &Args) -> Result<Profile, String> {
    r.one(
        ("poll", "--poll", "MESHWRAP_POLL"),
        &args.poll,
        "fast or frugal",
        choice(&[("fast", Profile::Fast), ("frugal", Profile::Frugal)]),
    )
}

/// What a run out of `--timeout` does (scuttle's START_WITHOUT_ENVOY says too).
fn on_timeout(r: &mut Resolver, args: &Args, scuttle: Option<&Scuttle>) -> Result<OnTimeout, String> {
    let scuttled = scuttle
        .and_then(|s| s.timeout)
        .map(|(_, fail, var)| (if fail { OnTimeout::Fail } else { OnTimeout::Run }, var));
    let shown = |v| if v == OnTimeout::Fail { "fail" } else { "run" }.to_string();
    match r.scuttled("on_timeout", "on-timeout", scuttled, shown) {
        Some(value) => Ok(value),
        None => r.one(
            ("on_timeout", "--on-timeout", "MESHWRAP_ON_TIMEOUT"),
            &args.on_timeout,
            "fail or run",
            choice(&[("fail", OnTimeout::Fail), ("run", OnTimeout::Run)]),
        ),
    }
}

/// The quit settings, resolved together.
struct Quitting {
    policy: QuitPolicy,
    no_quit_on_exit: Vec<(u8, u8)>,
    delay: Duration,
    verify: bool,
    timeout: Duration,
    request_timeout: Duration,
}

/// Step 4: when and how the sidecars are told to quit.
fn quitting(r: &mut Resolver, args: &Args, scuttle: Option<&Scuttle>) -> Result<Quitting, String> {
    let scuttled = scuttle.and_then(|s| s.quit_policy);
    let policy = match r.scuttled("quit_policy", "quit-policy", scuttled, |p| p.name().to_string()) {
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
    let no_quit_on_exit = r.one(
        ("no_quit_on_exit", "--no-quit-on-exit", "MESHWRAP_NO_QUIT_ON_EXIT"),
        &args.no_quit_on_exit,
        "exit codes from 0 to 255 and ranges, comma-separated (e.g. 42,43 or 2-255)",
        exit_codes,
    )?;
    let delay = r.one(
        ("quit_delay", "--quit-delay", "MESHWRAP_QUIT_DELAY"),
        &args.quit_delay,
        duration::ACCEPTS,
        duration::parse,
    )?;
    let verify = r.one(
        ("verify_quit", "--verify-quit", "MESHWRAP_VERIFY_QUIT"),
        &args.verify_quit,
        "true or false",
        boolean,
    )?;
    let above_zero = format!("{} above 0", duration::ACCEPTS);
    let timeout = r.one(
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
    Ok(Quitting {
        policy,
        no_quit_on_exit,
        delay,
        verify,
        timeout,
        request_timeout,
    })
}

/// Step 5: the log's format and level (`-q` and `-v` win over the level).
fn logging(r: &mut Resolver, args: &Args, scuttle: Option<&Scuttle>) -> Result<(Format, Level), String> {
    let format = r.one(
        ("log_format", "--log-format", "MESHWRAP_LOG_FORMAT"),
        &args.log_format,
        "text or json",
        choice(&[("text", Format::Text), ("json", Format::Json)]),
    )?;
    if args.quiet || args.verbose {
        let (flag, level) = if args.quiet {
            ("--quiet", Level::Error)
        } else {
            ("--verbose", Level::Debug)
        };
        r.explain.push(("log-level", level.name().into(), Origin::Flag(flag)));
        return Ok((format, level));
    }
    let scuttled = scuttle.and_then(|s| s.log_level);
    if let Some(level) = r.scuttled("log_level", "log-level", scuttled, |l| l.name().to_string()) {
        return Ok((format, level));
    }
    let level = r.one(
        ("log_level", "--log-level", "MESHWRAP_LOG"),
        &args.log_level,
        "error, warn, info or debug",
        choice(&[
            ("error", Level::Error),
            ("warn", Level::Warn),
            ("info", Level::Info),
            ("debug", Level::Debug),
        ]),
    )?;
    Ok((format, level))
}

/// Step 5, continued: where meshwrap and its guard meet, and the guard's
/// bound on waiting for a run (`None`: no bound).
fn guard(r: &mut Resolver, args: &Args) -> Result<(Option<PathBuf>, Option<Duration>), String> {
    let dir = match &args.guard_dir {
        Some(raw) => Some(r.one(
            ("guard_dir", "--guard-dir", "MESHWRAP_GUARD_DIR"),
            raw,
            "a directory path",
            path,
        )?),
        None => None,
    };
    let start_timeout = r.one(
        ("start_timeout", "--start-timeout", "MESHWRAP_START_TIMEOUT"),
        &args.start_timeout,
        &format!("{} (0 for no bound)", duration::ACCEPTS),
        duration::parse,
    )?;
    Ok((dir, Some(start_timeout).filter(|t| !t.is_zero())))
}

/// The command as `--explain` shows it.
fn shown_command(args: &Args) -> String {
    let shown: Vec<String> = args.command.iter().map(|a| a.to_string_lossy().into_owned()).collect();
    if shown.is_empty() {
        "(none)".to_string()
    } else {
        shown.join(" ")
    }
}

/// `42,43`, `2-255`: inclusive ranges of exit codes; empty for none.
fn exit_codes(raw: &str) -> Option<Vec<(u8, u8)>> {
    let code = |s: &str| s.trim().parse::<u8>().ok();
    if raw.trim().is_empty() {
        return Some(Vec::new());
    }
    raw.split(',')
        .map(|item| match item.split_once('-') {
            Some((low, high)) => code(low).zip(code(high)).filter(|(l, h)| l <= h),
            None => code(item).map(|c| (c, c)),
        })
        .collect()
}

/// The rows `--explain` adds for `--sidecar auto`: which key decided each
/// preset, by the run's own verdict (read only when explaining).
pub fn pod_decisions(config: &Config, explained: &mut Explained) {
    if !config.auto {
        return;
    }
    let read = crate::sidecar::pod::read(&config.pod_annotations);
    let facts = read.as_ref().map(Option::as_ref).map_err(String::as_str);
    for mesh in crate::meshes::MARKED {
        let verdict = crate::sidecar::verdict(mesh.name, facts, true);
        explained.push((mesh.name, verdict.why, Origin::Pod));
    }
}

fn boolean(raw: &str) -> Option<bool> {
    choice(&[("true", true), ("false", false)])(raw)
}

fn path(raw: &str) -> Option<PathBuf> {
    (!raw.is_empty()).then(|| PathBuf::from(raw))
}

/// Whether the user set this value (by flag or variable), not its default.
fn given(sources: &Sources, id: &str) -> bool {
    matches!(sources.get(id), Some(Source::Flag | Source::Env))
}

/// Where a value came from, as `--explain` prints it.
#[derive(Clone, Copy, Debug)]
pub enum Origin {
    Flag(&'static str),
    Env(&'static str),
    Default(&'static str),
    Preset(&'static str),
    Scuttle(&'static str),
    /// Decided by the pod's annotations file (`--sidecar auto`).
    Pod,
}

impl Origin {
    /// What to call the value in an error: what the user wrote.
    fn name(self) -> &'static str {
        match self {
            Origin::Flag(flag) | Origin::Default(flag) => flag,
            Origin::Env(var) | Origin::Preset(var) | Origin::Scuttle(var) => var,
            Origin::Pod => "--pod-annotations",
        }
    }
    fn describe(self) -> String {
        match self {
            Origin::Flag(_) => "flag".into(),
            Origin::Env(var) => format!("env {var}"),
            Origin::Default(_) => "default".into(),
            Origin::Preset(name) => format!("preset {name}"),
            Origin::Scuttle(var) => format!("scuttle env {var}"),
            Origin::Pod => "pod annotations".into(),
        }
    }
}

/// Resolves values in order, recording each for `--explain`.
struct Resolver<'m> {
    sources: &'m Sources,
    explain: Explained,
    /// `--sidecar auto` was given or taken by default.
    auto: bool,
}

impl Resolver<'_> {
    fn origin(&self, id: &str, flag: &'static str, env: &'static str) -> Origin {
        match self.sources.get(id) {
            Some(Source::Flag) => Origin::Flag(flag),
            Some(Source::Env) => Origin::Env(env),
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
        let (value, var) = value.filter(|_| !given(self.sources, id))?;
        self.explain.push((name, shown(value), Origin::Scuttle(var)));
        Some(value)
    }

    /// The sidecar presets; empty when none was given (Istio's endpoints are then the defaults).
    fn sidecars(&mut self, raw: &[String], auto_by_default: bool) -> Result<Vec<Sidecar>, String> {
        let origin = self.origin("sidecar", "--sidecar", "MESHWRAP_SIDECAR");
        let mut items = list_items(origin, raw);
        if items.is_empty() && auto_by_default {
            items.push("auto");
        }
        let mut sidecars = Vec::new();
        for item in &items {
            if item.eq_ignore_ascii_case("auto") {
                self.auto = true;
                sidecars.extend(preset::AUTO.iter().filter_map(|name| preset::parse(name).ok()));
                continue;
            }
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
                if let Some(no_quit) = s.preset.mesh.and_then(|m| m.no_quit.as_ref()) {
                    self.explain.push(("quit-url", format!("none: {}", no_quit.why), by));
                }
            }
        }
        Ok(sidecars)
    }

    /// One kind of URL (ready or quit): the presets' endpoints, then
    /// scuttle's URLs in place of the defaults, or the flag's URLs added (with
    /// no preset, the flag's default is Istio's, tagged so that it is skipped
    /// with Istio when the pod has none).
    fn targets(
        &mut self,
        sidecars: &[Sidecar],
        of: impl Fn(&Sidecar) -> &Option<Endpoint>,
        (id, flag, env): (&str, &'static str, &'static str),
        raw: &[String],
        scuttle: Option<&Vec<(String, &'static str)>>,
    ) -> Result<Vec<Target>, String> {
        let given = given(self.sources, id);
        if let Some(urls) = scuttle.filter(|_| !given && sidecars.is_empty()) {
            return self.scuttle_urls(&flag[2..], urls);
        }
        let mut targets: Vec<Target> = sidecars
            .iter()
            .filter_map(|s| {
                of(s).clone().map(|endpoint| Target {
                    endpoint,
                    preset: Some(s.preset),
                })
            })
            .collect();
        if sidecars.is_empty() || given {
            let preset = (!given).then_some(&preset::PRESETS[0]);
            let explicit = self.urls((id, flag, env), raw)?;
            targets.extend(explicit.into_iter().map(|endpoint| Target { endpoint, preset }));
        }
        Ok(targets)
    }

    /// scuttle's URLs of one kind, each named by its variable.
    fn scuttle_urls(&mut self, kind: &'static str, urls: &[(String, &'static str)]) -> Result<Vec<Target>, String> {
        let mut targets = Vec::new();
        for (url, var) in urls {
            let endpoint = Endpoint::parse(url)
                .map_err(|why| format!("invalid {var} '{url}': {why}; expected {}", http::ACCEPTS))?;
            self.explain.push((kind, url.clone(), Origin::Scuttle(var)));
            targets.push(Target { endpoint, preset: None });
        }
        Ok(targets)
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
pub type Explained = Vec<(&'static str, String, Origin)>;

/// The `--explain` table; built only when asked for (formatting it costs a
/// tenth of meshwrap's start-up instructions).
pub fn explain(explained: &Explained) -> String {
    let width = explained.iter().map(|(_, value, _)| value.len()).max().unwrap_or(0);
    explained
        .iter()
        .map(|(name, value, origin)| format!("{name:<16} {value:<width$}  ({})\n", origin.describe()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Resolves a command line (the test process's environment has no
    /// MESHWRAP_ or scuttle variables).
    fn resolved(line: &[&str]) -> Result<(Config, Explained), String> {
        let argv = std::iter::once("meshwrap").chain(line.iter().copied());
        let argv = argv.map(Into::into);
        let (args, sources) = super::super::by_clap(argv, Mode::Wrap).map_err(|e| e.to_string())?;
        resolve(&args, &sources)
    }

    fn config(line: &[&str]) -> Config {
        resolved(line).unwrap().0
    }

    fn urls(targets: &[Target]) -> Vec<(&str, Option<&str>)> {
        targets
            .iter()
            .map(|t| (t.endpoint.url.as_str(), t.preset.map(|p| p.name)))
            .collect()
    }

    #[test]
    fn endpoints_default_to_auto_over_the_marked_presets() {
        let c = config(&["--", "x"]);
        assert!(c.auto);
        assert_eq!(
            urls(&c.ready_urls),
            [
                ("http://127.0.0.1:15021/healthz/ready", Some("istio")),
                ("http://127.0.0.1:4191/ready", Some("linkerd")),
                ("http://127.0.0.1:3500/v1.0/healthz/outbound", Some("dapr")),
                ("http://127.0.0.1:19000/ready", Some("consul")),
                ("http://127.0.0.1:9902/ready", Some("kuma")),
            ]
        );
        let quits: Vec<_> = urls(&c.quit_urls).into_iter().map(|(_, p)| p.unwrap()).collect();
        assert_eq!(
            quits,
            ["istio", "linkerd", "vault", "dapr", "consul"],
            "Kuma is never quit"
        );
    }

    #[test]
    fn a_given_url_or_preset_turns_auto_off() {
        let c = config(&["--ready-url", "http://127.0.0.1:9/r", "--", "x"]);
        assert!(!c.auto);
        assert_eq!(urls(&c.ready_urls), [("http://127.0.0.1:9/r", None)]);
        assert_eq!(
            urls(&c.quit_urls),
            [("http://127.0.0.1:15020/quitquitquit", Some("istio"))]
        );
        assert!(!config(&["--sidecar", "linkerd", "--", "x"]).auto);
        assert!(config(&["--sidecar", "auto", "--sidecar", "cloudsql", "--", "x"]).auto);
    }

    #[test]
    fn no_quit_on_exit_takes_codes_and_ranges() {
        let c = config(&["--no-quit-on-exit", "42, 43,100-120", "--", "x"]);
        assert_eq!(c.no_quit_on_exit, [(42, 42), (43, 43), (100, 120)]);
        assert!(c.restarted_on(42) && c.restarted_on(110) && !c.restarted_on(0) && !c.restarted_on(121));
        assert!(config(&["--", "x"]).no_quit_on_exit.is_empty());
        for bad in ["256", "9-2", "x", "1,,2", "-1"] {
            let e = resolved(&["--no-quit-on-exit", bad, "--", "x"]).unwrap_err();
            assert!(
                e.starts_with(&format!("invalid --no-quit-on-exit '{bad}': expected exit codes")),
                "{e}"
            );
        }
    }

    #[test]
    fn endpoints_add_given_urls_to_the_presets_untagged() {
        let c = config(&["--sidecar", "linkerd", "--quit-url", "http://127.0.0.1:9/q", "--", "x"]);
        assert_eq!(urls(&c.ready_urls), [("http://127.0.0.1:4191/ready", Some("linkerd"))]);
        assert_eq!(
            urls(&c.quit_urls),
            [
                ("http://127.0.0.1:4191/shutdown", Some("linkerd")),
                ("http://127.0.0.1:9/q", None)
            ]
        );
    }

    #[test]
    fn endpoints_name_the_flag_of_a_bad_url() {
        let e = resolved(&["--ready-url", "ftp://x/", "--", "x"]).unwrap_err();
        assert!(e.starts_with("invalid --ready-url 'ftp://x/'"), "{e}");
        let e = resolved(&["--sidecar", "consulx", "--", "x"]).unwrap_err();
        assert!(e.starts_with("invalid --sidecar 'consulx'"), "{e}");
    }

    #[test]
    fn wait_zero_timeout_means_no_bound() {
        let c = config(&["--timeout", "0", "--no-wait", "--", "x"]);
        assert_eq!((c.wait, c.timeout), (false, None));
        assert_eq!(config(&["--", "x"]).timeout, Some(Duration::from_secs(600)));
    }

    #[test]
    fn poll_is_fast_unless_frugal_is_asked_for() {
        assert_eq!(config(&["--", "x"]).poll, Profile::Fast);
        assert_eq!(config(&["--poll", "frugal", "--", "x"]).poll, Profile::Frugal);
        assert_eq!(config(&["--poll", "FAST", "--", "x"]).poll, Profile::Fast);
        let e = resolved(&["--poll", "slow", "--", "x"]).unwrap_err();
        assert_eq!(e, "invalid --poll 'slow': expected fast or frugal");
    }

    #[test]
    fn pod_settings_are_checked() {
        assert_eq!(config(&["--native-sidecar", "TRUE", "--", "x"]).native, Native::Yes);
        let e = resolved(&["--pod-annotations", "", "--", "x"]).unwrap_err();
        assert_eq!(e, "invalid --pod-annotations '': expected a file path");
    }

    #[test]
    fn quitting_budgets_must_be_above_zero() {
        let e = resolved(&["--quit-timeout", "0", "--", "x"]).unwrap_err();
        assert!(
            e.starts_with("invalid --quit-timeout '0': expected ") && e.ends_with("above 0"),
            "{e}"
        );
        let c = config(&["--quit-policy", "on-success", "--quit-delay", "2s", "--", "x"]);
        assert_eq!(
            (c.quit_policy, c.quit_delay),
            (QuitPolicy::OnSuccess, Duration::from_secs(2))
        );
    }

    #[test]
    fn logging_flags_win_over_the_level() {
        assert_eq!(config(&["-q", "--", "x"]).log_level, Level::Error);
        assert_eq!(config(&["-v", "--", "x"]).log_level, Level::Debug);
        let e = resolved(&["--log-level", "loud", "--", "x"]).unwrap_err();
        assert!(e.starts_with("invalid --log-level 'loud'"), "{e}");
    }

    #[test]
    fn check_needs_a_command_or_a_guard_dir() {
        let wrap = config(&[]);
        assert!(check(&wrap, Mode::Wrap).unwrap_err().starts_with("missing COMMAND"));
        assert!(check(&wrap, Mode::Guard).unwrap_err().contains("needs --guard-dir"));
        let guard = config(&["--guard-dir", "/run/g", "--", "x"]);
        assert!(check(&guard, Mode::Guard).unwrap_err().contains("takes no COMMAND"));
        assert_eq!(check(&guard, Mode::Wrap), Ok(()));
    }

    #[test]
    fn explain_lists_every_setting_once_in_order() {
        let (_, explained) = resolved(&["--", "x"]).unwrap();
        let names: Vec<&str> = explained.iter().map(|(n, _, _)| *n).collect();
        assert_eq!(
            names,
            [
                "sidecar",
                "ready-url",
                "quit-url",
                "ready-url",
                "quit-url",
                "quit-url",
                "ready-url",
                "quit-url",
                "ready-url",
                "quit-url",
                "ready-url",
                "quit-url",
                "no-wait",
                "timeout",
                "poll",
                "native-sidecar",
                "pod-annotations",
                "exec",
                "on-timeout",
                "quit-policy",
                "no-quit-on-exit",
                "quit-delay",
                "verify-quit",
                "quit-timeout",
                "request-timeout",
                "forward-to",
                "log-format",
                "log-level",
                "start-timeout",
                "termination-log",
                "command"
            ]
        );
    }
}
