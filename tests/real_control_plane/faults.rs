//! Faults on the real control plane: the broker namespace emptied, the
//! broker's API server restarted while its etcd is compacted past every
//! watch (so the watches come back to 410 Gone), the leader killed, a
//! whole member killed (its heartbeat stops).

use anyhow::{Context, Result, ensure};
use clusterset_dns::engine::vip::{VipAllocator, VipPools};
use clusterset_dns::model::{IpFamily, ServiceKey};
use hickory_proto::rr::RecordType;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};

use crate::check::{agreed_vip, answers, answers_everywhere, fqdn, ips};
use crate::clusterset::{BROKER_NAMESPACE, CONVERGE, Clusterset, DNS_NAMESPACE, eventually};
use crate::workloads::{export, exported_with_pod, imports, namespace, pod, service, set_ready};

pub const NS: &str = "faults";

/// A headless service `name` with a Pod in east (`10.1.<octet>.1`) and one
/// in west (`10.2.<octet>.1`), exported by both and answered everywhere;
/// each scenario has its own, so one that fails leaves the next alone.
/// Returns the addresses and the name.
pub async fn watched(set: &Clusterset, name: &str, octet: u8) -> Result<([String; 2], String)> {
    let both = [format!("10.1.{octet}.1"), format!("10.2.{octet}.1")];
    for (id, ip) in [("east", &both[0]), ("west", &both[1])] {
        let admin = &set.member(id).admin;
        namespace(admin, NS).await?;
        exported_with_pod(admin, NS, name, true, ip).await?;
    }
    namespace(&set.member("north").admin, NS).await?;
    let fqdn = fqdn(name, NS);
    answers_everywhere(
        set,
        &fqdn,
        RecordType::A,
        &ips(&[both[0].as_str(), both[1].as_str()]),
    )
    .await?;
    Ok((both, fqdn))
}

/// Every object clusterset-dns keeps on the broker deleted, as a broker
/// restored empty would show it: members write them back, and the answers
/// and the VIP do not change, even for a service whose hashed first
/// address was taken when it got its VIP (KEP-1645: the VIP is stable for
/// the import's life).
pub async fn the_broker_namespace_emptied_is_rebuilt(set: &mut Clusterset) -> Result<()> {
    let (both, name) = watched(set, "wiped", 3).await?;
    let broker = set.broker.clone();
    let claims: Api<ConfigMap> = Api::namespaced(broker.clone(), BROKER_NAMESPACE);
    // steady's first candidate is held by another service when it gets its
    // VIP: re-allocating after the loss would give it that address.
    let first = VipAllocator::new(VipPools::default())
        .candidates(&ServiceKey::new(NS, "steady"), IpFamily::IPv4)
        .next()
        .context("a first candidate")?;
    let taken = format!("clusterset-vip-{}", first.to_string().replace('.', "-"));
    let held: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": taken, "labels": {"clusterset-dns.io/vip-claim": "true"}},
        "data": {"address": first.to_string(), "service": format!("{NS}/elsewhere")},
    }))?;
    claims.create(&PostParams::default(), &held).await?;
    let east = &set.member("east").admin;
    service(east, NS, "steady", false, &["IPv4"], &[("http", 80)]).await?;
    export(east, NS, "steady").await?;
    let vip = agreed_vip(set, NS, "steady").await?;
    ensure!(vip != first, "steady holds its second candidate");

    let all = ListParams::default();
    let records = imports(&broker, BROKER_NAMESPACE);
    let slices: Api<EndpointSlice> = Api::namespaced(broker.clone(), BROKER_NAMESPACE);
    let leases: Api<Lease> = Api::namespaced(broker.clone(), BROKER_NAMESPACE);
    let before = records.list(&all).await?.items.len();
    // The records first, then the claims, as `kubectl delete all` of
    // several kinds would: members re-claim while the old claims still
    // stand and see them go under their reads, and the claims a record
    // still lists must be written again.
    let none = DeleteParams::default();
    records.delete_collection(&none, &all).await?;
    slices.delete_collection(&none, &all).await?;
    leases.delete_collection(&none, &all).await?;
    for claim in claims.list(&all).await?.items {
        let claim = claim.metadata.name.unwrap_or_default();
        // kube-root-ca.crt is not clusterset-dns's.
        if claim.starts_with("clusterset-vip-") {
            claims.delete(&claim, &DeleteParams::default()).await?;
        }
    }

    eventually(CONVERGE, "the broker's records written back", async || {
        let now = records.list(&all).await.map_err(|e| e.to_string())?.items;
        if now.len() >= before {
            Ok(Some(()))
        } else {
            Err(format!("{} of {before}", now.len()))
        }
    })
    .await?;
    answers_everywhere(
        set,
        &name,
        RecordType::A,
        &ips(&[both[0].as_str(), both[1].as_str()]),
    )
    .await?;
    let after = agreed_vip(set, NS, "steady").await?;
    ensure!(after == vip, "steady keeps its VIP {vip} (now {after})");
    let claim = format!("clusterset-vip-{}", vip.to_string().replace('.', "-"));
    eventually(
        CONVERGE,
        "steady's claim written again",
        async || match claims.get_opt(&claim).await.map_err(|e| e.to_string())? {
            Some(_) => Ok(Some(())),
            None => Err(format!("no {claim}")),
        },
    )
    .await?;
    Ok(())
}

/// The broker's API server (east's) stopped; while it is down west's Pod
/// turns not ready and etcd's history is compacted past every watch; once
/// it is back every member sees west's change and a new one from east.
pub async fn the_broker_restarted_past_compaction(set: &mut Clusterset) -> Result<()> {
    let (both, name) = watched(set, "restarted", 4).await?;
    let west = set.member("west").admin.clone();
    let compacted = set.members[0]
        .plane
        .restart_apiserver_past_compaction(async || {
            set_ready(&west, NS, "restarted-1", false).await
        })
        .await?;
    eprintln!("  etcd compacted at revision {compacted}");
    answers_everywhere(set, &name, RecordType::A, &ips(&[both[0].as_str()])).await?;
    let east = set.member("east").admin.clone();
    pod(&east, NS, "restarted", "restarted-2", &["10.1.4.2"], false).await?;
    answers_everywhere(
        set,
        &name,
        RecordType::A,
        &ips(&[both[0].as_str(), "10.1.4.2"]),
    )
    .await?;
    set_ready(&west, NS, "restarted-1", true).await?;
    answers_everywhere(
        set,
        &name,
        RecordType::A,
        &ips(&[both[0].as_str(), "10.1.4.2", both[1].as_str()]),
    )
    .await?;
    // A restarted API server refuses every request for the moment its
    // RBAC authorizer has not yet read the bindings (a few ms of 403s, seen
    // here); the replicas retry. Any refusal after that still fails.
    set.forgive_refusals();
    Ok(())
}

/// The holder of east's Lease.
async fn leader(set: &Clusterset) -> Result<String> {
    let leases: Api<Lease> = Api::namespaced(set.member("east").admin.clone(), DNS_NAMESPACE);
    eventually(CONVERGE, "east's Lease held", async || {
        let lease = leases
            .get_opt("clusterset-dns")
            .await
            .map_err(|e| e.to_string())?;
        Ok(lease
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
            .filter(|h| !h.is_empty()))
    })
    .await
}

/// Two replicas in east; the leader killed (no release): the other takes
/// the Lease and writes the next change.
pub async fn the_leader_killed_hands_over(set: &mut Clusterset) -> Result<()> {
    watched(set, "led", 5).await?;
    set.add_replica(0).await?;
    let holder = leader(set).await?;
    let east = set.member_mut("east");
    let index = east
        .replicas
        .iter()
        .position(|r| r.identity == holder)
        .with_context(|| format!("the leader {holder} is one of east's replicas"))?;
    east.replicas.remove(index).kill();
    let survivor = east.replicas[0].identity.clone();
    eventually(CONVERGE, "the survivor leads", async || {
        match leader(set).await {
            Ok(h) if h == survivor => Ok(Some(())),
            Ok(h) => Err(h),
            Err(e) => Err(e.to_string()),
        }
    })
    .await?;
    let admin = set.member("east").admin.clone();
    service(&admin, NS, "late", false, &["IPv4"], &[("http", 80)]).await?;
    export(&admin, NS, "late").await?;
    agreed_vip(set, NS, "late").await?;
    Ok(())
}

/// Every replica of west killed: once its heartbeat is older than
/// `--cluster-timeout`, its endpoints leave every other member's answers;
/// a new replica brings them back.
pub async fn a_dead_member_leaves_the_answers(set: &mut Clusterset) -> Result<()> {
    let (both, name) = watched(set, "dead", 6).await?;
    let west = set.member_mut("west");
    for replica in west.replicas.drain(..) {
        replica.kill();
    }
    for id in ["east", "north"] {
        answers(set, id, &name, RecordType::A, &ips(&[both[0].as_str()])).await?;
    }
    let i = set.members.iter().position(|m| m.id == "west").unwrap();
    set.add_replica(i).await?;
    answers_everywhere(
        set,
        &name,
        RecordType::A,
        &ips(&[both[0].as_str(), both[1].as_str()]),
    )
    .await
}
