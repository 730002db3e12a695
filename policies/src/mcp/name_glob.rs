//! Tool-name globs: `*` any run of characters, `?` one character, all else
//! literal and case-sensitive (MCP tool names are compared exactly).

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NameGlob(String);

impl NameGlob {
    pub(crate) fn new(pattern: &str) -> Self {
        Self(pattern.to_owned())
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    pub(crate) fn is_exact(&self) -> bool {
        !self.0.contains(['*', '?'])
    }

    pub(crate) fn matches(&self, name: &str) -> bool {
        let pattern: Vec<char> = self.0.chars().collect();
        let text: Vec<char> = name.chars().collect();
        // Iterative wildcard match with one backtrack point for `*`.
        let (mut p, mut t) = (0, 0);
        let mut star: Option<(usize, usize)> = None;
        while t < text.len() {
            match pattern.get(p) {
                Some('*') => {
                    star = Some((p, t));
                    p += 1;
                }
                Some('?') => {
                    p += 1;
                    t += 1;
                }
                Some(c) if *c == text[t] => {
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
        pattern[p..].iter().all(|c| *c == '*')
    }
}

#[cfg(test)]
mod tests {
    use super::NameGlob;

    #[test]
    fn tool_globs_match_whole_names_case_sensitively() {
        let g = NameGlob::new("list_*");
        assert!(g.matches("list_invoices"));
        assert!(g.matches("list_"));
        assert!(!g.matches("List_invoices"));
        assert!(!g.matches("xlist_invoices"));
        assert!(NameGlob::new("a?c").matches("abc"));
        assert!(!NameGlob::new("a?c").matches("ac"));
        assert!(NameGlob::new("*").matches(""));
        assert!(NameGlob::new("*_x_*").matches("a_x_b_x_c"));
        assert!(!NameGlob::new("transfer").matches("transfer "));
    }
}
