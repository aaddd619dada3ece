//! `check`: validates a configuration the way `serve` would load it (flags,
//! config file, manifest directory, VIP state and SOA serial files, or the API servers in
//! Kubernetes mode, and the TLS certificate), without serving or writing.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::ListParams;

use crate::cli::{KubernetesArgs, ServeArgs, SourceKind};
use crate::dns;
use crate::index::serial::SerialFile;
use crate::k8s::crd::v1alpha1::{ServiceExport, ServiceImport};
use crate::runtime::pipeline::load_manifests;
use crate::sources::kubernetes::client::connect;

/// Everything `check` finds for `args`.
pub async fn report(args: &ServeArgs) -> CheckReport {
    let mut report = match args.kubernetes.source {
        SourceKind::Manifests => manifests(args),
        SourceKind::Kubernetes => kubernetes(&args.kubernetes).await,
    };
    if let Err(error) = dns::check_tls(&args.tls) {
        report.problems.push(format!("{error:#}"));
    }
    report
}

/// What `check` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckReport {
    /// One line per finding; empty problems means fine.
    pub summary: String,
    /// What would keep `serve` from working as configured.
    pub problems: Vec<String>,
}

/// Loads the clusterset `args` describe the way `serve` would (manifest
/// directory, VIP state file), without serving or writing anything.
fn manifests(args: &ServeArgs) -> CheckReport {
    let clusterset = &args.clusterset;
    let dir = &clusterset.manifests;
    let fail = |problem: String| CheckReport {
        summary: String::new(),
        problems: vec![problem],
    };
    let (pipeline, source) = match load_manifests(clusterset) {
        Ok(loaded) => loaded,
        Err(e) => return fail(format!("{e:#}")),
    };
    let engine = pipeline.engine();
    let stats = engine.stats();
    let aggregates = engine.aggregates();
    let clusters: BTreeSet<String> = aggregates
        .iter()
        .flat_map(|(_, a)| a.exports.iter().map(|e| e.cluster.to_string()))
        .collect();
    let config = args
        .config
        .as_ref()
        .map(|c| format!("{}: ok\n", c.display()))
        .unwrap_or_default();
    let summary = format!(
        "{config}{}: {} exports from {} clusters, {} ServiceImports ({} ClusterSetIP, {} Headless), {} ready endpoints\n",
        dir.display(),
        aggregates
            .iter()
            .map(|(_, a)| a.exports.len())
            .sum::<usize>(),
        clusters.len(),
        stats.cluster_set_ip + stats.headless,
        stats.cluster_set_ip,
        stats.headless,
        stats.endpoints,
    );
    let mut problems: Vec<String> = source.problems().iter().map(ToString::to_string).collect();
    if let Err(e) = SerialFile::open(&clusterset.serial_file()) {
        problems.push(format!("{e:#}"));
    }
    CheckReport {
        summary: summary + &transfer_summary(args),
        problems,
    }
}

/// What `check` says of zone transfers, NOTIFY and reverse zones.
fn transfer_summary(args: &ServeArgs) -> String {
    format!(
        "zone transfers allowed from {}; NOTIFY to {}; reverse zones {}\n",
        listed(&args.transfer_allow),
        listed(&args.notify),
        listed(&args.reverse_zones()),
    )
}

/// `a, b, c`, or `none`.
fn listed<T: ToString>(items: &[T]) -> String {
    if items.is_empty() {
        return "none".to_owned();
    }
    let items: Vec<String> = items.iter().map(ToString::to_string).collect();
    items.join(", ")
}

/// What `check --source kubernetes` finds: both API servers reachable, this
/// cluster's id known, the MCS kinds served locally and on the broker, and
/// the broker namespace there. Reads only.
async fn kubernetes(args: &KubernetesArgs) -> CheckReport {
    let mut report = CheckReport {
        summary: String::new(),
        problems: Vec::new(),
    };
    let connection = match connect(args).await {
        Ok(connection) => connection,
        Err(e) => {
            report.problems.push(format!("{e:#}"));
            return report;
        }
    };
    let exports: Api<ServiceExport> = Api::all(connection.local.clone());
    match exports.list(&ListParams::default().limit(1)).await {
        Ok(_) => report.summary.push_str(&format!(
            "local cluster {}: ServiceExports readable\n",
            connection.cluster
        )),
        Err(e) => report
            .problems
            .push(format!("local cluster: cannot list ServiceExports: {e}")),
    }
    let namespaces: Api<Namespace> = Api::all(connection.broker.clone());
    match namespaces.get_opt(&args.broker_namespace).await {
        Ok(Some(_)) => {}
        Ok(None) => report.problems.push(format!(
            "broker: namespace {} does not exist (see --broker-namespace)",
            args.broker_namespace
        )),
        // Reading namespaces is not needed to serve: the broker RBAC may forbid it.
        Err(_) => {}
    }
    let records: Api<ServiceImport> =
        Api::namespaced(connection.broker.clone(), &args.broker_namespace);
    match records.list(&ListParams::default()).await {
        Ok(list) => report.summary.push_str(&format!(
            "broker namespace {}: {} ServiceImports (export and VIP records)\n",
            args.broker_namespace,
            list.items.len()
        )),
        Err(e) => report.problems.push(format!(
            "broker: cannot list ServiceImports in {}: {e}",
            args.broker_namespace
        )),
    }
    report
}
