//! The bench's settings, from the environment (see bench/README.md).

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use crate::layout::Layout;

/// The release binary Cargo built beside this benchmark.
const BIN: &str = env!("CARGO_BIN_EXE_clusterset-dns");

pub struct Params {
    pub lay: Layout,
    /// Members that run through every phase (`RUNNING`, default: every
    /// cluster): clusters `c1..cR`. The others only publish beforehand
    /// (`publish.rs`), `wave` at a time.
    pub running: usize,
    pub wave: usize,
    /// Names probed per kind.
    pub probes: usize,
    /// Each churn rate runs this long.
    pub churn: Duration,
    /// Endpoint changes per second, one churn phase each.
    pub rates: Vec<u64>,
    /// Steady state length: several 5 s slices of the members' spread resync.
    pub steady: Duration,
    /// A start (to serving and quiet writes) may take this long.
    pub start_limit: Duration,
    /// No writes for this long after serving: the start is over.
    pub quiet: Duration,
    /// Hard limit of the whole run.
    pub limit: Duration,
    pub work: PathBuf,
    /// The clusterset-dns binary the members run (`MEMBER_BIN`; default: the
    /// bench's, built from this tree): a build kept from before a change,
    /// measured in the same hour as the one after it.
    pub member_bin: String,
    /// A command the first member runs under (`PROFILE_FIRST`, split at
    /// spaces, `{run}` replaced by the start's name, the member's own
    /// command line after it: a heap profiler), and the binary it runs
    /// (`PROFILE_BIN`; default: the bench's).
    pub profile_first: Option<(Vec<String>, String)>,
    /// `--derived-services` of the members (`DERIVED`: `none`, the default,
    /// or `clusterset`), issue 47's cost at scale; `None` for `none`, which
    /// passes no flag, so that a `MEMBER_BIN` from before the flag still runs.
    pub derived: Option<String>,
}

/// `$name` parsed, or `default`; a clear panic on a bad value.
fn env_or<T: FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a valid value")),
        _ => default,
    }
}

fn secs(name: &str, default: u64) -> Duration {
    Duration::from_secs(env_or(name, default))
}

impl Params {
    pub fn from_env() -> Self {
        let rates: String = env_or("CHURN_RATES", "10,100".to_owned());
        let lay = Layout::new(
            env_or("SERVICES", 100_000),
            env_or("HEADLESS", 10_000),
            env_or("ENDPOINTS", 34),
            env_or("CSIP_ENDPOINTS", 0),
            env_or("CLUSTERS", 3),
        );
        let running = env_or("RUNNING", lay.clusters);
        assert!(
            (2..=lay.clusters).contains(&running),
            "RUNNING={running}: from 2 (a change needs another member to reach) to CLUSTERS={}",
            lay.clusters
        );
        Self {
            lay,
            running,
            wave: env_or("WAVE", 8).max(1),
            probes: env_or("PROBES", 20),
            churn: secs("CHURN_SECONDS", 30),
            rates: rates
                .split(',')
                .map(|r| {
                    r.trim()
                        .parse()
                        .expect("CHURN_RATES: numbers, comma-separated")
                })
                .collect(),
            steady: secs("STEADY_SECONDS", 70),
            start_limit: secs("START_LIMIT", 900),
            quiet: secs("QUIET_SECONDS", 5),
            limit: secs("LIMIT_SECONDS", 3600),
            work: env_or("WORK", PathBuf::from("/tmp/clusterset-bench/kube-scale")),
            member_bin: env_or("MEMBER_BIN", BIN.to_owned()),
            profile_first: std::env::var("PROFILE_FIRST")
                .ok()
                .filter(|w| !w.trim().is_empty())
                .map(|w| {
                    let bin = env_or("PROFILE_BIN", BIN.to_owned());
                    (w.split_whitespace().map(str::to_owned).collect(), bin)
                }),
            derived: derived(),
        }
    }
}

/// `DERIVED`: the members' `--derived-services` mode, `None` for `none`.
/// `per-cluster` is refused: its answers are the member's own ClusterIPs,
/// which the probes do not expect (a VIP of the pool, the same in every
/// member), and the fake API server's allocator is one /16 without duplicate
/// checks, fewer addresses than the 100k services of a full-size run.
fn derived() -> Option<String> {
    match env_or("DERIVED", "none".to_owned()).as_str() {
        "none" => None,
        "clusterset" => Some("clusterset".to_owned()),
        other => panic!(
            "DERIVED={other:?}: none or clusterset (bench/README.md says why not per-cluster)"
        ),
    }
}
