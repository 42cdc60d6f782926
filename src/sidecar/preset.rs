//! Sidecar presets: the ready and quit endpoints of the proxies people run
//! next to batch jobs, so `--sidecar linkerd` is all a manifest needs.
//!
//! A preset names its endpoints by port and path on 127.0.0.1. `NAME=HOST`
//! moves them to another host, `NAME=HOST:PORT` also moves the preset's first
//! port to PORT, and its other port keeps its distance (Istio's 15021/15020
//! become PORT/PORT-1). Two quirks travel with a preset to the quit phase:
//! Linkerd answers 404 while its shutdown endpoint is disabled, which the
//! error explains, and the Cloud SQL Auth Proxy may exit before answering, so
//! a connection closed after the request was sent counts as a quit.

use super::http::Endpoint;

pub struct Preset {
    pub name: &'static str,
    ready: Option<(u16, &'static str)>,
    quit: Option<(u16, &'static str)>,
    /// What a 404 from the quit endpoint means for this sidecar.
    pub not_found_hint: Option<&'static str>,
    /// The sidecar may exit before its answer to a quit reaches us.
    pub exits_before_answering: bool,
}

pub const PRESETS: [Preset; 7] = [
    Preset {
        name: "istio",
        ready: Some((15021, "/healthz/ready")),
        quit: Some((15020, "/quitquitquit")),
        not_found_hint: None,
        exits_before_answering: false,
    },
    Preset {
        name: "envoy",
        ready: Some((15000, "/ready")),
        quit: Some((15000, "/quitquitquit")),
        not_found_hint: None,
        exits_before_answering: false,
    },
    Preset {
        name: "linkerd",
        ready: Some((4191, "/ready")),
        quit: Some((4191, "/shutdown")),
        not_found_hint: Some(
            "Linkerd's shutdown endpoint is not enabled; enable it with the pod annotation \
             config.linkerd.io/proxy-admin-shutdown: enabled (or the proxy's \
             LINKERD2_PROXY_SHUTDOWN_ENDPOINT_ENABLED=true)",
        ),
        exits_before_answering: false,
    },
    Preset {
        name: "cloudsql",
        ready: Some((9090, "/startup")),
        quit: Some((9091, "/quitquitquit")),
        not_found_hint: Some("the Cloud SQL Auth Proxy serves quitquitquit only when started with --quitquitquit"),
        exits_before_answering: true,
    },
    Preset {
        name: "vault",
        ready: None,
        quit: Some((8200, "/agent/v1/quit")),
        not_found_hint: Some(
            "Vault agent serves /agent/v1/quit only when enabled: give the pod the annotation \
             vault.hashicorp.com/agent-enable-quit: \"true\"",
        ),
        exits_before_answering: false,
    },
    Preset {
        name: "dapr",
        ready: Some((3500, "/v1.0/healthz/outbound")),
        quit: Some((3500, "/v1.0/shutdown")),
        not_found_hint: None,
        exits_before_answering: false,
    },
    Preset {
        name: "none",
        ready: None,
        quit: None,
        not_found_hint: None,
        exits_before_answering: false,
    },
];

/// The presets `--sidecar auto` considers: those whose injector marks the
/// pods it injects (see `pod::MARKERS`).
pub const AUTO: [&str; 4] = ["istio", "linkerd", "vault", "dapr"];

/// What a preset value may look like, for error messages.
pub fn accepts() -> String {
    let names: Vec<&str> = std::iter::once("auto").chain(PRESETS.iter().map(|p| p.name)).collect();
    format!("one of {}, optionally NAME=HOST or NAME=HOST:PORT", names.join(", "))
}

/// One preset as configured: its endpoints, after any host and port override.
pub struct Sidecar {
    pub preset: &'static Preset,
    pub ready: Option<Endpoint>,
    pub quit: Option<Endpoint>,
}

/// Parses `NAME`, `NAME=HOST` or `NAME=HOST:PORT`; the error says what is wrong.
pub fn parse(value: &str) -> Result<Sidecar, String> {
    let (name, place) = value
        .split_once('=')
        .map_or((value, None), |(name, place)| (name, Some(place)));
    let preset = PRESETS
        .iter()
        .find(|p| p.name.eq_ignore_ascii_case(name.trim()))
        .ok_or_else(|| format!("'{name}' is not a preset"))?;
    let base = preset.ready.or(preset.quit).map_or(0, |(port, _)| port);
    let (host, new_base) = match place {
        None => ("127.0.0.1".to_string(), base),
        Some(place) => {
            // Checked as a URL's authority, so IPv6 brackets and ports read as in URLs.
            let probe = Endpoint::parse(&format!("http://{place}/"))?;
            (probe.host_text(), probe.explicit_port().unwrap_or(base))
        }
    };
    let endpoint = |(port, path): (u16, &str)| {
        let moved = i32::from(new_base) + i32::from(port) - i32::from(base);
        let moved = u16::try_from(moved)
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| format!("{}'s port {port} would move to {moved}, out of range", preset.name))?;
        Endpoint::parse(&format!("http://{host}:{moved}{path}"))
    };
    Ok(Sidecar {
        preset,
        ready: preset.ready.map(endpoint).transpose()?,
        quit: preset.quit.map(endpoint).transpose()?,
    })
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
    fn rejects_unknown_presets_and_bad_places() {
        for value in ["consul", "istio=", "istio=h:99999", "istio=h:x", "istio=1.2.3.4:1", ""] {
            assert!(parse(value).is_err(), "{value:?}");
        }
    }
}
