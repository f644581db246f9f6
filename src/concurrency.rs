//! The learned concurrency cap (`max_in_flight = "learn"`): how many requests may be
//! out at once, learned from refusals and latency.
//!
//! A server that counts requests at once (a model server's slots, GitHub's 100
//! concurrent) refuses the request that finds it full, whatever the rate. The cap
//! starts small and grows by one per success that went with the cap full (doubling
//! per round trip), until the first refusal. A refusal cuts it to what was out
//! without it (the in-flight count at its dispatch, less itself); a third one in a
//! row that came with no more out than last passed cuts to at most [`BETA`] of the
//! cap, so refusals that keep coming with few out shrink it fast.
//! That count is the ceiling: the cap stays there for a number of successes before
//! one more goes out to probe, a number that doubles each time the probe is refused
//! at the same ceiling (an exact limit of 8 costs one refusal per 64, 128, 256, ...
//! answers, not one per round trip as additive increase would); each time a probe
//! passes the wait shortens four times and the next probe reaches twice as far, so
//! room that grew (or a cut too deep) is found within a few round trips. Below the ceiling
//! (after a cut by [`BETA`] or for latency) it grows back half the way a round trip
//! (a cap's worth of successes), and by one at least. Latency growing to [`LATENCY_HOLD`] times its baseline stops growth; to
//! [`LATENCY_CUT`] times, it cuts: a server that queues (vLLM, Ollama) says it is full
//! only by answering later.
//!
//! Pure: the count out and each answer's latency come in as arguments; one burst of
//! refusals cuts once (the epoch rule of `controller.rs`).

use std::time::Duration;

use crate::throttle::{Preset, Signal};

/// Where a learned cap starts.
pub const INITIAL: u32 = 4;

/// A refusal cuts the cap to at most this share of it.
pub const BETA: f64 = 0.9;

/// Successes at the ceiling before the first probe above it, at the least; a cap of
/// `c` waits `PROBE_PER_SLOT × c` when that is more.
pub const PROBE_MIN: u32 = 64;

/// Successes per unit of the ceiling before a probe (see [`PROBE_MIN`]).
pub const PROBE_PER_SLOT: u32 = 4;

/// A probe that passes makes the wait for the next this many times shorter.
pub const PROBE_SOONER: u32 = 4;

/// The farthest a probe reaches above the ceiling.
pub const PROBE_STEP_MOST: u32 = 64;

/// The longest wait between probes, in multiples of the first.
pub const PROBE_BACKOFF_MOST: u32 = 16;

/// Refusals in a row at or below the ceiling that cut only to what passed; past
/// them, [`BETA`].
pub const SHRINKING_EXACT: u8 = 2;

/// Recent latency at this many times its baseline stops the cap's growth.
pub const LATENCY_HOLD: f64 = 2.0;

/// Recent latency at this many times its baseline cuts the cap by [`BETA`].
pub const LATENCY_CUT: f64 = 3.0;

/// The weight of one answer in the recent latency.
const RECENT_WEIGHT: f64 = 0.1;

/// How far the baseline rises per answer toward a higher recent latency: the
/// server's unloaded latency may grow for good (a larger model, longer prompts),
/// and a baseline that never rose would cut for ever.
const BASELINE_RISE: f64 = 0.002;

/// What `max_in_flight` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CapSetting {
    /// No cap.
    Off,
    /// At most this many out at once.
    Fixed(u32),
    /// A cap learned from refusals and latency.
    Learn,
}

impl std::fmt::Display for CapSetting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CapSetting::Off => f.write_str("off"),
            CapSetting::Fixed(n) => write!(f, "{n}"),
            CapSetting::Learn => f.write_str("learn"),
        }
    }
}

/// The cap an upstream gets with no `max_in_flight`: learned where the vendor limits
/// requests at once (GitHub's 100 concurrent, a model server's slots), none elsewhere.
pub fn default_for(preset: Preset) -> CapSetting {
    match preset {
        Preset::GitHub | Preset::ModelServer => CapSetting::Learn,
        _ => CapSetting::Off,
    }
}

/// Where a learned cap starts with `preset`, alone: at the limit the vendor
/// documents, as if learned (GitHub: "no more than 100 concurrent requests are
/// allowed", docs.github.com, REST API rate limits, secondary rate limits), so that
/// the first second goes at the limit instead of growing to it from [`INITIAL`];
/// `None` where no limit is documented. A fleet member starts small all the same: the
/// limit is the fleet's.
pub fn documented_limit(preset: Preset) -> Option<u32> {
    match preset {
        Preset::GitHub => Some(100),
        _ => None,
    }
}

/// Whether a throttle moves a learned cap rather than the rate: a server that says
/// it is busy (its slots are full) always; a spent window, a rate-limit signal, an
/// overload (529: the vendor's weather, not this client's doing) or a batch's
/// partial answer never; any other throttle (a bare 429, GitHub's secondary limit,
/// which does not say which of its limits it met) when it went with many out: at
/// least [`MANY_OUT`] and half the cap. A rate limit refuses with few out as readily
/// as with many, and a cap cut for it would starve the lane long before its rate.
pub fn feeds_cap(signal: Signal, spent: bool, out: u32, cap: u32) -> bool {
    match signal {
        Signal::Busy => true,
        Signal::RateLimit | Signal::Overload | Signal::Partial => false,
        Signal::Status | Signal::Header | Signal::Body | Signal::Grpc => {
            !spent && out >= MANY_OUT && u64::from(out) * 2 >= u64::from(cap)
        }
    }
}

/// The fewest out with which a throttle that does not say why counts toward a
/// learned cap (see [`feeds_cap`]).
pub const MANY_OUT: u32 = 16;

/// What an answer did to the cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Move {
    /// It grew (a probe included).
    Grow,
    /// It was cut, and why.
    Cut(Why),
    /// Nothing moved.
    Hold,
}

crate::spelled::spelled! {
    fn as_str;
    /// Why the cap moved; the `why` label of `easeoff_lane_cap_moves_total`.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Why {
        /// Answers came back with the cap full and no refusal.
        Grew = "grew",
        /// A request was refused with many out.
        Refused = "refused",
        /// Answers came back slower and slower.
        Latency = "latency",
        /// The fleet's share of a shared cap.
        Fleet = "fleet",
    }
}

/// A learned cap's state.
#[derive(Clone, Debug)]
pub struct Learner {
    limit: f64,
    most: f64,
    /// Growing by one per success, until the first cut.
    slow_start: bool,
    /// The most out known to pass since the last refusal, once one came.
    ceiling: Option<u32>,
    /// Successes at the ceiling before the next probe.
    probe_after: u32,
    /// How far the next probe reaches above the ceiling: one, doubling each time a
    /// probe passes, so a cap cut too far (a count out that ran behind the
    /// server's) is back within a few round trips, not one a round trip.
    probe_step: u32,
    /// Successes counted toward it.
    at_ceiling: u32,
    /// Cuts so far; an attempt is stamped with it at dispatch.
    epoch: u64,
    /// Successes since the last cut for latency.
    since_latency_cut: u32,
    /// Cuts in a row that came with no more out than had passed, nothing growing
    /// between.
    shrinking: u8,
    /// Seconds; 0 before the first answer.
    recent: f64,
    baseline: f64,
    /// A fleet member's: the fleet's cap over this member's part, 1 alone. Its
    /// probes wait this many times longer, so that the fleet probes as often as
    /// one learner of the whole would (`adopt`).
    spread: f64,
    /// A probe above the ceiling is out: a success with more out than the ceiling is
    /// its pass. For a fleet member it is one only while its own probe is out: a part
    /// taken down leaves more out than the new ceiling for a round trip.
    probing: bool,
    /// Added to the limit before it is rounded down to the cap: a fleet member's
    /// place in [0, 1), so that members whose parts have the same fraction do not
    /// all round it away (`adopt`).
    phase: f64,
}

impl Learner {
    /// A cap at [`INITIAL`] (at most `most`), growing to at most `most`.
    pub fn new(most: u32) -> Learner {
        let most = f64::from(most.max(1));
        Learner {
            limit: f64::from(INITIAL).min(most),
            most,
            slow_start: true,
            ceiling: None,
            probe_after: PROBE_MIN,
            probe_step: 1,
            at_ceiling: 0,
            epoch: 0,
            since_latency_cut: 0,
            shrinking: 0,
            recent: 0.0,
            baseline: 0.0,
            spread: 1.0,
            probing: false,
            phase: 0.0,
        }
    }

    /// A cap at `limit` (at most `most`), known to pass: the ceiling, with no slow
    /// start; it probes above it as after a refusal.
    pub fn known(most: u32, limit: u32) -> Learner {
        let mut learner = Learner::new(most);
        learner.limit = f64::from(limit.max(1)).min(learner.most);
        let cap = learner.cap();
        learner.slow_start = false;
        learner.ceiling = Some(cap);
        learner.probe_after = probe_base(cap);
        learner
    }

    /// Whether it has learned nothing yet: no answer came and nothing cut it.
    pub fn is_fresh(&self) -> bool {
        self.recent == 0.0 && self.epoch == 0
    }

    /// The cap in force: requests out at once.
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "the limit lies in [1, most], most a u32"
    )]
    pub fn cap(&self) -> u32 {
        (self.limit + self.phase).floor().clamp(1.0, self.most) as u32
    }

    /// Cuts so far: an attempt dispatched in an earlier one was out before the last
    /// cut, and its refusal does not cut again.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The most out known to pass, once a refusal has set it.
    pub fn ceiling(&self) -> Option<u32> {
        self.ceiling
    }

    /// The recent latency and its baseline, in seconds.
    pub fn latency(&self) -> (f64, f64) {
        (self.recent, self.baseline)
    }

    /// A success dispatched in `epoch` with `out` requests out (itself included)
    /// under a cap of `cap` then, answered in `latency`. It went with the cap full
    /// when `out` reached that cap (not the cap now: in a slow start the cap grows
    /// while a request is out, and one that filled the cap it went under would
    /// otherwise count as not). One dispatched before the last cut tells its latency
    /// only: it went under the cap that was cut, and the count out over-states what
    /// the server held (a request counts until its answer has passed, the server's
    /// slot frees before), so its success is no proof that more pass.
    pub fn success(&mut self, out: u32, cap: u32, epoch: u64, latency: Duration) -> Move {
        let latency = latency.as_secs_f64();
        self.see_latency(latency);
        if epoch < self.epoch {
            return Move::Hold;
        }
        // In the slow start, half the cap out counts as full (as TCP counts a window
        // in use): requests take off as others land and as the cap grows, so half of
        // a round trip's go with a place or more to spare, and counting only the
        // others grew it by half, not double, a round trip.
        let needed = if self.slow_start {
            cap.min(self.cap()).div_ceil(2)
        } else {
            cap.min(self.cap())
        };
        let full = out >= needed;
        if full && self.recent > LATENCY_CUT * self.baseline {
            self.since_latency_cut = self.since_latency_cut.saturating_add(1);
            // One cut per cap's worth of answers: those out were sent before it.
            if self.since_latency_cut >= self.cap() {
                self.since_latency_cut = 0;
                self.limit = (self.limit * BETA).max(1.0);
                self.slow_start = false;
                self.epoch += 1;
                return Move::Cut(Why::Latency);
            }
            return Move::Hold;
        }
        if let Some(ceiling) = self.ceiling
            && out > ceiling
            && (self.learns_alone() || self.probing)
        {
            // A probe got through: more passes than the last refusal said. The next
            // probe comes four times sooner (the limit may have grown by more than
            // one: other traffic left), until a refusal sets the wait back.
            self.ceiling = Some(out);
            self.probe_after = (self.probe_after / PROBE_SOONER).max(1);
            self.probe_step = self.probe_step.saturating_mul(2).min(PROBE_STEP_MOST);
            self.at_ceiling = 0;
            self.probing = false;
        }
        if !full || self.recent > LATENCY_HOLD * self.baseline || self.limit >= self.most {
            return Move::Hold;
        }
        let before = self.cap();
        self.shrinking = 0;
        match self.ceiling {
            _ if self.slow_start => self.limit += 1.0,
            Some(ceiling) if before >= ceiling => {
                self.at_ceiling += 1;
                if f64::from(self.at_ceiling) < f64::from(self.probe_after) * self.spread {
                    return Move::Hold;
                }
                self.at_ceiling = 0;
                self.probing = true;
                self.limit = f64::from(ceiling) + f64::from(self.probe_step);
            }
            // Back toward the ceiling, half the way a round trip (a cap's worth of
            // answers), and one a round trip at least.
            Some(ceiling) => {
                let gap = f64::from(ceiling) - self.limit;
                self.limit += (gap / 2.0).max(1.0) / self.limit;
            }
            None => self.limit += 1.0 / self.limit,
        }
        self.limit = self.limit.min(self.most);
        if self.cap() > before {
            Move::Grow
        } else {
            Move::Hold
        }
    }

    /// A refusal of a request dispatched in `epoch` with `out` requests out (itself
    /// included).
    pub fn refused(&mut self, out: u32, epoch: u64) -> Move {
        if epoch < self.epoch {
            return Move::Hold;
        }
        let without = out.saturating_sub(1).max(1);
        // Above what was known to pass (a probe, the slow start's overshoot), what
        // was out without it is the limit. At or below it, the count out was a
        // little off (it counts answers still passing, whose slots the server has
        // already freed: one or two at 400 answers a second) or the server's room
        // shrank: the same, twice in a row. A third time, with nothing growing
        // between, the room keeps shrinking or the server does not count requests at
        // once: cut by BETA at least.
        let above = self.ceiling.is_none_or(|ceiling| out > ceiling);
        self.shrinking = if above {
            0
        } else {
            self.shrinking.saturating_add(1)
        };
        let again = self.shrinking > SHRINKING_EXACT;
        let cut = if again {
            f64::from(without).min(self.limit * BETA)
        } else {
            f64::from(without).min(self.limit)
        };
        let cut = cut.max(1.0).floor();
        let ceiling = self.cap_of(f64::from(without).min(self.limit));
        // A probe above the same ceiling failed again: wait longer for the next.
        self.probe_after = if self.ceiling == Some(ceiling) {
            self.probe_after
                .saturating_mul(2)
                .min(probe_base(ceiling).saturating_mul(PROBE_BACKOFF_MOST))
        } else {
            probe_base(ceiling)
        };
        self.limit = cut;
        self.ceiling = Some(ceiling);
        self.at_ceiling = 0;
        self.probe_step = 1;
        self.probing = false;
        self.slow_start = false;
        self.epoch += 1;
        Move::Cut(Why::Refused)
    }

    /// The cap unrounded: what a fleet member adds to the fleet's cap.
    pub fn limit(&self) -> f64 {
        self.limit
    }

    /// Takes `share`, this fleet member's part of the fleet's cap `fleet` (the
    /// members' caps summed, split by what each wants out), at `phase` in [0, 1),
    /// the member's place among them: the part rounds down after `phase` is added,
    /// so that members with equal parts of 24.25 have 24, 24, 25 and 24 out (97 in
    /// all), not 24 each. In the slow start, while the member's requests fill its cap
    /// (`filled`), a share only raises the cap: a member joining a fleet that
    /// learned already starts at its part, and members starting together grow alike
    /// until their first refusal. Otherwise the part is the cap, and its probes wait
    /// `fleet / share` times as long: each one adds to the fleet's cap, which every
    /// member then takes its part of.
    pub fn adopt(&mut self, share: f64, fleet: f64, phase: f64, filled: bool) {
        if !share.is_finite() || !fleet.is_finite() || !phase.is_finite() {
            return;
        }
        let share = share.clamp(1.0, self.most);
        if self.slow_start && filled {
            self.limit = self.limit.max(share);
            return;
        }
        self.slow_start = false;
        self.limit = share;
        self.phase = phase.clamp(0.0, 0.999);
        self.spread = (fleet / share).clamp(1.0, f64::from(u32::MAX));
        self.probing = false;
    }

    /// Whether this learner's cap is all of what it learns: no fleet has handed it a
    /// part of a larger one, so every success above the ceiling is a passed probe.
    fn learns_alone(&self) -> bool {
        self.spread <= 1.0
    }

    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "a whole number in [1, most]"
    )]
    fn cap_of(&self, limit: f64) -> u32 {
        limit.max(1.0) as u32
    }

    fn see_latency(&mut self, latency: f64) {
        if self.recent == 0.0 {
            self.recent = latency;
            self.baseline = latency;
            return;
        }
        self.recent += RECENT_WEIGHT * (latency - self.recent);
        self.baseline = if self.recent < self.baseline {
            self.recent
        } else {
            self.baseline + BASELINE_RISE * (self.recent - self.baseline)
        };
    }
}

/// Successes at a ceiling of `ceiling` before the first probe above it.
fn probe_base(ceiling: u32) -> u32 {
    PROBE_MIN.max(PROBE_PER_SLOT.saturating_mul(ceiling))
}

#[cfg(test)]
mod tests;
