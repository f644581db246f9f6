//! `constant`: a fixed interval, a static rate limit that ignores the upstream.

use std::time::Duration;

use super::{Initial, Settings};

/// The fixed interval: `initial_interval` (config validation makes it explicit).
pub fn interval(settings: &Settings) -> Duration {
    match settings.initial_interval {
        Initial::Fixed(d) => d,
        Initial::Auto => Duration::ZERO,
    }
}
