//! What one cluster may publish for the others (ARCHITECTURE.md, "Trust
//! between clusters"): the rules a reader checks on every record another
//! cluster wrote on the broker, since a member's broker credentials can
//! write anything there. A record that breaks one is refused whole, with
//! the reason; the facts it gave before stay (the source's rule for any
//! object that cannot be read), so a rewrite cannot take a name away.

use std::net::IpAddr;

use ipnet::IpNet;

use super::ServiceKey;

/// Namespaces no cluster may export from (Lighthouse's protected namespaces,
/// CVE-2026-66788): the cluster's own machinery, whose names a pod resolves
/// and trusts.
pub(crate) const PROTECTED_NAMESPACES: [&str; 3] =
    ["kube-system", "kube-public", "kube-node-lease"];

/// The namespaces no cluster may export from: [`PROTECTED_NAMESPACES`] and
/// those of this deployment (Kubernetes mode; none in embedded mode, whose
/// manifests the operator wrote).
#[derive(Clone, Debug, Default)]
pub struct Protected(Vec<String>);

impl Protected {
    /// [`PROTECTED_NAMESPACES`] and `also` (the broker's namespace, this
    /// program's own).
    pub fn new(also: &[&str]) -> Self {
        let all = PROTECTED_NAMESPACES.iter().chain(also);
        Self(all.map(|ns| (*ns).to_owned()).collect())
    }

    /// Refuses a service in a protected namespace.
    pub fn refuses(&self, key: &ServiceKey) -> Result<(), String> {
        let namespace: &str = key.namespace();
        match self.0.iter().any(|p| p == namespace) {
            true => Err(format!("namespace {namespace} is protected")),
            false => Ok(()),
        }
    }
}

/// The rules, as configured.
#[derive(Clone, Debug)]
pub struct Trust {
    /// Where VIPs may come from.
    pools: Vec<IpNet>,
    /// Namespaces whose services no record may name.
    protected: Protected,
}

impl Trust {
    /// VIPs from `pools`, no service of a `protected` namespace.
    pub fn new(pools: Vec<IpNet>, protected: Protected) -> Self {
        Self { pools, protected }
    }

    /// Refuses a service in a protected namespace.
    pub fn namespace(&self, key: &ServiceKey) -> Result<(), String> {
        self.protected.refuses(key)
    }

    /// Refuses a VIP outside the configured pools.
    pub fn vip(&self, ip: IpAddr) -> Result<(), String> {
        match self.pools.iter().any(|pool| pool.contains(&ip)) {
            true => Ok(()),
            false => Err(format!("VIP {ip} is outside the VIP pools")),
        }
    }

    /// Refuses an address no cluster's Service or endpoint can have, which
    /// would send a client to itself or to no one in particular.
    pub fn address(&self, what: &str, ip: IpAddr) -> Result<(), String> {
        match unroutable(ip) {
            Some(kind) => Err(format!("{what} {ip} is {kind}")),
            None => Ok(()),
        }
    }
}

/// What kind of address `ip` is, if it is one no Service or endpoint of
/// another cluster can have: loopback (RFC 1122 §3.2.1.3, RFC 4291
/// §2.5.3), link-local (RFC 3927, RFC 4291 §2.5.6), multicast, unspecified
/// or the limited broadcast address. An IPv4-mapped IPv6 address counts as
/// the IPv4 address it maps.
pub(crate) fn unroutable(ip: IpAddr) -> Option<&'static str> {
    let ip = ip.to_canonical();
    let link_local = match ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => v6.is_unicast_link_local(),
    };
    let broadcast = matches!(ip, IpAddr::V4(v4) if v4.is_broadcast());
    [
        (ip.is_loopback(), "loopback"),
        (link_local, "link-local"),
        (ip.is_multicast(), "multicast"),
        (ip.is_unspecified(), "unspecified"),
        (broadcast, "the broadcast address"),
    ]
    .into_iter()
    .find_map(|(is, kind)| is.then_some(kind))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn unroutable_addresses_are_named() {
        for (addr, kind) in [
            ("127.0.0.1", "loopback"),
            ("127.8.9.10", "loopback"),
            ("::1", "loopback"),
            ("::ffff:127.0.0.1", "loopback"),
            ("169.254.169.254", "link-local"),
            ("fe80::1", "link-local"),
            ("224.0.0.251", "multicast"),
            ("ff02::1", "multicast"),
            ("0.0.0.0", "unspecified"),
            ("::", "unspecified"),
            ("255.255.255.255", "the broadcast address"),
        ] {
            assert_eq!(unroutable(ip(addr)), Some(kind), "{addr}");
        }
        for addr in [
            "10.0.0.1",
            "192.168.1.1",
            "243.0.0.1",
            "fd00::1",
            "2001:db8::1",
            "100.64.0.1",
        ] {
            assert_eq!(unroutable(ip(addr)), None, "{addr}");
        }
    }

    #[test]
    fn protected_namespaces_and_pools_refuse_with_the_reason() {
        let trust = Trust::new(
            vec![
                "243.0.0.0/8".parse().unwrap(),
                "fd00:c5e7::/48".parse().unwrap(),
            ],
            Protected::new(&["clusterset-broker"]),
        );
        assert!(trust.namespace(&ServiceKey::new("shop", "web")).is_ok());
        for ns in [
            "kube-system",
            "kube-public",
            "kube-node-lease",
            "clusterset-broker",
        ] {
            let refused = trust.namespace(&ServiceKey::new(ns, "web")).unwrap_err();
            assert_eq!(refused, format!("namespace {ns} is protected"));
        }
        assert!(trust.vip(ip("243.1.2.3")).is_ok() && trust.vip(ip("fd00:c5e7::9")).is_ok());
        assert_eq!(
            trust.vip(ip("10.96.0.10")).unwrap_err(),
            "VIP 10.96.0.10 is outside the VIP pools"
        );
        assert_eq!(
            trust.address("endpoint", ip("127.0.0.1")).unwrap_err(),
            "endpoint 127.0.0.1 is loopback"
        );
    }
}
