//! The KRM function through the real `kpt fn eval DIR --exec
//! kubectl-meshwrap -- image=...`: kpt builds the ResourceList from a
//! folder, passes the `key=value`s as a ConfigMap functionConfig, and writes
//! the items back. kpt is at /usr/lib/google-cloud-sdk/bin/kpt on these
//! machines (Debian's google-cloud-cli-kpt); without it the test says so and
//! is skipped, in CI (`CI` or `POD_TESTS_REQUIRED` set) it fails.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

fn kpt() -> Option<PathBuf> {
    let candidates = [
        std::env::var_os("KPT").map(PathBuf::from),
        Some(PathBuf::from("/usr/lib/google-cloud-sdk/bin/kpt")),
    ];
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join("kpt"));
    candidates.into_iter().flatten().chain(on_path).find(|p| p.is_file())
}

/// `kpt fn eval DIR --exec kubectl-meshwrap -- image=IMAGE SETTINGS...`:
/// whether it succeeded, and what it printed (stdout, then stderr).
fn fn_eval(kpt: &Path, dir: &Path, settings: &[&str]) -> (bool, String) {
    let image = format!("image={IMAGE}");
    let out = Command::new(kpt)
        .args(["fn", "eval"])
        .arg(dir)
        .args(["--exec", bin(), "--", &image])
        .args(settings)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

/// kpt, or (by `have`'s rule) a skip, or a failure in CI.
fn kpt_here() -> Option<PathBuf> {
    let found = kpt();
    have(
        found.is_some(),
        "kpt: not on PATH nor at /usr/lib/google-cloud-sdk/bin/kpt (set KPT=PATH)",
    )
    .then(|| found.unwrap())
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

#[test]
fn kpt_fn_eval_exec_runs_the_krm_function_and_writes_what_inject_writes() {
    let Some(kpt) = kpt_here() else { return };
    let dir = temp_dir("kpt");
    let source = repo().join("examples/unwrapped/kubernetes/job-init-container.yaml");
    std::fs::copy(&source, dir.join("job.yaml")).unwrap();
    let (ok, said) = fn_eval(&kpt, &dir, &[]);
    assert!(ok, "{said}");
    assert!(
        said.contains("[info] batch/v1/Job/fetch-and-train")
            && said.contains("container train, --quit-policy always, guard"),
        "{said}"
    );
    // Byte for byte what `inject` writes for it (examples/ is inject's output).
    let wrapped = std::fs::read_to_string(dir.join("job.yaml")).unwrap();
    let expected = std::fs::read_to_string(repo().join("examples/kubernetes/job-init-container.yaml")).unwrap();
    assert!(wrapped == expected, "{}", diff(&expected, &wrapped));

    // strict=true: a skip is an error result, kpt fails, and nothing is written.
    let dir = temp_dir("kpt-strict");
    std::fs::copy(&source, dir.join("job.yaml")).unwrap();
    let skipped = "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: no-command\nspec:\n  template:\n    spec:\n      restartPolicy: Never\n      containers:\n        - name: main\n          image: registry.example.com/train:1.0\n";
    std::fs::write(dir.join("skipped.yaml"), skipped).unwrap();
    let (ok, said) = fn_eval(&kpt, &dir, &["strict=true"]);
    assert!(!ok, "{said}");
    assert!(
        said.contains("[error] batch/v1/Job/no-command") && said.contains("container main has no command"),
        "{said}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("job.yaml")).unwrap(),
        std::fs::read_to_string(&source).unwrap()
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// A functionConfig value the function would not take, or a key it does not
/// know, is one line naming it, kpt fails and nothing is written: before,
/// `timeout=5x` left the Job unwrapped with a skip blaming an annotation,
/// and `timout=5m` was ignored.
#[test]
fn kpt_fn_eval_refuses_a_bad_or_unknown_config_key_by_name() {
    let Some(kpt) = kpt_here() else { return };
    let source = repo().join("examples/unwrapped/kubernetes/job-init-container.yaml");
    for (setting, says) in [
        (
            "timeout=5x",
            "functionConfig: timeout \"5x\" is not a duration such as 90s, 10m or 1h",
        ),
        (
            "timout=5m",
            "functionConfig: data.timout is not a key the function takes (did you mean timeout?)",
        ),
        (
            "quitPolicy=sometimes",
            "functionConfig: quitPolicy \"sometimes\" is not always, on-success or never",
        ),
        ("sidecar=istoi", "functionConfig: sidecar \"istoi\""),
        ("strict=yes", "functionConfig: strict \"yes\" is not true or false"),
    ] {
        let dir = temp_dir("kpt-bad-config");
        std::fs::copy(&source, dir.join("job.yaml")).unwrap();
        let (ok, said) = fn_eval(&kpt, &dir, &[setting]);
        assert!(!ok, "{setting}: {said}");
        // kpt quotes the function's stderr, escaping its quotes.
        assert!(said.replace("\\\"", "\"").contains(says), "{setting}: {said}");
        assert_eq!(
            std::fs::read_to_string(dir.join("job.yaml")).unwrap(),
            std::fs::read_to_string(&source).unwrap(),
            "{setting}: nothing written"
        );
        let _ = std::fs::remove_dir_all(dir);
    }
}
