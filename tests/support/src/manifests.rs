//! Builders for the manifests a clusterset directory holds, and the directory itself.
//!
//! Objects are built as JSON values and written as multi-document YAML, one
//! file per call, into `DIR/<cluster>/<file>`.

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use tempfile::TempDir;

/// One Kubernetes object, ready to be written.
#[derive(Clone, Debug)]
pub struct Doc(pub Value);

impl Doc {
    /// Sets a field by dotted path (`spec.sessionAffinity`), creating parents.
    pub fn set(mut self, path: &str, value: Value) -> Self {
        let mut at = &mut self.0;
        for key in path.split('.') {
            at = &mut at[key];
        }
        *at = value;
        self
    }

    /// Replaces a Service's ports: `(name, port, protocol)`, name `""` = unnamed.
    pub fn ports(self, ports: &[(&str, u16, &str)]) -> Self {
        let ports: Vec<Value> = ports
            .iter()
            .map(|(name, port, protocol)| {
                let mut p = json!({"port": port, "protocol": protocol});
                if !name.is_empty() {
                    p["name"] = json!(name);
                }
                p
            })
            .collect();
        self.set("spec.ports", Value::Array(ports))
    }

    /// A ServiceExport's `metadata.creationTimestamp` (RFC 3339).
    pub fn created(self, timestamp: &str) -> Self {
        self.set("metadata.creationTimestamp", json!(timestamp))
    }

    /// A ServiceExport served as `v1beta1` instead of `v1alpha1`.
    pub fn beta(self) -> Self {
        self.set("apiVersion", json!("multicluster.x-k8s.io/v1beta1"))
    }

    /// This Service preceded by its ServiceExport.
    pub fn exported(self) -> Vec<Doc> {
        vec![self.export(), self]
    }

    /// The ServiceExport of this Service (same namespace and name).
    pub fn export(&self) -> Doc {
        let meta = &self.0["metadata"];
        export(str_of(&meta["namespace"]), str_of(&meta["name"]))
    }
}

fn str_of(value: &Value) -> &str {
    value.as_str().expect("a string field")
}

fn meta(kind_api: (&str, &str), ns: &str, name: &str) -> Value {
    json!({"apiVersion": kind_api.0, "kind": kind_api.1, "metadata": {"name": name, "namespace": ns}})
}

fn family_of(ip: &str) -> &'static str {
    if ip.contains(':') { "IPv6" } else { "IPv4" }
}

/// A ClusterIP Service with `clusterIPs` (families follow them) and port `http:80/TCP`.
pub fn cluster_ip(ns: &str, name: &str, ips: &[&str]) -> Doc {
    let families: Vec<&str> = ips.iter().map(|ip| family_of(ip)).collect();
    let spec = json!({
        "type": "ClusterIP",
        "clusterIP": ips[0],
        "clusterIPs": ips,
        "ipFamilies": families,
    });
    Doc(meta(("v1", "Service"), ns, name))
        .set("spec", spec)
        .ports(&[("http", 80, "TCP")])
}

/// A headless Service of `families` with port `http:80/TCP`.
pub fn headless(ns: &str, name: &str, families: &[&str]) -> Doc {
    let spec = json!({"clusterIP": "None", "ipFamilies": families});
    Doc(meta(("v1", "Service"), ns, name))
        .set("spec", spec)
        .ports(&[("http", 80, "TCP")])
}

/// An ExternalName Service.
pub fn external_name(ns: &str, name: &str, target: &str) -> Doc {
    let spec = json!({"type": "ExternalName", "externalName": target});
    Doc(meta(("v1", "Service"), ns, name)).set("spec", spec)
}

/// A `v1alpha1` ServiceExport without creationTimestamp.
pub fn export(ns: &str, name: &str) -> Doc {
    Doc(meta(
        ("multicluster.x-k8s.io/v1alpha1", "ServiceExport"),
        ns,
        name,
    ))
}

/// A Namespace.
pub fn namespace(name: &str) -> Doc {
    Doc(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}))
}

/// One endpoint of an EndpointSlice.
#[derive(Clone, Debug)]
pub struct Ep(Value);

/// A ready endpoint (`conditions.ready: true`) without hostname.
pub fn ep(ip: &str) -> Ep {
    Ep(json!({"addresses": [ip], "conditions": {"ready": true}}))
}

impl Ep {
    /// With a hostname (the per-pod DNS label).
    pub fn host(mut self, hostname: &str) -> Self {
        self.0["hostname"] = json!(hostname);
        self
    }

    /// `conditions.ready: false`.
    pub fn not_ready(mut self) -> Self {
        self.0["conditions"]["ready"] = json!(false);
        self
    }

    /// No `conditions` at all (counts as ready).
    pub fn no_conditions(mut self) -> Self {
        self.0
            .as_object_mut()
            .expect("an object")
            .remove("conditions");
        self
    }
}

/// An EndpointSlice of `service` (label `kubernetes.io/service-name`); the
/// address type follows the first endpoint (IPv4 when there is none).
pub fn slice(ns: &str, name: &str, service: &str, endpoints: &[Ep]) -> Doc {
    let family = endpoints
        .first()
        .and_then(|e| e.0["addresses"][0].as_str())
        .map_or("IPv4", family_of);
    let endpoints: Vec<Value> = endpoints.iter().map(|e| e.0.clone()).collect();
    Doc(meta(("discovery.k8s.io/v1", "EndpointSlice"), ns, name))
        .set(
            "metadata.labels",
            json!({"kubernetes.io/service-name": service}),
        )
        .set("addressType", json!(family))
        .set("endpoints", Value::Array(endpoints))
}

/// Writes `count` ClusterSetIP services `s0`... in namespace `bulk`,
/// exported by `east` (`east/bulk.yaml`): enough of them make the first load
/// take a while.
pub fn write_bulk(cs: &Clusterset, count: usize) {
    let docs: Vec<Doc> = (0..count)
        .flat_map(|i| cluster_ip("bulk", &format!("s{i}"), &["10.96.0.1"]).exported())
        .collect();
    cs.write("east", "bulk.yaml", &docs);
}

/// Renders documents as one multi-document YAML text.
pub fn yaml(docs: &[Doc]) -> String {
    let values: Vec<&Value> = docs.iter().map(|d| &d.0).collect();
    serde_saphyr::to_string_multiple(&values).expect("manifests serialize")
}

/// A manifest directory in a temporary folder: one sub-folder per cluster.
pub struct Clusterset {
    root: TempDir,
}

impl Default for Clusterset {
    fn default() -> Self {
        Self::new()
    }
}

impl Clusterset {
    /// An empty clusterset.
    pub fn new() -> Self {
        Self {
            root: tempfile::tempdir().expect("a temporary directory"),
        }
    }

    /// The manifest directory (`--manifests`).
    pub fn dir(&self) -> &Path {
        self.root.path()
    }

    /// The manifest directory as a string, for command lines.
    pub fn dir_arg(&self) -> String {
        self.dir().display().to_string()
    }

    /// The default VIP state file, `DIR/.clusterset-dns/vips.json`.
    pub fn state_file(&self) -> PathBuf {
        self.dir().join(".clusterset-dns").join("vips.json")
    }

    /// `DIR/<cluster>/<file>`.
    pub fn path(&self, cluster: &str, file: &str) -> PathBuf {
        self.dir().join(cluster).join(file)
    }

    /// Writes `docs` to `DIR/<cluster>/<file>` (replacing it), creating the folder.
    pub fn write(&self, cluster: &str, file: &str, docs: &[Doc]) -> PathBuf {
        self.write_text(cluster, file, &yaml(docs))
    }

    /// Writes raw text to `DIR/<cluster>/<file>`.
    pub fn write_text(&self, cluster: &str, file: &str, text: &str) -> PathBuf {
        let path = self.path(cluster, file);
        fs::create_dir_all(path.parent().expect("a parent")).expect("cluster folder");
        fs::write(&path, text).expect("manifest written");
        path
    }

    /// Deletes `DIR/<cluster>/<file>`.
    pub fn remove(&self, cluster: &str, file: &str) {
        fs::remove_file(self.path(cluster, file)).expect("manifest removed");
    }
}
