//! Counts over a sliding time window, without a lock, so the request path can count
//! every request: ten buckets, each an atomic word holding its bucket number and its
//! count; a bucket from an older window is overwritten on first use. Concurrent
//! rollovers can lose a count or two, which rates and budgets tolerate. Pure: times
//! are nanoseconds from any origin.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

const BUCKETS: u64 = 10;
const COUNT_BITS: u32 = 24;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;

/// A count of events over the last `BUCKETS` × `bucket_ns` nanoseconds.
#[derive(Debug)]
#[allow(clippy::cast_possible_truncation, reason = "BUCKETS is 10")]
pub struct WindowedCount {
    bucket_ns: u64,
    buckets: [AtomicU64; BUCKETS as usize],
}

impl WindowedCount {
    /// A window of `span`, in ten buckets.
    pub fn new(span: Duration) -> WindowedCount {
        let span = u64::try_from(span.as_nanos()).unwrap_or(u64::MAX);
        WindowedCount {
            bucket_ns: (span / BUCKETS).max(1),
            buckets: Default::default(),
        }
    }

    /// Counts one event at `now_ns`.
    pub fn add(&self, now_ns: u64) {
        self.add_many(now_ns, 1);
    }

    /// Counts `n` events at `now_ns` (a bucket saturates at 2^24 - 1).
    pub fn add_many(&self, now_ns: u64, n: u64) {
        let n = n.min(COUNT_MASK);
        let number = now_ns / self.bucket_ns;
        let tag = number << COUNT_BITS;
        let bucket = &self.buckets[(number % BUCKETS) as usize];
        let current = bucket.load(Relaxed);
        if current & !COUNT_MASK == tag {
            if current & COUNT_MASK <= COUNT_MASK - n {
                bucket.fetch_add(n, Relaxed);
            }
        } else if bucket
            .compare_exchange(current, tag | n, Relaxed, Relaxed)
            .is_err()
        {
            // Another event rolled the bucket over first; count on top of it.
            bucket.fetch_add(n, Relaxed);
        }
    }

    /// Events in the window ending at `now_ns`, and how long that window has run
    /// (from the start of its oldest bucket to now).
    pub fn count(&self, now_ns: u64) -> (u64, Duration) {
        let newest = now_ns / self.bucket_ns;
        let oldest = newest.saturating_sub(BUCKETS - 1);
        let count = self
            .buckets
            .iter()
            .map(|b| b.load(Relaxed))
            .filter(|w| (oldest..=newest).contains(&(w >> COUNT_BITS)))
            .map(|w| w & COUNT_MASK)
            .sum();
        (
            count,
            Duration::from_nanos(now_ns - oldest * self.bucket_ns),
        )
    }

    /// The mean spacing of the events in the window, if there were at least
    /// [`MIN_RATE_EVENTS`], over the time since its oldest bucket that holds any: a
    /// quiet stretch before the events (an idle start, a pause in the load) is no part
    /// of their rate. Less than a tenth of the span counts as a tenth: a few events in
    /// the first milliseconds are a burst, not a rate, and a spacing taken from them
    /// would be far too short.
    pub fn spacing(&self, now_ns: u64) -> Option<Duration> {
        let newest = now_ns / self.bucket_ns;
        let oldest = newest.saturating_sub(BUCKETS - 1);
        let (mut count, mut first) = (0, newest);
        for w in self.buckets.iter().map(|b| b.load(Relaxed)) {
            let number = w >> COUNT_BITS;
            if (oldest..=newest).contains(&number) && w & COUNT_MASK > 0 {
                count += w & COUNT_MASK;
                first = first.min(number);
            }
        }
        let span = Duration::from_nanos(now_ns - first * self.bucket_ns)
            .max(Duration::from_nanos(self.bucket_ns));
        (count >= MIN_RATE_EVENTS).then(|| span / u32::try_from(count).unwrap_or(u32::MAX))
    }
}

/// Fewer events than this in a window are no rate: one dispatch after an idle second
/// would read as a spacing of a whole second.
pub const MIN_RATE_EVENTS: u64 = 2;

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn one_second() -> WindowedCount {
        WindowedCount::new(Duration::from_secs(1))
    }

    #[test]
    fn steady_events_give_their_spacing() {
        let r = one_second();
        // 20 ms apart for two seconds.
        for i in 0..100 {
            r.add(i * 20 * MS);
        }
        // At 2 s the window runs from 1.1 s and holds the 45 events from there.
        assert_eq!(r.count(2000 * MS), (45, Duration::from_millis(900)));
        assert_eq!(r.spacing(2000 * MS), Some(Duration::from_millis(20)));
    }

    #[test]
    fn old_events_fall_out_of_the_window() {
        let r = one_second();
        for i in 0..1000 {
            r.add(i * MS); // 1 ms apart during the first second
        }
        for i in 0..10 {
            r.add(5000 * MS + i * 100 * MS); // then 100 ms apart
        }
        assert_eq!(r.spacing(6000 * MS), Some(Duration::from_millis(100)));
        assert_eq!(r.spacing(60_000 * MS), None);
    }

    #[test]
    fn a_burst_in_a_fresh_window_is_spread_over_a_tenth_of_it() {
        let r = one_second();
        for i in 0..8 {
            r.add(5_000_000 + i * 1000); // 8 events within 8 µs, 5 ms after start-up
        }
        // Not 8 events in 5 ms (625 µs apart): a tenth of the window, 100 ms.
        assert_eq!(
            r.spacing(5 * MS + 10_000),
            Some(Duration::from_micros(12_500))
        );
    }

    #[test]
    fn a_burst_after_an_idle_spell_counts_from_its_first_bucket() {
        let r = one_second();
        r.add(1000 * MS);
        // Idle from 1 s, then 16 dispatches within 1 ms at 5.95 s; read at 5.951 s.
        for i in 0..16 {
            r.add(5950 * MS + i * 60_000);
        }
        // Not the window's 1 s over 16 (62.5 ms): the burst's bucket, 100 ms, over 16.
        assert_eq!(r.spacing(5951 * MS), Some(Duration::from_micros(6250)));
        // 20 ms apart from 7.0 s: 8 events by 7.15 s span 150 ms since 7.0 s.
        let r = one_second();
        for i in 0..8 {
            r.add(7000 * MS + i * 20 * MS);
        }
        assert_eq!(
            r.spacing(7150 * MS),
            Some(Duration::from_nanos(150 * MS / 8))
        );
    }

    #[test]
    fn one_event_is_no_rate() {
        let r = one_second();
        r.add(2000 * MS);
        assert_eq!(
            r.spacing(2500 * MS),
            None,
            "one dispatch after an idle second"
        );
        r.add(2001 * MS);
        // From the events' bucket: 500 ms over 2.
        assert_eq!(r.spacing(2500 * MS), Some(Duration::from_millis(250)));
    }

    #[test]
    fn a_ten_second_window_counts_ten_seconds() {
        let w = WindowedCount::new(Duration::from_secs(10));
        for s in 0..30 {
            w.add(s * 1000 * MS);
        }
        // At 29.5 s: buckets from 20 s on hold the events at 20..=29 s.
        assert_eq!(w.count(29_500 * MS).0, 10);
    }
}
