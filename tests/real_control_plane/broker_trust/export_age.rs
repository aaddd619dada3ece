//! Issue 46 item 2 on a real API server: no member makes its export win a
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
use test_support::{Outcome, resolve};

use crate::broker_trust::refused;
use crate::check::{agreed_vip, fqdn};
use crate::clusterset::{BROKER_NAMESPACE, CONVERGE, Clusterset, eventually, member_broker_client};
use crate::workloads::{exported_with_pod, imports, namespace, unexport};

const NS: &str = "age";
const FIRST_SEEN: &str = "clusterset-dns.io/first-seen";
const EXPORT: &str = "clusterset-dns.io/export";

/// West exports `age/cart` as a ClusterSetIP service, east a second later
/// as a headless one: west's is the oldest, every member answers its VIP.
/// Then east, with its own broker token and its replicas stopped (so that
/// nothing of east's own rewrites its record back), declares its export
/// made at the Unix epoch (admitted: its own record, the declaration is
/// opaque to admission), tries to move its first-seen time back and to
/// create a record first seen in 2000 (both refused). West and north
/// answer west's VIP throughout: east's export stays the newer.
pub async fn no_member_makes_its_export_older(set: &mut Clusterset) -> Result<()> {
    let vip = conflict(set, "cart", 1).await?;

    let east = set.member("east");
    let client = member_broker_client(east).await?;
    let records = imports(&client, BROKER_NAMESPACE);
    let name = "cart.age.east";
    let mut record = written(&records, name).await?;
    let created = record
        .metadata
        .creation_timestamp
        .clone()
        .context("created")?;
    let first_seen: Timestamp = annotation(&record, FIRST_SEEN)?.parse()?;
    let drift = created.0.duration_since(first_seen).abs();
    ensure!(
        drift <= jiff::SignedDuration::from_secs(60),
        "east's record is first seen at {first_seen}, {drift} from its creation at {}",
        created.0
    );

    let paused = Paused::new(set, "east")?;
    let mut declared: Value = serde_json::from_str(&annotation(&record, EXPORT)?)?;
    declared["created"] = json!(0);
    set_annotation(&mut record, EXPORT, &declared.to_string());
    records
        .replace(name, &PostParams::default(), &record)
        .await
        .context("east declares its export made at the Unix epoch")?;
    let rule = "first seen when the broker creates it";
    let mut earlier = records.get(name).await?;
    set_annotation(&mut earlier, FIRST_SEEN, "2000-01-01T00:00:00Z");
    refused(
        "move east's first-seen time back",
        rule,
        records.replace(name, &PostParams::default(), &earlier),
    )
    .await?;
    let mut ghost = records.get(name).await?;
    ghost.metadata = kube::api::ObjectMeta {
        name: Some("ghost.age.east".into()),
        labels: ghost.metadata.labels.take().map(|mut labels| {
            labels.insert(
                "multicluster.kubernetes.io/service-name".into(),
                "ghost".into(),
            );
            labels
        }),
        annotations: ghost.metadata.annotations.take(),
        ..Default::default()
    };
    set_annotation(&mut ghost, FIRST_SEEN, "2000-01-01T00:00:00Z");
    refused(
        "a record first seen in 2000",
        rule,
        records.create(&PostParams::default(), &ghost),
    )
    .await?;

    west_wins(set, "cart", vip, &["west", "north"]).await?;
    drop(paused);
    for id in ["west", "east"] {
        unexport(&set.member(id).admin, NS, "cart").await?;
    }
    Ok(())
}

/// The same conflict (`age/bag`), then the broker restored from a backup
/// as tools like Velero restore it: every export record deleted and
/// created again, annotations kept, `creationTimestamp` new, east's first
/// (by its creationTimestamp, east's export would now be the older).
/// Every member is stopped meanwhile, so the records are the restore's,
/// not re-created by their clusters. Every member answers west's VIP
/// after: the first-seen times came back with the records (issue 46 item
/// 2, "a broker restore must not flip a conflict's winner").
pub async fn a_restored_broker_keeps_the_oldest_export(set: &mut Clusterset) -> Result<()> {
    let vip = conflict(set, "bag", 2).await?;
    let records = imports(&set.member("east").admin, BROKER_NAMESPACE);
    let mut saved = Vec::new();
    for cluster in ["east", "west"] {
        let mut record = written(&records, &format!("bag.age.{cluster}")).await?;
        record.metadata = kube::api::ObjectMeta {
            name: record.metadata.name.take(),
            labels: record.metadata.labels.take(),
            annotations: record.metadata.annotations.take(),
            ..Default::default()
        };
        saved.push(record);
    }
    {
        let _paused: Vec<Paused> = ["east", "west", "north"]
            .into_iter()
            .map(|id| Paused::new(set, id))
            .collect::<Result<_>>()?;
        for record in &saved {
            let name = record.metadata.name.as_deref().context("name")?;
            records.delete(name, &Default::default()).await?;
        }
        for record in &saved {
            records.create(&PostParams::default(), record).await?;
            // Whole seconds: the restored east record is the older.
            tokio::time::sleep(Duration::from_millis(1100)).await;
        }
    }
    let members: Vec<&str> = set.members.iter().map(|m| m.id.as_str()).collect();
    west_wins(set, "bag", vip, &members).await?;
    for id in ["west", "east"] {
        unexport(&set.member(id).admin, NS, "bag").await?;
    }
    Ok(())
}

/// West exports `age/<name>` as a ClusterSetIP service, east a second
/// later as a headless one: west's export is the oldest, and every member
/// answers its VIP (returned). Their pods are `10.2.7.<pod>` and `10.1.7.<pod>`.
async fn conflict(set: &Clusterset, name: &str, pod: u8) -> Result<IpAddr> {
    for member in &set.members {
        namespace(&member.admin, NS).await?;
    }
    let west = format!("10.2.7.{pod}");
    exported_with_pod(&set.member("west").admin, NS, name, false, &west).await?;
    // creationTimestamp has whole seconds: west's export is the older.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let east = format!("10.1.7.{pod}");
    exported_with_pod(&set.member("east").admin, NS, name, true, &east).await?;
    agreed_vip(set, NS, name).await
}

/// Members `ids` answer `<name>.age` with west's VIP every 100 ms for 3 s:
/// west's export stays the oldest (east's would answer pod IPs).
async fn west_wins(set: &Clusterset, name: &str, vip: IpAddr, ids: &[&str]) -> Result<()> {
    let expected = Outcome::Ips([vip].into());
    for _ in 0..30 {
        for id in ids {
            let got = resolve(set.member(id).dns(), &fqdn(name, NS), RecordType::A).await;
            ensure!(
                got == expected,
                "{id} answers {name}.age {got:?}, not west's VIP {vip}: east's export won"
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
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

fn set_annotation(object: &mut DynamicObject, key: &str, value: &str) {
    let annotations = object.metadata.annotations.get_or_insert_default();
    annotations.insert(key.into(), value.into());
}

/// A member's replicas stopped (SIGSTOP) until dropped (SIGCONT): its
/// writer cannot put back what a test wrote in its name.
struct Paused(Vec<u32>);

impl Paused {
    fn new(set: &Clusterset, id: &str) -> Result<Self> {
        let pids: Vec<u32> = set
            .member(id)
            .replicas
            .iter()
            .filter_map(|r| r.pid())
            .collect();
        ensure!(!pids.is_empty(), "{id} has running replicas");
        signal(&pids, "-STOP")?;
        Ok(Self(pids))
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        let _ = signal(&self.0, "-CONT");
    }
}

fn signal(pids: &[u32], signal: &str) -> Result<()> {
    let status = std::process::Command::new("kill")
        .arg(signal)
        .args(pids.iter().map(u32::to_string))
        .status()?;
    ensure!(status.success(), "kill {signal} {pids:?}");
    Ok(())
}
