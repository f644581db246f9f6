//! What an answer's headers do to a lane: a throttle's wait holds it, its rate-limit
//! windows pace or pause it (as [`rules::quota`] decides), each cut to `max_pause`;
//! a cut is counted, shown on `/status` while it lasts and logged once per header.

use std::sync::PoisonError;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::rules::{self, Capped, Floor};
use super::{CappedHint, Lane, Pushed, nanos_since};
use crate::clock::Instant;
use crate::cost::Unit;
use crate::hints::{Hint, Reading};
use crate::pacer::Slot;
use crate::throttle::Signal;

impl Lane {
    /// Counts a throttle and remembers it. A pause its answer asked for holds the
    /// lane where [`rules::pushback_holds_lane`] says so; returns the pause, cut to
    /// `max_pause`, that the request it answers waits before its retry.
    pub(super) fn throttle_seen(
        &self,
        signal: Signal,
        slot: &Slot,
        pause: Option<Pushed>,
        to_cap: bool,
    ) -> Option<Duration> {
        self.metrics.throttle(signal);
        self.throttled(signal.as_str(), None);
        if let Some(link) = self.fleet.get() {
            link.refused();
        }
        let pushed = pause?;
        let now = self.common.clock.now();
        let delay = self.cap(pushed.asked, pushed.header, now);
        let (came, ends) = (
            self.since_origin_nanos(now),
            self.since_origin_nanos(now + delay),
        );
        // A refusal for requests at once binds the request: the cap holds the rest.
        let lane_wide = !to_cap
            && (pushed.spent
                || signal == Signal::RateLimit
                || self.common.settings.preset.pause_is_callers());
        let sent = self.since_origin_nanos(slot.dispatched_at);
        let earlier = self.asked.get();
        self.asked.set(rules::Asked { came, ends });
        if !rules::pushback_holds_lane(lane_wide, sent, earlier) {
            return Some(delay);
        }
        self.paused_by(pushed.header);
        if self.pacer.paused_until(now).is_none() {
            tracing::info!(upstream = %self.common.upstream, lane = self.name(), pause_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX), "paused by the upstream's Retry-After");
        }
        self.pacer.pause_until(now + delay);
        Some(delay)
    }

    /// Applies an answer's rate-limit windows as [`rules::quota`] says: go, pace
    /// until the reset, or pause until it (a `ratelimit` throttle). `dispatched`:
    /// when the request it answers went, so that an answer older than the one behind
    /// the floors in force leaves them be ([`rules::fresher`]).
    pub(super) fn apply_quota(&self, reading: &Reading, dispatched: Instant) {
        if reading.requests.is_none() && reading.tokens.is_none() {
            return;
        }
        let settings = &self.common.settings;
        let now = self.common.clock.now();
        if let Some(limit) = reading.tokens.and_then(|w| w.limit)
            && self.unit() == Unit::Tokens
        {
            self.window_limit.fetch_max(limit, Ordering::Relaxed);
        }
        let units = (self.unit() != Unit::Requests).then(|| rules::UnitFacts {
            mean: self.costs.charged_mean().max(1.0),
            queued: self.pacer.queued_cost(),
            window: settings.preset.token_window(),
        });
        let facts = rules::QuotaFacts {
            spend: settings.quota,
            in_flight: u64::try_from(self.common.metrics.in_flight.get()).unwrap_or(0),
            max: settings.max_pause.min(settings.sleeper.max_interval),
            at: self.since_origin(now),
            units,
        };
        let mut effects = rules::quota(reading, &self.falls, &facts);
        if let Some(pause) = effects.pause {
            self.quota_pause(pause, now);
        }
        let sent = nanos_since(self.common.origin, dispatched);
        let floors = self.floors_from.load(Ordering::Relaxed);
        if !rules::fresher(sent, floors) {
            effects.floor = Floor::Keep;
            effects.request_floor = Floor::Keep;
        } else if effects.floor != Floor::Keep || effects.request_floor != Floor::Keep {
            self.floors_from.fetch_max(sent, Ordering::Relaxed);
        }
        match effects.floor {
            Floor::Keep => {}
            Floor::Lift if self.pacer.floor(now).is_none() => {}
            Floor::Lift => self.pacer.set_floor(Duration::ZERO, now),
            Floor::Set { spacing, lasts } => {
                self.capped(lasts, Hint::RateLimit, now);
                self.paused_by(Hint::RateLimit);
                self.pacer.set_floor(spacing, now + lasts.duration);
            }
        }
        match effects.request_floor {
            Floor::Keep => {}
            Floor::Lift => self.pacer.set_request_floor(Duration::ZERO, now),
            Floor::Set { spacing, lasts } => {
                self.capped(lasts, Hint::RateLimit, now);
                self.paused_by(Hint::RateLimit);
                self.pacer.set_request_floor(spacing, now + lasts.duration);
            }
        }
    }

    /// Holds the lane until a spent rate-limit window comes back.
    fn quota_pause(&self, pause: Capped, now: Instant) {
        self.capped(pause, Hint::RateLimit, now);
        self.paused_by(Hint::RateLimit);
        self.common.metrics.throttle(Signal::RateLimit).inc();
        self.metrics.throttle(Signal::RateLimit);
        if self.pacer.paused_until(now).is_none() {
            tracing::info!(upstream = %self.common.upstream, lane = self.name(), pause_ms = u64::try_from(pause.duration.as_millis()).unwrap_or(u64::MAX), "paused until the upstream's rate-limit window resets");
        }
        self.pacer.pause_until(now + pause.duration);
    }

    /// Cuts a pause a header asked for to `max_pause` (and `max_interval`).
    fn cap(&self, asked: Duration, header: Hint, now: Instant) -> Duration {
        let settings = &self.common.settings;
        let capped = Capped::of(asked, settings.max_pause.min(settings.sleeper.max_interval));
        self.capped(capped, header, now);
        capped.duration
    }

    /// Counts a cut pause, remembers it for `/status`, and logs it the first time each
    /// header asks for too much.
    fn capped(&self, capped: Capped, header: Hint, now: Instant) {
        if !capped.was_cut() {
            return;
        }
        self.common.metrics.hint_capped(header).inc();
        let until = now + capped.duration;
        let asked = capped.asked;
        *self.capped.lock().unwrap_or_else(PoisonError::into_inner) = Some(CappedHint {
            header,
            asked,
            until,
        });
        if !self.common.capped_logged[header as usize].swap(true, Ordering::Relaxed) {
            tracing::warn!(
                upstream = %self.common.upstream,
                header = header.as_str(),
                asked_s = asked.as_secs_f64(),
                max_pause_s = capped.duration.as_secs_f64(),
                "the upstream asked for a longer pause than max_pause; capped (logged once per header)"
            );
        }
    }
}
