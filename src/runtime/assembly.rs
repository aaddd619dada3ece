//! One assembly for every command (ARCHITECTURE.md, "The flow"): the flags
//! turned into the index, the engine and the source, the same for `serve`,
//! `explain`, `status` and `check`. A command differs only in what it does
//! with them: `serve` follows the source and answers from the index, the
//! others read the source once (`commands/snapshot.rs`).
//!
//! Flags stop here (ARCHITECTURE.md, "Folders and what each may use"): the
//! layers below take settings types of their own, which the functions at
//! the end of this file make from the flags.

use std::collections::HashSet;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;

use crate::cli::{ClustersetArgs, KubernetesArgs, ServeArgs, SourceKind, TcpArgs, TlsArgs};
use crate::dns::{TcpLimits, TlsSettings};
use crate::engine::vip::VipPools;
use crate::engine::{EngineSettings, VipSource};
use crate::index::serial::{self, SerialFile};
use crate::index::{Index, ReverseZone};
use crate::model::IpFamily;
use crate::model::derived::DerivedServices;
use crate::model::limits::Limits;
use crate::model::trust::{Declared, Protected, Trust};
use crate::plumbing::listen::Caps;
use crate::runtime::pipeline::PipelineSettings;
use crate::sources::kubernetes::client::{self, Connection, ConnectionSettings};
use crate::sources::kubernetes::readers::FactSources;
use crate::sources::manifests::{ManifestSource, is_valid_cluster_id};

/// The parts every command is built from.
pub struct Assembly {
    /// The engine and the index it feeds.
    pub pipeline: PipelineSettings,
    /// Where the facts come from.
    pub source: Source,
}

/// Where the facts come from, not read yet.
// One per command, moved once into what reads it: its size costs nothing.
#[allow(clippy::large_enum_variant)]
pub enum Source {
    /// Embedded mode: the manifest directory.
    Manifests(ManifestSource),
    /// Kubernetes mode: the local cluster and the broker.
    Kubernetes(Kubernetes),
}

/// The source of Kubernetes mode.
pub struct Kubernetes {
    /// The API servers, connected.
    pub connection: Connection,
    /// The broker's namespace of the clusterset's shared state.
    pub broker_namespace: String,
    /// The kinds whose objects are facts for the engine.
    pub facts: FactSources,
}

/// Checks that the source `args` name is there (the manifest directory, or
/// the API servers, connected) and builds the index and the engine's
/// settings as `serve` serves them: the name server's addresses and the
/// reverse zones in the index; in Kubernetes mode VIPs from the broker and
/// imports only in the local cluster's namespaces (KEP-1645 "Namespace
/// sameness").
pub async fn assemble(args: &ServeArgs) -> anyhow::Result<Assembly> {
    build(args, false).await
}

/// `--derived-services clusterset` pins derived Services to the VIPs, and an
/// API server allocates no ClusterIP from an IPv6 ServiceCIDR shorter than
/// /64 (ARCHITECTURE.md, "Derived Services"): such a pool would pin no IPv6 VIP.
fn pinnable_pools(args: &ServeArgs) -> anyhow::Result<()> {
    let pool = args.clusterset.vip_pool_v6;
    let pins_v6 = args.kubernetes.derived_services == DerivedServices::Clusterset
        && args.clusterset.ip_families.contains(&IpFamily::IPv6);
    anyhow::ensure!(
        !pins_v6 || pool.prefix_len() >= 64,
        "--vip-pool-v6 {pool} is shorter than /64, and an API server allocates no ClusterIP \
         from such a ServiceCIDR, so --derived-services clusterset could pin no IPv6 VIP: \
         give every member a /64 or longer (config/kubernetes/servicecidr.yaml holds fd00:c5e7::/64)"
    );
    Ok(())
}

/// [`assemble`] for `serve`: in embedded mode the index also keeps its SOA
/// serial's ceiling in the serial file (`index/serial.rs`), so a restart
/// never serves a lower serial. The read-only commands write nothing.
pub async fn assemble_serving(args: &ServeArgs) -> anyhow::Result<Assembly> {
    build(args, true).await
}

async fn build(args: &ServeArgs, serving: bool) -> anyhow::Result<Assembly> {
    let clusterset = &args.clusterset;
    let (engine, state_file, source) = match args.kubernetes.source {
        SourceKind::Manifests => {
            let manifests = &clusterset.manifests;
            anyhow::ensure!(
                manifests.is_dir(),
                "manifest directory {} does not exist (see --manifests)",
                manifests.display()
            );
            let local_cluster = match &args.kubernetes.cluster_id {
                Some(id) if !is_valid_cluster_id(id) => anyhow::bail!(
                    "--cluster-id {id:?} is not a cluster id (an RFC 1123 name of one or two labels)"
                ),
                id => id.as_deref().map(Into::into),
            };
            (
                EngineSettings {
                    local_cluster,
                    ..engine_settings(clusterset)
                },
                Some(state_file(clusterset)),
                Source::Manifests(ManifestSource::new(manifests)),
            )
        }
        SourceKind::Kubernetes => {
            pinnable_pools(args)?;
            let connection = client::connect(&connection_settings(&args.kubernetes)).await?;
            // The namespaces of the broker's shared state and of this
            // program (where its leader Lease is) are protected too.
            let broker_namespace = args.kubernetes.broker_namespace.clone();
            let own = [broker_namespace.as_str(), &args.kubernetes.lease_namespace];
            let protected = Protected::new(&own);
            let declared = declared(&args.kubernetes);
            let engine = EngineSettings {
                protected: protected.clone(),
                declared: declared.clone(),
                limits: limits(&args.kubernetes),
                vip_source: VipSource::Assigned,
                local_cluster: Some(connection.cluster.clone()),
                namespaces_known: true,
                ..engine_settings(clusterset)
            };
            let pools = [IpFamily::IPv4, IpFamily::IPv6].map(|f| engine.pools.pool(f));
            let trust = Trust::new(pools.to_vec(), protected, declared);
            let facts = FactSources::new(&connection, &broker_namespace, trust);
            let source = Kubernetes {
                connection,
                broker_namespace,
                facts,
            };
            (engine, None, Source::Kubernetes(source))
        }
    };
    let serial_file = match (&source, serving) {
        (Source::Manifests(_), true) => Some(Arc::new(SerialFile::open(&serial_file(clusterset))?)),
        _ => None,
    };
    let now = serial::now();
    let first_serial = serial_file.as_ref().map_or(now, |file| file.first(now));
    let index = Index::new(
        args.zone.clone(),
        args.ttl,
        args.cluster_targeting,
        first_serial,
    )
    .with_serial_file(serial_file)
    .with_nameserver_addresses(nameserver_addresses(args))
    .with_reverse_zones(reverse_zones(args));
    Ok(Assembly {
        pipeline: PipelineSettings {
            engine,
            index: Arc::new(index),
            state_file,
        },
        source,
    })
}

/// The addresses `ns.dns.<zone>` answers: `--nameserver-address`, else the
/// `--listen` address unless it is a wildcard (then none: NODATA).
pub fn nameserver_addresses(args: &ServeArgs) -> Vec<IpAddr> {
    let mut addresses = args.nameserver_address.clone();
    if addresses.is_empty() && !args.listen.ip().is_unspecified() {
        addresses.push(args.listen.ip());
    }
    let mut seen = HashSet::new();
    addresses.retain(|ip| seen.insert(*ip));
    addresses
}

/// Where `--source kubernetes` connects.
pub fn connection_settings(args: &KubernetesArgs) -> ConnectionSettings {
    ConnectionSettings {
        kubeconfig: args.kubeconfig.clone(),
        context: args.context.clone(),
        broker_kubeconfig: args.broker_kubeconfig.clone(),
        broker_context: args.broker_context.clone(),
        cluster_id: args.cluster_id.clone(),
    }
}

/// What `--cluster-namespaces` and `--cluster-cidrs` declare of each cluster.
pub fn declared(args: &KubernetesArgs) -> Declared {
    Declared::new(
        args.cluster_namespaces.iter().cloned(),
        args.cluster_cidrs.iter().cloned(),
    )
}

/// The caps `--max-exports-per-cluster`, `--max-endpoints-per-cluster` and
/// `--max-vips-per-namespace` set.
pub fn limits(args: &KubernetesArgs) -> Limits {
    Limits {
        exports_per_cluster: args.max_exports_per_cluster,
        endpoints_per_cluster: args.max_endpoints_per_cluster,
        vips_per_namespace: args.max_vips_per_namespace,
    }
}

/// DNS over TLS as the flags set it.
pub fn tls_settings(args: &TlsArgs) -> TlsSettings {
    TlsSettings {
        listen: args.tls_listen,
        cert: args.tls_cert.clone(),
        key: args.tls_key.clone(),
    }
}

/// The limits of DNS over TCP (and TLS) as the flags set them.
pub fn tcp_limits(args: &TcpArgs) -> TcpLimits {
    TcpLimits {
        caps: Caps {
            total: args.tcp_max_connections,
            per_client: args.tcp_max_connections_per_client,
        },
        idle_timeout: Duration::from_secs(args.tcp_idle_timeout),
        write_timeout: Duration::from_secs(args.tcp_write_timeout),
        ..TcpLimits::default()
    }
}

/// The engine settings the clusterset flags describe.
pub fn engine_settings(clusterset: &ClustersetArgs) -> EngineSettings {
    EngineSettings {
        local_families: clusterset.ip_families.clone(),
        pools: VipPools {
            v4: clusterset.vip_pool_v4,
            v6: clusterset.vip_pool_v6,
        },
        clusterset_ip: clusterset.clusterset_ip,
        ..EngineSettings::default()
    }
}

/// The VIP state file: `--state-file`, else `.clusterset-dns/vips.json` in
/// the manifest directory.
pub fn state_file(clusterset: &ClustersetArgs) -> PathBuf {
    clusterset.state_file.clone().unwrap_or_else(|| {
        clusterset
            .manifests
            .join(".clusterset-dns")
            .join("vips.json")
    })
}

/// The SOA serial file, next to the VIP state file: its name with the
/// extension `serial` (`vips.json`: `vips.serial`).
pub fn serial_file(clusterset: &ClustersetArgs) -> PathBuf {
    let state = state_file(clusterset);
    let serial = state.with_extension("serial");
    if serial == state {
        state.with_extension("serial.soa")
    } else {
        serial
    }
}

/// The reverse zones to serve: those named, then those of the VIP pools.
pub fn reverse_zones(args: &ServeArgs) -> Vec<ReverseZone> {
    let pools = [
        IpNet::V4(args.clusterset.vip_pool_v4),
        IpNet::V6(args.clusterset.vip_pool_v6),
    ];
    let derived = pools
        .into_iter()
        .filter(|_| args.reverse_vip_pools)
        .map(ReverseZone::covering);
    let mut zones: Vec<ReverseZone> = Vec::new();
    for zone in args.reverse_zone.iter().cloned().chain(derived) {
        if !zones.contains(&zone) {
            zones.push(zone);
        }
    }
    zones
}
