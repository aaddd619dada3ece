//! The contents of the EndpointSlices this cluster writes: its own endpoints
//! as published on the broker, and the MCS EndpointSlices in the member
//! cluster, one set per exporting cluster, this one included (KEP-1645,
//! "Using EndpointSlice objects to track endpoints").

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Resource;

use super::version::fingerprint;
use crate::engine::ClusterInputs;
use crate::k8s::crd::{EndpointSliceObjects, LABEL_SERVICE_NAME};
use crate::k8s::crd::{McsVersion, ServiceImport};
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
pub(crate) fn published(
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

/// One EndpointSlice this cluster writes, before it is built. Building and
/// digesting every exporting cluster's slices of a service whenever one of
/// them changed was three quarters of a member's CPU under churn at 255
/// clusters (`bench/README.md`, "Kubernetes mode across clusters"): the
/// writer compares [`Plan::recipe`] with the one the kept slice was last
/// found equal to ([`Matched`]) and builds only where they differ.
pub(crate) struct Plan<'a> {
    /// The slice's name.
    pub name: String,
    key: &'a ServiceKey,
    cluster: &'a str,
    /// The source slice's name in its cluster.
    source: &'a str,
    slice: Cow<'a, SliceInfo>,
    /// A member's MCS slice: owned by the local ServiceImport, in the
    /// service's namespace. None: a broker slice.
    owner: Option<&'a OwnerReference>,
    /// A member's MCS slice backing the derived Service of this name.
    derived: Option<&'a str>,
}

impl Plan<'_> {
    /// A fingerprint of everything the slice is built from: equal recipes
    /// build equal slices.
    pub(crate) fn recipe(&self) -> u64 {
        let owner = self.owner.map(|o| (&o.uid, &o.name));
        let derived = self.derived;
        fingerprint(&(
            self.key,
            self.cluster,
            self.source,
            &*self.slice,
            owner,
            derived,
        ))
    }

    /// The slice.
    pub(crate) fn build(&self) -> EndpointSlice {
        let (key, cluster) = (self.key, self.cluster);
        let name = self.name.clone();
        match self.owner {
            Some(owner) => {
                let namespace = Some(key.namespace().to_string());
                let mut object =
                    records::build::slice_object(name, namespace, key, cluster, &self.slice);
                object.metadata.owner_references = Some(vec![owner.clone()]);
                if let Some(derived) = self.derived {
                    // What kube-proxy load-balances the derived Service's
                    // ClusterIP over (ARCHITECTURE.md, "Derived Services").
                    let labels = object.metadata.labels.get_or_insert_default();
                    labels.insert(LABEL_SERVICE_NAME.into(), derived.into());
                }
                object
            }
            None => {
                let mut object =
                    records::build::slice_object(name, None, key, cluster, &self.slice);
                kube::ResourceExt::annotations_mut(&mut object)
                    .insert(records::ANNOTATION_SOURCE_SLICE.into(), self.source.into());
                object
            }
        }
    }
}

/// The recipe a kept slice was last found equal to (0: none yet). Kept with
/// the slice's version in the writer's store, so a new version (someone
/// else's edit included) starts unmatched and is compared in full.
#[derive(Debug, Default)]
pub(crate) struct Matched(AtomicU64);

impl Matched {
    /// Whether the kept slice was found equal to what `recipe` builds.
    pub(crate) fn is(&self, recipe: u64) -> bool {
        recipe != 0 && self.0.load(Ordering::Relaxed) == recipe
    }

    /// Notes that the kept slice is what `recipe` builds.
    pub(crate) fn set(&self, recipe: u64) {
        self.0.store(recipe, Ordering::Relaxed);
    }
}

/// The broker slices of this cluster's export of `key` from its
/// [`published`] slices.
pub(crate) fn broker_plans<'a>(
    key: &'a ServiceKey,
    cluster: &'a str,
    published: &'a [(String, Arc<SliceInfo>)],
) -> impl Iterator<Item = Plan<'a>> + 'a {
    published.iter().map(move |(source, slice)| Plan {
        name: records::broker_slice_name(key, cluster, source),
        key,
        cluster,
        source,
        slice: Cow::Borrowed(&**slice),
        owner: None,
        derived: None,
    })
}

/// The member's MCS EndpointSlices for one exporting cluster of an import:
/// `sources` (that cluster's published slices) with only the ports the
/// cluster backs (KEP-1645 "Service Port": a data plane maps the import's
/// ports to endpoint ports by name, so a port defined differently must not
/// appear), owned by the local ServiceImport so they go when it goes, and
/// labelled for the `derived` Service where there is one.
pub(crate) fn member_plans<'a>(
    key: &'a ServiceKey,
    cluster: &'a ImportCluster,
    sources: impl IntoIterator<Item = (&'a str, &'a Arc<SliceInfo>)> + 'a,
    owner: &'a OwnerReference,
    derived: Option<&'a str>,
) -> impl Iterator<Item = Plan<'a>> + 'a {
    sources
        .into_iter()
        .filter(|(_, slice)| !slice.endpoints.is_empty())
        .map(move |(source, slice)| {
            let backed = |p: &crate::model::port::ServicePort| {
                names_backed_port(&cluster.ports, p.name.as_deref())
            };
            let slice = if slice.ports.iter().all(backed) {
                Cow::Borrowed(&**slice)
            } else {
                Cow::Owned(SliceInfo {
                    endpoints: slice.endpoints.clone(),
                    ports: slice.ports.iter().filter(|p| backed(p)).cloned().collect(),
                })
            };
            Plan {
                name: records::mirror_slice_name(key, &cluster.cluster, source),
                key,
                cluster: &cluster.cluster,
                source,
                slice,
                owner: Some(owner),
                derived,
            }
        })
}

/// `status.endpointSliceObjects` of every ServiceImport this program writes
/// (mcs-api v0.5, KEP-1645): [`member_slices`] are written for every
/// exporting cluster of every import, whatever `--pod-ips` and the
/// exports' `clusterset-dns.io/use-pod-ips` say (the switch only chooses
/// whether a ClusterIP Service's slices carry its pod IPs or its
/// ClusterIPs). It stays `Present` while no cluster has a ready endpoint
/// (or every exporting cluster is dead): the slices are then absent because
/// there is nothing to route to, and a consumer that fell back to the
/// import's VIPs or reported "no EndpointSlices synced" would be wrong.
pub(crate) const ENDPOINT_SLICE_OBJECTS: EndpointSliceObjects = EndpointSliceObjects::Present;

/// The owner reference of the member's ServiceImport of `key`, whose `uid`
/// is given, at the `version` the local cluster serves it at (the garbage
/// collector finds the owner through that version).
pub(crate) fn import_owner(version: McsVersion, key: &ServiceKey, uid: String) -> OwnerReference {
    OwnerReference {
        api_version: ServiceImport::api_version(&version).into_owned(),
        kind: ServiceImport::kind(&version).into_owned(),
        name: key.name().to_string(),
        uid,
        ..OwnerReference::default()
    }
}

/// Makes an object planned before a new import's write answered its uid (a
/// member's MCS EndpointSlice, the derived Service) owned by the
/// ServiceImport of `uid`.
pub(crate) fn set_owner_uid(meta: &mut ObjectMeta, uid: &str) {
    for owner in meta.owner_references.iter_mut().flatten() {
        if owner.uid != uid {
            owner.uid = uid.to_owned();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;
    use std::collections::BTreeMap;
    use std::net::IpAddr;

    use k8s_openapi::api::discovery::v1::EndpointPort;
    use smallvec::smallvec;

    use super::*;
    use crate::k8s::crd::{LABEL_MCS_SERVICE_NAME, LABEL_SOURCE_CLUSTER};
    use crate::k8s::records::{LABEL_SLICE_MANAGED_BY, MANAGER};
    use crate::model::port::ServicePort;
    use crate::model::{ExportAge, Exported, ServiceSpec};
    use crate::writeback::version::Owned;

    fn port(name: &str, port: i32) -> ServicePort {
        ServicePort {
            name: Some(name.into()),
            protocol: Some("TCP".into()),
            app_protocol: None,
            port,
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn endpoint(address: &str) -> Endpoint {
        Endpoint {
            address: ip(address),
            hostname: None,
            ready: true,
        }
    }

    fn export(pod_ips: Option<bool>) -> ExportInfo {
        ExportInfo {
            age: ExportAge { created: 0, seq: 0 },
            exported: Exported::default().shared(),
            clusterset_ip: None,
            pod_ips,
        }
    }

    /// A dual-stack Service of `kind` with ports http 80 and metrics 9090.
    fn service(kind: ServiceKind) -> ServiceInfo {
        let cluster_ips = match kind {
            ServiceKind::ClusterIp => smallvec![ip("10.96.0.10"), ip("fd00::10")],
            _ => smallvec![],
        };
        ServiceInfo {
            cluster_ips,
            spec: Arc::new(ServiceSpec {
                kind,
                ports: Arc::from([port("http", 80), port("metrics", 9090)]),
                ip_families: vec![IpFamily::IPv4, IpFamily::IPv6],
                session_affinity: Cow::Borrowed("None"),
                session_affinity_config: None,
                internal_traffic_policy: Cow::Borrowed("Cluster"),
                traffic_distribution: None,
            }),
        }
    }

    /// A slice of pod IPs with the Service's target ports.
    fn pods() -> Arc<SliceInfo> {
        Arc::new(SliceInfo {
            endpoints: vec![endpoint("10.1.0.5"), endpoint("10.1.0.6")],
            ports: vec![port("http", 8080), port("metrics", 9100)],
        })
    }

    /// The cluster's EndpointSlices: `web-abc` with pods, `web-empty` without.
    fn inputs() -> ClusterInputs {
        let mut inputs = ClusterInputs::default();
        inputs.slices.insert("web-abc".into(), pods());
        inputs
            .slices
            .insert("web-empty".into(), Arc::new(SliceInfo::default()));
        inputs
    }

    /// A ClusterIP Service without pod IPs publishes one slice per family
    /// holding its ClusterIP, with the Service's ports; its own
    /// EndpointSlices are not published.
    #[test]
    fn clusterip_without_pod_ips_publishes_one_slice_per_family() {
        let service = service(ServiceKind::ClusterIp);
        let published = published(&export(None), &service, &inputs(), false);
        let expected = |address| SliceInfo {
            endpoints: vec![endpoint(address)],
            ports: vec![port("http", 80), port("metrics", 9090)],
        };
        let published: Vec<_> = published
            .into_iter()
            .map(|(n, s)| (n, (*s).clone()))
            .collect();
        assert_eq!(
            published,
            [
                ("clusterip-IPv4".to_owned(), expected("10.96.0.10")),
                ("clusterip-IPv6".to_owned(), expected("fd00::10")),
            ]
        );
    }

    /// With pod IPs, a cluster publishes its non-empty EndpointSlices as
    /// they are (shared, not copied); a headless Service always does.
    #[test]
    fn pod_ips_publish_the_non_empty_source_slices() {
        let inputs = inputs();
        let cases = [
            (ServiceKind::ClusterIp, None, true),
            (ServiceKind::Headless, None, false),
            (ServiceKind::Headless, None, true),
        ];
        for (kind, pod_ips, default) in cases {
            let published = published(&export(pod_ips), &service(kind), &inputs, default);
            let names: Vec<_> = published.iter().map(|(n, _)| n.as_str()).collect();
            assert_eq!(names, ["web-abc"], "{kind:?}, default {default}");
            assert!(Arc::ptr_eq(
                &published[0].1,
                inputs.slices.get("web-abc").unwrap()
            ));
        }
    }

    /// The export's `use-pod-ips` annotation overrides the global default
    /// either way.
    #[test]
    fn the_exports_pod_ip_switch_overrides_the_default() {
        let service = service(ServiceKind::ClusterIp);
        let names = |pod_ips, default| -> Vec<String> {
            published(&export(pod_ips), &service, &inputs(), default)
                .into_iter()
                .map(|(n, _)| n)
                .collect()
        };
        assert_eq!(names(Some(true), false), ["web-abc"]);
        assert_eq!(
            names(Some(false), true),
            ["clusterip-IPv4", "clusterip-IPv6"]
        );
    }

    fn east(ports: &[ServicePort]) -> ImportCluster {
        ImportCluster {
            cluster: "east".into(),
            cluster_ips: smallvec![],
            endpoints: crate::model::import::Endpoints::Picked(vec![]),
            ports: Arc::from(ports),
        }
    }

    /// The member's slices for cluster `east` from its published slices,
    /// owned by the ServiceImport with uid `uid-1`.
    fn mirrored(cluster: &ImportCluster) -> Vec<(String, EndpointSlice)> {
        let key = ServiceKey::new("shop", "web");
        let owner = import_owner(McsVersion::V1beta1, &key, "uid-1".into());
        let empty = Arc::new(SliceInfo::default());
        let pods = pods();
        let sources = [("web-abc", &pods), ("web-empty", &empty)];
        member_plans(&key, cluster, sources, &owner, None)
            .map(|plan| (plan.name.clone(), plan.build()))
            .collect()
    }

    fn port_names(slice: &EndpointSlice) -> Vec<&str> {
        let ports = slice.ports.as_deref().unwrap_or_default();
        ports.iter().map(|p| p.name.as_deref().unwrap()).collect()
    }

    /// KEP-1645 "Using EndpointSlice objects to track endpoints": a mirrored
    /// slice carries the MCS service-name and source-cluster labels and the
    /// EndpointSlice manager label, lives in the service's namespace, and is
    /// owned by the ServiceImport; empty sources are not mirrored.
    #[test]
    fn member_slices_are_labelled_and_owned_by_the_service_import() {
        let key = ServiceKey::new("shop", "web");
        let slices = mirrored(&east(&[port("http", 80), port("metrics", 9090)]));
        let [(name, slice)] = &slices[..] else {
            panic!("one slice: {slices:?}")
        };
        assert_eq!(*name, records::mirror_slice_name(&key, "east", "web-abc"));
        assert_eq!(slice.metadata.name.as_ref(), Some(name));
        assert_eq!(slice.metadata.namespace.as_deref(), Some("shop"));
        let labels = slice.metadata.labels.clone().unwrap_or_default();
        let expected = BTreeMap::from([
            (LABEL_MCS_SERVICE_NAME, "web"),
            (LABEL_SOURCE_CLUSTER, "east"),
            (LABEL_SLICE_MANAGED_BY, MANAGER),
        ]);
        for (label, value) in expected {
            assert_eq!(
                labels.get(label).map(String::as_str),
                Some(value),
                "{label}"
            );
        }
        let owners = slice.metadata.owner_references.clone().unwrap_or_default();
        assert_eq!(
            owners,
            [import_owner(McsVersion::V1beta1, &key, "uid-1".into())]
        );
        assert_eq!(owners[0].kind, "ServiceImport");
        assert_eq!(owners[0].name, "web");
        assert_eq!(owners[0].uid, "uid-1");
        assert!(owners[0].api_version.starts_with("multicluster.x-k8s.io/"));
        assert_eq!(slice.address_type, "IPv4");
        let addresses: Vec<_> = (slice.endpoints.iter().flatten())
            .map(|e| e.addresses.join(","))
            .collect();
        assert_eq!(addresses, ["10.1.0.5", "10.1.0.6"]);
        assert_eq!(port_names(slice), ["http", "metrics"]);
    }

    /// KEP-1645 "Service Port": a port the cluster does not back (its
    /// Service defines it differently) is left out of its mirrored slices,
    /// and the others keep their endpoint (target) port numbers.
    #[test]
    fn member_slices_leave_out_ports_the_cluster_does_not_back() {
        let slices = mirrored(&east(&[port("http", 80)]));
        let [(_, slice)] = &slices[..] else {
            panic!("one slice: {slices:?}")
        };
        let expected = EndpointPort {
            name: Some("http".into()),
            port: Some(8080),
            protocol: Some("TCP".into()),
            app_protocol: None,
        };
        assert_eq!(slice.ports, Some(vec![expected]));
        assert_eq!(slice.endpoints.as_ref().map(Vec::len), Some(2));
        // Backing no port: the endpoints are kept, with no port.
        let slices = mirrored(&east(&[]));
        assert_eq!(port_names(&slices[0].1), Vec::<&str>::new());
    }

    /// A recipe stands for the slice it builds: equal for the same inputs,
    /// different when anything that goes into the slice differs (its
    /// endpoints, the ports the cluster backs, the owner's uid, broker or
    /// member), so a kept slice matched to a recipe is what it would build.
    #[test]
    fn recipes_differ_where_the_built_slices_do() {
        let key = ServiceKey::new("shop", "web");
        let both = east(&[port("http", 80), port("metrics", 9090)]);
        let pods = pods();
        let moved = Arc::new(SliceInfo {
            endpoints: vec![endpoint("10.1.0.5"), endpoint("10.1.0.7")],
            ..(*pods).clone()
        });
        let member = |cluster: &ImportCluster, slice: &Arc<SliceInfo>, uid: &str| {
            let owner = import_owner(McsVersion::V1beta1, &key, uid.into());
            let plans: Vec<_> = member_plans(&key, cluster, [("web-abc", slice)], &owner, None)
                .map(|p| (p.recipe(), p.build()))
                .collect();
            let [(recipe, slice)] = &plans[..] else {
                panic!("one plan")
            };
            (*recipe, slice.owned_digest())
        };
        let published = [("web-abc".to_owned(), pods.clone())];
        let broker: Vec<_> = broker_plans(&key, "east", &published)
            .map(|p| (p.recipe(), p.build().owned_digest()))
            .collect();
        let cases = [
            member(&both, &pods, "uid-1"),
            member(&both, &moved, "uid-1"),
            member(&east(&[port("http", 80)]), &pods, "uid-1"),
            member(&both, &pods, "uid-2"),
            broker[0],
        ];
        assert_eq!(member(&both, &pods, "uid-1"), cases[0], "the same inputs");
        for (i, a) in cases.iter().enumerate() {
            for b in &cases[i + 1..] {
                assert_ne!(a.0, b.0, "recipes of different slices");
                assert_ne!(a.1, b.1, "the slices differ");
            }
        }
        let matched = Matched::default();
        assert!(!matched.is(cases[0].0), "a kept slice starts unmatched");
        matched.set(cases[0].0);
        assert!(matched.is(cases[0].0) && !matched.is(cases[1].0));
    }
}
