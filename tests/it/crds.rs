//! The checked-in CustomResourceDefinitions are what `clusterset-dns crds`
//! generates from the Rust types in src/k8s/crd.rs.

use std::path::Path;
use std::process::Command;

use clusterset_dns::k8s::crd;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

const BIN: &str = env!("CARGO_BIN_EXE_clusterset-dns");
const CHECKED_IN: &str = "config/kubernetes/crds.yaml";
const REGENERATE: &str = "cargo run -- crds > config/kubernetes/crds.yaml";

fn checked_in() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(CHECKED_IN);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; regenerate with `{REGENERATE}`", path.display()))
}

#[test]
fn checked_in_crds_match_the_command() {
    let output = Command::new(BIN)
        .arg("crds")
        .output()
        .expect("the binary runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let generated = String::from_utf8(output.stdout).expect("UTF-8");
    assert_eq!(
        generated,
        crd::crds_yaml(),
        "the command prints crds_yaml()"
    );
    let file = checked_in();
    if file != generated {
        let line = file
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .map_or_else(
                || file.lines().count().min(generated.lines().count()) + 1,
                |i| i + 1,
            );
        panic!(
            "{CHECKED_IN} is out of date with src/k8s/crd.rs (first difference at line {line}); \
             regenerate it with `{REGENERATE}` and commit it"
        );
    }
}

#[test]
fn the_yaml_reads_back_as_the_generated_crds() {
    let crds: Vec<CustomResourceDefinition> =
        serde_saphyr::from_multiple(&crd::crds_yaml()).expect("valid multi-document YAML");
    // No assert_eq!: the Debug form of two CRDs is thousands of lines.
    assert!(
        crds == crd::crds(),
        "crds_yaml() does not read back as crds() (quoting or folding lost something)"
    );
}

#[test]
fn one_crd_per_kind_serving_both_versions_stored_as_v1beta1() {
    let crds = crd::crds();
    let names: Vec<&str> = crds
        .iter()
        .map(|c| c.metadata.name.as_deref().unwrap_or_default())
        .collect();
    assert_eq!(
        names,
        [
            "serviceexports.multicluster.x-k8s.io",
            "serviceimports.multicluster.x-k8s.io"
        ]
    );
    for c in &crds {
        assert_eq!(c.spec.group, crd::GROUP);
        assert_eq!(c.spec.scope, "Namespaced");
        let versions: Vec<(&str, bool, bool)> = c
            .spec
            .versions
            .iter()
            .map(|v| (v.name.as_str(), v.served, v.storage))
            .collect();
        assert_eq!(
            versions,
            [("v1alpha1", true, false), ("v1beta1", true, true)],
            "{names:?}"
        );
        for v in &c.spec.versions {
            let status = v.subresources.as_ref().and_then(|s| s.status.as_ref());
            assert!(status.is_some(), "status subresource on {}", v.name);
        }
    }
    let import = &crds[1].spec.versions[1];
    let schema = import
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .expect("a schema");
    let spec = &schema.properties.as_ref().expect("properties")["spec"];
    let required = spec.required.clone().unwrap_or_default();
    assert_eq!(required, ["type"]);
    let props = spec.properties.as_ref().expect("spec properties");
    for field in ["ports", "ips", "type", "sessionAffinity", "ipFamilies"] {
        assert!(props.contains_key(field), "ServiceImport spec.{field}");
    }
}

/// mcs-api v0.5 (KEP-1645) added `ServiceImport.status.endpointSliceObjects`,
/// `Present` or `Absent`, to both versions: a CRD without it would drop
/// what the writer sets (API servers prune unknown fields).
#[test]
fn service_import_status_has_endpoint_slice_objects_in_both_versions() {
    let crds = crd::crds();
    for version in &crds[1].spec.versions {
        let schema = version
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .expect("a schema");
        let status = &schema.properties.as_ref().expect("properties")["status"];
        let field = &status.properties.as_ref().expect("status properties")["endpointSliceObjects"];
        assert_eq!(field.type_.as_deref(), Some("string"), "{}", version.name);
        let values: Vec<String> = field
            .enum_
            .iter()
            .flatten()
            .map(|v| v.0.as_str().unwrap_or_default().to_owned())
            .collect();
        assert_eq!(values, ["Present", "Absent"], "{}", version.name);
    }
}
