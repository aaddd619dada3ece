//! Running the watches of Kubernetes mode: one kube-rs watcher per kind,
//! whose health (in sync, restarted, failed) goes to the metrics, and the
//! fact sources' events reduced to changes and batched for the one apply
//! loop (ARCHITECTURE.md, "The flow").

use std::collections::HashSet;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use kube::Resource;
use kube::api::ListParams;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tracing::{error, info, warn};

use super::facts::{Delta, Facts};
use super::readers::FactSource;
use super::served::{self, Place};
use crate::model::{Change, ClusterId};
use crate::ops::metrics::Metrics;

/// A healthy watch counts as in sync this often, even when nothing changes.
const HEARTBEAT: Duration = Duration::from_secs(5);

/// Where the watches of one process run and report.
pub(crate) struct Watches {
    /// The cluster this process runs in (names its watches' metrics).
    cluster: ClusterId,
    metrics: Arc<Metrics>,
    batches: BatchSender,
}

impl Watches {
    /// Watches of `cluster`, reporting to `metrics` and sending their
    /// changes to `batches`.
    pub(crate) fn new(cluster: ClusterId, metrics: Arc<Metrics>, batches: BatchSender) -> Self {
        Self {
            cluster,
            metrics,
            batches,
        }
    }

    /// Where changes go besides the fact sources' (the clusters' liveness).
    pub(crate) fn batches(&self) -> &BatchSender {
        &self.batches
    }

    /// Watches a fact source in `tasks`: `also` sees each event first, then
    /// its facts go to the apply loop. Returns the source's name.
    pub(crate) fn facts<K>(
        &self,
        tasks: &mut JoinSet<()>,
        source: FactSource<K>,
        mut also: impl FnMut(&Event<K>) + Send + 'static,
    ) -> &'static str
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
        K::DynamicType: Default,
    {
        let FactSource {
            resource,
            api,
            labels,
            read,
        } = source;
        let mut facts = Facts::new(read);
        let batches = self.batches.clone();
        let mut config = watcher::Config::default();
        if let Some(labels) = labels {
            config = config.labels(labels);
        }
        let metrics = self.metrics.clone();
        self.spawn(tasks, api, config, resource, move |event| {
            also(&event);
            let delta = facts.on_event(event);
            if delta.ignored {
                metrics.object_ignored(resource);
            }
            batches.forward(resource, delta);
        });
        resource
    }

    /// Watches `place` (the objects `config` selects) in `tasks`, calling
    /// `on_event` with each event; `resource` names it in logs and metrics.
    /// A 404 after which the kind is served at another version moves the
    /// watch there: it lists again, as after any restart.
    pub(crate) fn spawn<K>(
        &self,
        tasks: &mut JoinSet<()>,
        place: Place<K>,
        config: watcher::Config,
        resource: &'static str,
        mut on_event: impl FnMut(Event<K>) + Send + 'static,
    ) where
        K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
        K::DynamicType: Default,
    {
        let metrics = self.metrics.clone();
        // One sync-age series per watch: `broker/<resource>` or `<cluster>/<resource>`.
        let (source, server) = match resource.strip_prefix("broker/") {
            Some(_) => (resource.to_owned(), "the broker".to_owned()),
            None => (
                format!("{}/{resource}", self.cluster),
                format!("the local cluster ({})", self.cluster),
            ),
        };
        let mut served = Served {
            crd: place.resource_name(),
            server,
            missing: false,
        };
        tasks.spawn(async move {
            let watch = |place: &Place<K>| {
                let config = config.clone();
                watcher::watcher(place.api(), config)
                    .default_backoff()
                    .boxed()
            };
            let mut events = watch(&place);
            // In sync: listed once, and no failure since (or the API server
            // answered again); a quiet healthy watch delivers nothing to tell.
            let (mut listed, mut healthy) = (false, false);
            metrics.set_not_served(&source, resource, false);
            let mut heartbeat = tokio::time::interval(HEARTBEAT);
            loop {
                let event = tokio::select! {
                    event = events.next() => event,
                    _ = heartbeat.tick() => {
                        if listed && !healthy {
                            let probe = place.api();
                            healthy = probe.list(&ListParams::default().limit(1)).await.is_ok();
                        }
                        if listed && healthy {
                            metrics.mark_synced(&source);
                        }
                        if healthy {
                            // A resumed watch may have nothing to deliver.
                            served.report(false, &metrics, &source, resource);
                        }
                        continue;
                    }
                };
                match event {
                    Some(Ok(event)) => {
                        tracing::trace!(%source, event = event_name(&event), "watch event");
                        match event {
                            Event::Init if listed => metrics.watch_restarted(&source, resource),
                            Event::InitDone => listed = true,
                            _ => {}
                        }
                        // `Init` comes before every list attempt, answered or
                        // not: only what follows shows the API server answered.
                        if !matches!(event, Event::Init) {
                            healthy = true;
                            served.report(false, &metrics, &source, resource);
                        }
                        if listed && healthy {
                            metrics.mark_synced(&source);
                        }
                        on_event(event);
                    }
                    Some(Err(error)) => {
                        healthy = false;
                        metrics.watch_failed(&source, resource);
                        if served::watch_not_served(&error) && place.moved().await {
                            events = watch(&place);
                            served.crd = place.resource_name();
                        } else if served::watch_not_served(&error) {
                            served.report(true, &metrics, &source, resource);
                        } else {
                            warn!(%source, error = %error, "watch failed; retrying");
                        }
                    }
                    None => break,
                }
            }
        });
    }
}

/// Whether the API server of one watch serves its resource, as last
/// reported. While it answers 404 the watcher never ends a list, so what
/// the watch reported before stays asserted (nothing is retracted, so
/// nothing is deleted on its account): this only tells the operator, once
/// per change, in `clusterset_dns_watch_not_served` and the log.
struct Served {
    /// The resource as its CRD names it, with the version read.
    crd: String,
    /// `the broker`, `the local cluster (east)`.
    server: String,
    /// Whether the last answer was a 404.
    missing: bool,
}

impl Served {
    fn report(&mut self, missing: bool, metrics: &Metrics, source: &str, resource: &str) {
        if missing == self.missing {
            return;
        }
        self.missing = missing;
        metrics.set_not_served(source, resource, missing);
        let crd = &self.crd;
        if missing {
            error!(%source, %crd, "{}", served::not_served_message(crd, &self.server));
        } else {
            info!(%source, %crd, "{crd} is served again");
        }
    }
}

fn event_name<K>(event: &Event<K>) -> &'static str {
    match event {
        Event::Apply(_) => "apply",
        Event::Delete(_) => "delete",
        Event::Init => "init",
        Event::InitApply(_) => "init-apply",
        Event::InitDone => "init-done",
    }
}

/// Events of one watch, reduced to changes.
struct Batch {
    resource: &'static str,
    changes: Vec<Change>,
    synced: bool,
}

/// Where the watches send their changes.
#[derive(Clone)]
pub(crate) struct BatchSender(mpsc::UnboundedSender<Batch>);

/// What the apply loop receives: every batch waiting, merged.
pub(crate) struct Batches {
    incoming: mpsc::UnboundedReceiver<Batch>,
    /// Fact sources whose first list is not complete yet.
    waiting: HashSet<&'static str>,
}

/// The changes of every batch that was waiting.
pub(crate) struct Merged {
    /// In the order the watches sent them.
    pub changes: Vec<Change>,
    /// Whether every fact source has completed its first list by now.
    pub all_synced: bool,
}

/// A channel from the watches to the apply loop.
pub(crate) fn batches() -> (BatchSender, Batches) {
    let (tx, incoming) = mpsc::unbounded_channel();
    let batches = Batches {
        incoming,
        waiting: HashSet::new(),
    };
    (BatchSender(tx), batches)
}

impl BatchSender {
    /// Sends what one event of a fact watch meant, if anything.
    fn forward(&self, resource: &'static str, delta: Delta) {
        if !delta.changes.is_empty() || delta.synced {
            let _ = self.0.send(Batch {
                resource,
                changes: delta.changes,
                synced: delta.synced,
            });
        }
    }

    /// Sends `changes` from `resource`, which is no fact source; false once
    /// the apply loop is gone.
    pub(crate) fn send(&self, resource: &'static str, changes: Vec<Change>) -> bool {
        changes.is_empty()
            || self
                .0
                .send(Batch {
                    resource,
                    changes,
                    synced: false,
                })
                .is_ok()
    }
}

impl Batches {
    /// The first sync waits for these fact sources.
    pub(crate) fn wait_for(&mut self, sources: impl IntoIterator<Item = &'static str>) {
        self.waiting.extend(sources);
    }

    /// Waits for a batch and merges it with every other already sent; None
    /// once every sender is gone.
    pub(crate) async fn next(&mut self) -> Option<Merged> {
        let first = self.incoming.recv().await?;
        let mut changes = Vec::new();
        let mut batch = Some(first);
        while let Some(b) = batch.take().or_else(|| self.incoming.try_recv().ok()) {
            if b.synced {
                self.waiting.remove(b.resource);
            }
            changes.extend(b.changes);
        }
        Some(Merged {
            changes,
            all_synced: self.waiting.is_empty(),
        })
    }
}
