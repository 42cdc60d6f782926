//! The few variables a start reads, taken from the environment in one pass.
//!
//! A start looks up a variable for each of its flags and each of scuttle's,
//! and musl's `getenv` compares the name with every variable of the
//! environment in turn, a byte at a time: about forty instructions per
//! variable per lookup, about a thousand per variable of the environment in
//! a start. A pod's environment grows with its namespace (the kubelet adds
//! several variables per Service), so that cost grew with the cluster. One
//! pass keeps the variables that can be asked for (a prefix, or a list of
//! names), most of them rejected at their first byte; lookups then read only
//! those. A name outside what was kept is looked up as `std::env` would.
//!
//! The pass reads libc's environment array, which nothing changes while
//! meshwrap parses its command line: one thread runs then, and meshwrap never
//! sets a variable.

use std::ffi::{CStr, OsString, c_char};
use std::os::unix::ffi::OsStringExt;

/// What was kept of the environment, `(NAME, VALUE)` in the environment's
/// order (the first of two with one name is the one `getenv` finds).
pub struct Environ {
    wanted: Wanted,
    kept: Vec<(Vec<u8>, OsString)>,
}

/// Which variables a pass keeps.
enum Wanted {
    Prefix(&'static str),
    Names(&'static [&'static str]),
}

// SAFETY: `environ` is libc's own global (glibc and musl alike), declared
// with its C type; it is only read.
unsafe extern "C" {
    static environ: *const *const c_char;
}

impl Environ {
    /// The variables whose names start with `prefix`.
    pub fn with_prefix(prefix: &'static str) -> Environ {
        Environ::read(Wanted::Prefix(prefix))
    }

    /// The variables with these names.
    pub fn with_names(names: &'static [&'static str]) -> Environ {
        Environ::read(Wanted::Names(names))
    }

    fn read(wanted: Wanted) -> Environ {
        let mut kept = Vec::new();
        // SAFETY: `environ` is NULL or a NULL-terminated array of pointers to
        // NUL-terminated strings, which stay in place while nothing sets a
        // variable (see the module docs).
        unsafe {
            let mut entry = environ;
            while !entry.is_null() && !(*entry).is_null() {
                if wanted.keeps(*entry) {
                    let bytes = CStr::from_ptr(*entry).to_bytes();
                    if let Some(eq) = bytes.iter().position(|&b| b == b'=') {
                        kept.push((bytes[..eq].to_vec(), OsString::from_vec(bytes[eq + 1..].to_vec())));
                    }
                }
                entry = entry.add(1);
            }
        }
        Environ { wanted, kept }
    }

    /// The value of `name`, as `std::env::var_os` reads it.
    pub fn var_os(&self, name: &str) -> Option<OsString> {
        let covered = match self.wanted {
            Wanted::Prefix(prefix) => name.starts_with(prefix),
            Wanted::Names(names) => names.contains(&name),
        };
        if !covered || name.contains('=') {
            return std::env::var_os(name);
        }
        let (_, value) = self.kept.iter().find(|(n, _)| n == name.as_bytes())?;
        Some(value.clone())
    }

    /// The value of `name` if it is UTF-8, as `std::env::var(name).ok()` reads it.
    pub fn var(&self, name: &str) -> Option<String> {
        self.var_os(name)?.into_string().ok()
    }
}

impl Wanted {
    /// Whether the entry `NAME=VALUE` at `entry` may be asked for.
    ///
    /// # Safety
    /// `entry` points to a NUL-terminated string.
    unsafe fn keeps(&self, entry: *const c_char) -> bool {
        // SAFETY: passed on from the caller.
        unsafe {
            match self {
                Wanted::Prefix(prefix) => starts_with(entry, prefix.as_bytes(), false),
                Wanted::Names(names) => names.iter().any(|name| starts_with(entry, name.as_bytes(), true)),
            }
        }
    }
}

/// Whether the string at `entry` starts with `prefix` (then `=`, if
/// `then_equals`), reading no further than the first mismatch.
///
/// # Safety
/// `entry` points to a NUL-terminated string.
unsafe fn starts_with(entry: *const c_char, prefix: &[u8], then_equals: bool) -> bool {
    let expected = prefix.iter().chain(then_equals.then_some(&b'='));
    // SAFETY: the walk stops at the first mismatch, at the latest at the NUL
    // (no byte of `prefix` or `=` is NUL).
    expected.enumerate().all(|(i, &b)| unsafe { *entry.add(i) } as u8 == b)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every variable of the test process, and a few that are not set.
    fn names() -> Vec<String> {
        let mut names: Vec<String> = std::env::vars_os().filter_map(|(n, _)| n.into_string().ok()).collect();
        names.extend(["MESHWRAP_SURELY_UNSET", "", "A=B", "PATH="].map(String::from));
        names
    }

    #[test]
    fn reads_what_std_reads() {
        let by_prefix = Environ::with_prefix("P");
        static SOME: [&str; 3] = ["PATH", "HOME", "MESHWRAP_SURELY_UNSET"];
        let by_name = Environ::with_names(&SOME);
        for name in names() {
            assert_eq!(by_prefix.var_os(&name), std::env::var_os(&name), "{name:?}");
            assert_eq!(by_name.var_os(&name), std::env::var_os(&name), "{name:?}");
            assert_eq!(by_name.var(&name), std::env::var(&name).ok(), "{name:?}");
        }
        assert!(by_prefix.var_os("PATH").is_some() && by_prefix.kept.iter().all(|(n, _)| n.starts_with(b"P")));
        assert!(by_name.kept.len() <= 2);
    }
}
