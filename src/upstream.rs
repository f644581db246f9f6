//! One upstream at run time, in two parts. [`Control`] is its decision state: the
//! controller, pacer, retry budget and connection backoff, on one [`Clock`], usable
//! without I/O (`easeoff simulate` runs it in virtual time). [`Upstream`] adds the I/O:
//! the listen address, the classifier, the HTTP client and the signer.
//!
//! `record` is where an attempt's verdict reaches the controller and the new interval
//! reaches the pacer. The fast path (a success at interval 0, a healthy connection)
//! reads atomics and takes no lock.

use std::net::SocketAddr;
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::attempt::Cause;
use crate::clock::Clock;
use crate::config::UpstreamSettings;
use crate::connect_backoff::{Admission, ConnectBackoff};
use crate::controller::Controller;
use crate::hints::{self, Hint, Quota};
use crate::metrics::{Metrics, RetryReason, UpstreamMetrics};
use crate::notice::Notice;
use crate::pacer::{Limits, Pacer, Shed, Slot};
use crate::retry::RetryBudget;
use crate::shed::{SDK_HINT_CAP, Spread};
use crate::sigv4::Signer;
use crate::sleeper::Step;
use crate::throttle::{Classifier, Preset, Signal, Verdict};
use crate::transport::{ClientError, ConnectCause, UpstreamClient};

/// One attempt as observers see it (the demo's plot, traces).
#[derive(Clone, Copy, Debug)]
pub struct Attempt {
    pub dispatched_at: Instant,
    /// The interval in force when the attempt was released.
    pub interval: Duration,
    /// The spacing or a pause held it: its slot lay after its arrival.
    pub held: bool,
    /// `None` when no answer came (timeout, connection failure).
    pub verdict: Option<Verdict>,
}

/// A pause or rate-limit window an upstream header asked for that was cut to
/// `max_pause`, as `/status` shows it while it lasts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CappedHint {
    pub header: Hint,
    /// What the header asked for.
    pub asked: Duration,
    /// When the cut-down pause or window ends.
    pub until: Instant,
}

/// Called once per finished attempt.
pub type Observer = Arc<dyn Fn(&Attempt) + Send + Sync>;

/// One configured upstream, shared by its listener's connections and the admin server.
/// Its decision state is reached through `Deref` to [`Control`].
pub struct Upstream {
    control: Control,
    /// The bound listen address (the configured one, unless its port was 0).
    pub listen: SocketAddr,
    pub classifier: Classifier,
    pub client: UpstreamClient,
    /// Re-signs every attempt when `[upstream.sigv4]` is set.
    pub signer: Option<Signer>,
    /// Requests seen, for `access_log = "sample:N"`.
    pub access_seen: AtomicU64,
}

/// One upstream's decisions and their state, without I/O: what the proxy and
/// `easeoff simulate` share.
pub struct Control {
    pub settings: Arc<UpstreamSettings>,
    pub pacer: Pacer,
    pub metrics: UpstreamMetrics,
    pub budget: RetryBudget,
    /// Where shed requests are told to come back.
    spread: Spread,
    clock: Clock,
    /// Time zero for the budget's and the controller's clocks.
    origin: Instant,
    controller: Mutex<Controller<fastrand::Rng>>,
    connect: Mutex<(ConnectBackoff, fastrand::Rng)>,
    /// No connection backoff in force: the fast path skips the lock.
    connect_healthy: AtomicBool,
    /// Why the latest connection failed, for the answers the backoff turns away.
    connect_cause: Mutex<Option<ConnectCause>>,
    /// One warning per 10 s about 401/403 answers.
    auth_notice: Notice,
    /// One line per second about shed requests.
    shed_notice: Notice,
    /// The latest capped hint; written only when a header asks for too much.
    capped: Mutex<Option<CappedHint>>,
    /// Per header kind: a capped pause was logged (once is enough to find the cause).
    capped_logged: [AtomicBool; Hint::ALL.len()],
    observer: Option<Observer>,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("name", &self.name())
            .field("listen", &self.listen)
            .finish()
    }
}

impl std::fmt::Debug for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Control")
            .field("name", &self.name())
            .finish()
    }
}

impl Deref for Upstream {
    type Target = Control;

    fn deref(&self) -> &Control {
        &self.control
    }
}

impl Upstream {
    /// Builds the upstream's state; its metrics are published at once. `signer` is
    /// required when the settings have `[upstream.sigv4]`, and ignored otherwise.
    pub fn new(
        settings: UpstreamSettings,
        listen: SocketAddr,
        metrics: &Metrics,
        observer: Option<Observer>,
        signer: Option<Signer>,
    ) -> Result<Upstream, ClientError> {
        let client = UpstreamClient::new(&settings)?;
        Ok(Upstream {
            classifier: Classifier::new(settings.preset, settings.throttle.clone()),
            signer: signer.filter(|_| settings.sigv4.is_some()),
            control: Control::new(
                settings,
                metrics,
                observer,
                fastrand::Rng::new(),
                Clock::Tokio,
            ),
            listen,
            client,
            access_seen: AtomicU64::new(0),
        })
    }
}

/// How far ahead a shed client honours a hint: the AWS SDKs wait at most their own
/// backoff + 5 s (botocore's and the JS SDK's standard mode); others are taken at
/// their word.
fn hint_reach(preset: Preset) -> Duration {
    if preset.is_aws() {
        SDK_HINT_CAP
    } else {
        Duration::from_secs(3600)
    }
}

impl Control {
    /// Builds the decision state on `clock`, with the random source of the sleeper and
    /// the connection backoff given (so a simulation is reproducible); its metrics are
    /// published at once.
    pub fn new(
        settings: UpstreamSettings,
        metrics: &Metrics,
        observer: Option<Observer>,
        mut rng: fastrand::Rng,
        clock: Clock,
    ) -> Control {
        let connect_rng = rng.fork();
        // Read, not drawn, so the sleeper's and the backoff's sequences stay as they were.
        let spread_seed = connect_rng.get_seed() ^ 0x5bd1_e995;
        let controller = Controller::new(&settings.sleeper, rng);
        let limits = Limits {
            max_waiting: settings.queue.max_waiting,
        };
        let control = Control {
            pacer: Pacer::with_clock(settings.sleeper.mode, limits, clock.clone()),
            metrics: metrics.upstream(&settings.name),
            budget: RetryBudget::new(
                settings.retry.budget_ratio,
                settings.retry.budget_min_per_second,
            ),
            origin: clock.now(),
            spread: Spread::new(clock.now(), hint_reach(settings.preset), spread_seed),
            clock,
            connect: Mutex::new((ConnectBackoff::new(&settings.connect_backoff), connect_rng)),
            connect_healthy: AtomicBool::new(true),
            connect_cause: Mutex::new(None),
            auth_notice: Notice::every(Duration::from_secs(10)),
            shed_notice: Notice::every(Duration::from_secs(1)),
            capped: Mutex::new(None),
            capped_logged: Hint::ALL.map(|_| AtomicBool::new(false)),
            settings: Arc::new(settings),
            controller: Mutex::new(controller),
            observer,
        };
        control
            .metrics
            .max_interval
            .set(control.settings.sleeper.max_interval.as_secs_f64());
        // `constant` starts at its interval.
        control.publish(&control.lock());
        control
    }

    /// The upstream's name.
    pub fn name(&self) -> &str {
        &self.settings.name
    }

    /// The clock every decision of this upstream reads.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// Nanoseconds on the budget's clock.
    fn budget_ns(&self, now: Instant) -> u64 {
        u64::try_from(now.saturating_duration_since(self.origin).as_nanos()).unwrap_or(u64::MAX)
    }

    /// Counts a retry the attempt policy sent.
    pub fn retried(&self, cause: Cause) {
        let reason = match cause {
            Cause::Throttle => RetryReason::Throttle,
            Cause::Connect => RetryReason::Connect,
        };
        self.metrics.retry(reason).inc();
    }

    /// Counts a client request toward the retry budget.
    pub fn deposit(&self, now: Instant) {
        self.budget.deposit(self.budget_ns(now));
    }

    /// Takes a retry from the budget, counting a refusal.
    pub fn withdraw(&self, now: Instant) -> bool {
        let ok = self.budget.withdraw(self.budget_ns(now));
        if !ok {
            self.metrics.budget_exhausted.inc();
        }
        ok
    }

    /// Waits for a slot (or is shed at once, told when to come back; see
    /// [`Spread`]) and counts the wait; `patient`: see [`Pacer::acquire_with`].
    pub async fn acquire(&self, deadline: Instant, patient: bool) -> Result<Slot, Shed> {
        let slot = match self.pacer.acquire_with(deadline, patient).await {
            Ok(slot) => slot,
            Err(shed) => {
                let now = self.clock.now();
                let spacing = self.pacer.spacing();
                return Err(Shed {
                    retry_after: self.spread.retry_after(now, shed.retry_after, spacing),
                    ..shed
                });
            }
        };
        let waited = slot.waited.as_secs_f64();
        self.metrics.queue_wait.observe(waited);
        if slot.held {
            self.metrics.sleeps.inc();
            self.metrics.sleep_seconds.inc_by(waited);
        }
        Ok(slot)
    }

    /// Whether the connection backoff lets a request try the upstream now.
    pub fn admit(&self, now: Instant) -> Admission {
        if self.connect_healthy.load(Ordering::Relaxed) {
            return Admission::Open;
        }
        self.lock_connect().0.admit(now.into_std())
    }

    /// A connection could not be made for `cause`: starts or steps the backoff.
    pub fn connect_failed(&self, now: Instant, cause: &ConnectCause) {
        self.metrics.connect_failures.inc();
        let mut guard = self.lock_connect();
        let (backoff, rng) = &mut *guard;
        if let Some(wait) = backoff.on_failure(now.into_std(), rng) {
            self.connect_healthy.store(false, Ordering::Relaxed);
            tracing::warn!(upstream = %self.name(), %cause, backoff_ms = wait.as_millis() as u64, "cannot connect; backing off");
        }
        drop(guard);
        *self
            .connect_cause
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(cause.clone());
    }

    /// The upstream answered 401 or 403: a warning, at most one per 10 s, with how
    /// many such answers it stands for.
    pub fn auth_failed(&self, status: u16) {
        let at = self.clock.now().saturating_duration_since(self.origin);
        if let Some(answers) = self.auth_notice.hit(at) {
            tracing::warn!(upstream = %self.name(), status, answers, "the upstream refuses requests as unauthorised; check the credentials and its access policy");
        }
    }

    /// A request was turned away: a line at most once a second, with how many sheds
    /// it stands for.
    pub fn shed_noticed(&self) {
        let at = self.clock.now().saturating_duration_since(self.origin);
        if let Some(shed) = self.shed_notice.hit(at) {
            let interval_ms = self.pacer.interval().as_secs_f64() * 1e3;
            let waiting = self.pacer.waiting();
            tracing::info!(upstream = %self.name(), shed, waiting, interval_ms, "shedding requests");
        }
    }

    /// Why the latest connection attempt failed, if one has.
    pub fn connect_cause(&self) -> Option<ConnectCause> {
        self.connect_cause
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The upstream answered: ends any backoff.
    pub fn connected(&self) {
        if self.connect_healthy.load(Ordering::Relaxed) {
            return;
        }
        if self.lock_connect().0.on_success() {
            tracing::info!(upstream = %self.name(), "connected again; backoff reset");
        }
        self.connect_healthy.store(true, Ordering::Relaxed);
    }

    /// How long the connection backoff still turns requests away.
    pub fn connect_backoff_remaining(&self, now: Instant) -> Duration {
        if self.connect_healthy.load(Ordering::Relaxed) {
            return Duration::ZERO;
        }
        self.lock_connect().0.remaining(now.into_std())
    }

    /// Applies an answer's rate-limit quota: nothing left pauses the upstream until the
    /// reset (a `ratelimit` throttle); otherwise what is left is spread over the window.
    /// The window counts as at most `max_pause` long.
    pub fn apply_quota(&self, quota: Quota, now: Instant) {
        let wall = self.clock.wall();
        let reset = self.cap(quota.reset_in(wall), Hint::RateLimit, now);
        if quota.remaining == 0 {
            self.metrics.throttle(Signal::RateLimit).inc();
            if self.pacer.paused_until(now).is_none() {
                tracing::info!(upstream = %self.name(), pause_ms = reset.as_millis() as u64, "paused until the upstream's rate-limit window resets");
            }
            self.pacer.pause_until(now + reset);
        } else {
            self.pacer
                .set_floor(quota.spacing(wall).min(reset), now + reset);
        }
    }

    /// Cuts a pause a header asked for to `max_pause` (and `max_interval`); a cut is
    /// counted, remembered for `/status` and logged the first time each header does it.
    fn cap(&self, asked: Duration, header: Hint, now: Instant) -> Duration {
        let max = self
            .settings
            .max_pause
            .min(self.settings.sleeper.max_interval);
        let (pause, capped) = hints::cap(asked, max);
        if !capped {
            return pause;
        }
        self.metrics.hint_capped(header).inc();
        let until = now + pause;
        *self.capped.lock().unwrap_or_else(PoisonError::into_inner) = Some(CappedHint {
            header,
            asked,
            until,
        });
        if !self.capped_logged[header as usize].swap(true, Ordering::Relaxed) {
            tracing::warn!(
                upstream = %self.name(),
                header = header.as_str(),
                asked_s = asked.as_secs_f64(),
                max_pause_s = max.as_secs_f64(),
                "the upstream asked for a longer pause than max_pause; capped (logged once per header)"
            );
        }
        pause
    }

    /// The latest capped hint while its pause or window lasts.
    pub fn capped_hint(&self) -> Option<CappedHint> {
        let now = self.clock.now();
        let capped = *self.capped.lock().unwrap_or_else(PoisonError::into_inner);
        capped.filter(|c| c.until > now)
    }

    /// The rate-limit floor in force (the least spacing) and when it ends, in
    /// wall-clock time.
    pub fn rate_limit_floor(&self) -> Option<(Duration, SystemTime)> {
        let now = self.clock.now();
        let (spacing, end) = self.pacer.floor(now)?;
        Some((spacing, self.clock.wall() + (end - now)))
    }

    /// Feeds one attempt's verdict to the controller; `pause` is the throttle's
    /// requested delay and the header that asked for it, which holds the whole upstream
    /// (capped by `max_pause` and `max_interval`).
    pub fn record(&self, slot: &Slot, verdict: Option<Verdict>, pause: Option<(Duration, Hint)>) {
        if let Some(observe) = &self.observer {
            observe(&Attempt {
                dispatched_at: slot.dispatched_at,
                interval: slot.interval,
                held: slot.held,
                verdict,
            });
        }
        match verdict {
            Some(Verdict::Throttle(signal)) => {
                self.metrics.throttle(signal).inc();
                let now = self.clock.now();
                if let Some((asked, header)) = pause {
                    let delay = self.cap(asked, header, now);
                    if self.pacer.paused_until(now).is_none() {
                        tracing::info!(upstream = %self.name(), pause_ms = delay.as_millis() as u64, "paused by the upstream's Retry-After");
                    }
                    self.pacer.pause_until(now + delay);
                }
                let spacing = self.pacer.observed_spacing(now);
                let mut controller = self.lock();
                let at = now.saturating_duration_since(self.origin);
                let step = controller.on_throttle(slot.epoch, spacing, at);
                self.apply(&controller, step);
            }
            Some(Verdict::Success) => {
                // Successes at interval 0 change nothing: no lock on the fast path.
                if self.pacer.interval().is_zero() {
                    self.metrics.invocations.inc();
                    return;
                }
                let at = self.clock.now().saturating_duration_since(self.origin);
                let mut controller = self.lock();
                let step = controller.on_success(slot.epoch, at);
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
        let now = self.clock.now();
        let end = self.pacer.paused_until(now)?;
        Some(self.clock.wall() + (end - now))
    }

    /// Sets the gauges that depend on the moment of the scrape.
    pub fn refresh_gauges(&self) {
        let now = self.clock.now();
        let pause = self
            .pacer
            .paused_until(now)
            .map_or(0.0, |end| (end - now).as_secs_f64());
        self.metrics.pause.set(pause);
        self.metrics.queue_waiting.set(self.pacer.waiting() as i64);
        self.metrics
            .connect_backoff
            .set(self.connect_backoff_remaining(now).as_secs_f64());
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
        let before = self.pacer.interval();
        let interval_ms = interval.as_secs_f64() * 1e3;
        if before.is_zero() && !interval.is_zero() {
            tracing::info!(upstream = %self.name(), interval_ms, "the upstream throttles; pacing requests");
        } else if !before.is_zero() && interval.is_zero() {
            tracing::info!(upstream = %self.name(), "throttling over; requests go at once");
        }
        self.pacer.set_interval(interval, controller.epoch());
        self.metrics.interval.set(interval.as_secs_f64());
        tracing::debug!(upstream = %self.name(), interval_ms, "interval changed");
    }

    fn lock(&self) -> MutexGuard<'_, Controller<fastrand::Rng>> {
        // A panic while holding the lock cannot leave the controller half-updated in a
        // way that matters more than stopping the proxy would.
        self.controller
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn lock_connect(&self) -> MutexGuard<'_, (ConnectBackoff, fastrand::Rng)> {
        self.connect.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests;
