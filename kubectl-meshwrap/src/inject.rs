//! `kubectl meshwrap inject`: files, folders or stdin through the transform,
//! to stdout or back into the files, with a line per workload on stderr.
//!
//! Every input is read and transformed before anything is written, so bad
//! input stops the run with nothing written. `--in-place` replaces a file
//! by renaming a complete new file over it, so a reader (or a crash) sees
//! the old file or the new one, never half of either, and reading the input
//! is finished before its replacement exists (no `> same-file` truncation).
//!
//! A pod template that holds containers and was skipped (no command, two
//! candidate containers, a conflict...) fails the run unless `--allow-skip`:
//! a Job whose Master is wrapped and whose Worker is not would hang. Then
//! nothing is written, to stdout or to a file: stdout is spooled to an
//! unlinked temporary file and copied out only when the run succeeds, so
//! `inject | kubectl apply -f -` applies nothing rather than half a job, and
//! memory stays one document's. Pods left alone on purpose (opted out, on
//! the node's network, Windows) are "unchanged", not skips.
//!
//! Kubeflow Trainer: a TrainJob is decided against its runtime (`trainer.rs`),
//! which may be in any input, before or after it; so the runtimes of every
//! input are read first (planned on their own, nothing written), then the
//! inputs are run in order. A runtime whose text edit is later refused (a
//! YAML anchor where meshwrap edits) was counted as injected: its own line
//! is the skip that fails the run.
//!
//! Symlinks are resolved: `--in-place` replaces the file a link points to
//! (the link stays), and a folder walk visits each file and folder once by
//! its resolved path, so a link loop or a second name for a file cannot
//! repeat it.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use crate::stream::{self, Entry, Verdict};
use crate::trainer::Runtimes;
use crate::transform::Options;
use crate::workloads::TemplatePath;

pub struct Request {
    pub files: Vec<String>,
    pub in_place: bool,
    /// `--diff`: print what `--in-place` would change, change nothing.
    pub diff: bool,
    /// `--allow-skip`: write what could be wrapped even when a pod template
    /// was skipped (the old default; `--strict` is the default now).
    pub allow_skip: bool,
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

/// The text of `input`; an error names it as the user gave it.
fn read(input: &Input) -> Result<String, String> {
    let (path, shown) = (&input.real, &input.shown);
    let mut bytes = Vec::new();
    let result = if path == Path::new("-") {
        std::io::stdin().read_to_end(&mut bytes)
    } else {
        std::fs::File::open(path).and_then(|mut f| f.read_to_end(&mut bytes))
    };
    result.map_err(|e| format!("{}: {e}", shown.display()))?;
    String::from_utf8(bytes).map_err(|_| format!("{}: not UTF-8 text", shown.display()))
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
        Verdict::LongRunning => "left alone",
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
    // Nothing named and nothing piped: say so rather than wait on the
    // terminal (an explicit `-f -` is read as asked).
    if req.files.is_empty() && std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        crate::say(
            "no manifests: give -f FILE or -f FOLDER, or pipe them in (kubectl kustomize DIR | kubectl meshwrap inject --image ...)",
        );
        return 2;
    }
    if (req.in_place || req.diff) && files.iter().any(|f| f == "-") {
        let flag = if req.diff { "--diff" } else { "--in-place" };
        crate::say(&format!("{flag}: needs files or folders, not stdin (-)"));
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
        match read(input) {
            Ok(text) => texts.push((input, text)),
            Err(e) => {
                crate::say(&e);
                return 1;
            }
        }
    }
    // A TrainJob is decided against its runtime when the runtime is in
    // the run, in any input and before or after it: all are read first.
    let mut runtimes = Runtimes::default();
    for (_, text) in &texts {
        runtimes.learn(text, &req.options);
    }
    let outcome = if req.in_place || req.diff {
        in_place(req, &texts, &runtimes)
    } else {
        to_stdout(req, &texts, &runtimes)
    };
    match outcome {
        Ok(tally) => tally.verdict(req.allow_skip),
        Err(e) => {
            crate::say(&e);
            1
        }
    }
}

/// What a run did, pod template by pod template.
#[derive(Default)]
struct Tally {
    wrapped: usize,
    skipped: usize,
    untouched: usize,
    errors: usize,
    long_running: usize,
}

impl Tally {
    /// Reports each entry and counts it.
    fn count(&mut self, source: &str, entries: &[Entry]) {
        for e in entries {
            if e.verdict == Verdict::LongRunning {
                self.long_running += 1;
                continue;
            }
            crate::say(&line(source, e));
            match e.verdict {
                Verdict::Injected => self.wrapped += 1,
                Verdict::Skipped => self.skipped += 1,
                Verdict::Unchanged => self.untouched += 1,
                Verdict::Error => self.errors += 1,
                Verdict::LongRunning => {}
            }
        }
    }

    /// Whether the output may be written.
    fn writable(&self, allow_skip: bool) -> bool {
        self.errors == 0 && (allow_skip || self.skipped == 0)
    }

    /// The summary line, what to fix when the run fails, and the exit code.
    fn verdict(&self, allow_skip: bool) -> i32 {
        let errors = match self.errors {
            0 => String::new(),
            1 => ", 1 error".to_string(),
            n => format!(", {n} errors"),
        };
        let long_running = match self.long_running {
            0 => String::new(),
            1 => "; 1 long-running workload left alone (--workloads all wraps it)".to_string(),
            n => format!("; {n} long-running workloads left alone (--workloads all wraps them)"),
        };
        let templates = if self.wrapped == 1 { "template" } else { "templates" };
        crate::say(&format!(
            "{} pod {templates} wrapped, {} skipped, {} untouched{errors}{long_running}",
            self.wrapped, self.skipped, self.untouched
        ));
        if self.writable(allow_skip) {
            return 0;
        }
        if self.errors == 0 {
            crate::say(
                "nothing written: a skipped pod template would run half-wrapped (a job whose other pods hang); \
                 fix what each skipped line says, or pass --allow-skip to write the rest anyway",
            );
        } else {
            crate::say("nothing written: fix the errors above");
        }
        1
    }
}

/// `--in-place`: every file transformed first, then written only when the
/// run may be written. `--diff`: the same, printed as a unified diff
/// instead of written (a run that would write nothing prints nothing).
fn in_place(req: &Request, texts: &[(&Input, String)], runtimes: &Runtimes) -> Result<Tally, String> {
    let mut tally = Tally::default();
    let mut replaced = Vec::new();
    for (input, text) in texts {
        let (new, entries) = stream::run_to_string(text, &req.options, &req.taught, None, runtimes);
        tally.count(&input.shown.display().to_string(), &entries);
        if new != *text {
            replaced.push((input, text, new));
        }
    }
    if !tally.writable(req.allow_skip) {
        return Ok(tally);
    }
    let mut stdout = std::io::stdout().lock();
    for (input, old, new) in replaced {
        if req.diff {
            let path = input.shown.display().to_string();
            let path = path.strip_prefix("./").unwrap_or(&path);
            stdout
                .write_all(crate::diff::unified(path, old, &new).as_bytes())
                .map_err(|e| format!("stdout: {e}"))?;
        } else {
            replace(&input.real, &new)?;
        }
    }
    stdout.flush().map_err(|e| format!("stdout: {e}"))?;
    Ok(tally)
}

/// To stdout, one stream (inputs separated by `---`), spooled until the run
/// is known to be writable.
fn to_stdout(req: &Request, texts: &[(&Input, String)], runtimes: &Runtimes) -> Result<Tally, String> {
    let temporary = |e: std::io::Error| format!("a temporary file for the output: {e}");
    let (path, spool) = meshwrap::install::create_temporary(&std::env::temp_dir()).map_err(temporary)?;
    // Read back through a second descriptor; the name goes at once.
    let reader = std::fs::File::open(&path);
    let _ = std::fs::remove_file(&path);
    let reader = reader.map_err(temporary)?;
    let mut out = std::io::BufWriter::with_capacity(1 << 16, spool);
    let mut write_error = None;
    let mut tally = Tally::default();
    let several = texts.len() > 1;
    for (i, (input, text)) in texts.iter().enumerate() {
        let source = if input.shown.as_os_str() == "-" {
            "stdin".to_string()
        } else {
            input.shown.display().to_string()
        };
        let last = std::cell::Cell::new(b'\n');
        let mut put = |piece: &str| {
            if write_error.is_none() && !piece.is_empty() {
                last.set(*piece.as_bytes().last().unwrap_or(&b'\n'));
                if let Err(e) = out.write_all(piece.as_bytes()) {
                    write_error = Some(e);
                }
            }
        };
        if several && i > 0 && !text.starts_with("---") {
            put("---\n");
        }
        let entries = stream::run(text, &req.options, &req.taught, None, runtimes, &mut put);
        if several && last.get() != b'\n' {
            put("\n");
        }
        tally.count(&source, &entries);
    }
    if let Some(e) = write_error {
        return Err(format!("the output's temporary file: {e}"));
    }
    out.flush().map_err(|e| format!("the output's temporary file: {e}"))?;
    if tally.writable(req.allow_skip) {
        copy_out(reader).map_err(|e| format!("stdout: {e}"))?;
    }
    Ok(tally)
}

/// The spooled output, to stdout.
fn copy_out(mut spool: std::fs::File) -> std::io::Result<()> {
    let mut stdout = std::io::stdout().lock();
    std::io::copy(&mut spool, &mut stdout)?;
    stdout.flush()
}
