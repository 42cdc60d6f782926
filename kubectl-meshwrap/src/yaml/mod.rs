//! Lossless YAML (and JSON) editing: parse with positions ([`tree`]), add
//! text where a plan says ([`edit`]), and never emit a document whose
//! re-parse differs from the plan applied to its JSON.

pub mod edit;
pub mod tree;
