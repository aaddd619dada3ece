//! One resource's objects, sorted by `(namespace, name)` as etcd sorts its
//! keys, with a count per namespace. Lists read it in place: a page walks the
//! live map from its continue key and patches in the state, at the list's
//! resourceVersion, of the few keys written since (see [`Collection::page_at`]),
//! so paging through n objects costs O(n), not O(n²) as a copy per page would.
//! Objects are shared (`Arc`) with the history and the watch fan-out.

use std::collections::{BTreeMap, HashMap};
use std::iter::Peekable;
use std::ops::Bound;
use std::sync::Arc;

use serde_json::Value;

/// `(namespace or "", name)`.
pub(crate) type Key = (String, String);

/// Keys written after some resourceVersion, each with its state at that
/// version (`None`: it did not exist).
pub(crate) type Rollback = BTreeMap<Key, Option<Arc<Value>>>;

#[derive(Default)]
pub(crate) struct Collection {
    objects: BTreeMap<Key, Arc<Value>>,
    per_namespace: HashMap<String, usize>,
}

impl Collection {
    pub fn get(&self, key: &Key) -> Option<&Arc<Value>> {
        self.objects.get(key)
    }

    pub fn contains(&self, key: &Key) -> bool {
        self.objects.contains_key(key)
    }

    /// Stores `obj`; the object it replaces, if any.
    pub fn insert(&mut self, key: Key, obj: Arc<Value>) -> Option<Arc<Value>> {
        let ns = key.0.clone();
        let old = self.objects.insert(key, obj);
        if old.is_none() {
            *self.per_namespace.entry(ns).or_default() += 1;
        }
        old
    }

    pub fn remove(&mut self, key: &Key) -> Option<Arc<Value>> {
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
    ) -> impl Iterator<Item = (&'a Key, &'a Arc<Value>)> + 'a {
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
    ) -> impl Iterator<Item = (&'a Key, &'a Arc<Value>)> + 'a {
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
        let mut bytes = ByteCount(0);
        let mut n = 0;
        for (_, v) in self.range(namespace, None) {
            serde_json::to_writer(&mut bytes, &**v).expect("JSON to a counter");
            n += 1;
        }
        (n, bytes.0)
    }
}

/// An `io::Write` that only counts.
struct ByteCount(u64);

impl std::io::Write for ByteCount {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Two key-ordered streams, the rolled-back one winning on equal keys.
struct Merge<'a, L, O>
where
    L: Iterator<Item = (&'a Key, &'a Arc<Value>)>,
    O: Iterator<Item = (&'a Key, &'a Option<Arc<Value>>)>,
{
    live: Peekable<L>,
    old: Peekable<O>,
}

impl<'a, L, O> Iterator for Merge<'a, L, O>
where
    L: Iterator<Item = (&'a Key, &'a Arc<Value>)>,
    O: Iterator<Item = (&'a Key, &'a Option<Arc<Value>>)>,
{
    type Item = (&'a Key, &'a Arc<Value>);

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
