//! Discovery documents: legacy (`/api`, `/apis`, `/api/v1`, `/apis/<g>`,
//! `/apis/<g>/<v>`) and aggregated v2 (`Accept: ...;as=APIGroupDiscoveryList`),
//! plus `/version`.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::resource::{ResourceType, version_priority};

const VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

pub(crate) fn version() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "gitVersion": "v1.33.0-fake",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z",
        "goVersion": "go1.24",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

/// Group name -> versions sorted by kube priority (preferred first).
fn groups(resources: &[ResourceType]) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in resources {
        let vs = out.entry(r.group.clone()).or_default();
        for v in &r.versions {
            if !vs.contains(v) {
                vs.push(v.clone());
            }
        }
    }
    for vs in out.values_mut() {
        vs.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
    }
    out
}

pub(crate) fn core_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

fn api_group(name: &str, versions: &[String]) -> Value {
    let gvs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    json!({
        "name": name,
        "versions": gvs,
        "preferredVersion": gvs.first().cloned().unwrap_or(Value::Null),
    })
}

pub(crate) fn group_list(resources: &[ResourceType]) -> Value {
    let groups: Vec<Value> = groups(resources)
        .iter()
        .filter(|(g, _)| !g.is_empty())
        .map(|(g, vs)| api_group(g, vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

pub(crate) fn group(resources: &[ResourceType], name: &str) -> Option<Value> {
    groups(resources).get(name).map(|vs| {
        let mut g = api_group(name, vs);
        g["kind"] = json!("APIGroup");
        g["apiVersion"] = json!("v1");
        g
    })
}

pub(crate) fn resource_list(resources: &[ResourceType], group: &str, version: &str) -> Value {
    let mut list = Vec::new();
    for r in resources
        .iter()
        .filter(|r| r.group == group && r.versions.iter().any(|v| v == version))
    {
        list.push(json!({
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": VERBS,
            "shortNames": r.short_names,
        }));
        if r.status_subresource {
            list.push(json!({
                "name": format!("{}/status", r.plural),
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": list})
}

/// Aggregated discovery (`apidiscovery.k8s.io/v2`) for the core group (`core == true`) or all other groups.
pub(crate) fn aggregated(resources: &[ResourceType], core: bool) -> Value {
    let items: Vec<Value> = groups(resources)
        .iter()
        .filter(|(g, _)| g.is_empty() == core)
        .map(|(g, vs)| {
            let versions: Vec<Value> = vs
                .iter()
                .map(|v| {
                    let res: Vec<Value> = resources
                        .iter()
                        .filter(|r| &r.group == g && r.versions.contains(v))
                        .map(|r| {
                            let gvk = json!({"group": g, "version": v, "kind": r.kind});
                            let subresources: Vec<Value> = if r.status_subresource {
                                vec![json!({"subresource": "status", "responseKind": gvk, "verbs": ["get", "patch", "update"]})]
                            } else {
                                vec![]
                            };
                            json!({
                                "resource": r.plural,
                                "responseKind": gvk,
                                "scope": if r.namespaced { "Namespaced" } else { "Cluster" },
                                "singularResource": r.singular,
                                "verbs": VERBS,
                                "shortNames": r.short_names,
                                "subresources": subresources,
                            })
                        })
                        .collect();
                    json!({"version": v, "resources": res, "freshness": "Current"})
                })
                .collect();
            json!({"metadata": {"name": g}, "versions": versions})
        })
        .collect();
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    })
}
