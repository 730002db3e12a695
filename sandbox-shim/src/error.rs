//! The one error type of the crate: each variant reads as a single line that
//! names the problem and the fix (the binary maps any of them to exit 125).

/// Why a sandbox could not be created or supervised.
#[derive(Debug, thiserror::Error)]
pub enum ShimError {
    #[error(
        "unprivileged user namespaces are disabled ({0}): set sysctl kernel.unprivileged_userns_clone=1 and user.max_user_namespaces>0 (and kernel.apparmor_restrict_unprivileged_userns=0 under AppArmor), or run as root"
    )]
    UserNamespacesDisabled(String),
    #[error("invalid sandbox spec: {0}")]
    InvalidSpec(String),
    #[error("{path}: {reason}: check that the path exists and is accessible")]
    Path { path: String, reason: String },
    #[error(
        "cgroup setup failed at {path}: {reason}: run as root with cgroup v1 controllers or a delegated cgroup v2 subtree, or drop --memory/--pids/--cpus"
    )]
    Cgroup { path: String, reason: String },
    #[error("sandbox setup failed: {0}")]
    Setup(String),
    #[error("sandbox supervision failed: {context}: {source}")]
    Io {
        context: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("sandbox was already released")]
    AlreadyReleased,
    #[error("this sandbox was not spawned for a session: set SandboxSpec::session to run steps")]
    NotASession,
    #[error(transparent)]
    Step(#[from] crate::step::StepError),
}

impl ShimError {
    pub(crate) fn io(context: &'static str, source: impl Into<std::io::Error>) -> Self {
        Self::Io {
            context,
            source: source.into(),
        }
    }
}
