//! The PromQL queries of config/monitoring/grafana-dashboard.json as a
//! Prometheus server can run them: Grafana's template variables replaced by
//! concrete values (`$job` by its "All" value, the interval variables by a
//! minute). Shared by tests/it/monitoring.rs and the real-control-plane
//! scenario that runs them against a real Prometheus.

use serde_json::Value;

/// The dashboard's file, from the crate root.
pub const DASHBOARD: &str = "config/monitoring/grafana-dashboard.json";

/// One query of a panel.
pub struct Query {
    /// `panel title / refId`, to name it in failures.
    pub name: String,
    /// The expression as the dashboard has it.
    pub expr: String,
}

/// Every query of every panel (panics naming the panel when one is malformed).
pub fn queries(dashboard: &Value) -> Vec<Query> {
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels is a list") {
        let title = panel["title"].as_str().unwrap_or("(untitled panel)");
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"]
                .as_str()
                .unwrap_or_else(|| panic!("{DASHBOARD}: {title}: a target without expr"));
            let id = target["refId"].as_str().unwrap_or("?");
            out.push(Query {
                name: format!("{title} / {id}"),
                expr: expr.to_owned(),
            });
        }
    }
    out
}

/// `expr` with Grafana's variables replaced: `$job` by `.*` (the
/// dashboard's "All"), `$__rate_interval`, `$__interval` and `$__range` by
/// `1m`.
pub fn concrete(expr: &str) -> String {
    // Longest names first: `$__rate_interval` before `$__interval`.
    [
        ("${job}", ".*"),
        ("$job", ".*"),
        ("$__rate_interval", "1m"),
        ("$__interval", "1m"),
        ("$__range", "1m"),
    ]
    .iter()
    .fold(expr.to_owned(), |e, (from, to)| e.replace(from, to))
}
