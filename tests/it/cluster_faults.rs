//! Faults in Kubernetes mode (three members and a broker, each a fake API
//! server spoken to by the real kube client): watches cut or expired, the
//! broker hung or restarted and a member's API server restarted leave every
//! answer in place and converge afterwards; a member whose heartbeat stops
//! is dropped from every other member's answers and returns by itself; a
//! wiped broker is rebuilt with the same VIPs.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use clusterset_dns::engine::vip::{VipAllocator, VipPools};
use clusterset_dns::k8s::crd::ServiceImport;
use clusterset_dns::k8s::records;
use clusterset_dns::k8s::served_versions::ServedVersion;
use clusterset_dns::model::{IpFamily, ServiceKey};
use clusterset_dns::writeback::vip_claims::VipClaims;
use hickory_proto::rr::RecordType;
use serde_json::json;
use test_support::kube_clusterset::*;

use crate::common::*;

const DB: &str = "db.shop.svc.clusterset.local.";
const WEB: &str = "web.shop.svc.clusterset.local.";

/// Three IPv4 members with the namespace `shop`, judging heartbeats after 3 s.
async fn three() -> KubeClusterset {
    KubeClusterset::three(&["--cluster-timeout", "3"]).await
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

/// Cut watches, `410 Gone`, the broker down for a while, a member API server
/// restarted: DNS keeps answering with what it knew, and everything
/// converges afterwards with nothing lost or duplicated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_keep_last_answers_and_converge_after_recovery() {
    // The default `--cluster-timeout`, not the 3 s of `three()`.
    let set = KubeClusterset::three(&[]).await;
    let svc = |n: &str, ip: &str| cluster_ip("shop", n, &[ip]).exported();
    set.apply("east", svc("web", "10.1.0.10"));
    set.apply("west", svc("web", "10.3.0.10"));
    served_everywhere(&set, WEB).await;

    // Every watch cut: they resume from their resourceVersion.
    for api in set.members.iter().map(|m| &m.api).chain([&set.broker]) {
        api.cut_watches();
    }
    set.apply("north", svc("api", "10.2.0.11"));
    served_everywhere(&set, "api.shop.svc.clusterset.local.").await;

    // History compacted, then cut: the broker watches get 410 and list again.
    set.broker.compact();
    set.broker.cut_watches();
    set.apply("east", svc("cart", "10.1.0.12"));
    served_everywhere(&set, "cart.shop.svc.clusterset.local.").await;
    let ops = set.member("north").servers[0].running().metrics_addr;
    eventually_within(CONVERGE, "north counted a broker watch restart", true, || async {
        let restarts = |resource: &'static str| async move {
            let series = format!("clusterset_dns_watch_restarts_total{{resource=\"{resource}\",source=\"{resource}\"}}");
            scrape(ops, &series).await
        };
        restarts("broker/serviceimports").await + restarts("broker/endpointslices").await >= 1.0
    })
    .await;

    // The broker hangs: every member still answers what it knew.
    set.broker.pause();
    let db = headless("shop", "db", &["IPv4"]);
    set.apply("east", db.exported());
    set.apply("east", [slice("shop", "db-east", "db", &[ep("10.1.0.40")])]);
    let db_name = "db.shop.svc.clusterset.local.";
    // East serves its own new endpoints at once; the others learn them from the broker later.
    eventually_within(
        CONVERGE,
        "east serves its own export",
        ips(["10.1.0.40"]),
        || set.resolve("east", db_name, RecordType::A),
    )
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(
        set.resolve("north", db_name, RecordType::A).await,
        Outcome::NxDomain
    );
    served_everywhere(&set, WEB).await;
    set.broker.resume();
    everywhere(&set, db_name, RecordType::A, ips(["10.1.0.40"])).await;

    // The broker stops, then restarts without its watch history.
    set.broker.stop().await;
    set.unexport("west", "shop", "web");
    served_everywhere(&set, WEB).await;
    set.broker
        .restart(fake_apiserver::RestartMode::KeepObjects)
        .await;
    import_clusters_become(&set, "shop", "web", "west left the import", &["east"]).await;

    // North's own API server restarts: north keeps answering meanwhile.
    let north = &set.member("north").api;
    north.stop().await;
    served_everywhere(&set, WEB).await;
    north
        .restart(fake_apiserver::RestartMode::KeepObjects)
        .await;
    set.apply("north", svc("late", "10.2.0.13"));
    served_everywhere(&set, "late.shop.svc.clusterset.local.").await;

    // Nothing duplicated: one claim per import, one mirror per source slice.
    let mut vips = BTreeSet::new();
    for name in ["web", "api", "cart", "late"] {
        vips.insert((
            agreed_vip(&set, "shop", name).await.to_string(),
            format!("shop/{name}"),
        ));
    }
    eventually_within(
        CONVERGE,
        "claims are exactly the VIPs in use",
        vips,
        || async { set.claims() },
    )
    .await;
    eventually_within(
        CONVERGE,
        "one mirror of east's db slice in north",
        1,
        || async { set.mcs_slices("north", "shop", "db").len() },
    )
    .await;
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

/// web's first candidate claimed by another service, so that web holds its
/// second: re-allocating would pick the first. East and west export `db` and
/// `web`, north `api`; returns web's first candidate and the VIPs of `web`
/// and `api` once every member carries them.
async fn web_on_its_second_candidate(set: &KubeClusterset) -> (IpAddr, Vec<Vec<IpAddr>>) {
    let first = VipAllocator::new(VipPools::default())
        .candidates(&ServiceKey::new("shop", "web"), IpFamily::IPv4)
        .next()
        .unwrap();
    let claim = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {
            "name": claim_name(first),
            "namespace": BROKER_NAMESPACE,
            "labels": {"clusterset-dns.io/vip-claim": "true"},
        },
        "data": {"address": first.to_string(), "service": "shop/elsewhere"},
    });
    set.broker.put_raw(claim).unwrap();
    export_db_and_web(set);
    set.apply(
        "north",
        cluster_ip("shop", "api", &["10.2.0.11"]).exported(),
    );
    let mut vips = Vec::new();
    for name in ["web", "api"] {
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
    assert_ne!(vips[0], [first], "web holds its second candidate");
    (first, vips)
}

/// The name of the claim on an IPv4 address.
fn claim_name(ip: IpAddr) -> String {
    format!("clusterset-vip-{}", ip.to_string().replace('.', "-"))
}

/// Every member's ServiceImport of `shop/web` carries `vip`, and DNS answers it.
async fn web_keeps(set: &KubeClusterset, vip: &[IpAddr]) {
    for id in ["east", "north", "west"] {
        eventually_within(
            CONVERGE,
            &format!("{id}: web keeps its VIP"),
            Some(vip.to_vec()),
            || async { set.import(id, "shop", "web").map(|i| import_ips(&i)) },
        )
        .await;
        until_answered(set, id, WEB, Outcome::Ips(vip.iter().copied().collect())).await;
    }
}

/// The broker loses the claims but keeps the VIP records (an operator's
/// clean-up, a partial restore): the members write the claims again, so no
/// other service can take an address a VIP record lists (KEP-1645: a VIP
/// belongs to one service; the claim is what makes it so, see
/// ARCHITECTURE.md, "Choices that need a reason").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_claims_are_written_again_while_their_record_stands() {
    let set = three().await;
    let (_, vips) = web_on_its_second_candidate(&set).await;
    let claims = set.claims();
    for claim in set.broker_objects("", "configmaps") {
        let name = claim["metadata"]["name"].as_str().unwrap();
        if !claim["data"]["service"]
            .as_str()
            .unwrap()
            .ends_with("/elsewhere")
        {
            set.broker
                .remove_raw("", "configmaps", Some(BROKER_NAMESPACE), name);
        }
    }
    assert_ne!(set.claims(), claims);
    eventually_within(CONVERGE, "the claims written again", claims, || async {
        set.claims()
    })
    .await;
    web_keeps(&set, &vips[0]).await;
}

/// A claim deleted between a member's create (409: it exists) and its read
/// of the holder (404), as when a broker is being emptied while members
/// re-claim: the member creates it again rather than take the next address
/// (KEP-1645: the VIP is stable for the import's life). Called directly: the
/// moment cannot be timed through running members.
#[tokio::test]
async fn a_claim_gone_between_create_and_read_keeps_the_vip() {
    let broker = fake_apiserver::FakeApiServer::start().await;
    broker.create_namespace(BROKER_NAMESPACE);
    let records = ServedVersion::discover(broker.client(), "serviceimports").await;
    let claims = VipClaims::new(broker.client(), records, BROKER_NAMESPACE);
    let web = ServiceKey::new("shop", "web");
    let [vip, next]: [IpAddr; 2] = ["243.0.0.7", "243.0.0.8"].map(|a| a.parse().unwrap());
    let held = claims.ensure(&web, &[IpFamily::IPv4], |_| vec![vip]).await;
    assert_eq!(held.unwrap(), [vip]);
    let name = claim_name(vip);
    let record = records::vip_record_name(&web);
    broker.remove_raw(
        "multicluster.x-k8s.io",
        "serviceimports",
        Some(BROKER_NAMESPACE),
        &record,
    );
    // Twice: the VIP may come again among the candidates.
    broker.fail_requests_matching(2, 404, move |r| {
        r.verb == fake_apiserver::Verb::Get
            && r.resource == "configmaps"
            && r.name.as_deref() == Some(name.as_str())
    });
    let again = claims
        .ensure(&web, &[IpFamily::IPv4], |_| vec![vip, vip, next])
        .await;
    assert_eq!(again.unwrap(), [vip], "web keeps its VIP");
    assert_eq!(broker.pending_failures(), 0, "both 404s were served");
    let holders: BTreeSet<_> = claims.list().await.unwrap().into_iter().collect();
    assert_eq!(
        holders,
        BTreeSet::from([(vip.to_string(), web.to_string())]),
        "no claim on the next address"
    );
}

/// Members whose ServiceImports carry different VIPs when the broker has
/// lost its records (west's was changed while it was down, as a member that
/// rejoins from another broker would): the oldest export's cluster decides
/// (ARCHITECTURE.md, "Choices that need a reason"). West, back a second
/// before east, leaves the claiming to east, whose export is older, and
/// adopts east's VIP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_that_disagree_keep_the_oldest_exports_vip() {
    let mut set = three().await;
    set.apply("east", cluster_ip("shop", "web", &["10.1.0.10"]).exported());
    eventually_within(CONVERGE, "east's web has a VIP", 1, || async {
        set.import("east", "shop", "web")
            .map_or(0, |i| i.spec.ips.len())
    })
    .await;
    set.apply("west", cluster_ip("shop", "web", &["10.3.0.10"]).exported());
    let vip = import_ips(&set.import("east", "shop", "web").unwrap());
    web_keeps(&set, &vip).await;
    eventually_within(CONVERGE, "west's web lists east first", true, || async {
        set.import("west", "shop", "web")
            .and_then(|i| i.status)
            .is_some_and(|s| s.clusters.len() == 2 && s.clusters[0].cluster == "east")
    })
    .await;
    let (east, west) = (0, 2);
    set.stop_replica(east, 0).await;
    set.stop_replica(west, 0).await;
    let elsewhere = "243.1.2.3";
    let mut theirs = set
        .member("west")
        .api
        .get_raw(
            "multicluster.x-k8s.io",
            "serviceimports",
            Some("shop"),
            "web",
        )
        .unwrap();
    theirs["spec"]["ips"] = json!([elsewhere]);
    set.member("west").api.put_raw(theirs).unwrap();
    set.wipe_broker();
    set.add_replica(west).await;
    let ops = set.member("west").servers[0].running().metrics_addr;
    eventually_within(CONVERGE, "west leads", 1.0, || {
        scrape(ops, "clusterset_dns_leader")
    })
    .await;
    // Long enough for west to claim, were it not waiting for east.
    tokio::time::sleep(Duration::from_secs(1)).await;
    set.add_replica(east).await;
    web_keeps(&set, &vip).await;
    let claims: Vec<_> = set.claims().into_iter().map(|(ip, _)| ip).collect();
    assert_eq!(claims, [vip[0].to_string()], "only east's VIP is claimed");
}

/// The broker loses everything (namespace wiped, or restored from a backup
/// older than the services): every member re-publishes its exports at once
/// (from their watches, not a periodic resync), and the VIPs stay the same in every
/// member's ServiceImport and DNS answers, since each member re-claims the
/// VIPs its ServiceImport carries first (KEP-1645: a VIP is stable for the
/// import's life), even one that is not the service's first candidate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_broker_is_rebuilt_with_the_same_vips() {
    let set = three().await;
    let (first, vips) = web_on_its_second_candidate(&set).await;
    let names = ["web", "api"];
    let records = set
        .broker_objects("multicluster.x-k8s.io", "serviceimports")
        .len();
    let slices = set
        .broker_objects("discovery.k8s.io", "endpointslices")
        .len();
    let mut claims = set.claims();
    claims.remove(&(first.to_string(), "shop/elsewhere".to_owned()));

    let wiped = Instant::now();
    set.wipe_broker();
    // Every member's ServiceImports keep their VIPs throughout.
    let mut seen: BTreeSet<(String, &str, Vec<IpAddr>)> = BTreeSet::new();
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

/// A ServiceImport deleted while its member's watches are away (the API
/// server restarted without its watch history, so they relist) is written
/// again as soon as the relist shows it gone: a relist queues what it found
/// new, changed or gone, not every service, and no periodic resync is
/// waited for (a full resync pass takes 30 minutes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_deleted_while_watches_are_away_is_restored_after_the_relist() {
    let set = three().await;
    set.apply("east", cluster_ip("shop", "web", &["10.1.0.10"]).exported());
    let vip = agreed_vip(&set, "shop", "web").await;
    let east = &set.member("east").api;
    east.stop().await;
    assert!(east.remove::<ServiceImport>(Some("shop"), "web"));
    east.restart(fake_apiserver::RestartMode::KeepObjects).await;
    eventually_within(
        Duration::from_secs(20),
        "east's ServiceImport is back with its VIP",
        Some(vec![vip]),
        || async { set.import("east", "shop", "web").map(|i| import_ips(&i)) },
    )
    .await;
}
