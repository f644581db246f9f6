//! Which lanes a sync round sends to Redis. Pure: the lane's state and ages come in.
//!
//! A lane is sent when the fleet needs to hear from it or it needs to hear from the
//! fleet: it carries demand (arrivals since the last round, or requests waiting), its
//! demand, dispatch rate or what got through moved by more than [`DRIFT`] from what
//! its entry says, it has something new to propose (another interval or epoch, or a
//! raise), it is coming back from going on alone, or its entry would reach its
//! refresh age before the next round: between three eighths and half the member TTL, by a fraction fixed per lane
//! ([`Lane::spread`]), so lanes that first synced together (a member starting with
//! thousands) do not all refresh in the same round ever after. Every other lane is idle and skips the round: its entry in Redis
//! already says what it would write again, and the refresh keeps the entry counted
//! (members count while seen within `member_ttl`) for as long as the lane lives. Most
//! of a member's lanes are idle at any moment when it has thousands, and an idle lane
//! then costs Redis one script call per half member TTL instead of one per sync.

use std::time::Duration;

use super::demand::Capped;

/// How far a lane's demand or dispatch rate may move from what its entry says
/// before the lane reports it: by a factor of two either way.
pub const DRIFT: f64 = 2.0;
/// A demand or dispatch rate below this (requests per second) is reported as none:
/// a rate that decays towards 0 would otherwise halve, and be reported, forever.
pub const FLOOR: f64 = 0.01;

/// What this member last wrote for a lane, or would write now.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Entry {
    /// The demand, requests per second.
    pub demand: f64,
    /// The recent dispatch rate, requests per second.
    pub used: f64,
    /// What got through recently, per second (`demand::Used::through`).
    pub through: f64,
    /// The attempts made recently, per second (`demand::Used::tried`).
    pub tried: f64,
    /// The proposal's interval (µs) and epoch, `None` before the lane learned any.
    pub proposal: Option<(u64, u64)>,
    /// The learned concurrency cap shared through the lane's key, if one is.
    pub capped: Option<Capped>,
}

/// A lane's state at a round, for [`due`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Lane {
    /// What the last answered sync wrote; `None` before the first answer.
    pub reported: Option<Entry>,
    /// What a sync would write now.
    pub now: Entry,
    /// Arrivals since the last round, or requests waiting now.
    pub busy: bool,
    /// A raise waits to be reported.
    pub raised: bool,
    /// The lane runs on its own (its key failed, or it is back from going on alone
    /// and holds its share down): it syncs in every round with room.
    pub rejoining: bool,
    /// Time since the lane's last answered sync.
    pub since: Duration,
    /// Where in [0, 1) the lane's refresh age lies between three eighths of the
    /// member TTL (0) and half of it (1).
    pub spread: f64,
}

/// At least this many lanes a round may sync only because they are new or need a
/// refresh ([`spare`]).
pub const SPARE_MIN: usize = 1024;

/// Whether `lane` syncs in this round, given the rounds' `sync_interval` and the
/// fleet's `member_ttl`: it is [`urgent`], new, or needs a refresh.
pub fn due(lane: &Lane, sync_interval: Duration, member_ttl: Duration) -> bool {
    urgent(lane)
        || lane.rejoining
        || refresh(lane, sync_interval, member_ttl)
        || lane.reported.is_none_or(|reported| {
            drifted(reported.demand, lane.now.demand)
                || drifted(reported.used, lane.now.used)
                || drifted(reported.through, lane.now.through)
        })
}

/// Whether the fleet must hear from `lane` now: it carries demand, its demand or
/// dispatch rate rose, or it has something new to propose. Every other due lane (new,
/// coming back, refreshing, or with a rate that fell) may wait for a round with room
/// ([`spare`], [`room`]): thousands of idle lanes back from going on alone rejoin
/// over a few rounds that each fit their interval, not in one that times out, sends
/// them all alone again and leaves them all to the next; and the thousands of lanes
/// whose demand decays after a request or two (random tables) report it as room allows.
pub fn urgent(lane: &Lane) -> bool {
    let Some(reported) = lane.reported else {
        return lane.busy || lane.raised;
    };
    lane.busy
        || lane.raised
        || reported.proposal != lane.now.proposal
        || rose(reported.demand, lane.now.demand)
        || rose(reported.used, lane.now.used)
}

/// How many lanes, of a member's `lanes`, one round syncs only because they are new
/// or need a refresh: enough to refresh them all every quarter member TTL (more than
/// their refresh ages ask), at least [`SPARE_MIN`]. A member starting with thousands
/// of idle lanes so syncs them over a few rounds that each fit their interval, rather
/// than in one round that times out, fails, and leaves them all to the next.
pub fn spare(lanes: usize, sync_interval: Duration, member_ttl: Duration) -> usize {
    let rounds = (member_ttl / 4).as_nanos() / sync_interval.as_nanos().max(1);
    let rounds = usize::try_from(rounds).unwrap_or(usize::MAX).max(1);
    lanes.div_ceil(rounds).max(SPARE_MIN)
}

/// The fewest lanes [`room`] leaves a round beyond the urgent ones.
pub const ROOM_MIN: usize = 64;

/// How many lanes the next round may sync beyond the urgent ones, from `room` after a
/// round that took `took` (a timed-out round took its whole interval), at most `most`
/// ([`spare`]): halved after a round that took more than half its interval, grown by
/// a quarter after one that took less than a quarter. A member whose rounds run short
/// of CPU (or of Redis) so spreads its new, returning and refreshing lanes over more
/// rounds instead of timing out round after round; if it cannot refresh them all
/// within the member TTL, the idle ones it misses count as absent until it does.
pub fn room(room: usize, took: Duration, sync_interval: Duration, most: usize) -> usize {
    let room = room.min(most);
    if took * 2 > sync_interval {
        (room / 2).max(ROOM_MIN)
    } else if took * 4 < sync_interval {
        room.saturating_add(room / 4).max(ROOM_MIN).min(most)
    } else {
        room
    }
}

/// Whether an idle lane's entry needs writing again.
fn refresh(lane: &Lane, sync_interval: Duration, member_ttl: Duration) -> bool {
    // Skipping now must not leave the entry older than its refresh age (at most
    // half the TTL) at the next round: a round late by a whole interval still
    // finds it counted.
    lane.since + sync_interval >= refresh_age(member_ttl, lane.spread)
}

/// The age at which a lane's entry is written again though the lane is idle: from
/// three eighths of `member_ttl` to half of it as `spread` goes from 0 to 1.
pub fn refresh_age(member_ttl: Duration, spread: f64) -> Duration {
    let spread = if spread.is_finite() {
        spread.clamp(0.0, 1.0)
    } else {
        1.0
    };
    member_ttl / 2 - (member_ttl / 8).mul_f64(1.0 - spread)
}

/// A lane's [`Lane::spread`], fixed by its key so it does not change between rounds.
pub fn spread(key: &str) -> f64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::hash::DefaultHasher::new();
    key.hash(&mut hasher);
    (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// Whether a rate moved from `was` to `now` by more than [`DRIFT`], ignoring rates
/// under [`FLOOR`].
fn drifted(was: f64, now: f64) -> bool {
    let (was, now) = (floored(was), floored(now));
    if was == 0.0 || now == 0.0 {
        return was != now;
    }
    now > was * DRIFT || now * DRIFT < was
}

/// Whether a rate rose from `was` to `now` by more than [`DRIFT`] ([`drifted`] upwards).
fn rose(was: f64, now: f64) -> bool {
    drifted(was, now) && floored(now) > floored(was)
}

fn floored(x: f64) -> f64 {
    if x.is_finite() && x >= FLOOR { x } else { 0.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SYNC: Duration = Duration::from_millis(250);
    const TTL: Duration = Duration::from_secs(5);

    fn entry(demand: f64, used: f64) -> Entry {
        Entry {
            demand,
            used,
            through: used,
            tried: used,
            proposal: Some((10_000, 3)),
            capped: None,
        }
    }

    /// An idle lane whose entry says what it would write, synced 1 s ago.
    fn idle() -> Lane {
        Lane {
            reported: Some(entry(4.0, 2.0)),
            now: entry(4.0, 2.0),
            since: Duration::from_secs(1),
            spread: 1.0,
            ..Lane::default()
        }
    }

    #[test]
    fn an_idle_lane_skips_the_round() {
        assert!(!due(&idle(), SYNC, TTL));
    }

    #[test]
    fn a_lane_never_answered_syncs() {
        let lane = Lane {
            reported: None,
            ..idle()
        };
        assert!(due(&lane, SYNC, TTL));
    }

    #[test]
    fn demand_a_raise_or_a_rejoin_makes_a_lane_sync() {
        assert!(due(
            &Lane {
                busy: true,
                ..idle()
            },
            SYNC,
            TTL
        ));
        assert!(due(
            &Lane {
                raised: true,
                ..idle()
            },
            SYNC,
            TTL
        ));
        let rejoining = Lane {
            rejoining: true,
            ..idle()
        };
        assert!(due(&rejoining, SYNC, TTL));
    }

    #[test]
    fn a_new_interval_or_epoch_makes_a_lane_sync() {
        for proposal in [Some((9_000, 3)), Some((10_000, 4)), None] {
            let lane = Lane {
                now: Entry {
                    proposal,
                    ..entry(4.0, 2.0)
                },
                ..idle()
            };
            assert!(due(&lane, SYNC, TTL), "{proposal:?}");
        }
    }

    /// The refresh: at 2.25 s after the last answer the next round (2.5 s) would find
    /// the entry at half the 5 s TTL, so the lane syncs now; a round earlier it skips.
    #[test]
    fn a_lane_syncs_before_its_entry_is_half_the_member_ttl_old() {
        let at = |ms| Lane {
            since: Duration::from_millis(ms),
            ..idle()
        };
        assert!(!due(&at(2_249), SYNC, TTL));
        assert!(due(&at(2_250), SYNC, TTL));
        // The shortest TTL config allows (twice the interval): every round.
        assert!(due(&at(0), SYNC, SYNC * 2));
        // Spread 0: three eighths of the TTL, 1.875 s.
        let early = |ms| Lane {
            spread: 0.0,
            ..at(ms)
        };
        assert!(!due(&early(1_624), SYNC, TTL));
        assert!(due(&early(1_625), SYNC, TTL));
    }

    #[test]
    fn only_demand_or_news_is_urgent() {
        assert!(!urgent(&idle()));
        assert!(urgent(&Lane {
            busy: true,
            ..idle()
        }));
        let new = Lane {
            reported: None,
            ..idle()
        };
        assert!(!urgent(&new));
        assert!(urgent(&Lane { busy: true, ..new }));
        let old = Lane {
            since: Duration::from_secs(3),
            ..idle()
        };
        assert!(!urgent(&old) && due(&old, SYNC, TTL));
        let rate = |was, now| Lane {
            reported: Some(entry(was, 0.0)),
            now: entry(now, 0.0),
            ..idle()
        };
        assert!(urgent(&rate(1.0, 2.5)) && urgent(&rate(0.0, 1.0)));
        assert!(!urgent(&rate(2.5, 1.0)) && due(&rate(2.5, 1.0), SYNC, TTL));
        assert!(!urgent(&rate(1.0, 0.0)) && due(&rate(1.0, 0.0), SYNC, TTL));
        let back = Lane {
            rejoining: true,
            ..idle()
        };
        assert!(!urgent(&back) && due(&back, SYNC, TTL));
    }

    #[test]
    fn a_slow_round_halves_the_room_and_a_quick_one_grows_it_back() {
        let ms = Duration::from_millis;
        assert_eq!(room(usize::MAX, ms(50), SYNC, 6_000), 6_000);
        assert_eq!(room(6_000, ms(250), SYNC, 6_000), 3_000);
        assert_eq!(room(3_000, ms(100), SYNC, 6_000), 3_000);
        assert_eq!(room(3_000, ms(50), SYNC, 6_000), 3_750);
        assert_eq!(room(100, ms(300), SYNC, 6_000), ROOM_MIN);
        assert_eq!(room(ROOM_MIN, ms(10), SYNC, 50), 50);
    }

    /// 30,000 lanes, 250 ms rounds, a 5 s TTL: 6,000 a round, so all in five rounds;
    /// few lanes still get [`SPARE_MIN`]; a TTL under four rounds, all lanes.
    #[test]
    fn a_round_has_room_to_refresh_every_lane_in_a_quarter_ttl() {
        assert_eq!(spare(30_000, SYNC, TTL), 6_000);
        assert_eq!(spare(50, SYNC, TTL), SPARE_MIN);
        assert_eq!(spare(100_000, SYNC, SYNC * 2), 100_000);
    }

    #[test]
    fn refresh_ages_lie_between_three_eighths_and_half_the_ttl() {
        assert_eq!(refresh_age(TTL, 0.5), Duration::from_micros(2_187_500));
        assert_eq!(refresh_age(TTL, -3.0), Duration::from_millis(1_875));
        assert_eq!(refresh_age(TTL, f64::NAN), Duration::from_millis(2_500));
        let spreads: Vec<f64> = (0..1000).map(|i| spread(&format!("t{i}"))).collect();
        assert!(spreads.iter().all(|s| (0.0..1.0).contains(s)));
        let low = spreads.iter().filter(|s| **s < 0.5).count();
        assert!((400..600).contains(&low), "{low}");
        assert_eq!(spread("t1"), spread("t1"));
    }

    #[test]
    fn a_rate_that_halves_or_doubles_is_reported() {
        let now = |demand, used| Lane {
            now: entry(demand, used),
            ..idle()
        };
        assert!(!due(&now(2.01, 1.01), SYNC, TTL));
        assert!(!due(&now(8.0, 4.0), SYNC, TTL));
        assert!(due(&now(1.99, 2.0), SYNC, TTL));
        assert!(due(&now(4.0, 4.01), SYNC, TTL));
    }

    /// A rate decaying towards 0 is reported once it is under the floor, then never
    /// again; NaN counts as none.
    #[test]
    fn rates_under_the_floor_count_as_none() {
        let lane = |was, now| Lane {
            reported: Some(entry(was, 0.0)),
            now: entry(now, 0.0),
            ..idle()
        };
        assert!(due(&lane(0.015, 0.009), SYNC, TTL));
        assert!(!due(&lane(0.009, 0.000_01), SYNC, TTL));
        assert!(!due(&lane(0.0, f64::NAN), SYNC, TTL));
        assert!(due(&lane(0.0, 0.02), SYNC, TTL));
    }
}
