//! Which objects this cluster wrote for each service (EndpointSlices, whose
//! names are not derived from the service alone), kept from a watch of them
//! so that stale ones can be found and deleted without listing.

use std::collections::{BTreeSet, HashMap};
use std::sync::RwLock;

use kube::Resource;
use kube::runtime::watcher::Event;

use crate::k8s::records::labelled_service;
use crate::model::ServiceKey;

#[derive(Default)]
struct Maps {
    by_key: HashMap<ServiceKey, BTreeSet<String>>,
    by_name: HashMap<String, ServiceKey>,
}

impl Maps {
    fn insert(&mut self, name: String, key: ServiceKey) {
        self.remove(&name);
        self.by_key
            .entry(key.clone())
            .or_default()
            .insert(name.clone());
        self.by_name.insert(name, key);
    }

    fn remove(&mut self, name: &str) {
        if let Some(key) = self.by_name.remove(name)
            && let Some(names) = self.by_key.get_mut(&key)
        {
            names.remove(name);
            if names.is_empty() {
                self.by_key.remove(&key);
            }
        }
    }
}

/// Object names by service, for the objects of one watch that a filter accepts.
#[derive(Default)]
pub struct Owned {
    maps: RwLock<Maps>,
    relist: RwLock<Option<Maps>>,
}

impl Owned {
    /// Follows one watch event; `mine` tells the objects to keep. Returns the
    /// service the event touched, if any.
    pub fn on_event<K: Resource>(
        &self,
        event: &Event<K>,
        mine: impl Fn(&K) -> bool,
    ) -> Option<ServiceKey> {
        let keyed = |object: &K| {
            let key = labelled_service(object.meta())?.0;
            Some((object.meta().name.clone()?, key))
        };
        let write = |f: &mut dyn FnMut(&mut Maps)| {
            f(&mut self.maps.write().unwrap_or_else(|e| e.into_inner()));
        };
        match event {
            Event::Apply(object) => {
                let (name, key) = keyed(object)?;
                if mine(object) {
                    write(&mut |m| m.insert(name.clone(), key.clone()));
                } else {
                    write(&mut |m| m.remove(&name));
                }
                Some(key)
            }
            Event::Delete(object) => {
                let (name, key) = keyed(object)?;
                write(&mut |m| m.remove(&name));
                Some(key)
            }
            Event::Init => {
                *self.relist.write().unwrap_or_else(|e| e.into_inner()) = Some(Maps::default());
                None
            }
            Event::InitApply(object) => {
                let (name, key) = keyed(object)?;
                if mine(object) {
                    let mut relist = self.relist.write().unwrap_or_else(|e| e.into_inner());
                    relist.get_or_insert_default().insert(name, key.clone());
                }
                Some(key)
            }
            Event::InitDone => {
                let fresh = self
                    .relist
                    .write()
                    .unwrap_or_else(|e| e.into_inner())
                    .take()
                    .unwrap_or_default();
                *self.maps.write().unwrap_or_else(|e| e.into_inner()) = fresh;
                None
            }
        }
    }

    /// The names of the objects of `key`.
    pub fn names(&self, key: &ServiceKey) -> BTreeSet<String> {
        let maps = self.maps.read().unwrap_or_else(|e| e.into_inner());
        maps.by_key.get(key).cloned().unwrap_or_default()
    }

    /// Every service with an object.
    pub fn keys(&self) -> Vec<ServiceKey> {
        let maps = self.maps.read().unwrap_or_else(|e| e.into_inner());
        maps.by_key.keys().cloned().collect()
    }
}
