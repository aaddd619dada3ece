//! Builds and encodes whole responses, for UDP, TCP and TLS alike (see
//! `encode` for how they are cut to the client's size).

use std::net::SocketAddr;

use hickory_proto::ProtoError;
use hickory_proto::op::{Edns, Header, MessageType, Metadata, OpCode, ResponseCode};
use hickory_proto::rr::RecordType;
use hickory_proto::rr::rdata::opt::{EdnsCode, EdnsOption};
use hickory_proto::serialize::binary::{BinDecodable, BinDecoder, BinEncodable, BinEncoder};
use hickory_server::net::xfer::Protocol;
use hickory_server::server::Request;
use hickory_server::zone_handler::{MessageRequest, Queries};

use crate::dns::message::answer::{Answer, answer, transfer_over_udp};
use crate::dns::message::encode::Sections;
use crate::dns::message::opt_check::options_cut;
use crate::dns::message::question;
use crate::dns::message::rotate::{self, Layout, next_turn};
use crate::dns::tsig::key_file::TsigKey;
use crate::dns::tsig::sign::{self, SignedAnswer};
use crate::index::{CacheSlot, Index};

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
    udp_limit: u16,
    /// Whether the question is echoed (not when it broke a rule).
    echo_question: bool,
    problem: Option<Problem>,
}

impl Response {
    /// Answers a request: one question of opcode QUERY, EDNS version 0 at most.
    pub fn new(index: &Index, request: &Request) -> Self {
        let udp = request.protocol() == Protocol::Udp;
        let answer = match request.queries.queries() {
            _ if request.edns.as_ref().is_some_and(|e| e.version() > 0) => {
                Answer::code(ResponseCode::BADVERS)
            }
            _ if request.metadata.op_code != OpCode::Query => Answer::code(ResponseCode::NotImp),
            [query] if udp && matches!(query.query_type(), RecordType::AXFR | RecordType::IXFR) => {
                transfer_over_udp(index, query.name(), query.query_type())
            }
            [query] => answer(index, query.name(), query.query_type(), query.query_class()),
            _ => Answer::code(ResponseCode::FormErr),
        };
        Self::with_answer(request, answer, None)
    }

    /// FORMERR for a request that decodes but breaks a rule (`problem`); the
    /// question is not echoed, the OPT record is.
    fn malformed(request: &Request, problem: Problem) -> Self {
        Self::with_answer(request, Answer::code(ResponseCode::FormErr), Some(problem))
    }

    fn with_answer(request: &Request, answer: Answer, problem: Option<Problem>) -> Self {
        // Our OPT advertises our own limit (RFC 6891 §6.2.5) and copies the
        // DO bit (RFC 3225 §3).
        let edns = request.edns.as_ref().map(|asked| {
            let mut edns = Edns::new();
            edns.set_max_payload(MAX_UDP_PAYLOAD);
            edns.set_dnssec_ok(asked.flags().dnssec_ok);
            edns
        });
        let udp_limit = request
            .edns
            .as_ref()
            .map_or(512, |asked| asked.max_payload().clamp(512, MAX_UDP_PAYLOAD));
        let mut metadata = Metadata::response_from_request(&request.metadata);
        metadata.response_code = answer.code;
        metadata.authoritative = answer.authoritative;
        Self {
            metadata,
            echo_question: problem.is_none(),
            answer,
            edns,
            udp_limit,
            problem,
        }
    }

    /// The answer behind the response.
    pub fn answer(&self) -> &Answer {
        &self.answer
    }

    /// The largest UDP response the client accepts.
    pub fn udp_limit(&self) -> u16 {
        self.udp_limit
    }

    /// Encodes the response, with or without its OPT record, into at most
    /// `max_size` bytes (whole records only, TC set when some were left out).
    /// The question is re-encoded from the parsed one, in the case asked.
    pub fn encode(
        &self,
        queries: &Queries,
        with_edns: bool,
        max_size: u16,
    ) -> Result<Vec<u8>, ProtoError> {
        let query = match queries.queries() {
            [query] if self.echo_question => Some(query.original()),
            _ => None,
        };
        Sections {
            metadata: self.metadata,
            query,
            answers: &self.answer.answers,
            authority: &self.answer.authority,
            edns: self.edns.as_ref().filter(|_| with_edns),
        }
        .encode(max_size)
    }

    /// Encodes for TCP or TLS (no size limit). Over TLS, the response to a
    /// query that carried the EDNS Padding option is padded to a multiple of
    /// `PADDING_BLOCK` bytes (RFC 7830 §4: responders MUST pad then; RFC
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
        let rotates = self.answer.rotates;
        let Some(edns) = self.edns.as_mut().filter(|_| encrypted && padded) else {
            return Ok(rotated(bytes, rotates));
        };
        // The option's code and length take 4 bytes, the padding the rest.
        let length = (PADDING_BLOCK - (bytes.len() + 4) % PADDING_BLOCK) % PADDING_BLOCK;
        if bytes.len() + 4 + length > usize::from(u16::MAX) {
            return Ok(rotated(bytes, rotates));
        }
        let padding = EdnsOption::Unknown(EdnsCode::Padding.into(), vec![0; length]);
        edns.options_mut().insert(padding);
        self.encode(&request.queries, true, u16::MAX)
            .map(|bytes| rotated(bytes, rotates))
    }

    /// What was answered, for metrics.
    pub fn outcome(&self, request: &Request) -> Outcome {
        let rtype = request.queries.queries().first().map(|q| q.query_type());
        Outcome {
            rtype,
            rcode: self.answer.code,
            problem: self.problem,
        }
    }

    /// The response to `request` (the bytes `packet`) when it carries a
    /// TSIG, checked against `key` (RFC 8945 §5.2) and built by `encode`
    /// (given the bytes to leave for the TSIG record), then signed (§5.3);
    /// NOTAUTH when the TSIG fails. None when the request is unsigned.
    pub(crate) fn signed(
        &mut self,
        key: Option<&TsigKey>,
        packet: &[u8],
        request: &Request,
        encode: impl FnOnce(&mut Self, usize) -> Result<Vec<u8>, ProtoError>,
    ) -> Option<Result<(Vec<u8>, Outcome), ProtoError>> {
        let mut outcome = self.outcome(request);
        let answered = sign::answer_query(key, packet, request, |room| encode(self, room))?;
        Some(answered.map(|answer| match answer {
            SignedAnswer::Signed(bytes) => (bytes, outcome),
            SignedAnswer::Rejected(bytes) => {
                outcome.rcode = ResponseCode::NotAuth;
                (bytes, outcome)
            }
        }))
    }

    /// Where the response may be cached for the same question: an
    /// authoritative answer (records, NODATA or NXDOMAIN) only.
    pub fn cache_slot(&self) -> Option<&CacheSlot> {
        let code = self.answer.code;
        let authoritative = self.answer.authoritative
            && matches!(code, ResponseCode::NoError | ResponseCode::NXDomain);
        self.answer.slot.as_ref().filter(|_| authoritative)
    }
}

/// A complete response with its answer rotated by the next turn when it
/// rotates, as UDP sends it (ARCHITECTURE.md, "Load spread"); rotation
/// keeps its length, so padding stays right.
fn rotated(bytes: Vec<u8>, rotates: bool) -> Vec<u8> {
    let Some(layout) = Layout::of(&bytes).filter(|_| rotates) else {
        return bytes;
    };
    let mut out = Vec::with_capacity(bytes.len());
    rotate::write(&bytes, &layout, next_turn(), usize::MAX, &[], &mut out);
    out
}

/// What was answered, for metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The query type (None: no question could be read).
    pub rtype: Option<RecordType>,
    /// The response code sent.
    pub rcode: ResponseCode,
    /// What was wrong with the request, if anything (counted, not logged).
    pub problem: Option<Problem>,
}

/// A problem with a request that a remote sender controls: counted in a
/// metric, never logged per packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Problem {
    /// The header read but the rest did not (answered FORMERR).
    Unreadable,
    /// A compression pointer in the question (FORMERR, RFC 1035 §4.1.4).
    QuestionPointer,
    /// EDNS options cut short (they are ignored).
    EdnsOptions,
}

impl Problem {
    /// Every problem, in the order of their metric labels.
    pub const ALL: [Self; 3] = [Self::Unreadable, Self::QuestionPointer, Self::EdnsOptions];

    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unreadable => "unreadable",
            Self::QuestionPointer => "question_pointer",
            Self::EdnsOptions => "edns_options",
        }
    }
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

/// Decodes `packet`, received over `protocol`, and answers it (the path for
/// every TCP query and for UDP queries the cache cannot serve).
pub fn handle(index: &Index, packet: &[u8], peer: SocketAddr, protocol: Protocol) -> Handled {
    let question_end = question::end(packet);
    let pointer = question_end == Err(question::Bad::Pointer);
    let Ok(request) = Request::from_bytes(packet.to_vec(), peer, protocol) else {
        let problem = if pointer {
            Problem::QuestionPointer
        } else {
            Problem::Unreadable
        };
        return formerr(packet, problem);
    };
    if request.metadata.message_type != MessageType::Query {
        return Handled::Ignored;
    }
    if pointer {
        let response = Response::malformed(&request, Problem::QuestionPointer);
        return Handled::Answered(Box::new(request), response);
    }
    let mut response = Response::new(index, &request);
    if question_end.is_ok_and(|end| options_cut(packet, end)) {
        response.problem = Some(Problem::EdnsOptions);
    }
    Handled::Answered(Box::new(request), response)
}

/// FORMERR for a packet whose header reads but whose body does not: the
/// header alone.
fn formerr(packet: &[u8], problem: Problem) -> Handled {
    let Ok(header) = Header::read(&mut BinDecoder::new(packet)) else {
        return Handled::Ignored;
    };
    if header.metadata.message_type != MessageType::Query {
        return Handled::Ignored;
    }
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
        problem: Some(problem),
    };
    Handled::Malformed(bytes, outcome)
}
