//! The benchmark harness for issue 5, run against the real binaries:
//!
//! - `control`: goodput, throttled share and convergence against `easeoff mock-upstream`
//!   for a capacity scenario, through `easeoff run` or with an SDK-style baseline;
//! - `pacing`: how evenly `easeoff run` spaces requests at a constant interval;
//! - `churn`: RSS and descriptors across waves of distinct lanes.
//!
//! `bench/control.sh` and `bench/pacing.sh` build what they need and call this.

#![allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "a benchmark's counts and percentiles are small; float to integer `as` saturates"
)]

mod adaptive;
mod analysis;
mod churn;
mod control;
mod pacing;
mod procs;
mod sdk;
mod standard;
mod stats;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use easeoff::config::units::parse_duration;

#[derive(Debug, Parser)]
#[command(name = "bench")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Control quality against the mock: one row per (scenario, client, run).
    Control(ControlArgs),
    /// Pacing fidelity of the constant strategy.
    Pacing(PacingArgs),
    /// RSS and descriptors across waves of distinct DynamoDB tables.
    Churn(ChurnArgs),
}

#[derive(Debug, Args)]
struct ControlArgs {
    /// The easeoff binary (release build).
    #[arg(long, default_value = "target/release/easeoff")]
    bin: PathBuf,
    /// Scenarios to run.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "steady,step-down,step-up,autoscale"
    )]
    scenario: Vec<control::Scenario>,
    /// Clients: easeoff:STRATEGY (any strategy name easeoff accepts; easeoff:STRATEGY+observe
    /// in mode = "observe"), sdk-standard, sdk-adaptive.
    #[arg(long, value_delimiter = ',', value_parser = control::Kind::parse,
          default_value = "easeoff:cubic,easeoff:responsive,sdk-standard,sdk-adaptive")]
    client: Vec<control::Kind>,
    /// Runs of each (scenario, client); a median row follows when more than one.
    #[arg(long, default_value_t = 1)]
    runs: u32,
    /// Closed-loop writers with unbounded demand.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Phase length: steady runs 2 phases, the others 3 (a step after the first).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    phase: Duration,
    /// Left out of the after-warm-up figures.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    warmup: Duration,
    /// The mock's burst.
    #[arg(long, default_value_t = 10)]
    burst: u32,
    /// The mock's latency per answer.
    #[arg(long, default_value = "5ms", value_parser = parse_duration)]
    latency: Duration,
    /// Runs at once, each with its own processes and ports.
    #[arg(long, default_value_t = 1)]
    jobs: usize,
    /// Write the 500 ms series of each run here as CSV.
    #[arg(long)]
    csv_dir: Option<PathBuf>,
    /// Write an SVG of easeoff's interval and the throttles of each easeoff run here.
    #[arg(long)]
    svg_dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct PacingArgs {
    /// The easeoff binary (release build).
    #[arg(long, default_value = "target/release/easeoff")]
    bin: PathBuf,
    /// Constant intervals to measure.
    #[arg(long, value_delimiter = ',', value_parser = parse_duration, default_value = "5ms,20ms,100ms")]
    interval: Vec<Duration>,
    /// Measuring time per interval (stretched to at least --min-gaps gaps).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    duration: Duration,
    /// Fewest gaps per interval.
    #[arg(long, default_value_t = 200)]
    min_gaps: u32,
    /// Concurrent writers.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Arrivals in this first stretch are left out.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    warmup: Duration,
}

#[derive(Debug, Args)]
struct ChurnArgs {
    /// The easeoff binary (release build).
    #[arg(long, default_value = "target/release/easeoff")]
    bin: PathBuf,
    /// Distinct tables per wave.
    #[arg(long, default_value_t = 10_000)]
    tables: u64,
    /// Waves, each followed by an idle spell.
    #[arg(long, default_value_t = 2)]
    waves: u32,
    /// Requests to each table in turn.
    #[arg(long, default_value_t = 2)]
    per_table: u32,
    /// Concurrent writers.
    #[arg(long, default_value_t = 64)]
    clients: usize,
    /// The upstream's max_lanes (default: easeoff's).
    #[arg(long)]
    max_lanes: Option<usize>,
    /// The upstream's lane_idle.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    lane_idle: Duration,
    /// The constant interval every lane paces at; 0: the default sleeper (lanes
    /// that never wait).
    #[arg(long, default_value = "2ms", value_parser = parse_duration)]
    interval: Duration,
    /// Runs the sidecar in a `[fleet]` on this Redis URL (one that refuses: Redis down).
    #[arg(long)]
    fleet: Option<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("bench: cannot start the async runtime: {error}");
            return ExitCode::from(1);
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Control(a) => {
                control::main(control::Options {
                    bin: a.bin,
                    scenarios: a.scenario,
                    kinds: a.client,
                    runs: a.runs.max(1),
                    clients: a.clients.max(1),
                    phase: a.phase.as_secs_f64(),
                    warmup: a.warmup.as_secs_f64(),
                    burst: a.burst,
                    latency: a.latency,
                    jobs: a.jobs,
                    csv_dir: a.csv_dir,
                    svg_dir: a.svg_dir,
                })
                .await
            }
            Command::Pacing(a) => {
                pacing::main(pacing::Options {
                    bin: a.bin,
                    intervals: a.interval,
                    duration: a.duration,
                    min_gaps: a.min_gaps,
                    clients: a.clients.max(1),
                    warmup: a.warmup,
                })
                .await
            }
            Command::Churn(a) => {
                churn::main(churn::Options {
                    bin: a.bin,
                    tables: a.tables,
                    waves: a.waves,
                    per_table: a.per_table,
                    clients: a.clients.max(1),
                    max_lanes: a.max_lanes,
                    lane_idle: a.lane_idle,
                    interval: a.interval,
                    fleet: a.fleet,
                })
                .await
            }
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("bench: {error}");
            ExitCode::from(1)
        }
    }
}
