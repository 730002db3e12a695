//! What "the traffic showed" means for a suggested policy: a request is
//! shown by a recorded one when host, port and method are the same and
//! the paths are equal once identifier-like text (numbers, UUIDs, long
//! hex, versions, as [`segment_pieces`] finds them) is replaced. The
//! suggester's property test and fuzz target check every allowed request
//! against this; it compares text, never globs.

use super::collapse::{Piece, segment_pieces};
use super::draft::suggestable;
use crate::decision::RequestInfo;
use crate::path::normalize;

/// Whether `probe` is `recorded` up to identifier-like text. A recorded
/// request no rule is suggested for (the asterisk form, a lower-case
/// method, an ambiguous path) shows nothing; neither does an ambiguous probe.
pub fn shown_by(recorded: &RequestInfo<'_>, probe: &RequestInfo<'_>) -> bool {
    if recorded.host != probe.host || recorded.port != probe.port || recorded.method != probe.method
    {
        return false;
    }
    let (Ok(recorded), Ok(probe)) = (suggestable(recorded), normalize(probe.path_and_query)) else {
        return false;
    };
    let probe: Vec<&str> = probe.exact.split('/').collect();
    let recorded: Vec<&str> = recorded.split('/').collect();
    probe.len() == recorded.len()
        && probe
            .iter()
            .zip(&recorded)
            .all(|(p, r)| pieces_match(&segment_pieces(r), p))
}

/// Literal pieces must be the text itself; an identifier piece stands for
/// any text within the segment.
fn pieces_match(pieces: &[Piece<'_>], text: &str) -> bool {
    match pieces.split_first() {
        None => text.is_empty(),
        Some((Piece::Literal(l), rest)) => {
            text.strip_prefix(l).is_some_and(|t| pieces_match(rest, t))
        }
        // Linear in practice: identifier pieces are few per segment.
        Some((Piece::Identifier(_), rest)) => (0..=text.len())
            .filter(|i| text.is_char_boundary(*i))
            .any(|i| pieces_match(rest, &text[i..])),
    }
}
