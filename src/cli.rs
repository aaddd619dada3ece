//! Command-line interface: `serve` (the default) and `status`.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use hickory_proto::rr::Name;
use ipnet::{Ipv4Net, Ipv6Net};

use crate::engine::EngineSettings;
use crate::engine::vip::VipPools;
use crate::model::IpFamily;

/// Multi-Cluster Services reconciler and authoritative DNS for clusterset.local.
#[derive(Debug, Parser)]
#[command(version, about)]
pub struct Cli {
    /// What to do (default: serve the demo clusterset).
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve DNS for the clusterset described by a manifest directory.
    Serve(ServeArgs),
    /// Print the imports and export conditions, like `kubectl get` would, and exit.
    Status(StatusArgs),
}

/// Where the clusterset comes from and how it is reconciled (shared by all commands).
#[derive(Debug, Clone, Args)]
pub struct ClustersetArgs {
    /// Directory with one sub-folder per member cluster (folder name = cluster id),
    /// each holding Service, ServiceExport and EndpointSlice manifests.
    #[arg(long, default_value = "config/demo", value_name = "DIR")]
    pub manifests: PathBuf,
    /// IP families the local cluster supports; imports keep only these.
    #[arg(long, value_delimiter = ',', default_value = "IPv4,IPv6", value_parser = parse_family)]
    pub ip_families: Vec<IpFamily>,
    /// Pool of IPv4 clusterset VIPs.
    #[arg(long, default_value = "243.0.0.0/8", value_name = "CIDR")]
    pub vip_pool_v4: Ipv4Net,
    /// Pool of IPv6 clusterset VIPs.
    #[arg(long, default_value = "fd00:c5e7::/48", value_name = "CIDR")]
    pub vip_pool_v6: Ipv6Net,
    /// File that keeps VIP allocations across restarts
    /// [default: <DIR>/.clusterset-dns/vips.json].
    #[arg(long, value_name = "FILE")]
    pub state_file: Option<PathBuf>,
}

impl ClustersetArgs {
    /// The engine settings these arguments describe.
    pub fn engine_settings(&self) -> EngineSettings {
        EngineSettings {
            local_families: self.ip_families.clone(),
            pools: VipPools {
                v4: self.vip_pool_v4,
                v6: self.vip_pool_v6,
            },
        }
    }

    /// The VIP state file.
    pub fn state_file(&self) -> PathBuf {
        self.state_file
            .clone()
            .unwrap_or_else(|| self.manifests.join(".clusterset-dns").join("vips.json"))
    }
}

/// `serve` arguments.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Where the clusterset comes from.
    #[command(flatten)]
    pub clusterset: ClustersetArgs,
    /// Address to answer DNS on, UDP and TCP.
    #[arg(long, default_value = "0.0.0.0:5300", value_name = "ADDR:PORT")]
    pub listen: SocketAddr,
    /// Address of the operations listener: /metrics, /healthz, /readyz.
    #[arg(long, default_value = "0.0.0.0:9153", value_name = "ADDR:PORT")]
    pub metrics_listen: SocketAddr,
    /// /readyz fails when a source has not completed a sync for this many seconds
    /// (the manifest directory is rescanned at least every 30 s).
    #[arg(long, default_value_t = 90, value_name = "SECONDS")]
    pub max_sync_age: u64,
    /// UDP worker threads, each with its own socket (`SO_REUSEPORT`).
    #[arg(long, default_value_t = default_workers())]
    pub udp_workers: usize,
    /// The zone served.
    #[arg(long, default_value = "clusterset.local", value_parser = parse_zone)]
    pub zone: Name,
    /// TTL of answers, and of negative answers (SOA minimum).
    #[arg(long, default_value_t = 5)]
    pub ttl: u32,
    /// Answer `<cluster>.<svc>.<ns>.svc.<zone>` with that cluster's addresses
    /// (reserved by the MCS DNS spec: NXDOMAIN when off).
    #[arg(long)]
    pub cluster_targeting: bool,
}

/// Output format of `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Tables, like `kubectl get`.
    Text,
    /// One JSON document.
    Json,
}

/// `status` arguments.
#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    /// Where the clusterset comes from.
    #[command(flatten)]
    pub clusterset: ClustersetArgs,
    /// Output format.
    #[arg(long, short, value_enum, default_value = "text")]
    pub output: Format,
}

impl Default for ServeArgs {
    fn default() -> Self {
        match Cli::parse_from(["clusterset-dns", "serve"]).command {
            Some(Command::Serve(args)) => args,
            _ => unreachable!("`serve` parses as the serve command"),
        }
    }
}

fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn parse_family(s: &str) -> Result<IpFamily, String> {
    IpFamily::parse(s).ok_or_else(|| format!("unknown IP family {s:?}: expected IPv4 or IPv6"))
}

fn parse_zone(s: &str) -> Result<Name, String> {
    let mut name = Name::from_ascii(s).map_err(|e| format!("invalid zone {s:?}: {e}"))?;
    name.set_fqdn(true);
    Ok(name.to_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_overrides() {
        let args = ServeArgs::default();
        assert_eq!(args.listen, "0.0.0.0:5300".parse().unwrap());
        assert_eq!(args.zone.to_string(), "clusterset.local.");
        assert_eq!(
            args.clusterset.ip_families,
            vec![IpFamily::IPv4, IpFamily::IPv6]
        );
        assert_eq!(
            args.clusterset.state_file(),
            PathBuf::from("config/demo/.clusterset-dns/vips.json")
        );
        let cli = Cli::parse_from([
            "x",
            "serve",
            "--ip-families",
            "IPv6",
            "--zone",
            "Example.ORG",
        ]);
        let Some(Command::Serve(args)) = cli.command else {
            panic!("serve expected")
        };
        assert_eq!(args.clusterset.ip_families, vec![IpFamily::IPv6]);
        assert_eq!(args.zone.to_string(), "example.org.");
        let err = Cli::try_parse_from(["x", "serve", "--ip-families", "IPv5"]).unwrap_err();
        assert!(
            err.to_string().contains("unknown IP family \"IPv5\""),
            "{err}"
        );
    }
}
