//! What to do with a rate-limit window an answer states: use it, do not ration it.
//! While more than a small reserve is left, requests go at the client's own speed;
//! only the reserve (a few percent, and at least the requests in flight) is spread
//! until the reset, so the window never runs dry with requests in flight. A bucket
//! that refills continuously (OpenAI's, Anthropic's, Shopify's) is then paced at its
//! refill rate (slower while it holds less than the requests out, to win that back). A spent window sends
//! nothing that must fail: callers wait for the reset; a spent bucket that refills
//! holds the next request long before its reset (when it is full), so it is paced
//! below its refill rate instead. Where others share the quota (one key behind many pods), the remaining
//! falls faster than this sidecar's own use: it is counted in this sidecar's requests
//! by the observed fall per answer. `quota = "smooth"` spreads the whole window evenly
//! instead. Pure: numbers in, a [`Decision`] out.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use crate::hints::Quota;

crate::spelled::spelled! {
    fn name;
    /// How a window is spent (config `quota`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Spend {
        /// At the client's speed, spreading only the reserve.
        Use = "use",
        /// The whole window spread evenly until its reset: steady service over speed.
        Smooth = "smooth",
    }
}

/// The share of a window's limit kept back as the reserve.
pub const RESERVE_SHARE: f64 = 0.05;

/// What the window asks of the lane.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Decision {
    /// Send at the client's speed.
    Go,
    /// Keep dispatches `spacing` apart for `until` from now.
    Pace { spacing: Duration, until: Duration },
    /// Send nothing for `until` from now.
    Pause { until: Duration },
}

/// The decision on `window`, with `in_flight` requests out and `fall` units of it
/// used per answer this sidecar sees (1 when alone on a request window; more when
/// others share it; for a token window, tokens per request).
pub fn decide(spend: Spend, window: Quota, in_flight: u64, fall: f64) -> Decision {
    decide_queued(spend, window, (in_flight, 0), fall)
}

/// [`decide`] for a lane that also has `queued` units waiting (`out`: in flight and
/// queued, in the window's units): released together they would land on the window
/// at once, so they count in the reserve that lets requests go at the client's
/// speed; paced, they go one by one, so only those in flight count in what a low
/// bucket wins back.
pub fn decide_queued(spend: Spend, window: Quota, out: (u64, u64), fall: f64) -> Decision {
    let (in_flight, queued) = out;
    let until = window.reset;
    if until.is_zero() {
        return Decision::Go;
    }
    let fall = if fall.is_finite() { fall.max(1.0) } else { 1.0 };
    // This sidecar's requests the window still holds.
    let ours = window.remaining as f64 / fall;
    // `until` is a header's, so as large as it said: divided as a float, never
    // past what a `Duration` holds (a count below 1 would stretch it).
    let spread = |count: f64| Decision::Pace {
        spacing: Duration::try_from_secs_f64(until.as_secs_f64() / count.max(1.0))
            .map_or(until, |spacing| spacing.min(until)),
        until,
    };
    // What refills in `until` is what was used: in this sidecar's requests.
    let refill = match window.limit {
        Some(limit) if window.refills && limit > window.remaining => {
            Some((limit - window.remaining) as f64 / fall)
        }
        _ => None,
    };
    if ours < 1.0 {
        // A bucket that refills holds the next request long before it is full again
        // (its reset): pace at the refill rate, slowed to win back a reserve.
        return match refill {
            Some(refill) => spread(refill * REFILL_SHARE_WHEN_LOW),
            None => Decision::Pause { until },
        };
    }
    if spend == Spend::Smooth {
        return spread(ours);
    }
    let limit = window.limit.map_or(0.0, |l| l as f64 / fall);
    let reserve = (RESERVE_SHARE * limit)
        .ceil()
        .max(in_flight.saturating_add(queued) as f64 + 1.0);
    if ours > reserve {
        return Decision::Go;
    }
    match refill {
        // Holding less than the requests out and the next, slower than the refill
        // until it holds them again: at exactly the refill rate with nothing in hand,
        // every early dispatch would be refused. Only that much is won back: the
        // steady state of a client that asks for more than the bucket gives is at
        // the refill rate, not a share of it (a reserve of 5 % of a minute's limit
        // took 15 s to win back at 90 %).
        Some(refill) if ours < in_flight as f64 + 1.0 => spread(refill * REFILL_SHARE_WHEN_LOW),
        Some(refill) => spread(refill),
        None => spread(ours),
    }
}

/// The share of a low bucket's refill rate used while it wins back the requests out.
pub const REFILL_SHARE_WHEN_LOW: f64 = 0.9;

/// The stricter of two decisions: a pause over a pace, the wider spacing, a go last.
pub fn stricter(a: Decision, b: Decision) -> Decision {
    use Decision::{Go, Pace, Pause};
    match (a, b) {
        (Pause { until: x }, Pause { until: y }) => Pause { until: x.max(y) },
        (Pause { .. }, _) | (Go, _) => {
            if a == Go {
                b
            } else {
                a
            }
        }
        (_, Pause { .. }) => b,
        (Pace { spacing: x, .. }, Pace { spacing: y, .. }) => {
            if y > x {
                b
            } else {
                a
            }
        }
        (Pace { .. }, Go) => a,
    }
}

/// A lane's learned falls: of its request window, and of its token window per request.
#[derive(Debug, Default)]
pub struct Falls {
    pub requests: Fall,
    pub tokens: Fall,
}

/// How fast a window's remaining falls per answer, learned from consecutive answers
/// as a moving average of signed samples. Answers overtake each other (several are
/// in flight), so one may show more left than the one before: that rise counts
/// against the falls around it, and the average of a run of answers is the fall
/// over the run, whatever their order (counting only the falls read 2.3 where each
/// answer took 1, with four in flight). A bucket that refills gains between two
/// answers what it refills in the time between them; that is added back, or a
/// bucket paced at its refill rate would seem not to fall at all. A new window (a
/// rise whose reset moved later than the answers' order explains) teaches nothing.
/// Lock-free: every answer with a rate-limit header passes here; an answer that
/// slips between another's stores only blurs one sample of the average.
#[derive(Debug)]
pub struct Fall {
    last: AtomicU64,
    /// Nanoseconds since the lane's origin of the `last` answer.
    last_at: AtomicU64,
    /// The `last` answer's reset, in nanoseconds.
    last_reset: AtomicU64,
    /// f64 bits; NaN until a first sample.
    average: AtomicU64,
}

/// How much later a window's reset may read between two answers of one window: a
/// reset in whole seconds moves by up to one as the clock turns.
const NEW_WINDOW_SLACK: Duration = Duration::from_secs(1);

impl Default for Fall {
    fn default() -> Fall {
        Fall {
            last: AtomicU64::new(u64::MAX),
            last_at: AtomicU64::new(0),
            last_reset: AtomicU64::new(0),
            average: AtomicU64::new(f64::NAN.to_bits()),
        }
    }
}

impl Fall {
    /// Takes one answer's `window`, seen `at` (since a fixed origin); returns the
    /// average fall per answer so far, or `unknown` before a positive one.
    pub fn observe(&self, window: Quota, at: Duration, unknown: f64) -> f64 {
        let remaining = window.remaining;
        let at_ns = u64::try_from(at.as_nanos()).unwrap_or(u64::MAX);
        let reset_ns = u64::try_from(window.reset.as_nanos()).unwrap_or(u64::MAX);
        let last = self.last.swap(remaining, Relaxed);
        let last_at = self.last_at.swap(at_ns, Relaxed);
        let last_reset = self.last_reset.swap(reset_ns, Relaxed);
        let average = f64::from_bits(self.average.load(Relaxed));
        let known = |average: f64| if average > 0.0 { average } else { unknown };
        if last == u64::MAX {
            return known(average);
        }
        let sample = last as f64 - remaining as f64 + refilled(window, last, at_ns, last_at);
        let slack = u64::try_from(NEW_WINDOW_SLACK.as_nanos()).unwrap_or(u64::MAX);
        let new_window = !window.refills && reset_ns > last_reset.saturating_add(slack);
        if sample < 0.0 && new_window {
            return known(average);
        }
        let next = if average.is_nan() {
            sample
        } else {
            0.8 * average + 0.2 * sample
        };
        self.average.store(next.to_bits(), Relaxed);
        known(next)
    }
}

/// What a refilling `window` regained between an answer that left `last` at `last_at`
/// and this one at `at` (nanoseconds): its refill rate for the time between, up to
/// its limit; nothing for a window that does not refill.
fn refilled(window: Quota, last: u64, at: u64, last_at: u64) -> f64 {
    match window.limit {
        Some(limit) if window.refills && limit > window.remaining && !window.reset.is_zero() => {
            let rate = (limit - window.remaining) as f64 / window.reset.as_secs_f64();
            let between = at.saturating_sub(last_at) as f64 / 1e9;
            (rate * between).min(limit.saturating_sub(last) as f64)
        }
        _ => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(remaining: u64, reset_s: u64, limit: Option<u64>, refills: bool) -> Quota {
        Quota {
            remaining,
            reset: Duration::from_secs(reset_s),
            limit,
            refills,
        }
    }

    fn pace(spacing_ms: u64, until_s: u64) -> Decision {
        Decision::Pace {
            spacing: Duration::from_millis(spacing_ms),
            until: Duration::from_secs(until_s),
        }
    }

    #[test]
    fn a_window_with_more_than_the_reserve_left_goes_at_full_speed() {
        // GitHub: 4000 of 5000 left for the hour.
        let w = window(4000, 3600, Some(5000), false);
        assert_eq!(decide(Spend::Use, w, 16, 1.0), Decision::Go);
        // The reserve is 5 % of the limit (250), and at least what is in flight.
        assert_eq!(
            decide(Spend::Use, window(251, 3600, Some(5000), false), 16, 1.0),
            Decision::Go
        );
        assert_ne!(
            decide(Spend::Use, window(250, 3600, Some(5000), false), 16, 1.0),
            Decision::Go
        );
        assert_ne!(
            decide(Spend::Use, window(16, 60, None, false), 16, 1.0),
            Decision::Go
        );
        assert_eq!(
            decide(Spend::Use, window(18, 60, None, false), 16, 1.0),
            Decision::Go
        );
    }

    /// Every combination of extreme counts, resets, falls and requests in flight gives
    /// a decision whose durations are no longer than the window (a header's reset of
    /// `u64::MAX` seconds once overflowed the spacing spread over it).
    #[test]
    fn decide_holds_at_the_extremes() {
        let counts = [0, 1, 2, 1000, u64::MAX - 1, u64::MAX];
        let resets = [
            Duration::ZERO,
            Duration::from_nanos(1),
            Duration::from_secs(1),
            Duration::from_secs(u64::MAX / 2),
            Duration::MAX,
        ];
        let falls = [
            0.0,
            1.0,
            0.5,
            1e300,
            f64::MAX,
            f64::INFINITY,
            f64::NAN,
            -1.0,
        ];
        for (&remaining, &reset, &fall) in itertools3(&counts, &resets, &falls) {
            for limit in [None, Some(0), Some(1), Some(u64::MAX)] {
                for refills in [false, true] {
                    for spend in [Spend::Use, Spend::Smooth] {
                        for in_flight in [0, 1, u64::MAX] {
                            let w = Quota {
                                remaining,
                                reset,
                                limit,
                                refills,
                            };
                            match decide(spend, w, in_flight, fall) {
                                Decision::Go => {}
                                Decision::Pace { spacing, until } => {
                                    assert_eq!(until, reset, "{w:?}");
                                    assert!(spacing <= until, "{w:?} {fall}");
                                }
                                Decision::Pause { until } => assert_eq!(until, reset),
                            }
                        }
                    }
                }
            }
        }
    }

    fn itertools3<'a, A, B, C>(
        a: &'a [A],
        b: &'a [B],
        c: &'a [C],
    ) -> impl Iterator<Item = (&'a A, &'a B, &'a C)> {
        a.iter()
            .flat_map(move |x| b.iter().flat_map(move |y| c.iter().map(move |z| (x, y, z))))
    }

    #[test]
    fn a_nearly_spent_window_spreads_what_is_left_until_the_reset() {
        // Remaining 50, reset in 60 s: 50 over the minute.
        let w = window(50, 60, Some(5000), false);
        assert_eq!(decide(Spend::Use, w, 16, 1.0), pace(1200, 60));
    }

    #[test]
    fn a_spent_window_pauses_until_its_reset_and_a_reset_window_goes() {
        let w = window(0, 42, Some(5000), false);
        assert_eq!(
            decide(Spend::Use, w, 0, 1.0),
            Decision::Pause {
                until: Duration::from_secs(42)
            }
        );
        let reset = Quota {
            reset: Duration::ZERO,
            ..w
        };
        assert_eq!(decide(Spend::Use, reset, 0, 1.0), Decision::Go);
        assert_eq!(decide(Spend::Smooth, reset, 0, 1.0), Decision::Go);
    }

    #[test]
    fn a_low_bucket_that_refills_is_paced_at_its_refill_rate() {
        // OpenAI: 500 a minute, 20 left (within the reserve of 25), full again in
        // 57.6 s: 480 refill in that time.
        let w = Quota {
            reset: Duration::from_millis(57_600),
            ..window(20, 0, Some(500), true)
        };
        assert_eq!(
            decide(Spend::Use, w, 4, 1.0),
            Decision::Pace {
                spacing: Duration::from_millis(120),
                until: Duration::from_millis(57_600),
            }
        );
        // Below half the reserve, still holding the 4 out and the next: the refill.
        let low = Quota {
            remaining: 10,
            reset: Duration::from_millis(58_800),
            ..w
        };
        assert_eq!(
            decide(Spend::Use, low, 4, 1.0),
            Decision::Pace {
                spacing: Duration::from_millis(58_800).div_f64(490.0),
                until: Duration::from_millis(58_800),
            }
        );
        // Holding fewer: 90 % of the refill, to win them back.
        let lower = Quota {
            remaining: 4,
            reset: Duration::from_millis(59_520),
            ..w
        };
        assert_eq!(
            decide(Spend::Use, lower, 4, 1.0),
            Decision::Pace {
                spacing: Duration::from_millis(59_520).div_f64(496.0 * 0.9),
                until: Duration::from_millis(59_520),
            }
        );
    }

    #[test]
    fn queued_units_count_in_the_reserve_but_not_in_what_a_low_bucket_wins_back() {
        // 22,800 tokens a minute, 300 left, full in 59.2 s: 22,500 refill in that time.
        let w = Quota {
            reset: Duration::from_millis(59_210),
            ..window(300, 0, Some(22_800), true)
        };
        let refill = |share: f64| Decision::Pace {
            spacing: Duration::from_millis(59_210).div_f64(22_500.0 * share),
            until: Duration::from_millis(59_210),
        };
        // 19 in flight and 16 requests of 19 queued: it holds what is in flight, so
        // it is paced at the refill rate, as the queue goes one by one.
        assert_eq!(decide_queued(Spend::Use, w, (19, 304), 1.0), refill(1.0));
        // Holding less than what is in flight: 90 % to win it back.
        assert_eq!(decide_queued(Spend::Use, w, (400, 0), 1.0), refill(0.9));
        // 1,200 left is above 5 % of the limit (1,140), but not above what is out and
        // queued: released together, they would overrun it.
        let more = Quota {
            remaining: 1_200,
            ..w
        };
        assert_eq!(decide_queued(Spend::Use, more, (0, 0), 1.0), Decision::Go);
        assert!(matches!(
            decide_queued(Spend::Use, more, (19, 1_400), 1.0),
            Decision::Pace { .. }
        ));
    }

    #[test]
    fn a_spent_bucket_that_refills_is_paced_not_paused_until_it_is_full() {
        // Nothing left, full again in 60 s: the next request is back in 120 ms, not 60 s.
        let w = window(0, 60, Some(500), true);
        assert_eq!(
            decide(Spend::Use, w, 16, 1.0),
            Decision::Pace {
                spacing: Duration::from_secs(60).div_f64(500.0 * 0.9),
                until: Duration::from_secs(60),
            }
        );
    }

    #[test]
    fn a_shared_quota_is_counted_in_this_sidecars_requests() {
        // 200 of 5000 left: within the 5 % reserve, spread over the minute; when it
        // falls by 4 per answer of ours, only 50 of them are left to spread.
        let w = window(200, 60, Some(5000), false);
        assert_eq!(decide(Spend::Use, w, 1, 1.0), pace(300, 60));
        assert_eq!(decide(Spend::Use, w, 1, 4.0), pace(1200, 60));
        // Tokens: 4000 left at 1000 a request holds 4 requests, within the reserve
        // of 5 but not below half of it: 86 000 refill in 60 s.
        let tokens = window(4000, 60, Some(90_000), true);
        let refill = Decision::Pace {
            spacing: Duration::from_secs(60).div_f64(86.0),
            until: Duration::from_secs(60),
        };
        assert_eq!(decide(Spend::Use, tokens, 1, 1000.0), refill);
        // 900 left holds no request: paced at 90 % of the refill of 89.1 requests in 6 s.
        assert_eq!(
            decide(Spend::Use, window(900, 6, Some(90_000), true), 1, 1000.0),
            Decision::Pace {
                spacing: Duration::from_secs(6).div_f64(89.1 * 0.9),
                until: Duration::from_secs(6),
            }
        );
    }

    #[test]
    fn the_stricter_decision_wins() {
        let pause = |s| Decision::Pause {
            until: Duration::from_secs(s),
        };
        assert_eq!(stricter(Decision::Go, pace(10, 1)), pace(10, 1));
        assert_eq!(stricter(pace(10, 1), Decision::Go), pace(10, 1));
        assert_eq!(stricter(pace(10, 1), pace(20, 1)), pace(20, 1));
        assert_eq!(stricter(pace(30, 1), pause(2)), pause(2));
        assert_eq!(stricter(pause(3), pace(30, 9)), pause(3));
        assert_eq!(stricter(pause(3), pause(5)), pause(5));
        assert_eq!(stricter(Decision::Go, Decision::Go), Decision::Go);
    }

    #[test]
    fn smooth_spreads_the_whole_window() {
        let w = window(4000, 3600, Some(5000), false);
        assert_eq!(decide(Spend::Smooth, w, 16, 1.0), pace(900, 3600));
    }

    #[test]
    fn the_fall_is_learned_from_consecutive_answers() {
        let f = Fall::default();
        let at = Duration::from_secs;
        // An hour's window, its reset read at each answer.
        let w = |remaining, s: u64| window(remaining, 3600 - s, Some(5000), false);
        assert_eq!(
            f.observe(w(100, 1), at(1), 1.0),
            1.0,
            "nothing to compare with yet"
        );
        assert_eq!(f.observe(w(97, 2), at(2), 1.0), 3.0);
        assert_eq!(f.observe(w(96, 3), at(3), 1.0), 0.8 * 3.0 + 0.2 * 1.0);
        // A new window (its reset an hour away again) teaches nothing.
        let new = window(5000, 3600, Some(5000), false);
        assert_eq!(f.observe(new, at(4), 1.0), 0.8 * 3.0 + 0.2 * 1.0);
    }

    /// Four requests in flight, each taking one from the window, their answers
    /// arriving out of order: the average stays near one (a sidecar alone on its
    /// key paces at what its window allows), where counting only the falls read
    /// about 2.3.
    #[test]
    fn answers_out_of_order_teach_the_fall_they_took_together() {
        let f = Fall::default();
        let mut seen = Vec::new();
        let mut remaining = 4000;
        for round in 0..100u64 {
            // Sent 4000, 3999, 3998, 3997 left; answered in the order 2nd, 4th, 1st, 3rd.
            for k in [1, 3, 0, 2] {
                let at = Duration::from_millis(round * 40 + k * 10);
                let w = window(remaining - k, 3000 - round, Some(5000), false);
                seen.push(f.observe(w, at, 1.0));
            }
            remaining -= 4;
        }
        let last: Vec<f64> = seen[seen.len() - 8..].to_vec();
        let mean = last.iter().sum::<f64>() / last.len() as f64;
        assert!((mean - 1.0).abs() < 0.25, "{last:?}");
        assert!(last.iter().all(|fall| *fall < 1.5), "{last:?}");
    }

    #[test]
    fn the_fall_of_a_bucket_that_refills_counts_the_refill_between_answers() {
        // 12 000 tokens a minute (200/s); 10 a request at 20 requests/s: the bucket
        // stands still, and each request still takes 10.
        let f = Fall::default();
        let w = |remaining| Quota {
            remaining,
            reset: Duration::from_secs_f64((12_000 - remaining) as f64 / 200.0),
            limit: Some(12_000),
            refills: true,
        };
        assert_eq!(f.observe(w(100), Duration::from_millis(1000), 1.0), 1.0);
        let fall = f.observe(w(100), Duration::from_millis(1050), 1.0);
        assert!((fall - 10.0).abs() < 1e-9, "{fall}");
        // A full bucket refills nothing more.
        let full = Fall::default();
        full.observe(w(11_995), Duration::from_secs(1), 1.0);
        let fall = full.observe(w(11_990), Duration::from_secs(100), 1.0);
        assert!((fall - 10.0).abs() < 1e-9, "{fall}");
    }
}
