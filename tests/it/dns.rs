//! docs/dns.md: the records, response codes and transport
//! rules, asked over real UDP and TCP of an in-process server.

use std::net::IpAddr;
use std::time::Duration;

use clusterset_dns::dns::answer;
use clusterset_dns::index::Index;
use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::RecordType::{A, AAAA, NS, SOA, SRV, TXT};
use hickory_proto::rr::{DNSClass, LowerName, Name, RData, RecordType};
use hickory_proto::serialize::binary::BinEncodable;

use crate::common::*;

/// East and west both export `web` (dual-stack) and `db` (headless); east
/// alone exports the rest.
fn shop() -> Clusterset {
    let cs = Clusterset::new();
    let web = |ips: &[&str]| {
        cluster_ip("shop", "web", ips).ports(&[("http", 80, "TCP"), ("h3", 80, "UDP")])
    };
    let db = || headless("shop", "db", &["IPv4"]).ports(&[("postgres", 5432, "TCP")]);
    let plain = cluster_ip("shop", "plain", &["10.96.0.30"]).ports(&[("", 8080, "TCP")]);
    let v4only = cluster_ip("shop", "v4only", &["10.96.0.20"]);
    let v6db = headless("shop", "v6db", &["IPv6"]);
    let idle = headless("shop", "idle", &["IPv4"]);
    cs.write(
        "east",
        "shop.yaml",
        &[
            namespace("shop"),
            web(&["10.96.0.10", "fd00:96::a"]),
            export("shop", "web").created("2026-01-01T00:00:00Z"),
            db(),
            db().export().created("2026-01-01T00:00:00Z"),
            slice(
                "shop",
                "db-e1",
                "db",
                &[
                    ep("10.1.1.10").host("db-0"),
                    ep("10.1.1.11").no_conditions(),
                    ep("10.1.1.12").host("db-2").not_ready(),
                ],
            ),
            v4only.export(),
            v4only,
            plain.export(),
            plain,
            v6db.export(),
            v6db,
            slice("shop", "v6db-e1", "v6db", &[ep("fd00::1")]),
            idle.export(),
            idle,
            slice("shop", "idle-e1", "idle", &[ep("10.1.9.9").not_ready()]),
        ],
    );
    cs.write(
        "west",
        "shop.yaml",
        &[
            web(&["10.97.0.10", "fd00:97::a"]),
            export("shop", "web").created("2026-01-02T00:00:00Z").beta(),
            db(),
            db().export().created("2026-01-02T00:00:00Z").beta(),
            slice("shop", "db-w1", "db", &[ep("10.2.1.10").host("db-0")]),
        ],
    );
    cs
}

async fn serve_shop(extra: &[&str]) -> (Clusterset, Server) {
    let cs = shop();
    let server = start(cs.dir(), extra).await;
    (cs, server)
}

/// The single address of a ClusterSetIP answer.
fn only(outcome: Outcome) -> IpAddr {
    let ips = addresses(outcome);
    assert_eq!(ips.len(), 1, "one VIP expected: {ips:?}");
    ips.into_iter().next().expect("one")
}

fn ttls(response: &Message) -> Vec<u32> {
    response
        .answers
        .iter()
        .chain(&response.authorities)
        .map(|r| r.ttl)
        .collect()
}

fn soa_of(record: &hickory_proto::rr::Record) -> &hickory_proto::rr::rdata::SOA {
    match &record.data {
        RData::SOA(soa) => soa,
        other => panic!("SOA expected, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apex_soa_ns_and_dns_version() {
    let (_cs, server) = serve_shop(&[]).await;
    let soa = query(server.addr, "clusterset.local.", SOA).await;
    assert_eq!(soa.metadata.response_code, ResponseCode::NoError);
    assert!(soa.metadata.authoritative);
    assert_eq!(soa.answers.len(), 1);
    let rdata = soa_of(&soa.answers[0]);
    assert_eq!(rdata.mname.to_ascii(), "ns.dns.clusterset.local.");
    assert_eq!(rdata.rname.to_ascii(), "hostmaster.clusterset.local.");
    assert_eq!((soa.answers[0].ttl, rdata.minimum), (5, 5));

    let ns = query(server.addr, "clusterset.local.", NS).await;
    let targets: Vec<String> = ns
        .answers
        .iter()
        .map(|r| match &r.data {
            RData::NS(ns) => ns.0.to_ascii(),
            other => panic!("NS expected, got {other:?}"),
        })
        .collect();
    assert_eq!(targets, ["ns.dns.clusterset.local."]);

    let txt = query(server.addr, "dns-version.clusterset.local.", TXT).await;
    assert_eq!(txt.answers.len(), 1, "{txt:?}");
    let RData::TXT(version) = &txt.answers[0].data else {
        panic!("TXT expected")
    };
    assert_eq!(
        version.txt_data.as_ref(),
        [b"1.0.0".to_vec().into_boxed_slice()]
    );
    assert_eq!(txt.answers[0].ttl, 28800);
    assert!(txt.metadata.authoritative);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_set_ip_answers_distinct_vips_from_the_pools() {
    let (_cs, server) = serve_shop(&[]).await;
    let (web_a, web_aaaa) = resolve_both(server.addr, &svc("web.shop")).await;
    let (web4, web6) = (only(web_a), only(web_aaaa));
    assert!(in_v4_pool(&web4), "{web4}");
    assert!(in_v6_pool(&web6), "{web6}");
    let v4only = only(resolve(server.addr, &svc("v4only.shop"), A).await);
    let plain = only(resolve(server.addr, &svc("plain.shop"), A).await);
    assert!(in_v4_pool(&v4only) && in_v4_pool(&plain));
    assert!(
        web4 != v4only && web4 != plain && v4only != plain,
        "{web4} {v4only} {plain}"
    );
    assert_eq!(
        resolve(server.addr, &svc("v4only.shop"), AAAA).await,
        Outcome::NoData
    );
    assert_eq!(ttls(&query(server.addr, &svc("web.shop"), A).await), [5]);
    // TCP gives the same answer.
    assert_eq!(
        outcome(&query_tcp(server.addr, &svc("web.shop"), A).await),
        Outcome::Ips([web4].into())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headless_answers_ready_endpoints_of_all_exporting_clusters() {
    let (_cs, server) = serve_shop(&[]).await;
    let db = svc("db.shop");
    // 10.1.1.12 is not ready; 10.1.1.11 has no conditions (ready).
    assert_eq!(
        resolve(server.addr, &db, A).await,
        ips(["10.1.1.10", "10.1.1.11", "10.2.1.10"])
    );
    assert_eq!(resolve(server.addr, &db, AAAA).await, Outcome::NoData);
    let v6db = svc("v6db.shop");
    assert_eq!(resolve(server.addr, &v6db, AAAA).await, ips(["fd00::1"]));
    assert_eq!(resolve(server.addr, &v6db, A).await, Outcome::NoData);
    // No ready endpoint at all: the name does not exist.
    assert_eq!(
        resolve(server.addr, &svc("idle.shop"), A).await,
        Outcome::NxDomain
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_pod_names_by_hostname_or_dashed_ip() {
    let (_cs, server) = serve_shop(&[]).await;
    let cases = [
        ("db-0.east.db.shop", A, ips(["10.1.1.10"])),
        ("db-0.west.db.shop", A, ips(["10.2.1.10"])),
        ("10-1-1-11.east.db.shop", A, ips(["10.1.1.11"])),
        ("fd00--1.east.v6db.shop", AAAA, ips(["fd00::1"])),
        ("db-0.east.db.shop", AAAA, Outcome::NoData),
        ("db-2.east.db.shop", A, Outcome::NxDomain),
        ("db-9.east.db.shop", A, Outcome::NxDomain),
        ("db-0.north.db.shop", A, Outcome::NxDomain),
        ("10-1-1-11.west.db.shop", A, Outcome::NxDomain),
    ];
    for (name, rtype, expected) in cases {
        assert_eq!(
            resolve(server.addr, &svc(name), rtype).await,
            expected,
            "{name} {rtype}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn srv_records_per_port_and_on_the_service_name() {
    let (_cs, server) = serve_shop(&[]).await;
    let web = svc("web.shop");
    let to_web = pairs([(web.as_str(), 80)]);
    assert_eq!(
        srv(server.addr, &svc("_http._tcp.web.shop")).await,
        (to_web.clone(), 1)
    );
    assert_eq!(
        srv(server.addr, &svc("_h3._udp.web.shop")).await,
        (to_web.clone(), 1)
    );
    // http/TCP and h3/UDP are both (web, 80): collapsed into one record.
    assert_eq!(srv(server.addr, &web).await, (to_web, 1));

    let pods = pairs([
        (&*svc("db-0.east.db.shop"), 5432),
        (&*svc("10-1-1-11.east.db.shop"), 5432),
        (&*svc("db-0.west.db.shop"), 5432),
    ]);
    assert_eq!(
        srv(server.addr, &svc("_postgres._tcp.db.shop")).await,
        (pods.clone(), 3)
    );
    assert_eq!(srv(server.addr, &svc("db.shop")).await, (pods, 3));

    // An unnamed port has no SRV record.
    assert_eq!(
        resolve(server.addr, &svc("plain.shop"), SRV).await,
        Outcome::NoData
    );
    assert_eq!(
        resolve(server.addr, &svc("_8080._tcp.plain.shop"), SRV).await,
        Outcome::NxDomain
    );
    assert_eq!(
        resolve(server.addr, &svc("_http._udp.web.shop"), SRV).await,
        Outcome::NxDomain
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn negative_answers_nxdomain_nodata_refused() {
    let (_cs, server) = serve_shop(&[]).await;
    let cases = [
        (svc("nope.shop"), A, Outcome::NxDomain),
        (svc("web.nope"), A, Outcome::NxDomain),
        (svc("web.shop"), TXT, Outcome::NoData),
        ("svc.clusterset.local.".to_owned(), A, Outcome::NoData),
        (svc("shop"), A, Outcome::NoData),
        (svc("_tcp.web.shop"), SRV, Outcome::NoData),
        ("nope.clusterset.local.".to_owned(), A, Outcome::NxDomain),
        (
            "example.com.".to_owned(),
            A,
            Outcome::Code(ResponseCode::Refused),
        ),
        (
            "local.".to_owned(),
            SOA,
            Outcome::Code(ResponseCode::Refused),
        ),
    ];
    for (name, rtype, expected) in cases {
        assert_eq!(
            resolve(server.addr, &name, rtype).await,
            expected,
            "{name} {rtype}"
        );
    }
    let refused = query(server.addr, "example.com.", A).await;
    assert!(
        refused.answers.is_empty() && refused.authorities.is_empty(),
        "{refused:?}"
    );
    assert!(
        !refused.metadata.authoritative,
        "not authoritative outside the zone"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dual_stack_headless_with_a_two_label_cluster_id() {
    let cs = Clusterset::new();
    let pods = headless("shop", "pods", &["IPv4", "IPv6"]);
    let v4 = [ep("10.5.0.1").host("p-0"), ep("10.5.0.2")];
    let v6 = [ep("fd00:5::1").host("p-0"), ep("fd00:5::2")];
    let docs = [
        pods.export(),
        pods,
        slice("shop", "pods-v4", "pods", &v4),
        slice("shop", "pods-v6", "pods", &v6),
    ];
    cs.write("north.eu", "pods.yaml", &docs);
    let server = start(cs.dir(), &[]).await;
    let cases = [
        (
            "pods.shop",
            ips(["10.5.0.1", "10.5.0.2"]),
            ips(["fd00:5::1", "fd00:5::2"]),
        ),
        (
            "p-0.north.eu.pods.shop",
            ips(["10.5.0.1"]),
            ips(["fd00:5::1"]),
        ),
        (
            "10-5-0-2.north.eu.pods.shop",
            ips(["10.5.0.2"]),
            Outcome::NoData,
        ),
        (
            "fd00-5--2.north.eu.pods.shop",
            Outcome::NoData,
            ips(["fd00:5::2"]),
        ),
    ];
    for (name, a, aaaa) in cases {
        assert_eq!(
            resolve_both(server.addr, &svc(name)).await,
            (a, aaaa),
            "{name}"
        );
    }
    // p-0 has an IPv4 and an IPv6 endpoint: one SRV record for it.
    let targets = pairs([
        (&*svc("p-0.north.eu.pods.shop"), 80),
        (&*svc("10-5-0-2.north.eu.pods.shop"), 80),
        (&*svc("fd00-5--2.north.eu.pods.shop"), 80),
    ]);
    // Asked first in mixed case, the targets are still lower case (and the
    // answer, cached, serves the lower-case question too).
    assert_eq!(
        srv(server.addr, &svc("_http._tcp.PODS.Shop")).await,
        (targets.clone(), 3)
    );
    assert_eq!(
        srv(server.addr, &svc("_http._tcp.pods.shop")).await,
        (targets, 3)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_names_are_reserved_unless_targeting_is_on() {
    let (_cs, off) = serve_shop(&[]).await;
    for name in ["east.web.shop", "west.web.shop"] {
        assert_eq!(
            resolve(off.addr, &svc(name), A).await,
            Outcome::NxDomain,
            "{name}"
        );
    }
    // Per-pod names exist below it: an empty non-terminal (RFC 8020).
    assert_eq!(
        resolve(off.addr, &svc("east.db.shop"), A).await,
        Outcome::NoData
    );
    let (_cs, on) = serve_shop(&["--cluster-targeting"]).await;
    let cases = [
        ("east.web.shop", A, ips(["10.96.0.10"])),
        ("east.web.shop", AAAA, ips(["fd00:96::a"])),
        ("west.web.shop", A, ips(["10.97.0.10"])),
        ("east.db.shop", A, ips(["10.1.1.10", "10.1.1.11"])),
        ("west.db.shop", A, ips(["10.2.1.10"])),
        ("north.web.shop", A, Outcome::NxDomain),
    ];
    for (name, rtype, expected) in cases {
        assert_eq!(
            resolve(on.addr, &svc(name), rtype).await,
            expected,
            "{name} {rtype}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_match_case_insensitively_and_the_question_is_echoed() {
    let (_cs, server) = serve_shop(&[]).await;
    let lower = resolve(server.addr, &svc("web.shop"), A).await;
    // `query` checks the question comes back byte for byte.
    let mixed = query(server.addr, "WeB.Shop.SVC.ClusterSet.LOCAL.", A).await;
    assert_eq!(
        mixed.queries[0].name().to_ascii(),
        "WeB.Shop.SVC.ClusterSet.LOCAL."
    );
    assert_eq!(outcome(&mixed), lower);
    let pod = resolve(server.addr, "DB-0.East.DB.shop.svc.clusterset.local.", A).await;
    assert_eq!(pod, ips(["10.1.1.10"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_questions_follow_the_query_not_an_earlier_answer() {
    let (_cs, server) = serve_shop(&[]).await;
    let web = svc("web.shop");
    let first = resolve(server.addr, &web, A).await;
    // RD is copied from each query (`exchange_udp` checks it).
    let mut no_rd = question(&web, A);
    no_rd.metadata.recursion_desired = false;
    assert_eq!(outcome(&exchange_udp(server.addr, &no_rd).await.0), first);
    // Another class than IN (or ANY) is not served.
    let mut chaos = question(&web, A);
    chaos.queries[0].set_query_class(DNSClass::CH);
    let (response, _) = exchange_udp(server.addr, &chaos).await;
    assert_eq!(response.metadata.response_code, ResponseCode::Refused);
    assert!(response.answers.is_empty());
    let mut any = question(&web, A);
    any.queries[0].set_query_class(DNSClass::ANY);
    assert_eq!(outcome(&exchange_udp(server.addr, &any).await.0), first);
    // With and without EDNS, in either order.
    let (with, _) = exchange_udp(server.addr, &with_edns(question(&web, A), 1232)).await;
    assert!(with.edns.is_some());
    let (without, _) = exchange_udp(server.addr, &question(&web, A)).await;
    assert!(without.edns.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edns_is_answered_with_an_opt_capped_at_1232() {
    let (_cs, server) = serve_shop(&[]).await;
    for asked in [4096, 1232, 512] {
        let (response, _) = exchange_udp(
            server.addr,
            &with_edns(question(&svc("web.shop"), A), asked),
        )
        .await;
        let edns = response
            .edns
            .as_ref()
            .unwrap_or_else(|| panic!("OPT in the response to EDNS {asked}"));
        assert!(
            edns.max_payload() <= 1232 && edns.max_payload() >= 512,
            "{asked}: {}",
            edns.max_payload()
        );
        assert_eq!(
            outcome(&response),
            resolve(server.addr, &svc("web.shop"), A).await
        );
    }
    let (plain, _) = exchange_udp(server.addr, &question(&svc("web.shop"), A)).await;
    assert!(plain.edns.is_none(), "no OPT without EDNS in the query");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn big_answers_are_truncated_on_udp_and_whole_on_tcp() {
    let cs = Clusterset::new();
    let big = headless("shop", "big", &["IPv4"]);
    let endpoints: Vec<Ep> = (1..=200)
        .map(|i| ep(&format!("10.3.{}.{}", i / 100, i % 100 + 1)))
        .collect();
    cs.write(
        "east",
        "big.yaml",
        &[big.export(), big, slice("shop", "big-1", "big", &endpoints)],
    );
    let server = start(cs.dir(), &[]).await;
    let name = svc("big.shop");

    let (plain, len) = exchange_udp(server.addr, &question(&name, A)).await;
    assert!(plain.metadata.truncation, "TC without EDNS");
    assert!(len <= 512, "{len} bytes over UDP without EDNS");

    let (edns, len) = exchange_udp(server.addr, &with_edns(question(&name, A), 1232)).await;
    assert!(edns.metadata.truncation, "TC with EDNS 1232");
    assert!(len <= 1232, "{len} bytes over UDP with EDNS 1232");
    // Asked again, the cut response comes from the cache: cut the same way,
    // OPT included (its records rotate: ARCHITECTURE.md, "Load spread").
    for query in [question(&name, A), with_edns(question(&name, A), 1232)] {
        let limit = if query.edns.is_some() { 1232 } else { 512 };
        let first = exchange_udp(server.addr, &query).await.0;
        let (again, again_len) = exchange_udp(server.addr, &query).await;
        assert!(!first.answers.is_empty() && !again.answers.is_empty());
        assert!(again.metadata.truncation && again_len <= limit);
        assert_eq!(again.edns.is_some(), query.edns.is_some(), "OPT as asked");
    }

    // Truncated answers keep what fits.
    assert!(!plain.answers.is_empty(), "some answers fit in 512 bytes");
    assert!(
        edns.answers.len() > plain.answers.len(),
        "more fit in 1232 bytes"
    );

    let (huge, len) = exchange_udp(server.addr, &with_edns(question(&name, A), 65000)).await;
    assert!(
        huge.metadata.truncation && len <= 1232,
        "capped at 1232 even when 65000 is offered: {len}"
    );

    let tcp = query_tcp(server.addr, &name, A).await;
    assert!(!tcp.metadata.truncation);
    assert_eq!(addresses(outcome(&tcp)).len(), 200);

    // Asked with EDNS first, then without: still cut to 512 bytes.
    let (_, len) = exchange_udp(server.addr, &with_edns(question(&name, AAAA), 1232)).await;
    assert!(len <= 1232);
    let srv_name = svc("_http._tcp.big.shop");
    let (edns, len) = exchange_udp(server.addr, &with_edns(question(&srv_name, SRV), 1232)).await;
    assert!(edns.metadata.truncation && len <= 1232, "{len}");
    let (plain, len) = exchange_udp(server.addr, &question(&srv_name, SRV)).await;
    assert!(
        plain.metadata.truncation && len <= 512,
        "{len} bytes without EDNS"
    );
    assert!(plain.edns.is_none());
}

/// RFC 1035 §4.1.4: every record owned by the question's name has its owner
/// written as a pointer to the question, the 121st and later too (past the
/// 120 names hickory-proto compresses). A headless name of 3,500 endpoints
/// (a headless service of 255 clusters × 14 pods) then answers whole over
/// TCP in 16 bytes a record: written out in full, only about 1,500 fit the
/// 64 KiB of a DNS message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_owner_of_a_huge_answer_points_at_the_question_rfc1035_4_1_4() {
    const ENDPOINTS: usize = 3500;
    let cs = Clusterset::new();
    let huge = headless("shop", "huge", &["IPv4"]);
    let mut docs = vec![huge.export(), huge];
    for s in 0..ENDPOINTS / 100 {
        let endpoints: Vec<Ep> = (0..100)
            .map(|i| ep(&format!("10.4.{s}.{}", i + 1)))
            .collect();
        docs.push(slice("shop", &format!("huge-{s}"), "huge", &endpoints));
    }
    cs.write("east", "huge.yaml", &docs);
    let server = start(cs.dir(), &[]).await;
    let name = svc("huge.shop");
    let asked = question(&name, A);
    let bytes = tcp_raw(server.addr, &asked.to_vec().unwrap()).await;
    let reply = Message::from_vec(&bytes).expect("a well-formed answer");
    assert!(!reply.metadata.truncation, "whole over TCP");
    assert_eq!(addresses(outcome(&reply)).len(), ENDPOINTS);
    // Header, the question (name, type, class), then per record a 2-byte
    // pointer, type, class, TTL, RDLENGTH and the 4-byte address: nothing
    // is written out but the question.
    let question_len = BinEncodable::to_bytes(&asked.queries[0]).unwrap().len();
    assert_eq!(bytes.len(), 12 + question_len + ENDPOINTS * 16);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_tcp_connection_carries_several_queries() {
    let (_cs, server) = serve_shop(&[]).await;
    let asked = [
        question(&svc("db.shop"), A),
        question(&svc("v6db.shop"), AAAA),
    ];
    let bytes: Vec<Vec<u8>> = asked.iter().map(|q| q.to_vec().expect("encodes")).collect();
    let slices: Vec<&[u8]> = bytes.iter().map(Vec::as_slice).collect();
    let replies = tcp_raw_many(server.addr, &slices).await;
    let mut by_id: Vec<(u16, Outcome)> = replies
        .iter()
        .map(|r| {
            let response = Message::from_vec(r).expect("decodes");
            (response.metadata.id, outcome(&response))
        })
        .collect();
    by_id.sort_by_key(|(id, _)| asked.iter().position(|q| q.metadata.id == *id));
    let expected = [
        (
            asked[0].metadata.id,
            ips(["10.1.1.10", "10.1.1.11", "10.2.1.10"]),
        ),
        (asked[1].metadata.id, ips(["fd00::1"])),
    ];
    assert_eq!(by_id, expected);
}

/// A 12-byte header asking one question.
fn header(id: u16) -> Vec<u8> {
    let mut bytes = id.to_be_bytes().to_vec();
    bytes.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    bytes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_packets_get_formerr_or_are_dropped() {
    let (_cs, server) = serve_shop(&[]).await;
    let id = random_id();
    let mut garbage = header(id);
    garbage.extend_from_slice(&[0xff; 20]);
    let reply = udp_raw(server.addr, &garbage, REPLY_TIMEOUT)
        .await
        .expect("FORMERR comes back");
    assert_eq!(u16::from_be_bytes([reply[0], reply[1]]), id, "same id");
    assert_eq!(
        ResponseCode::from_low(reply[3] & 0x0f),
        ResponseCode::FormErr
    );
    assert!(reply[2] & 0x80 != 0, "QR set");

    let short = &header(id)[..7];
    assert_eq!(
        udp_raw(server.addr, short, Duration::from_millis(300)).await,
        None,
        "no reply to 7 bytes"
    );
    assert_eq!(
        udp_raw(server.addr, &[], Duration::from_millis(100)).await,
        None,
        "no reply to nothing"
    );
    // Still serving.
    assert_eq!(
        resolve(server.addr, &svc("db-0.east.db.shop"), A).await,
        ips(["10.1.1.10"])
    );
    let tcp = tcp_raw(server.addr, &garbage).await;
    assert_eq!(
        ResponseCode::from_low(tcp[3] & 0x0f),
        ResponseCode::FormErr,
        "FORMERR over TCP"
    );
}

/// Bytes from a fixed linear congruential sequence (reproducible garbage).
fn noise(seed: &mut u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|_| {
            *seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            (*seed >> 16) as u8
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_packets_never_stop_the_server() {
    let (_cs, server) = serve_shop(&[]).await;
    let long_name: Vec<u8> = (0..5)
        .flat_map(|_| [&[63u8][..], &[b'a'; 63]].concat())
        .collect();
    let type_class = [0, 1, 0, 1];
    let cases: [(&str, Vec<u8>); 5] = [
        (
            "a name pointing at itself",
            [&[0xc0, 0x0c][..], &type_class].concat(),
        ),
        (
            "a pointer past the end",
            [&[0xc0, 0xff][..], &type_class].concat(),
        ),
        ("a question cut short", b"\x03we".to_vec()),
        ("QDCOUNT=1 and no question", Vec::new()),
        (
            "a name over 255 bytes",
            [&long_name[..], &[0], &type_class].concat(),
        ),
    ];
    for (what, question) in cases {
        let id = random_id();
        let packet = [header(id), question].concat();
        let reply = udp_raw(server.addr, &packet, REPLY_TIMEOUT).await;
        let reply = reply.unwrap_or_else(|| panic!("{what}: no reply"));
        assert_eq!(u16::from_be_bytes([reply[0], reply[1]]), id, "{what}");
        let code = ResponseCode::from_low(reply[3] & 0x0f);
        assert_eq!(code, ResponseCode::FormErr, "{what}");
    }

    // Random datagrams (some with a header, some without), sent without waiting.
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0")
        .await
        .expect("socket");
    let mut seed = 0x5eed;
    for len in (0..300).map(|i| i % 97) {
        let packet = noise(&mut seed, len);
        socket.send_to(&packet, server.addr).await.expect("sent");
    }
    // TCP: a length prefix promising more than comes, then nothing.
    let mut stream = tokio::net::TcpStream::connect(server.addr)
        .await
        .expect("connects");
    tokio::io::AsyncWriteExt::write_all(&mut stream, &[0x01, 0x00, 0xde, 0xad])
        .await
        .expect("written");
    drop(stream);

    let db0 = svc("db-0.east.db.shop");
    assert_eq!(
        resolve(server.addr, &db0, A).await,
        ips(["10.1.1.10"]),
        "UDP still answers"
    );
    assert_eq!(
        outcome(&query_tcp(server.addr, &db0, A).await),
        ips(["10.1.1.10"]),
        "TCP too"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_or_two_questions_formerr_other_opcodes_notimp() {
    let (_cs, server) = serve_shop(&[]).await;
    // Asked once first, so that an answer to these questions exists.
    for (name, rtype) in [(svc("web.shop"), A), ("clusterset.local.".into(), SOA)] {
        assert_eq!(
            query(server.addr, &name, rtype)
                .await
                .metadata
                .response_code,
            ResponseCode::NoError
        );
    }
    let mut two = question(&svc("web.shop"), A);
    two.add_query(Query::query(
        Name::from_ascii(svc("db.shop")).expect("name"),
        A,
    ));
    let (response, _) = exchange_udp(server.addr, &two).await;
    assert_eq!(response.metadata.response_code, ResponseCode::FormErr);
    assert!(response.answers.is_empty());
    let none = Message::new(random_id(), MessageType::Query, OpCode::Query);
    let (response, _) = exchange_udp(server.addr, &none).await;
    assert_eq!(
        response.metadata.response_code,
        ResponseCode::FormErr,
        "no question"
    );

    for op in [OpCode::Notify, OpCode::Update, OpCode::Status] {
        let mut message = Message::new(random_id(), MessageType::Query, op);
        message.add_query(Query::query(
            Name::from_ascii("clusterset.local.").expect("name"),
            SOA,
        ));
        let (response, _) = exchange_udp(server.addr, &message).await;
        assert_eq!(
            response.metadata.response_code,
            ResponseCode::NotImp,
            "{op:?}"
        );
        assert_eq!(response.metadata.op_code, op, "opcode echoed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zone_and_ttl_flags() {
    let (_cs, server) = serve_shop(&["--zone", "example.org", "--ttl", "30"]).await;
    let name = "web.shop.svc.example.org.";
    let vip = query(server.addr, name, A).await;
    assert!(in_v4_pool(&only(outcome(&vip))));
    assert_eq!(ttls(&vip), [30]);
    assert_eq!(
        resolve(server.addr, &svc("web.shop"), A).await,
        Outcome::Code(ResponseCode::Refused)
    );

    let missing = query(server.addr, "nope.shop.svc.example.org.", A).await;
    assert_eq!(outcome(&missing), Outcome::NxDomain);
    let soa = &missing.authorities[0];
    assert_eq!(soa.name.to_ascii(), "example.org.");
    assert_eq!((soa.ttl, soa_of(soa).minimum), (30, 30));
    let apex = query(server.addr, "example.org.", SOA).await;
    assert_eq!(
        soa_of(&apex.answers[0]).mname.to_ascii(),
        "ns.dns.example.org."
    );
    assert_eq!(
        query(server.addr, "dns-version.example.org.", TXT)
            .await
            .answers[0]
            .ttl,
        28800
    );
}

#[test]
fn servfail_until_the_first_sync() {
    let zone = Name::from_ascii("clusterset.local.").expect("zone");
    let index = Index::new(zone, 5, false, 1);
    let ask = |name: &str, rtype: RecordType| {
        let name = LowerName::new(&Name::from_ascii(name).expect("name"));
        answer(&index, &name, rtype, DNSClass::IN)
    };
    let before = ask("web.shop.svc.clusterset.local.", A);
    assert_eq!(
        before.code,
        ResponseCode::ServFail,
        "never a wrong NXDOMAIN before the sync"
    );
    assert!(before.answers.is_empty());
    assert_eq!(ask("example.com.", A).code, ResponseCode::Refused);
    index.set_synced();
    let after = ask("web.shop.svc.clusterset.local.", A);
    assert_eq!(after.code, ResponseCode::NXDomain);
    assert!(after.authoritative);
    assert_eq!(after.authority.len(), 1);
}

/// Every answer given while the first load runs is SERVFAIL. A load can
/// beat the first query (a fast machine, a busy test): then the same is
/// tried with a larger one, until some query came before the sync.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servfail_while_the_first_load_runs() {
    let name = svc("s1.bulk");
    let mut seen_before_sync = 0;
    for services in [500, 2000, 8000, 32000] {
        let cs = Clusterset::new();
        write_bulk(&cs, services);
        let server = start_loading(cs.dir(), &[]).await;
        let index = &server.running().index;
        while !index.is_synced() {
            let response = query(server.addr, &name, A).await;
            // Answered before the sync completed (checked after the reply came).
            if !index.is_synced() {
                assert_eq!(response.metadata.response_code, ResponseCode::ServFail);
                assert!(response.answers.is_empty());
                seen_before_sync += 1;
            }
        }
        assert!(is_vip(&resolve(server.addr, &name, A).await));
        if seen_before_sync > 0 {
            println!("{seen_before_sync} answers before the sync of {services} services");
            return;
        }
    }
    panic!("every load finished before any query");
}

/// Serves `big.shop`, a headless service of `endpoints` IPv4 endpoints.
async fn serve_big(endpoints: usize) -> (Clusterset, Server) {
    let cs = Clusterset::new();
    let big = headless("shop", "big", &["IPv4"]).ports(&[("postgres", 5432, "TCP")]);
    let endpoints: Vec<Ep> = (0..endpoints)
        .map(|i| ep(&format!("10.4.{}.{}", i / 200, i % 200 + 1)))
        .collect();
    cs.write(
        "east",
        "big.yaml",
        &[
            namespace("shop"),
            big.export(),
            big,
            slice("shop", "big-1", "big", &endpoints),
        ],
    );
    let server = start(cs.dir(), &[]).await;
    (cs, server)
}

/// Issue 14, fault 1: a UDP answer cut to the client's size holds whole
/// records only, its counts match its sections and no byte follows the last
/// record (RFC 1035 §4.1, RFC 2181 §9, RFC 8906 §8.2.7), and an EDNS query
/// gets its OPT record however little else fits (RFC 6891 §7). Asked twice:
/// the second answer comes from the cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_answers_are_whole_records_with_the_opt_rfc1035_4_1_rfc2181_9_rfc6891_7() {
    let (_cs, server) = serve_big(300).await;
    let name = svc("big.shop");
    let all = addresses(outcome(&query_tcp(server.addr, &name, A).await));
    assert_eq!(all.len(), 300);
    for rtype in [A, SRV] {
        let asked = if rtype == A {
            name.clone()
        } else {
            svc("_postgres._tcp.big.shop")
        };
        for payload in [None, Some(512), Some(700), Some(1232), Some(4096)] {
            let limit = payload.map_or(512, |p: u16| usize::from(p.clamp(512, 1232)));
            for round in ["fresh", "cached"] {
                let message = match payload {
                    None => question(&asked, rtype),
                    Some(p) => with_edns(question(&asked, rtype), p),
                };
                let bytes = message.to_vec().expect("encodes");
                let reply = udp_raw(server.addr, &bytes, REPLY_TIMEOUT)
                    .await
                    .expect("a reply");
                let what = format!("{rtype} {payload:?} {round}");
                let response = strict(&reply);
                assert!(reply.len() <= limit, "{what}: {} bytes", reply.len());
                assert!(response.metadata.truncation, "{what}: TC");
                assert_eq!(response.edns.is_some(), payload.is_some(), "{what}: OPT");
                assert!(!response.answers.is_empty(), "{what}: some records fit");
                if rtype == A {
                    let got = addresses(outcome(&response));
                    assert!(got.is_subset(&all), "{what}");
                    assert_eq!(got.len(), response.answers.len(), "{what}: no duplicates");
                }
            }
        }
    }
}

/// Issue 14, fault 4: the only question has no earlier name, so a compression
/// pointer in it is FORMERR (RFC 1035 §4.1.4); over UDP and TCP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compression_pointer_in_the_question_is_formerr_rfc1035_4_1_4() {
    let (_cs, server) = serve_shop(&[]).await;
    let id = random_id();
    let into_header = [&header(id)[..], b"\x03web\xc0\x02\x00\x01\x00\x01"].concat();
    let to_itself = [&header(id)[..], b"\xc0\x0c\x00\x01\x00\x01"].concat();
    for packet in [into_header, to_itself] {
        for reply in [
            udp_raw(server.addr, &packet, REPLY_TIMEOUT)
                .await
                .expect("a reply"),
            tcp_raw(server.addr, &packet).await,
        ] {
            let response = strict(&reply);
            assert_eq!(response.metadata.id, id);
            assert_eq!(response.metadata.response_code, ResponseCode::FormErr);
            assert!(response.answers.is_empty());
        }
    }
    // A question without pointers is echoed byte for byte (case included),
    // the first time and from the cache.
    let mut bytes = question("wEb.SHOP.svc.clusterset.local.", A)
        .to_vec()
        .unwrap();
    for _ in 0..2 {
        let reply = udp_raw(server.addr, &bytes, REPLY_TIMEOUT).await.unwrap();
        let end = 12 + "wEb.SHOP.svc.clusterset.local.".len() + 1 + 4;
        assert_eq!(reply[12..end], bytes[12..end]);
        assert_eq!(strict(&reply).answers.len(), 1);
        bytes[0] ^= 1;
    }
}

/// Issue 14, fault 5: the DO bit is copied into the response's OPT record
/// (RFC 3225 §3), fresh and cached, whole and truncated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_do_bit_is_copied_rfc3225_3() {
    let (_cs, server) = serve_big(300).await;
    for name in [svc("big.shop"), "clusterset.local.".to_owned()] {
        for dnssec_ok in [true, false, true] {
            let message = if dnssec_ok {
                with_dnssec_ok(question(&name, A), 1232)
            } else {
                with_edns(question(&name, A), 1232)
            };
            let bytes = message.to_vec().unwrap();
            let reply = udp_raw(server.addr, &bytes, REPLY_TIMEOUT).await.unwrap();
            let edns = strict(&reply).edns.expect("OPT");
            assert_eq!(edns.flags().dnssec_ok, dnssec_ok, "{name}");
            let tcp = exchange_tcp(server.addr, &message).await;
            assert_eq!(tcp.edns.expect("OPT").flags().dnssec_ok, dnssec_ok);
        }
    }
}

/// Issue 14, fault 6: zone transfers are not defined over UDP (RFC 5936
/// §4.2): AXFR is NOTIMP; IXFR of the zone gets its SOA alone, which tells
/// the client to use TCP (RFC 1995 §2, §4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zone_transfers_over_udp_are_refused_rfc5936_4_2_rfc1995_2() {
    let (_cs, server) = serve_shop(&[]).await;
    let (axfr, _) = exchange_udp(
        server.addr,
        &question("clusterset.local.", RecordType::AXFR),
    )
    .await;
    assert_eq!(axfr.metadata.response_code, ResponseCode::NotImp);
    assert!(axfr.answers.is_empty() && axfr.authorities.is_empty());
    let (ixfr, _) = exchange_udp(
        server.addr,
        &question("clusterset.local.", RecordType::IXFR),
    )
    .await;
    assert_eq!(ixfr.metadata.response_code, ResponseCode::NoError);
    assert_eq!(ixfr.answers.len(), 1);
    assert_eq!(ixfr.answers[0].record_type(), SOA);
    let (other, _) = exchange_udp(server.addr, &question(&svc("web.shop"), RecordType::IXFR)).await;
    assert_eq!(other.metadata.response_code, ResponseCode::NotImp);
}

/// Issue 14, fault 7: ANY gets one synthesized HINFO record (RFC 8482 §4.2),
/// not every record (a 300-endpoint headless name would amplify 20-fold);
/// names without records and unknown names answer as for any other type.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_is_answered_with_one_hinfo_rfc8482_4_2() {
    let (_cs, server) = serve_big(300).await;
    for name in [svc("big.shop"), "clusterset.local.".to_owned()] {
        let message = with_edns(question(&name, RecordType::ANY), 1232);
        for transport in ["udp", "tcp"] {
            let (response, len) = match transport {
                "udp" => exchange_udp(server.addr, &message).await,
                _ => (exchange_tcp(server.addr, &message).await, 0),
            };
            assert_eq!(response.metadata.response_code, ResponseCode::NoError);
            assert_eq!(response.answers.len(), 1, "{name} {transport}");
            match &response.answers[0].data {
                RData::HINFO(hinfo) => assert_eq!(&hinfo.cpu[..], b"RFC8482"),
                other => panic!("HINFO expected, got {other:?}"),
            }
            let query_len = message.to_vec().unwrap().len();
            assert!(
                len <= 2 * query_len + 20,
                "{len} bytes for a {query_len}-byte query"
            );
        }
    }
    let (nodata, _) = exchange_udp(server.addr, &question(&svc("shop"), RecordType::ANY)).await;
    assert_eq!(nodata.metadata.response_code, ResponseCode::NoError);
    assert!(nodata.answers.is_empty());
    let (nx, _) = exchange_udp(server.addr, &question(&svc("nope.shop"), RecordType::ANY)).await;
    assert_eq!(nx.metadata.response_code, ResponseCode::NXDomain);
}

/// Issue 14, fault 8: a cut EDNS option (here a COOKIE) is counted in a
/// metric, not logged per packet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_edns_options_are_counted() {
    let (_cs, server) = serve_shop(&[]).await;
    let sent = 20;
    for _ in 0..sent {
        let reply = udp_raw(server.addr, &cut_cookie_query(), REPLY_TIMEOUT).await;
        assert!(strict(&reply.expect("a reply")).edns.is_some());
    }
    let metrics = server.running().metrics_addr;
    let series =
        "clusterset_dns_dns_malformed_requests_total{problem=\"edns_options\",proto=\"udp\"}";
    assert_eq!(scrape(metrics, series).await, f64::from(sent));
}

/// A query for `web.shop` A whose OPT record has a COOKIE option that says 8
/// bytes but holds 5.
fn cut_cookie_query() -> Vec<u8> {
    let mut bytes = header(random_id());
    bytes[11] = 1;
    bytes.extend_from_slice(b"\x03web\x04shop\x03svc\x0aclusterset\x05local\x00\x00\x01\x00\x01");
    bytes.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 9]);
    bytes.extend_from_slice(&[0, 10, 0, 8, 1, 2, 3, 4, 5]);
    bytes
}

/// Issue 14, fault 8: 2000 queries with a cut EDNS option to the real binary
/// at its default log settings write at most a handful of log lines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_packets_do_not_write_a_log_line_each() {
    use std::io::Read;
    use std::process::{Command, Stdio};
    let cs = shop();
    let probe = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = probe.local_addr().unwrap();
    drop(probe);
    let mut child = Command::new(BIN)
        .args([
            "serve",
            "--manifests",
            &cs.dir_arg(),
            "--listen",
            &addr.to_string(),
        ])
        .args(["--metrics-listen", "127.0.0.1:0"])
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    let started = std::time::Instant::now();
    while udp_raw(addr, &cut_cookie_query(), Duration::from_millis(100))
        .await
        .is_none()
    {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the binary never answered"
        );
    }
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let mut buffer = [0u8; 1500];
    let mut answered = 0;
    for _ in 0..2000 {
        socket.send_to(&cut_cookie_query(), addr).await.unwrap();
        if tokio::time::timeout(Duration::from_secs(1), socket.recv_from(&mut buffer))
            .await
            .is_ok()
        {
            answered += 1;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(answered > 1900, "{answered} of 2000 answered");
    let lines = stderr.lines().count();
    assert!(
        lines <= 5,
        "{lines} log lines:\n{}",
        stderr.lines().take(20).collect::<Vec<_>>().join("\n")
    );
}

/// `db.shop`, headless, with one ready endpoint per address (none: no slice).
fn db_with(ips: &[String]) -> Vec<Doc> {
    let db = headless("shop", "db", &["IPv4"]).ports(&[("postgres", 5432, "TCP")]);
    let mut docs = vec![namespace("shop"), db.export(), db];
    if !ips.is_empty() {
        let endpoints: Vec<Ep> = ips.iter().map(|ip| ep(ip)).collect();
        docs.push(slice("shop", "db-1", "db", &endpoints));
    }
    docs
}

/// Issue 14, fault 0: with a service changing while UDP queries about it
/// run, once the changes stop, UDP (served from the cache) answers what TCP
/// (never cached) answers: no answer computed before an update outlives it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_answers_equal_tcp_after_updates_under_queries() {
    let cs = Clusterset::new();
    cs.write("east", "db.yaml", &db_with(&["10.5.0.1".into()]));
    let server = start(cs.dir(), &[]).await;
    let addr = server.addr;
    let name = svc("db.shop");
    let asked: Vec<Message> = [A, AAAA, SRV]
        .into_iter()
        .flat_map(|t| [question(&name, t), with_edns(question(&name, t), 1232)])
        .collect();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load: Vec<_> = (0..2)
        .map(|_| {
            let (asked, stop) = (asked.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    for message in &asked {
                        exchange_udp(addr, message).await;
                    }
                }
            })
        })
        .collect();
    for round in 0..30u8 {
        // Endpoints change; every third round the service has none (NXDOMAIN).
        let ips: Vec<String> = match round % 3 {
            2 => Vec::new(),
            n => (1..=n + 1).map(|i| format!("10.5.{round}.{i}")).collect(),
        };
        cs.write("east", "db.yaml", &db_with(&ips));
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    let last = vec!["10.5.99.1".to_owned(), "10.5.99.2".to_owned()];
    cs.write("east", "db.yaml", &db_with(&last));
    eventually(&name, ips(["10.5.99.1", "10.5.99.2"]), || {
        resolve(addr, &name, A)
    })
    .await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for task in load {
        task.await.expect("the load ran");
    }
    // The answer's order rotates (ARCHITECTURE.md, "Load spread"): compared as sets.
    let sections = |m: &Message| {
        let mut answers: Vec<String> = m.answers.iter().map(ToString::to_string).collect();
        answers.sort();
        (m.metadata.response_code, answers, m.authorities.clone())
    };
    for message in &asked {
        let tcp = exchange_tcp(addr, message).await;
        for _ in 0..2 {
            let (udp, _) = exchange_udp(addr, message).await;
            assert_eq!(sections(&udp), sections(&tcp), "{:?}", message.queries);
        }
    }
}

/// RFC 8020 §2, RFC 4592 §2.2.2, RFC 8499 §7: a name with names below it
/// exists (NOERROR, no records, the SOA), in every branch of the tree:
/// `svc`, `<ns>.svc`, `_<proto>.<svc>`, `<cluster>.<svc>` above per-pod
/// names, every tail of a multi-label cluster id, and `dns` above the NS
/// target. Strict QNAME minimisation (RFC 9156 §2.3) walks them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_non_terminals_answer_nodata_rfc8020() {
    let cs = Clusterset::new();
    let pods = headless("shop", "pods", &["IPv4"]).ports(&[("http", 80, "TCP")]);
    let web = cluster_ip("shop", "web", &["10.96.0.10"]);
    let docs = [
        pods.export(),
        pods,
        slice("shop", "pods-v4", "pods", &[ep("10.5.0.1").host("p-0")]),
        web.export(),
        web,
    ];
    cs.write("north.eu", "shop.yaml", &docs);
    let server = start(cs.dir(), &[]).await;
    let ents = [
        "svc.clusterset.local.".to_owned(),
        svc("shop"),
        svc("_tcp.pods.shop"),
        svc("eu.pods.shop"),
        svc("north.eu.pods.shop"),
        "dns.clusterset.local.".to_owned(),
    ];
    for name in &ents {
        for rtype in [A, AAAA, SRV, TXT] {
            let response = query(server.addr, name, rtype).await;
            assert_eq!(outcome(&response), Outcome::NoData, "{name} {rtype}");
            assert!(response.metadata.authoritative, "{name}");
            assert_eq!(response.authorities.len(), 1, "{name}: the SOA");
            assert_eq!(response.authorities[0].record_type(), SOA, "{name}");
        }
        let tcp = query_tcp(server.addr, name, A).await;
        assert_eq!(outcome(&tcp), Outcome::NoData, "{name} over TCP");
    }
    assert_eq!(
        resolve(server.addr, &svc("p-0.north.eu.pods.shop"), A).await,
        ips(["10.5.0.1"])
    );
    // Nothing below them: NXDOMAIN stays.
    for name in [
        "north.pods.shop",
        "south.eu.pods.shop",
        "eu.web.shop",
        "north.eu.web.shop",
        "x.p-0.north.eu.pods.shop",
        "x.dns",
    ] {
        let name = if name.ends_with(".dns") {
            format!("{name}.clusterset.local.")
        } else {
            svc(name)
        };
        assert_eq!(
            resolve(server.addr, &name, A).await,
            Outcome::NxDomain,
            "{name}"
        );
    }
    // With cluster targeting, every cluster name has names above it too.
    let targeted = start(cs.dir(), &["--cluster-targeting"]).await;
    assert_eq!(
        resolve(targeted.addr, &svc("eu.web.shop"), A).await,
        Outcome::NoData
    );
    assert_eq!(
        resolve(targeted.addr, &svc("north.eu.web.shop"), A).await,
        ips(["10.96.0.10"])
    );
}

/// The apex NS record names `ns.dns.<zone>`; that name has the addresses of
/// `--nameserver-address` (RFC 1034 §4.2.1: the NS target needs an address
/// record or resolvers priming the zone loop), else the `--listen` address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ns_target_has_an_address_rfc1034() {
    let ns = "ns.dns.clusterset.local.";
    // The test server listens on 127.0.0.1: that is the address.
    let (_cs, server) = serve_shop(&[]).await;
    assert_eq!(resolve(server.addr, ns, A).await, ips(["127.0.0.1"]));
    assert_eq!(resolve(server.addr, ns, AAAA).await, Outcome::NoData);
    let upper = query_tcp(server.addr, "NS.DNS.clusterset.local.", A).await;
    assert_eq!(outcome(&upper), ips(["127.0.0.1"]));
    assert_eq!(upper.answers[0].ttl, 5);

    let (_cs, flagged) = serve_shop(&[
        "--nameserver-address",
        "10.96.0.53,fd00:96::53",
        "--nameserver-address",
        "10.96.0.54",
    ])
    .await;
    assert_eq!(
        resolve_both(flagged.addr, ns).await,
        (ips(["10.96.0.53", "10.96.0.54"]), ips(["fd00:96::53"]))
    );
    let tcp = query_tcp(flagged.addr, ns, AAAA).await;
    assert_eq!(outcome(&tcp), ips(["fd00:96::53"]));
    assert_eq!(
        resolve(flagged.addr, ns, TXT).await,
        Outcome::NoData,
        "the name exists"
    );
}
