//! The mock's capacity model: a token bucket, a schedule of rate changes, and
//! DynamoDB-like auto-scaling that raises the rate after throttling has lasted a while.
//! Pure: time comes in.

use std::time::Duration;

use super::schedule::Step;
use crate::clock::Instant;

/// Auto-scaling: after `after` of sustained throttling, rate × `factor`, up to `max`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AutoScale {
    pub after: Duration,
    pub factor: f64,
    pub max: f64,
}

/// A token bucket refilled at `rate` per second, holding at most `burst` tokens.
#[derive(Debug)]
pub struct Bucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    updated: Instant,
    started: Instant,
    /// Scheduled rate changes not applied yet, earliest last.
    pending: Vec<Step>,
    scale: Option<AutoScale>,
    /// Start of the current run of throttling, for auto-scaling.
    throttling_since: Option<Instant>,
    last_throttle: Option<Instant>,
    /// The burst as seconds of the rate (DynamoDB's burst capacity), if set.
    burst_seconds: Option<f64>,
}

/// Gaps between throttles longer than this end a run of sustained throttling.
const QUIET: Duration = Duration::from_secs(1);

impl Bucket {
    /// A full bucket.
    pub fn new(rate: f64, burst: u32, scale: Option<AutoScale>, now: Instant) -> Bucket {
        let burst = f64::from(burst.max(1));
        Bucket {
            rate,
            burst,
            tokens: burst,
            updated: now,
            started: now,
            pending: Vec::new(),
            scale,
            throttling_since: None,
            last_throttle: None,
            burst_seconds: None,
        }
    }

    /// Makes the bucket hold `seconds` of its rate (at least one token), from now on as
    /// the rate changes too, and fills it: DynamoDB's burst capacity.
    pub fn set_burst_seconds(&mut self, seconds: f64) {
        self.burst_seconds = Some(seconds);
        self.set_rate(self.rate);
        self.tokens = self.burst;
    }

    /// Changes the rate, and with burst seconds the burst (tokens above it are lost).
    fn set_rate(&mut self, rate: f64) {
        self.rate = rate;
        if let Some(seconds) = self.burst_seconds {
            self.burst = (seconds * rate).max(1.0);
            self.tokens = self.tokens.min(self.burst);
        }
    }

    /// This bucket, whose rate follows `steps` (offsets from its creation); a step
    /// overrides whatever auto-scaling did before it.
    pub fn with_schedule(mut self, steps: &[Step]) -> Bucket {
        self.pending = steps.iter().rev().copied().collect();
        let started = self.started;
        self.advance(started);
        self
    }

    /// The current refill rate per second.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// Refills up to `now`, applying the scheduled rate changes on the way so tokens
    /// before a step accrue at the old rate and after it at the new one.
    pub fn advance(&mut self, now: Instant) {
        while let Some(step) = self.pending.last().copied() {
            let at = self.started + step.at;
            if at > now {
                break;
            }
            self.refill(at);
            self.set_rate(step.rate);
            self.pending.pop();
        }
        self.refill(now);
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.updated).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        self.updated = self.updated.max(now);
    }

    /// Whether a token is there at `now`; takes none, so a request needing tokens from
    /// several buckets can check them all before taking any.
    pub fn has_token(&mut self, now: Instant) -> bool {
        self.advance(now);
        // Refills in small float steps add up to a hair under a whole token.
        self.tokens >= 1.0 - 1e-9
    }

    /// Whether the bucket is full at `now`: it behaves as a new one would.
    pub fn is_full(&mut self, now: Instant) -> bool {
        self.advance(now);
        self.tokens >= self.burst - 1e-9
    }

    /// Whole tokens left at `now`, the bucket's size, and the time until it is full
    /// again: what an API that states its bucket (OpenAI) sends on every answer.
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "float to integer `as` saturates, as wanted here"
    )]
    pub fn level(&mut self, now: Instant) -> (u64, u64, Duration) {
        self.advance(now);
        let full_in = Duration::try_from_secs_f64((self.burst - self.tokens).max(0.0) / self.rate)
            .unwrap_or(Duration::MAX);
        (self.tokens.floor() as u64, self.burst as u64, full_in)
    }

    /// Whether `units` can be taken now: all of them, or a full bucket for a request
    /// larger than the burst (which then leaves the bucket in debt).
    pub fn has_units(&mut self, now: Instant, units: f64) -> bool {
        self.advance(now);
        self.tokens >= units.min(self.burst) - 1e-9
    }

    /// [`Bucket::take`] of `units` tokens (see [`Bucket::has_units`]).
    pub fn take_units(&mut self, now: Instant, units: f64) -> Result<(), Duration> {
        if units == 1.0 {
            return self.take(now);
        }
        if self.has_units(now, units) {
            self.tokens -= units;
            return Ok(());
        }
        self.throttled(now);
        let need = units.min(self.burst) - self.tokens;
        Err(Duration::try_from_secs_f64(need / self.rate).unwrap_or(Duration::MAX))
    }

    /// Takes a token if there is one; otherwise records a throttle and returns the time
    /// until the next token.
    pub fn take(&mut self, now: Instant) -> Result<(), Duration> {
        if self.has_token(now) {
            self.tokens = (self.tokens - 1.0).max(0.0);
            return Ok(());
        }
        self.throttled(now);
        Err(Duration::from_secs_f64((1.0 - self.tokens) / self.rate))
    }

    fn throttled(&mut self, now: Instant) {
        let quiet = self
            .last_throttle
            .is_none_or(|last| now.saturating_duration_since(last) > QUIET);
        self.last_throttle = Some(now);
        if quiet {
            self.throttling_since = Some(now);
        }
        let (Some(scale), Some(since)) = (self.scale, self.throttling_since) else {
            return;
        };
        if now.saturating_duration_since(since) >= scale.after && self.rate < scale.max {
            self.set_rate((self.rate * scale.factor).min(scale.max));
            self.throttling_since = Some(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn its_level_is_what_is_left_and_when_it_is_full_again() {
        let t0 = Instant::now();
        let mut b = Bucket::new(20.0, 20, None, t0);
        assert_eq!(b.level(t0), (20, 20, Duration::ZERO));
        for _ in 0..5 {
            b.take(t0).unwrap();
        }
        assert_eq!(b.level(t0), (15, 20, 250 * MS));
        assert_eq!(b.level(t0 + 100 * MS), (17, 20, 150 * MS));
    }

    #[test]
    fn a_full_bucket_allows_its_burst_then_the_rate() {
        let t0 = Instant::now();
        let mut b = Bucket::new(100.0, 5, None, t0);
        for _ in 0..5 {
            assert_eq!(b.take(t0), Ok(()));
        }
        let wait = b.take(t0).unwrap_err();
        assert!((wait.as_secs_f64() - 0.01).abs() < 1e-9, "{wait:?}");
        assert_eq!(b.take(t0 + 10 * MS), Ok(()));
        assert!(b.take(t0 + 15 * MS).is_err());
        assert_eq!(b.take(t0 + 20 * MS), Ok(()));
    }

    #[test]
    fn at_the_rate_every_request_passes() {
        let t0 = Instant::now();
        let mut b = Bucket::new(50.0, 1, None, t0);
        for i in 0..500 {
            assert_eq!(b.take(t0 + 20 * MS * i), Ok(()), "request {i}");
        }
    }

    #[test]
    fn sustained_throttling_scales_the_rate_up_to_the_maximum() {
        let t0 = Instant::now();
        let scale = AutoScale {
            after: Duration::from_secs(10),
            factor: 2.0,
            max: 300.0,
        };
        let mut b = Bucket::new(100.0, 1, Some(scale), t0);
        // 1000 requests/s for 40 s: throttled throughout.
        let mut rates = Vec::new();
        for ms in 0..40_000u64 {
            let _ = b.take(t0 + Duration::from_millis(ms));
            if ms % 10_000 == 9_999 {
                rates.push(b.rate());
            }
        }
        assert_eq!(rates, [100.0, 200.0, 300.0, 300.0]);
    }

    #[test]
    fn the_schedule_steps_the_rate_down_and_up() {
        let t0 = Instant::now();
        let steps = [
            Step {
                at: Duration::ZERO,
                rate: 100.0,
            },
            Step {
                at: Duration::from_secs(10),
                rate: 50.0,
            },
            Step {
                at: Duration::from_secs(20),
                rate: 100.0,
            },
        ];
        let mut b = Bucket::new(7.0, 1, None, t0).with_schedule(&steps);
        assert_eq!(b.rate(), 100.0);
        // Unbounded demand, one request per millisecond: the grants per second are the rate.
        let mut granted = [0u32; 30];
        for ms in 0..30_000u64 {
            if b.take(t0 + Duration::from_millis(ms)).is_ok() {
                granted[(ms / 1000) as usize] += 1;
            }
        }
        for (second, &n) in granted.iter().enumerate() {
            let want = if (10..20).contains(&second) { 50 } else { 100 };
            assert!(
                n.abs_diff(want) <= 1,
                "second {second}: {n} granted, want {want}"
            );
        }
        assert_eq!(b.rate(), 100.0);
    }

    #[test]
    fn tokens_before_a_step_accrue_at_the_old_rate() {
        let t0 = Instant::now();
        let steps = [Step {
            at: Duration::from_millis(500),
            rate: 1000.0,
        }];
        let mut b = Bucket::new(1.0, 10, None, t0).with_schedule(&steps);
        for _ in 0..10 {
            assert_eq!(b.take(t0), Ok(()));
        }
        // 0.5 s at 1/s, then 1 ms at 1000/s: one and a half tokens.
        b.advance(t0 + 501 * MS);
        assert_eq!(b.rate(), 1000.0);
        assert_eq!(b.take(t0 + 501 * MS), Ok(()));
        let wait = b.take(t0 + 501 * MS).unwrap_err();
        assert!((wait.as_secs_f64() - 0.0005).abs() < 1e-9, "{wait:?}");
    }

    #[test]
    fn a_step_overrides_auto_scaling() {
        let t0 = Instant::now();
        let scale = AutoScale {
            after: Duration::from_secs(2),
            factor: 2.0,
            max: 1000.0,
        };
        let steps = [Step {
            at: Duration::from_secs(10),
            rate: 10.0,
        }];
        let mut b = Bucket::new(100.0, 1, Some(scale), t0).with_schedule(&steps);
        for ms in 0..20_000u64 {
            let _ = b.take(t0 + Duration::from_millis(ms / 4));
        }
        assert!(b.rate() > 100.0, "{}", b.rate());
        b.advance(t0 + Duration::from_secs(10));
        assert_eq!(b.rate(), 10.0);
    }

    #[test]
    fn burst_seconds_size_the_bucket_by_its_rate_and_follow_the_rate() {
        let t0 = Instant::now();
        let steps = [Step {
            at: Duration::from_secs(10),
            rate: 2.0,
        }];
        let mut b = Bucket::new(10.0, 1, None, t0).with_schedule(&steps);
        b.set_burst_seconds(300.0);
        // Full at the start: 300 s of 10/s.
        assert_eq!(b.level(t0), (3000, 3000, Duration::ZERO));
        b.take_units(t0, 3000.0).unwrap();
        assert!(b.take(t0).is_err());
        // 5 s later, 50 tokens; at 10 s the rate halves and the bucket with it.
        assert_eq!(b.level(t0 + Duration::from_secs(5)).0, 50);
        assert_eq!(b.level(t0 + Duration::from_secs(10)).1, 600);
        // A tenth of a second of a slow rate still holds one token.
        let mut slow = Bucket::new(1.0, 1, None, t0);
        slow.set_burst_seconds(0.1);
        assert_eq!(slow.level(t0), (1, 1, Duration::ZERO));
    }

    #[test]
    fn throttles_with_quiet_gaps_are_not_sustained() {
        let t0 = Instant::now();
        let scale = AutoScale {
            after: Duration::from_secs(3),
            factor: 2.0,
            max: 1000.0,
        };
        let mut b = Bucket::new(1.0, 1, Some(scale), t0);
        // One throttle every 2 s: never sustained.
        for s in 0..20u64 {
            let at = t0 + Duration::from_secs(2 * s);
            let _ = b.take(at);
            let _ = b.take(at);
        }
        assert_eq!(b.rate(), 1.0);
    }
}
