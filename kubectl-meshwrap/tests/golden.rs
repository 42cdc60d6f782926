//! Golden files: every `golden/NAME.in.*` through the real binary, its
//! output compared byte for byte with `NAME.out.*` and its report (stderr
//! and exit code) with `NAME.report`. A second run over each output must
//! change nothing. `MESHWRAP_BLESS=1 cargo test` rewrites the goldens; a
//! golden with no input, or that differs, fails.

mod common;

use std::path::{Path, PathBuf};

use common::*;

fn golden() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

/// NAME.in.EXT → (NAME, EXT)
fn cases() -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = std::fs::read_dir(golden())
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            let (stem, ext) = name.rsplit_once('.')?;
            let stem = stem.strip_suffix(".in")?;
            Some((stem.to_string(), ext.to_string()))
        })
        .collect();
    out.sort();
    out
}

fn args(name: &str) -> Vec<String> {
    std::fs::read_to_string(golden().join(format!("{name}.args")))
        .map(|s| s.lines().map(str::to_string).collect())
        .unwrap_or_default()
}

fn check(path: &Path, actual: &str, bless: bool, failures: &mut Vec<String>) {
    if bless {
        std::fs::write(path, actual).unwrap();
        return;
    }
    match std::fs::read_to_string(path) {
        Ok(expected) if expected == actual => {}
        Ok(expected) => failures.push(format!(
            "{} differs (MESHWRAP_BLESS=1 to rewrite):\n{}",
            path.display(),
            diff(&expected, actual)
        )),
        Err(_) => failures.push(format!("{} is missing (MESHWRAP_BLESS=1 writes it)", path.display())),
    }
}

#[test]
fn every_golden_input_gives_its_output_and_report_and_a_second_run_changes_nothing() {
    let bless = std::env::var_os("MESHWRAP_BLESS").is_some();
    let mut failures = Vec::new();
    let cases = cases();
    assert!(cases.len() >= 18, "{cases:?}");
    for (name, ext) in &cases {
        let input = std::fs::read_to_string(golden().join(format!("{name}.in.{ext}"))).unwrap();
        // --allow-skip: a golden shows what inject writes around a skip
        // (tests/cli.rs checks that by default a skip writes nothing).
        let mut argv = vec!["inject", "--image", IMAGE, "--allow-skip", "-f", "-"]
            .into_iter()
            .map(String::from)
            .collect::<Vec<_>>();
        argv.extend(args(name));
        let run = kubectl_meshwrap(&argv, &input);
        check(
            &golden().join(format!("{name}.out.{ext}")),
            &run.stdout,
            bless,
            &mut failures,
        );
        let report = format!("{}exit {}\n", run.stderr, run.code);
        check(&golden().join(format!("{name}.report")), &report, bless, &mut failures);

        let again = kubectl_meshwrap(&argv, &run.stdout);
        if again.stdout != run.stdout {
            failures.push(format!(
                "{name}: a second run changed the output:\n{}",
                diff(&run.stdout, &again.stdout)
            ));
        }
        if again.stderr.contains(": injected:") {
            failures.push(format!("{name}: a second run injected again:\n{}", again.stderr));
        }
    }
    // No golden without its input.
    for entry in std::fs::read_dir(golden()).unwrap() {
        let file = entry.unwrap().file_name().into_string().unwrap();
        let name = file.split('.').next().unwrap().to_string();
        if !cases.iter().any(|(n, _)| *n == name) {
            failures.push(format!("golden/{file}: stale, no golden/{name}.in.*"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn what_is_not_injected_is_left_byte_for_byte() {
    let input = std::fs::read_to_string(golden().join("skips.in.yaml")).unwrap();
    let run = kubectl_meshwrap(&["inject", "--image", IMAGE, "--allow-skip", "-f", "-"], &input);
    assert_eq!(run.stdout, input);
    assert_eq!(run.code, 0, "skips are reported, not failures, with --allow-skip");
    for why in [
        "has no command",
        "Windows",
        "hostNetwork",
        "opted out",
        "2 containers (train, upload)",
        "anchors",
        "unknown kind example.com/v1 Experiment",
        "meshwrap.io/quit-policy: \"sometimes\"",
        "already has a volume named meshwrap-bin",
    ] {
        assert!(run.stderr.contains(why), "no {why:?} in:\n{}", run.stderr);
    }
}

#[test]
fn the_examples_are_what_inject_makes_of_their_unwrapped_sources() {
    // examples/ is written by inject, never by hand: each examples/X has its
    // source in examples/unwrapped/X.
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let bless = std::env::var_os("MESHWRAP_BLESS").is_some();
    let mut failures = Vec::new();
    let mut sources = Vec::new();
    for dir in ["kubernetes", "kubeflow", "argo"] {
        for entry in std::fs::read_dir(examples.join("unwrapped").join(dir)).unwrap() {
            sources.push((dir, entry.unwrap().path()));
        }
    }
    assert_eq!(sources.len(), 9);
    for (dir, source) in sources {
        let input = std::fs::read_to_string(&source).unwrap();
        // A source may name more of inject's options, on a line of its own:
        // `# inject-args: --mesh none`.
        let mut args = vec!["inject", "--image", IMAGE, "--strict", "-f", "-"];
        if let Some(more) = input.lines().find_map(|l| l.strip_prefix("# inject-args:")) {
            args.extend(more.split_whitespace());
        }
        let run = kubectl_meshwrap(&args, &input);
        assert_eq!(run.code, 0, "{}: {}", source.display(), run.stderr);
        check(
            &examples.join(dir).join(source.file_name().unwrap()),
            &run.stdout,
            bless,
            &mut failures,
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// A PyTorchJob whose Master can be wrapped and whose Worker cannot (it has
/// only `args`): its worker pods would hang if it were applied so.
const HALF: &str = "apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: half}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          containers:
            - {name: pytorch, image: trainer, command: [python, train.py]}
    Worker:
      replicas: 2
      template:
        spec:
          containers:
            - {name: pytorch, image: trainer, args: [train.py]}
";

#[test]
fn a_skipped_template_fails_inject_and_nothing_is_written() {
    let run = kubectl_meshwrap(&["inject", "--image", IMAGE, "-f", "-"], HALF);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stdout.is_empty(), "nothing for kubectl apply: {}", run.stdout);
    assert!(
        run.stderr.contains("Worker: skipped: container pytorch has no command"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("1 pod template wrapped, 1 skipped, 0 untouched"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("nothing written") && run.stderr.contains("--allow-skip"),
        "{}",
        run.stderr
    );
    // --strict, as before, is the same; --allow-skip writes the Master wrapped.
    let strict = kubectl_meshwrap(&["inject", "--image", IMAGE, "--strict", "-f", "-"], HALF);
    assert_eq!((strict.code, strict.stdout.as_str()), (1, ""));
    let allowed = kubectl_meshwrap(&["inject", "--image", IMAGE, "--allow-skip", "-f", "-"], HALF);
    assert_eq!(allowed.code, 0, "{}", allowed.stderr);
    assert!(allowed.stdout.contains("/mesh/meshwrap"), "{}", allowed.stdout);
}

#[test]
fn in_place_writes_no_file_when_a_template_was_skipped() {
    let dir = std::env::temp_dir().join(format!("meshwrap-half-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (half, whole) = (dir.join("half.yaml"), dir.join("whole.yaml"));
    std::fs::write(&half, HALF).unwrap();
    let job = std::fs::read_to_string(golden().join("job.in.yaml")).unwrap();
    std::fs::write(&whole, &job).unwrap();
    let dir_arg = dir.to_string_lossy().into_owned();
    let run = kubectl_meshwrap(&["inject", "--image", IMAGE, "--in-place", "-f", &dir_arg], "");
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert_eq!(
        std::fs::read_to_string(&whole).unwrap(),
        job,
        "the whole job's file is not written either"
    );
    assert_eq!(std::fs::read_to_string(&half).unwrap(), HALF);
    let run = kubectl_meshwrap(
        &["inject", "--image", IMAGE, "--in-place", "--allow-skip", "-f", &dir_arg],
        "",
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(std::fs::read_to_string(&whole).unwrap().contains("/mesh/meshwrap"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn pods_left_alone_on_purpose_do_not_fail_inject() {
    let input = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  labels: {meshwrap.io/inject: \"false\"}\nspec:\n  containers:\n    - {name: c, image: x}\n";
    let run = kubectl_meshwrap(&["inject", "--image", IMAGE, "-f", "-"], input);
    assert_eq!((run.code, run.stdout.as_str()), (0, input), "{}", run.stderr);
    assert!(
        run.stderr.contains("unchanged: opted out") && run.stderr.contains("0 skipped, 1 untouched"),
        "{}",
        run.stderr
    );
}
