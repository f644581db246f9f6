//! `bench pacing`: the real `easeoff run` with `strategy = "constant"` in front of an
//! upstream here that timestamps every arrival; 16 writers keep easeoff's queue full.
//! Reports the achieved rate against 1/interval and how far each gap is from the interval.

use std::convert::Infallible;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use easeoff::load::{self, Shot, Tally, Until};
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;

use crate::procs::{Easeoff, start_easeoff};
use crate::stats::percentile;

/// The `pacing` settings.
#[derive(Clone, Debug)]
pub struct Options {
    pub bin: PathBuf,
    pub intervals: Vec<Duration>,
    /// Per interval; stretched to at least `min_gaps` gaps.
    pub duration: Duration,
    pub min_gaps: u32,
    pub clients: usize,
    /// Arrivals in this first stretch are left out.
    pub warmup: Duration,
}

/// How evenly the arrivals were spaced.
#[derive(Clone, Debug, PartialEq)]
pub struct Spacing {
    pub gaps: usize,
    /// Arrivals per second between the first and the last.
    pub rate: f64,
    /// rate × interval − 1.
    pub rate_error: f64,
    /// |gap − interval| percentiles and maximum, in ms.
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

/// The spacing of `arrivals` (seconds, in order) against `interval` (seconds).
pub fn spacing(arrivals: &[f64], interval: f64) -> Option<Spacing> {
    if arrivals.len() < 2 {
        return None;
    }
    let mut errors: Vec<f64> = arrivals
        .windows(2)
        .map(|w| ((w[1] - w[0]) - interval).abs() * 1000.0)
        .collect();
    errors.sort_by(f64::total_cmp);
    let gaps = errors.len();
    let span = arrivals[gaps] - arrivals[0];
    let rate = if span > 0.0 { gaps as f64 / span } else { 0.0 };
    Some(Spacing {
        gaps,
        rate,
        rate_error: rate * interval - 1.0,
        p50: percentile(&errors, 50.0),
        p90: percentile(&errors, 90.0),
        p99: percentile(&errors, 99.0),
        max: errors[gaps - 1],
    })
}

/// Runs every interval in turn and prints the table.
pub async fn main(o: Options) -> Result<(), String> {
    let mut out = format!(
        "{:>9} {:>7} {:>9} {:>10} {:>7} {:>8} {:>8} {:>8} {:>8}  {}\n",
        "interval",
        "gaps",
        "target/s",
        "achieved/s",
        "rate%",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "max ms",
        "targets (rate within 2%, p99 < 1 ms)"
    );
    for &interval in &o.intervals {
        let s = measure(&o, interval).await?;
        let iv = interval.as_secs_f64();
        let ok = s.rate_error.abs() <= 0.02 && s.p99 < 1.0;
        let _ = writeln!(
            out,
            "{:>7}ms {:>7} {:>9.2} {:>10.2} {:>+7.2} {:>8.3} {:>8.3} {:>8.3} {:>8.3}  {}",
            iv * 1000.0,
            s.gaps,
            1.0 / iv,
            s.rate,
            100.0 * s.rate_error,
            s.p50,
            s.p90,
            s.p99,
            s.max,
            if ok { "met" } else { "MISSED" }
        );
    }
    out.push_str("|gap - interval| over consecutive arrivals at the upstream after the warm-up; rate% = achieved x interval - 1\n");
    print!("{out}");
    Ok(())
}

async fn measure(o: &Options, interval: Duration) -> Result<Spacing, String> {
    let arrivals = Arc::new(Mutex::new(Vec::<Instant>::new()));
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("cannot bind the upstream: {e}"))?;
    let upstream = listener.local_addr().map_err(|e| e.to_string())?;
    let server = tokio::spawn(serve(listener, Arc::clone(&arrivals)));

    let work = std::env::temp_dir().join(format!(
        "easeoff-pacing-{}-{}",
        std::process::id(),
        interval.as_micros()
    ));
    std::fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
    let extra = format!(
        "\n[upstream.sleeper]\nstrategy = \"constant\"\ninitial_interval = \"{}us\"\n",
        interval.as_micros()
    );
    let url = format!("http://{upstream}");
    let easeoff = start_easeoff(&o.bin, &work, "paced", &url, &extra).await;
    let Easeoff {
        mut proc, listen, ..
    } = match easeoff {
        Ok(easeoff) => easeoff,
        Err(e) => {
            server.abort();
            return Err(e);
        }
    };

    let length = o.duration.max(interval * o.min_gaps) + o.warmup;
    let started = Instant::now();
    let tally = Arc::new(Tally::default());
    let deadline = tokio::time::Instant::now() + length;
    load::write(
        listen,
        &Shot::PUT_ITEM,
        o.clients,
        Until::Deadline(deadline),
        Arc::clone(&tally),
    )
    .await;
    let exited = proc.exited();
    drop(proc);
    server.abort();
    let _ = std::fs::remove_dir_all(&work);
    if let Some(why) = exited {
        return Err(format!("easeoff run {why}"));
    }
    let from = started + o.warmup;
    let times: Vec<f64> = arrivals
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .filter(|&&t| t >= from)
        .map(|t| t.duration_since(from).as_secs_f64())
        .collect();
    let (_, errors) = tally.read();
    if errors > 0 {
        return Err(format!("{errors} requests failed at {interval:?}"));
    }
    spacing(&times, interval.as_secs_f64())
        .ok_or_else(|| format!("fewer than two arrivals at {interval:?}"))
}

async fn serve(listener: TcpListener, arrivals: Arc<Mutex<Vec<Instant>>>) {
    while let Ok((stream, _)) = listener.accept().await {
        let _ = stream.set_nodelay(true);
        let arrivals = Arc::clone(&arrivals);
        tokio::spawn(async move {
            let service = service_fn(move |_req| {
                arrivals
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(Instant::now());
                async {
                    Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from_static(b"ok"))))
                }
            });
            let _ = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_spacing_has_no_error() {
        let arrivals: Vec<f64> = (0..101).map(|i| f64::from(i) * 0.02).collect();
        let s = spacing(&arrivals, 0.02).unwrap();
        assert_eq!(s.gaps, 100);
        assert!((s.rate - 50.0).abs() < 1e-9);
        assert!(s.rate_error.abs() < 1e-9);
        assert!(s.max < 1e-9);
    }

    #[test]
    fn late_gaps_show_in_the_tail_and_the_rate() {
        // 99 gaps of 20 ms and one of 30 ms.
        let mut arrivals: Vec<f64> = (0..100).map(|i| f64::from(i) * 0.02).collect();
        arrivals.push(99.0 * 0.02 + 0.03);
        let s = spacing(&arrivals, 0.02).unwrap();
        assert!((s.rate - 100.0 / 2.01).abs() < 1e-9);
        assert!(s.p50 < 1e-9 && s.p99 < 1e-9);
        assert!((s.max - 10.0).abs() < 1e-6);
        assert!(spacing(&[1.0], 0.02).is_none());
    }
}
