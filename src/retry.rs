//! When easeoff may send a throttled or unconnected attempt again. Pure: the clock
//! comes in as nanoseconds.
//!
//! The budget is finagle's and linkerd's: over a 10 s window, retries may be at most
//! `budget_ratio` × requests plus `budget_min_per_second` × 10, so a wholly
//! throttling upstream is not hit by every request `max_attempts` times. Counting a
//! request is one atomic add on the request path.

use std::time::Duration;

use crate::config::RetrySettings;
use crate::window::WindowedCount;

const WINDOW: Duration = Duration::from_secs(10);

/// Retries allowed in proportion to recent requests.
#[derive(Debug)]
pub struct RetryBudget {
    ratio: f64,
    reserve: f64,
    requests: WindowedCount,
    retries: WindowedCount,
}

impl RetryBudget {
    /// A budget with `ratio` of requests plus `min_per_second` retries a second.
    pub fn new(ratio: f64, min_per_second: u32) -> RetryBudget {
        RetryBudget {
            ratio,
            reserve: f64::from(min_per_second) * WINDOW.as_secs_f64(),
            requests: WindowedCount::new(WINDOW),
            retries: WindowedCount::new(WINDOW),
        }
    }

    /// Counts a client request (a deposit).
    pub fn deposit(&self, now_ns: u64) {
        self.requests.add(now_ns);
    }

    /// Takes one retry if the budget has room; says whether it did.
    pub fn withdraw(&self, now_ns: u64) -> bool {
        let (requests, _) = self.requests.count(now_ns);
        let (retries, _) = self.retries.count(now_ns);
        let allowed = self.reserve + self.ratio * requests as f64;
        if (retries + 1) as f64 > allowed {
            return false;
        }
        self.retries.add(now_ns);
        true
    }
}

/// Why an attempt may not be repeated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoRetry {
    /// `max_attempts` reached.
    Attempts,
    /// The request body streamed (too large to keep for a replay).
    Streamed,
    /// The upstream said not to (a negative `grpc-retry-pushback-ms`).
    Refused,
    /// `max_elapsed` would pass before the retry could go.
    Elapsed,
}

/// Whether attempt number `attempts` (1-based, just failed) may be followed by
/// another, `elapsed` after the request arrived; the budget is asked last.
pub fn allowed(
    settings: &RetrySettings,
    attempts: u32,
    replayable: bool,
    refused: bool,
    elapsed: Duration,
) -> Result<(), NoRetry> {
    if attempts >= settings.max_attempts {
        Err(NoRetry::Attempts)
    } else if !replayable {
        Err(NoRetry::Streamed)
    } else if refused {
        Err(NoRetry::Refused)
    } else if elapsed >= settings.max_elapsed {
        Err(NoRetry::Elapsed)
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn settings() -> RetrySettings {
        RetrySettings {
            max_attempts: 3,
            max_body_bytes: 1 << 20,
            budget_ratio: 0.2,
            budget_min_per_second: 10,
            max_elapsed: Duration::from_secs(30),
        }
    }

    #[test]
    fn the_reserve_allows_min_per_second_times_the_window() {
        let b = RetryBudget::new(0.2, 1);
        let granted = (0..50).filter(|i| b.withdraw(i * MS)).count();
        assert_eq!(granted, 10);
    }

    #[test]
    fn every_five_requests_earn_one_retry_at_twenty_percent() {
        let b = RetryBudget::new(0.2, 0);
        for i in 0..100 {
            b.deposit(i * MS);
        }
        let granted = (0..100).filter(|i| b.withdraw((100 + i) * MS)).count();
        assert_eq!(granted, 20);
    }

    #[test]
    fn the_budget_refills_as_old_retries_leave_the_window() {
        let b = RetryBudget::new(0.0, 1);
        assert_eq!((0..20).filter(|_| b.withdraw(0)).count(), 10);
        assert!(!b.withdraw(5_000 * MS));
        assert!(b.withdraw(11_000 * MS));
    }

    #[test]
    fn attempts_body_refusal_and_elapsed_time_stop_retries_in_that_order() {
        let s = settings();
        let secs = Duration::from_secs;
        assert_eq!(allowed(&s, 1, true, false, secs(1)), Ok(()));
        assert_eq!(
            allowed(&s, 3, false, true, secs(99)),
            Err(NoRetry::Attempts)
        );
        assert_eq!(
            allowed(&s, 2, false, true, secs(99)),
            Err(NoRetry::Streamed)
        );
        assert_eq!(allowed(&s, 2, true, true, secs(99)), Err(NoRetry::Refused));
        assert_eq!(allowed(&s, 2, true, false, secs(30)), Err(NoRetry::Elapsed));
    }
}
