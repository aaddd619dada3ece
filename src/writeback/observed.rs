//! A record another process renews, judged as client-go's leaderelection
//! judges a Lease: by when *this* process last saw it change, on its own
//! monotonic clock. The record's own timestamps are only compared for
//! equality, so a writer whose clock is hours off is judged correctly.

use std::time::Duration;

use tokio::time::Instant;

/// The last version of a record seen, and when it was first seen.
#[derive(Debug)]
pub(crate) struct Observed<T> {
    record: T,
    since: Instant,
}

impl<T: PartialEq> Observed<T> {
    /// `record`, first seen at `now`.
    pub(crate) fn new(record: T, now: Instant) -> Self {
        Self { record, since: now }
    }

    /// Notes the record as read at `now`; the clock restarts only if it changed.
    pub(crate) fn update(&mut self, record: T, now: Instant) {
        if record != self.record {
            *self = Self::new(record, now);
        }
    }

    /// How long the record has stayed the same, at `now`.
    pub(crate) fn unchanged_for(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.since)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl<T> Observed<T> {
        /// The record.
        fn record(&self) -> &T {
            &self.record
        }
    }

    #[test]
    fn only_a_change_restarts_the_clock() {
        let start = Instant::now();
        let later = |s| start + Duration::from_secs(s);
        let mut seen = Observed::new("a", start);
        seen.update("a", later(5));
        assert_eq!(seen.unchanged_for(later(6)), Duration::from_secs(6));
        seen.update("b", later(7));
        assert_eq!(seen.unchanged_for(later(8)), Duration::from_secs(1));
        assert_eq!(*seen.record(), "b");
        assert_eq!(seen.unchanged_for(start), Duration::ZERO);
    }
}
