//! Clusters that die or come back, and a broker that loses its state, in
//! Kubernetes mode (three members and a broker, each a fake API server spoken
//! to by the real kube client): a member whose heartbeat stops is dropped
//! from every other member's answers and returns by itself; a wiped broker is
//! rebuilt with the same VIPs.

mod common;
#[path = "support/fake_apiserver/mod.rs"]
mod fake_apiserver;
#[path = "support/kube_clusterset.rs"]
mod kube_clusterset;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use clusterset_dns::engine::vip::{VipAllocator, VipPools};
use clusterset_dns::model::{IpFamily, ServiceKey};
use common::*;
use hickory_proto::rr::RecordType;
use kube_clusterset::*;
use serde_json::json;

const DB: &str = "db.shop.svc.clusterset.local.";
const WEB: &str = "web.shop.svc.clusterset.local.";

/// Three IPv4 members with the namespace `shop`, judging heartbeats after 3 s.
async fn three() -> KubeClusterset {
    let members = [("east", "IPv4"), ("north", "IPv4"), ("west", "IPv4")];
    let set = KubeClusterset::start_with(&members, &["--cluster-timeout", "3"]).await;
    for member in &set.members {
        member.api.create_namespace("shop");
    }
    set
}

/// East and west export a headless `db` (one pod each) and a ClusterIP `web`.
fn export_db_and_web(set: &KubeClusterset) {
    for (id, n) in [("east", 1), ("west", 3)] {
        set.apply(id, headless("shop", "db", &["IPv4"]).exported());
        let pod = format!("10.{n}.0.40");
        set.apply(id, [slice("shop", &format!("db-{id}"), "db", &[ep(&pod)])]);
        let address = format!("10.{n}.0.10");
        set.apply(id, cluster_ip("shop", "web", &[&address]).exported());
    }
}

/// Polls `id` until `name` resolves to `expected`; how long that took.
async fn until_answered(set: &KubeClusterset, id: &str, name: &str, expected: Outcome) -> Duration {
    let start = Instant::now();
    eventually_within(CONVERGE, &format!("A {name} from {id}"), expected, || {
        set.resolve(id, name, RecordType::A)
    })
    .await;
    start.elapsed()
}

/// `clusterset_dns_cluster_live{cluster}` as a member's first replica sees it.
async fn live(set: &KubeClusterset, id: &str, cluster: &str) -> f64 {
    let ops = set.member(id).servers[0].running().metrics_addr;
    scrape(
        ops,
        &format!("clusterset_dns_cluster_live{{cluster=\"{cluster}\"}}"),
    )
    .await
}

/// Whether a member has MCS EndpointSlices of `db` from west.
fn from_west(set: &KubeClusterset, id: &str) -> bool {
    let slices = set.mcs_slices(id, "shop", "db");
    slices.iter().any(|(source, _)| source == "west")
}

/// `(status, message)` of the `Ready` condition of a member's ServiceImport.
fn import_ready(set: &KubeClusterset, id: &str, name: &str) -> (String, String) {
    let import = set.import(id, "shop", name).expect("the ServiceImport");
    let conditions = import.status.map(|s| s.conditions).unwrap_or_default();
    let ready = conditions
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .expect("Ready");
    (ready.status, ready.message)
}

/// A member that stops (its process killed: nothing released, nothing
/// deleted) leaves every other member's DNS answers, mirrored EndpointSlices
/// and `ServiceImport.status.clusters` once its heartbeat is older than
/// `--cluster-timeout`, and comes back with no operator action when it
/// restarts; the VIP never changes (KEP-1645: the VIP is stable while any
/// cluster exports). Prints how long both took.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_cluster_leaves_every_answer_and_returns_with_its_heartbeat() {
    let mut set = three().await;
    export_db_and_web(&set);
    let both = ips(["10.1.0.40", "10.3.0.40"]);
    for id in ["east", "north", "west"] {
        until_answered(&set, id, DB, both.clone()).await;
    }
    eventually_within(CONVERGE, "north answers web's VIP", true, || async {
        is_vip(&set.resolve("north", WEB, RecordType::A).await)
    })
    .await;
    let vip = set.resolve("north", WEB, RecordType::A).await;
    eventually_within(CONVERGE, "north sees west's heartbeat", 1.0, || {
        live(&set, "north", "west")
    })
    .await;

    set.kill_replica(2, 0);
    let killed = Instant::now();
    for id in ["east", "north"] {
        until_answered(&set, id, DB, ips(["10.1.0.40"])).await;
        println!(
            "west killed: its endpoints left {id}'s answers after {:.1?} (--cluster-timeout 3)",
            killed.elapsed()
        );
    }
    for id in ["east", "north"] {
        assert_eq!(
            set.resolve(id, WEB, RecordType::A).await,
            vip,
            "{id} keeps the VIP"
        );
        eventually_within(CONVERGE, &format!("{id} sees west dead"), 0.0, || {
            live(&set, id, "west")
        })
        .await;
        eventually_within(
            CONVERGE,
            &format!("{id} mirrors nothing of west"),
            false,
            || async { from_west(&set, id) },
        )
        .await;
        eventually_within(
            CONVERGE,
            &format!("{id}: db backed by east only"),
            vec!["east".to_owned()],
            || async { status_clusters(&set.import(id, "shop", "db").unwrap()) },
        )
        .await;
        let (status, message) = import_ready(&set, id, "db");
        assert_eq!(status, "True", "east still backs db");
        assert!(
            message.contains("west"),
            "Ready names the dead cluster: {message}"
        );
    }
    let records: BTreeSet<String> = set
        .broker_objects("multicluster.x-k8s.io", "serviceimports")
        .iter()
        .map(|r| r["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        records.contains("db.shop.west") && records.contains("web.shop.west"),
        "nothing of west is deleted: {records:?}"
    );

    let restarted = Instant::now();
    set.add_replica(2).await;
    println!("west restarted: synced after {:.1?}", restarted.elapsed());
    for id in ["east", "north", "west"] {
        until_answered(&set, id, DB, both.clone()).await;
        println!(
            "west restarted: its endpoints were back in {id}'s answers after {:.1?}",
            restarted.elapsed()
        );
    }
    for id in ["east", "north"] {
        eventually_within(CONVERGE, &format!("{id} sees west live"), 1.0, || {
            live(&set, id, "west")
        })
        .await;
        assert_eq!(
            set.resolve(id, WEB, RecordType::A).await,
            vip,
            "{id} keeps the VIP"
        );
        eventually_within(
            CONVERGE,
            &format!("{id}: db backed by both"),
            vec!["east".to_owned(), "west".to_owned()],
            || async { status_clusters(&set.import(id, "shop", "db").unwrap()) },
        )
        .await;
        eventually_within(
            CONVERGE,
            &format!("{id} mirrors west again"),
            true,
            || async { from_west(&set, id) },
        )
        .await;
        assert_eq!(
            import_ready(&set, id, "db"),
            ("True".to_owned(), String::new())
        );
    }
}

/// Every cluster dead but the VIP stays: with no live cluster left the
/// import is `Ready=False` with the MCS API's reason `Pending` (it waits
/// for a cluster to return) and a headless name has
/// no addresses (as when no endpoint is ready), until a heartbeat resumes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_every_exporter_is_dead_the_import_is_not_ready() {
    let mut set = three().await;
    set.apply("west", headless("shop", "db", &["IPv4"]).exported());
    set.apply("west", [slice("shop", "db-west", "db", &[ep("10.3.0.40")])]);
    until_answered(&set, "north", DB, ips(["10.3.0.40"])).await;
    set.kill_replica(2, 0);
    eventually_within(CONVERGE, "north has no address for db", true, || async {
        let outcome = set.resolve("north", DB, RecordType::A).await;
        matches!(outcome, Outcome::NoData | Outcome::NxDomain)
    })
    .await;
    eventually_within(
        CONVERGE,
        "north: db not ready, pending",
        ("False".to_owned(), "Pending".to_owned()),
        || async {
            let import = set
                .import("north", "shop", "db")
                .expect("the ServiceImport");
            let conditions = import.status.map(|s| s.conditions).unwrap_or_default();
            let ready = conditions.into_iter().find(|c| c.type_ == "Ready");
            ready.map(|c| (c.status, c.reason)).unwrap_or_default()
        },
    )
    .await;
    assert!(import_ready(&set, "north", "db").1.contains("west"));
    assert!(status_clusters(&set.import("north", "shop", "db").unwrap()).is_empty());
    set.add_replica(2).await;
    until_answered(&set, "north", DB, ips(["10.3.0.40"])).await;
}

/// The broker loses everything (namespace wiped, or restored from a backup
/// older than the services): every member re-publishes its exports at once
/// (well within one 60 s resync), and the VIPs stay the same in every
/// member's ServiceImport and DNS answers, since each member re-claims the
/// VIPs its ServiceImport carries first (KEP-1645: a VIP is stable for the
/// import's life), even one that is not the service's first candidate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_broker_is_rebuilt_with_the_same_vips() {
    let set = three().await;
    // web's first candidate is claimed by another service, so web holds its
    // second: re-allocating after the wipe would pick the first.
    let first = VipAllocator::new(VipPools::default())
        .candidates(&ServiceKey::new("shop", "web"), IpFamily::IPv4)
        .next()
        .unwrap();
    let claim = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {
            "name": format!("clusterset-vip-{}", first.to_string().replace('.', "-")),
            "namespace": BROKER_NAMESPACE,
            "labels": {"clusterset-dns.io/vip-claim": "true"},
        },
        "data": {"address": first.to_string(), "service": "shop/elsewhere"},
    });
    set.broker.put_raw(claim).unwrap();
    export_db_and_web(&set);
    set.apply(
        "north",
        cluster_ip("shop", "api", &["10.2.0.11"]).exported(),
    );
    let names = ["web", "api"];
    let mut vips = Vec::new();
    for name in names {
        eventually_within(
            CONVERGE,
            &format!("{name} has its VIP in every member"),
            true,
            || async {
                ["east", "north", "west"].iter().all(|id| {
                    set.import(id, "shop", name)
                        .is_some_and(|i| i.spec.ips.len() == 1)
                })
            },
        )
        .await;
        vips.push(import_ips(&set.import("east", "shop", name).unwrap()));
    }
    let records = set
        .broker_objects("multicluster.x-k8s.io", "serviceimports")
        .len();
    let slices = set
        .broker_objects("discovery.k8s.io", "endpointslices")
        .len();
    assert_ne!(vips[0], [first], "web holds its second candidate");
    let mut claims = set.claims();
    claims.remove(&(first.to_string(), "shop/elsewhere".to_owned()));

    let wiped = Instant::now();
    set.wipe_broker();
    // Every member's ServiceImports keep their VIPs throughout.
    let mut seen: BTreeSet<(String, &str, Vec<std::net::IpAddr>)> = BTreeSet::new();
    loop {
        for id in ["east", "north", "west"] {
            for name in names {
                if let Some(import) = set.import(id, "shop", name) {
                    seen.insert((id.to_owned(), name, import_ips(&import)));
                }
            }
        }
        let rebuilt = set
            .broker_objects("multicluster.x-k8s.io", "serviceimports")
            .len()
            == records
            && set
                .broker_objects("discovery.k8s.io", "endpointslices")
                .len()
                == slices
            && set.claims() == claims;
        if rebuilt {
            break;
        }
        assert!(
            wiped.elapsed() < CONVERGE,
            "broker not rebuilt: claims {:?}",
            set.claims()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!("broker wiped: rebuilt after {:.1?}", wiped.elapsed());
    for (name, vip) in names.iter().zip(&vips) {
        for id in ["east", "north", "west"] {
            // An import backed only by other clusters may go for the moment
            // their records are missing; it comes back with the same VIP.
            eventually_within(
                CONVERGE,
                &format!("{id}: {name} keeps its VIP"),
                Some(vip.clone()),
                || async { set.import(id, "shop", name).map(|i| import_ips(&i)) },
            )
            .await;
            let fqdn = format!("{name}.shop.svc.clusterset.local.");
            until_answered(&set, id, &fqdn, Outcome::Ips(vip.iter().copied().collect())).await;
        }
        let other = seen.iter().find(|(_, n, ips)| n == name && ips != vip);
        assert_eq!(other, None, "no ServiceImport ever carried another VIP");
    }
    until_answered(&set, "north", DB, ips(["10.1.0.40", "10.3.0.40"])).await;
}
