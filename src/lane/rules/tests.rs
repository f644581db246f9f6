//! The lane's rules with exact figures: no runtime, no clock, no pacer.

use std::time::Duration;

use super::*;
use crate::hints::Quota;
use crate::quota::Falls;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn bucket(remaining: u64, limit: u64) -> Quota {
    Quota {
        remaining,
        reset: secs(60),
        limit: Some(limit),
        refills: true,
    }
}

fn window(remaining: u64, reset: Duration, limit: Option<u64>) -> Quota {
    Quota {
        remaining,
        reset,
        limit,
        refills: false,
    }
}

fn requests(max: Duration) -> QuotaFacts {
    QuotaFacts {
        spend: Spend::Use,
        in_flight: 0,
        max,
        at: secs(1),
        units: None,
    }
}

fn tokens(max: Duration, vendor: TokenWindow) -> QuotaFacts {
    QuotaFacts {
        units: Some(UnitFacts {
            mean: 120.0,
            queued: 0,
            window: vendor,
        }),
        ..requests(max)
    }
}

#[test]
fn a_throttle_raises_a_success_lowers_and_the_rest_holds() {
    let yes = || true;
    let no = || false;
    let throttle = Some(Verdict::Throttle(Signal::Status));
    assert_eq!(reaction(throttle, yes, no), Reaction::Raise(Signal::Status));
    assert_eq!(reaction(Some(Verdict::Success), yes, no), Reaction::Lower);
    assert_eq!(reaction(Some(Verdict::Failure), yes, no), Reaction::Hold);
    assert_eq!(reaction(None, yes, no), Reaction::Hold);
    // Observe mode: a throttle pacing would not have met counts as a success.
    assert_eq!(reaction(throttle, no, no), Reaction::Lower);
}

#[test]
fn an_overload_raises_only_when_overloads_come_often_and_is_counted_only_then() {
    let overload = Some(Verdict::Throttle(Signal::Overload));
    assert_eq!(reaction(overload, || true, || false), Reaction::Hold);
    assert_eq!(
        reaction(overload, || true, || true),
        Reaction::Raise(Signal::Overload)
    );
    let mut asked = 0;
    let _ = reaction(
        Some(Verdict::Throttle(Signal::Status)),
        || true,
        || {
            asked += 1;
            true
        },
    );
    let _ = reaction(
        Some(Verdict::Success),
        || true,
        || {
            asked += 1;
            true
        },
    );
    assert_eq!(asked, 0, "only an overload is counted as one");
}

#[test]
fn a_cap_keeps_what_the_operator_allows_and_says_when_it_cut() {
    assert_eq!(
        Capped::of(secs(90), secs(60)),
        Capped {
            duration: secs(60),
            asked: secs(90)
        }
    );
    assert!(Capped::of(secs(90), secs(60)).was_cut());
    assert!(!Capped::of(secs(60), secs(60)).was_cut());
    assert_eq!(Capped::of(Duration::MAX, secs(60)).duration, secs(60));
}

#[test]
fn no_window_changes_nothing() {
    let effects = quota(&Reading::default(), &Falls::default(), &requests(secs(60)));
    assert_eq!(effects, QuotaEffects::NONE);
}

#[test]
fn a_window_with_plenty_left_lifts_the_floor_and_a_nearly_spent_one_spreads_the_rest() {
    let falls = Falls::default();
    let plenty = Reading {
        requests: Some(window(500, secs(30), Some(1000))),
        ..Reading::default()
    };
    let effects = quota(&plenty, &falls, &requests(secs(60)));
    assert_eq!(effects.floor, Floor::Lift);
    assert_eq!(effects.pause, None);
    assert_eq!(effects.request_floor, Floor::Keep);
    // 10 left of 1000 (the 5 % reserve is 50): 10 spread over 30 s.
    let low = Reading {
        requests: Some(window(10, secs(30), Some(1000))),
        ..Reading::default()
    };
    let effects = quota(&low, &Falls::default(), &requests(secs(60)));
    assert_eq!(
        effects.floor,
        Floor::Set {
            spacing: secs(3),
            lasts: Capped::of(secs(30), secs(60))
        }
    );
}

#[test]
fn a_spent_window_pauses_until_its_reset_and_no_longer_than_the_cap() {
    let spent = Reading {
        requests: Some(window(0, secs(3600), None)),
        ..Reading::default()
    };
    let effects = quota(&spent, &Falls::default(), &requests(secs(60)));
    assert_eq!(effects.pause, Some(Capped::of(secs(3600), secs(60))));
    assert_eq!(effects.floor, Floor::Keep);
    assert!(effects.pause.unwrap().was_cut());
}

#[test]
fn one_left_with_a_far_reset_spaces_by_at_most_the_cap() {
    let far = Reading {
        requests: Some(window(1, secs(86_400), None)),
        ..Reading::default()
    };
    let effects = quota(&far, &Falls::default(), &requests(secs(60)));
    assert_eq!(
        effects.floor,
        Floor::Set {
            spacing: secs(60),
            lasts: Capped::of(secs(86_400), secs(60))
        }
    );
}

#[test]
fn the_stricter_window_binds_a_lane_that_paces_in_requests() {
    let both = Reading {
        requests: Some(window(10, secs(30), Some(1000))),
        tokens: Some(window(0, secs(5), None)),
        ..Reading::default()
    };
    let effects = quota(&both, &Falls::default(), &requests(secs(60)));
    assert_eq!(effects.pause, Some(Capped::of(secs(5), secs(60))));
}

#[test]
fn a_token_window_spaces_a_token_lane_per_token_and_a_request_window_per_request() {
    // A spent bucket of 120,000 tokens a minute is paced at 90 % of its refill:
    // 60 s / 108,000 a token, 555.6 ms per thousand.
    let spent = Reading {
        tokens: Some(bucket(0, 120_000)),
        ..Reading::default()
    };
    let facts = tokens(secs(60), TokenWindow::OPENAI);
    let effects = quota(&spent, &Falls::default(), &facts);
    let Floor::Set { spacing, lasts } = effects.floor else {
        panic!("{effects:?}");
    };
    assert_eq!(spacing.as_micros(), 555_556);
    assert_eq!(lasts, Capped::of(secs(60), secs(60)));
    // No request window: no least gap per request.
    assert_eq!(effects.request_floor, Floor::Lift);
    // A spent request window beside a full token window: a gap per request.
    let both = Reading {
        requests: Some(bucket(0, 600)),
        tokens: Some(bucket(120_000, 120_000)),
        ..Reading::default()
    };
    let effects = quota(&both, &Falls::default(), &facts);
    assert_eq!(effects.floor, Floor::Lift);
    let Floor::Set { spacing, .. } = effects.request_floor else {
        panic!("{effects:?}");
    };
    assert_eq!(spacing.as_micros(), 111_111, "60 s / 540");
}

#[test]
fn a_vendor_window_that_counts_one_kind_of_token_spaces_by_its_least_share() {
    // The window fell 10 tokens for an answer of a lane that reserves 120 a request:
    // a share of 1/12, raised to the vendor's least share.
    let per_unit = |vendor| {
        let falls = Falls::default();
        let _ = falls.tokens.observe(bucket(10, 120_000), secs(1), 120.0);
        let spent = Reading {
            tokens: Some(bucket(0, 120_000)),
            ..Reading::default()
        };
        match quota(&spent, &falls, &tokens(secs(60), vendor)).floor {
            Floor::Set { spacing, .. } => spacing.as_micros(),
            other => panic!("{other:?}"),
        }
    };
    // 60 s / 108,000 a token: 555.6 ms per thousand of the lane's tokens, a quarter
    // of that where the window counts a quarter of them (and says so exactly).
    let input_only = TokenWindow {
        coarse: false,
        ..TokenWindow::ANTHROPIC
    };
    assert_eq!(per_unit(input_only), 138_889);
    assert_eq!(per_unit(TokenWindow::OPENAI), 555_556);
    // Anthropic's rounded window: its fall is not read, the lane's own mean stands.
    assert_eq!(per_unit(TokenWindow::ANTHROPIC), 555_556);
}

#[test]
fn a_spent_window_of_either_kind_pauses_a_unit_lane_for_the_later_reset() {
    let both = Reading {
        requests: Some(window(0, secs(5), None)),
        tokens: Some(window(0, secs(9), None)),
        ..Reading::default()
    };
    let effects = quota(
        &both,
        &Falls::default(),
        &tokens(secs(60), TokenWindow::USED),
    );
    assert_eq!(effects.pause, Some(Capped::of(secs(9), secs(60))));
    assert_eq!(effects.floor, Floor::Keep);
    assert_eq!(effects.request_floor, Floor::Keep);
}

#[test]
fn a_reservation_is_bounded_and_one_past_the_whole_window_is_reserved_at_the_mean() {
    let most = 2_000_000;
    assert_eq!(reservation(1_200, None, most, 900), 1_200);
    assert_eq!(reservation(1_000_000_000_000, None, most, 900), most);
    // 30,000 tokens a minute: a request for more can never be admitted.
    assert_eq!(reservation(1_000_000_000_000, Some(30_000), most, 900), 900);
    assert_eq!(reservation(30_000, Some(30_000), most, 900), 30_000);
    assert_eq!(
        reservation(40_000, Some(30_000), most, 0),
        1,
        "never nothing"
    );
    assert_eq!(reservation(40_000, Some(500), most, 900), 500);
}

#[test]
fn a_settlement_is_at_most_the_window_and_the_units_bound() {
    assert_eq!(settlement(u64::MAX, None, 2_000_000), 2_000_000);
    assert_eq!(settlement(u64::MAX, Some(30_000), 2_000_000), 30_000);
    assert_eq!(settlement(1_234, Some(30_000), 2_000_000), 1_234);
}

#[test]
fn only_an_answer_at_least_as_fresh_as_the_floors_moves_them() {
    assert!(fresher(20, 10));
    assert!(fresher(10, 10));
    assert!(!fresher(9, 10));
    assert!(fresher(0, 0), "no floor yet");
}

#[test]
fn openais_window_counts_a_request_at_its_reservation_and_others_at_their_answer() {
    assert_eq!(charged(120, 80, TokenWindow::OPENAI), 120);
    assert_eq!(charged(120, 300, TokenWindow::OPENAI), 300);
    assert_eq!(charged(120, 80, TokenWindow::ANTHROPIC), 80);
    assert_eq!(charged(120, 80, TokenWindow::USED), 80);
}

/// A fleet's raise keeps the phase of a member that dispatches at least once a second
/// in a paced fleet; one that was in step with the others, unpaced, slower, or not
/// raised is left to the stagger or to nothing.
#[test]
fn a_raise_keeps_the_phase_of_a_paced_member_that_dispatches_at_least_once_a_second() {
    assert!(keeps_phase(true, false, ms(310)));
    assert!(keeps_phase(true, false, ms(1000)));
    assert!(!keeps_phase(true, false, ms(1001)));
    assert!(!keeps_phase(true, true, ms(310)));
    assert!(!keeps_phase(false, false, ms(310)));
    assert!(!keeps_phase(true, false, Duration::ZERO));
}

#[test]
fn a_member_takes_its_place_once_an_epoch_where_a_raise_would_shift_it() {
    // In step, or dispatching less often than once a second: placed.
    assert!(places(true, true, ms(310)));
    assert!(places(true, false, ms(1001)));
    // Keeping its phase at a raise: not placed.
    assert!(!places(true, false, ms(1000)));
    // Once an epoch; never unpaced.
    assert!(!places(false, true, ms(2000)));
    assert!(!places(true, true, Duration::ZERO));
}

#[test]
fn a_decision_that_is_no_raise_stretches_only_what_is_left_of_the_gap() {
    // A cold start, a raise that keeps the phase, a share that moved: kept.
    assert!(keeps_progress(true, false, false));
    assert!(keeps_progress(false, true, true));
    assert!(keeps_progress(false, false, false));
    // A raise that does not keep the phase counts the new gap from the last dispatch.
    assert!(!keeps_progress(false, false, true));
}

fn decision(epoch: u64) -> FleetDecision {
    FleetDecision {
        epoch,
        outraised: false,
        first: false,
        cold: false,
    }
}

fn member(epoch: u64, spacing: Duration) -> Member {
    Member {
        epoch,
        unpaced: false,
        provisional: false,
        spacing,
    }
}

#[test]
fn a_paced_member_keeps_its_phase_through_a_raise_and_a_slow_one_is_placed() {
    let fast = adoption(decision(4), member(3, ms(310)));
    assert_eq!(
        fast,
        Adoption {
            raised: true,
            in_step: false,
            keep_phase: true,
            keep_progress: true
        }
    );
    assert_eq!(placement(fast, true, ms(340), Some(0.5)), Placement::Stay);
    let slow = adoption(decision(4), member(3, ms(2000)));
    assert!(slow.raised && !slow.keep_phase && !slow.keep_progress);
    assert_eq!(
        placement(slow, true, ms(2200), Some(0.25)),
        Placement::Place {
            ahead: ms(550),
            nearest: true
        }
    );
    // Placed once an epoch; without a place, shifted at random.
    assert_eq!(
        placement(slow, false, ms(2200), Some(0.25)),
        Placement::Stagger
    );
    assert_eq!(placement(slow, true, ms(2200), None), Placement::Stagger);
}

#[test]
fn members_in_step_take_the_first_place_from_now() {
    let first = FleetDecision {
        first: true,
        ..decision(1)
    };
    let taken = adoption(first, member(0, Duration::ZERO));
    assert!(taken.raised && taken.in_step && !taken.keep_phase);
    assert_eq!(
        placement(taken, true, ms(100), Some(0.5)),
        Placement::Place {
            ahead: ms(50),
            nearest: false
        }
    );
    // A decision that is no raise keeps the gap's progress and the slot where it is.
    let same = adoption(decision(3), member(3, ms(310)));
    assert!(!same.raised && same.keep_progress);
    assert_eq!(placement(same, false, ms(310), None), Placement::Stay);
}

#[test]
fn a_first_refusal_holds_only_its_request_and_a_second_within_its_pause_the_lane() {
    let earlier = Asked {
        came: 1_000,
        ends: 2_000,
    };
    assert!(!pushback_holds_lane(false, 500, None), "a first refusal");
    // Sent before the earlier refusal came: it could not have known.
    assert!(!pushback_holds_lane(false, 999, Some(earlier)));
    assert!(pushback_holds_lane(false, 1_000, Some(earlier)));
    assert!(pushback_holds_lane(false, 1_999, Some(earlier)));
    // Sent once the earlier pause was over.
    assert!(!pushback_holds_lane(false, 2_000, Some(earlier)));
    assert!(pushback_holds_lane(true, 500, None), "lane-wide evidence");
}

#[test]
fn a_coarse_window_spaces_by_the_lanes_own_mean_whatever_its_remaining_did() {
    // Anthropic rounds token remaining to thousands, and the window with the least
    // left changes between answers: 4,000 of 400,000, then 1,000 of 80,000, then
    // 8,000 of 400,000 read falls of hundreds of tokens an answer for a lane that
    // reserves 120. The floor is the one its own mean gives, as at the first answer.
    let at = |ms: u64| QuotaFacts {
        at: Duration::from_millis(ms),
        ..tokens(secs(60), TokenWindow::ANTHROPIC)
    };
    let reading = |remaining, limit| Reading {
        tokens: Some(bucket(remaining, limit)),
        ..Reading::default()
    };
    let falls = Falls::default();
    let first = quota(&reading(4_000, 400_000), &Falls::default(), &at(0)).floor;
    quota(&reading(4_000, 400_000), &falls, &at(0));
    quota(&reading(1_000, 80_000), &falls, &at(50));
    quota(&reading(8_000, 400_000), &falls, &at(100));
    assert_eq!(
        quota(&reading(4_000, 400_000), &falls, &at(150)).floor,
        first
    );
    // OpenAI's window is exact: there the fall counts.
    let exact = |ms| QuotaFacts {
        at: Duration::from_millis(ms),
        ..tokens(secs(60), TokenWindow::OPENAI)
    };
    let falls = Falls::default();
    let first = quota(&reading(4_000, 400_000), &Falls::default(), &exact(0)).floor;
    quota(&reading(4_000, 400_000), &falls, &exact(0));
    assert_ne!(
        quota(&reading(3_000, 400_000), &falls, &exact(50)).floor,
        first
    );
}
