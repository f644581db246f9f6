//! Where a shed request is told to come back. Requests shed together would all be
//! told the same time (the slot after the queue) and come back as one burst, to be
//! shed again. Instead each shed takes the next place one spacing behind the sheds
//! before it, jittered within its own spacing, so a burst comes back at the rate the
//! upstream takes. A lone shed gets its slot time unchanged. Lock-free; randomness is
//! a seed, so tests and `simulate` are reproducible.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::clock::nanos;

/// One upstream's shed places.
#[derive(Debug)]
pub struct Spread {
    origin: Instant,
    /// Nanoseconds from `origin` of the last place handed out; 0 means none yet.
    horizon_ns: AtomicU64,
    seed: u64,
    draws: AtomicU64,
}

impl Spread {
    /// No place handed out yet; jitter drawn from `seed`.
    pub fn new(origin: Instant, seed: u64) -> Spread {
        Spread {
            origin,
            horizon_ns: AtomicU64::new(0),
            seed,
            draws: AtomicU64::new(0),
        }
    }

    /// The wait to tell a request shed at `now` whose slot would have come `wait`
    /// from now, with dispatches `spacing` apart: `wait` if no earlier shed holds a
    /// place in the way, else the next free place plus a jitter below `spacing`.
    pub fn retry_after(&self, now: Instant, wait: Duration, spacing: Duration) -> Duration {
        let now_ns = nanos(now.saturating_duration_since(self.origin));
        let want = now_ns.saturating_add(nanos(wait)).max(1);
        let step = nanos(spacing);
        let mut place = want;
        let _ = self
            .horizon_ns
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |last| {
                place = if last == 0 {
                    want
                } else {
                    want.max(last.saturating_add(step))
                };
                Some(place)
            });
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

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_lone_shed_is_told_its_slot_time() {
        let t0 = Instant::now();
        let spread = Spread::new(t0, 1);
        assert_eq!(spread.retry_after(t0, 1000 * MS, 200 * MS), 1000 * MS);
        // Long after, the earlier place is no longer in the way.
        let later = t0 + 5000 * MS;
        assert_eq!(spread.retry_after(later, 1000 * MS, 200 * MS), 1000 * MS);
    }

    #[test]
    fn a_burst_comes_back_one_spacing_apart_with_jitter_inside_each() {
        let t0 = Instant::now();
        let spread = Spread::new(t0, 7);
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
            let spread = Spread::new(t0, seed);
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
        let spread = Spread::new(t0, 1);
        spread.retry_after(t0, 1000 * MS, 200 * MS);
        assert_eq!(spread.retry_after(t0, 3000 * MS, 200 * MS), 3000 * MS);
        // The next one lines up behind the later place.
        let next = spread.retry_after(t0, 1000 * MS, 200 * MS);
        assert!(next >= 3200 * MS && next < 3400 * MS, "{next:?}");
    }
}
