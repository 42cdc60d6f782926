//! The command line as clap sees it: every option, its flag, its variable,
//! its default and its `--help` text, and nothing else.
//!
//! clap only collects strings here; every value is checked in `resolve`,
//! which knows whether it came from a flag, a variable or a default, so that a
//! bad value is reported as "--timeout" or as "MESHWRAP_TIMEOUT", whichever the
//! user actually wrote. The doc comments below are the `--help` text, which
//! docs/ shows as the usage reference.

use std::ffi::OsString;

use clap::{ArgAction, Parser};

pub const DEFAULT_READY_URL: &str = "http://127.0.0.1:15021/healthz/ready";
pub const DEFAULT_QUIT_URL: &str = "http://127.0.0.1:15020/quitquitquit";

pub const GUARD_ABOUT: &str = "\
Run beside a wrapped container, in a container of its own: if the kernel kills
meshwrap together with its command (an OOM group kill), quit the sidecar in its
place, so the pod completes. Give it the wrapped meshwrap's options and the same
--guard-dir; it ignores those that only concern the command.";

pub const GUARD_AFTER_HELP: &str = "\
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
#[derive(Parser, Debug, Default)]
#[command(name = "meshwrap", version, after_help = AFTER_HELP)]
#[command(override_usage = "meshwrap [OPTIONS] [--] <COMMAND> [ARG]...")]
pub struct Args {
    /// A sidecar to wait for and quit, by name: auto (the default), istio,
    /// envoy, linkerd, cloudsql, vault, dapr, consul, kuma (waited for, never
    /// quit) or none. auto takes the sidecars whose injector marked the pod
    /// in its annotations (Istio, Linkerd, Vault, Dapr, Consul, Kuma), or
    /// Istio's when no annotations file is mounted.
    /// NAME=HOST or NAME=HOST:PORT moves its endpoints (its other port keeps
    /// its distance); NAME=PLACE/QUIT_PLACE gives the quit its own place.
    /// Repeatable; --ready-url and --quit-url add to the presets'
    /// endpoints. The variable takes a comma-separated list.
    #[arg(long, value_name = "NAME[=HOST[:PORT]]", allow_hyphen_values = true, env = "MESHWRAP_SIDECAR",
          action = ArgAction::Append)]
    pub sidecar: Vec<String>,

    /// GET this URL until it answers 2xx before starting COMMAND. Repeatable;
    /// with several, every one must have answered 2xx once. The variable takes
    /// a comma-separated list.
    #[arg(long = "ready-url", value_name = "URL", allow_hyphen_values = true, env = "MESHWRAP_READY_URL", action = ArgAction::Append,
          default_value = DEFAULT_READY_URL)]
    pub ready_url: Vec<String>,

    /// POST (empty body) to this URL when COMMAND has ended. Repeatable; several
    /// are sent in parallel. The variable takes a comma-separated list.
    #[arg(long = "quit-url", value_name = "URL", allow_hyphen_values = true, env = "MESHWRAP_QUIT_URL", action = ArgAction::Append,
          default_value = DEFAULT_QUIT_URL)]
    pub quit_url: Vec<String>,

    /// Skip the readiness wait and start COMMAND at once. The variable takes true or false.
    #[arg(long = "no-wait", env = "MESHWRAP_NO_WAIT", action = ArgAction::SetTrue,
          value_parser = clap::value_parser!(String), default_value = "false")]
    pub no_wait: String,

    /// How often to poll the ready URLs: fast (notice readiness within tens of
    /// milliseconds) or frugal (about a tenth of the CPU while waiting: a
    /// poll at once, then every 400 ms from 1 s to 3 s, then every second).
    #[arg(
        long,
        allow_hyphen_values = true,
        value_name = "fast|frugal",
        env = "MESHWRAP_POLL",
        default_value = "fast"
    )]
    pub poll: String,

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
    pub native_sidecar: String,

    /// The pod's annotations as the Downward API mounts them (and a labels
    /// file beside it). They tell whether each preset's sidecar is in the
    /// pod (skipped if not) and whether it is native. A missing file means
    /// nothing is known.
    #[arg(long = "pod-annotations", allow_hyphen_values = true, value_name = "FILE",
          env = "MESHWRAP_POD_ANNOTATIONS", default_value = crate::sidecar::pod::DEFAULT_PATH)]
    pub pod_annotations: String,

    /// After the wait, replace meshwrap with COMMAND (execve), leaving nothing
    /// between it and the kernel. Only when no quit is needed; the variable
    /// takes true or false.
    #[arg(long, env = "MESHWRAP_EXEC", action = ArgAction::SetTrue,
          value_parser = clap::value_parser!(String), default_value = "false")]
    pub exec: String,

    /// Bound on the whole readiness wait; 0 means no bound. Durations look like
    /// 500ms, 10s, 2m, 1h, 1m30s, or a number of seconds.
    #[arg(
        long,
        value_name = "DURATION",
        allow_hyphen_values = true,
        env = "MESHWRAP_TIMEOUT",
        default_value = "10m"
    )]
    pub timeout: String,

    /// What to do when --timeout runs out: fail (exit 125 without running
    /// COMMAND) or run (warn and run it anyway).
    #[arg(
        long = "on-timeout",
        allow_hyphen_values = true,
        value_name = "fail|run",
        env = "MESHWRAP_ON_TIMEOUT",
        default_value = "fail"
    )]
    pub on_timeout: String,

    /// When to quit the sidecar: always; on-success (for restartPolicy
    /// OnFailure, whose restarted container needs the sidecar); never.
    #[arg(
        long = "quit-policy",
        allow_hyphen_values = true,
        value_name = "always|on-success|never",
        env = "MESHWRAP_QUIT_POLICY",
        default_value = "always"
    )]
    pub quit_policy: String,

    /// Exit codes on which the kubelet restarts the container in place (its
    /// restartPolicyRules): no quit after those, since the restarted command
    /// needs the sidecar. A comma-separated list of codes and ranges, such
    /// as 42,43 or 2-255.
    #[arg(
        long = "no-quit-on-exit",
        allow_hyphen_values = true,
        value_name = "CODES",
        env = "MESHWRAP_NO_QUIT_ON_EXIT",
        default_value = ""
    )]
    pub no_quit_on_exit: String,

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
    pub quit_delay: String,

    /// After a quit is accepted, poll until the sidecar's port stops answering
    /// (within --quit-timeout), and warn if it kept running. The variable
    /// takes true or false.
    #[arg(long = "verify-quit", env = "MESHWRAP_VERIFY_QUIT", action = ArgAction::SetTrue,
          value_parser = clap::value_parser!(String), default_value = "false")]
    pub verify_quit: String,

    /// Total budget for all quit requests, retries included.
    #[arg(
        long = "quit-timeout",
        allow_hyphen_values = true,
        value_name = "DURATION",
        env = "MESHWRAP_QUIT_TIMEOUT",
        default_value = "5s"
    )]
    pub quit_timeout: String,

    /// Bound on one HTTP request (connect and response).
    #[arg(
        long = "request-timeout",
        allow_hyphen_values = true,
        value_name = "DURATION",
        env = "MESHWRAP_REQUEST_TIMEOUT",
        default_value = "1s"
    )]
    pub request_timeout: String,

    /// Forward signals to COMMAND only (child), or to its whole process group (group).
    #[arg(
        long = "forward-to",
        allow_hyphen_values = true,
        value_name = "child|group",
        env = "MESHWRAP_FORWARD_TO",
        default_value = "child"
    )]
    pub forward_to: String,

    /// Log line format on stderr: text or json.
    #[arg(
        long = "log-format",
        allow_hyphen_values = true,
        value_name = "text|json",
        env = "MESHWRAP_LOG_FORMAT",
        default_value = "text"
    )]
    pub log_format: String,

    /// Log level: error, warn, info or debug.
    #[arg(long = "log-level", allow_hyphen_values = true, value_name = "LEVEL", env = "MESHWRAP_LOG", default_value = "info",
          conflicts_with_all = ["quiet", "verbose"])]
    pub log_level: String,

    /// Log errors only (--log-level error).
    #[arg(short, long, conflicts_with = "verbose")]
    pub quiet: bool,

    /// Log everything (--log-level debug).
    #[arg(short, long)]
    pub verbose: bool,

    /// Where meshwrap writes one line when it fails itself (exit 125) or a
    /// signal stops the wait: the container's termination message, which
    /// Kubernetes shows in the pod's status. Written only into a file that is
    /// there; empty: nowhere.
    #[arg(
        long = "termination-log",
        allow_hyphen_values = true,
        value_name = "FILE",
        env = "MESHWRAP_TERMINATION_LOG",
        default_value = crate::config::DEFAULT_TERMINATION_LOG
    )]
    pub termination_log: String,

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
    pub guard_dir: Option<String>,

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
    pub start_timeout: String,

    /// Print the resolved settings, each with where it came from, and exit
    /// without waiting or running anything.
    #[arg(long)]
    pub explain: bool,

    /// The command to run and its arguments, passed as given (never through a shell).
    #[arg(value_name = "COMMAND", trailing_var_arg = true)]
    pub command: Vec<OsString>,
}

#[cfg(test)]
mod tests {
    #[test]
    fn clap_definitions_are_consistent() {
        <super::Args as clap::CommandFactory>::command().debug_assert();
    }
}
