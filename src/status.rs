//! `easeoff status`: what the admin status page shows, as a table in a terminal. Reads
//! `/status` from a running easeoff over plain HTTP/1.1; rendering is pure, so it is
//! tested without a server.

use std::fmt::Write;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Uri};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::admin::document::{CapStatus, HistoryStatus, LaneStatus, Status, UpstreamStatus};

/// Where `easeoff status` looks when neither `--admin` nor a config names the admin server.
pub const DEFAULT_ADMIN: &str = "http://127.0.0.1:9901";

/// How long to wait for the admin server before giving up.
const TIMEOUT: Duration = Duration::from_secs(5);

/// Why the status could not be read.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    #[error("invalid admin URL \"{0}\": expected http://HOST:PORT")]
    Url(String),
    #[error("cannot reach the admin server at {url}: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("the admin server at {url} answered {status}")]
    Status { url: String, status: u16 },
    #[error("the admin server at {url} sent a status that is not JSON: {reason}")]
    Json { url: String, reason: String },
}

/// The admin URL for `--admin`: `http://` is added when no scheme is given.
pub fn admin_url(admin: &str) -> String {
    let trimmed = admin.trim_end_matches('/');
    if trimmed.contains("://") {
        trimmed.to_string()
    } else {
        format!("http://{trimmed}")
    }
}

/// GETs `{admin}/status` and parses it.
pub async fn fetch(admin: &str) -> Result<Status, StatusError> {
    let base = admin_url(admin);
    let url = format!("{base}/status");
    let uri: Uri = url
        .parse()
        .map_err(|_| StatusError::Url(admin.to_string()))?;
    if uri.scheme_str() != Some("http") || uri.host().is_none() {
        return Err(StatusError::Url(admin.to_string()));
    }
    let unreachable = |reason: String| StatusError::Unreachable {
        url: base.clone(),
        reason,
    };
    let request = Request::get(uri)
        .body(Empty::<Bytes>::new())
        .map_err(|e| unreachable(e.to_string()))?;
    let client = Client::builder(TokioExecutor::new()).build(HttpConnector::new());
    let answer = async {
        let response = client.request(request).await.map_err(|e| {
            // The legacy client's own message is only "client error (Connect)"; the
            // cause (refused, no route) is in its source.
            let cause = std::error::Error::source(&e).map_or(e.to_string(), |s| s.to_string());
            unreachable(cause)
        })?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| unreachable(e.to_string()))?
            .to_bytes();
        Ok::<_, StatusError>((status, body))
    };
    let (status, body) = tokio::time::timeout(TIMEOUT, answer)
        .await
        .map_err(|_| unreachable(format!("no answer within {} s", TIMEOUT.as_secs())))??;
    if !status.is_success() {
        return Err(StatusError::Status {
            url: base,
            status: status.as_u16(),
        });
    }
    serde_json::from_slice(&body).map_err(|e| StatusError::Json {
        url: base,
        reason: e.to_string(),
    })
}

/// The table: one row per upstream (its headline interval) and one per lane, then
/// each one's interval over the kept minutes as a line of bars, its `max_in_flight`
/// cap, and why each lane was last throttled.
pub fn render(status: &Status, admin: &str) -> String {
    let mut rows = vec![
        [
            "upstream",
            "interval",
            "queue",
            "in flight",
            "throttles",
            "retries",
            "success",
            "shed",
            "errors",
            "paused until",
            "sleeper",
        ]
        .map(String::from),
    ];
    for u in &status.upstreams {
        rows.push(upstream_row(u));
        for lane in &u.lanes {
            rows.push(lane_row(lane));
        }
    }
    let mut out = String::new();
    let _ = writeln!(out, "easeoff {} at {}", status.version, admin_url(admin));
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    for r in &rows {
        let cells: Vec<String> = r
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(c, (cell, w))| match c {
                // Names and words left, figures right.
                0 | 9 | 10 => format!("{cell:<w$}"),
                _ => format!("{cell:>w$}"),
            })
            .collect();
        let _ = writeln!(out, "{}", cells.join("  ").trim_end());
    }
    for u in &status.upstreams {
        let _ = write!(out, "\n{}", chart_line(&u.name, &u.history));
        if let Some(cap) = &u.in_flight_cap {
            let _ = writeln!(out, "{}", cap_line(&u.name, cap));
        }
        for lane in &u.lanes {
            if let Some(history) = &lane.history {
                let _ = write!(
                    out,
                    "  {}",
                    chart_line(&format!("lane {}", lane.name), history)
                );
            }
            if let Some(cap) = &lane.in_flight_cap {
                let _ = writeln!(out, "  {}", cap_line(&format!("lane {}", lane.name), cap));
            }
            if let Some(last) = &lane.last_throttle {
                let _ = writeln!(out, "  lane {}: {}", lane.name, last.words);
            }
        }
    }
    out
}

fn chart_line(name: &str, history: &HistoryStatus) -> String {
    let values = &history.interval_ms;
    format!(
        "{name}: interval over the last {} s (peak {}): {}\n",
        values.len(),
        ms(values.iter().copied().fold(0.0, f64::max)),
        bars(values, 60)
    )
}

/// `up: in flight 2 / cap 4 (learned, ceiling 4, last move refused; moves: grew 3,
/// refused 1), 1 waiting`; a fixed cap says `fixed`.
fn cap_line(name: &str, c: &CapStatus) -> String {
    let how = if c.setting == "learn" {
        let mut how = vec!["learned".to_string()];
        how.extend(c.ceiling.map(|n| format!("ceiling {n}")));
        how.extend(c.last_move.as_ref().map(|why| format!("last move {why}")));
        let moves: Vec<String> = c
            .moves
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(why, n)| format!("{why} {n}"))
            .collect();
        let mut how = how.join(", ");
        if !moves.is_empty() {
            let _ = write!(how, "; moves: {}", moves.join(", "));
        }
        how
    } else {
        "fixed".to_string()
    };
    format!(
        "{name}: in flight {} / cap {} ({how}), {} waiting",
        c.out, c.cap, c.waiting
    )
}

fn upstream_row(u: &UpstreamStatus) -> [String; 11] {
    let count = |key: &str| u.requests.get(key).copied().unwrap_or(0);
    [
        u.name.clone(),
        ms(u.interval_ms),
        u.waiting.to_string(),
        u.in_flight.to_string(),
        u.throttles.values().sum::<u64>().to_string(),
        u.retries.values().sum::<u64>().to_string(),
        count("success").to_string(),
        count("shed").to_string(),
        (count("error") + count("timeout")).to_string(),
        u.paused_until.clone().unwrap_or_else(|| "-".to_string()),
        format!("{}, {}", u.strategy, u.mode),
    ]
}

fn lane_row(lane: &LaneStatus) -> [String; 11] {
    let dash = || "-".to_string();
    [
        format!("  lane {}", lane.name),
        ms(lane.interval_ms),
        lane.waiting.to_string(),
        dash(),
        lane.throttles
            .as_ref()
            .map_or_else(dash, |t| t.values().sum::<u64>().to_string()),
        dash(),
        dash(),
        dash(),
        dash(),
        lane.paused_until.clone().unwrap_or_else(dash),
        dash(),
    ]
}

/// The largest value of each of `width` spans as one of eight bar heights.
#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "float to integer `as` saturates, as wanted here"
)]
fn bars(values: &[f64], width: usize) -> String {
    const LEVELS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    if values.is_empty() {
        return "(no samples yet)".to_string();
    }
    let peak = values.iter().copied().fold(0.0, f64::max);
    let per = values.len().div_ceil(width);
    values
        .chunks(per)
        .map(|chunk| {
            let v = chunk.iter().copied().fold(0.0, f64::max);
            let level = if peak > 0.0 {
                (v / peak * 7.0).round() as usize
            } else {
                0
            };
            LEVELS[level.min(7)]
        })
        .collect()
}

fn ms(v: f64) -> String {
    if v >= 1000.0 {
        format!("{:.2} s", v / 1000.0)
    } else {
        format!("{v:.1} ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn one_row_per_upstream_and_lane_with_its_figures() {
        let status: Status = serde_json::from_value(json!({
            "version": "1.2.3",
            "upstreams": [{
                "name": "orders", "interval_ms": 50.0, "waiting": 3, "in_flight": 1,
                "paused_until": null, "strategy": "cubic", "mode": "pace",
                "requests": {"success": 10, "throttled": 1, "error": 2, "shed": 4, "timeout": 1},
                "throttles": {"status": 5, "body": 2}, "retries": {"throttle": 6, "connect": 0},
                "history": {"interval_ms": [0.0, 25.0, 50.0]},
                "lanes": [{"name": "writes", "interval_ms": 1500.0, "waiting": 0,
                           "history": {"interval_ms": [1500.0]},
                           "last_throttle": {"reason": "status", "words": "throttled by a 429"}}],
            }],
        }))
        .unwrap();
        let out = render(&status, "127.0.0.1:9901");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "easeoff 1.2.3 at http://127.0.0.1:9901");
        let orders: Vec<&str> = lines[2].split_whitespace().collect();
        assert_eq!(
            orders,
            [
                "orders", "50.0", "ms", "3", "1", "7", "6", "10", "4", "3", "-", "cubic,", "pace"
            ]
        );
        assert!(lines[3].starts_with("  lane writes"), "{out}");
        assert!(lines[3].contains("1.50 s"), "{out}");
        assert!(
            out.contains("orders: interval over the last 3 s (peak 50.0 ms): ▁▅█"),
            "{out}"
        );
        assert!(
            out.contains("  lane writes: interval over the last 1 s (peak 1.50 s): █"),
            "{out}"
        );
        assert!(out.contains("  lane writes: throttled by a 429"), "{out}");
    }

    #[test]
    fn a_capped_upstream_or_lane_gets_a_line_for_its_cap() {
        let status: Status = serde_json::from_value(json!({
            "upstreams": [
                {"name": "llm", "in_flight_cap": {
                    "setting": "learn", "cap": 4, "out": 2, "waiting": 1, "ceiling": 4,
                    "last_move": "refused",
                    "moves": {"grew": 3, "refused": 1, "latency": 0, "fleet": 0}}},
                {"name": "api", "in_flight_cap": {
                    "setting": "3", "cap": 3, "out": 0, "waiting": 0, "ceiling": null,
                    "last_move": null, "moves": {"grew": 0}}},
                {"name": "plain", "lanes": [
                    {"name": "m1", "in_flight_cap": {
                        "setting": "learn", "cap": 2, "out": 2, "waiting": 0, "ceiling": 2,
                        "last_move": "fleet", "moves": {"fleet": 5}}},
                    {"name": "m2"}]},
            ],
        }))
        .unwrap();
        let out = render(&status, "127.0.0.1:9901");
        assert!(
            out.contains(
                "\nllm: in flight 2 / cap 4 (learned, ceiling 4, last move refused; \
                 moves: grew 3, refused 1), 1 waiting\n"
            ),
            "{out}"
        );
        assert!(
            out.contains("\napi: in flight 0 / cap 3 (fixed), 0 waiting\n"),
            "{out}"
        );
        assert!(!out.contains("plain: in flight"), "{out}");
        // A lane's own cap: a line of its own under its upstream.
        assert!(
            out.contains(
                "\n  lane m1: in flight 2 / cap 2 (learned, ceiling 2, last move fleet; \
                 moves: fleet 5), 0 waiting\n"
            ),
            "{out}"
        );
        assert!(!out.contains("lane m2: in flight"), "{out}");
    }

    #[test]
    fn long_histories_are_squeezed_into_the_width() {
        let values: Vec<f64> = (0..600).map(f64::from).collect();
        let line = bars(&values, 60);
        assert_eq!(line.chars().count(), 60);
        assert!(line.ends_with('█'));
        assert_eq!(bars(&[], 60), "(no samples yet)");
    }

    #[test]
    fn admin_addresses_without_a_scheme_get_http() {
        assert_eq!(admin_url("127.0.0.1:9901"), "http://127.0.0.1:9901");
        assert_eq!(admin_url("http://[::1]:9901/"), "http://[::1]:9901");
    }
}
