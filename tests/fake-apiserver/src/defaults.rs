//! The little defaulting the fake does on create, where the product reads the
//! result: Namespaces (phase, `kubernetes.io/metadata.name` label) and
//! Services (type, session affinity, port protocol/targetPort, ClusterIP
//! allocation per IP family, ipFamilies/ipFamilyPolicy).

use serde_json::{Value, json};

use super::resource::ResourceType;

/// Sequential ClusterIP allocator: IPv4 from 10.96.0.0/16, IPv6 from fd00:10:96::/112.
#[derive(Default)]
pub(crate) struct IpAlloc {
    v4: u32,
    v6: u32,
}

impl IpAlloc {
    fn next(&mut self, family: &str) -> String {
        if family == "IPv6" {
            self.v6 += 1;
            format!("fd00:10:96::{:x}", self.v6 + 9)
        } else {
            self.v4 += 1;
            let n = self.v4 + 9;
            format!("10.96.{}.{}", (n >> 8) & 0xff, n & 0xff)
        }
    }
}

fn family_of(ip: &str) -> &'static str {
    if ip.contains(':') { "IPv6" } else { "IPv4" }
}

/// Defaulting on create (`old == None`) and on every update of the main resource.
pub(crate) fn apply(rt: &ResourceType, old: Option<&Value>, obj: &mut Value, alloc: &mut IpAlloc) {
    if !rt.group.is_empty() {
        return;
    }
    match rt.plural.as_str() {
        "namespaces" => namespace(obj),
        "services" => {
            if let Some(old) = old {
                keep_allocated(old, obj);
            }
            service(obj, alloc)
        }
        _ => {}
    }
}

/// kube-apiserver's `patchAllocatedValues`: an update that leaves the ClusterIPs
/// unset keeps the allocated ones.
fn keep_allocated(old: &Value, obj: &mut Value) {
    if !obj["spec"].is_object() {
        return;
    }
    let unset = |v: &Value| {
        v.is_null() || v.as_str() == Some("") || v.as_array().is_some_and(|a| a.is_empty())
    };
    for field in ["clusterIP", "clusterIPs"] {
        if unset(&obj["spec"][field]) && !unset(&old["spec"][field]) {
            obj["spec"][field] = old["spec"][field].clone();
        }
    }
}

fn namespace(obj: &mut Value) {
    let name = obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let labels = &mut obj["metadata"]["labels"];
    if !labels.is_object() {
        *labels = json!({});
    }
    labels["kubernetes.io/metadata.name"] = Value::String(name);
    if obj.pointer("/spec/finalizers").is_none() {
        obj["spec"] = json!({"finalizers": ["kubernetes"]});
    }
    if obj.pointer("/status/phase").is_none() {
        obj["status"] = json!({"phase": "Active"});
    }
}

fn service(obj: &mut Value, alloc: &mut IpAlloc) {
    if !obj["spec"].is_object() {
        obj["spec"] = json!({});
    }
    let spec = &mut obj["spec"];
    let ty = spec["type"].as_str().unwrap_or("ClusterIP").to_string();
    spec["type"] = Value::String(ty.clone());
    if spec["sessionAffinity"].is_null() {
        spec["sessionAffinity"] = json!("None");
    }
    if let Some(ports) = spec["ports"].as_array_mut() {
        for p in ports {
            if p["protocol"].is_null() {
                p["protocol"] = json!("TCP");
            }
            if p["targetPort"].is_null() && !p["port"].is_null() {
                p["targetPort"] = p["port"].clone();
            }
        }
    }
    if ty == "ExternalName" {
        return;
    }
    if spec["internalTrafficPolicy"].is_null() {
        spec["internalTrafficPolicy"] = json!("Cluster");
    }
    let mut ips = strings(&spec["clusterIPs"]);
    if ips.is_empty()
        && let Some(ip) = spec["clusterIP"].as_str().filter(|s| !s.is_empty())
    {
        ips.push(ip.to_string());
    }
    let headless = ips.first().is_some_and(|ip| ip == "None");
    let mut families = strings(&spec["ipFamilies"]);
    if headless {
        spec["clusterIP"] = json!("None");
        spec["clusterIPs"] = json!(["None"]);
        if families.is_empty() {
            families.push("IPv4".into());
        }
    } else {
        if families.is_empty() {
            families = if ips.is_empty() {
                vec!["IPv4".into()]
            } else {
                ips.iter().map(|ip| family_of(ip).to_string()).collect()
            };
        }
        while ips.len() < families.len() {
            let fam = families[ips.len()].clone();
            ips.push(alloc.next(&fam));
        }
        spec["clusterIP"] = json!(ips[0]);
        spec["clusterIPs"] = json!(ips);
    }
    if spec["ipFamilyPolicy"].is_null() {
        spec["ipFamilyPolicy"] = json!(if families.len() > 1 {
            "RequireDualStack"
        } else {
            "SingleStack"
        });
    }
    spec["ipFamilies"] = json!(families);
}

/// The strings of a JSON array (none when it is absent or not an array).
fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}
