//! Command-line interface: `serve` (the default), `status`, `explain`, `check` and `crds`.
//!
//! Every flag of `serve`, `status` and `check` can also come from a YAML file
//! (`--config FILE`, see [`crate::cli::config_file`]); parse with
//! [`crate::cli::config_file::parse`] to honour it.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

pub mod config_file;
pub(crate) mod mode_flags;

use clap::builder::TypedValueParser;
use clap::{ArgAction, Args, Parser, Subcommand, ValueEnum};
use hickory_proto::rr::Name;
use ipnet::{IpNet, Ipv4Net, Ipv6Net};

use crate::index::ReverseZone;
use crate::model::derived::DerivedServices;
use crate::model::trust::{parse_cluster_cidr, parse_cluster_namespace};
use crate::model::{ClusterId, IpFamily};

/// Multi-Cluster Services reconciler and authoritative DNS for clusterset.local.
///
/// A flag given twice keeps its last value, so that the command line
/// overrides the `--config` file.
#[derive(Debug, Parser)]
#[command(version, about, args_override_self = true)]
pub struct Cli {
    /// What to do (default: serve the demo clusterset).
    #[command(subcommand)]
    pub command: Option<Command>,
    /// How much to log: error, warn, info, debug, trace, or tracing
    /// directives such as `info,clusterset_dns=debug`. On the command line it
    /// beats `RUST_LOG`, which beats the config file [default: info]
    #[arg(long, global = true, value_name = "LEVEL", value_parser = parse_log_level,
          help_heading = "Logging")]
    pub log_level: Option<String>,
    /// Format of the log lines on stderr.
    #[arg(
        long,
        global = true,
        value_enum,
        default_value = "text",
        value_name = "FORMAT",
        help_heading = "Logging"
    )]
    pub log_format: LogFormat,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve DNS for the clusterset described by a manifest directory.
    Serve(ServeArgs),
    /// Print the imports and export conditions, like `kubectl get` would, and
    /// exit; with `--source kubernetes`, also the broker's records (read only).
    Status(StatusArgs),
    /// Explain why a DNS name answers what it does: its import, each
    /// cluster's part, every endpoint left out and why, and the exact answer.
    /// Takes every flag of `serve` (the zone, TTL and families matter).
    Explain(ExplainArgs),
    /// Validate a configuration (flags, `--config` file, manifest directory,
    /// VIP state file, TLS certificate and key; with `--source kubernetes`, the local and broker API
    /// servers) without serving: exit 0 when `serve` would start cleanly,
    /// non-zero with the problems otherwise.
    Check(ServeArgs),
    /// Print the ServiceExport and ServiceImport CustomResourceDefinitions
    /// (generated from the Rust types) as multi-document YAML.
    Crds,
}

/// Format of log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line (`timestamp`, `level`, `target`, `message` and the fields).
    Json,
}

/// Where the clusterset comes from and how it is reconciled (shared by all commands).
#[derive(Debug, Clone, Args)]
pub struct ClustersetArgs {
    /// Directory with one sub-folder per member cluster (folder name = cluster id),
    /// each holding Service, ServiceExport and EndpointSlice manifests.
    #[arg(long, default_value = "config/demo", value_name = "DIR")]
    pub manifests: PathBuf,
    /// IP families the local cluster supports; imports keep only these.
    #[arg(long, action = ArgAction::Set, value_delimiter = ',', default_value = "IPv4,IPv6",
          value_name = "LIST", value_parser = parse_family)]
    pub ip_families: Vec<IpFamily>,
    /// Pool of IPv4 clusterset VIPs.
    #[arg(long, default_value = "243.0.0.0/8", value_name = "CIDR")]
    pub vip_pool_v4: Ipv4Net,
    /// Pool of IPv6 clusterset VIPs.
    #[arg(long, default_value = "fd00:c5e7::/48", value_name = "CIDR")]
    pub vip_pool_v6: Ipv6Net,
    /// File that keeps VIP allocations across restarts
    /// [default: <DIR>/.clusterset-dns/vips.json]; the SOA serial is kept
    /// next to it, under the extension `serial`.
    #[arg(long, value_name = "FILE")]
    pub state_file: Option<PathBuf>,
    /// Give ClusterSetIP imports clusterset VIPs, unless their ServiceExport's
    /// `clusterset-dns.io/use-clusterset-ip` annotation says otherwise; without
    /// VIPs a name resolves to the exporting clusters' own ClusterIPs.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, require_equals = true,
          default_value_t = true, default_missing_value = "true", value_name = "BOOL")]
    pub clusterset_ip: bool,
}

/// `serve` arguments.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// YAML file setting any of these flags under its long name
    /// (`listen: 0.0.0.0:5300`); flags on the command line win.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Where the clusterset comes from.
    #[command(flatten)]
    pub clusterset: ClustersetArgs,
    /// Address to answer DNS on, UDP and TCP.
    #[arg(long, default_value = "0.0.0.0:5300", value_name = "ADDR:PORT")]
    pub listen: SocketAddr,
    /// Address of the operations listener: /metrics, /healthz, /readyz (and
    /// /debug/explain with `--debug-explain`).
    #[arg(long, default_value = "0.0.0.0:9153", value_name = "ADDR:PORT")]
    pub metrics_listen: SocketAddr,
    /// Limits of the operations listener.
    #[command(flatten)]
    pub operations: OperationsArgs,
    /// /readyz fails when a source has not completed a sync for this many seconds
    /// (the manifest directory is rescanned at least every 30 s).
    #[arg(long, default_value_t = 90, value_name = "SECONDS")]
    pub max_sync_age: u64,
    /// UDP worker threads, each with its own socket (`SO_REUSEPORT`).
    #[arg(long, default_value_t = default_workers(), value_name = "N")]
    pub udp_workers: usize,
    /// The zone served.
    #[arg(long, default_value = "clusterset.local", value_name = "NAME", value_parser = parse_zone)]
    pub zone: Name,
    /// TTL of answers, and of negative answers (SOA minimum).
    #[arg(long, default_value_t = 5, value_name = "SECONDS")]
    pub ttl: u32,
    /// Answer `<cluster>.<svc>.<ns>.svc.<zone>` with that cluster's addresses
    /// (reserved by the MCS DNS spec: NXDOMAIN when off). `--cluster-targeting`
    /// alone means `=true`.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, require_equals = true,
          default_value_t = false, default_missing_value = "true", value_name = "BOOL")]
    pub cluster_targeting: bool,
    /// Address of `ns.dns.<zone>`, the name server the apex NS record names
    /// (in Kubernetes: the Service IP); repeatable or comma-separated
    /// [default: the `--listen` address unless it is a wildcard].
    #[arg(long, value_delimiter = ',', value_name = "IP")]
    pub nameserver_address: Vec<IpAddr>,
    /// TCP limits (RFC 7766 §6.2.3, §10).
    #[command(flatten)]
    pub tcp: TcpArgs,
    /// Allow zone transfers (AXFR, IXFR over TCP) from this network;
    /// repeatable; others get REFUSED.
    #[arg(long, action = ArgAction::Append, value_delimiter = ',',
          default_values = ["127.0.0.0/8", "::1/128"], value_name = "CIDR",
          help_heading = "Zone transfer")]
    pub transfer_allow: Vec<IpNet>,
    /// Send a NOTIFY to this secondary after each change (debounced, retried
    /// until acknowledged); repeatable.
    #[arg(long, action = ArgAction::Append, value_delimiter = ',', value_name = "ADDR:PORT",
          help_heading = "Zone transfer")]
    pub notify: Vec<SocketAddr>,
    /// TSIG key file (RFC 8945), as `tsig-keygen` prints it: `key "NAME" {
    /// algorithm hmac-sha256; secret "BASE64"; };`. Zone transfers must then
    /// be signed with it (unsigned ones get REFUSED), and NOTIFYs are signed
    /// with it. Reloaded when the file changes.
    #[arg(long, value_name = "FILE", help_heading = "Zone transfer")]
    pub tsig_key: Option<PathBuf>,
    /// Answer PTR queries in this reverse zone (`243.in-addr.arpa`, nibble
    /// `ip6.arpa` zones); repeatable.
    #[arg(long, action = ArgAction::Append, value_delimiter = ',', value_name = "ZONE",
          value_parser = ReverseZone::parse, help_heading = "Reverse lookups")]
    pub reverse_zone: Vec<ReverseZone>,
    /// Also serve the reverse zones of the VIP pools (each rounded down to
    /// whole octets or nibbles). `--reverse-vip-pools` alone means `=true`.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, require_equals = true,
          default_value_t = false, default_missing_value = "true", value_name = "BOOL",
          help_heading = "Reverse lookups")]
    pub reverse_vip_pools: bool,
    /// Kubernetes mode.
    #[command(flatten)]
    pub kubernetes: KubernetesArgs,
    /// DNS over TLS.
    #[command(flatten)]
    pub tls: TlsArgs,
}

/// Flags of the DNS over TLS listener (RFC 7858), off unless `--tls-listen` is given.
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "DNS over TLS")]
pub struct TlsArgs {
    /// Address to answer DNS over TLS on (port 853 by RFC 7858); needs
    /// `--tls-cert` and `--tls-key`.
    #[arg(long, value_name = "ADDR:PORT")]
    pub tls_listen: Option<SocketAddr>,
    /// PEM certificate chain, server certificate first; reloaded when the
    /// file changes.
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1) of `--tls-cert`; reloaded with it.
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
}

/// Limits of the operations listener (`--metrics-listen`), and its debug endpoint.
#[derive(Debug, Clone, Args)]
pub struct OperationsArgs {
    /// Most open connections to the operations listener; more are closed at once.
    #[arg(
        long,
        help_heading = "Operations listener",
        default_value_t = 64,
        value_name = "N"
    )]
    pub metrics_max_connections: usize,
    /// Most open connections to the operations listener from one client address.
    #[arg(
        long,
        help_heading = "Operations listener",
        default_value_t = 8,
        value_name = "N"
    )]
    pub metrics_max_connections_per_client: usize,
    /// A connection to the operations listener must send each request's
    /// head within this long (from its accept, or the end of the previous
    /// response: an idle kept-alive connection is closed after it too).
    #[arg(
        long,
        help_heading = "Operations listener",
        default_value_t = 5,
        value_name = "SECONDS"
    )]
    pub metrics_header_timeout: u64,
    /// A connection to the operations listener on which no byte is read or
    /// written for this long is closed.
    #[arg(
        long,
        help_heading = "Operations listener",
        default_value_t = 10,
        value_name = "SECONDS"
    )]
    pub metrics_idle_timeout: u64,
    /// Serve `/debug/explain` on the operations listener. Operator-only: it
    /// tells whoever reaches the port every service, cluster and endpoint, and
    /// each request costs an explanation. `--debug-explain` alone means `=true`.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, require_equals = true,
          default_value_t = false, default_missing_value = "true", value_name = "BOOL",
          help_heading = "Operations listener")]
    pub debug_explain: bool,
}

/// Limits on DNS over TCP (RFC 7766 §6.2.3, §10).
#[derive(Debug, Clone, Args)]
pub struct TcpArgs {
    /// Most open TCP connections; more are closed at once.
    #[arg(long, default_value_t = 1024, value_name = "N")]
    pub tcp_max_connections: usize,
    /// Most open TCP connections from one client address.
    #[arg(long, default_value_t = 32, value_name = "N")]
    pub tcp_max_connections_per_client: usize,
    /// A TCP connection with no query for this long is closed.
    #[arg(long, default_value_t = 10, value_name = "SECONDS")]
    pub tcp_idle_timeout: u64,
    /// A TCP connection whose client does not take a response for this long
    /// is closed (it stops being read once 16 responses wait).
    #[arg(long, default_value_t = 10, value_name = "SECONDS")]
    pub tcp_write_timeout: u64,
}

/// Where the clusterset comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SourceKind {
    /// The manifest directory (`--manifests`): embedded mode.
    Manifests,
    /// The local cluster's API server and a broker API server.
    Kubernetes,
}

/// Flags of Kubernetes mode (`--source kubernetes`).
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Kubernetes mode")]
pub struct KubernetesArgs {
    /// Where the clusterset comes from.
    #[arg(long, value_enum, default_value = "manifests", value_name = "SOURCE")]
    pub source: SourceKind,
    /// This cluster's id [default: the `cluster.clusterset.k8s.io` ClusterProperty].
    /// In embedded mode too (a manifest folder's name; default: none): the
    /// cluster this server answers for, whose endpoints a `PreferClose`
    /// headless name answers with and whose ClusterIPs come first.
    #[arg(long, value_name = "ID")]
    pub cluster_id: Option<String>,
    /// Kubeconfig of the local cluster [default: in-cluster config, else
    /// `$KUBECONFIG` or `~/.kube/config`].
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Context of `--kubeconfig` to use [default: its current context].
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
    /// Kubeconfig of the broker API server [default: the local cluster's].
    #[arg(long, value_name = "FILE")]
    pub broker_kubeconfig: Option<PathBuf>,
    /// Context of `--broker-kubeconfig` to use.
    #[arg(long, value_name = "NAME")]
    pub broker_context: Option<String>,
    /// Namespace on the broker holding the clusterset's shared state.
    #[arg(long, default_value = "clusterset-broker", value_name = "NAMESPACE")]
    pub broker_namespace: String,
    /// Namespace of the leader Lease in the local cluster (only its holder writes).
    #[arg(
        long,
        env = "POD_NAMESPACE",
        default_value = "clusterset-dns",
        value_name = "NAMESPACE"
    )]
    pub lease_namespace: String,
    /// Seconds a leader Lease lasts without renewal.
    #[arg(long, default_value_t = 15, value_name = "SECONDS")]
    pub lease_duration: u64,
    /// Seconds after which a cluster whose heartbeat on the broker has not
    /// changed is dead: its endpoints leave every answer until it returns
    /// (renewed every quarter of it; keep it above `--lease-duration`).
    #[arg(long, default_value_t = 30, value_name = "SECONDS")]
    pub cluster_timeout: u64,
    /// This replica's name in the Lease [default: `$POD_NAME` or the host name, plus a random suffix].
    #[arg(long, value_name = "NAME")]
    pub identity: Option<String>,
    /// Put pod IPs in the EndpointSlices of ClusterIP services, unless their
    /// ServiceExport's `clusterset-dns.io/use-pod-ips` annotation says
    /// otherwise; without, they carry the Service's ClusterIPs.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, require_equals = true,
          default_value_t = true, default_missing_value = "true", value_name = "BOOL")]
    pub pod_ips: bool,
    /// Make each ClusterSetIP import's VIP route through the member's own
    /// kube-proxy: `none`, `per-cluster` (a derived Service with a ClusterIP
    /// of this cluster's range, which this member then answers) or
    /// `clusterset` (the derived Service pinned to the clusterset VIPs, which
    /// needs a ServiceCIDR holding the VIP pools; see the README, "Working
    /// connections").
    #[arg(long, default_value = "none", value_name = "MODE",
          value_parser = clap::builder::PossibleValuesParser::new(DerivedServices::VALUES)
              .map(|s| s.parse::<DerivedServices>().expect("one of VALUES")))]
    pub derived_services: DerivedServices,
    /// `CLUSTER=NAMESPACE`: a cluster listed here may export only from the
    /// namespaces listed for it; its records for others are refused, and in
    /// its own cluster such an export is `Valid=False` (`NamespaceNotAllowed`).
    /// Repeatable or comma-separated; a config file may give a mapping of
    /// cluster to namespaces. Clusters not listed: any namespace but the
    /// protected ones.
    #[arg(long, action = ArgAction::Append, value_delimiter = ',',
          value_name = "CLUSTER=NAMESPACE", value_parser = parse_cluster_namespace)]
    pub cluster_namespaces: Vec<(ClusterId, String)>,
    /// `CLUSTER=CIDR`: a cluster listed here has its ClusterIPs and endpoints
    /// inside the networks listed for it; its records with others are
    /// refused. Repeatable or comma-separated; a config file may give a
    /// mapping of cluster to CIDRs. Clusters not listed: any routable address.
    #[arg(long, action = ArgAction::Append, value_delimiter = ',',
          value_name = "CLUSTER=CIDR", value_parser = parse_cluster_cidr)]
    pub cluster_cidrs: Vec<(ClusterId, IpNet)>,
    /// Most services one cluster may export. Past it, that cluster's exports
    /// last by namespace and name are left out of every import (the same in
    /// every member); in its own cluster they are `Valid=False`
    /// (`ExportLimitReached`) and not published.
    #[arg(long, default_value_t = 250_000, value_name = "N")]
    pub max_exports_per_cluster: u64,
    /// Most endpoints one cluster's exports may hold together. Past it, its
    /// exports last by namespace and name are left out whole, as for
    /// `--max-exports-per-cluster` (`EndpointLimitReached`).
    #[arg(long, default_value_t = 1_000_000, value_name = "N")]
    pub max_endpoints_per_cluster: u64,
    /// Most ClusterSetIP imports of one namespace with clusterset VIPs. Past
    /// it, the imports last by name get none: they resolve to every
    /// cluster's ClusterIPs, and their ServiceImport says `VIPLimitReached`.
    #[arg(long, default_value_t = 10_000, value_name = "N")]
    pub max_vips_per_namespace: u64,
}

/// Output format of `status` and `explain`.
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
    /// YAML file setting any of these flags under its long name
    /// (`manifests: config/demo`); flags on the command line win. The keys of
    /// `serve` are accepted too (validated, then ignored), so one file serves both.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Where the clusterset comes from.
    #[command(flatten)]
    pub clusterset: ClustersetArgs,
    /// Output format.
    #[arg(long, short, value_enum, default_value = "text")]
    pub output: Format,
    /// Kubernetes mode: read the API servers (read only).
    #[command(flatten)]
    pub kubernetes: KubernetesArgs,
}

/// `explain` arguments.
#[derive(Debug, Clone, Args)]
pub struct ExplainArgs {
    /// The DNS name asked, such as `web.shop.svc.clusterset.local`.
    #[arg(value_name = "NAME")]
    pub name: String,
    /// The query type: A, AAAA, SRV, ... [default: A].
    #[arg(value_name = "TYPE")]
    pub rtype: Option<String>,
    /// Output format.
    #[arg(long, short, value_enum, default_value = "text")]
    pub output: Format,
    /// The server's configuration.
    #[command(flatten)]
    pub serve: ServeArgs,
}

impl StatusArgs {
    /// The `serve` flags this `status` stands for: its clusterset and
    /// Kubernetes mode flags, the others (DNS, which `status` does not
    /// show) at their defaults.
    pub fn serve_args(&self) -> ServeArgs {
        ServeArgs {
            config: self.config.clone(),
            clusterset: self.clusterset.clone(),
            kubernetes: self.kubernetes.clone(),
            ..ServeArgs::default()
        }
    }
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

fn parse_log_level(s: &str) -> Result<String, String> {
    tracing_subscriber::EnvFilter::builder()
        .parse(s)
        .map(|_| s.to_owned())
        .map_err(|e| e.to_string())
}

fn parse_zone(s: &str) -> Result<Name, String> {
    if s.trim_matches('.').is_empty() {
        return Err("the zone must not be empty or the root".into());
    }
    let mut name = Name::from_ascii(s).map_err(|e| format!("invalid zone {s:?}: {e}"))?;
    name.set_fqdn(true);
    Ok(name.to_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nameserver_addresses_repeat_and_split_on_commas() {
        let cli = Cli::parse_from([
            "x",
            "serve",
            "--nameserver-address",
            "10.96.0.53,fd00::53",
            "--nameserver-address",
            "10.96.0.54",
        ]);
        let Some(Command::Serve(args)) = cli.command else {
            panic!("serve expected")
        };
        let expected: Vec<IpAddr> = ["10.96.0.53", "fd00::53", "10.96.0.54"]
            .iter()
            .map(|ip| ip.parse().unwrap())
            .collect();
        assert_eq!(args.nameserver_address, expected);
        assert!(ServeArgs::default().nameserver_address.is_empty());
    }

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
            crate::runtime::assembly::state_file(&args.clusterset),
            PathBuf::from("config/demo/.clusterset-dns/vips.json")
        );
        assert_eq!(
            crate::runtime::assembly::serial_file(&args.clusterset),
            PathBuf::from("config/demo/.clusterset-dns/vips.serial")
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
