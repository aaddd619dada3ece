//! `status` and `explain` in Kubernetes mode, read from the fake API servers
//! of three members and a broker (the real kube client, real clusterset-dns
//! instances writing the state they read).

use clusterset_dns::cli::Command as CliCommand;
use clusterset_dns::commands::{explain, status};
use hickory_proto::rr::RecordType;
use serde_json::{Value, json};
use test_support::kube_clusterset::*;

use crate::common::*;

const WEB: &str = "web.shop.svc.clusterset.local.";

/// `web.shop` exported from east and west, imported with one VIP by all three.
async fn exported_web() -> (KubeClusterset, String) {
    let set = KubeClusterset::start_with(
        &[("east", "IPv4"), ("north", "IPv4"), ("west", "IPv4")],
        &["--debug-explain"],
    )
    .await;
    for member in &set.members {
        member.api.create_namespace("shop");
    }
    set.apply("east", cluster_ip("shop", "web", &["10.1.0.10"]).exported());
    set.apply("west", cluster_ip("shop", "web", &["10.3.0.10"]).exported());
    for id in ["east", "north", "west"] {
        eventually_within(CONVERGE, "both clusters in the import", 2, || async {
            set.import(id, "shop", "web")
                .map_or(0, |i| status_clusters(&i).len())
        })
        .await;
    }
    let vip = import_ips(&set.import("north", "shop", "web").unwrap())[0].to_string();
    (set, vip)
}

fn words<'a>(command: &'a str, set: &'a [String], extra: &[&'a str]) -> Vec<&'a str> {
    let mut words = vec![command];
    words.extend(extra);
    words.extend(set.iter().map(String::as_str));
    words
}

/// `status` of member `id`, read only, in the JSON shape of embedded mode
/// plus the broker's records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_reads_member_imports_exports_and_the_broker() {
    let (set, vip) = exported_web().await;
    let flags = set.flags("east");
    let CliCommand::Status(args) = parse_cli(&words("status", &flags, &["-o", "json"])) else {
        panic!("status arguments expected")
    };
    let before = set.broker_objects("multicluster.x-k8s.io", "serviceimports");
    let report: Value =
        serde_json::from_str(&status::render(&args).await.expect("status renders")).expect("JSON");
    let import = the_import(&report, "shop", "web");
    assert_eq!(import["type"], "ClusterSetIP");
    assert_eq!(import["ipFamilies"], json!(["IPv4"]));
    assert_eq!(import["vips"], json!([vip]));
    let clusters: Vec<&str> = import["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["cluster"].as_str().unwrap())
        .collect();
    assert_eq!(clusters, ["east", "west"]);
    let exports = report["serviceExports"].as_array().unwrap();
    assert!(
        exports.iter().any(|e| e["cluster"] == "east"
            && e["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["type"] == "Valid" && c["status"] == "True")),
        "{report:#}"
    );
    let broker = &report["broker"];
    assert_eq!(
        broker["exportRecords"],
        json!([
            {"namespace": "shop", "name": "web", "cluster": "east"},
            {"namespace": "shop", "name": "web", "cluster": "west"},
        ])
    );
    assert_eq!(
        broker["vipRecords"],
        json!([{"namespace": "shop", "name": "web", "vips": [vip]}])
    );
    assert_eq!(
        broker["vipClaims"],
        json!([{"address": vip, "service": "shop/web"}])
    );
    assert_eq!(
        set.broker_objects("multicluster.x-k8s.io", "serviceimports"),
        before,
        "status writes nothing"
    );

    let CliCommand::Status(args) = parse_cli(&words("status", &flags, &[])) else {
        panic!("status arguments expected")
    };
    let text = status::render(&args).await.expect("status renders");
    for line in [
        "shop        web ",
        "export   shop        web    east",
        "vips     shop        web    ",
    ] {
        let cells: Vec<&str> = line.split_whitespace().collect();
        assert!(
            text.lines()
                .any(|l| l.split_whitespace().collect::<Vec<_>>().starts_with(&cells)),
            "{line:?} in\n{text}"
        );
    }
}

/// `explain` in Kubernetes mode gives the answer the member's server gives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_reads_the_api_servers_and_agrees_with_dns() {
    let (set, vip) = exported_web().await;
    eventually_within(
        CONVERGE,
        "north answers the VIP",
        ips([vip.as_str()]),
        || set.resolve("north", WEB, RecordType::A),
    )
    .await;
    let flags = set.flags("north");
    let CliCommand::Explain(args) = parse_cli(&words("explain", &flags, &[WEB, "A", "-o", "json"]))
    else {
        panic!("explain arguments expected")
    };
    let e: Value = serde_json::from_str(&explain::render(&args).await.expect("explains")).unwrap();
    assert_eq!(e["answer"]["rcode"], "NOERROR");
    assert_eq!(
        e["answer"]["answers"],
        json!([format!("{WEB} 5 IN A {vip}")])
    );
    let clusters: Vec<(&str, bool)> = e["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["cluster"].as_str().unwrap(),
                c["inImport"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(clusters, [("east", true), ("west", true)]);

    let live = get(
        set.member("north").servers[0].running().metrics_addr,
        "/debug/explain?name=web.shop.svc.clusterset.local&type=A",
    )
    .await;
    assert_eq!(live.0, 200);
    let live: Value = serde_json::from_str(&live.1).unwrap();
    assert_eq!(live, e, "the running member explains it the same way");
}
