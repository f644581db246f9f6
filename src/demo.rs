//! `easeoff demo`: the sleeper at work with no set-up. One process runs a DynamoDB-style
//! mock (about 50 requests/s, small burst), easeoff in front of it with the dynamodb
//! preset's defaults (the cubic sleeper), and 16 clients with unbounded demand; it prints a line a second, a summary,
//! and writes an SVG of the interval over time.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::clock::{Clock, Instant};
use crate::config::Config;
use crate::load::{self, Shot, Tally, Until};
use crate::mock_upstream::{self, MockOptions, MockUpstream, Style};
use crate::plot::{self, Point};
use crate::server::Server;
use crate::throttle::Verdict;
use crate::upstream::{Attempt, Observer, Upstream};

/// The demo's settings.
#[derive(Clone, Debug)]
pub struct DemoOptions {
    pub duration: Duration,
    pub out: PathBuf,
    pub clients: usize,
    pub rate: f64,
    pub burst: u32,
    /// The admin address; `None` picks a free port.
    pub admin: Option<SocketAddr>,
}

/// Why the demo could not run.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("cannot start the mock upstream: {0}")]
    Mock(std::io::Error),
    #[error("cannot configure easeoff: {0}")]
    Config(#[from] crate::config::ConfigError),
    #[error("cannot start easeoff: {0}")]
    Start(#[from] crate::server::StartError),
    #[error("easeoff failed: {0}")]
    Run(std::io::Error),
    #[error("cannot write {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
}

const UPSTREAM: &str = "dynamodb";

/// Runs the demo and writes the SVG.
pub async fn run(options: &DemoOptions, out: &mut dyn Write) -> Result<(), DemoError> {
    let mock_options = MockOptions {
        latency: Duration::from_millis(2),
        ..MockOptions::new(options.rate, options.burst, Style::Dynamodb)
    };
    let (mock, mock_addr) =
        mock_upstream::spawn(mock_options, SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .map_err(DemoError::Mock)?;
    let trace: Arc<Mutex<Vec<Attempt>>> = Arc::default();
    let recorder = Arc::clone(&trace);
    let observer: Observer = Arc::new(move |a: &Attempt| {
        recorder
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(*a);
    });
    let admin = options
        .admin
        .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)));
    let server = Server::bind_with(config(mock_addr, admin)?, Some(observer)).await?;
    let upstream = server
        .upstream(UPSTREAM)
        .ok_or_else(|| DemoError::Run(std::io::Error::other("demo upstream missing")))?;
    let addr = upstream.listen;
    let server_admin = server.admin_addr();
    let strategy = upstream.settings.sleeper.strategy.name();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let proxy = tokio::spawn(server.run(async move {
        let _ = stopped.await;
    }));

    let _ = writeln!(
        out,
        "easeoff demo: {} clients -> easeoff {addr} ({strategy} sleeper, pace mode) -> DynamoDB-style mock {mock_addr} ({} requests/s, burst {})",
        options.clients, options.rate, options.burst
    );
    if options.admin.is_some() {
        let _ = writeln!(out, "status page: http://{}/", server_admin);
    }
    let start = Clock::Tokio.now();
    let tally: Arc<Tally> = Arc::default();
    let writers = tokio::spawn(load::write(
        addr,
        &Shot::PUT_ITEM,
        options.clients,
        Until::Deadline(start + options.duration),
        Arc::clone(&tally),
    ));
    every_second(out, options, start, &mock, &tally, &upstream).await;
    let _ = writers.await;
    let _ = stop.send(());
    proxy
        .await
        .map_err(|e| DemoError::Run(std::io::Error::other(e)))?
        .map_err(DemoError::Run)?;

    let attempts = std::mem::take(&mut *trace.lock().unwrap_or_else(PoisonError::into_inner));
    let points = points(&attempts, start);
    summary(out, options, &points, tally.read().1);
    let title = format!(
        "easeoff demo: {strategy} sleeper, {} clients, mock at {} requests/s",
        options.clients, options.rate
    );
    write_file(&options.out, &plot::interval_svg(&title, &points))?;
    let _ = writeln!(out, "wrote {}", options.out.display());
    Ok(())
}

/// easeoff in front of the mock at `mock_addr`, with the dynamodb preset.
fn config(mock_addr: SocketAddr, admin: SocketAddr) -> Result<Config, DemoError> {
    Ok(Config::parse(
        &format!(
            r#"
[server]
admin_listen = "{admin}"
[[upstream]]
name = "{UPSTREAM}"
listen = "127.0.0.1:0"
url = "http://{mock_addr}"
preset = "dynamodb"
"#
        ),
        "demo.toml",
        &|_| None,
    )?)
}

/// The table header, then one line a second until the run's end: the interval, and
/// what the mock and the clients saw during that second.
async fn every_second(
    out: &mut dyn Write,
    options: &DemoOptions,
    start: Instant,
    mock: &MockUpstream,
    tally: &Tally,
    upstream: &Upstream,
) {
    let _ = writeln!(
        out,
        "{:>5}  {:>12}  {:>10}  {:>12}  {:>14}",
        "time", "interval", "goodput/s", "throttles/s", "client errors/s"
    );
    let mut last = mock.counts();
    let mut last_errors = 0;
    let mut tick = tokio::time::interval_at(start + Duration::from_secs(1), Duration::from_secs(1));
    for second in 1..=options.duration.as_secs() {
        tick.tick().await;
        let now = mock.counts();
        let (_, errors) = tally.read();
        let _ = writeln!(
            out,
            "{:>4}s  {:>9.1} ms  {:>10}  {:>12}  {:>14}",
            second,
            pacing_interval(upstream).as_secs_f64() * 1e3,
            now.ok - last.ok,
            now.throttled - last.throttled,
            errors - last_errors
        );
        let _ = out.flush();
        (last, last_errors) = (now, errors);
    }
}

/// The upstream's headline interval, the widest of any lane: the dynamodb preset
/// paces the demo's table in a lane of its own, so the default lane stays at 0.
fn pacing_interval(upstream: &Upstream) -> Duration {
    upstream.lanes.slowest().interval()
}

/// One plot point per answered attempt, in seconds since `start`.
fn points(attempts: &[Attempt], start: Instant) -> Vec<Point> {
    attempts
        .iter()
        .filter_map(|a| {
            Some(Point {
                t: a.dispatched_at
                    .saturating_duration_since(start)
                    .as_secs_f64(),
                interval_ms: a.interval.as_secs_f64() * 1e3,
                throttled: matches!(a.verdict?, Verdict::Throttle(_)),
            })
        })
        .collect()
}

fn summary(out: &mut dyn Write, options: &DemoOptions, points: &[Point], client_errors: u64) {
    let total = points.len();
    let throttled = points.iter().filter(|p| p.throttled).count();
    let ok = total - throttled;
    let secs = options.duration.as_secs_f64();
    // The first throttles come from the initial burst; judge the steady state after 5 s.
    let settle = 5.0f64.min(secs / 2.0);
    let steady: Vec<&Point> = points.iter().filter(|p| p.t >= settle).collect();
    let steady_ok = steady.iter().filter(|p| !p.throttled).count();
    let steady_throttled = steady.len() - steady_ok;
    let steady_secs = (secs - settle).max(1e-9);
    let peak = points.iter().map(|p| p.interval_ms).fold(0.0, f64::max);
    let first_raise = points.iter().find(|p| p.interval_ms > 0.0).map(|p| p.t);
    let _ = writeln!(out, "\nsummary");
    let _ = writeln!(
        out,
        "  upstream attempts   {total} ({ok} succeeded, {throttled} throttled)"
    );
    let _ = writeln!(
        out,
        "  after {settle:.0} s          goodput {:.1}/s = {:.0}% of the mock's {} /s; throttled {:.1}% of attempts",
        steady_ok as f64 / steady_secs,
        100.0 * steady_ok as f64 / steady_secs / options.rate,
        options.rate,
        100.0 * steady_throttled as f64 / steady.len().max(1) as f64
    );
    // A client error is an upstream throttle easeoff could not absorb (attempts or
    // retry budget used up), passed through unchanged.
    let _ = writeln!(
        out,
        "  client errors       {client_errors} (throttles reaching the clients after easeoff's retries)"
    );
    match first_raise {
        Some(t) => {
            let _ = writeln!(
                out,
                "  interval            first raised at {t:.2} s, peak {peak:.1} ms"
            );
        }
        None => {
            let _ = writeln!(out, "  {:<20}never raised", "interval");
        }
    }
}

fn write_file(path: &Path, contents: &str) -> Result<(), DemoError> {
    std::fs::write(path, contents).map_err(|source| DemoError::Write {
        path: path.display().to_string(),
        source,
    })
}
