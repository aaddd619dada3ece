//! Builds and encodes whole responses, for UDP, TCP and TLS alike, with
//! hickory-proto's encoder (which truncates and sets TC when a size is set).

use std::sync::Arc;

use hickory_proto::ProtoError;
use hickory_proto::op::{Edns, Metadata, OpCode, ResponseCode};
use hickory_proto::rr::Record;
use hickory_proto::rr::rdata::opt::{EdnsCode, EdnsOption};
use hickory_proto::serialize::binary::BinEncoder;
use hickory_server::zone_handler::{
    MessageRequest, MessageResponse, MessageResponseBuilder, Queries,
};

use std::net::SocketAddr;

use hickory_proto::op::{Header, MessageType};
use hickory_proto::rr::RecordType;
use hickory_proto::serialize::binary::{BinDecodable, BinDecoder, BinEncodable};
use hickory_server::net::xfer::Protocol;
use hickory_server::server::Request;
use tracing::debug;

use super::answer::{Answer, answer};
use crate::index::Index;

/// Responses to padded queries over TLS are padded to a multiple of this
/// (RFC 8467 §4.1, Block-Length Padding).
const PADDING_BLOCK: usize = 468;

/// Largest UDP response advertised and sent (the DNS flag day 2020 size).
pub const MAX_UDP_PAYLOAD: u16 = 1232;

/// The response to one request, ready to encode.
pub struct Response {
    metadata: Metadata,
    answer: Answer,
    edns: Option<Edns>,
}

/// The message type hickory-server sends for a [`Response`].
pub type Message<'q> = MessageResponse<
    'q,
    'q,
    std::slice::Iter<'q, Record>,
    std::slice::Iter<'q, Record>,
    std::iter::Empty<&'q Record>,
    std::iter::Empty<&'q Record>,
>;

impl Response {
    /// Answers a request: one question of opcode QUERY, EDNS version 0 at most.
    pub fn new(index: &Index, request: &MessageRequest) -> Self {
        let edns = request.edns.as_ref().map(|asked| {
            let mut edns = Edns::new();
            edns.set_max_payload(asked.max_payload().clamp(512, MAX_UDP_PAYLOAD));
            edns
        });
        let answer = match request.queries.queries() {
            _ if request.edns.as_ref().is_some_and(|e| e.version() > 0) => {
                Answer::code(ResponseCode::BADVERS)
            }
            _ if request.metadata.op_code != OpCode::Query => Answer::code(ResponseCode::NotImp),
            [query] => answer(index, query.name(), query.query_type(), query.query_class()),
            _ => Answer::code(ResponseCode::FormErr),
        };
        let mut metadata = Metadata::response_from_request(&request.metadata);
        metadata.response_code = answer.code;
        metadata.authoritative = answer.authoritative;
        Self {
            metadata,
            answer,
            edns,
        }
    }

    /// The answer behind the response.
    pub fn answer(&self) -> &Answer {
        &self.answer
    }

    /// The largest UDP response the client accepts.
    pub fn udp_limit(&self) -> u16 {
        self.edns.as_ref().map_or(512, Edns::max_payload)
    }

    /// The message, with or without its EDNS record.
    pub fn message<'q>(&'q self, queries: &'q Queries, with_edns: bool) -> Message<'q> {
        let edns = self.edns.as_ref().filter(|_| with_edns);
        MessageResponseBuilder::new(queries, edns).build(
            self.metadata,
            self.answer.answers.iter(),
            self.answer.authority.iter(),
            std::iter::empty(),
            std::iter::empty(),
        )
    }

    /// Encodes the message into at most `max_size` bytes (TC set when cut).
    pub fn encode(
        &self,
        queries: &Queries,
        with_edns: bool,
        max_size: u16,
    ) -> Result<Vec<u8>, ProtoError> {
        let mut bytes = Vec::with_capacity(512);
        let mut encoder = BinEncoder::new(&mut bytes);
        encoder.set_max_size(max_size);
        self.message(queries, with_edns)
            .destructive_emit(&mut encoder)?;
        Ok(bytes)
    }

    /// Encodes for TCP or TLS (no size limit). Over TLS, the response to a
    /// query that carried the EDNS Padding option is padded to a multiple of
    /// [`PADDING_BLOCK`] bytes (RFC 7830 §4: responders MUST pad then; RFC
    /// 8467 §4.1: the block length for encrypted transports). In clear text
    /// padding hides nothing, so TCP never pads.
    pub fn encode_stream(
        &mut self,
        request: &MessageRequest,
        encrypted: bool,
    ) -> Result<Vec<u8>, ProtoError> {
        let bytes = self.encode(&request.queries, true, u16::MAX)?;
        let padded = request
            .edns
            .as_ref()
            .is_some_and(|e| e.options().get(EdnsCode::Padding).is_some());
        let Some(edns) = self.edns.as_mut().filter(|_| encrypted && padded) else {
            return Ok(bytes);
        };
        // The option's code and length take 4 bytes, the padding the rest.
        let length = (PADDING_BLOCK - (bytes.len() + 4) % PADDING_BLOCK) % PADDING_BLOCK;
        if bytes.len() + 4 + length > usize::from(u16::MAX) {
            return Ok(bytes);
        }
        let padding = EdnsOption::Unknown(EdnsCode::Padding.into(), vec![0; length]);
        edns.options_mut().insert(padding);
        self.encode(&request.queries, true, u16::MAX)
    }

    /// What was answered, for metrics.
    pub fn outcome(&self, request: &MessageRequest) -> Outcome {
        let rtype = request.queries.queries().first().map(|q| q.query_type());
        Outcome {
            rtype,
            rcode: self.answer.code,
        }
    }

    /// The full response without EDNS, to cache for the same question: an
    /// authoritative answer (records, NODATA or NXDOMAIN), nothing else.
    pub fn cacheable(&self, queries: &Queries) -> Option<Arc<[u8]>> {
        let code = self.answer.code;
        let authoritative = self.answer.authoritative
            && matches!(code, ResponseCode::NoError | ResponseCode::NXDomain);
        if !authoritative {
            return None;
        }
        self.encode(queries, false, u16::MAX).ok().map(Arc::from)
    }
}

/// What was answered, for metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The query type (None: no question could be read).
    pub rtype: Option<RecordType>,
    /// The response code sent.
    pub rcode: ResponseCode,
}

/// A request decoded with hickory and what to do with it.
pub enum Handled {
    /// A query and its response.
    Answered(Box<Request>, Response),
    /// The header read but the rest did not: this FORMERR response.
    Malformed(Vec<u8>, Outcome),
    /// Not a query, or not even a header: no response.
    Ignored,
}

/// Decodes `packet` and answers it (the path for every TCP query and for UDP
/// queries the cache cannot serve). The transport is only recorded.
pub fn handle(index: &Index, packet: &[u8], peer: SocketAddr) -> Handled {
    let request = match Request::from_bytes(packet.to_vec(), peer, Protocol::Udp) {
        Ok(request) => request,
        Err(error) => return formerr(packet, &error),
    };
    if request.metadata.message_type != MessageType::Query {
        return Handled::Ignored;
    }
    let response = Response::new(index, &request);
    Handled::Answered(Box::new(request), response)
}

/// FORMERR for a packet whose header reads but whose body does not.
fn formerr(packet: &[u8], error: &dyn std::fmt::Display) -> Handled {
    let Ok(header) = Header::read(&mut BinDecoder::new(packet)) else {
        return Handled::Ignored;
    };
    if header.metadata.message_type != MessageType::Query {
        return Handled::Ignored;
    }
    debug!(%error, id = header.metadata.id, "malformed query");
    let mut metadata = Metadata::response_from_request(&header.metadata);
    metadata.response_code = ResponseCode::FormErr;
    let header = Header {
        metadata,
        counts: Default::default(),
    };
    let mut bytes = Vec::with_capacity(12);
    if header.emit(&mut BinEncoder::new(&mut bytes)).is_err() {
        return Handled::Ignored;
    }
    let outcome = Outcome {
        rtype: None,
        rcode: ResponseCode::FormErr,
    };
    Handled::Malformed(bytes, outcome)
}
