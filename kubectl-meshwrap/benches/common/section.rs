//! BENCHMARKS.md is shared: the root crate's lifecycle benchmark writes its
//! top, and each kubectl-meshwrap benchmark owns the text from its marker to
//! the next kubectl-meshwrap marker (or the end).

/// `old` with `marker`'s section replaced by `section` (which starts with
/// `marker`), or `section` appended when the marker is not there yet.
pub fn replace(old: &str, marker: &str, section: &str) -> String {
    let Some(at) = old.find(marker) else {
        return format!("{}\n\n{section}", old.trim_end());
    };
    let rest = &old[at + marker.len()..];
    let next = rest.find("<!-- kubectl-meshwrap ").map(|n| &rest[n..]).unwrap_or("");
    let before = old[..at].trim_end();
    if next.is_empty() {
        format!("{before}\n\n{section}")
    } else {
        format!("{before}\n\n{}\n\n{next}", section.trim_end())
    }
}
