//! The connections kept to a plain-http upstream: reused while they live, replaced when
//! the upstream closes them, closed after `idle_timeout`.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use support::*;

const SECOND: Duration = Duration::from_secs(1);

/// What a raw upstream has seen.
#[derive(Default)]
struct Seen {
    accepted: AtomicUsize,
    open: AtomicUsize,
    requests: AtomicUsize,
}

/// An upstream that answers every request head with a small 200; with `close_after`
/// it closes each connection that long after its answer, as a server whose keep-alive
/// ran out does (no `Connection: close`).
async fn raw_upstream(close_after: Option<Duration>) -> (SocketAddr, Arc<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    let counts = Arc::clone(&seen);
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            counts.accepted.fetch_add(1, Ordering::SeqCst);
            counts.open.fetch_add(1, Ordering::SeqCst);
            let counts = Arc::clone(&counts);
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                'conn: while let Ok(n @ 1..) = socket.read(&mut buf).await {
                    head.extend_from_slice(&buf[..n]);
                    while let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                        head.drain(..end + 4);
                        counts.requests.fetch_add(1, Ordering::SeqCst);
                        let reply = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
                        if socket.write_all(reply).await.is_err() {
                            break 'conn;
                        }
                        if let Some(after) = close_after {
                            tokio::time::sleep(after).await;
                            break 'conn;
                        }
                    }
                }
                drop(socket);
                counts.open.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    (addr, seen)
}

/// One answer whose body is `ok`, read off a kept-alive connection.
async fn read_ok(socket: &mut TcpStream) -> String {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !seen.ends_with(b"\r\n\r\nok") {
        let n = tokio::time::timeout(10 * SECOND, socket.read(&mut buf))
            .await
            .unwrap_or_else(|_| {
                let seen = String::from_utf8_lossy(&seen);
                panic!("no answer `ok` within 10 s; got {seen:?}")
            })
            .unwrap();
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&seen).into_owned()
}

async fn proxy_to(target: SocketAddr, upstream_keys: &str) -> Proxy {
    proxy_in("per-core", target, upstream_keys).await
}

/// A proxy with `runtime` (`per-core`: a pool per core; `multi-thread`: one pool).
async fn proxy_in(runtime: &str, target: SocketAddr, upstream_keys: &str) -> Proxy {
    proxy_config(&format!(
        "[server]\nadmin_listen = \"127.0.0.1:0\"\nshutdown_grace = \"1s\"\nruntime = \"{runtime}\"\n\n{}",
        upstream_table("up", target, upstream_keys)
    ))
    .await
}

/// Requests one after another on one client connection share one upstream connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequential_requests_reuse_one_upstream_connection() {
    let (target, seen) = raw_upstream(None).await;
    let proxy = proxy_to(target, "").await;
    // One raw client connection: a pooling client could open a second one.
    let mut socket = TcpStream::connect(proxy.addr).await.unwrap();
    for i in 0..20 {
        socket
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let answer = read_ok(&mut socket).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "request {i}: {answer}");
    }
    let accepted = seen.accepted.load(Ordering::SeqCst);
    println!("20 requests on one client connection: {accepted} upstream connection(s)");
    assert_eq!(seen.requests.load(Ordering::SeqCst), 20);
    assert_eq!(accepted, 1);
}

/// An upstream that closes each connection after its answer costs no request: the
/// next one goes on a new connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_closes_after_each_answer_loses_no_request() {
    let (target, seen) = raw_upstream(Some(Duration::ZERO)).await;
    let proxy = proxy_to(target, "[upstream.retry]\nmax_attempts = 1").await;
    let url = format!("http://{}/", proxy.addr);
    let client = client();
    for i in 0..20 {
        let answer = send(&client, "GET", &url, &[], "").await;
        assert_eq!(answer.status, 200, "request {i}: {:?}", answer.body);
        let seen = Arc::clone(&seen);
        wait_until(10 * SECOND, "the upstream to close its connection", || {
            let seen = Arc::clone(&seen);
            async move { seen.open.load(Ordering::SeqCst) == 0 }
        })
        .await;
    }
    assert_eq!(seen.accepted.load(Ordering::SeqCst), 20);
}

/// A connection left idle for `idle_timeout` is closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_is_closed_after_the_idle_timeout() {
    let (target, seen) = raw_upstream(None).await;
    let proxy = proxy_to(target, "[upstream.pool]\nidle_timeout = \"200ms\"").await;
    let url = format!("http://{}/", proxy.addr);
    assert_eq!(get(&url).await.status, 200);
    assert_eq!(seen.open.load(Ordering::SeqCst), 1);
    let open = Arc::clone(&seen);
    wait_until(10 * SECOND, "the idle connection to close", || {
        let open = Arc::clone(&open);
        async move { open.open.load(Ordering::SeqCst) == 0 }
    })
    .await;
    // And the next request opens a new one.
    assert_eq!(get(&url).await.status, 200);
    assert_eq!(seen.accepted.load(Ordering::SeqCst), 2);
}

/// With `max_idle = 0` no connection is kept: each request has one of its own, closed
/// after its answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_idle_zero_keeps_no_connection() {
    let (target, seen) = raw_upstream(None).await;
    let proxy = proxy_to(target, "[upstream.pool]\nmax_idle = 0").await;
    let url = format!("http://{}/", proxy.addr);
    for _ in 0..3 {
        assert_eq!(get(&url).await.status, 200);
    }
    let open = Arc::clone(&seen);
    wait_until(10 * SECOND, "every upstream connection to close", || {
        let open = Arc::clone(&open);
        async move { open.open.load(Ordering::SeqCst) == 0 }
    })
    .await;
    assert_eq!(seen.accepted.load(Ordering::SeqCst), 3);
}

/// A client connection that stays open but idle does not hold its upstream connection
/// past `idle_timeout`: it gives it back, and the pool closes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_client_connection_holds_no_upstream_connection_past_the_idle_timeout() {
    let (target, seen) = raw_upstream(None).await;
    let proxy = proxy_to(target, "[upstream.pool]\nidle_timeout = \"200ms\"").await;
    let mut socket = TcpStream::connect(proxy.addr).await.unwrap();
    socket
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    read_ok(&mut socket).await;
    let open = Arc::clone(&seen);
    wait_until(10 * SECOND, "the idle upstream connection to close", || {
        let open = Arc::clone(&open);
        async move { open.open.load(Ordering::SeqCst) == 0 }
    })
    .await;
    // The client connection is still there, and its next request opens a new one.
    socket
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    assert!(read_ok(&mut socket).await.starts_with("HTTP/1.1 200"));
    assert_eq!(seen.accepted.load(Ordering::SeqCst), 2);
}

/// A client connection that ends gives its idle upstream connection back: the next
/// client's request goes on it. The upstream then closes it while no client connection
/// drives it; the request after that still gets its answer, without a retry of
/// easeoff's, on a new connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_given_back_serves_the_next_client_and_its_close_loses_nothing() {
    let (target, seen) = raw_upstream(None).await;
    // One pool for every client connection: with one per core, the next client could
    // be served by another core.
    let proxy = proxy_in("multi-thread", target, "[upstream.retry]\nmax_attempts = 1").await;
    let ask = |addr| async move {
        let mut socket = TcpStream::connect(addr).await.unwrap();
        socket
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        read_ok(&mut socket).await
    };
    for i in 0..5 {
        let answer = ask(proxy.addr).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "client {i}: {answer}");
    }
    let accepted = seen.accepted.load(Ordering::SeqCst);
    println!("5 client connections one after another: {accepted} upstream connection(s)");
    // Each client hangs up as soon as it has its answer; easeoff may not have seen the
    // hang-up before the next client asks, but it must not need one each.
    assert!(
        accepted < 5,
        "{accepted} upstream connections for 5 clients in turn"
    );

    let (target, seen) = raw_upstream(Some(Duration::from_millis(300))).await;
    let proxy = proxy_in("multi-thread", target, "[upstream.retry]\nmax_attempts = 1").await;
    assert!(ask(proxy.addr).await.starts_with("HTTP/1.1 200"));
    let open = Arc::clone(&seen);
    wait_until(10 * SECOND, "the upstream to close its connection", || {
        let open = Arc::clone(&open);
        async move { open.open.load(Ordering::SeqCst) == 0 }
    })
    .await;
    let answer = ask(proxy.addr).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(seen.requests.load(Ordering::SeqCst), 2);
    assert_eq!(seen.accepted.load(Ordering::SeqCst), 2);
}
