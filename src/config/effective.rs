//! The effective configuration as TOML: every key with its value after defaults, in
//! the file's own vocabulary, so `easeoff check` output can be saved and loaded back.
//! Keys, their order and their spelling come from the schema.

use std::fmt::Write;

use super::keys::Schema;
use super::schema::{
    CONNECT_BACKOFF, FAIRNESS, FLEET, LANES, POOL, QUEUE, RETRY, SERVER, SIGV4, SLEEPER, THROTTLE,
    UPSTREAM,
};
use super::{Config, UpstreamSettings};

/// Renders `config` as a TOML document.
pub fn render(config: &Config) -> String {
    let mut out = String::new();
    section(&mut out, &SERVER, &config.server);
    if let Some(fleet) = &config.fleet {
        section(&mut out, &FLEET, fleet);
    }
    for u in &config.upstreams {
        upstream(&mut out, u);
    }
    out
}

/// Renders one upstream's tables.
pub fn render_one(u: &UpstreamSettings) -> String {
    let mut out = String::new();
    upstream(&mut out, u);
    out
}

fn upstream(out: &mut String, u: &UpstreamSettings) {
    section(out, &UPSTREAM, u);
    section(out, &SLEEPER, &u.sleeper);
    section(out, &THROTTLE, &u.throttle);
    section(out, &RETRY, &u.retry);
    section(out, &QUEUE, &u.queue);
    if let Some(sig) = &u.sigv4 {
        section(out, &SIGV4, sig);
    }
    if let Some(fair) = &u.fairness {
        section(out, &FAIRNESS, fair);
    }
    section(out, &CONNECT_BACKOFF, &u.connect_backoff);
    section(out, &POOL, &u.pool);
    section(out, &LANES, &u.lanes);
}

fn section<S>(out: &mut String, schema: &Schema<S>, value: &S) {
    if !out.is_empty() {
        out.push('\n');
    }
    out.push_str(schema.header);
    out.push('\n');
    for key in schema.keys {
        if let Some(text) = (key.show)(value) {
            let _ = writeln!(out, "{} = {text}", key.name);
        }
    }
}
