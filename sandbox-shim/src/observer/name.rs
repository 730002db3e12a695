//! Names as the kernel has them: bytes, nearly always UTF-8 but never
//! assumed to be, so two names are never made one (see
//! [`crate::Observation`]). The few operations the observer needs on them.

/// `name` without trailing slashes (a directory's form in the record ends
/// in one).
pub(crate) fn trim_slashes(name: &[u8]) -> &[u8] {
    let end = name.iter().rposition(|&b| b != b'/').map_or(0, |i| i + 1);
    &name[..end]
}

/// `dir` with exactly one trailing slash: how the record names a directory,
/// and the prefix of everything below it.
pub(crate) fn dir_form(dir: &[u8]) -> Vec<u8> {
    [trim_slashes(dir), b"/"].concat()
}

/// `name` inside directory `dir`.
pub(crate) fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    if dir.ends_with(b"/") {
        [dir, name].concat()
    } else {
        [dir, b"/", name].concat()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slashes_are_trimmed_and_joined_on_bytes() {
        assert_eq!(trim_slashes(b"/ws/d//"), b"/ws/d");
        assert_eq!(trim_slashes(b"/"), b"");
        assert_eq!(dir_form(b"/ws/\xff"), b"/ws/\xff/");
        assert_eq!(join(b"/", b"a\xfe"), b"/a\xfe");
        assert_eq!(join(b"/ws", b"a"), b"/ws/a");
    }
}
