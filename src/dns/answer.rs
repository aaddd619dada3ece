//! What to answer to one question (DESIGN.md §4, "Response codes").

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::{DNSClass, LowerName, Record, RecordType};

use crate::index::{Index, Lookup};

/// The sections and code of a response to one question.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    /// RCODE.
    pub code: ResponseCode,
    /// Whether this server is authoritative for the name (AA).
    pub authoritative: bool,
    /// Answer section.
    pub answers: Vec<Record>,
    /// Authority section (the SOA of negative answers).
    pub authority: Vec<Record>,
}

impl Answer {
    fn refused() -> Self {
        Self::empty(ResponseCode::Refused, false)
    }

    fn empty(code: ResponseCode, authoritative: bool) -> Self {
        Self {
            code,
            authoritative,
            answers: Vec::new(),
            authority: Vec::new(),
        }
    }
}

/// Answers `name`/`rtype`/`class` from `index`: records, NODATA or NXDOMAIN
/// (with the SOA), REFUSED outside the zone, SERVFAIL before the first sync.
pub fn answer(index: &Index, name: &LowerName, rtype: RecordType, class: DNSClass) -> Answer {
    if class != DNSClass::IN && class != DNSClass::ANY {
        return Answer::refused();
    }
    let node = match index.lookup(name) {
        Lookup::NotInZone => return Answer::refused(),
        Lookup::NotReady => return Answer::empty(ResponseCode::ServFail, false),
        Lookup::NxDomain => None,
        Lookup::Found(node) => Some(node),
    };
    let answers: Vec<Record> = node
        .as_ref()
        .map(|n| n.records(rtype).cloned().collect())
        .unwrap_or_default();
    let code = if node.is_some() {
        ResponseCode::NoError
    } else {
        ResponseCode::NXDomain
    };
    let authority = if answers.is_empty() {
        vec![index.soa()]
    } else {
        Vec::new()
    };
    Answer {
        code,
        authoritative: true,
        answers,
        authority,
    }
}
