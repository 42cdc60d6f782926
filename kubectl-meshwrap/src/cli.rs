//! The flags (each also an environment variable), checked and resolved into
//! plain requests before anything is read or written. A bad value is one
//! line naming the flag and what it accepts.

use clap::{Args, Parser, Subcommand};

use crate::transform::{Delivery, Options};
use crate::workloads::TemplatePath;

#[derive(Parser, Debug)]
#[command(
    name = "kubectl-meshwrap",
    version,
    about = "Put meshwrap into pod templates: Jobs, Kubeflow jobs, Argo workflows and more",
    long_about = "Put meshwrap into pod templates, so a batch pod in a service mesh waits for its sidecar, \
                  quits it when the command ends, and completes.\n\nWith no arguments and a ResourceList on \
                  stdin, runs as a KRM function (kustomize, kpt)."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Rewrite manifests so their pods run under meshwrap (stdout, or --in-place)
    Inject(Inject),
    /// Run as a KRM function: a ResourceList on stdin, the result on stdout
    Fn(Shared),
}

#[derive(Args, Debug)]
pub struct Inject {
    /// A file, a folder (walked for .yaml, .yml and .json) or - for stdin; repeatable (default: stdin)
    #[arg(
        short = 'f',
        long = "filename",
        value_name = "PATH",
        env = "MESHWRAP_FILENAME",
        value_delimiter = ','
    )]
    pub files: Vec<String>,
    /// Rewrite the files themselves (atomically) instead of printing
    #[arg(long = "in-place", short = 'i', env = "MESHWRAP_IN_PLACE")]
    pub in_place: bool,
    #[command(flatten)]
    pub shared: Shared,
}

#[derive(Args, Debug)]
pub struct Shared {
    /// The meshwrap image (required by inject; the meshwrap.io/image annotation overrides it per pod)
    #[arg(long, value_name = "IMAGE", env = "MESHWRAP_IMAGE")]
    pub image: Option<String>,
    /// As meshwrap's --sidecar: a preset (istio, linkerd, ...), none, or NAME=HOST:PORT
    #[arg(long, value_name = "NAME[=HOST[:PORT]]", env = "MESHWRAP_SIDECAR", value_parser = sidecar)]
    pub sidecar: Option<String>,
    /// As meshwrap's --timeout: how long to wait for the sidecar (default: meshwrap's, 10m)
    #[arg(long, value_name = "DURATION", env = "MESHWRAP_TIMEOUT", value_parser = duration)]
    pub timeout: Option<String>,
    /// As meshwrap's --quit-policy (default: from the pod's restart policy)
    #[arg(long = "quit-policy", value_name = "POLICY", env = "MESHWRAP_QUIT_POLICY",
          value_parser = ["always", "on-success", "never"])]
    pub quit_policy: Option<String>,
    /// How meshwrap gets into the pod: an init container copies it, or the image is mounted as a volume
    #[arg(long, value_name = "HOW", env = "MESHWRAP_DELIVERY", default_value = "init-container",
          value_parser = ["init-container", "image-volume"])]
    pub delivery: String,
    /// Teach a kind: KIND=PATH to its pod templates, e.g. MyJob=spec.workers[].template
    #[arg(
        long = "template-path",
        value_name = "KIND=PATH",
        env = "MESHWRAP_TEMPLATE_PATH",
        value_delimiter = ','
    )]
    pub template_paths: Vec<TemplatePath>,
    /// Fail (exit 1) when any workload is skipped
    #[arg(long, env = "MESHWRAP_STRICT")]
    pub strict: bool,
}

fn duration(s: &str) -> Result<String, String> {
    meshwrap::duration::parse(s)
        .map(|_| s.to_string())
        .ok_or_else(|| "a duration such as 90s, 10m or 1h".to_string())
}

fn sidecar(s: &str) -> Result<String, String> {
    meshwrap::sidecar::preset::parse(s).map(|_| s.to_string())
}

impl Shared {
    pub fn options(&self) -> Options {
        Options {
            image: self.image.clone().unwrap_or_default(),
            sidecar: self.sidecar.clone(),
            timeout: self.timeout.clone(),
            quit_policy: self.quit_policy.clone(),
            delivery: if self.delivery == "image-volume" {
                Delivery::ImageVolume
            } else {
                Delivery::InitContainer
            },
        }
    }
}
