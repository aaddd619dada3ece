//! The objects Kubernetes mode reads and writes, and how they map to
//! [`crate::model`] facts.
//!
//! On the broker (one namespace shared by the clusterset):
//! - a ServiceImport `<name>.<namespace>.<cluster>` per exporting cluster
//!   ([`Role::Export`]): that cluster's export and Service (type, ports,
//!   families, ClusterIPs, affinity, traffic policies, exported labels and
//!   annotations, export creation time, VIP and pod-IP switches);
//! - a ServiceImport `<name>.<namespace>` per service ([`Role::Import`]): the
//!   VIPs the clusterset agreed on (see `vip_claims`);
//! - the EndpointSlices of every exporting cluster.
//!
//! In each member cluster: the ServiceImport of every import (in its namespace)
//! and the MCS EndpointSlices of every exporting cluster, its own included.
//!
//! Identity always comes from labels, never from parsing names.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::discovery::v1::{
    Endpoint as K8sEndpoint, EndpointConditions, EndpointPort, EndpointSlice,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

use crate::model::import::Import;

use crate::k8s::convert::ConvertError;
use crate::k8s::crd::{LABEL_MCS_SERVICE_NAME, LABEL_SOURCE_CLUSTER};
use crate::k8s::crd::{McsVersion, ServiceImport, ServiceImportSpec};
use crate::model::{
    ClusterId, ExportAge, ExportInfo, Exported, ImportType, IpFamily, SESSION_AFFINITIES,
    ServiceInfo, ServiceKey, ServiceKind, ServiceSpec, SliceInfo, TRAFFIC_POLICIES, setting,
    shared_name,
};

/// Value of the `managed-by` labels on everything this controller writes.
pub const MANAGER: &str = "clusterset-dns.io";
/// Label marking the ServiceImports this controller writes.
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Label marking the EndpointSlices this controller writes.
pub const LABEL_SLICE_MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";
/// Label with the namespace of the service a broker object belongs to.
pub const LABEL_SERVICE_NAMESPACE: &str = "clusterset-dns.io/service-namespace";
/// Label telling a broker ServiceImport's [`Role`].
pub const LABEL_ROLE: &str = "clusterset-dns.io/role";
/// Annotation of a broker EndpointSlice: the name of the slice it copies.
pub const ANNOTATION_SOURCE_SLICE: &str = "clusterset-dns.io/source-slice";
/// Annotation of a broker export record: everything that has no spec field.
pub const ANNOTATION_EXPORT: &str = "clusterset-dns.io/export";
/// Annotation of a member's ServiceImport: the import's ports each exporting
/// cluster backs, as JSON (`{"east":["tcp:42/TCP"],"west":[]}`).
pub const ANNOTATION_CLUSTER_PORTS: &str = "clusterset-dns.io/cluster-ports";
/// Label selector of the objects this controller writes in member clusters.
pub const MANAGED_SELECTOR: &str = "app.kubernetes.io/managed-by=clusterset-dns.io";
/// Label selector of the EndpointSlices this controller writes.
pub const MANAGED_SLICES_SELECTOR: &str =
    "endpointslice.kubernetes.io/managed-by=clusterset-dns.io";

/// What a ServiceImport on the broker stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// One cluster's export of a service.
    Export,
    /// The clusterset-wide agreement on a service's VIPs.
    Import,
}

impl Role {
    fn as_str(self) -> &'static str {
        match self {
            Role::Export => "export",
            Role::Import => "import",
        }
    }
}

/// The parts of an export record that have no ServiceImport spec field.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExportExtras {
    created: i64,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    annotations: BTreeMap<String, String>,
    clusterset_ip: bool,
    pod_ips: bool,
}

/// Labels tying an object to a service (and a source cluster).
fn service_labels(key: &ServiceKey, cluster: Option<&str>) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([
        (LABEL_MANAGED_BY.to_owned(), MANAGER.to_owned()),
        (LABEL_MCS_SERVICE_NAME.to_owned(), key.name().to_string()),
        (
            LABEL_SERVICE_NAMESPACE.to_owned(),
            key.namespace().to_string(),
        ),
    ]);
    if let Some(cluster) = cluster {
        labels.insert(LABEL_SOURCE_CLUSTER.to_owned(), cluster.to_owned());
    }
    labels
}

/// The service and source cluster a broker object's labels name.
pub fn labelled_service(meta: &ObjectMeta) -> Option<(ServiceKey, Option<ClusterId>)> {
    let labels = meta.labels.as_ref()?;
    let key = ServiceKey::new(
        labels.get(LABEL_SERVICE_NAMESPACE)?,
        labels.get(LABEL_MCS_SERVICE_NAME)?,
    );
    Some((
        key,
        labels.get(LABEL_SOURCE_CLUSTER).map(|c| shared_name(c)),
    ))
}

/// The role of a broker ServiceImport, if it is one this controller wrote.
pub fn role(import: &ServiceImport) -> Option<Role> {
    let labels = import.metadata.labels.as_ref()?;
    match labels.get(LABEL_ROLE).map(String::as_str) {
        Some("export") => Some(Role::Export),
        Some("import") => Some(Role::Import),
        _ => None,
    }
}

/// Name of a cluster's export record on the broker.
pub fn export_record_name(key: &ServiceKey, cluster: &str) -> String {
    format!("{}.{}.{cluster}", key.name(), key.namespace())
}

/// Name of a service's VIP agreement on the broker.
pub fn vip_record_name(key: &ServiceKey) -> String {
    format!("{}.{}", key.name(), key.namespace())
}

/// A name made of a readable prefix and a hash of `parts`, within the
/// 253 characters Kubernetes allows.
pub fn hashed_name(prefix: &str, parts: &[&str]) -> String {
    let hash = crate::model::stable_hash(parts.iter().flat_map(|p| p.bytes().chain([0])));
    let prefix: String = prefix.chars().take(200).collect();
    format!("{}-{hash:016x}", prefix.trim_end_matches(['-', '.']))
}

/// Name of the broker copy of a cluster's EndpointSlice.
pub fn broker_slice_name(key: &ServiceKey, cluster: &str, slice: &str) -> String {
    hashed_name(
        &format!("{}-{}", key.name(), key.namespace()),
        &[cluster, key.namespace(), slice],
    )
}

/// Name of a member's MCS EndpointSlice copying a cluster's published slice.
pub fn mirror_slice_name(key: &ServiceKey, cluster: &str, slice: &str) -> String {
    hashed_name(&format!("{}-{cluster}", key.name()), &[cluster, slice])
}

/// A cluster's export record for the broker, from its export and Service.
/// `clusterset_ip` and `pod_ips` are the switches with the global defaults applied.
pub fn export_record(
    version: McsVersion,
    key: &ServiceKey,
    cluster: &str,
    export: &ExportInfo,
    service: &ServiceInfo,
    clusterset_ip: bool,
    pod_ips: bool,
) -> ServiceImport {
    let extras = ExportExtras {
        created: export.age.created,
        labels: export.exported.labels.clone(),
        annotations: export.exported.annotations.clone(),
        clusterset_ip: export.clusterset_ip.unwrap_or(clusterset_ip),
        pod_ips: export.pod_ips.unwrap_or(pod_ips),
    };
    let mut labels = service_labels(key, Some(cluster));
    labels.insert(LABEL_ROLE.into(), Role::Export.as_str().into());
    let type_ = ImportType::of(service.kind);
    ServiceImport::at(
        version,
        ObjectMeta {
            name: Some(export_record_name(key, cluster)),
            labels: Some(labels),
            annotations: Some(BTreeMap::from([(
                ANNOTATION_EXPORT.to_owned(),
                serde_json::to_string(&extras).expect("export extras serialize"),
            )])),
            ..ObjectMeta::default()
        },
        ServiceImportSpec {
            ports: service.ports.to_vec(),
            ips: service
                .cluster_ips
                .iter()
                .map(ToString::to_string)
                .collect(),
            type_: type_.as_str().to_owned(),
            session_affinity: Some(service.session_affinity.to_string()),
            session_affinity_config: service.session_affinity_config.clone(),
            ip_families: service
                .ip_families
                .iter()
                .map(|f| f.as_str().to_owned())
                .collect(),
            internal_traffic_policy: Some(service.internal_traffic_policy.to_string()),
            traffic_distribution: service.traffic_distribution.clone(),
        },
    )
}

/// Reads back an export record: the service, the cluster, and what its export and Service say.
pub fn read_export_record(
    record: &ServiceImport,
) -> Result<(ServiceKey, ClusterId, ExportInfo, ServiceInfo), ConvertError> {
    let object = || {
        format!(
            "ServiceImport {}",
            record.metadata.name.as_deref().unwrap_or("?")
        )
    };
    let bad = |what: String| ConvertError::BadRecord {
        object: object(),
        what,
    };
    let Some((key, Some(cluster))) = labelled_service(&record.metadata) else {
        return Err(bad("missing service or source-cluster labels".into()));
    };
    let extras: ExportExtras = record
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_EXPORT))
        .ok_or_else(|| bad(format!("missing annotation {ANNOTATION_EXPORT}")))
        .and_then(|s| {
            serde_json::from_str(s).map_err(|e| bad(format!("{ANNOTATION_EXPORT}: {e}")))
        })?;
    let spec = &record.spec;
    let kind = match spec.type_.as_str() {
        "ClusterSetIP" => ServiceKind::ClusterIp,
        "Headless" => ServiceKind::Headless,
        other => return Err(bad(format!("unknown type {other:?}"))),
    };
    let ip_families = spec
        .ip_families
        .iter()
        .map(|f| IpFamily::parse(f).ok_or_else(|| bad(format!("unknown IP family {f:?}"))))
        .collect::<Result<_, _>>()?;
    let cluster_ips = spec
        .ips
        .iter()
        .map(|ip| ip.parse().map_err(|_| bad(format!("bad IP {ip:?}"))))
        .collect::<Result<_, _>>()?;
    let export = ExportInfo {
        age: ExportAge {
            created: extras.created,
            seq: 0,
        },
        exported: Exported {
            labels: extras.labels,
            annotations: extras.annotations,
        }
        .shared(),
        clusterset_ip: Some(extras.clusterset_ip),
        pod_ips: Some(extras.pod_ips),
    };
    let shared = ServiceSpec {
        kind,
        ports: spec.ports.as_slice().into(),
        ip_families,
        session_affinity: setting(
            spec.session_affinity.as_deref().unwrap_or("None"),
            &SESSION_AFFINITIES,
        ),
        session_affinity_config: spec.session_affinity_config.clone(),
        internal_traffic_policy: setting(
            spec.internal_traffic_policy.as_deref().unwrap_or("Cluster"),
            &TRAFFIC_POLICIES,
        ),
        traffic_distribution: spec.traffic_distribution.clone(),
    };
    let service = ServiceInfo {
        cluster_ips,
        spec: shared.shared(),
    };
    Ok((key, cluster, export, service))
}

/// The broker's VIP agreement for a service.
pub fn vip_record(version: McsVersion, key: &ServiceKey, vips: &[IpAddr]) -> ServiceImport {
    let mut labels = service_labels(key, None);
    labels.insert(LABEL_ROLE.into(), Role::Import.as_str().into());
    ServiceImport::at(
        version,
        ObjectMeta {
            name: Some(vip_record_name(key)),
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        ServiceImportSpec {
            ips: vips.iter().map(ToString::to_string).collect(),
            type_: ImportType::ClusterSetIP.as_str().to_owned(),
            ip_families: vips
                .iter()
                .map(|ip| IpFamily::of(ip).as_str().to_owned())
                .collect(),
            ..ServiceImportSpec::default()
        },
    )
}

/// The [`ANNOTATION_CLUSTER_PORTS`] value of an import.
pub fn cluster_ports(import: &Import) -> String {
    let backed: BTreeMap<&str, Vec<String>> = import
        .clusters
        .iter()
        .map(|c| {
            (
                &*c.cluster,
                c.ports.iter().map(ToString::to_string).collect(),
            )
        })
        .collect();
    serde_json::to_string(&backed).expect("strings serialize")
}

/// The VIPs of a broker VIP agreement (unparsable entries skipped).
pub fn record_vips(record: &ServiceImport) -> Vec<IpAddr> {
    record
        .spec
        .ips
        .iter()
        .filter_map(|ip| ip.parse().ok())
        .collect()
}

/// An EndpointSlice holding `slice` (endpoints all of one family), labelled
/// for `key` and `cluster`; `name` and `namespace` as given.
pub fn slice_object(
    name: String,
    namespace: Option<String>,
    key: &ServiceKey,
    cluster: &str,
    slice: &SliceInfo,
) -> EndpointSlice {
    let (endpoints, ports) = (&slice.endpoints, &slice.ports);
    let family = endpoints
        .first()
        .map_or(IpFamily::IPv4, |e| IpFamily::of(&e.address));
    let mut labels = service_labels(key, Some(cluster));
    labels.insert(LABEL_SLICE_MANAGED_BY.into(), MANAGER.into());
    EndpointSlice {
        metadata: ObjectMeta {
            name: Some(name),
            namespace,
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        address_type: family.as_str().to_owned(),
        endpoints: Some(
            endpoints
                .iter()
                .map(|e| K8sEndpoint {
                    addresses: vec![e.address.to_string()],
                    hostname: e.hostname.as_deref().map(str::to_owned),
                    conditions: Some(EndpointConditions {
                        ready: Some(e.ready),
                        ..EndpointConditions::default()
                    }),
                    ..K8sEndpoint::default()
                })
                .collect(),
        ),
        ports: Some(
            ports
                .iter()
                .map(|p| EndpointPort {
                    name: Some(p.name.clone().unwrap_or_default()),
                    port: Some(p.port),
                    protocol: p.protocol.clone(),
                    app_protocol: p.app_protocol.clone(),
                })
                .collect(),
        ),
    }
}

/// The endpoints of an EndpointSlice this controller wrote, keyed like its labels say.
pub fn read_slice(
    slice: &EndpointSlice,
) -> Result<(ServiceKey, ClusterId, Arc<SliceInfo>), ConvertError> {
    let name = slice.metadata.name.as_deref().unwrap_or("?");
    let Some((key, Some(cluster))) = labelled_service(&slice.metadata) else {
        return Err(ConvertError::BadRecord {
            object: format!("EndpointSlice {name}"),
            what: "missing service or source-cluster labels".into(),
        });
    };
    let info = crate::k8s::convert::slice_endpoints(slice, &format!("EndpointSlice {name}"))?;
    Ok((key, cluster, Arc::new(info)))
}

/// The cluster an MCS EndpointSlice's endpoints come from (its `source-cluster` label).
pub fn source_cluster(slice: &EndpointSlice) -> Option<&str> {
    slice
        .metadata
        .labels
        .as_ref()?
        .get(crate::k8s::crd::LABEL_SOURCE_CLUSTER)
        .map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Endpoint;
    use crate::model::port::ServicePort;

    fn service() -> ServiceInfo {
        let spec = ServiceSpec {
            kind: ServiceKind::ClusterIp,
            ports: Arc::new([ServicePort {
                name: Some("http".into()),
                protocol: Some("TCP".into()),
                app_protocol: Some("h2c".into()),
                port: 80,
            }]),
            ip_families: vec![IpFamily::IPv6, IpFamily::IPv4],
            session_affinity: "ClientIP".into(),
            session_affinity_config: None,
            internal_traffic_policy: "Local".into(),
            traffic_distribution: Some("PreferClose".into()),
        };
        ServiceInfo {
            cluster_ips: ["fd00::1".parse().unwrap(), "10.0.0.1".parse().unwrap()]
                .into_iter()
                .collect(),
            spec: spec.shared(),
        }
    }

    #[test]
    fn export_records_read_back_as_written() {
        let key = ServiceKey::new("shop", "web");
        let export = ExportInfo {
            age: ExportAge {
                created: 1_700_000_000,
                seq: 0,
            },
            exported: Arc::new(Exported {
                labels: BTreeMap::from([("tier".into(), "front".into())]),
                annotations: BTreeMap::from([("note".into(), "x".into())]),
            }),
            clusterset_ip: None,
            pod_ips: Some(false),
        };
        let record = export_record(
            McsVersion::V1alpha1,
            &key,
            "east.eu",
            &export,
            &service(),
            true,
            true,
        );
        assert_eq!(record.metadata.name.as_deref(), Some("web.shop.east.eu"));
        let written = serde_json::to_value(&record).unwrap();
        assert_eq!(written["apiVersion"], "multicluster.x-k8s.io/v1alpha1");
        assert_eq!(written["kind"], "ServiceImport");
        assert_eq!(role(&record), Some(Role::Export));
        // Through JSON, as the API server stores it.
        let stored: ServiceImport =
            serde_json::from_value(serde_json::to_value(&record).unwrap()).unwrap();
        let (k, cluster, e, s) = read_export_record(&stored).unwrap();
        assert_eq!((k, cluster.as_ref()), (key, "east.eu"));
        assert_eq!(s, service());
        assert_eq!(
            e.clusterset_ip,
            Some(true),
            "the default is resolved by the writer"
        );
        assert_eq!(e.pod_ips, Some(false));
        assert_eq!((e.age, e.exported), (export.age, export.exported));
    }

    #[test]
    fn broken_records_are_named() {
        let mut record = export_record(
            McsVersion::V1beta1,
            &ServiceKey::new("shop", "web"),
            "east",
            &crate::engine::aggregate::tests::export(1),
            &service(),
            true,
            true,
        );
        record.spec.type_ = "Magic".into();
        let err = read_export_record(&record).unwrap_err().to_string();
        assert!(
            err.contains("ServiceImport web.shop.east") && err.contains("Magic"),
            "{err}"
        );
        record.metadata.annotations = None;
        let err = read_export_record(&record).unwrap_err().to_string();
        assert!(err.contains(ANNOTATION_EXPORT), "{err}");
    }

    #[test]
    fn slices_read_back_as_written() {
        let key = ServiceKey::new("shop", "db");
        let written = SliceInfo {
            endpoints: vec![
                Endpoint {
                    address: "10.1.0.1".parse().unwrap(),
                    hostname: Some("db-0".into()),
                    ready: true,
                },
                Endpoint {
                    address: "10.1.0.2".parse().unwrap(),
                    hostname: None,
                    ready: false,
                },
            ],
            ports: vec![
                ServicePort {
                    name: Some("pg".into()),
                    protocol: Some("TCP".into()),
                    app_protocol: None,
                    port: 5432,
                },
                ServicePort {
                    name: None,
                    protocol: Some("UDP".into()),
                    app_protocol: None,
                    port: 53,
                },
            ],
        };
        let slice = slice_object("s".into(), None, &key, "west", &written);
        assert_eq!(slice.address_type, "IPv4");
        let (k, cluster, info) = read_slice(&slice).unwrap();
        assert_eq!((k, cluster.as_ref()), (key, "west"));
        assert_eq!(*info, written);
    }

    #[test]
    fn hashed_names_are_valid_and_distinct() {
        let long = "x".repeat(300);
        let a = hashed_name(&long, &["a.b", "c"]);
        let b = hashed_name(&long, &["a", "b.c"]);
        assert!(a.len() <= 253 && a != b);
        assert_eq!(vip_record_name(&ServiceKey::new("ns", "svc")), "svc.ns");
    }
}
