//! "Serving every name correctly": a sample of each kind of name, spread over
//! the clusterset, each with the answer it must get, asked over real UDP.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use hickory_proto::op::Message;
use hickory_proto::rr::RecordType;
use test_support::{
    Outcome, in_v4_pool, outcome, question, srv_targets, tcp_raw, udp_raw, with_edns,
};

use crate::layout::Layout;

/// How long one query may wait for its answer before it counts as wrong.
const QUERY_WAIT: Duration = Duration::from_millis(300);
/// EDNS payload of the probes (the server answers at most 1232 bytes over
/// UDP, as DNS Flag Day 2020 advises; larger answers come truncated, and are
/// asked again over TCP, as resolvers do: RFC 7766 §3).
const PAYLOAD: u16 = 4096;

/// What a probed name must answer.
#[derive(Clone, Debug)]
pub enum Expect {
    /// A: one address of the IPv4 VIP pool (the same in every member, checked apart).
    Vip,
    /// A: exactly these addresses.
    Ips(BTreeSet<IpAddr>),
    /// SRV: exactly these `(target, port)`.
    Srv(BTreeSet<(String, u16)>),
    NxDomain,
}

#[derive(Clone, Debug)]
pub struct Probe {
    pub name: String,
    pub expect: Expect,
}

fn fqdn(labels: &str) -> String {
    format!("{labels}.svc.clusterset.local.")
}

/// `per_kind` names of each kind, spread evenly over the services and over
/// the namespaces: the k-th is k services past the k-th even step, since the
/// even steps alone can all fall in one namespace (at 100k services every
/// 5000th is in `ns0`), and a member that happened to write one namespace
/// first would then look served long before the others were.
pub fn sample(lay: &Layout, per_kind: usize) -> Vec<Probe> {
    let spread = |n: usize| (0..per_kind.min(n)).map(move |k| (k * n / per_kind.min(n) + k) % n);
    let mut probes = Vec::new();
    for i in spread(lay.services) {
        let (ns, name) = Layout::csip(i);
        probes.push(Probe {
            name: fqdn(&format!("{name}.{ns}")),
            expect: Expect::Vip,
        });
        let target = fqdn(&format!("{name}.{ns}"));
        probes.push(Probe {
            name: fqdn(&format!("_http._tcp.{name}.{ns}")),
            expect: Expect::Srv([(target, 80)].into()),
        });
    }
    for (k, h) in spread(lay.headless).enumerate() {
        let (ns, name) = Layout::hl(h);
        let all = (0..lay.clusters)
            .flat_map(|ci| (0..lay.endpoints).map(move |j| IpAddr::V4(lay.pod_ip(ci, h, j))))
            .collect();
        probes.push(Probe {
            name: fqdn(&format!("{name}.{ns}")),
            expect: Expect::Ips(all),
        });
        let (ci, j) = (k % lay.clusters, 2 * (k % lay.endpoints.div_ceil(2)));
        if let Some(host) = Layout::hostname(h, j) {
            let cluster = Layout::cluster(ci);
            probes.push(Probe {
                name: fqdn(&format!("{host}.{cluster}.{name}.{ns}")),
                expect: Expect::Ips([IpAddr::V4(lay.pod_ip(ci, h, j))].into()),
            });
        }
    }
    probes.push(Probe {
        name: fqdn("no-such-service.ns0"),
        expect: Expect::NxDomain,
    });
    probes
}

/// One UDP query (EDNS, [`PAYLOAD`]), over TCP again when the answer is
/// truncated (a headless name of 34 endpoints × 3 clusters answers ~1.7 kB);
/// `None` without an answer in time.
pub async fn ask(dns: SocketAddr, name: &str, rtype: RecordType) -> Option<Message> {
    let bytes = with_edns(question(name, rtype), PAYLOAD)
        .to_vec()
        .expect("query encodes");
    let reply = Message::from_vec(&udp_raw(dns, &bytes, QUERY_WAIT).await?).ok()?;
    if !reply.metadata.truncation {
        return Some(reply);
    }
    Message::from_vec(&tcp_raw(dns, &bytes).await).ok()
}

/// The address a name answers, when it answers exactly one.
pub async fn single_address(dns: SocketAddr, name: &str) -> Option<IpAddr> {
    match outcome(&ask(dns, name, RecordType::A).await?) {
        Outcome::Ips(ips) if ips.len() == 1 => ips.into_iter().next(),
        _ => None,
    }
}

/// Whether `dns` answers the probe as expected: the VIP it answered for
/// [`Expect::Vip`], or what came instead.
async fn check(dns: SocketAddr, probe: &Probe) -> Result<Option<IpAddr>, String> {
    let rtype = match probe.expect {
        Expect::Srv(_) => RecordType::SRV,
        _ => RecordType::A,
    };
    let reply = ask(dns, &probe.name, rtype)
        .await
        .ok_or_else(|| format!("{}: no answer", probe.name))?;
    let got = outcome(&reply);
    let good = match (&probe.expect, &got) {
        (Expect::Vip, Outcome::Ips(ips)) if ips.len() == 1 && ips.iter().all(in_v4_pool) => {
            return Ok(ips.iter().next().copied());
        }
        (Expect::Ips(want), Outcome::Ips(got)) => want == got,
        (Expect::Srv(want), Outcome::Ips(_)) => *want == srv_targets(&reply),
        (Expect::NxDomain, Outcome::NxDomain) => true,
        _ => false,
    };
    if good {
        return Ok(None);
    }
    let truncated = if reply.metadata.truncation {
        " (truncated)"
    } else {
        ""
    };
    let mut got = format!("{got:?}");
    got.truncate(120);
    Err(format!("{}: {got}{truncated}", probe.name))
}

/// Every probe answered right in one round: the VIPs seen, by name; else the
/// first wrong answer.
pub async fn all_correct(
    dns: SocketAddr,
    probes: &[Probe],
) -> Result<BTreeMap<String, IpAddr>, String> {
    let mut vips = BTreeMap::new();
    for probe in probes {
        if let Some(vip) = check(dns, probe).await? {
            vips.insert(probe.name.clone(), vip);
        }
    }
    Ok(vips)
}
