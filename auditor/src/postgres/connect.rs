//! Where the central store is and how to reach it: a `postgres://` or
//! `postgresql://` URL, its `sslmode` with libpq's meanings, and the
//! password from the URL, a file, or the environment. The password is
//! kept out of everything printed: the URL is only ever shown redacted
//! ([`PgTarget::shown`]), and an engine's message is scrubbed of it.

use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::Config;
use tokio_postgres::config::{Host, SslMode as WireSslMode};

use super::client::{Client, ConnectError};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::error::{CentralError, ConnectFailure};

/// The environment variable naming a file that holds the password, so
/// that it need not appear on a command line.
pub const PASSWORD_FILE_ENV: &str = "AIRLOCK_AUDIT_DB_PASSWORD_FILE";

/// Whether `location` names a central (PostgreSQL) store.
pub fn is_postgres_url(location: &str) -> bool {
    location.starts_with("postgres://") || location.starts_with("postgresql://")
}

/// libpq's `sslmode`, the values Airlock takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// Never TLS.
    Disable,
    /// TLS when the server offers it, else plain; the certificate is not
    /// checked (libpq's default; not Airlock's).
    Prefer,
    /// TLS always; the certificate is not checked.
    Require,
    /// TLS always, the certificate checked against the trusted roots
    /// (`sslrootcert`, else the Mozilla roots) and the host name. The
    /// default: a record store's password and contents are not sent where
    /// a network attacker could read or redirect them, unless asked.
    VerifyFull,
}

impl SslMode {
    fn parse(text: &str) -> Result<Self, CentralError> {
        match text {
            "disable" => Ok(Self::Disable),
            "prefer" => Ok(Self::Prefer),
            "require" => Ok(Self::Require),
            "verify-full" => Ok(Self::VerifyFull),
            other => Err(CentralError::SslMode(other.to_string())),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Disable => "disable",
            Self::Prefer => "prefer",
            Self::Require => "require",
            Self::VerifyFull => "verify-full",
        }
    }
}

/// A parsed central store location, ready to connect.
#[derive(Clone)]
pub struct PgTarget {
    config: Config,
    ssl: SslMode,
    tls: Option<Arc<ClientConfig>>,
    shown: String,
    password: Option<String>,
}

impl std::fmt::Debug for PgTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgTarget")
            .field("url", &self.shown)
            .field("sslmode", &self.ssl)
            .finish_non_exhaustive()
    }
}

impl PgTarget {
    /// Parses `url`: `postgres://[USER[:PASSWORD]@]HOST[:PORT]/DB[?sslmode=…&sslrootcert=FILE]`.
    /// The password is the URL's, else the file named by
    /// `AIRLOCK_AUDIT_DB_PASSWORD_FILE`, else `PGPASSWORD`.
    pub fn parse(url: &str) -> Result<Self, CentralError> {
        let shown = redact_url(url);
        if !is_postgres_url(url) {
            return Err(CentralError::Url {
                url: shown,
                problem: "it does not begin with postgres:// or postgresql://".into(),
            });
        }
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let mut ssl = SslMode::VerifyFull;
        let mut rootcert: Option<PathBuf> = None;
        let mut rest = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("sslmode", v)) => ssl = SslMode::parse(v)?,
                Some(("sslrootcert", v)) => rootcert = Some(PathBuf::from(v)),
                _ => rest.push(pair),
            }
        }
        let passed = if rest.is_empty() {
            base.to_string()
        } else {
            format!("{base}?{}", rest.join("&"))
        };
        let mut config = Config::from_str(&passed).map_err(|e| CentralError::Url {
            url: shown.clone(),
            problem: scrub(&e.to_string(), password_in(url).as_deref()),
        })?;
        if config.get_hosts().is_empty() {
            return Err(CentralError::Url {
                url: shown,
                problem: "it names no host".into(),
            });
        }
        if config.get_dbname().is_none() {
            return Err(CentralError::Url {
                url: shown,
                problem: "it names no database (postgres://USER@HOST/DATABASE)".into(),
            });
        }
        if config.get_user().is_none() {
            return Err(CentralError::Url {
                url: shown,
                problem: "it names no user (postgres://USER@HOST/DATABASE)".into(),
            });
        }
        let password = match config.get_password() {
            Some(p) => Some(String::from_utf8_lossy(p).into_owned()),
            None => password_from_environment()?,
        };
        if let Some(p) = &password {
            config.password(p.as_bytes());
        }
        if config.get_connect_timeout().is_none() {
            // A host that drops packets would otherwise hang the caller
            // for the kernel's whole SYN retry schedule.
            config.connect_timeout(Duration::from_secs(10));
        }
        config.application_name("airlock");
        // No JIT: every query of the store is an index lookup that takes a
        // few milliseconds, but over millions of events the planner's
        // estimates cross `jit_above_cost`, and compiling then takes longer
        // than the query (a search by host over 1M events: 80 ms instead of
        // 3). Options in the URL come after, so theirs win.
        let options = config.get_options().unwrap_or_default();
        config.options(format!("-c jit=off {options}").trim_end());
        let unix_only = config
            .get_hosts()
            .iter()
            .all(|h| !matches!(h, Host::Tcp(_)));
        let tls = match ssl {
            SslMode::Disable => None,
            _ if unix_only => None,
            SslMode::Prefer | SslMode::Require => Some(Arc::new(unverified_tls())),
            SslMode::VerifyFull => Some(Arc::new(verified_tls(rootcert.as_deref())?)),
        };
        config.ssl_mode(match (ssl, &tls) {
            (_, None) => WireSslMode::Disable,
            (SslMode::Prefer, Some(_)) => WireSslMode::Prefer,
            _ => WireSslMode::Require,
        });
        Ok(Self {
            config,
            ssl,
            tls,
            shown,
            password,
        })
    }

    /// The URL as it may be shown: its password replaced by `***`.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    pub fn ssl_mode(&self) -> SslMode {
        self.ssl
    }

    /// Text from the engine, with the password taken out should it appear.
    pub(crate) fn scrub(&self, text: &str) -> String {
        scrub(text, self.password.as_deref())
    }

    /// Opens one connection.
    pub(crate) fn connect(&self) -> Result<Client, CentralError> {
        let connected = match &self.tls {
            None => Client::connect(&self.config, tokio_postgres::NoTls),
            Some(tls) => Client::connect(
                &self.config,
                MakeRustlsConnect::new(ClientConfig::clone(tls)),
            ),
        };
        connected.map_err(|e| self.connect_failure(&e))
    }

    fn connect_failure(&self, e: &ConnectError) -> CentralError {
        let cause = self.scrub(&full_text(e));
        let e = match e {
            ConnectError::Postgres(e) => e,
            ConnectError::Io(_) => {
                return CentralError::Connect {
                    url: self.shown.clone(),
                    failure: ConnectFailure::Unreachable { cause },
                };
            }
        };
        let failure = if let Some(db) = e.as_db_error() {
            match db.code().code() {
                "28P01" | "28000" => ConnectFailure::Password {
                    user: self.config.get_user().unwrap_or_default().to_string(),
                },
                "3D000" => ConnectFailure::NoDatabase {
                    database: self.config.get_dbname().unwrap_or_default().to_string(),
                },
                _ => ConnectFailure::Other { cause },
            }
        } else if cause.contains("server does not support TLS") {
            ConnectFailure::NoTls { mode: self.ssl }
        } else if cause.contains("invalid peer certificate")
            || cause.contains("certificate")
            || cause.contains("UnknownIssuer")
        {
            ConnectFailure::Certificate { cause }
        } else if cause.contains("password missing") {
            ConnectFailure::NoPassword
        } else if cause.contains("error connecting")
            || cause.contains("timed out")
            || cause.contains("Connection refused")
            || cause.contains("connection closed")
        {
            ConnectFailure::Unreachable { cause }
        } else {
            ConnectFailure::Other { cause }
        };
        CentralError::Connect {
            url: self.shown.clone(),
            failure,
        }
    }
}

/// An error and its sources, on one line.
pub(crate) fn full_text(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let next = s.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = s.source();
    }
    text
}

/// The password of a URL that carries none: the file named by
/// [`PASSWORD_FILE_ENV`], else `PGPASSWORD`. Public so that a sandbox can
/// refuse it in its environment.
pub fn password_from_environment() -> Result<Option<String>, CentralError> {
    if let Some(path) = std::env::var_os(PASSWORD_FILE_ENV) {
        let path = PathBuf::from(path);
        let text = std::fs::read_to_string(&path)
            .map_err(|source| CentralError::PasswordFile { path, source })?;
        return Ok(Some(text.trim_end_matches(['\n', '\r']).to_string()));
    }
    Ok(std::env::var("PGPASSWORD").ok().filter(|p| !p.is_empty()))
}

/// The password written in a URL's authority, percent-decoded as libpq
/// reads it, if there is one.
fn password_in(url: &str) -> Option<String> {
    let (_, rest) = url.split_once("://")?;
    let authority = rest.split(['/', '?']).next()?;
    let (userinfo, _) = authority.rsplit_once('@')?;
    let (_, password) = userinfo.split_once(':')?;
    Some(percent_decode(password))
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(Ok(b)) = text.get(i + 1..i + 3).map(|h| u8::from_str_radix(h, 16))
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The URL with the password of its authority, and any `password=`
/// parameter, replaced by `***`.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{user}:***@{hosts}"),
            None => authority.to_string(),
        },
        None => authority.to_string(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let query: Vec<String> = query
                .split('&')
                .map(|p| match p.split_once('=') {
                    Some(("password", _)) => "password=***".to_string(),
                    _ => p.to_string(),
                })
                .collect();
            format!("{path}?{}", query.join("&"))
        }
        None => tail.to_string(),
    };
    format!("{scheme}://{authority}{tail}")
}

fn scrub(text: &str, password: Option<&str>) -> String {
    match password {
        Some(p) if !p.is_empty() => text.replace(p, "***"),
        _ => text.to_string(),
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn verified_tls(rootcert: Option<&std::path::Path>) -> Result<ClientConfig, CentralError> {
    let mut roots = RootCertStore::empty();
    match rootcert {
        Some(path) => {
            let pem = std::fs::read(path).map_err(|source| CentralError::RootCert {
                path: path.to_path_buf(),
                problem: source.to_string(),
            })?;
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
                .collect::<Result<_, _>>()
                .map_err(|e| CentralError::RootCert {
                    path: path.to_path_buf(),
                    problem: e.to_string(),
                })?;
            let (added, _) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(CentralError::RootCert {
                    path: path.to_path_buf(),
                    problem: "it holds no PEM certificate".into(),
                });
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map(|b| b.with_root_certificates(roots).with_no_client_auth())
        .map_err(|e| CentralError::Tls(e.to_string()))
}

/// TLS that encrypts but does not ask who the server is (`require`,
/// `prefer`): the handshake's signatures are still checked.
fn unverified_tls() -> ClientConfig {
    let provider = provider();
    let verifier = AnyCertificate {
        algorithms: provider.signature_verification_algorithms,
    };
    match ClientConfig::builder_with_provider(provider).with_safe_default_protocol_versions() {
        Ok(b) => b
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier))
            .with_no_client_auth(),
        // ring's default provider supports the default versions.
        Err(_) => unreachable!("ring supports TLS 1.2 and 1.3"),
    }
}

#[derive(Debug)]
struct AnyCertificate {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_urls_password_is_never_shown() {
        for (url, shown) in [
            (
                "postgres://u:s3cret@h:5432/db?sslmode=disable",
                "postgres://u:***@h:5432/db?sslmode=disable",
            ),
            ("postgresql://u:p%40ss@h/db", "postgresql://u:***@h/db"),
            (
                "postgres://u@h/db?password=s3cret",
                "postgres://u@h/db?password=***",
            ),
            ("postgres://h/db", "postgres://h/db"),
        ] {
            assert_eq!(redact_url(url), shown);
        }
        assert_eq!(
            password_in("postgres://u:p%40ss@h/db").as_deref(),
            Some("p@ss")
        );
    }

    #[test]
    fn the_stores_connections_run_without_jit_unless_the_url_says_otherwise() {
        let options = |url: &str| {
            PgTarget::parse(url)
                .unwrap()
                .config
                .get_options()
                .map(str::to_string)
        };
        assert_eq!(
            options("postgres://u:p@127.0.0.1/db").as_deref(),
            Some("-c jit=off")
        );
        // The URL's own options come last: a later -c wins in Postgres.
        assert_eq!(
            options("postgres://u:p@127.0.0.1/db?options=-c%20jit%3Don").as_deref(),
            Some("-c jit=off -c jit=on")
        );
    }

    #[test]
    fn sslmode_takes_libpqs_names_and_defaults_to_verify_full() {
        let t = PgTarget::parse("postgres://u:p@127.0.0.1/db").unwrap();
        assert_eq!(t.ssl_mode(), SslMode::VerifyFull);
        for mode in ["disable", "prefer", "require", "verify-full"] {
            let t =
                PgTarget::parse(&format!("postgres://u:p@127.0.0.1/db?sslmode={mode}")).unwrap();
            assert_eq!(t.ssl_mode().as_str(), mode);
        }
        let e = PgTarget::parse("postgres://u:p@h/db?sslmode=allow").unwrap_err();
        assert!(e.to_string().contains("sslmode"), "{e}");
    }
}
