//! Writes what the engine decided for one service, level-triggered: the
//! desired objects are computed from the engine's current state, compared with
//! the watch caches, and only differences are written, each with the
//! `resourceVersion` it was compared against (a `Conflict` means someone else
//! wrote first: the service is queued again and recomputed).
//!
//! Per service, this cluster writes:
//! - to the broker: its export record and EndpointSlices (while it exports
//!   validly), and the VIP record and claims (see [`super::vip_claims`]);
//! - locally: the ServiceImport and, owned by it, an MCS EndpointSlice set
//!   for every exporting cluster, this one included, carrying only the ports
//!   that cluster backs (see [`super::slices`]), while the import exists and
//!   the namespace does; and the ServiceExport's conditions.

use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition as K8sCondition, ObjectMeta, Time};
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use super::api::{self, is_code};
use super::seen::{Keep, SeenStore};
use super::slices::{self, Matched, Plan};
use super::version::{Owned, Token, Version, conditions_digest, status_digest};
use super::vip_claims::{self, ClaimError, Taken, VipClaims};
use crate::engine::{ClusterInputs, Engine, EngineReader, PerCluster};
use crate::k8s::crd::{ClusterStatus, EndpointSliceObjects, ServiceImportStatus};
use crate::k8s::crd::{McsVersion, ServiceExport, ServiceImport, ServiceImportSpec};
use crate::k8s::records::{self, LABEL_MANAGED_BY, MANAGER, Role, source_cluster};
use crate::k8s::served_versions::McsVersions;
use crate::model::conditions::{CONFLICT, Condition, READY, VALID};
use crate::model::import::{Aggregate, Import};
use crate::model::{ClusterId, ImportType, IpFamily, ServiceKey, ServiceKind, shared_name};
use crate::ops::metrics::Metrics;

/// How many VIP candidates per family a claim round tries.
const CANDIDATES: usize = 64;
/// How long a member other than the oldest export's cluster leaves the
/// claiming of missing VIPs to that cluster (see [`Writer::waits`]).
const DEFER: Duration = Duration::from_secs(5);
/// How long a service waits for the first lists of the written objects.
const UNLISTED_WAIT: Duration = Duration::from_millis(200);

/// What the writer compares against, kept from watches (see [`super::seen`]).
#[derive(Clone)]
pub(crate) struct Caches {
    /// This cluster's export records and every VIP record on the broker,
    /// with the VIPs a VIP record lists.
    pub broker_records: Arc<SeenStore<ServiceImport, Vec<IpAddr>>>,
    /// This cluster's EndpointSlices on the broker.
    pub broker_slices: Arc<SeenStore<EndpointSlice, Matched>>,
    /// The ServiceImports this controller wrote in the local cluster.
    pub local_imports: Arc<SeenStore<ServiceImport, WrittenImport>>,
    /// The EndpointSlices this controller wrote in the local cluster.
    pub local_slices: Arc<SeenStore<EndpointSlice, Matched>>,
    /// The local cluster's ServiceExports, with their conditions' types,
    /// statuses and transition times (reasons and messages are in the digest).
    pub local_exports: Arc<SeenStore<ServiceExport, Box<[Transition]>>>,
    /// The local cluster's namespaces.
    pub namespaces: Store<Namespace>,
    /// The VIP claims on the broker, by the service holding each.
    pub claims: Arc<SeenStore<ConfigMap, ()>>,
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
                extract: Box::new(move |record: &ServiceImport| match records::role(record)? {
                    Role::Import => Some(records::record_vips(record)),
                    Role::Export => {
                        (records::labelled_service(&record.metadata)?.1? == mine).then(Vec::new)
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

/// The service an object's labels name.
fn labelled(meta: &ObjectMeta) -> Option<ServiceKey> {
    Some(records::labelled_service(meta)?.0)
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
    type_: &'static str,
    status: &'static str,
    at: Time,
}

impl Transition {
    /// The transition of `condition`; `None` for a type or status this
    /// controller never writes, which no new condition can keep.
    fn of(condition: &K8sCondition) -> Option<Self> {
        let known = |s: &str, all: &[&'static str]| all.iter().copied().find(|a| *a == s);
        Some(Self {
            type_: known(&condition.type_, &[VALID, READY, CONFLICT])?,
            status: known(&condition.status, &["True", "False"])?,
            at: condition.last_transition_time.clone(),
        })
    }
}

/// Settings of the writer.
#[derive(Clone)]
pub(crate) struct WriterSettings {
    /// This cluster's id.
    pub cluster: ClusterId,
    /// The broker namespace.
    pub broker_namespace: String,
    /// Global default of the VIP switch.
    pub clusterset_ip: bool,
    /// Global default of the pod-IP switch.
    pub pod_ips: bool,
}

/// Writes services to the local cluster and the broker.
pub(crate) struct Writer {
    settings: WriterSettings,
    local: Client,
    broker: Client,
    /// The version each MCS kind is written at.
    mcs: McsVersions,
    claims: VipClaims,
    caches: Caches,
    /// The engine, read under the pipeline's lock (ARCHITECTURE.md, "The flow").
    engine: Arc<dyn EngineReader>,
    metrics: Arc<Metrics>,
    /// Services whose VIPs are missing, since when this member waits for
    /// the oldest export's cluster to claim them.
    waiting: Mutex<HashMap<ServiceKey, Instant>>,
    /// Set once the local ServiceImport CRD turned out to drop
    /// `status.endpointSliceObjects` (a release older than mcs-api v0.5):
    /// from then on its absence is no difference to write again.
    slice_objects_dropped: AtomicBool,
}

/// What the engine knows of one service, copied out of its lock.
struct Snapshot {
    inputs: PerCluster,
    aggregate: Option<Aggregate>,
    candidates: HashMap<IpFamily, Vec<IpAddr>>,
}

/// Why a service could not be written (it is queued again).
#[derive(Debug, thiserror::Error)]
pub(crate) enum WriteError {
    /// An API server failed or refused.
    #[error(transparent)]
    Api(#[from] kube::Error),
    /// VIPs could not be settled.
    #[error(transparent)]
    Vips(#[from] ClaimError),
    /// Not yet, try again after this: the oldest export's cluster claims
    /// the VIPs, or the stores of written objects are not listed yet.
    #[error("not yet: trying again in {0:?}")]
    Waiting(Duration),
}

impl WriteError {
    /// Whether the write was refused because its namespace is being deleted.
    pub(crate) fn namespace_terminating(&self) -> bool {
        matches!(self, Self::Api(e) if api::is_namespace_terminating(e))
    }
}

impl Writer {
    /// A writer over the given clients, caches and engine.
    pub(crate) fn new(
        settings: WriterSettings,
        local: Client,
        broker: Client,
        mcs: McsVersions,
        caches: Caches,
        engine: Arc<dyn EngineReader>,
        metrics: Arc<Metrics>,
    ) -> Self {
        let records = mcs.broker_imports.clone();
        let claims = VipClaims::new(broker.clone(), records, &settings.broker_namespace);
        Self {
            settings,
            local,
            broker,
            mcs,
            claims,
            caches,
            engine,
            metrics,
            waiting: Mutex::default(),
            slice_objects_dropped: AtomicBool::new(false),
        }
    }

    /// Brings what the other clusters read of `key` on the broker (this
    /// cluster's export record and slices, the VIPs) in line with the
    /// engine: the first part of [`Self::sync`], done ahead of it in a
    /// burst of changes (`queue::Lane::Publish`).
    pub(crate) async fn publish(&self, key: &ServiceKey) -> Result<(), WriteError> {
        self.publish_from(key, &self.snapshot(key)).await.map(drop)
    }

    /// [`Self::publish`]; true if it claimed VIPs the engine does not know yet.
    async fn publish_from(
        &self,
        key: &ServiceKey,
        snapshot: &Snapshot,
    ) -> Result<bool, WriteError> {
        self.broker_export(key, snapshot).await?;
        self.broker_slices(key, snapshot).await?;
        self.vips(key, snapshot).await
    }

    /// Brings everything this cluster writes for `key` in line with the engine.
    pub(crate) async fn sync(&self, key: &ServiceKey) -> Result<(), WriteError> {
        let snapshot = self.snapshot(key);
        if self.publish_from(key, &snapshot).await? {
            // The engine learns the VIPs from the record's watch event, which
            // queues the service again; writing the import now would drop them.
            return Ok(());
        }
        if !(self.caches.local_imports.listed() && self.caches.local_slices.listed()) {
            // Compared with a store its first list has not filled, every
            // object this controller wrote would look missing and be
            // created again (answered 409 and read back) after a restart.
            return Err(WriteError::Waiting(UNLISTED_WAIT));
        }
        let import = snapshot
            .aggregate
            .as_ref()
            .and_then(|a| a.import.as_deref());
        let namespace_exists = self
            .caches
            .namespaces
            .get(&ObjectRef::new(key.namespace()))
            .is_some_and(|ns| ns.metadata.deletion_timestamp.is_none());
        let import = import.filter(|_| namespace_exists);
        let uid = self.local_import(key, import).await?;
        self.local_slices(key, import.zip(uid), &snapshot).await?;
        self.export_status(key, &snapshot).await?;
        Ok(())
    }

    fn snapshot(&self, key: &ServiceKey) -> Snapshot {
        let mut snapshot = None;
        self.engine
            .read(&mut |engine| snapshot = Some(self.snapshot_of(engine, key)));
        snapshot.expect("read calls back once")
    }

    fn snapshot_of(&self, engine: &Engine, key: &ServiceKey) -> Snapshot {
        let aggregate = engine.get(key).cloned();
        let needs: Vec<IpFamily> = aggregate
            .as_ref()
            .and_then(|a| a.import.as_deref())
            .filter(|i| i.type_ == ImportType::ClusterSetIP && i.clusterset_ip)
            // Candidates only where VIPs are missing (see `Self::vips`): a
            // restart syncs every service, and looking up 64 free addresses
            // per family was almost half of each snapshot's CPU.
            .filter(|i| i.vips.len() != i.ip_families.len())
            .map(|i| i.ip_families.clone())
            .unwrap_or_default();
        let vips = engine.vips();
        // The VIPs this cluster's ServiceImport carries come first: after the
        // broker lost its records (wiped, or restored from an old backup) the
        // clusterset re-claims the same addresses, so connections survive.
        let previous: Vec<IpAddr> = self
            .caches
            .local_imports
            .get(key.namespace(), key.name())
            .map(|i| i.extract.ips.to_vec())
            .unwrap_or_default();
        let candidates = needs
            .into_iter()
            .map(|family| {
                let previous = previous
                    .iter()
                    .copied()
                    .filter(|ip| IpFamily::of(ip) == family && vips.pools().contains(ip));
                let free = previous
                    .chain(vips.candidates(key, family))
                    .filter(|ip| vips.holder(ip).is_none_or(|h| h == key))
                    .take(CANDIDATES)
                    .collect();
                (family, free)
            })
            .collect();
        Snapshot {
            inputs: engine.inputs(key).cloned().unwrap_or_default(),
            aggregate,
            candidates,
        }
    }

    /// This cluster's valid export of `key`: its ServiceExport and Service.
    fn local_export<'a>(
        &self,
        snapshot: &'a Snapshot,
    ) -> Option<(
        &'a crate::model::ExportInfo,
        &'a crate::model::ServiceInfo,
        &'a ClusterInputs,
    )> {
        let inputs = snapshot.inputs.get(&self.settings.cluster)?;
        let service = inputs.service.as_deref()?;
        (service.kind != ServiceKind::ExternalName).then_some(())?;
        Some((inputs.export.as_ref()?, service, inputs))
    }

    async fn broker_export(&self, key: &ServiceKey, snapshot: &Snapshot) -> Result<(), WriteError> {
        let cluster = &self.settings.cluster;
        let name = records::export_record_name(key, cluster);
        let (at, namespace) = (&self.mcs.broker_imports, &self.settings.broker_namespace);
        let version = at.get();
        let desired = self.local_export(snapshot).map(|(export, service, _)| {
            records::export_record(
                version,
                key,
                cluster,
                export,
                service,
                self.settings.clusterset_ip,
                self.settings.pod_ips,
            )
        });
        let actual = self
            .caches
            .broker_records
            .get(namespace, &name)
            .map(|seen| seen.version.clone());
        let api = at.api(version, Some(namespace));
        self.ensure(&api, &name, desired, actual).await.map(drop)
    }

    async fn broker_slices(&self, key: &ServiceKey, snapshot: &Snapshot) -> Result<(), WriteError> {
        let cluster = &self.settings.cluster;
        let published = self
            .local_export(snapshot)
            .map(|(export, service, inputs)| {
                slices::published(export, service, inputs, self.settings.pod_ips)
            })
            .unwrap_or_default();
        let desired = slices::broker_plans(key, cluster, &published).collect();
        let namespace = &self.settings.broker_namespace;
        let api = Api::namespaced(self.broker.clone(), namespace);
        self.ensure_all(&api, namespace, key, desired, &self.caches.broker_slices)
            .await
    }

    /// Settles the VIPs of `key` on the broker; true if it claimed some the
    /// engine does not know yet.
    async fn vips(&self, key: &ServiceKey, snapshot: &Snapshot) -> Result<bool, WriteError> {
        let import = snapshot
            .aggregate
            .as_ref()
            .and_then(|a| a.import.as_deref());
        let needs_vips =
            import.is_some_and(|i| i.type_ == ImportType::ClusterSetIP && i.clusterset_ip);
        if let Some(import) = import.filter(|_| needs_vips) {
            if import.vips.len() == import.ip_families.len() {
                self.settled(key);
                self.keep_claims(key, &import.vips).await?;
                return Ok(false);
            }
            if let Some(wait) = self.waits(key, import) {
                return Err(WriteError::Waiting(wait));
            }
            let candidates = |family| {
                snapshot
                    .candidates
                    .get(&family)
                    .cloned()
                    .unwrap_or_default()
            };
            let vips = self
                .claims
                .ensure(key, &import.ip_families, candidates)
                .await?;
            self.settled(key);
            self.metrics.api_write("VipClaim", "settled");
            tracing::debug!(service = %key, ?vips, "VIPs settled");
            return Ok(true);
        }
        self.settled(key);
        let record = records::vip_record_name(key);
        let recorded = self
            .caches
            .broker_records
            .get(&self.settings.broker_namespace, &record)
            .is_some();
        let nobody_exports = snapshot.inputs.values().all(|i| i.export.is_none());
        if recorded && (nobody_exports || import.is_some()) {
            self.claims.release(key).await?;
            self.metrics.api_write("VipClaim", "released");
        }
        Ok(false)
    }

    /// How long this member still leaves the claiming of `key`'s missing VIPs
    /// to the cluster of its oldest export (`None`: claim now). One rule
    /// decides where members' ServiceImports carry different VIPs after the
    /// broker lost its records (ARCHITECTURE.md, "Choices that need a
    /// reason"): that cluster re-claims first, the VIPs its ServiceImport
    /// carries first; the others adopt its record, and claim themselves only
    /// if none appears within [`DEFER`] (that cluster is down). Which cluster
    /// that is comes from this member's ServiceImport while it carries VIPs
    /// (its `status.clusters`, oldest first): a broker that lost its records
    /// lost the other clusters' exports too, until they write them again.
    fn waits(&self, key: &ServiceKey, import: &Import) -> Option<Duration> {
        let written = self.caches.local_imports.get(key.namespace(), key.name());
        let carried = written
            .as_ref()
            .filter(|w| !w.extract.ips.is_empty())
            .and_then(|w| w.extract.oldest.as_deref());
        let oldest = carried.or_else(|| Some(&*import.clusters.first()?.cluster))?;
        if oldest == &*self.settings.cluster {
            return None;
        }
        let now = Instant::now();
        let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        let since = *waiting.entry(key.clone()).or_insert(now);
        DEFER
            .checked_sub(now - since)
            .filter(|left| !left.is_zero())
    }

    /// `key` waits for no VIP claim any more.
    fn settled(&self, key: &ServiceKey) {
        let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        if !waiting.is_empty() {
            waiting.remove(key);
        }
    }

    /// Writes again the claims of `vips` the broker lost while the VIP record
    /// listing them stands, so that no other service can claim them.
    async fn keep_claims(&self, key: &ServiceKey, vips: &[IpAddr]) -> Result<(), WriteError> {
        if !self.caches.claims.listed() {
            return Ok(());
        }
        let held = self.caches.claims.names(key);
        for &ip in vips {
            if held.contains(&vip_claims::claim_name(ip)) {
                continue;
            }
            match self.claims.restore(key, ip).await? {
                Taken::Created => {
                    self.metrics.api_write("VipClaim", "restored");
                    tracing::info!(service = %key, %ip, "wrote again a VIP claim the broker lost");
                }
                Taken::Held => {}
                Taken::ByOther(holder) => tracing::warn!(
                    service = %key, %ip, %holder,
                    "the VIP record lists an address another service has claimed"
                ),
            }
        }
        Ok(())
    }

    /// Writes the member's ServiceImport; returns its `uid` while it exists.
    async fn local_import(
        &self,
        key: &ServiceKey,
        import: Option<&Import>,
    ) -> Result<Option<String>, WriteError> {
        let version = self.mcs.local_imports.get();
        let api: Api<ServiceImport> = self.mcs.local_imports.api(version, Some(key.namespace()));
        let actual = self.caches.local_imports.get(key.namespace(), key.name());
        let desired = import.map(|import| local_import(version, key, import));
        let version = actual.as_ref().map(|a| a.version.clone());
        let written = self.ensure(&api, key.name(), desired, version).await?;
        let Some(import) = import else {
            return Ok(None);
        };
        let uid = written.or_else(|| actual.as_ref()?.extract.uid.as_ref().map(Token::text));
        let old = actual.as_ref().map(|a| &a.extract);
        let status = ServiceImportStatus {
            clusters: import
                .clusters
                .iter()
                .map(|c| ClusterStatus {
                    cluster: c.cluster.to_string(),
                })
                .collect(),
            conditions: conditions(
                std::slice::from_ref(&*import.ready),
                old.map(|o| &*o.transitions).unwrap_or_default(),
            ),
            endpoint_slice_objects: Some(slices::ENDPOINT_SLICE_OBJECTS),
        };
        let mut compared = status.clone();
        if self.slice_objects_dropped.load(Ordering::Relaxed) {
            // What the local CRD cannot keep is no difference.
            compared.endpoint_slice_objects = old.and_then(|o| o.slice_objects);
        }
        if old.is_none_or(|o| status_digest(&compared) != o.status) {
            // Spelled out: a merge patch must carry an emptied list (every
            // exporting cluster dead) as `[]`, which serde would leave out.
            let patch = json!({
                "clusters": status.clusters,
                "conditions": status.conditions,
                "endpointSliceObjects": status.endpoint_slice_objects,
            });
            let written: ServiceImport = self.patch_status(&api, key.name(), &patch).await?;
            let kept = written.status.and_then(|s| s.endpoint_slice_objects);
            if kept.is_none() && !self.slice_objects_dropped.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    crd = "serviceimports.multicluster.x-k8s.io",
                    "the local cluster's ServiceImport CRD drops status.endpointSliceObjects \
                     (an mcs-api release before v0.5): ServiceImports are written without it"
                );
            }
        }
        Ok(uid)
    }

    /// The member's MCS EndpointSlices: every exporting cluster's, this one
    /// included, owned by the ServiceImport whose `uid` is given.
    async fn local_slices(
        &self,
        key: &ServiceKey,
        import: Option<(&Import, String)>,
        snapshot: &Snapshot,
    ) -> Result<(), WriteError> {
        let own = self
            .local_export(snapshot)
            .map(|(export, service, inputs)| {
                slices::published(export, service, inputs, self.settings.pod_ips)
            })
            .unwrap_or_default();
        let owner = import
            .as_ref()
            .map(|(_, uid)| slices::import_owner(self.mcs.local_imports.get(), key, uid.clone()));
        let mut desired = Vec::new();
        if let (Some((import, _)), Some(owner)) = (&import, &owner) {
            for cluster in &import.clusters {
                if cluster.cluster == self.settings.cluster {
                    let sources = own.iter().map(|(n, s)| (n.as_str(), s));
                    desired.extend(slices::member_plans(key, cluster, sources, owner));
                } else if let Some(inputs) = snapshot.inputs.get(&cluster.cluster) {
                    let sources = inputs.slices.iter().map(|(n, s)| (&**n, s));
                    desired.extend(slices::member_plans(key, cluster, sources, owner));
                }
            }
        }
        let api = Api::namespaced(self.local.clone(), key.namespace());
        self.ensure_all(
            &api,
            key.namespace(),
            key,
            desired,
            &self.caches.local_slices,
        )
        .await
    }

    async fn export_status(&self, key: &ServiceKey, snapshot: &Snapshot) -> Result<(), WriteError> {
        let Some(export) = self.caches.local_exports.get(key.namespace(), key.name()) else {
            return Ok(());
        };
        let Some(status) = snapshot.aggregate.as_ref().and_then(|a| {
            a.exports
                .iter()
                .find(|e| e.cluster == self.settings.cluster)
        }) else {
            return Ok(());
        };
        let new = conditions(&status.conditions, &export.extract);
        if conditions_digest(&new) != export.version.digest {
            let at = &self.mcs.local_exports;
            let api: Api<ServiceExport> = at.api(at.get(), Some(key.namespace()));
            let status = crate::k8s::crd::ServiceExportStatus { conditions: new };
            let _: ServiceExport = self.patch_status(&api, key.name(), &status).await?;
        }
        Ok(())
    }

    /// Makes the slices of `key` in `cache` exactly `desired`: creates and
    /// updates those, deletes the others. A kept slice whose [`Matched`]
    /// recipe is its plan's is not built again.
    async fn ensure_all(
        &self,
        api: &Api<EndpointSlice>,
        namespace: &str,
        key: &ServiceKey,
        desired: Vec<Plan<'_>>,
        cache: &SeenStore<EndpointSlice, Matched>,
    ) -> Result<(), WriteError> {
        let wanted: HashSet<&str> = desired.iter().map(|p| p.name.as_str()).collect();
        for name in cache
            .names(key)
            .iter()
            .filter(|n| !wanted.contains(n.as_str()))
        {
            let actual = cache.get(namespace, name).map(|s| s.version.clone());
            self.ensure(api, name, None, actual).await?;
        }
        for plan in &desired {
            let kept = cache.get(namespace, &plan.name);
            let recipe = plan.recipe();
            if kept.as_ref().is_some_and(|k| k.extract.is(recipe)) {
                continue;
            }
            let slice = plan.build();
            if let Some(kept) = &kept
                && slice.owned_digest() == kept.version.digest
            {
                kept.extract.set(recipe);
                continue;
            }
            let actual = kept.map(|k| k.version.clone());
            self.ensure(api, &plan.name, Some(slice), actual).await?;
        }
        Ok(())
    }

    /// Creates, replaces or deletes one object so that it matches `desired`
    /// (compared by the digest of the parts this controller owns). Returns
    /// the `uid` the API server answered with, when it was asked for the
    /// object (`None`: unchanged, or none left).
    async fn ensure<K>(
        &self,
        api: &Api<K>,
        name: &str,
        desired: Option<K>,
        actual: Option<Version>,
    ) -> Result<Option<String>, WriteError>
    where
        K: Resource<DynamicType: Default> + Owned + Clone + Serialize + DeserializeOwned + Debug,
    {
        let dt = K::DynamicType::default();
        let kind = K::kind(&dt);
        let result = match (desired, actual) {
            (None, None) => return Ok(None),
            (Some(d), Some(a)) if d.owned_digest() == a.digest => return Ok(None),
            (None, Some(actual)) => {
                if !actual.managed {
                    return Ok(None);
                }
                match api.delete(name, &actual.delete_params()).await {
                    Err(e) if is_code(&e, 404) => Ok(("deleted", None)),
                    other => other.map(|_| ("deleted", None)),
                }
            }
            (Some(desired), None) => match api::create(api, &desired).await {
                // Written by an earlier round the cache has not seen yet: compare with the real one.
                Err(e) if is_code(&e, 409) => {
                    let current = api.get(name).await?;
                    let (uid, current) = (current.meta().uid.clone(), Version::of(&current));
                    let replaced = self.replace(api, name, desired, &current).await;
                    replaced.map(|(outcome, new)| (outcome, new.or(uid)))
                }
                other => other.map(|uid| ("created", uid)),
            },
            (Some(desired), Some(actual)) => self.replace(api, name, desired, &actual).await,
        };
        match result {
            Ok((outcome, uid)) => {
                self.metrics.api_write(kind.as_ref(), outcome);
                Ok(uid)
            }
            Err(e) => {
                let outcome = if is_code(&e, 409) {
                    "conflict"
                } else {
                    "error"
                };
                self.metrics.api_write(kind.as_ref(), outcome);
                Err(e.into())
            }
        }
    }

    async fn replace<K>(
        &self,
        api: &Api<K>,
        name: &str,
        mut desired: K,
        current: &Version,
    ) -> Result<(&'static str, Option<String>), kube::Error>
    where
        K: Resource<DynamicType: Default> + Owned + Clone + Serialize + DeserializeOwned + Debug,
    {
        if desired.owned_digest() == current.digest {
            return Ok(("unchanged", None));
        }
        desired.meta_mut().resource_version = current.resource_version();
        api::replace(api, name, &desired)
            .await
            .map(|uid| ("updated", uid))
    }

    async fn patch_status<K, S>(
        &self,
        api: &Api<K>,
        name: &str,
        status: &S,
    ) -> Result<K, WriteError>
    where
        K: Resource<DynamicType: Default> + Clone + DeserializeOwned + Debug,
        S: Serialize,
    {
        let dt = K::DynamicType::default();
        let kind = K::kind(&dt);
        let patch = Patch::Merge(json!({ "status": status }));
        match api
            .patch_status(name, &PatchParams::default(), &patch)
            .await
        {
            Ok(written) => {
                self.metrics.api_write(&format!("{kind}Status"), "updated");
                Ok(written)
            }
            Err(e) => {
                self.metrics.api_write(&format!("{kind}Status"), "error");
                Err(e.into())
            }
        }
    }
}

/// The member cluster's ServiceImport for an import: families and VIPs
/// limited to what the local cluster supports.
fn local_import(version: McsVersion, key: &ServiceKey, import: &Import) -> ServiceImport {
    let mut labels = import.exported.labels.clone();
    labels.insert(LABEL_MANAGED_BY.into(), MANAGER.into());
    let mut annotations = import.exported.annotations.clone();
    annotations.insert(
        records::ANNOTATION_CLUSTER_PORTS.into(),
        records::cluster_ports(import),
    );
    let metadata = ObjectMeta {
        name: Some(key.name().to_string()),
        namespace: Some(key.namespace().to_string()),
        labels: Some(labels),
        annotations: Some(annotations),
        ..ObjectMeta::default()
    };
    ServiceImport::at(
        version,
        metadata,
        ServiceImportSpec {
            ports: import.ports.to_vec(),
            ips: import.local_vips().map(|ip| ip.to_string()).collect(),
            type_: import.type_.as_str().to_owned(),
            session_affinity: Some(import.service.session_affinity.to_string()),
            session_affinity_config: import.service.session_affinity_config.clone(),
            ip_families: import
                .local_families
                .iter()
                .map(|f| f.as_str().to_owned())
                .collect(),
            internal_traffic_policy: Some(import.service.internal_traffic_policy.to_string()),
            traffic_distribution: import.service.traffic_distribution.clone(),
        },
    )
}

/// Kubernetes conditions for `new`, keeping the transition time of those whose status did not change.
fn conditions(new: &[Condition], old: &[Transition]) -> Vec<K8sCondition> {
    let now = Time(Timestamp::now());
    new.iter()
        .map(|c| {
            let previous = old.iter().find(|o| o.type_ == c.type_);
            let unchanged = previous.filter(|o| o.status == c.status_str());
            K8sCondition {
                type_: c.type_.to_owned(),
                status: c.status_str().to_owned(),
                reason: c.reason.to_string(),
                message: c.message.to_string(),
                last_transition_time: unchanged.map_or(now.clone(), |o| o.at.clone()),
                observed_generation: None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(type_: &str, status: &str, at: &str) -> K8sCondition {
        K8sCondition {
            type_: type_.into(),
            status: status.into(),
            reason: "Before".into(),
            message: "written before".into(),
            last_transition_time: Time(at.parse().unwrap()),
            observed_generation: None,
        }
    }

    /// `lastTransitionTime` is when the condition last changed status
    /// (Kubernetes API conventions, "Typical status properties"; the
    /// ServiceExport conditions of KEP-1645 are `metav1.Condition`s): a
    /// status kept keeps its time even when the reason changes; a status
    /// that changed gets the time of the write.
    #[test]
    fn a_kept_status_keeps_its_transition_time() {
        let before = "2026-01-10T09:00:00Z";
        let kept: Vec<Transition> = [
            written(VALID, "True", before),
            written(READY, "True", before),
            written("Unheard", "True", before),
            written(CONFLICT, "Unknown", before),
        ]
        .iter()
        .filter_map(Transition::of)
        .collect();
        assert_eq!(
            kept.len(),
            2,
            "other types and statuses are not kept: {kept:?}"
        );
        let new = [
            Condition::new(VALID, true, "Valid", "still valid"),
            Condition::new(READY, false, "Pending", "now pending"),
            Condition::new(CONFLICT, false, "NoConflicts", "none"),
        ];
        let out = conditions(&new, &kept);
        let at = |t: &str| {
            let c = out.iter().find(|c| c.type_ == t).unwrap();
            c.last_transition_time.0.to_string()
        };
        assert_eq!(at(VALID), before);
        assert_ne!(at(READY), before, "Ready changed status");
        assert_ne!(at(CONFLICT), before, "an Unknown status is no kept False");
        assert_eq!(out[0].reason, "Valid");
    }
}
