//! Reverse zones (RFC 1035 §3.5 `in-addr.arpa`, RFC 3596 §2.5 `ip6.arpa`):
//! PTR records for the addresses the zone hands out. A ClusterSetIP
//! service's addresses point at `<svc>.<ns>.svc.<zone>`, a headless
//! endpoint's at its per-pod name. Kept per service as the index is updated,
//! in an ordered map, so a name above full addresses (an empty non-terminal)
//! and a zone transfer are both a range of it.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::ops::RangeInclusive;
use std::sync::RwLock;

use hickory_proto::rr::{LowerName, Name};
use ipnet::{IpNet, Ipv4Net, Ipv6Net};

use super::names::{Lookup, Owner, ReverseOwner};
use super::records::{local_endpoints, pod_name};
use crate::model::ImportType;
use crate::model::import::Import;

/// A reverse zone served: its apex and the addresses below it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReverseZone {
    pub(super) apex: Name,
    lower: LowerName,
    net: IpNet,
}

impl ReverseZone {
    /// A zone named like `243.in-addr.arpa` or `c.f.ip6.arpa` (whole labels:
    /// octets, nibbles).
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut apex =
            Name::from_ascii(text).map_err(|e| format!("invalid reverse zone {text:?}: {e}"))?;
        apex.set_fqdn(true);
        let net = apex.parse_arpa_name().map_err(|e| {
            format!("{text:?} is not a reverse zone such as 243.in-addr.arpa or c.f.ip6.arpa: {e}")
        })?;
        let zone = Self::covering(net);
        if zone.apex != apex.to_lowercase() {
            return Err(format!(
                "{text:?} is not a reverse zone: labels must be octets or nibbles, as in {}",
                zone.apex
            ));
        }
        Ok(zone)
    }

    /// The smallest zone with whole labels (octets for IPv4, nibbles for
    /// IPv6) that holds `net`, e.g. `243.in-addr.arpa` for 243.0.0.0/12.
    pub fn covering(net: IpNet) -> Self {
        let net = match net.trunc() {
            IpNet::V4(v4) => IpNet::V4(
                Ipv4Net::new(v4.network(), v4.prefix_len() / 8 * 8).expect("shorter prefix"),
            ),
            IpNet::V6(v6) => IpNet::V6(
                Ipv6Net::new(v6.network(), v6.prefix_len() / 4 * 4).expect("shorter prefix"),
            ),
        }
        .trunc();
        let full = Name::from(net.network());
        let below = match net {
            IpNet::V4(v4) => 4 - v4.prefix_len() / 8,
            IpNet::V6(v6) => 32 - v6.prefix_len() / 4,
        };
        let apex = full.trim_to(usize::from(full.num_labels() - below));
        Self {
            lower: LowerName::new(&apex),
            apex,
            net,
        }
    }

    /// The zone apex.
    pub fn apex(&self) -> &Name {
        &self.apex
    }

    pub(super) fn addresses(&self) -> RangeInclusive<IpAddr> {
        self.net.network()..=self.net.broadcast()
    }
}

impl std::fmt::Display for ReverseZone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.apex.fmt(f)
    }
}

/// The reverse zones served and the names of each address in them.
#[derive(Debug, Default)]
pub(super) struct ReverseMap {
    pub(super) zones: Vec<ReverseZone>,
    pub(super) pointers: RwLock<BTreeMap<IpAddr, Vec<Name>>>,
}

impl ReverseMap {
    /// A map serving `zones` (none: reverse lookups are off and cost nothing).
    pub(super) fn new(zones: Vec<ReverseZone>) -> Self {
        Self {
            zones,
            pointers: RwLock::default(),
        }
    }

    /// The zones served.
    pub(super) fn zones(&self) -> &[ReverseZone] {
        &self.zones
    }

    /// The zone `name` lies in (its index), if any.
    pub(super) fn zone_of(&self, name: &LowerName) -> Option<usize> {
        self.zones.iter().position(|z| z.lower.zone_of(name))
    }

    /// Replaces the addresses of the service named `service`: those of
    /// `old` go, those of `new` come.
    pub(super) fn update(&self, service: &Name, old: Option<&Import>, new: Option<&Import>) {
        if self.zones.is_empty() {
            return;
        }
        let mut pointers = self.pointers.write().unwrap_or_else(|e| e.into_inner());
        for (ip, name) in old.into_iter().flat_map(|i| self.names(i, service)) {
            if let Some(names) = pointers.get_mut(&ip) {
                names.retain(|n| *n != name);
                if names.is_empty() {
                    pointers.remove(&ip);
                }
            }
        }
        for (ip, name) in new.into_iter().flat_map(|i| self.names(i, service)) {
            let names = pointers.entry(ip).or_default();
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }

    /// (address, name) of every address of `import` inside a served zone:
    /// the addresses its service name answers, named after the service
    /// (ClusterSetIP) or the endpoint's per-pod name (headless).
    fn names(&self, import: &Import, service: &Name) -> Vec<(IpAddr, Name)> {
        let served = |ip: &IpAddr| self.zones.iter().any(|z| z.net.contains(ip));
        match import.type_ {
            ImportType::ClusterSetIP => import
                .addresses
                .iter()
                .filter(|ip| import.serves(ip) && served(ip))
                .map(|ip| (*ip, service.clone()))
                .collect(),
            ImportType::Headless => local_endpoints(import, None)
                .filter(|(_, ip, _)| served(ip))
                .filter_map(|(cluster, ip, host)| Some((ip, pod_name(service, cluster, ip, host)?)))
                .collect(),
        }
    }

    /// Resolves a name (`NotInZone` outside every reverse zone).
    pub(super) fn lookup(&self, name: &LowerName) -> Lookup {
        let Some(zone) = self.zone_of(name) else {
            return Lookup::NotInZone;
        };
        if *name == self.zones[zone].lower {
            return Lookup::Found(Owner::Reverse(ReverseOwner::Apex(zone)));
        }
        let name = Name::from(name);
        let Ok(net) = name.parse_arpa_name() else {
            return Lookup::NxDomain;
        };
        let pointers = self.pointers.read().unwrap_or_else(|e| e.into_inner());
        let owner = if net.prefix_len() == net.max_prefix_len() {
            // Only the canonical spelling (no leading zeros) names an address.
            let names = pointers
                .get(&net.addr())
                .filter(|_| Name::from(net.addr()) == name);
            names.map(|n| ReverseOwner::Pointers(n.clone()))
        } else {
            let mut below = pointers.range(net.network()..=net.broadcast());
            below.next().map(|_| ReverseOwner::Empty)
        };
        owner.map_or(Lookup::NxDomain, |o| Lookup::Found(Owner::Reverse(o)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zones_parse_from_whole_labels_only() {
        let v4 = ReverseZone::parse("243.IN-ADDR.arpa").unwrap();
        assert_eq!(v4.apex().to_string(), "243.in-addr.arpa.");
        assert_eq!(v4.net, "243.0.0.0/8".parse().unwrap());
        let v6 = ReverseZone::parse("7.e.5.c.0.0.d.f.ip6.arpa.").unwrap();
        assert_eq!(v6.net, "fd00:c5e7::/32".parse().unwrap());
        for bad in [
            "example.org",
            "256.in-addr.arpa",
            "01.in-addr.arpa",
            "ab.ip6.arpa",
        ] {
            assert!(ReverseZone::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn pools_round_down_to_whole_labels() {
        let zone = |net: &str| {
            ReverseZone::covering(net.parse().unwrap())
                .apex()
                .to_string()
        };
        assert_eq!(zone("243.0.0.0/8"), "243.in-addr.arpa.");
        assert_eq!(zone("243.16.0.0/12"), "243.in-addr.arpa.");
        assert_eq!(zone("10.96.0.0/16"), "96.10.in-addr.arpa.");
        assert_eq!(zone("fd00:c5e7::/48"), "0.0.0.0.7.e.5.c.0.0.d.f.ip6.arpa.");
        assert_eq!(zone("fd00:c5e7::/46"), "0.0.0.7.e.5.c.0.0.d.f.ip6.arpa.");
    }
}
