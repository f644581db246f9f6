//! Strict readers for the values rate-limit headers carry. Anything malformed is
//! `None`, so a header that cannot be read is ignored rather than guessed at; a value
//! too large to hold saturates, so an absurd wait is capped by `max_pause` later
//! rather than dropped.

use std::time::{Duration, SystemTime};

use http::HeaderMap;

/// A reset at or above this many seconds is a Unix time, below it a delta: no
/// window lasts 30 years, and no clock reads before 2001.
pub const EPOCH_FROM: u64 = 1_000_000_000;

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// The value of header `name` as text, trimmed.
pub fn text<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    Some(headers.get(name)?.to_str().ok()?.trim())
}

/// A non-negative integer: ASCII digits only, no sign.
pub fn count(text: &str) -> Option<u64> {
    digits(text).then(|| text.parse().unwrap_or(u64::MAX))
}

/// Non-negative decimal seconds: `2`, `2.5`, `0.250`.
pub fn seconds(text: &str) -> Option<Duration> {
    scaled(text, NANOS_PER_SEC).map(from_nanos)
}

/// Non-negative decimal milliseconds: `250`, `12.5`.
pub fn millis(text: &str) -> Option<Duration> {
    scaled(text, 1_000_000).map(from_nanos)
}

/// A Go `time.Duration` as `String()` writes it: `6m0s`, `12ms`, `1m30.5s`, `0s`, or
/// a bare `0`; units `h`, `m`, `s`, `ms`, `us`, `µs`, `ns`.
pub fn go_duration(text: &str) -> Option<Duration> {
    if text == "0" {
        return Some(Duration::ZERO);
    }
    let mut rest = text;
    let mut nanos = 0u128;
    while !rest.is_empty() {
        let split = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, tail) = rest.split_at(split);
        let split = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(split);
        let unit = match unit {
            "h" => 3600 * NANOS_PER_SEC,
            "m" => 60 * NANOS_PER_SEC,
            "s" => NANOS_PER_SEC,
            "ms" => 1_000_000,
            "us" | "µs" | "μs" => 1_000,
            "ns" => 1,
            _ => return None,
        };
        nanos = nanos.saturating_add(scaled(number, unit)?);
        rest = tail;
    }
    (!text.is_empty()).then(|| from_nanos(nanos))
}

/// A reset as the `x-ratelimit-reset` family sends it, seconds with or without
/// decimals, as the time from `now` until it comes. A value of [`EPOCH_FROM`] or more
/// is a Unix time; one now or past is zero: the window has already reset.
pub fn reset(text: &str, now: SystemTime) -> Option<Duration> {
    let value = seconds(text)?;
    if value < Duration::from_secs(EPOCH_FROM) {
        return Some(value);
    }
    let since_epoch = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    Some(value.saturating_sub(since_epoch))
}

/// An RFC 3339 time (`2026-11-26T04:10:00Z`, `…+02:00`) as the time from `now`
/// until it comes; zero when it has passed.
pub fn rfc3339(text: &str, now: SystemTime) -> Option<Duration> {
    let format = time::format_description::well_known::Rfc3339;
    let at = time::OffsetDateTime::parse(text, &format).ok()?;
    let now = time::OffsetDateTime::from(now);
    let ahead = (at - now).whole_nanoseconds();
    Some(from_nanos(u128::try_from(ahead).unwrap_or(0)))
}

fn digits(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
}

/// `digits[.digits]` times `unit` nanoseconds, exact to the nanosecond, saturating.
fn scaled(number: &str, unit: u128) -> Option<u128> {
    let (whole, fraction) = match number.split_once('.') {
        Some((whole, fraction)) => (whole, Some(fraction)),
        None => (number, None),
    };
    if !digits(whole) || fraction.is_some_and(|f| !digits(f)) {
        return None;
    }
    let whole = whole.parse::<u128>().unwrap_or(u128::MAX);
    let (mut part, mut scale) = (0u128, 1u128);
    // 18 digits are finer than a nanosecond in every unit used here.
    for digit in fraction.unwrap_or("").bytes().take(18) {
        part = part * 10 + u128::from(digit - b'0');
        scale *= 10;
    }
    Some(
        whole
            .saturating_mul(unit)
            .saturating_add(part * unit / scale),
    )
}

fn from_nanos(nanos: u128) -> Duration {
    let secs = u64::try_from(nanos / NANOS_PER_SEC).unwrap_or(u64::MAX);
    // The remainder is below a billion.
    Duration::new(secs, (nanos % NANOS_PER_SEC) as u32)
}
