//! The one rustls client configuration every contender is measured with.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, bail};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use rustls::{ClientConfig, RootCertStore};

/// Whether new connections may resume an earlier TLS session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Resumption {
    /// Every connection does a full handshake: the worst case for a proxy that mints certificates.
    Off,
    /// rustls' default in-memory session cache (tickets / session ids).
    On,
}

pub(crate) fn client_config(
    ca_file: &Path,
    resumption: Resumption,
) -> anyhow::Result<Arc<ClientConfig>> {
    let mut roots = RootCertStore::empty();
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(ca_file)
        .with_context(|| format!("reading CA certificates from {}", ca_file.display()))?
        .collect::<Result<_, _>>()
        .with_context(|| format!("parsing PEM in {}", ca_file.display()))?;
    if certs.is_empty() {
        bail!(
            "{} holds no certificate; pass the CA PEM file with --ca",
            ca_file.display()
        );
    }
    for cert in certs {
        roots.add(cert).with_context(|| {
            format!("adding a CA from {} to the trust store", ca_file.display())
        })?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("choosing TLS versions")?
        .with_root_certificates(roots)
        .with_no_client_auth();
    // HTTP/1.1 only: one request in flight per connection keeps "connections"
    // and "requests" comparable across contenders.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    if resumption == Resumption::Off {
        config.resumption = rustls::client::Resumption::disabled();
    }
    Ok(Arc::new(config))
}
