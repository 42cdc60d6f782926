//! Which meshes a pod template has, whether their proxies run as native
//! sidecars, and which switch each needs so that meshwrap can quit it.
//!
//! The facts come from each injector's own source (see docs/meshes.md):
//! what a manifest writes to ask for injection or opt out, the proxy's
//! container name, the per-pod annotation that makes the proxy native, and
//! the switch that turns its quit endpoint on (Linkerd's and Vault's are off
//! by default; the Cloud SQL Auth Proxy's is a flag of its own).
//!
//! A mesh is found from the template alone (its opt-in, a proxy container
//! already in the spec, an injector's mark on an already-injected pod) or
//! from `--mesh`, which stands for what a namespace decides and a manifest
//! cannot show; a pod that opts out of a mesh never has it. Only the mesh's
//! own proxy decides "native": any other native sidecar (fluent-bit, say)
//! changes nothing. Where the proxy is injected at admission, meshwrap's own
//! `--sidecar auto` reads the injector's mark at run time, so the only
//! sidecar written on the command line is one no annotation reveals (Cloud
//! SQL's).
//!
//! Nothing here changes a value the user set: a switch set to something
//! else is reported, never overwritten.

use serde_json::Value;

/// A mesh (or standalone proxy) meshwrap knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Istio,
    Linkerd,
    Vault,
    Dapr,
    CloudSql,
}

/// What meshwrap knows of each mesh: a data table.
pub struct Facts {
    pub kind: Kind,
    /// The name `--mesh` and meshwrap's `--sidecar` use.
    pub name: &'static str,
    /// The proxy's container name as injected.
    pub proxy: &'static str,
    /// The per-pod annotations that make the proxy a native sidecar, and
    /// the minimum mesh version for the first one (for reports and docs).
    pub native_keys: &'static [&'static str],
    /// The annotation that enables the quit endpoint, and its value.
    pub quit_switch: Option<(&'static str, &'static str)>,
    /// What Argo should run to stop the proxy, where its default (`kill`
    /// through `/bin/sh`) cannot: from Argo's sidecar-injection docs.
    pub argo_kill: Option<&'static str>,
}

pub const MESHES: [Facts; 5] = [
    Facts {
        kind: Kind::Istio,
        name: "istio",
        proxy: "istio-proxy",
        native_keys: &["sidecar.istio.io/nativeSidecar"],
        quit_switch: None,
        argo_kill: Some(r#"["pilot-agent","request","POST","quitquitquit"]"#),
    },
    Facts {
        kind: Kind::Linkerd,
        name: "linkerd",
        proxy: "linkerd-proxy",
        native_keys: &[
            "config.linkerd.io/proxy-enable-native-sidecar",
            "config.alpha.linkerd.io/proxy-enable-native-sidecar",
        ],
        quit_switch: Some(("config.linkerd.io/proxy-admin-shutdown", "enabled")),
        argo_kill: Some(r#"["/usr/lib/linkerd/linkerd-await","sleep","1","--shutdown"]"#),
    },
    Facts {
        kind: Kind::Vault,
        name: "vault",
        proxy: "vault-agent",
        native_keys: &[],
        quit_switch: Some(("vault.hashicorp.com/agent-enable-quit", "true")),
        argo_kill: None,
    },
    Facts {
        kind: Kind::Dapr,
        name: "dapr",
        proxy: "daprd",
        native_keys: &["dapr.io/enable-native-sidecar"],
        quit_switch: None,
        argo_kill: None,
    },
    Facts {
        kind: Kind::CloudSql,
        name: "cloudsql",
        proxy: "cloud-sql-proxy",
        native_keys: &[],
        quit_switch: None,
        argo_kill: None,
    },
];

impl Kind {
    pub fn facts(self) -> &'static Facts {
        MESHES.iter().find(|m| m.kind == self).expect("every kind has facts")
    }
    pub fn parse(name: &str) -> Option<Kind> {
        MESHES
            .iter()
            .find(|m| m.name.eq_ignore_ascii_case(name))
            .map(|m| m.kind)
    }
}

/// What a pod template shows of itself.
pub struct Template<'a> {
    pub annotation: &'a dyn Fn(&str) -> Option<&'a str>,
    pub label: &'a dyn Fn(&str) -> Option<&'a str>,
    pub containers: &'a [Value],
    pub init_containers: &'a [Value],
}

/// A mesh found in a pod template.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Found {
    pub kind: Kind,
    /// Its proxy runs as a native sidecar (declared so, or by its switch).
    pub native: bool,
}

/// The meshes of this pod: asked for, already there, or named by `--mesh`
/// (which a pod's own opt-out overrides).
pub fn find(t: &Template, namespace_level: &[Kind]) -> Vec<Found> {
    MESHES
        .iter()
        .filter_map(|m| {
            let asked = asks_for(t, m.kind);
            let there = proxy_container(t, m).is_some();
            let present = asked == Some(true) || there || (asked.is_none() && namespace_level.contains(&m.kind));
            present.then(|| Found {
                kind: m.kind,
                native: is_native(t, m),
            })
        })
        .collect()
}

/// Whether the template asks for the mesh (`Some(true)`), opts out of it
/// (`Some(false)`), or says nothing; an injector's mark counts as asked.
fn asks_for(t: &Template, kind: Kind) -> Option<bool> {
    let a = |key: &str| (t.annotation)(key);
    match kind {
        Kind::Istio => match (t.label)("sidecar.istio.io/inject").or(a("sidecar.istio.io/inject")) {
            Some(v) => Some(v == "true"),
            None => a("sidecar.istio.io/status").map(|_| true),
        },
        Kind::Linkerd => match a("linkerd.io/inject") {
            Some(v) => Some(v == "enabled" || v == "ingress"),
            None => a("linkerd.io/proxy-version").map(|_| true),
        },
        Kind::Vault if a("vault.hashicorp.com/agent-pre-populate-only").is_some_and(go_true) => Some(false),
        Kind::Vault => match a("vault.hashicorp.com/agent-inject") {
            Some(v) => Some(go_true(v)),
            None => a("vault.hashicorp.com/agent-inject-status").map(|_| true),
        },
        Kind::Dapr => a("dapr.io/enabled").map(|v| v.eq_ignore_ascii_case("true")),
        Kind::CloudSql => None,
    }
}

/// The mesh's proxy container in the spec, as (is an init container, index).
pub fn proxy_container(t: &Template, m: &Facts) -> Option<(bool, usize)> {
    let is_proxy = |c: &Value| {
        let name = c.get("name").and_then(Value::as_str).unwrap_or("");
        let image = c.get("image").and_then(Value::as_str).unwrap_or("");
        name == m.proxy || (m.kind == Kind::CloudSql && image.contains("cloud-sql-proxy"))
    };
    let regular = t.containers.iter().position(is_proxy).map(|i| (false, i));
    regular.or_else(|| t.init_containers.iter().position(is_proxy).map(|i| (true, i)))
}

/// Declared native in the spec (an init container that keeps running) or
/// by the mesh's per-pod native switch.
fn is_native(t: &Template, m: &Facts) -> bool {
    let declared = matches!(proxy_container(t, m), Some((true, i))
        if t.init_containers[i].get("restartPolicy").and_then(Value::as_str) == Some("Always"));
    let switched = m.native_keys.iter().any(|key| {
        (t.annotation)(key).is_some_and(|v| match m.kind {
            Kind::Istio => v == "true",
            Kind::Dapr => truthy(v),
            _ => go_true(v),
        })
    });
    declared || switched
}

/// Go's strconv.ParseBool, true side (Linkerd's and Vault's parser).
pub fn go_true(v: &str) -> bool {
    matches!(v, "1" | "t" | "T" | "true" | "TRUE" | "True")
}

/// Dapr's utils.IsTruthy.
fn truthy(v: &str) -> bool {
    ["y", "yes", "true", "on", "1"]
        .iter()
        .any(|t| v.eq_ignore_ascii_case(t))
}

/// The container flags a Cloud SQL Auth Proxy needs for meshwrap: its
/// readiness endpoint and its quit endpoint, each unless already given.
/// The second list names flags set to something else (reported, left).
pub fn cloudsql_flags(proxy: &Value) -> (Vec<&'static str>, Vec<String>) {
    let given: Vec<&str> = ["command", "args"]
        .iter()
        .filter_map(|f| proxy.get(*f).and_then(Value::as_array))
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let (mut add, mut against) = (Vec::new(), Vec::new());
    for flag in ["--health-check", "--quitquitquit"] {
        match given.iter().find(|g| g.split('=').next() == Some(flag)) {
            None => add.push(flag),
            Some(g) if g.strip_prefix(flag).is_some_and(|rest| rest == "=false") => against.push(g.to_string()),
            Some(_) => {}
        }
    }
    (add, against)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn found(annotations: Value, labels: Value, containers: Value, init: Value) -> Vec<(Kind, bool)> {
        found_with(annotations, labels, containers, init, &[])
    }

    fn found_with(annotations: Value, labels: Value, containers: Value, init: Value, ns: &[Kind]) -> Vec<(Kind, bool)> {
        let annotation = |k: &str| annotations.get(k).and_then(Value::as_str);
        let label = |k: &str| labels.get(k).and_then(Value::as_str);
        let t = Template {
            annotation: &annotation,
            label: &label,
            containers: containers.as_array().unwrap(),
            init_containers: init.as_array().unwrap(),
        };
        find(&t, ns).into_iter().map(|f| (f.kind, f.native)).collect()
    }

    #[test]
    fn meshes_are_found_from_their_opt_ins_and_marks() {
        let none = json!([]);
        assert_eq!(
            found(
                json!({"linkerd.io/inject": "enabled"}),
                json!({}),
                none.clone(),
                none.clone()
            ),
            [(Kind::Linkerd, false)]
        );
        assert_eq!(
            found(
                json!({}),
                json!({"sidecar.istio.io/inject": "true"}),
                none.clone(),
                none.clone()
            ),
            [(Kind::Istio, false)]
        );
        assert_eq!(
            found(
                json!({"vault.hashicorp.com/agent-inject": "true", "dapr.io/enabled": "True"}),
                json!({}),
                none.clone(),
                none.clone()
            ),
            [(Kind::Vault, false), (Kind::Dapr, false)]
        );
        let prepopulate =
            json!({"vault.hashicorp.com/agent-inject": "true", "vault.hashicorp.com/agent-pre-populate-only": "true"});
        assert_eq!(found(prepopulate, json!({}), none.clone(), none.clone()), []);
        assert_eq!(
            found(
                json!({"linkerd.io/proxy-version": "stable-2.14"}),
                json!({}),
                none.clone(),
                none.clone()
            ),
            [(Kind::Linkerd, false)]
        );
    }

    #[test]
    fn the_namespace_level_mesh_yields_to_the_pods_opt_out() {
        let none = json!([]);
        let ns = [Kind::Istio, Kind::Linkerd];
        assert_eq!(
            found_with(
                json!({"linkerd.io/inject": "disabled"}),
                json!({}),
                none.clone(),
                none.clone(),
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
        let switched = json!({"sidecar.istio.io/nativeSidecar": "true"});
        assert_eq!(found(switched, istio, json!([]), json!([])), [(Kind::Istio, true)]);
        let linkerd =
            json!({"linkerd.io/inject": "enabled", "config.alpha.linkerd.io/proxy-enable-native-sidecar": "t"});
        assert_eq!(found(linkerd, json!({}), json!([]), json!([])), [(Kind::Linkerd, true)]);
        let dapr = json!({"dapr.io/enabled": "true", "dapr.io/enable-native-sidecar": "yes"});
        assert_eq!(found(dapr, json!({}), json!([]), json!([])), [(Kind::Dapr, true)]);
    }

    #[test]
    fn a_cloudsql_proxy_is_found_by_name_or_image_and_given_its_flags() {
        let proxy = json!({"name": "db", "image": "gcr.io/cloud-sql-connectors/cloud-sql-proxy:2.14.0",
                           "args": ["--health-check", "--quitquitquit=false", "project:region:db"]});
        assert_eq!(
            found(json!({}), json!({}), json!([proxy.clone()]), json!([])),
            [(Kind::CloudSql, false)]
        );
        assert_eq!(
            cloudsql_flags(&proxy),
            (vec![], vec!["--quitquitquit=false".to_string()])
        );
        let bare = json!({"name": "cloud-sql-proxy", "image": "x", "args": ["p:r:db"]});
        assert_eq!(
            cloudsql_flags(&bare),
            (vec!["--health-check", "--quitquitquit"], vec![])
        );
    }
}
