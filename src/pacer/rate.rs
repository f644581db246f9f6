//! Dispatches over the last second, counted without a lock so the fast path can record
//! every dispatch. Ten 100 ms buckets, each an atomic word holding its bucket number
//! and its count; a bucket from an older second is overwritten on first use.
//! Concurrent rollovers can lose a count or two, which an estimate tolerates.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

const BUCKETS: u64 = 10;
const BUCKET_NS: u64 = 100_000_000;
const COUNT_BITS: u32 = 24;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;

/// A sliding one-second count of dispatches; times are nanoseconds from any origin.
#[derive(Debug, Default)]
pub struct DispatchRate {
    buckets: [AtomicU64; BUCKETS as usize],
}

impl DispatchRate {
    /// Counts one dispatch at `now_ns`.
    pub fn record(&self, now_ns: u64) {
        let number = now_ns / BUCKET_NS;
        let tag = number << COUNT_BITS;
        let bucket = &self.buckets[(number % BUCKETS) as usize];
        let current = bucket.load(Relaxed);
        if current & !COUNT_MASK == tag {
            if current & COUNT_MASK < COUNT_MASK {
                bucket.fetch_add(1, Relaxed);
            }
        } else if bucket
            .compare_exchange(current, tag | 1, Relaxed, Relaxed)
            .is_err()
        {
            // Another dispatch rolled the bucket over first; count on top of it.
            bucket.fetch_add(1, Relaxed);
        }
    }

    /// The mean spacing of the dispatches of the last second, if there were any.
    pub fn spacing(&self, now_ns: u64) -> Option<Duration> {
        let newest = now_ns / BUCKET_NS;
        let oldest = newest.saturating_sub(BUCKETS - 1);
        let count: u64 = self
            .buckets
            .iter()
            .map(|b| b.load(Relaxed))
            .filter(|w| (oldest..=newest).contains(&(w >> COUNT_BITS)))
            .map(|w| w & COUNT_MASK)
            .sum();
        // The window runs from the start of the oldest bucket to now.
        let window = now_ns - oldest * BUCKET_NS;
        (count > 0).then(|| Duration::from_nanos(window / count))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn steady_dispatches_give_their_spacing() {
        let r = DispatchRate::default();
        // 20 ms apart for two seconds.
        for i in 0..100 {
            r.record(i * 20 * MS);
        }
        assert_eq!(r.spacing(2000 * MS), Some(Duration::from_millis(20)));
    }

    #[test]
    fn old_dispatches_fall_out_of_the_window() {
        let r = DispatchRate::default();
        for i in 0..1000 {
            r.record(i * MS); // 1 ms apart during the first second
        }
        for i in 0..10 {
            r.record(5000 * MS + i * 100 * MS); // then 100 ms apart
        }
        assert_eq!(r.spacing(6000 * MS), Some(Duration::from_millis(100)));
        assert_eq!(r.spacing(60_000 * MS), None);
    }
}
