//! Lanes on the manual clock: one table's throttles leave another's lane alone, lanes
//! are bounded and dropped when idle, and an idle lane forgets its throttles.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::Request;

use crate::clock::{Clock, ManualClock};
use crate::concurrency::CapSetting;
use crate::config::{FleetSettings, LaneSettings, UpstreamSettings};
use crate::fleet::{Fleet, Memory};
use crate::hints::{Quota, Reading};
use crate::lane::Answer;
use crate::metrics::Metrics;
use crate::pacer::Slot;
use crate::route::Part;
use crate::throttle::{Preset, Signal, Verdict};
use crate::upstream::{Control, Settle};

fn control(
    preset: Preset,
    lanes: LaneSettings,
) -> (Control, Metrics, tokio::runtime::Runtime, Arc<ManualClock>) {
    control_with(UpstreamSettings {
        name: "api".into(),
        preset,
        lanes,
        ..UpstreamSettings::default()
    })
}

fn control_with(
    settings: UpstreamSettings,
) -> (Control, Metrics, tokio::runtime::Runtime, Arc<ManualClock>) {
    let metrics = Metrics::new().unwrap();
    let (clock, manual) = Clock::manual(SystemTime::UNIX_EPOCH);
    let runtime = manual.runtime().unwrap();
    let control = {
        let _inside = runtime.enter();
        Control::new(settings, &metrics, None, fastrand::Rng::with_seed(1), clock)
    };
    (control, metrics, runtime, manual)
}

fn put_item(table: &str) -> (http::request::Parts, String) {
    let head = Request::post("/")
        .header("x-amz-target", "DynamoDB_20120810.PutItem")
        .body(())
        .unwrap()
        .into_parts()
        .0;
    let body = format!(r#"{{"TableName":"{table}","Item":{{"pk":{{"S":"1"}}}}}}"#);
    (head, body)
}

fn tenant(name: &str) -> http::request::Parts {
    Request::get("/")
        .header("x-tenant", name)
        .body(())
        .unwrap()
        .into_parts()
        .0
}

fn by_tenant(max_lanes: usize, metrics_lanes: usize) -> LaneSettings {
    LaneSettings {
        by: Some(vec![Part::Header(http::HeaderName::from_static(
            "x-tenant",
        ))]),
        max_lanes,
        metrics_lanes,
        ..LaneSettings::default()
    }
}

/// Sends one attempt in `lane_of` and records `verdict` for it.
fn attempt(
    control: &Control,
    runtime: &tokio::runtime::Runtime,
    head: &http::request::Parts,
    body: &[u8],
    verdict: Verdict,
) -> Slot {
    let route = control
        .lanes
        .route(head, Some(&bytes::Bytes::copy_from_slice(body)));
    let far = control.clock().now() + Duration::from_secs(3600);
    let pass = runtime
        .block_on(control.acquire_route(&route, far, false))
        .unwrap();
    let slot = *pass.slot();
    let _ = control.settle(pass, Settle::Answer(&Answer::of(verdict)));
    slot
}

#[test]
fn one_tables_throttles_leave_the_others_lane_at_zero() {
    let (control, _m, runtime, _manual) = control(Preset::DynamoDb, LaneSettings::default());
    let _inside = runtime.enter();
    let (head, slow) = put_item("slow");
    let (_, fast) = put_item("fast");
    for _ in 0..5 {
        attempt(
            &control,
            &runtime,
            &head,
            slow.as_bytes(),
            Verdict::Throttle(Signal::Body),
        );
    }
    let lanes = &control.lanes;
    assert!(!lanes.find("slow:write").unwrap().interval().is_zero());
    let slot = attempt(&control, &runtime, &head, fast.as_bytes(), Verdict::Success);
    assert!(!slot.held, "the fast table waits for nobody");
    assert!(lanes.find("fast:write").unwrap().interval().is_zero());
    assert!(
        control.interval().is_zero(),
        "the default lane is untouched"
    );
    assert_eq!(lanes.count(), 3);
}

#[test]
fn max_lanes_counts_every_lane_down_to_one() {
    for max_lanes in [1, 2, 3, 256] {
        let (control, _m, runtime, _manual) = control(Preset::None, by_tenant(max_lanes, 4));
        let _inside = runtime.enter();
        for i in 0..300 {
            control.lanes.route(&tenant(&format!("t{i}")), None);
            control.lanes.route(&tenant("overflow"), None);
        }
        assert_eq!(control.lanes.count(), max_lanes, "max_lanes = {max_lanes}");
    }
}

#[test]
fn lanes_are_bounded_and_the_rest_share_overflow() {
    let (control, metrics, runtime, _manual) = control(Preset::None, by_tenant(8, 4));
    let _inside = runtime.enter();
    for i in 0..1000 {
        let head = tenant(&format!("t{i}"));
        let route = control.lanes.route(&head, None);
        assert!(route.first.name() == format!("t{i}") || route.first.name() == "overflow");
    }
    assert_eq!(
        control.lanes.count(),
        8,
        "max_lanes, default and overflow included"
    );
    assert!(control.lanes.find("overflow").is_some());
    control.refresh_gauges();
    let text = metrics.render().unwrap();
    let series = text
        .lines()
        .filter(|l| l.starts_with("easeoff_lane_interval_seconds{"))
        .count();
    assert_eq!(series, 4 + 1, "metrics_lanes by name and `other`:\n{text}");
}

/// Two requests in flight: the later one's answer sees the window near its reserve
/// and sets a floor; the earlier one's answer, overtaken, still saw plenty left. It
/// leaves the floor be (lifting it let the requests it held go out in a burst).
#[test]
fn a_stale_answer_does_not_lift_a_floor_a_fresher_one_set() {
    let (control, _metrics, runtime, manual) = control(Preset::None, LaneSettings::default());
    let _inside = runtime.enter();
    let far = control.clock().now() + Duration::from_secs(3600);
    let route = control.lanes.route(&tenant("a"), None);
    let acquire = || {
        let pass = runtime
            .block_on(control.acquire_route(&route, far, false))
            .unwrap();
        manual.advance(Duration::from_millis(10));
        pass
    };
    let (earlier, later) = (acquire(), acquire());
    let window = |remaining| Reading {
        requests: Some(Quota {
            remaining,
            reset: Duration::from_secs(30),
            limit: Some(1000),
            refills: false,
        }),
        ..Reading::default()
    };
    let settle = |pass, reading: Reading| {
        let answer = Answer {
            reading: Some(&reading),
            ..Answer::of(Verdict::Success)
        };
        let _ = control.settle(pass, Settle::Answer(&answer));
    };
    settle(later, window(10));
    assert!(
        control.rate_limit_floor().is_some(),
        "10 of 1000 left: a floor"
    );
    settle(earlier, window(500));
    assert!(
        control.rate_limit_floor().is_some(),
        "the stale answer lifts nothing"
    );
    // A fresher answer that sees plenty left lifts it.
    settle(acquire(), window(500));
    assert_eq!(control.rate_limit_floor(), None);
}

/// A client cycling lane names at `max_lanes` takes `overflow` under the read lock:
/// the lanes are swept for idle ones at most once a second, not once a request.
#[test]
fn new_names_at_max_lanes_go_to_overflow_without_a_sweep_each() {
    let (control, _metrics, runtime, manual) = control(Preset::None, by_tenant(8, 8));
    let _inside = runtime.enter();
    let route = |i: usize| control.lanes.route(&tenant(&format!("t{i}")), None);
    // Six named lanes beside `default`, and a place kept for `overflow`: full.
    let held: Vec<_> = (0..6).map(route).collect();
    let before = control.lanes.sweeps();
    for i in 6..1006 {
        assert_eq!(route(i).first.name(), "overflow");
    }
    assert_eq!(
        control.lanes.sweeps() - before,
        1,
        "one sweep for a thousand names"
    );
    manual.advance(Duration::from_secs(1));
    for i in 1006..2006 {
        assert_eq!(route(i).first.name(), "overflow");
    }
    assert_eq!(
        control.lanes.sweeps() - before,
        2,
        "and one more a second later"
    );
    drop(held);
}

#[test]
fn idle_lanes_are_dropped_and_their_series_withdrawn() {
    let lanes = LaneSettings {
        lane_idle: Duration::from_secs(60),
        ..by_tenant(256, 32)
    };
    let (control, metrics, runtime, manual) = control(Preset::None, lanes);
    let _inside = runtime.enter();
    attempt(&control, &runtime, &tenant("a"), b"", Verdict::Success);
    assert_eq!(control.lanes.count(), 2);
    manual.advance(Duration::from_secs(59));
    control.refresh_gauges();
    assert_eq!(control.lanes.count(), 2, "not idle long enough");
    manual.advance(Duration::from_secs(2));
    control.refresh_gauges();
    assert_eq!(control.lanes.count(), 1, "dropped");
    assert!(!metrics.render().unwrap().contains("lane=\"a\""));
    // A new request makes it again, from scratch.
    attempt(&control, &runtime, &tenant("a"), b"", Verdict::Success);
    assert_eq!(control.lanes.count(), 2);
}

/// 30,000 tenants with `[fleet]`, in waves each dropped as idle before the next,
/// with no sync between (Redis down): each fleet family keeps `metrics_lanes` series
/// by name and `other`'s (before: a dropped lane's series stayed until a sync, and
/// each wave's first lanes named theirs beside them).
#[test]
fn fleet_series_stay_within_metrics_lanes_as_thirty_thousand_lanes_come_and_go() {
    let lanes = LaneSettings {
        lane_idle: Duration::from_secs(1),
        ..by_tenant(100_000, 32)
    };
    let (control, metrics, runtime, manual) = control(Preset::None, lanes);
    let _inside = runtime.enter();
    let settings = FleetSettings::default();
    let fleet = Arc::new(Fleet::driven(settings.clone(), &metrics, "m".into()));
    control.join_fleet(Arc::clone(&fleet));
    let fleet_series = || {
        let text = metrics.render().unwrap();
        text.lines()
            .filter(|l| l.starts_with("easeoff_fleet_members{"))
            .count()
    };
    for wave in 0..30 {
        for i in 0..1000 {
            control.lanes.route(&tenant(&format!("w{wave}-t{i}")), None);
        }
        assert_eq!(control.lanes.count(), 1001);
        assert!(
            fleet_series() <= 32 + 1,
            "wave {wave}: {} series",
            fleet_series()
        );
        // Past the cold hold's spacing (5 s) and `lane_idle`.
        manual.advance(Duration::from_secs(10));
        control.lanes.drop_idle(control.clock().now());
        assert_eq!(control.lanes.count(), 1);
    }
    let mut memory = Memory::new();
    fleet.sync_in(
        &mut memory,
        Duration::from_secs(300),
        Some(settings.sync_interval),
    );
    assert_eq!(fleet_series(), 2, "`default` and `other`");
}

#[test]
fn after_a_storm_and_five_idle_minutes_the_next_request_goes_at_once() {
    // `responsive`: its raises reach past a second in 25 throttles.
    let (control, _m, runtime, manual) = control_with(UpstreamSettings {
        name: "api".into(),
        sleeper: crate::sleeper::Settings::seed_defaults(),
        ..UpstreamSettings::default()
    });
    let _inside = runtime.enter();
    let head = tenant("x");
    for _ in 0..25 {
        // Each throttle lands in a fresh epoch: a storm that keeps raising (from
        // `min_interval`: one dispatch a second is no rate to start from;
        // the lane forgets once it has left its slots unused for `idle_decay`, so a
        // storm that reached `max_interval` takes that long and 30 s more).
        let route = control.lanes.route(&head, None);
        let lane = Arc::clone(&route.first);
        let slot = Slot {
            epoch: lane.pacer.epoch(),
            ..runtime
                .block_on(control.acquire_route(
                    &route,
                    control.clock().now() + Duration::from_secs(86_400),
                    false,
                ))
                .unwrap()
                .slot()
                .to_owned()
        };
        lane.record(&slot, Some(Verdict::Throttle(Signal::Status)), None, false);
    }
    let interval = control.interval();
    assert!(interval > Duration::from_secs(1), "{interval:?}");
    manual.advance(Duration::from_secs(300));
    let route = control.lanes.route(&head, None);
    let far = control.clock().now() + Duration::from_secs(3600);
    let pass = runtime
        .block_on(control.acquire_route(&route, far, false))
        .unwrap();
    assert!(pass.slot().waited < Duration::from_millis(10));
    assert!(!pass.slot().held);
    assert!(control.interval().is_zero());
}

#[test]
fn a_lane_in_use_does_not_forget() {
    let lanes = LaneSettings {
        idle_decay: Duration::from_secs(30),
        ..LaneSettings::default()
    };
    let (control, _m, runtime, manual) = control(Preset::None, lanes);
    let _inside = runtime.enter();
    let head = tenant("x");
    attempt(
        &control,
        &runtime,
        &head,
        b"",
        Verdict::Throttle(Signal::Status),
    );
    let raised = control.interval();
    assert!(!raised.is_zero());
    manual.advance(Duration::from_secs(10));
    control.refresh_gauges();
    assert_eq!(control.interval(), raised, "10 s is not idle");
}

#[test]
fn idle_decay_zero_never_forgets() {
    let lanes = LaneSettings {
        idle_decay: Duration::ZERO,
        ..LaneSettings::default()
    };
    let (control, _m, runtime, manual) = control(Preset::None, lanes);
    let _inside = runtime.enter();
    attempt(
        &control,
        &runtime,
        &tenant("x"),
        b"",
        Verdict::Throttle(Signal::Status),
    );
    let raised = control.interval();
    manual.advance(Duration::from_secs(3600));
    control.refresh_gauges();
    assert_eq!(control.interval(), raised);
}

#[test]
fn the_slowest_lane_is_the_headline_and_remembers_what_paused_it() {
    let (control, _metrics, runtime, _manual) = control(Preset::DynamoDb, LaneSettings::default());
    let _inside = runtime.enter();
    let lanes = &control.lanes;
    assert_eq!(lanes.slowest().name(), "default", "none paced");
    let slow = lanes.get("slow:write");
    let fast = lanes.get("fast:write");
    slow.pacer.set_interval(Duration::from_millis(20), 1);
    fast.pacer.set_interval(Duration::from_millis(5), 1);
    assert_eq!(lanes.slowest().name(), "slow:write");
    assert_eq!(slow.pause_header(), None);
    slow.paused_by(crate::hints::Hint::AmzRetryAfter);
    assert_eq!(slow.pause_header(), Some(crate::hints::Hint::AmzRetryAfter));
    assert_eq!(fast.pause_header(), None);
}

#[test]
fn a_token_window_spaces_a_token_lane_per_token_and_a_request_window_per_request() {
    let lanes = LaneSettings::defaults_for(Preset::OpenAi);
    let (control, _metrics, runtime, manual) = control(Preset::OpenAi, lanes);
    let _inside = runtime.enter();
    manual.advance(Duration::from_secs(1));
    let head = Request::post("/v1/chat/completions")
        .body(())
        .unwrap()
        .into_parts()
        .0;
    // 396 characters of prompt and `user`: 100 tokens, and 20 of answer.
    let body = format!(
        r#"{{"model":"m","max_tokens":20,"messages":[{{"role":"user","content":"{}"}}]}}"#,
        "x".repeat(396)
    );
    let slot = attempt(&control, &runtime, &head, body.as_bytes(), Verdict::Success);
    assert_eq!(slot.cost, 120);
    let lane = control.lanes.find("m").unwrap();
    let now = control.clock().now();
    let window = |remaining, limit| Quota {
        remaining,
        reset: Duration::from_secs(60),
        limit: Some(limit),
        refills: true,
    };
    // A spent bucket of 120,000 tokens a minute is paced at 90 % of its refill:
    // 60 s / 108,000 a token, 555.6 ms per thousand.
    let answer = |requests, tokens| {
        let reading = Reading {
            requests,
            tokens,
            wait: None,
        };
        let answer = Answer {
            reading: Some(&reading),
            ..Answer::of(Verdict::Success)
        };
        let far = now + Duration::from_secs(3600);
        let route = control
            .lanes
            .route(&head, Some(&bytes::Bytes::from(body.clone())));
        let pass = runtime
            .block_on(control.acquire_route(&route, far, false))
            .unwrap();
        let _ = control.settle(pass, Settle::Answer(&answer));
    };
    answer(None, Some(window(0, 120_000)));
    let (per_unit, _) = lane.pacer.floor(now).unwrap();
    assert_eq!(per_unit.as_micros(), 555_556);
    // No request window: no least gap per request.
    assert_eq!(lane.pacer.request_floor(now), Duration::ZERO);
    // A spent request window beside a full token window: a gap per request.
    answer(Some(window(0, 600)), Some(window(120_000, 120_000)));
    assert_eq!(
        lane.pacer.floor(now).map_or(Duration::ZERO, |f| f.0),
        Duration::ZERO
    );
    let per_request = lane.pacer.request_floor(now);
    assert_eq!(per_request.as_micros(), 111_111, "60 s / 540");
}

/// In observe mode a throttle that pacing would have avoided is a success to the
/// controller, but the fleet's count of what got through goes by the answer: it was
/// refused.
#[test]
fn an_observed_throttle_pacing_would_have_avoided_did_not_get_through() {
    let (control, metrics, runtime, manual) = control_with(UpstreamSettings {
        name: "api".into(),
        sleeper: crate::sleeper::Settings {
            mode: crate::sleeper::Mode::Observe,
            ..crate::sleeper::Settings::seed_defaults()
        },
        ..UpstreamSettings::default()
    });
    let _inside = runtime.enter();
    let fleet = Arc::new(Fleet::driven(
        FleetSettings::default(),
        &metrics,
        "m".into(),
    ));
    control.join_fleet(Arc::clone(&fleet));
    let head = tenant("x");
    let answer = |verdict| {
        manual.advance(Duration::from_millis(10));
        attempt(&control, &runtime, &head, b"", verdict);
    };
    (0..10).for_each(|_| answer(Verdict::Success));
    // At interval 0 pacing would have met it: the lane learns an interval.
    answer(Verdict::Throttle(Signal::Status));
    assert!(!control.interval().is_zero());
    (0..10).for_each(|_| answer(Verdict::Success));
    // Now the interval is above the successes' spacing: pacing would have avoided it.
    answer(Verdict::Throttle(Signal::Status));
    let link = control
        .lanes
        .default_lane()
        .fleet
        .get()
        .map(|link| link.counts());
    assert_eq!(link, Some((2, 20)), "(refused, got through)");
}

/// In a fleet, a lane that learns starts cold (paced at the cold start's rate until
/// the fleet has a measure), unless a learned cap bounds its first wave already.
#[test]
fn a_fleet_lane_under_a_learned_cap_does_not_start_cold() {
    for (cap, cold) in [(CapSetting::Off, true), (CapSetting::Learn, false)] {
        // With `github`, alone, the cap would start at GitHub's documented 100.
        let preset = if cap == CapSetting::Learn {
            Preset::GitHub
        } else {
            Preset::None
        };
        let (control, metrics, runtime, _manual) = control_with(UpstreamSettings {
            name: "api".into(),
            preset,
            max_in_flight: cap,
            ..UpstreamSettings::default()
        });
        let _inside = runtime.enter();
        if cap == CapSetting::Learn {
            assert_eq!(control.flights().map(|f| f.cap()), Some(100));
        }
        let settings = FleetSettings::default();
        let fleet = Arc::new(Fleet::driven(settings.clone(), &metrics, "m".into()));
        control.join_fleet(Arc::clone(&fleet));
        let mut memory = Memory::new();
        fleet.sync_in(
            &mut memory,
            settings.sync_interval,
            Some(settings.sync_interval),
        );
        let lane = control.lanes.default_lane();
        let last = lane.fleet.get().and_then(|link| link.last());
        assert_eq!(last.is_some_and(|d| d.cold), cold, "{cap}");
        if cap == CapSetting::Learn {
            // A fleet member's cap starts small: the limit is the fleet's.
            assert_eq!(
                control.flights().map(|f| f.cap()),
                Some(crate::concurrency::INITIAL)
            );
        }
    }
}
