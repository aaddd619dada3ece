//! The Helm chart (charts/clusterset-dns) is config/kubernetes, not a second
//! copy that drifts: the real helm (pinned in tests/helm/go.mod, built by
//! `bash tests/helm/build.sh`) renders each mode, and every object must equal
//! the one of the kustomization or of the manifest applied on its own, once
//! Helm's own labels are removed. Also `helm lint` of each mode, and the
//! values' errors.
//!
//! Without helm (or kubectl) the tests skip with a message, and fail when
//! `CI` is set.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::core::v1::Secret;
use serde::de::Deserialize;
use serde_json::{Value, json};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const CHART: &str = "charts/clusterset-dns";
/// The labels the chart adds to what config/kubernetes has (Helm's own and
/// the release's), removed before comparing.
const HELM_LABELS: [&str; 4] = [
    "helm.sh/chart",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
];
/// Chart files that are copies of a file of config/: the copy, the original.
const COPIES: [(&str, &str); 2] = [
    (
        "charts/clusterset-dns/crds/crds.yaml",
        "config/kubernetes/crds.yaml",
    ),
    (
        "charts/clusterset-dns/files/prometheus-rule.yaml",
        "config/monitoring/prometheus-rule.yaml",
    ),
];

/// Where helm is: `$CONTROL_PLANE_BIN/helm`, else target/control-plane/helm.
fn helm_path() -> PathBuf {
    std::env::var_os("CONTROL_PLANE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(ROOT).join("target/control-plane"))
        .join("helm")
}

/// Fails under `CI`, else says loudly why the test does nothing.
fn skip(reason: &str) {
    assert!(
        std::env::var_os("CI").is_none(),
        "{reason} (CI is set: the chart's tests must run; see .ci/run)"
    );
    eprintln!("\n!!!!! SKIPPED chart test: {reason} !!!!!\n");
}

/// helm, or `None` (skipped) when it is not built.
fn helm() -> Option<PathBuf> {
    let path = helm_path();
    if path.is_file() {
        Some(path)
    } else {
        skip(&format!(
            "no helm at {} (build it with `bash tests/helm/build.sh`)",
            path.display()
        ));
        None
    }
}

fn kubectl_present() -> bool {
    let found = Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        skip("kubectl is not installed (Debian's kubernetes-client; see .ci/run)");
    }
    found
}

/// Runs a command in the repository; its stdout, or its stderr as the error.
fn run(program: &Path, args: &[&str]) -> Result<String, String> {
    let output = Command::new(program)
        .args(args)
        .current_dir(ROOT)
        .output()
        .unwrap_or_else(|e| panic!("{} does not run: {e}", program.display()));
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(format!(
            "{} {}: {}{}",
            program.display(),
            args.join(" "),
            String::from_utf8_lossy(&output.stderr),
            String::from_utf8_lossy(&output.stdout)
        ))
    }
}

fn documents(yaml: &str, what: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(yaml)
        .map(|doc| Value::deserialize(doc).unwrap_or_else(|e| panic!("{what}: not YAML: {e}")))
        .filter(|doc| !doc.is_null())
        .collect()
}

/// An object's identity: kind, namespace (empty when cluster-scoped), name.
type Key = (String, String, String);

fn key(doc: &Value) -> Key {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    (
        text(&doc["kind"]),
        text(&doc["metadata"]["namespace"]),
        text(&doc["metadata"]["name"]),
    )
}

fn by_key(docs: Vec<Value>, what: &str) -> BTreeMap<Key, Value> {
    let mut objects = BTreeMap::new();
    for doc in docs {
        let k = key(&doc);
        assert!(
            objects.insert(k.clone(), doc).is_none(),
            "{what}: {k:?} twice"
        );
    }
    objects
}

/// `kubectl kustomize config/kubernetes`.
fn kustomize() -> Vec<Value> {
    let kubectl = PathBuf::from("kubectl");
    let yaml = run(&kubectl, &["kustomize", "config/kubernetes"]).unwrap_or_else(|e| panic!("{e}"));
    documents(&yaml, "kubectl kustomize config/kubernetes")
}

/// The objects of a file of the repository.
fn file(path: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(Path::new(ROOT).join(path))
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    documents(&text, path)
}

/// `helm template <release> charts/clusterset-dns -n <namespace> args...`,
/// its objects with Helm's labels removed (each templated object must have
/// them: the chart labels everything it makes).
fn render(helm: &Path, release: &str, namespace: &str, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["template", release, CHART, "--namespace", namespace];
    all.extend_from_slice(args);
    let yaml = run(helm, &all).unwrap_or_else(|e| panic!("{e}"));
    documents(&yaml, &format!("helm template {}", all.join(" ")))
        .into_iter()
        .map(|mut doc| {
            if doc["kind"] != "CustomResourceDefinition" {
                let id = key(&doc);
                let labels = doc["metadata"]["labels"]
                    .as_object_mut()
                    .unwrap_or_else(|| panic!("{id:?} has no labels"));
                for name in HELM_LABELS {
                    assert!(
                        labels.remove(name).is_some(),
                        "the chart's {id:?} lacks the label {name}"
                    );
                }
                if labels.is_empty() {
                    doc["metadata"].as_object_mut().unwrap().remove("labels");
                }
            }
            doc
        })
        .collect()
}

/// The paths at which two objects differ.
fn differences(a: &Value, b: &Value, path: &str, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for k in x.keys().chain(y.keys().filter(|k| !x.contains_key(*k))) {
                let (va, vb) = (x.get(k), y.get(k));
                match (va, vb) {
                    (Some(va), Some(vb)) => differences(va, vb, &format!("{path}.{k}"), out),
                    (Some(v), None) => out.push(format!("{path}.{k}: only in the chart: {v}")),
                    (None, Some(v)) => out.push(format!("{path}.{k}: only in config/: {v}")),
                    (None, None) => {}
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (va, vb)) in x.iter().zip(y).enumerate() {
                differences(va, vb, &format!("{path}[{i}]"), out);
            }
        }
        _ if a == b => {}
        _ => out.push(format!("{path}: the chart has {a}, config/ has {b}")),
    }
}

/// The chart's objects equal config/'s: the same set, each the same.
fn assert_same(what: &str, chart: Vec<Value>, config: Vec<Value>) {
    let chart = by_key(chart, what);
    let config = by_key(config, what);
    let only_chart: Vec<_> = chart.keys().filter(|k| !config.contains_key(*k)).collect();
    let only_config: Vec<_> = config.keys().filter(|k| !chart.contains_key(*k)).collect();
    assert!(
        only_chart.is_empty() && only_config.is_empty(),
        "{what}: the chart renders {only_chart:?} that config/ does not have, \
         and not {only_config:?} that it has"
    );
    let mut found = Vec::new();
    for (k, object) in &chart {
        let mut paths = Vec::new();
        differences(object, &config[k], "", &mut paths);
        found.extend(paths.into_iter().map(|p| format!("{k:?}{p}")));
    }
    assert!(
        found.is_empty(),
        "{what}: the chart differs from config/ (change both, or only the chart's values):\n{}",
        found.join("\n")
    );
}

fn kinds(docs: &[Value]) -> Vec<String> {
    docs.iter()
        .map(|d| d["kind"].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} rendered"))
}

/// A values file with the embedded demo of config/demo, as
/// manifests-demo.yaml holds it.
fn demo_values(dir: &Path) -> PathBuf {
    let mut manifests = serde_json::Map::new();
    for cluster in ["east", "west"] {
        let path = format!("config/demo/{cluster}/shop.yaml");
        let text = std::fs::read_to_string(Path::new(ROOT).join(&path))
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        manifests.insert(cluster.into(), json!({ "shop.yaml": text }));
    }
    let values = json!({ "mode": "embedded", "embedded": { "manifests": manifests } });
    let path = dir.join("embedded-demo.yaml");
    std::fs::write(&path, serde_yaml_ng::to_string(&values).unwrap()).unwrap();
    path
}

#[test]
fn the_chart_copies_of_config_files_are_identical() {
    for (copy, original) in COPIES {
        let read =
            |p: &str| std::fs::read(Path::new(ROOT).join(p)).unwrap_or_else(|e| panic!("{p}: {e}"));
        assert!(
            read(copy) == read(original),
            "{copy} differs from {original}: the chart ships a copy; run `cp {original} {copy}`"
        );
    }
}

#[test]
fn helm_lint_passes_in_every_mode() {
    let Some(helm) = helm() else { return };
    let dir = tempfile::tempdir().unwrap();
    let embedded = demo_values(dir.path());
    let embedded = embedded.to_str().unwrap();
    for args in [
        vec![],
        vec![
            "--set",
            "clusterId=east,monitoring.serviceMonitor.enabled=true,monitoring.prometheusRule.enabled=true",
        ],
        vec![
            "--set",
            "mode=broker",
            "--set",
            "broker.members={east,west}",
        ],
        vec!["--values", embedded],
    ] {
        let mut all = vec!["lint", "--strict", CHART, "--namespace", "clusterset-dns"];
        all.extend_from_slice(&args);
        let out = run(&helm, &all).unwrap_or_else(|e| panic!("{e}"));
        assert!(out.contains("0 chart(s) failed"), "helm lint: {out}");
    }
}

/// Member mode with the default values is `kubectl apply -k config/kubernetes`
/// plus endpointslice-policy.yaml and derived-service-policy.yaml, the CRDs
/// included.
#[test]
fn member_mode_is_the_kustomization_and_the_policy() {
    let Some(helm) = helm() else { return };
    if !kubectl_present() {
        return;
    }
    let chart = render(
        &helm,
        "clusterset-dns",
        "clusterset-dns",
        &["--include-crds"],
    );
    let mut config = kustomize();
    config.extend(file("config/kubernetes/endpointslice-policy.yaml"));
    config.extend(file("config/kubernetes/derived-service-policy.yaml"));
    assert_same("member mode", chart, config);

    // Without the policies: exactly their four objects fewer.
    let without = render(
        &helm,
        "clusterset-dns",
        "clusterset-dns",
        &["--include-crds", "--set", "admissionPolicy.enabled=false"],
    );
    assert_same("member mode, no admission policies", without, kustomize());
}

/// Broker mode is rbac-broker.yaml (its members east and west),
/// broker-ownership-policy.yaml and broker-quota.yaml.
#[test]
fn broker_mode_is_rbac_broker() {
    let Some(helm) = helm() else { return };
    let chart = render(
        &helm,
        "clusterset-broker",
        "clusterset-broker",
        &[
            "--set",
            "mode=broker",
            "--set",
            "broker.members={east,west}",
        ],
    );
    let mut config = file("config/kubernetes/rbac-broker.yaml");
    config.extend(file("config/kubernetes/broker-ownership-policy.yaml"));
    config.extend(file("config/kubernetes/broker-quota.yaml"));
    assert_same("broker mode", chart, config);
}

/// Embedded mode is the kustomization's Namespace, config ConfigMap, PDB and
/// Service, manifests-demo.yaml, and the Deployment changed as
/// deployment.yaml's header says: the manifest directory instead of the
/// API servers, no ServiceAccount (rbac-member.yaml: embedded mode needs
/// none of it).
#[test]
fn embedded_mode_is_the_deployment_as_its_header_describes() {
    let Some(helm) = helm() else { return };
    if !kubectl_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let values = demo_values(dir.path());
    let chart = render(
        &helm,
        "clusterset-dns",
        "clusterset-dns",
        &["--values", values.to_str().unwrap()],
    );
    let mut config: Vec<Value> = kustomize()
        .into_iter()
        .filter(|d| {
            [
                "Namespace",
                "ConfigMap",
                "Deployment",
                "PodDisruptionBudget",
                "Service",
            ]
            .contains(&d["kind"].as_str().unwrap_or_default())
        })
        .collect();
    let deployment = config
        .iter_mut()
        .find(|d| d["kind"] == "Deployment")
        .expect("the kustomization has a Deployment");
    let pod = &mut deployment["spec"]["template"]["spec"];
    pod.as_object_mut().unwrap().remove("serviceAccountName");
    pod["automountServiceAccountToken"] = json!(false);
    let container = &mut pod["containers"][0];
    let args: Vec<Value> = container["args"].as_array().unwrap().clone();
    let source = args
        .iter()
        .position(|a| a == "--source")
        .expect("the Deployment's args have --source");
    let mut embedded_args = args[..source].to_vec();
    embedded_args.extend(
        [
            "--manifests",
            "/etc/clusterset-dns/manifests",
            "--state-file",
            "/var/lib/clusterset-dns/vips.json",
        ]
        .map(Value::from),
    );
    container["args"] = Value::Array(embedded_args);
    let mounts = container["volumeMounts"].as_array_mut().unwrap();
    mounts.retain(|m| m["name"] != "broker");
    mounts.push(json!({"name": "manifests", "mountPath": "/etc/clusterset-dns/manifests", "readOnly": true}));
    mounts.push(json!({"name": "state", "mountPath": "/var/lib/clusterset-dns"}));
    let volumes = pod["volumes"].as_array_mut().unwrap();
    volumes.retain(|v| v["name"] != "broker");
    volumes.push(json!({"name": "manifests", "configMap": {
        "name": "clusterset-dns-manifests",
        "items": [
            {"key": "east-shop.yaml", "path": "east/shop.yaml"},
            {"key": "west-shop.yaml", "path": "west/shop.yaml"},
        ],
    }}));
    volumes.push(json!({"name": "state", "emptyDir": {}}));
    config.extend(file("config/kubernetes/manifests-demo.yaml"));
    assert_same("embedded mode", chart, config);
}

/// The PrometheusRule is config/monitoring/prometheus-rule.yaml (in the
/// release's namespace); the ServiceMonitor scrapes the Service's metrics
/// port; neither is rendered unless asked for.
#[test]
fn monitoring_objects_follow_config_monitoring_and_only_when_asked() {
    let Some(helm) = helm() else { return };
    let default = render(&helm, "clusterset-dns", "clusterset-dns", &[]);
    let kinds = kinds(&default);
    assert!(
        !kinds
            .iter()
            .any(|k| k == "PrometheusRule" || k == "ServiceMonitor"),
        "monitoring objects rendered by default: {kinds:?}"
    );
    let chart = render(
        &helm,
        "clusterset-dns",
        "clusterset-dns",
        &[
            "--set",
            "monitoring.prometheusRule.enabled=true,monitoring.serviceMonitor.enabled=true",
        ],
    );
    let rule: Vec<Value> = chart
        .iter()
        .filter(|d| d["kind"] == "PrometheusRule")
        .cloned()
        .collect();
    assert_same(
        "the PrometheusRule",
        rule,
        file("config/monitoring/prometheus-rule.yaml"),
    );
    let monitor = find(&chart, "ServiceMonitor", "clusterset-dns");
    let service = find(&chart, "Service", "clusterset-dns");
    assert_eq!(
        monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"],
        "the ServiceMonitor selects the Service by its labels"
    );
    let port = monitor["spec"]["endpoints"][0]["port"].clone();
    assert!(
        service["spec"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == port && p["port"] == 9153),
        "the ServiceMonitor scrapes port {port}, the Service's metrics port 9153"
    );

    // In another namespace, with labels for Prometheus's rule selector.
    let elsewhere = render(
        &helm,
        "dns",
        "monitoring-test",
        &[
            "--set",
            "monitoring.prometheusRule.enabled=true,monitoring.prometheusRule.labels.release=prometheus",
        ],
    );
    let rule = find(&elsewhere, "PrometheusRule", "clusterset-dns");
    assert_eq!(rule["metadata"]["namespace"], "monitoring-test");
    assert_eq!(rule["metadata"]["labels"]["release"], "prometheus");
}

/// The NetworkPolicy is config/kubernetes/network-policy.yaml, rendered
/// only with `networkPolicy.enabled` (off by default: its egress must fit
/// the cluster's API servers), and only where clusterset-dns runs.
#[test]
fn the_network_policy_is_network_policy_yaml_and_only_when_asked() {
    let Some(helm) = helm() else { return };
    let policies = |args: &[&str], release: &str| -> Vec<Value> {
        render(&helm, release, release, args)
            .into_iter()
            .filter(|d| d["kind"] == "NetworkPolicy")
            .collect()
    };
    assert!(policies(&[], "clusterset-dns").is_empty(), "off by default");
    let enabled = ["--set", "networkPolicy.enabled=true"];
    assert_same(
        "the NetworkPolicy",
        policies(&enabled, "clusterset-dns"),
        file("config/kubernetes/network-policy.yaml"),
    );
    let broker = [
        "--set",
        "mode=broker,networkPolicy.enabled=true",
        "--set",
        "broker.members={east}",
    ];
    assert!(
        policies(&broker, "clusterset-broker").is_empty(),
        "a broker release runs nothing to guard"
    );
}

/// The ServiceCIDR is config/kubernetes/servicecidr.yaml, rendered only with
/// `derivedServices.serviceCIDR.create` (off by default: it is
/// cluster-scoped and changes the API server's allocator) and only in
/// member mode; its prefixes are the value `cidrs`.
#[test]
fn the_service_cidr_is_servicecidr_yaml_and_only_when_asked() {
    let Some(helm) = helm() else { return };
    let cidrs = |args: &[&str], release: &str| -> Vec<Value> {
        render(&helm, release, release, args)
            .into_iter()
            .filter(|d| d["kind"] == "ServiceCIDR")
            .collect()
    };
    assert!(cidrs(&[], "clusterset-dns").is_empty(), "off by default");
    let create = "derivedServices.serviceCIDR.create=true";
    assert_same(
        "the ServiceCIDR",
        cidrs(&["--set", create], "clusterset-dns"),
        file("config/kubernetes/servicecidr.yaml"),
    );
    let other = cidrs(
        &[
            "--set",
            create,
            "--set",
            "derivedServices.serviceCIDR.cidrs={10.200.0.0/16}",
        ],
        "clusterset-dns",
    );
    assert_eq!(other[0]["spec"]["cidrs"], json!(["10.200.0.0/16"]));
    let broker = [
        "--set",
        &format!("mode=broker,{create}"),
        "--set",
        "broker.members={east}",
    ];
    assert!(
        cidrs(&broker, "clusterset-broker").is_empty(),
        "a broker release makes no VIPs"
    );
}

/// The values an operator sets reach the objects: the release's namespace
/// everywhere a namespace is named (the policy's username, the binding's
/// subject), the cluster id and image as args, the broker's kubeconfig as
/// the Secret the Deployment mounts, the broker's members.
#[test]
fn values_reach_the_objects() {
    let Some(helm) = helm() else { return };
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = "apiVersion: v1\nkind: Config\nclusters: []\n";
    let kubeconfig_file = dir.path().join("broker.kubeconfig");
    std::fs::write(&kubeconfig_file, kubeconfig).unwrap();
    let set_file = format!("broker.kubeconfig={}", kubeconfig_file.display());
    let chart = render(
        &helm,
        "dns",
        "dns-system",
        &[
            "--set",
            "clusterId=east,replicaCount=3,image.repository=registry.test/clusterset-dns,image.tag=9.9.9",
            "--set",
            "broker.namespace=brokers,broker.kubeconfigSecret=to-broker",
            "--set-file",
            &set_file,
        ],
    );
    for doc in &chart {
        let namespace = &doc["metadata"]["namespace"];
        assert!(
            namespace.is_null() || namespace == "dns-system",
            "{:?} is not in the release's namespace",
            key(doc)
        );
    }
    for name in [
        "clusterset-dns-mcs-endpointslices",
        "clusterset-dns-derived-services",
    ] {
        let policy = find(&chart, "ValidatingAdmissionPolicy", name);
        let condition = policy["spec"]["matchConditions"][0]["expression"]
            .as_str()
            .unwrap();
        assert!(
            condition.contains("\"system:serviceaccount:dns-system:clusterset-dns\""),
            "{name} matches the release's ServiceAccount: {condition}"
        );
    }
    let binding = find(&chart, "ClusterRoleBinding", "clusterset-dns-member");
    assert_eq!(binding["subjects"][0]["namespace"], "dns-system");
    let deployment = find(&chart, "Deployment", "clusterset-dns");
    assert_eq!(deployment["spec"]["replicas"], 3);
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], "registry.test/clusterset-dns:9.9.9");
    let args: Vec<&str> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        args.windows(2).any(|w| w == ["--cluster-id", "east"])
            && args
                .windows(2)
                .any(|w| w == ["--broker-namespace", "brokers"]),
        "args: {args:?}"
    );
    let secret: Secret =
        serde_json::from_value(find(&chart, "Secret", "to-broker").clone()).unwrap();
    assert_eq!(
        secret.data.unwrap()["kubeconfig"].0,
        kubeconfig.as_bytes(),
        "the Secret holds the kubeconfig given"
    );
    let volumes = deployment["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .unwrap();
    assert!(
        volumes
            .iter()
            .any(|v| v["secret"]["secretName"] == "to-broker"),
        "the Deployment mounts the Secret: {volumes:?}"
    );

    // No image tag: the chart's appVersion.
    let default = render(&helm, "dns", "dns-system", &[]);
    let chart_yaml =
        std::fs::read_to_string(Path::new(ROOT).join(CHART).join("Chart.yaml")).unwrap();
    let app_version: Value =
        serde_yaml_ng::from_str::<Value>(&chart_yaml).unwrap()["appVersion"].clone();
    assert_eq!(
        find(&default, "Deployment", "clusterset-dns")["spec"]["template"]["spec"]["containers"][0]
            ["image"],
        format!("clusterset-dns:{}", app_version.as_str().unwrap())
    );

    // A broker for three members, one of them the broker itself.
    let broker = render(
        &helm,
        "b",
        "clusterset-broker",
        &[
            "--set",
            "mode=broker,broker.members={east,west,north},broker.localMemberNamespace=clusterset-dns",
        ],
    );
    let binding = find(&broker, "RoleBinding", "clusterset-member");
    let subjects: Vec<String> = binding["subjects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            format!(
                "{}/{}",
                s["namespace"].as_str().unwrap(),
                s["name"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        subjects,
        [
            "clusterset-broker/clusterset-member-east",
            "clusterset-broker/clusterset-member-west",
            "clusterset-broker/clusterset-member-north",
            "clusterset-dns/clusterset-dns",
        ]
    );
    let token = find(&broker, "Secret", "clusterset-member-north-token");
    assert_eq!(
        token["metadata"]["annotations"]["kubernetes.io/service-account.name"],
        "clusterset-member-north"
    );
}

/// Bad values fail with an error naming the value.
#[test]
fn bad_values_are_refused_by_name() {
    let Some(helm) = helm() else { return };
    let template = |args: &[&str]| {
        let mut all = vec!["template", "x", CHART];
        all.extend_from_slice(args);
        run(&helm, &all).expect_err(&format!("helm template {args:?} fails"))
    };
    for (args, expected) in [
        (&["--set", "mode=gateway"][..], "/mode"),
        (&["--set", "mode=broker"][..], "broker.members"),
        (&["--set", "mode=embedded"][..], "embedded.manifests"),
        (
            &["--set", "mode=broker,broker.members={East_1}"][..],
            "/broker/members/0",
        ),
        (&["--set", "clusterId=not a label"][..], "/clusterId"),
        (&["--set", "replicaCount=0"][..], "/replicaCount"),
    ] {
        let error = template(args);
        assert!(
            error.contains(expected),
            "helm template {args:?}: the error names {expected}: {error}"
        );
    }
}
