//! The upstream MCS API conformance suite (`sigs.k8s.io/mcs-api`,
//! `conformance/`), unmodified, against the three members: it deploys
//! Services, Deployments and StatefulSets, exports them, reads the
//! ServiceImports, ServiceExport conditions and MCS EndpointSlices
//! clusterset-dns writes, and runs `nslookup` in a request Pod of every
//! cluster through `kubectl exec`, which asks the cluster's CoreDNS (the
//! shipped stanza forwarding `clusterset.local` to the member's replicas).
//!
//! The Connectivity specs send traffic to the clusterset IPs, so the suite
//! runs on the test's data plane (`dataplane/`). The members run with
//! `--derived-services clusterset`, as every scenario's do: each member's
//! derived Service holds the one clusterset VIP, so the DNS specs see the
//! same answers in every member and stock kube-proxy routes that VIP to
//! every exporting cluster's Pods. The request Pod's
//! `kubectl exec` runs in its member's node network namespace, where the
//! member's kube-proxy programs the derived Services' IPs, and resolves
//! through the cluster's CoreDNS on the node's host address
//! ([`ExecInNode`]); the hello Pods' socat scripts listen on their Pod IPs
//! (`containers.rs`). Every spec must pass.
//!
//! The suite is built by `tests/control-plane/build.sh` from the copy in the
//! `shared/` folder beside the checkout; without it the scenario is skipped
//! (fails under CI). Its report (`report.yaml`, `report.html`) and log are
//! kept in `target/mcs-conformance/`.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use hickory_proto::rr::RecordType;
use serde::Deserialize;

use crate::Skipped;
use crate::clusterset::Clusterset;
use crate::containers::{self, Cluster};
use crate::control_plane::{Process, bin_dir};
use crate::coredns_side::{ask, cluster_coredns};
use crate::dataplane::DataPlane;
use crate::pods::ExecInNode;

/// The suite's test binary (`go test -c`), in the control plane's folder.
const SUITE: &str = "mcs-conformance.test";
/// What the Pods' commands run on this machine (kwok and `containers.rs`
/// run them as local processes): the suite's `sh -c "nslookup ..."`, `nc`
/// and the hello Pods' socat scripts; and what puts them in their
/// namespaces.
const POD_TOOLS: [(&str, &str); 7] = [
    ("sh", "dash"),
    ("nslookup", "bind9-dnsutils"),
    ("nc", "netcat-openbsd"),
    ("socat", "socat"),
    ("awk", "mawk"),
    ("nsenter", "util-linux"),
    ("unshare", "util-linux"),
];

/// The suite's `report.yaml`: specs grouped by `Required` / `Optional`.
#[derive(Debug, Deserialize)]
struct Report {
    groups: Vec<Group>,
    passed: usize,
    total: usize,
    #[serde(default)]
    suitefailure: String,
}

#[derive(Debug, Deserialize)]
struct Group {
    name: String,
    tests: Vec<Spec>,
}

#[derive(Debug, Deserialize)]
struct Spec {
    desc: String,
    #[serde(default)]
    labels: Vec<String>,
    passed: bool,
    skipped: bool,
    #[serde(default)]
    message: String,
}

/// Every Required and Optional spec passes, the Connectivity ones included
/// (KEP-1645: a clusterset IP reaches the exporting clusters' endpoints).
pub async fn the_upstream_conformance_suite_passes(set: &mut Clusterset) -> Result<()> {
    let suite = bin_dir().join(SUITE);
    if !suite.exists() {
        let message = format!(
            "{} is not built: there is no shared/mcs-api-conformance beside this checkout \
             (see tests/control-plane/build.sh)",
            suite.display()
        );
        ensure!(std::env::var_os("CI").is_none(), "{message}");
        return Err(Skipped(message).into());
    }
    for (tool, package) in POD_TOOLS {
        ensure!(
            test_support::installed(tool).is_some(),
            "`{tool}` is missing: the Pods' commands run on this machine (Debian package {package})"
        );
    }
    let data_plane = DataPlane::start(set).await?;
    on_the_data_plane(set, &data_plane, &suite).await
}

/// The suite run with kwok's exec in each member's node, the cluster DNS
/// where the node reaches it, and the hello Pods' containers running.
async fn on_the_data_plane(set: &Clusterset, data_plane: &DataPlane, suite: &Path) -> Result<()> {
    let mut exec_in_nodes = Vec::new();
    let mut clusters = Vec::new();
    for (i, member) in set.members.iter().enumerate() {
        let (host, _) = data_plane.host_addresses(i);
        exec_in_nodes.push(ExecInNode::enter(
            &member.plane.dir,
            data_plane.node_netns(i),
            host.into(),
            member.cluster_dns,
        )?);
        clusters.push(Cluster {
            client: member.admin.clone(),
            logs: member.plane.dir.clone(),
        });
    }
    let _dns = cluster_dns(set, data_plane).await?;
    let kept = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/mcs-conformance");
    std::fs::create_dir_all(&kept)?;
    let kubeconfig = kubeconfig(set)?;
    let contexts: Vec<&str> = set.members.iter().map(|m| m.id.as_str()).collect();
    let log = kept.join("suite.log");
    let out = std::fs::File::create(&log)?;
    let suite_run = tokio::process::Command::new(suite)
        .current_dir(&kept)
        .args([
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--contexts={}", contexts.join(",")),
            "--ginkgo.v".into(),
            "--ginkgo.no-color".into(),
            "--project=clusterset-dns".into(),
            format!("--version={}", env!("CARGO_PKG_VERSION")),
        ])
        .stdin(std::process::Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .kill_on_drop(true)
        .status();
    let status = tokio::select! {
        status = suite_run => status.with_context(|| format!("running {}", suite.display()))?,
        failed = containers::run(data_plane, &clusters) => {
            let Err(failed) = failed;
            return Err(failed.context("the hello Pods' containers"));
        }
    };
    let report: Report = serde_yaml_ng::from_str(
        &std::fs::read_to_string(kept.join("report.yaml"))
            .with_context(|| format!("the suite wrote no report; its log: {}", log.display()))?,
    )
    .context("reading the suite's report.yaml")?;
    let (summary, wrong) = summarize(&report);
    println!("{summary}");
    println!(
        "(report: {0}/report.yaml, log: {0}/suite.log)",
        kept.display()
    );
    ensure!(
        report.suitefailure.is_empty(),
        "the suite did not start: {}",
        report.suitefailure
    );
    ensure!(
        wrong.is_empty(),
        "specs that must pass did not (exit status {status}); their messages:\n{}\nthe suite's log: {}",
        wrong.join("\n"),
        log.display()
    );
    ensure!(
        status.success(),
        "the suite failed ({status}): {}",
        log.display()
    );
    Ok(())
}

/// The suite's summary as text, and the specs that must pass but did not.
fn summarize(report: &Report) -> (String, Vec<String>) {
    let mut text = format!(
        "MCS conformance (upstream suite): {} of {} specs passed",
        report.passed, report.total
    );
    let mut wrong = Vec::new();
    for group in &report.groups {
        let count = |f: fn(&Spec) -> bool| group.tests.iter().filter(|s| f(s)).count();
        let _ = write!(
            text,
            "\n  {}: {} passed, {} failed, {} skipped",
            group.name,
            count(|s| s.passed),
            count(|s| !s.passed && !s.skipped),
            count(|s| s.skipped)
        );
        for spec in &group.tests {
            let (mark, why) = match (spec.passed, spec.skipped) {
                (true, _) => ("passed ", String::new()),
                (false, true) => ("skipped", spec.message.clone()),
                (false, false) => ("FAILED ", spec.message.clone()),
            };
            let _ = write!(
                text,
                "\n    {mark} [{}] {}{why}",
                spec.labels.join(","),
                spec.desc
            );
            if !spec.passed {
                wrong.push(format!("  {} [{}]{why}", spec.desc, group.name));
            }
        }
    }
    if report.groups.iter().all(|g| g.tests.is_empty()) {
        wrong.push("  the report lists no spec".into());
    }
    (text, wrong)
}

/// Each member's cluster DNS on its Pods' `nameserver` address, port 53:
/// the host end of its node's link, which the node reaches (a kube-dns
/// ClusterIP would be the cluster's own shape; an address the node routes to
/// directly needs no Service of the test's own). It forwards
/// `clusterset.local` to the member's replicas; waits until each answers the
/// cluster's own `kubernetes` Service.
async fn cluster_dns(set: &Clusterset, data_plane: &DataPlane) -> Result<Vec<Process>> {
    let mut servers = Vec::new();
    for (i, member) in set.members.iter().enumerate() {
        let at = SocketAddr::from((data_plane.host_addresses(i).0, 53));
        let upstreams: Vec<SocketAddr> = member.replicas.iter().map(|r| r.dns).collect();
        let mut process = cluster_coredns(member, at, &upstreams)?;
        let mut answered = false;
        for _ in 0..300 {
            process.check_alive()?;
            let answer = ask(at, "kubernetes.default.svc.cluster.local.", RecordType::A).await;
            if !answer.records.is_empty() {
                answered = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        if !answered {
            bail!("{}'s CoreDNS on {at} did not answer within 60 s", member.id);
        }
        servers.push(process);
    }
    Ok(servers)
}

/// One kubeconfig with a context per member (named by its id), the admin's
/// credentials: the suite acts as a cluster's user.
fn kubeconfig(set: &Clusterset) -> Result<PathBuf> {
    let mut clusters = String::new();
    let mut users = String::new();
    let mut contexts = String::new();
    for member in &set.members {
        let admin = std::fs::read_to_string(member.plane.admin_kubeconfig())?;
        let token = admin
            .lines()
            .find_map(|l| l.trim().strip_prefix("token: "))
            .context("the admin kubeconfig's token")?;
        let (id, api, ca) = (&member.id, member.plane.api, member.plane.ca.display());
        let _ = write!(
            clusters,
            "- name: {id}\n  cluster:\n    server: https://{api}\n    certificate-authority: {ca}\n"
        );
        let _ = write!(users, "- name: admin-{id}\n  user:\n    token: {token}\n");
        let _ = write!(
            contexts,
            "- name: {id}\n  context:\n    cluster: {id}\n    user: admin-{id}\n"
        );
    }
    let path = set.dir.path().join("conformance.kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n{clusters}users:\n{users}contexts:\n{contexts}current-context: {}\n",
            set.members[0].id
        ),
    )?;
    Ok(path)
}
