use std::io::IsTerminal;

// musl's allocator (the static binary's) unmaps and faults pages back in on
// nearly every request of the webhook's mix of small and medium allocations;
// mimalloc keeps them. Measured in BENCHMARKS.md (webhook and inject).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::Parser;
use kubectl_meshwrap::cli::{Cli, Command};
use kubectl_meshwrap::webhook::{admission, server};
use kubectl_meshwrap::{inject, krm, manifests, say};

fn main() {
    let cli = parse();
    let code = match cli.command {
        Some(Command::Inject(args)) => {
            require_image(args.shared.pod.image.as_deref());
            inject::run(&inject::Request {
                files: args.files,
                in_place: args.in_place,
                diff: args.diff,
                allow_skip: args.allow_skip,
                options: args.shared.pod.options(),
                taught: args.shared.template_paths,
            })
        }
        Some(Command::Webhook(args)) => webhook(*args),
        Some(Command::Manifests(args)) => manifests(args),
        Some(Command::Fn(shared)) => krm::run(&shared.pod.options(), &shared.template_paths, shared.strict),
        None => {
            say("no command: try `kubectl meshwrap inject --image IMAGE -f FILE`, or --help");
            2
        }
    };
    std::process::exit(code);
}

/// A bad value that came from a variable, not the command line, is named
/// by its variable (`MESHWRAP_TIMEOUT`, as meshwrap names it), with its
/// flag beside it: the user never typed the flag.
fn from_variable(e: &clap::Error, line: &str) -> String {
    use clap::error::{ContextKind, ContextValue};
    let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) else {
        return line.to_string();
    };
    let Some(long) = arg.strip_prefix("--").and_then(|a| a.split([' ', '=']).next()) else {
        return line.to_string();
    };
    let typed = std::env::args().any(|a| a == format!("--{long}") || a.starts_with(&format!("--{long}=")));
    let env = env_of(&<Cli as clap::CommandFactory>::command(), long);
    match env {
        Some(var) if !typed && std::env::var_os(&var).is_some() => {
            line.replacen(&format!("'{arg}'"), &format!("{var} (--{long})"), 1)
        }
        _ => line.to_string(),
    }
}

/// The variable of the flag `--long`, in `command` or its subcommands.
fn env_of(command: &clap::Command, long: &str) -> Option<String> {
    let own = command.get_arguments().find(|a| a.get_long() == Some(long));
    own.and_then(|a| a.get_env().map(|v| v.to_string_lossy().into_owned()))
        .or_else(|| command.get_subcommands().find_map(|c| env_of(c, long)))
}

/// The command line; bad usage is one line on stderr and exit 2.
fn parse() -> Cli {
    // kustomize and kpt run a function with no arguments: that is `fn`, with
    // the same variables.
    let bare = std::env::args_os().len() == 1 && !std::io::stdin().is_terminal();
    let parsed = if bare {
        Cli::try_parse_from(["kubectl-meshwrap", "fn"])
    } else {
        Cli::try_parse()
    };
    match parsed {
        Ok(cli) => cli,
        Err(e) if e.use_stderr() => {
            // One line: what was wrong and what is accepted.
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("bad usage").trim_start_matches("error: ");
            let first = from_variable(&e, first);
            let first = first.as_str();
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
    }
}

fn webhook(args: kubectl_meshwrap::cli::Webhook) -> i32 {
    let (Some(tls_cert), Some(tls_key)) = (args.tls_cert, args.tls_key) else {
        say(
            "--tls-cert (MESHWRAP_TLS_CERT) and --tls-key (MESHWRAP_TLS_KEY) are required: PEM files of the serving certificate and its key",
        );
        std::process::exit(2);
    };
    require_image(args.pod.image.as_deref());
    server::run(server::Config {
        listen: args.listen,
        tls_cert,
        tls_key,
        client_timeout: args.client_timeout,
        idle_timeout: args.idle_timeout,
        max_connections: args.max_connections,
        max_handshakes: args.max_handshakes,
        max_source_share: args.max_source_share,
        shutdown_delay: args.shutdown_delay,
        drain_timeout: args.drain_timeout,
        settings: admission::Settings {
            options: args.pod.options(),
            namespace: args.namespace,
        },
        events: args.events.config(),
        namespaces: args.events.namespaces(),
    })
}

fn manifests(args: kubectl_meshwrap::cli::Manifests) -> i32 {
    require_image(args.pod.image.as_deref());
    let Some(webhook_image) = args.webhook_image.filter(|i| !i.is_empty()) else {
        say(
            "--webhook-image (MESHWRAP_WEBHOOK_IMAGE) is required: the kubectl-meshwrap image the webhook runs, e.g. registry.example.com/kubectl-meshwrap:0.1.0",
        );
        std::process::exit(2);
    };
    let previous_ca = match args.previous_ca.as_deref().map(manifests::read_previous_ca) {
        None => None,
        Some(Ok(text)) => Some(text),
        Some(Err(e)) => {
            say(&e);
            std::process::exit(2);
        }
    };
    let ca_bundle = match args.ca_bundle.as_deref().map(manifests::read_ca_bundle) {
        None => None,
        Some(Ok(text)) => Some(text),
        Some(Err(e)) => {
            say(&e);
            std::process::exit(2);
        }
    };
    let request = manifests::Request {
        namespace: args.namespace,
        create_namespace: args.create_namespace,
        webhook_image,
        self_signed: args.self_signed,
        previous_ca,
        tls_secret: args.tls_secret,
        ca_bundle,
        pod_cidrs: args.pod_cidrs,
        kube_version: args.kube_version,
        events: args.events == "on",
        namespaces: args.namespaces == "on",
        options: args.pod.options(),
    };
    if let Err(e) = manifests::check(&request) {
        say(&e);
        std::process::exit(2);
    }
    let text = match manifests::render(&request) {
        Ok(text) => text,
        Err(e) => {
            say(&e);
            return 1;
        }
    };
    use std::io::Write;
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Ok(()) => 0,
        Err(e) => {
            say(&format!("writing the manifests: {e}"));
            1
        }
    }
}

/// Every front end but the KRM function (whose config may name it) needs the
/// meshwrap image before it reads or writes anything.
fn require_image(image: Option<&str>) {
    if image.is_none_or(str::is_empty) {
        say(
            "--image (MESHWRAP_IMAGE) is required: the meshwrap image to run, e.g. registry.example.com/meshwrap:0.1.0",
        );
        std::process::exit(2);
    }
}
