//! A clusterset in Kubernetes mode for tests: a fake API server per member
//! cluster and one for the broker, and a clusterset-dns instance per member
//! (in this process, `serve --source kubernetes`, talking HTTP to the fakes
//! with the real kube client).

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clusterset_dns::k8s::crd::{ServiceExport, ServiceImport};
use fake_apiserver::FakeApiServer;
use hickory_proto::rr::RecordType;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::Value;
use tempfile::TempDir;

use crate::{
    Doc, Outcome, Server, addresses, eventually_within, is_vip, resolve, scrape, start,
    start_loading,
};

/// Namespace of the shared state on the broker.
pub const BROKER_NAMESPACE: &str = "clusterset-broker";
/// Namespace of the leader Lease in each member.
pub const LEASE_NAMESPACE: &str = "clusterset-dns";
/// How long cross-cluster convergence may take in tests (generous: the
/// machines are shared, and the whole suite runs three instances per test).
pub const CONVERGE: Duration = Duration::from_secs(30);
/// The members of [`KubeClusterset::three`].
pub const ALL: [&str; 3] = ["east", "north", "west"];

/// One member cluster: its API server and its clusterset-dns replicas.
pub struct Member {
    /// The cluster id.
    pub id: String,
    /// Its running replicas (usually one); dropped before the API server.
    pub servers: Vec<Server>,
    /// Its API server.
    pub api: FakeApiServer,
    families: String,
    kubeconfig: PathBuf,
}

impl Member {
    /// Where the first replica answers DNS.
    pub fn dns(&self) -> std::net::SocketAddr {
        self.servers[0].addr
    }
}

/// Members plus a broker.
pub struct KubeClusterset {
    /// The members, in the order given (dropped before the broker).
    pub members: Vec<Member>,
    /// The broker API server.
    pub broker: FakeApiServer,
    broker_kubeconfig: PathBuf,
    extra: Vec<String>,
    dir: TempDir,
}

impl KubeClusterset {
    /// Starts a broker and one member per `(id, ip families)`, each with a
    /// running replica, and waits until every replica has synced.
    pub async fn start(members: &[(&str, &str)]) -> Self {
        Self::start_with(members, &[]).await
    }

    /// Three IPv4 members ([`ALL`]), each with the namespace `shop`; `extra`
    /// are more `serve` flags for every replica.
    pub async fn three(extra: &[&str]) -> Self {
        let members = [("east", "IPv4"), ("north", "IPv4"), ("west", "IPv4")];
        let set = Self::start_with(&members, extra).await;
        for member in &set.members {
            member.api.create_namespace("shop");
        }
        set
    }

    /// [`Self::start`] with more `serve` flags for every replica.
    pub async fn start_with(members: &[(&str, &str)], extra: &[&str]) -> Self {
        Self::start_prepared(members, extra, |_, _| {}).await
    }

    /// [`Self::start_with`], calling `prepare` with each API server before
    /// any replica starts (`None`: the broker; `Some(id)`: a member), to
    /// change what it serves.
    pub async fn start_prepared(
        members: &[(&str, &str)],
        extra: &[&str],
        prepare: impl Fn(Option<&str>, &FakeApiServer),
    ) -> Self {
        // `RUST_LOG=clusterset_dns=debug cargo test ...` shows what the instances do.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        let dir = tempfile::tempdir().unwrap();
        let broker = FakeApiServer::start().await;
        broker.create_namespace(BROKER_NAMESPACE);
        prepare(None, &broker);
        let broker_kubeconfig = dir.path().join("broker.kubeconfig");
        broker
            .write_kubeconfig(&broker_kubeconfig, "broker")
            .unwrap();
        let mut set = Self {
            broker,
            members: Vec::new(),
            broker_kubeconfig,
            extra: extra.iter().map(|s| (*s).to_owned()).collect(),
            dir,
        };
        for (id, families) in members {
            let api = FakeApiServer::start().await;
            api.create_namespace(LEASE_NAMESPACE);
            prepare(Some(id), &api);
            let kubeconfig = set.dir.path().join(format!("{id}.kubeconfig"));
            api.write_kubeconfig(&kubeconfig, id).unwrap();
            set.members.push(Member {
                id: (*id).to_owned(),
                api,
                servers: Vec::new(),
                families: (*families).to_owned(),
                kubeconfig,
            });
        }
        for i in 0..set.members.len() {
            set.add_replica(i).await;
        }
        set
    }

    /// Starts one more replica in member `i` (Lease identity `<id>-<n>`, n
    /// counting from 0) and waits for its first sync.
    pub async fn add_replica(&mut self, i: usize) {
        self.start_replica(i, true).await;
    }

    /// [`Self::add_replica`] without waiting for its first sync.
    pub async fn add_replica_unsynced(&mut self, i: usize) {
        self.start_replica(i, false).await;
    }

    async fn start_replica(&mut self, i: usize, synced: bool) {
        let member = &self.members[i];
        let kubeconfig = member.kubeconfig.display().to_string();
        let broker = self.broker_kubeconfig.display().to_string();
        let identity = format!("{}-{}", member.id, member.servers.len());
        let mut args = vec![
            "--identity",
            &identity,
            "--source",
            "kubernetes",
            "--cluster-id",
            &member.id,
            "--kubeconfig",
            &kubeconfig,
            "--broker-kubeconfig",
            &broker,
            "--broker-namespace",
            BROKER_NAMESPACE,
            "--lease-namespace",
            LEASE_NAMESPACE,
            "--lease-duration",
            "3",
            "--ip-families",
            &member.families,
        ];
        args.extend(self.extra.iter().map(String::as_str));
        let server = if synced {
            start(self.dir.path(), &args).await
        } else {
            start_loading(self.dir.path(), &args).await
        };
        self.members[i].servers.push(server);
    }

    /// Stops replica `r` of member `i` gracefully (its Lease is released).
    pub async fn stop_replica(&mut self, i: usize, r: usize) {
        let server = self.members[i].servers.remove(r);
        server.shutdown().await;
    }

    /// Stops replica `r` of member `i` at once, as a crash would: nothing
    /// is released, its heartbeat and Lease just stop being renewed.
    pub fn kill_replica(&mut self, i: usize, r: usize) {
        drop(self.members[i].servers.remove(r));
    }

    /// Deletes every object in the broker namespace, as a lost broker would.
    pub fn wipe_broker(&self) {
        let kinds = [
            ("multicluster.x-k8s.io", "serviceimports"),
            ("discovery.k8s.io", "endpointslices"),
            ("", "configmaps"),
            ("coordination.k8s.io", "leases"),
        ];
        for (group, plural) in kinds {
            for object in self.broker_objects(group, plural) {
                let name = object["metadata"]["name"].as_str().unwrap();
                self.broker
                    .remove_raw(group, plural, Some(BROKER_NAMESPACE), name);
            }
            assert!(self.broker_objects(group, plural).is_empty());
        }
    }

    /// The flags that point a command (`status`, `explain`) at member `id`
    /// and the broker, as its replicas are pointed.
    pub fn flags(&self, id: &str) -> Vec<String> {
        let member = self.member(id);
        [
            "--source",
            "kubernetes",
            "--cluster-id",
            &member.id,
            "--kubeconfig",
            &member.kubeconfig.display().to_string(),
            "--broker-kubeconfig",
            &self.broker_kubeconfig.display().to_string(),
            "--broker-namespace",
            BROKER_NAMESPACE,
            "--ip-families",
            &member.families,
        ]
        .map(str::to_owned)
        .into()
    }

    /// The member with this id.
    pub fn member(&self, id: &str) -> &Member {
        self.members
            .iter()
            .find(|m| m.id == id)
            .unwrap_or_else(|| panic!("no member {id}"))
    }

    /// Writes objects into a member's API server (creating their namespaces).
    pub fn apply(&self, id: &str, docs: impl IntoIterator<Item = Doc>) {
        let api = &self.member(id).api;
        for Doc(doc) in docs {
            if let Some(ns) = doc["metadata"]["namespace"].as_str() {
                api.create_namespace(ns);
            }
            api.put_raw(doc)
                .expect("the fake API server takes the object");
        }
    }

    /// Deletes a member's ServiceExport.
    pub fn unexport(&self, id: &str, ns: &str, name: &str) {
        let removed = self.member(id).api.remove_raw(
            "multicluster.x-k8s.io",
            "serviceexports",
            Some(ns),
            name,
        );
        assert!(removed, "{id} exports {ns}/{name}");
    }

    /// One query from one member's DNS.
    pub async fn resolve(&self, id: &str, name: &str, rtype: RecordType) -> Outcome {
        resolve(self.member(id).dns(), name, rtype).await
    }

    /// The ServiceImport in a member.
    pub fn import(&self, id: &str, ns: &str, name: &str) -> Option<ServiceImport> {
        self.member(id).api.get::<ServiceImport>(Some(ns), name)
    }

    /// `(type, status, reason)` of a member's ServiceExport conditions.
    pub fn export_conditions(
        &self,
        id: &str,
        ns: &str,
        name: &str,
    ) -> Vec<(String, String, String)> {
        let export = self.member(id).api.get::<ServiceExport>(Some(ns), name);
        export
            .and_then(|e| e.status)
            .map(|s| {
                s.conditions
                    .into_iter()
                    .map(|c| (c.type_, c.status, c.reason))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The message of one condition of a member's ServiceExport.
    pub fn export_message(&self, id: &str, ns: &str, name: &str, type_: &str) -> String {
        let export = self.member(id).api.get::<ServiceExport>(Some(ns), name);
        export
            .and_then(|e| e.status)
            .and_then(|s| s.conditions.into_iter().find(|c| c.type_ == type_))
            .map(|c| c.message)
            .unwrap_or_default()
    }

    /// The MCS EndpointSlices of a service in a member (those with its
    /// `multicluster.kubernetes.io/service-name` label).
    pub fn mcs_slice_objects(&self, id: &str, ns: &str, service: &str) -> Vec<EndpointSlice> {
        self.member(id)
            .api
            .list::<EndpointSlice>(Some(ns))
            .into_iter()
            .filter(|s| {
                let labels = s.metadata.labels.as_ref();
                labels.and_then(|l| l.get("multicluster.kubernetes.io/service-name"))
                    == Some(&service.to_owned())
            })
            .collect()
    }

    /// The MCS EndpointSlices of a service in a member: `(source cluster, addresses)`.
    pub fn mcs_slices(&self, id: &str, ns: &str, service: &str) -> BTreeSet<(String, Vec<String>)> {
        self.mcs_slice_objects(id, ns, service)
            .into_iter()
            .filter_map(|s| {
                let labels = s.metadata.labels.clone().unwrap_or_default();
                assert_eq!(
                    labels
                        .get("endpointslice.kubernetes.io/managed-by")
                        .map(String::as_str),
                    Some("clusterset-dns.io"),
                    "MCS slices are labelled as ours"
                );
                // A Service's own label only for a derived Service (issue 47).
                let service = labels.get("kubernetes.io/service-name");
                assert!(
                    service.is_none_or(|s| s.starts_with("derived-")),
                    "{service:?}"
                );
                let source = labels
                    .get("multicluster.kubernetes.io/source-cluster")?
                    .clone();
                let mut addresses: Vec<String> = s
                    .endpoints
                    .iter()
                    .flatten()
                    .flat_map(|e| e.addresses.clone())
                    .collect();
                addresses.sort();
                Some((source, addresses))
            })
            .collect()
    }

    /// Objects of a resource in the broker namespace.
    pub fn broker_objects(&self, group: &str, plural: &str) -> Vec<Value> {
        self.broker.list_raw(group, plural, Some(BROKER_NAMESPACE))
    }

    /// The VIP claims on the broker: `(address, service)`.
    pub fn claims(&self) -> BTreeSet<(String, String)> {
        self.broker_objects("", "configmaps")
            .into_iter()
            .map(|c| {
                (
                    c["data"]["address"].as_str().unwrap_or_default().to_owned(),
                    c["data"]["service"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    }
}

/// `spec.ips` of an import, parsed.
pub fn import_ips(import: &ServiceImport) -> Vec<IpAddr> {
    import
        .spec
        .ips
        .iter()
        .map(|ip| ip.parse().unwrap())
        .collect()
}

/// `status.clusters` of an import, sorted.
pub fn status_clusters(import: &ServiceImport) -> Vec<String> {
    let mut clusters: Vec<String> = import
        .status
        .iter()
        .flat_map(|s| &s.clusters)
        .map(|c| c.cluster.clone())
        .collect();
    clusters.sort();
    clusters
}

/// Waits until every member of [`ALL`] answers `name` `rtype` with `expected`.
pub async fn everywhere(set: &KubeClusterset, name: &str, rtype: RecordType, expected: Outcome) {
    for id in ALL {
        eventually_within(
            CONVERGE,
            &format!("{rtype} {name} from {id}"),
            expected.clone(),
            || set.resolve(id, name, rtype),
        )
        .await;
    }
}

/// The one VIP every member's ([`ALL`]) ServiceImport agrees on.
pub async fn agreed_vip(set: &KubeClusterset, ns: &str, name: &str) -> IpAddr {
    let mut seen = BTreeSet::new();
    for id in ALL {
        eventually_within(
            CONVERGE,
            &format!("ServiceImport {ns}/{name} in {id}"),
            1,
            || async { set.import(id, ns, name).map_or(0, |i| i.spec.ips.len()) },
        )
        .await;
        seen.extend(import_ips(&set.import(id, ns, name).unwrap()));
    }
    assert_eq!(seen.len(), 1, "one VIP for the clusterset: {seen:?}");
    seen.into_iter().next().unwrap()
}

/// Waits until every member's ([`ALL`]) ServiceImport lists these clusters.
pub async fn import_clusters_become(
    set: &KubeClusterset,
    ns: &str,
    name: &str,
    what: &str,
    expected: &[&str],
) {
    let expected: Vec<String> = expected.iter().map(|c| (*c).to_owned()).collect();
    for id in ALL {
        eventually_within(
            CONVERGE,
            &format!("{what} in {id}"),
            expected.clone(),
            || async {
                set.import(id, ns, name)
                    .map(|i| status_clusters(&i))
                    .unwrap_or_default()
            },
        )
        .await;
    }
}

/// Whether every member ([`ALL`]) answers `name` A with one VIP (the same one).
pub async fn served_everywhere(set: &KubeClusterset, name: &str) {
    let mut seen = BTreeSet::new();
    for id in ALL {
        eventually_within(CONVERGE, &format!("{name} from {id}"), true, || async {
            is_vip(&set.resolve(id, name, RecordType::A).await)
        })
        .await;
        seen.extend(addresses(set.resolve(id, name, RecordType::A).await));
    }
    assert_eq!(seen.len(), 1, "{name}: one VIP everywhere: {seen:?}");
}

/// `clusterset_dns_leader` of each replica of east.
pub async fn east_leading(set: &KubeClusterset) -> Vec<u8> {
    let mut leading = Vec::new();
    for server in &set.member("east").servers {
        let addr = server.running().metrics_addr;
        leading.push(scrape(addr, "clusterset_dns_leader").await as u8);
    }
    leading
}

/// The replica of east that leads, once exactly one does.
pub async fn east_leader(set: &KubeClusterset) -> usize {
    for _ in 0..250 {
        let now = east_leading(set).await;
        if now.iter().sum::<u8>() == 1 {
            return now.iter().position(|l| *l == 1).unwrap();
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("not exactly one leader in east")
}
