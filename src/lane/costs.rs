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
    /// The mean a settled request was charged at ([`super::rules::charged`]), f64
    /// bits; 0 before the first settlement.
    charged: AtomicU64,
}

impl Costs {
    /// Counts a dispatch reserved at `cost`.
    pub fn dispatched(&self, cost: u64) {
        self.reserved.fetch_add(cost, Ordering::Relaxed);
        #[allow(clippy::cast_precision_loss, reason = "a cost")]
        let cost = cost as f64;
        follow(&self.mean, cost);
    }

    /// Counts what a settled request was charged at, its reservation moved by what
    /// its answer said.
    pub fn charged(&self, cost: u64) {
        #[allow(clippy::cast_precision_loss, reason = "a cost")]
        follow(&self.charged, cost as f64);
    }

    /// The mean a request is charged at (thousandths): what settled requests were,
    /// or before any settled, what requests are reserved at. What a rate-limit
    /// window falls by per answer is set against it: against the reservation alone,
    /// the settlements would be counted twice (an estimate of 11 tokens, a charge of
    /// 16 and a window falling 19 paced OpenAI at 0.7 of its limit).
    pub fn charged_mean(&self) -> f64 {
        let charged = f64::from_bits(self.charged.load(Ordering::Relaxed));
        if charged > 0.0 { charged } else { self.mean() }
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

/// Moves the moving average in `cell` a tenth of the way to `cost` (to it at first).
fn follow(cell: &AtomicU64, cost: f64) {
    let mean = f64::from_bits(cell.load(Ordering::Relaxed));
    let next = if mean > 0.0 {
        0.9 * mean + 0.1 * cost
    } else {
        cost
    };
    cell.store(next.to_bits(), Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_charged_mean_is_the_reservations_until_a_request_settles() {
        let costs = Costs::default();
        assert_eq!(costs.charged_mean(), 0.0);
        costs.dispatched(11_000);
        assert_eq!(costs.charged_mean(), 11_000.0);
        costs.charged(16_000);
        assert_eq!(costs.charged_mean(), 16_000.0);
        costs.charged(26_000);
        assert_eq!(costs.charged_mean(), 17_000.0);
        assert_eq!(costs.mean(), 11_000.0, "the reservation's mean is its own");
    }
}
