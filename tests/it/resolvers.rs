//! Real resolvers in front of the real binary, as pods reach the server:
//! unbound (default, strict QNAME minimisation, stub priming), BIND 9
//! (`type forward`, `type stub`), dnsdist (with its packet cache),
//! PowerDNS Recursor (`forward-zones`) and Knot Resolver (`policy.STUB`).
//!
//! Each test runs in a network namespace of its own (root: `unshare
//! (CLONE_NEWNET)` on a dedicated thread; everything it starts inherits it),
//! so that clusterset-dns answers on 127.0.0.2:53 (the NS target's address,
//! where `type stub` and `stub-prime` send queries) and the resolver on
//! 127.0.0.1:53. Every kind of name is asked through the resolver and must
//! come back as the server answers it directly; after a manifest edit the
//! resolver shows the change once the TTL (1 s) has passed.
//!
//! Without the resolver binaries (or without the privilege to make a
//! namespace) a test is skipped with a loud message, unless `CI` is set:
//! then it fails.

use std::collections::BTreeSet;
use std::fs;
use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::RecordType::{self, A, AAAA, SOA, SRV, TXT};
use tempfile::TempDir;
use tokio::time::timeout;

use crate::common::*;

/// Where clusterset-dns answers inside the namespace.
const SERVER: &str = "127.0.0.2:53";
/// Where the resolver answers.
const RESOLVER: &str = "127.0.0.1:53";
/// TTL of answers (and negative answers), kept short to see a change soon.
const TTL: Duration = Duration::from_secs(1);
/// How long a resolver may take to start answering.
const START: Duration = Duration::from_secs(10);

/// Runs `body` on a thread in a new network namespace with loopback up and
/// 127.0.0.2-5 on it (BIND listens only on interface addresses), on a
/// single-threaded runtime so every socket is made in that namespace.
/// Skipped (see [`skip`]) when the namespace cannot be made (not root).
fn in_namespace<F, Fut>(body: F)
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()>,
{
    let thread = std::thread::spawn(move || {
        if let Err(error) = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET) {
            return Err(format!("cannot make a network namespace: {error}"));
        }
        let mut commands = vec![vec!["link", "set", "lo", "up"]];
        let addresses: Vec<String> = (2..=5).map(|i| format!("127.0.0.{i}/8")).collect();
        for address in &addresses {
            commands.push(vec!["addr", "add", address, "dev", "lo"]);
        }
        for args in commands {
            let status = program("ip").args(&args).status();
            assert!(
                status.as_ref().is_ok_and(|s| s.success()),
                "ip {args:?}: {status:?}"
            );
        }
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
            .block_on(body());
        Ok(())
    });
    match thread.join() {
        Ok(Ok(())) => {}
        Ok(Err(reason)) => skip(&reason),
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// `web` (ClusterSetIP, dual-stack, port http), `db` (headless, in east and
/// west, port postgres) and `big` (headless, 90 endpoints: only TCP carries
/// the answer; BIND 9.18.28+ refuses more than 100 records of a type by
/// default, `max-records-per-type`).
fn clusterset() -> Clusterset {
    let cs = Clusterset::new();
    let web =
        cluster_ip("shop", "web", &["10.96.0.10", "fd00:96::a"]).ports(&[("http", 80, "TCP")]);
    let db = || headless("shop", "db", &["IPv4"]).ports(&[("postgres", 5432, "TCP")]);
    let big = headless("shop", "big", &["IPv4"]);
    let many: Vec<_> = (1..=90).map(|i| ep(&format!("10.8.0.{i}"))).collect();
    cs.write(
        "east",
        "shop.yaml",
        &[
            namespace("shop"),
            web.export(),
            web,
            db().export(),
            db(),
            big.export(),
            big,
            slice("shop", "big-1", "big", &many),
        ],
    );
    write_east_db(&cs, &[ep("10.1.1.10").host("db-0")]);
    cs.write(
        "west",
        "shop.yaml",
        &[
            db().export(),
            db(),
            slice("shop", "db-w1", "db", &[ep("10.2.1.10").host("db-0")]),
        ],
    );
    cs
}

fn write_east_db(cs: &Clusterset, endpoints: &[Ep]) {
    cs.write(
        "east",
        "db.yaml",
        &[slice("shop", "db-e1", "db", endpoints)],
    );
}

/// An answer as a stub resolver sees it: the code and the records of the
/// asked type (their data as text).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen {
    code: ResponseCode,
    records: BTreeSet<String>,
}

/// Asks `server` like a stub resolver: UDP with EDNS (1232), again over TCP
/// when truncated; a lost datagram is asked again.
async fn ask(server: SocketAddr, name: &str, rtype: RecordType) -> Seen {
    ask_telling_tcp(server, name, rtype).await.0
}

/// [`ask`], and whether the answer needed TCP.
async fn ask_telling_tcp(server: SocketAddr, name: &str, rtype: RecordType) -> (Seen, bool) {
    let query = with_edns(question(name, rtype), 1232);
    let bytes = query.to_vec().expect("query encodes");
    let mut reply = None;
    for _ in 0..3 {
        reply = udp_raw(server, &bytes, REPLY_TIMEOUT).await;
        if reply.is_some() {
            break;
        }
    }
    let reply = reply.unwrap_or_else(|| panic!("no reply from {server} to {name} {rtype}"));
    let mut message = Message::from_vec(&reply).expect("the reply parses");
    let truncated = message.metadata.truncation;
    if truncated {
        let whole = timeout(REPLY_TIMEOUT * 3, tcp_raw(server, &bytes))
            .await
            .unwrap_or_else(|_| panic!("no TCP reply from {server} to {name} {rtype}"));
        message = Message::from_vec(&whole).expect("the TCP reply parses");
        assert!(!message.metadata.truncation, "TCP answers are whole");
    }
    assert_eq!(message.metadata.id, query.metadata.id);
    let seen = Seen {
        code: message.metadata.response_code,
        records: message
            .answers
            .iter()
            .filter(|r| r.record_type() == rtype)
            .map(|r| r.data.to_string())
            .collect(),
    };
    (seen, truncated)
}

/// Starts the real binary on [`SERVER`] and waits until it has loaded.
async fn start_server(cs: &Clusterset, logs: &Path) -> Daemon {
    let ttl = TTL.as_secs().to_string();
    let server = Daemon::spawn(
        "clusterset-dns",
        Command::new(BIN)
            .args(["serve", "--manifests"])
            .arg(cs.dir())
            .args(["--listen", SERVER, "--metrics-listen", "127.0.0.2:9153"])
            .args(["--ttl", &ttl])
            .env("RUST_LOG", "warn"),
        logs,
    );
    let soa = |seen: &Seen| seen.code == ResponseCode::NoError && seen.records.len() == 1;
    wait_for(
        "clusterset-dns",
        addr(SERVER),
        "clusterset.local.",
        SOA,
        soa,
    )
    .await;
    server
}

/// Polls until asking `name` at `at` gives an answer `ready` accepts.
async fn wait_for(
    what: &str,
    at: SocketAddr,
    name: &str,
    rtype: RecordType,
    ready: impl Fn(&Seen) -> bool,
) {
    let deadline = Instant::now() + START;
    let query = with_edns(question(name, rtype), 1232)
        .to_vec()
        .expect("encodes");
    loop {
        if let Some(reply) = udp_raw(at, &query, Duration::from_millis(200)).await
            && let Ok(message) = Message::from_vec(&reply)
        {
            let seen = Seen {
                code: message.metadata.response_code,
                records: message.answers.iter().map(|r| r.data.to_string()).collect(),
            };
            if ready(&seen) {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{what} not answering {name} within {START:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn addr(text: &str) -> SocketAddr {
    text.parse().expect("an address")
}

/// Every kind of name, asked through the resolver, answers as the server
/// does directly (and as docs/dns.md says); then a change to the
/// manifests shows through the resolver once the TTL has passed.
async fn every_kind_of_name(resolver: SocketAddr, cs: &Clusterset) {
    let server = addr(SERVER);
    let name = |labels: &str| svc(labels);
    // (name, type, what the direct answer must be: records or a code)
    let (_, needs_tcp) = ask_telling_tcp(server, &name("big.shop"), A).await;
    assert!(needs_tcp, "big.shop does not fit 1232 bytes");
    let cases: [(String, RecordType, Expect); 12] = [
        (name("web.shop"), A, Expect::Records(1)),
        (name("web.shop"), AAAA, Expect::Records(1)),
        (name("db.shop"), A, Expect::Records(2)),
        // Cold, with strict QNAME minimisation walking `west.db…` first.
        (name("db-0.west.db.shop"), A, Expect::Records(1)),
        // An ancestor first (an empty non-terminal), then the name below it.
        (name("east.db.shop"), A, Expect::NoData),
        (name("db-0.east.db.shop"), A, Expect::Records(1)),
        (name("_postgres._tcp.db.shop"), SRV, Expect::Records(2)),
        (name("db.shop"), SRV, Expect::Records(2)),
        (name("big.shop"), A, Expect::Records(90)),
        (name("nope.shop"), A, Expect::NxDomain),
        (name("db-9.east.db.shop"), A, Expect::NxDomain),
        (name("web.shop"), TXT, Expect::NoData),
    ];
    for (name, rtype, expect) in &cases {
        let direct = ask(server, name, *rtype).await;
        expect.check(&direct, name, *rtype);
        let through = ask(resolver, name, *rtype).await;
        assert_eq!(through, direct, "{name} {rtype} through the resolver");
    }

    // A new pod: the server serves it at once, the resolver after the TTL.
    let db = name("db.shop");
    let before = ask(resolver, &db, A).await;
    write_east_db(
        cs,
        &[ep("10.1.1.10").host("db-0"), ep("10.1.1.11").host("db-1")],
    );
    let changed = |seen: &Seen| seen.records.contains("10.1.1.11");
    wait_for("the edit", server, &db, A, changed).await;
    let edited = Instant::now();
    let limit = TTL + Duration::from_secs(4);
    loop {
        let through = ask(resolver, &db, A).await;
        if changed(&through) {
            assert_eq!(through.records.len(), before.records.len() + 1);
            break;
        }
        assert!(
            edited.elapsed() < limit,
            "the resolver still answers {through:?} {limit:?} after the edit"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What the server itself must answer.
#[derive(Clone, Copy, Debug)]
enum Expect {
    Records(usize),
    NoData,
    NxDomain,
}

impl Expect {
    fn check(self, seen: &Seen, name: &str, rtype: RecordType) {
        let (code, count) = match self {
            Self::Records(n) => (ResponseCode::NoError, n),
            Self::NoData => (ResponseCode::NoError, 0),
            Self::NxDomain => (ResponseCode::NXDomain, 0),
        };
        assert_eq!(
            (seen.code, seen.records.len()),
            (code, count),
            "{name} {rtype} asked directly: {seen:?}"
        );
    }
}

/// Runs a resolver test: skipped without `programs`; in a namespace, starts
/// the server, then the resolver `start` returns, and asks every kind of name.
fn resolver_test(programs: &[&'static str], start: fn(&Path) -> Daemon) {
    if let Some(missing) = programs.iter().find(|p| installed(p).is_none()) {
        return skip(&format!("{missing} is not installed"));
    }
    in_namespace(move || async move {
        let dir = TempDir::new().expect("a temporary directory");
        let cs = clusterset();
        let _server = start_server(&cs, dir.path()).await;
        let _resolver = start(dir.path());
        let ready = |seen: &Seen| seen.code == ResponseCode::NoError && !seen.records.is_empty();
        wait_for("the resolver", addr(RESOLVER), &svc("web.shop"), A, ready).await;
        every_kind_of_name(addr(RESOLVER), &cs).await;
    });
}

/// An unbound configuration for the zone, with `extra` server options and
/// `stub` options.
fn unbound(dir: &Path, extra: &str, stub: &str) -> Daemon {
    let config = dir.join("unbound.conf");
    let text = format!(
        "server:\n  interface: 127.0.0.1\n  port: 53\n  do-daemonize: no\n  chroot: \"\"\n  \
         username: \"\"\n  pidfile: \"\"\n  directory: \"{dir}\"\n  use-syslog: no\n  \
         logfile: \"\"\n  do-ip6: no\n  do-not-query-localhost: no\n  module-config: \"iterator\"\n\
         {extra}stub-zone:\n  name: \"clusterset.local\"\n  stub-addr: 127.0.0.2\n{stub}",
        dir = dir.display()
    );
    fs::write(&config, text).expect("unbound.conf written");
    Daemon::spawn("unbound", program("unbound").arg("-c").arg(&config), dir)
}

/// unbound with its defaults (relaxed QNAME minimisation, no stub priming).
#[test]
fn unbound_default() {
    resolver_test(&["unbound", "ip"], |dir| unbound(dir, "", ""));
}

/// unbound with strict QNAME minimisation (RFC 9156 §2.3): it asks every
/// ancestor of a per-pod name and stops at an NXDOMAIN (RFC 8020), so empty
/// non-terminals must answer NODATA.
#[test]
fn unbound_strict_qname_minimisation() {
    resolver_test(&["unbound", "ip"], |dir| {
        unbound(dir, "  qname-minimisation-strict: yes\n", "")
    });
}

/// unbound priming the stub (`stub-prime: yes`): it asks the apex NS and
/// then resolves the NS target `ns.dns.clusterset.local`, which must have an
/// address (RFC 1034 §4.2.1).
#[test]
fn unbound_stub_prime() {
    resolver_test(&["unbound", "ip"], |dir| {
        unbound(
            dir,
            "  qname-minimisation-strict: yes\n",
            "  stub-prime: yes\n",
        )
    });
}

/// A BIND 9 configuration with the zone statement `zone`.
fn named(dir: &Path, zone: &str) -> Daemon {
    let config = dir.join("named.conf");
    let text = format!(
        "controls {{ }};\noptions {{\n  directory \"{dir}\";\n  pid-file none;\n  \
         listen-on port 53 {{ 127.0.0.1; }};\n  listen-on-v6 {{ none; }};\n  recursion yes;\n  \
         allow-query {{ any; }};\n  allow-recursion {{ any; }};\n  dnssec-validation no;\n}};\n\
         zone \"clusterset.local\" {{ {zone} }};\n",
        dir = dir.display()
    );
    fs::write(&config, text).expect("named.conf written");
    Daemon::spawn(
        "named",
        program("named").arg("-g").arg("-c").arg(&config),
        dir,
    )
}

/// BIND forwarding the zone to the server.
#[test]
fn bind_forward() {
    resolver_test(&["named", "ip"], |dir| {
        named(
            dir,
            "type forward; forward only; forwarders { 127.0.0.2; };",
        )
    });
}

/// BIND with a stub zone: it loads the apex NS and then needs the NS
/// target's address to resolve anything (else "loop detected", SERVFAIL).
#[test]
fn bind_stub() {
    resolver_test(&["named", "ip"], |dir| {
        named(
            dir,
            "type stub; primaries { 127.0.0.2; }; file \"stub.db\";",
        )
    });
}

/// dnsdist load-balancing to the server, with its packet cache.
#[test]
fn dnsdist() {
    resolver_test(&["dnsdist", "ip"], |dir| {
        let config = dir.join("dnsdist.conf");
        let text = "setSecurityPollSuffix(\"\")\nsetLocal(\"127.0.0.1:53\")\n\
             newServer({address=\"127.0.0.2:53\", checkName=\"clusterset.local.\", checkType=\"SOA\"})\n\
             getPool(\"\"):setCache(newPacketCache(10000))\n";
        fs::write(&config, text).expect("dnsdist.conf written");
        Daemon::spawn(
            "dnsdist",
            program("dnsdist")
                .args(["--supervised", "--disable-syslog", "-C"])
                .arg(&config),
            dir,
        )
    });
}

/// PowerDNS Recursor with the zone in `forward-zones` (queries without RD,
/// as to an authoritative server).
#[test]
fn powerdns_recursor_forward_zones() {
    resolver_test(&["pdns_recursor", "ip"], |dir| {
        Daemon::spawn(
            "pdns_recursor",
            program("pdns_recursor")
                .args([
                    "--local-address=127.0.0.1",
                    "--local-port=53",
                    "--forward-zones=clusterset.local=127.0.0.2",
                    "--daemon=no",
                    "--write-pid=no",
                    "--dnssec=off",
                    "--disable-syslog",
                ])
                .arg(format!("--socket-dir={}", dir.display()))
                .arg(format!("--config-dir={}", dir.display())),
            dir,
        )
    });
}

/// Knot Resolver sending the zone to the server (`policy.STUB`); its cache
/// keeps answers at least `cache.min_ttl`, lowered to the TTL here.
#[test]
fn knot_resolver_stub() {
    resolver_test(&["kresd", "ip"], |dir| {
        let config = dir.join("kresd.lua");
        let text = "net.listen('127.0.0.1', 53, { kind = 'dns' })\n\
             trust_anchors.remove('.')\ncache.size = 10 * MB\ncache.min_ttl(1)\n\
             policy.add(policy.suffix(policy.STUB({'127.0.0.2'}), {todname('clusterset.local.')}))\n";
        fs::write(&config, text).expect("kresd.lua written");
        Daemon::spawn(
            "kresd",
            program("kresd").arg("-n").arg("-c").arg(&config).arg(dir),
            dir,
        )
    });
}
