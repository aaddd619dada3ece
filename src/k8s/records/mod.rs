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
//!
//! [`build`] makes the objects this controller writes, [`read`] turns what
//! it reads back into facts; this module holds what both agree on: the
//! labels, annotations and names.

pub mod build;
pub mod read;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::ServiceKey;

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
/// Annotation of a broker export record: when the broker first saw the
/// export (RFC 3339, whole seconds). Set by its cluster when it creates the
/// record, within a minute of the API server's `creationTimestamp`, and never
/// changed after (broker-ownership-policy.yaml holds members to both); a
/// restore from backup keeps it where `creationTimestamp` is set anew.
pub const ANNOTATION_FIRST_SEEN: &str = "clusterset-dns.io/first-seen";
/// Annotation of a member's ServiceImport: the import's ports each exporting
/// cluster backs, as JSON (`{"east":["tcp:42/TCP"],"west":[]}`).
pub const ANNOTATION_CLUSTER_PORTS: &str = "clusterset-dns.io/cluster-ports";
/// Annotation of a member's ServiceImport: the name of its derived Service
/// (as Cilium writes it; ARCHITECTURE.md, "Derived Services").
pub const ANNOTATION_DERIVED_SERVICE: &str = "multicluster.kubernetes.io/derived-service";
/// Annotation of a derived Service that could not take the clusterset VIPs
/// (`--derived-services clusterset`): why the API server refused them. The
/// Service then has a ClusterIP of the member's own range, which the member
/// answers; kept on the object so that a restart keeps that ClusterIP too.
pub const ANNOTATION_NOT_PINNED: &str = "clusterset-dns.io/not-pinned";
/// Label selector of the local cluster's Services that hold its endpoints:
/// not the derived Services this controller writes (whose slices are MCS
/// slices, read from the broker). `!=` also matches Services without the label.
pub const OWN_SLICES_SELECTOR: &str =
    "kubernetes.io/service-name,endpointslice.kubernetes.io/managed-by!=clusterset-dns.io";
/// Label selector of the objects this controller writes in member clusters.
pub const MANAGED_SELECTOR: &str = "app.kubernetes.io/managed-by=clusterset-dns.io";
/// Label selector of the EndpointSlices this controller writes.
pub const MANAGED_SLICES_SELECTOR: &str =
    "endpointslice.kubernetes.io/managed-by=clusterset-dns.io";

/// Label selector of the broker's export and VIP records (those with a
/// role): a replica's watch of the broker's ServiceImports sees nothing else
/// (issue 46, item 4).
pub const BROKER_RECORDS_SELECTOR: &str =
    "app.kubernetes.io/managed-by=clusterset-dns.io,clusterset-dns.io/role";
/// Label selector of the broker's EndpointSlices: the copies this controller
/// wrote of some cluster's slices, and nothing else.
pub const BROKER_SLICES_SELECTOR: &str = "endpointslice.kubernetes.io/managed-by=clusterset-dns.io,multicluster.kubernetes.io/source-cluster";

/// What a ServiceImport on the broker stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// One cluster's export of a service.
    Export,
    /// The clusterset-wide agreement on a service's VIPs.
    Import,
}

impl Role {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Role::Export => "export",
            Role::Import => "import",
        }
    }
}

/// The global defaults of the two per-export switches
/// (`clusterset-dns.io/use-clusterset-ip`, `clusterset-dns.io/use-pod-ips`).
#[derive(Clone, Copy, Debug)]
pub struct SwitchDefaults {
    /// Whether an import gets clusterset VIPs.
    pub clusterset_ip: bool,
    /// Whether slices of a ClusterIP service carry pod IPs.
    pub pod_ips: bool,
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

/// Name of the derived Service of `key` in a member: `derived-` and a hash,
/// a DNS-1035 label no longer than 24 characters whatever the service's name
/// (the mcs-api controller's shape), which the member-side policy
/// (`endpointslice-policy.yaml`) can recognise.
pub fn derived_service_name(key: &ServiceKey) -> String {
    hashed_name("derived", &[key.name()])
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashed_names_are_valid_and_distinct() {
        let long = "x".repeat(300);
        let a = hashed_name(&long, &["a.b", "c"]);
        let b = hashed_name(&long, &["a", "b.c"]);
        assert!(a.len() <= 253 && a != b);
        assert_eq!(vip_record_name(&ServiceKey::new("ns", "svc")), "svc.ns");
    }

    /// Whether `labels` satisfy `selector`, whose terms are `key=value` or
    /// `key` (exists), the only forms the broker selectors use.
    fn selects(selector: &str, labels: &BTreeMap<String, String>) -> bool {
        selector.split(',').all(|term| match term.split_once('=') {
            Some((key, value)) => labels.get(key).is_some_and(|v| v == value),
            None => labels.contains_key(term),
        })
    }

    /// Issue 46, item 4: the broker watches, narrowed by label, still see
    /// every record and slice this controller writes there.
    #[test]
    fn the_broker_selectors_match_what_is_written_there() {
        use crate::engine::aggregate::tests::{export, service, slice};
        use crate::k8s::crd::McsVersion;
        use crate::k8s::records::build::{export_record, slice_object, vip_record};
        let key = ServiceKey::new("shop", "web");
        let service = service(&["10.0.0.1"], &[("http", 80)]);
        let defaults = SwitchDefaults {
            clusterset_ip: true,
            pod_ips: false,
        };
        let export = export_record(
            McsVersion::V1beta1,
            &key,
            "east",
            jiff::Timestamp::UNIX_EPOCH,
            &export(1),
            &service,
            defaults,
        );
        let vips = vip_record(McsVersion::V1beta1, &key, &["243.0.0.1".parse().unwrap()]);
        for record in [export, vips] {
            let labels = record.metadata.labels.unwrap_or_default();
            assert!(selects(BROKER_RECORDS_SELECTOR, &labels), "{labels:?}");
        }
        let copy = slice_object(
            "s".into(),
            None,
            &key,
            "east",
            &slice(&[("10.1.0.1", None, true)]),
        );
        let labels = copy.metadata.labels.unwrap_or_default();
        assert!(selects(BROKER_SLICES_SELECTOR, &labels), "{labels:?}");
        let mut unlabelled = labels.clone();
        unlabelled.remove(LABEL_SLICE_MANAGED_BY);
        assert!(!selects(BROKER_SLICES_SELECTOR, &unlabelled));
    }
}
