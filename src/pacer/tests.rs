//! Pacer behaviour in tokio's paused time: exact release instants, no real sleeping.

use super::*;
use std::sync::Mutex;
use tokio::task::JoinHandle;

const MS: Duration = Duration::from_millis(1);

/// Grants recorded as (request number, time since the test's start).
type Grants = Arc<Mutex<Vec<(usize, Duration)>>>;

/// Starts request `i` and returns once it is waiting in the pacer (or was granted).
async fn start(pacer: &Pacer, i: usize, t0: Instant, grants: &Grants) -> JoinHandle<()> {
    let before = pacer.waiting() + grants.lock().unwrap().len();
    let (p, g) = (pacer.clone(), Arc::clone(grants));
    let handle = tokio::spawn(async move {
        let slot = p.acquire().await;
        g.lock().unwrap().push((i, slot.dispatched_at - t0));
    });
    while pacer.waiting() + grants.lock().unwrap().len() == before {
        tokio::task::yield_now().await;
    }
    handle
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
    let pacer = Pacer::new(Mode::Pace);
    let t0 = Instant::now();
    for _ in 0..100 {
        let slot = pacer.acquire().await;
        assert_eq!(slot.dispatched_at, t0);
        assert_eq!(slot.waited, Duration::ZERO);
        assert!(!slot.held);
    }
}

#[tokio::test(start_paused = true)]
async fn dispatches_are_spaced_by_the_interval_in_arrival_order() {
    let pacer = Pacer::new(Mode::Pace);
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

#[tokio::test(start_paused = true)]
async fn a_raise_slows_the_waiting_queue_at_once() {
    let pacer = Pacer::new(Mode::Pace);
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
    let pacer = Pacer::new(Mode::Pace);
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
    let pacer = Pacer::new(Mode::Pace);
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
    let pacer = Pacer::new(Mode::Pace);
    let t0 = Instant::now();
    pacer.pause_until(t0 + 2000 * MS);
    assert_eq!(pacer.paused_until(t0), Some(t0 + 2000 * MS));
    let slot = pacer.acquire().await;
    assert_eq!(slot.dispatched_at - t0, 2000 * MS);
    assert_eq!(slot.waited, 2000 * MS);
    assert!(slot.held);
    // Expired: back on the fast path.
    assert_eq!(pacer.paused_until(Instant::now()), None);
    assert_eq!(pacer.acquire().await.waited, Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn a_shorter_pause_does_not_cut_a_longer_one() {
    let pacer = Pacer::new(Mode::Pace);
    let t0 = Instant::now();
    pacer.pause_until(t0 + 2000 * MS);
    pacer.pause_until(t0 + 500 * MS);
    assert_eq!(pacer.acquire().await.dispatched_at - t0, 2000 * MS);
}

#[tokio::test(start_paused = true)]
async fn delay_mode_sleeps_each_request_on_its_own() {
    let pacer = Pacer::new(Mode::Delay);
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
async fn slots_carry_the_epoch_in_force_at_release() {
    let pacer = Pacer::new(Mode::Pace);
    assert_eq!(pacer.acquire().await.epoch, 0);
    pacer.set_interval(10 * MS, 3);
    let slot = pacer.acquire().await;
    assert_eq!((slot.epoch, slot.interval), (3, 10 * MS));
}

#[tokio::test(start_paused = true)]
async fn only_requests_the_spacing_delays_count_as_held() {
    let pacer = Pacer::new(Mode::Pace);
    pacer.set_interval(10 * MS, 1);
    // Queued, but the slot was free on arrival: not held.
    assert!(!pacer.acquire().await.held);
    assert!(pacer.acquire().await.held);
    tokio::time::sleep(50 * MS).await;
    assert!(!pacer.acquire().await.held);
}

#[tokio::test(start_paused = true)]
async fn observed_spacing_follows_the_dispatches() {
    let pacer = Pacer::new(Mode::Pace);
    pacer.set_interval(20 * MS, 1);
    let t0 = Instant::now();
    for _ in 0..100 {
        pacer.acquire().await;
    }
    // 20 ms apart from 0 to 1980 ms; at 2 s the window holds the 45 from 1100 ms on.
    tokio::time::sleep_until(t0 + 2000 * MS).await;
    assert_eq!(pacer.observed_spacing(Instant::now()), Some(20 * MS));
}
