//! Issue 46, attack 3 (a live cluster declared dead): another member's
//! heartbeat relabelled, frozen, deleted or doubled.

use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::{DeleteParams, ObjectMeta, PostParams};

use super::{ATTACKER, defend, forbidden, refused, update};
use crate::check::AFTER_ATTACK;
use crate::clusterset::{
    BROKER_NAMESPACE, CLUSTER_TIMEOUT_SECONDS, Clusterset, member_broker_client,
};

const SOURCE_CLUSTER: &str = "multicluster.kubernetes.io/source-cluster";

/// Issue 46, item 7, attack 3 (a live cluster declared dead). With east's
/// broker token, west's heartbeat is relabelled as east's, frozen (its
/// `renewTime` and holder rewritten), deleted, and doubled by a Lease
/// labelled west that would never change: the broker's policy refuses each
/// ("a member writes only its own heartbeat"; deletion, the broker's RBAC:
/// no member deletes a heartbeat). It admits east relabelling its own
/// heartbeat as west's (liveness is keyed on the label), and back; every
/// reader still sees west's own heartbeat change, so west stays live. No
/// answer of west or north changes (north's for west's headless service
/// would go with west), sampled past the cluster timeout and 3 s more.
pub async fn no_member_declares_a_live_cluster_dead(set: &mut Clusterset) -> Result<()> {
    let defended = defend(set, "alive", 13, &[]).await?;
    let east = member_broker_client(set.member(ATTACKER)).await?;
    let leases: Api<Lease> = Api::namespaced(east, BROKER_NAMESPACE);
    let rule = "a member writes only its own heartbeat";
    let west = "heartbeat.west";

    let relabelled = update(&leases, west, |l| {
        let labels = l.metadata.labels.get_or_insert_default();
        labels.insert(SOURCE_CLUSTER.into(), ATTACKER.into());
    });
    refused("west's heartbeat relabelled as east's", rule, relabelled).await?;
    let frozen = update(&leases, west, |l| {
        let spec = l.spec.get_or_insert_default();
        spec.renew_time = None;
        spec.holder_identity = Some(ATTACKER.into());
    });
    refused("west's heartbeat frozen", rule, frozen).await?;
    forbidden(
        "west's heartbeat deleted",
        "delete",
        "leases",
        leases.delete(west, &DeleteParams::default()),
    )
    .await?;
    let mut double = leases.get(west).await?;
    double.metadata = ObjectMeta {
        name: Some("heartbeat.west-2".into()),
        labels: double.metadata.labels.clone(),
        ..ObjectMeta::default()
    };
    refused(
        "a second heartbeat of west",
        rule,
        leases.create(&PostParams::default(), &double),
    )
    .await?;

    // Its own heartbeat, relabelled as west's: admitted. East's leader
    // renews it as it is (labels kept), so every reader sees two heartbeats
    // of "west" for a while; it gets its label back before east would look
    // dead.
    let own = format!("heartbeat.{ATTACKER}");
    for (cluster, pause) in [("west", CLUSTER_TIMEOUT_SECONDS / 3), (ATTACKER, 0)] {
        update(&leases, &own, |l| {
            let labels = l.metadata.labels.get_or_insert_default();
            labels.insert(SOURCE_CLUSTER.into(), cluster.into());
        })
        .await
        .with_context(|| format!("east labels its own heartbeat {cluster}"))?;
        tokio::time::sleep(Duration::from_secs(pause)).await;
    }
    let timeout = Duration::from_secs(CLUSTER_TIMEOUT_SECONDS);
    defended.sampler.finish(timeout + AFTER_ATTACK).await
}
