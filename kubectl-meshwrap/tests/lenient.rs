//! #36 point 3: a flow collection or quoted scalar whose later lines sit at
//! or left of its key's column (Argo's `args: ["` ... `"]`), which PyYAML
//! and kubectl read and YAML 1.2 does not, is wrapped as any other input:
//! the output is the input plus additions, each value as PyYAML reads it
//! (the expected values below are PyYAML 6's `yaml.safe_load` of each
//! input), and a second run changes nothing. One that never closes is
//! refused at its line, saying what to check.

mod common;

use common::*;
use serde_json::{Value, json};

/// Runs inject over `input`; asserts it wrapped, added only, and that a
/// second run over the output prints it unchanged. Returns the output.
fn wrap(input: &str, extra: &[&str]) -> String {
    let mut args = vec!["inject", "--image", IMAGE, "--mesh", "istio", "-f", "-"];
    args.extend(extra);
    let run = kubectl_meshwrap(&args, input);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(!run.stderr.contains("error"), "{}", run.stderr);
    assert!(only_adds(input, &run.stdout), "{}", diff(input, &run.stdout));
    let again = kubectl_meshwrap(&args, &run.stdout);
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert!(again.stdout == run.stdout, "{}", diff(&run.stdout, &again.stdout));
    run.stdout
}

/// The user's command, after the `--` that ends meshwrap's own.
fn users(command: &Value) -> &[Value] {
    let all = command.as_array().expect("a command");
    let dash = all.iter().position(|a| a == "--").expect("meshwrap's --");
    &all[dash + 1..]
}

/// The documents of `text`, as JSON.
fn read(text: &str) -> Vec<Value> {
    let (docs, error) = kubectl_meshwrap::yaml::tree::parse(text);
    assert!(error.is_none(), "{error:?}\n{text}");
    docs.iter().map(|d| d.root.to_json()).collect()
}

fn job(container: &str) -> String {
    format!(
        "apiVersion: batch/v1\nkind: Job\nmetadata: {{name: x}}\nspec:\n  template:\n    spec:\n      restartPolicy: Never\n      containers:\n        - name: a\n          image: b\n{container}"
    )
}

#[test]
fn a_quoted_string_continued_at_its_keys_column_is_wrapped_keeping_its_value() {
    let input = job(
        "          command: [sh, -c]\n          args: [\"\n            cd /src &&\n            make\n          \"]\n",
    );
    let out = wrap(&input, &[]);
    let c = &read(&out)[0]["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["args"], json!([" cd /src && make "]), "{out}");
    assert_eq!(users(&c["command"]), [json!("sh"), json!("-c")], "{out}");
    assert!(c["volumeMounts"].is_array(), "{out}");
}

#[test]
fn a_bracketed_list_with_a_comment_closed_at_its_keys_column_is_wrapped() {
    let input = job(
        "          command: [\n          sh, -c  # shell\n          ]\n          args: ['\n          echo \"it''s\";\n          exit 0\n          ']\n",
    );
    let out = wrap(&input, &[]);
    let c = &read(&out)[0]["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["args"], json!([" echo \"it's\"; exit 0 "]), "{out}");
    assert_eq!(users(&c["command"]), [json!("sh"), json!("-c")], "{out}");
}

/// Documents before and after one with such a construct are wrapped once
/// each: the ones read before it are not read again.
#[test]
fn a_stream_with_such_a_document_in_the_middle_wraps_each_document_once() {
    let plain = job("          command: [sh]\n");
    let lenient = job("          command: [sh, -c,\n        \"make\n        all\"\n          ]\n");
    let input = format!("{plain}---\n{lenient}---\n{plain}");
    let out = wrap(&input, &[]);
    let docs = read(&out);
    assert_eq!(docs.len(), 3, "{out}");
    let c = &docs[1]["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        users(&c["command"]),
        [json!("sh"), json!("-c"), json!("make all")],
        "{out}"
    );
    assert_eq!(out.matches("name: meshwrap-install").count(), 3, "{out}");
}

#[test]
fn a_construct_that_never_closes_is_refused_at_its_line_saying_what_to_check() {
    let input = job(
        "          command: [sh, -c]\n          args: [\"\n            cd /src &&\n            make\n          ]\n",
    );
    let run = kubectl_meshwrap(&["inject", "--image", IMAGE, "-f", "-"], &input);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("line 12: error: not YAML from here on"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("check it is closed"), "{}", run.stderr);
    assert_eq!(run.stdout, "");
}

/// The upstream examples, from ../shared beside the checkout ([`upstream`]).
fn argo_examples() -> Option<std::path::PathBuf> {
    upstream("argoproj+argo-workflows/examples")
}

/// Argo Workflows' own examples that saphyr alone refused: each is wrapped
/// (two hold no pod template and stay as they were), adding only, and a
/// second run changes nothing.
#[test]
fn argos_examples_with_such_constructs_are_wrapped_not_refused() {
    let Some(dir) = argo_examples() else { return };
    let files = [
        "sidecar",
        "ci-output-artifact",
        "ci",
        "influxdb-ci",
        "k8s-orchestration",
        "nested-workflow",
        "secrets",
        "volumes-emptydir",
        "exit-handler-slack",
    ];
    for name in files {
        let input = std::fs::read_to_string(dir.join(format!("{name}.yaml"))).unwrap();
        // ci-output-artifact has a template with no command: a skip.
        let out = wrap(&input, &["--allow-skip"]);
        assert!(out.contains("meshwrap-install"), "{name}: nothing wrapped");
    }
    for name in ["resource-flags", "resource-delete-with-flags"] {
        let input = std::fs::read_to_string(dir.join(format!("{name}.yaml"))).unwrap();
        assert_eq!(wrap(&input, &[]), input, "{name}");
    }
    let sidecar = wrap(&std::fs::read_to_string(dir.join("sidecar.yaml")).unwrap(), &[]);
    let args = &read(&sidecar)[0]["spec"]["templates"][0]["container"]["args"];
    let pyyaml = " apk update && apk add curl && until curl -XPOST 'http://127.0.0.1:8086/query' --data-urlencode 'q=CREATE DATABASE mydb' ; do sleep .5; done && for i in $(seq 1 20); do curl -XPOST 'http://127.0.0.1:8086/write?db=mydb' -d \"cpu,host=server01,region=uswest load=$i\" ; sleep .5 ; done ";
    assert_eq!(*args, json!([pyyaml]));
}
