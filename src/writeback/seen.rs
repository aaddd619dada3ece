//! What the writer knows of the objects it compares against: not the objects
//! (at clusterset size whole copies of every written ServiceImport and
//! EndpointSlice would cost more than the engine and the DNS index together,
//! see `ARCHITECTURE.md`, "Choices that need a reason"), but their identity,
//! version, a digest of the parts this controller owns, and a small extract
//! per kind. Fed by a watch, a relist replacing everything at once.

use std::collections::{BTreeSet, HashMap};
use std::hash::{BuildHasher, Hasher as _};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex, RwLock};

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition as K8sCondition;
use kube::Resource;
use kube::api::DeleteParams;
use kube::runtime::watcher::Event;
use serde::Serialize;

use super::api::delete_if_at;
use crate::k8s::crd::v1alpha1::{ServiceExport, ServiceImport};
use crate::k8s::records::{LABEL_MANAGED_BY, LABEL_SLICE_MANAGED_BY, MANAGER};
use crate::model::{Hasher, ServiceKey};

/// A digest of the parts of an object this controller writes and compares.
pub trait Owned {
    /// Equal for objects whose owned parts are equal.
    fn owned_digest(&self) -> u64;
}

impl Owned for ServiceImport {
    fn owned_digest(&self) -> u64 {
        let meta = &self.metadata;
        digest(&(&self.spec, &meta.labels, &meta.annotations))
    }
}

impl Owned for ConfigMap {
    fn owned_digest(&self) -> u64 {
        digest(&(&self.data, &self.metadata.labels))
    }
}

impl Owned for ServiceExport {
    fn owned_digest(&self) -> u64 {
        let conditions = self.status.as_ref().map(|s| s.conditions.as_slice());
        conditions_digest(conditions.unwrap_or_default())
    }
}

/// The digest of a ServiceExport whose status has these conditions.
pub fn conditions_digest(conditions: &[K8sCondition]) -> u64 {
    digest(&conditions)
}

impl Owned for EndpointSlice {
    fn owned_digest(&self) -> u64 {
        let meta = &self.metadata;
        digest(&(
            &self.address_type,
            &meta.owner_references,
            &self.endpoints,
            &self.ports,
            &meta.labels,
            &meta.annotations,
        ))
    }
}

/// A hash of a value's JSON form, stable within the process (foldhash: at a
/// relist every object is digested, and SipHash was 6% of a restart's CPU).
/// Seeded at random once per process, like the maps, so that nobody who can
/// edit a written object can aim an edit at the digest the writer expects.
fn digest(value: &impl Serialize) -> u64 {
    struct Feed(foldhash::fast::FoldHasher<'static>);
    impl std::io::Write for Feed {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.write(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    static SEED: LazyLock<Hasher> = LazyLock::new(Hasher::default);
    let mut feed = Feed(SEED.build_hasher());
    serde_json::to_writer(&mut feed, value).expect("Kubernetes objects serialize");
    feed.0.finish()
}

/// One object as the writer needs it: enough to compare, to write with a
/// precondition and to know whether it is this controller's to delete.
#[derive(Clone, Debug, PartialEq)]
pub struct Version {
    /// `metadata.uid`.
    pub uid: Option<Box<str>>,
    /// `metadata.resourceVersion`.
    pub resource_version: Option<Box<str>>,
    /// Whether it carries this controller's managed-by label.
    pub managed: bool,
    /// [`Owned::owned_digest`] of the object as it is.
    pub digest: u64,
}

impl Version {
    /// The version of `object`.
    pub fn of<K: Resource + Owned>(object: &K) -> Self {
        let meta = object.meta();
        let labels = meta.labels.as_ref();
        let label = |l: &str| labels.and_then(|ls| ls.get(l)).map(String::as_str);
        Self {
            uid: meta.uid.as_deref().map(Into::into),
            resource_version: meta.resource_version.as_deref().map(Into::into),
            managed: label(LABEL_MANAGED_BY) == Some(MANAGER)
                || label(LABEL_SLICE_MANAGED_BY) == Some(MANAGER),
            digest: object.owned_digest(),
        }
    }

    /// Delete parameters that delete only this version (`409 Conflict` when
    /// someone changed or replaced the object meanwhile).
    pub fn delete_params(&self) -> DeleteParams {
        delete_if_at(
            self.resource_version.as_deref().map(Into::into),
            self.uid.as_deref().map(Into::into),
        )
    }
}

/// A kept object: its version and what the writer reads of it (`X`).
#[derive(Debug)]
pub struct Seen<X> {
    /// Identity, version and digest.
    pub version: Version,
    /// The kind's extract.
    pub extract: X,
}

/// The extract of an object to keep (`None`: not kept).
pub type Extract<K, X> = Box<dyn Fn(&K) -> Option<X> + Send + Sync>;

/// What one watch's objects are to a [`SeenStore`]: whether and how one is
/// kept, and the service it belongs to.
pub struct Keep<K, X> {
    /// The extract of an object to keep.
    pub extract: Extract<K, X>,
    /// The service an object belongs to.
    pub service: fn(&K) -> Option<ServiceKey>,
}

struct State<X> {
    objects: HashMap<String, Arc<Seen<X>>, Hasher>,
    /// The names of each service's kept objects, sorted: mostly one or two,
    /// where a `BTreeSet` would take a node of eleven per service.
    by_service: HashMap<ServiceKey, Vec<Box<str>>, Hasher>,
}

impl<X> Default for State<X> {
    fn default() -> Self {
        Self {
            objects: HashMap::default(),
            by_service: HashMap::default(),
        }
    }
}

impl<X> State<X> {
    fn insert(&mut self, id: String, service: Option<ServiceKey>, name: &str, seen: Seen<X>) {
        self.remove(&id, service.as_ref(), name);
        if let Some(service) = service {
            let names = self.by_service.entry(service).or_default();
            if let Err(at) = position(names, name) {
                names.insert(at, name.into());
            }
        }
        self.objects.insert(id, Arc::new(seen));
    }

    fn remove(&mut self, id: &str, service: Option<&ServiceKey>, name: &str) {
        self.objects.remove(id);
        if let Some(service) = service
            && let Some(names) = self.by_service.get_mut(service)
        {
            if let Ok(at) = position(names, name) {
                names.remove(at);
            }
            if names.is_empty() {
                self.by_service.remove(service);
            }
        }
    }

    fn has(&self, service: &ServiceKey, name: &str) -> bool {
        self.by_service
            .get(service)
            .is_some_and(|names| position(names, name).is_ok())
    }
}

/// Where `name` is in the sorted `names`, or would be inserted.
fn position(names: &[Box<str>], name: &str) -> Result<usize, usize> {
    names.binary_search_by(|n| (**n).cmp(name))
}

/// The kept objects of one watch, by namespace and name and by service.
pub struct SeenStore<K, X> {
    keep: Keep<K, X>,
    state: RwLock<State<X>>,
    relist: Mutex<Option<State<X>>>,
    /// Whether a full list has been kept: before it, a missing object may
    /// exist.
    listed: AtomicBool,
}

/// A watch event's effect on a store, for a watch that feeds one without
/// knowing its extract type.
pub trait Follow<K>: Send + Sync {
    /// Follows one event; returns the services of kept objects it changed.
    /// A relist (after a watch expired, say) returns only the services whose
    /// objects it found new, changed or gone, not every listed one.
    fn on_event(&self, event: &Event<K>) -> Vec<ServiceKey>;
}

impl<K: Resource + Owned, X> SeenStore<K, X> {
    /// An empty store keeping what `keep` says.
    pub fn new(keep: Keep<K, X>) -> Self {
        Self {
            keep,
            state: RwLock::new(State::default()),
            relist: Mutex::new(None),
            listed: AtomicBool::new(false),
        }
    }

    /// The object `namespace/name`, if kept.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<Seen<X>>> {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        state.objects.get(&id(namespace, name)).cloned()
    }

    /// Whether the watch has listed everything once, so that an object
    /// missing here is missing on the server (as of the watch).
    pub fn listed(&self) -> bool {
        self.listed.load(Ordering::Acquire)
    }

    /// The names of the kept objects of `service`.
    pub fn names(&self, service: &ServiceKey) -> BTreeSet<String> {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        let names = state.by_service.get(service).into_iter().flatten();
        names.map(|n| n.to_string()).collect()
    }

    /// Every service with a kept object.
    pub fn services(&self) -> Vec<ServiceKey> {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        state.by_service.keys().cloned().collect()
    }

    fn seen(&self, object: &K) -> Option<Seen<X>> {
        Some(Seen {
            extract: (self.keep.extract)(object)?,
            version: Version::of(object),
        })
    }
}

impl<K, X> Follow<K> for SeenStore<K, X>
where
    K: Resource + Owned,
    X: Send + Sync,
{
    fn on_event(&self, event: &Event<K>) -> Vec<ServiceKey> {
        let named = |object: &K| {
            let meta = object.meta();
            let name = meta.name.as_deref()?;
            Some((
                id(meta.namespace.as_deref().unwrap_or_default(), name),
                name.to_owned(),
                (self.keep.service)(object),
            ))
        };
        match event {
            Event::Apply(object) | Event::Delete(object) => {
                let Some((id, name, service)) = named(object) else {
                    return Vec::new();
                };
                let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
                let was = state.objects.contains_key(&id);
                let seen = matches!(event, Event::Apply(_))
                    .then(|| self.seen(object))
                    .flatten();
                let kept = seen.is_some();
                match seen {
                    Some(seen) => state.insert(id, service.clone(), &name, seen),
                    None => state.remove(&id, service.as_ref(), &name),
                }
                service.filter(|_| was || kept).into_iter().collect()
            }
            Event::Init => {
                *self.relist.lock().unwrap_or_else(|e| e.into_inner()) = Some(State::default());
                Vec::new()
            }
            Event::InitApply(object) => {
                let (Some((id, name, service)), Some(seen)) = (named(object), self.seen(object))
                else {
                    return Vec::new();
                };
                let unchanged = {
                    let state = self.state.read().unwrap_or_else(|e| e.into_inner());
                    state.objects.get(&id).map(|s| &s.version) == Some(&seen.version)
                };
                let mut relist = self.relist.lock().unwrap_or_else(|e| e.into_inner());
                relist
                    .get_or_insert_default()
                    .insert(id, service.clone(), &name, seen);
                service.filter(|_| !unchanged).into_iter().collect()
            }
            Event::InitDone => {
                let fresh = self.relist.lock().unwrap_or_else(|e| e.into_inner()).take();
                let fresh = fresh.unwrap_or_default();
                let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
                // Services that lost an object while the watch was away.
                let gone = state
                    .by_service
                    .iter()
                    .filter(|(service, names)| names.iter().any(|n| !fresh.has(service, n)))
                    .map(|(service, _)| service.clone())
                    .collect();
                *state = fresh;
                self.listed.store(true, Ordering::Release);
                gone
            }
        }
    }
}

fn id(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::records::labelled_service;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn slice(name: &str, service: &str, version: &str) -> EndpointSlice {
        EndpointSlice {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("broker".into()),
                resource_version: Some(version.into()),
                labels: Some(
                    [
                        (
                            crate::k8s::crd::LABEL_MCS_SERVICE_NAME.to_owned(),
                            service.to_owned(),
                        ),
                        (
                            crate::k8s::records::LABEL_SERVICE_NAMESPACE.to_owned(),
                            "ns".to_owned(),
                        ),
                        (LABEL_SLICE_MANAGED_BY.to_owned(), MANAGER.to_owned()),
                    ]
                    .into(),
                ),
                ..ObjectMeta::default()
            },
            address_type: "IPv4".into(),
            ..EndpointSlice::default()
        }
    }

    /// Keeps the slices whose name starts with "mine".
    fn store() -> SeenStore<EndpointSlice, ()> {
        SeenStore::new(Keep {
            extract: Box::new(|s: &EndpointSlice| {
                s.metadata
                    .name
                    .as_deref()?
                    .starts_with("mine")
                    .then_some(())
            }),
            service: |s| Some(labelled_service(&s.metadata)?.0),
        })
    }

    #[test]
    fn keeps_versions_and_names_by_service() {
        let store = store();
        let key = ServiceKey::new("ns", "a");
        let touched = store.on_event(&Event::Apply(slice("mine-1", "a", "5")));
        assert_eq!(touched, std::slice::from_ref(&key));
        assert_eq!(store.on_event(&Event::Apply(slice("other", "a", "6"))), []);
        assert_eq!(store.names(&key), BTreeSet::from(["mine-1".to_owned()]));
        let seen = store.get("broker", "mine-1").unwrap();
        assert_eq!(seen.version.resource_version.as_deref(), Some("5"));
        assert!(seen.version.managed);
        assert_eq!(
            seen.version.digest,
            slice("mine-1", "a", "9").owned_digest()
        );
        store.on_event(&Event::Delete(slice("mine-1", "a", "5")));
        assert!(store.names(&key).is_empty() && store.get("broker", "mine-1").is_none());
    }

    #[test]
    fn the_digest_follows_the_owned_parts() {
        let a = slice("mine-1", "a", "1");
        let mut b = slice("mine-1", "a", "2");
        assert_eq!(a.owned_digest(), b.owned_digest(), "versions are not owned");
        b.address_type = "IPv6".into();
        assert_ne!(a.owned_digest(), b.owned_digest());
    }

    #[test]
    fn a_relist_replaces_everything_at_once() {
        let store = store();
        store.on_event(&Event::Apply(slice("mine-1", "a", "1")));
        store.on_event(&Event::Init);
        store.on_event(&Event::InitApply(slice("mine-2", "b", "2")));
        assert!(
            store.get("broker", "mine-1").is_some(),
            "until the relist ends"
        );
        store.on_event(&Event::InitDone);
        assert!(store.get("broker", "mine-1").is_none());
        assert_eq!(store.services(), vec![ServiceKey::new("ns", "b")]);
    }

    /// A relist queues only what it found new, changed or gone: at
    /// clusterset size every 410 Gone would otherwise queue every service.
    #[test]
    fn a_relist_returns_only_what_changed() {
        let store = store();
        for (name, service, version) in [
            ("mine-same", "a", "1"),
            ("mine-edited", "b", "1"),
            ("mine-gone", "c", "1"),
        ] {
            store.on_event(&Event::Apply(slice(name, service, version)));
        }
        store.on_event(&Event::Init);
        let mut touched = Vec::new();
        for (name, service, version) in [
            ("mine-same", "a", "1"),
            ("mine-edited", "b", "2"),
            ("mine-new", "d", "1"),
        ] {
            touched.extend(store.on_event(&Event::InitApply(slice(name, service, version))));
        }
        touched.extend(store.on_event(&Event::InitDone));
        touched.sort();
        let keys = |names: &[&str]| {
            names
                .iter()
                .map(|n| ServiceKey::new("ns", n))
                .collect::<Vec<_>>()
        };
        assert_eq!(touched, keys(&["b", "c", "d"]));
        let mut services = store.services();
        services.sort();
        assert_eq!(services, keys(&["a", "b", "d"]));
    }
}
