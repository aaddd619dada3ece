//! The UDP fast path: a query whose (name, type) was answered before is
//! served by copying the cached response and patching ID, flags, question
//! case and EDNS, its answer rotated when it holds several records of one
//! rrset (see `rotate`). Anything else goes through [`Response`] and fills
//! the cache.

use std::net::SocketAddr;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use hickory_proto::ProtoError;
use hickory_proto::op::{Edns, Header, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::{Record, RecordType};
use hickory_proto::serialize::binary::{BinDecodable, BinDecoder, BinEncodable, BinEncoder};
use hickory_server::net::xfer::Protocol;
use tracing::warn;

use crate::dns::message::opt_check::options_cut;
use crate::dns::message::question;
use crate::dns::message::question::COMMON_TYPES;
use crate::dns::message::recent::{Recent, Response, View};
use crate::dns::message::response::{Handled, MAX_UDP_PAYLOAD, Outcome, Problem, handle};
use crate::dns::message::rotate::{self, Layout, next_turn};
use crate::dns::tsig::key_file::TsigKey;
use crate::index::Index;
use crate::plumbing::log_limit::LogLimit;

static LOG_LIMIT: LogLimit = LogLimit::new(Duration::from_secs(60));

/// Our OPT records (EDNS version 0, payload 1232), encoded once: without
/// and with the DO bit, which is copied from the query (RFC 3225 §3).
static OPT: LazyLock<[Vec<u8>; 2]> = LazyLock::new(|| [opt(false), opt(true)]);

fn opt(dnssec_ok: bool) -> Vec<u8> {
    let mut edns = Edns::new();
    edns.set_max_payload(MAX_UDP_PAYLOAD);
    edns.set_dnssec_ok(dnssec_ok);
    let mut bytes = Vec::new();
    Record::from(&edns)
        .emit(&mut BinEncoder::new(&mut bytes))
        .expect("an OPT record encodes");
    bytes
}

/// Writes the response to one datagram into `out`; None when none is due
/// (not a query, or too short to have a header).
pub fn respond(
    index: &Index,
    packet: &[u8],
    peer: SocketAddr,
    out: &mut Vec<u8>,
) -> Option<Outcome> {
    answer(index, None, None, packet, peer, out)
}

/// [`respond`], looking in a worker's `recent` responses before the index's,
/// and checking signed queries against `tsig` (RFC 8945; a secondary signs
/// its SOA checks). A signed query never takes the fast path: its TSIG
/// record is an additional record other than OPT.
pub(crate) fn answer(
    index: &Index,
    recent: Option<&mut Recent>,
    tsig: Option<&TsigKey>,
    packet: &[u8],
    peer: SocketAddr,
    out: &mut Vec<u8>,
) -> Option<Outcome> {
    if let Some(query) = FastQuery::parse(packet)
        && query.recall(index, recent, packet, out)
    {
        let rcode = ResponseCode::from(0, out[3] & 0x0f);
        return Some(Outcome {
            rtype: Some(query.rtype),
            rcode,
            problem: query.edns_cut.then_some(Problem::EdnsOptions),
        });
    }
    slow(index, tsig, packet, peer, out)
}

/// Builds the response with hickory, caching it when the name exists. An
/// answer that rotates is sent rotated (ARCHITECTURE.md, "Load spread").
fn slow(
    index: &Index,
    tsig: Option<&TsigKey>,
    packet: &[u8],
    peer: SocketAddr,
    out: &mut Vec<u8>,
) -> Option<Outcome> {
    let (request, mut response) = match handle(index, packet, peer, Protocol::Udp) {
        Handled::Answered(request, response) => (request, response),
        Handled::Malformed(bytes, outcome) => {
            out.extend_from_slice(&bytes);
            return Some(outcome);
        }
        Handled::Ignored => return None,
    };
    let limit = response.udp_limit();
    // A signed answer is neither cached nor rotated: its MAC covers its bytes.
    let signed = response.signed(tsig, packet, &request, |r, room| {
        let room = u16::try_from(room).unwrap_or(u16::MAX);
        r.encode(&request.queries, true, limit.saturating_sub(room))
    });
    if let Some(signed) = signed {
        return encoded(signed, peer, out);
    }
    let edns = request.edns.as_ref().map(|e| e.flags().dnssec_ok);
    let opt: &[u8] = edns.map_or(&[], |dnssec_ok| &OPT[usize::from(dnssec_ok)]);
    let slot = match request.queries.queries() {
        [query] if COMMON_TYPES.contains(&query.query_type()) => response.cache_slot(),
        _ => None,
    };
    // The complete response without EDNS: what the cache keeps, and what
    // an answer of several records is sent from, rotated.
    let full = (slot.is_some() || response.answer().answers.len() > 1)
        .then(|| response.encode(&request.queries, false, u16::MAX).ok())
        .flatten();
    let rotatable = full.as_deref().and_then(Layout::of);
    let rotates = response.answer().rotates;
    // A many-record answer that keeps its order is cached under its own
    // variant, so that the fast path does not rotate it either.
    let full_variant = if rotatable.is_some() && !rotates {
        KEPT_ORDER
    } else {
        0
    };
    let layout = rotatable.filter(|_| rotates);
    if let Some(slot) = slot
        && let Some(full) = &full
    {
        // The complete response is cached without EDNS (the OPT record is
        // added when reused); one cut to the client's limit keeps its OPT
        // record, so its variant says whether it has one and with which DO.
        // An answer that rotates is cut from the complete one when sent.
        let question = request.queries.as_bytes();
        let negative = response.answer().answers.is_empty();
        if layout.is_none()
            && full.len() + opt.len() > usize::from(limit)
            && let Ok(cut) = response.encode(&request.queries, true, limit)
        {
            let variant = cut_variant(limit, edns);
            index.store(slot, question, variant, Arc::from(cut), negative);
        }
        index.store(
            slot,
            question,
            full_variant,
            Arc::from(full.as_slice()),
            negative,
        );
    }
    if let (Some(full), Some(layout)) = (&full, &layout) {
        rotate::write(full, layout, next_turn(), usize::from(limit), opt, out);
        return Some(response.outcome(&request));
    }
    let bytes = response.encode(&request.queries, true, limit);
    encoded(bytes.map(|b| (b, response.outcome(&request))), peer, out)
}

/// Writes an encoded response into `out`, or logs why there is none.
fn encoded(
    response: Result<(Vec<u8>, Outcome), ProtoError>,
    peer: SocketAddr,
    out: &mut Vec<u8>,
) -> Option<Outcome> {
    match response {
        Ok((bytes, outcome)) => {
            out.extend_from_slice(&bytes);
            Some(outcome)
        }
        Err(error) => {
            if LOG_LIMIT.allow() {
                warn!(%error, %peer, "cannot encode a response (logged at most once a minute)");
            }
            None
        }
    }
}

/// The cache variant of a response cut to `limit` bytes, without EDNS or
/// with it and this DO bit.
/// The cache variant of a complete response whose answer has several
/// records and keeps their order (cut variants are 512 and up).
const KEPT_ORDER: u16 = 1;

fn cut_variant(limit: u16, edns: Option<bool>) -> u16 {
    limit
        | match edns {
            None => 0,
            Some(false) => 0x8000,
            Some(true) => 0xc000,
        }
}

/// A plain query: one question, no answer or authority records, at most an
/// EDNS(0) OPT record. Its name is never decoded: a worker's recent
/// responses and the index's cache need only the bytes.
struct FastQuery {
    rtype: RecordType,
    question_end: usize,
    limit: usize,
    /// The DO bit of the query's OPT record; None without EDNS.
    edns: Option<bool>,
    /// Whether the OPT record's options are cut short (they are ignored).
    edns_cut: bool,
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
        // A name without compression pointers (else the slow path: FORMERR).
        let question_end = question::end(packet).ok()?;
        let rtype = RecordType::from(u16::from_be_bytes([
            packet[question_end - 4],
            packet[question_end - 3],
        ]));
        decoder.read_slice(question_end - decoder.index()).ok()?;
        let edns_cut = c.additionals == 1 && options_cut(packet, decoder.index());
        let (edns, limit) = if c.additionals == 1 {
            let record = Record::read(&mut decoder).ok()?;
            if record.record_type() != RecordType::OPT {
                return None;
            }
            let edns = Edns::from(&record);
            if edns.version() > 0 {
                return None;
            }
            let limit = edns.max_payload().clamp(512, MAX_UDP_PAYLOAD);
            (Some(edns.flags().dnssec_ok), limit)
        } else {
            (None, 512)
        };
        (decoder.index() == packet.len()).then_some(Self {
            rtype,
            question_end,
            limit: usize::from(limit),
            edns,
            edns_cut,
        })
    }

    /// The OPT record to add to a complete cached response (empty without EDNS).
    fn opt(&self) -> &'static [u8] {
        self.edns
            .map_or(&[], |dnssec_ok| &OPT[usize::from(dnssec_ok)])
    }

    /// Writes the cached response for this query into `out`, from `recent`
    /// if it has it while the index is unchanged, else from the index (then
    /// kept in `recent`); false if none is cached or it would not fit.
    fn recall(
        &self,
        index: &Index,
        recent: Option<&mut Recent>,
        packet: &[u8],
        out: &mut Vec<u8>,
    ) -> bool {
        let Some(recent) = recent else {
            return self
                .lookup(index, packet)
                .is_some_and(|response| self.reuse(response.view(next_turn()), packet, out));
        };
        // Read before the index is: a change after it voids what is kept.
        let version = index.version();
        let Some(key) = u16::try_from(self.limit).ok().and_then(|limit| {
            recent.key(
                &packet[question::START..self.question_end],
                limit,
                self.edns,
            )
        }) else {
            return false;
        };
        if !recent.has(key, version) {
            let Some(response) = self.lookup(index, packet) else {
                return false;
            };
            recent.put(key, version, response, next_turn());
        }
        recent
            .get(key, version)
            .is_some_and(|view| self.reuse(view, packet, out))
    }

    /// The cached response for this query: the complete one if it fits the
    /// client's limit or its answer rotates (then it is cut when sent), its
    /// OPT record still to add; else the one cut to that limit (TC set, OPT
    /// included), if stored.
    fn lookup(&self, index: &Index, packet: &[u8]) -> Option<Response> {
        let question = &packet[question::START..self.question_end];
        let (full, layout) = match index.cached(question, 0) {
            Some(full) => {
                let layout = Layout::of(&full);
                (full, layout)
            }
            None => (index.cached(question, KEPT_ORDER)?, None),
        };
        if layout.is_some() || full.len() + self.opt().len() <= self.limit {
            return Some(Response {
                bytes: full,
                add_opt: self.edns.is_some(),
                layout,
            });
        }
        let limit = u16::try_from(self.limit).ok()?;
        Some(Response {
            bytes: index.cached(question, cut_variant(limit, self.edns))?,
            add_opt: false,
            layout: None,
        })
    }

    /// Copies a cached response, rotated by its turn when its answer
    /// rotates (then cut to the client's limit if need be) and patched for
    /// this query; false if it would not fit (the slow path then truncates
    /// it properly).
    fn reuse(&self, cached: View<'_>, packet: &[u8], out: &mut Vec<u8>) -> bool {
        let opt = if cached.add_opt { self.opt() } else { &[] };
        let question = question::START..self.question_end;
        let same_question = cached
            .bytes
            .get(question.clone())
            .is_some_and(|q| q.eq_ignore_ascii_case(&packet[question.clone()]));
        if !same_question {
            return false;
        }
        match cached.layout {
            Some(layout) => rotate::write(cached.bytes, layout, cached.turn, self.limit, opt, out),
            None if cached.bytes.len() + opt.len() > self.limit => return false,
            None => {
                out.extend_from_slice(cached.bytes);
                if !opt.is_empty() {
                    out.extend_from_slice(opt);
                    out[10..12].copy_from_slice(&1u16.to_be_bytes());
                }
            }
        }
        // ID, then RD (low bit of byte 2) and CD (bit 4 of byte 3) as asked.
        out[..2].copy_from_slice(&packet[..2]);
        out[2] = (out[2] & !0x01) | (packet[2] & 0x01);
        out[3] = (out[3] & !0x10) | (packet[3] & 0x10);
        // The question exactly as asked (same length: only case differs).
        out[question.clone()].copy_from_slice(&packet[question]);
        true
    }
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    use hickory_proto::op::{Message, Query};
    use hickory_proto::rr::{LowerName, Name};

    use super::*;
    use crate::dns::message::response::Response;
    use crate::index::tests::demo_index;
    use crate::index::{Lookup, Owner};
    use crate::model::ServiceKey;

    /// Queries about `web.shop`: records, NODATA, with and without EDNS.
    fn queries() -> Vec<Vec<u8>> {
        let name = Name::from_str("web.shop.svc.clusterset.local.").unwrap();
        let asked = [
            (RecordType::A, None),
            (RecordType::AAAA, None),
            (RecordType::SRV, Some(1232)),
        ];
        asked
            .into_iter()
            .map(|(rtype, edns)| {
                let mut message = Message::query();
                message.add_query(Query::query(name.clone(), rtype));
                if let Some(payload) = edns {
                    let mut opt = Edns::new();
                    opt.set_max_payload(payload);
                    message.set_edns(opt);
                }
                message.to_vec().unwrap()
            })
            .collect()
    }

    /// The reply computed now, without the cache.
    fn fresh(index: &Index, packet: &[u8], peer: SocketAddr) -> Vec<u8> {
        let Handled::Answered(request, response) = handle(index, packet, peer, Protocol::Udp)
        else {
            panic!("a plain query")
        };
        let response: Response = response;
        response
            .encode(&request.queries, true, response.udp_limit())
            .unwrap()
    }

    /// Issue 14, fault 0: with updates of a service racing queries about
    /// it, once the updates stop and the queries in flight are done, every
    /// UDP reply (from the cache, or from a worker's recent responses kept
    /// across the updates) is the one computed afresh, as TCP would send it.
    #[test]
    fn updates_racing_queries_leave_no_stale_cached_answer() {
        // Every round is run, however long they take: the old store-by-name
        // failed within 1400 rounds (3 runs of 3).
        const ROUNDS: usize = 2000;
        let index = Arc::new(demo_index(false));
        let web = LowerName::from_str("web.shop.svc.clusterset.local.").unwrap();
        let Lookup::Found(Owner::Service(entry, _)) = index.lookup(&web) else {
            panic!("web.shop is served")
        };
        let first = entry.import.clone();
        let mut moved = (*first).clone();
        moved.addresses = ["10.9.9.9".parse().unwrap()].into_iter().collect();
        let states = [Some(first), Some(Arc::new(moved)), None];
        let key = ServiceKey::new("shop", "web");
        let peer: SocketAddr = "127.0.0.1:53000".parse().unwrap();
        let packets = queries();
        let stop = AtomicBool::new(false);
        let done = AtomicUsize::new(0);
        let mut recent = Recent::default();
        std::thread::scope(|scope| {
            // Stops the queriers however the checks end (a panic included).
            let _stop = StopOnDrop(&stop);
            for _ in 0..2 {
                scope.spawn(|| {
                    let mut out = Vec::new();
                    let mut recent = Recent::default();
                    while !stop.load(Ordering::Relaxed) {
                        for packet in &packets {
                            out.clear();
                            answer(&index, Some(&mut recent), None, packet, peer, &mut out);
                        }
                        done.fetch_add(1, Ordering::Release);
                        std::thread::yield_now();
                    }
                });
            }
            for round in 0..ROUNDS {
                // Each round ends in another state, some of them while
                // queries computed in the previous one are still in flight.
                for step in 0..round % 7 + 1 {
                    index.update(&key, states[(round + step) % 3].clone());
                    index.commit();
                    std::thread::yield_now();
                }
                // Let every query in flight during the updates finish.
                let seen = done.load(Ordering::Acquire);
                while done.load(Ordering::Acquire) < seen + 2 {
                    std::thread::yield_now();
                }
                for packet in &packets {
                    let mut cached = Vec::new();
                    respond(&index, packet, peer, &mut cached);
                    let mut again = Vec::new();
                    respond(&index, packet, peer, &mut again);
                    let fresh = fresh(&index, packet, peer);
                    assert_eq!(cached, fresh, "round {round}: stale UDP answer");
                    assert_eq!(again, fresh, "round {round}: stale cached answer");
                    let mut kept = Vec::new();
                    answer(&index, Some(&mut recent), None, packet, peer, &mut kept);
                    assert_eq!(kept, fresh, "round {round}: stale recent answer");
                }
            }
        });
    }

    /// A worker's recent responses are not served once the index changed:
    /// an update alone (before its commit) already gives the new answer.
    #[test]
    fn recent_responses_end_with_an_update_of_the_index() {
        let index = demo_index(false);
        let web = LowerName::from_str("web.shop.svc.clusterset.local.").unwrap();
        let Lookup::Found(Owner::Service(entry, _)) = index.lookup(&web) else {
            panic!("web.shop is served")
        };
        let mut moved = (*entry.import).clone();
        moved.addresses = ["10.9.9.9".parse().unwrap()].into_iter().collect();
        let peer: SocketAddr = "127.0.0.1:53000".parse().unwrap();
        let packet = &queries()[0];
        let mut recent = Recent::default();
        let ask = |recent: &mut Recent| {
            let mut out = Vec::new();
            answer(&index, Some(recent), None, packet, peer, &mut out).expect("answered");
            out
        };
        // Computed, then taken from the index and kept, then served from recent.
        let first = ask(&mut recent);
        assert_eq!(ask(&mut recent), first);
        assert_eq!(ask(&mut recent), first);
        index.update(&ServiceKey::new("shop", "web"), Some(Arc::new(moved)));
        let after = ask(&mut recent);
        assert_ne!(after, first, "the address moved");
        assert_eq!(after, fresh(&index, packet, peer));
    }

    /// ARCHITECTURE.md, "Load spread": a headless name asked again and
    /// again over UDP is answered from a worker's recent responses with the
    /// next record first each time; each response is the fresh one but for
    /// the order of its answer.
    #[test]
    fn repeated_queries_put_each_record_first_in_turn() {
        let index = demo_index(false);
        let peer: SocketAddr = "127.0.0.1:53000".parse().unwrap();
        let mut message = Message::query();
        let db = Name::from_str("db.shop.svc.clusterset.local.").unwrap();
        message.add_query(Query::query(db, RecordType::A));
        let packet = message.to_vec().unwrap();
        let sorted = |bytes: &[u8]| {
            let mut message = Message::from_vec(bytes).unwrap();
            message.answers.sort_by_key(ToString::to_string);
            message
        };
        let mut recent = Recent::default();
        let mut firsts = Vec::new();
        for _ in 0..7 {
            let mut out = Vec::new();
            answer(&index, Some(&mut recent), None, &packet, peer, &mut out).expect("answered");
            assert_eq!(sorted(&out), sorted(&fresh(&index, &packet, peer)));
            firsts.push(Message::from_vec(&out).unwrap().answers[0].clone());
        }
        // The first from the slow path, the rest from `recent`, one turn each.
        let turns: std::collections::BTreeSet<_> = firsts[1..4].iter().collect();
        assert_eq!(turns.len(), 3, "three records, three firsts: {firsts:?}");
        assert_eq!(firsts[1..4], firsts[4..7], "and round again");
    }

    struct StopOnDrop<'a>(&'a AtomicBool);

    impl Drop for StopOnDrop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }

    /// `wEb.ShOp. IN A`, in the mixed case a resolver using 0x20 randomisation sends.
    const QUESTION: &[u8] = b"\x03wEb\x04ShOp\x00\x00\x01\x00\x01";
    /// The same question as the server wrote it into the cached response.
    const CACHED_QUESTION: &[u8] = b"\x03web\x04shop\x00\x00\x01\x00\x01";
    /// An A record for the question's name (a pointer to offset 12), 10.0.0.1.
    const ANSWER: &[u8] = b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x00\x05\x00\x04\x0a\x00\x00\x01";
    /// The offset just past [`QUESTION`].
    const QUESTION_END: usize = question::START + QUESTION.len();
    /// RD (byte 2) and CD (byte 3) in the 16-bit flags word (RFC 1035 §4.1.1, RFC 4035 §3.2.2).
    const RD: u16 = 0x0100;
    const CD: u16 = 0x0010;

    /// A message: ID, flags, QD/AN/NS/AR counts, then the sections' bytes.
    fn message(id: u16, flags: u16, counts: [u16; 4], sections: &[&[u8]]) -> Vec<u8> {
        let mut bytes = [id.to_be_bytes(), flags.to_be_bytes()].concat();
        for count in counts {
            bytes.extend(count.to_be_bytes());
        }
        for section in sections {
            bytes.extend_from_slice(section);
        }
        bytes
    }

    /// An OPT record (RFC 6891 §6.1.2): root owner, type 41, the payload
    /// size as class, extended RCODE 0, `version`, the DO bit, `rdata`.
    fn opt_record(payload: u16, version: u8, dnssec_ok: bool, rdata: &[u8]) -> Vec<u8> {
        let mut bytes = vec![0, 0, 41];
        bytes.extend(payload.to_be_bytes());
        bytes.extend([0, version, if dnssec_ok { 0x80 } else { 0 }, 0]);
        bytes.extend(u16::try_from(rdata.len()).unwrap().to_be_bytes());
        bytes.extend_from_slice(rdata);
        bytes
    }

    /// A query for [`QUESTION`] with ID 0xbeef, these flags and OPT record.
    fn query(flags: u16, opt: Option<&[u8]>) -> Vec<u8> {
        match opt {
            Some(opt) => message(0xbeef, flags, [1, 0, 0, 1], &[QUESTION, opt]),
            None => message(0xbeef, flags, [1, 0, 0, 0], &[QUESTION]),
        }
    }

    /// A cached answer: ID 0, QR AA RD set, RA CD set, RCODE 0, the question
    /// in lower case, one A record, then `filler` bytes standing in for more.
    fn cached(filler: usize) -> Vec<u8> {
        let filler = vec![0xaa; filler];
        message(0, 0x8590, [1, 1, 0, 0], &[CACHED_QUESTION, ANSWER, &filler])
    }

    fn parse(packet: &[u8]) -> FastQuery {
        FastQuery::parse(packet).expect("a plain query")
    }

    /// Runs `reuse` into a fresh buffer: whether it answered, and what it wrote.
    fn reuse(packet: &[u8], cached: Vec<u8>, add_opt: bool) -> (bool, Vec<u8>) {
        let mut out = Vec::new();
        let cached = super::Response {
            bytes: Arc::from(cached),
            add_opt,
            layout: None,
        };
        let done = parse(packet).reuse(cached.view(0), packet, &mut out);
        (done, out)
    }

    /// The OPT records we add are EDNS version 0 with our payload size,
    /// no options, and the DO bit as given (RFC 6891 §6.1.2, §6.1.3; RFC 3225 §3).
    #[test]
    fn our_opt_records_are_version_0_with_payload_1232() {
        assert_eq!(OPT[0], opt_record(1232, 0, false, &[]));
        assert_eq!(OPT[1], opt_record(1232, 0, true, &[]));
    }

    #[test]
    fn parse_takes_a_plain_query_without_edns_at_the_512_byte_limit() {
        let packet = query(RD, None);
        let query = parse(&packet);
        assert_eq!(
            &packet[question::START..QUESTION_END - 4],
            b"\x03wEb\x04ShOp\x00"
        );
        assert_eq!(query.rtype, RecordType::A);
        assert_eq!(query.question_end, QUESTION_END);
        assert_eq!(query.limit, 512, "RFC 1035 §4.2.1: 512 bytes without EDNS");
        assert_eq!(query.edns, None);
        assert!(!query.edns_cut);
    }

    /// RFC 6891 §6.2.5: a payload size below 512 counts as 512; ours caps
    /// larger ones at 1232. RFC 3225 §3: the DO bit is kept to copy back.
    #[test]
    fn parse_takes_payload_size_and_do_bit_from_the_opt_record_rfc6891_6_2_5() {
        let cases = [
            (4096, false, 1232),
            (1232, true, 1232),
            (1000, true, 1000),
            (100, false, 512),
        ];
        for (payload, dnssec_ok, limit) in cases {
            let opt = opt_record(payload, 0, dnssec_ok, &[]);
            let query = parse(&query(0, Some(&opt)));
            assert_eq!(query.limit, limit, "payload {payload}");
            assert_eq!(query.edns, Some(dnssec_ok), "payload {payload}");
            assert_eq!(query.question_end, QUESTION_END);
            assert!(!query.edns_cut);
        }
    }

    /// An option cut short in the OPT record (RFC 6891 §6.1.2) is noted,
    /// and the query still takes the fast path.
    #[test]
    fn parse_notes_opt_options_cut_short() {
        let whole = opt_record(1232, 0, false, b"\x00\x0a\x00\x02\x01\x02");
        assert!(!parse(&query(0, Some(&whole))).edns_cut);
        let cut = opt_record(1232, 0, false, b"\x00\x0a");
        let query = parse(&query(0, Some(&cut)));
        assert!(query.edns_cut);
        assert_eq!(query.edns, Some(false));
    }

    /// Anything but one question and at most an EDNS(0) OPT record, with no
    /// byte after it, is left to the slow path (RFC 1035 §4.1.1 header,
    /// §4.1.4 compression, RFC 6891 §6.1.1 one OPT, §6.1.3 version).
    #[test]
    fn parse_leaves_everything_but_a_plain_query_to_the_slow_path() {
        let opt = opt_record(1232, 0, false, &[]);
        let a_record = [b"\x00" as &[u8], &ANSWER[2..]].concat();
        let pointer = b"\x03wEb\xc0\x0c\x00\x01\x00\x01";
        let cases: [(&str, Vec<u8>); 13] = [
            ("a response (QR)", query(0x8000, None)),
            ("opcode NOTIFY", query(0x2000, None)),
            ("opcode STATUS", query(0x1000, None)),
            ("no question", message(1, 0, [0, 0, 0, 0], &[])),
            (
                "two questions",
                message(1, 0, [2, 0, 0, 0], &[QUESTION, QUESTION]),
            ),
            (
                "an answer",
                message(1, 0, [1, 1, 0, 0], &[QUESTION, ANSWER]),
            ),
            (
                "an authority",
                message(1, 0, [1, 0, 1, 0], &[QUESTION, ANSWER]),
            ),
            (
                "two additionals",
                message(1, 0, [1, 0, 0, 2], &[QUESTION, &opt, &opt]),
            ),
            (
                "an A record as additional",
                message(1, 0, [1, 0, 0, 1], &[QUESTION, &a_record]),
            ),
            (
                "EDNS version 1",
                query(0, Some(&opt_record(1232, 1, false, &[]))),
            ),
            ("a trailing byte", [query(0, None), vec![0]].concat()),
            (
                "a pointer in the question",
                message(1, 0, [1, 0, 0, 0], &[pointer]),
            ),
            (
                "a cut question",
                message(1, 0, [1, 0, 0, 0], &[&QUESTION[..12]]),
            ),
        ];
        for (what, packet) in cases {
            assert!(FastQuery::parse(&packet).is_none(), "{what}");
        }
        assert!(FastQuery::parse(&[0; 11]).is_none(), "a cut header");
    }

    /// RFC 1035 §4.1.1: the ID and RD are copied from the query; RFC 4035
    /// §3.2.2: so is CD. The other flags, the counts and the records are the
    /// cached ones; the question is the query's, in its case.
    #[test]
    fn reuse_copies_id_rd_cd_and_question_case_rfc1035_4_1_1() {
        for (flags, byte2, byte3) in [(0, 0x84, 0x80), (RD | CD, 0x85, 0x90)] {
            let packet = query(flags, None);
            let (done, out) = reuse(&packet, cached(0), false);
            assert!(done);
            let expected = [
                &[0xbe, 0xef, byte2, byte3, 0, 1, 0, 1, 0, 0, 0, 0][..],
                QUESTION,
                ANSWER,
            ]
            .concat();
            assert_eq!(out, expected, "query flags {flags:#06x}");
        }
    }

    /// RFC 6891 §6.1.1: a query with an OPT record gets one back; ours is
    /// version 0 (§6.1.3) with the query's DO bit (RFC 3225 §3), and
    /// ARCOUNT counts it.
    #[test]
    fn reuse_appends_opt_with_the_do_bit_asked_rfc6891_6_1_3_rfc3225_3() {
        for dnssec_ok in [false, true] {
            let packet = query(RD, Some(&opt_record(4096, 0, dnssec_ok, &[])));
            let (done, out) = reuse(&packet, cached(0), true);
            assert!(done);
            let expected = [
                &[0xbe, 0xef, 0x85, 0x80, 0, 1, 0, 1, 0, 0, 0, 1][..],
                QUESTION,
                ANSWER,
                &opt_record(1232, 0, dnssec_ok, &[]),
            ]
            .concat();
            assert_eq!(out, expected, "DO {dnssec_ok}");
        }
    }

    /// A response cut to the client's limit is cached with its OPT record:
    /// reused without adding another (ARCOUNT as cached).
    #[test]
    fn reuse_adds_no_opt_to_a_response_that_has_one() {
        let packet = query(0, Some(&opt_record(1232, 0, true, &[])));
        let (done, out) = reuse(&packet, cached(0), false);
        assert!(done);
        let expected = [
            &[0xbe, 0xef, 0x84, 0x80, 0, 1, 0, 1, 0, 0, 0, 0][..],
            QUESTION,
            ANSWER,
        ]
        .concat();
        assert_eq!(out, expected);
    }

    /// A response longer than the client's limit (512 bytes without EDNS,
    /// RFC 1035 §4.2.1; its payload size with, RFC 6891 §6.2.3), counting
    /// the OPT record to add, is not reused: the slow path truncates it.
    #[test]
    fn reuse_refuses_a_response_over_the_clients_limit_rfc1035_4_2_1() {
        let base = cached(0).len();
        let plain = query(0, None);
        assert!(reuse(&plain, cached(512 - base), false).0);
        assert_eq!(reuse(&plain, cached(513 - base), false), (false, vec![]));
        let edns = query(0, Some(&opt_record(1000, 0, false, &[])));
        let opt_len = OPT[0].len();
        let (done, out) = reuse(&edns, cached(1000 - opt_len - base), true);
        assert!(done);
        assert_eq!(out.len(), 1000);
        let over = cached(1001 - opt_len - base);
        assert_eq!(reuse(&edns, over.clone(), true), (false, vec![]));
        // Already holding its OPT record, the same bytes fit.
        assert!(reuse(&edns, over, false).0);
    }

    /// A cached response whose question is not the query's (another name
    /// or type, or too short to hold it) is never sent.
    #[test]
    fn reuse_refuses_a_response_to_another_question() {
        let packet = query(0, None);
        let other = |question: &[u8]| message(0, 0x8590, [1, 1, 0, 0], &[question, ANSWER]);
        let cases = [
            (
                "another name",
                other(b"\x03wEx\x04shop\x00\x00\x01\x00\x01"),
            ),
            (
                "another type",
                other(b"\x03web\x04shop\x00\x00\x1c\x00\x01"),
            ),
            (
                "another class",
                other(b"\x03web\x04shop\x00\x00\x01\x00\x03"),
            ),
            ("cut short", cached(0)[..QUESTION_END - 1].to_vec()),
        ];
        for (what, cached) in cases {
            assert_eq!(reuse(&packet, cached, false), (false, vec![]), "{what}");
        }
    }

    /// `lookup` finds what the slow path cached: the complete response,
    /// with the OPT record still to add for an EDNS query.
    #[test]
    fn lookup_finds_the_response_the_slow_path_cached() {
        let index = demo_index(false);
        let peer: SocketAddr = "127.0.0.1:53000".parse().unwrap();
        let name = b"\x03web\x04shop\x03svc\x0aclusterset\x05local\x00\x00\x01\x00\x01";
        let plain = message(7, RD, [1, 0, 0, 0], &[name]);
        let opt = opt_record(1232, 0, false, &[]);
        let edns = message(8, RD, [1, 0, 0, 1], &[name, &opt]);
        assert!(
            parse(&plain).lookup(&index, &plain).is_none(),
            "not yet cached"
        );
        let mut sent = Vec::new();
        respond(&index, &plain, peer, &mut sent).unwrap();
        let cached = parse(&plain).lookup(&index, &plain).expect("cached");
        assert_eq!(
            &cached.bytes[2..],
            &sent[2..],
            "the response sent, ID aside"
        );
        assert!(!cached.add_opt);
        let cached = parse(&edns).lookup(&index, &edns).expect("cached");
        assert_eq!(&cached.bytes[2..], &sent[2..]);
        assert!(cached.add_opt);
    }
}
