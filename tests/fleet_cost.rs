//! What the fleet costs Redis: simulated members (in-process [`Fleet`]s, each with
//! its own connection and sync task) syncing their lanes against one real
//! `redis-server`, measured from Redis's own `INFO` (commands processed, CPU). A
//! benchmark, not a check: ignored by default, run by `bench/fleet_cost.sh`.
//!
//! `EASEOFF_COST_BUSY` is the percentage of each member's lanes that carry demand
//! (a request always waiting); the others are idle, as most of a member's many
//! lanes are at any moment. The members start spread over one sync interval, as
//! sidecars started at different times sync at phases of their own
//! (`EASEOFF_COST_SPREAD=0`: all at once, in step). `EASEOFF_COST_REDIS_PREFIX` runs redis-server under a
//! command (`taskset -c 0`, `nice -n -10`), so that on a small shared machine the
//! members (pinned elsewhere by the caller) and other work do not keep Redis waiting
//! for a core and make its load come in bursts.
//!
//!   EASEOFF_COST_MEMBERS=100 EASEOFF_COST_LANES=50 EASEOFF_COST_SECONDS=10 \
//!     EASEOFF_COST_BUSY=10 cargo test --release --test fleet_cost -- --ignored --nocapture

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use easeoff::clock::Clock;
use easeoff::config::{FleetSettings, RedisNodes, RedisUrl};
use easeoff::fleet::Fleet;
use easeoff::metrics::Metrics;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One `INFO` field of the server at `port`, as a number.
fn info(conn: &mut redis::Connection, field: &str) -> f64 {
    let text: String = redis::cmd("INFO").arg("everything").query(conn).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(f64::NAN)
}

/// How often Redis ran each command and the microseconds it spent in them (`INFO
/// commandstats`; a script's own count includes the commands it ran).
fn commandstats(conn: &mut redis::Connection) -> BTreeMap<String, (f64, f64)> {
    let text: String = redis::cmd("INFO").arg("commandstats").query(conn).unwrap();
    let mut stats = BTreeMap::new();
    for line in text.lines() {
        let Some((name, fields)) = line
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        let field = |key: &str| {
            fields
                .split(',')
                .find_map(|f| f.strip_prefix(key)?.strip_prefix('='))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0)
        };
        stats.insert(name.to_string(), (field("calls"), field("usec")));
    }
    stats
}

/// Commands run between two [`commandstats`], per second and their mean time.
fn breakdown(
    before: &BTreeMap<String, (f64, f64)>,
    after: &BTreeMap<String, (f64, f64)>,
    elapsed: f64,
) -> String {
    let mut parts = Vec::new();
    for (name, (calls, usec)) in after {
        let (calls0, usec0) = before.get(name).copied().unwrap_or((0.0, 0.0));
        let n = calls - calls0;
        if n > 0.0 && name != "info" {
            parts.push(format!(
                "{name} {:.0}/s {:.1}us",
                n / elapsed,
                (usec - usec0) / n
            ));
        }
    }
    parts.join(", ")
}

/// The sum and count of one histogram in the metrics text.
fn histogram(text: &str, name: &str) -> (f64, f64) {
    let value = |suffix: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}_{suffix} ")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0)
    };
    (value("sum"), value("count"))
}

/// The members run on `EASEOFF_COST_THREADS` worker threads (default: one per CPU the
/// process may use), so that pinned to one CPU they do not contend with themselves.
#[test]
#[ignore = "a benchmark: bench/fleet_cost.sh"]
fn redis_cost_per_member_lane_sync() {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(usize::try_from(env("EASEOFF_COST_THREADS", threads as u64)).unwrap())
        .enable_all()
        .build()
        .unwrap()
        .block_on(cost());
}

async fn cost() {
    let members = env("EASEOFF_COST_MEMBERS", 10);
    let lanes = env("EASEOFF_COST_LANES", 50);
    let seconds = env("EASEOFF_COST_SECONDS", 10);
    let sync_ms = env("EASEOFF_COST_SYNC_MS", 250);
    let busy = env("EASEOFF_COST_BUSY", 100).min(100);
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    // The words of `EASEOFF_COST_REDIS_PREFIX` (say `nice -n -10 taskset -c 0`) run
    // redis-server.
    let prefix = std::env::var("EASEOFF_COST_REDIS_PREFIX").unwrap_or_default();
    let mut words: Vec<&str> = prefix.split_whitespace().collect();
    words.push("redis-server");
    let mut server = Command::new(words[0]);
    server.args(&words[1..]);
    let mut server = server
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--maxclients", "20000"])
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server starts");
    let url = format!("redis://127.0.0.1:{port}/0");
    let client = redis::Client::open(url.as_str()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut conn = loop {
        if let Ok(c) = client.get_connection() {
            break c;
        }
        assert!(Instant::now() < deadline, "redis-server did not answer");
        std::thread::sleep(Duration::from_millis(20));
    };
    let settings = FleetSettings {
        redis: RedisNodes(vec![RedisUrl::parse(&url).unwrap()]),
        group: "cost".to_string(),
        sync_interval: Duration::from_millis(sync_ms),
        member_ttl: Duration::from_millis(sync_ms * 20),
        ..FleetSettings::default()
    };
    let metrics = Metrics::new().unwrap();
    let mut fleets = Vec::new();
    let mut links = Vec::new();
    // Sidecars that started at different times sync at phases of their own, and Redis
    // then takes their calls one wake-up each; started together (`EASEOFF_COST_SPREAD=0`)
    // they sync in step, and Redis answers many calls a wake-up, for less CPU.
    let spread = env("EASEOFF_COST_SPREAD", 1) == 1;
    let begun = tokio::time::Instant::now();
    for member in 0..members {
        if spread {
            let phase = Duration::from_millis(sync_ms) * u32::try_from(member).unwrap();
            tokio::time::sleep_until(begun + phase / u32::try_from(members).unwrap()).await;
        }
        let fleet = Fleet::start(settings.clone(), &metrics, Clock::Tokio);
        for lane in 0..lanes {
            let link = fleet.join("up", &format!("t{lane}"), false, Box::new(|_| {}));
            link.learned(Duration::from_millis(10), 1, None);
            // Spread evenly: lane `l` is busy when the busy count up to it grows.
            if (lane + 1) * busy / 100 > lane * busy / 100 {
                link.waiting(1);
            }
            links.push(link);
        }
        fleets.push(fleet);
    }
    // A few syncs to connect and load the script, then the measured window.
    tokio::time::sleep(Duration::from_secs(env("EASEOFF_COST_WARMUP", 3))).await;
    let text = metrics.render().unwrap();
    let (sum0, count0) = histogram(&text, "easeoff_fleet_sync_seconds");
    let cmds0 = info(&mut conn, "total_commands_processed");
    // The script reads each lane it syncs with one HMGET: lanes synced.
    let stats0 = commandstats(&mut conn);
    let cpu0 = info(&mut conn, "used_cpu_sys") + info(&mut conn, "used_cpu_user");
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let elapsed = started.elapsed().as_secs_f64();
    let text = metrics.render().unwrap();
    let (sum1, count1) = histogram(&text, "easeoff_fleet_sync_seconds");
    let cmds = info(&mut conn, "total_commands_processed") - cmds0;
    let stats = commandstats(&mut conn);
    let calls =
        |name: &str| stats.get(name).map_or(0.0, |s| s.0) - stats0.get(name).map_or(0.0, |s| s.0);
    let synced = calls("hmget");
    let clients = info(&mut conn, "connected_clients");
    let cpu = info(&mut conn, "used_cpu_sys") + info(&mut conn, "used_cpu_user") - cpu0;
    let syncs = count1 - count0;
    let lane_syncs = syncs * lanes as f64;
    let errors = easeoff_errors(&text);
    println!(
        "members {members} lanes {lanes} busy {busy}% sync {sync_ms}ms: {:.0} commands/s, redis cpu {:.1} % of a core, \
         {:.2} us redis cpu per member-lane-sync, {:.2} commands per member-lane-sync, \
         syncs {:.0}/s (expected {:.0}/s), mean sync {:.1} ms, sync errors {errors}, \
         lanes synced {:.0}/s, {:.2} us redis cpu per lane synced, script calls {:.0}/s, \
         clients {clients}; {}",
        cmds / elapsed,
        100.0 * cpu / elapsed,
        1e6 * cpu / lane_syncs,
        cmds / lane_syncs,
        syncs / elapsed,
        members as f64 * 1000.0 / sync_ms as f64,
        1000.0 * (sum1 - sum0) / syncs,
        synced / elapsed,
        1e6 * cpu / synced,
        calls("evalsha") / elapsed,
        breakdown(&stats0, &stats, elapsed),
    );
    drop(links);
    drop(fleets);
    let _ = server.kill();
    let _ = server.wait();
}

fn easeoff_errors(text: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix("easeoff_fleet_sync_errors_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}
