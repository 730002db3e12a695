//! What can go wrong serving the console, and how each answers.

use airlock_auditor::AuditError;
use http::StatusCode;

#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    // The io error is in the message, not a source: the binary joins
    // sources onto the line, which would say it twice.
    #[error("cannot listen on {addr}: {cause}; pick another address with --listen")]
    Listen {
        addr: std::net::SocketAddr,
        cause: std::io::Error,
    },
    #[error("cannot make an access token: {0}")]
    Token(String),
    /// A request the API cannot answer as asked: a 400 naming the fix.
    #[error("{0}")]
    BadRequest(String),
    /// No such session, event, file or page: a 404.
    #[error("{0}")]
    NotFound(String),
    #[error(transparent)]
    Audit(#[from] AuditError),
    #[error("a console task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

impl ConsoleError {
    /// The HTTP status a request that failed this way gets.
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            Self::BadRequest(_)
            | Self::Audit(
                AuditError::Query(_)
                | AuditError::BadSessionId(_)
                | AuditError::AmbiguousSession { .. },
            ) => StatusCode::BAD_REQUEST,
            Self::NotFound(_) | Self::Audit(AuditError::UnknownSession(_)) => StatusCode::NOT_FOUND,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}
