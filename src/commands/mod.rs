//! One module per subcommand.

pub(crate) mod approvals;
pub(crate) mod audit;
pub(crate) mod ca;
pub(crate) mod console;
pub(crate) mod mcp;
pub(crate) mod policy;
pub(crate) mod proxy;
pub(crate) mod run;
pub(crate) mod session;
pub(crate) mod sidecar;
