//! Clusterset VIP allocation from configurable pools.
//!
//! A VIP is first looked for at an offset derived from a stable hash of
//! `<namespace>/<name>/<family>`, then at the following addresses, skipping
//! addresses already given out and addresses any cluster uses for a Service or
//! an endpoint. Allocations are kept for the life of the import and can be
//! saved and restored (see `vip_state`), so a restart gives every live import
//! the VIP it had, even where two names hashed to the same address.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use thiserror::Error;

use crate::model::{IpFamily, ServiceKey};

/// The pools VIPs come from, one per family.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VipPools {
    /// IPv4 pool (default `243.0.0.0/8`, reserved space no cluster uses).
    pub v4: Ipv4Net,
    /// IPv6 pool (default a ULA /48).
    pub v6: Ipv6Net,
}

impl Default for VipPools {
    fn default() -> Self {
        Self {
            v4: "243.0.0.0/8".parse().expect("valid default IPv4 pool"),
            v6: "fd00:c5e7::/48".parse().expect("valid default IPv6 pool"),
        }
    }
}

impl VipPools {
    /// The pool of a family.
    pub fn pool(&self, family: IpFamily) -> IpNet {
        match family {
            IpFamily::IPv4 => IpNet::V4(self.v4),
            IpFamily::IPv6 => IpNet::V6(self.v6),
        }
    }

    /// Whether an address lies in one of the pools.
    pub fn contains(&self, ip: &IpAddr) -> bool {
        self.pool(IpFamily::of(ip)).contains(ip)
    }
}

/// No free address is left in a pool.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("VIP pool {pool} is exhausted")]
pub struct PoolExhausted {
    /// The exhausted pool.
    pub pool: IpNet,
}

/// Gives out VIPs and remembers who holds which.
#[derive(Debug, Default)]
pub struct VipAllocator {
    pools: VipPools,
    held: HashMap<ServiceKey, ByFamily, foldhash::fast::RandomState>,
    owner: HashMap<IpAddr, ServiceKey, foldhash::fast::RandomState>,
    /// Pool addresses in use by some cluster, with a use count.
    in_use_by_clusters: HashMap<IpAddr, u32>,
    /// VIPs given out, by family (`IpFamily as usize`).
    counts: [usize; 2],
    dirty: bool,
}

/// A service's VIPs: at most one per family, kept inline.
#[derive(Clone, Copy, Debug, Default)]
struct ByFamily([Option<IpAddr>; 2]);

impl ByFamily {
    fn get(&self, family: IpFamily) -> Option<&IpAddr> {
        self.0[family as usize].as_ref()
    }

    fn insert(&mut self, family: IpFamily, ip: IpAddr) {
        self.0[family as usize] = Some(ip);
    }

    fn remove(&mut self, family: IpFamily) -> Option<IpAddr> {
        self.0[family as usize].take()
    }

    fn is_empty(&self) -> bool {
        self.0.iter().all(Option::is_none)
    }

    /// The VIPs with their families, IPv4 first.
    fn iter(&self) -> impl Iterator<Item = (IpFamily, IpAddr)> + '_ {
        [IpFamily::IPv4, IpFamily::IPv6]
            .into_iter()
            .filter_map(|f| Some((f, self.0[f as usize]?)))
    }
}

impl VipAllocator {
    /// An allocator with nothing given out.
    pub fn new(pools: VipPools) -> Self {
        Self {
            pools,
            ..Self::default()
        }
    }

    /// The pools.
    pub fn pools(&self) -> &VipPools {
        &self.pools
    }

    /// Takes back allocations saved earlier; entries outside the pools or
    /// clashing with one already restored are skipped and returned.
    pub fn restore(
        &mut self,
        saved: impl IntoIterator<Item = (ServiceKey, IpAddr)>,
    ) -> Vec<(ServiceKey, IpAddr)> {
        let was_dirty = self.dirty;
        let mut skipped = Vec::new();
        for (key, ip) in saved {
            let family = IpFamily::of(&ip);
            let free = !self.owner.contains_key(&ip)
                && self.held.get(&key).is_none_or(|h| h.get(family).is_none());
            if self.pools.contains(&ip) && free {
                self.take(key, family, ip);
            } else {
                skipped.push((key, ip));
            }
        }
        // The saved state already says what was restored: only what was
        // skipped makes it stale.
        self.dirty = was_dirty || !skipped.is_empty();
        skipped
    }

    /// The VIPs of `key`, one per family in `families` order, allocating the
    /// missing ones and releasing those of families no longer listed.
    pub fn ensure(
        &mut self,
        key: &ServiceKey,
        families: &[IpFamily],
    ) -> Result<Vec<IpAddr>, PoolExhausted> {
        let stale: Vec<IpFamily> = self
            .held
            .get(key)
            .map(|h| {
                h.iter()
                    .map(|(f, _)| f)
                    .filter(|f| !families.contains(f))
                    .collect()
            })
            .unwrap_or_default();
        for family in stale {
            self.release_family(key, family);
        }
        families
            .iter()
            .map(
                |&family| match self.held.get(key).and_then(|h| h.get(family)) {
                    Some(ip) => Ok(*ip),
                    None => {
                        let ip = self.find_free(key, family)?;
                        self.take(key.clone(), family, ip);
                        Ok(ip)
                    }
                },
            )
            .collect()
    }

    /// The VIPs `key` holds, in `families` order (skipping families it has none of).
    pub fn held(&self, key: &ServiceKey, families: &[IpFamily]) -> Vec<IpAddr> {
        let held = self.held.get(key);
        families
            .iter()
            .filter_map(|f| held.and_then(|h| h.get(*f)).copied())
            .collect()
    }

    /// The service holding `ip`, if any.
    pub fn holder(&self, ip: &IpAddr) -> Option<&ServiceKey> {
        self.owner.get(ip)
    }

    /// Makes `ips` (at most one per family) exactly the VIPs of `key`, as
    /// decided elsewhere. Returns the addresses another key held, which move.
    pub fn assign(&mut self, key: &ServiceKey, ips: &[IpAddr]) -> Vec<(ServiceKey, IpAddr)> {
        self.release(key);
        let mut moved = Vec::new();
        for ip in ips {
            if let Some(holder) = self.owner.get(ip).cloned() {
                self.release_family(&holder, IpFamily::of(ip));
                moved.push((holder, *ip));
            }
            self.take(key.clone(), IpFamily::of(ip), *ip);
        }
        moved
    }

    /// The addresses to try, in order, when `key` needs a VIP of `family`:
    /// from its hash-derived place in the pool onwards, skipping addresses
    /// clusters use (what other clusters hold is for the caller to find out).
    pub fn candidates(
        &self,
        key: &ServiceKey,
        family: IpFamily,
    ) -> impl Iterator<Item = IpAddr> + '_ {
        let span = PoolSpan::of(self.pools.pool(family));
        let start = u128::from(stable_hash(key, family)) % span.size;
        (0..span.size)
            .map(move |step| span.address((start + step) % span.size))
            .filter(|ip| !self.in_use_by_clusters.contains_key(ip))
    }

    /// Releases every VIP of `key`.
    pub fn release(&mut self, key: &ServiceKey) {
        if let Some(held) = self.held.remove(key) {
            for (family, ip) in held.iter() {
                self.owner.remove(&ip);
                self.counts[family as usize] -= 1;
            }
            self.dirty = true;
        }
    }

    /// Releases allocations whose key `live` rejects (after a restore).
    pub fn retain(&mut self, mut live: impl FnMut(&ServiceKey) -> bool) {
        let dead: Vec<ServiceKey> = self.held.keys().filter(|k| !live(k)).cloned().collect();
        for key in dead {
            self.release(&key);
        }
    }

    /// Records that a cluster uses `ip` (Service or endpoint), so it is never
    /// handed out. Returns the key already holding it as a VIP, if any.
    pub fn mark_cluster_address(&mut self, ip: IpAddr) -> Option<&ServiceKey> {
        if !self.pools.contains(&ip) {
            return None;
        }
        *self.in_use_by_clusters.entry(ip).or_default() += 1;
        self.owner.get(&ip)
    }

    /// Undoes one [`Self::mark_cluster_address`].
    pub fn unmark_cluster_address(&mut self, ip: IpAddr) {
        if let Some(count) = self.in_use_by_clusters.get_mut(&ip) {
            *count -= 1;
            if *count == 0 {
                self.in_use_by_clusters.remove(&ip);
            }
        }
    }

    /// Every allocation, sorted, for saving.
    pub fn allocations(&self) -> Vec<(ServiceKey, IpAddr)> {
        let mut all: Vec<_> = self
            .held
            .iter()
            .flat_map(|(k, h)| h.iter().map(move |(_, ip)| (k.clone(), ip)))
            .collect();
        all.sort();
        all
    }

    /// Number of VIPs given out in a family.
    pub fn allocated(&self, family: IpFamily) -> usize {
        self.counts[family as usize]
    }

    /// Number of addresses of a family's pool still free.
    pub fn free(&self, family: IpFamily) -> u128 {
        let used = self
            .in_use_by_clusters
            .keys()
            .filter(|ip| IpFamily::of(ip) == family)
            .count();
        PoolSpan::of(self.pools.pool(family))
            .size
            .saturating_sub((self.allocated(family) + used) as u128)
    }

    /// Whether allocations changed since the last call.
    pub fn take_dirty(&mut self) -> bool {
        std::mem::take(&mut self.dirty)
    }

    fn take(&mut self, key: ServiceKey, family: IpFamily, ip: IpAddr) {
        self.counts[family as usize] += 1;
        self.owner.insert(ip, key.clone());
        self.held.entry(key).or_default().insert(family, ip);
        self.dirty = true;
    }

    fn release_family(&mut self, key: &ServiceKey, family: IpFamily) {
        if let Some(held) = self.held.get_mut(key)
            && let Some(ip) = held.remove(family)
        {
            self.owner.remove(&ip);
            self.counts[family as usize] -= 1;
            if held.is_empty() {
                self.held.remove(key);
            }
            self.dirty = true;
        }
    }

    fn find_free(&self, key: &ServiceKey, family: IpFamily) -> Result<IpAddr, PoolExhausted> {
        let pool = self.pools.pool(family);
        let busy = self.owner.len() + self.in_use_by_clusters.len();
        if PoolSpan::of(pool).size <= busy as u128 {
            return Err(PoolExhausted { pool });
        }
        // At most `busy` addresses are taken, so a free one is found within busy + 1 candidates.
        self.candidates(key, family)
            .take(busy + 1)
            .find(|ip| !self.owner.contains_key(ip))
            .ok_or(PoolExhausted { pool })
    }
}

/// The usable addresses of a pool: all but the network address (and, for
/// IPv4, the broadcast address) when the pool is large enough to have them.
struct PoolSpan {
    base: IpAddr,
    first: u128,
    size: u128,
}

impl PoolSpan {
    fn of(pool: IpNet) -> Self {
        let host_bits = u32::from(pool.max_prefix_len() - pool.prefix_len()).min(64);
        let total = 1u128 << host_bits;
        let (first, reserved) = match (pool, host_bits) {
            (_, 0 | 1) => (0, 0),
            (IpNet::V4(_), _) => (1, 2),
            (IpNet::V6(_), _) => (1, 1),
        };
        Self {
            base: pool.network(),
            first,
            size: total - reserved,
        }
    }

    fn address(&self, index: u128) -> IpAddr {
        let offset = self.first + index;
        match self.base {
            IpAddr::V4(b) => IpAddr::V4(Ipv4Addr::from(u32::from(b) + offset as u32)),
            IpAddr::V6(b) => IpAddr::V6(Ipv6Addr::from(u128::from(b) + offset)),
        }
    }
}

/// FNV-1a over `<namespace>/<name>/<family>`: fixed for ever, unlike std's hasher.
fn stable_hash(key: &ServiceKey, family: IpFamily) -> u64 {
    let text = format!("{}/{}/{}", key.namespace(), key.name(), family);
    crate::model::stable_hash(text.bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use IpFamily::*;

    fn key(name: &str) -> ServiceKey {
        ServiceKey::new("ns", name)
    }

    fn tiny_pools() -> VipPools {
        VipPools {
            v4: "243.0.0.0/30".parse().unwrap(),
            v6: "fd00::/126".parse().unwrap(),
        }
    }

    #[test]
    fn one_vip_per_family_in_its_pool_and_stable() {
        let mut a = VipAllocator::new(VipPools::default());
        let vips = a.ensure(&key("web"), &[IPv6, IPv4]).unwrap();
        assert!(vips[0].is_ipv6() && vips[1].is_ipv4());
        assert!(a.pools().contains(&vips[0]) && a.pools().contains(&vips[1]));
        assert_eq!(a.ensure(&key("web"), &[IPv6, IPv4]).unwrap(), vips);
        // Same name, fresh allocator: same hash-derived address.
        let mut b = VipAllocator::new(VipPools::default());
        assert_eq!(b.ensure(&key("web"), &[IPv6, IPv4]).unwrap(), vips);
    }

    #[test]
    fn distinct_and_skips_network_broadcast_and_cluster_addresses() {
        let mut a = VipAllocator::new(tiny_pools());
        // 243.0.0.0/30 has two usable addresses: .1 and .2.
        assert!(
            a.mark_cluster_address("243.0.0.1".parse().unwrap())
                .is_none()
        );
        let x = a.ensure(&key("x"), &[IPv4]).unwrap();
        assert_eq!(x, vec!["243.0.0.2".parse::<IpAddr>().unwrap()]);
        assert_eq!(
            a.ensure(&key("y"), &[IPv4]),
            Err(PoolExhausted {
                pool: "243.0.0.0/30".parse().unwrap()
            })
        );
        a.unmark_cluster_address("243.0.0.1".parse().unwrap());
        assert_eq!(
            a.ensure(&key("y"), &[IPv4]).unwrap(),
            vec!["243.0.0.1".parse::<IpAddr>().unwrap()]
        );
        // A cluster starting to use a VIP is reported, and the VIP stays.
        assert_eq!(a.mark_cluster_address(x[0]), Some(&key("x")));
        assert_eq!(a.ensure(&key("x"), &[IPv4]).unwrap(), x);
    }

    #[test]
    fn release_frees_and_dropped_family_is_released() {
        let mut a = VipAllocator::new(tiny_pools());
        let both = a.ensure(&key("x"), &[IPv4, IPv6]).unwrap();
        assert_eq!(a.allocated(IPv6), 1);
        // fd00::/126 has three usable addresses (all but the subnet-router anycast).
        assert_eq!(a.free(IPv6), 2);
        assert_eq!(a.ensure(&key("x"), &[IPv4]).unwrap(), vec![both[0]]);
        assert_eq!(a.allocated(IPv6), 0);
        a.release(&key("x"));
        assert_eq!(a.allocated(IPv4), 0);
        assert!(a.allocations().is_empty());
        assert!(a.take_dirty());
        assert!(!a.take_dirty());
    }

    #[test]
    fn restore_keeps_allocations_even_against_the_hash() {
        let mut a = VipAllocator::new(tiny_pools());
        let x = a.ensure(&key("x"), &[IPv4]).unwrap()[0];
        let y = a.ensure(&key("y"), &[IPv4]).unwrap()[0];
        let saved = a.allocations();
        // Restored in the other order, each keeps its own address.
        let mut b = VipAllocator::new(tiny_pools());
        let outside: IpAddr = "10.0.0.1".parse().unwrap();
        let mut input = saved.clone();
        input.reverse();
        input.push((key("z"), outside));
        assert_eq!(b.restore(input), vec![(key("z"), outside)]);
        assert!(
            b.take_dirty(),
            "a skipped entry makes the saved state stale"
        );
        let mut c = VipAllocator::new(tiny_pools());
        assert!(c.restore(saved.clone()).is_empty());
        assert!(!c.take_dirty(), "a clean restore has nothing to save");
        assert_eq!(b.ensure(&key("y"), &[IPv4]).unwrap(), vec![y]);
        assert_eq!(b.ensure(&key("x"), &[IPv4]).unwrap(), vec![x]);
        b.retain(|k| k.name().as_ref() == "x");
        assert_eq!(b.allocations(), vec![(key("x"), x)]);
    }
}
