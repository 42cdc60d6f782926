//! The front door: the command line and the environment, resolved into one
//! plain [`Config`](crate::config::Config).
//!
//! [`args`] is clap's view (flags, variables, defaults, help text);
//! [`quick`] reads the common command line into the same strings without
//! building clap's command, and leaves everything else to clap;
//! [`resolve`] turns those strings, the presets and scuttle's variables into
//! checked values in named steps, and records where each came from for
//! `--explain`. Nothing here waits, runs or writes: a bad value is one line
//! on stderr and exit 125 before the engine sees anything.

pub mod args;
pub mod quick;
pub mod resolve;

use std::ffi::OsString;

use clap::{CommandFactory, FromArgMatches};

pub use args::{DEFAULT_QUIT_URL, DEFAULT_READY_URL};

use crate::config::Config;
use args::Args;

/// Which program the command line is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `meshwrap [OPTIONS] -- COMMAND`
    Wrap,
    /// `meshwrap guard [OPTIONS]`: the same options, no command.
    Guard,
}

/// What the command line asks for. Made once per process, so its size does
/// not matter (boxing the configuration would only add code).
#[allow(clippy::large_enum_variant)]
pub enum Parsed {
    Run(Config),
    /// Print this on stdout and exit 0 (`--help`, `--version`, `--explain`).
    Print(String),
    /// One line for stderr; exit 125.
    Invalid(String),
}

/// Where the user's value for an option came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Flag,
    Env,
    Default,
}

/// Each option's [`Source`] by clap's id; an option with no value is absent.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Sources(pub Vec<(&'static str, Source)>);

impl Sources {
    pub fn get(&self, id: &str) -> Option<Source> {
        self.0.iter().find(|(known, _)| *known == id).map(|&(_, source)| source)
    }

    fn of(matches: &clap::ArgMatches) -> Sources {
        use clap::parser::ValueSource;
        let sources = quick::OPTIONS.iter().filter_map(|opt| {
            let source = match matches.value_source(opt.id)? {
                ValueSource::CommandLine => Source::Flag,
                ValueSource::EnvVariable => Source::Env,
                _ => Source::Default,
            };
            Some((opt.id, source))
        });
        Sources(sources.collect())
    }
}

/// Parses and checks the command line and environment.
pub fn parse(args: Vec<OsString>, mode: Mode) -> Parsed {
    // One pass over the environment for the flags' variables (`environ`).
    let environ = crate::environ::Environ::with_prefix("MESHWRAP_");
    let read = match quick::parse(&args, |name| environ.var_os(name)) {
        Some(read) => Ok(read),
        None => by_clap(args, mode),
    };
    let (args, sources) = match read {
        Ok(read) => read,
        Err(e) => {
            use clap::error::ErrorKind;
            return match e.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => Parsed::Print(e.to_string()),
                _ => Parsed::Invalid(first_line(&e.to_string())),
            };
        }
    };
    match resolve::resolve(&args, &sources) {
        Ok((config, mut explained)) if args.explain => {
            resolve::pod_decisions(&config, &mut explained);
            Parsed::Print(resolve::explain(&explained))
        }
        Ok((config, _)) => match resolve::check(&config, mode) {
            Ok(()) => Parsed::Run(config),
            Err(line) => Parsed::Invalid(line),
        },
        Err(line) => Parsed::Invalid(line),
    }
}

/// clap's parse of the whole command line: help, version, errors, and every
/// line [`quick`] leaves to it.
pub fn by_clap(args: impl IntoIterator<Item = OsString>, mode: Mode) -> Result<(Args, Sources), clap::Error> {
    let command = match mode {
        Mode::Wrap => Args::command(),
        Mode::Guard => Args::command()
            .name("meshwrap guard")
            .override_usage("meshwrap guard --guard-dir DIR [OPTIONS]")
            .about(args::GUARD_ABOUT)
            .after_help(args::GUARD_AFTER_HELP)
            .mut_arg("command", |a| a.hide(true)),
    };
    let mut matches = command.try_get_matches_from(args)?;
    let sources = Sources::of(&matches);
    Ok((Args::from_arg_matches_mut(&mut matches)?, sources))
}

fn first_line(clap_error: &str) -> String {
    let line = clap_error.lines().next().unwrap_or("invalid command line");
    format!("{} (see meshwrap --help)", line.trim_start_matches("error: "))
}
