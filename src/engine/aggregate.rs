//! Merges the exports of one `<namespace>/<name>` across clusters into an
//! import and the conditions of every export (KEP-1645; ARCHITECTURE.md, "Where each rule is decided"). Pure: no I/O, no
//! clock, no VIPs (those are the allocator's).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::net::IpAddr;
use std::sync::{Arc, LazyLock};

use litemap::LiteMap;

use crate::model::conditions::{CONFLICT, Condition, ConflictReason, READY, VALID, reason};
use crate::model::import::{Aggregate, Endpoints, ExportStatus, Import, ImportCluster};
use crate::model::port::ServicePort;
use crate::model::{
    ClusterId, Endpoint, ExportAge, ExportInfo, ImportType, IpFamily, Ips, ServiceInfo,
    ServiceKind, SliceInfo,
};

/// Every cluster's inputs for one service, by cluster id (a sorted vector:
/// there are a few clusters per service, and millions of services).
pub type PerCluster = LiteMap<ClusterId, ClusterInputs>;

/// Everything one cluster says about one service.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClusterInputs {
    /// Its ServiceExport, if exported.
    pub export: Option<Arc<ExportInfo>>,
    /// Its Service, if present.
    pub service: Option<Arc<ServiceInfo>>,
    /// Its EndpointSlices by name.
    pub slices: LiteMap<Box<str>, Arc<SliceInfo>>,
    /// When the broker first saw its export (Kubernetes mode), if it has.
    pub seen: Option<i64>,
    /// The ClusterIPs of the local cluster's derived Service, if it has one
    /// (Kubernetes mode with derived Services): what the name answers.
    pub derived: Option<Ips>,
}

impl ClusterInputs {
    /// Whether nothing is left (the entry can be dropped).
    pub fn is_empty(&self) -> bool {
        self.export.is_none()
            && self.service.is_none()
            && self.slices.is_empty()
            && self.seen.is_none()
            && self.derived.is_none()
    }

    /// The age its export has in conflict resolution: what its ServiceExport
    /// says, but never older than the broker first saw it, so that no
    /// cluster wins a conflict by declaring an old export (ARCHITECTURE.md,
    /// "Trust between clusters": the oldest export).
    fn age(&self, export: &ExportInfo) -> ExportAge {
        let floor = self.seen.unwrap_or(i64::MIN);
        match export.age.created < floor {
            true => ExportAge {
                created: floor,
                seq: 0,
            },
            false => export.age,
        }
    }
}

struct Candidate<'a> {
    cluster: &'a ClusterId,
    /// Its export's age in conflict resolution ([`ClusterInputs::age`]).
    age: ExportAge,
    export: &'a ExportInfo,
    service: &'a ServiceInfo,
    slices: &'a LiteMap<Box<str>, Arc<SliceInfo>>,
}

/// The settings an aggregation depends on.
#[derive(Clone, Copy, Debug)]
pub struct Policy<'a> {
    /// The families the local cluster supports.
    pub local_families: &'a [IpFamily],
    /// Whether exports without the VIP annotation get clusterset VIPs.
    pub clusterset_ip: bool,
    /// Whether the service's namespace is protected: every export of it is
    /// refused (see `model/trust.rs`).
    pub namespace_protected: bool,
}

/// Aggregates one service's inputs.
pub(crate) fn aggregate(inputs: &PerCluster, policy: &Policy<'_>) -> Aggregate {
    let local_families = policy.local_families;
    let mut exports = Vec::with_capacity(inputs.len());
    let mut valid = Vec::new();
    for (cluster, input) in inputs {
        let Some(export) = &input.export else {
            continue;
        };
        if policy.namespace_protected {
            exports.push(invalid(
                cluster,
                reason::NAMESPACE_PROTECTED,
                reason::FAILED,
                "Services of a protected namespace cannot be exported",
            ));
            continue;
        }
        match &input.service {
            None => exports.push(invalid(
                cluster,
                reason::NO_SERVICE,
                reason::PENDING,
                "no Service with this namespace and name",
            )),
            Some(s) if s.kind == ServiceKind::ExternalName => exports.push(invalid(
                cluster,
                reason::INVALID_SERVICE_TYPE,
                reason::FAILED,
                "ExternalName Services cannot be exported",
            )),
            Some(service) => valid.push(Candidate {
                cluster,
                age: input.age(export),
                export,
                service,
                slices: &input.slices,
            }),
        }
    }
    valid.sort_by(|a, b| (a.age, a.cluster).cmp(&(b.age, b.cluster)));
    let Some(oldest) = valid.first() else {
        return Aggregate {
            import: None,
            exports,
        };
    };

    let (families, left_out) = intersect_families(&valid);
    let ports = union_ports(valid.iter().filter(|c| !left_out.contains(c.cluster)));
    let type_ = ImportType::of(oldest.service.kind);
    let differences: Vec<Vec<Difference>> = valid
        .iter()
        .map(|c| {
            let left_out = left_out.contains(c.cluster);
            differences(c, oldest, &families, left_out, type_, policy.clusterset_ip)
        })
        .collect();
    let conflict = conflict(&valid, &differences);
    for candidate in &valid {
        exports.push(export_status(
            candidate,
            &families,
            left_out.contains(candidate.cluster),
            type_,
            &conflict,
        ));
    }
    exports.sort_by(|a, b| a.cluster.cmp(&b.cluster));

    let local_families: Vec<IpFamily> = families
        .iter()
        .copied()
        .filter(|f| local_families.contains(f))
        .collect();
    static READY_TRUE: LazyLock<Arc<Condition>> =
        LazyLock::new(|| Arc::new(Condition::new(READY, true, reason::READY, "")));
    let ready = if local_families.is_empty() {
        Arc::new(Condition::new(
            READY,
            false,
            reason::IP_FAMILY_NOT_SUPPORTED,
            format!(
                "the local cluster supports none of the import's IP families ({})",
                join(&families)
            ),
        ))
    } else {
        READY_TRUE.clone()
    };
    let clusters = valid
        .iter()
        .filter(|c| !left_out.contains(c.cluster))
        .map(|c| import_cluster(c, &families, &ports))
        .collect();
    let (svc, export) = (oldest.service, oldest.export);
    let import = Import {
        type_,
        ports,
        ip_families: families,
        local_families,
        clusterset_ip: export.clusterset_ip.unwrap_or(policy.clusterset_ip),
        vips: Ips::new(),
        addresses: Ips::new(),
        service: svc.spec.clone(),
        exported: export.exported.clone(),
        clusters,
        close: None,
        ready,
    };
    Aggregate {
        import: Some(Arc::new(import)),
        exports,
    }
}

fn invalid(
    cluster: &ClusterId,
    reason: &'static str,
    ready_reason: &'static str,
    message: &'static str,
) -> ExportStatus {
    ExportStatus {
        cluster: cluster.clone(),
        conditions: Arc::new([
            Condition::new(VALID, false, reason, message),
            Condition::new(READY, false, ready_reason, message),
        ]),
        conflicts: Box::default(),
    }
}

/// Running intersection from the oldest export; clusters sharing nothing with
/// it are left out. Keeps the oldest export's family order.
fn intersect_families(valid: &[Candidate<'_>]) -> (Vec<IpFamily>, BTreeSet<ClusterId>) {
    let mut families = valid[0].service.ip_families.clone();
    let mut left_out = BTreeSet::new();
    for candidate in &valid[1..] {
        let common: Vec<IpFamily> = families
            .iter()
            .copied()
            .filter(|f| candidate.service.ip_families.contains(f))
            .collect();
        if common.is_empty() {
            left_out.insert(candidate.cluster.clone());
        } else {
            families = common;
        }
    }
    (families, left_out)
}

/// Union of ports, oldest first: a later port is dropped when its name or its
/// protocol+port is already taken.
fn union_ports<'a>(mut candidates: impl Iterator<Item = &'a Candidate<'a>>) -> Arc<[ServicePort]> {
    let Some(oldest) = candidates.next() else {
        return Arc::new([]);
    };
    let oldest = &oldest.service.ports;
    // A copy only once another export adds a port (nearly always none does).
    let mut added: Option<Vec<ServicePort>> = None;
    for candidate in candidates.filter(|c| !Arc::ptr_eq(&c.service.ports, oldest)) {
        for port in candidate.service.ports.iter() {
            let taken = added.as_deref().unwrap_or(oldest).iter().any(|p| {
                (p.name.is_some() && p.name == port.name)
                    || (p.protocol == port.protocol && p.port == port.port)
            });
            if !taken {
                added
                    .get_or_insert_with(|| oldest.to_vec())
                    .push(port.clone());
            }
        }
    }
    added.map_or_else(|| oldest.clone(), Into::into)
}

/// One way an export differs from the oldest: the reason, and what the
/// import uses instead (the oldest export's value).
type Difference = (ConflictReason, String);

/// How `candidate` differs from the oldest export.
fn differences(
    candidate: &Candidate<'_>,
    oldest: &Candidate<'_>,
    families: &[IpFamily],
    left_out: bool,
    type_: ImportType,
    clusterset_ip: bool,
) -> Vec<Difference> {
    let (mine, theirs) = (candidate.service, oldest.service);
    let vips = |e: &ExportInfo| e.clusterset_ip.unwrap_or(clusterset_ip);
    let checks: [(ConflictReason, bool, &dyn Fn() -> String); 10] = [
        (
            ConflictReason::PortConflict,
            same_ports(&mine.ports, &theirs.ports),
            &|| ports_text(&theirs.ports),
        ),
        (
            ConflictReason::TypeConflict,
            mine.kind == theirs.kind,
            &|| format!("type {}", type_.as_str()),
        ),
        (
            ConflictReason::SessionAffinityConflict,
            mine.session_affinity == theirs.session_affinity,
            &|| format!("sessionAffinity {}", theirs.session_affinity),
        ),
        (
            ConflictReason::SessionAffinityConfigConflict,
            mine.session_affinity_config == theirs.session_affinity_config,
            &|| "sessionAffinityConfig".into(),
        ),
        (
            ConflictReason::LabelsConflict,
            candidate.export.exported.labels == oldest.export.exported.labels,
            &|| "exportedLabels".into(),
        ),
        (
            ConflictReason::AnnotationsConflict,
            candidate.export.exported.annotations == oldest.export.exported.annotations,
            &|| "exportedAnnotations".into(),
        ),
        (
            ConflictReason::InternalTrafficPolicyConflict,
            mine.internal_traffic_policy == theirs.internal_traffic_policy,
            &|| format!("internalTrafficPolicy {}", theirs.internal_traffic_policy),
        ),
        (
            ConflictReason::TrafficDistributionConflict,
            mine.traffic_distribution == theirs.traffic_distribution,
            &|| {
                format!(
                    "trafficDistribution {}",
                    theirs.traffic_distribution.as_deref().unwrap_or("unset")
                )
            },
        ),
        (ConflictReason::IPFamilyConflict, !left_out, &|| {
            format!("ipFamilies {}", join(families))
        }),
        (
            ConflictReason::ClusterSetIPConflict,
            vips(candidate.export) == vips(oldest.export),
            &|| {
                format!(
                    "{} {}",
                    crate::model::ANNOTATION_CLUSTERSET_IP,
                    vips(oldest.export)
                )
            },
        ),
    ];
    checks
        .into_iter()
        .filter(|(_, same, _)| !same)
        .map(|(reason, _, winner)| (reason, winner()))
        .collect()
}

/// A service's `Conflict` condition, set on **all** its exports, the oldest
/// included (KEP-1645, "Constraints and Conflict Resolution"): every reason
/// any export raises, what the import uses, and which clusters differ.
/// `differences` are per `valid` candidate, oldest first.
fn conflict(valid: &[Candidate<'_>], differences: &[Vec<Difference>]) -> ServiceConflict {
    static NONE: LazyLock<Condition> =
        LazyLock::new(|| Condition::new(CONFLICT, false, reason::NO_CONFLICTS, ""));
    let mut winners: BTreeMap<ConflictReason, &str> = BTreeMap::new();
    let mut differing = Vec::new();
    for (candidate, found) in valid.iter().zip(differences).filter(|(_, d)| !d.is_empty()) {
        for (reason, winner) in found {
            winners.insert(*reason, winner);
        }
        let reasons: Vec<String> = found.iter().map(|(r, _)| r.to_string()).collect();
        differing.push(format!("{} ({})", candidate.cluster, reasons.join(",")));
    }
    if winners.is_empty() {
        return ServiceConflict {
            condition: NONE.clone(),
            reasons: Box::default(),
        };
    }
    let reasons: Box<[ConflictReason]> = winners.keys().copied().collect();
    let reason: Vec<String> = reasons.iter().map(ToString::to_string).collect();
    let used: Vec<&str> = winners.values().copied().collect();
    let message = format!(
        "the import uses {} from the oldest export, in cluster {}; differing: {}",
        used.join(", "),
        valid[0].cluster,
        differing.join(", ")
    );
    ServiceConflict {
        condition: Condition::new(CONFLICT, true, reason.join(","), message),
        reasons,
    }
}

/// The `Conflict` condition every export of one service carries.
struct ServiceConflict {
    condition: Condition,
    reasons: Box<[ConflictReason]>,
}

fn export_status(
    candidate: &Candidate<'_>,
    families: &[IpFamily],
    left_out: bool,
    type_: ImportType,
    conflict: &ServiceConflict,
) -> ExportStatus {
    let valid = Condition::new(VALID, true, reason::VALID, "");
    let ready = if left_out {
        Condition::new(
            READY,
            false,
            reason::FAILED,
            format!(
                "IP families {} share none with the clusterset's {}",
                join(&candidate.service.ip_families),
                join(families)
            ),
        )
    } else {
        Condition::new(READY, true, reason::EXPORTED, exported_as(type_))
    };
    ExportStatus {
        cluster: candidate.cluster.clone(),
        conditions: shared_conditions([valid, ready, conflict.condition.clone()]),
        conflicts: conflict.reasons.clone(),
    }
}

/// The `Ready` message of an export in effect.
fn exported_as(type_: ImportType) -> &'static str {
    match type_ {
        ImportType::ClusterSetIP => "exported as ClusterSetIP",
        ImportType::Headless => "exported as Headless",
    }
}

/// `conditions` as an `Arc`, the one every export in effect without
/// conflicts shares when they are that export's usual ones.
fn shared_conditions(conditions: [Condition; 3]) -> Arc<[Condition]> {
    static USUAL: LazyLock<[Arc<[Condition]>; 2]> = LazyLock::new(|| {
        [ImportType::ClusterSetIP, ImportType::Headless].map(|type_| {
            Arc::new([
                Condition::new(VALID, true, reason::VALID, ""),
                Condition::new(READY, true, reason::EXPORTED, exported_as(type_)),
                Condition::new(CONFLICT, false, reason::NO_CONFLICTS, ""),
            ]) as Arc<[Condition]>
        })
    });
    USUAL
        .iter()
        .find(|usual| ***usual == conditions)
        .cloned()
        .unwrap_or_else(|| Arc::new(conditions))
}

fn same_ports(a: &[ServicePort], b: &[ServicePort]) -> bool {
    a.len() == b.len() && a.iter().all(|p| b.contains(p))
}

fn ports_text(ports: &[ServicePort]) -> String {
    let parts: Vec<String> = ports.iter().map(ToString::to_string).collect();
    format!("ports [{}]", parts.join(" "))
}

fn join(families: &[IpFamily]) -> String {
    let names: Vec<&str> = families.iter().map(|f| f.as_str()).collect();
    format!("[{}]", names.join(","))
}

fn import_cluster(
    candidate: &Candidate<'_>,
    families: &[IpFamily],
    ports: &Arc<[ServicePort]>,
) -> ImportCluster {
    let in_families = |ip: &IpAddr| families.contains(&IpFamily::of(ip));
    let qualifying = |seen: &mut HashSet<IpAddr>, e: &Endpoint| {
        e.ready && in_families(&e.address) && seen.insert(e.address)
    };
    let only = candidate
        .slices
        .values()
        .next()
        .filter(|_| candidate.slices.len() == 1);
    let shareable = |slice: &SliceInfo| {
        let mut seen = HashSet::new();
        slice.endpoints.iter().all(|e| qualifying(&mut seen, e))
    };
    let endpoints = match only {
        Some(only) if shareable(only) => Endpoints::Shared(only.clone()),
        _ => {
            let mut seen = HashSet::new();
            let mut picked: Vec<Endpoint> = candidate
                .slices
                .values()
                .flat_map(|s| &s.endpoints)
                .filter(|e| qualifying(&mut seen, e))
                .cloned()
                .collect();
            picked.shrink_to_fit();
            Endpoints::Picked(picked)
        }
    };
    ImportCluster {
        cluster: candidate.cluster.clone(),
        cluster_ips: candidate
            .service
            .cluster_ips
            .iter()
            .copied()
            .filter(in_families)
            .collect(),
        endpoints,
        ports: crate::model::port::backed_ports(ports, &candidate.service.ports),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::{ExportAge, IpFamily::*};

    /// A ClusterIP service with one named port, families and cluster IPs derived from `ips`.
    pub(crate) fn service(ips: &[&str], ports: &[(&str, i32)]) -> ServiceInfo {
        let cluster_ips: Ips = ips.iter().map(|s| s.parse().unwrap()).collect();
        let spec = crate::model::ServiceSpec {
            kind: ServiceKind::ClusterIp,
            ports: ports
                .iter()
                .map(|(name, port)| ServicePort {
                    name: Some((*name).into()),
                    protocol: Some("TCP".into()),
                    app_protocol: None,
                    port: *port,
                })
                .collect(),
            ip_families: cluster_ips.iter().map(IpFamily::of).collect(),
            session_affinity: "None".into(),
            session_affinity_config: None,
            internal_traffic_policy: "Cluster".into(),
            traffic_distribution: None,
        };
        ServiceInfo {
            cluster_ips,
            spec: spec.shared(),
        }
    }

    pub(crate) fn export(created: i64) -> ExportInfo {
        ExportInfo {
            age: ExportAge { created, seq: 0 },
            exported: Default::default(),
            clusterset_ip: None,
            pod_ips: None,
        }
    }

    /// Aggregates with VIPs on by default.
    fn aggregate(inputs: &PerCluster, local_families: &[IpFamily]) -> Aggregate {
        super::aggregate(
            inputs,
            &Policy {
                local_families,
                clusterset_ip: true,
                namespace_protected: false,
            },
        )
    }

    pub(crate) fn slice(endpoints: &[(&str, Option<&str>, bool)]) -> Arc<SliceInfo> {
        Arc::new(SliceInfo {
            endpoints: endpoints
                .iter()
                .map(|(ip, host, ready)| Endpoint {
                    address: ip.parse().unwrap(),
                    hostname: host.map(Into::into),
                    ready: *ready,
                })
                .collect(),
            ports: Vec::new(),
        })
    }

    fn inputs(list: Vec<(&str, Option<ExportInfo>, Option<ServiceInfo>)>) -> PerCluster {
        list.into_iter()
            .map(|(cluster, export, service)| {
                (
                    cluster.into(),
                    ClusterInputs {
                        export: export.map(Arc::new),
                        service: service.map(Arc::new),
                        ..ClusterInputs::default()
                    },
                )
            })
            .collect()
    }

    fn status<'a>(a: &'a Aggregate, cluster: &str, type_: &str) -> &'a Condition {
        a.exports
            .iter()
            .find(|e| e.cluster.as_ref() == cluster)
            .and_then(|e| e.condition(type_))
            .unwrap_or_else(|| panic!("no {type_} condition for {cluster}"))
    }

    const BOTH: &[IpFamily] = &[IPv4, IPv6];

    #[test]
    fn invalid_exports_make_no_import() {
        let mut external = service(&[], &[]);
        Arc::make_mut(&mut external.spec).kind = ServiceKind::ExternalName;
        let a = aggregate(
            &inputs(vec![
                ("a", Some(export(1)), None),
                ("b", Some(export(2)), Some(external)),
                ("c", None, Some(service(&["10.0.0.1"], &[]))),
            ]),
            BOTH,
        );
        assert!(a.import.is_none());
        assert_eq!(a.exports.len(), 2, "c has no export, so no status");
        let valid_a = status(&a, "a", VALID);
        assert_eq!(
            (valid_a.status, valid_a.reason.as_ref()),
            (false, "NoService")
        );
        assert_eq!(status(&a, "a", READY).reason, "Pending");
        let valid_b = status(&a, "b", VALID);
        assert_eq!(
            (valid_b.status, valid_b.reason.as_ref()),
            (false, "InvalidServiceType")
        );
        assert!(a.exports.iter().all(|e| e.condition(CONFLICT).is_none()));
    }

    #[test]
    fn oldest_export_wins_type_and_newer_gets_type_conflict() {
        let mut headless = service(&[], &[("http", 80)]);
        Arc::make_mut(&mut headless.spec).kind = ServiceKind::Headless;
        Arc::make_mut(&mut headless.spec).ip_families = vec![IPv4];
        let a = aggregate(
            &inputs(vec![
                (
                    "a",
                    Some(export(20)),
                    Some(service(&["10.0.0.1"], &[("http", 80)])),
                ),
                ("b", Some(export(10)), Some(headless)),
            ]),
            BOTH,
        );
        let import = a.import.clone().unwrap();
        assert_eq!(import.type_, ImportType::Headless);
        assert_eq!(
            import
                .clusters
                .iter()
                .map(|c| c.cluster.as_ref())
                .collect::<Vec<_>>(),
            ["b", "a"]
        );
        let conflict = status(&a, "a", CONFLICT);
        assert_eq!(
            (conflict.status, conflict.reason.as_ref()),
            (true, "TypeConflict")
        );
        assert!(
            conflict.message.contains("in cluster b")
                && conflict.message.contains("a (TypeConflict)"),
            "{}",
            conflict.message
        );
        // KEP-1645: the condition is on all exports, the oldest (b) included.
        assert_eq!(status(&a, "b", CONFLICT), conflict);
        assert_eq!(status(&a, "a", READY).reason, "Exported");
    }

    /// KEP-1645 "Constraints and Conflict Resolution": a Conflict condition is
    /// set on all ServiceExports of a conflicted service, the oldest included
    /// (upstream conformance checks the oldest first), with every reason and
    /// the clusters that differ; the import keeps the oldest's values.
    #[test]
    fn conflict_is_reported_on_every_export_oldest_first() {
        let mut b_export = export(2);
        Arc::make_mut(&mut b_export.exported)
            .labels
            .insert("dummy-label2".into(), "true".into());
        let mut c = service(&["10.0.0.3"], &[("http", 80)]);
        Arc::make_mut(&mut c.spec).kind = ServiceKind::Headless;
        let a = aggregate(
            &inputs(vec![
                (
                    "a",
                    Some(export(1)),
                    Some(service(&["10.0.0.1"], &[("http", 80)])),
                ),
                (
                    "b",
                    Some(b_export),
                    Some(service(&["10.0.0.2"], &[("http", 81)])),
                ),
                ("c", Some(export(3)), Some(c)),
                (
                    "d",
                    Some(export(4)),
                    Some(service(&["10.0.0.4"], &[("http", 80)])),
                ),
            ]),
            BOTH,
        );
        for cluster in ["a", "b", "c", "d"] {
            let conflict = status(&a, cluster, CONFLICT);
            assert_eq!(
                (conflict.status, conflict.reason.as_ref()),
                (true, "PortConflict,TypeConflict,LabelsConflict"),
                "{cluster}"
            );
            assert_eq!(
                conflict.message,
                "the import uses ports [http:80/TCP], type ClusterSetIP, exportedLabels \
                 from the oldest export, in cluster a; \
                 differing: b (PortConflict,LabelsConflict), c (TypeConflict)"
            );
            assert_eq!(status(&a, cluster, READY).reason, "Exported");
        }
        let conflicted = a.exports.iter().filter(|e| !e.conflicts.is_empty());
        assert_eq!(conflicted.count(), 4, "every export counts in the metric");
        assert_eq!(a.import.unwrap().type_, ImportType::ClusterSetIP);
    }

    #[test]
    fn equal_ages_fall_back_to_cluster_id_order() {
        let mut b = service(&["10.0.0.2"], &[("http", 80)]);
        Arc::make_mut(&mut b.spec).session_affinity = "ClientIP".into();
        let a = aggregate(
            &inputs(vec![
                ("b", Some(export(5)), Some(b)),
                (
                    "a",
                    Some(export(5)),
                    Some(service(&["10.0.0.1"], &[("http", 80)])),
                ),
            ]),
            BOTH,
        );
        assert_eq!(a.import.as_ref().unwrap().service.session_affinity, "None");
        assert_eq!(status(&a, "b", CONFLICT).reason, "SessionAffinityConflict");
    }

    /// Issue 46 item 2, KEP-1645 "the oldest export wins": an export is no
    /// older than the broker first saw it, so a cluster that declares an
    /// old export does not win; one the broker saw first does, whatever it
    /// declares.
    #[test]
    fn an_export_is_no_older_than_the_broker_first_saw_it() {
        let mut b = service(&["10.0.0.2"], &[("http", 80)]);
        Arc::make_mut(&mut b.spec).session_affinity = "ClientIP".into();
        let mut clusters = inputs(vec![
            // Declares an export from the Unix epoch; the broker saw it at 50.
            (
                "a",
                Some(export(0)),
                Some(service(&["10.0.0.1"], &[("http", 80)])),
            ),
            ("b", Some(export(30)), Some(b)),
        ]);
        clusters.get_mut("a").unwrap().seen = Some(50);
        clusters.get_mut("b").unwrap().seen = Some(40);
        let a = aggregate(&clusters, BOTH);
        let import = a.import.as_ref().unwrap();
        assert_eq!(import.clusters[0].cluster.as_ref(), "b", "b was first seen");
        assert_eq!(import.service.session_affinity, "ClientIP");
        assert_eq!(status(&a, "a", CONFLICT).reason, "SessionAffinityConflict");
        // Seen before it says it was created (a clock behind the broker's):
        // its own creation time stands.
        clusters.get_mut("a").unwrap().seen = Some(-5);
        let a = aggregate(&clusters, BOTH);
        let first = &a.import.as_ref().unwrap().clusters[0];
        assert_eq!(first.cluster.as_ref(), "a");
    }

    #[test]
    fn ports_are_the_union_and_differences_conflict() {
        let a = aggregate(
            &inputs(vec![
                (
                    "a",
                    Some(export(1)),
                    Some(service(&["10.0.0.1"], &[("http", 80)])),
                ),
                // Same name, other port: dropped. New name, new port: added.
                (
                    "b",
                    Some(export(2)),
                    Some(service(&["10.0.0.2"], &[("http", 81), ("metrics", 9100)])),
                ),
                // Same protocol+port under another name: dropped.
                (
                    "c",
                    Some(export(3)),
                    Some(service(&["10.0.0.3"], &[("web", 80)])),
                ),
                (
                    "d",
                    Some(export(4)),
                    Some(service(&["10.0.0.4"], &[("http", 80)])),
                ),
            ]),
            BOTH,
        );
        let ports: Vec<(Option<&str>, i32)> = a
            .import
            .as_ref()
            .unwrap()
            .ports
            .iter()
            .map(|p| (p.name.as_deref(), p.port))
            .collect();
        assert_eq!(ports, [(Some("http"), 80), (Some("metrics"), 9100)]);
        for cluster in ["a", "b", "c", "d"] {
            assert_eq!(status(&a, cluster, CONFLICT).reason, "PortConflict");
        }
        let message = &status(&a, "a", CONFLICT).message;
        assert!(
            message.contains("ports [http:80/TCP]")
                && message.contains("b (PortConflict), c (PortConflict)")
                && !message.contains("d ("),
            "{message}"
        );
        // Each cluster backs only the import's ports it defines identically.
        let backed: Vec<(&str, Vec<&str>)> = a
            .import
            .as_ref()
            .unwrap()
            .clusters
            .iter()
            .map(|c| {
                let names = c.ports.iter().map(|p| p.name.as_deref().unwrap()).collect();
                (c.cluster.as_ref(), names)
            })
            .collect();
        assert_eq!(
            backed,
            [
                ("a", vec!["http"]),
                ("b", vec!["metrics"]),
                ("c", vec![]),
                ("d", vec!["http"])
            ]
        );
    }

    #[test]
    fn several_reasons_are_comma_joined() {
        let mut b = service(&["10.0.0.2"], &[("grpc", 90)]);
        Arc::make_mut(&mut b.spec).internal_traffic_policy = "Local".into();
        Arc::make_mut(&mut b.spec).traffic_distribution = Some("PreferClose".into());
        let mut b_export = export(2);
        let exported = Arc::make_mut(&mut b_export.exported);
        exported.labels.insert("team".into(), "x".into());
        exported.annotations.insert("note".into(), "y".into());
        let a = aggregate(
            &inputs(vec![
                (
                    "a",
                    Some(export(1)),
                    Some(service(&["10.0.0.1"], &[("http", 80)])),
                ),
                ("b", Some(b_export), Some(b)),
            ]),
            BOTH,
        );
        assert_eq!(
            status(&a, "b", CONFLICT).reason,
            "PortConflict,LabelsConflict,AnnotationsConflict,InternalTrafficPolicyConflict,TrafficDistributionConflict"
        );
        let import = a.import.clone().unwrap();
        assert!(import.exported.labels.is_empty());
        assert_eq!(import.service.internal_traffic_policy, "Cluster");
    }

    #[test]
    fn families_intersect_from_the_oldest_and_disjoint_clusters_are_left_out() {
        let dual = || service(&["10.0.0.1", "fd00::1"], &[("http", 80)]);
        let a = aggregate(
            &inputs(vec![
                ("a", Some(export(1)), Some(dual())),
                (
                    "b",
                    Some(export(2)),
                    Some(service(&["10.0.0.2"], &[("http", 80)])),
                ),
                (
                    "c",
                    Some(export(3)),
                    Some(service(&["fd00::3"], &[("http", 80)])),
                ),
                ("d", Some(export(4)), Some(dual())),
            ]),
            BOTH,
        );
        let import = a.import.clone().unwrap();
        assert_eq!(import.ip_families, [IPv4]);
        assert_eq!(
            import
                .clusters
                .iter()
                .map(|c| c.cluster.as_ref())
                .collect::<Vec<_>>(),
            ["a", "b", "d"]
        );
        assert_eq!(
            import.clusters[0].cluster_ips[..],
            ["10.0.0.1".parse::<IpAddr>().unwrap()]
        );
        let c = status(&a, "c", CONFLICT);
        assert_eq!((c.status, c.reason.as_ref()), (true, "IPFamilyConflict"));
        assert_eq!(
            (
                status(&a, "c", READY).status,
                status(&a, "c", READY).reason.as_ref()
            ),
            (false, "Failed")
        );
        assert_eq!(status(&a, "a", CONFLICT).reason, "IPFamilyConflict");
        assert!(status(&a, "a", READY).status, "only c is left out");
    }

    #[test]
    fn local_families_filter_and_not_supported() {
        let list = || {
            inputs(vec![(
                "a",
                Some(export(1)),
                Some(service(&["fd00::1", "10.0.0.1"], &[("http", 80)])),
            )])
        };
        let dual = aggregate(&list(), &[IPv4]).import.unwrap();
        assert_eq!(
            (dual.ip_families.as_slice(), dual.local_families.as_slice()),
            ([IPv6, IPv4].as_slice(), [IPv4].as_slice())
        );
        assert!(dual.ready.status);
        let v4_only = aggregate(
            &inputs(vec![(
                "a",
                Some(export(1)),
                Some(service(&["10.0.0.1"], &[])),
            )]),
            &[IPv6],
        );
        let ready = &v4_only.import.unwrap().ready;
        assert_eq!(
            (ready.status, ready.reason.as_ref()),
            (false, "IPFamilyNotSupported")
        );
    }

    /// Every condition the engine writes, in each case it has one for, is
    /// one `model::conditions::WRITTEN` lists (and so one the MCS API names,
    /// as its tests check).
    #[test]
    fn every_condition_is_one_the_mcs_api_names() {
        use crate::model::conditions::{On, is_written};
        let mut external = service(&[], &[]);
        Arc::make_mut(&mut external.spec).kind = ServiceKind::ExternalName;
        let mut headless = service(&[], &[("grpc", 90)]);
        Arc::make_mut(&mut headless.spec).kind = ServiceKind::Headless;
        Arc::make_mut(&mut headless.spec).ip_families = vec![IPv4];
        let cases = [
            vec![
                ("a", Some(export(1)), None),
                ("b", Some(export(2)), Some(external)),
            ],
            vec![
                (
                    "a",
                    Some(export(1)),
                    Some(service(&["10.0.0.1"], &[("http", 80)])),
                ),
                ("b", Some(export(2)), Some(headless)),
                (
                    "c",
                    Some(export(3)),
                    Some(service(&["fd00::3"], &[("http", 80)])),
                ),
            ],
            vec![(
                "a",
                Some(export(1)),
                Some(service(&["10.0.0.1"], &[("http", 80)])),
            )],
        ];
        for local in [BOTH, &[IPv6][..]] {
            for case in &cases {
                let a = aggregate(&inputs(case.clone()), local);
                for condition in a.exports.iter().flat_map(|e| e.conditions.iter()) {
                    assert!(is_written(On::ServiceExport, condition), "{condition:?}");
                }
                if let Some(import) = &a.import {
                    assert!(
                        is_written(On::ServiceImport, &import.ready),
                        "{:?}",
                        import.ready
                    );
                }
            }
        }
    }

    #[test]
    fn headless_takes_ready_endpoints_of_exporting_clusters_only() {
        let mut headless = service(&[], &[("db", 5432)]);
        Arc::make_mut(&mut headless.spec).kind = ServiceKind::Headless;
        Arc::make_mut(&mut headless.spec).ip_families = vec![IPv4];
        let mut list = inputs(vec![
            ("a", Some(export(1)), Some(headless.clone())),
            ("b", None, Some(headless)),
        ]);
        let a = list.get_mut("a").unwrap();
        a.slices.insert(
            "s1".into(),
            slice(&[
                ("10.0.0.1", Some("db-0"), true),
                ("10.0.0.2", None, false),
                ("fd00::9", None, true),
            ]),
        );
        a.slices.insert(
            "s2".into(),
            slice(&[("10.0.0.1", Some("db-0"), true), ("10.0.0.3", None, true)]),
        );
        list.get_mut("b")
            .unwrap()
            .slices
            .insert("s1".into(), slice(&[("10.9.9.9", None, true)]));
        let import = aggregate(&list, BOTH).import.unwrap();
        assert_eq!(import.clusters.len(), 1);
        let ips: Vec<String> = import.clusters[0]
            .endpoints
            .iter()
            .map(|e| e.address.to_string())
            .collect();
        assert_eq!(ips, ["10.0.0.1", "10.0.0.3"]);
        assert_eq!(
            import.clusters[0].endpoints[0].hostname.as_deref(),
            Some("db-0")
        );
        assert!(matches!(import.clusters[0].endpoints, Endpoints::Picked(_)));

        // One slice whose endpoints all qualify is shared, not copied.
        list.get_mut("a").unwrap().slices = [(
            Box::from("s1"),
            slice(&[("10.0.0.1", Some("db-0"), true), ("10.0.0.3", None, true)]),
        )]
        .into_iter()
        .collect();
        let import = aggregate(&list, BOTH).import.unwrap();
        let shared = &import.clusters[0].endpoints;
        let a_slice = list.get("a").and_then(|a| a.slices.get("s1")).unwrap();
        assert!(matches!(shared, Endpoints::Shared(s) if Arc::ptr_eq(s, a_slice)));
        assert_eq!(shared.len(), 2);
    }
}
