//! What an answer's verdict, its hints and rate-limit windows, a cost settlement and a
//! fleet decision do to one lane: pure rules, numbers and state in, effects out. The
//! lane (`lane.rs`) holds the state (controller, pacer, counters) and applies the
//! effects these rules decide, so every rule is tested exactly without a runtime.
//! Vendor rules (how a token window counts) come with the dialects, in
//! [`TokenWindow`].

use std::time::Duration;

use crate::cost::ONE;
use crate::hints::{Reading, TokenWindow};
use crate::quota::{self, Decision, Falls, Spend};
use crate::throttle::{Signal, Verdict};

/// A fleet's raise keeps the phase of a member whose spacing is at most this (see
/// [`keeps_phase`]); a member that dispatches less often takes its place in the
/// fleet's schedule instead.
pub const KEEP_PHASE_UP_TO: Duration = Duration::from_secs(1);

/// What a verdict does to the lane's controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reaction {
    /// The controller raises (an overload by its own rule).
    Raise(Signal),
    /// A success: the controller may lower the interval.
    Lower,
    /// Nothing moves but the slow start's count: no answer, a failure, or a rare
    /// overload (its request's retry backs off; the rate stays).
    Hold,
}

/// The reaction to `verdict`. `would_throttle` says whether pacing at the interval
/// learned so far would have met this throttle (always, but in observe mode, where
/// one it would not have met counts as a success). `frequent` counts an overload and
/// says whether overloads come often enough to be the upstream's state; it is asked
/// only for an overload.
pub fn reaction(
    verdict: Option<Verdict>,
    would_throttle: impl FnOnce() -> bool,
    frequent: impl FnOnce() -> bool,
) -> Reaction {
    match verdict {
        Some(Verdict::Throttle(_)) if !would_throttle() => Reaction::Lower,
        Some(Verdict::Throttle(Signal::Overload)) if !frequent() => Reaction::Hold,
        Some(Verdict::Throttle(signal)) => Reaction::Raise(signal),
        Some(Verdict::Success) => Reaction::Lower,
        Some(Verdict::Failure) | None => Reaction::Hold,
    }
}

/// A pause or window an upstream asked for, cut to the longest the operator allows
/// (`max_pause`, and `max_interval`): a header may ask for years.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capped {
    /// What holds.
    pub duration: Duration,
    /// What the header asked for.
    pub asked: Duration,
}

impl Capped {
    /// `asked`, at most `max`.
    pub fn of(asked: Duration, max: Duration) -> Capped {
        Capped {
            duration: asked.min(max),
            asked,
        }
    }

    /// Whether the cut took something off.
    pub fn was_cut(self) -> bool {
        self.asked > self.duration
    }
}

/// The latest refusal that asked for a pause (`Retry-After`): when it came and when
/// its pause ends, in nanoseconds since the lanes' time zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Asked {
    pub came: u64,
    pub ends: u64,
}

/// Whether a refusal's pause holds the whole lane, or only the request it answers
/// (whose retry waits it out). A `Retry-After` speaks for the lane where the lane's
/// own evidence says so: `lane_wide` (the answer states a spent window, the signal is
/// a rate-limit window's, or the vendor documents its pause as the caller's), or a
/// refusal again: this request went out after an `earlier` refusal's pause was asked
/// and before it ended, with no success between (a success forgets it). Otherwise
/// the learned spacing does the rest: an API that refills every 50 ms and can only
/// say `Retry-After: 1` (RFC 9110 has whole seconds) would idle a second per refusal.
pub fn pushback_holds_lane(lane_wide: bool, sent: u64, earlier: Option<Asked>) -> bool {
    lane_wide || earlier.is_some_and(|e| sent >= e.came && sent < e.ends)
}

/// What the lane knows when an answer's windows come in.
#[derive(Clone, Copy, Debug)]
pub struct QuotaFacts {
    /// How a window is spent (config `quota`).
    pub spend: Spend,
    /// The upstream's requests out.
    pub in_flight: u64,
    /// The longest a window may hold the lane ([`Capped`]).
    pub max: Duration,
    /// Since the lane's time zero: when the answer came.
    pub at: Duration,
    /// For a lane that paces in units (tokens, capacity units), what its units say.
    pub units: Option<UnitFacts>,
}

/// What a lane that paces in units knows when an answer's windows come in.
#[derive(Clone, Copy, Debug)]
pub struct UnitFacts {
    /// The mean a request is charged at (its reservation, moved by what its answer
    /// said), in thousandths of the unit (at least 1).
    pub mean: f64,
    /// The reserved cost of the requests waiting in the queue, in thousandths.
    pub queued: u64,
    /// How the vendor's token window counts the lane's requests.
    pub window: TokenWindow,
}

/// A rate-limit floor: the least spacing between dispatches while a window lasts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Floor {
    /// As it is.
    Keep,
    /// None any more.
    Lift,
    /// At least `spacing` apart while `lasts`.
    Set { spacing: Duration, lasts: Capped },
}

/// What an answer's rate-limit windows do to the lane.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuotaEffects {
    /// Hold every dispatch this long: a window is spent.
    pub pause: Option<Capped>,
    /// The floor in the lane's own unit (requests, or per unit of cost).
    pub floor: Floor,
    /// The least gap between any two requests of a lane that paces in units.
    pub request_floor: Floor,
}

impl QuotaEffects {
    /// Nothing changes.
    pub const NONE: QuotaEffects = QuotaEffects {
        pause: None,
        floor: Floor::Keep,
        request_floor: Floor::Keep,
    };
}

/// What an answer's windows (`reading`) do to the lane, as [`quota::decide`] says
/// (go, pace until the reset, or pause until it); `falls` learns from each window how
/// fast it falls per answer. A lane that paces in requests follows the stricter of
/// its windows; one that paces in units takes its spacing per unit from the token
/// window (so a larger mix is spaced wider at once) and its least gap between
/// requests from the request window, and a spent one of either pauses it.
pub fn quota(reading: &Reading, falls: &Falls, facts: &QuotaFacts) -> QuotaEffects {
    if reading.requests.is_none() && reading.tokens.is_none() {
        return QuotaEffects::NONE;
    }
    let QuotaFacts {
        spend,
        in_flight,
        max,
        at,
        ..
    } = *facts;
    let requests = (reading.requests)
        .map(|w| quota::decide(spend, w, in_flight, falls.requests.observe(w, at, 1.0)));
    let Some(units) = facts.units else {
        let tokens = (reading.tokens)
            .map(|w| quota::decide(spend, w, in_flight, falls.tokens.observe(w, at, 1.0)));
        let decision = match (requests, tokens) {
            (Some(r), Some(t)) => quota::stricter(r, t),
            (r, t) => r.or(t).unwrap_or(Decision::Go),
        };
        return match decision {
            Decision::Go => QuotaEffects {
                floor: Floor::Lift,
                ..QuotaEffects::NONE
            },
            Decision::Pace { spacing, until } => QuotaEffects {
                floor: floor(spacing, Capped::of(until, max)),
                ..QuotaEffects::NONE
            },
            Decision::Pause { until } => QuotaEffects {
                pause: Some(Capped::of(until, max)),
                ..QuotaEffects::NONE
            },
        };
    };
    // The window's tokens per answer over this lane's per request: how many of the
    // window's tokens one of the lane's costs (at least the vendor's least share).
    let mut share = 1.0;
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "token counts"
    )]
    let tokens = reading.tokens.map(|w| {
        let observed = falls.tokens.observe(w, at, units.mean);
        // A coarse window's fall is noise: steps of a thousand, from windows that take
        // turns (the fall read 330, 878, then -68 tokens an answer, for 14).
        let per_answer = if units.window.coarse {
            units.mean
        } else {
            observed
        };
        share = (per_answer / units.mean).max(units.window.least_share);
        // What waits counts with what is out (see `quota::decide_queued`).
        let flying = in_flight as f64 * per_answer;
        quota::decide_queued(spend, w, (flying as u64, units.queued), 1.0)
    });
    let pause = [requests, tokens]
        .into_iter()
        .filter_map(|d| match d {
            Some(Decision::Pause { until }) => Some(until),
            _ => None,
        })
        .max();
    if let Some(until) = pause {
        return QuotaEffects {
            pause: Some(Capped::of(until, max)),
            ..QuotaEffects::NONE
        };
    }
    let per_unit = match tokens {
        Some(Decision::Pace { spacing, until }) => {
            let lasts = Capped::of(until, max);
            // Per token of the window; the pacer's unit is a thousandth of the lane's.
            #[allow(clippy::cast_precision_loss, reason = "ONE is 1000")]
            let per_unit = Duration::try_from_secs_f64(spacing.as_secs_f64() * share * ONE as f64)
                .unwrap_or(lasts.duration);
            floor(per_unit, lasts)
        }
        _ => Floor::Lift,
    };
    let request_floor = match requests {
        Some(Decision::Pace { spacing, until }) => floor(spacing, Capped::of(until, max)),
        _ => Floor::Lift,
    };
    QuotaEffects {
        pause: None,
        floor: per_unit,
        request_floor,
    }
}

/// Whether the answer to a request sent at `sent` may move the lane's floors, set by
/// the answer to one sent at `floors_from` (both nanoseconds since the lane's time
/// zero): only one at least as fresh. Answers overtake each other; a stale one that
/// still saw plenty left would lift the floor a fresher one set near the reserve,
/// and the requests it held would go out in a burst.
pub fn fresher(sent: u64, floors_from: u64) -> bool {
    sent >= floors_from
}

/// A floor of `spacing` while `lasts`: never wider than the window itself.
fn floor(spacing: Duration, lasts: Capped) -> Floor {
    Floor::Set {
        spacing: spacing.min(lasts.duration),
        lasts,
    }
}

/// What a request estimated at `estimate` is reserved at in a lane (thousandths):
/// at most the unit's bound (`most`, [`crate::cost::Unit::most`]). A request
/// estimated past the whole of its window (`limit`, once the answers told it)
/// cannot be admitted (the vendors answer "request too large"): it is reserved at
/// the lane's mean (`mean`) and left to the vendor to refuse, so one client's
/// `max_tokens` of 10^12 does not hold everyone else's requests.
pub fn reservation(estimate: u64, limit: Option<u64>, most: u64, mean: u64) -> u64 {
    match limit {
        Some(limit) if estimate > limit => mean.clamp(1, limit.max(1)),
        _ => estimate.min(most),
    }
}

/// What an answer's own count (`actual`) is taken as: at most the window's limit
/// (when known) and the unit's bound; an upstream can count past neither.
pub fn settlement(actual: u64, limit: Option<u64>, most: u64) -> u64 {
    actual.min(most).min(limit.unwrap_or(u64::MAX))
}

/// What an answer's own count of a request's cost (`actual`) charges the lane's
/// schedule, against its reservation (`reserved`), by how the vendor's window
/// counts (`window`).
pub fn charged(reserved: u64, actual: u64, window: TokenWindow) -> u64 {
    if window.counts_reserved {
        actual.max(reserved)
    } else {
        actual
    }
}

/// The fleet decision as the lane's rules read it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FleetDecision {
    /// The fleet's epoch for the lane.
    pub epoch: u64,
    /// The member takes another member's raise from the same burst.
    pub outraised: bool,
    /// The fleet's first raise since it was unpaced.
    pub first: bool,
    /// The lane starts cold.
    pub cold: bool,
}

/// What the lane is when a fleet decision comes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Member {
    /// Its controller's epoch.
    pub epoch: u64,
    /// Its controller's interval is 0 (the fleet was unpaced).
    pub unpaced: bool,
    /// Its pacer's spacing is still a cold start's.
    pub provisional: bool,
    /// Its pacer's spacing before the decision.
    pub spacing: Duration,
}

/// How a fleet decision is taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Adoption {
    /// It raises the lane: a newer epoch, or another member's raise.
    pub raised: bool,
    /// The members dispatched in step when it came (a cold start's end, nothing
    /// learned yet, or an unpaced fleet): they had no phases to keep.
    pub in_step: bool,
    /// The member keeps its phase ([`keeps_phase`]).
    pub keep_phase: bool,
    /// The new spacing stretches only what is left of the gap ([`keeps_progress`]).
    pub keep_progress: bool,
}

/// How `member` takes `decision`.
pub fn adoption(decision: FleetDecision, member: Member) -> Adoption {
    let raised = decision.epoch > member.epoch || decision.outraised;
    let in_step = decision.first || member.provisional || member.epoch == 0 || member.unpaced;
    let keep_phase = keeps_phase(raised, in_step, member.spacing);
    Adoption {
        raised,
        in_step,
        keep_phase,
        keep_progress: keeps_progress(decision.cold, keep_phase, raised),
    }
}

/// Where the lane's next slot goes after a fleet decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// To its place in the fleet's schedule, `ahead` of now: the nearest point not
    /// past, or (members in step) the first point from now.
    Place { ahead: Duration, nearest: bool },
    /// Shifted at random within the spacing: out of the step the members dispatched
    /// in when the burst came.
    Stagger,
    /// Where it is.
    Stay,
}

/// Where the lane's next slot goes after `adoption` at `spacing` (the new one):
/// `ahead` is how far ahead of now its place in the fleet's schedule lies, in
/// spacings, if it has one; `new_epoch` whether it was not placed in this epoch yet.
pub fn placement(
    adoption: Adoption,
    new_epoch: bool,
    spacing: Duration,
    ahead: Option<f64>,
) -> Placement {
    match ahead.filter(|_| places(new_epoch, adoption.in_step, spacing)) {
        Some(ahead) => Placement::Place {
            ahead: Duration::try_from_secs_f64(spacing.as_secs_f64() * ahead).unwrap_or(spacing),
            nearest: !adoption.in_step,
        },
        None if adoption.raised && !adoption.keep_phase && !spacing.is_zero() => Placement::Stagger,
        None => Placement::Stay,
    }
}

/// Whether a member that takes a fleet's raise (`raised`) at `spacing` keeps its
/// phase: its next slot stretched with the spacing, not counted afresh from its last
/// dispatch nor shifted at random. In a paced fleet the members' phases are spread
/// already, and both of those bunched them: a gap counted afresh leaves a hole of the
/// raise's size in the fleet's schedule at every raise, and a random shift draws the
/// phases again, clumped as random phases are (32 members held a sawtooth of 94 to
/// 104/s, its lowest seconds at 0.89 to 0.92 of the capacity in real runs; with
/// phases kept, 0.94 to 0.96). Members that were `in_step` (a cold start's end, an
/// unpaced fleet's first raise) take their places in the fleet's schedule instead
/// ([`places`]; shifted at random without one). So do members that dispatch less
/// often than [`KEEP_PHASE_UP_TO`]: in `easeoff simulate`, 128 members at 1.65 s
/// spacings kept their first random phases' clumps, at 0.73 and 0.80 of the
/// capacity in two seeds of four (measured, not derived: 64 members at 0.64 s gained
/// from kept phases).
pub fn keeps_phase(raised: bool, in_step: bool, spacing: Duration) -> bool {
    raised && !in_step && !spacing.is_zero() && spacing <= KEEP_PHASE_UP_TO
}

/// Whether a fleet decision's new spacing stretches only what is left of the gap
/// rather than counting a longer one from the last dispatch: for a `cold` start (its
/// spacing moves with the share as the fleet is counted, not with a throttle), for a
/// raise that keeps the member's phase (`keep`, [`keeps_phase`]), and for a decision
/// that is no raise, where only the member's share moved. Counted from the last
/// dispatch, a share that fell moved the member's next slot later by the whole
/// difference: at a cold start's end, members placed on a share read from a summary
/// a sync old moved their slots about 2 s later at the next sync, and 1,000 members
/// on 100/s in `easeoff simulate` sent 57/s for a second (seed 1).
pub fn keeps_progress(cold: bool, keep: bool, raised: bool) -> bool {
    cold || keep || !raised
}

/// Whether a member takes its place in the fleet's schedule at a decision of an
/// epoch it was not placed in yet (`new_epoch`): where a raise would otherwise shift
/// it at random (members `in_step`, and those that dispatch less often than
/// [`KEEP_PHASE_UP_TO`]), its own raise included. Random phases bunch, and a raise
/// drew them again: placed, members with equal shares dispatch evenly spread over
/// their spacing (in `easeoff simulate`, 256 members on 100/s went from 0.79 to 0.81
/// of the capacity to a median of 0.978, their dispatches per tenth of a second from
/// 1 to 22 to 8 to 12). Members that keep their phase at a raise keep it: placing
/// them too gained nothing.
pub fn places(new_epoch: bool, in_step: bool, spacing: Duration) -> bool {
    new_epoch && !spacing.is_zero() && (in_step || spacing > KEEP_PHASE_UP_TO)
}

#[cfg(test)]
mod tests;
