//! The fleet's store in memory, for the simulator: what the Redis script in `store.rs`
//! does for one sync, with the rules the script is written after (`learning::merge`
//! for the lane's state, `learning::live` for the members), on a clock the caller
//! gives. Simulated members share one [`Memory`] as sidecars share one Redis.

use std::collections::BTreeMap;
use std::time::Duration;

use super::demand::claim;
use super::learning::{self, Shared};
use super::store::{Answer, Report};

/// Every lane's hash, by key.
#[derive(Debug, Default)]
pub struct Memory {
    lanes: BTreeMap<String, Lane>,
}

/// One lane's hash: the state (`i`, `e`), when the last raise landed (`r`) and each
/// member's last sync and demand (`m:<member>`).
#[derive(Debug, Default)]
struct Lane {
    shared: Option<Shared>,
    raised_at: Option<Duration>,
    /// Per member: last sync, claim, dispatch rate, fingerprint.
    members: BTreeMap<String, (Duration, f64, f64, String)>,
    /// The last sync of any member: the key expires `key_ttl` after it.
    touched: Duration,
}

impl Memory {
    /// An empty store, as a Redis that just started.
    pub fn new() -> Memory {
        Memory::default()
    }

    /// Live members of the lane `key` at `now`, counting those seen within
    /// `member_ttl`.
    pub fn members(&self, key: &str, now: Duration, member_ttl: Duration) -> usize {
        self.lanes.get(key).map_or(0, |lane| {
            lane.members
                .values()
                .filter(|(seen, ..)| learning::live(now.saturating_sub(*seen), member_ttl))
                .count()
        })
    }

    /// One member's sync at `now`, for every lane it reports: the script's work, in
    /// the same order (forget the members not seen within `member_ttl`, merge the
    /// proposal, record this member, renew the key).
    pub(super) fn sync(
        &mut self,
        member: &str,
        reports: &[Report<'_>],
        now: Duration,
        member_ttl: Duration,
        key_ttl: Duration,
        hold: Duration,
    ) -> Vec<Answer> {
        // Keys nobody renewed are gone, as `PEXPIRE` makes them in Redis.
        self.lanes
            .retain(|_, lane| now.saturating_sub(lane.touched) <= key_ttl);
        reports
            .iter()
            .map(|report| {
                let lane = self.lanes.entry(report.key.to_string()).or_default();
                lane.members.retain(|m, (seen, ..)| {
                    m == member || learning::live(now.saturating_sub(*seen), member_ttl)
                });
                let others = lane.members.iter().filter(|(m, _)| *m != member);
                let (mut claims, mut used, mut fingerprints) = (Vec::new(), Vec::new(), Vec::new());
                for (_, (_, claim, dispatched, fingerprint)) in others {
                    claims.push(*claim);
                    used.push(*dispatched);
                    fingerprints.push(fingerprint.clone());
                }
                if let Some(proposal) = report.proposal {
                    let since = lane.raised_at.map(|at| now.saturating_sub(at));
                    let merged = learning::merge(lane.shared, &proposal, since, hold);
                    let landed = proposal.raised_from.is_some()
                        && lane.shared.is_some_and(|s| s.epoch != merged.epoch);
                    if landed {
                        lane.raised_at = Some(now);
                    }
                    lane.shared = Some(merged);
                }
                let entry = (
                    now,
                    claim(report.demand, report.used),
                    report.used.max(0.0),
                    report.fingerprint.to_string(),
                );
                lane.members.insert(member.to_string(), entry);
                lane.touched = now;
                Answer {
                    shared: lane.shared,
                    others: claims,
                    others_used: used,
                    fingerprints,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::learning::Proposal;

    const TTL: Duration = Duration::from_secs(1);
    const KEY_TTL: Duration = Duration::from_secs(12);
    const HOLD: Duration = Duration::from_millis(500);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn report(proposal: Option<Proposal>, demand: f64) -> Report<'static> {
        Report {
            key: "lane",
            demand,
            used: f64::INFINITY,
            fingerprint: "",
            proposal,
        }
    }

    fn sync(memory: &mut Memory, member: &str, at: u64, r: Report<'_>) -> Answer {
        memory
            .sync(member, &[r], ms(at), TTL, KEY_TTL, HOLD)
            .remove(0)
    }

    fn raise(interval: u64, from: u64) -> Option<Proposal> {
        Some(Proposal {
            interval: ms(interval),
            epoch: from + 1,
            raised_from: Some(from),
        })
    }

    #[test]
    fn one_burst_raises_once_and_another_after_the_hold_raises_again() {
        let mut m = Memory::new();
        let start = Proposal {
            interval: ms(10),
            epoch: 1,
            raised_from: None,
        };
        sync(&mut m, "a", 0, report(Some(start), 1.0));
        let first = sync(&mut m, "a", 1000, report(raise(15, 1), 1.0));
        assert_eq!(
            first.shared.map(|s| (s.interval, s.epoch)),
            Some((ms(15), 2))
        );
        // The same burst seen by another member, and by the first again at once.
        let second = sync(&mut m, "b", 1010, report(raise(16, 1), 1.0));
        assert_eq!(second.shared.map(|s| s.epoch), Some(2));
        let soon = sync(&mut m, "a", 1100, report(raise(22, 2), 1.0));
        assert_eq!(
            soon.shared.map(|s| (s.interval, s.epoch)),
            Some((ms(15), 2))
        );
        let later = sync(&mut m, "a", 1600, report(raise(22, 2), 1.0));
        assert_eq!(
            later.shared.map(|s| (s.interval, s.epoch)),
            Some((ms(22), 3))
        );
    }

    #[test]
    fn a_member_counts_until_member_ttl_after_its_last_sync() {
        let mut m = Memory::new();
        sync(&mut m, "a", 0, report(None, 5.0));
        let b = sync(&mut m, "b", 100, report(None, 7.0));
        assert_eq!(b.others, vec![5.0]);
        assert_eq!(m.members("lane", ms(1000), TTL), 2);
        assert_eq!(m.members("lane", ms(1001), TTL), 1);
        let b = sync(&mut m, "b", 1001, report(None, 7.0));
        assert!(b.others.is_empty());
    }

    #[test]
    fn a_lane_nobody_syncs_expires_and_is_rebuilt_from_the_next_proposal() {
        let mut m = Memory::new();
        let p = |interval| {
            Some(Proposal {
                interval: ms(interval),
                epoch: 4,
                raised_from: None,
            })
        };
        sync(&mut m, "a", 0, report(p(10), 1.0));
        let back = sync(&mut m, "a", 12_001, report(p(30), 1.0));
        assert_eq!(back.shared.map(|s| s.interval), Some(ms(30)));
    }

    /// The script in Redis and the memory, fed the same random reports, give the same
    /// answers: the Lua is kept in step with the Rust rules. Needs redis-server (skipped
    /// without it, unless `EASEOFF_REQUIRE_REDIS=1`).
    #[tokio::test]
    async fn the_script_in_redis_answers_as_the_memory_does() {
        let Some(mut redis) = RedisServer::start() else {
            return;
        };
        let url = crate::config::RedisUrl::parse(&redis.url()).unwrap();
        let settings = crate::config::FleetSettings {
            redis: crate::config::RedisNodes(vec![url]),
            ..Default::default()
        };
        let mut store = crate::fleet::store::Store::new(&settings).unwrap();
        store.connect(Duration::from_secs(5)).await.unwrap();
        let mut rng = fastrand::Rng::with_seed(11);
        // A long TTL and a hold of 0 or of an hour: nothing depends on the two clocks.
        for hold in [Duration::ZERO, Duration::from_secs(3600)] {
            let mut memory = Memory::new();
            let key = format!("easeoff:check:{}:default:state", hold.as_secs());
            let mut epoch = 1;
            for step in 0..300 {
                let member = format!("m{}", rng.usize(0..4));
                let proposal = (step > 0 || rng.bool()).then(|| {
                    let raise = rng.u8(0..4) == 0;
                    let from = if rng.bool() { epoch } else { epoch - 1 };
                    Proposal {
                        interval: Duration::from_micros(rng.u64(1_000..50_000)),
                        epoch: match rng.u8(0..6) {
                            _ if raise => from + 1,
                            0 => epoch - 1,
                            1 => epoch + 1,
                            _ => epoch,
                        },
                        raised_from: raise.then_some(from),
                    }
                });
                let report = Report {
                    key: &key,
                    demand: f64::from(rng.u16(0..200)) / 4.0,
                    used: f64::from(rng.u16(0..200)) / 8.0,
                    fingerprint: ["", "ab", "cd"][rng.usize(0..3)],
                    proposal,
                };
                let ttl = Duration::from_secs(3600);
                let (key_ttl, reports) = (ttl * 12, std::slice::from_ref(&report));
                let mut got = store
                    .sync(&member, reports, ttl, key_ttl, hold)
                    .await
                    .unwrap()
                    .remove(0)
                    .unwrap();
                let mut want = memory
                    .sync(&member, reports, Duration::ZERO, ttl, key_ttl, hold)
                    .remove(0);
                got.others.sort_by(f64::total_cmp);
                want.others.sort_by(f64::total_cmp);
                got.others_used.sort_by(f64::total_cmp);
                want.others_used.sort_by(f64::total_cmp);
                got.fingerprints.sort();
                want.fingerprints.sort();
                assert_eq!(got, want, "step {step}, {member}: {report:?}");
                epoch = want.shared.map_or(epoch, |s| s.epoch);
            }
        }
        redis.stop();
    }

    /// A `redis-server` on a free loopback port.
    struct RedisServer {
        port: u16,
        child: std::process::Child,
    }

    impl RedisServer {
        fn start() -> Option<RedisServer> {
            if std::process::Command::new("redis-server")
                .arg("--version")
                .output()
                .is_err()
            {
                assert!(
                    std::env::var("EASEOFF_REQUIRE_REDIS").as_deref() != Ok("1"),
                    "redis-server is not installed and EASEOFF_REQUIRE_REDIS=1"
                );
                eprintln!("skipped: redis-server is not installed");
                return None;
            }
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .unwrap()
                .port();
            let child = std::process::Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap();
            let server = RedisServer { port, child };
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
                assert!(
                    std::time::Instant::now() < deadline,
                    "redis-server did not start"
                );
                std::thread::sleep(Duration::from_millis(10));
            }
            Some(server)
        }

        fn url(&self) -> String {
            format!("redis://127.0.0.1:{}/0", self.port)
        }

        fn stop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    impl Drop for RedisServer {
        fn drop(&mut self) {
            self.stop();
        }
    }
}
