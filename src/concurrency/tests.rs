use std::time::Duration;

use super::*;

const MS: Duration = Duration::from_millis(100);

/// Successes with the cap full, each answered in `latency`, until the cap moves or
/// `most` answers went; returns the moves.
fn full_successes(l: &mut Learner, n: u32, latency: Duration) -> Vec<Move> {
    (0..n)
        .map(|_| l.success(l.cap(), l.cap(), l.epoch(), latency))
        .collect()
}

#[test]
fn starts_at_initial_and_doubles_per_round_trip_in_slow_start() {
    let mut l = Learner::new(1000);
    assert_eq!(l.cap(), INITIAL);
    // A round trip: each of the 4 out comes back with the cap full.
    let moves = full_successes(&mut l, 4, MS);
    assert_eq!(moves, vec![Move::Grow; 4]);
    assert_eq!(l.cap(), 8);
}

#[test]
fn grows_only_when_the_cap_was_full_half_full_in_the_slow_start() {
    let mut l = Learner::new(1000);
    assert_eq!(l.success(1, l.cap(), l.epoch(), MS), Move::Hold);
    assert_eq!(l.cap(), 4);
    assert_eq!(l.success(2, l.cap(), l.epoch(), MS), Move::Grow);
    assert_eq!(l.cap(), 5);
    l.refused(6, l.epoch());
    assert_eq!(l.cap(), 5);
    // Past the slow start only a full cap grows it (toward the next probe).
    full_successes(&mut l, PROBE_MIN - 1, MS);
    assert_eq!(l.success(4, 5, l.epoch(), MS), Move::Hold);
    assert_eq!(l.success(5, 5, l.epoch(), MS), Move::Grow);
}

#[test]
fn never_grows_past_most() {
    let mut l = Learner::new(6);
    full_successes(&mut l, 10, MS);
    assert_eq!(l.cap(), 6);
    assert_eq!(Learner::new(2).cap(), 2);
}

#[test]
fn a_refusal_in_slow_start_cuts_to_what_was_out_without_it() {
    let mut l = Learner::new(1000);
    full_successes(&mut l, 8, MS);
    assert_eq!(l.cap(), 12);
    // An exact limit of 8: the ninth out is refused.
    assert_eq!(l.refused(9, l.epoch()), Move::Cut(Why::Refused));
    assert_eq!(l.cap(), 8);
    assert_eq!(l.ceiling(), Some(8));
    assert_eq!(l.epoch(), 1);
}

#[test]
fn refusals_of_one_burst_cut_once() {
    let mut l = Learner::new(1000);
    full_successes(&mut l, 8, MS);
    let epoch = l.epoch();
    assert_eq!(l.refused(12, epoch), Move::Cut(Why::Refused));
    assert_eq!(l.cap(), 11);
    // Out with it, dispatched before the cut.
    assert_eq!(l.refused(10, epoch), Move::Hold);
    assert_eq!(l.refused(9, epoch), Move::Hold);
    assert_eq!(l.cap(), 11);
}

#[test]
fn at_the_ceiling_it_probes_after_probe_min_successes() {
    let mut l = Learner::new(1000);
    full_successes(&mut l, 8, MS);
    l.refused(9, l.epoch());
    assert_eq!(l.cap(), 8);
    let moves = full_successes(&mut l, PROBE_MIN, MS);
    assert!(
        moves[..PROBE_MIN as usize - 1]
            .iter()
            .all(|m| *m == Move::Hold)
    );
    assert_eq!(moves[PROBE_MIN as usize - 1], Move::Grow);
    assert_eq!(l.cap(), 9);
}

#[test]
fn a_failed_probe_doubles_the_wait_for_the_next_up_to_a_bound() {
    let mut l = Learner::new(1000);
    full_successes(&mut l, 8, MS);
    l.refused(9, l.epoch());
    let mut waits = Vec::new();
    for _ in 0..7 {
        let mut n = 0;
        while l.cap() == 8 {
            l.success(8, l.cap(), l.epoch(), MS);
            n += 1;
        }
        waits.push(n);
        // The probe, 9 out, is refused.
        assert_eq!(l.refused(9, l.epoch()), Move::Cut(Why::Refused));
        assert_eq!(l.cap(), 8);
    }
    assert_eq!(waits, vec![64, 128, 256, 512, 1024, 1024, 1024]);
}

#[test]
fn a_probe_that_passes_raises_the_ceiling() {
    let mut l = Learner::new(1000);
    full_successes(&mut l, 8, MS);
    l.refused(9, l.epoch());
    full_successes(&mut l, PROBE_MIN, MS);
    assert_eq!(l.cap(), 9);
    // The ninth out comes back: nine pass.
    l.success(9, l.cap(), l.epoch(), MS);
    assert_eq!(l.ceiling(), Some(9));
    assert_eq!(l.cap(), 9);
    // The next probe comes after 64 / 4 successes at 9 (the probe's own the
    // first) and reaches 2 above; the one after after 4, and 4 above.
    let moves = full_successes(&mut l, 14, MS);
    assert!(moves.iter().all(|m| *m == Move::Hold));
    assert_eq!(l.success(9, 9, l.epoch(), MS), Move::Grow);
    assert_eq!(l.cap(), 11);
    l.success(11, 11, l.epoch(), MS);
    assert_eq!(l.ceiling(), Some(11));
    full_successes(&mut l, 2, MS);
    assert_eq!(l.success(11, 11, l.epoch(), MS), Move::Grow);
    assert_eq!(l.cap(), 15);
    // A refusal: the next probe reaches one above again.
    l.refused(14, l.epoch());
    assert_eq!((l.cap(), l.ceiling()), (13, Some(13)));
    full_successes(&mut l, PROBE_MIN, MS);
    assert_eq!(l.cap(), 14);
}

#[test]
fn refusals_with_no_more_out_than_passed_cut_by_beta_from_the_third() {
    let mut l = Learner::new(1000);
    full_successes(&mut l, 96, MS);
    assert_eq!(l.cap(), 100);
    l.refused(101, l.epoch());
    assert_eq!(l.cap(), 100);
    // Refused at the ceiling, twice: the count was a little off; cut to what passed.
    l.refused(100, l.epoch());
    assert_eq!(l.cap(), 99);
    l.refused(99, l.epoch());
    assert_eq!(l.cap(), 98);
    // A third time with no more out than passed, nothing grown between: the room
    // shrinks.
    l.refused(98, l.epoch());
    assert_eq!(l.cap(), 88);
    l.refused(88, l.epoch());
    assert_eq!(l.cap(), 79);
    // Few out, refused: cut to what was out without it.
    l.refused(20, l.epoch());
    assert_eq!(l.cap(), 19);
    l.refused(1, l.epoch());
    assert_eq!(l.cap(), 1);
}

#[test]
fn answers_at_the_cap_between_refusals_spare_the_beta() {
    let mut l = Learner::new(1000);
    full_successes(&mut l, 16, MS);
    l.refused(21, l.epoch());
    l.refused(20, l.epoch());
    l.refused(19, l.epoch());
    assert_eq!(l.cap(), 18);
    // Successes with the cap full: it holds there.
    full_successes(&mut l, 5, MS);
    l.refused(18, l.epoch());
    assert_eq!(l.cap(), 17);
}

#[test]
fn below_the_ceiling_it_grows_one_per_caps_worth_of_successes() {
    let mut l = Learner::new(1000);
    full_successes(&mut l, 16, MS);
    l.refused(21, l.epoch());
    assert_eq!(l.cap(), 20);
    l.refused(20, l.epoch());
    l.refused(19, l.epoch());
    l.refused(18, l.epoch());
    // 18 x 0.9 = 16.2.
    assert_eq!(l.cap(), 16);
    assert_eq!(l.ceiling(), Some(17));
    // 1/16, 1/16.06, ...: the 17th success takes it past 17.
    let moves = full_successes(&mut l, 17, MS);
    assert_eq!(moves.iter().filter(|m| **m == Move::Grow).count(), 1);
    assert_eq!(moves[16], Move::Grow);
    assert_eq!(l.cap(), 17);
}

#[test]
fn far_below_the_ceiling_it_grows_back_half_the_way_a_round_trip() {
    const SECOND: u32 = 93;
    let mut l = Learner::new(1000);
    full_successes(&mut l, 96, MS);
    l.refused(101, l.epoch());
    l.refused(100, l.epoch());
    l.refused(99, l.epoch());
    l.refused(98, l.epoch());
    assert_eq!((l.cap(), l.ceiling()), (88, Some(97)));
    // A round trip: 88 answers take it about 0.4 of the way (1 - e^-1/2, the gap
    // closing as it goes) to 97.
    full_successes(&mut l, 88, MS);
    assert_eq!(l.cap(), 91);
    full_successes(&mut l, 91, MS);
    assert_eq!(l.cap(), SECOND);
}

#[test]
fn latency_at_twice_its_baseline_stops_growth() {
    let mut l = Learner::new(1000);
    // The baseline: 0.1 s.
    l.success(4, l.cap(), l.epoch(), MS);
    let mut grew_while_slow = 0;
    for _ in 0..50 {
        let slow = {
            let (recent, baseline) = l.latency();
            recent > LATENCY_HOLD * baseline
        };
        let moved = l.success(l.cap(), l.cap(), l.epoch(), Duration::from_millis(250));
        if slow && moved != Move::Hold {
            grew_while_slow += 1;
        }
    }
    // Recent (0.115, 0.1285, 0.141, ...) passes 2x its baseline at the 11th slow
    // answer, after 10 growths, and settles at 2.5x: no growth since, no cut.
    assert_eq!(grew_while_slow, 0);
    assert_eq!(l.cap(), 15);
    let (recent, baseline) = l.latency();
    assert!(recent > LATENCY_HOLD * baseline && recent < LATENCY_CUT * baseline);
}

#[test]
fn latency_at_three_times_its_baseline_cuts_once_per_caps_worth() {
    let mut l = Learner::new(1000);
    full_successes(&mut l, 4, MS);
    assert_eq!(l.cap(), 8);
    let moves: Vec<Move> = (0..40)
        .map(|_| l.success(l.cap(), l.cap(), l.epoch(), MS * 10))
        .collect();
    let cuts: Vec<usize> = moves
        .iter()
        .enumerate()
        .filter(|(_, m)| **m == Move::Cut(Why::Latency))
        .map(|(i, _)| i)
        .collect();
    // 1 s answers against a 0.1 s baseline: recent 0.19 (a growth to 9), 0.271,
    // 0.344 (past 3x: counting starts); then one cut per cap's worth of answers.
    assert_eq!(moves[0], Move::Grow);
    assert_eq!(cuts, vec![10, 18, 25, 31, 36]);
    // 9 x 0.9^5 = 5.3.
    assert_eq!(l.cap(), 5);
}

#[test]
fn a_share_raises_a_slow_start_and_is_the_cap_past_it() {
    let mut l = Learner::new(50);
    // In the slow start a share only raises the cap.
    l.adopt(2.0, 8.0, 0.0, true);
    assert_eq!(l.cap(), 4);
    l.adopt(30.5, 61.0, 0.0, true);
    assert_eq!((l.cap(), l.limit(), l.epoch()), (30, 30.5, 0));
    // Refused with 30 out: 29, the ceiling.
    assert_eq!(l.refused(30, 0), Move::Cut(Why::Refused));
    assert_eq!((l.cap(), l.ceiling(), l.epoch()), (29, Some(29), 1));
    // Past the slow start the share is the cap; the ceiling stays the member's own.
    l.adopt(25.25, 101.0, 0.0, true);
    assert_eq!((l.cap(), l.ceiling(), l.epoch()), (25, Some(29), 1));
    // At a phase of 0.75 a part of 25.25 rounds to 26.
    l.adopt(25.25, 101.0, 0.75, true);
    assert_eq!(l.cap(), 26);
    // Within bounds; a share that is not a number changes nothing.
    l.adopt(0.0, 100.0, 0.0, true);
    assert_eq!(l.cap(), 1);
    l.adopt(500.0, 500.0, 0.0, true);
    assert_eq!(l.cap(), 50);
    l.adopt(f64::NAN, 100.0, 0.0, true);
    assert_eq!(l.cap(), 50);
    // A slow start that the member's requests do not fill takes its part, and is
    // over: a later part below it is taken too.
    let mut l = Learner::new(50);
    l.adopt(30.0, 60.0, 0.0, true);
    l.adopt(6.25, 100.0, 0.0, false);
    assert_eq!((l.cap(), l.ceiling()), (6, None));
    l.adopt(3.0, 100.0, 0.0, true);
    assert_eq!(l.cap(), 3);
}

#[test]
fn a_fleet_member_probes_as_rarely_as_one_learner_of_the_whole() {
    let ms = Duration::from_millis(100);
    // Ceiling 25, a probe after 100 successes alone; a part of a quarter of the
    // fleet's cap waits four times as long.
    let mut l = Learner::known(1024, 25);
    l.adopt(25.0, 100.0, 0.0, true);
    for _ in 0..399 {
        assert_eq!(l.success(25, 25, 0, ms), Move::Hold);
    }
    assert_eq!(l.success(25, 25, 0, ms), Move::Grow);
    assert_eq!(l.cap(), 26);
    // Its probe passes: the ceiling is 26.
    l.success(26, 26, 0, ms);
    assert_eq!(l.ceiling(), Some(26));
    // A part taken down leaves more out than the ceiling for a round trip: no
    // probe of its own was out, so that is no pass.
    let mut l = Learner::known(1024, 25);
    l.adopt(20.0, 100.0, 0.0, true);
    assert_eq!(l.cap(), 20);
    l.success(26, 26, 0, ms);
    assert_eq!(l.ceiling(), Some(25));
    // Alone, the same success passes as a probe would.
    let mut alone = Learner::known(1024, 25);
    alone.success(26, 26, 0, ms);
    assert_eq!(alone.ceiling(), Some(26));
}

#[test]
fn why_spells_its_label() {
    assert_eq!(Why::Refused.as_str(), "refused");
    assert_eq!(Why::Latency.as_str(), "latency");
}

#[test]
fn a_success_sent_before_the_last_cut_proves_nothing() {
    let mut l = Learner::new(1000);
    full_successes(&mut l, 8, MS);
    let before = l.epoch();
    l.refused(9, before);
    assert_eq!(l.cap(), 8);
    // Out with the refused one, it came back: the count out over-stated the server's.
    assert_eq!(l.success(10, 12, before, MS), Move::Hold);
    assert_eq!(l.ceiling(), Some(8));
    assert_eq!(l.cap(), 8);
    // Sent since the cut, with 9 out, it is a probe that passed.
    l.success(9, l.cap(), l.epoch(), MS);
    assert_eq!(l.ceiling(), Some(9));
}

#[test]
fn a_success_that_filled_the_cap_it_went_under_grows_though_the_cap_grew_since() {
    let mut l = Learner::new(1000);
    // Four went out together under a cap of 4, the last filling it; answers of
    // those sent after it filled the cap of their time.
    assert_eq!(l.success(4, 4, 0, MS), Move::Grow);
    assert_eq!(l.cap(), 5);
    assert_eq!(l.success(4, 4, 0, MS), Move::Grow);
    assert_eq!(l.success(5, 5, 0, MS), Move::Grow);
    assert_eq!(l.cap(), 7);
    // One that went with more than half the cap to spare proves nothing.
    assert_eq!(l.success(3, 8, 0, MS), Move::Hold);
}

#[test]
fn a_throttle_feeds_the_cap_when_it_says_busy_or_came_with_many_out() {
    use crate::throttle::Signal;
    assert!(feeds_cap(Signal::Busy, false, 1, 8));
    assert!(feeds_cap(Signal::Busy, true, 1, 8));
    for never in [Signal::RateLimit, Signal::Overload, Signal::Partial] {
        assert!(!feeds_cap(never, false, 100, 100));
    }
    // GitHub's secondary limit with 100 out under a cap of 101: the cap's.
    assert!(feeds_cap(Signal::Body, false, 100, 101));
    assert!(feeds_cap(Signal::Status, false, MANY_OUT, 2 * MANY_OUT));
    // Few out, or less than half the cap, or a window spent: the rate's.
    assert!(!feeds_cap(Signal::Status, false, MANY_OUT - 1, MANY_OUT));
    assert!(!feeds_cap(Signal::Status, false, 40, 81));
    assert!(!feeds_cap(Signal::Header, true, 100, 100));
}

#[test]
fn a_known_limit_starts_as_learned_there() {
    let mut l = Learner::known(1000, 100);
    assert_eq!((l.cap(), l.ceiling(), l.is_fresh()), (100, Some(100), true));
    // No slow start: it probes past the limit only after probe_base(100) successes.
    let moves = full_successes(&mut l, 399, MS);
    assert!(moves.iter().all(|m| *m == Move::Hold));
    assert!(!l.is_fresh());
    assert_eq!(l.success(100, 100, l.epoch(), MS), Move::Grow);
    assert_eq!(l.cap(), 101);
    // Refused with 101 out: back to the limit.
    assert_eq!(l.refused(101, l.epoch()), Move::Cut(Why::Refused));
    assert_eq!(l.cap(), 100);
    assert_eq!(Learner::known(50, 100).cap(), 50);
    assert_eq!(Learner::known(50, 0).cap(), 1);
}

#[test]
fn only_github_documents_a_limit_to_start_at() {
    assert_eq!(documented_limit(Preset::GitHub), Some(100));
    for preset in [
        Preset::None,
        Preset::ModelServer,
        Preset::DynamoDb,
        Preset::OpenAi,
    ] {
        assert_eq!(documented_limit(preset), None, "{preset:?}");
    }
}
