//! Locality: a headless import whose `trafficDistribution` is `PreferClose`
//! answers its service name (A, AAAA, SRV) with the local cluster's ready
//! endpoints while it has some, every cluster's otherwise. KEP-1645's DNS
//! specification allows a headless name to answer a subset of the ready
//! endpoints if A and AAAA give the same one; per-pod names are unaffected.
//! Embedded mode takes the local cluster from `--cluster-id`; Kubernetes
//! mode is the member it runs in.

use hickory_proto::rr::RecordType::{A, AAAA};
use serde_json::{Value, json};
use test_support::kube_clusterset::{CONVERGE, KubeClusterset};

use crate::common::*;

const DB: &str = "db.shop.svc.clusterset.local.";
const COLD: &str = "cold.shop.svc.clusterset.local.";

/// `shop/db`, dual-stack and `PreferClose`, with a pod `db-0` in east and in
/// west; `shop/cold`, `PreferClose` too, whose east pod is not ready.
fn clusterset() -> Clusterset {
    let cs = Clusterset::new();
    for (cluster, n) in [("east", 1), ("west", 2)] {
        let close = |name: &str| {
            headless("shop", name, &["IPv4", "IPv6"])
                .ports(&[("pg", 5432, "TCP")])
                .set("spec.trafficDistribution", json!("PreferClose"))
        };
        let mut docs = close("db").exported();
        docs.push(slice(
            "shop",
            &format!("db-{cluster}"),
            "db",
            &[ep(&format!("10.{n}.0.1")).host("db-0")],
        ));
        let v6 = slice(
            "shop",
            &format!("db-{cluster}-v6"),
            "db",
            &[ep(&format!("fd00:{n}::1")).host("db-0")],
        )
        .set("addressType", json!("IPv6"));
        docs.push(v6);
        docs.extend(close("cold").exported());
        let cold = ep(&format!("10.{n}.0.9"));
        let cold = if cluster == "east" {
            cold.not_ready()
        } else {
            cold
        };
        docs.push(slice("shop", &format!("cold-{cluster}"), "cold", &[cold]));
        cs.write(cluster, "db.yaml", &docs);
    }
    cs
}

#[tokio::test]
async fn prefer_close_answers_the_local_clusters_endpoints() {
    let cs = clusterset();
    let server = start(cs.dir(), &["--cluster-id", "east"]).await;
    let dns = server.running().dns_addr;
    // The same subset for A and AAAA: east's pod.
    assert_eq!(resolve(dns, DB, A).await, ips(["10.1.0.1"]));
    assert_eq!(resolve(dns, DB, AAAA).await, ips(["fd00:1::1"]));
    let (targets, _) = srv(dns, &format!("_pg._tcp.{DB}")).await;
    assert_eq!(
        targets,
        pairs([("db-0.east.db.shop.svc.clusterset.local.", 5432)])
    );
    let (bare, _) = srv(dns, DB).await;
    assert_eq!(bare, targets, "the bare name's SRV too");
    // Per-pod names are unaffected.
    let west_pod = "db-0.west.db.shop.svc.clusterset.local.";
    assert_eq!(resolve(dns, west_pod, A).await, ips(["10.2.0.1"]));
    // A local cluster without ready endpoints: every cluster's.
    assert_eq!(resolve(dns, COLD, A).await, ips(["10.2.0.9"]));
}

#[tokio::test]
async fn without_a_local_cluster_or_with_another_every_rule_follows_the_flag() {
    let cs = clusterset();
    let everywhere = start(cs.dir(), &[]).await;
    let dns = everywhere.running().dns_addr;
    assert_eq!(
        resolve(dns, DB, A).await,
        ips(["10.1.0.1", "10.2.0.1"]),
        "no --cluster-id: every cluster's"
    );
    let west = start(cs.dir(), &["--cluster-id", "west"]).await;
    let dns = west.running().dns_addr;
    assert_eq!(resolve(dns, DB, A).await, ips(["10.2.0.1"]));
    assert_eq!(resolve(dns, DB, AAAA).await, ips(["fd00:2::1"]));
}

#[test]
fn explain_names_the_rule_that_chose_the_subset() {
    let cs = clusterset();
    let dir = cs.dir_arg();
    let output = run_binary(&[
        "explain",
        DB,
        "A",
        "-o",
        "json",
        "--manifests",
        &dir,
        "--cluster-id",
        "east",
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let e: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let west = e["clusters"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["cluster"] == "west"))
        .expect("west is explained");
    let reason = west["endpoints"][0]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("PreferClose") && reason.contains("east"),
        "west's endpoint: {reason:?}"
    );
    assert_eq!(west["contributes"], json!([]));
    let rendered = e["answer"].to_string();
    assert!(
        rendered.contains("10.1.0.1") && !rendered.contains("10.2.0.1"),
        "{rendered}"
    );
}

#[test]
fn a_cluster_id_that_is_no_cluster_name_is_refused() {
    let cs = clusterset();
    let output = run_binary(&["check", "--manifests", &cs.dir_arg(), "--cluster-id=a..b"]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--cluster-id \"a..b\""), "{stderr}");
}

/// Kubernetes mode: each member answers with its own cluster's pod; north,
/// which exports nothing, with every cluster's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_member_answers_its_own_clusters_endpoints() {
    let members = [("east", "IPv4"), ("north", "IPv4"), ("west", "IPv4")];
    let set = KubeClusterset::start(&members).await;
    for member in &set.members {
        member.api.create_namespace("shop");
    }
    for (cluster, n) in [("east", 1), ("west", 2)] {
        let db =
            headless("shop", "db", &["IPv4"]).set("spec.trafficDistribution", json!("PreferClose"));
        set.apply(cluster, db.exported());
        let pod = ep(&format!("10.{n}.0.1"));
        set.apply(
            cluster,
            [slice("shop", &format!("db-{cluster}"), "db", &[pod])],
        );
    }
    for (member, expected) in [
        ("east", ips(["10.1.0.1"])),
        ("west", ips(["10.2.0.1"])),
        ("north", ips(["10.1.0.1", "10.2.0.1"])),
    ] {
        eventually_within(CONVERGE, &format!("A {DB} from {member}"), expected, || {
            set.resolve(member, DB, A)
        })
        .await;
    }
}
