//! Clusters whose heartbeat timed out. They keep their exports, so the import,
//! its ports and its VIPs stay (nothing a cluster published is forgotten
//! while it is away), but they back nothing: their endpoints and ClusterIPs
//! leave the import, and with them its DNS answers, mirrored EndpointSlices
//! and `status.clusters`, until the heartbeat resumes.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::model::ClusterId;
use crate::model::conditions::{Condition, READY, reason};
use crate::model::import::Import;

/// Leaves the dead clusters out of `import`; its `Ready` condition names
/// them (false when no live cluster is left, with the MCS API's reason
/// `Pending`: the import waits for one to return). Copies nothing when
/// none is dead.
pub(crate) fn leave_out_dead(import: &mut Arc<Import>, dead: &BTreeSet<ClusterId>) {
    if !import.clusters.iter().any(|c| dead.contains(&c.cluster)) {
        return;
    }
    let import = Arc::make_mut(import);
    let (gone, live): (Vec<_>, Vec<_>) = std::mem::take(&mut import.clusters)
        .into_iter()
        .partition(|c| dead.contains(&c.cluster));
    import.clusters = live;
    if !import.ready.status {
        return;
    }
    let names: Vec<&str> = gone.iter().map(|c| &*c.cluster).collect();
    let message = format!("no heartbeat from {}: left out", names.join(", "));
    let ready = if import.clusters.is_empty() {
        Condition::new(READY, false, reason::PENDING, message)
    } else {
        Condition::new(READY, true, reason::READY, message)
    };
    import.ready = Arc::new(ready);
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::super::aggregate::tests::{export, service, slice};
    use super::super::{Engine, EngineSettings};
    use super::*;
    use crate::model::conditions::{On, is_written};
    use crate::model::{Change, Object, ServiceKey};

    fn key() -> ServiceKey {
        ServiceKey::new("shop", "web")
    }

    fn exports(cluster: &str, ip: &str, pod: &str, age: i64) -> [Change; 3] {
        let upsert = |object| Change::Upsert(cluster.into(), key(), object);
        [
            upsert(Object::Service(Arc::new(service(&[ip], &[("http", 80)])))),
            upsert(Object::Export(export(age).into())),
            upsert(Object::Slice("s".into(), slice(&[(pod, None, true)]))),
        ]
    }

    fn pods(engine: &Engine) -> Vec<IpAddr> {
        let import = engine.get(&key()).unwrap().import.as_ref().unwrap();
        import
            .clusters
            .iter()
            .flat_map(|c| c.endpoints.iter().map(|e| e.address))
            .collect()
    }

    /// A dead cluster's endpoints leave the import and come back with its
    /// heartbeat; the VIP stays throughout, also when every exporter is dead.
    #[test]
    fn dead_clusters_back_nothing_and_keep_the_vip() {
        let mut engine = Engine::new(EngineSettings::default());
        engine.apply(exports("east", "10.0.0.1", "10.1.0.1", 1));
        engine.apply(exports("west", "10.0.0.2", "10.2.0.1", 2));
        let import = |e: &Engine| e.get(&key()).unwrap().import.clone().unwrap();
        let vips = import(&engine).vips.clone();
        assert_eq!(
            pods(&engine),
            [
                "10.1.0.1".parse::<IpAddr>().unwrap(),
                "10.2.0.1".parse().unwrap()
            ]
        );

        let updates = engine.apply([Change::Live("west".into(), false)]);
        assert_eq!(updates.len(), 1, "every service of west is reconciled");
        assert_eq!(pods(&engine), ["10.1.0.1".parse::<IpAddr>().unwrap()]);
        let ready = &import(&engine).ready;
        assert!(ready.status && ready.message.contains("west"), "{ready:?}");
        assert!(is_written(On::ServiceImport, ready), "{ready:?}");
        assert_eq!(import(&engine).vips, vips);
        assert_eq!(engine.stats().endpoints, 1);

        engine.apply([Change::Live("east".into(), false)]);
        assert!(pods(&engine).is_empty());
        let ready = &import(&engine).ready;
        assert_eq!((ready.status, &*ready.reason), (false, reason::PENDING));
        assert!(is_written(On::ServiceImport, ready), "{ready:?}");
        assert_eq!(
            import(&engine).vips,
            vips,
            "the VIP outlives the heartbeats"
        );

        engine.apply([
            Change::Live("east".into(), true),
            Change::Live("west".into(), true),
        ]);
        assert_eq!(pods(&engine).len(), 2);
        assert!(import(&engine).ready.status && import(&engine).ready.message.is_empty());
    }

    /// Without VIPs a dead cluster's ClusterIPs are not answered either.
    #[test]
    fn dead_clusters_cluster_ips_are_not_served() {
        let settings = EngineSettings {
            clusterset_ip: false,
            ..EngineSettings::default()
        };
        let mut engine = Engine::new(settings);
        engine.apply(exports("east", "10.0.0.1", "10.1.0.1", 1));
        engine.apply(exports("west", "10.0.0.2", "10.2.0.1", 2));
        engine.apply([Change::Live("east".into(), false)]);
        let import = engine.get(&key()).unwrap().import.clone().unwrap();
        assert_eq!(
            import.addresses[..],
            ["10.0.0.2".parse::<IpAddr>().unwrap()]
        );
    }
}
