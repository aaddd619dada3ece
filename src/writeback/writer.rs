//! Performs what [`super::plan`] decided for one service: each planned
//! write with the `resourceVersion` it was compared against (a `Conflict`
//! means someone else wrote first: the service is queued again and planned
//! again), in the plan's order, stopping at the first failure.

use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use super::api::{self, is_code};
use super::caches::Caches;
use super::derived;
use super::plan::{self, At, Later, Local, Publish, Snapshot, View, Vips, Write, WriterSettings};
use super::slices::set_owner_uid;
use super::version::{Owned, Version};
use super::vip_claims::{ClaimError, Taken, VipClaims};
use crate::engine::EngineReader;
use crate::k8s::crd::{ServiceExport, ServiceExportStatus, ServiceImport};
use crate::k8s::served_versions::McsVersions;
use crate::model::ServiceKey;
use crate::ops::metrics::Metrics;

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
    /// the oldest export's cluster to claim them ([`Vips::Wait`]).
    waiting: Mutex<HashMap<ServiceKey, Instant>>,
    /// Set once the local ServiceImport CRD turned out to drop
    /// `status.endpointSliceObjects` (a release older than mcs-api v0.5):
    /// from then on its absence is no difference to write again.
    slice_objects_dropped: AtomicBool,
    /// Services whose derived Service holds no clusterset VIPs (a gauge).
    not_pinned: Mutex<HashSet<ServiceKey>>,
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
            not_pinned: Mutex::default(),
        }
    }

    /// Brings what the other clusters read of `key` on the broker (this
    /// cluster's export record and slices, the VIPs) in line with the
    /// engine: the first part of [`Self::sync`], done ahead of it in a
    /// burst of changes (`queue::Lane::Publish`).
    pub(crate) async fn publish(&self, key: &ServiceKey) -> Result<(), WriteError> {
        let (snapshot, at) = self.snapshot(key);
        let publish = plan::publish(&self.view(key, &snapshot, at), key);
        self.apply_publish(key, at, publish).await
    }

    /// Brings everything this cluster writes for `key` in line with the engine.
    pub(crate) async fn sync(&self, key: &ServiceKey) -> Result<(), WriteError> {
        let (snapshot, at) = self.snapshot(key);
        let plan = plan::plan(&self.view(key, &snapshot, at), key);
        self.apply_publish(key, at, plan.publish).await?;
        match plan.local {
            Ok(local) => self.apply_local(key, at, local).await,
            Err(Later::Claiming) => Ok(()),
            Err(Later::Unlisted) => Err(WriteError::Waiting(plan::UNLISTED_WAIT)),
        }
    }

    /// The engine's view of `key` and the versions to write at.
    fn snapshot(&self, key: &ServiceKey) -> (Snapshot, At) {
        let mut snapshot = None;
        self.engine
            .read(&mut |engine| snapshot = Some(Snapshot::of(engine, key, &self.caches)));
        let at = At {
            broker_imports: self.mcs.broker_imports.get(),
            local_imports: self.mcs.local_imports.get(),
        };
        (snapshot.expect("read calls back once"), at)
    }

    fn view<'a>(&'a self, key: &ServiceKey, snapshot: &'a Snapshot, at: At) -> View<'a> {
        let waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        View {
            settings: &self.settings,
            caches: &self.caches,
            snapshot,
            at,
            waiting_since: waiting.get(key).copied(),
            now: Instant::now(),
            wall: Timestamp::now(),
            slice_objects_dropped: self.slice_objects_dropped.load(Ordering::Relaxed),
        }
    }

    async fn apply_publish(
        &self,
        key: &ServiceKey,
        at: At,
        publish: Publish,
    ) -> Result<(), WriteError> {
        let namespace = &self.settings.broker_namespace;
        if let Some(record) = publish.record {
            let api = self
                .mcs
                .broker_imports
                .api(at.broker_imports, Some(namespace));
            self.ensure(&api, record).await?;
        }
        let api = Api::namespaced(self.broker.clone(), namespace);
        for slice in publish.slices {
            self.ensure(&api, slice).await?;
        }
        self.apply_vips(key, publish.vips).await
    }

    async fn apply_vips(&self, key: &ServiceKey, vips: Vips) -> Result<(), WriteError> {
        {
            let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
            if let Vips::Wait(left) = vips {
                waiting.entry(key.clone()).or_insert_with(Instant::now);
                return Err(WriteError::Waiting(left));
            }
            waiting.remove(key);
        }
        match vips {
            Vips::Settled | Vips::Wait(_) => {}
            Vips::Restore(lost) => {
                for ip in lost {
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
            }
            Vips::Claim {
                families,
                candidates,
            } => {
                let candidates = |family| candidates.get(&family).cloned().unwrap_or_default();
                let vips = self.claims.ensure(key, &families, candidates).await?;
                self.metrics.api_write("VipClaim", "settled");
                tracing::debug!(service = %key, ?vips, "VIPs settled");
            }
            Vips::Release => {
                self.claims.release(key).await?;
                self.metrics.api_write("VipClaim", "released");
            }
        }
        Ok(())
    }

    async fn apply_local(&self, key: &ServiceKey, at: At, local: Local) -> Result<(), WriteError> {
        let api: Api<ServiceImport> = self
            .mcs
            .local_imports
            .api(at.local_imports, Some(key.namespace()));
        let mut uid = local.uid;
        if let Some(import) = local.import {
            uid = self.ensure(&api, import).await?.or(uid);
        }
        if let Some(status) = local.status {
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
        self.count_not_pinned(key, local.not_pinned);
        if let Some(mut service) = local.derived {
            let owned = match (&mut service.desired, &uid) {
                (Some(object), Some(uid)) => {
                    set_owner_uid(&mut object.metadata, uid);
                    true
                }
                // No owner to name yet: the import's watch event queues the
                // service again.
                (Some(_), None) => false,
                (None, _) => true,
            };
            if owned {
                self.ensure_derived(key, service).await?;
            }
        }
        let api: Api<EndpointSlice> = Api::namespaced(self.local.clone(), key.namespace());
        for mut slice in local.slices {
            match (&mut slice.desired, &uid) {
                (Some(object), Some(uid)) => set_owner_uid(&mut object.metadata, uid),
                // No owner to name yet: the import's watch event queues the
                // service again.
                (Some(_), None) => continue,
                (None, _) => {}
            }
            self.ensure(&api, slice).await?;
        }
        if let Some(conditions) = local.export {
            let at = &self.mcs.local_exports;
            let api: Api<ServiceExport> = at.api(at.get(), Some(key.namespace()));
            let status = ServiceExportStatus { conditions };
            let _: ServiceExport = self.patch_status(&api, key.name(), &status).await?;
        }
        Ok(())
    }

    /// Writes the derived Service of `key`. A pinned create the API server
    /// refuses (422: an address taken, or no ServiceCIDR holding it) is made
    /// again without the clusterset VIPs, noting why on the Service
    /// (ARCHITECTURE.md, "Derived Services").
    async fn ensure_derived(
        &self,
        key: &ServiceKey,
        write: Write<Service>,
    ) -> Result<(), WriteError> {
        let api: Api<Service> = Api::namespaced(self.local.clone(), key.namespace());
        let pinned = match (&write.desired, &write.actual) {
            (Some(desired), None) if derived::is_pinned(desired) => Some(desired.clone()),
            _ => None,
        };
        let name = write.name.clone();
        match (self.ensure(&api, write).await, pinned) {
            (Err(WriteError::Api(kube::Error::Api(status))), Some(pinned))
                if status.code == 422 =>
            {
                // The API server allocates before it checks the name: a
                // Service written by an earlier round the cache has not seen
                // yet holds the VIPs and answers 422, not 409. Planned again
                // once the watch shows it.
                if api.get_opt(&name).await?.is_some() {
                    return Err(WriteError::Waiting(plan::UNLISTED_WAIT));
                }
                let why = status.message;
                tracing::warn!(
                    service = %key, derived = %name, reason = %why,
                    "the API server refused the derived Service the clusterset VIPs: \
                     it gets a ClusterIP of this cluster, which this cluster answers"
                );
                self.metrics.api_write("Service", "not-pinned");
                let unpinned = Write {
                    name,
                    desired: Some(derived::unpinned(pinned, &why)),
                    actual: None,
                };
                self.ensure(&api, unpinned).await.map(|_| ())
            }
            (result, _) => result.map(|_| ()),
        }
    }

    /// Keeps the gauge of derived Services without clusterset VIPs.
    fn count_not_pinned(&self, key: &ServiceKey, not_pinned: bool) {
        let mut keys = self.not_pinned.lock().unwrap_or_else(|e| e.into_inner());
        let changed = if not_pinned {
            keys.insert(key.clone())
        } else {
            keys.remove(key)
        };
        if changed {
            self.metrics.set_derived_not_pinned(keys.len());
        }
    }

    /// Performs one planned write. Returns the `uid` the API server
    /// answered with, when it was asked for the object (`None`: unchanged,
    /// or none left).
    async fn ensure<K>(&self, api: &Api<K>, write: Write<K>) -> Result<Option<String>, WriteError>
    where
        K: Resource<DynamicType: Default> + Owned + Clone + Serialize + DeserializeOwned + Debug,
    {
        let Write {
            name,
            desired,
            actual,
        } = write;
        let name = name.as_str();
        let dt = K::DynamicType::default();
        let kind = K::kind(&dt);
        let result = match (desired, actual) {
            (None, None) => return Ok(None),
            (Some(d), Some(a)) if d.owned_digest() == a.digest => return Ok(None),
            (None, Some(actual)) => match api.delete(name, &actual.delete_params()).await {
                Err(e) if is_code(&e, 404) => Ok(("deleted", None)),
                other => other.map(|_| ("deleted", None)),
            },
            (Some(mut desired), None) => match api::create(api, &desired).await {
                // Written by an earlier round the cache has not seen yet: compare with the real one.
                Err(e) if is_code(&e, 409) => {
                    let current = api.get(name).await?;
                    desired.keep_from(&current);
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
