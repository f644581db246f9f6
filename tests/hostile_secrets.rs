//! Secrets and signals (issue 11, finding 10): a token in the upstream URL's path is
//! not shown by `/status` or the log, the AWS access key id never reaches the log even
//! at trace level, SIGUSR1 and SIGUSR2 do not kill the process, and SIGINT drains as
//! SIGTERM does. A bearer token that names a lane (`by = ["header:authorization"]`)
//! is not on `/metrics`, `/status`, in the log or in Redis (issue 49, item 10).

mod support;

use std::process::Stdio;
use std::time::{Duration, Instant};

use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_in_the_upstream_path_is_not_shown() {
    let up = upstream(|_| async { ok() }).await;
    let proxy = proxy_config(&format!(
        "[server]\nadmin_listen = \"127.0.0.1:0\"\n\n[[upstream]]\nname = \"up\"\nlisten = \"127.0.0.1:0\"\nurl = \"http://{}/hooks/T0KEN-s3cr3t\"\n",
        up.addr
    ))
    .await;
    let shown = status(proxy.admin).await;
    assert_eq!(shown["url"], format!("http://{}", up.addr));
    assert!(!shown.to_string().contains("s3cr3t"), "{shown}");
}

/// The log at trace level, with SigV4 signing on: the access key id is nowhere in it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_never_reach_the_log_even_at_trace_level() {
    const KEY_ID: &str = "AKIAHOSTILETEST12345";
    let up = upstream(|_| async { ok() }).await;
    let config = config_file(&format!(
        "[server]\nadmin_listen = \"127.0.0.1:0\"\nshutdown_grace = \"1s\"\n\n{}",
        upstream_table(
            "up",
            up.addr,
            "preset = \"dynamodb\"\n[upstream.sigv4]\nservice = \"dynamodb\"\nregion = \"us-east-1\""
        )
    ));
    let mut command = Process::command(&config);
    command
        .args(["--log-level", "trace"])
        .env("AWS_ACCESS_KEY_ID", KEY_ID)
        .env("AWS_SECRET_ACCESS_KEY", "hostile-secret-key")
        .env("AWS_EC2_METADATA_DISABLED", "true");
    let mut easeoff = Process::spawn(command);
    let answer = send(
        &client(),
        "POST",
        &easeoff.url("up"),
        &[("x-amz-target", "DynamoDB_20120810.ListTables")],
        "{}",
    )
    .await;
    assert_eq!(answer.status, 200);
    let signed = &up.arrivals()[0].headers["authorization"];
    assert!(
        signed.to_str().unwrap().contains(KEY_ID),
        "not signed with the test key"
    );
    easeoff.signal("TERM");
    assert!(easeoff.wait().success());
    let log = easeoff.log.lock().unwrap();
    assert!(log.len() > 20, "trace logging is off: {} lines", log.len());
    let leaks: Vec<String> = log
        .iter()
        .map(ToString::to_string)
        .filter(|line| line.contains(KEY_ID) || line.contains("hostile-secret-key"))
        .collect();
    assert!(
        leaks.is_empty(),
        "credentials in the log:\n{}",
        leaks.join("\n")
    );
    println!(
        "trace log of a signed request: {} lines, no credentials",
        log.len()
    );
}

/// A `redis-server` on a free loopback port, killed on drop; `None` when it is not
/// installed (the Redis part of a test is then skipped, with a notice).
struct Redis(std::process::Child, u16);

impl Redis {
    fn start() -> Option<Redis> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .ok()?
            .port();
        let child = std::process::Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let Ok(child) = child else {
            eprintln!("skipped the Redis part: redis-server is not installed");
            return None;
        };
        let redis = Redis(child, port);
        let started = Instant::now();
        while redis.keys().is_none() {
            assert!(started.elapsed() < PATIENCE, "redis-server did not answer");
            std::thread::sleep(Duration::from_millis(10));
        }
        Some(redis)
    }

    /// Every key in Redis, with every field and value of each hash.
    fn keys(&self) -> Option<String> {
        let url = format!("redis://127.0.0.1:{}/0", self.1);
        let mut c = redis::Client::open(url).ok()?.get_connection().ok()?;
        let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut c).ok()?;
        let mut all = keys.join("\n");
        for key in &keys {
            let fields: Vec<String> = redis::cmd("HGETALL")
                .arg(key)
                .query(&mut c)
                .unwrap_or_default();
            all.push_str(&fields.join("\n"));
        }
        Some(all)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Lanes by bearer token and by a header marked secret, the log at trace level, and a
/// fleet in Redis when there is one: neither value is in any of them; each token
/// still has a lane of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_that_names_a_lane_is_not_published() {
    const TOKENS: [&str; 2] = ["sk-live-AAAA1111secret", "sk-live-BBBB2222secret"];
    const TENANT: &str = "tenant-CCCC3333secret";
    let up = upstream(|_| async { ok() }).await;
    let redis = Redis::start();
    let fleet = redis.as_ref().map_or(String::new(), |r| {
        format!(
            "[fleet]\nredis = \"redis://127.0.0.1:{}/0\"\nsync_interval = \"20ms\"\n\n",
            r.1
        )
    });
    let config = config_file(&format!(
        "[server]\nadmin_listen = \"127.0.0.1:0\"\nshutdown_grace = \"1s\"\n\n{fleet}{}",
        upstream_table(
            "up",
            up.addr,
            "access_log = \"full\"\n[upstream.lanes]\nby = [\"header:authorization\", \"header:x-tenant\"]\nsecret_headers = [\"x-tenant\"]"
        )
    ));
    let mut command = Process::command(&config);
    command.args(["--log-level", "trace"]);
    let mut easeoff = Process::spawn(command);
    for token in TOKENS {
        for _ in 0..3 {
            let bearer = format!("Bearer {token}");
            let headers = [("authorization", bearer.as_str()), ("x-tenant", TENANT)];
            let answer = send(&client(), "GET", &easeoff.url("up"), &headers, "").await;
            assert_eq!(answer.status, 200);
        }
    }
    let lanes = |shown: &serde_json::Value| {
        let lanes = shown["lanes"].as_array().cloned();
        lanes.unwrap_or_default().len()
    };
    let shown = status(easeoff.admin).await;
    assert_eq!(lanes(&shown), 3, "default and one lane per token: {shown}");
    let mut published = vec![
        ("/status", shown.to_string()),
        ("/metrics", metrics(easeoff.admin).await),
    ];
    if let Some(redis) = &redis {
        wait_until(PATIENCE, "the lanes to reach Redis", || async {
            redis.keys().unwrap_or_default().matches(":state").count() >= 2
        })
        .await;
        published.push(("Redis", redis.keys().unwrap_or_default()));
    }
    easeoff.signal("TERM");
    assert!(easeoff.wait().success());
    let log: Vec<String> = easeoff
        .log
        .lock()
        .unwrap()
        .iter()
        .map(ToString::to_string)
        .collect();
    let accessed = log.iter().filter(|l| l.contains("easeoff::access")).count();
    assert_eq!(
        accessed,
        6,
        "an access log line a request:\n{}",
        log.join("\n")
    );
    published.push(("the log", log.join("\n")));
    for (place, text) in &published {
        for secret in TOKENS.into_iter().chain([TENANT]) {
            assert!(!text.contains(secret), "{place} shows {secret}:\n{text}");
        }
    }
}

/// SIGUSR1 and SIGUSR2 are ignored; SIGINT drains an in-flight request and exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_signals_are_ignored_and_sigint_drains() {
    let up = upstream(|_| async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        ok()
    })
    .await;
    let config = config_file(&format!(
        "[server]\nadmin_listen = \"127.0.0.1:0\"\nshutdown_grace = \"5s\"\n\n{}",
        upstream_table("up", up.addr, "")
    ));
    let mut easeoff = Process::spawn({
        let mut command = Process::command(&config);
        command.stdin(Stdio::null());
        command
    });
    easeoff.signal("USR1");
    easeoff.signal("USR2");
    let healthz = get(&format!("http://{}/healthz", easeoff.admin)).await;
    assert_eq!(healthz.status, 200);
    assert!(
        easeoff.child.try_wait().unwrap().is_none(),
        "a user signal ended easeoff"
    );
    let url = easeoff.url("up");
    let in_flight = tokio::spawn(async move { get(&url).await });
    let up = &up;
    eventually("the request to reach the upstream", || async move {
        up.count() == 1
    })
    .await;
    let started = Instant::now();
    easeoff.signal("INT");
    assert_eq!(in_flight.await.unwrap().status, 200);
    assert_eq!(easeoff.wait().code(), Some(0));
    println!(
        "SIGUSR1/2 ignored; SIGINT drained the request in flight and exited 0 after {:?}",
        started.elapsed()
    );
}
