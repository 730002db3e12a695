//! Airlock's own exit statuses, in one place: what a script calling airlock
//! can tell apart. A sandboxed command's own status is passed through
//! unchanged, so these are chosen not to be mistaken for one.

/// Refused or incomplete: what was asked could not be done as asked (for
/// example `audit files --undo` refused, or `audit verify` found damage).
pub(crate) const REFUSED: u8 = 1;
/// Bad input: a usage, configuration or policy error.
pub(crate) const USAGE: u8 = 2;
/// `policy test`: an `[[ask]]` rule would hold the request for a person.
pub(crate) const WOULD_ASK: u8 = 3;
/// A step or command ended by its timeout (as `timeout(1)` says it).
pub(crate) const TIMED_OUT: u8 = 124;
/// Airlock itself failed, bad arguments to `airlock run` included, so it
/// cannot be mistaken for the command's own status (as for `env`, `timeout`
/// and `docker run`).
pub(crate) const RUN_FAILED: u8 = 125;
