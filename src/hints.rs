//! What an upstream's headers say about pacing: how long to hold off after a throttle,
//! how much of a rate limit is left, and how long a gRPC client will wait. Pure:
//! headers and the wall-clock time in, durations out. The proxy turns them into pauses
//! and spacing floors, capped by `max_pause` (and `max_interval`): a header may ask for
//! years, and one answer must not stop an upstream for longer than the operator allows.

use std::time::{Duration, SystemTime};

use http::HeaderMap;

/// The server's answer to "may I send again?" on a throttle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pushback {
    /// Hold every dispatch for this long.
    Delay(Duration),
    /// Do not retry this request (a negative `grpc-retry-pushback-ms`).
    Refuse,
}

/// Which header asked for a pause; the `header` label of
/// `easeoff_hint_pauses_capped_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hint {
    RetryAfter,
    AmzRetryAfter,
    GrpcPushback,
    /// A `RateLimit` field (or pair) with little or nothing left.
    RateLimit,
}

impl Hint {
    /// Every hint, in label order.
    pub const ALL: [Hint; 4] = [
        Hint::RetryAfter,
        Hint::AmzRetryAfter,
        Hint::GrpcPushback,
        Hint::RateLimit,
    ];

    /// The metric label value: the header's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Hint::RetryAfter => "retry-after",
            Hint::AmzRetryAfter => "x-amz-retry-after",
            Hint::GrpcPushback => "grpc-retry-pushback-ms",
            Hint::RateLimit => "ratelimit",
        }
    }
}

/// The delay a throttle response asks for: `Retry-After` (delay-seconds or HTTP-date,
/// RFC 9110 §10.2.3), else `x-amz-retry-after` (milliseconds), else
/// `grpc-retry-pushback-ms` (gRPC A6; negative means do not retry). `None` when there
/// is none, it does not parse, or it lies in the past.
pub fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Pushback> {
    pushback(headers, now).map(|(pushback, _)| pushback)
}

/// [`retry_after`], with the header it came from.
pub fn pushback(headers: &HeaderMap, now: SystemTime) -> Option<(Pushback, Hint)> {
    if let Some(value) = headers.get(http::header::RETRY_AFTER) {
        let text = value.to_str().ok()?.trim();
        let delay = match text.parse::<u64>() {
            Ok(seconds) => Duration::from_secs(seconds),
            Err(_) => httpdate::parse_http_date(text)
                .ok()?
                .duration_since(now)
                .ok()?,
        };
        return delay_of(delay, Hint::RetryAfter);
    }
    if let Some(millis) = number::<u64>(headers, "x-amz-retry-after") {
        return delay_of(Duration::from_millis(millis), Hint::AmzRetryAfter);
    }
    let pushback = number::<i64>(headers, "grpc-retry-pushback-ms")?;
    match u64::try_from(pushback) {
        Ok(millis) => delay_of(Duration::from_millis(millis), Hint::GrpcPushback),
        Err(_) => Some((Pushback::Refuse, Hint::GrpcPushback)),
    }
}

/// What is left of an advertised rate limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quota {
    /// Requests left in the current window.
    pub remaining: u64,
    /// The reset as sent: seconds from now, or a Unix time when larger than now.
    pub reset: u64,
}

impl Quota {
    /// Time until the window resets.
    pub fn reset_in(self, now: SystemTime) -> Duration {
        let now = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Duration::from_secs(if self.reset > now {
            self.reset - now
        } else {
            self.reset
        })
    }

    /// The spacing that spreads what is left over the rest of the window.
    pub fn spacing(self, now: SystemTime) -> Duration {
        self.reset_in(now) / u32::try_from(self.remaining.max(1)).unwrap_or(u32::MAX)
    }
}

/// The tightest quota the answer advertises: the IETF `RateLimit` field
/// (`"name";r=R;t=T`, or the older `remaining=R, reset=T`), else
/// `RateLimit-Remaining`/`RateLimit-Reset`, else the `X-RateLimit-` pair. Every
/// answer passes here, so one pass over the names comes first: an answer without any
/// rate-limit field costs no look-up.
pub fn quota(headers: &HeaderMap) -> Option<Quota> {
    let advertised = headers.keys().any(|name| {
        let name = name.as_str();
        name.starts_with("ratelimit") || name.starts_with("x-ratelimit")
    });
    if !advertised {
        return None;
    }
    if let Some(field) = headers.get("ratelimit").and_then(|v| v.to_str().ok()) {
        return structured_quota(field).map(|(remaining, reset)| Quota { remaining, reset });
    }
    [
        ("ratelimit-remaining", "ratelimit-reset"),
        ("x-ratelimit-remaining", "x-ratelimit-reset"),
    ]
    .iter()
    .find_map(|(remaining, reset)| {
        Some(Quota {
            remaining: number(headers, remaining)?,
            reset: number(headers, reset)?,
        })
    })
}

/// `(remaining, reset)` of the tightest policy in a `RateLimit` field.
fn structured_quota(field: &str) -> Option<(u64, u64)> {
    let mut tightest: Option<(u64, u64)> = None;
    let mut consider = |remaining: u64, reset: u64| {
        // Tightest: least left per second of window (exhausted beats everything).
        // In u128: both sides are products of two header values, up to u64::MAX each.
        let per_window = |r: u64, t: u64| u128::from(r) * u128::from(t.max(1));
        let tighter = tightest.is_none_or(|(r, t)| per_window(remaining, t) < per_window(r, reset));
        if tighter {
            tightest = Some((remaining, reset));
        }
    };
    let (mut old_remaining, mut old_reset) = (None, None);
    for item in field.split(',') {
        let (mut r, mut t) = (None, None);
        for part in item.split(';') {
            let Some((key, value)) = part.split_once('=') else {
                continue;
            };
            let value = value.trim().parse::<u64>().ok();
            match key.trim() {
                "r" => r = value,
                "t" => t = value,
                "remaining" => old_remaining = value,
                "reset" => old_reset = value,
                _ => {}
            }
        }
        if let (Some(r), Some(t)) = (r, t) {
            consider(r, t);
        }
    }
    if let (Some(r), Some(t)) = (old_remaining, old_reset) {
        consider(r, t);
    }
    tightest
}

/// A gRPC request's own deadline (`grpc-timeout`: up to 8 digits and a unit H, M, S,
/// m, u or n).
pub fn grpc_timeout(headers: &HeaderMap) -> Option<Duration> {
    let text = headers.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = text.split_at(text.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 {
        return None;
    }
    let value: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(value * 3600),
        "M" => Duration::from_secs(value * 60),
        "S" => Duration::from_secs(value),
        "m" => Duration::from_millis(value),
        "u" => Duration::from_micros(value),
        "n" => Duration::from_nanos(value),
        _ => return None,
    })
}

fn number<T: std::str::FromStr>(headers: &HeaderMap, name: &str) -> Option<T> {
    headers.get(name)?.to_str().ok()?.trim().parse().ok()
}

fn delay_of(d: Duration, hint: Hint) -> Option<(Pushback, Hint)> {
    (!d.is_zero()).then_some((Pushback::Delay(d), hint))
}

/// `pause` clamped to `max`; `true` when the clamp took something off.
pub fn cap(pause: Duration, max: Duration) -> (Duration, bool) {
    (pause.min(max), pause > max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn with(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        h
    }

    fn now() -> SystemTime {
        // Sun, 06 Nov 1994 08:49:37 GMT, RFC 9110's example date.
        SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777)
    }

    fn delay(ms: u64) -> Option<Pushback> {
        Some(Pushback::Delay(Duration::from_millis(ms)))
    }

    #[test]
    fn retry_after_in_seconds() {
        assert_eq!(
            retry_after(&with(&[("retry-after", "2")]), now()),
            delay(2000)
        );
        assert_eq!(
            retry_after(&with(&[("retry-after", " 120 ")]), now()),
            delay(120_000)
        );
    }

    #[test]
    fn retry_after_as_an_http_date() {
        let h = with(&[("retry-after", "Sun, 06 Nov 1994 08:49:40 GMT")]);
        assert_eq!(retry_after(&h, now()), delay(3000));
    }

    #[test]
    fn retry_after_in_the_past_or_zero_means_no_pause() {
        let past = with(&[("retry-after", "Sun, 06 Nov 1994 08:49:00 GMT")]);
        assert_eq!(retry_after(&past, now()), None);
        assert_eq!(retry_after(&with(&[("retry-after", "0")]), now()), None);
    }

    #[test]
    fn unparsable_retry_after_means_no_pause() {
        for bad in ["soon", "-1", "1.5", "Sun, 06 Nov 1994"] {
            assert_eq!(
                retry_after(&with(&[("retry-after", bad)]), now()),
                None,
                "{bad}"
            );
        }
    }

    #[test]
    fn x_amz_retry_after_is_in_milliseconds() {
        assert_eq!(
            retry_after(&with(&[("x-amz-retry-after", "1500")]), now()),
            delay(1500)
        );
        assert_eq!(retry_after(&HeaderMap::new(), now()), None);
    }

    #[test]
    fn grpc_pushback_delays_or_refuses() {
        let h = with(&[("grpc-retry-pushback-ms", "250")]);
        assert_eq!(retry_after(&h, now()), delay(250));
        let h = with(&[("grpc-retry-pushback-ms", "-1")]);
        assert_eq!(retry_after(&h, now()), Some(Pushback::Refuse));
    }

    fn quota_of(pairs: &[(&'static str, &str)]) -> Option<(u64, Duration)> {
        quota(&with(pairs)).map(|q| (q.remaining, q.reset_in(now())))
    }

    #[test]
    fn ietf_ratelimit_fields_take_the_tightest_policy() {
        let secs = Duration::from_secs;
        let q = |field| quota_of(&[("ratelimit", field)]);
        assert_eq!(q(r#""default";r=50;t=30"#), Some((50, secs(30))));
        assert_eq!(
            q(r#""burst";r=5;t=1, "daily";r=1000;t=3600"#),
            Some((1000, secs(3600)))
        );
        assert_eq!(q(r#""a";r=100;t=10, "b";r=0;t=60"#), Some((0, secs(60))));
        // The earlier draft's form.
        assert_eq!(q("limit=100, remaining=7, reset=20"), Some((7, secs(20))));
        assert_eq!(q("nonsense"), None);
    }

    #[test]
    fn policies_with_huge_numbers_are_compared_without_overflow() {
        let max = u64::MAX.to_string();
        let field = format!(r#""a";r={max};t={max}, "b";r=1;t={max}"#);
        let secs = Duration::from_secs;
        let reset = u64::MAX - 784_111_777;
        assert_eq!(
            quota_of(&[("ratelimit", field.as_str())]),
            Some((1, secs(reset)))
        );
    }

    #[test]
    fn ratelimit_header_pairs_with_delta_or_epoch_resets() {
        let secs = Duration::from_secs;
        let pair = [("ratelimit-remaining", "0"), ("ratelimit-reset", "12")];
        assert_eq!(quota_of(&pair), Some((0, secs(12))));
        let epoch = (784_111_777 + 30).to_string();
        let pair = [
            ("x-ratelimit-remaining", "60"),
            ("x-ratelimit-reset", epoch.as_str()),
        ];
        assert_eq!(quota_of(&pair), Some((60, secs(30))));
        assert_eq!(quota_of(&[("x-ratelimit-remaining", "5")]), None);
        assert_eq!(quota_of(&[("content-type", "text/plain")]), None);
    }

    #[test]
    fn a_quota_spreads_what_is_left_over_the_window() {
        let q = Quota {
            remaining: 60,
            reset: 30,
        };
        assert_eq!(q.spacing(now()), Duration::from_millis(500));
        assert_eq!(
            Quota {
                remaining: 0,
                reset: 30
            }
            .spacing(now()),
            Duration::from_secs(30)
        );
    }

    #[test]
    fn grpc_timeouts_in_every_unit() {
        let t = |v| grpc_timeout(&with(&[("grpc-timeout", v)]));
        assert_eq!(t("100m"), Some(Duration::from_millis(100)));
        assert_eq!(t("2S"), Some(Duration::from_secs(2)));
        assert_eq!(t("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(t("5u"), Some(Duration::from_micros(5)));
        assert_eq!(t("123456789S"), None);
        assert_eq!(t("m"), None);
        assert_eq!(t("10x"), None);
    }
}
