//! The Helm chart (charts/clusterset-dns, docs/helm.md) on the real control
//! plane. [`Clusterset::start`] installs the broker's RBAC on `east` and the
//! whole member `west` with `helm install` of the chart (the pinned helm of
//! tests/helm/go.mod) instead of `kubectl apply`, so every scenario runs on a
//! chart-installed member beside kustomize-installed ones; tests/it/helm_chart.rs
//! shows the two render the same objects. The scenario here shows the
//! releases are there and are what the members run with.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use anyhow::{Context, Result, ensure};
use hickory_proto::rr::RecordType;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Api;
use serde_json::Value;

use crate::Skipped;
use crate::check::{answers, fqdn, import_becomes, ips};
use crate::clusterset::{
    BROKER_NAMESPACE, CONVERGE, Clusterset, DNS_NAMESPACE, eventually, kubectl, kubectl_as,
};
use crate::control_plane::{ControlPlane, bin_dir};
use crate::workloads::{exported_with_pod, namespace};

/// The member installed from the chart (its CRDs are the chart's own,
/// `clusterset-dns crds`, as the other kustomize-installed member's).
pub const MEMBER: &str = "west";
/// Its release, in [`DNS_NAMESPACE`].
pub const MEMBER_RELEASE: &str = "clusterset-dns";
/// The broker's release on `east`, in [`BROKER_NAMESPACE`].
pub const BROKER_RELEASE: &str = "clusterset-broker";
const CHART: &str = "charts/clusterset-dns";
/// The Helm annotation naming the release that owns an object.
const RELEASE_ANNOTATION: &str = "meta.helm.sh/release-name";

/// helm, built by `bash tests/helm/build.sh` beside the control plane.
pub fn helm_bin() -> PathBuf {
    bin_dir().join("helm")
}

/// Whether helm is built. Without it the chart is not used (every member
/// is deployed with kustomize and the scenario skips), except under `CI`,
/// where that is an error.
pub fn available() -> Result<bool> {
    if helm_bin().is_file() {
        return Ok(true);
    }
    let message = format!(
        "no helm at {} (build it with `bash tests/helm/build.sh`)",
        helm_bin().display()
    );
    ensure!(std::env::var_os("CI").is_none(), "{message}");
    eprintln!("note: {message}: west is deployed with kustomize instead of the chart");
    Ok(false)
}

/// `helm --kubeconfig <admin of plane> args...` from the repository root,
/// with helm's cache and config in the plane's folder.
pub fn helm(plane: &ControlPlane, args: &[&str]) -> Result<String> {
    let home = plane.dir.join("helm");
    let output = Command::new(helm_bin())
        .arg("--kubeconfig")
        .arg(plane.admin_kubeconfig())
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {}", helm_bin().display()))?;
    ensure!(
        output.status.success(),
        "helm {} failed:\n{}{}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr),
        String::from_utf8_lossy(&output.stdout)
    );
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The broker's RBAC (rbac-broker.yaml as the chart's broker mode), one
/// ServiceAccount and token per member, as docs/helm.md installs it.
pub fn install_broker(plane: &ControlPlane, members: &[&str]) -> Result<()> {
    let members = format!("broker.members={{{}}}", members.join(","));
    helm(
        plane,
        &[
            "install",
            BROKER_RELEASE,
            CHART,
            "--namespace",
            BROKER_NAMESPACE,
            "--create-namespace",
            "--set",
            "mode=broker",
            "--set",
            &members,
        ],
    )
    .map(drop)
}

/// A member (config/kubernetes and the admission policies, as the chart's
/// member mode), with the chart's default values, as docs/helm.md installs it.
pub fn install_member(plane: &ControlPlane) -> Result<()> {
    helm(
        plane,
        &[
            "install",
            MEMBER_RELEASE,
            CHART,
            "--namespace",
            DNS_NAMESPACE,
            "--create-namespace",
        ],
    )
    .map(drop)
}

/// A release's status, and each of its objects as the API server holds it.
fn release(plane: &ControlPlane, name: &str, ns: &str) -> Result<(Value, Vec<Value>)> {
    let status: Value = serde_json::from_str(&helm(
        plane,
        &["status", name, "--namespace", ns, "--output", "json"],
    )?)?;
    let manifest = helm(plane, &["get", "manifest", name, "--namespace", ns])?;
    let file = plane.dir.join(format!("{name}.manifest.yaml"));
    std::fs::write(&file, manifest)?;
    let live: Value = serde_json::from_str(&kubectl(
        plane,
        &["get", "-f", &file.display().to_string(), "-o", "json"],
    )?)?;
    let items = live["items"].as_array().cloned().unwrap_or_default();
    Ok((status, items))
}

/// `kubectl auth whoami` with a member's own kubeconfig (or its broker one):
/// the username and uid the API server authenticated.
fn whoami(set: &Clusterset, id: &str, broker: bool) -> Result<(String, String)> {
    let text = kubectl_as(set.member(id), broker, &["auth", "whoami", "-o", "json"])?;
    let review: Value =
        serde_json::from_str(&text).with_context(|| format!("kubectl auth whoami: {text}"))?;
    let user = &review["status"]["userInfo"];
    Ok((
        user["username"].as_str().unwrap_or_default().to_owned(),
        user["uid"].as_str().unwrap_or_default().to_owned(),
    ))
}

/// Fails unless the ServiceAccount `ns/name` was made by `release_name`;
/// returns its uid.
async fn chart_service_account(
    client: &kube::Client,
    ns: &str,
    name: &str,
    release_name: &str,
) -> Result<String> {
    let account = Api::<ServiceAccount>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .with_context(|| format!("ServiceAccount {ns}/{name}"))?;
    let owner = account
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(RELEASE_ANNOTATION));
    ensure!(
        owner.map(String::as_str) == Some(release_name),
        "ServiceAccount {ns}/{name} is not the release {release_name}'s: {RELEASE_ANNOTATION} is {owner:?}"
    );
    Ok(account.metadata.uid.unwrap_or_default())
}

/// The chart's releases are deployed, own what they rendered, and are what
/// the member runs with: west's replicas authenticate as the chart's
/// ServiceAccount (the very object, by uid) on west and as the broker
/// release's member account on the broker; the chart's Deployment rolls out
/// under the namespace's restricted Pod Security; and exports resolve from
/// the chart-installed member to a kustomize-installed one and back.
pub async fn a_member_and_the_broker_installed_with_the_chart(set: &mut Clusterset) -> Result<()> {
    if !helm_bin().is_file() {
        return Err(Skipped(format!(
            "no helm at {}: build it with `bash tests/helm/build.sh`",
            helm_bin().display()
        ))
        .into());
    }
    let releases = [
        (MEMBER, MEMBER_RELEASE, DNS_NAMESPACE, 14),
        // The namespace, a ServiceAccount and token Secret per member, the
        // Role and RoleBinding, the ownership policy and its binding, the
        // ResourceQuota.
        (
            "east",
            BROKER_RELEASE,
            BROKER_NAMESPACE,
            1 + 2 * set.members.len() + 5,
        ),
    ];
    for (id, name, ns, objects) in releases {
        let plane = &set.member(id).plane;
        let (status, live) = release(plane, name, ns)?;
        ensure!(
            status["info"]["status"] == "deployed",
            "{id}: release {ns}/{name} is not deployed: {}",
            status["info"]
        );
        // Every object the release rendered exists and is the release's.
        let kinds: Vec<String> = live
            .iter()
            .map(|o| format!("{} {}", o["kind"], o["metadata"]["name"]))
            .collect();
        ensure!(
            live.len() == objects,
            "{id}: release {name} has {} objects, not {objects}: {kinds:?}",
            live.len()
        );
        for object in &live {
            ensure!(
                object["metadata"]["annotations"][RELEASE_ANNOTATION] == name,
                "{id}: {} {} is not the release {name}'s",
                object["kind"],
                object["metadata"]["name"]
            );
        }
    }
    let restricted = kubectl(
        &set.member(MEMBER).plane,
        &[
            "get",
            "namespace",
            DNS_NAMESPACE,
            "-o",
            "jsonpath={.metadata.labels.pod-security\\.kubernetes\\.io/enforce}",
        ],
    )?;
    ensure!(
        restricted == "restricted",
        "{MEMBER}: the chart's namespace enforces {restricted:?}, not restricted"
    );

    // West's replicas run with tokens of the chart's ServiceAccounts.
    let west = set.member(MEMBER);
    let own =
        chart_service_account(&west.admin, DNS_NAMESPACE, "clusterset-dns", MEMBER_RELEASE).await?;
    let on_broker = chart_service_account(
        &set.broker,
        BROKER_NAMESPACE,
        &format!("clusterset-member-{MEMBER}"),
        BROKER_RELEASE,
    )
    .await?;
    for (broker, username, uid) in [
        (
            false,
            format!("system:serviceaccount:{DNS_NAMESPACE}:clusterset-dns"),
            own,
        ),
        (
            true,
            format!("system:serviceaccount:{BROKER_NAMESPACE}:clusterset-member-{MEMBER}"),
            on_broker,
        ),
    ] {
        let got = whoami(set, MEMBER, broker)?;
        ensure!(
            got == (username.clone(), uid.clone()),
            "{MEMBER} (broker: {broker}) authenticates as {got:?}, not the chart's {username} {uid}"
        );
    }

    // The chart's Deployment rolls out: its Pods pass the namespace's
    // restricted Pod Security admission and are scheduled onto kwok's Node.
    let deployments: Api<Deployment> = Api::namespaced(west.admin.clone(), DNS_NAMESPACE);
    eventually(
        CONVERGE,
        "west: the chart's Deployment available",
        async || {
            let deployment = deployments
                .get("clusterset-dns")
                .await
                .map_err(|e| e.to_string())?;
            let want = deployment.spec.replicas;
            let status = deployment.status.unwrap_or_default();
            if want.is_some() && status.available_replicas == want {
                Ok(Some(()))
            } else {
                Err(format!("{status:?}"))
            }
        },
    )
    .await?;

    // An export of the chart-installed member resolves in a kustomize one,
    // and the other way round; west writes the import with the chart's RBAC.
    const NS: &str = "helm-chart";
    for (id, name, ip) in [
        (MEMBER, "from-chart", "10.2.77.1"),
        ("east", "to-chart", "10.1.77.1"),
    ] {
        let admin = &set.member(id).admin;
        namespace(admin, NS).await?;
        exported_with_pod(admin, NS, name, true, ip).await?;
    }
    answers(
        set,
        "east",
        &fqdn("from-chart", NS),
        RecordType::A,
        &ips(&["10.2.77.1"]),
    )
    .await?;
    answers(
        set,
        MEMBER,
        &fqdn("to-chart", NS),
        RecordType::A,
        &ips(&["10.1.77.1"]),
    )
    .await?;
    import_becomes(set, MEMBER, NS, "to-chart", "written by west", |i| {
        i["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "clusterset-dns.io"
    })
    .await?;
    Ok(())
}
