//! An attempt's slots ([`Pass`]) and how it ends: one call, [`Pass::settle`] (made by
//! `Control::settle`), tells each lane the attempt concerns what its answer says, and
//! only it, or handing the pass on to what settles it later, yields the [`Settled`]
//! proof the request path must return.

use std::sync::Arc;
use std::time::Duration;

use super::{Lane, Pushed};
use crate::concurrency::feeds_cap;
use crate::cost::answer::AnswerCost;
use crate::flights::{Flight, Told as FlightTold};
use crate::hints::{Pushback, Reading};
use crate::pacer::Slot;
use crate::throttle::{Signal, Verdict};

/// The slots one attempt holds: one per lane it takes, the first inline.
#[must_use = "an attempt's pass is settled, or its lanes never hear how it went"]
#[derive(Debug)]
pub struct Pass {
    first: (Arc<Lane>, Slot),
    more: Vec<(Arc<Lane>, Slot)>,
    /// The attempt's places under `max_in_flight` (the upstream's, its lanes'),
    /// where capped: held until its answer has passed.
    flights: Vec<Flight>,
}

/// An upstream's answer to an attempt, as the lanes take it.
#[derive(Clone, Copy)]
pub struct Answer<'a> {
    /// Its verdict.
    pub verdict: Verdict,
    /// What its headers say, if anything: rate-limit windows (for the attempt's
    /// first lane) and, on a throttle, how long to wait (for every lane it held).
    pub reading: Option<&'a Reading>,
    /// The lanes the verdict is for.
    pub lanes: Concerns<'a>,
    /// What it says the request cost, when it says so at once (a body in memory).
    pub cost: Option<&'a AnswerCost>,
}

impl Answer<'_> {
    /// An answer with `verdict` for every lane the attempt held, and nothing more.
    pub fn of(verdict: Verdict) -> Answer<'static> {
        Answer {
            verdict,
            reading: None,
            lanes: Concerns::Held,
            cost: None,
        }
    }
}

/// The lanes an answer's verdict is for.
#[derive(Clone, Copy)]
pub enum Concerns<'a> {
    /// Every lane the attempt held.
    Held,
    /// The lanes a throttle named (with the upstream's reason and resource): each is
    /// raised as a throttle dispatched in its current epoch, unless the attempt held
    /// it; the lanes it held and the answer did not name are told nothing.
    Named(&'a [(Arc<Lane>, &'a str, &'a str)]),
    /// A batch that left the tables this says yes to unprocessed: their lanes are
    /// told of a partial throttle, the others of a success.
    ByTable(&'a dyn Fn(&str) -> bool),
}

/// What an attempt's end tells its lanes.
#[derive(Clone, Copy)]
pub enum Told<'a> {
    /// No answer: it never went, could not connect, or got none in time.
    Nothing,
    /// The upstream's answer.
    Answer(&'a Answer<'a>),
    /// What a streamed answer said the request cost, read at its end; its verdict
    /// was told when its head came.
    Cost(&'a AnswerCost),
}

impl Pass {
    /// A pass of one slot.
    pub fn one(lane: Arc<Lane>, slot: Slot) -> Pass {
        Pass {
            first: (lane, slot),
            more: Vec::new(),
            flights: Vec::new(),
        }
    }

    /// The pass, holding `flights` (the attempt's places under `max_in_flight`).
    pub fn with_flights(mut self, flights: Vec<Flight>) -> Pass {
        self.flights = flights;
        self
    }

    /// Takes the attempt's flights out of the pass, to go with a pass standing in
    /// for it.
    pub fn take_flights(&mut self) -> Vec<Flight> {
        std::mem::take(&mut self.flights)
    }

    /// Adds the slot of a further lane.
    pub fn add(&mut self, lane: Arc<Lane>, slot: Slot) {
        self.more.push((lane, slot));
    }

    /// The first lane taken.
    pub fn lane(&self) -> &Arc<Lane> {
        &self.first.0
    }

    /// The slot of the first lane taken (the one the request is timed by).
    pub fn slot(&self) -> &Slot {
        &self.first.1
    }

    /// Every lane taken, with its slot.
    pub fn iter(&self) -> impl Iterator<Item = (&Arc<Lane>, &Slot)> {
        std::iter::once((&self.first.0, &self.first.1)).chain(self.more.iter().map(|(l, s)| (l, s)))
    }

    /// Whether the pass spans more than one lane.
    pub fn is_many(&self) -> bool {
        !self.more.is_empty()
    }

    /// The slot this pass holds in `lane`, if it holds one.
    pub fn slot_in(&self, lane: &Lane) -> Option<&Slot> {
        self.iter()
            .find(|(held, _)| std::ptr::eq(held.as_ref(), lane))
            .map(|(_, slot)| slot)
    }

    /// A pass for `lane` standing in for this one when the answer named a lane the
    /// attempt did not hold (the upstream's own bucket, a hot key's lane made after
    /// it went): it counts as dispatched in the epoch that lane had when it went.
    pub fn for_lane(&self, lane: Arc<Lane>) -> Pass {
        if let Some(slot) = self.slot_in(&lane) {
            let slot = *slot;
            return Pass::one(lane, slot);
        }
        let slot = Slot {
            epoch: lane.epoch_at(self.slot().dispatched_at),
            ..*self.slot()
        };
        Pass::one(lane, slot)
    }

    /// Ends the attempt: tells its lanes what `told` says. Called by
    /// `Control::settle`, which counts the upstream's half.
    pub(crate) fn settle(mut self, told: Told<'_>) -> Settled {
        let flights = self.take_flights();
        let settled = self.settled(told, &flights);
        Settled { flights, ..settled }
    }

    fn settled(self, told: Told<'_>, flights: &[Flight]) -> Settled {
        match told {
            Told::Nothing => {
                for (lane, slot) in self.iter() {
                    let _ = lane.record(slot, None, None, false);
                }
            }
            Told::Cost(cost) => {
                for (lane, slot) in self.iter() {
                    lane.settle_cost(slot, cost);
                }
            }
            Told::Answer(answer) => {
                let hold = self.answered(answer, flights);
                return Settled::held(hold);
            }
        }
        Settled::held(Duration::ZERO)
    }

    /// The windows go to the first lane, the cost and the verdict to the lanes the
    /// answer concerns. Returns the pause the request waits before its retry.
    fn answered(&self, answer: &Answer<'_>, flights: &[Flight]) -> Duration {
        if let Some(reading) = answer.reading {
            self.lane().apply_quota(reading, self.slot().dispatched_at);
        }
        if let Some(cost) = answer.cost {
            for (lane, slot) in self.iter() {
                lane.settle_cost(slot, cost);
            }
        }
        let verdict = Some(answer.verdict);
        // Every cap hears the answer; a throttle any of them took leaves the rate.
        let mut to_cap = false;
        for flight in flights {
            to_cap |= self.tell_flight(flight, answer);
        }
        let mut hold = Duration::ZERO;
        match answer.lanes {
            Concerns::Held => {
                let pause = match answer.reading.and_then(|r| Some((r, r.wait?))) {
                    Some((reading, (Pushback::Delay(asked), header)))
                        if matches!(answer.verdict, Verdict::Throttle(_)) =>
                    {
                        Some(Pushed {
                            asked,
                            header,
                            spent: reading.spent(),
                        })
                    }
                    _ => None,
                };
                for (lane, slot) in self.iter() {
                    let told = lane.record(slot, verdict, pause, to_cap);
                    hold = hold.max(told.unwrap_or_default());
                }
            }
            Concerns::Named(named) => {
                for (lane, reason, resource) in named {
                    let routed = self.for_lane(Arc::clone(lane));
                    let _ = lane.record(routed.slot(), verdict, None, to_cap);
                    lane.throttled(reason, Some(resource));
                }
            }
            Concerns::ByTable(unprocessed) => {
                let partial = Some(Verdict::Throttle(Signal::Partial));
                for (lane, slot) in self.iter() {
                    let table = lane.key().table().unwrap_or(lane.name());
                    let verdict = if unprocessed(table) {
                        partial
                    } else {
                        Some(Verdict::Success)
                    };
                    let _ = lane.record(slot, verdict, None, false);
                }
            }
        }
        hold
    }

    /// Tells a learned cap how the attempt went; returns whether
    /// a throttle went to the cap (and not to the rate: see
    /// [`crate::concurrency::feeds_cap`]).
    fn tell_flight(&self, flight: &Flight, answer: &Answer<'_>) -> bool {
        let flights = flight.flights();
        if !flights.learns() {
            return false;
        }
        match answer.verdict {
            Verdict::Success => {
                let latency = flights.since(self.slot().dispatched_at);
                flights.told(flight, FlightTold::Success(latency));
                false
            }
            Verdict::Throttle(signal) => {
                let spent = answer.reading.is_some_and(Reading::spent);
                let to_cap = feeds_cap(signal, spent, flight.out(), flights.cap());
                if to_cap {
                    flights.told(flight, FlightTold::Refused);
                }
                to_cap
            }
            Verdict::Failure => false,
        }
    }

    /// Hands the pass to what settles it later (a watched body); the request path is
    /// done with it.
    pub fn defer(self) -> (Deferred, Settled) {
        (Deferred(self), Settled::held(Duration::ZERO))
    }

    /// The pass's lanes and slots again, to settle a streamed answer's cost with
    /// when its body ends ([`Told::Cost`]); the verdict is told now.
    pub fn bill(&self) -> Deferred {
        Deferred(Pass {
            first: (Arc::clone(&self.first.0), self.first.1),
            more: self.more.clone(),
            flights: Vec::new(),
        })
    }
}

/// Proof that an attempt's [`Pass`] was settled, or handed to what settles it: the
/// request path's steps that hold a pass return one, so a path that drops a pass
/// unsettled does not compile. Only this module makes one.
#[must_use]
#[derive(Debug)]
pub struct Settled {
    backoff: Duration,
    /// The pause a throttle's answer asked of the request it answers.
    hold: Duration,
    /// The attempt's places under `max_in_flight`: they land when this goes, unless
    /// taken to go with the answer's body.
    flights: Vec<Flight>,
}

impl Settled {
    fn held(hold: Duration) -> Settled {
        Settled {
            backoff: Duration::ZERO,
            hold,
            flights: Vec::new(),
        }
    }

    /// Takes the attempt's flights, to hold them until the answer's body has passed.
    pub fn take_flights(&mut self) -> Vec<Flight> {
        std::mem::take(&mut self.flights)
    }

    /// How long the connection backoff turns requests away after an attempt that
    /// could not connect; zero otherwise.
    pub fn backoff(&self) -> Duration {
        self.backoff
    }

    /// The pause the upstream asked before this request is sent again (its
    /// `Retry-After`, cut to `max_pause`); zero when it asked none.
    pub fn hold(&self) -> Duration {
        self.hold
    }

    /// The same proof, with the backoff the attempt's failure started.
    pub(crate) fn with_backoff(self, backoff: Duration) -> Settled {
        Settled { backoff, ..self }
    }
}

/// A pass handed on to be settled later (when a watched body ends).
#[derive(Debug)]
pub struct Deferred(Pass);

impl Deferred {
    /// The pass, to settle now.
    pub fn into_pass(self) -> Pass {
        self.0
    }

    /// The pass, to look at before it is settled.
    pub fn pass(&self) -> &Pass {
        &self.0
    }
}
