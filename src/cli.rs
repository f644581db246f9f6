//! The command line, as clap definitions only; `main.rs` acts on them.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::config::units::parse_duration;
use crate::mock_upstream::{Schedule, Style, TableRate, parse_schedule, parse_table_rate};
use crate::simulate::Scenario;

/// easeoff: a sidecar proxy that paces requests to throttled upstreams.
#[derive(Debug, Parser)]
#[command(name = "easeoff", version, propagate_version = true)]
pub struct Cli {
    /// The config file [also EASEOFF_CONFIG]; `easeoff --config FILE` runs the proxy.
    #[arg(long, env = "EASEOFF_CONFIG", global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Log format; the default is text on a terminal, JSON otherwise.
    #[arg(long, value_enum, global = true)]
    pub log_format: Option<LogFormat>,
    /// Log level or filter (e.g. "debug", "easeoff=debug"); RUST_LOG works too.
    #[arg(long, global = true, value_name = "FILTER")]
    pub log_level: Option<String>,
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// How log lines look.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the proxy until SIGTERM or SIGINT, then drain.
    Run,
    /// Validate the config and print the effective config; exit 0 if valid, 2 if not.
    Check,
    /// Show the sleeper at work: a throttling mock, easeoff and 16 clients in one process.
    Demo(DemoArgs),
    /// Serve a throttling token-bucket upstream for tests and local stacks.
    MockUpstream(MockArgs),
    /// Run an upstream's real controller and pacer in virtual time against a modelled
    /// throttling upstream; print a summary, write an SVG and a CSV trace.
    Simulate(SimulateArgs),
    /// Print a running easeoff's upstreams as a table: interval, queue, throttles,
    /// pauses (what the admin status page at / shows).
    Status(StatusArgs),
    /// GET a URL (plain HTTP) and exit 0 on a 2xx answer, 1 otherwise: a health check
    /// that needs no shell, e.g. `easeoff probe http://127.0.0.1:9901/readyz`.
    Probe(ProbeArgs),
    /// Send every kind of traffic through easeoff against in-process mocks: the
    /// training run of a profile-guided build (see the Dockerfile).
    #[command(hide = true)]
    Train(TrainArgs),
}

#[derive(Debug, Args)]
pub struct TrainArgs {
    /// Requests in all phases together.
    #[arg(long, default_value_t = 100_000)]
    pub requests: u64,
    /// Concurrent senders in each phase.
    #[arg(long, default_value_t = 16)]
    pub clients: usize,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The admin server, e.g. http://127.0.0.1:9901; default: server.admin_listen of
    /// --config, else http://127.0.0.1:9901.
    #[arg(long, value_name = "URL")]
    pub admin: Option<String>,
}

#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// What to GET, e.g. http://127.0.0.1:9901/healthz.
    pub url: String,
    /// How long connecting and the answer may take together.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub timeout: Duration,
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// How long to run.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Where to write the SVG plot of the interval.
    #[arg(long, default_value = "demo.svg")]
    pub out: PathBuf,
    /// Concurrent clients, each with unbounded demand.
    #[arg(long, default_value_t = 16)]
    pub clients: usize,
    /// Requests per second the mock accepts.
    #[arg(long, default_value_t = 50.0)]
    pub rate: f64,
    /// Requests the mock accepts at once after a quiet spell.
    #[arg(long, default_value_t = 5)]
    pub burst: u32,
    /// Where easeoff's admin server listens, to watch the run on its status page at
    /// http://ADDR/ (default: a free port, not printed).
    #[arg(long, value_name = "ADDR")]
    pub admin: Option<SocketAddr>,
}

#[derive(Debug, Args)]
pub struct MockArgs {
    /// Where to listen, e.g. 127.0.0.1:8080.
    #[arg(long)]
    pub listen: SocketAddr,
    /// Requests per second it accepts (until the first step of --schedule).
    #[arg(long, required_unless_present = "schedule")]
    pub rate: Option<f64>,
    /// Rate changes after start, TIME:RATE[,TIME:RATE...], e.g. "0s:100,60s:50"; a step
    /// at 0s sets the starting rate.
    #[arg(long, value_parser = parse_schedule, value_name = "SCHEDULE")]
    pub schedule: Option<Schedule>,
    /// Requests it accepts at once after a quiet spell [default: rate / 10, at least 1].
    #[arg(long)]
    pub burst: Option<u32>,
    /// DynamoDB's burst capacity: --rate's bucket and every --table-rate's hold SECONDS
    /// of their rate (at least 1), start full and resize as the rate changes; overrides
    /// --burst. DynamoDB retains up to 300 s of unused capacity, best effort:
    /// <https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/burst-adaptive-capacity.html>
    #[arg(long, value_name = "SECONDS")]
    pub burst_seconds: Option<f64>,
    /// How a throttle looks.
    #[arg(long, value_enum, default_value = "http429")]
    pub style: Style,
    /// Delay added before every answer, e.g. "5ms".
    #[arg(long, default_value = "0", value_parser = parse_duration)]
    pub latency: Duration,
    /// Auto-scaling: raise the rate after this much sustained throttling, e.g. "30s".
    #[arg(long, value_parser = parse_duration)]
    pub scale_after: Option<Duration>,
    /// Auto-scaling: multiply the rate by this.
    #[arg(long, default_value_t = 2.0)]
    pub scale_factor: f64,
    /// Auto-scaling: never above this rate [default: 10 × rate].
    #[arg(long)]
    pub scale_max: Option<f64>,
    /// Serve the mock's own /metrics here.
    #[arg(long)]
    pub admin: Option<SocketAddr>,
    /// Style dynamodb, repeatable: a table's own capacity in requests per second,
    /// NAME=RATE (reads and writes each) or NAME:read=RATE / NAME:write=RATE; other
    /// tables share --rate.
    #[arg(long, value_parser = parse_table_rate, value_name = "NAME[:read|:write]=RATE")]
    pub table_rate: Vec<TableRate>,
    /// Style dynamodb: requests per second each partition key value of a table accepts
    /// (the first attribute of Key or Item), throttled as a hot partition beyond it.
    #[arg(long, value_name = "RATE")]
    pub key_rate: Option<f64>,
    /// Style dynamodb: units per second the writes to one partition key value of a
    /// table take at most, DynamoDB's per-partition limit of 1,000 WCU (reads' 3,000
    /// RCU are not modelled); beyond it a hot partition, as --key-rate's. A lower
    /// --key-rate wins; 0 turns it off.
    /// <https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/bp-partition-key-design.html>
    #[arg(long, value_name = "WCU", default_value_t = 1000.0)]
    pub partition_wcu: f64,
    /// Style dynamodb: a request takes the capacity units DynamoDB's documented rules
    /// price it at, not one; the rates are then units per second. Writes one per KB
    /// (1,024 bytes) of the item, rounded up per item, at least one (Update and Delete:
    /// the key and ExpressionAttributeValues); transactions double; GetItem one if
    /// ConsistentRead, else a half, per key in BatchGetItem; others one. Item sizes:
    /// <https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/CapacityUnitCalculations.html>
    #[arg(long)]
    pub charge_by_size: bool,
    /// Requests whose path starts with PREFIX are always throttled (repeatable), e.g.
    /// a gRPC method out of quota: "/pkg.Service/Method".
    #[arg(long, value_name = "PREFIX")]
    pub throttle_path: Vec<String>,
    /// Answer every Nth request 529 `overloaded_error` (Anthropic's overload).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub overload_every: Option<u64>,
}

#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// The upstream of the config file whose settings are simulated.
    #[arg(long, value_name = "NAME")]
    pub upstream: String,
    /// Where to write the SVG plot of the interval and the capacity.
    #[arg(long, default_value = "trace.svg")]
    pub out: PathBuf,
    /// Where to write the CSV of 100 ms bins [default: the SVG's path with .csv].
    #[arg(long)]
    pub csv: Option<PathBuf>,
    /// Seeds every random choice: the same seed gives the same output.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Simulated time.
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    pub duration: Duration,
    /// How the upstream's capacity changes.
    #[arg(long, value_enum, default_value = "steady")]
    pub scenario: Scenario,
    /// Requests per second the upstream accepts (auto-scaling's maximum).
    #[arg(long, default_value_t = 100.0)]
    pub capacity: f64,
    /// Requests it accepts at once after a quiet spell [default: capacity / 10, at least 1].
    #[arg(long)]
    pub burst: Option<u32>,
    /// Clients per sidecar, each with unbounded demand.
    #[arg(long, default_value_t = 16)]
    pub clients: usize,
    /// From dispatch to answer.
    #[arg(long, default_value = "10ms", value_parser = parse_duration)]
    pub latency: Duration,
    /// How late after its dispatch an attempt may reach the upstream, drawn evenly
    /// from 0 to this for each attempt (timers, network, a busy host).
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pub jitter: Duration,
    /// easeoff instances sharing the upstream [default: 2 for shared, 16 for fleet, else 1].
    #[arg(long)]
    pub sidecars: Option<usize>,
    /// How long the sidecars sit idle before their clients start (counted in the run).
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pub idle: Duration,
    /// Auto-scaling: raise the capacity after this much sustained throttling.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub scale_after: Duration,
    /// Auto-scaling: multiply the capacity by this (never above --capacity).
    #[arg(long, default_value_t = 1.5)]
    pub scale_factor: f64,
}
