//! Where a shed request is told to come back. Requests shed together would all be
//! told the same time (the slot after the queue) and come back as one burst, to be
//! shed again. Instead each shed takes the next place one spacing behind the sheds
//! before it, jittered within its own spacing, so a burst comes back at the rate the
//! upstream takes. A lone shed gets its slot time unchanged. Places are handed out
//! only as far ahead as clients honour a hint (`reach`: the AWS SDKs wait at most
//! their own backoff + 5 s); a request shed beyond that is told `reach` without
//! taking a place (and jittered over a further `reach`, so each client's own backoff
//! spreads it), keeping the places free for it when it comes back and is shed again.
//! Lock-free; randomness is a seed, so tests and `simulate` are reproducible.
//!
//! Also how long an AWS SDK's request is worth holding rather than shedding
//! ([`sdk_patience`]): a shed would only make the SDK wait about as long, and spend one
//! of its attempts and its retry quota on the way.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use http::{HeaderMap, HeaderName};

use crate::clock::{Instant, nanos};

/// The most of a hint the AWS SDKs honour beyond their own backoff (botocore's and
/// the JS SDK's standard mode wait `max(backoff, min(hint, backoff + 5 s))`).
pub const SDK_HINT_CAP: Duration = Duration::from_secs(5);

/// The header in which the AWS SDKs say which attempt a request is
/// (`attempt=2; max=3`).
pub const SDK_REQUEST_HEADER: HeaderName = HeaderName::from_static("amz-sdk-request");

/// The SDKs' throttling backoff: up to 1 s before the first retry, doubling per
/// attempt, at most 20 s.
const SDK_BACKOFF_BASE: Duration = Duration::from_secs(1);
const SDK_BACKOFF_MAX: Duration = Duration::from_secs(20);

/// How long a request from an AWS SDK may wait for its slot instead of being shed:
/// as long as its SDK would go on retrying after a shed, at most 25 s. Each retry
/// left waits its throttling backoff (1 s doubling per attempt, at most 20 s) plus
/// the 5 s of a hint it honours; without `max`, only this attempt's wait counts. The
/// last attempt (`attempt=max`) gets the 25 s: a shed there is the call's failure,
/// with no later attempt to come back in. `None` when the request does not say which attempt it is
/// (`amz-sdk-request: attempt=N`), so it may not come from an SDK, or when its SDK
/// makes one attempt only (`max=1`): retries off, it asked to hear of a throttle at
/// once.
pub fn sdk_patience(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(SDK_REQUEST_HEADER)?.to_str().ok()?;
    let field = |name: &str| -> Option<u32> {
        let value = value
            .split(';')
            .find_map(|field| field.trim().strip_prefix(name)?.strip_prefix('='))?;
        value.trim().parse().ok()
    };
    let attempt = field("attempt").filter(|n| *n >= 1)?;
    let max = field("max");
    if max == Some(1) {
        return None;
    }
    let most = SDK_BACKOFF_MAX + SDK_HINT_CAP;
    let Some(max) = max else {
        return Some(retry_wait(attempt));
    };
    if attempt >= max {
        return Some(most);
    }
    // Every retry the SDK has left would wait about this long anyway. Each wait is
    // at least 6 s, so five of them pass the cap: a hostile `max` costs no more.
    let left: Duration = (attempt..max).take(5).map(retry_wait).sum();
    Some(left.min(most))
}

/// How long an SDK waits after a shed of attempt `attempt`: its throttling backoff
/// (1 s doubling per attempt, at most 20 s) plus the 5 s of a hint it honours.
fn retry_wait(attempt: u32) -> Duration {
    let doubled = 1u32.checked_shl(attempt - 1).unwrap_or(u32::MAX);
    SDK_BACKOFF_BASE
        .saturating_mul(doubled)
        .min(SDK_BACKOFF_MAX)
        + SDK_HINT_CAP
}

/// One upstream's shed places.
#[derive(Debug)]
pub struct Spread {
    origin: Instant,
    /// How far ahead clients honour a hint.
    reach: Duration,
    /// Nanoseconds from `origin` of the last place handed out; 0 means none yet.
    horizon_ns: AtomicU64,
    seed: u64,
    draws: AtomicU64,
}

impl Spread {
    /// No place handed out yet; places up to `reach` ahead; jitter drawn from `seed`.
    pub fn new(origin: Instant, reach: Duration, seed: u64) -> Spread {
        Spread {
            origin,
            reach,
            horizon_ns: AtomicU64::new(0),
            seed,
            draws: AtomicU64::new(0),
        }
    }

    /// The wait to tell a request shed at `now` whose slot would have come `wait`
    /// from now, with dispatches `spacing` apart: `wait` if no earlier shed holds a
    /// place in the way, else the next free place plus a jitter below `spacing`.
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "float to integer `as` saturates, as wanted here"
    )]
    pub fn retry_after(&self, now: Instant, wait: Duration, spacing: Duration) -> Duration {
        let now_ns = nanos(now.saturating_duration_since(self.origin));
        let want = now_ns.saturating_add(nanos(wait)).max(1);
        let step = nanos(spacing);
        let limit = now_ns.saturating_add(nanos(self.reach));
        let mut place = want;
        let taken = self
            .horizon_ns
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |last| {
                place = if last == 0 {
                    want
                } else {
                    want.max(last.saturating_add(step))
                };
                (place <= limit || place == want).then_some(place)
            });
        if taken.is_err() {
            // Past any place a client keeps: a hint beyond its cap, so each client's
            // own jittered backoff decides when it comes back, not one shared time.
            let beyond = (self.unit() * nanos(self.reach) as f64) as u64;
            return Duration::from_nanos(limit.saturating_add(beyond).saturating_sub(now_ns));
        }
        if place == want || step == 0 {
            return wait;
        }
        // Places are a spacing apart; the jitter stays inside this one's, so two
        // sheds never get the same time and the order of places holds.
        let jitter = (self.unit() * step as f64) as u64;
        Duration::from_nanos(place.saturating_add(jitter).saturating_sub(now_ns))
    }

    /// The next number in `[0, 1)` of this spread's sequence.
    fn unit(&self) -> f64 {
        let n = self.draws.fetch_add(1, Ordering::Relaxed);
        fastrand::Rng::with_seed(self.seed.wrapping_add(n)).f64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sdk_request(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(SDK_REQUEST_HEADER, value.parse().unwrap());
        headers
    }

    #[test]
    fn an_sdk_is_worth_holding_for_its_backoff_and_the_hint_it_honours() {
        let patience = |value| sdk_patience(&sdk_request(value));
        // The waits of every retry left: 1 + 5 s and 2 + 5 s.
        assert_eq!(patience("attempt=1; max=3"), Some(Duration::from_secs(13)));
        assert_eq!(patience("attempt=2; max=3"), Some(Duration::from_secs(7)));
        assert_eq!(patience("attempt=3; max=4"), Some(Duration::from_secs(9)));
        // The last attempt: a shed would end the call.
        assert_eq!(patience("attempt=3; max=3"), Some(Duration::from_secs(25)));
        // botocore puts a ttl first on some services; 7 + 9 + 13 s is capped at 25.
        assert_eq!(
            patience("ttl=20261124T010203Z; attempt=2; max=5"),
            Some(Duration::from_secs(25))
        );
        // A huge `max` is summed no further than the cap.
        assert_eq!(
            patience("attempt=1; max=4294967295"),
            Some(Duration::from_secs(25))
        );
        // Without `max`, this attempt's wait; the backoff stops doubling at 20 s.
        assert_eq!(patience("attempt=5"), Some(Duration::from_secs(21)));
        assert_eq!(patience("attempt=6"), Some(Duration::from_secs(25)));
        assert_eq!(patience("attempt=40"), Some(Duration::from_secs(25)));
    }

    #[test]
    fn a_request_that_does_not_name_its_attempt_is_not_held() {
        assert_eq!(sdk_patience(&HeaderMap::new()), None);
        // Nor one whose SDK will not retry: it asked to hear of a throttle at once.
        assert_eq!(sdk_patience(&sdk_request("attempt=1; max=1")), None);
        for value in [
            "max=3",
            "attempt=; max=3",
            "attempt=0",
            "attempt=two",
            "attempts=1",
        ] {
            assert_eq!(sdk_patience(&sdk_request(value)), None, "{value}");
        }
    }

    const MS: Duration = Duration::from_millis(1);
    const FAR: Duration = Duration::from_secs(3600);

    #[test]
    fn a_lone_shed_is_told_its_slot_time() {
        let t0 = Instant::now();
        let spread = Spread::new(t0, FAR, 1);
        assert_eq!(spread.retry_after(t0, 1000 * MS, 200 * MS), 1000 * MS);
        // Long after, the earlier place is no longer in the way.
        let later = t0 + 5000 * MS;
        assert_eq!(spread.retry_after(later, 1000 * MS, 200 * MS), 1000 * MS);
    }

    #[test]
    #[allow(clippy::cast_possible_truncation, reason = "a test's small indices")]
    fn a_burst_comes_back_one_spacing_apart_with_jitter_inside_each() {
        let t0 = Instant::now();
        let spread = Spread::new(t0, FAR, 7);
        let waits: Vec<Duration> = (0..50)
            .map(|_| spread.retry_after(t0, 1000 * MS, 200 * MS))
            .collect();
        assert_eq!(waits[0], 1000 * MS);
        for (k, wait) in waits.iter().enumerate().skip(1) {
            let place = 1000 * MS + 200 * MS * k as u32;
            assert!(
                *wait >= place && *wait < place + 200 * MS,
                "shed {k}: {wait:?}"
            );
        }
        // Jittered: the offsets inside the places are not all alike.
        let offsets: Vec<_> = waits[1..]
            .iter()
            .enumerate()
            .map(|(k, w)| *w - (1200 * MS + 200 * MS * k as u32))
            .collect();
        assert!(offsets.iter().any(|o| *o > 100 * MS), "{offsets:?}");
        assert!(offsets.iter().any(|o| *o < 100 * MS), "{offsets:?}");
    }

    #[test]
    fn the_same_seed_gives_the_same_places() {
        let t0 = Instant::now();
        let run = |seed| {
            let spread = Spread::new(t0, FAR, seed);
            (0..5)
                .map(|_| spread.retry_after(t0, 500 * MS, 100 * MS))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(3), run(3));
        assert_ne!(run(3), run(4));
    }

    #[test]
    fn a_later_slot_than_the_places_taken_is_kept() {
        let t0 = Instant::now();
        let spread = Spread::new(t0, FAR, 1);
        spread.retry_after(t0, 1000 * MS, 200 * MS);
        assert_eq!(spread.retry_after(t0, 3000 * MS, 200 * MS), 3000 * MS);
        // The next one lines up behind the later place.
        let next = spread.retry_after(t0, 1000 * MS, 200 * MS);
        assert!(next >= 3200 * MS && next < 3400 * MS, "{next:?}");
    }

    #[test]
    fn beyond_the_reach_of_hints_no_place_is_taken() {
        let t0 = Instant::now();
        let spread = Spread::new(t0, 1000 * MS, 5);
        // Places at 500, 700 and 900 ms (jittered); the next would lie past 1 s.
        let waits: Vec<_> = (0..6)
            .map(|_| spread.retry_after(t0, 500 * MS, 200 * MS))
            .collect();
        assert_eq!(waits[0], 500 * MS);
        for over in &waits[3..] {
            assert!(*over >= 1000 * MS && *over < 2000 * MS, "{waits:?}");
        }
        // Later, the places after 900 ms are still free.
        let later = t0 + 600 * MS;
        let next = spread.retry_after(later, 100 * MS, 200 * MS);
        assert!(next >= 500 * MS && next < 700 * MS, "{next:?}");
    }
}
