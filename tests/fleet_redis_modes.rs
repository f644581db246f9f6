//! The fleet through a Redis Cluster and through Sentinel, with real `redis-server`
//! processes on loopback ports: two sidecars share one lane while the lane's slot
//! moves to another node, and while Sentinel fails the primary over. Skipped with a
//! notice when `redis-server` is not installed, unless `EASEOFF_REQUIRE_REDIS=1` (CI).

mod support;

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Every wait for a condition gives up after this.
const PATIENCE: Duration = Duration::from_secs(15);
/// The lane both sidecars share: upstream "up", lane `default`, group "modes".
const KEY: &str = "easeoff:{modes:up:default}:state";

/// `redis-server` processes on loopback ports and their directory, gone on drop.
struct Servers {
    children: Vec<Child>,
    dir: PathBuf,
}

impl Servers {
    /// A fresh directory; `None` (after a notice) if redis-server is missing and not
    /// required.
    fn new(what: &str) -> Option<Servers> {
        let found = Command::new("redis-server")
            .arg("--version")
            .output()
            .is_ok()
            && Command::new("redis-cli").arg("--version").output().is_ok();
        if !found {
            assert!(
                std::env::var("EASEOFF_REQUIRE_REDIS").as_deref() != Ok("1"),
                "redis-server is not installed and EASEOFF_REQUIRE_REDIS=1"
            );
            eprintln!("skipped: redis-server is not installed (apt-get install redis-server)");
            return None;
        }
        let dir = std::env::temp_dir().join(format!(
            "easeoff-{what}-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Some(Servers {
            children: Vec::new(),
            dir,
        })
    }

    /// Starts `redis-server` on `port` with `args` (after a config file, if any), and
    /// waits until it answers PING.
    fn start(&mut self, port: u16, args: &[String]) {
        let child = Command::new("redis-server")
            .args(args)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        self.children.push(child);
        wait_sync("redis-server to answer", || {
            ask::<String>(port, &["PING"]).is_some()
        });
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// One command to the server on `port`; `None` on any error.
fn ask<T: redis::FromRedisValue>(port: u16, command: &[&str]) -> Option<T> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).ok()?;
    let mut c = client
        .get_connection_with_timeout(Duration::from_secs(2))
        .ok()?;
    let mut cmd = redis::cmd(command[0]);
    for arg in &command[1..] {
        cmd.arg(*arg);
    }
    cmd.query(&mut c).ok()
}

/// One command that must succeed.
fn run<T: redis::FromRedisValue>(port: u16, command: &[&str]) -> T {
    ask(port, command).unwrap_or_else(|| panic!("{command:?} on {port} failed"))
}

/// Polls a synchronous `condition` until it holds; panics with `what` after [`PATIENCE`].
fn wait_sync(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The sidecars' config: one upstream "up" at `upstream`, a fleet in group "modes"
/// reached as `fleet` says.
fn config(fleet: &str, upstream: SocketAddr) -> String {
    format!(
        "[fleet]\n{fleet}\ngroup = \"modes\"\nsync_interval = \"50ms\"\nmember_ttl = \"1s\"\n\n\
         [server]\nadmin_listen = \"127.0.0.1:0\"\nshutdown_grace = \"1s\"\n\n\
         [[upstream]]\nname = \"up\"\nlisten = \"127.0.0.1:0\"\nurl = \"http://{upstream}\"\n\
         [upstream.retry]\nmax_attempts = 1\n"
    )
}

/// Whether the sidecar at `admin` is connected and shares its lane with `members`.
async fn in_fleet(admin: SocketAddr, members: u64) -> bool {
    let text = support::get(&format!("http://{admin}/status")).await.text();
    let status: serde_json::Value = serde_json::from_str(&text).unwrap();
    status["fleet"]["connected"] == true && status["upstreams"][0]["fleet"]["members"] == members
}

/// Clients sending to every sidecar until stopped; counts the answers that are not 200.
struct Clients {
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicUsize>,
    failed: Arc<AtomicUsize>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Clients {
    fn start(sidecars: &[SocketAddr]) -> Clients {
        let (stop, sent, failed) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
        );
        let tasks = sidecars
            .iter()
            .map(|addr| {
                let (stop, sent, failed) = (stop.clone(), sent.clone(), failed.clone());
                let url = format!("http://{addr}/");
                tokio::spawn(async move {
                    let client = support::client();
                    while !stop.load(Ordering::Relaxed) {
                        let answer =
                            support::send(&client, "GET", &url, &[], bytes::Bytes::new()).await;
                        sent.fetch_add(1, Ordering::Relaxed);
                        if answer.status != 200 {
                            failed.fetch_add(1, Ordering::Relaxed);
                        }
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                })
            })
            .collect();
        Clients {
            stop,
            sent,
            failed,
            tasks,
        }
    }

    /// Returns once the clients have sent `n` more requests: traffic flows across
    /// whatever happens next, however slowly a loaded host sends it.
    async fn progress(&self, n: usize) {
        let target = self.sent.load(Ordering::Relaxed) + n;
        support::wait_until(PATIENCE, "the clients to send", || async {
            self.sent.load(Ordering::Relaxed) >= target
        })
        .await;
    }

    /// Stops the clients; how many requests they sent and how many failed.
    async fn finish(self) -> (usize, usize) {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            task.await.unwrap();
        }
        (
            self.sent.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
        )
    }
}

/// The members' entries in the lane's hash on the node at `port`, by their last
/// sync (Redis's clock, ms).
fn entries(port: u16) -> Vec<u64> {
    let hash: Vec<(String, String)> = ask(port, &["HGETALL", KEY]).unwrap_or_default();
    hash.iter()
        .filter(|(f, _)| f.starts_with("m:"))
        .filter_map(|(_, v)| v.split(' ').next()?.parse().ok())
        .collect()
}

/// Redis's clock on the node at `port`, ms.
fn redis_now(port: u16) -> u64 {
    let [s, us]: [u64; 2] = run::<Vec<u64>>(port, &["TIME"]).try_into().unwrap();
    s * 1000 + us / 1000
}

/// Three masters, no replicas, every slot covered; their ports.
fn cluster(servers: &mut Servers) -> [u16; 3] {
    let ports = [free_port(), free_port(), free_port()];
    for port in ports {
        let file = servers.dir.join(format!("nodes-{port}.conf"));
        let args = [
            "--cluster-enabled".to_string(),
            "yes".to_string(),
            "--cluster-config-file".to_string(),
            file.display().to_string(),
            // The sidecars' own ACL user, kept to the fleet's keys.
            "--user".to_string(),
            "easeoff".to_string(),
            "on".to_string(),
            ">fleet-secret".to_string(),
            "~easeoff:*".to_string(),
            "+@all".to_string(),
        ];
        servers.start(port, &args);
    }
    let nodes: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let created = Command::new("redis-cli")
        .arg("--cluster")
        .arg("create")
        .args(&nodes)
        .args(["--cluster-replicas", "0", "--cluster-yes"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("redis-cli runs");
    assert!(created.success(), "redis-cli --cluster create failed");
    for port in ports {
        wait_sync("cluster_state:ok on every node", || {
            ask::<String>(port, &["CLUSTER", "INFO"])
                .is_some_and(|i| i.contains("cluster_state:ok"))
        });
    }
    ports
}

/// Moves `slot` from the node at `from` to the node at `to`, keys included, as
/// `redis-cli --cluster reshard` does.
fn move_slot(ports: [u16; 3], slot: &str, from: u16, to: u16) {
    let from_id: String = run(from, &["CLUSTER", "MYID"]);
    let to_id: String = run(to, &["CLUSTER", "MYID"]);
    run::<()>(to, &["CLUSTER", "SETSLOT", slot, "IMPORTING", &from_id]);
    run::<()>(from, &["CLUSTER", "SETSLOT", slot, "MIGRATING", &to_id]);
    loop {
        let keys: Vec<String> = run(from, &["CLUSTER", "GETKEYSINSLOT", slot, "100"]);
        if keys.is_empty() {
            break;
        }
        let port = to.to_string();
        let mut migrate = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
        migrate.extend(keys.iter().map(String::as_str));
        run::<()>(from, &migrate);
    }
    for port in ports {
        run::<()>(port, &["CLUSTER", "SETSLOT", slot, "NODE", &to_id]);
    }
}

/// Two sidecars share one lane through a 3-master cluster, seeded with one node, as
/// an ACL user of their own; the
/// lane's slot moves to another node mid-run: no client sees an error, and both go on
/// syncing on the new owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_a_cluster_a_slot_that_moves_mid_run_costs_no_client_an_error() {
    let Some(mut servers) = Servers::new("cluster") else {
        return;
    };
    let ports = cluster(&mut servers);
    let up = support::upstream(|_| async { support::ok() }).await;
    let fleet = format!(
        "redis = [\"redis://easeoff:fleet-secret@127.0.0.1:{}\"]\nredis_mode = \"cluster\"",
        ports[0]
    );
    let a = support::proxy_config(&config(&fleet, up.addr)).await;
    let b = support::proxy_config(&config(&fleet, up.addr)).await;
    for s in [&a, &b] {
        support::wait_until(PATIENCE, "two members, connected", || in_fleet(s.admin, 2)).await;
    }
    let as_user = |p: &u16| run::<String>(*p, &["CLIENT", "LIST"]).contains("user=easeoff");
    assert!(
        ports.iter().all(as_user),
        "every node sees the fleet's user"
    );
    let slot = run::<i64>(ports[0], &["CLUSTER", "KEYSLOT", KEY]).to_string();
    let owner = *ports
        .iter()
        .find(|p| entries(**p).len() == 2)
        .expect("one node holds the lane's key");
    let target = *ports.iter().find(|p| **p != owner).unwrap();

    let clients = Clients::start(&[a.addr, b.addr]);
    clients.progress(10).await;
    move_slot(ports, &slot, owner, target);
    let moved = redis_now(target);
    support::wait_until(
        PATIENCE,
        "both members to sync on the new owner",
        || async {
            let fresh = entries(target).iter().filter(|t| **t > moved).count();
            fresh == 2
        },
    )
    .await;
    clients.progress(10).await;
    let (sent, failed) = clients.finish().await;
    assert!(sent >= 20, "{sent}");
    assert_eq!(failed, 0, "{failed} of {sent} requests failed");
    assert!(entries(owner).is_empty(), "the old owner still has the key");
    for s in [&a, &b] {
        support::wait_until(PATIENCE, "both in the fleet", || in_fleet(s.admin, 2)).await;
    }
}

/// A primary, its replica and one sentinel; the ports of the three.
fn sentinel(servers: &mut Servers) -> (u16, u16, u16) {
    let (primary, replica, sentinel) = (free_port(), free_port(), free_port());
    // The sidecars' own ACL user on every server, the sentinel included.
    let user = [
        "--user",
        "easeoff",
        "on",
        ">fleet-secret",
        "~easeoff:*",
        "+@all",
    ];
    let mut args: Vec<String> = user.iter().map(|a| a.to_string()).collect();
    servers.start(primary, &args);
    args.extend([
        "--replicaof".to_string(),
        "127.0.0.1".to_string(),
        primary.to_string(),
    ]);
    servers.start(replica, &args);
    wait_sync("the replica to be in sync", || {
        ask::<String>(replica, &["INFO", "replication"])
            .is_some_and(|i| i.contains("master_link_status:up"))
    });
    let conf = servers.dir.join("sentinel.conf");
    std::fs::write(
        &conf,
        format!(
            "user easeoff on >fleet-secret +@all\n\
             sentinel monitor easeoff 127.0.0.1 {primary} 1\n\
             sentinel down-after-milliseconds easeoff 1000\n\
             sentinel failover-timeout easeoff 5000\n"
        ),
    )
    .unwrap();
    servers.start(
        sentinel,
        &[conf.display().to_string(), "--sentinel".to_string()],
    );
    wait_sync("the sentinel to know the replica", || {
        ask::<Vec<redis::Value>>(sentinel, &["SENTINEL", "REPLICAS", "easeoff"])
            .is_some_and(|r| !r.is_empty())
    });
    (primary, replica, sentinel)
}

/// Four sidecars share one lane, as an ACL user of their own, through the primary
/// the sentinel names; `SENTINEL
/// FAILOVER` mid-run: no client sees an error, all are back in the fleet within 5 s,
/// and the lane's key is on the new primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_sentinel_a_failover_mid_run_costs_no_client_an_error() {
    let Some(mut servers) = Servers::new("sentinel") else {
        return;
    };
    let (primary, replica, sentinel) = sentinel(&mut servers);
    let up = support::upstream(|_| async { support::ok() }).await;
    let fleet = format!(
        "redis = [\"redis://easeoff:fleet-secret@127.0.0.1:{sentinel}\"]\nredis_mode = \"sentinel\"\n\
         sentinel_master = \"easeoff\""
    );
    let mut sidecars = Vec::new();
    for _ in 0..4 {
        sidecars.push(support::proxy_config(&config(&fleet, up.addr)).await);
    }
    for s in &sidecars {
        support::wait_until(PATIENCE, "four members, connected", || in_fleet(s.admin, 4)).await;
    }
    assert_eq!(entries(primary).len(), 4);

    let addrs: Vec<SocketAddr> = sidecars.iter().map(|s| s.addr).collect();
    let clients = Clients::start(&addrs);
    clients.progress(10).await;
    run::<()>(sentinel, &["SENTINEL", "FAILOVER", "easeoff"]);
    let asked = Instant::now();
    wait_sync("the replica to be the primary", || {
        ask::<String>(replica, &["INFO", "replication"]).is_some_and(|i| i.contains("role:master"))
    });
    // From here on the time is the sidecars': how long Redis takes to fail over is not.
    let promoted_at = Instant::now();
    let promoted = redis_now(replica);
    support::wait_until(
        PATIENCE,
        "every member to sync on the new primary",
        || async { entries(replica).iter().filter(|t| **t > promoted).count() == 4 },
    )
    .await;
    for s in &sidecars {
        support::wait_until(PATIENCE, "all back in the fleet", || in_fleet(s.admin, 4)).await;
    }
    let (asked, back) = (asked.elapsed(), promoted_at.elapsed());
    let users: String = run(replica, &["CLIENT", "LIST"]);
    assert!(users.contains("user=easeoff"), "{users}");
    clients.progress(10).await;
    let (sent, failed) = clients.finish().await;
    eprintln!(
        "back in the fleet {asked:?} after SENTINEL FAILOVER, {back:?} after the promotion; {sent} requests"
    );
    // Asking the sentinels every second, not waiting for the old primary's demotion
    // (up to ten seconds): a few of those seconds leave a loaded host room.
    assert!(back < Duration::from_secs(5), "{back:?}");
    assert!(sent >= 20, "{sent}");
    assert_eq!(failed, 0, "{failed} of {sent} requests failed");
}

/// A sidecar with many lanes exports fleet series for `metrics_lanes` of them, by
/// name, and one `other` series the rest share, like every other lane family.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_series_are_bounded_by_metrics_lanes() {
    let Some(mut servers) = Servers::new("series") else {
        return;
    };
    let port = free_port();
    servers.start(port, &[]);
    let up = support::upstream(|_| async { support::ok() }).await;
    let text = config(&format!("redis = \"redis://127.0.0.1:{port}/0\""), up.addr)
        + "[upstream.lanes]\nby = [\"header:x-tenant\"]\nmetrics_lanes = 3\n";
    let sidecar = support::proxy_config(&text).await;
    let client = support::client();
    let url = format!("http://{}/", sidecar.addr);
    for tenant in 0..12 {
        let tenant = tenant.to_string();
        let answer = support::send(&client, "GET", &url, &[("x-tenant", &tenant)], "").await;
        assert_eq!(answer.status, 200);
    }
    support::wait_until(PATIENCE, "every lane to sync", || async {
        ask::<Vec<String>>(port, &["KEYS", "easeoff:*"]).is_some_and(|keys| keys.len() == 13)
    })
    .await;
    let other = r#"easeoff_fleet_members{lane="other",upstream="up"}"#;
    support::wait_until(PATIENCE, "the other series to be set", || async {
        support::metric(sidecar.admin, other).await == 1.0
    })
    .await;
    let metrics = support::metrics(sidecar.admin).await;
    for family in [
        "easeoff_fleet_members",
        "easeoff_fleet_share_ratio",
        "easeoff_fleet_rate",
    ] {
        let series = metrics
            .lines()
            .filter(|l| l.starts_with(&format!("{family}{{")))
            .count();
        assert_eq!(
            series,
            3 + 1,
            "{family}: metrics_lanes by name and `other`\n{metrics}"
        );
    }
}

/// A Redis that asks for client certificates (`tls-auth-clients yes`): a sidecar
/// presenting `client_cert` from the CA Redis trusts syncs; one presenting none does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_is_presented_to_a_redis_that_asks_for_one() {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let Some(mut servers) = Servers::new("mtls") else {
        return;
    };
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "easeoff client certificate test CA");
    let ca_key = KeyPair::generate().unwrap();
    let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
    let issuer = Issuer::new(ca, ca_key);
    let write = |name: &str, text: String| {
        let path = servers.dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let leaf = |name: &str| {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec![name.to_string()])
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let (server_pem, server_key) = leaf("127.0.0.1");
    let (client_pem, client_key) = leaf("easeoff");
    let ca_file = write("ca.pem", ca_pem);
    let tls_port = free_port();
    let args: Vec<String> = [
        "--tls-port",
        &tls_port.to_string(),
        "--tls-cert-file",
        &write("server.pem", server_pem),
        "--tls-key-file",
        &write("server.key", server_key),
        "--tls-ca-cert-file",
        &ca_file,
        "--tls-auth-clients",
        "yes",
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    let (cert, key) = (
        write("client.pem", client_pem),
        write("client.key", client_key),
    );
    servers.start(free_port(), &args);
    let up = support::upstream(|_| async { support::ok() }).await;
    let url = format!("redis = \"rediss://127.0.0.1:{tls_port}/0\"\nca_file = \"{ca_file}\"");
    let with = format!("{url}\nclient_cert = \"{cert}\"\nclient_key = \"{key}\"");
    let presenting = support::proxy_config(&config(&with, up.addr)).await;
    support::wait_until(PATIENCE, "the sidecar with a certificate to sync", || {
        in_fleet(presenting.admin, 1)
    })
    .await;
    let bare = support::proxy_config(&config(&url, up.addr)).await;
    support::wait_until(PATIENCE, "the sidecar without one to fail", || async {
        support::metric(bare.admin, "easeoff_fleet_sync_errors_total").await >= 2.0
    })
    .await;
    assert_eq!(
        support::metric(bare.admin, "easeoff_fleet_connected").await,
        0.0
    );
}
