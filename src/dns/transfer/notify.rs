//! NOTIFY (RFC 1996) to the secondaries of `--notify`: after the zone
//! changes (debounced, so a burst of commits makes one round), every zone
//! served (this one and the reverse zones) is announced to every secondary
//! over UDP, each retried with backoff until a matching response comes or a
//! newer change supersedes it. Secondaries then transfer the zone. With
//! `--tsig-key` each NOTIFY is signed (RFC 8945 §5.1) and only a response
//! signed with the same key acknowledges it (§5.4); an error response is
//! taken unsigned, as a secondary that does not know the key sends it
//! (§5.2.1), so that its code is logged.

use std::convert::Infallible;
use std::hash::{BuildHasher, RandomState};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, Record, RecordType};
use tokio::net::UdpSocket;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::dns::metrics::DnsMetrics;
use crate::dns::tsig::key_file::TsigKey;
use crate::dns::tsig::sign;
use crate::index::Index;
use crate::model::backoff::Backoff;
use crate::plumbing::log_limit::LogLimit;

/// Quiet time after a change before notifying: a burst of commits makes one round.
const DEBOUNCE: Duration = Duration::from_secs(1);
/// Longest wait for quiet while changes keep coming.
const MAX_DELAY: Duration = Duration::from_secs(5);
/// Retry interval: 1 s, doubled after each unanswered NOTIFY, up to 60 s
/// (RFC 1996 §3.6 suggests 60 s).
const RETRY: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));
/// At most one log line per this interval about bad responses.
const LOG_EVERY: Duration = Duration::from_secs(60);

/// Sends NOTIFYs to `secondaries` after each change of `index` until
/// `shutdown`, then waits forever (the caller ends it by dropping it).
pub async fn run(
    index: Arc<Index>,
    secondaries: Vec<SocketAddr>,
    tsig: Option<Arc<TsigKey>>,
    metrics: Arc<DnsMetrics>,
    shutdown: CancellationToken,
) -> Infallible {
    let mut serials = index.serial_changes();
    let log = Arc::new(LogLimit::new(LOG_EVERY));
    let mut round = JoinSet::new();
    while !secondaries.is_empty() && settled(&mut serials, &shutdown).await {
        if !index.is_synced() {
            continue;
        }
        // A newer serial supersedes the NOTIFYs still being retried.
        round.abort_all();
        let apexes = std::iter::once(index.zone().clone())
            .chain(index.reverse_zones().iter().map(|z| z.apex().clone()));
        for apex in apexes {
            let soa = index.soa_at(&apex);
            for &secondary in &secondaries {
                let task = notify(
                    secondary,
                    soa.clone(),
                    tsig.clone(),
                    metrics.clone(),
                    log.clone(),
                );
                round.spawn(task);
            }
        }
        while round.try_join_next().is_some() {}
    }
    round.abort_all();
    std::future::pending().await
}

/// Waits for a change, then until none came for [`DEBOUNCE`] (at most
/// [`MAX_DELAY`]); false on shutdown.
async fn settled(
    serials: &mut tokio::sync::watch::Receiver<u32>,
    shutdown: &CancellationToken,
) -> bool {
    tokio::select! {
        changed = serials.changed() => if changed.is_err() { return false },
        () = shutdown.cancelled() => return false,
    }
    let deadline = Instant::now() + MAX_DELAY;
    loop {
        tokio::select! {
            () = tokio::time::sleep(DEBOUNCE) => break,
            changed = serials.changed() => if changed.is_err() { return false },
            () = shutdown.cancelled() => return false,
        }
        if Instant::now() >= deadline {
            break;
        }
    }
    serials.mark_unchanged();
    true
}

/// Notifies `secondary` of `soa` until it answers.
async fn notify(
    secondary: SocketAddr,
    soa: Record,
    tsig: Option<Arc<TsigKey>>,
    metrics: Arc<DnsMetrics>,
    log: Arc<LogLimit>,
) {
    let local: SocketAddr = if secondary.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        ([0u16; 8], 0).into()
    };
    let socket = match UdpSocket::bind(local).await {
        Ok(socket) if socket.connect(secondary).await.is_ok() => socket,
        _ => return warn!(%secondary, "cannot open a UDP socket to send NOTIFY"),
    };
    let mut sent = 0;
    loop {
        sent += 1;
        let wait = RETRY.after(sent);
        let id = RandomState::new().hash_one(std::time::Instant::now()) as u16;
        let mut message = message(id, &soa);
        let mut verifier = match &tsig {
            Some(key) => match sign::sign_request(&mut message, key, sign::now()) {
                Ok(verifier) => Some(verifier),
                Err(error) => return warn!(zone = %soa.name, %error, "cannot sign a NOTIFY"),
            },
            None => None,
        };
        let Ok(message) = message.to_vec() else {
            return warn!(zone = %soa.name, "cannot encode a NOTIFY");
        };
        if socket.send(&message).await.is_ok() {
            metrics.notify("sent");
        }
        let deadline = Instant::now() + wait;
        let mut buffer = [0u8; 4096];
        loop {
            let len = match tokio::time::timeout_at(deadline, socket.recv(&mut buffer)).await {
                Ok(Ok(len)) => len,
                // ICMP unreachable: the secondary is down; wait out the interval.
                Ok(Err(_)) => {
                    tokio::time::sleep_until(deadline).await;
                    break;
                }
                Err(_) => break,
            };
            let packet = &buffer[..len];
            let code = response(packet, id, &soa.name).filter(|code| {
                // §5.4: an acknowledgement counts only if signed with our key.
                *code != ResponseCode::NoError
                    || verifier.as_mut().is_none_or(|v| v.verify(packet).is_ok())
            });
            match code {
                Some(ResponseCode::NoError) => return metrics.notify("acknowledged"),
                Some(code) => {
                    metrics.notify("rejected");
                    if log.allow() {
                        warn!(%secondary, zone = %soa.name, %code, "secondary refused NOTIFY; is the zone configured there?");
                    }
                    return;
                }
                None => {
                    metrics.notify("malformed");
                    if log.allow() {
                        warn!(%secondary, zone = %soa.name, "ignored a malformed, unmatched or badly signed NOTIFY response");
                    }
                }
            }
        }
    }
}

/// A NOTIFY for the zone of `soa` (RFC 1996 §3.7: AA set, the SOA in the answer).
fn message(id: u16, soa: &Record) -> Message {
    let mut message = Message::new(id, MessageType::Query, OpCode::Notify);
    message.metadata.authoritative = true;
    message.add_query(Query::query(soa.name.clone(), RecordType::SOA));
    message.add_answer(soa.clone());
    message
}

/// The response code of `packet` if it answers NOTIFY `id` for `zone`
/// (RFC 1996 §4.7: same id, opcode and question); None otherwise.
fn response(packet: &[u8], id: u16, zone: &Name) -> Option<ResponseCode> {
    let reply = Message::from_vec(packet).ok()?;
    let meta = &reply.metadata;
    let matches = meta.id == id
        && meta.message_type == MessageType::Response
        && meta.op_code == OpCode::Notify
        && reply.queries.first().is_some_and(|q| q.name() == zone);
    matches.then_some(meta.response_code)
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use super::*;

    /// RFC 1996 §4.7: only a response with the NOTIFY's id, opcode and zone acknowledges it.
    #[test]
    fn only_matching_responses_count() {
        let zone = Name::from_str("clusterset.local.").unwrap();
        let index = Index::new(zone.clone(), 5, false, 7);
        let notify = message(42, &index.soa());
        let mut reply = notify.clone();
        reply.metadata.message_type = MessageType::Response;
        let bytes = |m: &Message| m.to_vec().unwrap();
        assert_eq!(
            response(&bytes(&reply), 42, &zone),
            Some(ResponseCode::NoError)
        );
        assert_eq!(response(&bytes(&reply), 43, &zone), None, "other id");
        assert_eq!(response(&bytes(&notify), 42, &zone), None, "not a response");
        let other = Name::from_str("example.org.").unwrap();
        assert_eq!(response(&bytes(&reply), 42, &other), None, "other zone");
        reply.metadata.response_code = ResponseCode::NotAuth;
        assert_eq!(
            response(&bytes(&reply), 42, &zone),
            Some(ResponseCode::NotAuth)
        );
        assert_eq!(response(&[0xff; 7], 42, &zone), None, "truncated");
    }
}
