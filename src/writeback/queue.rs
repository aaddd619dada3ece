//! A work queue of services to write, as controller-runtime keeps one: a key
//! is queued at most once, never handed to two workers at once, and queued
//! again if it changes while a worker has it.

use std::collections::{HashSet, VecDeque};
use std::sync::Mutex;

use tokio::sync::Notify;

use crate::model::ServiceKey;

#[derive(Default)]
struct State {
    order: VecDeque<ServiceKey>,
    queued: HashSet<ServiceKey>,
    running: HashSet<ServiceKey>,
    again: HashSet<ServiceKey>,
}

/// Services waiting to be written.
#[derive(Default)]
pub struct WorkQueue {
    state: Mutex<State>,
    ready: Notify,
}

impl WorkQueue {
    /// Queues `key` unless it is queued already.
    pub fn add(&self, key: ServiceKey) {
        let mut state = self.lock();
        if state.running.contains(&key) {
            state.again.insert(key);
        } else if state.queued.insert(key.clone()) {
            state.order.push_back(key);
            drop(state);
            self.ready.notify_one();
        }
    }

    /// Waits for a key no other worker holds; hand it back with [`Self::done`].
    pub async fn next(&self) -> ServiceKey {
        loop {
            let notified = self.ready.notified();
            {
                let mut state = self.lock();
                if let Some(key) = state.order.pop_front() {
                    state.queued.remove(&key);
                    state.running.insert(key.clone());
                    if !state.order.is_empty() {
                        self.ready.notify_one();
                    }
                    return key;
                }
            }
            notified.await;
        }
    }

    /// Ends a worker's turn with `key`; queues it again if it changed meanwhile.
    pub fn done(&self, key: &ServiceKey) {
        let mut state = self.lock();
        state.running.remove(key);
        if state.again.remove(key) {
            drop(state);
            self.add(key.clone());
        }
    }

    /// Keys queued and not yet taken.
    pub fn len(&self) -> usize {
        self.lock().order.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn keys_are_queued_once_and_never_run_twice_at_once() {
        let queue = WorkQueue::default();
        let (a, b) = (ServiceKey::new("ns", "a"), ServiceKey::new("ns", "b"));
        queue.add(a.clone());
        queue.add(b.clone());
        queue.add(a.clone());
        assert_eq!(queue.len(), 2);
        let first = queue.next().await;
        assert_eq!(first, a);
        // `a` changes while a worker has it: it comes back after `done`, not before.
        queue.add(a.clone());
        assert_eq!(queue.next().await, b);
        assert!(queue.is_empty());
        queue.done(&a);
        assert_eq!(queue.next().await, a);
    }
}
