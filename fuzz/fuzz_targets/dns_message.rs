//! The DNS message path: any bytes as a query over UDP (the fast path, with
//! its cache and truncation) and over TCP, against the demo clusterset with
//! cluster targeting and a reverse zone. No panic, and every UDP reply is a
//! response (QR set) with the query's id, at most 65535 bytes.
#![no_main]

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::LazyLock;

use clusterset_dns::cli::ServeArgs;
use clusterset_dns::dns::{Handled, handle, respond_udp};
use clusterset_dns::engine::Engine;
use clusterset_dns::index::{Index, ReverseZone};
use clusterset_dns::runtime::assembly::engine_settings;
use clusterset_dns::sources::manifests::ManifestSource;
use hickory_server::net::xfer::Protocol;
use libfuzzer_sys::fuzz_target;

/// The demo clusterset's index, built as `serve` builds it.
static INDEX: LazyLock<Index> = LazyLock::new(|| {
    let args = ServeArgs::default();
    let demo = concat!(env!("CARGO_MANIFEST_DIR"), "/../config/demo");
    let mut engine = Engine::new(engine_settings(&args.clusterset));
    let changes = ManifestSource::new(demo).rescan(&HashSet::new());
    let reverse = ["243.in-addr.arpa", "10.in-addr.arpa"].map(|z| ReverseZone::parse(z).unwrap());
    let index = Index::new(args.zone.clone(), args.ttl, true, 1).with_reverse_zones(reverse.into());
    for (key, import) in engine.apply(changes) {
        index.update(&key, import);
    }
    index.commit();
    index.set_synced();
    index
});

fuzz_target!(|data: &[u8]| {
    let peer: SocketAddr = "127.0.0.1:53000".parse().unwrap();
    let mut out = Vec::new();
    // Twice: the second may come from the response cache.
    for _ in 0..2 {
        out.clear();
        if respond_udp(&INDEX, data, peer, &mut out).is_some() && !out.is_empty() {
            assert!(out.len() >= 12, "a reply holds a header");
            assert!(out[2] & 0x80 != 0, "QR set");
            assert_eq!(out[..2], data[..2], "the id echoed");
        }
    }
    match handle(&INDEX, data, peer, Protocol::Tcp) {
        Handled::Answered(request, mut response) => {
            if let Ok(bytes) = response.encode_stream(&request, true) {
                assert!(bytes.len() <= 65535);
            }
        }
        Handled::Malformed(bytes, _) => assert!(bytes.len() >= 12),
        Handled::Ignored => {}
    }
});
