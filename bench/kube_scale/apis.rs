//! The API servers of the clusterset: one in-repo fake per running member
//! cluster (and one for a while for each cluster that only publishes
//! beforehand, `publish.rs`) and one broker, in the bench process, preloaded
//! through the back door (no HTTP: loading 1.5 M objects over HTTP would
//! measure the loader). Each member's kubeconfigs carry its cluster id as
//! bearer token, so the broker counts every member's traffic apart.

use std::path::Path;
use std::time::{Duration, Instant};

use fake_apiserver::{FakeApiServer, Traffic};

use crate::layout::Layout;
use crate::member::{BROKER_NAMESPACE, Kubeconfigs, LEASE_NAMESPACE};

/// Watch history kept by each server, in changes (the fake's default is
/// 100k). etcd keeps five minutes of revisions; the fresh start writes about
/// a million objects in minutes, and a shorter history would expire the
/// members' paged lists and watch resumptions (410, relist) in mid-sync.
const HISTORY: usize = 1_000_000;

/// Writes every member repeats on its own: Lease renewals (leader election
/// in its cluster, heartbeat on the broker), and the watch events they
/// cause. The rest is the real work.
pub const LIVENESS: &[&str] = &["leases"];

pub struct ApiServers {
    pub broker: FakeApiServer,
    /// The running members', indexed like [`Layout::cluster`].
    pub members: Vec<FakeApiServer>,
}

/// A member's traffic to its own API server and to the broker.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct MemberTraffic {
    pub own: Traffic,
    pub broker: Traffic,
}

impl MemberTraffic {
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            own: self.own.since(&earlier.own),
            broker: self.broker.since(&earlier.broker),
        }
    }

    /// Writes other than [`LIVENESS`], to both servers.
    pub fn work_writes(&self) -> u64 {
        self.own.writes_except(LIVENESS) + self.broker.writes_except(LIVENESS)
    }

    /// [`LIVENESS`] writes, to both servers.
    pub fn liveness_writes(&self) -> u64 {
        self.own.writes() + self.broker.writes() - self.work_writes()
    }

    /// Watch events received of resources other than [`LIVENESS`], from
    /// both servers.
    pub fn work_events(&self) -> u64 {
        self.own.watch_events_except(LIVENESS) + self.broker.watch_events_except(LIVENESS)
    }

    /// [`LIVENESS`] watch events received (every cluster's heartbeat on
    /// the broker, this cluster's leader Lease), from both servers.
    pub fn liveness_events(&self) -> u64 {
        let all = self.own.watch_events_except(&[]) + self.broker.watch_events_except(&[]);
        all - self.work_events()
    }
}

impl ApiServers {
    /// Starts the broker and the API servers of the `running` members
    /// (request logs off: millions of requests).
    pub async fn start(running: usize) -> Self {
        let broker = FakeApiServer::start().await;
        broker.set_request_log(false);
        broker.set_history_limit(HISTORY);
        broker.create_namespace(BROKER_NAMESPACE);
        let mut members = Vec::new();
        for _ in 0..running {
            members.push(member_api().await);
        }
        Self { broker, members }
    }

    /// Loads running member `ci`'s clusterset objects; the time it took.
    pub fn preload(&self, lay: &Layout, ci: usize) -> Duration {
        load(&self.members[ci], lay, ci)
    }

    /// An API server of its own for cluster `ci` (not a running member),
    /// loaded, and its kubeconfigs in `dir`: to publish once and be dropped.
    pub async fn one_off(
        &self,
        lay: &Layout,
        ci: usize,
        dir: &Path,
    ) -> (FakeApiServer, Kubeconfigs) {
        let api = member_api().await;
        load(&api, lay, ci);
        let files = self.kubeconfigs_of(&api, ci, dir);
        (api, files)
    }

    /// Writes running member `ci`'s kubeconfigs into `dir`.
    pub fn kubeconfigs(&self, ci: usize, dir: &Path) -> Kubeconfigs {
        self.kubeconfigs_of(&self.members[ci], ci, dir)
    }

    /// Kubeconfigs of cluster `ci` whose own API server is `member`.
    fn kubeconfigs_of(&self, member: &FakeApiServer, ci: usize, dir: &Path) -> Kubeconfigs {
        let id = Layout::cluster(ci);
        let files = Kubeconfigs {
            member: dir.join(format!("{id}.kubeconfig")),
            broker: dir.join(format!("{id}-broker.kubeconfig")),
        };
        let write = |api: &FakeApiServer, path: &Path, name: &str| {
            api.write_kubeconfig_with_token(path, name, &id)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        };
        write(member, &files.member, &id);
        write(&self.broker, &files.broker, "broker");
        files
    }

    /// Member `ci`'s traffic so far.
    pub fn traffic(&self, ci: usize) -> MemberTraffic {
        let id = Layout::cluster(ci);
        MemberTraffic {
            own: self.members[ci].traffic().remove(&id).unwrap_or_default(),
            broker: self.broker_traffic(&id),
        }
    }

    /// Cluster `id`'s traffic to the broker so far.
    pub fn broker_traffic(&self, id: &str) -> Traffic {
        self.broker.traffic().remove(id).unwrap_or_default()
    }

    /// Every running member's traffic so far.
    pub fn all_traffic(&self) -> Vec<MemberTraffic> {
        (0..self.members.len()).map(|ci| self.traffic(ci)).collect()
    }
}

/// A member cluster's API server, with the namespace of its leader Lease.
async fn member_api() -> FakeApiServer {
    let api = FakeApiServer::start().await;
    api.set_request_log(false);
    api.set_history_limit(HISTORY);
    api.create_namespace(LEASE_NAMESPACE);
    api
}

/// Loads cluster `ci`'s clusterset objects into `api`; the time it took.
/// The load's history is dropped (compacted): clients start from a list anyway.
fn load(api: &FakeApiServer, lay: &Layout, ci: usize) -> Duration {
    let started = Instant::now();
    for doc in lay.member_objects(ci) {
        api.put_raw(doc.0)
            .unwrap_or_else(|e| panic!("preloading {}: {e:?}", Layout::cluster(ci)));
    }
    api.compact();
    started.elapsed()
}
