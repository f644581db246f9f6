//! botocore's `standard` retry mode (botocore/retries/standard.py and quota.py, the
//! public default STANDARD_RETRY_MODE_VERSION 2.0): 3 attempts, full-jitter
//! exponential backoff with a 1 s base and a 20 s cap, and the shared retry quota.

use std::time::Duration;

use easeoff::throttle::THROTTLING_CODES;

/// Attempts per request, the first included (`DEFAULT_MAX_ATTEMPTS`).
pub const MAX_ATTEMPTS: u32 = 3;
/// `ExponentialBackoff._MAX_BACKOFF`, seconds.
const MAX_BACKOFF: f64 = 20.0;

/// The wait before the next attempt after attempt `attempt` (1-based) failed:
/// `unit` × min(2^(attempt − 1), 20) seconds, `unit` uniform in [0, 1).
pub fn backoff(attempt: u32, unit: f64) -> Duration {
    let ceiling = 2f64
        .powi(attempt.saturating_sub(1).min(30) as i32)
        .min(MAX_BACKOFF);
    Duration::from_secs_f64(unit * ceiling)
}

/// The retry quota one SDK client shares (quota.RetryQuota + RetryQuotaChecker):
/// a retry costs 5, a first-try success gives 1 back, a success after retries gives
/// back what its last retry cost.
#[derive(Clone, Debug)]
pub struct RetryQuota {
    available: u32,
}

/// `RetryQuota.INITIAL_CAPACITY`.
pub const INITIAL_CAPACITY: u32 = 500;
/// `RetryQuotaChecker._RETRY_COST` (not a timeout).
pub const RETRY_COST: u32 = 5;
const NO_RETRY_INCREMENT: u32 = 1;

impl Default for RetryQuota {
    fn default() -> RetryQuota {
        RetryQuota {
            available: INITIAL_CAPACITY,
        }
    }
}

impl RetryQuota {
    /// Takes the cost of one retry; false (and nothing taken) when it is not there.
    pub fn acquire(&mut self) -> bool {
        if RETRY_COST > self.available {
            return false;
        }
        self.available -= RETRY_COST;
        true
    }

    /// A request succeeded; `retried` says whether it took retries.
    pub fn release(&mut self, retried: bool) {
        let amount = if retried {
            RETRY_COST
        } else {
            NO_RETRY_INCREMENT
        };
        self.available = (self.available + amount).min(INITIAL_CAPACITY);
    }

    /// What is left.
    #[cfg(test)]
    pub fn available(&self) -> u32 {
        self.available
    }
}

/// How the standard mode sees one answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Success,
    /// Retryable, and a throttle (feeds the adaptive limiter).
    Throttle,
    /// Retryable, not a throttle: 500, 502, 503, 504 or no answer.
    Transient,
    /// Not retried.
    Fatal,
}

/// Classifies a status and an AWS JSON error body (`__type` = "prefix#Code").
pub fn classify(status: Option<u16>, body: &[u8]) -> Outcome {
    let Some(status) = status else {
        return Outcome::Transient;
    };
    if (200..300).contains(&status) {
        return Outcome::Success;
    }
    if error_code(body).is_some_and(|code| THROTTLING_CODES.contains(&code)) {
        return Outcome::Throttle;
    }
    if matches!(status, 500 | 502 | 503 | 504) {
        return Outcome::Transient;
    }
    Outcome::Fatal
}

fn error_code(body: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(body).ok()?;
    let after = text.split("\"__type\"").nth(1)?;
    let value = after.split('"').nth(1)?;
    Some(value.rsplit('#').next().unwrap_or(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_full_jitter_on_a_doubling_ceiling_capped_at_20s() {
        assert_eq!(backoff(1, 0.5), Duration::from_millis(500));
        assert_eq!(backoff(2, 0.5), Duration::from_secs(1));
        assert_eq!(backoff(3, 0.25), Duration::from_secs(1));
        assert_eq!(backoff(6, 0.5), Duration::from_secs(10));
        assert_eq!(backoff(40, 0.5), Duration::from_secs(10));
        assert_eq!(backoff(2, 0.0), Duration::ZERO);
    }

    #[test]
    fn quota_runs_out_after_100_retries_and_refills_on_success() {
        let mut q = RetryQuota::default();
        for _ in 0..100 {
            assert!(q.acquire());
        }
        assert!(!q.acquire());
        assert_eq!(q.available(), 0);
        q.release(false);
        assert_eq!(q.available(), 1);
        q.release(true);
        assert_eq!(q.available(), 6);
        assert!(q.acquire());
        assert_eq!(q.available(), 1);
        for _ in 0..1000 {
            q.release(true);
        }
        assert_eq!(q.available(), INITIAL_CAPACITY);
    }

    #[test]
    fn dynamodb_throttles_and_server_errors_are_retried() {
        let throttle = br#"{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException","message":"x"}"#;
        assert_eq!(classify(Some(400), throttle), Outcome::Throttle);
        assert_eq!(
            classify(Some(400), br#"{"__type":"ThrottlingException"}"#),
            Outcome::Throttle
        );
        assert_eq!(
            classify(Some(400), br#"{"__type":"x#ValidationException"}"#),
            Outcome::Fatal
        );
        assert_eq!(classify(Some(200), b"{}"), Outcome::Success);
        assert_eq!(classify(Some(503), b""), Outcome::Transient);
        assert_eq!(classify(Some(429), b"slow down"), Outcome::Fatal);
        assert_eq!(classify(None, b""), Outcome::Transient);
    }
}
