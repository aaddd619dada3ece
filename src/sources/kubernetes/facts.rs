//! Turns a kube-rs watcher's events into [`Change`]s: each object stands for
//! a few facts; an event reports the facts that appeared and retracts the
//! ones that went. A relist (after a `410 Gone` or a restart) is diffed against
//! what was known, so nothing is lost or reported twice: each listed object's
//! difference as it arrives (a first list of 300k objects never waits whole
//! in one batch), the objects that did not come back at its end. The facts
//! of two objects never share a slot (each names its object's kind and name,
//! see `readers.rs`), so asserting one object's facts before retracting
//! another's cannot undo them.

use std::collections::HashMap;

use kube::Resource;
use kube::runtime::watcher::Event;
use tracing::warn;

use crate::model::{Change, Hasher};

/// Reads the facts of one object; an error names the object and says why.
pub(crate) type Reader<K> = Box<dyn Fn(&K) -> Result<Vec<Change>, String> + Send + Sync>;

/// The facts of each object, by `namespace/name`.
type Known = HashMap<Box<str>, Box<[Change]>, Hasher>;

/// The facts known for each object of one watch.
pub(crate) struct Facts<K> {
    read: Reader<K>,
    known: Known,
    relist: Option<Known>,
}

/// What one watcher event meant.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Delta {
    /// Facts retracted then asserted, in order.
    pub changes: Vec<Change>,
    /// Whether this event ended a (re)list: the watch is in sync.
    pub synced: bool,
    /// Whether its object was ignored: it cannot be read, or it breaks a
    /// rule of trust (`model/trust.rs`).
    pub ignored: bool,
}

impl<K: Resource> Facts<K> {
    /// A tracker reading objects with `read`.
    pub(crate) fn new(read: Reader<K>) -> Self {
        Self {
            read,
            known: Known::default(),
            relist: None,
        }
    }

    /// The changes one watcher event makes.
    pub(crate) fn on_event(&mut self, event: Event<K>) -> Delta {
        let mut delta = Delta::default();
        match event {
            Event::Apply(object) => {
                let id = id(&object);
                let read = self.read(&object);
                delta.ignored = read.is_none();
                if let Some(new) = read {
                    let old = self.known.remove(&id).unwrap_or_default();
                    diff(&old, &new, &mut delta.changes);
                    keep(&mut self.known, id, new);
                }
            }
            Event::Delete(object) => {
                let old = self.known.remove(&id(&object)).unwrap_or_default();
                diff(&old, &[], &mut delta.changes);
            }
            Event::Init => self.relist = Some(Known::default()),
            Event::InitApply(object) => {
                let id = id(&object);
                let old = self.known.get(&id).map(|f| &**f).unwrap_or_default();
                // A broken object keeps the facts it had before the relist.
                let read = self.read(&object);
                delta.ignored = read.is_none();
                let facts = read.unwrap_or_else(|| old.to_vec());
                diff(old, &facts, &mut delta.changes);
                let relist = self.relist.get_or_insert_default();
                if facts.is_empty() && !old.is_empty() {
                    // Listed, retracted just now: not to be retracted again at the end.
                    relist.insert(id, facts.into());
                } else {
                    keep(relist, id, facts);
                }
            }
            Event::InitDone => {
                let mut fresh = self.relist.take().unwrap_or_default();
                for (id, old) in &self.known {
                    if !fresh.contains_key(id) {
                        diff(old, &[], &mut delta.changes);
                    }
                }
                fresh.retain(|_, facts| !facts.is_empty());
                self.known = fresh;
                delta.synced = true;
            }
        }
        delta
    }

    fn read(&self, object: &K) -> Option<Vec<Change>> {
        (self.read)(object)
            .inspect_err(|error| warn!(%error, "ignoring an object that cannot be read"))
            .ok()
    }
}

/// Keeps the facts of object `id`, unless it has none: a watch sees many
/// objects that mean nothing to the engine (this cluster's own records on the
/// broker, the slices it imported), and an id with nothing to retract need
/// not be remembered.
fn keep(known: &mut Known, id: Box<str>, facts: Vec<Change>) {
    if !facts.is_empty() {
        known.insert(id, facts.into());
    }
}

fn id<K: Resource>(object: &K) -> Box<str> {
    let meta = object.meta();
    let (namespace, name) = (meta.namespace.as_deref(), meta.name.as_deref());
    format!(
        "{}/{}",
        namespace.unwrap_or_default(),
        name.unwrap_or_default()
    )
    .into()
}

/// Retracts what `old` asserted and `new` does not, then asserts what is new.
fn diff(old: &[Change], new: &[Change], out: &mut Vec<Change>) {
    for fact in old {
        let retraction = fact.retraction();
        let replaced = new.iter().any(|n| n.retraction() == retraction);
        if !replaced {
            out.extend(retraction);
        }
    }
    out.extend(new.iter().filter(|n| !old.contains(n)).cloned());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Object, ObjectRef, ServiceKey};
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::net::IpAddr;

    /// A ConfigMap `name` whose `data.ip` is the VIP of service `ns/name`.
    fn object(name: &str, ip: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                ..ObjectMeta::default()
            },
            data: Some([("ip".to_owned(), ip.to_owned())].into()),
            ..ConfigMap::default()
        }
    }

    fn tracker() -> Facts<ConfigMap> {
        Facts::new(Box::new(|cm: &ConfigMap| {
            let ip = &cm.data.as_ref().unwrap()["ip"];
            let ip: IpAddr = ip.parse().map_err(|_| format!("bad ip {ip}"))?;
            let key = ServiceKey::new("ns", cm.metadata.name.as_deref().unwrap());
            Ok(vec![Change::Vips(key, vec![ip])])
        }))
    }

    fn vips(name: &str, ips: &[&str]) -> Change {
        Change::Vips(
            ServiceKey::new("ns", name),
            ips.iter().map(|ip| ip.parse().unwrap()).collect(),
        )
    }

    #[test]
    fn events_assert_and_retract() {
        let mut facts = tracker();
        let d = facts.on_event(Event::Apply(object("a", "10.0.0.1")));
        assert_eq!(d.changes, vec![vips("a", &["10.0.0.1"])]);
        // The same fact again is no change; a new value replaces without a retraction.
        assert!(
            facts
                .on_event(Event::Apply(object("a", "10.0.0.1")))
                .changes
                .is_empty()
        );
        let d = facts.on_event(Event::Apply(object("a", "10.0.0.2")));
        assert_eq!(d.changes, vec![vips("a", &["10.0.0.2"])]);
        // A broken object keeps its facts.
        assert!(
            facts
                .on_event(Event::Apply(object("a", "nope")))
                .changes
                .is_empty()
        );
        let d = facts.on_event(Event::Delete(object("a", "10.0.0.2")));
        assert_eq!(d.changes, vec![vips("a", &[])]);
    }

    #[test]
    fn a_relist_reports_only_the_difference() {
        let mut facts = tracker();
        assert!(facts.on_event(Event::Init).changes.is_empty());
        // A first list reports each object as it arrives.
        let d = facts.on_event(Event::InitApply(object("a", "10.0.0.1")));
        assert_eq!(d.changes, vec![vips("a", &["10.0.0.1"])]);
        facts.on_event(Event::InitApply(object("b", "10.0.0.2")));
        let d = facts.on_event(Event::InitDone);
        assert!(d.synced && d.changes.is_empty());
        // After a 410: `a` went, `b` is unchanged, `c` is new.
        facts.on_event(Event::Init);
        let d = facts.on_event(Event::InitApply(object("b", "10.0.0.2")));
        assert!(d.changes.is_empty());
        let d = facts.on_event(Event::InitApply(object("c", "10.0.0.3")));
        assert_eq!(d.changes, vec![vips("c", &["10.0.0.3"])]);
        let d = facts.on_event(Event::InitDone);
        assert_eq!(d.changes, vec![vips("a", &[])]);
    }

    /// An object relisted with no facts left is retracted once, when it
    /// arrives, and not again when the relist ends.
    #[test]
    fn a_relisted_object_without_facts_is_retracted_once() {
        let mut facts: Facts<ConfigMap> = Facts::new(Box::new(|cm: &ConfigMap| {
            let ip = &cm.data.as_ref().unwrap()["ip"];
            let key = ServiceKey::new("ns", cm.metadata.name.as_deref().unwrap());
            let ips = ip.parse().into_iter().collect::<Vec<IpAddr>>();
            Ok((!ips.is_empty())
                .then(|| Change::Vips(key, ips))
                .into_iter()
                .collect())
        }));
        facts.on_event(Event::Apply(object("a", "10.0.0.1")));
        facts.on_event(Event::Init);
        let d = facts.on_event(Event::InitApply(object("a", "none")));
        assert_eq!(d.changes, vec![vips("a", &[])]);
        let d = facts.on_event(Event::InitDone);
        assert!(d.changes.is_empty());
        assert!(facts.known.is_empty());
    }

    /// Objects that mean nothing to the engine (this cluster's own records
    /// on the broker) are not remembered, through events and relists.
    #[test]
    fn objects_without_facts_are_not_kept() {
        let mut facts: Facts<ConfigMap> = Facts::new(Box::new(|cm: &ConfigMap| {
            let ip = &cm.data.as_ref().unwrap()["ip"];
            let mine = cm.metadata.name.as_deref() == Some("mine");
            let key = ServiceKey::new("ns", cm.metadata.name.as_deref().unwrap());
            Ok((!mine)
                .then(|| Change::Vips(key, vec![ip.parse().unwrap()]))
                .into_iter()
                .collect())
        }));
        assert!(
            facts
                .on_event(Event::Apply(object("mine", "10.0.0.1")))
                .changes
                .is_empty()
        );
        facts.on_event(Event::Apply(object("a", "10.0.0.2")));
        assert_eq!(facts.known.len(), 1);
        facts.on_event(Event::Init);
        facts.on_event(Event::InitApply(object("mine", "10.0.0.1")));
        facts.on_event(Event::InitApply(object("a", "10.0.0.2")));
        assert!(facts.on_event(Event::InitDone).changes.is_empty());
        assert_eq!(
            facts.known.keys().map(|k| &**k).collect::<Vec<_>>(),
            ["ns/a"]
        );
        assert!(
            facts
                .on_event(Event::Delete(object("mine", "10.0.0.1")))
                .changes
                .is_empty()
        );
    }

    #[test]
    fn retractions_of_objects_are_deletes() {
        let key = ServiceKey::new("ns", "svc");
        let upsert = Change::Upsert(
            "east".into(),
            key.clone(),
            Object::Slice("s".into(), Default::default()),
        );
        let mut out = Vec::new();
        diff(std::slice::from_ref(&upsert), &[], &mut out);
        assert_eq!(
            out,
            vec![Change::Delete(
                "east".into(),
                key,
                ObjectRef::Slice("s".into())
            )]
        );
    }
}
