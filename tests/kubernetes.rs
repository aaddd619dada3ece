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
