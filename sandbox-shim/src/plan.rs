//! Turns a [`SandboxSpec`] into a fully resolved plan *before* forking: every
//! path canonicalised, every string converted, so the child only executes.

use std::ffi::{CString, OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::error::ShimError;
use crate::observation::ObserveSpec;
use crate::spec::{Limits, SandboxSpec, UserSpec};

/// The system's hosts file (hosts(5)).
pub(crate) const HOSTS_FILE: &str = "/etc/hosts";

/// A path made visible inside the sandbox at the same place.
#[derive(Debug, Clone)]
pub(crate) struct Grant {
    pub path: PathBuf,
    pub writable: bool,
}

/// A path covered by an empty read-only tmpfs (dirs) or /dev/null (files).
#[derive(Debug, Clone)]
pub(crate) struct Hide {
    pub path: PathBuf,
    /// Forced hides also cover grants (the proxy CA key must never be visible).
    pub forced: bool,
}

/// Who the command runs as.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Identity {
    /// Root on the host, staying uid 0 without capabilities.
    Root,
    /// Root on the host switching to `--user`.
    Switch(UserSpec),
    /// Unprivileged: a user namespace maps the invoking uid/gid.
    Unprivileged { uid: u32, gid: u32 },
}

#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub argv: Vec<CString>,
    pub envp: Vec<CString>,
    pub search_path: OsString,
    pub workspace: PathBuf,
    pub grants: Vec<Grant>,
    pub hides: Vec<Hide>,
    pub resolv_target: Option<PathBuf>,
    /// The host's /etc/hosts, read before the sandbox exists: the sandbox's
    /// own hosts file is this plus its hostname (see `mounts`).
    pub hosts: Option<Vec<u8>>,
    pub ca_targets: Vec<PathBuf>,
    pub ca_bundle: Option<Vec<u8>>,
    pub hostname: String,
    pub limits: Limits,
    pub identity: Identity,
    /// Fallbacks when no cgroup enforces the limit (set by the caller).
    pub rlimit_memory: Option<u64>,
    pub rlimit_nproc: Option<u64>,
    pub observe: Option<ObserveSpec>,
    pub allow_unix_sockets: bool,
    /// Run the command on a pseudo-terminal of the sandbox's own devpts.
    pub terminal: bool,
    /// Session mode: no command; init forks the launcher, which runs steps.
    pub session: bool,
}

/// Distribution CA bundle locations we shadow when they exist on the host.
const CA_BUNDLE_LOCATIONS: [&str; 4] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// Per-home secret locations hidden unless granted explicitly.
const HOME_SECRETS: [&str; 8] = [
    ".ssh",
    ".aws",
    ".config/gcloud",
    ".docker",
    ".kube",
    ".gnupg",
    ".netrc",
    ".git-credentials",
];

/// Host-wide secret locations.
const HOST_SECRETS: [&str; 4] = [
    "/var/run/docker.sock",
    "/run/docker.sock",
    "/run/secrets",
    "/run/user",
];

const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

fn cstring(bytes: &[u8], what: &str) -> Result<CString, ShimError> {
    CString::new(bytes)
        .map_err(|_| ShimError::InvalidSpec(format!("{what} contains a NUL byte: remove it")))
}

fn canonical(path: &Path) -> Result<PathBuf, ShimError> {
    std::fs::canonicalize(path).map_err(|e| ShimError::Path {
        path: path.display().to_string(),
        reason: e.to_string(),
    })
}

/// Home directories of the invoking user ($HOME and the passwd entry).
fn home_dirs() -> Vec<PathBuf> {
    let mut homes = Vec::new();
    if let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        homes.push(PathBuf::from(home));
    }
    if let Ok(Some(user)) = nix::unistd::User::from_uid(nix::unistd::getuid()) {
        homes.push(user.dir);
    }
    if nix::unistd::geteuid().is_root() {
        homes.push(PathBuf::from("/root"));
    }
    homes
}

/// Canonicalise when it exists; hides of missing paths are simply skipped.
fn existing(path: &Path) -> Option<PathBuf> {
    std::fs::canonicalize(path).ok()
}

/// What every sandbox hides besides `--hide`, canonical and existing: each
/// home's secrets and the homes themselves, and the host's secrets (a grant
/// inside one shows through; `forced`: not even a grant does, Airlock's own
/// files). Public for a runtime that builds the view itself (gVisor's
/// bundle), so both hide the same.
pub fn default_hides() -> Vec<(PathBuf, bool)> {
    let mut hides = Vec::new();
    for home in home_dirs() {
        for secret in HOME_SECRETS {
            if let Some(p) = existing(&home.join(secret)) {
                hides.push((p, false));
            }
        }
        if let Some(p) = existing(&home.join(".local/share/airlock")) {
            hides.push((p, true));
        }
        if let Some(p) = existing(&home) {
            hides.push((p, false));
        }
    }
    for p in HOST_SECRETS {
        if let Some(p) = existing(Path::new(p)) {
            hides.push((p, false));
        }
    }
    hides
}

impl Plan {
    pub(crate) fn build(spec: &SandboxSpec) -> Result<Self, ShimError> {
        if spec.session {
            if !spec.command.is_empty() {
                return Err(ShimError::InvalidSpec(
                    "a session sandbox takes its commands as steps: leave `command` empty".into(),
                ));
            }
            if spec.terminal {
                return Err(ShimError::InvalidSpec(
                    "a session sandbox has no terminal of its own: ask for one per step (StepRequest::terminal)".into(),
                ));
            }
        } else if spec.command.is_empty() {
            return Err(ShimError::InvalidSpec(
                "empty command: pass the program to run after `--`".into(),
            ));
        }
        if spec.limits.tmp_bytes == 0 {
            return Err(ShimError::InvalidSpec(
                "tmp_bytes is 0: give the private /tmp a size, e.g. 256M".into(),
            ));
        }
        if let Some(cpus) = spec.limits.cpus
            && !(cpus.is_finite() && cpus > 0.0)
        {
            return Err(ShimError::InvalidSpec(format!(
                "--cpus {cpus} is not a positive number: pass e.g. --cpus 0.5"
            )));
        }
        let workspace = canonical(&spec.workspace)?;
        if workspace == Path::new("/") {
            return Err(ShimError::InvalidSpec(
                "the workspace is / (that would make the whole system writable): pass a project directory".into(),
            ));
        }
        if !workspace.is_dir() {
            return Err(ShimError::Path {
                path: workspace.display().to_string(),
                reason: "workspace is not a directory".into(),
            });
        }
        let argv = arguments(&spec.command)?;
        let (envp, search_path) = environment(&spec.env)?;

        let mut grants = vec![Grant {
            path: workspace.clone(),
            writable: true,
        }];
        for (paths, writable) in [(&spec.ro, false), (&spec.rw, true)] {
            for p in paths {
                grants.push(Grant {
                    path: canonical(p)?,
                    writable,
                });
            }
        }
        // Parents before children so nested grants stack correctly.
        grants.sort_by_key(|g| g.path.components().count());

        let mut hides: Vec<Hide> = default_hides()
            .into_iter()
            .map(|(path, forced)| Hide { path, forced })
            .collect();
        for p in &spec.hide {
            if let Some(p) = existing(p) {
                hides.push(Hide {
                    path: p,
                    forced: true,
                });
            }
        }
        // The same secrets under the other names a grant gives them.
        let named: Vec<(PathBuf, bool)> =
            hides.iter().map(|h| (h.path.clone(), h.forced)).collect();
        let granted: Vec<PathBuf> = grants.iter().map(|g| g.path.clone()).collect();
        hides.extend(
            crate::aliases::hidden_aliases(&named, &granted)
                .into_iter()
                .map(|(path, forced)| Hide { path, forced }),
        );
        hides.sort_by_key(|h| h.path.components().count());
        hides.dedup_by(|a, b| {
            a.path == b.path && {
                b.forced |= a.forced;
                true
            }
        });
        // A workspace *inside* a hidden directory is mounted back on top of
        // it (as bubblewrap does): the sandbox sees the workspace and nothing
        // else of that directory. A workspace that *is* one would be covered.
        if let Some(h) = hides.iter().find(|h| h.forced && h.path == workspace) {
            return Err(ShimError::InvalidSpec(format!(
                "workspace {} must stay hidden from the sandbox (it holds Airlock's own files or was given to --hide): use a subdirectory of it, or another directory, as the workspace",
                h.path.display()
            )));
        }

        let identity = if nix::unistd::geteuid().is_root() {
            match spec.user {
                Some(u) => Identity::Switch(u),
                None => Identity::Root,
            }
        } else {
            let (uid, gid) = (
                nix::unistd::geteuid().as_raw(),
                nix::unistd::getegid().as_raw(),
            );
            if let Some(u) = spec.user
                && (u.uid, u.gid) != (uid, gid)
            {
                return Err(ShimError::InvalidSpec(format!(
                    "--user {}:{} needs root: run airlock as root or drop --user",
                    u.uid, u.gid
                )));
            }
            Identity::Unprivileged {
                uid: nix::unistd::geteuid().as_raw(),
                gid: nix::unistd::getegid().as_raw(),
            }
        };

        Ok(Self {
            argv,
            envp,
            search_path,
            workspace,
            grants,
            hides,
            resolv_target: existing(Path::new("/etc/resolv.conf")).or_else(|| {
                // A dangling symlink (e.g. into an absent /run/systemd) still names the target.
                std::fs::read_link("/etc/resolv.conf")
                    .ok()
                    .map(|t| Path::new("/etc").join(t))
            }),
            hosts: std::fs::read(HOSTS_FILE).ok(),
            ca_targets: CA_BUNDLE_LOCATIONS
                .iter()
                .filter_map(|p| existing(Path::new(p)))
                .collect(),
            ca_bundle: spec.ca_bundle_pem.clone(),
            hostname: spec.hostname.clone(),
            limits: spec.limits.clone(),
            identity,
            rlimit_memory: None,
            rlimit_nproc: None,
            observe: spec.observe,
            allow_unix_sockets: spec.allow_unix_sockets,
            terminal: spec.terminal,
            session: spec.session,
        })
    }
}

/// The environment as execve(2) takes it, and the PATH that argv[0] is
/// looked up in (the environment's own, else a default).
pub(crate) fn environment(
    env: &[(OsString, OsString)],
) -> Result<(Vec<CString>, OsString), ShimError> {
    let mut envp = Vec::with_capacity(env.len());
    let mut search_path = OsString::from(DEFAULT_PATH);
    for (k, v) in env {
        if k.is_empty() || k.as_bytes().contains(&b'=') {
            return Err(ShimError::InvalidSpec(format!(
                "environment variable name {k:?} is empty or contains '=': fix the name"
            )));
        }
        if k == OsStr::new("PATH") {
            search_path = v.clone();
        }
        let mut kv = k.as_bytes().to_vec();
        kv.push(b'=');
        kv.extend_from_slice(v.as_bytes());
        envp.push(cstring(&kv, "environment variable")?);
    }
    Ok((envp, search_path))
}

/// Command arguments as execve(2) takes them.
pub(crate) fn arguments(argv: &[OsString]) -> Result<Vec<CString>, ShimError> {
    argv.iter()
        .map(|a| cstring(a.as_bytes(), "command argument"))
        .collect()
}
