//! The containers of kwok's Pods, run for real where a test needs a Pod that
//! serves: kwok makes a Pod Running with IPs but starts nothing. For each Pod
//! on kwok's Node whose containers name their `command` (so no image
//! entrypoint is needed), this runs each `command` + `args` as a local
//! process, all in one network namespace of the test's data plane holding
//! the Pod's IPs
//! ([`DataPlane::attach_pod`]), with the environment a kubelet gives it
//! (literal values and the downward API's Pod fields), and stops it when the
//! Pod goes. The upstream conformance suite's hello Pods are such Pods:
//! `/bin/sh -c` scripts that start socat on the IPs in `MY_POD_IPS`.
//!
//! Each container runs in a PID namespace of its own, as a container does, so
//! that stopping it stops everything its script started.

use std::collections::HashMap;
use std::convert::Infallible;
use std::fs;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::{Container, Pod};
use kube::api::ListParams;
use kube::{Api, Client};

use crate::control_plane::die_with_parent;
use crate::dataplane::{DataPlane, PodNetns};
use crate::pods::KWOK_NODE;

/// How often the Pods are listed: each round starts what is missing and
/// stops what is gone, so no event can be missed.
const ROUND: Duration = Duration::from_millis(250);
/// The `PATH` of a container (Debian's, standing in for the image's).
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// A member's API server and the folder its containers' logs go to.
pub struct Cluster {
    pub client: Client,
    pub logs: PathBuf,
}

/// One Pod's running containers; killed with their PID namespaces when
/// dropped, before the Pod's network namespace goes.
struct Running {
    processes: Vec<Child>,
    netns: PodNetns,
}

impl Drop for Running {
    fn drop(&mut self) {
        // SIGKILL to `unshare`, whose --kill-child passes it to the PID
        // namespace's first process; the kernel then kills the rest.
        for process in &mut self.processes {
            let _ = process.kill();
            let _ = process.wait();
        }
    }
}

/// Runs the containers of every cluster's Pods until dropped (`clusters[i]`
/// is member `i` of `data_plane`); fails when a Pod cannot be run.
pub async fn run(data_plane: &DataPlane, clusters: &[Cluster]) -> Result<Infallible> {
    let mut running: HashMap<(usize, String), Running> = HashMap::new();
    loop {
        for (member, cluster) in clusters.iter().enumerate() {
            let pods: Api<Pod> = Api::all(cluster.client.clone());
            let listed = pods
                .list(&ListParams::default().fields(&format!("spec.nodeName={KWOK_NODE}")))
                .await
                .context("listing kwok's Pods")?;
            let wanted: Vec<(&Pod, (usize, String))> = listed
                .items
                .iter()
                .filter(|p| runnable(p))
                .map(|p| (p, (member, p.metadata.uid.clone().unwrap_or_default())))
                .collect();
            // Gone Pods first: kwok gives a deleted Pod's IPs to the next.
            running.retain(|key, _| key.0 != member || wanted.iter().any(|(_, k)| k == key));
            for (pod, key) in wanted {
                if running.contains_key(&key) {
                    continue;
                }
                let started = start(data_plane, member, &cluster.logs, pod).with_context(|| {
                    format!(
                        "running Pod {}/{}",
                        pod.metadata.namespace.as_deref().unwrap_or(""),
                        pod.metadata.name.as_deref().unwrap_or("")
                    )
                })?;
                running.insert(key, started);
            }
        }
        tokio::time::sleep(ROUND).await;
    }
}

/// Whether `pod` is to run: it has IPs, is not being deleted, and its
/// containers name their commands.
fn runnable(pod: &Pod) -> bool {
    let has_ips = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ips.as_ref())
        .is_some_and(|ips| !ips.is_empty());
    let containers: Vec<&Container> = pod.spec.iter().flat_map(|s| &s.containers).collect();
    has_ips
        && pod.metadata.deletion_timestamp.is_none()
        && !containers.is_empty()
        && containers
            .iter()
            .all(|c| c.command.as_ref().is_some_and(|c| !c.is_empty()))
}

/// Starts the containers of `pod` in one network namespace of member
/// `member` holding the Pod's IPs, each one's output in `logs`.
fn start(data_plane: &DataPlane, member: usize, logs: &Path, pod: &Pod) -> Result<Running> {
    let ips = pod_ips(pod)?;
    let mut running = Running {
        processes: Vec::new(),
        netns: data_plane.attach_pod(member, &ips)?,
    };
    for container in pod.spec.iter().flat_map(|s| &s.containers) {
        let mut command = running.netns.command("unshare");
        command
            .args(["--pid", "--fork", "--kill-child"])
            .args(container.command.iter().flatten())
            .args(container.args.iter().flatten())
            .env_clear()
            .env("PATH", PATH)
            .envs(environment(pod, container, &ips)?)
            .current_dir("/");
        let log = logs.join(format!(
            "pod-{}-{}-{}.log",
            pod.metadata.namespace.as_deref().unwrap_or(""),
            pod.metadata.name.as_deref().unwrap_or(""),
            container.name
        ));
        let out = fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        command
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out);
        die_with_parent(&mut command);
        running.processes.push(
            command
                .spawn()
                .with_context(|| format!("starting container {}", container.name))?,
        );
    }
    Ok(running)
}

/// The Pod's `status.podIPs`.
fn pod_ips(pod: &Pod) -> Result<Vec<IpAddr>> {
    pod.status
        .iter()
        .flat_map(|s| s.pod_ips.iter().flatten())
        .map(|ip| ip.ip.parse().with_context(|| format!("Pod IP {:?}", ip.ip)))
        .collect()
}

/// The container's environment as a kubelet makes it: literal values, and
/// the downward API's Pod fields (`status.podIPs` comma-joined, as the
/// kubelet joins them). Other sources are refused, not left empty.
fn environment(pod: &Pod, container: &Container, ips: &[IpAddr]) -> Result<Vec<(String, String)>> {
    let mut env = vec![(
        "HOSTNAME".to_owned(),
        pod.metadata.name.clone().unwrap_or_default(),
    )];
    for var in container.env.iter().flatten() {
        let value = match (&var.value, &var.value_from) {
            (Some(value), _) => value.clone(),
            (None, None) => String::new(),
            (None, Some(from)) => {
                let Some(field) = &from.field_ref else {
                    bail!("env {}: only fieldRef is supported", var.name);
                };
                match field.field_path.as_str() {
                    "metadata.name" => pod.metadata.name.clone().unwrap_or_default(),
                    "metadata.namespace" => pod.metadata.namespace.clone().unwrap_or_default(),
                    "status.podIP" => ips.first().map(IpAddr::to_string).unwrap_or_default(),
                    "status.podIPs" => ips
                        .iter()
                        .map(IpAddr::to_string)
                        .collect::<Vec<_>>()
                        .join(","),
                    other => bail!("env {}: fieldRef {other} is not supported", var.name),
                }
            }
        };
        env.push((var.name.clone(), value));
    }
    Ok(env)
}
