//! Pauses and rate-limit windows that upstream headers ask for, capped at `max_pause`,
//! on the manual clock.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use http::{HeaderMap, HeaderValue};

use super::*;
use crate::hints::{self, Hint, Pushback, Quota, Reading};
use crate::metrics::Metrics;
use crate::throttle::Signal;

const MINUTE: Duration = Duration::from_secs(60);
const SECOND: Duration = Duration::from_secs(1);

/// Sun, 06 Nov 1994 08:49:37 GMT, RFC 9110's example date.
fn epoch() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777)
}

/// The upstream's decision state on a manual clock, with the runtime its pacer's
/// release task lives on (never driven here: nobody waits for a slot).
fn control() -> (
    Control,
    tokio::runtime::Runtime,
    Arc<crate::clock::ManualClock>,
) {
    let metrics = Metrics::new().unwrap();
    let settings = UpstreamSettings {
        name: "api".into(),
        ..UpstreamSettings::default()
    };
    assert_eq!(settings.max_pause, MINUTE, "the default");
    let (clock, manual) = Clock::manual(epoch());
    let runtime = manual.runtime().unwrap();
    let control = {
        let _inside = runtime.enter();
        Control::new(settings, &metrics, None, fastrand::Rng::with_seed(1), clock)
    };
    (control, runtime, manual)
}

fn slot(control: &Control) -> Slot {
    Slot {
        epoch: 0,
        dispatched_at: control.clock().now(),
        waited: Duration::ZERO,
        held: false,
        interval: Duration::ZERO,
        would: None,
        cost: crate::pacer::ONE,
    }
}

fn header(name: &'static str, value: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(name, HeaderValue::from_str(value).unwrap());
    headers
}

/// Settles an attempt of the default lane with `verdict` and what `reading` says, as
/// the proxy does.
fn answer(control: &Control, verdict: Verdict, reading: Reading) {
    let pass = Pass::one(Arc::clone(control.lanes.default_lane()), slot(control));
    let answer = Answer {
        reading: Some(&reading),
        ..Answer::of(verdict)
    };
    let _ = control.settle(pass, Settle::Answer(&answer));
}

/// Records two throttles carrying `headers`, as the proxy does: the first pause binds
/// only its request, the second (sent within it) the lane.
fn throttle(control: &Control, headers: &HeaderMap) {
    let reading = hints::read(headers, control.clock().wall());
    assert!(
        matches!(reading.wait, Some((Pushback::Delay(_), _))),
        "no delay in {headers:?}: {reading:?}"
    );
    answer(control, Verdict::Throttle(Signal::Status), reading);
    answer(control, Verdict::Throttle(Signal::Status), reading);
}

#[test]
fn one_refusal_holds_its_request_a_second_within_its_pause_the_lane() {
    let (control, _runtime, manual) = control();
    let reading = hints::read(&header("retry-after", "1"), control.clock().wall());
    let refuse = |control: &Control| {
        let pass = Pass::one(Arc::clone(control.lanes.default_lane()), slot(control));
        let answer = Answer {
            reading: Some(&reading),
            ..Answer::of(Verdict::Throttle(Signal::Status))
        };
        control.settle(pass, Settle::Answer(&answer)).hold()
    };
    assert_eq!(
        refuse(&control),
        SECOND,
        "the request waits its Retry-After"
    );
    assert_eq!(control.paused_until(), None, "the lane does not");
    // A success between: the spacing works, and the next refusal is a first again.
    answer(&control, Verdict::Success, Reading::default());
    assert_eq!(refuse(&control), SECOND);
    assert_eq!(control.paused_until(), None);
    // Refused again, sent within that pause: the lane waits too.
    manual.advance(Duration::from_millis(500));
    assert_eq!(refuse(&control), SECOND);
    assert_eq!(
        control.paused_until(),
        Some(epoch() + Duration::from_millis(1500))
    );
}

/// A success carrying `headers`' rate-limit windows.
fn windows(control: &Control, headers: &HeaderMap) {
    let reading = hints::read(headers, control.clock().wall());
    answer(control, Verdict::Success, reading);
}

#[test]
fn every_absurd_pause_header_is_capped_at_max_pause() {
    let cases = [
        ("retry-after", "999999999", Hint::RetryAfter),
        (
            "retry-after",
            "Fri, 31 Dec 9999 23:59:59 GMT",
            Hint::RetryAfter,
        ),
        (
            "x-amz-retry-after",
            "18446744073709551615",
            Hint::AmzRetryAfter,
        ),
        (
            "grpc-retry-pushback-ms",
            "9223372036854775807",
            Hint::GrpcPushback,
        ),
    ];
    for (name, value, hint) in cases {
        let (control, _runtime, _) = control();
        throttle(&control, &header(name, value));
        assert_eq!(
            control.paused_until(),
            Some(epoch() + MINUTE),
            "{name}: {value}"
        );
        assert_eq!(
            control.metrics.hint_capped(hint).get(),
            2,
            "{name}: {value}: each refusal's pause is cut"
        );
        let capped = control.capped_hint().unwrap();
        assert_eq!(capped.header, hint);
        assert!(
            capped.asked > Duration::from_secs(999_999_998),
            "{capped:?}"
        );
    }
}

#[test]
fn a_pause_within_max_pause_is_kept_and_not_counted() {
    let (control, _runtime, _) = control();
    throttle(&control, &header("retry-after", "2"));
    assert_eq!(
        control.paused_until(),
        Some(epoch() + Duration::from_secs(2))
    );
    assert_eq!(control.metrics.hint_capped(Hint::RetryAfter).get(), 0);
    assert_eq!(control.capped_hint(), None);
}

#[test]
fn a_capped_pause_ends_after_max_pause() {
    let (control, _runtime, manual) = control();
    throttle(&control, &header("retry-after", "999999999"));
    manual.advance(MINUTE - Duration::from_millis(1));
    assert!(control.paused_until().is_some());
    assert!(control.capped_hint().is_some());
    manual.advance(Duration::from_millis(1));
    assert_eq!(control.paused_until(), None);
    assert_eq!(control.capped_hint(), None);
}

#[test]
fn nothing_left_with_a_huge_reset_pauses_at_most_max_pause() {
    for reset in ["18446744073709551615", "99999999999"] {
        let (control, _runtime, _) = control();
        let pair = [("ratelimit-remaining", "0"), ("ratelimit-reset", reset)];
        let mut headers = HeaderMap::new();
        for (name, value) in pair {
            headers.insert(name, HeaderValue::from_static(value));
        }
        windows(&control, &headers);
        assert_eq!(control.paused_until(), Some(epoch() + MINUTE), "{reset}");
        assert_eq!(control.metrics.hint_capped(Hint::RateLimit).get(), 1);
        assert_eq!(control.capped_hint().unwrap().header, Hint::RateLimit);
    }
}

#[test]
fn one_left_with_a_far_reset_spaces_by_at_most_max_pause_and_only_that_long() {
    let (control, _runtime, manual) = control();
    // 15 digits: the largest integer a structured field holds.
    let field = header("ratelimit", "remaining=1, reset=999999999999999");
    windows(&control, &field);
    assert_eq!(control.paused_until(), None, "a floor, not a pause");
    assert_eq!(control.rate_limit_floor(), Some((MINUTE, epoch() + MINUTE)));
    assert_eq!(control.metrics.hint_capped(Hint::RateLimit).get(), 1);
    assert_eq!(control.capped_hint().unwrap().header, Hint::RateLimit);
    manual.advance(MINUTE);
    assert_eq!(control.rate_limit_floor(), None);
}

#[test]
fn a_window_with_plenty_left_is_used_and_a_nearly_spent_one_is_spread() {
    let (control, _runtime, manual) = control();
    let apply = |field: &str| windows(&control, &header("ratelimit", field));
    apply(r#""default";r=1;t=30"#);
    let thirty = Duration::from_secs(30);
    assert_eq!(control.rate_limit_floor(), Some((thirty, epoch() + thirty)));
    manual.advance(Duration::from_millis(1));
    // A new window: its reset a minute away.
    apply(r#""default";r=10;t=60"#);
    let go = "10 left, nothing in flight: go";
    assert_eq!(
        control.rate_limit_floor(),
        None,
        "{go}, and the floor is lifted"
    );
    // 10 to 1 in one answer: others spend 9 for each of ours, so 1 holds none of ours.
    apply(r#""default";r=1;t=60"#);
    assert_eq!(
        control.paused_until(),
        Some(epoch() + MINUTE + Duration::from_millis(1))
    );
    assert_eq!(control.metrics.hint_capped(Hint::RateLimit).get(), 0);
}

/// Log lines, captured.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_capped_pause_is_logged_once_per_header_naming_it() {
    let lines = Lines::default();
    let writer = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let (control, _runtime, _) = control();
    // tracing caches each log line's interest for the whole process, and while one
    // dispatcher exists it asks the thread that first reaches the line: a parallel
    // test with no subscriber would mark the line off for this one too. A second,
    // inert dispatcher makes tracing ask every thread's subscriber per event.
    let _anchor = tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default());
    tracing::subscriber::with_default(subscriber, || {
        tracing::callsite::rebuild_interest_cache();
        for _ in 0..3 {
            throttle(&control, &header("retry-after", "999999999"));
        }
        let quota = Quota {
            remaining: 0,
            reset: Duration::from_secs(u64::MAX),
            limit: None,
            refills: false,
        };
        let reading = Reading {
            requests: Some(quota),
            ..Reading::default()
        };
        answer(&control, Verdict::Success, reading);
    });
    let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
    let logged: Vec<&str> = text.lines().filter(|l| l.contains("max_pause")).collect();
    assert_eq!(logged.len(), 2, "{text}");
    assert!(logged[0].contains("header=\"retry-after\""), "{text}");
    assert!(logged[0].contains("asked_s=999999999"), "{text}");
    assert!(logged[1].contains("header=\"ratelimit\""), "{text}");
    assert_eq!(
        control.metrics.hint_capped(Hint::RetryAfter).get(),
        6,
        "two refusals a call"
    );
}
