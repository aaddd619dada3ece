//! config/monitoring: the Prometheus alerting rules and the Grafana
//! dashboard.
//!
//! - `promtool check rules` parses both rule files (the PrometheusRule's
//!   `spec` as the plain file Prometheus reads) and every dashboard query
//!   (as recording rules), and `promtool test rules` runs
//!   tests/monitoring/alerts.test.yaml on both: for every alert a case where
//!   it fires, with its labels and annotations, and one where it stays
//!   silent (checked here to exist). Without promtool (Debian's
//!   `prometheus` package; tests/monitoring/setup.sh) these skip, and fail
//!   under CI.
//! - What promtool does not know: the fields Grafana and Alertmanager
//!   routing rely on, the two rule files carrying the same groups, and every
//!   metric used being one a running server exposes (scraped from
//!   Kubernetes-mode members, which have every series: histograms as
//!   `_bucket`, `_sum`, `_count`).
//!
//! The real-control-plane scenario `prometheus::` runs these rules and
//! queries in a real Prometheus scraping a real clusterset.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use hickory_proto::rr::RecordType;
use serde_json::{Value, json};
use test_support::dashboard::{self, DASHBOARD};
use test_support::kube_clusterset::*;

use crate::common::*;

const RULES: &str = "config/monitoring/alerts.rules.yaml";
const PROMETHEUS_RULE: &str = "config/monitoring/prometheus-rule.yaml";
const UNIT_TESTS: &str = "tests/monitoring/alerts.test.yaml";

/// Metrics the rules use that a healthy server has no series of: a counter
/// with labels shows a series only once it first counts, and these count
/// faults. Each names the test that makes the fault and reads the series.
const FAULT_ONLY: [(&str, &str); 3] = [
    (
        "clusterset_dns_tls_certificate_reloads_total",
        "tests/it/tls.rs",
    ),
    (
        "clusterset_dns_dns_tcp_refused_total",
        "tests/it/tcp_limits.rs",
    ),
    (
        "clusterset_dns_accept_errors_total",
        "tests/it/ops_limits.rs",
    ),
];

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

fn str_at<'a>(v: &'a Value, field: &str, what: &str) -> &'a str {
    v[field]
        .as_str()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| panic!("{what}: `{field}` must be a non-empty string in {v}"))
}

/// A Prometheus duration (`90s`, `5m`, `1h`) in seconds.
fn seconds(duration: &str, what: &str) -> u64 {
    let (number, unit) = duration.split_at(duration.len().saturating_sub(1));
    let n: u64 = number
        .parse()
        .unwrap_or_else(|_| panic!("{what}: `{duration}` is not a duration"));
    n * match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => panic!("{what}: `{duration}` is not a duration"),
    }
}

/// One alerting rule, with what routing needs checked: a `for`, a
/// `severity` Alertmanager routes on, a summary and a description.
struct Alert {
    name: String,
    expr: String,
    for_seconds: u64,
}

fn alerts(groups: &Value, file: &str) -> Vec<Alert> {
    let groups = groups
        .as_array()
        .unwrap_or_else(|| panic!("{file}: groups is a list"));
    assert!(!groups.is_empty(), "{file}: no groups");
    let mut names = BTreeSet::new();
    let mut out = Vec::new();
    for group in groups {
        str_at(group, "name", file);
        for rule in group["rules"].as_array().expect("rules is a list") {
            let name = str_at(rule, "alert", file);
            assert!(names.insert(name.to_owned()), "{file}: alert {name} twice");
            let severity = str_at(&rule["labels"], "severity", name);
            assert!(
                ["critical", "warning", "info"].contains(&severity),
                "{file}: {name}: severity {severity}"
            );
            str_at(&rule["annotations"], "summary", name);
            str_at(&rule["annotations"], "description", name);
            out.push(Alert {
                name: name.to_owned(),
                expr: str_at(rule, "expr", name).to_owned(),
                for_seconds: seconds(str_at(rule, "for", name), name),
            });
        }
    }
    out
}

/// The dashboard's queries, checked for what Grafana needs to lay it out.
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
        assert!(
            !panel["targets"].as_array().expect("targets").is_empty(),
            "{title}: no query"
        );
    }
    let queries = dashboard::queries(dashboard);
    for query in &queries {
        for variable in query
            .expr
            .match_indices('$')
            .map(|(at, _)| &query.expr[at + 1..])
        {
            let name: String = variable
                .trim_start_matches('{')
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            assert!(
                variables.contains(name.as_str()) || name.starts_with("__"),
                "{}: unknown variable ${name}",
                query.name
            );
        }
        let concrete = dashboard::concrete(&query.expr);
        assert!(
            !concrete.contains('$'),
            "{}: a variable left in {concrete}",
            query.name
        );
    }
    queries.into_iter().map(|q| q.expr).collect()
}

#[test]
fn rules_parse_and_the_prometheus_rule_carries_the_same_groups() {
    let rules = yaml(RULES);
    alerts(&rules["groups"], RULES);
    let manifest = yaml(PROMETHEUS_RULE);
    assert_eq!(manifest["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(manifest["kind"], "PrometheusRule");
    str_at(&manifest["metadata"], "name", PROMETHEUS_RULE);
    assert_eq!(
        manifest["spec"]["groups"], rules["groups"],
        "{PROMETHEUS_RULE} and {RULES} must not drift apart"
    );
}

/// promtool, or None after saying why it is missing (failing under CI).
fn promtool() -> Option<PathBuf> {
    let found = installed("promtool");
    if found.is_none() {
        skip("promtool is not installed (run `bash tests/monitoring/setup.sh`)");
    }
    found
}

/// Runs promtool; panics with its output unless it succeeds. Its stdout.
fn run_promtool(promtool: &Path, args: &[&str], cwd: &Path) -> String {
    let out = Command::new(promtool)
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("promtool runs");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "promtool {args:?} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    stdout.into_owned()
}

fn write_yaml(path: &Path, value: &Value) {
    std::fs::write(path, serde_yaml_ng::to_string(value).expect("YAML")).expect("written");
}

#[test]
fn promtool_checks_the_rules_and_the_dashboard_queries() {
    let Some(promtool) = promtool() else { return };
    let dir = tempfile::tempdir().unwrap();
    let rules = yaml(RULES);
    let count = alerts(&rules["groups"], RULES).len();

    // The PrometheusRule's spec is what the Operator hands Prometheus.
    let spec = dir.path().join("prometheus-rule.spec.yaml");
    write_yaml(
        &spec,
        &json!({ "groups": yaml(PROMETHEUS_RULE)["spec"]["groups"] }),
    );
    // Each dashboard query as a recording rule: promtool parses it.
    let dashboard: Value = serde_json::from_str(&read(DASHBOARD)).expect("the dashboard is JSON");
    let queries = dashboard::queries(&dashboard);
    let recorded: Vec<Value> = queries
        .iter()
        .enumerate()
        .map(|(i, q)| json!({ "record": format!("dashboard:query_{i}"), "expr": dashboard::concrete(&q.expr) }))
        .collect();
    let panels = dir.path().join("dashboard.rules.yaml");
    write_yaml(
        &panels,
        &json!({ "groups": [{ "name": "dashboard", "rules": recorded }] }),
    );

    let rules_path = Path::new(CRATE_ROOT).join(RULES);
    for (file, expected) in [
        (rules_path.as_path(), count),
        (spec.as_path(), count),
        (panels.as_path(), queries.len()),
    ] {
        let file = file.display().to_string();
        let out = run_promtool(&promtool, &["check", "rules", &file], dir.path());
        assert!(
            out.contains(&format!("SUCCESS: {expected} rules found")),
            "promtool check rules {file}: expected {expected} rules:\n{out}"
        );
    }
}

#[test]
fn promtool_unit_tests_fire_and_silence_every_alert() {
    let Some(promtool) = promtool() else { return };
    let tests = yaml(UNIT_TESTS);
    let alerts = alerts(&yaml(RULES)["groups"], RULES);

    // Every alert has a case that fires and one that stays silent after
    // its `for`, on series of the metrics it reads.
    for alert in &alerts {
        let (mut fires, mut silent) = (false, false);
        for group in tests["tests"].as_array().expect("tests is a list") {
            let fed = group["input_series"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| s["series"].as_str())
                .any(|s| {
                    metric_names(s)
                        .iter()
                        .any(|m| alert.expr.contains(m.as_str()))
                });
            let cases: Vec<&Value> = group["alert_rule_test"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|case| case["alertname"] == alert.name.as_str())
                .collect();
            let firing =
                |case: &&Value| case["exp_alerts"].as_array().is_some_and(|a| !a.is_empty());
            // Silent: a group of its own where it never fires (not a
            // moment of a firing group where its `for` has not yet run).
            let group_fires = cases.iter().any(firing);
            fires |= group_fires;
            silent |= fed
                && !group_fires
                && cases.iter().any(|case| {
                    seconds(str_at(case, "eval_time", &alert.name), &alert.name)
                        >= alert.for_seconds
                });
        }
        assert!(fires, "{UNIT_TESTS}: no case where {} fires", alert.name);
        assert!(
            silent,
            "{UNIT_TESTS}: no test group where {} stays silent on its metrics after its `for`",
            alert.name
        );
    }

    let unit_tests = Path::new(CRATE_ROOT).join(UNIT_TESTS);
    let cwd = unit_tests.parent().unwrap();
    let out = run_promtool(
        &promtool,
        &["test", "rules", &unit_tests.display().to_string()],
        cwd,
    );
    assert!(out.contains("SUCCESS"), "{out}");

    // The same cases on the PrometheusRule's spec.
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("prometheus-rule.spec.yaml");
    write_yaml(
        &spec,
        &json!({ "groups": yaml(PROMETHEUS_RULE)["spec"]["groups"] }),
    );
    let mut on_spec = tests.clone();
    on_spec["rule_files"] = json!([spec.display().to_string()]);
    let on_spec_path = dir.path().join("prometheus-rule.test.yaml");
    write_yaml(&on_spec_path, &on_spec);
    let out = run_promtool(
        &promtool,
        &["test", "rules", &on_spec_path.display().to_string()],
        dir.path(),
    );
    assert!(out.contains("SUCCESS"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_used_is_exposed_by_a_running_server() {
    let dashboard: Value = serde_json::from_str(&read(DASHBOARD)).expect("the dashboard is JSON");
    let mut used = BTreeSet::new();
    for expr in dashboard_expressions(&dashboard).into_iter().chain(
        alerts(&yaml(RULES)["groups"], RULES)
            .into_iter()
            .map(|a| a.expr),
    ) {
        used.extend(metric_names(&expr));
    }
    for topic in [
        "clusterset_dns_dns_responses_total",
        "clusterset_dns_dns_request_duration_seconds_bucket",
        "clusterset_dns_source_sync_age_seconds",
        "clusterset_dns_leader",
        "clusterset_dns_conflicts",
        "clusterset_dns_vips_free",
        "clusterset_dns_api_writes_total",
        "clusterset_dns_cluster_live",
    ] {
        assert!(used.contains(topic), "nothing watches {topic}");
    }

    // Two members: each judges the other's heartbeat (cluster_live).
    let set = KubeClusterset::start(&[("east", "IPv4"), ("west", "IPv4")]).await;
    set.member("east").api.create_namespace("shop");
    set.apply("east", cluster_ip("shop", "web", &["10.1.0.10"]).exported());
    eventually_within(CONVERGE, "the import written", true, || async {
        set.import("east", "shop", "web").is_some()
    })
    .await;
    set.resolve("east", "web.shop.svc.clusterset.local.", RecordType::A)
        .await;
    let server = &set.member("east").servers[0];
    let ops = server.running().metrics_addr;
    eventually_within(CONVERGE, "east judges west's heartbeat", 1.0, || {
        scrape(ops, "clusterset_dns_cluster_live{cluster=\"west\"}")
    })
    .await;
    let body = get(ops, "/metrics").await.1;
    let exposed: BTreeSet<&str> = body
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .collect();
    let unknown: Vec<&String> = used
        .iter()
        .filter(|m| !exposed.contains(m.as_str()))
        .filter(|m| !FAULT_ONLY.iter().any(|(name, _)| name == m))
        .collect();
    assert!(
        unknown.is_empty(),
        "not exposed by the server: {unknown:?}\n{body}"
    );
    for (name, test) in FAULT_ONLY {
        assert!(
            used.contains(name),
            "{name} is no longer used: drop it from FAULT_ONLY"
        );
        assert!(
            !exposed.contains(name),
            "{name} is exposed by a healthy server: drop it from FAULT_ONLY"
        );
        assert!(
            read(test).contains(name),
            "{test} does not read {name}, which it is named as making"
        );
        // Registered: its help text is in the server's source.
        let bare = name.trim_start_matches("clusterset_dns_");
        assert!(
            ["src/dns/metrics.rs", "src/ops/metrics.rs"]
                .iter()
                .any(|f| read(f).contains(&format!("\"{bare}\""))),
            "{name} is registered by no metrics module"
        );
    }

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
