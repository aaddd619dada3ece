//! What every scenario asks of the clusterset: the same answer from every
//! member's DNS, and objects as each member's API server holds them.

use std::collections::BTreeSet;
use std::net::IpAddr;

use anyhow::Result;
use hickory_proto::rr::RecordType;
use serde_json::Value;
use test_support::{Outcome, resolve};

use crate::clusterset::{CONVERGE, Clusterset, eventually};
use crate::workloads;

/// `<name>.<ns>.svc.clusterset.local.`
pub fn fqdn(name: &str, ns: &str) -> String {
    format!("{name}.{ns}.svc.clusterset.local.")
}

/// Waits until member `id` answers `name`/`rtype` with `expected`.
pub async fn answers(
    set: &Clusterset,
    id: &str,
    name: &str,
    rtype: RecordType,
    expected: &Outcome,
) -> Result<()> {
    let dns = set.member(id).dns();
    eventually(CONVERGE, &format!("{id}: {name} {rtype}"), async || {
        let got = resolve(dns, name, rtype).await;
        if &got == expected {
            Ok(Some(()))
        } else {
            Err(format!("{got:?}, expected {expected:?}"))
        }
    })
    .await
}

/// [`answers`] in every member.
pub async fn answers_everywhere(
    set: &Clusterset,
    name: &str,
    rtype: RecordType,
    expected: &Outcome,
) -> Result<()> {
    for member in &set.members {
        answers(set, &member.id, name, rtype, expected).await?;
    }
    Ok(())
}

/// Waits until every member answers `name` A with one VIP, the same
/// everywhere and equal to `spec.ips` of each member's ServiceImport;
/// returns it.
pub async fn agreed_vip(set: &Clusterset, ns: &str, name: &str) -> Result<IpAddr> {
    let first = set.members[0].dns();
    let vip = eventually(
        CONVERGE,
        &format!("a VIP for {ns}/{name}"),
        async || match resolve(first, &fqdn(name, ns), RecordType::A).await {
            Outcome::Ips(ips) if ips.len() == 1 => Ok(ips.into_iter().next()),
            other => Err(format!("{other:?}")),
        },
    )
    .await?;
    let expected = Outcome::Ips(BTreeSet::from([vip]));
    answers_everywhere(set, &fqdn(name, ns), RecordType::A, &expected).await?;
    for member in &set.members {
        let admin = &member.admin;
        eventually(
            CONVERGE,
            &format!("{}: ServiceImport {ns}/{name} spec.ips", member.id),
            async || {
                let import = workloads::import(admin, ns, name)
                    .await
                    .map_err(|e| e.to_string())?;
                let ips = import.as_ref().map(|i| i["spec"]["ips"].clone());
                if ips == Some(serde_json::json!([vip.to_string()])) {
                    Ok(Some(()))
                } else {
                    Err(format!("{ips:?}"))
                }
            },
        )
        .await?;
    }
    Ok(vip)
}

/// Waits until a member's ServiceImport satisfies `test`, returning it.
pub async fn import_becomes(
    set: &Clusterset,
    id: &str,
    ns: &str,
    name: &str,
    what: &str,
    test: impl Fn(&Value) -> bool,
) -> Result<Value> {
    let admin = &set.member(id).admin;
    eventually(
        CONVERGE,
        &format!("{id}: ServiceImport {ns}/{name} {what}"),
        async || match workloads::import(admin, ns, name).await {
            Ok(Some(import)) if test(&import) => Ok(Some(import)),
            Ok(other) => Err(format!("{other:?}")),
            Err(e) => Err(e.to_string()),
        },
    )
    .await
}

/// Waits until a member has no ServiceImport `ns/name`.
pub async fn import_gone(set: &Clusterset, id: &str, ns: &str, name: &str) -> Result<()> {
    let admin = &set.member(id).admin;
    eventually(
        CONVERGE,
        &format!("{id}: ServiceImport {ns}/{name} deleted"),
        async || match workloads::import(admin, ns, name).await {
            Ok(None) => Ok(Some(())),
            Ok(Some(i)) => Err(format!("still {}", i["metadata"]["uid"])),
            Err(e) => Err(e.to_string()),
        },
    )
    .await
}

/// The cluster names in an import's `status.clusters`, sorted.
pub fn status_clusters(import: &Value) -> Vec<String> {
    let mut clusters: Vec<String> = import["status"]["clusters"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["cluster"].as_str().map(str::to_owned))
        .collect();
    clusters.sort();
    clusters
}

/// Waits until member `id` holds these MCS slices of a service.
pub async fn mcs_slices_become(
    set: &Clusterset,
    id: &str,
    ns: &str,
    service: &str,
    expected: &BTreeSet<(String, Vec<String>)>,
) -> Result<()> {
    let admin = &set.member(id).admin;
    eventually(
        CONVERGE,
        &format!("{id}: MCS slices of {ns}/{service}"),
        async || match workloads::mcs_slices(admin, ns, service).await {
            Ok(got) if &got == expected => Ok(Some(())),
            Ok(got) => Err(format!("{got:?}, expected {expected:?}")),
            Err(e) => Err(e.to_string()),
        },
    )
    .await
}

/// `Outcome::Ips` of these addresses.
pub fn ips(addresses: &[&str]) -> Outcome {
    Outcome::Ips(
        addresses
            .iter()
            .map(|a| a.parse().expect("an IP"))
            .collect(),
    )
}
