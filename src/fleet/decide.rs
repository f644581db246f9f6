//! The fleet's rules for one lane, pure: what a member proposes at a sync, what it
//! decides from the store's answer (its share, a cold start's interval, its place in
//! the schedule, the hold after an outage), and what it does when it goes on alone.
//! The numbers in, a [`Decision`] and the lane's [`LaneState`] out; `fleet.rs` keeps
//! the locks, atomics, metrics, logs and the sync task, and calls these.

use std::time::Duration;

use super::learning::{self, Proposal, Shared};
use super::share;
use super::summary::Answer;

/// The fleet rate, per second, a lane that starts cold begins at (see
/// `LaneLink::start_cold`): low enough that a fleet of any size starting together
/// does not throttle a small table, and a few doublings from most tables' capacity.
pub const COLD_RATE: f64 = 10.0;
/// How much a cold lane's rate grows at each sync while its member uses its share,
/// as TCP's slow start grows every round trip; less than doubling, so the step that
/// meets the first throttle overshoots the capacity by at most half.
pub const COLD_GROWTH: f64 = 1.5;
/// How many times the fleet's cold interval last read a cold start's step-back
/// goes at most before its half step back ([`COLD_STEP_BACK`]).
const COLD_DEEPEST: f64 = learning::LAG;
/// How far below the fleet's cold rate last read the estimate a cold start's first
/// throttle makes lies: half a step of [`COLD_GROWTH`] (geometrically).
const COLD_STEP_BACK: f64 = 1.224_744_871_391_589; // COLD_GROWTH.sqrt()
/// The share a cold lane paces at until the summary counts its member: below most
/// fleets' equal share, so that its first slot lies out until the share is known, and
/// a spacing (5 s at [`COLD_RATE`]) that keeps a few queued requests within
/// `queue.max_wait`'s default.
const COLD_HOLD_SHARE: f64 = 1.0 / 50.0;
/// How many syncs a lane remembers the most members it shared with (a minute at the
/// default 250 ms): going on alone, it takes no more than an equal share of that
/// many, though the others' entries may have expired in a Redis that half-answered.
const PEAK_SYNCS: u32 = 240;
/// How long a lane back from going on alone keeps to an equal share of its recent
/// peak while fewer members are live: the others' entries expired during an outage
/// longer than `member_ttl`, and they come back within one reconnection wait of it.
const REJOIN_HOLD: Duration = Duration::from_secs(4);

/// How many times as often a lane syncs for a while after the fleet's first raise for
/// it ([`hurries`]).
pub const HURRY: u32 = 5;
/// For how many sync intervals a lane hurries its syncs ([`hurries`]).
pub const HURRY_SYNCS: u32 = 4;

/// What the fleet decided for one lane at a sync.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Decision {
    /// The fleet-wide interval `I_f`; 0 leaves the lane unpaced.
    pub interval: Duration,
    /// The fleet's epoch for the lane.
    pub epoch: u64,
    /// This member's fraction of the fleet rate, in (0, 1].
    pub share: f64,
    /// Live members sharing the lane, this one included.
    pub members: u32,
    /// The fleet rate, requests per second (`1 / interval`); 0 while unpaced.
    pub rate: f64,
    /// Redis stopped answering: the lane goes on alone from its last allocation
    /// (`interval` is then this member's own and `share` 1) until the fleet returns.
    pub local: bool,
    /// What the lane multiplies its learned intervals by before taking this decision:
    /// `1 / share` when it goes on alone (its interval becomes its own), the share it
    /// had then when it returns to the fleet, 1 otherwise.
    pub rescale: f64,
    /// This member raised in the burst the fleet's interval comes from, and the raise
    /// that landed is not its own: it takes the fleet's as a raise, though the epoch
    /// is the one its own raise reached.
    pub outraised: bool,
    /// The fleet's first raise since it was unpaced: an estimate from one burst, as
    /// a sidecar's own raise from 0 is, so the lane keeps growing from it as from one.
    pub first: bool,
    /// The lane starts cold: the fleet has learned nothing yet, and the interval is
    /// the start's (see `LaneLink::start_cold`).
    pub cold: bool,
    /// This member's place in the fleet's schedule, once it has a seat and the lane
    /// has had a raise (see [`Place`]).
    pub place: Option<Place>,
}

/// Where a member's slots fall in the fleet's schedule. The store counts the fleet's
/// progress in slots of the fleet interval (`progress`, moving at the interval in
/// force, so it does not jump when the interval changes); a member at share `s`
/// takes one slot in `1 / s` and puts its own at `phase` of them: when `progress ×
/// s − phase` is whole. Members with equal shares and phases spread over [0, 1)
/// (`seat_phase`) dispatch evenly spread over their spacing, where phases drawn at
/// random bunch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Place {
    /// The fraction of its spacing this member's slots lie at.
    pub phase: f64,
    /// The fleet's progress at the answer, in fleet slots.
    pub progress: f64,
}

impl Place {
    /// How far ahead of now, in spacings (in [0, 1)), the member's next place in the
    /// schedule lies at `share`.
    pub fn ahead(&self, share: f64) -> f64 {
        let ahead = (self.phase - self.progress * share).rem_euclid(1.0);
        if ahead.is_finite() { ahead } else { 0.0 }
    }
}

impl Decision {
    /// A decision to pace at `share` of the fleet `interval` shared by `members`, in
    /// `epoch`, and nothing else: its rate is the interval's, and no flag is set.
    pub fn new(interval: Duration, epoch: u64, share: f64, members: u32) -> Decision {
        Decision {
            interval,
            epoch,
            share,
            members,
            rate: if interval.is_zero() {
                0.0
            } else {
                1.0 / interval.as_secs_f64()
            },
            local: false,
            rescale: 1.0,
            outraised: false,
            first: false,
            cold: false,
            place: None,
        }
    }

    /// The spacing this member's pacer keeps: `interval / share`.
    pub fn member_interval(&self) -> Duration {
        if self.interval.is_zero() {
            return Duration::ZERO;
        }
        Duration::try_from_secs_f64(self.interval.as_secs_f64() / self.share)
            .unwrap_or(Duration::MAX)
    }
}

/// What the fleet's rules remember of one lane from sync to sync.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LaneState {
    /// The latest decision, if any.
    pub last: Option<Decision>,
    /// While on its own, the lane's interval is this member's; proposals are scaled
    /// back to the fleet's by the share it last had.
    pub scale: Option<f64>,
    /// The most members of the last [`PEAK_SYNCS`] decisions.
    pub peak_members: u32,
    /// How many syncs ago `peak_members` was seen.
    pub peak_age: u32,
    /// Syncs left in which the lane, back from going on alone, takes no more than an
    /// equal share of `peak_members` while fewer are live ([`REJOIN_HOLD`]).
    pub rejoining: u32,
    /// What got through of the other live members' dispatches, per second, summed, at
    /// the last answer.
    pub others_through: f64,
    /// The attempts the other live members made, per second, summed, at the last
    /// answer.
    pub others_tried: f64,
    /// The fleet's interval as the last cold decision read it, before its own step.
    pub cold_read: Duration,
    /// The cold start is over without a throttle (it grew past its shortest
    /// interval, or the fleet went unpaced): the lane does not start cold again.
    pub warm: bool,
    /// The seat the store gave this member in the lane (`Answer::seat`).
    pub seat: Option<u64>,
}

impl LaneState {
    /// Whether the lane is on its way back from going on alone: on its own still, or
    /// holding its share down after it came back.
    pub fn returning(&self) -> bool {
        self.scale.is_some() || self.rejoining > 0
    }

    /// What the last shared decision allotted this member, requests per second: the
    /// larger of its allotment and an equal share (an allotment alone would hold
    /// every share where it is, each member claiming what it has); 0 before the
    /// first, or while alone.
    pub fn allotted(&self) -> f64 {
        self.last.filter(|last| !last.local).map_or(0.0, |last| {
            (last.share * last.rate).max(last.rate / f64::from(last.members.max(1)))
        })
    }
}

/// What a lane's controller learned, as the lane reports it at a sync.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Learned {
    /// The controller's interval, in whole microseconds.
    pub micros: u64,
    /// The controller's epoch.
    pub epoch: u64,
    /// The earliest epoch it raised from since the last sync, if it raised.
    pub raised_from: Option<u64>,
}

/// What a lane at `learned` proposes, `through` per second of its `tried` attempts
/// having got through recently (`demand::Used::through`, `Used::tried`), counted
/// over enough of them to be read on its own if `dense` (`demand::Used::dense`).
#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "float to integer `as` saturates, as wanted here"
)]
pub fn proposal(
    state: &LaneState,
    learned: Learned,
    through: f64,
    tried: f64,
    dense: bool,
) -> Proposal {
    let scale = state.scale.unwrap_or(1.0);
    let interval = Duration::from_micros((learned.micros as f64 * scale) as u64);
    // The entries read at a raise from an unpaced fleet were written before its load
    // came (a cold start): the floor waits for the next raise, whose entries tell.
    let paced = state.last.is_some_and(|d| !d.interval.is_zero());
    let cold = state.last.filter(|d| d.cold);
    let proposed = match cold {
        _ if learned.raised_from.is_none() => interval,
        // The cold start's last step throttled: back half a step below the
        // fleet's rate this member read, or below what the fleet would get through
        // at it if that was less (`learning::capacity`). The upstream's burst hides
        // an overshoot for a while (a bucket holding a tenth of a second hides up
        // to 40 % past it for a sync of 250 ms), so the throttle came a little
        // past the capacity, and a whole step back wasted it; a bucket holding a
        // second hides a few steps, and what got through says how many. Not its
        // own raise: a member a step behind the fleet would take it back further.
        // At most [`COLD_DEEPEST`] below the rate read: the part that got through
        // counts the burst's last syncs too, and the fleet grows from there. Here
        // and in a raise, only where this member dispatches often enough for what
        // got through to say anything: a fleet of 1,000 that each dispatch once in
        // 10 s read its sum at half the rate and less at times, and dipped to it.
        Some(_) if !dense => state.cold_read.mul_f64(COLD_STEP_BACK),
        Some(_) => {
            let read = if state.cold_read.is_zero() {
                0.0
            } else {
                1.0 / state.cold_read.as_secs_f64()
            };
            let fleet = learning::capacity(
                read,
                through + state.others_through,
                tried + state.others_tried,
            );
            let spacing = (fleet.is_finite() && fleet > 0.0)
                .then(|| Duration::try_from_secs_f64(1.0 / fleet).ok())
                .flatten();
            let deepest = state.cold_read.mul_f64(COLD_DEEPEST);
            spacing
                .map_or(state.cold_read, |s| s.clamp(state.cold_read, deepest))
                .mul_f64(COLD_STEP_BACK)
        }
        None if paced && dense => {
            let rate = state.last.map_or(0.0, |d| d.rate);
            let fleet = learning::capacity(
                rate,
                through + state.others_through,
                tried + state.others_tried,
            );
            learning::cap_raise(interval, fleet)
        }
        None => interval,
    };
    Proposal {
        interval: proposed,
        epoch: learned.epoch,
        raised_from: learned.raised_from,
        // Beyond its own raise in a paced fleet: a cut to what got through.
        capped: cold.is_none() && learned.raised_from.is_some() && proposed > interval,
    }
}

/// What a lane sent at the sync an answer answers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sent {
    /// What its demand claims (`demand::claim`), which its share is fitted to.
    pub claim: f64,
    /// What its demand asks for, unbounded by its dispatch rate.
    pub wanted: f64,
    /// What got through of its dispatches recently, per second (`demand::Used::through`).
    pub through: f64,
    /// What it proposed, if it had learned anything.
    pub proposal: Option<Proposal>,
}

/// One lane's answered sync, as the rules read it.
#[derive(Clone, Copy, Debug)]
pub struct Answered<'a> {
    /// The store's answer for the lane.
    pub answer: &'a Answer,
    /// What the lane sent.
    pub sent: Sent,
    /// The shortest interval a cold start grows to, if the lane starts cold.
    pub cold: Option<Duration>,
    /// The syncs a lane back from going on alone holds its share down for
    /// ([`rejoin_syncs`]).
    pub rejoin: u32,
    /// The round was a full tick's, not one of raises between ticks nor a minor
    /// tick of hurried lanes (`fleet::Trigger::Tick`): it counts as a sync for the
    /// holds counted in syncs, and a cold start grows at it.
    pub ticked: bool,
}

/// The lane's decision from its answered sync, `None` while the fleet holds nothing
/// for it and it does not start cold; `state` moves on with it. The lane adopts the
/// decision's interval and epoch: what it proposes next is relative to them.
pub fn from_answer(state: &mut LaneState, sync: &Answered<'_>) -> Option<Decision> {
    let answer = sync.answer;
    // The floor bounds a member's own interval: the fleet's reaches it at the
    // members' count times the floor's rate.
    let members = u32::try_from(answer.others.len() + 1).unwrap_or(u32::MAX);
    let cold = cold_interval(
        sync.cold.map(|floor| floor / members),
        state,
        answer.shared,
        sync.sent.wanted,
        sync.ticked,
    );
    let cold_state = cold.map(|interval| Shared { interval, epoch: 0 });
    let shared = cold_state.or(answer.shared)?;
    let mut decision = decide(shared, sync.sent.claim, &answer.others);
    decision.cold = !shared.interval.is_zero() && cold.is_some();
    if decision.cold {
        decision.share = cold_share(answer.counted_in, decision.members);
    }
    decision.outraised = sync.sent.proposal.is_some_and(|p| outraised(&p, shared));
    state.seat = state.seat.or(answer.seat);
    decision.place = state
        .seat
        .zip(answer.progress)
        .filter(|_| !decision.cold)
        .map(|(seat, progress)| Place {
            phase: seat_phase(seat),
            progress,
        });
    if decision.interval.is_zero() {
        decision.share = unpaced_share(sync.sent.through, &answer.others_through);
    }
    if let Some(scale) = state.scale.take() {
        decision.rescale = scale;
        state.rejoining = sync.rejoin;
    }
    state.others_through = answer.others_through.iter().filter(|u| u.is_finite()).sum();
    state.others_tried = answer.others_tried;
    rejoined(state, &mut decision, sync.ticked);
    // A cold start's end is no estimate: the step before went through.
    decision.first =
        !shared.interval.is_zero() && state.last.is_some_and(|d| d.interval.is_zero() && !d.local);
    state.last = Some(decision);
    state.peak_age += u32::from(sync.ticked);
    if decision.members >= state.peak_members || state.peak_age > PEAK_SYNCS {
        state.peak_members = decision.members;
        state.peak_age = 0;
    }
    Some(decision)
}

/// Whether a lane that decided `before` and now takes `after` syncs [`HURRY`] times
/// as often for [`HURRY_SYNCS`] sync intervals: `after` is the fleet's first raise for
/// the lane (its cold start's end, or the first throttle of an unpaced fleet), made
/// before what got through after the throttle was in any entry, so the cut that
/// matches the capacity comes from the entries written next (a raise to what got
/// through, [`proposal`]). At a sync every 250 ms that took 0.5 to 0.7 s at up to
/// twice the capacity; a table holding a second of burst saw 60 to 90 throttles
/// there, most of its minute's. Only a `dense` lane, whose counts over a fifth of a
/// sync say anything, and only at a first raise: a fleet of thousands that hurried
/// at every raise would multiply what Redis does at each.
pub fn hurries(before: Option<&Decision>, after: &Decision, dense: bool) -> bool {
    let cold_end = before.is_some_and(|b| b.cold) && !after.cold && after.epoch > 0;
    dense && !after.local && (after.first || cold_end)
}

/// The syncs [`REJOIN_HOLD`] spans, at least one.
pub fn rejoin_syncs(sync_interval: Duration) -> u32 {
    let syncs = REJOIN_HOLD.as_nanos() / sync_interval.as_nanos().max(1);
    u32::try_from(syncs).unwrap_or(u32::MAX).max(1)
}

/// The decision that holds a cold lane for its first answer (`LaneLink::hold_cold`):
/// the start's interval at [`COLD_HOLD_SHARE`], as a member the summary does not
/// count yet paces; `None` if the lane has a decision already.
pub fn hold_cold(state: &mut LaneState) -> Option<Decision> {
    let cold = Duration::from_secs_f64(1.0 / COLD_RATE);
    let held = Decision {
        cold: true,
        ..Decision::new(cold, 0, COLD_HOLD_SHARE, 1)
    };
    if state.last.is_some() {
        return None;
    }
    state.last = Some(held);
    state.cold_read = cold;
    Some(held)
}

/// Redis stopped answering: the lane goes on alone at its last allocation, but at no
/// more than an equal share of the most members it recently shared with; its
/// proposals are scaled back by that share until it returns. `None` without a last
/// decision to go on from.
pub fn go_local(state: &mut LaneState) -> Option<Decision> {
    let mut last = state.last?;
    last.share = last.share.min(1.0 / f64::from(state.peak_members.max(1)));
    state.scale = Some(last.share);
    Some(Decision {
        local: true,
        rescale: 1.0 / last.share,
        ..Decision::new(last.member_interval(), last.epoch, 1.0, 1)
    })
}

/// The fleet interval of a lane that starts cold (`cold` its shortest, if it does;
/// see `LaneLink::start_cold`), from the lane's state `shared`: the start's for a
/// lane the fleet holds nothing for, the state's while the fleet starts (epoch 0, an
/// interval), and 0 once the start grew past `cold` (the lane goes unpaced, and the
/// state of 0 it proposes tells the others); `None` once the fleet learned (a raise)
/// or went unpaced. The member proposes the interval it returns, so the fleet goes
/// as fast as its fastest member: it grows the rate when the member's demand
/// (`wanted`, its arrivals and queue, whether or not they went) reached what the
/// last decision allotted it (while the members' demands are met, a faster start
/// would only throttle an unmet burst harder), at a full tick (`ticked`) only, so that
/// the start grows once a sync however often its lane syncs.
fn cold_interval(
    cold: Option<Duration>,
    state: &mut LaneState,
    shared: Option<Shared>,
    wanted: f64,
    ticked: bool,
) -> Option<Duration> {
    let floor = cold?;
    let interval = match shared {
        _ if state.warm => return None,
        None => {
            state.cold_read = Duration::from_secs_f64(1.0 / COLD_RATE);
            state.cold_read
        }
        Some(shared) if shared.epoch != 0 => return None,
        Some(shared) if shared.interval.is_zero() => {
            state.warm = true;
            return None;
        }
        Some(shared) => {
            state.cold_read = shared.interval;
            match state.last {
                Some(last) if last.cold && ticked && wanted >= last.share * last.rate => {
                    shared.interval.div_f64(COLD_GROWTH)
                }
                _ => shared.interval,
            }
        }
    };
    if interval < floor {
        state.warm = true;
        return Some(Duration::ZERO);
    }
    Some(interval)
}

/// A cold lane's share of the fleet's cold rate among `members`: an equal one once
/// the summary counts this member (`counted_in` not 0), [`COLD_HOLD_SHARE`] before.
/// While a fleet starts, its members' claims trail their demand by a sync or more (a
/// claim is at most twice what the member dispatched), so max-min shares would give
/// the first members to start several equal shares each, and a fleet starting
/// together sent up to two and a half times its cold rate: its first throttle came
/// at a rate that was not the fleet's, and the start's estimate fell two steps short
/// of the capacity. Before the summary counts the member, nor maybe the others that
/// start with it, each would take a share of one and send at once: it holds its first
/// request (the pacer keeps the first slot's place in the spacing as the share
/// grows).
fn cold_share(counted_in: u64, members: u32) -> f64 {
    if counted_in == 0 {
        COLD_HOLD_SHARE
    } else {
        1.0 / f64::from(members.max(1))
    }
}

/// Whether a member that proposed `proposal` takes `shared` as another member's
/// raise: it raised, and the fleet holds another interval or epoch than its raise.
/// Members raise from the same epoch to the same next one, each at its own interval
/// and on its own curve; one whose raise lost would otherwise keep its own curve and
/// climb from its own cut, and its next step would undo the raise that landed.
fn outraised(proposal: &Proposal, shared: Shared) -> bool {
    proposal.raised_from.is_some()
        && (proposal.interval != shared.interval || proposal.epoch != shared.epoch)
}

/// A lane back from going on alone whose decision counts fewer members than it shared
/// with before: the others may only be slower to reconnect (their entries expired
/// while Redis refused them), so it takes no more than an equal share of the peak,
/// as it did alone, until they are back or its syncs of grace are over (a round
/// between ticks, `!ticked`, is none of them).
fn rejoined(state: &mut LaneState, decision: &mut Decision, ticked: bool) {
    if state.rejoining == 0 {
        return;
    }
    if decision.members >= state.peak_members {
        state.rejoining = 0;
        return;
    }
    state.rejoining -= u32::from(ticked);
    decision.share = decision
        .share
        .min(1.0 / f64::from(state.peak_members.max(1)));
}

/// The phase of `seat` in the fleet's schedule: its bits reversed behind the binary
/// point (the van der Corput sequence), so that the seats given so far, whatever
/// their number, lie evenly spread over [0, 1): 1 at 1/2, 2 at 1/4, 3 at 3/4, 4 at
/// 1/8, ...
#[allow(
    clippy::cast_precision_loss,
    reason = "a phase needs no more than the 53 bits an f64 keeps"
)]
pub fn seat_phase(seat: u64) -> f64 {
    seat.reverse_bits() as f64 / 2f64.powi(64)
}

/// This member's decision for a lane from the fleet's state and the demands.
pub fn decide(shared: Shared, demand: f64, others: &[f64]) -> Decision {
    let members = others.len() + 1;
    let mut demands = Vec::with_capacity(members);
    demands.push(demand);
    demands.extend_from_slice(others);
    let share = if shared.interval.is_zero() {
        1.0
    } else {
        let rate = 1.0 / shared.interval.as_secs_f64();
        let allocations = share::max_min(&demands, rate);
        // What nobody asked for is spread evenly, so the shares add up to the fleet
        // rate and a member whose demand grows finds room before the next sync.
        let spare = (rate - allocations.iter().sum::<f64>()).max(0.0) / members as f64;
        let mine = (allocations[0] + spare) / rate;
        // A member that asks for (almost) nothing still gets a slot now and then, so
        // its first requests after a quiet spell are not held for a whole sync.
        mine.max(1.0 / (2 * members) as f64).min(1.0)
    };
    Decision::new(
        shared.interval,
        shared.epoch,
        share,
        u32::try_from(members).unwrap_or(u32::MAX),
    )
}

/// This member's part of an unpaced fleet's dispatches: what got through of its own
/// (`through`) over the fleet's (`others_through` the other live members'), or an
/// equal part while nobody dispatches. Pacing divides the lane's interval by it, so the first
/// throttle's interval (the observed spacing over this share) means the fleet's: each
/// member starts from its own rate, and the fleet from the sum of them, not from one
/// member's rate taken for the fleet's.
pub fn unpaced_share(through: f64, others_through: &[f64]) -> f64 {
    let sane = |x: f64| if x.is_finite() { x.max(0.0) } else { 0.0 };
    let mine = sane(through);
    let all = mine + others_through.iter().map(|u| sane(*u)).sum::<f64>();
    let members = (others_through.len() + 1) as f64;
    if mine > 0.0 && all > 0.0 {
        (mine / all).clamp(1.0 / (2.0 * members), 1.0)
    } else {
        1.0 / members
    }
}

#[cfg(test)]
mod tests;
