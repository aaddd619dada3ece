//! Kubernetes mode on real control planes (ARCHITECTURE.md, "Tests on a
//! real control plane"): kube-apiserver, etcd and kube-controller-manager
//! built from their Go modules, clusterset-dns deployed from
//! `config/kubernetes` with least-privilege ServiceAccount tokens, and the
//! scenarios of the fake-server tests run on them.
//!
//! The control planes take half a minute each to start, so one set serves
//! every scenario, in order, in this process: a harness of its own (no
//! libtest), printing libtest's lines. `cargo test --test real_control_plane
//! -- WORD` runs the scenarios whose names contain WORD (the clusterset is
//! started either way). Needs `bash tests/control-plane/build.sh` first; without
//! its binaries the suite skips, and fails under CI. The one argument
//! `bench-coredns` runs the benchmark of `bench/coredns.sh` instead.

mod bench_coredns;
mod broker_trust;
mod check;
mod clusterset;
mod conformance;
mod containers;
mod control_plane;
mod coredns_side;
mod crd_versions;
mod dataplane;
mod derived;
mod endpoints;
mod exports;
mod faults;
mod helm;
mod image;
mod ownership;
mod pods;
mod prometheus;
mod security;
mod upgrade;
mod workloads;

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Result;
use futures::FutureExt;

use clusterset::Clusterset;

/// Longest a scenario may run before it fails (its waits are shorter),
/// unless the list gives it a limit of its own.
const SCENARIO_LIMIT: Duration = Duration::from_secs(300);

type Scenario = for<'a> fn(&'a mut Clusterset) -> Pin<Box<dyn Future<Output = Result<()>> + 'a>>;

/// `(name, scenario, limit)` for each `path` or `path => seconds`.
macro_rules! scenarios {
    ($($path:path $(=> $secs:literal)?),* $(,)?) => {
        vec![$((
            stringify!($path),
            (|set| Box::pin($path(set))) as Scenario,
            limit!($($secs)?),
        )),*]
    };
}

macro_rules! limit {
    () => {
        SCENARIO_LIMIT
    };
    ($secs:literal) => {
        Duration::from_secs($secs)
    };
}

/// A scenario that could not run here and says why (counted as ignored,
/// as libtest counts a skipped test).
#[derive(Debug)]
pub struct Skipped(pub String);

impl std::fmt::Display for Skipped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "skipped: {}", self.0)
    }
}

impl std::error::Error for Skipped {}

fn main() -> ExitCode {
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let missing: Vec<&str> = control_plane::BINARIES
        .into_iter()
        .filter(|b| !control_plane::bin_dir().join(b).exists())
        .collect();
    if !missing.is_empty() {
        let message = format!(
            "real control plane: {} missing in {} (build them with `bash tests/control-plane/build.sh`)",
            missing.join(", "),
            control_plane::bin_dir().display()
        );
        if std::env::var_os("CI").is_some() {
            eprintln!("error: {message}");
            return ExitCode::FAILURE;
        }
        eprintln!("skipped: {message}");
        println!("test result: ok. 0 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out");
        return ExitCode::SUCCESS;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(run(&filters))
}

/// `bench-coredns`: the clusterset, then the benchmark instead of the scenarios.
async fn bench(started: Instant) -> ExitCode {
    let result = async {
        let mut set = Clusterset::start().await?;
        eprintln!("clusterset up in {:.0?}", started.elapsed());
        bench_coredns::run(&mut set).await
    };
    match result.await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(filters: &[String]) -> ExitCode {
    let all: Vec<(&str, Scenario, Duration)> = scenarios![
        conformance::the_upstream_conformance_suite_passes => 1500,
        security::members_use_their_own_service_accounts,
        security::the_endpointslice_policy_admits_only_mcs_slices,
        security::the_derived_service_policy_admits_only_derived_services,
        security::the_servicecidr_lets_derived_services_pin_the_vips,
        helm::a_member_and_the_broker_installed_with_the_chart,
        exports::import_lives_while_any_cluster_exports,
        derived::every_member_pins_the_clusterset_vip,
        derived::a_taken_vip_falls_back_to_a_clusterip_of_the_member,
        derived::per_cluster_mode_answers_the_members_own_clusterip,
        endpoints::headless_answers_follow_pod_readiness,
        exports::differing_ports_are_a_port_conflict,
        broker_trust::export_age::no_member_makes_its_export_older,
        broker_trust::export_age::a_restored_broker_keeps_the_oldest_export,
        exports::ip_families_are_intersected,
        exports::concurrent_exports_never_share_a_vip,
        coredns_side::coredns_multicluster_answers_side_by_side,
        coredns_side::a_cluster_coredns_forwards_clusterset_local,
        ownership::an_import_deleted_by_hand_is_restored,
        ownership::a_namespace_deleted_in_a_member,
        faults::the_broker_namespace_emptied_is_rebuilt,
        faults::the_broker_restarted_past_compaction,
        faults::the_leader_killed_hands_over,
        faults::a_dead_member_leaves_the_answers,
        prometheus::prometheus_pages_for_a_dead_member => 240,
        crd_versions::every_crd_release_in_one_clusterset,
        crd_versions::a_crd_serving_no_version_loses_no_export,
        upgrade::members_upgraded_one_at_a_time_lose_nothing,
        image::a_replica_runs_from_the_image,
        broker_trust::vip_hijack::no_member_moves_an_agreed_vip,
        broker_trust::impersonation::no_member_writes_as_another_or_takes_a_protected_name,
        broker_trust::liveness::no_member_declares_a_live_cluster_dead,
        broker_trust::deletion::no_member_deletes_another_members_records,
        broker_trust::addresses::no_unroutable_address_reaches_an_answer,
        broker_trust::flood::a_flood_of_records_is_capped_and_changes_no_other_answer,
        dataplane::routes::kube_proxy_routes_a_pinned_vip_between_members,
        dataplane::routes::clusterset_vips_route_to_every_exporting_cluster,
        dataplane::routes::per_cluster_vips_route_to_every_exporting_cluster,
    ];
    let chosen: Vec<_> = all
        .into_iter()
        .filter(|(name, _, _)| {
            filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str()))
        })
        .collect();
    let started = Instant::now();
    if filters == ["bench-coredns"] {
        return bench(started).await;
    }
    println!("\nrunning {} tests", chosen.len());
    let mut set = match Clusterset::start().await {
        Ok(set) => set,
        Err(e) => {
            eprintln!("error: the clusterset did not start: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    eprintln!("clusterset up in {:.0?}", started.elapsed());
    let (mut passed, mut ignored, mut failed) = (0, 0, Vec::new());
    for (name, scenario, limit) in chosen {
        let began = Instant::now();
        // A panic (an assertion of the shared DNS client) fails the
        // scenario, not the run.
        let attempt = AssertUnwindSafe(tokio::time::timeout(limit, scenario(&mut set)));
        let outcome = match attempt.catch_unwind().await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(anyhow::anyhow!("not done within {limit:?}")),
            Err(panic) => Err(anyhow::anyhow!(
                "panicked: {}",
                panic
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| panic.downcast_ref::<&str>().copied())
                    .unwrap_or("(no message)")
            )),
        }
        .and_then(|()| set.check_alive())
        .and_then(|()| {
            let refusals = set.refusals();
            anyhow::ensure!(
                refusals.is_empty(),
                "the API servers refused clusterset-dns (RBAC, admission or schema):\n{}",
                refusals.join("\n")
            );
            Ok(())
        });
        match outcome {
            Ok(()) => {
                passed += 1;
                println!("test {name} ... ok ({:.1?})", began.elapsed());
            }
            Err(e) if e.is::<Skipped>() => {
                ignored += 1;
                println!("test {name} ... ignored");
                eprintln!("\n!!!!! {e} !!!!!\n");
            }
            Err(e) => {
                println!("test {name} ... FAILED ({:.1?})", began.elapsed());
                eprintln!("---- {name} ----\n{e:#}\n");
                failed.push(name);
            }
        }
    }
    let status = if failed.is_empty() { "ok" } else { "FAILED" };
    if !failed.is_empty() {
        let kept = set.dir.path().to_owned();
        eprintln!("failures: {}", failed.join(", "));
        eprintln!("logs kept in {}", kept.display());
        drop(set.dir.keep());
    }
    println!(
        "\ntest result: {status}. {passed} passed; {} failed; {ignored} ignored; 0 measured; 0 filtered out; finished in {:.2}s\n",
        failed.len(),
        started.elapsed().as_secs_f64()
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
