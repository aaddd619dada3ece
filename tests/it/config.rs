//! `--config FILE`, `check` (in both modes) and the log flags, through the
//! real binary.

use std::path::Path;
use std::process::Output;

use clusterset_dns::cli::config_file;
use clusterset_dns::cli::{Command as CliCommand, SourceKind};
use serde_json::Value;
use tempfile::TempDir;
use test_support::kube_clusterset::BROKER_NAMESPACE;

use crate::common::{run_binary, run_binary_with, the_import};

const CRATE_ROOT: &str = env!("CARGO_MANIFEST_DIR");
const EXAMPLE: &str = "config/clusterset-dns.yaml";

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A scratch folder with `config.yaml` holding `yaml`; returns it and the file's path.
fn config(yaml: &str) -> (TempDir, String) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, yaml).expect("config written");
    (dir, path.display().to_string())
}

/// A VIP state file in `dir`, so the demo folder stays clean.
fn state_in(dir: &TempDir) -> String {
    dir.path().join("vips.json").display().to_string()
}

/// A manifest directory in `dir` with one cluster and one unreadable file.
fn broken_manifests(dir: &TempDir) -> String {
    let cluster = dir.path().join("manifests").join("east");
    std::fs::create_dir_all(&cluster).expect("cluster folder");
    std::fs::write(cluster.join("broken.yaml"), "kind: [Service\n").expect("manifest written");
    dir.path().join("manifests").display().to_string()
}

#[test]
fn an_unknown_key_fails_naming_it_and_the_allowed_ones() {
    let (_dir, file) = config("listen: 127.0.0.1:0\nlistn: 127.0.0.1:5300\n");
    let output = run_binary(&["serve", "--config", &file]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let err = stderr(&output);
    assert!(
        err.contains(&format!(
            "{file}: unknown key \"listn\"; allowed: manifests, ip-families"
        )),
        "{err}"
    );
    for key in ["listen", "zone", "ttl", "cluster-targeting", "log-format"] {
        assert!(err.contains(key), "{key} is listed as allowed: {err}");
    }
    let allowed = err.split("allowed: ").nth(1).unwrap_or_default();
    assert!(
        !allowed.trim().split(", ").any(|k| k == "config"),
        "`config` is no key: {err}"
    );
}

#[test]
fn a_bad_value_fails_naming_the_key_the_value_and_what_is_allowed() {
    let cases = [
        (
            "serve",
            "ttl: five\n",
            "ttl: invalid value \"five\": invalid digit found in string; expected a whole number of seconds",
        ),
        (
            "status",
            "ip-families: [IPv4, IPv7]\n",
            "ip-families: invalid value [\"IPv4\", \"IPv7\"]: unknown IP family \"IPv7\": expected IPv4 or IPv6",
        ),
        (
            "serve",
            "log-format: yaml\n",
            "log-format: invalid value \"yaml\"; allowed: text, json",
        ),
        (
            "check",
            "cluster-targeting: 1\n",
            "cluster-targeting: invalid value \"1\"; allowed: true, false",
        ),
        (
            "status",
            "listen: 127.0.0.1\n",
            "listen: invalid value \"127.0.0.1\": invalid socket address syntax",
        ),
        (
            "status",
            "output: yaml\n",
            "output: invalid value \"yaml\"; allowed: text, json",
        ),
        ("serve", "ttl: [5\n", "not valid YAML"),
    ];
    for (command, yaml, expected) in cases {
        let (_dir, file) = config(yaml);
        let output = run_binary(&[command, "--config", &file]);
        assert_eq!(output.status.code(), Some(2), "{yaml}: {}", stderr(&output));
        let err = stderr(&output);
        assert!(
            err.contains(&format!("{file}: {expected}")),
            "{yaml}: {err}"
        );
    }
}

/// `status -o json` with `args`, which must succeed.
fn status_json(args: &[&str]) -> Value {
    let output = run_binary(args);
    assert!(output.status.success(), "{args:?}: {}", stderr(&output));
    serde_json::from_slice(&output.stdout).expect("status prints JSON")
}

#[test]
fn flags_override_the_file() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let state = state_in(&dir);
    let (_cfg, file) = config(&format!(
        "manifests: config/demo\nip-families: [IPv4]\nstate-file: {state}\noutput: json\nttl: 7\n"
    ));
    let api = |status: &Value| the_import(status, "shop", "api")["localFamilies"].clone();
    let from_file = status_json(&["status", "--config", &file]);
    assert_eq!(
        api(&from_file),
        serde_json::json!(["IPv4"]),
        "the file's families"
    );
    let overridden = status_json(&["status", "--config", &file, "--ip-families", "IPv6"]);
    assert_eq!(
        api(&overridden),
        serde_json::json!(["IPv6"]),
        "the flag wins"
    );
    let before = status_json(&["status", "--ip-families", "IPv6", "--config", &file]);
    assert_eq!(api(&before), serde_json::json!(["IPv6"]), "wherever it is");
    let text = run_binary(&["status", "--config", &file, "-o", "text"]);
    assert!(text.status.success(), "{}", stderr(&text));
    assert!(
        String::from_utf8_lossy(&text.stdout).starts_with("NAMESPACE"),
        "-o text beats output: json"
    );
    assert!(
        !Path::new(&state).exists(),
        "status never writes the state file"
    );
}

#[test]
fn check_accepts_the_example_file() {
    let output = run_binary(&["check", "--config", EXAMPLE]);
    assert!(output.status.success(), "{}", stderr(&output));
    let out = String::from_utf8_lossy(&output.stdout);
    assert!(out.contains(&format!("{EXAMPLE}: ok")), "{out}");
    assert!(out.contains("config/demo: "), "{out}");
}

/// The SOA serial file next to the VIP state file: one that holds no serial
/// stops `serve` at start and is a problem for `check`, both naming it.
#[test]
fn a_broken_serial_file_is_named_by_check_and_stops_serve() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let state = state_in(&dir);
    std::fs::write(dir.path().join("vips.serial"), "yesterday\n").expect("written");
    let output = run_binary(&["check", "--state-file", &state]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("vips.serial does not hold a serial"),
        "{}",
        stderr(&output)
    );
    let output = run_binary(&[
        "serve",
        "--state-file",
        &state,
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "127.0.0.1:0",
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("vips.serial does not hold a serial"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn check_fails_on_a_missing_or_broken_manifest_directory() {
    let (dir, file) = config("manifests: /nonexistent/clusterset\n");
    let output = run_binary(&["check", "--config", &file]);
    assert!(!output.status.success());
    let err = stderr(&output);
    assert!(
        err.contains("manifest directory /nonexistent/clusterset does not exist"),
        "{err}"
    );

    let manifests = broken_manifests(&dir);
    let state = state_in(&dir);
    let output = run_binary(&["check", "--manifests", &manifests, "--state-file", &state]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let err = stderr(&output);
    assert!(err.contains("1 problem(s)"), "{err}");
    assert!(err.contains("broken.yaml"), "{err}");
    assert!(
        !Path::new(&state).exists(),
        "check never writes the state file"
    );

    let (_cfg, file) = config("ttl: -5\n");
    let output = run_binary(&["check", "--config", &file]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
}

/// `check --source kubernetes` reaches both API servers and reports what
/// would keep `serve` from working, without writing anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_reaches_the_api_servers() {
    let (member, broker) = (
        fake_apiserver::FakeApiServer::start().await,
        fake_apiserver::FakeApiServer::start().await,
    );
    let dir = tempfile::tempdir().unwrap();
    let (local, shared) = (dir.path().join("member"), dir.path().join("broker"));
    member.write_kubeconfig(&local, "member").unwrap();
    broker.write_kubeconfig(&shared, "broker").unwrap();
    let args: Vec<String> = [
        "check",
        "--source",
        "kubernetes",
        "--cluster-id",
        "east",
        "--kubeconfig",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .chain([local.display().to_string(), "--broker-kubeconfig".into()])
    .chain([shared.display().to_string()])
    .collect();
    let check = |args: Vec<String>| {
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            run_binary(&args)
        })
    };
    let output = check(args.clone()).await.unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("namespace clusterset-broker does not exist"),
        "{stderr}"
    );

    broker.create_namespace(BROKER_NAMESPACE);
    let output = check(args.clone()).await.unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.contains("local cluster east: ServiceExports readable (v1beta1)"),
        "v1beta1 is read where served: {stdout}"
    );
    assert!(stdout.contains("0 ServiceImports"), "{stdout}");
    assert_eq!(
        member.request_count(fake_apiserver::Verb::Create),
        0,
        "check writes nothing"
    );

    // A CRD of a release before mcs-api v0.5 serves v1alpha1 only: read there.
    member.unregister("multicluster.x-k8s.io", "v1beta1", "serviceexports");
    let output = check(args.clone()).await.unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.contains("local cluster east: ServiceExports readable (v1alpha1)"),
        "{stdout}"
    );

    // A CRD serving no version is named, with the version looked for.
    member.unregister("multicluster.x-k8s.io", "v1alpha1", "serviceexports");
    let output = check(args).await.unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("serviceexports.multicluster.x-k8s.io/v1beta1 is not served"),
        "{stderr}"
    );
}

#[test]
fn the_example_file_sets_every_flag_of_serve_to_its_default() {
    let text = std::fs::read_to_string(Path::new(CRATE_ROOT).join(EXAMPLE)).expect("example");
    let example: serde_json::Map<String, Value> =
        serde_saphyr::from_str(&text).expect("a YAML mapping");
    let mut keys: Vec<&String> = example.keys().collect();
    let mut flags = config_file::allowed_keys("serve");
    keys.sort();
    flags.sort();
    assert_eq!(
        keys,
        flags.iter().collect::<Vec<_>>(),
        "{EXAMPLE} must have one key per flag of `serve`"
    );

    let serve = |argv: &[&str]| {
        let invocation = config_file::parse(argv.iter().copied()).expect("parses");
        let Some(CliCommand::Serve(mut args)) = invocation.cli.command else {
            panic!("serve expected")
        };
        args.config = None;
        (args, invocation.cli.log_level, invocation.cli.log_format)
    };
    let previous = std::env::current_dir().expect("cwd");
    assert_eq!(
        previous,
        Path::new(CRATE_ROOT),
        "tests run from the crate root"
    );
    let (from_file, level, format) = serve(&["x", "serve", "--config", EXAMPLE]);
    let (defaults, _, default_format) = serve(&["x", "serve"]);
    assert_eq!(
        format!("{from_file:?}"),
        format!("{defaults:?}"),
        "{EXAMPLE} holds the defaults"
    );
    assert_eq!(level.as_deref(), Some("info"));
    assert_eq!(format, default_format);
}

/// `status` on a manifest directory with a broken file, which logs a warning.
fn status_logs(dir: &TempDir, extra: &[&str], rust_log: Option<&str>) -> String {
    let manifests = broken_manifests(dir);
    let state = state_in(dir);
    let mut args = vec!["status", "--manifests", &manifests, "--state-file", &state];
    args.extend_from_slice(extra);
    let output = run_binary_with(&args, rust_log);
    assert!(output.status.success(), "{}", stderr(&output));
    stderr(&output)
}

#[test]
fn json_logs_are_one_object_per_line() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let err = status_logs(&dir, &["--log-format", "json"], None);
    let lines: Vec<Value> = err
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: not JSON: {l}")))
        .collect();
    let warning = lines
        .iter()
        .find(|l| l["level"] == "WARN")
        .unwrap_or_else(|| panic!("a warning is logged: {err}"));
    let message = warning["message"].as_str().expect("a message field");
    assert!(message.contains("broken.yaml"), "{warning}");
    assert!(warning["timestamp"].is_string(), "{warning}");
    assert!(warning["target"].is_string(), "{warning}");

    let (_cfg, file) = config("log-format: json\n");
    let err = status_logs(&dir, &["--config", &file], None);
    assert!(
        err.lines()
            .all(|l| serde_json::from_str::<Value>(l).is_ok()),
        "log-format from the file: {err}"
    );
    let text = status_logs(&dir, &[], None);
    assert!(text.contains("WARN") && !text.starts_with('{'), "{text}");
}

#[test]
fn log_level_precedence_command_line_then_rust_log_then_file() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (_cfg, quiet) = config("log-level: error\n");
    let warns = |extra: &[&str], rust_log| status_logs(&dir, extra, rust_log).contains("WARN");
    assert!(warns(&[], None), "info by default");
    assert!(!warns(&["--config", &quiet], None), "the file's level");
    assert!(
        warns(&["--config", &quiet], Some("warn")),
        "RUST_LOG beats the file"
    );
    assert!(!warns(&[], Some("error")), "RUST_LOG");
    assert!(
        warns(&["--log-level", "warn"], Some("error")),
        "the command line beats RUST_LOG"
    );
    assert!(
        !warns(&["--log-level", "error", "--config", &quiet], Some("warn")),
        "the command line beats RUST_LOG and the file"
    );
}

/// The documents of a file under config/kubernetes.
fn kubernetes(file: &str) -> Vec<Value> {
    let path = Path::new(CRATE_ROOT).join("config/kubernetes").join(file);
    let text = std::fs::read_to_string(&path).expect("manifest file");
    serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn of_kind<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

#[test]
fn the_deployment_runs_kubernetes_mode_with_its_config() {
    let deployment_file = kubernetes("deployment.yaml");
    let deployment = of_kind(&deployment_file, "Deployment", "clusterset-dns");
    let config_map = of_kind(&deployment_file, "ConfigMap", "clusterset-dns-config");
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];

    // The container's arguments parse, with the ConfigMap's config file.
    let (_dir, config_file) = config(config_map["data"]["config.yaml"].as_str().expect("config"));
    let mut argv = vec!["clusterset-dns".to_owned()];
    let args = container["args"].as_array().expect("args");
    let mut words = args
        .iter()
        .map(|a| a.as_str().expect("a string").to_owned());
    while let Some(word) = words.next() {
        let is_config = word == "--config";
        argv.push(word);
        if is_config {
            let mounted = words.next().expect("the config path");
            assert_eq!(mounted, "/etc/clusterset-dns/config.yaml");
            argv.push(config_file.clone());
        }
    }
    let invocation = config_file::parse(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    let Some(CliCommand::Serve(serve)) = invocation.cli.command else {
        panic!("the container serves")
    };
    assert_eq!(serve.listen.to_string(), "0.0.0.0:5300");
    assert_eq!(serve.metrics_listen.port(), 9153);
    assert_eq!(serve.kubernetes.source, SourceKind::Kubernetes);

    // The broker kubeconfig is a read-only mount; the Lease namespace and
    // identity come from the downward API.
    let mounts = container["volumeMounts"].as_array().expect("mounts");
    let mount = |path: &Path| {
        mounts
            .iter()
            .find(|m| path.starts_with(m["mountPath"].as_str().expect("a path")))
            .unwrap_or_else(|| panic!("{} is not mounted", path.display()))
    };
    let broker = serve
        .kubernetes
        .broker_kubeconfig
        .expect("a broker kubeconfig");
    assert_eq!(mount(&broker)["readOnly"], true);
    for (name, field) in [
        ("POD_NAMESPACE", "metadata.namespace"),
        ("POD_NAME", "metadata.name"),
    ] {
        let env = container["env"].as_array().expect("env");
        let var = env.iter().find(|e| e["name"] == name).expect(name);
        assert_eq!(var["valueFrom"]["fieldRef"]["fieldPath"], field);
    }
    let security = &container["securityContext"];
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["capabilities"]["drop"], serde_json::json!(["ALL"]));
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");

    // The Service sends port 53 to the container's named ports.
    let service_file = kubernetes("service.yaml");
    let service = of_kind(&service_file, "Service", "clusterset-dns");
    let names: Vec<&str> = container["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .map(|p| p["name"].as_str().expect("named"))
        .collect();
    for port in service["spec"]["ports"].as_array().expect("ports") {
        let target = port["targetPort"].as_str().expect("a named target");
        assert!(names.contains(&target), "{target}");
    }
    let dns: Vec<&str> = service["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["port"] == 53)
        .map(|p| p["protocol"].as_str().unwrap())
        .collect();
    assert_eq!(dns, ["UDP", "TCP"]);
}

#[test]
fn the_demo_configmap_is_config_demo() {
    let demo_file = kubernetes("manifests-demo.yaml");
    let demo = of_kind(&demo_file, "ConfigMap", "clusterset-dns-manifests");
    let mut keys: Vec<String> = Vec::new();
    for (key, text) in demo["data"].as_object().expect("data") {
        let (cluster, file) = key.split_once('-').expect("<cluster>-<file>");
        let path = format!("{cluster}/{file}");
        let expected =
            std::fs::read_to_string(Path::new(CRATE_ROOT).join("config/demo").join(&path))
                .unwrap_or_else(|e| panic!("config/demo/{path}: {e}"));
        assert_eq!(
            text.as_str(),
            Some(expected.as_str()),
            "manifests-demo.yaml {key} is config/demo/{path}: regenerate it (see its header)"
        );
        keys.push(path);
    }
    let mut files: Vec<String> = Vec::new();
    for cluster in std::fs::read_dir(Path::new(CRATE_ROOT).join("config/demo")).expect("demo") {
        let cluster = cluster.expect("entry").path();
        let name = cluster.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with('.') || !cluster.is_dir() {
            continue;
        }
        for file in std::fs::read_dir(&cluster).expect("cluster folder") {
            let file = file
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .into_owned();
            files.push(format!("{name}/{file}"));
        }
    }
    keys.sort();
    files.sort();
    assert_eq!(keys, files, "every demo file is in the ConfigMap");
}
