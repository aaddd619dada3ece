//! What Kubernetes mode reads back (module docs of [`super`]): which
//! service and cluster an object belongs to, by its labels, and the facts an
//! export record or an EndpointSlice holds.

use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use jiff::Timestamp;

use super::{
    ANNOTATION_EXPORT, ANNOTATION_FIRST_SEEN, ExportExtras, LABEL_MANAGED_BY, LABEL_ROLE,
    LABEL_SERVICE_NAMESPACE, MANAGER, Role, derived_service_name,
};
use crate::k8s::convert::ConvertError;
use crate::k8s::crd::{LABEL_MCS_SERVICE_NAME, LABEL_SOURCE_CLUSTER, ServiceImport};
use crate::model::{
    ClusterId, ExportAge, ExportInfo, Exported, IpFamily, Ips, SESSION_AFFINITIES, ServiceInfo,
    ServiceKey, ServiceKind, ServiceSpec, SliceInfo, TRAFFIC_POLICIES, setting, shared_name,
};

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

/// The service a derived Service stands for, and its ClusterIPs: `None`
/// for any other Service (this controller's labels, and the name
/// [`super::derived_service_name`] gives that service, in its namespace).
pub fn derived_service(service: &Service) -> Option<(ServiceKey, Ips)> {
    let meta = &service.metadata;
    let labels = meta.labels.as_ref()?;
    (labels.get(LABEL_MANAGED_BY).map(String::as_str) == Some(MANAGER)).then_some(())?;
    let key = ServiceKey::new(
        meta.namespace.as_deref()?,
        labels.get(LABEL_MCS_SERVICE_NAME)?,
    );
    (meta.name.as_deref() == Some(derived_service_name(&key).as_str())).then_some(())?;
    let spec = service.spec.as_ref()?;
    let ips = spec.cluster_ips.iter().flatten();
    Some((key, ips.filter_map(|ip| ip.parse().ok()).collect()))
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

/// When the broker first saw an export record, in whole seconds: its
/// [`ANNOTATION_FIRST_SEEN`], else (a record written before there was one)
/// its `creationTimestamp`, which the API server sets.
pub fn first_seen(record: &ServiceImport) -> Result<Option<Timestamp>, ConvertError> {
    let meta = &record.metadata;
    let annotation = meta.annotations.as_ref();
    match annotation.and_then(|a| a.get(ANNOTATION_FIRST_SEEN)) {
        Some(value) => value
            .parse()
            .map(Some)
            .map_err(|e| ConvertError::BadRecord {
                object: format!("ServiceImport {}", meta.name.as_deref().unwrap_or("?")),
                what: format!("{ANNOTATION_FIRST_SEEN} {value:?}: {e}"),
            }),
        None => Ok(meta.creation_timestamp.as_ref().map(|t| t.0)),
    }
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
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use crate::k8s::crd::McsVersion;
    use crate::k8s::records::SwitchDefaults;
    use crate::k8s::records::build::{export_record, slice_object};
    use crate::model::Endpoint;
    use crate::model::port::ServicePort;

    const DEFAULTS: SwitchDefaults = SwitchDefaults {
        clusterset_ip: true,
        pod_ips: true,
    };

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
        let seen: Timestamp = "2026-12-07T13:00:00.5Z".parse().unwrap();
        let record = export_record(
            McsVersion::V1alpha1,
            &key,
            "east.eu",
            seen,
            &export,
            &service(),
            DEFAULTS,
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
        assert_eq!(
            first_seen(&stored).unwrap(),
            Some("2026-12-07T13:00:00Z".parse().unwrap()),
            "whole seconds, as creationTimestamp"
        );
    }

    /// A record from before the first-seen annotation is as old as the API
    /// server says; an annotation that is not a time names the record.
    #[test]
    fn first_seen_falls_back_to_the_creation_timestamp() {
        let mut record = web_of_east();
        let created: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        record.metadata.creation_timestamp = Some(Time(created));
        let annotations = record.metadata.annotations.as_mut().unwrap();
        annotations.insert(ANNOTATION_FIRST_SEEN.into(), "yesterday".into());
        let err = first_seen(&record).unwrap_err().to_string();
        assert!(
            err.contains("web.shop.east") && err.contains("yesterday"),
            "{err}"
        );
        let annotations = record.metadata.annotations.as_mut().unwrap();
        annotations.remove(ANNOTATION_FIRST_SEEN);
        assert_eq!(first_seen(&record).unwrap(), Some(created));
    }

    /// `shop/web`'s export record from `east`.
    fn web_of_east() -> ServiceImport {
        let key = ServiceKey::new("shop", "web");
        let export = crate::engine::aggregate::tests::export(1);
        let seen = Timestamp::UNIX_EPOCH;
        export_record(
            McsVersion::V1beta1,
            &key,
            "east",
            seen,
            &export,
            &service(),
            DEFAULTS,
        )
    }

    #[test]
    fn broken_records_are_named() {
        let mut record = web_of_east();
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
}
