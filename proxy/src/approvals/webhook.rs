//! `--approval-webhook URL`: each held request is POSTed as JSON to a
//! receiver of the user's (a chat bot, an internal tool), which decides
//! through the HTTP API or tells a person to.
//!
//! Never in the request's way: announcements go through a bounded queue to
//! one sender task, and a full queue drops the announcement (logged); the
//! request still waits and can be decided from the CLI. Each announcement
//! is tried a bounded number of times.

use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hickory_resolver::Resolver;
use http::{Request, Uri, header};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls::pki_types::CertificateDer;
use serde::Serialize;
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use super::PendingView;
use crate::body::BoxError;
use crate::upstream::connect::connect_any;
use crate::upstream::marked_runtime::MarkedRuntime;

/// Announcements waiting to be sent; past this, new ones are dropped.
const QUEUE: usize = 256;
/// Tries per announcement, and the pause before each retry (doubling).
const ATTEMPTS: u32 = 4;
const FIRST_RETRY: Duration = Duration::from_millis(500);
/// How long one try may take, connection included.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);

type HttpsClient = Client<hyper_rustls::HttpsConnector<WebhookConnector>, Full<Bytes>>;

/// Why the webhook cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// The URL as [`shown_url`] shows it.
    #[error(
        "--approval-webhook {0} is not an http:// or https:// URL; give the receiver's full URL, e.g. https://bot.example/airlock"
    )]
    BadUrl(String),
    #[error("--approval-webhook: a trusted certificate was rejected: {0}")]
    BadRoot(String),
}

/// The announcer; cheap to clone.
#[derive(Clone)]
pub struct Webhook {
    /// The URL as logs show it ([`shown_url`]).
    shown: Arc<str>,
    queue: mpsc::Sender<Bytes>,
    /// The sender task's parts until the first announcement starts it (on
    /// the proxy's runtime, which may not exist yet when this is made).
    sender: Arc<Mutex<Option<Sender>>>,
}

struct Sender {
    client: HttpsClient,
    url: Uri,
    shown: Arc<str>,
    announcements: mpsc::Receiver<Bytes>,
}

impl std::fmt::Debug for Webhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhook").field("url", &self.shown).finish()
    }
}

/// What the receiver gets: the request, and how to decide it.
#[derive(Serialize)]
struct Announcement<'a> {
    kind: &'static str,
    approval: &'a PendingView,
    decide: Decide,
}

#[derive(Serialize)]
struct Decide {
    /// The HTTP API's path for the decision (POST), on the admin listener
    /// or the session's approvals socket.
    api: String,
    approve: String,
    deny: String,
}

impl Webhook {
    /// The announcer for `url`; `roots` are trusted besides the webpki
    /// roots, as for upstreams. `mark`: the sidecar's `SO_MARK`, without
    /// which the sidecar's own capture rules would take the announcement
    /// back to its proxy.
    pub fn new(
        url: &str,
        roots: &[CertificateDer<'static>],
        mark: Option<u32>,
    ) -> Result<Self, WebhookError> {
        let shown: Arc<str> = shown_url(url).into();
        let bad = || WebhookError::BadUrl(shown.to_string());
        let uri: Uri = url.parse().map_err(|_| bad())?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
            return Err(bad());
        }
        let client = client(roots, mark)?;
        let (queue, announcements) = mpsc::channel(QUEUE);
        let sender = Sender {
            client,
            url: uri,
            shown: shown.clone(),
            announcements,
        };
        Ok(Self {
            shown,
            queue,
            sender: Arc::new(Mutex::new(Some(sender))),
        })
    }

    /// Queue the announcement of a held request; never waits. Called on
    /// the proxy's runtime.
    pub(super) fn announce(&self, view: &PendingView) {
        let idle = self.sender.lock().ok().and_then(|mut s| s.take());
        if let Some(sender) = idle {
            tokio::spawn(send_all(sender));
        }
        let id = view.id.as_str();
        let announcement = Announcement {
            kind: "approval_requested",
            approval: view,
            decide: Decide {
                api: format!("/v1/approvals/{id}"),
                approve: format!("airlock approve {id}"),
                deny: format!("airlock deny {id}"),
            },
        };
        let Ok(body) = serde_json::to_vec(&announcement) else {
            return;
        };
        if self.queue.try_send(Bytes::from(body)).is_err() {
            tracing::warn!(url = %self.shown, approval = id, "approval webhook queue full; not announced (decide with `airlock approvals`)");
        }
    }
}

fn client(
    extra_roots: &[CertificateDer<'static>],
    mark: Option<u32>,
) -> Result<HttpsClient, WebhookError> {
    let tls = crate::upstream::verified_tls(extra_roots).map_err(WebhookError::BadRoot)?;
    let tcp = WebhookConnector {
        resolver: Arc::new(crate::upstream::resolve::system_resolver(mark)),
        mark,
    };
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(tcp);
    Ok(Client::builder(TokioExecutor::new())
        .timer(TokioTimer::new())
        .build(https))
}

/// The receiver's address from the system's resolver, connected with the
/// mark. Unlike upstreams, a private address is fine: the receiver is the
/// operator's own choice, not the sandbox's.
#[derive(Clone)]
struct WebhookConnector {
    resolver: Arc<Resolver<MarkedRuntime>>,
    mark: Option<u32>,
}

impl tower_service::Service<Uri> for WebhookConnector {
    type Response = TokioIo<TcpStream>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let host = uri
                .host()
                .map(|h| h.trim_start_matches('[').trim_end_matches(']'))
                .ok_or("the webhook URL has no host")?
                .to_owned();
            let port = uri.port_u16().unwrap_or(match uri.scheme_str() {
                Some("http") => 80,
                _ => 443,
            });
            let ips: Vec<IpAddr> = match host.parse::<IpAddr>() {
                Ok(ip) => vec![ip],
                Err(_) => this
                    .resolver
                    .lookup_ip(host.as_str())
                    .await?
                    .iter()
                    .collect(),
            };
            let stream = connect_any(&ips, port, this.mark, &host).await?;
            Ok(TokioIo::new(stream))
        })
    }
}

/// A webhook URL as logs, errors and the record show it: its scheme, host
/// and port, with what follows (a user, the path, the query) replaced by
/// `***`. A receiver's URL is often its credential: Slack's and Teams'
/// incoming webhooks carry the secret in the path, others in `?token=`.
pub fn shown_url(url: &str) -> String {
    let (scheme, rest) = url
        .split_once("://")
        .map_or((None, url), |(scheme, rest)| (Some(scheme), rest));
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, after) = rest.split_at(end);
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    let mut shown = scheme.map(|s| format!("{s}://")).unwrap_or_default();
    shown.push_str(host);
    if host.len() != authority.len() || !after.trim_start_matches('/').is_empty() {
        shown.push_str("/***");
    }
    shown
}

/// One at a time, in order, each with bounded retries.
async fn send_all(sender: Sender) {
    let Sender {
        client,
        url,
        shown,
        mut announcements,
    } = sender;
    while let Some(body) = announcements.recv().await {
        let mut pause = FIRST_RETRY;
        for attempt in 1..=ATTEMPTS {
            match send(&client, &url, body.clone()).await {
                Ok(()) => break,
                Err(why) if attempt == ATTEMPTS => {
                    tracing::warn!(url = %shown, attempts = ATTEMPTS, "approval webhook failed; giving up on this announcement: {why}");
                }
                Err(why) => {
                    tracing::info!(url = %shown, attempt, "approval webhook failed, retrying: {why}");
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                }
            }
        }
    }
}

/// Why one announcement did not reach the webhook.
#[derive(Debug, thiserror::Error)]
enum SendError {
    #[error("{0}")]
    Request(#[from] http::Error),
    #[error("no answer within {}s", ATTEMPT_TIMEOUT.as_secs())]
    TimedOut,
    #[error("{0}")]
    Client(#[from] hyper_util::client::legacy::Error),
    #[error("the receiver answered {0}")]
    Status(http::StatusCode),
}

async fn send(client: &HttpsClient, url: &Uri, body: Bytes) -> Result<(), SendError> {
    let request = Request::post(url.clone())
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::USER_AGENT, "airlock-approvals")
        .body(Full::new(body))?;
    let response = tokio::time::timeout(ATTEMPT_TIMEOUT, client.request(request))
        .await
        .map_err(|_| SendError::TimedOut)??;
    match response.status() {
        status if status.is_success() => Ok(()),
        status => Err(SendError::Status(status)),
    }
}

#[cfg(test)]
mod tests {
    use super::shown_url;

    #[test]
    fn a_webhook_url_is_shown_without_what_could_be_its_secret() {
        for (url, shown) in [
            (
                "https://hooks.slack.com/services/T0/B0/XXXXSECRET",
                "https://hooks.slack.com/***",
            ),
            (
                "https://bot.example/hook?token=SECRET",
                "https://bot.example/***",
            ),
            ("https://user:SECRET@bot.example", "https://bot.example/***"),
            (
                "http://127.0.0.1:8080/SECRET#x",
                "http://127.0.0.1:8080/***",
            ),
            ("https://[::1]:9/a", "https://[::1]:9/***"),
            ("hooks.slack.com/services/SECRET", "hooks.slack.com/***"),
            ("https://bot.example", "https://bot.example"),
            ("https://bot.example/", "https://bot.example"),
            ("", ""),
        ] {
            assert_eq!(shown_url(url), shown, "{url}");
        }
    }
}
