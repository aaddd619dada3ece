//! Hot reload of a [`ManifestSource`]: filesystem events, debounced, become rescans.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::Context;
use notify::event::{AccessKind, AccessMode};
use notify::{Event, EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;

use super::{ManifestSource, Problem};
use crate::model::Change;

/// Quiet time after the last event before rescanning.
const DEBOUNCE: Duration = Duration::from_millis(25);
/// A full rescan happens at least this often, even without events (a safety
/// net for missed events, and the heartbeat behind readiness).
pub(crate) const RESYNC: Duration = Duration::from_secs(30);
/// Longest delay between the first event of a burst and its rescan.
const MAX_DELAY: Duration = Duration::from_millis(500);
/// First and longest wait before a rescan that could not read everything is
/// tried again (the wait doubles in between).
const RETRY: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(5));

/// Keeps the watcher alive; dropping it stops watching (the rescan thread ends soon after).
pub(crate) struct WatchHandle {
    problems: Arc<Mutex<Vec<Problem>>>,
    _watcher: RecommendedWatcher,
}

impl WatchHandle {
    /// The problems found by the latest rescan.
    pub(crate) fn problems(&self) -> Vec<Problem> {
        self.problems
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The shared list behind [`problems`](Self::problems), updated after every rescan.
    #[cfg(test)]
    fn shared_problems(&self) -> Arc<Mutex<Vec<Problem>>> {
        Arc::clone(&self.problems)
    }
}

/// Watches `source`'s directory recursively and sends the [`Change`]s of each
/// rescan on `tx` (an empty batch: a rescan that found nothing new).
///
/// Starts with a rescan (everything, unless the caller already rescanned
/// `source`), then rescans ~25 ms after each burst of filesystem events, on a
/// dedicated thread, so the tokio runtime is never blocked. Need not be called
/// from within a runtime. Fails when the directory cannot be watched.
pub(crate) fn spawn_watcher(
    source: ManifestSource,
    tx: mpsc::Sender<Vec<Change>>,
) -> anyhow::Result<WatchHandle> {
    let (events_tx, events_rx) = std::sync::mpsc::channel();
    let mut watcher =
        notify::recommended_watcher(events_tx).context("cannot create a file watcher")?;
    watcher
        .watch(source.dir(), RecursiveMode::Recursive)
        .with_context(|| format!("cannot watch {}", source.dir().display()))?;
    let problems = Arc::new(Mutex::new(source.problems()));
    let shared = Arc::clone(&problems);
    thread::Builder::new()
        .name("manifest-watch".into())
        .spawn(move || run(source, events_rx, tx, shared))
        .context("cannot start the watcher thread")?;
    Ok(WatchHandle {
        problems,
        _watcher: watcher,
    })
}

/// The rescan loop; returns when the watcher or the receiver is gone.
fn run(
    mut source: ManifestSource,
    events: Receiver<notify::Result<Event>>,
    tx: mpsc::Sender<Vec<Change>>,
    problems: Arc<Mutex<Vec<Problem>>>,
) {
    let mut touched = HashSet::new();
    let mut retry = RETRY.0;
    loop {
        let changes = source.rescan(&touched);
        touched.clear();
        // A folder or file that could not be read is tried again soon rather
        // than at the next resync; the wait grows while it stays unreadable.
        let wait = if source.incomplete() {
            let wait = retry;
            retry = (retry * 2).min(RETRY.1);
            wait
        } else {
            retry = RETRY.0;
            RESYNC
        };
        *problems.lock().unwrap_or_else(PoisonError::into_inner) = source.problems();
        // Every batch, even empty, tells the receiver a sync completed.
        if tx.blocking_send(changes).is_err() {
            return;
        }

        // Wait for a relevant event (or the periodic resync), then for the burst to settle.
        loop {
            match events.recv_timeout(wait) {
                Ok(event) => {
                    if note(event, &mut touched) {
                        break;
                    }
                }
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
        let deadline = Instant::now() + MAX_DELAY;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            match events.recv_timeout(DEBOUNCE.min(left)) {
                Ok(event) => {
                    note(event, &mut touched);
                }
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }
}

/// Records an event's paths; false for events that change nothing (opens and reads,
/// including the source's own).
fn note(event: notify::Result<Event>, touched: &mut HashSet<PathBuf>) -> bool {
    match event {
        Ok(event) => match event.kind {
            EventKind::Access(AccessKind::Close(AccessMode::Write)) | EventKind::Any => {
                touched.extend(event.paths);
                true
            }
            EventKind::Access(_) => false,
            _ => {
                touched.extend(event.paths);
                true
            }
        },
        Err(e) => {
            tracing::warn!("file watcher: {e}");
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Object;
    use std::fs;
    use std::path::Path;
    use tokio::time::timeout;

    const WAIT: Duration = Duration::from_secs(2);

    fn svc(name: &str, ip: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: prod}}\n\
             spec: {{clusterIP: {ip}}}\n"
        )
    }

    /// `U|D cluster ns/name [ip]` per change.
    fn summary(batch: &[Change]) -> Vec<String> {
        batch
            .iter()
            .map(|c| match c {
                Change::Upsert(cl, k, Object::Service(s)) => {
                    format!("U {cl} {k} {}", s.cluster_ips[0])
                }
                Change::Upsert(cl, k, _) => format!("U {cl} {k}"),
                Change::Delete(cl, k, _) => format!("D {cl} {k}"),
                Change::Vips(k, _) => format!("V {k}"),
                Change::Live(cl, live) => format!("L {cl} {live}"),
                Change::Namespace(ns, _) => format!("N {ns}"),
            })
            .collect()
    }

    /// The next non-empty batch (empty ones are rescans that found nothing).
    async fn next(rx: &mut mpsc::Receiver<Vec<Change>>) -> Vec<String> {
        loop {
            let batch = timeout(WAIT, rx.recv())
                .await
                .expect("a batch within 2 s")
                .expect("watcher alive");
            if !batch.is_empty() {
                return summary(&batch);
            }
        }
    }

    fn write(root: &Path, rel: &str, text: &str) {
        let path = root.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn watcher_reports_edits_renames_additions_and_removals() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, "east/web.yaml", &svc("web", "10.0.0.1"));
        let (tx, mut rx) = mpsc::channel(16);
        let handle = spawn_watcher(ManifestSource::new(root), tx).unwrap();
        assert_eq!(next(&mut rx).await, ["U east prod/web 10.0.0.1"]);

        // Written in place.
        write(root, "east/web.yaml", &svc("web", "10.0.0.2"));
        assert_eq!(next(&mut rx).await, ["U east prod/web 10.0.0.2"]);

        // Replaced by rename, as editors and `mv tmp f.yaml` do.
        write(root, "east/.web.yaml.tmp", &svc("web", "10.0.0.3"));
        fs::rename(root.join("east/.web.yaml.tmp"), root.join("east/web.yaml")).unwrap();
        assert_eq!(next(&mut rx).await, ["U east prod/web 10.0.0.3"]);

        // A file added in a new sub-folder, then a new cluster folder.
        write(root, "east/deep/er/api.yml", &svc("api", "10.0.0.4"));
        assert_eq!(next(&mut rx).await, ["U east prod/api 10.0.0.4"]);
        write(root, "west/web.yaml", &svc("web", "10.9.0.1"));
        assert_eq!(next(&mut rx).await, ["U west prod/web 10.9.0.1"]);

        // A broken file sends nothing but shows up in the problems.
        write(root, "west/bad.yaml", "a: [\n");
        let start = Instant::now();
        while handle.problems().is_empty() && start.elapsed() < WAIT {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let problems = handle.problems();
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].file, root.join("west/bad.yaml"));

        // A file removed, then a whole cluster folder.
        fs::remove_file(root.join("east/deep/er/api.yml")).unwrap();
        assert_eq!(next(&mut rx).await, ["D east prod/api"]);
        fs::remove_dir_all(root.join("west")).unwrap();
        assert_eq!(next(&mut rx).await, ["D west prod/web"]);
        assert!(handle.shared_problems().lock().unwrap().is_empty());

        // Nothing else is pending (the source's own reads trigger nothing).
        assert!(
            timeout(Duration::from_millis(300), rx.recv())
                .await
                .is_err()
        );

        // Dropping the handle stops the watcher; the thread drops its sender.
        drop(handle);
        let closed = timeout(WAIT, rx.recv()).await.expect("closed within 2 s");
        assert!(closed.is_none());
    }
}
