//! A line diff between two recorded versions of a file, as text.

use similar::TextDiff;

/// A unified diff (`---`/`+++` headers, hunks with 3 lines of context) from
/// `old` to `new`, or `None` when either is not UTF-8 text. The lines are
/// the recorded bytes: the caller escapes them for a terminal.
pub fn unified(old: &[u8], new: &[u8], old_name: &str, new_name: &str) -> Option<String> {
    let (Ok(old), Ok(new)) = (std::str::from_utf8(old), std::str::from_utf8(new)) else {
        return None;
    };
    Some(
        TextDiff::from_lines(old, new)
            .unified_diff()
            .context_radius(3)
            .header(old_name, new_name)
            .to_string(),
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_changed_line_is_one_removal_and_one_addition() {
        let d = super::unified(b"a\nb\nc\n", b"a\nB\nc\n", "before", "after").unwrap();
        assert!(d.contains("--- before\n+++ after\n"), "{d}");
        assert!(d.contains("-b\n+B\n"), "{d}");
        assert!(super::unified(b"\xff", b"x", "a", "b").is_none());
    }
}
