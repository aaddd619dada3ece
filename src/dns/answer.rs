//! What to answer to one question (DESIGN.md §4, "Response codes").

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::{DNSClass, LowerName, Name, Record, RecordType};

use crate::index::{Index, Lookup};

/// The code and sections of a response to one question.
#[derive(Clone, Debug)]
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
    /// An answer with only a response code.
    pub fn code(code: ResponseCode) -> Self {
        Self {
            code,
            authoritative: false,
            answers: Vec::new(),
            authority: Vec::new(),
        }
    }
}

/// Answers `name`/`rtype`/`class` from `index`: records, NODATA or NXDOMAIN
/// (with the SOA), REFUSED outside the zone, SERVFAIL before the first sync.
pub fn answer(index: &Index, name: &LowerName, rtype: RecordType, class: DNSClass) -> Answer {
    if class != DNSClass::IN && class != DNSClass::ANY {
        return Answer::code(ResponseCode::Refused);
    }
    let owner = match index.lookup(name) {
        Lookup::NotInZone => return Answer::code(ResponseCode::Refused),
        Lookup::NotReady => return Answer::code(ResponseCode::ServFail),
        Lookup::NxDomain => None,
        Lookup::Found(owner) => Some(owner),
    };
    let answers = owner
        .as_ref()
        .map(|o| index.records(o, &Name::from(name), rtype))
        .unwrap_or_default();
    let authority = if answers.is_empty() {
        vec![index.soa_for(name)]
    } else {
        Vec::new()
    };
    Answer {
        code: if owner.is_some() {
            ResponseCode::NoError
        } else {
            ResponseCode::NXDomain
        },
        authoritative: true,
        answers,
        authority,
    }
}
