//! `bench control`: the real `easeoff mock-upstream` with a capacity scenario, 16
//! closed-loop writers with unbounded demand through the real `easeoff run` (or an SDK
//! baseline hitting the mock directly), scraped every 500 ms.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use easeoff::load::{self, Shot, Tally, Until};
use easeoff::plot::{self, Point};
use tokio::time::Instant;

use crate::analysis::{CRITERIA, Convergence, Sample, Summary, summarize};
use crate::procs::{Getter, Proc, free_addr, sample, start_easeoff};
use crate::sdk;
use crate::stats::median;

/// A capacity scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    /// 100/s for 2 phases.
    Steady,
    /// 100/s for a phase, then 50/s for 2 phases.
    StepDown,
    /// 50/s for a phase, then 100/s for 2 phases.
    StepUp,
    /// 50/s; the mock doubles it (up to 100/s) after half a phase of sustained
    /// throttling; 3 phases.
    Autoscale,
}

impl Scenario {
    /// (offset in seconds, rate) steps and the run's length, for a phase of `p` seconds.
    fn plan(self, p: f64) -> (Vec<(f64, f64)>, f64) {
        match self {
            Scenario::Steady => (vec![(0.0, 100.0)], 2.0 * p),
            Scenario::StepDown => (vec![(0.0, 100.0), (p, 50.0)], 3.0 * p),
            Scenario::StepUp => (vec![(0.0, 50.0), (p, 100.0)], 3.0 * p),
            Scenario::Autoscale => (vec![(0.0, 50.0)], 3.0 * p),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Scenario::Steady => "steady",
            Scenario::StepDown => "step-down",
            Scenario::StepUp => "step-up",
            Scenario::Autoscale => "autoscale",
        }
    }
}

/// Who sends the requests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Writers without retries through `easeoff run`, preset dynamodb, this strategy
    /// (`STRATEGY+observe`: in `mode = "observe"`).
    Easeoff(String),
    SdkStandard,
    SdkAdaptive,
}

impl Kind {
    /// `easeoff:STRATEGY`, `sdk-standard` or `sdk-adaptive`.
    pub fn parse(text: &str) -> Result<Kind, String> {
        match text {
            "sdk-standard" => Ok(Kind::SdkStandard),
            "sdk-adaptive" => Ok(Kind::SdkAdaptive),
            _ => match text.strip_prefix("easeoff:") {
                Some(strategy) if !strategy.is_empty() && !strategy.contains('"') => {
                    Ok(Kind::Easeoff(strategy.to_string()))
                }
                _ => Err(format!(
                    "unknown client \"{text}\": use easeoff:STRATEGY (e.g. easeoff:responsive), sdk-standard or sdk-adaptive"
                )),
            },
        }
    }

    fn label(&self) -> String {
        match self {
            Kind::Easeoff(strategy) => format!("easeoff:{strategy}"),
            Kind::SdkStandard => "sdk-standard".into(),
            Kind::SdkAdaptive => "sdk-adaptive".into(),
        }
    }
}

/// The `control` settings.
#[derive(Clone, Debug)]
pub struct Options {
    pub bin: PathBuf,
    pub scenarios: Vec<Scenario>,
    pub kinds: Vec<Kind>,
    pub runs: u32,
    pub clients: usize,
    pub phase: f64,
    pub warmup: f64,
    pub burst: u32,
    pub latency: Duration,
    pub jobs: usize,
    pub csv_dir: Option<PathBuf>,
    pub svg_dir: Option<PathBuf>,
}

/// Time between the mock's start and the writers' start: long enough for both
/// processes to get ready, so schedule offsets are exact from the writers' view.
const LEAD: f64 = 3.0;
const SCRAPE: Duration = Duration::from_millis(500);

struct Run {
    scenario: Scenario,
    kind: Kind,
    run: u32,
    samples: Vec<Sample>,
}

/// Runs every (scenario, kind, run), `jobs` at a time, and prints the table.
pub async fn main(o: Options) -> Result<(), String> {
    let mut plan = Vec::new();
    for &scenario in &o.scenarios {
        for run in 1..=o.runs {
            for kind in &o.kinds {
                plan.push((scenario, kind.clone(), run));
            }
        }
    }
    let o = Arc::new(o);
    let gate = Arc::new(tokio::sync::Semaphore::new(o.jobs.max(1)));
    let mut tasks = tokio::task::JoinSet::new();
    for (index, (scenario, kind, run)) in plan.into_iter().enumerate() {
        let (o, gate) = (Arc::clone(&o), Arc::clone(&gate));
        tasks.spawn(async move {
            let _permit = gate.acquire_owned().await;
            let samples = run_one(&o, scenario, &kind, run, index).await;
            (index, scenario, kind, run, samples)
        });
    }
    let mut done = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        let (index, scenario, kind, run, samples) = joined.map_err(|e| e.to_string())?;
        let samples =
            samples.map_err(|e| format!("{} {} run {run}: {e}", scenario.name(), kind.label()))?;
        done.push((
            index,
            Run {
                scenario,
                kind,
                run,
                samples,
            },
        ));
    }
    done.sort_by_key(|(index, _)| *index);
    let runs: Vec<Run> = done.into_iter().map(|(_, run)| run).collect();
    for run in &runs {
        write_files(&o, run)?;
    }
    print!("{}", table(&o, &runs));
    Ok(())
}

async fn run_one(
    o: &Options,
    scenario: Scenario,
    kind: &Kind,
    run: u32,
    index: usize,
) -> Result<Vec<Sample>, String> {
    let work = std::env::temp_dir().join(format!("easeoff-bench-{}-{index}", std::process::id()));
    std::fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
    let result = measure(o, scenario, kind, run, &work).await;
    if result.is_ok() {
        let _ = std::fs::remove_dir_all(&work);
    }
    result
}

async fn measure(
    o: &Options,
    scenario: Scenario,
    kind: &Kind,
    run: u32,
    work: &Path,
) -> Result<Vec<Sample>, String> {
    let (steps, length) = scenario.plan(o.phase);
    let (mock_addr, mock_admin) = (free_addr()?, free_addr()?);
    let schedule: Vec<String> = steps
        .iter()
        .map(|(at, rate)| {
            // A quarter scrape early, so the change falls mid-interval whatever the
            // mock's start-up delay, and is dated right to within that delay.
            let at = if *at == 0.0 { 0.0 } else { LEAD + at - 0.25 };
            format!("{}ms:{rate}", (at * 1000.0).round())
        })
        .collect();
    let mut args: Vec<String> = [
        "mock-upstream",
        "--listen",
        &mock_addr.to_string(),
        "--admin",
        &mock_admin.to_string(),
        "--style",
        "dynamodb",
        "--burst",
        &o.burst.to_string(),
        "--latency",
        &format!("{}ms", o.latency.as_millis()),
        "--schedule",
        &schedule.join(","),
        "--log-level",
        "warn",
    ]
    .map(String::from)
    .to_vec();
    if scenario == Scenario::Autoscale {
        args.extend(
            [
                "--scale-after",
                &format!("{}ms", (o.phase * 500.0).round()),
                "--scale-factor",
                "2",
                "--scale-max",
                "100",
            ]
            .map(String::from),
        );
    }
    let started = Instant::now();
    let mut mock = Proc::spawn(&o.bin, &args, work.join("mock.log"))?;
    let getter = Getter::default();
    let mock_metrics = format!("http://{mock_admin}/metrics");
    getter
        .wait_ready(&mock_metrics, &mut mock, "mock-upstream")
        .await?;
    let mut proxy = None;
    if let Kind::Easeoff(strategy) = kind {
        let (strategy, mode) = strategy.split_once('+').unwrap_or((strategy, "pace"));
        let extra = format!(
            "preset = \"dynamodb\"\n\n[upstream.sleeper]\nstrategy = \"{strategy}\"\nmode = \"{mode}\"\n"
        );
        proxy = Some(
            start_easeoff(&o.bin, work, "mock", &format!("http://{mock_addr}"), &extra).await?,
        );
    }
    let easeoff_metrics = proxy
        .as_ref()
        .map(|p| format!("http://{}/metrics", p.admin));
    let t0 = started + Duration::from_secs_f64(LEAD);
    if Instant::now() >= t0 {
        return Err(format!(
            "the processes took more than {LEAD} s to get ready"
        ));
    }
    tokio::time::sleep_until(t0).await;
    let deadline = t0 + Duration::from_secs_f64(length);
    let tally = Arc::new(Tally::default());
    let writers = {
        let tally = Arc::clone(&tally);
        let clients = o.clients;
        match (kind, &proxy) {
            (Kind::Easeoff(_), Some(p)) => {
                let listen = p.listen;
                tokio::spawn(async move {
                    load::write(
                        listen,
                        &Shot::PUT_ITEM,
                        clients,
                        Until::Deadline(deadline),
                        tally,
                    )
                    .await
                })
            }
            (Kind::SdkAdaptive, _) | (Kind::SdkStandard, _) | (Kind::Easeoff(_), None) => {
                let mode = if *kind == Kind::SdkAdaptive {
                    sdk::Mode::Adaptive
                } else {
                    sdk::Mode::Standard
                };
                let seed = u64::from(run) * 7919;
                tokio::spawn(async move {
                    sdk::write(mock_addr, clients, deadline, mode, tally, seed).await
                })
            }
        }
    };
    let mut samples = Vec::new();
    let mut tick = tokio::time::interval_at(t0, SCRAPE);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let at = tick.tick().await;
        if at > deadline {
            break;
        }
        let page = getter.get(&mock_metrics).await?;
        let t = Instant::now().duration_since(t0).as_secs_f64();
        let (client_ok, client_errors) = tally.read();
        let interval_ms = match &easeoff_metrics {
            Some(url) => getter.get(url).await.ok().and_then(|page| {
                sample(
                    &page,
                    "easeoff_upstream_interval_seconds{upstream=\"mock\"}",
                )
            }),
            None => None,
        }
        .map(|s| s * 1000.0);
        samples.push(Sample {
            t,
            ok: sample(&page, "mock_requests_total{result=\"ok\"}").unwrap_or(0.0),
            throttled: sample(&page, "mock_requests_total{result=\"throttled\"}").unwrap_or(0.0),
            rate: sample(&page, "mock_rate").unwrap_or(0.0),
            interval_ms,
            client_ok,
            client_errors,
        });
    }
    let _ = writers.await;
    if let Some(why) = mock.exited() {
        return Err(format!("mock-upstream {why}"));
    }
    if let Some(p) = &mut proxy
        && let Some(why) = p.proc.exited()
    {
        return Err(format!("easeoff run {why}"));
    }
    Ok(samples)
}

fn file_stem(run: &Run) -> String {
    format!(
        "{}-{}-{}",
        run.scenario.name(),
        run.kind.label().replace(':', "-"),
        run.run
    )
}

fn write_files(o: &Options, run: &Run) -> Result<(), String> {
    let write = |dir: &Path, name: String, text: String| {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
    };
    if let Some(dir) = &o.csv_dir {
        write(dir, format!("{}.csv", file_stem(run)), csv(&run.samples))?;
    }
    if let (Some(dir), Kind::Easeoff(strategy)) = (&o.svg_dir, &run.kind) {
        let title = format!(
            "{}: easeoff {strategy}, 16 writers, mock capacity {}",
            run.scenario.name(),
            capacities(&run.samples)
        );
        write(
            dir,
            format!("{}.svg", file_stem(run)),
            plot::interval_svg(&title, &points(&run.samples)),
        )?;
    }
    Ok(())
}

/// "100/s → 50/s at 30 s".
fn capacities(s: &[Sample]) -> String {
    let mut text = format!("{}/s", s.first().map_or(0.0, |x| x.rate));
    for w in s.windows(2) {
        if w[1].rate != w[0].rate {
            let _ = write!(text, " → {}/s at {:.0} s", w[1].rate, w[1].t);
        }
    }
    text
}

/// One point per upstream attempt, spread over its 500 ms, at easeoff's interval then.
fn points(s: &[Sample]) -> Vec<Point> {
    let mut points = Vec::new();
    for w in s.windows(2) {
        let interval_ms = w[1].interval_ms.unwrap_or(0.0);
        for (count, throttled) in [
            (w[1].ok - w[0].ok, false),
            (w[1].throttled - w[0].throttled, true),
        ] {
            let n = count.max(0.0) as u64;
            for j in 0..n {
                points.push(Point {
                    t: w[0].t + (j as f64 + 0.5) / n as f64 * (w[1].t - w[0].t),
                    interval_ms,
                    throttled,
                });
            }
        }
    }
    points
}

fn csv(s: &[Sample]) -> String {
    let mut out = String::from(
        "t,capacity,upstream_ok,upstream_throttled,client_ok,client_errors,interval_ms\n",
    );
    for x in s {
        let interval = x.interval_ms.map_or(String::new(), |v| format!("{v:.3}"));
        let _ = writeln!(
            out,
            "{:.3},{},{},{},{},{},{interval}",
            x.t, x.rate, x.ok, x.throttled, x.client_ok, x.client_errors
        );
    }
    out
}

fn pct(x: f64) -> String {
    format!("{:.1}", 100.0 * x)
}

fn conv(c: Convergence) -> String {
    match c {
        Convergence::After(s) => format!("{s:.1}"),
        Convergence::Never => "never".into(),
        Convergence::TooShort => "-".into(),
    }
}

fn conv_value(c: Convergence) -> f64 {
    match c {
        Convergence::After(s) => s,
        Convergence::Never | Convergence::TooShort => f64::INFINITY,
    }
}

fn join<T>(items: &[T], f: impl Fn(&T) -> String) -> String {
    items.iter().map(f).collect::<Vec<_>>().join("|")
}

fn row(out: &mut String, scenario: &str, client: &str, run: &str, s: &Summary) {
    let _ = writeln!(
        out,
        "{scenario:<10} {client:<22} {run:>4} {:>8} {:>7} {:>6} {:>7} {:>8} {:<17} {:<13} {:<15} {:<13}",
        pct(s.goodput_all),
        pct(s.goodput),
        pct(s.throttled),
        s.errors,
        s.interval_ms.map_or("-".to_string(), |v| format!("{v:.2}")),
        join(&s.phases, |p| format!("{}", p.capacity)),
        join(&s.phases, |p| pct(p.goodput)),
        join(&s.phases, |p| pct(p.throttled)),
        join(&s.phases, |p| conv(p.convergence)),
    );
}

fn table(o: &Options, runs: &[Run]) -> String {
    let mut out = format!(
        "{:<10} {:<22} {:>4} {:>8} {:>7} {:>6} {:>7} {:>8} {:<17} {:<13} {:<15} {:<13}\n",
        "scenario",
        "client",
        "run",
        "good%all",
        "good%",
        "thr%",
        "errors",
        "intv ms",
        "capacity/phase",
        "good%/phase",
        "thr%/phase",
        "conv s/phase"
    );
    let mut groups: Vec<(Scenario, Kind)> = Vec::new();
    for r in runs {
        if !groups.contains(&(r.scenario, r.kind.clone())) {
            groups.push((r.scenario, r.kind.clone()));
        }
    }
    for (scenario, kind) in groups {
        let summaries: Vec<Summary> = runs
            .iter()
            .filter(|r| r.scenario == scenario && r.kind == kind)
            .map(|r| {
                let s = summarize(&r.samples, o.warmup, CRITERIA);
                row(
                    &mut out,
                    scenario.name(),
                    &kind.label(),
                    &r.run.to_string(),
                    &s,
                );
                s
            })
            .collect();
        if summaries.len() > 1 {
            row(
                &mut out,
                scenario.name(),
                &kind.label(),
                "med",
                &median_summary(&summaries),
            );
        }
    }
    let _ = writeln!(
        out,
        "good%: goodput / capacity after the {} s warm-up (good%all: whole run); thr%: throttled share of upstream attempts after the warm-up; errors: requests the writers saw fail; intv ms: mean of easeoff's interval (easeoff_upstream_interval_seconds) after the warm-up; conv: seconds after each capacity change (the first phase: after the start) from which every 5 s window has < 10% throttled and goodput >= 90% of capacity",
        o.warmup
    );
    out
}

/// The median of each figure; per-phase figures only where every run has the phases.
fn median_summary(s: &[Summary]) -> Summary {
    let m = |f: &dyn Fn(&Summary) -> f64| median(&s.iter().map(f).collect::<Vec<_>>());
    let n = s[0].phases.len();
    let phases = if s.iter().all(|x| x.phases.len() == n) {
        (0..n)
            .map(|k| {
                let c = m(&|x| conv_value(x.phases[k].convergence));
                crate::analysis::Phase {
                    start: m(&|x| x.phases[k].start),
                    capacity: m(&|x| x.phases[k].capacity),
                    goodput: m(&|x| x.phases[k].goodput),
                    throttled: m(&|x| x.phases[k].throttled),
                    convergence: if c.is_finite() {
                        Convergence::After(c)
                    } else if s
                        .iter()
                        .all(|x| x.phases[k].convergence == Convergence::TooShort)
                    {
                        Convergence::TooShort
                    } else {
                        Convergence::Never
                    },
                }
            })
            .collect()
    } else {
        Vec::new()
    };
    let intervals: Vec<f64> = s.iter().filter_map(|x| x.interval_ms).collect();
    Summary {
        interval_ms: (!intervals.is_empty()).then(|| median(&intervals)),
        goodput_all: m(&|x| x.goodput_all),
        goodput: m(&|x| x.goodput),
        throttled: m(&|x| x.throttled),
        errors: m(&|x| x.errors as f64) as u64,
        phases,
    }
}
