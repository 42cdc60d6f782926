//! Drop-in migration from scuttle: its environment variables, read when
//! meshwrap's own flag or variable for the same setting is not given, so a
//! manifest that replaces `scuttle` with `meshwrap --` keeps working.
//!
//! With any of them set, meshwrap follows scuttle's model for the sidecar
//! URLs too: it waits only for `ENVOY_ADMIN_API` (none set: no wait, as
//! scuttle) and quits `ISTIO_QUIT_API` (or Envoy itself, through
//! `ENVOY_ADMIN_API`, when that is unset) plus `GENERIC_QUIT_ENDPOINTS`. As
//! in scuttle, a flag variable counts only when it is exactly `true`. One
//! difference stays: scuttle waits forever by default, meshwrap's wait keeps
//! its `--timeout` bound.

use std::time::Duration;

use crate::config::QuitPolicy;
use crate::duration;
use crate::log::Level;

/// scuttle's variables, all of them.
pub const VARS: [&str; 9] = [
    "ENVOY_ADMIN_API",
    "ISTIO_QUIT_API",
    "NEVER_KILL_ISTIO",
    "NEVER_KILL_ISTIO_ON_FAILURE",
    "GENERIC_QUIT_ENDPOINTS",
    "START_WITHOUT_ENVOY",
    "WAIT_FOR_ENVOY_TIMEOUT",
    "QUIT_WITHOUT_ENVOY_TIMEOUT",
    "SCUTTLE_LOGGING",
];

/// What scuttle's variables ask for; each value names the variable it came from.
#[derive(Default)]
pub struct Scuttle {
    pub ready: Vec<(String, &'static str)>,
    pub quit: Vec<(String, &'static str)>,
    pub no_wait: Option<&'static str>,
    /// The bound on the wait, whether running out of it fails, and the variable.
    pub timeout: Option<(Duration, bool, &'static str)>,
    pub quit_policy: Option<(QuitPolicy, &'static str)>,
    pub log_level: Option<(Level, &'static str)>,
}

/// Reads scuttle's variables from the environment; `None` when none is set.
pub fn from_env() -> Result<Option<Scuttle>, String> {
    // One pass over the environment for these variables (`environ`).
    let environ = crate::environ::Environ::with_names(&VARS);
    from_vars(|name| environ.var(name))
}

/// Reads scuttle's variables through `get`; `None` when none of them is set.
pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Option<Scuttle>, String> {
    let var = |name: &str| get(name).filter(|v| !v.is_empty());
    let is_true = |name: &'static str| (var(name).as_deref() == Some("true")).then_some(name);
    let go_duration = |name: &'static str| -> Result<Option<Duration>, String> {
        var(name)
            .map(|v| {
                duration::parse(&v).ok_or_else(|| format!("invalid {name} '{v}': expected a Go duration such as 1m30s"))
            })
            .transpose()
    };
    if !VARS.iter().any(|name| var(name).is_some()) {
        return Ok(None);
    }
    let mut s = Scuttle::default();
    let base = |name| var(name).map(|api| api.trim_end_matches('/').to_string());
    if let Some(api) = base("ENVOY_ADMIN_API") {
        s.ready.push((format!("{api}/ready"), "ENVOY_ADMIN_API"));
        if var("ISTIO_QUIT_API").is_none() {
            s.quit.push((format!("{api}/quitquitquit"), "ENVOY_ADMIN_API"));
        }
    }
    if let Some(api) = base("ISTIO_QUIT_API") {
        s.quit.push((format!("{api}/quitquitquit"), "ISTIO_QUIT_API"));
    }
    for url in var("GENERIC_QUIT_ENDPOINTS")
        .iter()
        .flat_map(|v| v.split(','))
        .map(str::trim)
    {
        if !url.is_empty() {
            s.quit.push((url.to_string(), "GENERIC_QUIT_ENDPOINTS"));
        }
    }
    s.no_wait = is_true("START_WITHOUT_ENVOY");
    // QUIT_WITHOUT_ENVOY_TIMEOUT wins over WAIT_FOR_ENVOY_TIMEOUT, unless nothing is waited for.
    let quit_without = go_duration("QUIT_WITHOUT_ENVOY_TIMEOUT")?.filter(|_| s.no_wait.is_none());
    s.timeout = match (quit_without, go_duration("WAIT_FOR_ENVOY_TIMEOUT")?) {
        (Some(t), _) => Some((t, true, "QUIT_WITHOUT_ENVOY_TIMEOUT")),
        (None, Some(t)) => Some((t, false, "WAIT_FOR_ENVOY_TIMEOUT")),
        (None, None) => None,
    };
    s.quit_policy = is_true("NEVER_KILL_ISTIO")
        .map(|v| (QuitPolicy::Never, v))
        .or_else(|| is_true("NEVER_KILL_ISTIO_ON_FAILURE").map(|v| (QuitPolicy::OnSuccess, v)));
    s.log_level =
        var("SCUTTLE_LOGGING").map(|v| (if v == "true" { Level::Info } else { Level::Error }, "SCUTTLE_LOGGING"));
    Ok(Some(s))
}
