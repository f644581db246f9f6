//! `easeoff simulate`: one configured upstream's real controller, sleeper, pacer,
//! connection backoff and attempt policy, in virtual time (a [`ManualClock`]), against
//! a modelled throttling upstream. Clients go through the same [`Control`] and
//! [`Attempts`](attempt::Attempts) the proxy's request path uses (acquire a slot, pass the connection
//! backoff, record the verdict, ask the policy and the retry budget); only the network
//! is replaced: the upstream is the mock's token bucket, which decides at dispatch (or
//! up to `jitter` after it) and answers `latency` later.
//!
//! Everything random comes from the seed (one generator, and one more for the
//! attempts' lateness when there is `jitter`), and a current-thread runtime
//! runs the tasks in a fixed order, so a seed gives the same trace every time. What
//! the trace means (summary, CSV) is in [`report`].

pub mod report;

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use std::borrow::Cow;

use crate::attempt::{self, Next};
use crate::clock::Instant;
use crate::clock::{Clock, ManualClock};
use crate::config::{FleetSettings, UpstreamSettings};
use crate::fleet::{Fleet, Memory};
use crate::lane::{self, Pass, Route};
use crate::metrics::Metrics;
use crate::mock_upstream::{AutoScale, Bucket};
use crate::pacer::Slot;
use crate::plot::{self, CapacityStep, Point};
use crate::throttle::{Signal, Verdict};
use crate::transport::ConnectCause;
use crate::upstream::drive::{Arrival, Dispatch, Ended, Turn};
use crate::upstream::{Control, Settle};

/// How the upstream's capacity changes over the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    /// Constant capacity.
    Steady,
    /// The capacity for the first third, then half of it.
    StepDown,
    /// Half the capacity for the first third, then all of it.
    StepUp,
    /// DynamoDB-like: starts at half, raised by a factor after sustained throttling,
    /// up to the capacity.
    Autoscale,
    /// Steady capacity shared by several sidecars (2 unless `--sidecars` says).
    Shared,
    /// Two DynamoDB tables behind one sidecar, `slow` at a fifth of the capacity and
    /// `fast` at all of it, half the clients writing to each; each table is paced in
    /// its own lane.
    Tables,
    /// Steady capacity shared by several sidecars (16 unless `--sidecars` says) that
    /// share what they learn as a `[fleet]` does, through a store in memory; compared
    /// with the same sidecars on their own.
    Fleet,
    /// A fleet (as `fleet`) on half the capacity for the first third, then all of it:
    /// an on-demand table taking twice its previous peak, or a provisioned one raised.
    FleetStepUp,
}

impl Scenario {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Steady => "steady",
            Scenario::StepDown => "step-down",
            Scenario::StepUp => "step-up",
            Scenario::Autoscale => "autoscale",
            Scenario::Shared => "shared",
            Scenario::Tables => "tables",
            Scenario::Fleet => "fleet",
            Scenario::FleetStepUp => "fleet-step-up",
        }
    }

    /// Whether the sidecars share what they learn as a `[fleet]` does.
    pub fn fleet(self) -> bool {
        matches!(self, Scenario::Fleet | Scenario::FleetStepUp)
    }
}

/// Everything one simulation run depends on.
#[derive(Clone, Debug)]
pub struct SimOptions {
    /// The upstream's settings, from the config file.
    pub settings: UpstreamSettings,
    pub scenario: Scenario,
    /// Seeds every random choice.
    pub seed: u64,
    pub duration: Duration,
    /// Requests per second the upstream accepts (the maximum, for auto-scaling).
    pub capacity: f64,
    /// Requests the upstream accepts at once after a quiet spell.
    pub burst: u32,
    /// Clients per sidecar, each sending its next request as soon as one ends.
    pub clients: usize,
    /// From dispatch to answer; the upstream decides at dispatch, or up to `jitter`
    /// after it.
    pub latency: Duration,
    /// How late after its dispatch an attempt may reach the upstream, drawn evenly
    /// from 0 to this for each attempt: a sidecar's timers, the network and a busy
    /// host do not keep a schedule to the microsecond, and a bucket just emptied
    /// refuses the attempts that arrive bunched although the rate is below its own.
    pub jitter: Duration,
    /// easeoff instances, each with its own controller, pacer and clients, sharing
    /// one upstream.
    pub sidecars: usize,
    /// How long the sidecars wait, ready, before their clients' first requests (a
    /// pod whose writers start after its sidecar).
    pub idle: Duration,
    /// Auto-scaling: sustained throttling for this long raises the capacity ...
    pub scale_after: Duration,
    /// ... by this factor.
    pub scale_factor: f64,
}

impl SimOptions {
    /// Says what is wrong with options no run could use.
    pub fn validate(&self) -> Result<(), String> {
        if !self.capacity.is_finite() || self.capacity <= 0.0 {
            return Err(format!("--capacity must be above 0, got {}", self.capacity));
        }
        if self.clients == 0 {
            return Err("--clients must be at least 1".into());
        }
        if self.sidecars == 0 {
            return Err("--sidecars must be at least 1".into());
        }
        if self.duration.is_zero() {
            return Err("--duration must be above 0".into());
        }
        if self.jitter > self.latency {
            return Err(format!(
                "--jitter must not exceed --latency ({:?}): an attempt reaches the \
                 upstream before its answer comes back, got {:?}",
                self.latency, self.jitter
            ));
        }
        if !self.scale_factor.is_finite() || self.scale_factor < 1.0 {
            return Err(format!(
                "--scale-factor must be at least 1, got {}",
                self.scale_factor
            ));
        }
        Ok(())
    }

    /// The capacity at the start, and the scheduled changes (time, new capacity).
    fn schedule(&self) -> (f64, Vec<(Duration, f64)>) {
        let c = self.capacity;
        let third = self.duration / 3;
        match self.scenario {
            Scenario::Steady | Scenario::Shared | Scenario::Tables | Scenario::Fleet => {
                (c, Vec::new())
            }
            Scenario::StepDown => (c, vec![(third, c / 2.0)]),
            Scenario::StepUp | Scenario::FleetStepUp => (c / 2.0, vec![(third, c)]),
            Scenario::Autoscale => (c / 2.0, Vec::new()),
        }
    }

    fn autoscale(&self) -> Option<AutoScale> {
        (self.scenario == Scenario::Autoscale).then_some(AutoScale {
            after: self.scale_after,
            factor: self.scale_factor,
            max: self.capacity,
        })
    }
}

/// One upstream attempt.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttemptRecord {
    /// Dispatch time since the start.
    pub at: Duration,
    pub sidecar: usize,
    /// The interval in force at dispatch.
    pub interval: Duration,
    pub throttled: bool,
    /// Sent again by easeoff after a throttle.
    pub retry: bool,
}

/// How a client's request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    Success,
    /// A throttle easeoff did not retry (attempts, budget or time used up), passed on.
    Throttled,
    /// Turned away by the queue (`max_waiting`, `max_wait`).
    Shed,
    /// The upstream could not be reached (connection backoff, connect retries used up).
    Unreachable,
}

/// What the modelled upstream does with one attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    Success,
    /// A throttle without a Retry-After (DynamoDB's).
    Throttle,
    /// No connection could be made.
    Unreachable,
}

/// One client request.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RequestRecord {
    /// When it ended, since the start.
    pub at: Duration,
    pub sidecar: usize,
    /// From the client's send to its answer.
    pub took: Duration,
    pub ending: Ending,
}

/// What happened during a run, in time order.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    pub attempts: Vec<AttemptRecord>,
    pub requests: Vec<RequestRecord>,
    /// Capacity changes (time since the start, requests per second); the first is at 0.
    pub capacity: Vec<(Duration, f64)>,
}

/// Why a run could not start.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("cannot start the simulation runtime: {0}")]
    Runtime(std::io::Error),
    #[error("cannot set up metrics: {0}")]
    Metrics(#[from] prometheus::Error),
}

/// Runs the simulation on its own current-thread runtime in virtual time.
pub fn run(options: &SimOptions) -> Result<Trace, SimError> {
    // The wall clock is never read: the modelled upstream sends no dates.
    let (clock, manual) = Clock::manual(SystemTime::UNIX_EPOCH);
    let runtime = ManualClock::runtime(&manual).map_err(SimError::Runtime)?;
    runtime.block_on(simulate(options, clock))
}

/// The modelled upstream and the trace, shared by every client.
struct World {
    start: Instant,
    bucket: Bucket,
    /// `tables`: one bucket per table, by the index the trace's `sidecar` holds.
    tables: Vec<Bucket>,
    burst: u32,
    rate: f64,
    trace: Trace,
    jitter: Duration,
    /// Draws each attempt's lateness: a generator of its own, so that jitter leaves
    /// every other draw of the seed as it is (a run without it is the same run).
    late: fastrand::Rng,
}

type Shared = Arc<Mutex<World>>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing panics while holding it; a poisoned trace is still worth reporting.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl World {
    fn since_start(&self, t: Instant) -> Duration {
        t.saturating_duration_since(self.start)
    }

    /// The upstream sees one attempt: takes a token or throttles it.
    fn attempt(&mut self, sidecar: usize, slot: &Slot, retry: bool) -> bool {
        let bucket = match self.tables.get_mut(sidecar) {
            Some(table) => table,
            None => &mut self.bucket,
        };
        let arrives = if self.jitter.is_zero() {
            slot.dispatched_at
        } else {
            slot.dispatched_at + self.jitter.mul_f64(self.late.f64())
        };
        let throttled = bucket.take(arrives).is_err();
        let at = self.since_start(slot.dispatched_at);
        if self.bucket.rate() != self.rate {
            self.rate = self.bucket.rate();
            self.trace.capacity.push((at, self.rate));
        }
        self.trace.attempts.push(AttemptRecord {
            at,
            sidecar,
            interval: slot.interval,
            throttled,
            retry,
        });
        throttled
    }

    /// A scheduled capacity change. The new bucket starts full; with the burst at a
    /// tenth of a second of capacity that is a negligible gift.
    fn set_capacity(&mut self, rate: f64, now: Instant) {
        self.bucket = Bucket::new(rate, self.burst, None, now);
        self.rate = rate;
        let at = self.since_start(now);
        self.trace.capacity.push((at, rate));
    }
}

#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "float to integer `as` saturates, as wanted here"
)]
async fn simulate(options: &SimOptions, clock: Clock) -> Result<Trace, SimError> {
    let start = clock.now();
    let end = start + options.duration;
    let (initial, steps) = options.schedule();
    let world: Shared = Arc::new(Mutex::new(World {
        jitter: options.jitter,
        late: fastrand::Rng::with_seed(options.seed ^ LATE_SEED),
        start,
        bucket: Bucket::new(initial, options.burst, options.autoscale(), start),
        tables: if options.scenario == Scenario::Tables {
            TABLES
                .iter()
                .map(|(_, share)| {
                    let burst = ((options.burst as f64 * share).ceil() as u32).max(1);
                    Bucket::new(initial * share, burst, None, start)
                })
                .collect()
        } else {
            Vec::new()
        },
        burst: options.burst,
        rate: initial,
        trace: Trace {
            capacity: vec![(Duration::ZERO, initial)],
            ..Trace::default()
        },
    }));

    let mut rng = fastrand::Rng::with_seed(options.seed);
    let tables = options.scenario == Scenario::Tables;
    let memory = Arc::new(Mutex::new(Memory::new()));
    let mut shared: Option<Arc<Control>> = None;
    // A fleet's sidecars sync as they start, before their clients' first requests (a
    // pod's containers start together; the writers once their sidecar is ready).
    let ready = if options.scenario.fleet() {
        FleetSettings::default().sync_interval * 2
    } else {
        Duration::ZERO
    };
    for sidecar in 0..options.sidecars {
        // Each sidecar is its own process with its own metrics; `tables` has one
        // sidecar, whose lanes the trace tells apart as sidecars.
        let upstream = match &shared {
            Some(upstream) => Arc::clone(upstream),
            None => {
                let metrics = Metrics::new()?;
                let upstream = Arc::new(Control::new(
                    options.settings.clone(),
                    &metrics,
                    None,
                    rng.fork(),
                    clock.clone(),
                ));
                if options.scenario.fleet() {
                    let settings = FleetSettings::default();
                    let every = settings.sync_interval;
                    let member = Fleet::driven(settings, &metrics, format!("sidecar-{sidecar}"));
                    let member = Arc::new(member);
                    upstream.join_fleet(Arc::clone(&member));
                    // Members sync at their own phase, as processes started apart do.
                    let first = every.mul_f64(rng.f64());
                    let memory = Arc::clone(&memory);
                    tokio::spawn(sync(member, memory, clock.clone(), start, first));
                }
                upstream
            }
        };
        if tables {
            shared = Some(Arc::clone(&upstream));
        }
        let route = match TABLES.get(sidecar).filter(|_| tables) {
            Some((table, _)) => Route::one(upstream.lanes.get(&format!("{table}:write"))),
            None => Route::one(Arc::clone(upstream.lanes.default_lane())),
        };
        for _ in 0..options.clients {
            // Clients start spread over one latency, so no sidecar wins every tie of
            // the first instant by the order its tasks were spawned in.
            let first = ready + options.idle + options.latency.mul_f64(rng.f64());
            tokio::spawn(client(
                Arc::clone(&upstream),
                (sidecar, route.clone()),
                Arc::clone(&world),
                options.latency,
                first,
            ));
        }
    }
    for (at, rate) in steps {
        clock.sleep_until(start + at).await;
        lock(&world).set_capacity(rate, clock.now());
    }
    clock.sleep_until(end).await;
    let trace = std::mem::take(&mut lock(&world).trace);
    Ok(trace)
}

/// A fleet member's syncs against the shared store: at `first`, then one
/// `Fleet::tick_period` after the last.
async fn sync(
    member: Arc<Fleet>,
    memory: Arc<Mutex<Memory>>,
    clock: Clock,
    start: Instant,
    first: Duration,
) {
    clock.sleep(first).await;
    let mut last = clock.now();
    let mut tick = last;
    loop {
        let now = clock.now();
        member.sync_in(&mut lock(&memory), now - start, Some(now - last));
        last = now;
        tick += member.tick_period();
        // A raise goes between ticks, as the sync task sends it (one round at most).
        tokio::select! {
            () = clock.sleep_until(tick) => continue,
            () = member.raised() => {
                member.sync_in(&mut lock(&memory), clock.now() - start, None);
            }
        }
        tick = tick.min(clock.now() + member.tick_period());
        clock.sleep_until(tick).await;
    }
}

/// For a fleet scenario: the same sidecars on their own (the `shared` or `step-up`
/// scenario), then beside the fleet's run, as the comparison the summary ends with.
pub fn compare_fleet(options: &SimOptions, fleet: &Trace) -> Result<String, SimError> {
    let alone = SimOptions {
        scenario: if options.scenario == Scenario::FleetStepUp {
            Scenario::StepUp
        } else {
            Scenario::Shared
        },
        ..options.clone()
    };
    let independent = run(&alone)?;
    Ok(report::fleet_comparison(options, &independent, fleet))
}

/// A client with unbounded demand: sends, waits for the answer, sends again.
async fn client(
    upstream: Arc<Control>,
    (sidecar, route): (usize, Route),
    world: Shared,
    latency: Duration,
    first: Duration,
) {
    let clock = upstream.clock();
    clock.sleep(first).await;
    loop {
        let sent = clock.now();
        let (ending, hold_off) = request(&upstream, &route, latency, |slot, retry| {
            if lock(&world).attempt(sidecar, slot, retry) {
                Answer::Throttle
            } else {
                Answer::Success
            }
        })
        .await;
        let now = clock.now();
        {
            let mut w = lock(&world);
            let at = w.since_start(now);
            w.trace.requests.push(RequestRecord {
                at,
                sidecar,
                took: now - sent,
                ending,
            });
        }
        if !hold_off.is_zero() {
            clock.sleep(hold_off).await;
        }
    }
}

/// The tables of the `tables` scenario and their share of the capacity.
pub const TABLES: [(&str, f64); 2] = [("slow", 0.2), ("fast", 1.0)];

/// The least a turned-away client waits: a shed is answered at once, and in virtual
/// time a client that asked again at once would never let the clock move.
const MIN_HOLD_OFF: Duration = Duration::from_millis(1);

/// Mixed into the seed of the generator that draws each attempt's lateness
/// (`SimOptions::jitter`), so that it draws apart from the run's own.
const LATE_SEED: u64 = 0x9e37_79b9_7f4a_7c15;

/// One client request through easeoff's decisions, by the attempt driver the proxy
/// uses ([`Control::drive`]): wait for a slot, pass the connection backoff, let `send`
/// (the modelled upstream, told whether this is a retry) answer, which takes
/// `latency`, record the verdict and ask the attempt policy. Also returns how long
/// the client then holds off: a shed's or an unreachable upstream's Retry-After,
/// which a client that backs off on easeoff's answer roughly honours; nothing
/// otherwise.
pub async fn request(
    upstream: &Control,
    route: &Route,
    latency: Duration,
    send: impl FnMut(&Slot, bool) -> Answer,
) -> (Ending, Duration) {
    let arrived = upstream.clock().now();
    upstream.deposit(arrived);
    // The modelled body is always held, so every request can be sent again.
    let arrival = Arrival {
        at: arrived,
        patience: None,
        replayable: true,
        deadline: None,
    };
    let mut modelled = Modelled {
        upstream,
        latency,
        send,
    };
    let mut route = route.clone();
    match upstream.drive(&mut modelled, &mut route, arrival).await {
        Ended::Answer(()) => (Ending::Success, Duration::ZERO),
        Ended::Exhausted(_) => (Ending::Throttled, Duration::ZERO),
        Ended::Concluded(ending) => match ending.next {
            Next::Retry { .. } | Next::GiveBack(_) | Next::ReadThrottle => {
                (Ending::Throttled, Duration::ZERO)
            }
            Next::Shed { retry_after } => (Ending::Shed, retry_after.max(MIN_HOLD_OFF)),
            Next::Unreachable { retry_after, .. } => {
                (Ending::Unreachable, retry_after.max(MIN_HOLD_OFF))
            }
        },
    }
}

/// The modelled upstream as the attempt driver sends to it; a success is the only
/// answer that ends a request.
struct Modelled<'u, F> {
    upstream: &'u Control,
    latency: Duration,
    send: F,
}

impl<F: FnMut(&Slot, bool) -> Answer> Dispatch for Modelled<'_, F> {
    type Answer = ();

    fn ready(&mut self) -> bool {
        true
    }

    fn drop_attempt(&mut self, _queued: Duration) {}

    async fn send(
        &mut self,
        pass: Pass,
        _queued: Duration,
        attempt: u32,
        _route: &Route,
    ) -> Turn<()> {
        let upstream = self.upstream;
        let answer = (self.send)(pass.slot(), attempt > 1);
        if !self.latency.is_zero() {
            upstream.clock().sleep(self.latency).await;
        }
        match answer {
            Answer::Success => {
                upstream.connected();
                let success = lane::Answer::of(Verdict::Success);
                Turn::Answer((), upstream.settle(pass, Settle::Answer(&success)))
            }
            Answer::Throttle => {
                upstream.connected();
                let throttle = lane::Answer::of(Verdict::Throttle(Signal::Body));
                let settled = upstream.settle(pass, Settle::Answer(&throttle));
                Turn::Throttled {
                    answer: (),
                    refused: false,
                    overload: false,
                    read_by: upstream.clock().now(),
                    settled,
                }
            }
            Answer::Unreachable => {
                let refused = Settle::NoConnection(&ConnectCause::Refused);
                let settled = upstream.settle(pass, refused);
                let wait = settled.backoff();
                let outcome = attempt::Outcome::ConnectFailed { wait };
                Turn::Outcome(outcome, None, Cow::Borrowed(""), settled)
            }
        }
    }

    /// The modelled answer is always held.
    async fn read_throttle(&mut self, answer: (), _read_by: Instant) -> Result<((), bool), ()> {
        Ok((answer, true))
    }
}

/// The SVG: every attempt at (dispatch time, interval in force), and the capacity as
/// the interval each sidecar would need to match it exactly.
pub fn svg(options: &SimOptions, trace: &Trace) -> String {
    let points: Vec<Point> = trace
        .attempts
        .iter()
        .map(|a| Point {
            t: a.at.as_secs_f64(),
            interval_ms: a.interval.as_secs_f64() * 1e3,
            throttled: a.throttled,
        })
        .collect();
    let capacity: Vec<CapacityStep> = trace
        .capacity
        .iter()
        .map(|&(at, rate)| CapacityStep {
            t: at.as_secs_f64(),
            rate,
            interval_ms: 1e3 * options.sidecars as f64 / rate,
        })
        .collect();
    let title = format!(
        "easeoff simulate: {} ({}), {}, {} clients{}, seed {}",
        options.settings.name,
        options.settings.sleeper.strategy.name(),
        options.scenario.name(),
        options.clients,
        if options.sidecars > 1 {
            format!(" × {} sidecars", options.sidecars)
        } else {
            String::new()
        },
        options.seed
    );
    plot::trace_svg(&title, &points, &capacity, options.duration.as_secs_f64())
}
