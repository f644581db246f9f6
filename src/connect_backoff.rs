//! Connection backoff: gRPC's algorithm (doc/connection-backoff.md) in front of an
//! upstream that cannot be reached. After a failed connect, requests are turned away
//! until the backoff has passed; then one request probes with a real attempt; its
//! failure steps the backoff (1 s, 1.6 s, 2.56 s, ... ±20%, at most 120 s), any answer
//! resets it. Pure: time and randomness come in; `upstream.rs` holds the lock.

use std::time::Duration;

use crate::clock::Instant;
use crate::config::ConnectBackoffSettings;
use crate::sleeper::{Exponential, Random};

/// Whether a request may try the upstream now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// No backoff in force.
    Open,
    /// The backoff has passed and this request is the one to try a connection.
    Probe,
    /// Turned away; the backoff (or the probe) should be over after this long.
    Closed(Duration),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Healthy,
    Waiting { until: Instant },
    Probing { since: Instant },
}

/// One upstream's connection backoff.
#[derive(Clone, Debug)]
pub struct ConnectBackoff {
    initial: Duration,
    /// A probe that has neither failed nor succeeded by then is presumed lost (its
    /// client went away) and another request may probe.
    probe_timeout: Duration,
    backoff: Exponential,
    state: State,
}

impl ConnectBackoff {
    /// A healthy upstream.
    pub fn new(settings: &ConnectBackoffSettings) -> ConnectBackoff {
        ConnectBackoff {
            initial: settings.initial,
            probe_timeout: settings.min_connect_timeout,
            backoff: Exponential::new(settings.multiplier, settings.jitter, settings.max),
            state: State::Healthy,
        }
    }

    /// Whether a request may go now.
    pub fn admit(&mut self, now: Instant) -> Admission {
        match self.state {
            State::Healthy => Admission::Open,
            State::Waiting { until } if now < until => Admission::Closed(until - now),
            State::Probing { since }
                if now.saturating_duration_since(since) < self.probe_timeout =>
            {
                Admission::Closed(self.backoff.interval())
            }
            State::Waiting { .. } | State::Probing { .. } => {
                self.state = State::Probing { since: now };
                Admission::Probe
            }
        }
    }

    /// A connection could not be made; returns the new backoff if this failure started
    /// or stepped it (a failure while already waiting changes nothing).
    pub fn on_failure(&mut self, now: Instant, rng: &mut dyn Random) -> Option<Duration> {
        if let State::Waiting { .. } = self.state {
            return None;
        }
        let wait = self.backoff.next(self.initial, rng);
        self.state = State::Waiting { until: now + wait };
        Some(wait)
    }

    /// A connection worked; says whether a backoff was in force.
    pub fn on_success(&mut self) -> bool {
        self.backoff.reset();
        std::mem::replace(&mut self.state, State::Healthy) != State::Healthy
    }

    /// Whether no backoff is in force.
    pub fn is_healthy(&self) -> bool {
        self.state == State::Healthy
    }

    /// How long requests will still be turned away.
    pub fn remaining(&self, now: Instant) -> Duration {
        match self.state {
            State::Waiting { until } => until.saturating_duration_since(now),
            State::Healthy | State::Probing { .. } => Duration::ZERO,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sleeper::testing::Script;

    /// gRPC's connection backoff parameters, which are also the config's defaults.
    fn grpc_defaults() -> ConnectBackoffSettings {
        ConnectBackoffSettings::default()
    }

    /// Probes as often as the backoff allows against an upstream that stays down;
    /// returns the times of the connection attempts, in ms from the start.
    fn attempts(rng: &mut dyn Random, count: usize) -> Vec<u128> {
        let mut b = ConnectBackoff::new(&grpc_defaults());
        let t0 = Instant::now();
        let mut now = t0;
        let mut times = Vec::new();
        assert_eq!(b.admit(now), Admission::Open);
        while times.len() < count {
            match b.admit(now) {
                Admission::Open | Admission::Probe => {
                    times.push((now - t0).as_millis());
                    b.on_failure(now, rng);
                }
                Admission::Closed(wait) => now += wait,
            }
        }
        times
    }

    #[test]
    fn a_dead_upstream_is_tried_at_the_grpc_backoff_times() {
        // With the jitter draw in the middle: 1, 1.6, 2.56, 4.096, 6.5536 s apart.
        let times = attempts(&mut Script::new(&[0.5]), 6);
        assert_eq!(times, [0, 1000, 2600, 5160, 9256, 15809]);
    }

    #[test]
    fn each_wait_stays_within_twenty_percent_of_the_nominal_backoff() {
        let times = attempts(&mut fastrand::Rng::with_seed(11), 14);
        let mut nominal = 1.0f64;
        for (i, pair) in times.windows(2).enumerate() {
            let gap = (pair[1] - pair[0]) as f64 / 1000.0;
            let (low, high) = if i == 0 {
                (1.0, 1.0)
            } else {
                (nominal * 0.8, nominal * 1.2)
            };
            assert!(
                gap >= low - 0.002 && gap <= high + 0.002,
                "wait {i}: {gap} s vs {nominal} s"
            );
            nominal = (nominal * 1.6).min(120.0);
        }
    }

    #[test]
    fn requests_during_the_backoff_are_turned_away_with_the_time_left() {
        let mut b = ConnectBackoff::new(&grpc_defaults());
        let t0 = Instant::now();
        b.on_failure(t0, &mut Script::new(&[0.5]));
        assert_eq!(
            b.admit(t0 + Duration::from_millis(400)),
            Admission::Closed(Duration::from_millis(600))
        );
        assert_eq!(
            b.remaining(t0 + Duration::from_millis(400)),
            Duration::from_millis(600)
        );
        assert_eq!(b.admit(t0 + Duration::from_secs(1)), Admission::Probe);
        // While the probe is out, others wait for it.
        assert!(matches!(
            b.admit(t0 + Duration::from_secs(1)),
            Admission::Closed(_)
        ));
    }

    #[test]
    fn failures_while_waiting_do_not_step_the_backoff() {
        let mut b = ConnectBackoff::new(&grpc_defaults());
        let t0 = Instant::now();
        let rng = &mut Script::new(&[0.5]);
        assert_eq!(b.on_failure(t0, rng), Some(Duration::from_secs(1)));
        assert_eq!(b.on_failure(t0, rng), None);
        assert_eq!(b.remaining(t0), Duration::from_secs(1));
    }

    #[test]
    fn a_lost_probe_lets_another_request_probe() {
        let mut b = ConnectBackoff::new(&grpc_defaults());
        let t0 = Instant::now();
        b.on_failure(t0, &mut Script::new(&[0.5]));
        assert_eq!(b.admit(t0 + Duration::from_secs(1)), Admission::Probe);
        assert_eq!(b.admit(t0 + Duration::from_secs(22)), Admission::Probe);
    }

    #[test]
    fn an_answer_resets_the_backoff() {
        let mut b = ConnectBackoff::new(&grpc_defaults());
        let t0 = Instant::now();
        let rng = &mut Script::new(&[0.5]);
        b.on_failure(t0, rng);
        assert_eq!(b.admit(t0 + Duration::from_secs(1)), Admission::Probe);
        b.on_failure(t0 + Duration::from_secs(1), rng);
        assert_eq!(b.admit(t0 + Duration::from_millis(2600)), Admission::Probe);
        assert!(b.on_success());
        assert!(b.is_healthy());
        assert_eq!(b.admit(t0 + Duration::from_millis(2600)), Admission::Open);
        // The next failure starts over at the initial backoff.
        assert_eq!(
            b.on_failure(t0 + Duration::from_secs(3), rng),
            Some(Duration::from_secs(1))
        );
        assert!(b.on_success());
        assert!(!b.on_success(), "nothing left to reset");
    }
}
