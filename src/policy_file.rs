//! Reading a policy file: the one place the binary turns a path into a
//! `Policy`, including the base files it `extends` (paths relative to the
//! file that names them).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use airlock_policy::{LoadError, Loaded, Policy};
use anyhow::Context;

pub fn load(path: &Path) -> anyhow::Result<Policy> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading policy {}", path.display()))?;
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

/// The files a policy was read from, to watch for changes.
pub fn files(policy: &Policy) -> Vec<PathBuf> {
    policy.files().into_iter().map(PathBuf::from).collect()
}
