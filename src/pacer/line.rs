//! A pacer's waiting line: arrival order, or fair order between tenants.

use std::collections::VecDeque;

use super::Waiter;
use crate::fair::{FairQueue, Key, Ticket};

impl Ticket {
    /// Whom a request without a ticket waits as, in a fair line.
    pub const ANYONE: Ticket = Ticket {
        tenant: 0,
        weight: 1,
        class: 0,
    };
}

/// The waiters of one pacer.
pub(super) enum Line<T> {
    /// First come, first served.
    Arrival(VecDeque<T>),
    /// In fair order (`crate::fair`).
    Fair(FairQueue<T>),
}

impl Line<Waiter> {
    /// An empty line: fair, with at most `per_tenant` waiting for one tenant, or in
    /// arrival order.
    pub(super) fn new(per_tenant: Option<usize>) -> Self {
        match per_tenant {
            Some(most) => Line::Fair(FairQueue::new(most)),
            None => Line::Arrival(VecDeque::new()),
        }
    }

    /// The fair queue, if the line is one.
    pub(super) fn fair_mut(&mut self) -> Option<&mut FairQueue<Waiter>> {
        match self {
            Line::Fair(fair) => Some(fair),
            Line::Arrival(_) => None,
        }
    }

    /// Lets a waiter in, at the end, or at its place in a fair line.
    pub(super) fn push(&mut self, waiter: Waiter) {
        match self {
            Line::Arrival(line) => line.push_back(waiter),
            Line::Fair(fair) => {
                let (who, cost, deadline) = (
                    waiter.ticket.unwrap_or(Ticket::ANYONE),
                    waiter.cost,
                    waiter.deadline,
                );
                fair.push(waiter, who, cost, deadline);
            }
        }
    }

    /// The next waiter to go, with its place in a fair line.
    pub(super) fn pop(&mut self) -> Option<(Option<Key>, Waiter)> {
        match self {
            Line::Arrival(line) => line.pop_front().map(|w| (None, w)),
            Line::Fair(fair) => fair.pop().map(|(key, w, _)| (Some(key), w)),
        }
    }

    /// `waiter`, taken out of a fair line at `key`, back in its place when one who
    /// came since goes before it, and that one out instead (`true` then).
    pub(super) fn overtake(&mut self, key: Key, waiter: Waiter) -> (Key, Waiter, bool) {
        let Line::Fair(fair) = self else {
            return (key, waiter, false);
        };
        if fair.first_key().is_none_or(|first| first > key) {
            return (key, waiter, false);
        }
        let Some((first, next, _)) = fair.pop() else {
            return (key, waiter, false);
        };
        let (who, cost, deadline) = (
            waiter.ticket.unwrap_or(Ticket::ANYONE),
            waiter.cost,
            waiter.deadline,
        );
        fair.put_back(key, waiter, who, cost, deadline);
        (first, next, true)
    }

    /// Offers every waiter, in line order, to `keep`: those it hands back stay.
    pub(super) fn sweep(&mut self, mut keep: impl FnMut(Waiter) -> Option<Waiter>) {
        match self {
            Line::Arrival(line) => {
                for waiter in std::mem::take(line) {
                    if let Some(waiter) = keep(waiter) {
                        line.push_back(waiter);
                    }
                }
            }
            Line::Fair(fair) => fair.sweep(|waiter, _| keep(waiter)),
        }
    }
}
