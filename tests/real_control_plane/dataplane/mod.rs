//! A real data plane for the clusterset (issue 47): stock kube-proxy
//! (nftables mode, built from the pinned `k8s.io/kubernetes` by
//! `tests/control-plane/build.sh`) on one "node" per member, so a VIP that
//! clusterset-dns answers can be dialled and must reach a listener.
//!
//! A scenario gets one with [`DataPlane::start`]`(&set)` after the
//! clusterset is up, and drops it when done (everything it made goes:
//! processes are killed, namespaces deleted). The topology, in network
//! namespaces (`netns.rs`), as a flat network between clusters routes pod
//! IPs:
//!
//! ```text
//! root namespace: API servers and DNS on 127.0.0.1; per member i a veth end
//!   10.200.i.1 / fd00:200:0:i::1 (`host_addresses(i)`), where a relay
//!   passes the member's API server port to its loopback. Forwards nothing.
//! node i (`node_netns(i)`): eth0 10.200.i.2, default route to the root;
//!   eth1 10.201.i.2 to the fabric, the other members' pod CIDRs and the
//!   fabric's addresses via it; kube-proxy; one veth per Pod.
//! fabric: a router, each member's pod CIDRs via that member's node.
//! pod (`attach_pod`): its IPs on eth0, default routes via its node
//!   (169.254.1.1 / fe80::1 on the node's end).
//! ```
//!
//! kube-proxy runs as kwok's Node (`pods.rs`), whose Pods' EndpointSlice
//! endpoints carry that `nodeName`; it starts after the ServiceCIDR of the
//! VIP pools (`config/kubernetes/servicecidr.yaml`, applied with the
//! clusterset) exists in its member, so the pools are in its "drop traffic to
//! unallocated ClusterIPs" rule (written only on a full sync) and a VIP no
//! Service holds gets no connection. Its kubeconfig names the API server
//! `localhost` (`tls-server-name`) while dialling the relay, so TLS stays
//! end to end with the harness's certificates.

pub mod dial;
pub mod netns;
pub mod routes;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use ipnet::IpNet;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::networking::v1::ServiceCIDR;
use kube::Api;
use tokio::task::{JoinHandle, JoinSet};

use crate::Skipped;
use crate::clusterset::Clusterset;
use crate::control_plane::{Process, bin_dir, log_tail};
use crate::pods::KWOK_NODE;
use dial::{Proto, dial};
use netns::{Netns, root_address, unique, veth};

/// The ServiceCIDR of the VIP pools, `config/kubernetes/servicecidr.yaml`,
/// which the harness applies to every member.
const VIP_SERVICE_CIDR: &str = "clusterset-dns-vips";
/// The address a node's end of every Pod veth has, each Pod's gateway.
const POD_GATEWAY_V4: Ipv4Addr = Ipv4Addr::new(169, 254, 1, 1);
/// The same for IPv6: a link-local address, as a CNI plugin gives it.
const POD_GATEWAY_V6: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1);
/// How long kube-proxy may take to write its first rules.
const KUBE_PROXY_START: Duration = Duration::from_secs(60);

/// One member's node.
struct NodeNs {
    netns: Netns,
    host: (Ipv4Addr, Ipv6Addr),
    cidrs: Vec<IpNet>,
}

/// Every member's node, the fabric between them and each node's
/// kube-proxy; dropped, all of it goes.
pub struct DataPlane {
    kube_proxies: Vec<Process>,
    relays: Vec<JoinHandle<()>>,
    nodes: Vec<NodeNs>,
    /// Kept for its Drop: the router between the nodes.
    _fabric: Netns,
    pods: AtomicUsize,
    dir: PathBuf,
}

impl DataPlane {
    /// Builds the data plane of `set`'s members (in `set.members` order):
    /// the namespaces and routes, the VIP pools' ServiceCIDR in each member,
    /// and one kube-proxy per member; returns once every kube-proxy has
    /// written its tables. A [`Skipped`] error when kube-proxy, `nft` or
    /// `socat` is missing here (an error under CI).
    pub async fn start(set: &Clusterset) -> Result<Self> {
        check_tools()?;
        let dir = set.dir.path().join("dataplane");
        std::fs::create_dir_all(&dir)?;
        let fabric = Netns::create(unique("-fabric"))?;
        fabric.forward()?;
        let mut nodes = Vec::new();
        let mut cidrs = Vec::new();
        for (i, member) in set.members.iter().enumerate() {
            let index = u8::try_from(i)?;
            cidrs.push(pod_cidrs(&member.admin).await?);
            let netns = Netns::create(unique(&format!("-node{i}")))?;
            netns.forward()?;
            let host_if = unique(&format!("h{i}"));
            veth(None, &host_if, &netns, "eth0")?;
            let (host, node) = pair(HOST_LINKS, index);
            root_address(&host_if, host.0.into(), 24)?;
            root_address(&host_if, host.1.into(), 64)?;
            netns.address("eth0", node.0.into(), 24)?;
            netns.address("eth0", node.1.into(), 64)?;
            netns.route("default", Some(host.0.into()), None)?;
            netns.route("default", Some(host.1.into()), None)?;
            let fabric_if = format!("n{i}");
            veth(Some(&fabric), &fabric_if, &netns, "eth1")?;
            let (router, node_side) = pair(FABRIC_LINKS, index);
            fabric.address(&fabric_if, router.0.into(), 24)?;
            fabric.address(&fabric_if, router.1.into(), 64)?;
            netns.address("eth1", node_side.0.into(), 24)?;
            netns.address("eth1", node_side.1.into(), 64)?;
            // Replies to a node's masqueraded address on the fabric.
            netns.route("10.201.0.0/16", Some(router.0.into()), None)?;
            netns.route("fd00:201::/48", Some(router.1.into()), None)?;
            for cidr in &cidrs[i] {
                let via: IpAddr = match cidr {
                    IpNet::V4(_) => node_side.0.into(),
                    IpNet::V6(_) => node_side.1.into(),
                };
                fabric.route(&cidr.to_string(), Some(via), None)?;
            }
            nodes.push(NodeNs {
                netns,
                host,
                cidrs: cidrs[i].clone(),
            });
        }
        // Each node reaches the other members' Pods through the fabric.
        for (i, node) in nodes.iter().enumerate() {
            let router = pair(FABRIC_LINKS, u8::try_from(i)?).0;
            for (j, others) in cidrs.iter().enumerate() {
                if i == j {
                    continue;
                }
                for cidr in others {
                    let via: IpAddr = match cidr {
                        IpNet::V4(_) => router.0.into(),
                        IpNet::V6(_) => router.1.into(),
                    };
                    node.netns.route(&cidr.to_string(), Some(via), None)?;
                }
            }
        }
        let mut plane = Self {
            kube_proxies: Vec::new(),
            relays: Vec::new(),
            nodes,
            _fabric: fabric,
            pods: AtomicUsize::new(0),
            dir,
        };
        for (i, member) in set.members.iter().enumerate() {
            vip_service_cidr(&member.admin).await?;
            let host = plane.nodes[i].host.0;
            plane.relays.push(relay(host, member.plane.api).await?);
            let kubeconfig = plane
                .dir
                .join(format!("kube-proxy-{}.kubeconfig", member.id));
            let admin = std::fs::read_to_string(member.plane.admin_kubeconfig())?;
            let server = format!("server: https://{}", member.plane.api);
            ensure!(
                admin.contains(&server),
                "no `{server}` in the admin kubeconfig"
            );
            std::fs::write(
                &kubeconfig,
                admin.replace(
                    &server,
                    &format!(
                        "server: https://{host}:{}\n    tls-server-name: localhost",
                        member.plane.api.port()
                    ),
                ),
            )?;
            let cluster_cidr = cidrs[i]
                .iter()
                .map(IpNet::to_string)
                .collect::<Vec<_>>()
                .join(",");
            let mut command = plane.nodes[i].netns.command(bin_dir().join("kube-proxy"));
            command.args([
                format!("--kubeconfig={}", kubeconfig.display()),
                "--proxy-mode=nftables".into(),
                format!("--hostname-override={KWOK_NODE}"),
                format!("--cluster-cidr={cluster_cidr}"),
                // A namespace other than the host's cannot write
                // nf_conntrack_max; these keep kube-proxy from trying.
                "--conntrack-max-per-core=0".into(),
                "--conntrack-min=0".into(),
                "--v=2".into(),
            ]);
            plane.kube_proxies.push(Process::spawn_command(
                &format!("{} kube-proxy", member.id),
                command,
                &member.plane.dir.join("kube-proxy.log"),
            )?);
        }
        plane.wait_tables(set).await?;
        Ok(plane)
    }

    /// Waits until every kube-proxy has made its nftables tables.
    async fn wait_tables(&mut self, set: &Clusterset) -> Result<()> {
        let deadline = Instant::now() + KUBE_PROXY_START;
        for (i, member) in set.members.iter().enumerate() {
            loop {
                self.kube_proxies[i].check_alive()?;
                let made = ["ip", "ip6"].iter().all(|family| {
                    self.nodes[i]
                        .netns
                        .command("nft")
                        .args(["list", "table", family, "kube-proxy"])
                        .output()
                        .is_ok_and(|o| o.status.success())
                });
                if made {
                    break;
                }
                ensure!(
                    Instant::now() < deadline,
                    "{}: kube-proxy made no tables within {KUBE_PROXY_START:?}; its log ends:\n{}",
                    member.id,
                    log_tail(&member.plane.dir.join("kube-proxy.log"), 30)
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        Ok(())
    }

    /// The network namespace of member `member`'s node (where its
    /// kube-proxy works), for `ip netns exec`.
    pub fn node_netns(&self, member: usize) -> &str {
        self.nodes[member].netns.name()
    }

    /// The root namespace's end of that node's veth: reachable from the
    /// node and from the root namespace (a server bound here serves the node).
    pub fn host_addresses(&self, member: usize) -> (Ipv4Addr, Ipv6Addr) {
        self.nodes[member].host
    }

    /// Member `member`'s pod CIDRs (its kwok Node's `podCIDRs`), IPv4 first.
    pub fn pod_cidrs(&self, member: usize) -> &[IpNet] {
        &self.nodes[member].cidrs
    }

    /// A namespace holding `ips` (a Pod of member `member`'s), with a veth
    /// to that member's node and default routes via it; the node routes
    /// `ips` to it, and the fabric routes the member's pod CIDRs to the node.
    pub fn attach_pod(&self, member: usize, ips: &[IpAddr]) -> Result<PodNetns> {
        let k = self.pods.fetch_add(1, Ordering::Relaxed);
        let node = &self.nodes[member].netns;
        let pod = Netns::create(unique(&format!("-pod{k}")))?;
        let node_if = format!("p{k}");
        veth(Some(node), &node_if, &pod, "eth0")?;
        node.address(&node_if, POD_GATEWAY_V4.into(), 32)?;
        node.address(&node_if, POD_GATEWAY_V6.into(), 64)?;
        for ip in ips {
            let host = if ip.is_ipv4() { 32 } else { 128 };
            pod.address("eth0", *ip, host)?;
            node.route(&format!("{ip}/{host}"), None, Some(&node_if))?;
        }
        pod.route(&format!("{POD_GATEWAY_V4}/32"), None, Some("eth0"))?;
        pod.route("default", Some(POD_GATEWAY_V4.into()), Some("eth0"))?;
        pod.route("default", Some(POD_GATEWAY_V6.into()), Some("eth0"))?;
        Ok(PodNetns {
            processes: Vec::new(),
            netns: pod,
            dir: self.dir.clone(),
        })
    }

    /// Dials `target` `count` times from member `member`'s node: each
    /// dial's first line of answer, or `None` (no connection, no answer).
    pub async fn dial(
        &self,
        member: usize,
        target: SocketAddr,
        proto: Proto,
        count: usize,
    ) -> Result<Vec<Option<String>>> {
        let netns = std::path::Path::new("/run/netns").join(self.node_netns(member));
        dial(netns, target, proto, count).await
    }
}

impl Drop for DataPlane {
    fn drop(&mut self) {
        self.kube_proxies.iter_mut().for_each(Process::kill);
        self.relays.iter().for_each(JoinHandle::abort);
    }
}

/// A Pod's network namespace ([`DataPlane::attach_pod`]), deleted when
/// dropped, after the processes it runs are killed.
pub struct PodNetns {
    processes: Vec<Process>,
    netns: Netns,
    dir: PathBuf,
}

impl PodNetns {
    /// Its name, for `ip netns exec`.
    pub fn name(&self) -> &str {
        self.netns.name()
    }

    /// `program` run inside it.
    pub fn command(&self, program: &str) -> Command {
        self.netns.command(program)
    }

    /// Runs `program args...` inside it until it is dropped; the output
    /// goes to `<name>-<label>.log` beside the clusterset's other logs.
    pub fn spawn(&mut self, label: &str, program: &str, args: &[String]) -> Result<()> {
        let mut command = self.command(program);
        command.args(args);
        let name = format!("{}-{label}", self.name());
        let log = self.dir.join(format!("{name}.log"));
        self.processes
            .push(Process::spawn_command(&name, command, &log)?);
        Ok(())
    }
}

/// Links between a node and the root namespace: `10.200.<member>.x/24`,
/// `fd00:200:0:<member>::x/64`.
const HOST_LINKS: (u8, u16) = (200, 0x200);
/// Links between a node and the fabric: `10.201.<member>.x/24`,
/// `fd00:201:0:<member>::x/64`.
const FABRIC_LINKS: (u8, u16) = (201, 0x201);

/// The near (`.1`: root namespace or fabric) and far (`.2`: node)
/// addresses of member `index`'s link in `block`.
fn pair(block: (u8, u16), index: u8) -> ((Ipv4Addr, Ipv6Addr), (Ipv4Addr, Ipv6Addr)) {
    let end = |x: u8| {
        (
            Ipv4Addr::new(10, block.0, index, x),
            Ipv6Addr::new(0xfd00, block.1, 0, index.into(), 0, 0, 0, x.into()),
        )
    };
    (end(1), end(2))
}

/// kwok's Node's `podCIDRs`: the member's Pod network, IPv4 first.
async fn pod_cidrs(admin: &kube::Client) -> Result<Vec<IpNet>> {
    let node = Api::<Node>::all(admin.clone()).get(KWOK_NODE).await?;
    node.spec
        .and_then(|s| s.pod_cidrs)
        .context("kwok's Node has no podCIDRs")?
        .iter()
        .map(|c| Ok(c.parse()?))
        .collect()
}

/// Fails unless the ServiceCIDR of the VIP pools exists: kube-proxy must
/// start after it (see the module's header).
async fn vip_service_cidr(admin: &kube::Client) -> Result<()> {
    let api: Api<ServiceCIDR> = Api::all(admin.clone());
    ensure!(
        api.get_opt(VIP_SERVICE_CIDR).await?.is_some(),
        "no ServiceCIDR {VIP_SERVICE_CIDR} (config/kubernetes/servicecidr.yaml)"
    );
    Ok(())
}

/// Passes connections to `host:port` on to the API server's loopback
/// address, byte for byte (TLS stays end to end).
async fn relay(host: Ipv4Addr, api: SocketAddr) -> Result<JoinHandle<()>> {
    let listener = tokio::net::TcpListener::bind((host, api.port()))
        .await
        .with_context(|| format!("binding the API server relay on {host}"))?;
    Ok(tokio::spawn(async move {
        // Aborting this task drops the set: every copy stops with it.
        let mut copies = JoinSet::new();
        while let Ok((mut inbound, _)) = listener.accept().await {
            copies.spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(api).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
            while copies.try_join_next().is_some() {}
        }
    }))
}

/// kube-proxy, `nft` and `socat` must be here; without them the data
/// plane scenarios skip (and fail under CI).
fn check_tools() -> Result<()> {
    let kube_proxy = bin_dir().join("kube-proxy");
    let mut missing = Vec::new();
    if !kube_proxy.exists() {
        missing.push(format!(
            "{} (bash tests/control-plane/build.sh)",
            kube_proxy.display()
        ));
    }
    for (tool, package) in [("nft", "nftables"), ("socat", "socat"), ("ip", "iproute2")] {
        if Command::new(tool).arg("-V").output().is_err() {
            missing.push(format!("{tool} (Debian package {package})"));
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    let message = format!("the data plane needs {}", missing.join(", "));
    if std::env::var_os("CI").is_some() {
        bail!(message);
    }
    Err(Skipped(message).into())
}
