//! The fleet against real `redis-server` processes on loopback ports: several
//! [`Fleet`]s in this process act as members. One raise per fleet-wide burst, fair
//! shares, learned `max_in_flight` caps split by demand, Redis killed and restarted
//! empty, members that die or leave, and the number of commands a sync costs. Skipped with a notice when `redis-server` is not
//! installed, unless `EASEOFF_REQUIRE_REDIS=1` (CI).

mod support;

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use easeoff::clock::Clock;
use easeoff::config::{FleetSettings, RedisNodes, RedisUrl};
use easeoff::fleet::{Decision, Fleet, LaneLink};
use easeoff::metrics::Metrics;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use tokio::task::JoinSet;

/// The default's: a sync's round trip must come within it, and a loaded host's took
/// longer than 50 ms, timing rounds out (two in a row put the lanes on their own).
const SYNC: Duration = Duration::from_millis(250);
const MEMBER_TTL: Duration = Duration::from_secs(5);
/// Every wait for a condition gives up after this.
const PATIENCE: Duration = Duration::from_secs(10);

/// A `redis-server` on a loopback port, killed on drop, with its TLS files' directory.
struct Redis {
    port: u16,
    child: Child,
    dir: Option<PathBuf>,
}

impl Redis {
    /// Starts one on a free port; `None` (after a notice) if redis-server is missing
    /// and not required.
    fn start() -> Option<Redis> {
        installed().then(|| Redis::on(free_port()))
    }

    /// Starts one that also takes TLS on another port, with a server certificate for
    /// 127.0.0.1 from a fresh CA; returns it, the TLS port and the CA's PEM file.
    fn start_tls() -> Option<(Redis, u16, PathBuf)> {
        if !installed() {
            return None;
        }
        let dir = std::env::temp_dir().join(format!(
            "easeoff-fleet-tls-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "easeoff fleet test CA");
        let ca_key = KeyPair::generate().unwrap();
        let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
        let issuer = Issuer::new(ca, ca_key);
        let key = KeyPair::generate().unwrap();
        let leaf = CertificateParams::new(vec!["127.0.0.1".to_string()])
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        let write = |name: &str, text: &str| {
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            path.display().to_string()
        };
        let ca_file = write("ca.pem", &ca_pem);
        let tls_port = free_port();
        let args = [
            "--tls-port".to_string(),
            tls_port.to_string(),
            "--tls-cert-file".to_string(),
            write("server.pem", &leaf.pem()),
            "--tls-key-file".to_string(),
            write("server.key", &key.serialize_pem()),
            "--tls-ca-cert-file".to_string(),
            ca_file.clone(),
            "--tls-auth-clients".to_string(),
            "no".to_string(),
        ];
        let mut redis = Redis::with(free_port(), &args);
        redis.dir = Some(dir);
        Some((redis, tls_port, PathBuf::from(ca_file)))
    }

    /// Starts one on `port`, empty, and waits until it answers.
    fn on(port: u16) -> Redis {
        Redis::with(port, &[])
    }

    /// Starts one on `port` with `extra` arguments, and waits until it answers there.
    fn with(port: u16, extra: &[String]) -> Redis {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        let redis = Redis {
            port,
            child,
            dir: None,
        };
        let deadline = Instant::now() + PATIENCE;
        while redis.connection().is_none() {
            assert!(Instant::now() < deadline, "redis-server did not answer");
            std::thread::sleep(Duration::from_millis(10));
        }
        redis
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    fn connection(&self) -> Option<redis::Connection> {
        let mut c = redis::Client::open(self.url())
            .ok()?
            .get_connection()
            .ok()?;
        redis::cmd("PING").query::<String>(&mut c).ok()?;
        Some(c)
    }

    fn hash(&self, key: &str) -> Vec<(String, String)> {
        let mut c = self.connection().expect("redis answers");
        redis::cmd("HGETALL")
            .arg(key)
            .query(&mut c)
            .expect("HGETALL")
    }

    fn field(&self, key: &str, field: &str) -> Option<String> {
        self.hash(key)
            .into_iter()
            .find(|(f, _)| f == field)
            .map(|(_, v)| v)
    }

    /// SIGKILL, then waits for the process to be gone.
    fn kill(mut self) -> u16 {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.port
    }
}

/// Whether redis-server can run; when it cannot, says so, and fails if
/// `EASEOFF_REQUIRE_REDIS=1`.
fn installed() -> bool {
    let probe = Command::new("redis-server").arg("--version").output();
    if probe.is_ok() {
        return true;
    }
    assert!(
        std::env::var("EASEOFF_REQUIRE_REDIS").as_deref() != Ok("1"),
        "redis-server is not installed and EASEOFF_REQUIRE_REDIS=1"
    );
    eprintln!("skipped: redis-server is not installed (apt-get install redis-server)");
    false
}

/// A loopback port nothing listens on now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn settings(url: &str) -> FleetSettings {
    FleetSettings {
        redis: RedisNodes(vec![RedisUrl::parse(url).expect("a valid url")]),
        group: "test".to_string(),
        sync_interval: SYNC,
        member_ttl: MEMBER_TTL,
        ..FleetSettings::default()
    }
}

/// One member: its fleet, one lane's link and every decision it got.
struct Member {
    fleet: Fleet,
    metrics: Metrics,
    link: Arc<LaneLink>,
    decisions: Arc<Mutex<Vec<Decision>>>,
    /// `easeoff_fleet_sync_errors_total` when each decision to go on alone was taken.
    errors_going_alone: Arc<Mutex<Vec<f64>>>,
}

impl Member {
    fn join(url: &str, lane: &str) -> Member {
        Member::join_with(settings(url), lane)
    }

    fn join_with(settings: FleetSettings, lane: &str) -> Member {
        let metrics = Metrics::new().expect("metrics");
        let fleet = Fleet::start(settings, &metrics, Clock::Tokio);
        let decisions = Arc::new(Mutex::new(Vec::new()));
        let errors_going_alone = Arc::new(Mutex::new(Vec::new()));
        let (seen, errors, counted) = (
            Arc::clone(&decisions),
            Arc::clone(&errors_going_alone),
            metrics.clone(),
        );
        let link = Arc::new(fleet.join(
            "orders",
            lane,
            true,
            Box::new(move |d| {
                if d.local {
                    let text = counted.render().expect("metrics render");
                    let sample = support::sample_value(&text, SYNC_ERRORS).unwrap_or(-1.0);
                    errors.lock().unwrap().push(sample);
                }
                seen.lock().unwrap().push(*d);
            }),
        ));
        Member {
            fleet,
            metrics,
            link,
            decisions,
            errors_going_alone,
        }
    }

    fn last(&self) -> Option<Decision> {
        self.decisions.lock().unwrap().last().copied()
    }

    /// Dispatches at the rate the member's last decision gives it: an arrival that
    /// leaves the queue (kept at its length) at once.
    fn dispatch_at_share(&self) -> tokio::task::JoinHandle<()> {
        let link = Arc::clone(&self.link);
        let decisions = Arc::clone(&self.decisions);
        tokio::spawn(async move {
            let (mut last, mut owed) = (Instant::now(), 0.0);
            loop {
                tokio::time::sleep(ms(5)).await;
                let now = Instant::now();
                let given = decisions
                    .lock()
                    .unwrap()
                    .last()
                    .map_or(0.0, |d| d.share * d.rate);
                owed += given * (now - last).as_secs_f64();
                last = now;
                while owed >= 1.0 {
                    link.arrived();
                    owed -= 1.0;
                }
            }
        })
    }

    /// Arrivals far faster than the fleet rate, each leaving the queue at once: the
    /// member dispatches enough that its demand claims all it asks.
    fn pump(&self) -> tokio::task::JoinHandle<()> {
        let link = Arc::clone(&self.link);
        tokio::spawn(async move {
            loop {
                for _ in 0..100 {
                    link.arrived();
                }
                tokio::time::sleep(ms(5)).await;
            }
        })
    }

    fn count(&self) -> usize {
        self.decisions.lock().unwrap().len()
    }

    fn connected(&self) -> f64 {
        self.sample("easeoff_fleet_connected")
    }

    /// A sample from this member's metrics, -1 when absent.
    fn sample(&self, name: &str) -> f64 {
        let text = self.metrics.render().expect("metrics render");
        support::sample_value(&text, name).unwrap_or(-1.0)
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Polls `condition` until it holds; panics with `what` after [`PATIENCE`].
async fn wait_for(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(ms(5)).await;
    }
}

const KEY: &str = "easeoff:{test:orders:default}:state";
const SYNC_ERRORS: &str = "easeoff_fleet_sync_errors_total";

/// Redis's clock in milliseconds, the clock entries are written by.
fn redis_ms(redis: &Redis) -> u64 {
    let mut c = redis.connection().expect("redis answers");
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut c).expect("TIME");
    secs * 1000 + micros / 1000
}

/// When an entry was last written, by Redis's clock (its first field, ms).
fn written((_, entry): &(String, String)) -> u64 {
    entry
        .split(' ')
        .next()
        .and_then(|ms| ms.parse().ok())
        .unwrap_or_else(|| panic!("an entry without its time: {entry}"))
}

/// The members' entries (`m:` fields) in a lane's hash.
fn entries(redis: &Redis, key: &str) -> Vec<(String, String)> {
    let mut fields = redis.hash(key);
    fields.retain(|(f, _)| f.starts_with("m:"));
    fields
}

/// A lane that raises all the time (every attempt throttled, each round trip a
/// raise) sends no more than one round between two ticks: Redis sees at most twice
/// the rounds it would without raises. (That a raise does go between ticks is
/// [`a_raise_goes_between_ticks_and_a_storm_of_them_gets_one_round`]'s, counted
/// where a loaded host cannot slow it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raise_storm_costs_at_most_one_round_between_ticks() {
    let Some(redis) = Redis::start() else { return };
    let member = Member::join(&redis.url(), "default");
    member.link.learned(ms(10), 1, None);
    wait_for("the first sync", || member.count() > 0).await;
    let link = Arc::clone(&member.link);
    let storm = tokio::spawn(async move {
        for epoch in 1.. {
            link.learned(ms(10), epoch + 1, Some(epoch));
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
    });
    let (before, started) = (member.count(), Instant::now());
    tokio::time::sleep(SYNC * 12).await;
    let rounds = (member.count() - before) as f64;
    let ticks = started.elapsed().as_secs_f64() / SYNC.as_secs_f64();
    storm.abort();
    eprintln!("{rounds} rounds in {ticks:.1} ticks");
    assert!(
        rounds <= 2.0 * ticks + 3.0,
        "{rounds} rounds in {ticks:.1} ticks"
    );
    // The first raise landed (the later ones, from epochs the fleet never had, do not).
    let epoch: u64 = redis.field(KEY, "e").unwrap().parse().unwrap();
    assert_eq!(epoch, 2);
}

/// With ticks an hour apart, every round after the first tick's is one a raise
/// asked for: a raise gets its round at once, and a storm of raises that one only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raise_goes_between_ticks_and_a_storm_of_them_gets_one_round() {
    let Some(redis) = Redis::start() else { return };
    let hour = Duration::from_secs(3600);
    let member = Member::join_with(
        FleetSettings {
            sync_interval: hour,
            member_ttl: hour * 2,
            ..settings(&redis.url())
        },
        "default",
    );
    member.link.learned(ms(10), 1, None);
    wait_for("the first tick's round", || member.count() > 0).await;
    assert_eq!(member.count(), 1);
    let link = Arc::clone(&member.link);
    let raises = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counted = Arc::clone(&raises);
    let storm = tokio::spawn(async move {
        for epoch in 1.. {
            link.learned(ms(10), epoch + 1, Some(epoch));
            counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
    });
    wait_for("the first raise's round", || member.count() > 1).await;
    // A hundred raises more, each of which would have had a round of its own.
    let after = raises.load(std::sync::atomic::Ordering::Relaxed);
    wait_for("a hundred more raises", || {
        raises.load(std::sync::atomic::Ordering::Relaxed) >= after + 100
    })
    .await;
    storm.abort();
    assert_eq!(member.count(), 2, "one round between two ticks");
    let epoch: u64 = redis.field(KEY, "e").unwrap().parse().unwrap();
    assert_eq!(epoch, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_members_raising_for_one_burst_raise_the_fleet_once() {
    let Some(redis) = Redis::start() else { return };
    let members: Vec<Member> = (0..4)
        .map(|_| Member::join(&redis.url(), "default"))
        .collect();
    members[0].link.learned(ms(10), 1, None);
    wait_for("every member to see the fleet's interval", || {
        members.iter().all(|m| {
            m.last()
                .is_some_and(|d| d.interval == ms(10) && d.epoch == 1)
        })
    })
    .await;

    // One burst: every member's controller raised from epoch 1.
    for (m, interval) in members.iter().zip([15, 14, 16, 15]) {
        m.link.learned(ms(interval), 2, Some(1));
    }
    // A lane's summary counts a member that joined since it was written at its next
    // rewrite (within two syncs), so the count may lag the raise.
    wait_for("every member to adopt one raise and count four", || {
        members
            .iter()
            .all(|m| m.last().is_some_and(|d| d.epoch == 2 && d.members == 4))
    })
    .await;
    let interval = members[0].last().unwrap().interval;
    assert!([ms(14), ms(15), ms(16)].contains(&interval), "{interval:?}");
    assert_eq!(redis.field(KEY, "e").as_deref(), Some("2"));
    for m in &members {
        assert_eq!(m.last().unwrap().interval, interval);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shares_converge_for_equal_and_unequal_demand() {
    let Some(redis) = Redis::start() else { return };
    let members: Vec<Member> = (0..4)
        .map(|_| Member::join(&redis.url(), "default"))
        .collect();
    // 100/s for the fleet; every member has a long queue and has dispatched nothing
    // yet: none claims anything, and the rate is spread evenly.
    members[0].link.learned(ms(10), 1, None);
    for m in &members {
        m.link.waiting(1000);
    }
    wait_for("equal shares", || {
        members.iter().all(|m| {
            m.last()
                .is_some_and(|d| d.members == 4 && (d.share - 0.25).abs() < 1e-9)
        })
    })
    .await;
    assert_eq!(members[0].last().unwrap().member_interval(), ms(40));

    // Two light members want 5/s each; the two heavy ones split the remaining 90/s.
    // The heavy ones dispatch (what arrives leaves the queue) and claim all they ask;
    // the light ones' queues fell by 995, a dispatch rate that takes seconds to fade
    // below the 2.5/s their 5/s needs.
    let pumps: Vec<_> = members[2..].iter().map(|m| m.pump()).collect();
    for m in &members[..2] {
        m.link.waiting(5);
    }
    // The light ones: 5/s of 100/s, but never below half an equal share (1/8). Each
    // member decides at its own sync, from a summary up to two syncs old, so the
    // heavy ones may see the split before the light ones do: both are waited for.
    let heavy = |d: Decision| (d.share - 0.45).abs() < 1e-9;
    let light = |d: Decision| (d.share - 0.125).abs() < 1e-9;
    wait_for("unequal shares", || {
        members[2..].iter().all(|m| m.last().is_some_and(heavy))
            && members[..2].iter().all(|m| m.last().is_some_and(light))
    })
    .await;
    for pump in pumps {
        pump.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_lanes_go_local_and_restarted_empty_the_state_is_rebuilt() {
    let Some(redis) = Redis::start() else { return };
    let url = redis.url();
    let members = two_members(&url).await;

    let errors: Vec<f64> = members.iter().map(|m| m.sample(SYNC_ERRORS)).collect();
    let killed = Instant::now();
    let port = redis.kill();
    wait_for("every lane on its own", || {
        members.iter().all(|m| m.last().is_some_and(|d| d.local))
    })
    .await;
    eprintln!("lanes on their own {:?} after the kill", killed.elapsed());
    // After two failed syncs in a row (so within 3 × sync, the second timing out at
    // the latest), counted in syncs, which a loaded host does not change.
    for (m, before) in members.iter().zip(errors) {
        let going_alone = m.errors_going_alone.lock().unwrap().clone();
        assert_eq!(going_alone, [before + 2.0], "sync errors when going alone");
    }
    for m in &members {
        let d = m.last().unwrap();
        // From the last allocation: half of 100/s, alone.
        assert_eq!((d.interval, d.share, d.members), (ms(20), 1.0, 1));
        assert_eq!(m.connected(), 0.0);
    }
    let during = members[0].count();
    tokio::time::sleep(SYNC * 4).await;
    assert_eq!(
        members[0].count(),
        during,
        "no decisions while Redis is down"
    );

    let restarted = Redis::on(port);
    back_and_rebuilt(&members, &restarted).await;
}

/// Two members sharing 100/s (10 ms, epoch 3), each with a long queue, once both are
/// in the fleet.
async fn two_members(url: &str) -> Vec<Member> {
    let members: Vec<Member> = (0..2).map(|_| Member::join(url, "default")).collect();
    members[0].link.learned(ms(10), 3, None);
    for m in &members {
        m.link.waiting(1000);
    }
    // Equal shares too: the first shared decisions may split the rate unevenly (a
    // clean-clone CI run took the fleet away while one member held a quarter), and a
    // test that takes the fleet away then starts from that split.
    wait_for("both members in the fleet, half each", || {
        members.iter().all(|m| {
            m.connected() == 1.0
                && m.last()
                    .is_some_and(|d| d.members == 2 && !d.local && (d.share - 0.5).abs() < 1e-9)
        })
    })
    .await;
    members
}

/// Waits for [`two_members`] to be back in the fleet after `restarted` came up empty.
async fn back_and_rebuilt(members: &[Member], restarted: &Redis) {
    wait_for("the fleet back, its state rebuilt", || {
        members
            .iter()
            .all(|m| m.connected() == 1.0 && m.last().is_some_and(|d| !d.local && d.members == 2))
    })
    .await;
    // Rebuilt from the members' proposals, scaled back to the fleet's interval.
    assert_eq!(restarted.field(KEY, "i").as_deref(), Some("10000"));
    assert_eq!(restarted.field(KEY, "e").as_deref(), Some("3"));
    assert_eq!(members[1].last().unwrap().interval, ms(10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_dies_is_forgotten_after_member_ttl_and_one_that_leaves_at_once() {
    let Some(redis) = Redis::start() else { return };
    // A leave waits one sync for Redis, and a loaded host may take more than 50 ms;
    // the TTL is long enough for its bounds to hold on one too.
    let (sync, ttl) = (ms(500), Duration::from_secs(5));
    let join = || {
        let settings = FleetSettings {
            sync_interval: sync,
            member_ttl: ttl,
            ..settings(&redis.url())
        };
        Member::join_with(settings, "default")
    };
    let stays = join();
    stays.link.learned(ms(10), 1, None);
    // Requests waiting: both sync every round, so one dies right after its last sync
    // (an idle lane's last sync may be up to half the member TTL before), and the
    // other sees it forgotten at its next.
    stays.link.waiting(1);
    let dies = join();
    dies.link.waiting(1);
    let leaves = join();
    wait_for("three members", || {
        stays.last().is_some_and(|d| d.members == 3)
    })
    .await;

    let left = Instant::now();
    leaves.fleet.leave().await;
    // At once: its entry went with the leave, where an expiry would take the TTL.
    assert_eq!(
        entries(&redis, KEY).len(),
        2,
        "the member that left is still in the hash"
    );
    wait_for("the member that left to be gone", || {
        stays.last().is_some_and(|d| d.members == 2)
    })
    .await;
    assert!(left.elapsed() < ttl, "{:?}", left.elapsed());

    // Dropped without leaving, as a SIGKILLed process would. Both entries left are
    // written every round; the older bounds the dead one's last write from below, which
    // a loaded host may have made more than a sync before the drop.
    let oldest = entries(&redis, KEY).iter().map(written).min().unwrap();
    let died = Instant::now();
    drop(dies);
    wait_for("the dead member to be forgotten", || {
        stays.last().is_some_and(|d| d.members == 1)
    })
    .await;
    // Not before its TTL ran out, by the clock the entries are kept by.
    let lived = Duration::from_millis(redis_ms(&redis) - oldest);
    assert!(lived >= ttl, "forgotten {lived:?} after its last write");
    assert!(died.elapsed() < ttl * 2, "{:?}", died.elapsed());
    assert_eq!(entries(&redis, KEY).len(), 1);
    let mut c = redis.connection().unwrap();
    let ttl: i64 = redis::cmd("PTTL").arg(KEY).query(&mut c).unwrap();
    assert!(ttl > 0, "every key has a TTL, got {ttl}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sync_costs_at_most_two_commands_per_member_per_lane() {
    let Some(redis) = Redis::start() else { return };
    let url = redis.url();
    let lanes = ["a:write", "a:read", "b:write"];
    let mut members = Vec::new();
    let mut links = Vec::new();
    // Idle lanes sync to refresh their entries, every three eighths to half of the
    // TTL: a short one makes the syncs counted here come quickly.
    let quick = || FleetSettings {
        member_ttl: Duration::from_secs(1),
        ..settings(&url)
    };
    for _ in 0..3 {
        let m = Member::join_with(quick(), lanes[0]);
        let seen = Arc::clone(&m.decisions);
        for lane in &lanes[1..] {
            let seen = Arc::clone(&seen);
            let link = m.fleet.join(
                "orders",
                lane,
                true,
                Box::new(move |d| seen.lock().unwrap().push(*d)),
            );
            link.learned(ms(10), 1, None);
            links.push(link);
        }
        m.link.learned(ms(10), 1, None);
        members.push(m);
    }
    wait_for("every lane synced", || {
        members.iter().all(|m| m.count() >= lanes.len())
    })
    .await;
    let mut c = redis.connection().unwrap();
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query::<()>(&mut c)
        .unwrap();
    let before: usize = members.iter().map(Member::count).sum();
    // Twenty syncs' worth of decisions, counted per member and lane (about 10 s).
    support::wait_until(PATIENCE * 3, "twenty syncs", || async {
        members.iter().map(Member::count).sum::<usize>() >= before + 20 * 9
    })
    .await;
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut c)
        .unwrap();
    let decisions = (members.iter().map(Member::count).sum::<usize>() - before) as f64;
    // Commands the script runs inside are counted too; only what members send counts.
    let inside = [
        "time",
        "hgetall",
        "hset",
        "hdel",
        "pexpire",
        "info",
        "config|resetstat",
    ];
    let sent: f64 = stats
        .lines()
        .filter_map(|l| l.strip_prefix("cmdstat_"))
        .filter_map(|l| {
            let (name, rest) = l.split_once(':')?;
            let calls = rest.strip_prefix("calls=")?.split(',').next()?;
            (!inside.contains(&name)).then(|| calls.parse::<f64>().ok())?
        })
        .sum();
    let per = sent / decisions;
    eprintln!("commands per member per lane per sync: {per:.3} ({sent} / {decisions})\n{stats}");
    assert!(per <= 2.0, "{per}");
    assert!(per >= 0.5, "the counts must cover the syncs: {per}");
    drop(links);
}

/// `/status` of an in-process sidecar: the fleet's part and upstream "up"'s.
async fn sidecar(admin: std::net::SocketAddr) -> (serde_json::Value, serde_json::Value) {
    let text = support::get(&format!("http://{admin}/status")).await.text();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    (v["fleet"].clone(), v["upstreams"][0].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttle_one_sidecar_sees_paces_the_other_and_a_stopped_one_leaves_at_once() {
    let Some(redis) = Redis::start() else { return };
    let up = support::throttles_first(1, || support::respond(429, &[], "")).await;
    // A leave waits one sync for Redis: 500 ms, which a loaded host keeps to.
    let config = format!(
        "[fleet]\nredis = \"{}\"\ngroup = \"e2e\"\nsync_interval = \"500ms\"\nmember_ttl = \"5s\"\n\n\
         [server]\nadmin_listen = \"127.0.0.1:0\"\nshutdown_grace = \"1s\"\n\n\
         [[upstream]]\nname = \"up\"\nlisten = \"127.0.0.1:0\"\nurl = \"http://{}\"\n\
         [upstream.retry]\nmax_attempts = 1\n",
        redis.url(),
        up.addr
    );
    let a = support::proxy_config(&config).await;
    let b = support::proxy_config(&config).await;
    support::wait_until(PATIENCE, "two members, connected", || async {
        let (fleet, up) = sidecar(b.admin).await;
        fleet["connected"] == true && up["fleet"]["members"] == 2
    })
    .await;

    assert_eq!(sidecar(b.admin).await.0["settings_differ"], false);

    // The one throttle goes through A; B, which saw none, paces at its share.
    let answer = support::get(&format!("http://{}/", a.addr)).await;
    assert_eq!(answer.status, 429);
    support::wait_until(PATIENCE, "B to take the fleet's raise", || async {
        sidecar(b.admin).await.1["fleet"]["epoch"] == 1
    })
    .await;
    let (_, status) = sidecar(b.admin).await;
    let fleet_ms = status["fleet"]["interval_ms"].as_f64().unwrap();
    let share = status["fleet"]["share"].as_f64().unwrap();
    assert!(fleet_ms > 0.0, "{status}");
    let paced_ms = status["interval_ms"].as_f64().unwrap();
    assert!(
        (paced_ms - fleet_ms / share).abs() < 1e-3,
        "B paces at the fleet interval over its share: {status}"
    );
    assert_eq!(up.count(), 1, "B sent nothing");

    // Stopped (as on SIGTERM), A deletes its entry, where an expiry would take
    // member_ttl: B's is the one left at once, and B is alone at its next sync.
    a.stop().await.unwrap();
    let left = entries(&redis, "easeoff:{e2e:up:default}:state");
    assert_eq!(left.len(), 1, "A's entry outlived its leave: {left:?}");
    support::wait_until(PATIENCE, "A to leave", || async {
        sidecar(b.admin).await.1["fleet"]["members"] == 1
    })
    .await;
}

/// A lane a request creates in a connected fleet starts cold at once: its requests
/// wait for the fleet's first answers (a member the summary does not count yet holds
/// them) instead of going unpaced until then, so applications that start together
/// on every pod do not burst into the table. Twenty requests at once all get
/// through, spread over more than a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lane_a_request_creates_waits_for_the_fleet_instead_of_bursting() {
    let Some(redis) = Redis::start() else { return };
    let up = support::upstream(|_| async { support::ok() }).await;
    let proxy = fleet_sidecar(&redis.url(), "500ms", up.addr).await;
    support::wait_until(PATIENCE, "the fleet connected", || async {
        sidecar(proxy.admin).await.0["connected"] == true
    })
    .await;
    let url = format!("http://{}/", proxy.addr);
    let statuses = send_twenty(&url, &[("x-tenant", "new")]);
    all_paced(statuses, &up).await;
}

/// Every one of twenty requests answered 200, spread over a second or more: unpaced,
/// all twenty would arrive within milliseconds; held, then paced from 10/s up, they
/// span a second or more.
async fn all_paced(statuses: JoinSet<u16>, up: &support::TestUpstream) {
    for status in all_within(statuses, 2 * PATIENCE).await {
        assert_eq!(status, 200);
    }
    let arrivals = up.arrivals();
    assert_eq!(arrivals.len(), 20);
    let span = arrivals[19].at - arrivals[0].at;
    assert!(
        span >= Duration::from_secs(1),
        "twenty arrived within {span:?}"
    );
}

/// A TCP relay to a loopback `port` that holds every connection until `open` says so:
/// a Redis that is up but has not answered yet.
async fn gated(port: u16) -> (u16, tokio::sync::watch::Sender<bool>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let at = listener.local_addr().unwrap().port();
    let (open, opened) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            let mut opened = opened.clone();
            tokio::spawn(async move {
                if opened.wait_for(|open| *open).await.is_err() {
                    return;
                }
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await
                {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    (at, open)
}

/// A sidecar with `[fleet]` at `redis` and upstream "up" at `up`: its default lane is
/// made at start-up, and a lane per `x-tenant` header by the first request with it.
async fn fleet_sidecar(
    redis: &str,
    sync_interval: &str,
    up: std::net::SocketAddr,
) -> support::Proxy {
    let config = format!(
        "[fleet]\nredis = \"{redis}\"\ngroup = \"e2e\"\nsync_interval = \"{sync_interval}\"\nmember_ttl = \"30s\"\n\n\
         [server]\nadmin_listen = \"127.0.0.1:0\"\nshutdown_grace = \"1s\"\n\n\
         [[upstream]]\nname = \"up\"\nlisten = \"127.0.0.1:0\"\nurl = \"http://{up}\"\n\
         [upstream.lanes]\nby = [\"header:x-tenant\"]\n"
    );
    support::proxy_config(&config).await
}

/// The default lane, made at start-up before the fleet first answers, is held for
/// that answer as a lane a request makes is: twenty requests from applications that
/// start with the sidecar go at the fleet's pace, not all at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lane_made_before_the_fleet_first_answers_waits_for_that_answer() {
    let Some(redis) = Redis::start() else { return };
    let (port, open) = gated(redis.port).await;
    let up = support::upstream(|_| async { support::ok() }).await;
    // The first connect waits for the relay; it gives up after a sync_interval.
    let proxy = fleet_sidecar(&format!("redis://127.0.0.1:{port}"), "5s", up.addr).await;
    let url = format!("http://{}/", proxy.addr);
    let statuses = send_twenty(&url, &[]);
    support::wait_until(
        PATIENCE,
        "the requests held for the fleet's first answer",
        || async {
            process_sample(proxy.admin, "easeoff_queue_waiting{upstream=\"up\"}").await >= 19.0
        },
    )
    .await;
    open.send_replace(true);
    all_paced(statuses, &up).await;
}

/// With Redis down from the start, the first failed connect lets the held lanes go:
/// they run unpaced, as a sidecar on its own does, and lanes made later are not held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_down_from_the_start_no_lane_waits_for_the_fleet() {
    let up = support::upstream(|_| async { support::ok() }).await;
    let down = format!("redis://127.0.0.1:{}", free_port());
    let proxy = fleet_sidecar(&down, "500ms", up.addr).await;
    // Held at a new member's share of the start's rate, twenty would take 100 s.
    let url = format!("http://{}/", proxy.addr);
    for headers in [&[][..], &[("x-tenant", "later")]] {
        for status in all_within(send_twenty(&url, headers), PATIENCE).await {
            assert_eq!(status, 200);
        }
    }
    assert_eq!(up.count(), 40);
    let lanes = support::status(proxy.admin).await["lanes"].clone();
    assert_eq!(lanes.as_array().map(Vec::len), Some(2), "{lanes}");
}

/// Twenty requests to `url` with `headers`, sent at once; their statuses.
fn send_twenty(url: &str, headers: &'static [(&'static str, &'static str)]) -> JoinSet<u16> {
    let client = support::client();
    let mut requests = JoinSet::new();
    for _ in 0..20 {
        let (client, url) = (client.clone(), url.to_string());
        requests.spawn(async move {
            support::send(&client, "GET", &url, headers, bytes::Bytes::new())
                .await
                .status
                .as_u16()
        });
    }
    requests
}

/// The statuses of `requests`, all of which must finish within `patience`.
async fn all_within(mut requests: JoinSet<u16>, patience: Duration) -> Vec<u16> {
    let deadline = Instant::now() + patience;
    let mut statuses = Vec::new();
    while let Some(status) = tokio::time::timeout_at(deadline.into(), requests.join_next())
        .await
        .expect("every request answered in time")
    {
        statuses.push(status.unwrap());
    }
    statuses
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_joins_gets_its_fair_share_within_two_seconds() {
    let Some(redis) = Redis::start() else { return };
    let url = redis.url();
    let members: Vec<Member> = (0..3).map(|_| Member::join(&url, "default")).collect();
    members[0].link.learned(ms(10), 1, None);
    for m in &members {
        m.link.waiting(1000);
    }
    wait_for("three equal shares", || {
        members
            .iter()
            .all(|m| m.last().is_some_and(|d| (d.share - 1.0 / 3.0).abs() < 1e-9))
    })
    .await;

    let joined = Instant::now();
    let late = Member::join(&url, "default");
    late.link.waiting(1000);
    wait_for("the new member's fair share", || {
        late.last().is_some_and(|d| d.share >= 0.8 * 0.25)
    })
    .await;
    // Counted in its syncs (2 s at 250 ms), which a loaded host makes slower, not fewer.
    let syncs = late.count();
    eprintln!(
        "fair share at sync {syncs}, {:?} after joining",
        joined.elapsed()
    );
    assert!(syncs <= 8, "fair share only at sync {syncs}");
    wait_for("the others to make room", || {
        members
            .iter()
            .all(|m| m.last().is_some_and(|d| (d.share - 0.25).abs() < 1e-9))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_long_outage_the_fleet_is_back_within_its_capped_backoff_of_redis_returning() {
    let Some(redis) = Redis::start() else { return };
    let members = two_members(&redis.url()).await;
    let port = redis.kill();
    wait_for("every member on its own", || {
        members.iter().all(|m| m.connected() == 0.0)
    })
    .await;
    // Ten more failed attempts: the backoff, stepping by 1.6 from one sync (250 ms),
    // would now wait over 20 s without its cap; with it, 2.4 s at most. PATIENCE lies
    // between, with room for a loaded host.
    let errors = SYNC_ERRORS;
    let floor: Vec<f64> = members.iter().map(|m| m.sample(errors) + 10.0).collect();
    let deadline = Instant::now() + PATIENCE * 5;
    while !members
        .iter()
        .zip(&floor)
        .all(|(m, f)| m.sample(errors) >= *f)
    {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for ten failed attempts"
        );
        tokio::time::sleep(ms(20)).await;
    }

    let restarted = Redis::on(port);
    let returned = Instant::now();
    back_and_rebuilt(&members, &restarted).await;
    let back = returned.elapsed();
    eprintln!("back in the fleet {back:?} after redis returned");
    assert!(back < PATIENCE, "{back:?}");
}

/// A sample from a sidecar process's `/metrics`, -1 when absent.
async fn process_sample(admin: std::net::SocketAddr, sample: &str) -> f64 {
    support::sample_value(&support::metrics(admin).await, sample).unwrap_or(-1.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sidecar_killed_with_sigkill_is_forgotten_within_member_ttl_and_its_share_goes_to_the_others()
 {
    let Some(redis) = Redis::start() else { return };
    let up = support::throttles_first(1, || support::respond(429, &[], "")).await;
    // A TTL long enough that the bound on when it is forgotten leaves a loaded host
    // seconds for the syncs and scrapes that show it.
    let ttl = Duration::from_secs(4);
    let config = support::config_file(&format!(
        "[fleet]\nredis = \"{}\"\ngroup = \"sigkill\"\nsync_interval = \"250ms\"\nmember_ttl = \"4s\"\n\n\
         [server]\nadmin_listen = \"127.0.0.1:0\"\n\n{}\n[upstream.retry]\nmax_attempts = 1\n",
        redis.url(),
        support::upstream_table("up", up.addr, "")
    ));
    let mut sidecars: Vec<support::Process> =
        (0..3).map(|_| support::Process::start(&config)).collect();
    let members = r#"easeoff_fleet_members{lane="default",upstream="up"}"#;
    let share = r#"easeoff_fleet_share_ratio{lane="default",upstream="up"}"#;
    let admins: Vec<_> = sidecars.iter().map(|p| p.admin).collect();
    support::wait_until(PATIENCE, "three members", || async {
        for admin in &admins {
            if process_sample(*admin, members).await != 3.0 {
                return false;
            }
        }
        true
    })
    .await;
    // One throttle paces the fleet, so the shares mean something: about a third each
    // (the sidecar that forwarded the request still shows a little demand).
    assert_eq!(support::get(&sidecars[0].url("up")).await.status, 429);
    support::wait_until(PATIENCE, "a third each", || async {
        for admin in &admins {
            if (process_sample(*admin, share).await - 1.0 / 3.0).abs() > 0.02 {
                return false;
            }
        }
        true
    })
    .await;

    // Requests to the one to be killed until just before: its lane syncs every round,
    // so its entry was written at most a sync before it died (an idle lane refreshes
    // its entry only every three eighths to half of the TTL).
    let busy = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let requests = tokio::spawn({
        let (busy, url) = (Arc::clone(&busy), sidecars[1].url("up"));
        async move {
            while busy.load(std::sync::atomic::Ordering::Relaxed) {
                assert_eq!(support::get(&url).await.status, 200);
            }
        }
    });
    support::wait_until(
        PATIENCE,
        "requests through the one to be killed",
        || async { up.count() >= 5 },
    )
    .await;
    busy.store(false, std::sync::atomic::Ordering::Relaxed);
    requests.await.unwrap();
    let mut killed = sidecars.remove(1);
    // Its entry (the member id holds the process id) and when it was last written.
    let id = format!("-{}-", killed.child.id());
    let key = "easeoff:{sigkill:up:default}:state";
    let entry = entries(&redis, key)
        .into_iter()
        .find(|(f, _)| f.contains(&id));
    let last_write = written(&entry.expect("the killed sidecar's entry"));
    killed.child.kill().expect("SIGKILL");
    let died = Instant::now();
    killed.wait();
    // When each survivor first shows two members splitting the fleet rate: after the
    // kill, and after the last write by Redis's clock.
    let mut forgotten = [None, None];
    let survivors = [sidecars[0].admin, sidecars[1].admin];
    while forgotten.iter().any(Option::is_none) {
        assert!(died.elapsed() < PATIENCE, "not forgotten: {forgotten:?}");
        for (admin, when) in survivors.iter().zip(&mut forgotten) {
            let text = support::metrics(*admin).await;
            let sample = |name| support::sample_value(&text, name).unwrap_or(-1.0);
            if when.is_none() && sample(members) == 2.0 && (sample(share) - 0.5).abs() < 0.02 {
                let lived = Duration::from_millis(redis_ms(&redis) - last_write);
                *when = Some((died.elapsed(), lived));
            }
        }
    }
    eprintln!(
        "the killed sidecar was forgotten {forgotten:?} (after SIGKILL, after its last write)"
    );
    for (when, lived) in forgotten.into_iter().flatten() {
        // Not before its TTL ran out (a sync or more after the kill, which a loaded
        // host may delay), by the clock the entries are kept by.
        assert!(lived >= ttl, "forgotten {lived:?} after its last write");
        // Once its entry expires: a sync or two after the TTL.
        assert!(when < ttl * 2, "{when:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_a_sidecar_trusting_the_servers_ca_syncs_and_one_without_it_does_not() {
    let Some((redis, tls_port, ca_file)) = Redis::start_tls() else {
        return;
    };
    let up = support::upstream(|_| async { support::ok() }).await;
    let config = |group: &str, ca: &str| {
        format!(
            "[fleet]\nredis = \"rediss://127.0.0.1:{tls_port}/0\"\ngroup = \"{group}\"\n\
             sync_interval = \"250ms\"\n{ca}\n\
             [server]\nadmin_listen = \"127.0.0.1:0\"\n\n\
             [[upstream]]\nname = \"up\"\nlisten = \"127.0.0.1:0\"\nurl = \"http://{}\"\n",
            up.addr
        )
    };
    let ca = format!("ca_file = \"{}\"", ca_file.display());
    let trusting = support::proxy_config(&config("tls", &ca)).await;
    let connected = "easeoff_fleet_connected";
    support::wait_until(PATIENCE, "connected over TLS", || async {
        support::metric(trusting.admin, connected).await == 1.0
    })
    .await;
    // A sync happened: the lane's hash holds this sidecar (read on the plain port).
    let key = "easeoff:{tls:up:default}:state";
    let mut members = 0;
    let deadline = Instant::now() + PATIENCE;
    while members == 0 {
        assert!(
            Instant::now() < deadline,
            "no sync over TLS: {:?}",
            redis.hash(key)
        );
        members = entries(&redis, key).len();
        tokio::time::sleep(ms(10)).await;
    }
    assert_eq!(members, 1);
    let (fleet, up_status) = sidecar(trusting.admin).await;
    assert_eq!(fleet["connected"], true, "{fleet}");
    assert_eq!(up_status["fleet"]["members"], 1, "{up_status}");

    // The bundled public roots do not know the test CA: the handshake fails.
    let doubting = support::proxy_config(&config("untrusted", "")).await;
    let errors = r#"easeoff_fleet_sync_errors_total"#;
    support::wait_until(PATIENCE, "failed TLS handshakes", || async {
        support::metric(doubting.admin, errors).await >= 2.0
    })
    .await;
    assert_eq!(support::metric(doubting.admin, connected).await, 0.0);
    assert!(
        redis
            .hash("easeoff:{untrusted:up:default}:state")
            .is_empty()
    );
}

/// Runs `command` with `args` on `redis`.
fn redis_do(redis: &Redis, command: &str, args: &[&str]) {
    let mut c = redis.connection().expect("redis answers");
    redis::cmd(command)
        .arg(args)
        .query::<redis::Value>(&mut c)
        .expect("the command runs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_type_on_one_lanes_key_costs_that_lane_only() {
    let Some(redis) = Redis::start() else { return };
    let members: Vec<Member> = (0..2).map(|_| Member::join(&redis.url(), "a")).collect();
    let seen: Vec<Arc<Mutex<Vec<Decision>>>> = (0..2).map(|_| Arc::default()).collect();
    let links: Vec<LaneLink> = members
        .iter()
        .zip(&seen)
        .map(|(m, seen)| {
            let seen = Arc::clone(seen);
            let cb = Box::new(move |d: &Decision| seen.lock().unwrap().push(*d));
            m.fleet.join("orders", "b", true, cb)
        })
        .collect();
    members[0].link.learned(ms(10), 1, None);
    links[0].learned(ms(10), 1, None);
    // Requests waiting: lane a syncs every round, not only to refresh its entry.
    for m in &members {
        m.link.waiting(1);
    }
    let last_b = |i: usize| seen[i].lock().unwrap().last().copied();
    let shared = |d: Option<Decision>| d.is_some_and(|d| d.members == 2 && !d.local);
    wait_for("both lanes shared by both members", || {
        (0..2).all(|i| shared(members[i].last()) && shared(last_b(i)))
    })
    .await;

    redis_do(
        &redis,
        "SET",
        &["easeoff:{test:orders:b}:state", "not a hash"],
    );
    wait_for("lane b on its own in both members", || {
        (0..2).all(|i| last_b(i).is_some_and(|d| d.local))
    })
    .await;
    // Lane a goes on sharing: ten more syncs, all in the fleet.
    let counts: Vec<usize> = members.iter().map(Member::count).collect();
    wait_for("ten more syncs of lane a", || {
        members
            .iter()
            .zip(&counts)
            .all(|(m, c)| m.count() >= c + 10)
    })
    .await;
    for m in &members {
        let recent: Vec<Decision> = m
            .decisions
            .lock()
            .unwrap()
            .iter()
            .rev()
            .take(10)
            .copied()
            .collect();
        assert!(
            recent.iter().all(|d| d.members == 2 && !d.local),
            "{recent:?}"
        );
        assert_eq!(m.connected(), 1.0);
        assert!(m.sample(r#"easeoff_fleet_redis_errors_total{class="wrongtype"}"#) >= 1.0);
        assert_eq!(m.fleet.fault(), None, "the fleet as a whole is fine");
    }

    redis_do(&redis, "DEL", &["easeoff:{test:orders:b}:state"]);
    wait_for("lane b back in the fleet", || {
        (0..2).all(|i| shared(last_b(i)))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_out_of_memory_takes_the_lanes_local_and_says_why_until_it_takes_writes() {
    let Some(redis) = Redis::start() else { return };
    let members = two_members(&redis.url()).await;
    // With a long-gone member's entry in the hash, the script deletes it first: a
    // write Redis allows out of memory, after which it lets the script write on.
    let mut c = redis.connection().expect("redis answers");
    redis::pipe()
        .atomic()
        .cmd("HSET")
        .arg(KEY)
        .arg("m:gone")
        .arg("1 5")
        .cmd("CONFIG")
        .arg(&["SET", "maxmemory", "1"][..])
        .query::<redis::Value>(&mut c)
        .expect("the transaction runs");
    wait_for("every member on its own", || {
        members
            .iter()
            .all(|m| m.connected() == 0.0 && m.last().is_some_and(|d| d.local))
    })
    .await;
    for m in &members {
        let d = m.last().unwrap();
        // Half of 100/s each, as shared before.
        assert_eq!((d.interval, d.share), (ms(20), 1.0), "{d:?}");
        assert!(
            m.fleet.fault().unwrap().contains("OOM"),
            "{:?}",
            m.fleet.fault()
        );
        assert!(m.sample(r#"easeoff_fleet_redis_errors_total{class="oom"}"#) >= 2.0);
    }
    // Redis answers reads and takes a connection, but no write: not connected.
    let errors = r#"easeoff_fleet_redis_errors_total{class="oom"}"#;
    let floor = members[0].sample(errors) + 3.0;
    wait_for("three more refused syncs", || {
        members[0].sample(errors) >= floor
    })
    .await;
    assert!(members.iter().all(|m| m.connected() == 0.0));
    assert_eq!(
        redis.field(KEY, "m:gone").as_deref(),
        Some("1 5"),
        "no sync wrote anything while Redis was out of memory"
    );

    redis_do(&redis, "CONFIG", &["SET", "maxmemory", "0"]);
    back_and_rebuilt(&members, &redis).await;
    assert!(members.iter().all(|m| m.fleet.fault().is_none()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_is_warned_of_at_the_first_attempt_and_shown_on_status() {
    let Some(redis) = Redis::start() else { return };
    redis_do(&redis, "CONFIG", &["SET", "requirepass", "right"]);
    let up = support::upstream(|_| async { support::ok() }).await;
    let config = |sync_interval: &str| {
        support::config_file(&format!(
            "[fleet]\nredis = \"redis://:wrong@127.0.0.1:{}/0\"\ngroup = \"auth\"\n\
             sync_interval = \"{sync_interval}\"\nmember_ttl = \"2m\"\n\n\
             [server]\nadmin_listen = \"127.0.0.1:0\"\n\n{}",
            redis.port,
            support::upstream_table("up", up.addr, "")
        ))
    };
    let warning = "fleet: redis refuses the credentials: check the password (or user) in the redis url; lanes go on alone from their last allocation";
    let auth = r#"easeoff_fleet_redis_errors_total{class="auth"}"#;
    // With syncs a minute apart the second attempt is 48 s or more after the first:
    // a warning within PATIENCE came with the first, as the refused count says.
    let slow = config("60s");
    let started = Instant::now();
    let easeoff = support::Process::start(&slow);
    support::wait_until(PATIENCE, "the warning", || async {
        !easeoff.logged(warning, "cause").is_empty()
    })
    .await;
    eprintln!("warned {:?} after start", started.elapsed());
    assert_eq!(easeoff.logged(warning, "cause"), ["auth"]);
    assert_eq!(process_sample(easeoff.admin, auth).await, 1.0);
    let (fleet, _) = sidecar(easeoff.admin).await;
    assert_eq!(fleet["connected"], false, "{fleet}");
    assert!(
        fleet["why_alone"].as_str().unwrap().contains("password"),
        "{fleet}"
    );
    drop(easeoff);

    // One line, however many attempts follow.
    let fast = config("50ms");
    let easeoff = support::Process::start(&fast);
    support::wait_until(PATIENCE, "three refused attempts", || async {
        process_sample(easeoff.admin, auth).await >= 3.0
    })
    .await;
    assert_eq!(easeoff.logged(warning, "cause"), ["auth"]);
}

/// Writes `n` entries `m:<prefix><i>` into `key` as something other than easeoff
/// could: each with demand `entry` (and no dispatches), seen a minute ahead by
/// Redis's clock, so they stay live without being written again.
fn fake_members(redis: &Redis, prefix: &str, n: usize, entry: &str) {
    let ahead = redis_ms(redis) + 60_000;
    let mut c = redis.connection().expect("redis answers");
    let mut pipe = redis::pipe();
    for i in 0..n {
        pipe.cmd("HSET")
            .arg(KEY)
            .arg(format!("m:{prefix}{i}"))
            .arg(format!("{ahead} {entry}"))
            .ignore();
    }
    pipe.query::<()>(&mut c).expect("the fakes are written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_fake_members_with_huge_demand_leave_a_real_one_at_least_half() {
    let Some(redis) = Redis::start() else { return };
    let real = Member::join(&redis.url(), "default");
    // 1,000/s for the fleet; the real member has a long queue and dispatches at the
    // rate its share gives it.
    real.link.learned(ms(1), 1, None);
    real.link.waiting(1000);
    wait_for("the real member's first decision", || real.last().is_some()).await;
    let pump = real.dispatch_at_share();
    // Half write a demand alone (as a member of another make might), half a demand
    // of 1e9 and no dispatches.
    fake_members(&redis, "bare-", 100, "1000000000");
    fake_members(&redis, "idle-", 100, "1e9 0");
    wait_for("201 members", || {
        real.last().is_some_and(|d| d.members == 201)
    })
    .await;
    let joined = Instant::now();
    wait_for("the real member at >= 0.5", || {
        real.last().is_some_and(|d| d.share >= 0.5)
    })
    .await;
    eprintln!("share {:?} after the fakes came", joined.elapsed());
    // It keeps it: every decision for the next 20 syncs.
    let from = real.count();
    wait_for("20 more syncs", || real.count() >= from + 20).await;
    let decisions = real.decisions.lock().unwrap().clone();
    for d in &decisions[from..] {
        assert!(d.members == 201 && d.share >= 0.5, "{d:?}");
    }
    eprintln!("with 200 fakes: {:?}", decisions.last());
    pump.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_shared_by_two_configurations_is_shown_on_status() {
    let Some(redis) = Redis::start() else { return };
    let config = |url: &str| {
        format!(
            "[fleet]\nredis = \"{}\"\ngroup = \"two\"\nsync_interval = \"250ms\"\n\n\
             [server]\nadmin_listen = \"127.0.0.1:0\"\nshutdown_grace = \"1s\"\n\n\
             [[upstream]]\nname = \"up\"\nlisten = \"127.0.0.1:0\"\nurl = \"{url}\"\n",
            redis.url()
        )
    };
    // One upstream name, two URLs: two Deployments with one group.
    let a = support::proxy_config(&config("http://127.0.0.1:1")).await;
    let b = support::proxy_config(&config("http://127.0.0.1:2")).await;
    for admin in [a.admin, b.admin] {
        support::wait_until(PATIENCE, "two members whose settings differ", || async {
            let (fleet, up) = sidecar(admin).await;
            up["fleet"]["members"] == 2 && fleet["settings_differ"] == true
        })
        .await;
    }
    // The one with other settings gone, the other's agree again.
    a.stop().await.unwrap();
    support::wait_until(PATIENCE, "the settings to agree", || async {
        sidecar(b.admin).await.0["settings_differ"] == false
    })
    .await;
}

/// A model server with `slots` slots shared by every sidecar, each call taking
/// `work`; past them it answers as TGI does (429, "Model is overloaded").
async fn shared_model_server(slots: usize, work: Duration) -> support::TestUpstream {
    let busy = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    support::upstream(move |_| {
        let busy = Arc::clone(&busy);
        async move {
            use std::sync::atomic::Ordering::SeqCst;
            if busy.fetch_add(1, SeqCst) >= slots {
                busy.fetch_sub(1, SeqCst);
                return support::respond(
                    429,
                    &[("content-type", "application/json")],
                    r#"{"error":"Model is overloaded","error_type":"overloaded"}"#,
                );
            }
            tokio::time::sleep(work).await;
            busy.fetch_sub(1, SeqCst);
            support::ok()
        }
    })
    .await
}

/// Two sidecars with `[fleet]` on `redis` in front of `up`, `extra` appended to the
/// upstream's table; `workers` clients send through each until `stop`, each
/// request with `x-model: m`. Returns the sidecars and the clients' statuses.
async fn two_capped_sidecars(
    redis: &Redis,
    up: std::net::SocketAddr,
    extra: &str,
    workers: [usize; 2],
    stop: &tokio::sync::watch::Receiver<bool>,
) -> (Vec<support::Proxy>, JoinSet<Vec<u16>>) {
    let config = format!(
        "[fleet]\nredis = \"{}\"\ngroup = \"e2e\"\nsync_interval = \"100ms\"\nmember_ttl = \"5s\"\n\n\
         [server]\nadmin_listen = \"127.0.0.1:0\"\nshutdown_grace = \"1s\"\n\n\
         [[upstream]]\nname = \"up\"\nlisten = \"127.0.0.1:0\"\nurl = \"http://{up}\"\n\
         preset = \"model-server\"\n{extra}\n",
        redis.url()
    );
    let mut sidecars = Vec::new();
    let mut clients = JoinSet::new();
    for n in workers {
        let sidecar = support::proxy_config(&config).await;
        let url = format!("http://{}/v1/chat/completions", sidecar.addr);
        for _ in 0..n {
            let (url, stop) = (url.clone(), stop.clone());
            clients.spawn(async move {
                let client = support::client();
                let mut statuses = Vec::new();
                while !*stop.borrow() {
                    let answer = support::send(&client, "POST", &url, &[("x-model", "m")], "{}");
                    statuses.push(answer.await.status.as_u16());
                }
                statuses
            });
        }
        sidecars.push(sidecar);
    }
    (sidecars, clients)
}

/// Every status the clients saw, once they stopped.
async fn statuses_after(
    stop: tokio::sync::watch::Sender<bool>,
    clients: JoinSet<Vec<u16>>,
) -> Vec<u16> {
    stop.send_replace(true);
    all_within_each(clients, 2 * PATIENCE).await
}

async fn all_within_each(mut clients: JoinSet<Vec<u16>>, patience: Duration) -> Vec<u16> {
    let mut all = Vec::new();
    tokio::time::timeout(patience, async {
        while let Some(statuses) = clients.join_next().await {
            all.extend(statuses.unwrap());
        }
    })
    .await
    .expect("the clients finish");
    all
}

/// An upstream's learned `max_in_flight` is shared through Redis: two sidecars in
/// front of one model server's 6 slots, one with 9 clients and one with 3, each
/// take their part of the fleet's cap (`why = fleet` on both), the larger part
/// where more requests want out, the parts summing to about the slots; both members'
/// entries under the cap's own key carry their cap and what they want out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidecars_share_an_upstream_s_learned_cap_and_split_it_by_what_each_wants_out() {
    let Some(redis) = Redis::start() else { return };
    let up = shared_model_server(6, ms(30)).await;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let (sidecars, clients) = two_capped_sidecars(&redis, up.addr, "", [9, 3], &stopped).await;
    let cap = |status: &serde_json::Value| {
        let cap = &status["in_flight_cap"];
        (
            cap["cap"].as_u64().unwrap_or(0),
            cap["moves"]["fleet"].as_u64().unwrap_or(0),
        )
    };
    support::wait_until(PATIENCE, "both to take their parts", || async {
        let (a, a_moves) = cap(&sidecar(sidecars[0].admin).await.1);
        let (b, b_moves) = cap(&sidecar(sidecars[1].admin).await.1);
        a_moves > 0 && b_moves > 0 && a > b && a + b <= 7
    })
    .await;
    let key = "easeoff:{e2e:up}:in_flight";
    let members = entries(&redis, key);
    assert_eq!(members.len(), 2, "{members:?}");
    for (_, entry) in &members {
        assert_eq!(entry.split(' ').count(), 8, "no cap or want in {entry}");
    }
    let statuses = statuses_after(stop, clients).await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
}

/// A lane's learned `max_in_flight` rides in the lane's own key: both members'
/// entries there carry their cap and what they want out, the busier member wanting
/// more, and each lane's cap moves to its part (`/status`, the lane's `in_flight_cap`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lane_s_learned_cap_is_shared_through_the_lane_s_key() {
    let Some(redis) = Redis::start() else { return };
    let up = shared_model_server(6, ms(30)).await;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let lanes = "max_in_flight = \"off\"\n[upstream.lanes]\nby = [\"header:x-model\"]\nmax_in_flight = \"learn\"";
    let (sidecars, clients) = two_capped_sidecars(&redis, up.addr, lanes, [9, 3], &stopped).await;
    let key = "easeoff:{e2e:up:m}:state";
    let wants = || {
        let mut wants: Vec<f64> = entries(&redis, key)
            .iter()
            .filter_map(|(_, entry)| entry.split(' ').nth(7)?.parse().ok())
            .collect();
        wants.sort_by(f64::total_cmp);
        wants
    };
    support::wait_until(
        PATIENCE,
        "both entries to say what they want out",
        || async {
            let wants = wants();
            wants.len() == 2 && wants[1] > wants[0]
        },
    )
    .await;
    // Each took its part of the fleet's: a move of the lane's cap `why = fleet`.
    for sidecar in &sidecars {
        support::wait_until(PATIENCE, "the lane's cap to take its part", || async {
            let (_, up) = self::sidecar(sidecar.admin).await;
            let lanes = up["lanes"].as_array().cloned().unwrap_or_default();
            lanes.iter().any(|lane| {
                lane["name"] == "m" && lane["in_flight_cap"]["moves"]["fleet"].as_u64() > Some(0)
            })
        })
        .await;
    }
    let statuses = statuses_after(stop, clients).await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
}
