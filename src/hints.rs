//! What an upstream's headers say about pacing, in every dialect rate-limited APIs
//! speak: how much is left, when it resets, how long to wait. One
//! file per dialect family, each filling the one [`Reading`]; adding a vendor is a file
//! and a row in `FAMILIES`. Pure: headers and the wall-clock time in, durations out.
//! Every value is read strictly (a malformed one is ignored, as the IETF draft says).
//! The proxy turns readings into pauses and spacing floors, capped by `max_pause` (and
//! `max_interval`): a header may ask for years, and one answer must not stop an
//! upstream for longer than the operator allows.

pub mod anthropic;
mod ietf;
pub mod openai;
mod shopify;
mod values;
mod wait;
mod x_ratelimit;

#[cfg(test)]
mod tests;

use std::time::{Duration, SystemTime};

use http::HeaderMap;

/// The server's answer to "may I send again?" on a throttle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pushback {
    /// Hold every dispatch for this long.
    Delay(Duration),
    /// Do not retry this request (a negative `grpc-retry-pushback-ms`).
    Refuse,
}

crate::spelled::spelled! {
    fn as_str;
    /// Which header asked for a pause; the `header` label of
    /// `easeoff_hint_pauses_capped_total`.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Hint {
        RetryAfter = "retry-after",
        AmzRetryAfter = "x-amz-retry-after",
        GrpcPushback = "grpc-retry-pushback-ms",
        /// A rate-limit window with little or nothing left, in any dialect.
        RateLimit = "ratelimit",
        RetryAfterMs = "retry-after-ms",
        MsRetryAfterMs = "x-ms-retry-after-ms",
        /// `x-should-retry: false` or `Stripe-Should-Retry: false`: never a pause.
        ShouldRetry = "x-should-retry",
    }
}

/// A rate-limit window as an answer states it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quota {
    /// Requests (or, in [`Reading::tokens`], tokens) left in the window.
    pub remaining: u64,
    /// Time from the answer until the window resets; zero when it has already.
    pub reset: Duration,
    /// The window's size, when the answer says.
    pub limit: Option<u64>,
    /// It refills continuously (a token bucket): `reset` is when it is full again.
    pub refills: bool,
}

/// How a vendor's token window counts a lane's requests: what the lane's rules need
/// to read one (see `lane::rules::quota`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TokenWindow {
    /// The least share of one of the lane's reserved costs the window counts per
    /// answer: one where the window counts the lane's own estimate (more when others
    /// share it), less where it counts one kind of token only.
    pub least_share: f64,
    /// The window counts a request at its reservation whatever the answer used, so an
    /// answer's own count only ever adds.
    pub counts_reserved: bool,
    /// Its `remaining` is rounded (Anthropic's, to the nearest thousand) and the
    /// binding window may change from one answer to the next, so how far it falls per
    /// answer says nothing: the lane's own mean cost per request stands in for it.
    pub coarse: bool,
}

impl TokenWindow {
    /// A window that counts what the answers say they used.
    pub const USED: TokenWindow = TokenWindow {
        least_share: 1.0,
        counts_reserved: false,
        coarse: false,
    };
    /// OpenAI's ([`openai::TOKEN_WINDOW`]).
    pub const OPENAI: TokenWindow = openai::TOKEN_WINDOW;
    /// Anthropic's ([`anthropic::TOKEN_WINDOW`]).
    pub const ANTHROPIC: TokenWindow = anthropic::TOKEN_WINDOW;
}

/// Everything one answer says about pacing, whatever dialect it speaks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reading {
    /// The request window.
    pub requests: Option<Quota>,
    /// The token window (OpenAI, Anthropic): tokens left and when they are back.
    pub tokens: Option<Quota>,
    /// How long to wait before sending again, or not to retry, and which header said.
    pub wait: Option<(Pushback, Hint)>,
}

impl Reading {
    /// Whether a window it states is spent: the whole caller is refused until it
    /// refills or resets.
    pub fn spent(&self) -> bool {
        [self.requests, self.tokens]
            .iter()
            .flatten()
            .any(|w| w.remaining == 0)
    }
}

/// One dialect family: the name prefixes of its headers, and its reader.
struct Family {
    prefixes: &'static [&'static str],
    read: fn(&HeaderMap, SystemTime, &mut Reading),
}

/// Every family, in precedence order: where two state a window, the first wins.
const FAMILIES: [Family; 5] = [
    Family {
        prefixes: &["ratelimit"],
        read: ietf::read,
    },
    Family {
        prefixes: &["x-ratelimit-"],
        read: openai::read,
    },
    Family {
        prefixes: &["anthropic-ratelimit-"],
        read: anthropic::read,
    },
    Family {
        prefixes: &["x-ratelimit-", "x-rate-limit-"],
        read: x_ratelimit::read,
    },
    Family {
        prefixes: &["x-shopify-shop-api-call-limit"],
        read: shopify::read,
    },
];

/// The headers that state a wait ([`wait`]): the answer's wait is read only when one
/// is present.
const WAITS: [&str; 7] = [
    "retry-after",
    "retry-after-ms",
    "x-ms-retry-after-ms",
    "x-amz-retry-after",
    "grpc-retry-pushback-ms",
    "x-should-retry",
    "stripe-should-retry",
];

/// Whether `name` could be one of [`WAITS`]: the common names of every answer
/// (`date`, `server`, `content-type`, ...) are told apart by length and first letter
/// without a comparison each.
fn may_wait(name: &str) -> bool {
    name.len() >= "retry-after".len() && matches!(name.as_bytes()[0], b'r' | b'x' | b'g' | b's')
}

/// Everything the answer says: its windows and its wait ([`stated`], or nothing).
pub fn read(headers: &HeaderMap, now: SystemTime) -> Reading {
    stated(headers, now).unwrap_or_default()
}

/// Everything the answer says, if it states anything. Every answer passes here, so
/// one pass over the names comes first: an answer without any rate-limit or wait
/// field costs no look-up, and no reading to carry.
pub fn stated(headers: &HeaderMap, now: SystemTime) -> Option<Reading> {
    let mut present = 0u32;
    let mut waits = false;
    for name in headers.keys() {
        let name = name.as_str();
        for (i, family) in FAMILIES.iter().enumerate() {
            if family.prefixes.iter().any(|p| name.starts_with(p)) {
                present |= 1 << i;
            }
        }
        waits |= may_wait(name) && WAITS.contains(&name);
    }
    if present == 0 && !waits {
        return None;
    }
    let mut reading = Reading::default();
    for (i, family) in FAMILIES.iter().enumerate() {
        if present & (1 << i) != 0 {
            (family.read)(headers, now, &mut reading);
        }
    }
    if waits {
        reading.wait = wait::read(headers, now);
    }
    reading.bound();
    Some(reading)
}

/// The longest reset or wait an answer is read as (a century): a header may say
/// anything up to `u64::MAX` seconds, and every decision on it (a spacing spread
/// over the window, a pause added to the clock) is arithmetic that such a value
/// would overflow. `max_pause` (at most a day) cuts it further; `/status` shows what
/// was asked, up to this.
pub const LONGEST: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

impl Reading {
    /// Cuts every duration of the reading to at most [`LONGEST`].
    fn bound(&mut self) {
        for quota in [&mut self.requests, &mut self.tokens].into_iter().flatten() {
            quota.reset = quota.reset.min(LONGEST);
        }
        if let Some((Pushback::Delay(delay), _)) = &mut self.wait {
            *delay = (*delay).min(LONGEST);
        }
    }
}

/// A gRPC request's own deadline (`grpc-timeout`: up to 8 digits and a unit H, M, S,
/// m, u or n).
pub fn grpc_timeout(headers: &HeaderMap) -> Option<Duration> {
    let text = headers.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = text.split_at(text.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 {
        return None;
    }
    let value: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(value * 3600),
        "M" => Duration::from_secs(value * 60),
        "S" => Duration::from_secs(value),
        "m" => Duration::from_millis(value),
        "u" => Duration::from_micros(value),
        "n" => Duration::from_nanos(value),
        _ => return None,
    })
}

/// `pause` clamped to `max`; `true` when the clamp took something off.
pub fn cap(pause: Duration, max: Duration) -> (Duration, bool) {
    (pause.min(max), pause > max)
}
