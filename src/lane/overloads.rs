//! How often the upstream answers "overloaded" (529, a 503 that says so) among its
//! answers: a steady small share is the upstream's weather, which each request's
//! retry rides out; only overloads that come often enough to be a state move the
//! lane's interval. Lock-free: every success passes here.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Successes between overloads below which (on average) overloads slow the lane:
/// more than about one answer in ten.
pub const FREQUENT_GAP: f64 = 10.0;

/// The weight of the latest gap in the average.
const WEIGHT: f64 = 0.3;

/// A gap counted this far is rare beyond doubt; counting stops there, so a lane
/// whose upstream is well only reads the counter (no write to a shared line per
/// success).
const COUNTED: u64 = 1_000;

/// Successes since the last overload, and the average gap between overloads.
#[derive(Debug)]
pub struct Overloads {
    since: AtomicU64,
    /// f64 bits.
    gap: AtomicU64,
}

impl Default for Overloads {
    fn default() -> Overloads {
        Overloads {
            since: AtomicU64::new(0),
            // A first overload finds a long history of successes: it alone is rare.
            gap: AtomicU64::new((4.0 * FREQUENT_GAP).to_bits()),
        }
    }
}

impl Overloads {
    /// Counts a success.
    pub fn success(&self) {
        if self.since.load(Relaxed) < COUNTED {
            self.since.fetch_add(1, Relaxed);
        }
    }

    /// Counts an overload; returns whether overloads now come often enough to slow
    /// the lane.
    pub fn frequent(&self) -> bool {
        let gap = self.since.swap(0, Relaxed) as f64;
        let average = f64::from_bits(self.gap.load(Relaxed));
        let next = (1.0 - WEIGHT) * average + WEIGHT * gap;
        self.gap.store(next.to_bits(), Relaxed);
        next < FREQUENT_GAP
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn after(o: &Overloads, successes: u32) -> bool {
        for _ in 0..successes {
            o.success();
        }
        o.frequent()
    }

    #[test]
    fn one_overload_in_forty_answers_never_slows_the_lane() {
        let o = Overloads::default();
        assert!((0..1000).all(|_| !after(&o, 39)));
    }

    #[test]
    fn overloads_in_a_row_slow_the_lane_after_a_few() {
        let o = Overloads::default();
        let slowed: Vec<bool> = (0..6).map(|_| after(&o, 1)).collect();
        assert_eq!(slowed, [false, false, false, false, true, true]);
    }

    #[test]
    fn a_long_calm_counts_as_rare_as_a_thousand_successes() {
        let long = Overloads::default();
        let counted = Overloads::default();
        assert!(!after(&long, 50_000));
        assert!(!after(&counted, 1_000));
        assert_eq!(long.gap.load(Relaxed), counted.gap.load(Relaxed));
    }

    #[test]
    fn a_spell_of_overloads_passes_once_successes_return() {
        let o = Overloads::default();
        (0..10).for_each(|_| {
            after(&o, 0);
        });
        assert!(after(&o, 0));
        assert!(!after(&o, 200));
    }
}
