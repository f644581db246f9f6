//! The order in which one lane's waiting requests go when its callers are told apart
//! (`[upstream.fairness]`): strict priority between classes; between the tenants of a
//! class, start-time fair queueing weighted by tenant and counted in the lane's cost
//! units; within a tenant, earliest deadline first (arrival order where deadlines tie).
//!
//! Start-time fair queueing (Goyal, Vin and Cheng, 1996): a request is tagged when it
//! arrives with the later of its class's virtual time and its tenant's last finish tag,
//! and its tenant's finish tag moves on by its cost over the tenant's weight; the
//! smallest tag goes first, and the class's virtual time is the tag of the request
//! that went last. A tenant that asks for less than its share finds its tag at the
//! virtual time and goes next; a tenant flat out is served in proportion to its
//! weight; nothing is kept for a tenant that has nothing waiting but its finish tag.
//! Sorting by the tag alone also gives every waiter its place in line, so the pacer
//! can tell a newcomer its slot (and shed it when that lies past its deadline), and
//! the waiter furthest over its share is simply the last one.

use std::collections::{BTreeMap, HashMap, VecDeque};

use crate::clock::Instant;

/// Who a waiting request is for: its tenant (an index the lane's registry gave),
/// the tenant's weight, and its priority class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ticket {
    /// The tenant's index.
    pub tenant: u16,
    /// Its weight, at least 1.
    pub weight: u32,
    /// Its priority class: higher goes first.
    pub class: i8,
}

/// A waiter's place in line: smaller goes first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Key {
    /// 127 less the class (0 for class 127, 255 for class -128): higher classes first.
    rank: u8,
    tag: u128,
    seq: u64,
}

impl Key {
    /// The class this key is in.
    fn class(self) -> i8 {
        i8::try_from(127 - i16::from(self.rank)).unwrap_or(i8::MIN)
    }
}

/// How much a request of `cost` thousandths moves its tenant's finish tag at `weight`:
/// a million tag steps per thousandth of a unit at weight 1, so every weight up to a
/// million divides a cost exactly.
fn advance(cost: u64, weight: u32) -> u128 {
    u128::from(cost.max(1)) * 1_000_000 / u128::from(weight.max(1))
}

fn rank(class: i8) -> u8 {
    u8::try_from(127 - i16::from(class)).unwrap_or(0)
}

/// Tenants kept with nobody waiting before [`FairQueue::pop`] looks for ones to forget.
const PRUNE_AT: usize = 64;

/// One waiter, with what ordering it needs.
struct Entry<T> {
    item: T,
    tenant: u16,
    cost: u64,
    deadline: Instant,
}

/// A tenant's state in one class.
#[derive(Default)]
struct Flow {
    /// The tag its next request starts from, if later than the class's virtual time.
    finish: u128,
    /// Its waiters' keys, in line order.
    keys: VecDeque<Key>,
}

/// One lane's waiting requests in fair order.
pub struct FairQueue<T> {
    line: BTreeMap<Key, Entry<T>>,
    flows: HashMap<(i8, u16), Flow>,
    /// Each class's virtual time: the tag of its request that went last.
    clocks: HashMap<i8, u128>,
    seq: u64,
    /// The most requests one tenant may have waiting.
    per_tenant: usize,
    /// The waiters' costs, summed (thousandths).
    cost: u64,
}

/// Where a newcomer would stand, before it is let in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    /// Its key.
    pub key: Key,
    /// Waiters ahead of it.
    pub ahead: usize,
    /// Their costs, summed (thousandths).
    pub ahead_cost: u64,
}

/// Why a newcomer cannot wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Full {
    /// Its tenant already has its most waiting.
    Tenant,
}

impl<T> FairQueue<T> {
    /// An empty line in which one tenant has at most `per_tenant` waiters.
    pub fn new(per_tenant: usize) -> Self {
        FairQueue {
            line: BTreeMap::new(),
            flows: HashMap::new(),
            clocks: HashMap::new(),
            seq: 0,
            per_tenant,
            cost: 0,
        }
    }

    /// Waiters in line.
    pub fn len(&self) -> usize {
        self.line.len()
    }

    /// Whether nobody waits.
    pub fn is_empty(&self) -> bool {
        self.line.is_empty()
    }

    /// Where a request due by `deadline` for `ticket` would stand, or why it
    /// cannot wait; changes nothing.
    pub fn place(&self, ticket: Ticket, deadline: Instant) -> Result<Place, Full> {
        let flow = self.flows.get(&(ticket.class, ticket.tenant));
        let waiting = flow.map_or(0, |f| f.keys.len());
        if waiting >= self.per_tenant {
            return Err(Full::Tenant);
        }
        // Earliest deadline first within the tenant: the newcomer takes the place of
        // its first waiter due later, which moves one place back.
        let overtaken = flow.and_then(|f| {
            f.keys
                .iter()
                .find(|k| self.line.get(k).is_some_and(|e| e.deadline > deadline))
        });
        let key = match overtaken {
            Some(key) => *key,
            None => self.tail_key(ticket),
        };
        let (ahead, ahead_cost) = self.line.range(..key).fold((0, 0u64), |(n, c), (_, e)| {
            (n + 1, c.saturating_add(e.cost))
        });
        Ok(Place {
            key,
            ahead,
            ahead_cost,
        })
    }

    /// The key a request joining the end of its tenant's line gets.
    fn tail_key(&self, ticket: Ticket) -> Key {
        let now = self.clocks.get(&ticket.class).copied().unwrap_or(0);
        let finish = self
            .flows
            .get(&(ticket.class, ticket.tenant))
            .map_or(0, |f| f.finish);
        Key {
            rank: rank(ticket.class),
            tag: now.max(finish),
            seq: self.seq,
        }
    }

    /// Lets a request in (after [`FairQueue::place`] said where); returns its key.
    pub fn push(&mut self, item: T, ticket: Ticket, cost: u64, deadline: Instant) -> Key {
        let key = self.tail_key(ticket);
        self.seq += 1;
        self.cost = self.cost.saturating_add(cost);
        let flow = self.flows.entry((ticket.class, ticket.tenant)).or_default();
        flow.finish = key.tag + advance(cost, ticket.weight);
        flow.keys.push_back(key);
        let entry = Entry {
            item,
            tenant: ticket.tenant,
            cost,
            deadline,
        };
        // Earliest deadline first: walk back through the tenant's line, each waiter
        // due later moving one place back, until the newcomer's place.
        let mut at = key;
        for earlier in flow.keys.iter().rev().skip(1) {
            if self
                .line
                .get(earlier)
                .is_none_or(|w| w.deadline <= entry.deadline)
            {
                break;
            }
            if let Some(moved) = self.line.remove(earlier) {
                self.line.insert(at, moved);
            }
            at = *earlier;
        }
        self.line.insert(at, entry);
        at
    }

    /// The next waiter to go, with its key and cost; its class's virtual time moves to it.
    pub fn pop(&mut self) -> Option<(Key, T, u64)> {
        let (key, entry) = self.line.pop_first()?;
        let class = key.class();
        let clock = self.clocks.entry(class).or_insert(0);
        *clock = (*clock).max(key.tag);
        self.forget(key, entry.tenant);
        self.cost = self.cost.saturating_sub(entry.cost);
        if self.flows.len() > self.line.len() + PRUNE_AT {
            self.prune();
        }
        Some((key, entry.item, entry.cost))
    }

    /// Puts back a waiter [`FairQueue::pop`] took, at its place (a waiter that came
    /// since goes before it).
    pub fn put_back(&mut self, key: Key, item: T, ticket: Ticket, cost: u64, deadline: Instant) {
        let flow = self.flows.entry((ticket.class, ticket.tenant)).or_default();
        flow.finish = flow.finish.max(key.tag + advance(cost, ticket.weight));
        let at = flow.keys.partition_point(|k| *k < key);
        flow.keys.insert(at, key);
        self.cost = self.cost.saturating_add(cost);
        self.line.insert(
            key,
            Entry {
                item,
                tenant: ticket.tenant,
                cost,
                deadline,
            },
        );
    }

    /// The key of the next waiter to go.
    pub fn first_key(&self) -> Option<Key> {
        self.line.first_key_value().map(|(k, _)| *k)
    }

    /// The key of the waiter to go last: in the lowest class, the one furthest over
    /// its tenant's share.
    pub fn last_key(&self) -> Option<Key> {
        self.line.last_key_value().map(|(k, _)| *k)
    }

    /// Takes the waiter that would go last out of line.
    pub fn pop_last(&mut self) -> Option<(T, u64)> {
        let (key, entry) = self.line.pop_last()?;
        self.forget(key, entry.tenant);
        self.cost = self.cost.saturating_sub(entry.cost);
        Some((entry.item, entry.cost))
    }

    /// Offers every waiter, in line order, to `keep`, with its cost: those it hands
    /// back stay where they were, the rest leave the line.
    pub fn sweep(&mut self, mut keep: impl FnMut(T, u64) -> Option<T>) {
        for (key, entry) in std::mem::take(&mut self.line) {
            let Entry {
                item,
                tenant,
                cost,
                deadline,
            } = entry;
            match keep(item, cost) {
                Some(item) => {
                    self.line.insert(
                        key,
                        Entry {
                            item,
                            tenant,
                            cost,
                            deadline,
                        },
                    );
                }
                None => {
                    self.forget(key, tenant);
                    self.cost = self.cost.saturating_sub(cost);
                }
            }
        }
    }

    /// Removes `key` from its tenant's line; forgets a tenant with nobody waiting
    /// whose finish tag the class's virtual time has passed (it would start there).
    fn forget(&mut self, key: Key, tenant: u16) {
        let class = key.class();
        let now = self.clocks.get(&class).copied().unwrap_or(0);
        if let Some(flow) = self.flows.get_mut(&(class, tenant)) {
            if let Some(at) = flow.keys.iter().position(|k| *k == key) {
                flow.keys.remove(at);
            }
            if flow.keys.is_empty() && flow.finish <= now {
                self.flows.remove(&(class, tenant));
            }
        }
    }

    /// Forgets every tenant with nobody waiting whose class's virtual time has passed
    /// its finish tag.
    fn prune(&mut self) {
        let clocks = &self.clocks;
        self.flows.retain(|(class, _), flow| {
            !flow.keys.is_empty() || flow.finish > clocks.get(class).copied().unwrap_or(0)
        });
    }

    /// The waiters' costs, summed (thousandths).
    pub fn cost(&self) -> u64 {
        self.cost
    }

    /// Tenants with state kept (waiting, or ahead of their class's virtual time).
    pub fn flows(&self) -> usize {
        self.flows.len()
    }
}

#[cfg(test)]
mod tests;
