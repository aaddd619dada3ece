//! Issue 46, attack 6 (endpoints anywhere): loopback, link-local,
//! multicast, unspecified and broadcast addresses as another cluster's
//! endpoints or ClusterIPs.

use anyhow::{Context, Result};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::json;

use super::{ATTACKER, NS, Paused, defend, delete, forged, logged, refused_by, update, wests};
use crate::check::AFTER_ATTACK;
use crate::clusterset::{BROKER_NAMESPACE, Clusterset, member_broker_client};
use crate::workloads::imports;

const SERVICE: &str = "where";

/// An EndpointSlice of `NS/<service>` from `cluster` with one endpoint.
fn slice(name: &str, service: &str, cluster: &str, address: &str) -> Result<EndpointSlice> {
    let family = if address.contains(':') {
        "IPv6"
    } else {
        "IPv4"
    };
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {
            "multicluster.kubernetes.io/service-name": service,
            "clusterset-dns.io/service-namespace": NS,
            "multicluster.kubernetes.io/source-cluster": cluster,
            "endpointslice.kubernetes.io/managed-by": "clusterset-dns.io",
        }},
        "addressType": family,
        "endpoints": [{"addresses": [address]}],
        "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
    }))?)
}

/// Issue 46, item 7, attack 6 (endpoints anywhere). With east's broker
/// token, east's own slices of west's headless `trust/where-pods` with a
/// loopback, link-local, link-local multicast or unspecified endpoint are
/// refused by the API server's own EndpointSlice validation. What it
/// admits, east's own export record of `where-pods` with slices of a
/// multicast (IPv4 and IPv6) or the broadcast endpoint, and its own export
/// record of `where` with a loopback ClusterIP, west's and north's readers
/// refuse (docs/kubernetes.md, "Trust between clusters"); so do east's and
/// north's what a compromised broker writes with its admin credential,
/// west's slice moved to a multicast endpoint and its ClusterIP to a
/// link-local one. No answer of west or north changes (north would answer
/// a forged endpoint for `where-pods`), during the attack or 3 s after.
pub async fn no_unroutable_address_reaches_an_answer(set: &mut Clusterset) -> Result<()> {
    let defended = defend(set, SERVICE, 16, &[]).await?;
    let east: Client = member_broker_client(set.member(ATTACKER)).await?;
    let records = imports(&east, BROKER_NAMESPACE);
    let slices: Api<EndpointSlice> = Api::namespaced(east.clone(), BROKER_NAMESPACE);
    let pods = format!("{SERVICE}-pods");

    for (address, kind) in [
        ("127.0.0.1", "loopback"),
        ("169.254.169.254", "link-local"),
        ("224.0.0.251", "link-local multicast"),
        ("0.0.0.0", "unspecified"),
        ("fe80::1", "link-local"),
        ("::1", "loopback"),
    ] {
        let forged = slice(&format!("{pods}-east-x"), &pods, ATTACKER, address)?;
        refused_by(
            &format!("east's slice with a {kind} endpoint"),
            &["is invalid", kind],
            slices.create(&PostParams::default(), &forged),
        )
        .await?;
    }

    // East's own records and slices, admitted; refused by every reader.
    // Labelled as this program labels them, since the readers' watches see
    // nothing else; east's replicas are stopped meanwhile, since its writer
    // deletes records and slices of its name it has no export for.
    let (pods_record, _) = wests(&east, &pods).await?;
    let (service_record, _) = wests(&east, SERVICE).await?;
    let as_east = json!({"multicluster.kubernetes.io/source-cluster": ATTACKER});
    let paused = Paused::new(set, &[ATTACKER])?;
    let own_pods = format!("{pods}.{NS}.{ATTACKER}");
    let own_service = format!("{SERVICE}.{NS}.{ATTACKER}");
    records
        .create(
            &PostParams::default(),
            &forged(&pods_record, &own_pods, &as_east),
        )
        .await
        .context("east's own export record of the headless service")?;
    let mut loopback = forged(&service_record, &own_service, &as_east);
    loopback.data["spec"]["ips"] = json!(["127.0.0.1"]);
    records
        .create(&PostParams::default(), &loopback)
        .await
        .context("east's own export record with a loopback ClusterIP")?;
    let mut lines = vec![format!(
        "ServiceImport {own_service}: refused: ClusterIP 127.0.0.1 is loopback"
    )];
    let mut own_slices = Vec::new();
    for (i, (address, kind)) in [
        ("239.1.1.1", "multicast"),
        ("ff05::1", "multicast"),
        ("255.255.255.255", "the broadcast address"),
    ]
    .into_iter()
    .enumerate()
    {
        let name = format!("{pods}-east-{i}");
        slices
            .create(
                &PostParams::default(),
                &slice(&name, &pods, ATTACKER, address)?,
            )
            .await
            .with_context(|| format!("east's own slice with endpoint {address}"))?;
        lines.push(format!(
            "EndpointSlice {name}: refused: endpoint {address} is {kind}"
        ));
        own_slices.push(name);
    }
    logged(set, &["west", "north"], &lines).await?;
    for name in [own_pods, own_service] {
        delete(&records, &name).await?;
    }
    for name in own_slices {
        delete(&slices, &name).await?;
    }
    drop(paused);

    // A compromised broker: west's slice and record rewritten.
    let admin_slices: Api<EndpointSlice> = Api::namespaced(set.broker.clone(), BROKER_NAMESPACE);
    let admin_records = imports(&set.broker, BROKER_NAMESPACE);
    let (_, west_slice) = wests(&set.broker, &pods).await?;
    let endpoints = admin_slices.get(&west_slice).await?.endpoints;
    update(&admin_slices, &west_slice, |s| {
        s.endpoints = Some(vec![Endpoint {
            addresses: vec!["239.2.2.2".into()],
            ..Endpoint::default()
        }]);
    })
    .await?;
    let west_service = format!("{SERVICE}.{NS}.west");
    update(&admin_records, &west_service, |r| {
        r.data["spec"]["ips"] = json!(["169.254.169.254"]);
    })
    .await?;
    let lines = [
        format!("EndpointSlice {west_slice}: refused: endpoint 239.2.2.2 is multicast"),
        format!("ServiceImport {west_service}: refused: ClusterIP 169.254.169.254 is link-local"),
    ];
    logged(set, &["east", "north"], &lines).await?;

    // Put back: west's objects as they were.
    let spec = &service_record.data["spec"];
    update(&admin_records, &west_service, |r| {
        r.data["spec"] = spec.clone()
    })
    .await?;
    update(&admin_slices, &west_slice, |s| {
        s.endpoints = endpoints.clone()
    })
    .await?;
    defended.sampler.finish(AFTER_ATTACK).await
}
