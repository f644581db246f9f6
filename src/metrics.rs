//! Every metric easeoff exports (SPEC §5): names, help, labels and registration.
//!
//! Label sets are resolved once per upstream at start-up into [`UpstreamMetrics`], so
//! the request path only touches atomics, and every family shows up on `/metrics`
//! before the first request, zero-valued, for every upstream, outcome, signal and
//! reason. Gauges that depend on the time of the scrape are set by `admin.rs`.

use std::sync::OnceLock;

use prometheus::{
    Counter, CounterVec, Encoder, Gauge, GaugeVec, Histogram, HistogramOpts, HistogramVec,
    IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};

use crate::hints::Hint;
use crate::throttle::Signal;

/// A client request's final outcome; the `outcome` label of `easeoff_requests_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The upstream answered and it was not a throttle (any status below 500).
    Success,
    /// The upstream's throttle reached the client.
    Throttled,
    /// No answer (connection failed or broke) or a 5xx.
    Error,
    /// easeoff answered at once instead of queueing.
    Shed,
    /// No answer within `request_timeout`.
    Timeout,
}

impl Outcome {
    /// Every outcome, in label order.
    pub const ALL: [Outcome; 5] = [
        Outcome::Success,
        Outcome::Throttled,
        Outcome::Error,
        Outcome::Shed,
        Outcome::Timeout,
    ];

    /// The metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Throttled => "throttled",
            Outcome::Error => "error",
            Outcome::Shed => "shed",
            Outcome::Timeout => "timeout",
        }
    }
}

/// Why easeoff sent an attempt again; the `reason` label of `easeoff_retries_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryReason {
    Throttle,
    Connect,
}

impl RetryReason {
    /// Every reason, in label order.
    pub const ALL: [RetryReason; 2] = [RetryReason::Throttle, RetryReason::Connect];

    /// The metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            RetryReason::Throttle => "throttle",
            RetryReason::Connect => "connect",
        }
    }
}

/// The registry and every metric family.
pub struct Metrics {
    registry: Registry,
    interval: GaugeVec,
    max_interval: GaugeVec,
    pause: GaugeVec,
    requests: IntCounterVec,
    responses: IntCounterVec,
    throttles: IntCounterVec,
    hints_capped: IntCounterVec,
    increases: IntCounterVec,
    decreases: IntCounterVec,
    invocations: IntCounterVec,
    sleeps: IntCounterVec,
    sleep_seconds: CounterVec,
    retries: IntCounterVec,
    budget_exhausted: IntCounterVec,
    queue_waiting: IntGaugeVec,
    in_flight: IntGaugeVec,
    queue_wait: HistogramVec,
    upstream_duration: HistogramVec,
    connect_failures: IntCounterVec,
    connect_backoff: GaugeVec,
    signing_failures: IntCounterVec,
    config_reloads: IntCounterVec,
}

/// One upstream's metric handles.
pub struct UpstreamMetrics {
    pub interval: Gauge,
    pub max_interval: Gauge,
    pub pause: Gauge,
    requests: [IntCounter; Outcome::ALL.len()],
    responses: Responses,
    throttles: [IntCounter; Signal::ALL.len()],
    hints_capped: [IntCounter; Hint::ALL.len()],
    pub increases: IntCounter,
    pub decreases: IntCounter,
    pub invocations: IntCounter,
    pub sleeps: IntCounter,
    pub sleep_seconds: Counter,
    retries: [IntCounter; RetryReason::ALL.len()],
    pub budget_exhausted: IntCounter,
    pub queue_waiting: IntGauge,
    pub in_flight: IntGauge,
    pub queue_wait: Histogram,
    pub upstream_duration: Histogram,
    pub connect_failures: IntCounter,
    pub connect_backoff: Gauge,
    pub signing_failures: IntCounter,
}

/// `easeoff_upstream_responses_total` by status, each label set made on first use.
struct Responses {
    family: IntCounterVec,
    upstream: String,
    by_status: Box<[OnceLock<IntCounter>]>,
}

const LATENCY_BUCKETS: [f64; 16] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

impl Metrics {
    /// Registers every family, the process metrics and `easeoff_build_info`.
    pub fn new() -> Result<Metrics, prometheus::Error> {
        let registry = Registry::new();
        let up = &["upstream"];
        let m = Metrics {
            interval: register(
                &registry,
                GaugeVec::new(
                    opts(
                        "easeoff_upstream_interval_seconds",
                        "Current sleeper interval: the spacing between dispatches (pace) or each request's wait (delay).",
                    ),
                    up,
                )?,
            )?,
            max_interval: register(
                &registry,
                GaugeVec::new(
                    opts(
                        "easeoff_upstream_max_interval_seconds",
                        "The configured sleeper.max_interval; an interval at it means the upstream takes less than easeoff can slow down to.",
                    ),
                    up,
                )?,
            )?,
            pause: register(
                &registry,
                GaugeVec::new(
                    opts(
                        "easeoff_upstream_pause_seconds",
                        "Remaining pause requested by the upstream (Retry-After, RateLimit).",
                    ),
                    up,
                )?,
            )?,
            requests: register(
                &registry,
                IntCounterVec::new(
                    opts(
                        "easeoff_requests_total",
                        "Client requests by final outcome: success, throttled, error, shed, timeout.",
                    ),
                    &["upstream", "outcome"],
                )?,
            )?,
            responses: register(
                &registry,
                IntCounterVec::new(
                    opts(
                        "easeoff_upstream_responses_total",
                        "Upstream attempts that got an answer, by HTTP status.",
                    ),
                    &["upstream", "code"],
                )?,
            )?,
            throttles: register(
                &registry,
                IntCounterVec::new(
                    opts(
                        "easeoff_throttles_total",
                        "Throttled attempts by what gave them away: status, header, body, grpc, partial, ratelimit.",
                    ),
                    &["upstream", "signal"],
                )?,
            )?,
            hints_capped: register(
                &registry,
                IntCounterVec::new(
                    opts(
                        "easeoff_hint_pauses_capped_total",
                        "Pauses and rate-limit windows an upstream header asked for that were cut to max_pause, by header: retry-after, x-amz-retry-after, grpc-retry-pushback-ms, ratelimit.",
                    ),
                    &["upstream", "header"],
                )?,
            )?,
            increases: register(
                &registry,
                IntCounterVec::new(
                    opts(
                        "easeoff_interval_increases_total",
                        "Times the sleeper raised the interval (the seed's TotalWentUp).",
                    ),
                    up,
                )?,
            )?,
            decreases: register(
                &registry,
                IntCounterVec::new(
                    opts(
                        "easeoff_interval_decreases_total",
                        "Times the sleeper lowered the interval (the seed's TotalWentDown).",
                    ),
                    up,
                )?,
            )?,
            invocations: register(
                &registry,
                IntCounterVec::new(
                    opts(
                        "easeoff_sleeper_invocations_total",
                        "Successes and throttles the sleeper was told of (the seed's TotalInvocation).",
                    ),
                    up,
                )?,
            )?,
            sleeps: register(
                &registry,
                IntCounterVec::new(
                    opts(
                        "easeoff_sleeps_total",
                        "Requests that waited for a slot (the seed's TotalSlept).",
                    ),
                    up,
                )?,
            )?,
            sleep_seconds: register(
                &registry,
                CounterVec::new(
                    opts(
                        "easeoff_sleep_seconds_total",
                        "Time requests waited for a slot (the seed's TotalSleepTime).",
                    ),
                    up,
                )?,
            )?,
            retries: register(
                &registry,
                IntCounterVec::new(
                    opts(
                        "easeoff_retries_total",
                        "Attempts easeoff sent again, by reason: throttle, connect.",
                    ),
                    &["upstream", "reason"],
                )?,
            )?,
            budget_exhausted: register(
                &registry,
                IntCounterVec::new(
                    opts(
                        "easeoff_retry_budget_exhausted_total",
                        "Retries not sent because the retry budget was spent.",
                    ),
                    up,
                )?,
            )?,
            queue_waiting: register(
                &registry,
                IntGaugeVec::new(
                    opts("easeoff_queue_waiting", "Requests waiting for a slot."),
                    up,
                )?,
            )?,
            in_flight: register(
                &registry,
                IntGaugeVec::new(
                    opts(
                        "easeoff_in_flight",
                        "Attempts sent upstream and not yet answered.",
                    ),
                    up,
                )?,
            )?,
            queue_wait: register(
                &registry,
                HistogramVec::new(
                    HistogramOpts::new(
                        "easeoff_queue_wait_seconds",
                        "Time from a request's arrival to its dispatch.",
                    )
                    .buckets(LATENCY_BUCKETS.to_vec()),
                    up,
                )?,
            )?,
            upstream_duration: register(
                &registry,
                HistogramVec::new(
                    HistogramOpts::new(
                        "easeoff_upstream_duration_seconds",
                        "Time from dispatch to the upstream's response head, per attempt.",
                    )
                    .buckets(LATENCY_BUCKETS.to_vec()),
                    up,
                )?,
            )?,
            connect_failures: register(
                &registry,
                IntCounterVec::new(
                    opts(
                        "easeoff_connect_failures_total",
                        "Connections to the upstream that could not be made.",
                    ),
                    up,
                )?,
            )?,
            connect_backoff: register(
                &registry,
                GaugeVec::new(
                    opts(
                        "easeoff_connect_backoff_seconds",
                        "Remaining connection backoff.",
                    ),
                    up,
                )?,
            )?,
            signing_failures: register(
                &registry,
                IntCounterVec::new(
                    opts(
                        "easeoff_sigv4_signing_failures_total",
                        "Attempts that could not be SigV4-signed (no credentials, or the credentials source failed); answered 503.",
                    ),
                    up,
                )?,
            )?,
            config_reloads: register(
                &registry,
                IntCounterVec::new(
                    opts(
                        "easeoff_config_reloads_total",
                        "Configuration reloads by result: success, error.",
                    ),
                    &["result"],
                )?,
            )?,
            registry,
        };
        for result in ["success", "error"] {
            m.config_reloads.with_label_values(&[result]);
        }
        let build = IntGaugeVec::new(
            opts(
                "easeoff_build_info",
                "Always 1; the version label tells which easeoff runs.",
            ),
            &["version"],
        )?;
        build.with_label_values(&[env!("CARGO_PKG_VERSION")]).set(1);
        m.registry.register(Box::new(build))?;
        #[cfg(target_os = "linux")]
        m.registry.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))?;
        Ok(m)
    }

    /// Resolves (and so publishes, zero-valued) every label set of one upstream; of the
    /// status codes, those a throttling dashboard reads (200, and 400, 429 and 503 for
    /// throttles); the rest appear on first use.
    pub fn upstream(&self, name: &str) -> UpstreamMetrics {
        let one = |family: &IntCounterVec| family.with_label_values(&[name]);
        let responses = Responses {
            family: self.responses.clone(),
            upstream: name.to_string(),
            by_status: (100..600).map(|_| OnceLock::new()).collect(),
        };
        for status in [200, 400, 429, 503] {
            responses.counter(status);
        }
        UpstreamMetrics {
            interval: self.interval.with_label_values(&[name]),
            max_interval: self.max_interval.with_label_values(&[name]),
            pause: self.pause.with_label_values(&[name]),
            requests: Outcome::ALL.map(|o| self.requests.with_label_values(&[name, o.as_str()])),
            responses,
            throttles: Signal::ALL.map(|s| self.throttles.with_label_values(&[name, s.as_str()])),
            hints_capped: Hint::ALL
                .map(|h| self.hints_capped.with_label_values(&[name, h.as_str()])),
            increases: one(&self.increases),
            decreases: one(&self.decreases),
            invocations: one(&self.invocations),
            sleeps: one(&self.sleeps),
            sleep_seconds: self.sleep_seconds.with_label_values(&[name]),
            retries: RetryReason::ALL.map(|r| self.retries.with_label_values(&[name, r.as_str()])),
            budget_exhausted: one(&self.budget_exhausted),
            queue_waiting: self.queue_waiting.with_label_values(&[name]),
            in_flight: self.in_flight.with_label_values(&[name]),
            queue_wait: self.queue_wait.with_label_values(&[name]),
            upstream_duration: self.upstream_duration.with_label_values(&[name]),
            connect_failures: one(&self.connect_failures),
            connect_backoff: self.connect_backoff.with_label_values(&[name]),
            signing_failures: one(&self.signing_failures),
        }
    }

    /// Withdraws every label set of an upstream a reload removed, so dashboards stop
    /// showing it. Handles still held by its draining requests update nothing visible.
    pub fn remove_upstream(&self, name: &str) {
        for family in [
            &self.increases,
            &self.decreases,
            &self.invocations,
            &self.sleeps,
            &self.budget_exhausted,
            &self.connect_failures,
            &self.signing_failures,
        ] {
            let _ = family.remove_label_values(&[name]);
        }
        let _ = self.sleep_seconds.remove_label_values(&[name]);
        for family in [
            &self.interval,
            &self.max_interval,
            &self.pause,
            &self.connect_backoff,
        ] {
            let _ = family.remove_label_values(&[name]);
        }
        for family in [&self.queue_waiting, &self.in_flight] {
            let _ = family.remove_label_values(&[name]);
        }
        for family in [&self.queue_wait, &self.upstream_duration] {
            let _ = family.remove_label_values(&[name]);
        }
        for outcome in Outcome::ALL {
            let _ = self.requests.remove_label_values(&[name, outcome.as_str()]);
        }
        for signal in Signal::ALL {
            let _ = self.throttles.remove_label_values(&[name, signal.as_str()]);
        }
        for hint in Hint::ALL {
            let _ = self
                .hints_capped
                .remove_label_values(&[name, hint.as_str()]);
        }
        for reason in RetryReason::ALL {
            let _ = self.retries.remove_label_values(&[name, reason.as_str()]);
        }
        for status in 100..1000u16 {
            let _ = self
                .responses
                .remove_label_values(&[name, &status.to_string()]);
        }
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
    pub fn request(&self, outcome: Outcome) -> &IntCounter {
        &self.requests[outcome as usize]
    }

    /// The throttles counter of one signal.
    pub fn throttle(&self, signal: Signal) -> &IntCounter {
        &self.throttles[signal as usize]
    }

    /// The capped-pauses counter of one header.
    pub fn hint_capped(&self, hint: Hint) -> &IntCounter {
        &self.hints_capped[hint as usize]
    }

    /// The retries counter of one reason.
    pub fn retry(&self, reason: RetryReason) -> &IntCounter {
        &self.retries[reason as usize]
    }

    /// Counts one upstream answer with `status`.
    pub fn response(&self, status: u16) {
        match self.responses.counter(status) {
            Some(counter) => counter.inc(),
            None => self.responses.make(status).inc(),
        }
    }
}

impl Responses {
    /// The counter of a status from 100 to 599, made on first use.
    fn counter(&self, status: u16) -> Option<&IntCounter> {
        let cell = self.by_status.get(usize::from(status).wrapping_sub(100))?;
        Some(cell.get_or_init(|| self.make(status)))
    }

    fn make(&self, status: u16) -> IntCounter {
        self.family
            .with_label_values(&[self.upstream.as_str(), &status.to_string()])
    }
}

fn opts(name: &str, help: &str) -> Opts {
    Opts::new(name, help)
}

fn register<C: prometheus::core::Collector + Clone + 'static>(
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
