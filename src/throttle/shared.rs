//! Listed statuses that mean more than one thing. GitHub answers 403 both when a rate
//! limit is spent and when a token lacks a permission: it counts as a throttle only
//! when its headers or body say "rate limit", and otherwise is the error it looks like
//! and goes back at once. 529 (Anthropic) and a 503 whose body says "overloaded" are
//! overload: the upstream is busy whoever asks, which is no quota to learn. A 503 that
//! says "busy" (Ollama's full queue) is a server whose slots are full.

use http::HeaderMap;

use super::{Signal, Verdict};

/// The verdict on a listed status from its head, or `None` when the body must tell.
pub fn head(code: u16, headers: &HeaderMap) -> Option<Verdict> {
    match code {
        529 => Some(Verdict::Throttle(Signal::Overload)),
        403 if headers_say_so(headers) => Some(Verdict::Throttle(Signal::Status)),
        403 | 503 => None,
        _ => Some(Verdict::Throttle(Signal::Status)),
    }
}

/// The verdict on a listed status whose body was too large to read.
pub fn unread(code: u16) -> Verdict {
    match code {
        403 => Verdict::Success,
        _ => Verdict::Throttle(Signal::Status),
    }
}

/// The verdict on a listed status from its (small) body, for those [`head`] left open.
pub fn by_body(code: u16, body: &[u8]) -> Option<Verdict> {
    match code {
        403 => Some(if says(body, b"rate limit") {
            Verdict::Throttle(Signal::Body)
        } else {
            Verdict::Success
        }),
        503 if says(body, b"overloaded") => Some(Verdict::Throttle(Signal::Overload)),
        // Ollama's "server busy": its queue is full.
        503 if says(body, b"busy") => Some(Verdict::Throttle(Signal::Busy)),
        503 => Some(Verdict::Throttle(Signal::Status)),
        _ => None,
    }
}

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

/// `body` holds `needle` ("API rate limit exceeded", "secondary Rate Limit",
/// "overloaded_error"), in any case.
fn says(body: &[u8], needle: &[u8]) -> bool {
    body.windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle))
}
