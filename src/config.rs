//! The TOML configuration file (SPEC §2) turned into a validated [`Config`].
//!
//! Reading goes through `reader.rs`, which keeps every value's position, so every
//! problem in a file is reported at once as `file:line:column: message`. Defaults that
//! depend on the strategy (gRPC's for `exponential`) are filled in here; `effective.rs`
//! prints the result for `easeoff check`.

mod effective;
mod expand;
mod reader;
pub mod units;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use http::HeaderName;
use http::uri::{Authority, Scheme, Uri};
use toml::Spanned;
use toml::de::DeTable;

use crate::sleeper::{self, Initial, Mode, Strategy};
use crate::throttle::{Preset, Rules};
use reader::{Section, Sink, TableReader};
use units::parse_duration;

/// The whole configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub server: ServerSettings,
    pub upstreams: Vec<UpstreamSettings>,
}

/// `[server]`.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerSettings {
    /// Where `/metrics`, `/healthz`, `/readyz` and `/status` are served.
    pub admin_listen: SocketAddr,
    /// How long requests may take to finish after SIGTERM.
    pub shutdown_grace: Duration,
    /// Client connections open at once, over all listeners.
    pub max_connections: usize,
    /// Enables `POST /upstreams/{name}/reset`.
    pub admin_allow_mutations: bool,
    /// A client must send its first request head within this time of connecting.
    pub header_read_timeout: Duration,
    /// A client connection with no request open is closed after this time.
    pub keepalive_timeout: Duration,
    /// The longest silence inside a request body (client) or response body (upstream).
    pub body_idle_timeout: Duration,
    /// HTTP/2 clients are pinged after this much silence and dropped if they do not
    /// answer within the same time.
    pub http2_keepalive_interval: Duration,
    /// HTTP/2 streams open at once on one client connection.
    pub http2_max_concurrent_streams: u32,
    /// HTTP/2 streams a client connection may cancel after their request began, per
    /// `http2_reset_window`, before it gets a GOAWAY.
    pub http2_max_resets: u32,
    /// The window `http2_max_resets` counts in.
    pub http2_reset_window: Duration,
    /// Admin connections open at once; more are closed at once.
    pub admin_max_connections: usize,
    /// An admin connection's request head deadline from connecting, and its idle timeout.
    pub admin_timeout: Duration,
    /// How the listeners' connections are spread over threads.
    pub runtime: RuntimeShape,
}

/// `[server] runtime`: the thread layout that serves client connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuntimeShape {
    /// One work-stealing tokio runtime for everything.
    MultiThread,
    /// One single-threaded runtime per CPU, each accepting on its own `SO_REUSEPORT`
    /// socket: less hand-over between threads, the shape nginx has.
    PerCore,
}

impl RuntimeShape {
    /// The config names, in declaration order.
    pub const NAMES: [&'static str; 2] = ["multi-thread", "per-core"];

    /// The config name.
    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }
}

/// One `[[upstream]]`.
#[derive(Clone, Debug, PartialEq)]
pub struct UpstreamSettings {
    pub name: String,
    pub listen: SocketAddr,
    pub url: UpstreamUrl,
    pub preset: Preset,
    /// Send the client's Host instead of the upstream's.
    pub preserve_host: bool,
    pub connect_timeout: Duration,
    /// Per attempt, until the response head arrives; 504 when it expires.
    pub request_timeout: Duration,
    /// Extra trusted CA certificates (PEM) for an https upstream.
    pub ca_file: Option<PathBuf>,
    pub pool: PoolSettings,
    pub sleeper: sleeper::Settings,
    pub throttle: Rules,
    pub retry: RetrySettings,
    pub queue: QueueSettings,
    pub sigv4: Option<SigV4Settings>,
    pub connect_backoff: ConnectBackoffSettings,
}

/// The upstream's address, split the way forwarding needs it.
#[derive(Clone, Debug, PartialEq)]
pub struct UpstreamUrl {
    pub scheme: Scheme,
    pub authority: Authority,
    /// Prefixed to every request path; empty or starting with `/`, never ending in `/`.
    pub base_path: String,
}

impl UpstreamUrl {
    /// Scheme, host and port, for `/status` and logs: a base path can carry a token.
    pub fn origin(&self) -> String {
        format!("{}://{}", self.scheme, self.authority)
    }
}

impl std::fmt::Display for UpstreamUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}{}", self.scheme, self.authority, self.base_path)
    }
}

/// `[upstream.retry]`.
#[derive(Clone, Debug, PartialEq)]
pub struct RetrySettings {
    /// Total attempts for a throttled request; 1 turns retries off.
    pub max_attempts: u32,
    /// Larger request bodies stream and are never retried.
    pub max_body_bytes: u64,
    /// Retries may be at most this fraction of requests over 10 s ...
    pub budget_ratio: f64,
    /// ... plus this many per second.
    pub budget_min_per_second: u32,
    pub max_elapsed: Duration,
}

/// `[upstream.queue]`.
#[derive(Clone, Debug, PartialEq)]
pub struct QueueSettings {
    /// Requests waiting for a slot; beyond this they are shed.
    pub max_waiting: usize,
    /// An expected or actual wait beyond this is shed.
    pub max_wait: Duration,
}

/// `[upstream.pool]`: the idle connections kept to the upstream.
#[derive(Clone, Debug, PartialEq)]
pub struct PoolSettings {
    /// Idle connections kept, over all threads.
    pub max_idle: usize,
    /// An idle connection unused this long is closed.
    pub idle_timeout: Duration,
}

/// `[upstream.sigv4]`.
#[derive(Clone, Debug, PartialEq)]
pub struct SigV4Settings {
    pub service: String,
    pub region: String,
}

/// `[upstream.connect_backoff]`: gRPC's connection backoff.
#[derive(Clone, Debug, PartialEq)]
pub struct ConnectBackoffSettings {
    pub initial: Duration,
    pub multiplier: f64,
    pub jitter: f64,
    pub max: Duration,
    pub min_connect_timeout: Duration,
}

/// A configuration that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: cannot read the config file: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
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

const SERVER_KEYS: &[&str] = &[
    "admin_listen",
    "shutdown_grace",
    "max_connections",
    "admin_allow_mutations",
    "header_read_timeout",
    "keepalive_timeout",
    "body_idle_timeout",
    "http2_keepalive_interval",
    "http2_max_concurrent_streams",
    "http2_max_resets",
    "http2_reset_window",
    "admin_max_connections",
    "admin_timeout",
    "runtime",
];
const SLEEPER_KEYS: &[&str] = &[
    "strategy",
    "mode",
    "initial_interval",
    "min_interval",
    "max_interval",
    "max_randomization",
    "up_multiplier",
    "down_multiplier",
    "randomization_factor",
    "down_threshold",
    "beta",
    "recovery",
];
const THROTTLE_KEYS: &[&str] = &["statuses", "body_codes", "headers"];
const RETRY_KEYS: &[&str] = &[
    "max_attempts",
    "max_body_bytes",
    "budget_ratio",
    "budget_min_per_second",
    "max_elapsed",
];
const QUEUE_KEYS: &[&str] = &["max_waiting", "max_wait"];
const SIGV4_KEYS: &[&str] = &["service", "region"];
const POOL_KEYS: &[&str] = &["max_idle", "idle_timeout"];
const BACKOFF_KEYS: &[&str] = &[
    "initial",
    "multiplier",
    "jitter",
    "max",
    "min_connect_timeout",
];
const UPSTREAM_SECTIONS: &[Section] = &[
    ("[upstream.sleeper]", SLEEPER_KEYS),
    ("[upstream.throttle]", THROTTLE_KEYS),
    ("[upstream.retry]", RETRY_KEYS),
    ("[upstream.queue]", QUEUE_KEYS),
    ("[upstream.sigv4]", SIGV4_KEYS),
    ("[upstream.connect_backoff]", BACKOFF_KEYS),
    ("[upstream.pool]", POOL_KEYS),
];

impl Config {
    /// Reads and validates a config file, expanding `${VAR}` from the process environment.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let shown = path.display().to_string();
        let source = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: shown.clone(),
            source,
        })?;
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
        let server = read_server(root.table("server"));
        let upstream_tables = root.tables("upstream");
        let upstream_span = root.span();
        root.finish(&[
            ("[server]", SERVER_KEYS),
            ("[[upstream]]", &["name", "listen", "url"]),
        ]);

        let mut upstreams = Vec::new();
        let mut seen_names: HashMap<String, usize> = HashMap::new();
        let mut seen_listens: Vec<(SocketAddr, String)> =
            vec![(server.admin_listen, "server.admin_listen".into())];
        for table in upstream_tables {
            let (upstream, keys) = read_upstream(table);
            let label = keys.name.as_ref().map(|n| n.get_ref().clone());
            if let Some(name) = &keys.name {
                if let Some(line) = seen_names.get(name.get_ref()) {
                    sink.push(
                        name.span(),
                        format!(
                            "upstream \"{}\": name is already used by the upstream on line {line}",
                            name.get_ref()
                        ),
                    );
                } else {
                    seen_names.insert(name.get_ref().clone(), line_of(source, name.span().start));
                }
            }
            if let Some(listen) = &keys.listen {
                let me = format!("upstream \"{}\"", label.as_deref().unwrap_or("?"));
                match seen_listens
                    .iter()
                    .find(|(a, _)| overlaps(*a, *listen.get_ref()))
                {
                    Some((_, owner)) => sink.push(
                        listen.span(),
                        format!(
                            "{me}: listen address {} is already used by {owner}",
                            listen.get_ref()
                        ),
                    ),
                    None => seen_listens.push((*listen.get_ref(), me)),
                }
            }
            upstreams.extend(upstream);
        }
        if upstreams.is_empty() && sink.is_empty() {
            sink.push(
                upstream_span.start..upstream_span.start,
                "no [[upstream]] defined: easeoff needs at least one upstream to forward to".into(),
            );
        }
        let items = sink.into_items();
        if !items.is_empty() {
            return Err(problems(items));
        }
        Ok(Config { server, upstreams })
    }

    /// The effective configuration as TOML, defaults filled in (for `easeoff check`).
    pub fn to_toml(&self) -> String {
        effective::render(self)
    }
}

/// Whether two listen addresses cannot both be bound: the same port on the same IP,
/// or on any IP when one of them is the wildcard address.
fn overlaps(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() == b.port()
        && a.port() != 0
        && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}

/// The values that cross-upstream checks look at, with their positions; present
/// even when the upstream as a whole is invalid.
struct UpstreamKeys {
    name: Option<Spanned<String>>,
    listen: Option<Spanned<SocketAddr>>,
}

fn read_server(table: Option<TableReader<'_, '_>>) -> ServerSettings {
    let mut s = ServerSettings {
        admin_listen: SocketAddr::from(([127, 0, 0, 1], 9901)),
        shutdown_grace: Duration::from_secs(25),
        max_connections: 10_000,
        admin_allow_mutations: false,
        header_read_timeout: Duration::from_secs(30),
        // Above the pool idle times of common HTTP clients (Go's 90 s), so a client
        // retires an idle connection before easeoff closes it under a request.
        keepalive_timeout: Duration::from_secs(120),
        body_idle_timeout: Duration::from_secs(60),
        http2_keepalive_interval: Duration::from_secs(30),
        http2_max_concurrent_streams: 100,
        http2_max_resets: 100,
        http2_reset_window: Duration::from_secs(10),
        admin_max_connections: 32,
        admin_timeout: Duration::from_secs(10),
        runtime: RuntimeShape::PerCore,
    };
    let Some(mut t) = table else {
        return s;
    };
    if let Some(v) = t.parsed("admin_listen", parse_socket_addr) {
        s.admin_listen = v.into_inner();
    }
    if let Some(v) = t.duration("shutdown_grace") {
        s.shutdown_grace = v.into_inner();
    }
    if let Some(v) = t.unsigned("max_connections") {
        if *v.get_ref() == 0 {
            t.error(v.span(), "max_connections", "must be at least 1, got 0");
        } else {
            s.max_connections = usize::try_from(*v.get_ref()).unwrap_or(usize::MAX);
        }
    }
    if let Some(v) = t.boolean("admin_allow_mutations") {
        s.admin_allow_mutations = v;
    }
    if let Some(v) = positive_duration(&mut t, "header_read_timeout") {
        s.header_read_timeout = v;
    }
    for (key, field) in [
        ("keepalive_timeout", &mut s.keepalive_timeout),
        ("body_idle_timeout", &mut s.body_idle_timeout),
        ("http2_keepalive_interval", &mut s.http2_keepalive_interval),
        ("http2_reset_window", &mut s.http2_reset_window),
        ("admin_timeout", &mut s.admin_timeout),
    ] {
        if let Some(v) = positive_duration(&mut t, key) {
            *field = v;
        }
    }
    for (key, field) in [
        (
            "http2_max_concurrent_streams",
            &mut s.http2_max_concurrent_streams,
        ),
        ("http2_max_resets", &mut s.http2_max_resets),
    ] {
        if let Some(v) = positive_count(&mut t, key) {
            *field = u32::try_from(v).unwrap_or(u32::MAX);
        }
    }
    if let Some(v) = positive_count(&mut t, "admin_max_connections") {
        s.admin_max_connections = usize::try_from(v).unwrap_or(usize::MAX);
    }
    if let Some(i) = t.choice("runtime", &RuntimeShape::NAMES) {
        s.runtime = if *i.get_ref() == 0 {
            RuntimeShape::MultiThread
        } else {
            RuntimeShape::PerCore
        };
    }
    t.finish(&[]);
    s
}

fn read_upstream(mut t: TableReader<'_, '_>) -> (Option<UpstreamSettings>, UpstreamKeys) {
    let name = t.string("name");
    match &name {
        Some(n) => t.set_context(format!("upstream \"{}\": ", n.get_ref())),
        None => {
            let context = "upstream: ".to_string();
            t.set_context(context);
            let at = t.span().start;
            t.error(
                at..at,
                "name",
                "is missing (every [[upstream]] needs a name)",
            );
        }
    }
    if let Some(n) = &name
        && (n.get_ref().is_empty()
            || !n
                .get_ref()
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        t.error(
            n.span(),
            "name",
            format_args!(
                "must be letters, digits, '-', '_' or '.', got \"{}\"",
                n.get_ref()
            ),
        );
    }
    let listen = required(&mut t, "listen", parse_socket_addr);
    let url = required(&mut t, "url", parse_url);
    let preset = t
        .choice("preset", &Preset::NAMES)
        .map_or(Preset::None, |i| Preset::from_index(i.into_inner()));
    let preserve_host = t.boolean("preserve_host").unwrap_or(false);
    let connect_timeout =
        positive_duration(&mut t, "connect_timeout").unwrap_or(Duration::from_secs(20));
    let request_timeout =
        positive_duration(&mut t, "request_timeout").unwrap_or(Duration::from_secs(60));
    let ca_file = t.parsed("ca_file", |path| {
        std::fs::metadata(path)
            .map(|_| PathBuf::from(path))
            .map_err(|e| format!("cannot read \"{path}\": {e}"))
    });
    let sleeper = read_sleeper(t.table("sleeper"), preset);
    let throttle = read_throttle(t.table("throttle"));
    let retry = read_retry(t.table("retry"), preset);
    let queue = read_queue(t.table("queue"));
    let sigv4 = t.table("sigv4").map(read_sigv4);
    let connect_backoff = read_connect_backoff(t.table("connect_backoff"));
    let pool = read_pool(t.table("pool"));
    t.finish(UPSTREAM_SECTIONS);

    let keys = UpstreamKeys {
        name: name.clone(),
        listen: listen.clone(),
    };
    let (Some(name), Some(listen), Some(url)) = (name, listen, url) else {
        return (None, keys);
    };
    let upstream = UpstreamSettings {
        name: name.into_inner(),
        listen: listen.into_inner(),
        url: url.into_inner(),
        preset,
        preserve_host,
        connect_timeout,
        request_timeout,
        ca_file: ca_file.map(Spanned::into_inner),
        pool,
        sleeper,
        throttle,
        retry,
        queue,
        sigv4,
        connect_backoff,
    };
    (Some(upstream), keys)
}

fn required<T>(
    t: &mut TableReader<'_, '_>,
    key: &'static str,
    parse: impl FnOnce(&str) -> Result<T, String>,
) -> Option<Spanned<T>> {
    let value = t.parsed(key, parse);
    if value.is_none() && !t.has(key) {
        let at = t.span().start;
        t.error(at..at, key, "is missing");
    }
    value
}

fn read_sleeper(table: Option<TableReader<'_, '_>>, preset: Preset) -> sleeper::Settings {
    let mut s = sleeper::Settings::seed_defaults();
    // AWS services throttle with token buckets, which `cubic` tracks closely; other
    // upstreams keep the seed's strategy, the contract's default.
    if matches!(preset, Preset::Aws | Preset::DynamoDb) {
        s.strategy = Strategy::Cubic;
    }
    let Some(mut t) = table else {
        return s;
    };
    let strategy = t.choice("strategy", &Strategy::NAMES);
    if let Some(i) = &strategy {
        s.strategy = Strategy::from_index(*i.get_ref());
    }
    if let Some(i) = t.choice("mode", &Mode::NAMES) {
        s.mode = if *i.get_ref() == 0 {
            Mode::Pace
        } else {
            Mode::Delay
        };
    }
    // gRPC's defaults for its own algorithm, the seed's for the others.
    if s.strategy == Strategy::Exponential {
        s.up_multiplier = 1.6;
        s.randomization_factor = 0.2;
        s.max_interval = Duration::from_secs(120);
    }
    s.initial_interval = match (s.mode, s.strategy) {
        (Mode::Pace, _) => Initial::Auto,
        (Mode::Delay, Strategy::Exponential) => Initial::Fixed(Duration::from_secs(1)),
        (Mode::Delay, _) => Initial::Fixed(Duration::from_millis(500)),
    };
    let initial = t.parsed("initial_interval", |text| {
        if text == "auto" {
            Ok(Initial::Auto)
        } else {
            parse_duration(text)
                .map(Initial::Fixed)
                .map_err(|e| format!("{e}, or \"auto\""))
        }
    });
    if let Some(v) = &initial {
        s.initial_interval = *v.get_ref();
    }
    let min = t.duration("min_interval");
    if let Some(v) = &min {
        s.min_interval = *v.get_ref();
    }
    let max = t.duration("max_interval");
    if let Some(v) = &max {
        s.max_interval = *v.get_ref();
    }
    if let Some(v) = t.duration("max_randomization") {
        s.max_randomization = v.into_inner();
    }
    if let Some(v) = in_range(&mut t, "up_multiplier", |x| x >= 1.0, "at least 1") {
        s.up_multiplier = v;
    }
    if let Some(v) = in_range(
        &mut t,
        "down_multiplier",
        |x| x > 0.0 && x <= 1.0,
        "in (0, 1]",
    ) {
        s.down_multiplier = v;
    }
    if let Some(v) = in_range(
        &mut t,
        "randomization_factor",
        |x| (0.0..1.0).contains(&x),
        "in [0, 1)",
    ) {
        s.randomization_factor = v;
    }
    if let Some(v) = in_range(&mut t, "beta", |x| x > 0.0 && x < 1.0, "in (0, 1)") {
        s.beta = v;
    }
    if let Some(v) = positive_duration(&mut t, "recovery") {
        s.recovery = v;
    }
    if let Some(v) = t.unsigned("down_threshold") {
        match u32::try_from(*v.get_ref()) {
            Ok(n) if n >= 1 => s.down_threshold = n,
            _ => t.error(
                v.span(),
                "down_threshold",
                format_args!("must be from 1 to {}, got {}", u32::MAX, v.get_ref()),
            ),
        }
    }

    let strategy_span = strategy.as_ref().map_or_else(|| t.span(), Spanned::span);
    let initial_span = initial.as_ref().map(Spanned::span);
    let at = initial_span.clone().unwrap_or_else(|| t.span());
    match s.initial_interval {
        _ if s.mode == Mode::Delay && s.strategy == Strategy::Cubic => t.error(
            strategy_span,
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
                units::format_duration(d),
                units::format_duration(s.max_interval)
            ),
        ),
        _ => {}
    }
    if s.min_interval > s.max_interval {
        let at = min.map(|m| m.span()).unwrap_or_else(|| t.span());
        t.error(
            at,
            "min_interval",
            format_args!(
                "({}) must not exceed sleeper.max_interval ({})",
                units::format_duration(s.min_interval),
                units::format_duration(s.max_interval)
            ),
        );
    }
    if s.max_interval.is_zero() {
        let at = max.map(|m| m.span()).unwrap_or_else(|| t.span());
        t.error(at, "max_interval", "must be greater than 0");
    }
    t.finish(&[]);
    s
}

fn read_throttle(table: Option<TableReader<'_, '_>>) -> Rules {
    let mut rules = Rules {
        statuses: vec![429, 503],
        ..Rules::default()
    };
    let Some(mut t) = table else {
        return rules;
    };
    if let Some(list) = t.unsigned_array("statuses") {
        rules.statuses = Vec::new();
        for code in list.into_inner() {
            match u16::try_from(*code.get_ref()) {
                Ok(c) if (100..=599).contains(&c) => rules.statuses.push(c),
                _ => t.error(
                    code.span(),
                    "statuses",
                    format_args!(
                        "must hold HTTP statuses from 100 to 599, got {}",
                        code.get_ref()
                    ),
                ),
            }
        }
    }
    if let Some(codes) = t.string_array("body_codes") {
        for code in codes {
            if code.get_ref().is_empty() {
                t.error(code.span(), "body_codes", "must not hold an empty string");
            } else {
                rules.body_codes.push(code.into_inner());
            }
        }
    }
    for (name, needles) in t.string_lists("headers") {
        match HeaderName::from_bytes(name.get_ref().as_bytes()) {
            Ok(header) => rules.headers.push((
                header,
                needles.into_iter().map(Spanned::into_inner).collect(),
            )),
            Err(_) => t.error(
                name.span(),
                "headers",
                format_args!("has an invalid header name \"{}\"", name.get_ref()),
            ),
        }
    }
    t.finish(&[]);
    rules
}

fn read_retry(table: Option<TableReader<'_, '_>>, preset: Preset) -> RetrySettings {
    let mut r = RetrySettings {
        // botocore's retry policy: 10 attempts for DynamoDB, where throttling is
        // routine, 5 elsewhere. easeoff's retries are paced and budgeted, so extra
        // attempts add no load above the interval; they only absorb the clusters of
        // throttles a controller's probing produces.
        max_attempts: if preset == Preset::DynamoDb { 10 } else { 5 },
        max_body_bytes: 1 << 20,
        budget_ratio: 0.2,
        budget_min_per_second: 10,
        max_elapsed: Duration::from_secs(30),
    };
    let Some(mut t) = table else {
        return r;
    };
    if let Some(v) = t.unsigned("max_attempts") {
        match u32::try_from(*v.get_ref()) {
            Ok(n) if n >= 1 => r.max_attempts = n,
            _ => t.error(
                v.span(),
                "max_attempts",
                format_args!(
                    "must be at least 1 (1 turns retries off), got {}",
                    v.get_ref()
                ),
            ),
        }
    }
    if let Some(v) = t.size("max_body_bytes") {
        r.max_body_bytes = v.into_inner();
    }
    if let Some(v) = in_range(
        &mut t,
        "budget_ratio",
        |x| (0.0..=1000.0).contains(&x),
        "from 0 to 1000",
    ) {
        r.budget_ratio = v;
    }
    if let Some(v) = t.unsigned("budget_min_per_second") {
        r.budget_min_per_second = u32::try_from(v.into_inner()).unwrap_or(u32::MAX);
    }
    if let Some(v) = t.duration("max_elapsed") {
        r.max_elapsed = v.into_inner();
    }
    t.finish(&[]);
    r
}

fn read_queue(table: Option<TableReader<'_, '_>>) -> QueueSettings {
    let mut q = QueueSettings {
        max_waiting: 1000,
        max_wait: Duration::from_secs(30),
    };
    let Some(mut t) = table else {
        return q;
    };
    if let Some(v) = t.unsigned("max_waiting") {
        q.max_waiting = usize::try_from(v.into_inner()).unwrap_or(usize::MAX);
    }
    if let Some(v) = t.duration("max_wait") {
        q.max_wait = v.into_inner();
    }
    t.finish(&[]);
    q
}

fn read_sigv4(mut t: TableReader<'_, '_>) -> SigV4Settings {
    let mut field = |key: &'static str| match t.string(key) {
        Some(v) if !v.get_ref().is_empty() => v.into_inner(),
        Some(v) => {
            t.error(v.span(), key, "must not be empty");
            String::new()
        }
        None => {
            let at = t.span().start;
            t.error(
                at..at,
                key,
                "is missing ([upstream.sigv4] needs service and region)",
            );
            String::new()
        }
    };
    let settings = SigV4Settings {
        service: field("service"),
        region: field("region"),
    };
    t.finish(&[]);
    settings
}

fn read_connect_backoff(table: Option<TableReader<'_, '_>>) -> ConnectBackoffSettings {
    let mut b = ConnectBackoffSettings {
        initial: Duration::from_secs(1),
        multiplier: 1.6,
        jitter: 0.2,
        max: Duration::from_secs(120),
        min_connect_timeout: Duration::from_secs(20),
    };
    let Some(mut t) = table else {
        return b;
    };
    if let Some(v) = positive_duration(&mut t, "initial") {
        b.initial = v;
    }
    if let Some(v) = in_range(&mut t, "multiplier", |x| x >= 1.0, "at least 1") {
        b.multiplier = v;
    }
    if let Some(v) = in_range(&mut t, "jitter", |x| (0.0..1.0).contains(&x), "in [0, 1)") {
        b.jitter = v;
    }
    let max = t.duration("max");
    if let Some(v) = &max {
        b.max = *v.get_ref();
    }
    if let Some(v) = positive_duration(&mut t, "min_connect_timeout") {
        b.min_connect_timeout = v;
    }
    if b.initial > b.max {
        let at = max.map(|m| m.span()).unwrap_or_else(|| t.span());
        t.error(
            at,
            "max",
            format_args!(
                "({}) must not be below connect_backoff.initial ({})",
                units::format_duration(b.max),
                units::format_duration(b.initial)
            ),
        );
    }
    t.finish(&[]);
    b
}

fn in_range(
    t: &mut TableReader<'_, '_>,
    key: &'static str,
    ok: impl Fn(f64) -> bool,
    expected: &str,
) -> Option<f64> {
    let v = t.float(key)?;
    if ok(*v.get_ref()) {
        Some(v.into_inner())
    } else {
        t.error(
            v.span(),
            key,
            format_args!("must be {expected}, got {}", v.get_ref()),
        );
        None
    }
}

fn read_pool(table: Option<TableReader<'_, '_>>) -> PoolSettings {
    let mut s = PoolSettings {
        max_idle: 64,
        idle_timeout: Duration::from_secs(90),
    };
    let Some(mut t) = table else {
        return s;
    };
    if let Some(v) = t.unsigned("max_idle") {
        s.max_idle = usize::try_from(v.into_inner()).unwrap_or(usize::MAX);
    }
    if let Some(v) = positive_duration(&mut t, "idle_timeout") {
        s.idle_timeout = v;
    }
    t.finish(&[]);
    s
}

fn positive_count(t: &mut TableReader<'_, '_>, key: &'static str) -> Option<u64> {
    let v = t.unsigned(key)?;
    if *v.get_ref() == 0 {
        t.error(v.span(), key, "must be at least 1, got 0");
        return None;
    }
    Some(v.into_inner())
}

fn positive_duration(t: &mut TableReader<'_, '_>, key: &'static str) -> Option<Duration> {
    let v = t.duration(key)?;
    if v.get_ref().is_zero() {
        t.error(v.span(), key, "must be greater than 0");
        return None;
    }
    Some(v.into_inner())
}

fn parse_socket_addr(text: &str) -> Result<SocketAddr, String> {
    text.parse().map_err(|_| {
        format!("invalid address \"{text}\": write an IP and a port, e.g. \"127.0.0.1:8000\" or \"[::1]:8000\"")
    })
}

fn parse_url(text: &str) -> Result<UpstreamUrl, String> {
    let uri: Uri = text
        .parse()
        .map_err(|e| format!("invalid url \"{text}\": {e}"))?;
    let scheme = match uri.scheme_str() {
        Some("http") => Scheme::HTTP,
        Some("https") => Scheme::HTTPS,
        _ => {
            return Err(format!(
                "invalid url \"{text}\": scheme must be http or https"
            ));
        }
    };
    let authority = uri
        .authority()
        .filter(|a| !a.host().is_empty())
        .cloned()
        .ok_or_else(|| format!("invalid url \"{text}\": it has no host"))?;
    if authority.as_str().contains('@') {
        return Err(format!(
            "invalid url \"{text}\": credentials in the url are not supported"
        ));
    }
    if uri.query().is_some() {
        return Err(format!(
            "invalid url \"{text}\": a query string is not allowed"
        ));
    }
    let base_path = uri.path().trim_end_matches('/').to_string();
    Ok(UpstreamUrl {
        scheme,
        authority,
        base_path,
    })
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
