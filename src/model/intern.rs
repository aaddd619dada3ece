//! Keeping one copy of equal immutable values.
//!
//! At clusterset scale most objects repeat each other: the same namespaces,
//! and Services that differ only in their ClusterIPs (one `http` port, IPv4,
//! default settings). An [`Interner`] hands out one shared `Arc` per distinct
//! value and forgets the values nobody else holds any more.

use std::hash::{BuildHasher, Hash};
use std::sync::{Arc, Mutex};

use foldhash::fast::RandomState;
use hashbrown::HashTable;

/// Distinct values, each kept once.
#[derive(Debug)]
pub(crate) struct Interner<T: ?Sized> {
    values: HashTable<Arc<T>>,
    hasher: RandomState,
    live_at_last_prune: usize,
}

impl<T: ?Sized> Default for Interner<T> {
    fn default() -> Self {
        Self {
            values: HashTable::new(),
            hasher: RandomState::default(),
            live_at_last_prune: 0,
        }
    }
}

impl<T: ?Sized + Eq + Hash> Interner<T> {
    /// The shared copy of `value`; `make` builds it when there is none yet.
    pub(crate) fn get(&mut self, value: &T, make: impl FnOnce() -> Arc<T>) -> Arc<T> {
        self.find(value, |v| v == value, make)
    }

    /// The shared copy of the value that `probe` stands for, found without
    /// building it (a key's namespace and name, say): `probe` must hash as
    /// the value does, and `is` tell whether a kept value is that one.
    pub(crate) fn find<Q: Hash + ?Sized>(
        &mut self,
        probe: &Q,
        is: impl Fn(&T) -> bool,
        make: impl FnOnce() -> Arc<T>,
    ) -> Arc<T> {
        let hash = self.hasher.hash_one(probe);
        if let Some(shared) = self.values.find(hash, |v| is(v)) {
            return shared.clone();
        }
        self.prune();
        let shared = make();
        let hasher = &self.hasher;
        self.values
            .insert_unique(hash, shared.clone(), |v| hasher.hash_one(&**v));
        shared
    }

    /// Forgets the values only this interner holds, once there could be as
    /// many of them as live ones (so the cost is amortized over insertions).
    fn prune(&mut self) {
        if self.values.len() >= 2 * self.live_at_last_prune.max(1024) {
            self.values.retain(|v| Arc::strong_count(v) > 1);
            self.live_at_last_prune = self.values.len();
        }
    }
}

/// The shared copy of `value` in a process-wide `interner` (a `static`).
pub(crate) fn share<T: Eq + Hash + Clone>(interner: &Mutex<Interner<T>>, value: T) -> Arc<T> {
    let mut interner = interner.lock().unwrap_or_else(|e| e.into_inner());
    interner.get(&value, || Arc::new(value.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_values_share_one_copy_and_unused_ones_are_forgotten() {
        let mut strings: Interner<str> = Interner::default();
        let a = strings.get("ns1", || Arc::from("ns1"));
        let b = strings.get("ns1", || unreachable!("ns1 is kept"));
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(strings.values.len(), 1);

        // Fill past the prune threshold with values nobody keeps: they go,
        // the one still held stays.
        for i in 0..3000 {
            let s = format!("tmp{i}");
            strings.get(&s, || Arc::from(s.as_str()));
        }
        assert!(strings.values.len() < 3000, "{} kept", strings.values.len());
        let c = strings.get("ns1", || unreachable!("ns1 is still held"));
        assert!(Arc::ptr_eq(&a, &c));
    }
}
