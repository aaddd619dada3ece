//! The shipped RBAC and admission policy, evaluated by real API servers:
//! members act as their own ServiceAccounts (never an admin), may do what
//! rbac-member.yaml and rbac-broker.yaml grant and nothing more, and the
//! ValidatingAdmissionPolicies of endpointslice-policy.yaml and
//! derived-service-policy.yaml compile and admit from clusterset-dns only
//! MCS EndpointSlices and its derived Services (issue 47 item 3).

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::{DynamicObject, PostParams};
use serde_json::{Value, json};

use crate::clusterset::{
    BROKER_NAMESPACE, CONVERGE, Clusterset, DNS_NAMESPACE, Member, eventually, kubectl, kubectl_as,
    member_client, repo,
};
use crate::workloads::{imports, namespace};

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
            // Services: written, derived ones only (derived-service-policy.yaml
            // narrows this grant; issue 47 item 3), never patched.
            (false, "delete services -n any", "yes"),
            (false, "patch services -n any", "no"),
            (false, "update services -n any --subresource=status", "no"),
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

fn slice(name: &str, labels: Value) -> EndpointSlice {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NS, "labels": labels},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.9.9.9"]}],
    }))
    .expect("a slice")
}

/// The labels of an MCS slice of `web` from another cluster, plus `extra`.
fn mcs_labels(extra: Value) -> Value {
    merged(
        &json!({
            "multicluster.kubernetes.io/service-name": "web",
            "multicluster.kubernetes.io/source-cluster": "elsewhere",
            "endpointslice.kubernetes.io/managed-by": "clusterset-dns.io",
        }),
        &extra,
    )
}

/// `target` with the JSON merge patch `patch` applied (RFC 7396: an object
/// merges member by member, `null` removes a member, anything else replaces).
fn merged(target: &Value, patch: &Value) -> Value {
    let Some(members) = patch.as_object() else {
        return patch.clone();
    };
    let mut out = match target {
        Value::Object(o) => o.clone(),
        _ => Default::default(),
    };
    for (key, value) in members {
        if value.is_null() {
            out.remove(key);
        } else {
            let merged = merged(out.get(key).unwrap_or(&Value::Null), value);
            out.insert(key.clone(), merged);
        }
    }
    Value::Object(out)
}

/// The ValidatingAdmissionPolicy `name` of `member` compiled with no
/// type-check warning: each CEL expression is checked against the schema
/// of what it matches, so a misspelt field is a warning, not a rule that
/// silently never holds. kube-controller-manager's policy status
/// controller writes it to `status.typeChecking` a moment after the policy
/// is created.
pub async fn type_checks_cleanly(member: &Member, name: &str) -> Result<()> {
    let id = &member.id;
    let what = format!("{id}: {name} type-checked");
    let checking = eventually(CONVERGE, &what, async || {
        let args = ["get", "validatingadmissionpolicy", name, "-o", "json"];
        let policy = kubectl(&member.plane, &args).map_err(|e| e.to_string())?;
        let policy: Value = serde_json::from_str(&policy).map_err(|e| e.to_string())?;
        let checking = &policy["status"]["typeChecking"];
        if checking.is_object() {
            Ok(Some(checking.clone()))
        } else {
            Err(format!("not yet: {}", policy["status"]))
        }
    })
    .await?;
    let warnings = &checking["expressionWarnings"];
    ensure!(
        warnings.is_null() || warnings.as_array().is_some_and(Vec::is_empty),
        "{id}: {name}'s CEL type-checks cleanly: {warnings}"
    );
    Ok(())
}

/// Waits until the API server refuses `write` (a new policy takes effect
/// once it has loaded it) and checks it was `rule` that refused it; `undo`
/// removes what a write admitted meanwhile.
async fn refused_once_loaded<T>(
    what: &str,
    rule: &str,
    write: impl AsyncFn() -> kube::Result<T>,
    undo: impl AsyncFn(),
) -> Result<()> {
    let refusal = eventually(CONVERGE, what, async || match write().await {
        Err(e) => Ok(Some(e.to_string())),
        Ok(_) => {
            undo().await;
            Err("admitted".to_owned())
        }
    })
    .await?;
    ensure!(
        refusal.contains(rule),
        "{what}: refused by the rule {rule:?}, not: {refusal}"
    );
    Ok(())
}

/// Fails unless `write` is refused by the rule whose message holds `rule`.
async fn refused<T>(
    what: &str,
    rule: &str,
    write: impl Future<Output = kube::Result<T>>,
) -> Result<()> {
    match write.await {
        Ok(_) => bail!("{what}: admitted"),
        Err(e) => {
            let refusal = e.to_string();
            ensure!(
                refusal.contains(rule),
                "{what}: refused by the rule {rule:?}, not: {refusal}"
            );
            Ok(())
        }
    }
}

/// The policy was compiled without type-check warnings; with the member's
/// own token, a slice without the MCS labels is refused by it and one with
/// them is admitted; an MCS slice may name with `kubernetes.io/service-name`
/// (the Service kube-proxy programs it for) a derived Service only, never a
/// user's Service nor `kube-dns` (issue 47 item 3: a member must not hijack
/// the cluster's own Services with slices of its clusterset).
pub async fn the_endpointslice_policy_admits_only_mcs_slices(set: &mut Clusterset) -> Result<()> {
    for member in &set.members {
        let id = &member.id;
        type_checks_cleanly(member, "clusterset-dns-mcs-endpointslices").await?;
        namespace(&member.admin, NS).await?;
        let own = member_client(member).await?;
        let slices: Api<EndpointSlice> = Api::namespaced(own, NS);
        let plain = slice("plain", json!({"kubernetes.io/service-name": "web"}));
        refused_once_loaded(
            &format!("{id}: a plain slice"),
            "clusterset-dns may only write EndpointSlices",
            async || slices.create(&PostParams::default(), &plain).await,
            async || drop(slices.delete("plain", &Default::default()).await),
        )
        .await?;
        for service in ["kube-dns", "web", "derived-0123"] {
            let hijack = slice(
                "hijack",
                mcs_labels(json!({"kubernetes.io/service-name": service})),
            );
            refused(
                &format!("{id}: an MCS slice for the Service {service}"),
                "may only label an EndpointSlice kubernetes.io/service-name with a derived Service",
                slices.create(&PostParams::default(), &hijack),
            )
            .await?;
        }
        let mcs = slice("mcs", mcs_labels(json!({})));
        slices
            .create(&PostParams::default(), &mcs)
            .await
            .with_context(|| format!("{id}: an MCS slice is admitted"))?;
    }
    Ok(())
}

/// The namespace of the policy scenarios.
const NS: &str = "policy";
/// A derived Service's name (`derived-<16 hex>`, issue 47).
const DERIVED: &str = "derived-0123456789abcdef";
/// A user's Service whose name happens to have the derived shape.
const LOOKALIKE: &str = "derived-fedcba9876543210";
const LABELS_RULE: &str = "may only write Services labelled";
const OLD_RULE: &str = "may not change or delete a Service it did not create";

/// A well-formed derived Service of the ServiceImport `web` of uid `owner`:
/// what derived-service-policy.yaml admits.
fn derived(name: &str, owner: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {
                "app.kubernetes.io/managed-by": "clusterset-dns.io",
                "multicluster.kubernetes.io/service-name": "web",
            },
            "ownerReferences": [{
                "apiVersion": "multicluster.x-k8s.io/v1beta1",
                "kind": "ServiceImport",
                "name": "web",
                "uid": owner,
            }],
        },
        "spec": {
            "type": "ClusterIP",
            "ports": [{"name": "http", "protocol": "TCP", "port": 80}],
        },
    })
}

/// The uid of the ServiceImport `web` in the namespace of the policy
/// scenarios, created if missing: the test's own (no managed-by label, so
/// the member leaves it alone), real so that the garbage collector does
/// not remove the derived Services it owns while a scenario runs.
async fn owner_import(member: &Member) -> Result<String> {
    namespace(&member.admin, NS).await?;
    let imports = imports(&member.admin, NS);
    let import = match imports.get_opt("web").await? {
        Some(existing) => existing,
        None => {
            let import: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "multicluster.x-k8s.io/v1beta1",
                "kind": "ServiceImport",
                "metadata": {"name": "web"},
                "spec": {"type": "ClusterSetIP", "ports": []},
            }))?;
            imports.create(&PostParams::default(), &import).await?
        }
    };
    import.metadata.uid.context("a ServiceImport has a uid")
}

fn service(value: Value) -> Service {
    serde_json::from_value(value).expect("a Service")
}

/// derived-service-policy.yaml type-checks cleanly and holds the member's
/// ServiceAccount (its own token) to its derived Services (issue 47 item 3;
/// the derived Service is what KEP-1645's implementations program the
/// clusterset IP with): each forbidden create, update and delete is refused
/// by the rule that forbids it; a well-formed derived Service, an update
/// and a delete of it, and its slice are admitted.
pub async fn the_derived_service_policy_admits_only_derived_services(
    set: &mut Clusterset,
) -> Result<()> {
    for member in &set.members {
        let id = &member.id;
        type_checks_cleanly(member, "clusterset-dns-derived-services").await?;
        let uid = owner_import(member).await?;
        let own: Api<Service> = Api::namespaced(member_client(member).await?, NS);
        let admin: Api<Service> = Api::namespaced(member.admin.clone(), NS);
        let good = derived(DERIVED, &uid);

        let web = service(merged(&good, &json!({"metadata": {"name": "web"}})));
        refused_once_loaded(
            &format!("{id}: a Service of a user's name"),
            "may only write Services named derived-<16 hex>",
            async || own.create(&PostParams::default(), &web).await,
            async || drop(own.delete("web", &Default::default()).await),
        )
        .await?;
        // (what, merge patch on the good Service, the rule's message)
        let creates = [
            (
                "kube-dns's name",
                json!({"metadata": {"name": "kube-dns"}}),
                "may only write Services named derived-<16 hex>",
            ),
            (
                "a name of the derived shape, too short",
                json!({"metadata": {"name": "derived-0123"}}),
                "may only write Services named derived-<16 hex>",
            ),
            (
                "no managed-by label",
                json!({"metadata": {"labels": {"app.kubernetes.io/managed-by": null}}}),
                LABELS_RULE,
            ),
            (
                "another manager",
                json!({"metadata": {"labels": {"app.kubernetes.io/managed-by": "helm"}}}),
                LABELS_RULE,
            ),
            (
                "no service-name label",
                json!({"metadata": {"labels": {"multicluster.kubernetes.io/service-name": null}}}),
                LABELS_RULE,
            ),
            (
                "a selector",
                json!({"spec": {"selector": {"app": "web"}}}),
                "may only write Services of type ClusterIP without a selector",
            ),
            (
                "type NodePort",
                json!({"spec": {"type": "NodePort"}}),
                "may only write Services of type ClusterIP without a selector",
            ),
            (
                "type LoadBalancer",
                json!({"spec": {"type": "LoadBalancer"}}),
                "may only write Services of type ClusterIP without a selector",
            ),
            (
                "externalIPs",
                json!({"spec": {"externalIPs": ["192.0.2.10"]}}),
                "may only write Services of type ClusterIP without a selector",
            ),
            (
                "no owner reference",
                json!({"metadata": {"ownerReferences": null}}),
                "may only write Services owned by exactly one ServiceImport",
            ),
            (
                "an owner of another kind",
                json!({"metadata": {"ownerReferences": [{
                    "apiVersion": "v1", "kind": "ConfigMap", "name": "web", "uid": uid,
                }]}}),
                "may only write Services owned by exactly one ServiceImport",
            ),
            (
                "the ServiceImport of another service",
                json!({"metadata": {"labels": {"multicluster.kubernetes.io/service-name": "db"}}}),
                "may only write Services owned by exactly one ServiceImport",
            ),
            (
                "two owners",
                json!({"metadata": {"ownerReferences": [
                    good["metadata"]["ownerReferences"][0],
                    {"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
                     "name": "web", "uid": "00000000-0000-0000-0000-000000000047"},
                ]}}),
                "may only write Services owned by exactly one ServiceImport",
            ),
        ];
        for (what, patch, rule) in creates {
            let bad = service(merged(&good, &patch));
            refused(
                &format!("{id}: a Service with {what}"),
                rule,
                own.create(&PostParams::default(), &bad),
            )
            .await?;
        }

        // A user's Services: one of an ordinary name, one of the derived
        // shape. Neither may be taken over, changed into a derived one nor
        // deleted.
        for (name, rule) in [
            ("web", "may only write Services named derived-<16 hex>"),
            (LOOKALIKE, OLD_RULE),
        ] {
            let user = service(json!({
                "metadata": {"name": name, "namespace": NS},
                "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]},
            }));
            if admin.get_opt(name).await?.is_none() {
                admin.create(&PostParams::default(), &user).await?;
            }
            let live = serde_json::to_value(admin.get(name).await?)?;
            let mut patch = derived(name, &uid);
            patch["spec"] = json!({"selector": null});
            let taken = service(merged(&live, &patch));
            refused(
                &format!("{id}: the user's Service {name} turned into a derived one"),
                rule,
                own.replace(name, &PostParams::default(), &taken),
            )
            .await?;
            refused(
                &format!("{id}: the user's Service {name} deleted"),
                if name == LOOKALIKE { LABELS_RULE } else { rule },
                own.delete(name, &Default::default()),
            )
            .await?;
        }

        // A well-formed derived Service: created, changed, its slice
        // written (kube-proxy's endpoints for it), and deleted.
        own.create(&PostParams::default(), &service(good.clone()))
            .await
            .with_context(|| format!("{id}: a derived Service is admitted"))?;
        let live = serde_json::to_value(own.get(DERIVED).await?)?;
        let more_ports = json!({"spec": {"ports": [
            {"name": "http", "protocol": "TCP", "port": 80},
            {"name": "dns", "protocol": "UDP", "port": 53},
        ]}});
        own.replace(
            DERIVED,
            &PostParams::default(),
            &service(merged(&live, &more_ports)),
        )
        .await
        .with_context(|| format!("{id}: a change of a derived Service is admitted"))?;
        let slices: Api<EndpointSlice> = Api::namespaced(member_client(member).await?, NS);
        // Without endpointslice.kubernetes.io/managed-by, so that the
        // member's leader, which deletes unwanted slices carrying it, leaves
        // this one to the test.
        let its = slice(
            "derived-web",
            mcs_labels(json!({
                "kubernetes.io/service-name": DERIVED,
                "endpointslice.kubernetes.io/managed-by": null,
            })),
        );
        slices
            .create(&PostParams::default(), &its)
            .await
            .with_context(|| format!("{id}: the derived Service's MCS slice is admitted"))?;
        slices
            .delete("derived-web", &Default::default())
            .await
            .with_context(|| format!("{id}: its slice's deletion is admitted"))?;
        own.delete(DERIVED, &Default::default())
            .await
            .with_context(|| format!("{id}: a derived Service's deletion is admitted"))?;
    }
    Ok(())
}

/// config/kubernetes/servicecidr.yaml, applied by the admin, is served by
/// the API server (KEP-1880: Ready) and lets the member's ServiceAccount
/// create a derived Service whose ClusterIPs are pinned to clusterset VIPs
/// of both families (`--derived-services clusterset`, issue 47): the same
/// VIP the DNS answers, routed by the member's kube-proxy. Every member of
/// the harness has it (`clusterset.rs`, `deploy_member`): applying it again
/// changes nothing, and it stays for the other scenarios.
pub async fn the_servicecidr_lets_derived_services_pin_the_vips(
    set: &mut Clusterset,
) -> Result<()> {
    let member = &set.members[0];
    let id = &member.id;
    let file = repo("config/kubernetes/servicecidr.yaml")
        .display()
        .to_string();
    kubectl(&member.plane, &["apply", "-f", &file])?;
    kubectl(
        &member.plane,
        &[
            "wait",
            "--for=condition=Ready",
            "servicecidr/clusterset-dns-vips",
            "--timeout=60s",
        ],
    )?;
    let uid = owner_import(member).await?;
    let vips = ["243.0.0.47", "fd00:c5e7::47"];
    let pinned = merged(
        &derived(DERIVED, &uid),
        &json!({"spec": {
            "clusterIP": vips[0],
            "clusterIPs": vips,
            "ipFamilies": ["IPv4", "IPv6"],
            "ipFamilyPolicy": "RequireDualStack",
        }}),
    );
    let own: Api<Service> = Api::namespaced(member_client(member).await?, NS);
    let created = own
        .create(&PostParams::default(), &service(pinned))
        .await
        .with_context(|| format!("{id}: a derived Service pinned to the VIPs {vips:?}"))?;
    let got = created.spec.and_then(|s| s.cluster_ips).unwrap_or_default();
    let deleted = own.delete(DERIVED, &Default::default()).await;
    ensure!(
        got == vips,
        "{id}: the derived Service has the VIPs {vips:?}, not {got:?}"
    );
    deleted.with_context(|| format!("{id}: the pinned derived Service deleted"))?;
    Ok(())
}
