//! A test PKI: a CA that signs test upstreams' certificates, server configs
//! no one trusts, and a TLS client that trusts one CA only.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls::ServerConfig;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tempfile::TempDir;

/// A CA for test upstream servers, written to `upstream-ca.pem` for
/// `--upstream-ca`.
pub struct TestPki {
    pub dir: TempDir,
    issuer: Issuer<'static, KeyPair>,
    pub ca_pem: PathBuf,
}

impl std::fmt::Debug for TestPki {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The issuer holds the CA's private key: not for test output.
        f.debug_struct("TestPki")
            .field("dir", &self.dir)
            .field("ca_pem", &self.ca_pem)
            .finish_non_exhaustive()
    }
}

impl Default for TestPki {
    fn default() -> Self {
        Self::new()
    }
}

impl TestPki {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "Airlock test upstream CA");
        let cert = params.self_signed(&key).unwrap();
        let ca_pem = dir.path().join("upstream-ca.pem");
        std::fs::write(&ca_pem, cert.pem()).unwrap();
        Self {
            dir,
            issuer: Issuer::new(params, key),
            ca_pem,
        }
    }

    /// A TLS server config for `names`, signed by this CA, offering h2 and http/1.1.
    pub fn server_config(&self, names: &[&str]) -> ServerConfig {
        let key = KeyPair::generate().unwrap();
        let params = CertificateParams::new(owned(names)).unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        tls_config(cert.der().clone(), key)
    }

    /// A certificate for `names` signed by this CA and its private key, both
    /// PEM: for servers that read them from files (PostgreSQL).
    pub fn cert_and_key_pem(&self, names: &[&str]) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let params = CertificateParams::new(owned(names)).unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

/// A server config with a self-signed certificate no one trusts.
pub fn untrusted_server_config(names: &[&str]) -> ServerConfig {
    let key = KeyPair::generate().unwrap();
    let params = CertificateParams::new(owned(names)).unwrap();
    let cert = params.self_signed(&key).unwrap();
    tls_config(cert.der().clone(), key)
}

fn owned(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| n.to_string()).collect()
}

fn tls_config(cert: CertificateDer<'static>, key: KeyPair) -> ServerConfig {
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    config
}

/// A rustls client that trusts only the CA in `ca_pem` and offers `alpn`.
pub fn tls_client(ca_pem: &Path, alpn: &[&[u8]]) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    let pem = std::fs::read(ca_pem).unwrap();
    for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}
