//! Issue 46, attack 4 (deletion of others' records, slices and claims).

use anyhow::Result;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::{DeleteParams, ListParams};

use super::{ATTACKER, NS, defend, forbidden, refused, wests};
use crate::check::AFTER_ATTACK;
use crate::clusterset::{BROKER_NAMESPACE, Clusterset, member_broker_client};
use crate::workloads::imports;

const SERVICE: &str = "gone";

/// Issue 46, item 7, attack 4 (deletion of others' records, slices and
/// claims). With east's broker token, west's and north's export records and
/// west's slice are deleted: the broker's policy refuses each ("a member
/// writes only its own ..."); deleted as a collection, the broker's RBAC
/// (no member may). No answer of west or north changes, during the attack
/// or 3 s after.
pub async fn no_member_deletes_another_members_records(set: &mut Clusterset) -> Result<()> {
    let defended = defend(set, SERVICE, 14, &[]).await?;
    let east = member_broker_client(set.member(ATTACKER)).await?;
    let records = imports(&east, BROKER_NAMESPACE);
    let slices: Api<EndpointSlice> = Api::namespaced(east.clone(), BROKER_NAMESPACE);
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

    defended.sampler.finish(AFTER_ATTACK).await
}
