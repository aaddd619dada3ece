//! DNS over TCP: two-byte length-prefixed messages (RFC 1035 §4.2.2, framed
//! by tokio-util's codec), one task per connection. On shutdown it stops
//! accepting, and each connection finishes the query it is answering.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use hickory_server::net::xfer::Protocol;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_util::codec::{Framed, LengthDelimitedCodec};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::response::{Handled, handle};
use super::transfer::{self, TransferPolicy};
use crate::index::Index;
use crate::ops::metrics::DnsRecorder;

/// A protocol's metrics, shared by its connections.
pub(super) type SharedRecorder = Arc<Mutex<DnsRecorder>>;

/// Idle time after which a connection is closed (also the bound of a TLS handshake).
pub(super) const IDLE: Duration = Duration::from_secs(10);

/// Accepts connections until `shutdown`, then waits for open connections to
/// finish their current query.
pub async fn serve(
    listener: TcpListener,
    index: Arc<Index>,
    recorder: DnsRecorder,
    transfers: Arc<TransferPolicy>,
    shutdown: CancellationToken,
) {
    let recorder = Arc::new(Mutex::new(recorder));
    accept(listener, shutdown.clone(), move |stream, peer| {
        connection(
            stream,
            peer,
            index.clone(),
            recorder.clone(),
            Some(transfers.clone()),
            shutdown.clone(),
            false,
        )
    })
    .await;
}

/// The accept loop of DNS over TCP and over TLS (RFC 7858 §3.3: same
/// framing): `open` makes the task that serves one accepted stream (for TLS,
/// the handshake first, then [`connection`]). On `shutdown` it stops
/// accepting and waits for those tasks.
pub(super) async fn accept<T>(
    listener: TcpListener,
    shutdown: CancellationToken,
    mut open: impl FnMut(TcpStream, SocketAddr) -> T,
) where
    T: Future<Output = ()> + Send + 'static,
{
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    connections.spawn(open(stream, peer));
                }
                Err(error) => {
                    warn!(%error, "TCP accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            () = shutdown.cancelled() => break,
        }
        while connections.try_join_next().is_some() {}
    }
    drop(listener);
    while connections.join_next().await.is_some() {}
}

/// Answers the queries of one connection, plain or TLS (`encrypted`: the
/// responses may be padded), until it is idle for [`IDLE`], closed, or `shutdown`.
pub(super) async fn connection<S: AsyncRead + AsyncWrite + Unpin>(
    stream: S,
    peer: SocketAddr,
    index: Arc<Index>,
    recorder: SharedRecorder,
    transfers: Option<Arc<TransferPolicy>>,
    shutdown: CancellationToken,
    encrypted: bool,
) {
    let mut framed = Framed::new(
        stream,
        LengthDelimitedCodec::builder()
            .length_field_length(2)
            .new_codec(),
    );
    loop {
        // Queries already received are answered before a shutdown is noticed.
        let frame = tokio::select! {
            biased;
            frame = tokio::time::timeout(IDLE, framed.next()) => frame,
            () = shutdown.cancelled() => return,
        };
        let request = match frame {
            Ok(Some(Ok(request))) => request,
            Ok(Some(Err(error))) => return debug!(%error, %peer, "TCP read failed"),
            Ok(None) | Err(_) => return,
        };
        let transfer = match &transfers {
            Some(policy) => transfer::respond(&index, policy, &request, peer).await,
            None => None,
        };
        if let Some(messages) = transfer {
            for message in messages {
                if let Err(error) = framed.send(Bytes::from(message)).await {
                    return debug!(%error, %peer, "TCP write failed");
                }
            }
            continue;
        }
        let started = Instant::now();
        let (bytes, outcome) = match handle(&index, &request, peer, Protocol::Tcp) {
            Handled::Answered(request, mut response) => {
                match response.encode_stream(&request, encrypted) {
                    Ok(bytes) => (bytes, response.outcome(&request)),
                    Err(error) => return warn!(%error, %peer, "cannot encode a TCP response"),
                }
            }
            Handled::Malformed(bytes, outcome) => (bytes, outcome),
            Handled::Ignored => continue,
        };
        {
            let mut recorder = recorder.lock().unwrap_or_else(|e| e.into_inner());
            recorder.record(outcome.rtype, outcome.rcode, started.elapsed());
            recorder.problem(outcome.problem);
            recorder.flush();
        }
        if let Err(error) = framed.send(Bytes::from(bytes)).await {
            return debug!(%error, %peer, "TCP write failed");
        }
    }
}
