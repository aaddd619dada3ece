//! Clusters that only publish beforehand (`RUNNING` < `CLUSTERS`, issue 22
//! item 6): two cores do not hold a member process per cluster at 30 or 255
//! clusters. Each cluster past the running ones runs its member once, `WAVE`
//! at a time, against an API server of its own loaded for the occasion,
//! until its export records and EndpointSlices are on the broker and its
//! writes went quiet; then the member stops and its API server is dropped.
//! What it published stays on the broker, as a stopped member's does, and
//! the bench renews its heartbeat Lease from then on, as its member would:
//! the other members keep it live (a stale heartbeat is judged dead after
//! `--cluster-timeout`) and receive the heartbeat events of a clusterset of
//! `CLUSTERS`. The running members then meet the broker of that clusterset,
//! and their watch fan-out and writes per change are measured at that size.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fake_apiserver::FakeApiServer;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

use crate::apis::{ApiServers, LIVENESS};
use crate::layout::Layout;
use crate::member::{BROKER_NAMESPACE, MemberProcess};
use crate::params::Params;
use crate::phases::STOP_LIMIT;
use crate::report::Table;

/// How often a wave is looked at.
const TICK: Duration = Duration::from_millis(500);
/// How often a member renews its heartbeat: a quarter of the default
/// `--cluster-timeout` (30 s), as `writeback/heartbeat.rs` does.
const HEARTBEAT_PERIOD: Duration = Duration::from_millis(7500);
/// The MCS label of the exporting cluster (KEP-1645), on every broker
/// object a member publishes for its own cluster.
const SOURCE_CLUSTER: &str = "multicluster.kubernetes.io/source-cluster";
/// Group and plural of Leases.
const LEASES: (&str, &str) = ("coordination.k8s.io", "leases");

/// One wave of clusters publishing at once.
#[derive(Debug, serde::Serialize)]
pub struct Wave {
    pub clusters: Vec<String>,
    /// From the first spawn to every one published and quiet.
    pub took_s: f64,
    /// Per cluster, mean: writes to the broker and to its own API server
    /// (Lease renewals aside).
    pub broker_writes: f64,
    pub own_writes: f64,
    /// The largest member's peak resident memory, MiB.
    pub peak_mib: f64,
    /// CPU per member, mean, seconds.
    pub cpu_s: f64,
}

/// Publishes clusters `c<RUNNING+1>..c<CLUSTERS>`, wave by wave; their
/// heartbeats are renewed until the bench exits.
pub async fn publish(apis: &Arc<ApiServers>, p: &Params) -> Vec<Wave> {
    let clusters: Vec<usize> = (p.running..p.lay.clusters).collect();
    let published = Arc::new(Mutex::new(Vec::new()));
    tokio::spawn(keep_heartbeats(apis.clone(), published.clone()));
    let mut waves = Vec::new();
    for wave in clusters.chunks(p.wave) {
        let done = publish_wave(apis, wave, p).await;
        published
            .lock()
            .unwrap()
            .extend(done.clusters.iter().cloned());
        waves.push(done);
    }
    print(&waves);
    waves
}

/// Every [`HEARTBEAT_PERIOD`], moves on the `renewTime` of the heartbeat
/// Lease of each cluster in `clusters` (what a member's renewal changes).
async fn keep_heartbeats(apis: Arc<ApiServers>, clusters: Arc<Mutex<Vec<String>>>) {
    let mut ticker = tokio::time::interval(HEARTBEAT_PERIOD);
    loop {
        ticker.tick().await;
        let now = serde_json::to_value(MicroTime(jiff::Timestamp::now())).expect("a MicroTime");
        let ids = clusters.lock().unwrap().clone();
        for id in ids {
            let name = format!("heartbeat.{id}");
            let (group, plural) = LEASES;
            let Some(mut lease) = apis
                .broker
                .get_raw(group, plural, Some(BROKER_NAMESPACE), &name)
            else {
                continue; // never written: a cluster without a heartbeat is live
            };
            lease["spec"]["renewTime"] = now.clone();
            apis.broker
                .put_raw(lease)
                .unwrap_or_else(|e| panic!("renewing {name}: {e:?}"));
        }
    }
}

async fn publish_wave(apis: &ApiServers, wave: &[usize], p: &Params) -> Wave {
    let started = Instant::now();
    let mut members: Vec<(FakeApiServer, MemberProcess)> = Vec::new();
    for &ci in wave {
        let id = Layout::cluster(ci);
        let (api, kubeconfigs) = apis.one_off(&p.lay, ci, &p.work).await;
        let log = p.work.join(format!("{id}-publish.log"));
        let member =
            MemberProcess::spawn(&p.member_bin, &id, &kubeconfigs, &log, p.derived.as_deref());
        members.push((api, member));
    }
    let writes = |api: &FakeApiServer, id: &str| {
        let own = api.traffic().remove(id).unwrap_or_default();
        (
            apis.broker_traffic(id).writes_except(LIVENESS),
            own.writes_except(LIVENESS),
        )
    };
    // Per member: work writes so far, and when they last moved.
    let mut last: Vec<(u64, Option<Instant>)> = vec![(0, None); wave.len()];
    let mut looked = Instant::now();
    loop {
        for ((api, m), (count, at)) in members.iter().zip(&mut last) {
            let (broker, own) = writes(api, &m.id);
            if broker + own != *count {
                (*count, *at) = (broker + own, Some(Instant::now()));
            }
        }
        let quiet = last
            .iter()
            .all(|(_, at)| at.is_some_and(|t| t.elapsed() >= p.quiet));
        if quiet && looked.elapsed() >= p.quiet {
            looked = Instant::now();
            let missing = unpublished(apis, &p.lay, wave);
            if missing.is_empty() {
                break;
            }
            eprintln!("publishing: quiet but not published yet: {missing}");
        }
        assert!(
            started.elapsed() < p.start_limit,
            "publishing {}..: not done in {:?} (START_LIMIT); see {}/c*-publish.log",
            Layout::cluster(wave[0]),
            p.start_limit,
            p.work.display()
        );
        tokio::time::sleep(TICK).await;
    }
    let took_s = started.elapsed().as_secs_f64();
    let n = wave.len() as f64;
    let (mut broker_writes, mut own_writes, mut peak_mib, mut cpu_s) = (0.0, 0.0, 0.0_f64, 0.0);
    for (api, m) in members {
        let (broker, own) = writes(&api, &m.id);
        let stats = m.stats();
        broker_writes += broker as f64 / n;
        own_writes += own as f64 / n;
        peak_mib = peak_mib.max(stats.peak_mib);
        cpu_s += stats.cpu_s / n;
        let id = m.id.clone();
        if !m.terminate(STOP_LIMIT) {
            println!("\n{id} did not stop within {STOP_LIMIT:?} of SIGTERM (killed)");
        }
    }
    Wave {
        clusters: wave.iter().map(|&ci| Layout::cluster(ci)).collect(),
        took_s,
        broker_writes,
        own_writes,
        peak_mib,
        cpu_s,
    }
}

/// What the broker still lacks of `wave`'s clusters: each one's export
/// record of every service and its copy of every headless EndpointSlice.
/// Empty once all of them are there.
fn unpublished(apis: &ApiServers, lay: &Layout, wave: &[usize]) -> String {
    let count = |group: &str, plural: &str, id: &str| {
        let objects = apis.broker.list_raw(group, plural, Some(BROKER_NAMESPACE));
        objects
            .iter()
            .filter(|o| o["metadata"]["labels"][SOURCE_CLUSTER] == id)
            .count()
    };
    let exports = lay.services + lay.headless;
    let slices = lay.headless * lay.slices_per_headless();
    let mut missing = Vec::new();
    for &ci in wave {
        let id = Layout::cluster(ci);
        let have = (
            count("multicluster.x-k8s.io", "serviceimports", &id),
            count("discovery.k8s.io", "endpointslices", &id),
        );
        if have != (exports, slices) {
            missing.push(format!(
                "{id}: {}/{exports} export records, {}/{slices} slices",
                have.0, have.1
            ));
        }
    }
    missing.join("; ")
}

fn print(waves: &[Wave]) {
    let mut table = Table::new(
        "Clusters published beforehand (each member run once, then stopped)",
        &[
            "clusters",
            "published and quiet s",
            "broker writes per cluster",
            "own API writes per cluster",
            "largest peak MiB",
            "CPU s per member",
        ],
    );
    for w in waves {
        let (first, last) = (&w.clusters[0], &w.clusters[w.clusters.len() - 1]);
        table.row(vec![
            format!("{first}..{last}"),
            format!("{:.1}", w.took_s),
            format!("{:.0}", w.broker_writes),
            format!("{:.0}", w.own_writes),
            format!("{:.0}", w.peak_mib),
            format!("{:.1}", w.cpu_s),
        ]);
    }
    table.print();
}
