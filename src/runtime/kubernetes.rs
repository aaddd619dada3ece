//! Kubernetes mode: the local cluster's API server and a broker API server
//! are the source, and this cluster's share of the clusterset is written back.
//!
//! Every replica watches (`sources/kubernetes/watch.rs`, with reflector
//! caches for the writers) the local namespaces, ServiceExports, Services and
//! EndpointSlices, and the broker's export records, VIP records and
//! EndpointSlices of every cluster; each event becomes [`Change`]s for the
//! same engine and DNS index as embedded mode, so answers follow every event.
//! The replica holding the leader Lease also writes (see
//! [`crate::writeback::writer`]): this cluster's exports to the broker, VIP
//! claims, and the local ServiceImports, mirrored EndpointSlices and
//! ServiceExport conditions. This file is the wiring: which watch feeds
//! what, the writer pool, resync and the heartbeat.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::reflector;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;
use tracing::{debug, info, warn};

use crate::cli::KubernetesArgs;
use crate::k8s::crd::ServiceImport;
use crate::k8s::records;
use crate::model::backoff::Backoff;
use crate::model::{Change, ClusterId, Hasher, ServiceKey};
use crate::ops::metrics::Metrics;
use crate::runtime::assembly::Kubernetes;
use crate::runtime::pipeline::{Pipeline, PipelineSettings, Serving};
use crate::sources::kubernetes::client::Connection;
use crate::sources::kubernetes::readers::{FactSource, FactSources};
use crate::sources::kubernetes::served::Place;
use crate::sources::kubernetes::watch::{Merged, Watches, batches};
use crate::writeback::caches::Caches;
use crate::writeback::heartbeat::{self, Heartbeat, Liveness};
use crate::writeback::lease::{self, Candidate};
use crate::writeback::plan::WriterSettings;
use crate::writeback::queue::{Lane, WorkQueue};
use crate::writeback::seen::Follow;
use crate::writeback::vip_claims::{self, VipClaims};
use crate::writeback::writer::{WriteError, Writer};

/// Writers working on different services at once.
const WORKERS: usize = 8;
/// A leader checks every service again once per this long, to repair drift
/// no watch event reported (each object it writes is watched, so a change
/// to one queues its service at once): controller-runtime's default sync
/// period is 10 hours. The pass is spread evenly over the period, one
/// [`RESYNC_SLICES`]th at a time, so an idle member stays idle and a pass
/// never queues a clusterset's worth of services ahead of a change.
const RESYNC_PASS: Duration = Duration::from_secs(30 * 60);
/// Slices of one resync pass (one every 5 s).
const RESYNC_SLICES: u32 = 360;
/// Age after which a VIP claim no VIP record keeps is released: a writer
/// writes the record milliseconds after claiming.
const CLAIM_GRACE: Duration = Duration::from_secs(60);
/// Claims are swept (a list of every claim on the broker) when a replica
/// starts leading, [`CLAIM_GRACE`] later (claims a writer left just before
/// the handover are then old enough), and after every resync pass: a claim
/// outlives its record only when a writer stops between the two writes, and
/// at clusterset size the list is tens of megabytes.
const FIRST_SWEEPS: [Duration; 2] = [Duration::ZERO, CLAIM_GRACE];
/// Waits before a failed service is written again: 40 ms, doubled after
/// each failure in a row, up to 10 s.
const RETRY: Backoff = Backoff::new(Duration::from_millis(40), Duration::from_secs(10));

/// Everything the watches and writers share.
struct Controller {
    connection: Connection,
    args: KubernetesArgs,
    metrics: Arc<Metrics>,
    queue: Arc<WorkQueue>,
    pipeline: Arc<Mutex<Pipeline>>,
    tasks: JoinSet<()>,
    watches: Watches,
    /// Global default of the VIP switch.
    clusterset_ip: bool,
}

/// Follows the local cluster and the broker (`source`) until `shutdown`,
/// feeding the pipeline built from `settings`, and writes while this replica leads; releases the
/// Lease on the way out.
pub(crate) async fn follow(
    settings: PipelineSettings,
    source: Kubernetes,
    args: KubernetesArgs,
    serving: Serving,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let metrics = serving.metrics.clone();
    let index = settings.index.clone();
    let clusterset_ip = settings.engine.clusterset_ip;
    let (sender, mut incoming) = batches();
    let cluster = source.connection.cluster.clone();
    let mut ctx = Controller {
        watches: Watches::new(cluster, metrics.clone(), sender),
        connection: source.connection,
        args,
        metrics: metrics.clone(),
        queue: Arc::new(WorkQueue::new(RETRY)),
        pipeline: Pipeline::new(settings, Some(serving))?.shared(),
        tasks: JoinSet::new(),
        clusterset_ip,
    };
    let (caches, fact_sources) = ctx.watch_all(source.facts);
    // The first sync waits for every fact source.
    incoming.wait_for(fact_sources);
    let (synced_tx, synced_rx) = watch::channel(false);
    let (leading_tx, leading_rx) = watch::channel(false);
    ctx.start_writers(caches.clone(), synced_rx.clone(), leading_rx.clone());
    ctx.heartbeats(leading_rx.clone());
    ctx.resync_when_leading(caches, synced_rx, leading_rx);
    let candidate = Candidate::new(
        ctx.connection.local.clone(),
        &ctx.args.lease_namespace,
        ctx.args
            .identity
            .clone()
            .unwrap_or_else(lease::default_identity),
        Duration::from_secs(ctx.args.lease_duration.max(3)),
    );
    let campaign = {
        let metrics = metrics.clone();
        let shutdown = shutdown.clone();
        AbortOnDropHandle::new(tokio::spawn(async move {
            candidate.run(leading_tx, shutdown, &metrics).await
        }))
    };
    info!(cluster = %ctx.connection.cluster, "following the local cluster and the broker");

    // Services to write, kept until the first sync (the writers wait for it),
    // then queued in this map's order: its hasher's seed is this process's,
    // so members do not work through the services in the same order. In the
    // list order they all would, and meet on every VIP claim at once (fresh
    // start at 110k services: three times the broker GETs, see
    // `bench/README.md`).
    let mut first_writes: HashMap<ServiceKey, Lane, Hasher> = HashMap::default();
    loop {
        let merged = tokio::select! {
            () = shutdown.cancelled() => break,
            merged = incoming.next() => merged,
        };
        let Some(Merged {
            changes,
            all_synced,
        }) = merged
        else {
            break;
        };
        // A change to this cluster's own objects is published first.
        let me = &ctx.connection.cluster;
        let mut keys: Vec<(ServiceKey, Lane)> = changes
            .iter()
            .filter_map(|c| match c {
                Change::Upsert(cluster, key, _) | Change::Delete(cluster, key, _)
                    if cluster == me =>
                {
                    Some((key.clone(), Lane::Publish))
                }
                _ => Some((c.service()?.clone(), Lane::Changed)),
            })
            .collect();
        let judged: Vec<ClusterId> = changes
            .iter()
            .filter_map(|c| match c {
                Change::Live(cluster, _) => Some(cluster.clone()),
                _ => None,
            })
            .collect();
        {
            let mut pipeline = ctx.pipeline.lock().unwrap_or_else(|e| e.into_inner());
            if *synced_tx.borrow() {
                pipeline.apply(changes);
            } else if all_synced {
                pipeline.apply_initial(changes);
                info!(services = index.len(), "first sync done");
                synced_tx.send_replace(true);
            } else {
                pipeline.load(changes);
            }
            for cluster in &judged {
                let services = pipeline.engine().services_of(cluster);
                keys.extend(services.into_iter().map(|key| (key, Lane::Changed)));
            }
        }
        if !*synced_tx.borrow() {
            for (key, lane) in keys {
                let queued = first_writes.entry(key).or_insert(lane);
                *queued = (*queued).min(lane);
            }
            continue;
        }
        for (key, lane) in std::mem::take(&mut first_writes).into_iter().chain(keys) {
            ctx.queue.add_in(key, lane);
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), campaign).await;
    ctx.tasks.abort_all();
    Ok(())
}

impl Controller {
    /// Starts every watch; returns the caches the writers compare against
    /// and the names of the fact sources.
    fn watch_all(&mut self, facts: FactSources) -> (Caches, HashSet<&'static str>) {
        let local = self.connection.local.clone();
        let FactSources {
            namespaces,
            services,
            service_exports,
            endpoint_slices,
            broker_records,
            broker_slices,
        } = facts;
        let (namespace_cache, writer) = reflector::store();
        let caches = Caches::new(self.connection.cluster.clone(), namespace_cache);
        let mut names = vec![
            self.facts(services, None),
            self.facts(service_exports, Some(caches.local_exports.clone())),
            self.facts(endpoint_slices, None),
            self.facts(broker_records, Some(caches.broker_records.clone())),
            self.facts(broker_slices, Some(caches.broker_slices.clone())),
        ];
        // Where the broker is this cluster's own API server, the broker
        // namespace holds objects with the same labels: they are the
        // broker's, not this member's, and must not read as stale imports.
        let not_broker = format!("metadata.namespace!={}", self.args.broker_namespace);
        self.written::<ServiceImport>(
            Place::mcs(self.connection.mcs.local_imports.clone(), None),
            records::MANAGED_SELECTOR,
            &not_broker,
            "written/serviceimports",
            caches.local_imports.clone(),
        );
        self.written::<EndpointSlice>(
            Place::fixed(Api::all(local)),
            records::MANAGED_SLICES_SELECTOR,
            &not_broker,
            "written/endpointslices",
            caches.local_slices.clone(),
        );
        self.written::<Service>(
            Place::fixed(Api::all(self.connection.local.clone())),
            records::MANAGED_SELECTOR,
            &not_broker,
            "written/services",
            caches.local_services.clone(),
        );
        self.written::<ConfigMap>(
            Place::fixed(Api::namespaced(
                self.connection.broker.clone(),
                &self.args.broker_namespace,
            )),
            vip_claims::CLAIM_SELECTOR,
            "",
            "broker/vip-claims",
            caches.claims.clone(),
        );
        names.push(self.watch_namespaces(namespaces, writer));
        (caches, names.into_iter().collect())
    }

    /// A watch whose objects are facts; objects `seen` keeps queue their
    /// service. Returns the source's name.
    fn facts<K>(&mut self, source: FactSource<K>, seen: Option<Arc<dyn Follow<K>>>) -> &'static str
    where
        K: Resource<DynamicType: Default>
            + Clone
            + DeserializeOwned
            + Debug
            + Send
            + Sync
            + 'static,
    {
        let queue = self.queue.clone();
        self.watches.facts(&mut self.tasks, source, move |event| {
            for key in seen.iter().flat_map(|s| s.on_event(event)) {
                queue.add(key);
            }
        })
    }

    /// A watch of the objects this controller writes, selected by `labels` and `fields`:
    /// kept in `seen`; a change queues its service.
    fn written<K>(
        &mut self,
        place: Place<K>,
        labels: &str,
        fields: &str,
        resource: &'static str,
        seen: Arc<dyn Follow<K>>,
    ) where
        K: Resource<DynamicType: Default>
            + Clone
            + DeserializeOwned
            + Debug
            + Send
            + Sync
            + 'static,
    {
        let queue = self.queue.clone();
        let config = watcher::Config::default().labels(labels).fields(fields);
        let tasks = &mut self.tasks;
        self.watches
            .spawn(tasks, place, config, resource, move |event| {
                for key in seen.on_event(&event) {
                    queue.add(key);
                }
            });
    }

    /// Namespaces, cached: facts for the engine (a namespace being deleted
    /// counts as gone), and a namespace appearing queues its services.
    /// Returns the source's name.
    fn watch_namespaces(
        &mut self,
        source: FactSource<Namespace>,
        mut cache: reflector::store::Writer<Namespace>,
    ) -> &'static str {
        let queue = self.queue.clone();
        let pipeline = self.pipeline.clone();
        self.watches.facts(&mut self.tasks, source, move |event| {
            cache.apply_watcher_event(event);
            if let Event::Apply(ns) = event {
                let name = ns.name_any();
                let pipeline = pipeline.lock().unwrap_or_else(|e| e.into_inner());
                for key in pipeline
                    .engine()
                    .keys()
                    .filter(|k| **k.namespace() == *name)
                {
                    queue.add(key.clone());
                }
            }
        })
    }

    /// Renews this cluster's heartbeat while this replica leads, and judges
    /// every other cluster's (see [`heartbeat`]).
    fn heartbeats(&mut self, mut leading: watch::Receiver<bool>) {
        let timeout = Duration::from_secs(self.args.cluster_timeout.max(1));
        let cluster = self.connection.cluster.clone();
        let broker = self.connection.broker.clone();
        let namespace = self.args.broker_namespace.clone();
        let beat = Heartbeat::new(broker.clone(), &namespace, cluster.clone(), timeout);
        let metrics = self.metrics.clone();
        self.tasks.spawn(async move {
            while leading.wait_for(|l| *l).await.is_ok() {
                let result = match beat.renew().await {
                    Ok(true) => "updated",
                    Ok(false) => "conflict",
                    Err(error) => {
                        warn!(%error, "cannot renew this cluster's heartbeat on the broker");
                        "error"
                    }
                };
                metrics.api_write("HeartbeatLease", result);
                tokio::time::sleep(beat.period()).await;
            }
        });

        let liveness = Arc::new(Mutex::new(Liveness::new(cluster, timeout)));
        let seen = liveness.clone();
        self.watches.spawn(
            &mut self.tasks,
            Place::fixed(Api::<Lease>::namespaced(broker, &namespace)),
            watcher::Config::default().labels(heartbeat::SELECTOR),
            "broker/leases",
            move |event| {
                let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
                seen.on_event(&event, tokio::time::Instant::now());
            },
        );
        let (batches, metrics) = (self.watches.batches().clone(), self.metrics.clone());
        self.tasks.spawn(async move {
            let mut tick = tokio::time::interval((timeout / 4).min(Duration::from_secs(1)));
            let mut shown = BTreeSet::new();
            loop {
                tick.tick().await;
                let changes = {
                    let mut liveness = liveness.lock().unwrap_or_else(|e| e.into_inner());
                    let changes = liveness.judge(tokio::time::Instant::now());
                    let verdicts = liveness.verdicts().map(|(c, live)| (c.as_ref(), live));
                    metrics.set_clusters_live(&mut shown, verdicts);
                    changes
                };
                for change in &changes {
                    if let Change::Live(cluster, live) = change {
                        info!(%cluster, live, "cluster heartbeat verdict changed");
                    }
                }
                if !batches.send("broker/leases", changes) {
                    return;
                }
            }
        });
    }

    /// Workers that write queued services while this replica leads.
    fn start_writers(
        &mut self,
        caches: Caches,
        synced: watch::Receiver<bool>,
        leading: watch::Receiver<bool>,
    ) {
        let settings = WriterSettings {
            cluster: self.connection.cluster.clone(),
            broker_namespace: self.args.broker_namespace.clone(),
            clusterset_ip: self.clusterset_ip,
            pod_ips: self.args.pod_ips,
            derived: self.args.derived_services,
        };
        let writer = Arc::new(Writer::new(
            settings,
            self.connection.local.clone(),
            self.connection.broker.clone(),
            self.connection.mcs.clone(),
            caches,
            self.pipeline.clone(),
            self.metrics.clone(),
        ));
        for _ in 0..WORKERS {
            let (writer, queue) = (writer.clone(), self.queue.clone());
            let (mut synced, mut leading) = (synced.clone(), leading.clone());
            self.tasks.spawn(async move {
                while synced.wait_for(|s| *s).await.is_ok()
                    && leading.wait_for(|l| *l).await.is_ok()
                {
                    let (key, lane) = queue.next().await;
                    let result = match lane {
                        Lane::Publish => writer.publish(&key).await,
                        Lane::Changed | Lane::Resync => writer.sync(&key).await,
                    };
                    queue.done(&key);
                    match result {
                        Ok(()) => {
                            queue.forget(&key);
                            if lane == Lane::Publish {
                                // The rest of its objects, after what others wait for.
                                queue.add(key);
                            }
                        }
                        Err(WriteError::Waiting(wait)) => queue.add_after(key, wait),
                        Err(error) => {
                            let delay = queue.add_rate_limited(key.clone());
                            if error.namespace_terminating() {
                                debug!(service = %key, retry_in = ?delay, "namespace being deleted; will retry");
                            } else {
                                warn!(service = %key, %error, retry_in = ?delay, "cannot write; will retry");
                            }
                        }
                    }
                }
            });
        }
    }

    /// Queues every service when this replica becomes the leader, then
    /// resyncs them while it leads, one slice at a time (see
    /// [`RESYNC_PASS`]); sweeps VIP claims (see [`FIRST_SWEEPS`]).
    fn resync_when_leading(
        &mut self,
        caches: Caches,
        mut synced: watch::Receiver<bool>,
        mut leading: watch::Receiver<bool>,
    ) {
        let (queue, pipeline, metrics) = (
            self.queue.clone(),
            self.pipeline.clone(),
            self.metrics.clone(),
        );
        let claims = VipClaims::new(
            self.connection.broker.clone(),
            self.connection.mcs.broker_imports.clone(),
            &self.args.broker_namespace,
        );
        let sweep = move |caches: Caches| {
            let claims = claims.clone();
            async move {
                match claims
                    .sweep(|ns, key, ip| caches.vip_recorded(ns, key, ip), CLAIM_GRACE)
                    .await
                {
                    Ok(0) => {}
                    Ok(n) => info!(claims = n, "released VIP claims no record kept"),
                    Err(error) => warn!(%error, "cannot sweep VIP claims"),
                }
            }
        };
        self.tasks.spawn(async move {
            if synced.wait_for(|s| *s).await.is_err() {
                return;
            }
            while leading.wait_for(|l| *l).await.is_ok() {
                metrics.set_leader(true);
                let lead = async {
                    for key in every_service(&pipeline, &caches) {
                        queue.add_later(key);
                    }
                    let mut waited = Duration::ZERO;
                    for at in FIRST_SWEEPS {
                        tokio::time::sleep(at - waited).await;
                        waited = at;
                        sweep(caches.clone()).await;
                    }
                    let tick = RESYNC_PASS / RESYNC_SLICES;
                    loop {
                        let keys = every_service(&pipeline, &caches);
                        let per_slice = keys.len().div_ceil(RESYNC_SLICES as usize).max(1);
                        for slice in keys.chunks(per_slice) {
                            tokio::time::sleep(tick).await;
                            for key in slice {
                                queue.add_later(key.clone());
                            }
                        }
                        sweep(caches.clone()).await;
                    }
                };
                tokio::select! {
                    _ = leading.wait_for(|l| !*l) => metrics.set_leader(false),
                    () = lead => {}
                }
            }
        });
    }
}

/// Every service the engine knows, and those this cluster wrote objects for
/// that the engine no longer knows.
fn every_service(pipeline: &Mutex<Pipeline>, caches: &Caches) -> Vec<ServiceKey> {
    let mut keys: HashSet<ServiceKey> = {
        let pipeline = pipeline.lock().unwrap_or_else(|e| e.into_inner());
        pipeline.engine().keys().cloned().collect()
    };
    keys.extend(caches.broker_records.services());
    keys.extend(caches.broker_slices.services());
    keys.extend(caches.local_imports.services());
    keys.extend(caches.local_slices.services());
    keys.extend(caches.local_services.services());
    keys.into_iter().collect()
}
