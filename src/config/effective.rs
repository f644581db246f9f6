//! The effective configuration as TOML: every key with its value after defaults, in
//! the file's own vocabulary, so `easeoff check` output can be saved and loaded back.
//! Keys, their order and their spelling come from the schema.

use std::fmt::Write;

use super::Config;
use super::keys::Schema;
use super::schema::{
    CONNECT_BACKOFF, POOL, QUEUE, RETRY, SERVER, SIGV4, SLEEPER, THROTTLE, UPSTREAM,
};

/// Renders `config` as a TOML document.
pub fn render(config: &Config) -> String {
    let mut out = String::new();
    section(&mut out, &SERVER, &config.server);
    for u in &config.upstreams {
        section(&mut out, &UPSTREAM, u);
        section(&mut out, &SLEEPER, &u.sleeper);
        section(&mut out, &THROTTLE, &u.throttle);
        section(&mut out, &RETRY, &u.retry);
        section(&mut out, &QUEUE, &u.queue);
        if let Some(sig) = &u.sigv4 {
            section(&mut out, &SIGV4, sig);
        }
        section(&mut out, &CONNECT_BACKOFF, &u.connect_backoff);
        section(&mut out, &POOL, &u.pool);
    }
    out
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
