//! ARCHITECTURE.md, "Load spread": an answer of many records (headless A
//! and AAAA, SRV) rotates per response, so that over repeated queries the
//! first record, and the window a truncated UDP answer holds, go round every
//! endpoint of every cluster (issue 21: 300 queries all got 10.1.1.1 first
//! and the same 72 records). Asked over real UDP and TCP of an in-process
//! server with two UDP workers.

use std::collections::BTreeSet;
use std::net::SocketAddr;

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::RecordType::{self, A, AAAA, SRV};

use crate::common::*;

/// Ready endpoints per cluster.
const PER_CLUSTER: usize = 80;
/// Every record of an answer: both clusters' endpoints.
const RECORDS: usize = 2 * PER_CLUSTER;
/// UDP queries per case. The server has two workers, each rotating its own
/// copy of a response one record per query; whichever gets the most queries
/// gets at least half, more than `RECORDS`, so it alone puts every record first.
const QUERIES: usize = 2 * RECORDS + 40;

/// `pods.shop` (IPv4) and `pods6.shop` (IPv6), headless, exported by east
/// and west with 80 ready endpoints each; every other IPv4 endpoint has a
/// hostname, so SRV targets (and records) differ in length.
fn clusterset() -> Clusterset {
    let cs = Clusterset::new();
    for (n, cluster) in [(1, "east"), (2, "west")] {
        let pods = headless("shop", "pods", &["IPv4"]);
        let pods6 = headless("shop", "pods6", &["IPv6"]);
        let v4: Vec<Ep> = (1..=PER_CLUSTER)
            .map(|i| {
                let ep = ep(&format!("10.{n}.1.{i}"));
                if i % 2 == 0 {
                    ep.host(&format!("pod-{i}"))
                } else {
                    ep
                }
            })
            .collect();
        let v6: Vec<Ep> = (1..=PER_CLUSTER)
            .map(|i| ep(&format!("fd00:{n}::{i:x}")))
            .collect();
        cs.write(
            cluster,
            "pods.yaml",
            &[
                namespace("shop"),
                pods.export().created("2026-01-01T00:00:00Z"),
                pods,
                slice("shop", "pods-1", "pods", &v4),
                pods6.export().created("2026-01-01T00:00:00Z"),
                pods6,
                slice("shop", "pods6-1", "pods6", &v6),
            ],
        );
    }
    cs
}

async fn serve() -> (Clusterset, Server) {
    let cs = clusterset();
    let server = start(cs.dir(), &["--udp-workers", "2"]).await;
    (cs, server)
}

/// The answer's records as text, in the order sent.
fn records(response: &Message) -> Vec<String> {
    response
        .answers
        .iter()
        .map(|r| r.data.to_string())
        .collect()
}

/// Whether `window` is `whole[p], whole[p + 1], …` for some `p`, wrapping
/// round: a rotation of the whole rrset, cut after some records.
fn is_window(whole: &[String], window: &[String]) -> bool {
    let Some(first) = window.first() else {
        return true;
    };
    let Some(p) = whole.iter().position(|r| r == first) else {
        return false;
    };
    window.len() <= whole.len()
        && window
            .iter()
            .enumerate()
            .all(|(i, r)| *r == whole[(p + i) % whole.len()])
}

/// The cluster an address or SRV target belongs to.
fn cluster_of(record: &str) -> &'static str {
    if record.contains("10.1.") || record.contains("fd00:1:") || record.contains(".east.") {
        "east"
    } else {
        "west"
    }
}

/// What `QUERIES` UDP queries for `name`/`rtype` (EDNS `payload`, or none)
/// gave: the first records and the union of the records. Every response is
/// checked to be a truncated answer (TC set, at most the client's limit)
/// that decodes strictly (counts match, whole records: RFC 1035 §4.1, RFC
/// 2181 §9), keeps the OPT record of an EDNS query (RFC 6891 §7), and holds
/// a rotated window of the complete rrset `whole`.
async fn spread(
    addr: SocketAddr,
    name: &str,
    rtype: RecordType,
    payload: Option<u16>,
    whole: &[String],
) -> (BTreeSet<String>, BTreeSet<String>) {
    let limit = payload.map_or(512, |p| usize::from(p.min(1232)));
    let (mut firsts, mut seen) = (BTreeSet::new(), BTreeSet::new());
    for n in 0..QUERIES {
        let message = match payload {
            None => question(name, rtype),
            Some(p) => with_edns(question(name, rtype), p),
        };
        let reply = udp_raw(addr, &message.to_vec().expect("encodes"), REPLY_TIMEOUT)
            .await
            .expect("a reply");
        let what = format!("{name} {rtype} {payload:?}, query {n}");
        let response = strict(&reply);
        assert_eq!(
            response.metadata.response_code,
            ResponseCode::NoError,
            "{what}"
        );
        assert!(response.metadata.truncation, "{what}: TC");
        assert!(reply.len() <= limit, "{what}: {} bytes", reply.len());
        assert_eq!(response.edns.is_some(), payload.is_some(), "{what}: OPT");
        let got = records(&response);
        assert!(!got.is_empty(), "{what}: some records fit");
        assert!(
            is_window(whole, &got),
            "{what}: not a rotated window: {got:?}"
        );
        firsts.insert(got[0].clone());
        seen.extend(got);
    }
    (firsts, seen)
}

/// The complete rrset over TCP (RFC 7766 §5: TCP carries the whole answer).
async fn whole(addr: SocketAddr, name: &str, rtype: RecordType) -> Vec<String> {
    let response = exchange_tcp(addr, &with_edns(question(name, rtype), 1232)).await;
    assert!(
        !response.metadata.truncation,
        "{name} {rtype}: TCP is whole"
    );
    records(&response)
}

/// Asserts that `set` holds every record of `whole`, from both clusters.
fn covers_all(set: &BTreeSet<String>, whole: &[String], what: &str) {
    let all: BTreeSet<String> = whole.iter().cloned().collect();
    let missing: Vec<&String> = all.difference(set).collect();
    assert!(missing.is_empty(), "{what}: never seen: {missing:?}");
    let clusters: BTreeSet<&str> = set.iter().map(|r| cluster_of(r)).collect();
    assert_eq!(clusters, BTreeSet::from(["east", "west"]), "{what}");
}

/// Issue 21: over repeated UDP queries for a headless name's A records,
/// with and without EDNS, the first address goes round all 160 endpoints of
/// both clusters, and so do the truncated answers' records; each truncated
/// answer is a different window of whole records, TC set, counts matching,
/// the OPT kept (RFC 1035 §4.1, RFC 2181 §9, RFC 6891 §7).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_a_answers_rotate_over_every_endpoint_of_both_clusters() {
    let (_cs, server) = serve().await;
    let name = svc("pods.shop");
    let whole = whole(server.addr, &name, A).await;
    assert_eq!(whole.len(), RECORDS);
    for payload in [None, Some(1232)] {
        let (firsts, seen) = spread(server.addr, &name, A, payload, &whole).await;
        covers_all(
            &firsts,
            &whole,
            &format!("first addresses, EDNS {payload:?}"),
        );
        covers_all(
            &seen,
            &whole,
            &format!("truncated answers, EDNS {payload:?}"),
        );
    }
}

/// Issue 21, AAAA: the same for the IPv6 endpoints (28-byte records).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_aaaa_answers_rotate_over_every_endpoint_of_both_clusters() {
    let (_cs, server) = serve().await;
    let name = svc("pods6.shop");
    let whole = whole(server.addr, &name, AAAA).await;
    assert_eq!(whole.len(), RECORDS);
    let (firsts, seen) = spread(server.addr, &name, AAAA, Some(1232), &whole).await;
    covers_all(&firsts, &whole, "first addresses");
    covers_all(&seen, &whole, "truncated answers");
}

/// Issue 21, SRV: records of different lengths (per-pod hostnames and
/// dashed IPs) rotate by whole records too; every target comes first and
/// every one is in some truncated answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_srv_answers_rotate_over_every_endpoint_of_both_clusters() {
    let (_cs, server) = serve().await;
    let name = svc("_http._tcp.pods.shop");
    let whole = whole(server.addr, &name, SRV).await;
    assert_eq!(whole.len(), RECORDS);
    let lengths: BTreeSet<usize> = whole.iter().map(String::len).collect();
    assert!(lengths.len() > 1, "targets of several lengths: {lengths:?}");
    let (firsts, seen) = spread(server.addr, &name, SRV, None, &whole).await;
    covers_all(&firsts, &whole, "first targets");
    covers_all(&seen, &whole, "truncated answers");
}

/// TCP answers stay complete (RFC 7766 §5), every record once, and rotate
/// as well: the first record is not always the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_answers_are_complete_and_rotate() {
    let (_cs, server) = serve().await;
    for (name, rtype) in [
        (svc("pods.shop"), A),
        (svc("pods6.shop"), AAAA),
        (svc("_http._tcp.pods.shop"), SRV),
    ] {
        let reference = whole(server.addr, &name, rtype).await;
        let mut firsts = BTreeSet::new();
        for _ in 0..8 {
            let got = whole(server.addr, &name, rtype).await;
            assert_eq!(got.len(), RECORDS, "{name} {rtype}: complete");
            assert!(is_window(&reference, &got), "{name} {rtype}: a rotation");
            firsts.insert(got[0].clone());
        }
        assert!(firsts.len() > 1, "{name} {rtype}: always {firsts:?} first");
    }
}

/// A ClusterSetIP name without VIPs answers every cluster's ClusterIP, the
/// local cluster's first, over UDP (cached or not) and TCP alike: it keeps
/// that order instead of rotating, so clients use the local Service.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clusterset_ip_name_keeps_the_local_cluster_first() {
    let cs = Clusterset::new();
    for (cluster, ip) in [("east", "10.1.0.20"), ("west", "10.2.0.20")] {
        let plain = cluster_ip("shop", "plain", &[ip]);
        let export = plain.export().set(
            "metadata.annotations",
            serde_json::json!({"clusterset-dns.io/use-clusterset-ip": "false"}),
        );
        cs.write(cluster, "plain.yaml", &[plain, export]);
    }
    let server = start(cs.dir(), &["--cluster-id", "west", "--udp-workers", "2"]).await;
    let addr = server.running().dns_addr;
    let name = "plain.shop.svc.clusterset.local.";
    for _ in 0..20 {
        for response in [query(addr, name, A).await, query_tcp(addr, name, A).await] {
            let first = response.answers.first().and_then(|r| r.data.ip_addr());
            assert_eq!(response.answers.len(), 2, "{response:?}");
            assert_eq!(first.map(|ip| ip.to_string()).as_deref(), Some("10.2.0.20"));
        }
    }
}
