//! Sidecar presets: the ready and quit endpoints of the proxies people run
//! next to batch jobs, so `--sidecar linkerd` is all a manifest needs. The
//! meshes' endpoints are those of the facts table (`crate::meshes`).
//!
//! A preset names its endpoints by port and path on 127.0.0.1. `NAME=HOST`
//! moves them to another host, `NAME=HOST:PORT` also moves the preset's first
//! port to PORT, and its other port keeps its distance (Istio's 15021/15020
//! become PORT/PORT-1). `NAME=PLACE/QUIT_PLACE` gives the quit endpoint a
//! place of its own (`HOST` or `HOST:PORT`), for a proxy whose two ports
//! moved apart: `cloudsql=127.0.0.1:9190/127.0.0.1:9192` (a Cloud SQL proxy
//! started with `--http-port 9190 --admin-port 9192`). Two quirks travel
//! with a preset to the quit phase: Linkerd answers 404 while its shutdown
//! endpoint is disabled, which the error explains, and the Cloud SQL Auth
//! Proxy may exit before answering, so a connection closed after the
//! request was sent counts as a quit.

use super::http::Endpoint;
use crate::meshes::{self, Mesh};

pub struct Preset {
    pub name: &'static str,
    /// The mesh whose facts these are; none for plain Envoy and `none`.
    pub mesh: Option<&'static Mesh>,
    ready: Option<(u16, &'static str)>,
    quit: Option<(u16, &'static str)>,
    /// What a 404 from the quit endpoint means for this sidecar.
    pub not_found_hint: Option<&'static str>,
    /// The sidecar may exit before its answer to a quit reaches us.
    pub exits_before_answering: bool,
}

/// A mesh's preset, its endpoints from the facts table.
const fn of(mesh: &'static Mesh, not_found_hint: Option<&'static str>, exits_before_answering: bool) -> Preset {
    Preset {
        name: mesh.name,
        mesh: Some(mesh),
        ready: mesh.ready,
        quit: mesh.quit,
        not_found_hint,
        exits_before_answering,
    }
}

pub const PRESETS: [Preset; 9] = [
    of(&meshes::ISTIO, None, false),
    Preset {
        name: "envoy",
        mesh: None,
        ready: Some((15000, "/ready")),
        quit: Some((15000, "/quitquitquit")),
        not_found_hint: None,
        exits_before_answering: false,
    },
    of(
        &meshes::LINKERD,
        Some(
            "Linkerd's shutdown endpoint is not enabled; enable it with the pod annotation \
             config.linkerd.io/proxy-admin-shutdown: enabled (or the proxy's \
             LINKERD2_PROXY_SHUTDOWN_ENDPOINT_ENABLED=true)",
        ),
        false,
    ),
    of(
        &meshes::CLOUDSQL,
        Some("the Cloud SQL Auth Proxy serves quitquitquit only when started with --quitquitquit"),
        true,
    ),
    of(
        &meshes::VAULT,
        Some(
            "Vault agent serves /agent/v1/quit only when enabled: give the pod the annotation \
             vault.hashicorp.com/agent-enable-quit: \"true\"",
        ),
        false,
    ),
    of(&meshes::DAPR, None, false),
    of(&meshes::CONSUL, None, false),
    of(&meshes::KUMA, None, false),
    Preset {
        name: "none",
        mesh: None,
        ready: None,
        quit: None,
        not_found_hint: None,
        exits_before_answering: false,
    },
];

/// The presets `--sidecar auto` considers: those whose injector marks the
/// pods it injects (`meshes::MARKED`).
pub const AUTO: [&str; meshes::MARKED.len()] = {
    let mut names = [""; meshes::MARKED.len()];
    let mut i = 0;
    while i < names.len() {
        names[i] = meshes::MARKED[i].name;
        i += 1;
    }
    names
};

/// What a preset value may look like, for error messages.
pub fn accepts() -> String {
    let names: Vec<&str> = std::iter::once("auto").chain(PRESETS.iter().map(|p| p.name)).collect();
    format!(
        "one of {}, optionally NAME=HOST, NAME=HOST:PORT, or NAME=HOST:PORT/HOST:PORT (the second place the quit endpoint's)",
        names.join(", ")
    )
}

/// One preset as configured: its endpoints, after any host and port override.
pub struct Sidecar {
    pub preset: &'static Preset,
    pub ready: Option<Endpoint>,
    pub quit: Option<Endpoint>,
}

/// Parses `NAME`, `NAME=HOST`, `NAME=HOST:PORT` or `NAME=PLACE/QUIT_PLACE`;
/// the error says what is wrong.
pub fn parse(value: &str) -> Result<Sidecar, String> {
    let (name, place) = value
        .split_once('=')
        .map_or((value, None), |(name, place)| (name, Some(place)));
    let preset = PRESETS
        .iter()
        .find(|p| p.name.eq_ignore_ascii_case(name.trim()))
        .ok_or_else(|| format!("'{name}' is not a preset"))?;
    let (place, quit_place) = match place.map(|p| p.split_once('/')) {
        Some(Some((place, quit))) => (Some(place), Some(quit)),
        Some(None) => (place, None),
        None => (None, None),
    };
    let base = preset.ready.or(preset.quit).map_or(0, |(port, _)| port);
    let (host, new_base) = match place {
        None => ("127.0.0.1".to_string(), base),
        Some(place) => authority(place, base)?,
    };
    let endpoint = |(port, path): (u16, &str)| {
        let moved = i32::from(new_base) + i32::from(port) - i32::from(base);
        let moved = u16::try_from(moved)
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| format!("{}'s port {port} would move to {moved}, out of range", preset.name))?;
        Endpoint::parse(&format!("http://{host}:{moved}{path}"))
    };
    let mut quit = preset.quit.map(endpoint).transpose()?;
    if let Some(place) = quit_place {
        let (Some(moved), Some((_, path))) = (&quit, preset.quit) else {
            return Err(format!("{} has no quit endpoint to place", preset.name));
        };
        let (host, port) = authority(place, moved.explicit_port().unwrap_or(80))?;
        quit = Some(Endpoint::parse(&format!("http://{host}:{port}{path}"))?);
    }
    Ok(Sidecar {
        preset,
        ready: preset.ready.map(endpoint).transpose()?,
        quit,
    })
}

/// `HOST` or `HOST:PORT`, checked as a URL's authority (so IPv6 brackets
/// and ports read as in URLs); the port is `default` where none is given.
fn authority(place: &str, default: u16) -> Result<(String, u16), String> {
    let probe = Endpoint::parse(&format!("http://{place}/"))?;
    Ok((probe.host_text(), probe.explicit_port().unwrap_or(default)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn urls(value: &str) -> (Option<String>, Option<String>) {
        let sidecar = parse(value).unwrap();
        (sidecar.ready.map(|e| e.url), sidecar.quit.map(|e| e.url))
    }

    #[test]
    fn presets_name_their_endpoints() {
        assert_eq!(
            urls("istio"),
            (
                Some("http://127.0.0.1:15021/healthz/ready".into()),
                Some("http://127.0.0.1:15020/quitquitquit".into())
            )
        );
        assert_eq!(
            urls("vault"),
            (None, Some("http://127.0.0.1:8200/agent/v1/quit".into()))
        );
        assert_eq!(urls("none"), (None, None));
    }

    #[test]
    fn overrides_move_host_and_ports_together() {
        assert_eq!(
            urls("istio=10.0.0.7:16021"),
            (
                Some("http://10.0.0.7:16021/healthz/ready".into()),
                Some("http://10.0.0.7:16020/quitquitquit".into())
            )
        );
        assert_eq!(
            urls("cloudsql=[::1]"),
            (
                Some("http://[::1]:9090/startup".into()),
                Some("http://[::1]:9091/quitquitquit".into())
            )
        );
        assert_eq!(
            urls("Linkerd=127.0.0.2:5191").1,
            Some("http://127.0.0.2:5191/shutdown".into())
        );
    }

    #[test]
    fn a_second_place_moves_the_quit_endpoint_apart() {
        assert_eq!(
            urls("cloudsql=127.0.0.1:9190/127.0.0.1:9192"),
            (
                Some("http://127.0.0.1:9190/startup".into()),
                Some("http://127.0.0.1:9192/quitquitquit".into())
            )
        );
        assert_eq!(
            urls("cloudsql=10.0.0.7:9190/[::1]"),
            (
                Some("http://10.0.0.7:9190/startup".into()),
                Some("http://[::1]:9191/quitquitquit".into())
            )
        );
        assert_eq!(
            urls("vault=127.0.0.1/127.0.0.1:8300"),
            (None, Some("http://127.0.0.1:8300/agent/v1/quit".into()))
        );
    }

    #[test]
    fn the_meshes_presets_are_the_facts_tables_endpoints() {
        for mesh in crate::meshes::MESHES {
            let preset = PRESETS.iter().find(|p| p.name == mesh.name).unwrap();
            assert_eq!((preset.ready, preset.quit), (mesh.ready, mesh.quit), "{}", mesh.name);
            assert!(preset.mesh.is_some_and(|m| std::ptr::eq(m, mesh)));
            // A 404's hint names the switch the table says turns the quit on.
            if let (Some(hint), Some(switch)) = (preset.not_found_hint, &mesh.quit_switch) {
                assert!(hint.contains(switch.key.name) && hint.contains(switch.on), "{hint}");
            }
        }
        assert_eq!(AUTO, ["istio", "linkerd", "vault", "dapr", "consul", "kuma"]);
    }

    #[test]
    fn rejects_unknown_presets_and_bad_places() {
        for value in [
            "consulx",
            "istio=",
            "istio=h:99999",
            "istio=h:x",
            "istio=1.2.3.4:1",
            "",
            "cloudsql=h:1/",
            "cloudsql=h:1/h:x",
            "none=h/h",
        ] {
            assert!(parse(value).is_err(), "{value:?}");
        }
    }
}
