//! The status page at `/` on the admin port and `easeoff status`: what a person sees of
//! a running easeoff, checked in a real browser (headless Chromium) and a terminal.

mod support;

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use support::*;

/// Two upstreams: "orders" throttles its first requests (so its interval rises),
/// "inventory" always answers.
async fn two_upstreams() -> (Proxy, TestUpstream, TestUpstream) {
    let orders = throttles_first(3, || respond(429, &[], "slow down")).await;
    let inventory = upstream(|_| async { ok() }).await;
    let proxy = proxy_config(&format!(
        "[server]\nadmin_listen = \"127.0.0.1:0\"\n\n\
         [[upstream]]\nname = \"up\"\nlisten = \"127.0.0.1:0\"\nurl = \"http://{}\"\n\
         [upstream.sleeper]\ninitial_interval = \"20ms\"\n\n\
         [[upstream]]\nname = \"inventory\"\nlisten = \"127.0.0.1:0\"\nurl = \"http://{}\"\n",
        orders.addr, inventory.addr
    ))
    .await;
    for _ in 0..4 {
        get(&format!("http://{}/", proxy.addr)).await;
    }
    (proxy, orders, inventory)
}

/// Two capped upstreams: "up" with `max_in_flight = 3` and two requests held out
/// (until `release` gets permits) over three seconds of history, and "llm" with a
/// learned cap and no traffic.
async fn capped_upstreams() -> (Proxy, TestUpstream, Arc<Semaphore>, Vec<JoinHandle<u16>>) {
    let release = Arc::new(Semaphore::new(0));
    let gate = Arc::clone(&release);
    let up = upstream(move |_| {
        let gate = Arc::clone(&gate);
        async move {
            if let Ok(permit) = gate.acquire().await {
                permit.forget();
            }
            ok()
        }
    })
    .await;
    let proxy = proxy_config(&format!(
        "[server]\nadmin_listen = \"127.0.0.1:0\"\n\n\
         [[upstream]]\nname = \"up\"\nlisten = \"127.0.0.1:0\"\nurl = \"http://{a}\"\n\
         max_in_flight = 3\n\n\
         [[upstream]]\nname = \"llm\"\nlisten = \"127.0.0.1:0\"\nurl = \"http://{a}\"\n\
         max_in_flight = \"learn\"\n\n\
         [[upstream]]\nname = \"models\"\nlisten = \"127.0.0.1:0\"\nurl = \"http://{a}\"\n\
         [upstream.lanes]\nby = [\"header:x-model\"]\nmax_in_flight = 2\n",
        a = up.addr
    ))
    .await;
    let mut held: Vec<JoinHandle<u16>> = (0..2)
        .map(|_| {
            let url = format!("http://{}/", proxy.addr);
            tokio::spawn(async move { get(&url).await.status.as_u16() })
        })
        .collect();
    // One request out under lane m1's own cap of upstream "models".
    let models = listen_of(proxy.admin, "models").await;
    let client = client();
    held.push(tokio::spawn(async move {
        let url = format!("http://{models}/");
        send(&client, "GET", &url, &[("x-model", "m1")], "")
            .await
            .status
            .as_u16()
    }));
    wait_until(
        Duration::from_secs(20),
        "two requests out under the cap, sampled three times",
        || async {
            let text = get(&format!("http://{}/status", proxy.admin)).await.text();
            let all: serde_json::Value = serde_json::from_str(&text).unwrap();
            let lane = &all["upstreams"][2]["lanes"];
            let m1 = lane
                .as_array()
                .and_then(|l| l.iter().find(|l| l["name"] == "m1"));
            let s = &all["upstreams"][0];
            let out = &s["history"]["out"];
            m1.is_some_and(|m1| m1["in_flight_cap"]["out"] == 1)
                && s["in_flight_cap"]["out"] == 2
                && out
                    .as_array()
                    .is_some_and(|v| v.len() >= 3 && v.contains(&2.into()))
        },
    )
    .await;
    (proxy, up, release, held)
}

/// Where upstream `name` listens, from `/status`.
async fn listen_of(admin: std::net::SocketAddr, name: &str) -> String {
    let text = get(&format!("http://{admin}/status")).await.text();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let upstreams = v["upstreams"].as_array().unwrap();
    let u = upstreams.iter().find(|u| u["name"] == name).unwrap();
    u["listen"].as_str().unwrap().to_string()
}

/// Waits until the admin server has sampled upstream "up" `n` times (one a second).
async fn history_samples(proxy: &Proxy, n: usize) {
    wait_until(
        Duration::from_secs(n as u64 + 10),
        "history samples",
        || async {
            status(proxy.admin).await["history"]["interval_ms"]
                .as_array()
                .is_some_and(|v| v.len() >= n)
        },
    )
    .await;
}

#[tokio::test]
async fn the_page_is_html_and_names_every_upstream() {
    let (proxy, _orders, _inventory) = two_upstreams().await;
    let page = get(&format!("http://{}/", proxy.admin)).await;
    assert_eq!(page.status, 200);
    assert_eq!(page.headers["content-type"], "text/html; charset=utf-8");
    let html = page.text();
    assert!(html.starts_with("<!doctype html>"), "{html}");
    for name in ["\"name\":\"up\"", "\"name\":\"inventory\""] {
        assert!(html.contains(name), "no {name} in\n{html}");
    }
    assert!(
        !html.contains("null/*initial status*/"),
        "status not filled in"
    );
    // No external assets: everything the page needs is in it.
    assert!(!html.contains("src=\"http"), "{html}");
}

#[tokio::test]
async fn status_lists_a_history_and_the_effective_config_per_upstream() {
    let (proxy, _orders, _inventory) = two_upstreams().await;
    history_samples(&proxy, 2).await;
    let s = status(proxy.admin).await;
    assert_eq!(s["lanes"], serde_json::json!([]));
    assert!(
        s["config"].as_str().unwrap().contains("name = \"up\""),
        "{s}"
    );
}

#[tokio::test]
async fn the_status_command_prints_a_table_of_a_running_easeoff() {
    let (proxy, _orders, _inventory) = two_upstreams().await;
    let admin = format!("http://{}", proxy.admin);
    let out = easeoff(&["status", "--admin", &admin]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines[0],
        format!("easeoff {} at {admin}", env!("CARGO_PKG_VERSION"))
    );
    assert!(
        lines[1].starts_with("upstream") && lines[1].contains("interval"),
        "{stdout}"
    );
    let up: Vec<&str> = lines[2].split_whitespace().collect();
    assert_eq!(up[0], "up", "{stdout}");
    assert!(
        up[1].parse::<f64>().unwrap() > 0.0,
        "a raised interval: {stdout}"
    );
    assert!(lines[3].starts_with("inventory "), "{stdout}");
}

#[tokio::test]
async fn the_status_command_shows_what_is_out_under_a_cap() {
    let (proxy, _up, release, held) = capped_upstreams().await;
    let out = easeoff(&["status", "--admin", &proxy.admin.to_string()]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines.contains(&"up: in flight 2 / cap 3 (fixed), 0 waiting"),
        "{stdout}"
    );
    assert!(
        lines.contains(&"llm: in flight 0 / cap 4 (learned), 0 waiting"),
        "{stdout}"
    );
    assert!(
        lines.contains(&"  lane m1: in flight 1 / cap 2 (fixed), 0 waiting"),
        "{stdout}"
    );
    release.add_permits(3);
    for request in held {
        assert_eq!(request.await.unwrap(), 200);
    }
}

#[tokio::test]
async fn the_status_command_says_when_easeoff_is_unreachable() {
    let nobody = refusing_port();
    let out = easeoff(&["status", "--admin", &nobody.to_string()]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with(&format!(
            "easeoff status: cannot reach the admin server at http://{nobody}: "
        )),
        "{stderr}"
    );
}

/// Debian's `chromium` loads the page against a running easeoff and dumps the DOM its
/// scripts built; a screenshot is kept under target/ for people (and CI artifacts).
/// CI sets EASEOFF_REQUIRE_CHROMIUM=1 so a missing browser fails there; elsewhere the
/// check is skipped with a note.
#[tokio::test]
async fn chromium_renders_every_upstream_with_its_interval_chart() {
    if no_chromium() {
        return;
    }
    let (proxy, _orders, _inventory) = two_upstreams().await;
    history_samples(&proxy, 3).await;
    let url = format!("http://{}/", proxy.admin);

    let dom = chromium(&["--dump-dom", &url]).await;
    let dom = String::from_utf8_lossy(&dom.stdout).into_owned();
    for name in ["up", "inventory"] {
        assert!(
            dom.contains(&format!(
                "<section class=\"card upstream\" data-name=\"{name}\">"
            )),
            "no card for {name} in\n{dom}"
        );
    }
    let interval = dom
        .split("<span class=\"interval headline\">")
        .nth(1)
        .and_then(|rest| rest.split(" ms<").next())
        .unwrap_or_else(|| panic!("no interval in\n{dom}"));
    let interval: f64 = interval.parse().unwrap_or_else(|_| panic!("{interval:?}"));
    assert!(interval > 0.0, "the throttled upstream's interval rose");
    assert!(
        dom.contains("<polyline class=\"interval-line\""),
        "no chart line drawn in\n{dom}"
    );

    let png = target_dir().join("status-page.png");
    let shot = format!("--screenshot={}", png.display());
    chromium(&[&shot, "--window-size=1200,900", &url]).await;
    let size = std::fs::metadata(&png).map(|m| m.len()).unwrap_or(0);
    assert!(
        size > 10_000,
        "a screenshot at {} ({size} bytes)",
        png.display()
    );
    eprintln!("status page screenshot: {}", png.display());
}

/// A capped upstream's card: what is out against the cap in the headline figures,
/// "learned" for a learned cap with its moves among the counts, and the cap and what
/// was out drawn beside the interval in the chart.
#[tokio::test]
async fn chromium_shows_the_in_flight_cap_and_charts_it() {
    if no_chromium() {
        return;
    }
    let (proxy, _up, release, held) = capped_upstreams().await;
    let url = format!("http://{}/", proxy.admin);
    let dom = chromium(&["--dump-dom", &url]).await;
    let dom = String::from_utf8_lossy(&dom.stdout).into_owned();
    let card = |name: &str| {
        dom.split(&format!(
            "<section class=\"card upstream\" data-name=\"{name}\">"
        ))
        .nth(1)
        .and_then(|rest| rest.split("<section").next())
        .unwrap_or_else(|| panic!("no card for {name} in\n{dom}"))
        .to_string()
    };
    let (up, llm) = (card("up"), card("llm"));
    assert!(
        up.contains(
            "<div class=\"value\"><span class=\"in-flight-cap\">2 / 3</span></div>\
             <div class=\"label\">in flight / cap</div>"
        ),
        "no \"2 / 3\" in flight against the cap in\n{up}"
    );
    for line in ["interval-line", "cap-line", "out-line"] {
        assert!(
            up.contains(&format!("<polyline class=\"{line}\"")),
            "no {line} in the chart of\n{up}"
        );
    }
    assert!(!up.contains("cap moves"), "a fixed cap never moves: {up}");
    assert!(
        llm.contains(
            "<span class=\"in-flight-cap\">0 / 4</span></div>\
             <div class=\"label\">in flight / cap · learned</div>"
        ),
        "no learned cap in\n{llm}"
    );
    assert!(llm.contains("<div class=\"kind\">cap moves</div>"), "{llm}");
    // A lane's own cap, in the lane's figures.
    let models = card("models");
    let m1 = models
        .split("<div class=\"lane\" data-name=\"m1\">")
        .nth(1)
        .unwrap_or_else(|| panic!("no lane m1 in\n{models}"));
    assert!(
        m1.contains(
            "<div class=\"value\"><span class=\"in-flight-cap\">1 / 2</span></div>\
             <div class=\"label\">in flight / cap</div>"
        ),
        "no \"1 / 2\" for lane m1 in\n{m1}"
    );

    let png = target_dir().join("status-page-cap.png");
    let shot = format!("--screenshot={}", png.display());
    chromium(&[&shot, "--window-size=1200,900", &url]).await;
    eprintln!("capped status page screenshot: {}", png.display());
    release.add_permits(3);
    for request in held {
        assert_eq!(request.await.unwrap(), 200);
    }
}

/// With `[upstream.fairness]`, the card lists each tenant: weight, share, mean wait
/// and sheds.
#[tokio::test]
async fn chromium_shows_each_tenants_share() {
    if no_chromium() {
        return;
    }
    let up = upstream(|_| async { ok() }).await;
    let fair = "[upstream.fairness]\nby = \"header:x-tenant\"\nweights = { batch = 3 }\n";
    let proxy = proxy(up.addr, fair).await;
    let url = format!("http://{}/", proxy.addr);
    for tenant in ["batch", "batch", "batch", "web"] {
        let answer = send(&client(), "GET", &url, &[("x-tenant", tenant)], "").await;
        assert_eq!(answer.status, 200);
    }
    let page = format!("http://{}/", proxy.admin);
    let dom = chromium(&["--dump-dom", &page]).await;
    let dom = String::from_utf8_lossy(&dom.stdout).into_owned();
    for row in [
        "<tr data-tenant=\"batch\"><td>batch</td><td>3</td><td>75 %</td>",
        "<tr data-tenant=\"web\"><td>web</td><td>1</td><td>25 %</td>",
        "<tr data-tenant=\"other\"><td>other</td><td>1</td><td>0 %</td>",
    ] {
        assert!(dom.contains(row), "no {row} in\n{dom}");
    }
}

/// `easeoff demo` killed when dropped.
struct Demo(std::process::Child);

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What a new operator sees first: during `easeoff demo` (the dynamodb preset paces
/// the demo's table in lane `demo:write`, the mock takes 50 requests a second) the
/// page's headline is the paced lane's ~20 ms, that lane's chart has a line, and
/// `easeoff_upstream_interval_seconds` is above 0.
#[tokio::test]
async fn during_the_demo_the_headline_is_the_interval_that_paces() {
    if no_chromium() {
        return;
    }
    let admin = dead_port().await;
    let svg = std::env::temp_dir().join(format!("easeoff-demo-{}.svg", std::process::id()));
    let _demo = Demo(
        Command::new(env!("CARGO_BIN_EXE_easeoff"))
            .args(["demo", "--duration", "120s", "--admin", &admin.to_string()])
            .arg("--out")
            .arg(&svg)
            .env_remove("EASEOFF_CONFIG")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("easeoff demo starts"),
    );
    wait_until(
        Duration::from_secs(20),
        "the demo's admin server",
        || async { tokio::net::TcpStream::connect(admin).await.is_ok() },
    )
    .await;
    // Paced, and the paced lane sampled a few times.
    wait_until(
        Duration::from_secs(30),
        "a paced lane with history",
        || async {
            let s = status(admin).await;
            let sampled = s["lanes"].as_array().is_some_and(|lanes| {
                lanes.iter().any(|l| {
                    l["name"] == "demo:write"
                        && l["history"]["interval_ms"].as_array().is_some_and(|v| {
                            v.iter().filter(|x| x.as_f64() > Some(0.0)).count() >= 3
                        })
                })
            });
            sampled && s["interval_ms"].as_f64() > Some(0.0)
        },
    )
    .await;
    let gauge = metric(
        admin,
        "easeoff_upstream_interval_seconds{upstream=\"dynamodb\"}",
    )
    .await;
    assert!(
        gauge > 0.0,
        "the headline metric is the paced lane's: {gauge}"
    );

    let url = format!("http://{admin}/");
    let dom = chromium(&["--dump-dom", &url]).await;
    let dom = String::from_utf8_lossy(&dom.stdout).into_owned();
    let headline = dom
        .split("<span class=\"interval headline\">")
        .nth(1)
        .and_then(|rest| rest.split(" ms<").next())
        .unwrap_or_else(|| panic!("no headline interval in\n{dom}"));
    let headline: f64 = headline.parse().unwrap_or_else(|_| panic!("{headline:?}"));
    assert!(
        (10.0..=40.0).contains(&headline),
        "the headline is ~20 ms: {headline} ms"
    );
    assert!(dom.contains("interval (lane demo:write)"), "{dom}");
    let lane = dom
        .split("<div class=\"lane\" data-name=\"demo:write\">")
        .nth(1)
        .and_then(|rest| rest.split("<div class=\"lane\"").next())
        .unwrap_or_else(|| panic!("no lane demo:write in\n{dom}"));
    assert!(
        lane.contains("<polyline class=\"interval-line\""),
        "no line in the lane's chart:\n{lane}"
    );

    let png = target_dir().join("status-page-demo.png");
    let shot = format!("--screenshot={}", png.display());
    chromium(&[&shot, "--window-size=1200,1400", &url]).await;
    let size = std::fs::metadata(&png).map(|m| m.len()).unwrap_or(0);
    assert!(
        size > 10_000,
        "a screenshot at {} ({size} bytes)",
        png.display()
    );
    eprintln!("demo status page screenshot: {}", png.display());
    let _ = std::fs::remove_file(&svg);
}

/// A DynamoDB throttle's `ThrottlingReasons` on the page, in words, as Chromium
/// renders it.
#[tokio::test]
async fn a_dynamodb_throttling_reason_reads_in_words_on_the_page() {
    if no_chromium() {
        return;
    }
    let body = r#"{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException","message":"x","ThrottlingReasons":[{"reason":"TableWriteKeyRangeThroughputExceeded","resource":"arn:aws:dynamodb:us-east-1:000000000000:table/orders"}]}"#;
    let up = upstream(move |_| async move {
        respond(400, &[("content-type", "application/x-amz-json-1.0")], body)
    })
    .await;
    let proxy = proxy_config(&format!(
        "[server]\nadmin_listen = \"127.0.0.1:0\"\n\n\
         [[upstream]]\nname = \"up\"\nlisten = \"127.0.0.1:0\"\nurl = \"http://{}\"\n\
         preset = \"dynamodb\"\n[upstream.retry]\nmax_attempts = 1\n",
        up.addr
    ))
    .await;
    let put = r#"{"TableName":"orders","Item":{"pk":{"S":"1"}}}"#;
    let answer = send(
        &client(),
        "POST",
        &format!("http://{}/", proxy.addr),
        &[
            ("x-amz-target", "DynamoDB_20120810.PutItem"),
            ("content-type", "application/x-amz-json-1.0"),
        ],
        bytes::Bytes::from_static(put.as_bytes()),
    )
    .await;
    assert_eq!(answer.status, 400);
    let words = "DynamoDB throttled writes of the table \
                 (arn:aws:dynamodb:us-east-1:000000000000:table/orders): \
                 above one partition&#39;s limit (a hot key) (TableWriteKeyRangeThroughputExceeded)";
    let dom = chromium(&["--dump-dom", &format!("http://{}/", proxy.admin)]).await;
    let dom = String::from_utf8_lossy(&dom.stdout).into_owned();
    let lane = dom
        .split("<div class=\"lane\" data-name=\"orders:write\">")
        .nth(1)
        .unwrap_or_else(|| panic!("no lane orders:write in\n{dom}"));
    let shown = lane
        .split("<p class=\"why\">")
        .nth(1)
        .unwrap_or_else(|| panic!("no reason shown in\n{lane}"));
    assert!(
        shown.starts_with(words) || shown.starts_with(&words.replace("&#39;", "'")),
        "{shown}"
    );
}

/// Whether Chromium is missing (the browser checks are then skipped with a note);
/// CI sets EASEOFF_REQUIRE_CHROMIUM=1 so a missing browser fails there.
fn no_chromium() -> bool {
    if Command::new("chromium").arg("--version").output().is_ok() {
        return false;
    }
    assert!(
        std::env::var_os("EASEOFF_REQUIRE_CHROMIUM").is_none(),
        "chromium is required (apt-get install chromium)"
    );
    eprintln!("note: chromium not installed; skipping a status page browser check");
    true
}

/// Runs headless Chromium with a fresh profile, off the async runtime so the server
/// under test keeps serving.
async fn chromium(args: &[&str]) -> Output {
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let profile =
        std::env::temp_dir().join(format!("easeoff-chromium-{}-{run}", std::process::id()));
    let _ = std::fs::remove_dir_all(&profile);
    let mut command = Command::new("chromium");
    command.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
        "--disable-sync",
        "--virtual-time-budget=5000",
    ]);
    command.arg(format!("--user-data-dir={}", profile.display()));
    command.args(args);
    let out = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .expect("chromium runs");
    let _ = std::fs::remove_dir_all(&profile);
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

async fn easeoff(args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_easeoff"));
    command.args(args).env_remove("EASEOFF_CONFIG");
    tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .expect("easeoff runs")
}

/// Cargo's target directory: the test binary runs from target/<profile>/deps.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    exe.ancestors()
        .nth(3)
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
}
