//! Rate limits for log lines a remote sender can cause (a malformed or
//! hostile packet must not write one line each; metrics count them).

use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// When the process's log limits started counting.
static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

/// Allows one line per period; the rest are dropped.
pub struct LogLimit {
    period: Duration,
    /// Milliseconds since [`EPOCH`] from which the next line is allowed, + 1
    /// (0: no line yet).
    next: AtomicU64,
}

impl LogLimit {
    /// A limit of one line per `period`.
    pub const fn new(period: Duration) -> Self {
        Self {
            period,
            next: AtomicU64::new(0),
        }
    }

    /// Whether a line may be written now (at most one caller per period gets true).
    pub fn allow(&self) -> bool {
        let now = u64::try_from(EPOCH.elapsed().as_millis()).unwrap_or(u64::MAX);
        let next = self.next.load(Ordering::Relaxed);
        if next != 0 && now + 1 < next {
            return false;
        }
        let period = u64::try_from(self.period.as_millis()).unwrap_or(u64::MAX);
        self.next
            .compare_exchange(
                next,
                now.saturating_add(period) + 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            )
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_period() {
        let limit = LogLimit::new(Duration::from_millis(200));
        let allowed = (0..1000).filter(|_| limit.allow()).count();
        assert_eq!(allowed, 1);
        std::thread::sleep(Duration::from_millis(250));
        assert!(limit.allow());
        assert!(!limit.allow());
    }
}
