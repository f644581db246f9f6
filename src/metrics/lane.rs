//! The per-lane families, labelled `upstream` and `lane` (lanes past `metrics_lanes`
//! share the value `other`), and one lane's handles. A lane exports at most
//! [`LANE_SERIES`] series, its opt-in histogram aside: its interval, dispatches, queue
//! and nearness to its limit from its start, its costs with `lanes.cost`, and its
//! throttles by signal, pauses by header and last throttle by reason as they first
//! happen, within what is left. Past that, a new signal, header or reason is counted
//! under `other`, so whatever an upstream answers, a thousand sidecars at the default
//! `metrics_lanes` export at most about half a million lane series.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Mutex, OnceLock, PoisonError};

use prometheus::{
    Gauge, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry,
};

use super::sharded::{ShardedCounterVec, ShardedFloatCounterVec};
use super::{Family, Label, ShardedCounter, ShardedFloatCounter};
use super::{register, withdraw, withdraw_where};
use crate::hints::Hint;
use crate::throttle::Signal;

/// The most series one lane exports, `lane_cost_estimate_ratio`'s aside.
pub const LANE_SERIES: usize = 16;

/// The label value of what has no series of its own: the lanes past `metrics_lanes`,
/// and a lane's signals, headers and reasons past [`LANE_SERIES`].
pub const OTHER: &str = "other";

/// The labels every per-lane family starts with.
const LANE_LABELS: &[&str] = &["upstream", "lane"];

/// Which of its optional series a lane exports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LaneSeries {
    /// What its requests were reserved and settled at (`lanes.cost` other than
    /// `requests`).
    pub costs: bool,
    /// With `costs`, the estimate-error histogram (`lanes.metrics_histograms`).
    pub histograms: bool,
}

/// Declares the per-lane families: each line is one family's handle field, vector,
/// handle type, name, HELP and type. `always`: every lane exports it from its start;
/// `costs`: a lane that paces in units does.
macro_rules! per_lane {
    (
        always { $( $field:ident: $vec:ty => $handle:ty = $name:literal, $help:literal, $kind:literal; )* }
        costs { $( $cost:ident: $cvec:ty => $chandle:ty = $cname:literal, $chelp:literal, $ckind:literal; )* }
    ) => {
        /// One lane's metric handles (or those `other` lanes share).
        pub struct LaneMetrics {
            $( #[doc = $help] pub $field: $handle, )*
            /// With `lanes.cost`: what the lane's requests cost.
            pub costs: Option<LaneCosts>,
            /// Throttles, pauses and last throttles, made on first use.
            first_use: FirstUse,
        }

        /// A lane's cost series.
        pub struct LaneCosts {
            $( #[doc = $chelp] pub $cost: $chandle, )*
            /// Settled over reserved cost, per settled request; with
            /// `lanes.metrics_histograms`.
            pub error: Option<Histogram>,
        }

        /// Series every lane exports from its start, costs aside.
        const ALWAYS: usize = [$( $name ),*].len();
        /// Series a lane that paces in units exports from its start besides.
        const COSTS: usize = [$( $cname ),*].len();

        /// The per-lane families.
        #[derive(Clone)]
        pub(super) struct LaneFamilies {
            $( $field: $vec, )*
            $( $cost: $cvec, )*
            throttles: IntCounterVec,
            pauses: IntCounterVec,
            reasons: GaugeVec,
            cost_error: HistogramVec,
        }

        impl LaneFamilies {
            pub(super) fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
                Ok(LaneFamilies {
                    $( $field: register(registry, <$vec>::new(Opts::new($name, $help), LANE_LABELS)?)?, )*
                    $( $cost: register(registry, <$cvec>::new(Opts::new($cname, $chelp), LANE_LABELS)?)?, )*
                    throttles: register(registry, IntCounterVec::new(LANE_THROTTLES.opts(), LANE_THROTTLES.labels)?)?,
                    pauses: register(registry, IntCounterVec::new(LANE_PAUSES.opts(), LANE_PAUSES.labels)?)?,
                    reasons: register(registry, GaugeVec::new(LANE_LAST_THROTTLE.opts(), LANE_LAST_THROTTLE.labels)?)?,
                    cost_error: register(registry, HistogramVec::new(
                        HistogramOpts::new(LANE_COST_ERROR.name, LANE_COST_ERROR.help).buckets(COST_ERROR_BUCKETS.to_vec()),
                        LANE_COST_ERROR.labels,
                    )?)?,
                })
            }

            /// Publishes one lane's series from its start, zero-valued.
            pub(super) fn resolve(&self, upstream: &str, lane: &str, series: LaneSeries) -> LaneMetrics {
                let labels = [upstream, lane];
                let fixed = ALWAYS + if series.costs { COSTS } else { 0 };
                LaneMetrics {
                    $( $field: self.$field.with_label_values(&labels), )*
                    costs: series.costs.then(|| LaneCosts {
                        $( $cost: self.$cost.with_label_values(&labels), )*
                        error: series.histograms.then(|| self.cost_error.with_label_values(&labels)),
                    }),
                    first_use: FirstUse::new(self, labels, LANE_SERIES - fixed),
                }
            }

            /// Withdraws one lane's series.
            pub(super) fn remove(&self, upstream: &str, lane: &str) {
                let labels = [upstream, lane];
                $( let _ = self.$field.remove_label_values(&labels); )*
                $( let _ = self.$cost.remove_label_values(&labels); )*
                let _ = self.cost_error.remove_label_values(&labels);
                for value in Signal::ALL.iter().map(|s| s.as_str()).chain([OTHER]) {
                    let _ = self.throttles.remove_label_values(&[upstream, lane, value]);
                }
                for value in Hint::ALL.iter().map(|h| h.as_str()).chain([OTHER]) {
                    let _ = self.pauses.remove_label_values(&[upstream, lane, value]);
                }
                withdraw_where(&self.reasons, &[("upstream", upstream), ("lane", lane)], |f, l| {
                    let _ = f.remove(l);
                });
            }

            /// Withdraws every lane's series of one upstream.
            pub(super) fn withdraw(&self, upstream: &str) {
                $( withdraw(&self.$field, upstream, |f, l| { let _ = f.remove(l); }); )*
                $( withdraw(&self.$cost, upstream, |f, l| { let _ = f.remove(l); }); )*
                withdraw(&self.throttles, upstream, |f, l| { let _ = f.remove(l); });
                withdraw(&self.pauses, upstream, |f, l| { let _ = f.remove(l); });
                withdraw(&self.reasons, upstream, |f, l| { let _ = f.remove(l); });
                withdraw(&self.cost_error, upstream, |f, l| { let _ = f.remove(l); });
            }
        }

        /// Every per-lane family.
        pub(super) const LANE_FAMILIES: &[Family] = &[
            $( Family { name: $name, help: $help, kind: $kind, labels: LANE_LABELS }, )*
            $( Family { name: $cname, help: $chelp, kind: $ckind, labels: LANE_LABELS }, )*
            LANE_THROTTLES,
            LANE_PAUSES,
            LANE_LAST_THROTTLE,
            LANE_COST_ERROR,
        ];
    };
}

per_lane! {
    always {
        interval: GaugeVec => Gauge = "easeoff_lane_interval_seconds",
            "A lane's interval: the spacing between its dispatches; for lane=\"other\", the largest of the lanes not exported by name.", "gauge";
        dispatches: ShardedCounterVec => ShardedCounter = "easeoff_lane_dispatches_total",
            "Attempts a lane released to the upstream.", "counter";
        waiting: IntGaugeVec => IntGauge = "easeoff_lane_queue_waiting",
            "Requests waiting for a slot in a lane.", "gauge";
        near_limit: GaugeVec => Gauge = "easeoff_lane_near_limit",
            "How close a lane runs to its limit: dispatches over the last second against the rate its spacing (interval or rate-limit floor) allows; 1 is at the limit, 0 while unpaced.", "gauge";
    }
    costs {
        units_reserved: ShardedFloatCounterVec => ShardedFloatCounter = "easeoff_lane_cost_reserved_units_total",
            "With lanes.cost = \"tokens\" or \"capacity\": what a lane's dispatches were reserved at before they went, in its units (tokens, capacity units).", "counter";
        units_settled: ShardedFloatCounterVec => ShardedFloatCounter = "easeoff_lane_cost_settled_units_total",
            "With lanes.cost = \"tokens\" or \"capacity\": what the answers said those requests cost, in the lane's units, for the requests whose answer told it.", "counter";
    }
}

/// The buckets of the estimate-error histogram: settled over reserved.
const COST_ERROR_BUCKETS: [f64; 11] = [0.1, 0.25, 0.5, 0.75, 0.9, 1.0, 1.1, 1.5, 2.0, 4.0, 10.0];

/// How far a lane's estimates were from what the answers said.
const LANE_COST_ERROR: Family = Family {
    name: "easeoff_lane_cost_estimate_ratio",
    help: "With lanes.cost = \"tokens\" or \"capacity\" and lanes.metrics_histograms = true: what an answer said a request cost over what it was reserved at (1 is exact; below 1 the estimate was high).",
    kind: "histogram",
    labels: LANE_LABELS,
};

/// Throttles per lane, by signal.
const LANE_THROTTLES: Family = Family {
    name: "easeoff_lane_throttles_total",
    help: "Throttled attempts a lane was told of (by the answer to its own request, or one that named its table or bucket), by signal; a lane's signals past its series are \"other\".",
    kind: "counter",
    labels: &["upstream", "lane", "signal"],
};

/// Pauses and rate-limit floors per lane, by the header that set them.
const LANE_PAUSES: Family = Family {
    name: "easeoff_lane_hint_pauses_total",
    help: "Answers whose header paused a lane or set its rate-limit floor, by header (retry-after, ratelimit for a rate-limit window in any dialect, ...); a lane's headers past its series are \"other\".",
    kind: "counter",
    labels: &["upstream", "lane", "header"],
};

/// When a lane was last throttled, by reason.
const LANE_LAST_THROTTLE: Family = Family {
    name: "easeoff_lane_last_throttle_timestamp_seconds",
    help: "Unix time of a lane's last throttle, by reason: the upstream's own (a DynamoDB ThrottlingReasons code) or the signal that gave it away; unknown reasons, and a lane's reasons past its series, are \"other\".",
    kind: "gauge",
    labels: &["upstream", "lane", "reason"],
};

impl LaneMetrics {
    /// Counts one throttle of the lane given away by `signal`.
    pub fn throttle(&self, signal: Signal) {
        let f = &self.first_use;
        f.throttles.count(signal, &f.labels, &f.room);
    }

    /// The lane's throttles given away by `signal`, exactly (its series may be
    /// `other`'s).
    pub fn throttles(&self, signal: Signal) -> u64 {
        self.first_use.throttles.counted(signal)
    }

    /// Counts one pause or floor of the lane set by `header`.
    pub fn paused(&self, header: Hint) {
        let f = &self.first_use;
        f.pauses.count(header, &f.labels, &f.room);
    }

    /// Stamps the lane's last throttle of `reason` with `unix_secs`; the label is
    /// [`reason_label`], so upstream text cannot grow the series.
    pub fn throttled(&self, reason: &str, unix_secs: f64) {
        let f = &self.first_use;
        let reason = reason_label(reason);
        let mut named = f
            .reasons_named
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let label = if reason == OTHER || named.iter().any(|r| &**r == reason) {
            reason
        } else if take(&f.room) {
            named.push(reason.into());
            reason
        } else {
            OTHER
        };
        let [upstream, lane] = &f.labels;
        f.reasons
            .with_label_values(&[upstream, lane, label])
            .set(unix_secs);
    }
}

/// A throttle reason as a label value: a signal's name, a DynamoDB reason every part
/// of which DynamoDB documents, or `other`.
pub fn reason_label(reason: &str) -> &str {
    if Signal::ALL.iter().any(|s| s.as_str() == reason) {
        return reason;
    }
    match crate::route::dynamodb::parse_reason(reason) {
        (Some(_), Some(_), Some(_)) => reason,
        _ => OTHER,
    }
}

/// A lane's series made on first use. Each of the three families keeps a place for
/// its `other` series; the values with series of their own share what is left, so
/// whatever comes first the lane stays within [`LANE_SERIES`].
struct FirstUse {
    labels: [Box<str>; 2],
    /// Series left to make for a value of their own.
    room: AtomicUsize,
    throttles: ByFirstUse<Signal>,
    pauses: ByFirstUse<Hint>,
    reasons: GaugeVec,
    /// The reasons with a series of their own.
    reasons_named: Mutex<Vec<Box<str>>>,
}

/// The families made on first use, each with a place for its `other`.
const FIRST_USE_FAMILIES: usize = 3;

impl FirstUse {
    fn new(families: &LaneFamilies, [upstream, lane]: [&str; 2], room: usize) -> FirstUse {
        FirstUse {
            labels: [upstream.into(), lane.into()],
            room: AtomicUsize::new(room.saturating_sub(FIRST_USE_FAMILIES)),
            throttles: ByFirstUse::new(&families.throttles),
            pauses: ByFirstUse::new(&families.pauses),
            reasons: families.reasons.clone(),
            reasons_named: Mutex::new(Vec::new()),
        }
    }
}

/// Takes one place of `room`, if one is left.
fn take(room: &AtomicUsize) -> bool {
    room.fetch_update(Relaxed, Relaxed, |left| left.checked_sub(1))
        .is_ok()
}

/// A lane's counters by a label `L`, each made when its value first comes: its own
/// while places are left, else the family's `other`.
struct ByFirstUse<L> {
    family: IntCounterVec,
    counters: Box<[OnceLock<IntCounter>]>,
    other: OnceLock<IntCounter>,
    /// Exact counts by value, whichever series they went to.
    counts: Box<[AtomicU64]>,
    label: PhantomData<L>,
}

impl<L: Label> ByFirstUse<L> {
    fn new(family: &IntCounterVec) -> Self {
        ByFirstUse {
            family: family.clone(),
            counters: L::ALL.iter().map(|_| OnceLock::new()).collect(),
            other: OnceLock::new(),
            counts: L::ALL.iter().map(|_| AtomicU64::new(0)).collect(),
            label: PhantomData,
        }
    }

    fn count(&self, value: L, [upstream, lane]: &[Box<str>; 2], room: &AtomicUsize) {
        self.counts[value.index()].fetch_add(1, Relaxed);
        let counter = self.counters[value.index()].get_or_init(|| {
            if take(room) {
                self.family
                    .with_label_values(&[upstream, lane, value.as_str()])
            } else {
                let other = self
                    .other
                    .get_or_init(|| self.family.with_label_values(&[upstream, lane, OTHER]));
                other.clone()
            }
        });
        counter.inc();
    }

    fn counted(&self, value: L) -> u64 {
        self.counts[value.index()].load(Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;

    /// Series on `/metrics` labelled `lane="{lane}"`.
    fn series(m: &Metrics, lane: &str) -> Vec<String> {
        let label = format!("lane=\"{lane}\"");
        m.render()
            .unwrap()
            .lines()
            .filter(|l| l.starts_with("easeoff_lane_") && l.contains(&label))
            .map(str::to_string)
            .collect()
    }

    const WITH_COSTS: LaneSeries = LaneSeries {
        costs: true,
        histograms: false,
    };

    #[test]
    fn a_lane_starts_with_its_gauges_and_counters_and_nothing_made_on_first_use() {
        let m = Metrics::new().unwrap();
        let _requests = m.lane("api", "a", LaneSeries::default());
        let _tokens = m.lane("api", "b", WITH_COSTS);
        assert_eq!(series(&m, "a").len(), ALWAYS, "{:?}", series(&m, "a"));
        assert_eq!(
            series(&m, "b").len(),
            ALWAYS + COSTS,
            "{:?}",
            series(&m, "b")
        );
    }

    #[test]
    fn every_signal_header_and_reason_at_once_stays_within_the_lanes_series() {
        let reasons = [
            "TableReadProvisionedThroughputExceeded",
            "TableWriteKeyRangeThroughputExceeded",
            "IndexReadProvisionedThroughputExceeded",
            "IndexWriteKeyRangeThroughputExceeded",
            "anything else",
        ];
        for series_of in [LaneSeries::default(), WITH_COSTS] {
            let m = Metrics::new().unwrap();
            let lane = m.lane("api", "a", series_of);
            for (i, signal) in Signal::ALL.iter().enumerate() {
                lane.throttle(*signal);
                lane.paused(Hint::ALL[i % Hint::ALL.len()]);
                lane.throttled(signal.as_str(), 1.0);
            }
            for header in Hint::ALL {
                lane.paused(header);
            }
            for reason in reasons {
                lane.throttled(reason, 2.0);
            }
            let made = series(&m, "a");
            assert_eq!(made.len(), LANE_SERIES, "{made:#?}");
            for family in ["throttles_total", "hint_pauses_total", "timestamp_seconds"] {
                assert!(
                    made.iter()
                        .any(|l| l.contains(family) && l.contains("=\"other\"")),
                    "{family} folds the rest into other: {made:#?}"
                );
            }
            // Exact counts whichever series they went to, and every count on a series.
            for signal in Signal::ALL {
                assert_eq!(lane.throttles(signal), 1);
            }
            let counted: f64 = made
                .iter()
                .filter(|l| l.starts_with("easeoff_lane_throttles_total"))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum();
            assert_eq!(counted, Signal::ALL.len() as f64);
            m.remove_lane("api", "a");
            assert_eq!(series(&m, "a"), Vec::<String>::new());
        }
    }

    #[test]
    fn the_first_values_keep_series_of_their_own() {
        let m = Metrics::new().unwrap();
        let lane = m.lane("api", "a", WITH_COSTS);
        lane.throttle(Signal::Status);
        lane.throttle(Signal::Status);
        lane.paused(Hint::RetryAfterMs);
        lane.throttled("status", 3.0);
        let made = series(&m, "a");
        for line in [
            "easeoff_lane_throttles_total{lane=\"a\",signal=\"status\",upstream=\"api\"} 2",
            "easeoff_lane_hint_pauses_total{header=\"retry-after-ms\",lane=\"a\",upstream=\"api\"} 1",
            "easeoff_lane_last_throttle_timestamp_seconds{lane=\"a\",reason=\"status\",upstream=\"api\"} 3",
        ] {
            assert!(made.iter().any(|l| l == line), "missing {line}: {made:#?}");
        }
        assert!(!made.iter().any(|l| l.contains("\"other\"")), "{made:#?}");
    }

    #[test]
    fn the_estimate_histogram_is_opt_in() {
        let m = Metrics::new().unwrap();
        let off = m.lane("api", "off", WITH_COSTS);
        let on = m.lane(
            "api",
            "on",
            LaneSeries {
                costs: true,
                histograms: true,
            },
        );
        assert!(off.costs.as_ref().unwrap().error.is_none());
        on.costs
            .as_ref()
            .unwrap()
            .error
            .as_ref()
            .unwrap()
            .observe(1.0);
        let text = m.render().unwrap();
        assert!(
            text.contains("easeoff_lane_cost_estimate_ratio_count{lane=\"on\",upstream=\"api\"} 1")
        );
        assert!(!text.contains("easeoff_lane_cost_estimate_ratio_count{lane=\"off\""));
    }
}
