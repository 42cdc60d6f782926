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
pub mod trainer;
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

/// An image reference as container runtimes parse it (the distribution
/// reference grammar, distribution/reference `reference.go`: an optional
/// registry host and port, lowercase path components joined by `.`, `_`,
/// `__` or dashes, an optional `:tag` of up to 128 word characters, dots and
/// dashes, an optional `@algorithm:hex` digest). A pod with any other image
/// never starts (its pull fails), so the webhook and inject refuse one at
/// their start, as the chart's schema does (values.schema.json, the same
/// grammar as a pattern).
pub fn image_reference(image: &str) -> Result<(), String> {
    let says = || {
        format!(
            "\"{image}\" is not an image reference (REGISTRY/PATH:TAG or @sha256:DIGEST, lowercase path, such as registry.example.com/meshwrap:0.1.0)"
        )
    };
    let (name, digest) = image.split_once('@').map_or((image, None), |(n, d)| (n, Some(d)));
    if digest.is_some_and(|d| !is_digest(d)) {
        return Err(says());
    }
    // A tag is after the last ':' that follows the last '/'.
    let slash = name.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = match name[slash..].rfind(':') {
        Some(i) => (&name[..slash + i], Some(&name[slash + i + 1..])),
        None => (name, None),
    };
    let mut parts: Vec<&str> = name.split('/').collect();
    let host = parts.len() > 1 && (parts[0].contains(['.', ':']) || parts[0] == "localhost");
    if host && !is_host(parts[0]) {
        return Err(says());
    }
    if host {
        parts.remove(0);
    }
    let tag_ok = tag.is_none_or(|t| {
        (1..=128).contains(&t.len())
            && t.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
            && t.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
    });
    if parts.iter().all(|p| is_path_component(p)) && tag_ok {
        Ok(())
    } else {
        Err(says())
    }
}

/// `[a-z0-9]+` joined by `.`, `_`, `__` or any number of `-`.
fn is_path_component(part: &str) -> bool {
    let bytes = part.as_bytes();
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    if !bytes.first().is_some_and(|&b| alnum(b)) || !bytes.last().is_some_and(|&b| alnum(b)) {
        return false;
    }
    let mut i = 0;
    while i < bytes.len() {
        if alnum(bytes[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && !alnum(bytes[i]) {
            i += 1;
        }
        let sep = &part[start..i];
        if !(sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|b| b == b'-')) {
            return false;
        }
    }
    true
}

/// `host` or `host:port`: DNS labels of letters, digits and inner dashes.
fn is_host(host: &str) -> bool {
    let (name, port) = host.rsplit_once(':').map_or((host, None), |(h, p)| (h, Some(p)));
    let label = |l: &str| {
        !l.is_empty()
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    };
    name.split('.').all(label) && port.is_none_or(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
}

/// `algorithm:hex`, the hex at least 32 digits.
fn is_digest(digest: &str) -> bool {
    digest.split_once(':').is_some_and(|(algorithm, hex)| {
        !algorithm.is_empty()
            && algorithm.starts_with(|c: char| c.is_ascii_alphabetic())
            && algorithm
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_+.".contains(c))
            && hex.len() >= 32
            && hex.chars().all(|c| c.is_ascii_hexdigit())
    })
}

#[cfg(test)]
mod image_tests {
    use super::image_reference;

    #[test]
    fn image_references_as_runtimes_parse_them() {
        for good in [
            "meshwrap",
            "registry.example.com/meshwrap:0.1.0",
            "localhost:5000/team/meshwrap:dev",
            "ghcr.io/owner/meshwrap@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "registry.example.com:443/a/b_c/d__e/f-g--h:v1.2_3-rc",
            "docker.io/library/busybox:1.36",
        ] {
            assert_eq!(image_reference(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "Registry.Example.com/MeshWrap:0.1",
            "registry.example.com/mesh wrap:0.1",
            "registry.example.com/meshwrap:",
            "registry.example.com/meshwrap:-x",
            "meshwrap@sha256:abc",
            "a//b",
            "-a/b",
            "registry.example.com:port/x",
            "x:1.0 ",
        ] {
            assert!(image_reference(bad).is_err(), "{bad:?}");
        }
    }
}
