//! How long a throttle answer asks the client to wait, or that it must not retry:
//! `x-should-retry: false` (OpenAI, Anthropic) and `Stripe-Should-Retry: false` refuse;
//! else `retry-after-ms` (float milliseconds, preferred by the SDKs that send it),
//! `x-ms-retry-after-ms` (Azure), `Retry-After` (seconds, with decimals as Discord
//! sends them, or an HTTP date, RFC 9110 §10.2.3), `x-amz-retry-after` (milliseconds),
//! `grpc-retry-pushback-ms` (gRPC A6; negative means do not retry). A malformed value
//! is skipped for the next header.

use std::time::{Duration, SystemTime};

use http::HeaderMap;

use super::values::{self, text};
use super::{Hint, Pushback};

/// The first wait the answer states, with the header it came from; `None` when there
/// is none, or it is zero or past.
pub fn read(headers: &HeaderMap, now: SystemTime) -> Option<(Pushback, Hint)> {
    let refused = ["x-should-retry", "stripe-should-retry"]
        .iter()
        .any(|name| text(headers, name).is_some_and(|v| v.eq_ignore_ascii_case("false")));
    if refused {
        return Some((Pushback::Refuse, Hint::ShouldRetry));
    }
    let delay = [
        (
            Hint::RetryAfterMs,
            text(headers, "retry-after-ms").and_then(values::millis),
        ),
        (
            Hint::MsRetryAfterMs,
            text(headers, "x-ms-retry-after-ms").and_then(values::millis),
        ),
        (
            Hint::RetryAfter,
            text(headers, "retry-after").and_then(|v| retry_after(v, now)),
        ),
        (
            Hint::AmzRetryAfter,
            text(headers, "x-amz-retry-after").and_then(values::millis),
        ),
    ]
    .into_iter()
    .find_map(|(hint, delay)| Some((hint, delay?)));
    if let Some((hint, delay)) = delay {
        return (!delay.is_zero()).then_some((Pushback::Delay(delay), hint));
    }
    let pushback = text(headers, "grpc-retry-pushback-ms")?;
    match pushback.strip_prefix('-') {
        Some(negative) => values::count(negative).map(|_| (Pushback::Refuse, Hint::GrpcPushback)),
        None => {
            let delay = Duration::from_millis(values::count(pushback)?);
            (!delay.is_zero()).then_some((Pushback::Delay(delay), Hint::GrpcPushback))
        }
    }
}

/// `Retry-After`: decimal seconds or an HTTP date (zero when past).
fn retry_after(text: &str, now: SystemTime) -> Option<Duration> {
    values::seconds(text).or_else(|| {
        let at = httpdate::parse_http_date(text).ok()?;
        Some(at.duration_since(now).unwrap_or_default())
    })
}
