//! Durations as a policy file writes them: a whole number and a unit,
//! `"30s"`, `"2m"`, `"1h"`, or several in descending order, `"1m30s"`.
//!
//! Deliberately narrower than the command line's durations (no fractions,
//! no milliseconds, no bare numbers): a policy is reviewed by people, and
//! `"1.5"` or `"90"` leave them guessing at the unit.

use std::time::Duration;

/// Why a duration text was refused; the caller adds the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum DurationError {
    /// Not `<digits><unit>` pieces, units in h, m, s order, each once.
    #[error("not a whole number followed by a unit")]
    Malformed,
    /// A number too large for any `Duration`.
    #[error("too large")]
    Overflow,
}

/// Seconds per unit, in the only order units may be written.
const UNITS: [(char, u64); 3] = [('h', 3600), ('m', 60), ('s', 1)];

/// Parses `"30s"`, `"2m"`, `"1h"`, `"1h30m"`, `"1m30s"`.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let mut rest = text;
    let mut seconds: u64 = 0;
    // Index into UNITS of the next unit allowed: keeps "30s1m" and "1m1m" out.
    let mut next_unit = 0;
    if rest.is_empty() {
        return Err(DurationError::Malformed);
    }
    while !rest.is_empty() {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        let (number, after) = rest.split_at(digits);
        let mut chars = after.chars();
        if number.is_empty() {
            return Err(DurationError::Malformed);
        }
        let Some(unit) = chars.next() else {
            return Err(DurationError::Malformed);
        };
        let Some(offset) = UNITS[next_unit..].iter().position(|(u, _)| *u == unit) else {
            return Err(DurationError::Malformed);
        };
        let index = next_unit + offset;
        let value: u64 = number.parse().map_err(|_| DurationError::Overflow)?;
        seconds = value
            .checked_mul(UNITS[index].1)
            .and_then(|s| s.checked_add(seconds))
            .ok_or(DurationError::Overflow)?;
        next_unit = index + 1;
        rest = chars.as_str();
    }
    Ok(Duration::from_secs(seconds))
}

/// The shortest text [`parse_duration`] reads back as `duration` (whole
/// seconds): "2m", "1m30s", "1h", "0s".
pub(crate) fn duration_text(duration: Duration) -> String {
    let mut left = duration.as_secs();
    if left == 0 {
        return "0s".to_owned();
    }
    let mut out = String::new();
    for (unit, per) in UNITS {
        let count = left / per;
        if count > 0 {
            out.push_str(&format!("{count}{unit}"));
            left %= per;
        }
    }
    out
}
