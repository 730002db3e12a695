//! Failures collected over all variants of a test and reported together, so
//! that one run names every variant the record gets wrong.

/// Failures collected over all variants of a test, reported together.
#[derive(Debug, Default)]
pub struct Failures(Vec<String>);

impl Failures {
    pub fn add(&mut self, msg: impl Into<String>) {
        self.0.push(msg.into());
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn check(&mut self, ok: bool, msg: impl FnOnce() -> String) {
        if !ok {
            self.0.push(msg());
        }
    }

    /// Panics with every failure (the first 40, and how many more).
    pub fn finish(self, what: &str) {
        if self.0.is_empty() {
            return;
        }
        let shown: Vec<&str> = self.0.iter().take(40).map(String::as_str).collect();
        panic!(
            "{what}: {} failure(s):\n\n{}{}",
            self.0.len(),
            shown.join("\n\n"),
            if self.0.len() > 40 {
                format!("\n\n... and {} more", self.0.len() - 40)
            } else {
                String::new()
            }
        );
    }
}
