//! Builds and encodes whole responses, for UDP and TCP alike, with
//! hickory-proto's encoder (which truncates and sets TC when a size is set).

use std::sync::Arc;

use hickory_proto::ProtoError;
use hickory_proto::op::{Edns, Metadata, OpCode, ResponseCode};
use hickory_proto::rr::Record;
use hickory_proto::serialize::binary::BinEncoder;
use hickory_server::zone_handler::{
    MessageRequest, MessageResponse, MessageResponseBuilder, Queries,
};

use super::answer::{Answer, answer};
use crate::index::Index;

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

    /// The full response without EDNS, to cache for the same name and type.
    pub fn cacheable(&self, queries: &Queries) -> Option<Arc<[u8]>> {
        self.answer.owner.as_ref()?;
        self.encode(queries, false, u16::MAX).ok().map(Arc::from)
    }
}
