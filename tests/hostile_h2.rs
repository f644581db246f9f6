//! HTTP/2 rapid reset, paced (issue 11, finding 3): a client that opens a stream, lets
//! easeoff start upstream work for it, and cancels it, again and again, gets a GOAWAY
//! after `http2_max_resets` cancels, so the upstream work it can cause is bounded.

#![allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "test figures are small"
)]

mod support;

use std::time::{Duration, Instant};

use tokio::net::TcpStream;

use support::*;

const SECOND: Duration = Duration::from_secs(1);
const MAX_RESETS: usize = 20;

type H2Connection = tokio::task::JoinHandle<Result<(), h2::Error>>;

/// easeoff with `server_keys`, in front of an upstream that never answers (every
/// request is work a cancel throws away), and an HTTP/2 connection to it.
async fn h2_to_a_silent_upstream(
    server_keys: &str,
) -> (
    TestUpstream,
    Proxy,
    h2::client::SendRequest<bytes::Bytes>,
    H2Connection,
) {
    let up = upstream(|_| std::future::pending()).await;
    let proxy = proxy_config(&format!(
        "[server]\nadmin_listen = \"127.0.0.1:0\"\nshutdown_grace = \"1s\"\n{server_keys}\n\n{}",
        upstream_table("up", up.addr, "")
    ))
    .await;
    let tcp = TcpStream::connect(proxy.addr).await.unwrap();
    let (client, connection) = h2::client::handshake(tcp).await.unwrap();
    (up, proxy, client, tokio::spawn(connection))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paced_rapid_reset_gets_a_goaway_within_the_reset_budget() {
    let (up, proxy, client, connection) = h2_to_a_silent_upstream(&format!(
        "http2_max_resets = {MAX_RESETS}\nhttp2_reset_window = \"1m\""
    ))
    .await;
    let started = Instant::now();
    let mut resets = 0;
    let mut refused = false;
    for _ in 0..200 {
        let mut ready = match client.clone().ready().await {
            Ok(ready) => ready,
            Err(_) => {
                refused = true;
                break;
            }
        };
        let request = http::Request::post(format!("http://{}/", proxy.addr))
            .body(())
            .unwrap();
        let Ok((response, mut stream)) = ready.send_request(request, true) else {
            refused = true;
            break;
        };
        let before = up.count();
        let mut response = response;
        // Either the request reaches the upstream or easeoff answers it; a slow host
        // only delays which, so the wait is long and running out of it is a failure,
        // not a refusal.
        let arrived = tokio::time::timeout(60 * SECOND, async {
            tokio::select! {
                // Answered without upstream work: refused.
                _ = &mut response => false,
                () = async {
                    while up.count() == before {
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                } => true,
            }
        })
        .await
        .expect("the request neither reached the upstream nor was answered in 60 s");
        if !arrived {
            refused = true;
            break;
        }
        stream.send_reset(h2::Reason::CANCEL);
        drop(response);
        resets += 1;
    }
    let goaway = tokio::time::timeout(30 * SECOND, connection).await;
    assert!(refused, "200 paced resets and no GOAWAY");
    assert!(
        goaway.is_ok(),
        "the connection was not closed after the GOAWAY"
    );
    let upstream_requests = up.count();
    assert!(
        resets <= MAX_RESETS + 1,
        "{resets} resets before the GOAWAY (budget {MAX_RESETS})"
    );
    assert!(
        upstream_requests <= MAX_RESETS + 1,
        "{upstream_requests} upstream requests (budget {MAX_RESETS})"
    );
    println!(
        "paced rapid reset: GOAWAY after {resets} resets in {:?}, {upstream_requests} upstream requests (http2_max_resets = {MAX_RESETS})",
        started.elapsed()
    );
}

/// The finding as reported: batches of 100 HEADERS, each reset 30 ms later, in a loop
/// (21,654 upstream requests in 10 s before). With the default budget the connection
/// gets its GOAWAY within two batches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_rapid_reset_with_the_default_budget() {
    let (up, proxy, client, connection) = h2_to_a_silent_upstream("").await;
    let started = Instant::now();
    let mut resets = 0;
    let mut refused = false;
    'rounds: for _ in 0..100 {
        let mut open = Vec::new();
        for _ in 0..100 {
            let Ok(mut ready) = client.clone().ready().await else {
                refused = true;
                break 'rounds;
            };
            let request = http::Request::post(format!("http://{}/", proxy.addr))
                .body(())
                .unwrap();
            match ready.send_request(request, true) {
                Ok(sent) => open.push(sent),
                Err(_) => {
                    refused = true;
                    break 'rounds;
                }
            }
        }
        // The attack's own pacing: 30 ms, and until the batch reached the upstream.
        let before = up.count();
        let _ = tokio::time::timeout(SECOND, async {
            while up.count() < before + open.len() {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
        .await;
        tokio::time::sleep(Duration::from_millis(30)).await;
        for (_, mut stream) in open {
            stream.send_reset(h2::Reason::CANCEL);
            resets += 1;
        }
    }
    let closed = tokio::time::timeout(5 * SECOND, connection).await;
    let upstream_requests = up.count();
    assert!(refused, "{resets} resets and no GOAWAY");
    assert!(
        closed.is_ok(),
        "the connection was not closed after the GOAWAY"
    );
    assert!(
        upstream_requests <= 300,
        "{upstream_requests} upstream requests from one connection"
    );
    println!(
        "batched rapid reset (100 streams, reset once upstream + 30 ms): GOAWAY after {resets} resets in {:?}, {upstream_requests} upstream requests",
        started.elapsed()
    );
}
