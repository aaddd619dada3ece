//! Issue 46 (the class of Lighthouse's CVE-2026-66788), end to end in
//! Kubernetes mode: records another cluster's broker credentials could
//! write (here through the fake broker's back door: it has no RBAC) are
//! refused by every member, which keeps answering what it answered before,
//! logs the refusal and counts it.

use hickory_proto::rr::RecordType;
use serde_json::{Value, json};
use test_support::kube_clusterset::*;

use crate::common::*;

const WEB: &str = "web.shop.svc.clusterset.local.";
const DB: &str = "db.shop.svc.clusterset.local.";
const RECORDS: (&str, &str) = ("multicluster.x-k8s.io", "serviceimports");

/// A broker object as stored, to forge from.
fn stored(set: &KubeClusterset, (group, plural): (&str, &str), name: &str) -> Value {
    let object = set
        .broker
        .get_raw(group, plural, Some(BROKER_NAMESPACE), name);
    object.unwrap_or_else(|| panic!("{plural} {name} on the broker"))
}

/// Waits until each of `members` has ignored at least `n` objects of `resource`.
async fn ignored_in(set: &KubeClusterset, members: &[&str], resource: &str, n: f64) {
    for &id in members {
        let ops = set.member(id).servers[0].running().metrics_addr;
        let series =
            format!("clusterset_dns_watch_objects_ignored_total{{resource=\"{resource}\"}}");
        eventually_within(
            CONVERGE,
            &format!("{id} refused {resource}"),
            true,
            || async { scrape(ops, &series).await >= n },
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_broker_records_change_no_members_answers() {
    let set = KubeClusterset::three(&[]).await;
    set.apply("east", cluster_ip("shop", "web", &["10.1.0.10"]).exported());
    set.apply("east", headless("shop", "db", &["IPv4"]).exported());
    set.apply("east", [slice("shop", "db-east", "db", &[ep("10.1.0.40")])]);
    let vip = agreed_vip(&set, "shop", "web").await;
    let web = Outcome::Ips([vip].into());
    everywhere(&set, WEB, RecordType::A, web.clone()).await;
    everywhere(&set, DB, RecordType::A, ips(["10.1.0.40"])).await;

    // VIP hijack: the agreed record rewritten to an address outside the pool.
    let mut record = stored(&set, RECORDS, "web.shop");
    record["spec"]["ips"] = json!(["10.66.6.6"]);
    set.broker.put_raw(record).unwrap();
    // Impersonation: a record of another cluster with a loopback ClusterIP,
    // and one claiming a service of kube-system.
    let mut record = stored(&set, RECORDS, "web.shop.east");
    record["metadata"]["name"] = json!("web.shop.evil");
    record["metadata"]["labels"]["multicluster.kubernetes.io/source-cluster"] = json!("evil");
    record["spec"]["ips"] = json!(["127.0.0.1"]);
    let mut system = record.clone();
    set.broker.put_raw(record).unwrap();
    system["metadata"]["name"] = json!("kube-dns.kube-system.evil");
    system["metadata"]["labels"]["multicluster.kubernetes.io/service-name"] = json!("kube-dns");
    system["metadata"]["labels"]["clusterset-dns.io/service-namespace"] = json!("kube-system");
    system["spec"]["ips"] = json!(["10.66.6.6"]);
    set.broker.put_raw(system).unwrap();
    // East's copy of its db slice rewritten to a link-local endpoint.
    let slices = set.broker_objects("discovery.k8s.io", "endpointslices");
    let mut copy = slices
        .into_iter()
        .find(|s| s["metadata"]["labels"]["multicluster.kubernetes.io/service-name"] == "db")
        .expect("east's db slice on the broker");
    copy["endpoints"][0]["addresses"] = json!(["169.254.169.254"]);
    set.broker.put_raw(copy).unwrap();

    ignored_in(&set, &ALL, "broker/serviceimports", 3.0).await;
    // East does not read its own copies (it writes them back).
    ignored_in(&set, &["north", "west"], "broker/endpointslices", 1.0).await;
    for id in ["north", "west"] {
        assert_eq!(
            set.resolve(id, WEB, RecordType::A).await,
            web,
            "{id}: the agreed VIP"
        );
        assert_eq!(
            set.resolve(id, DB, RecordType::A).await,
            ips(["10.1.0.40"]),
            "{id}: east's pod, not the forged endpoint"
        );
        let dns = "kube-dns.kube-system.svc.clusterset.local.";
        assert_eq!(
            set.resolve(id, dns, RecordType::A).await,
            Outcome::NxDomain,
            "{id}"
        );
        let import = set.import(id, "shop", "web").unwrap();
        assert_eq!(
            import_ips(&import),
            [vip],
            "{id}: the ServiceImport keeps the VIP"
        );
        assert_eq!(
            status_clusters(&import),
            ["east"],
            "{id}: no cluster 'evil'"
        );
    }
}

/// Issue 46, item 3 ("an optional allow-list of namespaces per cluster",
/// "addresses outside a cluster's declared CIDRs are refused per record"):
/// with east held to `shop` and `10.1.0.0/16`, east's export from another
/// namespace is `Valid=False` (`NamespaceNotAllowed`) in east and published
/// nowhere, while west, which is held to nothing, exports there; records
/// east's broker credentials could forge for that namespace, or with an
/// endpoint outside its CIDRs, are refused by the others, whose answers
/// stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clusters_declared_namespaces_and_cidrs_bound_what_it_publishes() {
    let flags = [
        "--cluster-namespaces=east=shop",
        "--cluster-cidrs=east=10.1.0.0/16",
    ];
    let set = KubeClusterset::three(&flags).await;
    for id in ALL {
        set.member(id).api.create_namespace("payroll");
    }
    set.apply("east", headless("shop", "db", &["IPv4"]).exported());
    set.apply("east", [slice("shop", "db-east", "db", &[ep("10.1.0.40")])]);
    set.apply(
        "east",
        cluster_ip("payroll", "api", &["10.1.0.20"]).exported(),
    );
    set.apply(
        "west",
        cluster_ip("payroll", "api", &["10.3.0.20"]).exported(),
    );
    everywhere(&set, DB, RecordType::A, ips(["10.1.0.40"])).await;
    import_clusters_become(&set, "payroll", "api", "west alone", &["west"]).await;
    eventually_within(CONVERGE, "east's export refused", true, || async {
        let conditions = set.export_conditions("east", "payroll", "api");
        let refused = ("Valid".into(), "False".into(), "NamespaceNotAllowed".into());
        conditions.contains(&refused)
    })
    .await;
    assert_eq!(
        set.export_message("east", "payroll", "api", "Valid"),
        "namespace payroll is not among cluster east's namespaces"
    );
    let records = set.broker_objects(RECORDS.0, RECORDS.1);
    let names: Vec<&str> = records
        .iter()
        .filter_map(|r| r["metadata"]["name"].as_str())
        .collect();
    assert!(
        !names.contains(&"api.payroll.east"),
        "east publishes nothing of a refused export: {names:?}"
    );

    // What east's credentials could write anyway: its record for payroll,
    // and its db slice moved outside its CIDRs.
    let mut record = stored(&set, RECORDS, "api.payroll.west");
    record["metadata"]["name"] = json!("api.payroll.east");
    record["metadata"]["labels"]["multicluster.kubernetes.io/source-cluster"] = json!("east");
    record["spec"]["ips"] = json!(["10.1.0.20"]);
    set.broker.put_raw(record).unwrap();
    let slices = set.broker_objects("discovery.k8s.io", "endpointslices");
    let mut copy = slices
        .into_iter()
        .find(|s| s["metadata"]["labels"]["multicluster.kubernetes.io/service-name"] == "db")
        .expect("east's db slice on the broker");
    copy["endpoints"][0]["addresses"] = json!(["10.9.9.9"]);
    set.broker.put_raw(copy).unwrap();

    ignored_in(&set, &["north", "west"], "broker/serviceimports", 1.0).await;
    ignored_in(&set, &["north", "west"], "broker/endpointslices", 1.0).await;
    for id in ["north", "west"] {
        assert_eq!(
            set.resolve(id, DB, RecordType::A).await,
            ips(["10.1.0.40"]),
            "{id}: east's pod, not the address outside its CIDRs"
        );
        let import = set.import(id, "payroll", "api").unwrap();
        assert_eq!(status_clusters(&import), ["west"], "{id}: no east");
    }
}
