//! meshwrap's integration tests: each runs the real binary against the fake
//! sidecar in `support`. Read the module list as the checklist of behaviours.

mod support;

mod annotations;
mod architecture;
mod child_env;
mod cli;
mod consul;
mod envoy;
mod examples;
mod exec;
mod exit_status;
mod guard;
mod install;
mod istio;
mod kuma;
mod oci;
mod pid1;
mod pod;
mod presets;
mod quit;
mod readiness;
mod schemas;
mod scuttle;
mod signals;
mod wait_speaks;
