//! Every metric easeoff exports: one table of families (name, help, type, labels) from
//! which registration, the per-upstream handles and their removal all follow.
//!
//! Label sets are resolved once per upstream at start-up into [`UpstreamMetrics`], so
//! the request path only touches atomics, and every upstream family shows up on
//! `/metrics` before the first request, zero-valued, for every upstream, outcome,
//! signal and reason. A lane's series are bounded per lane (`metrics/lane.rs`). Gauges
//! that depend on the time of the scrape are set by `admin.rs`.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::OnceLock;

use prometheus::core::{
    Atomic, Collector, GenericCounter, GenericCounterVec, GenericGauge, GenericGaugeVec,
};
use prometheus::{
    Encoder, Gauge, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec,
    IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};

mod lane;
mod sharded;

use lane::{LANE_FAMILIES, LaneFamilies};
pub use lane::{LANE_SERIES, LaneCosts, LaneMetrics, LaneSeries, reason_label};
use sharded::{
    Cell, Sharded, ShardedCounterVec, ShardedFloatCounterVec, ShardedGaugeVec, ShardedHistogramVec,
    ShardedVec,
};
pub use sharded::{ShardedCounter, ShardedFloatCounter, ShardedGauge, ShardedHistogram};

use crate::concurrency::Why;
use crate::hints::Hint;
use crate::pacer::ShedReason;
use crate::throttle::Signal;

crate::spelled::spelled! {
    fn as_str;
    /// A client request's final outcome; the `outcome` label of `easeoff_requests_total`.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Outcome {
        /// The upstream answered 1xx, 2xx or 3xx, not a throttle.
        Success = "success",
        /// The upstream's throttle reached the client.
        Throttled = "throttled",
        /// The upstream answered 4xx, not a throttle: a bad request, signature or role.
        ClientError = "client_error",
        /// The upstream answered 5xx, not a throttle.
        UpstreamError = "upstream_error",
        /// No answer: the connection failed or broke, or easeoff could not send the request.
        Error = "error",
        /// easeoff answered at once instead of queueing.
        Shed = "shed",
        /// No answer within `request_timeout`.
        Timeout = "timeout",
    }
}

impl Outcome {
    /// The outcome of an upstream answer with `status` that is not a throttle.
    pub fn of_status(status: u16) -> Outcome {
        match status {
            400..=499 => Outcome::ClientError,
            500.. => Outcome::UpstreamError,
            _ => Outcome::Success,
        }
    }
}

crate::spelled::spelled! {
    fn as_str;
    /// Why easeoff sent an attempt again; the `reason` label of `easeoff_retries_total`.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum RetryReason {
        Throttle = "throttle",
        Connect = "connect",
    }
}

/// The buckets of both latency histograms, in seconds.
const LATENCY_BUCKETS: [f64; 16] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

/// Declares the per-upstream families: each line is one family's handle field, handle
/// type (which fixes the Prometheus type and the labels after `upstream`), name and
/// HELP. The handles struct, the families struct, registration, resolution, removal
/// and the exported list all come from the one line.
macro_rules! per_upstream {
    ($( $vis:vis $field:ident: $handle:ty = $name:literal, $help:literal; )*) => {
        /// One upstream's metric handles.
        pub struct UpstreamMetrics {
            $( #[doc = $help] $vis $field: $handle, )*
        }

        /// The per-upstream families, each labelled by `upstream` first.
        #[derive(Clone)]
        struct UpstreamFamilies {
            $( $field: <$handle as PerUpstream>::Family, )*
        }

        impl UpstreamFamilies {
            fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
                Ok(UpstreamFamilies {
                    $( $field: register(registry, <$handle as PerUpstream>::family($name, $help)?)?, )*
                })
            }

            fn resolve(&self, upstream: &str) -> UpstreamMetrics {
                UpstreamMetrics {
                    $( $field: <$handle as PerUpstream>::resolve(&self.$field, upstream), )*
                }
            }

            fn remove(&self, upstream: &str) {
                $( withdraw(&self.$field, upstream, <$handle as PerUpstream>::remove); )*
            }
        }

        const UPSTREAM_FAMILIES: &[Family] = &[
            $( Family {
                name: $name,
                help: $help,
                kind: <$handle as PerUpstream>::KIND,
                labels: <$handle as PerUpstream>::LABELS,
            }, )*
        ];
    };
}

per_upstream! {
    pub interval: Gauge = "easeoff_upstream_interval_seconds",
        "Current sleeper interval: the spacing between dispatches (pace) or each request's wait (delay).";
    pub max_interval: Gauge = "easeoff_upstream_max_interval_seconds",
        "The configured sleeper.max_interval; an interval at it means the upstream takes less than easeoff can slow down to.";
    pub pause: Gauge = "easeoff_upstream_pause_seconds",
        "Remaining pause requested by the upstream (Retry-After, RateLimit).";
    requests: By<Outcome> = "easeoff_requests_total",
        "Client requests by final outcome: success (1xx-3xx), throttled, client_error (a 4xx that is not a throttle), upstream_error (a 5xx that is not a throttle), error (no answer), shed, timeout.";
    responses: Responses = "easeoff_upstream_responses_total",
        "Upstream attempts that got an answer, by HTTP status.";
    throttles: By<Signal> = "easeoff_throttles_total",
        "Throttled attempts by what gave them away: status, header, body, grpc, partial, ratelimit, overload, busy.";
    hints_capped: By<Hint> = "easeoff_hint_pauses_capped_total",
        "Pauses and rate-limit windows asked for by an upstream header that were cut to max_pause, by header.";
    pub increases: ShardedCounter = "easeoff_interval_increases_total",
        "Times the sleeper raised the interval.";
    pub decreases: ShardedCounter = "easeoff_interval_decreases_total",
        "Times the sleeper lowered the interval.";
    pub invocations: ShardedCounter = "easeoff_sleeper_invocations_total",
        "Successes and throttles the sleeper was told of.";
    pub sleeps: ShardedCounter = "easeoff_sleeps_total",
        "Requests that waited for a slot.";
    pub sleep_seconds: ShardedFloatCounter = "easeoff_sleep_seconds_total",
        "Time requests waited for a slot.";
    pub would_wait: ShardedCounter = "easeoff_observe_would_wait_total",
        "With mode = \"observe\": requests pacing would have held (observe mode lets them go at once).";
    pub would_wait_seconds: ShardedFloatCounter = "easeoff_observe_would_wait_seconds_total",
        "With mode = \"observe\": how long pacing would have held those requests, summed.";
    pub would_shed: ShardedCounter = "easeoff_observe_would_shed_total",
        "With mode = \"observe\": requests pacing would have shed (their slot lay past their deadline).";
    retries: By<RetryReason> = "easeoff_retries_total",
        "Attempts easeoff sent again, by reason: throttle, connect.";
    sheds: By<ShedReason> = "easeoff_shed_total",
        "Requests shed, by reason: queue-full (max_waiting reached), deadline (slot past max_wait or the client's deadline), draining (slot past the shutdown drain), budget (a retry's slot past retry.max_elapsed).";
    pub budget_exhausted: IntCounter = "easeoff_retry_budget_exhausted_total",
        "Retries not sent because the retry budget was spent.";
    pub queue_waiting: IntGauge = "easeoff_queue_waiting",
        "Requests waiting for a slot.";
    pub in_flight: ShardedGauge = "easeoff_in_flight",
        "Attempts sent upstream and not yet answered.";
    pub in_flight_cap: IntGauge = "easeoff_in_flight_cap",
        "With max_in_flight: requests easeoff lets out at once (0 without a cap).";
    pub cap_out: IntGauge = "easeoff_in_flight_capped",
        "With max_in_flight: requests out under the cap, their answers included until they have passed.";
    cap_moves: By<Why> = "easeoff_in_flight_cap_moves_total",
        "Moves of a learned max_in_flight, by why: grew (answers came back with the cap full), refused (a refusal with many out), latency (answers came back ever slower), fleet (the fleet's share).";
    pub queue_wait: ShardedHistogram = "easeoff_queue_wait_seconds",
        "Time from a request's arrival to its dispatch.";
    pub upstream_duration: ShardedHistogram = "easeoff_upstream_duration_seconds",
        "Time from dispatch to the upstream's response head, per attempt.";
    pub connect_failures: IntCounter = "easeoff_connect_failures_total",
        "Connections to the upstream that could not be made.";
    pub connect_backoff: Gauge = "easeoff_connect_backoff_seconds",
        "Remaining connection backoff.";
    pub signing_failures: IntCounter = "easeoff_sigv4_signing_failures_total",
        "Attempts that could not be SigV4-signed (no credentials, or the credentials source failed); answered 503.";
    pub tenant_dispatches: ByName<sharded::CounterCell> = "easeoff_tenant_dispatches_total",
        "With [upstream.fairness]: requests dispatched, by tenant (at most max_tenants names and other).";
    pub tenant_cost: ByName<sharded::FloatCell> = "easeoff_tenant_cost_total",
        "With [upstream.fairness]: what those requests were reserved at, in the lanes' unit (requests, tokens or capacity units), by tenant.";
    pub tenant_wait: ByName<sharded::FloatCell> = "easeoff_tenant_wait_seconds_total",
        "With [upstream.fairness]: time those requests waited for their slots, by tenant.";
    pub tenant_sheds: ByName<sharded::CounterCell> = "easeoff_tenant_shed_total",
        "With [upstream.fairness]: requests shed from the lanes' queues, by tenant.";
    pub lanes: IntGauge = "easeoff_lanes",
        "Lanes alive: the default lane and one per table, method or bucket requests were paced in.";
    pub goaway_dropped: IntCounter = "easeoff_goaway_dropped_total",
        "HTTP/2 requests left unanswered when a connection closing for too many cancelled streams ran out of time (60 s).";
}

/// Reloads by `result` (success, error); not tied to an upstream.
const CONFIG_RELOADS: Family = Family {
    name: "easeoff_config_reloads_total",
    help: "Configuration reloads by result: success, error.",
    kind: "counter",
    labels: &["result"],
};

/// Which easeoff runs; not tied to an upstream.
const BUILD_INFO: Family = Family {
    name: "easeoff_build_info",
    help: "Always 1; the version label tells which easeoff runs.",
    kind: "gauge",
    labels: &["version"],
};

/// Declares the fleet's families (`[fleet]`), registered with the rest but published
/// only when a fleet starts, so a sidecar without `[fleet]` exports what it always did.
/// Each line is one family's field, Prometheus vector (which fixes its type), name,
/// HELP and labels.
macro_rules! fleet {
    ($( $field:ident: $vec:ty = $name:literal, $help:literal, [$($label:literal),*]; )*) => {
        /// The fleet's families; each appears on `/metrics` once resolved.
        #[derive(Clone)]
        struct FleetFamilies {
            $( $field: $vec, )*
        }

        impl FleetFamilies {
            fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
                Ok(FleetFamilies {
                    $( $field: register(registry, <$vec as FleetVec>::build($name, $help, &[$($label),*])?)?, )*
                })
            }
        }

        const FLEET_FAMILIES: &[Family] = &[
            $( Family {
                name: $name,
                help: $help,
                kind: <$vec as FleetVec>::KIND,
                labels: &[$($label),*],
            }, )*
        ];
    };
}

fleet! {
    connected: IntGaugeVec = "easeoff_fleet_connected",
        "1 while the fleet's Redis answers syncs; 0 while lanes run on their own.", [];
    members: GaugeVec = "easeoff_fleet_members",
        "Live fleet members sharing the lane, this one included.", ["upstream", "lane"];
    share: GaugeVec = "easeoff_fleet_share_ratio",
        "This member's fraction of the lane's fleet rate (max-min fair share of the members' demands).", ["upstream", "lane"];
    rate: GaugeVec = "easeoff_fleet_rate",
        "The lane's fleet-wide rate in requests per second (1 / fleet interval); 0 while unpaced.", ["upstream", "lane"];
    sync: HistogramVec = "easeoff_fleet_sync_seconds",
        "Time of one sync with the fleet's Redis (the lanes that are due, one round trip).", [];
    sync_errors: IntCounterVec = "easeoff_fleet_sync_errors_total",
        "Syncs and connection attempts to the fleet's Redis that failed or timed out.", [];
    redis_errors: IntCounterVec = "easeoff_fleet_redis_errors_total",
        "Errors from the fleet's Redis by class: unreachable, timeout, auth, oom, readonly, noscript, wrongtype (one lane's key), not-redis, other.", ["class"];
}

/// A Prometheus vector a fleet family is made of.
trait FleetVec: Sized {
    /// `counter`, `gauge` or `histogram`.
    const KIND: &'static str;
    fn build(name: &str, help: &str, labels: &[&str]) -> Result<Self, prometheus::Error>;
}

impl<P: Atomic> FleetVec for GenericGaugeVec<P> {
    const KIND: &'static str = "gauge";
    fn build(name: &str, help: &str, labels: &[&str]) -> Result<Self, prometheus::Error> {
        Self::new(Opts::new(name, help), labels)
    }
}

impl<P: Atomic> FleetVec for GenericCounterVec<P> {
    const KIND: &'static str = "counter";
    fn build(name: &str, help: &str, labels: &[&str]) -> Result<Self, prometheus::Error> {
        Self::new(Opts::new(name, help), labels)
    }
}

impl FleetVec for HistogramVec {
    const KIND: &'static str = "histogram";
    fn build(name: &str, help: &str, labels: &[&str]) -> Result<Self, prometheus::Error> {
        Self::new(latency_opts(name, help), labels)
    }
}

/// The `class` values of `easeoff_fleet_redis_errors_total`, each exported from the
/// start (at 0) so that a rate over them is defined.
pub const REDIS_ERROR_CLASSES: [&str; 9] = [
    "unreachable",
    "timeout",
    "auth",
    "oom",
    "readonly",
    "noscript",
    "wrongtype",
    "not-redis",
    "other",
];
/// One exported metric family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Family {
    /// The metric name, `easeoff_` prefixed.
    pub name: &'static str,
    /// The HELP line.
    pub help: &'static str,
    /// `counter`, `gauge` or `histogram`.
    pub kind: &'static str,
    /// Label names, in declaration order.
    pub labels: &'static [&'static str],
}

impl Family {
    fn opts(&self) -> Opts {
        Opts::new(self.name, self.help)
    }
}

/// Every easeoff family (process metrics aside), per-upstream ones first.
pub fn families() -> impl Iterator<Item = &'static Family> {
    UPSTREAM_FAMILIES
        .iter()
        .chain(LANE_FAMILIES)
        .chain([&CONFIG_RELOADS, &BUILD_INFO])
}

/// The fleet's families, exported while a `[fleet]` runs.
pub fn fleet_families() -> impl Iterator<Item = &'static Family> {
    FLEET_FAMILIES.iter()
}

/// The fleet's handles, published when a fleet starts.
#[derive(Clone)]
pub struct FleetMetrics {
    families: FleetFamilies,
    /// `easeoff_fleet_connected`.
    pub connected: IntGauge,
    /// `easeoff_fleet_sync_seconds`.
    pub sync: Histogram,
    /// `easeoff_fleet_sync_errors_total`.
    pub sync_errors: IntCounter,
}

/// One lane's fleet gauges, its own or those the lanes past `metrics_lanes` share.
pub struct FleetLaneMetrics {
    /// `easeoff_fleet_members`.
    pub members: Gauge,
    /// `easeoff_fleet_share_ratio`.
    pub share: Gauge,
    /// `easeoff_fleet_rate`.
    pub rate: Gauge,
    /// The families and labels to withdraw the gauges from, if they are the lane's own.
    own: Option<Box<OwnFleetLane>>,
}

/// Where a lane's own fleet gauges are withdrawn from.
struct OwnFleetLane {
    families: [GaugeVec; 3],
    labels: [Box<str>; 2],
}

impl FleetMetrics {
    /// Publishes one lane's own gauges, zero-valued, until
    /// [`FleetLaneMetrics::withdraw`].
    pub fn lane(&self, upstream: &str, lane: &str) -> FleetLaneMetrics {
        let f = &self.families;
        FleetLaneMetrics {
            own: Some(Box::new(OwnFleetLane {
                families: [f.members.clone(), f.share.clone(), f.rate.clone()],
                labels: [upstream.into(), lane.into()],
            })),
            ..self.shared(upstream, lane)
        }
    }

    /// Gauges for a key of `upstream` that is no lane (its shared `max_in_flight`):
    /// set as a lane's are, never exported.
    pub fn unlisted(&self, upstream: &str) -> FleetLaneMetrics {
        let metrics = self.shared(upstream, "");
        let f = &self.families;
        for family in [&f.members, &f.share, &f.rate] {
            let _ = family.remove_label_values(&[upstream, ""]);
        }
        metrics
    }

    /// The gauges the lanes of `upstream` past `metrics_lanes` share
    /// (`lane="other"`), which stay while the fleet runs.
    pub fn other_lanes(&self, upstream: &str) -> FleetLaneMetrics {
        self.shared(upstream, lane::OTHER)
    }

    fn shared(&self, upstream: &str, lane: &str) -> FleetLaneMetrics {
        let labels = [upstream, lane];
        FleetLaneMetrics {
            members: self.families.members.with_label_values(&labels),
            share: self.families.share.with_label_values(&labels),
            rate: self.families.rate.with_label_values(&labels),
            own: None,
        }
    }

    /// Counts one error from Redis of class `class`.
    pub fn redis_error(&self, class: &str) {
        self.families.redis_errors.with_label_values(&[class]).inc();
    }
}

impl FleetLaneMetrics {
    /// Withdraws the lane's own gauges (it left the fleet); the shared ones stay.
    pub fn withdraw(&self) {
        if let Some(own) = &self.own {
            let [upstream, lane] = &own.labels;
            for family in &own.families {
                let _ = family.remove_label_values(&[upstream, lane]);
            }
        }
    }
}

/// The registry and every metric family; a clone shares them.
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    upstream: UpstreamFamilies,
    lanes: LaneFamilies,
    config_reloads: IntCounterVec,
    fleet: FleetFamilies,
}

impl Metrics {
    /// Registers every family, the process metrics and `easeoff_build_info`.
    pub fn new() -> Result<Metrics, prometheus::Error> {
        let registry = Registry::new();
        let upstream = UpstreamFamilies::register(&registry)?;
        let lanes = LaneFamilies::register(&registry)?;
        let config_reloads = register(
            &registry,
            IntCounterVec::new(CONFIG_RELOADS.opts(), CONFIG_RELOADS.labels)?,
        )?;
        for result in ["success", "error"] {
            config_reloads.with_label_values(&[result]);
        }
        let build = register(
            &registry,
            IntGaugeVec::new(BUILD_INFO.opts(), BUILD_INFO.labels)?,
        )?;
        build.with_label_values(&[env!("CARGO_PKG_VERSION")]).set(1);
        #[cfg(target_os = "linux")]
        registry.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))?;
        let fleet = FleetFamilies::register(&registry)?;
        Ok(Metrics {
            registry,
            upstream,
            lanes,
            config_reloads,
            fleet,
        })
    }

    /// Resolves (and so publishes, zero-valued) every label set of one upstream; of the
    /// status codes, those a throttling dashboard reads (200, and 400, 429 and 503 for
    /// throttles); the rest appear on first use.
    pub fn upstream(&self, name: &str) -> UpstreamMetrics {
        self.upstream.resolve(name)
    }

    /// Withdraws every label set of an upstream a reload removed, so dashboards stop
    /// showing it. Handles still held by its draining requests update nothing visible.
    pub fn remove_upstream(&self, name: &str) {
        self.upstream.remove(name);
        self.lanes.withdraw(name);
    }

    /// Publishes one lane's series from its start, zero-valued: its gauges and
    /// dispatches, and what `series` asks for; the rest come on first use.
    pub fn lane(&self, upstream: &str, lane: &str, series: LaneSeries) -> LaneMetrics {
        self.lanes.resolve(upstream, lane, series)
    }

    /// Withdraws one lane's label sets (a dropped idle lane).
    pub fn remove_lane(&self, upstream: &str, lane: &str) {
        self.lanes.remove(upstream, lane);
    }

    /// Publishes the fleet's families (a fleet starts).
    pub fn fleet(&self) -> FleetMetrics {
        let f = &self.fleet;
        let fleet = FleetMetrics {
            families: f.clone(),
            connected: f.connected.with_label_values(&[] as &[&str]),
            sync: f.sync.with_label_values(&[] as &[&str]),
            sync_errors: f.sync_errors.with_label_values(&[] as &[&str]),
        };
        for class in REDIS_ERROR_CLASSES {
            f.redis_errors.with_label_values(&[class]);
        }
        fleet
    }

    /// Counts a configuration reload.
    pub fn config_reload(&self, ok: bool) {
        self.config_reloads
            .with_label_values(&[if ok { "success" } else { "error" }])
            .inc();
    }

    /// Everything in the Prometheus text format.
    pub fn render(&self) -> Result<String, prometheus::Error> {
        let mut out = Vec::with_capacity(16 * 1024);
        TextEncoder::new().encode(&self.registry.gather(), &mut out)?;
        String::from_utf8(out).map_err(|e| prometheus::Error::Msg(e.to_string()))
    }
}

impl UpstreamMetrics {
    /// The requests counter of one outcome.
    pub fn request(&self, outcome: Outcome) -> &ShardedCounter {
        self.requests.get(outcome)
    }

    /// The throttles counter of one signal.
    pub fn throttle(&self, signal: Signal) -> &ShardedCounter {
        self.throttles.get(signal)
    }

    /// The counter of a learned cap's moves for one reason.
    pub fn cap_move(&self, why: Why) -> &ShardedCounter {
        self.cap_moves.get(why)
    }

    /// The retries counter of one reason.
    pub fn retry(&self, reason: RetryReason) -> &ShardedCounter {
        self.retries.get(reason)
    }

    /// The counter of pauses cut to `max_pause`, for one header.
    pub fn hint_capped(&self, hint: Hint) -> &ShardedCounter {
        self.hints_capped.get(hint)
    }

    /// The sheds counter of one reason.
    pub fn shed(&self, reason: ShedReason) -> &ShardedCounter {
        self.sheds.get(reason)
    }

    /// Counts one upstream answer with `status`.
    pub fn response(&self, status: u16) {
        match self.responses.counter(status) {
            Some(counter) => counter.inc(),
            None => self.responses.make(status).inc(),
        }
    }
}

/// Implements [`PerUpstream`] for handles labelled by `upstream` alone.
macro_rules! upstream_only {
    ($([$($generics:tt)*] $handle:ty => $family:ty, $kind:literal, $opts:path;)*) => {$(
        impl<$($generics)*> PerUpstream for $handle {
            type Family = $family;
            const KIND: &'static str = $kind;
            const LABELS: &'static [&'static str] = &["upstream"];

            fn family(name: &str, help: &str) -> Result<Self::Family, prometheus::Error> {
                <$family>::new($opts(name, help), Self::LABELS)
            }

            fn resolve(family: &Self::Family, upstream: &str) -> Self {
                family.with_label_values(&[upstream])
            }

            fn remove(family: &Self::Family, labels: &HashMap<&str, &str>) {
                let _ = family.remove(labels);
            }
        }
    )*};
}

upstream_only! {
    [P: Atomic + 'static] GenericGauge<P> => GenericGaugeVec<P>, "gauge", Opts::new;
    [P: Atomic + 'static] GenericCounter<P> => GenericCounterVec<P>, "counter", Opts::new;
    [] Histogram => HistogramVec, "histogram", latency_opts;
    [] ShardedCounter => ShardedCounterVec, "counter", Opts::new;
    [] ShardedFloatCounter => ShardedFloatCounterVec, "counter", Opts::new;
    [] ShardedGauge => ShardedGaugeVec, "gauge", Opts::new;
    [] ShardedHistogram => ShardedHistogramVec, "histogram", Opts::new;
}

fn latency_opts(name: &str, help: &str) -> HistogramOpts {
    HistogramOpts::new(name, help).buckets(LATENCY_BUCKETS.to_vec())
}

/// A bounded label whose every value is published from start-up.
trait Label: Copy + 'static {
    /// The label name.
    const NAME: &'static str;
    /// Every value, in the order of [`Label::index`].
    const ALL: &'static [Self];
    fn as_str(self) -> &'static str;
    fn index(self) -> usize;
}

/// Makes an enum with `ALL` and `as_str` the label `$name`.
macro_rules! label {
    ($($ty:ident = $name:literal),*) => {$(
        impl Label for $ty {
            const NAME: &'static str = $name;
            const ALL: &'static [Self] = &$ty::ALL;
            fn as_str(self) -> &'static str {
                $ty::as_str(self)
            }
            fn index(self) -> usize {
                self as usize
            }
        }
    )*};
}

label!(
    Outcome = "outcome",
    Signal = "signal",
    RetryReason = "reason",
    ShedReason = "reason",
    Hint = "header",
    Why = "why"
);

/// A counter per value of label `L`, all made at start-up.
struct By<L> {
    counters: Box<[ShardedCounter]>,
    label: PhantomData<L>,
}

impl<L: Label> By<L> {
    fn get(&self, value: L) -> &ShardedCounter {
        &self.counters[value.index()]
    }
}

/// A handle type of one upstream, and how its family is made, resolved and withdrawn.
trait PerUpstream: Sized {
    /// The registered family.
    type Family: Collector + Clone + 'static;
    /// The Prometheus type.
    const KIND: &'static str;
    /// The label names, `upstream` first.
    const LABELS: &'static [&'static str];

    fn family(name: &str, help: &str) -> Result<Self::Family, prometheus::Error>;

    /// The handle of `upstream`, with every label set it publishes from start-up.
    fn resolve(family: &Self::Family, upstream: &str) -> Self;

    /// Drops one label set.
    fn remove(family: &Self::Family, labels: &HashMap<&str, &str>);
}

impl<L: Label> PerUpstream for By<L> {
    type Family = ShardedCounterVec;
    const KIND: &'static str = "counter";
    const LABELS: &'static [&'static str] = &["upstream", L::NAME];

    fn family(name: &str, help: &str) -> Result<Self::Family, prometheus::Error> {
        ShardedCounterVec::new(Opts::new(name, help), Self::LABELS)
    }

    fn resolve(family: &Self::Family, upstream: &str) -> Self {
        By {
            counters: L::ALL
                .iter()
                .map(|value| family.with_label_values(&[upstream, value.as_str()]))
                .collect(),
            label: PhantomData,
        }
    }

    fn remove(family: &Self::Family, labels: &HashMap<&str, &str>) {
        let _ = family.remove(labels);
    }
}

/// `easeoff_upstream_responses_total` by status, each label set made on first use.
struct Responses {
    family: ShardedCounterVec,
    upstream: String,
    by_status: Box<[OnceLock<ShardedCounter>]>,
}

impl Responses {
    /// The counter of a status from 100 to 599, made on first use.
    fn counter(&self, status: u16) -> Option<&ShardedCounter> {
        let cell = self.by_status.get(usize::from(status).wrapping_sub(100))?;
        Some(cell.get_or_init(|| self.make(status)))
    }

    fn make(&self, status: u16) -> ShardedCounter {
        self.family
            .with_label_values(&[self.upstream.as_str(), &status.to_string()])
    }
}

impl PerUpstream for Responses {
    type Family = ShardedCounterVec;
    const KIND: &'static str = "counter";
    const LABELS: &'static [&'static str] = &["upstream", "code"];

    fn family(name: &str, help: &str) -> Result<Self::Family, prometheus::Error> {
        ShardedCounterVec::new(Opts::new(name, help), Self::LABELS)
    }

    fn resolve(family: &Self::Family, upstream: &str) -> Self {
        let responses = Responses {
            family: family.clone(),
            upstream: upstream.to_string(),
            by_status: (100..600).map(|_| OnceLock::new()).collect(),
        };
        for status in [200, 400, 429, 503] {
            responses.counter(status);
        }
        responses
    }

    fn remove(family: &Self::Family, labels: &HashMap<&str, &str>) {
        let _ = family.remove(labels);
    }
}

/// A family labelled by a name the upstream learns as it runs (a tenant's): a series
/// is made when its name first comes, not at start-up.
pub struct ByName<C: Cell> {
    family: ShardedVec<C>,
    upstream: String,
}

impl<C: Cell> ByName<C> {
    /// The series of `name`, made if new.
    pub fn named(&self, name: &str) -> Sharded<C> {
        self.family
            .with_label_values(&[self.upstream.as_str(), name])
    }
}

impl<C: Cell> PerUpstream for ByName<C> {
    type Family = ShardedVec<C>;
    const KIND: &'static str = "counter";
    const LABELS: &'static [&'static str] = &["upstream", "tenant"];

    fn family(name: &str, help: &str) -> Result<Self::Family, prometheus::Error> {
        ShardedVec::new(Opts::new(name, help), Self::LABELS)
    }

    fn resolve(family: &Self::Family, upstream: &str) -> Self {
        ByName {
            family: family.clone(),
            upstream: upstream.to_string(),
        }
    }

    fn remove(family: &Self::Family, labels: &HashMap<&str, &str>) {
        let _ = family.remove(labels);
    }
}

/// Removes every label set of `family` whose `upstream` is `upstream`, whichever other
/// labels it has, by reading back what the family holds.
fn withdraw<F: Collector>(family: &F, upstream: &str, remove: fn(&F, &HashMap<&str, &str>)) {
    withdraw_where(family, &[("upstream", upstream)], remove);
}

/// Removes every label set of `family` that has all of `matching`'s label values.
fn withdraw_where<F: Collector>(
    family: &F,
    matching: &[(&str, &str)],
    remove: fn(&F, &HashMap<&str, &str>),
) {
    for gathered in family.collect() {
        for metric in gathered.get_metric() {
            let labels: HashMap<&str, &str> = metric
                .get_label()
                .iter()
                .map(|pair| (pair.name(), pair.value()))
                .collect();
            if matching.iter().all(|(k, v)| labels.get(k) == Some(v)) {
                remove(family, &labels);
            }
        }
    }
}

fn register<C: Collector + Clone + 'static>(
    registry: &Registry,
    collector: C,
) -> Result<C, prometheus::Error> {
    registry.register(Box::new(collector.clone()))?;
    Ok(collector)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_is_published_for_an_upstream_before_any_traffic() {
        let m = Metrics::new().unwrap();
        let _orders = m.upstream("orders");
        let text = m.render().unwrap();
        for line in [
            "easeoff_upstream_interval_seconds{upstream=\"orders\"} 0",
            "easeoff_requests_total{outcome=\"shed\",upstream=\"orders\"} 0",
            "easeoff_throttles_total{signal=\"partial\",upstream=\"orders\"} 0",
            "easeoff_retries_total{reason=\"connect\",upstream=\"orders\"} 0",
            "easeoff_queue_wait_seconds_count{upstream=\"orders\"} 0",
            "easeoff_config_reloads_total{result=\"error\"} 0",
            "easeoff_build_info{version=\"",
        ] {
            assert!(text.contains(line), "missing {line}\n{text}");
        }
    }

    #[test]
    fn every_declared_family_is_exported_with_its_help_and_type() {
        let m = Metrics::new().unwrap();
        let orders = m.upstream("orders");
        // Tenants' series come with their first request.
        orders.tenant_dispatches.named("web");
        orders.tenant_cost.named("web");
        orders.tenant_wait.named("web");
        orders.tenant_sheds.named("web");
        let every = LaneSeries {
            costs: true,
            histograms: true,
        };
        let lane = m.lane("orders", "default", every);
        lane.throttle(Signal::Status);
        lane.paused(Hint::RetryAfter);
        lane.throttled("status", 1.0);
        let text = m.render().unwrap();
        // Every family the registry exports is declared, and none twice.
        let exported = text.matches("# TYPE easeoff_").count();
        assert_eq!(families().count(), exported);
        let names: std::collections::HashSet<_> = families().map(|f| f.name).collect();
        assert_eq!(names.len(), exported);
        for family in families() {
            let help = format!("# HELP {} {}\n", family.name, family.help);
            let kind = format!("# TYPE {} {}\n", family.name, family.kind);
            assert!(text.contains(&help), "missing {help}");
            assert!(text.contains(&kind), "missing {kind}");
            assert!(!family.help.contains("seed"), "{}", family.help);
        }
    }

    #[test]
    fn throttle_reasons_are_bounded_and_leave_with_their_lane() {
        let m = Metrics::new().unwrap();
        let lane = m.lane("orders", "t:write", LaneSeries::default());
        lane.throttled("TableWriteKeyRangeThroughputExceeded", 5.0);
        lane.throttled("status", 6.0);
        lane.throttled("<script>anything the upstream says", 7.0);
        let text = m.render().unwrap();
        let name = "easeoff_lane_last_throttle_timestamp_seconds";
        for (reason, at) in [
            ("TableWriteKeyRangeThroughputExceeded", 5),
            ("status", 6),
            ("other", 7),
        ] {
            let line =
                format!("{name}{{lane=\"t:write\",reason=\"{reason}\",upstream=\"orders\"}} {at}");
            assert!(text.contains(&line), "missing {line}\n{text}");
        }
        m.remove_lane("orders", "t:write");
        assert!(!m.render().unwrap().contains("lane=\"t:write\""));
    }

    #[test]
    fn fleet_families_appear_only_once_a_fleet_starts() {
        let m = Metrics::new().unwrap();
        let _orders = m.upstream("orders");
        assert!(!m.render().unwrap().contains("easeoff_fleet_"));
        let fleet = m.fleet();
        let lane = fleet.lane("orders", "default");
        let text = m.render().unwrap();
        let exported = text.matches("# TYPE easeoff_fleet_").count();
        assert_eq!(fleet_families().count(), exported);
        for family in fleet_families() {
            let help = format!("# HELP {} {}\n", family.name, family.help);
            let kind = format!("# TYPE {} {}\n", family.name, family.kind);
            assert!(text.contains(&help), "missing {help}");
            assert!(text.contains(&kind), "missing {kind}");
        }
        let other = fleet.other_lanes("orders");
        lane.withdraw();
        other.withdraw();
        let text = m.render().unwrap();
        assert!(!text.contains("lane=\"default\""), "{text}");
        assert!(text.contains("easeoff_fleet_members{lane=\"other\",upstream=\"orders\"} 0"));
    }

    #[test]
    fn a_removed_upstream_leaves_no_sample_behind() {
        let m = Metrics::new().unwrap();
        let gone = m.upstream("gone");
        let _kept = m.upstream("kept");
        gone.response(418);
        m.remove_upstream("gone");
        let text = m.render().unwrap();
        assert!(!text.contains("upstream=\"gone\""), "{text}");
        assert!(text.contains("easeoff_requests_total{outcome=\"shed\",upstream=\"kept\"} 0"));
    }

    #[test]
    fn responses_are_counted_by_status() {
        let m = Metrics::new().unwrap();
        let u = m.upstream("a");
        u.response(200);
        u.response(200);
        u.response(429);
        u.response(999);
        let text = m.render().unwrap();
        assert!(text.contains("easeoff_upstream_responses_total{code=\"200\",upstream=\"a\"} 2"));
        assert!(text.contains("easeoff_upstream_responses_total{code=\"429\",upstream=\"a\"} 1"));
        assert!(text.contains("easeoff_upstream_responses_total{code=\"999\",upstream=\"a\"} 1"));
    }
}
