//! A stand-in Kubernetes API server for the webhook's events: HTTPS with a
//! test CA on loopback, a token file and a CA file for the webhook's
//! `--api-token` and `--api-ca`, and a record of every request it got.
//!
//! It answers as told: at once (201 to a create, 200 to a patch of an event
//! it created, 404 to one it did not), slowly, with a status, or not at
//! all (the connection is held open, unanswered, until the stand-in is
//! dropped). A request is recorded before it is answered, so "the webhook
//! sent it" is a readiness marker a test can wait for.
//!
//! A read of a Namespace (`GET /api/v1/namespaces/NAME`, the webhook's
//! `namespaces`) is recorded apart, so the events' tests count events
//! only, and answered by its own mode: by default the Namespace with the
//! labels and annotations [`StandIn::set_namespace`] gave it (none if not
//! given), as the API server answers for a namespace that exists.

#![allow(dead_code)]

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{Value, json};

use super::https::{Ca, read_message, temp_dir};

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Mode {
    /// As the API server does.
    Answer,
    /// The same, after this long.
    Slow(Duration),
    /// Never: the request is read and the connection held.
    Hang,
    /// This status and a Kubernetes Status body.
    Status(u16),
}

#[derive(Clone, Debug)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    /// Lower-case names.
    pub headers: Vec<(String, String)>,
    pub body: Value,
    /// The status it was answered with (0: not answered).
    pub status: u16,
    /// When it had been read whole.
    pub at: Instant,
    /// When its answer had been written (`at` until then).
    pub answered_at: Instant,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

struct Shared {
    mode: Mutex<Mode>,
    requests: Mutex<Vec<Recorded>>,
    /// The mode Namespace reads are answered in.
    namespace_mode: Mutex<Mode>,
    /// The Namespace reads, apart from `requests`.
    namespace_reads: Mutex<Vec<Recorded>>,
    /// name → (labels, annotations).
    namespaces: Mutex<std::collections::HashMap<String, (Value, Value)>>,
    changed: Condvar,
    /// Names of the events created, for the answer to a PATCH.
    created: Mutex<HashSet<String>>,
    /// Connections whose first request was an event's, and a Namespace
    /// read's (one that sent none is in neither).
    connections: AtomicUsize,
    namespace_connections: AtomicUsize,
    closing: Mutex<bool>,
    closed: Condvar,
}

pub struct StandIn {
    pub port: u16,
    pub dir: PathBuf,
    pub token: PathBuf,
    pub ca_file: PathBuf,
    shared: Arc<Shared>,
}

impl StandIn {
    pub fn start(name: &str, mode: Mode) -> StandIn {
        let ca = Ca::new(&format!("{name} API server CA"));
        let (cert, key) = ca.serving(7);
        let dir = temp_dir(&format!("apiserver-{name}"));
        let (token, ca_file) = (dir.join("token"), dir.join("ca.crt"));
        std::fs::write(&token, "token-one\n").unwrap();
        std::fs::write(&ca_file, &ca.pem).unwrap();
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert.as_bytes())
            .map(Result::unwrap)
            .collect();
        let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap();
        let config = Arc::new(config);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared {
            mode: Mutex::new(mode),
            requests: Mutex::new(Vec::new()),
            namespace_mode: Mutex::new(Mode::Answer),
            namespace_reads: Mutex::new(Vec::new()),
            namespaces: Mutex::new(std::collections::HashMap::new()),
            changed: Condvar::new(),
            created: Mutex::new(HashSet::new()),
            connections: AtomicUsize::new(0),
            namespace_connections: AtomicUsize::new(0),
            closing: Mutex::new(false),
            closed: Condvar::new(),
        });
        let accepting = shared.clone();
        std::thread::spawn(move || {
            for tcp in listener.incoming() {
                let Ok(tcp) = tcp else { break };
                if *accepting.closing.lock().unwrap() {
                    break;
                }
                let (shared, config) = (accepting.clone(), config.clone());
                std::thread::spawn(move || serve(tcp, config, &shared));
            }
        });
        StandIn {
            port,
            dir,
            token,
            ca_file,
            shared,
        }
    }

    /// The webhook's flags that point it here.
    pub fn flags(&self) -> Vec<String> {
        vec![
            "--api-server".into(),
            format!("https://127.0.0.1:{}", self.port),
            "--api-token".into(),
            self.token.display().to_string(),
            "--api-ca".into(),
            self.ca_file.display().to_string(),
        ]
    }

    pub fn set_mode(&self, mode: Mode) {
        *self.shared.mode.lock().unwrap() = mode;
    }

    /// How Namespace reads are answered from now on.
    pub fn set_namespace_mode(&self, mode: Mode) {
        *self.shared.namespace_mode.lock().unwrap() = mode;
    }

    /// The Namespace `name` has these labels and annotations.
    pub fn set_namespace(&self, name: &str, labels: Value, annotations: Value) {
        let mut namespaces = self.shared.namespaces.lock().unwrap();
        namespaces.insert(name.to_string(), (labels, annotations));
    }

    /// The Namespace reads it got, in order.
    pub fn namespace_reads(&self) -> Vec<Recorded> {
        self.shared.namespace_reads.lock().unwrap().clone()
    }

    /// Forgets the events it created: a PATCH of one is then a 404, as
    /// after an event expired.
    pub fn forget_events(&self) {
        self.shared.created.lock().unwrap().clear();
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// The connections the events came on (a Namespace read's are not).
    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::SeqCst)
    }

    /// The connections the Namespace reads came on.
    pub fn namespace_connections(&self) -> usize {
        self.shared.namespace_connections.load(Ordering::SeqCst)
    }

    /// Waits until it has got `n` requests (and answered them, unless it
    /// hangs), within 20 s; they all.
    pub fn wait_requests(&self, n: usize) -> Vec<Recorded> {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut requests = self.shared.requests.lock().unwrap();
        loop {
            let answered = requests.iter().filter(|r| r.status != 0).count();
            let hanging = *self.shared.mode.lock().unwrap() == Mode::Hang;
            if requests.len() >= n && (hanging || answered >= n) {
                return requests.clone();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "the stand-in API server got {} requests, not {n}: {:#?}",
                requests.len(),
                *requests
            );
            requests = self.shared.changed.wait_timeout(requests, left).unwrap().0;
        }
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        *self.shared.closing.lock().unwrap() = true;
        self.shared.closed.notify_all();
        // Wakes the accept loop so it sees `closing`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A port nothing listens on: an API server that is down.
pub fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

fn serve(tcp: TcpStream, config: Arc<rustls::ServerConfig>, shared: &Shared) {
    let connection = rustls::ServerConnection::new(config).unwrap();
    let mut stream = rustls::StreamOwned::new(connection, tcp);
    let mut first = true;
    while let Some((method, path, headers, body)) = read_request(&mut stream) {
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let read = method == "GET" && path.starts_with("/api/v1/namespaces/");
        if std::mem::take(&mut first) {
            let count = if read {
                &shared.namespace_connections
            } else {
                &shared.connections
            };
            count.fetch_add(1, Ordering::SeqCst);
        }
        let record = if read {
            &shared.namespace_reads
        } else {
            &shared.requests
        };
        let index = {
            let mut requests = record.lock().unwrap();
            requests.push(Recorded {
                method: method.clone(),
                path: path.clone(),
                headers,
                body: body.clone(),
                status: 0,
                at: Instant::now(),
                answered_at: Instant::now(),
            });
            shared.changed.notify_all();
            requests.len() - 1
        };
        let mode = *if read { &shared.namespace_mode } else { &shared.mode }.lock().unwrap();
        match mode {
            Mode::Hang => {
                let mut closing = shared.closing.lock().unwrap();
                while !*closing {
                    closing = shared.closed.wait(closing).unwrap();
                }
                return;
            }
            Mode::Slow(delay) => std::thread::sleep(delay),
            _ => {}
        }
        let (status, answer) = match mode {
            Mode::Status(code) => (
                code,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                       "message": format!("the stand-in says {code}"), "code": code}),
            ),
            _ if read => namespace(shared, &path),
            _ => answered(shared, &method, &path, body),
        };
        let text = answer.to_string();
        let head = format!(
            "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            text.len()
        );
        if stream.write_all(head.as_bytes()).is_err() || stream.write_all(text.as_bytes()).is_err() {
            return;
        }
        let _ = stream.flush();
        {
            let mut requests = record.lock().unwrap();
            requests[index].status = status;
            requests[index].answered_at = Instant::now();
        }
        shared.changed.notify_all();
    }
}

/// The Namespace a read asks for, with what `set_namespace` gave it.
fn namespace(shared: &Shared, path: &str) -> (u16, Value) {
    let name = path.trim_start_matches("/api/v1/namespaces/");
    let namespaces = shared.namespaces.lock().unwrap();
    let (labels, annotations) = namespaces.get(name).cloned().unwrap_or((json!({}), json!({})));
    let metadata = json!({"name": name, "labels": labels, "annotations": annotations});
    (
        200,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}),
    )
}

/// What the API server would answer a create or a patch of an event.
fn answered(shared: &Shared, method: &str, path: &str, mut body: Value) -> (u16, Value) {
    let mut created = shared.created.lock().unwrap();
    match method {
        "POST" => {
            let name = body["metadata"]["name"].as_str().unwrap_or("").to_string();
            if !created.insert(name) {
                return (409, json!({"kind": "Status", "code": 409, "message": "already exists"}));
            }
            body["metadata"]["resourceVersion"] = json!("1");
            (201, body)
        }
        "PATCH" => {
            let name = path.rsplit('/').next().unwrap_or("");
            if created.contains(name) {
                (200, body)
            } else {
                (
                    404,
                    json!({"kind": "Status", "code": 404, "message": format!("events.events.k8s.io \"{name}\" not found")}),
                )
            }
        }
        _ => (405, json!({"kind": "Status", "code": 405})),
    }
}

type Request = (String, String, Vec<(String, String)>, Vec<u8>);

fn read_request(stream: &mut impl Read) -> Option<Request> {
    let (first, headers, body) = read_message(stream).ok()?;
    let mut first = first.split(' ');
    let (method, path) = (first.next()?.to_string(), first.next()?.to_string());
    Some((method, path, headers, body))
}
