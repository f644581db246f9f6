//! What the fleet keeps of a lane's learning, and the rule that merges a member's
//! proposal into it. Pure; `store.rs` runs the same rule inside Redis, atomically.
//!
//! The rule:
//! - No state yet (a new lane, or Redis restarted empty): the first proposal becomes it,
//!   so the state is rebuilt from the members within one sync.
//! - A raise (the member's controller raised from epoch `e`) is a compare-and-set on the
//!   epoch: it lands only if the stored epoch is still `e`; then the stored interval
//!   becomes the larger of the two and the epoch the member's. Otherwise another member
//!   already raised for this fleet-wide burst, and the raise is dropped. A raise within
//!   `hold` of the last one is dropped too: members take a raise at their next sync,
//!   and until all have, the late ones still send at the old rate, so the early ones
//!   see throttles in the new epoch that belong to the same burst.
//!   A raise to what the fleet got through ([`cap_raise`], `Proposal::capped`) that
//!   cuts deeper than the stored interval lands within `hold` all the same, and so
//!   does one to at least [`DEEP_CUT`] times the stored interval (from a member that
//!   does not say whether it is capped): an echo of the last raise asks one step of a
//!   sleeper, and a cut from what got through says that the capacity lies below the
//!   rate in force, which the members that still send at the old rate do not change.
//! - Anything else counts only within the stored epoch, and the stored interval becomes
//!   the lower of the two: the member grew since its last sync. Every member adopts the
//!   stored interval at each sync and steps from it on its own results, so in one sync
//!   period the fleet moves by the largest step one member took, never by the sum of
//!   the members' steps: N members grow no faster than one sidecar would.
//!
//! And a member counts while it was last seen within `member_ttl` ([`live`]), so one
//! that dies is forgotten exactly `member_ttl` after its last sync.

use std::time::Duration;

/// A lane's learned state as the fleet stores it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shared {
    /// The fleet-wide interval between dispatches, in whole microseconds.
    pub interval: Duration,
    /// Raises so far.
    pub epoch: u64,
}

/// What a member reports for a lane at a sync: its controller's interval and epoch,
/// and for a raise since the last sync, the epoch it raised from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Proposal {
    /// The member controller's interval (the fleet-wide one it steers toward).
    pub interval: Duration,
    /// The member controller's epoch.
    pub epoch: u64,
    /// For a raise since the last sync, the epoch it raised from.
    pub raised_from: Option<u64>,
    /// The raise goes to what the fleet got through ([`cap_raise`]), below the
    /// member's own raise: it lands within the hold if it cuts deeper than the
    /// stored interval.
    pub capped: bool,
}

/// How many times the stored interval a raise must ask to land within the hold.
pub const DEEP_CUT: u32 = 2;

/// The stored state after `proposal`; `since_raise` is the time since the stored
/// epoch's raise landed (`None` if unknown).
pub fn merge(
    stored: Option<Shared>,
    proposal: &Proposal,
    since_raise: Option<Duration>,
    hold: Duration,
) -> Shared {
    let Some(stored) = stored else {
        return Shared {
            interval: proposal.interval,
            epoch: proposal.epoch,
        };
    };
    match proposal.raised_from {
        Some(from)
            if from == stored.epoch
                && (since_raise.is_none_or(|t| t >= hold)
                    || (proposal.capped && proposal.interval > stored.interval)
                    || (!stored.interval.is_zero()
                        && proposal.interval >= stored.interval.saturating_mul(DEEP_CUT))) =>
        {
            Shared {
                interval: stored.interval.max(proposal.interval),
                epoch: proposal.epoch.max(stored.epoch + 1),
            }
        }
        None if proposal.epoch == stored.epoch => Shared {
            interval: stored.interval.min(proposal.interval),
            epoch: stored.epoch,
        },
        _ => stored,
    }
}

/// A raise's interval, no shorter than what the fleet gets through (`through`, per
/// second: its [`capacity`]) allows: a throttle says the capacity lies below the
/// rate in force, and while a fleet throttles the requests that get through come at
/// about the capacity. A member's own raise cuts by one step
/// of its sleeper, far too little when the fleet starts or joins far past the
/// capacity, or a table's burst runs out under it; the fleet takes the larger cut at
/// once instead of one step per burst. Without a count the raise stays.
pub fn cap_raise(interval: Duration, through: f64) -> Duration {
    if !through.is_finite() || through <= 0.0 {
        return interval;
    }
    interval.max(Duration::try_from_secs_f64(1.0 / through).unwrap_or(Duration::MAX))
}

/// How many times what got through the fleet's capacity ([`capacity`]) may be read
/// as at most: the growth of two syncs of a cold start, which is how far the
/// attempts averaged over `demand::THROUGH_MEMORY` lag the rate at most.
pub const LAG: f64 = 2.25;

/// What the fleet would get through at `rate` per second (its interval's rate, 0 if
/// unpaced), `through` of the `tried` attempts per second its members made of late
/// having got through (the sums of `demand::Used::through` and `Used::tried`). The
/// part that got through is what the upstream lets through of what the fleet
/// sends, and it does not lag a rate that grows as the two averages do: a fleet
/// that throttles right after its cold start counted a third of its rate as got
/// through, and a raise to that collapsed it. Attempts below the rate are the
/// lag, or members that send less than their share, so the rate counts at most
/// [`LAG`] times the attempts.
pub fn capacity(rate: f64, through: f64, tried: f64) -> f64 {
    let sane = |x: f64| if x.is_finite() { x.max(0.0) } else { 0.0 };
    let (rate, through, tried) = (sane(rate), sane(through), sane(tried));
    if tried <= through {
        return through.max(rate.min(through * LAG));
    }
    through * (rate / tried).clamp(1.0, LAG)
}

/// The fleet's progress through its schedule at `now`: `mark`'s count of fleet slots
/// (at the time it gives), plus the slots of `interval` gone by since; what a member
/// places its slots by (`fleet::Place`). The store takes a new mark whenever the
/// interval changes, so the progress moves at the pace in force, as the members'
/// pacers do, and a member placed by it keeps its place through a change. 0 without
/// a mark; no progress while unpaced.
#[allow(
    clippy::cast_precision_loss,
    reason = "microseconds as f64 are exact for 285 years"
)]
pub fn progress(mark: Option<(f64, Duration)>, interval: Duration, now: Duration) -> f64 {
    let Some((count, at)) = mark else {
        return 0.0;
    };
    if interval.is_zero() {
        return count;
    }
    count + now.saturating_sub(at).as_micros() as f64 / interval.as_micros() as f64
}

/// Whether a member last seen `since_seen` ago still counts.
pub fn live(since_seen: Duration, member_ttl: Duration) -> bool {
    since_seen <= member_ttl
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_is_the_part_that_got_through_of_the_rate() {
        // 40 of 100 attempts got through, at a rate of 120: 48.
        assert_eq!(capacity(120.0, 40.0, 100.0), 48.0);
        // Attempts lagging a growing rate: the part still counts at the rate, up to
        // LAG times what got through.
        assert_eq!(capacity(200.0, 40.0, 50.0), 90.0);
        // Attempts past the rate (unpaced, or a rate just cut): what got through.
        assert_eq!(capacity(0.0, 40.0, 100.0), 40.0);
        assert_eq!(capacity(50.0, 40.0, 100.0), 40.0);
        // Nothing refused: the rate, as far as the attempts reach.
        assert_eq!(capacity(100.0, 80.0, 80.0), 100.0);
        assert_eq!(capacity(1000.0, 80.0, 80.0), 180.0);
        assert_eq!(capacity(0.0, 80.0, 80.0), 80.0);
        // Nonsense counts as nothing.
        assert_eq!(capacity(f64::NAN, 40.0, f64::INFINITY), 40.0);
        assert_eq!(capacity(100.0, -1.0, 10.0), 0.0);
    }

    #[test]
    fn progress_counts_slots_of_the_interval_in_force_from_its_mark() {
        let s = Duration::from_secs;
        assert_eq!(progress(None, ms(10), s(5)), 0.0);
        // 2 s of 10 ms slots after 40: 240.
        assert_eq!(progress(Some((40.0, s(3))), ms(10), s(5)), 240.0);
        // None while unpaced, and none before the mark.
        assert_eq!(progress(Some((40.0, s(3))), Duration::ZERO, s(5)), 40.0);
        assert_eq!(progress(Some((40.0, s(3))), ms(10), s(1)), 40.0);
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    const HOLD: Duration = Duration::from_millis(500);

    /// A merge long after the last raise.
    fn merge_now(stored: Option<Shared>, proposal: &Proposal) -> Shared {
        merge(stored, proposal, Some(Duration::from_secs(60)), HOLD)
    }

    fn shared(interval: u64, epoch: u64) -> Shared {
        Shared {
            interval: ms(interval),
            epoch,
        }
    }

    fn raise(interval: u64, from: u64) -> Proposal {
        Proposal {
            interval: ms(interval),
            epoch: from + 1,
            raised_from: Some(from),
            capped: false,
        }
    }

    fn step(interval: u64, epoch: u64) -> Proposal {
        Proposal {
            interval: ms(interval),
            epoch,
            raised_from: None,
            capped: false,
        }
    }

    #[test]
    fn the_first_proposal_becomes_the_state() {
        assert_eq!(merge_now(None, &step(20, 3)), shared(20, 3));
        assert_eq!(merge_now(None, &raise(20, 3)), shared(20, 4));
    }

    #[test]
    fn four_members_raising_from_one_burst_raise_the_fleet_once() {
        let mut state = Some(shared(10, 2));
        for interval in [15, 14, 16, 15] {
            state = Some(merge_now(state, &raise(interval, 2)));
        }
        // The first raise lands; the others raised from epoch 2, which is gone.
        assert_eq!(state, Some(shared(15, 3)));
    }

    #[test]
    fn a_raise_right_after_the_last_one_belongs_to_the_same_burst() {
        let stored = Some(shared(15, 3));
        assert_eq!(
            merge(stored, &raise(22, 3), Some(ms(100)), HOLD),
            shared(15, 3)
        );
        assert_eq!(
            merge(stored, &raise(22, 3), Some(HOLD), HOLD),
            shared(22, 4)
        );
        assert_eq!(merge(stored, &raise(22, 3), None, HOLD), shared(22, 4));
        // A cut to twice the interval or more is no echo: it lands at once.
        assert_eq!(
            merge(stored, &raise(29, 3), Some(ms(100)), HOLD),
            shared(15, 3)
        );
        assert_eq!(
            merge(stored, &raise(30, 3), Some(ms(100)), HOLD),
            shared(30, 4)
        );
        // Not from the stored epoch: dropped however deep.
        assert_eq!(
            merge(stored, &raise(300, 2), Some(ms(100)), HOLD),
            shared(15, 3)
        );
        // A cut to what the fleet got through lands at once if it cuts at all.
        let capped = |interval, from| Proposal {
            capped: true,
            ..raise(interval, from)
        };
        assert_eq!(
            merge(stored, &capped(20, 3), Some(ms(100)), HOLD),
            shared(20, 4)
        );
        assert_eq!(
            merge(stored, &capped(15, 3), Some(ms(100)), HOLD),
            shared(15, 3)
        );
        assert_eq!(
            merge(stored, &capped(20, 2), Some(ms(100)), HOLD),
            shared(15, 3)
        );
    }

    #[test]
    fn a_raise_never_lowers_the_interval() {
        assert_eq!(merge_now(Some(shared(30, 2)), &raise(15, 2)), shared(30, 3));
    }

    #[test]
    fn a_step_from_another_epoch_is_ignored() {
        assert_eq!(merge_now(Some(shared(30, 2)), &step(5, 1)), shared(30, 2));
        assert_eq!(merge_now(Some(shared(30, 2)), &step(5, 7)), shared(30, 2));
    }

    #[test]
    fn growth_is_the_largest_single_step_not_the_sum_of_the_members() {
        // Eight members adopt 100 ms and each takes one 0.9 step before the next sync:
        // the fleet goes to 90 ms, as one sidecar taking that step would, not 0.9⁸.
        let mut state = Some(shared(100, 4));
        for _ in 0..8 {
            state = Some(merge_now(state, &step(90, 4)));
        }
        assert_eq!(state, Some(shared(90, 4)));
        // One member took two steps; the fleet follows the largest step taken.
        state = Some(merge_now(state, &step(81, 4)));
        state = Some(merge_now(state, &step(90, 4)));
        assert_eq!(state, Some(shared(81, 4)));
    }

    #[test]
    fn a_raise_goes_at_least_to_what_the_fleet_got_through() {
        // 1 ms (1000/s) proposed while the fleet's requests go through at 100/s.
        assert_eq!(cap_raise(ms(1), 100.0), ms(10));
        // A raise already below that rate stays; no rate, no cap.
        assert_eq!(cap_raise(ms(20), 100.0), ms(20));
        assert_eq!(cap_raise(ms(1), 0.0), ms(1));
        assert_eq!(cap_raise(ms(1), f64::NAN), ms(1));
        assert_eq!(cap_raise(ms(1), f64::INFINITY), ms(1));
    }

    #[test]
    fn a_member_counts_until_member_ttl_after_it_was_last_seen() {
        let ttl = Duration::from_secs(1);
        assert!(live(Duration::ZERO, ttl));
        assert!(live(ttl, ttl));
        assert!(!live(ttl + ms(1), ttl));
    }
}
