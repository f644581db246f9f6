//! Writers with no retry logic of their own, pointed at easeoff in front of a throttling
//! mock: every write succeeds, none is lost, and the upstream runs near its capacity
//! with few throttled attempts.
//!
//! CI runs a small version. The full one of issue 3 (3,000 writes at 100/s, judged
//! after 10 s) is the same test with more:
//! `EASEOFF_ABSORB_REQUESTS=3000 EASEOFF_ABSORB_RATE=100 EASEOFF_ABSORB_SETTLE=10 cargo test --release --test absorb -- --nocapture`

#![allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "test figures are small"
)]

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use easeoff::load::{self, Shot, Tally, Until};
use easeoff::mock_upstream::{self, MockCounts, MockOptions, Style};
use support::*;
use tokio::time::Instant;

fn setting(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Figures {
    answered_ok: u64,
    client_errors: u64,
    upstream_ok: u64,
    /// After the settling time: throttled share of attempts, goodput / capacity.
    throttled_fraction: f64,
    goodput_fraction: f64,
}

async fn absorb(style: Style) -> Figures {
    let requests = setting("EASEOFF_ABSORB_REQUESTS", 1200.0) as u64;
    let rate = setting("EASEOFF_ABSORB_RATE", 200.0);
    let settle = Duration::from_secs_f64(setting("EASEOFF_ABSORB_SETTLE", 2.0));
    let options = MockOptions::new(rate, 20, style);
    let (mock, addr) = mock_upstream::spawn(options, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let preset = if style == Style::Dynamodb {
        "dynamodb"
    } else {
        "none"
    };
    let proxy = proxy(addr, &format!("preset = \"{preset}\"")).await;

    // The mock's counts, sampled every 100 ms while the writers run.
    let samples: Arc<Mutex<Vec<(Instant, MockCounts)>>> = Arc::default();
    let sampler = {
        let (mock, samples) = (mock.clone(), Arc::clone(&samples));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            loop {
                tick.tick().await;
                samples
                    .lock()
                    .unwrap()
                    .push((Instant::now(), mock.counts()));
            }
        })
    };
    let tally: Arc<Tally> = Arc::default();
    load::write(
        proxy.addr,
        &Shot::PUT_ITEM,
        16,
        Until::Requests(requests),
        Arc::clone(&tally),
    )
    .await;
    sampler.abort();

    let samples = samples.lock().unwrap().clone();
    let start = samples[0].0;
    // Judge from the settling time to the last full second of demand.
    let from = samples.iter().find(|(t, _)| *t - start >= settle).copied();
    let to = samples[samples.len().saturating_sub(10)];
    let (from_t, from_c) = from.unwrap_or(samples[0]);
    let (ok, throttled) = (to.1.ok - from_c.ok, to.1.throttled - from_c.throttled);
    let seconds = (to.0 - from_t).as_secs_f64().max(1e-9);
    let (answered_ok, client_errors) = tally.read();
    let figures = Figures {
        answered_ok,
        client_errors,
        upstream_ok: mock.counts().ok,
        throttled_fraction: throttled as f64 / (ok + throttled).max(1) as f64,
        goodput_fraction: ok as f64 / seconds / rate,
    };
    eprintln!(
        "{style:?}: {requests} writes at {rate}/s: {} ok, {} client errors, upstream applied {}; after {settle:?}: throttled {:.1}% of attempts, goodput {:.1}% of capacity over {seconds:.1} s",
        figures.answered_ok,
        figures.client_errors,
        figures.upstream_ok,
        100.0 * figures.throttled_fraction,
        100.0 * figures.goodput_fraction,
    );
    let text = metrics(proxy.admin).await;
    let counters: Vec<&str> = text
        .lines()
        .filter(|l| {
            (l.starts_with("easeoff_requests_total")
                || l.starts_with("easeoff_retr")
                || l.starts_with("easeoff_throttles_total"))
                && !l.ends_with(" 0")
        })
        .collect();
    eprintln!("  easeoff: {}", counters.join("; "));
    assert_eq!(answered_ok, requests);
    figures
}

fn check(f: &Figures) {
    assert_eq!(f.client_errors, 0, "a throttle reached a client");
    assert_eq!(
        f.upstream_ok, f.answered_ok,
        "every write applied exactly once"
    );
    assert!(
        f.throttled_fraction <= 0.10,
        "throttled {:.3}",
        f.throttled_fraction
    );
    // A loose floor: CI machines are noisy; the full run reports the real figure.
    assert!(
        f.goodput_fraction >= 0.75,
        "goodput {:.3}",
        f.goodput_fraction
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamodb_writers_see_no_throttles() {
    check(&absorb(Style::Dynamodb).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http429_writers_see_no_throttles() {
    check(&absorb(Style::Http429).await);
}
