//! Version skew of the MCS CRDs in Kubernetes mode (three members and a
//! broker, each a fake API server spoken to by the real kube client).
//! Clusters of one clusterset run different CRD releases: mcs-api v0.5
//! serves `v1alpha1` and `v1beta1` (stored), older releases `v1alpha1`
//! only, and a CRD may stop serving a version. Each API server is read and
//! written at `v1beta1` where it serves it, else `v1alpha1`, and followed
//! when that changes. Exports must never vanish on that account: a kind
//! served at no version is unknown, not empty, and is reported (metric and
//! log line).

use std::time::Duration;

use clusterset_dns::k8s::crd::EndpointSliceObjects;
use fake_apiserver::{FakeApiServer, ResourceType};
use hickory_proto::rr::RecordType;
use serde_json::json;
use test_support::kube_clusterset::*;

use crate::common::*;

const MCS: &str = "multicluster.x-k8s.io";
const DB: &str = "db.shop.svc.clusterset.local.";

/// Which versions of the two MCS kinds an API server serves.
#[derive(Clone, Copy, Debug)]
enum Crds {
    /// mcs-api v0.5 (and `clusterset-dns crds`): `v1alpha1` and `v1beta1`.
    Both,
    /// An mcs-api release before v0.5: `v1alpha1` only.
    V1alpha1Only,
    /// A release that serves `v1beta1` only (upstream mcs-api's CRDs can).
    V1beta1Only,
}

/// Makes `api` serve the MCS kinds as `crds` says (the fake serves both to begin with).
fn serve(api: &FakeApiServer, crds: Crds) {
    let drop = match crds {
        Crds::Both => return,
        Crds::V1alpha1Only => "v1beta1",
        Crds::V1beta1Only => "v1alpha1",
    };
    unserve(api, drop);
}

/// Makes `api` stop serving `version` of both kinds, keeping their objects.
fn unserve(api: &FakeApiServer, version: &str) {
    for plural in ["serviceexports", "serviceimports"] {
        api.unserve(MCS, version, plural);
    }
}

/// Serves both versions of both kinds again.
fn serve_both_again(api: &FakeApiServer) {
    for (plural, kind) in [
        ("serviceexports", "ServiceExport"),
        ("serviceimports", "ServiceImport"),
    ] {
        api.register(
            ResourceType::namespaced(MCS, "v1alpha1", plural, kind)
                .with_version("v1beta1")
                .custom(true),
        );
    }
}

/// Three IPv4 members with the namespace `shop`, the broker's and each
/// member's CRDs as given.
async fn three(broker: Crds, members: [Crds; 3]) -> KubeClusterset {
    let ids = [("east", "IPv4"), ("north", "IPv4"), ("west", "IPv4")];
    let set = KubeClusterset::start_prepared(&ids, &[], |id, api| {
        let crds = match id {
            None => broker,
            Some(id) => members[ALL.iter().position(|m| *m == id).unwrap()],
        };
        serve(api, crds);
    })
    .await;
    for member in &set.members {
        member.api.create_namespace("shop");
    }
    set
}

/// `id` exports a headless `db` with one ready pod, its ServiceExport
/// written as `multicluster.x-k8s.io/<version>`.
fn export_db(set: &KubeClusterset, id: &str, version: &str, pod: &str) {
    let service = headless("shop", "db", &["IPv4"]);
    let export = service
        .export()
        .set("apiVersion", json!(format!("{MCS}/{version}")));
    set.apply(id, [export, service]);
    set.apply(id, [slice("shop", &format!("db-{id}"), "db", &[ep(pod)])]);
}

/// Polls `id` until `db` resolves to `expected`.
async fn answers(set: &KubeClusterset, id: &str, expected: Outcome) {
    eventually_within(CONVERGE, &format!("A {DB} from {id}"), expected, || {
        set.resolve(id, DB, RecordType::A)
    })
    .await;
}

/// `clusterset_dns_watch_not_served` of the watch of `resource`
/// (`serviceexports`, `broker/serviceimports`), as replica `r` of member
/// `id` reports it.
async fn not_served(set: &KubeClusterset, id: &str, r: usize, resource: &str) -> f64 {
    let source = if resource.starts_with("broker/") {
        resource.to_owned()
    } else {
        format!("{id}/{resource}")
    };
    let ops = set.member(id).servers[r].running().metrics_addr;
    let series =
        format!("clusterset_dns_watch_not_served{{resource=\"{resource}\",source=\"{source}\"}}");
    scrape(ops, &series).await
}

/// Names of the export records on the broker.
fn export_records(set: &KubeClusterset) -> Vec<String> {
    let mut names: Vec<String> = set
        .broker_objects(MCS, "serviceimports")
        .iter()
        .filter(|r| r["metadata"]["labels"]["clusterset-dns.io/role"] == "export")
        .map(|r| {
            r["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    names.sort();
    names
}

/// Exports pass between members and brokers of every CRD release: a member
/// with mcs-api v0.5's CRDs whose export is written as `v1beta1`, a member
/// with `v1alpha1` only, one with `v1beta1` only, and a broker with any of
/// the three; every member gets the import, its status and the answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exports_pass_between_members_and_brokers_of_every_crd_release() {
    for broker in [Crds::Both, Crds::V1alpha1Only, Crds::V1beta1Only] {
        let set = three(broker, [Crds::Both, Crds::V1beta1Only, Crds::V1alpha1Only]).await;
        export_db(&set, "east", "v1beta1", "10.1.0.40");
        export_db(&set, "west", "v1alpha1", "10.3.0.40");
        for id in ALL {
            answers(&set, id, ips(["10.1.0.40", "10.3.0.40"])).await;
            eventually_within(
                CONVERGE,
                &format!("{id}'s import (broker {broker:?})"),
                (
                    vec!["east".to_owned(), "west".to_owned()],
                    Some(EndpointSliceObjects::Present),
                    2,
                ),
                || async {
                    // One MCS EndpointSlice per exporting cluster; the status
                    // says Present from the first one written, so both are
                    // awaited together.
                    let slices = set.mcs_slice_objects(id, "shop", "db").len();
                    let Some(import) = set.import(id, "shop", "db") else {
                        return (Vec::new(), None, slices);
                    };
                    let present = import
                        .status
                        .as_ref()
                        .and_then(|s| s.endpoint_slice_objects);
                    (status_clusters(&import), present, slices)
                },
            )
            .await;
        }
        for id in ["east", "west"] {
            let conditions = set.export_conditions(id, "shop", "db");
            assert!(
                conditions.contains(&("Ready".into(), "True".into(), "Exported".into())),
                "{id}'s export status (broker {broker:?}): {conditions:?}"
            );
        }
    }
}

/// A member whose CRDs change the versions they serve follows them: from
/// both to `v1alpha1` only (a rollback to a release before mcs-api v0.5) it
/// reads and writes at `v1alpha1` and reports nothing missing. Served at no
/// version (`served: false` everywhere) it keeps what it knew: it still
/// publishes its export (a new endpoint of it reaches the others), its
/// export record stays on the broker, and so do the others' imports; it
/// says so in `clusterset_dns_watch_not_served` and a log line naming the
/// CRD. A replica started meanwhile never completes its first sync, so it
/// writes nothing and deletes nothing. Served again, everything is read
/// again: an unexport then goes everywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_whose_crds_change_versions_follows_them_and_loses_no_export() {
    let mut set = three(Crds::Both, [Crds::Both; 3]).await;
    export_db(&set, "east", "v1alpha1", "10.1.0.40");
    export_db(&set, "north", "v1beta1", "10.2.0.40");
    let both = ips(["10.1.0.40", "10.2.0.40"]);
    for id in ALL {
        answers(&set, id, both.clone()).await;
    }
    let records = export_records(&set);
    assert_eq!(records, ["db.shop.east", "db.shop.north"]);

    let north = 1;
    serve(&set.members[north].api, Crds::V1alpha1Only);
    // The real API server ends the watches of a version it stops serving.
    set.members[north].api.cut_watches();
    set.apply(
        "north",
        [slice(
            "shop",
            "db-north",
            "db",
            &[ep("10.2.0.40"), ep("10.2.0.41")],
        )],
    );
    let three_pods = ips(["10.1.0.40", "10.2.0.40", "10.2.0.41"]);
    for id in ALL {
        answers(&set, id, three_pods.clone()).await;
    }
    // A new export is read, and its import and status written, at v1alpha1.
    set.apply(
        "north",
        cluster_ip("shop", "api", &["10.2.0.50"]).exported(),
    );
    eventually_within(CONVERGE, "north imports api", true, || async {
        set.import("north", "shop", "api").is_some()
    })
    .await;
    eventually_within(CONVERGE, "north's api export is Ready", true, || async {
        let conditions = set.export_conditions("north", "shop", "api");
        conditions.contains(&("Ready".into(), "True".into(), "Exported".into()))
    })
    .await;
    for resource in ["serviceexports", "written/serviceimports"] {
        assert_eq!(
            not_served(&set, "north", 0, resource).await,
            0.0,
            "{resource}"
        );
    }

    unserve(&set.members[north].api, "v1alpha1");
    set.members[north].api.cut_watches();
    for resource in ["serviceexports", "written/serviceimports"] {
        eventually_within(CONVERGE, &format!("north reports {resource}"), 1.0, || {
            not_served(&set, "north", 0, resource)
        })
        .await;
    }
    // North's Service and slices are still read: a new pod of its export
    // reaches every member, so its export was not forgotten.
    set.apply(
        "north",
        [slice(
            "shop",
            "db-north",
            "db",
            &[ep("10.2.0.40"), ep("10.2.0.41"), ep("10.2.0.42")],
        )],
    );
    let four_pods = ips(["10.1.0.40", "10.2.0.40", "10.2.0.41", "10.2.0.42"]);
    for id in ALL {
        answers(&set, id, four_pods.clone()).await;
    }
    let records = export_records(&set);
    assert_eq!(records, ["api.shop.north", "db.shop.east", "db.shop.north"]);

    // A restarted replica cannot list ServiceExports: no first sync.
    set.kill_replica(north, 0);
    set.add_replica_unsynced(north).await;
    eventually_within(CONVERGE, "the new replica reports it", 1.0, || {
        not_served(&set, "north", 0, "serviceexports")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(!set.members[north].servers[0].running().index.is_synced());
    assert_eq!(
        export_records(&set),
        records,
        "nothing deleted on the broker"
    );
    for id in ["east", "west"] {
        assert_eq!(set.resolve(id, DB, RecordType::A).await, four_pods);
        let import = set.import(id, "shop", "db").expect("the import stays");
        assert_eq!(status_clusters(&import), ["east", "north"]);
    }

    serve_both_again(&set.members[north].api);
    eventually_within(CONVERGE, "served again", 0.0, || {
        not_served(&set, "north", 0, "serviceexports")
    })
    .await;
    set.unexport("north", "shop", "db");
    for id in ALL {
        answers(&set, id, ips(["10.1.0.40"])).await;
    }
    assert_eq!(export_records(&set), ["api.shop.north", "db.shop.east"]);
}

/// A broker whose ServiceImport CRD stops serving `v1beta1`: every member
/// follows it to `v1alpha1`. Then served at no version: every member
/// reports `broker/serviceimports` not served and keeps the export records
/// it read, so no member's import, slices or answers go; endpoints still
/// flow (the broker's EndpointSlices are still read). Served again, the
/// records are read again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_whose_crd_serves_no_version_makes_no_member_delete_anything() {
    let set = three(Crds::Both, [Crds::Both; 3]).await;
    export_db(&set, "east", "v1alpha1", "10.1.0.40");
    export_db(&set, "west", "v1alpha1", "10.3.0.40");
    for id in ALL {
        answers(&set, id, ips(["10.1.0.40", "10.3.0.40"])).await;
    }
    set.broker.unserve(MCS, "v1beta1", "serviceimports");
    set.broker.cut_watches();
    set.apply("north", headless("shop", "db", &["IPv4"]).exported());
    set.apply(
        "north",
        [slice("shop", "db-north", "db", &[ep("10.2.0.40")])],
    );
    for id in ALL {
        answers(&set, id, ips(["10.1.0.40", "10.2.0.40", "10.3.0.40"])).await;
        assert_eq!(not_served(&set, id, 0, "broker/serviceimports").await, 0.0);
    }
    assert_eq!(
        export_records(&set),
        ["db.shop.east", "db.shop.north", "db.shop.west"],
        "north's record was written at v1alpha1"
    );
    set.unexport("north", "shop", "db");
    for id in ALL {
        answers(&set, id, ips(["10.1.0.40", "10.3.0.40"])).await;
    }

    set.broker.unserve(MCS, "v1alpha1", "serviceimports");
    set.broker.cut_watches();
    for id in ALL {
        eventually_within(CONVERGE, &format!("{id} reports the broker"), 1.0, || {
            not_served(&set, id, 0, "broker/serviceimports")
        })
        .await;
    }
    set.apply(
        "east",
        [slice(
            "shop",
            "db-east",
            "db",
            &[ep("10.1.0.40"), ep("10.1.0.41")],
        )],
    );
    let three_pods = ips(["10.1.0.40", "10.1.0.41", "10.3.0.40"]);
    for id in ALL {
        answers(&set, id, three_pods.clone()).await;
        // The import stays; north leaves its status and its slice goes, each
        // written in its own time after the answers change.
        eventually_within(
            CONVERGE,
            &format!("{id}'s import and MCS slices"),
            (vec!["east".to_owned(), "west".to_owned()], 2),
            || async {
                let import = set.import(id, "shop", "db").expect("the import stays");
                let slices = set.mcs_slice_objects(id, "shop", "db").len();
                (status_clusters(&import), slices)
            },
        )
        .await;
    }
    assert_eq!(export_records(&set), ["db.shop.east", "db.shop.west"]);

    set.broker.register(
        ResourceType::namespaced(MCS, "v1alpha1", "serviceimports", "ServiceImport")
            .with_version("v1beta1")
            .custom(true),
    );
    for id in ALL {
        eventually_within(CONVERGE, &format!("{id}: served again"), 0.0, || {
            not_served(&set, id, 0, "broker/serviceimports")
        })
        .await;
    }
    set.unexport("west", "shop", "db");
    for id in ALL {
        answers(&set, id, ips(["10.1.0.40", "10.1.0.41"])).await;
    }
}
