//! The derived Service of an import in this member (ARCHITECTURE.md,
//! "Derived Services"): what it should be, given the mode of
//! `--derived-services`, the import, and the one this controller wrote
//! before ([`DerivedKept`]). Pure; [`super::plan`] turns it into a write.

use std::net::IpAddr;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use super::caches::DerivedKept;
use crate::k8s::records::{self, ANNOTATION_NOT_PINNED};
use crate::model::derived::DerivedServices;
use crate::model::import::Import;
use crate::model::{ImportType, IpFamily, ServiceKey};

/// What to do about the derived Service of a service.
#[derive(Debug, PartialEq)]
pub(crate) enum Desired {
    /// None should exist: this one's is deleted, if any.
    Absent,
    /// Leave it as it is: the clusterset VIPs it is to hold are not agreed yet.
    Unchanged,
    /// Delete it, to be created again: a ClusterIP or family it holds must
    /// change, and the API server lets neither change in place.
    Replace,
    /// This Service.
    Present(Box<Service>),
}

/// The derived Service `key` should have in this member, owned by `owner`
/// (its ServiceImport), given the one written before (`kept`).
pub(crate) fn desired(
    mode: DerivedServices,
    key: &ServiceKey,
    import: Option<&Import>,
    kept: Option<&DerivedKept>,
    owner: Option<&OwnerReference>,
) -> Desired {
    let (Some(import), Some(owner)) = (import, owner) else {
        return Desired::Absent;
    };
    // Headless imports answer pod IPs: nothing to route (KEP-1645, "DNS").
    if mode == DerivedServices::Off
        || import.type_ != ImportType::ClusterSetIP
        || import.local_families.is_empty()
    {
        return Desired::Absent;
    }
    let families = &import.local_families;
    let held = |ips: &[IpAddr]| ips.iter().map(IpFamily::of).eq(families.iter().copied());
    // The ClusterIPs to pin, and why none are pinned where the VIPs were refused.
    let (ips, not_pinned): (Vec<IpAddr>, Option<&str>) = match kept {
        // Refused before: kept as it is, so its ClusterIP (what this member
        // answers) does not move; deleting it tries the VIPs again.
        Some(kept) if mode == DerivedServices::Clusterset && kept.not_pinned.is_some() => {
            (kept.ips.to_vec(), kept.not_pinned.as_deref())
        }
        _ if mode == DerivedServices::Clusterset && import.clusterset_ip => {
            let vips: Vec<IpAddr> = import.local_vips().collect();
            if !held(&vips) {
                return Desired::Unchanged;
            }
            (vips, None)
        }
        // Pinned to the VIPs before (`clusterset`, now `per-cluster`).
        Some(kept)
            if mode == DerivedServices::PerCluster
                && !kept.ips.is_empty()
                && kept.ips.iter().copied().eq(import.local_vips()) =>
        {
            return Desired::Replace;
        }
        // Per cluster (or an import without VIPs): the API server allocates
        // once, and the allocated ClusterIPs are kept.
        Some(kept) => (kept.ips.to_vec(), None),
        None => (Vec::new(), None),
    };
    if let Some(kept) = kept
        && (!held(&kept.ips) || (!ips.is_empty() && *ips != *kept.ips))
    {
        return Desired::Replace;
    }
    let service = records::build::derived_service(
        key,
        &import.ports,
        families,
        owner.clone(),
        &ips,
        not_pinned,
    );
    Desired::Present(Box::new(service))
}

/// Whether `service` is planned with pinned ClusterIPs (the clusterset VIPs).
pub(crate) fn is_pinned(service: &Service) -> bool {
    let pinned = service.spec.as_ref().and_then(|s| s.cluster_ips.as_ref());
    let refused = service.metadata.annotations.as_ref();
    pinned.is_some_and(|ips| !ips.is_empty())
        && !refused.is_some_and(|a| a.contains_key(ANNOTATION_NOT_PINNED))
}

/// `service` without its pinned ClusterIPs, for the API server to allocate
/// them, noting why the pinned ones were refused (`why`).
pub(crate) fn unpinned(mut service: Service, why: &str) -> Service {
    if let Some(spec) = &mut service.spec {
        spec.cluster_ip = None;
        spec.cluster_ips = None;
    }
    let annotations = service.metadata.annotations.get_or_insert_default();
    annotations.insert(ANNOTATION_NOT_PINNED.into(), why.into());
    service
}
