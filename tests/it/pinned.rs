//! Values that must never change from one version to the next, written as
//! literals (computed once with the code of the time): the stable hash
//! places every VIP and names the broker's slices, so a change would move
//! the VIP of every service whose state file or broker claim is lost, and
//! orphan every slice a member published on the broker.

use clusterset_dns::engine::vip::{VipAllocator, VipPools};
use clusterset_dns::k8s::records::{
    broker_slice_name, export_record_name, mirror_slice_name, vip_record_name,
};
use clusterset_dns::model::{IpFamily, ServiceKey, stable_hash};

/// FNV-1a (64 bits) over the bytes.
#[test]
fn the_stable_hash_is_fnv1a_and_fixed() {
    assert_eq!(
        stable_hash([]),
        0xcbf2_9ce4_8422_2325,
        "FNV-1a's offset basis"
    );
    assert_eq!(
        stable_hash(*b"a"),
        0xaf63_dc4c_8601_ec8c,
        "FNV-1a's test vector for \"a\""
    );
    assert_eq!(stable_hash(*b"shop/web/IPv4"), 0xdfab_94b6_1f6f_96ea);
    assert_eq!(stable_hash(*b"clusterset.local"), 0xfccc_efa4_814e_204e);
}

/// The first VIP each service is offered from the default pools
/// (243.0.0.0/8, fd00:c5e7::/48); README's demo shows some of them.
#[test]
fn the_first_vip_candidates_are_fixed() {
    let vips = VipAllocator::new(VipPools::default());
    let first = |namespace: &str, name: &str, family| {
        vips.candidates(&ServiceKey::new(namespace, name), family)
            .next()
            .expect("a candidate")
            .to_string()
    };
    assert_eq!(first("shop", "web", IpFamily::IPv4), "243.156.129.215");
    assert_eq!(first("shop", "cart", IpFamily::IPv4), "243.255.202.245");
    assert_eq!(first("shop", "api", IpFamily::IPv4), "243.182.215.167");
    assert_eq!(
        first("shop", "api", IpFamily::IPv6),
        "fd00:c5e7::a168:3c82:8f3f:504f"
    );
    assert_eq!(
        first("default", "kubernetes", IpFamily::IPv6),
        "fd00:c5e7::d49b:776:8ef2:8a92"
    );
}

/// The names of the objects each member keeps on the broker.
#[test]
fn the_broker_record_names_are_fixed() {
    let web = ServiceKey::new("shop", "web");
    assert_eq!(export_record_name(&web, "east"), "web.shop.east");
    assert_eq!(vip_record_name(&web), "web.shop");
    assert_eq!(
        broker_slice_name(&web, "east", "web-abcde"),
        "web-shop-97c7b4c4e9834bac"
    );
    assert_eq!(
        mirror_slice_name(&web, "east", "web-abcde"),
        "web-east-fbf4f27b23129610"
    );
}
