//! Step 1 of bringing a sandbox up (docs/architecture.md, "`airlock run`"):
//! every path canonicalised, every grant, secret and limit resolved before
//! anything forks; then step 2, the spawn.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use airlock_auditor::{Isolation, OsText, SessionInfo, SessionMode, WritableDir};
use airlock_policy::Policy;
use airlock_proxy::approvals::FindSender;
use airlock_proxy::{
    ApprovalsConfig, CertificateAuthority, EventSink, PinnedHost, Proxy, ProxyConfig,
    ResolvedCredential,
};
use airlock_shim::pty::WindowSize;
use airlock_shim::{CA_BUNDLE_PATH, Limits, ObserveSpec, Sandbox, SandboxSpec};
use anyhow::{Context, bail};
use rustls::pki_types::CertificateDer;

use super::SandboxArgs;
use super::gvisor::{self, GvisorRun};
use super::wire::Spawned;
use super::withheld::Withheld;
use super::writable::{SecretFile, Writable};
use crate::observe::Terminal;
use crate::ship::{LiveShipper, ShipUrl};
use crate::{audit, policy_file, secrets};

/// Host secrets hidden when the command runs as uid 0 (root-owned files stay
/// readable by ownership even without capabilities). Not exhaustive: use
/// `--user` for untrusted code when airlock runs as root.
const ROOT_ONLY_SECRETS: [&str; 9] = [
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/ssh",
    "/etc/ssl/private",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/var/lib/docker",
];
/// Files up to this size are recorded with their content by default.
const DEFAULT_MAX_FILE_BYTES: u64 = 1024 * 1024;
/// Default size of the sandbox's private /tmp.
const DEFAULT_TMP_BYTES: u64 = 512 * 1024 * 1024;
/// The sandbox's PATH unless `--pass-env PATH` or `--env PATH=...` says
/// otherwise: Debian's default for root, which also covers every user.
pub(crate) const SANDBOX_PATH: &str =
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// Variables that name the session's CA bundle for common clients.
const CA_VARIABLES: [&str; 6] = [
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "GIT_SSL_CAINFO",
    "PIP_CERT",
];
/// System CA bundles, first found wins, combined with the session CA.
const SYSTEM_BUNDLES: [&str; 4] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
];

/// The audit store of a recorded session, both paths absolute.
pub(crate) struct AuditPaths {
    pub db: PathBuf,
    pub key: PathBuf,
    /// `--label`s, recorded with the session.
    pub labels: BTreeMap<String, String>,
    /// `--audit-ship`: the central store the record is shipped to.
    pub ship: Option<ShipUrl>,
    /// `--audit-ship-required`: decisions wait until they are shipped.
    pub ship_required: bool,
}

/// What the proxy needs, resolved up front; it is built once the sandbox
/// has handed over its sockets.
pub(crate) struct ProxyPlan {
    pub policy: Policy,
    pub credentials: Vec<ResolvedCredential>,
    ca: CertificateAuthority,
    pins: Vec<PinnedHost>,
    upstream_roots: Vec<CertificateDer<'static>>,
    audit_sync: bool,
    worker_threads: usize,
    approvals: ApprovalsConfig,
}

impl ProxyPlan {
    /// The proxy; `session` names it to approvers, and `find_sender`
    /// tells them which command sent a held request.
    pub(crate) fn into_proxy(
        self,
        events: Arc<dyn EventSink>,
        session: String,
        find_sender: Option<FindSender>,
    ) -> anyhow::Result<Proxy> {
        let mut config = ProxyConfig::new(self.policy, Arc::new(self.ca), events);
        config.approvals = ApprovalsConfig {
            session,
            find_sender,
            ..self.approvals
        };
        config.credentials = self.credentials;
        config.pins = self.pins;
        config.upstream_roots = self.upstream_roots;
        config.audit_sync = self.audit_sync;
        config.worker_threads = self.worker_threads;
        Ok(Proxy::new(config)?)
    }
}

/// Step 1 (plan): every path canonicalised, every grant, secret and limit
/// resolved before anything forks.
pub(crate) struct Plan {
    proxy: ProxyPlan,
    audit: Option<AuditPaths>,
    mode: SessionMode,
    limits_record: serde_json::Value,
    max_file_bytes: u64,
    /// The record budget (`--audit-max-session`).
    max_session_bytes: u64,
    /// The host directories the sandbox writes, for the record (undo).
    writable_dirs: Vec<WritableDir>,
    pty_size: Option<WindowSize>,
    spec: SandboxSpec,
    /// Pipes for the command's output when there is no pty (step 8).
    terminal: Option<Terminal>,
    /// The environment every command starts with (a session's steps add to it).
    env: Vec<(OsString, OsString)>,
    /// What no variable of it may carry, a step's own included.
    withheld: Withheld,
    /// The kernel boundary, for the record.
    isolation: Isolation,
    /// `--isolation gvisor`: the command, set aside for runsc.
    gvisor: Option<GvisorRun>,
}

impl Plan {
    /// The workspace, as the sandbox mounts it (at its host path).
    pub(crate) fn workspace(&self) -> &Path {
        &self.spec.workspace
    }
}

/// What the sandbox is for.
pub(crate) enum Purpose {
    /// `airlock run`: this command, on a pty of this size when Some.
    Run {
        command: Vec<OsString>,
        pty_size: Option<WindowSize>,
    },
    /// `airlock session start`: nothing runs until the first step.
    Session,
}

impl Plan {
    pub(crate) fn new(args: &SandboxArgs, purpose: Purpose) -> anyhow::Result<Self> {
        airlock_shim::check_prerequisites()?;
        let runsc = match (args.isolation, &purpose) {
            (Isolation::Namespaces, _) => None,
            // A live session: one runsc container holds it, each step is
            // a `runsc exec` (gvisor/session.rs); a terminal step is
            // refused when it is asked for.
            (Isolation::Gvisor, Purpose::Session) => {
                let runsc = gvisor::find_runsc()?;
                gvisor::refuse_unmatched(false, args.pids)?;
                gvisor::refuse_unsayable(&[], mount_paths(args))?;
                Some(runsc)
            }
            (Isolation::Gvisor, Purpose::Run { pty_size, command }) => {
                let runsc = gvisor::find_runsc()?;
                gvisor::refuse_unmatched(pty_size.is_some(), args.pids)?;
                gvisor::refuse_unsayable(command, mount_paths(args))?;
                Some(runsc)
            }
        };
        let policy = match &args.policy {
            Some(path) => policy_file::load(path)?,
            None => Policy::deny_all(),
        };
        let workspace = workspace(args)?;
        let writable = Writable::new(&workspace, &args.rw);
        if args.policy.is_some() {
            writable.refuse_policy(&policy)?;
        }
        let credentials = secrets::resolve_all(policy.credentials())?;
        let worker_threads = crate::serve::worker_threads()?;
        let ca = match &args.ca_dir {
            Some(dir) => CertificateAuthority::load(dir)?,
            None => CertificateAuthority::ephemeral()?,
        };
        let withheld = Withheld::new(&credentials, args.audit.audit_ship.as_ref())?;
        let env = sandbox_env(args, &credentials, &withheld)?;
        let audit = audit_paths(args, &writable)?;
        let writable_dirs = writable_dirs(&workspace, &args.rw);
        let hide = hidden_paths(args, &workspace, &writable, audit.as_ref())?;
        let limits = limits(args);
        let limits_record = limits_record(&limits);
        let max_file_bytes = args.audit_max_file.unwrap_or(DEFAULT_MAX_FILE_BYTES);
        let (command, pty_size, mode) = match purpose {
            Purpose::Run { command, pty_size } => (command, pty_size, SessionMode::Run),
            Purpose::Session => (Vec::new(), None, SessionMode::Session),
        };
        let session = mode == SessionMode::Session;
        let mut spec = SandboxSpec {
            command,
            session,
            workspace,
            ro: args.ro.clone(),
            rw: args.rw.clone(),
            hide,
            limits,
            env: env.clone(),
            user: args.user,
            ca_bundle_pem: Some(ca_bundle(&ca)),
            hostname: "airlock".into(),
            allow_unix_sockets: args.allow_unix_sockets,
            observe: audit.as_ref().map(|_| ObserveSpec { max_file_bytes }),
            // A session's helpers hold nothing of the caller's: its
            // server's stdio goes to `airlock session start` until ready.
            stdio: if session { Some(null_stdio()?) } else { None },
            terminal: pty_size.is_some(),
        };
        // Under gVisor the namespace sandbox runs nothing itself: it holds
        // the network namespace runsc joins, and reconciles the writable
        // mounts at the end.
        let gvisor = runsc.map(|runsc| -> anyhow::Result<GvisorRun> {
            let run = GvisorRun::new(runsc, &spec);
            spec.command.clear();
            spec.session = true;
            spec.stdio = Some(null_stdio()?);
            Ok(run)
        });
        let gvisor = gvisor.transpose()?;
        // A session's steps bring their own stdio.
        let terminal = match session {
            true => None,
            false => output_pipes(pty_size.is_some(), audit.is_some())?,
        };
        let upstream_roots = args.upstream.roots()?;
        let approvals = args.approvals.config(&upstream_roots, None)?;
        let proxy = ProxyPlan {
            policy,
            credentials,
            ca,
            pins: args.upstream.resolve.clone(),
            upstream_roots,
            audit_sync: args.audit.decisions_wait(),
            worker_threads,
            approvals,
        };
        Ok(Self {
            proxy,
            audit,
            mode,
            limits_record,
            max_file_bytes,
            max_session_bytes: args.audit.max_session_bytes(),
            writable_dirs,
            pty_size,
            spec,
            terminal,
            env,
            withheld,
            isolation: args.isolation,
            gvisor,
        })
    }

    /// Steps 2, 3 and 5 (spawn, network, mounts) in the shim, while the
    /// audit store opens: the two are independent until the command is
    /// released (step 6), and both take milliseconds.
    pub(crate) fn spawn(self) -> anyhow::Result<Spawned> {
        let Self {
            proxy,
            audit,
            mode,
            limits_record,
            max_file_bytes,
            max_session_bytes,
            writable_dirs,
            pty_size,
            mut spec,
            terminal,
            env,
            withheld,
            isolation,
            mut gvisor,
        } = self;
        let shipping = audit
            .as_ref()
            .and_then(|a| Some((a.db.clone(), a.ship.clone()?, a.ship_required)));
        let beginning = audit.map(
            |AuditPaths {
                 db, key, labels, ..
             }| {
                let info = SessionInfo {
                    // The same cap for the observer and the record.
                    max_file_bytes,
                    max_session_bytes: Some(max_session_bytes),
                    writable_dirs,
                    terminal: pty_size.map(|s| (s.cols, s.rows)),
                    isolation,
                    ..audit::session_info(&proxy.policy, mode, limits_record, labels)
                };
                let credentials = proxy.credentials.clone();
                std::thread::spawn(move || audit::begin(&db, Some(&key), info, &credentials))
            },
        );
        let readers = terminal.map(|terminal| {
            let (stdio, readers) = terminal.split();
            match &mut gvisor {
                Some(run) => run.set_stdio(stdio),
                None => spec.stdio = Some(stdio),
            }
            readers
        });
        // Forked; the sandbox sets itself up while the record begins here
        // and the proxy is built (`Spawned::wire`).
        let sandbox = Sandbox::start(spec);
        let recorder = match beginning {
            Some(thread) => Some(
                thread
                    .join()
                    .map_err(|_| anyhow::anyhow!("opening the audit database panicked"))??,
            ),
            None => None,
        };
        let shipper = match (&recorder, shipping) {
            (Some(recorder), Some((db, to, required))) => {
                Some((LiveShipper::start(&db, &to, recorder)?, required))
            }
            _ => None,
        };
        Ok(Spawned {
            env,
            withheld,
            proxy,
            pty_size,
            sandbox: sandbox?,
            recorder,
            shipper,
            readers,
            gvisor,
        })
    }
}

/// With a pty the relay records the output; otherwise pipes carry it,
/// when recording or when the caller's terminal must stay outside.
fn output_pipes(pty: bool, audited: bool) -> anyhow::Result<Option<Terminal>> {
    Ok(match pty {
        false if audited || crate::terminal::caller_has_one() => Some(Terminal::new()?),
        _ => None,
    })
}

/// The workspace and each `--rw` grant, mounted at their canonical host
/// paths (the shim's plan), so the sandbox sees each where the host has it.
fn writable_dirs(workspace: &Path, rw: &[PathBuf]) -> Vec<WritableDir> {
    let dir = |path: &Path, workspace: bool| {
        let path = OsText::from(path.canonicalize().unwrap_or_else(|_| path.to_path_buf()));
        WritableDir {
            sandbox: path.clone(),
            host: path,
            workspace,
        }
    };
    std::iter::once(dir(workspace, true))
        .chain(rw.iter().map(|p| dir(p, false)))
        .collect()
}

fn workspace(args: &SandboxArgs) -> anyhow::Result<PathBuf> {
    let workspace = match &args.workspace {
        Some(dir) => dir.clone(),
        None => std::env::current_dir().context("finding the current directory")?,
    };
    workspace
        .canonicalize()
        .with_context(|| format!("--workspace {}: no such directory", workspace.display()))
}

/// The audit store's paths, unless `--no-audit`; refused when the sandbox
/// could write them.
fn audit_paths(args: &SandboxArgs, writable: &Writable) -> anyhow::Result<Option<AuditPaths>> {
    if args.no_audit {
        return Ok(None);
    }
    let db = args.audit.db()?;
    let key = args.audit.key()?;
    // Absolute, so that their directories are hidden from the sandbox: a
    // bare "audit.key" has the parent "", which names nothing to hide.
    let db = std::path::absolute(&db)
        .with_context(|| format!("--audit-db {}: cannot make it absolute", db.display()))?;
    let key = std::path::absolute(&key)
        .with_context(|| format!("--audit-key {}: cannot make it absolute", key.display()))?;
    writable.refuse_audit_db(&db)?;
    Ok(Some(AuditPaths {
        db,
        key,
        labels: args.audit.labels()?,
        ship: args.audit.audit_ship.clone(),
        ship_required: args.audit.audit_ship_required,
    }))
}

/// What the sandbox must not see: `--hide`, the CA and audit directories
/// and, for a command that keeps uid 0, the usual host secrets.
fn hidden_paths(
    args: &SandboxArgs,
    workspace: &Path,
    writable: &Writable,
    audit: Option<&AuditPaths>,
) -> anyhow::Result<Vec<PathBuf>> {
    let (db, key) = audit.map(|a| (a.db.parent(), a.key.parent())).unzip();
    refuse_hidden_workspace(
        workspace,
        &[
            (db.flatten(), "holds the audit database", "--audit-db"),
            (key.flatten(), "holds the audit signing key", "--audit-key"),
            (
                args.ca_dir.as_deref(),
                "holds the CA's private key",
                "--ca-dir",
            ),
        ],
    )?;
    if let Some(audit) = audit {
        writable.refuse_secret_file(&audit.key, SecretFile::AUDIT_KEY)?;
    }
    if let Some(dir) = &args.ca_dir {
        writable.refuse_secret_file(
            &dir.join(airlock_proxy::ca::CA_KEY_FILE),
            SecretFile::CA_KEY,
        )?;
    }
    let mut hide = args.hide.clone();
    hide.extend(args.ca_dir.iter().cloned());
    // The secret files themselves as well as their directories: a grant
    // inside such a directory (a workspace beside the record is one) is
    // mounted on top of the directory's hide, and a grant that is the file
    // or holds it would show it. Hidden by name, the file stays covered
    // whatever grant is around it (`--ro KEY`, `--rw CA-DIR`).
    // This user's own defaults too, whatever this session records with:
    // the persistent CA that `airlock proxy` and the sidecar mint with, and
    // the key and record every other session uses.
    let default_ca = crate::paths::default_ca_dir().ok();
    let mut files: Vec<PathBuf> = args
        .ca_dir
        .iter()
        .chain(&default_ca)
        .map(|dir| dir.join(airlock_proxy::ca::CA_KEY_FILE))
        .collect();
    if let (Ok(db), Ok(key)) = (
        crate::paths::default_audit_db(),
        crate::paths::default_audit_key(),
    ) {
        files.extend(record_files(&db, &key));
    }
    // No sandbox sees a control socket, wherever the runtime directory is:
    // one under /run or /tmp is out of sight already (their own tmpfs), one
    // elsewhere ($XDG_RUNTIME_DIR anywhere) would not be.
    // Made if missing, so that a session started later is hidden too.
    let sessions =
        crate::paths::session_dir().unwrap_or_else(|_| crate::paths::session_dir_location());
    if !workspace.starts_with(&sessions) {
        hide.push(sessions);
    }
    if let Some(AuditPaths { db, key, ship, .. }) = audit {
        // Both where they are named and where they lead: a link's target
        // is the file SQLite and the key loader open.
        for path in [db, key] {
            let named = path.parent().map(Path::to_owned);
            let real = path
                .canonicalize()
                .ok()
                .and_then(|p| p.parent().map(Path::to_owned))
                .filter(|real| named.as_ref() != Some(real));
            hide.extend(named.into_iter().chain(real));
        }
        files.extend(record_files(db, key));
        // The central store's password opens the fleet's record: the
        // sandbox never reads the file it comes from.
        if ship.is_some()
            && let Some(file) = std::env::var_os(airlock_auditor::postgres::PASSWORD_FILE_ENV)
        {
            let file = std::path::absolute(file)?;
            writable.refuse_secret_file(&file, SecretFile::STORE_PASSWORD)?;
            hide.push(file);
        }
    }
    for file in files {
        let real = file.canonicalize().ok().filter(|real| *real != file);
        hide.extend(std::iter::once(file).chain(real));
    }
    if nix::unistd::geteuid().is_root() && args.user.is_none() {
        // The command keeps uid 0 (without capabilities), so root-only files
        // stay readable by ownership; hide the usual host secrets.
        hide.extend(ROOT_ONLY_SECRETS.iter().map(PathBuf::from));
    }
    hide.retain(|p| p.exists());
    // This session's key is often the default one: each path once.
    hide.sort();
    hide.dedup();
    Ok(hide)
}

/// A record's files: the database, SQLite's write-ahead log and its index
/// (which hold the newest pages), and the key that signs it.
fn record_files(db: &Path, key: &Path) -> [PathBuf; 4] {
    let with_suffix = |suffix: &str| {
        let mut name = db.as_os_str().to_owned();
        name.push(suffix);
        PathBuf::from(name)
    };
    [
        db.to_owned(),
        with_suffix("-wal"),
        with_suffix("-shm"),
        key.to_owned(),
    ]
}

fn limits(args: &SandboxArgs) -> Limits {
    Limits {
        memory_bytes: args.memory,
        pids: args.pids,
        cpus: args.cpus,
        timeout: args.timeout,
        tmp_bytes: args.tmp_size.unwrap_or(DEFAULT_TMP_BYTES),
    }
}

/// The limits as the session record shows them.
fn limits_record(limits: &Limits) -> serde_json::Value {
    serde_json::json!({
        "memory_bytes": limits.memory_bytes,
        "pids": limits.pids,
        "cpus": limits.cpus,
        "timeout_s": limits.timeout.map(|t| t.as_secs_f64()),
        "tmp_bytes": limits.tmp_bytes,
    })
}

/// The system roots plus the session CA, for the sandbox's trust stores.
fn ca_bundle(ca: &CertificateAuthority) -> Vec<u8> {
    let mut bundle = SYSTEM_BUNDLES
        .iter()
        .find_map(|p| std::fs::read(p).ok())
        .unwrap_or_default();
    if !bundle.is_empty() && !bundle.ends_with(b"\n") {
        bundle.push(b'\n');
    }
    bundle.extend_from_slice(ca.cert_pem().as_bytes());
    bundle
}

/// A clean environment: a fixed PATH, HOME, LANG, TERM, the CA variables, the
/// credential placeholders, and only what the caller passes explicitly.
fn sandbox_env(
    args: &SandboxArgs,
    credentials: &[ResolvedCredential],
    withheld: &Withheld,
) -> anyhow::Result<Vec<(OsString, OsString)>> {
    let mut env: Vec<(String, OsString)> = Vec::new();
    let mut set = |key: &str, value: OsString| {
        env.retain(|(k, _)| k != key);
        env.push((key.to_owned(), value));
    };
    // Fixed, not the caller's: the host's PATH names directories of its
    // user (~/.cargo/bin, pyenv shims) that the sandbox hides anyway, and
    // would put them in the record. `--pass-env PATH` passes it.
    set("PATH", SANDBOX_PATH.into());
    // The caller's home is hidden; the private /tmp is writable for caches.
    set("HOME", "/tmp".into());
    for key in ["LANG", "LC_ALL", "TERM"] {
        if let Some(value) = std::env::var_os(key) {
            set(key, value);
        }
    }
    for key in CA_VARIABLES {
        set(key, CA_BUNDLE_PATH.into());
    }
    for cred in credentials {
        if let Some(ph) = &cred.placeholder {
            set(&ph.variable, ph.dummy.clone().into());
        }
    }
    for key in &args.pass_env {
        let Some(value) = std::env::var_os(key) else {
            bail!("--pass-env {key}: {key} is not set in airlock's environment");
        };
        withheld.refuse_in(key, &value.to_string_lossy())?;
        set(key, value);
    }
    for (key, value) in &args.env {
        withheld.refuse_in(key, value)?;
        set(key, value.into());
    }
    Ok(env.into_iter().map(|(k, v)| (k.into(), v)).collect())
}

/// /dev/null three times: stdio for sandbox helpers that must hold nothing
/// of the caller's.
fn null_stdio() -> anyhow::Result<[std::os::fd::OwnedFd; 3]> {
    let open = || -> anyhow::Result<std::os::fd::OwnedFd> {
        Ok(std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/null")
            .context("opening /dev/null")?
            .into())
    };
    Ok([open()?, open()?, open()?])
}

/// A directory the sandbox must not see cannot be the workspace (a workspace
/// inside one is fine: it is mounted back on top of the hidden directory).
/// Each entry: the directory, why it is hidden, and the option that moves it.
fn refuse_hidden_workspace(
    workspace: &Path,
    hidden: &[(Option<&Path>, &str, &str)],
) -> anyhow::Result<()> {
    for (dir, why, option) in hidden {
        let Some(dir) = dir else { continue };
        if dir.canonicalize().is_ok_and(|dir| dir == workspace) {
            bail!(
                "the workspace {} {why}, which the sandbox must not see: use a subdirectory as the workspace, or move it with {option}",
                workspace.display()
            );
        }
    }
    Ok(())
}

/// The paths the sandbox's mounts name on the command line.
fn mount_paths(args: &SandboxArgs) -> impl Iterator<Item = &Path> {
    args.workspace
        .iter()
        .chain(&args.ro)
        .chain(&args.rw)
        .chain(&args.hide)
        .map(PathBuf::as_path)
}
