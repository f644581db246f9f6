//! Deadlines built from configured durations. The config bounds every duration (at
//! most a day), but `Instant + Duration` panics on overflow, and a panic on the
//! request path is the worst way to learn a bound was missed; so these saturate.

use std::time::Duration;

use crate::clock::Instant;

/// How far a deadline that would overflow is put: out of reach, as tokio does for
/// its own far-future timers.
const FAR: Duration = Duration::from_secs(30 * 365 * 24 * 3600);

/// `at + by`, or a far-away instant when that does not fit.
pub fn after(at: Instant, by: Duration) -> Instant {
    at.checked_add(by)
        .or_else(|| at.checked_add(FAR))
        .unwrap_or(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_past_the_end_of_time_saturates_instead_of_panicking() {
        let now = Instant::now();
        assert_eq!(
            after(now, Duration::from_secs(1)),
            now + Duration::from_secs(1)
        );
        assert!(after(now, Duration::MAX) >= now + FAR);
    }
}
