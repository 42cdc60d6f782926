//! The webhook reads the Namespace of each pod it decides, for what only a
//! namespace shows: that its labels or annotations turn a mesh on for every
//! pod in it (`by_namespace` in meshwrap's `src/meshes.rs`: Istio's
//! `istio-injection`/`istio.io/rev` labels, Linkerd's `linkerd.io/inject`
//! annotation). Offline inject cannot see it and writes the switches of
//! every such mesh (`mesh::unseen_namespace`, inert where the mesh is
//! absent); the webhook reads it, and writes the switches of the meshes the
//! namespace does turn on.
//!
//! Fail safe: the pod is never refused, nor held past the lookup's deadline,
//! for a namespace that cannot be read. A read that fails (no RBAC, an API
//! server down, slow or answering garbage) or misses `--namespace-timeout`
//! decides the pod as offline inject does, with every switch, and says so
//! in the log. Races and loads it guards against:
//! - a cold burst of a thousand pods in one namespace: one read per
//!   namespace at a time, which the others wait for (each within its own
//!   deadline), never one read per pod;
//! - an API server that hangs: each namespace waits for it once per
//!   [`FAILED_TTL`], then the failure is remembered as long and its pods
//!   are decided at once;
//! - a namespace whose labels change: what was read is kept [`TTL`] (5 s),
//!   so a mesh turned on or off shows within that much time (a pod whose
//!   proxy is already injected, as on reinvocation after the mesh's own
//!   injector, shows its mesh itself, whatever the cache says);
//! - many namespaces: at most [`MAX_NAMESPACES`] are remembered; beyond,
//!   the stale ones are forgotten first, then all.
//!
//! The read is `GET /api/v1/namespaces/NAME`, which needs `get` on
//! `namespaces` (the manifests' and the chart's ClusterRole).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hyper::Method;
use serde_json::{Value, json};
use tokio::sync::watch;

use super::apiserver::{Access, Client, Endpoint};
use super::log;
use crate::mesh::{KINDS, Kind};
use crate::transform::Options;
use meshwrap::meshes::{Key, Place};

/// How long a namespace read is kept: short, because a mesh turned on by
/// a label added since costs that mesh's switches (the pods of a GitOps
/// sync that labels the namespace and creates the Job together).
pub const TTL: Duration = Duration::from_secs(5);
/// How long a failure to read one is kept: longer, because its pods get
/// every switch anyway, and each new read may wait the full deadline.
pub const FAILED_TTL: Duration = Duration::from_secs(30);
/// Namespaces remembered at most.
pub const MAX_NAMESPACES: usize = 10_000;
/// The largest Namespace object read.
const MAX_NAMESPACE: usize = 64 * 1024;

#[derive(Clone, Debug)]
pub struct Config {
    pub enabled: bool,
    /// `--api-server`; none: the in-cluster variables.
    pub api_server: Option<Endpoint>,
    pub token: std::path::PathBuf,
    pub ca: std::path::PathBuf,
    /// How long a pod's decision may wait for its namespace's read.
    pub timeout: Duration,
}

/// What is known of a namespace: the meshes it turns on, or why it could
/// not be read.
pub type Seen = Result<Vec<Kind>, String>;

enum Entry {
    Known {
        at: Instant,
        seen: Seen,
    },
    /// A read under way; its result comes on the channel.
    Reading(watch::Receiver<Option<Seen>>),
}

/// Connections to the API server for reads: a read of one namespace that
/// is slow holds one of them, not every other namespace's read.
const CLIENTS: usize = 4;

struct Inner {
    /// Each namespace is read on the one its name hashes to.
    clients: Vec<tokio::sync::Mutex<Client>>,
    cache: Mutex<HashMap<String, Entry>>,
    timeout: Duration,
}

/// The namespace reader, shared by every request; off: every namespace is
/// unseen.
pub struct Namespaces {
    inner: Option<Arc<Inner>>,
}

impl Namespaces {
    pub fn off() -> Namespaces {
        Namespaces { inner: None }
    }

    /// The reader, or off with one line in the log saying why. Within the
    /// runtime.
    pub fn start(config: &Config) -> Namespaces {
        if !config.enabled {
            log::info("namespaces are not read", &[("reason", json!("--namespaces off"))]);
            return Namespaces::off();
        }
        let made = super::apiserver::locate(config.api_server.as_ref()).and_then(|endpoint| {
            let access = Access {
                endpoint,
                token: config.token.clone(),
                ca: config.ca.clone(),
                timeout: config.timeout,
            };
            (0..CLIENTS)
                .map(|_| Client::new(access.clone()))
                .collect::<Result<Vec<_>, _>>()
        });
        match made {
            Ok(clients) => {
                let endpoint = clients[0].endpoint().to_string();
                log::info("namespaces are read", &[("api_server", json!(endpoint))]);
                Namespaces {
                    inner: Some(Arc::new(Inner {
                        clients: clients.into_iter().map(tokio::sync::Mutex::new).collect(),
                        cache: Mutex::new(HashMap::new()),
                        timeout: config.timeout,
                    })),
                }
            }
            Err(why) => {
                let why = format!("{why}; pods get the switches of every mesh a namespace may turn on");
                log::warn("namespaces are not read", &[("reason", json!(why))]);
                Namespaces::off()
            }
        }
    }

    /// The options to decide a pod of `namespace` with: `options` with the
    /// meshes the namespace turns on, and the namespace seen; `None` where
    /// it is not read or could not be (decide with `options` as they are).
    pub async fn options_for(&self, namespace: &str, options: &Options) -> Option<Options> {
        let inner = self.inner.as_ref()?;
        if namespace.is_empty() {
            return None;
        }
        match inner.seen(namespace).await {
            Ok(meshes) => Some(seen_options(options, &meshes)),
            Err(_) => None,
        }
    }
}

impl Inner {
    /// What is known of `namespace`, reading it if need be (at most one read
    /// per namespace at a time), within the deadline.
    async fn seen(self: &Arc<Self>, namespace: &str) -> Seen {
        let mut waiting = match self.cached_or_read(namespace) {
            Ok(seen) => return seen,
            Err(receiver) => receiver,
        };
        let wait = waiting.wait_for(Option::is_some);
        match tokio::time::timeout(self.timeout, wait).await {
            Ok(Ok(seen)) => seen.clone().unwrap_or_else(|| Err("no read".into())),
            Ok(Err(_)) => Err("the read ended without a result".into()),
            Err(_) => Err(format!("no answer within {:?}", self.timeout)),
        }
    }

    /// The fresh entry's result, or the read under way (started here if
    /// none was) to wait for.
    fn cached_or_read(self: &Arc<Self>, namespace: &str) -> Result<Seen, watch::Receiver<Option<Seen>>> {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        match cache.get(namespace) {
            Some(Entry::Known { at, seen }) if at.elapsed() < kept_for(seen) => return Ok(seen.clone()),
            Some(Entry::Reading(receiver)) => return Err(receiver.clone()),
            _ => {}
        }
        make_room(&mut cache);
        let (sender, receiver) = watch::channel(None);
        cache.insert(namespace.to_string(), Entry::Reading(receiver.clone()));
        drop(cache);
        let (inner, name) = (self.clone(), namespace.to_string());
        tokio::spawn(async move {
            let seen = inner.read(&name).await;
            if let Err(why) = &seen {
                log::warn(
                    "namespace not read",
                    &[
                        ("namespace", json!(name)),
                        ("reason", json!(why)),
                        (
                            "then",
                            json!("its pods get the switches of every mesh a namespace may turn on"),
                        ),
                    ],
                );
            }
            let mut cache = inner.cache.lock().unwrap_or_else(|p| p.into_inner());
            cache.insert(
                name,
                Entry::Known {
                    at: Instant::now(),
                    seen: seen.clone(),
                },
            );
            let _ = sender.send(Some(seen));
        });
        Err(receiver)
    }

    /// One read of the Namespace, bounded by the client's deadline.
    async fn read(&self, namespace: &str) -> Seen {
        let path = format!("/api/v1/namespaces/{namespace}");
        let hash = namespace
            .bytes()
            .fold(0usize, |h, b| h.wrapping_mul(31).wrapping_add(b as usize));
        let reply = self.clients[hash % self.clients.len()]
            .lock()
            .await
            .send(Method::GET, &path, "application/json", Vec::new())
            .await?;
        match reply.status {
            200 if reply.body.len() <= MAX_NAMESPACE => {
                let object: Value = serde_json::from_slice(&reply.body)
                    .map_err(|e| format!("GET {path}: the answer is not JSON: {e}"))?;
                meshes_turned_on(&object).map_err(|why| format!("GET {path}: {why}"))
            }
            200 => Err(format!("GET {path}: an answer over {MAX_NAMESPACE} bytes")),
            403 => Err(format!(
                "GET {path}: 403 {} (the webhook's ServiceAccount needs get on namespaces)",
                reply.message()
            )),
            status => Err(format!("GET {path}: {status} {}", reply.message())),
        }
    }
}

/// How long a result is kept.
fn kept_for(seen: &Seen) -> Duration {
    if seen.is_ok() { TTL } else { FAILED_TTL }
}

/// Forgets stale entries when the cache is full, and everything but reads
/// under way if that is not enough.
fn make_room(cache: &mut HashMap<String, Entry>) {
    if cache.len() < MAX_NAMESPACES {
        return;
    }
    cache.retain(|_, e| match e {
        Entry::Known { at, seen } => at.elapsed() < kept_for(seen),
        Entry::Reading(_) => true,
    });
    if cache.len() >= MAX_NAMESPACES {
        cache.retain(|_, e| matches!(e, Entry::Reading(_)));
    }
}

/// The meshes a Namespace object's labels and annotations turn on, by the
/// table's `by_namespace` rules; `Err` for an object that is not a Namespace.
pub fn meshes_turned_on(object: &Value) -> Result<Vec<Kind>, String> {
    if object.get("kind").and_then(Value::as_str) != Some("Namespace") {
        return Err("the answer is not a Namespace".into());
    }
    let metadata = object.get("metadata").unwrap_or(&Value::Null);
    let get = |key: Key| {
        let field = match key.place {
            Place::Label => "labels",
            Place::Annotation => "annotations",
        };
        metadata.get(field)?.get(key.name)?.as_str()
    };
    Ok(KINDS
        .into_iter()
        .filter(|kind| kind.facts().on_by_namespace(&get))
        .collect())
}

/// `options` for a pod of a namespace seen to turn on `meshes`: those
/// meshes besides `--mesh`'s, and no unseen namespace to cover.
pub fn seen_options(options: &Options, meshes: &[Kind]) -> Options {
    let mut seen = options.clone();
    for kind in meshes {
        if !seen.meshes.contains(kind) {
            seen.meshes.push(*kind);
        }
    }
    seen.namespace_unseen = false;
    seen
}

#[cfg(test)]
mod tests {
    use super::*;

    fn namespace(labels: Value, annotations: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": "ml", "labels": labels, "annotations": annotations}})
    }

    #[test]
    fn a_namespace_turns_on_the_meshes_its_labels_and_annotations_name() {
        let on = |labels, annotations| meshes_turned_on(&namespace(labels, annotations)).unwrap();
        assert_eq!(on(json!({}), json!({})), []);
        assert_eq!(on(json!({"istio-injection": "enabled"}), json!({})), [Kind::Istio]);
        assert_eq!(on(json!({"istio.io/rev": "canary"}), json!({})), [Kind::Istio]);
        assert_eq!(on(json!({"istio-injection": "disabled"}), json!({})), []);
        assert_eq!(on(json!({}), json!({"linkerd.io/inject": "enabled"})), [Kind::Linkerd]);
        // Linkerd's is an annotation, Istio's a label: not the other way round.
        assert_eq!(
            on(
                json!({"linkerd.io/inject": "enabled"}),
                json!({"istio-injection": "enabled"})
            ),
            []
        );
    }

    #[test]
    fn what_is_not_a_namespace_is_not_read_as_one() {
        assert!(meshes_turned_on(&json!({"kind": "Status", "code": 404})).is_err());
        assert!(meshes_turned_on(&json!([])).is_err());
        // A Namespace without metadata turns nothing on.
        assert_eq!(meshes_turned_on(&json!({"kind": "Namespace"})).unwrap(), []);
    }

    #[test]
    fn a_seen_namespace_adds_its_meshes_to_the_named_ones_and_is_no_longer_unseen() {
        let options = Options {
            meshes: vec![Kind::Linkerd],
            namespace_unseen: true,
            ..Options::default()
        };
        let seen = seen_options(&options, &[Kind::Istio, Kind::Linkerd]);
        assert_eq!(seen.meshes, [Kind::Linkerd, Kind::Istio]);
        assert!(!seen.namespace_unseen);
        assert!(!seen_options(&options, &[]).namespace_unseen);
    }
}
