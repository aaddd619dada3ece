//! Cluster liveness. The leader of each member renews a heartbeat, the Lease
//! `heartbeat.<cluster>` in the broker namespace; every replica of every
//! member watches them all and judges a cluster dead once its heartbeat has
//! not changed for `--cluster-timeout`, timed on its own monotonic clock from
//! when it last saw a change (see [`Observed`]: remote clocks may be skewed).
//! Verdicts reach the engine as [`Change::Live`]. A cluster without a
//! heartbeat (never seen, or running a version that writes none) is live;
//! nothing of a dead cluster is deleted from the broker. A replica declares
//! deaths only while it sees its own cluster's heartbeat change: when it
//! cannot see the broker, every heartbeat looks stale, and the fault is its own.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::PostParams;
use kube::runtime::watcher::Event;
use kube::{Api, Client, ResourceExt};
use tokio::time::Instant;

use super::api::conflict_is_false;
use super::observed::Observed;
use crate::k8s::crd::LABEL_SOURCE_CLUSTER;
use crate::k8s::records::{LABEL_MANAGED_BY, LABEL_ROLE, MANAGER};
use crate::model::{Change, ClusterId};

/// Selects the heartbeat Leases on the broker.
pub(crate) const SELECTOR: &str = "clusterset-dns.io/role=heartbeat";

/// Name of a cluster's heartbeat Lease.
pub(crate) fn lease_name(cluster: &str) -> String {
    format!("heartbeat.{cluster}")
}

/// Renews this cluster's heartbeat (by the leader only).
pub(crate) struct Heartbeat {
    api: Api<Lease>,
    cluster: ClusterId,
    timeout: Duration,
}

impl Heartbeat {
    /// The heartbeat of `cluster` in `namespace` of the broker.
    pub(crate) fn new(
        broker: Client,
        namespace: &str,
        cluster: ClusterId,
        timeout: Duration,
    ) -> Self {
        Self {
            api: Api::namespaced(broker, namespace),
            cluster,
            timeout,
        }
    }

    /// How often to renew: four times per timeout, so one lost renewal
    /// never makes a cluster look dead.
    pub(crate) fn period(&self) -> Duration {
        self.timeout / 4
    }

    /// One renewal: creates the Lease, or moves its `renewTime` on (a value
    /// the others only compare for change). False: another writer came first.
    pub(crate) async fn renew(&self) -> Result<bool, kube::Error> {
        let name = lease_name(&self.cluster);
        let spec = LeaseSpec {
            holder_identity: Some(self.cluster.to_string()),
            lease_duration_seconds: i32::try_from(self.timeout.as_secs()).ok(),
            renew_time: Some(MicroTime(Timestamp::now())),
            ..LeaseSpec::default()
        };
        let Some(mut lease) = self.api.get_opt(&name).await? else {
            let labels = BTreeMap::from([
                (LABEL_ROLE.to_owned(), "heartbeat".to_owned()),
                (LABEL_SOURCE_CLUSTER.to_owned(), self.cluster.to_string()),
                (LABEL_MANAGED_BY.to_owned(), MANAGER.to_owned()),
            ]);
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(name),
                    labels: Some(labels),
                    ..ObjectMeta::default()
                },
                spec: Some(spec),
            };
            return conflict_is_false(self.api.create(&PostParams::default(), &lease).await);
        };
        lease.spec = Some(spec);
        conflict_is_false(
            self.api
                .replace(&name, &PostParams::default(), &lease)
                .await,
        )
    }
}

/// Every other cluster's heartbeat as this replica saw it, and the verdicts.
pub(crate) struct Liveness {
    me: ClusterId,
    timeout: Duration,
    seen: HashMap<ClusterId, Observed<Option<LeaseSpec>>>,
    mine: Option<Observed<Option<LeaseSpec>>>,
    dead: BTreeSet<ClusterId>,
    relisted: Option<HashSet<ClusterId>>,
}

impl Liveness {
    /// Verdicts on the clusters other than `me`, dead after `timeout` without a change.
    pub(crate) fn new(me: ClusterId, timeout: Duration) -> Self {
        Self {
            me,
            timeout,
            seen: HashMap::new(),
            mine: None,
            dead: BTreeSet::new(),
            relisted: None,
        }
    }

    /// Takes in one event of the heartbeat watch, seen at `now`.
    pub(crate) fn on_event(&mut self, event: &Event<Lease>, now: Instant) {
        match event {
            Event::Apply(lease) | Event::InitApply(lease) => {
                let Some(cluster) = self.cluster_of(lease) else {
                    return;
                };
                if cluster == self.me {
                    match &mut self.mine {
                        Some(mine) => mine.update(lease.spec.clone(), now),
                        None => self.mine = Some(Observed::new(lease.spec.clone(), now)),
                    }
                    return;
                }
                if let Some(relisted) = &mut self.relisted {
                    relisted.insert(cluster.clone());
                }
                match self.seen.get_mut(&cluster) {
                    Some(seen) => seen.update(lease.spec.clone(), now),
                    None => {
                        self.seen
                            .insert(cluster, Observed::new(lease.spec.clone(), now));
                    }
                }
            }
            Event::Delete(lease) => match self.cluster_of(lease) {
                Some(cluster) if cluster == self.me => self.mine = None,
                Some(cluster) => {
                    self.seen.remove(&cluster);
                }
                None => {}
            },
            Event::Init => self.relisted = Some(HashSet::new()),
            Event::InitDone => {
                let relisted = self.relisted.take().unwrap_or_default();
                self.seen.retain(|cluster, _| relisted.contains(cluster));
            }
        }
    }

    fn cluster_of(&self, lease: &Lease) -> Option<ClusterId> {
        let cluster = lease.labels().get(LABEL_SOURCE_CLUSTER)?;
        Some(cluster.as_str().into())
    }

    /// The verdicts that changed at `now`, as changes for the engine.
    pub(crate) fn judge(&mut self, now: Instant) -> Vec<Change> {
        let stale = |seen: &Observed<_>| seen.unchanged_for(now) >= self.timeout;
        let blind = self.mine.as_ref().is_none_or(stale);
        let dead: BTreeSet<ClusterId> = self
            .seen
            .iter()
            .filter(|(cluster, seen)| stale(seen) && (!blind || self.dead.contains(*cluster)))
            .map(|(cluster, _)| cluster.clone())
            .collect();
        let died = dead
            .difference(&self.dead)
            .map(|c| Change::Live(c.clone(), false));
        let revived = self
            .dead
            .difference(&dead)
            .map(|c| Change::Live(c.clone(), true));
        let changes = died.chain(revived).collect();
        self.dead = dead;
        changes
    }

    /// Every other cluster with a heartbeat, and whether it is live.
    pub(crate) fn verdicts(&self) -> impl Iterator<Item = (&ClusterId, bool)> {
        self.seen.keys().map(|c| (c, !self.dead.contains(c)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(cluster: &str, renewed: &str) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some(lease_name(cluster)),
                labels: Some(BTreeMap::from([(
                    LABEL_SOURCE_CLUSTER.to_owned(),
                    cluster.to_owned(),
                )])),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                renew_time: Some(MicroTime(renewed.parse().unwrap())),
                ..LeaseSpec::default()
            }),
        }
    }

    /// Skewed clocks do not matter: a renewal dated in 1990 or 2090 is a
    /// renewal; only how long the record stays unchanged here counts.
    #[test]
    fn a_cluster_dies_when_its_heartbeat_stops_changing_and_returns_with_it() {
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        let mut liveness = Liveness::new("east".into(), Duration::from_secs(3));
        liveness.on_event(&Event::Apply(lease("west", "1990-01-01T00:00:00Z")), at(0));
        let mine = |s| Event::Apply(lease("east", &format!("2026-01-01T00:00:0{s}Z")));
        for s in 0..8 {
            liveness.on_event(&mine(s), at(s * 1000));
        }
        assert!(liveness.judge(at(2000)).is_empty());
        liveness.on_event(
            &Event::Apply(lease("west", "2090-01-01T00:00:00Z")),
            at(2000),
        );
        assert!(liveness.judge(at(4000)).is_empty(), "renewed at 2 s");
        assert_eq!(
            liveness.judge(at(5000)),
            [Change::Live("west".into(), false)]
        );
        assert!(liveness.judge(at(6000)).is_empty(), "reported once");
        assert_eq!(
            liveness.verdicts().collect::<Vec<_>>(),
            [(&"west".into(), false)]
        );
        liveness.on_event(
            &Event::Apply(lease("west", "2090-01-01T00:00:01Z")),
            at(7000),
        );
        assert_eq!(
            liveness.judge(at(7000)),
            [Change::Live("west".into(), true)]
        );
    }

    /// A heartbeat that disappears (deleted, or gone at a relist) is no
    /// verdict: the cluster counts as live, like one that never had one.
    #[test]
    fn a_vanished_heartbeat_makes_the_cluster_live() {
        let start = Instant::now();
        let mut liveness = Liveness::new("east".into(), Duration::from_secs(1));
        liveness.on_event(&Event::Apply(lease("east", "2026-01-01T00:00:00Z")), start);
        liveness.on_event(&Event::Apply(lease("west", "2026-01-01T00:00:00Z")), start);
        liveness.on_event(&Event::Apply(lease("north", "2026-01-01T00:00:00Z")), start);
        let later = start + Duration::from_secs(2);
        liveness.on_event(&Event::Apply(lease("east", "2026-01-01T00:00:02Z")), later);
        assert_eq!(liveness.judge(later).len(), 2);
        liveness.on_event(&Event::Delete(lease("west", "2026-01-01T00:00:00Z")), later);
        liveness.on_event(&Event::Init, later);
        liveness.on_event(&Event::InitDone, later);
        let mut back = liveness.judge(later);
        back.sort_by_key(|c| format!("{c:?}"));
        assert_eq!(
            back,
            [
                Change::Live("north".into(), true),
                Change::Live("west".into(), true)
            ]
        );
        assert_eq!(liveness.verdicts().count(), 0);
    }

    /// A replica that sees its own heartbeat stale sees the broker stale:
    /// it declares no deaths (and keeps those it declared).
    #[test]
    fn no_deaths_are_declared_while_the_own_heartbeat_looks_stale() {
        let start = Instant::now();
        let later = start + Duration::from_secs(2);
        let mut liveness = Liveness::new("east".into(), Duration::from_secs(1));
        liveness.on_event(&Event::Apply(lease("west", "2026-01-01T00:00:00Z")), start);
        assert!(liveness.judge(later).is_empty(), "no own heartbeat yet");
        liveness.on_event(&Event::Apply(lease("east", "2026-01-01T00:00:00Z")), start);
        assert!(liveness.judge(later).is_empty(), "own heartbeat stale too");
        liveness.on_event(&Event::Apply(lease("north", "2026-01-01T00:00:00Z")), start);
        liveness.on_event(&Event::Apply(lease("east", "2026-01-01T00:00:01Z")), later);
        assert_eq!(liveness.judge(later).len(), 2);
        let much_later = later + Duration::from_secs(5);
        liveness.on_event(
            &Event::Apply(lease("north", "2026-01-01T00:00:09Z")),
            much_later,
        );
        assert_eq!(
            liveness.judge(much_later),
            [Change::Live("north".into(), true)],
            "revivals need no own heartbeat; west stays dead"
        );
    }
}
