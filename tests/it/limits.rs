//! Issue 46, item 4 ("Limits"), end to end in Kubernetes mode: a cluster
//! that floods the clusterset with exports, through its own ServiceExports
//! or through records written with broker credentials (here the fake
//! broker's back door), is held to its caps by every member, the same
//! services kept everywhere, and no other cluster's answer changes; each
//! cap reached is a condition and a metric, never a crash.

use hickory_proto::rr::RecordType;
use serde_json::json;
use test_support::kube_clusterset::*;

use crate::common::*;

const WEB: &str = "web.shop.svc.clusterset.local.";
const DB: &str = "db.shop.svc.clusterset.local.";
const API: &str = "api.shop.svc.clusterset.local.";
const RECORDS: (&str, &str) = ("multicluster.x-k8s.io", "serviceimports");

/// Waits until `limit`'s gauge reads `n` in member `id`.
async fn limited_in(set: &KubeClusterset, id: &str, limit: &str, n: f64) {
    let ops = set.member(id).servers[0].running().metrics_addr;
    let series = format!("clusterset_dns_limited{{limit=\"{limit}\"}}");
    eventually_within(CONVERGE, &format!("{id}: {series}"), n, || {
        scrape(ops, &series)
    })
    .await;
}

/// The name of flood service `i` (zero-padded: their order is their name's).
fn flood(i: usize) -> String {
    format!("f{i:02}")
}

/// Issue 46, item 4: "a cap per cluster on records ... it may publish, a
/// per-namespace cap on VIPs a namespace may hold so one tenant cannot
/// exhaust the pool ... Each limit reached is a condition and a metric,
/// never a crash"; KEP-1645's answers for the services of the other
/// clusters stay as they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_from_one_cluster_is_capped_and_changes_no_other_answer() {
    let flags = ["--max-exports-per-cluster=4", "--max-vips-per-namespace=3"];
    let set = KubeClusterset::three(&flags).await;
    for id in ALL {
        set.member(id).api.create_namespace("flood");
    }
    set.apply("east", cluster_ip("shop", "web", &["10.1.0.10"]).exported());
    set.apply("east", headless("shop", "db", &["IPv4"]).exported());
    set.apply("east", [slice("shop", "db-east", "db", &[ep("10.1.0.40")])]);
    set.apply(
        "north",
        cluster_ip("shop", "api", &["10.2.0.20"]).exported(),
    );
    let web = Outcome::Ips([agreed_vip(&set, "shop", "web").await].into());
    let api = Outcome::Ips([agreed_vip(&set, "shop", "api").await].into());
    everywhere(&set, DB, RecordType::A, ips(["10.1.0.40"])).await;

    // West exports eight services: past its cap of four, the last four by
    // name are refused in west and published nowhere.
    for i in 0..8 {
        let ip = format!("10.3.0.{}", 10 + i);
        set.apply("west", cluster_ip("flood", &flood(i), &[&ip]).exported());
    }
    for i in 0..4 {
        import_clusters_become(&set, "flood", &flood(i), "west's first four", &["west"]).await;
    }
    for i in 4..8 {
        eventually_within(CONVERGE, &format!("{} refused", flood(i)), true, || async {
            let refused = ("Valid".into(), "False".into(), "ExportLimitReached".into());
            set.export_conditions("west", "flood", &flood(i))
                .contains(&refused)
        })
        .await;
        for id in ALL {
            assert!(
                set.import(id, "flood", &flood(i)).is_none(),
                "{id}: {}",
                flood(i)
            );
        }
    }
    // Of the four, three get VIPs (the namespace's cap); the fourth
    // resolves to west's ClusterIP and its ServiceImport says why.
    let fourth = format!("{}.flood.svc.clusterset.local.", flood(3));
    everywhere(&set, &fourth, RecordType::A, ips(["10.3.0.13"])).await;
    for id in ALL {
        let import = set.import(id, "flood", &flood(3)).unwrap();
        assert!(import_ips(&import).is_empty(), "{id}: no VIP past the cap");
        let ready = import
            .status
            .unwrap()
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Ready");
        assert_eq!(
            ready.map(|c| c.reason).as_deref(),
            Some("VIPLimitReached"),
            "{id}"
        );
        limited_in(&set, id, "max-vips-per-namespace", 1.0).await;
    }
    limited_in(&set, "west", "max-exports-per-cluster", 4.0).await;

    // Broker credentials write six export records of cluster `evil` (one
    // whose controller stands for a compromised member's): every member
    // keeps its first four by name and leaves the other two out.
    let record = set
        .broker
        .get_raw(
            RECORDS.0,
            RECORDS.1,
            Some(BROKER_NAMESPACE),
            &format!("{}.flood.west", flood(0)),
        )
        .expect("west's record on the broker");
    for i in 0..6 {
        let name = format!("g{i:02}");
        let mut forged = record.clone();
        forged["metadata"]["name"] = json!(format!("{name}.flood.evil"));
        let labels = &mut forged["metadata"]["labels"];
        labels["multicluster.kubernetes.io/service-name"] = json!(name);
        labels["multicluster.kubernetes.io/source-cluster"] = json!("evil");
        set.broker.put_raw(forged).unwrap();
    }
    import_clusters_become(&set, "flood", "g03", "evil's fourth kept", &["evil"]).await;
    for (id, limited) in [("east", 2.0), ("north", 2.0), ("west", 6.0)] {
        limited_in(&set, id, "max-exports-per-cluster", limited).await;
        for name in ["g04", "g05"] {
            assert!(set.import(id, "flood", name).is_none(), "{id}: {name}");
        }
    }
    // Nobody else's answers changed.
    for id in ALL {
        assert_eq!(set.resolve(id, WEB, RecordType::A).await, web, "{id}");
        assert_eq!(set.resolve(id, API, RecordType::A).await, api, "{id}");
        assert_eq!(
            set.resolve(id, DB, RecordType::A).await,
            ips(["10.1.0.40"]),
            "{id}"
        );
    }
}
