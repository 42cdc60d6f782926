use std::io::IsTerminal;

use clap::Parser;
use kubectl_meshwrap::cli::{Cli, Command};
use kubectl_meshwrap::{inject, krm, say};

fn main() {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if e.use_stderr() => {
            // One line: what was wrong and what is accepted.
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("bad usage").trim_start_matches("error: ");
            let hint = text.lines().find(|l| l.contains("possible values")).map(str::trim);
            match hint {
                Some(h) => say(&format!("{first} ({h})")),
                None => say(first),
            }
            std::process::exit(2);
        }
        Err(e) => {
            let _ = e.print();
            std::process::exit(0);
        }
    };
    let code = match cli.command {
        Some(Command::Inject(args)) => {
            let Some(image) = args.shared.image.as_deref().filter(|i| !i.is_empty()) else {
                say(
                    "--image (MESHWRAP_IMAGE) is required: the meshwrap image to run, e.g. registry.example.com/meshwrap:0.1.0",
                );
                std::process::exit(2);
            };
            let _ = image;
            inject::run(&inject::Request {
                files: args.files,
                in_place: args.in_place,
                strict: args.shared.strict,
                options: args.shared.options(),
                taught: args.shared.template_paths,
            })
        }
        Some(Command::Fn(shared)) => krm::run(&shared.options(), &shared.template_paths, shared.strict),
        None if !std::io::stdin().is_terminal() => {
            // kustomize and kpt run a function with no arguments.
            let shared = kubectl_meshwrap::cli::Shared {
                image: std::env::var("MESHWRAP_IMAGE").ok(),
                sidecar: None,
                timeout: None,
                quit_policy: None,
                delivery: "init-container".into(),
                template_paths: Vec::new(),
                strict: false,
            };
            krm::run(&shared.options(), &[], false)
        }
        None => {
            say("no command: try `kubectl meshwrap inject --image IMAGE -f FILE`, or --help");
            2
        }
    };
    std::process::exit(code);
}
