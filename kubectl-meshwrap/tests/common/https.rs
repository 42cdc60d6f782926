//! The real webhook over real TLS on loopback: a test CA and serving
//! certificates made with rcgen, the binary started on port 0 (its
//! "listening" log line is the readiness marker and names the port), and a
//! small blocking HTTPS/1.1 client that keeps its connection open.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::Value;

pub struct Ca {
    pub pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl Ca {
    pub fn new(name: &str) -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
        let cert = params.self_signed(&key).unwrap();
        Ca {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A serving certificate for localhost: (certificate PEM, key PEM).
    pub fn serving(&self, serial: u64) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, format!("serving {serial}"));
        params.serial_number = Some(serial.into());
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

/// Writes `content` to `path` atomically, as the kubelet swaps a Secret.
pub fn replace(path: &Path, content: &str) {
    let temporary = path.with_extension("new");
    std::fs::write(&temporary, content).unwrap();
    std::fs::rename(&temporary, path).unwrap();
}

pub struct Webhook {
    pub child: Child,
    pub port: u16,
    pub dir: PathBuf,
    /// Every stderr line so far (JSON log lines).
    pub log: Arc<Mutex<Vec<String>>>,
    lines: mpsc::Receiver<String>,
}

pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("meshwrap-webhook-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

impl Webhook {
    /// Starts `kubectl-meshwrap webhook` with a certificate from `ca` and
    /// `extra` flags, and waits for its "listening" line.
    pub fn start(name: &str, ca: &Ca, extra: &[&str]) -> Webhook {
        let (cert, key) = ca.serving(1);
        Self::start_with(name, &cert, &key, extra)
    }

    /// Starts it with this certificate and key (PEM).
    pub fn start_with(name: &str, cert: &str, key: &str, extra: &[&str]) -> Webhook {
        Self::start_env(name, cert, key, extra, &[])
    }

    /// Starts it with these variables set too.
    pub fn start_env(name: &str, cert: &str, key: &str, extra: &[&str], env: &[(&str, &str)]) -> Webhook {
        let dir = temp_dir(name);
        std::fs::write(dir.join("tls.crt"), cert).unwrap();
        std::fs::write(dir.join("tls.key"), key).unwrap();
        let mut cmd = Command::new(super::bin());
        cmd.arg("webhook")
            .arg("--tls-cert")
            .arg(dir.join("tls.crt"))
            .arg("--tls-key")
            .arg(dir.join("tls.key"))
            .args(["--listen", "127.0.0.1:0", "--image", super::IMAGE])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for var in [
            "MESHWRAP_IMAGE",
            "MESHWRAP_SIDECAR",
            "MESHWRAP_TIMEOUT",
            "MESHWRAP_QUIT_POLICY",
            "MESHWRAP_NAMESPACE",
            "MESHWRAP_EVENTS",
            "MESHWRAP_API_SERVER",
            "MESHWRAP_API_TOKEN",
            "MESHWRAP_API_CA",
            // Never the real cluster's API server, when the tests run in a pod.
            "KUBERNETES_SERVICE_HOST",
            "KUBERNETES_SERVICE_PORT",
        ] {
            cmd.env_remove(var);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        if !extra.contains(&"--shutdown-delay") {
            cmd.args(["--shutdown-delay", "0s"]);
        }
        let mut child = cmd.spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, lines) = mpsc::channel();
        let keep = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                keep.lock().unwrap().push(line.clone());
                let _ = tx.send(line);
            }
        });
        let mut webhook = Webhook {
            child,
            port: 0,
            dir,
            log,
            lines,
        };
        let listening = webhook.wait_for("listening");
        let address = listening["address"].as_str().unwrap().to_string();
        webhook.port = address.rsplit_once(':').unwrap().1.parse().unwrap();
        webhook
    }

    /// The next log line whose msg is `msg` (earlier lines are passed over),
    /// within 20 s.
    pub fn wait_for(&self, msg: &str) -> Value {
        loop {
            let line = self.lines.recv_timeout(Duration::from_secs(20)).unwrap_or_else(|_| {
                panic!(
                    "no \"{msg}\" log line within 20 s; log: {:#?}",
                    self.log.lock().unwrap()
                )
            });
            let value: Value =
                serde_json::from_str(&line).unwrap_or_else(|e| panic!("a log line that is not JSON ({e}): {line}"));
            if value["msg"] == msg {
                return value;
            }
        }
    }

    pub fn client(&self, ca: &Ca) -> Client {
        Client::connect(self.port, ca).unwrap()
    }

    /// A connection, or why the server would not complete one.
    pub fn client_result(&self, ca: &Ca) -> std::io::Result<Client> {
        Client::connect(self.port, ca)
    }

    pub fn log_lines(&self) -> Vec<Value> {
        self.log
            .lock()
            .unwrap()
            .iter()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on our own child's pid, which we have not reaped.
        unsafe {
            libc::kill(self.child.id() as i32, signal);
        }
    }

    /// Waits for the process to exit, within `within`.
    pub fn exit_code(&mut self, within: Duration) -> Option<i32> {
        let deadline = std::time::Instant::now() + within;
        while std::time::Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }
}

impl Drop for Webhook {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub fn client_config(ca_pem: &str) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    use rustls::pki_types::pem::PemObject;
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    // Every connection a full handshake, so it sees the current certificate.
    config.resumption = rustls::client::Resumption::disabled();
    Arc::new(config)
}

/// A TCP connection to the webhook on loopback from `source`, within `within`.
pub fn tcp_from(source: Ipv4Addr, port: u16, within: Duration) -> std::io::Result<TcpStream> {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    socket.bind(&SocketAddr::from((source, 0)).into())?;
    socket.connect_timeout(&SocketAddr::from(([127, 0, 0, 1], port)).into(), within)?;
    Ok(socket.into())
}

pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// One TLS connection; requests go one after the other on it (keep-alive).
pub struct Client {
    pub stream: rustls::StreamOwned<rustls::ClientConnection, TcpStream>,
}

impl Client {
    /// Reads `series` until it is `value` (the server's own count is the
    /// readiness marker), within 20 s.
    pub fn wait_metric(&mut self, series: &str, value: u64) {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let now = self.metric(series);
            if now == value {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{series} stayed at {now}, not {value}"
            );
        }
    }

    /// The value of the /metrics line that starts with `series `.
    pub fn metric(&mut self, series: &str) -> u64 {
        let text = self.get("/metrics").unwrap().text();
        let prefix = format!("{series} ");
        text.lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .unwrap_or_else(|| panic!("no {series} in:\n{text}"))
            .parse()
            .unwrap()
    }

    pub fn connect(port: u16, ca: &Ca) -> std::io::Result<Client> {
        Self::connect_with(port, client_config(&ca.pem))
    }

    pub fn connect_with(port: u16, config: Arc<rustls::ClientConfig>) -> std::io::Result<Client> {
        Self::connect_named(port, config, "localhost")
    }

    /// Connects to the webhook on loopback as if it were `name` (SNI and
    /// the name the certificate must carry).
    pub fn connect_named(port: u16, config: Arc<rustls::ClientConfig>, name: &str) -> std::io::Result<Client> {
        Self::connect_within(port, config, name, Duration::from_secs(20))
    }

    /// Connects with `within` as the bound on the TCP connect, on each read
    /// of the handshake, and on later reads (a load generator's dial).
    pub fn connect_within(
        port: u16,
        config: Arc<rustls::ClientConfig>,
        name: &str,
        within: Duration,
    ) -> std::io::Result<Client> {
        let tcp = TcpStream::connect_timeout(&std::net::SocketAddr::from(([127, 0, 0, 1], port)), within)?;
        Self::over(tcp, config, name, within)
    }

    /// Connects from `source`, a loopback address of its own (127.0.0.0/8
    /// is all local), as a client on another host would: the webhook
    /// counts its shares by source address.
    pub fn connect_from(
        source: Ipv4Addr,
        port: u16,
        config: Arc<rustls::ClientConfig>,
        within: Duration,
    ) -> std::io::Result<Client> {
        Self::over(tcp_from(source, port, within)?, config, "localhost", within)
    }

    /// The TLS handshake over `tcp`, each read bounded by `within`.
    pub fn over(
        tcp: TcpStream,
        config: Arc<rustls::ClientConfig>,
        name: &str,
        within: Duration,
    ) -> std::io::Result<Client> {
        tcp.set_read_timeout(Some(within))?;
        tcp.set_write_timeout(Some(within))?;
        tcp.set_nodelay(true)?;
        let connection = rustls::ClientConnection::new(config, ServerName::try_from(name.to_string()).unwrap())
            .map_err(std::io::Error::other)?;
        let mut stream = rustls::StreamOwned::new(connection, tcp);
        // Finish the handshake now, so a certificate the client refuses fails here.
        while stream.conn.is_handshaking() {
            stream.conn.complete_io(&mut stream.sock)?;
        }
        Ok(Client { stream })
    }

    /// The serving certificate this connection got.
    pub fn peer_serial_subject(&self) -> String {
        let certs = self.stream.conn.peer_certificates().unwrap();
        // The CN "serving N" is in the DER as plain bytes.
        let der = certs[0].as_ref();
        let at = der.windows(8).position(|w| w == b"serving ").unwrap();
        String::from_utf8_lossy(&der[at..at + 9]).into_owned()
    }

    pub fn send_raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes)?;
        self.stream.flush()
    }

    pub fn request(&mut self, method: &str, path: &str, content_type: &str, body: &[u8]) -> std::io::Result<Response> {
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n",
            body.len()
        );
        if !content_type.is_empty() {
            head.push_str(&format!("Content-Type: {content_type}\r\n"));
        }
        head.push_str("\r\n");
        let mut whole = head.into_bytes();
        whole.extend_from_slice(body);
        // A server that refuses early may close before the body is sent:
        // its answer is still there to read.
        let sent = self.send_raw(&whole);
        match self.read_response() {
            Err(e) => sent.and(Err(e)),
            answer => answer,
        }
    }

    pub fn post(&mut self, body: &[u8]) -> std::io::Result<Response> {
        self.request("POST", "/mutate", "application/json", body)
    }

    pub fn get(&mut self, path: &str) -> std::io::Result<Response> {
        self.request("GET", path, "", b"")
    }

    pub fn read_response(&mut self) -> std::io::Result<Response> {
        let (first, headers, body) = read_message(&mut self.stream)?;
        let status = first
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| std::io::Error::other(format!("a bad status line: {first}")))?;
        Ok(Response { status, headers, body })
    }
}

/// An HTTP message's headers, names lower-cased, in their order.
pub type Headers = Vec<(String, String)>;

/// One HTTP/1.1 message from `stream`: its first line, its headers (names
/// lower-cased) and the body its Content-Length announces. The head is read
/// a byte at a time, so nothing after the message is taken from the stream.
pub fn read_message(stream: &mut impl Read) -> std::io::Result<(String, Headers, Vec<u8>)> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte)? == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "closed before a whole message",
            ));
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let mut lines = head.split("\r\n");
    let first = lines.next().unwrap_or_default().to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    stream.read_exact(&mut body)?;
    Ok((first, headers, body))
}

/// Whether the server closes `client` within 20 s (a read that ends, or
/// fails otherwise than by timing out); false if it is still open then.
pub fn closed_by_server(client: &mut Client) -> bool {
    client
        .stream
        .sock
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut buffer = [0u8; 64];
    !matches!(
        client.stream.read(&mut buffer),
        Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)
    )
}
