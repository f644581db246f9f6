//! What a simulation trace says: 100 ms bins (the CSV), phases between capacity
//! changes, goodput against capacity, and how long the controller took to converge
//! after each change.
//!
//! Convergence: a 5 s window is on target when under 10% of its upstream attempts
//! were throttled and its goodput is at least 90% of the capacity. A phase converged
//! at T when every window starting at or after T (and ending within the phase) is on
//! target; T counts from the phase's start, so a controller that is right at once
//! scores 0.
//!
//! Sidecars sharing a bucket (`shared`, `fleet`): goodput against capacity, the
//! throttled share of attempts and Jain's fairness index over the sidecars' goodput,
//! after a warm-up ([`fleet_stats`]).

use std::fmt::Write;
use std::time::Duration;

use super::{Ending, Scenario, SimOptions, TABLES, Trace};

/// The CSV's and the convergence windows' resolution.
pub const BIN: Duration = Duration::from_millis(100);
const WINDOW_BINS: usize = 50;
const MAX_THROTTLED: f64 = 0.10;
const MIN_GOODPUT: f64 = 0.90;
/// What [`fleet_stats`] leaves out at the start (at most a third of the run): every
/// sidecar starts unpaced and learns the bucket's pace in its first seconds.
pub const WARMUP: Duration = Duration::from_secs(10);

/// The CSV columns, documented in README "Simulate".
pub const CSV_HEADER: &str =
    "time_s,capacity_per_s,attempts,successes,throttles,retries,client_errors,interval_ms";

/// 100 ms of the run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Bin {
    /// In force at the bin's start.
    pub capacity: f64,
    /// Upstream attempts dispatched in the bin, retries included.
    pub attempts: u64,
    pub successes: u64,
    pub throttles: u64,
    /// Attempts that were easeoff's retries.
    pub retries: u64,
    /// Client requests that ended in the bin with a throttle or a shed.
    pub client_errors: u64,
    /// At the bin's end: the interval of each sidecar's latest dispatch, averaged.
    pub interval_ms: f64,
    /// The same per sidecar.
    pub intervals_ms: Vec<f64>,
}

/// The run in 100 ms bins.
pub fn bins(options: &SimOptions, trace: &Trace) -> Vec<Bin> {
    let n = bin_count(options.duration);
    let mut bins = vec![Bin::default(); n];
    let index = |at: Duration| bin_of(at).min(n - 1);

    let mut changes = trace.capacity.iter().peekable();
    let mut capacity = 0.0;
    for (i, bin) in bins.iter_mut().enumerate() {
        while let Some(&&(at, rate)) = changes.peek() {
            if bin_of(at) > i {
                break;
            }
            capacity = rate;
            changes.next();
        }
        bin.capacity = capacity;
    }

    let mut latest = vec![0.0; options.sidecars];
    let mut attempts = trace.attempts.iter().peekable();
    for (i, bin) in bins.iter_mut().enumerate() {
        while let Some(a) = attempts.next_if(|a| index(a.at) <= i) {
            bin.attempts += 1;
            if a.throttled {
                bin.throttles += 1;
            } else {
                bin.successes += 1;
            }
            bin.retries += u64::from(a.retry);
            if let Some(slot) = latest.get_mut(a.sidecar) {
                *slot = a.interval.as_secs_f64() * 1e3;
            }
        }
        bin.interval_ms = latest.iter().sum::<f64>() / latest.len().max(1) as f64;
        bin.intervals_ms.clone_from(&latest);
    }
    for r in &trace.requests {
        if r.ending != Ending::Success {
            bins[index(r.at)].client_errors += 1;
        }
    }
    bins
}

/// The bins as CSV, one line per 100 ms after the header; with several sidecars,
/// each one's interval follows in `interval_ms_0`, `interval_ms_1`, ...
pub fn csv(bins: &[Bin]) -> String {
    let sidecars = bins.first().map_or(0, |b| b.intervals_ms.len());
    let mut out = String::with_capacity((64 + 10 * sidecars) * (bins.len() + 1));
    out.push_str(CSV_HEADER);
    if sidecars > 1 {
        for i in 0..sidecars {
            let _ = write!(out, ",interval_ms_{i}");
        }
    }
    out.push('\n');
    for (i, b) in bins.iter().enumerate() {
        let _ = write!(
            out,
            "{:.1},{},{},{},{},{},{},{:.3}",
            i as f64 * BIN.as_secs_f64(),
            b.capacity,
            b.attempts,
            b.successes,
            b.throttles,
            b.retries,
            b.client_errors,
            b.interval_ms
        );
        if sidecars > 1 {
            for interval in &b.intervals_ms {
                let _ = write!(out, ",{interval:.3}");
            }
        }
        out.push('\n');
    }
    out
}

/// A stretch of constant capacity, in bins.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Phase {
    pub start: usize,
    pub end: usize,
    pub capacity: f64,
}

/// The stretches between capacity changes.
pub fn phases(bins: &[Bin]) -> Vec<Phase> {
    let mut phases: Vec<Phase> = Vec::new();
    for (i, bin) in bins.iter().enumerate() {
        match phases.last_mut() {
            Some(p) if p.capacity == bin.capacity => p.end = i + 1,
            _ => phases.push(Phase {
                start: i,
                end: i + 1,
                capacity: bin.capacity,
            }),
        }
    }
    phases
}

/// How a phase went.
#[derive(Clone, Debug, PartialEq)]
pub struct PhaseStats {
    pub attempts: u64,
    pub successes: u64,
    pub throttles: u64,
    pub retries: u64,
    pub client_errors: u64,
    /// Successes per second.
    pub goodput: f64,
    /// Mean over the phase of the bins' interval.
    pub interval_ms: f64,
    /// Seconds from the phase's start to the first window on target.
    pub first_on_target: Option<f64>,
    /// Seconds from the phase's start after which every window is on target.
    pub converged: Option<f64>,
    /// Share of the phase's windows on target.
    pub on_target: f64,
}

/// Sums and convergence of one phase.
pub fn phase_stats(bins: &[Bin], phase: Phase) -> PhaseStats {
    let span = &bins[phase.start..phase.end];
    let sum = |f: fn(&Bin) -> u64| span.iter().map(f).sum::<u64>();
    let secs = span.len() as f64 * BIN.as_secs_f64();
    let good: Vec<bool> = span
        .windows(WINDOW_BINS)
        .map(|w| on_target(w, phase.capacity))
        .collect();
    // Milliseconds first, so 29 bins print as 2.9 s rather than 2.9000000000000004.
    let at = |i: usize| (i as u128 * BIN.as_millis()) as f64 / 1e3;
    let converged = match good.iter().rposition(|g| !g) {
        None if !good.is_empty() => Some(0.0),
        Some(last_bad) if last_bad + 1 < good.len() => Some(at(last_bad + 1)),
        _ => None,
    };
    PhaseStats {
        attempts: sum(|b| b.attempts),
        successes: sum(|b| b.successes),
        throttles: sum(|b| b.throttles),
        retries: sum(|b| b.retries),
        client_errors: sum(|b| b.client_errors),
        goodput: sum(|b| b.successes) as f64 / secs,
        interval_ms: span.iter().map(|b| b.interval_ms).sum::<f64>() / span.len().max(1) as f64,
        first_on_target: good.iter().position(|g| *g).map(at),
        converged,
        on_target: good.iter().filter(|g| **g).count() as f64 / good.len().max(1) as f64,
    }
}

fn on_target(window: &[Bin], capacity: f64) -> bool {
    let attempts: u64 = window.iter().map(|b| b.attempts).sum();
    let throttles: u64 = window.iter().map(|b| b.throttles).sum();
    let successes: u64 = window.iter().map(|b| b.successes).sum();
    let secs = window.len() as f64 * BIN.as_secs_f64();
    (throttles as f64) < MAX_THROTTLED * attempts as f64
        && successes as f64 / secs >= MIN_GOODPUT * capacity
}

/// The summary printed after a run.
pub fn summary(options: &SimOptions, trace: &Trace, bins: &[Bin]) -> String {
    let mut out = String::new();
    header_lines(&mut out, options);
    overall_lines(&mut out, trace, bins);
    if options.sidecars > 1 {
        sidecar_lines(&mut out, options, trace, bins);
    }
    phase_lines(&mut out, options, bins);
    out
}

/// When the capacity of `step-up` and `fleet-step-up` changes, as the header says it.
const STEP_UP: &str = " from a third of the time on, half before";

/// What was simulated: the upstream, its sleeper, the scenario and the model.
fn header_lines(out: &mut String, options: &SimOptions) {
    let s = &options.settings;
    let secs = options.duration.as_secs_f64();
    let _ = writeln!(
        out,
        "easeoff simulate: upstream \"{}\" ({} sleeper, {} mode), scenario {}, seed {}",
        s.name,
        s.sleeper.strategy.name(),
        s.sleeper.mode.name(),
        options.scenario.name(),
        options.seed
    );
    let _ = writeln!(
        out,
        "  {secs} s, {} clients x {} sidecar(s), latency {} ms; capacity {}/s{}, burst {}",
        options.clients,
        options.sidecars,
        options.latency.as_secs_f64() * 1e3,
        options.capacity,
        match options.scenario {
            Scenario::Autoscale => format!(
                " at most (starts at half; x{} after {} s of throttling)",
                options.scale_factor,
                options.scale_after.as_secs_f64()
            ),
            Scenario::StepDown => " for the first third of the time, half after".to_string(),
            Scenario::StepUp => STEP_UP.to_string(),
            Scenario::Tables =>
                " for `fast`, a fifth for `slow`; one sidecar, each \"sidecar\" a table's clients"
                    .to_string(),
            Scenario::Fleet | Scenario::FleetStepUp => format!(
                "{}, one bucket; the sidecars share what they learn as a [fleet] does (sync every {} ms)",
                if options.scenario == Scenario::FleetStepUp {
                    STEP_UP
                } else {
                    ""
                },
                crate::config::FleetSettings::default()
                    .sync_interval
                    .as_millis()
            ),
            _ => String::new(),
        },
        options.burst
    );
    if !options.idle.is_zero() {
        let _ = writeln!(
            out,
            "  the clients start after {} s idle",
            options.idle.as_secs_f64()
        );
    }
}

/// Goodput, attempts and client requests over the whole run.
fn overall_lines(out: &mut String, trace: &Trace, bins: &[Bin]) {
    let whole = phase_stats(
        bins,
        Phase {
            start: 0,
            end: bins.len(),
            capacity: 0.0,
        },
    );
    let mean_capacity = bins.iter().map(|b| b.capacity).sum::<f64>() / bins.len().max(1) as f64;
    let _ = writeln!(
        out,
        "overall: goodput {:.1}/s = {:.1}% of capacity (mean {:.1}/s)",
        whole.goodput,
        percent(whole.goodput, mean_capacity),
        mean_capacity
    );
    let _ = writeln!(
        out,
        "  upstream attempts {}: {:.1}% throttled, {} retries",
        whole.attempts,
        percent(whole.throttles as f64, whole.attempts as f64),
        whole.retries
    );
    let requests = &trace.requests;
    let count = |e: Ending| requests.iter().filter(|r| r.ending == e).count();
    let mut took: Vec<Duration> = requests.iter().map(|r| r.took).collect();
    took.sort_unstable();
    let _ = writeln!(
        out,
        "  client requests {}: {} errors ({} throttles passed on, {} shed); time p50 {}, p99 {}, max {}",
        requests.len(),
        requests.len() - count(Ending::Success),
        count(Ending::Throttled),
        count(Ending::Shed),
        ms(quantile(&took, 0.5)),
        ms(quantile(&took, 0.99)),
        ms(took.last().copied().unwrap_or_default()),
    );
}

/// One row per capacity phase: how fast the sleeper found the capacity and held it.
fn phase_lines(out: &mut String, options: &SimOptions, bins: &[Bin]) {
    let _ = writeln!(
        out,
        "phases (a 5 s window is on target with <10% of attempts throttled and goodput >= 90% of capacity;\n  first ok: the first such window starts; converged: every window from then on is on target)"
    );
    let _ = writeln!(
        out,
        "  {:>6} {:>6} {:>9} {:>9} {:>7} {:>9} {:>7} {:>9} {:>9} {:>9} {:>13} {:>9}",
        "from",
        "to",
        "capacity",
        "goodput",
        "of cap",
        "throttled",
        "errors",
        "interval",
        "(needs)",
        "first ok",
        "converged",
        "on target"
    );
    for phase in phases(bins) {
        let p = phase_stats(bins, phase);
        let needs = 1e3 * options.sidecars as f64 / phase.capacity;
        let _ = writeln!(
            out,
            "  {:>5.1}s {:>5.1}s {:>7.1}/s {:>7.1}/s {:>6.1}% {:>8.1}% {:>7} {:>6.1} ms {:>6.1} ms {:>9} {:>13} {:>8.0}%",
            phase.start as f64 * BIN.as_secs_f64(),
            phase.end as f64 * BIN.as_secs_f64(),
            phase.capacity,
            p.goodput,
            percent(p.goodput, phase.capacity),
            percent(p.throttles as f64, p.attempts as f64),
            p.client_errors,
            p.interval_ms,
            needs,
            p.first_on_target
                .map_or("never".to_string(), |t| format!("{t:.1} s")),
            p.converged
                .map_or("not converged".to_string(), |t| format!("{t:.1} s")),
            100.0 * p.on_target
        );
    }
}

/// Each sidecar's share: with one upstream shared, a sidecar whose interval runs away
/// starves while the others take the capacity.
fn sidecar_lines(out: &mut String, options: &SimOptions, trace: &Trace, bins: &[Bin]) {
    let secs = options.duration.as_secs_f64();
    for sidecar in 0..options.sidecars {
        let mine = trace.attempts.iter().filter(|a| a.sidecar == sidecar);
        let (attempts, throttles) = mine.fold((0u64, 0u64), |(n, t), a| {
            (n + 1, t + u64::from(a.throttled))
        });
        let errors = trace
            .requests
            .iter()
            .filter(|r| r.sidecar == sidecar && r.ending != Ending::Success)
            .count();
        let interval = bins
            .iter()
            .filter_map(|b| b.intervals_ms.get(sidecar))
            .sum::<f64>()
            / bins.len().max(1) as f64;
        let who = match TABLES
            .get(sidecar)
            .filter(|_| options.scenario == Scenario::Tables)
        {
            Some((table, share)) => format!("table {table} ({}/s)", options.capacity * share),
            None => format!("sidecar {sidecar}"),
        };
        let _ = writeln!(
            out,
            "  {who}: goodput {:.1}/s, {:.1}% of its attempts throttled, {errors} client errors, mean interval {interval:.1} ms",
            (attempts - throttles) as f64 / secs,
            percent(throttles as f64, attempts as f64),
        );
    }
}

/// Several sidecars on one bucket, after the [`WARMUP`].
#[derive(Clone, Debug, PartialEq)]
pub struct FleetStats {
    /// Successful attempts per second over the capacity.
    pub goodput: f64,
    /// Throttled attempts over all attempts.
    pub throttled: f64,
    /// Jain's fairness index over the sidecars' goodput: 1 when all got the same,
    /// `1 / n` when one got everything.
    pub jain: f64,
    /// Each sidecar's goodput, per second.
    pub rates: Vec<f64>,
}

/// [`FleetStats`] of a run, from the end of the [`WARMUP`] (or the first third).
pub fn fleet_stats(options: &SimOptions, trace: &Trace) -> FleetStats {
    let from = WARMUP.min(options.duration / 3);
    let secs = options.duration.saturating_sub(from).as_secs_f64();
    let mut ok = vec![0u64; options.sidecars];
    let (mut attempts, mut throttles) = (0u64, 0u64);
    for a in trace.attempts.iter().filter(|a| a.at >= from) {
        attempts += 1;
        if a.throttled {
            throttles += 1;
        } else if let Some(n) = ok.get_mut(a.sidecar) {
            *n += 1;
        }
    }
    let rates: Vec<f64> = ok.iter().map(|&n| n as f64 / secs).collect();
    FleetStats {
        goodput: rates.iter().sum::<f64>() / options.capacity,
        throttled: percent(throttles as f64, attempts as f64) / 100.0,
        jain: jain(&rates),
        rates,
    }
}

/// Jain's fairness index of `x`: `(Σx)² / (n Σx²)`; 1 for no one or nothing.
pub fn jain(x: &[f64]) -> f64 {
    let squares: f64 = x.iter().map(|v| v * v).sum();
    if squares == 0.0 {
        return 1.0;
    }
    let sum: f64 = x.iter().sum();
    sum * sum / (x.len() as f64 * squares)
}

/// The fleet scenario's closing table: the same sidecars on their own and as a fleet.
pub fn fleet_comparison(options: &SimOptions, independent: &Trace, fleet: &Trace) -> String {
    let mut out = String::new();
    let from = WARMUP.min(options.duration / 3);
    let _ = writeln!(
        out,
        "independent vs fleet ({} sidecars x {} clients, one {}/s bucket, after the first {} s):",
        options.sidecars,
        options.clients,
        options.capacity,
        from.as_secs_f64()
    );
    let _ = writeln!(
        out,
        "  {:<12} {:>16} {:>10} {:>6}  sidecar goodput min-max (/s)",
        "mode", "goodput/capacity", "throttled", "jain"
    );
    for (mode, trace) in [("independent", independent), ("fleet", fleet)] {
        let s = fleet_stats(options, trace);
        let low = s.rates.iter().copied().fold(f64::INFINITY, f64::min);
        let high = s.rates.iter().copied().fold(0.0, f64::max);
        let _ = writeln!(
            out,
            "  {mode:<12} {:>16.3} {:>9.2}% {:>6.3}  {low:.1}-{high:.1}",
            s.goodput,
            100.0 * s.throttled,
            s.jain
        );
    }
    out.push_str(&cold_start_lines(options, fleet));
    out
}

/// How long [`cold_start`] measures from the first request.
pub const COLD_SPAN: Duration = Duration::from_secs(40);

/// The first seconds of a run, measured from the first request (no warm-up).
#[derive(Clone, Debug, PartialEq)]
pub struct ColdStart {
    /// Each second's successes and throttles, from the start.
    pub seconds: Vec<(u64, u64)>,
    /// When the first throttle came; `None` if none did.
    pub first_throttle: Option<Duration>,
    /// Whole seconds from the second of the first throttle until every later second
    /// reached 0.95 of capacity; `None` if that never happened.
    pub settled_after: Option<u64>,
    /// The least successes of a second from 5 s after the first throttle on, over the
    /// capacity.
    pub lowest_after_5s: Option<f64>,
    /// Over the span: goodput over capacity, throttled share of attempts, Jain.
    pub goodput: f64,
    pub throttled: f64,
    pub jain: f64,
}

/// [`ColdStart`] of the first [`COLD_SPAN`] from the first attempt (at most the rest
/// of the run) of a trace; times count from that attempt.
#[allow(
    clippy::cast_possible_truncation,
    reason = "whole seconds of a run fit a usize"
)]
pub fn cold_start(options: &SimOptions, trace: &Trace) -> ColdStart {
    let t0 = trace.attempts.first().map_or(Duration::ZERO, |a| a.at);
    let span = COLD_SPAN.min(options.duration.saturating_sub(t0));
    let n = span.as_secs() as usize;
    let mut seconds = vec![(0u64, 0u64); n];
    let mut ok = vec![0u64; options.sidecars];
    let mut first_throttle = None;
    for (a, at) in trace.attempts.iter().map(|a| (a, a.at - t0)) {
        if at >= span {
            break;
        }
        if a.throttled {
            first_throttle.get_or_insert(at);
        }
        if let Some(s) = seconds.get_mut(at.as_secs() as usize) {
            if a.throttled {
                s.1 += 1;
            } else {
                s.0 += 1;
                if let Some(k) = ok.get_mut(a.sidecar) {
                    *k += 1;
                }
            }
        }
    }
    let capacity = options.capacity;
    let good = |s: &(u64, u64)| s.0 as f64 >= 0.95 * capacity;
    let start = first_throttle.map(|t| t.as_secs() as usize);
    let settled_after = start.and_then(|start| {
        (start..n)
            .find(|&s| seconds[s..].iter().all(good))
            .map(|s| (s - start) as u64)
    });
    let lowest_after_5s = start
        .and_then(|start| seconds.get(start + 5..))
        .and_then(|after| after.iter().map(|s| s.0).min())
        .map(|low| low as f64 / capacity);
    let (succeeded, throttled): (u64, u64) =
        seconds.iter().fold((0, 0), |(a, b), s| (a + s.0, b + s.1));
    let rates: Vec<f64> = ok.iter().map(|&k| k as f64).collect();
    ColdStart {
        seconds,
        first_throttle,
        settled_after,
        lowest_after_5s,
        goodput: succeeded as f64 / (span.as_secs_f64() * capacity),
        throttled: percent(throttled as f64, (succeeded + throttled) as f64) / 100.0,
        jain: jain(&rates),
    }
}

/// [`cold_start`] in words: the figures, then the per-second series.
pub fn cold_start_lines(options: &SimOptions, trace: &Trace) -> String {
    let c = cold_start(options, trace);
    let mut out = String::new();
    let t0 = trace.attempts.first().map_or(Duration::ZERO, |a| a.at);
    let span = COLD_SPAN.min(options.duration.saturating_sub(t0)).as_secs();
    let first = c
        .first_throttle
        .map_or("none".to_string(), |t| format!("{:.2} s", t.as_secs_f64()));
    let settled = c
        .settled_after
        .map_or("never".to_string(), |s| format!("{s} s"));
    let lowest = c
        .lowest_after_5s
        .map_or("-".to_string(), |l| format!("{l:.2}"));
    let _ = writeln!(
        out,
        "cold start (the first {span} s, from the first request): goodput {:.3}, throttled {:.2}%, jain {:.3}; first throttle at {first}, >= 0.95 of capacity for good {settled} after it, lowest second from 5 s after it: {lowest} of capacity",
        c.goodput,
        100.0 * c.throttled,
        c.jain
    );
    let series: Vec<String> = c
        .seconds
        .iter()
        .enumerate()
        .map(|(s, (ok, th))| format!("{}:{ok}/{th}", s + 1))
        .collect();
    let _ = writeln!(
        out,
        "  per second (accepted/throttled): {}",
        series.join(" ")
    );
    out
}

fn bin_count(duration: Duration) -> usize {
    usize::try_from(duration.as_nanos().div_ceil(BIN.as_nanos()))
        .unwrap_or(usize::MAX)
        .max(1)
}

fn bin_of(at: Duration) -> usize {
    usize::try_from(at.as_nanos() / BIN.as_nanos()).unwrap_or(usize::MAX)
}

fn percent(part: f64, whole: f64) -> f64 {
    if whole > 0.0 {
        100.0 * part / whole
    } else {
        0.0
    }
}

#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "float to integer `as` saturates, as wanted here"
)]
fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` bins at `capacity`, each with `ok` successes and `throttled` throttles.
    fn run(n: usize, capacity: f64, ok: u64, throttled: u64) -> Vec<Bin> {
        let bin = Bin {
            capacity,
            attempts: ok + throttled,
            successes: ok,
            throttles: throttled,
            ..Bin::default()
        };
        vec![bin; n]
    }

    fn phase(bins: &[Bin]) -> PhaseStats {
        phase_stats(
            bins,
            Phase {
                start: 0,
                end: bins.len(),
                capacity: bins[0].capacity,
            },
        )
    }

    #[test]
    fn a_phase_on_target_from_the_start_converges_at_zero() {
        // 10 per 100 ms = 100/s at capacity 100, none throttled.
        let p = phase(&run(100, 100.0, 10, 0));
        assert_eq!((p.first_on_target, p.converged), (Some(0.0), Some(0.0)));
        assert_eq!(p.on_target, 1.0);
        assert!((p.goodput - 100.0).abs() < 1e-9);
    }

    #[test]
    fn convergence_is_the_start_of_the_first_window_after_the_last_bad_one() {
        // 3 s of heavy throttling, then on target: a window holding even one of the
        // throttling bins is off target, so convergence is at 3.0 s.
        let mut bins = run(30, 100.0, 0, 100);
        bins.extend(run(100, 100.0, 10, 0));
        let p = phase(&bins);
        assert_eq!(p.converged, Some(3.0));
        assert_eq!(p.first_on_target, Some(3.0));
    }

    #[test]
    fn one_bad_window_late_in_the_phase_means_not_converged_yet() {
        let mut bins = run(100, 100.0, 10, 0);
        bins[99].throttles = 100;
        bins[99].attempts = 110;
        let p = phase(&bins);
        assert_eq!(p.first_on_target, Some(0.0));
        assert_eq!(p.converged, None);
    }

    #[test]
    fn goodput_below_ninety_percent_is_off_target_even_without_throttles() {
        let p = phase(&run(100, 100.0, 8, 0));
        assert_eq!((p.first_on_target, p.converged), (None, None));
        let p = phase(&run(100, 100.0, 9, 0));
        assert_eq!(p.converged, Some(0.0));
    }

    #[test]
    fn a_phase_shorter_than_a_window_never_converges() {
        let p = phase(&run(49, 100.0, 10, 0));
        assert_eq!((p.first_on_target, p.converged), (None, None));
    }

    #[test]
    fn phases_split_where_the_capacity_changes() {
        let mut bins = run(3, 100.0, 1, 0);
        bins.extend(run(2, 50.0, 1, 0));
        let found = phases(&bins);
        assert_eq!(
            found,
            [
                Phase {
                    start: 0,
                    end: 3,
                    capacity: 100.0
                },
                Phase {
                    start: 3,
                    end: 5,
                    capacity: 50.0
                }
            ]
        );
    }

    #[test]
    fn the_csv_has_a_line_per_bin_and_an_interval_column_per_sidecar_when_several() {
        let mut bins = run(2, 100.0, 3, 1);
        for b in &mut bins {
            b.intervals_ms = vec![10.0, 20.0];
            b.interval_ms = 15.0;
        }
        let csv = csv(&bins);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(
            lines[0],
            format!("{CSV_HEADER},interval_ms_0,interval_ms_1")
        );
        assert_eq!(lines[2], "0.1,100,4,3,1,0,0,15.000,10.000,20.000");
        bins.iter_mut().for_each(|b| b.intervals_ms.truncate(1));
        assert_eq!(super::csv(&bins).lines().next(), Some(CSV_HEADER));
    }

    #[test]
    fn jain_is_one_for_equal_shares_and_one_over_n_for_one_taking_all() {
        assert_eq!(jain(&[5.0, 5.0, 5.0, 5.0]), 1.0);
        assert_eq!(jain(&[8.0, 0.0, 0.0, 0.0]), 0.25);
        assert_eq!(jain(&[]), 1.0);
        assert!((jain(&[1.0, 3.0]) - 0.8).abs() < 1e-12);
    }
}
