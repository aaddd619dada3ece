//! The Multi-Cluster Services API kinds (`multicluster.x-k8s.io`), as Rust types.
//!
//! Both served versions, `v1alpha1` and `v1beta1`, share one schema, so one macro
//! writes both modules from the same field list.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// API group of ServiceExport and ServiceImport.
pub const GROUP: &str = "multicluster.x-k8s.io";
/// Versions of [`GROUP`] this server understands.
pub const VERSIONS: [&str; 2] = ["v1alpha1", "v1beta1"];

/// Label naming the multicluster service an MCS EndpointSlice belongs to.
pub const LABEL_MCS_SERVICE_NAME: &str = "multicluster.kubernetes.io/service-name";
/// Label naming the cluster an MCS EndpointSlice's endpoints come from.
pub const LABEL_SOURCE_CLUSTER: &str = "multicluster.kubernetes.io/source-cluster";
/// Label that ties a plain Kubernetes EndpointSlice to its Service.
pub const LABEL_SERVICE_NAME: &str = "kubernetes.io/service-name";

/// A port of a ServiceImport (`ServicePort` without target/node ports).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServicePort {
    /// Port name; must be unique within the import when there are several.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `TCP`, `UDP` or `SCTP`; defaults to `TCP`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// Application protocol hint, as on a Service port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_protocol: Option<String>,
    /// The port number.
    pub port: i32,
}

/// One cluster that exports the service behind an import.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ClusterStatus {
    /// The cluster id.
    pub cluster: String,
}

/// Status of a ServiceExport: the `Valid`, `Ready` and `Conflict` conditions.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ServiceExportStatus {
    /// Conditions, one per type.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// Status of a ServiceImport: exporting clusters and conditions.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ServiceImportStatus {
    /// Clusters currently exporting the service.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<ClusterStatus>,
    /// Conditions such as `Ready`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

macro_rules! mcs_version {
    ($version:ident, $name:literal) => {
        #[doc = concat!("`multicluster.x-k8s.io/", $name, "` kinds.")]
        pub mod $version {
            use super::*;
            use k8s_openapi::api::core::v1::SessionAffinityConfig;
            use kube::CustomResource;
            use std::collections::BTreeMap;

            /// Marks the Service of the same namespace and name for export to the clusterset.
            #[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
            #[kube(group = "multicluster.x-k8s.io", version = $name, kind = "ServiceExport",
                   namespaced, status = "ServiceExportStatus", shortname = "svcex")]
            #[serde(rename_all = "camelCase")]
            pub struct ServiceExportSpec {
                /// Labels to carry onto the ServiceImport.
                #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
                pub exported_labels: BTreeMap<String, String>,
                /// Annotations to carry onto the ServiceImport.
                #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
                pub exported_annotations: BTreeMap<String, String>,
            }

            /// The aggregated view of a service exported by one or more clusters.
            #[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
            #[kube(group = "multicluster.x-k8s.io", version = $name, kind = "ServiceImport",
                   namespaced, status = "ServiceImportStatus", shortname = "svcim")]
            #[serde(rename_all = "camelCase")]
            pub struct ServiceImportSpec {
                /// Union of the exported ports.
                #[serde(default)]
                pub ports: Vec<ServicePort>,
                /// Clusterset VIPs, one per family, ordered like `ip_families`.
                #[serde(default, skip_serializing_if = "Vec::is_empty")]
                #[schemars(length(max = 2))]
                pub ips: Vec<String>,
                /// `ClusterSetIP` or `Headless`.
                #[serde(rename = "type")]
                pub type_: String,
                /// `None` or `ClientIP`.
                #[serde(default, skip_serializing_if = "Option::is_none")]
                pub session_affinity: Option<String>,
                /// Session affinity settings of the oldest export.
                #[serde(default, skip_serializing_if = "Option::is_none")]
                pub session_affinity_config: Option<SessionAffinityConfig>,
                /// Intersected IP families (`IPv4`, `IPv6`).
                #[serde(default, skip_serializing_if = "Vec::is_empty")]
                #[schemars(length(max = 2))]
                pub ip_families: Vec<String>,
                /// `Cluster` or `Local`.
                #[serde(default, skip_serializing_if = "Option::is_none")]
                pub internal_traffic_policy: Option<String>,
                /// Traffic distribution preference, as on a Service.
                #[serde(default, skip_serializing_if = "Option::is_none")]
                pub traffic_distribution: Option<String>,
            }
        }
    };
}

mcs_version!(v1alpha1, "v1alpha1");
mcs_version!(v1beta1, "v1beta1");
