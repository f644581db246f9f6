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
use crate::fleet::Fleet;
use crate::hints::{self, Hint, Quota, Reading};
use crate::lane::{Lane, Lanes, Pass, Route};
use crate::metrics::{Metrics, RetryReason, UpstreamMetrics};
use crate::notice::Notice;
use crate::pacer::{Shed, Slot};
use crate::quota::{self, Decision};
use crate::retry::RetryBudget;
use crate::shed::SDK_HINT_CAP;
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
    /// The upstream's lanes, each with its own controller and pacer.
    pub lanes: Lanes,
    pub metrics: UpstreamMetrics,
    pub budget: RetryBudget,
    clock: Clock,
    /// Time zero for the budget's and the controllers' clocks.
    origin: Instant,
    connect: Mutex<(ConnectBackoff, fastrand::Rng)>,
    /// No connection backoff in force: the fast path skips the lock.
    connect_healthy: AtomicBool,
    /// Why the latest connection failed, for the answers the backoff turns away.
    connect_cause: Mutex<Option<ConnectCause>>,
    /// One warning per 10 s about 401/403 answers.
    auth_notice: Notice,
    /// One line per second about shed requests.
    shed_notice: Notice,
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
        let settings = Arc::new(settings);
        let reach = hint_reach(settings.preset);
        let lanes = Lanes::new(
            Arc::clone(&settings),
            clock.clone(),
            metrics,
            (rng, spread_seed),
            reach,
        );
        let control = Control {
            lanes,
            metrics: metrics.upstream(&settings.name),
            budget: RetryBudget::new(
                settings.retry.budget_ratio,
                settings.retry.budget_min_per_second,
            ),
            origin: clock.now(),
            clock,
            connect: Mutex::new((ConnectBackoff::new(&settings.connect_backoff), connect_rng)),
            connect_healthy: AtomicBool::new(true),
            connect_cause: Mutex::new(None),
            auth_notice: Notice::every(Duration::from_secs(10)),
            shed_notice: Notice::every(Duration::from_secs(1)),
            capped_logged: Hint::ALL.map(|_| AtomicBool::new(false)),
            settings,
            observer,
        };
        control
            .metrics
            .max_interval
            .set(control.settings.sleeper.max_interval.as_secs_f64());
        control.metrics.lanes.set(1);
        // `constant` starts at its interval.
        let lane = control.lanes.default_lane();
        control.publish(lane, &lane.lock());
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

    /// Waits for a slot in `lane` (or is shed at once, told when to come back; see
    /// [`crate::shed::Spread`]) and counts the wait; `patient`: see
    /// [`crate::pacer::Pacer::acquire_with`]. A lane that left a slot unused for
    /// `idle_decay` first forgets its throttles.
    pub async fn acquire(
        &self,
        lane: &Lane,
        deadline: Instant,
        patient: bool,
    ) -> Result<Slot, Shed> {
        if let Some(link) = lane.fleet() {
            link.arrived();
        }
        if !lane.pacer.interval().is_zero() {
            self.forget_if_idle(lane, self.clock.now());
        }
        let started = if lane.start.is_over() {
            Duration::ZERO
        } else if lane.pacer.interval().is_zero() {
            lane.start.enter(&self.clock, deadline).await
        } else {
            lane.start.end();
            Duration::ZERO
        };
        let slot = match lane.pacer.acquire_with(deadline, patient).await {
            Ok(slot) if started.is_zero() => slot,
            // Counted as waiting, not as a sleep: the sleeper did not hold it.
            Ok(slot) => Slot {
                waited: slot.waited + started,
                ..slot
            },
            Err(shed) => {
                let now = self.clock.now();
                let spacing = lane.pacer.spacing();
                return Err(Shed {
                    retry_after: lane.spread.retry_after(now, shed.retry_after, spacing),
                    ..shed
                });
            }
        };
        lane.metrics.dispatches.inc();
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

    /// A request was turned away from `lane`: a line at most once a second, with how
    /// many sheds it stands for.
    pub fn shed_noticed(&self, lane: &Lane) {
        let at = self.clock.now().saturating_duration_since(self.origin);
        if let Some(shed) = self.shed_notice.hit(at) {
            let interval_ms = lane.interval().as_secs_f64() * 1e3;
            let waiting = lane.pacer.waiting();
            tracing::info!(upstream = %self.name(), lane = lane.name(), shed, waiting, interval_ms, "shedding requests");
        }
    }

    /// Takes the interval of a lane that left its slots unused for `idle_decay` to
    /// 0, as a run of successes would: a throttle storm at night does not tax the
    /// morning's traffic.
    pub fn forget_if_idle(&self, lane: &Lane, now: Instant) {
        let decay = self.settings.lanes.idle_decay;
        // A fleet's interval is the fleet's: one idle member does not lower it.
        if decay.is_zero() || lane.fleet().is_some() || !lane.idle_for(decay, now) {
            return;
        }
        let mut controller = lane.lock();
        if controller.forget() {
            tracing::debug!(upstream = %self.name(), lane = lane.name(), "idle lane forgot its throttles");
            self.metrics.decreases.inc();
            self.publish(lane, &controller);
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

    /// Applies an answer's rate-limit windows to `lane` as [`quota::decide`] says: go,
    /// pace until the reset, or pause until it (a `ratelimit` throttle). The window
    /// counts as at most `max_pause` long.
    pub fn apply_quota(&self, lane: &Lane, windows: &Reading<'_>, now: Instant) {
        let in_flight = u64::try_from(self.metrics.in_flight.get()).unwrap_or(0);
        let spend = self.settings.quota;
        let decide = |window: Quota, fall: &quota::Fall, unknown: f64| {
            quota::decide(
                spend,
                window,
                in_flight,
                fall.observe(window.remaining, unknown),
            )
        };
        let requests = windows
            .requests
            .map(|w| decide(w, &lane.falls.requests, 1.0));
        let tokens = windows.tokens.map(|w| decide(w, &lane.falls.tokens, 1.0));
        let decision = match (requests, tokens) {
            (Some(r), Some(t)) => quota::stricter(r, t),
            (r, t) => r.or(t).unwrap_or(Decision::Go),
        };
        match decision {
            Decision::Go => {
                if lane.pacer.floor(now).is_some() {
                    lane.pacer.set_floor(Duration::ZERO, now);
                }
            }
            Decision::Pace { spacing, until } => {
                let until = self.cap(lane, until, Hint::RateLimit, now);
                lane.pacer.set_floor(spacing.min(until), now + until);
            }
            Decision::Pause { until } => {
                let until = self.cap(lane, until, Hint::RateLimit, now);
                self.metrics.throttle(Signal::RateLimit).inc();
                lane.metrics.throttle(Signal::RateLimit).inc();
                if lane.pacer.paused_until(now).is_none() {
                    tracing::info!(upstream = %self.name(), lane = lane.name(), pause_ms = until.as_millis() as u64, "paused until the upstream's rate-limit window resets");
                }
                lane.pacer.pause_until(now + until);
            }
        }
    }

    /// Cuts a pause a header asked for to `max_pause` (and `max_interval`); a cut is
    /// counted, remembered for `/status` and logged the first time each header does it.
    fn cap(&self, lane: &Lane, asked: Duration, header: Hint, now: Instant) -> Duration {
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
        *lane.capped.lock().unwrap_or_else(PoisonError::into_inner) = Some(CappedHint {
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

    /// The default lane's latest capped hint while its pause or window lasts.
    pub fn capped_hint(&self) -> Option<CappedHint> {
        self.capped_hint_in(self.lanes.default_lane())
    }

    /// A lane's latest capped hint while its pause or window lasts.
    pub fn capped_hint_in(&self, lane: &Lane) -> Option<CappedHint> {
        let now = self.clock.now();
        let capped = *lane.capped.lock().unwrap_or_else(PoisonError::into_inner);
        capped.filter(|c| c.until > now)
    }

    /// The default lane's rate-limit floor in force (the least spacing) and when it
    /// ends, in wall-clock time.
    pub fn rate_limit_floor(&self) -> Option<(Duration, SystemTime)> {
        self.rate_limit_floor_in(self.lanes.default_lane())
    }

    /// A lane's rate-limit floor in force and when it ends, in wall-clock time.
    pub fn rate_limit_floor_in(&self, lane: &Lane) -> Option<(Duration, SystemTime)> {
        let now = self.clock.now();
        let (spacing, end) = lane.pacer.floor(now)?;
        Some((spacing, self.clock.wall() + (end - now)))
    }

    /// Feeds one attempt's verdict to every lane it held; `pause` is the throttle's
    /// requested delay and the header that asked for it, which holds those lanes
    /// (capped by `max_pause` and `max_interval`).
    pub fn settle(&self, pass: &Pass, verdict: Option<Verdict>, pause: Option<(Duration, Hint)>) {
        self.observe(pass.slot(), verdict);
        if let Some(Verdict::Throttle(signal)) = verdict {
            self.metrics.throttle(signal).inc();
        }
        for (lane, slot) in pass.iter() {
            self.record(lane, slot, verdict, pause);
        }
    }

    /// A batch answer that left some tables' items unprocessed: the lanes of those
    /// tables (`TABLE:access`) are told of a partial throttle, the others of a success.
    pub fn settle_by_table(&self, pass: &Pass, unprocessed: impl Fn(&str) -> bool) {
        let partial = Some(Verdict::Throttle(Signal::Partial));
        self.observe(pass.slot(), partial);
        self.metrics.throttle(Signal::Partial).inc();
        for (lane, slot) in pass.iter() {
            let table = lane.name().split_once(':').map_or(lane.name(), |(t, _)| t);
            let verdict = if unprocessed(table) {
                partial
            } else {
                Some(Verdict::Success)
            };
            self.record(lane, slot, verdict, None);
        }
    }

    /// Tells observers (the demo's plot, traces) of one attempt.
    pub fn observe(&self, slot: &Slot, verdict: Option<Verdict>) {
        if let Some(observe) = &self.observer {
            observe(&Attempt {
                dispatched_at: slot.dispatched_at,
                interval: slot.interval,
                held: slot.held,
                verdict,
            });
        }
    }

    /// Feeds a verdict to one lane's controller; `slot` is the lane's slot of the
    /// attempt (its epoch decides whether a throttle raises). Upstream-level counts are
    /// [`Control::settle`]'s.
    pub fn record(
        &self,
        lane: &Lane,
        slot: &Slot,
        verdict: Option<Verdict>,
        pause: Option<(Duration, Hint)>,
    ) {
        match verdict {
            Some(Verdict::Throttle(signal)) => {
                lane.metrics.throttle(signal).inc();
                lane.throttled(signal.as_str(), None, self.clock.wall());
                let now = self.clock.now();
                if let Some((asked, header)) = pause {
                    let delay = self.cap(lane, asked, header, now);
                    if lane.pacer.paused_until(now).is_none() {
                        tracing::info!(upstream = %self.name(), lane = lane.name(), pause_ms = delay.as_millis() as u64, "paused by the upstream's Retry-After");
                    }
                    lane.pacer.pause_until(now + delay);
                }
                let spacing = lane.pacer.observed_spacing(now);
                let mut controller = lane.lock();
                let at = now.saturating_duration_since(self.origin);
                let step = if signal == Signal::Overload {
                    controller.on_overload(slot.epoch, spacing, at)
                } else {
                    controller.on_throttle(slot.epoch, spacing, at)
                };
                self.apply(lane, &controller, step);
                // After the raise, so the requests it lets go meet the new interval.
                lane.start.answered(true, false);
            }
            Some(Verdict::Success) => {
                lane.start.answered(false, true);
                // Successes at interval 0 change nothing: no lock on the fast path.
                if lane.pacer.interval().is_zero() {
                    self.metrics.invocations.inc();
                    return;
                }
                let at = self.clock.now().saturating_duration_since(self.origin);
                let mut controller = lane.lock();
                let step = controller.on_success(slot.epoch, at);
                self.apply(lane, &controller, step);
            }
            Some(Verdict::Failure) | None => lane.start.answered(false, false),
        }
    }

    /// Waits for a slot in each lane of `route`, in order (`patient`: see
    /// [`Control::acquire`]); a shed names the lane that shed the request.
    pub async fn acquire_route<'r>(
        &self,
        route: &'r Route,
        deadline: Instant,
        patient: bool,
    ) -> Result<Pass, (Shed, &'r Arc<Lane>)> {
        let slot = self
            .acquire(&route.first, deadline, patient)
            .await
            .map_err(|shed| (shed, &route.first))?;
        let mut pass = Pass::one(Arc::clone(&route.first), slot);
        for lane in &route.more {
            let slot = self
                .acquire(lane, deadline, patient)
                .await
                .map_err(|shed| (shed, lane))?;
            pass.add(Arc::clone(lane), slot);
        }
        Ok(pass)
    }

    /// A pass for `lane` standing in for `pass` when the answer named a lane the
    /// attempt did not hold (the upstream's own bucket, a hot key's lane made after it
    /// went): it counts as dispatched in the epoch that lane had when it went.
    pub fn pass_for(&self, lane: Arc<Lane>, pass: &Pass) -> Pass {
        if let Some(slot) = pass.slot_in(&lane) {
            let slot = *slot;
            return Pass::one(lane, slot);
        }
        let slot = Slot {
            epoch: lane.pacer.epoch_at(pass.slot().dispatched_at),
            ..*pass.slot()
        };
        Pass::one(lane, slot)
    }

    /// A throttle whose answer named the resources throttled: each named lane is
    /// raised (as a throttle dispatched in its current epoch, unless the attempt
    /// held it) and remembers the upstream's reason; the lanes the attempt held and
    /// the answer did not name are told nothing.
    pub fn settle_routed(&self, pass: &Pass, signal: Signal, named: &[(Arc<Lane>, &str, &str)]) {
        let verdict = Some(Verdict::Throttle(signal));
        self.observe(pass.slot(), verdict);
        self.metrics.throttle(signal).inc();
        for (lane, reason, resource) in named {
            let routed = self.pass_for(Arc::clone(lane), pass);
            self.record(lane, routed.slot(), verdict, None);
            lane.throttled(reason, Some(resource), self.clock.wall());
        }
    }

    /// Joins the fleet with every lane, those made later included.
    pub fn join_fleet(&self, fleet: Arc<Fleet>) {
        self.lanes
            .join_fleet(fleet, self.origin, self.metrics.interval.clone());
    }

    /// Puts every lane's interval back to 0 and lifts any pause (admin reset).
    pub fn reset(&self) {
        for lane in self.lanes.all() {
            let mut controller = lane.lock();
            controller.reset(&self.settings.sleeper);
            lane.pacer.lift_pause();
            self.publish(&lane, &controller);
        }
    }

    /// The default lane's interval, as the pacer applies it.
    pub fn interval(&self) -> Duration {
        self.lanes.default_lane().interval()
    }

    /// When the default lane's pause ends, in wall-clock time.
    pub fn paused_until(&self) -> Option<SystemTime> {
        self.paused_until_in(self.lanes.default_lane())
    }

    /// When a lane's pause ends, in wall-clock time.
    pub fn paused_until_in(&self, lane: &Lane) -> Option<SystemTime> {
        let now = self.clock.now();
        let end = lane.pacer.paused_until(now)?;
        Some(self.clock.wall() + (end - now))
    }

    /// Requests waiting for a slot, over all lanes.
    pub fn waiting(&self) -> usize {
        self.lanes.all().iter().map(|l| l.pacer.waiting()).sum()
    }

    /// From now on no request waits past `by` (the shutdown drain), in every lane.
    pub fn drain(&self, by: Instant) {
        self.lanes.drain(by);
    }

    /// Sets the gauges that depend on the moment of the scrape; idle lanes forget
    /// their throttles or are dropped first.
    pub fn refresh_gauges(&self) {
        let now = self.clock.now();
        self.lanes.drop_idle(now);
        let lanes = self.lanes.all();
        let mut pause = Duration::ZERO;
        let mut waiting = 0;
        for lane in &lanes {
            if !lane.interval().is_zero() {
                self.forget_if_idle(lane, now);
            }
            if let Some(end) = lane.pacer.paused_until(now) {
                pause = pause.max(end - now);
            }
            waiting += lane.pacer.waiting();
        }
        self.lanes.refresh_gauges();
        self.metrics.lanes.set(lanes.len() as i64);
        self.metrics.pause.set(pause.as_secs_f64());
        self.metrics.queue_waiting.set(waiting as i64);
        self.metrics
            .connect_backoff
            .set(self.connect_backoff_remaining(now).as_secs_f64());
    }

    fn apply(&self, lane: &Lane, controller: &Controller<fastrand::Rng>, step: Option<Step>) {
        let Some(step) = step else {
            return;
        };
        self.metrics.invocations.inc();
        match step {
            Step::Up => self.metrics.increases.inc(),
            Step::Down => self.metrics.decreases.inc(),
            Step::Unchanged => return,
        }
        lane.stepped(controller, step);
        self.publish(lane, controller);
    }

    /// Hands a lane controller's interval to its pacer and gauges; the upstream's
    /// interval gauge shows the default lane.
    fn publish(&self, lane: &Lane, controller: &Controller<fastrand::Rng>) {
        let before = lane.pacer.interval();
        let interval = lane.pace(controller);
        let interval_ms = interval.as_secs_f64() * 1e3;
        let name = lane.name();
        if before.is_zero() && !interval.is_zero() {
            tracing::info!(upstream = %self.name(), lane = name, interval_ms, "the upstream throttles; pacing requests");
        } else if !before.is_zero() && interval.is_zero() {
            tracing::info!(upstream = %self.name(), lane = name, "throttling over; requests go at once");
        }
        if std::ptr::eq(lane, self.lanes.default_lane().as_ref()) {
            self.metrics.interval.set(interval.as_secs_f64());
        }
        tracing::debug!(upstream = %self.name(), lane = name, interval_ms, "interval changed");
    }

    fn lock_connect(&self) -> MutexGuard<'_, (ConnectBackoff, fastrand::Rng)> {
        self.connect.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests;
