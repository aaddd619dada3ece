//! clusterset-dns beside CoreDNS's own multicluster answers: a CoreDNS
//! (built from its Go module) with `kubernetes cluster.local clusterset.local
//! { multicluster clusterset.local }` reads the ServiceImports and MCS
//! EndpointSlices clusterset-dns wrote into west, and both are asked the same
//! questions. Where KEP-1645 leaves no choice the answers must agree; every
//! other difference is printed (and explained in the README, "clusterset-dns
//! and CoreDNS").

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Result, ensure};
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;

use crate::check::{agreed_vip, answers_everywhere, fqdn, ips};
use crate::clusterset::{CONVERGE, Clusterset, eventually};
use crate::control_plane::{Process, bin_dir, free_tcp_port};
use crate::workloads::{export, namespace, pod, service};

const NS: &str = "side";

/// An answer as both servers are compared on: rcode and the records'
/// types and data (TTLs and order aside).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Answer {
    code: ResponseCode,
    records: BTreeSet<String>,
}

async fn ask(at: SocketAddr, name: &str, rtype: RecordType) -> Answer {
    let response = crate::common::query(at, name, rtype).await;
    Answer {
        code: response.metadata.response_code,
        records: response
            .answers
            .iter()
            .map(|r| format!("{} {}", r.record_type(), r.data))
            .collect(),
    }
}

/// A CoreDNS reading west's API server, answering on 127.0.0.1.
fn coredns(set: &Clusterset) -> Result<(Process, SocketAddr)> {
    let west = &set.member("west").plane;
    let port = free_tcp_port();
    let corefile = west.dir.join("Corefile");
    std::fs::write(
        &corefile,
        format!(
            ".:{port} {{\n    bind 127.0.0.1\n    errors\n    kubernetes cluster.local clusterset.local {{\n        kubeconfig {}\n        multicluster clusterset.local\n    }}\n}}\n",
            west.admin_kubeconfig().display()
        ),
    )?;
    let process = Process::spawn(
        "coredns",
        &bin_dir().join("coredns"),
        &["-conf".into(), corefile.display().to_string()],
        &west.dir.join("coredns.log"),
    )?;
    Ok((process, ([127, 0, 0, 1], port).into()))
}

/// The scenario's services: `web` (ClusterSetIP, east and west), `db`
/// (headless with per-pod names, east and west), `api` (dual-stack, east),
/// `cart` (a port conflict), and `lonely` in a namespace west lacks.
async fn services(set: &Clusterset) -> Result<()> {
    for (id, octet) in [("east", 1), ("west", 2)] {
        let admin = &set.member(id).admin;
        namespace(admin, NS).await?;
        service(admin, NS, "web", false, &["IPv4"], &[("http", 80)]).await?;
        pod(
            admin,
            NS,
            "web",
            "web-1",
            &[&format!("10.{octet}.7.1")],
            false,
        )
        .await?;
        service(admin, NS, "db", true, &["IPv4"], &[("postgres", 5432)]).await?;
        pod(admin, NS, "db", "db-0", &[&format!("10.{octet}.8.1")], true).await?;
        let cart = if id == "east" { 80 } else { 8080 };
        service(admin, NS, "cart", false, &["IPv4"], &[("http", cart)]).await?;
        for name in ["web", "db", "cart"] {
            export(admin, NS, name).await?;
        }
    }
    let east = &set.member("east").admin;
    service(east, NS, "api", false, &["IPv4", "IPv6"], &[("grpc", 9090)]).await?;
    export(east, NS, "api").await?;
    namespace(east, "lonely").await?;
    service(east, "lonely", "solo", false, &["IPv4"], &[("http", 80)]).await?;
    export(east, "lonely", "solo").await?;
    namespace(&set.member("north").admin, NS).await?;
    agreed_vip(set, NS, "web").await?;
    answers_everywhere(
        set,
        &fqdn("db", NS),
        RecordType::A,
        &ips(&["10.1.8.1", "10.2.8.1"]),
    )
    .await
}

/// Both servers asked the same questions of west's view.
pub async fn coredns_multicluster_answers_side_by_side(set: &mut Clusterset) -> Result<()> {
    services(set).await?;
    let (mut process, core) = coredns(set)?;
    let ours = set.member("west").dns();
    // CoreDNS answers once its informers synced.
    let web = fqdn("web", NS);
    eventually(CONVERGE, "CoreDNS answers web", async || {
        process.check_alive().map_err(|e| e.to_string())?;
        let answer = ask(core, &web, RecordType::A).await;
        if answer.code == ResponseCode::NoError && !answer.records.is_empty() {
            Ok(Some(()))
        } else {
            Err(format!("{answer:?}"))
        }
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(1)).await;

    let questions = [
        ("web", RecordType::A, true),
        ("web", RecordType::AAAA, true),
        ("db", RecordType::A, true),
        ("db-0.east.db", RecordType::A, true),
        ("db-0.west.db", RecordType::A, true),
        ("api", RecordType::A, true),
        ("api", RecordType::AAAA, true),
        ("nothing-here", RecordType::A, true),
        ("cart", RecordType::A, true),
        ("_http._tcp.web", RecordType::SRV, false),
        ("_postgres._tcp.db", RecordType::SRV, false),
        ("web", RecordType::SRV, false),
        ("db", RecordType::SRV, false),
        ("web", RecordType::TXT, false),
    ];
    let mut disagreements = Vec::new();
    for (name, rtype, must_agree) in questions {
        let name = fqdn(name, NS);
        let (a, b) = (ask(ours, &name, rtype).await, ask(core, &name, rtype).await);
        if a != b {
            eprintln!(
                "  differs: {name} {rtype}\n    clusterset-dns: {a:?}\n    CoreDNS:        {b:?}"
            );
            if must_agree {
                disagreements.push(format!("{name} {rtype}: ours {a:?}, CoreDNS {b:?}"));
            }
        }
    }
    // A namespace west lacks: neither answers (namespace sameness).
    let solo = fqdn("solo", "lonely");
    let (a, b) = (
        ask(ours, &solo, RecordType::A).await,
        ask(core, &solo, RecordType::A).await,
    );
    ensure!(
        a.code == ResponseCode::NXDomain && b.code == ResponseCode::NXDomain,
        "{solo}: NXDOMAIN from both where the namespace is missing: ours {a:?}, CoreDNS {b:?}"
    );
    // The zone's own names: printed, not required (README, "clusterset-dns
    // and CoreDNS", says which each answers and why).
    let zone_names = [
        ("clusterset.local.", RecordType::SOA),
        ("clusterset.local.", RecordType::NS),
        ("clusterset.local.", RecordType::TXT),
        ("svc.clusterset.local.", RecordType::A),
        ("side.svc.clusterset.local.", RecordType::A),
        ("dns-version.clusterset.local.", RecordType::TXT),
    ];
    for (name, rtype) in zone_names {
        let (a, b) = (ask(ours, name, rtype).await, ask(core, name, rtype).await);
        if a != b {
            eprintln!(
                "  differs: {name} {rtype}\n    clusterset-dns: {a:?}\n    CoreDNS:        {b:?}"
            );
        }
    }
    process.kill();
    ensure!(
        disagreements.is_empty(),
        "answers KEP-1645 decides differ:\n{}",
        disagreements.join("\n")
    );
    Ok(())
}
