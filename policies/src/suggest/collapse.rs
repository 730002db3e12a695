//! Path globs a person would write: segments that vary like identifiers
//! (numbers, UUIDs, long hex, version strings) become `*`, the rest stays
//! literal. Nothing else ever becomes a glob: a recorded `*` or `?` is
//! escaped, so a request for `/**` gives the rule `/\*\*`, never `/**`.

/// A run of one path segment: literal text or an identifier-like part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece<'a> {
    /// Kept as it is (glob characters in it escaped when written).
    Literal(&'a str),
    /// A number, UUID, long hex or version string: written as `*`.
    Identifier(&'a str),
}

/// `path` (a normalised request path, no query, starting with '/') with
/// every identifier-like segment, or identifier-like part of a segment,
/// replaced by `*` and every other character matching itself:
/// `/users/42/keys` → `/users/*/keys`,
/// `/packages/requests-2.31.0.tar.gz` → `/packages/requests-*.tar.gz`,
/// `/**` → `/\*\*`. The result is a valid `paths` glob that matches `path`
/// and, up to the identifiers, nothing else.
pub fn collapse_path(path: &str) -> String {
    path.split('/')
        .map(|segment| {
            segment_pieces(segment)
                .into_iter()
                .map(|piece| match piece {
                    Piece::Identifier(_) => "*".to_owned(),
                    Piece::Literal(text) => escape_glob(text),
                })
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// The glob that matches `text` and nothing else: `*` and `?` escaped.
pub(crate) fn escape_glob(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// One segment cut into literal and identifier-like runs (adjacent
/// literals may be split; their concatenation is the segment).
pub fn segment_pieces(segment: &str) -> Vec<Piece<'_>> {
    if is_identifier(segment) {
        return vec![Piece::Identifier(segment)];
    }
    version_pieces(segment)
}

/// A whole segment that names one thing among many: a number, a UUID, a
/// long hex digest or a short commit-like hex id.
fn is_identifier(segment: &str) -> bool {
    if segment.is_empty() {
        return false;
    }
    if segment.bytes().all(|b| b.is_ascii_digit()) {
        return true;
    }
    if is_uuid(segment) {
        return true;
    }
    let hex = segment.bytes().all(|b| b.is_ascii_hexdigit());
    let digits = segment.bytes().any(|b| b.is_ascii_digit());
    let letters = segment.bytes().any(|b| b.is_ascii_alphabetic());
    // "deadbeef..." (digests) at 16+, "a1b2c3d" (short commit ids) at 7+
    // with both digits and letters; words like "cafe" or "facade" stay.
    hex && (segment.len() >= 16 || (segment.len() >= 7 && digits && letters))
}

fn is_uuid(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Finds each version string in a segment (`2.31.0`, `v1.2`, `3.0rc1`:
/// digits, at least one dot-separated digit group, an optional pre-release
/// tag). A version must start the segment or follow a character that is
/// not a letter or digit (a `v` prefix goes with it), so `python3.11`
/// stays as it is.
fn version_pieces(segment: &str) -> Vec<Piece<'_>> {
    let b = segment.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let mut copied = 0;
    while i < b.len() {
        // The two hex digits of a `%XX` escape are part of it, never the
        // start of a version: "/%60.04" must not become the broken "/%*".
        let in_escape = (i >= 1 && b[i - 1] == b'%') || (i >= 2 && b[i - 2] == b'%');
        let boundary = !in_escape && (i == 0 || !b[i - 1].is_ascii_alphanumeric());
        let start_v = boundary
            && (b[i] == b'v' || b[i] == b'V')
            && b.get(i + 1).is_some_and(u8::is_ascii_digit);
        let start_digit = boundary && b[i].is_ascii_digit();
        if !(start_v || start_digit) {
            i += 1;
            continue;
        }
        let begin = i;
        let mut j = if start_v { i + 1 } else { i };
        let digits = |mut k: usize| {
            while k < b.len() && b[k].is_ascii_digit() {
                k += 1;
            }
            k
        };
        j = digits(j);
        let mut groups = 0;
        while j + 1 < b.len() && b[j] == b'.' && b[j + 1].is_ascii_digit() {
            j = digits(j + 1);
            groups += 1;
        }
        if groups == 0 {
            i = j.max(i + 1);
            continue;
        }
        // A pre-release tag glued on: "rc1", "a2", "b3", "dev0".
        let mut k = j;
        while k < b.len() && b[k].is_ascii_lowercase() {
            k += 1;
        }
        if k > j && k - j <= 4 && k < b.len() && b[k].is_ascii_digit() {
            j = digits(k);
        }
        // Followed by a letter or digit, it is part of a word: keep it.
        if j < b.len() && b[j].is_ascii_alphanumeric() {
            i = j;
            continue;
        }
        if copied < begin {
            out.push(Piece::Literal(&segment[copied..begin]));
        }
        out.push(Piece::Identifier(&segment[begin..j]));
        copied = j;
        i = j;
    }
    if copied < segment.len() || out.is_empty() {
        out.push(Piece::Literal(&segment[copied..]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::collapse_path;

    #[test]
    fn numbers_uuids_and_long_hex_become_one_segment_globs() {
        assert_eq!(collapse_path("/users/42/keys"), "/users/*/keys");
        assert_eq!(
            collapse_path("/items/3f2b8c1e-9a4d-4e6f-8b7a-1c2d3e4f5a6b"),
            "/items/*"
        );
        assert_eq!(
            collapse_path(
                "/blobs/9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
            ),
            "/blobs/*"
        );
        assert_eq!(collapse_path("/commit/a1b2c3d"), "/commit/*");
    }

    #[test]
    fn words_that_happen_to_be_hex_or_contain_digits_stay() {
        assert_eq!(collapse_path("/cafe/facade/added"), "/cafe/facade/added");
        assert_eq!(collapse_path("/v1/status"), "/v1/status");
        assert_eq!(collapse_path("/python3.11/lib"), "/python3.11/lib");
        assert_eq!(collapse_path("/oauth2/token"), "/oauth2/token");
    }

    #[test]
    fn version_strings_inside_a_segment_become_stars() {
        assert_eq!(
            collapse_path("/packages/requests-2.31.0.tar.gz"),
            "/packages/requests-*.tar.gz"
        );
        assert_eq!(
            collapse_path("/packages/requests-2.32.3-py3-none-any.whl"),
            "/packages/requests-*-py3-none-any.whl"
        );
        assert_eq!(collapse_path("/releases/v1.2.3/app"), "/releases/*/app");
        assert_eq!(collapse_path("/dist/tool-3.0rc1.zip"), "/dist/tool-*.zip");
        assert_eq!(collapse_path("/api/2.0/jobs"), "/api/*/jobs");
    }

    #[test]
    fn the_root_and_trailing_slashes_are_kept() {
        assert_eq!(collapse_path("/"), "/");
        assert_eq!(collapse_path("/simple/requests/"), "/simple/requests/");
        assert_eq!(collapse_path("/a/1/"), "/a/*/");
    }

    #[test]
    fn glob_characters_in_a_recorded_path_are_escaped_never_live() {
        assert_eq!(collapse_path("/**"), r"/\*\*");
        assert_eq!(collapse_path("/*"), r"/\*");
        assert_eq!(collapse_path("/admin/**/all"), r"/admin/\*\*/all");
        assert_eq!(collapse_path("/admin/users/a*"), r"/admin/users/a\*");
        assert_eq!(collapse_path("/v1.2*"), r"/*\*");
        assert_eq!(collapse_path("/42*"), r"/42\*");
        // Percent-encoded ones are literal already: "%2A" is not a glob.
        assert_eq!(collapse_path("/%2A%2A"), "/%2A%2A");
        // Brackets, braces, quotes, '%3F': not glob characters here.
        assert_eq!(
            collapse_path("/[a]/{b,c}/\"x\"/%3F"),
            "/[a]/{b,c}/\"x\"/%3F"
        );
    }

    /// Found by the `suggest_draft` fuzz target: the hex digits of an
    /// escape were read as a version, giving the unparseable glob "/%*".
    #[test]
    fn the_digits_of_a_percent_escape_are_never_part_of_a_version() {
        for path in ["/%60.04", "/%601.2", "/a-%3B1.2", "/%C3%A91.2.3"] {
            let glob = collapse_path(path);
            let normal = crate::path::normalize_glob_text(&glob)
                .unwrap_or_else(|e| panic!("{path} -> {glob}: {e}"));
            assert!(
                crate::glob::PathGlob::new(&normal).matches(path),
                "{path} -> {glob}"
            );
        }
        assert_eq!(collapse_path("/%60.04"), "/%60.04");
        assert_eq!(collapse_path("/a-%3B-1.2"), "/a-%3B-*");
    }

    #[test]
    fn only_digit_hex_uuid_and_version_text_becomes_an_identifier() {
        for path in [
            "/**",
            "/a*b/1.2-x",
            "/users/42/v1.2.3rc1/a-3f2b8c1e-9a4d-4e6f-8b7a-1c2d3e4f5a6b",
        ] {
            for segment in path.split('/') {
                for piece in super::segment_pieces(segment) {
                    if let super::Piece::Identifier(text) = piece {
                        assert!(
                            text.bytes()
                                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-')),
                            "{text:?} in {path}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn every_collapsed_glob_matches_the_path_it_came_from() {
        for path in [
            "/users/42/keys",
            "/packages/requests-2.31.0.tar.gz",
            "/dist/tool-3.0rc1.zip",
            "/items/3f2b8c1e-9a4d-4e6f-8b7a-1c2d3e4f5a6b/x",
            "/a/1/",
        ] {
            let glob = crate::glob::PathGlob::new(&collapse_path(path));
            assert!(glob.matches(path), "{path}");
        }
        for path in ["/**", "/*", "/a*/b", "/x/**/y"] {
            let glob = crate::glob::PathGlob::new(&collapse_path(path));
            assert!(glob.matches(path), "{path}");
            assert!(!glob.matches("/admin/users/all"), "{path}");
        }
    }
}
