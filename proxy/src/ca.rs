//! The certificate authority that intercepted TLS connections are served from.
//!
//! A CA is either persistent (`airlock ca init --dir DIR`: `ca.pem` plus
//! `ca-key.pem`, mode 0600) or made fresh in memory for one session. Leaf
//! certificates are minted per host name on first use (ECDSA P-256, short
//! validity) and cached; all leaves of one CA share one key pair, so minting is
//! a single signature.

use std::collections::HashMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use airlock_policy::Host;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, PKCS_ECDSA_P256_SHA256, SanType, SerialNumber,
};
use ring::rand::{SecureRandom, SystemRandom};
use rustls::crypto::ring::sign::any_ecdsa_type;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::sign::CertifiedKey;
use time::OffsetDateTime;

pub const CA_CERT_FILE: &str = "ca.pem";
pub const CA_KEY_FILE: &str = "ca-key.pem";

/// How long a minted leaf is valid, and how long it is served from the cache.
const LEAF_VALIDITY: Duration = Duration::from_secs(24 * 3600);
const LEAF_REUSE: Duration = Duration::from_secs(12 * 3600);
/// Bounds the cache against a client cycling through many names.
const LEAF_CACHE_MAX: usize = 4096;
/// Leaves start an hour in the past to tolerate clock skew inside sandboxes.
const BACKDATE: time::Duration = time::Duration::hours(1);

#[derive(Debug, thiserror::Error)]
pub enum CaError {
    #[error(
        "no CA in {dir}: {file} is missing; create one with `airlock ca init --dir {dir}`",
        dir = .0.display(), file = .1
    )]
    Missing(PathBuf, &'static str),
    #[error(
        "a CA already exists in {}; use it as it is, or remove the directory to make a new one",
        .0.display()
    )]
    AlreadyExists(PathBuf),
    #[error("CA key {} is readable by others (mode {mode:o}); run `chmod 600 {}`", .0.display(), .0.display(), mode = .1)]
    KeyTooOpen(PathBuf, u32),
    #[error("{}: {source}", .path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: not a usable CA certificate/key: {detail}", .path.display())]
    Invalid { path: PathBuf, detail: String },
    #[error("minting a certificate for {host}: {detail}")]
    Mint { host: String, detail: String },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> CaError + '_ {
    move |source| CaError::Io {
        path: path.to_owned(),
        source,
    }
}

/// A CA that can mint leaf certificates for intercepted hosts.
pub struct CertificateAuthority {
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
    cert_der: CertificateDer<'static>,
    leaf_key: KeyPair,
    leaf_signing: Arc<dyn rustls::sign::SigningKey>,
    cache: Mutex<HashMap<Host, (Arc<CertifiedKey>, Instant)>>,
}

impl std::fmt::Debug for CertificateAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertificateAuthority")
            .finish_non_exhaustive()
    }
}

impl CertificateAuthority {
    /// Create a persistent CA in `dir` (created 0700 if missing). Refuses to
    /// overwrite an existing one.
    pub fn init(dir: &Path) -> Result<Self, CaError> {
        let cert_path = dir.join(CA_CERT_FILE);
        let key_path = dir.join(CA_KEY_FILE);
        if cert_path.exists() || key_path.exists() {
            return Err(CaError::AlreadyExists(dir.to_owned()));
        }
        fs::create_dir_all(dir).map_err(io_err(dir))?;
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(io_err(dir))?;
        let (params, key) = ca_params(Duration::from_secs(10 * 365 * 24 * 3600))?;
        let cert = params.self_signed(&key).map_err(|e| CaError::Invalid {
            path: cert_path.clone(),
            detail: e.to_string(),
        })?;
        // The key is created with mode 0600 from the start, never widened then narrowed.
        let mut key_file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&key_path)
            .map_err(io_err(&key_path))?;
        key_file
            .write_all(key.serialize_pem().as_bytes())
            .map_err(io_err(&key_path))?;
        fs::write(&cert_path, cert.pem()).map_err(io_err(&cert_path))?;
        Self::from_parts(Issuer::new(params, key), cert.pem(), cert.der().clone())
    }

    /// Load the persistent CA from `dir`.
    pub fn load(dir: &Path) -> Result<Self, CaError> {
        let cert_path = dir.join(CA_CERT_FILE);
        let key_path = dir.join(CA_KEY_FILE);
        if !cert_path.exists() {
            return Err(CaError::Missing(dir.to_owned(), CA_CERT_FILE));
        }
        if !key_path.exists() {
            return Err(CaError::Missing(dir.to_owned(), CA_KEY_FILE));
        }
        let mode = fs::metadata(&key_path)
            .map_err(io_err(&key_path))?
            .permissions()
            .mode();
        if mode & 0o077 != 0 {
            return Err(CaError::KeyTooOpen(key_path, mode & 0o777));
        }
        let cert_pem = fs::read_to_string(&cert_path).map_err(io_err(&cert_path))?;
        let key_pem = fs::read_to_string(&key_path).map_err(io_err(&key_path))?;
        let invalid = |path: &Path, e: &dyn std::fmt::Display| CaError::Invalid {
            path: path.to_owned(),
            detail: e.to_string(),
        };
        let key = KeyPair::from_pem(&key_pem).map_err(|e| invalid(&key_path, &e))?;
        let issuer =
            Issuer::from_ca_cert_pem(&cert_pem, key).map_err(|e| invalid(&cert_path, &e))?;
        let cert_der = rustls_pemfile::certs(&mut cert_pem.as_bytes())
            .next()
            .ok_or_else(|| invalid(&cert_path, &"no CERTIFICATE block"))?
            .map_err(|e| invalid(&cert_path, &e))?;
        Self::from_parts(issuer, cert_pem, cert_der)
    }

    /// A fresh CA that lives only in memory, for one session.
    pub fn ephemeral() -> Result<Self, CaError> {
        let (params, key) = ca_params(Duration::from_secs(7 * 24 * 3600))?;
        let cert = params.self_signed(&key).map_err(|e| CaError::Invalid {
            path: PathBuf::from("<ephemeral>"),
            detail: e.to_string(),
        })?;
        Self::from_parts(Issuer::new(params, key), cert.pem(), cert.der().clone())
    }

    fn from_parts(
        issuer: Issuer<'static, KeyPair>,
        cert_pem: String,
        cert_der: CertificateDer<'static>,
    ) -> Result<Self, CaError> {
        let mint_err = |e: &dyn std::fmt::Display| CaError::Mint {
            host: "<leaf key>".into(),
            detail: e.to_string(),
        };
        let leaf_key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(|e| mint_err(&e))?;
        let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
        let leaf_signing = any_ecdsa_type(&der).map_err(|e| mint_err(&e))?;
        Ok(Self {
            issuer,
            cert_pem,
            cert_der,
            leaf_key,
            leaf_signing,
            cache: Mutex::new(HashMap::new()),
        })
    }

    /// The CA certificate in PEM, for clients to trust.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    pub fn cert_der(&self) -> &CertificateDer<'static> {
        &self.cert_der
    }

    /// The certificate chain and key to serve for `host`, minted on first use.
    pub fn leaf_for(&self, host: &Host) -> Result<Arc<CertifiedKey>, CaError> {
        let now = Instant::now();
        if let Ok(cache) = self.cache.lock()
            && let Some((leaf, minted)) = cache.get(host)
            && now.duration_since(*minted) < LEAF_REUSE
        {
            return Ok(leaf.clone());
        }
        let leaf = Arc::new(self.mint(host)?);
        if let Ok(mut cache) = self.cache.lock() {
            if cache.len() >= LEAF_CACHE_MAX {
                cache.clear();
            }
            cache.insert(host.clone(), (leaf.clone(), now));
        }
        Ok(leaf)
    }

    fn mint(&self, host: &Host) -> Result<CertifiedKey, CaError> {
        let mint_err = |e: &dyn std::fmt::Display| CaError::Mint {
            host: host.to_string(),
            detail: e.to_string(),
        };
        let mut params = CertificateParams::default();
        params.subject_alt_names = vec![match host.ip() {
            Some(ip) => SanType::IpAddress(ip),
            None => SanType::DnsName(host.as_str().try_into().map_err(|e| mint_err(&e))?),
        }];
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, host.as_str());
        params.distinguished_name = dn;
        let now = OffsetDateTime::now_utc();
        params.not_before = now - BACKDATE;
        params.not_after = now + LEAF_VALIDITY;
        params.serial_number = Some(random_serial());
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let cert = params
            .signed_by(&self.leaf_key, &self.issuer)
            .map_err(|e| mint_err(&e))?;
        Ok(CertifiedKey::new(
            vec![cert.der().clone(), self.cert_der.clone()],
            self.leaf_signing.clone(),
        ))
    }
}

fn ca_params(validity: Duration) -> Result<(CertificateParams, KeyPair), CaError> {
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(|e| CaError::Mint {
        host: "<CA key>".into(),
        detail: e.to_string(),
    })?;
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "Airlock");
    // A random suffix keeps two CAs' subjects apart in trust stores and logs.
    let serial = random_serial();
    let suffix: String = serial
        .as_ref()
        .iter()
        .take(4)
        .map(|b| format!("{b:02x}"))
        .collect();
    dn.push(DnType::CommonName, format!("Airlock session CA {suffix}"));
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let now = OffsetDateTime::now_utc();
    params.not_before = now - BACKDATE;
    params.not_after = now + validity;
    params.serial_number = Some(serial);
    Ok((params, key))
}

fn random_serial() -> SerialNumber {
    let mut bytes = [0u8; 16];
    // SystemRandom only fails if the kernel's getrandom(2) does; a fixed serial
    // would still yield a valid (if less unique) certificate, so don't abort.
    let _ = SystemRandom::new().fill(&mut bytes);
    bytes[0] &= 0x7f; // keep it positive in DER
    SerialNumber::from_slice(&bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn persistent_ca_roundtrips_and_key_is_private() {
        let dir = tempfile::tempdir().unwrap();
        let ca_dir = dir.path().join("ca");
        let ca = CertificateAuthority::init(&ca_dir).unwrap();
        let mode = fs::metadata(ca_dir.join(CA_KEY_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(matches!(
            CertificateAuthority::init(&ca_dir),
            Err(CaError::AlreadyExists(_))
        ));
        let loaded = CertificateAuthority::load(&ca_dir).unwrap();
        assert_eq!(loaded.cert_pem(), ca.cert_pem());
        let host = Host::parse("api.example.com").unwrap();
        let leaf = loaded.leaf_for(&host).unwrap();
        assert_eq!(leaf.cert.len(), 2);
        assert!(Arc::ptr_eq(&leaf, &loaded.leaf_for(&host).unwrap()));
    }

    #[test]
    fn load_refuses_world_readable_key() {
        let dir = tempfile::tempdir().unwrap();
        CertificateAuthority::init(dir.path()).unwrap();
        let key = dir.path().join(CA_KEY_FILE);
        fs::set_permissions(&key, fs::Permissions::from_mode(0o644)).unwrap();
        let err = CertificateAuthority::load(dir.path()).unwrap_err();
        assert!(err.to_string().contains("chmod 600"), "{err}");
    }

    #[test]
    fn missing_ca_names_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let err = CertificateAuthority::load(dir.path()).unwrap_err();
        assert!(err.to_string().contains("airlock ca init"), "{err}");
    }
}
