use super::*;

const S: Duration = Duration::from_secs(1);

fn settings(max_attempts: u32) -> RetrySettings {
    RetrySettings {
        max_attempts,
        max_body_bytes: 1 << 20,
        budget_ratio: 0.2,
        budget_min_per_second: 10,
        max_elapsed: 30 * S,
    }
}

fn attempts(max_attempts: u32) -> Attempts {
    Attempts::new(&settings(max_attempts), 10 * S, true, None)
}

fn throttled(policy: &mut Attempts, elapsed: Duration, budget: bool) -> Next {
    match policy.after(Outcome::Throttled { refused: false }, elapsed, || {
        unreachable!("the budget is asked only once the answer is held")
    }) {
        Next::ReadThrottle => {
            policy.after(Outcome::ThrottleRead { held: true }, elapsed, || budget)
        }
        next => next,
    }
}

#[test]
fn a_throttle_is_retried_until_the_attempts_are_used_up() {
    let mut policy = attempts(3);
    let mut seen = Vec::new();
    for _ in 0..3 {
        policy.begin(Duration::ZERO);
        seen.push(throttled(&mut policy, S, true));
    }
    let retry = Next::Retry {
        after: Duration::ZERO,
        cause: Cause::Throttle,
    };
    assert_eq!(
        seen,
        [retry, retry, Next::GiveBack(Stop::Retry(NoRetry::Attempts))]
    );
}

#[test]
fn an_empty_budget_gives_the_throttle_back_and_is_asked_last() {
    let mut policy = attempts(3);
    policy.begin(Duration::ZERO);
    assert_eq!(
        throttled(&mut policy, S, false),
        Next::GiveBack(Stop::Budget)
    );
    // A refusal by the upstream stops the retry before the budget is asked.
    let mut policy = attempts(3);
    policy.begin(Duration::ZERO);
    let next = policy.after(Outcome::Throttled { refused: true }, S, || {
        panic!("budget asked")
    });
    assert_eq!(next, Next::GiveBack(Stop::Retry(NoRetry::Refused)));
}

#[test]
fn a_throttle_too_large_to_hold_goes_to_the_client_without_a_retry() {
    let mut policy = attempts(3);
    policy.begin(Duration::ZERO);
    assert_eq!(
        policy.after(Outcome::ThrottleRead { held: false }, S, || true),
        Next::GiveBack(Stop::NotHeld)
    );
}

#[test]
fn a_shed_retry_gives_back_the_throttle_before_it_and_a_shed_first_attempt_is_shed() {
    let mut policy = attempts(3);
    policy.begin(Duration::ZERO);
    let shed = Outcome::Shed { retry_after: S };
    assert_eq!(
        policy.clone().after(shed, S, || true),
        Next::Shed { retry_after: S }
    );
    throttled(&mut policy, S, true);
    policy.begin(S);
    assert_eq!(policy.after(shed, S, || true), Next::GiveBack(Stop::NoSlot));
}

#[test]
fn a_failed_connection_is_retried_after_the_backoff_while_time_and_budget_allow() {
    let failed = Outcome::ConnectFailed { wait: 2 * S };
    let mut policy = attempts(3);
    policy.begin(Duration::ZERO);
    assert_eq!(
        policy.after(failed, S, || true),
        Next::Retry {
            after: 2 * S,
            cause: Cause::Connect
        }
    );
    policy.begin(3 * S);
    assert_eq!(
        policy.after(failed, 3 * S, || false),
        Next::Unreachable {
            retry_after: 2 * S,
            why: Stop::Budget
        }
    );
    // The backoff would end after max_elapsed.
    assert_eq!(
        policy.after(failed, 29 * S, || true),
        Next::Unreachable {
            retry_after: 2 * S,
            why: Stop::Deadline
        }
    );
}

#[test]
fn a_closed_backoff_turns_the_attempt_away_with_the_time_left() {
    let mut policy = attempts(3);
    policy.begin(Duration::ZERO);
    assert_eq!(
        policy.after(Outcome::BackoffClosed { wait: S }, S, || true),
        Next::Unreachable {
            retry_after: S,
            why: Stop::Backoff
        }
    );
}

#[test]
fn a_retry_waits_for_its_slot_no_later_than_max_elapsed_or_the_clients_deadline() {
    let mut policy = attempts(3);
    assert_eq!(policy.begin(Duration::ZERO), 10 * S);
    assert_eq!(policy.begin(25 * S), 30 * S, "max_elapsed bounds a retry");
    let mut grpc = Attempts::new(&settings(3), 10 * S, true, Some(4 * S));
    assert_eq!(grpc.begin(Duration::ZERO), 4 * S);
}

#[test]
fn a_streamed_body_is_never_sent_again() {
    let mut policy = Attempts::new(&settings(3), 10 * S, false, None);
    policy.begin(Duration::ZERO);
    assert_eq!(
        policy.after(Outcome::Throttled { refused: false }, S, || true),
        Next::GiveBack(Stop::Retry(NoRetry::Streamed))
    );
}

#[test]
fn a_client_that_retries_itself_gets_a_failed_connection_at_once() {
    let failed = Outcome::ConnectFailed { wait: S };
    let mut policy = attempts(3).with_client_retries(true);
    policy.begin(Duration::ZERO);
    assert_eq!(
        policy.after(failed, Duration::ZERO, || panic!("no retry, no budget")),
        Next::Unreachable {
            retry_after: S,
            why: Stop::ClientRetries
        }
    );
}

#[test]
fn an_overload_is_retried_after_a_doubling_backoff_within_max_elapsed() {
    let mut policy = attempts(8);
    let mut waits = Vec::new();
    for _ in 0..6 {
        policy.begin(Duration::ZERO);
        policy.overloaded();
        match throttled(&mut policy, S, true) {
            Next::Retry { after, .. } => waits.push(after.as_millis()),
            next => panic!("{next:?}"),
        }
    }
    assert_eq!(waits, [500, 1000, 2000, 4000, 8000, 8000]);
    // A throttle that is no overload waits only for its slot.
    policy.begin(Duration::ZERO);
    assert!(matches!(
        throttled(&mut policy, S, true),
        Next::Retry {
            after: Duration::ZERO,
            ..
        }
    ));
    // Never past max_elapsed (30 s): 1 s is left at 29 s.
    let mut policy = attempts(8);
    for _ in 0..5 {
        policy.overloaded();
    }
    policy.begin(Duration::ZERO);
    assert!(
        matches!(throttled(&mut policy, 29 * S, true), Next::Retry { after, .. } if after == S)
    );
}

#[test]
fn a_retry_waits_the_pause_its_throttle_asked_and_a_pause_past_max_elapsed_gives_it_back() {
    let mut policy = attempts(3);
    policy.begin(Duration::ZERO);
    policy.asked(S);
    let retry = |after| Next::Retry {
        after,
        cause: Cause::Throttle,
    };
    assert_eq!(throttled(&mut policy, S, true), retry(S));
    // The ask was this throttle's: the next one asks anew.
    policy.begin(S);
    assert_eq!(throttled(&mut policy, 2 * S, true), retry(Duration::ZERO));
    // An overload's backoff and an ask: the longer.
    let mut policy = attempts(3);
    policy.begin(Duration::ZERO);
    policy.overloaded();
    policy.asked(2 * S);
    assert_eq!(throttled(&mut policy, S, true), retry(2 * S));
    // 29 s in, with max_elapsed 30 s, a 2 s pause cannot be waited out.
    let mut policy = attempts(3);
    policy.begin(Duration::ZERO);
    policy.asked(2 * S);
    assert_eq!(
        throttled(&mut policy, 29 * S, true),
        Next::GiveBack(Stop::NoSlot)
    );
}
