//! Issue 46, attack 1 (VIP hijack): rewrite a VIP record's `spec.ips`.

use anyhow::{Context, Result};
use hickory_proto::rr::RecordType;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use super::{ATTACKER, NS, defend, forbidden, labels, logged, namespaces, record, refused, update};
use crate::check::{AFTER_ATTACK, answers_everywhere, fqdn};
use crate::clusterset::{BROKER_NAMESPACE, CONVERGE, Clusterset, eventually, member_broker_client};
use crate::workloads::{export, imports, pod, service};

const SERVICE: &str = "hijack";
const SERVICE_NAME: &str = "multicluster.kubernetes.io/service-name";

/// Issue 46, item 7, attack 1 (VIP hijack). With east's broker token, the
/// agreed VIP of `trust/hijack` (exported by west and north) is moved,
/// emptied, joined by a second address of its family, given to another
/// service, and squatted under another service's name: the broker's policy
/// refuses each ("a VIP record keeps its service and its agreed
/// addresses", "... at most one address of each family"); its claim
/// rewritten, the broker's RBAC (claims are never updated). The policy
/// admits an address of a missing family (how a service becomes
/// dual-stack), so east adds the IPv6 VIP of west's dual-stack
/// `trust/hijack-dual` to the IPv4-only service's record. What admission
/// cannot see, a VIP out of the pools written with the broker's admin
/// credential (a compromised broker, or a bad restore), every member's
/// reader refuses and logs. No answer of west or north changes (the
/// dual-stack service's included), during the attack or 3 s after.
pub async fn no_member_moves_an_agreed_vip(set: &mut Clusterset) -> Result<()> {
    let dual = format!("{SERVICE}-dual");
    let dual_v6 = dual_stack(set, &dual).await?;
    let also = [
        (fqdn(&dual, NS), RecordType::A),
        (fqdn(&dual, NS), RecordType::AAAA),
    ];
    let defended = defend(set, SERVICE, 11, &also).await?;
    let vip = defended.vip.to_string();
    let name = format!("{SERVICE}.{NS}");
    let east = member_broker_client(set.member(ATTACKER)).await?;
    let records = imports(&east, BROKER_NAMESPACE);
    let rule = "a VIP record keeps its service and its agreed addresses";

    let one_each = "a VIP record holds at most one address of each family";
    for (what, ips, rule) in [
        ("move the agreed VIP", json!(["243.66.6.6"]), rule),
        ("remove the agreed VIP", json!([]), rule),
        (
            "add a second IPv4 VIP",
            json!([vip, "243.66.6.7"]),
            one_each,
        ),
    ] {
        let moved = update(&records, &name, |r| r.data["spec"]["ips"] = ips.clone());
        refused(what, rule, moved).await?;
    }
    let relabelled = update(&records, &name, |r| {
        let labels = r.metadata.labels.get_or_insert_default();
        labels.insert(SERVICE_NAME.into(), "other".into());
    });
    refused(
        "give the VIP record to another service",
        "named for its service",
        relabelled,
    )
    .await?;
    let squatted = record(
        &format!("cart.{NS}"),
        labels(SERVICE, None, "import"),
        &["243.66.6.8"],
    )?;
    refused(
        "a VIP record of the service under another service's name",
        "named for its service",
        records.create(&PostParams::default(), &squatted),
    )
    .await?;
    let claims: Api<ConfigMap> = Api::namespaced(east.clone(), BROKER_NAMESPACE);
    let claim_name = format!("clusterset-vip-{}", vip.replace('.', "-"));
    let given = update(&claims, &claim_name, |c| {
        let data = c.data.get_or_insert_default();
        data.insert("service".into(), format!("{NS}/other"));
    });
    forbidden(
        "give the VIP's claim to another service",
        "update",
        "configmaps",
        given,
    )
    .await?;
    let with_v6 = json!([vip, dual_v6]);
    update(&records, &name, |r| r.data["spec"]["ips"] = with_v6.clone())
        .await
        .context("another service's IPv6 VIP added as a missing family")?;

    // A compromised broker: the VIP moved out of the pools, then put back
    // as the members agreed it.
    let admin = imports(&set.broker, BROKER_NAMESPACE);
    update(&admin, &name, |r| {
        r.data["spec"]["ips"] = json!(["10.66.6.6"])
    })
    .await?;
    let line = format!("ServiceImport {name}: refused: VIP 10.66.6.6 is outside the VIP pools");
    logged(set, &["east", "west", "north"], &[line]).await?;
    update(&admin, &name, |r| r.data["spec"]["ips"] = json!([vip]))
        .await
        .context("the agreed VIP put back")?;
    defended.sampler.finish(AFTER_ATTACK).await
}

/// West exports the dual-stack `trust/<name>`; returns its IPv6 VIP once
/// every member answers it.
async fn dual_stack(set: &Clusterset, name: &str) -> Result<String> {
    namespaces(set).await?;
    let west = &set.member("west").admin;
    service(west, NS, name, false, &["IPv4", "IPv6"], &[("http", 80)]).await?;
    let pod_ips = ["10.2.11.3", "fd00:10:244:2::b3"];
    pod(west, NS, name, &format!("{name}-1"), &pod_ips, false).await?;
    export(west, NS, name).await?;
    let first = set.members[0].dns();
    let v6 = eventually(
        CONVERGE,
        &format!("an IPv6 VIP for {NS}/{name}"),
        async || match test_support::resolve(first, &fqdn(name, NS), RecordType::AAAA).await {
            test_support::Outcome::Ips(ips) if ips.len() == 1 => Ok(ips.into_iter().next()),
            other => Err(format!("{other:?}")),
        },
    )
    .await?;
    let expected = test_support::Outcome::Ips([v6].into());
    answers_everywhere(set, &fqdn(name, NS), RecordType::AAAA, &expected).await?;
    Ok(v6.to_string())
}
