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
pub mod diff;
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

/// The one of `known` nearest to `word` (by edits, any case), if it is
/// near enough to be a slip of the keys: a third of its length, at least 2.
pub fn closest<'k>(word: &str, known: &[&'k str]) -> Option<&'k str> {
    let word = word.to_ascii_lowercase();
    let (distance, best) = known
        .iter()
        .map(|k| (edits(&word, &k.to_ascii_lowercase()), *k))
        .min_by_key(|(d, _)| *d)?;
    (distance <= (word.len() / 3).max(2)).then_some(best)
}

/// Levenshtein distance over bytes.
fn edits(a: &str, b: &str) -> usize {
    let b = b.as_bytes();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.bytes().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1).min(row[j] + 1).min(diagonal + usize::from(ca != cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::closest;

    #[test]
    fn a_slip_names_the_key_meant_and_a_stranger_names_none() {
        let keys = ["timeout", "quitPolicy", "sidecar", "image"];
        assert_eq!(closest("timout", &keys), Some("timeout"));
        assert_eq!(closest("quitpolicy", &keys), Some("quitPolicy"));
        assert_eq!(closest("quit-policy", &keys), Some("quitPolicy"));
        assert_eq!(closest("imgae", &keys), Some("image"));
        assert_eq!(closest("replicas", &keys), None);
    }
}
