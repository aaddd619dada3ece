//! Kubernetes mode end to end: three member clusters and a broker, each a
//! fake API server spoken to over HTTP by the real kube client, and one
//! clusterset-dns instance per member. Asserts DNS answers from every member,
//! the ServiceImports and EndpointSlices written into each member, and the
//! ServiceExport conditions, for the mcs-api conformance scenarios.

use std::collections::BTreeSet;
use std::net::IpAddr;

use clusterset_dns::cli::Command as CliCommand;
use clusterset_dns::k8s::crd::EndpointSliceObjects;
use hickory_proto::rr::RecordType;
use test_support::kube_clusterset::*;

use crate::common::*;

const WEB: &str = "web.shop.svc.clusterset.local.";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_lives_while_any_cluster_exports() {
    let set = KubeClusterset::three(&[]).await;
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
    import_clusters_become(&set, "shop", "web", "west alone in the import", &["west"]).await;
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

/// Waits until a member's ServiceExport has these `(type, status, reason)` conditions.
async fn conditions_become(
    set: &KubeClusterset,
    id: &str,
    ns: &str,
    name: &str,
    what: &str,
    expected: &[(&str, &str, &str)],
) {
    let expected: Vec<(String, String, String)> = expected
        .iter()
        .map(|(t, s, r)| ((*t).to_owned(), (*s).to_owned(), (*r).to_owned()))
        .collect();
    eventually_within(CONVERGE, what, expected, || async {
        set.export_conditions(id, ns, name)
    })
    .await;
}

/// A Service and its ServiceExport created at `created` (RFC 3339).
fn exported_at(service: Doc, created: &str) -> Vec<Doc> {
    vec![service.export().created(created), service]
}

const OLD: &str = "2026-01-01T00:00:00Z";
const NEW: &str = "2026-02-01T00:00:00Z";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headless_endpoints_are_served_and_mirrored_then_cleaned_up() {
    let set = KubeClusterset::three(&[]).await;
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
    // Each member has every exporting cluster's endpoints (not-ready ones
    // too), its own included (KEP-1645).
    for id in ALL {
        eventually_within(
            CONVERGE,
            &format!("MCS slices in {id}"),
            BTreeSet::from([east_slice.clone(), west_slice.clone()]),
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
    let set = KubeClusterset::three(&[]).await;
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
    conditions_become(
        &set,
        "west",
        "shop",
        "web",
        "west's export conditions",
        &[
            ("Valid", "True", "Valid"),
            ("Ready", "True", "Exported"),
            ("Conflict", "True", "PortConflict"),
        ],
    )
    .await;
    // KEP-1645: the oldest export is in conflict too (upstream conformance
    // checks it first), and each message names the clusters involved.
    conditions_become(
        &set,
        "east",
        "shop",
        "web",
        "east's export conditions",
        &[
            ("Valid", "True", "Valid"),
            ("Ready", "True", "Exported"),
            ("Conflict", "True", "PortConflict"),
        ],
    )
    .await;
    for id in ["east", "west"] {
        let message = set.export_message(id, "shop", "web", "Conflict");
        assert!(
            message.contains("oldest export, in cluster east")
                && message.contains("differing: west (PortConflict)"),
            "{id}: {message}"
        );
    }
    let (targets, _) = srv(set.member("north").dns(), "web.shop.svc.clusterset.local.").await;
    assert_eq!(
        targets.iter().map(|t| t.1).collect::<BTreeSet<_>>(),
        [80, 9090].into()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn type_conflicts_external_names_and_exported_metadata() {
    let set = KubeClusterset::three(&[]).await;
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

    for id in ["east", "west"] {
        conditions_become(
            &set,
            id,
            "shop",
            "web",
            &format!("{id}'s type conflict (KEP-1645: on every export)"),
            &[
                ("Valid", "True", "Valid"),
                ("Ready", "True", "Exported"),
                (
                    "Conflict",
                    "True",
                    "TypeConflict,LabelsConflict,AnnotationsConflict",
                ),
            ],
        )
        .await;
    }
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

    conditions_become(
        &set,
        "north",
        "shop",
        "ext",
        "ExternalName is invalid",
        &[
            ("Valid", "False", "InvalidServiceType"),
            ("Ready", "False", "Failed"),
        ],
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

/// KEP-1645 "Namespace sameness" and the MCS DNS specification (records
/// come from the cluster's ServiceImports): a member without the namespace
/// has no ServiceImport and answers NXDOMAIN for every name of the service,
/// until the namespace exists; and again once it is deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imports_and_names_exist_only_where_the_namespace_exists() {
    let set = KubeClusterset::start(&[("east", "IPv4"), ("north", "IPv4")]).await;
    set.apply(
        "east",
        cluster_ip("billing", "cart", &["10.1.0.10"]).exported(),
    );
    let cart = "cart.billing.svc.clusterset.local.";
    let srv_name = "_http._tcp.cart.billing.svc.clusterset.local.";
    let vip = agreed_in(&set, "east", "billing", "cart").await;
    assert_eq!(
        set.resolve("east", cart, RecordType::A).await,
        Outcome::Ips([vip].into())
    );
    for (name, rtype) in [
        (cart, RecordType::A),
        (cart, RecordType::AAAA),
        (srv_name, RecordType::SRV),
        ("billing.svc.clusterset.local.", RecordType::A),
    ] {
        assert_eq!(
            set.resolve("north", name, rtype).await,
            Outcome::NxDomain,
            "{rtype} {name} from north, which has no namespace billing"
        );
    }
    assert!(set.import("north", "billing", "cart").is_none());

    set.member("north").api.create_namespace("billing");
    eventually_within(
        CONVERGE,
        "north answers once the namespace exists",
        Outcome::Ips([vip].into()),
        || set.resolve("north", cart, RecordType::A),
    )
    .await;
    eventually_within(
        CONVERGE,
        "import once the namespace exists",
        true,
        || async { set.import("north", "billing", "cart").is_some() },
    )
    .await;

    assert!(
        set.member("north")
            .api
            .remove_raw("", "namespaces", None, "billing")
    );
    eventually_within(CONVERGE, "north stops answering", Outcome::NxDomain, || {
        set.resolve("north", cart, RecordType::A)
    })
    .await;
    assert_eq!(
        set.resolve("east", cart, RecordType::A).await,
        Outcome::Ips([vip].into())
    );
}

/// The VIP of a member's ServiceImport, once it has one.
async fn agreed_in(set: &KubeClusterset, id: &str, ns: &str, name: &str) -> IpAddr {
    eventually_within(
        CONVERGE,
        &format!("a VIP for {ns}/{name} in {id}"),
        1,
        || async { set.import(id, ns, name).map_or(0, |i| i.spec.ips.len()) },
    )
    .await;
    import_ips(&set.import(id, ns, name).unwrap())[0]
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
            &format!("IPv6 import with its VIP in {id}"),
            (vec!["IPv6".to_owned()], 1),
            || async {
                set.import(id, "shop", "dual")
                    .map(|i| (i.spec.ip_families, i.spec.ips.len()))
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
    conditions_become(
        &set,
        "west",
        "shop",
        "split",
        "west's IPFamilyConflict",
        &[
            ("Valid", "True", "Valid"),
            ("Ready", "False", "Failed"),
            ("Conflict", "True", "IPFamilyConflict"),
        ],
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
    let set = KubeClusterset::three(&[]).await;
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
    eventually_within(
        CONVERGE,
        "north's import, without VIPs",
        Some(0),
        || async {
            set.import("north", "shop", "plain")
                .map(|i| i.spec.ips.len())
        },
    )
    .await;
    assert!(set.claims().is_empty(), "no VIP was claimed");

    // North exports with VIPs (the default), younger: a ClusterSetIPConflict.
    set.apply(
        "north",
        exported_at(cluster_ip("shop", "plain", &["10.2.0.20"]), NEW),
    );
    conditions_become(
        &set,
        "north",
        "shop",
        "plain",
        "north's conflict",
        &[
            ("Valid", "True", "Valid"),
            ("Ready", "True", "Exported"),
            ("Conflict", "True", "ClusterSetIPConflict"),
        ],
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

/// A small deterministic generator (the seed of each race round).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, (self.next() % (i as u64 + 1)) as usize);
        }
    }
}

/// 50 dual-stack services exported at the same moment from all three
/// clusters, in a VIP pool barely larger than needed so that allocations
/// collide: every import gets exactly one VIP per family, the same in every
/// member, no VIP is shared, and the broker holds exactly the claims in use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_exports_never_share_a_vip() {
    const SERVICES: usize = 50;
    const SEEDS: u64 = 8;
    let dual = "IPv4,IPv6";
    for seed in 1..=SEEDS {
        let set = KubeClusterset::start_with(
            &[("east", dual), ("north", dual), ("west", dual)],
            &[
                "--vip-pool-v4",
                "243.0.0.0/26",
                "--vip-pool-v6",
                "fd00:c5e7::/122",
            ],
        )
        .await;
        let names: Vec<String> = (0..SERVICES).map(|i| format!("svc-{seed}-{i}")).collect();
        let mut rng = Lcg(seed);
        // Writers in every cluster pile up on the paused broker, then go at once.
        set.broker.pause();
        let barrier = std::sync::Barrier::new(3);
        std::thread::scope(|scope| {
            for (c, member) in set.members.iter().enumerate() {
                let mut order = names.clone();
                rng.shuffle(&mut order);
                let barrier = &barrier;
                scope.spawn(move || {
                    member.api.create_namespace("race");
                    barrier.wait();
                    for name in order {
                        let svc = cluster_ip(
                            "race",
                            &name,
                            &[&format!("10.{c}.0.1"), &format!("fd00:{c}::1")],
                        );
                        for Doc(doc) in svc.exported() {
                            member.api.put_raw(doc).unwrap();
                        }
                    }
                });
            }
        });
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        set.broker.resume();
        let vips_of = |id: &str| -> Vec<Vec<IpAddr>> {
            names
                .iter()
                .map(|n| {
                    set.import(id, "race", n)
                        .map(|i| import_ips(&i))
                        .unwrap_or_default()
                })
                .collect()
        };
        let all_assigned = |vips: &[Vec<IpAddr>]| vips.iter().all(|v| v.len() == 2);
        for id in ALL {
            eventually_within(
                CONVERGE,
                &format!("seed {seed}: every import in {id} has two VIPs"),
                true,
                || async { all_assigned(&vips_of(id)) },
            )
            .await;
        }
        let agreed = vips_of("east");
        assert_eq!(vips_of("north"), agreed, "seed {seed}: members agree");
        assert_eq!(vips_of("west"), agreed, "seed {seed}: members agree");
        let distinct: BTreeSet<IpAddr> = agreed.iter().flatten().copied().collect();
        assert_eq!(
            distinct.len(),
            2 * SERVICES,
            "seed {seed}: no VIP shared: {agreed:?}"
        );
        assert!(
            agreed
                .iter()
                .all(|v| in_v4_pool(&v[0]) && in_v6_pool(&v[1])),
            "{agreed:?}"
        );
        let in_use: BTreeSet<(String, String)> = names
            .iter()
            .zip(&agreed)
            .flat_map(|(n, v)| {
                v.iter()
                    .map(move |ip| (ip.to_string(), format!("race/{n}")))
            })
            .collect();
        eventually_within(
            CONVERGE,
            &format!("seed {seed}: claims are the VIPs in use"),
            in_use,
            || async { set.claims() },
        )
        .await;
        let sample = format!("{}.race.svc.clusterset.local.", names[0]);
        for id in ALL {
            eventually_within(
                CONVERGE,
                "DNS serves the agreed VIP",
                Outcome::Ips([agreed[0][0]].into()),
                || set.resolve(id, &sample, RecordType::A),
            )
            .await;
        }
    }
}

/// /readyz follows the watches: ready after the first sync, not ready while
/// the broker has been unreachable for longer than `--max-sync-age`, ready
/// again once it is back; DNS answers throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_follows_the_broker() {
    let set = KubeClusterset::start_with(&[("east", "IPv4")], &["--max-sync-age", "2"]).await;
    set.apply("east", cluster_ip("shop", "web", &["10.1.0.10"]).exported());
    let ops = set.member("east").servers[0].running().metrics_addr;
    let ready = || async { get(ops, "/readyz").await.0 };
    eventually_within(CONVERGE, "ready", 200, ready).await;
    eventually_within(CONVERGE, "east answers", true, || async {
        is_vip(&set.resolve("east", WEB, RecordType::A).await)
    })
    .await;
    set.broker.stop().await;
    eventually_within(CONVERGE, "not ready without the broker", 503, ready).await;
    assert!(
        is_vip(&set.resolve("east", WEB, RecordType::A).await),
        "DNS still answers"
    );
    set.broker
        .restart(fake_apiserver::RestartMode::KeepAll)
        .await;
    eventually_within(CONVERGE, "ready again", 200, ready).await;
}

/// A claim no VIP record keeps (its writer stopped between claiming and
/// writing the record) is released by the next leader once it is older than
/// a minute; a recent one is left to its writer. More orphans than one page
/// of the sweep's list (500) are all found.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphaned_vip_claims_are_swept() {
    let mut set = KubeClusterset::three(&[]).await;
    set.add_replica(0).await;
    set.apply("east", cluster_ip("shop", "web", &["10.1.0.10"]).exported());
    let vip = agreed_vip(&set, "shop", "web").await;
    let claim = |address: &str, created: Option<&str>| {
        let mut claim = serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {
                "name": format!("clusterset-vip-{}", address.replace('.', "-")),
                "namespace": BROKER_NAMESPACE,
                "labels": {"clusterset-dns.io/vip-claim": "true"},
            },
            "data": {"address": address, "service": "shop/ghost"},
        });
        if let Some(created) = created {
            claim["metadata"]["creationTimestamp"] = created.into();
        }
        set.broker.put_raw(claim).unwrap();
    };
    claim("243.9.9.9", Some(OLD));
    claim("243.9.9.8", None);
    for i in 0..600 {
        claim(&format!("243.8.{}.{}", i / 256, i % 256), Some(OLD));
    }
    let leader = east_leader(&set).await;
    set.stop_replica(0, leader).await;
    let ghost = |ip: &str| (ip.to_owned(), "shop/ghost".to_owned());
    eventually_within(
        CONVERGE,
        "the old orphan is swept, the rest stays",
        BTreeSet::from([(vip.to_string(), "shop/web".to_owned()), ghost("243.9.9.8")]),
        || async { set.claims() },
    )
    .await;
}

/// Pod IPs in the EndpointSlices of a ClusterIP service are the default; an
/// export annotated `clusterset-dns.io/use-pod-ips: "false"` sends its
/// Service's ClusterIP instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slices_carry_pod_ips_unless_the_export_says_otherwise() {
    let set = KubeClusterset::three(&[]).await;
    let web = cluster_ip("shop", "web", &["10.1.0.10"]);
    let no_pod_ips = web.export().set(
        "metadata.annotations",
        serde_json::json!({"clusterset-dns.io/use-pod-ips": "false"}),
    );
    set.apply("east", [no_pod_ips, web]);
    set.apply(
        "east",
        [slice("shop", "web-east", "web", &[ep("10.1.5.5")])],
    );
    set.apply("west", cluster_ip("shop", "web", &["10.3.0.10"]).exported());
    set.apply(
        "west",
        [slice("shop", "web-west", "web", &[ep("10.3.5.5")])],
    );
    let mirror = |cluster: &str, ip: &str| (cluster.to_owned(), vec![ip.to_owned()]);
    eventually_within(
        CONVERGE,
        "north mirrors east's ClusterIP and west's pod IP",
        BTreeSet::from([mirror("east", "10.1.0.10"), mirror("west", "10.3.5.5")]),
        || async { set.mcs_slices("north", "shop", "web") },
    )
    .await;
    // Slices are written either way: the import says so (mcs-api v0.5).
    for id in ALL {
        eventually_within(
            CONVERGE,
            &format!("{id}: endpointSliceObjects"),
            Some(EndpointSliceObjects::Present),
            || async { slice_objects(&set, id, "web") },
        )
        .await;
    }
}

/// `status.endpointSliceObjects` of a member's ServiceImport in `shop`.
fn slice_objects(set: &KubeClusterset, id: &str, name: &str) -> Option<EndpointSliceObjects> {
    set.import(id, "shop", name)?.status?.endpoint_slice_objects
}

/// Without `--cluster-id`, the id is the `cluster.clusterset.k8s.io`
/// ClusterProperty; without either, start-up fails saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_id_comes_from_the_cluster_property() {
    let api = fake_apiserver::FakeApiServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    api.write_kubeconfig(&kubeconfig, "member").unwrap();
    let kubeconfig = kubeconfig.display().to_string();
    let connect = || async {
        let CliCommand::Serve(args) = parse_cli(&[
            "serve",
            "--source",
            "kubernetes",
            "--kubeconfig",
            &kubeconfig,
        ]) else {
            panic!("serve arguments expected")
        };
        let settings = clusterset_dns::runtime::assembly::connection_settings(&args.kubernetes);
        clusterset_dns::sources::kubernetes::client::connect(&settings).await
    };
    let err = connect().await.err().expect("no id anywhere").to_string();
    assert!(err.contains("--cluster-id"), "{err}");
    api.put_raw(serde_json::json!({
        "apiVersion": "about.k8s.io/v1alpha1", "kind": "ClusterProperty",
        "metadata": {"name": "cluster.clusterset.k8s.io"},
        "spec": {"value": "east.eu"},
    }))
    .unwrap();
    let connection = connect().await.expect("connects");
    assert_eq!(&*connection.cluster, "east.eu");
}

/// KEP-1645 "Using EndpointSlice objects to track endpoints", as the upstream
/// conformance EndpointSlice case checks it: every member, the exporting one
/// included, has an MCS EndpointSlice for every exporting cluster, with the
/// MCS labels and a `managed-by` that is not Kubernetes' own, owned by the
/// member's ServiceImport; unexporting deletes it everywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_member_has_an_mcs_slice_per_exporting_cluster_owned_by_its_import() {
    let set = KubeClusterset::three(&[]).await;
    let east = export_web_from_east(&set);
    for id in ALL {
        eventually_within(
            CONVERGE,
            &format!("east's MCS slice in {id}"),
            east.clone(),
            || async { set.mcs_slices(id, "shop", "web") },
        )
        .await;
        let import = set.import(id, "shop", "web").expect("the import");
        let slices = set.mcs_slice_objects(id, "shop", "web");
        let [slice] = &slices[..] else {
            panic!("one MCS slice in {id}: {slices:?}")
        };
        let labels = slice.metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels["multicluster.kubernetes.io/source-cluster"], "east");
        assert_ne!(
            labels["endpointslice.kubernetes.io/managed-by"],
            "endpointslice-controller.k8s.io"
        );
        assert_eq!(slice.address_type, "IPv4");
        let owners = slice.metadata.owner_references.clone().unwrap_or_default();
        let owner = owners
            .iter()
            .map(|o| {
                (
                    o.api_version.as_str(),
                    o.kind.as_str(),
                    o.name.as_str(),
                    o.uid.as_str(),
                )
            })
            .collect::<Vec<_>>();
        assert_eq!(
            owner,
            [(
                "multicluster.x-k8s.io/v1beta1",
                "ServiceImport",
                "web",
                import.metadata.uid.as_deref().unwrap()
            )],
            "{id}: owned by the local ServiceImport"
        );
        eventually_within(
            CONVERGE,
            &format!("{id}: the import says its slices are present"),
            Some(EndpointSliceObjects::Present),
            || async { slice_objects(&set, id, "web") },
        )
        .await;
    }
    // The exporter's own Kubernetes slice is left alone.
    assert!(
        set.member("east")
            .api
            .get::<k8s_openapi::api::discovery::v1::EndpointSlice>(Some("shop"), "web-east")
            .is_some()
    );

    // Someone deletes north's ServiceImport: the garbage collector takes its
    // slices with it; the leader writes both again, the slices owned by the
    // new ServiceImport.
    let old_uid = set.import("north", "shop", "web").unwrap().metadata.uid;
    let north = &set.member("north").api;
    assert!(north.remove_raw(
        "multicluster.x-k8s.io",
        "serviceimports",
        Some("shop"),
        "web"
    ));
    eventually_within(
        CONVERGE,
        "north's slice owned by its new ServiceImport",
        true,
        || async {
            let Some(uid) = set
                .import("north", "shop", "web")
                .and_then(|i| i.metadata.uid)
            else {
                return false;
            };
            let owners: Vec<String> = set
                .mcs_slice_objects("north", "shop", "web")
                .iter()
                .flat_map(|s| s.metadata.owner_references.clone().unwrap_or_default())
                .map(|o| o.uid)
                .collect();
            Some(&uid) != old_uid.as_ref() && owners == [uid]
        },
    )
    .await;

    set.unexport("east", "shop", "web");
    for id in ALL {
        eventually_within(
            CONVERGE,
            &format!("MCS slices deleted in {id}"),
            0,
            || async { set.mcs_slice_objects(id, "shop", "web").len() },
        )
        .await;
        assert!(set.import(id, "shop", "web").is_none());
    }
}

/// KEP-1645 "Using EndpointSlice objects to track endpoints": the MCS
/// EndpointSlices are the controller's, so an edit by someone else is
/// written back, also when nothing the slice is built from changed since it
/// was last written or compared (the writer skips slices whose inputs it
/// already found them equal to; an edited one is a new version, compared
/// again). Twice, so that the second edit meets a slice already matched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_mcs_slice_is_written_back() {
    let set = KubeClusterset::three(&[]).await;
    let east = export_web_from_east(&set);
    north_mirrors(&set, &east).await;
    for edit in ["10.9.9.1", "10.9.9.2"] {
        let slices = set.mcs_slice_objects("north", "shop", "web");
        let [slice] = &slices[..] else {
            panic!("one MCS slice in north: {slices:?}")
        };
        let mut edited = slice.clone();
        for endpoint in edited.endpoints.iter_mut().flatten() {
            endpoint.addresses = vec![edit.to_owned()];
        }
        set.member("north")
            .api
            .put(&edited)
            .expect("edit the MCS slice");
        assert_ne!(set.mcs_slices("north", "shop", "web"), east, "edited");
        north_mirrors(&set, &east).await;
    }
}

/// A restarted member writes nothing it already wrote, also when the watch
/// of its MCS EndpointSlices lists late (two failed lists, about two seconds
/// of the watcher's backoff, after its first sync): before that list, the
/// kept slices would look missing and be created again, each answered 409
/// and read back. Nor does it patch a status it wrote before: the writer
/// keeps a digest of each ServiceImport status, not the status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_member_creates_nothing_it_wrote_before() {
    let mut set = KubeClusterset::three(&[]).await;
    let east = export_web_from_east(&set);
    north_mirrors(&set, &east).await;
    let north = 1;
    set.stop_replica(north, 0).await;
    let api = &set.member("north").api;
    api.fail_requests_matching(2, 500, |r| {
        r.verb == fake_apiserver::Verb::List
            && r.resource == "endpointslices"
            && r.query.contains("managed-by")
    });
    api.reset_requests();
    set.add_replica(north).await;
    let api = &set.member("north").api;
    eventually_within(CONVERGE, "the slices' lists failed", 0, || async {
        api.pending_failures()
    })
    .await;
    eventually_within(CONVERGE, "north listed its slices", true, || async {
        api.requests().iter().any(|r| {
            r.verb == fake_apiserver::Verb::Watch
                && r.resource == "endpointslices"
                && r.query.contains("managed-by")
        })
    })
    .await;
    // Long enough for the writers to go through north's services.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let created: Vec<String> = api
        .requests()
        .iter()
        .filter(|r| r.verb == fake_apiserver::Verb::Create)
        .map(|r| format!("{} {:?}", r.resource, r.injected_failure))
        .collect();
    assert_eq!(created, Vec::<String>::new(), "nothing created again");
    let written: Vec<String> = api
        .requests()
        .iter()
        .filter(|r| r.verb.is_write() && r.resource != "leases")
        .map(|r| format!("{:?} {} {}", r.verb, r.resource, r.path))
        .collect();
    assert_eq!(written, Vec::<String>::new(), "nothing written again");
    assert_eq!(set.mcs_slices("north", "shop", "web"), east);
}

/// East exports ClusterIP `shop/web` with one pod, 10.1.5.5: the MCS slices
/// every member should then have, `(source cluster, addresses)`.
fn export_web_from_east(set: &KubeClusterset) -> BTreeSet<(String, Vec<String>)> {
    set.apply("east", cluster_ip("shop", "web", &["10.1.0.10"]).exported());
    set.apply(
        "east",
        [slice("shop", "web-east", "web", &[ep("10.1.5.5")])],
    );
    BTreeSet::from([("east".to_owned(), vec!["10.1.5.5".to_owned()])])
}

/// Waits until north's MCS slices of `shop/web` are `expected`.
async fn north_mirrors(set: &KubeClusterset, expected: &BTreeSet<(String, Vec<String>)>) {
    eventually_within(
        CONVERGE,
        "the MCS slices in north",
        expected.clone(),
        || async { set.mcs_slices("north", "shop", "web") },
    )
    .await;
}

/// The ports of each source cluster's MCS slices of a service in a member:
/// `(source cluster, port names)`.
fn slice_ports(set: &KubeClusterset, id: &str, service: &str) -> BTreeSet<(String, Vec<String>)> {
    set.mcs_slice_objects(id, "shop", service)
        .into_iter()
        .map(|s| {
            let labels = s.metadata.labels.unwrap_or_default();
            let ports = s.ports.unwrap_or_default();
            let names = ports
                .into_iter()
                .map(|p| format!("{}:{}", p.name.unwrap_or_default(), p.port.unwrap_or(0)))
                .collect();
            (
                labels["multicluster.kubernetes.io/source-cluster"].clone(),
                names,
            )
        })
        .collect()
}

/// KEP-1645 "Service Port", the upstream StrictPortConflict connectivity
/// cases: east (oldest) exports `tcp` as 42; for `web` west exports `tcp` as
/// 4242 (conflict: the import keeps 42, and west backs no port of it), for
/// `api` west exports `tcp2` as 4242 (both ports, each backed by one
/// cluster). A data plane maps the import's ports to endpoint ports by name,
/// so every member's MCS slices carry a cluster's endpoints only under the
/// ports it backs, and the ServiceImport says which cluster backs which.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicting_ports_back_no_traffic_in_the_clusters_that_define_them_differently() {
    let set = KubeClusterset::three(&[]).await;
    let ports = |name: &str, port: u16| serde_json::json!([{"name": name, "port": port, "protocol": "TCP"}]);
    for (service, west_port) in [("web", "tcp"), ("api", "tcp2")] {
        let east = cluster_ip("shop", service, &["10.1.0.10"]).ports(&[("tcp", 42, "TCP")]);
        set.apply("east", exported_at(east, OLD));
        set.apply(
            "east",
            [slice(
                "shop",
                &format!("{service}-east"),
                service,
                &[ep("10.1.5.5")],
            )
            .set("ports", ports("tcp", 42))],
        );
        let west = cluster_ip("shop", service, &["10.3.0.10"]).ports(&[(west_port, 4242, "TCP")]);
        set.apply("west", exported_at(west, NEW));
        set.apply(
            "west",
            [slice(
                "shop",
                &format!("{service}-west"),
                service,
                &[ep("10.3.5.5")],
            )
            .set("ports", ports(west_port, 42))],
        );
    }
    let pair = |cluster: &str, ports: &[&str]| {
        (
            cluster.to_owned(),
            ports.iter().map(|p| (*p).to_owned()).collect::<Vec<_>>(),
        )
    };
    for id in ALL {
        eventually_within(
            CONVERGE,
            &format!("tcp/42 only to east's pods in {id}"),
            BTreeSet::from([pair("east", &["tcp:42"]), pair("west", &[])]),
            || async { slice_ports(&set, id, "web") },
        )
        .await;
        eventually_within(
            CONVERGE,
            &format!("each port to the cluster that exposes it in {id}"),
            BTreeSet::from([pair("east", &["tcp:42"]), pair("west", &["tcp2:42"])]),
            || async { slice_ports(&set, id, "api") },
        )
        .await;
        let backed = |service: &str| {
            set.import(id, "shop", service)
                .and_then(|i| i.metadata.annotations)
                .and_then(|a| a.get("clusterset-dns.io/cluster-ports").cloned())
                .unwrap_or_default()
        };
        assert_eq!(backed("web"), r#"{"east":["tcp:42/TCP"],"west":[]}"#);
        assert_eq!(
            backed("api"),
            r#"{"east":["tcp:42/TCP"],"west":["tcp2:4242/TCP"]}"#
        );
    }
    for id in ["east", "west"] {
        conditions_become(
            &set,
            id,
            "shop",
            "web",
            &format!("{id}: PortConflict"),
            &[
                ("Valid", "True", "Valid"),
                ("Ready", "True", "Exported"),
                ("Conflict", "True", "PortConflict"),
            ],
        )
        .await;
    }
}

/// Issue 47 (ARCHITECTURE.md, "Derived Services"): with `--derived-services
/// clusterset`, every member writes one selectorless derived Service per
/// ClusterSetIP import, pinned to the agreed VIP and owned by its
/// ServiceImport, labels the MCS slices with its name (what kube-proxy
/// follows, KEP-1645 "Tracking Endpoints"), and deletes it with the import.
/// The name keeps answering the VIP, which the derived Service now holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn derived_services_follow_the_import_in_every_member() {
    use k8s_openapi::api::core::v1::Service;
    let set = KubeClusterset::three(&["--derived-services", "clusterset"]).await;
    let east = export_web_from_east(&set);
    let vip = agreed_vip(&set, "shop", "web").await;
    everywhere(&set, WEB, RecordType::A, Outcome::Ips([vip].into())).await;
    let derived = |id: &str| -> Vec<Service> {
        let services: Vec<Service> = set.member(id).api.list(Some("shop"));
        let derived = |s: &Service| {
            s.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("derived-"))
        };
        services.into_iter().filter(derived).collect()
    };
    for id in ALL {
        eventually_within(
            CONVERGE,
            &format!("{id}: MCS slice"),
            east.clone(),
            || async { set.mcs_slices(id, "shop", "web") },
        )
        .await;
        eventually_within(
            CONVERGE,
            &format!("{id}: one derived Service"),
            1,
            || async { derived(id).len() },
        )
        .await;
        let service = derived(id).remove(0);
        let name = service.metadata.name.clone().unwrap();
        let spec = service.spec.clone().unwrap();
        assert_eq!(
            spec.cluster_ips,
            Some(vec![vip.to_string()]),
            "{id}: pinned"
        );
        assert_eq!(spec.selector, None, "{id}: no selector");
        let import = set.import(id, "shop", "web").unwrap();
        let owner = &service.metadata.owner_references.clone().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("ServiceImport", import.metadata.uid.as_deref().unwrap())
        );
        let annotations = import.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(
            annotations["multicluster.kubernetes.io/derived-service"],
            name
        );
        for slice in set.mcs_slice_objects(id, "shop", "web") {
            let labels = slice.metadata.labels.unwrap_or_default();
            assert_eq!(labels["kubernetes.io/service-name"], name, "{id}");
        }
    }
    // The member's own slices are still its Service's alone: east's answer
    // and MCS slices did not pick up the mirrored ones.
    assert_eq!(set.mcs_slices("east", "shop", "web"), east);

    set.unexport("east", "shop", "web");
    everywhere(&set, WEB, RecordType::A, Outcome::NxDomain).await;
    for id in ALL {
        eventually_within(
            CONVERGE,
            &format!("{id}: derived Service deleted"),
            0,
            || async { derived(id).len() },
        )
        .await;
    }
}
