//! What to answer to one question (docs/dns.md, "The names").

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::rdata::HINFO;
use hickory_proto::rr::{DNSClass, LowerName, Name, RData, Record, RecordType};

use crate::index::{CacheSlot, Index, Lookup};

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
    /// Where the encoded response may be cached (authoritative answers only).
    pub slot: Option<CacheSlot>,
    /// Whether an answer of several records rotates per response
    /// (ARCHITECTURE.md, "Load spread"); a ClusterSetIP service name's
    /// addresses keep their order (see [`crate::index::Owner::keeps_order`]).
    pub rotates: bool,
}

impl Answer {
    /// An answer with only a response code.
    pub fn code(code: ResponseCode) -> Self {
        Self {
            code,
            authoritative: false,
            answers: Vec::new(),
            authority: Vec::new(),
            slot: None,
            rotates: false,
        }
    }
}

/// Answers `name`/`rtype`/`class` from `index`: records, NODATA or NXDOMAIN
/// (with the SOA), REFUSED outside the zone, SERVFAIL before the first sync.
pub fn answer(index: &Index, name: &LowerName, rtype: RecordType, class: DNSClass) -> Answer {
    if class != DNSClass::IN && class != DNSClass::ANY {
        return Answer::code(ResponseCode::Refused);
    }
    // Taken before the lookup: see `CacheSlot`.
    let slot = index.cache_slot(name);
    let owner = match index.lookup(name) {
        Lookup::NotInZone => return Answer::code(ResponseCode::Refused),
        Lookup::NotReady => return Answer::code(ResponseCode::ServFail),
        Lookup::NxDomain => None,
        Lookup::Found(owner) => Some(owner),
    };
    let mut answers = owner
        .as_ref()
        .map(|o| index.records(o, &Name::from(name), rtype))
        .unwrap_or_default();
    if rtype == RecordType::ANY && !answers.is_empty() {
        answers = vec![any_hinfo(name, index)];
    }
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
        rotates: !owner.as_ref().is_some_and(|o| o.keeps_order()),
        answers,
        authority,
        slot: Some(slot),
    }
}

/// The answer to ANY at a name that owns records: one synthesized HINFO
/// (RFC 8482 §4.2), CPU "RFC8482" and an empty OS, with the zone's TTL (the
/// SOA's), instead of every record (a big amplification for headless names).
fn any_hinfo(name: &LowerName, index: &Index) -> Record {
    let hinfo = HINFO::new("RFC8482".to_owned(), String::new());
    Record::from_rdata(Name::from(name), index.soa().ttl, RData::HINFO(hinfo))
}

/// The answer to a zone transfer asked over UDP, where it is not defined
/// (RFC 5936 §4.2 for AXFR): IXFR of the zone gets the zone's SOA alone, which
/// tells the client to ask again over TCP (RFC 1995 §2, §4); anything else
/// NOTIMP, "the kind of query is not supported" (RFC 1035 §4.1.1).
pub(crate) fn transfer_over_udp(index: &Index, name: &LowerName, rtype: RecordType) -> Answer {
    let soa = index.soa();
    if rtype == RecordType::IXFR && index.is_synced() && **name == soa.name {
        return Answer {
            code: ResponseCode::NoError,
            authoritative: true,
            answers: vec![soa],
            authority: Vec::new(),
            slot: None,
            rotates: false,
        };
    }
    Answer::code(ResponseCode::NotImp)
}
