//! A small client of the Kubernetes API server, for the webhook's events:
//! HTTPS/1.1 over the rustls and hyper the server already uses, one
//! keep-alive connection, a bearer token, nothing else.
//!
//! Where the API server is and how to trust it, as client-go's
//! `rest.InClusterConfig` (client-go v0.36.3, `rest/config.go`) finds them:
//! `https://` + `KUBERNETES_SERVICE_HOST`:`KUBERNETES_SERVICE_PORT`, the
//! ServiceAccount's `token` and `ca.crt` under
//! `/var/run/secrets/kubernetes.io/serviceaccount/`; `--api-server`,
//! `--api-token` and `--api-ca` say otherwise.
//!
//! Races and waits it guards against:
//! - a projected token rotates (the kubelet rewrites it long before it
//!   expires): the file is read again for every request, never cached;
//! - the cluster's CA bundle is updated: it is read again for every new
//!   connection, and a bundle that cannot be read keeps the previous one;
//! - an API server that accepts and never answers, or answers slowly:
//!   every request (connect, handshake, send and the whole answer) has one
//!   deadline, and a request that misses it closes its connection, so a
//!   late answer is never taken for the next request's;
//! - an answer of unbounded size: at most [`MAX_REPLY`] bytes are read.

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HOST, USER_AGENT};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio_rustls::TlsConnector;

/// The largest answer read: an Event and its managed fields, or a Status.
pub const MAX_REPLY: usize = 256 * 1024;

/// The API server's address: `https://HOST[:PORT][/PREFIX]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// A DNS name, or an IP address without brackets.
    pub host: String,
    pub port: u16,
    /// A path the API is served under (a proxy's), or empty.
    pub prefix: String,
}

impl Endpoint {
    /// Parses `https://HOST[:PORT][/PREFIX]`; the error says what is accepted.
    pub fn parse(url: &str) -> Result<Endpoint, String> {
        let accepts = "an https:// URL such as https://10.96.0.1:443";
        let rest = url.strip_prefix("https://").ok_or(accepts)?;
        let (authority, prefix) = match rest.find('/') {
            Some(at) => (&rest[..at], rest[at..].trim_end_matches('/')),
            None => (rest, ""),
        };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (host, after) = v6.split_once(']').ok_or(accepts)?;
            (host, after.strip_prefix(':'))
        } else {
            match authority.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (authority, None),
            }
        };
        let port = match port {
            None => 443,
            Some(p) => p.parse::<u16>().ok().filter(|p| *p > 0).ok_or(accepts)?,
        };
        let bad_host = host.is_empty() || host.contains(['@', ' ', '?', '#']);
        if bad_host || (authority.starts_with('[') && host.parse::<IpAddr>().is_err()) {
            return Err(accepts.into());
        }
        Ok(Endpoint {
            host: host.to_string(),
            port,
            prefix: prefix.to_string(),
        })
    }

    /// In a pod: from the variables the kubelet sets. `Err`: why not.
    pub fn in_cluster(host: Option<String>, port: Option<String>) -> Result<Endpoint, String> {
        let (host, port) = match (host.filter(|h| !h.is_empty()), port.filter(|p| !p.is_empty())) {
            (Some(h), Some(p)) => (h, p),
            _ => {
                return Err(
                    "not in a cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set, and --api-server (MESHWRAP_API_SERVER) is not given"
                        .into(),
                );
            }
        };
        let joined = if host.contains(':') {
            format!("https://[{host}]:{port}")
        } else {
            format!("https://{host}:{port}")
        };
        Endpoint::parse(&joined).map_err(|_| {
            format!("KUBERNETES_SERVICE_HOST {host:?} and KUBERNETES_SERVICE_PORT {port:?} are no address")
        })
    }

    /// `HOST:PORT` as a Host header says it.
    fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "https://{}{}", self.authority(), self.prefix)
    }
}

/// `--api-server`'s endpoint, else the in-cluster variables' (an error
/// outside a cluster).
pub fn locate(api_server: Option<&Endpoint>) -> Result<Endpoint, String> {
    match api_server {
        Some(endpoint) => Ok(endpoint.clone()),
        None => Endpoint::in_cluster(
            std::env::var("KUBERNETES_SERVICE_HOST").ok(),
            std::env::var("KUBERNETES_SERVICE_PORT").ok(),
        ),
    }
}

/// How to reach and trust the API server.
#[derive(Clone, Debug)]
pub struct Access {
    pub endpoint: Endpoint,
    pub token: PathBuf,
    pub ca: PathBuf,
    /// One request's deadline, from connecting to the answer's last byte.
    pub timeout: Duration,
}

/// An answer: its status and its body.
pub struct Reply {
    pub status: u16,
    pub body: Bytes,
}

impl Reply {
    /// The `message` of a Kubernetes Status body, or the body's start.
    pub fn message(&self) -> String {
        let text = String::from_utf8_lossy(&self.body);
        serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(str::to_string))
            .unwrap_or_else(|| text.chars().take(200).collect())
    }
}

pub struct Client {
    access: Access,
    server_name: ServerName<'static>,
    tls: Arc<rustls::ClientConfig>,
    /// The CA file's bytes the TLS configuration was built from.
    ca_bytes: Vec<u8>,
    connection: Option<(SendRequest<Full<Bytes>>, JoinHandle<()>)>,
}

/// The TLS configuration that trusts the CAs of this PEM bundle.
fn tls_config(pem: &[u8], path: &std::path::Path) -> Result<Arc<rustls::ClientConfig>, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| format!("{}: {e}", path.display()))?;
        roots
            .add(cert)
            .map_err(|e| format!("{}: a certificate rustls cannot use: {e}", path.display()))?;
    }
    if roots.is_empty() {
        return Err(format!("{}: holds no PEM certificate", path.display()));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

impl Client {
    /// Reads the CA bundle and the token once, to say now what is missing.
    pub fn new(access: Access) -> Result<Client, String> {
        let ca_bytes = std::fs::read(&access.ca).map_err(|e| format!("{}: {e}", access.ca.display()))?;
        let tls = tls_config(&ca_bytes, &access.ca)?;
        read_token(&access.token)?;
        let server_name =
            ServerName::try_from(access.endpoint.host.clone()).map_err(|e| format!("{}: {e}", access.endpoint))?;
        Ok(Client {
            access,
            server_name,
            tls,
            ca_bytes,
            connection: None,
        })
    }

    pub fn timeout(&self) -> Duration {
        self.access.timeout
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.access.endpoint
    }

    /// One request, within the deadline; `Err`: no answer, and why.
    pub async fn send(
        &mut self,
        method: Method,
        path: &str,
        content_type: &str,
        body: Vec<u8>,
    ) -> Result<Reply, String> {
        let timeout = self.access.timeout;
        let reply = match tokio::time::timeout(timeout, self.exchange(method, path, content_type, body)).await {
            Ok(reply) => reply,
            Err(_) => Err(format!("no answer within {timeout:?}")),
        };
        // A connection that failed or timed out mid-exchange is not reused.
        if reply.is_err() {
            self.close();
        }
        reply
    }

    fn close(&mut self) {
        if let Some((_, task)) = self.connection.take() {
            task.abort();
        }
    }

    async fn exchange(
        &mut self,
        method: Method,
        path: &str,
        content_type: &str,
        body: Vec<u8>,
    ) -> Result<Reply, String> {
        let token = read_token(&self.access.token)?;
        let uri = format!("{}{path}", self.access.endpoint.prefix);
        let request = Request::builder()
            .method(method)
            .uri(uri)
            .header(HOST, self.access.endpoint.authority())
            .header(AUTHORIZATION, format!("Bearer {token}"))
            .header(CONTENT_TYPE, content_type)
            .header(ACCEPT, "application/json")
            .header(USER_AGENT, concat!("kubectl-meshwrap/", env!("CARGO_PKG_VERSION")))
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| format!("the request: {e}"))?;
        let sender = self.connected().await?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| format!("{}: {e}", self.access.endpoint))?;
        let status = response.status().as_u16();
        let body = Limited::new(response.into_body(), MAX_REPLY)
            .collect()
            .await
            .map_err(|e| format!("{}: the answer: {e}", self.access.endpoint))?
            .to_bytes();
        Ok(Reply { status, body })
    }

    /// The open connection, or a new one.
    async fn connected(&mut self) -> Result<&mut SendRequest<Full<Bytes>>, String> {
        let usable = match &mut self.connection {
            Some((sender, _)) => sender.ready().await.is_ok(),
            None => false,
        };
        if !usable {
            self.close();
            let opened = self.open().await?;
            self.connection = Some(opened);
        }
        match &mut self.connection {
            Some((sender, _)) => Ok(sender),
            None => Err("no connection".into()),
        }
    }

    async fn open(&mut self) -> Result<(SendRequest<Full<Bytes>>, JoinHandle<()>), String> {
        self.reload_ca();
        let endpoint = &self.access.endpoint;
        let tcp = TcpStream::connect((endpoint.host.as_str(), endpoint.port))
            .await
            .map_err(|e| format!("{endpoint}: {e}"))?;
        let _ = tcp.set_nodelay(true);
        let tls = TlsConnector::from(self.tls.clone())
            .connect(self.server_name.clone(), tcp)
            .await
            .map_err(|e| format!("{endpoint}: TLS: {e}"))?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| format!("{endpoint}: {e}"))?;
        let task = tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok((sender, task))
    }

    /// The CA bundle again, if it changed and can be used.
    fn reload_ca(&mut self) {
        let Ok(bytes) = std::fs::read(&self.access.ca) else {
            return;
        };
        if bytes != self.ca_bytes
            && let Ok(tls) = tls_config(&bytes, &self.access.ca)
        {
            self.tls = tls;
            self.ca_bytes = bytes;
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.close();
    }
}

/// The bearer token, as the file holds it now.
fn read_token(path: &std::path::Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("the token {}: {e}", path.display()))?;
    let token = text.trim();
    if token.is_empty() || token.contains(['\r', '\n']) {
        return Err(format!("the token {}: empty or more than one line", path.display()));
    }
    Ok(token.to_string())
}

#[cfg(test)]
mod tests {
    use super::Endpoint;

    #[test]
    fn urls_and_the_in_cluster_variables() {
        let e = Endpoint::parse("https://10.96.0.1:6443").unwrap();
        assert_eq!((e.host.as_str(), e.port, e.prefix.as_str()), ("10.96.0.1", 6443, ""));
        let e = Endpoint::parse("https://kubernetes.default.svc/").unwrap();
        assert_eq!((e.host.as_str(), e.port), ("kubernetes.default.svc", 443));
        let e = Endpoint::parse("https://[fd00::1]:443/proxy/k8s/").unwrap();
        assert_eq!((e.host.as_str(), e.prefix.as_str()), ("fd00::1", "/proxy/k8s"));
        assert_eq!(e.to_string(), "https://[fd00::1]:443/proxy/k8s");
        for bad in [
            "http://10.0.0.1",
            "10.0.0.1:443",
            "https://",
            "https://h:0",
            "https://h:x",
            "https://[nope]:1",
            "https://u@h",
        ] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
        let e = Endpoint::in_cluster(Some("fd00::1".into()), Some("443".into())).unwrap();
        assert_eq!(e.host, "fd00::1");
        assert!(Endpoint::in_cluster(None, Some("443".into())).is_err());
        assert!(Endpoint::in_cluster(Some("10.0.0.1".into()), Some(String::new())).is_err());
    }
}
