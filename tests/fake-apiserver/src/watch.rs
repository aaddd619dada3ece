//! Watch streams: newline-delimited JSON `WatchEvent`s over a chunked HTTP
//! response, fed from the store's ordered per-watch channel.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::{Instant, Interval};

use super::resource::ResourceType;
use super::selector::Filter;
use super::server::{Body, Shared, render_object};
use super::status::ApiError;
use super::store::{ChangeKind, WatchMsg, WatchStart};

pub(crate) struct WatchParams {
    pub rt: ResourceType,
    pub version: String,
    pub filter: Filter,
    pub bookmarks: bool,
    pub timeout: Option<Duration>,
    pub partial: bool,
    pub start: WatchStart,
}

/// One watch event line, `type` before `object` as the real API server
/// writes it (Go's `metav1.WatchEvent` field order): a client that reads the
/// type first decodes the object straight into its kind, and a fake that put
/// `object` first (serde_json's sorted map) would make every client buffer it.
fn line(typ: &str, object: Value) -> Bytes {
    let mut s = format!(r#"{{"type":{},"object":"#, Value::from(typ));
    s.push_str(&object.to_string());
    s.push_str("}\n");
    Bytes::from(s)
}

fn stream_response(rx: mpsc::Receiver<Bytes>) -> hyper::Response<Body> {
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
    });
    hyper::Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .body(StreamBody::new(stream).boxed_unsync())
        .expect("response")
}

/// Starts a watch and returns its streaming response.
pub(crate) fn serve(shared: Arc<Shared>, p: WatchParams) -> hyper::Response<Body> {
    let registered = shared
        .store
        .lock()
        .unwrap()
        .watch(&p.rt, &p.filter, p.start);
    let (out_tx, out_rx) = mpsc::channel::<Bytes>(64);
    match registered {
        Err(e) => {
            // Like kube-apiserver: HTTP 200 and a single ERROR event (410 Expired for
            // a compacted resourceVersion), then the stream ends.
            let _ = out_tx.try_send(line("ERROR", e.to_status()));
        }
        Ok((id, rx)) => {
            tokio::spawn(run(shared, id, rx, out_tx, p));
        }
    }
    stream_response(out_rx)
}

async fn maybe_sleep(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

async fn maybe_tick(t: &mut Option<Interval>) {
    match t {
        Some(t) => {
            t.tick().await;
        }
        None => std::future::pending().await,
    }
}

struct Watch {
    shared: Arc<Shared>,
    rx: mpsc::UnboundedReceiver<WatchMsg>,
    out: mpsc::Sender<Bytes>,
    p: WatchParams,
}

impl Watch {
    fn render(&self, msg: &WatchMsg) -> Option<Bytes> {
        let p = &self.p;
        match msg {
            WatchMsg::Change(c) => {
                let new = c.new.thaw();
                let new_m = p.filter.matches(&new);
                let old_m = match (&c.old, p.filter.selects_all()) {
                    (Some(o), false) => Some(p.filter.matches(&o.thaw())),
                    (Some(_), true) => Some(true),
                    (None, _) => None,
                };
                let typ = match c.kind {
                    ChangeKind::Added => new_m.then_some("ADDED"),
                    ChangeKind::Modified => match (old_m.unwrap_or(false), new_m) {
                        (true, true) => Some("MODIFIED"),
                        (false, true) => Some("ADDED"),
                        (true, false) => Some("DELETED"),
                        (false, false) => None,
                    },
                    ChangeKind::Deleted => old_m.unwrap_or(new_m).then_some("DELETED"),
                }?;
                Some(line(typ, render_object(&p.rt, &p.version, &new, p.partial)))
            }
            WatchMsg::Bookmark { rv, initial_end } => {
                if !p.bookmarks && !initial_end {
                    return None;
                }
                let (api_version, kind) = if p.partial {
                    (
                        "meta.k8s.io/v1".to_string(),
                        "PartialObjectMetadata".to_string(),
                    )
                } else {
                    (p.rt.api_version(&p.version), p.rt.kind.clone())
                };
                let mut metadata = json!({"resourceVersion": rv.to_string()});
                if *initial_end {
                    metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
                }
                Some(line(
                    "BOOKMARK",
                    json!({"kind": kind, "apiVersion": api_version, "metadata": metadata}),
                ))
            }
        }
    }

    async fn send(&self, msg: WatchMsg) -> bool {
        match self.render(&msg) {
            Some(b) => self.out.send(b).await.is_ok(),
            None => true,
        }
    }

    /// Sends everything already queued, then a bookmark at the current resourceVersion.
    /// Draining under the store lock guarantees no event at or below that version is still pending.
    async fn flush_with_bookmark(&mut self) -> bool {
        let (pending, rv) = {
            let store = self.shared.store.lock().unwrap();
            let mut pending = Vec::new();
            while let Ok(m) = self.rx.try_recv() {
                pending.push(m);
            }
            (pending, store.rv)
        };
        for m in pending {
            if !self.send(m).await {
                return false;
            }
        }
        self.send(WatchMsg::Bookmark {
            rv,
            initial_end: false,
        })
        .await
    }
}

async fn run(
    shared: Arc<Shared>,
    id: u64,
    rx: mpsc::UnboundedReceiver<WatchMsg>,
    out: mpsc::Sender<Bytes>,
    p: WatchParams,
) {
    let mut cut = shared.cut.subscribe();
    cut.borrow_and_update();
    let mut bookmark_now = shared.bookmark_now.subscribe();
    bookmark_now.borrow_and_update();
    let mut paused = shared.faults.paused_rx();
    let interval = *shared.bookmark_interval.lock().unwrap();
    let mut ticker = interval.map(|d| tokio::time::interval_at(Instant::now() + d, d));
    let deadline = p.timeout.map(|t| Instant::now() + t);
    let bookmarks = p.bookmarks;
    let mut w = Watch {
        shared: shared.clone(),
        rx,
        out,
        p,
    };
    loop {
        if *paused.borrow_and_update() {
            tokio::select! {
                _ = cut.changed() => break,
                _ = w.out.closed() => break,
                r = paused.changed() => if r.is_err() { break },
            }
            continue;
        }
        tokio::select! {
            biased;
            _ = cut.changed() => break,
            _ = w.out.closed() => break,
            r = paused.changed() => if r.is_err() { break },
            _ = maybe_sleep(deadline) => {
                if bookmarks {
                    w.flush_with_bookmark().await;
                }
                break;
            }
            _ = maybe_tick(&mut ticker), if bookmarks => {
                if !w.flush_with_bookmark().await { break }
            }
            r = bookmark_now.changed(), if bookmarks => {
                if r.is_err() || !w.flush_with_bookmark().await { break }
            }
            msg = w.rx.recv() => match msg {
                Some(m) => if !w.send(m).await { break },
                None => break,
            },
        }
    }
    shared.store.lock().unwrap().unsubscribe(id);
}

/// Parses `timeoutSeconds`.
pub(crate) fn timeout_param(v: Option<&String>) -> Result<Option<Duration>, ApiError> {
    match v {
        None => Ok(None),
        Some(s) => s
            .parse::<u64>()
            .map(|n| (n > 0).then(|| Duration::from_secs(n)))
            .map_err(|_| ApiError::bad_request(format!("invalid timeoutSeconds {s:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_line_names_its_type_before_its_object() {
        let l = line("ADDED", json!({"kind": "Service", "apiVersion": "v1"}));
        assert_eq!(
            std::str::from_utf8(&l).unwrap(),
            "{\"type\":\"ADDED\",\"object\":{\"apiVersion\":\"v1\",\"kind\":\"Service\"}}\n"
        );
    }
}
