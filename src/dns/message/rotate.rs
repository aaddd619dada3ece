//! Load spread: an answer of several records of one rrset (headless A and
//! AAAA, SRV) is sent rotated, a different record first in each response,
//! so that clients that take the first address, and stubs that use whatever
//! a truncated UDP answer holds without asking again over TCP, spread over
//! every endpoint of every cluster (ARCHITECTURE.md, "Load spread"). The
//! order of an rrset carries no meaning (RFC 2181 §5), so any is correct.
//!
//! Rotation works on encoded messages, with no re-encoding: the answer's
//! records are found once ([`Layout::of`]) and each response moves their
//! bytes. It is only done when moving them moves no name that a compression
//! pointer refers to: every pointer from the answer on points before it
//! (into the header and question, which stay in place). A response that does
//! not fit the client's limit is cut to a window of whole records from the
//! rotation's first record on (wrapping round), with TC set, the counts
//! matching and the OPT record kept (RFC 1035 §4.1, RFC 2181 §9, RFC 6891 §7).

use std::sync::atomic::{AtomicUsize, Ordering};

use hickory_proto::rr::RecordType;

/// Header bytes before the question (RFC 1035 §4.1.1).
const HEADER: usize = 12;
/// Byte 2 of the header: the TC flag.
const TC: u8 = 0x02;

/// Rotations for responses that have no counter of their own (the UDP slow
/// path, TCP, TLS): each takes the next.
static TURN: AtomicUsize = AtomicUsize::new(0);

/// The next rotation from the process-wide counter.
pub(crate) fn next_turn() -> usize {
    TURN.fetch_add(1, Ordering::Relaxed)
}

/// Where the records of a message's answer lie, when they can rotate:
/// `bounds[0]` is where the answer starts, `bounds[i + 1]` where record `i`
/// ends; the last bound is where the sections after the answer start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    bounds: Box<[u16]>,
}

impl Layout {
    /// The answer's layout if it can rotate: at least two records, all of
    /// one rrset (the same owner name, type and class) of type A, AAAA or
    /// SRV, no compression pointer from the answer on pointing into it, and
    /// nothing after the last record. None for anything else, a message that
    /// does not parse included.
    pub(crate) fn of(message: &[u8]) -> Option<Self> {
        let count = |at: usize| u16::from_be_bytes([message[at], message[at + 1]]);
        if message.len() < HEADER {
            return None;
        }
        let (questions, answers) = (count(4), usize::from(count(6)));
        let (authorities, additionals) = (count(8), count(10));
        if answers < 2 {
            return None;
        }
        // A name of the question points back into the question at most.
        let mut at = HEADER;
        for _ in 0..questions {
            at = name_end(message, at, at)? + 4;
        }
        let start = at;
        let mut bounds = Vec::with_capacity(answers + 1);
        bounds.push(u16::try_from(start).ok()?);
        // The first record's owner (expanded: past 120 names hickory-proto
        // stops compressing, so later owners may be written out) and type.
        let (mut first, mut owner) = ([0; 255], [0; 255]);
        let mut rrset: Option<(usize, [u8; 4])> = None;
        for _ in 0..answers {
            let record = Record::read(message, at, start)?;
            let length = expand(message, at, &mut owner)?;
            let kind = record.type_and_class(message);
            match rrset {
                None => {
                    first = owner;
                    rrset = Some((length, kind));
                }
                Some(same) if same == (length, kind) && first[..length] == owner[..length] => {}
                Some(_) => return None,
            }
            let names = match record.rtype(message) {
                RecordType::A | RecordType::AAAA => &[][..],
                RecordType::SRV => &[6][..],
                _ => return None,
            };
            record.check_names(message, names, start)?;
            at = record.end;
            bounds.push(u16::try_from(at).ok()?);
        }
        // The sections after the answer stay as they are, but a name in them
        // must not point into the records that move.
        for _ in 0..u32::from(authorities) + u32::from(additionals) {
            let record = Record::read(message, at, start)?;
            let names = match record.rtype(message) {
                RecordType::A
                | RecordType::AAAA
                | RecordType::OPT
                | RecordType::TXT
                | RecordType::HINFO => &[][..],
                RecordType::NS | RecordType::CNAME | RecordType::PTR => &[0][..],
                RecordType::SRV => &[6][..],
                RecordType::SOA => &[0, usize::MAX][..],
                _ => return None,
            };
            record.check_names(message, names, start)?;
            at = record.end;
        }
        (at == message.len()).then(|| Self {
            bounds: bounds.into(),
        })
    }

    /// How many records rotate.
    pub(crate) fn records(&self) -> usize {
        self.bounds.len() - 1
    }

    fn bound(&self, i: usize) -> usize {
        usize::from(self.bounds[i])
    }
}

/// Appends to `out` the `message` its `layout` describes with the answer's
/// records rotated by `turn` (record `turn % n` first), then `opt` (an OPT
/// record, or empty; `message` must have none of its own) counted in
/// ARCOUNT. If that comes to more than `limit` bytes, only the records from
/// the first on (wrapping round) that fit with the header, question and
/// `opt` are kept, TC is set and the sections after the answer are left out.
pub(crate) fn write(
    message: &[u8],
    layout: &Layout,
    turn: usize,
    limit: usize,
    opt: &[u8],
    out: &mut Vec<u8>,
) {
    let n = layout.records();
    let first = turn % n;
    let (start, pivot, end) = (layout.bound(0), layout.bound(first), layout.bound(n));
    let base = out.len();
    out.extend_from_slice(&message[..start]);
    let added = u16::from(!opt.is_empty());
    if message.len() + opt.len() <= limit {
        out.extend_from_slice(&message[pivot..end]);
        out.extend_from_slice(&message[start..pivot]);
        out.extend_from_slice(&message[end..]);
        out.extend_from_slice(opt);
        let additionals = u16::from_be_bytes([message[10], message[11]]).saturating_add(added);
        out[base + 10..base + 12].copy_from_slice(&additionals.to_be_bytes());
        return;
    }
    // The window: whole records from `first` on, wrapping round, that fit.
    let room = limit.saturating_sub(start + opt.len());
    let (mut taken, mut used) = (0, 0);
    while taken < n {
        let i = (first + taken) % n;
        let record = layout.bound(i)..layout.bound(i + 1);
        if used + record.len() > room {
            break;
        }
        used += record.len();
        out.extend_from_slice(&message[record]);
        taken += 1;
    }
    out.extend_from_slice(opt);
    let answers = u16::try_from(taken).unwrap_or(u16::MAX);
    for (slot, count) in out[base + 6..base + 12]
        .chunks_exact_mut(2)
        .zip([answers, 0, added])
    {
        slot.copy_from_slice(&count.to_be_bytes());
    }
    out[base + 2] |= TC;
}

/// One resource record's place in a message (RFC 1035 §4.1.3).
struct Record {
    owner_end: usize,
    rdata: usize,
    end: usize,
}

impl Record {
    /// The record at `at`; its owner's pointers must point before `moving`.
    fn read(message: &[u8], at: usize, moving: usize) -> Option<Self> {
        let owner_end = name_end(message, at, moving)?;
        let fixed = message.get(owner_end..owner_end + 10)?;
        let length = usize::from(u16::from_be_bytes([fixed[8], fixed[9]]));
        let rdata = owner_end + 10;
        let end = rdata + length;
        (end <= message.len()).then_some(Self {
            owner_end,
            rdata,
            end,
        })
    }

    fn type_and_class(&self, message: &[u8]) -> [u8; 4] {
        let at = self.owner_end;
        [
            message[at],
            message[at + 1],
            message[at + 2],
            message[at + 3],
        ]
    }

    fn rtype(&self, message: &[u8]) -> RecordType {
        let at = self.owner_end;
        RecordType::from(u16::from_be_bytes([message[at], message[at + 1]]))
    }

    /// Checks the names in the RDATA, at these offsets into it (`usize::MAX`:
    /// just after the previous name), end within it and point before `moving`.
    fn check_names(&self, message: &[u8], offsets: &[usize], moving: usize) -> Option<()> {
        let mut previous = self.rdata;
        for &offset in offsets {
            let at = if offset == usize::MAX {
                previous
            } else {
                self.rdata + offset
            };
            previous = name_end(&message[..self.end], at, moving)?;
        }
        Some(())
    }
}

/// Where the name at `at` ends (RFC 1035 §4.1.4): after its root label or
/// its pointer, which must point before `moving`.
fn name_end(message: &[u8], mut at: usize, moving: usize) -> Option<usize> {
    loop {
        let length = *message.get(at)?;
        match length & 0xc0 {
            0 if length == 0 => return Some(at + 1),
            0 => at += 1 + usize::from(length),
            0xc0 => {
                let low = *message.get(at + 1)?;
                let target = usize::from(u16::from_be_bytes([length & 0x3f, low]));
                return (target < moving).then_some(at + 2);
            }
            _ => return None,
        }
    }
}

/// The name at `at` with its pointers followed and lower-cased (names
/// compare without regard to case, RFC 4343 §3), into `buffer`; its length.
fn expand(message: &[u8], mut at: usize, buffer: &mut [u8; 255]) -> Option<usize> {
    let mut length = 0;
    // A pointer points backwards (RFC 1035 §4.1.4), so this ends.
    let mut limit = at;
    loop {
        let byte = *message.get(at)?;
        match byte & 0xc0 {
            0 => {
                let label = message.get(at..at + 1 + usize::from(byte))?;
                let into = buffer.get_mut(length..length + label.len())?;
                into.copy_from_slice(label);
                into.make_ascii_lowercase();
                length += label.len();
                if byte == 0 {
                    return Some(length);
                }
                at += label.len();
            }
            0xc0 => {
                let low = *message.get(at + 1)?;
                let target = usize::from(u16::from_be_bytes([byte & 0x3f, low]));
                if target >= limit {
                    return None;
                }
                (at, limit) = (target, target);
            }
            _ => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};
    use std::str::FromStr;

    use hickory_proto::op::{Edns, Message, Query};
    use hickory_proto::rr::rdata::{A, AAAA, NS, SOA, SRV};
    use hickory_proto::rr::{Name, RData, Record as Rr};

    use super::*;

    fn name(text: &str) -> Name {
        Name::from_str(text).unwrap()
    }

    /// A response to `qname`/`rtype` with these sections, encoded by hickory
    /// (names compressed as the server's encoder does).
    fn message(qname: &str, rtype: RecordType, answers: Vec<Rr>, authority: Vec<Rr>) -> Vec<u8> {
        let mut message = Message::query();
        message.metadata.id = 0x1234;
        message.add_query(Query::query(name(qname), rtype));
        message.answers = answers;
        message.authorities = authority;
        message.to_vec().unwrap()
    }

    const SVC: &str = "db.shop.svc.clusterset.local.";
    const SRV_NAME: &str = "_pg._tcp.db.shop.svc.clusterset.local.";

    fn a_records(count: u8) -> Vec<Rr> {
        (1..=count)
            .map(|i| Rr::from_rdata(name(SVC), 5, RData::A(A(Ipv4Addr::new(10, 1, 0, i)))))
            .collect()
    }

    fn aaaa_records(count: u16) -> Vec<Rr> {
        (1..=count)
            .map(|i| {
                let ip = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, i);
                Rr::from_rdata(name(SVC), 5, RData::AAAA(AAAA(ip)))
            })
            .collect()
    }

    /// SRV records whose targets differ in length (so do the records).
    fn srv_records() -> Vec<Rr> {
        ["db-0.east", "10-1-0-2.east", "db-0.eu.west", "a.west"]
            .iter()
            .map(|host| {
                let target = name(&format!("{host}.{SVC}"));
                Rr::from_rdata(name(SRV_NAME), 5, RData::SRV(SRV::new(0, 50, 5432, target)))
            })
            .collect()
    }

    fn soa() -> Rr {
        let zone = name("clusterset.local.");
        let soa = SOA::new(
            zone.clone(),
            name("hostmaster.clusterset.local."),
            1,
            2,
            3,
            4,
            5,
        );
        Rr::from_rdata(zone, 5, RData::SOA(soa))
    }

    fn parse(bytes: &[u8]) -> Message {
        Message::from_vec(bytes).unwrap()
    }

    fn rotated(bytes: &[u8], turn: usize, limit: usize, opt: &[u8]) -> Vec<u8> {
        let layout = Layout::of(bytes).expect("rotatable");
        let mut out = vec![];
        write(bytes, &layout, turn, limit, opt, &mut out);
        out
    }

    /// A, AAAA and SRV answers: each turn puts the next record first and
    /// keeps every record; turns go round (RFC 2181 §5: an rrset has no order).
    #[test]
    fn answers_of_a_aaaa_and_srv_rotate_by_whole_records() {
        let cases = [
            (SVC, RecordType::A, a_records(5)),
            (SVC, RecordType::AAAA, aaaa_records(3)),
            (SRV_NAME, RecordType::SRV, srv_records()),
        ];
        for (qname, rtype, records) in cases {
            let bytes = message(qname, rtype, records.clone(), vec![]);
            let n = records.len();
            assert_eq!(Layout::of(&bytes).unwrap().records(), n);
            for turn in 0..2 * n + 1 {
                let out = rotated(&bytes, turn, usize::MAX, &[]);
                assert_eq!(out.len(), bytes.len(), "{rtype} turn {turn}");
                let mut expected = records.clone();
                expected.rotate_left(turn % n);
                let parsed = parse(&out);
                assert_eq!(parsed.answers, expected, "{rtype} turn {turn}");
                assert_eq!(parsed.metadata, parse(&bytes).metadata);
                assert_eq!(parsed.queries, parse(&bytes).queries);
            }
        }
    }

    /// Past 120 names hickory-proto writes owners out instead of pointing
    /// to the question: records of one rrset then differ in length, and
    /// still rotate (and are cut) as whole records.
    #[test]
    fn owners_written_out_or_compressed_are_one_rrset() {
        let records: Vec<Rr> = (0..150u16)
            .map(|i| {
                let ip = Ipv4Addr::new(10, 1, (i / 200) as u8, (i % 200) as u8);
                Rr::from_rdata(name(SVC), 5, RData::A(A(ip)))
            })
            .collect();
        let bytes = message(SVC, RecordType::A, records.clone(), vec![]);
        let layout = Layout::of(&bytes).expect("rotatable");
        let lengths: std::collections::BTreeSet<usize> = (0..150)
            .map(|i| layout.bound(i + 1) - layout.bound(i))
            .collect();
        assert!(
            lengths.len() > 1,
            "owners both compressed and not: {lengths:?}"
        );
        for turn in [0, 1, 119, 120, 149, 150] {
            let mut expected = records.clone();
            expected.rotate_left(turn % 150);
            assert_eq!(
                parse(&rotated(&bytes, turn, usize::MAX, &[])).answers,
                expected
            );
            let cut = parse(&rotated(&bytes, turn, 1232, &[]));
            assert!(cut.metadata.truncation);
            assert_eq!(cut.answers[..], expected[..cut.answers.len()]);
        }
    }

    /// Zero or one record: nothing to rotate.
    #[test]
    fn zero_or_one_record_does_not_rotate() {
        let none = message(SVC, RecordType::A, vec![], vec![soa()]);
        assert!(Layout::of(&none).is_none());
        let one = message(SVC, RecordType::A, a_records(1), vec![]);
        assert!(Layout::of(&one).is_none());
        assert!(Layout::of(&[0; 5]).is_none(), "not even a header");
    }

    /// Only one rrset rotates: records of several names or types keep their order.
    #[test]
    fn an_answer_of_several_rrsets_does_not_rotate() {
        let mut mixed = a_records(2);
        mixed.extend(aaaa_records(1));
        assert!(Layout::of(&message(SVC, RecordType::ANY, mixed, vec![])).is_none());
        let mut names = a_records(2);
        names.push(Rr::from_rdata(
            name("other.shop.svc.clusterset.local."),
            5,
            RData::A(A(Ipv4Addr::new(10, 9, 9, 9))),
        ));
        assert!(Layout::of(&message(SVC, RecordType::A, names, vec![])).is_none());
        let ns = (1..=2)
            .map(|i| Rr::from_rdata(name(SVC), 5, RData::NS(NS(name(&format!("ns{i}.x."))))))
            .collect();
        assert!(
            Layout::of(&message(SVC, RecordType::NS, ns, vec![])).is_none(),
            "only A, AAAA and SRV rotate"
        );
    }

    /// Mixed sections: the answer rotates; the authority and additional
    /// records (OPT included) follow it byte for byte.
    #[test]
    fn only_the_answer_rotates_authority_and_additional_stay() {
        let mut query = Message::query();
        query.metadata.id = 7;
        query.add_query(Query::query(name(SVC), RecordType::A));
        query.answers = a_records(3);
        query.authorities = vec![soa()];
        let glue = Rr::from_rdata(
            name("ns.dns.clusterset.local."),
            5,
            RData::A(A(Ipv4Addr::LOCALHOST)),
        );
        query.additionals = vec![glue.clone()];
        query.set_edns(Edns::new());
        let bytes = query.to_vec().unwrap();
        let layout = Layout::of(&bytes).expect("rotatable");
        let answer_end = layout.bound(3);
        for turn in 0..3 {
            let out = rotated(&bytes, turn, usize::MAX, &[]);
            assert_eq!(
                out[..layout.bound(0)],
                bytes[..layout.bound(0)],
                "header, question"
            );
            assert_eq!(
                out[answer_end..],
                bytes[answer_end..],
                "authority, additional"
            );
            let parsed = parse(&out);
            let mut expected = a_records(3);
            expected.rotate_left(turn);
            assert_eq!(parsed.answers, expected);
            assert_eq!(parsed.authorities, vec![soa()]);
            assert_eq!(parsed.additionals, vec![glue.clone()]);
            assert!(parsed.edns.is_some());
        }
    }

    /// A name after the answer compressed against a name in it (here an
    /// authority NS owner pointing into an SRV target) would point elsewhere
    /// once the records move: such a message is not rotated.
    #[test]
    fn a_pointer_into_the_answer_keeps_the_order() {
        let delegation = Rr::from_rdata(
            name(&format!("east.{SVC}")),
            5,
            RData::NS(NS(name("ns.dns.clusterset.local."))),
        );
        let bytes = message(SRV_NAME, RecordType::SRV, srv_records(), vec![delegation]);
        assert!(Layout::of(&bytes).is_none());
        // Without it, the same answer rotates.
        assert!(Layout::of(&message(SRV_NAME, RecordType::SRV, srv_records(), vec![])).is_some());
    }

    /// A message with bytes after its last counted record, or cut short, is
    /// not rotated.
    #[test]
    fn a_malformed_message_does_not_rotate() {
        let bytes = message(SVC, RecordType::A, a_records(3), vec![]);
        assert!(Layout::of(&[bytes.clone(), vec![0]].concat()).is_none());
        assert!(Layout::of(&bytes[..bytes.len() - 1]).is_none());
    }

    /// Cut to a limit: a window of whole records from the turn's first on,
    /// wrapping round; TC set, ANCOUNT the records kept, authority left out,
    /// the OPT record added and counted (RFC 1035 §4.1, RFC 2181 §9, RFC 6891 §7).
    #[test]
    fn a_cut_answer_is_a_rotated_window_of_whole_records_with_the_opt() {
        let mut opt_message = Message::query();
        opt_message.set_edns(Edns::new());
        let with_opt = opt_message.to_vec().unwrap();
        let opt = with_opt[HEADER..].to_vec();
        let cases = [
            (SVC, RecordType::A, a_records(40), vec![]),
            (SRV_NAME, RecordType::SRV, srv_records(), vec![soa()]),
        ];
        for (qname, rtype, records, authority) in cases {
            let bytes = message(qname, rtype, records.clone(), authority);
            let n = records.len();
            let limit = bytes.len() - 1;
            for extra in [&[][..], &opt[..]] {
                let mut seen = std::collections::BTreeSet::new();
                for turn in 0..n {
                    let out = rotated(&bytes, turn, limit, extra);
                    assert!(out.len() <= limit, "{rtype} turn {turn}");
                    let parsed = parse(&out);
                    assert!(parsed.metadata.truncation, "{rtype} turn {turn}: TC");
                    let count = |at: usize| usize::from(u16::from_be_bytes([out[at], out[at + 1]]));
                    assert_eq!(count(6), parsed.answers.len());
                    assert_eq!((count(8), count(10)), (0, usize::from(!extra.is_empty())));
                    assert_eq!(parsed.edns.is_some(), !extra.is_empty(), "the OPT kept");
                    let kept = parsed.answers.len();
                    assert!(kept > 0 && kept <= n, "{rtype} turn {turn}: {kept} kept");
                    let expected: Vec<Rr> =
                        (0..kept).map(|i| records[(turn + i) % n].clone()).collect();
                    assert_eq!(parsed.answers, expected, "{rtype} turn {turn}");
                    seen.extend(parsed.answers.iter().map(|r| r.data.clone()));
                }
                assert_eq!(seen.len(), n, "{rtype}: the windows cover every record");
            }
            // Room for no record at all: the header, question and OPT, TC set.
            let layout = Layout::of(&bytes).unwrap();
            let out = rotated(&bytes, 1, layout.bound(0) + opt.len(), &opt);
            let parsed = parse(&out);
            assert!(parsed.metadata.truncation && parsed.answers.is_empty());
            assert!(parsed.edns.is_some());
        }
    }

    /// The window of A records is the same size whatever the turn (equal
    /// lengths), and a window never holds a record twice.
    #[test]
    fn a_windows_hold_as_many_records_whatever_the_turn() {
        let bytes = message(SVC, RecordType::A, a_records(80), vec![]);
        let sizes: std::collections::BTreeSet<usize> = (0..80)
            .map(|turn| parse(&rotated(&bytes, turn, 512, &[])).answers.len())
            .collect();
        assert_eq!(sizes.len(), 1, "{sizes:?}");
        let big = parse(&rotated(&bytes, 79, bytes.len() - 16, &[]));
        let distinct: std::collections::BTreeSet<_> =
            big.answers.iter().map(|r| r.data.clone()).collect();
        assert_eq!(distinct.len(), 79);
    }
}
