//! A member's demand for one lane, from what the sync task samples: arrivals since the
//! last sync and the queue. Pure: the elapsed time comes in.
//!
//! Arrivals alone miss demand a pacer holds back (clients that wait for an answer
//! before sending the next request arrive only as fast as they are served), so the
//! queue adds what it would take to empty it within [`DRAIN`]. A member with requests
//! waiting therefore always asks for more than it has, and a member whose load jumps is
//! seen at once: the rate follows a rise in one sync and a fall over [`MEMORY`].
//!
//! What a demand claims of the fleet rate is bounded by what the member can use: at
//! most [`GROWTH`] times the rate it dispatched at recently ([`Used`]). A member that
//! dispatches nothing claims nothing (it still gets the slot `decide` leaves every
//! member), so entries that only name a huge demand, from a member with a stuck
//! upstream or from anything else writing to the group's keys, cannot starve the
//! members that dispatch; a real member's claim doubles per sync until it has its
//! share.

use std::time::Duration;

/// The time the queue term asks for to empty the queue.
pub const DRAIN: Duration = Duration::from_secs(1);
/// How long a fall in the arrival rate takes to show by about two thirds.
pub const MEMORY: Duration = Duration::from_secs(2);

/// How far a claim may reach beyond the recent dispatch rate: the factor a member's
/// share can grow by per sync.
pub const GROWTH: f64 = 2.0;

/// What a `demand` claims of the fleet rate, given the member's recent dispatch rate
/// `used`: at most [`GROWTH`] times `used`. NaN or negative values claim nothing.
pub fn claim(demand: f64, used: f64) -> f64 {
    let sane = |x: f64| if x.is_nan() { 0.0 } else { x.max(0.0) };
    sane(demand).min(GROWTH * sane(used))
}

/// The dispatch rate a member with `waiting` requests queued reports, given what it
/// measured (`used`) and what the fleet's last decision `allotted` it (at least an
/// equal share, so that the claims do not hold every share where it is): a member
/// with requests waiting takes every slot it is given, so it uses its allotment
/// whatever it measured. One that dispatches once in several seconds reads a spike at each
/// dispatch and almost nothing before the next, and its claim, bounded by that,
/// fell below an equal share between dispatches; a member that had not dispatched
/// yet claimed nothing. The shares of a large fleet then drifted apart: 1,000 members
/// on 100/s in `easeoff simulate` held Jain 0.5, and some sent nothing in 40 s.
/// Reported at half the allotment, so the claim it bounds reaches the allotment
/// ([`GROWTH`] times). What bounds a raise is what got through ([`Used::through`]),
/// which this floor leaves alone.
pub fn queued(used: f64, waiting: usize, allotted: f64) -> f64 {
    if waiting == 0 || !allotted.is_finite() || allotted <= 0.0 {
        return used;
    }
    used.max(allotted / GROWTH)
}

/// The demand a member reports: at least `floor` ([`Demand::floor`]) once the fleet's
/// last decision was `warm` (past a cold start), `demand` as sampled before. During a
/// cold start the shares are equal and read no claims; there the floor slowed 16
/// members with two boto3 writers each (goodput 0.963 to 0.969 in six runs, 0.971 to
/// 0.978 in six without it).
pub fn floored(demand: f64, floor: f64, warm: bool) -> f64 {
    if warm { demand.max(floor) } else { demand }
}

/// A member's entry in the lane's hash after its last-seen time:
/// `<demand> <used> <fingerprint> <through> <tried>` (`fingerprint.rs`, `-` when
/// empty; [`Used::through`], [`Used::tried`]), then `<cap> <want>` when the member
/// shares a learned concurrency cap through the key ([`Capped`]). The later fields
/// come last, so that an entry reads the same to a member that knows only the first
/// three or four.
pub fn entry(
    demand: f64,
    used: f64,
    fingerprint: &str,
    through: f64,
    tried: f64,
    capped: Option<Capped>,
) -> String {
    let fingerprint = if fingerprint.is_empty() {
        "-"
    } else {
        fingerprint
    };
    match capped {
        Some(Capped { cap, want }) => {
            format!("{demand} {used} {fingerprint} {through} {tried} {cap} {want}")
        }
        None => format!("{demand} {used} {fingerprint} {through} {tried}"),
    }
}

/// What a member tells the fleet of the learned concurrency cap it shares.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Capped {
    /// Its cap, unrounded (`concurrency::Learner::limit`).
    pub cap: f64,
    /// The requests it would have out at once: those out and those waiting for a
    /// place, of late.
    pub want: f64,
}

impl Capped {
    /// A member's cap `cap` as the fleet counts it, with its clients wanting `want`
    /// out: as far as they use it. A cap above what they send was never tried, and
    /// added to the others' it would hand them room that the upstream refuses.
    pub fn used(cap: f64, want: f64) -> Self {
        Self {
            cap: cap.min(want),
            want,
        }
    }
}

/// An entry written by [`entry`], read.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Read<'a> {
    /// What its demand claims (`claim`).
    pub claim: f64,
    /// Its recent dispatch rate, which bounds the claim.
    pub used: f64,
    /// What got through of its dispatches of late, per second ([`Used::through`]);
    /// its dispatch rate where the entry does not say.
    pub through: f64,
    /// The attempts its dispatches made of late, per second ([`Used::tried`]); what
    /// got through where the entry does not say (as if none was refused).
    pub tried: f64,
    /// Its fingerprint, empty if none.
    pub fingerprint: &'a str,
    /// Its learned concurrency cap and what it wants out, zero where the entry does
    /// not say.
    pub capped: Capped,
}

/// Reads an entry written by [`entry`]; a missing or unreadable dispatch rate counts
/// as 0 (the entry claims nothing), an unreadable demand as no entry.
pub fn parse(entry: &str) -> Option<Read<'_>> {
    let sane = |x: f64| if x.is_nan() { 0.0 } else { x.max(0.0) };
    let mut parts = entry.split(' ');
    let demand = parts.next()?.parse::<f64>().ok()?;
    let used = sane(
        parts
            .next()
            .and_then(|u| u.parse::<f64>().ok())
            .unwrap_or(0.0),
    );
    let fingerprint = match parts.next() {
        None | Some("-") => "",
        Some(fingerprint) => fingerprint,
    };
    let through = parts
        .next()
        .and_then(|t| t.parse::<f64>().ok())
        .map_or(used, sane);
    let tried = parts
        .next()
        .and_then(|t| t.parse::<f64>().ok())
        .map_or(through, sane);
    let mut finite = || {
        parts
            .next()
            .and_then(|x| x.parse::<f64>().ok())
            .filter(|x| x.is_finite())
            .map_or(0.0, sane)
    };
    let capped = Capped {
        cap: finite(),
        want: finite(),
    };
    Some(Read {
        claim: claim(demand, used),
        used,
        through,
        tried,
        fingerprint,
        capped,
    })
}

/// A lane's recent dispatch rate, from arrivals, the change in its queue and the
/// attempts shed or throttled, and what got through of its attempts, from their
/// answers. While a fleet throttles, the sum of what got through is about the
/// capacity (what the upstream let through), where the members' dispatches may be
/// many times it.
#[derive(Clone, Debug, Default)]
pub struct Used {
    rate: f64,
    waiting: usize,
    through: f64,
    /// Attempts answered or shed, per second, averaged as `through` is.
    attempts: f64,
    /// Seconds of samples the two averages hold since a refusal reset them: until
    /// they span about [`THROUGH_MEMORY`], each is the plain mean of those samples.
    since_reset: Option<f64>,
}

/// How many attempts in [`THROUGH_MEMORY`] make what got through worth reading on
/// its own ([`Used::dense`]).
pub const DENSE: f64 = 2.0;

/// How long a change in what gets through ([`Used::through`]) takes to show by
/// about two thirds, rise or fall alike.
pub const THROUGH_MEMORY: Duration = Duration::from_millis(500);

/// What came of a lane's attempts in one sync, counted as it came: answered as got
/// through, and throttled or shed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Answered {
    /// Attempts whose answer was a success.
    pub through: u64,
    /// Attempts throttled or shed.
    pub refused: u64,
}

impl Used {
    /// The dispatch rate after `arrivals` in `elapsed` with `waiting` queued now and
    /// what came of the attempts (`answered`): what arrived and did not stay queued
    /// left the queue (dispatched, or given up), and what was refused did not get
    /// through.
    pub fn update(
        &mut self,
        arrivals: u64,
        answered: Answered,
        waiting: usize,
        elapsed: Duration,
    ) -> f64 {
        let queued = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        let Answered { through, refused } = answered;
        let attempts = arrivals
            .saturating_add(queued(self.waiting))
            .saturating_sub(queued(waiting));
        let left = attempts.saturating_sub(refused);
        self.waiting = waiting;
        let secs = elapsed.as_secs_f64();
        if secs > 0.0 {
            // A refusal says the upstream was at its capacity in this sync: what got
            // through in it is that capacity's sample, whatever got through before.
            if refused > 0 {
                self.since_reset = Some(0.0);
            }
            // The plain mean of the samples since the reset until they span the
            // memory, then a moving average. The sample with the refusal is chosen
            // for having one, so it reads low; as the first term of a moving average
            // it outweighed the samples after it for a third of a second, members
            // just refused read what got through low together, and the fleet's cut
            // from their sum went to 0.7 of the capacity at times.
            let mut keep = (-secs / THROUGH_MEMORY.as_secs_f64()).exp();
            if let Some(span) = self.since_reset {
                let span = span + secs;
                keep = keep.min(1.0 - secs / span);
                // From a span of the memory on, the moving average weighs the new
                // sample less than the mean would, whatever the sample's length.
                self.since_reset = (span < THROUGH_MEMORY.as_secs_f64()).then_some(span);
            }
            // Both from the answers, as they come: attempts counted as they left the
            // queue beside the refusals answered in the same sync mixed two times,
            // and while the rate moved, the part that got through followed the move,
            // not the upstream (read high while a fleet's rate grew into a table's
            // burst running out, so its cut there came late).
            let tried = through.saturating_add(refused);
            self.attempts = self.attempts * keep + tried as f64 / secs * (1.0 - keep);
            self.through = self.through * keep + through as f64 / secs * (1.0 - keep);
        }
        self.rate = follow(self.rate, left, elapsed);
        self.rate
    }

    /// What got through, per second: a plain moving average over
    /// [`THROUGH_MEMORY`], and after a sync with a refusal the mean of the syncs
    /// since, that one included, until they span the memory. The
    /// fleet sums it to learn what gets through (`learning::cap_raise`), where the
    /// dispatch rate ([`Used::update`]) rises to each sample at once: that read a
    /// member at 6/s (1.5 requests a sync) at about 11/s, and a fleet whose table's
    /// burst ran out read twice what got through and came down over seconds of
    /// throttles. An average, not a count since the lane last reported: a fleet of
    /// 1,000 that each dispatch once in 10 s summed such counts to a fifth of its
    /// rate at times, and cut to it.
    pub fn through(&self) -> f64 {
        self.through
    }

    /// The attempts answered or shed, per second, averaged and reset as
    /// [`Used::through`] is: the fleet's sum of what got through over its sum of
    /// this is the part of its attempts the upstream let through, which does not
    /// lag a rate that grows as each sum does (`learning::capacity`).
    pub fn tried(&self) -> f64 {
        self.attempts
    }

    /// Whether the lane made [`DENSE`] attempts or more in [`THROUGH_MEMORY`] of
    /// late, so that what got through of them says something on its own.
    pub fn dense(&self) -> bool {
        self.attempts * THROUGH_MEMORY.as_secs_f64() >= DENSE
    }
}

/// A rate after `events` in `elapsed`: rising at once, falling over [`MEMORY`].
fn follow(rate: f64, events: u64, elapsed: Duration) -> f64 {
    let secs = elapsed.as_secs_f64();
    if secs <= 0.0 {
        return rate;
    }
    smooth(rate, events as f64 / secs, elapsed)
}

/// A level after a `sample` taken `elapsed` after the last: rising to it at once,
/// falling to it over [`MEMORY`].
fn smooth(level: f64, sample: f64, elapsed: Duration) -> f64 {
    let keep = (-elapsed.as_secs_f64() / MEMORY.as_secs_f64()).exp();
    sample.max(level * keep + sample * (1.0 - keep))
}

/// One lane's demand estimate.
#[derive(Clone, Debug, Default)]
pub struct Demand {
    /// Arrivals per second, rising at once and falling slowly.
    rate: f64,
    /// Whether requests were waiting, rising to 1 at once and falling over [`MEMORY`]
    /// ([`Demand::floor`]): a client that sends its next request when the last is
    /// answered leaves the queue empty while one is in flight, and a sync that came
    /// then read no demand but the arrival rate, which for a member that dispatches
    /// once in ten seconds is almost nothing (about 0.03/s against an equal share of
    /// 0.093/s). Its claim fell, its share with it, and its next request expected a
    /// slot past `max_wait` and was shed at once (1,000 members on 100/s in
    /// `easeoff simulate`). A floor of one request, not a term: a queue that
    /// drains shows at once, and a member whose arrivals already say what it wants (a
    /// light client at a steady rate) claims no more than before.
    busy: f64,
}

impl Demand {
    /// The demand in requests per second after `arrivals` in `elapsed` with `waiting`
    /// requests queued now.
    pub fn update(&mut self, arrivals: u64, waiting: usize, elapsed: Duration) -> f64 {
        self.rate = follow(self.rate, arrivals, elapsed);
        let busy = if waiting > 0 { 1.0 } else { 0.0 };
        self.busy = smooth(self.busy, busy, elapsed);
        self.rate + waiting as f64 / DRAIN.as_secs_f64()
    }

    /// The least demand of a member whose queue held a request a moment ago: one
    /// request per [`DRAIN`], fading over [`MEMORY`] once the queue stays empty.
    pub fn floor(&self) -> f64 {
        self.busy / DRAIN.as_secs_f64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SYNC: Duration = Duration::from_millis(250);

    fn ans(through: u64, refused: u64) -> Answered {
        Answered { through, refused }
    }

    #[test]
    fn the_floor_holds_past_a_cold_start_only() {
        assert_eq!(floored(0.03, 0.9, true), 0.9);
        assert_eq!(floored(3.0, 0.9, true), 3.0);
        assert_eq!(floored(0.03, 0.9, false), 0.03);
    }

    #[test]
    fn a_rise_shows_in_one_sync_and_the_queue_adds_what_empties_it_in_a_second() {
        let mut d = Demand::default();
        assert_eq!(d.update(0, 0, SYNC), 0.0);
        assert_eq!(d.update(25, 0, SYNC), 100.0);
        assert_eq!(d.update(25, 16, SYNC), 116.0);
    }

    #[test]
    fn a_queue_read_empty_for_a_sync_keeps_a_floor_of_most_of_one_request() {
        let keep = (-0.125f64).exp();
        let mut d = Demand::default();
        assert_eq!(d.update(0, 1, SYNC), 1.0);
        assert_eq!(d.floor(), 1.0);
        // The one request in flight: the queue reads empty, the floor falls slowly.
        assert_eq!(d.update(0, 0, SYNC), 0.0);
        assert!((d.floor() - keep).abs() < 1e-9);
        // A queue that drains shows at once; the floor stands for one request at most.
        assert_eq!(d.update(0, 1000, SYNC), 1000.0);
        assert_eq!(d.update(0, 5, SYNC), 5.0);
        assert_eq!(d.floor(), 1.0);
    }

    #[test]
    fn a_fall_decays_over_the_memory() {
        let mut d = Demand::default();
        d.update(25, 0, SYNC);
        let after_one = d.update(0, 0, SYNC);
        assert!((after_one - 100.0 * (-0.125f64).exp()).abs() < 1e-9);
        let mut last = after_one;
        for _ in 0..40 {
            last = d.update(0, 0, SYNC);
        }
        assert!(last < 1.0, "{last}");
    }

    #[test]
    fn a_claim_reaches_at_most_growth_times_the_dispatch_rate() {
        assert_eq!(claim(1e9, 0.0), 0.0);
        assert_eq!(claim(1e9, 30.0), 60.0);
        assert_eq!(claim(40.0, 30.0), 40.0);
        assert_eq!(claim(f64::INFINITY, 5.0), 10.0);
        assert_eq!(claim(f64::NAN, 5.0), 0.0);
        assert_eq!(claim(10.0, f64::NAN), 0.0);
        assert_eq!(claim(-1.0, 5.0), 0.0);
    }

    #[test]
    fn an_entry_reads_back_as_its_claim_and_one_without_dispatches_claims_nothing() {
        let read = |claim, used, through, tried, fingerprint| {
            Some(Read {
                claim,
                used,
                through,
                tried,
                fingerprint,
                capped: Capped::default(),
            })
        };
        assert_eq!(
            parse(&entry(100.0, 12.5, "", 6.0, 9.0, None)),
            read(25.0, 12.5, 6.0, 9.0, "")
        );
        assert_eq!(
            parse(&entry(0.1, 12.5, "00ff", 6.0, 9.0, None)),
            read(0.1, 12.5, 6.0, 9.0, "00ff")
        );
        // A member that shares a learned cap says it and what it wants out; an
        // unreadable or infinite one counts as none.
        let capped = Capped {
            cap: 25.5,
            want: 40.0,
        };
        assert_eq!(
            parse(&entry(0.1, 12.5, "00ff", 6.0, 9.0, Some(capped))),
            read(0.1, 12.5, 6.0, 9.0, "00ff").map(|r| Read { capped, ..r })
        );
        assert_eq!(
            parse("5 3 - 1 1 inf x").map(|r| r.capped),
            Some(Capped::default())
        );
        // An entry that does not say what got through: its dispatch rate; one that
        // does not say what it tried: what got through.
        assert_eq!(parse("0.1 12.5 00ff"), read(0.1, 12.5, 12.5, 12.5, "00ff"));
        assert_eq!(parse("0.1 12.5 00ff 6"), read(0.1, 12.5, 6.0, 6.0, "00ff"));
        assert_eq!(parse("1000000000"), read(0.0, 0.0, 0.0, 0.0, ""));
        assert_eq!(parse("1e9 x"), read(0.0, 0.0, 0.0, 0.0, ""));
        assert_eq!(parse("5 -3"), read(0.0, 0.0, 0.0, 0.0, ""));
        assert_eq!(parse("5 3 - -1"), read(5.0, 3.0, 0.0, 0.0, ""));
        assert_eq!(parse("5 3 - 1 NaN"), read(5.0, 3.0, 1.0, 0.0, ""));
        assert_eq!(parse("x 5"), None);
        assert_eq!(
            parse("inf inf ab inf"),
            read(
                f64::INFINITY,
                f64::INFINITY,
                f64::INFINITY,
                f64::INFINITY,
                "ab"
            )
        );
    }

    #[test]
    fn the_dispatch_rate_counts_what_left_the_queue() {
        let mut u = Used::default();
        // 25 arrive, 5 stay queued: 20 left in a quarter second.
        assert_eq!(u.update(25, ans(20, 0), 5, SYNC), 80.0);
        // None arrive, the queue empties: 5 left.
        let after = u.update(0, ans(5, 0), 0, SYNC);
        let keep = (-0.125f64).exp();
        assert!((after - (80.0 * keep + 20.0 * (1.0 - keep))).abs() < 1e-9);
        // A queue that only grows dispatched nothing.
        let mut stuck = Used::default();
        assert_eq!(stuck.update(25, ans(0, 0), 25, SYNC), 0.0);
        assert_eq!(stuck.update(25, ans(0, 0), 50, SYNC), 0.0);
    }

    #[test]
    fn what_got_through_is_an_unbiased_average_reset_by_a_refusal() {
        let keep = (-0.5f64).exp();
        // 0, 1, 2, 3 requests in turn (6/s): the average settles about 6/s, where
        // the dispatch rate reads more.
        let mut u = Used::default();
        let (mut sum, mut rate) = (0.0, 0.0);
        for n in 0..400u64 {
            rate = u.update(n % 4, ans(n % 4, 0), 0, SYNC);
            if n >= 200 {
                sum += u.through();
            }
        }
        assert!((sum / 200.0 - 6.0).abs() < 0.1, "{}", sum / 200.0);
        assert!(rate > 9.0, "{rate}");
        // From 200/s to 100/s: within a tenth of 100/s after four syncs (a second).
        let mut u = Used::default();
        for _ in 0..40 {
            u.update(50, ans(50, 0), 0, SYNC);
        }
        for _ in 0..4 {
            u.update(25, ans(25, 0), 0, SYNC);
        }
        assert!(
            u.through() > 100.0 && u.through() < 115.0,
            "{}",
            u.through()
        );
        // 8 attempts, 6 throttled: 2 got through in a quarter second, whatever
        // got through before; then the mean of the syncs since, until they span
        // the memory; then an average again.
        u.update(8, ans(2, 6), 0, SYNC);
        assert_eq!((u.through(), u.tried()), (8.0, 32.0));
        u.update(5, ans(5, 0), 0, SYNC);
        assert_eq!((u.through(), u.tried()), (14.0, 26.0));
        u.update(5, ans(5, 0), 0, SYNC);
        assert!((u.through() - (14.0 * keep + 20.0 * (1.0 - keep))).abs() < 1e-9);
        assert!((u.tried() - (26.0 * keep + 20.0 * (1.0 - keep))).abs() < 1e-9);
    }

    #[test]
    fn a_lane_is_dense_from_two_attempts_in_half_a_second() {
        // 6/s (1 and 2 a sync in turn): 3 in half a second.
        let mut u = Used::default();
        for n in 0..40u64 {
            u.update(1 + n % 2, ans(1 + n % 2, 0), 0, SYNC);
        }
        assert!(u.dense());
        // 3.6/s: not; nor a member that sends once in 10 s, just after it sent.
        let mut sparse = Used::default();
        for n in 0..400u64 {
            let sent = u64::from(n % 10 != 0);
            sparse.update(sent, ans(sent, 0), 0, SYNC);
        }
        assert!(!sparse.dense());
        let mut once = Used::default();
        once.update(1, ans(1, 0), 0, SYNC);
        assert!(!once.dense());
        // Refused attempts count: they were made.
        let mut refused = Used::default();
        for _ in 0..40 {
            refused.update(2, ans(0, 2), 0, SYNC);
        }
        assert!(refused.dense());
    }

    #[test]
    fn what_got_through_counts_answers_as_they_come() {
        // 10 attempts leave the queue in one sync and are answered in the next,
        // 4 got through and 6 throttled: the part that got through is 0.4 of the
        // answered ones. Counted as the attempts left the queue, the first sync
        // read 10 got through, and the second read nothing tried.
        let mut u = Used::default();
        u.update(10, ans(0, 0), 0, SYNC);
        assert_eq!((u.through(), u.tried()), (0.0, 0.0));
        u.update(0, ans(4, 6), 0, SYNC);
        assert_eq!((u.through(), u.tried()), (16.0, 40.0));
        // An attempt with no answer (its connection failed) is neither.
        let mut lost = Used::default();
        lost.update(3, ans(0, 0), 0, SYNC);
        assert_eq!((lost.through(), lost.tried()), (0.0, 0.0));
    }

    #[test]
    fn shed_or_throttled_attempts_do_not_count_as_dispatched() {
        let mut u = Used::default();
        // 100 attempts in a quarter second, 75 shed or throttled: 25 got through.
        assert_eq!(u.update(100, ans(25, 75), 0, SYNC), 100.0);
        // More refusals than arrivals (answers to earlier attempts): none.
        let mut storm = Used::default();
        assert_eq!(storm.update(10, ans(0, 40), 0, SYNC), 0.0);
    }

    #[test]
    fn a_member_with_requests_waiting_reports_at_least_half_its_allotment() {
        // Once in 10 s at 0.1/s: measured almost nothing since its last dispatch.
        assert_eq!(queued(0.01, 3, 0.1), 0.05);
        assert_eq!(claim(1.0, queued(0.01, 3, 0.1)), 0.1);
        // More measured, or nothing waiting: what it measured.
        assert_eq!(queued(4.0, 3, 0.1), 4.0);
        assert_eq!(queued(0.01, 0, 0.1), 0.01);
        // No allotment (yet), or nonsense: what it measured.
        assert_eq!(queued(0.01, 3, 0.0), 0.01);
        assert_eq!(queued(0.01, 3, f64::NAN), 0.01);
        assert_eq!(queued(0.01, 3, f64::INFINITY), 0.01);
    }

    #[test]
    fn no_time_passed_keeps_the_rate() {
        let mut d = Demand::default();
        d.update(10, 0, SYNC);
        assert_eq!(d.update(99, 2, Duration::ZERO), 42.0);
    }
}
