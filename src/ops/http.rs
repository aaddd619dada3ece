//! The operations listener: `/metrics` (Prometheus), `/healthz` (alive) and
//! `/readyz` (first sync done and every source synced recently), and, when
//! enabled, `/debug/explain` (read only, see `crate::explain`; operator-only:
//! it shows the whole clusterset to whoever reaches the port).
//!
//! It runs the accept loop every listener shares (`plumbing/listen.rs`), within its
//! own caps on open connections; a connection must send each request head
//! within the header timeout (that also closes an idle kept-alive
//! connection), is closed when no byte moves for the idle timeout (a client
//! that stops reading its response), and may send no more than a small
//! head and no body: these are GET endpoints.

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::{Body, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::explain::shared::Published;
use crate::index::Index;
use crate::ops::metrics::Metrics;
use crate::plumbing::listen::{self, Caps, Connections};

/// Largest request head (request line and headers) read: hyper's smallest
/// buffer. A larger one gets 431.
const MAX_HEAD_BYTES: usize = 8192;
/// Most header fields in a request.
const MAX_HEADERS: usize = 32;

/// The listener's limits, and whether `/debug/explain` is served.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Settings {
    /// Most open connections, in total and per client address.
    pub caps: Caps,
    /// A connection waiting for a request gets this long to send its whole
    /// head (from the accept, or from the end of the previous response).
    pub header_timeout: Duration,
    /// A connection on which no byte is read or written for this long is closed.
    pub idle_timeout: Duration,
    /// Serve `/debug/explain` (operator-only: off by default).
    pub debug_explain: bool,
}

/// What the endpoints report on.
pub(crate) struct Health {
    /// The served index (its first sync gates readiness).
    pub index: Arc<Index>,
    /// Every metric.
    pub metrics: Arc<Metrics>,
    /// Not ready when a source has not synced for longer than this.
    pub max_sync_age: Duration,
    /// The pipeline's engine, for `/debug/explain`.
    pub published: Arc<Published>,
}

impl Health {
    /// Whether the server should receive traffic, and why not.
    pub(crate) fn readiness(&self) -> Result<(), String> {
        if !self.index.is_synced() {
            return Err("first sync not done".into());
        }
        match self.metrics.oldest_sync() {
            Some(age) if age > self.max_sync_age => Err(format!(
                "a source has not synced for {}s (limit {}s)",
                age.as_secs(),
                self.max_sync_age.as_secs()
            )),
            _ => Ok(()),
        }
    }
}

/// Serves the endpoints on `listener` within `settings` until the task is
/// dropped; accept errors do not end it (see `plumbing::listen::accept`).
pub(crate) async fn serve(
    listener: TcpListener,
    health: Arc<Health>,
    settings: Settings,
) -> anyhow::Result<()> {
    let connections = Connections::new(settings.caps);
    let metrics = health.metrics.operations.clone();
    let settings = Arc::new(settings);
    // Never cancelled: on shutdown the listener is dropped with the server's
    // task, after DNS has drained (probes keep answering until then).
    let forever = CancellationToken::new();
    listen::accept(
        listener,
        "operations",
        &connections,
        &metrics,
        forever,
        move |stream, peer| connection(stream, peer, health.clone(), settings.clone()),
    )
    .await;
    Ok(())
}

/// Serves one connection until the client closes it, a timeout closes it,
/// or an error ends it.
async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    health: Arc<Health>,
    settings: Arc<Settings>,
) {
    let activity = Arc::new(Activity::new());
    let stream = Watched {
        inner: stream,
        activity: activity.clone(),
    };
    let routes = settings.clone();
    let service = service_fn(move |request| {
        let (health, routes) = (health.clone(), routes.clone());
        async move { Ok::<_, Infallible>(route(&request, &health, &routes)) }
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(settings.header_timeout)
        .max_buf_size(MAX_HEAD_BYTES)
        .max_headers(MAX_HEADERS);
    let serving = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(serving);
    let idle = settings.idle_timeout;
    loop {
        tokio::select! {
            served = &mut serving => {
                if let Err(error) = served {
                    debug!(%error, %peer, "HTTP connection ended with an error");
                }
                return;
            }
            () = tokio::time::sleep_until(activity.last() + idle) => {
                if activity.last() + idle <= Instant::now() {
                    return debug!(%peer, "HTTP connection idle; closed");
                }
            }
        }
    }
}

/// When a connection last moved a byte.
struct Activity {
    since: Instant,
    /// Milliseconds from `since` to the last read or write.
    last: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Self {
            since: Instant::now(),
            last: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        let millis = u64::try_from(self.since.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.store(millis, Ordering::Relaxed);
    }

    fn last(&self) -> Instant {
        self.since + Duration::from_millis(self.last.load(Ordering::Relaxed))
    }
}

/// A stream that records in its [`Activity`] every read or write that moved bytes.
struct Watched {
    inner: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

fn route(
    request: &Request<Incoming>,
    health: &Health,
    settings: &Settings,
) -> Response<Full<Bytes>> {
    // GET endpoints: a request with a body is refused unread, and the
    // connection closed (hyper does not keep alive with a body left unread).
    if !request.body().is_end_stream() {
        let mut response = reply(
            StatusCode::PAYLOAD_TOO_LARGE,
            "text/plain",
            "requests carry no body here\n".into(),
        );
        response.headers_mut().insert(
            hyper::header::CONNECTION,
            hyper::header::HeaderValue::from_static("close"),
        );
        return response;
    }
    match request.uri().path() {
        "/metrics" => reply(
            StatusCode::OK,
            "text/plain; version=0.0.4",
            health.metrics.render(),
        ),
        "/healthz" => reply(StatusCode::OK, "text/plain", "ok\n".into()),
        "/readyz" => match health.readiness() {
            Ok(()) => reply(StatusCode::OK, "text/plain", "ready\n".into()),
            Err(why) => reply(
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain",
                format!("not ready: {why}\n"),
            ),
        },
        "/debug/explain" if settings.debug_explain => {
            let (status, content_type, body) =
                super::explain::reply(request.uri().query(), &health.published, &health.index);
            reply(status, content_type, body)
        }
        "/debug/explain" => reply(
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found: /debug/explain is off (operator-only: start with --debug-explain)\n".into(),
        ),
        _ if settings.debug_explain => reply(
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found: try /metrics, /healthz, /readyz, /debug/explain?name=NAME&type=TYPE\n"
                .into(),
        ),
        _ => reply(
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found: try /metrics, /healthz, /readyz\n".into(),
        ),
    }
}

fn reply(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    if let Ok(value) = content_type.parse() {
        response
            .headers_mut()
            .insert(hyper::header::CONTENT_TYPE, value);
    }
    response
}
