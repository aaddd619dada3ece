//! `explain NAME [TYPE]`: offline from the manifest directory (the binary),
//! and from a running server's `/debug/explain`; both must report the answer
//! the server actually gives (RFC 1035 §4.1.1 RCODE, RFC 2308 §5 negative TTL).

use std::collections::BTreeSet;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use serde_json::Value;

use crate::common::*;

const DB: &str = "db.shop.svc.clusterset.local.";

/// `shop/db`, headless, seen from four clusters:
/// - east (oldest export, IPv4): a ready pod, a pod not ready, and an IPv6
///   address outside the import's families;
/// - south: exported with another port (PortConflict), its pod still used;
/// - west: IPv6 only, no family in common: left out (IPFamilyConflict);
/// - north: the Service and a pod, but no ServiceExport.
fn db_clusterset() -> Clusterset {
    let cs = Clusterset::new();
    let db = |families: &[&str]| headless("shop", "db", families);
    let exported = |created: &str, svc: Doc| vec![svc.export().created(created), svc];
    let mut east = exported("2024-01-01T00:00:00Z", db(&["IPv4"]));
    east.push(slice(
        "shop",
        "db-east",
        "db",
        &[ep("10.1.0.1").host("db-0"), ep("10.1.0.2").not_ready()],
    ));
    east.push(slice("shop", "db-east-v6", "db", &[ep("fd00:1::1")]));
    cs.write("east", "db.yaml", &east);
    let mut south = exported(
        "2024-02-01T00:00:00Z",
        db(&["IPv4"]).ports(&[("http", 8080, "TCP")]),
    );
    south.push(slice("shop", "db-south", "db", &[ep("10.4.0.1")]));
    cs.write("south", "db.yaml", &south);
    let mut west = exported("2024-03-01T00:00:00Z", db(&["IPv6"]));
    west.push(slice("shop", "db-west", "db", &[ep("fd00:2::1")]));
    cs.write("west", "db.yaml", &west);
    cs.write(
        "north",
        "db.yaml",
        &[
            db(&["IPv4"]),
            slice("shop", "db-north", "db", &[ep("10.3.0.1")]),
        ],
    );
    cs
}

/// `explain <words> -o json` run through the real binary.
fn explain_json(cs: &Clusterset, words: &[&str]) -> Value {
    let dir = cs.dir_arg();
    let mut args = vec!["explain"];
    args.extend_from_slice(words);
    args.extend_from_slice(&["-o", "json", "--manifests", &dir]);
    let output = run_binary(&args);
    assert!(
        output.status.success(),
        "explain failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("explain -o json is JSON")
}

fn cluster<'a>(e: &'a Value, id: &str) -> &'a Value {
    e["clusters"]
        .as_array()
        .expect("clusters")
        .iter()
        .find(|c| c["cluster"] == id)
        .unwrap_or_else(|| panic!("no cluster {id} in {e:#}"))
}

fn endpoint_reason(e: &Value, cluster_id: &str, address: &str) -> String {
    let c = cluster(e, cluster_id);
    let endpoint = c["endpoints"]
        .as_array()
        .expect("endpoints")
        .iter()
        .find(|x| x["address"] == address)
        .unwrap_or_else(|| panic!("no endpoint {address} in {c:#}"));
    endpoint["reason"].as_str().unwrap_or("used").to_owned()
}

/// The addresses of the answer section's records, as `explain` prints them.
fn answer_ips(e: &Value) -> BTreeSet<String> {
    e["answer"]["answers"]
        .as_array()
        .expect("answers")
        .iter()
        .map(|r| r.as_str().unwrap().rsplit(' ').next().unwrap().to_owned())
        .collect()
}

#[test]
fn explain_names_each_cluster_and_endpoint_left_out_and_why() {
    let cs = db_clusterset();
    let e = explain_json(&cs, &["db.shop.svc.clusterset.local", "A"]);
    assert_eq!(e["service"]["namespace"], "shop");
    assert_eq!(e["import"]["type"], "Headless");
    assert_eq!(e["import"]["ipFamilies"], serde_json::json!(["IPv4"]));

    assert_eq!(cluster(&e, "east")["inImport"], true);
    assert_eq!(endpoint_reason(&e, "east", "10.1.0.1"), "used");
    assert_eq!(endpoint_reason(&e, "east", "10.1.0.2"), "not ready");
    let v6 = endpoint_reason(&e, "east", "fd00:1::1");
    assert!(
        v6.contains("IPv6 is not among the import's IP families (IPv4)"),
        "{v6}"
    );

    let south = cluster(&e, "south");
    assert_eq!(south["inImport"], true, "a port conflict keeps the cluster");
    let conflict = south["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Conflict")
        .expect("a Conflict condition");
    assert_eq!(conflict["status"], "True");
    assert!(
        conflict["reason"]
            .as_str()
            .unwrap()
            .contains("PortConflict")
    );

    let west = cluster(&e, "west")["leftOut"].as_str().unwrap_or_default();
    assert!(west.contains("IPFamilyConflict"), "{west}");
    assert!(endpoint_reason(&e, "west", "fd00:2::1").starts_with("cluster left out"));
    let north = cluster(&e, "north");
    assert_eq!(north["exported"], false);
    assert_eq!(north["leftOut"], "no ServiceExport in this cluster");

    assert_eq!(e["answer"]["rcode"], "NOERROR");
    assert_eq!(e["answer"]["authoritative"], true);
    assert_eq!(e["answer"]["ttl"], 5);
    let expected: BTreeSet<String> = ["10.1.0.1", "10.4.0.1"].map(String::from).into();
    assert_eq!(answer_ips(&e), expected);
}

#[test]
fn explain_a_missing_name_gives_nxdomain_with_the_soa_ttl() {
    let cs = db_clusterset();
    let e = explain_json(&cs, &["nope.shop.svc.clusterset.local", "aaaa"]);
    assert_eq!(e["type"], "AAAA");
    assert_eq!(e["import"], Value::Null);
    assert_eq!(e["answer"]["rcode"], "NXDOMAIN");
    assert_eq!(e["answer"]["ttl"], 5, "the SOA minimum (RFC 2308 §5)");
    let authority = e["answer"]["authority"][0].as_str().unwrap_or_default();
    assert!(authority.contains("SOA"), "{authority}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_explain_on_a_running_server_matches_its_dns_answers() {
    let cs = db_clusterset();
    let server = start(cs.dir(), &["--debug-explain"]).await;
    let ops = server.running().metrics_addr;
    let (code, body) = get(
        ops,
        "/debug/explain?name=db.shop.svc.clusterset.local&type=A",
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let live: Value = serde_json::from_str(&body).expect("JSON");

    let dns = resolve(server.addr, DB, RecordType::A).await;
    let Outcome::Ips(ips) = dns else {
        panic!("addresses expected, got {dns:?}")
    };
    let served: BTreeSet<String> = ips.iter().map(ToString::to_string).collect();
    assert_eq!(answer_ips(&live), served, "the answer DNS gives");
    assert_eq!(
        live,
        explain_json(&cs, &[DB, "A"]),
        "offline and live explanations agree"
    );

    let (code, text) = get(
        ops,
        "/debug/explain?name=db.shop.svc.clusterset.local&output=text",
    )
    .await;
    assert_eq!(code, 200);
    assert!(text.contains("endpoint 10.1.0.2: not ready"), "{text}");
    let (code, body) = get(ops, "/debug/explain?type=A").await;
    assert_eq!(code, 400, "{body}");
    let (code, body) = get(
        ops,
        "/debug/explain?name=db.shop.svc.clusterset.local&type=BOGUS",
    )
    .await;
    assert_eq!(code, 400);
    assert!(body.contains("unknown record type \"BOGUS\""), "{body}");
    let code = query(server.addr, "x.clusterset.local.", RecordType::A)
        .await
        .metadata
        .response_code;
    assert_eq!(code, ResponseCode::NXDomain, "explaining changed nothing");
}
