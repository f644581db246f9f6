//! easeoff: a sidecar proxy that makes throttled upstreams usable.
//!
//! Decision code is pure and takes time and randomness as arguments:
//! - [`sleeper`]: the strategies (responsive, exponential, ...) that turn throttles
//!   and successes into an interval;
//! - [`controller`]: the epoch rule and the pace-mode starting point around a sleeper;
//! - [`throttle`]: is an upstream answer a throttle, and what gave it away;
//! - [`hints`]: how long a server asked us to hold off, and how much quota is left;
//! - [`retry`]: the retry budget and when an attempt may be repeated;
//! - [`connect_backoff`]: gRPC's connection backoff in front of an unreachable upstream;
//! - [`config`]: the TOML file turned into validated settings;
//! - [`window`]: lock-free counts over a sliding window (dispatch rate, retry budget).
//!
//! The I/O shell applies the decisions:
//! - [`pacer`]: spacing, queueing and pauses per upstream;
//! - [`upstream`]: one upstream's run-time state, where verdicts reach the controller;
//! - [`proxy`]: listeners, the request path and the upstream client;
//! - [`sigv4`]: AWS credentials and SigV4 re-signing of every attempt;
//! - [`admin`], [`metrics`]: `/metrics`, `/status`, health;
//! - [`server`], [`signals`]: binding, running, reloading and draining.
//!
//! Tools built on the same code: [`mock_upstream`], [`load`] (writers without retry
//! logic), [`demo`], [`simulate`] (the controller and pacer in virtual time), [`plot`]
//! and [`probe`] (the health check of the container image).

pub mod admin;
pub mod cli;
pub mod config;
pub mod connect_backoff;
pub mod controller;
pub mod demo;
pub mod hints;
pub mod load;
pub mod metrics;
pub mod mock_upstream;
pub mod pacer;
pub mod plot;
pub mod probe;
pub mod proxy;
pub mod retry;
pub mod server;
pub mod signals;
pub mod sigv4;
pub mod simulate;
pub mod sleeper;
pub mod throttle;
pub mod upstream;
pub mod window;

pub use config::Config;
pub use server::Server;
