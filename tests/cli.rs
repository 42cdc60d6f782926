//! The command line: bad input is one line naming the flag or variable, exit
//! 125, nothing waited for or run; `--explain` shows where each value came
//! from; logs go to stderr, a few lines per run, in text or JSON.

use crate::support::*;

/// A bad-input case: flags, variables, and the name the error must carry.
type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);

#[test]
fn bad_input_is_one_line_naming_the_flag_or_variable() {
    let cases: &[Case] = &[
        (&["--ready-url", "ftp://x/"], &[], "--ready-url"),
        (
            &["--ready-url", "https://127.0.0.1:15021/healthz/ready"],
            &[],
            "https is not supported",
        ),
        (&["--quit-url", "http://127.0.0.1:99999/q"], &[], "--quit-url"),
        (&["--quit-policy", "sometimes"], &[], "--quit-policy"),
        (&["--timeout", "5x"], &[], "--timeout"),
        (&["--timeout", "-1s"], &[], "--timeout"),
        (&[], &[("MESHWRAP_TIMEOUT", "-1s")], "MESHWRAP_TIMEOUT"),
        (
            &[],
            &[("MESHWRAP_READY_URL", "http://127.0.0.1:1/a,,http://127.0.0.1:2/b")],
            "MESHWRAP_READY_URL",
        ),
        (&[], &[("MESHWRAP_READY_URL", "")], "MESHWRAP_READY_URL"),
        (&[], &[("MESHWRAP_NO_WAIT", "yes")], "MESHWRAP_NO_WAIT"),
        (&["--on-timeout", "maybe"], &[], "--on-timeout"),
        (&["--poll", "slow"], &[], "--poll"),
        (&[], &[("MESHWRAP_POLL", "x")], "MESHWRAP_POLL"),
        (&["--quit-timeout", "0"], &[], "--quit-timeout"),
        (&["--request-timeout", "0s"], &[], "--request-timeout"),
        (&["--forward-to", "session"], &[], "--forward-to"),
        (&["--log-format", "xml"], &[], "--log-format"),
        (&["--log-level", "loud"], &[], "--log-level"),
        (&[], &[("MESHWRAP_LOG", "loud")], "MESHWRAP_LOG"),
        (&["-q", "-v"], &[], "-v"),
        (&["--bogus"], &[], "--bogus"),
    ];
    let sidecar = FakeSidecar::ready();
    for (args, env, name) in cases {
        // The fake's URLs come from the environment, so that a case's own
        // variable replaces them and a case's flag beats them.
        let mut mw = Meshwrap::new();
        mw.env("MESHWRAP_READY_URL", &sidecar.ready_url())
            .env("MESHWRAP_QUIT_URL", &sidecar.quit_url());
        for (key, value) in *env {
            mw.env(key, value);
        }
        let run = mw.args(*args).args(["sh", "-c", "echo ran"]).run();
        run.assert_code(125).assert_stdout("").assert_stderr_has(name);
        run.check(run.stderr.lines().count() == 1, "exactly one line on stderr");
        run.check(run.stderr.starts_with("meshwrap: "), "the line says who speaks");
    }
    let run = wrapped(&sidecar).run();
    run.assert_code(125).assert_stderr_has("missing COMMAND");
    assert_eq!(sidecar.requests().len(), 0, "bad input waited for or quit a sidecar");
}

#[test]
fn a_flag_beats_its_variable() {
    let run = Meshwrap::new()
        .env("MESHWRAP_TIMEOUT", "5x")
        .args(["--timeout", "3s", "--explain"])
        .run();
    run.assert_code(0);
    run.check(
        run.stdout
            .lines()
            .any(|l| l.starts_with("timeout ") && l.contains("3s") && l.ends_with("(flag)")),
        "timeout from the flag",
    );
}

#[test]
fn explain_shows_each_values_source() {
    let run = Meshwrap::new()
        .env("MESHWRAP_QUIT_POLICY", "on-success")
        .env("MESHWRAP_READY_URL", "http://127.0.0.1:1/a,http://[::1]:2/b")
        .args(["--timeout", "90s", "--explain", "--", "python", "train.py"])
        .run();
    run.assert_code(0);
    let line = |name: &str| {
        run.stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no {name} line\n{run}"))
            .to_string()
    };
    let expect = [
        ("timeout", "90s", "(flag)"),
        ("quit-policy", "on-success", "(env MESHWRAP_QUIT_POLICY)"),
        (
            "ready-url",
            "http://127.0.0.1:1/a,http://[::1]:2/b",
            "(env MESHWRAP_READY_URL)",
        ),
        ("quit-url", "http://127.0.0.1:15020/quitquitquit", "(default)"),
        ("request-timeout", "1s", "(default)"),
        ("command", "python train.py", "(flag)"),
    ];
    for (name, value, source) in expect {
        let l = line(name);
        run.check(
            l.contains(value) && l.ends_with(source),
            &format!("{name}: {value} {source}, got {l:?}"),
        );
    }
    run.check(run.stderr.is_empty(), "explain logs nothing");
}

#[test]
fn help_has_an_example_and_the_exit_codes() {
    let run = Meshwrap::new().arg("--help").run();
    run.assert_code(0);
    for text in [
        "Example:",
        "meshwrap -- python train.py",
        "Exit status:",
        "128+S",
        "127",
        "126",
        "125",
        "MESHWRAP_TIMEOUT",
    ] {
        run.check(run.stdout.contains(text), &format!("help lacks {text:?}"));
    }
    let run = Meshwrap::new().arg("--version").run();
    run.assert_code(0)
        .assert_stdout(&format!("meshwrap {}\n", env!("CARGO_PKG_VERSION")));
}

#[test]
fn info_logs_one_line_per_phase_on_stderr_only() {
    let sidecar = FakeSidecar::ready();
    let run = wrapped(&sidecar).args(["sh", "-c", "echo out"]).run();
    run.assert_code(0).assert_stdout("out\n");
    let lines: Vec<&str> = run.stderr.lines().collect();
    let phases = ["sidecar ready", "command started", "command ended", "sidecar quit"];
    run.check(lines.len() == phases.len(), "one line per phase");
    for (line, phase) in lines.iter().zip(phases) {
        run.check(
            line.starts_with(&format!("meshwrap: {phase}")),
            &format!("{phase} line"),
        );
    }
}

#[test]
fn quiet_logs_errors_only() {
    let sidecar = FakeSidecar::ready();
    let run = wrapped(&sidecar).args(["-q", "true"]).run();
    run.assert_code(0).assert_stdout("");
    run.check(run.stderr.is_empty(), "nothing logged at error level for a clean run");
}

#[test]
fn json_logs_are_one_object_per_line() {
    let sidecar = FakeSidecar::ready();
    let run = wrapped(&sidecar)
        .args(["--log-format", "json", "sh", "-c", "exit 3"])
        .run();
    run.assert_code(3);
    let objects: Vec<serde_json::Value> = run
        .stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l:?}: {e}\n{run}")))
        .collect();
    run.check(objects.len() == 4, "four phases");
    for o in &objects {
        run.check(o["level"] == "info" && o["msg"].is_string(), "level and msg");
    }
    let ended = objects
        .iter()
        .find(|o| o["msg"] == "command ended")
        .expect("command ended");
    run.check(
        ended["code"] == 3 && ended["status"] == "exit 3",
        "fields keep their types",
    );
}

#[test]
fn docs_usage_is_the_help_text() {
    let help = Meshwrap::new().arg("--help").run();
    help.assert_code(0);
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/meshwrap.md")).unwrap();
    assert!(
        doc.contains(help.stdout.trim_end()),
        "docs/meshwrap.md's usage section differs from `meshwrap --help`; paste the help text into it"
    );
}

/// The targets of a Markdown text's inline links and images (`[x](t)`,
/// `![x](t)`), outside fenced code blocks and code spans.
fn markdown_links(text: &str) -> Vec<String> {
    let mut links = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Every other backtick-separated piece is a code span.
        let prose: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        let mut rest = prose.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let end = after.find(')').unwrap_or(after.len());
            links.push(after[..end].trim().to_string());
            rest = &after[end..];
        }
    }
    links
}

#[test]
fn every_relative_link_in_the_docs_points_to_a_file() {
    // The scan itself: links and images, not code.
    let sample = "see [a](docs/a.md#x) and ![b](img.svg)\n`[c](no.md)`\n```\n[d](no.md)\n```\n";
    assert_eq!(markdown_links(sample), ["docs/a.md#x", "img.svg"]);
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages = vec![root.join("README.md")];
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    assert!(pages.len() > 1, "docs/ holds no page");
    let mut broken = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        for link in markdown_links(&text) {
            let external = ["http://", "https://", "mailto:"].iter().any(|s| link.starts_with(s));
            let target = link.split('#').next().unwrap_or("");
            if external || target.is_empty() {
                continue;
            }
            if !page.parent().unwrap().join(target).exists() {
                broken.push(format!("{}: {link}", page.strip_prefix(root).unwrap().display()));
            }
        }
    }
    assert!(broken.is_empty(), "links to no file:\n{}", broken.join("\n"));
}

#[test]
fn a_command_name_cannot_forge_a_log_line() {
    // No space, quote or '=' (tabs instead), so only escaping control
    // characters keeps the newline from starting a line of its own.
    let forged = "/nonexistent/x\nmeshwrap:\tsidecar\tquit\x1b[2K";
    let run = Meshwrap::new().args(["--sidecar", "none", forged]).run();
    run.assert_code(127);
    run.check(
        run.stderr.lines().all(|l| l.starts_with("meshwrap: ")) && !run.stderr.contains('\x1b'),
        "every line is meshwrap's own, with no escape code",
    );
    run.check(!run.stderr.contains("sidecar\tquit"), "the tabs are escaped too");
}

#[test]
fn urls_and_durations_at_their_edges() {
    for (flag, value) in [
        ("--ready-url", "http://::1:15021/"),
        ("--quit-url", "http://2001:db8::1:8080/"),
        ("--ready-url", "http://127.0.0.1:+80/"),
    ] {
        let run = Meshwrap::new().args([flag, value, "true"]).run();
        run.assert_code(125)
            .assert_stderr_has(&format!("invalid {flag} '{value}'"));
        run.check(run.stderr.lines().count() == 1, "one line");
    }
    // The scheme is case-insensitive.
    let sidecar = FakeSidecar::ready();
    Meshwrap::new()
        .args(["--ready-url", &sidecar.ready_url().replace("http://", "HTTP://")])
        .args(["--quit-url", &sidecar.quit_url(), "true"])
        .run()
        .assert_code(0);
    assert_eq!((sidecar.polls(), sidecar.quits()), (1, 1));
    // A bound too small for a nanosecond is still a bound, not "no bound".
    let refusing = FakeSidecar::refusing();
    wrapped(&refusing)
        .args(["--timeout", "0.0000000001s", "--quit-timeout", "100ms", "true"])
        .run()
        .assert_code(125)
        .assert_stderr_has("sidecar not ready in time");
}
