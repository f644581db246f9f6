//! The attempt policy: after each attempt of one client request, what happens next.
//! Send again (after a connection backoff), give the client the upstream's throttle,
//! shed with a Retry-After, or give up on an unreachable upstream, and why.
//!
//! The proxy's request path (`proxy/service.rs`) and `easeoff simulate` both run one
//! [`Attempts`] per request, so a retry rule is written once. Pure: time comes in as
//! the time since the request arrived, and the retry budget is asked through a
//! closure, last, so a refusal is only counted when everything else allowed a retry.

use std::time::Duration;

use crate::config::RetrySettings;
use crate::retry::{self, NoRetry};

/// What an attempt came to, as far as the policy cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// No slot before the deadline; one would have come after `retry_after`.
    Shed { retry_after: Duration },
    /// The connection backoff turned the attempt away for `wait`.
    BackoffClosed { wait: Duration },
    /// No connection could be made; the backoff now holds for `wait`.
    ConnectFailed { wait: Duration },
    /// The upstream throttled; `refused` when it asked not to be retried.
    Throttled { refused: bool },
    /// The throttle's answer was read to its end after [`Next::ReadThrottle`]; `held`
    /// when it is in memory, so the client can still get it unchanged.
    ThrottleRead { held: bool },
}

/// What to do after an attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Send again: wait `after`, then for a slot.
    Retry { after: Duration, cause: Cause },
    /// A retry may go: read the throttle's answer to its end (the connection returns to
    /// the pool, and the client gets it unchanged if the retry cannot go after all),
    /// then report [`Outcome::ThrottleRead`].
    ReadThrottle,
    /// Give the client the upstream's latest throttle answer.
    GiveBack(Stop),
    /// Turn the request away: a slot would come only after `retry_after`.
    Shed { retry_after: Duration },
    /// The upstream cannot be reached; it may be by `retry_after`.
    Unreachable { retry_after: Duration, why: Stop },
}

/// Why a request is sent again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    Throttle,
    Connect,
}

/// Why no further attempt goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// Attempts, a streamed body, a refusal or `max_elapsed` (see [`retry::allowed`]).
    Retry(NoRetry),
    /// The retry budget has no room.
    Budget,
    /// The connection backoff would outlast the request's time.
    Deadline,
    /// The throttle's answer was too large to hold, so it goes to the client as is.
    NotHeld,
    /// No slot came for the retry; the throttle before it is given back.
    NoSlot,
    /// The connection backoff turned the attempt away.
    Backoff,
    /// The client retries on its own (an AWS SDK), so it gets the failure at once.
    ClientRetries,
}

/// One request's attempts and what the policy knows of them.
#[derive(Clone, Debug)]
pub struct Attempts {
    settings: RetrySettings,
    max_wait: Duration,
    /// The client's own deadline (gRPC), since arrival.
    deadline: Option<Duration>,
    /// The body can be sent again.
    replayable: bool,
    attempts: u32,
    /// A throttle answer is kept to give back if a retry cannot go.
    kept: bool,
    /// Failed connections go back to the client, which retries them itself.
    client_retries: bool,
    /// Overload answers so far, and whether the latest throttle was one.
    overloads: u32,
    overloaded: bool,
    /// The pause the latest throttle asked of this request (its `Retry-After`).
    asked: Duration,
}

/// The first retry after an overload waits this long, each further one twice as long
/// up to [`OVERLOAD_MAX_BACKOFF`]: the backoff the vendors' SDKs use (Anthropic's
/// 0.5 s to 8 s).
pub const OVERLOAD_BACKOFF: Duration = Duration::from_millis(500);
/// The longest wait before a retry after an overload.
pub const OVERLOAD_MAX_BACKOFF: Duration = Duration::from_secs(8);

impl Attempts {
    /// A request that may wait `max_wait` for each slot; `deadline` is the client's
    /// own, counted from the request's arrival.
    pub fn new(
        settings: &RetrySettings,
        max_wait: Duration,
        replayable: bool,
        deadline: Option<Duration>,
    ) -> Attempts {
        Attempts {
            settings: settings.clone(),
            max_wait,
            deadline,
            replayable,
            attempts: 0,
            kept: false,
            client_retries: false,
            overloads: 0,
            overloaded: false,
            asked: Duration::ZERO,
        }
    }

    /// The throttle about to be reported was an overload (529, 503 "overloaded"): its
    /// retry waits a growing backoff rather than only for a slot.
    pub fn overloaded(&mut self) {
        self.overloads += 1;
        self.overloaded = true;
    }

    /// The throttle about to be reported asked this request to wait `pause` (its
    /// `Retry-After`, cut to `max_pause`) before it is sent again.
    pub fn asked(&mut self, pause: Duration) {
        self.asked = pause;
    }

    /// Leaves connection retries to the client: an AWS SDK retries a 502 with its
    /// own backoff and retry quota, so holding it through easeoff's connection
    /// backoff as well only delays the error it acts on.
    pub fn with_client_retries(mut self, client_retries: bool) -> Attempts {
        self.client_retries = client_retries;
        self
    }

    /// Attempts begun so far.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Begins the next attempt, `elapsed` after arrival; returns how long after arrival
    /// it may wait for its slot.
    pub fn begin(&mut self, elapsed: Duration) -> Duration {
        self.attempts += 1;
        let deadline = self.limit(elapsed + self.max_wait);
        if self.attempts > 1 {
            deadline.min(self.settings.max_elapsed)
        } else {
            deadline
        }
    }

    /// Decides what follows `outcome`, `elapsed` after arrival. `withdraw` takes a
    /// retry from the budget; it is called only when nothing else stops the retry.
    pub fn after(
        &mut self,
        outcome: Outcome,
        elapsed: Duration,
        withdraw: impl FnOnce() -> bool,
    ) -> Next {
        match outcome {
            Outcome::Shed { .. } if self.kept => Next::GiveBack(Stop::NoSlot),
            Outcome::Shed { retry_after } => Next::Shed { retry_after },
            Outcome::BackoffClosed { wait } => Next::Unreachable {
                retry_after: wait,
                why: Stop::Backoff,
            },
            Outcome::ConnectFailed { wait } => self.after_connect(wait, elapsed, withdraw),
            Outcome::Throttled { refused } => match self.allowed(refused, elapsed) {
                Ok(()) => Next::ReadThrottle,
                Err(no) => Next::GiveBack(Stop::Retry(no)),
            },
            Outcome::ThrottleRead { held: false } => Next::GiveBack(Stop::NotHeld),
            Outcome::ThrottleRead { held: true } => {
                let left = self
                    .limit(self.settings.max_elapsed)
                    .saturating_sub(elapsed);
                let asked = std::mem::take(&mut self.asked);
                if asked > left {
                    // The upstream will not take it again in the request's time.
                    return Next::GiveBack(Stop::NoSlot);
                }
                if !withdraw() {
                    return Next::GiveBack(Stop::Budget);
                }
                self.kept = true;
                let backoff = if std::mem::take(&mut self.overloaded) {
                    let doublings = self.overloads.saturating_sub(1).min(16);
                    let backoff = OVERLOAD_BACKOFF.saturating_mul(1 << doublings);
                    backoff.min(OVERLOAD_MAX_BACKOFF).min(left)
                } else {
                    Duration::ZERO
                };
                let after = backoff.max(asked);
                Next::Retry {
                    after,
                    cause: Cause::Throttle,
                }
            }
        }
    }

    fn after_connect(
        &mut self,
        wait: Duration,
        elapsed: Duration,
        withdraw: impl FnOnce() -> bool,
    ) -> Next {
        let why = match self.allowed(false, elapsed) {
            _ if self.client_retries => Stop::ClientRetries,
            Err(no) => Stop::Retry(no),
            Ok(()) if elapsed + wait > self.limit(self.settings.max_elapsed) => Stop::Deadline,
            Ok(()) if !withdraw() => Stop::Budget,
            Ok(()) => {
                return Next::Retry {
                    after: wait,
                    cause: Cause::Connect,
                };
            }
        };
        Next::Unreachable {
            retry_after: wait,
            why,
        }
    }

    fn allowed(&self, refused: bool, elapsed: Duration) -> Result<(), NoRetry> {
        retry::allowed(
            &self.settings,
            self.attempts,
            self.replayable,
            refused,
            elapsed,
        )
    }

    /// `at`, or the client's own deadline if that comes first.
    fn limit(&self, at: Duration) -> Duration {
        self.deadline.map_or(at, |d| at.min(d))
    }
}

#[cfg(test)]
mod tests;
