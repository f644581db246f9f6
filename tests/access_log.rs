//! The access log as an operator reads it: one line per request with what happened to
//! it (a success, a retried request, a throttle handed back, a shed), as JSON values in
//! JSON mode and as plain `key=value` text, with no colour codes, in a file.

mod support;

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::process::*;
use support::*;

/// Config text with one upstream per case, each logging every request.
fn config(cases: &[(&str, SocketAddr, &str)]) -> String {
    let mut text = "[server]\nadmin_listen = \"127.0.0.1:0\"\n".to_string();
    for (name, target, extra) in cases {
        text.push_str(&format!(
            "\n[[upstream]]\nname = \"{name}\"\nlisten = \"127.0.0.1:0\"\nurl = \"http://{target}\"\naccess_log = \"full\"\n{extra}\n"
        ));
    }
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_gets_a_json_line_with_what_happened_to_it() {
    let fine = upstream(|_| async { ok() }).await;
    let busy = upstream(|_| async { respond(429, &[], "") }).await;
    let once = throttles_first(1, || respond(429, &[], "")).await;
    let slow = upstream(|_| async { ok() }).await;
    let denied = upstream(|_| async { respond(403, &[], "bad signature") }).await;
    let path = config_file(&config(&[
        ("ok", fine.addr, ""),
        ("throttled", busy.addr, "[upstream.retry]\nmax_attempts = 1"),
        ("retried", once.addr, ""),
        (
            "shed",
            slow.addr,
            "[upstream.sleeper]\nstrategy = \"constant\"\ninitial_interval = \"10s\"\n[upstream.queue]\nmax_wait = \"1ms\"",
        ),
        ("denied", denied.addr, ""),
    ]));
    let process = Process::start(&path);
    let query = "?secret=1";
    assert_eq!(
        get(&format!("{}a/b{query}", process.url("ok")))
            .await
            .status,
        200
    );
    assert_eq!(get(&process.url("throttled")).await.status, 429);
    assert_eq!(get(&process.url("retried")).await.status, 200);
    assert_eq!(get(&process.url("shed")).await.status, 200);
    assert_eq!(get(&process.url("shed")).await.status, 429);
    for _ in 0..3 {
        assert_eq!(get(&process.url("denied")).await.status, 403);
    }
    let lines = || -> Vec<serde_json::Value> {
        let log = process.log.lock().unwrap();
        log.iter()
            .filter(|l| l["target"] == "easeoff::access")
            .cloned()
            .collect()
    };
    eventually("eight access lines", || async { lines().len() >= 8 }).await;
    let lines = lines();
    for line in &lines {
        eprintln!("{line}");
    }
    let of = |name: &str| -> Vec<&serde_json::Value> {
        lines.iter().filter(|l| l["upstream"] == name).collect()
    };
    let ok = of("ok")[0];
    assert_eq!(ok["path"], "/a/b", "no query in the log");
    assert_eq!(ok["method"], "GET");
    assert_eq!(ok["status"], 200);
    assert_eq!(ok["outcome"], "success");
    assert_eq!(ok["attempts"], 1);
    assert!(ok["upstream_ms"].is_number() && ok["queue_wait_ms"].is_number());
    assert_eq!(of("throttled")[0]["outcome"], "throttled");
    assert_eq!(of("throttled")[0]["status"], 429);
    let retried = of("retried")[0];
    assert_eq!(
        (retried["attempts"].as_u64(), retried["outcome"].as_str()),
        (Some(2), Some("success"))
    );
    let shed = of("shed");
    assert_eq!(shed.len(), 2);
    assert_eq!(shed[1]["outcome"], "shed");
    assert_eq!(shed[1]["attempts"], 0);
    assert_eq!(shed[1]["reason"], "shed");
    assert_eq!(of("denied").len(), 3);
    assert!(of("denied").iter().all(|l| l["outcome"] == "client_error"));

    // At the default level, one line per state change, not one per request.
    let said = |message: &str, name: &str| -> Vec<serde_json::Value> {
        let log = process.log.lock().unwrap();
        log.iter()
            .filter(|l| l["message"] == message && l["upstream"] == name)
            .cloned()
            .collect()
    };
    let auth = said(
        "the upstream refuses requests as unauthorised; check the credentials and its access policy",
        "denied",
    );
    assert_eq!(auth.len(), 1, "one warning for three 403s within 10 s");
    assert_eq!(
        (auth[0]["status"].as_u64(), auth[0]["answers"].as_u64()),
        (Some(403), Some(1))
    );
    let pacing = said("the upstream throttles; pacing requests", "throttled");
    assert_eq!(pacing.len(), 1);
    assert!(pacing[0]["interval_ms"].as_f64().unwrap() > 0.0);
    let shedding = said("shedding requests", "shed");
    assert_eq!(shedding.len(), 1);
    assert_eq!(shedding[0]["shed"], 1);
    for line in auth.iter().chain(&pacing).chain(&shedding) {
        eprintln!("{line}");
    }
}

#[tokio::test]
async fn text_logs_into_a_file_carry_no_colour_codes() {
    let fine = upstream(|_| async { ok() }).await;
    let path = config_file(&config(&[("ok", fine.addr, "")]));
    let log_path = path.with_file_name("easeoff.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_easeoff"))
        .args(["run", "--log-format", "text", "--config"])
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let read = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let started = Instant::now();
    let listen = loop {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no forwarding line: {}",
            read()
        );
        let text = read();
        if let Some(at) = text
            .lines()
            .find(|l| l.contains("forwarding") && l.contains("upstream=ok"))
        {
            let listen = at
                .split("listen=")
                .nth(1)
                .unwrap()
                .split_whitespace()
                .next()
                .unwrap();
            break listen.trim_matches('"').to_string();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(get(&format!("http://{listen}/x?q=1")).await.status, 200);
    eventually("the access line", || async {
        read().contains("easeoff::access")
    })
    .await;
    let _ = child.kill();
    let _ = child.wait();
    let text = read();
    let line = text
        .lines()
        .find(|l| l.contains("easeoff::access"))
        .unwrap();
    eprintln!("{line}");
    assert!(
        !text.contains('\u{1b}'),
        "escape codes in the file:\n{text}"
    );
    for field in [
        "upstream=ok",
        "method=GET",
        "path=/x ",
        "status=200",
        "outcome=success",
        "attempts=1",
    ] {
        assert!(line.contains(field), "{field} missing from {line}");
    }
}
