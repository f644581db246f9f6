//! Hostile upstreams and odd requests (issue 11, findings 5, 7 and 8): conflicting
//! framing, a broken first chunk, a head followed by silence, an upstream that never
//! reads, `CONNECT`, and the idle pool after a burst. A client always gets a status
//! line or a reset, never an empty or truncated answer on a kept-alive connection.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use support::*;

const SECOND: Duration = Duration::from_secs(1);

/// An upstream that reads each request head and writes `reply` (then holds the
/// connection open); counts the requests it saw.
async fn scripted(reply: &'static [u8]) -> (SocketAddr, Arc<AtomicUsize>) {
    let (addr, seen, _) = scripted_counting(reply).await;
    (addr, seen)
}

/// As [`scripted`], also counting the connections it accepted.
async fn scripted_counting(
    reply: &'static [u8],
) -> (SocketAddr, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(AtomicUsize::new(0));
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&seen);
    let accepted = Arc::clone(&connections);
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            accepted.fetch_add(1, Ordering::SeqCst);
            let counted = Arc::clone(&counted);
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                loop {
                    let Ok(n) = socket.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    head.extend_from_slice(&buf[..n]);
                    while let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                        head.drain(..end + 4);
                        counted.fetch_add(1, Ordering::SeqCst);
                        if socket.write_all(reply).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    (addr, seen, connections)
}

/// The raw answer to a GET that asks for the connection to close after it.
async fn get_closing(proxy: SocketAddr) -> String {
    raw_exchange(
        proxy,
        "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        10 * SECOND,
    )
    .await
}

async fn proxy_to(target: SocketAddr, server_keys: &str, upstream_keys: &str) -> Proxy {
    proxy_config(&format!(
        "[server]\nadmin_listen = \"127.0.0.1:0\"\nshutdown_grace = \"1s\"\n{server_keys}\n\n{}",
        upstream_table("up", target, upstream_keys)
    ))
    .await
}

/// Finding 5: `Content-Length: 3` beside chunked `hello` reached the client as `hel`.
/// The Content-Length is dropped, the whole body arrives, and the connection stays
/// usable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_length_beside_transfer_encoding_is_dropped() {
    let (target, _) = scripted(
        b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    )
    .await;
    let proxy = proxy_to(target, "", "").await;
    let mut socket = TcpStream::connect(proxy.addr).await.unwrap();
    let mut answers = Vec::new();
    for _ in 0..2 {
        socket
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        // A chunked answer ends with its last chunk; one with a length after its body.
        while !(seen.ends_with(b"0\r\n\r\n") || seen.ends_with(b"hello")) {
            let n = tokio::time::timeout(5 * SECOND, socket.read(&mut buf))
                .await
                .expect("the answer stopped short")
                .unwrap();
            assert_ne!(n, 0, "closed after {:?}", String::from_utf8_lossy(&seen));
            seen.extend_from_slice(&buf[..n]);
        }
        answers.push(String::from_utf8_lossy(&seen).to_lowercase());
    }
    for answer in &answers {
        assert!(answer.starts_with("http/1.1 200"), "{answer}");
        assert!(answer.contains("hello"), "{answer}");
        assert!(!answer.contains("content-length: 3"), "{answer}");
    }
    println!(
        "CL + TE: both answers whole on one connection:\n{}",
        answers[1]
    );
}

/// Finding 7: an upstream whose first chunk size is invalid left the client with an
/// empty reply; it gets a 502, and the broken upstream connection is not reused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_first_chunk_is_a_502() {
    let (target, seen, connections) =
        scripted_counting(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n")
            .await;
    let proxy = proxy_to(target, "", "").await;
    for _ in 0..3 {
        let answer = get_closing(proxy.addr).await;
        assert!(answer.starts_with("HTTP/1.1 502"), "{answer:?}");
        assert!(answer.contains("upstream-unavailable"), "{answer}");
    }
    assert_eq!(seen.load(Ordering::SeqCst), 3);
    assert_eq!(
        connections.load(Ordering::SeqCst),
        3,
        "a broken connection was reused"
    );
    println!("invalid first chunk: 3 requests, 3 x 502, 3 upstream connections");
}

/// Finding 7: an upstream head followed by silence left the client waiting forever;
/// it gets a 504 after `body_idle_timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_then_silence_is_a_504_after_the_body_idle_timeout() {
    let (target, _) = scripted(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n").await;
    let proxy = proxy_to(target, "body_idle_timeout = \"500ms\"", "").await;
    let started = Instant::now();
    let answer = get_closing(proxy.addr).await;
    assert!(answer.starts_with("HTTP/1.1 504"), "{answer:?}");
    println!(
        "head then silence: {} after {:?}",
        answer.lines().next().unwrap_or(""),
        started.elapsed()
    );
}

/// Finding 7: a body that stops part-way is cut off after `body_idle_timeout` (the
/// client sees the connection end short of the length, never a hang).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_stops_part_way_is_cut_off() {
    let (target, _) = scripted(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello").await;
    let proxy = proxy_to(target, "body_idle_timeout = \"500ms\"", "").await;
    let (after, seen) =
        raw_exchange_timed(proxy.addr, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 10 * SECOND).await;
    assert!(seen.starts_with("HTTP/1.1 200"), "{seen}");
    assert!(seen.ends_with("hello"), "{seen}");
    println!("body stopped part-way: connection ended {after:?} after the request");
}

/// Finding 7: `CONNECT` is refused with 405 before any upstream work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_is_refused_with_405() {
    let (target, seen) = scripted(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n").await;
    let proxy = proxy_to(target, "", "").await;
    let answer = raw_exchange(
        proxy.addr,
        "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\nConnection: close\r\n\r\n",
        10 * SECOND,
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 405"), "{answer:?}");
    assert!(answer.to_lowercase().contains("allow: get"), "{answer}");
    assert_eq!(seen.load(Ordering::SeqCst), 0);
    println!(
        "CONNECT: {}, upstream requests 0",
        answer.lines().next().unwrap_or("")
    );
}

/// Finding 8: an upstream that never reads an 8 MiB POST kept its connection long
/// after the 504; it loses it when the attempt ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_stops_reading_loses_its_connection() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target = listener.local_addr().unwrap();
    let proxy = proxy_to(target, "", "request_timeout = \"1s\"").await;
    let body = vec![b'x'; 8 << 20];
    let url = format!("http://{}/", proxy.addr);
    let sending = tokio::spawn(async move { send(&client(), "POST", &url, &[], body).await });
    let (mut upstream_side, _) = tokio::time::timeout(PATIENCE, listener.accept())
        .await
        .unwrap()
        .unwrap();
    let answer = tokio::time::timeout(10 * SECOND, sending)
        .await
        .expect("no answer")
        .unwrap();
    assert_eq!(answer.status, 504);
    let answered = Instant::now();
    // Now read: whatever was buffered drains, then the proxy's close shows.
    let (after, seen) = closed_within(&mut upstream_side, 10 * SECOND)
        .await
        .expect("the upstream connection was still open 10 s after the 504");
    println!(
        "8 MiB POST to an upstream that never reads: 504, upstream connection closed {after:?} after it ({} bytes had been sent)",
        seen.len()
    );
    assert!(answered.elapsed() < 10 * SECOND);
}

/// Finding 8: after a burst the pool keeps at most `[upstream.pool] max_idle`
/// connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_idle_pool_is_capped_after_a_burst() {
    const BURST: usize = 40;
    let open = Arc::new(AtomicUsize::new(0));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target = listener.local_addr().unwrap();
    let gate = Arc::new(tokio::sync::Barrier::new(BURST));
    {
        let open = Arc::clone(&open);
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let open = Arc::clone(&open);
                let gate = Arc::clone(&gate);
                tokio::spawn(async move {
                    open.fetch_add(1, Ordering::SeqCst);
                    let service = hyper::service::service_fn(move |_req| {
                        let gate = Arc::clone(&gate);
                        async move {
                            // Every request of the burst waits for the others: 40
                            // connections at once.
                            gate.wait().await;
                            Ok::<_, std::convert::Infallible>(ok())
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                    open.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
    }
    let proxy = proxy_to(
        target,
        "runtime = \"multi-thread\"",
        "[upstream.retry]\nmax_attempts = 1\n[upstream.pool]\nmax_idle = 4",
    )
    .await;
    let url = format!("http://{}/", proxy.addr);
    let mut burst = Vec::new();
    for _ in 0..BURST {
        let url = url.clone();
        burst.push(tokio::spawn(async move {
            send(&client(), "GET", &url, &[], "").await
        }));
    }
    for request in burst {
        assert_eq!(request.await.unwrap().status, 200);
    }
    let peak = BURST;
    wait_until(10 * SECOND, "the pool to shrink to its cap", || {
        let open = Arc::clone(&open);
        async move { open.load(Ordering::SeqCst) <= 4 }
    })
    .await;
    println!(
        "burst of {peak} upstream connections: {} kept idle (max_idle = 4)",
        open.load(Ordering::SeqCst)
    );
}

/// An answer head of more than 100 header lines gets its own reason, not
/// `upstream-unavailable`, and a warning at most every 10 s however many come.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_answer_head_is_named_and_warned_of() {
    let mut head = String::from("HTTP/1.1 200 OK\r\n");
    for i in 0..150 {
        head.push_str(&format!("x-line-{i}: v\r\n"));
    }
    head.push_str("content-length: 2\r\n\r\nok");
    let (target, seen) = scripted(Box::leak(head.into_bytes().into_boxed_slice())).await;
    let config = config_file(&format!(
        "[server]\nadmin_listen = \"127.0.0.1:0\"\n\n{}",
        upstream_table("up", target, "[upstream.retry]\nmax_attempts = 1\n")
    ));
    let easeoff = support::process::Process::start(&config);
    for _ in 0..3 {
        let answer = get_closing(easeoff.listens["up"]).await;
        assert!(answer.starts_with("HTTP/1.1 502"), "{answer:?}");
        assert!(answer.contains("upstream-head-too-large"), "{answer}");
    }
    assert_eq!(seen.load(Ordering::SeqCst), 3);
    let warning = "the upstream answered with a head too large to read (more than 100 header lines?); the clients got 502 upstream-head-too-large";
    eventually("the warning", || {
        let easeoff = &easeoff;
        async move { !easeoff.logged(warning, "upstream").is_empty() }
    })
    .await;
    assert_eq!(easeoff.logged(warning, "upstream"), ["up"]);
}
