//! Section readers: each table of the file read through its schema, starting from the
//! section's defaults, then the checks that relate keys of the same section. Which
//! keys exist and what they accept is `schema.rs`'s business.

use super::keys::{Schema, Set, keep_unset, read_keys};
use super::reader::{Section, TableReader};
use super::schema::{
    CONNECT_BACKOFF, FAIRNESS, FLEET, FairnessSettings, FleetSettings, LANES, LaneSettings, POOL,
    PoolSettings, QUEUE, QueueSettings, RETRY, RetrySettings, SERVER, SIGV4, SLEEPER,
    ServerSettings, SigV4Settings, THROTTLE, UPSTREAM, UpstreamSettings, max_pause_default,
    sleeper_defaults, sleeper_defaults_for, throttle_defaults,
};
use super::validate;
use crate::sleeper::{Mode, Strategy};

/// The sub-tables of `[[upstream]]`, so a key written one level too high is pointed
/// to its table.
pub const UPSTREAM_SECTIONS: &[Section] = &[
    SLEEPER.section(),
    THROTTLE.section(),
    RETRY.section(),
    QUEUE.section(),
    SIGV4.section(),
    FAIRNESS.section(),
    CONNECT_BACKOFF.section(),
    POOL.section(),
    LANES.section(),
];

/// Every table of the file with its keys; the README's configuration tables list the
/// same (a test compares them).
pub const ALL_SECTIONS: &[Section] = &[
    SERVER.section(),
    FLEET.section(),
    UPSTREAM.section(),
    SLEEPER.section(),
    THROTTLE.section(),
    RETRY.section(),
    QUEUE.section(),
    SIGV4.section(),
    FAIRNESS.section(),
    CONNECT_BACKOFF.section(),
    POOL.section(),
    LANES.section(),
];

/// `[server]`, or its defaults when the file has none.
pub fn read_server(table: Option<TableReader<'_, '_>>) -> ServerSettings {
    read_section(table, &SERVER, ServerSettings::default(), |_, _, _| {})
}

/// `[fleet]`, or `None` when the file has none.
pub fn read_fleet(table: Option<TableReader<'_, '_>>) -> Option<FleetSettings> {
    let table = table?;
    Some(read_section(
        Some(table),
        &FLEET,
        FleetSettings::default(),
        validate::fleet,
    ))
}

/// One `[[upstream]]` with its sub-tables, and where its own keys were set (for the
/// checks across upstreams). Missing required keys leave placeholders, reported.
pub fn read_upstream(mut t: TableReader<'_, '_>) -> (UpstreamSettings, Set) {
    let mut u = UpstreamSettings::default();
    let set = read_keys(&mut t, &UPSTREAM, &mut u);
    validate::client_identity(&t, (&u.client_cert, &u.client_key), &set);
    let preset = u.preset;
    if !set.has("max_pause") {
        u.max_pause = max_pause_default(preset);
    }
    if !set.has("max_in_flight") {
        u.max_in_flight = crate::concurrency::default_for(preset);
    }
    u.sleeper = read_section(
        t.table("sleeper"),
        &SLEEPER,
        sleeper_defaults(),
        |t, s, set| {
            // `cubic` paces a rate: in delay mode the default is AutoSleeper's own.
            if !set.has("strategy") && s.mode == Mode::Delay {
                s.strategy = Strategy::Responsive;
            }
            let defaults = sleeper_defaults_for(s.strategy, s.mode);
            keep_unset(&SLEEPER, s, &defaults, set);
            validate::sleeper(t, s, set);
        },
    );
    u.throttle = read_section(
        t.table("throttle"),
        &THROTTLE,
        throttle_defaults(preset),
        |_, _, _| {},
    );
    let mut retry = RetrySettings::defaults_for(preset);
    if u.sleeper.mode == Mode::Observe {
        // Observe mode passes every answer on as it came, unless retries are asked for.
        retry.max_attempts = 1;
    }
    u.retry = read_section(t.table("retry"), &RETRY, retry, |_, _, _| {});
    u.queue = read_section(
        t.table("queue"),
        &QUEUE,
        QueueSettings::default(),
        |_, _, _| {},
    );
    u.sigv4 = t
        .table("sigv4")
        .map(|table| read_section(Some(table), &SIGV4, SigV4Settings::default(), |_, _, _| {}));
    u.fairness = t.table("fairness").map(|table| {
        read_section(
            Some(table),
            &FAIRNESS,
            FairnessSettings::default(),
            |_, _, _| {},
        )
    });
    u.connect_backoff = read_section(
        t.table("connect_backoff"),
        &CONNECT_BACKOFF,
        u.connect_backoff,
        validate::connect_backoff,
    );
    u.pool = read_section(
        t.table("pool"),
        &POOL,
        PoolSettings::default(),
        |_, _, _| {},
    );
    u.lanes = read_section(
        t.table("lanes"),
        &LANES,
        LaneSettings::defaults_for(preset),
        |_, lanes, _| validate::secret_headers(lanes),
    );
    t.finish(UPSTREAM_SECTIONS);
    (u, set)
}

/// Reads `table` over `defaults`, then lets `settle` fill in defaults that depend on
/// what was read and check keys against each other.
fn read_section<S>(
    table: Option<TableReader<'_, '_>>,
    schema: &Schema<S>,
    defaults: S,
    settle: impl FnOnce(&TableReader<'_, '_>, &mut S, &Set),
) -> S {
    let mut value = defaults;
    let Some(mut t) = table else {
        return value;
    };
    let set = read_keys(&mut t, schema, &mut value);
    settle(&t, &mut value, &set);
    t.finish(&[]);
    value
}
