//! Hot reload: changes to the manifest directory show in DNS within
//! [`RELOAD_DEADLINE`] while the server keeps running.

use std::fs;

use hickory_proto::rr::RData;
use hickory_proto::rr::RecordType::{A, SOA};

use crate::common::*;

fn db(endpoints: &[&str]) -> Vec<Doc> {
    let service = headless("shop", "db", &["IPv4"]);
    let endpoints: Vec<Ep> = endpoints.iter().map(|ip| ep(ip)).collect();
    vec![
        service.export(),
        service,
        slice("shop", "db-1", "db", &endpoints),
    ]
}

fn web(name: &str, ip: &str) -> Vec<Doc> {
    cluster_ip("shop", name, &[ip]).exported()
}

/// The serial of the zone's SOA.
async fn serial(server: &Server) -> u32 {
    let response = query(server.addr, "clusterset.local.", SOA).await;
    match &response.answers[0].data {
        RData::SOA(soa) => soa.serial,
        other => panic!("SOA expected, got {other:?}"),
    }
}

/// Polls until `name` answers A with one VIP.
async fn eventually_vip(server: &Server, name: &str) {
    let name = svc(name);
    eventually(&format!("{name} has a VIP"), true, || async {
        is_vip(&resolve(server.addr, &name, A).await)
    })
    .await;
}

/// Asserts the A answer of `<name>.svc.clusterset.local` now.
async fn assert_a(server: &Server, name: &str, expected: Outcome) {
    assert_eq!(
        resolve(server.addr, &svc(name), A).await,
        expected,
        "{name}"
    );
}

async fn eventually_a(server: &Server, name: &str, expected: Outcome) {
    let name = svc(name);
    eventually(&name, expected, || resolve(server.addr, &name, A)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_endpoint_slice_is_served() {
    let cs = Clusterset::new();
    cs.write("east", "db.yaml", &db(&["10.1.0.1"]));
    let server = start(cs.dir(), &[]).await;
    assert_a(&server, "db.shop", ips(["10.1.0.1"])).await;
    assert_a(&server, "10-1-0-2.east.db.shop", Outcome::NxDomain).await;
    let before = serial(&server).await;

    cs.write("east", "db.yaml", &db(&["10.1.0.1", "10.1.0.2"]));
    eventually_a(&server, "db.shop", ips(["10.1.0.1", "10.1.0.2"])).await;
    eventually_a(&server, "10-1-0-2.east.db.shop", ips(["10.1.0.2"])).await;
    assert!(
        serial(&server).await > before,
        "a change bumps the SOA serial"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_file_is_served_and_a_deleted_one_is_gone() {
    let cs = Clusterset::new();
    cs.write("east", "web.yaml", &web("web", "10.96.0.1"));
    let server = start(cs.dir(), &[]).await;
    assert_a(&server, "api.shop", Outcome::NxDomain).await;
    assert_a(&server, "other", Outcome::NxDomain).await;

    cs.write("east", "api.yaml", &web("api", "10.96.0.2"));
    eventually_vip(&server, "api.shop").await;
    // A new namespace: its `<ns>.svc` name exists while it has a service.
    cs.write(
        "east",
        "other.yaml",
        &cluster_ip("other", "api", &["10.96.0.3"]).exported(),
    );
    eventually_vip(&server, "api.other").await;
    assert_a(&server, "other", Outcome::NoData).await;

    cs.remove("east", "api.yaml");
    cs.remove("east", "other.yaml");
    eventually_a(&server, "api.shop", Outcome::NxDomain).await;
    eventually_a(&server, "api.other", Outcome::NxDomain).await;
    assert_a(&server, "other", Outcome::NxDomain).await;
    assert_a(&server, "shop", Outcome::NoData).await;
    assert!(
        is_vip(&resolve(server.addr, &svc("web.shop"), A).await),
        "web untouched"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_renamed_over_another_is_picked_up() {
    let cs = Clusterset::new();
    let path = cs.write("east", "db.yaml", &db(&["10.1.0.1"]));
    let server = start(cs.dir(), &[]).await;
    assert_a(&server, "db.shop", ips(["10.1.0.1"])).await;

    // Hidden while written, as editors and `kubectl get > tmp && mv` do.
    let tmp = cs.write("east", ".db.yaml.tmp", &db(&["10.1.0.3"]));
    fs::rename(&tmp, &path).expect("renamed over");
    eventually_a(&server, "db.shop", ips(["10.1.0.3"])).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_cluster_folder_joins() {
    let cs = Clusterset::new();
    cs.write("east", "db.yaml", &db(&["10.1.0.1"]));
    let server = start(cs.dir(), &[]).await;
    let west = "10-2-0-1.west.db.shop";
    assert_a(&server, west, Outcome::NxDomain).await;

    cs.write("west", "db.yaml", &db(&["10.2.0.1"]));
    eventually_a(&server, "db.shop", ips(["10.1.0.1", "10.2.0.1"])).await;
    assert_a(&server, west, ips(["10.2.0.1"])).await;

    fs::remove_dir_all(cs.dir().join("west")).expect("cluster folder removed");
    eventually_a(&server, "db.shop", ips(["10.1.0.1"])).await;
    assert_a(&server, west, Outcome::NxDomain).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_file_keeps_its_last_good_state() {
    let cs = Clusterset::new();
    cs.write("east", "good.yaml", &web("good", "10.96.0.1"));
    cs.write("east", "bad.yaml", &web("bad", "10.96.0.2"));
    let server = start(cs.dir(), &[]).await;
    let good = resolve(server.addr, &svc("good.shop"), A).await;
    let bad = resolve(server.addr, &svc("bad.shop"), A).await;
    assert!(is_vip(&good) && is_vip(&bad));

    cs.write_text(
        "east",
        "bad.yaml",
        "apiVersion: v1\nkind: [Service\n  metadata: {",
    );
    // Written after the break: once it is served, the broken file was read too.
    cs.write("east", "later.yaml", &web("later", "10.96.0.3"));
    eventually_vip(&server, "later.shop").await;
    assert_a(&server, "good.shop", good).await;
    // The last good state of bad.yaml.
    assert_a(&server, "bad.shop", bad).await;

    let status = status_json(cs.dir(), &[]);
    let listed = problems(&status);
    assert!(listed.iter().any(|p| p.contains("bad.yaml")), "{listed:?}");
    assert!(import(&status, "shop", "good").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_document_does_not_hide_the_others() {
    let cs = Clusterset::new();
    let broken = cluster_ip("shop", "broken", &["10.96.0.999"]);
    let mut docs = db(&["10.1.0.1"]);
    docs.extend([broken.export(), broken]);
    cs.write("east", "all.yaml", &docs);
    let server = start(cs.dir(), &[]).await;
    assert_a(&server, "db.shop", ips(["10.1.0.1"])).await;
    assert_a(&server, "broken.shop", Outcome::NxDomain).await;
    let listed = problems(&status_json(cs.dir(), &[]));
    assert!(
        listed
            .iter()
            .any(|p| p.contains("all.yaml") && p.contains("10.96.0.999")),
        "{listed:?}"
    );

    // A bad address in the slice: its last good version stays; the new service in the same file is served.
    let mut docs = db(&["10.1.0.1", "10.1.0.x"]);
    docs.extend(web("api", "10.96.0.2"));
    cs.write("east", "all.yaml", &docs);
    eventually_vip(&server, "api.shop").await;
    assert_a(&server, "db.shop", ips(["10.1.0.1"])).await;
}

const OLD: &str = "2026-01-01T00:00:00Z";

/// Starts serving cluster `b`'s ClusterIP `web` (export `created`, if given),
/// then adds cluster `a` (sorting first) with a headless `web` exported with
/// the same `created`, and waits until `a` takes part. Returns the server and
/// `web`'s answer before `a` came.
async fn a_joins_b(cs: &Clusterset, created: Option<&str>) -> (Server, Outcome) {
    let stamp = |export: Doc| match created {
        Some(created) => export.created(created),
        None => export,
    };
    let web_b = cluster_ip("shop", "web", &["10.96.0.1"]);
    cs.write("b", "web.yaml", &[stamp(web_b.export()), web_b]);
    let server = start(cs.dir(), &["--cluster-targeting"]).await;
    let before = resolve(server.addr, &svc("web.shop"), A).await;
    assert!(is_vip(&before));

    let web_a = headless("shop", "web", &["IPv4"]);
    let endpoints = slice("shop", "web-a", "web", &[ep("10.1.0.1")]);
    cs.write("a", "web.yaml", &[stamp(web_a.export()), web_a, endpoints]);
    let a = svc("a.web.shop");
    eventually("cluster a takes part", true, || async {
        resolve(server.addr, &a, A).await != Outcome::NxDomain
    })
    .await;
    (server, before)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_seen_later_is_newer_whatever_its_folder() {
    let cs = Clusterset::new();
    // No timestamps: `a` sorts first but exports later, so `b` stays the oldest.
    let (server, vip) = a_joins_b(&cs, None).await;
    assert_eq!(
        resolve(server.addr, &svc("web.shop"), A).await,
        vip,
        "still ClusterSetIP, same VIP"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn equal_timestamps_fall_back_to_cluster_id_order() {
    let cs = Clusterset::new();
    // Same creationTimestamp: the tie goes to cluster id order (DESIGN §3),
    // whatever order the files were seen in, as a fresh load says.
    let (server, _) = a_joins_b(&cs, Some(OLD)).await;
    let status = status_json(cs.dir(), &[]);
    assert_eq!(the_import(&status, "shop", "web")["type"], "Headless");
    assert_eq!(
        resolve(server.addr, &svc("web.shop"), A).await,
        ips(["10.1.0.1"]),
        "a is the oldest: Headless"
    );
}

/// Sets the soft open-file limit of process `pid` with util-linux `prlimit`.
fn set_open_files(pid: u32, limit: u64) {
    let status = std::process::Command::new("prlimit")
        .args(["--pid", &pid.to_string(), &format!("--nofile={limit}:")])
        .status()
        .expect("prlimit runs");
    assert!(status.success(), "prlimit --pid {pid} --nofile={limit}");
}

/// Issue fault: a rescan that cannot read the directory (here: too many open
/// files) is tried again within seconds, not at the 30 s resync, even when
/// no further file event comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rescan_that_could_not_read_is_retried_soon() {
    let cs = Clusterset::new();
    cs.write("east", "db.yaml", &db(&["10.1.0.1"]));
    let server = spawn_binary(cs.dir(), &[]).await;
    let name = svc("db.shop");
    assert_eq!(resolve(server.addr, &name, A).await, ips(["10.1.0.1"]));

    // No new file descriptor can be opened: the edit's rescan fails.
    set_open_files(server.pid(), 3);
    cs.write("east", "db.yaml", &db(&["10.1.0.2"]));
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    assert_eq!(
        resolve(server.addr, &name, A).await,
        ips(["10.1.0.1"]),
        "the last good state is served while the directory cannot be read"
    );
    // Descriptors are available again; no file event tells the server.
    set_open_files(server.pid(), 1024);
    eventually_within(
        std::time::Duration::from_secs(5),
        "the edit after the failed rescan",
        ips(["10.1.0.2"]),
        || resolve(server.addr, &name, A),
    )
    .await;
}
