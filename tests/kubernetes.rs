//! Kubernetes mode end to end: three member clusters and a broker, each a
//! fake API server spoken to over HTTP by the real kube client, and one
//! clusterset-dns instance per member. Asserts DNS answers from every member,
//! the ServiceImports and EndpointSlices written into each member, and the
//! ServiceExport conditions, for the mcs-api conformance scenarios.

mod common;
#[path = "support/fake_apiserver/mod.rs"]
mod fake_apiserver;
#[path = "support/kube_clusterset.rs"]
mod kube_clusterset;

use std::collections::BTreeSet;
use std::net::IpAddr;

use common::*;
use hickory_proto::rr::RecordType;
use kube_clusterset::*;

const WEB: &str = "web.shop.svc.clusterset.local.";
const ALL: [&str; 3] = ["east", "north", "west"];

/// Three IPv4 members, each with the namespace `shop`.
async fn three() -> KubeClusterset {
    let set = KubeClusterset::start(&[("east", "IPv4"), ("north", "IPv4"), ("west", "IPv4")]).await;
    for member in &set.members {
        member.api.create_namespace("shop");
    }
    set
}

/// Waits until every member answers `name` `rtype` with `expected`.
async fn everywhere(set: &KubeClusterset, name: &str, rtype: RecordType, expected: Outcome) {
    for id in ALL {
        eventually_within(
            CONVERGE,
            &format!("{rtype} {name} from {id}"),
            expected.clone(),
            || set.resolve(id, name, rtype),
        )
        .await;
    }
}

/// The one VIP every member's ServiceImport agrees on.
async fn agreed_vip(set: &KubeClusterset, ns: &str, name: &str) -> IpAddr {
    let mut seen = BTreeSet::new();
    for id in ALL {
        eventually_within(
            CONVERGE,
            &format!("ServiceImport {ns}/{name} in {id}"),
            1,
            || async { set.import(id, ns, name).map_or(0, |i| i.spec.ips.len()) },
        )
        .await;
        seen.extend(import_ips(&set.import(id, ns, name).unwrap()));
    }
    assert_eq!(seen.len(), 1, "one VIP for the clusterset: {seen:?}");
    seen.into_iter().next().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_lives_while_any_cluster_exports() {
    let set = three().await;
    set.apply("east", cluster_ip("shop", "web", &["10.1.0.10"]).exported());
    set.apply("west", cluster_ip("shop", "web", &["10.3.0.10"]).exported());
    let vip = agreed_vip(&set, "shop", "web").await;
    assert!(in_v4_pool(&vip), "{vip}");
    everywhere(&set, WEB, RecordType::A, Outcome::Ips([vip].into())).await;
    for id in ALL {
        eventually_within(
            CONVERGE,
            "both clusters in the import",
            vec!["east".to_owned(), "west".to_owned()],
            || async {
                set.import(id, "shop", "web")
                    .map(|i| status_clusters(&i))
                    .unwrap_or_default()
            },
        )
        .await;
        let import = set.import(id, "shop", "web").unwrap();
        assert_eq!(import.spec.type_, "ClusterSetIP");
        assert_eq!(import.spec.ip_families, vec!["IPv4"]);
        assert_eq!(import.spec.ports.len(), 1);
    }
    assert_eq!(
        set.claims(),
        [(vip.to_string(), "shop/web".to_owned())].into()
    );

    // The cluster that allocated leaves: the VIP stays.
    set.unexport("east", "shop", "web");
    for id in ALL {
        eventually_within(
            CONVERGE,
            "west alone in the import",
            vec!["west".to_owned()],
            || async {
                set.import(id, "shop", "web")
                    .map(|i| status_clusters(&i))
                    .unwrap_or_default()
            },
        )
        .await;
    }
    assert_eq!(agreed_vip(&set, "shop", "web").await, vip);
    everywhere(&set, WEB, RecordType::A, Outcome::Ips([vip].into())).await;

    // The last export goes: the import, its VIP and its claim go everywhere.
    set.unexport("west", "shop", "web");
    everywhere(&set, WEB, RecordType::A, Outcome::NxDomain).await;
    for id in ALL {
        eventually_within(CONVERGE, "import deleted", false, || async {
            set.import(id, "shop", "web").is_some()
        })
        .await;
    }
    eventually_within(CONVERGE, "claims released", BTreeSet::new(), || async {
        set.claims()
    })
    .await;
}

/// `(type, status, reason)` triples, for comparing conditions.
fn conds(list: &[(&str, &str, &str)]) -> Vec<(String, String, String)> {
    list.iter()
        .map(|(t, s, r)| ((*t).to_owned(), (*s).to_owned(), (*r).to_owned()))
        .collect()
}

/// A Service and its ServiceExport created at `created` (RFC 3339).
fn exported_at(service: Doc, created: &str) -> Vec<Doc> {
    vec![service.export().created(created), service]
}

const OLD: &str = "2026-01-01T00:00:00Z";
const NEW: &str = "2026-02-01T00:00:00Z";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headless_endpoints_are_served_and_mirrored_then_cleaned_up() {
    let set = three().await;
    let db = || headless("shop", "db", &["IPv4"]);
    set.apply("east", db().exported());
    set.apply(
        "east",
        [slice(
            "shop",
            "db-east",
            "db",
            &[ep("10.1.0.1").host("db-0"), ep("10.1.0.2").not_ready()],
        )],
    );
    set.apply("west", db().exported());
    set.apply("west", [slice("shop", "db-west", "db", &[ep("10.3.0.1")])]);

    let name = "db.shop.svc.clusterset.local.";
    everywhere(&set, name, RecordType::A, ips(["10.1.0.1", "10.3.0.1"])).await;
    everywhere(
        &set,
        "db-0.east.db.shop.svc.clusterset.local.",
        RecordType::A,
        ips(["10.1.0.1"]),
    )
    .await;
    everywhere(
        &set,
        "10-3-0-1.west.db.shop.svc.clusterset.local.",
        RecordType::A,
        ips(["10.3.0.1"]),
    )
    .await;
    let (targets, _) = srv(
        set.member("north").dns(),
        "_http._tcp.db.shop.svc.clusterset.local.",
    )
    .await;
    assert_eq!(
        targets,
        pairs([
            ("db-0.east.db.shop.svc.clusterset.local.", 80),
            ("10-3-0-1.west.db.shop.svc.clusterset.local.", 80),
        ])
    );
    let east_slice = (
        "east".to_owned(),
        vec!["10.1.0.1".to_owned(), "10.1.0.2".to_owned()],
    );
    let west_slice = ("west".to_owned(), vec!["10.3.0.1".to_owned()]);
    // Each member mirrors the other clusters' endpoints (not-ready ones too), never its own.
    for (id, expected) in [
        (
            "north",
            BTreeSet::from([east_slice.clone(), west_slice.clone()]),
        ),
        ("east", BTreeSet::from([west_slice.clone()])),
        ("west", BTreeSet::from([east_slice.clone()])),
    ] {
        eventually_within(
            CONVERGE,
            &format!("MCS slices in {id}"),
            expected,
            || async { set.mcs_slices(id, "shop", "db") },
        )
        .await;
    }
    let import = set.import("north", "shop", "db").unwrap();
    assert_eq!(
        (import.spec.type_.as_str(), import.spec.ips.len()),
        ("Headless", 0)
    );

    // Unexport: east's endpoints leave DNS, the mirrors and the broker.
    set.unexport("east", "shop", "db");
    everywhere(&set, name, RecordType::A, ips(["10.3.0.1"])).await;
    everywhere(
        &set,
        "db-0.east.db.shop.svc.clusterset.local.",
        RecordType::A,
        Outcome::NxDomain,
    )
    .await;
    eventually_within(
        CONVERGE,
        "north mirrors west only",
        BTreeSet::from([west_slice]),
        || async { set.mcs_slices("north", "shop", "db") },
    )
    .await;
    let from_east = |s: &serde_json::Value| {
        s["metadata"]["labels"]["multicluster.kubernetes.io/source-cluster"] == "east"
    };
    eventually_within(
        CONVERGE,
        "east's slices gone from the broker",
        0,
        || async {
            set.broker_objects("discovery.k8s.io", "endpointslices")
                .iter()
                .filter(|s| from_east(s))
                .count()
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ports_are_merged_and_differences_are_port_conflicts() {
    let set = three().await;
    let web = |ip| cluster_ip("shop", "web", &[ip]);
    set.apply("east", exported_at(web("10.1.0.10"), OLD));
    set.apply(
        "west",
        exported_at(
            web("10.3.0.10").ports(&[("http", 80, "TCP"), ("metrics", 9090, "TCP")]),
            NEW,
        ),
    );
    for id in ALL {
        eventually_within(
            CONVERGE,
            &format!("union of ports in {id}"),
            vec![80, 9090],
            || async {
                let mut ports: Vec<i32> = set
                    .import(id, "shop", "web")
                    .map(|i| i.spec.ports.iter().map(|p| p.port).collect())
                    .unwrap_or_default();
                ports.sort();
                ports
            },
        )
        .await;
    }
    eventually_within(
        CONVERGE,
        "west's export conditions",
        conds(&[
            ("Valid", "True", "Valid"),
            ("Ready", "True", "Exported"),
            ("Conflict", "True", "PortConflict"),
        ]),
        || async { set.export_conditions("west", "shop", "web") },
    )
    .await;
    assert!(
        set.export_message("west", "shop", "web", "Conflict")
            .contains("east")
    );
    eventually_within(
        CONVERGE,
        "east's export conditions",
        conds(&[
            ("Valid", "True", "Valid"),
            ("Ready", "True", "Exported"),
            ("Conflict", "False", "NoConflicts"),
        ]),
        || async { set.export_conditions("east", "shop", "web") },
    )
    .await;
    let (targets, _) = srv(set.member("north").dns(), "web.shop.svc.clusterset.local.").await;
    assert_eq!(
        targets.iter().map(|t| t.1).collect::<BTreeSet<_>>(),
        [80, 9090].into()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn type_conflicts_external_names_and_exported_metadata() {
    let set = three().await;
    let labelled = |doc: Doc| {
        doc.set("spec.exportedLabels", serde_json::json!({"tier": "front"}))
            .set(
                "spec.exportedAnnotations",
                serde_json::json!({"team": "shop"}),
            )
    };
    let web = cluster_ip("shop", "web", &["10.1.0.10"]);
    set.apply("east", [labelled(web.export()).created(OLD), web]);
    let web_headless = headless("shop", "web", &["IPv4"]);
    set.apply("west", [web_headless.export().created(NEW), web_headless]);
    set.apply(
        "north",
        external_name("shop", "ext", "example.com").exported(),
    );

    eventually_within(
        CONVERGE,
        "west's type conflict",
        conds(&[
            ("Valid", "True", "Valid"),
            ("Ready", "True", "Exported"),
            (
                "Conflict",
                "True",
                "TypeConflict,LabelsConflict,AnnotationsConflict",
            ),
        ]),
        || async { set.export_conditions("west", "shop", "web") },
    )
    .await;
    for id in ALL {
        eventually_within(
            CONVERGE,
            &format!("exported metadata in {id}"),
            (Some("front".to_owned()), Some("shop".to_owned())),
            || async {
                let import = set.import(id, "shop", "web");
                let labels = import
                    .as_ref()
                    .and_then(|i| i.metadata.labels.clone())
                    .unwrap_or_default();
                let annotations = import
                    .as_ref()
                    .and_then(|i| i.metadata.annotations.clone())
                    .unwrap_or_default();
                (
                    labels.get("tier").cloned(),
                    annotations.get("team").cloned(),
                )
            },
        )
        .await;
        assert_eq!(
            set.import(id, "shop", "web").unwrap().spec.type_,
            "ClusterSetIP"
        );
    }
    everywhere(
        &set,
        WEB,
        RecordType::A,
        Outcome::Ips([agreed_vip(&set, "shop", "web").await].into()),
    )
    .await;

    eventually_within(
        CONVERGE,
        "ExternalName is invalid",
        conds(&[
            ("Valid", "False", "InvalidServiceType"),
            ("Ready", "False", "Failed"),
        ]),
        || async { set.export_conditions("north", "shop", "ext") },
    )
    .await;
    everywhere(
        &set,
        "ext.shop.svc.clusterset.local.",
        RecordType::A,
        Outcome::NxDomain,
    )
    .await;
    assert!(ALL.iter().all(|id| set.import(id, "shop", "ext").is_none()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imports_appear_only_where_the_namespace_exists() {
    let set = KubeClusterset::start(&[("east", "IPv4"), ("north", "IPv4")]).await;
    set.apply("east", cluster_ip("shop", "web", &["10.1.0.10"]).exported());
    // DNS answers everywhere; north has no namespace `shop`, so no ServiceImport there yet.
    eventually_within(CONVERGE, "north answers", true, || async {
        is_vip(&set.resolve("north", WEB, RecordType::A).await)
    })
    .await;
    assert!(set.import("north", "shop", "web").is_none());
    set.member("north").api.create_namespace("shop");
    eventually_within(
        CONVERGE,
        "import once the namespace exists",
        true,
        || async { set.import("north", "shop", "web").is_some() },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dual_stack_families_are_intersected_and_filtered_per_cluster() {
    let set =
        KubeClusterset::start(&[("east", "IPv4,IPv6"), ("north", "IPv4"), ("west", "IPv6")]).await;
    for member in &set.members {
        member.api.create_namespace("shop");
    }
    // Dual-stack in east (older), IPv6-only in west: the import is IPv6.
    set.apply(
        "east",
        exported_at(cluster_ip("shop", "dual", &["10.1.0.5", "fd00:1::5"]), OLD),
    );
    set.apply(
        "west",
        exported_at(cluster_ip("shop", "dual", &["fd00:3::5"]), NEW),
    );
    let name = "dual.shop.svc.clusterset.local.";
    for id in ["east", "west"] {
        eventually_within(
            CONVERGE,
            &format!("IPv6 import in {id}"),
            vec!["IPv6".to_owned()],
            || async {
                set.import(id, "shop", "dual")
                    .map(|i| i.spec.ip_families)
                    .unwrap_or_default()
            },
        )
        .await;
        let vip = import_ips(&set.import(id, "shop", "dual").unwrap());
        assert!(vip.len() == 1 && in_v6_pool(&vip[0]), "{vip:?}");
        eventually_within(
            CONVERGE,
            "AAAA is the VIP",
            Outcome::Ips(vip.iter().copied().collect()),
            || set.resolve(id, name, RecordType::AAAA),
        )
        .await;
        assert_eq!(set.resolve(id, name, RecordType::A).await, Outcome::NoData);
    }
    // North supports IPv4 only: nothing left of the import's families.
    eventually_within(
        CONVERGE,
        "north's import is not ready",
        Some(("False".to_owned(), "IPFamilyNotSupported".to_owned())),
        || async {
            let import = set.import("north", "shop", "dual")?;
            let ready = import
                .status?
                .conditions
                .into_iter()
                .find(|c| c.type_ == "Ready")?;
            Some((ready.status, ready.reason))
        },
    )
    .await;
    let north = set.import("north", "shop", "dual").unwrap();
    assert!(north.spec.ips.is_empty() && north.spec.ip_families.is_empty());
    assert_eq!(
        set.resolve("north", name, RecordType::AAAA).await,
        Outcome::NoData
    );

    // IPv4-only in north (older), IPv6-only in west: west shares nothing and is left out.
    set.apply(
        "north",
        exported_at(cluster_ip("shop", "split", &["10.2.0.7"]), OLD),
    );
    set.apply(
        "west",
        exported_at(cluster_ip("shop", "split", &["fd00:3::7"]), NEW),
    );
    eventually_within(
        CONVERGE,
        "west's IPFamilyConflict",
        conds(&[
            ("Valid", "True", "Valid"),
            ("Ready", "False", "Failed"),
            ("Conflict", "True", "IPFamilyConflict"),
        ]),
        || async { set.export_conditions("west", "shop", "split") },
    )
    .await;
    eventually_within(
        CONVERGE,
        "north's import is IPv4 from north alone",
        (vec!["IPv4".to_owned()], vec!["north".to_owned()]),
        || async {
            set.import("north", "shop", "split")
                .map(|i| (i.spec.ip_families.clone(), status_clusters(&i)))
                .unwrap_or_default()
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_vips_names_resolve_to_cluster_ips_local_first() {
    let set = three().await;
    let no_vip = |doc: Doc| {
        doc.set(
            "metadata.annotations",
            serde_json::json!({"clusterset-dns.io/use-clusterset-ip": "false"}),
        )
    };
    for (id, ip) in [("east", "10.1.0.20"), ("west", "10.3.0.20")] {
        let svc = cluster_ip("shop", "plain", &[ip]);
        set.apply(id, [no_vip(svc.export()).created(OLD), svc]);
    }
    let name = "plain.shop.svc.clusterset.local.";
    everywhere(&set, name, RecordType::A, ips(["10.1.0.20", "10.3.0.20"])).await;
    for (id, first) in [("east", "10.1.0.20"), ("west", "10.3.0.20")] {
        let answer = query(set.member(id).dns(), name, RecordType::A).await;
        assert_eq!(
            answer.answers[0].data.ip_addr().unwrap().to_string(),
            first,
            "{id} answers its own first"
        );
    }
    assert!(
        set.import("north", "shop", "plain")
            .unwrap()
            .spec
            .ips
            .is_empty()
    );
    assert!(set.claims().is_empty(), "no VIP was claimed");

    // North exports with VIPs (the default), younger: a ClusterSetIPConflict.
    set.apply(
        "north",
        exported_at(cluster_ip("shop", "plain", &["10.2.0.20"]), NEW),
    );
    eventually_within(
        CONVERGE,
        "north's conflict",
        conds(&[
            ("Valid", "True", "Valid"),
            ("Ready", "True", "Exported"),
            ("Conflict", "True", "ClusterSetIPConflict"),
        ]),
        || async { set.export_conditions("north", "shop", "plain") },
    )
    .await;
    everywhere(
        &set,
        name,
        RecordType::A,
        ips(["10.1.0.20", "10.2.0.20", "10.3.0.20"]),
    )
    .await;
}
