//! DNS over TLS (RFC 7858) with real tools: `kdig +tls` and unbound
//! forwarding over TLS ask the TLS port and get what TCP gets; certificates
//! rotated as Kubernetes rotates a mounted Secret are served without a
//! restart; a bad certificate is a start-up error naming the file.
//! Certificates come from a test CA made with `openssl`.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::RecordType;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::process::Command;
use tokio::time::timeout;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::common::*;

/// Longest a tool may take for one query.
const TOOL_DEADLINE: Duration = Duration::from_secs(30);
/// Longest a rotated certificate may take to be served: the server reads the
/// files every 2 s.
const ROTATION_DEADLINE: Duration = Duration::from_secs(8);

/// A server answering the demo clusterset over UDP/TCP and TLS; its state
/// (VIPs, SOA serial) in a temporary folder, not in the demo folder.
async fn start_tls(pki: &Pki) -> (Server, SocketAddr) {
    let state = tempfile::tempdir().expect("a state folder");
    let state = state.keep().join("vips.json").display().to_string();
    let mut flags = pki.flags();
    flags.extend(["--state-file".to_owned(), state]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let server = start(&Path::new(CRATE_ROOT).join("config/demo"), &flags).await;
    let tls = server.running().tls_addr.expect("TLS listener bound");
    (server, tls)
}

/// Runs `kdig` with `args`, bounded in time; its stdout.
async fn kdig(args: &[String]) -> String {
    let output = timeout(
        TOOL_DEADLINE,
        Command::new("kdig")
            .args(["+time=3", "+retry=0"])
            .args(args)
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("kdig finishes in time")
    .expect("kdig runs (Debian package knot-dnsutils)");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// kdig's output without what differs between a TLS and a TCP exchange of
/// the same question: the message id, the TLS session, the padding and so
/// the size, the time and the transport.
fn comparable(output: &str) -> String {
    output
        .lines()
        .filter(|l| {
            ![
                ";; TLS session",
                ";; PADDING: ",
                ";; Received ",
                ";; Time ",
                ";; From ",
            ]
            .iter()
            .any(|prefix| l.starts_with(prefix))
        })
        .map(|l| l.split("; id: ").next().unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n")
}

/// RFC 7858 §3.3: DNS over TLS carries the same messages as DNS over TCP, so
/// `kdig +tls` (certificate and name verified) gets what `kdig +tcp` gets, for
/// an address, NODATA, SRV and NXDOMAIN, padded (kdig pads its queries over
/// TLS; RFC 7830 §4 makes padding the response a MUST; TCP does not pad);
/// handshakes are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kdig_over_tls_gets_what_tcp_gets() {
    let mut pki = Pki::new();
    pki.issue("first", 101);
    let (server, tls) = start_tls(&pki).await;
    let tcp = server.addr;
    let questions = [
        (svc("web.shop"), "A", "\tA\t243."),
        (svc("web.shop"), "AAAA", "ANSWER: 0; AUTHORITY: 1"),
        (
            svc("_http._tcp.web.shop"),
            "SRV",
            "\tSRV\t0 100 80 web.shop.svc.clusterset.local.",
        ),
        (svc("nope.shop"), "A", "status: NXDOMAIN"),
    ];
    for (name, rtype, expected) in &questions {
        let over_tls = kdig(&[
            format!("@{}", tls.ip()),
            "-p".into(),
            tls.port().to_string(),
            "+tls".into(),
            format!("+tls-ca={}", pki.ca().display()),
            format!("+tls-hostname={SERVER_NAME}"),
            name.clone(),
            (*rtype).into(),
        ])
        .await;
        assert!(
            over_tls.contains(";; TLS session"),
            "{name} {rtype} over TLS: {over_tls}"
        );
        assert!(over_tls.contains(expected), "{name} {rtype}: {over_tls}");
        let size: usize = over_tls
            .split(";; Received ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next()?.parse().ok())
            .expect("kdig prints the response size");
        assert_eq!(
            size % 468,
            0,
            "RFC 8467 §4.1: padded to 468-byte blocks: {over_tls}"
        );
        let over_tcp = kdig(&[
            format!("@{}", tcp.ip()),
            "-p".into(),
            tcp.port().to_string(),
            "+tcp".into(),
            // kdig pads queries over TLS (RFC 8467); ask alike.
            "+padding".into(),
            name.clone(),
            (*rtype).into(),
        ])
        .await;
        assert!(
            !over_tcp.contains("PADDING"),
            "padding hides nothing in clear text: TCP does not pad"
        );
        assert_eq!(
            comparable(&over_tls),
            comparable(&over_tcp),
            "{name} {rtype}"
        );
    }
    // A client that does not trust the certificate's name hangs up in the handshake.
    let refused = kdig(&[
        format!("@{}", tls.ip()),
        "-p".into(),
        tls.port().to_string(),
        "+tls".into(),
        format!("+tls-ca={}", pki.ca().display()),
        "+tls-hostname=other.test".into(),
        svc("web.shop"),
    ])
    .await;
    assert!(!refused.contains("ANSWER SECTION"), "{refused}");
    let metrics = server.running().metrics_addr;
    let handshakes = scrape(metrics, "clusterset_dns_tls_handshakes_total").await;
    assert_eq!(handshakes, questions.len() as f64);
    let failed = wait_for_metric(metrics, "clusterset_dns_tls_handshake_failures_total", 1.0).await;
    assert_eq!(failed, 1.0);
    let requests = scrape(
        metrics,
        "clusterset_dns_dns_requests_total{proto=\"tls\",type=\"A\"}",
    )
    .await;
    assert_eq!(requests, 2.0, "the A questions over TLS are counted as tls");
}

/// Polls a counter until it reaches `expected` (the server counts a failed
/// handshake once it has read the client's alert); its last value.
fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64()
}

async fn wait_for_metric(metrics: SocketAddr, series: &str, expected: f64) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let value = scrape(metrics, series).await;
        if value >= expected || Instant::now() > deadline {
            return value;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A TLS connection trusting only the test CA and checking [`SERVER_NAME`].
async fn connect(pki: &Pki, addr: SocketAddr) -> TlsStream<TcpStream> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(pki.ca()).expect("CA certificate"))
        .expect("CA trusted");
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connect = async {
        let tcp = TcpStream::connect(addr).await?;
        TlsConnector::from(Arc::new(config))
            .connect(ServerName::try_from(SERVER_NAME).expect("a name"), tcp)
            .await
    };
    timeout(REPLY_TIMEOUT, connect)
        .await
        .expect("TLS handshake in time")
        .expect("TLS handshake")
}

/// The certificate the server presented on `stream`.
fn presented(stream: &TlsStream<TcpStream>) -> CertificateDer<'static> {
    stream
        .get_ref()
        .1
        .peer_certificates()
        .expect("a server certificate")[0]
        .clone()
}

/// One query over an open TLS connection (two-byte length prefix, RFC 7858 §3.3).
async fn ask(stream: &mut TlsStream<TcpStream>, name: &str, rtype: RecordType) -> Message {
    let query = question(name, rtype).to_vec().expect("query encodes");
    let exchange = async {
        stream
            .write_all(&u16::try_from(query.len()).expect("small").to_be_bytes())
            .await?;
        stream.write_all(&query).await?;
        let len = stream.read_u16().await?;
        let mut reply = vec![0u8; usize::from(len)];
        stream.read_exact(&mut reply).await?;
        std::io::Result::Ok(reply)
    };
    let reply = timeout(REPLY_TIMEOUT, exchange)
        .await
        .expect("TLS reply in time")
        .expect("TLS exchange");
    Message::from_vec(&reply).expect("reply decodes")
}

/// A certificate replaced on disk (new serial and subject, swapped in like a
/// Secret volume) is presented to new connections without a restart, while
/// connections already open keep answering; files that are not a certificate
/// then are rejected, counted, and the last good certificate keeps serving;
/// a shutdown closes the TLS connections still open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_certificate_is_served_without_restart() {
    let mut pki = Pki::new();
    let first = pki.issue("first", 101);
    let (server, tls) = start_tls(&pki).await;
    let metrics = server.running().metrics_addr;
    let mut open = connect(&pki, tls).await;
    assert_eq!(presented(&open), first);

    // The expiry gauge is the served certificate's notAfter: a day from
    // now, then 30 days once the 30-day certificate is taken.
    let expiry = "clusterset_dns_tls_certificate_expiry_timestamp_seconds";
    let days_left = || async { (scrape(metrics, expiry).await - unix_now()) / 86400.0 };
    let left = days_left().await;
    assert!((0.99..=1.0).contains(&left), "{left} days left");

    let second = pki.issue_for("second", 202, 30);
    assert_ne!(second, first);
    let deadline = Instant::now() + ROTATION_DEADLINE;
    loop {
        let stream = connect(&pki, tls).await;
        if presented(&stream) == second {
            break;
        }
        assert_eq!(presented(&stream), first, "old or new certificate only");
        assert!(
            Instant::now() < deadline,
            "rotation not served within {ROTATION_DEADLINE:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let answer = ask(&mut open, &svc("web.shop"), RecordType::A).await;
    assert_eq!(answer.metadata.response_code, ResponseCode::NoError);
    assert_eq!(answer.answers.len(), 1, "{answer:?}");
    assert_eq!(
        scrape(
            metrics,
            "clusterset_dns_tls_certificate_reloads_total{result=\"loaded\"}"
        )
        .await,
        1.0
    );

    pki.issue_garbage();
    let rejected = wait_for_metric(
        metrics,
        "clusterset_dns_tls_certificate_reloads_total{result=\"rejected\"}",
        1.0,
    )
    .await;
    assert_eq!(rejected, 1.0, "the bad files are read and rejected");
    let left = days_left().await;
    assert!(
        (29.99..=30.0).contains(&left),
        "{left} days left: the second's, kept"
    );
    let mut stream = connect(&pki, tls).await;
    assert_eq!(
        presented(&stream),
        second,
        "the last good certificate keeps serving"
    );
    let answer = ask(&mut stream, &svc("api.shop"), RecordType::A).await;
    assert_eq!(answer.metadata.response_code, ResponseCode::NoError);
    // Shutdown closes idle TLS connections rather than waiting for them.
    server.shutdown().await;
    let mut byte = [0u8; 1];
    let read = timeout(REPLY_TIMEOUT, stream.read(&mut byte)).await;
    assert!(
        matches!(read, Ok(Ok(0) | Err(_))),
        "the connection is closed: {read:?}"
    );
}

/// unbound running as it would be run, on a free port, killed on drop
/// (its log shown when the test fails).
struct Unbound {
    _daemon: Daemon,
    addr: SocketAddr,
    _dir: TempDir,
}

impl Unbound {
    /// unbound forwarding `clusterset.local` over TLS (`forward-tls-upstream`)
    /// to `upstream`, verifying its certificate for [`SERVER_NAME`] against
    /// `ca`, once it answers.
    async fn forward_tls(upstream: SocketAddr, ca: &Path) -> Self {
        let dir = TempDir::new().expect("temp dir");
        let addr = free_port();
        let config = format!(
            r#"server:
  interface: 127.0.0.1
  port: {port}
  do-ip6: no
  do-daemonize: no
  use-syslog: no
  logfile: ""
  verbosity: 1
  chroot: ""
  username: ""
  directory: "{dir}"
  pidfile: "{dir}/unbound.pid"
  module-config: "iterator"
  tls-cert-bundle: "{ca}"
  domain-insecure: "clusterset.local."
  do-not-query-localhost: no
forward-zone:
  name: "clusterset.local."
  forward-tls-upstream: yes
  forward-addr: {ip}@{tls_port}#{SERVER_NAME}
"#,
            port = addr.port(),
            dir = dir.path().display(),
            ca = ca.display(),
            ip = upstream.ip(),
            tls_port = upstream.port(),
        );
        let file = dir.path().join("unbound.conf");
        std::fs::write(&file, config).expect("config written");
        let mut daemon = Daemon::spawn(
            "unbound",
            program("unbound").arg("-c").arg(&file),
            dir.path(),
        );
        daemon.wait_answering(addr, TOOL_DEADLINE).await;
        Self {
            _daemon: daemon,
            addr,
            _dir: dir,
        }
    }
}

/// Asks unbound for `name` A over UDP until it answers (it may still be
/// starting), at most [`TOOL_DEADLINE`].
async fn ask_resolver(unbound: &Unbound, name: &str) -> Message {
    let probe = question(name, RecordType::A)
        .to_vec()
        .expect("query encodes");
    let deadline = Instant::now() + TOOL_DEADLINE;
    loop {
        if let Some(reply) = udp_raw(unbound.addr, &probe, Duration::from_millis(500)).await {
            return Message::from_vec(&reply).expect("unbound's reply decodes");
        }
        assert!(
            Instant::now() < deadline,
            "unbound did not answer within {TOOL_DEADLINE:?}"
        );
    }
}

/// The use case of RFC 7858 between clusters: a resolver (unbound,
/// `forward-tls-upstream: yes`, certificate verified) forwards the clusterset
/// zone over TLS and resolves names as the server answers them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unbound_forwards_over_tls() {
    let mut pki = Pki::new();
    pki.issue("first", 101);
    let (server, tls) = start_tls(&pki).await;
    let Outcome::Ips(direct) = resolve(server.addr, &svc("web.shop"), RecordType::A).await else {
        panic!("web.shop has an address");
    };
    let unbound = Unbound::forward_tls(tls, &pki.ca()).await;
    let through = ask_resolver(&unbound, &svc("web.shop")).await;
    assert_eq!(through.metadata.response_code, ResponseCode::NoError);
    let addresses: BTreeSet<IpAddr> = through
        .answers
        .iter()
        .filter_map(|r| r.data.ip_addr())
        .collect();
    assert_eq!(addresses, direct, "through unbound over TLS: {through:?}");
    let nxdomain = ask_resolver(&unbound, &svc("nope.shop")).await;
    assert_eq!(nxdomain.metadata.response_code, ResponseCode::NXDomain);
    let metrics = server.running().metrics_addr;
    assert!(scrape(metrics, "clusterset_dns_tls_handshakes_total").await >= 1.0);
    assert_eq!(
        scrape(
            metrics,
            "clusterset_dns_dns_requests_total{proto=\"udp\",type=\"A\"}"
        )
        .await,
        1.0,
        "only the direct question came over UDP: unbound asked over TLS"
    );
}

/// Runs `serve` (the real binary) on the demo, with its state in a
/// temporary folder, expecting a start-up failure; its stderr.
fn fails_to_start(args: &[&str]) -> String {
    let state = tempfile::tempdir().expect("a state folder");
    let state_file = state.path().join("vips.json").display().to_string();
    let mut words = vec![
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "127.0.0.1:0",
        "--state-file",
        &state_file,
    ];
    words.extend_from_slice(args);
    let output = run_binary(&words);
    assert!(!output.status.success(), "serve {args:?} started");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A missing certificate file is a start-up error naming it.
#[test]
fn a_missing_certificate_is_a_startup_error() {
    let mut pki = Pki::new();
    pki.issue("first", 101);
    let missing = pki.path().join("missing.crt").display().to_string();
    let key = pki.key().display().to_string();
    let stderr = fails_to_start(&[
        "--tls-listen",
        "127.0.0.1:0",
        "--tls-cert",
        &missing,
        "--tls-key",
        &key,
    ]);
    assert!(
        stderr.contains(&format!("cannot read the TLS certificate {missing}")),
        "{stderr}"
    );
}

/// A key file that holds no key, or the key of another certificate, is a
/// start-up error naming the file; `check` reports it too.
#[test]
fn a_garbage_key_is_a_startup_error() {
    let mut pki = Pki::new();
    pki.issue("first", 101);
    pki.issue("second", 202);
    let garbage = pki.path().join("garbage.key");
    std::fs::write(
        &garbage,
        "-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n",
    )
    .expect("written");
    let garbage = garbage.display().to_string();
    let cert = pki.path().join("gen1/tls.crt").display().to_string();
    let flags = [
        "--tls-listen",
        "127.0.0.1:0",
        "--tls-cert",
        &cert,
        "--tls-key",
        &garbage,
    ];
    let stderr = fails_to_start(&flags);
    let expected = format!("invalid private key in the TLS key file {garbage}");
    assert!(stderr.contains(&expected), "{stderr}");
    let output = run_binary(&[&["check"][..], &flags].concat());
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains(&expected), "{stderr}");

    let other = pki.path().join("gen2/tls.key").display().to_string();
    let stderr = fails_to_start(&[
        "--tls-listen",
        "127.0.0.1:0",
        "--tls-cert",
        &cert,
        "--tls-key",
        &other,
    ]);
    let expected = format!("the TLS key {other} does not belong to the certificate {cert}");
    assert!(stderr.contains(&expected), "{stderr}");
}

/// `--tls-listen` without a certificate says which flags are missing; a TLS
/// port that cannot be bound stops the program.
#[test]
fn tls_flags_are_checked_at_startup() {
    let stderr = fails_to_start(&["--tls-listen", "127.0.0.1:0"]);
    assert!(
        stderr.contains("--tls-listen needs --tls-cert and --tls-key"),
        "{stderr}"
    );
    let mut pki = Pki::new();
    pki.issue("first", 101);
    let holder = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let taken = holder.local_addr().expect("bound").to_string();
    let (cert, key) = (
        pki.cert().display().to_string(),
        pki.key().display().to_string(),
    );
    let stderr = fails_to_start(&[
        "--tls-listen",
        &taken,
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
    ]);
    assert!(
        stderr.contains(&format!("cannot listen for DNS over TLS on {taken}")),
        "{stderr}"
    );
}
