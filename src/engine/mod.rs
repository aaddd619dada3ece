//! The engine: keeps every cluster's inputs per service and turns them
//! into imports, export conditions and VIPs. No I/O and no clock: sources feed
//! it [`Change`]s, the index reads the [`Import`]s it returns.

pub(crate) mod aggregate;
pub(crate) mod liveness;
pub mod vip;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

use crate::model::conditions::ConflictReason;
use crate::model::conditions::{Condition, READY, reason};
use crate::model::import::{Aggregate, ExportStatus, Import, ImportCluster};
use crate::model::limits::{Budget, Limit, Limits};
use crate::model::trust::{Declared, Protected};
use crate::model::{
    Change, ClusterId, Hasher, ImportType, IpFamily, Ips, Object, ObjectRef, ServiceKey,
};
pub use aggregate::{ClusterInputs, PerCluster, Policy};
use vip::{VipAllocator, VipPools};

/// Who decides which VIP an import gets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum VipSource {
    /// The engine's own allocator (one instance sees the whole clusterset).
    #[default]
    Allocate,
    /// The clusterset, through [`Change::Vips`] (Kubernetes mode: the broker).
    Assigned,
}

/// Settings the engine needs from the command line.
#[derive(Clone, Debug)]
pub struct EngineSettings {
    /// Families the local cluster supports (DNS serves only these).
    pub local_families: Vec<IpFamily>,
    /// Where VIPs come from.
    pub pools: VipPools,
    /// Whether imports get clusterset VIPs when their exports do not say.
    pub clusterset_ip: bool,
    /// Who picks VIPs.
    pub vip_source: VipSource,
    /// The cluster this instance runs in (its ClusterIPs come first when an
    /// import has no VIPs); `None` outside a cluster.
    pub local_cluster: Option<ClusterId>,
    /// Whether imports are served only in the namespaces the local cluster
    /// has, as [`Change::Namespace`] reports them (Kubernetes mode; KEP-1645
    /// "Namespace sameness": a member without the namespace has no
    /// ServiceImport, so its DNS has no names for it).
    pub namespaces_known: bool,
    /// Namespaces whose exports are refused (`Valid=False`): Kubernetes
    /// mode's, see [`crate::model::trust`].
    pub protected: Protected,
    /// The namespaces each cluster may export from (Kubernetes mode's
    /// `--cluster-namespaces`): an export elsewhere is refused
    /// (`Valid=False`, `NamespaceNotAllowed`).
    pub declared: Declared,
    /// The caps on what one cluster may publish and on the VIPs of one
    /// namespace (Kubernetes mode's; [`Limits::NONE`] in embedded mode).
    pub limits: Limits,
}

impl Default for EngineSettings {
    fn default() -> Self {
        Self {
            local_families: vec![IpFamily::IPv4, IpFamily::IPv6],
            pools: VipPools::default(),
            clusterset_ip: true,
            vip_source: VipSource::Allocate,
            local_cluster: None,
            namespaces_known: false,
            protected: Protected::default(),
            declared: Declared::default(),
            limits: Limits::NONE,
        }
    }
}

/// Whatever holds the running engine (the runtime's apply loop, behind its lock), for
/// those who read it while it runs: the writer and `/debug/explain`.
pub trait EngineReader: Send + Sync {
    /// Calls `read` with the engine as it is now.
    fn read(&self, read: &mut dyn FnMut(&Engine));
}

/// Totals over every service, kept current by each reconcile (for metrics).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Imports of type ClusterSetIP.
    pub cluster_set_ip: usize,
    /// Imports of type Headless.
    pub headless: usize,
    /// Ready endpoints across all imports.
    pub endpoints: usize,
    /// Exports in conflict, by reason.
    pub conflicts: BTreeMap<ConflictReason, usize>,
}

impl Stats {
    fn count(&mut self, aggregate: &Aggregate, add: bool) {
        let change =
            |n: &mut usize, by: usize| *n = if add { *n + by } else { n.saturating_sub(by) };
        if let Some(import) = &aggregate.import {
            let kind = match import.type_ {
                ImportType::ClusterSetIP => &mut self.cluster_set_ip,
                ImportType::Headless => &mut self.headless,
            };
            change(kind, 1);
            change(
                &mut self.endpoints,
                import.clusters.iter().map(|c| c.endpoints.len()).sum(),
            );
        }
        for reason in aggregate.exports.iter().flat_map(|e| e.conflicts.iter()) {
            change(self.conflicts.entry(*reason).or_default(), 1);
        }
    }
}

/// All inputs, the latest aggregate per service, and the VIP allocator.
#[derive(Debug)]
pub struct Engine {
    local_families: Vec<IpFamily>,
    clusterset_ip: bool,
    vip_source: VipSource,
    local_cluster: Option<ClusterId>,
    /// The local cluster's namespaces, when imports are served only there.
    namespaces: Option<HashSet<Arc<str>>>,
    /// Namespaces whose exports are refused.
    protected: Protected,
    /// The namespaces each cluster may export from.
    declared: Declared,
    /// What each cap keeps.
    budgets: Budgets,
    /// Services another's change under a cap moved in or out of it, to be
    /// reconciled in the same apply.
    displaced: Vec<ServiceKey>,
    stats: Stats,
    inputs: HashMap<ServiceKey, PerCluster, Hasher>,
    results: HashMap<ServiceKey, Aggregate, Hasher>,
    vips: VipAllocator,
    /// Services whose VIPs are kept though the broker's VIP record of them
    /// is gone, because their import still answers them (ARCHITECTURE.md,
    /// "A VIP survives the broker"); released once it needs none.
    unrecorded: HashSet<ServiceKey, Hasher>,
    /// Clusters whose heartbeat timed out ([`Change::Live`]).
    dead: BTreeSet<ClusterId>,
    /// What the applies since the last [`Engine::take_notes`] could not do
    /// cleanly; the engine does no I/O, so the runtime logs and counts them.
    notes: Vec<Note>,
    /// What [`Engine::load`] applied and the next [`Engine::apply`] reconciles.
    unreconciled: Touched,
}

/// The services a batch of changes touched, and the namespaces that came or
/// went in it.
#[derive(Debug, Default)]
struct Touched {
    services: HashSet<ServiceKey, Hasher>,
    namespaces: HashSet<Arc<str>>,
}

/// Something an apply could not do cleanly.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Note {
    /// A ClusterSetIP import got no VIP: its pool has no free address.
    PoolExhausted {
        /// The service left without a VIP.
        service: ServiceKey,
        /// Which pool.
        error: vip::PoolExhausted,
    },
    /// The broker's VIP record gives an address another service holds.
    SharedVip {
        /// The service the record is for.
        service: ServiceKey,
        /// The address.
        ip: IpAddr,
        /// The service holding it.
        holder: ServiceKey,
    },
    /// A cluster uses a clusterset VIP for a Service or an endpoint.
    ClusterUsesVip {
        /// The address.
        ip: IpAddr,
        /// The service whose VIP it is.
        holder: ServiceKey,
    },
    /// A cap now leaves a service out: a cluster's export of it, or its VIPs.
    Limited {
        /// Which cap.
        limit: Limit,
        /// The cluster, or the namespace, the cap is on.
        scope: Arc<str>,
        /// The service left out.
        service: ServiceKey,
    },
}

impl std::fmt::Display for Note {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Note::PoolExhausted { service, error } => {
                write!(f, "{service}: no VIP for the import: {error}")
            }
            Note::SharedVip {
                service,
                ip,
                holder,
            } => {
                write!(
                    f,
                    "{service}: the broker gives VIP {ip}, which {holder} holds"
                )
            }
            Note::ClusterUsesVip { ip, holder } => {
                write!(f, "a cluster uses {ip}, the clusterset VIP of {holder}")
            }
            Note::Limited {
                limit,
                scope,
                service,
            } => write!(f, "{service}: left out by --{limit} ({scope} is over it)"),
        }
    }
}

impl Engine {
    /// An empty engine.
    pub fn new(settings: EngineSettings) -> Self {
        Self {
            local_families: settings.local_families,
            clusterset_ip: settings.clusterset_ip,
            vip_source: settings.vip_source,
            local_cluster: settings.local_cluster,
            namespaces: settings.namespaces_known.then(HashSet::new),
            protected: settings.protected,
            declared: settings.declared,
            budgets: Budgets::new(settings.limits),
            displaced: Vec::new(),
            stats: Stats::default(),
            inputs: HashMap::default(),
            results: HashMap::default(),
            vips: VipAllocator::new(settings.pools),
            unrecorded: HashSet::default(),
            dead: BTreeSet::new(),
            notes: Vec::new(),
            unreconciled: Touched::default(),
        }
    }

    /// What the applies since the last call could not do cleanly.
    pub fn take_notes(&mut self) -> Vec<Note> {
        std::mem::take(&mut self.notes)
    }

    /// The VIP allocator (to restore or save allocations).
    pub fn vips_mut(&mut self) -> &mut VipAllocator {
        &mut self.vips
    }

    /// Applies changes, reconciles each touched service once, and returns
    /// the services whose served import changed, with the new import (None:
    /// gone, or its namespace is not in the local cluster).
    pub fn apply(
        &mut self,
        changes: impl IntoIterator<Item = Change>,
    ) -> Vec<(ServiceKey, Option<Arc<Import>>)> {
        let mut touched = std::mem::take(&mut self.unreconciled);
        self.apply_inputs(changes, &mut touched);
        let Touched {
            services,
            namespaces: moved,
        } = touched;
        let mut touched: Vec<ServiceKey> = services.into_iter().collect();
        touched.sort();
        let mut updates = Vec::new();
        if !moved.is_empty() {
            // Services of a namespace that came or went are shown or hidden
            // as they are (no reconcile: their inputs did not change).
            let untouched = self.results.iter().filter(|(k, _)| {
                moved.contains(k.namespace()) && touched.binary_search(k).is_err()
            });
            updates.extend(untouched.map(|(k, r)| (k.clone(), self.served(k, r.import.clone()))));
        }
        updates.extend(touched.into_iter().filter_map(|key| {
            let moved = moved.contains(key.namespace());
            self.reconcile_served(key, moved)
        }));
        // A VIP cap moved others in or out (by name: at most a few per
        // change, ARCHITECTURE.md "Trust between clusters").
        while !self.displaced.is_empty() {
            let mut displaced = std::mem::take(&mut self.displaced);
            displaced.sort();
            displaced.dedup();
            let again = displaced.into_iter();
            updates.extend(again.filter_map(|key| self.reconcile_served(key, false)));
        }
        updates
    }

    /// Reconciles `key`; returns its served import when that changed (or
    /// when `moved`: its namespace came or went).
    fn reconcile_served(
        &mut self,
        key: ServiceKey,
        moved: bool,
    ) -> Option<(ServiceKey, Option<Arc<Import>>)> {
        let before = self.results.get(&key).and_then(|r| r.import.clone());
        let before = self.served(&key, before);
        let after = self.reconcile(&key);
        let after = self.served(&key, after);
        (before != after || moved).then_some((key, after))
    }

    /// Applies changes to the inputs only: the services they touch are
    /// reconciled by the next [`Engine::apply`]. For the first sync of
    /// Kubernetes mode, whose facts arrive in many batches before anything
    /// is served: each service is reconciled once, when all have arrived.
    pub fn load(&mut self, changes: impl IntoIterator<Item = Change>) {
        let mut touched = std::mem::take(&mut self.unreconciled);
        self.apply_inputs(changes, &mut touched);
        self.unreconciled = touched;
    }

    /// Applies each change to the inputs, noting what it touched.
    fn apply_inputs(&mut self, changes: impl IntoIterator<Item = Change>, touched: &mut Touched) {
        for change in changes {
            match (change.service(), &change) {
                (Some(key), _) if !touched.services.contains(key) => {
                    touched.services.insert(key.clone());
                }
                (None, Change::Live(cluster, _)) => {
                    touched.services.extend(self.services_of(cluster));
                }
                _ => {}
            }
            // A Service weighs nothing under the caps: only exports and slices.
            let weighed = match &change {
                Change::Upsert(cluster, key, object)
                    if object.reference() != ObjectRef::Service =>
                {
                    Some((cluster.clone(), key.clone()))
                }
                Change::Delete(cluster, key, reference) if *reference != ObjectRef::Service => {
                    Some((cluster.clone(), key.clone()))
                }
                _ => None,
            };
            let before = weighed.as_ref().map(|(c, k)| self.weights(c, k));
            touched.namespaces.extend(self.apply_one(change));
            if let (Some((cluster, key)), Some(before)) = (weighed, before) {
                self.weigh(&cluster, &key, before, &mut touched.services);
            }
        }
    }

    /// What `cluster` publishes of `key` under the per-cluster caps
    /// ([`CLUSTER_LIMITS`] order).
    fn weights(&self, cluster: &ClusterId, key: &ServiceKey) -> [u64; 2] {
        let entry = self.inputs.get(key).and_then(|c| c.get(cluster));
        entry.map_or([0, 0], cluster_weights)
    }

    /// Puts what `cluster` now publishes of `key` (`before`: what it did)
    /// under its caps; the services whose place under a cap this changed
    /// join `touched`.
    fn weigh(
        &mut self,
        cluster: &ClusterId,
        key: &ServiceKey,
        before: [u64; 2],
        touched: &mut HashSet<ServiceKey, Hasher>,
    ) {
        let after = self.weights(cluster, key);
        let (budgets, inputs, notes) = (&mut self.budgets, &self.inputs, &mut self.notes);
        for (i, limit) in CLUSTER_LIMITS.into_iter().enumerate() {
            // Every service of the cluster, should the cap need ranking.
            let every = || {
                let of_cluster = inputs.iter().filter_map(|(k, per)| {
                    let weight = cluster_weights(per.get(cluster)?)[i];
                    (weight > 0).then(|| (k.clone(), weight))
                });
                of_cluster.collect()
            };
            let change = (before[i], after[i]);
            touched.extend(budgets.count(limit, cluster, key, change, every, notes));
        }
    }

    /// The import of `result` as the local cluster serves it: none where
    /// the local cluster lacks the namespace.
    fn served(&self, key: &ServiceKey, import: Option<Arc<Import>>) -> Option<Arc<Import>> {
        let present = self
            .namespaces
            .as_ref()
            .is_none_or(|n| n.contains(key.namespace()));
        import.filter(|_| present)
    }

    /// Releases VIPs restored from a saved state that no import claimed
    /// (VIPs assigned by the clusterset are the clusterset's to release).
    pub fn release_unclaimed_vips(&mut self) {
        if self.vip_source == VipSource::Assigned {
            return;
        }
        let results = &self.results;
        self.vips
            .retain(|k| results.get(k).is_some_and(|r| r.import.is_some()));
    }

    /// Totals over every service.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The VIP allocator.
    pub fn vips(&self) -> &VipAllocator {
        &self.vips
    }

    /// The aggregate of a service, if it has any export.
    pub fn get(&self, key: &ServiceKey) -> Option<&Aggregate> {
        self.results.get(key)
    }

    /// Whether `cluster`'s heartbeat is current (a cluster never reported is live).
    pub fn is_live(&self, cluster: &ClusterId) -> bool {
        !self.dead.contains(cluster)
    }

    /// What every cluster said about a service.
    pub fn inputs(&self, key: &ServiceKey) -> Option<&PerCluster> {
        self.inputs.get(key)
    }

    /// Every service some cluster said something about.
    pub fn keys(&self) -> impl Iterator<Item = &ServiceKey> {
        self.inputs.keys()
    }

    /// Every service `cluster` said something about.
    pub fn services_of(&self, cluster: &ClusterId) -> Vec<ServiceKey> {
        let of = |(key, clusters): (&ServiceKey, &PerCluster)| {
            clusters.contains_key(cluster).then(|| key.clone())
        };
        self.inputs.iter().filter_map(of).collect()
    }

    /// Every service with at least one export, sorted by key.
    pub fn aggregates(&self) -> Vec<(&ServiceKey, &Aggregate)> {
        let mut all: Vec<_> = self.results.iter().collect();
        all.sort_by(|a, b| a.0.cmp(b.0));
        all
    }

    /// Whether `key`'s import answers VIPs now.
    fn answers_vips(&self, key: &ServiceKey) -> bool {
        let import = self.results.get(key).and_then(|r| r.import.as_deref());
        import.is_some_and(|i| !i.vips.is_empty())
    }

    /// Applies one change; returns the namespace whose presence it changed.
    fn apply_one(&mut self, change: Change) -> Option<Arc<str>> {
        match change {
            Change::Upsert(cluster, key, object) => {
                let clusters = self.inputs.entry(key).or_default();
                if !clusters.contains_key(&cluster) {
                    clusters.insert(cluster.clone(), ClusterInputs::default());
                    // Exactly as many entries as clusters: there are 100k+ of these.
                    let mut exact = std::mem::take(clusters).into_tuple_vec();
                    exact.shrink_to_fit();
                    *clusters = PerCluster::from_sorted_store_unchecked(exact);
                }
                let entry = clusters.get_mut(&cluster).expect("inserted above");
                let old = match object.reference() {
                    ObjectRef::Export | ObjectRef::Seen | ObjectRef::Derived => None,
                    _ => Some(addresses(entry, &object.reference())),
                };
                match object {
                    Object::Export(e) => entry.export = Some(e),
                    Object::Service(s) => entry.service = Some(s),
                    Object::Slice(name, s) => {
                        entry.slices.insert(name, s);
                    }
                    Object::Seen(at) => entry.seen = Some(at),
                    Object::Derived(ips) => entry.derived = Some(ips),
                }
                if let Some(old) = old {
                    let new = addresses(entry, &old.0);
                    self.remark(&old.1, &new.1);
                }
            }
            Change::Vips(key, ips) if ips.is_empty() && self.answers_vips(&key) => {
                // Gone from the broker, not released: answers keep the VIPs
                // until a cluster writes the record again.
                self.unrecorded.insert(key);
            }
            Change::Vips(key, ips) => {
                self.unrecorded.remove(&key);
                for (holder, ip) in self.vips.assign(&key, &ips) {
                    let service = key.clone();
                    self.notes.push(Note::SharedVip {
                        service,
                        ip,
                        holder,
                    });
                }
            }
            Change::Live(cluster, true) => {
                self.dead.remove(&cluster);
            }
            Change::Live(cluster, false) => {
                self.dead.insert(cluster);
            }
            Change::Delete(cluster, key, reference) => {
                let clusters = self.inputs.get_mut(&key)?;
                let entry = clusters.get_mut(&cluster)?;
                let (_, old) = addresses(entry, &reference);
                match &reference {
                    ObjectRef::Export => entry.export = None,
                    ObjectRef::Service => entry.service = None,
                    ObjectRef::Slice(name) => {
                        entry.slices.remove(name);
                    }
                    ObjectRef::Seen => entry.seen = None,
                    ObjectRef::Derived => entry.derived = None,
                }
                if entry.is_empty() {
                    clusters.remove(&cluster);
                }
                if clusters.is_empty() {
                    self.inputs.remove(&key);
                }
                self.remark(&old, &[]);
            }
            Change::Namespace(name, exists) => {
                let namespaces = self.namespaces.as_mut()?;
                let changed = if exists {
                    namespaces.insert(name.clone())
                } else {
                    namespaces.remove(&name)
                };
                return changed.then_some(name);
            }
        }
        None
    }

    /// Keeps the allocator's view of cluster-used pool addresses current.
    fn remark(&mut self, old: &[IpAddr], new: &[IpAddr]) {
        for ip in old {
            self.vips.unmark_cluster_address(*ip);
        }
        for ip in new {
            if let Some(holder) = self.vips.mark_cluster_address(*ip) {
                self.notes.push(Note::ClusterUsesVip {
                    ip: *ip,
                    holder: holder.clone(),
                });
            }
        }
    }

    fn reconcile(&mut self, key: &ServiceKey) -> Option<Arc<Import>> {
        if let Some(old) = self.results.get(key) {
            self.stats.count(old, false);
        }
        let allocate = self.vip_source == VipSource::Allocate;
        let Some(inputs) = self.inputs.get(key) else {
            self.results.remove(key);
            if allocate || self.unrecorded.remove(key) {
                self.vips.release(key);
            }
            self.keeps_vips(key, false);
            return None;
        };
        let policy = Policy {
            local_families: &self.local_families,
            clusterset_ip: self.clusterset_ip,
            namespace_protected: self.protected.refuses(key).is_err(),
        };
        let refused = self.refusals(key, inputs, policy.namespace_protected);
        let mut result = if refused.is_empty() {
            aggregate::aggregate(inputs, &policy)
        } else {
            // The refused exports are left out, as if withdrawn, and each
            // gets its own status (ARCHITECTURE.md, "Trust between clusters").
            let mut kept = inputs.clone();
            for status in &refused {
                if let Some(input) = kept.get_mut(&status.cluster) {
                    input.export = None;
                }
            }
            let mut result = aggregate::aggregate(&kept, &policy);
            result.exports.extend(refused);
            result.exports.sort_by(|a, b| a.cluster.cmp(&b.cluster));
            result
        };
        if let Some(import) = &mut result.import {
            liveness::leave_out_dead(import, &self.dead);
            let close = close_cluster(import, self.local_cluster.as_ref());
            if close != import.close {
                Arc::make_mut(import).close = close;
            }
        }
        let wants_vips = result
            .import
            .as_ref()
            .is_some_and(|i| i.type_ == ImportType::ClusterSetIP && i.clusterset_ip);
        let vips_kept = self.keeps_vips(key, wants_vips);
        if let Some(import) = result.import.as_mut().filter(|_| !vips_kept) {
            // Over its namespace's cap: served as an import without VIPs
            // (every cluster's ClusterIPs), and the writer claims none.
            let import = Arc::make_mut(import);
            import.clusterset_ip = false;
            if import.ready.status {
                let cap = self.budgets.limits.vips_per_namespace;
                let message = format!(
                    "namespace {} holds its cap of {cap} clusterset VIPs (--{}): this import resolves to every cluster's ClusterIPs",
                    key.namespace(),
                    Limit::VipsPerNamespace,
                );
                import.ready = Arc::new(Condition::new(
                    READY,
                    true,
                    reason::VIP_LIMIT_REACHED,
                    message,
                ));
            }
        }
        // VIPs kept without their record go once the import needs none.
        let needs_vips = result.import.as_ref().is_some_and(|i| i.clusterset_ip);
        if !(wants_vips && needs_vips) && self.unrecorded.remove(key) {
            self.vips.release(key);
        }
        match &mut result.import {
            Some(import) if import.type_ == ImportType::ClusterSetIP => {
                let import = Arc::make_mut(import);
                if !import.clusterset_ip {
                    if allocate {
                        self.vips.release(key);
                    }
                } else if allocate {
                    match self.vips.ensure(key, &import.ip_families) {
                        Ok(vips) => import.vips = vips.into_iter().collect(),
                        Err(error) => self.notes.push(Note::PoolExhausted {
                            service: key.clone(),
                            error,
                        }),
                    }
                } else {
                    import.vips = self
                        .vips
                        .held(key, &import.ip_families)
                        .into_iter()
                        .collect();
                }
                let local = self.local_cluster.as_ref();
                let derived = local.and_then(|l| self.inputs.get(key)?.get(l)?.derived.as_ref());
                import.addresses = served_addresses(import, local, derived);
            }
            _ if allocate => self.vips.release(key),
            _ => {}
        }
        let import = result.import.clone();
        if result.exports.is_empty() {
            self.results.remove(key);
        } else {
            self.stats.count(&result, true);
            self.results.insert(key.clone(), result);
        }
        import
    }
}

impl Engine {
    /// The exports of `key` refused for what is declared of their cluster
    /// (none in a protected namespace: the aggregation refuses them all).
    fn refusals(
        &self,
        key: &ServiceKey,
        inputs: &PerCluster,
        protected: bool,
    ) -> Vec<ExportStatus> {
        if protected {
            return Vec::new();
        }
        let exporting = inputs.iter().filter(|(_, input)| input.export.is_some());
        exporting
            .filter_map(|(cluster, _)| {
                let (why, refusal) = match self.declared.namespace(cluster, key) {
                    Err(refusal) => (reason::NAMESPACE_NOT_ALLOWED, refusal),
                    Ok(()) => self.budgets.refusal(cluster, key)?,
                };
                Some(ExportStatus::refused(cluster.clone(), why, refusal))
            })
            .collect()
    }

    /// Puts `key` under its namespace's VIP cap (`wants`: its import is
    /// to have VIPs); whether the cap keeps it.
    fn keeps_vips(&mut self, key: &ServiceKey, wants: bool) -> bool {
        let namespace = key.namespace();
        let limit = Limit::VipsPerNamespace;
        let moved = self
            .budgets
            .rank(limit, namespace, key, u64::from(wants), &mut self.notes);
        self.displaced.extend(moved);
        self.budgets.keeps(limit, namespace, key)
    }

    /// How many are left out by `limit` now: exports (per cluster caps) or
    /// imports without their VIPs.
    pub fn limited(&self, limit: Limit) -> usize {
        self.budgets.refused(limit)
    }
}

/// The caps on one cluster, in the order of [`cluster_weights`].
const CLUSTER_LIMITS: [Limit; 2] = [Limit::ExportsPerCluster, Limit::EndpointsPerCluster];

/// What a cluster's inputs for one service weigh under [`CLUSTER_LIMITS`]:
/// its export, and the endpoints of its slices while it exports.
fn cluster_weights(input: &ClusterInputs) -> [u64; 2] {
    if input.export.is_none() {
        return [0, 0];
    }
    let endpoints = input
        .slices
        .values()
        .map(|s| s.endpoints.len())
        .sum::<usize>();
    [1, endpoints as u64]
}

/// What one cap knows of one cluster or namespace.
#[derive(Debug)]
enum Tally {
    /// Everything fits: only the total weight is kept (a sum per change,
    /// no order).
    Total(u64),
    /// It did not fit: every service in order, which [`Budget`] keeps.
    Ranked(Budget<ServiceKey>),
}

/// What each cap keeps, per cluster (exports, endpoints) or per namespace
/// (VIPs); nothing for a cap that is off. A cluster's caps count totals
/// until one is exceeded, and rank its services only then (ranking every
/// export cost about 1.4 µs and 50 bytes per exported service and cluster,
/// measured at 110k services × 3 clusters), and count again once the
/// cluster is back under half its cap.
#[derive(Debug)]
struct Budgets {
    limits: Limits,
    of: HashMap<(Limit, Arc<str>), Tally, Hasher>,
}

impl Budgets {
    fn new(limits: Limits) -> Self {
        Self {
            limits,
            of: HashMap::default(),
        }
    }

    /// Changes the weight of `key` under `limit` in `scope` from
    /// `change.0` to `change.1`; `every` gives every service of the scope
    /// with its weight (the new one of `key`), should the total exceed the
    /// cap. Notes the services it leaves out; returns those whose place
    /// changed.
    fn count(
        &mut self,
        limit: Limit,
        scope: &Arc<str>,
        key: &ServiceKey,
        (old, new): (u64, u64),
        every: impl FnOnce() -> Vec<(ServiceKey, u64)>,
        notes: &mut Vec<Note>,
    ) -> Vec<ServiceKey> {
        let cap = self.limits.cap(limit);
        if cap == u64::MAX || old == new {
            return Vec::new();
        }
        let id = (limit, scope.clone());
        let tally = self.of.entry(id.clone()).or_insert(Tally::Total(0));
        let moved = match tally {
            Tally::Total(total) => {
                *total = *total - old + new;
                if *total <= cap {
                    if *total == 0 {
                        self.of.remove(&id);
                    }
                    return Vec::new();
                }
                // Over the cap: from now on, which services it keeps.
                let mut budget = Budget::new(cap);
                for (service, weight) in every() {
                    budget.set(service, weight);
                }
                let refused = budget.refused_items();
                *tally = Tally::Ranked(budget);
                refused.into_iter().map(|k| (k, false)).collect()
            }
            Tally::Ranked(budget) => {
                let moved = ranked_set(budget, key, new);
                if budget.weight() <= cap / 2 {
                    *tally = Tally::Total(budget.weight());
                }
                moved
            }
        };
        noted(limit, scope, moved, notes)
    }

    /// Sets the weight of `key` under `limit` in `scope`, always ranked
    /// (the VIPs of a namespace: the engine keeps no former weight to
    /// count with). Notes the services it leaves out; returns those whose
    /// place changed.
    fn rank(
        &mut self,
        limit: Limit,
        scope: &Arc<str>,
        key: &ServiceKey,
        weight: u64,
        notes: &mut Vec<Note>,
    ) -> Vec<ServiceKey> {
        let cap = self.limits.cap(limit);
        if cap == u64::MAX {
            return Vec::new();
        }
        let id = (limit, scope.clone());
        let tally = match self.of.get_mut(&id) {
            Some(tally) => tally,
            None if weight == 0 => return Vec::new(),
            None => self
                .of
                .entry(id.clone())
                .or_insert_with(|| Tally::Ranked(Budget::new(cap))),
        };
        let Tally::Ranked(budget) = tally else {
            unreachable!("a namespace's VIPs are only ever ranked");
        };
        let moved = ranked_set(budget, key, weight);
        if budget.weight() == 0 {
            self.of.remove(&id);
        }
        noted(limit, scope, moved, notes)
    }

    fn keeps(&self, limit: Limit, scope: &Arc<str>, key: &ServiceKey) -> bool {
        let id = (limit, scope.clone());
        match self.of.get(&id) {
            Some(Tally::Ranked(budget)) => budget.keeps(key),
            _ => true,
        }
    }

    /// Why a cap leaves `cluster`'s export of `key` out, if one does.
    fn refusal(&self, cluster: &ClusterId, key: &ServiceKey) -> Option<(&'static str, String)> {
        let [exports, endpoints] = [Limit::ExportsPerCluster, Limit::EndpointsPerCluster];
        let (limit, why, what) = if !self.keeps(exports, cluster, key) {
            (exports, reason::EXPORT_LIMIT_REACHED, "services")
        } else if !self.keeps(endpoints, cluster, key) {
            (endpoints, reason::ENDPOINT_LIMIT_REACHED, "endpoints")
        } else {
            return None;
        };
        let cap = self.limits.cap(limit);
        let message = format!(
            "cluster {cluster} exports more than {cap} {what} (--{limit}); the exports first by namespace and name that fit are kept"
        );
        Some((why, message))
    }

    fn refused(&self, limit: Limit) -> usize {
        let of = self.of.iter().filter(|((l, _), _)| *l == limit);
        of.map(|(_, tally)| match tally {
            Tally::Ranked(budget) => budget.refused(),
            Tally::Total(_) => 0,
        })
        .sum()
    }
}

/// Sets `key`'s weight in `budget`; the services whose place changed, with
/// whether each is kept now (`key` too, when it is newly refused).
fn ranked_set(
    budget: &mut Budget<ServiceKey>,
    key: &ServiceKey,
    weight: u64,
) -> Vec<(ServiceKey, bool)> {
    let was_kept = budget.keeps(key);
    let mut moved = budget.set(key.clone(), weight);
    if was_kept && !budget.keeps(key) {
        moved.push((key.clone(), false));
    }
    moved
}

/// The services of `moved`, each newly refused one noted.
fn noted(
    limit: Limit,
    scope: &Arc<str>,
    moved: Vec<(ServiceKey, bool)>,
    notes: &mut Vec<Note>,
) -> Vec<ServiceKey> {
    let noted = moved.into_iter().map(|(service, kept)| {
        if !kept {
            let scope = scope.clone();
            let service = service.clone();
            notes.push(Note::Limited {
                limit,
                scope,
                service,
            });
        }
        service
    });
    noted.collect()
}

/// `trafficDistribution` asking for endpoints close to the client.
const PREFER_CLOSE: &str = "PreferClose";

/// The local cluster's place among a headless import's clusters when its
/// `trafficDistribution` is `PreferClose` and that cluster has ready
/// endpoints in the served families. KEP-1645's DNS specification lets a
/// headless name answer a subset of the endpoints, provided A and AAAA give
/// the same one: the choice is made per cluster, not per family.
fn close_cluster(import: &Import, local: Option<&ClusterId>) -> Option<usize> {
    let prefers = import.type_ == ImportType::Headless
        && import.service.traffic_distribution.as_deref() == Some(PREFER_CLOSE);
    let local = local.filter(|_| prefers)?;
    import
        .clusters
        .iter()
        .position(|c| &c.cluster == local && c.endpoints.iter().any(|e| import.serves(&e.address)))
}

/// What a ClusterSetIP import's name resolves to: the ClusterIPs of the
/// local cluster's derived Service where it has one (`derived`: what routes
/// there, ARCHITECTURE.md, "Derived Services"), else its local VIPs, or
/// without VIPs every exporting cluster's ClusterIPs in the local families,
/// the local cluster's first.
fn served_addresses(import: &Import, local: Option<&ClusterId>, derived: Option<&Ips>) -> Ips {
    let derived: Ips = derived
        .into_iter()
        .flatten()
        .copied()
        .filter(|ip| import.serves(ip))
        .collect();
    if !derived.is_empty() {
        return derived;
    }
    if import.clusterset_ip {
        return import.local_vips().collect();
    }
    let mut clusters: Vec<&ImportCluster> = import.clusters.iter().collect();
    clusters.sort_by_key(|c| Some(&c.cluster) != local);
    let mut addresses = Ips::new();
    for ip in clusters.iter().flat_map(|c| &c.cluster_ips) {
        if import.serves(ip) && !addresses.contains(ip) {
            addresses.push(*ip);
        }
    }
    addresses
}

/// The addresses an object of `entry` holds (Service cluster IPs or slice endpoints).
fn addresses(entry: &ClusterInputs, reference: &ObjectRef) -> (ObjectRef, Vec<IpAddr>) {
    let ips = match reference {
        // A derived Service's ClusterIPs are VIPs (or ClusterIPs of this
        // cluster's range), not addresses a cluster uses of the pools.
        ObjectRef::Export | ObjectRef::Seen | ObjectRef::Derived => Vec::new(),
        ObjectRef::Service => entry
            .service
            .as_ref()
            .map(|s| s.cluster_ips.to_vec())
            .unwrap_or_default(),
        ObjectRef::Slice(name) => entry
            .slices
            .get(name)
            .map(|s| s.endpoints.iter().map(|e| e.address).collect())
            .unwrap_or_default(),
    };
    (reference.clone(), ips)
}

#[cfg(test)]
mod tests {
    use super::aggregate::tests::{export, service, slice};
    use super::*;
    use crate::model::conditions::{VALID, reason};

    fn key() -> ServiceKey {
        ServiceKey::new("shop", "web")
    }

    /// The clusters backing an aggregate's import.
    fn import_clusters(aggregate: &Aggregate) -> Vec<&str> {
        let import = aggregate.import.as_ref().expect("an import");
        import.clusters.iter().map(|c| &*c.cluster).collect()
    }

    fn upsert(cluster: &str, object: Object) -> Change {
        Change::Upsert(cluster.into(), key(), object)
    }

    #[test]
    fn vips_follow_the_import_lifetime() {
        let mut engine = Engine::new(EngineSettings::default());
        let updates = engine.apply([
            upsert(
                "east",
                Object::Service(Arc::new(service(&["10.0.0.1", "fd00::1"], &[("http", 80)]))),
            ),
            upsert("east", Object::Export(export(1).into())),
            upsert(
                "west",
                Object::Service(Arc::new(service(&["10.0.0.2", "fd00::2"], &[("http", 80)]))),
            ),
            upsert("west", Object::Export(export(2).into())),
        ]);
        assert_eq!(updates.len(), 1, "one service touched, reconciled once");
        let vips = updates[0].1.as_ref().unwrap().vips.clone();
        assert_eq!(vips.len(), 2);
        assert!(vips[0].is_ipv4() && vips[1].is_ipv6());

        // The cluster that allocated leaves: the VIPs stay.
        let updates = engine.apply([Change::Delete("east".into(), key(), ObjectRef::Export)]);
        assert_eq!(updates[0].1.as_ref().unwrap().vips, vips);
        // A change that alters nothing in the import is not reported.
        assert!(
            engine
                .apply([upsert("west", Object::Slice("s".into(), slice(&[])))])
                .is_empty()
        );
        // The last export goes: import gone, VIPs released.
        let updates = engine.apply([Change::Delete("west".into(), key(), ObjectRef::Export)]);
        assert_eq!(updates, vec![(key(), None)]);
        assert!(engine.vips_mut().allocations().is_empty());
        assert!(engine.get(&key()).is_none());
    }

    /// Issue 46 (Lighthouse's protected namespaces, CVE-2026-66788): in
    /// Kubernetes mode an export of a protected namespace is refused with
    /// `Valid=False` in its own cluster (KEP-1645 leaves other reasons to
    /// the controller) and makes no import; other namespaces are unchanged.
    #[test]
    fn exports_of_protected_namespaces_are_invalid() {
        let mut engine = Engine::new(EngineSettings {
            protected: Protected::new(&["clusterset-dns"]),
            ..EngineSettings::default()
        });
        let dns = ServiceKey::new("kube-system", "kube-dns");
        for key in [dns.clone(), key()] {
            engine.apply([
                Change::Upsert(
                    "east".into(),
                    key.clone(),
                    Object::Service(Arc::new(service(&["10.0.0.1"], &[("dns", 53)]))),
                ),
                Change::Upsert("east".into(), key, Object::Export(export(1).into())),
            ]);
        }
        let refused = engine.get(&dns).expect("the export's status is kept");
        assert!(refused.import.is_none());
        let conditions = &refused.exports[0].conditions;
        let valid = conditions.iter().find(|c| c.type_ == VALID).unwrap();
        assert!(!valid.status);
        assert_eq!(valid.reason, reason::NAMESPACE_PROTECTED);
        assert!(engine.get(&key()).unwrap().import.is_some());
    }

    /// Issue 46, item 3: a cluster with an allow-list (`--cluster-namespaces`)
    /// has its export of another namespace refused with `Valid=False`
    /// (`NamespaceNotAllowed`, in its own cluster) and left out of the
    /// import, which the other clusters' exports still make.
    #[test]
    fn exports_outside_a_clusters_namespaces_are_refused() {
        let mut engine = Engine::new(EngineSettings {
            declared: Declared::new([("east".into(), "shop".into())], []),
            ..EngineSettings::default()
        });
        let payroll = ServiceKey::new("payroll", "api");
        for (cluster, key) in [
            ("east", key()),
            ("east", payroll.clone()),
            ("west", payroll.clone()),
        ] {
            let ip = if cluster == "east" {
                "10.0.0.1"
            } else {
                "10.0.0.2"
            };
            engine.apply([
                Change::Upsert(
                    cluster.into(),
                    key.clone(),
                    Object::Service(Arc::new(service(&[ip], &[("http", 80)]))),
                ),
                Change::Upsert(cluster.into(), key, Object::Export(export(1).into())),
            ]);
        }
        assert!(engine.get(&key()).unwrap().import.is_some());
        let api = engine.get(&payroll).unwrap();
        assert_eq!(import_clusters(api), ["west"], "east's export is left out");
        let east = &api.exports[0];
        assert_eq!(&*east.cluster, "east");
        let valid = east.condition(VALID).unwrap();
        assert_eq!(
            (valid.status, valid.reason.as_ref()),
            (false, reason::NAMESPACE_NOT_ALLOWED)
        );
        assert_eq!(
            valid.message,
            "namespace payroll is not among cluster east's namespaces"
        );
        assert!(
            api.exports[1].condition(VALID).unwrap().status,
            "west's is valid"
        );
    }

    /// `cluster` exports `shop/<name>` with a Service of `ip` and, if
    /// any, one slice of `endpoints`.
    fn exported(cluster: &str, name: &str, ip: &str, endpoints: &[&str]) -> Vec<Change> {
        let key = ServiceKey::new("shop", name);
        let ready: Vec<(&str, Option<&str>, bool)> =
            endpoints.iter().map(|e| (*e, None, true)).collect();
        let object = |o| Change::Upsert(cluster.into(), key.clone(), o);
        let mut changes = vec![
            object(Object::Service(Arc::new(service(&[ip], &[("http", 80)])))),
            object(Object::Export(export(1).into())),
        ];
        if !endpoints.is_empty() {
            changes.push(object(Object::Slice("s".into(), slice(&ready))));
        }
        changes
    }

    fn limited(limits: Limits) -> Engine {
        Engine::new(EngineSettings {
            limits,
            ..EngineSettings::default()
        })
    }

    /// The reason of `cluster`'s `Valid` condition for `shop/<name>`.
    fn valid_reason(engine: &Engine, name: &str, cluster: &str) -> String {
        let aggregate = engine.get(&ServiceKey::new("shop", name)).unwrap();
        let status = aggregate.exports.iter().find(|e| &*e.cluster == cluster);
        status.unwrap().condition(VALID).unwrap().reason.to_string()
    }

    /// Issue 46, item 4 ("a cap per cluster on records it may publish"):
    /// past the cap a cluster's exports last by name are left out, and the
    /// same ones whatever order they came in; the other clusters' exports
    /// of the same services are untouched, and a service displaced by an
    /// earlier name is reconciled in the same apply.
    #[test]
    fn a_clusters_exports_past_its_cap_are_left_out_by_name() {
        let mut engine = limited(Limits {
            exports_per_cluster: 2,
            ..Limits::NONE
        });
        let mut changes = Vec::new();
        for name in ["c", "b", "a"] {
            changes.extend(exported("east", name, "10.0.0.1", &[]));
        }
        changes.extend(exported("west", "c", "10.0.0.2", &[]));
        engine.apply(changes);
        assert_eq!(valid_reason(&engine, "a", "east"), reason::VALID);
        assert_eq!(
            valid_reason(&engine, "c", "east"),
            reason::EXPORT_LIMIT_REACHED
        );
        assert_eq!(valid_reason(&engine, "c", "west"), reason::VALID);
        let c = engine.get(&ServiceKey::new("shop", "c")).unwrap();
        assert_eq!(import_clusters(c), ["west"]);
        assert_eq!(engine.limited(Limit::ExportsPerCluster), 1);
        assert!(engine.take_notes().contains(&Note::Limited {
            limit: Limit::ExportsPerCluster,
            scope: "east".into(),
            service: ServiceKey::new("shop", "c"),
        }));

        // An earlier name displaces b, whose import goes in the same apply.
        let updates = engine.apply(exported("east", "0", "10.0.0.1", &[]));
        let b = ServiceKey::new("shop", "b");
        assert!(updates.contains(&(b.clone(), None)), "{updates:?}");
        assert_eq!(
            valid_reason(&engine, "b", "east"),
            reason::EXPORT_LIMIT_REACHED
        );
        // One leaving lets b back.
        let updates = engine.apply([Change::Delete(
            "east".into(),
            ServiceKey::new("shop", "a"),
            ObjectRef::Export,
        )]);
        assert!(
            updates.iter().any(|(k, i)| *k == b && i.is_some()),
            "{updates:?}"
        );
        assert_eq!(engine.limited(Limit::ExportsPerCluster), 1, "c still");
    }

    /// A cluster under its cap costs a count, not a ranking: past the cap
    /// its services are ranked by name, back under half of it they are
    /// counted again, and past it once more ranked again, the same
    /// services left out as if it had been ranked all along.
    #[test]
    fn caps_rank_only_past_the_cap_and_rank_again_the_same_way() {
        let mut engine = limited(Limits {
            exports_per_cluster: 4,
            ..Limits::NONE
        });
        let export_of = |names: &[&str]| -> Vec<Change> {
            let all = names.iter().map(|n| exported("east", n, "10.0.0.1", &[]));
            all.flatten().collect()
        };
        let withdraw = |name: &str| {
            Change::Delete(
                "east".into(),
                ServiceKey::new("shop", name),
                ObjectRef::Export,
            )
        };
        engine.apply(export_of(&["d", "b", "e", "a", "c"]));
        assert_eq!(
            valid_reason(&engine, "e", "east"),
            reason::EXPORT_LIMIT_REACHED
        );
        assert_eq!(engine.limited(Limit::ExportsPerCluster), 1);
        // Down to two (half the cap): counted again, everything kept.
        let updates = engine.apply(["a", "b", "c"].map(withdraw));
        assert!(
            updates
                .iter()
                .any(|(k, i)| k.name().as_ref() == "e" && i.is_some())
        );
        assert_eq!(valid_reason(&engine, "e", "east"), reason::VALID);
        assert!(matches!(
            engine
                .budgets
                .of
                .get(&(Limit::ExportsPerCluster, "east".into())),
            Some(Tally::Total(2))
        ));
        // Over again: ranked again, the last by name left out.
        engine.apply(export_of(&["f", "0", "g"]));
        assert_eq!(engine.limited(Limit::ExportsPerCluster), 1);
        assert_eq!(
            valid_reason(&engine, "g", "east"),
            reason::EXPORT_LIMIT_REACHED
        );
        assert_eq!(valid_reason(&engine, "0", "east"), reason::VALID);
    }

    /// Issue 46, item 4 ("a cap per cluster on ... endpoints it may
    /// publish"): the cluster's exports last by name whose endpoints do not
    /// fit are left out whole (`EndpointLimitReached`), and come back when
    /// the endpoints before them shrink.
    #[test]
    fn a_clusters_endpoints_past_its_cap_leave_its_last_exports_out() {
        let mut engine = limited(Limits {
            endpoints_per_cluster: 3,
            ..Limits::NONE
        });
        let mut changes = exported("east", "a", "10.0.0.1", &["10.1.0.1", "10.1.0.2"]);
        changes.extend(exported("east", "b", "10.0.0.2", &["10.1.0.3", "10.1.0.4"]));
        engine.apply(changes);
        assert_eq!(valid_reason(&engine, "a", "east"), reason::VALID);
        assert_eq!(
            valid_reason(&engine, "b", "east"),
            reason::ENDPOINT_LIMIT_REACHED
        );
        assert!(
            engine
                .get(&ServiceKey::new("shop", "b"))
                .unwrap()
                .import
                .is_none()
        );
        assert_eq!(engine.limited(Limit::EndpointsPerCluster), 1);
        let shrink = Change::Upsert(
            "east".into(),
            ServiceKey::new("shop", "a"),
            Object::Slice("s".into(), slice(&[("10.1.0.1", None, true)])),
        );
        engine.apply([shrink]);
        assert_eq!(valid_reason(&engine, "b", "east"), reason::VALID);
        assert_eq!(engine.limited(Limit::EndpointsPerCluster), 0);
    }

    /// Issue 46, item 4 ("a per-namespace cap on VIPs a namespace may hold
    /// so one tenant cannot exhaust the pool"): past the cap an import gets
    /// no VIP, resolves to every cluster's ClusterIPs and says why; another
    /// namespace still gets VIPs.
    #[test]
    fn a_namespace_past_its_vip_cap_gets_no_more_vips() {
        let mut engine = limited(Limits {
            vips_per_namespace: 1,
            ..Limits::NONE
        });
        let mut changes = exported("east", "a", "10.0.0.1", &[]);
        changes.extend(exported("east", "b", "10.0.0.2", &[]));
        let other = ServiceKey::new("web", "b");
        changes.push(Change::Upsert(
            "east".into(),
            other.clone(),
            Object::Service(Arc::new(service(&["10.0.0.3"], &[("http", 80)]))),
        ));
        changes.push(Change::Upsert(
            "east".into(),
            other.clone(),
            Object::Export(export(1).into()),
        ));
        engine.apply(changes);
        let import = |name: &str| {
            engine
                .get(&ServiceKey::new("shop", name))
                .unwrap()
                .import
                .clone()
                .unwrap()
        };
        assert_eq!(import("a").vips.len(), 1);
        let b = import("b");
        assert!(b.vips.is_empty() && !b.clusterset_ip);
        assert_eq!(
            b.addresses.to_vec(),
            ["10.0.0.2".parse::<IpAddr>().unwrap()]
        );
        assert_eq!(
            (b.ready.status, b.ready.reason.as_ref()),
            (true, reason::VIP_LIMIT_REACHED)
        );
        assert_eq!(
            engine
                .get(&other)
                .unwrap()
                .import
                .as_ref()
                .unwrap()
                .vips
                .len(),
            1
        );
        assert_eq!(engine.limited(Limit::VipsPerNamespace), 1);
        assert_eq!(engine.vips().allocated(IpFamily::IPv4), 2, "a and web/b");

        // a goes: b gets a VIP in the same apply.
        let updates = engine.apply([Change::Delete(
            "east".into(),
            ServiceKey::new("shop", "a"),
            ObjectRef::Export,
        )]);
        let b = updates
            .iter()
            .find(|(k, _)| k.name().as_ref() == "b" && k.namespace().as_ref() == "shop");
        assert_eq!(
            b.and_then(|(_, i)| i.as_ref()).map(|i| i.vips.len()),
            Some(1),
            "{updates:?}"
        );
        assert_eq!(engine.limited(Limit::VipsPerNamespace), 0);
    }

    /// Loaded facts are not reconciled (no import, no VIP) until the next
    /// apply, which reconciles each service they touched once, with its own.
    #[test]
    fn loaded_facts_wait_for_the_next_apply() {
        let mut engine = Engine::new(EngineSettings::default());
        let other = ServiceKey::new("shop", "db");
        engine.load([
            upsert(
                "east",
                Object::Service(Arc::new(service(&["10.0.0.1"], &[("http", 80)]))),
            ),
            upsert("east", Object::Export(export(1).into())),
        ]);
        engine.load([Change::Upsert(
            "east".into(),
            other.clone(),
            Object::Service(Arc::new(service(&["10.0.0.3"], &[("sql", 5432)]))),
        )]);
        assert!(engine.get(&key()).is_none());
        assert!(engine.vips_mut().allocations().is_empty());
        let updates = engine.apply([Change::Upsert(
            "east".into(),
            other.clone(),
            Object::Export(export(2).into()),
        )]);
        let mut keys: Vec<_> = updates.iter().map(|(k, _)| k.clone()).collect();
        keys.sort();
        assert_eq!(keys, [other, key()], "each service once");
        assert!(updates.iter().all(|(_, import)| import.is_some()));
        assert!(engine.apply([]).is_empty(), "nothing left to reconcile");
    }

    /// KEP-1645 "Namespace sameness": a member without the namespace has no
    /// ServiceImport, so nothing of it is served there; the import itself
    /// (conditions, VIPs) is the clusterset's and stays.
    #[test]
    fn imports_are_served_only_where_the_namespace_exists() {
        let exported = || {
            [
                upsert(
                    "east",
                    Object::Service(Arc::new(service(&["10.0.0.1"], &[("http", 80)]))),
                ),
                upsert("east", Object::Export(export(1).into())),
            ]
        };
        let mut engine = Engine::new(EngineSettings {
            namespaces_known: true,
            ..EngineSettings::default()
        });
        assert!(
            engine.apply(exported()).is_empty(),
            "no namespace shop here"
        );
        assert!(engine.get(&key()).unwrap().import.is_some());
        let updates = engine.apply([Change::Namespace("shop".into(), true)]);
        assert_eq!(updates.len(), 1);
        assert_eq!(updates[0].1, engine.get(&key()).unwrap().import);
        assert!(
            engine
                .apply([Change::Namespace("other".into(), true)])
                .is_empty()
        );
        assert!(
            engine
                .apply([Change::Namespace("shop".into(), true)])
                .is_empty()
        );
        let updates = engine.apply([Change::Namespace("shop".into(), false)]);
        assert_eq!(updates, vec![(key(), None)]);
        // A namespace arriving with its first export, in one batch.
        let mut engine = Engine::new(EngineSettings {
            namespaces_known: true,
            ..EngineSettings::default()
        });
        let mut batch = vec![Change::Namespace("shop".into(), true)];
        batch.extend(exported());
        assert!(engine.apply(batch)[0].1.is_some());
        // Embedded mode knows no namespaces: everything is served.
        let mut engine = Engine::new(EngineSettings::default());
        assert!(engine.apply(exported())[0].1.is_some());
    }

    #[test]
    fn pool_addresses_used_by_clusters_are_never_vips() {
        let settings = EngineSettings {
            pools: VipPools {
                v4: "243.0.0.0/30".parse().unwrap(),
                ..VipPools::default()
            },
            ..EngineSettings::default()
        };
        let mut engine = Engine::new(settings);
        let other = ServiceKey::new("shop", "other");
        engine.apply([
            Change::Upsert(
                "east".into(),
                other.clone(),
                Object::Slice("s".into(), slice(&[("243.0.0.1", None, true)])),
            ),
            upsert(
                "east",
                Object::Service(Arc::new(service(&["10.0.0.1"], &[]))),
            ),
            upsert("east", Object::Export(export(1).into())),
        ]);
        let vips = &engine.get(&key()).unwrap().import.as_ref().unwrap().vips;
        assert_eq!(vips[..], ["243.0.0.2".parse::<IpAddr>().unwrap()]);
        // Once that endpoint is gone the address is free again, for a new service.
        engine.apply([Change::Delete(
            "east".into(),
            other,
            ObjectRef::Slice("s".into()),
        )]);
        let third = ServiceKey::new("shop", "third");
        let updates = engine.apply([
            Change::Upsert(
                "east".into(),
                third.clone(),
                Object::Service(Arc::new(service(&["10.0.0.3"], &[]))),
            ),
            Change::Upsert("east".into(), third, Object::Export(export(2).into())),
        ]);
        assert_eq!(
            updates[0].1.as_ref().unwrap().vips[..],
            ["243.0.0.1".parse::<IpAddr>().unwrap()]
        );
    }

    #[test]
    fn stats_follow_every_reconcile() {
        let mut engine = Engine::new(EngineSettings::default());
        engine.apply([
            upsert(
                "east",
                Object::Service(Arc::new(service(&["10.0.0.1"], &[("http", 80)]))),
            ),
            upsert("east", Object::Export(export(1).into())),
            upsert(
                "east",
                Object::Slice(
                    "s".into(),
                    slice(&[("10.1.0.1", None, true), ("10.1.0.2", None, false)]),
                ),
            ),
            upsert(
                "west",
                Object::Service(Arc::new(service(&["10.0.0.2"], &[("http", 81)]))),
            ),
            upsert("west", Object::Export(export(2).into())),
        ]);
        let stats = engine.stats().clone();
        assert_eq!(
            (stats.cluster_set_ip, stats.headless, stats.endpoints),
            (1, 0, 1)
        );
        // Both exports of the conflicted service are in conflict (KEP-1645).
        assert_eq!(stats.conflicts.get(&ConflictReason::PortConflict), Some(&2));
        engine.apply([Change::Delete("west".into(), key(), ObjectRef::Export)]);
        assert_eq!(
            engine.stats().conflicts.get(&ConflictReason::PortConflict),
            Some(&0)
        );
        engine.apply([Change::Delete("east".into(), key(), ObjectRef::Export)]);
        assert_eq!(
            (engine.stats().cluster_set_ip, engine.stats().endpoints),
            (0, 0)
        );
    }

    /// Issue 46 (a member's credentials delete a VIP record): the VIPs of a
    /// service some cluster exports stay in its import until the record is
    /// written again (ARCHITECTURE.md, "A VIP survives the broker"), and go
    /// with the last export.
    #[test]
    fn a_vip_record_gone_keeps_the_vips_of_an_exported_service() {
        let settings = EngineSettings {
            vip_source: VipSource::Assigned,
            ..EngineSettings::default()
        };
        let mut engine = Engine::new(settings);
        let vip: IpAddr = "243.0.0.9".parse().unwrap();
        let vips = |engine: &Engine| {
            let import = engine.get(&key()).and_then(|a| a.import.clone());
            import.map(|i| i.vips.to_vec()).unwrap_or_default()
        };
        engine.apply([
            upsert(
                "east",
                Object::Service(Arc::new(service(&["10.0.0.1"], &[]))),
            ),
            upsert("east", Object::Export(export(1).into())),
            Change::Vips(key(), vec![vip]),
        ]);
        assert_eq!(vips(&engine), [vip]);
        engine.apply([Change::Vips(key(), Vec::new())]);
        assert_eq!(vips(&engine), [vip], "kept while east exports");
        engine.apply([Change::Delete("east".into(), key(), ObjectRef::Export)]);
        assert_eq!(
            engine.vips_mut().allocations(),
            [],
            "released with the export"
        );
    }

    #[test]
    fn restored_vips_not_claimed_are_released() {
        let mut engine = Engine::new(EngineSettings::default());
        let saved: IpAddr = "243.1.2.3".parse().unwrap();
        engine.vips_mut().restore([
            (key(), saved),
            (
                ServiceKey::new("shop", "gone"),
                "243.1.2.4".parse().unwrap(),
            ),
        ]);
        engine.apply([
            upsert(
                "east",
                Object::Service(Arc::new(service(&["10.0.0.1"], &[]))),
            ),
            upsert("east", Object::Export(export(1).into())),
        ]);
        engine.release_unclaimed_vips();
        assert_eq!(engine.vips_mut().allocations(), vec![(key(), saved)]);
    }

    /// The engine does no I/O: what it could not do comes back as notes,
    /// for the runtime to log and count (`reconcile_errors_total`).
    #[test]
    fn an_exhausted_pool_is_a_note() {
        let settings = EngineSettings {
            pools: VipPools {
                v4: "243.0.0.0/31".parse().unwrap(),
                ..VipPools::default()
            },
            ..EngineSettings::default()
        };
        let mut engine = Engine::new(settings);
        let mut changes = Vec::new();
        for (n, name) in ["a", "b", "c"].into_iter().enumerate() {
            let key = ServiceKey::new("shop", name);
            let service = service(&[&format!("10.0.0.{}", n + 1)], &[]);
            changes.push(Change::Upsert(
                "east".into(),
                key.clone(),
                Object::Service(Arc::new(service)),
            ));
            let age = i64::try_from(n).unwrap();
            changes.push(Change::Upsert(
                "east".into(),
                key,
                Object::Export(export(age).into()),
            ));
        }
        engine.apply(changes);
        let notes = engine.take_notes();
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            matches!(&notes[0], Note::PoolExhausted { error, .. } if error.pool.to_string() == "243.0.0.0/31"),
            "{notes:?}"
        );
        assert!(engine.take_notes().is_empty(), "taken once");
    }
}
