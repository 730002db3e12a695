//! `airlock audit serve` on a database, as a responder starts it: the URL
//! it printed, and its live stream read as a browser's EventSource would.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};

/// A running console; killed when dropped.
#[derive(Debug)]
pub struct Console {
    child: Child,
    /// What it printed: `http://127.0.0.1:PORT/?token=TOKEN`.
    pub url: String,
}

impl Console {
    /// Starts `airlock audit serve` on `db`, with `key` as the trust anchor.
    pub async fn start(airlock: &str, db: &Path, key: &Path) -> Self {
        Self::start_trusting(airlock, db, Some(key)).await
    }

    /// Starts `airlock audit serve` on a central store (`postgres://…`)
    /// with no `--audit-key`: every session is verified against the key
    /// its node enrolled.
    pub async fn start_central(airlock: &str, url: &Path) -> Self {
        Self::start_trusting(airlock, url, None).await
    }

    async fn start_trusting(airlock: &str, db: &Path, key: Option<&Path>) -> Self {
        let mut serve = Command::new(airlock);
        serve
            .args(["audit", "serve", "--listen", "127.0.0.1:0"])
            .arg("--audit-db")
            .arg(db);
        if let Some(key) = key {
            serve.arg("--audit-key").arg(key);
        }
        let mut child = serve
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn airlock audit serve");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line()).await;
        let line = match first {
            Ok(Ok(Some(line))) => line,
            other => {
                let _ = child.start_kill();
                let mut err = String::new();
                if let Some(mut stderr) = child.stderr.take() {
                    let read = stderr.read_to_string(&mut err);
                    let _ = tokio::time::timeout(Duration::from_secs(5), read).await;
                }
                panic!("`airlock audit serve` printed no URL line ({other:?}); stderr: {err}");
            }
        };
        let url = line
            .split_whitespace()
            .find(|w| w.starts_with("http://127.0.0.1:") && w.contains("?token="))
            .unwrap_or_else(|| panic!("no http://127.0.0.1:PORT/?token= URL in {line:?}"))
            .to_owned();
        // Keep the pipes drained, so the console never blocks on a full one.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        if let Some(stderr) = child.stderr.take() {
            let mut errs = BufReader::new(stderr).lines();
            tokio::spawn(async move {
                while let Ok(Some(line)) = errs.next_line().await {
                    // The server's stderr goes into the test's log.
                    #[allow(clippy::print_stderr)]
                    {
                        eprintln!("airlock audit serve: {line}");
                    }
                }
            });
        }
        Self { child, url }
    }

    /// `127.0.0.1:PORT`.
    pub fn authority(&self) -> &str {
        let rest = self.url.trim_start_matches("http://");
        rest.split('/').next().unwrap_or(rest)
    }

    pub fn token(&self) -> &str {
        self.url.split("token=").nth(1).unwrap_or_default()
    }

    /// Follows `session` from after event `after` (`/api/sessions/ID/live`).
    pub async fn live(&self, session: &str, after: u64) -> LiveStream {
        let mut stream = TcpStream::connect(self.authority())
            .await
            .expect("connect to the console");
        let request = format!(
            "GET /api/sessions/{session}/live?after={after} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\n\r\n",
            self.authority(),
            self.token()
        );
        stream.write_all(request.as_bytes()).await.expect("send");
        let mut reader = BufReader::new(stream);
        let mut head = String::new();
        loop {
            let mut line = String::new();
            let n = reader.read_line(&mut line).await.expect("read the head");
            assert!(n > 0, "the console closed the stream: {head}");
            if line == "\r\n" {
                break;
            }
            head.push_str(&line);
        }
        assert!(
            head.starts_with("HTTP/1.1 200") && head.contains("text/event-stream"),
            "{head}"
        );
        LiveStream { reader }
    }
}

impl Drop for Console {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// A live stream's events, as `(event, data)`.
#[derive(Debug)]
pub struct LiveStream {
    reader: BufReader<TcpStream>,
}

impl LiveStream {
    /// The next event whose data satisfies `wanted`, and how long it took
    /// to arrive; panics after `within`.
    pub async fn until(
        &mut self,
        within: Duration,
        wanted: impl Fn(&str, &serde_json::Value) -> bool,
    ) -> (serde_json::Value, Duration) {
        let start = Instant::now();
        let mut event = String::new();
        loop {
            let mut line = String::new();
            let left = within.saturating_sub(start.elapsed());
            let read = tokio::time::timeout(left, self.reader.read_line(&mut line)).await;
            let Ok(read) = read else {
                panic!("no wanted event within {within:?}");
            };
            assert!(read.expect("read the stream") > 0, "the stream ended");
            // Chunked transfer coding: size lines and blank lines between.
            let line = line.trim_end();
            if let Some(name) = line.strip_prefix("event: ") {
                event = name.to_owned();
            } else if let Some(data) = line.strip_prefix("data: ") {
                let value: serde_json::Value = serde_json::from_str(data).expect("JSON data");
                if wanted(&event, &value) {
                    return (value, start.elapsed());
                }
            }
        }
    }
}

/// How long after the recorder stamped `ev` (an `Ev` from the live stream)
/// it is now: what a person watching waited to see it.
pub fn since_recorded(ev: &serde_json::Value) -> Duration {
    let now_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_micros();
    let recorded_us = ev["ts_us"].as_i64().expect("an event with ts_us");
    let lag_us = i128::try_from(now_us).unwrap_or(i128::MAX) - i128::from(recorded_us);
    Duration::from_micros(u64::try_from(lag_us).unwrap_or(0))
}

/// Chromium, where `scripts/setup` installs it.
pub const CHROMIUM: &str = "/usr/bin/chromium";

/// Fails, naming the fix, when a browser test in `dir` (tests/console)
/// cannot run: playwright-core, Chromium or node missing. A failure, not
/// a skip: a console nobody drove is not a tested console.
pub fn check_browser_prerequisites(dir: &Path) {
    let mut missing = Vec::new();
    if !dir
        .join("node_modules/playwright-core/package.json")
        .is_file()
    {
        missing.push(format!(
            "playwright-core is not installed in {} (npm ci there)",
            dir.display()
        ));
    }
    if !Path::new(CHROMIUM).exists() {
        missing.push(format!("Chromium is not installed at {CHROMIUM}"));
    }
    let node = std::process::Command::new("node").arg("--version").output();
    if !node.is_ok_and(|o| o.status.success()) {
        missing.push("node is not on PATH".into());
    }
    assert!(
        missing.is_empty(),
        "the console's browser test cannot run: {}; run scripts/setup, which installs them",
        missing.join("; ")
    );
}
