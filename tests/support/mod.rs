//! Test support: the fake sidecar and the self-explaining command runner.

#![allow(dead_code)]

pub mod command;
pub mod consul;
pub mod dns;
pub mod envoy;
pub mod istio;
pub mod oci;
pub mod pod;
pub mod seccomp;
pub mod sidecar;

pub use command::{BOUND, Meshwrap, Run, Running, Stream, probe_bin};
pub use sidecar::{Connections, FakeSidecar, Reply};

/// meshwrap pointed at `sidecar` for both readiness and quit.
pub fn wrapped(sidecar: &FakeSidecar) -> Meshwrap {
    let mut mw = Meshwrap::new();
    mw.args(sidecar.flags());
    mw
}

/// True when the tests run as root (needed for PID namespaces).
pub fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Skips the test with a printed reason when `missing` names what it lacks
/// (root, a tool), unless POD_TESTS_REQUIRED is set: CI sets it, so there
/// a test that cannot run fails instead of passing unseen.
pub fn skip_unless_able(test: &str, missing: Option<String>) -> bool {
    let Some(why) = missing else { return false };
    assert!(
        std::env::var_os("POD_TESTS_REQUIRED").is_none(),
        "{test} cannot run: {why}"
    );
    println!("skipped {test}: {why}");
    true
}

/// What a test that needs `tools` and root lacks here, if anything.
pub fn lacks_root_or(tools: &[&str]) -> Option<String> {
    if !is_root() {
        return Some("needs root (run the tests as root, as CI does)".into());
    }
    lacks(tools)
}

/// The first of `tools` that is missing here, if any.
pub fn lacks(tools: &[&str]) -> Option<String> {
    tools
        .iter()
        .find(|tool| !std::path::Path::new(tool).exists())
        .map(|tool| format!("{tool} is missing (CI installs it)"))
}
