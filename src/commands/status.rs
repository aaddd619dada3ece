//! `status`: the reconciled clusterset without DNS, as `kubectl get` would show it.

use std::fmt::Write as _;

use serde::Serialize;

use crate::cli::{Format, StatusArgs};
use crate::commands::snapshot::{self, BrokerView, Snapshot};
use crate::engine::Engine;
use crate::explain::text::{list, usual_reason};
use crate::model::ServiceKey;
use crate::model::conditions::{CONFLICT, Condition, READY, VALID};
use crate::model::import::{ExportStatus, Import};
use crate::runtime::assembly::assemble;

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Report<'a> {
    service_imports: Vec<ImportRow<'a>>,
    service_exports: Vec<ExportRow<'a>>,
    problems: Vec<String>,
    /// Kubernetes mode: the broker's records.
    #[serde(skip_serializing_if = "Option::is_none")]
    broker: Option<&'a BrokerView>,
}

#[derive(Serialize)]
struct ImportRow<'a> {
    namespace: &'a str,
    name: &'a str,
    #[serde(flatten)]
    import: &'a Import,
}

#[derive(Serialize)]
struct ExportRow<'a> {
    namespace: &'a str,
    name: &'a str,
    #[serde(flatten)]
    status: &'a ExportStatus,
}

/// Reads the source once (read only: the VIP state file is read, never
/// written) and renders the imports and export conditions, and the
/// problems of the objects that could not be read; in Kubernetes mode also
/// the broker's records.
pub async fn render(args: &StatusArgs) -> anyhow::Result<String> {
    let Snapshot {
        pipeline,
        problems,
        broker,
    } = snapshot::take(assemble(&args.serve_args()).await?).await?;
    report(pipeline.engine(), problems, broker.as_ref(), args.output)
}

fn report(
    engine: &Engine,
    problems: Vec<String>,
    broker: Option<&BrokerView>,
    format: Format,
) -> anyhow::Result<String> {
    let aggregates = engine.aggregates();
    let report = Report {
        service_imports: aggregates
            .iter()
            .filter_map(|(key, a)| {
                let (namespace, name) = names(key);
                a.import.as_deref().map(|import| ImportRow {
                    namespace,
                    name,
                    import,
                })
            })
            .collect(),
        service_exports: aggregates
            .iter()
            .flat_map(|(key, a)| {
                let (namespace, name) = names(key);
                a.exports.iter().map(move |status| ExportRow {
                    namespace,
                    name,
                    status,
                })
            })
            .collect(),
        problems,
        broker,
    };
    Ok(match format {
        Format::Json => serde_json::to_string_pretty(&report)? + "\n",
        Format::Text => text(&report),
    })
}

fn names(key: &ServiceKey) -> (&str, &str) {
    (key.namespace(), key.name())
}

fn text(report: &Report<'_>) -> String {
    let mut imports = vec![row([
        "NAMESPACE",
        "NAME",
        "TYPE",
        "IP-FAMILIES",
        "IPS",
        "PORTS",
        "CLUSTERS",
        "ENDPOINTS",
        "READY",
    ])];
    for r in &report.service_imports {
        let i = r.import;
        imports.push(vec![
            r.namespace.to_owned(),
            r.name.to_owned(),
            i.type_.as_str().to_owned(),
            list(i.ip_families.iter()),
            list(i.vips.iter()),
            list(i.ports.iter()),
            // A cluster backing only some of the ports lists those it backs.
            list(i.clusters.iter().map(|c| {
                if c.ports.len() == i.ports.len() {
                    c.cluster.to_string()
                } else {
                    let backed: Vec<String> = c.ports.iter().map(ToString::to_string).collect();
                    format!("{}({})", c.cluster, backed.join(" "))
                }
            })),
            i.clusters
                .iter()
                .map(|c| c.endpoints.len())
                .sum::<usize>()
                .to_string(),
            short(&i.ready),
        ]);
    }
    let mut exports = vec![row([
        "NAMESPACE",
        "NAME",
        "CLUSTER",
        "VALID",
        "READY",
        "CONFLICT",
        "MESSAGE",
    ])];
    for r in &report.service_exports {
        let get = |t| r.status.condition(t);
        let mut messages: Vec<&str> = [get(VALID), get(READY), get(CONFLICT)]
            .into_iter()
            .flatten()
            .filter(|c| !c.message.is_empty() && (c.type_ == CONFLICT) == c.status)
            .map(|c| c.message.as_ref())
            .collect();
        messages.dedup();
        let message = messages.join("; ");
        exports.push(vec![
            r.namespace.to_owned(),
            r.name.to_owned(),
            r.status.cluster.to_string(),
            get(VALID).map(short).unwrap_or_default(),
            get(READY).map(short).unwrap_or_default(),
            get(CONFLICT).map(short).unwrap_or_else(|| "-".into()),
            message,
        ]);
    }
    let mut out = String::new();
    out += &table(&imports);
    out += "\n";
    out += &table(&exports);
    if let Some(broker) = report.broker {
        out += "\n";
        out += &broker_tables(broker);
    }
    if !report.problems.is_empty() {
        out += "\nPROBLEMS\n";
        for p in &report.problems {
            let _ = writeln!(out, "{p}");
        }
    }
    out
}

/// The broker's export records, VIP records and VIP claims.
fn broker_tables(broker: &BrokerView) -> String {
    let mut records = vec![row(["BROKER", "NAMESPACE", "NAME", "CLUSTER / VIPS"])];
    for r in &broker.export_records {
        records.push(vec![
            "export".into(),
            r.namespace.clone(),
            r.name.clone(),
            r.cluster.clone(),
        ]);
    }
    for r in &broker.vip_records {
        records.push(vec![
            "vips".into(),
            r.namespace.clone(),
            r.name.clone(),
            list(r.vips.iter()),
        ]);
    }
    let mut claims = vec![row(["VIP-CLAIM", "SERVICE"])];
    for c in &broker.vip_claims {
        claims.push(vec![c.address.clone(), c.service.clone()]);
    }
    table(&records) + "\n" + &table(&claims)
}

fn row<const N: usize>(cells: [&str; N]) -> Vec<String> {
    cells.iter().map(|c| (*c).to_owned()).collect()
}

/// `True`, or `False (Reason)` / `True (Reason)` when the reason says more.
fn short(c: &Condition) -> String {
    if usual_reason(c) {
        c.status_str().to_owned()
    } else {
        format!("{} ({})", c.status_str(), c.reason)
    }
}

fn table(rows: &[Vec<String>]) -> String {
    let columns = rows[0].len();
    let widths: Vec<usize> = (0..columns)
        .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:w$}"))
            .collect();
        let _ = writeln!(out, "{}", line.join("   ").trim_end());
    }
    out
}
