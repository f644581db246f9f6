//! The effective configuration as TOML: every key with its value after defaults, in
//! the file's own vocabulary, so `easeoff check` output can be saved and loaded back.

use std::fmt::Write;
use std::time::Duration;

use super::units::{format_duration, format_size};
use super::{Config, UpstreamSettings};
use crate::sleeper::Initial;

/// Renders `config` as a TOML document.
pub fn render(config: &Config) -> String {
    let mut out = String::new();
    let s = &config.server;
    section(&mut out, "[server]");
    string(&mut out, "admin_listen", &s.admin_listen.to_string());
    duration(&mut out, "shutdown_grace", s.shutdown_grace);
    plain(&mut out, "max_connections", s.max_connections);
    plain(&mut out, "admin_allow_mutations", s.admin_allow_mutations);
    duration(&mut out, "header_read_timeout", s.header_read_timeout);
    duration(&mut out, "keepalive_timeout", s.keepalive_timeout);
    duration(&mut out, "body_idle_timeout", s.body_idle_timeout);
    duration(
        &mut out,
        "http2_keepalive_interval",
        s.http2_keepalive_interval,
    );
    plain(
        &mut out,
        "http2_max_concurrent_streams",
        s.http2_max_concurrent_streams,
    );
    plain(&mut out, "http2_max_resets", s.http2_max_resets);
    duration(&mut out, "http2_reset_window", s.http2_reset_window);
    plain(&mut out, "admin_max_connections", s.admin_max_connections);
    duration(&mut out, "admin_timeout", s.admin_timeout);
    string(&mut out, "runtime", s.runtime.name());
    for u in &config.upstreams {
        render_upstream(&mut out, u);
    }
    out
}

fn render_upstream(out: &mut String, u: &UpstreamSettings) {
    section(out, "[[upstream]]");
    string(out, "name", &u.name);
    string(out, "listen", &u.listen.to_string());
    string(out, "url", &u.url.to_string());
    string(out, "preset", u.preset.name());
    plain(out, "preserve_host", u.preserve_host);
    duration(out, "connect_timeout", u.connect_timeout);
    duration(out, "request_timeout", u.request_timeout);
    if let Some(ca) = &u.ca_file {
        string(out, "ca_file", &ca.display().to_string());
    }

    let s = &u.sleeper;
    section(out, "[upstream.sleeper]");
    string(out, "strategy", s.strategy.name());
    string(out, "mode", s.mode.name());
    match s.initial_interval {
        Initial::Auto => string(out, "initial_interval", "auto"),
        Initial::Fixed(d) => duration(out, "initial_interval", d),
    }
    duration(out, "min_interval", s.min_interval);
    duration(out, "max_interval", s.max_interval);
    duration(out, "max_randomization", s.max_randomization);
    plain(out, "up_multiplier", float(s.up_multiplier));
    plain(out, "down_multiplier", float(s.down_multiplier));
    plain(out, "randomization_factor", float(s.randomization_factor));
    plain(out, "down_threshold", s.down_threshold);
    plain(out, "beta", float(s.beta));
    duration(out, "recovery", s.recovery);

    let t = &u.throttle;
    section(out, "[upstream.throttle]");
    let statuses: Vec<String> = t.statuses.iter().map(u16::to_string).collect();
    plain(out, "statuses", format!("[{}]", statuses.join(", ")));
    plain(out, "body_codes", strings(&t.body_codes));
    let headers: Vec<String> = t
        .headers
        .iter()
        .map(|(name, needles)| format!("{} = {}", quote(name.as_str()), strings(needles)))
        .collect();
    plain(
        out,
        "headers",
        format!("{{ {} }}", headers.join(", ")).replace("{  }", "{}"),
    );

    let r = &u.retry;
    section(out, "[upstream.retry]");
    plain(out, "max_attempts", r.max_attempts);
    string(out, "max_body_bytes", &format_size(r.max_body_bytes));
    plain(out, "budget_ratio", float(r.budget_ratio));
    plain(out, "budget_min_per_second", r.budget_min_per_second);
    duration(out, "max_elapsed", r.max_elapsed);

    section(out, "[upstream.queue]");
    plain(out, "max_waiting", u.queue.max_waiting);
    duration(out, "max_wait", u.queue.max_wait);

    section(out, "[upstream.pool]");
    plain(out, "max_idle", u.pool.max_idle);
    duration(out, "idle_timeout", u.pool.idle_timeout);

    if let Some(sig) = &u.sigv4 {
        section(out, "[upstream.sigv4]");
        string(out, "service", &sig.service);
        string(out, "region", &sig.region);
    }

    let b = &u.connect_backoff;
    section(out, "[upstream.connect_backoff]");
    duration(out, "initial", b.initial);
    plain(out, "multiplier", float(b.multiplier));
    plain(out, "jitter", float(b.jitter));
    duration(out, "max", b.max);
    duration(out, "min_connect_timeout", b.min_connect_timeout);
}

fn section(out: &mut String, header: &str) {
    if !out.is_empty() {
        out.push('\n');
    }
    out.push_str(header);
    out.push('\n');
}

fn plain(out: &mut String, key: &str, value: impl std::fmt::Display) {
    let _ = writeln!(out, "{key} = {value}");
}

fn string(out: &mut String, key: &str, value: &str) {
    plain(out, key, quote(value));
}

fn duration(out: &mut String, key: &str, value: Duration) {
    string(out, key, &format_duration(value));
}

/// A float that TOML reads back as a float (`1.0`, not `1`).
fn float(value: f64) -> String {
    let text = value.to_string();
    if text.contains(['.', 'e', 'E']) {
        text
    } else {
        format!("{text}.0")
    }
}

fn strings(values: &[String]) -> String {
    let quoted: Vec<String> = values.iter().map(|v| quote(v)).collect();
    format!("[{}]", quoted.join(", "))
}

/// A TOML basic string; `$` is doubled so `${...}` is not expanded again on reload.
fn quote(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '$' => out.push_str("$$"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
