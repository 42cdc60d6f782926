//! Running the real kubectl-meshwrap binary.

#![allow(dead_code)]

pub mod apiserver;
pub mod conditions;
pub mod https;

use std::io::Write;
use std::process::{Command, Stdio};

pub const IMAGE: &str = "registry.example.com/meshwrap:0.1.0";

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// The kubectl-meshwrap binary under test: cargo's build, or the one
/// KUBECTL_MESHWRAP_TEST_BIN names (.ci/run runs the inject, fn, webhook and
/// manifests tests again on the shipped static musl one .ci/release built).
pub fn bin() -> &'static str {
    static BIN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BIN.get_or_init(|| match std::env::var("KUBECTL_MESHWRAP_TEST_BIN") {
        Ok(bin) => {
            assert!(
                std::path::Path::new(&bin).is_file(),
                "KUBECTL_MESHWRAP_TEST_BIN={bin} is not a file"
            );
            bin
        }
        Err(_) => env!("CARGO_BIN_EXE_kubectl-meshwrap").to_string(),
    })
}

pub fn kubectl_meshwrap<S: AsRef<str>>(args: &[S], stdin: &str) -> Run {
    run_in(None, args, stdin, &[])
}

pub fn run_in<S: AsRef<str>>(dir: Option<&std::path::Path>, args: &[S], stdin: &str, env: &[(&str, &str)]) -> Run {
    let mut cmd = Command::new(bin());
    cmd.args(args.iter().map(AsRef::as_ref))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_remove("MESHWRAP_IMAGE")
        .env_remove("MESHWRAP_SIDECAR")
        .env_remove("MESHWRAP_TIMEOUT")
        .env_remove("MESHWRAP_QUIT_POLICY");
    for (k, v) in env {
        cmd.env(k, v);
    }
    if let Some(dir) = dir {
        cmd.current_dir(dir);
    }
    let mut child = cmd.spawn().unwrap();
    let mut input = child.stdin.take().unwrap();
    let text = stdin.to_string();
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(text.as_bytes());
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

/// The lines that differ, for a readable failure.
pub fn diff(expected: &str, actual: &str) -> String {
    let (e, a): (Vec<&str>, Vec<&str>) = (expected.lines().collect(), actual.lines().collect());
    let mut out = String::new();
    for i in 0..e.len().max(a.len()) {
        let (x, y) = (e.get(i), a.get(i));
        if x != y {
            out.push_str(&format!(
                "line {}:\n  - {}\n  + {}\n",
                i + 1,
                x.unwrap_or(&""),
                y.unwrap_or(&"")
            ));
            if out.len() > 2000 {
                break;
            }
        }
    }
    out
}

pub fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("kubectl-meshwrap-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `../shared/upstream-corpus/PATH` beside the checkout, when it is there;
/// without it [`have`]'s rule: a failure in CI, else one line and a skip.
pub fn upstream(path: &str) -> Option<std::path::PathBuf> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/upstream-corpus")
        .join(path);
    have(dir.exists(), &format!("{} is missing (CI has it)", dir.display())).then_some(dir)
}

/// Whether `output` is `input` with text inserted and nothing removed or
/// changed (greedy: `input`'s characters in order within `output`).
pub fn only_adds(input: &str, output: &str) -> bool {
    let mut out = output.chars();
    input.chars().all(|c| out.any(|o| o == c))
}

/// Whether a test's tool is there: when it is not, the test says so and is
/// skipped, except in CI (`CI` or `POD_TESTS_REQUIRED` set), where it fails.
pub fn have(tool_ok: bool, what: &str) -> bool {
    if tool_ok {
        return true;
    }
    let required = ["CI", "POD_TESTS_REQUIRED"]
        .iter()
        .any(|v| std::env::var(v).is_ok_and(|s| !s.is_empty() && s != "0" && s != "false"));
    assert!(!required, "{what} (required here: CI or POD_TESTS_REQUIRED is set)");
    eprintln!("skipped: {what}");
    false
}

/// The AdmissionReview the API server sends for creating `pod` (in its
/// metadata's namespace), numbered `uid`, as a Job controller's request.
pub fn pod_review(pod: &serde_json::Value, uid: usize) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": format!("00000000-0000-4000-8000-{uid:012}"),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": pod["metadata"]["namespace"],
            "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:job-controller"},
            "object": pod,
            "dryRun": false
        }
    })
}
