//! Test support: the fake sidecar and the self-explaining command runner.

#![allow(dead_code)]

pub mod command;
pub mod pod;
pub mod sidecar;

pub use command::{Meshwrap, Run, Running, Stream, probe_bin};
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
