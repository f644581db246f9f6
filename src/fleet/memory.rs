//! The fleet's store in memory, for the simulator: what the Redis script in `store.rs`
//! does for one sync, with the rules the script is written after (`learning::merge`
//! for the lane's state, `learning::live` for the members, `summary.rs` for what a
//! member reads of the others), on a clock the caller gives. Simulated members share
//! one [`Memory`] as sidecars share one Redis.

use std::collections::BTreeMap;
use std::time::Duration;

use super::demand;
use super::learning::{self, Shared};
use super::store::{Answer, Report, Timings};
use super::summary::Summary;

/// Every lane's hash, by key.
#[derive(Debug, Default)]
pub struct Memory {
    lanes: BTreeMap<String, Lane>,
}

/// One lane's hash: the state (`i`, `e`), when the last raise landed (`r`), each
/// member's last sync and entry (`m:<member>`), the summary and when it was written
/// (`s`, with when the oldest entry it counted expires), whether entries changed
/// since (`d`), the last seat given (`n`) and the fleet's progress when the interval
/// last changed (`v`, `t`).
#[derive(Debug, Default)]
struct Lane {
    shared: Option<Shared>,
    raised_at: Option<Duration>,
    /// Per member: last sync, and the entry's text after it (`demand::entry`).
    members: BTreeMap<String, (Duration, String)>,
    summary: Option<(Duration, Duration, Summary)>,
    changed: bool,
    /// When the summary was last written: the key expires `key_ttl` after it.
    touched: Duration,
    seats: u64,
    /// The fleet's progress when its interval last changed, and when (`v`, `t`).
    mark: Option<(f64, Duration)>,
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
                .filter(|(seen, _)| learning::live(now.saturating_sub(*seen), member_ttl))
                .count()
        })
    }

    /// One member's sync at `now`, for every lane it reports: the script's work, in
    /// the same order (merge the proposal, record this member, summarize the lane
    /// again if its summary is due and renew the key).
    pub(super) fn sync(
        &mut self,
        member: &str,
        reports: &[Report<'_>],
        now: Duration,
        timings: Timings,
    ) -> Vec<Answer> {
        // Keys nobody renewed are gone, as `PEXPIRE` makes them in Redis.
        self.lanes
            .retain(|_, lane| now.saturating_sub(lane.touched) <= timings.key_ttl);
        reports
            .iter()
            .map(|report| {
                let lane = self.lanes.entry(report.key.to_string()).or_default();
                lane.sync(member, report, now, timings)
            })
            .collect()
    }
}

impl Lane {
    fn sync(&mut self, member: &str, report: &Report<'_>, now: Duration, t: Timings) -> Answer {
        let old = self.members.get(member).cloned();
        if let Some(proposal) = report.proposal {
            let since = self.raised_at.map(|at| now.saturating_sub(at));
            let merged = learning::merge(self.shared, &proposal, since, t.hold);
            let landed = proposal.raised_from.is_some()
                && self.shared.is_some_and(|s| s.epoch != merged.epoch);
            if landed {
                self.raised_at = Some(now);
            }
            let was = self.shared.map(|s| s.interval);
            if self.mark.is_none() || was != Some(merged.interval) {
                let count = learning::progress(self.mark, was.unwrap_or_default(), now);
                self.mark = Some((count, now));
            }
            self.shared = Some(merged);
        }
        let seat = match report.seat {
            None => {
                self.seats += 1;
                Some(self.seats)
            }
            Some(held) => {
                self.seats = self.seats.max(held);
                None
            }
        };
        let progress = self
            .shared
            .filter(|s| !s.interval.is_zero() && self.mark.is_some())
            .map(|s| learning::progress(self.mark, s.interval, now));
        let answer = |answer: Answer| Answer {
            progress,
            seat,
            ..answer
        };
        let entry = demand::entry(
            report.demand,
            report.used,
            report.fingerprint,
            report.through,
            report.tried,
            report.capped,
        );
        let changed = old.as_ref().is_none_or(|(_, text)| *text != entry);
        self.changed |= changed;
        self.members
            .insert(member.to_string(), (now, entry.clone()));
        let due = self.summary.as_ref().is_none_or(|(at, expires, _)| {
            now > *expires || (self.changed && now.saturating_sub(*at) >= t.refresh)
        });
        if due {
            self.members
                .retain(|_, (seen, _)| learning::live(now.saturating_sub(*seen), t.member_ttl));
            // Opaque to the members, and never 0 (which means "not counted").
            let at = u64::try_from(now.as_micros()).unwrap_or(u64::MAX - 1) + 1;
            let summary = Summary::of(at, self.members.values().map(|(_, e)| e.as_str()));
            let oldest = self.members.values().map(|(seen, _)| *seen).min();
            self.summary = Some((now, oldest.unwrap_or(now) + t.member_ttl, summary));
            self.changed = false;
            self.touched = now;
            return answer(self.answer(Some(&entry)));
        }
        let counted = old.filter(|(seen, _)| {
            self.summary
                .as_ref()
                .is_some_and(|(at, _, s)| *seen < *at || report.counted_in == s.at)
        });
        answer(self.answer(counted.as_ref().map(|(_, e)| e.as_str())))
    }

    fn answer(&self, counted: Option<&str>) -> Answer {
        match &self.summary {
            Some((_, _, summary)) => summary.answer(self.shared, counted),
            None => Summary::default().answer(self.shared, counted),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::demand::Capped;
    use crate::fleet::learning::Proposal;

    const ZERO: Duration = Duration::ZERO;

    const TTL: Duration = Duration::from_secs(1);
    const KEY_TTL: Duration = Duration::from_secs(12);
    const HOLD: Duration = Duration::from_millis(500);
    const REFRESH: Duration = Duration::from_millis(250);
    const TIMINGS: Timings = Timings {
        member_ttl: TTL,
        key_ttl: KEY_TTL,
        hold: HOLD,
        refresh: REFRESH,
    };

    /// A memory and what each member remembers of it, as the sync task does.
    #[derive(Default)]
    struct Sim {
        memory: Memory,
        counted_in: BTreeMap<String, u64>,
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn report(proposal: Option<Proposal>, demand: f64) -> Report<'static> {
        Report {
            key: "lane",
            demand,
            used: f64::INFINITY,
            through: f64::INFINITY,
            tried: f64::INFINITY,
            fingerprint: "",
            proposal,
            counted_in: 0,
            seat: Some(0),
            capped: None,
        }
    }

    fn sync(sim: &mut Sim, member: &str, at: u64, mut r: Report<'_>) -> Answer {
        r.counted_in = sim.counted_in.get(member).copied().unwrap_or(0);
        let answer = sim.memory.sync(member, &[r], ms(at), TIMINGS).remove(0);
        sim.counted_in.insert(member.to_string(), answer.counted_in);
        answer
    }

    fn raise(interval: u64, from: u64) -> Option<Proposal> {
        Some(Proposal {
            interval: ms(interval),
            epoch: from + 1,
            raised_from: Some(from),
            capped: false,
        })
    }

    #[test]
    fn seats_go_in_order_and_the_progress_does_not_jump_when_the_interval_changes() {
        let mut m = Sim::default();
        let start = Proposal {
            interval: ms(10),
            epoch: 1,
            raised_from: None,
            capped: false,
        };
        let seated = Report {
            seat: None,
            ..report(Some(start), 1.0)
        };
        let a = sync(&mut m, "a", 0, seated.clone());
        assert_eq!((a.seat, a.progress), (Some(1), Some(0.0)));
        let b = sync(&mut m, "b", 100, seated);
        assert_eq!((b.seat, b.progress), (Some(2), Some(10.0)));
        let a = sync(&mut m, "a", 200, report(Some(start), 1.0));
        assert_eq!((a.seat, a.progress), (None, Some(20.0)));
        // A raise to 20 ms at 300 ms: 30 slots of 10 ms, then slots of 20 ms.
        let b = sync(&mut m, "b", 300, report(raise(20, 1), 1.0));
        assert_eq!(b.progress, Some(30.0));
        let a = sync(&mut m, "a", 500, report(None, 1.0));
        assert_eq!(a.progress, Some(40.0));
        // A store that lost the lane (a restart): the seats members hold keep the
        // next one given above them.
        let mut m = Sim::default();
        sync(
            &mut m,
            "a",
            0,
            Report {
                seat: Some(7),
                ..report(Some(start), 1.0)
            },
        );
        let c = sync(&mut m, "c", 100, report(Some(start), 1.0));
        assert_eq!(c.seat, None);
        let c = sync(
            &mut m,
            "c",
            200,
            Report {
                seat: None,
                ..report(Some(start), 1.0)
            },
        );
        assert_eq!(c.seat, Some(8));
    }

    #[test]
    fn one_burst_raises_once_and_another_after_the_hold_raises_again() {
        let mut m = Sim::default();
        let start = Proposal {
            interval: ms(10),
            epoch: 1,
            raised_from: None,
            capped: false,
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
        let mut m = Sim::default();
        sync(&mut m, "a", 0, report(None, 5.0));
        let b = sync(&mut m, "b", 100, report(None, 7.0));
        assert_eq!(b.others, vec![5.0]);
        assert_eq!(m.memory.members("lane", ms(1000), TTL), 2);
        assert_eq!(m.memory.members("lane", ms(1001), TTL), 1);
        let b = sync(&mut m, "b", 1001, report(None, 7.0));
        assert!(b.others.is_empty());
    }

    #[test]
    fn a_change_shows_once_the_summary_is_refreshed_and_each_member_counts_once() {
        let mut m = Sim::default();
        sync(&mut m, "a", 0, report(None, 5.0));
        // The summary of a alone stands until the refresh time: b is not in it yet,
        // and a, counted in it, is not counted again however often it syncs.
        assert_eq!(sync(&mut m, "b", 10, report(None, 7.0)).others, vec![5.0]);
        assert!(sync(&mut m, "a", 100, report(None, 5.0)).others.is_empty());
        assert!(sync(&mut m, "a", 200, report(None, 6.0)).others.is_empty());
        // The first sync past it summarizes both.
        assert_eq!(sync(&mut m, "b", 260, report(None, 7.0)).others, vec![6.0]);
        assert_eq!(sync(&mut m, "a", 300, report(None, 6.0)).others, vec![7.0]);
        assert_eq!(sync(&mut m, "a", 400, report(None, 6.0)).others, vec![7.0]);
        // Nothing changed since: the next summary comes once the oldest entry it
        // counted (a's, written at 200) is past the member TTL.
        assert_eq!(
            sync(&mut m, "b", 1200, report(None, 7.0)).counted_in,
            260_001
        );
        let late = sync(&mut m, "b", 1201, report(None, 7.0));
        assert_eq!((late.counted_in, late.others.len()), (1_201_001, 1));
    }

    #[test]
    fn a_lane_nobody_syncs_expires_and_is_rebuilt_from_the_next_proposal() {
        let mut m = Sim::default();
        let p = |interval| {
            Some(Proposal {
                interval: ms(interval),
                epoch: 4,
                raised_from: None,
                capped: false,
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
        let hour = Duration::from_secs(3600);
        // A long TTL and a hold of 0 or of an hour; a refresh of 0 (every changed
        // entry summarizes) or of an hour (only the first sync does). The steps are a
        // millisecond apart or more in both clocks, so that which entries a summary
        // counted reads the same in both.
        for (pass, (hold, refresh)) in [(ZERO, ZERO), (hour, ZERO), (ZERO, hour)]
            .into_iter()
            .enumerate()
        {
            let mut memory = Memory::new();
            let key = format!("easeoff:check:{pass}:default:state");
            let timings = Timings {
                member_ttl: hour,
                key_ttl: hour * 12,
                hold,
                refresh,
            };
            let mut epoch: u64 = 1;
            let (mut in_redis, mut in_memory) = (BTreeMap::new(), BTreeMap::new());
            for step in 0..300 {
                let member = format!("m{}", rng.usize(0..4));
                let proposal = (step > 0 || rng.bool()).then(|| {
                    let raise = rng.u8(0..4) == 0;
                    let from = if rng.bool() {
                        epoch
                    } else {
                        epoch.saturating_sub(1)
                    };
                    Proposal {
                        interval: Duration::from_micros(rng.u64(1_000..50_000)),
                        epoch: match rng.u8(0..6) {
                            _ if raise => from + 1,
                            0 => epoch.saturating_sub(1),
                            1 => epoch + 1,
                            _ => epoch,
                        },
                        raised_from: raise.then_some(from),
                        capped: raise && rng.bool(),
                    }
                });
                let mut report = Report {
                    key: &key,
                    demand: f64::from(rng.u16(0..200)) / 4.0,
                    used: f64::from(rng.u16(0..200)) / 8.0,
                    through: f64::from(rng.u16(0..200)) / 16.0,
                    tried: f64::from(rng.u16(0..400)) / 16.0,
                    fingerprint: ["", "ab", "cd"][rng.usize(0..3)],
                    proposal,
                    counted_in: in_redis.get(&member).copied().unwrap_or(0),
                    seat: rng.bool().then(|| rng.u64(0..40)),
                    capped: rng.bool().then(|| Capped {
                        cap: f64::from(rng.u16(0..400)) / 4.0,
                        want: f64::from(rng.u16(0..400)) / 8.0,
                    }),
                };
                tokio::time::sleep(Duration::from_millis(1)).await;
                let mut got = store
                    .sync(&member, std::slice::from_ref(&report), timings)
                    .await
                    .unwrap()
                    .remove(0)
                    .unwrap();
                report.counted_in = in_memory.get(&member).copied().unwrap_or(0);
                let now = Duration::from_millis(step);
                let mut want = memory
                    .sync(&member, std::slice::from_ref(&report), now, timings)
                    .remove(0);
                in_redis.insert(member.clone(), got.counted_in);
                in_memory.insert(member.clone(), want.counted_in);
                // Each store's own clock: only whether the summary counted the member
                // compares.
                got.counted_in = u64::from(got.counted_in > 0);
                want.counted_in = u64::from(want.counted_in > 0);
                // Progress counts by each store's clock: only whether there is one.
                got.progress = got.progress.map(|_| 0.0);
                want.progress = want.progress.map(|_| 0.0);
                got.others.sort_by(f64::total_cmp);
                want.others.sort_by(f64::total_cmp);
                assert_eq!(got, want, "pass {pass}, step {step}, {member}: {report:?}");
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
