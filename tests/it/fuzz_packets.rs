//! A bounded fuzz run of the UDP packet path (issue 14): seeded random bytes
//! and random-but-structured queries (names, types, classes, flags, counts,
//! EDNS options, compression pointers, then mutated), fed to the UDP
//! `respond` function in-process and, fewer, through a real UDP socket.
//! Every reply must hold the invariants below, not just "no panic".
//! `FUZZ_CASES` and `FUZZ_SEED` override the case count and the seed.

use std::net::SocketAddr;

use clusterset_dns::dns::{Handled, MAX_UDP_PAYLOAD, handle, respond_udp};
use clusterset_dns::index::Index;
use hickory_proto::op::{Header, Message, MessageType};
use hickory_proto::serialize::binary::{BinDecodable, BinDecoder};
use hickory_server::net::xfer::Protocol;

use crate::common::*;

/// Cases run in-process (a few seconds in a debug build).
const CASES: usize = 20_000;
/// Of which sent over a real socket as well.
const OVER_SOCKET: usize = 500;

/// Labels that names are made of: the zone's, some services', and odd ones.
const LABELS: [&[u8]; 18] = [
    b"clusterset",
    b"local",
    b"svc",
    b"shop",
    b"web",
    b"db",
    b"big",
    b"db-0",
    b"east",
    b"west",
    b"_http",
    b"_tcp",
    b"_postgres",
    b"dns-version",
    b"10-1-1-10",
    b"ns",
    b"*",
    b"\x00\xff.\\",
];

/// Query types asked: the served ones, transfers, ANY, others.
const TYPES: [u16; 14] = [1, 28, 33, 16, 6, 2, 255, 252, 251, 13, 41, 0, 65535, 99];

fn shop() -> Clusterset {
    let cs = Clusterset::new();
    let big = headless("shop", "big", &["IPv4"]);
    let endpoints: Vec<Ep> = (0..120).map(|i| ep(&format!("10.4.0.{}", i + 1))).collect();
    let db = headless("shop", "db", &["IPv4"]).ports(&[("postgres", 5432, "TCP")]);
    cs.write(
        "east",
        "shop.yaml",
        &[
            namespace("shop"),
            cluster_ip("shop", "web", &["10.96.0.10", "fd00:96::a"]).export(),
            cluster_ip("shop", "web", &["10.96.0.10", "fd00:96::a"]),
            db.export(),
            db,
            slice(
                "shop",
                "db-1",
                "db",
                &[ep("10.1.1.10").host("db-0"), ep("10.1.1.11")],
            ),
            big.export(),
            big,
            slice("shop", "big-1", "big", &endpoints),
        ],
    );
    cs
}

/// A random query: a header with mostly sensible flags and counts, one
/// question (sometimes more or none) whose name may end in a compression
/// pointer, maybe an OPT record with random options, then maybe mutated.
fn structured(rng: &mut fastrand::Rng) -> Vec<u8> {
    let mut packet = Vec::with_capacity(128);
    packet.extend_from_slice(&rng.u16(..).to_be_bytes());
    let qr_opcode = match rng.u8(..20) {
        0 => 0x80,
        1 => rng.u8(..),
        _ => 0,
    };
    packet.push(qr_opcode | rng.u8(..2));
    packet.push(rng.u8(..) & 0x70);
    let questions: u16 = match rng.u8(..20) {
        0 => 0,
        1 => 2,
        _ => 1,
    };
    let edns = rng.u8(..3) != 0;
    let extra = u16::from(rng.u8(..20) == 0);
    packet.extend_from_slice(&questions.to_be_bytes());
    packet.extend_from_slice(&extra.to_be_bytes());
    packet.extend_from_slice(&0u16.to_be_bytes());
    packet.extend_from_slice(&u16::from(edns).to_be_bytes());
    for _ in 0..questions.max(1) {
        name(rng, &mut packet);
        packet.extend_from_slice(&TYPES[rng.usize(..TYPES.len())].to_be_bytes());
        let class: u16 = match rng.u8(..10) {
            0 => 3,
            1 => 255,
            2 => rng.u16(..),
            _ => 1,
        };
        packet.extend_from_slice(&class.to_be_bytes());
    }
    if extra == 1 {
        packet.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 5, 0, 4, 10, 0, 0, 1]);
    }
    if edns {
        opt(rng, &mut packet);
    }
    mutate(rng, &mut packet);
    packet
}

/// A name of random labels in random case, usually ending in the zone,
/// sometimes in a compression pointer.
fn name(rng: &mut fastrand::Rng, packet: &mut Vec<u8>) {
    for _ in 0..rng.usize(..5) {
        let label = match rng.u8(..8) {
            0 => (0..rng.usize(1..64))
                .map(|_| rng.alphanumeric() as u8)
                .collect(),
            _ => LABELS[rng.usize(..LABELS.len())].to_vec(),
        };
        packet.push(u8::try_from(label.len()).unwrap());
        packet.extend(label.iter().map(|b| {
            if rng.bool() {
                b.to_ascii_uppercase()
            } else {
                *b
            }
        }));
    }
    if rng.u8(..10) == 0 {
        packet.push(0xc0 | rng.u8(..0x40));
        packet.push(rng.u8(..));
    } else if rng.u8(..4) != 0 {
        packet.extend_from_slice(b"\x03svc\x0aclusterset\x05local\x00");
    } else {
        packet.push(0);
    }
}

/// An OPT record: random payload size, version, DO bit and options, some cut.
fn opt(rng: &mut fastrand::Rng, packet: &mut Vec<u8>) {
    let mut options = Vec::new();
    for _ in 0..rng.usize(..3) {
        let code: u16 = if rng.bool() { 10 } else { rng.u16(..) };
        let data: Vec<u8> = (0..rng.usize(..40)).map(|_| rng.u8(..)).collect();
        options.extend_from_slice(&code.to_be_bytes());
        options.extend_from_slice(&u16::try_from(data.len()).unwrap().to_be_bytes());
        options.extend_from_slice(&data);
    }
    if rng.u8(..5) == 0 {
        options.truncate(rng.usize(..=options.len()));
    }
    packet.push(0);
    packet.extend_from_slice(&41u16.to_be_bytes());
    let payload: u16 = match rng.u8(..4) {
        0 => rng.u16(..),
        1 => 512,
        2 => 1232,
        _ => 4096,
    };
    packet.extend_from_slice(&payload.to_be_bytes());
    packet.push(0);
    packet.push(if rng.u8(..10) == 0 { rng.u8(..) } else { 0 });
    packet.push(if rng.bool() { 0x80 } else { 0 });
    packet.push(0);
    packet.extend_from_slice(&u16::try_from(options.len()).unwrap().to_be_bytes());
    packet.extend_from_slice(&options);
}

/// Flips, cuts or extends a few bytes, one case in four.
fn mutate(rng: &mut fastrand::Rng, packet: &mut Vec<u8>) {
    match rng.u8(..12) {
        0 => {
            for _ in 0..rng.usize(1..4) {
                let at = rng.usize(..packet.len());
                packet[at] = rng.u8(..);
            }
        }
        1 => packet.truncate(rng.usize(..=packet.len())),
        2 => packet.extend((0..rng.usize(1..20)).map(|_| rng.u8(..))),
        _ => {}
    }
}

/// Random bytes, sometimes behind a plausible header.
fn noise(rng: &mut fastrand::Rng) -> Vec<u8> {
    let mut packet: Vec<u8> = (0..rng.usize(..600)).map(|_| rng.u8(..)).collect();
    if packet.len() >= 12 && rng.bool() {
        packet[2] &= 0x7f;
        packet[4..6].copy_from_slice(&[0, 1]);
    }
    packet
}

/// What a reply to `packet` is checked against.
struct Expected {
    id: u16,
    opcode_flags: u8,
    /// The question's bytes when it has no pointer.
    question: Option<Vec<u8>>,
    /// The UDP size the client accepts.
    limit: usize,
    /// Whether the query had an OPT record hickory could read.
    edns: bool,
}

impl Expected {
    /// None when no reply is due: not even a header, or not a query (QR=1).
    fn of(packet: &[u8]) -> Option<Self> {
        let header = Header::read(&mut BinDecoder::new(packet)).ok()?;
        if header.metadata.message_type != MessageType::Query {
            return None;
        }
        let parsed = Message::from_vec(packet).ok();
        let edns = parsed.as_ref().and_then(|m| m.edns.as_ref());
        let limit = edns.map_or(512, |e| e.max_payload().clamp(512, MAX_UDP_PAYLOAD));
        let question = plain_question(packet).map(|end| packet[12..end].to_vec());
        Some(Self {
            id: header.metadata.id,
            opcode_flags: packet[2] & 0x79,
            question,
            limit: usize::from(limit),
            edns: edns.is_some(),
        })
    }

    /// Asserts every invariant of `reply`; `case` names the case.
    fn check(&self, reply: &[u8], case: &str) {
        assert!(
            reply.len() <= self.limit,
            "{case}: {} bytes over {}",
            reply.len(),
            self.limit
        );
        let response = std::panic::catch_unwind(|| strict(reply))
            .unwrap_or_else(|_| panic!("{case}: the reply does not parse strictly"));
        let meta = &response.metadata;
        assert_eq!(meta.message_type, MessageType::Response, "{case}: QR");
        assert_eq!(meta.id, self.id, "{case}: ID");
        // Opcode and RD as asked.
        assert_eq!(reply[2] & 0x79, self.opcode_flags, "{case}: opcode, RD");
        let formerr = meta.response_code == hickory_proto::op::ResponseCode::FormErr;
        match (&self.question, response.queries.len()) {
            (None, 0) => {}
            (Some(_), 0) => assert!(formerr, "{case}: no question echoed in a {meta:?}"),
            (Some(asked), 1) => {
                assert_eq!(reply[12..12 + asked.len()], asked[..], "{case}: question")
            }
            (asked, n) => panic!("{case}: {n} questions echoed for {asked:?}"),
        }
        if !formerr || reply.len() > 12 {
            assert_eq!(response.edns.is_some(), self.edns, "{case}: OPT iff asked");
        }
    }
}

/// The end of a single question without compression pointers, if the packet has one.
fn plain_question(packet: &[u8]) -> Option<usize> {
    if packet.get(4..6)? != [0, 1] {
        return None;
    }
    let mut at = 12;
    loop {
        let len = usize::from(*packet.get(at)?);
        if len & 0xc0 != 0 {
            return None;
        }
        at += 1 + len;
        if len == 0 {
            break;
        }
    }
    (at + 4 <= packet.len()).then_some(at + 4)
}

/// The reply built without the cache (as the slow path does).
fn uncached(index: &Index, packet: &[u8], peer: SocketAddr) -> Option<Vec<u8>> {
    match handle(index, packet, peer, Protocol::Udp) {
        Handled::Answered(request, response) => Some(
            response
                .encode(&request.queries, true, response.udp_limit())
                .expect("encodes"),
        ),
        Handled::Malformed(bytes, _) => Some(bytes),
        Handled::Ignored => None,
    }
}

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Issue 14: replies to random and mutated queries are well-formed (RFC 1035
/// §4.1), match the query (ID, opcode, question), fit the client's size
/// (RFC 1035 §4.2.1, RFC 6891 §6.2.5), carry an OPT exactly when asked
/// (RFC 6891 §7), and the cached reply is the uncached one byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_queries_get_well_formed_replies() {
    let cs = shop();
    let server = start(cs.dir(), &[]).await;
    let index = server.running().index.clone();
    let seed = setting("FUZZ_SEED", 0x1a2b_3c4d);
    let cases = usize::try_from(setting("FUZZ_CASES", CASES as u64)).unwrap();
    let mut rng = fastrand::Rng::with_seed(seed);
    let peer: SocketAddr = "127.0.0.1:53000".parse().unwrap();
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(std::time::Duration::from_millis(500)))
        .unwrap();
    let mut answered = 0;
    for n in 0..cases {
        let packet = if rng.u8(..4) == 0 {
            noise(&mut rng)
        } else {
            structured(&mut rng)
        };
        let case = format!("case {n} (seed {seed:#x}): {packet:02x?}");
        let expected = Expected::of(&packet);
        let mut first = Vec::new();
        let outcome = respond_udp(&index, &packet, peer, &mut first);
        let Some(expected) = expected else {
            assert!(
                outcome.is_none(),
                "{case}: answered a packet that is not a query"
            );
            continue;
        };
        assert!(
            outcome.is_some(),
            "{case}: a query with a header got no reply"
        );
        answered += 1;
        expected.check(&first, &case);
        let mut again = Vec::new();
        respond_udp(&index, &packet, peer, &mut again);
        assert_eq!(again, first, "{case}: asked again (cached)");
        let fresh = uncached(&index, &packet, peer);
        assert_eq!(
            fresh.as_ref(),
            Some(&first),
            "{case}: cached and uncached differ"
        );
        if n < OVER_SOCKET {
            socket.send_to(&packet, server.addr).unwrap();
            let mut buffer = [0u8; 65535];
            let len = socket
                .recv(&mut buffer)
                .unwrap_or_else(|e| panic!("{case}: {e}"));
            assert_eq!(buffer[..len], first[..], "{case}: over a real socket");
        }
    }
    assert!(
        answered > cases / 2,
        "only {answered} of {cases} cases were queries"
    );
}
