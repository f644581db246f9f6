//! `mode = "observe"`: the shadow mode learns and exports as `pace` does but never
//! delays or sheds, and says what pacing would have done.

#![allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "test figures are small"
)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use easeoff::Config;
use easeoff::simulate::{self, Ending, Scenario, SimOptions, report};
use support::*;

const OBSERVE: &str = "[upstream.sleeper]\nmode = \"observe\"\n";

/// Against an upstream that throttles everything and asks for a 20 s pause (within max_wait), every
/// request goes at once and its throttle is passed on: nothing waits, nothing is shed,
/// nothing is retried; the interval is learned and the waits pacing would have added
/// are counted.
#[tokio::test]
async fn observe_mode_never_delays_or_sheds_and_counts_what_pacing_would_have_done() {
    let attempts = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&attempts);
    let up = upstream(move |_| {
        seen.fetch_add(1, Ordering::SeqCst);
        async { respond(429, &[("retry-after", "20")], "slow down") }
    })
    .await;
    let proxy = proxy(up.addr, OBSERVE).await;
    for _ in 0..20 {
        let answer = get(&format!("http://{}/", proxy.addr)).await;
        assert_eq!(answer.status, 429, "the throttle is passed on as it came");
    }
    assert_eq!(attempts.load(Ordering::SeqCst), 20, "no retries");
    let a = proxy.admin;
    assert_eq!(
        metric(a, "easeoff_sleeps_total{upstream=\"up\"}").await,
        0.0
    );
    assert_eq!(
        metric(a, "easeoff_queue_wait_seconds_sum{upstream=\"up\"}").await,
        0.0
    );
    let text = metrics(a).await;
    let shed: f64 = text
        .lines()
        .filter(|l| l.starts_with("easeoff_shed_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(shed, 0.0, "{text}");
    // Learned and exported as in pace.
    assert!(metric(a, "easeoff_upstream_interval_seconds{upstream=\"up\"}").await > 0.0);
    assert!(metric(a, "easeoff_upstream_pause_seconds{upstream=\"up\"}").await > 0.0);
    // The first went at once; the first refusal's pause binds only its request, the
    // second's (sent within it) the lane: pacing would have held each from the third
    // on behind the 20 s pause and the raised interval, or shed it once its slot lay
    // past max_wait (the second, too, if the raised interval reached it).
    let would = metric(a, "easeoff_observe_would_wait_total{upstream=\"up\"}").await;
    let shed = metric(a, "easeoff_observe_would_shed_total{upstream=\"up\"}").await;
    assert!(
        (18.0..=19.0).contains(&(would + shed)),
        "would wait {would}, would be shed {shed}"
    );
    assert!(would >= 1.0);
    let seconds = metric(
        a,
        "easeoff_observe_would_wait_seconds_total{upstream=\"up\"}",
    )
    .await;
    assert!(seconds >= 19.0 * would, "{seconds} s over {would} requests");
    let shown = status(a).await;
    assert_eq!(shown["mode"], "observe");
    assert_eq!(shown["observed"]["would_wait"], would as u64, "{shown}");
}

fn settings(sleeper: &str) -> easeoff::config::UpstreamSettings {
    let text = format!(
        "[[upstream]]\nname = \"table\"\nlisten = \"127.0.0.1:8000\"\n\
         url = \"https://dynamodb.us-east-1.amazonaws.com\"\npreset = \"dynamodb\"\n\
         [upstream.sleeper]\n{sleeper}\n"
    );
    let mut config = Config::parse(&text, "test.toml", &|_| None).unwrap();
    config.upstreams.remove(0)
}

/// The mean interval of a two-minute run on the modelled upstream (100/s, 16 clients
/// with unbounded demand), in virtual time; and whether every request was answered in
/// exactly the upstream's latency without a shed.
fn learned(sleeper: &str) -> (f64, bool) {
    let latency = Duration::from_millis(10);
    let options = SimOptions {
        settings: settings(sleeper),
        scenario: Scenario::Steady,
        seed: 1,
        duration: Duration::from_secs(120),
        capacity: 100.0,
        burst: 10,
        clients: 16,
        latency,
        jitter: Duration::ZERO,
        sidecars: 1,
        idle: Duration::ZERO,
        scale_after: Duration::from_secs(60),
        scale_factor: 1.5,
    };
    let trace = simulate::run(&options).unwrap();
    let bins = report::bins(&options, &trace);
    let phase = report::phases(&bins)[0];
    let stats = report::phase_stats(&bins, phase);
    let passed_through = trace
        .requests
        .iter()
        .all(|r| r.ending != Ending::Shed && r.took == latency);
    (stats.interval_ms, passed_through)
}

/// On the same load, observe mode exports the interval pace mode learns, within 20 %,
/// for the dynamodb preset's cubic sleeper and for the responsive one; in virtual time,
/// so the comparison is exact and quick.
#[test]
fn observe_mode_learns_the_interval_pace_mode_would() {
    for strategy in ["", "strategy = \"responsive\""] {
        let (paced, _) = learned(&format!("mode = \"pace\"\n{strategy}"));
        let (observed, passed_through) = learned(&format!("mode = \"observe\"\n{strategy}"));
        assert!(passed_through, "{strategy}: a request waited or was shed");
        let off = (observed - paced).abs() / paced;
        eprintln!(
            "{strategy:?}: pace {paced:.2} ms, observe {observed:.2} ms ({:+.1} %)",
            (observed / paced - 1.0) * 100.0
        );
        assert!(
            off < 0.2,
            "{strategy}: observe {observed:.2} ms against pace {paced:.2} ms"
        );
    }
}
