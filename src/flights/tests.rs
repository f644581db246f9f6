//! The cap in tokio's paused time: who goes, who waits, who is shed, and how a cut
//! takes permits back only as flights land.

use super::*;
use crate::concurrency::INITIAL;

const MS: Duration = Duration::from_millis(1);

fn fixed(n: u32, max_waiting: usize) -> Arc<Flights> {
    Flights::new(CapSetting::Fixed(n), max_waiting, Clock::Tokio, None).unwrap()
}

fn far() -> Instant {
    Instant::now() + Duration::from_secs(3600)
}

#[test]
fn off_is_no_cap() {
    assert!(Flights::new(CapSetting::Off, 10, Clock::Tokio, None).is_none());
}

#[tokio::test(start_paused = true)]
async fn a_fixed_cap_lets_that_many_out_and_the_next_waits_its_turn() {
    let flights = fixed(2, 10);
    let a = flights.take(far()).await.unwrap();
    let b = flights.take(far()).await.unwrap();
    assert_eq!((a.out(), b.out(), flights.out()), (1, 2, 2));
    let waiting = {
        let flights = Arc::clone(&flights);
        tokio::spawn(async move { flights.take(far()).await.map(|f| f.out()) })
    };
    tokio::time::sleep(MS).await;
    assert_eq!(flights.waiting(), 1);
    assert!(!waiting.is_finished());
    drop(a);
    assert_eq!(waiting.await.unwrap(), Ok(2));
    assert_eq!(flights.waiting(), 0);
    drop(b);
    assert_eq!(flights.out(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_waiter_is_shed_at_its_deadline_and_past_max_waiting_at_once() {
    let flights = fixed(1, 1);
    let _out = flights.take(far()).await.unwrap();
    let deadline = Instant::now() + 50 * MS;
    let waiter = {
        let flights = Arc::clone(&flights);
        tokio::spawn(async move { flights.take(deadline).await.map(|f| f.out()) })
    };
    tokio::time::sleep(MS).await;
    let full = flights.take(far()).await.unwrap_err();
    assert_eq!(full.reason, ShedReason::QueueFull);
    assert_eq!(full.retry_after, Duration::from_secs(1));
    let shed = waiter.await.unwrap().unwrap_err();
    assert_eq!(shed.reason, ShedReason::Deadline);
    assert_eq!(Instant::now(), deadline);
}

#[tokio::test(start_paused = true)]
async fn a_learned_cap_starts_at_initial_and_grows_with_the_cap_full() {
    let moves = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&moves);
    let on_move: OnMove = Box::new(move |cap, why| seen.lock().unwrap().push((cap, why)));
    let flights = Flights::new(CapSetting::Learn, 10, Clock::Tokio, Some(on_move)).unwrap();
    assert_eq!(flights.cap(), crate::concurrency::INITIAL);
    let mut out = Vec::new();
    for _ in 0..4 {
        out.push(flights.take(far()).await.unwrap());
    }
    assert!(flights.take(Instant::now()).await.is_err());
    let first = out.remove(0);
    assert_eq!(flights.told(&first, Told::Success(10 * MS)), Move::Hold);
    let fourth = out.pop().unwrap();
    assert_eq!(flights.told(&fourth, Told::Success(10 * MS)), Move::Grow);
    assert_eq!(flights.cap(), 5);
    // The new permit is there at once: two more go with three out.
    drop((first, fourth));
    let _a = flights.take(Instant::now()).await.unwrap();
    let _b = flights.take(Instant::now()).await.unwrap();
    let _c = flights.take(Instant::now()).await.unwrap();
    assert_eq!(flights.out(), 5);
    assert!(flights.take(Instant::now()).await.is_err());
    assert_eq!(*moves.lock().unwrap(), vec![(5, Why::Grew)]);
}

#[tokio::test(start_paused = true)]
async fn a_cut_takes_permits_back_as_flights_land() {
    let flights = Flights::new(CapSetting::Learn, 10, Clock::Tokio, None).unwrap();
    let mut out = Vec::new();
    for _ in 0..4 {
        out.push(flights.take(far()).await.unwrap());
    }
    // The fourth out is refused: three pass.
    let fourth = out.pop().unwrap();
    assert_eq!(
        flights.told(&fourth, Told::Refused),
        Move::Cut(Why::Refused)
    );
    assert_eq!(flights.cap(), 3);
    // No permit was free: the fourth's landing pays the debt.
    drop(fourth);
    assert_eq!(flights.out(), 3);
    assert!(flights.take(Instant::now()).await.is_err());
    drop(out.pop());
    let _again = flights.take(Instant::now()).await.unwrap();
    assert!(flights.take(Instant::now()).await.is_err());
}

#[tokio::test(start_paused = true)]
async fn a_share_moves_a_learned_cap_both_ways_past_its_slow_start() {
    let flights = Flights::new(CapSetting::Learn, 10, Clock::Tokio, None).unwrap();
    // In a slow start that its requests fill, a share only raises the cap.
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(flights.take(far()).await.unwrap());
    }
    flights.adopt(1.0, 100.0, 0.0);
    assert_eq!(flights.cap(), 4);
    assert_eq!(flights.capped(), Some((4.0, 4.0)));
    let fourth = held.pop().unwrap();
    flights.told(&fourth, Told::Refused);
    drop(fourth);
    assert_eq!(flights.cap(), 3);
    flights.adopt(1.0, 100.0, 0.0);
    assert_eq!(flights.cap(), 1);
    // Three out against a cap of one: the first two landings pay the debt.
    drop(held);
    let _one = flights.take(Instant::now()).await.unwrap();
    assert!(flights.take(Instant::now()).await.is_err());
    flights.adopt(3.5, 100.0, 0.0);
    assert_eq!(flights.cap(), 3);
    assert_eq!(flights.capped(), Some((3.5, 1.0)));
    let _two = flights.take(Instant::now()).await.unwrap();
    let _three = flights.take(Instant::now()).await.unwrap();
    assert!(flights.take(Instant::now()).await.is_err());
    // A fixed cap does not move, and has nothing to share.
    let fixed = fixed(2, 10);
    fixed.adopt(9.0, 100.0, 0.0);
    assert_eq!((fixed.cap(), fixed.capped()), (2, None));
}

#[tokio::test(start_paused = true)]
async fn the_cap_remembers_why_it_last_moved_and_counts_its_moves() {
    let flights = Flights::new(CapSetting::Learn, 10, Clock::Tokio, None).unwrap();
    assert_eq!(flights.last_move(), None);
    let mut out = Vec::new();
    for _ in 0..4 {
        out.push(flights.take(far()).await.unwrap());
    }
    let fourth = out.pop().unwrap();
    flights.told(&fourth, Told::Refused);
    assert_eq!(flights.last_move(), Some(Why::Refused));
    flights.adopt(7.0, 100.0, 0.0);
    assert_eq!(flights.last_move(), Some(Why::Fleet));
    // It counts its moves by why (a lane's cap has no counter of its own on /metrics).
    flights.adopt(7.0, 100.0, 0.0);
    flights.adopt(5.0, 100.0, 0.0);
    let moves = Why::ALL.map(|why| flights.moves(why));
    assert_eq!(moves, [0, 1, 0, 2], "grew, refused, latency, fleet");
    // A fixed cap never moves.
    let fixed = fixed(2, 10);
    fixed.adopt(9.0, 100.0, 0.0);
    assert_eq!(fixed.last_move(), None);
    assert!(Why::ALL.iter().all(|why| fixed.moves(*why) == 0));
}

#[tokio::test(start_paused = true)]
async fn past_the_drain_a_waiter_is_shed_as_draining() {
    let flights = fixed(1, 10);
    let _out = flights.take(far()).await.unwrap();
    let start = Instant::now();
    flights.drain(start + 10 * MS);
    // A deadline before the drain's end is the request's own.
    let shed = flights.take(start + 5 * MS).await.unwrap_err();
    assert_eq!(shed.reason, ShedReason::Deadline);
    let shed = flights.take(far()).await.unwrap_err();
    assert_eq!(shed.reason, ShedReason::Draining);
    assert_eq!(Instant::now(), start + 10 * MS);
}

#[tokio::test(start_paused = true)]
async fn a_fresh_learned_cap_starts_over_at_a_known_limit_or_small() {
    let flights = Flights::new(CapSetting::Learn, 10, Clock::Tokio, None).unwrap();
    flights.start(Some(100));
    assert_eq!((flights.cap(), flights.ceiling()), (100, Some(100)));
    let out = take_n(&flights, 100).await;
    assert!(flights.take(Instant::now()).await.is_err());
    drop(out);
    // A fleet member starts small: the limit is the fleet's.
    flights.start(None);
    assert_eq!((flights.cap(), flights.ceiling()), (INITIAL, None));
    let _four = take_n(&flights, 4).await;
    assert!(flights.take(Instant::now()).await.is_err());
    // Once an answer came, what it learned stays.
    let one = Flights::new(CapSetting::Learn, 10, Clock::Tokio, None).unwrap();
    let flight = one.take(far()).await.unwrap();
    one.told(&flight, Told::Success(Duration::from_millis(100)));
    one.start(Some(100));
    assert_eq!(one.cap(), INITIAL);
    // A fixed cap has nothing to start over.
    let fixed = fixed(2, 10);
    fixed.start(Some(100));
    assert_eq!(fixed.cap(), 2);
}

/// `n` flights, taken at once.
async fn take_n(flights: &Arc<Flights>, n: usize) -> Vec<Flight> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(flights.take(far()).await.unwrap());
    }
    out
}

#[tokio::test(start_paused = true)]
async fn a_flight_carries_the_epoch_it_took_off_in() {
    let flights = Flights::new(CapSetting::Learn, 10, Clock::Tokio, None).unwrap();
    let mut out = take_n(&flights, 4).await;
    let fourth = out.pop().unwrap();
    assert_eq!(
        flights.told(&fourth, Told::Refused),
        Move::Cut(Why::Refused)
    );
    drop(fourth);
    drop(out.pop());
    // Sent before the cut: its refusal cuts nothing more.
    let before = out.pop().unwrap();
    assert_eq!(flights.told(&before, Told::Refused), Move::Hold);
    drop(before);
    // Sent after it: its refusal is news.
    let after = flights.take(far()).await.unwrap();
    assert_eq!(flights.told(&after, Told::Refused), Move::Cut(Why::Refused));
}
