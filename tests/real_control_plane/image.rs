//! One more replica of `west` run from the container image (the top-level
//! Dockerfile, docs/container.md) by a real OCI runtime, as
//! config/kubernetes/deployment.yaml runs it: read-only root filesystem,
//! user 65532, every capability dropped, no privilege escalation; the
//! ConfigMap's `config.yaml`, the broker kubeconfig Secret and the Pod's
//! ServiceAccount token mounted read-only where a Pod has them;
//! POD_NAMESPACE and POD_NAME set; the local API server found in-cluster
//! (`KUBERNETES_SERVICE_HOST`/`PORT`). The host network stands in for the
//! Pod network, so it reaches the API servers on loopback; the broker is
//! named `localhost`, resolved through the `/etc/hosts` a Pod is given.

use std::fs;
use std::os::unix::fs::{PermissionsExt, chown};
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use hickory_proto::rr::RecordType;
use serde_json::{Value, json};
use test_support::runc::{self, Bundle, NONROOT};
use test_support::{Outcome, free_port, get, resolve};

use crate::Skipped;
use crate::check::fqdn;
use crate::clusterset::{Clusterset, DNS_NAMESPACE, eventually, release_flags, replica_flags};
use crate::workloads::{exported_with_pod, namespace, unexport};

const MEMBER: &str = "west";
const NS: &str = "image";
/// Where deployment.yaml mounts what the Pod reads.
const CONFIG: &str = "/etc/clusterset-dns/config.yaml";
const BROKER: &str = "/etc/clusterset-dns/broker";
const SERVICE_ACCOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The image's replica turns ready and answers an export of another member.
pub async fn a_replica_runs_from_the_image(set: &mut Clusterset) -> Result<()> {
    if let Some(reason) = runc::unavailable() {
        ensure!(std::env::var_os("CI").is_none(), "{reason}");
        return Err(Skipped(reason).into());
    }
    let dir = set.dir.path().join("image-west");
    fs::create_dir_all(&dir)?;
    let mounts = pod_volumes(set, &dir)?;

    let mut bundle = Bundle::unpack(&dir);
    bundle.lock_down();
    bundle.host_network();
    bundle.bind_read_only(&mounts.config, CONFIG);
    bundle.bind_read_only(&mounts.broker, BROKER);
    bundle.bind_read_only(&mounts.service_account, SERVICE_ACCOUNT);
    // The kubelet gives every Pod an /etc/hosts (localhost among its names).
    bundle.bind_read_only(Path::new("/etc/hosts"), "/etc/hosts");
    let identity = format!("{MEMBER}-image");
    let dns = free_port();
    let metrics = free_port();
    let mut args: Vec<String> = [
        runc::ENTRYPOINT,
        "serve",
        "--config",
        CONFIG,
        "--listen",
        &dns.to_string(),
        "--metrics-listen",
        &metrics.to_string(),
        "--broker-kubeconfig",
        &format!("{BROKER}/kubeconfig"),
    ]
    .map(str::to_owned)
    .into();
    args.extend(replica_flags(MEMBER));
    args.extend(release_flags(set.member(MEMBER)));
    bundle.config["process"]["args"] = json!(args);
    let env = bundle.config["process"]["env"]
        .as_array_mut()
        .context("the image's environment")?;
    let api = set.member(MEMBER).plane.api;
    env.extend(
        [
            format!("POD_NAMESPACE={DNS_NAMESPACE}"),
            format!("POD_NAME={identity}"),
            format!("KUBERNETES_SERVICE_HOST={}", api.ip()),
            format!("KUBERNETES_SERVICE_PORT={}", api.port()),
            "RUST_LOG=clusterset_dns=info,kube=warn".to_owned(),
        ]
        .map(Value::from),
    );
    // Its log sits beside the other replicas' logs: `Clusterset::refusals`
    // reads it too (an RBAC refusal fails the run).
    let log = set.member(MEMBER).plane.dir.join(format!("{identity}.log"));
    let container = bundle.run(
        &format!("clusterset-dns-{identity}-{}", std::process::id()),
        &dir.join("runc"),
        &log,
    );
    container
        .check_locked_down()
        .map_err(|wrong| anyhow::anyhow!("the container's process: {wrong}"))?;

    eventually(
        Duration::from_secs(90),
        "the image's replica: /readyz 200",
        async || {
            if !container.running() {
                return Err(format!("it exited; its output:\n{}", container.log()));
            }
            if tokio::net::TcpStream::connect(metrics).await.is_err() {
                return Err("the operations listener is not up".into());
            }
            match get(metrics, "/readyz").await {
                (200, _) => Ok(Some(())),
                (code, body) => Err(format!("{code}: {body}")),
            }
        },
    )
    .await?;

    // An export of east, imported through the broker, answered by the
    // image's replica of west.
    namespace(&set.member(MEMBER).admin, NS).await?;
    let east = set.member("east").admin.clone();
    namespace(&east, NS).await?;
    exported_with_pod(&east, NS, "db", true, "10.4.0.9").await?;
    let name = fqdn("db", NS);
    let expected = crate::check::ips(&["10.4.0.9"]);
    let answered = eventually(
        crate::clusterset::CONVERGE,
        "the image's replica answers east's export",
        async || {
            if !container.running() {
                return Err(format!("it exited; its output:\n{}", container.log()));
            }
            let got = resolve(dns, &name, RecordType::A).await;
            if got == expected {
                Ok(Some(()))
            } else {
                Err(format!("{got:?}, expected {expected:?}"))
            }
        },
    )
    .await;
    unexport(&east, NS, "db").await?;
    answered?;
    ensure!(
        resolve(dns, "clusterset.local.", RecordType::SOA).await != Outcome::NxDomain,
        "the zone is served"
    );
    drop(container);
    Ok(())
}

/// What the Pod's volumes hold, made here: host folders and a file to
/// bind-mount read-only, owned by root and readable by group 65532 (as
/// `fsGroup: 65532` and the Secret's `defaultMode: 0440` make them).
struct PodVolumes {
    config: std::path::PathBuf,
    broker: std::path::PathBuf,
    service_account: std::path::PathBuf,
}

fn pod_volumes(set: &Clusterset, dir: &Path) -> Result<PodVolumes> {
    let member = set.member(MEMBER);
    let (own, broker) = member.kubeconfigs();
    let own = read_kubeconfig(own)?;
    let broker = read_kubeconfig(broker)?;

    // The ConfigMap clusterset-dns-config of deployment.yaml.
    let manifests = fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("config/kubernetes/deployment.yaml"),
    )?;
    let config_map = manifests
        .split("\n---")
        .map(serde_yaml_ng::from_str::<Value>)
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .find(|doc| doc["kind"] == "ConfigMap")
        .context("deployment.yaml has no ConfigMap")?;
    let config = dir.join("config.yaml");
    let text = config_map["data"]["config.yaml"]
        .as_str()
        .context("the ConfigMap has no config.yaml")?;
    write_readable(&config, text.as_bytes())?;

    // The Secret clusterset-dns-broker: a kubeconfig with its CA inline and
    // the broker named by host name.
    let broker_dir = dir.join("broker");
    make_dir(&broker_dir)?;
    let ca = fs::read(&broker.ca)?;
    let ca_data = serde_json::to_value(k8s_openapi::ByteString(ca))?;
    let port = broker
        .server
        .rsplit(':')
        .next()
        .context("the broker's address")?;
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: broker\n  cluster:\n    server: https://localhost:{port}\n    certificate-authority-data: {}\nusers:\n- name: member\n  user:\n    token: {}\ncontexts:\n- name: broker\n  context:\n    cluster: broker\n    user: member\ncurrent-context: broker\n",
        ca_data.as_str().context("base64")?,
        broker.token
    );
    write_readable(&broker_dir.join("kubeconfig"), kubeconfig.as_bytes())?;

    // The projected ServiceAccount token volume of a Pod.
    let account = dir.join("serviceaccount");
    make_dir(&account)?;
    write_readable(&account.join("token"), own.token.as_bytes())?;
    write_readable(&account.join("ca.crt"), &fs::read(&own.ca)?)?;
    write_readable(&account.join("namespace"), DNS_NAMESPACE.as_bytes())?;
    Ok(PodVolumes {
        config,
        broker: broker_dir,
        service_account: account,
    })
}

/// The parts of a test kubeconfig (`write_kubeconfig`) a Pod needs.
struct Credentials {
    server: String,
    ca: std::path::PathBuf,
    token: String,
}

fn read_kubeconfig(path: &Path) -> Result<Credentials> {
    let doc: Value = serde_yaml_ng::from_str(&fs::read_to_string(path)?)
        .with_context(|| format!("reading {}", path.display()))?;
    let cluster = &doc["clusters"][0]["cluster"];
    let field = |v: &Value, what: &str| {
        v.as_str()
            .map(str::to_owned)
            .with_context(|| format!("{}: no {what}", path.display()))
    };
    Ok(Credentials {
        server: field(&cluster["server"], "server")?,
        ca: field(&cluster["certificate-authority"], "certificate-authority")?.into(),
        token: field(&doc["users"][0]["user"]["token"], "token")?,
    })
}

fn make_dir(path: &Path) -> Result<()> {
    fs::create_dir_all(path)?;
    chown(path, Some(0), Some(NONROOT))?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o750))?;
    Ok(())
}

fn write_readable(path: &Path, bytes: &[u8]) -> Result<()> {
    fs::write(path, bytes)?;
    chown(path, Some(0), Some(NONROOT))?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o440))?;
    Ok(())
}
