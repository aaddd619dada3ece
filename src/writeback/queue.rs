//! A work queue of services to write, as controller-runtime keeps one: a key
//! is queued at most once, never handed to two workers at once, and queued
//! again if it changes while a worker has it. Keys wait in one of three
//! lanes, served in order ([`Lane`]): this cluster's own objects changed
//! (what the other clusters read from the broker is stale), something else
//! changed, a periodic resync. So a resync of every service at clusterset
//! scale does not delay a change, and in a burst of changes the writes the
//! other clusters wait for go first. A key whose write failed comes back
//! after a backoff that grows with its failures in a row, as in client-go's
//! rate-limited work queue (`add_rate_limited`, `forget`, `add_after`).
//! A key waiting out a delay is kept in the queue with its deadline, which
//! the waiting workers sleep towards: no task is spawned per retry, so
//! nothing outlives the runtime's task set at shutdown (ARCHITECTURE.md,
//! "Choices that need a reason").

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::model::backoff::Backoff;
use crate::model::{Hasher, ServiceKey};

/// Why a key is queued, most urgent first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Lane {
    /// This cluster's own objects changed: publish them to the broker first.
    Publish,
    /// Something changed.
    Changed,
    /// A periodic resync.
    Resync,
}

const LANES: [Lane; 3] = [Lane::Publish, Lane::Changed, Lane::Resync];

#[derive(Default)]
struct State {
    /// One queue per [`Lane`], in lane order.
    lanes: [VecDeque<ServiceKey>; 3],
    /// Queued keys and the lane each waits in.
    queued: HashMap<ServiceKey, Lane, Hasher>,
    running: HashSet<ServiceKey, Hasher>,
    /// Keys that changed while running, and the most urgent lane asked.
    again: HashMap<ServiceKey, Lane, Hasher>,
    /// Failed writes in a row, per key, for the backoff.
    failures: HashMap<ServiceKey, u32, Hasher>,
    /// Keys waiting out a delay, earliest deadline first, and each key's one
    /// deadline.
    delayed: BTreeSet<(Instant, ServiceKey)>,
    deadlines: HashMap<ServiceKey, Instant, Hasher>,
}

impl State {
    /// Queues `key` in `lane` (see [`WorkQueue::add_in`]); true if a worker
    /// may now have something to take.
    fn enqueue(&mut self, key: ServiceKey, lane: Lane) -> bool {
        if self.running.contains(&key) {
            let again = self.again.entry(key).or_insert(lane);
            *again = (*again).min(lane);
            false
        } else if self.queued.get(&key).is_none_or(|queued| lane < *queued) {
            self.queued.insert(key.clone(), lane);
            self.lanes[lane as usize].push_back(key);
            true
        } else {
            false
        }
    }

    /// Moves the keys whose delay is over into the `Changed` lane; returns
    /// the next deadline still ahead.
    fn due(&mut self, now: Instant) -> Option<Instant> {
        while let Some((at, _)) = self.delayed.first() {
            if *at > now {
                return Some(*at);
            }
            let (_, key) = self.delayed.pop_first()?;
            self.deadlines.remove(&key);
            self.enqueue(key, Lane::Changed);
        }
        None
    }

    /// The next key and its lane, most urgent lane first; entries a key left
    /// behind when it moved ahead or was taken are skipped.
    fn pop(&mut self) -> Option<(ServiceKey, Lane)> {
        for lane in LANES {
            while let Some(key) = self.lanes[lane as usize].pop_front() {
                if self.queued.get(&key) == Some(&lane) {
                    self.queued.remove(&key);
                    return Some((key, lane));
                }
            }
        }
        None
    }
}

/// Services waiting to be written.
pub(crate) struct WorkQueue {
    state: Mutex<State>,
    ready: Notify,
    backoff: Backoff,
}

impl WorkQueue {
    /// An empty queue whose failed keys come back after `backoff`.
    pub(crate) fn new(backoff: Backoff) -> Self {
        Self {
            state: Mutex::default(),
            ready: Notify::new(),
            backoff,
        }
    }

    /// Queues `key`, something changed for it.
    pub(crate) fn add(&self, key: ServiceKey) {
        self.add_in(key, Lane::Changed);
    }

    /// Queues `key` for a resync, after every changed key.
    pub(crate) fn add_later(&self, key: ServiceKey) {
        self.add_in(key, Lane::Resync);
    }

    /// Queues `key` in `lane`, unless it waits in a lane as urgent already
    /// (a key waiting in a later lane moves ahead).
    pub(crate) fn add_in(&self, key: ServiceKey, lane: Lane) {
        if self.lock().enqueue(key, lane) {
            self.ready.notify_one();
        }
    }

    /// Waits for a key no other worker holds, with the lane it waited in;
    /// hand it back with [`Self::done`]. Keys whose delay ends meanwhile
    /// count as changed.
    pub(crate) async fn next(&self) -> (ServiceKey, Lane) {
        loop {
            let notified = self.ready.notified();
            let wake = {
                let mut state = self.lock();
                let wake = state.due(Instant::now());
                if let Some((key, lane)) = state.pop() {
                    state.running.insert(key.clone());
                    if !state.queued.is_empty() {
                        self.ready.notify_one();
                    }
                    return (key, lane);
                }
                wake
            };
            match wake {
                Some(at) => {
                    tokio::select! {
                        () = notified => {}
                        () = tokio::time::sleep_until(at) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// Ends a worker's turn with `key`; queues it again if it changed meanwhile.
    pub(crate) fn done(&self, key: &ServiceKey) {
        let mut state = self.lock();
        state.running.remove(key);
        if let Some(lane) = state.again.remove(key) {
            drop(state);
            self.add_in(key.clone(), lane);
        }
    }

    /// Queues `key` again after `delay`; a key already waiting keeps the
    /// earlier of its two deadlines, as client-go's `AddAfter` does.
    pub(crate) fn add_after(&self, key: ServiceKey, delay: Duration) {
        let at = Instant::now() + delay;
        let mut state = self.lock();
        if let Some(&kept) = state.deadlines.get(&key) {
            if kept <= at {
                return;
            }
            state.delayed.remove(&(kept, key.clone()));
        }
        state.deadlines.insert(key.clone(), at);
        state.delayed.insert((at, key));
        drop(state);
        // A waiting worker sleeps towards the earliest deadline it saw.
        self.ready.notify_one();
    }

    /// Counts one more failure in a row for `key` and queues it again after
    /// the backoff for that many; returns the wait.
    pub(crate) fn add_rate_limited(&self, key: ServiceKey) -> Duration {
        let failed = {
            let mut state = self.lock();
            let n = state.failures.entry(key.clone()).or_default();
            *n = n.saturating_add(1);
            *n
        };
        let delay = self.backoff.after(failed);
        self.add_after(key, delay);
        delay
    }

    /// `key` was written: its next failure waits the shortest time again.
    pub(crate) fn forget(&self, key: &ServiceKey) {
        self.lock().failures.remove(key);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl WorkQueue {
        /// Keys queued and not yet taken.
        fn len(&self) -> usize {
            self.lock().queued.len()
        }

        /// Whether nothing is queued.
        fn is_empty(&self) -> bool {
            self.len() == 0
        }
    }

    #[tokio::test]
    async fn keys_are_queued_once_and_never_run_twice_at_once() {
        let queue = WorkQueue::new(Backoff::new(Duration::ZERO, Duration::ZERO));
        let (a, b) = (ServiceKey::new("ns", "a"), ServiceKey::new("ns", "b"));
        queue.add(a.clone());
        queue.add(b.clone());
        queue.add(a.clone());
        assert_eq!(queue.len(), 2);
        let first = queue.next().await;
        assert_eq!(first, (a.clone(), Lane::Changed));
        // `a` changes while a worker has it: it comes back after `done`, not before.
        queue.add(a.clone());
        assert_eq!(queue.next().await.0, b);
        assert!(queue.is_empty());
        queue.done(&a);
        assert_eq!(queue.next().await.0, a);
    }

    #[tokio::test]
    async fn changed_keys_go_before_resynced_ones() {
        let queue = WorkQueue::new(Backoff::new(Duration::ZERO, Duration::ZERO));
        let key = |n: &str| ServiceKey::new("ns", n);
        queue.add_later(key("r1"));
        queue.add_later(key("r2"));
        queue.add(key("c"));
        // A resynced key that changes moves ahead, and runs once.
        queue.add(key("r2"));
        queue.add_later(key("c"));
        assert_eq!(queue.len(), 3);
        assert_eq!(queue.next().await, (key("c"), Lane::Changed));
        assert_eq!(queue.next().await, (key("r2"), Lane::Changed));
        assert_eq!(queue.next().await, (key("r1"), Lane::Resync));
        assert!(queue.is_empty());
    }

    #[tokio::test]
    async fn keys_to_publish_go_first_and_keep_their_lane_while_running() {
        let queue = WorkQueue::new(Backoff::new(Duration::ZERO, Duration::ZERO));
        let key = |n: &str| ServiceKey::new("ns", n);
        queue.add(key("c"));
        queue.add_in(key("p"), Lane::Publish);
        // A key to publish does not move back when something else changes.
        queue.add(key("p"));
        queue.add_in(key("c"), Lane::Publish);
        assert_eq!(queue.len(), 2);
        assert_eq!(queue.next().await, (key("p"), Lane::Publish));
        // `p` changes twice while it runs: it comes back in the more urgent lane.
        queue.add(key("p"));
        queue.add_in(key("p"), Lane::Publish);
        queue.add(key("o"));
        queue.done(&key("p"));
        assert_eq!(queue.next().await, (key("c"), Lane::Publish));
        assert_eq!(queue.next().await, (key("p"), Lane::Publish));
        assert_eq!(queue.next().await, (key("o"), Lane::Changed));
        assert!(queue.is_empty());
    }

    /// client-go's per-item exponential backoff, and the key comes back at
    /// its deadline, not before (a paused clock makes the time exact).
    #[tokio::test(start_paused = true)]
    async fn failed_keys_come_back_after_a_growing_backoff() {
        let backoff = Backoff::new(Duration::from_millis(1), Duration::from_millis(4));
        let queue = WorkQueue::new(backoff);
        let key = ServiceKey::new("ns", "a");
        let waits: Vec<Duration> = (0..4)
            .map(|_| queue.add_rate_limited(key.clone()))
            .collect();
        let ms = Duration::from_millis;
        assert_eq!(waits, [ms(1), ms(2), ms(4), ms(4)]);
        queue.forget(&key);
        let started = Instant::now();
        assert_eq!(queue.add_rate_limited(key.clone()), ms(1), "forgotten");
        assert_eq!(queue.next().await, (key, Lane::Changed), "queued again");
        assert_eq!(started.elapsed(), ms(1), "after the earliest wait asked");
        assert!(queue.is_empty());
    }

    /// A delayed key is queued once, at the earlier of its deadlines, and a
    /// key queued meanwhile is not held up by it.
    #[tokio::test(start_paused = true)]
    async fn a_delayed_key_comes_back_once_at_its_earliest_deadline() {
        let queue = WorkQueue::new(Backoff::new(Duration::ZERO, Duration::ZERO));
        let key = |n: &str| ServiceKey::new("ns", n);
        let started = Instant::now();
        queue.add_after(key("a"), Duration::from_secs(5));
        queue.add_after(key("a"), Duration::from_secs(2));
        queue.add_after(key("a"), Duration::from_secs(9));
        queue.add_after(key("b"), Duration::from_secs(3));
        queue.add(key("c"));
        assert_eq!(queue.next().await, (key("c"), Lane::Changed));
        assert_eq!(started.elapsed(), Duration::ZERO, "not held up");
        assert_eq!(queue.next().await.0, key("a"));
        assert_eq!(started.elapsed(), Duration::from_secs(2));
        assert_eq!(queue.next().await.0, key("b"));
        assert_eq!(started.elapsed(), Duration::from_secs(3));
        let again = tokio::time::timeout(Duration::from_secs(60), queue.next()).await;
        assert!(again.is_err(), "`a` came back twice: {again:?}");
    }

    /// Waiting out a delay spawns nothing: a queue dropped with keys still
    /// delayed leaves no task behind for shutdown to miss.
    #[tokio::test(start_paused = true)]
    async fn delays_leave_no_task_behind() {
        let tasks = || {
            tokio::runtime::Handle::current()
                .metrics()
                .num_alive_tasks()
        };
        let before = tasks();
        let queue = WorkQueue::new(Backoff::new(Duration::from_secs(1), Duration::from_secs(8)));
        for n in 0..10 {
            queue.add_rate_limited(ServiceKey::new("ns", &format!("s{n}")));
        }
        assert_eq!(tasks(), before, "a task per delayed key");
    }
}
