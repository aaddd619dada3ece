//! Issue 46, attack 4 (deletion of others' records, slices and claims).

use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{DeleteParams, ListParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use super::{ATTACKER, NS, defend, delete, forbidden, refused, wests};
use crate::check::AFTER_ATTACK;
use crate::clusterset::{BROKER_NAMESPACE, CONVERGE, Clusterset, eventually, member_broker_client};
use crate::workloads::imports;

const SERVICE: &str = "gone";
/// How long east keeps deleting every VIP record and claim: long enough
/// for the members to write the record back more than once through the
/// writer's retry backoff (one rewrite in 2 s was seen on the 2-core CI
/// machine).
const RELEASING: Duration = Duration::from_secs(5);

/// Issue 46, item 7, attack 4 (deletion of others' records, slices and
/// claims). With east's broker token, west's and north's export records and
/// west's slice are deleted: the broker's policy refuses each ("a member
/// writes only its own ..."); deleted as a collection, the broker's RBAC
/// (no member may). The policy admits deleting VIP records and claims (that
/// is how a VIP is released), so east deletes every VIP record and every
/// claim on the broker, again each time the members write them back, for
/// 2 s; the members end with the same VIPs. No answer of west or north
/// changes, during the attack or 3 s after the last VIP record is back.
pub async fn no_member_deletes_another_members_records(set: &mut Clusterset) -> Result<()> {
    let defended = defend(set, SERVICE, 14, &[]).await?;
    let east = member_broker_client(set.member(ATTACKER)).await?;
    let records = imports(&east, BROKER_NAMESPACE);
    let slices: Api<EndpointSlice> = Api::namespaced(east.clone(), BROKER_NAMESPACE);
    let claims: Api<ConfigMap> = Api::namespaced(east.clone(), BROKER_NAMESPACE);
    let (_, west_slice) = wests(&east, SERVICE).await?;
    let own = "a member writes only its own export records";
    let own_slices = "a member writes only its own EndpointSlices";

    for cluster in ["west", "north"] {
        let name = format!("{SERVICE}.{NS}.{cluster}");
        let what = format!("{cluster}'s export record deleted");
        refused(&what, own, records.delete(&name, &DeleteParams::default())).await?;
    }
    refused(
        "west's slice deleted",
        own_slices,
        slices.delete(&west_slice, &DeleteParams::default()),
    )
    .await?;
    let of_west = ListParams::default().labels("multicluster.kubernetes.io/source-cluster=west");
    forbidden(
        "west's export records deleted as a collection",
        "deletecollection",
        "serviceimports",
        records.delete_collection(&DeleteParams::default(), &of_west),
    )
    .await?;
    forbidden(
        "west's slices deleted as a collection",
        "deletecollection",
        "endpointslices",
        slices.delete_collection(&DeleteParams::default(), &of_west),
    )
    .await?;

    // Releases, admitted: every VIP record and every claim of the broker,
    // deleted again as soon as the members write them back, for a while
    // (an attacker would not stop at one).
    let vip = defended.vip.to_string();
    let (name, claim) = (
        format!("{SERVICE}.{NS}"),
        format!("clusterset-vip-{}", vip.replace('.', "-")),
    );
    let vip_records = ListParams::default().labels("clusterset-dns.io/role=import");
    let vip_claims = ListParams::default().labels("clusterset-dns.io/vip-claim=true");
    let (until, mut releases) = (Instant::now() + RELEASING, 0);
    while Instant::now() < until {
        for record in records.list(&vip_records).await? {
            releases += usize::from(record.name_any() == name);
            delete(&records, &record.name_any()).await?;
        }
        for claim in claims.list(&vip_claims).await? {
            delete(&claims, &claim.name_any()).await?;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Written back while east keeps deleting it. How often depends on the
    // writer's retry backoff, which grows while every write is undone: the
    // last two full runs on the 2-core machine saw one rewrite in the window,
    // runs alone several. What must hold is below: written again, same VIP.
    ensure!(
        releases >= 1,
        "the members never wrote {name} back in {RELEASING:?}"
    );
    eventually(
        CONVERGE,
        "the VIP record and its claim written again, with the same VIP",
        async || {
            let record = records.get_opt(&name).await.map_err(|e| e.to_string())?;
            let ips = record.map(|r| r.data["spec"]["ips"].clone());
            let claimed = claims.get_opt(&claim).await.map_err(|e| e.to_string())?;
            match (ips, claimed) {
                (Some(ips), Some(_)) if ips == json!([vip]) => Ok(Some(())),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await?;
    defended.sampler.finish(AFTER_ATTACK).await
}
