//! The `easeoff` binary: parse the command line, set up logging, dispatch, exit with
//! 0 (done), 1 (runtime failure) or 2 (usage or configuration error).

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use easeoff::cli::{Cli, Command, DemoArgs, LogFormat, MockArgs};
use easeoff::demo::{self, DemoOptions};
use easeoff::mock_upstream::{self, AutoScale, MockOptions};
use easeoff::server::{Handle, StartError};
use easeoff::signals::{Request, Signals};
use easeoff::{Config, Server};
use tracing_subscriber::EnvFilter;

const RUNTIME_FAILURE: u8 = 1;
const USAGE: u8 = 2;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let quiet = matches!(cli.command, Some(Command::Demo(_) | Command::Check));
    init_logging(&cli, if quiet { "warn" } else { "info" });
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
            // Missing credentials are the deployment's to fix, like a config error.
            let code = match error {
                StartError::Credentials { .. } => USAGE,
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
    };
    match demo::run(&options, &mut std::io::stdout()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("easeoff demo: {error}");
            ExitCode::from(RUNTIME_FAILURE)
        }
    }
}

async fn run_mock(args: MockArgs) -> ExitCode {
    let mut signals = match Signals::install() {
        Ok(signals) => signals,
        Err(error) => {
            eprintln!("easeoff mock-upstream: cannot install signal handlers: {error}");
            return ExitCode::from(RUNTIME_FAILURE);
        }
    };
    if !args.rate.is_finite() || args.rate <= 0.0 {
        eprintln!(
            "easeoff mock-upstream: --rate must be above 0, got {}",
            args.rate
        );
        return ExitCode::from(USAGE);
    }
    let options = MockOptions {
        rate: args.rate,
        burst: args
            .burst
            .unwrap_or((args.rate / 10.0).ceil() as u32)
            .max(1),
        style: args.style,
        latency: args.latency,
        autoscale: args.scale_after.map(|after| AutoScale {
            after,
            factor: args.scale_factor.max(1.0),
            max: args.scale_max.unwrap_or(args.rate * 10.0),
        }),
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
    tracing::info!(%addr, rate = options.rate, burst = options.burst, style = ?options.style, "mock upstream listening");
    signals.stop().await;
    ExitCode::SUCCESS
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
    let json = match cli.log_format {
        Some(format) => format == LogFormat::Json,
        None => !std::io::stderr().is_terminal(),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if json {
        builder.json().flatten_event(true).init();
    } else {
        builder.init();
    }
}
