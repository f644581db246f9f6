//! The `X-RateLimit-` family: GitHub (epoch resets, `x-ratelimit-resource`), Discord
//! (`X-RateLimit-Reset-After` in seconds with decimals, `X-RateLimit-Bucket`), X
//! (`x-rate-limit-*`) and the many APIs that copied them. A reset is an epoch or a
//! delta, told apart by magnitude.

use std::time::SystemTime;

use http::HeaderMap;

use super::values::{self, text};
use super::{Quota, Reading};

/// A dialect's headers: limit, remaining, reset, reset-after.
type Names = [&'static str; 4];

const DIALECTS: [Names; 2] = [
    [
        "x-ratelimit-limit",
        "x-ratelimit-remaining",
        "x-ratelimit-reset",
        "x-ratelimit-reset-after",
    ],
    [
        "x-rate-limit-limit",
        "x-rate-limit-remaining",
        "x-rate-limit-reset",
        "x-rate-limit-reset-after",
    ],
];

/// Reads the window into `reading`.
pub fn read(headers: &HeaderMap, now: SystemTime, reading: &mut Reading) {
    if reading.requests.is_none() {
        reading.requests = DIALECTS
            .iter()
            .find_map(|names| window(headers, *names, now));
    }
}

fn window(headers: &HeaderMap, names: Names, now: SystemTime) -> Option<Quota> {
    let [limit, remaining, reset, reset_after] = names;
    // Discord's reset-after is exact and immune to clock skew: it comes first.
    let reset = match text(headers, reset_after).and_then(values::seconds) {
        Some(after) => after,
        None => values::reset(text(headers, reset)?, now)?,
    };
    Some(Quota {
        remaining: values::count(text(headers, remaining)?)?,
        reset,
        limit: text(headers, limit).and_then(values::count),
        refills: false,
    })
}
