//! Pacer behaviour in tokio's paused time: exact release instants, no real sleeping.

use super::*;
use std::sync::Mutex;
use tokio::task::JoinHandle;

const MS: Duration = Duration::from_millis(1);

/// Grants recorded as (request number, time since the test's start).
type Grants = Arc<Mutex<Vec<(usize, Duration)>>>;

const OPEN: Limits = Limits::waiting(1000);

fn pacer(mode: Mode) -> Pacer {
    Pacer::new(mode, OPEN)
}

/// A deadline far enough away never to shed.
fn far() -> Instant {
    Instant::now() + Duration::from_secs(3600)
}

/// Starts request `i` and returns once it is waiting in the pacer (or was granted).
async fn start(pacer: &Pacer, i: usize, t0: Instant, grants: &Grants) -> JoinHandle<()> {
    start_costing(pacer, i, ONE, t0, grants).await
}

async fn finish(handles: Vec<JoinHandle<()>>) {
    for h in handles {
        let _ = h.await;
    }
}

fn grants_of(grants: &Grants) -> Vec<(usize, Duration)> {
    grants.lock().unwrap().clone()
}

#[tokio::test(start_paused = true)]
async fn interval_zero_dispatches_at_once() {
    let pacer = pacer(Mode::Pace);
    let t0 = Instant::now();
    for _ in 0..100 {
        let slot = pacer.acquire(far()).await.unwrap();
        assert_eq!(slot.dispatched_at, t0);
        assert_eq!(slot.waited, Duration::ZERO);
        assert!(!slot.held);
    }
}

#[tokio::test(start_paused = true)]
async fn dispatches_are_spaced_by_the_interval_in_arrival_order() {
    let pacer = pacer(Mode::Pace);
    pacer.set_interval(100 * MS, 1);
    let (t0, grants) = (Instant::now(), Grants::default());
    let mut handles = Vec::new();
    for i in 0..5 {
        handles.push(start(&pacer, i, t0, &grants).await);
    }
    finish(handles).await;
    assert_eq!(
        grants_of(&grants),
        [
            (0, Duration::ZERO),
            (1, 100 * MS),
            (2, 200 * MS),
            (3, 300 * MS),
            (4, 400 * MS)
        ]
    );
}

/// A release task woken late lets that release go late; the next slot counts from
/// where it was due, so a busy host keeps the rate, but never comes less than half the
/// interval after the late one.
#[test]
fn a_late_release_gives_the_next_back_up_to_half_the_interval() {
    for (late, expected) in [
        (
            3 * MS,
            [
                (0, Duration::ZERO),
                (1, 103 * MS),
                (2, 200 * MS),
                (3, 300 * MS),
            ],
        ),
        (
            70 * MS,
            [
                (0, Duration::ZERO),
                (1, 170 * MS),
                (2, 220 * MS),
                (3, 320 * MS),
            ],
        ),
    ] {
        let (clock, manual) = Clock::manual(std::time::SystemTime::UNIX_EPOCH);
        let runtime = manual.runtime().unwrap();
        runtime.block_on(async {
            let pacer = Pacer::with_clock(Mode::Pace, OPEN, clock);
            pacer.set_interval(100 * MS, 1);
            let (t0, grants) = (manual.now(), Grants::default());
            let mut handles = Vec::new();
            for i in 0..4 {
                handles.push(start(&pacer, i, t0, &grants).await);
            }
            // The release task sleeps toward 100 ms and is woken `late` after it.
            manual.advance(100 * MS + late);
            finish(handles).await;
            assert_eq!(grants_of(&grants), expected, "{late:?} late");
        });
    }
}

/// A request that comes after its slot goes at once, and the next waits the whole
/// interval after it: the time nobody waited is not given back.
#[tokio::test(start_paused = true)]
async fn a_slot_nobody_waited_for_is_not_given_back() {
    let pacer = pacer(Mode::Pace);
    pacer.set_interval(100 * MS, 1);
    let (t0, grants) = (Instant::now(), Grants::default());
    let first = start(&pacer, 0, t0, &grants).await;
    tokio::time::sleep(250 * MS).await;
    let handles = vec![
        first,
        start(&pacer, 1, t0, &grants).await,
        start(&pacer, 2, t0, &grants).await,
    ];
    finish(handles).await;
    assert_eq!(
        grants_of(&grants),
        [(0, Duration::ZERO), (1, 250 * MS), (2, 350 * MS)]
    );
}

#[tokio::test(start_paused = true)]
async fn a_raise_slows_the_waiting_queue_at_once() {
    let pacer = pacer(Mode::Pace);
    pacer.set_interval(100 * MS, 1);
    let (t0, grants) = (Instant::now(), Grants::default());
    let mut handles = Vec::new();
    for i in 0..3 {
        handles.push(start(&pacer, i, t0, &grants).await);
    }
    tokio::time::sleep(50 * MS).await;
    pacer.set_interval(300 * MS, 2);
    finish(handles).await;
    assert_eq!(
        grants_of(&grants),
        [(0, Duration::ZERO), (1, 300 * MS), (2, 600 * MS)]
    );
}

#[tokio::test(start_paused = true)]
async fn a_lowered_interval_releases_the_queue_sooner() {
    let pacer = pacer(Mode::Pace);
    pacer.set_interval(1000 * MS, 1);
    let (t0, grants) = (Instant::now(), Grants::default());
    let mut handles = Vec::new();
    for i in 0..3 {
        handles.push(start(&pacer, i, t0, &grants).await);
    }
    tokio::time::sleep(10 * MS).await;
    pacer.set_interval(Duration::ZERO, 1);
    finish(handles).await;
    assert_eq!(
        grants_of(&grants),
        [(0, Duration::ZERO), (1, 10 * MS), (2, 10 * MS)]
    );
}

#[tokio::test(start_paused = true)]
async fn a_client_that_leaves_gives_its_slot_to_the_next() {
    let pacer = pacer(Mode::Pace);
    pacer.set_interval(100 * MS, 1);
    let (t0, grants) = (Instant::now(), Grants::default());
    let first = start(&pacer, 0, t0, &grants).await;
    let second = start(&pacer, 1, t0, &grants).await;
    let third = start(&pacer, 2, t0, &grants).await;
    tokio::time::sleep(50 * MS).await;
    second.abort();
    finish(vec![first, third]).await;
    assert_eq!(grants_of(&grants), [(0, Duration::ZERO), (2, 100 * MS)]);
    assert_eq!(pacer.waiting(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_pause_holds_every_dispatch_until_it_ends() {
    let pacer = pacer(Mode::Pace);
    let t0 = Instant::now();
    pacer.pause_until(t0 + 2000 * MS);
    assert_eq!(pacer.paused_until(t0), Some(t0 + 2000 * MS));
    let slot = pacer.acquire(far()).await.unwrap();
    assert_eq!(slot.dispatched_at - t0, 2000 * MS);
    assert_eq!(slot.waited, 2000 * MS);
    assert!(slot.held);
    // Expired: back on the fast path.
    assert_eq!(pacer.paused_until(Instant::now()), None);
    assert_eq!(pacer.acquire(far()).await.unwrap().waited, Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn a_shorter_pause_does_not_cut_a_longer_one() {
    let pacer = pacer(Mode::Pace);
    let t0 = Instant::now();
    pacer.pause_until(t0 + 2000 * MS);
    pacer.pause_until(t0 + 500 * MS);
    assert_eq!(
        pacer.acquire(far()).await.unwrap().dispatched_at - t0,
        2000 * MS
    );
}

#[tokio::test(start_paused = true)]
async fn delay_mode_sleeps_each_request_on_its_own() {
    let pacer = pacer(Mode::Delay);
    pacer.set_interval(100 * MS, 1);
    let (t0, grants) = (Instant::now(), Grants::default());
    let mut handles = Vec::new();
    for i in 0..4 {
        handles.push(start(&pacer, i, t0, &grants).await);
    }
    finish(handles).await;
    let mut got = grants_of(&grants);
    got.sort();
    assert_eq!(
        got,
        [(0, 100 * MS), (1, 100 * MS), (2, 100 * MS), (3, 100 * MS)]
    );
}

#[tokio::test(start_paused = true)]
async fn observe_mode_lets_every_request_go_and_says_what_pacing_would_have_done() {
    let pacer = pacer(Mode::Observe);
    pacer.set_interval(100 * MS, 1);
    let t0 = Instant::now();
    let mut would = Vec::new();
    for _ in 0..4 {
        let slot = pacer.acquire(far()).await.unwrap();
        assert_eq!(slot.dispatched_at, t0, "nothing waits");
        assert!(!slot.held);
        would.push(slot.would);
    }
    assert_eq!(
        would,
        [
            None,
            Some(Would::Wait(100 * MS)),
            Some(Would::Wait(200 * MS)),
            Some(Would::Wait(300 * MS)),
        ]
    );
    // A slot past the deadline would have been shed, and takes no slot.
    let soon = pacer.acquire(t0 + 50 * MS).await.unwrap();
    assert_eq!(soon.would, Some(Would::Shed));
    // A pause holds the shadow schedule, not the request.
    pacer.pause_until(t0 + 2000 * MS);
    let paused = pacer.acquire(far()).await.unwrap();
    assert_eq!(
        (paused.dispatched_at, paused.would),
        (t0, Some(Would::Wait(2000 * MS)))
    );
    assert_eq!(pacer.waiting(), 0);
}

#[tokio::test(start_paused = true)]
async fn slots_carry_the_epoch_in_force_at_release() {
    let pacer = pacer(Mode::Pace);
    assert_eq!(pacer.acquire(far()).await.unwrap().epoch, 0);
    pacer.set_interval(10 * MS, 3);
    let slot = pacer.acquire(far()).await.unwrap();
    assert_eq!((slot.epoch, slot.interval), (3, 10 * MS));
}

#[tokio::test(start_paused = true)]
async fn an_attempt_that_went_before_the_epoch_moved_is_placed_in_the_earlier_one() {
    let pacer = pacer(Mode::Pace);
    let before = Instant::now();
    assert_eq!(pacer.epoch_at(before), 0);
    tokio::time::advance(5 * MS).await;
    pacer.set_interval(10 * MS, 1);
    assert_eq!(pacer.epoch_at(before), 0);
    assert_eq!(pacer.epoch_at(Instant::now()), 1);
    // Only a new epoch moves the time: a lower interval in the same one does not.
    tokio::time::advance(5 * MS).await;
    pacer.set_interval(5 * MS, 1);
    assert_eq!(pacer.epoch_at(Instant::now() - 2 * MS), 1);
}

#[tokio::test(start_paused = true)]
async fn only_requests_the_spacing_delays_count_as_held() {
    let pacer = pacer(Mode::Pace);
    pacer.set_interval(10 * MS, 1);
    // Queued, but the slot was free on arrival: not held.
    assert!(!pacer.acquire(far()).await.unwrap().held);
    assert!(pacer.acquire(far()).await.unwrap().held);
    tokio::time::sleep(50 * MS).await;
    assert!(!pacer.acquire(far()).await.unwrap().held);
}

#[tokio::test(start_paused = true)]
async fn observed_spacing_follows_the_dispatches() {
    let pacer = pacer(Mode::Pace);
    pacer.set_interval(20 * MS, 1);
    let t0 = Instant::now();
    for _ in 0..100 {
        pacer.acquire(far()).await.unwrap();
    }
    // 20 ms apart from 0 to 1980 ms; at 2 s the window holds the 45 from 1100 ms on.
    tokio::time::sleep_until(t0 + 2000 * MS).await;
    assert_eq!(pacer.observed_spacing(Instant::now()), Some(20 * MS));
}

#[tokio::test(start_paused = true)]
async fn beyond_max_waiting_a_request_is_shed_at_once_with_its_slot_time() {
    let pacer = Pacer::new(Mode::Pace, Limits::waiting(10));
    pacer.set_interval(1000 * MS, 1);
    let t0 = Instant::now();
    // The slot at t0 is taken; the next ten wait for t0 + 1 s ... t0 + 10 s.
    pacer.acquire(far()).await.unwrap();
    let grants = Grants::default();
    let mut handles = Vec::new();
    for i in 0..10 {
        handles.push(start(&pacer, i, t0, &grants).await);
    }
    assert_eq!(pacer.waiting(), 10);
    let shed = pacer.acquire(far()).await.unwrap_err();
    assert_eq!(shed.retry_after, 11_000 * MS);
    assert_eq!(Instant::now(), t0, "shed without waiting");
    finish(handles).await;
    assert_eq!(grants_of(&grants).len(), 10);
    assert_eq!(grants_of(&grants)[9], (9, 10_000 * MS));
}

#[tokio::test(start_paused = true)]
async fn a_slot_beyond_the_deadline_is_shed_on_arrival() {
    let pacer = pacer(Mode::Pace);
    pacer.set_interval(1000 * MS, 1);
    let t0 = Instant::now();
    pacer.acquire(far()).await.unwrap();
    let grants = Grants::default();
    let mut handles = Vec::new();
    for i in 0..3 {
        handles.push(start(&pacer, i, t0, &grants).await);
    }
    // Three wait for 1, 2 and 3 s; a fourth would go at 4 s, past its 2 s budget.
    let shed = pacer.acquire(t0 + 2000 * MS).await.unwrap_err();
    assert_eq!(shed.retry_after, 4000 * MS);
    assert_eq!(Instant::now(), t0);
    // One whose budget covers its slot waits for it.
    let slot = pacer.acquire(t0 + 4000 * MS).await.unwrap();
    assert_eq!(slot.dispatched_at - t0, 4000 * MS);
    finish(handles).await;
}

/// Outcomes by request number: dispatch time, or (for a shed) what `shed_value` says.
type Outcomes = Arc<Mutex<Vec<(usize, Result<Duration, Duration>)>>>;

/// Starts `n` requests with `deadline`, each once the previous one waits; a shed is
/// recorded as `shed_value(shed, t0)`.
async fn start_waiters(
    pacer: &Pacer,
    deadlines: &[Instant],
    t0: Instant,
    shed_value: fn(Shed, Instant) -> Duration,
) -> (Outcomes, Vec<JoinHandle<()>>) {
    let outcomes: Outcomes = Arc::default();
    let mut handles = Vec::new();
    for (i, &deadline) in deadlines.iter().enumerate() {
        let (p, o) = (pacer.clone(), Arc::clone(&outcomes));
        handles.push(tokio::spawn(async move {
            let result = p.acquire(deadline).await;
            let outcome = result
                .map(|s| s.dispatched_at - t0)
                .map_err(|shed| shed_value(shed, t0));
            o.lock().unwrap().push((i, outcome));
        }));
        while pacer.waiting() <= i {
            tokio::task::yield_now().await;
        }
    }
    (outcomes, handles)
}

fn outcomes_of(outcomes: &Outcomes) -> Vec<(usize, Result<Duration, Duration>)> {
    let mut got = outcomes.lock().unwrap().clone();
    got.sort_by_key(|(i, _)| *i);
    got
}

#[tokio::test(start_paused = true)]
async fn a_raise_sheds_the_waiters_it_pushes_past_their_deadlines() {
    let pacer = pacer(Mode::Pace);
    pacer.set_interval(100 * MS, 1);
    let t0 = Instant::now();
    pacer.acquire(far()).await.unwrap();
    let (outcomes, handles) =
        start_waiters(&pacer, &[t0 + 1000 * MS; 4], t0, |shed, _| shed.retry_after).await;
    tokio::time::sleep(10 * MS).await;
    // Now 400 ms apart: slots at 400 and 800 ms fit; the third (1200 ms) is late,
    // and the fourth moves up into its place, late too.
    pacer.set_interval(400 * MS, 2);
    finish(handles).await;
    assert_eq!(
        outcomes_of(&outcomes),
        [
            (0, Ok(400 * MS)),
            (1, Ok(800 * MS)),
            (2, Err(1190 * MS)),
            (3, Err(1190 * MS))
        ]
    );
}

/// A provisional spacing (a fleet's cold start) sheds nobody for a slot expected
/// past the deadline: the four wait, and go as soon as the spacing shortens; one whose
/// deadline comes first is shed then, not on arrival. Set back, it sheds at once again.
#[tokio::test(start_paused = true)]
async fn a_provisional_spacing_sheds_only_when_the_deadline_comes() {
    let pacer = pacer(Mode::Pace);
    pacer.set_interval(1000 * MS, 1);
    pacer.set_provisional(true);
    let t0 = Instant::now();
    pacer.acquire(far()).await.unwrap();
    let (outcomes, handles) = start_waiters(&pacer, &[t0 + 2500 * MS; 4], t0, |shed, t0| {
        Instant::now() - t0 + shed.retry_after
    })
    .await;
    tokio::time::sleep(1500 * MS).await;
    // The first went at 1 s; the cold start grows, and the rest go 100 ms apart (what
    // was left of the gap shortened in proportion).
    pacer.set_interval(100 * MS, 1);
    finish(handles).await;
    assert_eq!(
        outcomes_of(&outcomes),
        [
            (0, Ok(1000 * MS)),
            (1, Ok(1550 * MS)),
            (2, Ok(1650 * MS)),
            (3, Ok(1750 * MS))
        ]
    );
    // A spacing that does not shorten: the waiter is shed at its deadline.
    pacer.set_interval(10_000 * MS, 2);
    pacer.acquire(far()).await.unwrap();
    let t1 = Instant::now();
    let shed = pacer.acquire(t1 + 3000 * MS).await.unwrap_err();
    assert_eq!(Instant::now() - t1, 3000 * MS);
    assert_eq!(shed.retry_after, 7000 * MS);
    pacer.set_provisional(false);
    let shed = pacer.acquire(Instant::now() + 3000 * MS).await.unwrap_err();
    assert_eq!(Instant::now() - t1, 3000 * MS, "shed on arrival");
    assert_eq!(shed.retry_after, 7000 * MS);
}

/// While the spacing is provisional, a waiter behind the first in line is shed when
/// its own deadline comes (a client's, sooner than the others'), not when it reaches
/// the front.
#[tokio::test(start_paused = true)]
async fn a_provisional_spacing_sheds_a_waiter_behind_the_first_at_its_deadline() {
    let pacer = pacer(Mode::Pace);
    pacer.set_interval(10_000 * MS, 1);
    pacer.set_provisional(true);
    let t0 = Instant::now();
    pacer.acquire(far()).await.unwrap();
    let deadlines = [t0 + 60_000 * MS, t0 + 3000 * MS, t0 + 60_000 * MS];
    let (outcomes, handles) =
        start_waiters(&pacer, &deadlines, t0, |_, t0| Instant::now() - t0).await;
    finish(handles).await;
    assert_eq!(
        outcomes_of(&outcomes),
        [
            (0, Ok(10_000 * MS)),
            (1, Err(3000 * MS)),
            (2, Ok(20_000 * MS))
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_pause_beyond_the_deadline_is_shed_at_once() {
    let pacer = pacer(Mode::Pace);
    let t0 = Instant::now();
    pacer.pause_until(t0 + 5000 * MS);
    let shed = pacer.acquire(t0 + 1000 * MS).await.unwrap_err();
    assert_eq!(shed.retry_after, 5000 * MS);
    assert_eq!(Instant::now(), t0);
}

#[tokio::test(start_paused = true)]
async fn delay_mode_sheds_a_wait_beyond_the_deadline() {
    let pacer = pacer(Mode::Delay);
    pacer.set_interval(2000 * MS, 1);
    let shed = pacer.acquire(Instant::now() + 1000 * MS).await.unwrap_err();
    assert_eq!(shed.retry_after, 2000 * MS);
}

#[tokio::test(start_paused = true)]
async fn a_rate_limit_floor_spaces_dispatches_until_it_expires() {
    let pacer = pacer(Mode::Pace);
    let t0 = Instant::now();
    pacer.set_floor(50 * MS, t0 + 200 * MS);
    let mut times = Vec::new();
    for _ in 0..6 {
        times.push(pacer.acquire(far()).await.unwrap().dispatched_at - t0);
    }
    // 0, 50, 100, 150; the floor ends at 200 ms, and with it the spacing.
    assert_eq!(
        times,
        [
            Duration::ZERO,
            50 * MS,
            100 * MS,
            150 * MS,
            200 * MS,
            200 * MS
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn the_floor_never_lowers_a_larger_interval() {
    let pacer = pacer(Mode::Pace);
    pacer.set_interval(100 * MS, 1);
    let t0 = Instant::now();
    pacer.set_floor(10 * MS, t0 + 10_000 * MS);
    pacer.acquire(far()).await.unwrap();
    assert_eq!(
        pacer.acquire(far()).await.unwrap().dispatched_at - t0,
        100 * MS
    );
}

#[tokio::test(start_paused = true)]
#[allow(clippy::cast_possible_truncation, reason = "a test's small indices")]
async fn a_drain_serves_the_slots_before_its_deadline_and_sheds_the_rest_at_once() {
    let pacer = pacer(Mode::Pace);
    pacer.set_interval(100 * MS, 1);
    let t0 = Instant::now();
    pacer.acquire(far()).await.unwrap();
    // A shed is recorded as the time it came.
    let (outcomes, handles) =
        start_waiters(&pacer, &[far(); 10], t0, |_, t0| Instant::now() - t0).await;
    tokio::time::sleep(50 * MS).await;
    // Slots at 100 … 1000 ms; the drain ends at 450 ms: four are served, six shed
    // at once (at 50 ms), not when the deadline comes.
    pacer.drain(t0 + 450 * MS);
    let late = pacer.acquire(far()).await.unwrap_err();
    assert_eq!(late.retry_after, 1050 * MS);
    finish(handles).await;
    let got = outcomes_of(&outcomes);
    let expected: Vec<_> = (0..10)
        .map(|i| {
            let outcome = if i < 4 {
                Ok((i as u32 + 1) * 100 * MS)
            } else {
                Err(50 * MS)
            };
            (i, outcome)
        })
        .collect();
    assert_eq!(got, expected);
}

#[tokio::test(start_paused = true)]
async fn a_shed_says_whether_the_queue_the_deadline_or_the_drain_turned_it_away() {
    let pacer = Pacer::new(Mode::Pace, Limits::waiting(1));
    pacer.set_interval(1000 * MS, 1);
    let t0 = Instant::now();
    pacer.acquire(far()).await.unwrap();
    let late = pacer.acquire(t0 + 500 * MS).await.unwrap_err();
    assert_eq!(late.reason, ShedReason::Deadline);
    let grants = Grants::default();
    let waiting = start(&pacer, 0, t0, &grants).await;
    let full = pacer.acquire(far()).await.unwrap_err();
    assert_eq!(full.reason, ShedReason::QueueFull);
    pacer.drain(t0 + 1500 * MS);
    finish(vec![waiting]).await;
    let drained = pacer.acquire(far()).await.unwrap_err();
    assert_eq!(drained.reason, ShedReason::Draining);
}

/// Starts a patient request with `deadline` and returns once it is waiting.
async fn start_patient(
    pacer: &Pacer,
    i: usize,
    deadline: Instant,
    t0: Instant,
    grants: &Grants,
) -> JoinHandle<()> {
    let before = pacer.waiting();
    let (p, g) = (pacer.clone(), Arc::clone(grants));
    let handle = tokio::spawn(async move {
        let slot = p.acquire_with(deadline, true).await.unwrap();
        g.lock().unwrap().push((i, slot.dispatched_at - t0));
    });
    while pacer.waiting() == before {
        tokio::task::yield_now().await;
    }
    handle
}

#[tokio::test(start_paused = true)]
async fn a_patient_request_waits_past_max_waiting_and_only_its_deadline_sheds_it() {
    let pacer = Pacer::new(Mode::Pace, Limits::waiting(1));
    pacer.set_interval(100 * MS, 1);
    let t0 = Instant::now();
    pacer.acquire(far()).await.unwrap();
    let grants = Grants::default();
    let mut handles = vec![start(&pacer, 0, t0, &grants).await];
    let full = pacer.acquire(far()).await.unwrap_err();
    assert_eq!(full.reason, ShedReason::QueueFull);
    // The queue is full, yet a patient request whose slot (200 ms) comes before its
    // deadline waits for it.
    handles.push(start_patient(&pacer, 1, t0 + 250 * MS, t0, &grants).await);
    assert_eq!(pacer.waiting(), 2);
    // The next slot (300 ms) lies past this one's deadline.
    let late = pacer.acquire_with(t0 + 250 * MS, true).await.unwrap_err();
    assert_eq!(late.reason, ShedReason::Deadline);
    assert_eq!(late.retry_after, 300 * MS);
    finish(handles).await;
    assert_eq!(grants_of(&grants), [(0, 100 * MS), (1, 200 * MS)]);
}

#[tokio::test(start_paused = true)]
async fn patient_requests_are_still_bounded_in_number() {
    let pacer = Pacer::new(Mode::Pace, Limits::waiting(1));
    pacer.set_interval(1000 * MS, 1);
    let t0 = Instant::now();
    pacer.acquire(far()).await.unwrap();
    let grants = Grants::default();
    let mut handles = Vec::new();
    for i in 0..PATIENT_WAITING {
        handles.push(start_patient(&pacer, i, far(), t0, &grants).await);
    }
    let full = pacer.acquire_with(far(), true).await.unwrap_err();
    assert_eq!(full.reason, ShedReason::QueueFull);
    assert_eq!(full.retry_after, 1001 * 1000 * MS);
    for h in handles {
        h.abort();
    }
}

/// A fleet member that takes a raise shifts its next slot by up to half a spacing
/// either way; calls before the next dispatch count from now, so they do not add up.
#[tokio::test(start_paused = true)]
async fn a_stagger_shifts_the_next_slot_once() {
    let pacer = pacer(Mode::Pace);
    pacer.set_interval(100 * MS, 1);
    let t0 = Instant::now();
    pacer.acquire(far()).await.unwrap();
    pacer.stagger(0.25);
    let slot = pacer.acquire(far()).await.unwrap();
    assert_eq!(slot.dispatched_at - t0, 125 * MS);
    pacer.stagger(-0.5);
    let slot = pacer.acquire(far()).await.unwrap();
    assert_eq!(slot.dispatched_at - t0, 175 * MS);
    // Twice before a dispatch, 10 ms after the last (175 ms): the first to 200 ms, the
    // second from now (185 ms) to 210 ms, not from 200 ms to 225 ms.
    tokio::time::advance(10 * MS).await;
    pacer.stagger(0.25);
    pacer.stagger(0.25);
    let slot = pacer.acquire(far()).await.unwrap();
    assert_eq!(slot.dispatched_at - t0, 310 * MS);
}

/// A stagger that would put a slot still ahead before now puts it twice as far after
/// now: members whose slots were near do not all go at once, and spread over the
/// spacing after now.
#[tokio::test(start_paused = true)]
async fn a_stagger_never_moves_a_slot_ahead_to_before_now() {
    let pacer = pacer(Mode::Pace);
    pacer.set_interval(100 * MS, 1);
    let t0 = Instant::now();
    pacer.acquire(far()).await.unwrap();
    // 90 ms on, the slot 10 ms away; half a spacing earlier would be 40 ms ago: it
    // goes 80 ms from now.
    tokio::time::advance(90 * MS).await;
    pacer.stagger(-0.5);
    let slot = pacer.acquire(far()).await.unwrap();
    assert_eq!(slot.dispatched_at - t0, 170 * MS);
    // A pacer whose slot is already free is not held by a later one.
    tokio::time::advance(500 * MS).await;
    pacer.stagger(-0.5);
    let slot = pacer.acquire(far()).await.unwrap();
    assert_eq!(slot.dispatched_at - t0, 670 * MS);
}

/// A member placed on the fleet's schedule moves its next slot to the schedule's
/// nearest point not past; in step, to its first point from now.
#[tokio::test(start_paused = true)]
async fn a_placed_slot_goes_to_the_nearest_point_of_the_schedule_not_past() {
    let pacer = pacer(Mode::Pace);
    pacer.set_interval(100 * MS, 1);
    let t0 = Instant::now();
    pacer.acquire(far()).await.unwrap();
    // Next slot at 100 ms; the schedule's points at 30 + 100k ms (30 ms ahead of
    // now): the nearest is 130 ms.
    pacer.place(30 * MS, true);
    let slot = pacer.acquire(far()).await.unwrap();
    assert_eq!(slot.dispatched_at - t0, 130 * MS);
    // Next at 230 ms, now 130 ms; points at 200 + 100k: 200 ms is nearer than 300.
    pacer.place(70 * MS, true);
    let slot = pacer.acquire(far()).await.unwrap();
    assert_eq!(slot.dispatched_at - t0, 200 * MS);
    // Next at 300 ms, now 280 ms; points at 270 + 100k (the next 90 ms ahead): 270 ms
    // is past, so 370 ms.
    tokio::time::advance(80 * MS).await;
    pacer.place(90 * MS, true);
    let slot = pacer.acquire(far()).await.unwrap();
    assert_eq!(slot.dispatched_at - t0, 370 * MS);
    // Next at 470 ms; points at 420 + 100k. In step: the first point from now
    // (370 ms), 420 ms, where the nearest to the slot would be 520 ms.
    pacer.place(50 * MS, false);
    let slot = pacer.acquire(far()).await.unwrap();
    assert_eq!(slot.dispatched_at - t0, 420 * MS);
}

#[test]
fn the_schedule_point_nearest_the_due_slot_and_not_past() {
    // Due at 100, points every 100 from 30: 130 (30 away) over 30 (70 away).
    assert_eq!(on_schedule(100.0, 0.0, 30.0, 100.0), 130.0);
    // Points from 80: 80 (20 back) over 180.
    assert_eq!(on_schedule(100.0, 0.0, 80.0, 100.0), 80.0);
    // 80 is past (now 90): 180.
    assert_eq!(on_schedule(100.0, 90.0, 80.0, 100.0), 180.0);
    // Half way: the later.
    assert_eq!(on_schedule(100.0, 0.0, 50.0, 100.0), 150.0);
    // A point given far off: the same schedule.
    assert_eq!(on_schedule(100.0, 0.0, 1_030.0, 100.0), 130.0);
}

/// Starts request `i` of `cost` and returns once it is waiting (or was granted).
async fn start_costing(
    pacer: &Pacer,
    i: usize,
    cost: u64,
    t0: Instant,
    grants: &Grants,
) -> JoinHandle<()> {
    let before = pacer.waiting() + grants.lock().unwrap().len();
    let (p, g) = (pacer.clone(), Arc::clone(grants));
    let handle = tokio::spawn(async move {
        let slot = p.acquire_costing(far(), false, cost, None).await.unwrap();
        g.lock().unwrap().push((i, slot.dispatched_at - t0));
    });
    while pacer.waiting() + grants.lock().unwrap().len() == before {
        tokio::task::yield_now().await;
    }
    handle
}

#[tokio::test(start_paused = true)]
async fn the_gap_after_a_dispatch_is_the_interval_times_its_cost() {
    let pacer = pacer(Mode::Pace);
    // 10 ms a unit: a request of 6 units holds the next 60 ms, one of half a unit 5 ms.
    pacer.set_interval(10 * MS, 1);
    let (t0, grants) = (Instant::now(), Grants::default());
    let mut handles = Vec::new();
    for (i, cost) in [6 * ONE, ONE / 2, ONE, 2 * ONE].into_iter().enumerate() {
        handles.push(start_costing(&pacer, i, cost, t0, &grants).await);
    }
    finish(handles).await;
    assert_eq!(
        grants_of(&grants),
        [
            (0, Duration::ZERO),
            (1, 60 * MS),
            (2, 65 * MS),
            (3, 75 * MS)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn settling_moves_the_gap_still_ahead_and_never_before_now() {
    let pacer = pacer(Mode::Pace);
    pacer.set_interval(10 * MS, 1);
    let (t0, grants) = (Instant::now(), Grants::default());
    // Reserved at 4 units (40 ms); the answer says 10: the next goes at 100 ms.
    let first = pacer
        .acquire_costing(far(), false, 4 * ONE, None)
        .await
        .unwrap();
    pacer.settle(first.cost, 10 * ONE);
    let second = start_costing(&pacer, 1, ONE, t0, &grants).await;
    finish(vec![second]).await;
    assert_eq!(grants_of(&grants), [(1, 100 * MS)]);
    // Reserved at 8 units from 100 ms; at 120 ms the answer says 1: the rest of the
    // gap (to 110 ms) is already past, so the next goes now, not earlier.
    let third = pacer
        .acquire_costing(far(), false, 8 * ONE, None)
        .await
        .unwrap();
    assert_eq!(third.dispatched_at - t0, 110 * MS);
    tokio::time::advance(10 * MS).await;
    pacer.settle(third.cost, ONE);
    let fourth = pacer
        .acquire_costing(far(), false, ONE, None)
        .await
        .unwrap();
    assert_eq!(fourth.dispatched_at - t0, 120 * MS);
    assert!(!fourth.held);
}

#[tokio::test(start_paused = true)]
async fn no_single_request_holds_the_lane_longer_than_max_gap_whatever_it_cost() {
    let limits = Limits {
        max_gap: Duration::from_secs(2),
        ..OPEN
    };
    let pacer = Pacer::new(Mode::Pace, limits);
    pacer.set_interval(10 * MS, 1);
    let (t0, grants) = (Instant::now(), Grants::default());
    // Reserved at 10^12 units (three centuries at 10 ms), then settled at more
    // still: the next waits 2 s.
    let first = pacer
        .acquire_costing(far(), false, u64::MAX, None)
        .await
        .unwrap();
    pacer.settle(first.cost, u64::MAX);
    let second = start_costing(&pacer, 1, ONE, t0, &grants).await;
    finish(vec![second]).await;
    assert_eq!(grants_of(&grants), [(1, 2000 * MS)]);
    // A spacing of one unit longer than max_gap still holds whole.
    pacer.set_interval(3000 * MS, 2);
    let third = pacer
        .acquire_costing(far(), false, ONE, None)
        .await
        .unwrap();
    let fourth = pacer
        .acquire_costing(far(), false, ONE, None)
        .await
        .unwrap();
    assert_eq!(fourth.dispatched_at - third.dispatched_at, 3000 * MS);
}

#[tokio::test(start_paused = true)]
async fn a_request_floor_spaces_cheap_requests_the_unit_spacing_would_let_through() {
    let pacer = pacer(Mode::Pace);
    pacer.set_interval(10 * MS, 1);
    pacer.set_request_floor(50 * MS, Instant::now() + Duration::from_secs(60));
    let (t0, grants) = (Instant::now(), Grants::default());
    let mut handles = Vec::new();
    // 1 unit (10 ms) is less than the floor; 8 units (80 ms) more.
    for (i, cost) in [ONE, 8 * ONE, ONE].into_iter().enumerate() {
        handles.push(start_costing(&pacer, i, cost, t0, &grants).await);
    }
    finish(handles).await;
    assert_eq!(
        grants_of(&grants),
        [(0, Duration::ZERO), (1, 50 * MS), (2, 130 * MS)]
    );
}

/// A shorter interval shortens what is left of the gap in proportion: halfway
/// through a 100 ms gap, 50 ms become 25 at half the interval, not 0 (a gap of 50
/// counted from the last dispatch would be over at once).
#[tokio::test(start_paused = true)]
async fn a_shorter_interval_shortens_the_rest_of_the_gap_in_proportion() {
    let pacer = pacer(Mode::Pace);
    pacer.set_interval(100 * MS, 1);
    let t0 = Instant::now();
    pacer.acquire(far()).await.unwrap();
    tokio::time::advance(50 * MS).await;
    pacer.set_interval(50 * MS, 1);
    let slot = pacer.acquire(far()).await.unwrap();
    assert_eq!(slot.dispatched_at - t0, 75 * MS);
    // A longer one still counts the whole new gap from the last dispatch.
    pacer.set_interval(100 * MS, 2);
    let slot = pacer.acquire(far()).await.unwrap();
    assert_eq!(slot.dispatched_at - t0, 175 * MS);
}

/// Before the first dispatch a phase places the first slot within the spacing, and
/// the place holds as the spacing shrinks: a tenth of the way into a 1000 s spacing
/// is a tenth of the way into a 10 s one.
#[tokio::test(start_paused = true)]
async fn a_first_slot_phased_into_the_spacing_keeps_its_place_as_it_shrinks() {
    let pacer = pacer(Mode::Pace);
    let t0 = Instant::now();
    pacer.set_interval(1_000_000 * MS, 1);
    pacer.phase_first(0.1);
    pacer.set_interval(10_000 * MS, 1);
    let slot = pacer.acquire(far()).await.unwrap();
    assert_eq!(slot.dispatched_at - t0, 1_000 * MS);
    // Once a request went, a phase changes nothing.
    pacer.phase_first(0.9);
    let slot = pacer.acquire(far()).await.unwrap();
    assert_eq!(slot.dispatched_at - t0, 11_000 * MS);
}

/// A pacer whose requests never wait holds no task (most of a wave of new lanes);
/// its first waiter spawns the release task, which ends with the pacer.
#[tokio::test(start_paused = true)]
async fn a_pacer_holds_a_release_task_only_from_its_first_waiter() {
    let runtime = tokio::runtime::Handle::current().metrics();
    let before = runtime.num_alive_tasks();
    let idle: Vec<Pacer> = (0..100).map(|_| pacer(Mode::Pace)).collect();
    for pacer in &idle {
        pacer.acquire(far()).await.unwrap();
    }
    assert_eq!(
        runtime.num_alive_tasks(),
        before,
        "no task for 100 idle pacers"
    );
    let busy = pacer(Mode::Pace);
    busy.set_interval(100 * MS, 1);
    let (t0, grants) = (Instant::now(), Grants::default());
    let handles = vec![
        start(&busy, 0, t0, &grants).await,
        start(&busy, 1, t0, &grants).await,
    ];
    finish(handles).await;
    assert_eq!(grants_of(&grants), [(0, Duration::ZERO), (1, 100 * MS)]);
    assert_eq!(runtime.num_alive_tasks(), before + 1, "the busy pacer's");
    drop(busy);
    let ended = tokio::time::timeout(Duration::from_secs(1), async {
        while runtime.num_alive_tasks() > before {
            tokio::task::yield_now().await;
        }
    });
    assert!(ended.await.is_ok(), "the release task ends with its pacer");
}

/// Starts request `i` for `who` in a fair pacer; returns once it waits (or went), with
/// its outcome: `Ok(dispatch time)` or the shed.
async fn start_as(
    pacer: &Pacer,
    i: usize,
    who: Ticket,
    t0: Instant,
    grants: &Grants,
) -> JoinHandle<Result<(), Shed>> {
    let before = pacer.waiting() + grants.lock().unwrap().len();
    let (p, g) = (pacer.clone(), Arc::clone(grants));
    let handle = tokio::spawn(async move {
        let slot = p.acquire_costing(far(), false, ONE, Some(who)).await?;
        g.lock().unwrap().push((i, slot.dispatched_at - t0));
        Ok(())
    });
    // A request shed at once neither waits nor is granted.
    while pacer.waiting() + grants.lock().unwrap().len() == before && !handle.is_finished() {
        tokio::task::yield_now().await;
    }
    handle
}

/// Why [`start_as`]'s request `i` for `who` was shed; it must be.
async fn shed_reason(
    pacer: &Pacer,
    i: usize,
    who: Ticket,
    t0: Instant,
    grants: &Grants,
) -> ShedReason {
    let handle = start_as(pacer, i, who, t0, grants).await;
    handle.await.unwrap().unwrap_err().reason
}

fn tenant(tenant: u16, weight: u32, class: i8) -> Ticket {
    Ticket {
        tenant,
        weight,
        class,
    }
}

#[tokio::test(start_paused = true)]
async fn a_fair_pacer_serves_a_higher_class_next_and_weights_by_their_ratio() {
    let limits = Limits {
        fair: Some(100),
        ..OPEN
    };
    let pacer = Pacer::new(Mode::Pace, limits);
    pacer.set_interval(10 * MS, 1);
    let (t0, grants) = (Instant::now(), Grants::default());
    let mut handles = Vec::new();
    // 0 goes at once; 1 to 4 (weight 3) and 5 to 8 (weight 1) wait; then 9, class 1.
    handles.push(start_as(&pacer, 0, tenant(1, 3, 0), t0, &grants).await);
    for i in 1..=4 {
        handles.push(start_as(&pacer, i, tenant(1, 3, 0), t0, &grants).await);
    }
    for i in 5..=8 {
        handles.push(start_as(&pacer, i, tenant(2, 1, 0), t0, &grants).await);
    }
    handles.push(start_as(&pacer, 9, tenant(3, 1, 1), t0, &grants).await);
    for h in handles {
        h.await.unwrap().unwrap();
    }
    let order: Vec<usize> = grants_of(&grants).iter().map(|(i, _)| *i).collect();
    // 1 was already being timed when 9 came: 9 goes before it all the same. Then by
    // tags: tenant 1's 0, 1/3, 2/3, 1 three for each of tenant 2's 0, 1, 2, 3.
    assert_eq!(order, [0, 9, 1, 5, 2, 3, 4, 6, 7, 8]);
    let times: Vec<Duration> = grants_of(&grants).iter().map(|(_, t)| *t).collect();
    assert_eq!(times, (0..10).map(|k| k * 10 * MS).collect::<Vec<_>>());
}

#[tokio::test(start_paused = true)]
async fn a_full_fair_pacer_sheds_the_last_in_line_for_a_newcomer_before_it() {
    let limits = Limits {
        fair: Some(100),
        ..Limits::waiting(3)
    };
    let pacer = Pacer::new(Mode::Pace, limits);
    pacer.set_interval(10 * MS, 1);
    let (t0, grants) = (Instant::now(), Grants::default());
    let mut heavy = Vec::new();
    for i in 0..4 {
        heavy.push(start_as(&pacer, i, tenant(1, 1, 0), t0, &grants).await);
    }
    // Full: a fifth of the heavy tenant would go last itself, and is shed.
    assert_eq!(
        shed_reason(&pacer, 4, tenant(1, 1, 0), t0, &grants).await,
        ShedReason::QueueFull
    );
    // Another tenant's goes before the heavy tenant's last, which is shed instead.
    // (Awaited at once: it takes the shed one's place, so the count of those waiting
    // does not move.)
    let slot = pacer.acquire_costing(far(), false, ONE, Some(tenant(2, 1, 0)));
    let slot = slot.await.unwrap();
    grants.lock().unwrap().push((5, slot.dispatched_at - t0));
    let outcomes: Vec<bool> = futures_outcomes(heavy).await;
    assert_eq!(outcomes, [true, true, true, false]);
    let order: Vec<usize> = grants_of(&grants).iter().map(|(i, _)| *i).collect();
    assert_eq!(order, [0, 1, 5, 2]);
}

async fn futures_outcomes(handles: Vec<JoinHandle<Result<(), Shed>>>) -> Vec<bool> {
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap().is_ok());
    }
    out
}

#[tokio::test(start_paused = true)]
async fn a_tenant_at_its_bound_is_shed_while_others_wait() {
    let limits = Limits {
        fair: Some(2),
        ..OPEN
    };
    let pacer = Pacer::new(Mode::Pace, limits);
    pacer.set_interval(10 * MS, 1);
    let (t0, grants) = (Instant::now(), Grants::default());
    let mut handles = Vec::new();
    // 0 goes at once, 1 is being timed, 2 and 3 are in line.
    for i in 0..4 {
        handles.push(start_as(&pacer, i, tenant(1, 1, 0), t0, &grants).await);
    }
    assert_eq!(
        shed_reason(&pacer, 4, tenant(1, 1, 0), t0, &grants).await,
        ShedReason::QueueFull
    );
    handles.push(start_as(&pacer, 5, tenant(2, 1, 0), t0, &grants).await);
    for h in handles {
        h.await.unwrap().unwrap();
    }
    assert_eq!(pacer.waiting(), 0);
}
