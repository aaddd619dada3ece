//! What the writer compares against: the objects it writes, as watches keep
//! them ([`super::seen`]), with what a plan needs of each (see
//! [`super::plan`]).

use std::net::IpAddr;
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition as K8sCondition, ObjectMeta, Time};
use kube::runtime::reflector::Store;

use super::seen::{Keep, SeenStore};
use super::slices::Matched;
use super::version::{Token, status_digest};
use super::vip_claims;
use crate::k8s::crd::{EndpointSliceObjects, ServiceExport, ServiceImport};
use crate::k8s::records::read::source_cluster;
use crate::k8s::records::{self, Role};
use crate::model::conditions::{CONFLICT, READY, VALID};
use crate::model::{ClusterId, ServiceKey, shared_name};

/// What the writer compares against, kept from watches (see [`super::seen`]).
#[derive(Clone)]
pub(crate) struct Caches {
    /// This cluster's export records and every VIP record on the broker.
    pub broker_records: Arc<SeenStore<ServiceImport, KeptRecord>>,
    /// This cluster's EndpointSlices on the broker.
    pub broker_slices: Arc<SeenStore<EndpointSlice, Matched>>,
    /// The ServiceImports this controller wrote in the local cluster.
    pub local_imports: Arc<SeenStore<ServiceImport, WrittenImport>>,
    /// The EndpointSlices this controller wrote in the local cluster.
    pub local_slices: Arc<SeenStore<EndpointSlice, Matched>>,
    /// The derived Services this controller wrote in the local cluster.
    pub local_services: Arc<SeenStore<Service, DerivedKept>>,
    /// The local cluster's ServiceExports, with their conditions' types,
    /// statuses and transition times (reasons and messages are in the digest).
    pub local_exports: Arc<SeenStore<ServiceExport, Box<[Transition]>>>,
    /// The local cluster's namespaces.
    pub namespaces: Store<Namespace>,
    /// The VIP claims on the broker, by the service holding each.
    pub claims: Arc<SeenStore<ConfigMap, ()>>,
}

/// What the writer reads of a broker ServiceImport, besides its version.
#[derive(Debug)]
pub(crate) enum KeptRecord {
    /// A VIP record: the VIPs it lists.
    Vips(Vec<IpAddr>),
    /// This cluster's export record: when the broker first saw it, which a
    /// rewrite keeps (`records::ANNOTATION_FIRST_SEEN`).
    Own(Option<Timestamp>),
}

impl KeptRecord {
    /// Whether it is a VIP record listing `ip`.
    pub(crate) fn lists(&self, ip: &IpAddr) -> bool {
        matches!(self, KeptRecord::Vips(vips) if vips.contains(ip))
    }
}

/// What the writer reads of a derived Service it wrote, besides its version.
#[derive(Debug)]
pub(crate) struct DerivedKept {
    /// Its ClusterIPs.
    pub ips: Box<[IpAddr]>,
    /// Why it holds no clusterset VIPs, if the API server refused them
    /// (`records::ANNOTATION_NOT_PINNED`).
    pub not_pinned: Option<Box<str>>,
}

impl DerivedKept {
    fn of(service: &Service) -> Self {
        let spec = service.spec.as_ref();
        let ips = spec
            .and_then(|s| s.cluster_ips.as_ref())
            .into_iter()
            .flatten();
        let annotations = service.metadata.annotations.as_ref();
        Self {
            ips: ips.filter_map(|ip| ip.parse().ok()).collect(),
            not_pinned: annotations
                .and_then(|a| a.get(records::ANNOTATION_NOT_PINNED))
                .map(|why| why.as_str().into()),
        }
    }
}

/// What the writer reads of a ServiceImport it wrote, besides its version.
/// Kept for every import of the clusterset, so not its status but what a
/// new status needs of it and a digest to compare with (a copy of each
/// status, with its cluster list and conditions, was the largest part of
/// the writer's stores: `bench/README.md`).
#[derive(Debug)]
pub(crate) struct WrittenImport {
    /// Its `metadata.uid` (the owner of its EndpointSlices).
    pub uid: Option<Token>,
    /// Its VIPs (kept when the broker loses its records).
    pub ips: Box<[IpAddr]>,
    /// The first of its `status.clusters`: the oldest export's cluster.
    pub oldest: Option<ClusterId>,
    /// Its status conditions' types, statuses and transition times.
    pub transitions: Box<[Transition]>,
    /// Its `status.endpointSliceObjects`, as read.
    pub slice_objects: Option<EndpointSliceObjects>,
    /// [`status_digest`] of its status as read.
    pub status: u64,
}

impl WrittenImport {
    fn of(import: &ServiceImport) -> Self {
        let status = import.status.clone().unwrap_or_default();
        let ips = import.spec.ips.iter().filter_map(|ip| ip.parse().ok());
        Self {
            uid: import.metadata.uid.as_deref().map(Token::new),
            ips: ips.collect(),
            oldest: status.clusters.first().map(|c| shared_name(&c.cluster)),
            transitions: status
                .conditions
                .iter()
                .filter_map(Transition::of)
                .collect(),
            slice_objects: status.endpoint_slice_objects,
            status: status_digest(&status),
        }
    }
}

impl Caches {
    /// Empty caches of what `cluster` writes; `namespaces` is fed elsewhere.
    pub(crate) fn new(cluster: ClusterId, namespaces: Store<Namespace>) -> Self {
        let mine = cluster.clone();
        Self {
            broker_records: Arc::new(SeenStore::new(Keep {
                extract: Box::new(move |record: &ServiceImport| {
                    match records::read::role(record)? {
                        Role::Import => Some(KeptRecord::Vips(records::read::record_vips(record))),
                        Role::Export => (records::read::labelled_service(&record.metadata)?.1?
                            == mine)
                            .then(|| {
                                KeptRecord::Own(records::read::first_seen(record).ok().flatten())
                            }),
                    }
                }),
                service: |record| labelled(&record.metadata),
                by_name: false,
            })),
            broker_slices: Arc::new(SeenStore::new(Keep {
                extract: Box::new(move |slice| {
                    (source_cluster(slice) == Some(&*cluster)).then(Matched::default)
                }),
                service: |slice| labelled(&slice.metadata),
                by_name: true,
            })),
            local_imports: Arc::new(SeenStore::new(Keep {
                extract: Box::new(|import: &ServiceImport| Some(WrittenImport::of(import))),
                service: |import| named(&import.metadata),
                by_name: false,
            })),
            local_slices: Arc::new(SeenStore::new(Keep {
                extract: Box::new(|_| Some(Matched::default())),
                service: |slice| labelled(&slice.metadata),
                by_name: true,
            })),
            local_services: Arc::new(SeenStore::new(Keep {
                extract: Box::new(|service: &Service| Some(DerivedKept::of(service))),
                service: |service| labelled(&service.metadata),
                by_name: false,
            })),
            local_exports: Arc::new(SeenStore::new(Keep {
                extract: Box::new(|export: &ServiceExport| {
                    let conditions = export.status.iter().flat_map(|s| &s.conditions);
                    Some(conditions.filter_map(Transition::of).collect())
                }),
                service: |export| named(&export.metadata),
                by_name: false,
            })),
            namespaces,
            claims: Arc::new(SeenStore::new(Keep {
                extract: Box::new(|_| Some(())),
                service: vip_claims::claim_service,
                by_name: true,
            })),
        }
    }
}

impl Caches {
    /// Whether the broker's VIP record of `key` (in `namespace`) lists `ip`.
    pub(crate) fn vip_recorded(&self, namespace: &str, key: &ServiceKey, ip: IpAddr) -> bool {
        let record = self
            .broker_records
            .get(namespace, &records::vip_record_name(key));
        record.is_some_and(|r| r.extract.lists(&ip))
    }
}

/// The service an object's labels name.
fn labelled(meta: &ObjectMeta) -> Option<ServiceKey> {
    Some(records::read::labelled_service(meta)?.0)
}

/// The service of the same namespace and name as an object.
fn named(meta: &ObjectMeta) -> Option<ServiceKey> {
    Some(ServiceKey::new(
        meta.namespace.as_deref()?,
        meta.name.as_deref()?,
    ))
}

/// What a new ServiceExport status needs of a condition written before: its
/// type, status and transition time (its reason and message count only in
/// the digest). Kept for every export of the cluster, so it holds no strings.
#[derive(Debug)]
pub(crate) struct Transition {
    pub type_: &'static str,
    pub status: &'static str,
    pub at: Time,
}

impl Transition {
    /// The transition of `condition`; `None` for a type or status this
    /// controller never writes, which no new condition can keep.
    pub(crate) fn of(condition: &K8sCondition) -> Option<Self> {
        let known = |s: &str, all: &[&'static str]| all.iter().copied().find(|a| *a == s);
        Some(Self {
            type_: known(&condition.type_, &[VALID, READY, CONFLICT])?,
            status: known(&condition.status, &["True", "False"])?,
            at: condition.last_transition_time.clone(),
        })
    }
}
