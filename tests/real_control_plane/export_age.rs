//! Issue 46 item 2 on a real API server: no member makes its export win a
//! conflict by declaring it older (KEP-1645 "Constraints and Conflict
//! Resolution": the oldest export wins). An export is no older than the
//! broker first saw its record: the record's first-seen time, which the
//! member sets when it creates the record and the ownership policy holds to
//! the API server's `creationTimestamp` and never lets change.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use hickory_proto::rr::RecordType;
use jiff::Timestamp;
use kube::api::{DynamicObject, PostParams};
use serde_json::{Value, json};
use test_support::{Outcome, resolve};

use crate::broker_trust::refused;
use crate::check::agreed_vip;
use crate::clusterset::{BROKER_NAMESPACE, Clusterset, member_broker_client};
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
    for member in &set.members {
        namespace(&member.admin, NS).await?;
    }
    exported_with_pod(&set.member("west").admin, NS, "cart", false, "10.2.7.1").await?;
    // creationTimestamp has whole seconds: west's export is the older.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    exported_with_pod(&set.member("east").admin, NS, "cart", true, "10.1.7.1").await?;
    let vip = agreed_vip(set, NS, "cart").await?;

    let east = set.member("east");
    let client = member_broker_client(east).await?;
    let records = imports(&client, BROKER_NAMESPACE);
    let name = "cart.age.east";
    let mut record = records.get(name).await?;
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

    let expected = Outcome::Ips([vip].into());
    for _ in 0..30 {
        for id in ["west", "north"] {
            let got = resolve(
                set.member(id).dns(),
                &crate::check::fqdn("cart", NS),
                RecordType::A,
            )
            .await;
            ensure!(
                got == expected,
                "{id} answers cart.age {got:?} with east's export declared old, not west's VIP {vip}"
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(paused);
    for id in ["west", "east"] {
        unexport(&set.member(id).admin, NS, "cart").await?;
    }
    Ok(())
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
