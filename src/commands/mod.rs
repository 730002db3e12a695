//! One module per subcommand.

pub mod approvals;
pub mod audit;
pub mod ca;
pub mod console;
pub mod mcp;
pub mod policy;
pub mod proxy;
pub mod run;
pub mod session;
pub mod sidecar;
