use std::time::{Duration, SystemTime};

use super::*;
use crate::clock::Clock;
use crate::cost::ONE;

fn ticket(tenant: u16, weight: u32, class: i8) -> Ticket {
    Ticket {
        tenant,
        weight,
        class,
    }
}

fn start() -> Instant {
    Clock::manual(SystemTime::UNIX_EPOCH).0.now()
}

/// Lets `item` in where `place` says, as the pacer does.
fn join(q: &mut FairQueue<&'static str>, item: &'static str, t: Ticket, cost: u64, due: Instant) {
    q.place(t, due).unwrap();
    q.push(item, t, cost, due);
}

fn order(q: &mut FairQueue<&'static str>) -> Vec<&'static str> {
    std::iter::from_fn(|| q.pop().map(|(_, item, _)| item)).collect()
}

#[test]
fn one_tenant_goes_in_arrival_order() {
    let due = start() + Duration::from_secs(30);
    let mut q = FairQueue::new(100);
    for item in ["a", "b", "c"] {
        join(&mut q, item, ticket(1, 1, 0), ONE, due);
    }
    assert_eq!(order(&mut q), ["a", "b", "c"]);
    assert_eq!(q.cost(), 0);
}

#[test]
fn equal_tenants_alternate_whoever_queued_first() {
    let due = start() + Duration::from_secs(30);
    let mut q = FairQueue::new(100);
    for item in ["a1", "a2", "a3", "a4"] {
        join(&mut q, item, ticket(1, 1, 0), ONE, due);
    }
    for item in ["b1", "b2"] {
        join(&mut q, item, ticket(2, 1, 0), ONE, due);
    }
    assert_eq!(order(&mut q), ["a1", "b1", "a2", "b2", "a3", "a4"]);
}

#[test]
fn weights_three_to_one_give_three_to_one() {
    let due = start() + Duration::from_secs(30);
    let mut q = FairQueue::new(100);
    for _ in 0..12 {
        join(&mut q, "heavy", ticket(1, 3, 0), ONE, due);
        join(&mut q, "light", ticket(2, 1, 0), ONE, due);
    }
    let first: Vec<_> = order(&mut q).into_iter().take(16).collect();
    let heavy = first.iter().filter(|i| **i == "heavy").count();
    assert_eq!(heavy, 12, "{first:?}");
}

#[test]
fn shares_count_cost_not_requests() {
    // Tenant 1's calls cost six times tenant 2's: over the first 14 to go, tenant 1
    // sends 2 (12 units) and tenant 2 sends 12.
    let due = start() + Duration::from_secs(30);
    let mut q = FairQueue::new(100);
    for _ in 0..20 {
        join(&mut q, "big", ticket(1, 1, 0), 6 * ONE, due);
        join(&mut q, "small", ticket(2, 1, 0), ONE, due);
    }
    let first: Vec<_> = order(&mut q).into_iter().take(14).collect();
    assert_eq!(
        first.iter().filter(|i| **i == "big").count(),
        2,
        "{first:?}"
    );
}

#[test]
fn a_higher_class_goes_first_whatever_the_tags() {
    let due = start() + Duration::from_secs(30);
    let mut q = FairQueue::new(100);
    for _ in 0..5 {
        join(&mut q, "batch", ticket(1, 1, 0), ONE, due);
    }
    join(&mut q, "web", ticket(2, 1, 1), ONE, due);
    join(&mut q, "low", ticket(3, 1, -3), ONE, due);
    let got = order(&mut q);
    assert_eq!(got.first(), Some(&"web"));
    assert_eq!(got.last(), Some(&"low"));
}

#[test]
fn a_newcomer_is_told_who_is_ahead_and_what_they_cost() {
    let due = start() + Duration::from_secs(30);
    let mut q = FairQueue::new(100);
    for _ in 0..4 {
        join(&mut q, "heavy", ticket(1, 1, 0), 2 * ONE, due);
    }
    // Tenant 2 starts at the virtual time, after the heavy tenant's first only.
    let place = q.place(ticket(2, 1, 0), due).unwrap();
    assert_eq!((place.ahead, place.ahead_cost), (1, 2 * ONE));
    // The heavy tenant's next stands behind all four.
    let place = q.place(ticket(1, 1, 0), due).unwrap();
    assert_eq!((place.ahead, place.ahead_cost), (4, 8 * ONE));
}

#[test]
fn the_last_in_line_is_the_tenant_furthest_over_its_share() {
    let due = start() + Duration::from_secs(30);
    let mut q = FairQueue::new(100);
    for _ in 0..6 {
        join(&mut q, "heavy", ticket(1, 1, 0), ONE, due);
    }
    join(&mut q, "light", ticket(2, 1, 0), ONE, due);
    join(&mut q, "urgent", ticket(3, 1, 2), ONE, due);
    assert_eq!(q.pop_last(), Some(("heavy", ONE)));
    assert!(q.last_key() > q.first_key());
    assert_eq!(q.len(), 7);
    assert_eq!(q.cost(), 7 * ONE);
}

#[test]
fn a_tenant_has_at_most_its_bound_waiting() {
    let due = start() + Duration::from_secs(30);
    let mut q = FairQueue::new(2);
    join(&mut q, "a", ticket(1, 1, 0), ONE, due);
    join(&mut q, "a", ticket(1, 1, 0), ONE, due);
    assert_eq!(q.place(ticket(1, 1, 0), due), Err(Full::Tenant));
    assert!(q.place(ticket(2, 1, 0), due).is_ok());
    // The same tenant in another class is another line.
    assert!(q.place(ticket(1, 1, 1), due).is_ok());
}

#[test]
fn within_a_tenant_the_earliest_deadline_goes_first() {
    let t0 = start();
    let mut q = FairQueue::new(100);
    join(
        &mut q,
        "late",
        ticket(1, 1, 0),
        ONE,
        t0 + Duration::from_secs(30),
    );
    join(
        &mut q,
        "later",
        ticket(1, 1, 0),
        ONE,
        t0 + Duration::from_secs(40),
    );
    join(
        &mut q,
        "other",
        ticket(2, 1, 0),
        ONE,
        t0 + Duration::from_secs(30),
    );
    let soon = t0 + Duration::from_secs(2);
    let place = q.place(ticket(1, 1, 0), soon).unwrap();
    assert_eq!(place.ahead, 0, "it takes the tenant's first place");
    join(&mut q, "soon", ticket(1, 1, 0), ONE, soon);
    // The tenant's places keep their turns with tenant 2: only who fills them moved.
    assert_eq!(order(&mut q), ["soon", "other", "late", "later"]);
}

#[test]
fn a_tenant_back_from_idle_starts_at_the_virtual_time() {
    let due = start() + Duration::from_secs(30);
    let mut q = FairQueue::new(100);
    for _ in 0..4 {
        join(&mut q, "a", ticket(1, 1, 0), ONE, due);
    }
    join(&mut q, "b", ticket(2, 1, 0), ONE, due);
    assert_eq!(order(&mut q), ["a", "b", "a", "a", "a"]);
    // Tenant 2 was idle while tenant 1 went on alone: it starts at the virtual time
    // (no credit for the idle time), where tenant 1's next starts a unit later.
    for _ in 0..3 {
        join(&mut q, "a", ticket(1, 1, 0), ONE, due);
    }
    join(&mut q, "b", ticket(2, 1, 0), ONE, due);
    assert_eq!(order(&mut q), ["b", "a", "a", "a"]);
}

#[test]
fn tenants_with_nobody_waiting_are_forgotten_once_the_virtual_time_passed_them() {
    let due = start() + Duration::from_secs(30);
    let mut q = FairQueue::new(1000);
    for tenant in 0..100 {
        join(&mut q, "once", ticket(tenant, 1, 0), ONE, due);
    }
    assert_eq!(q.flows(), 100);
    for _ in 0..200 {
        join(&mut q, "busy", ticket(1000, 1, 0), ONE, due);
    }
    while q.pop().is_some() {}
    assert!(q.flows() <= PRUNE_AT + 1, "{} kept", q.flows());
}

#[test]
fn a_waiter_put_back_keeps_its_place_behind_a_higher_class() {
    let due = start() + Duration::from_secs(30);
    let mut q = FairQueue::new(100);
    join(&mut q, "a1", ticket(1, 1, 0), ONE, due);
    join(&mut q, "a2", ticket(1, 1, 0), ONE, due);
    let (key, item, cost) = q.pop().unwrap();
    join(&mut q, "web", ticket(2, 1, 1), ONE, due);
    assert!(q.first_key() < Some(key));
    q.put_back(key, item, ticket(1, 1, 0), cost, due);
    assert_eq!(order(&mut q), ["web", "a1", "a2"]);
}

#[test]
fn a_sweep_keeps_order_and_forgets_who_left() {
    let due = start() + Duration::from_secs(30);
    let mut q = FairQueue::new(100);
    for item in ["a1", "a2", "a3"] {
        join(&mut q, item, ticket(1, 1, 0), ONE, due);
    }
    join(&mut q, "b1", ticket(2, 1, 0), 3 * ONE, due);
    let mut seen = Vec::new();
    q.sweep(|item, cost| {
        seen.push((item, cost));
        (item != "a2").then_some(item)
    });
    assert_eq!(
        seen,
        [("a1", ONE), ("b1", 3 * ONE), ("a2", ONE), ("a3", ONE)]
    );
    assert_eq!(q.cost(), 5 * ONE);
    assert_eq!(order(&mut q), ["a1", "b1", "a3"]);
}

#[test]
fn huge_costs_and_weights_do_not_overflow() {
    let due = start() + Duration::from_secs(30);
    let mut q = FairQueue::new(100);
    for _ in 0..3 {
        join(&mut q, "huge", ticket(1, 1, 0), u64::MAX, due);
        join(&mut q, "tiny", ticket(2, 1_000_000, 127), 0, due);
        join(&mut q, "low", ticket(3, 1, i8::MIN), 1, due);
    }
    assert_eq!(order(&mut q).len(), 9);
    assert_eq!(q.cost(), 0);
}
