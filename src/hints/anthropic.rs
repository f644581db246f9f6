//! Anthropic: `anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-
//! {limit,remaining,reset}`, resets in RFC 3339. Of the three token windows, the one
//! with the least left of its limit binds.

use std::time::SystemTime;

use http::HeaderMap;

use super::values::{self, text};
use super::{Quota, Reading, TokenWindow};

/// Anthropic's binding token window may be the input or the output window, which
/// counts a share of what a lane reserves (prompt and `max_tokens` together); its
/// answers' `usage` is what it charged. Its token `remaining` values are rounded to
/// the nearest thousand (<https://docs.anthropic.com/en/api/rate-limits>), and which
/// window has the least left changes between answers: coarse.
pub const TOKEN_WINDOW: TokenWindow = TokenWindow {
    least_share: 0.25,
    counts_reserved: false,
    coarse: true,
};

/// A window's headers: limit, remaining, reset.
type Names = [&'static str; 3];

const REQUESTS: Names = [
    "anthropic-ratelimit-requests-limit",
    "anthropic-ratelimit-requests-remaining",
    "anthropic-ratelimit-requests-reset",
];
const TOKENS: [Names; 3] = [
    [
        "anthropic-ratelimit-tokens-limit",
        "anthropic-ratelimit-tokens-remaining",
        "anthropic-ratelimit-tokens-reset",
    ],
    [
        "anthropic-ratelimit-input-tokens-limit",
        "anthropic-ratelimit-input-tokens-remaining",
        "anthropic-ratelimit-input-tokens-reset",
    ],
    [
        "anthropic-ratelimit-output-tokens-limit",
        "anthropic-ratelimit-output-tokens-remaining",
        "anthropic-ratelimit-output-tokens-reset",
    ],
];

/// Reads the request window and the tightest token window into `reading`.
pub fn read(headers: &HeaderMap, now: SystemTime, reading: &mut Reading) {
    if reading.requests.is_none() {
        reading.requests = window(headers, REQUESTS, now);
    }
    if reading.tokens.is_none() {
        reading.tokens = TOKENS
            .iter()
            .filter_map(|names| window(headers, *names, now))
            .min_by_key(|q| share_left(*q));
    }
}

/// What is left as a share of the limit, in millionths (the count when no limit is
/// sent).
fn share_left(q: Quota) -> u128 {
    match q.limit {
        Some(limit) if limit > 0 => u128::from(q.remaining) * 1_000_000 / u128::from(limit),
        _ => u128::from(q.remaining),
    }
}

fn window(headers: &HeaderMap, [limit, remaining, reset]: Names, now: SystemTime) -> Option<Quota> {
    Some(Quota {
        remaining: values::count(text(headers, remaining)?)?,
        reset: values::rfc3339(text(headers, reset)?, now)?,
        limit: text(headers, limit).and_then(values::count),
        refills: true,
    })
}
