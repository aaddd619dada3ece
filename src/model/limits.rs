//! Caps on what one cluster may publish and on the VIPs one namespace may
//! hold (issue 46, item 4; ARCHITECTURE.md, "Trust between clusters"), so a
//! flood from one member or one tenant leaves every other answer as it was.
//!
//! Every member decides alone which items a cap keeps, and all must decide
//! the same, or their answers differ: a [`Budget`] keeps items in their
//! order (a service's namespace and name), never in the order they arrived.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Bound;

/// The caps, as configured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Services one cluster may export.
    pub exports_per_cluster: u64,
    /// Endpoints one cluster may publish, over all its exports.
    pub endpoints_per_cluster: u64,
    /// ClusterSetIP imports of one namespace that get clusterset VIPs.
    pub vips_per_namespace: u64,
}

impl Limits {
    /// No cap at all (embedded mode: the operator wrote every manifest).
    pub const NONE: Self = Self {
        exports_per_cluster: u64::MAX,
        endpoints_per_cluster: u64::MAX,
        vips_per_namespace: u64::MAX,
    };

    /// The cap of `limit`.
    pub fn cap(&self, limit: Limit) -> u64 {
        match limit {
            Limit::ExportsPerCluster => self.exports_per_cluster,
            Limit::EndpointsPerCluster => self.endpoints_per_cluster,
            Limit::VipsPerNamespace => self.vips_per_namespace,
        }
    }
}

/// One of the caps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Limit {
    /// `--max-exports-per-cluster`.
    ExportsPerCluster,
    /// `--max-endpoints-per-cluster`.
    EndpointsPerCluster,
    /// `--max-vips-per-namespace`.
    VipsPerNamespace,
}

impl Limit {
    /// Every cap, in metric order.
    pub const ALL: [Limit; 3] = [
        Limit::ExportsPerCluster,
        Limit::EndpointsPerCluster,
        Limit::VipsPerNamespace,
    ];

    /// Its flag, which names it in logs, messages and the metric's label.
    pub fn flag(self) -> &'static str {
        match self {
            Limit::ExportsPerCluster => "max-exports-per-cluster",
            Limit::EndpointsPerCluster => "max-endpoints-per-cluster",
            Limit::VipsPerNamespace => "max-vips-per-namespace",
        }
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.flag())
    }
}

/// Weighted items under a cap: in their order, the longest run from the
/// first whose weights add up to at most the cap is kept, the rest refused.
/// The outcome depends only on the items and weights, never on the order of
/// the calls that set them. Each change costs a logarithm plus the items
/// whose outcome it changes.
#[derive(Clone, Debug)]
pub(crate) struct Budget<K> {
    cap: u64,
    weights: BTreeMap<K, u64>,
    /// The weight of every item.
    weight: u64,
    /// The weight of the kept items.
    kept_weight: u64,
    /// How many items are kept.
    kept: usize,
    /// The first refused item; `None`: all are kept.
    first_refused: Option<K>,
}

impl<K: Ord + Clone> Budget<K> {
    /// An empty budget of `cap`.
    pub(crate) fn new(cap: u64) -> Self {
        Self {
            cap,
            weights: BTreeMap::new(),
            weight: 0,
            kept_weight: 0,
            kept: 0,
            first_refused: None,
        }
    }

    /// Whether `item` is kept (an item of no weight always is).
    pub(crate) fn keeps(&self, item: &K) -> bool {
        self.first_refused.as_ref().is_none_or(|first| item < first)
            || !self.weights.contains_key(item)
    }

    /// How many items are refused.
    pub(crate) fn refused(&self) -> usize {
        self.weights.len() - self.kept
    }

    /// The weight of every item, kept or not.
    pub(crate) fn weight(&self) -> u64 {
        self.weight
    }

    /// The refused items, in order.
    pub(crate) fn refused_items(&self) -> Vec<K> {
        let Some(first) = &self.first_refused else {
            return Vec::new();
        };
        self.weights
            .range(first..)
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Sets the weight of `item` (0: takes it out), and returns the other
    /// items whose outcome this changed, with whether each is now kept.
    pub(crate) fn set(&mut self, item: K, weight: u64) -> Vec<(K, bool)> {
        // Most changes (a Service, a slice of the same size) keep the
        // weight: one lookup.
        if self.weights.get(&item).copied().unwrap_or(0) == weight {
            return Vec::new();
        }
        let before = self.first_refused.clone();
        let in_run = |first: &Option<K>| first.as_ref().is_none_or(|first| &item < first);
        if let Some(old) = self.weights.remove(&item) {
            self.weight -= old;
            if self.first_refused.as_ref() == Some(&item) {
                self.first_refused = self.after(&item);
            } else if in_run(&self.first_refused) {
                self.kept_weight -= old;
                self.kept -= 1;
            }
        }
        if weight > 0 {
            if in_run(&self.first_refused) {
                self.kept_weight += weight;
                self.kept += 1;
            }
            self.weights.insert(item.clone(), weight);
            self.weight += weight;
        }
        self.settle();
        self.changed(before, &item)
    }

    /// Moves the first refused item until the kept run is the longest that fits.
    fn settle(&mut self) {
        while self.kept_weight > self.cap {
            let upper = self
                .first_refused
                .as_ref()
                .map_or(Bound::Unbounded, Bound::Excluded);
            let (last, weight) = self
                .weights
                .range((Bound::Unbounded, upper))
                .next_back()
                .map(|(k, w)| (k.clone(), *w))
                .expect("a kept weight is some kept item's");
            self.kept_weight -= weight;
            self.kept -= 1;
            self.first_refused = Some(last);
        }
        while let Some(first) = &self.first_refused {
            let weight = self.weights[first];
            if self.kept_weight + weight > self.cap {
                break;
            }
            self.kept_weight += weight;
            self.kept += 1;
            self.first_refused = self.after(&first.clone());
        }
    }

    /// The item after `item`.
    fn after(&self, item: &K) -> Option<K> {
        let after = (Bound::Excluded(item), Bound::Unbounded);
        self.weights.range(after).next().map(|(k, _)| k.clone())
    }

    /// The items other than `item` between the first refused one `before`
    /// and now: those went from kept to refused, or the other way.
    fn changed(&self, before: Option<K>, item: &K) -> Vec<(K, bool)> {
        let now = self.first_refused.clone();
        let (from, to, kept) = match (before, now) {
            (Some(b), Some(n)) if n < b => (Bound::Included(n), Bound::Excluded(b), false),
            (Some(b), Some(n)) => (Bound::Included(b), Bound::Excluded(n), true),
            (Some(b), None) => (Bound::Included(b), Bound::Unbounded, true),
            (None, Some(n)) => (Bound::Included(n), Bound::Unbounded, false),
            (None, None) => return Vec::new(),
        };
        self.weights
            .range((from, to))
            .filter(|(k, _)| *k != item)
            .map(|(k, _)| (k.clone(), kept))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a budget keeps, recomputed from scratch: the longest run from
    /// the first item that fits.
    fn expected(weights: &BTreeMap<u32, u64>, cap: u64) -> Vec<u32> {
        let mut sum = 0;
        let mut kept = Vec::new();
        for (k, w) in weights {
            sum += w;
            if sum > cap {
                break;
            }
            kept.push(*k);
        }
        kept
    }

    /// Issue 46, item 4: which exports a cap keeps is decided by name, the
    /// same in every member whatever order its watches delivered them in.
    #[test]
    fn a_budget_keeps_the_first_items_in_order_whatever_the_order_of_changes() {
        let mut budget = Budget::new(3);
        assert!(budget.set(5, 1).is_empty());
        assert!(budget.set(7, 1).is_empty());
        assert!(budget.set(9, 1).is_empty());
        // A fourth item after the others is refused, nothing else changes.
        assert!(budget.set(11, 1).is_empty());
        assert!(!budget.keeps(&11) && budget.keeps(&9));
        assert_eq!(budget.refused(), 1);
        // One before them displaces the last kept one.
        assert_eq!(budget.set(1, 1), [(9, false)]);
        assert!(budget.keeps(&1) && !budget.keeps(&9));
        // One kept leaving lets the first refused one in.
        assert_eq!(budget.set(5, 0), [(9, true)]);
        assert!(budget.keeps(&9) && !budget.keeps(&11));
        // Weights: a heavier item pushes the later ones out.
        assert_eq!(budget.set(1, 3), [(7, false), (9, false)]);
        assert_eq!(budget.refused(), 3);
        assert!(budget.keeps(&42), "an item of no weight is kept");
    }

    #[test]
    fn a_budget_matches_its_definition_after_any_changes() {
        // A fixed pseudo-random walk of sets and removals (xorshift).
        let mut state = 0x2545_f491_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for cap in [0, 1, 5, 20] {
            let mut budget = Budget::new(cap);
            let mut weights = BTreeMap::new();
            for _ in 0..400 {
                let item = (next() % 16) as u32;
                let weight = next() % 4;
                let kept_before: Vec<bool> = (0..16).map(|k| budget.keeps(&k)).collect();
                let changed = budget.set(item, weight);
                if weight == 0 {
                    weights.remove(&item);
                } else {
                    weights.insert(item, weight);
                }
                let kept = expected(&weights, cap);
                for k in 0..16u32 {
                    let should = kept.contains(&k) || !weights.contains_key(&k);
                    assert_eq!(budget.keeps(&k), should, "cap {cap}, item {k}");
                    let flipped = kept_before[k as usize] != should;
                    let reported = changed.iter().any(|(c, now)| *c == k && *now == should);
                    if k != item {
                        assert_eq!(flipped, reported, "cap {cap}, item {k}: {changed:?}");
                    }
                }
                assert_eq!(budget.refused(), weights.len() - kept.len());
                assert_eq!(budget.weight(), weights.values().sum::<u64>());
                let refused: Vec<u32> = weights
                    .keys()
                    .copied()
                    .filter(|k| !kept.contains(k))
                    .collect();
                assert_eq!(budget.refused_items(), refused);
            }
        }
    }
}
