//! The one retry backoff of the process, computed as client-go's
//! rate-limited work queue computes it (its per-item exponential failure
//! rate limiter): the wait after the `n`th failure in a row is the first
//! wait doubled `n - 1` times, never more than the longest wait. The
//! writers' queue (`writeback/queue.rs`) and NOTIFY's retries (`dns/transfer/notify.rs`,
//! RFC 1996 §3.6) both use it (ARCHITECTURE.md, "Folders and what each may
//! use": `model/` is the layer both may use).

use std::time::Duration;

/// Exponential backoff between a first and a longest wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Backoff {
    first: Duration,
    longest: Duration,
}

impl Backoff {
    /// Waits from `first`, doubled after each failure, up to `longest`.
    pub(crate) const fn new(first: Duration, longest: Duration) -> Self {
        Self { first, longest }
    }

    /// The wait after `failures` failures in a row (1: the first failure).
    pub(crate) fn after(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(31);
        self.first.saturating_mul(1 << doublings).min(self.longest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_longest_wait() {
        let backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));
        let waits: Vec<u64> = (1..=8).map(|n| backoff.after(n).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(backoff.after(0), Duration::from_secs(1));
        assert_eq!(backoff.after(u32::MAX), Duration::from_secs(60));
        let long = Backoff::new(Duration::from_secs(u64::MAX / 2), Duration::MAX);
        assert_eq!(long.after(40), Duration::MAX, "saturates, never overflows");
    }
}
