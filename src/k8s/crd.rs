//! The Multi-Cluster Services API kinds (`multicluster.x-k8s.io`), as Rust types.
//!
//! Both versions, `v1alpha1` and `v1beta1`, share one schema, so one Rust
//! type per kind reads and writes either: the version is the object's own
//! (`apiVersion`), chosen per API server at run time ([`McsVersion`],
//! `k8s/served_versions.rs`), where kube's derive fixes one per type. The
//! derive still writes the CRDs' schema (`crds`), from the same fields.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceDefinitionVersion,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use kube::core::{DynamicResourceScope, TypeMeta};
use kube::{CustomResource, CustomResourceExt, Resource};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::model::SessionAffinityConfig;
pub use crate::model::port::ServicePort;
pub use crate::model::{ANNOTATION_CLUSTERSET_IP, ANNOTATION_POD_IPS};

// The CRD schema of `model::port::ServicePort`, which is what is read and
// written: the schema is Kubernetes's business and is written here, so that
// `model/` needs no schema crate (ARCHITECTURE.md, "Folders and what each
// may use"). Fields, names and docs as that type's (the doc is the schema's
// description; tests/it/crds.rs compares the result with crds.yaml).
/// A port of a ServiceImport (`ServicePort` without target/node ports).
#[derive(JsonSchema)]
#[schemars(rename = "ServicePort")]
#[serde(rename_all = "camelCase")]
pub struct ServicePortSchema {
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

/// API group of ServiceExport and ServiceImport.
pub const GROUP: &str = "multicluster.x-k8s.io";

/// A version of [`GROUP`] this server reads and writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum McsVersion {
    /// Served by every mcs-api release (the only one before v0.5).
    V1alpha1,
    /// mcs-api v0.5's stored version; preferred where served.
    #[default]
    V1beta1,
}

impl McsVersion {
    /// Every version, in the order a CRD lists them.
    pub const ALL: [Self; 2] = [Self::V1alpha1, Self::V1beta1];
    /// The version Kubernetes stores the kinds in (the others are served too).
    pub const STORAGE: Self = Self::V1beta1;

    /// `v1alpha1`, `v1beta1`.
    pub fn name(self) -> &'static str {
        match self {
            Self::V1alpha1 => "v1alpha1",
            Self::V1beta1 => "v1beta1",
        }
    }

    /// `multicluster.x-k8s.io/<version>`.
    pub fn api_version(self) -> String {
        format!("{GROUP}/{}", self.name())
    }

    /// The version an `apiVersion` names, if it is one of [`GROUP`]'s.
    pub fn of_api_version(api_version: &str) -> Option<Self> {
        let version = api_version.strip_prefix(GROUP)?.strip_prefix('/')?;
        Self::ALL.into_iter().find(|v| v.name() == version)
    }
}

/// The ServiceExport and ServiceImport CustomResourceDefinitions, generated
/// from these types: one CRD per kind serving every version of
/// [`McsVersion::ALL`] (in that order), stored as [`McsVersion::STORAGE`].
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        spec_optional(every_version(ServiceExportCrd::crd())),
        every_version(ServiceImportCrd::crd()),
    ]
}

/// The derived CRD's one version, once per [`McsVersion`]: the versions
/// share the schema (titled by the kind, not the derive's type).
fn every_version(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    let mut derived = crd
        .spec
        .versions
        .pop()
        .expect("the derive writes one version");
    let schema = derived
        .schema
        .as_mut()
        .and_then(|s| s.open_api_v3_schema.as_mut());
    if let Some(schema) = schema {
        schema.title = Some(crd.spec.names.kind.clone());
    }
    crd.spec.versions = McsVersion::ALL
        .into_iter()
        .map(|version| CustomResourceDefinitionVersion {
            name: version.name().to_owned(),
            storage: version == McsVersion::STORAGE,
            ..derived.clone()
        })
        .collect();
    crd
}

/// A ServiceExport needs no `spec` (KEP-1645's examples have none, and
/// upstream mcs-api's CRD does not require one), but kube-derive marks it
/// required: an API server would refuse the exports users write (422).
fn spec_optional(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    for version in &mut crd.spec.versions {
        let schema = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut());
        if let Some(schema) = schema {
            if let Some(required) = schema.required.as_mut() {
                required.retain(|field| field != "spec");
            }
            if schema.required.as_ref().is_some_and(Vec::is_empty) {
                schema.required = None;
            }
        }
    }
    crd
}

/// [`crds`] as multi-document YAML, ready for `kubectl apply -f -`.
pub fn crds_yaml() -> String {
    let mut out = String::from(
        "# ServiceExport and ServiceImport CustomResourceDefinitions (multicluster.x-k8s.io).\n\
         # Generated by `clusterset-dns crds` from src/k8s/crd.rs; do not edit.\n",
    );
    for crd in crds() {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&crd).expect("a CRD serializes to YAML"));
    }
    out
}

/// Label naming the multicluster service an MCS EndpointSlice belongs to.
pub const LABEL_MCS_SERVICE_NAME: &str = "multicluster.kubernetes.io/service-name";
/// Label naming the cluster an MCS EndpointSlice's endpoints come from.
pub const LABEL_SOURCE_CLUSTER: &str = "multicluster.kubernetes.io/source-cluster";
/// Label that ties a plain Kubernetes EndpointSlice to its Service.
pub const LABEL_SERVICE_NAME: &str = "kubernetes.io/service-name";

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

/// Status of a ServiceImport: exporting clusters, conditions, and whether
/// MCS EndpointSlices are written for it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ServiceImportStatus {
    /// Clusters currently exporting the service.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<ClusterStatus>,
    /// Conditions such as `Ready`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Whether MCS EndpointSlices are written for this import (mcs-api v0.5,
    /// KEP-1645): consumers such as Gateway API implementations read the
    /// endpoints from them only when `Present`.
    #[serde(
        default,
        rename = "endpointSliceObjects",
        skip_serializing_if = "Option::is_none"
    )]
    pub endpoint_slice_objects: Option<EndpointSliceObjects>,
}

// `ServiceImport.status.endpointSliceObjects` (no doc comment: the
// schema's description is the field's).
#[allow(missing_docs)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum EndpointSliceObjects {
    /// MCS EndpointSlices are written for the import.
    Present,
    /// None are written for it.
    Absent,
}

/// Marks the Service of the same namespace and name for export to the clusterset.
// `ServiceExportCrd`, the derive's type, only writes the CRD.
// `spec` may be absent (most exports have nothing to say): see Deserialize below.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, JsonSchema)]
#[kube(
    group = "multicluster.x-k8s.io",
    version = "v1beta1",
    kind = "ServiceExport",
    root = "ServiceExportCrd",
    namespaced,
    status = "ServiceExportStatus",
    shortname = "svcex",
    doc = "Declares that the Service of the same namespace and name is to be consumable from the other clusters of the clusterset."
)]
#[serde(rename_all = "camelCase")]
pub struct ServiceExportSpec {
    /// Labels to carry onto the ServiceImport.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub exported_labels: BTreeMap<String, String>,
    /// Annotations to carry onto the ServiceImport.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub exported_annotations: BTreeMap<String, String>,
}

impl<'de> Deserialize<'de> for ServiceExportSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Fields {
            #[serde(default)]
            exported_labels: BTreeMap<String, String>,
            #[serde(default)]
            exported_annotations: BTreeMap<String, String>,
        }
        // A missing or null `spec` reads as an empty one.
        Ok(Option::<Fields>::deserialize(d)?
            .map(|f| Self {
                exported_labels: f.exported_labels,
                exported_annotations: f.exported_annotations,
            })
            .unwrap_or_default())
    }
}

/// The aggregated view of a service exported by one or more clusters.
// `ServiceImportCrd`, the derive's type, only writes the CRD.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "multicluster.x-k8s.io",
    version = "v1beta1",
    kind = "ServiceImport",
    root = "ServiceImportCrd",
    namespaced,
    status = "ServiceImportStatus",
    shortname = "svcim",
    doc = "A service imported from the clusters of the clusterset that export it.",
    printcolumn(
        name = "Type",
        type_ = "string",
        json_path = ".spec.type",
        description = "ClusterSetIP or Headless"
    ),
    printcolumn(
        name = "IP",
        type_ = "string",
        json_path = ".spec.ips",
        description = "Clusterset VIPs"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
// Each `printcolumn(...)` has its own `type_`: not a repeated attribute.
#[allow(clippy::duplicated_attributes)]
pub struct ServiceImportSpec {
    /// Union of the exported ports.
    #[serde(default)]
    #[schemars(with = "Vec<ServicePortSchema>")]
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
    #[schemars(with = "Option<k8s_openapi::api::core::v1::SessionAffinityConfig>")]
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

/// One Rust type per MCS kind, at whichever version its object carries.
macro_rules! mcs_kind {
    ($(#[$doc:meta])* $kind:ident, $plural:literal, $spec:ty, $status:ty) => {
        $(#[$doc])*
        #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
        pub struct $kind {
            /// `apiVersion` and `kind`, as read or as built ([`Self::at`]).
            #[serde(flatten, default)]
            pub types: Option<TypeMeta>,
            /// Object metadata.
            #[serde(default)]
            pub metadata: ObjectMeta,
            /// The spec, the same at every version.
            #[serde(default)]
            pub spec: $spec,
            /// The status, the same at every version.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub status: Option<$status>,
        }

        impl $kind {
            /// An object to write at `version`.
            pub fn at(version: McsVersion, metadata: ObjectMeta, spec: $spec) -> Self {
                Self {
                    types: Some(TypeMeta {
                        api_version: version.api_version(),
                        kind: stringify!($kind).to_owned(),
                    }),
                    metadata,
                    spec,
                    status: None,
                }
            }
        }

        impl Resource for $kind {
            type DynamicType = McsVersion;
            // Namespaced: `Api::namespaced_with` takes the version only for this scope.
            type Scope = DynamicResourceScope;

            fn kind(_: &McsVersion) -> Cow<'_, str> {
                stringify!($kind).into()
            }
            fn group(_: &McsVersion) -> Cow<'_, str> {
                GROUP.into()
            }
            fn version(version: &McsVersion) -> Cow<'_, str> {
                version.name().into()
            }
            fn plural(_: &McsVersion) -> Cow<'_, str> {
                $plural.into()
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

mcs_kind!(
    /// A ServiceExport, at any [`McsVersion`].
    ServiceExport,
    "serviceexports",
    ServiceExportSpec,
    ServiceExportStatus
);
mcs_kind!(
    /// A ServiceImport, at any [`McsVersion`].
    ServiceImport,
    "serviceimports",
    ServiceImportSpec,
    ServiceImportStatus
);
