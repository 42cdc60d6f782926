//! The resolved configuration: what one run of meshwrap (or of `meshwrap
//! guard`) does, as plain checked values, with no trace of where each came
//! from.
//!
//! This is the contract between the front door and the engine. `cli` turns
//! flags, variables, presets and scuttle's variables into a [`Config`]; `run`,
//! `guard`, `sidecar` and `supervise` read it and never the command line, so a
//! value can never be half-parsed when the engine sees it, and the engine can
//! be driven by tests without clap. Nothing here does I/O.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use crate::log::{Format, Level};
use crate::sidecar::Native;
use crate::sidecar::quit::Target;
use crate::sidecar::ready::Profile;
use crate::supervise::ForwardTo;

/// meshwrap's own failures: bad usage, sidecar not ready, internal errors.
/// The command's own statuses (N, 128+S, 126, 127) come from `supervise`.
pub const EXIT_MESHWRAP_FAILED: u8 = 125;

/// Where the kubelet reads a container's termination message.
pub const DEFAULT_TERMINATION_LOG: &str = "/dev/termination-log";

/// What to do when the readiness wait runs out of `--timeout`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnTimeout {
    Fail,
    Run,
}

/// When to quit the sidecar after the command ends.
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
    /// `--sidecar auto`: the presets beyond Istio's are kept only where the
    /// pod's annotations show their injector's mark.
    pub auto: bool,
    pub native: Native,
    pub pod_annotations: PathBuf,
    pub exec: bool,
    pub wait: bool,
    /// `--poll`: how the readiness wait spends its polls.
    pub poll: Profile,
    /// `None`: wait for readiness without bound.
    pub timeout: Option<Duration>,
    pub on_timeout: OnTimeout,
    pub quit_policy: QuitPolicy,
    /// Exit codes on which the kubelet restarts the container in place
    /// (`restartPolicyRules`): no quit then, inclusive ranges.
    pub no_quit_on_exit: Vec<(u8, u8)>,
    pub quit_delay: Duration,
    pub verify_quit: bool,
    pub quit_timeout: Duration,
    pub request_timeout: Duration,
    pub forward_to: ForwardTo,
    pub log_format: Format,
    pub log_level: Level,
    /// `--termination-log`: where meshwrap's own failure is written for the
    /// pod's status; `None`: nowhere.
    pub termination_log: Option<PathBuf>,
    /// `--guard-dir`: where meshwrap and its guard meet.
    pub guard_dir: Option<PathBuf>,
    /// The guard's bound on waiting for a run to start; `None`: no bound.
    pub start_timeout: Option<Duration>,
    pub command: Vec<OsString>,
}

impl Config {
    /// Whether the kubelet restarts the container when it exits with `code`.
    pub fn restarted_on(&self, code: u8) -> bool {
        self.no_quit_on_exit
            .iter()
            .any(|&(low, high)| (low..=high).contains(&code))
    }
}
