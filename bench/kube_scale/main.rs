//! Kubernetes mode at clusterset scale (issue 13): one clusterset-dns process
//! per member cluster against in-repo fake API servers (one per member, one
//! broker, in this process) holding the clusterset of `bench/scale.sh`.
//! Phases: fresh start on an empty broker (or, with fewer members running
//! than clusters, on one the other clusters published beforehand), steady
//! state, endpoint churn at each rate, restart on the populated broker. Per member: time to serve every
//! probed name, memory, CPU, API requests and bytes (own API server and
//! broker, told apart by bearer token), writes; what the broker stores.
//! Markdown tables on stdout, raw numbers in `$WORK`. Run by
//! `bench/kube_scale.sh` (see bench/README.md for the method and the
//! environment variables).

mod apis;
mod churn;
mod derived;
mod layout;
mod member;
mod params;
mod phases;
mod probe;
mod publish;
mod report;

use std::sync::Arc;
use std::time::{Duration, Instant};

use apis::ApiServers;
use churn::Churn;
use layout::Layout;
use member::{BROKER_NAMESPACE, ProcStats};
use params::Params;

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let p = Params::from_env();
    std::fs::create_dir_all(&p.work).unwrap_or_else(|e| panic!("{}: {e}", p.work.display()));
    watchdog(p.limit);
    let started = Instant::now();
    let lay = p.lay;
    println!(
        "## Kubernetes mode at scale: {lay:?}, members running: {}",
        p.running
    );
    let apis = Arc::new(ApiServers::start(p.running).await);
    let mut loaded = report::Table::new(
        "Preloaded member API servers",
        &["member", "objects", "JSON MiB", "load s"],
    );
    for ci in 0..p.running {
        let took = apis.preload(&lay, ci);
        let stored = apis.members[ci].stored(None);
        loaded.row(vec![
            Layout::cluster(ci),
            stored.iter().map(|s| s.objects).sum::<usize>().to_string(),
            report::mib(stored.iter().map(|s| s.json_bytes).sum()),
            format!("{:.1}", took.as_secs_f64()),
        ]);
    }
    loaded.print();
    let mut raw = serde_json::Map::new();
    let fresh_title = if p.running < lay.clusters {
        let waves = publish::publish(&apis, &p).await;
        raw.insert("published".into(), serde_json::to_value(&waves).unwrap());
        api_servers_line(started);
        "Fresh start of the running members (broker: the clusters published beforehand)"
    } else {
        "Fresh start (empty broker)"
    };
    let kubeconfigs: Vec<_> = (0..p.running)
        .map(|ci| apis.kubeconfigs(ci, &p.work))
        .collect();
    let probes = probe::sample(&lay, p.probes);

    let fresh = phases::start(&apis, &kubeconfigs, &probes, &p, "fresh").await;
    fresh.print(fresh_title, &p);
    raw.insert(
        "fresh".into(),
        serde_json::to_value(&fresh.results).unwrap(),
    );
    if p.derived.is_some() {
        let counted = derived::count(&apis, &fresh.results, "fresh").await;
        raw.insert(
            "derived_fresh".into(),
            serde_json::to_value(&counted).unwrap(),
        );
    }
    let broker = apis.broker.stored(Some(BROKER_NAMESPACE));
    phases::print_broker(&broker);
    raw.insert("broker".into(), serde_json::to_value(&broker).unwrap());
    let member_store = apis.members[0].stored(None);
    phases::print_member_store(&member_store);
    raw.insert(
        "member_c1".into(),
        serde_json::to_value(&member_store).unwrap(),
    );
    api_servers_line(started);

    let members = fresh.members;
    let steady = phases::steady(&apis, &members, p.steady).await;
    raw.insert("steady".into(), serde_json::to_value(&steady).unwrap());
    api_servers_line(started);

    let mut churn = Churn::new(lay, p.running);
    let churned = phases::churn(&apis, &members, &mut churn, &probes, &p).await;
    raw.insert("churn".into(), serde_json::to_value(&churned).unwrap());
    api_servers_line(started);

    phases::stop(members);
    let restart = phases::start(&apis, &kubeconfigs, &probes, &p, "restart").await;
    restart.print("Restart (populated broker and member API servers)", &p);
    raw.insert(
        "restart".into(),
        serde_json::to_value(&restart.results).unwrap(),
    );
    if p.derived.is_some() {
        let counted = derived::count(&apis, &restart.results, "restart").await;
        raw.insert(
            "derived_restart".into(),
            serde_json::to_value(&counted).unwrap(),
        );
    }
    api_servers_line(started);
    phases::stop(restart.members);

    report::save(&p.work.join("kube_scale.json"), &raw);
    println!(
        "\nRaw numbers and member logs: {} ({:.0} s in all)",
        p.work.display(),
        started.elapsed().as_secs_f64()
    );
}

/// The API servers' own share (this process) so far: whether they kept up.
fn api_servers_line(since: Instant) {
    let me = ProcStats::own();
    println!(
        "\nFake API servers (this process): {:.0} MiB resident, peak {:.0} MiB, {:.0} s CPU in {:.0} s",
        me.rss_mib,
        me.peak_mib,
        me.cpu_s,
        since.elapsed().as_secs_f64()
    );
}

/// Ends everything (members killed) once `limit` has passed (exit status 2)
/// or on SIGINT/SIGTERM (130).
fn watchdog(limit: Duration) {
    std::thread::spawn(move || {
        std::thread::sleep(limit);
        eprintln!("kube_scale: overall limit of {limit:?} reached, stopping");
        member::kill_all();
        std::process::exit(2);
    });
    tokio::spawn(async {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        eprintln!("kube_scale: interrupted, stopping");
        member::kill_all();
        std::process::exit(130);
    });
}
