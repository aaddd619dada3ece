//! CoreDNS in front (issue 19): pods ask the cluster's CoreDNS, which
//! forwards `clusterset.local` to clusterset-dns with the block of
//! `config/kubernetes/coredns-stanza.txt` (docs/coredns.md, "Forwarding
//! over UDP, TCP or TLS").
//!
//! A real CoreDNS (v1.14.7, built from its Go module by `bash
//! tests/control-plane/build.sh` into `target/control-plane/`, or the folder
//! `CONTROL_PLANE_BIN` names) runs on 127.0.0.1 with a free port and the
//! Corefile of a default cluster without the `kubernetes` plugin (no API
//! server here): a `.` block with `errors`, `cache 30`, `loadbalance` and a
//! `forward` to a port nobody answers (standing in for /etc/resolv.conf),
//! and the stanza's block, read from the file, forwarding to clusterset-dns
//! (embedded mode, a manifest directory and a state file of each test's
//! own) over UDP, over TCP (`force_tcp`) or over TLS (`tls://`,
//! `tls_servername`, `tls CA`).
//!
//! A client asking CoreDNS gets what it gets from clusterset-dns directly,
//! for every kind of name, negative answers included; a big headless answer
//! is truncated over UDP and whole over TCP; a change shows through CoreDNS
//! within the TTL plus the reload time. Faults: clusterset-dns killed and
//! started again, SERVFAIL before its first sync, the TLS certificate
//! rotated while CoreDNS keeps forwarding.
//!
//! Without the CoreDNS binary a test is skipped with a loud message, unless
//! `CI` is set: then it fails, naming how to build it.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::Record;
use hickory_proto::rr::RecordType::{self, A, AAAA, NS, SOA, SRV, TXT};
use tempfile::TempDir;

use crate::common::*;

/// TTL of answers and of negative answers: the default of `--ttl`.
const TTL: u64 = 5;
/// How long a change may take to show through CoreDNS: a cache in front
/// may keep the old answer for the TTL, then the manifests must be reloaded
/// ([`RELOAD_DEADLINE`]), plus a second for the queries themselves.
const CHANGE_DEADLINE: Duration = Duration::from_secs(TTL + 2 + 1);
/// How long CoreDNS may take to start answering.
const START: Duration = Duration::from_secs(10);
/// How long answers may take to come back through CoreDNS once a killed
/// clusterset-dns answers again. Generous: what was seen is written at
/// [`restart`].
const RECOVERY_DEADLINE: Duration = Duration::from_secs(30);
/// How long clusterset-dns may take to serve a rotated certificate: it reads
/// the files every 2 s.
const ROTATION_DEADLINE: Duration = Duration::from_secs(8);
/// How long clusterset-dns may take to close CoreDNS's idle TLS connections
/// with `--tcp-idle-timeout 1`.
const IDLE_CLOSE_DEADLINE: Duration = Duration::from_secs(5);

/// The CoreDNS binary: `coredns` in `$CONTROL_PLANE_BIN`, else in the
/// crate's `target/control-plane/`. None when it is not built, after a
/// loud skip message (a failure when `CI` is set).
fn coredns() -> Option<PathBuf> {
    let dir = std::env::var_os("CONTROL_PLANE_BIN").map_or_else(
        || Path::new(CRATE_ROOT).join("target/control-plane"),
        PathBuf::from,
    );
    let binary = dir.join("coredns");
    if binary.is_file() {
        return Some(binary);
    }
    skip(&format!(
        "CoreDNS is not built: no {} (build it with `bash tests/control-plane/build.sh`, \
         or set CONTROL_PLANE_BIN to the folder holding `coredns`)",
        binary.display()
    ));
    None
}

/// How CoreDNS forwards the zone to clusterset-dns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Transport {
    /// `forward . IP:PORT`: over the transport the client used.
    Udp,
    /// `force_tcp`: over TCP whatever the client used.
    Tcp,
    /// `forward . tls://IP:PORT`, the certificate verified for
    /// [`SERVER_NAME`] against the test CA.
    Tls,
}

impl Transport {
    /// The `proto` label of clusterset-dns's request metrics for it.
    fn proto(self) -> &'static str {
        match self {
            Self::Udp => "udp",
            Self::Tcp => "tcp",
            Self::Tls => "tls",
        }
    }

    /// The `forward` directive of the zone's block, sending to `server`
    /// (clusterset-dns's TLS address for [`Transport::Tls`], whose
    /// certificate `pki`'s CA signs): the lines of docs/coredns.md's snippets.
    fn forward(self, server: SocketAddr, pki: &Pki) -> String {
        match self {
            Self::Udp => format!("    forward . {server}\n"),
            Self::Tcp => format!("    forward . {server} {{\n        force_tcp\n    }}\n"),
            Self::Tls => format!(
                "    forward . tls://{server} {{\n        tls_servername {SERVER_NAME}\n        \
                 tls {}\n    }}\n",
                pki.ca().display()
            ),
        }
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Udp => "UDP",
            Self::Tcp => "force_tcp",
            Self::Tls => "TLS",
        })
    }
}

/// The Corefile of a default cluster without the `kubernetes` plugin, on
/// `port`: `.` forwarded to `resolv_conf`, and `zone_block`.
fn corefile(port: u16, resolv_conf: SocketAddr, zone_block: &str) -> String {
    format!(
        ".:{port} {{\n    bind 127.0.0.1\n    errors\n    cache 30\n    loadbalance\n    \
         forward . {resolv_conf}\n}}\n\n{zone_block}"
    )
}

/// A CoreDNS process in front of clusterset-dns, killed when dropped.
struct CoreDns {
    /// Where it answers (UDP and TCP).
    addr: SocketAddr,
    _daemon: Daemon,
    _dir: TempDir,
}

impl CoreDns {
    /// Starts CoreDNS with `directives` in place of the stanza's `forward`
    /// line, and waits until it answers anything (clusterset-dns need not be
    /// up).
    async fn start(binary: &Path, directives: &str) -> Self {
        let dir = TempDir::new().expect("a temporary directory");
        let (addr, nobody) = (free_port(), free_port());
        let zone = stanza(addr.port(), directives);
        let conf = dir.path().join("Corefile");
        fs::write(&conf, corefile(addr.port(), nobody, &zone)).expect("Corefile written");
        let mut daemon = Daemon::spawn(
            "coredns",
            Command::new(binary).arg("-conf").arg(&conf),
            dir.path(),
        );
        daemon.wait_answering(addr, START).await;
        Self {
            addr,
            _daemon: daemon,
            _dir: dir,
        }
    }
}

/// Records as `name class type data`, each with its TTL.
type Records = BTreeMap<String, u32>;

/// A response as a client sees it: everything but the message id.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Reply {
    code: ResponseCode,
    authoritative: bool,
    truncated: bool,
    answers: Records,
    authority: Records,
    additional: Records,
    /// The OPT record's payload size and DO bit (RFC 6891 §6.1.3).
    edns: Option<(u16, bool)>,
}

impl Reply {
    fn of(message: &Message) -> Self {
        let records = |records: &[Record]| -> Records {
            records
                .iter()
                .map(|r| {
                    let text = format!("{} {} {} {}", r.name, r.dns_class, r.record_type(), r.data);
                    (text, r.ttl)
                })
                .collect()
        };
        Self {
            code: message.metadata.response_code,
            authoritative: message.metadata.authoritative,
            truncated: message.metadata.truncation,
            answers: records(&message.answers),
            authority: records(&message.authorities),
            additional: records(&message.additionals),
            edns: message
                .edns
                .as_ref()
                .map(|edns| (edns.max_payload(), edns.flags().dnssec_ok)),
        }
    }

    /// Whether this is `direct` as a cache may give it: the same but for
    /// TTLs that are not longer (RFC 1035 §3.2.1: a cache counts them down;
    /// RFC 2308 §5 for the SOA of a negative answer).
    fn is_like(&self, direct: &Reply) -> bool {
        let no_longer = |ours: &Records, theirs: &Records| {
            ours.len() == theirs.len()
                && ours
                    .iter()
                    .all(|(record, ttl)| theirs.get(record).is_some_and(|t| t <= ttl))
        };
        let without_records = |reply: &Reply| Reply {
            answers: Records::new(),
            authority: Records::new(),
            additional: Records::new(),
            ..reply.clone()
        };
        without_records(self) == without_records(direct)
            && no_longer(&direct.answers, &self.answers)
            && no_longer(&direct.authority, &self.authority)
            && no_longer(&direct.additional, &self.additional)
    }
}

/// Asks over UDP with EDNS (1232 bytes, as stub resolvers do).
async fn udp(at: SocketAddr, name: &str, rtype: RecordType) -> Reply {
    let (message, _) = exchange_udp(at, &with_edns(question(name, rtype), 1232)).await;
    Reply::of(&message)
}

/// Asks over UDP without EDNS (512 bytes, RFC 1035 §4.2.1).
async fn udp_512(at: SocketAddr, name: &str, rtype: RecordType) -> Reply {
    Reply::of(&query(at, name, rtype).await)
}

/// Asks over TCP with EDNS.
async fn tcp(at: SocketAddr, name: &str, rtype: RecordType) -> Reply {
    Reply::of(&exchange_tcp(at, &with_edns(question(name, rtype), 1232)).await)
}

/// One UDP query with EDNS, asked once: None when no reply came within the
/// client's timeout.
async fn udp_once(at: SocketAddr, name: &str, rtype: RecordType) -> Option<Reply> {
    let query = with_edns(question(name, rtype), 1232);
    let bytes = query.to_vec().expect("query encodes");
    let reply = udp_raw(at, &bytes, REPLY_TIMEOUT).await?;
    let message = Message::from_vec(&reply).expect("the reply decodes");
    assert_eq!(message.metadata.id, query.metadata.id, "id echoed");
    Some(Reply::of(&message))
}

/// `web` (ClusterSetIP, dual-stack: a VIP of each family, port http), `web4`
/// (IPv4 only: AAAA is NODATA), `db` (headless, in east and west, named
/// pods, port postgres) and `big` (headless, 90 endpoints: more than 1232
/// bytes).
fn clusterset() -> Clusterset {
    let cs = Clusterset::new();
    let web = cluster_ip("shop", "web", &["10.96.0.10", "fd00:96::a"]);
    let web4 = cluster_ip("shop", "web4", &["10.96.0.11"]);
    let db = || headless("shop", "db", &["IPv4"]).ports(&[("postgres", 5432, "TCP")]);
    let big = headless("shop", "big", &["IPv4"]);
    let many: Vec<Ep> = (1..=90).map(|i| ep(&format!("10.8.0.{i}"))).collect();
    let mut east = vec![namespace("shop")];
    for service in [web, web4, db(), big] {
        east.extend(service.exported());
    }
    east.push(slice("shop", "big-1", "big", &many));
    cs.write("east", "shop.yaml", &east);
    write_east_db(&cs, true);
    let west_db = slice("shop", "db-w1", "db", &[ep("10.2.1.10").host("db-0")]);
    let mut west = db().exported();
    west.push(west_db);
    cs.write("west", "shop.yaml", &west);
    cs
}

/// The EndpointSlice of `db` in east: `db-0`, and `db-1` ready or not.
fn write_east_db(cs: &Clusterset, db1_ready: bool) {
    let db1 = ep("10.1.1.11").host("db-1");
    let db1 = if db1_ready { db1 } else { db1.not_ready() };
    let endpoints = [ep("10.1.1.10").host("db-0"), db1];
    cs.write(
        "east",
        "db.yaml",
        &[slice("shop", "db-e1", "db", &endpoints)],
    );
}

/// Exports `new` (ClusterSetIP) from east, in a file of its own.
fn export_new(cs: &Clusterset) {
    let new = cluster_ip("shop", "new", &["10.96.0.12"]);
    cs.write("east", "new.yaml", &new.exported());
}

/// What clusterset-dns must answer itself: the code and the number of
/// answer records.
type Expected = (ResponseCode, usize);
const NODATA: Expected = (ResponseCode::NoError, 0);
const NXDOMAIN: Expected = (ResponseCode::NXDomain, 0);

fn records(count: usize) -> Expected {
    (ResponseCode::NoError, count)
}

/// Asks `name` of clusterset-dns and through CoreDNS, over UDP and over
/// TCP, and requires the same responses (TTLs included: nothing in front
/// keeps them); checks the direct answer against `expected`, and the SOA
/// of a negative answer. The direct UDP reply.
async fn same_through(
    server: SocketAddr,
    front: &CoreDns,
    name: &str,
    rtype: RecordType,
    expected: Expected,
) -> Reply {
    let direct = udp(server, name, rtype).await;
    assert_eq!(
        (direct.code, direct.answers.len()),
        expected,
        "{name} {rtype} asked directly: {direct:#?}"
    );
    let through = udp(front.addr, name, rtype).await;
    assert_eq!(through, direct, "{name} {rtype} through CoreDNS over UDP");
    let through_tcp = tcp(front.addr, name, rtype).await;
    assert_eq!(
        through_tcp,
        tcp(server, name, rtype).await,
        "{name} {rtype} through CoreDNS over TCP"
    );
    if through.answers.is_empty() {
        negative_soa_is_ours(&through, &direct, name);
    }
    direct
}

/// RFC 2308 §3: a negative answer carries the zone's SOA in the authority
/// section, so that caches know how long to keep it; §5: that is the
/// smaller of the SOA's TTL and its MINIMUM, so the SOA through CoreDNS
/// must not say longer than clusterset-dns's does.
fn negative_soa_is_ours(through: &Reply, direct: &Reply, name: &str) {
    let ours = negative_ttl(direct, name);
    assert_eq!(u64::from(ours), TTL, "{name}: our negative TTL");
    let theirs = negative_ttl(through, name);
    assert!(
        theirs <= ours,
        "RFC 2308 §5: {name}'s SOA says {theirs} s through CoreDNS, ours {ours} s"
    );
}

/// How long a negative answer may be kept: the smaller of its one SOA's
/// TTL and MINIMUM (RFC 2308 §5).
fn negative_ttl(reply: &Reply, name: &str) -> u32 {
    let soas: Vec<(&String, &u32)> = reply
        .authority
        .iter()
        .filter(|(record, _)| record.contains(" IN SOA "))
        .collect();
    assert_eq!(soas.len(), 1, "{name}: one SOA in {reply:#?}");
    let (record, ttl) = soas[0];
    let minimum: u32 = record
        .rsplit(' ')
        .next()
        .and_then(|m| m.parse().ok())
        .expect("the SOA's MINIMUM");
    minimum.min(*ttl)
}

/// clusterset-dns (in-process) with CoreDNS in front.
struct Stack {
    server: Server,
    front: CoreDns,
    /// The CA of the TLS certificate (served with [`Transport::Tls`]).
    pki: Pki,
    _state: TempDir,
}

impl Stack {
    /// Serves `cs` with [`server_flags`] and `extra` flags, then starts
    /// CoreDNS forwarding to it over `transport`, with `before` (directives)
    /// ahead of the `forward` in the zone's block.
    async fn start(
        binary: &Path,
        transport: Transport,
        cs: &Clusterset,
        extra: &[&str],
        before: &str,
    ) -> Self {
        let mut pki = Pki::new();
        let state = TempDir::new().expect("a temporary directory");
        let flags = server_flags(transport, &mut pki, &state, "127.0.0.1:0");
        let mut flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        flags.extend_from_slice(extra);
        let server = start(cs.dir(), &flags).await;
        let upstream = match transport {
            Transport::Tls => server.running().tls_addr.expect("a TLS listener"),
            _ => server.addr,
        };
        let directives = format!("{before}{}", transport.forward(upstream, &pki));
        let front = CoreDns::start(binary, &directives).await;
        Self {
            server,
            front,
            pki,
            _state: state,
        }
    }
}

/// The flags of clusterset-dns beside the DNS address: a state file in
/// `state`, and for [`Transport::Tls`] a certificate of `pki`'s CA served on
/// `tls_listen`.
fn server_flags(
    transport: Transport,
    pki: &mut Pki,
    state: &TempDir,
    tls_listen: &str,
) -> Vec<String> {
    let state_file = state.path().join("vips.json").display().to_string();
    let mut flags = vec!["--state-file".to_owned(), state_file];
    if transport == Transport::Tls {
        pki.issue("first", 101);
        flags.extend(pki.flags_on(tls_listen));
    }
    flags
}

/// Serves [`clusterset`], puts CoreDNS in front over `transport`, and asks
/// every kind of name both ways; then changes the clusterset.
async fn answers_as_direct(transport: Transport) {
    let Some(binary) = coredns() else { return };
    let cs = clusterset();
    // Held whole: its state folder and certificate files must outlive the queries.
    let stack = Stack::start(&binary, transport, &cs, &[], "").await;
    let (direct, front) = (stack.server.addr, &stack.front);

    // A client's UDP question reaches clusterset-dns over the transport set.
    let series = format!(
        "clusterset_dns_dns_requests_total{{proto=\"{}\",type=\"A\"}}",
        transport.proto()
    );
    let metrics = stack.server.running().metrics_addr;
    let before = scrape(metrics, &series).await;
    udp(front.addr, &svc("web.shop"), A).await;
    assert_eq!(scrape(metrics, &series).await, before + 1.0, "{series}");

    let cases = [
        (svc("web.shop"), A, records(1)),
        (svc("web.shop"), AAAA, records(1)),
        (svc("web.shop"), TXT, NODATA),
        (svc("web4.shop"), AAAA, NODATA),
        (svc("_http._tcp.web.shop"), SRV, records(1)),
        (svc("db.shop"), A, records(3)),
        (svc("db.shop"), SRV, records(3)),
        (svc("_postgres._tcp.db.shop"), SRV, records(3)),
        (svc("db-0.east.db.shop"), A, records(1)),
        (svc("db-1.east.db.shop"), A, records(1)),
        (svc("db-0.west.db.shop"), A, records(1)),
        // An empty non-terminal (RFC 8020): NODATA, not NXDOMAIN.
        (svc("east.db.shop"), A, NODATA),
        (svc("nope.shop"), A, NXDOMAIN),
        (svc("db-9.east.db.shop"), A, NXDOMAIN),
        ("clusterset.local.".into(), SOA, records(1)),
        ("clusterset.local.".into(), NS, records(1)),
    ];
    for (name, rtype, expected) in &cases {
        same_through(direct, front, name, *rtype, *expected).await;
    }

    // Outside the zone the `.` block answers: its forwarder does not, so
    // SERVFAIL, where clusterset-dns itself refuses (it is no resolver).
    assert_eq!(
        udp(direct, "example.org.", A).await.code,
        ResponseCode::Refused
    );
    assert_eq!(
        udp(front.addr, "example.org.", A).await.code,
        ResponseCode::ServFail,
        "the `.` block forwards elsewhere"
    );

    big_answer(direct, front).await;

    // A new export: NXDOMAIN first (a cache in front may keep that for the
    // SOA's TTL), then its VIP, through CoreDNS within the TTL and a reload.
    let new = svc("new.shop");
    same_through(direct, front, &new, A, NXDOMAIN).await;
    export_new(&cs);
    eventually("the new export served", true, || async {
        udp(direct, &new, A).await.code == ResponseCode::NoError
    })
    .await;
    let served = udp(direct, &new, A).await;
    eventually_within(
        CHANGE_DEADLINE,
        "the new export through CoreDNS",
        served,
        || udp(front.addr, &new, A),
    )
    .await;
    same_through(direct, front, &new, A, records(1)).await;

    // db-1 in east turns not ready: it leaves the service's addresses and
    // SRV records, and its own name goes away.
    write_east_db(&cs, false);
    eventually("db-1 not ready", 2, || async {
        udp(direct, &svc("db.shop"), A).await.answers.len()
    })
    .await;
    let db = svc("db.shop");
    let served = udp(direct, &db, A).await;
    eventually_within(CHANGE_DEADLINE, "db-1 gone through CoreDNS", served, || {
        udp(front.addr, &db, A)
    })
    .await;
    same_through(direct, front, &db, A, records(2)).await;
    let srv = same_through(
        direct,
        front,
        &svc("_postgres._tcp.db.shop"),
        SRV,
        records(2),
    )
    .await;
    assert!(
        !srv.answers.keys().any(|r| r.contains("db-1.east")),
        "{srv:#?}"
    );
    same_through(direct, front, &svc("db-1.east.db.shop"), A, NXDOMAIN).await;
}

/// `big.shop` (90 records) does not fit 1232 bytes, nor 512: over UDP
/// clusterset-dns and CoreDNS set TC and send only whole records
/// (RFC 1035 §4.2.1, RFC 2181 §9), and the client asks again over TCP,
/// which carries the whole answer (RFC 7766 §5), through CoreDNS as
/// directly.
async fn big_answer(server: SocketAddr, front: &CoreDns) {
    let big = svc("big.shop");
    let whole = tcp(server, &big, A).await;
    assert_eq!(whole.answers.len(), 90, "{whole:#?}");
    assert!(!whole.truncated);
    assert_eq!(
        tcp(front.addr, &big, A).await,
        whole,
        "through CoreDNS over TCP"
    );
    for (size, direct, through) in [
        (
            1232,
            udp(server, &big, A).await,
            udp(front.addr, &big, A).await,
        ),
        (
            512,
            udp_512(server, &big, A).await,
            udp_512(front.addr, &big, A).await,
        ),
    ] {
        for (who, reply) in [("directly", &direct), ("through CoreDNS", &through)] {
            assert!(reply.truncated, "{size} bytes {who}: TC set: {reply:#?}");
            assert_eq!(reply.code, ResponseCode::NoError);
            assert!(
                reply
                    .answers
                    .iter()
                    .all(|r| whole.answers.get(r.0) == Some(r.1))
                    && reply.answers.len() < 90,
                "{size} bytes {who}: whole records of the answer: {reply:#?}"
            );
        }
    }
}

/// Plain UDP: the stanza as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_over_udp_answers_as_direct() {
    answers_as_direct(Transport::Udp).await;
}

/// `force_tcp`: CoreDNS asks over TCP, and truncates for UDP clients itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_over_tcp_answers_as_direct() {
    answers_as_direct(Transport::Tcp).await;
}

/// DNS over TLS (RFC 7858), the certificate verified against the test CA
/// for its name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_over_tls_answers_as_direct() {
    answers_as_direct(Transport::Tls).await;
}

/// clusterset-dns killed (as a crashed or evicted pod is) and started
/// again on the same address with the same state file, CoreDNS left alone:
/// meanwhile a client gets SERVFAIL, no reply or (from a cache) the answer
/// from before, never another one; then the answers come back by
/// themselves.
///
/// Seen on a 2-core machine (debug build), UDP, force_tcp and TLS alike:
/// while clusterset-dns was down CoreDNS answered SERVFAIL at once (the
/// port refused: ICMP for UDP, RST for TCP; its `errors` plugin logs
/// `connection refused`); once clusterset-dns answered directly, the very
/// first query through CoreDNS answered too, 2 to 60 ms later (TLS the
/// slowest: a new handshake). The `eprintln!` below prints it per run.
async fn restart(binary: &Path, transport: Transport) {
    let cs = clusterset();
    let (state, mut pki, tls) = (
        TempDir::new().expect("a temporary directory"),
        Pki::new(),
        free_port(),
    );
    let flags = server_flags(transport, &mut pki, &state, &tls.to_string());
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let server = spawn_binary_on(free_port(), cs.dir(), &flags)
        .await
        .unwrap_or_else(|stderr| panic!("clusterset-dns did not start: {stderr}"));
    let addr = server.addr;
    let upstream = if transport == Transport::Tls {
        tls
    } else {
        addr
    };
    let front = CoreDns::start(binary, &transport.forward(upstream, &pki)).await;
    let web = svc("web.shop");
    let before = udp(addr, &web, A).await;
    assert_eq!(
        udp(front.addr, &web, A).await,
        before,
        "through CoreDNS ({transport})"
    );

    drop(server);
    let mut down = Vec::new();
    while down.len() < 3 {
        let reply = udp_once(front.addr, &web, A).await;
        let code = reply.as_ref().map(|r| r.code);
        assert!(
            code.is_none_or(|c| c == ResponseCode::ServFail)
                || reply.as_ref().is_some_and(|r| r.is_like(&before)),
            "through CoreDNS ({transport}) while clusterset-dns is down: {reply:#?}"
        );
        down.push(code);
    }

    let restarted = spawn_binary_on(addr, cs.dir(), &flags)
        .await
        .unwrap_or_else(|stderr| panic!("clusterset-dns did not start again: {stderr}"));
    let answering = Instant::now();
    let failures = RefCell::new(Vec::new());
    eventually_within(
        RECOVERY_DEADLINE,
        "answers through CoreDNS after the restart",
        true,
        || async {
            let reply = udp_once(front.addr, &web, A).await;
            let back = reply.as_ref().is_some_and(|r| r.is_like(&before));
            if !back {
                failures.borrow_mut().push(reply.map(|r| r.code));
            }
            back
        },
    )
    .await;
    eprintln!(
        "CoreDNS ({transport}): while clusterset-dns was down {down:?}; once it answered \
         again {:?}, then the answer {:?} later",
        failures.into_inner(),
        answering.elapsed()
    );
    drop(restarted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_behind_each_transport() {
    let Some(binary) = coredns() else { return };
    for transport in [Transport::Udp, Transport::Tcp, Transport::Tls] {
        restart(&binary, transport).await;
    }
}

/// Before its first sync clusterset-dns answers SERVFAIL (never a wrong
/// NXDOMAIN); CoreDNS passes that on unchanged, and keeps it no longer
/// than it may: once clusterset-dns has loaded, the answer shows through
/// CoreDNS within the TTL plus the reload time (RFC 2308 §7.1 lets a
/// resolver keep a server failure five minutes at most; CoreDNS's `cache`
/// keeps one 5 s by default, and the stanza's block has none: the first
/// query after the sync answers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servfail_before_the_first_sync_is_passed_through() {
    let Some(binary) = coredns() else { return };
    let cs = Clusterset::new();
    write_bulk(&cs, 3000);
    let (addr, mut pki) = (free_port(), Pki::new());
    // CoreDNS first: its upstream does not listen yet.
    let front = CoreDns::start(&binary, &Transport::Udp.forward(addr, &pki)).await;
    let state = TempDir::new().expect("a temporary directory");
    let mut flags = server_flags(Transport::Udp, &mut pki, &state, "");
    flags.extend(["--listen".to_owned(), addr.to_string()]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let server = start_loading(cs.dir(), &flags).await;
    let index = &server.running().index;
    let name = svc("s1.bulk");
    let mut passed_on = 0;
    while !index.is_synced() {
        let direct = udp(addr, &name, A).await;
        let through = udp(front.addr, &name, A).await;
        // Both answered before the sync completed (checked after the replies came).
        if !index.is_synced() {
            assert_eq!(direct.code, ResponseCode::ServFail, "{direct:#?}");
            assert_eq!(through, direct, "SERVFAIL through CoreDNS as it is");
            passed_on += 1;
        }
    }
    assert!(
        passed_on > 0,
        "the load finished before a query went through CoreDNS: make it bigger"
    );
    let served = udp(addr, &name, A).await;
    assert_eq!((served.code, served.answers.len()), records(1));
    let servfails = Cell::new(0);
    eventually_within(
        CHANGE_DEADLINE,
        "the answer through CoreDNS after the first sync",
        served,
        || async {
            let reply = udp(front.addr, &name, A).await;
            servfails.set(servfails.get() + usize::from(reply.code == ResponseCode::ServFail));
            reply
        },
    )
    .await;
    eprintln!(
        "{passed_on} SERVFAIL passed on before the sync, {} after it",
        servfails.get()
    );
}

/// DNS over TLS from CoreDNS while clusterset-dns's certificate is rotated
/// as a Secret volume is: every query through CoreDNS keeps its answer, and
/// once CoreDNS's connections are closed (idle, after 1 s here) it connects
/// again and accepts the new certificate (RFC 7858 §4.2: a strict profile,
/// the name verified against the CA; no handshake fails).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_certificate_rotated_while_coredns_forwards() {
    let Some(binary) = coredns() else { return };
    let cs = clusterset();
    let idle = ["--tcp-idle-timeout", "1"];
    let mut stack = Stack::start(&binary, Transport::Tls, &cs, &idle, "").await;
    let (front, metrics) = (stack.front.addr, stack.server.running().metrics_addr);
    let web = svc("web.shop");
    let direct = udp(stack.server.addr, &web, A).await;
    assert_eq!(
        udp(front, &web, A).await,
        direct,
        "through CoreDNS over TLS"
    );
    let handshakes = "clusterset_dns_tls_handshakes_total";
    assert!(scrape(metrics, handshakes).await >= 1.0);

    stack.pki.issue("second", 202);
    let loaded = "clusterset_dns_tls_certificate_reloads_total{result=\"loaded\"}";
    eventually_within(
        ROTATION_DEADLINE,
        "the new certificate loaded",
        1.0,
        || async {
            let through = udp(front, &web, A).await;
            assert!(
                through.is_like(&direct),
                "through CoreDNS during the rotation: {through:#?}"
            );
            scrape(metrics, loaded).await
        },
    )
    .await;
    let before = scrape(metrics, handshakes).await;
    eventually_within(
        IDLE_CLOSE_DEADLINE,
        "CoreDNS's TLS connections closed idle",
        0.0,
        || scrape(metrics, "clusterset_dns_dns_tcp_connections"),
    )
    .await;
    let through = udp(front, &web, A).await;
    assert!(
        through.is_like(&direct),
        "through CoreDNS on a new TLS connection: {through:#?}"
    );
    assert!(
        scrape(metrics, handshakes).await > before,
        "CoreDNS connected again, so to the new certificate"
    );
    assert_eq!(
        scrape(metrics, "clusterset_dns_tls_handshake_failures_total").await,
        0.0,
        "CoreDNS accepted every certificate it was shown"
    );
}

/// With `cache 30` added to the zone's block (as the `.` block has it),
/// CoreDNS answers a repeated question from its cache, negative ones
/// included, for no longer than clusterset-dns's TTLs say (RFC 2308 §5:
/// the smaller of the SOA's TTL and MINIMUM, 5 s, which is also the
/// cache's least; with `--ttl` below 5 it would keep answers 5 s, longer
/// than they say), and a new export shows within the TTL plus the reload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_in_the_zone_block_keeps_negatives_no_longer_than_our_soa() {
    let Some(binary) = coredns() else { return };
    let cs = clusterset();
    let stack = Stack::start(&binary, Transport::Udp, &cs, &[], "    cache 30\n").await;
    let (direct, front, metrics) = (
        stack.server.addr,
        stack.front.addr,
        stack.server.running().metrics_addr,
    );
    let asked = "clusterset_dns_dns_requests_total{proto=\"udp\",type=\"A\"}";
    for (labels, expected) in [
        ("new.shop", ResponseCode::NXDomain),
        ("web.shop", ResponseCode::NoError),
    ] {
        let name = svc(labels);
        let ours = udp(direct, &name, A).await;
        assert_eq!(ours.code, expected, "{ours:#?}");
        let first = udp(front, &name, A).await;
        let count = scrape(metrics, asked).await;
        let cached = udp(front, &name, A).await;
        assert_eq!(
            scrape(metrics, asked).await,
            count,
            "{name}: the cache answered"
        );
        for reply in [&first, &cached] {
            assert!(
                reply.is_like(&ours),
                "{name} through CoreDNS: {reply:#?}, ours {ours:#?}"
            );
        }
        if expected == ResponseCode::NXDomain {
            negative_soa_is_ours(&cached, &ours, &name);
        }
    }
    // The NXDOMAIN of new.shop is in the cache: the export shows once it ends.
    let new = svc("new.shop");
    export_new(&cs);
    eventually("the new export served", ResponseCode::NoError, || async {
        udp(direct, &new, A).await.code
    })
    .await;
    eventually_within(
        CHANGE_DEADLINE,
        "the new export through CoreDNS",
        ResponseCode::NoError,
        || async { udp(front, &new, A).await.code },
    )
    .await;
}
