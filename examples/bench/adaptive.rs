//! botocore's `adaptive` retry mode, client side rate limiting (botocore/retries/
//! adaptive.py, bucket.py, throttling.py), ported as pure state machines: time is
//! seconds passed in by the caller, so the tests replay botocore's own test numbers.

/// CUBIC's rate after a throttle and while it recovers (throttling.CubicCalculator).
#[derive(Clone, Debug, PartialEq)]
pub struct Cubic {
    w_max: f64,
    k: f64,
    last_fail: f64,
    scale: f64,
    beta: f64,
}

/// botocore's `_SCALE_CONSTANT` (C).
pub const SCALE: f64 = 0.4;
/// botocore's `_BETA`: a throttle cuts the rate to this fraction.
pub const BETA: f64 = 0.7;

impl Cubic {
    /// A calculator whose last maximum is `w_max`, as of `start`.
    pub fn new(w_max: f64, start: f64, scale: f64, beta: f64) -> Cubic {
        let mut cubic = Cubic {
            w_max,
            k: 0.0,
            last_fail: start,
            scale,
            beta,
        };
        cubic.k = cubic.zero_point();
        cubic
    }

    fn zero_point(&self) -> f64 {
        (self.w_max * (1.0 - self.beta) / self.scale).cbrt()
    }

    /// The rate CUBIC allows at `now` since the last throttle.
    pub fn success(&self, now: f64) -> f64 {
        self.scale * (now - self.last_fail - self.k).powi(3) + self.w_max
    }

    /// A throttle at `now` while sending at `rate`: that becomes the new maximum and
    /// the rate drops to β × it.
    pub fn throttle(&mut self, rate: f64, now: f64) -> f64 {
        self.w_max = rate;
        self.k = self.zero_point();
        self.last_fail = now;
        rate * self.beta
    }

    /// (w_max, k, last_fail), like botocore's `get_params_snapshot`.
    #[cfg(test)]
    pub fn params(&self) -> (f64, f64, f64) {
        (self.w_max, self.k, self.last_fail)
    }
}

/// The send rate measured over 0.5 s buckets with smoothing 0.8 (adaptive.RateClocker).
#[derive(Clone, Debug)]
pub struct RateClocker {
    rate: f64,
    last_bucket: f64,
    count: f64,
}

const SMOOTHING: f64 = 0.8;
const BUCKET_SECONDS: f64 = 0.5;

impl RateClocker {
    /// A clocker started at `now` (botocore floors the start to whole seconds).
    pub fn new(now: f64) -> RateClocker {
        RateClocker {
            rate: 0.0,
            last_bucket: now.floor(),
            count: 0.0,
        }
    }

    /// Counts one response at `now`; returns the measured rate.
    pub fn record(&mut self, now: f64) -> f64 {
        let scale = 1.0 / BUCKET_SECONDS;
        let bucket = (now * scale).floor() / scale;
        self.count += 1.0;
        if bucket > self.last_bucket {
            let current = self.count / (bucket - self.last_bucket);
            self.rate = current * SMOOTHING + self.rate * (1.0 - SMOOTHING);
            self.count = 0.0;
            self.last_bucket = bucket;
        }
        self.rate
    }

    /// The rate measured so far.
    #[cfg(test)]
    pub fn rate(&self) -> f64 {
        self.rate
    }
}

/// The client's token bucket (bucket.TokenBucket): fill rate = max rate, capacity =
/// max(rate, 1) tokens, starting empty.
#[derive(Clone, Debug)]
pub struct TokenBucket {
    fill_rate: f64,
    max_capacity: f64,
    capacity: f64,
    last: Option<f64>,
    min_rate: f64,
}

/// botocore's `TokenBucket._MIN_RATE`.
pub const MIN_RATE: f64 = 0.5;

impl TokenBucket {
    /// An empty bucket filling at `max_rate`, created at `now`.
    pub fn new(max_rate: f64, min_rate: f64, now: f64) -> TokenBucket {
        let mut bucket = TokenBucket {
            fill_rate: 0.0,
            max_capacity: 1.0,
            capacity: 0.0,
            last: None,
            min_rate,
        };
        bucket.set_max_rate(max_rate, now);
        bucket
    }

    /// The fill rate.
    pub fn max_rate(&self) -> f64 {
        self.fill_rate
    }

    /// Tokens it can hold.
    #[cfg(test)]
    pub fn max_capacity(&self) -> f64 {
        self.max_capacity
    }

    /// Tokens it holds.
    #[cfg(test)]
    pub fn available(&self) -> f64 {
        self.capacity
    }

    /// Changes the fill rate at `now`, after refilling at the old one.
    pub fn set_max_rate(&mut self, value: f64, now: f64) {
        self.refill(now);
        self.fill_rate = value.max(self.min_rate);
        self.max_capacity = if value >= 1.0 { value } else { 1.0 };
        self.capacity = self.capacity.min(self.max_capacity);
    }

    /// Takes a token at `now`, or says how many seconds until there is one.
    pub fn try_acquire(&mut self, now: f64) -> Result<(), f64> {
        self.refill(now);
        if self.capacity >= 1.0 {
            self.capacity -= 1.0;
            Ok(())
        } else {
            Err((1.0 - self.capacity) / self.fill_rate)
        }
    }

    fn refill(&mut self, now: f64) {
        let Some(last) = self.last else {
            self.last = Some(now);
            return;
        };
        self.capacity = (self.capacity + (now - last) * self.fill_rate).min(self.max_capacity);
        self.last = Some(now);
    }
}

/// The limiter one SDK client shares among its threads (adaptive.ClientRateLimiter):
/// off until the first throttle, then every send takes a token.
#[derive(Clone, Debug)]
pub struct Limiter {
    cubic: Cubic,
    clocker: RateClocker,
    bucket: TokenBucket,
    enabled: bool,
}

/// botocore's `_MAX_RATE_ADJUST_SCALE`: the rate never exceeds 2 × the measured rate.
const MAX_RATE_ADJUST_SCALE: f64 = 2.0;

impl Limiter {
    /// The limiter as botocore registers it, at `now`.
    pub fn new(now: f64) -> Limiter {
        Limiter {
            cubic: Cubic::new(0.0, now, SCALE, BETA),
            clocker: RateClocker::new(now),
            bucket: TokenBucket::new(1.0, MIN_RATE, now),
            enabled: false,
        }
    }

    /// Before a send: Ok to go now, or the seconds to wait before asking again.
    pub fn before_send(&mut self, now: f64) -> Result<(), f64> {
        if self.enabled {
            self.bucket.try_acquire(now)
        } else {
            Ok(())
        }
    }

    /// After every response (each attempt), throttle or not.
    pub fn on_response(&mut self, throttled: bool, now: f64) {
        let measured = self.clocker.record(now);
        let new_rate = if throttled {
            let rate = if self.enabled {
                measured.min(self.bucket.max_rate())
            } else {
                measured
            };
            self.enabled = true;
            self.cubic.throttle(rate, now)
        } else {
            self.cubic.success(now)
        };
        self.bucket
            .set_max_rate(new_rate.min(MAX_RATE_ADJUST_SCALE * measured), now);
    }

    /// The token bucket's fill rate: the send rate the limiter allows.
    #[cfg(test)]
    pub fn rate(&self) -> f64 {
        self.bucket.max_rate()
    }

    /// Whether the token bucket is in use yet.
    #[cfg(test)]
    pub fn enabled(&self) -> bool {
        self.enabled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    // The numbers below are botocore's tests/unit/retries/test_throttling.py.
    #[test]
    fn cubic_starting_zero_point() {
        let cubic = Cubic::new(10.0, 0.0, SCALE, BETA);
        assert!(close(cubic.params().1, 1.9574338205844317));
    }

    #[test]
    fn cubic_climbs_back_to_w_max_at_k_and_beyond() {
        let cubic = Cubic::new(10.0, 0.0, SCALE, BETA);
        let (w_max, k, _) = cubic.params();
        for t in [k / 3.0, k / 2.0, k / 1.1] {
            assert!(cubic.success(t) <= w_max, "{t}");
        }
        assert!(close(cubic.success(k), 10.0));
        for t in [k * 1.1, k * 2.0] {
            assert!(cubic.success(t) >= w_max, "{t}");
        }
    }

    #[test]
    fn cubic_throttle_cuts_by_beta_and_sets_the_new_maximum() {
        let mut cubic = Cubic::new(10.0, 0.0, SCALE, BETA);
        assert!(close(cubic.throttle(8.0, 1.0), 8.0 * 0.7));
        let (w_max, k, last_fail) = cubic.params();
        assert_eq!((w_max, last_fail), (8.0, 1.0));
        assert!(close(k, 1.8171205928321397));
        let mut cubic = Cubic::new(10.0, 0.0, SCALE, 0.6);
        assert_eq!(cubic.throttle(10.0, 1.0), 6.0);
        assert!(close(cubic.success(1.0), 6.0));
    }

    // botocore's tests/unit/retries/test_adaptive.py, TestRateClocker.
    #[test]
    fn rate_clocker_matches_botocore() {
        let mut c = RateClocker::new(0.0);
        assert_eq!(c.rate(), 0.0);
        assert!(close(c.record(1.0), 0.8));

        let mut c = RateClocker::new(0.0);
        for t in 1..=20 {
            c.record(f64::from(t));
        }
        assert!((c.rate() - 1.0).abs() < 1e-7);

        let mut c = RateClocker::new(0.0);
        for t in [1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0] {
            c.record(t);
        }
        assert!((1.99..=2.0).contains(&c.rate()), "{}", c.rate());
        c.record(14.0);
        assert!((0.1..=2.0).contains(&c.rate()), "{}", c.rate());

        let mut c = RateClocker::new(0.0);
        for t in [0.1, 0.2, 0.3, 0.4, 0.49] {
            c.record(t);
        }
        assert_eq!(c.rate(), 0.0);
        c.record(0.5);
        assert!(close(c.rate(), 12.0 * 0.8));
    }

    // botocore's tests/unit/retries/test_bucket.py.
    #[test]
    fn token_bucket_matches_botocore() {
        let mut b = TokenBucket::new(10.0, 0.1, 0.0);
        for t in 1..=5 {
            assert_eq!(b.try_acquire(f64::from(t)), Ok(()));
        }
        b.set_max_rate(1.0, 5.0);
        for t in 6..=10 {
            assert_eq!(b.try_acquire(f64::from(t)), Ok(()));
        }

        let mut b = TokenBucket::new(10.0, 0.1, 0.0);
        b.set_max_rate(0.5, 1.0);
        assert_eq!((b.max_rate(), b.max_capacity()), (0.5, 1.0));

        let mut b = TokenBucket::new(10.0, 0.1, 0.0);
        assert_eq!(b.try_acquire(0.1), Ok(()));
        assert!(close(b.available(), 0.0));
        let wait = b.try_acquire(0.15).unwrap_err();
        assert!(close(wait, 0.05));
        assert_eq!(b.try_acquire(0.2), Ok(()));
        assert_eq!(b.try_acquire(0.300001), Ok(()));

        let mut b = TokenBucket::new(1.0, 0.2, 0.0);
        b.set_max_rate(0.1, 1.0);
        assert_eq!((b.max_rate(), b.max_capacity()), (0.2, 1.0));
    }

    #[test]
    fn limiter_is_off_until_the_first_throttle() {
        let mut l = Limiter::new(0.0);
        for i in 0..100 {
            let now = f64::from(i) / 100.0;
            assert_eq!(l.before_send(now), Ok(()));
            l.on_response(false, now);
        }
        assert!(!l.enabled());
        // 51 responses in [0, 0.5]: 0.8 × 102/s; then 50 in (0.5, 1.0]: 0.8 × 100/s + 0.2 × that.
        l.on_response(true, 1.0);
        assert!(l.enabled());
        let measured = 0.8 * 100.0 + 0.2 * (0.8 * 102.0);
        assert!(close(l.clocker.rate(), measured));
        assert!(close(l.rate(), measured * BETA));
        // CUBIC's rate from w_max = 0 stayed under the minimum: under one token so far.
        assert!(l.before_send(1.0).is_err());
    }

    #[test]
    fn limiter_rate_is_capped_at_twice_the_measured_rate() {
        let mut l = Limiter::new(0.0);
        l.on_response(true, 0.0);
        // Measured rate is still 0: the rate falls to the bucket's minimum.
        assert_eq!(l.rate(), MIN_RATE);
        // Far after the throttle CUBIC allows a lot, but the measured rate caps it.
        for i in 0..40 {
            l.on_response(false, 100.0 + f64::from(i) * 0.05);
        }
        let measured = l.clocker.rate();
        assert!(measured > 0.0);
        assert!(close(l.rate(), 2.0 * measured), "{} {measured}", l.rate());
    }
}
