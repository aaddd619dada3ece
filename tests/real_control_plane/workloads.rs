//! What a cluster's users and its kubelet would do, done through the API:
//! namespaces, Nodes, Services, Pods and their status (Running, pod IPs,
//! Ready), ServiceExports. The real EndpointSlice controller turns the
//! Pods into each Service's slices.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
    PostParams,
};
use kube::{Api, Client};
use serde_json::{Value, json};

/// The MCS group's version these tests read and write at, served by every
/// member's CRDs (scenarios that change that use the `_at` forms).
pub const MCS_VERSION: &str = "v1beta1";

fn mcs(kind: &str, plural: &str, version: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("multicluster.x-k8s.io", version, kind),
        plural,
    )
}

/// The ServiceExports of a namespace.
pub fn exports(client: &Client, ns: &str) -> Api<DynamicObject> {
    exports_at(client, ns, MCS_VERSION)
}

/// The ServiceExports of a namespace, at `version`.
pub fn exports_at(client: &Client, ns: &str, version: &str) -> Api<DynamicObject> {
    let resource = mcs("ServiceExport", "serviceexports", version);
    Api::namespaced_with(client.clone(), ns, &resource)
}

/// The ServiceImports of a namespace.
pub fn imports(client: &Client, ns: &str) -> Api<DynamicObject> {
    imports_at(client, ns, MCS_VERSION)
}

/// The ServiceImports of a namespace, at `version`.
pub fn imports_at(client: &Client, ns: &str, version: &str) -> Api<DynamicObject> {
    let resource = mcs("ServiceImport", "serviceimports", version);
    Api::namespaced_with(client.clone(), ns, &resource)
}

pub fn from_json<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).expect("a valid object")
}

/// Creates a namespace (if missing) and waits for its default
/// ServiceAccount, which Pods need (ServiceAccount admission).
pub async fn namespace(client: &Client, ns: &str) -> Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    if api.get_opt(ns).await?.is_none() {
        api.create(
            &PostParams::default(),
            &from_json(json!({"metadata": {"name": ns}})),
        )
        .await
        .with_context(|| format!("creating namespace {ns}"))?;
    }
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(client.clone(), ns);
    for _ in 0..300 {
        if accounts.get_opt("default").await?.is_some() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("namespace {ns}: no default ServiceAccount")
}

/// The one Node Pods of this cluster run on (zone `<cluster>-a`).
pub async fn node(client: &Client, cluster: &str) -> Result<()> {
    let api: Api<Node> = Api::all(client.clone());
    if api.get_opt("node-1").await?.is_none() {
        api.create(
            &PostParams::default(),
            &from_json(json!({"metadata": {"name": "node-1", "labels": {
                "kubernetes.io/hostname": "node-1",
                "topology.kubernetes.io/zone": format!("{cluster}-a"),
            }}})),
        )
        .await?;
    }
    Ok(())
}

/// A Service: `ports` as `(name, port)` over TCP; `cluster_ip: None` is
/// headless; `families` its `ipFamilies` (`RequireDualStack` for two).
pub async fn service(
    client: &Client,
    ns: &str,
    name: &str,
    headless: bool,
    families: &[&str],
    ports: &[(&str, u16)],
) -> Result<()> {
    let policy = if families.len() > 1 {
        "RequireDualStack"
    } else {
        "SingleStack"
    };
    let mut spec = json!({
        "selector": {"app": name},
        "ipFamilies": families,
        "ipFamilyPolicy": policy,
        "ports": ports.iter().map(|(n, p)| json!({"name": n, "port": p, "protocol": "TCP"})).collect::<Vec<_>>(),
    });
    if headless {
        spec["clusterIP"] = json!("None");
    }
    let api: Api<Service> = Api::namespaced(client.clone(), ns);
    api.create(
        &PostParams::default(),
        &from_json(json!({"metadata": {"name": name, "namespace": ns}, "spec": spec})),
    )
    .await
    .with_context(|| format!("creating Service {ns}/{name}"))?;
    Ok(())
}

/// A Pod of app `app` on node-1 with these IPs, Running and Ready (as the
/// kubelet would report it); `hostname` makes it a per-pod name of the
/// headless Service `app`.
pub async fn pod(
    client: &Client,
    ns: &str,
    app: &str,
    name: &str,
    ips: &[&str],
    hostname: bool,
) -> Result<()> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let mut spec = json!({
        "nodeName": "node-1",
        "containers": [{"name": "app", "image": "registry.invalid/app:1"}],
    });
    if hostname {
        spec["hostname"] = json!(name);
        spec["subdomain"] = json!(app);
    }
    api.create(
        &PostParams::default(),
        &from_json(json!({
            "metadata": {"name": name, "namespace": ns, "labels": {"app": app}},
            "spec": spec,
        })),
    )
    .await
    .with_context(|| format!("creating Pod {ns}/{name}"))?;
    let status = json!({"status": {
        "phase": "Running",
        "hostIP": "192.0.2.1",
        "podIP": ips[0],
        "podIPs": ips.iter().map(|ip| json!({"ip": ip})).collect::<Vec<_>>(),
        "conditions": conditions(true),
    }});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .with_context(|| format!("setting the status of Pod {ns}/{name}"))?;
    Ok(())
}

fn conditions(ready: bool) -> Value {
    let status = if ready { "True" } else { "False" };
    json!([
        {"type": "PodScheduled", "status": "True"},
        {"type": "Initialized", "status": "True"},
        {"type": "ContainersReady", "status": status},
        {"type": "Ready", "status": status},
    ])
}

/// Turns a Pod ready or not ready, as its readiness probe would.
pub async fn set_ready(client: &Client, ns: &str, name: &str, ready: bool) -> Result<()> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let status = json!({"status": {"conditions": conditions(ready)}});
    api.patch_status(name, &PatchParams::default(), &Patch::Strategic(&status))
        .await
        .with_context(|| format!("setting Ready={ready} on Pod {ns}/{name}"))?;
    Ok(())
}

/// A ServiceExport of `ns/name`.
pub async fn export(client: &Client, ns: &str, name: &str) -> Result<()> {
    export_at(client, ns, name, MCS_VERSION).await
}

/// A ServiceExport of `ns/name`, written at `version`.
pub async fn export_at(client: &Client, ns: &str, name: &str, version: &str) -> Result<()> {
    exports_at(client, ns, version)
        .create(
            &PostParams::default(),
            &from_json(json!({
                "apiVersion": format!("multicluster.x-k8s.io/{version}"),
                "kind": "ServiceExport",
                "metadata": {"name": name, "namespace": ns},
            })),
        )
        .await
        .with_context(|| format!("creating ServiceExport {ns}/{name}"))?;
    Ok(())
}

/// An IPv4 Service `name` on `http:80` (headless or not), one Pod
/// `<name>-1` at `ip` behind it, and its ServiceExport.
pub async fn exported_with_pod(
    client: &Client,
    ns: &str,
    name: &str,
    headless: bool,
    ip: &str,
) -> Result<()> {
    service(client, ns, name, headless, &["IPv4"], &[("http", 80)]).await?;
    pod(client, ns, name, &format!("{name}-1"), &[ip], false).await?;
    export(client, ns, name).await
}

/// Deletes a ServiceExport.
pub async fn unexport(client: &Client, ns: &str, name: &str) -> Result<()> {
    exports(client, ns)
        .delete(name, &DeleteParams::default())
        .await
        .with_context(|| format!("deleting ServiceExport {ns}/{name}"))?;
    Ok(())
}

/// A ServiceImport as JSON, if it exists.
pub async fn import(client: &Client, ns: &str, name: &str) -> Result<Option<Value>> {
    Ok(imports(client, ns)
        .get_opt(name)
        .await?
        .map(|o| serde_json::to_value(o).expect("JSON")))
}

/// `(type, status, reason)` of a ServiceExport's conditions.
pub async fn export_conditions(
    client: &Client,
    ns: &str,
    name: &str,
) -> Result<BTreeSet<(String, String, String)>> {
    let export = exports(client, ns).get(name).await?;
    let value = serde_json::to_value(export)?;
    Ok(value["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
            (s("type"), s("status"), s("reason"))
        })
        .collect())
}

/// The EndpointSlices of a namespace selected by a label selector.
pub async fn slices(client: &Client, ns: &str, selector: &str) -> Result<Vec<EndpointSlice>> {
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), ns);
    Ok(api
        .list(&ListParams::default().labels(selector))
        .await?
        .items)
}

/// The MCS slices of a service in a member: `(source cluster, sorted ready addresses)`.
pub async fn mcs_slices(
    client: &Client,
    ns: &str,
    service: &str,
) -> Result<BTreeSet<(String, Vec<String>)>> {
    let selector = format!("multicluster.kubernetes.io/service-name={service}");
    Ok(slices(client, ns, &selector)
        .await?
        .into_iter()
        .map(|s| {
            let labels = s.metadata.labels.unwrap_or_default();
            let source = labels
                .get("multicluster.kubernetes.io/source-cluster")
                .cloned()
                .unwrap_or_default();
            let mut addresses: Vec<String> = s
                .endpoints
                .iter()
                .flatten()
                .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) != Some(false))
                .flat_map(|e| e.addresses.clone())
                .collect();
            addresses.sort();
            (source, addresses)
        })
        .collect())
}
