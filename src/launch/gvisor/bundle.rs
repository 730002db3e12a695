//! The OCI bundle runsc runs: the namespace sandbox's filesystem view,
//! limits and identity said in gVisor's terms, and the network namespace
//! it joins (the namespace sandbox's, whose only way out is the proxy).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use airlock_shim::{CA_BUNDLE_PATH, DNS_ADDR, SandboxSpec};
use anyhow::{Context, bail};
use serde_json::{Value, json};

/// System CA bundle paths the session's bundle is also mounted over, when
/// the host has them (the namespace sandbox does the same).
const SYSTEM_BUNDLES: [&str; 4] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
];

/// cgroup v1/v2 CPU period for `--cpus`, in microseconds.
const CPU_PERIOD_US: u64 = 100_000;

/// Writes `config.json` (and the files it mounts) into `dir`, for
/// `command` run as `spec` says, in the network namespace at `netns`.
pub(super) fn write(
    dir: &Path,
    spec: &SandboxSpec,
    command: &[std::ffi::OsString],
    netns: &Path,
) -> anyhow::Result<()> {
    let files = dir.join("files");
    std::fs::create_dir_all(&files).context("creating the gVisor bundle")?;
    let ca = files.join("ca-bundle.pem");
    std::fs::write(&ca, spec.ca_bundle_pem.as_deref().unwrap_or_default())
        .context("writing the CA bundle for gVisor")?;
    let resolv = files.join("resolv.conf");
    std::fs::write(&resolv, format!("nameserver {}\n", DNS_ADDR.ip()))
        .context("writing resolv.conf for gVisor")?;
    let config = json!({
        "ociVersion": "1.0.2",
        "process": process(spec, command)?,
        "root": { "path": "/", "readonly": true },
        "hostname": spec.hostname,
        "mounts": mounts(spec, &ca, &resolv)?,
        "linux": linux(spec, netns)?,
    });
    std::fs::write(dir.join("config.json"), serde_json::to_vec_pretty(&config)?)
        .context("writing the gVisor bundle's config.json")?;
    Ok(())
}

fn process(spec: &SandboxSpec, command: &[std::ffi::OsString]) -> anyhow::Result<Value> {
    step_process(spec, command, &spec.env, &spec.workspace)
}

/// The OCI process of a live session's step (`runsc exec --process`):
/// the session's identity and no capabilities, the step's own argv,
/// environment and working directory.
pub(super) fn step_process(
    spec: &SandboxSpec,
    command: &[std::ffi::OsString],
    env: &[(std::ffi::OsString, std::ffi::OsString)],
    cwd: &Path,
) -> anyhow::Result<Value> {
    let args: Vec<&str> = command
        .iter()
        .map(|a| argument_text(a))
        .collect::<anyhow::Result<_>>()?;
    let env: Vec<String> = env
        .iter()
        .map(|(k, v)| Ok(format!("{}={}", text(k, "--env")?, text(v, "--env")?)))
        .collect::<anyhow::Result<_>>()?;
    let (uid, gid) = spec.user.map_or_else(
        || {
            (
                nix::unistd::geteuid().as_raw(),
                nix::unistd::getegid().as_raw(),
            )
        },
        |u| (u.uid, u.gid),
    );
    Ok(json!({
        "args": args,
        "env": env,
        "cwd": path_text(cwd)?,
        "user": { "uid": uid, "gid": gid },
        // No capabilities inside gVisor's kernel either, and no way to
        // gain them: the namespace sandbox's rule.
        "capabilities": { "bounding": [], "effective": [], "inheritable": [], "permitted": [], "ambient": [] },
        "noNewPrivileges": true,
    }))
}

/// The namespace sandbox's view, in its order: the read-only root, a
/// private /proc, /tmp and /run, the grants, then the hides (which win
/// over grants), then the workspace (mounted back on top of a hidden
/// directory it lives in), then the CA bundle and resolv.conf.
fn mounts(spec: &SandboxSpec, ca: &Path, resolv: &Path) -> anyhow::Result<Vec<Value>> {
    let mut mounts = vec![
        json!({ "destination": "/proc", "type": "proc", "source": "proc" }),
        json!({
            "destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
            "options": ["nosuid", "nodev", format!("size={}", spec.limits.tmp_bytes), "mode=1777"],
        }),
        json!({
            "destination": "/run", "type": "tmpfs", "source": "tmpfs",
            "options": ["nosuid", "nodev", "size=16m", "mode=755"],
        }),
    ];
    let bind = |path: &Path, ro: bool| -> anyhow::Result<Value> {
        let p = path_text(path)?;
        Ok(json!({
            "destination": p, "type": "bind", "source": p,
            "options": ["rbind", if ro { "ro" } else { "rw" }],
        }))
    };
    let hide = |path: &Path| -> anyhow::Result<Value> {
        let p = path_text(path)?;
        Ok(if path.is_dir() {
            json!({ "destination": p, "type": "tmpfs", "source": "tmpfs", "options": ["ro", "mode=755"] })
        } else {
            json!({ "destination": p, "type": "bind", "source": "/dev/null", "options": ["rbind", "ro"] })
        })
    };
    // The namespace sandbox's own hides (each home's secrets, the homes,
    // the host's secrets): covered first, the grants come back on top.
    // What lives under /tmp and /run is not there: gVisor's are fresh.
    let defaults: Vec<(PathBuf, bool)> = airlock_shim::default_hides()
        .into_iter()
        .filter(|(p, _)| !(p.starts_with("/tmp") || p.starts_with("/run")))
        .collect();
    // One under another is covered already (mounting it would show its
    // name in the outer one).
    for (path, _) in &defaults {
        let covered = defaults
            .iter()
            .any(|(outer, _)| outer != path && path.starts_with(outer));
        if !covered {
            mounts.push(hide(path)?);
        }
    }
    // A relative --hide (or a relative --audit-db's directory) means what
    // the namespace sandbox makes of it, a path from airlock's working
    // directory: OCI wants absolute destinations (runsc refuses the spec),
    // and only an absolute path can be found inside a grant below.
    let hides = spec
        .hide
        .iter()
        .map(|p| canonical(p, "--hide"))
        .collect::<anyhow::Result<Vec<PathBuf>>>()?;
    let canonical_all = |paths: &[PathBuf], option: &str| -> anyhow::Result<Vec<PathBuf>> {
        paths.iter().map(|p| canonical(p, option)).collect()
    };
    let (ro, rw) = (
        canonical_all(&spec.ro, "--ro")?,
        canonical_all(&spec.rw, "--rw")?,
    );
    let workspace = canonical(&spec.workspace, "--workspace")?;
    let grants: Vec<PathBuf> = ro.iter().chain(&rw).chain([&workspace]).cloned().collect();
    // As in the namespace sandbox: a secret inside a grant stays hidden
    // unless a grant names it or something in it; Airlock's own files and
    // --hide stay hidden even then.
    let mut hidden: Vec<(PathBuf, bool)> = defaults
        .iter()
        .cloned()
        .chain(hides.iter().map(|p| (p.clone(), true)))
        .collect();
    // The same secrets under the other names a grant gives them.
    hidden.extend(airlock_shim::hidden_aliases(&hidden, &grants));
    if hidden.iter().any(|(p, forced)| *forced && *p == workspace) {
        anyhow::bail!(
            "workspace {} must stay hidden from the sandbox (it holds Airlock's own files or was given to --hide, by this name or another): use another directory as the workspace",
            workspace.display()
        );
    }
    // A grant that is such a directory under another name is not bound
    // at all: its hide below is all there is at its path (runsc lets a
    // bind win over a later mount at the same destination).
    let hidden_whole = |g: &Path| hidden.iter().any(|(p, forced)| *forced && p == g);
    for (paths, ro) in [(&ro, true), (&rw, false)] {
        for path in paths.iter().filter(|p| !hidden_whole(p)) {
            mounts.push(bind(path, ro)?);
        }
    }
    // Outermost only, as the namespace sandbox does: what is under a hidden
    // directory is gone with it (a file hidden there would show up as an
    // empty one); one under a grant is hidden again after the grants.
    let nested = |p: &Path| hides.iter().any(|h| h != p && p.starts_with(h));
    for path in hides.iter().filter(|p| !nested(p)) {
        mounts.push(hide(path)?);
    }
    mounts.push(bind(&spec.workspace, false)?);
    let again: Vec<PathBuf> = hidden
        .into_iter()
        .filter(|(path, forced)| {
            let inside = grants.iter().any(|g| path.starts_with(g));
            let granted = grants.iter().any(|g| g.starts_with(path));
            inside && (*forced || !granted)
        })
        .map(|(path, _)| path)
        .collect();
    for path in again
        .iter()
        .filter(|p| !again.iter().any(|o| o != *p && p.starts_with(o)))
    {
        mounts.push(hide(path)?);
    }
    let file = |source: &Path, destination: &str| -> anyhow::Result<Value> {
        Ok(json!({
            "destination": destination, "type": "bind", "source": path_text(source)?,
            "options": ["rbind", "ro"],
        }))
    };
    mounts.push(file(ca, CA_BUNDLE_PATH)?);
    for bundle in SYSTEM_BUNDLES.iter().filter(|p| Path::new(p).is_file()) {
        mounts.push(file(ca, bundle)?);
    }
    mounts.push(file(resolv, "/etc/resolv.conf")?);
    Ok(mounts)
}

fn linux(spec: &SandboxSpec, netns: &Path) -> anyhow::Result<Value> {
    let limits = &spec.limits;
    let mut resources = serde_json::Map::new();
    if let Some(bytes) = limits.memory_bytes {
        resources.insert("memory".into(), json!({ "limit": bytes, "swap": bytes }));
    }
    if let Some(cpus) = limits.cpus {
        let quota = (cpus * CPU_PERIOD_US as f64).round() as u64;
        resources.insert(
            "cpu".into(),
            json!({ "quota": quota.max(1000), "period": CPU_PERIOD_US }),
        );
    }
    Ok(json!({
        "namespaces": [
            { "type": "pid" }, { "type": "mount" }, { "type": "uts" }, { "type": "ipc" },
            // The namespace sandbox's: its nftables send every TCP
            // connection and DNS query to the proxy, and runsc's sentry
            // (--network=host) makes its sockets there.
            { "type": "network", "path": path_text(netns)? },
        ],
        "resources": resources,
    }))
}

fn canonical(path: &Path, option: &str) -> anyhow::Result<PathBuf> {
    path.canonicalize()
        .with_context(|| format!("{option} {}: no such path", path.display()))
}

pub(super) fn path_text(path: &Path) -> anyhow::Result<&str> {
    text(path.as_os_str(), "a path")
}

pub(super) fn argument_text(arg: &OsStr) -> anyhow::Result<&str> {
    text(arg, "the command's argument")
}

/// OCI's config is JSON text: a name that is not UTF-8 cannot be said in it.
/// The refusal names it escaped (`\xff`), as the record prints names: a
/// lossy U+FFFD would not say which bytes were refused.
fn text<'a>(s: &'a OsStr, what: &str) -> anyhow::Result<&'a str> {
    match s.to_str() {
        Some(t) => Ok(t),
        None => bail!(
            "{what} '{}' is not UTF-8, which --isolation gvisor cannot pass to runsc; rename it or use --isolation namespaces",
            airlock_auditor::escape::bytes(s.as_bytes())
        ),
    }
}
