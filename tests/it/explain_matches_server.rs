//! `explain` and the server it explains are one assembly (ARCHITECTURE.md,
//! "The flow"): given the same flags, `explain NAME TYPE` reports the rcode,
//! AA flag and records the running server answers, for every kind of name
//! the zone has (RFC 1035 §4.1.1 RCODE; the MCS DNS specification's
//! service, headless, per-pod and SRV names; RFC 2308 negative answers;
//! RFC 1035 §3.5 PTR in the reverse zones) — in embedded mode and in
//! Kubernetes mode, where a member without a service's namespace serves no
//! name of it (KEP-1645 "Namespace sameness").

use std::net::{IpAddr, SocketAddr};
use std::path::Path;

use clusterset_dns::cli::Command as CliCommand;
use clusterset_dns::commands::explain;
use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::{Name, Record, RecordType};
use serde_json::Value;
use test_support::kube_clusterset::*;

use crate::common::*;

/// The flags both the server and `explain` get: reverse zones (the VIP
/// pools' and one for pod addresses) and, through the harness, a
/// non-wildcard `--listen` (so `ns.dns.<zone>` has an address).
const REVERSE: [&str; 3] = ["--reverse-vip-pools", "--reverse-zone", "10.in-addr.arpa"];

/// What a response comes to: rcode, AA, and the answer and authority
/// sections as `dig` prints them, sorted, SOA serials left out (the server
/// and `explain` start their serials at different times).
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    rcode: String,
    authoritative: bool,
    answers: Vec<String>,
    authority: Vec<String>,
}

/// A record as `dig` prints it, an SOA without its serial.
fn normalized(record: &str) -> String {
    let fields: Vec<&str> = record.split_whitespace().collect();
    match fields.as_slice() {
        [owner, ttl, class, "SOA", mname, rname, _serial, rest @ ..] => {
            format!(
                "{owner} {ttl} {class} SOA {mname} {rname} <serial> {}",
                rest.join(" ")
            )
        }
        _ => fields.join(" "),
    }
}

fn sorted<'a>(records: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut records: Vec<String> = records.map(normalized).collect();
    records.sort();
    records
}

fn rcode(code: ResponseCode) -> String {
    match code {
        ResponseCode::NoError => "NOERROR".into(),
        ResponseCode::NXDomain => "NXDOMAIN".into(),
        ResponseCode::ServFail => "SERVFAIL".into(),
        ResponseCode::Refused => "REFUSED".into(),
        other => other.to_str().to_uppercase(),
    }
}

fn from_dns(response: &Message) -> Seen {
    let text = |records: &[Record]| -> Vec<String> {
        let printed: Vec<String> = records.iter().map(ToString::to_string).collect();
        sorted(printed.iter().map(String::as_str))
    };
    Seen {
        rcode: rcode(response.metadata.response_code),
        authoritative: response.metadata.authoritative,
        answers: text(&response.answers),
        authority: text(&response.authorities),
    }
}

fn from_explain(e: &Value) -> Seen {
    let text = |section: &Value| {
        sorted(
            section
                .as_array()
                .expect("a list of records")
                .iter()
                .map(|r| r.as_str().expect("a record")),
        )
    };
    let answer = &e["answer"];
    Seen {
        rcode: answer["rcode"].as_str().expect("an rcode").to_owned(),
        authoritative: answer["authoritative"].as_bool().expect("AA"),
        answers: text(&answer["answers"]),
        authority: text(&answer["authority"]),
    }
}

/// `explain NAME TYPE -o json <flags>`, in this process.
async fn explained(flags: &[String], name: &str, rtype: RecordType) -> Seen {
    let rtype = rtype.to_string();
    let mut words = vec!["explain", name, &rtype, "-o", "json"];
    words.extend(flags.iter().map(String::as_str));
    let CliCommand::Explain(args) = parse_cli(&words) else {
        panic!("explain arguments expected")
    };
    let json = explain::render(&args)
        .await
        .unwrap_or_else(|e| panic!("explain {name} {rtype}: {e:#}"));
    from_explain(&serde_json::from_str(&json).expect("explain -o json is JSON"))
}

/// `<reversed address>.in-addr.arpa.` or `.ip6.arpa.`.
fn reverse(ip: IpAddr) -> String {
    Name::from(ip).to_string()
}

/// The addresses a name answers with (A and AAAA).
async fn addresses(server: SocketAddr, name: &str) -> Vec<IpAddr> {
    let mut found = Vec::new();
    for rtype in [RecordType::A, RecordType::AAAA] {
        let response = query(server, name, rtype).await;
        found.extend(response.answers.iter().filter_map(|r| r.data.ip_addr()));
    }
    found
}

/// Asks every question of the server and of `explain`; one line per
/// question they answer differently.
async fn differences(
    what: &str,
    server: SocketAddr,
    flags: &[String],
    questions: &[(String, RecordType)],
) -> Vec<String> {
    let mut differences = Vec::new();
    for (name, rtype) in questions {
        let served = from_dns(&query(server, name, *rtype).await);
        let explained = explained(flags, name, *rtype).await;
        if served != explained {
            differences.push(format!(
                "{what}: {name} {rtype}:\n  server:  {served:?}\n  explain: {explained:?}"
            ));
        }
    }
    differences
}

/// Panics listing every difference, if any.
fn none(differences: &[String], asked: usize) {
    assert!(
        differences.is_empty(),
        "explain and the server disagree on {} of {asked} questions:\n{}",
        differences.len(),
        differences.join("\n")
    );
}

/// The questions every kind of name of the zone raises, for a ClusterSetIP
/// service `web` and a headless service `db` (with pod `db-0` in `cluster`)
/// in `ns`; `more` adds mode-specific ones.
fn questions(ns: &str, cluster: &str, more: &[(String, RecordType)]) -> Vec<(String, RecordType)> {
    use RecordType::{A, AAAA, NS, PTR, SOA, SRV, TXT};
    let zone = "clusterset.local.";
    let svc = |name: &str| format!("{name}.{ns}.svc.{zone}");
    let mut list = vec![
        (svc("web"), A),
        (svc("web"), AAAA),
        (svc("web"), TXT),
        (svc("db"), A),
        (format!("db-0.{cluster}.{}", svc("db")), A),
        (format!("_http._tcp.{}", svc("web")), SRV),
        (format!("_postgres._tcp.{}", svc("db")), SRV),
        (format!("_nope._tcp.{}", svc("web")), SRV),
        (svc("nope"), A),
        (format!("{ns}.svc.{zone}"), A),
        (format!("svc.{zone}"), A),
        (zone.to_owned(), SOA),
        (zone.to_owned(), NS),
        (zone.to_owned(), A),
        (format!("ns.dns.{zone}"), A),
        (format!("ns.dns.{zone}"), AAAA),
        (format!("dns.{zone}"), A),
        (format!("dns-version.{zone}"), TXT),
        ("10.in-addr.arpa.".to_owned(), SOA),
        ("99.99.99.10.in-addr.arpa.".to_owned(), PTR),
        ("example.org.".to_owned(), A),
    ];
    list.extend_from_slice(more);
    list
}

/// PTR questions for each address.
fn ptrs(addresses: impl IntoIterator<Item = IpAddr>) -> Vec<(String, RecordType)> {
    addresses
        .into_iter()
        .map(|ip| (reverse(ip), RecordType::PTR))
        .collect()
}

/// Embedded mode, on the demo clusterset: `web` and `api` have VIPs (`api`
/// of both families: PTR in both pools' reverse zones), `db` is headless
/// with pods in east and west (PTR in 10.in-addr.arpa).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_answers_as_the_server_in_embedded_mode() {
    let demo = Path::new(CRATE_ROOT).join("config/demo");
    let state = tempfile::tempdir().unwrap();
    let state_file = state.path().join("vips.json").display().to_string();
    let mut flags: Vec<String> = REVERSE.map(str::to_owned).into();
    flags.extend(["--state-file".to_owned(), state_file]);
    let server_flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let server = start(&demo, &server_flags).await;
    flags.extend(
        [
            "--manifests",
            &demo.display().to_string(),
            "--listen",
            "127.0.0.1:0",
        ]
        .map(str::to_owned),
    );

    let mut vips = addresses(server.addr, &svc("web.shop")).await;
    let api = addresses(server.addr, &svc("api.shop")).await;
    assert_eq!(api.len(), 2, "api has a VIP of each family: {api:?}");
    vips.extend(api);
    let pods: Vec<IpAddr> = ["10.1.1.10", "10.1.1.11", "10.2.1.10", "10.1.0.11"]
        .map(|ip| ip.parse().unwrap())
        .into();
    let mut more = ptrs(vips.into_iter().chain(pods));
    more.push((svc("api.shop"), RecordType::AAAA));
    more.push((svc("cart.shop"), RecordType::A));
    more.push((svc("legacy.shop"), RecordType::A));
    let questions = questions("shop", "east", &more);
    let found = differences("embedded mode", server.addr, &flags, &questions).await;
    none(&found, questions.len());
}

/// Kubernetes mode: east exports `web` and headless `db` in `shop` (which
/// both members have) and `cart` in `billing` (which north lacks, so north
/// serves no name of it); `explain` of each member answers as that member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_answers_as_the_server_in_kubernetes_mode() {
    let set = KubeClusterset::start_with(&[("east", "IPv4"), ("north", "IPv4")], &REVERSE).await;
    for member in &set.members {
        member.api.create_namespace("shop");
    }
    set.apply("east", cluster_ip("shop", "web", &["10.1.0.10"]).exported());
    set.apply(
        "east",
        [slice("shop", "web-east", "web", &[ep("10.1.5.5")])],
    );
    set.apply("east", headless("shop", "db", &["IPv4"]).exported());
    set.apply(
        "east",
        [slice(
            "shop",
            "db-east",
            "db",
            &[ep("10.1.0.1").host("db-0"), ep("10.1.0.2").not_ready()],
        )],
    );
    set.apply(
        "east",
        cluster_ip("billing", "cart", &["10.1.0.20"]).exported(),
    );
    let web = svc("web.shop");
    let cart = svc("cart.billing");
    let mut vips = Vec::new();
    for id in ["east", "north"] {
        eventually_within(
            CONVERGE,
            &format!("db-0 from {id}"),
            ips(["10.1.0.1"]),
            || set.resolve(id, "db-0.east.db.shop.svc.clusterset.local.", RecordType::A),
        )
        .await;
        eventually_within(CONVERGE, &format!("a VIP for web from {id}"), 1, || async {
            addresses(set.member(id).dns(), &web).await.len()
        })
        .await;
        vips.extend(addresses(set.member(id).dns(), &web).await);
    }
    eventually_within(CONVERGE, "a VIP for cart from east", 1, || async {
        addresses(set.member("east").dns(), &cart).await.len()
    })
    .await;
    vips.extend(addresses(set.member("east").dns(), &cart).await);
    vips.sort();
    vips.dedup();
    assert_eq!(
        set.resolve("north", &cart, RecordType::A).await,
        Outcome::NxDomain,
        "north has no namespace billing"
    );

    let pods: Vec<IpAddr> = ["10.1.0.1", "10.1.0.2", "10.1.5.5"]
        .map(|ip| ip.parse().unwrap())
        .into();
    let mut more = ptrs(vips.into_iter().chain(pods));
    for rtype in [RecordType::A, RecordType::AAAA] {
        more.push((cart.clone(), rtype));
    }
    more.push((format!("_http._tcp.{cart}"), RecordType::SRV));
    more.push(("billing.svc.clusterset.local.".to_owned(), RecordType::A));
    let questions = questions("shop", "east", &more);
    let mut found = Vec::new();
    for id in ["east", "north"] {
        let mut flags = set.flags(id);
        flags.extend(REVERSE.map(str::to_owned));
        flags.extend(["--listen", "127.0.0.1:0"].map(str::to_owned));
        let what = format!("Kubernetes mode, member {id}");
        found.extend(differences(&what, set.member(id).dns(), &flags, &questions).await);
    }
    none(&found, 2 * questions.len());
}
