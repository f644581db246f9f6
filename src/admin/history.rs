//! The last minutes of each upstream and each lane with series of its own, for the
//! status page: one sample a second, kept in a bounded ring each, so the page can chart
//! the interval (and a `max_in_flight` cap) without Prometheus. Lanes are bounded like their series
//! (`metrics_lanes`). What to sample and when is the admin server's business; this
//! only stores.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};

use crate::admin::document::HistoryStatus;

/// How many samples each upstream and lane keeps: ten minutes at one a second.
pub const SAMPLES: usize = 600;

/// Whose samples: an upstream (`lane` `None`) or one of its lanes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    pub upstream: String,
    pub lane: Option<String>,
}

impl Key {
    /// The upstream's own samples.
    pub fn upstream(name: &str) -> Key {
        Key {
            upstream: name.to_string(),
            lane: None,
        }
    }

    /// One lane's samples.
    pub fn lane(upstream: &str, lane: &str) -> Key {
        Key {
            upstream: upstream.to_string(),
            lane: Some(lane.to_string()),
        }
    }
}

/// One upstream or lane at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sample {
    /// The interval in force, in milliseconds.
    pub interval_ms: f64,
    /// Requests waiting for a slot.
    pub waiting: u64,
    /// Throttles counted so far (a running total; the history keeps differences).
    pub throttles_total: u64,
    /// Dispatches counted so far, for lanes (a running total, like throttles).
    pub dispatches_total: Option<u64>,
    /// Whether a pause held it.
    pub paused: bool,
    /// For an upstream with `max_in_flight`: the cap and the requests out under it.
    pub cap: Option<(u32, u32)>,
}

/// Recent samples of every upstream and sampled lane, at most [`SAMPLES`] each.
#[derive(Debug, Default)]
pub struct History {
    rings: Mutex<HashMap<Key, Ring>>,
}

#[derive(Debug, Default)]
struct Ring {
    /// Unix time of the newest sample, in seconds.
    end: f64,
    last_throttles: Option<u64>,
    last_dispatches: Option<u64>,
    interval_ms: VecDeque<f64>,
    waiting: VecDeque<u64>,
    throttles: VecDeque<u64>,
    dispatches: VecDeque<u64>,
    paused: VecDeque<u8>,
    cap: VecDeque<u32>,
    out: VecDeque<u32>,
}

/// The increase of a running total since the last sample (0 for the first).
fn delta(last: &mut Option<u64>, total: u64) -> u64 {
    let new = last.map_or(0, |l| total.saturating_sub(l));
    *last = Some(total);
    new
}

impl History {
    /// Records one sample per key taken at `unix_secs`; keys not in `samples` (an
    /// upstream removed by a reload, a dropped lane) are forgotten.
    pub fn record(&self, unix_secs: f64, samples: &[(Key, Sample)]) {
        let mut rings = self.lock();
        rings.retain(|key, _| samples.iter().any(|(k, _)| k == key));
        for (key, sample) in samples {
            let ring = rings.entry(key.clone()).or_default();
            ring.end = unix_secs;
            let throttles = delta(&mut ring.last_throttles, sample.throttles_total);
            push(&mut ring.interval_ms, sample.interval_ms);
            push(&mut ring.waiting, sample.waiting);
            push(&mut ring.throttles, throttles);
            if let Some(total) = sample.dispatches_total {
                let dispatches = delta(&mut ring.last_dispatches, total);
                push(&mut ring.dispatches, dispatches);
                push(&mut ring.paused, u8::from(sample.paused));
            }
            match sample.cap {
                Some((cap, out)) => {
                    push(&mut ring.cap, cap);
                    push(&mut ring.out, out);
                }
                // A reload took the cap away: what is left would not line up with
                // the interval's samples.
                None => {
                    ring.cap.clear();
                    ring.out.clear();
                }
            }
        }
    }

    /// The samples of `key`, oldest first; `None` when it has none.
    pub fn get(&self, key: &Key) -> Option<HistoryStatus> {
        let rings = self.lock();
        let ring = rings.get(key)?;
        Some(HistoryStatus {
            period_s: 1,
            end: Some(ring.end),
            interval_ms: ring.interval_ms.iter().copied().collect(),
            waiting: ring.waiting.iter().copied().collect(),
            throttles: ring.throttles.iter().copied().collect(),
            dispatches: ring.dispatches.iter().copied().collect(),
            paused: ring.paused.iter().copied().collect(),
            cap: ring.cap.iter().copied().collect(),
            out: ring.out.iter().copied().collect(),
        })
    }

    /// The samples of `key`, or an empty history.
    pub fn of(&self, key: &Key) -> HistoryStatus {
        self.get(key).unwrap_or(HistoryStatus {
            period_s: 1,
            ..HistoryStatus::default()
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Ring>> {
        self.rings.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn push<T>(ring: &mut VecDeque<T>, value: T) {
    if ring.len() == SAMPLES {
        ring.pop_front();
    }
    ring.push_back(value);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(interval_ms: f64, throttles_total: u64) -> Sample {
        Sample {
            interval_ms,
            waiting: 2,
            throttles_total,
            ..Sample::default()
        }
    }

    fn a() -> Key {
        Key::upstream("a")
    }

    #[test]
    fn keeps_the_last_ten_minutes_and_no_more() {
        let h = History::default();
        for i in 0..SAMPLES + 5 {
            h.record(i as f64, &[(a(), sample(i as f64, 0))]);
        }
        let j = h.of(&a());
        assert_eq!(j.interval_ms.len(), SAMPLES);
        assert_eq!(j.interval_ms[0], 5.0);
        assert_eq!(j.end, Some((SAMPLES + 4) as f64));
    }

    #[test]
    fn throttles_are_counted_per_sample_from_the_running_total() {
        let h = History::default();
        for total in [7, 7, 10, 15] {
            h.record(0.0, &[(a(), sample(1.0, total))]);
        }
        assert_eq!(h.of(&a()).throttles, [0, 0, 3, 5]);
        assert!(
            h.of(&a()).dispatches.is_empty(),
            "upstreams count no dispatches"
        );
        assert!(
            h.of(&a()).cap.is_empty(),
            "an uncapped upstream keeps no cap"
        );
    }

    #[test]
    fn lanes_keep_dispatches_and_pauses_per_sample() {
        let h = History::default();
        let lane = Key::lane("a", "t:write");
        for (total, paused) in [(100, false), (150, true), (151, false)] {
            let s = Sample {
                dispatches_total: Some(total),
                paused,
                ..sample(20.0, 0)
            };
            h.record(0.0, &[(lane.clone(), s)]);
        }
        let j = h.of(&lane);
        assert_eq!(j.dispatches, [0, 50, 1]);
        assert_eq!(j.paused, [0, 1, 0]);
        assert_eq!(h.get(&Key::lane("a", "other")), None);
    }

    #[test]
    fn a_capped_upstream_keeps_its_cap_and_what_was_out_per_sample() {
        let h = History::default();
        for cap in [Some((4, 1)), Some((5, 5)), Some((3, 3))] {
            let s = Sample {
                cap,
                ..sample(0.0, 0)
            };
            h.record(0.0, &[(a(), s)]);
        }
        let j = h.of(&a());
        assert_eq!(j.cap, [4, 5, 3]);
        assert_eq!(j.out, [1, 5, 3]);
        // The cap gone (a reload), its samples go, so the rest stay aligned.
        h.record(1.0, &[(a(), sample(0.0, 0))]);
        let j = h.of(&a());
        assert!(j.cap.is_empty() && j.out.is_empty(), "{j:?}");
        assert_eq!(j.interval_ms.len(), 4);
    }

    #[test]
    fn an_upstream_gone_from_the_samples_is_forgotten() {
        let h = History::default();
        let b = Key::upstream("b");
        h.record(0.0, &[(a(), sample(1.0, 0)), (b.clone(), sample(2.0, 0))]);
        h.record(1.0, &[(b.clone(), sample(2.0, 0))]);
        assert!(h.of(&a()).interval_ms.is_empty());
        assert_eq!(h.of(&b).interval_ms, [2.0, 2.0]);
    }
}
