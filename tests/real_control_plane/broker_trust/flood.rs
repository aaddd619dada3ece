//! Issue 46 items 4 and 7 (attack 5, "Flood"): one member's broker
//! credentials write more export records than a cluster may publish. The
//! API server admits them (they are the attacker's own records); every
//! other member keeps only the first [`EXPORT_CAP`] of the attacker's
//! exports by namespace and name and leaves the rest out with a log line.
//! Nobody else's answers change. (The per-namespace VIP cap is shown by
//! `tests/it/limits.rs`: here east, the oldest exporter, is stopped, and
//! others wait for it before claiming.)

use anyhow::{Context, Result};
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use jiff::Timestamp;
use serde_json::{Value, json};
use test_support::Outcome;

use super::{ATTACKER, Paused, defend, forged, logged, set_annotation, wests};
use crate::check::{AFTER_ATTACK, answer, answers, fqdn};
use crate::clusterset::{
    BROKER_NAMESPACE, CONVERGE, Clusterset, EXPORT_CAP, eventually, member_broker_client,
};
use crate::workloads::{imports, namespace};

/// The namespace flooded.
const FLOODED: &str = "trust-flood";
/// Records written: past the cap by 20, whatever else east exports.
const FLOOD: usize = EXPORT_CAP + 20;

/// East floods `trust-flood` with export records of its own name (not
/// wanting VIPs, so that no member waits for east to claim them). East's
/// replicas are stopped meanwhile, since east's own writer deletes records
/// of its name it has no export for, and for less than the cluster timeout.
/// West and north import the first of the flood, leave its last out (and
/// log it), and answer west's and north's services as before.
pub async fn a_flood_of_records_is_capped_and_changes_no_other_answer(
    set: &mut Clusterset,
) -> Result<()> {
    let defended = defend(set, "dam", 17, &[]).await?;
    for member in &set.members {
        namespace(&member.admin, FLOODED).await?;
    }
    let client = member_broker_client(set.member(ATTACKER)).await?;
    let (mut template, _) = wests(&client, "dam").await?;
    let export = "clusterset-dns.io/export";
    let annotation = template
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(export));
    let mut extras: Value = serde_json::from_str(annotation.context("the export annotation")?)?;
    extras["clustersetIp"] = json!(false);
    set_annotation(&mut template, export, &extras.to_string());
    let records = imports(&client, BROKER_NAMESPACE);
    let name = |i: usize| format!("f{i:03}");
    {
        let _paused = Paused::new(set, &[ATTACKER])?;
        let now = Timestamp::from_second(Timestamp::now().as_second())?.to_string();
        let writes = (0..FLOOD).map(|i| {
            let labels = json!({
                "multicluster.kubernetes.io/source-cluster": ATTACKER,
                "multicluster.kubernetes.io/service-name": name(i),
                "clusterset-dns.io/service-namespace": FLOODED,
            });
            let record_name = format!("{}.{FLOODED}.{ATTACKER}", name(i));
            let mut record = forged(&template, &record_name, &labels);
            set_annotation(&mut record, "clusterset-dns.io/first-seen", &now);
            let records = records.clone();
            async move { records.create(&Default::default(), &record).await }
        });
        for written in futures::future::join_all(writes).await {
            written.context("east writes its own export record")?;
        }
        // A batch's log names ten services left out, then counts the rest.
        let line = "left out by --max-exports-per-cluster (east is over it)".to_owned();
        logged(set, &["west", "north"], &[line]).await?;
        let last = name(FLOOD - 1);
        for id in ["west", "north"] {
            let dns = set.member(id).dns();
            let first = fqdn(&name(0), FLOODED);
            eventually(CONVERGE, &format!("{id}: {first} answered"), async || {
                let (code, answers) = answer(dns, &first, RecordType::A).await;
                match code == ResponseCode::NoError && !answers.is_empty() {
                    true => Ok(Some(())),
                    false => Err(format!("{code} {answers:?}")),
                }
            })
            .await?;
            // Last by name, so left out once the whole flood has arrived.
            let past = fqdn(&last, FLOODED);
            answers(set, id, &past, RecordType::A, &Outcome::NxDomain).await?;
        }
        defended.sampler.finish(AFTER_ATTACK).await?;
    }
    // East's own writer removes the records of its name it has no export for.
    for id in ["west", "north"] {
        let first = fqdn(&name(0), FLOODED);
        answers(set, id, &first, RecordType::A, &Outcome::NxDomain).await?;
    }
    Ok(())
}
