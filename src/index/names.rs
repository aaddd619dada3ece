//! Which name of the zone a query name is (docs/dns.md, "The names"): the
//! apex, a fixed name, an empty non-terminal, the NS target, or a name under
//! one service.

use std::net::IpAddr;
use std::sync::Arc;

use hickory_proto::rr::Name;

use super::entry::ServiceEntry;
use crate::model::ImportType;
use crate::model::import::{Import, ImportCluster};

/// What a query name resolves to.
#[derive(Clone, Debug)]
pub enum Lookup {
    /// Outside the zone.
    NotInZone,
    /// In the zone, but the sources have not synced yet.
    NotReady,
    /// The name exists (it may own no record of the asked type: NODATA).
    Found(Owner),
    /// The name does not exist.
    NxDomain,
}

/// A name that exists in a reverse zone.
#[derive(Clone, Debug)]
pub enum ReverseOwner {
    /// The apex of the reverse zone at this index of the zones (SOA, NS).
    Apex(usize),
    /// A full address: the names it points at.
    Pointers(Vec<Name>),
    /// Above addresses that have names: an empty non-terminal.
    Empty,
}

/// A name that exists in the zone.
#[derive(Clone, Debug)]
pub enum Owner {
    /// The zone apex (SOA, NS).
    Apex,
    /// `dns-version.<zone>` (TXT).
    DnsVersion,
    /// An empty non-terminal: `svc.<zone>`, `<ns>.svc.<zone>` or `dns.<zone>`.
    Empty,
    /// `ns.dns.<zone>`, the name server named by the apex NS record (A/AAAA).
    NameServer,
    /// A name under one service.
    Service(Arc<ServiceEntry>, ServiceName),
    /// A name in a reverse zone.
    Reverse(ReverseOwner),
}

impl Owner {
    /// Whether the name's addresses keep the order the index gives them
    /// instead of rotating per response: a ClusterSetIP service name's
    /// (its VIPs, or without VIPs every cluster's ClusterIP, the local
    /// cluster's first, so that clients use the local Service).
    pub fn keeps_order(&self) -> bool {
        matches!(self, Self::Service(entry, ServiceName::Service)
            if entry.import.type_ == ImportType::ClusterSetIP)
    }
}

/// A name under one service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServiceName {
    /// `<svc>.<ns>.svc.<zone>`.
    Service,
    /// `_<port>._<proto>.<svc>…`: index into the import's ports.
    Srv(usize),
    /// `<host>.<cluster>.<svc>…`: the cluster index and the endpoint addresses.
    Pod(usize, Vec<IpAddr>),
    /// `<cluster>.<svc>…` (cluster targeting only): the cluster index.
    Cluster(usize),
    /// An empty non-terminal (RFC 8499 §7, RFC 8020): `_<proto>.<svc>…`
    /// above SRV names, `<cluster>.<svc>…` above per-pod names, and the
    /// trailing labels of a multi-label cluster id (`west` of `eu.west`).
    Empty,
}

/// Resolves the labels below `<svc>.<ns>.svc.<zone>` (leftmost first).
/// None: no such name (NXDOMAIN).
pub(super) fn service_name(
    import: &Import,
    rest: &[&[u8]],
    cluster_targeting: bool,
) -> Option<ServiceName> {
    if import.type_ == ImportType::Headless
        && import.clusters.iter().all(|c| c.endpoints.is_empty())
    {
        return None;
    }
    if import.local_families.is_empty() {
        return rest.is_empty().then_some(ServiceName::Service);
    }
    match rest {
        [] => Some(ServiceName::Service),
        [proto] if proto.starts_with(b"_") => {
            let any = (0..import.ports.len()).any(|i| srv_matches(import, i, None, &proto[1..]));
            any.then_some(ServiceName::Empty)
        }
        [port, proto] if port.starts_with(b"_") && proto.starts_with(b"_") => {
            (0..import.ports.len())
                .find(|&i| srv_matches(import, i, Some(&port[1..]), &proto[1..]))
                .map(ServiceName::Srv)
        }
        [host, cluster @ ..] => pod(import, host, cluster)
            .or_else(|| {
                let targeted = cluster_targeting
                    .then(|| cluster_index(import, rest))
                    .flatten();
                targeted.map(ServiceName::Cluster)
            })
            .or_else(|| {
                has_names_below(import, rest, cluster_targeting).then_some(ServiceName::Empty)
            }),
    }
}

/// Whether a name exists below `labels.<svc>…`: `labels` are the trailing
/// labels of a cluster id (all of them included) with per-pod names below,
/// or a proper tail of one when cluster targeting names every cluster.
fn has_names_below(import: &Import, labels: &[&[u8]], cluster_targeting: bool) -> bool {
    import.clusters.iter().any(|c| {
        let ids = c.cluster.split('.').count();
        let tail = ids >= labels.len() && ends_with_labels(&c.cluster, labels);
        let pods = import.type_ == ImportType::Headless && has_pod_names(c, import);
        tail && (pods || (cluster_targeting && ids > labels.len()))
    })
}

/// Whether `cluster` has an endpoint of a served family (so per-pod names).
fn has_pod_names(cluster: &ImportCluster, import: &Import) -> bool {
    cluster.endpoints.iter().any(|e| import.serves(&e.address))
}

/// Whether the dotted id ends with `labels` (compared label by label).
fn ends_with_labels(dotted: &str, labels: &[&[u8]]) -> bool {
    dotted
        .rsplit('.')
        .zip(labels.iter().rev())
        .all(|(part, label)| part.as_bytes() == *label)
}

fn srv_matches(import: &Import, index: usize, name: Option<&[u8]>, proto: &[u8]) -> bool {
    let port = &import.ports[index];
    let Some(port_name) = &port.name else {
        return false;
    };
    let port_proto = port.protocol.as_deref().unwrap_or("TCP");
    port_proto.as_bytes().eq_ignore_ascii_case(proto)
        && name.is_none_or(|n| port_name.as_bytes() == n)
}

/// The cluster whose id is `labels` joined with dots.
fn cluster_index(import: &Import, labels: &[&[u8]]) -> Option<usize> {
    import
        .clusters
        .iter()
        .position(|c| labels_equal(&c.cluster, labels))
}

fn labels_equal(dotted: &str, labels: &[&[u8]]) -> bool {
    let mut parts = dotted.split('.');
    labels
        .iter()
        .all(|l| parts.next().is_some_and(|p| p.as_bytes() == *l))
        && parts.next().is_none()
}

/// A per-pod name of a headless import: `<host>` in the cluster named by the other labels.
fn pod(import: &Import, host: &[u8], cluster: &[&[u8]]) -> Option<ServiceName> {
    if import.type_ != ImportType::Headless || cluster.is_empty() {
        return None;
    }
    let index = cluster_index(import, cluster)?;
    let addresses = pod_addresses(&import.clusters[index], host, import);
    (!addresses.is_empty()).then_some(ServiceName::Pod(index, addresses))
}

fn pod_addresses(cluster: &ImportCluster, host: &[u8], import: &Import) -> Vec<IpAddr> {
    cluster
        .endpoints
        .iter()
        .filter(|e| import.serves(&e.address))
        .filter(|e| match &e.hostname {
            Some(h) => h.as_bytes() == host,
            None => dashed(&e.address).as_bytes() == host,
        })
        .map(|e| e.address)
        .collect()
}

/// The `<host>` label of an endpoint without hostname: its address with `.`
/// and `:` replaced by `-` (`10-0-0-1`, `fd00--1`).
pub fn dashed(ip: &IpAddr) -> String {
    ip.to_string().replace(['.', ':'], "-")
}
