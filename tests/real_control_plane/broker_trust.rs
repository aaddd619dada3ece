//! Issue 46 on a real API server: broker-ownership-policy.yaml, evaluated
//! by the broker's kube-apiserver against each member's own ServiceAccount
//! token, refuses every write to another member's records (identity from
//! the credential, never from a label the writer chose) and admits what a
//! member does with its own.

use anyhow::{Context, Result, bail, ensure};
use hickory_proto::rr::RecordType;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{DeleteParams, DynamicObject, ListParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use test_support::Outcome;

use crate::check::{agreed_vip, answers_everywhere, fqdn};
use crate::clusterset::{
    BROKER_NAMESPACE, CONVERGE, Clusterset, eventually, kubectl, member_broker_client,
};
use crate::workloads::{exported_with_pod, imports, namespace, unexport};

/// Labels of a broker record of `trust/<name>` from `cluster` (role given).
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

fn record(name: &str, labels: Value, ips: &[&str]) -> Result<DynamicObject> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "multicluster.x-k8s.io/v1beta1",
        "kind": "ServiceImport",
        "metadata": {"name": name, "labels": labels},
        "spec": {"type": "ClusterSetIP", "ips": ips, "ports": []},
    }))?)
}

fn slice(name: &str, cluster: &str) -> Result<EndpointSlice> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {
            "multicluster.kubernetes.io/service-name": "web",
            "clusterset-dns.io/service-namespace": NS,
            "multicluster.kubernetes.io/source-cluster": cluster,
            "endpointslice.kubernetes.io/managed-by": "clusterset-dns.io",
        }},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.9.9.9"]}],
    }))?)
}

/// Expects `attempt` refused by the policy with `rule` in its message.
pub async fn refused<T>(
    what: &str,
    rule: &str,
    attempt: impl Future<Output = kube::Result<T>>,
) -> Result<()> {
    match attempt.await {
        Ok(_) => bail!("{what}: admitted"),
        Err(e) => {
            let e = e.to_string();
            ensure!(
                e.contains("clusterset-broker-ownership") && e.contains(rule),
                "{what}: refused by the policy's rule {rule:?}, not: {e}"
            );
            Ok(())
        }
    }
}

const NS: &str = "trust";

/// West exports `trust/web`; east, with its own broker token, tries what
/// one member's credentials could do to another's records (west's export
/// record and slice, its heartbeat, the agreed VIP record), then does what
/// it does with a record of its own. Every later scenario runs under the
/// same policy, so what members write for themselves is admitted there.
pub async fn the_broker_refuses_writes_to_other_members_records(
    set: &mut Clusterset,
) -> Result<()> {
    for member in &set.members {
        namespace(&member.admin, NS).await?;
    }
    exported_with_pod(&set.member("west").admin, NS, "web", false, "10.2.9.1").await?;
    let vip = agreed_vip(set, NS, "web").await?;

    // The broker is east's API server; the policy type-checks cleanly
    // against every kind it matches.
    let policy = kubectl(
        &set.member("east").plane,
        &[
            "get",
            "validatingadmissionpolicy",
            "clusterset-broker-ownership",
            "-o",
            "json",
        ],
    )?;
    let policy: Value = serde_json::from_str(&policy)?;
    let warnings = &policy["status"]["typeChecking"]["expressionWarnings"];
    ensure!(
        warnings.is_null() || warnings.as_array().is_some_and(Vec::is_empty),
        "the policy's CEL type-checks cleanly: {warnings}"
    );

    let east = set.member("east");
    let client: Client = member_broker_client(east).await?;
    let records = imports(&client, BROKER_NAMESPACE);
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), BROKER_NAMESPACE);
    let leases: Api<Lease> = Api::namespaced(client.clone(), BROKER_NAMESPACE);
    let selector = format!(
        "multicluster.kubernetes.io/source-cluster=west,multicluster.kubernetes.io/service-name=web,clusterset-dns.io/service-namespace={NS}"
    );
    let west_slice = eventually(
        CONVERGE,
        "west's slice of trust/web on the broker",
        async || {
            let list = slices.list(&ListParams::default().labels(&selector)).await;
            let list = list.map_err(|e| e.to_string())?;
            Ok(list.items.into_iter().next().and_then(|s| s.metadata.name))
        },
    )
    .await?;
    let own = "a member writes only its own export records";

    let forged = record(
        "web.trust.x-west",
        labels("web", Some("west"), "export"),
        &["10.9.0.2"],
    )?;
    refused(
        "a record labelled west",
        own,
        records.create(&PostParams::default(), &forged),
    )
    .await?;
    let mut changed = records.get("web.trust.west").await?;
    changed.data["spec"]["ips"] = json!(["10.66.6.6"]);
    refused(
        "replace west's export record",
        own,
        records.replace("web.trust.west", &PostParams::default(), &changed),
    )
    .await?;
    refused(
        "delete west's export record",
        own,
        records.delete("web.trust.west", &DeleteParams::default()),
    )
    .await?;
    let named = record(
        "web.trust.west2",
        labels("web", Some("east"), "export"),
        &["10.9.0.3"],
    )?;
    refused(
        "an own record under another's name",
        own,
        records.create(&PostParams::default(), &named),
    )
    .await?;
    let squatted = record("cart.trust", labels("web", None, "import"), &["243.9.9.9"])?;
    refused(
        "a VIP record under another service's name",
        "named for its service",
        records.create(&PostParams::default(), &squatted),
    )
    .await?;
    let roleless = record(
        "web.trust.east",
        json!({"multicluster.kubernetes.io/source-cluster": "east"}),
        &[],
    )?;
    refused(
        "a record of no role",
        "only export records and VIP records",
        records.create(&PostParams::default(), &roleless),
    )
    .await?;

    let slices_rule = "a member writes only its own EndpointSlices";
    refused(
        "delete west's slice",
        slices_rule,
        slices.delete(&west_slice, &DeleteParams::default()),
    )
    .await?;
    refused(
        "a slice labelled west",
        slices_rule,
        slices.create(&PostParams::default(), &slice("web-x", "west")?),
    )
    .await?;

    let mut heartbeat = leases.get("heartbeat.west").await?;
    heartbeat
        .metadata
        .labels
        .get_or_insert_default()
        .insert("forged".into(), "true".into());
    refused(
        "renew west's heartbeat",
        "only its own heartbeat",
        leases.replace("heartbeat.west", &PostParams::default(), &heartbeat),
    )
    .await?;

    let vip_rule = "a VIP record keeps its service and its agreed addresses";
    let mut moved = records.get("web.trust").await?;
    moved.data["spec"]["ips"] = json!(["243.66.6.6"]);
    refused(
        "move the agreed VIP",
        vip_rule,
        records.replace("web.trust", &PostParams::default(), &moved),
    )
    .await?;
    let mut relabelled = records.get("web.trust").await?;
    let labels_of = relabelled.metadata.labels.get_or_insert_default();
    labels_of.insert(
        "multicluster.kubernetes.io/service-name".into(),
        "other".into(),
    );
    refused(
        "give the VIP record to another service",
        "named for its service",
        records.replace("web.trust", &PostParams::default(), &relabelled),
    )
    .await?;

    // A record of east's own (no export annotation: readers ignore it; not
    // labelled managed, so east's writer leaves it): admitted.
    let mut labels_own = labels("probe", Some("east"), "export");
    labels_own
        .as_object_mut()
        .context("labels")?
        .remove("app.kubernetes.io/managed-by");
    let mine = record("probe.trust.east", labels_own, &["10.9.0.4"])?;
    records
        .create(&PostParams::default(), &mine)
        .await
        .context("east creates its own record")?;
    let mut mine = records.get("probe.trust.east").await?;
    mine.data["spec"]["ips"] = json!(["10.9.0.5"]);
    records
        .replace("probe.trust.east", &PostParams::default(), &mine)
        .await
        .context("east changes its own record")?;
    records
        .delete("probe.trust.east", &DeleteParams::default())
        .await
        .context("east deletes its own record")?;

    // Nothing moved: every member still answers west's export at its VIP.
    let expected = Outcome::Ips([vip].into());
    answers_everywhere(set, &fqdn("web", NS), RecordType::A, &expected).await
}

/// What admission cannot see, written with the broker's admin credential
/// (standing for a compromised broker, or a bad restore): a VIP record moved
/// out of the pools, an export record of an unknown cluster with a loopback
/// ClusterIP, and a slice with a multicast endpoint (the API server itself
/// refuses loopback and link-local ones there). Every member's reader
/// refuses each (its log names the record and the rule), and every member's
/// answer for the service, sampled during and after, stays the agreed VIP.
/// Runs last; it puts the VIP record back and removes what it forged.
pub async fn the_readers_ignore_what_a_compromised_broker_holds(
    set: &mut Clusterset,
) -> Result<()> {
    for member in &set.members {
        namespace(&member.admin, NS).await?;
    }
    exported_with_pod(&set.member("west").admin, NS, "api", false, "10.2.9.2").await?;
    let vip = agreed_vip(set, NS, "api").await?;
    let expected = Outcome::Ips([vip].into());

    let admin = set.member("east").admin.clone();
    let records = imports(&admin, BROKER_NAMESPACE);
    let mut moved = records.get("api.trust").await?;
    let agreed = moved.data["spec"]["ips"].clone();
    moved.data["spec"]["ips"] = json!(["10.66.6.6"]);
    records
        .replace("api.trust", &PostParams::default(), &moved)
        .await?;
    let mut forged = records.get("api.trust.west").await?;
    forged.metadata = kube::api::ObjectMeta {
        name: Some("api.trust.evil".into()),
        labels: forged.metadata.labels.clone(),
        annotations: forged.metadata.annotations.clone(),
        ..Default::default()
    };
    let labels_of = forged.metadata.labels.get_or_insert_default();
    labels_of.insert(
        "multicluster.kubernetes.io/source-cluster".into(),
        "evil".into(),
    );
    forged.data["spec"]["ips"] = json!(["127.0.0.1"]);
    records.create(&PostParams::default(), &forged).await?;
    let slices: Api<EndpointSlice> = Api::namespaced(admin.clone(), BROKER_NAMESPACE);
    let selector = format!(
        "multicluster.kubernetes.io/source-cluster=west,multicluster.kubernetes.io/service-name=api,clusterset-dns.io/service-namespace={NS}"
    );
    let mut slice = slices
        .list(&ListParams::default().labels(&selector))
        .await?;
    let mut slice = slice
        .items
        .pop()
        .context("west's slice of trust/api on the broker")?;
    let endpoint = slice.endpoints.iter_mut().flatten().next();
    endpoint.context("an endpoint")?.addresses = vec!["239.1.1.1".into()];
    let name = slice.metadata.name.clone().unwrap_or_default();
    slices
        .replace(&name, &PostParams::default(), &slice)
        .await?;

    // Sampled for 3 s from the moment of the writes: never another answer.
    for _ in 0..30 {
        for member in &set.members {
            let got = test_support::resolve(member.dns(), &fqdn("api", NS), RecordType::A).await;
            ensure!(
                got == expected,
                "{}: {got:?} during the attack, expected {expected:?}",
                member.id
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    for member in &set.members {
        let log = member.replicas[0].log.clone();
        eventually(
            CONVERGE,
            &format!("{}: the refusal logged", member.id),
            async || {
                let text = std::fs::read_to_string(&log).map_err(|e| e.to_string())?;
                let refused = [
                    "ServiceImport api.trust: refused: VIP 10.66.6.6 is outside the VIP pools",
                    "ServiceImport api.trust.evil: refused: ClusterIP 127.0.0.1 is loopback",
                ];
                match refused.iter().find(|line| !text.contains(*line)) {
                    None => Ok(Some(())),
                    Some(missing) => Err(format!("no line {missing:?}")),
                }
            },
        )
        .await?;
    }
    answers_everywhere(set, &fqdn("api", NS), RecordType::A, &expected).await?;

    let mut back = records.get("api.trust").await?;
    back.data["spec"]["ips"] = agreed;
    records
        .replace("api.trust", &PostParams::default(), &back)
        .await?;
    records
        .delete("api.trust.evil", &DeleteParams::default())
        .await?;
    unexport(&set.member("west").admin, NS, "api").await
}
