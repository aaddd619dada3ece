//! Zone transfers (RFC 5936 AXFR, RFC 1995 IXFR), NOTIFY (RFC 1996) to a
//! real secondary (Knot DNS), and reverse zones (PTR, `dig -x`), against an
//! in-process server over real TCP and UDP.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::process::Command;
use std::time::{Duration, Instant};

use clusterset_dns::index::serial;
use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::Name;
use hickory_proto::rr::RecordType::{self, A, AAAA, NS, PTR, SOA, SRV, TXT};

use crate::common::*;

/// East exports `web` (ports http/TCP, dns/UDP), `db` (headless) and `api6`
/// (IPv6 only); west exports `web` and `db` too.
fn shop() -> Clusterset {
    let cs = Clusterset::new();
    let web = |ip: &str| {
        cluster_ip("shop", "web", &[ip]).ports(&[("http", 80, "TCP"), ("dns", 53, "UDP")])
    };
    let db = || headless("shop", "db", &["IPv4"]).ports(&[("postgres", 5432, "TCP")]);
    let api6 = cluster_ip("shop", "api6", &["fd00:96::6"]);
    cs.write(
        "east",
        "shop.yaml",
        &[
            namespace("shop"),
            web("10.96.0.10"),
            export("shop", "web").created("2026-01-01T00:00:00Z"),
            db(),
            db().export().created("2026-01-01T00:00:00Z"),
            slice(
                "shop",
                "db-e",
                "db",
                &[ep("10.1.0.1").host("db-0"), ep("10.1.0.2")],
            ),
            api6.export(),
            api6,
        ],
    );
    cs.write(
        "west",
        "shop.yaml",
        &[
            web("10.97.0.10"),
            export("shop", "web").created("2026-01-02T00:00:00Z"),
            db(),
            db().export().created("2026-01-02T00:00:00Z"),
            slice("shop", "db-w", "db", &[ep("10.2.0.1").host("db-0")]),
        ],
    );
    cs
}

/// Reverse zones of the VIP pools and of the endpoint network.
const SERVE: [&str; 4] = [
    "--cluster-targeting",
    "--reverse-vip-pools",
    "--reverse-zone",
    "10.in-addr.arpa",
];
const ZONE: &str = "clusterset.local.";
const V4_REVERSE: &str = "243.in-addr.arpa.";
const V6_REVERSE: &str = "0.0.0.0.7.e.5.c.0.0.d.f.ip6.arpa.";
const ENDPOINT_REVERSE: &str = "10.in-addr.arpa.";

/// One question of every kind of name the zone answers, NODATA and NXDOMAIN.
fn sample() -> Vec<(String, RecordType)> {
    let mut questions = vec![
        (ZONE.to_owned(), SOA),
        (ZONE.to_owned(), NS),
        (format!("dns-version.{ZONE}"), TXT),
        (format!("shop.svc.{ZONE}"), A),
        (svc("missing.shop"), A),
    ];
    for (name, rtype) in [
        ("web.shop", A),
        ("web.shop", AAAA),
        ("web.shop", SRV),
        ("_http._tcp.web.shop", SRV),
        ("_dns._udp.web.shop", SRV),
        ("east.web.shop", A),
        ("db.shop", A),
        ("db.shop", SRV),
        ("_postgres._tcp.db.shop", SRV),
        ("db-0.east.db.shop", A),
        ("10-1-0-2.east.db.shop", A),
        ("db-0.west.db.shop", A),
        ("api6.shop", AAAA),
    ] {
        questions.push((svc(name), rtype));
    }
    questions
}

/// PTR questions for the VIPs of `web` and `api6` and two endpoints.
async fn reverse_sample(addr: SocketAddr) -> Vec<(String, RecordType)> {
    let web = only(resolve(addr, &svc("web.shop"), A).await);
    let api6 = only(resolve(addr, &svc("api6.shop"), AAAA).await);
    [
        web,
        api6,
        "10.1.0.1".parse().unwrap(),
        "10.1.0.2".parse().unwrap(),
    ]
    .into_iter()
    .map(|ip| (Name::from(ip).to_string(), PTR))
    .collect()
}

fn only(outcome: Outcome) -> IpAddr {
    let ips = addresses(outcome);
    assert_eq!(ips.len(), 1, "one address expected: {ips:?}");
    ips.into_iter().next().expect("one")
}

/// The response code, answers and authority SOAs of a response, as text.
fn shown(response: &Message) -> (ResponseCode, BTreeSet<String>) {
    let soas = response
        .authorities
        .iter()
        .filter(|r| r.record_type() == SOA);
    let records = response
        .answers
        .iter()
        .chain(soas)
        .map(|r| r.to_string().to_lowercase());
    (response.metadata.response_code, records.collect())
}

/// The records of a transfer grouped by (owner, type), as text.
fn rrsets(
    records: &[hickory_proto::rr::Record],
) -> BTreeMap<(String, RecordType), BTreeSet<String>> {
    let mut sets: BTreeMap<_, BTreeSet<String>> = BTreeMap::new();
    for record in records {
        let key = (record.name.to_string().to_lowercase(), record.record_type());
        sets.entry(key)
            .or_default()
            .insert(record.to_string().to_lowercase());
    }
    sets
}

/// RFC 5936 §2.2: the SOA first and last, every other record once in between.
fn checked_axfr(transfer: &Transfer, zone: &str) -> Vec<hickory_proto::rr::Record> {
    assert_eq!(transfer.code(), ResponseCode::NoError);
    assert!(
        transfer.messages.iter().all(|m| m.metadata.authoritative),
        "AA set"
    );
    assert_eq!(
        transfer.messages[0].queries.len(),
        1,
        "the question in the first message"
    );
    let records = transfer.records();
    let (first, last) = (&records[0], &records[records.len() - 1]);
    assert_eq!(first.record_type(), SOA);
    assert_eq!(first, last, "the same SOA opens and closes {zone}");
    assert_eq!(first.name.to_string(), zone);
    let inner = &records[1..records.len() - 1];
    assert!(
        inner.iter().all(|r| r.record_type() != SOA),
        "no SOA in between"
    );
    let unique: BTreeSet<String> = inner.iter().map(|r| r.to_string()).collect();
    assert_eq!(unique.len(), inner.len(), "every record once");
    records
}

/// RFC 5936 §2.2 (SOA first and last) and "the zone as it is answered": every
/// record set of the transfer is exactly what a query for it gets, and every
/// positive answer of the sample is in the transfer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn axfr_holds_exactly_what_queries_answer() {
    let cs = shop();
    let server = start(cs.dir(), &SERVE).await;
    let mut transferred = BTreeMap::new();
    let mut soa_serials = BTreeSet::new();
    for zone in [ZONE, V4_REVERSE, V6_REVERSE, ENDPOINT_REVERSE] {
        let records = checked_axfr(&transfer(server.addr, zone, None).await, zone);
        soa_serials.insert(serial_of(&records[0]));
        transferred.extend(rrsets(&records[1..records.len() - 1]));
    }
    assert_eq!(soa_serials.len(), 1, "one serial for every zone");
    for ((name, rtype), records) in &transferred {
        let (code, answered) = shown(&query_tcp(server.addr, name, *rtype).await);
        assert_eq!(code, ResponseCode::NoError, "{name} {rtype}");
        assert_eq!(
            &answered, records,
            "{name} {rtype}: a query answers what the transfer holds"
        );
    }
    let questions = sample()
        .into_iter()
        .chain(reverse_sample(server.addr).await);
    let mut kinds = 0;
    for (name, rtype) in questions {
        let response = query_tcp(server.addr, &name, rtype).await;
        if response.answers.is_empty() || rtype == SOA {
            continue;
        }
        kinds += 1;
        let key = (name.to_lowercase(), rtype);
        assert_eq!(
            transferred.get(&key),
            Some(&shown(&response).1),
            "{name} {rtype} transferred"
        );
    }
    assert_eq!(kinds, 18, "every positive sample question was checked");
    assert_eq!(
        scrape(
            server.running().metrics_addr,
            "clusterset_dns_zone_transfers_total{result=\"full\",type=\"AXFR\"}"
        )
        .await,
        4.0
    );
}

/// RFC 1995 §2 and §4: a client at the current serial (or "newer", RFC 1982)
/// gets the SOA alone; an older one the whole zone in AXFR form.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ixfr_answers_the_soa_when_current_else_the_whole_zone() {
    let cs = shop();
    let server = start(cs.dir(), &SERVE).await;
    let axfr = checked_axfr(&transfer(server.addr, ZONE, None).await, ZONE);
    let serial = serial_of(&axfr[0]);
    for client in [serial, serial.wrapping_add(3)] {
        let ixfr = transfer(server.addr, ZONE, Some(client)).await;
        assert_eq!(ixfr.code(), ResponseCode::NoError);
        let records = ixfr.records();
        assert_eq!(
            records.len(),
            1,
            "the SOA alone for serial {client}: {records:?}"
        );
        assert_eq!(serial_of(&records[0]), serial);
    }
    let stale = transfer(server.addr, ZONE, Some(serial.wrapping_sub(1))).await;
    assert_eq!(
        checked_axfr(&stale, ZONE),
        axfr,
        "AXFR form for a stale serial"
    );
    let wrapped = transfer(
        server.addr,
        ZONE,
        Some(serial.wrapping_add(1 << 31).wrapping_add(1)),
    )
    .await;
    assert_eq!(
        checked_axfr(&wrapped, ZONE),
        axfr,
        "RFC 1982: 2^31+1 ahead is behind"
    );
}

/// Transfers only from `--transfer-allow`; REFUSED and counted otherwise.
/// RFC 5936 §2.2.1: a transfer of a name that is no zone apex is NOTAUTH.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfers_are_refused_outside_the_allowed_networks() {
    let cs = shop();
    let server = start(cs.dir(), &["--transfer-allow", "10.0.0.0/8"]).await;
    let metrics = server.running().metrics_addr;
    for ixfr in [None, Some(1)] {
        let refused = transfer(server.addr, ZONE, ixfr).await;
        assert_eq!(refused.code(), ResponseCode::Refused);
        assert!(refused.records().is_empty());
    }
    let series = "clusterset_dns_zone_transfers_total{result=\"refused\",type=\"AXFR\"}";
    assert_eq!(scrape(metrics, series).await, 1.0);
    let series = "clusterset_dns_zone_transfers_total{result=\"refused\",type=\"IXFR\"}";
    assert_eq!(scrape(metrics, series).await, 1.0);
    let (_, ordinary) = resolve_both(server.addr, &svc("web.shop")).await;
    assert_eq!(ordinary, Outcome::NoData, "queries are not affected");

    let open = start(cs.dir(), &[]).await;
    assert_eq!(
        transfer(open.addr, &svc("web.shop"), None).await.code(),
        ResponseCode::NotAuth
    );
    assert_eq!(
        transfer(open.addr, "example.org.", None).await.code(),
        ResponseCode::NotAuth
    );
    assert_eq!(
        transfer(open.addr, ZONE, None).await.code(),
        ResponseCode::NoError,
        "loopback by default"
    );
}

/// `dig` (Debian `bind9-dnsutils`) against `addr`: its output with comments,
/// answer and authority sections.
fn dig(addr: SocketAddr, args: &[&str]) -> String {
    let output = Command::new("dig")
        .args([
            "+norec",
            "+time=2",
            "+tries=2",
            "+noall",
            "+comments",
            "+answer",
            "+authority",
        ])
        .arg(format!("@{}", addr.ip()))
        .args(["-p", &addr.port().to_string()])
        .args(args)
        .output()
        .expect("dig runs (Debian package bind9-dnsutils)");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The status and the (type, data) of the answer and authority records of `dig` output.
fn dug(output: &str) -> (String, BTreeSet<(String, String)>) {
    let status = output
        .split("status: ")
        .nth(1)
        .and_then(|s| s.split(',').next())
        .unwrap_or_else(|| panic!("no status in {output}"))
        .to_owned();
    let records = output
        .lines()
        .filter(|l| !l.starts_with(';') && !l.trim().is_empty())
        .filter_map(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            Some((fields.get(3)?.to_string(), fields.get(4..)?.join(" ")))
        })
        .collect();
    (status, records)
}

fn record(rtype: &str, data: &str) -> (String, String) {
    (rtype.to_owned(), data.to_owned())
}

/// RFC 1035 §3.5 and RFC 3596 §2.5: `dig -x` of a VIP names its service, of
/// a headless endpoint its per-pod name; unknown addresses in a served
/// reverse zone are NXDOMAIN with that zone's SOA, names above addresses
/// NODATA, addresses outside every reverse zone REFUSED. A service that goes
/// away takes its PTR with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dig_x_names_vips_and_pods() {
    let cs = shop();
    let server = start(cs.dir(), &SERVE).await;
    let addr = server.addr;
    let web = only(resolve(addr, &svc("web.shop"), A).await);
    let api6 = only(resolve(addr, &svc("api6.shop"), AAAA).await);
    let ptr = |ip: &str| dug(&dig(addr, &["-x", ip]));
    let named = |target: &str| {
        (
            "NOERROR".to_owned(),
            BTreeSet::from([record("PTR", target)]),
        )
    };
    assert_eq!(
        ptr(&web.to_string()),
        named("web.shop.svc.clusterset.local.")
    );
    assert_eq!(
        ptr(&api6.to_string()),
        named("api6.shop.svc.clusterset.local.")
    );
    assert_eq!(
        ptr("10.1.0.1"),
        named("db-0.east.db.shop.svc.clusterset.local.")
    );
    assert_eq!(
        ptr("10.1.0.2"),
        named("10-1-0-2.east.db.shop.svc.clusterset.local.")
    );
    assert_eq!(
        ptr("10.2.0.1"),
        named("db-0.west.db.shop.svc.clusterset.local.")
    );

    let unknown = if web.to_string() == "243.255.255.254" {
        "243.255.255.253"
    } else {
        "243.255.255.254"
    };
    let (status, records) = ptr(unknown);
    assert_eq!(status, "NXDOMAIN");
    let soa: Vec<_> = records.iter().filter(|(t, _)| t == "SOA").collect();
    assert_eq!(soa.len(), 1, "the reverse zone's SOA: {records:?}");
    assert!(
        dig(addr, &["-x", unknown])
            .contains("243.in-addr.arpa.\t5\tIN\tSOA\tns.dns.clusterset.local.")
    );

    let (status, records) = ptr("192.0.2.1");
    assert_eq!(
        (status.as_str(), records.len()),
        ("REFUSED", 0),
        "outside every reverse zone"
    );

    // 1.10.in-addr.arpa is above 10.1.0.1: an empty non-terminal.
    let ent = dig(addr, &["1.10.in-addr.arpa", "PTR"]);
    let (status, records) = dug(&ent);
    assert_eq!(status, "NOERROR");
    assert!(
        records.iter().all(|(t, _)| t == "SOA") && records.len() == 1,
        "NODATA: {ent}"
    );
    assert!(ent.contains("10.in-addr.arpa.\t5\tIN\tSOA"), "{ent}");
    let (status, _) = dug(&dig(addr, &["3.10.in-addr.arpa", "PTR"]));
    assert_eq!(status, "NXDOMAIN", "no address below");
    let (status, records) = dug(&dig(addr, &["243.in-addr.arpa", "NS"]));
    assert_eq!(
        (status.as_str(), records),
        (
            "NOERROR",
            BTreeSet::from([record("NS", "ns.dns.clusterset.local.")])
        )
    );

    // The reverse map follows the index service by service.
    cs.write("east", "shop.yaml", &[namespace("shop")]);
    cs.remove("west", "shop.yaml");
    eventually("web's PTR is gone", "NXDOMAIN".to_owned(), || async {
        ptr(&web.to_string()).0
    })
    .await;
    assert_eq!(ptr("10.1.0.1").0, "NXDOMAIN");
}

/// RFC 1996 and RFC 5936 with a real secondary: Knot transfers every zone,
/// then answers the sample exactly as the primary does; after an edit of
/// the manifest directory, NOTIFY brings the new data to Knot (the latency
/// is printed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn knot_secondary_mirrors_the_zones_and_follows_notify() {
    let cs = shop();
    let knot_addr = Knot::reserve();
    let notify = knot_addr.to_string();
    let mut args = SERVE.to_vec();
    args.extend(["--notify", &notify]);
    let server = start(cs.dir(), &args).await;
    let knot = Knot::start(
        knot_addr,
        server.addr,
        &[ZONE, V4_REVERSE, V6_REVERSE, ENDPOINT_REVERSE],
    )
    .await;
    let serial = serial_of(&query(server.addr, ZONE, SOA).await.answers[0]);
    for zone in [ZONE, V4_REVERSE, V6_REVERSE, ENDPOINT_REVERSE] {
        knot.wait_serial(zone, serial, Duration::from_secs(10))
            .await;
    }
    let questions: Vec<_> = sample()
        .into_iter()
        .chain(reverse_sample(server.addr).await)
        .collect();
    for (name, rtype) in &questions {
        let primary = shown(&query(server.addr, name, *rtype).await);
        let secondary = shown(&query(knot.addr, name, *rtype).await);
        assert_eq!(
            secondary, primary,
            "{name} {rtype}: the secondary answers as the primary"
        );
    }

    let (on_primary, on_secondary) = knot.follows_an_edit(&cs, server.addr).await;
    println!(
        "edit -> primary answers: {on_primary:?}; edit -> Knot secondary answers (NOTIFY, IXFR): {on_secondary:?}"
    );
    let metrics = server.running().metrics_addr;
    assert!(
        scrape(
            metrics,
            "clusterset_dns_notifies_total{result=\"acknowledged\"}"
        )
        .await
            >= 4.0
    );
    assert!(
        scrape(
            metrics,
            "clusterset_dns_zone_transfers_total{result=\"full\",type=\"IXFR\"}"
        )
        .await
            >= 1.0
    );
}

/// East exports 1000 services: a zone larger than one 64 KiB message.
pub(crate) fn large_zone() -> Clusterset {
    let cs = Clusterset::new();
    let services: Vec<Doc> = (0..1000)
        .flat_map(|i| {
            let ip = format!("10.96.{}.{}", i / 250, i % 250 + 1);
            cluster_ip("shop", &format!("service-{i}"), &[&ip]).exported()
        })
        .collect();
    cs.write("east", "many.yaml", &services);
    cs
}

/// RFC 5936 §2.2: a zone larger than one 64 KiB message comes in several,
/// which `dig` (a real client) reads as one transfer of every record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_zone_spans_several_messages() {
    let cs = large_zone();
    let server = start(cs.dir(), &[]).await;
    let ours = transfer(server.addr, ZONE, None).await;
    let records = checked_axfr(&ours, ZONE);
    assert!(ours.messages.len() > 1, "{} messages", ours.messages.len());
    // A, bare SRV and _http._tcp SRV per service; apex NS, the NS target's A
    // (the listen address), dns-version TXT, two SOAs.
    assert_eq!(records.len(), 3 * 1000 + 5);
    let output = Command::new("dig")
        .args(["+tcp", "+time=5", "+tries=1", "AXFR", ZONE])
        .arg(format!("@{}", server.addr.ip()))
        .args(["-p", &server.addr.port().to_string()])
        .output()
        .expect("dig runs");
    let output = String::from_utf8_lossy(&output.stdout);
    let size = format!(
        "XFR size: {} records (messages {},",
        records.len(),
        ours.messages.len()
    );
    assert!(
        output.contains(&size),
        "{size} in {}",
        output.lines().last().unwrap_or_default()
    );
}

/// RFC 1996 §3.6 and §4.7: a NOTIFY is resent until a response with its
/// id, opcode and zone comes (with a new id each time; the backoff's timing
/// is not asserted, a busy machine stretches it); garbage and unmatched
/// responses are ignored (and counted); once acknowledged, nothing more is
/// sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notify_is_retried_until_a_matching_response() {
    let secondary = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let cs = shop();
    let target = secondary.local_addr().unwrap().to_string();
    let server = start(cs.dir(), &["--notify", &target]).await;
    let receive = async || {
        let mut buffer = [0u8; 4096];
        let (len, from) =
            tokio::time::timeout(Duration::from_secs(30), secondary.recv_from(&mut buffer))
                .await
                .expect("a NOTIFY within 30 s")
                .unwrap();
        (
            Message::from_vec(&buffer[..len]).expect("a NOTIFY decodes"),
            from,
        )
    };
    let (first, _) = receive().await;
    assert_eq!(first.metadata.op_code, hickory_proto::op::OpCode::Notify);
    assert!(first.metadata.authoritative, "AA set (RFC 1996 §3.7)");
    assert_eq!(first.queries[0].name().to_string(), ZONE);
    assert_eq!(first.queries[0].query_type(), SOA);
    let primary_serial = serial_of(&query(server.addr, ZONE, SOA).await.answers[0]);
    assert_eq!(
        serial_of(&first.answers[0]),
        primary_serial,
        "the current SOA in the answer"
    );

    // Unanswered: resent, with a new id.
    let (second, from) = receive().await;
    assert_eq!(second.metadata.op_code, hickory_proto::op::OpCode::Notify);
    assert_ne!(second.metadata.id, first.metadata.id);
    let reply = |of: &Message| {
        let mut reply = of.clone();
        reply.metadata.message_type = hickory_proto::op::MessageType::Response;
        reply.to_vec().unwrap()
    };
    let metrics = server.running().metrics_addr;
    let series = |result: &str| format!("clusterset_dns_notifies_total{{result=\"{result}\"}}");
    secondary.send_to(&[0xde, 0xad, 0xbe], from).await.unwrap();
    secondary.send_to(&reply(&first), from).await.unwrap();
    // Answer the latest NOTIFY until one answer matches: on a busy machine
    // another resend may have gone out before this answer arrives.
    let mut latest = second;
    let mut stale = 0.0;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        secondary.send_to(&reply(&latest), from).await.unwrap();
        let acknowledged = tokio::time::timeout(Duration::from_secs(3), async {
            while scrape(metrics, &series("acknowledged")).await < 1.0 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        if acknowledged.is_ok() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no answer was taken as acknowledging"
        );
        latest = receive().await.0;
        stale += 1.0;
    }
    assert_eq!(scrape(metrics, &series("acknowledged")).await, 1.0);
    // The garbage and the answer to the first NOTIFY, and maybe answers
    // overtaken by a resend.
    let malformed = scrape(metrics, &series("malformed")).await;
    assert!((2.0..=2.0 + stale).contains(&malformed), "{malformed}");
    let sent = scrape(metrics, &series("sent")).await;
    assert!(sent >= 2.0, "{sent}");
    // Nothing more after the acknowledgement, however long one waits for a
    // retry that would be due (here 2.5 s, beyond the next one).
    let mut buffer = [0u8; 512];
    let late = tokio::time::timeout(
        Duration::from_millis(2500),
        secondary.recv_from(&mut buffer),
    )
    .await;
    assert_eq!(
        scrape(metrics, &series("sent")).await,
        sent,
        "no NOTIFY after the acknowledgement ({late:?})"
    );
}

/// Issue 23: a burst of changes runs the SOA serial ahead of the clock
/// (`max(clock, last + 1)`); a server restarted then, even without a clean
/// shutdown, must not start from the clock again, below what secondaries
/// hold (RFC 1982 order): the last serial is kept next to the VIP state file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_serial_does_not_go_back_across_a_restart_after_a_burst() {
    let cs = shop();
    let state = tempfile::tempdir().expect("a temporary directory");
    let state_file = state.path().join("vips.json").display().to_string();
    let flags = ["--state-file", state_file.as_str()];
    let first = start(cs.dir(), &flags).await;
    // As many commits in a row as a burst of a thousand changes makes.
    for _ in 0..1000 {
        first.running().index.commit();
    }
    let before = serial_of(&query(first.addr, ZONE, SOA).await.answers[0]);
    assert!(
        serial::greater(before, serial::now().wrapping_add(500)),
        "the burst ran the serial ahead of the clock: {before}"
    );
    drop(first); // aborted, as a crash would
    assert!(
        state.path().join("vips.serial").is_file(),
        "kept next to vips.json"
    );

    let second = start(cs.dir(), &flags).await;
    let after = serial_of(&query(second.addr, ZONE, SOA).await.answers[0]);
    assert!(
        serial::greater(after, before),
        "serial {before}, then {after} after a restart"
    );
    cs.write(
        "east",
        "cart.yaml",
        &cluster_ip("shop", "cart", &["10.96.0.40"]).exported(),
    );
    eventually("a change after the restart", true, || async {
        let now = serial_of(&query(second.addr, ZONE, SOA).await.answers[0]);
        serial::greater(now, after)
    })
    .await;
}
