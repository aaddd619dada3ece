//! The clusterset IP routes (issue 47, item 4): from each member's node,
//! through that member's own stock kube-proxy, a connection to the address
//! clusterset-dns answers for a service reaches a Pod of a cluster that
//! exports it, and only such a Pod. Run with each VIP mode of
//! `--derived-services`: `clusterset` (one VIP everywhere, pinned in a
//! ServiceCIDR of the VIP pools) and `per-cluster` (each member's own
//! ClusterIP).
//!
//! KEP-1645, "ClusterSetIP": a non-headless ServiceImport has an IP,
//! clusterset-wide or per cluster, and requests to it from within an
//! importing cluster route to the backends of the aggregated Service, the
//! endpoints of the clusters that export it.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};

use anyhow::{Context, Result, ensure};
use futures::future::try_join_all;
use hickory_proto::rr::RecordType;
use ipnet::IpNet;
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use test_support::{Outcome, in_v4_pool, in_v6_pool, resolve};

use super::dial::Proto;
use super::{DataPlane, PodNetns};
use crate::check::fqdn;
use crate::clusterset::{CONVERGE, Clusterset, eventually};
use crate::workloads::{export, namespace, pod, set_ready, unexport};

/// The service every member runs; east and west export it, north does not.
const SERVICE: &str = "web";
/// Its port, TCP and UDP.
const PORT: u16 = 80;
/// Where its Pods listen.
const TARGET_PORT: u16 = 8080;
/// Members (in `set.members` order) that export [`SERVICE`].
const EXPORTERS: [usize; 2] = [0, 1];
/// Dials per round: both exporters are reached in 30 with probability
/// 1 - 2^-29 (kube-proxy picks an endpoint at random per connection).
const ROUND: usize = 30;
/// UDP dials per round (each tries up to three datagrams).
const UDP_ROUND: usize = 12;

/// `--derived-services clusterset`: every member answers one VIP of the
/// pools, and its kube-proxy routes it.
pub async fn clusterset_vips_route_to_every_exporting_cluster(set: &mut Clusterset) -> Result<()> {
    routes(set, "clusterset", "dp-clusterset", 1000).await
}

/// `--derived-services per-cluster`: each member answers its own
/// ClusterIP, and its kube-proxy routes it.
pub async fn per_cluster_vips_route_to_every_exporting_cluster(set: &mut Clusterset) -> Result<()> {
    routes(set, "per-cluster", "dp-per-cluster", 1010).await
}

/// The harness alone, no clusterset-dns in the path: a selectorless
/// Service in east pinned to a VIP of the pools' ServiceCIDR, with slices
/// for a Pod of east's and one of west's, as MCS writes them. east's
/// kube-proxy reaches both over the fabric; what the modes' scenarios
/// show rests on this.
pub async fn kube_proxy_routes_a_pinned_vip_between_members(set: &mut Clusterset) -> Result<()> {
    let plane = DataPlane::start(set).await?;
    // What a node's Pods resolve with is served on the root namespace's
    // end of its veth (the upstream conformance suite's request Pods).
    let host = tokio::net::UdpSocket::bind((plane.host_addresses(0).0, 0)).await?;
    let served = SocketAddr::new(plane.host_addresses(0).0.into(), host.local_addr()?.port());
    let answer = tokio::spawn(async move {
        let mut buffer = [0u8; 64];
        let (_, peer) = host.recv_from(&mut buffer).await?;
        host.send_to(b"host\n", peer).await
    });
    let got = plane.dial(0, served, Proto::Udp, 1).await?;
    answer.abort();
    ensure!(
        got == [Some("host".to_owned())],
        "east's node got {got:?} from {served}"
    );
    let ns = "dp-pinned";
    let vips: [IpAddr; 2] = ["243.255.255.5".parse()?, "fd00:c5e7::ffff:fff5".parse()?];
    let mut pods = Vec::new();
    let mut endpoints = [Vec::new(), Vec::new()];
    let mut exporters = BTreeSet::new();
    for i in EXPORTERS {
        let v4 = nth(&plane.pod_cidrs(i)[0], 1020);
        let v6 = nth(&plane.pod_cidrs(i)[1], 1020);
        pods.push(listening_pod(&plane, i, v4, v6)?);
        exporters.insert(format!("pod ip {v4}"));
        endpoints[0].push(json!({"addresses": [v4.to_string()], "conditions": {"ready": true}}));
        endpoints[1].push(json!({"addresses": [v6.to_string()], "conditions": {"ready": true}}));
    }
    let admin = &set.members[0].admin;
    namespace(admin, ns).await?;
    let pinned: Service = serde_json::from_value(json!({
        "metadata": {"name": "pinned", "namespace": ns},
        "spec": {
            "ipFamilies": ["IPv4", "IPv6"],
            "ipFamilyPolicy": "RequireDualStack",
            "clusterIP": vips[0].to_string(),
            "clusterIPs": vips.map(|v| v.to_string()),
            "ports": ports(),
        },
    }))?;
    Api::<Service>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &pinned)
        .await
        .context("creating a Service pinned in the pools' ServiceCIDR")?;
    let slices: Api<EndpointSlice> = Api::namespaced(admin.clone(), ns);
    for (family, endpoints) in ["IPv4", "IPv6"].iter().zip(endpoints) {
        let slice: EndpointSlice = serde_json::from_value(json!({
            "metadata": {
                "name": format!("pinned-{}", family.to_ascii_lowercase()),
                "labels": {"kubernetes.io/service-name": "pinned"},
            },
            "addressType": family,
            "ports": [
                {"name": "tcp", "protocol": "TCP", "port": TARGET_PORT},
                {"name": "udp", "protocol": "UDP", "port": TARGET_PORT},
            ],
            "endpoints": endpoints,
        }))?;
        slices.create(&PostParams::default(), &slice).await?;
    }
    for vip in vips {
        converge(&plane, 0, vip, &exporters).await?;
        strictly(&plane, 0, vip, Proto::Udp, UDP_ROUND, &exporters).await?;
    }
    Api::<Namespace>::all(admin.clone())
        .delete(ns, &Default::default())
        .await?;
    drop(pods);
    Ok(())
}

/// Runs [`exercise`] with every member's replicas in `mode`, then puts
/// back the mode each ran before.
async fn routes(set: &mut Clusterset, mode: &'static str, ns: &str, offset: u32) -> Result<()> {
    let plane = DataPlane::start(set).await?;
    let before: Vec<&'static str> = set.members.iter().map(|m| m.derived).collect();
    for i in 0..set.members.len() {
        restart_in(set, i, mode).await?;
    }
    let result = exercise(set, &plane, mode, ns, offset).await;
    drop(plane);
    for (i, mode) in before.into_iter().enumerate() {
        restart_in(set, i, mode).await?;
    }
    result
}

/// Replaces member `i`'s replicas with one in `mode`, unless they run in it.
async fn restart_in(set: &mut Clusterset, i: usize, mode: &'static str) -> Result<()> {
    let member = &mut set.members[i];
    if member.derived == mode {
        return Ok(());
    }
    member.derived = mode;
    for replica in member.replicas.drain(..) {
        replica.kill();
    }
    set.add_replica(i).await
}

async fn exercise(
    set: &Clusterset,
    plane: &DataPlane,
    mode: &str,
    ns: &str,
    offset: u32,
) -> Result<()> {
    let mut pods: Vec<PodNetns> = Vec::new();
    let mut lines = Vec::new();
    for (i, member) in set.members.iter().enumerate() {
        let v4 = nth(&plane.pod_cidrs(i)[0], offset);
        let v6 = nth(&plane.pod_cidrs(i)[1], offset);
        pods.push(listening_pod(plane, i, v4, v6)?);
        lines.push(format!("pod ip {v4}"));
        let admin = &member.admin;
        namespace(admin, ns).await?;
        service(admin, ns).await?;
        pod(
            admin,
            ns,
            SERVICE,
            "web-1",
            &[&v4.to_string(), &v6.to_string()],
            false,
        )
        .await?;
    }
    for i in EXPORTERS {
        export(&set.members[i].admin, ns, SERVICE).await?;
    }
    let exporters: BTreeSet<String> = EXPORTERS.iter().map(|&i| lines[i].clone()).collect();

    let vips = vips(set, ns, mode).await?;
    // KEP-1645, "ClusterSetIP": one IP used clusterset-wide...
    if mode == "clusterset" {
        for (i, member) in set.members.iter().enumerate() {
            ensure!(
                vips[i] == vips[0],
                "{} answers {:?}, {} {:?}",
                member.id,
                vips[i],
                set.members[0].id,
                vips[0]
            );
        }
    }

    // KEP-1645, "ClusterSetIP": requests to the IP route to the backends
    // of the aggregated Service, every exporting cluster's, over TCP and
    // UDP and in both families; north's Pod, behind a Service north does
    // not export, is never one of them.
    each_member(set, async |i| {
        for vip in vips[i] {
            converge(plane, i, vip, &exporters).await?;
            strictly(plane, i, vip, Proto::Tcp, ROUND, &exporters).await?;
            strictly(plane, i, vip, Proto::Udp, UDP_ROUND, &exporters).await?;
        }
        Ok(())
    })
    .await?;

    // KEP-1645: an endpoint that is not ready is no backend; east's Pod
    // turning not ready leaves every member's rotation, and comes back.
    let east = &set.members[EXPORTERS[0]].admin;
    set_ready(east, ns, "web-1", false).await?;
    let west_only = BTreeSet::from([lines[EXPORTERS[1]].clone()]);
    each_member(set, async |i| {
        converge(plane, i, vips[i][0], &west_only).await?;
        strictly(plane, i, vips[i][0], Proto::Tcp, ROUND, &west_only).await
    })
    .await?;
    set_ready(east, ns, "web-1", true).await?;
    each_member(set, async |i| {
        converge(plane, i, vips[i][0], &exporters).await
    })
    .await?;

    // KEP-1645, exporting services: a cluster that deletes its
    // ServiceExport no longer backs the service; west's unexport takes
    // its Pod out of every member's rotation.
    unexport(&set.members[EXPORTERS[1]].admin, ns, SERVICE).await?;
    let east_only = BTreeSet::from([lines[EXPORTERS[0]].clone()]);
    each_member(set, async |i| {
        converge(plane, i, vips[i][0], &east_only).await?;
        strictly(plane, i, vips[i][0], Proto::Tcp, ROUND, &east_only).await
    })
    .await?;

    // The last unexport ends the import (KEP-1645: the ServiceImport and
    // its IP go when no cluster exports): the name is gone, and the VIPs
    // each member answered get no connection at all.
    unexport(east, ns, SERVICE).await?;
    each_member(set, async |i| {
        let dns = set.members[i].dns();
        eventually(
            CONVERGE,
            &format!("{}: {SERVICE} gone", set.members[i].id),
            async || match resolve(dns, &fqdn(SERVICE, ns), RecordType::A).await {
                Outcome::NxDomain => Ok(Some(())),
                other => Err(format!("{other:?}")),
            },
        )
        .await?;
        for vip in vips[i] {
            eventually(
                CONVERGE,
                &format!("{}: [{vip}]:{PORT} closed", set.members[i].id),
                async || {
                    let got = plane
                        .dial(i, SocketAddr::new(vip, PORT), Proto::Tcp, 2)
                        .await
                        .map_err(|e| e.to_string())?;
                    if got.iter().all(Option::is_none) {
                        Ok(Some(()))
                    } else {
                        Err(format!("{got:?}"))
                    }
                },
            )
            .await?;
        }
        Ok(())
    })
    .await?;
    drop(pods);
    Ok(())
}

/// Runs `check(i)` for every member at once.
async fn each_member<F>(set: &Clusterset, check: F) -> Result<()>
where
    F: AsyncFn(usize) -> Result<()>,
{
    let check = &check;
    try_join_all((0..set.members.len()).map(|i| async move {
        check(i)
            .await
            .with_context(|| format!("from {}'s node", set.members[i].id))
    }))
    .await?;
    Ok(())
}

/// Waits until `ROUND` TCP dials of `vip` from member `member`'s node all
/// connect and reach exactly the listeners `expected` (kube-proxy follows
/// the API within about a second).
async fn converge(
    plane: &DataPlane,
    member: usize,
    vip: IpAddr,
    expected: &BTreeSet<String>,
) -> Result<()> {
    let target = SocketAddr::new(vip, PORT);
    eventually(
        CONVERGE,
        &format!("[{vip}]:{PORT} reaching {expected:?}"),
        async || {
            let got = plane
                .dial(member, target, Proto::Tcp, ROUND)
                .await
                .map_err(|e| e.to_string())?;
            let reached: BTreeSet<String> = got.iter().flatten().cloned().collect();
            if got.iter().all(Option::is_some) && &reached == expected {
                Ok(Some(()))
            } else {
                Err(format!("{got:?}"))
            }
        },
    )
    .await
}

/// `count` dials of `vip` over `proto` once converged: every answer is one
/// of `expected` and each of `expected` answers. Every TCP dial connects;
/// a UDP dial may go unanswered (a socat that forks per peer drops one now
/// and then).
async fn strictly(
    plane: &DataPlane,
    member: usize,
    vip: IpAddr,
    proto: Proto,
    count: usize,
    expected: &BTreeSet<String>,
) -> Result<()> {
    let got = plane
        .dial(member, SocketAddr::new(vip, PORT), proto, count)
        .await?;
    let reached: BTreeSet<String> = got.iter().flatten().cloned().collect();
    ensure!(
        &reached == expected && (proto == Proto::Udp || got.iter().all(Option::is_some)),
        "{proto:?} [{vip}]:{PORT}, {count} dials: {got:?}; expected exactly {expected:?}"
    );
    Ok(())
}

/// Each member's A and AAAA answer for the service, one address each,
/// once they are what `mode` says: VIPs of the pools (`clusterset`), or
/// the `clusterIPs` of the member's derived Service (`per-cluster`; the
/// member answers the VIPs until that Service exists).
async fn vips(set: &Clusterset, ns: &str, mode: &str) -> Result<Vec<[IpAddr; 2]>> {
    let mut all = Vec::new();
    for member in &set.members {
        let dns = member.dns();
        let name = fqdn(SERVICE, ns);
        let pair = eventually(
            CONVERGE,
            &format!("{}: {SERVICE}'s {mode} addresses", member.id),
            async || {
                let (a, aaaa) = (
                    resolve(dns, &name, RecordType::A).await,
                    resolve(dns, &name, RecordType::AAAA).await,
                );
                let pair = match (&a, &aaaa) {
                    (Outcome::Ips(v4), Outcome::Ips(v6)) if v4.len() == 1 && v6.len() == 1 => {
                        [*v4.first().expect("one"), *v6.first().expect("one")]
                    }
                    _ => return Err(format!("{a:?} {aaaa:?}")),
                };
                // KEP-1645, "ClusterSetIP": a single IP used
                // clusterset-wide, or one assigned per cluster.
                let expected = if mode == "clusterset" {
                    in_v4_pool(&pair[0]) && in_v6_pool(&pair[1])
                } else {
                    let derived = derived_cluster_ips(&member.admin, ns)
                        .await
                        .map_err(|e| format!("{pair:?}; {e:#}"))?;
                    // Allocated by the member's API server: from its own
                    // range or, as the allocator picks among ServiceCIDRs
                    // in no defined order, servicecidr.yaml's (KEP-1880).
                    derived == pair
                };
                if expected {
                    Ok(Some(pair))
                } else {
                    Err(format!("{pair:?}"))
                }
            },
        )
        .await?;
        all.push(pair);
    }
    Ok(all)
}

/// The `clusterIPs` of the member's derived Service for [`SERVICE`].
async fn derived_cluster_ips(admin: &Client, ns: &str) -> Result<Vec<IpAddr>> {
    let selector = format!(
        "app.kubernetes.io/managed-by=clusterset-dns.io,multicluster.kubernetes.io/service-name={SERVICE}"
    );
    let services = Api::<Service>::namespaced(admin.clone(), ns)
        .list(&ListParams::default().labels(&selector))
        .await?
        .items;
    ensure!(
        services.len() == 1,
        "{} derived Services for {ns}/{SERVICE}",
        services.len()
    );
    services[0]
        .spec
        .as_ref()
        .and_then(|s| s.cluster_ips.clone())
        .context("no clusterIPs")?
        .iter()
        .map(|ip| Ok(ip.parse()?))
        .collect()
}

/// The `offset`th address of `cidr` (kwok hands out its Pods' from the start).
fn nth(cidr: &IpNet, offset: u32) -> IpAddr {
    match cidr {
        IpNet::V4(net) => std::net::Ipv4Addr::from(u32::from(net.network()) + offset).into(),
        IpNet::V6(net) => {
            std::net::Ipv6Addr::from(u128::from(net.network()) + u128::from(offset)).into()
        }
    }
}

/// A Pod namespace of member `member` holding `v4` and `v6`, where socat
/// answers `pod ip <v4>` on TCP and UDP port [`TARGET_PORT`], both families
/// (the upstream conformance suite's hello Pods' command lines).
fn listening_pod(plane: &DataPlane, member: usize, v4: IpAddr, v6: IpAddr) -> Result<PodNetns> {
    let mut pod = plane.attach_pod(member, &[v4, v6])?;
    for proto in ["TCP6", "UDP6"] {
        pod.spawn(
            &proto.to_ascii_lowercase(),
            "socat",
            &[
                format!("{proto}-LISTEN:{TARGET_PORT},fork,reuseaddr,ipv6only=0"),
                format!("SYSTEM:echo pod ip {v4}"),
            ],
        )?;
    }
    Ok(pod)
}

/// `web`: dual stack, `tcp` and `udp` on [`PORT`] to [`TARGET_PORT`],
/// selecting the Pod `web-1`.
async fn service(admin: &Client, ns: &str) -> Result<()> {
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": SERVICE, "namespace": ns},
        "spec": {
            "selector": {"app": SERVICE},
            "ipFamilies": ["IPv4", "IPv6"],
            "ipFamilyPolicy": "RequireDualStack",
            "ports": ports(),
        },
    }))?;
    Api::<Service>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &service)
        .await
        .with_context(|| format!("creating Service {ns}/{SERVICE}"))?;
    Ok(())
}

/// `tcp` and `udp` on [`PORT`] to [`TARGET_PORT`].
fn ports() -> serde_json::Value {
    json!([
        {"name": "tcp", "protocol": "TCP", "port": PORT, "targetPort": TARGET_PORT},
        {"name": "udp", "protocol": "UDP", "port": PORT, "targetPort": TARGET_PORT},
    ])
}
