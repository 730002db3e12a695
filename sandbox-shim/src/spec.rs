//! What the caller asks for: the command, its filesystem view, limits and identity.

use std::ffi::OsString;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::time::Duration;

use crate::observation::ObserveSpec;

/// Path inside every sandbox where the CA bundle (`SandboxSpec::ca_bundle_pem`) is
/// mounted read-only. It lives on the sandbox's private `/run` tmpfs, so it exists
/// whatever the host distribution; point SSL_CERT_FILE, REQUESTS_CA_BUNDLE,
/// NODE_EXTRA_CA_CERTS, CURL_CA_BUNDLE, ... at it. The same content is also
/// mounted over the distribution bundle paths that exist on the host.
pub const CA_BUNDLE_PATH: &str = "/run/airlock/ca-bundle.pem";

/// Address of the DNS sockets inside the sandbox; `/etc/resolv.conf` points here.
pub const DNS_ADDR: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 53), 53);

/// Address of the transparent TCP listener inside the sandbox.
pub const TRANSPARENT_ADDR: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 15001);

/// Everything needed to run one command in a sandbox.
///
/// `SandboxSpec::default()` gives: no command, an empty workspace path (both
/// must be set), no grants or hides, [`Limits::default`] with a 256 MiB /tmp,
/// an empty environment, hostname "airlock", no observation, inherited stdio.
#[derive(Debug)]
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
    /// Observe execs, exits and file writes (see [`crate::Sandbox::take_observations`]).
    /// None: no observation (and no extra cost).
    pub observe: Option<ObserveSpec>,
    /// stdin, stdout, stderr of the command (e.g. pipes to a recorder).
    /// None: the command inherits airlock's own.
    pub stdio: Option<[OwnedFd; 3]>,
    /// Allow creating AF_UNIX sockets. Off by default: the host's filesystem is
    /// visible read-only, and a read-only mount does not stop connect(2) to a
    /// host daemon's socket file — a way around the proxy. socketpair(2)
    /// (unnamed, no path) always works.
    pub allow_unix_sockets: bool,
    /// Run the command on a pseudo-terminal allocated from the sandbox's own
    /// devpts instance, as session leader with the pty as its controlling
    /// terminal; the master is handed back through
    /// [`crate::Sandbox::take_terminal`]. The sandbox's helpers then get
    /// /dev/null as stdio and `stdio` is ignored, so no descriptor of the
    /// caller's terminal enters the sandbox.
    pub terminal: bool,
    /// Session mode: `command` stays empty and nothing runs until
    /// [`crate::Sandbox::start_session`]; then each [`crate::StepRequest`]
    /// runs one command, any number of times, concurrently. `terminal` must
    /// be false (a step asks for its own), and `stdio` is what the
    /// sandbox's helpers get (None: /dev/null).
    pub session: bool,
}

/// Default size of the private /tmp.
const DEFAULT_TMP_BYTES: u64 = 256 << 20;

impl Default for SandboxSpec {
    fn default() -> Self {
        Self {
            command: Vec::new(),
            workspace: PathBuf::new(),
            ro: Vec::new(),
            rw: Vec::new(),
            hide: Vec::new(),
            limits: Limits {
                tmp_bytes: DEFAULT_TMP_BYTES,
                ..Limits::default()
            },
            env: Vec::new(),
            user: None,
            ca_bundle_pem: None,
            hostname: "airlock".into(),
            observe: None,
            stdio: None,
            allow_unix_sockets: false,
            terminal: false,
            session: false,
        }
    }
}

/// Descriptors are duplicated (dup(2)); if that fails (descriptor table
/// full) the clone gets `stdio: None`, i.e. inherits airlock's stdio.
impl Clone for SandboxSpec {
    fn clone(&self) -> Self {
        let stdio = self.stdio.as_ref().and_then(|[a, b, c]| {
            Some([
                a.try_clone().ok()?,
                b.try_clone().ok()?,
                c.try_clone().ok()?,
            ])
        });
        Self {
            command: self.command.clone(),
            workspace: self.workspace.clone(),
            ro: self.ro.clone(),
            rw: self.rw.clone(),
            hide: self.hide.clone(),
            limits: self.limits.clone(),
            env: self.env.clone(),
            user: self.user,
            ca_bundle_pem: self.ca_bundle_pem.clone(),
            hostname: self.hostname.clone(),
            observe: self.observe,
            stdio,
            allow_unix_sockets: self.allow_unix_sockets,
            terminal: self.terminal,
            session: self.session,
        }
    }
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
