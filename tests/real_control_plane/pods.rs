//! What runs a cluster's Pods: the real kube-scheduler, and kwok
//! (`sigs.k8s.io/kwok`, pinned in `tests/kwok/go.mod`) playing the kubelet of
//! one Node (ARCHITECTURE.md, "Tests on a real control plane": why kwok and
//! not a kubelet). A Pod the scheduler places on that Node is Running and
//! Ready at once, with one IP of each family of the Node's `podCIDRs`; the
//! Deployment, ReplicaSet, StatefulSet and EndpointSlice controllers do the
//! rest. `kubectl exec` into such a Pod runs the command as a local process
//! of kwok's, in a mount namespace of its own whose `/etc/resolv.conf` is the
//! one a kubelet writes for a Pod (`dnsPolicy: ClusterFirst`): the cluster's
//! DNS server, its search path and `ndots:5`. While an [`ExecInNode`] stands,
//! those processes run in the network namespace of the member's node of the
//! test's data plane instead (kwok patched, `tests/kwok/_patch`), where its
//! kube-proxy programs Service IPs, and resolve through a nameserver the node
//! reaches.
//!
//! The Pods the other scenarios make by hand, on `node-1` with the status
//! they set, are none of kwok's: it manages only its own Node.

use std::ffi::CString;
use std::fs;
use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use test_support::free_port;

use crate::control_plane::{Process, bin_dir, run};

/// The one Node kwok runs Pods on.
pub const KWOK_NODE: &str = "kwok-node";
/// The link, in the control plane's folder, kwok's exec follows into a
/// network namespace (`$KWOK_EXEC_NETNS`): absent, commands run in kwok's own.
const NODE_NETNS: &str = "node-netns";
/// The Pods' resolv.conf, in the control plane's folder.
const RESOLV_CONF: &str = "pod-resolv.conf";
/// The annotation that hands a Node to kwok (its `--manage-nodes-with-annotation-selector`).
const KWOK_ANNOTATION: (&str, &str) = ("kwok.x-k8s.io/node", "fake");

/// Where a cluster's Pods live on the network.
pub struct PodNetwork {
    /// The Node's `podCIDRs`, IPv4 first: each Pod gets one IP of each.
    pub cidrs: [&'static str; 2],
    /// The cluster's DNS server (its CoreDNS, port 53), the `nameserver` of
    /// every Pod. A loopback address of its own per cluster: there is no
    /// kube-proxy to carry a Service IP to it.
    pub dns: Ipv4Addr,
}

/// The scheduler and kwok of one cluster; killed when dropped.
pub struct PodRunner {
    scheduler: Process,
    kwok: Process,
}

impl PodRunner {
    /// Starts the scheduler and kwok against the API server of `kubeconfig`
    /// (the admin's), with their files in `dir`, and waits until kwok's Node
    /// takes Pods. `serving` is a certificate and key for 127.0.0.1: the API
    /// server reaches kwok over HTTPS as it reaches a kubelet.
    pub async fn start(
        client: &Client,
        kubeconfig: &Path,
        dir: &Path,
        network: &PodNetwork,
        serving: (&Path, &Path),
    ) -> Result<Self> {
        ensure!(
            nix::unistd::geteuid().is_root(),
            "the Pod runner needs root: kwok's Pods see their resolv.conf in a \
             mount namespace, and the clusters' CoreDNS listens on port 53"
        );
        let bins = bin_dir();
        let kubeconfig = format!("--kubeconfig={}", kubeconfig.display());
        let scheduler = Process::spawn(
            "kube-scheduler",
            &bins.join("kube-scheduler"),
            &[
                kubeconfig.clone(),
                "--leader-elect=false".into(),
                "--bind-address=127.0.0.1".into(),
                format!("--secure-port={}", free_port().port()),
                "--v=1".into(),
            ],
            &dir.join("kube-scheduler.log"),
        )?;

        // kwok's own Stages (as kwokctl gives them) and local exec for every Pod.
        let mut config = run(&bins.join("kwok-stages"), &[])?;
        config.push_str(
            "---\napiVersion: kwok.x-k8s.io/v1alpha1\nkind: ClusterExec\n\
             metadata:\n  name: local\nspec:\n  execs:\n  - local: {}\n",
        );
        let config_file = dir.join("kwok.yaml");
        fs::write(&config_file, config)?;
        let resolv_conf = dir.join(RESOLV_CONF);
        fs::write(&resolv_conf, resolv_conf_text(network.dns.into()))?;
        let port = free_port().port();
        let mut command = Command::new(bins.join("kwok"));
        command.args([
            kubeconfig,
            format!("--config={}", config_file.display()),
            format!(
                "--manage-nodes-with-annotation-selector={}={}",
                KWOK_ANNOTATION.0, KWOK_ANNOTATION.1
            ),
            format!("--server-address=127.0.0.1:{port}"),
            "--node-ip=127.0.0.1".into(),
            format!("--node-port={port}"),
            format!("--tls-cert-file={}", serving.0.display()),
            format!("--tls-private-key-file={}", serving.1.display()),
        ]);
        command.env("KWOK_EXEC_NETNS", dir.join(NODE_NETNS));
        with_resolv_conf(&mut command, &resolv_conf)?;
        let kwok = Process::spawn_command("kwok", command, &dir.join("kwok.log"))?;
        let mut runner = Self { scheduler, kwok };
        runner.node(client, network).await?;
        Ok(runner)
    }

    /// Creates kwok's Node and waits until it is Ready; then takes off the
    /// `not-ready` taint admission put on it at creation
    /// (TaintNodesByCondition), as the node lifecycle controller would. That
    /// controller does not run: it would find `node-1`, which no kubelet
    /// renews, unreachable and evict the other scenarios' Pods.
    async fn node(&mut self, client: &Client, network: &PodNetwork) -> Result<()> {
        let nodes: Api<Node> = Api::all(client.clone());
        let node: Node = serde_json::from_value(json!({
            "metadata": {
                "name": KWOK_NODE,
                "annotations": {KWOK_ANNOTATION.0: KWOK_ANNOTATION.1},
                "labels": {"kubernetes.io/hostname": KWOK_NODE, "type": "kwok"},
            },
            "spec": {"podCIDRs": network.cidrs},
        }))?;
        nodes
            .create(&PostParams::default(), &node)
            .await
            .context("creating kwok's Node")?;
        let mut ready = false;
        for _ in 0..600 {
            self.check_alive()?;
            let node = nodes.get(KWOK_NODE).await?;
            ready = node
                .status
                .and_then(|s| s.conditions)
                .into_iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            if ready {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        ensure!(ready, "kwok did not make its Node Ready within 60 s");
        let untainted = json!({"spec": {"taints": null}});
        nodes
            .patch(
                KWOK_NODE,
                &PatchParams::default(),
                &Patch::Merge(&untainted),
            )
            .await
            .context("taking the not-ready taint off kwok's Node")?;
        Ok(())
    }

    /// Fails when the scheduler or kwok has exited.
    pub fn check_alive(&mut self) -> Result<()> {
        self.scheduler.check_alive()?;
        self.kwok.check_alive()
    }
}

/// A kubelet's resolv.conf for a `ClusterFirst` Pod of a cluster whose DNS
/// server is `nameserver`.
fn resolv_conf_text(nameserver: IpAddr) -> String {
    format!("search svc.cluster.local cluster.local\nnameserver {nameserver}\noptions ndots:5\n")
}

/// While it stands, `kubectl exec` into the Pods of one control plane runs in
/// a node's network namespace and resolves through `nameserver`; dropped,
/// both are as [`PodRunner::start`] made them.
pub struct ExecInNode {
    dir: PathBuf,
    loopback_dns: Ipv4Addr,
}

impl ExecInNode {
    /// Points the exec of the Pod runner whose folder is `dir` (the control
    /// plane's) at the network namespace `netns` (a name in `/run/netns`, as
    /// `ip netns` keeps them) and the Pods' resolv.conf at `nameserver`;
    /// `loopback_dns` is the nameserver the runner started with.
    pub fn enter(
        dir: &Path,
        netns: &str,
        nameserver: IpAddr,
        loopback_dns: Ipv4Addr,
    ) -> Result<Self> {
        let link = dir.join(NODE_NETNS);
        let _ = fs::remove_file(&link);
        std::os::unix::fs::symlink(Path::new("/run/netns").join(netns), &link)
            .with_context(|| format!("linking {}", link.display()))?;
        // Written in place: kwok's mount namespace binds this very file.
        fs::write(dir.join(RESOLV_CONF), resolv_conf_text(nameserver))?;
        Ok(Self {
            dir: dir.to_owned(),
            loopback_dns,
        })
    }
}

impl Drop for ExecInNode {
    fn drop(&mut self) {
        let _ = fs::remove_file(self.dir.join(NODE_NETNS));
        let _ = fs::write(
            self.dir.join(RESOLV_CONF),
            resolv_conf_text(self.loopback_dns.into()),
        );
    }
}

/// Runs `command` in a mount namespace of its own whose `/etc/resolv.conf`
/// is `resolv_conf`, so the processes kwok starts for `kubectl exec` resolve
/// names as a Pod does, and nothing outside sees the change. Network
/// namespaces named later (`ip netns add`, bind mounts in `/run/netns`) do
/// reach it, so that its exec can enter a node's ([`ExecInNode`]).
fn with_resolv_conf(command: &mut Command, resolv_conf: &Path) -> Result<()> {
    use nix::mount::{MsFlags, mount};
    share_netns_dir()?;
    let source = CString::new(resolv_conf.as_os_str().as_encoded_bytes())?;
    let none: Option<&str> = None;
    // SAFETY: unshare and mount are system calls; nothing is allocated
    // between fork and exec (the paths are made beforehand).
    unsafe {
        command.pre_exec(move || {
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS)?;
            // Mounts made here stay here; shared mounts outside (such as
            // `/run/netns`) still pass theirs in.
            mount(none, "/", none, MsFlags::MS_REC | MsFlags::MS_SLAVE, none)?;
            mount(
                Some(source.as_c_str()),
                "/etc/resolv.conf",
                none,
                MsFlags::MS_BIND,
                none,
            )?;
            Ok(())
        });
    }
    Ok(())
}

/// Makes `/run/netns` a shared mount point, as `ip netns add` does the first
/// time it runs, so a namespace named after kwok starts is seen in kwok's
/// mount namespace too.
fn share_netns_dir() -> Result<()> {
    use nix::mount::{MsFlags, mount};
    const DIR: &str = "/run/netns";
    let none: Option<&str> = None;
    fs::create_dir_all(DIR)?;
    if mount(none, DIR, none, MsFlags::MS_SHARED | MsFlags::MS_REC, none).is_err() {
        // Not a mount point yet: bind it on itself, then share it.
        mount(
            Some(DIR),
            DIR,
            none,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            none,
        )
        .context("binding /run/netns on itself")?;
        mount(none, DIR, none, MsFlags::MS_SHARED | MsFlags::MS_REC, none)
            .context("making /run/netns shared")?;
    }
    Ok(())
}
