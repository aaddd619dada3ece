//! What the writer should do for one service, decided without I/O: from the
//! engine's view of the service ([`Snapshot`]) and the objects the watches
//! keep ([`Caches`]), the objects that should exist and the writes that take
//! the world there ([`Plan`]). The writer ([`super::writer`]) only performs
//! them, with `resourceVersion` preconditions, and requeues on failure
//! (ARCHITECTURE.md, "Choices that need a reason": plan and apply).
//!
//! Per service, this cluster writes:
//! - to the broker: its export record and EndpointSlices (while it exports
//!   validly), and the VIP record and claims (see [`super::vip_claims`]);
//! - locally: the ServiceImport and, owned by it, an MCS EndpointSlice set
//!   for every exporting cluster, this one included, carrying only the ports
//!   that cluster backs (see [`super::slices`]), while the import exists and
//!   the namespace does; and the ServiceExport's conditions.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    Condition as K8sCondition, ObjectMeta, OwnerReference, Time,
};
use kube::runtime::reflector::ObjectRef;

use super::caches::{Caches, DerivedKept, KeptRecord, Transition};
use super::derived::{self, Desired};
use super::seen::SeenStore;
use super::slices::{self, Matched};
use super::version::{Owned, Version, conditions_digest, status_digest};
use super::vip_claims;
use crate::engine::{ClusterInputs, Engine, PerCluster};
use crate::k8s::crd::ServiceImportStatus;
use crate::k8s::crd::{ClusterStatus, McsVersion, ServiceImport, ServiceImportSpec};
use crate::k8s::records::{self, LABEL_MANAGED_BY, MANAGER, SwitchDefaults};
use crate::model::conditions::{Condition, READY, VALID, reason};
use crate::model::derived::DerivedServices;
use crate::model::import::{Aggregate, Import};
use crate::model::{
    ClusterId, ExportInfo, ImportType, IpFamily, ServiceInfo, ServiceKey, ServiceKind, SliceInfo,
};

/// How many VIP candidates per family a claim round tries.
const CANDIDATES: usize = 64;
/// How long a member other than the oldest export's cluster leaves the
/// claiming of missing VIPs to that cluster (see [`vips`]).
pub(crate) const DEFER: Duration = Duration::from_secs(5);
/// How long a service waits for the first lists of the written objects.
pub(crate) const UNLISTED_WAIT: Duration = Duration::from_millis(200);

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
    /// Whether, and how, imports get derived Services.
    pub derived: DerivedServices,
}

/// What the engine knows of one service, copied out of its lock.
pub(crate) struct Snapshot {
    inputs: PerCluster,
    aggregate: Option<Aggregate>,
    /// Free VIPs per family, best first, where the import misses some.
    candidates: HashMap<IpFamily, Vec<IpAddr>>,
}

impl Snapshot {
    /// The engine's view of `key`, read under the pipeline's lock.
    pub(crate) fn of(engine: &Engine, key: &ServiceKey, caches: &Caches) -> Self {
        let aggregate = engine.get(key).cloned();
        let needs: Vec<IpFamily> = aggregate
            .as_ref()
            .and_then(|a| a.import.as_deref())
            .filter(|i| needs_vips(i))
            // Candidates only where VIPs are missing (see `vips`): a restart
            // syncs every service, and looking up 64 free addresses per
            // family was almost half of each snapshot's CPU.
            .filter(|i| i.vips.len() != i.ip_families.len())
            .map(|i| i.ip_families.clone())
            .unwrap_or_default();
        let vips = engine.vips();
        // The VIPs this cluster's ServiceImport carries come first: after the
        // broker lost its records (wiped, or restored from an old backup) the
        // clusterset re-claims the same addresses, so connections survive.
        let previous: Vec<IpAddr> = caches
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
        Self {
            inputs: engine.inputs(key).cloned().unwrap_or_default(),
            aggregate,
            candidates,
        }
    }

    fn import(&self) -> Option<&Import> {
        self.aggregate.as_ref()?.import.as_deref()
    }
}

/// Whether an import gets clusterset VIPs.
fn needs_vips(import: &Import) -> bool {
    import.type_ == ImportType::ClusterSetIP && import.clusterset_ip
}

/// The versions the MCS kinds are written at, read once for a plan.
#[derive(Clone, Copy, Debug)]
pub(crate) struct At {
    /// Export and VIP records on the broker.
    pub broker_imports: McsVersion,
    /// The member's ServiceImports.
    pub local_imports: McsVersion,
}

/// Everything a plan is made from.
pub(crate) struct View<'a> {
    pub settings: &'a WriterSettings,
    pub caches: &'a Caches,
    pub snapshot: &'a Snapshot,
    pub at: At,
    /// Since when this member leaves the claiming of the service's missing
    /// VIPs to the oldest export's cluster (`None`: it did not yet).
    pub waiting_since: Option<Instant>,
    /// Now, on the monotonic clock (the VIP wait) and the wall clock
    /// (conditions' transition times).
    pub now: Instant,
    pub wall: Timestamp,
    /// The local ServiceImport CRD drops `status.endpointSliceObjects` (an
    /// mcs-api release before v0.5): its absence is no difference.
    pub slice_objects_dropped: bool,
}

/// One object made to match what should exist: `desired` (`None`: none)
/// written over `actual` (`None`: none seen) with its version as the
/// precondition. Planned only where the two differ.
#[derive(Debug)]
pub(crate) struct Write<K> {
    pub name: String,
    pub desired: Option<K>,
    pub actual: Option<Version>,
}

impl<K: Owned> Write<K> {
    /// The write that takes `actual` to `desired`; `None` when there is
    /// nothing to do: equal, both absent, or an object to delete that this
    /// controller does not manage.
    fn between(name: String, desired: Option<K>, actual: Option<Version>) -> Option<Self> {
        match (&desired, &actual) {
            (None, None) => None,
            (Some(d), Some(a)) if d.owned_digest() == a.digest => None,
            (None, Some(a)) if !a.managed => None,
            _ => Some(Self {
                name,
                desired,
                actual,
            }),
        }
    }
}

/// What to do about a service's VIPs on the broker.
#[derive(Debug, PartialEq)]
pub(crate) enum Vips {
    /// Nothing.
    Settled,
    /// The VIPs are agreed; write again these claims the broker lost while
    /// the VIP record listing them stands, so no other service claims them.
    Restore(Vec<IpAddr>),
    /// Leave the claiming to the oldest export's cluster for this long.
    Wait(Duration),
    /// Claim VIPs of these families from these candidates (best first).
    Claim {
        families: Vec<IpFamily>,
        candidates: HashMap<IpFamily, Vec<IpAddr>>,
    },
    /// Release the VIP record and its claims: no export needs them.
    Release,
}

/// What this cluster publishes on the broker for a service: what the other
/// clusters read (`queue::Lane::Publish` writes this alone).
#[derive(Debug)]
pub(crate) struct Publish {
    /// This cluster's export record.
    pub record: Option<Write<ServiceImport>>,
    /// This cluster's EndpointSlices.
    pub slices: Vec<Write<EndpointSlice>>,
    pub vips: Vips,
}

/// What this cluster writes in itself for a service.
#[derive(Debug)]
pub(crate) struct Local {
    /// The ServiceImport.
    pub import: Option<Write<ServiceImport>>,
    /// Its `uid` as last seen: the owner of the MCS EndpointSlices until the
    /// import write answers with another (a new import).
    pub uid: Option<String>,
    /// A new ServiceImport status (`None`: unchanged, or no import).
    pub status: Option<ServiceImportStatus>,
    /// The derived Service, owned by the ServiceImport.
    pub derived: Option<Write<Service>>,
    /// Whether the derived Service holds no clusterset VIPs (refused them).
    pub not_pinned: bool,
    /// The MCS EndpointSlices, owned by the ServiceImport.
    pub slices: Vec<Write<EndpointSlice>>,
    /// New conditions of this cluster's ServiceExport (`None`: unchanged).
    pub export: Option<Vec<K8sCondition>>,
}

/// Everything to write for a service, in order: what is published first,
/// then what is local, unless that must wait.
#[derive(Debug)]
pub(crate) struct Plan {
    pub publish: Publish,
    pub local: Result<Local, Later>,
}

/// Why the local writes wait.
#[derive(Debug, PartialEq)]
pub(crate) enum Later {
    /// VIPs are being claimed that the engine does not know yet: it learns
    /// them from the record's watch event, which queues the service again,
    /// and writing the import now would drop them.
    Claiming,
    /// The stores of written objects have not listed yet: compared with
    /// them, every object this controller wrote would look missing and be
    /// created again (answered 409 and read back) after a restart.
    Unlisted,
}

/// The whole plan for `key`.
pub(crate) fn plan(view: &View<'_>, key: &ServiceKey) -> Plan {
    let publish = publish(view, key);
    let caches = view.caches;
    let local = if matches!(publish.vips, Vips::Claim { .. }) {
        Err(Later::Claiming)
    } else if !(caches.local_imports.listed()
        && caches.local_slices.listed()
        && caches.local_services.listed())
    {
        Err(Later::Unlisted)
    } else {
        Ok(local(view, key))
    };
    Plan { publish, local }
}

/// What this cluster publishes for `key` on the broker.
pub(crate) fn publish(view: &View<'_>, key: &ServiceKey) -> Publish {
    let cluster = &view.settings.cluster;
    let own = local_export(view);
    let name = records::export_record_name(key, cluster);
    let namespace = &view.settings.broker_namespace;
    let actual = view.caches.broker_records.get(namespace, &name);
    // Kept once the broker has the record; a new one is first seen now.
    let first_seen = actual.as_ref().and_then(|seen| match seen.extract {
        KeptRecord::Own(first_seen) => first_seen,
        KeptRecord::Vips(_) => None,
    });
    let defaults = SwitchDefaults {
        clusterset_ip: view.settings.clusterset_ip,
        pod_ips: view.settings.pod_ips,
    };
    let desired = own.map(|(export, service, _)| {
        records::build::export_record(
            view.at.broker_imports,
            key,
            cluster,
            first_seen.unwrap_or(view.wall),
            export,
            service,
            defaults,
        )
    });
    let record = Write::between(name, desired, actual.map(|seen| seen.version.clone()));
    let published = published(view);
    let plans = slices::broker_plans(key, cluster, &published);
    let slices = slice_writes(namespace, key, plans, &view.caches.broker_slices);
    Publish {
        record,
        slices,
        vips: vips(view, key),
    }
}

/// This cluster's valid export of the service: its ServiceExport, Service
/// and inputs.
fn local_export<'a>(
    view: &View<'a>,
) -> Option<(&'a ExportInfo, &'a ServiceInfo, &'a ClusterInputs)> {
    let cluster = &view.settings.cluster;
    let inputs = view.snapshot.inputs.get(cluster)?;
    let service = inputs.service.as_deref()?;
    (service.kind != ServiceKind::ExternalName).then_some(())?;
    // Refused by a rule of the engine's (a protected namespace): the other
    // clusters would refuse it too.
    let aggregate = view.snapshot.aggregate.as_ref();
    let status = aggregate.and_then(|a| a.exports.iter().find(|e| e.cluster == *cluster));
    let invalid = |c: &Condition| c.type_ == VALID && !c.status;
    status
        .is_none_or(|s| !s.conditions.iter().any(invalid))
        .then_some(())?;
    Some((inputs.export.as_ref()?, service, inputs))
}

/// The slices this cluster publishes for its valid export (none without).
fn published(view: &View<'_>) -> Vec<(String, Arc<SliceInfo>)> {
    local_export(view)
        .map(|(export, service, inputs)| {
            slices::published(export, service, inputs, view.settings.pod_ips)
        })
        .unwrap_or_default()
}

/// The VIP step for `key`: the rules of ARCHITECTURE.md, "Choices that need
/// a reason" (VIPs kept after the broker lost its records).
fn vips(view: &View<'_>, key: &ServiceKey) -> Vips {
    let import = view.snapshot.import();
    let record = records::vip_record_name(key);
    let namespace = &view.settings.broker_namespace;
    let recorded = view.caches.broker_records.get(namespace, &record).is_some();
    if let Some(import) = import.filter(|i| needs_vips(i)) {
        let agreed = import.vips.len() == import.ip_families.len();
        // The engine keeps the VIPs of an exported service whose VIP record
        // went (ARCHITECTURE.md, "A VIP survives the broker"): the record
        // is written again with them, by the cluster that claims.
        let lost = agreed && !recorded && view.caches.broker_records.listed();
        if agreed && !lost {
            return Vips::Restore(lost_claims(view.caches, key, &import.vips));
        }
        if let Some(left) = waits(view, key, import) {
            return Vips::Wait(left);
        }
        let candidates = match lost {
            true => import
                .vips
                .iter()
                .map(|ip| (IpFamily::of(ip), vec![*ip]))
                .collect(),
            false => view.snapshot.candidates.clone(),
        };
        return Vips::Claim {
            families: import.ip_families.clone(),
            candidates,
        };
    }
    let nobody_exports = view.snapshot.inputs.values().all(|i| i.export.is_none());
    if recorded && (nobody_exports || import.is_some()) {
        Vips::Release
    } else {
        Vips::Settled
    }
}

/// The claims of `vips` the broker lost (none before the claims listed).
fn lost_claims(caches: &Caches, key: &ServiceKey, vips: &[IpAddr]) -> Vec<IpAddr> {
    if !caches.claims.listed() {
        return Vec::new();
    }
    let held = caches.claims.names(key);
    let lost = vips.iter().copied();
    lost.filter(|ip| !held.contains(&vip_claims::claim_name(*ip)))
        .collect()
}

/// How long this member still leaves the claiming of `key`'s missing VIPs
/// to the cluster of its oldest export (`None`: claim now). One rule decides
/// where members' ServiceImports carry different VIPs after the broker lost
/// its records (ARCHITECTURE.md, "Choices that need a reason"): that cluster
/// re-claims first, the VIPs its ServiceImport carries first; the others
/// adopt its record, and claim themselves only if none appears within
/// [`DEFER`] (that cluster is down). Which cluster that is comes from this
/// member's ServiceImport while it carries VIPs (its `status.clusters`,
/// oldest first): a broker that lost its records lost the other clusters'
/// exports too, until they write them again.
fn waits(view: &View<'_>, key: &ServiceKey, import: &Import) -> Option<Duration> {
    let written = view.caches.local_imports.get(key.namespace(), key.name());
    let carried = written
        .as_ref()
        .filter(|w| !w.extract.ips.is_empty())
        .and_then(|w| w.extract.oldest.as_deref());
    let oldest = carried.or_else(|| Some(&*import.clusters.first()?.cluster))?;
    if oldest == &*view.settings.cluster {
        return None;
    }
    let since = view.waiting_since.unwrap_or(view.now);
    DEFER
        .checked_sub(view.now - since)
        .filter(|left| !left.is_zero())
}

/// What this cluster writes in itself for `key`.
fn local(view: &View<'_>, key: &ServiceKey) -> Local {
    let namespace_exists = view
        .caches
        .namespaces
        .get(&ObjectRef::new(key.namespace()))
        .is_some_and(|ns| ns.metadata.deletion_timestamp.is_none());
    let import = view.snapshot.import().filter(|_| namespace_exists);
    let written = view.caches.local_imports.get(key.namespace(), key.name());
    let actual = written.as_ref().map(|w| w.version.clone());
    let uid = written.as_ref().and_then(|w| w.extract.uid.as_ref());
    let uid = uid.map(|uid| uid.text());
    // An import not written yet has no uid: its objects are planned with an
    // empty one, which the writer replaces with the uid the import's write
    // answers.
    let owner = import.map(|_| {
        let uid = uid.clone().unwrap_or_default();
        slices::import_owner(view.at.local_imports, key, uid)
    });
    let derived_name = records::derived_service_name(key);
    let kept = view
        .caches
        .local_services
        .get(key.namespace(), &derived_name);
    let kept_derived = kept.as_ref().map(|k| &k.extract);
    let mode = view.settings.derived;
    let derived = derived::desired(mode, key, import, kept_derived, owner.as_ref());
    let derived_shown = (mode != DerivedServices::Off && derived != Desired::Absent)
        .then_some((derived_name.as_str(), kept_derived));
    let desired =
        import.map(|import| local_import(view.at.local_imports, key, import, derived_shown));
    let status = import.and_then(|import| {
        let old = written.as_ref().map(|w| &w.extract);
        let status = ServiceImportStatus {
            clusters: import
                .clusters
                .iter()
                .map(|c| ClusterStatus {
                    cluster: c.cluster.to_string(),
                })
                .collect(),
            conditions: conditions(
                std::slice::from_ref(&ready(import, derived_shown)),
                old.map(|o| &*o.transitions).unwrap_or_default(),
                view.wall,
            ),
            endpoint_slice_objects: Some(slices::ENDPOINT_SLICE_OBJECTS),
        };
        let mut compared = status.clone();
        if view.slice_objects_dropped {
            compared.endpoint_slice_objects = old.and_then(|o| o.slice_objects);
        }
        old.is_none_or(|o| status_digest(&compared) != o.status)
            .then_some(status)
    });
    let labelled = derived_shown.map(|(name, _)| name);
    let slices = member_slices(view, key, import, owner.as_ref(), labelled);
    let not_pinned = derived_shown.is_some_and(|(_, k)| k.is_some_and(|k| k.not_pinned.is_some()));
    let actual_derived = kept.map(|k| k.version.clone());
    let derived = match derived {
        Desired::Absent | Desired::Replace => {
            Write::between(derived_name.clone(), None, actual_derived)
        }
        Desired::Unchanged => None,
        Desired::Present(service) => {
            Write::between(derived_name.clone(), Some(*service), actual_derived)
        }
    };
    Local {
        import: Write::between(key.name().to_string(), desired, actual),
        uid,
        status,
        derived,
        not_pinned,
        slices,
        export: export_conditions(view, key),
    }
}

/// The member's MCS EndpointSlices: every exporting cluster's, this one
/// included, owned by the ServiceImport (`owner`), and labelled with the
/// derived Service's name where there is one (`derived`).
fn member_slices(
    view: &View<'_>,
    key: &ServiceKey,
    import: Option<&Import>,
    owner: Option<&OwnerReference>,
    derived: Option<&str>,
) -> Vec<Write<EndpointSlice>> {
    let own = published(view);
    let mut desired = Vec::new();
    if let (Some(import), Some(owner)) = (import, owner) {
        for cluster in &import.clusters {
            if cluster.cluster == view.settings.cluster {
                let sources = own.iter().map(|(n, s)| (n.as_str(), s));
                desired.extend(slices::member_plans(key, cluster, sources, owner, derived));
            } else if let Some(inputs) = view.snapshot.inputs.get(&cluster.cluster) {
                let sources = inputs.slices.iter().map(|(n, s)| (&**n, s));
                desired.extend(slices::member_plans(key, cluster, sources, owner, derived));
            }
        }
    }
    slice_writes(key.namespace(), key, desired, &view.caches.local_slices)
}

/// The writes that make the slices of `key` in `cache` exactly `desired`:
/// creates and updates those, deletes the others. A kept slice whose
/// [`Matched`] recipe is its plan's is not built again; one found equal
/// when built is noted as matching that recipe (a memo, no write).
fn slice_writes<'a>(
    namespace: &str,
    key: &ServiceKey,
    desired: impl IntoIterator<Item = slices::Plan<'a>>,
    cache: &SeenStore<EndpointSlice, Matched>,
) -> Vec<Write<EndpointSlice>> {
    let desired: Vec<slices::Plan<'a>> = desired.into_iter().collect();
    let wanted: HashSet<&str> = desired.iter().map(|p| p.name.as_str()).collect();
    let mut writes: Vec<Write<EndpointSlice>> = cache
        .names(key)
        .into_iter()
        .filter(|n| !wanted.contains(n.as_str()))
        .filter_map(|name| {
            let actual = cache.get(namespace, &name).map(|s| s.version.clone());
            Write::between(name, None, actual)
        })
        .collect();
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
        writes.extend(Write::between(plan.name.clone(), Some(slice), actual));
    }
    writes
}

/// New conditions of this cluster's ServiceExport of `key`, if they differ
/// from those written.
fn export_conditions(view: &View<'_>, key: &ServiceKey) -> Option<Vec<K8sCondition>> {
    let export = view.caches.local_exports.get(key.namespace(), key.name())?;
    let aggregate = view.snapshot.aggregate.as_ref()?;
    let cluster = &view.settings.cluster;
    let status = aggregate.exports.iter().find(|e| e.cluster == *cluster)?;
    let new = conditions(&status.conditions, &export.extract, view.wall);
    (conditions_digest(&new) != export.version.digest).then_some(new)
}

/// The member cluster's ServiceImport for an import: families and VIPs
/// limited to what the local cluster supports; with a derived Service
/// (`derived`: its name, and what was written of it), the ClusterIPs it
/// holds, which are what this member answers (ARCHITECTURE.md, "Derived
/// Services").
fn local_import(
    version: McsVersion,
    key: &ServiceKey,
    import: &Import,
    derived: Option<(&str, Option<&DerivedKept>)>,
) -> ServiceImport {
    let mut labels = import.exported.labels.clone();
    labels.insert(LABEL_MANAGED_BY.into(), MANAGER.into());
    let mut annotations = import.exported.annotations.clone();
    annotations.insert(
        records::ANNOTATION_CLUSTER_PORTS.into(),
        records::build::cluster_ports(import),
    );
    let derived_ips = derived.and_then(|(_, kept)| kept).map(|k| &k.ips[..]);
    let ips: Vec<String> = match derived_ips.filter(|ips| !ips.is_empty()) {
        Some(ips) => ips.iter().map(ToString::to_string).collect(),
        None => import.local_vips().map(|ip| ip.to_string()).collect(),
    };
    if let Some((name, _)) = derived {
        annotations.insert(records::ANNOTATION_DERIVED_SERVICE.into(), name.into());
    }
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
            ips,
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

/// The import's `Ready` condition in this member: the engine's, but where
/// the derived Service was refused the clusterset VIPs, that this member
/// answers a ClusterIP of its own instead.
fn ready(import: &Import, derived: Option<(&str, Option<&DerivedKept>)>) -> Condition {
    let refused =
        derived.and_then(|(name, kept)| Some((name, kept?, kept?.not_pinned.as_deref()?)));
    let Some((name, kept, why)) = refused.filter(|_| import.ready.status) else {
        return (*import.ready).clone();
    };
    let ips: Vec<String> = kept.ips.iter().map(ToString::to_string).collect();
    let message = format!(
        "derived Service {name} could not take the clusterset VIPs ({why}): this cluster answers its ClusterIP {} instead; delete the Service to try the VIPs again",
        ips.join(", ")
    );
    Condition::new(READY, true, reason::VIP_NOT_PINNED, message)
}

/// Kubernetes conditions for `new`, keeping the transition time of those
/// whose status did not change; the others changed at `now`.
fn conditions(new: &[Condition], old: &[Transition], now: Timestamp) -> Vec<K8sCondition> {
    let now = Time(now);
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
    use k8s_openapi::api::core::v1::Namespace;
    use kube::Resource;
    use kube::runtime::reflector::{self, store::Writer as StoreWriter};
    use kube::runtime::watcher::Event;

    use super::*;
    use crate::engine::aggregate::tests::{export, service};
    use crate::engine::{EngineSettings, VipSource};
    use crate::k8s::crd::{LABEL_SERVICE_NAME, ServiceExport, ServiceExportStatus};
    use crate::model::conditions::{CONFLICT, READY};
    use crate::model::port::ServicePort;
    use crate::model::{Change, Endpoint, Object};
    use crate::writeback::seen::Follow;

    /// The cluster whose writer plans.
    const HERE: &str = "west";
    const V: McsVersion = McsVersion::V1beta1;

    fn key() -> ServiceKey {
        ServiceKey::new("shop", "web")
    }

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|ip| ip.parse().unwrap()).collect()
    }

    /// What `HERE`'s writer plans from: the engine as Kubernetes mode runs
    /// it (VIPs agreed on the broker), the watched stores, the clocks.
    struct World {
        engine: Engine,
        caches: Caches,
        namespaces: StoreWriter<Namespace>,
        settings: WriterSettings,
        waiting_since: Option<Instant>,
        now: Instant,
    }

    impl World {
        /// Every store listed (empty), namespace `shop` present.
        fn new(local_families: &[IpFamily]) -> Self {
            let world = Self::unlisted(local_families);
            let caches = &world.caches;
            listed(&*caches.broker_records, Vec::new());
            listed(&*caches.broker_slices, Vec::new());
            listed(&*caches.local_imports, Vec::new());
            listed(&*caches.local_slices, Vec::new());
            listed(&*caches.local_services, Vec::new());
            listed(&*caches.local_exports, Vec::new());
            listed(&*caches.claims, Vec::new());
            world
        }

        /// No store listed yet (a writer just started).
        fn unlisted(local_families: &[IpFamily]) -> Self {
            let engine = Engine::new(EngineSettings {
                local_families: local_families.to_vec(),
                vip_source: VipSource::Assigned,
                local_cluster: Some(HERE.into()),
                ..EngineSettings::default()
            });
            let (store, namespaces) = reflector::store();
            let mut world = Self {
                engine,
                caches: Caches::new(HERE.into(), store),
                namespaces,
                settings: WriterSettings {
                    cluster: HERE.into(),
                    broker_namespace: BROKER.into(),
                    clusterset_ip: true,
                    pod_ips: false,
                    derived: DerivedServices::Off,
                },
                waiting_since: None,
                now: Instant::now(),
            };
            world.namespace(None);
            world
        }

        /// Namespace `shop`, being deleted since `deleted` if given.
        fn namespace(&mut self, deleted: Option<&str>) {
            let namespace = Namespace {
                metadata: ObjectMeta {
                    name: Some("shop".into()),
                    deletion_timestamp: deleted.map(|t| Time(t.parse().unwrap())),
                    ..ObjectMeta::default()
                },
                ..Namespace::default()
            };
            self.namespaces
                .apply_watcher_event(&Event::Apply(namespace));
        }

        /// `cluster` exports `key()` (created at `created`), a ClusterIP
        /// Service of `cluster_ips` with these ports.
        fn exports(
            &mut self,
            cluster: &str,
            created: i64,
            cluster_ips: &[&str],
            ports: &[(&str, i32)],
        ) {
            self.engine.apply([
                Change::Upsert(
                    cluster.into(),
                    key(),
                    Object::Service(Arc::new(service(cluster_ips, ports))),
                ),
                Change::Upsert(
                    cluster.into(),
                    key(),
                    Object::Export(Arc::new(export(created))),
                ),
            ]);
        }

        /// The user's ServiceExport of `key()` in this cluster, as watched
        /// (no status yet); returned as written.
        fn user_exported(&self) -> ServiceExport {
            let metadata = ObjectMeta {
                name: Some("web".into()),
                namespace: Some("shop".into()),
                ..ObjectMeta::default()
            };
            let export = versioned(ServiceExport::at(V, metadata, Default::default()));
            let event = Event::Apply(export.clone());
            self.caches.local_exports.on_event(&event);
            export
        }

        /// The broker's VIP record lists `vips` (the engine learns them).
        fn agreed(&mut self, vips: &[&str]) {
            self.engine.apply([Change::Vips(key(), ips(vips))]);
            let record = records::build::vip_record(V, &key(), &ips(vips));
            self.caches
                .broker_records
                .on_event(&Event::Apply(on_broker(record)));
        }

        fn plan(&self) -> Plan {
            let snapshot = Snapshot::of(&self.engine, &key(), &self.caches);
            let view = View {
                settings: &self.settings,
                caches: &self.caches,
                snapshot: &snapshot,
                at: At {
                    broker_imports: V,
                    local_imports: V,
                },
                waiting_since: self.waiting_since,
                now: self.now,
                wall: Timestamp::now(),
                slice_objects_dropped: false,
            };
            plan(&view, &key())
        }
    }

    /// An address of the default IPv6 VIP pool.
    fn v6_vip() -> String {
        let pool = EngineSettings::default().pools.v6;
        pool.hosts().nth(7).unwrap().to_string()
    }

    /// `store` after its first list, of `objects`.
    fn listed<K: Resource + Owned + Clone, X: Send + Sync>(
        store: &SeenStore<K, X>,
        objects: Vec<K>,
    ) {
        store.on_event(&Event::Init);
        for object in objects {
            store.on_event(&Event::InitApply(object));
        }
        store.on_event(&Event::InitDone);
    }

    const BROKER: &str = "clusterset-broker";

    /// `object` as the broker's API server stores it.
    fn on_broker<K: Resource>(mut object: K) -> K {
        object.meta_mut().namespace = Some(BROKER.into());
        versioned(object)
    }

    /// `object` as the API server stores it.
    fn versioned<K: Resource>(mut object: K) -> K {
        object.meta_mut().resource_version = Some("7".into());
        object.meta_mut().uid = Some("0b9c7c1e-8a3e-4c36-9d6e-2f1d3c4b5a69".into());
        object
    }

    /// The ServiceImport this cluster wrote before, carrying `vips`, with
    /// `clusters` (oldest export first) in its status.
    fn written_import(vips: &[&str], clusters: &[&str]) -> ServiceImport {
        let mut import = ServiceImport::at(
            V,
            ObjectMeta {
                name: Some("web".into()),
                namespace: Some("shop".into()),
                labels: Some([(LABEL_MANAGED_BY.to_owned(), MANAGER.to_owned())].into()),
                ..ObjectMeta::default()
            },
            ServiceImportSpec {
                ips: vips.iter().map(|ip| ip.to_string()).collect(),
                type_: ImportType::ClusterSetIP.as_str().into(),
                ..ServiceImportSpec::default()
            },
        );
        import.status = Some(ServiceImportStatus {
            clusters: clusters
                .iter()
                .map(|c| ClusterStatus {
                    cluster: c.to_string(),
                })
                .collect(),
            ..ServiceImportStatus::default()
        });
        versioned(import)
    }

    fn claim_candidates(plan: &Plan) -> &HashMap<IpFamily, Vec<IpAddr>> {
        match &plan.publish.vips {
            Vips::Claim { candidates, .. } => candidates,
            other => panic!("expected a claim, planned {other:?}"),
        }
    }

    /// ARCHITECTURE.md, "VIPs kept after the broker lost its records": the
    /// VIPs this cluster's ServiceImport carries are claimed first, so
    /// connections to them survive; one outside the pool is never offered.
    #[test]
    fn carried_vips_are_claimed_first_after_the_broker_lost_its_records() {
        let mut world = World::new(&[IpFamily::IPv4]);
        world.exports(HERE, 1, &["10.0.0.1"], &[("http", 80)]);
        listed(
            &*world.caches.local_imports,
            vec![written_import(&["243.9.9.9"], &[HERE])],
        );
        let plan = world.plan();
        assert_eq!(
            claim_candidates(&plan)[&IpFamily::IPv4][0],
            ips(&["243.9.9.9"])[0]
        );
        assert_eq!(
            plan.local.unwrap_err(),
            Later::Claiming,
            "the engine learns the VIPs first"
        );

        listed(
            &*world.caches.local_imports,
            vec![written_import(&["10.9.9.9"], &[HERE])],
        );
        let plan = world.plan();
        let candidates = &claim_candidates(&plan)[&IpFamily::IPv4];
        assert!(
            !candidates.contains(&ips(&["10.9.9.9"])[0]),
            "outside the pool: {candidates:?}"
        );
        assert_eq!(candidates.len(), CANDIDATES);
    }

    /// ARCHITECTURE.md, "VIPs kept after the broker lost its records": a
    /// member other than the oldest export's cluster leaves the claim to
    /// that cluster for [`DEFER`], then claims itself (that cluster is down).
    #[test]
    fn a_member_leaves_the_claim_to_the_oldest_exports_cluster_for_a_while() {
        let mut world = World::new(&[IpFamily::IPv4]);
        world.exports("east", 1, &["10.0.0.2"], &[("http", 80)]);
        world.exports(HERE, 2, &["10.0.0.1"], &[("http", 80)]);
        assert_eq!(world.plan().publish.vips, Vips::Wait(DEFER));
        world.waiting_since = Some(world.now - DEFER / 4);
        assert_eq!(world.plan().publish.vips, Vips::Wait(DEFER * 3 / 4));
        world.waiting_since = Some(world.now - DEFER);
        claim_candidates(&world.plan());

        // The oldest cluster named by the import this member carries decides,
        // not the broker's records, which a broker that lost them lost too.
        world.waiting_since = None;
        listed(
            &*world.caches.local_imports,
            vec![written_import(&["243.9.9.9"], &[HERE, "east"])],
        );
        claim_candidates(&world.plan());
    }

    /// ARCHITECTURE.md, "VIPs kept after the broker lost its records": while
    /// the VIP record stands, the claims the broker lost are written again
    /// (and only those), so no other service claims the addresses.
    #[test]
    fn agreed_vips_restore_only_the_claims_the_broker_lost() {
        let v6 = v6_vip();
        let mut world = World::new(&[IpFamily::IPv4, IpFamily::IPv6]);
        world.exports(HERE, 1, &["10.0.0.1", "fd00::1"], &[("http", 80)]);
        world.agreed(&["243.0.0.7", &v6]);
        assert_eq!(
            world.plan().publish.vips,
            Vips::Restore(ips(&["243.0.0.7", &v6]))
        );

        let held = vip_claims::claim(&key(), ips(&["243.0.0.7"])[0]);
        world.caches.claims.on_event(&Event::Apply(on_broker(held)));
        assert_eq!(world.plan().publish.vips, Vips::Restore(ips(&[&v6])));
    }

    /// Issue 46 (a member's credentials delete a VIP record): the engine
    /// keeps the VIPs of a service still exported, and the record is
    /// written again with exactly them (ARCHITECTURE.md, "A VIP survives
    /// the broker").
    #[test]
    fn a_vip_record_gone_is_written_again_with_the_same_vips() {
        let mut world = World::new(&[IpFamily::IPv4]);
        world.exports(HERE, 1, &["10.0.0.1"], &[("http", 80)]);
        world.agreed(&["243.0.0.7"]);
        world.engine.apply([Change::Vips(key(), Vec::new())]);
        let record = on_broker(records::build::vip_record(V, &key(), &[]));
        world.caches.broker_records.on_event(&Event::Delete(record));
        let plan = world.plan();
        assert_eq!(
            claim_candidates(&plan)[&IpFamily::IPv4],
            ips(&["243.0.0.7"])
        );
    }

    /// KEP-1645: a ClusterSetIP import has VIPs; when no cluster exports the
    /// service any longer, or its import needs none (the export turned VIPs
    /// off), the VIP record and its claims are released for other services.
    #[test]
    fn the_vip_record_is_released_when_no_export_needs_it() {
        let mut world = World::new(&[IpFamily::IPv4]);
        world.exports(HERE, 1, &["10.0.0.1"], &[("http", 80)]);
        world.agreed(&["243.0.0.7"]);
        assert_eq!(
            world.plan().publish.vips,
            Vips::Restore(ips(&["243.0.0.7"]))
        );

        let off = ExportInfo {
            clusterset_ip: Some(false),
            ..export(1)
        };
        world.engine.apply([Change::Upsert(
            HERE.into(),
            key(),
            Object::Export(Arc::new(off)),
        )]);
        assert_eq!(world.plan().publish.vips, Vips::Release);

        world.engine.apply([Change::Delete(
            HERE.into(),
            key(),
            crate::model::ObjectRef::Export,
        )]);
        assert_eq!(world.plan().publish.vips, Vips::Release);
        let record = on_broker(records::build::vip_record(V, &key(), &[]));
        world.caches.broker_records.on_event(&Event::Delete(record));
        assert_eq!(
            world.plan().publish.vips,
            Vips::Settled,
            "nothing left to release"
        );
    }

    /// KEP-1645 "IP families": the member's ServiceImport carries only the
    /// families (and their VIPs) the local cluster supports, while the
    /// export record on the broker carries the Service's own.
    #[test]
    fn the_local_import_carries_only_the_local_clusters_families() {
        let v6 = v6_vip();
        let mut world = World::new(&[IpFamily::IPv4]);
        world.exports(HERE, 1, &["10.0.0.1", "fd00::1"], &[("http", 80)]);
        world.agreed(&["243.0.0.7", &v6]);
        let plan = world.plan();
        let record = plan.publish.record.unwrap().desired.unwrap();
        assert_eq!(record.spec.ip_families, ["IPv4", "IPv6"]);
        let import = plan.local.unwrap().import.unwrap().desired.unwrap();
        assert_eq!(import.spec.ip_families, ["IPv4"]);
        assert_eq!(import.spec.ips, ["243.0.0.7"]);
    }

    /// KEP-1645 "Namespace sameness": a member whose namespace is gone or
    /// being deleted has no ServiceImport, and the MCS EndpointSlices it
    /// wrote go with it; a ServiceImport this controller did not write is
    /// never deleted.
    #[test]
    fn a_terminating_namespace_loses_the_import_and_its_slices() {
        let mut world = World::new(&[IpFamily::IPv4]);
        world.exports(HERE, 1, &["10.0.0.1"], &[("http", 80)]);
        world.agreed(&["243.0.0.7"]);
        let mut plan = world.plan().local.unwrap();
        let slices: Vec<EndpointSlice> = plan.slices.drain(..).filter_map(|w| w.desired).collect();
        assert_eq!(slices.len(), 1, "this cluster's ClusterIP slice");
        listed(
            &*world.caches.local_slices,
            slices.into_iter().map(versioned).collect(),
        );
        listed(
            &*world.caches.local_imports,
            vec![written_import(&["243.0.0.7"], &[HERE])],
        );

        world.namespace(Some("2026-12-07T08:00:00Z"));
        let local = world.plan().local.unwrap();
        let import = local.import.expect("the import is deleted");
        assert!(import.desired.is_none() && import.actual.is_some());
        assert!(local.status.is_none());
        assert_eq!(local.slices.len(), 1);
        assert!(
            local
                .slices
                .iter()
                .all(|w| w.desired.is_none() && w.actual.is_some())
        );

        let mut users = written_import(&["243.0.0.7"], &[HERE]);
        users.metadata.labels = None;
        listed(&*world.caches.local_imports, vec![users]);
        assert!(
            world.plan().local.unwrap().import.is_none(),
            "not ours to delete"
        );
    }

    /// KEP-1645 "Service Port": each exporting cluster's MCS EndpointSlices
    /// carry only the import's ports that cluster backs, so a data plane
    /// never sends a port's traffic to a cluster that does not serve it.
    #[test]
    fn member_slices_carry_only_the_ports_their_cluster_backs() {
        let mut world = World::new(&[IpFamily::IPv4]);
        world.exports(HERE, 1, &["10.0.0.1"], &[("http", 80), ("metrics", 9090)]);
        world.exports("east", 2, &["10.1.0.1"], &[("http", 80)]);
        let port = |name: &str, port| ServicePort {
            name: Some(name.into()),
            protocol: Some("TCP".into()),
            app_protocol: None,
            port,
        };
        let remote = SliceInfo {
            endpoints: vec![Endpoint {
                address: "10.1.0.1".parse().unwrap(),
                hostname: None,
                ready: true,
            }],
            ports: vec![port("http", 80), port("metrics", 9090)],
        };
        world.engine.apply([Change::Upsert(
            "east".into(),
            key(),
            Object::Slice("s".into(), Arc::new(remote)),
        )]);
        world.agreed(&["243.0.0.7"]);
        let local = world.plan().local.unwrap();
        let ports = |cluster: &str| {
            let slices = local.slices.iter().filter_map(|w| w.desired.as_ref());
            let mine: Vec<_> = slices
                .filter(|s| records::read::source_cluster(s) == Some(cluster))
                .collect();
            assert_eq!(mine.len(), 1, "one slice of {cluster}");
            let slice = mine[0];
            let mut names: Vec<String> = slice
                .ports
                .iter()
                .flatten()
                .filter_map(|p| p.name.clone())
                .collect();
            names.sort();
            names
        };
        assert_eq!(ports(HERE), ["http", "metrics"]);
        assert_eq!(ports("east"), ["http"]);
    }

    /// Issue 46: an export the engine refuses (a protected namespace) is
    /// not published: no export record, no slices on the broker.
    #[test]
    fn a_refused_export_is_not_published() {
        let mut world = World::new(&[IpFamily::IPv4]);
        world.engine = Engine::new(EngineSettings {
            protected: crate::model::trust::Protected::new(&["shop"]),
            vip_source: VipSource::Assigned,
            ..EngineSettings::default()
        });
        world.exports(HERE, 1, &["10.0.0.1"], &[("http", 80)]);
        let publish = world.plan().publish;
        assert!(
            publish.record.is_none() && publish.slices.is_empty(),
            "{publish:?}"
        );
    }

    /// Compared with stores their first list has not filled, everything
    /// this controller wrote would look missing: no local write is planned.
    #[test]
    fn local_writes_wait_for_the_first_lists() {
        let mut world = World::unlisted(&[IpFamily::IPv4]);
        world.exports(HERE, 1, &["10.0.0.1"], &[("http", 80)]);
        world
            .engine
            .apply([Change::Vips(key(), ips(&["243.0.0.7"]))]);
        assert_eq!(world.plan().local.unwrap_err(), Later::Unlisted);
    }

    /// What a plan asks for, once written, is what the next plan finds: it
    /// plans no write (the writer is idempotent; every object compared by
    /// its digest).
    #[test]
    fn a_plan_once_applied_plans_nothing() {
        let mut world = World::new(&[IpFamily::IPv4]);
        world.exports(HERE, 1, &["10.0.0.1"], &[("http", 80)]);
        world.exports("east", 2, &["10.1.0.1"], &[("http", 80)]);
        world.engine.apply([Change::Upsert(
            "east".into(),
            key(),
            Object::Slice(
                "s".into(),
                crate::engine::aggregate::tests::slice(&[("10.1.0.1", None, true)]),
            ),
        )]);
        world.agreed(&["243.0.0.7"]);
        world
            .caches
            .claims
            .on_event(&Event::Apply(on_broker(vip_claims::claim(
                &key(),
                ips(&["243.0.0.7"])[0],
            ))));
        let user_export = world.user_exported();

        let plan = world.plan();
        let caches = &world.caches;
        if let Some(write) = plan.publish.record {
            caches
                .broker_records
                .on_event(&Event::Apply(on_broker(write.desired.unwrap())));
        }
        for write in plan.publish.slices {
            caches
                .broker_slices
                .on_event(&Event::Apply(on_broker(write.desired.unwrap())));
        }
        let local = plan.local.unwrap();
        let mut import = versioned(local.import.unwrap().desired.unwrap());
        import.status = local.status;
        caches.local_imports.on_event(&Event::Apply(import.clone()));
        let uid = import.metadata.uid.unwrap();
        assert_eq!(local.slices.len(), 2, "one slice per exporting cluster");
        for write in local.slices {
            let mut slice = write.desired.unwrap();
            slices::set_owner_uid(&mut slice.metadata, &uid);
            caches
                .local_slices
                .on_event(&Event::Apply(versioned(slice)));
        }
        let conditions = local.export.expect("the export gets conditions");
        let mut export = user_export;
        export.status = Some(ServiceExportStatus { conditions });
        caches
            .local_exports
            .on_event(&Event::Apply(versioned(export)));

        let again = world.plan();
        assert!(again.publish.record.is_none(), "{:?}", again.publish.record);
        assert!(
            again.publish.slices.is_empty(),
            "{:?}",
            again.publish.slices
        );
        assert_eq!(again.publish.vips, Vips::Restore(Vec::new()));
        let local = again.local.unwrap();
        assert!(local.import.is_none() && local.status.is_none());
        assert!(local.slices.is_empty(), "{:?}", local.slices);
        assert!(local.export.is_none());
    }

    /// KEP-1645 "Conflict resolution": the export whose port definition
    /// differs from the oldest export's gets `Conflict=True` (it stays
    /// valid and exported).
    #[test]
    fn a_younger_conflicting_export_gets_a_conflict_condition() {
        let mut world = World::new(&[IpFamily::IPv4]);
        world.exports("east", 1, &["10.1.0.1"], &[("http", 80)]);
        world.exports(HERE, 2, &["10.0.0.1"], &[("http", 8080)]);
        world.user_exported();
        let conditions = world.plan().local.map(|l| l.export);
        let conditions = conditions
            .unwrap_or_else(|_| panic!("not claiming: east claims"))
            .unwrap();
        let status = |t: &str| {
            conditions
                .iter()
                .find(|c| c.type_ == t)
                .map(|c| c.status.clone())
        };
        assert_eq!(status(VALID).as_deref(), Some("True"));
        assert_eq!(status(CONFLICT).as_deref(), Some("True"));
    }

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
        let now: Timestamp = "2026-12-07T08:00:00Z".parse().unwrap();
        let out = conditions(&new, &kept, now);
        let at = |t: &str| {
            let c = out.iter().find(|c| c.type_ == t).unwrap();
            c.last_transition_time.0
        };
        assert_eq!(at(VALID).to_string(), before);
        assert_eq!(at(READY), now, "Ready changed status");
        assert_eq!(at(CONFLICT), now, "an Unknown status is no kept False");
        assert_eq!(out[0].reason, "Valid");
    }

    /// `HERE` exports `key()` (VIP `243.0.0.7`) and runs with `mode`.
    fn web_exported_here(mode: DerivedServices) -> World {
        let mut world = World::new(&[IpFamily::IPv4]);
        world.settings.derived = mode;
        world.exports(HERE, 1, &["10.0.0.1"], &[("http", 80)]);
        world.agreed(&["243.0.0.7"]);
        world
    }

    /// The derived Service `HERE` writes for `key()` once its import is
    /// written (uid `import-uid`), and the MCS slices' labels.
    fn derived_plan(world: &mut World) -> (Option<Write<Service>>, Vec<EndpointSlice>, Local) {
        let mut import = written_import(&["243.0.0.7"], &[HERE]);
        import.metadata.uid = Some("import-uid".into());
        listed(&*world.caches.local_imports, vec![import]);
        let mut local = world.plan().local.unwrap();
        let slices = local.slices.drain(..).filter_map(|w| w.desired).collect();
        (local.derived.take(), slices, local)
    }

    /// Issue 47 (KEP-1645 "Tracking Endpoints": a data plane load-balances
    /// the MCS EndpointSlices of an import): with `--derived-services
    /// clusterset` the derived Service is a selectorless ClusterIP Service
    /// pinned to the clusterset VIPs, owned by the ServiceImport, with the
    /// import's ports and families; the slices carry its name as
    /// `kubernetes.io/service-name`, and the import names it.
    #[test]
    fn a_clusterset_derived_service_is_pinned_to_the_vips() {
        let mut world = World::new(&[IpFamily::IPv4, IpFamily::IPv6]);
        world.settings.derived = DerivedServices::Clusterset;
        world.exports(HERE, 1, &["10.0.0.1", "fd00::1"], &[("http", 80)]);
        world.agreed(&["243.0.0.7", "fd00:c5e7::7"]);
        let (write, slices, local) = derived_plan(&mut world);
        let service = write.expect("a derived Service").desired.unwrap();
        let name = records::derived_service_name(&key());
        assert!(name.starts_with("derived-") && name.len() == 24, "{name}");
        assert_eq!(service.metadata.name.as_deref(), Some(name.as_str()));
        let owner = &service.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("ServiceImport", "web")
        );
        let spec = service.spec.as_ref().unwrap();
        assert_eq!(spec.selector, None, "kube-proxy must use our slices only");
        assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
        assert_eq!(spec.cluster_ip.as_deref(), Some("243.0.0.7"));
        let pinned = spec.cluster_ips.clone().unwrap();
        assert_eq!(pinned, ["243.0.0.7", "fd00:c5e7::7"]);
        assert_eq!(spec.ip_families.clone().unwrap(), ["IPv4", "IPv6"]);
        assert_eq!(spec.ip_family_policy.as_deref(), Some("RequireDualStack"));
        let ports = spec.ports.as_ref().unwrap();
        assert_eq!(
            (ports[0].name.as_deref(), ports[0].port),
            (Some("http"), 80)
        );
        assert!(derived::is_pinned(&service));
        assert_eq!(slices.len(), 2, "one slice per family");
        for slice in &slices {
            let labels = slice.metadata.labels.as_ref().unwrap();
            assert_eq!(labels.get(LABEL_SERVICE_NAME), Some(&name));
        }
        let import = local.import.unwrap().desired.unwrap();
        let annotations = import.metadata.annotations.unwrap();
        assert_eq!(
            annotations.get(records::ANNOTATION_DERIVED_SERVICE),
            Some(&name)
        );
    }

    /// Issue 47: a derived Service the API server refused the VIPs (its
    /// annotation says why) is kept with the ClusterIP it got, which the
    /// ServiceImport lists, with `Ready=True` reason `VIPNotPinned`.
    #[test]
    fn a_refused_pin_keeps_the_allocated_clusterip_and_says_why() {
        let mut world = web_exported_here(DerivedServices::Clusterset);
        let (write, _, _) = derived_plan(&mut world);
        let pinned = write.unwrap().desired.unwrap();
        let why = "failed to allocate IP 243.0.0.7: provided IP is already allocated";
        let mut refused = derived::unpinned(pinned, why);
        assert!(!derived::is_pinned(&refused));
        refused.spec.as_mut().unwrap().cluster_ips = Some(vec!["10.96.0.9".into()]);
        refused.spec.as_mut().unwrap().cluster_ip = Some("10.96.0.9".into());
        listed(&*world.caches.local_services, vec![versioned(refused)]);

        let (write, _, local) = derived_plan(&mut world);
        assert!(write.is_none(), "kept as it is: {write:?}");
        assert!(local.not_pinned);
        let import = local.import.unwrap().desired.unwrap();
        assert_eq!(import.spec.ips, ["10.96.0.9"], "what this member answers");
        let ready = &local.status.unwrap().conditions[0];
        assert_eq!(
            (ready.type_.as_str(), ready.status.as_str()),
            ("Ready", "True")
        );
        assert_eq!(ready.reason, "VIPNotPinned");
        assert!(ready.message.contains(why), "{}", ready.message);
    }

    /// Issue 47: `per-cluster` leaves the ClusterIP to the API server and
    /// keeps the one it allocated, which the ServiceImport lists; a
    /// headless import gets no derived Service, and one written before goes.
    #[test]
    fn a_per_cluster_derived_service_keeps_its_allocated_clusterip() {
        let mut world = web_exported_here(DerivedServices::PerCluster);
        let (write, _, _) = derived_plan(&mut world);
        let mut service = write.unwrap().desired.unwrap();
        let spec = service.spec.as_mut().unwrap();
        assert_eq!(
            (spec.cluster_ip.as_ref(), spec.cluster_ips.as_ref()),
            (None, None)
        );
        assert_eq!(spec.ip_family_policy.as_deref(), Some("SingleStack"));
        spec.cluster_ip = Some("10.96.0.4".into());
        spec.cluster_ips = Some(vec!["10.96.0.4".into()]);
        listed(&*world.caches.local_services, vec![versioned(service)]);
        let (write, _, local) = derived_plan(&mut world);
        assert!(write.is_none(), "unchanged: {write:?}");
        assert!(!local.not_pinned);
        let import = local.import.unwrap().desired.unwrap();
        assert_eq!(import.spec.ips, ["10.96.0.4"]);

        world.settings.derived = DerivedServices::Off;
        let (write, slices, _) = derived_plan(&mut world);
        let write = write.expect("the derived Service goes when turned off");
        assert!(write.desired.is_none() && write.actual.is_some());
        let labelled = |s: &EndpointSlice| {
            s.metadata
                .labels
                .as_ref()
                .unwrap()
                .contains_key(LABEL_SERVICE_NAME)
        };
        assert!(!slices.iter().any(labelled));
    }

    /// Issue 47: a member switched from `clusterset` to `per-cluster` makes
    /// its derived Service again (a ClusterIP cannot change in place), so
    /// that it gets a ClusterIP of its own range.
    #[test]
    fn a_pinned_derived_service_is_made_again_per_cluster() {
        let mut world = web_exported_here(DerivedServices::Clusterset);
        let (write, _, _) = derived_plan(&mut world);
        let pinned = write.unwrap().desired.unwrap();
        listed(&*world.caches.local_services, vec![versioned(pinned)]);
        let (write, _, _) = derived_plan(&mut world);
        assert!(write.is_none(), "pinned and kept: {write:?}");

        world.settings.derived = DerivedServices::PerCluster;
        let (write, _, _) = derived_plan(&mut world);
        let write = write.expect("deleted, to be made again");
        assert!(write.desired.is_none() && write.actual.is_some());
    }
}
