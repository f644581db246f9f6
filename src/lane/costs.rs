//! A lane's reserved and settled costs, for `/status` and the token window's rule.

use std::sync::atomic::{AtomicU64, Ordering};

/// A lane's reserved and settled costs (thousandths), and the mean reservation per
/// request as a moving average; atomics, as every dispatch adds to them.
#[derive(Debug, Default)]
pub struct Costs {
    reserved: AtomicU64,
    settled: AtomicU64,
    /// f64 bits; 0 before the first dispatch.
    mean: AtomicU64,
}

impl Costs {
    /// Counts a dispatch reserved at `cost`.
    pub fn dispatched(&self, cost: u64) {
        self.reserved.fetch_add(cost, Ordering::Relaxed);
        #[allow(clippy::cast_precision_loss, reason = "a cost")]
        let cost = cost as f64;
        let mean = f64::from_bits(self.mean.load(Ordering::Relaxed));
        let next = if mean > 0.0 {
            0.9 * mean + 0.1 * cost
        } else {
            cost
        };
        self.mean.store(next.to_bits(), Ordering::Relaxed);
    }

    /// Counts what an answer said a request cost.
    pub fn settled(&self, cost: u64) {
        self.settled.fetch_add(cost, Ordering::Relaxed);
    }

    /// The mean reservation per request (thousandths); 0 before any.
    pub fn mean(&self) -> f64 {
        f64::from_bits(self.mean.load(Ordering::Relaxed))
    }

    /// Reserved and settled so far.
    pub fn totals(&self) -> (u64, u64) {
        (
            self.reserved.load(Ordering::Relaxed),
            self.settled.load(Ordering::Relaxed),
        )
    }
}
