//! The serving certificate, read from files and swapped when they change.
//!
//! cert-manager renews a certificate by rewriting the Secret, and the kubelet
//! swaps the mounted files (an atomic symlink flip, some time later). So the
//! files are polled: each new TLS handshake takes whichever certificate is
//! current, and a connection already open keeps the one it started with, so
//! no request in flight is dropped by a rotation.
//!
//! Races it guards against:
//! - a certificate and key written one after the other (a hand-made rotation,
//!   or a reader between the two writes): the pair is checked, and a pair
//!   that does not match keeps the previous certificate until the next poll
//!   finds a matching one;
//! - unreadable or half-written files: the same; the previous certificate
//!   stays, and the error is logged once per distinct content, not per poll.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

#[derive(Debug)]
pub struct Certificates {
    cert_path: PathBuf,
    key_path: PathBuf,
    provider: Arc<CryptoProvider>,
    current: RwLock<Arc<CertifiedKey>>,
    /// The files' bytes when last read, to act only on a change.
    last: Mutex<(Vec<u8>, Vec<u8>)>,
}

/// What a poll found.
pub enum Reload {
    Same,
    Loaded,
    /// The files changed but are not a usable pair; the previous certificate
    /// stays.
    Kept(String),
}

fn parse(cert: &[u8], key: &[u8], provider: &CryptoProvider) -> Result<CertifiedKey, String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("the certificate file: {e}"))?;
    if chain.is_empty() {
        return Err("the certificate file holds no PEM certificate".into());
    }
    let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| format!("the key file: {e}"))?;
    CertifiedKey::from_der(chain, key, provider)
        .map_err(|e| format!("the certificate and the key do not go together: {e}"))
}

fn read(cert_path: &PathBuf, key_path: &PathBuf) -> Result<(Vec<u8>, Vec<u8>), String> {
    let cert = std::fs::read(cert_path).map_err(|e| format!("{}: {e}", cert_path.display()))?;
    let key = std::fs::read(key_path).map_err(|e| format!("{}: {e}", key_path.display()))?;
    Ok((cert, key))
}

impl Certificates {
    /// Reads the pair once; an error here stops the webhook before it listens.
    pub fn load(cert_path: PathBuf, key_path: PathBuf, provider: Arc<CryptoProvider>) -> Result<Self, String> {
        let (cert, key) = read(&cert_path, &key_path)?;
        let certified = parse(&cert, &key, &provider).map_err(|e| {
            format!(
                "--tls-cert {} and --tls-key {}: {e}",
                cert_path.display(),
                key_path.display()
            )
        })?;
        Ok(Certificates {
            cert_path,
            key_path,
            provider,
            current: RwLock::new(Arc::new(certified)),
            last: Mutex::new((cert, key)),
        })
    }

    /// Reads the files again and swaps the certificate if they changed.
    pub fn reload(&self) -> Reload {
        let (cert, key) = match read(&self.cert_path, &self.key_path) {
            Ok(pair) => pair,
            Err(e) => return Reload::Kept(e),
        };
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if last.0 == cert && last.1 == key {
            return Reload::Same;
        }
        let parsed = parse(&cert, &key, &self.provider);
        *last = (cert, key);
        match parsed {
            Ok(certified) => {
                *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(certified);
                Reload::Loaded
            }
            Err(e) => Reload::Kept(e),
        }
    }
}

impl ResolvesServerCert for Certificates {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.read().unwrap_or_else(|e| e.into_inner()).clone())
    }
}
