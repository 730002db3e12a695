//! The signing key: where it lives, how it is created, and which public key a
//! verifier should trust.
//!
//! The private key never goes into the database: someone who can rewrite the
//! database must not also be able to re-sign it with the same key.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::{SigningKey, VerifyingKey};
use sha2::{Digest, Sha256};

use crate::AuditError;
use crate::chain::hex;

const SECRET_TAG: &str = "airlock-audit-ed25519-secret-v1";
const PUBLIC_TAG: &str = "airlock-audit-ed25519-public-v1";

/// Where the recorder's signing key comes from.
#[derive(Debug, Clone)]
pub enum SigningKeySource {
    /// A key file, created with mode 0600 if missing.
    KeyFile(PathBuf),
    /// A fresh random key that is never written anywhere. Verification can
    /// then only check internal consistency, not who signed: use for tests
    /// and throwaway sessions.
    Ephemeral,
}

/// What `verify` should treat as the legitimate signer.
#[derive(Debug, Clone)]
pub enum TrustAnchor {
    /// Check the chain and signatures only; report the key as unchecked.
    None,
    PublicKey(VerifyingKey),
    /// A secret key file or a public key file written by
    /// [`crate::public_key_text`].
    KeyFile(PathBuf),
    /// A fleet's enrolled node keys (the central store's): a session is
    /// trusted when its key is one of them and not revoked, and unverified
    /// otherwise.
    Enrolled(Vec<NodeKey>),
}

/// A node's public key as a central store enrolled it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeKey {
    pub key: VerifyingKey,
    pub fingerprint: KeyFingerprint,
    /// The node's name, as given when it was enrolled.
    pub name: Option<String>,
    pub added_us: i64,
    /// When it was revoked: sessions it signed verify as unverified.
    pub revoked_us: Option<i64>,
}

/// A public key given as a key file (secret or public) or as the text of
/// a public key file (`airlock-audit-ed25519-public-v1 BASE64`).
pub fn parse_public_key(text: &str) -> Option<VerifyingKey> {
    match parse_key_text(text)? {
        ParsedKey::Secret(k) => Some(k.verifying_key()),
        ParsedKey::Public(k) => Some(k),
    }
}

/// Short, stable name of a public key: "SHA256:" + first 16 bytes of its hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyFingerprint(pub String);

impl KeyFingerprint {
    pub fn of(key: &VerifyingKey) -> Self {
        let digest = Sha256::digest(key.as_bytes());
        Self(format!("SHA256:{}", hex(&digest[..16])))
    }
}

impl std::fmt::Display for KeyFingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

pub(crate) fn obtain_signing_key(source: &SigningKeySource) -> Result<SigningKey, AuditError> {
    match source {
        SigningKeySource::Ephemeral => generate(),
        SigningKeySource::KeyFile(path) => match read_secret_key(path) {
            Ok(key) => Ok(key),
            // A link that leads to no file: the key is made with link(2),
            // which never follows one, so making it would fail as a race.
            Err(KeyRead::Missing) if let Ok(target) = fs::read_link(path) => Err(key_err(
                path,
                format!(
                    "is a link to {}, where there is no key: name the key file itself, or a new path where airlock can create one",
                    target.display()
                ),
            )),
            Err(KeyRead::Missing) => create_key_file(path),
            Err(KeyRead::Bad(e)) => Err(e),
        },
    }
}

fn generate() -> Result<SigningKey, AuditError> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| AuditError::Random(e.to_string()))?;
    Ok(SigningKey::from_bytes(&seed))
}

fn key_err(path: &Path, problem: impl Into<String>) -> AuditError {
    AuditError::Key {
        path: path.to_path_buf(),
        problem: problem.into(),
    }
}

enum KeyRead {
    Missing,
    Bad(AuditError),
}

fn read_secret_key(path: &Path) -> Result<SigningKey, KeyRead> {
    let meta = match fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(KeyRead::Missing),
        Err(e) => return Err(KeyRead::Bad(key_err(path, format!("cannot stat: {e}")))),
    };
    // A key others can read could be used to forge checkpoints: refuse it
    // rather than sign with a possibly-leaked key.
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(KeyRead::Bad(key_err(
            path,
            format!(
                "is accessible by other users (mode {:o}); run `chmod 600 {}`",
                meta.permissions().mode() & 0o777,
                path.display()
            ),
        )));
    }
    let text = fs::read_to_string(path)
        .map_err(|e| KeyRead::Bad(key_err(path, format!("cannot read: {e}"))))?;
    match parse_key_text(&text) {
        Some(ParsedKey::Secret(k)) => Ok(k),
        Some(ParsedKey::Public(_)) => Err(KeyRead::Bad(key_err(
            path,
            "holds only a public key; recording needs the secret key file",
        ))),
        None => Err(KeyRead::Bad(key_err(
            path,
            "is not an airlock audit key; move it away to let airlock create a new one",
        ))),
    }
}

fn create_key_file(path: &Path) -> Result<SigningKey, AuditError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| {
                key_err(
                    path,
                    format!("cannot create directory {}: {e}", dir.display()),
                )
            })?;
    }
    let key = generate()?;
    let text = format!("{SECRET_TAG} {}\n", STANDARD.encode(key.to_bytes()));
    // Written whole under a private name, then linked into place: link(2)
    // never replaces an existing file (EEXIST), so when several airlocks
    // start at once exactly one key wins, and nobody ever reads a key file
    // that is still empty or half-written.
    let staged = staging_path(path)?;
    let written = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&staged)
        .and_then(|mut file| {
            file.write_all(text.as_bytes())?;
            file.sync_all()
        });
    if let Err(e) = written {
        let _ = fs::remove_file(&staged);
        return Err(key_err(path, format!("cannot write: {e}")));
    }
    let linked = fs::hard_link(&staged, path);
    let _ = fs::remove_file(&staged);
    match linked {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            // Another airlock created the key first: use theirs rather than
            // orphan the signatures it is already making.
            return read_secret_key(path).map_err(|r| match r {
                KeyRead::Missing => key_err(path, "vanished while being created; retry"),
                KeyRead::Bad(e) => e,
            });
        }
        Err(e) => return Err(key_err(path, format!("cannot create: {e}"))),
    }
    tracing::info!(path = %path.display(), fingerprint = %KeyFingerprint::of(&key.verifying_key()), "created audit signing key");
    Ok(key)
}

/// A unique name beside `path` for writing the key before it is linked.
fn staging_path(path: &Path) -> Result<PathBuf, AuditError> {
    let mut nonce = [0u8; 8];
    getrandom::fill(&mut nonce).map_err(|e| AuditError::Random(e.to_string()))?;
    let name = path
        .file_name()
        .map_or_else(|| "audit.key".into(), |n| n.to_string_lossy().into_owned());
    Ok(path.with_file_name(format!(".{name}.{}.new", hex(&nonce))))
}

enum ParsedKey {
    Secret(SigningKey),
    Public(VerifyingKey),
}

fn parse_key_text(text: &str) -> Option<ParsedKey> {
    let (tag, body) = text.trim().split_once(' ')?;
    let bytes: [u8; 32] = STANDARD.decode(body.trim()).ok()?.try_into().ok()?;
    match tag {
        SECRET_TAG => Some(ParsedKey::Secret(SigningKey::from_bytes(&bytes))),
        PUBLIC_TAG => VerifyingKey::from_bytes(&bytes).ok().map(ParsedKey::Public),
        _ => None,
    }
}

/// The public key in a secret or public key file.
pub fn load_public_key(path: &Path) -> Result<VerifyingKey, AuditError> {
    let text = fs::read_to_string(path).map_err(|e| key_err(path, format!("cannot read: {e}")))?;
    match parse_key_text(&text) {
        Some(ParsedKey::Secret(k)) => Ok(k.verifying_key()),
        Some(ParsedKey::Public(k)) => Ok(k),
        None => Err(key_err(path, "is not an airlock audit key file")),
    }
}

/// Text form of a public key, suitable for handing to a verifier elsewhere.
pub fn public_key_text(key: &VerifyingKey) -> String {
    format!("{PUBLIC_TAG} {}\n", STANDARD.encode(key.as_bytes()))
}

pub(crate) fn resolve_anchor(anchor: &TrustAnchor) -> Result<Option<VerifyingKey>, AuditError> {
    match anchor {
        TrustAnchor::None => Ok(None),
        TrustAnchor::PublicKey(k) => Ok(Some(*k)),
        TrustAnchor::KeyFile(p) => load_public_key(p).map(Some),
        // Checked against the set, not one key (see verify's signer step).
        TrustAnchor::Enrolled(_) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_to_no_key_is_named_with_where_it_leads_and_nothing_is_made() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("audit.key");
        let target = dir.path().join("elsewhere/audit.key");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let err = obtain_signing_key(&SigningKeySource::KeyFile(link.clone()))
            .expect_err("a key was made through the link");
        let text = err.to_string();
        assert!(
            text.contains(&format!(
                "is a link to {}, where there is no key",
                target.display()
            )),
            "{text}"
        );
        assert!(!target.exists());
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["audit.key"], "staging files were left behind");
    }

    /// Twenty sessions starting at once with no key yet: one key is created,
    /// everyone signs with it, and nobody reads a half-written file.
    #[test]
    fn concurrent_first_use_agrees_on_one_key() {
        for _ in 0..20 {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("keys/audit.key");
            let source = SigningKeySource::KeyFile(path.clone());
            let keys: Vec<_> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..16)
                    .map(|_| s.spawn(|| obtain_signing_key(&source)))
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            let first = keys[0].as_ref().expect("key").to_bytes();
            for key in &keys {
                assert_eq!(key.as_ref().expect("key").to_bytes(), first);
            }
            let names: Vec<_> = fs::read_dir(path.parent().unwrap())
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert_eq!(names, ["audit.key"], "staging files were left behind");
            let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
        }
    }
}
