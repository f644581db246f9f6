//! Hint readers on arbitrary header values, and the decisions production takes on
//! what they read. The first 8 bytes are the wall-clock time (seconds since 1970); the
//! rest is split at `\n` into the values of the headers below, in order. Reading and
//! deciding must never panic, and what they yield must be usable: every pause and
//! floor within `max_pause`, and addable to a clock reading.

#![no_main]

use std::time::{Duration, SystemTime};

use easeoff::hints::{self, Pushback, TokenWindow};
use easeoff::lane::rules::{self, Floor, QuotaEffects, QuotaFacts, UnitFacts};
use easeoff::quota::{Falls, Spend};
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
    let reading = hints::read(&headers, now);
    let _ = hints::grpc_timeout(&headers);
    // What production does with the reading: the lane's rules (which run
    // `quota::decide` and learn the windows' falls), in every kind of lane, twice so
    // that a fall is learned, and the effects added to a clock reading.
    let falls = Falls::default();
    let instant = std::time::Instant::now();
    for facts in facts() {
        for at in [Duration::ZERO, Duration::from_millis(5)] {
            let facts = QuotaFacts { at, ..facts };
            let effects = rules::quota(&reading, &falls, &facts);
            check(&effects, facts.max, instant);
        }
    }
    if let Some((Pushback::Delay(delay), _)) = reading.wait {
        let capped = rules::Capped::of(delay, Duration::from_secs(86_400));
        let _ = instant + capped.duration;
    }
});

/// A lane that paces in requests and one in tokens for each vendor's window, with
/// nothing and a lot in flight, under a minute's and a day's `max_pause`.
fn facts() -> impl Iterator<Item = QuotaFacts> {
    let units = [
        None,
        Some(TokenWindow::USED),
        Some(TokenWindow::OPENAI),
        Some(TokenWindow::ANTHROPIC),
    ];
    units.into_iter().flat_map(|window| {
        [(0, 60), (u64::MAX, 86_400)].map(move |(in_flight, max)| QuotaFacts {
            spend: Spend::Use,
            in_flight,
            max: Duration::from_secs(max),
            at: Duration::ZERO,
            units: window.map(|window| UnitFacts {
                mean: 120.0,
                queued: u64::MAX,
                window,
            }),
        })
    })
}

/// Every duration the effects hold is at most `max` and can be added to the clock.
fn check(effects: &QuotaEffects, max: Duration, instant: std::time::Instant) {
    if let Some(pause) = effects.pause {
        assert!(pause.duration <= max);
        let _ = instant + pause.duration;
    }
    for floor in [effects.floor, effects.request_floor] {
        if let Floor::Set { spacing, lasts } = floor {
            assert!(spacing <= lasts.duration && lasts.duration <= max);
            let _ = instant + lasts.duration;
        }
    }
}
