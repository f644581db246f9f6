//! Hint readers on arbitrary header values. The first 8 bytes are the wall-clock time
//! (seconds since 1970); the rest is split at `\n` into the values of the headers below,
//! in order. Reading must never panic, and what it yields must be usable: a pause or
//! window capped at a minute can be added to a clock reading.

#![no_main]

use std::time::{Duration, SystemTime};

use easeoff::hints::{self, Pushback};
use http::{HeaderMap, HeaderName, HeaderValue};
use libfuzzer_sys::fuzz_target;

const NAMES: [&str; 34] = [
    "retry-after",
    "x-amz-retry-after",
    "grpc-retry-pushback-ms",
    "ratelimit",
    "ratelimit-remaining",
    "ratelimit-reset",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
    "grpc-timeout",
    "ratelimit-policy",
    "x-ratelimit-limit",
    "ratelimit-limit",
    "retry-after-ms",
    "x-should-retry",
    "stripe-should-retry",
    "x-ms-retry-after-ms",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-reset-requests",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-tokens",
    "anthropic-ratelimit-requests-remaining",
    "anthropic-ratelimit-requests-reset",
    "anthropic-ratelimit-tokens-limit",
    "anthropic-ratelimit-tokens-remaining",
    "anthropic-ratelimit-tokens-reset",
    "anthropic-ratelimit-output-tokens-remaining",
    "anthropic-ratelimit-output-tokens-reset",
    "x-ratelimit-reset-after",
    "x-ratelimit-resource",
    "x-rate-limit-remaining",
    "x-rate-limit-reset",
    "x-shopify-shop-api-call-limit",
    "x-ms-ratelimit-remaining-subscription-reads",
    "x-ratelimit-bucket",
];

fuzz_target!(|data: &[u8]| {
    let Some((clock, values)) = data.split_first_chunk::<8>() else {
        return;
    };
    // Up to the year 9999 or so: the wall clock a host could report.
    let secs = u64::from_le_bytes(*clock) % 253_402_300_800;
    let Some(now) = SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(secs)) else {
        return;
    };
    let mut headers = HeaderMap::new();
    for (name, value) in NAMES.iter().zip(values.split(|&b| b == b'\n')) {
        if value == b"-" {
            continue;
        }
        if let Ok(value) = HeaderValue::from_bytes(value) {
            headers.append(HeaderName::from_static(name), value);
        }
    }
    let max = Duration::from_secs(60);
    let instant = std::time::Instant::now();
    let reading = hints::read(&headers, now);
    if let Some((Pushback::Delay(delay), _)) = reading.wait {
        let (capped, _) = hints::cap(delay, max);
        let _ = instant + capped;
    }
    for quota in [reading.requests, reading.tokens, reading.binding()]
        .into_iter()
        .flatten()
    {
        let (reset, _) = hints::cap(quota.reset, max);
        let _ = instant + reset + quota.spacing().min(reset);
    }
    assert_eq!(hints::quota(&headers, now), reading.binding());
    let _ = hints::grpc_timeout(&headers);
});
