//! The mesh facts: what each injector writes on a pod, which values it reads
//! as true, which of its switches wins, where its proxy answers and what
//! moves it. One table, read by both binaries: meshwrap (`sidecar::pod`,
//! `sidecar::preset`) at run time, and kubectl-meshwrap (`mesh.rs`,
//! `transform.rs`) when it writes a pod. Nothing here does I/O or knows
//! either program; a fact either one needs is written here once.
//!
//! Every entry names the upstream repository, path and version that says
//! so (`Source`); each was read in the injector's own source, and each has
//! a unit test below named after it. Where injectors' versions disagree (an
//! opt-in value Istio 1.26 reads as yes and 1.27 as "the namespace
//! decides"; the native keys Linkerd reads in 2.15, 2.19 and 2.20), the
//! table holds one [`Rule`] per version range, and callers ask the
//! question that is safe whatever the version: "could this pod have the
//! proxy?" ([`on_in_some`]). Native is the one question where the version
//! must be known, not assumed: a switch counts only where the pod shows an
//! injector version that reads it ([`NativeProof`], [`Mesh::native_proven`]).
//! A wrong "native" leaves a proxy nobody quits (the pod never completes);
//! a wrong "classic" sends a quit the kubelet answers by restarting a
//! sidecar of a pod that is ending anyway: where meshwrap cannot know, it
//! takes the classic side.

/// Where upstream says so.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Source {
    pub repo: &'static str,
    pub path: &'static str,
    /// The tag (or commit) read.
    pub version: &'static str,
}

const fn src(repo: &'static str, path: &'static str, version: &'static str) -> Source {
    Source { repo, path, version }
}

/// Where a key lives on the pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    Label,
    Annotation,
}

/// A label or annotation key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Key {
    pub place: Place,
    pub name: &'static str,
}

const fn ann(name: &'static str) -> Key {
    Key {
        place: Place::Annotation,
        name,
    }
}

const fn label(name: &'static str) -> Key {
    Key {
        place: Place::Label,
        name,
    }
}

/// What an injector makes of a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Read {
    On,
    Off,
    /// Not decided by this value: upstream's default stands (the
    /// namespace's policy, a global flag), or the key is absent.
    Unset,
}

/// An upstream parser, by what it accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parser {
    /// Go's `strconv.ParseBool`: `1 t T TRUE true True` on, `0 f F FALSE
    /// false False` off; anything else is an error, which the injector
    /// ignores (its default stands).
    GoBool,
    /// HashiCorp's `parseutil.ParseBool` (go-secure-stdlib v0.2.0,
    /// mapstructure `WeakDecode`): `strconv.ParseBool`, and `""` is false;
    /// anything else is an error, and vault-k8s then injects nothing.
    HashicorpBool,
    /// dapr/kit `strings.IsTruthy`: trimmed, any case, `y yes true t on 1`
    /// on; anything else off.
    DaprTruthy,
    /// Dapr's injector from 1.17.3 and 1.18.0: `strings.EqualFold(v,
    /// "true")` before anything else is read; anything else off.
    EqualFoldTrue,
    /// Istio's `injectRequired` up to 1.26: lowercased `y yes true on` on,
    /// `""` unset, anything else off.
    IstioInjectLegacy,
    /// Istio's `injectRequired` from 1.27: `true` on, `false` off, anything
    /// else unset (a warning, and the namespace's policy decides).
    IstioInject,
    /// Istio's injection template 1.24 to 1.26: `true` native, any other
    /// value classic.
    IstioNativeLegacy,
    /// Istio's injection template from 1.27: `""` unset (sprig's `default`
    /// takes the global), `false` classic, any other value native.
    IstioNative,
    /// Linkerd's inject annotation: `enabled` and `ingress` on, `disabled`
    /// off, `""` unset; any other value is invalid, and nothing is injected.
    LinkerdInject,
    /// `enabled` on, `disabled` off, anything else unset (Linkerd warns and
    /// keeps its default).
    EnabledDisabled,
    /// Kuma's `GetEnabled`: `true yes enabled` on, `false no disabled`
    /// off, anything else an error (unset here).
    KumaEnabled,
    /// Exactly this value is on; any other is off.
    Exact(&'static str),
    /// The key's presence is the fact.
    Present,
}

impl Parser {
    pub fn read(self, value: &str) -> Read {
        let on = |yes: bool| if yes { Read::On } else { Read::Off };
        match self {
            Parser::GoBool => go_bool(value).map_or(Read::Unset, on),
            Parser::HashicorpBool => on(go_bool(value) == Some(true)),
            Parser::DaprTruthy => on(dapr_truthy(value)),
            Parser::EqualFoldTrue => on(value.eq_ignore_ascii_case("true")),
            Parser::IstioInjectLegacy if value.is_empty() => Read::Unset,
            Parser::IstioInjectLegacy => on(["y", "yes", "true", "on"].iter().any(|t| value.eq_ignore_ascii_case(t))),
            Parser::IstioInject | Parser::EnabledDisabled => {
                let (yes, no) = if self == Parser::IstioInject {
                    ("true", "false")
                } else {
                    ("enabled", "disabled")
                };
                match value {
                    v if v == yes => Read::On,
                    v if v == no => Read::Off,
                    _ => Read::Unset,
                }
            }
            Parser::IstioNativeLegacy => on(value == "true"),
            Parser::IstioNative if value.is_empty() => Read::Unset,
            Parser::IstioNative => on(value != "false"),
            Parser::LinkerdInject if value.is_empty() => Read::Unset,
            Parser::LinkerdInject => on(value == "enabled" || value == "ingress"),
            Parser::KumaEnabled => match value {
                "true" | "yes" | "enabled" => Read::On,
                "false" | "no" | "disabled" => Read::Off,
                _ => Read::Unset,
            },
            Parser::Exact(wanted) => on(value == wanted),
            Parser::Present => Read::On,
        }
    }
}

/// Go's `strconv.ParseBool`.
fn go_bool(value: &str) -> Option<bool> {
    match value {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// dapr/kit `strings.IsTruthy`.
fn dapr_truthy(value: &str) -> bool {
    let value = value.trim();
    ["y", "yes", "true", "t", "on", "1"]
        .iter()
        .any(|t| value.eq_ignore_ascii_case(t))
}

/// How one range of an injector's versions reads a switch: the keys in its
/// order of precedence (the first present wins; an unparsable value there
/// does not fall through to the next key), and its parser.
#[derive(Debug)]
pub struct Rule {
    pub versions: &'static str,
    pub keys: &'static [Key],
    pub parser: Parser,
    pub source: Source,
}

/// What the pod shows: a key's value, or none.
pub type Get<'a, 'v> = &'a dyn Fn(Key) -> Option<&'v str>;

impl Rule {
    /// This version range's reading of the pod.
    pub fn read(&self, get: Get) -> Read {
        self.keys
            .iter()
            .find_map(|&key| get(key))
            .map_or(Read::Unset, |v| self.parser.read(v))
    }
}

/// Some version reads the switch as on (so the pod may have what it asks for).
pub fn on_in_some(rules: &[Rule], get: Get) -> bool {
    rules.iter().any(|r| r.read(get) == Read::On)
}

/// Every version reads the switch as on (false when there are no rules).
pub fn on_in_every(rules: &[Rule], get: Get) -> bool {
    !rules.is_empty() && rules.iter().all(|r| r.read(get) == Read::On)
}

/// Every version reads the switch as off (false when there are no rules).
pub fn off_in_every(rules: &[Rule], get: Get) -> bool {
    !rules.is_empty() && rules.iter().all(|r| r.read(get) == Read::Off)
}

/// What on an injected pod shows the version of the injector that injected
/// it, and so which of its `native` rules applies. A per-pod native switch
/// counts only where the pod shows a version that reads it: a proxy wrongly
/// taken as native is quit by nobody, and the pod never completes, while a
/// native proxy taken as regular only gets a quit the kubelet answers by
/// restarting it in a pod that is ending anyway.
#[derive(Debug)]
pub enum NativeProof {
    /// The injector's status annotation lists what it injected (Istio's
    /// `sidecar.istio.io/status`, `initContainers`): `sidecar::pod` reads
    /// it. The per-pod switch alone proves nothing.
    Status,
    /// The injector writes its own version in this annotation, after one of
    /// `prefixes`; `since` says from which release each `native` rule applies.
    Version {
        key: Key,
        prefixes: &'static [&'static str],
        since: &'static [Since],
        source: Source,
    },
    /// Nothing on the pod shows the injector's version: the switch is never proof.
    Unshown { source: Source },
}

/// From this release of a channel (`edge-` 23.11.4), the injector reads the
/// `native` rule numbered `rule` (`None`: it reads no native switch, as in a
/// release line that never got a backport).
#[derive(Debug)]
pub struct Since {
    pub channel: &'static str,
    pub from: [u32; 3],
    pub rule: Option<usize>,
}

/// `24.2.4` as [24, 2, 4]; any other shape is none.
fn release(version: &str) -> Option<[u32; 3]> {
    let mut parts = version.split('.').map(|p| p.parse::<u32>().ok());
    let release = [parts.next()??, parts.next()??, parts.next()??];
    parts.next().is_none().then_some(release)
}

/// The injector's mark on every pod it injected.
#[derive(Debug)]
pub struct Mark {
    pub key: Key,
    pub parser: Parser,
    pub source: Source,
}

/// The switch that turns a proxy's quit endpoint on, where it ships off.
#[derive(Debug)]
pub struct QuitSwitch {
    pub key: Key,
    /// The value meshwrap's tools write.
    pub on: &'static str,
    pub parser: Parser,
    pub source: Source,
}

/// A pod annotation that moves a proxy's port.
#[derive(Debug)]
pub struct Mover {
    pub key: Key,
    /// It moves the readiness endpoint's port too, not only the quit's.
    pub moves_ready: bool,
    pub source: Source,
}

/// What Argo Workflows should run (`workflows.argoproj.io/kill-cmd-PROXY`)
/// to stop the proxy, which has no `/bin/sh` for Argo's default `kill`.
#[derive(Debug)]
pub struct ArgoKill {
    /// A JSON array, as the annotation takes it.
    pub command: &'static str,
    /// The command asks the proxy's quit endpoint, so its switch must be on.
    pub needs_quit_switch: bool,
    /// The proxy's image has no command that reaches its quit: `command`
    /// runs meshwrap, which kubectl-meshwrap mounts into the proxy's
    /// container (at its `/mesh`, with the pod's annotations at
    /// `/etc/podinfo`) through this pod annotation, a JSON list of
    /// VolumeMounts the injector appends to the proxy's own.
    pub mounts: Option<Key>,
    pub sources: &'static [Source],
}

/// A pod annotation that gives the quit its path, read only where its
/// switch (`under`) does not read off.
#[derive(Debug)]
pub struct PathMover {
    pub key: Key,
    pub under: Option<(Key, Parser)>,
    pub source: Source,
}

/// A quit endpoint in the pod that must never be used, and why.
#[derive(Debug)]
pub struct AdminQuit {
    pub port: u16,
    pub path: &'static str,
    pub why: &'static str,
    pub source: Source,
}

/// An annotation kubectl-meshwrap writes on a Job's pod where the user set
/// none, and only where the switch it belongs to (`under`) does not read
/// off: a setting of a feature the pod turned off is never written.
#[derive(Debug)]
pub struct JobSetting {
    pub key: Key,
    pub value: &'static str,
    pub under: Option<(Key, Parser)>,
    pub why: &'static str,
    pub source: Source,
}

impl JobSetting {
    /// The setting belongs here: its switch, if any, does not read off.
    pub fn applies(&self, get: Get) -> bool {
        self.under
            .is_none_or(|(key, parser)| get(key).is_none_or(|v| parser.read(v) != Read::Off))
    }
}

/// A pod annotation that lists the services of a multi-port pod: the
/// injector adds one proxy per item, the i-th (from 0) on each of the
/// mesh's ports plus i.
#[derive(Debug)]
pub struct Instances {
    pub key: Key,
    pub separator: char,
    pub source: Source,
}

/// Nothing in the pod may quit the proxy: who stops it instead.
#[derive(Debug)]
pub struct NoQuit {
    pub why: &'static str,
    pub sources: &'static [Source],
}

/// Everything known of one mesh.
#[derive(Debug)]
pub struct Mesh {
    /// The name `--mesh` and meshwrap's `--sidecar` use.
    pub name: &'static str,
    /// The proxy's container name as injected.
    pub proxy: &'static str,
    pub mark: Option<Mark>,
    /// The opt-in (and opt-out) switch, per version.
    pub opt_in: &'static [Rule],
    /// Marked, yet no sidecar in the pod, when this reads on.
    pub no_sidecar: &'static [Rule],
    /// The per-pod native switch, per version.
    pub native: &'static [Rule],
    /// What shows which of `native`'s rules the pod's injector read.
    pub native_proof: NativeProof,
    pub quit_switch: Option<QuitSwitch>,
    /// (port, path) on 127.0.0.1, GET until 2xx.
    pub ready: Option<(u16, &'static str)>,
    /// (port, path) on 127.0.0.1, POST once.
    pub quit: Option<(u16, &'static str)>,
    pub endpoints_source: Source,
    pub movers: &'static [Mover],
    pub argo_kill: Option<ArgoKill>,
    /// What on a namespace turns the mesh on for every pod in it: what a
    /// manifest cannot show offline, and the webhook can read.
    pub by_namespace: &'static [NamespaceRule],
    /// What gives the quit its path, where an annotation may.
    pub quit_path: Option<PathMover>,
    /// A quit that must never be sent (warned about where a user points at it).
    pub admin_quit: Option<AdminQuit>,
    /// What a Job's pod needs written (kubectl-meshwrap).
    pub job_settings: &'static [JobSetting],
    /// The proxy is never quit from the pod (`quit` is none), and why.
    pub no_quit: Option<NoQuit>,
    /// What makes the pod run one proxy per service.
    pub instances: Option<Instances>,
}

/// A namespace's label or annotation that turns a mesh's injection on for
/// its pods (a pod's own opt-out still wins: `opt_in`).
#[derive(Debug)]
pub struct NamespaceRule {
    pub key: Key,
    pub parser: Parser,
    pub source: Source,
}

pub const ISTIO: Mesh = Mesh {
    name: "istio",
    proxy: "istio-proxy",
    mark: Some(Mark {
        key: ann("sidecar.istio.io/status"),
        parser: Parser::Present,
        source: src(
            "istio/istio",
            "pkg/kube/inject/webhook.go (getInjectionStatus)",
            "1.30.3",
        ),
    }),
    opt_in: &[
        Rule {
            versions: "1.19-1.26",
            keys: &[label("sidecar.istio.io/inject"), ann("sidecar.istio.io/inject")],
            parser: Parser::IstioInjectLegacy,
            source: src("istio/istio", "pkg/kube/inject/inject.go (injectRequired)", "1.26.8"),
        },
        Rule {
            versions: "1.27+",
            keys: &[label("sidecar.istio.io/inject"), ann("sidecar.istio.io/inject")],
            parser: Parser::IstioInject,
            source: src(
                "istio/istio",
                "pkg/kube/inject/inject.go (injectRequired, #56737)",
                "1.27.0",
            ),
        },
    ],
    no_sidecar: &[Rule {
        versions: "1.24+ (ambient)",
        keys: &[ann("ambient.istio.io/redirection")],
        parser: Parser::Exact("enabled"),
        source: src(
            "istio/istio",
            "pkg/config/constants/constants.go (AmbientRedirectionEnabled)",
            "1.30.3",
        ),
    }],
    native: &[
        Rule {
            versions: "1.24-1.26",
            keys: &[ann("sidecar.istio.io/nativeSidecar")],
            parser: Parser::IstioNativeLegacy,
            source: src(
                "istio/istio",
                "manifests/charts/istio-control/istio-discovery/files/injection-template.yaml",
                "1.24.0",
            ),
        },
        Rule {
            versions: "1.27+",
            keys: &[ann("sidecar.istio.io/nativeSidecar")],
            parser: Parser::IstioNative,
            source: src(
                "istio/istio",
                "manifests/charts/istio-control/istio-discovery/files/injection-template.yaml",
                "1.27.0",
            ),
        },
    ],
    native_proof: NativeProof::Status,
    quit_switch: None,
    ready: Some((15021, "/healthz/ready")),
    quit: Some((15020, "/quitquitquit")),
    endpoints_source: src("istio/istio", "pilot/cmd/pilot-agent/status/server.go", "1.30.3"),
    movers: &[Mover {
        key: ann("status.sidecar.istio.io/port"),
        moves_ready: false,
        source: src(
            "istio/istio",
            "pilot/cmd/pilot-agent/config/config.go (applyAnnotations)",
            "1.30.3",
        ),
    }],
    argo_kill: Some(ArgoKill {
        command: r#"["pilot-agent","request","POST","quitquitquit"]"#,
        needs_quit_switch: false,
        mounts: None,
        sources: &[src("argoproj/argo-workflows", "docs/sidecar-injection.md", "v3.6.0")],
    }),
    // The injector's namespaceSelectors: `istio-injection: enabled`, or
    // `istio.io/rev` (any revision, the label `istio-injection` absent).
    by_namespace: &[
        NamespaceRule {
            key: label("istio-injection"),
            parser: Parser::Exact("enabled"),
            source: ISTIO_NAMESPACE_SELECTOR,
        },
        NamespaceRule {
            key: label("istio.io/rev"),
            parser: Parser::Present,
            source: ISTIO_NAMESPACE_SELECTOR,
        },
    ],
    quit_path: None,
    admin_quit: None,
    job_settings: &[],
    no_quit: None,
    instances: None,
};

const ISTIO_NAMESPACE_SELECTOR: Source = src(
    "istio/istio",
    "manifests/charts/istio-control/istio-discovery/templates/mutatingwebhook.yaml (namespaceSelector)",
    "1.30.3",
);

const LINKERD_STABLE: Key = ann("config.linkerd.io/proxy-enable-native-sidecar");
const LINKERD_BETA: Key = ann("config.beta.linkerd.io/proxy-enable-native-sidecar");
const LINKERD_ALPHA: Key = ann("config.alpha.linkerd.io/proxy-enable-native-sidecar");

pub const LINKERD: Mesh = Mesh {
    name: "linkerd",
    proxy: "linkerd-proxy",
    mark: Some(Mark {
        key: ann("linkerd.io/proxy-version"),
        parser: Parser::Present,
        source: src(
            "linkerd/linkerd2",
            "pkg/inject/inject.go (injectObjectMeta)",
            "version-2.20",
        ),
    }),
    opt_in: &[Rule {
        versions: "2.x",
        keys: &[ann("linkerd.io/inject")],
        parser: Parser::LinkerdInject,
        source: src(
            "linkerd/linkerd2",
            "pkg/inject/report.go (disabledByAnnotation)",
            "version-2.20",
        ),
    }],
    no_sidecar: &[],
    native: &[
        Rule {
            versions: "2.15-2.18",
            keys: &[LINKERD_ALPHA],
            parser: Parser::GoBool,
            source: src("linkerd/linkerd2", "pkg/inject/inject.go", "version-2.15"),
        },
        Rule {
            versions: "2.19",
            keys: &[LINKERD_BETA, LINKERD_ALPHA],
            parser: Parser::GoBool,
            source: src("linkerd/linkerd2", "pkg/inject/inject.go (#14587)", "version-2.19"),
        },
        Rule {
            versions: "2.20+",
            keys: &[LINKERD_STABLE, LINKERD_BETA, LINKERD_ALPHA],
            parser: Parser::GoBool,
            source: src(
                "linkerd/linkerd2",
                "pkg/inject/inject.go (GetOverriddenValues, #15267)",
                "version-2.20",
            ),
        },
    ],
    native_proof: NativeProof::Version {
        key: ann("linkerd.io/created-by"),
        // The webhook's own version (`linkerd inject --manual`: the CLI's).
        prefixes: &["linkerd/proxy-injector ", "linkerd/cli "],
        // Open-source Linkerd 2.15+ ships as edge releases only (the
        // version-2.x tags build no image); stable-2.14 reads no native key.
        since: &[
            Since {
                channel: "edge-",
                from: [23, 11, 4],
                rule: Some(0),
            },
            Since {
                channel: "edge-",
                from: [25, 10, 2],
                rule: Some(1),
            },
            Since {
                channel: "edge-",
                from: [26, 5, 2],
                rule: Some(2),
            },
        ],
        source: src(
            "linkerd/linkerd2",
            "controller/proxy-injector/webhook.go (CreatedByAnnotation: \"linkerd/proxy-injector \" + version.Version); \
             the native keys' commits 1b37e1989, d3788f6a6, 009a25fa3 first in edge-23.11.4, edge-25.10.2, edge-26.5.2",
            "version-2.20",
        ),
    },
    quit_switch: Some(QuitSwitch {
        key: ann("config.linkerd.io/proxy-admin-shutdown"),
        on: "enabled",
        parser: Parser::EnabledDisabled,
        source: src(
            "linkerd/linkerd2",
            "pkg/inject/inject.go; charts/linkerd-control-plane/values.yaml (enableShutdownEndpoint: false since 2.16, #12705)",
            "version-2.20",
        ),
    }),
    ready: Some((4191, "/ready")),
    quit: Some((4191, "/shutdown")),
    endpoints_source: src(
        "linkerd/linkerd2",
        "charts/linkerd-control-plane/values.yaml (proxy.ports.admin)",
        "version-2.20",
    ),
    movers: &[Mover {
        key: ann("config.linkerd.io/admin-port"),
        moves_ready: true,
        source: src(
            "linkerd/linkerd2",
            "pkg/inject/inject.go (ProxyAdminPortAnnotation)",
            "version-2.20",
        ),
    }],
    argo_kill: Some(ArgoKill {
        command: r#"["/usr/lib/linkerd/linkerd-await","sleep","1","--shutdown"]"#,
        needs_quit_switch: true,
        mounts: None,
        sources: &[
            src(
                "linkerd/linkerd-await",
                "src/main.rs (--shutdown: send_shutdown POSTs /shutdown)",
                "release/v0.3.3",
            ),
            src(
                "linkerd/linkerd2",
                "Dockerfile.proxy (/usr/lib/linkerd/linkerd-await, /bin/sleep; Dockerfile-proxy before 2.20)",
                "version-2.20",
            ),
        ],
    }),
    // The webhook injects a pod whose namespace has `linkerd.io/inject:
    // enabled` (or `ingress`) unless the pod says `disabled`.
    by_namespace: &[NamespaceRule {
        key: ann("linkerd.io/inject"),
        parser: Parser::LinkerdInject,
        source: src(
            "linkerd/linkerd2",
            "pkg/inject/report.go (disabledByAnnotation, nsAnnotations)",
            "version-2.20",
        ),
    }],
    quit_path: None,
    admin_quit: None,
    job_settings: &[],
    no_quit: None,
    instances: None,
};

pub const VAULT: Mesh = Mesh {
    name: "vault",
    proxy: "vault-agent",
    mark: Some(Mark {
        key: ann("vault.hashicorp.com/agent-inject-status"),
        parser: Parser::Exact("injected"),
        source: src("hashicorp/vault-k8s", "agent-inject/agent/agent.go (Patch)", "v1.7.6"),
    }),
    opt_in: &[Rule {
        versions: "1.x",
        keys: &[ann("vault.hashicorp.com/agent-inject")],
        parser: Parser::HashicorpBool,
        source: src(
            "hashicorp/vault-k8s",
            "agent-inject/agent/agent.go (ShouldInject)",
            "v1.7.6",
        ),
    }],
    no_sidecar: &[Rule {
        versions: "1.x",
        keys: &[ann("vault.hashicorp.com/agent-pre-populate-only")],
        parser: Parser::HashicorpBool,
        source: src(
            "hashicorp/vault-k8s",
            "agent-inject/agent/agent.go (if !a.PrePopulateOnly)",
            "v1.7.6",
        ),
    }],
    native: &[],
    native_proof: NativeProof::Unshown {
        source: src(
            "hashicorp/vault-k8s",
            "agent-inject/agent/agent.go (the agent always in /spec/containers)",
            "v1.7.6",
        ),
    },
    quit_switch: Some(QuitSwitch {
        key: ann("vault.hashicorp.com/agent-enable-quit"),
        on: "true",
        parser: Parser::HashicorpBool,
        source: src(
            "hashicorp/vault-k8s",
            "agent-inject/agent/annotations.go (getEnableQuit); config.go",
            "v1.7.6",
        ),
    }),
    ready: None,
    quit: Some((8200, "/agent/v1/quit")),
    endpoints_source: src(
        "hashicorp/vault",
        "sdk/helper/consts/agent.go (AgentPathQuit)",
        "43ffa9be",
    ),
    movers: &[Mover {
        key: ann("vault.hashicorp.com/agent-cache-listener-port"),
        moves_ready: false,
        source: src(
            "hashicorp/vault-k8s",
            "agent-inject/agent/config.go (makeCacheListener)",
            "v1.7.6",
        ),
    }],
    argo_kill: None,
    // Only the pod's own `agent-inject` turns the agent on, whatever its
    // namespace (agent-inject/agent/agent.go ShouldInject, v1.7.6).
    by_namespace: &[],
    quit_path: None,
    admin_quit: None,
    job_settings: &[],
    no_quit: None,
    instances: None,
};

pub const DAPR: Mesh = Mesh {
    name: "dapr",
    proxy: "daprd",
    mark: Some(Mark {
        key: label("dapr.io/sidecar-injected"),
        parser: Parser::Exact("true"),
        source: src(
            "dapr/dapr",
            "pkg/injector/patcher/sidecar_patcher.go (GetPatch)",
            "v1.18.3",
        ),
    }),
    opt_in: &[
        Rule {
            versions: "up to 1.17.2",
            keys: &[ann("dapr.io/enabled")],
            parser: Parser::DaprTruthy,
            source: src(
                "dapr/dapr",
                "pkg/injector/patcher/sidecar.go (setValueFromString)",
                "v1.17.2",
            ),
        },
        Rule {
            versions: "1.17.3+, 1.18.0+",
            keys: &[ann("dapr.io/enabled")],
            parser: Parser::EqualFoldTrue,
            source: src(
                "dapr/dapr",
                "pkg/injector/service/handler.go (podHasDaprEnabled, #9669)",
                "v1.17.3",
            ),
        },
    ],
    no_sidecar: &[],
    native: &[Rule {
        versions: "1.18+",
        keys: &[ann("dapr.io/enable-native-sidecar")],
        parser: Parser::DaprTruthy,
        source: src(
            "dapr/dapr",
            "pkg/injector/patcher/sidecar.go (EnableNativeSidecar, #9450)",
            "v1.18.0",
        ),
    }],
    native_proof: NativeProof::Unshown {
        source: src(
            "dapr/dapr",
            "pkg/injector/patcher/sidecar_patcher.go (labels only: dapr.io/sidecar-injected, app-id, metrics-enabled)",
            "v1.18.3",
        ),
    },
    quit_switch: None,
    ready: Some((3500, "/v1.0/healthz/outbound")),
    quit: Some((3500, "/v1.0/shutdown")),
    endpoints_source: src(
        "dapr/dapr",
        "pkg/api/http/healthz.go, shutdown.go; patcher/sidecar.go (SidecarHTTPPort)",
        "v1.18.3",
    ),
    movers: &[],
    argo_kill: None,
    // Only the pod's own `dapr.io/enabled` turns daprd on
    // (pkg/injector/patcher/sidecar.go Enabled, v1.18.3).
    by_namespace: &[],
    quit_path: None,
    admin_quit: None,
    job_settings: &[],
    no_quit: None,
    instances: None,
};

const CONSUL_K8S: &str = "hashicorp/consul-k8s";
const CONSUL_LIFECYCLE: Key = ann("consul.hashicorp.com/enable-sidecar-proxy-lifecycle");

pub const CONSUL: Mesh = Mesh {
    name: "consul",
    proxy: "consul-dataplane",
    mark: Some(Mark {
        key: ann("consul.hashicorp.com/connect-inject-status"),
        parser: Parser::Exact("injected"),
        source: src(
            CONSUL_K8S,
            "control-plane/connect-inject/webhook/mesh_webhook.go (KeyInjectStatus = Injected)",
            "v2.0.3",
        ),
    }),
    opt_in: &[Rule {
        versions: "1.x, 2.x",
        keys: &[ann("consul.hashicorp.com/connect-inject")],
        parser: Parser::GoBool,
        source: src(
            CONSUL_K8S,
            "control-plane/connect-inject/webhook/mesh_webhook.go (shouldInject: strconv.ParseBool)",
            "v2.0.3",
        ),
    }],
    no_sidecar: &[],
    native: &[Rule {
        versions: "1.6.9+, 1.7.5+, 1.8.2+, 1.9.0+",
        keys: &[ann("consul.hashicorp.com/enable-consul-dataplane-as-sidecar")],
        parser: Parser::GoBool,
        source: src(
            CONSUL_K8S,
            "control-plane/connect-inject/lifecycle/lifecycle_configuration.go (EnableConsulDataplaneAsSidecar: \
             ParseBool, \"\" the default); webhook/mesh_webhook.go (into InitContainers)",
            "v2.0.3",
        ),
    }],
    native_proof: NativeProof::Version {
        key: ann("consul.hashicorp.com/consul-k8s-version"),
        // version.GetHumanVersion: "v" + the release (+fips1402 on FIPS builds).
        prefixes: &["v"],
        // The switch came in 1.9.0 and the backports 1.6.9, 1.7.5, 1.8.2:
        // 1.7.0-1.7.4 and 1.8.0-1.8.1 read none.
        since: &[
            Since {
                channel: "",
                from: [1, 6, 9],
                rule: Some(0),
            },
            Since {
                channel: "",
                from: [1, 7, 0],
                rule: None,
            },
            Since {
                channel: "",
                from: [1, 7, 5],
                rule: Some(0),
            },
            Since {
                channel: "",
                from: [1, 8, 0],
                rule: None,
            },
            Since {
                channel: "",
                from: [1, 8, 2],
                rule: Some(0),
            },
        ],
        source: src(
            CONSUL_K8S,
            "control-plane/connect-inject/webhook/mesh_webhook.go (defaultAnnotations: AnnotationConsulK8sVersion = \
             version.GetHumanVersion()); version/version.go; AnnotationEnableConsulDataplaneAsSidecar first in \
             v1.6.9, v1.7.5, v1.8.2, v1.9.0 (absent in v1.6.8, v1.7.4, v1.8.1)",
            "v2.0.3",
        ),
    },
    quit_switch: None,
    // consul-dataplane's Envoy admin (-envoy-admin-bind-port, 19000 unless
    // multi-port) and its lifecycle server at consul-k8s's -graceful-port.
    ready: Some((19000, "/ready")),
    quit: Some((20600, "/graceful_shutdown")),
    endpoints_source: src(
        CONSUL_K8S,
        "control-plane/connect-inject/webhook/consul_dataplane_sidecar.go (-graceful-port always passed); \
         constants/constants.go (DefaultGracefulPort 20600, DefaultGracefulShutdownPath)",
        "v2.0.3",
    ),
    movers: &[Mover {
        key: ann("consul.hashicorp.com/sidecar-proxy-lifecycle-graceful-port"),
        moves_ready: false,
        source: src(
            CONSUL_K8S,
            "control-plane/connect-inject/lifecycle/lifecycle_configuration.go (GracefulPort)",
            "v2.0.3",
        ),
    }],
    // consul-dataplane's image is distroless: no shell for Argo's default
    // `kill`, and no client that reaches its lifecycle server. meshwrap is
    // mounted into it with the pod's annotations and runs a command that
    // ends at once, then quits the sidecars as after any command: `auto`,
    // so that the graceful port and path the annotations move, and each
    // dataplane of a multi-port pod, are followed as in the step's own run.
    argo_kill: Some(ArgoKill {
        command: r#"["/mesh/meshwrap","--no-wait","--sidecar","auto","--","/mesh/meshwrap","--version"]"#,
        needs_quit_switch: false,
        mounts: Some(ann("consul.hashicorp.com/consul-sidecar-user-volume-mount")),
        sources: &[
            src(
                "argoproj/argo-workflows",
                "workflow/signal/signal.go (killCommand: the kill-cmd annotation, a JSON array, exec'd in the container; default /bin/sh -c kill)",
                "v4.1.2",
            ),
            src(
                CONSUL_K8S,
                "control-plane/connect-inject/webhook/consul_dataplane_sidecar.go (AnnotationConsulSidecarUserVolumeMount: \
                 a JSON []VolumeMount appended to the consul-dataplane container's)",
                "v2.0.3",
            ),
        ],
    }),
    quit_path: Some(PathMover {
        key: ann("consul.hashicorp.com/sidecar-proxy-lifecycle-graceful-shutdown-path"),
        // -graceful-shutdown-path is passed only with the lifecycle on;
        // off, consul-dataplane serves its own /graceful_shutdown.
        under: Some((CONSUL_LIFECYCLE, Parser::GoBool)),
        source: src(
            CONSUL_K8S,
            "control-plane/connect-inject/webhook/consul_dataplane_sidecar.go (if enableProxyLifecycle)",
            "v2.0.3",
        ),
    }),
    admin_quit: Some(AdminQuit {
        port: 19000,
        path: "/quitquitquit",
        why: "consul-dataplane outlives an Envoy quit through its admin and its liveness probe restarts it, so the \
              pod never completes (consul-k8s #1791): quit through the lifecycle server, \
              http://127.0.0.1:20600/graceful_shutdown (--sidecar consul)",
        source: src(
            "hashicorp/consul-dataplane",
            "pkg/consuldp/lifecycle.go (gracefulShutdown)",
            "v2.0.1",
        ),
    }),
    job_settings: &[JobSetting {
        key: ann("consul.hashicorp.com/sidecar-proxy-lifecycle-shutdown-grace-period-seconds"),
        value: "0",
        under: Some((CONSUL_LIFECYCLE, Parser::GoBool)),
        why: "consul-dataplane's graceful shutdown drains the listeners (when on), then waits out the grace period \
              (the chart's 30 s) before Envoy's quit; 0 quits as soon as the drain is asked for, and a Job whose \
              command ended has no connection left to drain",
        source: src(
            "hashicorp/consul-dataplane",
            "pkg/consuldp/lifecycle.go (gracefulShutdown: context.WithTimeout(grace), Drain, <-ctx.Done(), Quit); \
             consul-k8s v2.0.3 lifecycle_configuration.go (ShutdownGracePeriodSeconds: ParseUint), \
             charts/consul/values.yaml (defaultShutdownGracePeriodSeconds: 30)",
            "v2.0.1",
        ),
    }],
    no_quit: None,
    instances: Some(Instances {
        key: ann("consul.hashicorp.com/connect-service"),
        separator: ',',
        source: src(
            CONSUL_K8S,
            "control-plane/connect-inject/webhook/mesh_webhook.go (annotatedServiceNames, multiPortInfo.serviceIndex); \
             consul_dataplane_sidecar.go (-envoy-admin-bind-port=19000+serviceIndex, gracefulPort+serviceIndex)",
            "v2.0.3",
        ),
    }),
    // consul-k8s injects by its own cluster-wide default and namespace
    // selector (connectInject.default, false by default, and
    // connectInject.namespaceSelector: charts/consul/values.yaml v2.0.3), not
    // a mark on the namespace; a Consul Job without its grace setting still
    // completes, 30 s late.
    by_namespace: &[],
};

pub const KUMA: Mesh = Mesh {
    name: "kuma",
    proxy: "kuma-sidecar",
    mark: Some(Mark {
        key: ann("kuma.io/sidecar-injected"),
        parser: Parser::Exact("true"),
        source: src(
            "kumahq/kuma",
            "pkg/plugins/runtime/k8s/webhooks/injector/injector.go (NewAnnotations: KumaSidecarInjectedAnnotation = AnnotationTrue)",
            "v2.14.3",
        ),
    }),
    opt_in: &[Rule {
        versions: "2.x",
        keys: &[label("kuma.io/sidecar-injection")],
        parser: Parser::KumaEnabled,
        source: src(
            "kumahq/kuma",
            "pkg/plugins/runtime/k8s/webhooks/injector/precheck.go (pod labels, GetEnabled); metadata/annotations.go",
            "v2.14.3",
        ),
    }],
    no_sidecar: &[],
    // No per-pod switch: the control plane's
    // runtime.kubernetes.injector.sidecarContainers decides for every pod.
    native: &[],
    native_proof: NativeProof::Unshown {
        source: src(
            "kumahq/kuma",
            "pkg/config/app/kuma-cp/kuma-cp.defaults.yaml (sidecarContainers: false from 2.7.0, true from 2.14.0); \
             injector.go NewAnnotations (no version on the pod)",
            "v2.14.3",
        ),
    },
    quit_switch: None,
    ready: Some((9902, "/ready")),
    quit: None,
    endpoints_source: src(
        "kumahq/kuma",
        "app/kuma-dp/pkg/dataplane/readiness/component.go (/ready: 200 READY, 503 NOT_READY or TERMINATING); \
         pkg/config/app/kuma-dp/config.go (ReadinessPort 9902, KUMA_READINESS_PORT); app/kuma-dp/cmd/run.go \
         (0.0.0.0 in Kubernetes)",
        "v2.14.3",
    ),
    movers: &[],
    argo_kill: None,
    quit_path: None,
    admin_quit: None,
    job_settings: &[],
    no_quit: Some(NoQuit {
        why: "nothing in the pod can quit kuma-dp: from 2.14 Envoy's admin is on a Unix socket and its TCP port \
              needs the control plane's certificate; the control plane quits a Job's regular sidecar once every \
              other container has ended, and the kubelet stops a native one",
        sources: &[
            src(
                "kumahq/kuma",
                "pkg/plugins/runtime/k8s/controllers/pod_status_controller.go (onlySidecarContainerRunning, PostQuit)",
                "v2.14.3",
            ),
            src(
                "kumahq/kuma",
                "app/kuma-dp/pkg/dataplane/readiness/component.go (adminSocketPath)",
                "v2.14.3",
            ),
            src(
                "kumahq/kuma",
                "app/kuma-dp/cmd/run.go (the bootstrap's admin address as a pipe: adminSocketPath; none in v2.13.0)",
                "v2.14.0",
            ),
        ],
    }),
    instances: None,
    // A namespace label (`kuma.io/sidecar-injection: enabled`) turns Kuma
    // on too, but a Kuma Job needs nothing written, so an unseen namespace
    // adds nothing for it.
    by_namespace: &[],
};

pub const CLOUDSQL: Mesh = Mesh {
    name: "cloudsql",
    proxy: "cloud-sql-proxy",
    mark: None,
    opt_in: &[],
    no_sidecar: &[],
    native: &[],
    native_proof: NativeProof::Unshown {
        source: src("GoogleCloudPlatform/cloud-sql-proxy", "cmd/root.go", "v2.25.3"),
    },
    quit_switch: None,
    ready: Some((9090, "/startup")),
    quit: Some((9091, "/quitquitquit")),
    endpoints_source: src("GoogleCloudPlatform/cloud-sql-proxy", "cmd/root.go", "v2.25.3"),
    movers: &[],
    argo_kill: None,
    // Not injected: a container the spec declares.
    by_namespace: &[],
    quit_path: None,
    admin_quit: None,
    job_settings: &[],
    no_quit: None,
    instances: None,
};

/// Every mesh, in the order `--mesh`, `--sidecar auto` and reports use.
pub const MESHES: [&Mesh; 7] = [&ISTIO, &LINKERD, &VAULT, &DAPR, &CONSUL, &KUMA, &CLOUDSQL];

/// The meshes whose injector marks the pods it injects: `--sidecar auto`'s.
pub const MARKED: [&Mesh; 6] = [&ISTIO, &LINKERD, &VAULT, &DAPR, &CONSUL, &KUMA];

/// The mesh named `name` (any case).
pub fn by_name(name: &str) -> Option<&'static Mesh> {
    MESHES.into_iter().find(|m| m.name.eq_ignore_ascii_case(name))
}

impl Mesh {
    /// The injector's mark is on the pod.
    pub fn marked(&self, get: Get) -> bool {
        self.mark
            .as_ref()
            .is_some_and(|m| get(m.key).is_some_and(|v| m.parser.read(v) == Read::On))
    }

    /// A namespace with these labels and annotations (`get`) injects the
    /// mesh into its pods.
    pub fn on_by_namespace(&self, get: Get) -> bool {
        self.by_namespace
            .iter()
            .any(|r| get(r.key).is_some_and(|v| r.parser.read(v) == Read::On))
    }

    /// Whether the pod asks for the mesh (`Some(true)`: some version
    /// injects it, or it is marked), opts out of it (`Some(false)`: no
    /// version injects it, or no sidecar comes with it), or leaves it to
    /// the namespace (`None`).
    pub fn asks_for(&self, get: Get) -> Option<bool> {
        if on_in_some(self.no_sidecar, get) {
            Some(false)
        } else if self.marked(get) || on_in_some(self.opt_in, get) {
            Some(true)
        } else if off_in_every(self.opt_in, get) {
            Some(false)
        } else {
            None
        }
    }

    /// Every version that has the per-pod switch reads it as native (the
    /// switch's own reading; whether the pod's injector is such a version
    /// is [`Mesh::native_proven`]'s question).
    pub fn native_everywhere(&self, get: Get) -> bool {
        on_in_every(self.native, get)
    }

    /// The `native` rule the pod's injector read, where the pod shows its
    /// version ([`NativeProof::Version`]); none where it shows none.
    pub fn native_rule(&self, get: Get) -> Option<&Rule> {
        let NativeProof::Version {
            key, prefixes, since, ..
        } = &self.native_proof
        else {
            return None;
        };
        let value = get(*key)?;
        let version = prefixes.iter().find_map(|p| value.strip_prefix(p))?.trim();
        // Build metadata (`+fips1402`) names the same release (SemVer 2.0.0 §10).
        let version = version.split_once('+').map_or(version, |(v, _)| v);
        let rule = since
            .iter()
            .rfind(|s| {
                version
                    .strip_prefix(s.channel)
                    .and_then(release)
                    .is_some_and(|v| v >= s.from)
            })?
            .rule?;
        self.native.get(rule)
    }

    /// The per-pod switch makes the proxy native, as the injector version
    /// the pod shows reads it. Istio's status decides for Istio (`sidecar::pod`).
    pub fn native_proven(&self, get: Get) -> bool {
        self.native_rule(get).is_some_and(|r| r.read(get) == Read::On)
    }

    /// Why a native switch the pod sets is not taken as native: some
    /// version reads it as native, but the pod shows no injector version
    /// that does. None where no version would, or where it is proven.
    pub fn native_unproven(&self, get: Get) -> Option<String> {
        if !on_in_some(self.native, get) || self.native_proven(get) {
            return None;
        }
        let mut keys: Vec<&str> = Vec::new();
        for key in self.native.iter().flat_map(|r| r.keys).filter(|k| get(**k).is_some()) {
            if !keys.contains(&key.name) {
                keys.push(key.name);
            }
        }
        let why = match &self.native_proof {
            NativeProof::Version { key, .. } => match get(*key) {
                Some(value) => format!("the injector's {} \"{value}\" is not a version that reads it", key.name),
                None => format!("the pod has no {} to show an injector version that reads it", key.name),
            },
            NativeProof::Unshown { .. } => {
                "the injector writes no version on the pod, and its older versions do not read it".into()
            }
            NativeProof::Status => "only the injector's status shows a native proxy".into(),
        };
        Some(format!("{} is set, but {why}", keys.join(", ")))
    }

    /// A native key the pod sets to a value some version does not read as
    /// native: (key, value).
    pub fn native_set_otherwise<'v>(&self, get: Get<'_, 'v>) -> Option<(&'static str, &'v str)> {
        self.native.iter().find_map(|rule| {
            rule.keys.iter().find_map(|&key| {
                get(key)
                    .filter(|v| rule.parser.read(v) != Read::On)
                    .map(|v| (key.name, v))
            })
        })
    }

    /// The keys that make the proxy native under every version, whatever a
    /// namespace adds: the first key each version reads, newest first.
    pub fn native_keys(&self) -> Vec<&'static str> {
        let mut keys: Vec<&'static str> = Vec::new();
        for rule in self.native.iter().rev() {
            if let Some(first) = rule.keys.first()
                && !keys.contains(&first.name)
            {
                keys.push(first.name);
            }
        }
        keys
    }

    /// The quit switch is on in the pod.
    pub fn quit_switch_on(&self, get: Get) -> bool {
        self.quit_switch
            .as_ref()
            .is_none_or(|s| get(s.key).is_some_and(|v| s.parser.read(v) == Read::On))
    }

    /// The quit's path, where the pod's annotations give it one that its
    /// injector passes on.
    pub fn moved_quit_path<'v>(&self, get: Get<'_, 'v>) -> Option<&'v str> {
        let mover = self.quit_path.as_ref()?;
        let off = mover
            .under
            .is_some_and(|(key, parser)| get(key).is_some_and(|v| parser.read(v) == Read::Off));
        get(mover.key).filter(|p| !off && p.starts_with('/'))
    }

    /// How many proxies the pod runs (1 unless it lists several services).
    pub fn instances(&self, get: Get) -> u16 {
        let Some(instances) = &self.instances else { return 1 };
        get(instances.key).map_or(1, |v| v.split(instances.separator).count().clamp(1, 64) as u16)
    }

    /// The ports the pod's annotations move: (readiness, quit).
    pub fn moved_ports(&self, get: Get) -> (Option<u16>, Option<u16>) {
        let mut moved = (None, None);
        for mover in self.movers {
            let Some(port) = get(mover.key).and_then(|v| v.parse::<u16>().ok()).filter(|p| *p > 0) else {
                continue;
            };
            if mover.moves_ready && self.ready.is_some() {
                moved.0 = Some(port);
            }
            moved.1 = Some(port);
        }
        moved
    }
}

/// The Cloud SQL Auth Proxy v2's settings meshwrap needs: each a flag and a
/// `CSQL_PROXY_` variable (viper, `AutomaticEnv`), the flag winning where
/// both are given (root.go `loadConfig` sets from the environment only flags
/// not `Changed`). `--config-file` can set them too.
#[derive(Debug)]
pub struct ProxySetting {
    pub flag: &'static str,
    pub env: &'static str,
    pub default: &'static str,
}

const CLOUDSQL_ROOT: Source = src(
    "GoogleCloudPlatform/cloud-sql-proxy",
    "cmd/root.go (NewCommand, loadConfig)",
    "v2.25.3",
);

/// Readiness at `--http-address`:`--http-port` `/startup`, with `--health-check`.
pub const CLOUDSQL_HTTP_PORT: ProxySetting = ProxySetting {
    flag: "--http-port",
    env: "CSQL_PROXY_HTTP_PORT",
    default: "9090",
};
pub const CLOUDSQL_HTTP_ADDRESS: ProxySetting = ProxySetting {
    flag: "--http-address",
    env: "CSQL_PROXY_HTTP_ADDRESS",
    default: "localhost",
};
/// The quit at localhost:`--admin-port` `/quitquitquit` (GET or POST), with `--quitquitquit`.
pub const CLOUDSQL_ADMIN_PORT: ProxySetting = ProxySetting {
    flag: "--admin-port",
    env: "CSQL_PROXY_ADMIN_PORT",
    default: "9091",
};
/// Serves `/startup` (v2.0.0+).
pub const CLOUDSQL_HEALTH_CHECK: ProxySetting = ProxySetting {
    flag: "--health-check",
    env: "CSQL_PROXY_HEALTH_CHECK",
    default: "false",
};
/// Serves `/quitquitquit` (v2.1.0+).
pub const CLOUDSQL_QUITQUITQUIT: ProxySetting = ProxySetting {
    flag: "--quitquitquit",
    env: "CSQL_PROXY_QUITQUITQUIT",
    default: "false",
};
/// A file that may set any of them (toml, yaml or json).
pub const CLOUDSQL_CONFIG_FILE: ProxySetting = ProxySetting {
    flag: "--config-file",
    env: "CSQL_PROXY_CONFIG_FILE",
    default: "",
};
/// Where the settings above are read.
pub const CLOUDSQL_SETTINGS_SOURCE: Source = CLOUDSQL_ROOT;

/// The v1 proxy (`gcr.io/cloudsql-docker/gce-proxy`, binary
/// `/cloud_sql_proxy`): Go `flag` options such as `-use_http_health_check`,
/// none of v2's, and no quit endpoint at all (SIGTERM only).
pub const CLOUDSQL_V1_IMAGE: &str = "cloudsql-docker/gce-proxy";
pub const CLOUDSQL_V1_BINARY: &str = "cloud_sql_proxy";
pub const CLOUDSQL_V1_SOURCE: Source = src(
    "GoogleCloudPlatform/cloud-sql-proxy",
    "cmd/cloud_sql_proxy/cloud_sql_proxy.go; examples/k8s-health-check/proxy_with_http_health_check.yaml",
    "v1.38.3",
);

/// The value of a pflag option in a command line: `--name=value` or
/// `--name value`, the last one winning; a boolean option (`boolean`)
/// takes `--name` alone as true and never the next word.
pub fn pflag_value<'a>(args: &[&'a str], name: &str, boolean: bool) -> Option<&'a str> {
    let mut found = None;
    let mut words = args.iter();
    while let Some(word) = words.next() {
        if *word == "--" {
            break;
        }
        if let Some(value) = word.strip_prefix(name).and_then(|rest| rest.strip_prefix('=')) {
            found = Some(value);
        } else if *word == name {
            found = if boolean { Some("true") } else { words.next().copied() };
        }
    }
    found
}

/// Whether a pflag boolean's value is true (`strconv.ParseBool`; `None`:
/// not a boolean, which the proxy refuses at start).
pub fn pflag_bool(value: &str) -> Option<bool> {
    go_bool(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod<'a>(pairs: &'a [(Key, &'a str)]) -> impl Fn(Key) -> Option<&'a str> + 'a {
        move |k| pairs.iter().find(|(key, _)| *key == k).map(|(_, v)| *v)
    }

    fn reads(parser: Parser, values: &[&str]) -> Vec<Read> {
        values.iter().map(|v| parser.read(v)).collect()
    }

    use Read::{Off, On, Unset};

    #[test]
    fn a_namespace_turns_istio_on_by_its_injection_label_or_any_revision() {
        let enabled = [(label("istio-injection"), "enabled")];
        assert!(ISTIO.on_by_namespace(&pod(&enabled)));
        assert!(ISTIO.on_by_namespace(&pod(&[(label("istio.io/rev"), "canary")])));
        assert!(!ISTIO.on_by_namespace(&pod(&[(label("istio-injection"), "disabled")])));
        assert!(!ISTIO.on_by_namespace(&pod(&[(ann("istio-injection"), "enabled")])));
    }

    #[test]
    fn a_namespace_turns_linkerd_on_by_its_inject_annotation_enabled_or_ingress() {
        for value in ["enabled", "ingress"] {
            assert!(LINKERD.on_by_namespace(&pod(&[(ann("linkerd.io/inject"), value)])));
        }
        assert!(!LINKERD.on_by_namespace(&pod(&[(ann("linkerd.io/inject"), "true")])));
        assert!(!LINKERD.on_by_namespace(&pod(&[(label("linkerd.io/inject"), "enabled")])));
    }

    #[test]
    fn only_istio_and_linkerd_are_turned_on_by_a_namespace() {
        let by_ns: Vec<&str> = MESHES
            .iter()
            .filter(|m| !m.by_namespace.is_empty())
            .map(|m| m.name)
            .collect();
        assert_eq!(by_ns, ["istio", "linkerd"]);
    }

    #[test]
    fn go_parse_bool_reads_1_t_true_any_of_three_cases_and_nothing_else() {
        assert_eq!(reads(Parser::GoBool, &["1", "t", "T", "TRUE", "true", "True"]), [On; 6]);
        assert_eq!(
            reads(Parser::GoBool, &["0", "f", "F", "FALSE", "false", "False"]),
            [Off; 6]
        );
        assert_eq!(reads(Parser::GoBool, &["yes", "on", "tRUE", " true", ""]), [Unset; 5]);
    }

    #[test]
    fn hashicorp_parse_bool_is_go_parse_bool_with_empty_false_and_errors_off() {
        assert_eq!(reads(Parser::HashicorpBool, &["true", "T", "1"]), [On; 3]);
        assert_eq!(reads(Parser::HashicorpBool, &["", "false", "yes", "on"]), [Off; 4]);
    }

    #[test]
    fn dapr_is_truthy_trims_ignores_case_and_takes_y_yes_true_t_on_1() {
        assert_eq!(
            reads(Parser::DaprTruthy, &["y", "YES", " true ", "t", "On", "1"]),
            [On; 6]
        );
        assert_eq!(reads(Parser::DaprTruthy, &["0", "no", "truee", ""]), [Off; 4]);
    }

    #[test]
    fn dapr_enabled_is_truthy_up_to_1_17_2_and_equal_fold_true_from_1_17_3() {
        let [old, new] = DAPR.opt_in else { panic!() };
        assert_eq!((old.versions, new.versions), ("up to 1.17.2", "1.17.3+, 1.18.0+"));
        for (value, before, after) in [("1", On, Off), ("yes", On, Off), ("TRUE", On, On), (" true", On, Off)] {
            let pairs = [(ann("dapr.io/enabled"), value)];
            let get = pod(&pairs);
            assert_eq!((old.read(&get), new.read(&get)), (before, after), "{value:?}");
        }
    }

    #[test]
    fn istio_inject_takes_y_yes_true_on_any_case_up_to_1_26_and_only_true_from_1_27() {
        assert_eq!(reads(Parser::IstioInjectLegacy, &["y", "Yes", "TRUE", "on"]), [On; 4]);
        assert_eq!(reads(Parser::IstioInjectLegacy, &["false", "no", "off", "1"]), [Off; 4]);
        assert_eq!(Parser::IstioInjectLegacy.read(""), Unset);
        assert_eq!(
            reads(Parser::IstioInject, &["true", "false", "yes", "True", ""]),
            [On, Off, Unset, Unset, Unset]
        );
    }

    #[test]
    fn istio_inject_label_wins_over_the_annotation() {
        let pairs = [
            (label("sidecar.istio.io/inject"), "false"),
            (ann("sidecar.istio.io/inject"), "true"),
        ];
        assert_eq!(ISTIO.asks_for(&pod(&pairs)), Some(false));
    }

    #[test]
    fn istio_yes_asks_for_the_proxy_and_only_false_opts_out_under_every_version() {
        for (value, asked) in [
            ("yes", Some(true)),
            ("On", Some(true)),
            ("false", Some(false)),
            ("no", None),
        ] {
            let pairs = [(ann("sidecar.istio.io/inject"), value)];
            assert_eq!(ISTIO.asks_for(&pod(&pairs)), asked, "{value}");
        }
    }

    #[test]
    fn istio_native_annotation_true_is_native_from_1_24_and_other_values_only_from_1_27() {
        for (value, everywhere) in [("true", true), ("false", false), ("yes", false)] {
            let pairs = [(ann("sidecar.istio.io/nativeSidecar"), value)];
            assert_eq!(ISTIO.native_everywhere(&pod(&pairs)), everywhere, "{value}");
        }
        assert_eq!(
            reads(Parser::IstioNativeLegacy, &["true", "yes", "false"]),
            [On, Off, Off]
        );
        assert_eq!(
            reads(Parser::IstioNative, &["true", "yes", "false", ""]),
            [On, On, Off, Unset]
        );
    }

    #[test]
    fn istio_status_annotation_marks_an_injected_pod_and_ambient_has_no_sidecar() {
        let status = [(ann("sidecar.istio.io/status"), "{}")];
        assert!(ISTIO.marked(&pod(&status)));
        let ambient = [(ann("ambient.istio.io/redirection"), "enabled")];
        assert_eq!(ISTIO.asks_for(&pod(&ambient)), Some(false));
        let other = [(ann("ambient.istio.io/redirection"), "disabled")];
        assert_eq!(ISTIO.asks_for(&pod(&other)), None);
    }

    #[test]
    fn istio_status_port_annotation_moves_the_quit_not_the_readiness() {
        let pairs = [(ann("status.sidecar.istio.io/port"), "25020")];
        assert_eq!(ISTIO.moved_ports(&pod(&pairs)), (None, Some(25020)));
        let bad = [(ann("status.sidecar.istio.io/port"), "x")];
        assert_eq!(ISTIO.moved_ports(&pod(&bad)), (None, None));
    }

    #[test]
    fn linkerd_stable_native_key_wins_over_alpha() {
        let pairs = [(LINKERD_STABLE, "false"), (LINKERD_ALPHA, "true")];
        let get = pod(&pairs);
        assert_eq!(LINKERD.native[2].read(&get), Off, "2.20 reads the stable key first");
        assert!(!LINKERD.native_everywhere(&get));
        assert_eq!(
            LINKERD.native_set_otherwise(&get),
            Some(("config.linkerd.io/proxy-enable-native-sidecar", "false"))
        );
    }

    #[test]
    fn linkerd_beta_native_key_wins_over_alpha_from_2_19() {
        let pairs = [(LINKERD_BETA, "false"), (LINKERD_ALPHA, "true")];
        let get = pod(&pairs);
        assert_eq!(
            (
                LINKERD.native[0].read(&get),
                LINKERD.native[1].read(&get),
                LINKERD.native[2].read(&get)
            ),
            (On, Off, Off)
        );
    }

    #[test]
    fn linkerd_unparsable_stable_native_value_keeps_the_cluster_default_not_alpha() {
        let pairs = [(LINKERD_STABLE, "yes"), (LINKERD_ALPHA, "true")];
        let get = pod(&pairs);
        assert_eq!(LINKERD.native[2].read(&get), Unset);
        assert!(!LINKERD.native_everywhere(&get), "the default is not on the pod");
    }

    #[test]
    fn linkerd_reads_only_the_alpha_native_key_before_2_19() {
        let stable_only = [(LINKERD_STABLE, "true")];
        let get = pod(&stable_only);
        assert_eq!(LINKERD.native[0].read(&get), Unset);
        assert!(!LINKERD.native_everywhere(&get), "2.15-2.19 do not read the stable key");
        let all = [
            (LINKERD_STABLE, "true"),
            (LINKERD_BETA, "true"),
            (LINKERD_ALPHA, "true"),
        ];
        assert!(LINKERD.native_everywhere(&pod(&all)));
        assert_eq!(
            LINKERD.native_keys(),
            [LINKERD_STABLE.name, LINKERD_BETA.name, LINKERD_ALPHA.name]
        );
    }

    #[test]
    fn linkerd_inject_enabled_or_ingress_injects_and_any_other_value_does_not() {
        assert_eq!(reads(Parser::LinkerdInject, &["enabled", "ingress"]), [On; 2]);
        assert_eq!(reads(Parser::LinkerdInject, &["disabled", "true", "Enabled"]), [Off; 3]);
        assert_eq!(Parser::LinkerdInject.read(""), Unset);
    }

    #[test]
    fn linkerd_proxy_version_annotation_marks_an_injected_pod() {
        let pairs = [(ann("linkerd.io/proxy-version"), "edge-26.8.3")];
        assert!(LINKERD.marked(&pod(&pairs)));
        assert_eq!(LINKERD.asks_for(&pod(&pairs)), Some(true));
    }

    #[test]
    fn linkerd_shutdown_switch_is_proxy_admin_shutdown_enabled_and_nothing_else() {
        let switch = LINKERD.quit_switch.as_ref().unwrap();
        assert_eq!(
            (switch.key.name, switch.on),
            ("config.linkerd.io/proxy-admin-shutdown", "enabled")
        );
        assert_eq!(
            reads(switch.parser, &["enabled", "disabled", "Enabled", "true"]),
            [On, Off, Unset, Unset]
        );
    }

    #[test]
    fn linkerd_admin_port_annotation_moves_readiness_and_shutdown() {
        let pairs = [(ann("config.linkerd.io/admin-port"), "5191")];
        assert_eq!(LINKERD.moved_ports(&pod(&pairs)), (Some(5191), Some(5191)));
    }

    #[test]
    fn linkerd_argo_kill_command_needs_the_shutdown_switch() {
        let kill = LINKERD.argo_kill.as_ref().unwrap();
        assert!(kill.needs_quit_switch);
        assert!(kill.command.contains("--shutdown"));
        assert!(kill.sources.iter().any(|s| s.repo == "linkerd/linkerd-await"));
        assert!(kill.sources.iter().all(|s| !s.repo.starts_with("argoproj")));
    }

    #[test]
    fn vault_marks_injected_pods_with_agent_inject_status_injected() {
        let injected = [(ann("vault.hashicorp.com/agent-inject-status"), "injected")];
        assert!(VAULT.marked(&pod(&injected)));
        let update = [(ann("vault.hashicorp.com/agent-inject-status"), "update")];
        assert!(!VAULT.marked(&pod(&update)));
    }

    #[test]
    fn vault_pre_populate_only_means_no_sidecar() {
        let pairs = [
            (ann("vault.hashicorp.com/agent-inject"), "true"),
            (ann("vault.hashicorp.com/agent-pre-populate-only"), "T"),
        ];
        assert_eq!(VAULT.asks_for(&pod(&pairs)), Some(false));
    }

    #[test]
    fn vault_agent_inject_is_parsed_by_hashicorps_parse_bool() {
        for (value, asked) in [
            ("true", Some(true)),
            ("1", Some(true)),
            ("yes", Some(false)),
            ("false", Some(false)),
        ] {
            let pairs = [(ann("vault.hashicorp.com/agent-inject"), value)];
            assert_eq!(VAULT.asks_for(&pod(&pairs)), asked, "{value}");
        }
    }

    #[test]
    fn vault_quit_switch_reads_true_by_parse_bool_and_the_listener_port_moves_the_quit() {
        for (value, on) in [("true", true), ("True", true), ("1", true), ("yes", false)] {
            let pairs = [(ann("vault.hashicorp.com/agent-enable-quit"), value)];
            assert_eq!(VAULT.quit_switch_on(&pod(&pairs)), on, "{value}");
        }
        let pairs = [(ann("vault.hashicorp.com/agent-cache-listener-port"), "8300")];
        assert_eq!(VAULT.moved_ports(&pod(&pairs)), (None, Some(8300)));
        assert!(VAULT.native.is_empty(), "Vault has no native mode (v1.7.6)");
    }

    #[test]
    fn dapr_marks_injected_pods_with_the_sidecar_injected_label() {
        let mark = DAPR.mark.as_ref().unwrap();
        assert_eq!(
            (mark.key, mark.parser),
            (label("dapr.io/sidecar-injected"), Parser::Exact("true"))
        );
    }

    #[test]
    fn dapr_native_switch_is_truthy_and_a_present_false_value_is_classic() {
        for (value, native) in [("yes", true), ("1", true), ("nope", false)] {
            let pairs = [(ann("dapr.io/enable-native-sidecar"), value)];
            assert_eq!(DAPR.native_everywhere(&pod(&pairs)), native, "{value}");
        }
        assert_eq!(DAPR.native_keys(), ["dapr.io/enable-native-sidecar"]);
    }

    #[test]
    fn dapr_writes_no_version_on_the_pod_so_its_native_switch_is_never_proof() {
        // dapr/dapr v1.18.3 pkg/injector/patcher/sidecar_patcher.go: labels
        // only; v1.17.x never reads the switch (added by #9450 in v1.18.0).
        assert!(matches!(DAPR.native_proof, NativeProof::Unshown { .. }));
        let pairs = [
            (ann("dapr.io/enable-native-sidecar"), "true"),
            (label("dapr.io/sidecar-injected"), "true"),
        ];
        assert!(!DAPR.native_proven(&pod(&pairs)));
        let why = DAPR.native_unproven(&pod(&pairs)).unwrap();
        assert!(
            why.starts_with("dapr.io/enable-native-sidecar is set, but the injector writes no version"),
            "{why}"
        );
    }

    #[test]
    fn linkerd_native_counts_where_created_by_shows_an_injector_that_reads_the_key() {
        // linkerd/linkerd2 controller/proxy-injector/webhook.go writes
        // linkerd.io/created-by: "linkerd/proxy-injector <version>".
        let created_by = ann("linkerd.io/created-by");
        let proven = |by: &str, keys: &[Key]| {
            let mut pairs: Vec<(Key, &str)> = keys.iter().map(|k| (*k, "true")).collect();
            pairs.push((created_by, by));
            LINKERD.native_proven(&pod(&pairs))
        };
        let all = [LINKERD_STABLE, LINKERD_BETA, LINKERD_ALPHA];
        assert!(
            !proven("linkerd/proxy-injector stable-2.14.10", &all),
            "2.14 reads no native key"
        );
        assert!(
            !proven("linkerd/proxy-injector edge-23.11.3", &all),
            "before the alpha key"
        );
        assert!(proven("linkerd/proxy-injector edge-23.11.4", &[LINKERD_ALPHA]));
        assert!(
            !proven("linkerd/proxy-injector edge-25.10.1", &[LINKERD_BETA]),
            "alpha only"
        );
        assert!(proven("linkerd/proxy-injector edge-25.10.2", &[LINKERD_BETA]));
        assert!(
            !proven("linkerd/proxy-injector edge-26.5.1", &[LINKERD_STABLE]),
            "no stable key yet"
        );
        assert!(proven("linkerd/proxy-injector edge-26.5.2", &[LINKERD_STABLE]));
        assert!(proven("linkerd/cli edge-26.8.3", &all), "linkerd inject --manual");
        assert!(
            !proven("linkerd/proxy-injector enterprise-2.18.1", &all),
            "not shown which keys it reads"
        );
        assert!(!proven("linkerd/proxy-injector edge-26.x", &all));
        let no_mark = pod(&[(LINKERD_ALPHA, "true")]);
        assert!(!LINKERD.native_proven(&no_mark));
        assert!(
            LINKERD
                .native_unproven(&no_mark)
                .unwrap()
                .contains("no linkerd.io/created-by")
        );
    }

    #[test]
    fn istio_native_is_proven_by_its_status_alone() {
        assert!(matches!(ISTIO.native_proof, NativeProof::Status));
        let pairs = [(ann("sidecar.istio.io/nativeSidecar"), "true")];
        assert!(!ISTIO.native_proven(&pod(&pairs)));
    }

    #[test]
    fn dapr_http_port_is_fixed_at_3500() {
        assert_eq!(DAPR.ready.unwrap().0, 3500);
        assert_eq!(DAPR.quit.unwrap().0, 3500);
        assert!(DAPR.movers.is_empty());
    }

    #[test]
    fn cloudsql_settings_are_flags_with_csql_proxy_variables() {
        for s in [
            &CLOUDSQL_HTTP_PORT,
            &CLOUDSQL_HTTP_ADDRESS,
            &CLOUDSQL_ADMIN_PORT,
            &CLOUDSQL_HEALTH_CHECK,
            &CLOUDSQL_QUITQUITQUIT,
            &CLOUDSQL_CONFIG_FILE,
        ] {
            let derived = format!("CSQL_PROXY_{}", s.flag[2..].to_uppercase().replace('-', "_"));
            assert_eq!(s.env, derived);
        }
        assert_eq!(
            (CLOUDSQL.ready, CLOUDSQL.quit),
            (Some((9090, "/startup")), Some((9091, "/quitquitquit")))
        );
        assert_eq!(
            (CLOUDSQL_HTTP_PORT.default, CLOUDSQL_ADMIN_PORT.default),
            ("9090", "9091")
        );
    }

    #[test]
    fn cloudsql_flags_are_read_as_pflag_reads_them() {
        let args = [
            "--http-port=9190",
            "p:r:db",
            "--admin-port",
            "9192",
            "--http-port",
            "9290",
        ];
        assert_eq!(pflag_value(&args, "--http-port", false), Some("9290"), "the last wins");
        assert_eq!(pflag_value(&args, "--admin-port", false), Some("9192"));
        let bools = ["--quitquitquit", "p:r:db", "--health-check=false"];
        assert_eq!(pflag_value(&bools, "--quitquitquit", true), Some("true"));
        assert_eq!(pflag_value(&bools, "--health-check", true), Some("false"));
        assert_eq!(
            pflag_value(&["--health-check", "false"], "--health-check", true),
            Some("true")
        );
        assert_eq!(pflag_value(&["--http-portx=1"], "--http-port", false), None);
    }

    // consul-k8s v2.0.3 control-plane/connect-inject/webhook/mesh_webhook.go:
    // pod.Annotations[KeyInjectStatus] = Injected; shouldInject ParseBool.
    #[test]
    fn consul_marks_injected_pods_with_connect_inject_status_injected() {
        let injected = [(ann("consul.hashicorp.com/connect-inject-status"), "injected")];
        assert!(CONSUL.marked(&pod(&injected)));
        assert_eq!(CONSUL.proxy, "consul-dataplane");
        let other = [(ann("consul.hashicorp.com/connect-inject-status"), "true")];
        assert!(!CONSUL.marked(&pod(&other)));
        let opt_out = [(ann("consul.hashicorp.com/connect-inject"), "F")];
        assert_eq!(CONSUL.asks_for(&pod(&opt_out)), Some(false));
        let yes = [(ann("consul.hashicorp.com/connect-inject"), "yes")];
        assert_eq!(CONSUL.asks_for(&pod(&yes)), None, "not ParseBool: the default stands");
    }

    // consul-k8s v2.0.3 consul_dataplane_sidecar.go and constants.go;
    // consul-dataplane v2.0.1 pkg/consuldp/lifecycle.go.
    #[test]
    fn consul_waits_on_envoys_admin_ready_and_quits_through_the_lifecycle_server() {
        assert_eq!(CONSUL.ready, Some((19000, "/ready")));
        assert_eq!(CONSUL.quit, Some((20600, "/graceful_shutdown")));
        let admin = CONSUL.admin_quit.as_ref().unwrap();
        assert_eq!((admin.port, admin.path), (19000, "/quitquitquit"));
        assert!(admin.why.contains("#1791"), "{}", admin.why);
        assert!(CONSUL.quit != Some((admin.port, admin.path)));
    }

    // consul-k8s v2.0.3 lifecycle_configuration.go (GracefulPort,
    // GracefulShutdownPath); consul_dataplane_sidecar.go passes the path
    // only `if enableProxyLifecycle`.
    #[test]
    fn consul_graceful_port_moves_the_quit_and_its_path_counts_only_with_the_lifecycle_on() {
        let port = ann("consul.hashicorp.com/sidecar-proxy-lifecycle-graceful-port");
        let path = ann("consul.hashicorp.com/sidecar-proxy-lifecycle-graceful-shutdown-path");
        let pairs = [(port, "20700"), (path, "/stop")];
        assert_eq!(CONSUL.moved_ports(&pod(&pairs)), (None, Some(20700)));
        assert_eq!(CONSUL.moved_quit_path(&pod(&pairs)), Some("/stop"));
        let off = [(path, "/stop"), (CONSUL_LIFECYCLE, "false")];
        assert_eq!(
            CONSUL.moved_quit_path(&pod(&off)),
            None,
            "off: the dataplane's own path"
        );
        let on = [(path, "/stop"), (CONSUL_LIFECYCLE, "true")];
        assert_eq!(CONSUL.moved_quit_path(&pod(&on)), Some("/stop"));
    }

    // consul-k8s: enable-consul-dataplane-as-sidecar first in v1.6.9,
    // v1.7.5, v1.8.2 and v1.9.0 (not in v1.6.8, v1.7.4, v1.8.1);
    // consul-k8s-version is version.GetHumanVersion() (v2.0.3).
    #[test]
    fn consul_native_counts_where_consul_k8s_version_shows_a_release_that_reads_the_switch() {
        let version = ann("consul.hashicorp.com/consul-k8s-version");
        let native = ann("consul.hashicorp.com/enable-consul-dataplane-as-sidecar");
        let proven = |v: &str, value: &str| CONSUL.native_proven(&pod(&[(version, v), (native, value)]));
        for v in [
            "v1.6.9",
            "v1.6.10",
            "v1.7.5",
            "v1.8.2",
            "v1.9.0",
            "v2.0.3",
            "v1.9.0+fips1402",
        ] {
            assert!(proven(v, "true"), "{v}");
        }
        for v in [
            "v1.6.8",
            "v1.7.0",
            "v1.7.4",
            "v1.8.0",
            "v1.8.1",
            "1.9.0",
            "v1.9.0-dev",
            "v1.5.9",
        ] {
            assert!(!proven(v, "true"), "{v}");
        }
        assert!(!proven("v2.0.3", "yes"), "ParseBool: an error keeps the default");
        assert!(!proven("v2.0.3", "0"));
        assert!(
            !CONSUL.native_proven(&pod(&[(native, "true")])),
            "no version on the pod"
        );
        assert_eq!(CONSUL.native_keys(), [native.name]);
    }

    // consul-dataplane v2.0.1 pkg/consuldp/lifecycle.go gracefulShutdown;
    // consul-k8s v2.0.3 charts/consul/values.yaml (30 s),
    // lifecycle_configuration.go (ParseUint).
    #[test]
    fn consul_job_grace_period_is_0_and_only_where_the_lifecycle_is_not_off() {
        let [setting] = CONSUL.job_settings else { panic!() };
        assert_eq!(
            (setting.key.name, setting.value),
            (
                "consul.hashicorp.com/sidecar-proxy-lifecycle-shutdown-grace-period-seconds",
                "0"
            )
        );
        assert!(setting.applies(&pod(&[])), "the chart's default: lifecycle on");
        assert!(setting.applies(&pod(&[(CONSUL_LIFECYCLE, "true")])));
        assert!(
            setting.applies(&pod(&[(CONSUL_LIFECYCLE, "")])),
            "\"\" keeps the default"
        );
        assert!(!setting.applies(&pod(&[(CONSUL_LIFECYCLE, "false")])));
        assert!(!setting.applies(&pod(&[(CONSUL_LIFECYCLE, "0")])));
        assert!(CONSUL.quit_switch.is_none(), "the lifecycle switch is never written");
        // Distroless: no command of its own reaches the lifecycle server,
        // so meshwrap is mounted in through consul-k8s's user volume mounts
        // and quits through the lifecycle server, never Envoy's admin.
        let kill = CONSUL.argo_kill.as_ref().unwrap();
        assert_eq!(
            kill.mounts.map(|k| (k.place, k.name)),
            Some((
                Place::Annotation,
                "consul.hashicorp.com/consul-sidecar-user-volume-mount"
            ))
        );
        let argv: Vec<&str> = kill
            .command
            .trim_matches(['[', ']'])
            .split(',')
            .map(|a| a.trim_matches('"'))
            .collect();
        assert_eq!(argv[..4], ["/mesh/meshwrap", "--no-wait", "--sidecar", "auto"]);
        assert!(!kill.command.contains("19000") && !kill.command.contains("quitquitquit"));
        assert!(!kill.needs_quit_switch);
    }

    // kumahq/kuma v2.14.3 injector.go (NewAnnotations), precheck.go,
    // metadata/annotations.go (GetEnabled).
    #[test]
    fn kuma_marks_injected_pods_with_sidecar_injected_true_and_opts_in_by_label() {
        let injected = [(ann("kuma.io/sidecar-injected"), "true")];
        assert!(KUMA.marked(&pod(&injected)));
        assert!(!KUMA.marked(&pod(&[(ann("kuma.io/sidecar-injected"), "false")])));
        assert_eq!(KUMA.proxy, "kuma-sidecar");
        assert_eq!(
            reads(
                Parser::KumaEnabled,
                &["true", "yes", "enabled", "false", "no", "disabled", "True", "1"]
            ),
            [On, On, On, Off, Off, Off, Unset, Unset]
        );
        let opt_in = [(label("kuma.io/sidecar-injection"), "enabled")];
        assert_eq!(KUMA.asks_for(&pod(&opt_in)), Some(true));
        let as_annotation = [(ann("kuma.io/sidecar-injection"), "enabled")];
        assert_eq!(KUMA.asks_for(&pod(&as_annotation)), None, "a label, not an annotation");
    }

    // kumahq/kuma v2.14.3 readiness/component.go, kuma-dp config.go, run.go;
    // pod_status_controller.go.
    #[test]
    fn kuma_waits_on_the_readiness_reporter_at_9902_and_is_never_quit() {
        assert_eq!(KUMA.ready, Some((9902, "/ready")));
        assert_eq!(KUMA.quit, None);
        let no_quit = KUMA.no_quit.as_ref().unwrap();
        assert!(no_quit.why.contains("control plane") && no_quit.why.contains("kubelet"));
        assert!(
            no_quit
                .sources
                .iter()
                .any(|s| s.path.contains("pod_status_controller.go"))
        );
        assert!(KUMA.quit_switch.is_none() && KUMA.job_settings.is_empty() && KUMA.argo_kill.is_none());
    }

    // kumahq/kuma kuma-cp.defaults.yaml: sidecarContainers false in 2.7.0,
    // true in 2.14.0; no per-pod switch and no version on the pod.
    #[test]
    fn kuma_native_is_the_control_planes_choice_so_never_proven_on_the_pod() {
        assert!(KUMA.native.is_empty());
        let NativeProof::Unshown { source } = &KUMA.native_proof else {
            panic!()
        };
        assert!(
            source.path.contains("2.7.0") && source.path.contains("2.14.0"),
            "{source:?}"
        );
        assert!(!KUMA.native_proven(&pod(&[(ann("kuma.io/sidecar-injected"), "true")])));
    }

    // consul-k8s v2.0.3 mesh_webhook.go annotatedServiceNames (strings.Split
    // on ","; more than one is a multi-port pod), consul_dataplane_sidecar.go.
    #[test]
    fn consul_multi_port_pods_run_one_dataplane_per_service_on_ports_plus_its_index() {
        let service = ann("consul.hashicorp.com/connect-service");
        assert_eq!(CONSUL.instances(&pod(&[])), 1);
        assert_eq!(CONSUL.instances(&pod(&[(service, "web")])), 1);
        assert_eq!(CONSUL.instances(&pod(&[(service, "web,admin,metrics")])), 3);
        assert_eq!(ISTIO.instances(&pod(&[(service, "a,b")])), 1, "Consul's key only");
    }

    #[test]
    fn docs_meshes_md_names_every_key_of_the_table() {
        let docs = include_str!("../docs/meshes.md");
        for mesh in MESHES {
            let rules = mesh.opt_in.iter().chain(mesh.no_sidecar).chain(mesh.native);
            let mut keys: Vec<&str> = rules.flat_map(|r| r.keys.iter().map(|k| k.name)).collect();
            keys.extend(mesh.mark.as_ref().map(|m| m.key.name));
            keys.extend(mesh.quit_switch.as_ref().map(|s| s.key.name));
            keys.extend(mesh.movers.iter().map(|m| m.key.name));
            for key in keys {
                let short = key.rsplit_once('/').map_or(key, |(_, name)| name);
                assert!(docs.contains(key) || docs.contains(short), "docs/meshes.md lacks {key}");
            }
            for (port, path) in mesh.ready.iter().chain(&mesh.quit) {
                assert!(
                    docs.contains(&format!("{port}{path}")) || docs.contains(path),
                    "{port}{path}"
                );
            }
        }
        for s in [
            &CLOUDSQL_HTTP_PORT,
            &CLOUDSQL_HTTP_ADDRESS,
            &CLOUDSQL_ADMIN_PORT,
            &CLOUDSQL_QUITQUITQUIT,
        ] {
            assert!(docs.contains(s.flag), "docs/meshes.md lacks {}", s.flag);
        }
    }

    #[test]
    fn every_mesh_cites_its_sources() {
        for mesh in MESHES {
            let rules = mesh.opt_in.iter().chain(mesh.no_sidecar).chain(mesh.native);
            let mut sources: Vec<&Source> = rules.map(|r| &r.source).collect();
            sources.extend(mesh.mark.as_ref().map(|m| &m.source));
            sources.extend(mesh.quit_switch.as_ref().map(|s| &s.source));
            sources.extend(mesh.movers.iter().map(|m| &m.source));
            sources.extend(mesh.argo_kill.iter().flat_map(|k| k.sources));
            sources.extend(mesh.no_quit.iter().flat_map(|q| q.sources));
            sources.extend(mesh.quit_path.as_ref().map(|p| &p.source));
            sources.extend(mesh.admin_quit.as_ref().map(|a| &a.source));
            sources.extend(mesh.job_settings.iter().map(|j| &j.source));
            sources.extend(mesh.instances.as_ref().map(|i| &i.source));
            sources.push(&mesh.endpoints_source);
            for s in sources {
                assert!(
                    s.repo.contains('/') && !s.path.is_empty() && !s.version.is_empty(),
                    "{}: {s:?}",
                    mesh.name
                );
            }
        }
    }
}
