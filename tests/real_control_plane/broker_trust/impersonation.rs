//! Issue 46, attack 2 (impersonation / name hijack): records labelled as
//! another cluster, another cluster's record made older, names no cluster
//! may export.

use anyhow::{Context, Result};
use hickory_proto::rr::RecordType;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::{Value, json};

use super::{ATTACKER, NS, Paused, defend, forged, labels, logged, record, refused, update, wests};
use crate::check::{AFTER_ATTACK, fqdn};
use crate::clusterset::{BROKER_NAMESPACE, Clusterset, member_broker_client};
use crate::security::type_checks_cleanly;
use crate::workloads::imports;

const SERVICE: &str = "name";
const SOURCE_CLUSTER: &str = "multicluster.kubernetes.io/source-cluster";

/// Issue 46, item 7, attack 2 (impersonation / name hijack). With east's
/// broker token: a record labelled west, west's record relabelled as
/// east's or given an older `created` (the oldest export decides, KEP-1645),
/// a record named for west but labelled east and the reverse, a record of
/// no role, and a slice labelled west: the broker's policy refuses each
/// ("a member writes only its own export records", "... EndpointSlices").
/// What admission cannot see, east's own well-formed export records of
/// `kube-system/kube-dns` and `clusterset-dns/clusterset-dns` (protected
/// namespaces, Lighthouse's CVE-2026-66788), it admits, as it admits east
/// changing and deleting them; west's and north's readers refuse them and
/// those names stay NXDOMAIN. No answer of west or north changes, during
/// the attack or 3 s after.
pub async fn no_member_writes_as_another_or_takes_a_protected_name(
    set: &mut Clusterset,
) -> Result<()> {
    // The broker is east's API server; the policy type-checks cleanly
    // against every kind it matches.
    type_checks_cleanly(set.member("east"), "clusterset-broker-ownership").await?;

    let protected = [
        ("kube-dns", "kube-system"),
        ("clusterset-dns", "clusterset-dns"),
    ];
    let also: Vec<_> = protected
        .iter()
        .map(|(name, ns)| (fqdn(name, ns), RecordType::A))
        .collect();
    let defended = defend(set, SERVICE, 12, &also).await?;
    let east = member_broker_client(set.member(ATTACKER)).await?;
    let records = imports(&east, BROKER_NAMESPACE);
    let (west_record, west_slice) = wests(&east, SERVICE).await?;
    let west_name = format!("{SERVICE}.{NS}.west");
    let own = "a member writes only its own export records";

    let as_west = forged(&west_record, &format!("{SERVICE}.{NS}.x-west"), &json!({}));
    refused(
        "a copy of west's record under a new name",
        own,
        records.create(&PostParams::default(), &as_west),
    )
    .await?;
    let export = "clusterset-dns.io/export";
    let annotations = west_record.metadata.annotations.as_ref();
    let extras = annotations.and_then(|a| a.get(export));
    let mut extras: Value = serde_json::from_str(extras.context("west's export annotation")?)?;
    extras["created"] = json!(0);
    let older = update(&records, &west_name, |r| {
        let annotations = r.metadata.annotations.get_or_insert_default();
        annotations.insert(export.into(), extras.to_string());
    });
    refused("west's record made the oldest export", own, older).await?;
    let taken = update(&records, &west_name, |r| {
        let labels = r.metadata.labels.get_or_insert_default();
        labels.insert(SOURCE_CLUSTER.into(), ATTACKER.into());
    });
    refused("west's record relabelled as east's", own, taken).await?;
    for (what, name, cluster) in [
        (
            "a record of east named for west",
            "other.trust.west",
            ATTACKER,
        ),
        (
            "a record of west named for east",
            "other.trust.east",
            "west",
        ),
    ] {
        let forged = record(
            name,
            labels("other", Some(cluster), "export"),
            &["10.9.0.3"],
        )?;
        refused(what, own, records.create(&PostParams::default(), &forged)).await?;
    }
    let roleless = record(
        &format!("{SERVICE}.{NS}.east"),
        json!({SOURCE_CLUSTER: ATTACKER}),
        &[],
    )?;
    refused(
        "a record of no role",
        "only export records and VIP records",
        records.create(&PostParams::default(), &roleless),
    )
    .await?;
    let slices: Api<EndpointSlice> = Api::namespaced(east.clone(), BROKER_NAMESPACE);
    let mut slice = slices.get(&west_slice).await?;
    slice.metadata = kube::api::ObjectMeta {
        name: Some(format!("{west_slice}-x")),
        labels: slice.metadata.labels.clone(),
        ..Default::default()
    };
    refused(
        "a copy of west's slice",
        "a member writes only its own EndpointSlices",
        slices.create(&PostParams::default(), &slice),
    )
    .await?;

    // East's own records (admitted), of protected namespaces (refused by
    // every reader). Labelled as this program labels them, since the
    // readers' watches see nothing else; east's replicas are stopped
    // meanwhile, since its writer deletes records of its name it has no
    // export for.
    let paused = Paused::new(set, &[ATTACKER])?;
    let mut lines = Vec::new();
    for (name, ns) in protected {
        let own_name = format!("{name}.{ns}.{ATTACKER}");
        let changes = json!({
            "multicluster.kubernetes.io/service-name": name,
            "clusterset-dns.io/service-namespace": ns,
            SOURCE_CLUSTER: ATTACKER,
        });
        let mine = forged(&west_record, &own_name, &changes);
        records
            .create(&PostParams::default(), &mine)
            .await
            .with_context(|| format!("east creates its own record {own_name}"))?;
        update(&records, &own_name, |r| {
            r.data["spec"]["ips"] = json!(["10.96.0.10"])
        })
        .await
        .with_context(|| format!("east changes its own record {own_name}"))?;
        lines.push(format!(
            "ServiceImport {own_name}: refused: namespace {ns} is protected"
        ));
    }
    logged(set, &["west", "north"], &lines).await?;
    for (name, ns) in protected {
        let own_name = format!("{name}.{ns}.{ATTACKER}");
        records
            .delete(&own_name, &DeleteParams::default())
            .await
            .with_context(|| format!("east deletes its own record {own_name}"))?;
    }
    drop(paused);
    defended.sampler.finish(AFTER_ATTACK).await
}
