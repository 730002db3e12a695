//! Reading a policy file: the one place the binary turns a path into a `Policy`.

use std::path::Path;

use airlock_policy::Policy;
use anyhow::Context;

pub fn load(path: &Path) -> anyhow::Result<Policy> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading policy {}", path.display()))?;
    Policy::parse(&path.display().to_string(), &text).map_err(|e| anyhow::anyhow!("{e}"))
}
