//! Reading a policy file: the one place the binary turns a path into a
//! `Policy`, including the base files it `extends` (paths relative to the
//! file that names them).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use airlock_policy::{LoadError, Loaded, Policy};
use anyhow::{Context, bail};

pub(crate) fn load(path: &Path) -> anyhow::Result<Policy> {
    let text = read_top(path)?;
    let top = path.display().to_string();
    // The name each file got, by canonical path: a file reached by two
    // spellings is one file, so cycles and diamonds are seen as such.
    let mut names: HashMap<PathBuf, String> = HashMap::new();
    if let Ok(canonical) = std::fs::canonicalize(path) {
        names.insert(canonical, top.clone());
    }
    let load_base = |from: &str, entry: &str| -> Result<Loaded, LoadError> {
        let dir = Path::new(from).parent().unwrap_or(Path::new(""));
        let base = dir.join(entry);
        let canonical = std::fs::canonicalize(&base)?;
        let name = names
            .entry(canonical)
            .or_insert_with(|| base.display().to_string())
            .clone();
        let text = std::fs::read_to_string(&base)?;
        Ok(Loaded { name, text })
    };
    Policy::parse_layered(&top, &text, load_base).map_err(|e| anyhow::anyhow!("{e}"))
}

/// The policy file named on the command line. A missing one is named as
/// the user wrote it, where that led (absolute), and the directory it was
/// relative to: the usual mistake is starting from another directory.
fn read_top(path: &Path) -> anyhow::Result<String> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
            let relative_to = match path.is_relative() {
                true => std::env::current_dir()
                    .map(|d| format!(" (relative to the current directory {})", d.display()))
                    .unwrap_or_default(),
                false => String::new(),
            };
            bail!(
                "the policy file {} does not exist: looked for {}{relative_to}; give the path of an existing policy file (docs/policy.md says how to write one; `airlock policy suggest` writes one from a recorded session)",
                path.display(),
                absolute.display()
            )
        }
        Err(e) => Err(e).with_context(|| {
            let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
            format!("reading the policy file {}", absolute.display())
        }),
    }
}

/// The files a policy was read from, to watch for changes.
pub(crate) fn files(policy: &Policy) -> Vec<PathBuf> {
    policy.files().into_iter().map(PathBuf::from).collect()
}
