//! CoreDNS and clusterset-dns on a real control plane. In front: a
//! cluster's CoreDNS (the default Corefile, its `kubernetes` plugin reading
//! west's API server) with the shipped stanza forwarding `clusterset.local`
//! to west's clusterset-dns. Beside: a CoreDNS
//! (built from its Go module) with `kubernetes cluster.local clusterset.local
//! { multicluster clusterset.local }` reads the ServiceImports and MCS
//! EndpointSlices clusterset-dns wrote into west, and both are asked the same
//! questions. Where KEP-1645 leaves no choice the answers must agree; every
//! other difference is printed (and explained in docs/coredns.md, "Beside
//! CoreDNS's own multicluster answers").

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Result, ensure};
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use test_support::free_port;

use crate::check::{agreed_vip, answers_everywhere, fqdn, ips};
use crate::clusterset::{CONVERGE, Clusterset, Member, eventually};
use crate::control_plane::{ControlPlane, Process, bin_dir};
use crate::workloads::{export, exported_with_pod, namespace, pod, service};

const NS: &str = "side";

/// An answer as both servers are compared on: rcode and the records'
/// types and data (TTLs and order aside).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    code: ResponseCode,
    pub records: BTreeSet<String>,
}

pub async fn ask(at: SocketAddr, name: &str, rtype: RecordType) -> Answer {
    let response = test_support::query(at, name, rtype).await;
    Answer {
        code: response.metadata.response_code,
        records: response
            .answers
            .iter()
            .map(|r| format!("{} {}", r.record_type(), r.data))
            .collect(),
    }
}

/// A CoreDNS reading west's API server, answering on 127.0.0.1: with
/// `multicluster`, CoreDNS's own answers for `clusterset.local`; without,
/// west's cluster DNS ([`cluster_coredns`]) forwarding `clusterset.local` to
/// west's first clusterset-dns replica.
pub fn coredns(set: &Clusterset, multicluster: bool) -> Result<(Process, SocketAddr)> {
    let west = set.member("west");
    let at = free_port();
    if !multicluster {
        let process = cluster_coredns(west, at, &[west.dns()])?;
        return Ok((process, at));
    }
    let kubeconfig = west.plane.admin_kubeconfig().display().to_string();
    let text = format!(
        ".:{port} {{\n    bind 127.0.0.1\n    errors\n    kubernetes cluster.local clusterset.local {{\n        kubeconfig {kubeconfig}\n        multicluster clusterset.local\n    }}\n}}\n",
        port = at.port()
    );
    Ok((spawn(&west.plane, "coredns-multicluster", &text)?, at))
}

/// A member's cluster DNS as kubeadm deploys it, on `at`: kubeadm's default
/// `.:53` block (its `kubernetes` plugin reading the member's API server,
/// its upstream a port nobody answers: there is no network here) and beside
/// it the shipped stanza, forwarding `clusterset.local` to `upstreams` (the
/// member's clusterset-dns replicas, as the Service's endpoints would be).
pub fn cluster_coredns(
    member: &Member,
    at: SocketAddr,
    upstreams: &[SocketAddr],
) -> Result<Process> {
    let kubeconfig = member.plane.admin_kubeconfig().display().to_string();
    let nobody = free_port().port();
    let upstreams: Vec<String> = upstreams.iter().map(SocketAddr::to_string).collect();
    let text = format!(
        ".:{port} {{\n    bind {ip}\n    errors\n    kubernetes cluster.local in-addr.arpa ip6.arpa {{\n        kubeconfig {kubeconfig}\n        pods insecure\n        fallthrough in-addr.arpa ip6.arpa\n        ttl 30\n    }}\n    forward . 127.0.0.1:{nobody}\n    cache 30\n    loadbalance\n}}\n{}",
        test_support::stanza_at(at, &format!("    forward . {}\n", upstreams.join(" "))),
        port = at.port(),
        ip = at.ip(),
    );
    spawn(&member.plane, &format!("coredns-{}", at), &text)
}

/// CoreDNS with the Corefile `text`, kept in the plane's folder as
/// `<stem>.Corefile`, its log as `<stem>.log`.
fn spawn(plane: &ControlPlane, stem: &str, text: &str) -> Result<Process> {
    let corefile = plane.dir.join(format!("{stem}.Corefile"));
    std::fs::write(&corefile, text)?;
    Process::spawn(
        "coredns",
        &bin_dir().join("coredns"),
        &["-conf".into(), corefile.display().to_string()],
        &plane.dir.join(format!("{stem}.log")),
    )
}

/// The scenario's services: `web` (ClusterSetIP, east and west), `db`
/// (headless with per-pod names, east and west), `api` (dual-stack, east),
/// `cart` (a port conflict), and `lonely` in a namespace west lacks.
async fn services(set: &Clusterset) -> Result<()> {
    for (id, octet) in [("east", 1), ("west", 2)] {
        let admin = &set.member(id).admin;
        namespace(admin, NS).await?;
        exported_with_pod(admin, NS, "web", false, &format!("10.{octet}.7.1")).await?;
        service(admin, NS, "db", true, &["IPv4"], &[("postgres", 5432)]).await?;
        pod(admin, NS, "db", "db-0", &[&format!("10.{octet}.8.1")], true).await?;
        let cart = if id == "east" { 80 } else { 8080 };
        service(admin, NS, "cart", false, &["IPv4"], &[("http", cart)]).await?;
        for name in ["db", "cart"] {
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
    let (mut process, core) = coredns(set, true)?;
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
    // The zone's own names: printed, not required (docs/coredns.md, "Beside
    // CoreDNS's own multicluster answers", says which each answers and why).
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

/// A cluster's CoreDNS in front (its default Corefile and the shipped
/// stanza): pods asking it get clusterset-dns's answers for
/// `clusterset.local`, and CoreDNS's own for `cluster.local`.
pub async fn a_cluster_coredns_forwards_clusterset_local(set: &mut Clusterset) -> Result<()> {
    // The services of the side-by-side scenario, when it did not run.
    let west: kube::Api<k8s_openapi::api::core::v1::Service> =
        kube::Api::namespaced(set.member("west").admin.clone(), NS);
    if west.get_opt("web").await?.is_none() {
        services(set).await?;
    }
    let (mut process, front) = coredns(set, false)?;
    let ours = set.member("west").dns();
    let web = fqdn("web", NS);
    eventually(CONVERGE, "CoreDNS in front answers web", async || {
        process.check_alive().map_err(|e| e.to_string())?;
        let (a, b) = (
            ask(ours, &web, RecordType::A).await,
            ask(front, &web, RecordType::A).await,
        );
        if a == b && !a.records.is_empty() {
            Ok(Some(()))
        } else {
            Err(format!("ours {a:?}, through CoreDNS {b:?}"))
        }
    })
    .await?;
    for (name, rtype) in [
        (fqdn("db", NS), RecordType::A),
        (fqdn("db-0.west.db", NS), RecordType::A),
        (fqdn("api", NS), RecordType::AAAA),
        (fqdn("web", NS), RecordType::AAAA),
        (
            format!("_postgres._tcp.{}", fqdn("db", NS)),
            RecordType::SRV,
        ),
        (fqdn("nothing-here", NS), RecordType::A),
        (fqdn("solo", "lonely"), RecordType::A),
    ] {
        let (a, b) = (
            ask(ours, &name, rtype).await,
            ask(front, &name, rtype).await,
        );
        ensure!(a == b, "{name} {rtype}: ours {a:?}, through CoreDNS {b:?}");
    }
    // The cluster's own names still come from CoreDNS's kubernetes plugin.
    let api = ask(
        front,
        "kubernetes.default.svc.cluster.local.",
        RecordType::A,
    )
    .await;
    ensure!(
        api.code == ResponseCode::NoError && api.records.len() == 1,
        "kubernetes.default.svc.cluster.local through CoreDNS: {api:?}"
    );
    process.kill();
    Ok(())
}
