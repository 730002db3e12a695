//! The live sessions of this user: one control socket each in
//! `paths::session_dir()` (`<id>.sock`), a symlink per name
//! (`name.<name>` → the id) and the serving process's log (`<id>.log`).
//! Finding a session by id, id prefix or name happens here only.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::net::UnixStream;

use super::protocol::{self, Reply, Request, SessionInfo};

/// How long `ls` and the lookups wait for a session to answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(3);
const NAME_PREFIX: &str = "name.";

/// The directory and the files of one session.
#[derive(Debug, Clone)]
pub(crate) struct Registry {
    dir: PathBuf,
}

impl Registry {
    pub(crate) fn open() -> anyhow::Result<Self> {
        Ok(Self {
            dir: crate::paths::session_dir()?,
        })
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    pub(crate) fn socket(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.sock"))
    }

    pub(crate) fn log(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.log"))
    }

    fn name_link(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{NAME_PREFIX}{name}"))
    }

    /// Reserve `name` for session `id` (atomically: symlink(2) fails when it
    /// exists). A name whose session is gone is taken over.
    pub(crate) async fn claim_name(&self, name: &str, id: &str) -> anyhow::Result<()> {
        validate_name(name)?;
        let link = self.name_link(name);
        for _ in 0..2 {
            match std::os::unix::fs::symlink(id, &link) {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let holder = std::fs::read_link(&link)
                        .ok()
                        .and_then(|p| p.to_str().map(str::to_owned))
                        .unwrap_or_default();
                    if self.alive(&holder).await {
                        bail!(
                            "a session named {name} is already live ({holder}): choose another --name, or stop it with `airlock session stop {name}`"
                        );
                    }
                    let _ = std::fs::remove_file(&link);
                }
                Err(e) => {
                    return Err(e).with_context(|| format!("reserving the name {name}"));
                }
            }
        }
        bail!("could not reserve the name {name}: try again")
    }

    /// Remove what a session left here.
    pub(crate) fn remove(&self, id: &str, name: Option<&str>) {
        let _ = std::fs::remove_file(self.socket(id));
        if let Some(name) = name {
            let link = self.name_link(name);
            if std::fs::read_link(&link).is_ok_and(|t| t == Path::new(id)) {
                let _ = std::fs::remove_file(link);
            }
        }
    }

    /// Bind the control socket, owner-only.
    pub(crate) fn bind(&self, id: &str) -> anyhow::Result<std::os::unix::net::UnixListener> {
        let path = self.socket(id);
        let listener = std::os::unix::net::UnixListener::bind(&path)
            .with_context(|| format!("binding the control socket {}", path.display()))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .with_context(|| format!("making {} owner-only", path.display()))?;
        Ok(listener)
    }

    fn ids(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut ids: Vec<String> = entries
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().into_string().ok())
            .filter_map(|n| n.strip_suffix(".sock").map(str::to_owned))
            .collect();
        ids.sort();
        ids
    }

    /// Logs whose socket is gone: their sessions ended (a server makes its
    /// socket before its log and removes it first), some killed before
    /// this version removed their empty logs.
    fn sweep_orphan_logs(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for file in entries.filter_map(Result::ok).map(|e| e.file_name()) {
            let Some(id) = file.to_str().and_then(|f| f.strip_suffix(".log")) else {
                continue;
            };
            if !self.socket(id).exists() {
                self.remove_empty_log(id);
            }
        }
    }

    fn names(&self) -> Vec<(String, String)> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        entries
            .filter_map(Result::ok)
            .filter_map(|e| {
                let file = e.file_name().into_string().ok()?;
                let name = file.strip_prefix(NAME_PREFIX)?.to_owned();
                let id = std::fs::read_link(e.path()).ok()?.to_str()?.to_owned();
                Some((name, id))
            })
            .collect()
    }

    /// Whether `id` may still be serving: only a socket that refuses or is
    /// missing means gone. One that is slow to answer (a busy or still
    /// starting session) is alive: its name must not be taken from it.
    async fn alive(&self, id: &str) -> bool {
        !id.is_empty()
            && match self.info(id).await {
                Ok(_) => true,
                Err(e) => !gone(&e),
            }
    }

    /// Ask one session about itself. A socket nobody serves (its process
    /// was killed) is removed, with the names pointing at it.
    pub(crate) async fn info(&self, id: &str) -> anyhow::Result<SessionInfo> {
        let reply = match self.ask(id, &Request::Info).await {
            Ok(reply) => reply,
            Err(e) => {
                if gone(&e) {
                    self.forget(id);
                }
                return Err(e);
            }
        };
        match (reply.ok, reply.session) {
            (true, Some(info)) => Ok(info),
            _ => bail!(reply.error.unwrap_or_else(|| "no answer".into())),
        }
    }

    /// Remove a dead session's socket and names, and its log if empty.
    fn forget(&self, id: &str) {
        let _ = std::fs::remove_file(self.socket(id));
        for (name, owner) in self.names() {
            if owner == id {
                let _ = std::fs::remove_file(self.name_link(&name));
            }
        }
        self.remove_empty_log(id);
    }

    /// A server that was killed cannot remove its log. An empty one says
    /// nothing and would only pile up; one with something in it is what
    /// the server said before it died, so it stays for whoever asks why.
    fn remove_empty_log(&self, id: &str) {
        let log = self.log(id);
        if std::fs::symlink_metadata(&log).is_ok_and(|m| m.is_file() && m.len() == 0) {
            let _ = std::fs::remove_file(log);
        }
    }

    /// One request, one answer line.
    pub(crate) async fn ask(&self, id: &str, request: &Request) -> anyhow::Result<Reply> {
        let exchange = async {
            let mut stream = self.connect(id).await?;
            protocol::write_line(&mut stream, request).await?;
            let reply: Option<Reply> = protocol::read_line(&mut stream).await?;
            reply.context("the session closed the connection without answering")
        };
        tokio::time::timeout(ANSWER_TIMEOUT, exchange)
            .await
            .with_context(|| format!("session {id} did not answer within {ANSWER_TIMEOUT:?}"))?
    }

    pub(crate) async fn connect(&self, id: &str) -> anyhow::Result<UnixStream> {
        Ok(UnixStream::connect(self.socket(id)).await?)
    }

    /// Every live session, in id order (dead ones are cleaned away). One
    /// whose server takes the connection but does not answer is listed as
    /// not answering, with what the socket tells of it.
    pub(crate) async fn list(&self) -> Vec<SessionInfo> {
        self.sweep_orphan_logs();
        let mut out = Vec::new();
        for id in self.ids() {
            match self.info(&id).await {
                Ok(info) => out.push(info),
                Err(e) if e.downcast_ref::<tokio::time::error::Elapsed>().is_some() => {
                    out.push(self.unanswered(&id).await);
                }
                Err(_) => {}
            }
        }
        out
    }

    /// What is known of a session that does not answer: its name, when its
    /// socket was made, and who serves it (SO_PEERCRED, unix(7)).
    async fn unanswered(&self, id: &str) -> SessionInfo {
        let started = std::fs::metadata(self.socket(id))
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0.0, |d| d.as_secs_f64());
        let server = match self.connect(id).await {
            Ok(stream) => stream.peer_cred().ok().and_then(|c| c.pid()).unwrap_or(0),
            Err(_) => 0,
        };
        SessionInfo {
            id: id.to_owned(),
            name: self
                .names()
                .into_iter()
                .find_map(|(name, owner)| (owner == id).then_some(name)),
            state: protocol::NOT_ANSWERING.into(),
            started,
            commands: 0,
            running: 0,
            policy: String::new(),
            pids: protocol::Pids { server, init: None },
            audit_session: None,
            workspace: None,
            idle_timeout_ms: None,
        }
    }

    /// SESSION as the user gave it: an id, a name, or a unique id prefix.
    pub(crate) async fn resolve(&self, given: &str) -> anyhow::Result<String> {
        let ids = self.ids();
        if ids.iter().any(|id| id == given) {
            return Ok(given.to_owned());
        }
        if let Some((_, id)) = self.names().into_iter().find(|(name, _)| name == given)
            && ids.contains(&id)
        {
            return Ok(id);
        }
        let matches: Vec<&String> = ids.iter().filter(|id| id.starts_with(given)).collect();
        match matches.as_slice() {
            [one] if !given.is_empty() => Ok((*one).clone()),
            [] | [_] => bail!("no live session {given:?}: see `airlock session ls`"),
            many => bail!(
                "session {given:?} is ambiguous: it starts {} ids ({}); give more of the id, or its name",
                many.len(),
                many.iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

/// Names are file names here: letters, digits, `-`, `_` and `.`, up to 64.
fn validate_name(name: &str) -> anyhow::Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !ok {
        bail!(
            "invalid --name {name:?}: use up to 64 letters, digits, '-', '_' or '.', not starting with '.'"
        );
    }
    Ok(())
}

/// A socket nobody serves: refused (its process was killed) or not there.
fn gone(e: &anyhow::Error) -> bool {
    e.downcast_ref::<std::io::Error>().is_some_and(|e| {
        matches!(
            e.kind(),
            std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::NotFound
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_plain_file_names() {
        for good in ["agent-1", "task_7.b", "x"] {
            assert!(validate_name(good).is_ok(), "{good}");
        }
        for bad in ["", "../x", "a/b", ".hidden", "sp ace", &"x".repeat(65)] {
            assert!(validate_name(bad).is_err(), "{bad}");
        }
    }
}
