//! DNS over TCP: two-byte length-prefixed messages (RFC 1035 §4.2.2, framed
//! by tokio-util's codec), one task per connection, within the limits of
//! `tcp_limits` (RFC 7766 §6.2.3, §10). Each connection reads queries and
//! writes responses concurrently; at most `max_pending` responses wait, and
//! a client that takes none for `write_timeout` loses the connection. On
//! shutdown it stops accepting, and each connection writes the answers to
//! the queries it has read.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use hickory_server::net::xfer::Protocol;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::codec::{FramedRead, FramedWrite, LengthDelimitedCodec};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::dns::message::response::{Handled, handle};
use crate::dns::metrics::{DnsRecorder, TcpMetrics};
use crate::dns::transfer::zone::{self as transfer, TransferPolicy};
use crate::dns::transport::tcp_limits::TcpLimits;
use crate::dns::tsig::key_file::TsigKey;
use crate::index::Index;
use crate::plumbing::listen::{self, Connections};

/// What every connection shares.
pub(crate) struct Shared {
    /// The zone's names.
    pub index: Arc<Index>,
    /// Query metrics of the `tcp` protocol.
    pub recorder: Mutex<DnsRecorder>,
    /// Connection metrics.
    pub metrics: TcpMetrics,
    /// Open connections, counted against `limits.caps`.
    pub connections: Arc<Connections>,
    /// The limits of every connection.
    pub limits: TcpLimits,
    /// Who may transfer the zone (None: no transfers on these connections).
    pub transfers: Option<Arc<TransferPolicy>>,
    /// The key signed queries are checked against and their answers signed
    /// with (RFC 8945; a secondary signs its SOA checks).
    pub tsig: Option<Arc<TsigKey>>,
}

/// Accepts connections (the shared loop of `listen`, named `tcp`) until
/// `shutdown`, then waits for open connections to finish their current query.
pub(crate) async fn serve(listener: TcpListener, shared: Arc<Shared>, shutdown: CancellationToken) {
    let (connections, metrics) = (shared.connections.clone(), shared.metrics.listener.clone());
    listen::accept(
        listener,
        "tcp",
        &connections,
        &metrics,
        shutdown.clone(),
        move |stream, peer| {
            let (shared, shutdown) = (shared.clone(), shutdown.clone());
            async move { connection(stream, peer, &shared, &shutdown, false).await }
        },
    )
    .await;
}

/// Serves one connection (any byte stream carrying RFC 1035 §4.2.2 framing,
/// TLS included: `encrypted`, the responses may be padded) until the client
/// closes it, idles, stops reading, or the server shuts down.
pub(crate) async fn connection<S>(
    stream: S,
    peer: SocketAddr,
    shared: &Shared,
    shutdown: &CancellationToken,
    encrypted: bool,
) where
    S: AsyncRead + AsyncWrite + Send,
{
    let limits = &shared.limits;
    let codec = || {
        LengthDelimitedCodec::builder()
            .length_field_length(2)
            .new_codec()
    };
    let (reader, writer) = tokio::io::split(stream);
    let (pending, waiting) = mpsc::channel(limits.max_pending.max(1));
    let read = read_queries(
        FramedRead::new(reader, codec()),
        peer,
        shared,
        shutdown,
        encrypted,
        pending,
    );
    let write = write_responses(FramedWrite::new(writer, codec()), peer, limits, waiting);
    tokio::pin!(write);
    let written = tokio::select! {
        // The client is done (or idle, or we shut down): send what is due.
        () = read => write.await,
        // The client stopped reading or went away: drop the connection.
        written = &mut write => written,
    };
    if written == Written::TimedOut {
        shared.metrics.write_timeouts.inc();
    }
}

/// Reads queries and queues their responses; returns when the client closes
/// or idles, on a read error, or on shutdown. Waits (reads nothing) while
/// `max_pending` responses are queued.
async fn read_queries<R: AsyncRead>(
    frames: FramedRead<R, LengthDelimitedCodec>,
    peer: SocketAddr,
    shared: &Shared,
    shutdown: &CancellationToken,
    encrypted: bool,
    pending: mpsc::Sender<Bytes>,
) {
    let idle = shared.limits.idle_timeout;
    tokio::pin!(frames);
    loop {
        // Queries already received are answered before a shutdown is noticed.
        let frame = tokio::select! {
            biased;
            frame = tokio::time::timeout(idle, frames.next()) => frame,
            () = shutdown.cancelled() => return,
        };
        let request = match frame {
            Ok(Some(Ok(request))) => request,
            Ok(Some(Err(error))) => return debug!(%error, %peer, "TCP read failed"),
            Ok(None) | Err(_) => return,
        };
        let transfer = match &shared.transfers {
            Some(policy) => transfer::respond(&shared.index, policy, &request, peer).await,
            None => None,
        };
        let responses = match transfer {
            Some(messages) => messages.into_iter().map(Bytes::from).collect(),
            None => respond(shared, &request, peer, encrypted),
        };
        for response in responses {
            if pending.send(response).await.is_err() {
                return;
            }
        }
    }
}

/// The response to one query (none: nothing is due).
fn respond(shared: &Shared, packet: &[u8], peer: SocketAddr, encrypted: bool) -> Vec<Bytes> {
    let started = Instant::now();
    let (bytes, outcome) = match handle(&shared.index, packet, peer, Protocol::Tcp) {
        Handled::Answered(request, mut response) => {
            let signed = response.signed(shared.tsig.as_deref(), packet, &request, |r, _| {
                r.encode_stream(&request, encrypted)
            });
            let encoded = signed.unwrap_or_else(|| {
                let bytes = response.encode_stream(&request, encrypted)?;
                Ok((bytes, response.outcome(&request)))
            });
            match encoded {
                Ok(answered) => answered,
                Err(error) => {
                    warn!(%error, %peer, "cannot encode a TCP response");
                    return Vec::new();
                }
            }
        }
        Handled::Malformed(bytes, outcome) => (bytes, outcome),
        Handled::Ignored => return Vec::new(),
    };
    let mut recorder = shared.recorder.lock().unwrap_or_else(|e| e.into_inner());
    recorder.record(outcome.rtype, outcome.rcode, started.elapsed());
    recorder.problem(outcome.problem);
    recorder.flush();
    vec![Bytes::from(bytes)]
}

/// How writing responses ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Written {
    /// Every queued response was written.
    All,
    /// A write failed (the client went away).
    Failed,
    /// The client took no response for `write_timeout`.
    TimedOut,
}

/// Writes queued responses until the queue closes; returns early when a
/// write fails or the client takes a response for longer than `write_timeout`.
async fn write_responses<W: AsyncWrite>(
    frames: FramedWrite<W, LengthDelimitedCodec>,
    peer: SocketAddr,
    limits: &TcpLimits,
    mut waiting: mpsc::Receiver<Bytes>,
) -> Written {
    tokio::pin!(frames);
    while let Some(response) = waiting.recv().await {
        // Every response already queued goes out in the same write: a client
        // that pipelines its queries (RFC 7766 §6.2.1.1) costs one system
        // call per batch, not per response.
        let mut batch = Some(response);
        let written = tokio::time::timeout(limits.write_timeout, async {
            while let Some(response) = batch.take().or_else(|| waiting.try_recv().ok()) {
                frames.as_mut().feed(response).await?;
            }
            SinkExt::<Bytes>::flush(&mut frames.as_mut()).await
        })
        .await;
        match written {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                debug!(%error, %peer, "TCP write failed");
                return Written::Failed;
            }
            Err(_) => return Written::TimedOut,
        }
    }
    Written::All
}
