//! Clusterset VIPs: stable across restarts of the real binary, released with
//! the last export, kept exactly even from a tiny pool.

use std::collections::BTreeSet;
use std::fs;
use std::net::IpAddr;

use hickory_proto::rr::RecordType::A;

use crate::common::*;

/// `(namespace/name, ip)` pairs of a VIP state file.
fn saved(path: &std::path::Path) -> BTreeSet<(String, String)> {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let state: serde_json::Value = serde_json::from_str(&text).expect("the state file is JSON");
    let entries = state["vips"].as_array().expect("a vips list");
    entries
        .iter()
        .map(|e| {
            let field = |k: &str| e[k].as_str().expect("a string").to_owned();
            (
                format!("{}/{}", field("namespace"), field("name")),
                field("ip"),
            )
        })
        .collect()
}

fn names_in(state: &BTreeSet<(String, String)>) -> BTreeSet<String> {
    state.iter().map(|(name, _)| name.clone()).collect()
}

fn exported(name: &str, ips: &[&str]) -> Vec<Doc> {
    cluster_ip("shop", name, ips).exported()
}

const SERVICES: [&str; 3] = ["web", "api", "cart"];

fn three_services() -> Clusterset {
    let cs = Clusterset::new();
    cs.write(
        "east",
        "web.yaml",
        &exported("web", &["10.96.0.1", "fd00:96::1"]),
    );
    cs.write(
        "east",
        "api.yaml",
        &exported("api", &["10.96.0.2", "fd00:96::2"]),
    );
    cs.write("west", "cart.yaml", &exported("cart", &["10.97.0.3"]));
    cs
}

/// The A and AAAA answers of `<name>.shop` for every name.
async fn answers(binary: &Binary, names: &[&str]) -> Vec<(Outcome, Outcome)> {
    let mut all = Vec::new();
    for name in names {
        all.push(resolve_both(binary.addr, &svc(&format!("{name}.shop"))).await);
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vips_survive_a_restart_with_or_without_the_state_file() {
    let cs = three_services();
    let first = answers(&spawn_binary(cs.dir(), &[]).await, &SERVICES).await;
    assert_eq!(first[2].1, Outcome::NoData, "cart is IPv4 only");
    let state = saved(&cs.state_file());
    assert_eq!(
        names_in(&state),
        ["shop/api", "shop/cart", "shop/web"]
            .map(String::from)
            .into()
    );
    assert_eq!(state.len(), 5, "two VIPs for web and api, one for cart");

    let restarted = answers(&spawn_binary(cs.dir(), &[]).await, &SERVICES).await;
    assert_eq!(restarted, first, "same VIPs from the state file");

    fs::remove_file(cs.state_file()).expect("state file removed");
    let fresh = answers(&spawn_binary(cs.dir(), &[]).await, &SERVICES).await;
    assert_eq!(fresh, first, "same VIPs derived from the names");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vip_is_released_after_the_last_export() {
    let cs = three_services();
    cs.write(
        "west",
        "web.yaml",
        &exported("web", &["10.97.0.1", "fd00:97::1"]),
    );
    let server = start(cs.dir(), &["--cluster-targeting"]).await;
    let web = svc("web.shop");
    let vip = resolve(server.addr, &web, A).await;
    let state = cs.state_file();

    cs.remove("east", "web.yaml");
    let east = svc("east.web.shop");
    eventually("east left web", Outcome::NxDomain, || {
        resolve(server.addr, &east, A)
    })
    .await;
    assert_eq!(
        resolve(server.addr, &web, A).await,
        vip,
        "the VIP stays while west exports"
    );
    cs.remove("west", "web.yaml");
    eventually("web is gone", Outcome::NxDomain, || {
        resolve(server.addr, &web, A)
    })
    .await;
    let expected: BTreeSet<String> = ["shop/api", "shop/cart"].map(String::from).into();
    eventually("web's VIPs are released", expected, || async {
        names_in(&saved(&state))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tiny_pool_keeps_both_vips_across_a_restart() {
    // `shop/a` and `shop/c` hash to the same address of the /30; `c` comes first.
    let cs = Clusterset::new();
    cs.write("east", "c.yaml", &exported("c", &["10.96.0.3"]));
    let pool = ["--vip-pool-v4", "243.0.0.0/30"];
    let c_alone = answers(&spawn_binary(cs.dir(), &pool).await, &["c"]).await;

    cs.write("east", "a.yaml", &exported("a", &["10.96.0.1"]));
    let both = answers(&spawn_binary(cs.dir(), &pool).await, &["a", "c"]).await;
    assert_eq!(both[1], c_alone[0], "c keeps its VIP when a joins");
    let given: BTreeSet<IpAddr> = both
        .iter()
        .flat_map(|(a, _)| addresses(a.clone()))
        .collect();
    let usable = ["243.0.0.1", "243.0.0.2"].map(|ip| ip.parse().expect("an IP"));
    assert_eq!(
        given,
        usable.into(),
        "the only two usable addresses of a /30"
    );

    let restarted = answers(&spawn_binary(cs.dir(), &pool).await, &["a", "c"]).await;
    assert_eq!(restarted, both, "each keeps its own VIP across a restart");
}
