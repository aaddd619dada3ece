//! A small DNS client over real UDP and TCP sockets, and what tests read from answers.

use std::collections::BTreeSet;
use std::hash::{BuildHasher, RandomState};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use tokio::time::timeout;

/// How long a client waits for a response.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(2);

/// `<labels>.svc.clusterset.local.`, e.g. `svc("web.shop")`.
pub fn svc(labels: &str) -> String {
    format!("{labels}.svc.clusterset.local.")
}

/// A random message id.
pub fn random_id() -> u16 {
    RandomState::new().hash_one(std::time::Instant::now()) as u16
}

/// A query for `name`/`rtype` with a random id and RD set (as stub resolvers send).
pub fn question(name: &str, rtype: RecordType) -> Message {
    let mut message = Message::query();
    message.metadata.id = random_id();
    message.metadata.recursion_desired = true;
    message.add_query(Query::query(
        Name::from_ascii(name).expect("a valid name"),
        rtype,
    ));
    message
}

/// `message` with an EDNS(0) OPT advertising `payload` bytes.
pub fn with_edns(mut message: Message, payload: u16) -> Message {
    let mut edns = Edns::new();
    edns.set_max_payload(payload);
    message.set_edns(edns);
    message
}

/// Sends raw bytes over UDP; the raw reply, or None when nothing comes within `wait`.
pub async fn udp_raw(addr: SocketAddr, bytes: &[u8], wait: Duration) -> Option<Vec<u8>> {
    let socket = UdpSocket::bind("127.0.0.1:0").await.expect("client socket");
    socket.send_to(bytes, addr).await.expect("query sent");
    let mut buf = vec![0u8; 65535];
    let (len, _) = timeout(wait, socket.recv_from(&mut buf))
        .await
        .ok()?
        .expect("reply read");
    buf.truncate(len);
    Some(buf)
}

/// Sends raw bytes over TCP (with the 2-byte length prefix) and reads one reply.
pub async fn tcp_raw(addr: SocketAddr, bytes: &[u8]) -> Vec<u8> {
    tcp_raw_many(addr, &[bytes]).await.remove(0)
}

/// Sends several messages on one TCP connection, then reads one reply per message.
pub async fn tcp_raw_many(addr: SocketAddr, messages: &[&[u8]]) -> Vec<Vec<u8>> {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await?;
        for bytes in messages {
            let len = u16::try_from(bytes.len()).expect("a small query");
            stream.write_all(&len.to_be_bytes()).await?;
            stream.write_all(bytes).await?;
        }
        let mut replies = Vec::new();
        for _ in messages {
            let len = stream.read_u16().await?;
            let mut reply = vec![0u8; usize::from(len)];
            stream.read_exact(&mut reply).await?;
            replies.push(reply);
        }
        std::io::Result::Ok(replies)
    };
    timeout(REPLY_TIMEOUT, exchange)
        .await
        .expect("TCP replies in time")
        .expect("TCP exchange")
}

/// Sends `message` over UDP and returns the checked response. Like `dig`,
/// asks up to three times: a datagram may be lost on a loaded machine.
pub async fn exchange_udp(addr: SocketAddr, message: &Message) -> (Message, usize) {
    let bytes = message.to_vec().expect("query encodes");
    for _ in 0..3 {
        if let Some(reply) = udp_raw(addr, &bytes, REPLY_TIMEOUT).await {
            return (checked(message, &reply), reply.len());
        }
    }
    panic!("no UDP reply from {addr} to three tries");
}

/// Sends `message` over TCP and returns the checked response.
pub async fn exchange_tcp(addr: SocketAddr, message: &Message) -> Message {
    let reply = tcp_raw(addr, &message.to_vec().expect("query encodes")).await;
    checked(message, &reply)
}

/// Decodes a reply and checks what every reply to `query` must hold: the
/// same id, QR set, RA clear (not a resolver), the question echoed byte for
/// byte (case included).
fn checked(query: &Message, reply: &[u8]) -> Message {
    let response = Message::from_vec(reply).expect("the reply decodes");
    let meta = &response.metadata;
    assert_eq!(meta.id, query.metadata.id, "id echoed");
    assert_eq!(meta.message_type, MessageType::Response);
    assert!(!meta.recursion_available, "RA is never set: {response:?}");
    assert_eq!(
        meta.recursion_desired, query.metadata.recursion_desired,
        "RD copied"
    );
    if meta.response_code != ResponseCode::FormErr && meta.op_code == OpCode::Query {
        let asked: Vec<String> = query.queries.iter().map(|q| q.name().to_ascii()).collect();
        let echoed: Vec<String> = response
            .queries
            .iter()
            .map(|q| q.name().to_ascii())
            .collect();
        assert_eq!(echoed, asked, "question echoed as asked");
    }
    response
}

/// One UDP query without EDNS.
pub async fn query(addr: SocketAddr, name: &str, rtype: RecordType) -> Message {
    exchange_udp(addr, &question(name, rtype)).await.0
}

/// One TCP query.
pub async fn query_tcp(addr: SocketAddr, name: &str, rtype: RecordType) -> Message {
    exchange_tcp(addr, &question(name, rtype)).await
}

/// What an answer comes to, for comparisons.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// NOERROR with these addresses (A/AAAA answers).
    Ips(BTreeSet<IpAddr>),
    /// NOERROR, nothing of the type, the zone SOA in the authority section.
    NoData,
    /// NXDOMAIN with the zone SOA in the authority section.
    NxDomain,
    /// Any other response code.
    Code(ResponseCode),
}

/// `Outcome::Ips` of these addresses.
pub fn ips<const N: usize>(addresses: [&str; N]) -> Outcome {
    Outcome::Ips(
        addresses
            .iter()
            .map(|a| a.parse().expect("an IP"))
            .collect(),
    )
}

/// Classifies a response, checking AA on in-zone answers and the SOA on negative ones.
pub fn outcome(response: &Message) -> Outcome {
    let code = response.metadata.response_code;
    let negative = match code {
        ResponseCode::NoError if response.answers.is_empty() => Some(Outcome::NoData),
        ResponseCode::NXDomain => Some(Outcome::NxDomain),
        ResponseCode::NoError => None,
        other => return Outcome::Code(other),
    };
    assert!(
        response.metadata.authoritative,
        "AA on in-zone answers: {response:?}"
    );
    if let Some(negative) = negative {
        assert_eq!(
            soa_count(response),
            1,
            "the zone SOA in the authority section: {response:?}"
        );
        return negative;
    }
    Outcome::Ips(
        response
            .answers
            .iter()
            .filter_map(|r| r.data.ip_addr())
            .collect(),
    )
}

/// Queries over UDP and classifies the answer.
pub async fn resolve(addr: SocketAddr, name: &str, rtype: RecordType) -> Outcome {
    outcome(&query(addr, name, rtype).await)
}

/// A and AAAA together: `(A outcome, AAAA outcome)`.
pub async fn resolve_both(addr: SocketAddr, name: &str) -> (Outcome, Outcome) {
    (
        resolve(addr, name, RecordType::A).await,
        resolve(addr, name, RecordType::AAAA).await,
    )
}

fn soa_count(response: &Message) -> usize {
    response
        .authorities
        .iter()
        .filter(|r| r.record_type() == RecordType::SOA)
        .count()
}

/// SRV answers as `(target, port)`, targets lower-cased with the final dot.
pub fn srv_targets(response: &Message) -> BTreeSet<(String, u16)> {
    response
        .answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::SRV(srv) => Some((srv.target.to_lowercase().to_ascii(), srv.port)),
            _ => None,
        })
        .collect()
}

/// Queries SRV over UDP; NOERROR is required. Returns `(target, port)` pairs
/// and the number of records (to see duplicates).
pub async fn srv(addr: SocketAddr, name: &str) -> (BTreeSet<(String, u16)>, usize) {
    let response = query(addr, name, RecordType::SRV).await;
    assert_eq!(
        response.metadata.response_code,
        ResponseCode::NoError,
        "{name}: {response:?}"
    );
    (srv_targets(&response), response.answers.len())
}

/// The set of `(target, port)` pairs given as string literals.
pub fn pairs<const N: usize>(pairs: [(&str, u16); N]) -> BTreeSet<(String, u16)> {
    pairs.iter().map(|(t, p)| ((*t).to_owned(), *p)).collect()
}

/// Whether an address lies in the default IPv4 VIP pool, 243.0.0.0/8.
pub fn in_v4_pool(ip: &IpAddr) -> bool {
    matches!(ip, IpAddr::V4(v4) if v4.octets()[0] == 243)
}

/// Whether an address lies in the default IPv6 VIP pool, fd00:c5e7::/48.
pub fn in_v6_pool(ip: &IpAddr) -> bool {
    matches!(ip, IpAddr::V6(v6) if v6.segments()[..3] == [0xfd00, 0xc5e7, 0])
}

/// Whether an answer is one IPv4 VIP of the default pool.
pub fn is_vip(outcome: &Outcome) -> bool {
    matches!(outcome, Outcome::Ips(ips) if ips.len() == 1 && ips.iter().all(in_v4_pool))
}

/// The addresses of an `Outcome::Ips`, or a panic naming what came instead.
pub fn addresses(outcome: Outcome) -> BTreeSet<IpAddr> {
    match outcome {
        Outcome::Ips(ips) => ips,
        other => panic!("addresses expected, got {other:?}"),
    }
}

/// Decodes a reply strictly, as dnspython does: every section holds exactly
/// the records its count says (RFC 1035 §4.1), the OPT record counted among
/// the additional ones, and no byte is left after the last record
/// (RFC 2181 §9: never part of a record). Panics naming what is wrong.
pub fn strict(reply: &[u8]) -> Message {
    use hickory_proto::serialize::binary::{BinDecodable, BinDecoder};
    assert!(reply.len() >= 12, "a reply of {} bytes", reply.len());
    let mut decoder = BinDecoder::new(reply);
    let message = Message::read(&mut decoder)
        .unwrap_or_else(|e| panic!("the reply does not decode: {e}: {reply:02x?}"));
    assert_eq!(
        decoder.len(),
        0,
        "{} bytes after the last counted record",
        decoder.len()
    );
    let count = |at: usize| usize::from(u16::from_be_bytes([reply[at], reply[at + 1]]));
    assert_eq!(count(4), message.queries.len(), "QDCOUNT");
    assert_eq!(count(6), message.answers.len(), "ANCOUNT");
    assert_eq!(count(8), message.authorities.len(), "NSCOUNT");
    let additional = message.additionals.len() + usize::from(message.edns.is_some());
    assert_eq!(count(10), additional, "ARCOUNT");
    message
}

/// A query with the DO bit (RFC 3225) set in its OPT record.
pub fn with_dnssec_ok(mut message: Message, payload: u16) -> Message {
    let mut edns = Edns::new();
    edns.set_max_payload(payload);
    edns.set_dnssec_ok(true);
    message.set_edns(edns);
    message
}
