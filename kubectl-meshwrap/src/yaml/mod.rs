//! Lossless YAML (and JSON) editing: parse with positions ([`tree`]), add
//! text where a plan says ([`edit`]), and never emit a document whose
//! re-parse differs from the plan applied to its JSON. [`emit`] writes the
//! manifests this tool prints itself. [`relax`] reads, as PyYAML and
//! kubectl do, brackets and quoted strings whose lines are not indented past
//! their key.

pub mod edit;
pub mod emit;
pub mod relax;
pub mod tree;
