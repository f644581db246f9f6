//! The TOML configuration file turned into a validated [`Config`].
//!
//! `schema.rs` declares every section and key once; `sections.rs` reads the tables
//! through it (`reader.rs` keeps every value's position, so every problem in a file is
//! reported at once as `file:line:column: message`); `validate.rs` checks keys against
//! each other and upstreams against each other; `effective.rs` prints the result for
//! `easeoff check`.

mod effective;
mod expand;
mod keys;
mod kinds;
mod reader;
mod schema;
mod sections;
pub mod units;
mod validate;

use std::io::Read;
use std::ops::Range;
use std::path::Path;

use toml::de::DeTable;

pub use kinds::{UpstreamUrl, ca_roots, client_identity};
use reader::{Sink, TableReader};
pub use schema::{
    AccessLog, Caller, ConnectBackoffSettings, FairnessSettings, FleetSettings, LaneSettings,
    PoolSettings, QueueSettings, RedisMode, RedisNodes, RedisUrl, RetrySettings, RuntimeShape,
    ServerSettings, SigV4Settings, UpstreamSettings,
};
pub use sections::ALL_SECTIONS;

/// The largest config file read: a real one is a few KiB, so anything near this is
/// the wrong file (or a device such as `/dev/zero`).
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// The whole configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub server: ServerSettings,
    pub upstreams: Vec<UpstreamSettings>,
    /// `[fleet]`; `None` runs each sidecar on its own.
    pub fleet: Option<FleetSettings>,
}

/// A configuration that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: cannot read the config file: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: the config file is larger than 1 MiB; is it the right file?")]
    TooLarge { path: String },
    #[error("{}", problems.iter().map(Problem::to_string).collect::<Vec<_>>().join("\n"))]
    Invalid { problems: Vec<Problem> },
}

/// One mistake in a config file, at a position.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub file: String,
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}",
            self.file, self.line, self.column, self.message
        )
    }
}

impl Config {
    /// Reads and validates a config file, expanding `${VAR}` from the process environment.
    /// Files over [`MAX_FILE_BYTES`] are refused unread beyond that size.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let shown = path.display().to_string();
        let read = |source| ConfigError::Read {
            path: shown.clone(),
            source,
        };
        let mut source = String::new();
        std::fs::File::open(path)
            .and_then(|file| file.take(MAX_FILE_BYTES + 1).read_to_string(&mut source))
            .map_err(read)?;
        if source.len() as u64 > MAX_FILE_BYTES {
            return Err(ConfigError::TooLarge { path: shown });
        }
        Config::parse(&source, &shown, &|name| std::env::var(name).ok())
    }

    /// Validates config text; `file` names it in messages, `env` answers `${VAR}`.
    pub fn parse(
        source: &str,
        file: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let problems = |items: Vec<(Range<usize>, String)>| ConfigError::Invalid {
            problems: locate(source, file, items),
        };
        let (doc, syntax) = DeTable::parse_recoverable(source);
        if !syntax.is_empty() {
            return Err(problems(
                syntax
                    .into_iter()
                    .map(|e| (e.span().unwrap_or(0..0), e.message().trim().to_string()))
                    .collect(),
            ));
        }
        let sink = Sink::default();
        let mut root = TableReader::new(&doc, &sink, env);
        let server = sections::read_server(root.table("server"));
        let fleet = sections::read_fleet(root.table("fleet"));
        let upstream_tables = root.tables("upstream");
        let upstream_span = root.span();
        root.finish(&[
            schema::SERVER.section(),
            schema::UPSTREAM.section(),
            schema::FLEET.section(),
        ]);

        let read: Vec<_> = upstream_tables
            .into_iter()
            .map(sections::read_upstream)
            .collect();
        validate::distinct(&sink, server.admin_listen, &read, |at| line_of(source, at));
        if read.is_empty() && sink.is_empty() {
            sink.push(
                upstream_span.start..upstream_span.start,
                "no [[upstream]] defined: easeoff needs at least one upstream to forward to".into(),
            );
        }
        let items = sink.into_items();
        if !items.is_empty() {
            return Err(problems(items));
        }
        let upstreams = read.into_iter().map(|(u, _)| u).collect();
        Ok(Config {
            server,
            upstreams,
            fleet,
        })
    }

    /// The effective configuration as TOML, defaults filled in (for `easeoff check`).
    pub fn to_toml(&self) -> String {
        effective::render(self)
    }
}

impl UpstreamSettings {
    /// This upstream's tables as [`Config::to_toml`] writes them.
    pub fn to_toml(&self) -> String {
        effective::render_one(self)
    }
}

/// Turns byte spans into `file:line:column` problems, in file order.
fn locate(source: &str, file: &str, mut items: Vec<(Range<usize>, String)>) -> Vec<Problem> {
    items.sort_by_key(|(span, _)| span.start);
    items
        .into_iter()
        .map(|(span, message)| {
            let at = span.start.min(source.len());
            let line_start = source[..at].rfind('\n').map_or(0, |i| i + 1);
            Problem {
                file: file.to_string(),
                line: line_of(source, at),
                column: source[line_start..at].chars().count() + 1,
                message,
            }
        })
        .collect()
}

fn line_of(source: &str, at: usize) -> usize {
    source[..at.min(source.len())].matches('\n').count() + 1
}

#[cfg(test)]
mod tests;
