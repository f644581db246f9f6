//! The fleet's rules for one lane, exactly: shares, cold starts, proposals and places.

use std::time::Duration;

use super::*;
use crate::fleet::demand;

/// What a lane at `micros` and `epoch` proposes, raised from `from` if it raised,
/// `through` per second of its `tried` attempts having got through, counted over
/// enough of them to read.
fn propose(
    state: &LaneState,
    micros: u64,
    epoch: u64,
    from: Option<u64>,
    (through, tried): (f64, f64),
) -> Proposal {
    let learned = Learned {
        micros,
        epoch,
        raised_from: from,
    };
    proposal(state, learned, through, tried, true)
}

#[test]
#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "a phase in [0, 1) times 10 is a tenth's index"
)]
fn seats_lie_evenly_spread_over_the_schedule_however_many_there_are() {
    assert_eq!(seat_phase(1), 0.5);
    assert_eq!(seat_phase(2), 0.25);
    assert_eq!(seat_phase(3), 0.75);
    assert_eq!(seat_phase(4), 0.125);
    assert_eq!(seat_phase(0), 0.0);
    // Any 100 seats in a row: every tenth of [0, 1) holds 8 to 12 of them.
    for first in [1, 37, 1_000_003] {
        let mut tenths = [0; 10];
        for seat in first..first + 100 {
            let phase = seat_phase(seat);
            assert!((0.0..1.0).contains(&phase));
            tenths[(phase * 10.0) as usize] += 1;
        }
        assert!(
            tenths.iter().all(|n| (8..=12).contains(n)),
            "{first}: {tenths:?}"
        );
    }
}

#[test]
fn a_place_is_where_the_progress_at_the_share_meets_the_phase() {
    let place = |phase, progress| Place { phase, progress };
    // A share of a quarter: one slot in four. At progress 10 (2.5 of its own
    // slots), phase 0.75 is a quarter of a spacing ahead.
    assert_eq!(place(0.75, 10.0).ahead(0.25), 0.25);
    // Phase 0.25 at 2.5: three quarters ahead (the next is at 3.25).
    assert_eq!(place(0.25, 10.0).ahead(0.25), 0.75);
    // At the point itself: 0.
    assert_eq!(place(0.5, 10.0).ahead(0.25), 0.0);
    // Nonsense progress: now.
    assert_eq!(place(0.5, f64::NAN).ahead(0.25), 0.0);
}

fn shared(ms: u64) -> Shared {
    Shared {
        interval: Duration::from_millis(ms),
        epoch: 2,
    }
}

#[test]
fn a_raise_that_landed_as_proposed_is_not_taken_as_another_ones() {
    let raise = Proposal {
        interval: Duration::from_millis(20),
        epoch: 2,
        raised_from: Some(1),
        capped: false,
    };
    assert!(!outraised(&raise, shared(20)));
    assert!(outraised(&raise, shared(25)));
    let raise_to_3 = Proposal { epoch: 3, ..raise };
    assert!(outraised(&raise_to_3, shared(20)));
    let step = Proposal {
        raised_from: None,
        ..raise
    };
    assert!(!outraised(&step, shared(25)));
}

/// A lane that starts cold: the start's interval while the fleet holds nothing,
/// the state's while it starts, 1.5 times the rate at a sync in which the member
/// used what it was allotted, unpaced past the shortest interval, and nothing
/// once the fleet raised.
#[test]
fn a_cold_lane_starts_at_ten_a_second_and_grows_while_its_share_is_used() {
    let floor = Duration::from_millis(1);
    let ms = Duration::from_millis;
    let cold = |state: Option<Shared>| Shared {
        interval: state.map_or(ms(100), |s| s.interval),
        epoch: 0,
    };
    let mut lane = LaneState::default();
    assert_eq!(cold_interval(None, &mut lane, None, 5.0, true), None);
    assert_eq!(
        cold_interval(Some(floor), &mut lane, None, 5.0, true),
        Some(ms(100))
    );
    // A member that used its allotment (a tenth of 10/s) grows the fleet's 100 ms.
    let mut last = decide(cold(None), 1.0, &[1.0; 9]);
    last.cold = true;
    lane.last = Some(last);
    assert_eq!(last.share * last.rate, 1.0);
    let state = Some(cold(None));
    let grown = cold_interval(Some(floor), &mut lane, state, 1.0, true);
    assert_eq!(grown, Some(ms(100).div_f64(COLD_GROWTH)));
    assert_eq!(lane.cold_read, ms(100));
    // One that did not keeps it, and so does one between full ticks.
    assert_eq!(
        cold_interval(Some(floor), &mut lane, state, 0.5, true),
        Some(ms(100))
    );
    assert_eq!(
        cold_interval(Some(floor), &mut lane, state, 1.0, false),
        Some(ms(100))
    );
    // Past the shortest interval: unpaced, for good.
    let fast = Some(Shared {
        interval: Duration::from_micros(1_400),
        epoch: 0,
    });
    assert_eq!(
        cold_interval(Some(floor), &mut lane, fast, 9.0, true),
        Some(ms(0))
    );
    assert_eq!(
        cold_interval(Some(floor), &mut lane, state, 9.0, true),
        None
    );
    // A raise ends the start; so does a fleet gone unpaced.
    let mut fresh = LaneState::default();
    assert_eq!(
        cold_interval(Some(floor), &mut fresh, Some(shared(20)), 9.0, true),
        None
    );
    let unpaced = Some(Shared {
        interval: Duration::ZERO,
        epoch: 0,
    });
    assert_eq!(
        cold_interval(Some(floor), &mut fresh, unpaced, 9.0, true),
        None
    );
    assert_eq!(
        cold_interval(Some(floor), &mut fresh, None, 9.0, true),
        None
    );
}

/// The throttle that ends a cold start takes the fleet back half a step
/// (geometrically) below the rate the member last read, or below the part of it
/// that got through if that was less (by [`COLD_DEEPEST`] at most, and only for a
/// member that dispatches often); never to its own raise.
#[test]
fn the_raise_that_ends_a_cold_start_goes_back_half_a_step_from_what_got_through_of_the_rate_read() {
    let mut state = LaneState {
        cold_read: Duration::from_millis(15),
        others_through: 40.0,
        others_tried: 80.0,
        ..LaneState::default()
    };
    let mut last = decide(shared(10), 0.0, &[0.0; 3]);
    last.cold = true;
    state.last = Some(last);
    // Half of 100 attempts a second got through, 50/s below the 15 ms read (66.7/s):
    // half a step below 20 ms (20 ms × √1.5, 24.5 ms), whatever the member's own
    // raise (11 ms, or 30 ms from a member a step behind).
    let halfway = Duration::from_millis(20).mul_f64(COLD_GROWTH.sqrt());
    assert_eq!(halfway, Duration::from_nanos(24_494_897));
    let raise = propose(&state, 11_000, 1, Some(0), (10.0, 20.0));
    assert_eq!(raise.interval, halfway);
    assert_eq!(raise.raised_from, Some(0));
    assert!(!raise.capped);
    let behind = propose(&state, 30_000, 1, Some(0), (10.0, 20.0));
    assert_eq!(behind.interval, halfway);
    // Refused a few but more got through than the 15 ms read: half a step below it.
    let read = Duration::from_millis(15).mul_f64(COLD_GROWTH.sqrt());
    let through = propose(&state, 30_000, 1, Some(0), (60.0, 60.0));
    assert_eq!(through.interval, read);
    // None refused, 30/s got through: that is the averages lagging the growth, not
    // the capacity, so half a step below the read too.
    state.others_tried = 20.0;
    state.others_through = 20.0;
    assert_eq!(
        propose(&state, 30_000, 1, Some(0), (10.0, 10.0)).interval,
        read
    );
    // A twentieth got through: at most COLD_DEEPEST below the 15 ms read (33.75 ms).
    state.others_tried = 200.0;
    state.others_through = 10.0;
    let deepest = Duration::from_micros(33_750).mul_f64(COLD_GROWTH.sqrt());
    assert_eq!(
        propose(&state, 30_000, 1, Some(0), (0.0, 100.0)).interval,
        deepest
    );
    // A member that dispatches too seldom to read what got through: from the
    // interval read.
    let learned = Learned {
        micros: 30_000,
        epoch: 1,
        raised_from: Some(0),
    };
    assert_eq!(proposal(&state, learned, 0.0, 100.0, false).interval, read);
    // Nothing counted as got through yet: from the interval read.
    state.others_through = 0.0;
    assert_eq!(
        propose(&state, 30_000, 1, Some(0), (0.0, 0.0)).interval,
        read
    );
    // Steps are proposed as they are.
    assert_eq!(
        propose(&state, 7_000, 0, None, (0.0, 0.0)).interval,
        Duration::from_millis(7)
    );
}

/// The floor a raise takes from what the members' dispatches got through applies in
/// a paced fleet only (an unpaced fleet's entries were written before its load
/// came), and only for a member that dispatches often enough to read it.
#[test]
fn a_raise_is_floored_at_the_fleets_rate_only_once_the_fleet_is_paced() {
    let mut state = LaneState::default();
    let unpaced = decide(
        Shared {
            interval: Duration::ZERO,
            epoch: 0,
        },
        0.0,
        &[0.0; 3],
    );
    state.last = Some(unpaced);
    // 1 ms proposed at 4/s of its own: kept, not floored at 250 ms.
    let raise = propose(&state, 1_000, 1, Some(0), (4.0, 4.0));
    assert_eq!(raise.interval, Duration::from_millis(1));
    // Paced at 1 ms, a tenth of the attempts through (100/s of 1,000/s): floored at
    // 1/100 s, and said to be.
    state.last = Some(decide(shared(1), 0.0, &[0.0; 3]));
    state.others_through = 96.0;
    state.others_tried = 960.0;
    let raise = propose(&state, 1_000, 3, Some(2), (4.0, 40.0));
    assert_eq!(raise.interval, Duration::from_millis(10));
    assert!(raise.capped);
    // All got through, of attempts that lag the rate: the floor is what got through
    // times the lag at most, 225/s.
    state.others_tried = 96.0;
    let lagging = propose(&state, 1_000, 3, Some(2), (4.0, 4.0));
    assert_eq!(lagging.interval, Duration::from_nanos(4_444_444));
    state.others_tried = 960.0;
    // A raise already past it is its own.
    let own = propose(&state, 20_000, 3, Some(2), (4.0, 40.0));
    assert_eq!(
        (own.interval, own.capped),
        (Duration::from_millis(20), false)
    );
    // No raise, no floor.
    let step = propose(&state, 1_000, 3, None, (4.0, 40.0));
    assert_eq!(
        (step.interval, step.capped),
        (Duration::from_millis(1), false)
    );
    // A member that dispatches too seldom to read what got through: its own raise.
    let learned = Learned {
        micros: 1_000,
        epoch: 3,
        raised_from: Some(2),
    };
    let sparse = proposal(&state, learned, 4.0, 40.0, false);
    assert_eq!(
        (sparse.interval, sparse.capped),
        (Duration::from_millis(1), false)
    );
}

#[test]
fn an_unpaced_member_holds_its_part_of_the_fleets_dispatches() {
    assert_eq!(unpaced_share(30.0, &[10.0, 60.0]), 0.3);
    // Before anyone dispatched, or while this member did not: an equal part.
    assert_eq!(unpaced_share(0.0, &[0.0, 0.0, 0.0]), 0.25);
    assert_eq!(unpaced_share(0.0, &[50.0]), 0.5);
    assert_eq!(unpaced_share(7.0, &[]), 1.0);
    // Never less than half an equal part; nonsense counts as nothing.
    assert_eq!(unpaced_share(1.0, &[999.0]), 0.25);
    assert_eq!(unpaced_share(5.0, &[f64::NAN, f64::INFINITY, -4.0]), 1.0);
}

#[test]
fn a_lone_member_paces_at_the_fleet_interval() {
    let d = decide(shared(10), 500.0, &[]);
    assert_eq!((d.share, d.members, d.rate), (1.0, 1, 100.0));
    assert_eq!(d.member_interval(), Duration::from_millis(10));
}

#[test]
fn equal_demand_splits_the_fleet_rate() {
    let d = decide(shared(10), 500.0, &[500.0, 500.0, 500.0]);
    assert_eq!(d.share, 0.25);
    assert_eq!(d.member_interval(), Duration::from_millis(40));
}

#[test]
fn a_light_member_gets_its_demand_and_a_heavy_one_the_rest() {
    // 100/s: one light member at 10/s, three heavy ones split 90.
    let light = decide(shared(10), 10.0, &[1e9, 1e9, 1e9]);
    assert!((light.share - 0.125).abs() < 1e-12, "{}", light.share);
    let heavy = decide(shared(10), 1e9, &[10.0, 1e9, 1e9]);
    assert!((heavy.share - 0.3).abs() < 1e-12);
}

#[test]
fn capacity_nobody_asked_for_is_spread_evenly() {
    // 100/s, demands 10 and 30: 60 spare, 30 each.
    let d = decide(shared(10), 10.0, &[30.0]);
    assert!((d.share - 0.4).abs() < 1e-12, "{}", d.share);
    let idle = decide(shared(10), 0.0, &[0.0, 0.0, 0.0]);
    assert_eq!(idle.share, 0.25);
}

#[test]
fn an_idle_member_keeps_a_small_share_and_an_unpaced_fleet_paces_nobody() {
    let idle = decide(shared(10), 0.0, &[1e9]);
    assert_eq!(idle.share, 0.25);
    let free = decide(shared(0), 5.0, &[1e9]);
    assert_eq!((free.member_interval(), free.rate), (Duration::ZERO, 0.0));
}

/// A member joining a lane where 200 entries claim a demand of 1e9 and dispatch
/// nothing: dispatching at what each decision gives it, its claim doubles per sync,
/// and it holds at least half the rate from the 7th sync on.
#[test]
fn entries_that_dispatch_nothing_cannot_starve_a_member_that_does() {
    let fakes = vec![demand::claim(1e9, 0.0); 200];
    let mut used = 0.0;
    let mut shares = Vec::new();
    for _ in 0..12 {
        let d = decide(shared(10), demand::claim(1e9, used), &fakes);
        used = d.share * d.rate;
        shares.push(d.share);
    }
    assert_eq!(shares[0], 1.0 / 201.0);
    assert!(shares[..6].iter().all(|s| *s < 0.5), "{shares:?}");
    assert!(shares[6..].iter().all(|s| *s >= 0.5), "{shares:?}");
    assert!(shares[11] > 0.99, "{shares:?}");
}

/// A lane that sent a claim of 1e9 and proposed nothing, answered with `answer`;
/// grace lasts two syncs.
fn answered(answer: &Answer, ticked: bool) -> Answered<'_> {
    Answered {
        answer,
        sent: Sent {
            claim: 1e9,
            wanted: 1e9,
            through: 0.0,
            proposal: None,
        },
        cold: None,
        rejoin: 2,
        ticked,
    }
}

/// A cold lane is held at a fiftieth of the start's 10/s, a 5 s spacing, once, and
/// not once it has a decision.
#[test]
fn a_cold_lane_is_held_at_a_fiftieth_of_the_start_until_it_has_a_decision() {
    let mut state = LaneState::default();
    let held = hold_cold(&mut state).unwrap();
    assert!(held.cold, "{held:?}");
    assert_eq!(
        (held.interval, held.share, held.members),
        (Duration::from_millis(100), 1.0 / 50.0, 1)
    );
    assert_eq!(held.member_interval(), Duration::from_secs(5));
    assert_eq!(state.last, Some(held));
    assert_eq!(state.cold_read, Duration::from_millis(100));
    assert_eq!(hold_cold(&mut state), None);
}

/// Going on alone: the spacing of the last share, at most an equal share of the
/// peak, becomes the member's own interval, and its proposals are scaled back by
/// that share until it returns; nothing to go on from without a decision.
#[test]
fn going_alone_keeps_the_spacing_of_at_most_an_equal_share_of_the_peak() {
    let mut state = LaneState::default();
    assert_eq!(go_local(&mut state), None);
    state.last = Some(decide(shared(10), 1e9, &[1e9]));
    state.peak_members = 4;
    let alone = go_local(&mut state).unwrap();
    assert!(alone.local, "{alone:?}");
    assert_eq!(
        (alone.interval, alone.epoch, alone.share, alone.members),
        (Duration::from_millis(40), 2, 1.0, 1)
    );
    assert_eq!(alone.rescale, 4.0);
    assert_eq!(state.scale, Some(0.25));
    assert_eq!(
        propose(&state, 40_000, 2, None, (0.0, 0.0)).interval,
        Duration::from_millis(10)
    );
}

/// Back from going on alone to a fleet that counts fewer members than its peak: an
/// equal share of the peak for its ticks of grace (a round between ticks is none of
/// them), then the fleet's own share; with the others back, the fleet's at once.
#[test]
fn a_lane_back_from_alone_holds_an_equal_share_of_the_peak_for_its_ticks_of_grace() {
    let returning = LaneState {
        scale: Some(0.25),
        peak_members: 4,
        ..LaneState::default()
    };
    let mut state = returning;
    let lone = Answer {
        shared: Some(shared(10)),
        ..Answer::default()
    };
    let back = from_answer(&mut state, &answered(&lone, true)).unwrap();
    assert_eq!((back.members, back.share, back.rescale), (1, 0.25, 0.25));
    assert_eq!((state.scale, state.rejoining), (None, 1));
    let between = from_answer(&mut state, &answered(&lone, false)).unwrap();
    assert_eq!((between.share, between.rescale), (0.25, 1.0));
    assert_eq!(state.rejoining, 1);
    let last = from_answer(&mut state, &answered(&lone, true)).unwrap();
    assert_eq!((last.share, state.rejoining), (0.25, 0));
    let after = from_answer(&mut state, &answered(&lone, true)).unwrap();
    assert_eq!(after.share, 1.0);

    let mut state = returning;
    let all = Answer {
        shared: Some(shared(10)),
        others: vec![1e9; 3],
        ..Answer::default()
    };
    let back = from_answer(&mut state, &answered(&all, true)).unwrap();
    assert_eq!((back.members, back.share, state.rejoining), (4, 0.25, 0));
}

#[test]
fn a_dense_lane_hurries_its_syncs_after_the_fleets_first_raise_only() {
    let ms = Duration::from_millis;
    let cold = Decision {
        cold: true,
        ..Decision::new(ms(10), 0, 1.0, 4)
    };
    let unpaced = Decision::new(Duration::ZERO, 0, 0.25, 4);
    let raised = Decision::new(ms(15), 1, 0.25, 4);
    let first = Decision {
        first: true,
        ..raised
    };
    // The cold start's end, and the first raise of an unpaced fleet.
    assert!(hurries(Some(&cold), &raised, true));
    assert!(hurries(Some(&unpaced), &first, true));
    // Not for a sparse lane, nor alone, nor at a later raise or while cold.
    assert!(!hurries(Some(&cold), &raised, false));
    let alone = Decision {
        local: true,
        ..raised
    };
    assert!(!hurries(Some(&cold), &alone, true));
    let later = Decision::new(ms(20), 2, 0.25, 4);
    assert!(!hurries(Some(&raised), &later, true));
    assert!(!hurries(Some(&cold), &cold, true));
    assert!(!hurries(None, &raised, true));
    // A cold start that grew past its shortest interval went unpaced, at epoch 0.
    assert!(!hurries(Some(&cold), &unpaced, true));
}

/// The floor bounds a member's own interval: a cold start shared by 16 grows to 16
/// times the floor's rate before the lane goes unpaced.
#[test]
fn a_cold_start_goes_unpaced_only_past_the_floor_of_a_members_share() {
    let cold = |members: usize| {
        let answer = Answer {
            shared: Some(Shared {
                interval: Duration::from_micros(500),
                epoch: 0,
            }),
            others: vec![1e9; members - 1],
            others_through: vec![0.0; members - 1],
            counted_in: 1,
            ..Answer::default()
        };
        let sync = Answered {
            cold: Some(Duration::from_millis(1)),
            ..answered(&answer, true)
        };
        from_answer(&mut LaneState::default(), &sync).map(|d| d.interval)
    };
    // 2,000/s: past one sidecar's floor of 1 ms; a sixteenth of it is 8 ms.
    assert_eq!(cold(1), Some(Duration::ZERO));
    assert_eq!(cold(16), Some(Duration::from_micros(500)));
}
