//! A status that is a throttle on one answer and an error on the next: GitHub answers
//! 403 both when a rate limit is spent and when a token lacks a permission. Listed in
//! `statuses`, such an answer counts as a throttle only when its headers or body say
//! "rate limit"; otherwise it is the error it looks like and goes back at once.

use http::HeaderMap;

/// Statuses that also mean a refusal the client must see at once.
pub const SHARED: [u16; 1] = [403];

/// The headers of a rate-limit answer: a stated wait, or a window with nothing left.
pub fn headers_say_so(headers: &HeaderMap) -> bool {
    const WAITS: [&str; 4] = [
        "retry-after",
        "retry-after-ms",
        "x-ms-retry-after-ms",
        "x-amz-retry-after",
    ];
    const REMAINING: [&str; 3] = [
        "x-ratelimit-remaining",
        "ratelimit-remaining",
        "x-rate-limit-remaining",
    ];
    WAITS.iter().any(|name| headers.contains_key(*name))
        || REMAINING
            .iter()
            .any(|name| headers.get(*name).is_some_and(|v| v.as_bytes() == b"0"))
}

/// A body that speaks of a rate limit ("API rate limit exceeded", "secondary rate
/// limit"), in any case.
pub fn body_says_so(body: &[u8]) -> bool {
    const NEEDLE: &[u8] = b"rate limit";
    body.windows(NEEDLE.len())
        .any(|w| w.eq_ignore_ascii_case(NEEDLE))
}
