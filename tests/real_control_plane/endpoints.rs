//! Headless services whose slices the real EndpointSlice controller writes
//! from Pods turning ready and not ready (KEP-1645 DNS: a headless name
//! answers the ready endpoints of every exporting cluster, and
//! `<hostname>.<cluster>.<svc>` each one).

use anyhow::Result;
use hickory_proto::rr::RecordType;

use crate::check::{answers_everywhere, fqdn, ips};
use crate::clusterset::Clusterset;
use crate::workloads::{export, namespace, pod, service, set_ready, unexport};

const NS: &str = "data";

/// `db`: two Pods in east, one in west, headless and exported by both.
pub async fn headless_answers_follow_pod_readiness(set: &mut Clusterset) -> Result<()> {
    let pods: [(&str, &[(&str, &str)]); 2] = [
        ("east", &[("db-0", "10.1.1.10"), ("db-1", "10.1.1.11")]),
        ("west", &[("db-0", "10.2.1.10")]),
    ];
    for (id, list) in pods {
        let admin = &set.member(id).admin;
        namespace(admin, NS).await?;
        service(admin, NS, "db", true, &["IPv4"], &[("postgres", 5432)]).await?;
        for (name, ip) in list {
            pod(admin, NS, "db", name, &[ip], true).await?;
        }
        export(admin, NS, "db").await?;
    }
    namespace(&set.member("north").admin, NS).await?;
    let name = fqdn("db", NS);
    let all = ips(&["10.1.1.10", "10.1.1.11", "10.2.1.10"]);
    answers_everywhere(set, &name, RecordType::A, &all).await?;
    // Per-pod names from the Pods' hostname and subdomain.
    answers_everywhere(
        set,
        &fqdn("db-1.east.db", NS),
        RecordType::A,
        &ips(&["10.1.1.11"]),
    )
    .await?;
    answers_everywhere(
        set,
        &fqdn("db-0.west.db", NS),
        RecordType::A,
        &ips(&["10.2.1.10"]),
    )
    .await?;

    let east = set.member("east").admin.clone();
    set_ready(&east, NS, "db-1", false).await?;
    answers_everywhere(set, &name, RecordType::A, &ips(&["10.1.1.10", "10.2.1.10"])).await?;
    set_ready(&east, NS, "db-1", true).await?;
    answers_everywhere(set, &name, RecordType::A, &all).await?;

    // A new Pod in west joins every answer.
    pod(
        &set.member("west").admin,
        NS,
        "db",
        "db-1",
        &["10.2.1.11"],
        true,
    )
    .await?;
    let four = ips(&["10.1.1.10", "10.1.1.11", "10.2.1.10", "10.2.1.11"]);
    answers_everywhere(set, &name, RecordType::A, &four).await?;

    for id in ["east", "west"] {
        unexport(&set.member(id).admin, NS, "db").await?;
    }
    answers_everywhere(set, &name, RecordType::A, &test_support::Outcome::NxDomain).await
}
