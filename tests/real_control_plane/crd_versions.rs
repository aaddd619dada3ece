//! The MCS CRDs of one clusterset at different releases, on the real control
//! planes: a member whose CRDs serve `v1alpha1` only (a release before
//! mcs-api v0.5), one whose ServiceExport CRD serves `v1beta1` only, one
//! serving both, and a CRD served at no version. Made by `kubectl patch` of
//! the CRDs' `served` flags, and restored after: the conformance suite needs
//! `v1beta1` everywhere.

use anyhow::{Result, ensure};
use hickory_proto::rr::RecordType;
use serde_json::Value;

use crate::check::{answers_everywhere, fqdn, import_becomes, ips, status_clusters};
use crate::clusterset::{CONVERGE, Clusterset, eventually, kubectl};
use crate::faults::{NS, watched};
use crate::workloads::{
    MCS_VERSION, export_at, export_conditions, exports_at, namespace, pod, service, unexport,
};

/// Sets `served` of `version` (`v1alpha1` is the first version of both
/// `clusterset-dns crds` and upstream mcs-api's CRDs, `v1beta1` the second)
/// in `id`'s CRD of `plural`.
fn serve(set: &Clusterset, id: &str, plural: &str, version: &str, served: bool) -> Result<()> {
    let index = ["v1alpha1", "v1beta1"]
        .iter()
        .position(|v| *v == version)
        .expect("an MCS version");
    let patch = format!(
        r#"[{{"op":"test","path":"/spec/versions/{index}/name","value":"{version}"}},{{"op":"replace","path":"/spec/versions/{index}/served","value":{served}}}]"#
    );
    let crd = format!("{plural}.multicluster.x-k8s.io");
    let args = ["patch", "crd", crd.as_str(), "--type=json", "-p", &patch];
    kubectl(&set.member(id).plane, &args).map(drop)
}

/// Waits until `id`'s replica has logged a line with every one of `parts`.
async fn logs(set: &Clusterset, id: &str, parts: &[&str]) -> Result<()> {
    let log = set.member(id).replicas[0].log.clone();
    eventually(CONVERGE, &format!("{id} logs {parts:?}"), async || {
        let text = std::fs::read_to_string(&log).map_err(|e| e.to_string())?;
        if text.lines().any(|l| parts.iter().all(|p| l.contains(p))) {
            Ok(Some(()))
        } else {
            Err("not yet".to_owned())
        }
    })
    .await
    .map(drop)
}

/// Waits until `kubectl get <resource> -n NS <name> -o json` in `id`
/// satisfies `test` (kubectl names the version, as an operator would).
async fn kubectl_becomes(
    set: &Clusterset,
    id: &str,
    resource: &str,
    name: &str,
    test: impl Fn(&Value) -> bool,
) -> Result<Value> {
    let plane = &set.member(id).plane;
    eventually(
        CONVERGE,
        &format!("{id}: {resource} {NS}/{name}"),
        async || {
            let text = kubectl(plane, &["get", resource, "-n", NS, name, "-o", "json"])
                .map_err(|e| e.to_string())?;
            let value: Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
            if test(&value) {
                Ok(Some(value))
            } else {
                Err(text)
            }
        },
    )
    .await
}

/// Whether a ServiceExport as JSON has condition `Ready` `True`.
fn ready(export: &Value) -> bool {
    export["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// West's CRDs serve `v1alpha1` only, north's ServiceExport CRD `v1beta1`
/// only, east's both: each member reads and writes at the version its API
/// server serves (west moves to `v1alpha1` and says so), and a headless
/// service exported from all three, each export written at a version its
/// member serves, is imported and answered everywhere, with every export
/// Ready. West's unexport, at `v1alpha1`, goes everywhere.
pub async fn every_crd_release_in_one_clusterset(set: &mut Clusterset) -> Result<()> {
    let changes = [
        ("west", "serviceexports", "v1beta1"),
        ("west", "serviceimports", "v1beta1"),
        ("north", "serviceexports", "v1alpha1"),
    ];
    for (id, plural, version) in changes {
        serve(set, id, plural, version, false)?;
    }
    let outcome = mixed_releases(set).await;
    for (id, plural, version) in changes {
        serve(set, id, plural, version, true)?;
    }
    outcome
}

async fn mixed_releases(set: &Clusterset) -> Result<()> {
    let name = "releases";
    let moved = ["serves the kind at another version now", "to=\"v1alpha1\""];
    logs(set, "west", &moved).await?;
    let members = [
        ("east", "10.1.9.1", MCS_VERSION),
        ("west", "10.2.9.1", "v1alpha1"),
        ("north", "10.3.9.1", "v1beta1"),
    ];
    for (id, ip, version) in members {
        let admin = &set.member(id).admin;
        namespace(admin, NS).await?;
        service(admin, NS, name, true, &["IPv4"], &[("http", 80)]).await?;
        pod(admin, NS, name, &format!("{name}-1"), &[ip], false).await?;
        export_at(admin, NS, name, version).await?;
    }
    let all = ips(&["10.1.9.1", "10.2.9.1", "10.3.9.1"]);
    answers_everywhere(set, &fqdn(name, NS), RecordType::A, &all).await?;
    let clusters = ["east", "north", "west"];
    for id in ["east", "north"] {
        import_becomes(set, id, NS, name, "from all three", |i| {
            status_clusters(i) == clusters
        })
        .await?;
    }
    kubectl_becomes(
        set,
        "west",
        "serviceimports.v1alpha1.multicluster.x-k8s.io",
        name,
        |i| status_clusters(i) == clusters,
    )
    .await?;
    kubectl_becomes(
        set,
        "west",
        "serviceexports.v1alpha1.multicluster.x-k8s.io",
        name,
        ready,
    )
    .await?;
    for id in ["east", "north"] {
        let conditions = export_conditions(&set.member(id).admin, NS, name).await?;
        ensure!(
            conditions.contains(&("Ready".into(), "True".into(), "Exported".into())),
            "{id}'s export: {conditions:?}"
        );
    }
    let west = &set.member("west").admin;
    exports_at(west, NS, "v1alpha1")
        .delete(name, &Default::default())
        .await?;
    let two = ips(&["10.1.9.1", "10.3.9.1"]);
    answers_everywhere(set, &fqdn(name, NS), RecordType::A, &two).await?;
    for id in ["east", "north"] {
        unexport(&set.member(id).admin, NS, name).await?;
    }
    Ok(())
}

/// West's ServiceExport CRD serves no version (`served: false` on both):
/// west says so, naming the CRD, and loses no export: a new Pod of its
/// export still reaches every member. Served again, an unexport goes
/// everywhere.
pub async fn a_crd_serving_no_version_loses_no_export(set: &mut Clusterset) -> Result<()> {
    let (both, name) = watched(set, "skew", 7).await?;
    for version in ["v1alpha1", "v1beta1"] {
        serve(set, "west", "serviceexports", version, false)?;
    }
    // Named at the version west read last (v1alpha1 after the scenario above).
    let crd = "serviceexports.multicluster.x-k8s.io/v1";
    logs(
        set,
        "west",
        &[crd, "is not served by the local cluster (west)"],
    )
    .await?;
    pod(
        &set.member("west").admin,
        NS,
        "skew",
        "skew-2",
        &["10.2.7.2"],
        false,
    )
    .await?;
    let three = ips(&[both[0].as_str(), both[1].as_str(), "10.2.7.2"]);
    answers_everywhere(set, &name, RecordType::A, &three).await?;

    for version in ["v1alpha1", "v1beta1"] {
        serve(set, "west", "serviceexports", version, true)?;
    }
    logs(set, "west", &[crd, "is served again"]).await?;
    unexport(&set.member("west").admin, NS, "skew").await?;
    answers_everywhere(set, &name, RecordType::A, &ips(&[both[0].as_str()])).await
}
