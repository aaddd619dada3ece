//! The upstream MCS API conformance suite (`sigs.k8s.io/mcs-api`,
//! `conformance/`), unmodified, against the three members: it deploys
//! Services, Deployments and StatefulSets, exports them, reads the
//! ServiceImports, ServiceExport conditions and MCS EndpointSlices
//! clusterset-dns writes, and runs `nslookup` in a request Pod of every
//! cluster through `kubectl exec`, which asks the cluster's CoreDNS (the
//! shipped stanza forwarding `clusterset.local` to the member's replicas).
//!
//! The Connectivity specs are left out by label: they send traffic to the
//! clusterset IPs, which needs a data plane (kube-proxy or a CNI programmed
//! for them); a DNS server provides none. Every other spec must pass.
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
use crate::control_plane::{Process, bin_dir};
use crate::coredns_side::{ask, cluster_coredns};

/// The suite's test binary (`go test -c`), in the control plane's folder.
const SUITE: &str = "mcs-conformance.test";
/// Specs needing a data plane, left out.
const LEFT_OUT: &str = "Connectivity";
/// What the Pods' commands run on this machine (kwok runs them as local
/// processes): the suite's `sh -c "nslookup ..."` and `nc`.
const POD_TOOLS: [(&str, &str); 3] = [
    ("sh", "dash"),
    ("nslookup", "bind9-dnsutils"),
    ("nc", "netcat-openbsd"),
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

/// Every Required and Optional spec but the Connectivity ones passes.
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
    let _dns = cluster_dns(set).await?;
    let kept = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/mcs-conformance");
    std::fs::create_dir_all(&kept)?;
    let kubeconfig = kubeconfig(set)?;
    let contexts: Vec<&str> = set.members.iter().map(|m| m.id.as_str()).collect();
    let log = kept.join("suite.log");
    let out = std::fs::File::create(&log)?;
    let status = tokio::process::Command::new(&suite)
        .current_dir(&kept)
        .args([
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--contexts={}", contexts.join(",")),
            format!("--ginkgo.label-filter=!{LEFT_OUT}"),
            "--ginkgo.v".into(),
            "--ginkgo.no-color".into(),
            "--project=clusterset-dns".into(),
            format!("--version={}", env!("CARGO_PKG_VERSION")),
        ])
        .stdin(std::process::Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .kill_on_drop(true)
        .status()
        .await
        .with_context(|| format!("running {}", suite.display()))?;
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
                (false, true) if spec.labels.iter().any(|l| l == LEFT_OUT) => (
                    "skipped",
                    " (needs a data plane for clusterset IPs)".to_owned(),
                ),
                (false, true) => ("skipped", spec.message.clone()),
                (false, false) => ("FAILED ", spec.message.clone()),
            };
            let _ = write!(
                text,
                "\n    {mark} [{}] {}{why}",
                spec.labels.join(","),
                spec.desc
            );
            let excused = spec.skipped && spec.labels.iter().any(|l| l == LEFT_OUT);
            if !spec.passed && !excused {
                wrong.push(format!("  {} [{}]{why}", spec.desc, group.name));
            }
        }
    }
    if report.groups.iter().all(|g| g.tests.is_empty()) {
        wrong.push("  the report lists no spec".into());
    }
    (text, wrong)
}

/// Each member's cluster DNS on its Pods' `nameserver` address, port 53,
/// forwarding `clusterset.local` to the member's replicas; waits until each
/// answers the cluster's own `kubernetes` Service.
async fn cluster_dns(set: &Clusterset) -> Result<Vec<Process>> {
    let mut servers = Vec::new();
    for member in &set.members {
        let at = SocketAddr::from((member.cluster_dns, 53));
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
