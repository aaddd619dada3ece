//! Exports on the real control plane: the import's lifetime (KEP-1645
//! "Service Import lifecycle"), its status as the API server stores it (no
//! field pruned by either CRD variant), conflicts, dual stack, and VIPs
//! allocated by members racing each other.

use std::collections::BTreeSet;
use std::net::IpAddr;

use anyhow::{Result, ensure};
use hickory_proto::rr::RecordType;
use test_support::Outcome;

use crate::check::{
    agreed_vip, answers_everywhere, fqdn, import_becomes, import_gone, ips, mcs_slices_become,
    status_clusters,
};
use crate::clusterset::{CONVERGE, Clusterset, eventually};
use crate::workloads::{export, export_conditions, namespace, pod, service, unexport};

const NS: &str = "shop";

/// `web` exported by east and west: one VIP everywhere (north too, whose
/// namespace exists without the Service), conditions on both exports, the
/// import's status and MCS slices as stored; it lives while any cluster
/// exports it and goes when the last export does (KEP-1645).
pub async fn import_lives_while_any_cluster_exports(set: &mut Clusterset) -> Result<()> {
    for (id, octet) in [("east", 1), ("west", 2)] {
        let admin = &set.member(id).admin;
        namespace(admin, NS).await?;
        service(admin, NS, "web", false, &["IPv4"], &[("http", 80)]).await?;
        for k in 1..=2 {
            pod(
                admin,
                NS,
                "web",
                &format!("web-{k}"),
                &[&format!("10.{octet}.0.{k}")],
                false,
            )
            .await?;
        }
        export(admin, NS, "web").await?;
    }
    namespace(&set.member("north").admin, NS).await?;

    let vip = agreed_vip(set, NS, "web").await?;
    ensure!(
        matches!(vip, IpAddr::V4(v4) if v4.octets()[0] == 243),
        "the VIP {vip} comes from --vip-pool-v4 (243.0.0.0/8)"
    );
    // SRV of the named port (KEP-1645 DNS: _<port>._<proto>.<svc>...).
    let north = set.member("north").dns();
    let srv_name = format!("_http._tcp.{}", fqdn("web", NS));
    let expected = BTreeSet::from([(fqdn("web", NS), 80)]);
    eventually(CONVERGE, "north: SRV of web's http port", async || {
        let response = test_support::query(north, &srv_name, RecordType::SRV).await;
        let got = test_support::srv_targets(&response);
        if got == expected {
            Ok(Some(()))
        } else {
            Err(format!("{response:?}"))
        }
    })
    .await?;
    // Status written through each CRD variant's schema, read back whole.
    for member in &set.members {
        let import = import_becomes(set, &member.id, NS, "web", "lists east and west", |i| {
            status_clusters(i) == ["east", "west"]
        })
        .await?;
        // mcs-api v0.5's field, kept by both CRD variants; the Ready reason is upstream's.
        let ready = import["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "Ready");
        ensure!(
            import["status"]["endpointSliceObjects"] == "Present"
                && ready.is_some_and(|c| c["status"] == "True" && c["reason"] == "Ready"),
            "{}: status as stored: {import}",
            member.id
        );
        ensure!(
            import["spec"]["ports"][0]["port"] == 80 && import["spec"]["type"] == "ClusterSetIP",
            "{}: spec as written: {import}",
            member.id
        );
    }
    // The export conditions are a status patch of their own, written after
    // the import: waited for.
    for id in ["east", "west"] {
        let admin = &set.member(id).admin;
        eventually(
            CONVERGE,
            &format!("{id}: web's export Valid, no Conflict"),
            async || {
                let conditions = export_conditions(admin, NS, "web")
                    .await
                    .map_err(|e| e.to_string())?;
                let has =
                    |t: &str, v: &str| conditions.iter().any(|(ty, st, _)| ty == t && st == v);
                if has("Valid", "True") && has("Conflict", "False") {
                    Ok(Some(()))
                } else {
                    Err(format!("{conditions:?}"))
                }
            },
        )
        .await?;
    }
    // Each member holds a slice per exporting cluster, owned by its import.
    let both = BTreeSet::from([
        (
            "east".to_owned(),
            vec!["10.1.0.1".to_owned(), "10.1.0.2".to_owned()],
        ),
        (
            "west".to_owned(),
            vec!["10.2.0.1".to_owned(), "10.2.0.2".to_owned()],
        ),
    ]);
    for member in &set.members {
        mcs_slices_become(set, &member.id, NS, "web", &both).await?;
    }

    unexport(&set.member("east").admin, NS, "web").await?;
    let west_only = BTreeSet::from([(
        "west".to_owned(),
        vec!["10.2.0.1".to_owned(), "10.2.0.2".to_owned()],
    )]);
    for member in &set.members {
        mcs_slices_become(set, &member.id, NS, "web", &west_only).await?;
    }
    let expected = Outcome::Ips(BTreeSet::from([vip]));
    answers_everywhere(set, &fqdn("web", NS), RecordType::A, &expected).await?;

    unexport(&set.member("west").admin, NS, "web").await?;
    for member in &set.members {
        import_gone(set, &member.id, NS, "web").await?;
        mcs_slices_become(set, &member.id, NS, "web", &BTreeSet::new()).await?;
    }
    answers_everywhere(set, &fqdn("web", NS), RecordType::A, &Outcome::NxDomain).await
}

/// A port named alike with another number in west: both exports report
/// `Conflict=True` with reason `PortConflict`, and the oldest export's port
/// is the import's (KEP-1645 "Constraints and Conflict Resolution").
pub async fn differing_ports_are_a_port_conflict(set: &mut Clusterset) -> Result<()> {
    namespace(&set.member("north").admin, NS).await?;
    for (id, port) in [("east", 80), ("west", 8080)] {
        let admin = &set.member(id).admin;
        namespace(admin, NS).await?;
        service(admin, NS, "cart", false, &["IPv4"], &[("http", port)]).await?;
        export(admin, NS, "cart").await?;
        // creationTimestamp has whole seconds: east's export is the older.
        tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    }
    for id in ["east", "west"] {
        let admin = &set.member(id).admin;
        crate::clusterset::eventually(
            crate::clusterset::CONVERGE,
            &format!("{id}: cart's Conflict condition"),
            async || {
                let conditions = export_conditions(admin, NS, "cart")
                    .await
                    .map_err(|e| e.to_string())?;
                if conditions
                    .iter()
                    .any(|(t, s, r)| t == "Conflict" && s == "True" && r.contains("PortConflict"))
                {
                    Ok(Some(()))
                } else {
                    Err(format!("{conditions:?}"))
                }
            },
        )
        .await?;
    }
    // The same port name with another number: the oldest export's port
    // is the import's, in every member, and west backs none of its ports.
    for member in &set.members {
        import_becomes(
            set,
            &member.id,
            NS,
            "cart",
            "has east's port, backed by east",
            |i| {
                let ports: Vec<i64> = i["spec"]["ports"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|p| p["port"].as_i64())
                    .collect();
                let backing = i["metadata"]["annotations"]["clusterset-dns.io/cluster-ports"]
                    .as_str()
                    .and_then(|a| serde_json::from_str::<serde_json::Value>(a).ok());
                ports == [80]
                    && backing == Some(serde_json::json!({"east": ["http:80/TCP"], "west": []}))
            },
        )
        .await?;
    }
    for id in ["east", "west"] {
        unexport(&set.member(id).admin, NS, "cart").await?;
    }
    Ok(())
}

/// `api` is dual-stack in east and west: a VIP of each family; `mixed` is
/// dual-stack in east and IPv4 in west: the families intersect to IPv4,
/// so AAAA is NODATA (KEP-1645 "IP Family").
pub async fn ip_families_are_intersected(set: &mut Clusterset) -> Result<()> {
    let families: [(&str, &[&str]); 2] = [("east", &["IPv4", "IPv6"]), ("west", &["IPv4"])];
    for (id, mixed) in families {
        let admin = &set.member(id).admin;
        namespace(admin, NS).await?;
        service(
            admin,
            NS,
            "api",
            false,
            &["IPv4", "IPv6"],
            &[("grpc", 9090)],
        )
        .await?;
        service(admin, NS, "mixed", false, mixed, &[("http", 80)]).await?;
        export(admin, NS, "api").await?;
        export(admin, NS, "mixed").await?;
    }
    for member in &set.members {
        let both = import_becomes(set, &member.id, NS, "api", "has two VIPs", |i| {
            i["spec"]["ips"].as_array().map(Vec::len) == Some(2)
        })
        .await?;
        ensure!(
            both["spec"]["ipFamilies"] == serde_json::json!(["IPv4", "IPv6"]),
            "{}: api's families: {both}",
            member.id
        );
        import_becomes(set, &member.id, NS, "mixed", "is IPv4 only", |i| {
            i["spec"]["ipFamilies"] == serde_json::json!(["IPv4"])
                && i["spec"]["ips"].as_array().map(Vec::len) == Some(1)
        })
        .await?;
    }
    let import = crate::workloads::import(&set.member("east").admin, NS, "api")
        .await?
        .unwrap_or_default();
    let v6: Vec<&str> = import["spec"]["ips"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|ip| ip.as_str())
        .filter(|ip| ip.contains(':'))
        .collect();
    ensure!(v6.len() == 1, "api: one IPv6 VIP in {import}");
    answers_everywhere(set, &fqdn("api", NS), RecordType::AAAA, &ips(&v6)).await?;
    answers_everywhere(set, &fqdn("mixed", NS), RecordType::AAAA, &Outcome::NoData).await?;
    for id in ["east", "west"] {
        let admin = &set.member(id).admin;
        unexport(admin, NS, "api").await?;
        unexport(admin, NS, "mixed").await?;
    }
    Ok(())
}

/// Ten services exported by east and west at the same moment: each gets one
/// VIP that every member agrees on, and no two share one (the claims on
/// the broker are create-or-fail).
pub async fn concurrent_exports_never_share_a_vip(set: &mut Clusterset) -> Result<()> {
    const RACE: &str = "race";
    let names: Vec<String> = (0..10).map(|i| format!("svc-{i}")).collect();
    for id in ["east", "west"] {
        let admin = &set.member(id).admin;
        namespace(admin, RACE).await?;
        for name in &names {
            service(admin, RACE, name, false, &["IPv4"], &[("http", 80)]).await?;
        }
    }
    namespace(&set.member("north").admin, RACE).await?;
    let east = set.member("east").admin.clone();
    let west = set.member("west").admin.clone();
    let exports = names.iter().flat_map(|name| {
        [east.clone(), west.clone()].map(|client| {
            let name = name.clone();
            async move { export(&client, RACE, &name).await }
        })
    });
    for result in futures::future::join_all(exports).await {
        result?;
    }
    let mut vips = BTreeSet::new();
    for name in &names {
        vips.insert(agreed_vip(set, RACE, name).await?);
    }
    ensure!(vips.len() == names.len(), "distinct VIPs: {vips:?}");
    Ok(())
}
