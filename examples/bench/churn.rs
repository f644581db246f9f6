//! `bench churn`: what lanes cost and whether it comes back. Waves of requests to N
//! distinct DynamoDB tables (a lane each) through the real `easeoff run`, an idle
//! spell between waves long enough for every lane to be dropped; easeoff's RSS and
//! open descriptors are sampled from /proc throughout. Linux only.

use std::convert::Infallible;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;

use crate::procs::{Getter, sample, start_easeoff};

/// The `churn` settings.
#[derive(Clone, Debug)]
pub struct Options {
    pub bin: PathBuf,
    /// Distinct tables per wave.
    pub tables: u64,
    pub waves: u32,
    /// Requests to each table, one after another (the second waits out the interval).
    pub per_table: u32,
    pub clients: usize,
    /// `max_lanes`; `None` keeps the default.
    pub max_lanes: Option<usize>,
    /// `lane_idle`; the idle spell is this plus 3 s.
    pub lane_idle: Duration,
    /// A constant interval every lane paces at, so that every lane waits; 0: the
    /// default sleeper, under which lanes never wait.
    pub interval: Duration,
    /// A `[fleet]` on this Redis URL.
    pub fleet: Option<String>,
}

/// The highest RSS and descriptor count seen while sampling, and the last.
#[derive(Clone, Copy, Debug, Default)]
struct Usage {
    peak_rss_kb: u64,
    peak_fds: u64,
    rss_kb: u64,
    fds: u64,
}

/// Runs the waves and prints one row per wave.
pub async fn main(o: Options) -> Result<(), String> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("cannot bind the upstream: {e}"))?;
    let upstream = listener.local_addr().map_err(|e| e.to_string())?;
    let server = tokio::spawn(serve(listener));
    let work = std::env::temp_dir().join(format!("easeoff-churn-{}", std::process::id()));
    std::fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
    let max_lanes = o
        .max_lanes
        .map(|n| format!("max_lanes = {n}\n"))
        .unwrap_or_default();
    // At interval 0 the default sleeper: lanes that never wait.
    let sleeper = if o.interval.is_zero() {
        String::new()
    } else {
        format!(
            "[upstream.sleeper]\nstrategy = \"constant\"\ninitial_interval = \"{}us\"\n",
            o.interval.as_micros()
        )
    };
    let fleet = o
        .fleet
        .as_ref()
        .map(|redis| format!("[fleet]\nredis = \"{redis}\"\n"))
        .unwrap_or_default();
    let extra = format!(
        "preset = \"dynamodb\"\n{sleeper}[upstream.lanes]\n{max_lanes}lane_idle = \"{}ms\"\n{fleet}",
        o.lane_idle.as_millis()
    );
    let result = waves(&o, upstream, &work, &extra).await;
    server.abort();
    let _ = std::fs::remove_dir_all(&work);
    print!("{}", result?);
    Ok(())
}

async fn waves(
    o: &Options,
    upstream: std::net::SocketAddr,
    work: &std::path::Path,
    extra: &str,
) -> Result<String, String> {
    let url = format!("http://{upstream}");
    let mut easeoff = start_easeoff(&o.bin, work, "ddb", &url, extra).await?;
    let pid = easeoff.proc.id();
    let metrics = format!("http://{}/metrics", easeoff.admin);
    let start = usage(pid).unwrap_or_default();
    let mut out = format!(
        "start: RSS {:.1} MB, {} fds\n{:>4} {:>9} {:>7} {:>8} {:>13} {:>9} {:>14} {:>7} {:>9} {:>13} {:>9} {:>6}\n",
        mb(start.rss_kb),
        start.fds,
        "wave",
        "ok",
        "errors",
        "seconds",
        "peak RSS MB",
        "peak fds",
        "alive RSS MB",
        "alive",
        "KiB/lane",
        "idle RSS MB",
        "idle fds",
        "lanes"
    );
    let lanes_now = || async {
        let page = Getter::default().get(&metrics).await.unwrap_or_default();
        sample(&page, "easeoff_lanes{upstream=\"ddb\"}").unwrap_or(f64::NAN)
    };
    for wave in 0..o.waves {
        let began = Instant::now();
        let (ok, errors, load) = sampled(pid, send(o, easeoff.listen, wave)).await;
        let seconds = began.elapsed().as_secs_f64();
        // The wave's lanes at rest, before `lane_idle` drops them.
        let alive = usage(pid).unwrap_or_default();
        let alive_lanes = lanes_now().await;
        let per_lane = (alive.rss_kb as f64 - start.rss_kb as f64) / (alive_lanes - 1.0);
        tokio::time::sleep(o.lane_idle + Duration::from_secs(3)).await;
        let idle = usage(pid).unwrap_or_default();
        let lanes = lanes_now().await;
        let _ = writeln!(
            out,
            "{:>4} {:>9} {:>7} {:>8.1} {:>13.1} {:>9} {:>14.1} {:>7} {:>9.2} {:>13.1} {:>9} {:>6}",
            wave + 1,
            ok,
            errors,
            seconds,
            mb(load.peak_rss_kb),
            load.peak_fds,
            mb(alive.rss_kb),
            alive_lanes,
            per_lane,
            mb(idle.rss_kb),
            idle.fds,
            lanes
        );
        if let Some(why) = easeoff.proc.exited() {
            return Err(format!("easeoff run {why}"));
        }
    }
    out.push_str(
        "peak: while the wave ran (sampled every 100 ms); alive: as it ended, its lanes at rest (KiB/lane: above the start, per lane but `default`); idle: lane_idle + 3 s after it\n",
    );
    Ok(out)
}

/// Runs `load` while sampling `pid` every 100 ms.
async fn sampled(
    pid: u32,
    load: impl std::future::Future<Output = (u64, u64)>,
) -> (u64, u64, Usage) {
    let done = AtomicBool::new(false);
    let watch = async {
        let mut seen = Usage::default();
        while !done.load(Ordering::Relaxed) {
            if let Some(now) = usage(pid) {
                seen.peak_rss_kb = seen.peak_rss_kb.max(now.rss_kb);
                seen.peak_fds = seen.peak_fds.max(now.fds);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        seen
    };
    let run = async {
        let counts = load.await;
        done.store(true, Ordering::Relaxed);
        counts
    };
    let ((ok, errors), seen) = tokio::join!(run, watch);
    (ok, errors, seen)
}

/// One wave: `clients` writers over the wave's tables; (2xx, other answers or none).
async fn send(o: &Options, target: std::net::SocketAddr, wave: u32) -> (u64, u64) {
    let client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build(HttpConnector::new());
    let next = Arc::new(AtomicU64::new(0));
    let (ok, errors) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let writers: Vec<_> = (0..o.clients)
        .map(|_| {
            let (client, next) = (client.clone(), Arc::clone(&next));
            let (ok, errors) = (Arc::clone(&ok), Arc::clone(&errors));
            let (tables, per_table) = (o.tables, o.per_table);
            tokio::spawn(async move {
                loop {
                    let table = next.fetch_add(1, Ordering::Relaxed);
                    if table >= tables {
                        return;
                    }
                    for _ in 0..per_table {
                        let counter = if put(&client, target, wave, table).await {
                            &ok
                        } else {
                            &errors
                        };
                        counter.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for writer in writers {
        let _ = writer.await;
    }
    (ok.load(Ordering::Relaxed), errors.load(Ordering::Relaxed))
}

/// A PutItem to table `w<wave>-<table>`; whether it was answered 2xx.
async fn put(
    client: &Client<HttpConnector, Full<Bytes>>,
    target: std::net::SocketAddr,
    wave: u32,
    table: u64,
) -> bool {
    let body = format!(r#"{{"TableName":"w{wave}-{table}","Item":{{"pk":{{"S":"1"}}}}}}"#);
    let request = http::Request::post(format!("http://{target}/"))
        .header("x-amz-target", "DynamoDB_20120810.PutItem")
        .header("content-type", "application/x-amz-json-1.0")
        .body(Full::new(Bytes::from(body)));
    let Ok(request) = request else { return false };
    match tokio::time::timeout(Duration::from_secs(30), client.request(request)).await {
        Ok(Ok(response)) => {
            let good = response.status().is_success();
            good && response.into_body().collect().await.is_ok()
        }
        _ => false,
    }
}

/// RSS and open descriptors of `pid`, from /proc.
fn usage(pid: u32) -> Option<Usage> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss_kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64;
    Some(Usage {
        peak_rss_kb: rss_kb,
        peak_fds: fds,
        rss_kb,
        fds,
    })
}

fn mb(kb: u64) -> f64 {
    kb as f64 / 1024.0
}

/// An upstream that answers every request 200 `{}`.
async fn serve(listener: TcpListener) {
    while let Ok((stream, _)) = listener.accept().await {
        tokio::spawn(async move {
            let service = service_fn(|_req| async {
                Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from_static(b"{}"))))
            });
            let _ = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
