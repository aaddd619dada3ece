//! The operations listener: `/metrics` (Prometheus), `/healthz` (alive) and
//! `/readyz` (first sync done and every source synced recently), and
//! `/debug/explain` (read only, see `crate::explain`).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tracing::debug;

use crate::explain::shared::Published;
use crate::index::Index;
use crate::ops::metrics::Metrics;

/// What the endpoints report on.
pub struct Health {
    /// The served index (its first sync gates readiness).
    pub index: Arc<Index>,
    /// Every metric.
    pub metrics: Arc<Metrics>,
    /// Not ready when a source has not synced for longer than this.
    pub max_sync_age: Duration,
    /// The reconciler, for `/debug/explain`.
    pub published: Arc<Published>,
}

impl Health {
    /// Whether the server should receive traffic, and why not.
    pub fn readiness(&self) -> Result<(), String> {
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

/// Serves the endpoints on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, health: Arc<Health>) -> anyhow::Result<()> {
    loop {
        let (stream, peer) = listener.accept().await?;
        let health = health.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let health = health.clone();
                async move { Ok::<_, Infallible>(route(&request, &health)) }
            });
            if let Err(error) = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                debug!(%error, %peer, "HTTP connection ended with an error");
            }
        });
    }
}

fn route(request: &Request<Incoming>, health: &Health) -> Response<Full<Bytes>> {
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
        "/debug/explain" => {
            let (status, content_type, body) =
                super::explain::reply(request.uri().query(), &health.published, &health.index);
            reply(status, content_type, body)
        }
        _ => reply(
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found: try /metrics, /healthz, /readyz, /debug/explain?name=NAME&type=TYPE\n"
                .into(),
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
