//! easeoff: a sidecar proxy that makes throttled upstreams usable.
//!
//! Modules in layers; each uses only those below it.
//!
//! Decision code is pure: it takes time and randomness as arguments and does no I/O.
//! - [`sleeper`]: the strategies (responsive, cubic, exponential, ...) that turn
//!   throttles and successes into an interval;
//! - [`controller`]: the epoch rule and the pace-mode starting point around a sleeper;
//! - [`throttle`]: is an upstream answer a throttle, and what gave it away;
//! - [`hints`]: how long a server asked us to hold off, and how much quota is left;
//! - [`quota`]: what a rate-limit window asks: go, pace until its reset, or pause;
//! - [`retry`]: the retry budget and the limits on repeating an attempt;
//! - [`attempt`]: the attempt policy: after each attempt, retry, give the throttle
//!   back, shed or give up; the proxy and `simulate` both run it;
//! - [`connect_backoff`]: gRPC's connection backoff in front of an unreachable upstream;
//! - [`config`]: the TOML file turned into validated settings;
//! - [`window`]: lock-free counts over a sliding window (dispatch rate, retry budget);
//! - [`deadline`]: instants plus configured durations, saturating;
//! - [`route`]: which lanes a request takes and which lanes an answer names.
//!
//! Time: [`clock`] is the one source of it: tokio's clock in the proxy (paused in
//! tests), a manual virtual clock in `simulate` and in tests without a network.
//!
//! State that applies the decisions, without network I/O:
//! - [`pacer`]: spacing, queueing and pauses per lane;
//! - [`lane`]: an upstream's lanes, each with its own controller and pacer;
//! - [`shed`]: when each shed request is told to come back, so a burst spreads out,
//!   and how long an AWS SDK's request may wait rather than be shed;
//! - [`upstream`]: [`upstream::Control`], one upstream's lanes, budget and connection
//!   backoff, where verdicts reach the lanes' controllers; [`upstream::Upstream`]
//!   adds its client and signer.
//!
//! I/O:
//! - [`flag_waker`]: one task driving several futures polls only those woken (an
//!   HTTP/1 client connection and the upstream connections it drives);
//! - [`transport`]: the HTTP client to an upstream, bodies, hop-by-hop headers;
//! - [`sigv4`]: AWS credentials and SigV4 re-signing of every attempt;
//! - [`proxy`]: listeners and the request path, a loop over the attempt policy;
//! - [`admin`], [`metrics`]: `/metrics`, `/status`, the status page, health;
//! - [`fleet`]: sidecars sharing each lane's learned state through Redis, with fair
//!   shares of the fleet rate;
//! - [`server`], [`signals`]: binding, running, reloading and draining.
//!
//! Tools built on the same code: [`mock_upstream`], [`load`] (writers without retry
//! logic), [`status`] (the status page in a terminal), [`demo`], [`simulate`] (the
//! controller, pacer and attempt policy in virtual time, without a network),
//! [`plot`] and [`probe`] (the health check of the container image).

pub mod admin;
pub mod attempt;
pub mod cli;
pub mod clock;
pub mod config;
pub mod connect_backoff;
pub mod controller;
pub mod deadline;
pub mod demo;
pub mod flag_waker;
pub mod fleet;
pub mod hints;
pub mod lane;
pub mod load;
pub mod metrics;
pub mod mock_upstream;
pub mod notice;
pub mod pacer;
pub mod plot;
pub mod probe;
pub mod proxy;
pub mod quota;
pub mod retry;
pub mod route;
pub mod server;
pub mod shed;
pub mod signals;
pub mod sigv4;
pub mod simulate;
pub mod sleeper;
pub mod status;
pub mod throttle;
pub mod train;
pub mod transport;
pub mod upstream;
pub mod window;

pub use config::Config;
pub use server::Server;
