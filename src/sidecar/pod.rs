//! What the pod's own annotations say about its sidecars, read from the file
//! the Downward API mounts (`/etc/podinfo/annotations` by default), and the
//! labels file beside it when one is mounted.
//!
//! The facts themselves (each injector's mark, the values it reads as true,
//! which native key wins, what moves a port) are the table in
//! `crate::meshes`; this module reads the pod's files and asks the table.
//! Per marked mesh ([`meshes::MARKED`]): whether its injector put a sidecar
//! in this pod (its mark, unless a switch says the pod has none: Istio's
//! ambient mode, Vault's `agent-pre-populate-only`; Dapr's mark is a label,
//! and where no labels are mounted its opt-in stands in, by the loosest of
//! its versions' readings); whether that sidecar is native (`istio-proxy`
//! among the Istio status's `initContainers`; Linkerd's per-pod switch, as
//! the injector version its `linkerd.io/created-by` shows reads it; never
//! Dapr's, whose injector writes no version: native only where proven);
//! and the ports the pod's annotations moved. The kubelet stops a native
//! sidecar itself, so quitting it would only make the kubelet restart it.
//!
//! Without a readable file nothing is known, and meshwrap does what it was
//! configured to do. A file it cannot parse gets one warning and is then
//! treated the same way: a wrong guess here would skip a wait or a quit. A
//! value that concerns one mesh only (a malformed Istio status) is a
//! warning about that mesh, and the others are read as usual.
//!
//! The file is read before meshwrap reads any signal, so reading it must not
//! block or grow without bound: only a regular file of at most [`MAX_FILE`]
//! bytes is read, opened without blocking (a FIFO given by mistake would
//! hang the open), and the Istio status JSON is skipped through without
//! recursion (nesting 80,000 deep fits in an annotation).

use std::collections::BTreeMap;
use std::path::Path;

use crate::meshes::{self, Key, Mesh, Place};

/// The default mount path of the annotations file.
pub const DEFAULT_PATH: &str = "/etc/podinfo/annotations";

/// What the annotations say about one preset's sidecar.
#[derive(Debug, Default)]
pub struct Seen {
    /// Why it is not in this pod, if it is known not to be.
    pub absent: Option<String>,
    /// It runs as a native sidecar (a restartable init container).
    pub native: bool,
    /// Why a native switch the pod sets is not taken as native (no
    /// injector version on the pod that reads it): it is quit.
    pub unproven: Option<String>,
    /// The key that showed it in the pod: the injector's mark, or Dapr's
    /// opt-in where no labels are mounted.
    pub shown_by: &'static str,
    /// The readiness port the pod's annotations moved it to.
    pub ready_port: Option<u16>,
    /// The quit port the pod's annotations moved it to.
    pub quit_port: Option<u16>,
    /// The quit path the pod's annotations gave it (Consul's lifecycle).
    pub quit_path: Option<String>,
    /// How many of it the pod runs, each on the ports plus its index
    /// (Consul's multi-port pods); 0 or 1: one.
    pub instances: u16,
}

/// What the annotations say, mesh by mesh in [`meshes::MARKED`]'s order.
#[derive(Debug, Default)]
pub struct Facts {
    pub seen: [Seen; meshes::MARKED.len()],
    /// Values that could not be read, each about one mesh (warned once).
    pub warnings: Vec<String>,
}

impl Facts {
    /// What is known of the preset `name`; nothing for a preset no injector marks.
    pub fn of(&self, name: &str) -> Option<&Seen> {
        meshes::MARKED
            .iter()
            .position(|m| m.name == name)
            .map(|i| &self.seen[i])
    }
}

/// The largest annotations file read. Kubernetes caps a pod's annotations at
/// 256 KiB in all; Go's quoting can make the file up to four times that.
pub const MAX_FILE: u64 = 1024 * 1024;

/// Reads the annotations file. `Ok(None)`: no file (nothing known).
/// `Err`: a file that is not a regular file of at most [`MAX_FILE`] bytes in
/// the Downward API's format.
pub fn read(path: &Path) -> Result<Option<Facts>, String> {
    let Some(annotations) = read_map(path)? else {
        return Ok(None);
    };
    // The labels, when mounted beside the annotations (Dapr marks a pod by label).
    let labels = read_map(&path.with_file_name("labels"))?;
    Ok(Some(facts(&annotations, labels.as_ref())))
}

/// One Downward API file, parsed; `None` when there is no such file.
fn read_map(path: &Path) -> Result<Option<BTreeMap<String, String>>, String> {
    match read_bounded(path) {
        Ok(text) => parse(&text).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// The file's text, read only if it is a regular file within the bound.
///
/// Opened non-blocking, so a FIFO given by mistake cannot hang the open
/// (meshwrap reads no signal until the wait begins); only a regular file is
/// then read, since a FIFO, a device (`/dev/zero`) or a socket can block the
/// read or never end it. A regular file can still be larger than it said, so
/// the read itself is bounded too.
fn read_bounded(path: &Path) -> std::io::Result<String> {
    use std::io::{Error, Read};
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(Error::other("it is not a regular file"));
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_FILE {
        return Err(Error::other(format!(
            "it is larger than {} KiB, more than any pod's annotations",
            MAX_FILE / 1024
        )));
    }
    String::from_utf8(bytes).map_err(|_| Error::other("it is not UTF-8"))
}

/// Parses the Downward API's format: one `key="value"` per line, the value
/// quoted as Go's %q does (the kubelet writes it with fmt's %q).
pub fn parse(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut map = BTreeMap::new();
    for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let (key, quoted) = line.split_once('=').ok_or_else(|| format!("line {}: no '='", n + 1))?;
        let value = unquote(quoted).map_err(|why| format!("line {}: {why}", n + 1))?;
        map.insert(key.to_string(), value);
    }
    Ok(map)
}

/// Undoes Go's strconv.Quote.
fn unquote(quoted: &str) -> Result<String, String> {
    let inner = quoted
        .strip_prefix('"')
        .and_then(|q| q.strip_suffix('"'))
        .filter(|_| quoted.len() >= 2)
        .ok_or("the value is not in double quotes")?;
    let mut out = String::new();
    let mut bytes: Vec<u8> = Vec::new();
    let mut chars = inner.chars();
    let hex = |chars: &mut std::str::Chars, n: usize| -> Result<u32, String> {
        let digits: String = chars.take(n).collect();
        u32::from_str_radix(&digits, 16)
            .ok()
            .filter(|_| digits.len() == n)
            .ok_or_else(|| format!("bad escape \\{digits}"))
    };
    while let Some(c) = chars.next() {
        if c != '\\' {
            if c == '"' {
                return Err("an unescaped quote inside the value".into());
            }
            out.push_str(&String::from_utf8_lossy(&std::mem::take(&mut bytes)));
            out.push(c);
            continue;
        }
        let escaped = match chars.next().ok_or("a trailing backslash")? {
            'a' => '\x07',
            'b' => '\x08',
            'f' => '\x0c',
            'n' => '\n',
            'r' => '\r',
            't' => '\t',
            'v' => '\x0b',
            '\\' => '\\',
            '"' => '"',
            // A raw byte: collected, since several may form one UTF-8 character.
            'x' => {
                bytes.push(hex(&mut chars, 2)? as u8);
                continue;
            }
            'u' => char::from_u32(hex(&mut chars, 4)?).ok_or("a bad \\u escape")?,
            'U' => char::from_u32(hex(&mut chars, 8)?).ok_or("a bad \\U escape")?,
            other => return Err(format!("an unknown escape \\{other}")),
        };
        out.push_str(&String::from_utf8_lossy(&std::mem::take(&mut bytes)));
        out.push(escaped);
    }
    out.push_str(&String::from_utf8_lossy(&bytes));
    Ok(out)
}

/// Draws the facts from parsed annotations (and labels, when mounted).
pub fn facts(annotations: &BTreeMap<String, String>, labels: Option<&BTreeMap<String, String>>) -> Facts {
    let get = |key: Key| {
        match key.place {
            Place::Annotation => annotations.get(key.name),
            Place::Label => labels.and_then(|l| l.get(key.name)),
        }
        .map(String::as_str)
    };
    let mut facts = Facts::default();
    for (mesh, seen) in meshes::MARKED.iter().zip(facts.seen.iter_mut()) {
        seen.shown_by = mesh.mark.as_ref().map_or("", |m| m.key.name);
        (seen.ready_port, seen.quit_port) = mesh.moved_ports(&get);
        seen.quit_path = mesh.moved_quit_path(&get).map(str::to_string);
        seen.instances = mesh.instances(&get);
        // Native only where proven (the pod shows an injector version that
        // reads the switch): otherwise a regular container, and quit.
        seen.native = mesh.native_proven(&get);
        seen.unproven = mesh.native_unproven(&get);
        seen.absent = absent(mesh, &get, labels.is_some());
        if seen.absent.is_none() && mesh.mark.as_ref().is_some_and(|m| get(m.key).is_none()) {
            // Shown by its opt-in: Dapr without a labels file.
            seen.shown_by = mesh.opt_in.first().and_then(|r| r.keys.first()).map_or("", |k| k.name);
        }
    }
    // Istio's status is the truth of its sidecar: native where it lists
    // istio-proxy among the init containers.
    let istio = &mut facts.seen[0];
    if let (None, Some(status)) = (&istio.absent, annotations.get(istio.shown_by)) {
        match json::string_array(status, "initContainers") {
            Ok(init) => {
                istio.native = init.iter().any(|c| c == meshes::ISTIO.proxy);
                istio.unproven = None;
            }
            Err(why) => {
                istio.native = false;
                facts.warnings.push(format!(
                    "{} is not the JSON Istio writes: {why}; taking Istio's sidecar as a regular one",
                    istio.shown_by
                ));
            }
        }
    }
    facts
}

/// Why the mesh's sidecar is known not to be in the pod, if it is.
fn absent(mesh: &Mesh, get: meshes::Get, labels_mounted: bool) -> Option<String> {
    let named = title(mesh.name);
    if let Some((key, value)) = mesh.no_sidecar.iter().find_map(|rule| {
        let key = rule.keys.iter().find(|k| get(**k).is_some())?;
        (rule.read(get) == meshes::Read::On).then(|| (key.name, get(*key).unwrap_or("")))
    }) {
        return Some(format!("{key}: \"{value}\": {named} puts no sidecar in the pod"));
    }
    let mark = mesh.mark.as_ref()?;
    let unseen_label = mark.key.place == Place::Label && !labels_mounted;
    if mesh.marked(get) || (unseen_label && meshes::on_in_some(mesh.opt_in, get)) {
        return None;
    }
    let opt_in = mesh
        .opt_in
        .first()
        .and_then(|r| r.keys.iter().find(|k| get(**k).is_some()));
    match opt_in.and_then(|k| get(*k).map(|v| (k.name, v))) {
        Some((key, value)) if meshes::off_in_every(mesh.opt_in, get) => {
            Some(format!("the pod opted out of injection ({key}: \"{value}\")"))
        }
        _ if unseen_label => Some(format!(
            "the pod did not ask for {named} (no {} that any {named} version reads as true)",
            mesh.opt_in.first().and_then(|r| r.keys.first()).map_or("", |k| k.name)
        )),
        _ => {
            let place = if mark.key.place == Place::Label {
                "label"
            } else {
                "annotation"
            };
            Some(format!(
                "{named} did not inject this pod (it has no {} {place})",
                mark.key.name
            ))
        }
    }
}

/// `istio` as `Istio`.
fn title(name: &str) -> String {
    let mut chars = name.chars();
    chars
        .next()
        .map(|c| c.to_ascii_uppercase().to_string() + chars.as_str())
        .unwrap_or_default()
}

/// Just enough JSON to read one array of strings from Istio's status.
mod json {
    /// The strings in `key`'s array at the top level of the object in `text`
    /// (`null` or a missing key: none).
    pub fn string_array(text: &str, key: &str) -> Result<Vec<String>, String> {
        let mut p = Parser {
            s: text.as_bytes(),
            i: 0,
        };
        p.expect(b'{')?;
        let mut found = Vec::new();
        if p.peek() == Some(b'}') {
            return Ok(found);
        }
        loop {
            let name = p.string()?;
            p.expect(b':')?;
            if name == key && p.peek() == Some(b'[') {
                p.expect(b'[')?;
                while p.peek() != Some(b']') {
                    found.push(p.string()?);
                    if p.peek() == Some(b',') {
                        p.i += 1;
                    }
                }
                p.expect(b']')?;
            } else {
                p.skip_value()?;
            }
            match p.next() {
                Some(b',') => continue,
                Some(b'}') => return Ok(found),
                _ => return Err("expected ',' or '}'".into()),
            }
        }
    }

    struct Parser<'a> {
        s: &'a [u8],
        i: usize,
    }

    impl Parser<'_> {
        fn peek(&mut self) -> Option<u8> {
            while self.s.get(self.i).is_some_and(u8::is_ascii_whitespace) {
                self.i += 1;
            }
            self.s.get(self.i).copied()
        }
        fn next(&mut self) -> Option<u8> {
            let c = self.peek();
            self.i += 1;
            c
        }
        fn expect(&mut self, c: u8) -> Result<(), String> {
            if self.next() == Some(c) {
                Ok(())
            } else {
                Err(format!("expected '{}'", c as char))
            }
        }
        fn string(&mut self) -> Result<String, String> {
            self.expect(b'"')?;
            let mut out = Vec::new();
            loop {
                match self.s.get(self.i).copied() {
                    None => return Err("an unterminated string".into()),
                    Some(b'"') => {
                        self.i += 1;
                        return String::from_utf8(out).map_err(|_| "a string that is not UTF-8".into());
                    }
                    Some(b'\\') => {
                        out.push(*self.s.get(self.i + 1).ok_or("an unterminated string")?);
                        self.i += 2;
                    }
                    Some(c) => {
                        out.push(c);
                        self.i += 1;
                    }
                }
            }
        }
        /// Skips one value of any depth. Iterative: the closers still owed
        /// are a stack on the heap, so a value nested 80,000 deep (160 KB,
        /// within the annotation limit) costs memory, not the thread's stack.
        fn skip_value(&mut self) -> Result<(), String> {
            let mut owed: Vec<u8> = Vec::new();
            loop {
                match self.peek() {
                    Some(b'"') => self.string().map(drop)?,
                    Some(open @ (b'[' | b'{')) => {
                        self.i += 1;
                        let close = if open == b'[' { b']' } else { b'}' };
                        if self.peek() == Some(close) {
                            self.i += 1;
                        } else {
                            owed.push(close);
                            if close == b'}' {
                                self.string()?;
                                self.expect(b':')?;
                            }
                            continue;
                        }
                    }
                    Some(_) => self.scalar()?,
                    None => return Err("an unexpected end".into()),
                }
                // After a value: close what it ends, or go on to the next element.
                loop {
                    let Some(&close) = owed.last() else { return Ok(()) };
                    match self.next() {
                        Some(b',') if close == b'}' => {
                            self.string()?;
                            self.expect(b':')?;
                            break;
                        }
                        Some(b',') => break,
                        Some(c) if c == close => {
                            owed.pop();
                        }
                        _ => return Err(format!("expected ',' or '{}'", close as char)),
                    }
                }
            }
        }

        /// A number, `true`, `false` or `null`, loosely.
        fn scalar(&mut self) -> Result<(), String> {
            let start = self.i;
            while self
                .s
                .get(self.i)
                .is_some_and(|c| c.is_ascii_alphanumeric() || b"+-.".contains(c))
            {
                self.i += 1;
            }
            if self.i == start {
                Err("an unexpected character".into())
            } else {
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NATIVE: &str = r#"kubectl.kubernetes.io/default-container="train"
sidecar.istio.io/status="{\"initContainers\":[\"istio-init\",\"istio-proxy\"],\"containers\":null,\"volumes\":[\"workload-socket\",\"istio-envoy\"],\"imagePullSecrets\":null,\"revision\":\"default\"}"
"#;

    #[test]
    fn parses_the_downward_api_format() {
        let map = parse("a=\"x\"\nb/c=\"q\\\"uo\\\\te \\u00e9\\xc3\\xa9\\n\"\n").unwrap();
        assert_eq!(map["a"], "x");
        assert_eq!(map["b/c"], "q\"uo\\te \u{e9}\u{e9}\n");
        for bad in ["a=x", "a=\"x", "no equals", "a=\"\\q\"", "a=\"in\"side\""] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }

    fn read(annotations: &str) -> Facts {
        facts(&parse(annotations).unwrap(), None)
    }

    #[test]
    fn reads_native_classic_absent_and_ambient() {
        let native = read(NATIVE);
        assert!(native.seen[0].native && native.seen[0].absent.is_none());
        let classic = read(&NATIVE.replace(r#"\"istio-init\",\"istio-proxy\""#, r#"\"istio-init\""#));
        assert!(!classic.seen[0].native && classic.seen[0].absent.is_none());
        assert!(read("x=\"y\"").seen[0].absent.is_some());
        let ambient = read("ambient.istio.io/redirection=\"enabled\"");
        assert!(
            ambient.seen[0]
                .absent
                .as_ref()
                .unwrap()
                .contains("ambient.istio.io/redirection")
        );
        let linkerd = read("linkerd.io/proxy-version=\"edge-24.11.8\"");
        assert!(linkerd.of("linkerd").unwrap().absent.is_none());
    }

    #[test]
    fn a_malformed_istio_status_is_a_warning_about_istio_alone() {
        let facts = read("sidecar.istio.io/status=\"{not json\"\nlinkerd.io/proxy-version=\"edge-26.8.3\"");
        assert_eq!(facts.warnings.len(), 1);
        assert!(
            facts.warnings[0].contains("is not the JSON Istio writes"),
            "{:?}",
            facts.warnings
        );
        let istio = facts.of("istio").unwrap();
        assert!(
            istio.absent.is_none() && !istio.native,
            "in the pod, taken as a regular sidecar"
        );
        assert!(
            facts.of("linkerd").unwrap().absent.is_none(),
            "Linkerd is read as usual"
        );
    }

    #[test]
    fn each_injectors_mark_decides_its_preset() {
        let none = read("x=\"y\"");
        for name in ["istio", "linkerd", "vault", "dapr"] {
            assert!(none.of(name).unwrap().absent.is_some(), "{name}");
        }
        assert!(none.of("cloudsql").is_none(), "no injector marks cloudsql");
        let vault = read("vault.hashicorp.com/agent-inject-status=\"injected\"");
        assert!(vault.of("vault").unwrap().absent.is_none());
        let prepopulate = read(
            "vault.hashicorp.com/agent-inject-status=\"injected\"\nvault.hashicorp.com/agent-pre-populate-only=\"true\"",
        );
        let why = prepopulate.of("vault").unwrap().absent.clone().unwrap();
        assert!(why.contains("pre-populate-only"), "{why}");
        let opted_out = read("sidecar.istio.io/inject=\"false\"");
        assert!(opted_out.seen[0].absent.as_ref().unwrap().contains("opted out"));
    }

    #[test]
    fn dapr_is_judged_by_its_label_where_labels_are_mounted_and_else_by_any_versions_opt_in() {
        let requested = parse("dapr.io/enabled=\"true\"").unwrap();
        let unlabelled = parse("app=\"x\"").unwrap();
        let labelled = parse("dapr.io/sidecar-injected=\"true\"").unwrap();
        let why = facts(&requested, Some(&unlabelled)).seen[3].absent.clone().unwrap();
        assert!(why.contains("no dapr.io/sidecar-injected label"), "{why}");
        let seen = &facts(&requested, Some(&labelled)).seen[3];
        assert_eq!(
            (seen.absent.as_deref(), seen.shown_by),
            (None, "dapr.io/sidecar-injected")
        );
        // No labels file: Dapr up to 1.17.2 injects on "1" and "yes" too.
        for value in ["True", "1", "yes"] {
            let seen = &read(&format!("dapr.io/enabled=\"{value}\"")).seen[3];
            assert_eq!(
                (seen.absent.as_deref(), seen.shown_by),
                (None, "dapr.io/enabled"),
                "{value}"
            );
        }
        assert!(
            read("dapr.io/enabled=\"false\"").seen[3]
                .absent
                .as_ref()
                .unwrap()
                .contains("opted out")
        );
    }

    #[test]
    fn linkerd_is_native_only_where_its_injectors_version_reads_the_key() {
        let all = "config.linkerd.io/proxy-enable-native-sidecar=\"true\"\n\
                   config.beta.linkerd.io/proxy-enable-native-sidecar=\"true\"\n\
                   config.alpha.linkerd.io/proxy-enable-native-sidecar=\"true\"";
        let by = |version: &str| format!("linkerd.io/created-by=\"linkerd/proxy-injector {version}\"\n{all}");
        assert!(read(&by("edge-26.8.3")).seen[1].native);
        let old = read(&by("stable-2.14.10"));
        assert!(!old.seen[1].native, "2.14 reads no native key");
        assert!(old.seen[1].unproven.as_deref().unwrap().contains("stable-2.14.10"));
        assert!(!read(all).seen[1].native, "no injector version on the pod");
        let alpha_t = "linkerd.io/created-by=\"linkerd/proxy-injector edge-24.2.4\"\n\
                       config.alpha.linkerd.io/proxy-enable-native-sidecar=\"t\"";
        assert!(read(alpha_t).seen[1].native, "2.15 reads the alpha key with ParseBool");
        let stable_false = "linkerd.io/created-by=\"linkerd/proxy-injector edge-26.8.3\"\n\
                            config.linkerd.io/proxy-enable-native-sidecar=\"false\"\n\
                            config.alpha.linkerd.io/proxy-enable-native-sidecar=\"true\"";
        assert!(!read(stable_false).seen[1].native, "2.20 reads the stable key first");
        let dapr = read("dapr.io/enable-native-sidecar=\"yes\"");
        assert!(!dapr.seen[3].native, "Dapr writes no version: never proven");
        assert!(dapr.seen[3].unproven.is_some());
        assert!(
            read("dapr.io/enable-native-sidecar=\"nope\"").seen[3]
                .unproven
                .is_none()
        );
    }

    #[test]
    fn the_pods_annotations_move_linkerds_istios_and_vaults_ports() {
        let moved = read(
            "config.linkerd.io/admin-port=\"5191\"\nstatus.sidecar.istio.io/port=\"25020\"\n\
             vault.hashicorp.com/agent-cache-listener-port=\"8300\"",
        );
        let ports = |name| moved.of(name).map(|s| (s.ready_port, s.quit_port)).unwrap();
        assert_eq!(ports("linkerd"), (Some(5191), Some(5191)));
        assert_eq!(ports("istio"), (None, Some(25020)));
        assert_eq!(ports("vault"), (None, Some(8300)));
    }

    #[test]
    fn skips_values_of_any_shape_and_depth() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        for (status, native) in [
            (format!(r#"{{"a":{deep},"initContainers":["istio-proxy"]}}"#), true),
            (
                r#"{"a":{"b":[1,{"c":null}],"d":{}},"e":[],"initContainers":["x"]}"#.into(),
                false,
            ),
            (r#"{"a":true,"b":-1.5e3,"initContainers":null}"#.into(), false),
        ] {
            assert_eq!(
                json::string_array(&status, "initContainers").map(|v| v.contains(&"istio-proxy".to_string())),
                Ok(native),
                "{status:.80}"
            );
        }
        for bad in [
            format!(r#"{{"a":{}}}"#, "[".repeat(100_000)),
            r#"{"a":[1 2]}"#.into(),
            r#"{"a":{"b"}}"#.into(),
            r#"{"a":[}"#.into(),
        ] {
            assert!(json::string_array(&bad, "initContainers").is_err(), "{bad:.80}");
        }
    }
}
