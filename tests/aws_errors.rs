//! easeoff's own answers as an AWS SDK sees them: boto3 (standard retry mode) names
//! each error, retries only those a retry can help, and gets a dead upstream's error
//! at once rather than after easeoff's own connection retries.
//!
//! Needs the e2e venv with boto3 (`.ci/run` installs it): at `$EASEOFF_E2E_VENV`,
//! else `~/.cache/easeoff-e2e`. Without it the test says so and passes, unless
//! `EASEOFF_REQUIRE_MOTO=1` (set by CI).

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use support::*;

fn venv() -> Option<PathBuf> {
    let dir = std::env::var_os("EASEOFF_E2E_VENV")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/easeoff-e2e")))?;
    if dir.join("bin/python").exists() {
        return Some(dir);
    }
    assert!(
        std::env::var_os("EASEOFF_REQUIRE_MOTO").is_none(),
        "no e2e venv at {}",
        dir.display()
    );
    eprintln!("skipped: no e2e venv with boto3 at {}", dir.display());
    None
}

/// One boto3 PutItem through `proxy` with `attempts` attempts; the script's report.
async fn put_item(venv: &Path, proxy: &Proxy, attempts: u32) -> serde_json::Value {
    let args = vec![format!("http://{}", proxy.addr), attempts.to_string()];
    e2e_script(venv, "aws_errors.py", args).await
}

#[tokio::test]
async fn a_dead_upstream_is_named_service_unavailable_at_once_and_retried_by_the_sdk() {
    let Some(venv) = venv() else { return };
    let dead = refusing_port();
    let proxy = proxy(dead, "preset = \"dynamodb\"\n").await;
    let report = put_item(&venv, &proxy, 3).await;
    assert_eq!(report["code"], "ServiceUnavailable");
    assert_eq!(report["status"], 502);
    assert_eq!(report["attempts"], 3, "botocore retries a 502");
    // A refused connection is answered at once, not after easeoff's own connection
    // retries (23 s with the preset's 10 attempts): none was made, and the bound leaves
    // a loaded host room, far below that.
    assert_eq!(retries(proxy.admin, "connect").await, 0.0);
    let first = report["first_answer_s"].as_f64().unwrap();
    assert!(first < 10.0, "first answer after {first} s");
    assert!(
        report["message"]
            .as_str()
            .unwrap()
            .contains("cannot connect")
    );
}

#[tokio::test]
async fn a_shed_is_a_throttling_exception_with_a_retry_hint_in_milliseconds() {
    let Some(venv) = venv() else { return };
    let up = upstream(|_| async { respond(200, &[], "{}") }).await;
    let proxy = proxy(
        up.addr,
        "preset = \"dynamodb\"\n[upstream.sleeper]\nstrategy = \"constant\"\ninitial_interval = \"60s\"\n[upstream.queue]\nmax_waiting = 0\n",
    )
    .await;
    assert_eq!(put_item(&venv, &proxy, 1).await["code"], "ok");
    let report = put_item(&venv, &proxy, 1).await;
    assert_eq!(report["code"], "ThrottlingException");
    let hint: u64 = report["retry_after_ms"][0]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    // The next slot is a minute after the first call, less the time since (a second
    // python start-up, however slow the machine: a loaded host took over 10 s).
    assert!((1..=60_000).contains(&hint), "x-amz-retry-after {hint}");
    assert!(
        report["message"]
            .as_str()
            .unwrap()
            .starts_with("queue-full")
    );
}

#[tokio::test]
async fn a_timeout_is_a_request_timeout_the_sdk_retries() {
    let Some(venv) = venv() else { return };
    let up = upstream(|_| async {
        tokio::time::sleep(Duration::from_secs(30)).await;
        respond(200, &[], "{}")
    })
    .await;
    let proxy = proxy(
        up.addr,
        "preset = \"dynamodb\"\nrequest_timeout = \"200ms\"\n[upstream.retry]\nmax_attempts = 1\n",
    )
    .await;
    let report = put_item(&venv, &proxy, 2).await;
    assert_eq!(report["code"], "RequestTimeout");
    assert_eq!(report["status"], 504);
    assert_eq!(report["attempts"], 2, "botocore retries a 504");
}
