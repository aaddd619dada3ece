//! Sustained endpoint churn: at a fixed rate, one hostname endpoint of one
//! headless service in one cluster gets a new address, written through that
//! member's API server back door (which emits the watch event, as the
//! EndpointSlice controller's update would). For a sample of the changes,
//! every OTHER member is polled for the endpoint's per-pod name until it
//! answers the new address: the cross-cluster change → answer latency.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::task::JoinSet;

use crate::apis::ApiServers;
use crate::layout::Layout;
use crate::probe::single_address;

/// Churned addresses come from 100.64.0.0/10, which no preloaded pod uses.
const CHURN_BASE: u32 = u32::from_be_bytes([100, 64, 0, 0]);
/// Changes not seen by then count as lost.
const SEEN_LIMIT: Duration = Duration::from_secs(20);
/// Polls every 2 ms at first, less often as the wait grows (a slow phase
/// would otherwise flood the members with the probes of every pending change).
fn poll_pause(waited: Duration) -> Duration {
    Duration::from_millis(match waited.as_millis() {
        0..100 => 2,
        100..1000 => 10,
        _ => 50,
    })
}
/// About this many sampled changes per phase (enough for a p99).
const SAMPLES: u64 = 300;

/// What one churn phase measured.
#[derive(Debug, Default, serde::Serialize)]
pub struct Churned {
    /// Changes written.
    pub changes: u64,
    /// How long writing them took (`changes / writing_s`: the rate achieved).
    pub writing_s: f64,
    /// Change → answer latencies in the other members, ms, sorted.
    pub latencies_ms: Vec<f64>,
    /// `(s into the phase when written, ms to the answer)` of each sample,
    /// in the order written: when in the phase the slow ones were.
    pub timeline: Vec<(f64, f64)>,
    /// Sampled (change, member) pairs not answered within [`SEEN_LIMIT`].
    pub lost: usize,
}

impl Churned {
    /// The `q` quantile of the latencies.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let n = self.latencies_ms.len();
        (n > 0).then(|| self.latencies_ms[((n - 1) as f64 * q).round() as usize])
    }
}

/// The churn source: which endpoint changes next and to what.
pub struct Churn {
    lay: Layout,
    /// Changes go to the running members' clusters `c1..c<running>`.
    running: usize,
    /// Changes made so far, over every phase (addresses stay unique).
    next: u64,
    /// `(cluster, headless service)` whose endpoint 0 moved.
    moved: BTreeSet<(usize, usize)>,
}

impl Churn {
    pub fn new(lay: Layout, running: usize) -> Self {
        Self {
            lay,
            running,
            next: 0,
            moved: BTreeSet::new(),
        }
    }

    /// Puts every moved endpoint back at its preloaded address at once (so
    /// the clusterset is the one the probes expect again), sampling some of
    /// them in every member but the changed one: the time from the first
    /// write until each answers its old address again.
    pub async fn restore(&mut self, apis: &ApiServers, dns: &[SocketAddr]) -> Burst {
        let moved = std::mem::take(&mut self.moved);
        let sample_every = (moved.len() as u64 / SAMPLES).max(1);
        let mut polls = JoinSet::new();
        let started = Instant::now();
        for (k, &(ci, h)) in moved.iter().enumerate() {
            let address = self.lay.pod_ip(ci, h, 0);
            Self::write(apis, ci, h, address);
            if k as u64 % sample_every == 0 {
                sample(&mut polls, dns, ci, h, address, started, 0.0);
            }
        }
        let written_s = started.elapsed().as_secs_f64();
        Burst {
            moved: moved.len(),
            written_s,
            seen: collect(polls).await,
        }
    }

    /// Change `n`: cluster, headless service, new address. Consecutive
    /// changes go to different running clusters and services far apart.
    fn target(&self, n: u64) -> (usize, usize, Ipv4Addr) {
        let clusters = self.running as u64;
        let ci = (n % clusters) as usize;
        let h = ((n / clusters) * 7919 % self.lay.headless as u64) as usize;
        (ci, h, Ipv4Addr::from(CHURN_BASE + n as u32))
    }

    /// Writes the new address of endpoint 0 (hostname `hl-<h>-0`) of slice 0.
    fn write(apis: &ApiServers, ci: usize, h: usize, address: Ipv4Addr) {
        let (ns, _) = Layout::hl(h);
        let name = Layout::slice_name(ci, h, 0);
        let api = &apis.members[ci];
        let mut slice = api
            .get_raw("discovery.k8s.io", "endpointslices", Some(&ns), &name)
            .unwrap_or_else(|| panic!("slice {ns}/{name} in {}", Layout::cluster(ci)));
        slice["endpoints"][0]["addresses"] = Value::from(vec![address.to_string()]);
        api.put_raw(slice).expect("slice updated");
    }

    /// Runs `rate` changes per second for `over`, sampling some of them in
    /// every member but the changed one (`dns[ci]`: member ci's DNS).
    pub async fn run(
        &mut self,
        apis: &ApiServers,
        dns: &[SocketAddr],
        rate: u64,
        over: Duration,
    ) -> Churned {
        let total = rate * over.as_secs();
        let sample_every = (total / SAMPLES).max(1);
        let mut polls = JoinSet::new();
        let mut ticker = tokio::time::interval(Duration::from_secs(1) / rate as u32);
        let started = Instant::now();
        for k in 0..total {
            ticker.tick().await;
            let (ci, h, address) = self.target(self.next);
            self.next += 1;
            Self::write(apis, ci, h, address);
            self.moved.insert((ci, h));
            if k % sample_every == 0 {
                let at = started.elapsed().as_secs_f64();
                sample(&mut polls, dns, ci, h, address, Instant::now(), at);
            }
        }
        let writing_s = started.elapsed().as_secs_f64();
        let mut churned = collect(polls).await;
        (churned.changes, churned.writing_s) = (total, writing_s);
        churned
    }
}

/// A burst: every moved endpoint put back at once.
#[derive(Debug, serde::Serialize)]
pub struct Burst {
    /// Endpoints put back.
    pub moved: usize,
    /// How long writing them took.
    pub written_s: f64,
    /// From the first write until the sampled endpoints were answered.
    pub seen: Churned,
}

type Polls = JoinSet<(f64, Option<Duration>)>;

/// Polls, in every member but `ci`, the per-pod name of endpoint 0 of
/// headless service `h` of cluster `ci` until it answers `address`; `at`:
/// when in the phase it was written.
fn sample(
    polls: &mut Polls,
    dns: &[SocketAddr],
    ci: usize,
    h: usize,
    address: Ipv4Addr,
    since: Instant,
    at: f64,
) {
    let (ns, svc) = Layout::hl(h);
    let name = format!(
        "hl-{h}-0.{}.{svc}.{ns}.svc.clusterset.local.",
        Layout::cluster(ci)
    );
    for (_, &server) in dns.iter().enumerate().filter(|(m, _)| *m != ci) {
        let seen = until_answers(server, name.clone(), address, since);
        polls.spawn(async move { (at, seen.await) });
    }
}

/// The latencies of `polls`: sorted, and in the order written.
async fn collect(mut polls: Polls) -> Churned {
    let mut churned = Churned::default();
    while let Some(seen) = polls.join_next().await {
        match seen.expect("poll task") {
            (at, Some(d)) => churned.timeline.push((at, d.as_secs_f64() * 1e3)),
            (_, None) => churned.lost += 1,
        }
    }
    churned.timeline.sort_by(|a, b| a.0.total_cmp(&b.0));
    churned.latencies_ms = churned.timeline.iter().map(|(_, ms)| *ms).collect();
    churned.latencies_ms.sort_by(f64::total_cmp);
    churned
}

/// Polls `name` in one member until it answers `address`: the time since `written`.
async fn until_answers(
    dns: SocketAddr,
    name: String,
    address: Ipv4Addr,
    written: Instant,
) -> Option<Duration> {
    while written.elapsed() < SEEN_LIMIT {
        if single_address(dns, &name).await == Some(IpAddr::V4(address)) {
            return Some(written.elapsed());
        }
        tokio::time::sleep(poll_pause(written.elapsed())).await;
    }
    None
}
