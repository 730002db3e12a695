//! Which kernel boundary `airlock run` puts around the command: the
//! namespace sandbox (the default) or gVisor (`--isolation gvisor`). Suites
//! that must hold under both take one and pass its [`Isolation::args`].

/// The `--isolation` of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isolation {
    Namespaces,
    Gvisor,
}

impl Isolation {
    /// Both, in the order the suites run them.
    pub const ALL: [Self; 2] = [Self::Namespaces, Self::Gvisor];

    /// `--isolation NAME`, as `airlock run` takes it.
    pub fn args(self) -> [&'static str; 2] {
        ["--isolation", self.name()]
    }

    /// The name the CLI and the record use.
    pub fn name(self) -> &'static str {
        match self {
            Self::Namespaces => "namespaces",
            Self::Gvisor => "gvisor",
        }
    }
}

/// One test per isolation from one body `fn BODY(isolation: Isolation)`
/// (`async fn` with `tokio`): the two tests are named by the caller, so a
/// failure says which isolation broke, and a test that ran before under
/// namespaces keeps its name (docs name it).
///
/// ```ignore
/// per_isolation!(tokio curl_is_captured_under =>
///     curl_is_captured, curl_is_captured_under_gvisor);
/// ```
#[macro_export]
macro_rules! per_isolation {
    (tokio $body:ident => $namespaces:ident, $gvisor:ident) => {
        #[tokio::test(flavor = "multi_thread")]
        async fn $namespaces() {
            $body($crate::isolation::Isolation::Namespaces).await
        }
        #[tokio::test(flavor = "multi_thread")]
        async fn $gvisor() {
            $body($crate::isolation::Isolation::Gvisor).await
        }
    };
    (sync $body:ident => $namespaces:ident, $gvisor:ident) => {
        #[test]
        fn $namespaces() {
            $body($crate::isolation::Isolation::Namespaces)
        }
        #[test]
        fn $gvisor() {
            $body($crate::isolation::Isolation::Gvisor)
        }
    };
}
