use std::time::Duration;

use http::uri::Scheme;

use super::*;
use crate::sleeper::{self, Initial, Strategy};
use crate::throttle::Preset;

fn env(name: &str) -> Option<String> {
    match name {
        "AWS_REGION" => Some("eu-west-1".into()),
        "PORT" => Some("8123".into()),
        _ => None,
    }
}

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::parse(text, "easeoff.toml", &env)
}

fn problems(text: &str) -> Vec<String> {
    match parse(text) {
        Ok(_) => panic!("config was accepted:\n{text}"),
        Err(ConfigError::Invalid { problems }) => problems.iter().map(Problem::to_string).collect(),
        Err(e) => panic!("unexpected error {e}"),
    }
}

const MINIMAL: &str = r#"
[[upstream]]
name = "orders"
listen = "127.0.0.1:8000"
url = "https://dynamodb.us-east-1.amazonaws.com"
"#;

#[test]
fn a_minimal_upstream_gets_the_documented_defaults() {
    let c = parse(MINIMAL).unwrap();
    assert_eq!(c.server.admin_listen, "127.0.0.1:9901".parse().unwrap());
    assert_eq!(c.server.shutdown_grace, Duration::from_secs(25));
    assert_eq!(c.server.max_connections, 10_000);
    assert_eq!(c.server.runtime, RuntimeShape::PerCore);
    let u = &c.upstreams[0];
    assert_eq!(u.name, "orders");
    assert_eq!(u.url.scheme, Scheme::HTTPS);
    assert_eq!(u.url.authority.as_str(), "dynamodb.us-east-1.amazonaws.com");
    assert_eq!(u.url.base_path, "");
    assert_eq!(u.preset, Preset::None);
    assert_eq!(u.request_timeout, Duration::from_secs(60));
    assert_eq!(
        u.sleeper,
        sleeper::Settings {
            strategy: Strategy::Cubic,
            ..sleeper::Settings::seed_defaults()
        }
    );
    assert_eq!(u.throttle.statuses, [429, 503]);
    assert_eq!(u.retry.max_attempts, 5);
    assert_eq!(u.retry.max_body_bytes, 1 << 20);
    assert_eq!(u.queue.max_waiting, 1000);
    assert_eq!(u.connect_backoff.multiplier, 1.6);
    assert_eq!(u.sigv4, None);
}

#[test]
fn the_spec_example_parses() {
    let text = r#"
[server]
admin_listen   = "0.0.0.0:9901"
shutdown_grace = "25s"
max_connections = 10000

[[upstream]]
name   = "dynamodb"
listen = "127.0.0.1:8000"
url    = "https://dynamodb.us-east-1.amazonaws.com"
preset = "dynamodb"
preserve_host   = false
connect_timeout = "20s"
request_timeout = "60s"

[upstream.sleeper]
strategy = "responsive"
mode     = "pace"
initial_interval = "auto"
min_interval     = "1ms"
max_interval     = "15m"
max_randomization = "2m"
up_multiplier    = 1.5
down_multiplier  = 0.9
randomization_factor = 0.3
down_threshold   = 10

[upstream.throttle]
statuses   = [429, 503]
body_codes = []
headers    = {}

[upstream.retry]
max_attempts   = 3
max_body_bytes = "1MiB"
budget_ratio   = 0.2
budget_min_per_second = 10
max_elapsed    = "30s"

[upstream.queue]
max_waiting = 1000
max_wait    = "30s"

[upstream.sigv4]
service = "dynamodb"
region  = "${AWS_REGION:-us-east-1}"

[upstream.connect_backoff]
initial = "1s"
multiplier = 1.6
jitter = 0.2
max = "120s"
min_connect_timeout = "20s"
"#;
    let c = parse(text).unwrap();
    let u = &c.upstreams[0];
    assert_eq!(u.preset, Preset::DynamoDb);
    assert_eq!(u.sleeper, sleeper::Settings::seed_defaults());
    assert_eq!(u.retry.max_attempts, 3, "as written in the file");
    assert_eq!(
        u.sigv4,
        Some(SigV4Settings {
            service: "dynamodb".into(),
            region: "eu-west-1".into()
        })
    );
}

#[test]
fn a_misspelt_key_gets_its_position_and_a_suggestion() {
    let text = format!("{MINIMAL}\n[upstream.sleeper]\nmax_intrval = \"1m\"\n");
    assert_eq!(
        problems(&text),
        [
            r#"easeoff.toml:8:1: upstream "orders": unknown key "sleeper.max_intrval" (did you mean "sleeper.max_interval"?)"#
        ]
    );
}

#[test]
fn a_key_in_the_wrong_table_is_pointed_to_its_table() {
    let text = format!("{MINIMAL}up_multiplier = 2.0\n");
    assert_eq!(
        problems(&text),
        [
            r#"easeoff.toml:6:1: upstream "orders": unknown key "up_multiplier" (it belongs in the [upstream.sleeper] table)"#
        ]
    );
}

#[test]
fn every_problem_is_listed_in_file_order() {
    let text = r#"
[server]
admin_listen = "localhost"
shutdown_grace = 25

[[upstream]]
name = "orders"
listen = "127.0.0.1:8000"
url = "htp://x"
request_timeout = "fast"

[upstream.sleeper]
strategy = "responsiv"
down_multiplier = 1.2
randomization_factor = 1.0
up_multiplier = 0.5
down_threshold = 0
"#;
    let got = problems(text);
    assert_eq!(
        got,
        [
            r#"easeoff.toml:3:16: server.admin_listen: invalid address "localhost": write an IP and a port, e.g. "127.0.0.1:8000" or "[::1]:8000""#,
            r#"easeoff.toml:4:18: server.shutdown_grace must be a duration string like "500ms" or "15m", got integer 25"#,
            r#"easeoff.toml:9:7: upstream "orders": url: invalid url "htp://x": scheme must be http or https"#,
            r#"easeoff.toml:10:19: upstream "orders": request_timeout: invalid duration "fast": write a number and a unit (ns, us, ms, s, m, h, d), e.g. "500ms""#,
            r#"easeoff.toml:13:12: upstream "orders": sleeper.strategy must be one of responsive | cubic | exponential | decorrelated | linear | constant | off, got "responsiv" (did you mean "responsive"?)"#,
            r#"easeoff.toml:14:19: upstream "orders": sleeper.down_multiplier must be in (0, 1], got 1.2"#,
            r#"easeoff.toml:15:24: upstream "orders": sleeper.randomization_factor must be in [0, 1), got 1"#,
            r#"easeoff.toml:16:17: upstream "orders": sleeper.up_multiplier must be at least 1, got 0.5"#,
            r#"easeoff.toml:17:18: upstream "orders": sleeper.down_threshold must be from 1 to 4294967295, got 0"#,
        ]
    );
}

#[test]
fn initial_above_max_is_rejected() {
    let text = format!("{MINIMAL}[upstream.sleeper]\ninitial_interval = \"20m\"\n");
    assert_eq!(
        problems(&text),
        [
            r#"easeoff.toml:7:20: upstream "orders": sleeper.initial_interval (20m) must not exceed sleeper.max_interval (15m)"#
        ]
    );
}

#[test]
fn auto_start_needs_pace_mode_and_constant_needs_a_spacing() {
    let delay =
        format!("{MINIMAL}[upstream.sleeper]\nmode = \"delay\"\ninitial_interval = \"auto\"\n");
    assert!(problems(&delay)[0].contains("\"auto\" needs mode = \"pace\""));
    let constant = format!("{MINIMAL}[upstream.sleeper]\nstrategy = \"constant\"\n");
    assert!(problems(&constant)[0].contains("must be set to the fixed spacing"));
}

#[test]
fn retries_follow_botocore_ten_for_dynamodb_five_elsewhere() {
    let c = parse(&format!("{MINIMAL}preset = \"dynamodb\"\n")).unwrap();
    assert_eq!(c.upstreams[0].retry.max_attempts, 10);
    let c = parse(&format!("{MINIMAL}preset = \"aws\"\n")).unwrap();
    assert_eq!(c.upstreams[0].retry.max_attempts, 5);
}

#[test]
fn the_api_presets_bring_their_vendors_statuses_lanes_and_pauses() {
    let upstream = |preset: &str, extra: &str| {
        let text = format!("{MINIMAL}preset = \"{preset}\"\n{extra}");
        parse(&text).unwrap().upstreams.remove(0)
    };
    let minute = Duration::from_secs(60);
    for (preset, statuses, max_pause, lanes_from) in [
        ("openai", vec![429, 503], minute, None),
        ("anthropic", vec![429, 503, 529], minute, None),
        (
            "github",
            vec![403, 429],
            60 * minute,
            Some("x-ratelimit-resource"),
        ),
        ("none", vec![429, 503], minute, None),
    ] {
        let u = upstream(preset, "");
        assert_eq!(u.throttle.statuses, statuses, "{preset}");
        assert_eq!(u.max_pause, max_pause, "{preset}");
        let from = u.lanes.from_response.as_ref().map(|h| h.as_str());
        assert_eq!(from, lanes_from, "{preset}");
        assert_eq!(u.quota, crate::quota::Spend::Use);
    }
    let u = upstream("github", "max_pause = \"2m\"\nquota = \"smooth\"\n");
    assert_eq!(u.max_pause, 2 * minute, "a max_pause set stays");
    assert_eq!(u.quota, crate::quota::Spend::Smooth);
    assert!(problems(&format!("{MINIMAL}quota = \"ration\"\n"))[0].contains("smooth"));
}

#[test]
fn every_preset_defaults_to_cubic_and_delay_mode_to_responsive() {
    for (preset, strategy) in [
        ("dynamodb", Strategy::Cubic),
        ("aws", Strategy::Cubic),
        ("none", Strategy::Cubic),
        ("grpc", Strategy::Cubic),
        ("openai", Strategy::Cubic),
        ("anthropic", Strategy::Cubic),
        ("github", Strategy::Cubic),
    ] {
        let c = parse(&format!("{MINIMAL}preset = \"{preset}\"\n")).unwrap();
        let s = &c.upstreams[0].sleeper;
        assert_eq!(s.strategy, strategy, "{preset}");
        assert_eq!((s.beta, s.recovery), (0.92, Duration::from_secs(3)));
        // A sleeper table without a strategy keeps the preset's.
        let c = parse(&format!(
            "{MINIMAL}preset = \"{preset}\"\n[upstream.sleeper]\nmax_interval = \"1m\"\n"
        ))
        .unwrap();
        assert_eq!(c.upstreams[0].sleeper.strategy, strategy, "{preset}");
    }
    let c = parse(&format!(
        "{MINIMAL}preset = \"dynamodb\"\n[upstream.sleeper]\nstrategy = \"responsive\"\n"
    ))
    .unwrap();
    assert_eq!(c.upstreams[0].sleeper.strategy, Strategy::Responsive);
    // `cubic` paces a rate: delay mode with no strategy named takes `responsive`.
    let c = parse(&format!("{MINIMAL}[upstream.sleeper]\nmode = \"delay\"\n")).unwrap();
    let s = &c.upstreams[0].sleeper;
    assert_eq!(s.strategy, Strategy::Responsive);
    assert_eq!(
        s.initial_interval,
        Initial::Fixed(Duration::from_millis(500))
    );
}

#[test]
fn cubic_settings_are_read_and_checked() {
    let c = parse(&format!(
        "{MINIMAL}[upstream.sleeper]\nstrategy = \"cubic\"\nbeta = 0.8\nrecovery = \"5s\"\n"
    ))
    .unwrap();
    let s = &c.upstreams[0].sleeper;
    assert_eq!(
        (s.strategy, s.beta, s.recovery),
        (Strategy::Cubic, 0.8, Duration::from_secs(5))
    );
    assert_eq!(
        problems(&format!(
            "{MINIMAL}[upstream.sleeper]\nstrategy = \"cubic\"\nbeta = 1.0\nrecovery = \"0s\"\n"
        )),
        [
            r#"easeoff.toml:8:8: upstream "orders": sleeper.beta must be in (0, 1), got 1"#,
            r#"easeoff.toml:9:12: upstream "orders": sleeper.recovery must be greater than 0"#,
        ]
    );
    assert_eq!(
        problems(&format!(
            "{MINIMAL}[upstream.sleeper]\nstrategy = \"cubic\"\nmode = \"delay\"\ninitial_interval = \"1s\"\n"
        )),
        [
            r#"easeoff.toml:7:12: upstream "orders": sleeper.strategy "cubic" paces a rate and needs mode = "pace""#
        ]
    );
}

#[test]
fn strategies_get_their_own_defaults() {
    let exp = parse(&format!(
        "{MINIMAL}[upstream.sleeper]\nstrategy = \"exponential\"\nmode = \"delay\"\n"
    ))
    .unwrap();
    let s = &exp.upstreams[0].sleeper;
    assert_eq!(s.initial_interval, Initial::Fixed(Duration::from_secs(1)));
    assert_eq!((s.up_multiplier, s.randomization_factor), (1.6, 0.2));
    assert_eq!(s.max_interval, Duration::from_secs(120));

    let delay = parse(&format!("{MINIMAL}[upstream.sleeper]\nmode = \"delay\"\n")).unwrap();
    assert_eq!(
        delay.upstreams[0].sleeper.initial_interval,
        Initial::Fixed(Duration::from_millis(500))
    );
}

#[test]
fn duplicate_names_and_listen_addresses_are_rejected() {
    let text = r#"
[server]
admin_listen = "127.0.0.1:9901"

[[upstream]]
name = "a"
listen = "127.0.0.1:8000"
url = "http://a"

[[upstream]]
name = "a"
listen = "127.0.0.1:8000"
url = "http://b"

[[upstream]]
name = "c"
listen = "127.0.0.1:9901"
url = "http://c"
"#;
    assert_eq!(
        problems(text),
        [
            r#"easeoff.toml:11:8: upstream "a": name is already used by the upstream on line 6"#,
            r#"easeoff.toml:12:10: upstream "a": listen address 127.0.0.1:8000 is already used by upstream "a""#,
            r#"easeoff.toml:17:10: upstream "c": listen address 127.0.0.1:9901 is already used by server.admin_listen"#,
        ]
    );
}

#[test]
fn port_zero_listeners_never_clash() {
    let text = r#"
[[upstream]]
name = "a"
listen = "127.0.0.1:0"
url = "http://a"

[[upstream]]
name = "b"
listen = "127.0.0.1:0"
url = "http://b"
"#;
    assert_eq!(parse(text).unwrap().upstreams.len(), 2);
}

#[test]
fn missing_required_keys_and_upstreams_are_reported() {
    assert_eq!(
        problems("[[upstream]]\nname = \"x\"\n"),
        [
            r#"easeoff.toml:1:1: upstream "x": listen is missing"#,
            r#"easeoff.toml:1:1: upstream "x": url is missing"#,
        ]
    );
    assert_eq!(
        problems("[server]\n"),
        [
            "easeoff.toml:1:1: no [[upstream]] defined: easeoff needs at least one upstream to forward to"
        ]
    );
}

#[test]
fn syntax_errors_have_positions() {
    let got = problems("[[upstream]]\nname = \"x\nlisten = 1\n");
    assert!(got[0].starts_with("easeoff.toml:2:"), "{got:?}");
}

#[test]
fn environment_variables_expand_and_unset_ones_are_errors() {
    let text = r#"
[[upstream]]
name = "a"
listen = "127.0.0.1:${PORT}"
url = "http://${UPSTREAM}"
"#;
    assert_eq!(
        problems(text),
        [
            r#"easeoff.toml:5:7: upstream "a": url: environment variable UPSTREAM is not set (write "${UPSTREAM:-default}" to give a default)"#
        ]
    );
    let ok = text.replace("${UPSTREAM}", "${UPSTREAM:-127.0.0.1:9}");
    let c = parse(&ok).unwrap();
    assert_eq!(c.upstreams[0].listen.port(), 8123);
    assert_eq!(c.upstreams[0].url.authority.as_str(), "127.0.0.1:9");
}

#[test]
fn urls_keep_a_base_path_and_refuse_queries() {
    let c = parse(&MINIMAL.replace("amazonaws.com\"", "amazonaws.com/v1/\"")).unwrap();
    assert_eq!(c.upstreams[0].url.base_path, "/v1");
    let bad = MINIMAL.replace("amazonaws.com\"", "amazonaws.com/?a=b\"");
    assert!(problems(&bad)[0].contains("a query string is not allowed"));
}

#[test]
fn throttle_rules_are_validated() {
    let text = format!(
        "{MINIMAL}[upstream.throttle]\nstatuses = [429, 700]\nbody_codes = [\"QuotaExceeded\"]\nheaders = {{ \"x-throttled\" = [\"true\"], \"bad header\" = \"x\" }}\n"
    );
    let got = problems(&text);
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(got[0].contains("statuses must hold HTTP statuses from 100 to 599, got 700"));
    assert!(got[1].contains("throttle.headers has an invalid header name \"bad header\""));
}

#[test]
fn the_effective_config_parses_back_to_the_same_config() {
    let text = format!(
        "{MINIMAL}preset = \"dynamodb\"\n[upstream.sleeper]\nstrategy = \"linear\"\nmode = \"delay\"\ninitial_interval = \"250ms\"\n[upstream.throttle]\nbody_codes = [\"cost $5\"]\nheaders = {{ \"x-throttled\" = [\"yes\"] }}\n[upstream.sigv4]\nservice = \"dynamodb\"\nregion = \"us-east-1\"\n"
    );
    let c = parse(&text).unwrap();
    let printed = c.to_toml();
    let again = parse(&printed).unwrap_or_else(|e| panic!("{e}\n{printed}"));
    assert_eq!(again, c);
    assert!(
        printed.contains("initial_interval = \"250ms\""),
        "{printed}"
    );
}

#[test]
fn the_runtime_shape_is_one_of_two_names() {
    let c = parse(&format!("[server]\nruntime = \"multi-thread\"\n{MINIMAL}")).unwrap();
    assert_eq!(c.server.runtime, RuntimeShape::MultiThread);
    assert!(effective::render(&c).contains("runtime = \"multi-thread\""));
    assert_eq!(
        problems(&format!("[server]\nruntime = \"percore\"\n{MINIMAL}")),
        [
            r#"easeoff.toml:2:11: server.runtime must be one of multi-thread | per-core, got "percore" (did you mean "per-core"?)"#
        ]
    );
}

/// `MINIMAL` with `[section]` holding `key = value`.
fn with(section: &str, key: &str, value: &str) -> String {
    match section {
        "server" => format!("[server]\n{key} = {value}\n{MINIMAL}"),
        "" => format!("{MINIMAL}{key} = {value}\n"),
        _ => format!("{MINIMAL}[upstream.{section}]\n{key} = {value}\n"),
    }
}

#[test]
fn every_duration_is_at_most_a_day() {
    for (section, key) in [
        ("server", "shutdown_grace"),
        ("server", "header_read_timeout"),
        ("", "connect_timeout"),
        ("", "request_timeout"),
        ("sleeper", "initial_interval"),
        ("sleeper", "min_interval"),
        ("sleeper", "max_interval"),
        ("sleeper", "max_randomization"),
        ("sleeper", "recovery"),
        ("retry", "max_elapsed"),
        ("queue", "max_wait"),
        ("connect_backoff", "initial"),
        ("connect_backoff", "max"),
        ("connect_backoff", "min_connect_timeout"),
    ] {
        let day = with(section, key, "\"24h\"");
        let accepted = parse(&day);
        // A day-long start or floor is above the default ceiling (15m, 2m): other checks.
        if !["initial_interval", "min_interval", "initial"].contains(&key) {
            assert!(accepted.is_ok(), "{key}: {accepted:?}");
        }
        let got = problems(&with(section, key, "\"200000000000000d\""));
        assert_eq!(got.len(), 1, "{key}: {got:?}");
        assert!(
            got[0].ends_with(&format!("{key} must be at most 1d, got 200000000000000d")),
            "{got:?}"
        );
    }
}

#[test]
fn multipliers_must_be_finite_and_at_most_a_hundred() {
    for (section, key) in [
        ("sleeper", "up_multiplier"),
        ("connect_backoff", "multiplier"),
    ] {
        assert!(parse(&with(section, key, "100")).is_ok(), "{key}");
        let got = problems(&with(section, key, "1e30"));
        assert!(
            got[0].ends_with(&format!("{key} must be at most 100, got 1e30")),
            "{got:?}"
        );
        let got = problems(&with(section, key, "inf"));
        assert!(
            got[0].ends_with(&format!("{key} must be a number, got float inf")),
            "{got:?}"
        );
    }
}

#[test]
fn sizes_and_counts_are_rejected_beyond_their_maximum_instead_of_saturating() {
    let cases = [
        (
            "retry",
            "max_body_bytes",
            "\"2GiB\"",
            "must be at most 1GiB, got 2GiB",
        ),
        (
            "retry",
            "max_body_bytes",
            "\"99999999999GiB\"",
            ": size \"99999999999GiB\" is out of range",
        ),
        (
            "retry",
            "max_attempts",
            "101",
            "must be from 1 to 100 (1 turns retries off), got 101",
        ),
        (
            "retry",
            "budget_min_per_second",
            "4294967296",
            "must be at most 1000000, got 4294967296",
        ),
        (
            "queue",
            "max_waiting",
            "18446744073709551615",
            "must be at most 1000000, got 18446744073709551615",
        ),
        (
            "server",
            "max_connections",
            "1000001",
            "must be at most 1000000, got 1000001",
        ),
    ];
    for (section, key, value, want) in cases {
        let got = problems(&with(section, key, value));
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(
            got[0].ends_with(&format!(
                "{key}{}{want}",
                if want.starts_with(':') { "" } else { " " }
            )),
            "{got:?}"
        );
    }
    let c = parse(&with("retry", "max_body_bytes", "\"1GiB\"")).unwrap();
    assert_eq!(c.upstreams[0].retry.max_body_bytes, 1 << 30);
}

#[test]
fn a_ca_file_without_certificates_is_refused_naming_the_key() {
    let empty = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/config/invalid/empty_ca.pem"
    );
    let got = problems(&with("", "ca_file", &format!("\"{empty}\"")));
    assert_eq!(
        got,
        [format!(
            "easeoff.toml:6:11: upstream \"orders\": ca_file: cannot load CA certificates from \"{empty}\": no PEM certificates in the file"
        )]
    );
}

#[test]
fn without_a_fleet_section_there_is_no_fleet_and_with_one_the_defaults_fill_in() {
    assert_eq!(parse(MINIMAL).unwrap().fleet, None);
    let text = format!("[fleet]\nredis = \"redis://redis:6379/0\"\n{MINIMAL}");
    let fleet = parse(&text).unwrap().fleet.unwrap();
    assert_eq!(fleet.redis.urls()[0].expose(), "redis://redis:6379/0");
    assert_eq!(fleet.group, "default");
    assert_eq!(fleet.sync_interval, Duration::from_millis(250));
    assert_eq!(fleet.member_ttl, Duration::from_secs(5));
}

#[test]
fn a_fleet_needs_a_redis_url_and_never_shows_its_password() {
    assert_eq!(
        problems(&format!("[fleet]\ngroup = \"g\"\n{MINIMAL}")),
        ["easeoff.toml:1:1: fleet.redis is missing"]
    );
    let text = format!("[fleet]\nredis = \"rediss://:${{AWS_REGION}}@cache:6380/0\"\n{MINIMAL}");
    let config = parse(&text).unwrap();
    let fleet = config.fleet.as_ref().unwrap();
    assert_eq!(
        fleet.redis.urls()[0].expose(),
        "rediss://:eu-west-1@cache:6380/0"
    );
    assert_eq!(fleet.redis.to_string(), "rediss://:***@cache:6380/0");
    assert!(!config.to_toml().contains("eu-west-1"));
    let bad = problems(&format!(
        "[fleet]\nredis = \"redis://u:${{AWS_REGION}}@[x\"\n{MINIMAL}"
    ));
    assert!(!bad[0].contains("eu-west-1"), "{bad:?}");
}

#[test]
fn a_fleet_ca_file_is_checked_like_an_upstreams_and_needs_a_rediss_url() {
    let ca = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/config/valid/ca.pem"
    );
    let tls = format!("[fleet]\nredis = \"rediss://cache:6380/0\"\nca_file = \"{ca}\"\n{MINIMAL}");
    let fleet = parse(&tls).unwrap().fleet.unwrap();
    assert_eq!(fleet.ca_file.as_deref(), Some(std::path::Path::new(ca)));
    let plain = format!("[fleet]\nredis = \"redis://cache:6379/0\"\nca_file = \"{ca}\"\n{MINIMAL}");
    assert_eq!(
        problems(&plain),
        ["easeoff.toml:3:11: fleet.ca_file is for a rediss:// (TLS) url; redis:// is plain TCP"]
    );
    let empty = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/config/invalid/empty_ca.pem"
    );
    let bad = problems(&tls.replace(ca, empty));
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(
        bad[0].contains("fleet.ca_file: cannot load CA certificates"),
        "{bad:?}"
    );
}

#[test]
fn a_fleet_reaches_one_redis_a_cluster_or_a_primary_behind_sentinels() {
    let fleet = |keys: &str| format!("[fleet]\n{keys}\n{MINIMAL}");
    let cluster = parse(&fleet(
        "redis = [\"redis://u:p@a:7000\", \"redis://u:p@b:7000\"]\nredis_mode = \"cluster\"",
    ))
    .unwrap()
    .fleet
    .unwrap();
    assert_eq!(cluster.redis_mode, RedisMode::Cluster);
    assert_eq!(
        cluster.redis.to_string(),
        "redis://u:***@a:7000,redis://u:***@b:7000"
    );
    let sentinel = parse(&fleet(
        "redis = [\"redis://s1:26379\"]\nredis_mode = \"sentinel\"\nsentinel_master = \"mymaster\"",
    ))
    .unwrap()
    .fleet
    .unwrap();
    assert_eq!(sentinel.sentinel_master.as_deref(), Some("mymaster"));
    assert_eq!(sentinel.redis_mode, RedisMode::Sentinel);
    // The default is one server.
    let single = parse(&fleet("redis = \"redis://r:6379/0\""))
        .unwrap()
        .fleet
        .unwrap();
    assert_eq!(single.redis_mode, RedisMode::Single);
}

#[test]
fn a_fleet_mode_that_does_not_fit_its_urls_is_refused_with_what_to_do() {
    let fleet = |keys: &str| problems(&format!("[fleet]\n{keys}\n{MINIMAL}"));
    assert_eq!(
        fleet("redis = [\"redis://a:6379\", \"redis://b:6379\"]"),
        [
            "easeoff.toml:2:10: fleet.redis lists several urls: set redis_mode = \"cluster\" (seed nodes) or \"sentinel\" (sentinels), or give one url"
        ]
    );
    assert_eq!(
        fleet("redis = []\nredis_mode = \"cluster\""),
        ["easeoff.toml:1:1: fleet.redis must name at least one redis:// url"]
    );
    assert_eq!(
        fleet("redis = [\"redis://s:26379\"]\nredis_mode = \"sentinel\""),
        [
            "easeoff.toml:3:14: fleet.sentinel_master is missing: \"sentinel\" needs the name the sentinels know the primary by (sentinel monitor <name> ...)"
        ]
    );
    assert_eq!(
        fleet("redis = \"redis://a:6379\"\nsentinel_master = \"m\""),
        ["easeoff.toml:3:19: fleet.sentinel_master is for redis_mode = \"sentinel\""]
    );
    assert_eq!(
        fleet("redis = [\"redis://a:7000/2\"]\nredis_mode = \"cluster\""),
        [
            "easeoff.toml:2:10: fleet.redis names a database other than 0: a Redis Cluster has only database 0"
        ]
    );
    let mixed =
        fleet("redis = [\"redis://u:p@a:7000\", \"redis://u:q@b:7000\"]\nredis_mode = \"cluster\"");
    assert_eq!(mixed.len(), 1, "{mixed:?}");
    assert!(
        mixed[0].contains("fleet.redis cannot seed a cluster"),
        "{mixed:?}"
    );
    assert!(
        !mixed[0].contains(":p@") && !mixed[0].contains(":q@"),
        "{mixed:?}"
    );
    let schemes =
        fleet("redis = [\"redis://a:7000\", \"rediss://b:7000\"]\nredis_mode = \"cluster\"");
    assert!(
        schemes
            .iter()
            .any(|p| p.contains("mixes redis:// and rediss://")),
        "{schemes:?}"
    );
    assert_eq!(
        fleet("redis = \"redis://a:6379\"\nredis_mode = \"ring\"").len(),
        1
    );
}

#[test]
fn a_fleet_client_certificate_needs_its_key_and_a_rediss_url() {
    let dir = std::env::temp_dir().join(format!("easeoff-fleet-cert-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let made = rcgen::generate_simple_self_signed(vec!["client".to_string()]).unwrap();
    std::fs::write(dir.join("client.pem"), made.cert.pem()).unwrap();
    std::fs::write(dir.join("client.key"), made.signing_key.serialize_pem()).unwrap();
    let written = dir.clone();
    let dir = dir.display();
    let fleet = |keys: &str| problems(&format!("[fleet]\n{keys}\n{MINIMAL}"));
    let cert = format!("client_cert = \"{dir}/client.pem\"");
    let key = format!("client_key = \"{dir}/client.key\"");
    let both = format!("[fleet]\nredis = \"rediss://r:6380\"\n{cert}\n{key}\n{MINIMAL}");
    assert!(parse(&both).unwrap().fleet.unwrap().client_key.is_some());
    let alone = fleet(&format!("redis = \"rediss://r:6380\"\n{cert}"));
    assert!(
        alone[0].contains("fleet.client_cert needs client_key"),
        "{alone:?}"
    );
    let plain = fleet(&format!("redis = \"redis://r:6379\"\n{cert}\n{key}"));
    assert_eq!(plain.len(), 2, "{plain:?}");
    assert!(
        plain[0].contains("is for a rediss:// (TLS) url"),
        "{plain:?}"
    );
    let _ = std::fs::remove_dir_all(written);
}

#[test]
fn the_llm_and_dynamodb_presets_pace_in_their_units_and_a_lanes_cost_overrides() {
    use crate::cost::Unit;
    let upstream = |preset: &str, extra: &str| {
        let text = format!("{MINIMAL}preset = \"{preset}\"\n{extra}");
        parse(&text).unwrap().upstreams.remove(0)
    };
    for (preset, unit) in [
        ("openai", Unit::Tokens),
        ("anthropic", Unit::Tokens),
        ("dynamodb", Unit::Capacity),
        ("aws", Unit::Requests),
        ("github", Unit::Requests),
        ("none", Unit::Requests),
    ] {
        assert_eq!(upstream(preset, "").lanes.cost, unit, "{preset}");
    }
    let set = upstream("openai", "[upstream.lanes]\ncost = \"requests\"\n");
    assert_eq!(set.lanes.cost, Unit::Requests);
    let set = upstream("none", "[upstream.lanes]\ncost = \"tokens\"\n");
    assert_eq!(set.lanes.cost, Unit::Tokens);
    let bad = format!("{MINIMAL}[upstream.lanes]\ncost = \"dollars\"\n");
    assert!(
        problems(&bad)[0].contains("capacity"),
        "{:?}",
        problems(&bad)
    );
}

#[test]
fn a_header_marked_secret_and_every_credential_header_name_lanes_by_a_hash() {
    use crate::route::Part;
    let lanes = |text: &str| {
        let text = format!("{MINIMAL}[upstream.lanes]\n{text}\n");
        parse(&text).unwrap().upstreams.remove(0).lanes
    };
    let header = |name: &'static str| http::HeaderName::from_static(name);
    let read = lanes(
        "by = [\"header:x-tenant\", \"header:X-Api-Key\", \"header:x-user\"]\nsecret_headers = [\"X-Tenant\"]",
    );
    assert_eq!(
        read.by,
        Some(vec![
            Part::Secret(header("x-tenant")),
            Part::Secret(header("x-api-key")),
            Part::Header(header("x-user")),
        ])
    );
    assert_eq!(read.secret_headers, [header("x-tenant")]);
    assert!(lanes("").secret_headers.is_empty());
    let bad = format!("{MINIMAL}[upstream.lanes]\nsecret_headers = [\"a b\"]\n");
    assert_eq!(
        problems(&bad),
        [
            "easeoff.toml:7:19: upstream \"orders\": lanes.secret_headers must hold header names, got \"a b\""
        ]
    );
}

#[test]
fn a_body_is_read_on_for_its_lane_fields_up_to_max_scan_bytes() {
    let lanes = |text: &str| {
        let text = format!("{MINIMAL}[upstream.lanes]\n{text}\n");
        parse(&text).unwrap().upstreams.remove(0).lanes
    };
    assert_eq!(lanes("").max_scan_bytes, 4 << 20);
    assert_eq!(lanes("max_scan_bytes = \"16MiB\"").max_scan_bytes, 16 << 20);
    assert_eq!(lanes("max_scan_bytes = 0").max_scan_bytes, 0);
    let bad = format!("{MINIMAL}[upstream.lanes]\nmax_scan_bytes = \"2GiB\"\n");
    assert!(
        problems(&bad)[0].contains("max_scan_bytes"),
        "{:?}",
        problems(&bad)
    );
}

#[test]
fn max_in_flight_is_off_a_whole_number_or_learn_and_learned_by_github_and_model_servers() {
    use crate::concurrency::CapSetting;
    let cap =
        |extra: &str| parse(&format!("{MINIMAL}{extra}\n")).unwrap().upstreams[0].max_in_flight;
    assert_eq!(cap(""), CapSetting::Off);
    assert_eq!(cap("max_in_flight = 8"), CapSetting::Fixed(8));
    assert_eq!(cap("max_in_flight = \"learn\""), CapSetting::Learn);
    assert_eq!(cap("preset = \"github\""), CapSetting::Learn);
    assert_eq!(cap("preset = \"model-server\""), CapSetting::Learn);
    assert_eq!(
        cap("preset = \"github\"\nmax_in_flight = \"off\""),
        CapSetting::Off
    );
    assert_eq!(cap("preset = \"openai\""), CapSetting::Off);
    let says = "must be \"off\", a whole number from 1 to 100000 (a fixed cap), or \"learn\"";
    assert_eq!(
        problems(&format!("{MINIMAL}max_in_flight = 0\n")),
        vec![format!(
            "easeoff.toml:6:17: upstream \"orders\": max_in_flight: {says}, got 0"
        )]
    );
    assert_eq!(
        problems(&format!("{MINIMAL}max_in_flight = \"lots\"\n")),
        vec![format!(
            "easeoff.toml:6:17: upstream \"orders\": max_in_flight: {says}, got \"lots\""
        )]
    );
    assert_eq!(
        problems(&format!("{MINIMAL}max_in_flight = 1.5\n")),
        vec!["easeoff.toml:6:17: upstream \"orders\": max_in_flight must be a whole number or a string, got float 1.5".to_string()]
    );
}
