//! Which meshes a pod template has, whether their proxies run as native
//! sidecars, and what a Cloud SQL Auth Proxy in the spec needs.
//!
//! The facts are meshwrap's table (`meshwrap::meshes`, cited there, one
//! entry per injector version where versions differ); this module asks it
//! about a pod template. A mesh is found from the template alone (an opt-in
//! some version of its injector honours, a proxy container already in the
//! spec, an injector's mark on an already-injected pod) or from `--mesh`,
//! which stands for what a namespace decides and a manifest cannot show; a
//! pod that opts out of a mesh under every version never has it. Only the
//! mesh's own proxy decides "native", and a per-pod switch counts only where
//! every version of the injector reads it as native: any other native
//! sidecar (fluent-bit, say) changes nothing, and a proxy taken as regular
//! is still quit safely (the kubelet restarts a native one of a pod that is
//! ending). Where the proxy is injected at admission, meshwrap's own
//! `--sidecar auto` reads the injector's mark at run time, so the only
//! sidecar written on the command line is one no annotation reveals (Cloud
//! SQL's).
//!
//! Nothing here changes a value the user set: a switch set to something
//! else is reported, never overwritten.

use meshwrap::meshes::{self, Key, Mesh, Place, ProxySetting};
use serde_json::Value;

/// A mesh (or standalone proxy) meshwrap knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Istio,
    Linkerd,
    Vault,
    Dapr,
    Consul,
    Kuma,
    CloudSql,
}

/// The meshes that take over a pod's traffic through their proxy: a pod
/// runs in one of them, while Vault's agent, Dapr's daprd and the Cloud SQL
/// proxy sit beside any.
pub const SERVICE_MESHES: [Kind; 4] = [Kind::Istio, Kind::Linkerd, Kind::Consul, Kind::Kuma];

pub const KINDS: [Kind; 7] = [
    Kind::Istio,
    Kind::Linkerd,
    Kind::Vault,
    Kind::Dapr,
    Kind::Consul,
    Kind::Kuma,
    Kind::CloudSql,
];

impl Kind {
    /// The mesh's facts.
    pub fn facts(self) -> &'static Mesh {
        match self {
            Kind::Istio => &meshes::ISTIO,
            Kind::Linkerd => &meshes::LINKERD,
            Kind::Vault => &meshes::VAULT,
            Kind::Dapr => &meshes::DAPR,
            Kind::Consul => &meshes::CONSUL,
            Kind::Kuma => &meshes::KUMA,
            Kind::CloudSql => &meshes::CLOUDSQL,
        }
    }
    pub fn parse(name: &str) -> Option<Kind> {
        KINDS.into_iter().find(|k| k.facts().name.eq_ignore_ascii_case(name))
    }
}

/// What `--mesh` accepts, for error lines: `auto, istio, ... or cloudsql`.
pub fn accepted() -> String {
    let names: Vec<&str> = KINDS.iter().map(|k| k.facts().name).collect();
    let (last, rest) = names.split_last().unwrap_or((&"", &[]));
    format!("auto, none, {} or {last}", rest.join(", "))
}

/// What a pod template shows of itself.
pub struct Template<'a> {
    pub annotation: &'a dyn Fn(&str) -> Option<&'a str>,
    pub label: &'a dyn Fn(&str) -> Option<&'a str>,
    pub containers: &'a [Value],
    pub init_containers: &'a [Value],
}

impl<'a> Template<'a> {
    /// A key's value, as the facts table asks for it.
    pub fn get(&self, key: Key) -> Option<&'a str> {
        match key.place {
            Place::Annotation => (self.annotation)(key.name),
            Place::Label => (self.label)(key.name),
        }
    }
}

/// A mesh found in a pod template.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Found {
    pub kind: Kind,
    /// Its proxy runs as a native sidecar (declared so, or by its switch).
    pub native: bool,
    /// Not seen: a namespace that nobody named may turn it on
    /// ([`unseen_namespace`]). It gets its switches, nothing more.
    pub unseen: bool,
}

/// The meshes of this pod: asked for, already there, or named by `--mesh`
/// (which a pod's own opt-out overrides); where the namespace is unseen,
/// also those it may turn on.
pub fn find(t: &Template, namespace_level: &[Kind], namespace_unseen: bool) -> Vec<Found> {
    let get = |key: Key| t.get(key);
    let mut found: Vec<Found> = KINDS
        .into_iter()
        .filter_map(|kind| {
            let asked = kind.facts().asks_for(&get);
            let there = proxy_container(t, kind).is_some();
            let present = asked == Some(true) || there || (asked.is_none() && namespace_level.contains(&kind));
            present.then(|| Found {
                kind,
                native: is_native(t, kind),
                unseen: false,
            })
        })
        .collect();
    if namespace_unseen {
        found.extend(unseen_namespace(t, &found));
    }
    found
}

/// The meshes a namespace nobody named may turn on for this pod: each mesh
/// a namespace can turn on (`by_namespace` in the table) that the pod
/// neither opts out of nor shows. None where the pod already shows a
/// service mesh ([`SERVICE_MESHES`]): its author knows the mesh it runs in.
///
/// Fail safe: inject cannot see the namespace, and a quit switch that no
/// proxy reads is inert, while a missing one is a Job that never completes
/// (Linkerd's shutdown endpoint is off by default since 2.16).
fn unseen_namespace(t: &Template, found: &[Found]) -> Vec<Found> {
    let get = |key: Key| t.get(key);
    let by_namespace = |kind: &Kind| !kind.facts().by_namespace.is_empty();
    if found.iter().any(|f| SERVICE_MESHES.contains(&f.kind)) {
        return Vec::new();
    }
    KINDS
        .into_iter()
        .filter(|kind| by_namespace(kind) && kind.facts().asks_for(&get).is_none())
        .map(|kind| Found {
            kind,
            native: false,
            unseen: true,
        })
        .collect()
}

/// The mesh's proxy container in the spec, as (is an init container, index).
pub fn proxy_container(t: &Template, kind: Kind) -> Option<(bool, usize)> {
    let is_proxy = |c: &Value| {
        let name = c.get("name").and_then(Value::as_str).unwrap_or("");
        name == kind.facts().proxy || (kind == Kind::CloudSql && cloudsql_image(c))
    };
    let regular = t.containers.iter().position(is_proxy).map(|i| (false, i));
    regular.or_else(|| t.init_containers.iter().position(is_proxy).map(|i| (true, i)))
}

/// A Cloud SQL Auth Proxy's image: v2's (`.../cloud-sql-proxy`) or v1's.
fn cloudsql_image(c: &Value) -> bool {
    let image = c.get("image").and_then(Value::as_str).unwrap_or("");
    image.contains(meshes::CLOUDSQL.proxy) || image.contains(meshes::CLOUDSQL_V1_IMAGE)
}

/// Declared native in the spec (an init container that keeps running) or
/// by the mesh's per-pod switch, where the template shows an injector
/// version that reads it (the webhook, after the mesh's injector ran).
/// Offline no injector has run, so a switch alone is not native: the pod is
/// wrapped, and its quit switch written (inert if the proxy turns out
/// native; meshwrap decides at run time from the pod's marks).
fn is_native(t: &Template, kind: Kind) -> bool {
    let declared = matches!(proxy_container(t, kind), Some((true, i))
        if t.init_containers[i].get("restartPolicy").and_then(Value::as_str) == Some("Always"));
    declared || kind.facts().native_proven(&|key| t.get(key))
}

/// A native switch of the mesh the template sets to a value some version
/// does not read as native: (key, value).
pub fn native_set_otherwise<'a>(t: &Template<'a>, kind: Kind) -> Option<(&'static str, &'a str)> {
    kind.facts().native_set_otherwise(&|key| t.get(key))
}

/// Where one setting of the proxy comes from.
#[derive(Clone, Debug, PartialEq)]
enum Setting<'a> {
    /// A flag on its command line, or a variable's literal value.
    Given(&'a str, String),
    /// A variable whose value comes from elsewhere (`valueFrom`).
    Hidden(String),
    Default,
}

/// One setting of a Cloud SQL proxy container: its flag (the last given),
/// else its `CSQL_PROXY_` variable (the last given), else the default.
fn setting<'a>(proxy: &'a Value, words: &[&'a str], s: &ProxySetting, boolean: bool) -> Setting<'a> {
    if let Some(value) = meshes::pflag_value(words, s.flag, boolean) {
        return Setting::Given(value, s.flag.to_string());
    }
    let env = proxy
        .get("env")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    match env
        .iter()
        .rev()
        .find(|e| e.get("name").and_then(Value::as_str) == Some(s.env))
    {
        Some(e) => match e.get("value").and_then(Value::as_str) {
            Some(value) => Setting::Given(value, s.env.to_string()),
            None if e.get("valueFrom").is_some() => Setting::Hidden(s.env.to_string()),
            None => Setting::Given("", s.env.to_string()),
        },
        None => Setting::Default,
    }
}

/// What inject makes of a Cloud SQL Auth Proxy container.
#[derive(Clone, Debug, PartialEq)]
pub struct CloudSql {
    /// Flags to append to its args (`--health-check`, `--quitquitquit`).
    pub add: Vec<&'static str>,
    /// Its switches set otherwise, each a note (left as set).
    pub against: Vec<String>,
    /// meshwrap's `--sidecar` for it (`cloudsql`, or with its moved
    /// places; empty: none), or why its endpoints cannot be known here.
    pub sidecar: Result<String, String>,
    /// What may move its ports unseen (`envFrom`, a config file), and other notes.
    pub notes: Vec<String>,
}

/// The v1 proxy (`gce-proxy` image, `/cloud_sql_proxy`): it has none of
/// v2's flags and no quit endpoint.
pub fn cloudsql_v1(proxy: &Value) -> bool {
    let image = proxy.get("image").and_then(Value::as_str).unwrap_or("");
    let binary = proxy.pointer("/command/0").and_then(Value::as_str).unwrap_or("");
    image.contains(meshes::CLOUDSQL_V1_IMAGE) || binary.rsplit('/').next() == Some(meshes::CLOUDSQL_V1_BINARY)
}

/// A v2 Cloud SQL Auth Proxy's endpoints and switches, from its flags and
/// `CSQL_PROXY_` variables (upstream's precedence: a flag over its
/// variable); `Err`: why its endpoints cannot be known here.
pub fn cloudsql(proxy: &Value) -> CloudSql {
    let words: Vec<&str> = ["command", "args"]
        .iter()
        .filter_map(|f| proxy.get(*f).and_then(Value::as_array))
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let mut out = CloudSql {
        add: Vec::new(),
        against: Vec::new(),
        sidecar: cloudsql_sidecar(proxy, &words),
        notes: Vec::new(),
    };
    for s in [&meshes::CLOUDSQL_HEALTH_CHECK, &meshes::CLOUDSQL_QUITQUITQUIT] {
        match setting(proxy, &words, s, true) {
            Setting::Default => out.add.push(s.flag),
            Setting::Given(v, _) if meshes::pflag_bool(v) == Some(true) => {}
            Setting::Given(v, by) => out.against.push(format!("{by}={v}")),
            Setting::Hidden(by) => out.notes.push(format!(
                "the Cloud SQL proxy's {by} comes from elsewhere: meshwrap needs it true"
            )),
        }
    }
    if proxy.get("envFrom").is_some() {
        out.notes.push(hidden_mover("its envFrom"));
    }
    if setting(proxy, &words, &meshes::CLOUDSQL_CONFIG_FILE, false) != Setting::Default {
        out.notes.push(hidden_mover("its config file"));
    }
    out
}

/// meshwrap's `--sidecar` for the proxy: where its readiness
/// (`--http-address`:`--http-port`) and quit (localhost:`--admin-port`) are.
fn cloudsql_sidecar(proxy: &Value, words: &[&str]) -> Result<String, String> {
    let port = |s: &ProxySetting| -> Result<u16, String> {
        let (value, by) = match setting(proxy, words, s, false) {
            Setting::Given(v, by) => (v, by),
            Setting::Default => return Ok(s.default.parse().unwrap_or(0)),
            Setting::Hidden(by) => return Err(unknown(&by, "its value comes from elsewhere")),
        };
        value
            .parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| unknown(&by, &format!("\"{value}\" is not a port number")))
    };
    let (http, admin) = (port(&meshes::CLOUDSQL_HTTP_PORT)?, port(&meshes::CLOUDSQL_ADMIN_PORT)?);
    let host = match setting(proxy, words, &meshes::CLOUDSQL_HTTP_ADDRESS, false) {
        Setting::Default => "127.0.0.1".to_string(),
        Setting::Given(address, by) => health_host(address).ok_or_else(|| {
            unknown(
                &by,
                &format!("\"{address}\" is not an address meshwrap can reach it at"),
            )
        })?,
        Setting::Hidden(by) => return Err(unknown(&by, "its value comes from elsewhere")),
    };
    Ok(match (meshes::CLOUDSQL.ready, meshes::CLOUDSQL.quit) {
        (Some((h, _)), Some((a, _))) if (host.as_str(), http, admin) == ("127.0.0.1", h, a) => "cloudsql".into(),
        _ => format!("cloudsql={host}:{http}/127.0.0.1:{admin}"),
    })
}

/// Why a proxy's endpoints cannot be known here.
fn unknown(by: &str, why: &str) -> String {
    format!(
        "the Cloud SQL proxy's {by}: {why}, so meshwrap cannot know where to wait and quit: name its endpoints with \
         the meshwrap.io/sidecar annotation (cloudsql=HOST:HTTP_PORT/127.0.0.1:ADMIN_PORT)"
    )
}

fn hidden_mover(what: &str) -> String {
    format!(
        "the Cloud SQL proxy's ports are taken from its flags and variables; {what} may set CSQL_PROXY_HTTP_PORT, \
         CSQL_PROXY_ADMIN_PORT or CSQL_PROXY_HTTP_ADDRESS unseen (name them with meshwrap.io/sidecar if so)"
    )
}

/// Where meshwrap reaches a health check served at `--http-address`: any
/// local address serves loopback too; an IP literal is reachable as it is.
fn health_host(address: &str) -> Option<String> {
    match address {
        "" | "localhost" | "0.0.0.0" | "::" | "[::]" | "127.0.0.1" => Some("127.0.0.1".into()),
        _ => match address
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
        {
            Ok(std::net::IpAddr::V6(ip)) => Some(format!("[{ip}]")),
            Ok(ip) => Some(ip.to_string()),
            Err(_) => None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn found(annotations: Value, labels: Value, containers: Value, init: Value) -> Vec<(Kind, bool)> {
        found_with(annotations, labels, containers, init, &[])
    }

    /// What `find` makes of a template with these parts.
    fn finds(
        annotations: &Value,
        labels: &Value,
        containers: &Value,
        init: &Value,
        ns: &[Kind],
        unseen: bool,
    ) -> Vec<Found> {
        let annotation = |k: &str| annotations.get(k).and_then(Value::as_str);
        let label = |k: &str| labels.get(k).and_then(Value::as_str);
        let t = Template {
            annotation: &annotation,
            label: &label,
            containers: containers.as_array().unwrap(),
            init_containers: init.as_array().unwrap(),
        };
        find(&t, ns, unseen)
    }

    fn found_with(annotations: Value, labels: Value, containers: Value, init: Value, ns: &[Kind]) -> Vec<(Kind, bool)> {
        let found = finds(&annotations, &labels, &containers, &init, ns, false);
        found.into_iter().map(|f| (f.kind, f.native)).collect()
    }

    /// The meshes an unseen namespace adds: (kind, unseen).
    fn unseen(annotations: Value, labels: Value, containers: Value) -> Vec<(Kind, bool)> {
        let found = finds(&annotations, &labels, &containers, &json!([]), &[], true);
        found.into_iter().map(|f| (f.kind, f.unseen)).collect()
    }

    #[test]
    fn an_unseen_namespace_may_turn_on_istio_and_linkerd_for_a_pod_that_shows_neither() {
        let both = [(Kind::Istio, true), (Kind::Linkerd, true)];
        assert_eq!(unseen(json!({}), json!({}), json!([])), both);
        // Vault's agent and Dapr come only from the pod's own switch.
        assert_eq!(
            unseen(
                json!({"vault.hashicorp.com/agent-inject": "true"}),
                json!({}),
                json!([])
            ),
            [(Kind::Vault, false), (Kind::Istio, true), (Kind::Linkerd, true)]
        );
    }

    #[test]
    fn an_unseen_namespace_adds_nothing_the_pod_opts_out_of_or_beside_a_mesh_it_shows() {
        assert_eq!(
            unseen(
                json!({"linkerd.io/inject": "disabled"}),
                json!({"sidecar.istio.io/inject": "false"}),
                json!([])
            ),
            []
        );
        assert_eq!(
            unseen(json!({"linkerd.io/inject": "disabled"}), json!({}), json!([])),
            [(Kind::Istio, true)]
        );
        assert_eq!(
            unseen(json!({}), json!({"sidecar.istio.io/inject": "true"}), json!([])),
            [(Kind::Istio, false)]
        );
        let proxy = json!([{"name": "linkerd-proxy", "image": "cr.l5d.io/linkerd/proxy"}]);
        assert_eq!(unseen(json!({}), json!({}), proxy), [(Kind::Linkerd, false)]);
    }

    fn by_annotations(annotations: Value) -> Vec<(Kind, bool)> {
        found(annotations, json!({}), json!([]), json!([]))
    }

    #[test]
    fn consul_is_found_from_its_opt_in_its_mark_or_its_dataplane_and_native_only_where_proven() {
        let native = "consul.hashicorp.com/enable-consul-dataplane-as-sidecar";
        assert_eq!(
            by_annotations(json!({"consul.hashicorp.com/connect-inject": "true"})),
            [(Kind::Consul, false)]
        );
        assert_eq!(
            by_annotations(json!({"consul.hashicorp.com/connect-inject-status": "injected"})),
            [(Kind::Consul, false)]
        );
        assert_eq!(
            found(json!({}), json!({}), json!([{"name": "consul-dataplane"}]), json!([])),
            [(Kind::Consul, false)]
        );
        assert_eq!(
            by_annotations(json!({"consul.hashicorp.com/connect-inject": "true", native: "true"})),
            [(Kind::Consul, false)],
            "offline no injector wrote its version"
        );
        assert_eq!(
            by_annotations(json!({
                "consul.hashicorp.com/connect-inject-status": "injected",
                "consul.hashicorp.com/consul-k8s-version": "v1.9.0",
                native: "true",
            })),
            [(Kind::Consul, true)]
        );
        assert_eq!(Kind::parse("Consul"), Some(Kind::Consul));
    }

    #[test]
    fn kuma_is_found_from_its_label_its_mark_or_its_sidecar_and_never_native_by_a_switch() {
        assert_eq!(
            found(
                json!({}),
                json!({"kuma.io/sidecar-injection": "enabled"}),
                json!([]),
                json!([])
            ),
            [(Kind::Kuma, false)]
        );
        assert_eq!(
            by_annotations(json!({"kuma.io/sidecar-injected": "true"})),
            [(Kind::Kuma, false)]
        );
        assert_eq!(
            found(
                json!({}),
                json!({}),
                json!([]),
                json!([{"name": "kuma-sidecar", "restartPolicy": "Always"}])
            ),
            [(Kind::Kuma, true)],
            "declared native in the spec"
        );
        assert_eq!(
            found(
                json!({}),
                json!({"kuma.io/sidecar-injection": "disabled"}),
                json!([]),
                json!([])
            ),
            []
        );
    }

    #[test]
    fn meshes_are_found_from_their_opt_ins_and_marks() {
        assert_eq!(
            by_annotations(json!({"linkerd.io/inject": "enabled"})),
            [(Kind::Linkerd, false)]
        );
        assert_eq!(
            found(
                json!({}),
                json!({"sidecar.istio.io/inject": "true"}),
                json!([]),
                json!([])
            ),
            [(Kind::Istio, false)]
        );
        assert_eq!(
            by_annotations(json!({"vault.hashicorp.com/agent-inject": "true", "dapr.io/enabled": "True"})),
            [(Kind::Vault, false), (Kind::Dapr, false)]
        );
        let prepopulate =
            json!({"vault.hashicorp.com/agent-inject": "true", "vault.hashicorp.com/agent-pre-populate-only": "true"});
        assert_eq!(by_annotations(prepopulate), []);
        assert_eq!(
            by_annotations(json!({"linkerd.io/proxy-version": "stable-2.14"})),
            [(Kind::Linkerd, false)]
        );
    }

    #[test]
    fn istio_is_asked_for_by_any_value_some_version_injects_on() {
        for value in ["yes", "on", "y", "True", "TRUE"] {
            assert_eq!(
                by_annotations(json!({"sidecar.istio.io/inject": value})),
                [(Kind::Istio, false)],
                "{value}"
            );
        }
        // "no" opts out before 1.27 and leaves it to the namespace after.
        let ns = [Kind::Istio];
        let no = json!({"sidecar.istio.io/inject": "no"});
        assert_eq!(
            found_with(no, json!({}), json!([]), json!([]), &ns),
            [(Kind::Istio, false)]
        );
        let off = json!({"sidecar.istio.io/inject": "false"});
        assert_eq!(found_with(off, json!({}), json!([]), json!([]), &ns), []);
    }

    #[test]
    fn dapr_is_asked_for_by_any_value_some_version_injects_on() {
        for value in ["1", "yes", "t", " true "] {
            assert_eq!(
                by_annotations(json!({"dapr.io/enabled": value})),
                [(Kind::Dapr, false)],
                "{value}"
            );
        }
        assert_eq!(by_annotations(json!({"dapr.io/enabled": "false"})), []);
    }

    #[test]
    fn the_namespace_level_mesh_yields_to_the_pods_opt_out() {
        let ns = [Kind::Istio, Kind::Linkerd];
        assert_eq!(
            found_with(
                json!({"linkerd.io/inject": "disabled"}),
                json!({}),
                json!([]),
                json!([]),
                &ns
            ),
            [(Kind::Istio, false)]
        );
    }

    #[test]
    fn only_the_meshs_own_proxy_decides_native() {
        let fluent = json!([{"name": "fluent-bit", "image": "fluent/fluent-bit", "restartPolicy": "Always"}]);
        let istio = json!({"sidecar.istio.io/inject": "true"});
        assert_eq!(
            found(json!({}), istio.clone(), json!([]), fluent),
            [(Kind::Istio, false)]
        );
        let native_proxy = json!([{"name": "istio-proxy", "image": "proxyv2", "restartPolicy": "Always"}]);
        assert_eq!(
            found(json!({}), json!({}), json!([]), native_proxy),
            [(Kind::Istio, true)]
        );
        // A per-pod switch alone is not native: no injector has run, so none
        // shows a version that reads it (native only where proven).
        let switched = json!({"sidecar.istio.io/nativeSidecar": "true"});
        assert_eq!(found(switched, istio, json!([]), json!([])), [(Kind::Istio, false)]);
        let linkerd =
            json!({"linkerd.io/inject": "enabled", "config.alpha.linkerd.io/proxy-enable-native-sidecar": "t"});
        assert_eq!(by_annotations(linkerd), [(Kind::Linkerd, false)]);
        let dapr = json!({"dapr.io/enabled": "true", "dapr.io/enable-native-sidecar": "yes"});
        assert_eq!(by_annotations(dapr), [(Kind::Dapr, false)]);
        // At admission after Linkerd's injector, its created-by shows the version.
        let injected = json!({
            "linkerd.io/inject": "enabled",
            "linkerd.io/created-by": "linkerd/proxy-injector edge-24.2.4",
            "config.alpha.linkerd.io/proxy-enable-native-sidecar": "t"
        });
        assert_eq!(by_annotations(injected), [(Kind::Linkerd, true)]);
    }

    #[test]
    fn linkerds_stable_false_over_alpha_true_is_a_regular_proxy() {
        let both = json!({"linkerd.io/inject": "enabled",
                          "config.linkerd.io/proxy-enable-native-sidecar": "false",
                          "config.alpha.linkerd.io/proxy-enable-native-sidecar": "true"});
        assert_eq!(by_annotations(both), [(Kind::Linkerd, false)]);
        let beta = json!({"linkerd.io/inject": "enabled",
                          "config.beta.linkerd.io/proxy-enable-native-sidecar": "false",
                          "config.alpha.linkerd.io/proxy-enable-native-sidecar": "true"});
        assert_eq!(by_annotations(beta), [(Kind::Linkerd, false)]);
    }

    fn proxy(args: Value, env: Value) -> Value {
        json!({"name": "cloud-sql-proxy", "image": "gcr.io/cloud-sql-connectors/cloud-sql-proxy:2.14.1",
               "args": args, "env": env})
    }

    #[test]
    fn a_cloudsql_proxy_is_found_by_name_or_image_and_given_its_flags() {
        let named = json!({"name": "db", "image": "gcr.io/cloud-sql-connectors/cloud-sql-proxy:2.14.0",
                           "args": ["--health-check", "--quitquitquit=false", "project:region:db"]});
        assert_eq!(
            found(json!({}), json!({}), json!([named.clone()]), json!([])),
            [(Kind::CloudSql, false)]
        );
        let plan = cloudsql(&named);
        assert_eq!(
            (plan.add, plan.against),
            (vec![], vec!["--quitquitquit=false".to_string()])
        );
        let bare = cloudsql(&proxy(json!(["p:r:db"]), json!([])));
        assert_eq!(
            (bare.add, bare.sidecar),
            (vec!["--health-check", "--quitquitquit"], Ok("cloudsql".into()))
        );
    }

    #[test]
    fn a_cloudsql_proxy_on_moved_ports_gets_its_own_places() {
        let flags = proxy(json!(["--http-port=9190", "--admin-port", "9192", "p:r:db"]), json!([]));
        assert_eq!(
            cloudsql(&flags).sidecar.unwrap(),
            "cloudsql=127.0.0.1:9190/127.0.0.1:9192"
        );
        let env = proxy(
            json!(["p:r:db"]),
            json!([{"name": "CSQL_PROXY_HTTP_PORT", "value": "9290"}, {"name": "CSQL_PROXY_HTTP_ADDRESS", "value": "0.0.0.0"}]),
        );
        assert_eq!(
            cloudsql(&env).sidecar.unwrap(),
            "cloudsql=127.0.0.1:9290/127.0.0.1:9091"
        );
        // The flag wins over its variable.
        let both = proxy(
            json!(["--http-port=9390"]),
            json!([{"name": "CSQL_PROXY_HTTP_PORT", "value": "9290"}]),
        );
        assert_eq!(
            cloudsql(&both).sidecar.unwrap(),
            "cloudsql=127.0.0.1:9390/127.0.0.1:9091"
        );
        let ip = proxy(json!(["--http-address=10.1.2.3"]), json!([]));
        assert_eq!(cloudsql(&ip).sidecar.unwrap(), "cloudsql=10.1.2.3:9090/127.0.0.1:9091");
    }

    #[test]
    fn a_cloudsql_proxy_whose_ports_cannot_be_known_here_is_refused_with_the_reason() {
        let hidden = proxy(
            json!([]),
            json!([{"name": "CSQL_PROXY_ADMIN_PORT", "valueFrom": {"configMapKeyRef": {}}}]),
        );
        assert!(
            cloudsql(&hidden)
                .sidecar
                .unwrap_err()
                .contains("CSQL_PROXY_ADMIN_PORT: its value comes from elsewhere")
        );
        let expanded = proxy(json!(["--http-address=$(POD_IP)"]), json!([]));
        assert!(cloudsql(&expanded).sidecar.unwrap_err().contains("--http-address"));
        let named = proxy(json!(["--http-port=http"]), json!([]));
        assert!(cloudsql(&named).sidecar.unwrap_err().contains("not a port number"));
    }

    #[test]
    fn a_cloudsql_switch_set_by_its_variable_is_not_set_again() {
        let on = proxy(json!([]), json!([{"name": "CSQL_PROXY_QUITQUITQUIT", "value": "true"}]));
        assert_eq!(cloudsql(&on).add, ["--health-check"]);
        let off = proxy(
            json!([]),
            json!([{"name": "CSQL_PROXY_QUITQUITQUIT", "value": "false"}]),
        );
        let plan = cloudsql(&off);
        assert_eq!(
            (plan.add, plan.against),
            (vec!["--health-check"], vec!["CSQL_PROXY_QUITQUITQUIT=false".into()])
        );
        let from = json!({"name": "cloud-sql-proxy", "image": "x", "envFrom": [{"configMapRef": {"name": "c"}}]});
        assert!(cloudsql(&from).notes[0].contains("envFrom"));
    }

    #[test]
    fn a_v1_cloudsql_proxy_is_told_apart_by_image_or_binary() {
        assert!(cloudsql_v1(
            &json!({"name": "cloud-sql-proxy", "image": "gcr.io/cloudsql-docker/gce-proxy:1.28.0"})
        ));
        assert!(cloudsql_v1(
            &json!({"name": "db", "image": "mirror/x:1", "command": ["/cloud_sql_proxy"]})
        ));
        assert!(!cloudsql_v1(&proxy(json!([]), json!([]))));
        let v1 = json!([{"name": "sql", "image": "gcr.io/cloudsql-docker/gce-proxy:1.28.0"}]);
        assert_eq!(found(json!({}), json!({}), v1, json!([])), [(Kind::CloudSql, false)]);
    }
}
