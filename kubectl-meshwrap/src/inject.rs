//! `kubectl meshwrap inject`: files, folders or stdin through the transform,
//! to stdout or back into the files, with a line per workload on stderr.
//!
//! Every input is read and transformed before anything is written, so bad
//! input stops the run with nothing written. `--in-place` replaces a file
//! by renaming a complete new file over it, so a reader (or a crash) sees
//! the old file or the new one, never half of either, and reading the input
//! is finished before its replacement exists (no `> same-file` truncation).
//!
//! Symlinks are resolved: `--in-place` replaces the file a link points to
//! (the link stays), and a folder walk visits each file and folder once by
//! its resolved path, so a link loop or a second name for a file cannot
//! repeat it.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use crate::stream::{self, Entry, Verdict};
use crate::transform::Options;
use crate::workloads::TemplatePath;

pub struct Request {
    pub files: Vec<String>,
    pub in_place: bool,
    pub strict: bool,
    pub options: Options,
    pub taught: Vec<TemplatePath>,
}

/// One input: the path as the user gave it or the walk found it (for
/// reports), and the file it resolves to (what is read, and replaced by
/// `--in-place`, so a symlink stays a symlink to the injected file).
struct Input {
    shown: PathBuf,
    real: PathBuf,
}

/// The inputs, folders walked (their .yaml, .yml and .json files, sorted),
/// symlinks resolved, each file and folder visited once: a link back up a
/// folder tree, or two names for one file, cannot repeat it.
fn inputs(files: &[String]) -> Result<Vec<Input>, String> {
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for f in files {
        let path = PathBuf::from(f);
        if f == "-" {
            out.push(Input {
                shown: path.clone(),
                real: path,
            });
            continue;
        }
        let real = std::fs::canonicalize(&path).map_err(|e| match std::fs::symlink_metadata(&path) {
            Ok(m) if m.file_type().is_symlink() => format!("-f {f}: a symlink to nothing readable ({e})"),
            Ok(_) => format!("-f {f}: {e}"),
            Err(_) => format!("-f {f}: no such file or folder"),
        })?;
        if real.is_dir() {
            walk(&path, &real, &mut seen, &mut out).map_err(|e| format!("-f {f}: {e}"))?;
        } else if seen.insert(real.clone()) {
            out.push(Input { shown: path, real });
        }
    }
    Ok(out)
}

/// The manifests under the folder `shown` (which resolves to `real`),
/// skipping what `seen` holds.
fn walk(
    shown: &Path,
    real: &Path,
    seen: &mut std::collections::HashSet<PathBuf>,
    out: &mut Vec<Input>,
) -> std::io::Result<()> {
    if !seen.insert(real.to_path_buf()) {
        return Ok(());
    }
    let mut names: Vec<std::ffi::OsString> = std::fs::read_dir(real)?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<Result<_, _>>()?;
    names.sort();
    for name in names {
        let path = shown.join(&name);
        let Ok(target) = std::fs::canonicalize(real.join(&name)) else {
            // A dangling symlink: a manifest by its name is read, and fails
            // with its path; anything else is not ours.
            if is_manifest(&path) {
                out.push(Input {
                    shown: path.clone(),
                    real: real.join(&name),
                });
            }
            continue;
        };
        if target.is_dir() {
            walk(&path, &target, seen, out)?;
        } else if is_manifest(&path) && seen.insert(target.clone()) {
            out.push(Input {
                shown: path,
                real: target,
            });
        }
    }
    Ok(())
}

fn is_manifest(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e == "yaml" || e == "yml" || e == "json")
}

fn read(path: &Path) -> Result<String, String> {
    let mut bytes = Vec::new();
    let result = if path == Path::new("-") {
        std::io::stdin().read_to_end(&mut bytes)
    } else {
        std::fs::File::open(path).and_then(|mut f| f.read_to_end(&mut bytes))
    };
    result.map_err(|e| format!("{}: {e}", path.display()))?;
    String::from_utf8(bytes).map_err(|_| format!("{}: not UTF-8 text", path.display()))
}

/// Writes `text` over `path` by renaming a new file in its folder over it
/// (one under a random name of its own, as `meshwrap install` makes).
pub fn replace(path: &Path, text: &str) -> Result<(), String> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let fail = |e: std::io::Error| format!("{}: {e}", path.display());
    let permissions = std::fs::metadata(path).map_err(fail)?.permissions();
    let (temp, mut file) = meshwrap::install::create_temporary(dir).map_err(fail)?;
    let written = file
        .write_all(text.as_bytes())
        .and_then(|()| file.set_permissions(permissions))
        .and_then(|()| file.sync_all())
        .and_then(|()| std::fs::rename(&temp, path));
    if let Err(e) = written {
        // Ours alone: created with O_EXCL under a name nobody else drew.
        let _ = std::fs::remove_file(&temp);
        return Err(fail(e));
    }
    Ok(())
}

/// A report line for `kubectl logs`-style reading: one per pod template.
pub fn line(source: &str, e: &Entry) -> String {
    let verdict = match e.verdict {
        Verdict::Injected => "injected",
        Verdict::Unchanged => "unchanged",
        Verdict::Skipped => "skipped",
        Verdict::Error => "error",
    };
    format!("{source}: {}: {verdict}: {}", e.what, e.message)
}

/// Runs inject; the exit code.
pub fn run(req: &Request) -> i32 {
    let files = if req.files.is_empty() {
        vec!["-".to_string()]
    } else {
        req.files.clone()
    };
    if req.in_place && files.iter().any(|f| f == "-") {
        crate::say("--in-place: needs files or folders, not stdin (-)");
        return 2;
    }
    let paths = match inputs(&files) {
        Ok(p) => p,
        Err(e) => {
            crate::say(&e);
            return 2;
        }
    };
    // Everything is read before anything is written.
    let mut texts = Vec::new();
    for input in &paths {
        match read(&input.real) {
            Ok(text) => texts.push((input, text)),
            Err(e) => {
                crate::say(&e);
                return 1;
            }
        }
    }
    let (mut failed, mut skipped) = (false, false);
    let mut stdout = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    let mut write_error = None;
    let several = texts.len() > 1;
    for (i, (input, text)) in texts.iter().enumerate() {
        let source = if input.shown.as_os_str() == "-" {
            "stdin".to_string()
        } else {
            input.shown.display().to_string()
        };
        let entries = if req.in_place {
            let (new, entries) = stream::run_to_string(text, &req.options, &req.taught, None);
            if new != *text
                && let Err(e) = replace(&input.real, &new)
            {
                crate::say(&e);
                failed = true;
            }
            entries
        } else {
            // Streamed to stdout as each document is done; separated by `---`
            // when several inputs make one stream.
            let last = std::cell::Cell::new(b'\n');
            let mut put = |piece: &str| {
                if write_error.is_none() && !piece.is_empty() {
                    last.set(*piece.as_bytes().last().unwrap_or(&b'\n'));
                    if let Err(e) = stdout.write_all(piece.as_bytes()) {
                        write_error = Some(e);
                    }
                }
            };
            if several && i > 0 && !text.starts_with("---") {
                put("---\n");
            }
            let entries = stream::run(text, &req.options, &req.taught, None, &mut put);
            if several && last.get() != b'\n' {
                put("\n");
            }
            entries
        };
        for e in &entries {
            crate::say(&line(&source, e));
            failed |= e.verdict == Verdict::Error;
            skipped |= e.verdict == Verdict::Skipped;
        }
    }
    if let Some(e) = write_error.or_else(|| stdout.flush().err()) {
        crate::say(&format!("stdout: {e}"));
        return 1;
    }
    if failed || (req.strict && skipped) { 1 } else { 0 }
}
