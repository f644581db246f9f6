//! Checks that relate several keys: within a section (the sleeper's start against its
//! bounds, the backoff's bounds) and across upstreams (names and listen addresses used
//! twice). A single key's range is its descriptor's business (`schema.rs`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use super::keys::Set;
use super::reader::{Sink, TableReader};
use super::schema::{
    ConnectBackoffSettings, FleetSettings, LaneSettings, RedisMode, UpstreamSettings,
};
use super::units::format_duration;
use crate::route::Part;
use crate::sleeper::{self, Initial, Mode, Strategy};

/// A member lives through at least two syncs, so one late sync does not drop it; TLS
/// files are for a TLS connection; `redis` and `sentinel_master` fit `redis_mode`.
pub fn fleet(t: &TableReader<'_, '_>, f: &mut FleetSettings, set: &Set) {
    let tls = f.redis.is_tls();
    for key in ["ca_file", "client_cert", "client_key"] {
        if set.has(key) && !tls {
            t.error(
                set.span(key),
                key,
                "is for a rediss:// (TLS) url; redis:// is plain TCP",
            );
        }
    }
    client_identity(t, (&f.client_cert, &f.client_key), set);
    if f.redis.urls().iter().any(|u| u.is_tls() != tls) {
        t.error(
            set.span("redis"),
            "redis",
            "mixes redis:// and rediss:// urls; every node is reached the same way",
        );
    }
    redis_mode(t, f, set);
    if f.member_ttl < f.sync_interval * 2 {
        t.error(
            set.span("member_ttl"),
            "member_ttl",
            format_args!(
                "({}) must be at least twice sync_interval ({})",
                format_duration(f.member_ttl),
                format_duration(f.sync_interval)
            ),
        );
    }
}

/// One url for a single server; a master's name with sentinel and only there; no
/// database but 0 in a cluster, which has no other.
fn redis_mode(t: &TableReader<'_, '_>, f: &FleetSettings, set: &Set) {
    let urls = f.redis.urls();
    match f.redis_mode {
        RedisMode::Single if urls.len() > 1 => t.error(
            set.span("redis"),
            "redis",
            "lists several urls: set redis_mode = \"cluster\" (seed nodes) or \"sentinel\" (sentinels), or give one url",
        ),
        RedisMode::Sentinel if f.sentinel_master.is_none() => t.error(
            set.span("redis_mode"),
            "sentinel_master",
            "is missing: \"sentinel\" needs the name the sentinels know the primary by (sentinel monitor <name> ...)",
        ),
        RedisMode::Cluster if urls.iter().any(|u| u.database() != Some(0)) => t.error(
            set.span("redis"),
            "redis",
            "names a database other than 0: a Redis Cluster has only database 0",
        ),
        RedisMode::Cluster => {
            // Different users or passwords among the seeds, say.
            if let Err(e) = redis::cluster::ClusterClient::new(urls.iter().map(|u| u.expose())) {
                t.error(set.span("redis"), "redis", format_args!("cannot seed a cluster: {e}"));
            }
        }
        _ => {}
    }
    if f.sentinel_master.is_some() && f.redis_mode != RedisMode::Sentinel {
        t.error(
            set.span("sentinel_master"),
            "sentinel_master",
            "is for redis_mode = \"sentinel\"",
        );
    }
}

/// The sleeper's strategy, mode and start agree, and its bounds are in order.
pub fn sleeper(t: &TableReader<'_, '_>, s: &sleeper::Settings, set: &Set) {
    let at = set.span("initial_interval");
    match s.initial_interval {
        _ if s.mode == Mode::Delay && s.strategy == Strategy::Cubic => t.error(
            set.span("strategy"),
            "strategy",
            "\"cubic\" paces a rate and needs mode = \"pace\"",
        ),
        Initial::Auto if s.mode == Mode::Delay => t.error(
            at,
            "initial_interval",
            "\"auto\" needs mode = \"pace\"; give a duration such as \"500ms\" in delay mode",
        ),
        Initial::Auto if s.strategy == Strategy::Constant => t.error(
            at,
            "initial_interval",
            "must be set to the fixed spacing when strategy = \"constant\", e.g. \"20ms\" for 50 requests/s",
        ),
        Initial::Fixed(d) if d.is_zero() && s.strategy != Strategy::Off => {
            t.error(at, "initial_interval", "must be greater than 0")
        }
        Initial::Fixed(d) if d > s.max_interval => t.error(
            at,
            "initial_interval",
            format_args!(
                "({}) must not exceed sleeper.max_interval ({})",
                format_duration(d),
                format_duration(s.max_interval)
            ),
        ),
        _ => {}
    }
    if s.min_interval > s.max_interval {
        t.error(
            set.span("min_interval"),
            "min_interval",
            format_args!(
                "({}) must not exceed sleeper.max_interval ({})",
                format_duration(s.min_interval),
                format_duration(s.max_interval)
            ),
        );
    }
}

/// `client_cert` and `client_key` come together, and the key is the certificate's, as
/// the upstream client checks when it loads them.
pub fn client_identity(
    t: &TableReader<'_, '_>,
    identity: (&Option<PathBuf>, &Option<PathBuf>),
    set: &Set,
) {
    match identity {
        (Some(_), None) if !set.has("client_key") => t.error(
            set.span("client_cert"),
            "client_cert",
            "needs client_key, the certificate's private key (PEM)",
        ),
        (None, Some(_)) if !set.has("client_cert") => t.error(
            set.span("client_key"),
            "client_key",
            "needs client_cert, the certificate chain (PEM) it belongs to",
        ),
        (Some(cert), Some(key)) => {
            if let Err(e) = super::kinds::client_identity(cert, key) {
                t.error(set.span("client_key"), "client_key", e);
            }
        }
        _ => {}
    }
}

/// The `header:` parts of `by` that `secret_headers` names name their lanes by a hash.
pub fn secret_headers(lanes: &mut LaneSettings) {
    for part in lanes.by.iter_mut().flatten() {
        if let Part::Header(name) = part
            && lanes.secret_headers.contains(name)
        {
            *part = Part::Secret(name.clone());
        }
    }
}

/// The backoff's ceiling is not below its first wait.
pub fn connect_backoff(t: &TableReader<'_, '_>, b: &mut ConnectBackoffSettings, set: &Set) {
    if b.initial > b.max {
        t.error(
            set.span("max"),
            "max",
            format_args!(
                "({}) must not be below connect_backoff.initial ({})",
                format_duration(b.max),
                format_duration(b.initial)
            ),
        );
    }
}

/// No two upstreams share a name, and no two listeners (the admin one included) can
/// clash. `line_of` turns a byte offset into the line a message cites.
pub fn distinct(
    sink: &Sink,
    admin_listen: SocketAddr,
    upstreams: &[(UpstreamSettings, Set)],
    line_of: impl Fn(usize) -> usize,
) {
    let mut seen_names: HashMap<&str, usize> = HashMap::new();
    let mut seen_listens: Vec<(SocketAddr, String)> =
        vec![(admin_listen, "server.admin_listen".into())];
    for (u, set) in upstreams {
        let named = set.has("name");
        if named {
            let span = set.span("name");
            if let Some(line) = seen_names.get(u.name.as_str()) {
                sink.push(
                    span,
                    format!(
                        "upstream \"{}\": name is already used by the upstream on line {line}",
                        u.name
                    ),
                );
            } else {
                seen_names.insert(&u.name, line_of(span.start));
            }
        }
        if set.has("listen") {
            let me = format!("upstream \"{}\"", if named { u.name.as_str() } else { "?" });
            match seen_listens.iter().find(|(a, _)| overlaps(*a, u.listen)) {
                Some((_, owner)) => sink.push(
                    set.span("listen"),
                    format!(
                        "{me}: listen address {} is already used by {owner}",
                        u.listen
                    ),
                ),
                None => seen_listens.push((u.listen, me)),
            }
        }
    }
}

/// Whether two listen addresses cannot both be bound: the same port on the same IP,
/// or on any IP when one of them is the wildcard address.
fn overlaps(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() == b.port()
        && a.port() != 0
        && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}
