//! The fast path of the command line (`cli::quick`) against clap, on a
//! corpus of command lines and environments: wherever the fast path answers,
//! its options, their value sources and the command must be exactly clap's;
//! and the common shapes must be answered by it, or its start-up gain is lost.
//!
//! One test in this file on purpose: it sets the process environment (clap
//! reads variables itself), which is sound only with no other thread running.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;

use meshwrap::cli::quick::{self, Kind, OPTIONS};
use meshwrap::cli::{Mode, by_clap};

struct Case {
    line: Vec<OsString>,
    env: Vec<(&'static str, &'static str)>,
    /// The fast path must answer this one.
    common: bool,
}

fn case(line: &[&str], env: &[(&'static str, &'static str)], common: bool) -> Case {
    Case {
        line: line.iter().map(Into::into).collect(),
        env: env.to_vec(),
        common,
    }
}

/// Each option by flag (both spellings), by variable, by both, and the odd
/// values the fast path leaves to clap.
fn per_option(cases: &mut Vec<Case>) {
    for opt in OPTIONS {
        let flag = format!("--{}", opt.long);
        let flag = flag.as_str();
        if opt.kind == Kind::Switch {
            cases.push(case(&[flag, "--", "true"], &[], true));
            for value in ["true", "false", "yes", ""] {
                cases.push(case(&["--", "true"], &[(opt.env, value)], true));
            }
            cases.push(case(&[flag, "--", "true"], &[(opt.env, "false")], true));
            cases.push(case(&[&format!("{flag}=true"), "--", "true"], &[], false));
            continue;
        }
        let inline = format!("{flag}=v=1");
        cases.push(case(&[flag, "v1", "--", "true"], &[], true));
        cases.push(case(&[&inline, "true"], &[], true));
        cases.push(case(&["true"], &[(opt.env, "e1")], true));
        cases.push(case(&["--", "true"], &[(opt.env, "")], true));
        cases.push(case(&[flag, "v1", "true"], &[(opt.env, "e1")], true));
        cases.push(case(
            &[flag, "v1", flag, "v2", "--", "true"],
            &[],
            opt.kind == Kind::Many,
        ));
        for odd in ["-5", "--", "--timeout", ""] {
            cases.push(case(&[flag, odd, "--", "true"], &[], false));
        }
        cases.push(case(&[&format!("{flag}="), "--", "true"], &[], false));
        cases.push(case(&[flag], &[], false));
    }
}

/// Where the command starts and what it keeps, and lines only clap reads.
fn shapes(cases: &mut Vec<Case>) {
    for line in [
        &["true"][..],
        &["--", "true"],
        &["python", "--timeout", "5s", "-u"],
        &["--", "--help"],
        &["--", "a", "--", "b"],
        &["a", "--", "b"],
        &["--timeout=1s", "a", "-q"],
        &["--timeout", "5s"],
        &[],
        &["--explain", "--sidecar", "linkerd", "--sidecar", "vault", "--", "job"],
        &[
            "--explain",
            "--sidecar",
            "auto",
            "--sidecar=cloudsql=127.0.0.1:9190/127.0.0.1:9192",
            "--",
            "job",
        ],
        &["-q", "--", "true"],
        &["--verbose", "true"],
        &["-v", "--timeout", "1s", "true", "-q"],
    ] {
        cases.push(case(line, &[], true));
    }
    for line in [
        &["--help"][..],
        &["-h"],
        &["--version"],
        &["-V"],
        &["-q", "-v", "--", "true"],
        &["-q", "-q", "--", "true"],
        &["--quiet", "--log-level", "debug", "--", "true"],
        &["--log-level=debug", "-v", "--", "true"],
        &["-qv", "true"],
        &["--nonsense", "--", "true"],
        &["--explain", "--explain"],
        &["--explain=yes"],
        &["-", "x"],
        &["-x"],
    ] {
        cases.push(case(line, &[], false));
    }
    let everything: Vec<String> = OPTIONS
        .iter()
        .flat_map(|o| match o.kind {
            Kind::Switch => vec![format!("--{}", o.long)],
            _ => vec![format!("--{}", o.long), format!("{}-value", o.id)],
        })
        .chain(["--".into(), "job".into()])
        .collect();
    let everything: Vec<&str> = everything.iter().map(String::as_str).collect();
    cases.push(case(&everything, &[], true));
    let all_env: Vec<(&'static str, &'static str)> = OPTIONS.iter().map(|o| (o.env, "from-env")).collect();
    cases.push(case(&["job"], &all_env, true));
    cases.push(case(&["--log-level", "warn", "-q", "job"], &all_env, false));
    cases.push(case(&["-q", "job"], &[("MESHWRAP_LOG", "warn")], false));
    cases.push(case(&["-v", "job"], &[("MESHWRAP_TIMEOUT", "1s")], true));
    // A command that is not UTF-8 is passed through by both.
    let mut line: Vec<OsString> = vec!["--".into(), OsString::from_vec(vec![0x66, 0xff])];
    cases.push(Case {
        line: line.clone(),
        env: vec![],
        common: true,
    });
    line.remove(0);
    cases.push(Case {
        line,
        env: vec![],
        common: false,
    });
}

#[test]
fn the_fast_path_reads_what_clap_reads() {
    let mut cases = Vec::new();
    per_option(&mut cases);
    shapes(&mut cases);
    let (mut fast, mut total) = (0, 0);
    for case in &cases {
        for (var, _) in std::env::vars_os() {
            if var.to_string_lossy().starts_with("MESHWRAP_") {
                // SAFETY: this test is the only one in its binary, so no other
                // thread reads or writes the environment meanwhile.
                unsafe { std::env::remove_var(var) };
            }
        }
        for (var, value) in &case.env {
            // SAFETY: as above.
            unsafe { std::env::set_var(var, value) };
        }
        let argv: Vec<OsString> = std::iter::once("meshwrap".into())
            .chain(case.line.iter().cloned())
            .collect();
        for mode in [Mode::Wrap, Mode::Guard] {
            total += 1;
            let quick = quick::parse(&argv, |name| std::env::var_os(name));
            let clap = by_clap(argv.clone(), mode);
            match (quick, clap) {
                (Some((args, sources)), Ok((clap_args, clap_sources))) => {
                    fast += 1;
                    let (ours, theirs) = (format!("{args:?}"), format!("{clap_args:?}"));
                    assert_eq!(ours, theirs, "{:?} with {:?}", case.line, case.env);
                    assert_eq!(sources, clap_sources, "{:?} with {:?}", case.line, case.env);
                }
                (Some(_), Err(e)) => panic!("{:?} with {:?}: clap refuses it: {e}", case.line, case.env),
                (None, _) => assert!(!case.common, "{:?} with {:?}: left to clap", case.line, case.env),
            }
        }
    }
    // Every common case was read by the fast path (checked above); the rest
    // of the corpus is odd on purpose.
    eprintln!("{fast} of {total} parses took the fast path");
}
