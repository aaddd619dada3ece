//! The binary's command line, on the demo clusterset (`config/demo`).

use std::path::{Path, PathBuf};

use hickory_proto::rr::RecordType::A;
use tempfile::TempDir;

use crate::common::*;

/// A state file in a fresh temporary folder, so the demo folder stays clean.
fn scratch_state() -> (TempDir, String) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let file = dir.path().join("vips.json").display().to_string();
    (dir, file)
}

/// Runs `status` on the demo and returns stdout; it must succeed.
fn demo_status(extra: &[&str]) -> String {
    let (_dir, state) = scratch_state();
    let mut args = vec![
        "status",
        "--manifests",
        "config/demo",
        "--state-file",
        &state,
    ];
    args.extend_from_slice(extra);
    let output = run_binary(&args);
    assert!(
        output.status.success(),
        "status failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        !Path::new(&state).exists(),
        "status never writes the state file"
    );
    String::from_utf8(output.stdout).expect("UTF-8 output")
}

/// The whitespace-separated cells of the lines of `text`.
fn rows(text: &str) -> Vec<Vec<&str>> {
    text.lines()
        .map(|l| l.split_whitespace().collect())
        .collect()
}

fn has_row(rows: &[Vec<&str>], prefix: &[&str]) -> bool {
    rows.iter().any(|r| r.starts_with(prefix))
}

#[test]
fn status_prints_the_demo_imports_and_exports() {
    let text = demo_status(&[]);
    let rows = rows(&text);
    for prefix in [
        &["shop", "web", "ClusterSetIP"][..],
        &["shop", "api", "ClusterSetIP", "IPv4,IPv6"],
        &["shop", "db", "Headless"],
        &["shop", "cart", "ClusterSetIP"],
        &["shop", "legacy", "east", "False", "(InvalidServiceType)"],
        &[
            "shop",
            "cart",
            "west",
            "True",
            "True",
            "True",
            "(PortConflict)",
        ],
        // KEP-1645: every export of a conflicted service, the oldest included.
        &[
            "shop",
            "cart",
            "east",
            "True",
            "True",
            "True",
            "(PortConflict)",
        ],
    ] {
        assert!(
            has_row(&rows, prefix),
            "no row starting {prefix:?} in\n{text}"
        );
    }
    assert!(
        text.contains(" east(http:8080/TCP),west(metrics:9100/TCP) "),
        "each cluster of cart backs only the ports it defines as the import does:\n{text}"
    );
    assert!(
        !has_row(&rows, &["shop", "legacy", "ClusterSetIP"]),
        "legacy is not imported:\n{text}"
    );
}

#[test]
fn status_json_of_the_demo() {
    let status: serde_json::Value =
        serde_json::from_str(&demo_status(&["-o", "json"])).expect("JSON");
    let web = the_import(&status, "shop", "web");
    assert_eq!(
        web["ipFamilies"],
        serde_json::json!(["IPv4"]),
        "west is IPv4 only"
    );
    assert_eq!(import_clusters(web), ["east", "west"]);
    assert!(import(&status, "shop", "legacy").is_none());
    assert_eq!(the_import(&status, "shop", "db")["type"], "Headless");
    assert!(problems(&status).is_empty(), "{status:#}");
}

#[test]
fn a_missing_manifest_directory_is_an_error() {
    let missing = "/nonexistent/clusterset";
    let serve = ["serve", "--manifests", missing, "--listen", "127.0.0.1:0"];
    let status = ["status", "--manifests", missing];
    for args in [&serve[..], &status[..]] {
        let output = run_binary(args);
        assert!(!output.status.success(), "{args:?} must fail");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(missing), "{args:?}: {stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_answers_for_the_demo() {
    let (_dir, state) = scratch_state();
    let demo: PathBuf = [CRATE_ROOT, "config", "demo"].iter().collect();
    let binary = spawn_binary(&demo, &["--state-file", &state]).await;
    let web = resolve(binary.addr, &svc("web.shop"), A).await;
    assert!(is_vip(&web), "one 243.x address: {web:?}");
    let db = resolve(binary.addr, &svc("db.shop"), A).await;
    assert_eq!(
        db,
        ips(["10.1.1.10", "10.1.1.11", "10.2.1.10", "10.2.1.11"])
    );
    assert_eq!(
        resolve(binary.addr, &svc("legacy.shop"), A).await,
        Outcome::NxDomain
    );
}

/// stderr of a run that must fail with clap's usage status (2).
fn usage_error(args: &[&str]) -> String {
    let output = run_binary(args);
    assert_eq!(output.status.code(), Some(2), "{args:?} must be refused");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn kubernetes_flags_without_kubernetes_mode_are_an_error() {
    let stderr = usage_error(&[
        "serve",
        "--kubeconfig",
        "/nowhere",
        "--broker-kubeconfig",
        "/x",
    ]);
    assert!(
        stderr.contains("--kubeconfig is a flag of Kubernetes mode")
            && stderr.contains("add --source kubernetes"),
        "{stderr}"
    );
    let (dir, _) = scratch_state();
    let config = dir.path().join("c.yaml");
    // (`cluster-id` is not one: embedded mode reads it too, see tests/it/locality.rs.)
    std::fs::write(&config, "lease-namespace: dns\n").unwrap();
    let stderr = usage_error(&["check", "--config", config.to_str().unwrap()]);
    assert!(
        stderr.contains("`lease-namespace` in the --config file is a flag of Kubernetes mode")
            && stderr.contains("remove the `lease-namespace` key"),
        "{stderr}"
    );
    // A file may spell out the defaults of the other mode (as
    // config/clusterset-dns.yaml does): they change nothing.
    std::fs::write(
        &config,
        "pod-ips: true\nbroker-namespace: clusterset-broker\n",
    )
    .unwrap();
    let output = run_binary(&["check", "--config", config.to_str().unwrap()]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn manifest_flags_in_kubernetes_mode_are_an_error() {
    for flag in ["--manifests", "--state-file"] {
        let stderr = usage_error(&["serve", "--source", "kubernetes", flag, "config/demo"]);
        assert!(
            stderr.contains(&format!("{flag} has no effect with --source kubernetes")),
            "{stderr}"
        );
    }
}

#[test]
fn a_metrics_port_taken_is_a_start_up_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let port = taken.local_addr().unwrap().to_string();
    let (_dir, state) = scratch_state();
    let output = run_binary(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        &port,
        "--state-file",
        &state,
    ]);
    assert_eq!(output.status.code(), Some(1), "the server must not run on");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!(
            "cannot serve /metrics, /healthz and /readyz on {port}"
        )) && stderr.contains("--metrics-listen"),
        "{stderr}"
    );
}

/// Issue 47: an IPv6 VIP pool no ServiceCIDR can serve (shorter than /64)
/// with `--derived-services clusterset` is refused at start, naming the flag.
#[test]
fn a_vip_pool_no_servicecidr_can_hold_is_an_error_in_clusterset_mode() {
    let args = [
        "serve",
        "--source",
        "kubernetes",
        "--derived-services",
        "clusterset",
    ];
    let output = run_binary(&args);
    assert!(!output.status.success(), "the default /48 must be refused");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--vip-pool-v6 fd00:c5e7::/48 is shorter than /64"),
        "{stderr}"
    );
}
