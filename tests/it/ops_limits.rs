//! No listener can stop the server: a connection flood on the operations
//! port of a binary held to a low open-file limit leaves DNS answering over
//! UDP and TCP and the process alive; slow HTTP clients are closed by the
//! header and idle timeouts; requests are small; `/debug/explain` is served
//! only when enabled.

use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use nix::sys::resource::{Resource, getrlimit, setrlimit};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::timeout;

use crate::common::*;

/// The open-file limit (soft and hard) of the flooded binary.
const NOFILE: u64 = 256;
/// Connections the flood opens: four times the limit.
const FLOOD: usize = 1000;
/// Longest wait for any one condition (generous: the machines are noisy).
const BOUND: Duration = Duration::from_secs(30);

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

/// The binary, run with `RLIMIT_NOFILE` at `nofile` (soft and hard), killed when dropped.
struct Limited {
    child: Child,
    dns: SocketAddr,
    ops: SocketAddr,
    stderr: std::path::PathBuf,
}

impl Drop for Limited {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Limited {
    fn alive(&mut self) -> bool {
        self.child.try_wait().expect("child status").is_none()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

/// Starts `serve` on `dir` under an open-file limit of `nofile` and waits
/// until it answers DNS.
async fn spawn_limited(dir: &Path, nofile: u64, log_dir: &Path) -> Limited {
    let (dns, ops) = (free_port(), free_port());
    let stderr = log_dir.join("stderr.log");
    let mut command = Command::new(BIN);
    command
        .args(["serve", "--manifests"])
        .arg(dir)
        .args(["--state-file"])
        .arg(log_dir.join("vips.json"))
        .args(["--listen", &dns.to_string()])
        .args(["--metrics-listen", &ops.to_string()])
        .args(["--udp-workers", "2"])
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr).expect("log file"));
    // SAFETY: setrlimit is a plain system call, safe between fork and exec.
    unsafe {
        command.pre_exec(move || {
            setrlimit(Resource::RLIMIT_NOFILE, nofile, nofile).map_err(std::io::Error::from)
        });
    }
    let mut binary = Limited {
        child: command.spawn().expect("the binary runs"),
        dns,
        ops,
        stderr,
    };
    let deadline = Instant::now() + BOUND;
    loop {
        assert!(binary.alive(), "the binary exited: {}", binary.log());
        let probe = question(&svc("web.shop"), RecordType::A).to_vec().unwrap();
        if let Some(reply) = udp_raw(dns, &probe, Duration::from_millis(200)).await {
            if ResponseCode::from_low(reply[3] & 0x0f) == ResponseCode::NoError {
                return binary;
            }
        }
        assert!(Instant::now() < deadline, "no answer: {}", binary.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A connection to `server` from the loopback address `from`.
async fn connect_from(from: &str, server: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(format!("{from}:0").parse().expect("an address"))?;
    timeout(Duration::from_secs(5), socket.connect(server))
        .await
        .map_err(|_| std::io::Error::other("connect timed out"))?
}

/// Whether a DNS query over UDP and one over TCP both answer NOERROR.
async fn dns_answers(addr: SocketAddr) -> (ResponseCode, ResponseCode) {
    let udp = query(addr, &svc("web.shop"), RecordType::A).await;
    let tcp = query_tcp(addr, &svc("web.shop"), RecordType::A).await;
    (udp.metadata.response_code, tcp.metadata.response_code)
}

/// `GET path` that reports a refused or cut connection as None.
async fn try_get(addr: SocketAddr, path: &str) -> Option<u16> {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await.ok()?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await.ok()?;
        response.split(' ').nth(1)?.parse().ok()
    };
    timeout(Duration::from_secs(5), exchange)
        .await
        .ok()
        .flatten()
}

/// Raises this test process's soft open-file limit so that it can hold the
/// flood; the flood's size when it cannot.
fn room_for_flood() -> usize {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).expect("limit read");
    if soft < hard {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    }
    let (soft, _) = getrlimit(Resource::RLIMIT_NOFILE).expect("limit read");
    FLOOD.min(
        usize::try_from(soft)
            .unwrap_or(usize::MAX)
            .saturating_sub(200),
    )
}

/// Issue 23: with the open-file limit at 256, a thousand idle connections
/// to the operations port once made `accept` fail with EMFILE and the
/// process exit. Now its connection caps are fitted inside the limit: the
/// flood meets the caps, DNS answers over UDP and TCP throughout, the
/// process stays up, and `/healthz` answers again once the flood is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_flood_on_the_operations_port_stops_nothing() {
    let cs = web_clusterset();
    let logs = tempfile::tempdir().expect("a temporary directory");
    let mut binary = spawn_limited(cs.dir(), NOFILE, logs.path()).await;
    assert_eq!(try_get(binary.ops, "/healthz").await, Some(200));
    let log = binary.log();
    assert!(
        log.contains("lowered to fit the open-file limit") && log.contains("limit=256"),
        "the caps set are logged: {log}"
    );

    let flood_size = room_for_flood();
    assert!(
        flood_size > 2 * NOFILE as usize,
        "room for a flood: {flood_size}"
    );
    let mut flood = Vec::new();
    let mut failed_connects = 0;
    for i in 0..flood_size {
        // From 16 addresses, so that the total cap is reached, not only the per-client one.
        match connect_from(&format!("127.0.0.{}", 2 + i % 16), binary.ops).await {
            Ok(stream) => flood.push(stream),
            Err(_) => failed_connects += 1,
        }
        if i % 100 == 99 {
            assert!(binary.alive(), "exited during the flood: {}", binary.log());
            assert_eq!(
                dns_answers(binary.dns).await,
                (ResponseCode::NoError, ResponseCode::NoError),
                "DNS answers during the flood ({} connections)",
                flood.len()
            );
        }
    }
    println!(
        "flood: {} connections open, {failed_connects} connects failed",
        flood.len()
    );
    // Idle flood connections are closed by the header timeout (5 s);
    // meanwhile, and after, DNS keeps answering.
    for _ in 0..5 {
        assert_eq!(
            dns_answers(binary.dns).await,
            (ResponseCode::NoError, ResponseCode::NoError),
            "DNS answers while the flood is held"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(binary.alive(), "exited during the flood: {}", binary.log());
    drop(flood);

    let deadline = Instant::now() + BOUND;
    while try_get(binary.ops, "/healthz").await != Some(200) {
        assert!(binary.alive(), "exited after the flood: {}", binary.log());
        assert!(Instant::now() < deadline, "/healthz does not answer again");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (_, metrics) = get(binary.ops, "/metrics").await;
    let refused = value(
        &metrics,
        r#"clusterset_dns_operations_refused_total{limit="total"}"#,
    ) + value(
        &metrics,
        r#"clusterset_dns_operations_refused_total{limit="client"}"#,
    );
    let emfile = value(
        &metrics,
        r#"clusterset_dns_accept_errors_total{error="resources",listener="operations"}"#,
    );
    println!("refused at a cap: {refused}; accept errors for want of descriptors: {emfile}");
    assert!(refused > 0.0, "the caps refused the flood");
    assert_eq!(
        dns_answers(binary.dns).await,
        (ResponseCode::NoError, ResponseCode::NoError)
    );
    assert!(binary.alive());
}

/// Whether the server closes `stream` (EOF or reset) within [`BOUND`],
/// and what it sent before.
async fn closed_by_server(stream: &mut TcpStream) -> (bool, Vec<u8>) {
    let mut received = Vec::new();
    let mut buffer = vec![0u8; 65536];
    let ended = timeout(BOUND, async {
        loop {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(n) => received.extend_from_slice(&buffer[..n]),
            }
        }
    })
    .await;
    (ended.is_ok(), received)
}

/// Slow clients lose their connection: one that sends nothing, one that
/// trickles a request head and never ends it (both: the header timeout),
/// one that keeps a connection alive after its response (the header
/// timeout again), and one that asks for responses it never reads (the
/// idle timeout). Other clients are served meanwhile, and the open
/// connections gauge comes back down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_http_clients_are_closed_within_the_timeouts() {
    let cs = web_clusterset();
    let server = start(
        cs.dir(),
        &[
            "--metrics-header-timeout",
            "1",
            "--metrics-idle-timeout",
            "2",
        ],
    )
    .await;
    let ops = server.running().metrics_addr;

    let mut silent = TcpStream::connect(ops).await.expect("accepted");

    let mut trickling = TcpStream::connect(ops).await.expect("accepted");
    trickling
        .write_all(b"GET /healthz HTTP/1.1\r\n")
        .await
        .expect("sent");
    let trickle = tokio::spawn(async move {
        // One header line every 300 ms, never the empty line that ends the head.
        for i in 0.. {
            tokio::time::sleep(Duration::from_millis(300)).await;
            if trickling
                .write_all(format!("X-{i}: y\r\n").as_bytes())
                .await
                .is_err()
            {
                return (true, i);
            }
            if i > 200 {
                return (false, i);
            }
        }
        unreachable!()
    });

    let mut kept_alive = TcpStream::connect(ops).await.expect("accepted");
    kept_alive
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .expect("sent");

    let socket = TcpSocket::new_v4().expect("a socket");
    socket.set_recv_buffer_size(4096).expect("buffer size set");
    let mut not_reading = socket.connect(ops).await.expect("accepted");
    let metrics_size = get(ops, "/metrics").await.1.len();
    let request = b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n".repeat(4000);
    let _ = timeout(Duration::from_secs(5), not_reading.write_all(&request)).await;

    assert_eq!(
        get(ops, "/healthz").await.0,
        200,
        "others are served meanwhile"
    );

    let (closed, sent) = closed_by_server(&mut silent).await;
    assert!(closed, "a client that sends nothing is closed");
    assert!(
        sent.is_empty() || sent.starts_with(b"HTTP/1.1 408"),
        "{sent:?}"
    );
    let (closed, lines) = trickle.await.expect("the trickle ends");
    assert!(closed, "a trickled head is cut ({lines} header lines sent)");
    let (closed, sent) = closed_by_server(&mut kept_alive).await;
    assert!(closed, "an idle kept-alive connection is closed");
    assert!(
        sent.starts_with(b"HTTP/1.1 200"),
        "its request was answered"
    );
    // Every slow connection is closed, that which never reads included (it
    // is not read from until then): only the scrape's own is left open.
    let gauge = "clusterset_dns_operations_connections";
    eventually_within(
        BOUND,
        "open operations connections (the scrape's own)",
        1.0,
        || scrape(ops, gauge),
    )
    .await;
    let (closed, sent) = closed_by_server(&mut not_reading).await;
    assert!(closed, "a client that does not read is closed");
    assert!(
        sent.len() < 4000 * metrics_size,
        "not every response was written: {} bytes",
        sent.len()
    );
}

/// Requests are small: a head over 8 KiB gets 431, a request with a body 413.
/// Connections past the per-client cap are closed at once and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_and_connections_are_bounded() {
    let cs = web_clusterset();
    // The header timeout is long: the connections held below must stay open.
    let server = start(
        cs.dir(),
        &[
            "--metrics-max-connections-per-client",
            "2",
            "--metrics-header-timeout",
            "120",
        ],
    )
    .await;
    let ops = server.running().metrics_addr;

    let mut stream = TcpStream::connect(ops).await.expect("accepted");
    let big = format!(
        "GET /healthz HTTP/1.1\r\nHost: t\r\nX-Big: {}\r\n\r\n",
        "a".repeat(10_000)
    );
    let _ = stream.write_all(big.as_bytes()).await;
    let (closed, sent) = closed_by_server(&mut stream).await;
    assert!(closed, "a request head too large ends the connection");
    // The rest of the head, unread, may make the close a reset that
    // overtakes the 431.
    assert!(
        sent.is_empty() || sent.starts_with(b"HTTP/1.1 431"),
        "{}",
        String::from_utf8_lossy(&sent)
    );

    let mut stream = TcpStream::connect(ops).await.expect("accepted");
    let post = "POST /healthz HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello";
    stream.write_all(post.as_bytes()).await.expect("sent");
    let (_, sent) = closed_by_server(&mut stream).await;
    assert!(
        sent.starts_with(b"HTTP/1.1 413"),
        "{}",
        String::from_utf8_lossy(&sent)
    );

    let held: Vec<TcpStream> = vec![
        TcpStream::connect(ops).await.expect("accepted"),
        TcpStream::connect(ops).await.expect("accepted"),
    ];
    eventually_within(BOUND, "two open connections", 2.0, || {
        // Scraped from another address: 127.0.0.1 is at its cap.
        async {
            let mut stream = connect_from("127.0.0.2", ops).await.expect("accepted");
            let request = "GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
            stream.write_all(request.as_bytes()).await.expect("sent");
            let mut body = String::new();
            stream.read_to_string(&mut body).await.expect("read");
            value(&body, "clusterset_dns_operations_connections") - 1.0
        }
    })
    .await;
    assert_eq!(
        try_get(ops, "/healthz").await,
        None,
        "over the per-client cap"
    );
    drop(held);
    eventually_within(BOUND, "/healthz once the cap frees", Some(200), || {
        try_get(ops, "/healthz")
    })
    .await;
    let refused = scrape(
        ops,
        r#"clusterset_dns_operations_refused_total{limit="client"}"#,
    )
    .await;
    assert!(refused >= 1.0, "{refused}");
}

/// `/debug/explain` shows every service to whoever reaches the port: it is
/// not served unless `--debug-explain` is given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_explain_is_absent_unless_enabled() {
    let cs = web_clusterset();
    let path = "/debug/explain?name=web.shop.svc.clusterset.local&type=A";
    let off = start(cs.dir(), &[]).await;
    let (code, body) = get(off.running().metrics_addr, path).await;
    assert_eq!(code, 404, "{body}");
    assert!(body.contains("--debug-explain"), "{body}");
    let (_, body) = get(off.running().metrics_addr, "/nope").await;
    assert!(!body.contains("/debug/explain"), "not advertised: {body}");
    assert_eq!(get(off.running().metrics_addr, "/healthz").await.0, 200);

    let on = start(cs.dir(), &["--debug-explain"]).await;
    let (code, body) = get(on.running().metrics_addr, path).await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("\"rcode\": \"NOERROR\""), "{body}");
}
