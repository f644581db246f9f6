//! The last minutes of each upstream for the status page: one sample a second, kept in
//! a bounded ring per upstream, so the page can chart the interval without Prometheus.
//! What to sample and when is the admin server's business; this only stores.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};

use serde_json::{Value, json};

/// How many samples each upstream keeps: ten minutes at one a second.
pub const SAMPLES: usize = 600;

/// One upstream at one moment.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// The interval in force, in milliseconds.
    pub interval_ms: f64,
    /// Requests waiting for a slot.
    pub waiting: u64,
    /// Throttles counted so far (a running total; the history keeps differences).
    pub throttles_total: u64,
}

/// Recent samples of every upstream, at most [`SAMPLES`] each.
#[derive(Debug, Default)]
pub struct History {
    by_upstream: Mutex<HashMap<String, Ring>>,
}

#[derive(Debug, Default)]
struct Ring {
    /// Unix time of the newest sample, in seconds.
    end: f64,
    last_total: Option<u64>,
    interval_ms: VecDeque<f64>,
    waiting: VecDeque<u64>,
    throttles: VecDeque<u64>,
}

impl History {
    /// Records one sample per upstream taken at `unix_secs`; upstreams not in
    /// `samples` (removed by a reload) are forgotten.
    pub fn record(&self, unix_secs: f64, samples: &[(String, Sample)]) {
        let mut rings = self.lock();
        rings.retain(|name, _| samples.iter().any(|(n, _)| n == name));
        for (name, sample) in samples {
            let ring = rings.entry(name.clone()).or_default();
            let new = ring
                .last_total
                .map_or(0, |last| sample.throttles_total.saturating_sub(last));
            ring.last_total = Some(sample.throttles_total);
            ring.end = unix_secs;
            push(&mut ring.interval_ms, sample.interval_ms);
            push(&mut ring.waiting, sample.waiting);
            push(&mut ring.throttles, new);
        }
    }

    /// The samples of `upstream`, oldest first, one a second up to `end` (Unix
    /// seconds): `{"period_s", "end", "interval_ms", "waiting", "throttles"}`.
    pub fn to_json(&self, upstream: &str) -> Value {
        let rings = self.lock();
        let Some(ring) = rings.get(upstream) else {
            return json!({ "period_s": 1, "end": null, "interval_ms": [], "waiting": [], "throttles": [] });
        };
        json!({
            "period_s": 1,
            "end": ring.end,
            "interval_ms": ring.interval_ms,
            "waiting": ring.waiting,
            "throttles": ring.throttles,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Ring>> {
        self.by_upstream
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
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
        }
    }

    #[test]
    fn keeps_the_last_ten_minutes_and_no_more() {
        let h = History::default();
        for i in 0..SAMPLES + 5 {
            h.record(i as f64, &[("a".into(), sample(i as f64, 0))]);
        }
        let j = h.to_json("a");
        let intervals = j["interval_ms"].as_array().unwrap();
        assert_eq!(intervals.len(), SAMPLES);
        assert_eq!(intervals[0], 5.0);
        assert_eq!(j["end"], (SAMPLES + 4) as f64);
    }

    #[test]
    fn throttles_are_counted_per_sample_from_the_running_total() {
        let h = History::default();
        for total in [7, 7, 10, 15] {
            h.record(0.0, &[("a".into(), sample(1.0, total))]);
        }
        assert_eq!(h.to_json("a")["throttles"], json!([0, 0, 3, 5]));
    }

    #[test]
    fn an_upstream_gone_from_the_samples_is_forgotten() {
        let h = History::default();
        h.record(
            0.0,
            &[("a".into(), sample(1.0, 0)), ("b".into(), sample(2.0, 0))],
        );
        h.record(1.0, &[("b".into(), sample(2.0, 0))]);
        assert_eq!(h.to_json("a")["interval_ms"], json!([]));
        assert_eq!(h.to_json("b")["interval_ms"], json!([2.0, 2.0]));
    }
}
