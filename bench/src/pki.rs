//! A throwaway CA and a server certificate for nginx, so the benchmark needs no
//! openssl and never touches the system trust store.

use std::fs;
use std::path::Path;

use anyhow::Context;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

pub(crate) const CA_CERT: &str = "ca.pem";
pub(crate) const SERVER_CERT: &str = "server.pem";
pub(crate) const SERVER_KEY: &str = "server-key.pem";

pub(crate) fn write(dir: &Path, names: &[String]) -> anyhow::Result<()> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;

    let ca_key = KeyPair::generate().context("generating the test CA key")?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "airlock-bench upstream test CA");
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca_params
        .self_signed(&ca_key)
        .context("self-signing the test CA")?;
    let issuer = Issuer::new(ca_params, ca_key);

    let server_key = KeyPair::generate().context("generating the server key")?;
    let mut server_params = CertificateParams::new(names.to_vec())
        .context("server certificate names must be valid DNS names")?;
    server_params.distinguished_name.push(
        DnType::CommonName,
        names.first().map_or("bench.test", String::as_str),
    );
    server_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    server_params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    let server_cert = server_params
        .signed_by(&server_key, &issuer)
        .context("signing the server certificate")?;

    for (file, pem) in [
        (CA_CERT, ca_cert.pem()),
        (SERVER_CERT, server_cert.pem()),
        (SERVER_KEY, server_key.serialize_pem()),
    ] {
        let path = dir.join(file);
        fs::write(&path, pem).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
