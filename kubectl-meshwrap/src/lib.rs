//! kubectl-meshwrap: the Kubernetes-facing tools around meshwrap, in a crate
//! of their own so meshwrap's binary keeps its size and its dependencies.
//!
//! Every front end (`inject` over files, the KRM function, the webhook) asks
//! [`transform::plan`] what to add to a pod template, and applies that plan
//! its own way: as text insertions that keep every other byte
//! ([`yaml::edit`]), or as JSON Patch ([`patch::json_patch`]). The plan is
//! additions only, so the front ends cannot disagree about the result, and
//! each document is re-read after editing and compared with the plan
//! applied to its JSON before it is written.

pub mod cli;
pub mod inject;
pub mod krm;
pub mod manifests;
pub mod mesh;
pub mod operators;
pub mod patch;
pub mod restart;
pub mod stream;
pub mod transform;
pub mod webhook;
pub mod workloads;
pub mod yaml;

/// One line on stderr; a closed stderr is not worth failing over.
pub fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "kubectl-meshwrap: {line}");
}
