//! Issue 46, "Upgrade without loss", on the real control plane: the
//! clusterset runs the previous release (built by
//! `tests/upgrade/build-previous.sh`), two replicas per member as
//! `config/kubernetes/deployment.yaml` runs them, with exports of both
//! types and a port conflict; then each member is upgraded in turn as its
//! Deployment's rolling update would do it (a new replica up, an old one
//! stopped, twice), in the order of docs/kubernetes.md, "Upgrading": the
//! broker's ownership policy first, then one member after another (and
//! one rolled back and forward again). Every replica's answers are sampled
//! every 100 ms throughout, and the broker's records followed by a watch:
//! no export record goes, no VIP changes, and no name exported somewhere
//! gets another answer (KEP-1645: a VIP is stable for the import's life;
//! an import lives while any cluster exports it).

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use futures::StreamExt;
use hickory_proto::rr::RecordType;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::DynamicObject;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use test_support::{Outcome, resolve};
use tokio::sync::Mutex;

use crate::Skipped;
use crate::check::{agreed_vip, answers_everywhere, fqdn, ips};
use crate::clusterset::{BROKER_NAMESPACE, CONVERGE, Clusterset, eventually, kubectl};
use crate::workloads::{export, exported_with_pod, imports, namespace, pod, service, unexport};

const NS: &str = "upgrade";
/// The previous release, as `tests/upgrade/build-previous.sh` names it.
const PREVIOUS: &str = "559ad55";
/// Replicas per member (config/kubernetes/deployment.yaml).
const REPLICAS: usize = 2;
/// How often every replica is asked every name.
const SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// `clusterset-dns-previous` beside this release's binary, where
/// `tests/upgrade/build-previous.sh` builds the previous release.
fn previous_binary() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_clusterset-dns")).with_file_name("clusterset-dns-previous")
}

/// What one sampled name must answer, from the moment it is sampled on.
#[derive(Clone, Debug)]
struct Expected {
    name: String,
    rtype: RecordType,
    /// The addresses (A), or `(target, port)` pairs (SRV).
    answer: Answer,
}

/// An answer as the sampler compares it.
#[derive(Clone, Debug, PartialEq)]
enum Answer {
    Ips(Outcome),
    Srv(BTreeSet<(String, u16)>),
}

/// What the sampler asks and whom: every replica (by identity) and the
/// broker's records of [`NS`] (export record names, VIP record addresses).
#[derive(Default)]
struct Plan {
    replicas: BTreeMap<String, SocketAddr>,
    names: Vec<Expected>,
    exports: BTreeSet<String>,
    vips: BTreeMap<String, Vec<String>>,
}

impl Plan {
    /// What is wrong with the broker's records of [`NS`] after `event`,
    /// `present` being the export records seen so far.
    fn broker_event(
        &self,
        event: watcher::Event<DynamicObject>,
        present: &mut BTreeSet<String>,
    ) -> Vec<String> {
        let name = |record: &DynamicObject| record.metadata.name.clone().unwrap_or_default();
        match event {
            watcher::Event::Init => {
                present.clear();
                Vec::new()
            }
            watcher::Event::InitApply(record) | watcher::Event::Apply(record) => {
                present.insert(name(&record));
                let ips = serde_json::from_value(record.data["spec"]["ips"].clone());
                match self.vips.get(&name(&record)) {
                    Some(agreed) if ips.as_ref().ok() != Some(agreed) => vec![format!(
                        "VIP record {}: {ips:?}, agreed {agreed:?}",
                        name(&record)
                    )],
                    _ => Vec::new(),
                }
            }
            watcher::Event::InitDone => self
                .exports
                .iter()
                .chain(self.vips.keys())
                .filter(|r| !present.contains(*r))
                .map(|r| format!("{r} missing"))
                .collect(),
            watcher::Event::Delete(record) => {
                let gone = name(&record);
                present.remove(&gone);
                match self.exports.contains(&gone) || self.vips.contains_key(&gone) {
                    true => vec![format!("{gone} deleted")],
                    false => Vec::new(),
                }
            }
        }
    }
}

/// Samples until stopped: every replica's answers every [`SAMPLE_EVERY`],
/// and every change of the broker's records as its watch tells it; each
/// answer or record that differs from the plan is a line of the report.
struct Sampler {
    /// Held by the sampler for a whole round, so a replica taken out of
    /// the plan is no longer asked once [`Self::edit`] returns.
    plan: Arc<Mutex<Plan>>,
    stop: tokio::sync::watch::Sender<bool>,
    answers: tokio::task::JoinHandle<(usize, Vec<String>)>,
    broker: tokio::task::JoinHandle<Vec<String>>,
}

impl Sampler {
    fn start(broker: Client, plan: Plan) -> Self {
        let plan = Arc::new(Mutex::new(plan));
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let began = Instant::now();
        let answers = tokio::spawn(Self::answers(plan.clone(), stopped.clone(), began));
        let broker = tokio::spawn(Self::broker(broker, plan.clone(), stopped, began));
        Self {
            plan,
            stop,
            answers,
            broker,
        }
    }

    /// Asks every replica every name, round after round.
    async fn answers(
        plan: Arc<Mutex<Plan>>,
        mut stopped: tokio::sync::watch::Receiver<bool>,
        began: Instant,
    ) -> (usize, Vec<String>) {
        let (mut rounds, mut wrong) = (0, Vec::new());
        while !*stopped.borrow() {
            let plan = plan.lock().await;
            let at = began.elapsed().as_secs_f32();
            for (replica, dns) in &plan.replicas {
                for expected in &plan.names {
                    let got = match expected.answer {
                        Answer::Ips(_) => {
                            Answer::Ips(resolve(*dns, &expected.name, expected.rtype).await)
                        }
                        Answer::Srv(_) => {
                            let reply = test_support::query(*dns, &expected.name, RecordType::SRV);
                            Answer::Srv(test_support::srv_targets(&reply.await))
                        }
                    };
                    if got != expected.answer {
                        wrong.push(format!(
                            "+{at:.1}s {replica}: {} {}: {got:?}, expected {:?}",
                            expected.name, expected.rtype, expected.answer
                        ));
                    }
                }
            }
            drop(plan);
            rounds += 1;
            tokio::select! {
                _ = tokio::time::sleep(SAMPLE_EVERY) => {}
                _ = stopped.changed() => {}
            }
        }
        (rounds, wrong)
    }

    /// Follows the broker's records of [`NS`] with a watch, so a record
    /// deleted and written again between two rounds is seen too.
    async fn broker(
        broker: Client,
        plan: Arc<Mutex<Plan>>,
        mut stopped: tokio::sync::watch::Receiver<bool>,
        began: Instant,
    ) -> Vec<String> {
        let selector = format!("clusterset-dns.io/service-namespace={NS}");
        let config = watcher::Config::default().labels(&selector);
        let records = imports(&broker, BROKER_NAMESPACE);
        let mut events = std::pin::pin!(watcher(records, config).default_backoff());
        let (mut present, mut wrong) = (BTreeSet::new(), Vec::new());
        loop {
            let event = tokio::select! {
                event = events.next() => event,
                _ = stopped.changed() => break,
            };
            let at = began.elapsed().as_secs_f32();
            match event {
                Some(Ok(event)) => {
                    let found = plan.lock().await.broker_event(event, &mut present);
                    wrong.extend(found.into_iter().map(|w| format!("+{at:.1}s broker: {w}")));
                }
                Some(Err(e)) => eprintln!("  +{at:.1}s the broker watch: {e} (retried)"),
                None => break,
            }
        }
        wrong
    }

    async fn edit(&self, change: impl FnOnce(&mut Plan)) {
        change(&mut *self.plan.lock().await);
    }

    /// Stops sampling; fails with every wrong sample.
    async fn finish(self) -> Result<usize> {
        let _ = self.stop.send(true);
        let (rounds, mut wrong) = self.answers.await.context("the sampler")?;
        wrong.extend(self.broker.await.context("the broker watch")?);
        ensure!(
            wrong.is_empty(),
            "{} answers or broker events in {rounds} rounds not as before the upgrade (first 40):\n{}",
            wrong.len(),
            wrong
                .iter()
                .take(40)
                .cloned()
                .collect::<Vec<_>>()
                .join("\n")
        );
        Ok(rounds)
    }
}

/// Replaces member `i`'s replicas with [`REPLICAS`] of `binary`, one at a
/// time as a rolling update with `maxSurge: 1, maxUnavailable: 0` does:
/// a new replica answers before an old one stops, and the sampler stops
/// asking a replica before it stops.
async fn roll(
    set: &mut Clusterset,
    i: usize,
    binary: &Path,
    sampler: Option<&Sampler>,
) -> Result<()> {
    let old: Vec<String> = set.members[i]
        .replicas
        .iter()
        .map(|r| r.identity.clone())
        .collect();
    for step in 0..REPLICAS.max(old.len()) {
        if step < REPLICAS {
            set.add_replica_of(i, binary).await?;
            let new = set.members[i].replicas.last().context("the new replica")?;
            let (identity, dns) = (new.identity.clone(), new.dns);
            if let Some(sampler) = sampler {
                sampler
                    .edit(|p| {
                        p.replicas.insert(identity, dns);
                    })
                    .await;
            }
        }
        if let Some(gone) = old.get(step) {
            if let Some(sampler) = sampler {
                sampler
                    .edit(|p| {
                        p.replicas.remove(gone);
                    })
                    .await;
            }
            let replicas = &mut set.members[i].replicas;
            let at = replicas.iter().position(|r| &r.identity == gone);
            replicas.remove(at.context("an old replica")?).stop();
        }
    }
    Ok(())
}

/// `kubectl apply` of broker-ownership-policy.yaml on the broker.
fn bind_policy(set: &Clusterset) -> Result<()> {
    let policy = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("config/kubernetes/broker-ownership-policy.yaml");
    kubectl(
        &set.members[0].plane,
        &["apply", "-f", &policy.display().to_string()],
    )?;
    Ok(())
}

/// A headless export `name` of member `id` with one Pod at `ip`, answered
/// everywhere, then sampled.
async fn probe(set: &Clusterset, sampler: &Sampler, id: &str, name: &str, ip: &str) -> Result<()> {
    exported_with_pod(&set.member(id).admin, NS, name, true, ip).await?;
    let expected = ips(&[ip]);
    answers_everywhere(set, &fqdn(name, NS), RecordType::A, &expected).await?;
    let record = format!("{name}.{NS}.{id}");
    sampler
        .edit(|p| {
            p.names.push(Expected {
                name: fqdn(name, NS),
                rtype: RecordType::A,
                answer: Answer::Ips(expected),
            });
            p.exports.insert(record);
        })
        .await;
    Ok(())
}

/// The order of docs/kubernetes.md, "Upgrading".
const ORDER: [&str; 3] = ["east", "west", "north"];

/// The previous release in every member (no ownership policy on the broker:
/// it did not ship one), exports made by it; then, sampled throughout, the
/// policy applied and every member upgraded in turn. The policy is bound
/// again whatever happens: later scenarios run under it.
pub async fn members_upgraded_one_at_a_time_lose_nothing(set: &mut Clusterset) -> Result<()> {
    let previous = previous_binary();
    if !previous.exists() {
        let message = format!(
            "the previous release ({PREVIOUS}) is not built at {} (bash tests/upgrade/build-previous.sh)",
            previous.display()
        );
        if std::env::var_os("CI").is_some() {
            bail!(message);
        }
        return Err(Skipped(message).into());
    }
    let outcome = upgrade(set, &previous).await;
    bind_policy(set)?;
    outcome
}

async fn upgrade(set: &mut Clusterset, previous: &Path) -> Result<()> {
    kubectl(
        &set.members[0].plane,
        &[
            "delete",
            "validatingadmissionpolicybinding",
            "clusterset-broker-ownership",
            "--ignore-not-found",
        ],
    )?;
    for i in 0..set.members.len() {
        roll(set, i, previous, None).await?;
    }

    // Exports made by the previous release: web (ClusterSetIP, east and
    // west), cart (ClusterSetIP, east's port 80 against west's 8080: a
    // PortConflict that east, the older export, wins), db (headless, west
    // and north), api (ClusterSetIP, north alone).
    for member in &set.members {
        namespace(&member.admin, NS).await?;
    }
    for (id, octet) in [("east", 1), ("west", 2)] {
        let admin = &set.member(id).admin;
        exported_with_pod(admin, NS, "web", false, &format!("10.{octet}.40.1")).await?;
    }
    for (id, port) in [("east", 80), ("west", 8080)] {
        let admin = &set.member(id).admin;
        service(admin, NS, "cart", false, &["IPv4"], &[("http", port)]).await?;
        export(admin, NS, "cart").await?;
        // creationTimestamp has whole seconds: east's export is the older.
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    let db = ["10.2.40.2", "10.3.40.2"];
    for (id, ip) in [("west", db[0]), ("north", db[1])] {
        exported_with_pod(&set.member(id).admin, NS, "db", true, ip).await?;
    }
    let north = &set.member("north").admin;
    exported_with_pod(north, NS, "api", false, "10.3.40.1").await?;
    pod(north, NS, "db", "db-2", &["10.3.40.3"], false).await?;
    let db = ips(&[db[0], db[1], "10.3.40.3"]);
    answers_everywhere(set, &fqdn("db", NS), RecordType::A, &db).await?;

    let mut plan = Plan::default();
    for name in ["web", "cart", "api"] {
        let vip = agreed_vip(set, NS, name).await?;
        plan.names.push(Expected {
            name: fqdn(name, NS),
            rtype: RecordType::A,
            answer: Answer::Ips(Outcome::Ips([vip].into())),
        });
        plan.vips
            .insert(format!("{name}.{NS}"), vec![vip.to_string()]);
    }
    plan.names.push(Expected {
        name: fqdn("db", NS),
        rtype: RecordType::A,
        answer: Answer::Ips(db),
    });
    let srv = format!("_http._tcp.{}", fqdn("cart", NS));
    let port80 = BTreeSet::from([(fqdn("cart", NS), 80)]);
    eventually(CONVERGE, "cart's SRV: east's port", async || {
        let reply = test_support::query(set.members[0].dns(), &srv, RecordType::SRV).await;
        let got = test_support::srv_targets(&reply);
        if got == port80 {
            Ok(Some(()))
        } else {
            Err(format!("{got:?}"))
        }
    })
    .await?;
    plan.names.push(Expected {
        name: srv,
        rtype: RecordType::SRV,
        answer: Answer::Srv(port80),
    });
    plan.exports = [
        "web.upgrade.east",
        "web.upgrade.west",
        "cart.upgrade.east",
        "cart.upgrade.west",
        "db.upgrade.west",
        "db.upgrade.north",
        "api.upgrade.north",
    ]
    .map(str::to_owned)
    .into();
    for member in &set.members {
        for replica in &member.replicas {
            plan.replicas.insert(replica.identity.clone(), replica.dns);
        }
    }
    let broker = set.broker.clone();
    let sampler = Sampler::start(broker, plan);
    let began = Instant::now();

    // First the policy: it admits what the previous release writes (its
    // records have the names and labels the policy asks for), shown here
    // by members on it publishing, then releasing a VIP, under it.
    bind_policy(set)?;
    probe(set, &sampler, "north", "policy-north", "10.3.41.9").await?;
    let east = set.member("east").admin.clone();
    exported_with_pod(&east, NS, "released", false, "10.1.41.9").await?;
    let vip = agreed_vip(set, NS, "released").await?;
    unexport(&east, NS, "released").await?;
    for member in &set.members {
        let dns = member.dns();
        let what = format!("{}: released is NXDOMAIN", member.id);
        eventually(CONVERGE, &what, async || {
            match resolve(dns, &fqdn("released", NS), RecordType::A).await {
                Outcome::NxDomain => Ok(Some(())),
                other => Err(format!("{other:?}")),
            }
        })
        .await?;
    }
    let records = imports(&set.broker, BROKER_NAMESPACE);
    let claims: Api<ConfigMap> = Api::namespaced(set.broker.clone(), BROKER_NAMESPACE);
    let claim = format!("clusterset-vip-{}", vip.to_string().replace('.', "-"));
    let record = format!("released.{NS}");
    eventually(
        CONVERGE,
        "released's VIP record and claim deleted",
        async || match (records.get_opt(&record).await, claims.get_opt(&claim).await) {
            (Ok(None), Ok(None)) => Ok(Some(())),
            (record, claim) => Err(format!(
                "record {:?}, claim {:?}",
                record.map(|r| r.is_some()),
                claim.map(|c| c.is_some())
            )),
        },
    )
    .await?;

    let current = Path::new(env!("CARGO_BIN_EXE_clusterset-dns"));
    for id in ORDER {
        let i = set.members.iter().position(|m| m.id == id).context(id)?;
        roll(set, i, current, Some(&sampler)).await?;
        // The upgraded member's writer publishes under the policy, and the
        // others (some still on the previous release) read what it wrote.
        let ip = format!("10.{}.41.1", i + 1);
        probe(set, &sampler, id, &format!("probe-{id}"), &ip).await?;
        eprintln!("  {id} upgraded at +{:.1?}", began.elapsed());
    }
    // A rollback under the policy, sampled too: west back to the previous
    // release, publishing there, and forward again.
    let west = set.members.iter().position(|m| m.id == "west");
    let west = west.context("west")?;
    roll(set, west, previous, Some(&sampler)).await?;
    probe(set, &sampler, "west", "rollback-west", "10.2.43.1").await?;
    roll(set, west, current, Some(&sampler)).await?;
    eprintln!("  west rolled back and forward at +{:.1?}", began.elapsed());
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rounds = sampler.finish().await?;
    eprintln!(
        "  {rounds} sampling rounds over {:.1?}, every one as before",
        began.elapsed()
    );
    Ok(())
}
