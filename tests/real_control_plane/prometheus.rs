//! A real Prometheus (Debian's `prometheus`, started here as a child
//! process) scrapes every replica's operations listener with the shipped
//! config/monitoring/alerts.rules.yaml: every rule evaluates without error,
//! every query of config/monitoring/grafana-dashboard.json returns data,
//! and when every replica of west is killed ClustersetDnsClusterDead fires
//! from each replica of the other members, naming west, and resolves once
//! west is back (ARCHITECTURE.md, "Tests on a real control plane").
//! Without `prometheus` installed (tests/monitoring/setup.sh) the scenario
//! is skipped, and fails under CI.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use hickory_proto::rr::RecordType;
use serde_json::{Value, json};
use test_support::{dashboard, free_port, installed, resolve};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::Skipped;
use crate::check::{answers, answers_everywhere, ips};
use crate::clusterset::{CLUSTER_TIMEOUT_SECONDS, CONVERGE, Clusterset, Replica, eventually, repo};
use crate::control_plane::{Process, log_tail};
use crate::faults::watched;

const RULES: &str = "config/monitoring/alerts.rules.yaml";
const DEAD: &str = "ClustersetDnsClusterDead";

/// A Prometheus server of the test's own; killed when dropped.
struct Prometheus {
    api: SocketAddr,
    targets: PathBuf,
    log: PathBuf,
    process: Process,
}

impl Prometheus {
    /// Starts `bin` scraping the targets [`Self::scrape`] lists, every
    /// second, evaluating the shipped rules every second.
    fn start(bin: &Path, dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir)?;
        let targets = dir.join("targets.json");
        std::fs::write(&targets, "[]")?;
        let config = dir.join("prometheus.yml");
        // JSON is YAML: the config as a value, so paths need no quoting.
        let settings = json!({
            "global": {
                "scrape_interval": "1s",
                "scrape_timeout": "1s",
                "evaluation_interval": "1s",
            },
            "rule_files": [repo(RULES)],
            "scrape_configs": [{
                "job_name": "clusterset-dns",
                "file_sd_configs": [{ "files": [&targets], "refresh_interval": "1s" }],
            }],
        });
        std::fs::write(&config, serde_json::to_string_pretty(&settings)?)?;
        let api = free_port();
        let log = dir.join("prometheus.log");
        let args: Vec<String> = vec![
            format!("--config.file={}", config.display()),
            format!("--storage.tsdb.path={}", dir.join("data").display()),
            format!("--web.listen-address={api}"),
        ];
        let process = Process::spawn("prometheus", bin, &args, &log)?;
        Ok(Self {
            api,
            targets,
            log,
            process,
        })
    }

    /// Scrapes exactly these `(member, replica identity, operations address)`.
    fn scrape(&self, replicas: &[(String, String, SocketAddr)]) -> Result<()> {
        let groups: Vec<Value> = replicas
            .iter()
            .map(|(member, identity, addr)| {
                json!({
                    "targets": [addr.to_string()],
                    "labels": { "member": member, "replica": identity },
                })
            })
            .collect();
        // Written whole, then renamed: Prometheus never reads half a file.
        let next = self.targets.with_extension("json.new");
        std::fs::write(&next, serde_json::to_string(&groups)?)?;
        std::fs::rename(&next, &self.targets)?;
        Ok(())
    }

    /// `GET path` of the HTTP API: the JSON `data` of a success.
    async fn get(&mut self, path: &str) -> Result<Value> {
        self.process.check_alive()?;
        let body = http_get(self.api, path).await?;
        let reply: Value =
            serde_json::from_str(&body).with_context(|| format!("GET {path}: not JSON: {body}"))?;
        ensure!(reply["status"] == "success", "GET {path}: {reply}");
        Ok(reply["data"].clone())
    }

    /// The result vector of an instant query.
    async fn query(&mut self, expr: &str) -> Result<Vec<Value>> {
        let encoded: String = form_urlencoded::byte_serialize(expr.as_bytes()).collect();
        let data = self.get(&format!("/api/v1/query?query={encoded}")).await?;
        Ok(data["result"].as_array().cloned().unwrap_or_default())
    }

    /// Active (pending or firing) alerts named `name`.
    async fn alerts(&mut self, name: &str) -> Result<Vec<Value>> {
        let data = self.get("/api/v1/alerts").await?;
        Ok(data["alerts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|a| a["labels"]["alertname"] == name)
            .cloned()
            .collect())
    }
}

/// A plain HTTP/1.0 GET (so the body comes unchunked): the body of a 200.
async fn http_get(addr: SocketAddr, path: &str) -> Result<String> {
    let mut stream = TcpStream::connect(addr)
        .await
        .with_context(|| format!("connecting to Prometheus at {addr}"))?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .with_context(|| format!("GET {path}: no HTTP response: {response}"))?;
    let status = head.split(' ').nth(1).unwrap_or_default();
    ensure!(
        status == "200" || body.starts_with('{'),
        "GET {path}: {head}\n{body}"
    );
    Ok(body.to_owned())
}

/// The address a replica serves /metrics on: its `--metrics-listen`, read
/// from its command line (the harness chose a free port for it).
fn metrics_addr(replica: &Replica) -> Result<SocketAddr> {
    let pid = replica.pid().context("the replica runs")?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))?;
    let args: Vec<String> = cmdline
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let at = args
        .iter()
        .position(|a| a == "--metrics-listen")
        .with_context(|| format!("{}: no --metrics-listen in {args:?}", replica.identity))?;
    Ok(args.get(at + 1).context("a value")?.parse()?)
}

/// Every running replica: `(member, identity, operations address)`.
fn replicas(set: &Clusterset) -> Result<Vec<(String, String, SocketAddr)>> {
    let mut all = Vec::new();
    for member in &set.members {
        for replica in &member.replicas {
            all.push((
                member.id.clone(),
                replica.identity.clone(),
                metrics_addr(replica)?,
            ));
        }
    }
    Ok(all)
}

/// Every replica of west killed: after `--cluster-timeout` every other
/// replica's `clusterset_dns_cluster_live{cluster="west"}` is 0, and after
/// the alert's `for` Prometheus fires ClustersetDnsClusterDead from each,
/// naming west and the replica; west back, it resolves.
pub async fn prometheus_pages_for_a_dead_member(set: &mut Clusterset) -> Result<()> {
    let Some(bin) = installed("prometheus") else {
        let message = "prometheus is not installed (run `bash tests/monitoring/setup.sh`)";
        if std::env::var_os("CI").is_some() {
            bail!("{message}; CI is set: this scenario must run");
        }
        return Err(Skipped(message.to_owned()).into());
    };
    let (both, name) = watched(set, "paged", 8).await?;
    let mut prometheus = Prometheus::start(&bin, &set.dir.path().join("prometheus"))?;
    let result = paged(set, &mut prometheus, &both, &name).await;
    if result.is_err() {
        eprintln!(
            "  Prometheus's log ends:\n{}",
            log_tail(&prometheus.log, 20)
        );
    }
    result
}

async fn paged(
    set: &mut Clusterset,
    prometheus: &mut Prometheus,
    both: &[String; 2],
    name: &str,
) -> Result<()> {
    let started = Instant::now();
    let before = replicas(set)?;
    prometheus.scrape(&before)?;
    eventually(CONVERGE, "Prometheus scraping every replica", async || {
        let up = prometheus
            .query("up == 1")
            .await
            .map_err(|e| e.to_string())?;
        if up.len() == before.len() {
            Ok(Some(()))
        } else {
            Err(format!(
                "{} of {} targets up: {up:?}",
                up.len(),
                before.len()
            ))
        }
    })
    .await?;

    // The shipped rules all load and evaluate on real series.
    let expected = {
        let text = std::fs::read_to_string(repo(RULES))?;
        let rules: Value = serde_yaml_ng::from_str(&text)?;
        rules["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
            .count()
    };
    eventually(CONVERGE, "every rule evaluated without error", async || {
        let data = prometheus
            .get("/api/v1/rules")
            .await
            .map_err(|e| e.to_string())?;
        let rules: Vec<&Value> = data["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|g| g["rules"].as_array().into_iter().flatten())
            .collect();
        let failing: Vec<String> = rules
            .iter()
            .filter(|r| r["health"] != "ok")
            .map(|r| format!("{}: {} {}", r["name"], r["health"], r["lastError"]))
            .collect();
        if rules.len() == expected && failing.is_empty() {
            Ok(Some(()))
        } else {
            Err(format!(
                "{} of {expected} rules loaded; not ok: {failing:?}",
                rules.len()
            ))
        }
    })
    .await?;
    ensure!(
        prometheus.alerts(DEAD).await?.is_empty(),
        "{DEAD} active while every member runs"
    );

    // Traffic for the query panels, on every replica.
    for member in &set.members {
        for replica in &member.replicas {
            for _ in 0..20 {
                resolve(replica.dns, name, RecordType::A).await;
            }
        }
    }
    every_dashboard_query_has_data(prometheus).await?;
    eprintln!(
        "  scraped, rules and dashboard checked in {:.0?}",
        started.elapsed()
    );

    let west = set.members.iter().position(|m| m.id == "west").unwrap();
    for replica in set.members[west].replicas.drain(..) {
        replica.kill();
    }
    let killed = Instant::now();
    let observers: BTreeSet<String> = before
        .iter()
        .filter(|(member, _, _)| member != "west")
        .map(|(_, _, addr)| addr.to_string())
        .collect();
    // --cluster-timeout, the alert's `for` (1m), and scrape and evaluation
    // intervals on a busy machine.
    let limit = Duration::from_secs(CLUSTER_TIMEOUT_SECONDS + 60 + 45);
    let firing = eventually(limit, &format!("{DEAD} firing for west"), async || {
        let alerts = prometheus.alerts(DEAD).await.map_err(|e| e.to_string())?;
        let firing: BTreeSet<String> = alerts
            .iter()
            .filter(|a| a["state"] == "firing")
            .filter_map(|a| a["labels"]["instance"].as_str())
            .map(str::to_owned)
            .collect();
        if firing == observers {
            Ok(Some(alerts))
        } else {
            Err(format!(
                "firing from {firing:?} of {observers:?}: {alerts:?}"
            ))
        }
    })
    .await?;
    let fired_after = killed.elapsed();
    for alert in &firing {
        let labels = &alert["labels"];
        let instance = labels["instance"].as_str().unwrap_or_default();
        ensure!(
            labels["cluster"] == "west"
                && labels["severity"] == "critical"
                && labels["job"] == "clusterset-dns"
                && labels["member"] != "west",
            "{DEAD} names west, from another member: {alert}"
        );
        let summary = alert["annotations"]["summary"].as_str().unwrap_or_default();
        let description = alert["annotations"]["description"]
            .as_str()
            .unwrap_or_default();
        ensure!(
            summary == format!("Member cluster west is dead as {instance} sees it")
                && description.starts_with(&format!(
                    "{instance} (clusterset-dns) has seen no renewal of cluster west's heartbeat"
                )),
            "{DEAD}'s annotations name west and {instance}: {alert}"
        );
    }
    // The last renewal seen may be up to a quarter of the timeout (the
    // renewal period) before the kill.
    let earliest = Duration::from_secs(CLUSTER_TIMEOUT_SECONDS * 3 / 4 + 60);
    ensure!(
        fired_after >= earliest,
        "{DEAD} fired {fired_after:?} after the kill, before --cluster-timeout and its `for` ({earliest:?})"
    );
    for id in ["east", "north"] {
        answers(set, id, name, RecordType::A, &ips(&[both[0].as_str()])).await?;
    }
    eprintln!("  {DEAD} fired {fired_after:.0?} after west was killed");

    set.add_replica(west).await?;
    let revived = Instant::now();
    let now = replicas(set)?;
    prometheus.scrape(&now)?;
    eventually(CONVERGE, &format!("{DEAD} resolved"), async || {
        let alerts = prometheus.alerts(DEAD).await.map_err(|e| e.to_string())?;
        if alerts.is_empty() {
            Ok(Some(()))
        } else {
            Err(format!("{alerts:?}"))
        }
    })
    .await?;
    eprintln!(
        "  {DEAD} resolved {:.0?} after west's replica started",
        revived.elapsed()
    );
    let live = prometheus
        .query("clusterset_dns_cluster_live{cluster=\"west\"} == 1")
        .await?;
    ensure!(
        live.len() == observers.len(),
        "every other replica sees west live: {live:?}"
    );
    answers_everywhere(
        set,
        name,
        RecordType::A,
        &ips(&[both[0].as_str(), both[1].as_str()]),
    )
    .await
}

/// Every query of the dashboard, its variables made concrete, returns at
/// least one series (retried while the rates have too few samples).
async fn every_dashboard_query_has_data(prometheus: &mut Prometheus) -> Result<()> {
    let text = std::fs::read_to_string(repo(dashboard::DASHBOARD))?;
    let board: Value = serde_json::from_str(&text)?;
    let queries = dashboard::queries(&board);
    ensure!(!queries.is_empty(), "the dashboard has queries");
    eventually(
        CONVERGE,
        "every dashboard query answered with data",
        async || {
            let mut empty = Vec::new();
            for query in &queries {
                let expr = dashboard::concrete(&query.expr);
                let result = prometheus.query(&expr).await.map_err(|e| e.to_string())?;
                if result.is_empty() {
                    empty.push(format!("{}: {expr}", query.name));
                }
            }
            if empty.is_empty() {
                Ok(Some(()))
            } else {
                Err(format!("no data: {empty:#?}"))
            }
        },
    )
    .await?;
    eprintln!("  {} dashboard queries answered with data", queries.len());
    Ok(())
}
