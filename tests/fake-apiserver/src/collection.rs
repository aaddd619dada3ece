//! One resource's objects, sorted by `(namespace, name)` as etcd sorts its
//! keys, with a count per namespace. Lists read it in place: a page walks the
//! live map from its continue key and patches in the state, at the list's
//! resourceVersion, of the few keys written since (see [`Collection::page_at`]),
//! so paging through n objects costs O(n), not O(n²) as a copy per page would.
//! Objects are kept as compact JSON ([`Json`]), shared (`Arc`) with the
//! history and the watch fan-out.

use std::collections::{BTreeMap, HashMap};
use std::iter::Peekable;
use std::ops::Bound;
use std::sync::Arc;

use serde_json::Value;

/// `(namespace or "", name)`.
pub(crate) type Key = (String, String);

/// A stored object as compact JSON text. A `serde_json::Value` tree of an
/// EndpointSlice with 34 endpoints takes ~15 times its JSON size (a B-tree
/// node per small map), which at 1.5 M objects does not fit in memory; the
/// text is parsed again where an object is read, rendered or filtered.
#[derive(Debug)]
pub(crate) struct Json(Box<str>);

impl Json {
    pub fn freeze(v: &Value) -> Arc<Self> {
        Arc::new(Self(serde_json::to_string(v).expect("JSON").into()))
    }

    pub fn thaw(&self) -> Value {
        serde_json::from_str(&self.0).expect("stored JSON parses")
    }

    pub fn text(&self) -> &str {
        &self.0
    }
}

/// Keys written after some resourceVersion, each with its state at that
/// version (`None`: it did not exist).
pub(crate) type Rollback = BTreeMap<Key, Option<Arc<Json>>>;

#[derive(Default)]
pub(crate) struct Collection {
    objects: BTreeMap<Key, Arc<Json>>,
    per_namespace: HashMap<String, usize>,
}

impl Collection {
    pub fn get(&self, key: &Key) -> Option<&Arc<Json>> {
        self.objects.get(key)
    }

    pub fn contains(&self, key: &Key) -> bool {
        self.objects.contains_key(key)
    }

    /// Stores `obj`; the object it replaces, if any.
    pub fn insert(&mut self, key: Key, obj: Arc<Json>) -> Option<Arc<Json>> {
        let ns = key.0.clone();
        let old = self.objects.insert(key, obj);
        if old.is_none() {
            *self.per_namespace.entry(ns).or_default() += 1;
        }
        old
    }

    pub fn remove(&mut self, key: &Key) -> Option<Arc<Json>> {
        let old = self.objects.remove(key);
        if old.is_some()
            && let Some(n) = self.per_namespace.get_mut(&key.0)
        {
            *n -= 1;
            if *n == 0 {
                self.per_namespace.remove(&key.0);
            }
        }
        old
    }

    /// Objects in one namespace (or all), in key order, after `after`.
    pub fn range<'a>(
        &'a self,
        namespace: Option<&'a str>,
        after: Option<&Key>,
    ) -> impl Iterator<Item = (&'a Key, &'a Arc<Json>)> + 'a {
        let start = match (after, namespace) {
            (Some(k), _) => Bound::Excluded(k.clone()),
            (None, Some(ns)) => Bound::Included((ns.to_owned(), String::new())),
            (None, None) => Bound::Unbounded,
        };
        self.objects
            .range((start, Bound::Unbounded))
            .take_while(move |(k, _)| namespace.is_none_or(|ns| k.0 == ns))
    }

    /// How many objects one namespace (or all) holds now.
    pub fn len_in(&self, namespace: Option<&str>) -> usize {
        match namespace {
            Some(ns) => self.per_namespace.get(ns).copied().unwrap_or(0),
            None => self.objects.len(),
        }
    }

    /// The objects of one namespace (or all) after `after` as they were when
    /// `rollback` was taken: live objects, except the rolled-back keys, which
    /// show their old state (or are left out if they did not exist).
    pub fn page_at<'a>(
        &'a self,
        rollback: &'a Rollback,
        namespace: Option<&'a str>,
        after: Option<&Key>,
    ) -> impl Iterator<Item = (&'a Key, &'a Arc<Json>)> + 'a {
        let start = match after {
            Some(k) => Bound::Excluded(k.clone()),
            None => Bound::Unbounded,
        };
        let old = rollback
            .range((start, Bound::Unbounded))
            .filter(move |(k, _)| namespace.is_none_or(|ns| k.0 == ns));
        Merge {
            live: self.range(namespace, after).peekable(),
            old: old.peekable(),
        }
    }

    /// [`Self::len_in`] when `rollback` was taken.
    pub fn len_at(&self, rollback: &Rollback, namespace: Option<&str>) -> usize {
        let mut n = self.len_in(namespace) as isize;
        for (key, before) in rollback {
            if namespace.is_none_or(|ns| key.0 == ns) {
                n += isize::from(before.is_some()) - isize::from(self.contains(key));
            }
        }
        n.max(0) as usize
    }

    /// The objects of one namespace (or all) and their size as compact JSON,
    /// about what etcd stores (it stores protobuf for built-in kinds, a
    /// little smaller).
    pub fn footprint(&self, namespace: Option<&str>) -> (usize, u64) {
        self.range(namespace, None)
            .fold((0, 0), |(n, bytes), (_, v)| {
                (n + 1, bytes + v.0.len() as u64)
            })
    }
}

/// Two key-ordered streams, the rolled-back one winning on equal keys.
struct Merge<'a, L, O>
where
    L: Iterator<Item = (&'a Key, &'a Arc<Json>)>,
    O: Iterator<Item = (&'a Key, &'a Option<Arc<Json>>)>,
{
    live: Peekable<L>,
    old: Peekable<O>,
}

impl<'a, L, O> Iterator for Merge<'a, L, O>
where
    L: Iterator<Item = (&'a Key, &'a Arc<Json>)>,
    O: Iterator<Item = (&'a Key, &'a Option<Arc<Json>>)>,
{
    type Item = (&'a Key, &'a Arc<Json>);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let take_old = match (self.live.peek(), self.old.peek()) {
                (None, None) => return None,
                (Some(_), None) => false,
                (None, Some(_)) => true,
                (Some((lk, _)), Some((ok, _))) => ok <= lk,
            };
            if !take_old {
                return self.live.next();
            }
            let (key, before) = self.old.next().expect("peeked");
            if self.live.peek().is_some_and(|(lk, _)| *lk == key) {
                self.live.next();
            }
            if let Some(v) = before {
                return Some((key, v));
            }
        }
    }
}
