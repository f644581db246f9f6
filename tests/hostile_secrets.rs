//! Secrets and signals (issue 11, finding 10): a token in the upstream URL's path is
//! not shown by `/status` or the log, the AWS access key id never reaches the log even
//! at trace level, SIGUSR1 and SIGUSR2 do not kill the process, and SIGINT drains as
//! SIGTERM does.

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
