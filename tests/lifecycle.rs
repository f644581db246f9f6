//! The easeoff process through its life: SIGTERM drains without dropping anything it
//! accepted, SIGHUP reloads without disturbing unchanged upstreams or failing a request.

#![allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "test figures are small"
)]

mod support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::process::*;
use support::*;

const SECOND: Duration = Duration::from_secs(1);

/// `/status` of the named upstream.
async fn status_of(admin: SocketAddr, name: &str) -> serde_json::Value {
    let text = get(&format!("http://{admin}/status")).await.text();
    let all: serde_json::Value = serde_json::from_str(&text).unwrap();
    let found = all["upstreams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["name"] == name);
    found
        .unwrap_or_else(|| panic!("no upstream {name} in {all}"))
        .clone()
}

async fn interval_of(admin: SocketAddr, name: &str) -> f64 {
    status_of(admin, name).await["interval_ms"]
        .as_f64()
        .unwrap()
}

async fn waiting(admin: SocketAddr) -> u64 {
    status(admin).await["waiting"].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_answers_every_accepted_request_and_exits_within_the_grace() {
    let up = upstream(|_| async { ok() }).await;
    let grace = SECOND * 5;
    let config = config_file(&format!(
        "[server]\nadmin_listen = \"127.0.0.1:0\"\nshutdown_grace = \"5s\"\n\n{}",
        upstream_table(
            "up",
            up.addr,
            "[upstream.sleeper]\nstrategy = \"constant\"\ninitial_interval = \"100ms\""
        )
    ));
    let mut easeoff = Process::start(&config);
    let url = easeoff.url("up");
    let admin = easeoff.admin;
    assert_eq!(get(&format!("http://{admin}/readyz")).await.status, 200);

    // 300 clients at 100 ms apart: 30 s of queue, six times what the grace allows.
    let requests: Vec<_> = (0..300)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move { get(&url).await })
        })
        .collect();
    // Every request accepted: waiting for its slot or already served.
    eventually("all 300 requests to be accepted", || async {
        waiting(admin).await as usize + up.count() >= 300
    })
    .await;
    let served_before = up.count();

    let term = Instant::now();
    easeoff.signal("TERM");
    // Within the drain, while easeoff still answers.
    wait_until(grace, "/readyz to turn 503", || async {
        get(&format!("http://{admin}/readyz")).await.status == 503
    })
    .await;
    let turned = term.elapsed();

    let (mut succeeded, mut shed) = (0, 0);
    for request in requests {
        let answer = request.await.unwrap();
        match answer.status.as_u16() {
            200 => succeeded += 1,
            429 => {
                assert_eq!(answer.headers["x-easeoff-reason"], "shed");
                assert!(answer.headers.contains_key("retry-after"));
                shed += 1;
            }
            other => panic!("unexpected {other}: {}", answer.text()),
        }
    }
    let status = easeoff.wait();
    let exited = term.elapsed();
    println!(
        "readyz 503 after {turned:?}; {succeeded} succeeded ({} after SIGTERM), {shed} shed; exit {status} after {exited:?}",
        succeeded - served_before
    );
    assert!(status.success(), "{status}");
    assert_eq!(succeeded + shed, 300);
    assert_eq!(
        up.count(),
        succeeded,
        "nothing sent upstream went unanswered"
    );
    assert!(
        succeeded > served_before,
        "waiting requests were served during the drain"
    );
    assert!(
        shed > 0,
        "the requests that could not make the deadline were shed"
    );
    // The grace bounds the drain: a drain that served the whole queue would take
    // 30 s. The rest is process teardown, given seconds on a loaded host.
    assert!(exited < grace * 2, "exit after {exited:?}");
}

/// Writers sending requests to their urls in turn until stopped, keeping count.
#[derive(Default)]
struct Load {
    stop: AtomicBool,
    ok: AtomicUsize,
    failed: Mutex<Vec<String>>,
    writers: AtomicUsize,
}

impl Load {
    fn start(urls: Vec<String>, writers: usize) -> Arc<Load> {
        let load = Arc::new(Load::default());
        for _ in 0..writers {
            let (load, urls) = (Arc::clone(&load), urls.clone());
            load.writers.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(async move {
                while !load.stop.load(Ordering::Relaxed) {
                    for url in &urls {
                        let answer = get(url).await;
                        if answer.status == 200 {
                            load.ok.fetch_add(1, Ordering::Relaxed);
                        } else {
                            let failure = format!("{url}: {} {}", answer.status, answer.text());
                            load.failed.lock().unwrap().push(failure);
                        }
                    }
                }
                load.writers.fetch_sub(1, Ordering::Relaxed);
            });
        }
        load
    }

    /// Stops the writers and waits for their last requests.
    async fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        eventually("the writers to stop", || async {
            self.writers.load(Ordering::Relaxed) == 0
        })
        .await;
    }

    /// Returns once `n` more requests have succeeded.
    async fn progress(&self, n: usize) {
        let target = self.ok.load(Ordering::Relaxed) + n;
        eventually("the load to go on", || async {
            self.ok.load(Ordering::Relaxed) >= target
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_rebuilds_only_what_changed_and_fails_no_request() {
    let throttle = || respond(429, &[], "slow down");
    let (a, b) = (
        throttles_first(1, throttle).await,
        throttles_first(1, throttle).await,
    );
    // A fixed, unrandomized first raise that successes will not undo.
    let learn = "[upstream.sleeper]\nstrategy = \"responsive\"\ninitial_interval = \"50ms\"\nrandomization_factor = 0.0\ndown_threshold = 100000\n";
    let server = "[server]\nadmin_listen = \"127.0.0.1:0\"\nshutdown_grace = \"2s\"\n\n";
    let text = format!(
        "{server}{}{}",
        upstream_table("a", a.addr, learn),
        upstream_table("b", b.addr, learn)
    );
    let config = config_file(&text);
    let mut easeoff = Process::start(&config);
    let admin = easeoff.admin;
    // Each upstream's first request is throttled and retried: both learn 50 ms.
    for name in ["a", "b"] {
        assert_eq!(get(&easeoff.url(name)).await.status, 200);
        assert_eq!(interval_of(admin, name).await, 50.0);
    }

    let load = Load::start(vec![easeoff.url("a"), easeoff.url("b")], 4);
    load.progress(10).await;
    let reloads = |result: &'static str| async move {
        metric(
            admin,
            &format!("easeoff_config_reloads_total{{result=\"{result}\"}}"),
        )
        .await
    };

    // a's max_interval changes; b stays as it was.
    let changed = text.replacen(learn, &format!("{learn}max_interval = \"10m\"\n"), 1);
    std::fs::write(&config, &changed).unwrap();
    easeoff.signal("HUP");
    eventually("the reload", || async { reloads("success").await == 1.0 }).await;
    assert_eq!(
        interval_of(admin, "b").await,
        50.0,
        "b keeps its learned interval"
    );
    assert_eq!(interval_of(admin, "a").await, 0.0, "a starts afresh");
    // The counter moves before the log line is written and read back from the pipe.
    let easeoff_ref = &easeoff;
    eventually("the reload's log line", || async move {
        !easeoff_ref.logged("config reloaded", "rebuilt").is_empty()
    })
    .await;
    assert_eq!(easeoff.logged("config reloaded", "rebuilt"), ["[\"a\"]"]);
    load.progress(10).await;
    // Counters carry on for both: the learning request is still counted.
    for name in ["a", "b"] {
        let sample = format!("easeoff_retries_total{{reason=\"throttle\",upstream=\"{name}\"}}");
        assert_eq!(metric(admin, &sample).await, 1.0);
    }

    // A broken file keeps the running config.
    std::fs::write(&config, "[[upstream]\nname = ").unwrap();
    easeoff.signal("HUP");
    eventually("the failed reload", || async {
        reloads("error").await == 1.0
    })
    .await;
    assert_eq!(interval_of(admin, "b").await, 50.0);
    assert_eq!(reloads("success").await, 1.0);
    load.progress(10).await;

    // An added upstream gets a listener; removing it closes the listener and
    // withdraws its metrics.
    let c = upstream(|_| async { ok() }).await;
    std::fs::write(
        &config,
        format!("{changed}{}", upstream_table("c", c.addr, "")),
    )
    .unwrap();
    easeoff.signal("HUP");
    eventually("the second reload", || async {
        reloads("success").await == 2.0
    })
    .await;
    let c_listen = status_of(admin, "c").await["listen"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(get(&format!("http://{c_listen}/")).await.status, 200);
    assert_eq!(c.count(), 1);
    load.progress(10).await;
    std::fs::write(&config, &changed).unwrap();
    easeoff.signal("HUP");
    eventually("the third reload", || async {
        reloads("success").await == 3.0
    })
    .await;
    assert!(!metrics(admin).await.contains("upstream=\"c\""));
    eventually("c's listener to close", || async {
        tokio::net::TcpStream::connect(&c_listen).await.is_err()
    })
    .await;

    load.progress(10).await;
    load.stop().await;
    let ok = load.ok.load(Ordering::Relaxed);
    println!("{ok} requests through four reloads");
    let failed = load.failed.lock().unwrap().clone();
    assert!(failed.is_empty(), "{failed:?}");
    assert_eq!(interval_of(admin, "b").await, 50.0);

    easeoff.signal("TERM");
    assert!(easeoff.wait().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_to_an_absurd_value_is_refused_at_its_position_and_serving_goes_on() {
    let up = upstream(|_| async { ok() }).await;
    let text = format!(
        "[server]\nadmin_listen = \"127.0.0.1:0\"\n\n{}",
        upstream_table("a", up.addr, "")
    );
    let config = config_file(&text);
    let easeoff = Process::start(&config);
    let admin = easeoff.admin;
    assert_eq!(get(&easeoff.url("a")).await.status, 200);

    // Accepted, this wait would overflow every request's deadline.
    let absurd = format!("{text}[upstream.queue]\nmax_wait = \"200000000000000d\"\n");
    std::fs::write(&config, absurd).unwrap();
    easeoff.signal("HUP");
    eventually("the refused reload", || async {
        metric(admin, "easeoff_config_reloads_total{result=\"error\"}").await == 1.0
    })
    .await;
    let errors = easeoff.logged("reload failed; keeping the running config", "error");
    assert_eq!(
        errors,
        [format!(
            "{}:10:12: upstream \"a\": queue.max_wait must be at most 1d, got 200000000000000d",
            config.display()
        )]
    );
    assert_eq!(get(&easeoff.url("a")).await.status, 200);
    assert_eq!(up.count(), 2);
}
