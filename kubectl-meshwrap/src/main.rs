use std::io::IsTerminal;

use clap::Parser;
use kubectl_meshwrap::cli::{Cli, Command};
use kubectl_meshwrap::{inject, krm, say};

fn main() {
    // kustomize and kpt run a function with no arguments: that is `fn`, with
    // the same variables.
    let bare = std::env::args_os().len() == 1 && !std::io::stdin().is_terminal();
    let parsed = if bare {
        Cli::try_parse_from(["kubectl-meshwrap", "fn"])
    } else {
        Cli::try_parse()
    };
    let cli = match parsed {
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
            if args.shared.image.as_deref().is_none_or(str::is_empty) {
                say(
                    "--image (MESHWRAP_IMAGE) is required: the meshwrap image to run, e.g. registry.example.com/meshwrap:0.1.0",
                );
                std::process::exit(2);
            }
            inject::run(&inject::Request {
                files: args.files,
                in_place: args.in_place,
                strict: args.shared.strict,
                options: args.shared.options(),
                taught: args.shared.template_paths,
            })
        }
        Some(Command::Fn(shared)) => krm::run(&shared.options(), &shared.template_paths, shared.strict),
        None => {
            say("no command: try `kubectl meshwrap inject --image IMAGE -f FILE`, or --help");
            2
        }
    };
    std::process::exit(code);
}
