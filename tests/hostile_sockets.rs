//! Hostile clients against the proxy's sockets (issue 11, findings 1 and 2; issue 16,
//! finding 5): silent connections, slow heads and bodies, idle keep-alive and HTTP/2
//! connections, and silent admin connections under a small descriptor limit. Every
//! one is closed by its deadline and new clients are served.

mod support;

use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use support::*;

const SECOND: Duration = Duration::from_secs(1);

fn server(extra: &str) -> String {
    format!("[server]\nadmin_listen = \"127.0.0.1:0\"\nshutdown_grace = \"1s\"\n{extra}\n")
}

/// An upstream answering 200 and a config file for the binary in front of it.
async fn config_for_binary(server_keys: &str) -> (TestUpstream, ConfigFile) {
    let up = upstream(|_| async { ok() }).await;
    let config = config_file(&format!(
        "{}\n{}",
        server(server_keys),
        upstream_table("up", up.addr, "")
    ));
    (up, config)
}

async fn one_upstream(server_keys: &str) -> (TestUpstream, Proxy) {
    let up = upstream(|_| async { ok() }).await;
    let proxy = proxy_config(&format!(
        "{}\n{}",
        server(server_keys),
        upstream_table("up", up.addr, "")
    ))
    .await;
    (up, proxy)
}

/// Finding 2: 100 silent sockets with `max_connections = 100` took every permit; they
/// are closed `header_read_timeout` after their accept and a new client is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_sockets_cannot_hold_every_connection_slot() {
    let (up, proxy) = one_upstream(
        "max_connections = 100\nheader_read_timeout = \"500ms\"\nruntime = \"multi-thread\"",
    )
    .await;
    // Each with when its connect completed: easeoff accepted it then or later.
    let mut silent = Vec::new();
    for _ in 0..100 {
        let socket = TcpStream::connect(proxy.addr).await.unwrap();
        silent.push((socket, Instant::now()));
    }
    let started = Instant::now();
    let answer = tokio::time::timeout(10 * SECOND, get(&format!("http://{}/", proxy.addr)))
        .await
        .expect("a new client was not served while silent sockets held the slots");
    assert_eq!(answer.status, 200);
    assert_eq!(up.count(), 1);
    let mut closed = 0;
    for (socket, connected) in &mut silent {
        let (_, seen) = closed_within(socket, PATIENCE)
            .await
            .expect("a silent socket is still open long after its header timeout");
        assert!(seen.is_empty(), "a silent socket was sent {seen:?}");
        // Not before its timeout (500 ms from the accept): however late a loaded host
        // connected the later sockets, each is measured from its own connect.
        let open = connected.elapsed();
        assert!(
            open >= Duration::from_millis(400),
            "closed {open:?} after connecting"
        );
        closed += 1;
    }
    println!(
        "100 silent sockets, max_connections = 100: {closed} closed, new client served after {:?}",
        started.elapsed()
    );
}

/// Sends a request head a byte every 100 ms or slower, for 25 s or more, never
/// complete; whether the proxy closed the connection before it was all sent.
async fn trickle_head(socket: &mut TcpStream) -> bool {
    let head = format!(
        "GET / HTTP/1.1\r\nHost: x\r\nX-Slow: {}\r\n",
        "a".repeat(215)
    );
    for byte in head.as_bytes() {
        if socket.write_all(&[*byte]).await.is_err() {
            return true;
        }
        if closed_within(socket, Duration::from_millis(100))
            .await
            .is_some()
        {
            return true;
        }
    }
    false
}

/// Finding 2: the head deadline runs from the accept, not from the first byte, and a
/// head trickled in a byte at a time does not extend it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickled_head_is_cut_off_by_the_deadline_from_accept() {
    let (up, proxy) = one_upstream("header_read_timeout = \"1s\"").await;
    let mut socket = TcpStream::connect(proxy.addr).await.unwrap();
    let accepted = Instant::now();
    let cut_off = trickle_head(&mut socket).await;
    let after = accepted.elapsed();
    assert!(
        cut_off,
        "the trickled head was still being read after {after:?}"
    );
    // Ten times the deadline: a loaded host's lag, not a deadline the trickle moved.
    assert!(after < 10 * SECOND, "cut off only after {after:?}");
    assert_eq!(up.count(), 0);
    println!("trickled head cut off {after:?} after the accept (header_read_timeout 1s)");
}

/// Finding 2: on a kept-alive connection, the next head trickled in a byte at a time
/// is cut off `keepalive_timeout` after the last answer (parked or not in between).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickled_later_head_is_cut_off_by_the_keep_alive_deadline() {
    let (up, proxy) = one_upstream("keepalive_timeout = \"1s\"").await;
    let mut socket = TcpStream::connect(proxy.addr).await.unwrap();
    socket
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let first = read_answer(&mut socket).await;
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    let answered = Instant::now();
    let cut_off = trickle_head(&mut socket).await;
    let after = answered.elapsed();
    assert!(
        cut_off,
        "the trickled head was still being read after {after:?}"
    );
    assert!(after < 10 * SECOND, "cut off only after {after:?}");
    assert_eq!(up.count(), 1);
    println!("trickled later head cut off {after:?} after the last answer (keepalive_timeout 1s)");
}

/// Finding 2: a request body sent a byte now and then is given up after
/// `body_idle_timeout` of silence, with an answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_request_body_is_answered_and_closed() {
    let (up, proxy) = one_upstream("body_idle_timeout = \"500ms\"").await;
    let (after, seen) = raw_exchange_timed(
        proxy.addr,
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789",
        10 * SECOND,
    )
    .await;
    assert!(seen.starts_with("HTTP/1.1 400"), "{seen}");
    assert!(seen.contains("no body data"), "{seen}");
    assert_eq!(up.count(), 0);
    println!("stalled body: 400 and closed after {after:?} (body_idle_timeout 500ms)");
}

/// Issue 16, finding 5: keep-alive has its own timeout, announced to the client, and
/// an idle connection is closed when it runs out (not before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_keep_alive_is_announced_and_closed_after_its_own_timeout() {
    let (_up, proxy) =
        one_upstream("header_read_timeout = \"300ms\"\nkeepalive_timeout = \"2s\"").await;
    let (after, seen) =
        raw_exchange_timed(proxy.addr, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 10 * SECOND).await;
    assert!(seen.starts_with("HTTP/1.1 200"), "{seen}");
    assert!(seen.contains("keep-alive: timeout=2\r\n"), "{seen}");
    // Longer than the head deadline: idle time is not counted against the head.
    assert!(
        after >= Duration::from_millis(1500),
        "closed after {after:?}"
    );
    println!("idle keep-alive closed {after:?} after the request (keepalive_timeout 2s)");
}

/// A kept-alive HTTP/1 connection that idles gives back hyper's buffers (it is parked
/// 50 ms after its latest answer) and serves its next requests as before, also when
/// the start of the next head had already arrived: the part hyper had read is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_serves_its_next_requests_after_parking() {
    let (up, proxy) = one_upstream("keepalive_timeout = \"10s\"").await;
    let mut socket = TcpStream::connect(proxy.addr).await.unwrap();
    // The idle gaps are the scenario, well past the 50 ms after which a connection parks.
    let idle = Duration::from_millis(300);
    socket
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    for request in 1..=3 {
        let answer = tokio::time::timeout(PATIENCE, read_answer(&mut socket))
            .await
            .expect("no answer on the parked connection");
        assert!(
            answer.starts_with("HTTP/1.1 200"),
            "request {request}: {answer}"
        );
        assert!(
            answer.ends_with("\r\n\r\nok"),
            "request {request}: {answer}"
        );
        // The next head begins before the idle time and ends after it.
        socket.write_all(b"GET / HTTP/1.1\r\nHo").await.unwrap();
        tokio::time::sleep(idle).await;
        socket.write_all(b"st: x\r\n\r\n").await.unwrap();
    }
    let answer = tokio::time::timeout(PATIENCE, read_answer(&mut socket))
        .await
        .expect("no answer on the parked connection");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(up.count(), 4);
}

/// One answer with a `content-length` body, read off a kept-alive connection.
async fn read_answer(socket: &mut TcpStream) -> String {
    let mut seen = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        let n = tokio::io::AsyncReadExt::read(socket, &mut buf)
            .await
            .unwrap();
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&seen).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if seen.len() >= end + 4 + length {
                return text;
            }
        }
    }
}

/// Finding 2: an HTTP/2 connection with no stream open is sent a GOAWAY and closed
/// after `keepalive_timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_http2_connection_is_closed() {
    let (up, proxy) = one_upstream("keepalive_timeout = \"1s\"").await;
    let tcp = TcpStream::connect(proxy.addr).await.unwrap();
    let (mut client, connection) = h2::client::handshake(tcp).await.unwrap();
    let started = Instant::now();
    let connection = tokio::spawn(connection);
    let request = http::Request::get(format!("http://{}/", proxy.addr))
        .body(())
        .unwrap();
    let (response, _) = client.send_request(request, true).unwrap();
    assert_eq!(response.await.unwrap().status(), 200);
    let ended = tokio::time::timeout(10 * SECOND, connection).await;
    assert!(ended.is_ok(), "the idle h2 connection was open after 10 s");
    assert_eq!(up.count(), 1);
    println!(
        "idle h2 connection closed {:?} after its request (keepalive_timeout 1s)",
        started.elapsed()
    );
}

/// Finding 1: with 512 file descriptors, 600 silent connections to the admin port do
/// not starve the process: the proxy answers throughout and `/healthz` answers once
/// the silent ones time out; accept failures are logged once per burst.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_admin_connections_cannot_use_up_the_descriptors() {
    let (_up, config) = config_for_binary("admin_timeout = \"1s\"").await;
    let easeoff = Process::start_limited(&config, 512);
    let mut silent = Vec::new();
    for _ in 0..600 {
        match TcpStream::connect(easeoff.admin).await {
            Ok(socket) => silent.push(socket),
            Err(error) => panic!("connect {}: {error}", silent.len()),
        }
    }
    let url = easeoff.url("up");
    let answer = tokio::time::timeout(PATIENCE, get(&url))
        .await
        .expect("the proxy did not answer beside 600 silent admin connections");
    assert_eq!(answer.status, 200);
    let healthz = format!("http://{}/healthz", easeoff.admin);
    let started = Instant::now();
    wait_until(15 * SECOND, "/healthz to answer", || {
        let healthz = healthz.clone();
        async move {
            let request = client().get(healthz.parse().unwrap());
            matches!(
                tokio::time::timeout(SECOND, request).await,
                Ok(Ok(response)) if response.status() == 200
            )
        }
    })
    .await;
    let healthy_after = started.elapsed();
    let answer = tokio::time::timeout(PATIENCE, get(&url)).await.unwrap();
    assert_eq!(answer.status, 200);
    let failures = easeoff.logged("accept failed; backing off until it works again", "error");
    assert!(
        failures.len() <= 5,
        "{} accept-failure lines",
        failures.len()
    );
    println!(
        "nofile 512, 600 silent admin connections: proxy answered, /healthz answered after {healthy_after:?}, {} accept-failure log lines",
        failures.len()
    );
}

/// Ten thousand connections held, silent ones (first head not yet sent) and idle
/// keep-alive ones (one request answered): the resident memory they cost is printed,
/// the proxy serves beside them, and their deadlines close them all. Run with
/// `cargo test --test hostile_sockets ten_thousand -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "opens 10,000 sockets; run by hand (see README, development)"]
async fn ten_thousand_idle_connections() {
    const N: usize = 10_000;
    let (_up, config) = config_for_binary(
        "max_connections = 10100\nheader_read_timeout = \"10s\"\nkeepalive_timeout = \"10s\"",
    )
    .await;
    let easeoff = Process::start(&config);
    let pid = easeoff.child.id();
    let proxy = easeoff.listens["up"];
    let mut figures = Vec::new();
    for request in [false, true] {
        let before = rss_kib(pid);
        let mut held = hold(proxy, N, request).await;
        let holding = rss_kib(pid);
        let answer = tokio::time::timeout(PATIENCE, get(&easeoff.url("up")))
            .await
            .expect("no answer beside 10,000 idle connections");
        assert_eq!(answer.status, 200);
        let started = Instant::now();
        let mut closed = 0;
        for socket in &mut held {
            if closed_within(socket, 30 * SECOND).await.is_some() {
                closed += 1;
            }
        }
        assert_eq!(closed, N);
        let kind = if request { "idle keep-alive" } else { "silent" };
        let above = (holding.saturating_sub(before)) / 1024;
        println!(
            "{N} {kind} connections: RSS {before} KiB -> {holding} KiB (+{above} MiB, {} B each); proxy served; all closed {:?} later",
            (holding.saturating_sub(before)) * 1024 / N as u64,
            started.elapsed()
        );
        figures.push(above);
    }
    // Both are within the 64 MiB target (about 20 MiB each on a quiet machine). An idle
    // keep-alive connection gives back hyper's buffers once parked, but those that
    // served a request within the last 50 ms still hold them, so the bound leaves room
    // for a busy host (without parking: about 210 MiB).
    assert!(figures[0] <= 64, "silent: {} MiB above idle", figures[0]);
    assert!(
        figures[1] <= 64,
        "keep-alive: {} MiB above idle",
        figures[1]
    );
}

/// Opens `n` connections to `proxy`, 50 at a time; with `request`, each first gets an
/// answer to one request and stays open for the next.
async fn hold(proxy: std::net::SocketAddr, n: usize, request: bool) -> Vec<TcpStream> {
    let mut held = Vec::with_capacity(n);
    for _ in 0..n / 50 {
        let mut opening = Vec::new();
        for _ in 0..50 {
            opening.push(tokio::spawn(async move {
                let mut socket = TcpStream::connect(proxy).await.unwrap();
                if request {
                    socket
                        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                        .await
                        .unwrap();
                    let mut buf = [0u8; 512];
                    let n = tokio::io::AsyncReadExt::read(&mut socket, &mut buf)
                        .await
                        .unwrap();
                    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
                }
                socket
            }));
        }
        for task in opening {
            held.push(task.await.unwrap());
        }
    }
    held
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Out of descriptors on the proxy's listener: accepting backs off instead of
/// spinning, says so once per burst, and serves again once descriptors are free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepting_backs_off_when_out_of_descriptors() {
    let (_up, config) =
        config_for_binary("header_read_timeout = \"1s\"\nruntime = \"multi-thread\"").await;
    let easeoff = Process::start_limited(&config, 64);
    let proxy = easeoff.listens["up"];
    let mut silent = Vec::new();
    for _ in 0..100 {
        silent.push(TcpStream::connect(proxy).await.unwrap());
    }
    let failed = "accept failed; backing off until it works again";
    eventually("an accept failure", || {
        let easeoff = &easeoff;
        async move { !easeoff.logged(failed, "error").is_empty() }
    })
    .await;
    // The silent connections time out, descriptors come back, the backlog is served.
    let answer = tokio::time::timeout(15 * SECOND, get(&easeoff.url("up")))
        .await
        .expect("not served once descriptors were free again");
    assert_eq!(answer.status, 200);
    eventually("the end of the burst to be logged", || {
        let easeoff = &easeoff;
        async move { !easeoff.logged("accepting again", "listener").is_empty() }
    })
    .await;
    let failures = easeoff.logged(failed, "error");
    let again = easeoff.logged("accepting again", "listener");
    assert!(
        failures.len() <= 3,
        "{} accept-failure lines",
        failures.len()
    );
    println!(
        "nofile 64, 100 silent connections: {} accept-failure line(s) ({:?}), {} 'accepting again' line(s); a new client served",
        failures.len(),
        failures.first(),
        again.len(),
    );
    assert_eq!(again.len(), 1);
}
