//! The API servers of the clusterset: one in-repo fake per member cluster and
//! one broker, in the bench process, preloaded through the back door (no
//! HTTP: loading 1.5 M objects over HTTP would measure the loader). Each
//! member's kubeconfigs carry its cluster id as bearer token, so the broker
//! counts every member's traffic apart.

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
/// in its cluster, heartbeat on the broker). The rest is the real work.
pub const LIVENESS: &[&str] = &["leases"];

pub struct ApiServers {
    pub broker: FakeApiServer,
    /// Indexed like [`Layout::cluster`].
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
}

impl ApiServers {
    /// Starts the servers (request logs off: millions of requests).
    pub async fn start(clusters: usize) -> Self {
        let broker = FakeApiServer::start().await;
        broker.set_request_log(false);
        broker.set_history_limit(HISTORY);
        broker.create_namespace(BROKER_NAMESPACE);
        let mut members = Vec::new();
        for _ in 0..clusters {
            let api = FakeApiServer::start().await;
            api.set_request_log(false);
            api.set_history_limit(HISTORY);
            api.create_namespace(LEASE_NAMESPACE);
            members.push(api);
        }
        Self { broker, members }
    }

    /// Loads member `ci`'s clusterset objects; the time it took. The load's
    /// history is dropped (compacted): clients start from a list anyway.
    pub fn preload(&self, lay: &Layout, ci: usize) -> Duration {
        let started = Instant::now();
        let api = &self.members[ci];
        for doc in lay.member_objects(ci) {
            api.put_raw(doc.0)
                .unwrap_or_else(|e| panic!("preloading {}: {e:?}", Layout::cluster(ci)));
        }
        api.compact();
        started.elapsed()
    }

    /// Writes member `ci`'s kubeconfigs into `dir`.
    pub fn kubeconfigs(&self, ci: usize, dir: &Path) -> Kubeconfigs {
        let id = Layout::cluster(ci);
        let files = Kubeconfigs {
            member: dir.join(format!("{id}.kubeconfig")),
            broker: dir.join(format!("{id}-broker.kubeconfig")),
        };
        let write = |api: &FakeApiServer, path: &Path, name: &str| {
            api.write_kubeconfig_with_token(path, name, &id)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        };
        write(&self.members[ci], &files.member, &id);
        write(&self.broker, &files.broker, "broker");
        files
    }

    /// Member `ci`'s traffic so far.
    pub fn traffic(&self, ci: usize) -> MemberTraffic {
        let id = Layout::cluster(ci);
        let of = |api: &FakeApiServer| api.traffic().remove(&id).unwrap_or_default();
        MemberTraffic {
            own: of(&self.members[ci]),
            broker: of(&self.broker),
        }
    }

    /// Every member's traffic so far.
    pub fn all_traffic(&self) -> Vec<MemberTraffic> {
        (0..self.members.len()).map(|ci| self.traffic(ci)).collect()
    }
}
