//! What the record says each path holds now, kept up to date as records are
//! emitted, so the end-of-session reconcile can compare the disk with it:
//! the last recorded content's SHA-256, the last recorded mode, and the
//! recorded extended attributes.

use std::collections::BTreeMap;

use super::files::{FileRecord, renamed, under};
use super::name;
use super::xattrs::MODE_BITS;
use crate::observation::FileOp;

/// What the record says of one path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Known {
    /// The SHA-256 of its last recorded content (`Some(None)`: recorded
    /// without one, e.g. a directory or an unreadable file); `None` when
    /// only its attributes are on record.
    pub content: Option<Option<String>>,
    pub mode: Option<u32>,
    /// Attribute name → SHA-256 of its recorded value (None: removed).
    pub xattrs: BTreeMap<Vec<u8>, Option<String>>,
}

#[derive(Debug, Default)]
pub(super) struct View(BTreeMap<Vec<u8>, Known>);

impl View {
    pub(super) fn get(&self, path: &[u8]) -> Option<&Known> {
        self.0.get(path)
    }

    pub(super) fn paths(&self) -> impl Iterator<Item = &Vec<u8>> {
        self.0.keys()
    }

    /// Take record `r` into account.
    pub(super) fn apply(&mut self, r: &FileRecord) {
        match r.op {
            FileOp::Create | FileOp::Modify | FileOp::Truncate => {
                let known = self.0.entry(r.path.clone()).or_default();
                known.content = Some(r.captured.sha256.clone());
                if r.mode.is_some() {
                    known.mode = r.mode;
                }
            }
            FileOp::Delete => {
                let gone = name::trim_slashes(&r.path);
                self.0.remove(gone);
                self.0.remove(&r.path);
                self.0.remove(&name::dir_form(gone));
                for below in under(&self.0, gone) {
                    self.0.remove(&below);
                }
            }
            FileOp::Rename => {
                if let Some(to) = &r.rename_to {
                    let mut moved = under(&self.0, &r.path);
                    moved.push(r.path.clone());
                    for old in moved {
                        if let (Some(new), Some(known)) =
                            (renamed(&old, &r.path, to), self.0.remove(&old))
                        {
                            self.0.insert(new, known);
                        }
                    }
                }
            }
            FileOp::Chmod => {
                self.0.entry(r.path.clone()).or_default().mode = r.mode;
            }
            FileOp::Xattr => {
                let known = self.0.entry(r.path.clone()).or_default();
                if let Some(x) = &r.xattr {
                    let value = (!x.removed).then(|| r.captured.sha256.clone()).flatten();
                    known.xattrs.insert(x.name.as_bytes().to_vec(), value);
                }
                if r.mode.is_some() {
                    known.mode = r.mode;
                }
            }
            FileOp::Original => {
                // What the path held before the session, unless the record
                // already says what it holds now.
                let known = self.0.entry(r.path.clone()).or_default();
                if let Some(x) = &r.xattr {
                    known
                        .xattrs
                        .entry(x.name.as_bytes().to_vec())
                        .or_insert_with(|| r.captured.sha256.clone());
                } else if known.content.is_none() {
                    known.content = Some(r.captured.sha256.clone());
                    known.mode = known.mode.or(r.mode.map(|m| m & MODE_BITS));
                }
            }
            FileOp::Image => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::View;
    use crate::observation::FileOp;
    use crate::observer::files::FileRecord;
    use airlock_record::Xattr;

    fn xattr(path: &str, name: &str, sha: Option<&str>) -> FileRecord {
        let mut r = FileRecord::now(None, path.into(), FileOp::Xattr);
        r.captured.sha256 = sha.map(str::to_owned);
        r.xattr = Some(Xattr {
            name: name.into(),
            removed: sha.is_none(),
            acl: None,
        });
        r
    }

    #[test]
    fn attributes_follow_new_content_and_renames_and_go_with_deletes() {
        let mut v = View::default();
        let mut created = FileRecord::now(None, "/ws/d/f".into(), FileOp::Create);
        created.captured.sha256 = Some("c1".into());
        created.mode = Some(0o644);
        v.apply(&created);
        v.apply(&xattr("/ws/d/f", "user.a", Some("x1")));
        let mut chmod = FileRecord::now(None, "/ws/d/".into(), FileOp::Chmod);
        chmod.mode = Some(0o700);
        v.apply(&chmod);
        let mut rewritten = FileRecord::now(None, "/ws/d/f".into(), FileOp::Modify);
        rewritten.captured.sha256 = Some("c2".into());
        v.apply(&rewritten);
        let f = v.get(b"/ws/d/f").unwrap();
        assert_eq!(f.content, Some(Some("c2".into())));
        assert_eq!(f.mode, Some(0o644), "new content keeps the mode");
        assert_eq!(
            f.xattrs[&b"user.a"[..]],
            Some("x1".into()),
            "and the attributes"
        );
        let mut mv = FileRecord::now(None, "/ws/d".into(), FileOp::Rename);
        mv.rename_to = Some("/ws/e".into());
        v.apply(&mv);
        assert!(v.get(b"/ws/d/f").is_none());
        assert_eq!(v.get(b"/ws/e/").and_then(|d| d.mode), Some(0o700));
        v.apply(&xattr("/ws/e/f", "user.a", None));
        assert_eq!(v.get(b"/ws/e/f").unwrap().xattrs[&b"user.a"[..]], None);
        v.apply(&FileRecord::now(None, "/ws/e/".into(), FileOp::Delete));
        assert_eq!(v.paths().count(), 0);
    }
}
