//! Pure conversions from typed Kubernetes objects to [`crate::model`] facts.
//!
//! Every source (the manifest directory here, a kube-rs watcher later) goes
//! through these functions, so all sources agree on defaults and validation.

use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Service, SessionAffinityConfig};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use smallvec::SmallVec;

use crate::k8s::crd::{self, LABEL_MCS_SERVICE_NAME, LABEL_SERVICE_NAME};
use crate::model::{
    self, Endpoint, ExportAge, ExportInfo, Exported, IpFamily, Object, SESSION_AFFINITIES,
    ServiceInfo, ServiceKey, ServiceKind, ServiceSpec, SliceInfo, TRAFFIC_POLICIES, is_dns_label,
    setting,
};

/// What a namespace must be (RFC 1123 §2.1, as Kubernetes spells it).
const RFC_1123_LABEL: &str = "an RFC 1123 DNS label (at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit)";
/// What a Service name must be (RFC 1035 §2.3.1, as Kubernetes spells it).
const RFC_1035_LABEL: &str = "an RFC 1035 DNS label (at most 63 lower-case letters, digits and '-', starting with a letter and ending with a letter or digit)";

/// The namespace of an object whose `metadata.namespace` is missing, as `kubectl apply` assumes.
pub(crate) const DEFAULT_NAMESPACE: &str = "default";

/// Why an object cannot be converted. Messages name the object (`Kind namespace/name`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConvertError {
    /// `metadata.name` is missing or empty.
    #[error("{kind} in namespace {namespace} has no metadata.name")]
    MissingName {
        /// The object's kind.
        kind: &'static str,
        /// Its namespace (defaulted).
        namespace: String,
    },
    /// An EndpointSlice lacks the `kubernetes.io/service-name` label.
    #[error("{object}: missing label {LABEL_SERVICE_NAME}")]
    MissingServiceName {
        /// `EndpointSlice namespace/name`.
        object: String,
    },
    /// An EndpointSlice of `addressType: FQDN`.
    #[error("{object}: FQDN EndpointSlices are not supported")]
    FqdnSlice {
        /// `EndpointSlice namespace/name`.
        object: String,
    },
    /// An EndpointSlice `addressType` other than `IPv4`, `IPv6` or `FQDN`.
    #[error("{object}: unknown addressType {address_type:?}")]
    UnknownAddressType {
        /// `EndpointSlice namespace/name`.
        object: String,
        /// The offending value.
        address_type: String,
    },
    /// An endpoint address that does not parse as an address of the slice's family.
    #[error("{object}: address {address:?} is not an {family} address")]
    BadAddress {
        /// `EndpointSlice namespace/name`.
        object: String,
        /// The offending address.
        address: String,
        /// The slice's `addressType`.
        family: IpFamily,
    },
    /// A `clusterIP`/`clusterIPs` entry that is not an IP address.
    #[error("{object}: clusterIP {ip:?} is not an IP address")]
    BadClusterIp {
        /// `Service namespace/name`.
        object: String,
        /// The offending value.
        ip: String,
    },
    /// An object this controller wrote on the broker that cannot be read back.
    #[error("{object}: {what}")]
    BadRecord {
        /// `Kind name`.
        object: String,
        /// What is wrong.
        what: String,
    },
    /// A boolean annotation whose value is neither `true` nor `false`.
    #[error("{object}: annotation {annotation} must be \"true\" or \"false\", not {value:?}")]
    BadSwitch {
        /// `ServiceExport namespace/name`.
        object: String,
        /// The annotation.
        annotation: &'static str,
        /// The offending value.
        value: String,
    },
    /// A Service whose name or namespace cannot be a DNS label, so its
    /// `<name>.<namespace>.svc` name could never be served.
    #[error("{object}: {field} {value:?} is not {rule}")]
    NotDnsLabel {
        /// `Service namespace/name`.
        object: String,
        /// `metadata.name` or `metadata.namespace`.
        field: &'static str,
        /// The offending value.
        value: String,
        /// The rule broken, for the message.
        rule: &'static str,
    },
    /// An `ipFamilies` entry other than `IPv4` / `IPv6`.
    #[error("{object}: unknown IP family {family:?} in spec.ipFamilies")]
    BadIpFamily {
        /// `Service namespace/name`.
        object: String,
        /// The offending value.
        family: String,
    },
}

/// `metadata.namespace`, defaulted to [`DEFAULT_NAMESPACE`].
pub(crate) fn namespace_of(meta: &ObjectMeta) -> &str {
    match meta.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => ns,
        _ => DEFAULT_NAMESPACE,
    }
}

/// The defaulted namespace and the required name of an object.
fn identity<'a>(
    kind: &'static str,
    meta: &'a ObjectMeta,
) -> Result<(&'a str, &'a str), ConvertError> {
    let namespace = namespace_of(meta);
    match meta.name.as_deref() {
        Some(name) if !name.is_empty() => Ok((namespace, name)),
        _ => Err(ConvertError::MissingName {
            kind,
            namespace: namespace.to_owned(),
        }),
    }
}

/// A Service's `sessionAffinityConfig` as the model keeps it.
fn affinity_config(config: &SessionAffinityConfig) -> model::SessionAffinityConfig {
    model::SessionAffinityConfig {
        client_ip: config.client_ip.as_ref().map(|c| model::ClientIpConfig {
            timeout_seconds: c.timeout_seconds,
        }),
    }
}

fn non_empty(s: &Option<String>) -> Option<&str> {
    s.as_deref().filter(|s| !s.is_empty())
}

/// Converts a Service into its [`ServiceInfo`], keyed by its namespace and name.
pub(crate) fn service(svc: &Service) -> Result<(ServiceKey, Object), ConvertError> {
    let (namespace, name) = identity("Service", &svc.metadata)?;
    let object = || format!("Service {namespace}/{name}");
    // Kubernetes validates these (RFC 1035 labels for Service names, RFC 1123
    // for namespaces); a manifest file may not have been.
    let not_label = |field, value: &str, rule| ConvertError::NotDnsLabel {
        object: object(),
        field,
        value: value.to_owned(),
        rule,
    };
    if !is_dns_label(namespace) {
        return Err(not_label("metadata.namespace", namespace, RFC_1123_LABEL));
    }
    if !is_dns_label(name) || !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        return Err(not_label("metadata.name", name, RFC_1035_LABEL));
    }
    let default_spec = Default::default();
    let spec = svc.spec.as_ref().unwrap_or(&default_spec);

    let raw_ips: Vec<&str> = match spec.cluster_ips.as_deref() {
        Some(ips) if !ips.is_empty() => ips.iter().map(String::as_str).collect(),
        _ => non_empty(&spec.cluster_ip).into_iter().collect(),
    };
    let headless = non_empty(&spec.cluster_ip) == Some("None") || raw_ips.first() == Some(&"None");
    let kind = if non_empty(&spec.type_) == Some("ExternalName") {
        ServiceKind::ExternalName
    } else if headless {
        ServiceKind::Headless
    } else {
        ServiceKind::ClusterIp
    };

    let mut cluster_ips = SmallVec::new();
    for raw in raw_ips
        .into_iter()
        .filter(|ip| !ip.is_empty() && *ip != "None")
    {
        let ip: IpAddr = raw.parse().map_err(|_| ConvertError::BadClusterIp {
            object: object(),
            ip: raw.to_owned(),
        })?;
        cluster_ips.push(ip);
    }

    let mut ip_families = Vec::new();
    match spec.ip_families.as_deref() {
        Some(families) if !families.is_empty() => {
            for family in families {
                let parsed = IpFamily::parse(family).ok_or_else(|| ConvertError::BadIpFamily {
                    object: object(),
                    family: family.clone(),
                })?;
                if !ip_families.contains(&parsed) {
                    ip_families.push(parsed);
                }
            }
        }
        _ => {
            for ip in &cluster_ips {
                let family = IpFamily::of(ip);
                if !ip_families.contains(&family) {
                    ip_families.push(family);
                }
            }
        }
    }
    if ip_families.is_empty() {
        ip_families.push(IpFamily::IPv4);
    }

    let ports = spec
        .ports
        .iter()
        .flatten()
        .map(|p| crd::ServicePort {
            name: p.name.clone(),
            protocol: Some(non_empty(&p.protocol).unwrap_or("TCP").to_owned()),
            app_protocol: p.app_protocol.clone(),
            port: p.port,
        })
        .collect();

    let spec = ServiceSpec {
        kind,
        ports,
        ip_families,
        session_affinity: setting(
            non_empty(&spec.session_affinity).unwrap_or("None"),
            &SESSION_AFFINITIES,
        ),
        session_affinity_config: spec.session_affinity_config.as_ref().map(affinity_config),
        internal_traffic_policy: setting(
            non_empty(&spec.internal_traffic_policy).unwrap_or("Cluster"),
            &TRAFFIC_POLICIES,
        ),
        traffic_distribution: spec.traffic_distribution.clone(),
    };
    let info = ServiceInfo {
        cluster_ips,
        spec: spec.shared(),
    };
    Ok((
        ServiceKey::new(namespace, name),
        Object::Service(Arc::new(info)),
    ))
}

/// Converts a ServiceExport (either served version deserializes into this type).
///
/// `observed` is when and in which order the source first saw the export;
/// `metadata.creationTimestamp`, when present, replaces it entirely, so that
/// exports created in the same second fall back to cluster id order.
pub(crate) fn service_export(
    export: &crd::ServiceExport,
    observed: ExportAge,
) -> Result<(ServiceKey, Object), ConvertError> {
    let (namespace, name) = identity("ServiceExport", &export.metadata)?;
    let age = match &export.metadata.creation_timestamp {
        Some(t) => ExportAge {
            created: t.0.as_second(),
            seq: 0,
        },
        None => observed,
    };
    let switch = |annotation: &'static str| -> Result<Option<bool>, ConvertError> {
        let value = export
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(annotation));
        match value.map(String::as_str) {
            None => Ok(None),
            Some("true") => Ok(Some(true)),
            Some("false") => Ok(Some(false)),
            Some(other) => Err(ConvertError::BadSwitch {
                object: format!("ServiceExport {namespace}/{name}"),
                annotation,
                value: other.to_owned(),
            }),
        }
    };
    let info = ExportInfo {
        age,
        exported: Exported {
            labels: export.spec.exported_labels.clone(),
            annotations: export.spec.exported_annotations.clone(),
        }
        .shared(),
        clusterset_ip: switch(crd::ANNOTATION_CLUSTERSET_IP)?,
        pod_ips: switch(crd::ANNOTATION_POD_IPS)?,
    };
    Ok((
        ServiceKey::new(namespace, name),
        Object::Export(Arc::new(info)),
    ))
}

/// True for an EndpointSlice an MCS implementation made for an import
/// (`multicluster.kubernetes.io/service-name` without `kubernetes.io/service-name`):
/// it describes another cluster's endpoints, so sources skip it.
pub(crate) fn is_imported_slice(slice: &EndpointSlice) -> bool {
    let labels = slice.metadata.labels.as_ref();
    let has = |label: &str| labels.is_some_and(|l| l.contains_key(label));
    has(LABEL_MCS_SERVICE_NAME) && !has(LABEL_SERVICE_NAME)
}

/// Converts an EndpointSlice, keyed by the Service its `kubernetes.io/service-name` label names.
pub(crate) fn endpoint_slice(slice: &EndpointSlice) -> Result<(ServiceKey, Object), ConvertError> {
    let (namespace, name) = identity("EndpointSlice", &slice.metadata)?;
    let object = || format!("EndpointSlice {namespace}/{name}");
    let service = slice
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_SERVICE_NAME))
        .filter(|s| !s.is_empty())
        .ok_or_else(|| ConvertError::MissingServiceName { object: object() })?;
    let info = slice_endpoints(slice, &object())?;
    Ok((
        ServiceKey::new(namespace, service),
        Object::Slice(name.into(), Arc::new(info)),
    ))
}

/// The endpoints of an EndpointSlice; errors name it as `object`.
pub(crate) fn slice_endpoints(
    slice: &EndpointSlice,
    object: &str,
) -> Result<SliceInfo, ConvertError> {
    let object = || object.to_owned();
    let family = match slice.address_type.as_str() {
        "IPv4" => IpFamily::IPv4,
        "IPv6" => IpFamily::IPv6,
        "FQDN" => return Err(ConvertError::FqdnSlice { object: object() }),
        other => {
            return Err(ConvertError::UnknownAddressType {
                object: object(),
                address_type: other.to_owned(),
            });
        }
    };

    let mut endpoints = Vec::with_capacity(slice.endpoints.as_ref().map_or(0, Vec::len));
    for ep in slice.endpoints.iter().flatten() {
        let mut addresses = Vec::with_capacity(ep.addresses.len());
        for raw in &ep.addresses {
            let ip = raw
                .parse::<IpAddr>()
                .ok()
                .filter(|ip| IpFamily::of(ip) == family)
                .ok_or_else(|| ConvertError::BadAddress {
                    object: object(),
                    address: raw.clone(),
                    family,
                })?;
            addresses.push(ip);
        }
        // Kubernetes defines no meaning for addresses after the first.
        let Some(&address) = addresses.first() else {
            continue;
        };
        endpoints.push(Endpoint {
            address,
            hostname: ep.hostname.as_deref().map(Box::from),
            ready: ep.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true),
        });
    }
    let ports = slice
        .ports
        .iter()
        .flatten()
        .filter_map(|p| {
            Some(crd::ServicePort {
                name: p.name.clone().filter(|n| !n.is_empty()),
                protocol: Some(p.protocol.clone().unwrap_or_else(|| "TCP".into())),
                app_protocol: p.app_protocol.clone(),
                port: p.port?,
            })
        })
        .collect();
    Ok(SliceInfo { endpoints, ports })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn svc(v: serde_json::Value) -> Service {
        serde_json::from_value(v).unwrap()
    }

    fn slice(v: serde_json::Value) -> EndpointSlice {
        serde_json::from_value(v).unwrap()
    }

    fn service_info(v: serde_json::Value) -> (ServiceKey, Arc<ServiceInfo>) {
        match service(&svc(v)).unwrap() {
            (key, Object::Service(info)) => (key, info),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn cluster_ip_service_defaults() {
        let (key, info) = service_info(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web"},
            "spec": {"clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1", "fd00::1"],
                     "ports": [{"name": "http", "port": 80, "appProtocol": "http"},
                               {"port": 53, "protocol": "UDP"}]}
        }));
        assert_eq!(key, ServiceKey::new("default", "web"));
        assert_eq!(info.kind, ServiceKind::ClusterIp);
        assert_eq!(
            info.ports[..],
            [
                crd::ServicePort {
                    name: Some("http".into()),
                    protocol: Some("TCP".into()),
                    app_protocol: Some("http".into()),
                    port: 80
                },
                crd::ServicePort {
                    name: None,
                    protocol: Some("UDP".into()),
                    app_protocol: None,
                    port: 53
                },
            ]
        );
        assert_eq!(info.ip_families, vec![IpFamily::IPv4, IpFamily::IPv6]);
        assert_eq!(
            info.cluster_ips[..],
            [
                "10.0.0.1".parse::<IpAddr>().unwrap(),
                "fd00::1".parse().unwrap()
            ]
        );
        assert_eq!(info.session_affinity, "None");
        assert_eq!(info.internal_traffic_policy, "Cluster");
        assert_eq!(info.traffic_distribution, None);
        assert_eq!(info.session_affinity_config, None);
    }

    #[test]
    fn service_families_and_copied_fields() {
        let (_, info) = service_info(json!({
            "metadata": {"name": "web", "namespace": "prod"},
            "spec": {"clusterIP": "fd00::5", "ipFamilies": ["IPv6"],
                     "sessionAffinity": "ClientIP",
                     "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 30}},
                     "internalTrafficPolicy": "Local", "trafficDistribution": "PreferClose"}
        }));
        assert_eq!(info.ip_families, vec![IpFamily::IPv6]);
        assert_eq!(info.cluster_ips[..], ["fd00::5".parse::<IpAddr>().unwrap()]);
        assert_eq!(info.session_affinity, "ClientIP");
        assert_eq!(
            info.session_affinity_config
                .as_ref()
                .and_then(|c| c.client_ip.as_ref())
                .and_then(|c| c.timeout_seconds),
            Some(30)
        );
        assert_eq!(info.internal_traffic_policy, "Local");
        assert_eq!(info.traffic_distribution.as_deref(), Some("PreferClose"));

        // No spec at all: ClusterIP kind, IPv4, no IPs.
        let (_, info) = service_info(json!({"metadata": {"name": "bare"}}));
        assert_eq!(info.kind, ServiceKind::ClusterIp);
        assert_eq!(info.ip_families, vec![IpFamily::IPv4]);
        assert!(info.cluster_ips.is_empty() && info.ports.is_empty());
    }

    #[test]
    fn headless_and_external_name() {
        let (_, info) = service_info(json!({
            "metadata": {"name": "db", "namespace": "prod"},
            "spec": {"clusterIP": "None", "clusterIPs": ["None"], "ports": [{"port": 5432}]}
        }));
        assert_eq!(info.kind, ServiceKind::Headless);
        assert!(info.cluster_ips.is_empty());
        assert_eq!(info.ip_families, vec![IpFamily::IPv4]);

        let (_, info) = service_info(json!({
            "metadata": {"name": "ext", "namespace": "prod"},
            "spec": {"type": "ExternalName", "externalName": "example.com"}
        }));
        assert_eq!(info.kind, ServiceKind::ExternalName);
    }

    #[test]
    fn service_errors_name_the_object() {
        let err = service(&svc(json!({
            "metadata": {"name": "web", "namespace": "prod"},
            "spec": {"clusterIP": "10.0.0.x"}
        })))
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"Service prod/web: clusterIP "10.0.0.x" is not an IP address"#
        );
        let err = service(&svc(json!({
            "metadata": {"name": "web", "namespace": "prod"},
            "spec": {"ipFamilies": ["ipv4"]}
        })))
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"Service prod/web: unknown IP family "ipv4" in spec.ipFamilies"#
        );
        let err = service(&svc(json!({"metadata": {"namespace": "prod"}}))).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Service in namespace prod has no metadata.name"
        );
    }

    /// Service names are RFC 1035 labels, namespaces RFC 1123 labels.
    #[test]
    fn service_names_must_be_dns_labels() {
        let named = |ns: &str, name: &str| {
            service(&svc(json!({"metadata": {"name": name, "namespace": ns}})))
        };
        for (ns, name, field) in [
            ("prod", "Web", "metadata.name"),
            ("prod", "web_1", "metadata.name"),
            ("prod", "1web", "metadata.name"),
            ("prod", "web-", "metadata.name"),
            ("Prod", "web", "metadata.namespace"),
            ("prod.eu", "web", "metadata.namespace"),
        ] {
            let err = named(ns, name).unwrap_err().to_string();
            assert!(
                err.starts_with(&format!("Service {ns}/{name}: {field} "))
                    && err.contains("DNS label"),
                "{err}"
            );
        }
        assert!(named("prod", &"w".repeat(64)).is_err());
        assert!(named("prod", &"w".repeat(63)).is_ok());
        assert!(named("1-prod", "web-1").is_ok());
    }

    #[test]
    fn export_age_prefers_creation_timestamp() {
        let observed = ExportAge {
            created: 1000,
            seq: 7,
        };
        let export: crd::ServiceExport = serde_json::from_value(json!({
            "apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ServiceExport",
            "metadata": {"name": "web", "namespace": "prod",
                         "creationTimestamp": "2024-01-02T03:04:05Z"},
            "spec": {"exportedLabels": {"tier": "front"}, "exportedAnnotations": {"a": "b"}}
        }))
        .unwrap();
        let (key, obj) = service_export(&export, observed).unwrap();
        assert_eq!(key, ServiceKey::new("prod", "web"));
        let Object::Export(info) = obj else { panic!() };
        assert_eq!(
            info.age,
            ExportAge {
                created: 1_704_164_645,
                seq: 0
            }
        );
        assert_eq!(
            info.exported.labels.get("tier").map(String::as_str),
            Some("front")
        );
        assert_eq!(
            info.exported.annotations.get("a").map(String::as_str),
            Some("b")
        );

        let export: crd::ServiceExport = serde_json::from_value(json!({
            "metadata": {"name": "web"}, "spec": {}
        }))
        .unwrap();
        let (key, obj) = service_export(&export, observed).unwrap();
        assert_eq!(key, ServiceKey::new("default", "web"));
        let Object::Export(info) = obj else { panic!() };
        assert_eq!(info.age, observed);
        assert_eq!(*info.exported, Exported::default());
    }

    #[test]
    fn endpoint_slice_conversion() {
        let s = slice(json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "web-abc12", "namespace": "prod",
                         "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4",
            "endpoints": [
                {"addresses": ["10.1.0.1"], "hostname": "web-0"},
                {"addresses": ["10.1.0.2"], "conditions": {"ready": false}},
                {"addresses": ["10.1.0.3"], "conditions": {"serving": true}}
            ]
        }));
        assert!(!is_imported_slice(&s));
        let (key, obj) = endpoint_slice(&s).unwrap();
        assert_eq!(key, ServiceKey::new("prod", "web"));
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(
            obj,
            Object::Slice(
                "web-abc12".into(),
                Arc::new(SliceInfo {
                    endpoints: vec![
                        Endpoint {
                            address: ip("10.1.0.1"),
                            hostname: Some("web-0".into()),
                            ready: true
                        },
                        Endpoint {
                            address: ip("10.1.0.2"),
                            hostname: None,
                            ready: false
                        },
                        Endpoint {
                            address: ip("10.1.0.3"),
                            hostname: None,
                            ready: true
                        },
                    ],
                    ports: Vec::new(),
                })
            )
        );

        let s = slice(json!({
            "metadata": {"name": "web-v6",
                         "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv6", "endpoints": [{"addresses": ["fd00::7"]}]
        }));
        let (key, Object::Slice(_, info)) = endpoint_slice(&s).unwrap() else {
            panic!()
        };
        assert_eq!(key, ServiceKey::new("default", "web"));
        assert_eq!(info.endpoints[0].address, ip("fd00::7"));
    }

    #[test]
    fn endpoint_slice_errors_name_the_object() {
        let base = |addr_type: &str, addr: &str, labels: serde_json::Value| {
            slice(json!({
                "metadata": {"name": "web-abc12", "namespace": "prod", "labels": labels},
                "addressType": addr_type, "endpoints": [{"addresses": [addr]}]
            }))
        };
        let label = json!({"kubernetes.io/service-name": "web"});
        let msg = |s: EndpointSlice| endpoint_slice(&s).unwrap_err().to_string();
        assert_eq!(
            msg(base("IPv4", "10.0.0.x", label.clone())),
            r#"EndpointSlice prod/web-abc12: address "10.0.0.x" is not an IPv4 address"#
        );
        assert_eq!(
            msg(base("IPv4", "fd00::1", label.clone())),
            r#"EndpointSlice prod/web-abc12: address "fd00::1" is not an IPv4 address"#
        );
        assert_eq!(
            msg(base("IPv6", "10.0.0.1", label.clone())),
            r#"EndpointSlice prod/web-abc12: address "10.0.0.1" is not an IPv6 address"#
        );
        assert_eq!(
            msg(base("FQDN", "example.com", label.clone())),
            "EndpointSlice prod/web-abc12: FQDN EndpointSlices are not supported"
        );
        assert_eq!(
            msg(base("IPv5", "10.0.0.1", label)),
            r#"EndpointSlice prod/web-abc12: unknown addressType "IPv5""#
        );
        let unlabeled = base("IPv4", "10.0.0.1", json!({}));
        assert_eq!(
            msg(unlabeled),
            "EndpointSlice prod/web-abc12: missing label kubernetes.io/service-name"
        );
        let imported = base(
            "IPv4",
            "10.0.0.1",
            json!({"multicluster.kubernetes.io/service-name": "web"}),
        );
        assert!(is_imported_slice(&imported));
    }
}
