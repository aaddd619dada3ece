//! RFC 7766 §6.2.3 and §10: DNS over TCP within bounds. Total and
//! per-client connection limits, refused connections counted, and a client
//! that never reads its responses loses its connection after the write
//! timeout instead of holding memory forever. Real sockets, in-process server.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use hickory_proto::rr::RecordType::A;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::timeout;

use crate::common::*;

/// Longest wait for an answer, a close or a change of connection count
/// (generous: the machines are noisy; only outcomes are asserted).
const SETTLE: Duration = Duration::from_secs(30);

/// `web.shop` (one VIP) and `big.shop` (headless, 300 endpoints: a 5 kB answer).
fn clusterset() -> Clusterset {
    let cs = Clusterset::new();
    let web = cluster_ip("shop", "web", &["10.96.0.10"]);
    let big = headless("shop", "big", &["IPv4"]);
    let endpoints: Vec<_> = (0..300)
        .map(|i| ep(&format!("10.8.{}.{}", i / 250, i % 250 + 1)))
        .collect();
    let docs = [
        namespace("shop"),
        web.export(),
        web,
        big.export(),
        big,
        slice("shop", "big-1", "big", &endpoints),
    ];
    cs.write("east", "shop.yaml", &docs);
    cs
}

/// A TCP connection to `server` from the loopback address `from`.
async fn connect_from(from: &str, server: SocketAddr, receive_buffer: Option<u32>) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("a socket");
    if let Some(size) = receive_buffer {
        socket.set_recv_buffer_size(size).expect("buffer size set");
    }
    socket
        .bind(format!("{from}:0").parse().expect("an address"))
        .expect("bound");
    socket.connect(server).await.expect("connected")
}

/// The query for `name` A with its two-byte length prefix.
fn framed_query(name: &str) -> Vec<u8> {
    let bytes = question(name, A).to_vec().expect("query encodes");
    let mut framed = u16::try_from(bytes.len())
        .expect("short")
        .to_be_bytes()
        .to_vec();
    framed.extend(bytes);
    framed
}

/// Whether the server answers a query on `stream` (false: it closed it).
async fn answered(stream: &mut TcpStream) -> bool {
    let exchange = async {
        stream.write_all(&framed_query(&svc("web.shop"))).await?;
        let len = stream.read_u16().await?;
        let mut reply = vec![0u8; usize::from(len)];
        stream.read_exact(&mut reply).await?;
        std::io::Result::Ok(())
    };
    timeout(SETTLE, exchange)
        .await
        .expect("an answer or a close in time")
        .is_ok()
}

async fn metric(server: &Server, series: &str) -> f64 {
    let addr = server.running().metrics_addr;
    value(&get(addr, "/metrics").await.1, series)
}

/// Polls `series` until it equals `expected`, for at most [`SETTLE`].
async fn eventually_metric(server: &Server, series: &str, expected: f64) {
    let deadline = Instant::now() + SETTLE;
    loop {
        let seen = metric(server, series).await;
        if seen == expected {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{series} = {seen}, expected {expected}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// RFC 7766 §6.2.3 ("a limit on the number of connections from one client")
/// and §10 (a total limit): connections beyond either are closed at once and
/// counted; a closed connection frees its place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn total_and_per_client_connection_limits_rfc7766() {
    let cs = clusterset();
    let server = start(
        cs.dir(),
        &[
            "--tcp-max-connections",
            "5",
            "--tcp-max-connections-per-client",
            "3",
        ],
    )
    .await;
    let mut first = Vec::new();
    for _ in 0..3 {
        let mut stream = connect_from("127.0.0.1", server.addr, None).await;
        assert!(answered(&mut stream).await, "within the per-client limit");
        first.push(stream);
    }
    let mut fourth = connect_from("127.0.0.1", server.addr, None).await;
    assert!(!answered(&mut fourth).await, "over the per-client limit");
    let mut second = Vec::new();
    for _ in 0..2 {
        let mut stream = connect_from("127.0.0.2", server.addr, None).await;
        assert!(
            answered(&mut stream).await,
            "another client, within the total"
        );
        second.push(stream);
    }
    let mut third_client = connect_from("127.0.0.3", server.addr, None).await;
    assert!(!answered(&mut third_client).await, "over the total limit");
    assert_eq!(
        metric(&server, "clusterset_dns_dns_tcp_connections").await,
        5.0
    );
    let refused = "clusterset_dns_dns_tcp_refused_total";
    assert_eq!(
        metric(&server, &format!("{refused}{{limit=\"client\"}}")).await,
        1.0
    );
    assert_eq!(
        metric(&server, &format!("{refused}{{limit=\"total\"}}")).await,
        1.0
    );

    drop(first.pop());
    eventually_metric(&server, "clusterset_dns_dns_tcp_connections", 4.0).await;
    let mut again = connect_from("127.0.0.3", server.addr, None).await;
    assert!(
        answered(&mut again).await,
        "a closed connection frees its place"
    );
}

/// RFC 7766 §6.2.3, §10: a client that sends queries but never reads the
/// responses gets at most a bounded backlog and loses its connection after
/// the write timeout (here 1 s), counted in a metric; other clients are
/// served meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_loses_its_connection_rfc7766() {
    let cs = clusterset();
    let server = start(cs.dir(), &["--tcp-write-timeout", "1"]).await;
    let mut stalled = connect_from("127.0.0.1", server.addr, Some(4096)).await;
    let query = framed_query(&svc("big.shop"));
    // 5000 answers of 5 kB (25 MB): far more than the socket buffers hold. Writing
    // stops once the server stops reading.
    let mut queries = Vec::new();
    for _ in 0..5000 {
        queries.extend_from_slice(&query);
    }
    let _ = timeout(Duration::from_secs(2), stalled.write_all(&queries)).await;

    let mut other = connect_from("127.0.0.2", server.addr, None).await;
    assert!(answered(&mut other).await, "others are served meanwhile");

    // Closed for the write timeout (counted), not by the client.
    eventually_metric(&server, "clusterset_dns_dns_tcp_write_timeouts_total", 1.0).await;
    eventually_metric(&server, "clusterset_dns_dns_tcp_connections", 1.0).await;
    // It stopped reading once 16 responses waited: most queries were never
    // answered (without the bound, all 5000 would be, their answers queued).
    let series = "clusterset_dns_dns_requests_total{proto=\"tcp\",type=\"A\"}";
    let answered = metric(&server, series).await;
    assert!(
        (16.0..2000.0).contains(&answered),
        "{answered} TCP queries answered for a client that never reads"
    );
    // What the client can still read is bounded (far below the 25 MB asked
    // for), then the connection ends.
    let mut received = 0usize;
    let mut buffer = vec![0u8; 65536];
    let drained = timeout(SETTLE, async {
        loop {
            match stalled.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(n) => received += n,
            }
        }
    })
    .await;
    assert!(drained.is_ok(), "the connection ends");
    assert!(
        received < 10_000_000,
        "{received} bytes queued for a stalled client"
    );
}
