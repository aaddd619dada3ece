//! Micro-benchmark of the lookup + answer path: `Index::lookup` through
//! `dns::answer` (no sockets, no encoding), on a clusterset like the one of
//! `bench/throughput.sh`: 3 clusters, 3000 ClusterSetIP services, 30 headless
//! services with 10 ready endpoints per cluster (half with hostnames), plus
//! one headless service `big` with 100 ready endpoints per cluster.
//!
//! The manifests are written to a temporary directory and read back with the
//! manifest source, so the changes are exactly what the server would apply;
//! they go through `Engine::apply` into `Index::update`.
//!
//! Run: `cargo bench --bench lookup`

use std::collections::HashSet;
use std::fmt::Write as _;
use std::hint::black_box;
use std::str::FromStr;

use criterion::{Criterion, criterion_group, criterion_main};
use hickory_proto::rr::{DNSClass, LowerName, Name, RecordType};

use clusterset_dns::dns::{answer, respond_udp};
use clusterset_dns::engine::{Engine, EngineSettings};
use clusterset_dns::index::Index;
use clusterset_dns::sources::manifests::ManifestSource;
use hickory_proto::op::{Edns, Message, Query};

const CLUSTERS: usize = 3;
const SERVICES: usize = 3000;
const HEADLESS: usize = 30;
const ENDPOINTS: usize = 10;
const NAMESPACES: usize = 100;
const BIG_ENDPOINTS: usize = 100;

/// One cluster's manifests of one namespace, as `bench/gen_clusterset.py` writes them.
fn namespace_file(cluster: usize, ns: usize) -> String {
    let mut y = format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: ns{ns}\n");
    for i in (ns..SERVICES).step_by(NAMESPACES) {
        let ip = format!("172.{}.{}.{}", 16 + cluster, i / 256, i % 256);
        let _ = write!(
            y,
            "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: svc-{i}\n  namespace: ns{ns}\n\
             spec:\n  clusterIP: {ip}\n  clusterIPs: [{ip}]\n  ipFamilies: [IPv4]\n  ports:\n\
             \x20 - name: http\n    port: 80\n    protocol: TCP\n\
             ---\napiVersion: multicluster.x-k8s.io/v1alpha1\nkind: ServiceExport\n\
             metadata:\n  name: svc-{i}\n  namespace: ns{ns}\n"
        );
    }
    let big = (ns == 0).then_some((String::from("big"), BIG_ENDPOINTS, 100 + cluster));
    let small = (ns..HEADLESS)
        .step_by(NAMESPACES)
        .map(|h| (format!("hl-{h}"), ENDPOINTS, h));
    for (name, endpoints, octet) in small.chain(big) {
        let _ = write!(
            y,
            "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: ns{ns}\n\
             spec:\n  clusterIP: None\n  ipFamilies: [IPv4]\n  ports:\n\
             \x20 - name: http\n    port: 8080\n    protocol: TCP\n\
             ---\napiVersion: multicluster.x-k8s.io/v1alpha1\nkind: ServiceExport\n\
             metadata:\n  name: {name}\n  namespace: ns{ns}\n\
             ---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n\
             \x20 name: {name}-c{cluster}\n  namespace: ns{ns}\n\
             \x20 labels: {{kubernetes.io/service-name: {name}}}\n\
             addressType: IPv4\nendpoints:\n"
        );
        for j in 0..endpoints {
            let _ = write!(
                y,
                "- addresses: [10.{cluster}.{octet}.{j}]\n  conditions: {{ready: true}}\n"
            );
            if j % 2 == 0 {
                let _ = writeln!(y, "  hostname: {name}-{j}");
            }
        }
    }
    y
}

fn build_index() -> Index {
    let dir = tempfile::tempdir().expect("temporary directory");
    for cluster in 1..=CLUSTERS {
        let path = dir.path().join(format!("c{cluster}"));
        std::fs::create_dir_all(&path).expect("cluster directory");
        for ns in 0..NAMESPACES {
            std::fs::write(
                path.join(format!("ns{ns}.yaml")),
                namespace_file(cluster, ns),
            )
            .expect("manifest file");
        }
    }
    let changes = ManifestSource::new(dir.path()).rescan(&HashSet::new());
    let mut engine = Engine::new(EngineSettings::default());
    let zone = Name::from_str("clusterset.local.").expect("zone name");
    let index = Index::new(zone, 5, false, 1);
    for (key, import) in engine.apply(changes) {
        index.update(&key, import);
    }
    index.commit();
    index.set_synced();
    assert_eq!(
        index.len(),
        SERVICES + HEADLESS + 1,
        "every service is served"
    );
    index
}

fn lookup(c: &mut Criterion) {
    let index = build_index();
    let name = |s: &str| LowerName::from(Name::from_str(s).expect("valid name"));
    let cases = [
        (
            "clustersetip_A",
            "svc-1234.ns34.svc.clusterset.local.",
            RecordType::A,
        ),
        (
            "clustersetip_AAAA_nodata",
            "svc-1234.ns34.svc.clusterset.local.",
            RecordType::AAAA,
        ),
        (
            "clustersetip_port_SRV",
            "_http._tcp.svc-1234.ns34.svc.clusterset.local.",
            RecordType::SRV,
        ),
        (
            "headless_A_30",
            "hl-7.ns7.svc.clusterset.local.",
            RecordType::A,
        ),
        (
            "headless_SRV_30",
            "hl-7.ns7.svc.clusterset.local.",
            RecordType::SRV,
        ),
        (
            "headless_A_300",
            "big.ns0.svc.clusterset.local.",
            RecordType::A,
        ),
        (
            "headless_SRV_300",
            "big.ns0.svc.clusterset.local.",
            RecordType::SRV,
        ),
        (
            "pod_hostname_A",
            "hl-7-4.c2.hl-7.ns7.svc.clusterset.local.",
            RecordType::A,
        ),
        (
            "pod_dashed_ip_A",
            "10-2-7-3.c2.hl-7.ns7.svc.clusterset.local.",
            RecordType::A,
        ),
        (
            "nxdomain",
            "nope-1.ns34.svc.clusterset.local.",
            RecordType::A,
        ),
    ];
    let mut group = c.benchmark_group("answer");
    for (label, qname, rtype) in cases {
        let qname = name(qname);
        let probe = answer(&index, &qname, rtype, DNSClass::IN);
        assert!(probe.authoritative, "{label}: the name is in the zone");
        group.bench_function(label, |b| {
            b.iter(|| answer(&index, black_box(&qname), black_box(rtype), DNSClass::IN))
        });
    }
    group.finish();

    // The whole UDP path on a wire query with EDNS: decode, cache, patch.
    let peer = "127.0.0.1:53000".parse().expect("an address");
    let mut group = c.benchmark_group("udp");
    let mut out = Vec::with_capacity(4096);
    for (label, qname, rtype) in cases {
        let mut query = Message::query();
        query.add_query(Query::query(
            Name::from_str(qname).expect("valid name"),
            rtype,
        ));
        let mut edns = Edns::new();
        edns.set_max_payload(1232);
        query.set_edns(edns);
        let packet = query.to_vec().expect("the query encodes");
        respond_udp(&index, &packet, peer, &mut out).expect("answered");
        group.bench_function(label, |b| {
            b.iter(|| {
                out.clear();
                respond_udp(&index, black_box(&packet), peer, &mut out)
            })
        });
    }
    group.finish();
}

criterion_group!(benches, lookup);
criterion_main!(benches);
