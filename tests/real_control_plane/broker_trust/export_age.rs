//! Issue 46 items 2 and 7 (attack 2, "an old `created`"): no member makes its export win a
//! conflict by declaring it older (KEP-1645 "Constraints and Conflict
//! Resolution": the oldest export wins). An export is no older than the
//! broker first saw its record: the record's first-seen time, which the
//! member sets when it creates the record and the ownership policy holds to
//! the API server's `creationTimestamp` and never lets change.

use std::net::IpAddr;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use hickory_proto::rr::RecordType;
use jiff::Timestamp;
use kube::Api;
use kube::api::{DynamicObject, PostParams};
use serde_json::{Value, json};

use super::{ATTACKER, NS, Paused, delete, forged, namespaces, refused, set_annotation, update};
use crate::check::{AFTER_ATTACK, Sampler, agreed_vip, answers_everywhere, fqdn, ips};
use crate::clusterset::{BROKER_NAMESPACE, CONVERGE, Clusterset, eventually, member_broker_client};
use crate::workloads::{exported_with_pod, imports, unexport};

const FIRST_SEEN: &str = "clusterset-dns.io/first-seen";
const EXPORT: &str = "clusterset-dns.io/export";

/// West exports `trust/cart` as a ClusterSetIP service, east a second
/// later as a headless one: west's is the oldest, every member answers its
/// VIP. Then east, with its own broker token and its replicas stopped (so
/// that nothing of east's own rewrites its record back), declares its
/// export made at the Unix epoch (admitted: its own record, and the
/// declaration is opaque to admission), tries to move its first-seen time
/// back and to create a record first seen in 2000 (both refused). West and
/// north answer west's VIP throughout: east's export stays the newer.
pub async fn no_member_makes_its_export_older(set: &mut Clusterset) -> Result<()> {
    conflict(set, "cart", 1).await?;
    let east = set.member(ATTACKER);
    let client = member_broker_client(east).await?;
    let records = imports(&client, BROKER_NAMESPACE);
    let name = &format!("cart.{NS}.{ATTACKER}");
    let record = written(&records, name).await?;
    let created = record
        .metadata
        .creation_timestamp
        .as_ref()
        .context("created")?
        .0;
    let first_seen: Timestamp = annotation(&record, FIRST_SEEN)?.parse()?;
    let drift = created.duration_since(first_seen).abs();
    ensure!(
        drift <= jiff::SignedDuration::from_secs(60),
        "east's record is first seen at {first_seen}, {drift} from its creation at {created}"
    );

    let sampler = Sampler::start(set, ATTACKER, &[(fqdn("cart", NS), RecordType::A)]).await?;
    let paused = Paused::new(set, &[ATTACKER])?;
    let mut declared: Value = serde_json::from_str(&annotation(&record, EXPORT)?)?;
    declared["created"] = json!(0);
    update(&records, name, |r| {
        set_annotation(r, EXPORT, &declared.to_string())
    })
    .await
    .context("east declares its export made at the Unix epoch")?;
    let rule = "first seen when the broker creates it";
    let epoch = "2000-01-01T00:00:00Z";
    refused(
        "move east's first-seen time back",
        rule,
        update(&records, name, |r| set_annotation(r, FIRST_SEEN, epoch)),
    )
    .await?;
    let service = json!({"multicluster.kubernetes.io/service-name": "ghost"});
    let mut ghost = forged(&record, &format!("ghost.{NS}.{ATTACKER}"), &service);
    set_annotation(&mut ghost, FIRST_SEEN, epoch);
    refused(
        "a record first seen in 2000",
        rule,
        records.create(&PostParams::default(), &ghost),
    )
    .await?;
    // East stays stopped while the others are sampled: its forged
    // declaration stands for all of it.
    let sampled = sampler.finish(AFTER_ATTACK).await;
    drop(paused);
    sampled?;
    for id in ["west", "east"] {
        unexport(&set.member(id).admin, NS, "cart").await?;
    }
    Ok(())
}

/// The same conflict (`trust/bag`), then the broker restored from a backup
/// as tools like Velero restore it: every export record deleted and
/// created again, annotations kept, `creationTimestamp` new, east's first
/// (by its creationTimestamp, east's export would now be the older).
/// Every member is stopped meanwhile, so the records are the restore's,
/// not re-created by their clusters. Every member answers west's VIP
/// after, and on for 3 s: the first-seen times came back with the records
/// (issue 46 item 2, "a broker restore must not flip a conflict's winner").
pub async fn a_restored_broker_keeps_the_oldest_export(set: &mut Clusterset) -> Result<()> {
    let vip = conflict(set, "bag", 2).await?;
    let records = imports(&set.member("east").admin, BROKER_NAMESPACE);
    let mut saved = Vec::new();
    for cluster in ["east", "west"] {
        let record = written(&records, &format!("bag.{NS}.{cluster}")).await?;
        let name = record.metadata.name.as_deref().context("name")?;
        saved.push(forged(&record, name, &json!({})));
    }
    {
        let _paused = Paused::new(set, &["east", "west", "north"])?;
        for record in &saved {
            delete(&records, record.metadata.name.as_deref().context("name")?).await?;
        }
        for record in &saved {
            records.create(&PostParams::default(), record).await?;
            // Whole seconds: the restored east record is the older.
            tokio::time::sleep(Duration::from_millis(1100)).await;
        }
    }
    answers_everywhere(
        set,
        &fqdn("bag", NS),
        RecordType::A,
        &ips(&[&vip.to_string()]),
    )
    .await?;
    Sampler::start(set, "", &[(fqdn("bag", NS), RecordType::A)])
        .await?
        .finish(AFTER_ATTACK)
        .await?;
    for id in ["west", "east"] {
        unexport(&set.member(id).admin, NS, "bag").await?;
    }
    Ok(())
}

/// West exports `trust/<name>` as a ClusterSetIP service, east a second
/// later as a headless one: west's export is the oldest, and every member
/// answers its VIP (returned). Their pods are `10.2.7.<pod>` and `10.1.7.<pod>`.
async fn conflict(set: &Clusterset, name: &str, pod: u8) -> Result<IpAddr> {
    namespaces(set).await?;
    let west = format!("10.2.7.{pod}");
    exported_with_pod(&set.member("west").admin, NS, name, false, &west).await?;
    // creationTimestamp has whole seconds: west's export is the older.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let east = format!("10.1.7.{pod}");
    exported_with_pod(&set.member("east").admin, NS, name, true, &east).await?;
    agreed_vip(set, NS, name).await
}

/// A broker record, once its cluster has written it.
async fn written(records: &Api<DynamicObject>, name: &str) -> Result<DynamicObject> {
    eventually(CONVERGE, &format!("broker record {name}"), async || {
        records.get_opt(name).await.map_err(|e| e.to_string())
    })
    .await
}

fn annotation(object: &DynamicObject, key: &str) -> Result<String> {
    let annotations = object.metadata.annotations.as_ref();
    annotations
        .and_then(|a| a.get(key))
        .cloned()
        .with_context(|| format!("{:?} has no annotation {key}", object.metadata.name))
}
