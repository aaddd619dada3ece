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

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Debug;
use std::net::IpAddr;
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition as K8sCondition, Time};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use super::api::{delete_if_unchanged, is_code};
use super::owned::Owned;
use super::slices;
use super::vip_claims::{ClaimError, VipClaims};
use crate::engine::{ClusterInputs, Engine, EngineReader, PerCluster};
use crate::k8s::crd::v1alpha1::{ServiceExport, ServiceImport, ServiceImportSpec};
use crate::k8s::crd::{ClusterStatus, ServiceImportStatus};
use crate::k8s::records::{self, LABEL_MANAGED_BY, MANAGER};
use crate::model::conditions::Condition;
use crate::model::import::{Aggregate, Import};
use crate::model::{ClusterId, ImportType, IpFamily, ServiceKey, ServiceKind};
use crate::ops::metrics::Metrics;

/// How many VIP candidates per family a claim round tries.
const CANDIDATES: usize = 64;

/// Watch caches of what the writer compares against.
#[derive(Clone)]
pub struct Caches {
    /// ServiceImports in the broker namespace (export and VIP records).
    pub broker_imports: Store<ServiceImport>,
    /// EndpointSlices in the broker namespace.
    pub broker_slices: Store<EndpointSlice>,
    /// This cluster's slices on the broker, by service.
    pub broker_owned: Arc<Owned>,
    /// ServiceImports this controller wrote in the local cluster.
    pub local_imports: Store<ServiceImport>,
    /// EndpointSlices this controller wrote in the local cluster.
    pub local_slices: Store<EndpointSlice>,
    /// The same, by service.
    pub local_owned: Arc<Owned>,
    /// The local cluster's ServiceExports.
    pub local_exports: Store<ServiceExport>,
    /// The local cluster's namespaces.
    pub namespaces: Store<Namespace>,
}

/// Settings of the writer.
#[derive(Clone)]
pub struct WriterSettings {
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
pub struct Writer {
    settings: WriterSettings,
    local: Client,
    broker: Client,
    claims: VipClaims,
    caches: Caches,
    state: Arc<dyn EngineReader>,
    metrics: Arc<Metrics>,
}

/// What the engine knows of one service, copied out of its lock.
struct Snapshot {
    inputs: PerCluster,
    aggregate: Option<Aggregate>,
    candidates: HashMap<IpFamily, Vec<IpAddr>>,
}

/// Why a service could not be written (it is queued again).
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// An API server failed or refused.
    #[error(transparent)]
    Api(#[from] kube::Error),
    /// VIPs could not be settled.
    #[error(transparent)]
    Vips(#[from] ClaimError),
}

impl Writer {
    /// A writer over the given clients, caches and engine.
    pub fn new(
        settings: WriterSettings,
        local: Client,
        broker: Client,
        caches: Caches,
        state: Arc<dyn EngineReader>,
        metrics: Arc<Metrics>,
    ) -> Self {
        let claims = VipClaims::new(broker.clone(), &settings.broker_namespace);
        Self {
            settings,
            local,
            broker,
            claims,
            caches,
            state,
            metrics,
        }
    }

    /// Brings everything this cluster writes for `key` in line with the engine.
    pub async fn sync(&self, key: &ServiceKey) -> Result<(), WriteError> {
        let snapshot = self.snapshot(key);
        self.broker_export(key, &snapshot).await?;
        self.broker_slices(key, &snapshot).await?;
        if self.vips(key, &snapshot).await? {
            // The engine learns the VIPs from the record's watch event, which
            // queues the service again; writing the import now would drop them.
            return Ok(());
        }
        let import = snapshot
            .aggregate
            .as_ref()
            .and_then(|a| a.import.as_deref());
        let namespace_exists = self
            .caches
            .namespaces
            .get(&ObjectRef::new(&key.namespace))
            .is_some_and(|ns| ns.metadata.deletion_timestamp.is_none());
        let import = import.filter(|_| namespace_exists);
        let uid = self.local_import(key, import).await?;
        self.local_slices(key, import.zip(uid), &snapshot).await?;
        self.export_status(key, &snapshot).await?;
        Ok(())
    }

    fn snapshot(&self, key: &ServiceKey) -> Snapshot {
        let mut snapshot = None;
        self.state
            .read(&mut |engine| snapshot = Some(self.snapshot_of(engine, key)));
        snapshot.expect("read calls back once")
    }

    fn snapshot_of(&self, engine: &Engine, key: &ServiceKey) -> Snapshot {
        let aggregate = engine.get(key).cloned();
        let needs: Vec<IpFamily> = aggregate
            .as_ref()
            .and_then(|a| a.import.as_deref())
            .filter(|i| i.type_ == ImportType::ClusterSetIP && i.clusterset_ip)
            .map(|i| i.ip_families.clone())
            .unwrap_or_default();
        let vips = engine.vips();
        // The VIPs this cluster's ServiceImport carries come first: after the
        // broker lost its records (wiped, or restored from an old backup) the
        // clusterset re-claims the same addresses, so connections survive.
        let previous: Vec<IpAddr> = self
            .caches
            .local_imports
            .get(&ObjectRef::new(&key.name).within(&key.namespace))
            .map(|i| i.spec.ips.iter().filter_map(|ip| ip.parse().ok()).collect())
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
        let desired = self.local_export(snapshot).map(|(export, service, _)| {
            records::export_record(
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
            .broker_imports
            .get(&ObjectRef::new(&name).within(&self.settings.broker_namespace));
        let api = Api::namespaced(self.broker.clone(), &self.settings.broker_namespace);
        self.ensure(&api, &name, desired, actual, |d, a| {
            d.spec == a.spec && d.annotations() == a.annotations()
        })
        .await
        .map(drop)
    }

    async fn broker_slices(&self, key: &ServiceKey, snapshot: &Snapshot) -> Result<(), WriteError> {
        let cluster = &self.settings.cluster;
        let mut desired: BTreeMap<String, EndpointSlice> = BTreeMap::new();
        if let Some((export, service, inputs)) = self.local_export(snapshot) {
            for (source, info) in slices::published(export, service, inputs, self.settings.pod_ips)
            {
                let name = records::broker_slice_name(key, cluster, &source);
                let mut slice = records::slice_object(name.clone(), None, key, cluster, &info);
                slice
                    .annotations_mut()
                    .insert(records::ANNOTATION_SOURCE_SLICE.into(), source);
                desired.insert(name, slice);
            }
        }
        let namespace = &self.settings.broker_namespace;
        let api = Api::namespaced(self.broker.clone(), namespace);
        let stale = self.caches.broker_owned.names(key);
        self.ensure_all(&api, namespace, desired, stale, &self.caches.broker_slices)
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
            let have = import.vips.len() == import.ip_families.len();
            if !have {
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
                self.metrics.api_write("VipClaim", "settled");
                tracing::debug!(service = %key, ?vips, "VIPs settled");
            }
            return Ok(!have);
        }
        let record =
            ObjectRef::new(&records::vip_record_name(key)).within(&self.settings.broker_namespace);
        let nobody_exports = snapshot.inputs.values().all(|i| i.export.is_none());
        if self.caches.broker_imports.get(&record).is_some() && (nobody_exports || import.is_some())
        {
            self.claims.release(key).await?;
            self.metrics.api_write("VipClaim", "released");
        }
        Ok(false)
    }

    /// Writes the member's ServiceImport; returns its `uid` while it exists.
    async fn local_import(
        &self,
        key: &ServiceKey,
        import: Option<&Import>,
    ) -> Result<Option<String>, WriteError> {
        let api: Api<ServiceImport> = Api::namespaced(self.local.clone(), &key.namespace);
        let actual = self
            .caches
            .local_imports
            .get(&ObjectRef::new(&key.name).within(&key.namespace));
        let desired = import.map(|import| local_import(key, import));
        let uid = self
            .ensure(&api, &key.name, desired, actual.clone(), |d, a| {
                d.spec == a.spec && d.labels() == a.labels() && d.annotations() == a.annotations()
            })
            .await?;
        let Some(import) = import else {
            return Ok(uid);
        };
        let old = actual
            .as_ref()
            .and_then(|a| a.status.clone())
            .unwrap_or_default();
        let status = ServiceImportStatus {
            clusters: import
                .clusters
                .iter()
                .map(|c| ClusterStatus {
                    cluster: c.cluster.to_string(),
                })
                .collect(),
            conditions: conditions(std::slice::from_ref(&*import.ready), &old.conditions),
        };
        if actual.is_none() || status != old {
            // Spelled out: a merge patch must carry an emptied list (every
            // exporting cluster dead) as `[]`, which serde would leave out.
            let patch = json!({ "clusters": status.clusters, "conditions": status.conditions });
            self.patch_status(&api, &key.name, &patch).await?;
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
        let mut desired = BTreeMap::new();
        if let Some((import, uid)) = import {
            let owner = slices::import_owner(key, uid);
            let own = self
                .local_export(snapshot)
                .map(|(export, service, inputs)| {
                    slices::published(export, service, inputs, self.settings.pod_ips)
                });
            for cluster in &import.clusters {
                if cluster.cluster == self.settings.cluster {
                    let sources = own.iter().flatten().map(|(n, s)| (n.as_str(), s));
                    desired.extend(slices::member_slices(key, cluster, sources, &owner));
                } else if let Some(inputs) = snapshot.inputs.get(&cluster.cluster) {
                    let sources = inputs.slices.iter().map(|(n, s)| (&**n, s));
                    desired.extend(slices::member_slices(key, cluster, sources, &owner));
                }
            }
        }
        let api = Api::namespaced(self.local.clone(), &key.namespace);
        let stale = self.caches.local_owned.names(key);
        self.ensure_all(
            &api,
            &key.namespace,
            desired,
            stale,
            &self.caches.local_slices,
        )
        .await
    }

    async fn export_status(&self, key: &ServiceKey, snapshot: &Snapshot) -> Result<(), WriteError> {
        let Some(export) = self
            .caches
            .local_exports
            .get(&ObjectRef::new(&key.name).within(&key.namespace))
        else {
            return Ok(());
        };
        let Some(status) = snapshot.aggregate.as_ref().and_then(|a| {
            a.exports
                .iter()
                .find(|e| e.cluster == self.settings.cluster)
        }) else {
            return Ok(());
        };
        let old = export
            .status
            .as_ref()
            .map(|s| s.conditions.clone())
            .unwrap_or_default();
        let new = conditions(&status.conditions, &old);
        if new != old {
            let api: Api<ServiceExport> = Api::namespaced(self.local.clone(), &key.namespace);
            let status = crate::k8s::crd::ServiceExportStatus { conditions: new };
            self.patch_status(&api, &key.name, &status).await?;
        }
        Ok(())
    }

    /// Makes the slices of one service exactly `desired`: creates and updates
    /// those, deletes the `owned` ones not in it.
    async fn ensure_all(
        &self,
        api: &Api<EndpointSlice>,
        namespace: &str,
        desired: BTreeMap<String, EndpointSlice>,
        owned: BTreeSet<String>,
        cache: &Store<EndpointSlice>,
    ) -> Result<(), WriteError> {
        let actual = |name: &str| cache.get(&ObjectRef::new(name).within(namespace));
        for name in owned.iter().filter(|n| !desired.contains_key(*n)) {
            self.ensure(api, name, None, actual(name), same_slice)
                .await?;
        }
        for (name, slice) in desired {
            let current = actual(&name);
            self.ensure(api, &name, Some(slice), current, same_slice)
                .await?;
        }
        Ok(())
    }

    /// Creates, replaces or deletes one object so that it matches `desired`
    /// (`same` compares the parts this controller owns). Returns the `uid` of
    /// the object as it now is (`None`: there is none).
    async fn ensure<K>(
        &self,
        api: &Api<K>,
        name: &str,
        desired: Option<K>,
        actual: Option<Arc<K>>,
        same: impl Fn(&K, &K) -> bool,
    ) -> Result<Option<String>, WriteError>
    where
        K: Resource<DynamicType = ()> + Clone + Serialize + DeserializeOwned + Debug,
    {
        let kind = K::kind(&());
        let result = match (desired, actual) {
            (None, None) => return Ok(None),
            (Some(d), Some(a)) if same(&d, &a) => return Ok(a.meta().uid.clone()),
            (None, Some(actual)) => {
                if actual.labels().get(LABEL_MANAGED_BY).map(String::as_str) != Some(MANAGER)
                    && actual
                        .labels()
                        .get(records::LABEL_SLICE_MANAGED_BY)
                        .map(String::as_str)
                        != Some(MANAGER)
                {
                    return Ok(None);
                }
                match api.delete(name, &delete_if_unchanged(actual.meta())).await {
                    Err(e) if is_code(&e, 404) => Ok(("deleted", None)),
                    other => other.map(|_| ("deleted", None)),
                }
            }
            (Some(desired), None) => match api.create(&PostParams::default(), &desired).await {
                // Written by an earlier round the cache has not seen yet: compare with the real one.
                Err(e) if is_code(&e, 409) => {
                    let current = api.get(name).await?;
                    self.replace(api, name, desired, &current, &same).await
                }
                other => other.map(|created| ("created", created.meta().uid.clone())),
            },
            (Some(desired), Some(actual)) => self.replace(api, name, desired, &actual, &same).await,
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
        current: &K,
        same: &impl Fn(&K, &K) -> bool,
    ) -> Result<(&'static str, Option<String>), kube::Error>
    where
        K: Resource<DynamicType = ()> + Clone + Serialize + DeserializeOwned + Debug,
    {
        if same(&desired, current) {
            return Ok(("unchanged", current.meta().uid.clone()));
        }
        desired.meta_mut().resource_version = current.meta().resource_version.clone();
        api.replace(name, &PostParams::default(), &desired)
            .await
            .map(|replaced| ("updated", replaced.meta().uid.clone()))
    }

    async fn patch_status<K, S>(
        &self,
        api: &Api<K>,
        name: &str,
        status: &S,
    ) -> Result<(), WriteError>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
        S: Serialize,
    {
        let kind = K::kind(&());
        let patch = Patch::Merge(json!({ "status": status }));
        match api
            .patch_status(name, &PatchParams::default(), &patch)
            .await
        {
            Ok(_) => {
                self.metrics.api_write(&format!("{kind}Status"), "updated");
                Ok(())
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
fn local_import(key: &ServiceKey, import: &Import) -> ServiceImport {
    let mut labels = import.exported.labels.clone();
    labels.insert(LABEL_MANAGED_BY.into(), MANAGER.into());
    let mut object = ServiceImport::new(
        &key.name,
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
    );
    object.metadata.namespace = Some(key.namespace.to_string());
    object.metadata.labels = Some(labels);
    let mut annotations = import.exported.annotations.clone();
    annotations.insert(
        records::ANNOTATION_CLUSTER_PORTS.into(),
        records::cluster_ports(import),
    );
    object.metadata.annotations = Some(annotations);
    object
}

fn same_slice(desired: &EndpointSlice, actual: &EndpointSlice) -> bool {
    desired.address_type == actual.address_type
        && desired.owner_references() == actual.owner_references()
        && desired.endpoints == actual.endpoints
        && desired.ports == actual.ports
        && desired.labels() == actual.labels()
        && desired.annotations() == actual.annotations()
}

/// Kubernetes conditions for `new`, keeping the transition time of those whose status did not change.
fn conditions(new: &[Condition], old: &[K8sCondition]) -> Vec<K8sCondition> {
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
                last_transition_time: unchanged
                    .map_or(now.clone(), |o| o.last_transition_time.clone()),
                observed_generation: None,
            }
        })
        .collect()
}
