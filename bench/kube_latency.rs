//! Kubernetes mode: how long from a change in one member cluster's API server
//! to the new answer in DNS, in the same cluster and in the others.
//!
//! Three member clusters and a broker (the in-repo fake API servers, real
//! HTTP, the real kube client), one clusterset-dns per member, all in this
//! process. Each round exports a new ClusterSetIP service from one member
//! (round robin) and polls every member's DNS every 0.5 ms until the name
//! resolves to its VIP; then an EndpointSlice of a headless service is edited
//! and every member is polled for the new address. Prints median, p90, p99
//! and max per path. `cargo bench --bench kube_latency [-- ROUNDS]`.

use std::time::{Duration, Instant};

use hickory_proto::rr::RecordType;
use test_support::kube_clusterset::KubeClusterset;
use test_support::{Outcome, cluster_ip, ep, headless, is_vip, resolve, slice};

const IDS: [&str; 3] = ["east", "north", "west"];
const POLL: Duration = Duration::from_micros(500);
const LIMIT: Duration = Duration::from_secs(10);

/// Polls every member until `done` holds for its answer; the time each took.
async fn until_everywhere(
    set: &KubeClusterset,
    name: &str,
    started: Instant,
    done: impl Fn(&Outcome) -> bool,
) -> Vec<Duration> {
    let mut took = vec![None; IDS.len()];
    while took.iter().any(Option::is_none) {
        assert!(
            started.elapsed() < LIMIT,
            "{name} not served everywhere in {LIMIT:?}"
        );
        for (i, id) in IDS.iter().enumerate() {
            if took[i].is_none() && done(&resolve(set.member(id).dns(), name, RecordType::A).await)
            {
                took[i] = Some(started.elapsed());
            }
        }
        tokio::time::sleep(POLL).await;
    }
    took.into_iter().flatten().collect()
}

fn report(what: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "| {what} | {} | {:.1} | {:.1} | {:.1} | {:.1} |",
        samples.len(),
        ms(at(0.5)),
        ms(at(0.9)),
        ms(at(0.99)),
        ms(at(1.0))
    );
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let rounds: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(200);
    let set = KubeClusterset::start(&[("east", "IPv4"), ("north", "IPv4"), ("west", "IPv4")]).await;
    for member in &set.members {
        member.api.create_namespace("bench");
    }
    let (mut local, mut remote) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let from = round % IDS.len();
        let name = format!("svc-{round}");
        let service = cluster_ip(
            "bench",
            &name,
            &[&format!("10.{from}.{}.{}", round / 250, round % 250 + 1)],
        );
        let started = Instant::now();
        set.apply(IDS[from], service.exported());
        let took = until_everywhere(
            &set,
            &format!("{name}.bench.svc.clusterset.local."),
            started,
            is_vip,
        )
        .await;
        for (i, t) in took.into_iter().enumerate() {
            if i == from {
                local.push(t)
            } else {
                remote.push(t)
            }
        }
    }
    let db = headless("bench", "db", &["IPv4"]);
    set.apply("east", db.exported());
    let (mut slice_local, mut slice_remote) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let address = format!("10.9.{}.{}", round / 250, round % 250 + 1);
        let started = Instant::now();
        set.apply("east", [slice("bench", "db-east", "db", &[ep(&address)])]);
        let want: Outcome = Outcome::Ips([address.parse().unwrap()].into());
        let took = until_everywhere(&set, "db.bench.svc.clusterset.local.", started, |o| {
            *o == want
        })
        .await;
        slice_local.push(took[0]);
        slice_remote.extend(&took[1..]);
    }
    println!("| change → answer | samples | median ms | p90 ms | p99 ms | max ms |");
    println!("|---|---|---|---|---|---|");
    report("export, same cluster", local);
    report("export, other clusters", remote);
    report("EndpointSlice edit, same cluster", slice_local);
    report("EndpointSlice edit, other clusters", slice_remote);
}
