//! The contents of the EndpointSlices this cluster writes: its own endpoints
//! as published on the broker, and the MCS EndpointSlices in the member
//! cluster, one set per exporting cluster, this one included (KEP-1645,
//! "Using EndpointSlice objects to track endpoints").

use std::sync::Arc;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource;

use crate::engine::ClusterInputs;
use crate::k8s::crd::v1alpha1::ServiceImport;
use crate::k8s::records;
use crate::model::import::ImportCluster;
use crate::model::port::names_backed_port;
use crate::model::{
    Endpoint, ExportInfo, IpFamily, ServiceInfo, ServiceKey, ServiceKind, SliceInfo,
};

/// What a cluster publishes for its valid export, by source slice name: its
/// Service's ClusterIP (one slice per family, with the Service's ports) when
/// a ClusterIP Service does not publish pod IPs, else its non-empty
/// EndpointSlices. `pod_ips` is the global default of the pod-IP switch.
pub fn published(
    export: &ExportInfo,
    service: &ServiceInfo,
    inputs: &ClusterInputs,
    pod_ips: bool,
) -> Vec<(String, Arc<SliceInfo>)> {
    let pod_ips = export.pod_ips.unwrap_or(pod_ips);
    if service.kind == ServiceKind::ClusterIp && !pod_ips {
        return service
            .cluster_ips
            .iter()
            .map(|ip| {
                let endpoint = Endpoint {
                    address: *ip,
                    hostname: None,
                    ready: true,
                };
                let slice = SliceInfo {
                    endpoints: vec![endpoint],
                    ports: service.ports.to_vec(),
                };
                (format!("clusterip-{}", IpFamily::of(ip)), Arc::new(slice))
            })
            .collect();
    }
    inputs
        .slices
        .iter()
        .filter(|(_, s)| !s.endpoints.is_empty())
        .map(|(name, s)| (name.to_string(), s.clone()))
        .collect()
}

/// The member's MCS EndpointSlices for one exporting cluster of an import,
/// by name: `sources` (that cluster's published slices) with only the ports
/// the cluster backs (KEP-1645 "Service Port": a data plane maps the import's
/// ports to endpoint ports by name, so a port defined differently must not
/// appear), owned by the local ServiceImport so they go when it goes.
pub fn member_slices<'a>(
    key: &'a ServiceKey,
    cluster: &'a ImportCluster,
    sources: impl IntoIterator<Item = (&'a str, &'a Arc<SliceInfo>)> + 'a,
    owner: &'a OwnerReference,
) -> impl Iterator<Item = (String, EndpointSlice)> + 'a {
    sources
        .into_iter()
        .filter(|(_, slice)| !slice.endpoints.is_empty())
        .map(move |(source, slice)| {
            let backed = |p: &crate::model::port::ServicePort| {
                names_backed_port(&cluster.ports, p.name.as_deref())
            };
            let filtered;
            let slice = if slice.ports.iter().all(backed) {
                &**slice
            } else {
                filtered = SliceInfo {
                    endpoints: slice.endpoints.clone(),
                    ports: slice.ports.iter().filter(|p| backed(p)).cloned().collect(),
                };
                &filtered
            };
            let name = records::mirror_slice_name(key, &cluster.cluster, source);
            let mut object = records::slice_object(
                name.clone(),
                Some(key.namespace.to_string()),
                key,
                &cluster.cluster,
                slice,
            );
            object.metadata.owner_references = Some(vec![owner.clone()]);
            (name, object)
        })
}

/// The owner reference of the member's ServiceImport of `key`, whose `uid` is given.
pub fn import_owner(key: &ServiceKey, uid: String) -> OwnerReference {
    OwnerReference {
        api_version: ServiceImport::api_version(&()).into_owned(),
        kind: ServiceImport::kind(&()).into_owned(),
        name: key.name.to_string(),
        uid,
        ..OwnerReference::default()
    }
}
