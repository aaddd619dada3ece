//! Connecting to the API servers of Kubernetes mode: the local cluster, the
//! broker, this cluster's id (the `cluster.clusterset.k8s.io` ClusterProperty)
//! and the MCS version each serves.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};

use crate::k8s::served_versions::McsVersions;
use crate::model::ClusterId;

/// Where the API servers of Kubernetes mode are and who this cluster is
/// (`--kubeconfig`, `--context`, `--broker-kubeconfig`, `--broker-context`,
/// `--cluster-id`).
#[derive(Clone, Debug, Default)]
pub struct ConnectionSettings {
    /// Kubeconfig of the local cluster; None: in-cluster config, else
    /// `$KUBECONFIG` or `~/.kube/config`.
    pub kubeconfig: Option<PathBuf>,
    /// Context of the local kubeconfig; None: its current context.
    pub context: Option<String>,
    /// Kubeconfig of the broker; None: the local cluster is the broker.
    pub broker_kubeconfig: Option<PathBuf>,
    /// Context of the broker's kubeconfig.
    pub broker_context: Option<String>,
    /// This cluster's id; None: the `cluster.clusterset.k8s.io` ClusterProperty.
    pub cluster_id: Option<String>,
}

/// The API servers of Kubernetes mode, connected.
pub struct Connection {
    /// The local cluster.
    pub local: Client,
    /// The broker.
    pub broker: Client,
    /// This cluster's id.
    pub cluster: ClusterId,
    /// The version each MCS kind is read and written at, per API server.
    pub mcs: McsVersions,
}

/// Connects to the local cluster and the broker and finds this cluster's id.
pub async fn connect(args: &ConnectionSettings) -> anyhow::Result<Connection> {
    let local = client(args.kubeconfig.as_deref(), args.context.as_deref())
        .await
        .context("cannot reach the local cluster")?;
    let broker = match &args.broker_kubeconfig {
        Some(path) => client(Some(path), args.broker_context.as_deref())
            .await
            .context("cannot reach the broker")?,
        None => local.clone(),
    };
    let cluster = match &args.cluster_id {
        Some(id) => id.clone(),
        None => cluster_property(&local).await?,
    };
    let mcs = McsVersions::discover(&local, &broker).await;
    Ok(Connection {
        local,
        broker,
        cluster: cluster.into(),
        mcs,
    })
}

async fn client(kubeconfig: Option<&Path>, context: Option<&str>) -> anyhow::Result<Client> {
    let options = KubeConfigOptions {
        context: context.map(str::to_owned),
        ..KubeConfigOptions::default()
    };
    let config = match kubeconfig {
        Some(path) => {
            let file = Kubeconfig::read_from(path)
                .with_context(|| format!("cannot read kubeconfig {}", path.display()))?;
            Config::from_custom_kubeconfig(file, &options)
                .await
                .with_context(|| format!("kubeconfig {}", path.display()))?
        }
        None if context.is_some() => Config::from_kubeconfig(&options).await?,
        None => Config::infer().await?,
    };
    Ok(Client::try_from(config)?)
}

/// The `cluster.clusterset.k8s.io` ClusterProperty (KEP-2149).
async fn cluster_property(client: &Client) -> anyhow::Result<String> {
    let gvk = GroupVersionKind::gvk("about.k8s.io", "v1alpha1", "ClusterProperty");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "clusterproperties");
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let property = api
        .get_opt("cluster.clusterset.k8s.io")
        .await
        .context("cannot read the cluster.clusterset.k8s.io ClusterProperty; set --cluster-id")?
        .context("no cluster.clusterset.k8s.io ClusterProperty; set --cluster-id")?;
    property.data["spec"]["value"]
        .as_str()
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
        .context("ClusterProperty cluster.clusterset.k8s.io has no spec.value")
}
