//! What the real garbage collector and namespace controller do with what
//! clusterset-dns writes: an MCS EndpointSlice is a dependent of its
//! ServiceImport (`ownerReferences` with the import's uid), so the GC takes
//! it with the import and nothing else; a namespace being deleted takes
//! everything in it, and the clusterset carries on without that cluster's
//! export.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context, Result, ensure};
use hickory_proto::rr::RecordType;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::DeleteParams;
use test_support::Outcome;

use crate::check::{agreed_vip, answers, fqdn, import_becomes, mcs_slices_become, status_clusters};
use crate::clusterset::{CONVERGE, Clusterset, eventually};
use crate::workloads::{exported_with_pod, imports, namespace, slices};

const NS: &str = "owned";

async fn setup(set: &Clusterset) -> Result<()> {
    for (id, octet) in [("east", 1), ("west", 2)] {
        let admin = &set.member(id).admin;
        namespace(admin, NS).await?;
        exported_with_pod(admin, NS, "web", false, &format!("10.{octet}.2.1")).await?;
    }
    namespace(&set.member("north").admin, NS).await
}

fn uids(slices: &[EndpointSlice]) -> BTreeMap<String, String> {
    slices
        .iter()
        .map(|s| {
            (
                s.metadata.name.clone().unwrap_or_default(),
                s.metadata.uid.clone().unwrap_or_default(),
            )
        })
        .collect()
}

/// Every MCS slice of `web` in member `id` is owned by that member's import.
async fn slices_owned_by_import(set: &Clusterset, id: &str) -> Result<String> {
    let admin = &set.member(id).admin;
    let import = crate::workloads::import(admin, NS, "web")
        .await?
        .with_context(|| format!("{id}: the import"))?;
    let uid = import["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let mcs = slices(admin, NS, "multicluster.kubernetes.io/service-name=web").await?;
    ensure!(!mcs.is_empty(), "{id}: MCS slices of web");
    for slice in &mcs {
        let owners = slice.metadata.owner_references.clone().unwrap_or_default();
        ensure!(
            owners.len() == 1 && owners[0].uid == uid && owners[0].kind == "ServiceImport",
            "{id}: slice {:?} owned by the import {uid}: {owners:?}",
            slice.metadata.name
        );
    }
    Ok(uid)
}

/// A ServiceImport deleted by hand: the GC deletes its MCS slices (its
/// dependents) and leaves the Service's own slices alone; the writer puts
/// the import back (a new uid) with slices owned by it, and the VIP stays.
pub async fn an_import_deleted_by_hand_is_restored(set: &mut Clusterset) -> Result<()> {
    setup(set).await?;
    let vip = agreed_vip(set, NS, "web").await?;
    // Every exporting cluster's slice, the member's own included.
    let both = BTreeSet::from([
        ("east".to_owned(), vec!["10.1.2.1".to_owned()]),
        ("west".to_owned(), vec!["10.2.2.1".to_owned()]),
    ]);
    mcs_slices_become(set, "west", NS, "web", &both).await?;
    for member in &set.members {
        eventually(
            CONVERGE,
            &format!("{}: MCS slices owned by the import", member.id),
            async || match slices_owned_by_import(set, &member.id).await {
                Ok(_) => Ok(Some(())),
                Err(e) => Err(e.to_string()),
            },
        )
        .await?;
    }
    let west = set.member("west").admin.clone();
    let own = slices(&west, NS, "kubernetes.io/service-name=web").await?;
    ensure!(
        !own.is_empty(),
        "west: the EndpointSlice controller's slices of web"
    );

    let old = slices_owned_by_import(set, "west").await?;
    imports(&west, NS)
        .delete("web", &DeleteParams::background())
        .await?;
    let restored = import_becomes(set, "west", NS, "web", "restored with a new uid", |i| {
        i["metadata"]["uid"].as_str().is_some_and(|u| u != old)
    })
    .await?;
    ensure!(
        restored["spec"]["ips"] == serde_json::json!([vip.to_string()]),
        "west: the restored import keeps the VIP {vip}: {restored}"
    );
    eventually(
        CONVERGE,
        "west: MCS slices owned by the new import",
        async || match slices_owned_by_import(set, "west").await {
            Ok(uid) if uid != old => Ok(Some(())),
            Ok(uid) => Err(format!("still owned by {uid}")),
            Err(e) => Err(e.to_string()),
        },
    )
    .await?;
    mcs_slices_become(set, "west", NS, "web", &both).await?;
    let after = slices(&west, NS, "kubernetes.io/service-name=web").await?;
    ensure!(
        uids(&own) == uids(&after),
        "the Service's own slices are untouched: {:?} then {:?}",
        uids(&own),
        uids(&after)
    );
    answers(
        set,
        "west",
        &fqdn("web", NS),
        RecordType::A,
        &Outcome::Ips([vip].into()),
    )
    .await
}

/// west's namespace deleted: everything in it goes (the namespace
/// controller), east and north keep serving east's export alone, west
/// serves nothing in a namespace it lacks (namespace sameness, KEP-1645),
/// and when the namespace returns the import does too, with the same VIP.
pub async fn a_namespace_deleted_in_a_member(set: &mut Clusterset) -> Result<()> {
    let vip = agreed_vip(set, NS, "web").await?;
    let west = set.member("west").admin.clone();
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(west.clone());
    namespaces.delete(NS, &DeleteParams::default()).await?;
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::namespaced(west.clone(), NS);
    eventually(CONVERGE, "west: namespace owned deleted", async || {
        // What the kubelet does once a Pod's containers have stopped:
        // the final delete of a Pod bound to a node.
        let listed = pods.list(&Default::default()).await;
        for pod in listed.into_iter().flat_map(|l| l.items) {
            if pod.metadata.deletion_timestamp.is_some() {
                let name = pod.metadata.name.unwrap_or_default();
                let _ = pods
                    .delete(&name, &DeleteParams::default().grace_period(0))
                    .await;
            }
        }
        match namespaces.get_opt(NS).await {
            Ok(None) => Ok(Some(())),
            Ok(Some(ns)) => Err(format!("{:?}", ns.status)),
            Err(e) => Err(e.to_string()),
        }
    })
    .await?;
    for id in ["east", "north"] {
        import_becomes(set, id, NS, "web", "lists east alone", |i| {
            status_clusters(i) == ["east"]
        })
        .await?;
        let east_only = BTreeSet::from([("east".to_owned(), vec!["10.1.2.1".to_owned()])]);
        if id == "north" {
            mcs_slices_become(set, id, NS, "web", &east_only).await?;
        }
        answers(
            set,
            id,
            &fqdn("web", NS),
            RecordType::A,
            &Outcome::Ips([vip].into()),
        )
        .await?;
    }
    answers(
        set,
        "west",
        &fqdn("web", NS),
        RecordType::A,
        &Outcome::NxDomain,
    )
    .await?;

    namespace(&west, NS).await?;
    import_becomes(set, "west", NS, "web", "back with the namespace", |i| {
        i["spec"]["ips"] == serde_json::json!([vip.to_string()])
    })
    .await?;
    answers(
        set,
        "west",
        &fqdn("web", NS),
        RecordType::A,
        &Outcome::Ips([vip].into()),
    )
    .await?;
    crate::workloads::unexport(&set.member("east").admin, NS, "web").await
}
