//! KEP-1645: how exports of several clusters merge into one import, seen
//! through DNS and through `status -o json`.

use hickory_proto::rr::RecordType::{A, AAAA};
use serde_json::{Value, json};

use crate::common::*;

const OLD: &str = "2026-01-01T00:00:00Z";
const NEW: &str = "2026-01-02T00:00:00Z";

/// A Service with its ServiceExport created at `created`, then `more` documents.
fn exported_at(service: Doc, created: &str, more: &[Doc]) -> Vec<Doc> {
    let mut docs = vec![service.export().created(created), service];
    docs.extend_from_slice(more);
    docs
}

/// Loads `cs` once for `status -o json` and once in a server, with the same flags.
async fn load(cs: &Clusterset, extra: &[&str]) -> (Server, Value) {
    (start(cs.dir(), extra).await, status_json(cs.dir(), extra))
}

fn conflict(status: &Value, name: &str, cluster: &str) -> (String, String) {
    export_condition(status, "shop", name, cluster, "Conflict")
}

fn no_conflicts() -> (String, String) {
    cond("False", "NoConflicts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_oldest_export_decides_the_type() {
    let cs = Clusterset::new();
    let ends = |cluster: &str, svc: &str, ip: &str| {
        slice("shop", &format!("{svc}-{cluster}"), svc, &[ep(ip)])
    };
    // `flip`: west is older though it sorts after east; `flop`: east is older.
    let east = [
        exported_at(
            cluster_ip("shop", "flip", &["10.96.0.1"]),
            NEW,
            &[ends("east", "flip", "10.1.0.1")],
        ),
        exported_at(
            cluster_ip("shop", "flop", &["10.96.0.2"]),
            OLD,
            &[ends("east", "flop", "10.1.0.2")],
        ),
    ];
    let west = [
        exported_at(
            headless("shop", "flip", &["IPv4"]),
            OLD,
            &[ends("west", "flip", "10.2.0.1")],
        ),
        exported_at(
            headless("shop", "flop", &["IPv4"]),
            NEW,
            &[ends("west", "flop", "10.2.0.2")],
        ),
    ];
    cs.write("east", "shop.yaml", &east.concat());
    cs.write("west", "shop.yaml", &west.concat());
    let (server, status) = load(&cs, &[]).await;

    assert_eq!(the_import(&status, "shop", "flip")["type"], "Headless");
    assert_eq!(
        conflict(&status, "flip", "east"),
        cond("True", "TypeConflict")
    );
    // KEP-1645: the oldest export (west) is in conflict too.
    assert_eq!(
        conflict(&status, "flip", "west"),
        cond("True", "TypeConflict")
    );
    assert_eq!(
        resolve(server.addr, &svc("flip.shop"), A).await,
        ips(["10.1.0.1", "10.2.0.1"])
    );

    assert_eq!(the_import(&status, "shop", "flop")["type"], "ClusterSetIP");
    assert_eq!(
        conflict(&status, "flop", "east"),
        cond("True", "TypeConflict")
    );
    assert_eq!(
        conflict(&status, "flop", "west"),
        cond("True", "TypeConflict")
    );
    assert!(is_vip(&resolve(server.addr, &svc("flop.shop"), A).await));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ports_are_the_union_and_differences_conflict() {
    let cs = Clusterset::new();
    let web = |ports: &[(&str, u16, &str)]| cluster_ip("shop", "web", &["10.96.0.1"]).ports(ports);
    cs.write(
        "east",
        "web.yaml",
        &exported_at(web(&[("http", 80, "TCP")]), OLD, &[]),
    );
    // http is redefined (the oldest definition wins), metrics is new.
    cs.write(
        "west",
        "web.yaml",
        &exported_at(
            web(&[("http", 8081, "TCP"), ("metrics", 9100, "TCP")]),
            NEW,
            &[],
        ),
    );
    let (server, status) = load(&cs, &[]).await;

    let ports = &the_import(&status, "shop", "web")["ports"];
    let expected = json!([
        {"name": "http", "port": 80, "protocol": "TCP"},
        {"name": "metrics", "port": 9100, "protocol": "TCP"},
    ]);
    assert_eq!(ports, &expected);
    // KEP-1645 "Service Port": west's http (8081) is not the import's http
    // (80), so west backs only metrics; east backs only http.
    let backed = |i: usize| the_import(&status, "shop", "web")["clusters"][i].clone();
    assert_eq!(
        (backed(0)["cluster"].clone(), backed(0)["ports"].clone()),
        (
            json!("east"),
            json!([{"name": "http", "port": 80, "protocol": "TCP"}])
        )
    );
    assert_eq!(
        (backed(1)["cluster"].clone(), backed(1)["ports"].clone()),
        (
            json!("west"),
            json!([{"name": "metrics", "port": 9100, "protocol": "TCP"}])
        )
    );
    assert_eq!(
        conflict(&status, "web", "west"),
        cond("True", "PortConflict")
    );
    assert_eq!(
        conflict(&status, "web", "east"),
        cond("True", "PortConflict")
    );

    let target = svc("web.shop");
    let metrics = srv(server.addr, &svc("_metrics._tcp.web.shop")).await;
    assert_eq!(metrics, (pairs([(target.as_str(), 9100)]), 1));
    let http = srv(server.addr, &svc("_http._tcp.web.shop")).await;
    assert_eq!(http, (pairs([(target.as_str(), 80)]), 1));
    let bare = srv(server.addr, &target).await;
    assert_eq!(
        bare,
        (pairs([(target.as_str(), 80), (target.as_str(), 9100)]), 2)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_affinity_and_exported_labels_conflicts() {
    let cs = Clusterset::new();
    let sticky = || cluster_ip("shop", "sticky", &["10.96.0.1"]);
    let labelled = || cluster_ip("shop", "labelled", &["10.96.0.2"]);
    let labels = json!({"tier": "web"});
    let east = [
        exported_at(sticky(), OLD, &[]),
        exported_at(labelled(), OLD, &[]),
    ];
    let mut west = exported_at(
        sticky().set("spec.sessionAffinity", json!("ClientIP")),
        NEW,
        &[],
    );
    west.push(
        labelled()
            .export()
            .created(NEW)
            .set("spec.exportedLabels", labels),
    );
    west.push(labelled());
    cs.write("east", "shop.yaml", &east.concat());
    cs.write("west", "shop.yaml", &west);
    let (server, status) = load(&cs, &[]).await;

    assert_eq!(
        conflict(&status, "sticky", "west"),
        cond("True", "SessionAffinityConflict")
    );
    assert_eq!(
        conflict(&status, "sticky", "east"),
        cond("True", "SessionAffinityConflict")
    );
    assert_eq!(
        the_import(&status, "shop", "sticky")["sessionAffinity"],
        "None"
    );
    assert_eq!(
        conflict(&status, "labelled", "west"),
        cond("True", "LabelsConflict")
    );
    assert_eq!(
        conflict(&status, "labelled", "east"),
        cond("True", "LabelsConflict")
    );
    assert_eq!(the_import(&status, "shop", "labelled")["labels"], json!({}));
    // Conflicts do not take the service out of DNS.
    for name in ["sticky.shop", "labelled.shop"] {
        assert!(is_vip(&resolve(server.addr, &svc(name), A).await), "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_name_and_missing_service_are_invalid_exports() {
    let cs = Clusterset::new();
    let legacy = external_name("shop", "legacy", "legacy.example.com");
    cs.write(
        "east",
        "shop.yaml",
        &[legacy.export(), legacy, export("shop", "orphan").beta()],
    );
    let (server, status) = load(&cs, &[]).await;

    let valid = |name| export_condition(&status, "shop", name, "east", "Valid");
    assert_eq!(valid("legacy"), cond("False", "InvalidServiceType"));
    assert_eq!(valid("orphan"), cond("False", "NoService"));
    for name in ["legacy", "orphan"] {
        assert_eq!(
            export_condition(&status, "shop", name, "east", "Ready").0,
            "False",
            "{name}"
        );
        assert!(
            import(&status, "shop", name).is_none(),
            "{name} is not imported"
        );
        assert_eq!(
            resolve(server.addr, &svc(&format!("{name}.shop")), A).await,
            Outcome::NxDomain
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_without_a_local_export_is_not_part_of_the_import() {
    let cs = Clusterset::new();
    let db = || headless("shop", "db", &["IPv4"]);
    cs.write(
        "east",
        "db.yaml",
        &exported_at(db(), OLD, &[slice("shop", "db-e", "db", &[ep("10.1.0.1")])]),
    );
    cs.write(
        "west",
        "db.yaml",
        &[db(), slice("shop", "db-w", "db", &[ep("10.2.0.1")])],
    );
    let (server, status) = load(&cs, &[]).await;

    assert_eq!(import_clusters(the_import(&status, "shop", "db")), ["east"]);
    assert_eq!(
        resolve(server.addr, &svc("db.shop"), A).await,
        ips(["10.1.0.1"])
    );
    assert_eq!(
        resolve(server.addr, &svc("10-2-0-1.west.db.shop"), A).await,
        Outcome::NxDomain
    );
    assert_eq!(
        resolve(server.addr, &svc("10-1-0-1.east.db.shop"), A).await,
        ips(["10.1.0.1"])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ip_families_are_intersected() {
    let cs = Clusterset::new();
    let dual = |name: &str, n: u8| {
        cluster_ip(
            "shop",
            name,
            &[&format!("10.96.0.{n}"), &format!("fd00:96::{n}")],
        )
    };
    let v6_first = cluster_ip("shop", "v6first", &["fd00:96::9", "10.96.0.9"]);
    let east = [
        exported_at(dual("both", 1), OLD, &[]),
        exported_at(dual("mixed", 2), OLD, &[]),
        exported_at(v6_first, OLD, &[]),
    ];
    let west = [
        exported_at(dual("both", 3), NEW, &[]),
        exported_at(dual("v6first", 4), NEW, &[]),
        exported_at(cluster_ip("shop", "mixed", &["10.97.0.2"]), NEW, &[]),
    ];
    cs.write("east", "shop.yaml", &east.concat());
    cs.write("west", "shop.yaml", &west.concat());
    let (server, status) = load(&cs, &[]).await;

    assert_eq!(
        the_import(&status, "shop", "both")["ipFamilies"],
        json!(["IPv4", "IPv6"])
    );
    let (a, aaaa) = resolve_both(server.addr, &svc("both.shop")).await;
    assert_eq!((addresses(a).len(), addresses(aaaa).len()), (1, 1));

    let mixed = the_import(&status, "shop", "mixed");
    assert_eq!(mixed["ipFamilies"], json!(["IPv4"]));
    assert_eq!(mixed["vips"].as_array().map(Vec::len), Some(1));
    assert_eq!(conflict(&status, "mixed", "west"), no_conflicts());
    let (a, aaaa) = resolve_both(server.addr, &svc("mixed.shop")).await;
    assert!(is_vip(&a));
    assert_eq!(aaaa, Outcome::NoData);

    // The oldest export's family order, and the VIPs ordered like it.
    let v6_first = the_import(&status, "shop", "v6first");
    assert_eq!(v6_first["ipFamilies"], json!(["IPv6", "IPv4"]));
    let vips: Vec<std::net::IpAddr> =
        serde_json::from_value(v6_first["vips"].clone()).expect("IPs");
    assert_eq!(
        vips.iter().map(|ip| ip.is_ipv6()).collect::<Vec<_>>(),
        [true, false]
    );
    let (a, aaaa) = resolve_both(server.addr, &svc("v6first.shop")).await;
    assert_eq!(
        (addresses(aaaa), addresses(a)),
        ([vips[0]].into(), [vips[1]].into())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_sharing_no_family_is_left_out() {
    let cs = Clusterset::new();
    let db = |families: &[&str]| headless("shop", "db", families);
    cs.write(
        "east",
        "db.yaml",
        &exported_at(
            db(&["IPv4"]),
            OLD,
            &[slice("shop", "db-e", "db", &[ep("10.1.0.1")])],
        ),
    );
    cs.write(
        "west",
        "db.yaml",
        &exported_at(
            db(&["IPv6"]),
            NEW,
            &[slice("shop", "db-w", "db", &[ep("fd00::5")])],
        ),
    );
    let (server, status) = load(&cs, &[]).await;

    assert_eq!(
        conflict(&status, "db", "west"),
        cond("True", "IPFamilyConflict")
    );
    assert_eq!(
        export_condition(&status, "shop", "db", "west", "Ready").0,
        "False"
    );
    assert_eq!(
        conflict(&status, "db", "east"),
        cond("True", "IPFamilyConflict")
    );
    let db_import = the_import(&status, "shop", "db");
    assert_eq!(import_clusters(db_import), ["east"]);
    assert_eq!(db_import["ipFamilies"], json!(["IPv4"]));

    assert_eq!(
        resolve_both(server.addr, &svc("db.shop")).await,
        (ips(["10.1.0.1"]), Outcome::NoData)
    );
    assert_eq!(
        resolve(server.addr, &svc("fd00--5.west.db.shop"), AAAA).await,
        Outcome::NxDomain
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_cluster_without_the_import_family() {
    let cs = Clusterset::new();
    cs.write(
        "east",
        "web.yaml",
        &exported_at(cluster_ip("shop", "web", &["10.96.0.1"]), OLD, &[]),
    );
    let dual = cluster_ip("shop", "dual", &["10.96.0.2", "fd00:96::2"]);
    cs.write("east", "dual.yaml", &exported_at(dual, OLD, &[]));
    let (server, status) = load(&cs, &["--ip-families", "IPv6"]).await;

    // A dual-stack import keeps serving its IPv6 VIP only.
    let dual = the_import(&status, "shop", "dual");
    assert_eq!(dual["ready"]["status"], "True");
    let (a, aaaa) = resolve_both(server.addr, &svc("dual.shop")).await;
    assert_eq!(a, Outcome::NoData);
    let six = addresses(aaaa);
    assert!(six.len() == 1 && six.iter().all(in_v6_pool), "{six:?}");

    let ready = &the_import(&status, "shop", "web")["ready"];
    assert_eq!(
        (&ready["status"], &ready["reason"]),
        (&json!("False"), &json!("IPFamilyNotSupported"))
    );
    assert_eq!(
        resolve_both(server.addr, &svc("web.shop")).await,
        (Outcome::NoData, Outcome::NoData)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_timestamps_the_walk_order_decides() {
    let cs = Clusterset::new();
    let web_a = headless("shop", "web", &["IPv4"]);
    let web_b = cluster_ip("shop", "web", &["10.96.0.1"]);
    // Clusters are walked in name order: `a` is seen first, so it is the oldest.
    cs.write("b", "web.yaml", &[web_b.export(), web_b]);
    cs.write(
        "a",
        "web.yaml",
        &[
            web_a.export(),
            web_a,
            slice("shop", "web-a", "web", &[ep("10.1.0.1")]),
        ],
    );
    let (server, status) = load(&cs, &[]).await;

    assert_eq!(the_import(&status, "shop", "web")["type"], "Headless");
    assert_eq!(conflict(&status, "web", "b"), cond("True", "TypeConflict"));
    assert_eq!(conflict(&status, "web", "a"), cond("True", "TypeConflict"));
    assert_eq!(
        resolve(server.addr, &svc("web.shop"), A).await,
        ips(["10.1.0.1"])
    );
}

/// KEP-1645 "Service Port" in DNS: the SRV records of a headless import
/// target, per port, only the endpoints of clusters that back it. East
/// (oldest) defines `tcp` as 42; west defines `tcp` as 4242 (not the
/// import's) and adds `tcp2`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headless_srv_targets_only_clusters_backing_the_port() {
    let cs = Clusterset::new();
    let db = || headless("shop", "db", &["IPv4"]);
    cs.write(
        "east",
        "db.yaml",
        &exported_at(
            db().ports(&[("tcp", 42, "TCP")]),
            OLD,
            &[slice("shop", "db-e", "db", &[ep("10.1.0.1").host("e0")])],
        ),
    );
    cs.write(
        "west",
        "db.yaml",
        &exported_at(
            db().ports(&[("tcp", 4242, "TCP"), ("tcp2", 4343, "TCP")]),
            NEW,
            &[slice("shop", "db-w", "db", &[ep("10.2.0.1").host("w0")])],
        ),
    );
    let (server, _) = load(&cs, &[]).await;
    let east = "e0.east.db.shop.svc.clusterset.local.";
    let west = "w0.west.db.shop.svc.clusterset.local.";
    let tcp = srv(server.addr, &svc("_tcp._tcp.db.shop")).await;
    assert_eq!(tcp, (pairs([(east, 42)]), 1));
    let tcp2 = srv(server.addr, &svc("_tcp2._tcp.db.shop")).await;
    assert_eq!(tcp2, (pairs([(west, 4343)]), 1));
    let bare = srv(server.addr, &svc("db.shop")).await;
    assert_eq!(bare, (pairs([(east, 42), (west, 4343)]), 2));
    // Addresses are the service's, whichever ports a cluster backs.
    assert_eq!(
        resolve(server.addr, &svc("db.shop"), A).await,
        ips(["10.1.0.1", "10.2.0.1"])
    );
}
