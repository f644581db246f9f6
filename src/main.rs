//! The `easeoff` binary: parse the command line, set up logging, dispatch, exit with
//! 0 (done), 1 (runtime failure) or 2 (usage or configuration error).

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use easeoff::cli::{
    Cli, Command, DemoArgs, LogFormat, MockArgs, ProbeArgs, SimulateArgs, StatusArgs, TrainArgs,
};
use easeoff::demo::{self, DemoOptions};
use easeoff::mock_upstream::{self, AutoScale, MockOptions, Style};
use easeoff::proxy::ClientError;
use easeoff::server::{Handle, StartError};
use easeoff::signals::{Request, Signals};
use easeoff::simulate::{self, Scenario, SimOptions};
use easeoff::{Config, Server};
use tracing_subscriber::EnvFilter;

const RUNTIME_FAILURE: u8 = 1;
const USAGE: u8 = 2;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let quiet = matches!(
        cli.command,
        Some(
            Command::Demo(_)
                | Command::Check
                | Command::Status(_)
                | Command::Probe(_)
                | Command::Train(_)
        )
    );
    init_logging(&cli, if quiet { "warn" } else { "info" });
    log_panics();
    match cli.command {
        // Its own single-threaded runtime in paused time.
        Some(Command::Simulate(args)) => return run_simulate(cli.config, args),
        // A health check runs often: one thread is plenty.
        Some(Command::Probe(args)) => return run_probe(args),
        _ => {}
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("easeoff: cannot start the async runtime: {error}");
            return ExitCode::from(RUNTIME_FAILURE);
        }
    };
    match cli.command {
        None | Some(Command::Run) => runtime.block_on(run(cli.config)),
        Some(Command::Check) => check(cli.config),
        Some(Command::Demo(args)) => runtime.block_on(run_demo(args)),
        Some(Command::MockUpstream(args)) => runtime.block_on(run_mock(args)),
        Some(Command::Simulate(args)) => run_simulate(cli.config, args),
        Some(Command::Status(args)) => runtime.block_on(status(cli.config, args)),
        Some(Command::Probe(args)) => run_probe(args),
        Some(Command::Train(args)) => runtime.block_on(run_train(args)),
    }
}

async fn run_train(args: TrainArgs) -> ExitCode {
    match easeoff::train::run(args.requests, args.clients, &mut std::io::stdout()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("easeoff train: {error}");
            ExitCode::from(RUNTIME_FAILURE)
        }
    }
}

async fn status(config: Option<PathBuf>, args: StatusArgs) -> ExitCode {
    let admin = match (args.admin, config) {
        (Some(admin), _) => admin,
        (None, Some(path)) => match load(Some(path)) {
            Ok(config) => config.server.admin_listen.to_string(),
            Err(code) => return code,
        },
        (None, None) => easeoff::status::DEFAULT_ADMIN.to_string(),
    };
    match easeoff::status::fetch(&admin).await {
        Ok(status) => {
            print!("{}", easeoff::status::render(&status, &admin));
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("easeoff status: {error}");
            ExitCode::from(RUNTIME_FAILURE)
        }
    }
}

/// Exit 1 for every failure, a bad URL included: Docker reserves a HEALTHCHECK's
/// exit code 2.
fn run_probe(args: ProbeArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("easeoff probe: cannot start the async runtime: {error}");
            return ExitCode::from(RUNTIME_FAILURE);
        }
    };
    match runtime.block_on(easeoff::probe::probe(&args.url, args.timeout)) {
        Ok(status) => {
            println!("{status}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("easeoff probe: {}: {error}", args.url);
            ExitCode::from(RUNTIME_FAILURE)
        }
    }
}

fn load(path: Option<PathBuf>) -> Result<Config, ExitCode> {
    let Some(path) = path else {
        eprintln!("easeoff: no config file: pass --config FILE or set EASEOFF_CONFIG");
        return Err(ExitCode::from(USAGE));
    };
    Config::load(&path).map_err(|error| {
        eprintln!("{error}");
        ExitCode::from(USAGE)
    })
}

fn check(path: Option<PathBuf>) -> ExitCode {
    match load(path) {
        Ok(config) => {
            print!("{}", config.to_toml());
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}

async fn run(path: Option<PathBuf>) -> ExitCode {
    let signals = match Signals::install() {
        Ok(signals) => signals,
        Err(error) => {
            eprintln!("easeoff: cannot install signal handlers: {error}");
            return ExitCode::from(RUNTIME_FAILURE);
        }
    };
    let config = match load(path.clone()) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let server = match Server::bind(config).await {
        Ok(server) => server,
        Err(error) => {
            tracing::error!(%error, "cannot start");
            eprintln!("easeoff: {error}");
            // Missing credentials are the deployment's to fix, like a config error; a
            // CA file that changed since it was read is a config error.
            let code = match error {
                StartError::Credentials { .. }
                | StartError::Client {
                    source: ClientError::CaFile { .. },
                    ..
                } => USAGE,
                _ => RUNTIME_FAILURE,
            };
            return ExitCode::from(code);
        }
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(on_signals(signals, server.handle(), path, stop));
    match server
        .run(async move {
            let _ = stopped.await;
        })
        .await
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(%error, "stopped on an error");
            ExitCode::from(RUNTIME_FAILURE)
        }
    }
}

/// Reloads on SIGHUP; the first SIGTERM/SIGINT starts the drain, a second one ends
/// the process at once (an impatient Ctrl-C).
async fn on_signals(
    mut signals: Signals,
    handle: Handle,
    path: Option<PathBuf>,
    stop: tokio::sync::oneshot::Sender<()>,
) {
    let mut stop = Some(stop);
    loop {
        match signals.recv().await {
            Request::Reload => reload(&handle, path.as_deref()).await,
            Request::Stop(signal) => match stop.take() {
                Some(stop) => {
                    tracing::info!(signal, "shutting down");
                    let _ = stop.send(());
                }
                None => {
                    tracing::warn!(signal, "second stop signal: exiting without draining");
                    std::process::exit(i32::from(RUNTIME_FAILURE));
                }
            },
        }
    }
}

async fn reload(handle: &Handle, path: Option<&std::path::Path>) {
    let Some(path) = path else { return };
    let config = match Config::load(path) {
        Ok(config) => config,
        Err(error) => {
            handle.reload_failed();
            tracing::error!(error = %error, "reload failed; keeping the running config");
            return;
        }
    };
    match handle.reload(config).await {
        Ok(done) => {
            if done.server_changed {
                tracing::warn!("[server] settings changed; they take effect on restart");
            }
            if done.fleet_changed {
                tracing::warn!("[fleet] settings changed; they take effect on restart");
            }
            tracing::info!(
                kept = ?done.kept,
                rebuilt = ?done.rebuilt,
                added = ?done.added,
                removed = ?done.removed,
                "config reloaded"
            );
        }
        Err(error) => tracing::error!(%error, "reload failed; keeping the running config"),
    }
}

async fn run_demo(args: DemoArgs) -> ExitCode {
    let options = DemoOptions {
        duration: args.duration,
        out: args.out,
        clients: args.clients.max(1),
        rate: args.rate,
        burst: args.burst,
        admin: args.admin,
    };
    match demo::run(&options, &mut std::io::stdout()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("easeoff demo: {error}");
            ExitCode::from(RUNTIME_FAILURE)
        }
    }
}

#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "float to integer `as` saturates, as wanted here"
)]
async fn run_mock(args: MockArgs) -> ExitCode {
    let mut signals = match Signals::install() {
        Ok(signals) => signals,
        Err(error) => {
            eprintln!("easeoff mock-upstream: cannot install signal handlers: {error}");
            return ExitCode::from(RUNTIME_FAILURE);
        }
    };
    let schedule = args.schedule.unwrap_or_default();
    let Some(rate) = schedule.initial_rate().or(args.rate) else {
        eprintln!(
            "easeoff mock-upstream: --schedule {schedule} does not start at 0s: give --rate for the start, or a 0s step"
        );
        return ExitCode::from(USAGE);
    };
    if !rate.is_finite() || rate <= 0.0 {
        eprintln!("easeoff mock-upstream: --rate must be above 0, got {rate}");
        return ExitCode::from(USAGE);
    }
    if (!args.table_rate.is_empty() || args.key_rate.is_some()) && args.style != Style::Dynamodb {
        eprintln!("easeoff mock-upstream: --table-rate and --key-rate need --style dynamodb");
        return ExitCode::from(USAGE);
    }
    if let Some(key_rate) = args.key_rate.filter(|r| !r.is_finite() || *r <= 0.0) {
        eprintln!("easeoff mock-upstream: --key-rate must be above 0, got {key_rate}");
        return ExitCode::from(USAGE);
    }
    if !args.partition_wcu.is_finite() || args.partition_wcu < 0.0 {
        let wcu = args.partition_wcu;
        eprintln!("easeoff mock-upstream: --partition-wcu must be 0 or above, got {wcu}");
        return ExitCode::from(USAGE);
    }
    if let Some(seconds) = args.burst_seconds.filter(|s| !s.is_finite() || *s <= 0.0) {
        eprintln!("easeoff mock-upstream: --burst-seconds must be above 0, got {seconds}");
        return ExitCode::from(USAGE);
    }
    let options = MockOptions {
        rate,
        burst: args.burst.unwrap_or((rate / 10.0).ceil() as u32).max(1),
        style: args.style,
        latency: args.latency,
        autoscale: args.scale_after.map(|after| AutoScale {
            after,
            factor: args.scale_factor.max(1.0),
            max: args.scale_max.unwrap_or(rate * 10.0),
        }),
        schedule,
        table_rates: args.table_rate,
        key_rate: args.key_rate,
        partition_wcu: (args.style == Style::Dynamodb && args.partition_wcu > 0.0)
            .then_some(args.partition_wcu),
        burst_seconds: args.burst_seconds,
        charge_by_size: args.charge_by_size,
        throttle_paths: args.throttle_path,
        overload_every: args.overload_every,
    };
    let (mock, addr) = match mock_upstream::spawn(options.clone(), args.listen).await {
        Ok(started) => started,
        Err(error) => {
            eprintln!(
                "easeoff mock-upstream: cannot listen on {}: {error}",
                args.listen
            );
            return ExitCode::from(RUNTIME_FAILURE);
        }
    };
    if let Some(admin) = args.admin {
        match tokio::net::TcpListener::bind(admin).await {
            Ok(listener) => {
                tokio::spawn(mock.clone().serve_admin(listener));
            }
            Err(error) => {
                eprintln!("easeoff mock-upstream: cannot listen on {admin}: {error}");
                return ExitCode::from(RUNTIME_FAILURE);
            }
        }
    }
    tracing::info!(%addr, rate = options.rate, burst = options.burst, burst_seconds = ?options.burst_seconds, style = ?options.style, schedule = %options.schedule, "mock upstream listening");
    signals.stop().await;
    ExitCode::SUCCESS
}

#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "float to integer `as` saturates, as wanted here"
)]
fn run_simulate(path: Option<PathBuf>, args: SimulateArgs) -> ExitCode {
    let shown = path
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let config = match load(path) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let Some(settings) = config
        .upstreams
        .iter()
        .find(|u| u.name == args.upstream)
        .cloned()
    else {
        let names: Vec<&str> = config.upstreams.iter().map(|u| u.name.as_str()).collect();
        eprintln!(
            "easeoff simulate: {shown}: no upstream named \"{}\" (the file has: {})",
            args.upstream,
            names.join(", ")
        );
        return ExitCode::from(USAGE);
    };
    let options = SimOptions {
        settings,
        scenario: args.scenario,
        seed: args.seed,
        duration: args.duration,
        capacity: args.capacity,
        burst: args
            .burst
            .unwrap_or((args.capacity / 10.0).ceil() as u32)
            .max(1),
        clients: args.clients,
        latency: args.latency,
        jitter: args.jitter,
        sidecars: match args.scenario {
            // One sidecar; its two tables are reported apart.
            Scenario::Tables => 2,
            Scenario::Shared => args.sidecars.unwrap_or(2),
            Scenario::Fleet | Scenario::FleetStepUp => args.sidecars.unwrap_or(16),
            _ => args.sidecars.unwrap_or(1),
        },
        idle: args.idle,
        scale_after: args.scale_after,
        scale_factor: args.scale_factor,
    };
    if let Err(problem) = options.validate() {
        eprintln!("easeoff simulate: {problem}");
        return ExitCode::from(USAGE);
    }
    let trace = match simulate::run(&options) {
        Ok(trace) => trace,
        Err(error) => {
            eprintln!("easeoff simulate: {error}");
            return ExitCode::from(RUNTIME_FAILURE);
        }
    };
    let bins = simulate::report::bins(&options, &trace);
    let csv_path = args.csv.unwrap_or_else(|| args.out.with_extension("csv"));
    let files = [
        (&args.out, simulate::svg(&options, &trace)),
        (&csv_path, simulate::report::csv(&bins)),
    ];
    for (file, contents) in files {
        if let Err(error) = std::fs::write(file, contents) {
            eprintln!("easeoff simulate: cannot write {}: {error}", file.display());
            return ExitCode::from(RUNTIME_FAILURE);
        }
    }
    print!("{}", simulate::report::summary(&options, &trace, &bins));
    if options.scenario.fleet() {
        match simulate::compare_fleet(&options, &trace) {
            Ok(table) => print!("{table}"),
            Err(error) => {
                eprintln!("easeoff simulate: {error}");
                return ExitCode::from(RUNTIME_FAILURE);
            }
        }
    }
    println!("wrote {} and {}", args.out.display(), csv_path.display());
    ExitCode::SUCCESS
}

/// Sends panics through the log, so they arrive as JSON lines when the log is JSON,
/// instead of as plain text beside it.
fn log_panics() {
    std::panic::set_hook(Box::new(|info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
            .unwrap_or("a panic without a message");
        let location = info.location().map(ToString::to_string);
        let thread = std::thread::current();
        tracing::error!(
            panic = message,
            location = location.as_deref().unwrap_or("unknown"),
            thread = thread.name().unwrap_or("unnamed"),
            "panicked; this is a bug in easeoff"
        );
    }));
}

fn init_logging(cli: &Cli, default_level: &str) {
    let filter = cli
        .log_level
        .clone()
        .or_else(|| std::env::var("RUST_LOG").ok())
        .unwrap_or_else(|| default_level.to_string());
    let filter = EnvFilter::try_new(&filter).unwrap_or_else(|error| {
        eprintln!("easeoff: ignoring log filter {filter:?}: {error}");
        EnvFilter::new(default_level)
    });
    // The SigV4 signer traces the credentials it signs with (the access key id) and
    // the request it signs: credentials never reach the log, at any level.
    let filter = match "aws_sigv4=debug".parse() {
        Ok(directive) => filter.add_directive(directive),
        Err(_) => filter,
    };
    let json = match cli.log_format {
        Some(format) => format == LogFormat::Json,
        None => !std::io::stderr().is_terminal(),
    };
    // Colour codes only for a person at a terminal, never into a file or a collector.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    if json {
        builder.json().flatten_event(true).init();
    } else {
        builder.init();
    }
}
