//! A hidden path's other names: a grant that is a directory on the hidden
//! path's way under another name (a bind mount of it, which
//! canonicalisation cannot see) shows what is hidden there, unless that
//! name is hidden too.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A file's or directory's device and inode: the same under every mount
/// of it and every name of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileId(u64, u64);

impl FileId {
    /// The identity of what `path` leads to, if it exists.
    pub fn of(path: &Path) -> Option<Self> {
        std::fs::metadata(path).ok().map(|m| Self(m.dev(), m.ino()))
    }
}

/// For each hide (path, forced), the names it has inside `grants` besides
/// its own: where a grant is one of the directories on its way under
/// another path. Each keeps its hide's `forced`.
pub fn hidden_aliases(hides: &[(PathBuf, bool)], grants: &[PathBuf]) -> Vec<(PathBuf, bool)> {
    let grants: Vec<(FileId, &Path)> = grants
        .iter()
        .filter_map(|g| FileId::of(g).map(|id| (id, g.as_path())))
        .collect();
    let mut aliases = Vec::new();
    for (hidden, forced) in hides {
        // The hidden path itself too when nothing may show it (Airlock's
        // own files, --hide): a grant that is it under another name is
        // then covered whole. Otherwise that is a grant of it, which shows
        // it as a grant of it by its own name would.
        for ancestor in hidden.ancestors().skip(usize::from(!*forced)) {
            let Some(id) = FileId::of(ancestor) else {
                continue;
            };
            let Ok(rest) = hidden.strip_prefix(ancestor) else {
                continue;
            };
            for (_, grant) in grants
                .iter()
                .filter(|(g, path)| *g == id && *path != ancestor)
            {
                let alias = if rest.as_os_str().is_empty() {
                    grant.to_path_buf()
                } else {
                    grant.join(rest)
                };
                if !aliases.iter().any(|(a, _)| *a == alias) {
                    aliases.push((alias, *forced));
                }
            }
        }
    }
    aliases
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hidden_path_under_a_directory_granted_by_another_name_gets_that_name() {
        // A symbolic link stands in for a bind mount here: both give a
        // directory a second path with the same device and inode.
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        for d in [".ssh", ".local/share/airlock", "project"] {
            std::fs::create_dir_all(home.join(d)).unwrap();
        }
        let alias = dir.path().join("alias");
        std::os::unix::fs::symlink(&home, &alias).unwrap();
        let hides = vec![
            (home.join(".ssh"), false),
            (home.join(".local/share/airlock"), true),
        ];
        let found = hidden_aliases(&hides, std::slice::from_ref(&alias));
        assert_eq!(
            found,
            vec![
                (alias.join(".ssh"), false),
                (alias.join(".local/share/airlock"), true)
            ]
        );
        // Named by its own path, a grant needs no alias: the hide is
        // inside it already.
        assert!(hidden_aliases(&hides, std::slice::from_ref(&home)).is_empty());
        // A grant that is a hidden directory by another name: covered
        // whole when nothing may show it, left to the grant otherwise.
        let airlock = dir.path().join("airlock");
        std::os::unix::fs::symlink(home.join(".local/share/airlock"), &airlock).unwrap();
        let ssh = dir.path().join("ssh");
        std::os::unix::fs::symlink(home.join(".ssh"), &ssh).unwrap();
        assert_eq!(
            hidden_aliases(&hides, &[airlock.clone(), ssh]),
            vec![(airlock, true)]
        );
        // A grant that is elsewhere in the tree shows nothing hidden.
        assert!(hidden_aliases(&hides, &[home.join("project")]).is_empty());
    }
}
