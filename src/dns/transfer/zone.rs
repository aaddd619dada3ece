//! Zone transfers over TCP: AXFR (RFC 5936) of this zone or a reverse zone,
//! and IXFR (RFC 1995) answered with the SOA alone when the client's serial
//! is current, else with the whole zone in AXFR form (RFC 1995 §4). Only
//! addresses in `--transfer-allow` may transfer; others get REFUSED. With
//! `--tsig-key` a request must also be signed with that key (RFC 8945):
//! unsigned ones get REFUSED, badly signed ones NOTAUTH with the TSIG error
//! (§5.2), and every message answering a good one is signed (§5.3.1).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use hickory_proto::op::{Edns, Message, MessageType, Metadata, OpCode, Query, ResponseCode};
use hickory_proto::rr::{DNSClass, LowerName, RData, Record, RecordType};
use hickory_proto::serialize::binary::{BinDecodable, BinDecoder, BinEncodable};
use ipnet::IpNet;

use crate::dns::metrics::DnsMetrics;
use crate::dns::tsig::key_file::TsigKey;
use crate::dns::tsig::sign::{self, Verdict};
use crate::index::{Index, serial};

/// Most bytes of records (uncompressed) per message: below the 64 KiB a TCP
/// message can hold (RFC 5936 §2.2), with room for the header, question and OPT.
const MAX_RECORD_BYTES: usize = 60_000;

/// Who may transfer, with which key, and where transfers are counted.
pub struct TransferPolicy {
    allow: Vec<IpNet>,
    tsig: Option<Arc<TsigKey>>,
    metrics: Arc<DnsMetrics>,
}

impl TransferPolicy {
    /// Transfers allowed from `allow` only, and signed with `tsig` if set.
    pub fn new(allow: Vec<IpNet>, tsig: Option<Arc<TsigKey>>, metrics: Arc<DnsMetrics>) -> Self {
        Self {
            allow,
            tsig,
            metrics,
        }
    }

    /// The key transfers must be signed with (also checks signed queries).
    pub(crate) fn tsig(&self) -> Option<&Arc<TsigKey>> {
        self.tsig.as_ref()
    }

    fn allows(&self, peer: IpAddr) -> bool {
        let peer = peer.to_canonical();
        self.allow.iter().any(|net| net.contains(&peer))
    }
}

/// Whether `packet` is a query asking for AXFR or IXFR (reads the header and
/// the first question only: cheap enough for every TCP message).
fn is_transfer(packet: &[u8]) -> bool {
    let mut decoder = BinDecoder::new(packet);
    let Ok(header) = hickory_proto::op::Header::read(&mut decoder) else {
        return false;
    };
    let query = header.metadata.message_type == MessageType::Query
        && header.metadata.op_code == OpCode::Query
        && header.counts.queries == 1;
    query
        && Query::read(&mut decoder)
            .is_ok_and(|q| matches!(q.query_type(), RecordType::AXFR | RecordType::IXFR))
}

/// The messages answering `packet` from `peer` if it asks for a zone
/// transfer and decodes; None otherwise (answered as any other query). The
/// zone is built on the blocking pool: a large one takes a while.
pub(crate) async fn respond(
    index: &Arc<Index>,
    policy: &Arc<TransferPolicy>,
    packet: &[u8],
    peer: SocketAddr,
) -> Option<Vec<Vec<u8>>> {
    if !is_transfer(packet) {
        return None;
    }
    let (index, policy, packet) = (index.clone(), policy.clone(), packet.to_vec());
    let build = move || messages(&index, &policy, &packet, peer);
    tokio::task::spawn_blocking(build).await.ok().flatten()
}

/// The messages answering the transfer request `packet` from `peer`.
fn messages(
    index: &Index,
    policy: &TransferPolicy,
    packet: &[u8],
    peer: SocketAddr,
) -> Option<Vec<Vec<u8>>> {
    let request = Message::from_vec(packet).ok()?;
    let query = request.queries.first()?;
    let kind = query.query_type().to_string();
    let now = sign::now();
    let key = policy.tsig.as_deref();
    let verdict = Verdict::of(key, packet, request.signature.as_deref(), now);
    let (result, records, mut signing) = match verdict {
        _ if !policy.allows(peer.ip()) => (TransferResult::Refused, Vec::new(), None),
        Verdict::Rejected(rejection) => {
            policy.metrics.zone_transfer(&kind, rejection.label());
            let answer = rejection.answer(&request.metadata, Some(query), now);
            return answer.ok().map(|bytes| vec![bytes]);
        }
        Verdict::Unsigned if key.is_some() => (TransferResult::Refused, Vec::new(), None),
        Verdict::Unsigned => {
            let (result, records) = transfer(index, &request, query);
            (result, records, None)
        }
        Verdict::Valid(signing) => {
            let (result, records) = transfer(index, &request, query);
            (result, records, Some(signing))
        }
    };
    policy.metrics.zone_transfer(&kind, result.label());
    let code = result.code();
    chunks(&records)
        .enumerate()
        .filter_map(|(i, records)| {
            let mut message =
                Message::new(request.metadata.id, MessageType::Response, OpCode::Query);
            message.metadata = Metadata::response_from_request(&request.metadata);
            message.metadata.response_code = code;
            message.metadata.authoritative = code == ResponseCode::NoError;
            // RFC 5936 §2.2.1: the question in the first message only.
            if i == 0 {
                message.add_query(query.clone());
            }
            message.add_answers(records.iter().cloned());
            if request.edns.is_some() {
                message.set_edns(Edns::new());
            }
            let mut bytes = message.to_vec().ok()?;
            // RFC 8945 §5.3.1: every message signed, each chained to the last.
            if let Some(signing) = &mut signing {
                signing.sign(&mut bytes, now).ok()?;
            }
            Some(bytes)
        })
        .collect::<Vec<_>>()
        .into()
}

/// What a transfer request got.
enum TransferResult {
    Full,
    Current,
    Refused,
    NotAuth,
    ServFail,
    FormErr,
}

impl TransferResult {
    fn label(&self) -> &'static str {
        match self {
            Self::Full => "full",
            Self::Current => "current",
            Self::Refused => "refused",
            Self::NotAuth => "notauth",
            Self::ServFail => "servfail",
            Self::FormErr => "formerr",
        }
    }

    fn code(&self) -> ResponseCode {
        match self {
            Self::Full | Self::Current => ResponseCode::NoError,
            Self::Refused => ResponseCode::Refused,
            Self::NotAuth => ResponseCode::NotAuth,
            Self::ServFail => ResponseCode::ServFail,
            Self::FormErr => ResponseCode::FormErr,
        }
    }
}

/// The records answering a transfer request that may be answered.
fn transfer(index: &Index, request: &Message, query: &Query) -> (TransferResult, Vec<Record>) {
    if request.queries.len() != 1 || query.query_class() != DNSClass::IN {
        return (TransferResult::FormErr, Vec::new());
    }
    if !index.is_synced() {
        return (TransferResult::ServFail, Vec::new());
    }
    let Some(records) = index.zone_records(&LowerName::new(query.name())) else {
        return (TransferResult::NotAuth, Vec::new());
    };
    if query.query_type() == RecordType::IXFR {
        let client = request.authorities.iter().find_map(|r| match &r.data {
            RData::SOA(soa) => Some(soa.serial),
            _ => None,
        });
        let current = serial_of(&records[0]);
        // RFC 1995 §2: the client's serial in the authority section.
        let Some(client) = client else {
            return (TransferResult::FormErr, Vec::new());
        };
        if !serial::greater(current, client) {
            return (TransferResult::Current, vec![records[0].clone()]);
        }
    }
    (TransferResult::Full, records)
}

fn serial_of(soa: &Record) -> u32 {
    match &soa.data {
        RData::SOA(soa) => soa.serial,
        _ => 0,
    }
}

/// `records` cut into runs that each fit one message (at least one, maybe empty).
fn chunks(records: &[Record]) -> impl Iterator<Item = &[Record]> {
    let mut rest = records;
    let mut first = true;
    std::iter::from_fn(move || {
        if rest.is_empty() && !std::mem::take(&mut first) {
            return None;
        }
        first = false;
        let mut size = 0;
        let count = rest
            .iter()
            .take_while(|r| {
                size += r.to_bytes().map_or(usize::MAX / 2, |b| b.len());
                size <= MAX_RECORD_BYTES
            })
            .count()
            .max(1)
            .min(rest.len());
        let (chunk, tail) = rest.split_at(count);
        rest = tail;
        Some(chunk)
    })
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use hickory_proto::rr::Name;
    use hickory_proto::rr::rdata::TXT;

    use super::*;

    /// RFC 5936 §2.2: a zone too large for one 64 KiB message spans several.
    #[test]
    fn chunks_stay_below_64k_and_keep_every_record() {
        let name = Name::from_str("x.clusterset.local.").unwrap();
        let txt = |i: usize| {
            let data = RData::TXT(TXT::new(vec![format!("{i:0>200}")]));
            Record::from_rdata(name.clone(), 5, data)
        };
        let records: Vec<Record> = (0..1000).map(txt).collect();
        let parts: Vec<&[Record]> = chunks(&records).collect();
        assert!(parts.len() >= 4, "{} messages", parts.len());
        assert_eq!(parts.iter().map(|c| c.len()).sum::<usize>(), 1000);
        for chunk in &parts {
            let mut message = Message::new(1, MessageType::Response, OpCode::Query);
            message.add_answers(chunk.iter().cloned());
            assert!(message.to_vec().unwrap().len() <= 65535);
        }
        assert_eq!(
            chunks(&[]).count(),
            1,
            "an error answer is one empty message"
        );
    }
}
