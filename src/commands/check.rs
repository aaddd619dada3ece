//! `check`: validates a configuration the way `serve` would load it (flags,
//! config file, manifest directory, VIP state and SOA serial files, or the API servers in
//! Kubernetes mode, the TLS certificate and the TSIG key), without serving or writing.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::ListParams;

use crate::cli::ServeArgs;
use crate::commands::snapshot;
use crate::dns;
use crate::index::serial::SerialFile;
use crate::k8s::crd::{ServiceExport, ServiceImport};
use crate::runtime::assembly::{self, Assembly, Source};
use crate::sources::kubernetes::served;

/// Everything `check` finds for `args`.
pub async fn report(args: &ServeArgs) -> CheckReport {
    let mut report = match assembly::assemble(args).await {
        Err(e) => CheckReport {
            summary: String::new(),
            problems: vec![format!("{e:#}")],
        },
        Ok(Assembly {
            source: Source::Kubernetes(source),
            ..
        }) => kubernetes(source).await,
        Ok(assembly) => manifests(args, assembly).await,
    };
    if let Err(error) = dns::check_tls(&assembly::tls_settings(&args.tls)) {
        report.problems.push(format!("{error:#}"));
    }
    if let Some(Err(error)) = args.tsig_key.as_deref().map(dns::TsigKey::load) {
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
async fn manifests(args: &ServeArgs, assembly: Assembly) -> CheckReport {
    let clusterset = &args.clusterset;
    let dir = &clusterset.manifests;
    let snapshot = match snapshot::take(assembly).await {
        Ok(snapshot) => snapshot,
        Err(e) => {
            return CheckReport {
                summary: String::new(),
                problems: vec![format!("{e:#}")],
            };
        }
    };
    let engine = snapshot.engine();
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
    let mut problems = snapshot.problems;
    if let Err(e) = SerialFile::open(&assembly::serial_file(clusterset)) {
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
        listed(&assembly::reverse_zones(args)),
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

/// What `check --source kubernetes` finds once both API servers are
/// reached and this cluster's id is known: the MCS kinds served locally and
/// on the broker, and the broker namespace there. Reads only.
async fn kubernetes(source: assembly::Kubernetes) -> CheckReport {
    let mut report = CheckReport {
        summary: String::new(),
        problems: Vec::new(),
    };
    let (connection, broker_namespace) = (source.connection, &source.broker_namespace);
    let (exports_at, records_at) = (
        &connection.mcs.local_exports,
        &connection.mcs.broker_imports,
    );
    let exports: Api<ServiceExport> = exports_at.api(exports_at.get(), None);
    match exports.list(&ListParams::default().limit(1)).await {
        Ok(_) => report.summary.push_str(&format!(
            "local cluster {}: ServiceExports readable ({})\n",
            connection.cluster,
            exports_at.get().name()
        )),
        Err(e) => report.problems.push(format!(
            "local cluster: cannot list ServiceExports: {}",
            served::why(&exports_at.resource_name(), &e)
        )),
    }
    let namespaces: Api<Namespace> = Api::all(connection.broker.clone());
    match namespaces.get_opt(broker_namespace).await {
        Ok(Some(_)) => {}
        Ok(None) => report.problems.push(format!(
            "broker: namespace {broker_namespace} does not exist (see --broker-namespace)"
        )),
        // Reading namespaces is not needed to serve: the broker RBAC may forbid it.
        Err(_) => {}
    }
    let records: Api<ServiceImport> = records_at.api(records_at.get(), Some(broker_namespace));
    match records.list(&ListParams::default()).await {
        Ok(list) => report.summary.push_str(&format!(
            "broker namespace {broker_namespace}: {} ServiceImports (export and VIP records, {})\n",
            list.items.len(),
            records_at.get().name()
        )),
        Err(e) => report.problems.push(format!(
            "broker: cannot list ServiceImports in {broker_namespace}: {}",
            served::why(&records_at.resource_name(), &e)
        )),
    }
    report
}
