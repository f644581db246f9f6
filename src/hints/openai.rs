//! OpenAI and Azure OpenAI: `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`,
//! resets as Go durations (`6m0s`, `12ms`, `1m30.5s`).

use std::time::SystemTime;

use http::HeaderMap;

use super::values::{self, text};
use super::{Quota, Reading, TokenWindow};

/// OpenAI's token window counts a request at what it estimates (the prompt's
/// characters over four and all of `max_tokens`), whatever the answer used: a lane's
/// reservation counts at least whole, and an answer never refunds it.
pub const TOKEN_WINDOW: TokenWindow = TokenWindow {
    least_share: 1.0,
    counts_reserved: true,
    coarse: false,
};

/// Reads the request and token windows into `reading`.
pub fn read(headers: &HeaderMap, _now: SystemTime, reading: &mut Reading) {
    if reading.requests.is_none() {
        reading.requests = window(headers, REQUESTS);
    }
    if reading.tokens.is_none() {
        reading.tokens = window(headers, TOKENS);
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

/// One window, when both what is left and its reset are sent (Azure OpenAI may send
/// the count alone, which says nothing about when to send).
fn window(headers: &HeaderMap, [limit, remaining, reset]: Names) -> Option<Quota> {
    let remaining = values::count(text(headers, remaining)?)?;
    let reset =
        text(headers, reset).and_then(|v| values::go_duration(v).or_else(|| values::seconds(v)));
    reset.map(|reset| Quota {
        remaining,
        reset,
        limit: text(headers, limit).and_then(values::count),
        refills: true,
    })
}
