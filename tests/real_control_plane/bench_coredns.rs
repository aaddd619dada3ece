//! Not a test: the benchmark of `bench/coredns.sh` (run with the argument
//! `bench-coredns`, never by default). On the real control plane, the same
//! names are answered by west's clusterset-dns (Kubernetes mode, from what
//! it reads) and by a CoreDNS with `multicluster clusterset.local` reading
//! the ServiceImports and MCS EndpointSlices clusterset-dns wrote into west.
//! Each server is pinned to one core, dnsperf to the other, in alternated
//! pairs; queries per second, CPU per query and resident memory are
//! reported side by side and as ratios. Nothing is asserted about speed;
//! the two servers must give the same addresses for every name first.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use futures::{StreamExt, TryStreamExt};
use hickory_proto::rr::RecordType;

use crate::clusterset::{CONVERGE, Clusterset, eventually};
use crate::coredns_side::{ask, coredns};
use crate::workloads::{exported_with_pod, namespace};

const NS: &str = "bench";
/// How long the servers settle after being pinned, before the first run.
const SETTLE: Duration = Duration::from_secs(2);

/// What the benchmark is asked to do (environment of `bench/coredns.sh`).
struct Settings {
    services: usize,
    duration: u64,
    pairs: usize,
    server_core: usize,
    client_core: usize,
}

impl Settings {
    fn from_env() -> Result<Self> {
        let number = |name: &str, default: usize| -> Result<usize> {
            std::env::var(name).map_or(Ok(default), |v| {
                v.parse()
                    .with_context(|| format!("{name}={v:?} is not a number"))
            })
        };
        Ok(Self {
            services: number("SERVICES", 300)?,
            duration: number("DURATION", 10)? as u64,
            pairs: number("PAIRS", 3)?,
            server_core: number("SERVER_CORE", 1)?,
            client_core: number("CLIENT_CORE", 0)?,
        })
    }
}

/// One dnsperf run's row as `bench/run_dnsperf.py` prints it.
struct Run {
    server: &'static str,
    qps: f64,
    server_cpu_pct: f64,
}

/// The benchmark; prints its table and writes every run's row to
/// `$WORK/coredns-*.tsv` (dnsperf's own output beside it).
pub async fn run(set: &mut Clusterset) -> Result<()> {
    let settings = Settings::from_env()?;
    let names = services(set, settings.services).await?;
    let ours = set.member("west").dns();
    let ours_pid = set.member("west").replicas[0]
        .pid()
        .context("west's replica runs")?;
    let (mut process, core) = coredns(set, true)?;
    let core_pid = process.pid().context("CoreDNS runs")?;
    // Both must answer every name, with the same addresses.
    let started = Instant::now();
    for name in &names {
        eventually(CONVERGE, &format!("both answer {name}"), async || {
            process.check_alive().map_err(|e| e.to_string())?;
            let (a, b) = (
                ask(ours, name, RecordType::A).await,
                ask(core, name, RecordType::A).await,
            );
            if a == b && !a.records.is_empty() {
                Ok(Some(()))
            } else {
                Err(format!("clusterset-dns {a:?}, CoreDNS {b:?}"))
            }
        })
        .await?;
    }
    eprintln!(
        "  both answer all {} names alike ({:.1?} after the last write)",
        names.len(),
        started.elapsed()
    );

    let work = std::env::var("WORK").unwrap_or_else(|_| "/tmp/clusterset-bench".into());
    let work = Path::new(&work);
    std::fs::create_dir_all(work)?;
    let queries = work.join("coredns-queries.txt");
    let mut text = String::new();
    for name in &names {
        writeln!(text, "{name} A")?;
    }
    std::fs::write(&queries, text)?;
    for pid in [ours_pid, core_pid] {
        pin(pid, settings.server_core)?;
    }
    tokio::time::sleep(SETTLE).await;
    let results = work.join(format!(
        "coredns-{}.tsv",
        jiff::Timestamp::now().strftime("%Y%m%d-%H%M%S")
    ));
    let mut runs = Vec::new();
    for pair in 1..=settings.pairs {
        for (server, at, pid) in [
            ("coredns", core, core_pid),
            ("clusterset-dns", ours, ours_pid),
        ] {
            runs.push(dnsperf(
                &settings, &results, &queries, server, at, pid, pair,
            )?);
        }
    }
    let memory = [("coredns", core_pid), ("clusterset-dns", ours_pid)]
        .map(|(server, pid)| (server, rss_mib(pid).unwrap_or(f64::NAN)));
    report(&settings, &runs, &memory, &results)
}

/// `count` services in `bench`, exported by east and west with one ready Pod
/// each: every fourth headless, the others ClusterSetIP with a VIP. Returns
/// their names.
async fn services(set: &Clusterset, count: usize) -> Result<Vec<String>> {
    for id in ["east", "west"] {
        namespace(&set.member(id).admin, NS).await?;
    }
    let began = Instant::now();
    let work: Vec<(String, usize, bool)> = (0..count)
        .flat_map(|i| {
            ["east", "west"]
                .into_iter()
                .enumerate()
                .map(move |(c, id)| (id.to_owned(), i, c == 1))
        })
        .collect();
    futures::stream::iter(work)
        .map(|(id, i, second)| async move {
            let admin = &set.member(&id).admin;
            let ip = format!("10.{}.{}.{}", 100 + u8::from(second), i / 250, i % 250 + 1);
            exported_with_pod(admin, NS, &format!("svc-{i}"), i % 4 == 0, &ip).await
        })
        .buffer_unordered(8)
        .try_collect::<Vec<()>>()
        .await?;
    eprintln!(
        "  {count} services exported by east and west in {:.1?}",
        began.elapsed()
    );
    Ok((0..count)
        .map(|i| format!("svc-{i}.{NS}.svc.clusterset.local."))
        .collect())
}

/// Pins every thread of `pid` to `core`.
fn pin(pid: u32, core: usize) -> Result<()> {
    let status = Command::new("taskset")
        .args(["-a", "-p", "-c", &core.to_string(), &pid.to_string()])
        .stdout(std::process::Stdio::null())
        .status()
        .context("running taskset (util-linux)")?;
    ensure!(
        status.success(),
        "taskset could not pin {pid} to core {core}"
    );
    Ok(())
}

/// One dnsperf run against `at`, pinned to the client core, through
/// `bench/run_dnsperf.py` (which also accounts the CPU of `pid`).
fn dnsperf(
    settings: &Settings,
    results: &Path,
    queries: &Path,
    server: &'static str,
    at: SocketAddr,
    pid: u32,
    pair: usize,
) -> Result<Run> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/run_dnsperf.py");
    let (server_core, client_core) = (
        settings.server_core.to_string(),
        settings.client_core.to_string(),
    );
    let raw = results.with_extension(format!("{server}-{pair}.out"));
    let output = Command::new("python3")
        .arg(&script)
        .arg(&raw)
        .args([&pid.to_string(), &server_core, &client_core])
        .args([
            &format!("{}svc", settings.services),
            server,
            "udp",
            &pair.to_string(),
        ])
        .args(["--", "taskset", "-c", &client_core, "dnsperf"])
        .args(["-s", &at.ip().to_string(), "-p", &at.port().to_string()])
        .arg("-d")
        .arg(queries)
        .args(["-l", &settings.duration.to_string(), "-c", "8", "-q", "100"])
        .output()
        .context("running bench/run_dnsperf.py")?;
    ensure!(
        output.status.success(),
        "dnsperf against {server} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let row = String::from_utf8_lossy(&output.stdout);
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(results)?;
    std::io::Write::write_all(&mut file, row.as_bytes())?;
    let fields: Vec<&str> = row.trim().split('\t').collect();
    let number = |i: usize| -> Result<f64> {
        fields
            .get(i)
            .and_then(|f| f.parse().ok())
            .with_context(|| format!("field {i} of run_dnsperf.py's row {row:?}"))
    };
    let run = Run {
        server,
        qps: number(4)?,
        server_cpu_pct: number(7)?,
    };
    eprintln!(
        "  pair {pair} {server}: {:.0} q/s, server {:.0} % of a core",
        run.qps, run.server_cpu_pct
    );
    Ok(run)
}

fn rss_mib(pid: u32) -> Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("VmRSS")?;
    Ok(kib / 1024.0)
}

/// Medians of the runs, each server's and ours/CoreDNS.
fn report(
    settings: &Settings,
    runs: &[Run],
    memory: &[(&str, f64); 2],
    results: &Path,
) -> Result<()> {
    let median = |server: &str, f: &dyn Fn(&Run) -> f64| {
        let mut v: Vec<f64> = runs.iter().filter(|r| r.server == server).map(f).collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    };
    let qps = |s: &str| median(s, &|r| r.qps);
    // Microseconds of server CPU per answered query.
    let cpu = |s: &str| median(s, &|r| r.server_cpu_pct / 100.0 / r.qps * 1e6);
    let rss = |s: &str| {
        memory
            .iter()
            .find(|(n, _)| *n == s)
            .map_or(f64::NAN, |m| m.1)
    };
    let servers: BTreeSet<&str> = ["clusterset-dns", "coredns"].into();
    println!(
        "\nclusterset-dns vs CoreDNS multicluster, {} services (A queries, UDP, {} s runs, {} pairs)",
        settings.services, settings.duration, settings.pairs
    );
    println!(
        "{:<16} {:>12} {:>16} {:>12}",
        "server", "queries/s", "CPU µs/query", "RSS MiB"
    );
    for s in &servers {
        println!("{s:<16} {:>12.0} {:>16.2} {:>12.1}", qps(s), cpu(s), rss(s));
    }
    let (a, b) = ("clusterset-dns", "coredns");
    println!(
        "{:<16} {:>11.2}x {:>15.2}x {:>11.2}x",
        "ours/CoreDNS",
        qps(a) / qps(b),
        cpu(a) / cpu(b),
        rss(a) / rss(b)
    );
    println!("runs: {}", results.display());
    Ok(())
}
