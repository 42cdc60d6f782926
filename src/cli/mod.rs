//! The front door: the command line and the environment, resolved into one
//! plain [`Config`](crate::config::Config).
//!
//! [`args`] is clap's view (flags, variables, defaults, help text);
//! [`resolve`] turns those strings, the presets and scuttle's variables into
//! checked values in named steps, and records where each came from for
//! `--explain`. Nothing here waits, runs or writes: a bad value is one line
//! on stderr and exit 125 before the engine sees anything.

pub mod args;
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

/// Parses and checks the command line and environment.
pub fn parse(args: impl IntoIterator<Item = OsString>, mode: Mode) -> Parsed {
    let command = match mode {
        Mode::Wrap => Args::command(),
        Mode::Guard => Args::command()
            .name("meshwrap guard")
            .override_usage("meshwrap guard --guard-dir DIR [OPTIONS]")
            .about(args::GUARD_ABOUT)
            .after_help(args::GUARD_AFTER_HELP)
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
    match resolve::resolve(&args, &matches) {
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

fn first_line(clap_error: &str) -> String {
    let line = clap_error.lines().next().unwrap_or("invalid command line");
    format!("{} (see meshwrap --help)", line.trim_start_matches("error: "))
}
