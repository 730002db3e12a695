//! Paths that `read_file` and `write_file` take from a model: relative to
//! the workspace, and never climbing out of it.
//!
//! This check is for clear answers, not for safety: the file is read and
//! written by a step inside the sandbox, so whatever a path (or a symlink
//! the sandboxed program left) points at, only what the sandbox can see is
//! reached — never the host with the user's rights.

/// A path inside the workspace, normalised (`a/./b/../c` is `a/c`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct WorkspacePath(String);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(super) enum PathError {
    #[error("no path given: give a path relative to the workspace, e.g. src/main.py")]
    Empty,
    #[error("{0:?} is absolute: give a path relative to the workspace, e.g. src/main.py")]
    Absolute(String),
    #[error("{0:?} climbs out of the workspace with `..`: give a path inside it")]
    Climbs(String),
    #[error("{0:?} is the workspace itself: give a file's path inside it")]
    Workspace(String),
    #[error("the path contains a NUL byte, which no file name can")]
    Nul,
}

impl WorkspacePath {
    pub(super) fn parse(given: &str) -> Result<Self, PathError> {
        if given.is_empty() {
            return Err(PathError::Empty);
        }
        if given.contains('\0') {
            return Err(PathError::Nul);
        }
        if given.starts_with('/') {
            return Err(PathError::Absolute(given.to_owned()));
        }
        let mut parts: Vec<&str> = Vec::new();
        for part in given.split('/') {
            match part {
                "" | "." => {}
                ".." => {
                    if parts.pop().is_none() {
                        return Err(PathError::Climbs(given.to_owned()));
                    }
                }
                name => parts.push(name),
            }
        }
        if parts.is_empty() {
            return Err(PathError::Workspace(given.to_owned()));
        }
        Ok(Self(parts.join("/")))
    }

    /// As a command's argument: `./` first, so that a name such as `-`
    /// is a file to `cat` and never its stdin or an option.
    pub(super) fn argument(&self) -> String {
        format!("./{}", self.0)
    }

    /// The directory it is in, as a command's argument (`.` at the top):
    /// given to `mkdir -p` as is, not worked out by a shell's `dirname`,
    /// which drops a trailing newline of a name.
    pub(super) fn parent_argument(&self) -> String {
        match self.0.rsplit_once('/') {
            Some((parent, _)) => format!("./{parent}"),
            None => ".".to_owned(),
        }
    }
}

impl std::fmt::Display for WorkspacePath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_are_normalised_inside_the_workspace() {
        for (given, expected) in [
            ("out.txt", "out.txt"),
            ("src//main.py", "src/main.py"),
            ("./a/./b/", "a/b"),
            ("a/../b", "b"),
            ("-rf", "-rf"),
            ("with space/x", "with space/x"),
        ] {
            assert_eq!(WorkspacePath::parse(given).unwrap().to_string(), expected);
        }
    }

    #[test]
    fn arguments_are_never_options_or_stdin() {
        let dash = WorkspacePath::parse("-").unwrap();
        assert_eq!(
            (dash.argument(), dash.parent_argument()),
            ("./-".into(), ".".into())
        );
        let nested = WorkspacePath::parse("a\n/b").unwrap();
        assert_eq!(nested.argument(), "./a\n/b");
        assert_eq!(nested.parent_argument(), "./a\n");
    }

    #[test]
    fn absolute_climbing_and_empty_paths_are_refused() {
        use PathError::*;
        for (given, expected) in [
            ("", Empty),
            ("/etc/passwd", Absolute("/etc/passwd".into())),
            ("..", Climbs("..".into())),
            ("../secret", Climbs("../secret".into())),
            ("a/../../secret", Climbs("a/../../secret".into())),
            (".", Workspace(".".into())),
            ("a/..", Workspace("a/..".into())),
            ("a\0b", Nul),
        ] {
            assert_eq!(WorkspacePath::parse(given), Err(expected), "{given:?}");
        }
    }
}
