//! The clusterset deployed as an operator would: three real control planes
//! (`east`, `west`, `north`), `config/kubernetes` applied with
//! `kubectl apply -k`, the broker's RBAC and the EndpointSlice admission
//! policy applied on their own, and each member's replicas running
//! `serve --source kubernetes` with tokens of their own ServiceAccounts.
//! The broker's RBAC and the member `west` are installed with the Helm chart
//! instead (`helm.rs`), when helm is built.
//!
//! The broker is `east`'s own API server, as Submariner deploys it: a fourth
//! control plane would cost another etcd, API server and controller manager
//! on a 2-core machine for no behaviour the tests could not see here (the
//! broker is reached with a separate kubeconfig and ServiceAccount either
//! way, so RBAC is as strict).
//!
//! `east` and `west` take the CRDs of `clusterset-dns crds`; `north` takes
//! those of the pinned upstream mcs-api release, so every scenario runs on
//! both CRD variants at once.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Result, bail, ensure};
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use kube::{Api, Client};
use tempfile::TempDir;
use test_support::{free_port, resolve};

use crate::control_plane::{
    ControlPlane, Process, bin_dir, client_from, log_tail, output, run, write_kubeconfig,
};
use crate::pods::PodNetwork;
use hickory_proto::rr::RecordType;

/// Namespace of the shared state on the broker (rbac-broker.yaml).
pub const BROKER_NAMESPACE: &str = "clusterset-broker";
/// Namespace of clusterset-dns in each member (config/kubernetes).
pub const DNS_NAMESPACE: &str = "clusterset-dns";
/// The members' lease duration: short, so a handover is quick to see.
pub const LEASE_SECONDS: u64 = 4;
/// A cluster whose heartbeat is this old is dead (kept above the lease).
pub const CLUSTER_TIMEOUT_SECONDS: u64 = 12;
/// How long a change may take to reach every member in these tests.
pub const CONVERGE: Duration = Duration::from_secs(60);
/// `--max-exports-per-cluster` of every replica of this release: low
/// enough for `broker_trust::flood` to pass it in seconds, far above what
/// any other scenario publishes (the previous release has no caps).
pub const EXPORT_CAP: usize = 150;
/// The binary of this release (the one under test).
const THIS_RELEASE: &str = env!("CARGO_BIN_EXE_clusterset-dns");

/// Which CRDs a member cluster has.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Crds {
    /// `clusterset-dns crds` (config/kubernetes/crds.yaml).
    Ours,
    /// The pinned sigs.k8s.io/mcs-api release's `config/crd`.
    Upstream,
}

/// One running replica of clusterset-dns.
pub struct Replica {
    /// Its Lease identity.
    pub identity: String,
    /// Where it answers DNS.
    pub dns: SocketAddr,
    /// Its log.
    pub log: PathBuf,
    process: Process,
}

impl Replica {
    /// Its process id.
    pub fn pid(&self) -> Option<u32> {
        self.process.pid()
    }

    /// Kills it at once, as a crash would.
    pub fn kill(mut self) {
        self.process.kill();
    }

    /// Stops it as Kubernetes stops a Pod (SIGTERM): it releases its Lease.
    pub fn stop(mut self) {
        tokio::task::block_in_place(|| self.process.stop());
    }
}

/// One member cluster: its control plane and its replicas.
pub struct Member {
    /// The cluster id.
    pub id: String,
    /// Its control plane.
    pub plane: ControlPlane,
    /// Its CRD variant.
    pub crds: Crds,
    /// Its cluster DNS server's address, its Pods' `nameserver` (see `pods.rs`).
    pub cluster_dns: Ipv4Addr,
    /// Running replicas.
    pub replicas: Vec<Replica>,
    /// `--derived-services` of the replicas started from now on (this
    /// release's): `clusterset` unless a scenario changes it.
    pub derived: &'static str,
    /// The admin client of its API server (the test's own actions).
    pub admin: Client,
    kubeconfig: PathBuf,
    broker_kubeconfig: PathBuf,
    started: usize,
}

impl Member {
    /// Where its first replica answers DNS.
    pub fn dns(&self) -> SocketAddr {
        self.replicas[0].dns
    }

    /// The kubeconfigs its replicas run with: its own cluster's and the
    /// broker's (ServiceAccount tokens, see `deploy_member`).
    pub fn kubeconfigs(&self) -> (&Path, &Path) {
        (&self.kubeconfig, &self.broker_kubeconfig)
    }
}

/// The flags every replica of member `id` runs with besides its
/// credentials, Lease identity and listeners ([`Clusterset::add_replica`],
/// and the replica run from the container image in `image.rs`).
pub fn replica_flags(id: &str) -> Vec<String> {
    [
        "--source",
        "kubernetes",
        "--cluster-id",
        id,
        "--broker-namespace",
        BROKER_NAMESPACE,
        "--lease-duration",
        &LEASE_SECONDS.to_string(),
        "--cluster-timeout",
        &CLUSTER_TIMEOUT_SECONDS.to_string(),
        "--log-format",
        "text",
    ]
    .map(str::to_owned)
    .into()
}

/// The flags of this release's replicas of `member` that the previous
/// release does not have (`upgrade.rs` runs it with [`replica_flags`] only).
pub fn release_flags(member: &Member) -> Vec<String> {
    [
        "--max-exports-per-cluster",
        &EXPORT_CAP.to_string(),
        "--derived-services",
        member.derived,
        // Inside servicecidr.yaml's IPv6 prefix (the API server allocates
        // from no shorter one), as its header says to run.
        "--vip-pool-v6",
        "fd00:c5e7::/64",
    ]
    .map(str::to_owned)
    .into()
}

/// Three members, the first also the broker.
pub struct Clusterset {
    /// east (the broker too), west, north.
    pub members: Vec<Member>,
    /// The broker's admin client (east's API server).
    pub broker: Client,
    /// Every file of the run: data, certificates, kubeconfigs, logs.
    pub dir: TempDir,
    /// How much of each replica log [`Self::refusals`] has been told to accept.
    forgiven: std::collections::HashMap<PathBuf, usize>,
}

/// Each member: its id, Service CIDRs, Pod network and CRD variant.
const MEMBERS: [(&str, &str, PodNetwork, Crds); 3] = [
    (
        "east",
        "10.96.0.0/16,fd00:10:96::/112",
        PodNetwork {
            cidrs: ["10.244.4.0/22", "fd00:10:244:1::/118"],
            dns: Ipv4Addr::new(127, 10, 0, 1),
        },
        Crds::Ours,
    ),
    (
        "west",
        "10.97.0.0/16,fd00:10:97::/112",
        PodNetwork {
            cidrs: ["10.244.8.0/22", "fd00:10:244:2::/118"],
            dns: Ipv4Addr::new(127, 10, 0, 2),
        },
        Crds::Ours,
    ),
    (
        "north",
        "10.98.0.0/16,fd00:10:98::/112",
        PodNetwork {
            cidrs: ["10.244.12.0/22", "fd00:10:244:3::/118"],
            dns: Ipv4Addr::new(127, 10, 0, 3),
        },
        Crds::Upstream,
    ),
];

/// A file of the repository.
pub fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// `kubectl --kubeconfig <admin of plane> args...` (the pinned kubectl).
pub fn kubectl(plane: &ControlPlane, args: &[&str]) -> Result<String> {
    let kubeconfig = plane.admin_kubeconfig().display().to_string();
    let mut all = vec!["--kubeconfig", kubeconfig.as_str()];
    all.extend_from_slice(args);
    run(&bin_dir().join("kubectl"), &all)
}

/// `kubectl` with a member's own credentials: its cluster's kubeconfig,
/// or with `broker` the broker's.
/// Returns its output whether it succeeded or not (`auth can-i` says "no"
/// with exit status 1).
pub fn kubectl_as(member: &Member, broker: bool, args: &[&str]) -> Result<String> {
    let kubeconfig = if broker {
        &member.broker_kubeconfig
    } else {
        &member.kubeconfig
    };
    let kubeconfig = kubeconfig.display().to_string();
    let mut all = vec!["--kubeconfig", kubeconfig.as_str()];
    all.extend_from_slice(args);
    Ok(output(&bin_dir().join("kubectl"), &all)?.1)
}

/// `kubectl apply -f <file>` of a YAML text.
fn apply_text(plane: &ControlPlane, name: &str, yaml: &str) -> Result<()> {
    let file = plane.dir.join(name);
    std::fs::write(&file, yaml)?;
    kubectl(
        plane,
        &["apply", "--server-side", "-f", &file.display().to_string()],
    )?;
    Ok(())
}

impl Clusterset {
    /// Starts the three control planes, deploys clusterset-dns in each
    /// and waits until one replica per member has synced.
    pub async fn start() -> Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("clusterset-dns-real-")
            .tempdir()?;
        // The control planes start one after another: three API servers
        // starting at once on 2 cores take longer than in turn.
        let mut planes = Vec::new();
        for (name, cidrs, network, _) in &MEMBERS {
            eprintln!("starting control plane {name}");
            planes.push(ControlPlane::start(name, dir.path(), cidrs, network).await?);
        }
        let broker = planes[0].admin().await?;
        let mut members = Vec::new();
        for (plane, (id, _, network, crds)) in planes.into_iter().zip(MEMBERS) {
            let admin = plane.admin().await?;
            members.push(Member {
                id: id.to_owned(),
                kubeconfig: plane.dir.join("member.kubeconfig"),
                broker_kubeconfig: plane.dir.join("broker-member.kubeconfig"),
                plane,
                crds,
                cluster_dns: network.dns,
                replicas: Vec::new(),
                derived: "clusterset",
                admin,
                started: 0,
            });
        }
        let mut set = Self {
            members,
            broker,
            dir,
            forgiven: Default::default(),
        };
        set.deploy_broker()?;
        for i in 0..set.members.len() {
            set.deploy_member(i).await?;
        }
        for i in 0..set.members.len() {
            set.add_replica(i).await?;
        }
        Ok(set)
    }

    /// rbac-broker.yaml, broker-ownership-policy.yaml and broker-quota.yaml on the broker (or
    /// the chart's broker release, the same objects), plus the third member's
    /// ServiceAccount, token Secret and RoleBinding subject, as its header
    /// says to add them.
    fn deploy_broker(&self) -> Result<()> {
        let broker = &self.members[0].plane;
        if crate::helm::available()? {
            let ids: Vec<&str> = self.members.iter().map(|m| m.id.as_str()).collect();
            return crate::helm::install_broker(broker, &ids);
        }
        for file in [
            "rbac-broker.yaml",
            "broker-ownership-policy.yaml",
            "broker-quota.yaml",
        ] {
            let path = repo(&format!("config/kubernetes/{file}"));
            kubectl(broker, &["apply", "-f", &path.display().to_string()])?;
        }
        let yaml = std::fs::read_to_string(repo("config/kubernetes/rbac-broker.yaml"))?;
        for member in &self.members {
            if yaml.contains(&format!("clusterset-member-{}-token", member.id)) {
                continue;
            }
            let id = &member.id;
            apply_text(
                broker,
                &format!("broker-{id}.yaml"),
                &format!(
                    "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: clusterset-member-{id}\n  namespace: {BROKER_NAMESPACE}\n---\napiVersion: v1\nkind: Secret\ntype: kubernetes.io/service-account-token\nmetadata:\n  name: clusterset-member-{id}-token\n  namespace: {BROKER_NAMESPACE}\n  annotations:\n    kubernetes.io/service-account.name: clusterset-member-{id}\n"
                ),
            )?;
            kubectl(
                broker,
                &[
                    "-n",
                    BROKER_NAMESPACE,
                    "patch",
                    "rolebinding",
                    "clusterset-member",
                    "--type=json",
                    &format!(
                        r#"-p=[{{"op":"add","path":"/subjects/-","value":{{"kind":"ServiceAccount","name":"clusterset-member-{id}","namespace":"{BROKER_NAMESPACE}"}}}}]"#
                    ),
                ],
            )?;
        }
        Ok(())
    }

    /// config/kubernetes (`kubectl apply -k`), the admission policies, the
    /// member's CRD variant, and its two kubeconfigs made of ServiceAccount
    /// tokens: its own (TokenRequest, as a Pod gets it) and the broker's
    /// (the token Secret the broker's token controller fills).
    async fn deploy_member(&mut self, i: usize) -> Result<()> {
        let member = &self.members[i];
        let plane = &member.plane;
        if member.id == crate::helm::MEMBER && crate::helm::available()? {
            crate::helm::install_member(plane)?;
        } else {
            kubectl(
                plane,
                &[
                    "apply",
                    "-k",
                    &repo("config/kubernetes").display().to_string(),
                ],
            )?;
            for policy in ["endpointslice-policy.yaml", "derived-service-policy.yaml"] {
                let path = repo(&format!("config/kubernetes/{policy}"));
                kubectl(plane, &["apply", "-f", &path.display().to_string()])?;
            }
        }
        // What a cluster admin applies for --derived-services clusterset.
        let service_cidr = repo("config/kubernetes/servicecidr.yaml");
        kubectl(plane, &["apply", "-f", &service_cidr.display().to_string()])?;
        if member.crds == Crds::Upstream {
            let upstream = run(&bin_dir().join("mcs-api-crds"), &[])?;
            apply_text(plane, "upstream-crds.yaml", &upstream)?;
            kubectl(
                plane,
                &[
                    "wait",
                    "--for=condition=Established",
                    "crd/serviceimports.multicluster.x-k8s.io",
                    "crd/serviceexports.multicluster.x-k8s.io",
                    "--timeout=60s",
                ],
            )?;
        }
        crate::workloads::node(&member.admin, &member.id).await?;
        wait_for_service_account(&member.admin, DNS_NAMESPACE, "clusterset-dns").await?;
        let token = kubectl(
            plane,
            &[
                "-n",
                DNS_NAMESPACE,
                "create",
                "token",
                "clusterset-dns",
                "--duration=48h",
            ],
        )?;
        write_kubeconfig(
            &member.kubeconfig,
            plane.api,
            &plane.ca,
            "clusterset-dns",
            token.trim(),
        )?;
        let broker_plane = &self.members[0].plane;
        let broker_token = service_account_token(
            &self.broker,
            BROKER_NAMESPACE,
            &format!("clusterset-member-{}-token", member.id),
        )
        .await?;
        write_kubeconfig(
            &member.broker_kubeconfig,
            broker_plane.api,
            &broker_plane.ca,
            &format!("clusterset-member-{}", member.id),
            &broker_token,
        )?;
        Ok(())
    }

    /// Starts one more replica of member `i` and waits until it answers.
    pub async fn add_replica(&mut self, i: usize) -> Result<()> {
        self.add_replica_of(i, Path::new(THIS_RELEASE)).await
    }

    /// [`Self::add_replica`] running `binary` (another release: `upgrade.rs`).
    pub async fn add_replica_of(&mut self, i: usize, binary: &Path) -> Result<()> {
        let member = &mut self.members[i];
        let identity = format!("{}-{}", member.id, member.started);
        member.started += 1;
        let dns = free_port();
        let metrics = free_port();
        let log = member.plane.dir.join(format!("{identity}.log"));
        let mut args: Vec<String> = [
            "serve",
            "--kubeconfig",
            &member.kubeconfig.display().to_string(),
            "--broker-kubeconfig",
            &member.broker_kubeconfig.display().to_string(),
            "--lease-namespace",
            DNS_NAMESPACE,
            "--identity",
            &identity,
            "--listen",
            &dns.to_string(),
            "--metrics-listen",
            &metrics.to_string(),
        ]
        .map(str::to_owned)
        .into();
        args.extend(replica_flags(&member.id));
        if binary == Path::new(THIS_RELEASE) {
            args.extend(release_flags(member));
        }
        let process = spawn_member(&identity, binary, &args, &log)?;
        let mut replica = Replica {
            identity,
            dns,
            log,
            process,
        };
        wait_answering(&mut replica).await?;
        member.replicas.push(replica);
        Ok(())
    }

    /// The member with this id.
    pub fn member(&self, id: &str) -> &Member {
        self.members
            .iter()
            .find(|m| m.id == id)
            .unwrap_or_else(|| panic!("no member {id}"))
    }

    /// The member with this id, mutably.
    pub fn member_mut(&mut self, id: &str) -> &mut Member {
        self.members
            .iter_mut()
            .find(|m| m.id == id)
            .unwrap_or_else(|| panic!("no member {id}"))
    }

    /// Lines of every replica's log that show the API servers refusing
    /// something: RBAC (403), admission (denied), schema validation (422).
    pub fn refusals(&self) -> Vec<String> {
        let mut found = Vec::new();
        for member in &self.members {
            let logs = std::fs::read_dir(&member.plane.dir)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                        n.starts_with(&format!("{}-", member.id)) && n.ends_with(".log")
                    })
                });
            for log in logs {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                let from = self.forgiven.get(&log).copied().unwrap_or(0);
                for line in text.get(from..).unwrap_or_default().lines() {
                    let lower = line.to_ascii_lowercase();
                    if [
                        "forbidden",
                        "code: 403",
                        "denied",
                        "code: 422",
                        "is invalid",
                        "unknown field",
                    ]
                    .iter()
                    .any(|w| lower.contains(w))
                    {
                        found.push(format!("{}: {line}", log.display()));
                    }
                }
            }
        }
        found
    }

    /// Accepts every refusal logged so far (one a scenario shows is expected).
    pub fn forgive_refusals(&mut self) {
        for member in &self.members {
            for replica in &member.replicas {
                let len = std::fs::metadata(&replica.log)
                    .map(|m| m.len())
                    .unwrap_or(0);
                self.forgiven.insert(replica.log.clone(), len as usize);
            }
        }
    }

    /// Fails when a control plane process or a replica has exited.
    pub fn check_alive(&mut self) -> Result<()> {
        for member in &mut self.members {
            member.plane.check_alive()?;
            for replica in &mut member.replicas {
                replica.process.check_alive()?;
            }
        }
        Ok(())
    }
}

fn spawn_member(identity: &str, binary: &Path, args: &[String], log: &Path) -> Result<Process> {
    // RUST_LOG reaches the binary through the environment Process keeps.
    // SAFETY: set before the runtime's threads read the environment here
    // (only this harness's own thread spawns processes).
    if std::env::var_os("RUST_LOG").is_none() {
        unsafe { std::env::set_var("RUST_LOG", "clusterset_dns=info,kube=warn") };
    }
    Process::spawn(identity, binary, args, log)
}

/// Waits until a replica answers the zone's SOA (its first sync is done).
async fn wait_answering(replica: &mut Replica) -> Result<()> {
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        replica.process.check_alive()?;
        if let test_support::Outcome::Ips(_) =
            resolve(replica.dns, "clusterset.local.", RecordType::SOA).await
        {
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            bail!(
                "{} did not answer within 90 s; its log ends:\n{}",
                replica.identity,
                log_tail(&replica.log, 30)
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn wait_for_service_account(client: &Client, ns: &str, name: &str) -> Result<()> {
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    for _ in 0..300 {
        if api.get_opt(name).await?.is_some() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("ServiceAccount {ns}/{name} was not created")
}

/// The token the token controller put into a ServiceAccount token Secret.
async fn service_account_token(client: &Client, ns: &str, secret: &str) -> Result<String> {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    for _ in 0..600 {
        if let Some(token) = api
            .get_opt(secret)
            .await?
            .and_then(|s| s.data)
            .and_then(|d| d.get("token").cloned())
        {
            return Ok(String::from_utf8(token.0)?);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("the token controller did not fill Secret {ns}/{secret}")
}

/// Reads a member kubeconfig's client (a member's own credentials).
pub async fn member_client(member: &Member) -> Result<Client> {
    client_from(&member.kubeconfig).await
}

/// A client of the broker with member `member`'s broker credentials.
pub async fn member_broker_client(member: &Member) -> Result<Client> {
    client_from(&member.broker_kubeconfig).await
}

/// Waits up to `limit` for an async condition, with what it last saw on failure.
pub async fn eventually<T, F>(limit: Duration, what: &str, mut probe: F) -> Result<T>
where
    F: AsyncFnMut() -> Result<Option<T>, String>,
{
    let deadline = std::time::Instant::now() + limit;
    let mut last = String::new();
    loop {
        match probe().await {
            Ok(Some(value)) => return Ok(value),
            Ok(None) => {}
            Err(seen) => last = seen,
        }
        ensure!(
            std::time::Instant::now() < deadline,
            "{what}: not within {limit:?}; last seen: {last}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
