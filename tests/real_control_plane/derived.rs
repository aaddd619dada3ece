//! Derived Services on real API servers (issue 47, items 1 and 2;
//! ARCHITECTURE.md, "Derived Services"): with `--derived-services
//! clusterset`, which every member of this harness runs with, each member
//! holds a selectorless ClusterIP Service pinned to the clusterset VIP
//! (inside `config/kubernetes/servicecidr.yaml`), backed by the MCS
//! EndpointSlices; a VIP the API server refuses falls back to a ClusterIP of
//! the member's own range, said on the ServiceImport; `per-cluster` gives
//! each member a ClusterIP of its own range. Whether the addresses route is
//! `dataplane`'s to show, with kube-proxy.

use std::collections::BTreeSet;
use std::net::IpAddr;

use anyhow::{Context, Result, ensure};
use hickory_proto::rr::RecordType;
use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};
use test_support::Outcome;

use crate::check::{agreed_vip, answers, fqdn, import_becomes};
use crate::clusterset::{CONVERGE, Clusterset, eventually};
use crate::workloads::{export, from_json, mcs_slices, namespace, pod, service, slices};

const NS: &str = "derived";
/// A namespace only east has at first (the taken-VIP scenario).
const LATE: &str = "derived-late";
const SELECTOR: &str = "app.kubernetes.io/managed-by=clusterset-dns.io";

/// `web` exported by east and west: in every member, one derived Service
/// for it, pinned to the agreed VIP (the ServiceImport lists and the name
/// answers it), owned by the ServiceImport and named on it, with the
/// import's ports and no selector; every MCS slice of the import carries its
/// name as `kubernetes.io/service-name` (what kube-proxy follows).
pub async fn every_member_pins_the_clusterset_vip(set: &mut Clusterset) -> Result<()> {
    for (id, octet) in [("east", 1), ("west", 2)] {
        let admin = &set.member(id).admin;
        namespace(admin, NS).await?;
        service(admin, NS, "web", false, &["IPv4"], &[("http", 80)]).await?;
        let ip = format!("10.{octet}.9.1");
        pod(admin, NS, "web", &format!("web-{id}"), &[&ip], false).await?;
        export(admin, NS, "web").await?;
    }
    namespace(&set.member("north").admin, NS).await?;
    let vip = agreed_vip(set, NS, "web").await?;
    for member in &set.members {
        let derived = derived_becomes(set, &member.id, NS, "web", "pinned to the VIP", |s| {
            cluster_ips(s) == [vip.to_string()] && s["metadata"]["annotations"].is_null()
        })
        .await?;
        let name = derived["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        ensure!(
            name.len() == 24 && name.starts_with("derived-"),
            "{}: derived Service named {name}",
            member.id
        );
        let spec = &derived["spec"];
        ensure!(
            spec["type"] == "ClusterIP"
                && spec["selector"].is_null()
                && spec["ports"][0]["name"] == "http"
                && spec["ports"][0]["port"] == 80,
            "{}: a selectorless ClusterIP Service with the import's ports: {spec}",
            member.id
        );
        let import = import_becomes(set, &member.id, NS, "web", "names it", |i| {
            i["metadata"]["annotations"]["multicluster.kubernetes.io/derived-service"] == *name
        })
        .await?;
        let owner = &derived["metadata"]["ownerReferences"][0];
        ensure!(
            owner["kind"] == "ServiceImport"
                && owner["name"] == "web"
                && owner["uid"] == import["metadata"]["uid"],
            "{}: owned by the ServiceImport (the GC removes it with the import): {owner}",
            member.id
        );
        let admin = &member.admin;
        let selector = format!(
            "multicluster.kubernetes.io/service-name=web,kubernetes.io/service-name={name}"
        );
        let what = format!("{}: both clusters' MCS slices labelled {name}", member.id);
        eventually(CONVERGE, &what, async || {
            let labelled = slices(admin, NS, &selector)
                .await
                .map_err(|e| e.to_string())?;
            let all = mcs_slices(admin, NS, "web")
                .await
                .map_err(|e| e.to_string())?;
            if labelled.len() == 2 && all.len() == 2 {
                Ok(Some(()))
            } else {
                Err(format!("{} labelled of {all:?}", labelled.len()))
            }
        })
        .await?;
    }
    Ok(())
}

/// In north, an ordinary Service holds the VIP east's import gets before
/// north has the namespace: north's derived Service is refused the VIP
/// (the API server's "already allocated") and gets a ClusterIP of north's
/// range, which north's ServiceImport lists and its name answers, with
/// `Ready=True` reason `VIPNotPinned` saying why; east keeps the VIP. With
/// the squatter gone and the derived Service deleted by hand (what the
/// condition says to do), north pins the VIP.
pub async fn a_taken_vip_falls_back_to_a_clusterip_of_the_member(
    set: &mut Clusterset,
) -> Result<()> {
    let outcome = taken_vip(set).await;
    // Whatever the outcome, the squatter goes (it would make every later
    // re-creation of the derived Service fall back), and the refused pins
    // this scenario causes, logged with the API server's "is invalid", are
    // expected here.
    let squatters: Api<Service> = Api::namespaced(set.member("north").admin.clone(), "default");
    let _ = squatters.delete("squatter", &DeleteParams::default()).await;
    set.forgive_refusals();
    outcome
}

async fn taken_vip(set: &Clusterset) -> Result<()> {
    let east = &set.member("east").admin;
    namespace(east, LATE).await?;
    service(east, LATE, "api", false, &["IPv4"], &[("grpc", 9000)]).await?;
    pod(east, LATE, "api", "api-1", &["10.1.9.7"], false).await?;
    export(east, LATE, "api").await?;
    let import = import_becomes(set, "east", LATE, "api", "has a VIP", |i| {
        i["spec"]["ips"]
            .as_array()
            .is_some_and(|ips| ips.len() == 1)
    })
    .await?;
    let vip = import["spec"]["ips"][0]
        .as_str()
        .context("the VIP")?
        .to_owned();

    let north = set.member("north").admin.clone();
    let squatters: Api<Service> = Api::namespaced(north.clone(), "default");
    let squatter = from_json(json!({
        "metadata": {"name": "squatter"},
        "spec": {"clusterIP": vip, "clusterIPs": [vip], "ports": [{"port": 1}]},
    }));
    squatters
        .create(&PostParams::default(), &squatter)
        .await
        .with_context(|| format!("an ordinary Service at {vip} in north"))?;
    namespace(&north, LATE).await?;
    let derived = derived_becomes(set, "north", LATE, "api", "not pinned", |s| {
        !s["metadata"]["annotations"]["clusterset-dns.io/not-pinned"].is_null()
    })
    .await?;
    let why = derived["metadata"]["annotations"]["clusterset-dns.io/not-pinned"].to_string();
    ensure!(
        why.contains("already allocated"),
        "the API server's reason: {why}"
    );
    let own = cluster_ips(&derived);
    let own_ip: IpAddr = own.first().context("a ClusterIP")?.parse()?;
    // Allocated by north's API server: from its own range or, as the
    // allocator picks among ServiceCIDRs in no defined order (KEP-1880),
    // from servicecidr.yaml's, but never the VIP the squatter holds.
    ensure!(
        own_ip.to_string() != vip,
        "a ClusterIP north allocated, not the VIP {vip}"
    );
    // The spec and the status are two writes: wait for both.
    let what = "lists north's ClusterIP and says why";
    let import = import_becomes(set, "north", LATE, "api", what, |i| {
        i["spec"]["ips"] == json!([own_ip.to_string()])
            && conditions(i).iter().any(|c| c["reason"] == "VIPNotPinned")
    })
    .await?;
    let ready = conditions(&import)
        .into_iter()
        .find(|c| c["type"] == "Ready")
        .context("a Ready condition")?;
    ensure!(
        ready["status"] == "True"
            && ready["reason"] == "VIPNotPinned"
            && ready["message"]
                .as_str()
                .is_some_and(|m| m.contains("already allocated")),
        "north says why it answers its own ClusterIP: {ready}"
    );
    let name = fqdn("api", LATE);
    let own_answer = Outcome::Ips(BTreeSet::from([own_ip]));
    answers(set, "north", &name, RecordType::A, &own_answer).await?;
    let vip_answer = Outcome::Ips(BTreeSet::from([vip.parse()?]));
    answers(set, "east", &name, RecordType::A, &vip_answer).await?;

    squatters
        .delete("squatter", &DeleteParams::default())
        .await?;
    let services: Api<Service> = Api::namespaced(north.clone(), LATE);
    let derived_name = derived["metadata"]["name"]
        .as_str()
        .context("its name")?
        .to_owned();
    // The squatter's IPAddress object goes a moment after it.
    eventually(CONVERGE, "north pins the VIP once it is free", async || {
        let current = services
            .get_opt(&derived_name)
            .await
            .map_err(|e| e.to_string())?;
        match current
            .as_ref()
            .and_then(|s| s.spec.as_ref()?.cluster_ips.clone())
        {
            Some(ips) if ips == [vip.clone()] => return Ok(Some(())),
            Some(_) => {
                let _ = services
                    .delete(&derived_name, &DeleteParams::default())
                    .await;
            }
            None => {}
        }
        Err(format!("{current:?}"))
    })
    .await?;
    answers(set, "north", &name, RecordType::A, &vip_answer).await?;
    import_becomes(set, "north", LATE, "api", "Ready for the VIP again", |i| {
        conditions(i)
            .iter()
            .any(|c| c["type"] == "Ready" && c["reason"] == "Ready")
    })
    .await?;
    Ok(())
}

/// North restarted with `--derived-services per-cluster`: its derived
/// Service of `web` is made again with a ClusterIP of north's range, which
/// north's ServiceImport lists and its name answers, while east and west
/// keep answering the clusterset VIP; back to `clusterset`, north pins the
/// VIP again.
pub async fn per_cluster_mode_answers_the_members_own_clusterip(
    set: &mut Clusterset,
) -> Result<()> {
    let vip = agreed_vip(set, NS, "web").await?;
    restart_with(set, "north", "per-cluster").await?;
    // Allocated by north's API server, from its own range or servicecidr.yaml's.
    let derived = derived_becomes(set, "north", NS, "web", "a ClusterIP of north", |s| {
        let ips = cluster_ips(s);
        ips.len() == 1 && ips[0] != vip.to_string()
    })
    .await;
    let outcome = async {
        let derived = derived?;
        ensure!(
            derived["metadata"]["annotations"].is_null(),
            "per cluster, nothing was refused: {derived}"
        );
        let own: IpAddr = cluster_ips(&derived)[0].parse()?;
        import_becomes(set, "north", NS, "web", "lists north's ClusterIP", |i| {
            i["spec"]["ips"] == json!([own.to_string()])
        })
        .await?;
        let name = fqdn("web", NS);
        answers(
            set,
            "north",
            &name,
            RecordType::A,
            &Outcome::Ips(BTreeSet::from([own])),
        )
        .await?;
        for id in ["east", "west"] {
            answers(
                set,
                id,
                &name,
                RecordType::A,
                &Outcome::Ips(BTreeSet::from([vip])),
            )
            .await?;
        }
        Ok(())
    }
    .await;
    restart_with(set, "north", "clusterset").await?;
    outcome?;
    derived_becomes(set, "north", NS, "web", "pinned to the VIP again", |s| {
        cluster_ips(s) == [vip.to_string()]
    })
    .await?;
    // Each switch makes every derived Service of north again; one whose
    // VIP the API server still holds for a moment is refused and falls
    // back, logged with the API server's "is invalid".
    set.forgive_refusals();
    Ok(())
}

/// Replaces member `id`'s replicas with one running `--derived-services mode`.
async fn restart_with(set: &mut Clusterset, id: &str, mode: &'static str) -> Result<()> {
    let member = set.member_mut(id);
    member.derived = mode;
    for replica in member.replicas.drain(..) {
        replica.kill();
    }
    let i = set
        .members
        .iter()
        .position(|m| m.id == id)
        .context("the member")?;
    set.add_replica(i).await
}

/// Waits until member `id` has exactly one derived Service for `ns/name`
/// (labelled for it by this program) and it satisfies `test`; returns it.
async fn derived_becomes(
    set: &Clusterset,
    id: &str,
    ns: &str,
    name: &str,
    what: &str,
    test: impl Fn(&Value) -> bool,
) -> Result<Value> {
    let api: Api<Service> = Api::namespaced(set.member(id).admin.clone(), ns);
    let selector = format!("{SELECTOR},multicluster.kubernetes.io/service-name={name}");
    eventually(
        CONVERGE,
        &format!("{id}: derived Service of {ns}/{name} {what}"),
        async || {
            let list = api
                .list(&ListParams::default().labels(&selector))
                .await
                .map_err(|e| e.to_string())?;
            let found: Vec<Value> = list
                .items
                .iter()
                .map(|s| serde_json::to_value(s).expect("a Service serializes"))
                .collect();
            match found.as_slice() {
                [one] if test(one) => Ok(Some(one.clone())),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await
}

fn cluster_ips(service: &Value) -> Vec<String> {
    let ips = service["spec"]["clusterIPs"]
        .as_array()
        .into_iter()
        .flatten();
    ips.filter_map(|ip| ip.as_str().map(str::to_owned))
        .collect()
}

fn conditions(import: &Value) -> Vec<Value> {
    import["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}
