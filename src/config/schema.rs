//! Every key of the config file, once: the section structs, their defaults and one
//! descriptor per key (name, kind, range). Reading, unknown-key hints and the `check`
//! printout all follow from the descriptor tables below.
//!
//! To add a key: add the field, with its `///` line, to its section's struct; give its
//! default in that section's `Default` (or defaults function); add one line
//! `field: Kind` to the section's `keys!` table, where the kind says how the value is
//! read, its range and how it is printed (`Bounds::new(low, high)` for numbers and
//! durations, `Size(..)` for byte sizes, `Plain` for booleans, strings and enums with
//! a [`Choice`] impl; `kinds.rs` for one-off kinds). The key's name is the field's name.
//! The table refuses to compile while a field has no line. Checks that relate two keys
//! go to `validate.rs`; a new section also needs a line in `sections.rs` and
//! `effective.rs`. Then add the key, its default and its range to the README table.

use std::net::SocketAddr;
use std::num::NonZeroU64;
use std::path::PathBuf;
use std::time::Duration;

use http::HeaderName;
use http::uri::{Authority, Scheme};

use toml::Spanned;

use super::keys::{
    Bounds, Choice, Kind, NonEmpty, Parsed, Plain, Required, Schema, Size, keys, quote, strings,
};
use super::kinds::{
    CA_FILE, CERT_FILE, HeaderKey, HeaderNames, HeaderPart, HeaderRules, InFlightCap,
    InitialInterval, KEY_FILE, LaneParts, Name, Needles, Statuses, TlsName, UpstreamUrl, Weights,
    parse_socket_addr, parse_url,
};
use super::reader::TableReader;
use crate::concurrency::CapSetting;
use crate::cost::Unit;
use crate::quota::Spend;
use crate::route::Part;
use crate::sleeper::{self, Initial, Mode, Strategy};
use crate::throttle::{Preset, Rules};

/// The longest any configured duration may be: every timeout, wait and interval is
/// at most a day, so deadlines computed from them cannot overflow.
const DAY: Duration = Duration::from_secs(24 * 3600);
/// A duration from 0 to a day.
const TIME: Bounds<Duration> = Bounds::new(Duration::ZERO, DAY);
/// A duration above 0, up to a day.
const SOME_TIME: Bounds<Duration> = TIME.open_low();
/// Queue lengths, connection counts and per-second budgets.
const MILLION: u64 = 1_000_000;
/// The largest factor an interval or backoff grows by in one step.
const MULTIPLIER: Bounds<f64> = Bounds::new(1.0, 100.0);

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

impl Default for ServerSettings {
    fn default() -> Self {
        ServerSettings {
            // Loopback: /status and /metrics are for the pod or host, not the network;
            // deployments that scrape from outside set the address explicitly.
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
        }
    }
}

/// The keys of `[server]`.
pub const SERVER: Schema<ServerSettings> = keys!(
    "[server]",
    ServerSettings {
        admin_listen: Parsed(parse_socket_addr),
        shutdown_grace: TIME,
        max_connections: Bounds::new(1, MILLION),
        admin_allow_mutations: Plain,
        header_read_timeout: SOME_TIME,
        keepalive_timeout: SOME_TIME,
        body_idle_timeout: SOME_TIME,
        http2_keepalive_interval: SOME_TIME,
        http2_max_concurrent_streams: Bounds::new(1, MILLION),
        http2_max_resets: Bounds::new(1, MILLION),
        http2_reset_window: SOME_TIME,
        admin_max_connections: Bounds::new(1, MILLION),
        admin_timeout: SOME_TIME,
        runtime: Plain,
    }
);

/// `[server] runtime`: the thread layout that serves client connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuntimeShape {
    /// One work-stealing tokio runtime for everything.
    MultiThread,
    /// One single-threaded runtime per CPU, each accepting on its own `SO_REUSEPORT`
    /// socket: less hand-over between threads, the shape nginx has.
    PerCore,
}

/// `[fleet]`: sidecars that share what their lanes learn, through Redis.
#[derive(Clone, Debug, PartialEq)]
pub struct FleetSettings {
    /// The Redis server: `redis://` or `rediss://` (TLS); with `redis_mode` cluster or
    /// sentinel, a list of seed nodes or of sentinels.
    pub redis: RedisNodes,
    /// How `redis` is reached: one server, a Redis Cluster or a primary behind Sentinel.
    pub redis_mode: RedisMode,
    /// The primary's name the sentinels know it by (`redis_mode = "sentinel"`).
    pub sentinel_master: Option<String>,
    /// Sidecars with the same group share the lanes of upstreams with the same name.
    pub group: String,
    /// How often each member exchanges its lanes' state and demand with Redis.
    pub sync_interval: Duration,
    /// A member that has not synced for this long is forgotten.
    pub member_ttl: Duration,
    /// The CA certificates (PEM) trusted for a `rediss://` server, instead of the
    /// bundled public roots.
    pub ca_file: Option<PathBuf>,
    /// The client certificate chain (PEM) presented to a `rediss://` server.
    pub client_cert: Option<PathBuf>,
    /// The private key (PEM) of `client_cert`.
    pub client_key: Option<PathBuf>,
}

impl Default for FleetSettings {
    /// The defaults of the optional keys; `redis` is required, so its is a placeholder.
    fn default() -> Self {
        FleetSettings {
            redis: RedisNodes(vec![RedisUrl(String::from("redis://127.0.0.1:6379/0"))]),
            redis_mode: RedisMode::Single,
            sentinel_master: None,
            group: String::from("default"),
            sync_interval: Duration::from_millis(250),
            member_ttl: Duration::from_secs(5),
            ca_file: None,
            client_cert: None,
            client_key: None,
        }
    }
}

/// The keys of `[fleet]`.
pub const FLEET: Schema<FleetSettings> = keys!(
    "[fleet]",
    FleetSettings {
        redis: Required(Nodes, ""),
        redis_mode: Plain,
        sentinel_master: MasterName,
        group: Parsed(parse_group),
        sync_interval: Bounds::new(Duration::from_millis(10), Duration::from_secs(60)),
        member_ttl: Bounds::new(Duration::from_millis(100), Duration::from_secs(3600)),
        ca_file: CA_FILE,
        client_cert: CERT_FILE,
        client_key: KEY_FILE,
    }
);

/// `[fleet] redis_mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RedisMode {
    /// One Redis server.
    Single,
    /// A Redis Cluster: `redis` lists seed nodes, the rest is discovered.
    Cluster,
    /// A primary found through Redis Sentinel: `redis` lists the sentinels.
    Sentinel,
}

impl Choice for RedisMode {
    fn all() -> impl Iterator<Item = Self> + Clone {
        [RedisMode::Single, RedisMode::Cluster, RedisMode::Sentinel].into_iter()
    }

    fn word(self) -> &'static str {
        match self {
            RedisMode::Single => "single",
            RedisMode::Cluster => "cluster",
            RedisMode::Sentinel => "sentinel",
        }
    }
}

/// `[fleet] redis`: one URL or a list of them, each checked to parse.
#[derive(Clone, Debug, PartialEq)]
pub struct RedisNodes(pub Vec<RedisUrl>);

impl RedisNodes {
    /// The URLs, in the order given; never empty.
    pub fn urls(&self) -> &[RedisUrl] {
        &self.0
    }

    /// Whether the URLs ask for TLS (`rediss://`): the first one's scheme, which
    /// `validate::fleet` checks the others share.
    pub fn is_tls(&self) -> bool {
        self.0.first().is_some_and(RedisUrl::is_tls)
    }
}

impl std::fmt::Display for RedisNodes {
    /// The URLs with their passwords masked, separated by commas.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, url) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{url}")?;
        }
        Ok(())
    }
}

/// Reads [`RedisNodes`]: a string or an array of strings.
struct Nodes;

impl Kind<RedisNodes> for Nodes {
    fn read(&self, t: &mut TableReader<'_, '_>, key: &'static str) -> Option<Spanned<RedisNodes>> {
        let items = t.string_array(key)?;
        let span = items.first().map_or_else(|| t.span(), Spanned::span);
        let mut urls = Vec::with_capacity(items.len());
        for item in &items {
            match RedisUrl::parse(item.get_ref()) {
                Ok(url) => urls.push(url),
                Err(e) => t.invalid(item.span(), key, e),
            }
        }
        if items.is_empty() {
            t.error(span.clone(), key, "must name at least one redis:// url");
        }
        (urls.len() == items.len() && !urls.is_empty())
            .then(|| Spanned::new(span, RedisNodes(urls)))
    }

    fn show(&self, value: &RedisNodes) -> Option<String> {
        let shown: Vec<String> = value.0.iter().map(ToString::to_string).collect();
        match shown.as_slice() {
            [one] => Some(quote(one)),
            _ => Some(strings(&shown)),
        }
    }
}

/// `sentinel_master`: the name of a primary, as the sentinels' config gives it.
struct MasterName;

impl Kind<Option<String>> for MasterName {
    fn read(
        &self,
        t: &mut TableReader<'_, '_>,
        key: &'static str,
    ) -> Option<Spanned<Option<String>>> {
        let name = NonEmpty.read(t, key)?;
        let span = name.span();
        Some(Spanned::new(span, Some(name.into_inner())))
    }

    fn show(&self, value: &Option<String>) -> Option<String> {
        value.as_deref().map(quote)
    }
}

/// A Redis URL that was checked to parse; shown with its password masked.
#[derive(Clone, Debug, PartialEq)]
pub struct RedisUrl(String);

impl RedisUrl {
    /// `redis://[user:password@]host[:port][/db]`, or the same with `rediss://` for TLS.
    pub fn parse(text: &str) -> Result<RedisUrl, String> {
        let url = RedisUrl(text.to_string());
        let scheme_ok = matches!(
            redis::parse_redis_url(text).as_ref().map(|u| u.scheme()),
            Some("redis" | "rediss")
        );
        if !scheme_ok {
            return Err(format!(
                "invalid url \"{url}\": must be redis://host:port/db or rediss://host:port/db"
            ));
        }
        redis::Client::open(text)
            .map(|_| url.clone())
            .map_err(|e| format!("invalid url \"{url}\": {e}"))
    }

    /// The database the URL names (0 when it names none); `None` if it does not parse.
    pub fn database(&self) -> Option<i64> {
        use redis::IntoConnectionInfo;
        let info = self.0.as_str().into_connection_info().ok()?;
        Some(info.redis_settings().db())
    }

    /// Whether the URL asks for TLS (`rediss://`).
    pub fn is_tls(&self) -> bool {
        self.0.starts_with("rediss://")
    }

    /// The URL as configured, password included: for connecting only, never for logs.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for RedisUrl {
    /// The password usually comes from `${VAR}`; `check` output and logs must not carry it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match redis::parse_redis_url(&self.0) {
            Some(mut url) if url.password().is_some() => {
                let _ = url.set_password(Some("***"));
                f.write_str(url.as_str())
            }
            Some(_) => f.write_str(&self.0),
            // Unparseable: hide whatever sits where credentials would.
            None => match self.0.split_once("://") {
                Some((scheme, rest)) if rest.contains('@') => {
                    let host = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
                    write!(f, "{scheme}://***@{host}")
                }
                _ => f.write_str(&self.0),
            },
        }
    }
}

/// Letters, digits, `-`, `_` and `.`: the group is part of every Redis key.
fn parse_group(text: &str) -> Result<String, String> {
    let ok = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(text.to_string())
    } else {
        Err(format!(
            "must be letters, digits, '-', '_' or '.', got \"{text}\""
        ))
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
    /// The name sent in SNI and checked against the certificate, instead of the url's host.
    pub server_name: Option<String>,
    /// A client certificate chain (PEM) for upstreams that require mutual TLS.
    pub client_cert: Option<PathBuf>,
    /// The private key (PEM) of `client_cert`.
    pub client_key: Option<PathBuf>,
    /// Which requests get a line in the access log.
    pub access_log: AccessLog,
    /// The longest pause or rate-limit window an upstream's headers can impose.
    pub max_pause: Duration,
    /// How a rate-limit window the upstream states is spent.
    pub quota: Spend,
    /// Requests out at once: none, a fixed cap, or a learned one.
    pub max_in_flight: CapSetting,
    pub sleeper: sleeper::Settings,
    pub throttle: Rules,
    pub retry: RetrySettings,
    pub queue: QueueSettings,
    pub sigv4: Option<SigV4Settings>,
    /// `[upstream.fairness]`: the lanes' queues in fair order between callers.
    pub fairness: Option<FairnessSettings>,
    pub connect_backoff: ConnectBackoffSettings,
    pub pool: PoolSettings,
    pub lanes: LaneSettings,
}

impl Default for UpstreamSettings {
    /// The defaults of every optional key; `name`, `listen` and `url` are required, so
    /// theirs are placeholders.
    fn default() -> Self {
        UpstreamSettings {
            name: String::new(),
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            url: UpstreamUrl {
                scheme: Scheme::HTTP,
                authority: Authority::from_static("localhost"),
                base_path: String::new(),
            },
            preset: Preset::None,
            preserve_host: false,
            connect_timeout: Duration::from_secs(20),
            request_timeout: Duration::from_secs(60),
            ca_file: None,
            server_name: None,
            client_cert: None,
            client_key: None,
            access_log: AccessLog::Off,
            max_pause: max_pause_default(Preset::None),
            quota: Spend::Use,
            max_in_flight: CapSetting::Off,
            sleeper: sleeper_defaults(),
            throttle: throttle_defaults(Preset::None),
            retry: RetrySettings::default(),
            queue: QueueSettings::default(),
            sigv4: None,
            fairness: None,
            connect_backoff: ConnectBackoffSettings::default(),
            pool: PoolSettings::default(),
            lanes: LaneSettings::default(),
        }
    }
}

/// The keys of `[[upstream]]` itself; its sub-tables have their own.
pub const UPSTREAM: Schema<UpstreamSettings> = keys!("[[upstream]]", UpstreamSettings {
    name: Name,
    listen: Required(Parsed(parse_socket_addr), ""),
    url: Required(Parsed(parse_url), ""),
    preset: Plain,
    preserve_host: Plain,
    connect_timeout: SOME_TIME,
    request_timeout: SOME_TIME,
    ca_file: CA_FILE,
    server_name: TlsName,
    client_cert: CERT_FILE,
    client_key: KEY_FILE,
    access_log: Parsed(parse_access_log),
    max_pause: SOME_TIME,
    quota: Plain,
    max_in_flight: InFlightCap,
} tables: sleeper, throttle, retry, queue, sigv4, fairness, connect_backoff, pool, lanes);

/// Which requests of an upstream get a line in the access log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessLog {
    Off,
    Full,
    /// One request in this many.
    Sample(NonZeroU64),
}

impl std::fmt::Display for AccessLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AccessLog::Off => f.write_str("off"),
            AccessLog::Full => f.write_str("full"),
            AccessLog::Sample(n) => write!(f, "sample:{n}"),
        }
    }
}

/// `"off"`, `"full"` or `"sample:N"` (one request in N, N at least 1).
pub fn parse_access_log(text: &str) -> Result<AccessLog, String> {
    let sample = |n: &str| n.parse::<NonZeroU64>().ok().map(AccessLog::Sample);
    match text {
        "off" => Ok(AccessLog::Off),
        "full" => Ok(AccessLog::Full),
        _ => text
            .strip_prefix("sample:")
            .and_then(sample)
            .ok_or_else(|| {
                format!(
                    "must be \"off\", \"full\" or \"sample:N\" (one request in N), got \"{text}\""
                )
            }),
    }
}

/// The sleeper an upstream gets with no `[upstream.sleeper]`: `cubic`, with
/// AutoSleeper's defaults for the rest. Throttled APIs refill token buckets (AWS's,
/// OpenAI's, Anthropic's, GitHub's secondary limits, most plain APIs' 429s), which
/// `cubic` tracks closely; `responsive` spreads each step by ±30 %, so about one in
/// three of its decreases is a raise, and a plain API at 20/s got 0.82 of its rate
/// through it against 0.95 through `cubic`.
pub fn sleeper_defaults() -> sleeper::Settings {
    sleeper::Settings {
        strategy: Strategy::Cubic,
        ..sleeper::Settings::seed_defaults()
    }
}

/// The defaults once `strategy` and `mode` are known: gRPC's for its own algorithm,
/// AutoSleeper's for the others; the start depends on the mode.
pub fn sleeper_defaults_for(strategy: Strategy, mode: Mode) -> sleeper::Settings {
    let mut s = sleeper::Settings {
        strategy,
        mode,
        ..sleeper::Settings::seed_defaults()
    };
    if strategy == Strategy::Exponential {
        s.up_multiplier = 1.6;
        s.randomization_factor = 0.2;
        s.max_interval = Duration::from_secs(120);
    }
    s.initial_interval = match (mode, strategy) {
        (Mode::Pace | Mode::Observe, _) => Initial::Auto,
        (Mode::Delay, Strategy::Exponential) => Initial::Fixed(Duration::from_secs(1)),
        (Mode::Delay, _) => Initial::Fixed(Duration::from_millis(500)),
    };
    s
}

/// The keys of `[upstream.sleeper]`.
pub const SLEEPER: Schema<sleeper::Settings> = keys!(
    "[upstream.sleeper]",
    sleeper::Settings {
        strategy: Plain,
        mode: Plain,
        initial_interval: InitialInterval(TIME),
        min_interval: TIME,
        max_interval: SOME_TIME,
        max_randomization: TIME,
        up_multiplier: MULTIPLIER,
        down_multiplier: Bounds::new(0.0, 1.0).open_low().says("in (0, 1]"),
        randomization_factor: Bounds::new(0.0, 1.0).open_high().says("in [0, 1)"),
        down_threshold: Bounds::new(1, u32::MAX as u64).says("from 1 to 4294967295"),
        beta: Bounds::new(0.0, 1.0)
            .open_low()
            .open_high()
            .says("in (0, 1)"),
        recovery: SOME_TIME,
    }
);

/// Throttles recognised besides the preset's: 429 and 503; 529 too for `anthropic`,
/// 403 (when it says rate limit) rather than 503 for `github`.
pub fn throttle_defaults(preset: Preset) -> Rules {
    let statuses = match preset {
        Preset::Anthropic => vec![429, 503, 529],
        Preset::GitHub => vec![403, 429],
        _ => vec![429, 503],
    };
    Rules {
        statuses,
        ..Rules::default()
    }
}

/// `max_pause` unless set: an hour for `github`, whose primary quota resets hourly and
/// answers every request before the reset with a refusal; a minute otherwise.
pub fn max_pause_default(preset: Preset) -> Duration {
    match preset {
        Preset::GitHub => Duration::from_secs(3600),
        _ => Duration::from_secs(60),
    }
}

/// The keys of `[upstream.throttle]`.
pub const THROTTLE: Schema<Rules> = keys!(
    "[upstream.throttle]",
    Rules {
        statuses: Statuses,
        body_codes: Needles,
        headers: HeaderRules,
    }
);

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

impl Default for RetrySettings {
    fn default() -> Self {
        RetrySettings {
            max_attempts: 5,
            max_body_bytes: 1 << 20,
            budget_ratio: 0.2,
            budget_min_per_second: 10,
            max_elapsed: Duration::from_secs(30),
        }
    }
}

impl RetrySettings {
    /// The defaults for `preset`: botocore's retry policy, 10 attempts for DynamoDB,
    /// where throttling is routine, 5 elsewhere. easeoff's retries are paced and
    /// budgeted, so extra attempts add no load above the interval; they only absorb
    /// the clusters of throttles a controller's probing produces.
    pub fn defaults_for(preset: Preset) -> Self {
        RetrySettings {
            max_attempts: if preset == Preset::DynamoDb { 10 } else { 5 },
            ..RetrySettings::default()
        }
    }
}

/// The keys of `[upstream.retry]`.
pub const RETRY: Schema<RetrySettings> = keys!(
    "[upstream.retry]",
    RetrySettings {
        max_attempts: Bounds::new(1, 100).says("from 1 to 100 (1 turns retries off)"),
        max_body_bytes: Size(Bounds::new(0, 1 << 30)),
        budget_ratio: Bounds::new(0.0, 1000.0).says("from 0 to 1000"),
        budget_min_per_second: Bounds::new(0, MILLION),
        max_elapsed: TIME,
    }
);

/// `[upstream.queue]`.
#[derive(Clone, Debug, PartialEq)]
pub struct QueueSettings {
    /// Requests waiting for a slot; beyond this they are shed.
    pub max_waiting: usize,
    /// An expected or actual wait beyond this is shed.
    pub max_wait: Duration,
}

impl Default for QueueSettings {
    fn default() -> Self {
        QueueSettings {
            max_waiting: 1000,
            max_wait: Duration::from_secs(30),
        }
    }
}

/// The keys of `[upstream.queue]`.
pub const QUEUE: Schema<QueueSettings> = keys!(
    "[upstream.queue]",
    QueueSettings {
        max_waiting: Bounds::new(0, MILLION),
        max_wait: TIME,
    }
);

/// `[upstream.sigv4]`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SigV4Settings {
    pub service: String,
    pub region: String,
}

/// What a `[upstream.sigv4]` without `service` or `region` is told.
const SIGV4_NEEDS: &str = " ([upstream.sigv4] needs service and region)";

/// The keys of `[upstream.sigv4]`.
pub const SIGV4: Schema<SigV4Settings> = keys!(
    "[upstream.sigv4]",
    SigV4Settings {
        service: Required(NonEmpty, SIGV4_NEEDS),
        region: Required(NonEmpty, SIGV4_NEEDS),
    }
);

/// Who a caller is, for `[upstream.fairness] by`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Caller {
    /// A request header's value (hashed when it is a credential).
    Header(HeaderName),
    /// The client connection's IP address.
    ClientIp,
}

impl std::fmt::Display for Caller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Caller::Header(name) => write!(f, "header:{name}"),
            Caller::ClientIp => f.write_str("client-ip"),
        }
    }
}

/// `by = "header:NAME"` or `"client-ip"`.
pub fn parse_caller(text: &str) -> Result<Caller, String> {
    if text == "client-ip" {
        return Ok(Caller::ClientIp);
    }
    text.strip_prefix("header:")
        .and_then(|name| HeaderName::from_bytes(name.as_bytes()).ok())
        .map(Caller::Header)
        .ok_or_else(|| format!("must be \"header:NAME\" or \"client-ip\", got \"{text}\""))
}

/// `priority = "header:NAME"`.
pub fn parse_priority(text: &str) -> Result<HeaderName, String> {
    text.strip_prefix("header:")
        .and_then(|name| HeaderName::from_bytes(name.as_bytes()).ok())
        .ok_or_else(|| format!("must be \"header:NAME\", got \"{text}\""))
}

/// `[upstream.fairness]`.
#[derive(Clone, Debug, PartialEq)]
pub struct FairnessSettings {
    /// Who a caller is.
    pub by: Caller,
    /// Tenants' weights by name; the rest weigh 1.
    pub weights: Vec<(String, u32)>,
    /// The header holding a request's priority class, if any.
    pub priority: Option<HeaderName>,
    /// Tenants told apart per upstream; later callers share the tenant `other`.
    pub max_tenants: usize,
    /// Requests one tenant may have waiting in one lane.
    pub max_waiting: usize,
}

impl Default for FairnessSettings {
    fn default() -> Self {
        FairnessSettings {
            by: Caller::ClientIp,
            weights: Vec::new(),
            priority: None,
            max_tenants: 16,
            max_waiting: 1000,
        }
    }
}

/// What a `[upstream.fairness]` without `by` is told.
const FAIRNESS_NEEDS: &str = " ([upstream.fairness] needs by: \"header:NAME\" or \"client-ip\")";

/// The keys of `[upstream.fairness]`.
pub const FAIRNESS: Schema<FairnessSettings> = keys!(
    "[upstream.fairness]",
    FairnessSettings {
        by: Required(Parsed(parse_caller), FAIRNESS_NEEDS),
        weights: Weights,
        priority: HeaderPart,
        max_tenants: Bounds::new(1, 1000),
        max_waiting: Bounds::new(1, MILLION),
    }
);

/// `[upstream.connect_backoff]`: gRPC's connection backoff.
#[derive(Clone, Debug, PartialEq)]
pub struct ConnectBackoffSettings {
    pub initial: Duration,
    pub multiplier: f64,
    pub jitter: f64,
    pub max: Duration,
    pub min_connect_timeout: Duration,
}

impl Default for ConnectBackoffSettings {
    fn default() -> Self {
        ConnectBackoffSettings {
            initial: Duration::from_secs(1),
            multiplier: 1.6,
            jitter: 0.2,
            max: Duration::from_secs(120),
            min_connect_timeout: Duration::from_secs(20),
        }
    }
}

/// The keys of `[upstream.connect_backoff]`.
pub const CONNECT_BACKOFF: Schema<ConnectBackoffSettings> = keys!(
    "[upstream.connect_backoff]",
    ConnectBackoffSettings {
        initial: SOME_TIME,
        multiplier: MULTIPLIER,
        jitter: Bounds::new(0.0, 1.0).open_high().says("in [0, 1)"),
        max: TIME,
        min_connect_timeout: SOME_TIME,
    }
);

/// `[upstream.pool]`: the idle connections kept to the upstream.
#[derive(Clone, Debug, PartialEq)]
pub struct PoolSettings {
    /// Idle connections kept, over all threads.
    pub max_idle: usize,
    /// An idle connection unused this long is closed.
    pub idle_timeout: Duration,
}

impl Default for PoolSettings {
    fn default() -> Self {
        PoolSettings {
            max_idle: 64,
            idle_timeout: Duration::from_secs(90),
        }
    }
}

/// The keys of `[upstream.pool]`.
pub const POOL: Schema<PoolSettings> = keys!(
    "[upstream.pool]",
    PoolSettings {
        max_idle: Bounds::new(0, MILLION),
        idle_timeout: SOME_TIME,
    }
);

/// `[upstream.lanes]`: how requests are split into lanes, each paced on its own.
#[derive(Clone, Debug, PartialEq)]
pub struct LaneSettings {
    /// The parts of a request that name its lane; unset: the preset's rule; empty: one lane.
    pub by: Option<Vec<Part>>,
    /// Headers whose values name lanes only as a hash, beside the credential headers
    /// (`route::CREDENTIALS`), which always do.
    pub secret_headers: Vec<HeaderName>,
    /// The most of a body held while reading on past `retry.max_body_bytes` for the
    /// `body:` fields that name its lane; 0: place it by what is held.
    pub max_scan_bytes: u64,
    /// A response header in which the upstream names the bucket a request counted against.
    pub from_response: Option<HeaderName>,
    /// Lanes per upstream; later keys share the lane `overflow`.
    pub max_lanes: usize,
    /// A lane that dispatches nothing for this long is dropped.
    pub lane_idle: Duration,
    /// A lane that dispatches nothing for this long forgets its throttles, as a run of
    /// successes would; 0 never forgets.
    pub idle_decay: Duration,
    /// Lanes exported by name on `/metrics`; the rest are summed as `lane="other"`.
    pub metrics_lanes: usize,
    /// Each named lane exports the estimate-error histogram too (14 series a lane).
    pub metrics_histograms: bool,
    /// What a lane paces in: requests, or what each costs (tokens, capacity units).
    pub cost: Unit,
    /// Each lane's requests out at once: none, a fixed cap, or a learned one.
    pub max_in_flight: CapSetting,
}

impl LaneSettings {
    /// The defaults for `preset`: `github` learns its lanes from
    /// `x-ratelimit-resource`.
    pub fn defaults_for(preset: Preset) -> Self {
        let from_response =
            (preset == Preset::GitHub).then(|| HeaderName::from_static("x-ratelimit-resource"));
        let cost = match preset {
            Preset::DynamoDb => Unit::Capacity,
            Preset::OpenAi | Preset::Anthropic => Unit::Tokens,
            _ => Unit::Requests,
        };
        LaneSettings {
            from_response,
            cost,
            ..LaneSettings::default()
        }
    }
}

impl Default for LaneSettings {
    fn default() -> Self {
        LaneSettings {
            by: None,
            secret_headers: Vec::new(),
            max_scan_bytes: 4 << 20,
            from_response: None,
            max_lanes: 256,
            lane_idle: Duration::from_secs(300),
            idle_decay: Duration::from_secs(30),
            metrics_lanes: 32,
            metrics_histograms: false,
            cost: Unit::Requests,
            max_in_flight: CapSetting::Off,
        }
    }
}

/// The keys of `[upstream.lanes]`.
pub const LANES: Schema<LaneSettings> = keys!(
    "[upstream.lanes]",
    LaneSettings {
        by: LaneParts,
        secret_headers: HeaderNames,
        max_scan_bytes: Size(Bounds::new(0, 1 << 30)),
        from_response: HeaderKey,
        max_lanes: Bounds::new(1, 100_000),
        lane_idle: SOME_TIME,
        idle_decay: TIME,
        metrics_lanes: Bounds::new(0, 10_000),
        metrics_histograms: Plain,
        cost: Plain,
        max_in_flight: InFlightCap,
    }
);

impl Choice for RuntimeShape {
    fn all() -> impl Iterator<Item = Self> + Clone {
        [RuntimeShape::MultiThread, RuntimeShape::PerCore].into_iter()
    }

    fn word(self) -> &'static str {
        match self {
            RuntimeShape::MultiThread => "multi-thread",
            RuntimeShape::PerCore => "per-core",
        }
    }
}

/// Choices whose words their own modules define, as `name()` (see `spelled!`).
macro_rules! named_choices {
    ($($T:ty),* $(,)?) => {$(
        impl Choice for $T {
            fn all() -> impl Iterator<Item = Self> + Clone {
                <$T>::ALL.into_iter()
            }

            fn word(self) -> &'static str {
                self.name()
            }
        }
    )*};
}

named_choices! { Strategy, Mode, Preset, Spend, Unit }
