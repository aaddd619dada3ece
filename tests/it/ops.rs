//! The operations surface: /metrics moves with real queries and reconciles,
//! /healthz and /readyz answer, and SIGTERM drains TCP queries in flight.

use std::time::{Duration, Instant};

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::RecordType;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::*;

/// A clusterset with one exported ClusterIP service, `web.shop`.
fn web_clusterset() -> Clusterset {
    let cs = Clusterset::new();
    cs.write(
        "east",
        "web.yaml",
        &cluster_ip("shop", "web", &["10.0.0.1"]).exported(),
    );
    cs
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_count_queries_and_reconciles() {
    let cs = web_clusterset();
    let server = start(cs.dir(), &[]).await;
    let ops = server.running().metrics_addr;

    for _ in 0..3 {
        let answer = query(server.addr, &svc("web.shop"), RecordType::A).await;
        assert_eq!(answer.metadata.response_code, ResponseCode::NoError);
    }
    assert_eq!(
        query_tcp(server.addr, &svc("nope.shop"), RecordType::AAAA)
            .await
            .metadata
            .response_code,
        ResponseCode::NXDomain
    );
    let body = get(ops, "/metrics").await.1;
    let expected = [
        (
            r#"clusterset_dns_dns_requests_total{proto="udp",type="A"}"#,
            3.0,
        ),
        (
            r#"clusterset_dns_dns_responses_total{proto="udp",rcode="NOERROR"}"#,
            3.0,
        ),
        (
            r#"clusterset_dns_dns_requests_total{proto="tcp",type="AAAA"}"#,
            1.0,
        ),
        (
            r#"clusterset_dns_dns_responses_total{proto="tcp",rcode="NXDOMAIN"}"#,
            1.0,
        ),
        (
            r#"clusterset_dns_dns_request_duration_seconds_count{proto="udp"}"#,
            3.0,
        ),
        (r#"clusterset_dns_imports{type="ClusterSetIP"}"#, 1.0),
        (r#"clusterset_dns_vips_allocated{pool="243.0.0.0/8"}"#, 1.0),
    ];
    for (series, count) in expected {
        assert_eq!(value(&body, series), count, "{series}");
    }
    let reconciles = value(&body, "clusterset_dns_reconciles_total");
    assert!(reconciles >= 1.0, "the first load is a reconcile");

    // A second service exported with other ports in another cluster: a reconcile, a conflict.
    let mut cart = cluster_ip("shop", "web", &["10.0.1.1"])
        .ports(&[("grpc", 9090, "TCP")])
        .exported();
    cart.extend(cluster_ip("shop", "cart", &["10.0.1.2"]).exported());
    cs.write("west", "more.yaml", &cart);
    let series = r#"clusterset_dns_imports{type="ClusterSetIP"}"#;
    eventually("two imports in /metrics", 2.0, || scrape(ops, series)).await;
    let body = get(ops, "/metrics").await.1;
    assert!(value(&body, "clusterset_dns_reconciles_total") > reconciles);
    assert_eq!(
        value(&body, r#"clusterset_dns_conflicts{reason="PortConflict"}"#),
        2.0,
        "both exports of the conflicted service (KEP-1645)"
    );
    assert_eq!(
        value(
            &body,
            r#"clusterset_dns_vips_allocated{pool="243.0.0.0/8"}"#
        ),
        2.0
    );
    assert!(
        value(
            &body,
            r#"clusterset_dns_source_sync_age_seconds{source="manifests"}"#
        ) < 30.0
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn health_and_readiness() {
    let cs = web_clusterset();
    let server = start(cs.dir(), &[]).await;
    let ops = server.running().metrics_addr;
    assert_eq!(get(ops, "/healthz").await, (200, "ok\n".to_owned()));
    assert_eq!(get(ops, "/readyz").await, (200, "ready\n".to_owned()));
    assert_eq!(get(ops, "/nope").await.0, 404);

    // A source that has not synced for longer than the bound makes the
    // server unready, saying for how long (whole seconds: at least 1).
    let strict = start(cs.dir(), &["--max-sync-age", "0"]).await;
    let ops = strict.running().metrics_addr;
    let deadline = Instant::now() + Duration::from_secs(30);
    let body = loop {
        let (code, body) = get(ops, "/readyz").await;
        if code == 503 && !body.contains(" for 0s ") {
            break body;
        }
        assert!(Instant::now() < deadline, "{code} {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let age = body
        .strip_prefix("not ready: a source has not synced for ")
        .and_then(|rest| rest.strip_suffix("s (limit 0s)\n"))
        .and_then(|secs| secs.parse::<u64>().ok());
    assert!(age.is_some_and(|age| age >= 1), "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn readiness_waits_for_the_first_sync() {
    // Big enough that the first load takes a while.
    let cs = Clusterset::new();
    let docs: Vec<Doc> = (0..1500)
        .flat_map(|i| {
            cluster_ip(
                "load",
                &format!("s{i}"),
                &[&format!("10.9.{}.{}", i / 250, i % 250 + 1)],
            )
            .exported()
        })
        .collect();
    cs.write("east", "many.yaml", &docs);
    let server = start_loading(cs.dir(), &[]).await;
    let ops = server.running().metrics_addr;
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let code = get(ops, "/readyz").await.0;
        if seen.last() != Some(&code) {
            seen.push(code);
        }
        if code == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(seen.last(), Some(&200), "ready after the first sync");
    // The listener is up before the load ends: unready first (unless the load won the race).
    assert!(seen == [503, 200] || seen == [200], "{seen:?}");
    assert!(server.running().index.is_synced());
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_answers_queries_in_flight_then_exits_0() {
    let cs = web_clusterset();
    let mut binary = spawn_binary(cs.dir(), &[]).await;
    let mut stream = TcpStream::connect(binary.addr).await.expect("TCP accepted");
    let framed = |name: &str| {
        let bytes = question(name, RecordType::A).to_vec().expect("encodes");
        let mut out = u16::try_from(bytes.len())
            .expect("small")
            .to_be_bytes()
            .to_vec();
        out.extend(bytes);
        out
    };
    // One round trip so the connection is surely accepted, then two queries and SIGTERM at once.
    stream
        .write_all(&framed(&svc("web.shop")))
        .await
        .expect("sent");
    read_answer(&mut stream).await;
    let mut both = framed(&svc("web.shop"));
    both.extend(framed(&svc("nope.shop")));
    stream.write_all(&both).await.expect("sent");
    kill(Pid::from_raw(binary.pid() as i32), Signal::SIGTERM).expect("signal sent");
    assert_eq!(
        read_answer(&mut stream).await.metadata.response_code,
        ResponseCode::NoError
    );
    assert_eq!(
        read_answer(&mut stream).await.metadata.response_code,
        ResponseCode::NXDomain
    );
    let status = binary
        .wait_exit(Duration::from_secs(6))
        .expect("exits within the 5 s grace");
    assert!(status.success(), "exit status {status:?}");
    assert!(
        TcpStream::connect(binary.addr).await.is_err(),
        "no longer accepting"
    );
}

async fn read_answer(stream: &mut TcpStream) -> Message {
    let len = tokio::time::timeout(Duration::from_secs(5), stream.read_u16())
        .await
        .expect("an answer in time")
        .expect("length read");
    let mut bytes = vec![0; usize::from(len)];
    stream.read_exact(&mut bytes).await.expect("message read");
    Message::from_vec(&bytes).expect("a DNS message")
}
