//! The shipped RBAC and admission policy, evaluated by real API servers:
//! members act as their own ServiceAccounts (never an admin), may do what
//! rbac-member.yaml and rbac-broker.yaml grant and nothing more, and the
//! ValidatingAdmissionPolicy of endpointslice-policy.yaml compiles and
//! admits only MCS EndpointSlices from clusterset-dns.

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use crate::clusterset::{
    BROKER_NAMESPACE, CONVERGE, Clusterset, DNS_NAMESPACE, eventually, kubectl_as, member_client,
};
use crate::workloads::namespace;

/// `kubectl auth whoami` and `kubectl auth can-i` with each member's own
/// kubeconfigs: the members are their ServiceAccounts, on their cluster and
/// on the broker, and may not do what they were not granted.
pub async fn members_use_their_own_service_accounts(set: &mut Clusterset) -> Result<()> {
    for member in &set.members {
        let id = &member.id;
        let identities = [
            (
                false,
                format!("system:serviceaccount:{DNS_NAMESPACE}:clusterset-dns"),
            ),
            (
                true,
                format!("system:serviceaccount:{BROKER_NAMESPACE}:clusterset-member-{id}"),
            ),
        ];
        for (broker, expected) in identities {
            let whoami = [
                "auth",
                "whoami",
                "-o",
                "jsonpath={.status.userInfo.username}",
            ];
            let user = kubectl_as(member, broker, &whoami)?;
            ensure!(
                user == expected,
                "{id} (broker: {broker}): the member is {expected}, not {user}"
            );
        }
        // (on the broker?, the request, the answer): what rbac-member.yaml
        // and rbac-broker.yaml grant, and a neighbour of each they do not.
        let table = [
            (
                false,
                "create serviceimports.multicluster.x-k8s.io -n any",
                "yes",
            ),
            (
                false,
                "patch serviceexports.multicluster.x-k8s.io --subresource=status -n any",
                "yes",
            ),
            (
                false,
                "patch serviceimports.multicluster.x-k8s.io --subresource=status -n any",
                "yes",
            ),
            (false, "watch endpointslices.discovery.k8s.io -A", "yes"),
            (
                false,
                "create serviceexports.multicluster.x-k8s.io -n any",
                "no",
            ),
            (
                false,
                "patch serviceexports.multicluster.x-k8s.io -n any",
                "no",
            ),
            (false, "delete services -n any", "no"),
            (false, "get secrets -n clusterset-dns", "no"),
            (true, "create configmaps -n clusterset-broker", "yes"),
            (true, "list configmaps -n clusterset-broker", "yes"),
            (true, "watch configmaps -n clusterset-broker", "yes"),
            (true, "update configmaps -n clusterset-broker", "no"),
            (
                true,
                "watch leases.coordination.k8s.io -n clusterset-broker",
                "yes",
            ),
            (
                true,
                "create serviceimports.multicluster.x-k8s.io -n default",
                "no",
            ),
        ];
        for (broker, request, expected) in table {
            let mut words = vec!["auth", "can-i"];
            words.extend(request.split_whitespace());
            let answer = kubectl_as(member, broker, &words)?;
            ensure!(
                answer.lines().next().map(str::trim) == Some(expected),
                "{id}: can-i {request} (broker: {broker}) is {answer:?}, expected {expected}"
            );
        }
    }
    Ok(())
}

fn slice(name: &str, labels: serde_json::Value) -> EndpointSlice {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "policy", "labels": labels},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.9.9.9"]}],
    }))
    .expect("a slice")
}

/// The policy was compiled without type-check warnings; with the member's
/// own token, a slice without the MCS labels is refused by it and one with
/// them is admitted.
pub async fn the_endpointslice_policy_admits_only_mcs_slices(set: &mut Clusterset) -> Result<()> {
    for member in &set.members {
        let id = &member.id;
        let policy = crate::clusterset::kubectl(
            &member.plane,
            &[
                "get",
                "validatingadmissionpolicy",
                "clusterset-dns-mcs-endpointslices",
                "-o",
                "json",
            ],
        )?;
        let policy: serde_json::Value = serde_json::from_str(&policy)?;
        let warnings = &policy["status"]["typeChecking"]["expressionWarnings"];
        ensure!(
            warnings.is_null() || warnings.as_array().is_some_and(Vec::is_empty),
            "{id}: the policy's CEL type-checks cleanly: {warnings}"
        );
        namespace(&member.admin, "policy").await?;
        let own = member_client(member).await?;
        let slices: Api<EndpointSlice> = Api::namespaced(own, "policy");
        let plain = slice("plain", json!({"kubernetes.io/service-name": "web"}));
        // A new policy takes effect once the API server has loaded it.
        let refused = eventually(
            CONVERGE,
            &format!("{id}: the policy refuses a plain slice"),
            async || match slices.create(&PostParams::default(), &plain).await {
                Err(e) => Ok(Some(e.to_string())),
                Ok(_) => {
                    let _ = slices.delete("plain", &Default::default()).await;
                    Err("admitted".to_owned())
                }
            },
        )
        .await?;
        ensure!(
            refused.contains("clusterset-dns may only write EndpointSlices"),
            "{id}: refused by the policy's message: {refused}"
        );
        let mcs = slice(
            "mcs",
            json!({
                "multicluster.kubernetes.io/service-name": "web",
                "multicluster.kubernetes.io/source-cluster": "elsewhere",
                "endpointslice.kubernetes.io/managed-by": "clusterset-dns.io",
            }),
        );
        slices
            .create(&PostParams::default(), &mcs)
            .await
            .with_context(|| format!("{id}: an MCS slice is admitted"))?;
    }
    Ok(())
}
