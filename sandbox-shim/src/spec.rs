//! What the caller asks for: the command, its filesystem view, limits and identity.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

/// Path inside every sandbox where the CA bundle (`SandboxSpec::ca_bundle_pem`) is
/// mounted read-only. It lives on the sandbox's private `/run` tmpfs, so it exists
/// whatever the host distribution; point SSL_CERT_FILE, REQUESTS_CA_BUNDLE,
/// NODE_EXTRA_CA_CERTS, CURL_CA_BUNDLE, ... at it. The same content is also
/// mounted over the distribution bundle paths that exist on the host.
pub const CA_BUNDLE_PATH: &str = "/run/airlock/ca-bundle.pem";

/// Address of the DNS sockets inside the sandbox; `/etc/resolv.conf` points here.
pub const DNS_ADDR: &str = "127.0.0.53:53";

/// Address of the transparent TCP listener inside the sandbox.
pub const TRANSPARENT_ADDR: &str = "127.0.0.1:15001";

/// Everything needed to run one command in a sandbox.
#[derive(Debug, Clone)]
pub struct SandboxSpec {
    /// argv; argv[0] is resolved via PATH from `env` inside the sandbox.
    pub command: Vec<OsString>,
    /// Read-write, mounted at the same path; also the working directory.
    pub workspace: PathBuf,
    /// Extra read-only binds (same path inside).
    pub ro: Vec<PathBuf>,
    /// Extra read-write binds (same path inside).
    pub rw: Vec<PathBuf>,
    /// Paths to hide: an empty read-only tmpfs over directories, /dev/null over files.
    /// These win over `ro`/`rw` grants (fail closed: e.g. the proxy's CA key dir).
    pub hide: Vec<PathBuf>,
    pub limits: Limits,
    /// The complete environment of the command.
    pub env: Vec<(OsString, OsString)>,
    /// When root: run as this uid/gid. None: the invoking user (root stays uid 0 without capabilities).
    pub user: Option<UserSpec>,
    /// PEM bundle mounted read-only at [`CA_BUNDLE_PATH`] and over the distribution bundles.
    pub ca_bundle_pem: Option<Vec<u8>>,
    /// UTS namespace hostname.
    pub hostname: String,
}

/// Resource limits; None means unlimited.
#[derive(Debug, Clone, Default)]
pub struct Limits {
    pub memory_bytes: Option<u64>,
    pub pids: Option<u64>,
    pub cpus: Option<f64>,
    pub timeout: Option<Duration>,
    /// Size of the private /tmp tmpfs.
    pub tmp_bytes: u64,
}

/// uid/gid for `--user` (only honoured when airlock runs as root).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserSpec {
    pub uid: u32,
    pub gid: u32,
}
