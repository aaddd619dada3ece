//! Issue 46, item 7, on a real API server: one scenario per attack of the
//! issue, each made with exactly the broker credentials the member `east`
//! (the attacker) runs with. Each write is refused by the broker's API
//! server (broker-ownership-policy.yaml, evaluated against east's own
//! ServiceAccount token: identity from the credential, never from a label
//! the writer chose) or, where admission cannot see what is wrong, admitted
//! and refused by every reader (docs/kubernetes.md, "Trust between
//! clusters"). Either way every other member's answers for services east
//! does not export are sampled during the attack and after it, and never
//! change ([`Sampler`]).
//!
//! Flooding the broker (the fifth attack) is `flood`, against the
//! caps of the item 4 (`clusterset::EXPORT_CAP`).

pub mod addresses;
pub mod deletion;
pub mod export_age;
pub mod flood;
pub mod impersonation;
pub mod liveness;
pub mod vip_hijack;

use std::net::IpAddr;

use anyhow::{Context, Result, bail, ensure};
use hickory_proto::rr::RecordType;
use kube::api::{DeleteParams, DynamicObject, ListParams, ObjectMeta, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

use crate::check::{Sampler, agreed_vip, answers_everywhere, fqdn, ips};
use crate::clusterset::{BROKER_NAMESPACE, CONVERGE, Clusterset, eventually};
use crate::workloads::{exported_with_pod, imports, namespace};

/// The namespace of every service the scenarios defend.
const NS: &str = "trust";
/// The member whose broker credentials attack.
const ATTACKER: &str = "east";

/// Labels of a broker record of `NS/<name>` from `cluster` (role given).
fn labels(name: &str, cluster: Option<&str>, role: &str) -> Value {
    let mut labels = json!({
        "app.kubernetes.io/managed-by": "clusterset-dns.io",
        "clusterset-dns.io/role": role,
        "clusterset-dns.io/service-namespace": NS,
        "multicluster.kubernetes.io/service-name": name,
    });
    if let Some(cluster) = cluster {
        labels["multicluster.kubernetes.io/source-cluster"] = json!(cluster);
    }
    labels
}

/// A broker ServiceImport of no export annotation (readers cannot use it
/// as an export record: what is tried is the write itself).
fn record(name: &str, labels: Value, ips: &[&str]) -> Result<DynamicObject> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "multicluster.x-k8s.io/v1beta1",
        "kind": "ServiceImport",
        "metadata": {"name": name, "labels": labels},
        "spec": {"type": "ClusterSetIP", "ips": ips, "ports": []},
    }))?)
}

/// A copy of `original` named `name`, its labels changed by `labels` (a
/// null value removes one), with nothing of the original's identity
/// (uid, resourceVersion): a forged record as complete as a real one.
fn forged(original: &DynamicObject, name: &str, labels: &Value) -> DynamicObject {
    let mut copy = original.clone();
    let mut all = original.metadata.labels.clone().unwrap_or_default();
    for (key, value) in labels.as_object().into_iter().flatten() {
        match value.as_str() {
            Some(value) => all.insert(key.clone(), value.to_owned()),
            None => all.remove(key),
        };
    }
    copy.metadata = ObjectMeta {
        name: Some(name.to_owned()),
        labels: Some(all),
        annotations: original.metadata.annotations.clone(),
        ..ObjectMeta::default()
    };
    copy
}

/// Reads `name`, changes it with `change` and writes it back, again while
/// the write loses a race (409 Conflict) with the object's owner renewing
/// or repairing it: what the API server is to judge is the change, not a
/// stale `resourceVersion`.
async fn update<K>(api: &Api<K>, name: &str, change: impl Fn(&mut K)) -> kube::Result<K>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let mut conflicts = 0;
    loop {
        let mut object = api.get(name).await?;
        change(&mut object);
        match api.replace(name, &PostParams::default(), &object).await {
            Err(kube::Error::Api(e)) if e.code == 409 && conflicts < 10 => conflicts += 1,
            written => return written,
        }
    }
}

/// Expects `attempt` refused by the broker's policy with `rule` in its
/// message (every rule's message says which).
async fn refused<T>(
    what: &str,
    rule: &str,
    attempt: impl Future<Output = kube::Result<T>>,
) -> Result<()> {
    refused_by(what, &["clusterset-broker-ownership", rule], attempt).await
}

/// Expects `attempt` refused by the broker's RBAC (rbac-broker.yaml grants
/// members no such verb).
async fn forbidden<T>(
    what: &str,
    verb: &str,
    resource: &str,
    attempt: impl Future<Output = kube::Result<T>>,
) -> Result<()> {
    let words = format!("cannot {verb} resource \"{resource}\"");
    refused_by(what, &[&words], attempt).await
}

/// Expects `attempt` refused with every one of `words` in the message.
async fn refused_by<T>(
    what: &str,
    words: &[&str],
    attempt: impl Future<Output = kube::Result<T>>,
) -> Result<()> {
    match attempt.await {
        Ok(_) => bail!("{what}: admitted"),
        Err(e) => {
            let e = e.to_string();
            ensure!(
                words.iter().all(|w| e.contains(w)),
                "{what}: refused with {words:?}, not: {e}"
            );
            Ok(())
        }
    }
}

/// `NS` in every member.
async fn namespaces(set: &Clusterset) -> Result<()> {
    for member in &set.members {
        namespace(&member.admin, NS).await?;
    }
    Ok(())
}

/// Deleted, or already gone (a member's writer may have been first).
async fn delete<K>(api: &Api<K>, name: &str) -> Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e).with_context(|| format!("deleting {name}")),
    }
}

/// What one scenario defends, set up by [`defend`].
struct Defended {
    /// The ClusterSetIP service's agreed VIP.
    vip: IpAddr,
    /// Every other member's answers, sampled from before the attack on.
    sampler: Sampler,
}

/// Exports `NS/<service>` (ClusterSetIP) from west and north, and
/// `NS/<service>-pods` (headless, one Pod) from west, neither from east;
/// waits until every member answers them, then starts sampling every member
/// but east on their A, AAAA and SRV answers and on `also`. `n` keeps the
/// scenarios' Pod IPs apart.
async fn defend(
    set: &Clusterset,
    service: &str,
    n: u8,
    also: &[(String, RecordType)],
) -> Result<Defended> {
    namespaces(set).await?;
    let pods = format!("{service}-pods");
    let (west, north) = (&set.member("west").admin, &set.member("north").admin);
    exported_with_pod(west, NS, service, false, &format!("10.2.{n}.1")).await?;
    exported_with_pod(north, NS, service, false, &format!("10.3.{n}.1")).await?;
    let pod_ip = format!("10.2.{n}.2");
    exported_with_pod(west, NS, &pods, true, &pod_ip).await?;
    let vip = agreed_vip(set, NS, service).await?;
    answers_everywhere(set, &fqdn(&pods, NS), RecordType::A, &ips(&[&pod_ip])).await?;
    let mut questions = vec![
        (fqdn(service, NS), RecordType::A),
        (fqdn(service, NS), RecordType::AAAA),
        (format!("_http._tcp.{}", fqdn(service, NS)), RecordType::SRV),
        (fqdn(&pods, NS), RecordType::A),
        (format!("_http._tcp.{}", fqdn(&pods, NS)), RecordType::SRV),
    ];
    questions.extend_from_slice(also);
    let sampler = Sampler::start(set, ATTACKER, &questions).await?;
    Ok(Defended { vip, sampler })
}

/// West's broker objects of `NS/<service>` the attacker goes for: its
/// export record and the name of its EndpointSlice.
async fn wests(client: &Client, service: &str) -> Result<(DynamicObject, String)> {
    let record = imports(client, BROKER_NAMESPACE)
        .get(&format!("{service}.{NS}.west"))
        .await?;
    let slices: Api<k8s_openapi::api::discovery::v1::EndpointSlice> =
        Api::namespaced(client.clone(), BROKER_NAMESPACE);
    let selector = format!(
        "multicluster.kubernetes.io/source-cluster=west,multicluster.kubernetes.io/service-name={service},clusterset-dns.io/service-namespace={NS}"
    );
    let slice = eventually(
        CONVERGE,
        &format!("west's slice of {NS}/{service} on the broker"),
        async || {
            let list = slices.list(&ListParams::default().labels(&selector)).await;
            let list = list.map_err(|e| e.to_string())?;
            Ok(list.items.into_iter().next().and_then(|s| s.metadata.name))
        },
    )
    .await?;
    Ok((record, slice))
}

/// Waits until every member in `readers` has logged each of `lines` (a
/// reader's refusal names the record and the rule it broke).
async fn logged(set: &Clusterset, readers: &[&str], lines: &[String]) -> Result<()> {
    for id in readers {
        let log = set.member(id).replicas[0].log.clone();
        eventually(
            CONVERGE,
            &format!("{id}: the refusals logged"),
            async || {
                let text = std::fs::read_to_string(&log).map_err(|e| e.to_string())?;
                match lines.iter().find(|line| !text.contains(line.as_str())) {
                    None => Ok(Some(())),
                    Some(missing) => Err(format!("no line {missing:?}")),
                }
            },
        )
        .await?;
    }
    Ok(())
}

/// Sets one annotation of `object`.
fn set_annotation(object: &mut DynamicObject, key: &str, value: &str) {
    let annotations = object.metadata.annotations.get_or_insert_default();
    annotations.insert(key.into(), value.into());
}

/// Members' replicas stopped (SIGSTOP) until dropped (SIGCONT): their
/// writers cannot put back what a test wrote in their names.
pub struct Paused(Vec<u32>);

impl Paused {
    fn new(set: &Clusterset, ids: &[&str]) -> Result<Self> {
        let replicas = ids.iter().flat_map(|id| &set.member(id).replicas);
        let pids: Vec<u32> = replicas.filter_map(|r| r.pid()).collect();
        ensure!(!pids.is_empty(), "{ids:?} have running replicas");
        signal(&pids, "-STOP")?;
        Ok(Self(pids))
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        let _ = signal(&self.0, "-CONT");
    }
}

fn signal(pids: &[u32], signal: &str) -> Result<()> {
    let status = std::process::Command::new("kill")
        .arg(signal)
        .args(pids.iter().map(u32::to_string))
        .status()?;
    ensure!(status.success(), "kill {signal} {pids:?}");
    Ok(())
}
