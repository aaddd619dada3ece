//! The objects Kubernetes mode writes (module docs of [`super`]): a
//! cluster's export record and the VIP record on the broker, EndpointSlices
//! on the broker and in members.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{Service, ServicePort as K8sServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::{
    Endpoint as K8sEndpoint, EndpointConditions, EndpointPort, EndpointSlice,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use jiff::Timestamp;

use super::{
    ANNOTATION_EXPORT, ANNOTATION_FIRST_SEEN, ANNOTATION_NOT_PINNED, ExportExtras,
    LABEL_MANAGED_BY, LABEL_ROLE, LABEL_SERVICE_NAMESPACE, LABEL_SLICE_MANAGED_BY, MANAGER, Role,
    SwitchDefaults, derived_service_name, export_record_name, vip_record_name,
};
use crate::k8s::crd::{LABEL_MCS_SERVICE_NAME, LABEL_SOURCE_CLUSTER};
use crate::k8s::crd::{McsVersion, ServiceImport, ServiceImportSpec};
use crate::model::import::Import;
use crate::model::port::ServicePort;
use crate::model::{ExportInfo, ImportType, IpFamily, ServiceInfo, ServiceKey, SliceInfo};

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

/// A cluster's export record for the broker, from its export and Service,
/// first seen by the broker at `first_seen` (see [`ANNOTATION_FIRST_SEEN`]).
pub fn export_record(
    version: McsVersion,
    key: &ServiceKey,
    cluster: &str,
    first_seen: Timestamp,
    export: &ExportInfo,
    service: &ServiceInfo,
    defaults: SwitchDefaults,
) -> ServiceImport {
    let extras = ExportExtras {
        created: export.age.created,
        labels: export.exported.labels.clone(),
        annotations: export.exported.annotations.clone(),
        clusterset_ip: export.clusterset_ip.unwrap_or(defaults.clusterset_ip),
        pod_ips: export.pod_ips.unwrap_or(defaults.pod_ips),
    };
    let first_seen = Timestamp::from_second(first_seen.as_second()).unwrap_or(first_seen);
    let mut labels = service_labels(key, Some(cluster));
    labels.insert(LABEL_ROLE.into(), Role::Export.as_str().into());
    let type_ = ImportType::of(service.kind);
    ServiceImport::at(
        version,
        ObjectMeta {
            name: Some(export_record_name(key, cluster)),
            labels: Some(labels),
            annotations: Some(BTreeMap::from([
                (
                    ANNOTATION_EXPORT.to_owned(),
                    serde_json::to_string(&extras).expect("export extras serialize"),
                ),
                (ANNOTATION_FIRST_SEEN.to_owned(), first_seen.to_string()),
            ])),
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

/// The derived Service of `key` in a member (ARCHITECTURE.md, "Derived
/// Services"): a ClusterIP Service without a selector, so that only the MCS
/// EndpointSlices labelled with its name back it, with the import's `ports`
/// and the `families` the member serves, owned by the ServiceImport
/// (`owner`) so that the garbage collector removes it with the import.
/// `cluster_ips` pins its ClusterIPs (empty: the API server allocates);
/// `not_pinned` is why the clusterset VIPs could not be ([`ANNOTATION_NOT_PINNED`]).
pub fn derived_service(
    key: &ServiceKey,
    ports: &[ServicePort],
    families: &[IpFamily],
    owner: OwnerReference,
    cluster_ips: &[IpAddr],
    not_pinned: Option<&str>,
) -> Service {
    let annotations =
        not_pinned.map(|why| BTreeMap::from([(ANNOTATION_NOT_PINNED.into(), why.into())]));
    let cluster_ips: Vec<String> = cluster_ips.iter().map(ToString::to_string).collect();
    Service {
        metadata: ObjectMeta {
            name: Some(derived_service_name(key)),
            namespace: Some(key.namespace().to_string()),
            labels: Some(service_labels(key, None)),
            annotations,
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            cluster_ip: cluster_ips.first().cloned(),
            cluster_ips: (!cluster_ips.is_empty()).then_some(cluster_ips),
            ip_families: Some(families.iter().map(|f| f.as_str().to_owned()).collect()),
            ip_family_policy: Some(
                if families.len() > 1 {
                    "RequireDualStack"
                } else {
                    "SingleStack"
                }
                .into(),
            ),
            ports: Some(
                ports
                    .iter()
                    .map(|p| K8sServicePort {
                        name: p.name.clone(),
                        port: p.port,
                        // Spelled out: the API server would default it, and
                        // the written Service would differ from the planned one.
                        protocol: Some(p.protocol.clone().unwrap_or_else(|| "TCP".into())),
                        app_protocol: p.app_protocol.clone(),
                        ..K8sServicePort::default()
                    })
                    .collect(),
            ),
            ..ServiceSpec::default()
        }),
        status: None,
    }
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
