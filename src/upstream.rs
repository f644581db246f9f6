//! One upstream at run time: its controller, pacer, classifier, client and metrics.
//!
//! `record` is where an attempt's verdict reaches the controller and the new interval
//! reaches the pacer; a success at interval 0 is the fast path and takes no lock.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::config::UpstreamSettings;
use crate::controller::Controller;
use crate::metrics::{Metrics, UpstreamMetrics};
use crate::pacer::{Pacer, Slot};
use crate::proxy::{ClientError, UpstreamClient};
use crate::sleeper::Step;
use crate::throttle::{Classifier, Verdict};

/// One attempt as observers see it (the demo's plot, traces).
#[derive(Clone, Copy, Debug)]
pub struct Attempt {
    pub dispatched_at: Instant,
    /// The interval in force when the attempt was released.
    pub interval: Duration,
    /// `None` when no answer came (timeout, connection failure).
    pub verdict: Option<Verdict>,
}

/// Called once per finished attempt.
pub type Observer = Arc<dyn Fn(&Attempt) + Send + Sync>;

/// One configured upstream, shared by its listener's connections and the admin server.
pub struct Upstream {
    pub settings: Arc<UpstreamSettings>,
    /// The bound listen address (the configured one, unless its port was 0).
    pub listen: SocketAddr,
    pub pacer: Pacer,
    pub classifier: Classifier,
    pub client: UpstreamClient,
    pub metrics: UpstreamMetrics,
    controller: Mutex<Controller<fastrand::Rng>>,
    observer: Option<Observer>,
}

impl Upstream {
    /// Builds the upstream's state; its metrics are published at once.
    pub fn new(
        settings: UpstreamSettings,
        listen: SocketAddr,
        metrics: &Metrics,
        observer: Option<Observer>,
    ) -> Result<Upstream, ClientError> {
        let client = UpstreamClient::new(&settings)?;
        let controller = Controller::new(&settings.sleeper, fastrand::Rng::new());
        let upstream = Upstream {
            classifier: Classifier::new(settings.preset, settings.throttle.clone()),
            pacer: Pacer::new(settings.sleeper.mode),
            metrics: metrics.upstream(&settings.name),
            settings: Arc::new(settings),
            listen,
            client,
            controller: Mutex::new(controller),
            observer,
        };
        // `constant` starts at its interval.
        upstream.publish(&upstream.lock());
        Ok(upstream)
    }

    /// The upstream's name.
    pub fn name(&self) -> &str {
        &self.settings.name
    }

    /// Waits for a slot and counts the wait.
    pub async fn acquire(&self) -> Slot {
        let slot = self.pacer.acquire().await;
        let waited = slot.waited.as_secs_f64();
        self.metrics.queue_wait.observe(waited);
        if slot.held {
            self.metrics.sleeps.inc();
            self.metrics.sleep_seconds.inc_by(waited);
        }
        slot
    }

    /// Feeds one attempt's verdict to the controller; `retry_after` is the throttle's
    /// requested delay, which pauses the whole upstream (capped by `max_interval`).
    pub fn record(&self, slot: &Slot, verdict: Option<Verdict>, retry_after: Option<Duration>) {
        if let Some(observe) = &self.observer {
            observe(&Attempt {
                dispatched_at: slot.dispatched_at,
                interval: slot.interval,
                verdict,
            });
        }
        match verdict {
            Some(Verdict::Throttle(signal)) => {
                self.metrics.throttle(signal).inc();
                let now = Instant::now();
                if let Some(delay) = retry_after {
                    self.pacer
                        .pause_until(now + delay.min(self.settings.sleeper.max_interval));
                }
                let spacing = self.pacer.observed_spacing(now);
                let mut controller = self.lock();
                let step = controller.on_throttle(slot.epoch, spacing);
                self.apply(&controller, step);
            }
            Some(Verdict::Success) => {
                // Successes at interval 0 change nothing: no lock on the fast path.
                if self.pacer.interval().is_zero() {
                    self.metrics.invocations.inc();
                    return;
                }
                let mut controller = self.lock();
                let step = controller.on_success(slot.epoch);
                self.apply(&controller, step);
            }
            Some(Verdict::Failure) | None => {}
        }
    }

    /// Puts the interval back to 0 and lifts any pause (admin reset).
    pub fn reset(&self) {
        let mut controller = self.lock();
        controller.reset(&self.settings.sleeper);
        self.pacer.lift_pause();
        self.publish(&controller);
    }

    /// The current interval, as the pacer applies it.
    pub fn interval(&self) -> Duration {
        self.pacer.interval()
    }

    /// When the current pause ends, in wall-clock time.
    pub fn paused_until(&self) -> Option<SystemTime> {
        let now = Instant::now();
        let end = self.pacer.paused_until(now)?;
        Some(SystemTime::now() + (end - now))
    }

    /// Sets the gauges that depend on the moment of the scrape.
    pub fn refresh_gauges(&self) {
        let now = Instant::now();
        let pause = self
            .pacer
            .paused_until(now)
            .map_or(0.0, |end| (end - now).as_secs_f64());
        self.metrics.pause.set(pause);
        self.metrics.queue_waiting.set(self.pacer.waiting() as i64);
    }

    fn apply(&self, controller: &Controller<fastrand::Rng>, step: Option<Step>) {
        let Some(step) = step else {
            return;
        };
        self.metrics.invocations.inc();
        match step {
            Step::Up => self.metrics.increases.inc(),
            Step::Down => self.metrics.decreases.inc(),
            Step::Unchanged => return,
        }
        self.publish(controller);
    }

    /// Hands the controller's interval to the pacer and the gauge.
    fn publish(&self, controller: &Controller<fastrand::Rng>) {
        let interval = controller.interval();
        self.pacer.set_interval(interval, controller.epoch());
        self.metrics.interval.set(interval.as_secs_f64());
        tracing::debug!(upstream = %self.name(), interval_ms = interval.as_secs_f64() * 1e3, "interval changed");
    }

    fn lock(&self) -> MutexGuard<'_, Controller<fastrand::Rng>> {
        // A panic while holding the lock cannot leave the controller half-updated in a
        // way that matters more than stopping the proxy would.
        self.controller
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}
