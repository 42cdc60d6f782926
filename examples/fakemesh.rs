//! `fakemesh`: the processes of a simulated pod, for the end-to-end tests in
//! tests/pod.rs, which build the pod itself from network namespaces, veth
//! links and istio-init's iptables rules. Each mode prints one line per event.
//!
//! - `fakemesh sidecar UID DELAY_MS`: a fake Istio proxy. It drops to UID
//!   (Istio's proxy runs as 1337, which the redirect rule exempts, so its own
//!   connections are not looped back to it), waits DELAY_MS (the proxy
//!   container is still being pulled and started: connections are refused),
//!   then listens on 15001 and forwards every redirected connection to its
//!   original destination (`SO_ORIGINAL_DST`), answers `GET :15021/healthz/ready`
//!   with 200, and answers `POST :15020/quitquitquit` with `200 OK` and exits 0.
//!   `fakemesh sidecar UID DELAY_MS QUIT_MS`: a sidecar that takes QUIT_MS to
//!   answer a quit and exit (a proxy draining its connections); every quit it
//!   receives meanwhile is printed.
//! - `fakemesh proxy KIND DELAY_MS ANNOTATIONS`: another mesh's proxy on its
//!   real ports, as its injector configured it from the pod's annotations
//!   file: `linkerd` (GET :4191/ready; POST :4191/shutdown, answered 404
//!   unless `config.linkerd.io/proxy-admin-shutdown` is `enabled`, as Linkerd
//!   2.16 and later), `vault` (POST :8200/agent/v1/quit, listening only with
//!   `vault.hashicorp.com/agent-enable-quit: "true"`) or `dapr` (GET
//!   :3500/v1.0/healthz/outbound, POST :3500/v1.0/shutdown). A quit it takes
//!   exits 0.
//! - `fakemesh cloudsql DELAY_MS ARGS...`: a Cloud SQL Auth Proxy v2 given
//!   ARGS, read as the proxy reads them: `--http-port`, `--http-address`,
//!   `--admin-port`, `--health-check`, `--quitquitquit` (`--flag=value` or
//!   `--flag value`), each flag over its `CSQL_PROXY_*` variable. With
//!   `--health-check` it answers `GET /startup` on the HTTP address and port;
//!   with `--quitquitquit`, `GET` or `POST /quitquitquit` on localhost's admin
//!   port, which it answers and exits 0. Nothing else listens.
//! - `fakemesh serve ADDR BYTES`: the remote host: answers every request with BYTES bytes.
//! - `fakemesh fetch URL CODE`: the app: downloads URL and exits CODE, or 1 if
//!   the download failed.
//! - `fakemesh container COMMAND...`: the container runtime: runs COMMAND as
//!   PID 1 of new PID and mount namespaces with their own /proc, and exits
//!   with the code the kubelet reports for the container (128+N when signal N
//!   killed it). util-linux's `unshare --fork` cannot report a signal death
//!   (2.38 exits 1 with "sigprocmask unblock failed"). COMMAND is killed if
//!   the runtime dies.
//! - `fakemesh worker LISTEN PEER_URL`: a TFJob worker: serves its shard on
//!   LISTEN, fetches its peer's (retrying while the peer is not up, for up to
//!   10 s), and exits 0 once it has both reached its peer and been reached.

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

#[path = "common/http.rs"]
mod http;
use http::{read_request_line as read_head, respond};

/// The body of a GET, or why there is none.
fn fetch(url: &str) -> std::io::Result<Vec<u8>> {
    http::get(url).map(|(_, body)| body)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["sidecar", uid, delay] => sidecar(
            uid.parse().unwrap(),
            Duration::from_millis(delay.parse().unwrap()),
            Duration::ZERO,
        ),
        ["sidecar", uid, delay, quit] => sidecar(
            uid.parse().unwrap(),
            Duration::from_millis(delay.parse().unwrap()),
            Duration::from_millis(quit.parse().unwrap()),
        ),
        ["proxy", kind, delay, annotations] => proxy(kind, Duration::from_millis(delay.parse().unwrap()), annotations),
        ["cloudsql", delay, args @ ..] => cloudsql(Duration::from_millis(delay.parse().unwrap()), args),
        ["serve", addr, bytes] => serve(addr, bytes.parse().unwrap()),
        ["fetch", url, code] => std::process::exit(fetch_main(url, code.parse().unwrap())),
        ["worker", listen, peer] => std::process::exit(worker(listen, peer)),
        ["container", command @ ..] if !command.is_empty() => std::process::exit(container(command)),
        _ => {
            eprintln!(
                "usage: fakemesh sidecar UID DELAY_MS [QUIT_MS] | proxy KIND DELAY_MS ANNOTATIONS | cloudsql DELAY_MS ARGS... | serve ADDR BYTES | fetch URL CODE | worker LISTEN PEER_URL | container COMMAND..."
            );
            std::process::exit(2);
        }
    }
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn sidecar(uid: u32, delay: Duration, quit_takes: Duration) {
    // SAFETY: setgid/setuid take plain integers; the group goes first, while still root.
    unsafe {
        assert_eq!(libc::setgid(uid), 0, "setgid");
        assert_eq!(libc::setuid(uid), 0, "setuid");
    }
    say("sidecar: container started, not listening yet");
    thread::sleep(delay);
    let outbound = TcpListener::bind("0.0.0.0:15001").expect("bind 15001");
    let ready = TcpListener::bind("0.0.0.0:15021").expect("bind 15021");
    let admin = TcpListener::bind("127.0.0.1:15020").expect("bind 15020");
    say("sidecar: up");
    thread::spawn(move || {
        for conn in outbound.incoming().flatten() {
            thread::spawn(move || forward(conn));
        }
    });
    thread::spawn(move || {
        let mut first = true;
        for mut conn in ready.incoming().flatten() {
            read_head(&mut conn);
            respond(&mut conn, "200 OK", b"");
            if std::mem::take(&mut first) {
                say("sidecar: answered ready");
            }
        }
    });
    for mut conn in admin.incoming().flatten() {
        let line = read_head(&mut conn);
        if line.starts_with("POST /quitquitquit ") && quit_takes.is_zero() {
            respond(&mut conn, "200 OK", b"OK");
            say("sidecar: quit received, exiting");
            std::process::exit(0);
        }
        if line.starts_with("POST /quitquitquit ") {
            say("sidecar: quit received, draining");
            thread::spawn(move || {
                thread::sleep(quit_takes);
                respond(&mut conn, "200 OK", b"OK");
                say("sidecar: drained, exiting");
                std::process::exit(0);
            });
            continue;
        }
        respond(&mut conn, "405 Method Not Allowed", b"");
    }
}

/// A Linkerd, Vault or Dapr proxy: its readiness and quit endpoints, on
/// when the pod's annotations turned them on.
fn proxy(kind: &str, delay: Duration, annotations: &str) {
    let text = std::fs::read_to_string(annotations).unwrap_or_default();
    let has = |line: &str| text.lines().any(|l| l == line);
    let (port, ready, quit, quit_on) = match kind {
        "linkerd" => (
            4191,
            "/ready",
            "/shutdown",
            has(r#"config.linkerd.io/proxy-admin-shutdown="enabled""#),
        ),
        "vault" => (
            8200,
            "",
            "/agent/v1/quit",
            has(r#"vault.hashicorp.com/agent-enable-quit="true""#),
        ),
        "dapr" => (3500, "/v1.0/healthz/outbound", "/v1.0/shutdown", true),
        _ => panic!("fakemesh proxy: unknown kind {kind}"),
    };
    say(&format!("{kind}: container started, not listening yet"));
    thread::sleep(delay);
    // Vault's agent has no listener at all unless its quit (or cache) is on.
    if kind == "vault" && !quit_on {
        say(&format!("{kind}: up, no listener (agent-enable-quit is off)"));
        loop {
            thread::sleep(Duration::from_secs(3600));
        }
    }
    let listener = TcpListener::bind(("127.0.0.1", port)).expect("bind the proxy's port");
    say(&format!("{kind}: up"));
    for mut conn in listener.incoming().flatten() {
        let line = read_head(&mut conn);
        if !ready.is_empty() && line.starts_with(&format!("GET {ready} ")) {
            respond(&mut conn, "200 OK", b"ready");
        } else if line.starts_with(&format!("POST {quit} ")) && quit_on {
            respond(&mut conn, "200 OK", b"");
            say(&format!("{kind}: quit received, exiting"));
            std::process::exit(0);
        } else if line.starts_with(&format!("POST {quit} ")) {
            respond(&mut conn, "404 Not Found", b"shutdown endpoint is not enabled");
            say(&format!("{kind}: quit refused: its endpoint is off"));
        } else {
            respond(&mut conn, "404 Not Found", b"");
        }
    }
}

/// One setting of the Cloud SQL proxy: its flag (the last given), else its
/// `CSQL_PROXY_` variable, else the default.
fn cloudsql_setting(args: &[&str], flag: &str, boolean: bool, default: &str) -> String {
    let mut found = None;
    let mut words = args.iter();
    while let Some(word) = words.next() {
        if let Some(value) = word.strip_prefix(&format!("--{flag}=")) {
            found = Some(value.to_string());
        } else if *word == format!("--{flag}") {
            found = if boolean {
                Some("true".to_string())
            } else {
                words.next().map(|w| w.to_string())
            };
        }
    }
    let variable = format!("CSQL_PROXY_{}", flag.to_uppercase().replace('-', "_"));
    found
        .or_else(|| std::env::var(variable).ok())
        .unwrap_or_else(|| default.to_string())
}

/// The Cloud SQL Auth Proxy's readiness and quit servers, where its flags put them.
fn cloudsql(delay: Duration, args: &[&str]) {
    let on = |flag| cloudsql_setting(args, flag, true, "false") == "true";
    let (health, quit) = (on("health-check"), on("quitquitquit"));
    let http_port = cloudsql_setting(args, "http-port", false, "9090");
    let address = match cloudsql_setting(args, "http-address", false, "localhost").as_str() {
        "localhost" => "127.0.0.1".to_string(),
        other => other.to_string(),
    };
    let admin_port = cloudsql_setting(args, "admin-port", false, "9091");
    say("cloudsql: container started, not listening yet");
    thread::sleep(delay);
    if health {
        let http = TcpListener::bind(format!("{address}:{http_port}")).expect("bind the http port");
        thread::spawn(move || {
            for mut conn in http.incoming().flatten() {
                let line = read_head(&mut conn);
                let status = if line.starts_with("GET /startup ") {
                    "200 OK"
                } else {
                    "404 Not Found"
                };
                respond(&mut conn, status, b"");
            }
        });
    }
    let admin = quit.then(|| TcpListener::bind(format!("127.0.0.1:{admin_port}")).expect("bind the admin port"));
    say(&format!(
        "cloudsql: up (startup on {address}:{http_port}: {health}, quitquitquit on :{admin_port}: {quit})"
    ));
    let Some(admin) = admin else {
        loop {
            thread::sleep(Duration::from_secs(3600));
        }
    };
    for mut conn in admin.incoming().flatten() {
        let line = read_head(&mut conn);
        if line.starts_with("GET /quitquitquit ") || line.starts_with("POST /quitquitquit ") {
            respond(&mut conn, "200 OK", b"");
            say(&format!("cloudsql: quit received on :{admin_port}, exiting"));
            std::process::exit(0);
        }
        respond(&mut conn, "404 Not Found", b"");
    }
}

/// Forwards one redirected connection to where the app meant it to go.
fn forward(inbound: TcpStream) {
    let Some(destination) = original_destination(&inbound) else {
        say("sidecar: no original destination");
        return;
    };
    say(&format!("sidecar: forwarding to {destination}"));
    let Ok(outbound) = TcpStream::connect_timeout(&destination, Duration::from_secs(2)) else {
        say(&format!("sidecar: {destination} unreachable"));
        return;
    };
    let (mut a, mut b) = (inbound.try_clone().unwrap(), outbound.try_clone().unwrap());
    let upstream = thread::spawn(move || {
        let _ = std::io::copy(&mut a, &mut b);
        let _ = b.shutdown(std::net::Shutdown::Write);
    });
    let (mut a, mut b) = (outbound, inbound);
    let _ = std::io::copy(&mut a, &mut b);
    let _ = b.shutdown(std::net::Shutdown::Write);
    let _ = upstream.join();
}

/// The address a connection had before iptables redirected it here.
fn original_destination(stream: &TcpStream) -> Option<SocketAddr> {
    // SAFETY: sockaddr_in is plain data; getsockopt writes at most `len` bytes into it.
    unsafe {
        let mut addr: libc::sockaddr_in = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        let result = libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_IP,
            libc::SO_ORIGINAL_DST,
            (&mut addr as *mut libc::sockaddr_in).cast(),
            &mut len,
        );
        (result == 0).then(|| {
            let ip = Ipv4Addr::from(u32::from_be(addr.sin_addr.s_addr));
            SocketAddr::V4(SocketAddrV4::new(ip, u16::from_be(addr.sin_port)))
        })
    }
}

fn serve(addr: &str, bytes: usize) {
    let listener = TcpListener::bind(addr).expect("bind");
    say("remote: serving");
    let body = vec![b'x'; bytes];
    for mut conn in listener.incoming().flatten() {
        read_head(&mut conn);
        respond(&mut conn, "200 OK", &body);
        say(&format!("remote: served {bytes} bytes"));
    }
}

fn fetch_main(url: &str, code: i32) -> i32 {
    say("app: started");
    match fetch(url) {
        Ok(body) => {
            say(&format!("app: fetched {} bytes", body.len()));
            code
        }
        Err(e) => {
            say(&format!("app: fetch failed: {e}"));
            1
        }
    }
}

fn worker(listen: &str, peer: &str) -> i32 {
    let listener = TcpListener::bind(listen).expect("bind");
    let reached = Arc::new(AtomicBool::new(false));
    let served = reached.clone();
    thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            read_head(&mut conn);
            respond(&mut conn, "200 OK", b"shard");
            served.store(true, Ordering::SeqCst);
        }
    });
    say("worker: listening");
    let deadline = Instant::now() + Duration::from_secs(10);
    let got = loop {
        match fetch(peer) {
            Ok(body) => break body,
            Err(_) if Instant::now() < deadline => thread::sleep(Duration::from_millis(50)),
            Err(e) => {
                say(&format!("worker: peer unreachable: {e}"));
                return 1;
            }
        }
    };
    say(&format!("worker: reached peer ({} bytes)", got.len()));
    while !reached.load(Ordering::SeqCst) {
        if Instant::now() > deadline {
            say("worker: never reached by its peer");
            return 1;
        }
        thread::sleep(Duration::from_millis(20));
    }
    say("worker: done");
    0
}

fn container(command: &[&str]) -> i32 {
    use std::os::unix::process::CommandExt;
    // SAFETY: plain syscalls; this process has one thread, so the child may
    // run any code between fork and exec; every pointer is a live C string.
    unsafe {
        assert_eq!(libc::unshare(libc::CLONE_NEWPID | libc::CLONE_NEWNS), 0, "unshare");
        // The new /proc stays inside the new mount namespace.
        let none = c"none".as_ptr();
        let flags = libc::MS_REC | libc::MS_PRIVATE;
        assert_eq!(
            libc::mount(none, c"/".as_ptr(), std::ptr::null(), flags, std::ptr::null()),
            0
        );
        match libc::fork() {
            0 => {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                let proc_ = c"proc".as_ptr();
                let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
                libc::mount(proc_, c"/proc".as_ptr(), proc_, flags, std::ptr::null());
                let error = std::process::Command::new(command[0]).args(&command[1..]).exec();
                eprintln!("container: cannot start {}: {error}", command[0]);
                libc::_exit(127);
            }
            -1 => panic!("fork failed"),
            pid => {
                let mut status = 0;
                while libc::waitpid(pid, &mut status, 0) < 0 {}
                if libc::WIFEXITED(status) {
                    libc::WEXITSTATUS(status)
                } else {
                    128 + libc::WTERMSIG(status)
                }
            }
        }
    }
}
