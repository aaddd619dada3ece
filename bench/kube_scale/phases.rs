//! The phases of the run and their tables: start (fresh or restart), steady
//! state, churn, stop; and what the broker and a member API server store.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use fake_apiserver::{Stored, Traffic, Verb};
use futures::future::join_all;

use crate::apis::{ApiServers, MemberTraffic};
use crate::churn::{Churn, Churned};
use crate::layout::Layout;
use crate::member::{Kubeconfigs, MemberProcess, ProcStats};
use crate::params::Params;
use crate::probe::{Probe, all_correct};
use crate::report::{Table, mib, per_min, secs};

/// How often a start is looked at.
const TICK: Duration = Duration::from_millis(200);
/// How often a start not serving yet says what it still answers wrong.
const SAY_EVERY: Duration = Duration::from_secs(30);
/// A member stopping gracefully takes at most this long.
pub const STOP_LIMIT: Duration = Duration::from_secs(30);
/// etcd's default and largest recommended storage quotas.
const ETCD_QUOTAS: [(&str, u64); 2] = [("2 GiB", 2 << 30), ("8 GiB", 8 << 30)];

/// One member's start.
#[derive(Debug, serde::Serialize)]
pub struct Started {
    pub id: String,
    /// From spawn to one round of probes all correct.
    pub serving: Option<Duration>,
    /// From spawn to its last write (Lease renewals aside) before it went quiet.
    pub last_write: Option<Duration>,
    /// Resident memory once serving.
    pub rss_serving_mib: Option<f64>,
    /// Memory (peak included) and CPU once quiet.
    pub at_quiet: ProcStats,
    /// Its requests and bytes from spawn to quiet.
    pub traffic: MemberTraffic,
}

pub struct StartPhase {
    pub members: Vec<MemberProcess>,
    pub results: Vec<Started>,
    /// Names probed in each member.
    pub probed: usize,
    /// Probed names whose VIP differs between members.
    pub vip_disagreements: usize,
}

/// Spawns every member and follows each until it serves every probe and its
/// writes went quiet (or the start limit passes).
pub async fn start(
    apis: &ApiServers,
    kubeconfigs: &[Kubeconfigs],
    probes: &[Probe],
    p: &Params,
    run: &str,
) -> StartPhase {
    let before = apis.all_traffic();
    let members: Vec<MemberProcess> = kubeconfigs
        .iter()
        .enumerate()
        .map(|(ci, k)| {
            let id = Layout::cluster(ci);
            let log = p.work.join(format!("{id}-{run}.log"));
            match &p.profile_first {
                Some((wrapper, bin)) if ci == 0 => {
                    let wrapper: Vec<String> =
                        wrapper.iter().map(|w| w.replace("{run}", run)).collect();
                    MemberProcess::spawn_under(&wrapper, bin, &id, k, &log, p.derived.as_deref())
                }
                _ => MemberProcess::spawn(&p.member_bin, &id, k, &log, p.derived.as_deref()),
            }
        })
        .collect();
    let followed = members
        .iter()
        .enumerate()
        .map(|(ci, m)| follow_start(apis, ci, m, &before[ci], probes, p));
    let (results, vips): (Vec<_>, Vec<_>) = join_all(followed).await.into_iter().unzip();
    StartPhase {
        members,
        results,
        probed: probes.len(),
        vip_disagreements: disagreements(&vips),
    }
}

async fn follow_start(
    apis: &ApiServers,
    ci: usize,
    m: &MemberProcess,
    before: &MemberTraffic,
    probes: &[Probe],
    p: &Params,
) -> (Started, BTreeMap<String, IpAddr>) {
    let mut writes = apis.traffic(ci).work_writes();
    let (mut last_write, mut serving, mut rss, mut vips) = (None, None, None, BTreeMap::new());
    let mut said = Instant::now();
    while m.started.elapsed() < p.start_limit {
        let now = apis.traffic(ci).work_writes();
        if now != writes {
            (writes, last_write) = (now, Some(m.started.elapsed()));
        }
        if serving.is_none() {
            match all_correct(m.dns, probes).await {
                Ok(seen) => {
                    (serving, vips) = (Some(m.started.elapsed()), seen);
                    rss = Some(m.stats().rss_mib);
                }
                Err(wrong) if said.elapsed() >= SAY_EVERY => {
                    let t = m.started.elapsed().as_secs();
                    eprintln!("{}: not serving after {t} s: {wrong}", m.id);
                    said = Instant::now();
                }
                Err(_) => {}
            }
        } else if last_write.is_none_or(|t| m.started.elapsed() - t >= p.quiet) {
            break;
        }
        tokio::time::sleep(TICK).await;
    }
    let started = Started {
        id: m.id.clone(),
        serving,
        last_write,
        rss_serving_mib: rss,
        at_quiet: m.stats(),
        traffic: apis.traffic(ci).since(before),
    };
    (started, vips)
}

/// Seconds to the last write, or "none".
fn last_write(at: Option<Duration>) -> String {
    at.map_or("none".into(), |d| format!("{:.1}", d.as_secs_f64()))
}

/// Names whose VIP is not the same in every member.
fn disagreements(vips: &[BTreeMap<String, IpAddr>]) -> usize {
    let Some(first) = vips.first() else { return 0 };
    first
        .iter()
        .filter(|(name, vip)| vips.iter().any(|v| v.get(*name) != Some(vip)))
        .count()
}

/// `list/watch/get/writes`.
fn requests(t: &Traffic) -> String {
    let n = |v| t.count(v);
    format!(
        "{}/{}/{}/{}",
        n(Verb::List),
        n(Verb::Watch),
        n(Verb::Get),
        t.writes()
    )
}

impl StartPhase {
    pub fn print(&self, title: &str, p: &Params) {
        let mut table = Table::new(
            title,
            &[
                "member",
                "serving s",
                "last write s",
                "RSS MiB serving",
                "peak MiB",
                "CPU s",
                "own API list/watch/get/writes",
                "own API MiB down/up",
                "broker list/watch/get/writes",
                "broker MiB down/up",
                "writes (leases aside)",
            ],
        );
        for r in &self.results {
            let t = &r.traffic;
            table.row(vec![
                r.id.clone(),
                secs(r.serving, p.start_limit),
                last_write(r.last_write),
                r.rss_serving_mib.map_or("-".into(), |m| format!("{m:.0}")),
                format!("{:.0}", r.at_quiet.peak_mib),
                format!("{:.1}", r.at_quiet.cpu_s),
                requests(&t.own),
                format!("{}/{}", mib(t.own.response_bytes), mib(t.own.request_bytes)),
                requests(&t.broker),
                format!(
                    "{}/{}",
                    mib(t.broker.response_bytes),
                    mib(t.broker.request_bytes)
                ),
                t.work_writes().to_string(),
            ]);
        }
        table.print();
        println!(
            "\n{} names probed in each member; VIPs that differ between members: {}",
            self.probed, self.vip_disagreements
        );
    }
}

/// One member over the steady phase.
#[derive(Debug, serde::Serialize)]
pub struct Steady {
    pub id: String,
    pub cpu_s: f64,
    pub traffic: MemberTraffic,
}

/// Nothing changes for `over`: what each member does meanwhile.
pub async fn steady(apis: &ApiServers, members: &[MemberProcess], over: Duration) -> Vec<Steady> {
    let before: Vec<_> = members.iter().map(|m| m.stats()).collect();
    let traffic = apis.all_traffic();
    tokio::time::sleep(over).await;
    let results: Vec<Steady> = members
        .iter()
        .enumerate()
        .map(|(ci, m)| Steady {
            id: m.id.clone(),
            cpu_s: m.stats().cpu_s - before[ci].cpu_s,
            traffic: apis.traffic(ci).since(&traffic[ci]),
        })
        .collect();
    let mut table = Table::new(
        &format!(
            "Steady state, no changes for {} s (per minute)",
            over.as_secs()
        ),
        &[
            "member",
            "CPU s",
            "own API requests",
            "broker requests",
            "writes (leases aside)",
            "Lease writes",
            "watch events (leases aside)",
            "Lease watch events",
            "KiB down",
        ],
    );
    for s in &results {
        let t = &s.traffic;
        let down = (t.own.response_bytes + t.broker.response_bytes) / 1024;
        table.row(vec![
            s.id.clone(),
            format!("{:.2}", s.cpu_s * 60.0 / over.as_secs_f64()),
            per_min(t.own.total(), over),
            per_min(t.broker.total(), over),
            per_min(t.work_writes(), over),
            per_min(t.liveness_writes(), over),
            per_min(t.work_events(), over),
            per_min(t.liveness_events(), over),
            per_min(down, over),
        ]);
    }
    table.print();
    results
}

/// One churn rate: the latencies and what each member spent.
#[derive(Debug, serde::Serialize)]
pub struct ChurnPhase {
    pub rate: u64,
    pub churned: Churned,
    pub members: Vec<Steady>,
}

/// Each rate of endpoint churn in turn.
pub async fn churn(
    apis: &ApiServers,
    members: &[MemberProcess],
    churn: &mut Churn,
    probes: &[Probe],
    p: &Params,
) -> Vec<ChurnPhase> {
    let dns: Vec<_> = members.iter().map(|m| m.dns).collect();
    let mut phases = Vec::new();
    for &rate in &p.rates {
        let before: Vec<_> = members.iter().map(|m| m.stats()).collect();
        let traffic = apis.all_traffic();
        let started = Instant::now();
        let churned = churn.run(apis, &dns, rate, p.churn).await;
        let elapsed = started.elapsed();
        let per_member = members
            .iter()
            .enumerate()
            .map(|(ci, m)| Steady {
                id: m.id.clone(),
                cpu_s: m.stats().cpu_s - before[ci].cpu_s,
                traffic: apis.traffic(ci).since(&traffic[ci]),
            })
            .collect();
        let phase = ChurnPhase {
            rate,
            churned,
            members: per_member,
        };
        print_churn(&phase, elapsed);
        phases.push(phase);
    }
    let before: Vec<u64> = (0..members.len())
        .map(|ci| apis.traffic(ci).work_writes())
        .collect();
    let restored = Instant::now();
    let burst = churn.restore(apis, &dns).await;
    let settled = join_all(members.iter().zip(before).enumerate().map(
        |(ci, (m, mut writes))| async move {
            let (mut correct, mut last_write) = (None, None);
            while restored.elapsed() < p.start_limit {
                let now = apis.traffic(ci).work_writes();
                if now != writes {
                    (writes, last_write) = (now, Some(restored.elapsed()));
                }
                if correct.is_none() {
                    if all_correct(m.dns, probes).await.is_ok() {
                        correct = Some(restored.elapsed());
                    }
                } else if last_write.is_none_or(|t| restored.elapsed() - t >= p.quiet) {
                    break;
                }
                tokio::time::sleep(TICK).await;
            }
            (correct, last_write)
        },
    ))
    .await;
    let correct: Vec<String> = settled.iter().map(|s| secs(s.0, p.start_limit)).collect();
    let last: Vec<String> = settled.iter().map(|s| last_write(s.1)).collect();
    let seen = &burst.seen;
    let ms = |q| seen.quantile(q).map_or("-".into(), |v| format!("{v:.0}"));
    println!(
        "\n### Burst: {} moved endpoints put back at once, written in {:.1} s; from the first \
         write until the other members answer them: {} samples, p50 {} ms, p99 {} ms, max {} \
         ms, {} not seen in 20 s; every probe correct after {} s; last write of the members \
         after {} s",
        burst.moved,
        burst.written_s,
        seen.latencies_ms.len(),
        ms(0.5),
        ms(0.99),
        ms(1.0),
        seen.lost,
        correct.join(" / "),
        last.join(" / "),
    );
    phases
}

fn print_churn(phase: &ChurnPhase, elapsed: Duration) {
    let c = &phase.churned;
    let ms = |q| c.quantile(q).map_or("-".into(), |v| format!("{v:.1}"));
    println!(
        "\n### Churn at {}/s: {} EndpointSlice updates in {:.1} s; change → answer in the other \
         members: {} samples, p50 {} ms, p99 {} ms, max {} ms, {} not seen in 20 s",
        phase.rate,
        c.changes,
        c.writing_s,
        c.latencies_ms.len(),
        ms(0.5),
        ms(0.99),
        ms(1.0),
        c.lost
    );
    let mut table = Table::new(
        &format!(
            "Members during the churn at {}/s (per change: over all {} changes, the member's \
             own cluster's included)",
            phase.rate, c.changes
        ),
        &[
            "member",
            "CPU s",
            "CPU % of a core",
            "writes (leases aside)",
            "MiB down",
            "watch events (leases aside)",
            "per change: CPU ms",
            "writes",
            "watch events",
            "KiB down",
        ],
    );
    let per_change = |n: f64| n / c.changes.max(1) as f64;
    for s in &phase.members {
        let t = &s.traffic;
        let down = t.own.response_bytes + t.broker.response_bytes;
        let events = t.work_events();
        table.row(vec![
            s.id.clone(),
            format!("{:.1}", s.cpu_s),
            format!("{:.0}", 100.0 * s.cpu_s / elapsed.as_secs_f64()),
            t.work_writes().to_string(),
            mib(down),
            events.to_string(),
            format!("{:.2}", per_change(s.cpu_s * 1e3)),
            format!("{:.2}", per_change(t.work_writes() as f64)),
            format!("{:.2}", per_change(events as f64)),
            format!("{:.2}", per_change(down as f64 / 1024.0)),
        ]);
    }
    table.print();
}

/// SIGTERM to every member, each waited for.
pub fn stop(members: Vec<MemberProcess>) {
    for m in members {
        let id = m.id.clone();
        if !m.terminate(STOP_LIMIT) {
            println!("\n{id} did not stop within {STOP_LIMIT:?} of SIGTERM (killed)");
        }
    }
}

/// The broker namespace's objects, against etcd's quotas.
pub fn print_broker(stored: &[Stored]) {
    let mut header = vec!["resource", "objects", "JSON MiB"];
    let quota_cols: Vec<String> = ETCD_QUOTAS
        .iter()
        .map(|(q, _)| format!("% of {q}"))
        .collect();
    header.extend(quota_cols.iter().map(String::as_str));
    let mut table = Table::new("What the broker stores after the fresh start", &header);
    let total = Stored {
        group: String::new(),
        plural: "total".into(),
        objects: stored.iter().map(|s| s.objects).sum(),
        json_bytes: stored.iter().map(|s| s.json_bytes).sum(),
    };
    for s in stored.iter().chain([&total]) {
        let mut row = vec![s.plural.clone(), s.objects.to_string(), mib(s.json_bytes)];
        row.extend(
            ETCD_QUOTAS
                .iter()
                .map(|(_, q)| format!("{:.1}", 100.0 * s.json_bytes as f64 / *q as f64)),
        );
        table.row(row);
    }
    table.print();
}

/// What member c1's API server holds once synced (its own objects and what it was written).
pub fn print_member_store(stored: &[Stored]) {
    let mut table = Table::new(
        "What member c1's API server stores after the fresh start",
        &["resource", "objects", "JSON MiB"],
    );
    for s in stored {
        table.row(vec![
            s.plural.clone(),
            s.objects.to_string(),
            mib(s.json_bytes),
        ]);
    }
    table.print();
}
