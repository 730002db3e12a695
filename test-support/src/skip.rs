//! What a test does when its prerequisite is missing.

/// A test whose prerequisite is missing (root, a tool, a kernel feature) calls
/// this and returns. In CI (`CI=true`) the test fails here instead: a green CI
/// run must mean that every test ran. Elsewhere it skips loudly, on stderr,
/// naming the test (the test harness names each test's thread after it).
#[track_caller]
pub fn skip_or_fail(why: &str) {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("this test");
    if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") {
        panic!("{test}: prerequisite missing in CI (CI=true), failing instead of skipping: {why}");
    }
    // Skipped loudly: into the test's log.
    #[allow(clippy::print_stderr)]
    {
        eprintln!("SKIPPED {test}: {why}");
    }
}
