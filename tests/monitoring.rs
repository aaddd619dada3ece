//! config/monitoring: the Grafana dashboard and the Prometheus alerting rules
//! parse with the structure Grafana and Prometheus expect, and every metric
//! they use is one a running server exposes (scraped from a Kubernetes-mode
//! member, which has every series: histograms as `_bucket`, `_sum`, `_count`).

mod common;
#[path = "common/kube_clusterset.rs"]
mod kube_clusterset;

use std::collections::BTreeSet;
use std::path::Path;

use common::*;
use hickory_proto::rr::RecordType;
use kube_clusterset::*;
use serde_json::Value;

const DASHBOARD: &str = "config/monitoring/grafana-dashboard.json";
const RULES: &str = "config/monitoring/alerts.rules.yaml";
const PROMETHEUS_RULE: &str = "config/monitoring/prometheus-rule.yaml";

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(CRATE_ROOT).join(path))
        .unwrap_or_else(|e| panic!("cannot read {path}: {e}"))
}

fn yaml(path: &str) -> Value {
    serde_yaml_ng::from_str(&read(path)).unwrap_or_else(|e| panic!("{path} is not YAML: {e}"))
}

/// Every `clusterset_dns_*` name in a PromQL expression.
fn metric_names(expr: &str) -> BTreeSet<String> {
    expr.match_indices("clusterset_dns_")
        .map(|(at, _)| {
            expr[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect()
        })
        .collect()
}

/// Brackets of a PromQL expression pair up (a typo promtool would catch).
fn balanced(expr: &str) -> bool {
    let mut open = Vec::new();
    let mut quoted = false;
    for c in expr.chars() {
        match c {
            '"' => quoted = !quoted,
            '(' | '{' | '[' if !quoted => open.push(c),
            ')' | '}' | ']' if !quoted => {
                let want = match c {
                    ')' => '(',
                    '}' => '{',
                    _ => '[',
                };
                if open.pop() != Some(want) {
                    return false;
                }
            }
            _ => {}
        }
    }
    open.is_empty() && !quoted
}

fn str_at<'a>(v: &'a Value, field: &str, what: &str) -> &'a str {
    v[field]
        .as_str()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| panic!("{what}: `{field}` must be a non-empty string in {v}"))
}

/// The expressions of a rule file's groups, checked for the fields
/// Prometheus requires of an alerting rule.
fn rule_expressions(groups: &Value, file: &str) -> Vec<String> {
    let groups = groups
        .as_array()
        .unwrap_or_else(|| panic!("{file}: groups is a list"));
    assert!(!groups.is_empty(), "{file}: no groups");
    let mut alerts = BTreeSet::new();
    let mut exprs = Vec::new();
    for group in groups {
        str_at(group, "name", file);
        for rule in group["rules"].as_array().expect("rules is a list") {
            let alert = str_at(rule, "alert", file);
            assert!(
                alerts.insert(alert.to_owned()),
                "{file}: alert {alert} twice"
            );
            let duration = str_at(rule, "for", alert);
            assert!(
                duration.len() > 1
                    && duration[..duration.len() - 1]
                        .chars()
                        .all(|c| c.is_ascii_digit())
                    && duration.ends_with(['s', 'm', 'h', 'd']),
                "{file}: {alert}: `for: {duration}` is not a duration"
            );
            let severity = str_at(&rule["labels"], "severity", alert);
            assert!(
                ["critical", "warning", "info"].contains(&severity),
                "{alert}: {severity}"
            );
            str_at(&rule["annotations"], "summary", alert);
            let expr = str_at(rule, "expr", alert);
            assert!(
                balanced(expr),
                "{file}: {alert}: unbalanced brackets in {expr}"
            );
            exprs.push(expr.to_owned());
        }
    }
    exprs
}

/// The expressions of the dashboard, checked for what Grafana needs to lay it out.
fn dashboard_expressions(dashboard: &Value) -> Vec<String> {
    str_at(dashboard, "uid", DASHBOARD);
    str_at(dashboard, "title", DASHBOARD);
    let variables: BTreeSet<&str> = dashboard["templating"]["list"]
        .as_array()
        .expect("templating.list")
        .iter()
        .map(|v| str_at(v, "name", "variable"))
        .collect();
    let mut ids = BTreeSet::new();
    let mut exprs = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        let title = str_at(panel, "title", "panel");
        assert!(
            ids.insert(panel["id"].as_u64().expect("numeric id")),
            "{title}: id taken"
        );
        for field in ["x", "y", "w", "h"] {
            assert!(panel["gridPos"][field].is_u64(), "{title}: gridPos.{field}");
        }
        let source = str_at(&panel["datasource"], "uid", title);
        assert!(
            variables.contains(source.trim_start_matches("${").trim_end_matches('}')),
            "{title}: data source {source} is not a dashboard variable"
        );
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{title}: no query");
        for target in targets {
            let expr = str_at(target, "expr", title);
            assert!(balanced(expr), "{title}: unbalanced brackets in {expr}");
            for variable in expr.match_indices('$').map(|(at, _)| &expr[at + 1..]) {
                let name: String = variable
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                assert!(
                    variables.contains(name.as_str()) || name == "__rate_interval",
                    "{title}: unknown variable ${name}"
                );
            }
            exprs.push(expr.to_owned());
        }
    }
    exprs
}

#[test]
fn rules_parse_and_the_prometheus_rule_carries_the_same_groups() {
    let rules = yaml(RULES);
    rule_expressions(&rules["groups"], RULES);
    let manifest = yaml(PROMETHEUS_RULE);
    assert_eq!(manifest["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(manifest["kind"], "PrometheusRule");
    str_at(&manifest["metadata"], "name", PROMETHEUS_RULE);
    assert_eq!(
        manifest["spec"]["groups"], rules["groups"],
        "{PROMETHEUS_RULE} and {RULES} must not drift apart"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_used_is_exposed_by_a_running_server() {
    let dashboard: Value = serde_json::from_str(&read(DASHBOARD)).expect("the dashboard is JSON");
    let mut used = BTreeSet::new();
    for expr in dashboard_expressions(&dashboard)
        .iter()
        .chain(&rule_expressions(&yaml(RULES)["groups"], RULES))
    {
        used.extend(metric_names(expr));
    }
    for topic in [
        "clusterset_dns_dns_responses_total",
        "clusterset_dns_dns_request_duration_seconds_bucket",
        "clusterset_dns_source_sync_age_seconds",
        "clusterset_dns_leader",
        "clusterset_dns_conflicts",
        "clusterset_dns_vips_free",
        "clusterset_dns_api_writes_total",
    ] {
        assert!(used.contains(topic), "nothing watches {topic}");
    }

    let set = KubeClusterset::start(&[("east", "IPv4")]).await;
    set.member("east").api.create_namespace("shop");
    set.apply("east", cluster_ip("shop", "web", &["10.1.0.10"]).exported());
    eventually_within(CONVERGE, "the import written", true, || async {
        set.import("east", "shop", "web").is_some()
    })
    .await;
    set.resolve("east", "web.shop.svc.clusterset.local.", RecordType::A)
        .await;
    let server = &set.member("east").servers[0];
    let body = get(server.running().metrics_addr, "/metrics").await.1;
    let exposed: BTreeSet<&str> = body
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .collect();
    let unknown: Vec<&String> = used
        .iter()
        .filter(|m| !exposed.contains(m.as_str()))
        .collect();
    assert!(
        unknown.is_empty(),
        "not exposed by the server: {unknown:?}\n{body}"
    );

    let build = format!(
        "clusterset_dns_build_info{{revision=\"{}\",version=\"{}\"}} 1",
        env!("CLUSTERSET_DNS_REVISION"),
        env!("CARGO_PKG_VERSION")
    );
    assert!(body.lines().any(|l| l == build), "{build} in\n{body}");
    if let Ok(git) = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(CRATE_ROOT)
        .output()
        && git.status.success()
    {
        let head = String::from_utf8_lossy(&git.stdout).trim().to_owned();
        assert_eq!(
            env!("CLUSTERSET_DNS_REVISION"),
            head,
            "the revision built is HEAD's"
        );
    }
}
