//! A step's output as a model is shown it: bounded, since a model's context
//! is small and a command can print gigabytes. The beginning and the end
//! are kept (a command's usage line and its final error are both worth
//! having), and the text says how much was cut between them.

use std::collections::VecDeque;

/// What a model is shown of one stream: 64 KiB.
pub(super) const LIMIT: usize = 64 << 10;

/// One stream, at most `limit` bytes of it kept: half from its start, half
/// from its end.
#[derive(Debug)]
pub(super) struct Bounded {
    half: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    /// Bytes dropped between the head and the tail.
    cut: u64,
}

impl Bounded {
    pub(super) fn new(limit: usize) -> Self {
        Self {
            half: limit / 2,
            head: Vec::new(),
            tail: VecDeque::new(),
            cut: 0,
        }
    }

    pub(super) fn push(&mut self, mut data: &[u8]) {
        let room = self.half - self.head.len();
        let (to_head, rest) = data.split_at(room.min(data.len()));
        self.head.extend_from_slice(to_head);
        data = rest;
        // What is more than the tail can hold never needs copying in.
        let skip = data.len().saturating_sub(self.half);
        self.cut += skip as u64;
        self.tail.extend(&data[skip..]);
        let over = self.tail.len().saturating_sub(self.half);
        self.tail.drain(..over);
        self.cut += over as u64;
    }

    /// The kept bytes as text (invalid UTF-8 shown as U+FFFD), with a note
    /// where bytes were cut.
    pub(super) fn text(&self) -> String {
        if self.cut == 0 {
            // One piece: a character may straddle the head and the tail.
            let whole: Vec<u8> = self.head.iter().chain(&self.tail).copied().collect();
            return String::from_utf8_lossy(&whole).into_owned();
        }
        let head = String::from_utf8_lossy(&self.head);
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        let tail = String::from_utf8_lossy(&tail);
        format!(
            "{head}\n[... {} bytes cut here: {} shown of {}; use run_command with head, tail or sed to see the rest ...]\n{tail}",
            self.cut,
            self.head.len() + self.tail.len(),
            self.total(),
        )
    }

    pub(super) fn total(&self) -> u64 {
        (self.head.len() + self.tail.len()) as u64 + self.cut
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_output_is_kept_whole() {
        let mut out = Bounded::new(16);
        out.push(b"hello ");
        out.push(b"world");
        assert_eq!(out.text(), "hello world");
        assert_eq!(out.total(), 11);
    }

    #[test]
    fn long_output_keeps_its_beginning_and_end_and_says_what_was_cut() {
        let mut out = Bounded::new(8);
        out.push(b"abc");
        out.push(b"defghijklmnop");
        out.push(b"qrstuvwxyz");
        assert_eq!(out.total(), 26);
        let text = out.text();
        assert!(
            text.starts_with("abcd\n[... 18 bytes cut here: 8 shown of 26;"),
            "{text}"
        );
        assert!(text.ends_with("...]\nwxyz"), "{text}");
    }

    #[test]
    fn one_huge_chunk_is_bounded_too() {
        let mut out = Bounded::new(LIMIT);
        out.push(&vec![b'x'; 10 * LIMIT]);
        assert_eq!(out.total(), 10 * LIMIT as u64);
        assert!(out.text().len() < LIMIT + 200);
    }
}
