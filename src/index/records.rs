//! The records of a name under one service, built when first asked for
//! (the DNS layer caches the encoded answer; see `ServiceEntry`).

use std::collections::HashSet;
use std::net::IpAddr;

use hickory_proto::rr::rdata::{A, AAAA, SOA, SRV};
use hickory_proto::rr::{Name, RData, Record, RecordType};

use super::entry::ServiceEntry;
use super::names::{ServiceName, dashed};
use crate::model::import::{Import, ImportCluster};
use crate::model::port::ServicePort;
use crate::model::port::backs;
use crate::model::{ImportType, IpFamily};

/// Records of type `rtype` (`ANY`: all) at `owner`, a name under `entry`.
pub(super) fn service_records(
    entry: &ServiceEntry,
    which: &ServiceName,
    owner: &Name,
    rtype: RecordType,
    ttl: u32,
) -> Vec<Record> {
    let import = &entry.import;
    let mut records = Vec::new();
    let mut addresses = |ips: &mut dyn Iterator<Item = IpAddr>| {
        let mut seen = HashSet::new();
        for ip in ips.filter(|ip| wants_address(rtype, ip) && seen.insert(*ip)) {
            records.push(address_record(owner, ttl, ip));
        }
    };
    match which {
        ServiceName::Service => {
            match import.type_ {
                ImportType::ClusterSetIP => addresses(&mut import.addresses.iter().copied()),
                ImportType::Headless => {
                    addresses(&mut answered_endpoints(import, None).map(|(_, ip, _)| ip))
                }
            }
            if wants(rtype, RecordType::SRV) {
                let service = service_name(owner, 0);
                records.extend(bare_srv(entry, owner, &service, ttl));
            }
        }
        ServiceName::Pod(_, ips) => addresses(&mut ips.iter().copied()),
        ServiceName::Cluster(index) => {
            let cluster = &import.clusters[*index];
            let local = |ip: &IpAddr| import.serves(ip);
            match import.type_ {
                ImportType::ClusterSetIP => {
                    addresses(&mut cluster.cluster_ips.iter().copied().filter(local))
                }
                ImportType::Headless => {
                    addresses(&mut cluster.endpoints.iter().map(|e| e.address).filter(local))
                }
            }
        }
        ServiceName::Srv(port) if wants(rtype, RecordType::SRV) => {
            let number = port_number(import, *port);
            let service = service_name(owner, 2);
            let targets = srv_targets(entry, &service, &import.ports[*port]);
            let weight = srv_weight(targets.len());
            records.extend(
                targets
                    .iter()
                    .map(|t| srv_record(owner, ttl, weight, number, t)),
            );
        }
        ServiceName::Srv(_) | ServiceName::Empty => {}
    }
    records
}

/// The SRV records on the bare service name: every named port with its
/// targets, identical (target, port) pairs collapsed.
fn bare_srv(entry: &ServiceEntry, owner: &Name, service: &Name, ttl: u32) -> Vec<Record> {
    let import = &entry.import;
    let mut pairs: Vec<(Name, u16)> = Vec::new();
    let mut seen = HashSet::new();
    for (i, port) in import.ports.iter().enumerate() {
        if port.name.is_none() {
            continue;
        }
        let number = port_number(import, i);
        for target in srv_targets(entry, service, port) {
            if seen.insert((target.clone(), number)) {
                pairs.push((target, number));
            }
        }
    }
    let weight = srv_weight(pairs.len());
    pairs
        .iter()
        .map(|(t, port)| srv_record(owner, ttl, weight, *port, t))
        .collect()
}

/// `<svc>.<ns>.svc.<zone>`, lower case, of `owner`, a name `below` labels
/// under it.
fn service_name(owner: &Name, below: u8) -> Name {
    owner
        .trim_to(usize::from(owner.num_labels().saturating_sub(below)))
        .to_lowercase()
}

/// The targets of `port`'s SRV records. ClusterSetIP: the service name.
/// Headless: the per-pod name of each ready endpoint of the clusters that
/// back the port (KEP-1645 "Service Port": a cluster defining it otherwise
/// does not serve it).
fn srv_targets(entry: &ServiceEntry, service: &Name, port: &ServicePort) -> Vec<Name> {
    match entry.import.type_ {
        ImportType::ClusterSetIP => vec![service.clone()],
        ImportType::Headless => {
            let mut seen = HashSet::new();
            answered_endpoints(&entry.import, Some(port))
                .filter_map(|(cluster, ip, host)| {
                    let name = pod_name(service, cluster, ip, host)?;
                    seen.insert(name.clone()).then_some(name)
                })
                .collect()
        }
    }
}

/// `<host>.<cluster>.<service>`: the per-pod name of an endpoint of
/// `service` (its hostname, else its dashed address); None if not valid DNS.
pub(super) fn pod_name(
    service: &Name,
    cluster: &str,
    ip: IpAddr,
    host: Option<&str>,
) -> Option<Name> {
    let host = host.map_or_else(|| dashed(&ip), str::to_owned);
    Name::from_ascii(format!("{host}.{cluster}"))
        .ok()?
        .append_domain(service)
        .ok()
}

/// (cluster, address, hostname) of every ready endpoint in the local
/// families, of the clusters backing `port` when one is given.
pub(super) fn local_endpoints<'a>(
    import: &'a Import,
    port: Option<&'a ServicePort>,
) -> impl Iterator<Item = (&'a str, IpAddr, Option<&'a str>)> {
    let backing = move |c: &&ImportCluster| port.is_none_or(|p| backs(&c.ports, p));
    import.clusters.iter().filter(backing).flat_map(move |c| {
        c.endpoints
            .iter()
            .filter(|e| import.serves(&e.address))
            .map(|e| (c.cluster.as_ref(), e.address, e.hostname.as_deref()))
    })
}

/// The endpoints a headless service name answers with (A, AAAA, SRV): the
/// local cluster's alone where `trafficDistribution: PreferClose` chose it
/// ([`Import::close`]) and it backs `port`, else [`local_endpoints`].
/// Per-pod names, PTR and the zone's list of names keep every endpoint.
fn answered_endpoints<'a>(
    import: &'a Import,
    port: Option<&'a ServicePort>,
) -> impl Iterator<Item = (&'a str, IpAddr, Option<&'a str>)> {
    let close = import
        .close
        .and_then(|i| import.clusters.get(i))
        .filter(|c| port.is_none_or(|p| backs(&c.ports, p)))
        .map(|c| &*c.cluster);
    local_endpoints(import, port).filter(move |(cluster, ..)| close.is_none_or(|c| c == *cluster))
}

fn port_number(import: &Import, index: usize) -> u16 {
    u16::try_from(import.ports[index].port).unwrap_or(0)
}

/// Whether a question of type `asked` wants records of type `rtype`.
pub(super) fn wants(asked: RecordType, rtype: RecordType) -> bool {
    asked == rtype || asked == RecordType::ANY
}

fn wants_address(asked: RecordType, ip: &IpAddr) -> bool {
    wants(asked, address_type(IpFamily::of(ip)))
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
pub(super) fn address_record(owner: &Name, ttl: u32, ip: IpAddr) -> Record {
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

/// The SOA of `zone` at `serial`.
pub(super) fn soa_record(zone: &Name, ttl: u32, serial: u32) -> Record {
    let soa = SOA::new(
        ns_name(zone),
        child(zone, "hostmaster"),
        serial,
        7200,
        1800,
        86400,
        ttl,
    );
    Record::from_rdata(zone.clone(), ttl, RData::SOA(soa))
}

/// The name server named in the SOA and NS records.
pub(super) fn ns_name(zone: &Name) -> Name {
    child(zone, "ns.dns")
}

pub(super) fn child(zone: &Name, labels: &str) -> Name {
    records_name(zone, labels).expect("fixed labels are valid DNS")
}

/// `labels.zone`, lower-cased, or None when the labels are not valid DNS.
pub(super) fn records_name(zone: &Name, labels: &str) -> Option<Name> {
    let name = Name::from_ascii(labels).ok()?.append_domain(zone).ok()?;
    Some(name.to_lowercase())
}
