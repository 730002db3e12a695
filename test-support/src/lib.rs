//! Airlock's shared test fixtures, one module a job. A dev-dependency of the
//! workspace's crates, never a dependency of anything shipped.
//!
//! - [`skip`]: a test whose prerequisite is missing skips loudly, or fails in CI.
//! - [`pki`]: a CA for test upstreams, server configs it signs, a TLS client.
//! - [`server`]: a loopback TCP or TLS server whose accept loop stops when
//!   dropped; the base of every test upstream, hostile ones included.
//! - [`upstream`]: the standard HTTPS (or HTTP) upstream: echo, SSE,
//!   WebSocket, gRPC, uploads, static files and a git smart-HTTP server.
//! - [`proxy`]: the real `airlock proxy` on an ephemeral port.
//! - [`client`]: real clients (curl, python3, node) and what they printed;
//!   raw CONNECT tunnels through the proxy.
//! - [`audit_cli`]: `airlock audit` as a responder runs it.
//! - [`console`]: `airlock audit serve`, its URL and its live stream.
//! - [`disk`]: a directory's files and their sha256.
//! - [`isolation`]: namespaces or gVisor, and one test per isolation.
//! - [`record`]: `airlock run` with an audit database, its record read back
//!   and checked against the disk.
//! - [`audit_store`]: audit stores written through the auditor's API.
//! - [`chain`]: an independent implementation of the audit chain's format,
//!   to forge what an attacker with write access to the database could.
//! - [`sandbox`]: `airlock run` under an isolation against a TLS upstream.
//! - [`shim`]: sandboxes run through the shim's library API.
//! - [`podman`]: real podman containers, networks and test images.
//! - [`sidecar`]: an `airlock sidecar` process, its log and events.
//!   ConfigMap volume (the `..data` symlink swap).
//!   `pg_ctl`), killed and restarted at will.
//! - [`configmap`]: a directory laid out and updated as the kubelet does a
//! - [`postgres`]: a PostgreSQL server of the test's own (`initdb`,
//!
//! The `airlock` binary's path is known only to the root package's
//! integration tests, at compile time: they name it with [`airlock_bin!`]
//! and hand it to the fixtures that run it.

#![warn(missing_debug_implementations)]

pub mod audit_cli;
pub mod audit_store;
pub mod chain;
pub mod client;
pub mod configmap;
pub mod console;
pub mod disk;
pub mod isolation;
pub mod mcp_record;
pub mod pki;
pub mod podman;
pub mod postgres;
pub mod proxy;
pub mod record;
pub mod sandbox;
pub mod server;
pub mod shim;
pub mod sidecar;
pub mod skip;
pub mod upstream;

pub use skip::skip_or_fail;

/// The path of the `airlock` binary under test, as a `&'static str`.
///
/// Expands to `env!("CARGO_BIN_EXE_airlock")` in the caller: cargo sets that
/// variable only while it compiles the root package's integration tests, so
/// this works there and nowhere else (not in this crate, not in the other
/// crates' tests).
#[macro_export]
macro_rules! airlock_bin {
    () => {
        env!("CARGO_BIN_EXE_airlock")
    };
}
