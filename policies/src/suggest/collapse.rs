//! Path globs a person would write: segments that vary like identifiers
//! (numbers, UUIDs, long hex, version strings) become `*`, the rest stays.

/// `path` (a normalised request path, no query) with every identifier-like
/// segment, or identifier-like part of a segment, replaced by `*`:
/// `/users/42/keys` → `/users/*/keys`,
/// `/packages/requests-2.31.0.tar.gz` → `/packages/requests-*.tar.gz`.
/// The result is a valid `paths` glob that matches `path`.
pub fn collapse_path(path: &str) -> String {
    if path == "*" {
        // OPTIONS *: no glob matches it; the caller leaves `paths` out.
        return path.to_owned();
    }
    path.split('/')
        .map(collapse_segment)
        .collect::<Vec<_>>()
        .join("/")
}

fn collapse_segment(segment: &str) -> String {
    if is_identifier(segment) {
        return "*".to_owned();
    }
    collapse_versions(segment)
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

/// Replaces each version string in a segment (`2.31.0`, `v1.2`, `3.0rc1`:
/// digits, at least one dot-separated digit group, an optional pre-release
/// tag) by `*`. A version must start the segment or follow a character
/// that is not a letter or digit (a `v` prefix goes with it), so
/// `python3.11` stays as it is.
fn collapse_versions(segment: &str) -> String {
    let b = segment.as_bytes();
    let mut out = String::with_capacity(segment.len());
    let mut i = 0;
    let mut copied = 0;
    while i < b.len() {
        let boundary = i == 0 || !b[i - 1].is_ascii_alphanumeric();
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
        out.push_str(&segment[copied..begin]);
        out.push('*');
        copied = j;
        i = j;
    }
    out.push_str(&segment[copied..]);
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
    fn the_root_trailing_slashes_and_the_asterisk_form_are_kept() {
        assert_eq!(collapse_path("/"), "/");
        assert_eq!(collapse_path("/simple/requests/"), "/simple/requests/");
        assert_eq!(collapse_path("/a/1/"), "/a/*/");
        assert_eq!(collapse_path("*"), "*");
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
    }
}
