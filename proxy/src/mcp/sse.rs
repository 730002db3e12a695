//! Splitting a `text/event-stream` into whole events (WHATWG HTML §9.2):
//! an event ends at a blank line; lines end with CRLF, LF or CR.

/// Bytes of an SSE stream, handed out one whole event at a time.
#[derive(Debug, Default)]
pub(crate) struct SseSplitter {
    buf: Vec<u8>,
}

/// One event's `data` (its data lines joined by LF) and its other lines
/// (`event:`, `id:`, `retry:`, comments) as received.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct SseEvent {
    pub(crate) other_lines: Vec<Vec<u8>>,
    pub(crate) data: Option<Vec<u8>>,
}

impl SseSplitter {
    pub(crate) fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    pub(crate) fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// The next whole event, if one has arrived: its raw bytes (to pass on
    /// unchanged) and its parse.
    pub(crate) fn next_event(&mut self) -> Option<(Vec<u8>, SseEvent)> {
        let end = blank_line_end(&self.buf)?;
        let raw: Vec<u8> = self.buf.drain(..end).collect();
        Some((raw.clone(), parse(&raw)))
    }

    /// What is left at the end of the stream (an unterminated event).
    pub(crate) fn rest(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.buf)
    }
}

/// Where the first blank line ends: after two line ends in a row.
fn blank_line_end(buf: &[u8]) -> Option<usize> {
    let mut i = 0;
    let mut line_start = true;
    while i < buf.len() {
        let eol = match buf[i] {
            b'\n' => 1,
            b'\r' if buf.get(i + 1) == Some(&b'\n') => 2,
            // A CR at the very end may be the start of CRLF: wait.
            b'\r' if i + 1 == buf.len() => return None,
            b'\r' => 1,
            _ => 0,
        };
        if eol == 0 {
            line_start = false;
            i += 1;
            continue;
        }
        if line_start {
            return Some(i + eol);
        }
        line_start = true;
        i += eol;
    }
    None
}

fn parse(raw: &[u8]) -> SseEvent {
    let mut other_lines = Vec::new();
    let mut data: Option<Vec<u8>> = None;
    for line in lines(raw) {
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix(b"data") {
            let value = match rest {
                [] => &[][..],
                [b':', b' ', v @ ..] | [b':', v @ ..] => v,
                // "dataX: ..." is another field.
                _ => {
                    other_lines.push(line.to_vec());
                    continue;
                }
            };
            match &mut data {
                Some(d) => {
                    d.push(b'\n');
                    d.extend_from_slice(value);
                }
                None => data = Some(value.to_vec()),
            }
        } else {
            other_lines.push(line.to_vec());
        }
    }
    SseEvent { other_lines, data }
}

fn lines(raw: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i < raw.len() {
        match raw[i] {
            b'\n' => {
                out.push(&raw[start..i]);
                i += 1;
                start = i;
            }
            b'\r' => {
                out.push(&raw[start..i]);
                i += if raw.get(i + 1) == Some(&b'\n') { 2 } else { 1 };
                start = i;
            }
            _ => i += 1,
        }
    }
    if start < raw.len() {
        out.push(&raw[start..]);
    }
    out
}

/// An event rebuilt with new data (one `data:` line: JSON has no newlines
/// when serialized compactly).
pub(crate) fn rebuild(event: &SseEvent, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for line in &event.other_lines {
        out.extend_from_slice(line);
        out.push(b'\n');
    }
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\n\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_split_at_blank_lines_in_every_line_ending() {
        let mut s = SseSplitter::default();
        s.push(b"event: message\r\ndata: {\"a\":1}\r\n\r\ndata: x\n");
        let (_, first) = s.next_event().unwrap();
        assert_eq!(first.data.as_deref(), Some(&b"{\"a\":1}"[..]));
        assert_eq!(first.other_lines, vec![b"event: message".to_vec()]);
        assert!(s.next_event().is_none());
        s.push(b"data: y\n\n");
        let (_, second) = s.next_event().unwrap();
        assert_eq!(second.data.as_deref(), Some(&b"x\ny"[..]));
    }
}
