//! What the writer knows of the objects it compares against: not the objects
//! (at clusterset size whole copies of every written ServiceImport and
//! EndpointSlice would cost more than the engine and the DNS index together,
//! see `ARCHITECTURE.md`, "Choices that need a reason"), but their
//! [`Version`], the service each belongs to and a small extract per kind.
//! Fed by a watch, a relist replacing everything at once.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use kube::Resource;
use kube::runtime::watcher::Event;

use super::version::{Owned, Version};
use crate::model::{Hasher, ServiceKey};

/// A kept object: its version, its service and what the writer reads of it
/// (`X`).
#[derive(Debug)]
pub(crate) struct Seen<X> {
    /// Identity, version and digest.
    pub version: Version,
    /// The service it belongs to, if any.
    pub service: Option<ServiceKey>,
    /// The kind's extract.
    pub extract: X,
}

/// The extract of an object to keep (`None`: not kept).
pub(crate) type Extract<K, X> = Box<dyn Fn(&K) -> Option<X> + Send + Sync>;

/// What one watch's objects are to a [`SeenStore`]: whether and how one is
/// kept, and the service it belongs to.
pub(crate) struct Keep<K, X> {
    /// The extract of an object to keep.
    pub extract: Extract<K, X>,
    /// The service an object belongs to.
    pub service: fn(&K) -> Option<ServiceKey>,
    /// Whether the writer asks for a service's objects by name
    /// ([`SeenStore::names`]: slices, VIP claims). Only then does the store
    /// keep that index: for one object per service it would cost more than
    /// the object.
    pub by_name: bool,
}

struct State<X> {
    /// By `namespace/name`.
    objects: HashMap<Box<str>, Arc<Seen<X>>, Hasher>,
    /// The names of each service's objects, sorted (mostly one or two, where
    /// a `BTreeSet` would take a node of eleven); kept if [`Keep::by_name`].
    names: HashMap<ServiceKey, Vec<Box<str>>, Hasher>,
}

impl<X> State<X> {
    /// Keeps `seen` as object `id`; returns what was kept there before.
    fn insert(&mut self, id: Box<str>, seen: Seen<X>, by_name: bool) -> Option<Arc<Seen<X>>> {
        let old = self.remove(&id, by_name);
        if by_name && let Some(service) = &seen.service {
            let names = self.names.entry(service.clone()).or_default();
            if let Err(at) = position(names, name_of(&id)) {
                names.insert(at, name_of(&id).into());
            }
        }
        self.objects.insert(id, Arc::new(seen));
        old
    }

    fn remove(&mut self, id: &str, by_name: bool) -> Option<Arc<Seen<X>>> {
        let old = self.objects.remove(id)?;
        if by_name
            && let Some(service) = &old.service
            && let Some(names) = self.names.get_mut(service)
        {
            if let Ok(at) = position(names, name_of(id)) {
                names.remove(at);
            }
            if names.is_empty() {
                self.names.remove(service);
            }
        }
        Some(old)
    }
}

impl<X> Default for State<X> {
    fn default() -> Self {
        Self {
            objects: HashMap::default(),
            names: HashMap::default(),
        }
    }
}

/// Where `name` is in the sorted `names`, or would be inserted.
fn position(names: &[Box<str>], name: &str) -> Result<usize, usize> {
    names.binary_search_by(|n| (**n).cmp(name))
}

/// The kept objects of one watch, by namespace and name and by service.
pub(crate) struct SeenStore<K, X> {
    keep: Keep<K, X>,
    state: RwLock<State<X>>,
    relist: Mutex<Option<State<X>>>,
    /// Whether a full list has been kept: before it, a missing object may
    /// exist.
    listed: AtomicBool,
}

/// A watch event's effect on a store, for a watch that feeds one without
/// knowing its extract type.
pub(crate) trait Follow<K>: Send + Sync {
    /// Follows one event; returns the services of kept objects it changed.
    /// A relist (after a watch expired, say) returns only the services whose
    /// objects it found new, changed or gone, not every listed one.
    fn on_event(&self, event: &Event<K>) -> Vec<ServiceKey>;
}

impl<K: Resource + Owned, X> SeenStore<K, X> {
    /// An empty store keeping what `keep` says.
    pub(crate) fn new(keep: Keep<K, X>) -> Self {
        Self {
            keep,
            state: RwLock::new(State::default()),
            relist: Mutex::new(None),
            listed: AtomicBool::new(false),
        }
    }

    /// The object `namespace/name`, if kept.
    pub(crate) fn get(&self, namespace: &str, name: &str) -> Option<Arc<Seen<X>>> {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        state.objects.get(&*id(namespace, name)).cloned()
    }

    /// Whether the watch has listed everything once, so that an object
    /// missing here is missing on the server (as of the watch).
    pub(crate) fn listed(&self) -> bool {
        self.listed.load(Ordering::Acquire)
    }

    /// The names of the kept objects of `service`; only for a store kept
    /// [`Keep::by_name`].
    pub(crate) fn names(&self, service: &ServiceKey) -> BTreeSet<String> {
        assert!(self.keep.by_name, "names of a store kept without them");
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        let names = state.names.get(service).into_iter().flatten();
        names.map(|n| n.to_string()).collect()
    }

    /// Every service with a kept object.
    pub(crate) fn services(&self) -> Vec<ServiceKey> {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        let services = state.objects.values().filter_map(|s| s.service.clone());
        services.collect::<HashSet<_>>().into_iter().collect()
    }

    /// The id and the extract of `object`, if it is kept.
    fn seen(&self, object: &K) -> Option<(Box<str>, Seen<X>)> {
        let meta = object.meta();
        let id = id(
            meta.namespace.as_deref().unwrap_or_default(),
            meta.name.as_deref()?,
        );
        let seen = Seen {
            extract: (self.keep.extract)(object)?,
            service: (self.keep.service)(object),
            version: Version::of(object),
        };
        Some((id, seen))
    }
}

impl<K, X> Follow<K> for SeenStore<K, X>
where
    K: Resource + Owned,
    X: Send + Sync,
{
    fn on_event(&self, event: &Event<K>) -> Vec<ServiceKey> {
        let by_name = self.keep.by_name;
        let mut touched = Vec::new();
        match event {
            Event::Apply(object) | Event::Delete(object) => {
                let meta = object.meta();
                let Some(name) = meta.name.as_deref() else {
                    return Vec::new();
                };
                let kept = matches!(event, Event::Apply(_))
                    .then(|| self.seen(object))
                    .flatten();
                let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
                let old = match kept {
                    Some((id, seen)) => {
                        touched.extend(seen.service.clone());
                        state.insert(id, seen, by_name)
                    }
                    None => {
                        let id = id(meta.namespace.as_deref().unwrap_or_default(), name);
                        state.remove(&id, by_name)
                    }
                };
                touched.extend(old.and_then(|old| old.service.clone()));
            }
            Event::Init => {
                *self.relist.lock().unwrap_or_else(|e| e.into_inner()) = Some(State::default());
            }
            Event::InitApply(object) => {
                let Some((id, seen)) = self.seen(object) else {
                    return Vec::new();
                };
                let unchanged = {
                    let state = self.state.read().unwrap_or_else(|e| e.into_inner());
                    state.objects.get(&id).map(|s| &s.version) == Some(&seen.version)
                };
                if !unchanged {
                    touched.extend(seen.service.clone());
                }
                let mut relist = self.relist.lock().unwrap_or_else(|e| e.into_inner());
                relist.get_or_insert_default().insert(id, seen, by_name);
            }
            Event::InitDone => {
                let fresh = self.relist.lock().unwrap_or_else(|e| e.into_inner()).take();
                let fresh = fresh.unwrap_or_default();
                let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
                // Services that lost an object while the watch was away.
                let gone = state.objects.iter().filter(|(id, old)| {
                    fresh.objects.get(*id).map(|new| &new.service) != Some(&old.service)
                });
                touched.extend(gone.filter_map(|(_, old)| old.service.clone()));
                *state = fresh;
                self.listed.store(true, Ordering::Release);
            }
        }
        touched.sort();
        touched.dedup();
        touched
    }
}

/// The key of object `name` in `namespace`.
fn id(namespace: &str, name: &str) -> Box<str> {
    format!("{namespace}/{name}").into()
}

/// The name in an [`id`].
fn name_of(id: &str) -> &str {
    id.split_once('/').map_or(id, |(_, name)| name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::records::read::labelled_service;
    use crate::k8s::records::{LABEL_SLICE_MANAGED_BY, MANAGER};
    use k8s_openapi::api::discovery::v1::EndpointSlice;
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
            by_name: true,
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
        assert_eq!(seen.version.resource_version().as_deref(), Some("5"));
        assert!(seen.version.managed);
        assert_eq!(
            seen.version.digest,
            slice("mine-1", "a", "9").owned_digest()
        );
        store.on_event(&Event::Delete(slice("mine-1", "a", "5")));
        assert!(store.names(&key).is_empty() && store.get("broker", "mine-1").is_none());
    }

    /// A slice relabelled to another service leaves the names of the first,
    /// and both services are told: the first lost an object.
    #[test]
    fn a_relabelled_object_moves_between_services() {
        let store = store();
        let (a, b) = (ServiceKey::new("ns", "a"), ServiceKey::new("ns", "b"));
        store.on_event(&Event::Apply(slice("mine-1", "a", "1")));
        let mut touched = store.on_event(&Event::Apply(slice("mine-1", "b", "2")));
        touched.sort();
        assert_eq!(touched, [a.clone(), b.clone()]);
        assert!(store.names(&a).is_empty());
        assert_eq!(store.names(&b), BTreeSet::from(["mine-1".to_owned()]));
        assert_eq!(store.services(), [b]);
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
