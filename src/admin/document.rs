//! The `/status` document as types: the admin server serializes them, `easeoff status`
//! and the tests deserialize them, so a renamed field is a compile error rather than a
//! `-` on a screen. Every field has a default, so a reader copes with an older or
//! newer server.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The whole document: every upstream in config order.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Status {
    /// The version of the easeoff that answered.
    pub version: String,
    pub upstreams: Vec<UpstreamStatus>,
    /// This sidecar's part in the fleet, with `[fleet]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fleet: Option<FleetStatus>,
}

/// The sidecar's link to the fleet's Redis.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct FleetStatus {
    pub connected: bool,
    pub member: String,
    /// Why this member paces alone, while it does (a Redis error class in words).
    pub why_alone: Option<String>,
    /// Whether live members of the group run this upstream with other settings.
    pub settings_differ: bool,
}

/// One upstream: the headline figures, its counters, its lanes, its last minutes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct UpstreamStatus {
    pub name: String,
    pub listen: String,
    pub url: String,
    pub preset: String,
    pub strategy: String,
    pub mode: String,
    /// The headline interval: the largest over the upstream's lanes (the slowest pace
    /// any of its requests meets).
    pub interval_ms: f64,
    /// The lane whose interval is the headline (`default` when none is paced).
    pub interval_lane: String,
    /// When the default lane's pause ends (an HTTP date).
    pub paused_until: Option<String>,
    /// The default lane's pause or window a header asked for that was cut to `max_pause`.
    pub pause_capped: Option<CappedStatus>,
    /// The default lane's rate-limit floor.
    pub rate_limit_floor: Option<FloorStatus>,
    /// Requests waiting for a slot, over all lanes.
    pub waiting: u64,
    pub in_flight: i64,
    /// `max_in_flight`'s cap and the requests out under it; absent without a cap.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_flight_cap: Option<CapStatus>,
    /// With `[upstream.fairness]`: each tenant's part over all lanes, `other` first;
    /// absent without it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenants: Option<Vec<TenantStatus>>,
    /// Requests by outcome (`success`, `throttled`, `error`, `shed`, `timeout`).
    pub requests: BTreeMap<String, u64>,
    /// Throttles by signal.
    pub throttles: BTreeMap<String, u64>,
    pub interval_increases: u64,
    pub interval_decreases: u64,
    pub sleeper_invocations: u64,
    pub sleeps: u64,
    pub sleep_seconds: f64,
    /// Retries by reason.
    pub retries: BTreeMap<String, u64>,
    pub retry_budget_exhausted: u64,
    pub connect_failures: u64,
    /// What `mode = "observe"` counted: what pacing would have done.
    pub observed: Option<ObservedStatus>,
    /// Every lane, busiest first, when the upstream has more than its `default` lane;
    /// empty otherwise (the upstream's own figures are then the lane's).
    pub lanes: Vec<LaneStatus>,
    /// The fleet's last decision for the default lane.
    pub fleet: Option<FleetDecision>,
    /// The upstream's last minutes.
    pub history: HistoryStatus,
    /// The effective config as TOML, the URL's path hidden.
    pub config: String,
}

/// One tenant's part of an upstream's dispatches, since start.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TenantStatus {
    /// Its name (`other` for callers not told apart).
    pub name: String,
    /// Its weight.
    pub weight: u32,
    /// Requests dispatched.
    pub dispatches: u64,
    /// Its share of what the tenants were reserved at (in the lanes' unit).
    pub share: f64,
    /// Its requests' mean wait for a slot, in milliseconds.
    pub mean_wait_ms: f64,
    /// Requests shed from a lane's queue.
    pub sheds: u64,
}

/// An upstream's `max_in_flight`: the cap in force and what is out under it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CapStatus {
    /// `learn`, or the fixed cap as a number in text.
    pub setting: String,
    /// Requests let out at once now.
    pub cap: u32,
    /// Requests out under the cap, their answers included until they have passed.
    pub out: u32,
    /// Requests waiting for a flight.
    pub waiting: u64,
    /// A learned cap's ceiling: the most out known to pass since the last refusal.
    pub ceiling: Option<u32>,
    /// Why a learned cap last moved (`grew`, `refused`, `latency`, `fleet`); null
    /// before its first move.
    pub last_move: Option<String>,
    /// A learned cap's moves so far, by why.
    pub moves: BTreeMap<String, u64>,
}

/// One lane: its pace, what holds it and why.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LaneStatus {
    pub name: String,
    pub interval_ms: f64,
    pub waiting: u64,
    /// When its pause ends (an HTTP date), and the header that asked for it.
    pub paused_until: Option<String>,
    pub pause_header: Option<String>,
    pub pause_capped: Option<CappedStatus>,
    pub rate_limit_floor: Option<FloorStatus>,
    /// Dispatches over the last second against the rate its spacing allows: 1 is
    /// running at the limit; 0 while unpaced.
    pub near_limit: f64,
    /// The lane's label value on `/metrics`: its name, or `other` past `metrics_lanes`.
    pub metrics_name: String,
    /// What a lane that paces in units (`lanes.cost`) reserved and settled so far.
    pub cost: Option<CostStatus>,
    /// Counted only for lanes with series of their own.
    pub dispatches: Option<u64>,
    pub throttles: Option<BTreeMap<String, u64>>,
    pub last_throttle: Option<ThrottleStatus>,
    pub fleet: Option<FleetDecision>,
    /// The lane's last minutes; kept for lanes with series of their own.
    pub history: Option<HistoryStatus>,
    /// The lane's own `max_in_flight` (`[upstream.lanes]`); absent without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_flight_cap: Option<CapStatus>,
    /// With `[upstream.fairness]`: the tenants that sent requests to this lane.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenants: Option<Vec<TenantStatus>>,
}

/// A lane's units: what its dispatches were reserved at, and what the answers that
/// told their cost said.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CostStatus {
    /// `tokens` or `capacity`; the interval is per 1,000 tokens or per unit.
    pub unit: String,
    pub reserved: f64,
    pub settled: f64,
}

/// The last throttle a lane was told of.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ThrottleStatus {
    /// The signal (`status`, `body`, ...) or the upstream's own reason
    /// (`TableWriteKeyRangeThroughputExceeded`).
    pub reason: String,
    pub resource: Option<String>,
    /// An HTTP date.
    pub at: String,
    /// The reason in a sentence.
    pub words: String,
}

/// A pause or window cut to `max_pause`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CappedStatus {
    pub header: String,
    pub asked_s: f64,
}

/// A rate-limit floor in force.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct FloorStatus {
    pub spacing_ms: f64,
    /// An HTTP date.
    pub until: String,
    /// The header family that set it.
    pub header: String,
}

/// What the fleet last decided for a lane.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct FleetDecision {
    pub members: u32,
    pub share: f64,
    pub rate: f64,
    pub interval_ms: f64,
    pub epoch: u64,
}

/// What pacing would have done in `mode = "observe"`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ObservedStatus {
    /// Requests that would have waited for a slot.
    pub would_wait: u64,
    /// Their waits, summed.
    pub would_wait_seconds: f64,
    /// Requests pacing would have shed.
    pub would_shed: u64,
}

/// One sample a second, oldest first, up to `end`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct HistoryStatus {
    pub period_s: u32,
    /// Unix time of the newest sample, in seconds.
    pub end: Option<f64>,
    pub interval_ms: Vec<f64>,
    pub waiting: Vec<u64>,
    /// Throttles per sample.
    pub throttles: Vec<u64>,
    /// Dispatches per sample (lanes only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dispatches: Vec<u64>,
    /// Whether a pause held the lane at the sample, 0 or 1 (lanes only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub paused: Vec<u8>,
    /// `max_in_flight`'s cap at the sample (upstreams with a cap only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cap: Vec<u32>,
    /// Requests out under the cap at the sample (upstreams with a cap only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub out: Vec<u32>,
}
