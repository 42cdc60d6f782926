//! `kubectl-meshwrap webhook`: the mutating admission webhook that wraps
//! labelled pods with the same plan as `inject`.
//!
//! - [`admission`]: one AdmissionReview in, one out; pure.
//! - [`server`]: HTTPS, routes, limits, timeouts and the drain.
//! - [`fair`]: the caps on connections and handshakes, shared fairly by
//!   source address, and who gives way when they are reached.
//! - [`waiting`]: connections accepted while every handshake slot is
//!   taken, waiting for one instead of being refused.
//! - [`limits`]: the budget for request bodies, and each connection's
//!   deadline.
//! - [`tls`]: the serving certificate, reloaded when its files change.
//! - [`metrics`] and [`log`]: what an operator reads.
//! - [`events`]: Kubernetes Events on each wrapped or skipped pod's owner,
//!   through [`apiserver`], a small client of the API server.
//! - [`namespaces`]: each pod's Namespace, read through the same client,
//!   for the meshes it turns on; a namespace that cannot be read in time
//!   is decided as offline inject decides it.

pub mod admission;
pub mod apiserver;
pub mod events;
pub mod fair;
pub mod limits;
pub mod log;
pub mod metrics;
pub mod namespaces;
pub mod server;
pub mod tls;
pub mod waiting;
