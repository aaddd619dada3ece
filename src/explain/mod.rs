//! `explain`: why a DNS name answers what it does. The answer is the one the
//! server gives (`crate::dns::answer`, on the same index); around it, the
//! import the name belongs to and, for every cluster that says anything
//! about the service, whether it exports it, its export conditions, the
//! addresses it contributes and each endpoint left out, with the reason.

pub(crate) mod shared;
pub(crate) mod text;

use std::collections::HashSet;
use std::net::IpAddr;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::{DNSClass, LowerName, Name, RecordType};
use serde::Serialize;

use crate::dns::answer;
use crate::engine::Engine;
use crate::index::{Index, Lookup, Owner, ServiceName};
use crate::model::conditions::{CONFLICT, Condition, VALID};
use crate::model::import::{ExportStatus, Import};
use crate::model::{ImportType, IpFamily, ServiceKey};

/// Everything `explain` reports about one question.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    /// The name asked, fully qualified.
    pub name: String,
    /// The query type asked.
    #[serde(rename = "type")]
    pub rtype: String,
    /// What the name is in the zone (`service`, `srv`, `pod`, ...).
    pub name_kind: &'static str,
    /// The service the name is under, if it has that shape.
    pub service: Option<ServiceRef>,
    /// The service's import, while one exists.
    pub import: Option<ImportSummary>,
    /// Every cluster with an export, Service or EndpointSlice of the service.
    pub clusters: Vec<ClusterExplanation>,
    /// The response the server gives.
    pub answer: AnswerSummary,
}

/// `<namespace>/<name>`.
#[derive(Debug, Serialize)]
pub struct ServiceRef {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

/// The parts of an import that decide DNS answers.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ImportSummary {
    /// `ClusterSetIP` or `Headless`.
    #[serde(rename = "type")]
    pub type_: ImportType,
    /// The families every contributing export shares (clusterset-wide).
    pub ip_families: Vec<IpFamily>,
    /// Those the local cluster supports: DNS answers only these.
    pub local_families: Vec<IpFamily>,
    /// Clusterset VIPs.
    pub vips: Vec<IpAddr>,
    /// What the service name resolves to (ClusterSetIP).
    pub addresses: Vec<IpAddr>,
    /// Ports, `name:port/protocol`.
    pub ports: Vec<String>,
    /// The import's `Ready` condition.
    pub ready: Condition,
}

/// What one cluster contributes.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterExplanation {
    /// The cluster id.
    pub cluster: String,
    /// Whether it has a ServiceExport.
    pub exported: bool,
    /// Whether it has the Service.
    pub has_service: bool,
    /// Whether it takes part in the import.
    pub in_import: bool,
    /// Why it does not, when it does not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub left_out: Option<String>,
    /// Its export's conditions.
    pub conditions: Vec<Condition>,
    /// The addresses it puts in DNS answers for the service name.
    pub contributes: Vec<IpAddr>,
    /// Its endpoints, in slice order.
    pub endpoints: Vec<EndpointExplanation>,
}

/// One endpoint of a cluster's EndpointSlices.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointExplanation {
    /// Its address.
    pub address: IpAddr,
    /// Its hostname (per-pod names of headless imports).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// Whether it is ready.
    pub ready: bool,
    /// Whether DNS answers with it (headless imports) or it backs the import.
    pub used: bool,
    /// Why not, when not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The response: code, flags and records as `dig` would print them.
#[derive(Debug, Serialize)]
pub struct AnswerSummary {
    /// RCODE, as `dig` spells it.
    pub rcode: String,
    /// Whether the answer is authoritative (AA).
    pub authoritative: bool,
    /// The answer section.
    pub answers: Vec<String>,
    /// The authority section (the SOA of negative answers).
    pub authority: Vec<String>,
    /// How long resolvers may cache it: the smallest TTL of the answers, or
    /// of the SOA for a negative answer (RFC 2308 §5).
    pub ttl: Option<u32>,
}

/// Explains `name`/`rtype` (class IN) from `index`, as served, and the
/// inputs of `engine` the index was built from.
pub(crate) fn explain(
    engine: &Engine,
    index: &Index,
    name: &Name,
    rtype: RecordType,
) -> Explanation {
    let lower = LowerName::new(name);
    let response = answer(index, &lower, rtype, DNSClass::IN);
    let key = service_key(index.zone(), name);
    let import = key
        .as_ref()
        .and_then(|k| engine.get(k))
        .and_then(|a| a.import.clone());
    let clusters = key
        .as_ref()
        .map(|k| clusters(engine, k, import.as_deref()))
        .unwrap_or_default();
    Explanation {
        name: name.to_string(),
        rtype: rtype.to_string(),
        name_kind: name_kind(&index.lookup(&lower)),
        service: key.map(|k| ServiceRef {
            namespace: k.namespace().to_string(),
            name: k.name().to_string(),
        }),
        import: import.as_deref().map(summary),
        clusters,
        answer: AnswerSummary {
            rcode: rcode_text(response.code),
            authoritative: response.authoritative,
            ttl: response
                .answers
                .iter()
                .chain(&response.authority)
                .map(|r| r.ttl)
                .min(),
            answers: response.answers.iter().map(ToString::to_string).collect(),
            authority: response.authority.iter().map(ToString::to_string).collect(),
        },
    }
}

/// The service a name is under: `[...].<service>.<namespace>.svc.<zone>`.
fn service_key(zone: &Name, name: &Name) -> Option<ServiceKey> {
    let zone = zone.to_lowercase();
    let name = name.to_lowercase();
    if !zone.zone_of(&name) {
        return None;
    }
    let below = usize::from(name.num_labels() - zone.num_labels());
    let labels: Vec<String> = name
        .iter()
        .take(below)
        .map(|l| String::from_utf8_lossy(l).into_owned())
        .collect();
    match labels.as_slice() {
        [.., service, namespace, svc] if svc == "svc" => Some(ServiceKey::new(namespace, service)),
        _ => None,
    }
}

fn name_kind(lookup: &Lookup) -> &'static str {
    match lookup {
        Lookup::NotInZone => "outside the zone",
        Lookup::NotReady => "unknown until the first sync",
        Lookup::NxDomain => "no such name",
        Lookup::Found(Owner::Apex) => "zone apex",
        Lookup::Found(Owner::DnsVersion) => "schema version",
        Lookup::Found(Owner::Empty) => "empty non-terminal",
        Lookup::Found(Owner::NameServer) => "the zone's name server (NS target)",
        Lookup::Found(Owner::Reverse(_)) => "reverse-zone name (PTR)",
        Lookup::Found(Owner::Service(_, which)) => match which {
            ServiceName::Service => "service",
            ServiceName::Srv(_) => "SRV of a port",
            ServiceName::Pod(..) => "pod (headless endpoint)",
            ServiceName::Cluster(_) => "cluster-targeted service",
            ServiceName::Empty => "empty non-terminal (names exist below it)",
        },
    }
}

fn summary(import: &Import) -> ImportSummary {
    ImportSummary {
        type_: import.type_,
        ip_families: import.ip_families.clone(),
        local_families: import.local_families.clone(),
        vips: import.vips.to_vec(),
        addresses: import.addresses.to_vec(),
        ports: import.ports.iter().map(ToString::to_string).collect(),
        ready: (*import.ready).clone(),
    }
}

/// Every cluster's part, from the engine's inputs and the import it made.
fn clusters(engine: &Engine, key: &ServiceKey, import: Option<&Import>) -> Vec<ClusterExplanation> {
    let Some(inputs) = engine.inputs(key) else {
        return Vec::new();
    };
    let statuses: &[ExportStatus] = engine.get(key).map_or(&[], |a| &a.exports);
    inputs
        .iter()
        .map(|(cluster, input)| {
            let status = statuses.iter().find(|s| &s.cluster == cluster);
            let part = import.and_then(|i| i.clusters.iter().find(|c| &c.cluster == cluster));
            let left_out = match (part, &input.export, status) {
                (Some(_), ..) => None,
                (None, Some(_), _) if !engine.is_live(cluster) => Some(
                    "cluster not live: its heartbeat on the broker is older than --cluster-timeout"
                        .to_owned(),
                ),
                (None, None, _) => Some("no ServiceExport in this cluster".to_owned()),
                (None, Some(_), Some(status)) => Some(why_left_out(status)),
                (None, Some(_), None) => Some("not reconciled".to_owned()),
            };
            let mut seen = HashSet::new();
            let endpoints = input
                .slices
                .values()
                .flat_map(|s| &s.endpoints)
                .map(|e| {
                    let used =
                        part.is_some_and(|p| p.endpoints.contains(e)) && seen.insert(e.address);
                    let reason = endpoint_reason(e, used, import, left_out.as_deref(), &seen)
                        .or_else(|| not_close(import, cluster).filter(|_| used));
                    EndpointExplanation {
                        address: e.address,
                        hostname: e.hostname.as_deref().map(str::to_owned),
                        ready: e.ready,
                        used: reason.is_none(),
                        reason,
                    }
                })
                .collect();
            ClusterExplanation {
                cluster: cluster.to_string(),
                exported: input.export.is_some(),
                has_service: input.service.is_some(),
                in_import: part.is_some(),
                conditions: status.map(|s| s.conditions.to_vec()).unwrap_or_default(),
                contributes: match (import, part) {
                    (Some(import), Some(part)) => contributed(import, part),
                    _ => Vec::new(),
                },
                left_out,
                endpoints,
            }
        })
        .collect()
}

/// Why a cluster with an export is not in the import: its `Valid` or `Conflict` condition.
fn why_left_out(status: &ExportStatus) -> String {
    let invalid = status.condition(VALID).filter(|c| !c.status);
    let conflict = status.condition(CONFLICT).filter(|c| c.status);
    match invalid.or(conflict) {
        Some(c) => format!("{} {}: {}", c.type_, c.reason, c.message),
        None => "its export is not part of the import".to_owned(),
    }
}

/// Why an endpoint is not used (None: used and served).
fn endpoint_reason(
    endpoint: &crate::model::Endpoint,
    in_import: bool,
    import: Option<&Import>,
    cluster_left_out: Option<&str>,
    seen: &HashSet<IpAddr>,
) -> Option<String> {
    let family = IpFamily::of(&endpoint.address);
    if let Some(why) = cluster_left_out {
        return Some(format!("cluster left out: {why}"));
    }
    let import = import?;
    if in_import {
        return (!import.local_families.contains(&family)).then(|| {
            format!(
                "{} is not served: the local cluster supports {} only (--ip-families)",
                family.as_str(),
                families(&import.local_families)
            )
        });
    }
    Some(if !endpoint.ready {
        "not ready".to_owned()
    } else if !import.ip_families.contains(&family) {
        format!(
            "{} is not among the import's IP families ({})",
            family.as_str(),
            families(&import.ip_families)
        )
    } else if seen.contains(&endpoint.address) {
        "duplicate of an address already listed".to_owned()
    } else {
        "not in the import".to_owned()
    })
}

/// Why a cluster's endpoints, used for per-pod names, are not in the
/// service name's answers: `trafficDistribution: PreferClose` chose the
/// local cluster's (`Import::close`).
fn not_close(import: Option<&Import>, cluster: &str) -> Option<String> {
    let import = import?;
    let close = &import.clusters.get(import.close?)?.cluster;
    (**close != *cluster).then(|| {
        format!(
            "trafficDistribution PreferClose: the service name answers with the local \
             cluster {close}'s ready endpoints only (its per-pod name still answers)"
        )
    })
}

/// The addresses a cluster puts in answers for the service name itself.
fn contributed(import: &Import, part: &crate::model::import::ImportCluster) -> Vec<IpAddr> {
    let served = |ip: &IpAddr| import.serves(ip);
    if not_close(Some(import), &part.cluster).is_some() {
        return Vec::new();
    }
    match import.type_ {
        ImportType::Headless => part
            .endpoints
            .iter()
            .map(|e| e.address)
            .filter(served)
            .collect(),
        // With VIPs the name answers the VIPs, which every cluster backs.
        ImportType::ClusterSetIP => part
            .cluster_ips
            .iter()
            .copied()
            .filter(|ip| import.addresses.contains(ip))
            .collect(),
    }
}

fn families(list: &[IpFamily]) -> String {
    if list.is_empty() {
        return "none".to_owned();
    }
    list.iter()
        .map(|f| f.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The response code as `dig` prints it.
fn rcode_text(code: ResponseCode) -> String {
    match code {
        ResponseCode::NoError => "NOERROR".into(),
        ResponseCode::NXDomain => "NXDOMAIN".into(),
        ResponseCode::ServFail => "SERVFAIL".into(),
        ResponseCode::Refused => "REFUSED".into(),
        other => other.to_str().to_uppercase(),
    }
}

/// Parses the `NAME [TYPE]` of a request: the name made fully qualified,
/// the type (default A) by its mnemonic, any case.
pub(crate) fn question(name: &str, rtype: Option<&str>) -> Result<(Name, RecordType), String> {
    let mut parsed = Name::from_ascii(name).map_err(|e| format!("invalid name {name:?}: {e}"))?;
    parsed.set_fqdn(true);
    let rtype = match rtype {
        None => RecordType::A,
        Some(t) => t
            .to_uppercase()
            .parse()
            .map_err(|_| format!("unknown record type {t:?}: expected A, AAAA, SRV, ..."))?,
    };
    Ok((parsed, rtype))
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;
    use std::sync::Arc;

    use super::*;
    use crate::engine::EngineSettings;
    use crate::engine::aggregate::tests::{export, service, slice};
    use crate::model::{Change, Object};

    /// A cluster whose heartbeat timed out is named as such, and none of its
    /// endpoints is used (issue: `explain` names dead clusters).
    #[test]
    fn a_dead_cluster_is_named_with_its_reason() {
        let key = ServiceKey::new("shop", "db");
        let mut headless = service(&[], &[("pg", 5432)]);
        Arc::make_mut(&mut headless.spec).kind = crate::model::ServiceKind::Headless;
        Arc::make_mut(&mut headless.spec).ip_families = vec![IpFamily::IPv4];
        let mut engine = Engine::new(EngineSettings::default());
        let mut changes = Vec::new();
        for (cluster, ip, age) in [("east", "10.1.0.1", 1), ("west", "10.2.0.1", 2)] {
            let upsert = |object| Change::Upsert(cluster.into(), key.clone(), object);
            changes.push(upsert(Object::Service(Arc::new(headless.clone()))));
            changes.push(upsert(Object::Export(export(age).into())));
            changes.push(upsert(Object::Slice(
                "s".into(),
                slice(&[(ip, None, true)]),
            )));
        }
        changes.push(Change::Live("west".into(), false));
        let updates = engine.apply(changes);
        let index = Index::new(Name::from_str("clusterset.local.").unwrap(), 5, false, 1);
        for (key, import) in updates {
            index.update(&key, import);
        }
        index.commit();
        index.set_synced();
        let name = Name::from_str("db.shop.svc.clusterset.local.").unwrap();
        let explanation = explain(&engine, &index, &name, RecordType::A);
        let west = explanation
            .clusters
            .iter()
            .find(|c| c.cluster == "west")
            .expect("west is explained");
        assert!(!west.in_import);
        assert!(
            west.left_out
                .as_deref()
                .is_some_and(|w| w.starts_with("cluster not live")),
            "{west:?}"
        );
        assert!(west.endpoints.iter().all(|e| !e.used), "{west:?}");
        let east = explanation
            .clusters
            .iter()
            .find(|c| c.cluster == "east")
            .unwrap();
        assert!(
            east.in_import && east.endpoints.iter().all(|e| e.used),
            "{east:?}"
        );
    }
}
