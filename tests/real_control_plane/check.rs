//! What every scenario asks of the clusterset: the same answer from every
//! member's DNS, and objects as each member's API server holds them.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, ensure};
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use serde_json::Value;
use test_support::{Outcome, query, resolve};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

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

/// One answer as [`Sampler`] compares it: the response code and every
/// answer record's data, sorted (TTLs left out: they are no change).
pub type Answer = (ResponseCode, BTreeSet<String>);

/// Member `dns`'s [`Answer`] to `name`/`rtype`.
pub async fn answer(dns: SocketAddr, name: &str, rtype: RecordType) -> Answer {
    let response = query(dns, name, rtype).await;
    let data = response.answers.iter().map(|r| r.data.to_string());
    (response.metadata.response_code, data.collect())
}

/// How often [`Sampler`] asks every member each of its questions.
const SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// How long answers are sampled after an attack's last write, for what
/// members do about it (repairs, re-claims) to show.
pub const AFTER_ATTACK: Duration = Duration::from_secs(3);

/// Every member's answers but the attacker's, asked every [`SAMPLE_EVERY`]
/// in the background from [`Sampler::start`] to [`Sampler::finish`]: issue
/// 46's goal is that no member's credentials change what another member
/// answers, not even for the moment the others take to repair.
pub struct Sampler {
    stop: oneshot::Sender<()>,
    task: JoinHandle<Samples>,
}

/// What the background task saw.
#[derive(Default)]
struct Samples {
    rounds: usize,
    longest_round: Duration,
    changed: Vec<String>,
}

impl Sampler {
    /// Waits until every member but `attacker` gives the same answer to
    /// each question (the answer before the attack), then starts sampling.
    pub async fn start(
        set: &Clusterset,
        attacker: &str,
        questions: &[(String, RecordType)],
    ) -> Result<Self> {
        let members: Vec<(String, SocketAddr)> = set
            .members
            .iter()
            .filter(|m| m.id != attacker)
            .map(|m| (m.id.clone(), m.dns()))
            .collect();
        let mut before = Vec::new();
        for (name, rtype) in questions {
            let what = format!("one answer to {name} {rtype} from every member but {attacker}");
            let agreed = eventually(CONVERGE, &what, async || {
                let mut seen = Vec::new();
                for (_, dns) in &members {
                    seen.push(answer(*dns, name, *rtype).await);
                }
                match seen.split_first() {
                    Some((first, rest)) if rest.iter().all(|a| a == first) => {
                        Ok(Some(first.clone()))
                    }
                    _ => Err(format!("{seen:?}")),
                }
            })
            .await?;
            before.push((name.clone(), *rtype, agreed));
        }
        let (stop, mut stopped) = oneshot::channel();
        let task = tokio::spawn(async move {
            let started = Instant::now();
            let mut samples = Samples::default();
            loop {
                let round = Instant::now();
                for (id, dns) in &members {
                    for (name, rtype, expected) in &before {
                        let got = answer(*dns, name, *rtype).await;
                        if &got != expected {
                            samples.changed.push(format!(
                                "{id}: {name} {rtype} at {:.1?}: {got:?}, before {expected:?}",
                                started.elapsed()
                            ));
                        }
                    }
                }
                samples.rounds += 1;
                samples.longest_round = samples.longest_round.max(round.elapsed());
                tokio::select! {
                    _ = &mut stopped => return samples,
                    () = tokio::time::sleep(SAMPLE_EVERY) => {}
                }
            }
        });
        Ok(Self { stop, task })
    }

    /// Samples on for `after` (past the attack's last write), then fails
    /// if any answer sampled differed from the one before.
    pub async fn finish(self, after: Duration) -> Result<()> {
        tokio::time::sleep(after).await;
        // The task may have ended already, panicking on a reply: it says so below.
        let _ = self.stop.send(());
        let samples = self
            .task
            .await
            .map_err(|e| anyhow!("the sampler failed: {e}"))?;
        ensure!(
            samples.changed.is_empty(),
            "{} answers of {} rounds differed from the answer before the attack:\n{}",
            samples.changed.len(),
            samples.rounds,
            samples.changed.join("\n")
        );
        // A round every SAMPLE_EVERY, and none that took a second (which
        // could miss a change that came and went).
        let expected = after.as_millis() / SAMPLE_EVERY.as_millis() / 2;
        ensure!(
            samples.rounds as u128 >= expected && samples.longest_round < Duration::from_secs(1),
            "sampled {} rounds (expected at least {expected}), the longest {:?}",
            samples.rounds,
            samples.longest_round
        );
        Ok(())
    }
}
