//! What `/status` and the gauges read of a lane: its last throttle, the header behind
//! its pause or floor, a capped hint while it lasts, how near its limit it runs, and
//! its costs.

use std::sync::PoisonError;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use super::Lane;
use crate::clock::Instant;
use crate::hints::Hint;

/// The last throttle a lane was told of, for `/status`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LastThrottle {
    /// What gave it away: a signal (`status`, `body`, ...) or the upstream's own reason
    /// (`TableWriteProvisionedThroughputExceeded`).
    pub reason: String,
    /// The resource the upstream named, if it did (a table or index ARN).
    pub resource: Option<String>,
    /// When it came, in wall-clock time.
    pub at: SystemTime,
}

/// A pause or rate-limit window an upstream header asked for that was cut to
/// `max_pause`, as `/status` shows it while it lasts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CappedHint {
    pub header: Hint,
    /// What the header asked for.
    pub asked: Duration,
    /// When the cut-down pause or window ends.
    pub until: Instant,
}

impl Lane {
    /// The last throttle this lane was told of.
    pub fn last_throttle(&self) -> Option<LastThrottle> {
        self.last_throttle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_deref()
            .cloned()
    }

    /// The header behind the lane's latest pause or floor.
    pub fn pause_header(&self) -> Option<Hint> {
        let stored = usize::from(self.pause_header.load(Ordering::Relaxed));
        stored
            .checked_sub(1)
            .and_then(|i| Hint::ALL.get(i).copied())
    }

    /// Dispatches over the last second against the rate the spacing in force allows:
    /// 1 runs at the limit; 0 while unpaced or idle. In `observe` mode it can pass 1.
    pub fn near_limit(&self, now: Instant) -> f64 {
        let spacing = self.pacer.spacing();
        match self.pacer.observed_spacing(now) {
            Some(observed) if !spacing.is_zero() && !observed.is_zero() => {
                spacing.as_secs_f64() / observed.as_secs_f64()
            }
            _ => 0.0,
        }
    }

    /// The lane's units reserved and settled so far, for `/status` (in its units).
    pub fn costs(&self) -> (f64, f64) {
        let (reserved, settled) = self.costs.totals();
        (self.unit().count(reserved), self.unit().count(settled))
    }

    /// The latest capped hint while its pause or window lasts.
    pub fn capped_hint(&self) -> Option<CappedHint> {
        let now = self.common.clock.now();
        let capped = *self.capped.lock().unwrap_or_else(PoisonError::into_inner);
        capped.filter(|c| c.until > now)
    }

    /// The rate-limit floor in force (the least spacing) and when it ends, in
    /// wall-clock time.
    pub fn rate_limit_floor(&self) -> Option<(Duration, SystemTime)> {
        let clock = &self.common.clock;
        let now = clock.now();
        let (spacing, end) = self.pacer.floor(now)?;
        Some((spacing, clock.wall() + (end - now)))
    }

    /// When the lane's pause ends, in wall-clock time.
    pub fn paused_until(&self) -> Option<SystemTime> {
        let clock = &self.common.clock;
        let now = clock.now();
        let end = self.pacer.paused_until(now)?;
        Some(clock.wall() + (end - now))
    }

    /// How much of the lane's pause is left at `now`.
    pub fn pause_left(&self, now: Instant) -> Option<Duration> {
        self.pacer.paused_until(now).map(|end| end - now)
    }
}
