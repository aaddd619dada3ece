//! What one cluster may publish for the others (ARCHITECTURE.md, "Trust
//! between clusters"): the rules a reader checks on every record another
//! cluster wrote on the broker, since a member's broker credentials can
//! write anything there. A record that breaks one is refused whole, with
//! the reason; the facts it gave before stay (the source's rule for any
//! object that cannot be read), so a rewrite cannot take a name away.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use ipnet::IpNet;

use super::{ClusterId, ServiceKey, is_dns_label, is_valid_cluster_id};

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

/// What the operator declared of each cluster (`--cluster-namespaces`,
/// `--cluster-cidrs`; issue 46, item 3): the namespaces it may export from
/// and the networks its ClusterIPs and endpoints lie in. A cluster with no
/// entry of a kind is held to none of it.
#[derive(Clone, Debug, Default)]
pub struct Declared {
    /// The namespaces each listed cluster may export from.
    namespaces: BTreeMap<ClusterId, BTreeSet<String>>,
    /// The networks each listed cluster's addresses lie in.
    cidrs: BTreeMap<ClusterId, Vec<IpNet>>,
}

impl Declared {
    /// The allow-lists `namespaces` and the networks `cidrs`, entries of
    /// one cluster joined.
    pub fn new(
        namespaces: impl IntoIterator<Item = (ClusterId, String)>,
        cidrs: impl IntoIterator<Item = (ClusterId, IpNet)>,
    ) -> Self {
        let mut declared = Self::default();
        for (cluster, namespace) in namespaces {
            declared
                .namespaces
                .entry(cluster)
                .or_default()
                .insert(namespace);
        }
        for (cluster, cidr) in cidrs {
            declared.cidrs.entry(cluster).or_default().push(cidr);
        }
        declared
    }

    /// Refuses an export of `cluster` from a namespace outside its allow-list.
    pub fn namespace(&self, cluster: &str, key: &ServiceKey) -> Result<(), String> {
        let namespace: &str = key.namespace();
        match self.namespaces.get(cluster) {
            Some(allowed) if !allowed.contains(namespace) => Err(format!(
                "namespace {namespace} is not among cluster {cluster}'s namespaces"
            )),
            _ => Ok(()),
        }
    }

    /// Refuses an address of `cluster` outside its declared networks (an
    /// IPv4-mapped IPv6 address counts as the IPv4 address it maps).
    pub fn address(&self, cluster: &str, what: &str, ip: IpAddr) -> Result<(), String> {
        let canonical = ip.to_canonical();
        match self.cidrs.get(cluster) {
            Some(nets) if !nets.iter().any(|net| net.contains(&canonical)) => {
                Err(format!("{what} {ip} is outside cluster {cluster}'s CIDRs"))
            }
            _ => Ok(()),
        }
    }
}

/// `CLUSTER=NAMESPACE`, one entry of `--cluster-namespaces`.
pub(crate) fn parse_cluster_namespace(text: &str) -> Result<(ClusterId, String), String> {
    let (cluster, namespace) = split_cluster(text, "NAMESPACE")?;
    match is_dns_label(namespace) {
        true => Ok((cluster, namespace.to_owned())),
        false => Err(format!(
            "{namespace:?} is not a namespace (an RFC 1123 label)"
        )),
    }
}

/// `CLUSTER=CIDR`, one entry of `--cluster-cidrs`.
pub(crate) fn parse_cluster_cidr(text: &str) -> Result<(ClusterId, IpNet), String> {
    let (cluster, cidr) = split_cluster(text, "CIDR")?;
    let net: IpNet = cidr
        .parse()
        .map_err(|_| format!("{cidr:?} is not an address prefix such as 10.1.0.0/16"))?;
    Ok((cluster, net.trunc()))
}

/// The cluster id and the value of `CLUSTER=VALUE`.
fn split_cluster<'a>(text: &'a str, value: &str) -> Result<(ClusterId, &'a str), String> {
    let Some((cluster, rest)) = text.split_once('=') else {
        return Err(format!("{text:?} is not CLUSTER={value}"));
    };
    match is_valid_cluster_id(cluster) {
        true => Ok((cluster.into(), rest)),
        false => Err(format!(
            "{cluster:?} is not a cluster id (an RFC 1123 name of one or two labels)"
        )),
    }
}

/// The rules, as configured.
#[derive(Clone, Debug)]
pub struct Trust {
    /// Where VIPs may come from.
    pools: Vec<IpNet>,
    /// Namespaces whose services no record may name.
    protected: Protected,
    /// What each cluster may export from and which addresses it may have.
    declared: Declared,
}

impl Trust {
    /// VIPs from `pools`, no service of a `protected` namespace, each
    /// cluster held to what is `declared` of it.
    pub fn new(pools: Vec<IpNet>, protected: Protected, declared: Declared) -> Self {
        Self {
            pools,
            protected,
            declared,
        }
    }

    /// Refuses a service in a protected namespace.
    pub fn namespace(&self, key: &ServiceKey) -> Result<(), String> {
        self.protected.refuses(key)
    }

    /// Refuses an export of `cluster` from a protected namespace or one
    /// outside the cluster's allow-list.
    pub fn export(&self, cluster: &str, key: &ServiceKey) -> Result<(), String> {
        self.protected.refuses(key)?;
        self.declared.namespace(cluster, key)
    }

    /// Refuses a VIP record's addresses where one is outside the configured
    /// pools, or two are of one family: a service has one VIP per family,
    /// and readers keep the last of each, so a second would move it.
    pub fn vips(&self, vips: &[IpAddr]) -> Result<(), String> {
        for (i, ip) in vips.iter().enumerate() {
            if !self.pools.iter().any(|pool| pool.contains(ip)) {
                return Err(format!("VIP {ip} is outside the VIP pools"));
            }
            let family = |ip: &IpAddr| ip.is_ipv4();
            if let Some(first) = vips[..i].iter().find(|o| family(o) == family(ip)) {
                return Err(format!("VIPs {first} and {ip} are of one family"));
            }
        }
        Ok(())
    }

    /// Refuses an address of `cluster` no cluster's Service or endpoint can
    /// have, which would send a client to itself or to no one in
    /// particular, or one outside the cluster's declared CIDRs.
    pub fn address(&self, cluster: &str, what: &str, ip: IpAddr) -> Result<(), String> {
        if let Some(kind) = unroutable(ip) {
            return Err(format!("{what} {ip} is {kind}"));
        }
        self.declared.address(cluster, what, ip)
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
            Declared::default(),
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
        assert!(trust.vips(&[ip("243.1.2.3"), ip("fd00:c5e7::9")]).is_ok());
        assert_eq!(
            trust.vips(&[ip("10.96.0.10")]).unwrap_err(),
            "VIP 10.96.0.10 is outside the VIP pools"
        );
        // A second address of a family would move the VIP (readers keep
        // the last), however it got past the broker's policy.
        assert_eq!(
            trust
                .vips(&[ip("243.1.2.3"), ip("243.66.6.9")])
                .unwrap_err(),
            "VIPs 243.1.2.3 and 243.66.6.9 are of one family"
        );
        assert_eq!(
            trust
                .address("east", "endpoint", ip("127.0.0.1"))
                .unwrap_err(),
            "endpoint 127.0.0.1 is loopback"
        );
    }

    fn declared() -> Declared {
        let namespaces = ["east=shop", "east=web", "west=shop"].map(parse_cluster_namespace);
        let cidrs = ["east=10.1.0.0/16", "east=fd00:1::/64"].map(parse_cluster_cidr);
        Declared::new(
            namespaces.into_iter().map(Result::unwrap),
            cidrs.into_iter().map(Result::unwrap),
        )
    }

    /// Issue 46, item 3: an allow-list of namespaces per cluster (as
    /// Lighthouse's namespace restrictions), checked for the cluster the
    /// record comes from; a cluster without one may use any namespace.
    #[test]
    fn each_cluster_exports_only_from_its_declared_namespaces() {
        let declared = declared();
        let shop = ServiceKey::new("shop", "web");
        let payroll = ServiceKey::new("payroll", "api");
        assert!(declared.namespace("east", &shop).is_ok());
        assert!(declared.namespace("west", &shop).is_ok());
        assert_eq!(
            declared.namespace("west", &ServiceKey::new("web", "a")),
            Err("namespace web is not among cluster west's namespaces".into())
        );
        assert!(declared.namespace("east", &payroll).is_err());
        assert!(declared.namespace("north", &payroll).is_ok(), "no list");
        let trust = Trust::new(Vec::new(), Protected::new(&[]), declared);
        assert!(trust.export("north", &payroll).is_ok());
        assert!(
            trust
                .export("north", &ServiceKey::new("kube-system", "dns"))
                .unwrap_err()
                .contains("protected"),
            "protected namespaces stay protected without a list"
        );
    }

    /// Issue 46, item 3: "addresses outside a cluster's declared CIDRs are
    /// refused per record"; a cluster without CIDRs may use any routable
    /// address, and an IPv4-mapped address counts as the IPv4 one.
    #[test]
    fn each_clusters_addresses_lie_in_its_declared_cidrs() {
        let trust = Trust::new(Vec::new(), Protected::new(&[]), declared());
        for ok in ["10.1.2.3", "fd00:1::9", "::ffff:10.1.0.1"] {
            assert!(trust.address("east", "endpoint", ip(ok)).is_ok(), "{ok}");
        }
        assert_eq!(
            trust.address("east", "ClusterIP", ip("10.2.0.1")),
            Err("ClusterIP 10.2.0.1 is outside cluster east's CIDRs".into())
        );
        assert!(trust.address("east", "endpoint", ip("fd00:2::1")).is_err());
        assert!(trust.address("west", "endpoint", ip("10.9.9.9")).is_ok());
        assert_eq!(
            trust.address("west", "endpoint", ip("127.0.0.1")),
            Err("endpoint 127.0.0.1 is loopback".into()),
            "unroutable addresses are refused whatever is declared"
        );
    }

    #[test]
    fn per_cluster_entries_are_parsed_with_the_reason() {
        assert_eq!(
            parse_cluster_cidr("c-1.prod=10.1.2.3/16"),
            Ok(("c-1.prod".into(), "10.1.0.0/16".parse().unwrap()))
        );
        assert_eq!(
            parse_cluster_namespace("shop"),
            Err("\"shop\" is not CLUSTER=NAMESPACE".into())
        );
        assert!(
            parse_cluster_namespace("East=shop")
                .unwrap_err()
                .contains("not a cluster id")
        );
        assert!(
            parse_cluster_namespace("east=Shop")
                .unwrap_err()
                .contains("not a namespace")
        );
        assert!(
            parse_cluster_cidr("east=10.1.0.0/33")
                .unwrap_err()
                .contains("not an address prefix")
        );
    }
}
