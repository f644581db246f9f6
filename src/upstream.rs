//! One upstream at run time, in two parts. [`Control`] is its decision state: the
//! controller, pacer, retry budget and connection backoff, on one [`Clock`], usable
//! without I/O (`easeoff simulate` runs it in virtual time). [`Upstream`] adds the I/O:
//! the listen address, the classifier, the HTTP client and the signer.
//!
//! An attempt ends in [`Control::settle`], which takes its [`Pass`] and the whole
//! answer (verdict, hints, cost) and tells each lane it concerns. The fast path (a success at interval 0, a
//! healthy connection) reads atomics and takes no lock.

use std::net::SocketAddr;
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, SystemTime};

use crate::attempt::Cause;
use crate::clock::{Clock, Instant};
use crate::concurrency::{CapSetting, Why, documented_limit};
use crate::config::UpstreamSettings;
use crate::connect_backoff::{Admission, ConnectBackoff};
use crate::cost::answer::AnswerCost;
use crate::deadline::after;
use crate::fleet::{Fleet, LaneLink};
use crate::flights::{Flights, OnMove};
use crate::lane::{Answer, CappedHint, Lane, Lanes, Pass, Route, Settled, Told};
use crate::metrics::{Metrics, RetryReason, UpstreamMetrics};
use crate::notice::Notice;
use crate::pacer::{Shed, Slot};
use crate::retry::RetryBudget;
use crate::shed::SDK_HINT_CAP;
use crate::sigv4::Signer;
use crate::throttle::{Classifier, Preset, Verdict};
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

/// How an attempt ended, as [`Control::settle`] tells its lanes.
#[derive(Clone, Copy)]
pub enum Settle<'a> {
    /// It never went (the connection backoff turned it away): its lanes only get
    /// their slow start's place back.
    Unsent,
    /// No answer came (a timeout, a connection that broke, a signature that failed).
    NoAnswer,
    /// No connection could be made, for this cause: no answer for the lanes, and the
    /// connection backoff starts or steps ([`Settled::backoff`] says for how long).
    NoConnection(&'a ConnectCause),
    /// The upstream's answer: its verdict, what its headers say, the lanes it is
    /// for, and what it says the request cost.
    Answer(&'a Answer<'a>),
    /// What a streamed answer said the request cost, read at its end (the pass is a
    /// [`Pass::bill`]); its verdict was settled when its head came.
    Cost(&'a AnswerCost),
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
    pub metrics: Arc<UpstreamMetrics>,
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
    observer: Option<Observer>,
    /// `max_in_flight`: the requests out at once, when capped.
    flights: Option<Arc<Flights>>,
    /// A learned cap's link to the fleet, once it joined one: it counts the
    /// requests, so that the member syncs its part while it sends.
    cap_link: OnceLock<LaneLink>,
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
        let upstream_metrics = Arc::clone(lanes.upstream_metrics());
        let flights = {
            let metrics = Arc::clone(&upstream_metrics);
            let (name, learns) = (
                settings.name.clone(),
                settings.max_in_flight == CapSetting::Learn,
            );
            let on_move: OnMove = Box::new(move |cap, why| {
                metrics.in_flight_cap.set(i64::from(cap));
                metrics.cap_move(why).inc();
                // Its own cuts: a fleet member's part moves with the others' caps.
                if matches!(why, Why::Refused | Why::Latency) {
                    tracing::info!(upstream = %name, cap, why = why.as_str(), learns, "max_in_flight moved");
                }
            });
            Flights::new(
                settings.max_in_flight,
                settings.queue.max_waiting,
                clock.clone(),
                Some(on_move),
            )
        };
        if let Some(flights) = &flights {
            flights.start(documented_limit(settings.preset));
            upstream_metrics.in_flight_cap.set(i64::from(flights.cap()));
        }
        let control = Control {
            metrics: upstream_metrics,
            flights,
            origin: lanes.origin(),
            lanes,
            budget: RetryBudget::new(
                settings.retry.budget_ratio,
                settings.retry.budget_min_per_second,
            ),
            clock,
            connect: Mutex::new((ConnectBackoff::new(&settings.connect_backoff), connect_rng)),
            connect_healthy: AtomicBool::new(true),
            connect_cause: Mutex::new(None),
            auth_notice: Notice::every(Duration::from_secs(10)),
            shed_notice: Notice::every(Duration::from_secs(1)),
            settings,
            observer,
            cap_link: OnceLock::new(),
        };
        control
            .metrics
            .max_interval
            .set(control.settings.sleeper.max_interval.as_secs_f64());
        control.metrics.lanes.set(1);
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

    /// Whether the connection backoff lets a request try the upstream now.
    pub fn admit(&self, now: Instant) -> Admission {
        if self.connect_healthy.load(Ordering::Relaxed) {
            return Admission::Open;
        }
        self.lock_connect().0.admit(now)
    }

    /// A connection could not be made for `cause`: starts or steps the backoff;
    /// returns how long it now turns requests away.
    pub fn connect_failed(&self, now: Instant, cause: &ConnectCause) -> Duration {
        self.metrics.connect_failures.inc();
        let mut guard = self.lock_connect();
        let (backoff, rng) = &mut *guard;
        if let Some(wait) = backoff.on_failure(now, rng) {
            self.connect_healthy.store(false, Ordering::Relaxed);
            tracing::warn!(upstream = %self.name(), %cause, backoff_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX), "cannot connect; backing off");
        }
        drop(guard);
        *self
            .connect_cause
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(cause.clone());
        self.connect_backoff_remaining(now)
    }

    /// The upstream was reached, and answered with `status` if it did: ends any
    /// connection backoff, counts the answer and warns of refused credentials (a
    /// 401 or 403 that is not a rate limit, `limited`: GitHub answers those 403).
    pub fn reached(&self, status: Option<u16>, limited: bool) {
        self.connected();
        if let Some(status) = status {
            self.metrics.response(status);
            if matches!(status, 401 | 403) && !limited {
                self.auth_failed(status);
            }
        }
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
            let waiting = lane.waiting();
            tracing::info!(upstream = %self.name(), lane = lane.name(), shed, waiting, interval_ms, "shedding requests");
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
        self.lock_connect().0.remaining(now)
    }

    /// The default lane's latest capped hint while its pause or window lasts.
    pub fn capped_hint(&self) -> Option<CappedHint> {
        self.capped_hint_in(self.lanes.default_lane())
    }

    /// A lane's latest capped hint while its pause or window lasts.
    pub fn capped_hint_in(&self, lane: &Lane) -> Option<CappedHint> {
        lane.capped_hint()
    }

    /// The default lane's rate-limit floor in force (the least spacing) and when it
    /// ends, in wall-clock time.
    pub fn rate_limit_floor(&self) -> Option<(Duration, SystemTime)> {
        self.rate_limit_floor_in(self.lanes.default_lane())
    }

    /// A lane's rate-limit floor in force and when it ends, in wall-clock time.
    pub fn rate_limit_floor_in(&self, lane: &Lane) -> Option<(Duration, SystemTime)> {
        lane.rate_limit_floor()
    }

    /// Ends an attempt: takes its pass and tells each lane it concerns how it went
    /// (its verdict, its hints, its cost); the one way an attempt changes a lane.
    pub fn settle(&self, pass: Pass, how: Settle<'_>) -> Settled {
        match how {
            Settle::Unsent => pass.settle(Told::Nothing),
            Settle::NoAnswer => {
                self.observe(pass.slot(), None);
                pass.settle(Told::Nothing)
            }
            Settle::NoConnection(cause) => {
                self.observe(pass.slot(), None);
                let settled = pass.settle(Told::Nothing);
                let backoff = self.connect_failed(self.clock.now(), cause);
                settled.with_backoff(backoff)
            }
            Settle::Answer(answer) => {
                self.observe(pass.slot(), Some(answer.verdict));
                if let Verdict::Throttle(signal) = answer.verdict {
                    self.metrics.throttle(signal).inc();
                }
                pass.settle(Told::Answer(answer))
            }
            Settle::Cost(cost) => pass.settle(Told::Cost(cost)),
        }
    }

    /// Tells observers (the demo's plot, traces) of one attempt.
    fn observe(&self, slot: &Slot, verdict: Option<Verdict>) {
        if let Some(observe) = &self.observer {
            observe(&Attempt {
                dispatched_at: slot.dispatched_at,
                interval: slot.interval,
                held: slot.held,
                verdict,
            });
        }
    }

    /// Waits for a slot in each lane of `route`, in order (`patient`: see
    /// [`Lane::acquire`]); a shed names the lane that shed the request.
    pub async fn acquire_route<'r>(
        &self,
        route: &'r Route,
        deadline: Instant,
        patient: bool,
    ) -> Result<Pass, (Shed, &'r Arc<Lane>)> {
        let mut flights = Vec::new();
        // Boxed, as a cap is rare: every request's future would carry room for the
        // semaphore's wait otherwise.
        if let Some(upstream) = &self.flights {
            if let Some(link) = self.cap_link.get() {
                link.arrived();
            }
            let flight = Box::pin(upstream.take(deadline))
                .await
                .map_err(|shed| (shed, &route.first))?;
            self.metrics.cap_out.set(i64::from(upstream.out()));
            flights.push(flight);
        }
        if route.first.flights().is_some()
            && let Some(flight) = Box::pin(route.first.take_flight(deadline)).await
        {
            flights.push(flight.map_err(|shed| (shed, &route.first))?);
        }
        let slot = route
            .first
            .acquire(deadline, patient, route.cost, route.who)
            .await
            .map_err(|shed| (shed, &route.first))?;
        let mut pass = Pass::one(Arc::clone(&route.first), slot);
        for (i, lane) in route.more.iter().enumerate() {
            if lane.flights().is_some()
                && let Some(flight) = Box::pin(lane.take_flight(deadline)).await
            {
                flights.push(flight.map_err(|shed| (shed, lane))?);
            }
            let slot = lane
                .acquire(deadline, patient, route.cost_in_more(i), route.who)
                .await
                .map_err(|shed| (shed, lane))?;
            pass.add(Arc::clone(lane), slot);
        }
        Ok(pass.with_flights(flights))
    }

    /// Joins the fleet with every lane, those made later included.
    pub fn join_fleet(&self, fleet: Arc<Fleet>) {
        // The documented limit is the fleet's, not this member's.
        if let Some(flights) = &self.flights {
            flights.start(None);
            self.metrics.in_flight_cap.set(i64::from(flights.cap()));
            if flights.learns() && self.cap_link.get().is_none() {
                let link = fleet.share_upstream_cap(self.name(), Arc::clone(flights));
                let _ = self.cap_link.set(link);
            }
        }
        self.lanes.join_fleet(fleet);
    }

    /// Puts every lane's interval back to 0 and lifts any pause (admin reset).
    pub fn reset(&self) {
        for lane in self.lanes.all() {
            lane.reset();
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
        lane.paused_until()
    }

    /// Requests waiting for a slot, over all lanes.
    pub fn waiting(&self) -> usize {
        let capped = self.flights.as_ref().map_or(0, |f| f.waiting());
        self.lanes.all().iter().map(|l| l.waiting()).sum::<usize>() + capped
    }

    /// `max_in_flight`'s cap and the requests out under it, when capped.
    pub fn flights(&self) -> Option<&Flights> {
        self.flights.as_deref()
    }

    /// From now on no request waits more than `within` from now (the shutdown drain),
    /// in every lane.
    pub fn drain(&self, within: Duration) {
        let by = after(self.clock.now(), within);
        if let Some(flights) = &self.flights {
            flights.drain(by);
        }
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
                lane.forget_if_idle(now);
            }
            if let Some(left) = lane.pause_left(now) {
                pause = pause.max(left);
            }
            waiting += lane.waiting();
        }
        self.lanes.refresh_gauges();
        self.metrics.lanes.set(lanes.len() as i64);
        let headline = self.lanes.slowest().interval();
        self.metrics.interval.set(headline.as_secs_f64());
        self.metrics.pause.set(pause.as_secs_f64());
        if let Some(flights) = &self.flights {
            waiting += flights.waiting();
            self.metrics.cap_out.set(i64::from(flights.out()));
        }
        self.metrics.queue_waiting.set(waiting as i64);
        self.metrics
            .connect_backoff
            .set(self.connect_backoff_remaining(now).as_secs_f64());
    }

    fn lock_connect(&self) -> MutexGuard<'_, (ConnectBackoff, fastrand::Rng)> {
        self.connect.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

pub mod drive;

#[cfg(test)]
mod tests;
