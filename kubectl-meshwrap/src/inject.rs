//! `kubectl meshwrap inject`: files, folders or stdin through the transform,
//! to stdout or back into the files, with a line per workload on stderr.
//!
//! Every input is read and transformed before anything is written, so bad
//! input stops the run with nothing written. `--in-place` replaces a file
//! by renaming a complete new file over it, so a reader (or a crash) sees
//! the old file or the new one, never half of either, and reading the input
//! is finished before its replacement exists (no `> same-file` truncation).

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

/// The inputs, folders walked (their .yaml, .yml and .json files, sorted).
fn inputs(files: &[String]) -> Result<Vec<PathBuf>, String> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)?
            .map(|e| e.map(|e| e.path()))
            .collect::<Result<_, _>>()?;
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(&path, out)?;
            } else if path
                .extension()
                .is_some_and(|e| e == "yaml" || e == "yml" || e == "json")
            {
                out.push(path);
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    for f in files {
        let path = PathBuf::from(f);
        if f == "-" {
            out.push(path);
        } else if path.is_dir() {
            walk(&path, &mut out).map_err(|e| format!("-f {f}: {e}"))?;
        } else if path.exists() {
            out.push(path);
        } else {
            return Err(format!("-f {f}: no such file or folder"));
        }
    }
    Ok(out)
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
    for path in &paths {
        match read(path) {
            Ok(text) => texts.push((path, text)),
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
    for (i, (path, text)) in texts.iter().enumerate() {
        let source = if path.as_os_str() == "-" {
            "stdin".to_string()
        } else {
            path.display().to_string()
        };
        let entries = if req.in_place {
            let (new, entries) = stream::run_to_string(text, &req.options, &req.taught, None);
            if new != *text
                && let Err(e) = replace(path, &new)
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
