//! Segment-wise path globs: `*` within one segment, `**` any number of
//! segments (including zero), `?` one character, `\*` and `\?` the
//! character itself, everything else literal.

use crate::path::{NormalPath, strip_params};

/// A compiled path glob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PathGlob {
    source: String,
    segments: Vec<Segment>,
    /// The pattern with `;params` stripped like [`NormalPath::routed`].
    routed: Vec<Segment>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    /// `**`: zero or more whole segments.
    AnyDepth,
    /// One segment, matched character by character.
    Chars(Vec<Token>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    /// `*`: any run of characters within the segment.
    Star,
    /// `?`: any one character.
    One,
    /// A character matched as itself (`\*` and `\?` are these).
    Literal(char),
}

impl PathGlob {
    /// Compiles an already-normalized pattern starting with '/'.
    pub(crate) fn new(pattern: &str) -> Self {
        Self {
            source: pattern.to_owned(),
            segments: segments(pattern),
            routed: segments(&strip_params(pattern)),
        }
    }

    /// The pattern text.
    pub(crate) fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether the glob matches a normalized path.
    pub(crate) fn matches(&self, path: &str) -> bool {
        let Some(rest) = path.strip_prefix('/') else {
            return false;
        };
        let parts: Vec<&str> = rest.split('/').collect();
        match_segments(&self.segments, &parts)
    }

    /// Allow rules: the glob must match the path both as sent and as a
    /// server that strips `;params` routes it, so `/files/*.whl` does not
    /// allow `/files/admin;.whl` (which Tomcat serves as `/files/admin`)
    /// while `/public/**` still allows `/public/a;jsessionid=1`. The bytes
    /// forwarded are never rewritten: servers that use matrix parameters
    /// (JAX-RS `@MatrixParam`) still get them.
    pub(crate) fn allows(&self, path: &NormalPath) -> bool {
        if !self.matches(&path.exact) {
            return false;
        }
        // Without parameters in the path, a pattern that matched it has
        // none either, so both readings are the same.
        path.routed == path.exact || {
            let Some(rest) = path.routed.strip_prefix('/') else {
                return false;
            };
            let parts: Vec<&str> = rest.split('/').collect();
            match_segments(&self.routed, &parts)
        }
    }
}

fn segments(pattern: &str) -> Vec<Segment> {
    pattern
        .split('/')
        .skip(1)
        .map(|segment| {
            if segment == "**" {
                Segment::AnyDepth
            } else {
                Segment::Chars(tokens(segment))
            }
        })
        .collect()
}

/// A segment's tokens: `\*` and `\?` are the characters themselves
/// (request paths never hold a backslash, so it needs no escape of its own).
fn tokens(segment: &str) -> Vec<Token> {
    let mut out = Vec::with_capacity(segment.len());
    let mut chars = segment.chars().peekable();
    while let Some(c) = chars.next() {
        out.push(match c {
            '\\' if matches!(chars.peek(), Some('*' | '?')) => {
                Token::Literal(chars.next().unwrap_or(c))
            }
            '*' => Token::Star,
            '?' => Token::One,
            c => Token::Literal(c),
        });
    }
    out
}

/// Dynamic programming over (pattern segment, path segment): O(P·N) even
/// for patterns with several `**`, so a long hostile path cannot make
/// matching explode. `row[j]` = "the rest of the pattern matches parts[j..]".
fn match_segments(pattern: &[Segment], parts: &[&str]) -> bool {
    let texts: Vec<Vec<char>> = parts.iter().map(|p| p.chars().collect()).collect();
    let n = texts.len();
    let mut next = vec![false; n + 1];
    next[n] = true;
    for segment in pattern.iter().rev() {
        let mut row = vec![false; n + 1];
        for j in (0..=n).rev() {
            row[j] = match segment {
                Segment::AnyDepth => next[j] || (j < n && row[j + 1]),
                Segment::Chars(chars) => j < n && next[j + 1] && match_chars(chars, &texts[j]),
            };
        }
        next = row;
    }
    next[0]
}

/// Classic wildcard matching with a single backtrack point; linear-ish and
/// never recursive, so hostile paths cannot blow the stack.
fn match_chars(pattern: &[Token], text: &[char]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(Token::Star) => {
                star = Some((p, t));
                p += 1;
            }
            Some(Token::One) => {
                p += 1;
                t += 1;
            }
            Some(Token::Literal(c)) if *c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|c| *c == Token::Star)
}

#[cfg(test)]
mod tests {
    use super::PathGlob;
    use crate::path::normalize_glob_text;

    fn glob(pattern: &str) -> PathGlob {
        PathGlob::new(&normalize_glob_text(pattern).unwrap())
    }

    #[test]
    fn an_escaped_star_or_question_mark_matches_only_itself() {
        let g = glob(r"/\*\*");
        assert!(g.matches("/**"));
        for other in ["/", "/admin", "/admin/users/all", "/*", "/*x", "/%2A%2A"] {
            assert!(!g.matches(other), "{other}");
        }
        let g = glob(r"/admin/\*/a\*");
        assert!(g.matches("/admin/*/a*"));
        assert!(!g.matches("/admin/users/all"));
        assert!(!g.matches("/admin/*/all"));
        let g = glob(r"/v\?");
        assert!(g.matches("/v?"));
        assert!(!g.matches("/v1"));
    }

    #[test]
    fn escapes_mix_with_live_globs_in_one_segment() {
        let g = glob(r"/files/\**.tar");
        assert!(g.matches("/files/*x.tar"));
        assert!(g.matches("/files/*.tar"));
        assert!(!g.matches("/files/x.tar"));
    }

    #[test]
    fn a_backslash_that_escapes_nothing_is_refused_in_a_pattern() {
        for bad in [r"/a\b", r"/a\", r"/\\*", r"/a\/b"] {
            let err = normalize_glob_text(bad).unwrap_err().to_string();
            assert!(err.contains(r"write \* or \?"), "{bad}: {err}");
        }
    }
}
