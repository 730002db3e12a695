//! Reading PEM certificates the operator names (`--upstream-ca`).

use std::path::Path;

use anyhow::{Context, bail};
use rustls::pki_types::CertificateDer;

pub(crate) fn load_pem_certs(path: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let pem = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let certs = rustls_pemfile::certs(&mut pem.as_slice())
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("{}: not a PEM certificate file", path.display()))?;
    if certs.is_empty() {
        bail!(
            "{}: no CERTIFICATE blocks found; pass a PEM file with the CA certificate",
            path.display()
        );
    }
    Ok(certs)
}
