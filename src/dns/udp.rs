//! The UDP fast path: one thread per socket on `SO_REUSEPORT` sockets; a
//! query whose (name, type) was answered before is served by copying the
//! cached response and patching ID, flags, question case and EDNS. Anything
//! else goes through [`Response`] and fills the cache.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};
use std::thread::JoinHandle;
use std::time::Duration;

use hickory_proto::op::{Edns, Header, MessageType, OpCode, Query};
use hickory_proto::rr::{LowerName, Record, RecordType};
use hickory_proto::serialize::binary::{BinDecodable, BinDecoder, BinEncodable, BinEncoder};
use hickory_server::net::xfer::Protocol;
use hickory_server::server::Request;
use tracing::{debug, warn};

use super::response::{MAX_UDP_PAYLOAD, Response};
use crate::index::Index;

/// Types whose responses are cached (others are rare and always built).
const CACHED_TYPES: [RecordType; 7] = [
    RecordType::A,
    RecordType::AAAA,
    RecordType::SRV,
    RecordType::TXT,
    RecordType::SOA,
    RecordType::NS,
    RecordType::ANY,
];

/// How often a worker checks whether it should stop.
const POLL: Duration = Duration::from_millis(200);

/// Our OPT record (EDNS version 0, payload 1232), encoded once.
static OPT: LazyLock<Vec<u8>> = LazyLock::new(|| {
    let mut edns = Edns::new();
    edns.set_max_payload(MAX_UDP_PAYLOAD);
    let mut bytes = Vec::new();
    Record::from(&edns)
        .emit(&mut BinEncoder::new(&mut bytes))
        .expect("an OPT record encodes");
    bytes
});

/// UDP worker threads; they stop when this is dropped.
pub struct UdpWorkers {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl UdpWorkers {
    /// Starts one worker per socket.
    pub fn start(sockets: Vec<UdpSocket>, index: Arc<Index>) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for (n, socket) in sockets.into_iter().enumerate() {
            socket.set_read_timeout(Some(POLL))?;
            let (index, stop) = (index.clone(), stop.clone());
            let thread = std::thread::Builder::new()
                .name(format!("dns-udp-{n}"))
                .spawn(move || serve(&socket, &index, &stop))?;
            threads.push(thread);
        }
        Ok(Self { stop, threads })
    }
}

impl Drop for UdpWorkers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

fn serve(socket: &UdpSocket, index: &Index, stop: &AtomicBool) {
    let mut request = [0u8; 4096];
    let mut response = Vec::with_capacity(4096);
    while !stop.load(Ordering::Relaxed) {
        let (len, peer) = match socket.recv_from(&mut request) {
            Ok(received) => received,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue;
            }
            Err(error) => {
                warn!(%error, "UDP receive failed");
                continue;
            }
        };
        response.clear();
        if respond(index, &request[..len], peer, &mut response)
            && let Err(error) = socket.send_to(&response, peer)
        {
            debug!(%error, %peer, "UDP send failed");
        }
    }
}

/// Writes the response to one datagram into `out`; false when none is due
/// (not a query, or too short to have a header).
pub fn respond(index: &Index, packet: &[u8], peer: SocketAddr, out: &mut Vec<u8>) -> bool {
    if let Some(query) = FastQuery::parse(packet)
        && let Some(cached) = index.cached(&query.name, query.rtype)
        && query.reuse(&cached, packet, out)
    {
        return true;
    }
    slow(index, packet, peer, out)
}

/// Decodes the whole request with hickory and builds the response.
fn slow(index: &Index, packet: &[u8], peer: SocketAddr, out: &mut Vec<u8>) -> bool {
    let request = match Request::from_bytes(packet.to_vec(), peer, Protocol::Udp) {
        Ok(request) => request,
        Err(error) => return formerr(packet, out, &error),
    };
    if request.metadata.message_type != MessageType::Query {
        return false;
    }
    let response = Response::new(index, &request);
    if let Some(owner) = &response.answer().owner
        && let [query] = request.queries.queries()
        && CACHED_TYPES.contains(&query.query_type())
        && let Some(bytes) = response.cacheable(&request.queries)
    {
        index.store(owner, query.name(), query.query_type(), bytes);
    }
    match response.encode(&request.queries, true, response.udp_limit()) {
        Ok(bytes) => {
            out.extend_from_slice(&bytes);
            true
        }
        Err(error) => {
            warn!(%error, %peer, "cannot encode a response");
            false
        }
    }
}

/// FORMERR for a packet whose header reads but whose body does not.
fn formerr(packet: &[u8], out: &mut Vec<u8>, error: &dyn std::fmt::Display) -> bool {
    let Ok(header) = Header::read(&mut BinDecoder::new(packet)) else {
        return false;
    };
    if header.metadata.message_type != MessageType::Query {
        return false;
    }
    debug!(%error, id = header.metadata.id, "malformed query");
    let mut metadata = hickory_proto::op::Metadata::response_from_request(&header.metadata);
    metadata.response_code = hickory_proto::op::ResponseCode::FormErr;
    let header = Header {
        metadata,
        counts: Default::default(),
    };
    header.emit(&mut BinEncoder::new(out)).is_ok()
}

/// A plain query: one question, no answer or authority records, at most an
/// EDNS(0) OPT record.
struct FastQuery {
    name: LowerName,
    rtype: RecordType,
    question_end: usize,
    limit: usize,
    edns: bool,
}

impl FastQuery {
    fn parse(packet: &[u8]) -> Option<Self> {
        let mut decoder = BinDecoder::new(packet);
        let header = Header::read(&mut decoder).ok()?;
        let (m, c) = (header.metadata, header.counts);
        let plain = m.message_type == MessageType::Query
            && m.op_code == OpCode::Query
            && c.queries == 1
            && c.answers == 0
            && c.authorities == 0
            && c.additionals <= 1;
        if !plain {
            return None;
        }
        let query = Query::read(&mut decoder).ok()?;
        let question_end = decoder.index();
        let (edns, limit) = if c.additionals == 1 {
            let record = Record::read(&mut decoder).ok()?;
            if record.record_type() != RecordType::OPT {
                return None;
            }
            let edns = Edns::from(&record);
            if edns.version() > 0 {
                return None;
            }
            (true, edns.max_payload().clamp(512, MAX_UDP_PAYLOAD))
        } else {
            (false, 512)
        };
        (decoder.index() == packet.len()).then(|| Self {
            name: LowerName::new(query.name()),
            rtype: query.query_type(),
            question_end,
            limit: usize::from(limit),
            edns,
        })
    }

    /// Copies a cached response, patched for this query; false if it would
    /// not fit (the slow path then truncates it properly).
    fn reuse(&self, cached: &[u8], packet: &[u8], out: &mut Vec<u8>) -> bool {
        let opt = if self.edns { OPT.len() } else { 0 };
        let same_question = cached
            .get(12..self.question_end)
            .is_some_and(|q| q.eq_ignore_ascii_case(&packet[12..self.question_end]));
        if !same_question || cached.len() + opt > self.limit {
            return false;
        }
        out.extend_from_slice(cached);
        // ID, then RD (low bit of byte 2) and CD (bit 4 of byte 3) as asked.
        out[..2].copy_from_slice(&packet[..2]);
        out[2] = (out[2] & !0x01) | (packet[2] & 0x01);
        out[3] = (out[3] & !0x10) | (packet[3] & 0x10);
        // The question exactly as asked (same length: only case differs).
        out[12..self.question_end].copy_from_slice(&packet[12..self.question_end]);
        if self.edns {
            out.extend_from_slice(&OPT);
            out[10..12].copy_from_slice(&1u16.to_be_bytes());
        }
        true
    }
}
