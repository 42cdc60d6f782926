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
