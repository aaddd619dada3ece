//! config/kubernetes renders (`kubectl kustomize`) and every object in it,
//! and in the manifests applied on their own, is a valid object of its kind:
//! it deserializes into the k8s-openapi type and survives the round trip
//! whole, so a typo'd or misplaced field is caught here rather than by
//! `kubectl apply` in a cluster.

use std::path::Path;
use std::process::Command;

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{
    ConfigMap, Namespace, ResourceQuota, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::networking::v1::{NetworkPolicy, ServiceCIDR};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde::Serialize;
use serde::de::{Deserialize, DeserializeOwned};
use serde_json::Value;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const KUSTOMIZATION: &str = "config/kubernetes";
/// The manifests the kustomization leaves out, applied on their own (see
/// its comments).
const STANDALONE: [&str; 7] = [
    "config/kubernetes/rbac-broker.yaml",
    "config/kubernetes/broker-quota.yaml",
    "config/kubernetes/endpointslice-policy.yaml",
    "config/kubernetes/derived-service-policy.yaml",
    "config/kubernetes/servicecidr.yaml",
    "config/kubernetes/network-policy.yaml",
    "config/kubernetes/manifests-demo.yaml",
];

fn documents(yaml: &str, what: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(yaml)
        .map(|doc| Value::deserialize(doc).unwrap_or_else(|e| panic!("{what}: not YAML: {e}")))
        .filter(|doc| !doc.is_null())
        .collect()
}

/// The fields of `original` that `parsed` lost or changed, as paths.
fn lost(original: &Value, parsed: &Value, path: &str, out: &mut Vec<String>) {
    match (original, parsed) {
        (Value::Object(a), Value::Object(b)) => {
            for (key, value) in a {
                match b.get(key) {
                    Some(other) => lost(value, other, &format!("{path}.{key}"), out),
                    None if value.is_null() => {}
                    None => out.push(format!("{path}.{key}")),
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                lost(x, y, &format!("{path}[{i}]"), out);
            }
        }
        (a, b) if a == b => {}
        _ => out.push(format!("{path} (value changed)")),
    }
}

fn round_trip<K: DeserializeOwned + Serialize>(doc: &Value) -> Result<(), String> {
    let object: K = serde_json::from_value(doc.clone()).map_err(|e| e.to_string())?;
    let parsed = serde_json::to_value(&object).map_err(|e| e.to_string())?;
    let mut fields = Vec::new();
    lost(doc, &parsed, "", &mut fields);
    if fields.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "unknown or misplaced fields: {}",
            fields.join(", ")
        ))
    }
}

/// Checks one object against the schema of its kind.
fn check(doc: &Value) -> Result<(), String> {
    let api_version = doc["apiVersion"].as_str().unwrap_or_default();
    let kind = doc["kind"].as_str().unwrap_or_default();
    match (api_version, kind) {
        ("v1", "Namespace") => round_trip::<Namespace>(doc),
        ("v1", "ServiceAccount") => round_trip::<ServiceAccount>(doc),
        ("v1", "ConfigMap") => round_trip::<ConfigMap>(doc),
        ("v1", "Secret") => round_trip::<Secret>(doc),
        ("v1", "Service") => round_trip::<Service>(doc),
        ("v1", "ResourceQuota") => round_trip::<ResourceQuota>(doc),
        ("apps/v1", "Deployment") => round_trip::<Deployment>(doc),
        ("policy/v1", "PodDisruptionBudget") => round_trip::<PodDisruptionBudget>(doc),
        ("networking.k8s.io/v1", "NetworkPolicy") => round_trip::<NetworkPolicy>(doc),
        ("networking.k8s.io/v1", "ServiceCIDR") => round_trip::<ServiceCIDR>(doc),
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => round_trip::<ClusterRole>(doc),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
            round_trip::<ClusterRoleBinding>(doc)
        }
        ("rbac.authorization.k8s.io/v1", "Role") => round_trip::<Role>(doc),
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => round_trip::<RoleBinding>(doc),
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => {
            round_trip::<CustomResourceDefinition>(doc)
        }
        ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy") => {
            round_trip::<ValidatingAdmissionPolicy>(doc)
        }
        ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding") => {
            round_trip::<ValidatingAdmissionPolicyBinding>(doc)
        }
        _ => Err(format!(
            "no schema known for {api_version} {kind}: add its k8s-openapi type here"
        )),
    }
}

fn name(doc: &Value) -> String {
    format!(
        "{} {}",
        doc["kind"].as_str().unwrap_or("?"),
        doc["metadata"]["name"].as_str().unwrap_or("?")
    )
}

fn kustomize() -> Vec<Value> {
    let output = Command::new("kubectl")
        .args(["kustomize", KUSTOMIZATION])
        .current_dir(ROOT)
        .output()
        .expect("kubectl runs (.ci/run installs it)");
    assert!(
        output.status.success(),
        "kubectl kustomize {KUSTOMIZATION} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    documents(
        &String::from_utf8_lossy(&output.stdout),
        "kubectl kustomize",
    )
}

#[test]
fn the_kustomization_renders_valid_objects() {
    let rendered = kustomize();
    let mut kinds: Vec<String> = rendered.iter().map(name).collect();
    kinds.sort();
    for expected in [
        "Namespace clusterset-dns",
        "CustomResourceDefinition serviceexports.multicluster.x-k8s.io",
        "CustomResourceDefinition serviceimports.multicluster.x-k8s.io",
        "Deployment clusterset-dns",
        "Service clusterset-dns",
    ] {
        assert!(
            kinds.iter().any(|k| k == expected),
            "{expected} in {kinds:?}"
        );
    }
    let problems: Vec<String> = rendered
        .iter()
        .filter_map(|doc| check(doc).err().map(|e| format!("{}: {e}", name(doc))))
        .collect();
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn the_standalone_manifests_are_valid_objects() {
    for file in STANDALONE {
        let text = std::fs::read_to_string(Path::new(ROOT).join(file)).expect(file);
        let docs = documents(&text, file);
        assert!(!docs.is_empty(), "{file} is empty");
        for doc in &docs {
            if let Err(e) = check(doc) {
                panic!("{file}: {}: {e}", name(doc));
            }
        }
    }
}

#[test]
fn a_typo_in_a_deployment_is_caught() {
    let mut deployment = kustomize()
        .into_iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("a Deployment");
    assert_eq!(check(&deployment), Ok(()));
    deployment["spec"]["template"]["spec"]["containers"][0]["imagePullPolice"] =
        Value::from("Always");
    let error = check(&deployment).unwrap_err();
    assert!(
        error.contains(".spec.template.spec.containers[0].imagePullPolice"),
        "{error}"
    );
    deployment["spec"]["replicas"] = Value::from("two");
    assert!(check(&deployment).is_err(), "a string where a number goes");
}

/// The ports the rules of `rules` open, as (port, protocol), to the peers
/// `peers` (compared as written; null: a rule naming none, every peer).
fn opened(rules: &Value, peers: &Value) -> Vec<(i64, String)> {
    rules
        .as_array()
        .expect("rules")
        .iter()
        .filter(|rule| rule.get("from").or(rule.get("to")).unwrap_or(&Value::Null) == peers)
        .flat_map(|rule| rule["ports"].as_array().cloned().unwrap_or_default())
        .map(|p| {
            let port = p["port"].as_i64().expect("numeric ports");
            (port, p["protocol"].as_str().unwrap_or("TCP").to_owned())
        })
        .collect()
}

/// network-policy.yaml fits the Deployment it guards: it selects its Pods,
/// opens DNS (each container port named dns-*, with its protocol) to every
/// namespace and the metrics port to the `monitoring` namespace only, and
/// lets the Pods reach API servers (443, 6443) and DNS.
#[test]
fn the_network_policy_opens_the_deployments_ports_and_no_more() {
    let rendered = kustomize();
    let deployment = rendered
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("the Deployment");
    let policy = documents(
        &std::fs::read_to_string(Path::new(ROOT).join("config/kubernetes/network-policy.yaml"))
            .expect("network-policy.yaml"),
        "network-policy.yaml",
    )
    .remove(0);
    let spec = &policy["spec"];
    assert_eq!(
        spec["podSelector"]["matchLabels"],
        deployment["spec"]["selector"]["matchLabels"]
    );
    assert_eq!(
        policy["metadata"]["namespace"],
        deployment["metadata"]["namespace"]
    );
    assert_eq!(
        spec["policyTypes"],
        serde_json::json!(["Ingress", "Egress"])
    );
    let ports = deployment["spec"]["template"]["spec"]["containers"][0]["ports"]
        .as_array()
        .expect("container ports");
    let port = |name: &str| {
        let p = ports.iter().find(|p| p["name"] == name).expect(name);
        let protocol = p["protocol"].as_str().unwrap_or("TCP").to_owned();
        (p["containerPort"].as_i64().expect("a port"), protocol)
    };
    let cluster = opened(
        &spec["ingress"],
        &serde_json::json!([{"namespaceSelector": {}}]),
    );
    assert_eq!(
        cluster,
        vec![port("dns-udp"), port("dns-tcp"), (8853, "TCP".into())],
        "DNS (and DNS over TLS) from every namespace"
    );
    let monitoring = serde_json::json!([{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]);
    assert_eq!(
        opened(&spec["ingress"], &monitoring),
        vec![port("metrics")],
        "metrics from the monitoring namespace"
    );
    assert_eq!(
        spec["ingress"].as_array().unwrap().len(),
        2,
        "no other way in"
    );
    let anywhere = opened(&spec["egress"], &Value::Null);
    for needed in [(443, "TCP"), (6443, "TCP"), (53, "UDP"), (53, "TCP")] {
        assert!(
            anywhere.contains(&(needed.0, needed.1.to_owned())),
            "egress to {needed:?} in {anywhere:?}"
        );
    }
}

/// servicecidr.yaml holds the default VIP pools as a ServiceCIDR the API
/// server allocates from (KEP-1880), for derived Services pinned to the
/// clusterset VIPs: --vip-pool-v4's default whole; of --vip-pool-v6's, the
/// pool itself if it is a /64 or longer, else a /64 of it (the API server
/// leaves a shorter IPv6 prefix unused). Cluster-scoped and changing the
/// allocator, it is applied on its own, never by the kustomization.
#[test]
fn the_service_cidr_holds_the_default_vip_pools() {
    use clap::Parser;
    use clusterset_dns::cli::{Cli, Command};
    let Some(Command::Serve(serve)) = Cli::try_parse_from(["clusterset-dns", "serve"])
        .expect("serve parses")
        .command
    else {
        panic!("not serve");
    };
    let (v4, v6) = (serve.clusterset.vip_pool_v4, serve.clusterset.vip_pool_v6);
    let path = "config/kubernetes/servicecidr.yaml";
    let docs = documents(
        &std::fs::read_to_string(Path::new(ROOT).join(path)).expect(path),
        path,
    );
    assert_eq!(docs.len(), 1, "{path}: one ServiceCIDR");
    assert_eq!(docs[0]["kind"], "ServiceCIDR");
    let cidrs: Vec<&str> = docs[0]["spec"]["cidrs"]
        .as_array()
        .expect("spec.cidrs")
        .iter()
        .map(|c| c.as_str().expect("a CIDR"))
        .collect();
    assert_eq!(cidrs.len(), 2, "one prefix per family: {cidrs:?}");
    assert_eq!(cidrs[0], v4.to_string(), "the IPv4 pool");
    let served: ipnet::Ipv6Net = cidrs[1].parse().expect("an IPv6 prefix");
    if v6.prefix_len() >= 64 {
        assert_eq!(served, v6, "the IPv6 pool");
    } else {
        assert!(
            served.prefix_len() == 64 && v6.contains(&served),
            "{served} is a /64 of the IPv6 pool {v6}"
        );
    }
    assert!(
        !kustomize().iter().any(|d| d["kind"] == "ServiceCIDR"),
        "the kustomization leaves the ServiceCIDR to the admin"
    );
}
