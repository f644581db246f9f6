//! OpenAI and Azure OpenAI: `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`,
//! resets as Go durations (`6m0s`, `12ms`, `1m30.5s`). Azure OpenAI may send the
//! remaining counts without resets.

use std::time::SystemTime;

use http::HeaderMap;

use super::values::{self, text};
use super::{Quota, Reading};

/// Reads the request and token windows into `reading`.
pub fn read(headers: &HeaderMap, _now: SystemTime, reading: &mut Reading<'_>) {
    let requests = window(headers, REQUESTS);
    let tokens = window(headers, TOKENS);
    if reading.requests.is_none() {
        reading.requests = requests.and_then(|(q, _)| q);
    }
    if reading.tokens.is_none() {
        reading.tokens = tokens.and_then(|(q, _)| q);
    }
    if reading.requests.is_none() && reading.left.is_none() {
        reading.left = requests.map(|(_, remaining)| remaining);
    }
}

/// A window's headers: limit, remaining, reset.
type Names = [&'static str; 3];

const REQUESTS: Names = [
    "x-ratelimit-limit-requests",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-reset-requests",
];
const TOKENS: Names = [
    "x-ratelimit-limit-tokens",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-tokens",
];

/// One window: its quota when the reset is sent, and what is left.
fn window(headers: &HeaderMap, [limit, remaining, reset]: Names) -> Option<(Option<Quota>, u64)> {
    let remaining = values::count(text(headers, remaining)?)?;
    let reset =
        text(headers, reset).and_then(|v| values::go_duration(v).or_else(|| values::seconds(v)));
    let quota = reset.map(|reset| Quota {
        remaining,
        reset,
        limit: text(headers, limit).and_then(values::count),
        refills: true,
    });
    Some((quota, remaining))
}
