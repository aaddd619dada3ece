//! The DNS names and records of one import (DESIGN.md §4, "Records").

use std::collections::BTreeMap;
use std::net::IpAddr;

use hickory_proto::rr::rdata::{A, AAAA, SRV};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use tracing::warn;

use super::node::Node;
use crate::engine::{Import, ImportCluster};
use crate::model::{ImportType, IpFamily, ServiceKey};

/// What naming needs besides the import.
#[derive(Clone, Debug)]
pub struct Naming {
    /// The zone apex, e.g. `clusterset.local.`.
    pub zone: Name,
    /// TTL of service records.
    pub ttl: u32,
    /// Whether `<cluster>.<svc>.<ns>.svc.<zone>` answers (else reserved: NXDOMAIN).
    pub cluster_targeting: bool,
}

/// `<svc>.<ns>.svc.<zone>`, or None when the labels are not valid DNS.
pub fn service_name(naming: &Naming, key: &ServiceKey) -> Option<Name> {
    child(&naming.zone, &format!("{}.{}.svc", key.name, key.namespace))
}

/// `<host>` of an endpoint's per-pod name: its hostname, else its first
/// address with `.`/`:` replaced by `-` (`10-0-0-1`, `fd00--1`).
pub fn host_label(hostname: Option<&str>, address: &IpAddr) -> String {
    match hostname {
        Some(h) => h.to_owned(),
        None => address.to_string().replace(['.', ':'], "-"),
    }
}

/// Every name the import owns with its records (empty nodes are empty
/// non-terminals). A headless import without ready endpoints owns nothing.
pub fn service_nodes(naming: &Naming, key: &ServiceKey, import: &Import) -> Vec<(Name, Node)> {
    let Some(service) = service_name(naming, key) else {
        warn!(service = %key, "namespace or name is not a valid DNS label; not served");
        return Vec::new();
    };
    let mut nodes: BTreeMap<Name, Node> = BTreeMap::new();
    let families = &import.local_families;
    // (target, port) pairs of SRV records, by port name and protocol.
    let mut targets: Vec<(Name, IpAddr)> = Vec::new();
    match import.type_ {
        ImportType::ClusterSetIP => {
            let node = nodes.entry(service.clone()).or_default();
            for ip in import.local_vips() {
                node.push(address_record(&service, naming.ttl, ip));
            }
        }
        ImportType::Headless => {
            for cluster in &import.clusters {
                for (pod, addresses) in pod_names(&service, cluster, families) {
                    for ip in addresses {
                        nodes
                            .entry(service.clone())
                            .or_default()
                            .push(address_record(&service, naming.ttl, ip));
                        nodes
                            .entry(pod.clone())
                            .or_default()
                            .push(address_record(&pod, naming.ttl, ip));
                        targets.push((pod.clone(), ip));
                    }
                }
            }
            if targets.is_empty() {
                return Vec::new();
            }
            if let Some(node) = nodes.get_mut(&service) {
                node.dedup();
            }
        }
    }
    if naming.cluster_targeting {
        for cluster in &import.clusters {
            cluster_node(naming, &service, import, cluster, &mut nodes);
        }
    }
    if !import.local_families.is_empty() {
        srv_nodes(naming, &service, import, &targets, &mut nodes);
    }
    nodes.into_iter().collect()
}

/// Per-pod names of one cluster's ready endpoints with their addresses in `families`.
fn pod_names(
    service: &Name,
    cluster: &ImportCluster,
    families: &[IpFamily],
) -> BTreeMap<Name, Vec<IpAddr>> {
    let mut pods: BTreeMap<Name, Vec<IpAddr>> = BTreeMap::new();
    for endpoint in &cluster.endpoints {
        let addresses: Vec<IpAddr> = endpoint
            .addresses
            .iter()
            .copied()
            .filter(|ip| families.contains(&IpFamily::of(ip)))
            .collect();
        let Some(first) = addresses.first() else {
            continue;
        };
        let host = host_label(endpoint.hostname.as_deref(), first);
        match child(service, &format!("{host}.{}", cluster.cluster)) {
            Some(pod) => pods.entry(pod).or_default().extend(addresses),
            None => {
                warn!(%service, cluster = %cluster.cluster, %host, "endpoint hostname is not a valid DNS label; skipped")
            }
        }
    }
    pods
}

fn cluster_node(
    naming: &Naming,
    service: &Name,
    import: &Import,
    cluster: &ImportCluster,
    nodes: &mut BTreeMap<Name, Node>,
) {
    let Some(name) = child(service, &cluster.cluster) else {
        return;
    };
    let ips: Vec<IpAddr> = match import.type_ {
        ImportType::ClusterSetIP => cluster.cluster_ips.clone(),
        ImportType::Headless => cluster
            .endpoints
            .iter()
            .flat_map(|e| e.addresses.clone())
            .collect(),
    };
    let node = nodes.entry(name.clone()).or_default();
    for ip in ips
        .into_iter()
        .filter(|ip| import.local_families.contains(&IpFamily::of(ip)))
    {
        node.push(address_record(&name, naming.ttl, ip));
    }
    node.dedup();
}

/// `_<port>._<proto>.<svc>…` per named port, and the collapsed set on `<svc>…`.
fn srv_nodes(
    naming: &Naming,
    service: &Name,
    import: &Import,
    pods: &[(Name, IpAddr)],
    nodes: &mut BTreeMap<Name, Node>,
) {
    let mut targets: Vec<&Name> = pods.iter().map(|(pod, _)| pod).collect();
    targets.dedup();
    if import.type_ == ImportType::ClusterSetIP {
        targets = vec![service];
    }
    let mut bare: Vec<(Name, u16)> = Vec::new();
    for port in &import.ports {
        let (Some(port_name), Ok(number)) = (&port.name, u16::try_from(port.port)) else {
            continue;
        };
        let proto = port
            .protocol
            .as_deref()
            .unwrap_or("TCP")
            .to_ascii_lowercase();
        let Some(proto_name) = child(service, &format!("_{proto}")) else {
            continue;
        };
        let Some(owner) = child(&proto_name, &format!("_{port_name}")) else {
            continue;
        };
        nodes.entry(proto_name).or_default();
        let weight = srv_weight(targets.len());
        let node = nodes.entry(owner.clone()).or_default();
        for target in &targets {
            node.push(srv_record(&owner, naming.ttl, weight, number, target));
            if !bare.iter().any(|(t, p)| t == *target && *p == number) {
                bare.push(((*target).clone(), number));
            }
        }
    }
    let weight = srv_weight(bare.len());
    let node = nodes.entry(service.clone()).or_default();
    for (target, port) in &bare {
        node.push(srv_record(service, naming.ttl, weight, *port, target));
    }
}

/// Equal weights summing to about 100, as CoreDNS gives them.
fn srv_weight(count: usize) -> u16 {
    u16::try_from(100 / count.max(1)).unwrap_or(1).max(1)
}

fn srv_record(owner: &Name, ttl: u32, weight: u16, port: u16, target: &Name) -> Record {
    Record::from_rdata(
        owner.clone(),
        ttl,
        RData::SRV(SRV::new(0, weight, port, target.clone())),
    )
}

/// An A or AAAA record for `ip`.
pub fn address_record(owner: &Name, ttl: u32, ip: IpAddr) -> Record {
    let data = match ip {
        IpAddr::V4(v4) => RData::A(A(v4)),
        IpAddr::V6(v6) => RData::AAAA(AAAA(v6)),
    };
    Record::from_rdata(owner.clone(), ttl, data)
}

/// The record type that carries addresses of a family.
pub fn address_type(family: IpFamily) -> RecordType {
    match family {
        IpFamily::IPv4 => RecordType::A,
        IpFamily::IPv6 => RecordType::AAAA,
    }
}

/// `labels.parent`, lower-cased, or None if the labels are not valid.
pub(crate) fn child(parent: &Name, labels: &str) -> Option<Name> {
    Name::from_ascii(labels)
        .ok()
        .and_then(|n| n.append_domain(parent).ok())
        .map(|n| n.to_lowercase())
}
