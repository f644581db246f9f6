//! The shipped files agree with the code: every example config in `config/` and the
//! configs the deployment files mount load and pass `easeoff check`; the Kubernetes
//! and docker-compose files use the ports and timings their `easeoff.toml` sets; and
//! every `easeoff_*` metric (and label value) that the Grafana dashboard and the alert
//! rules query is one that a running easeoff exports on `/metrics`.
//!
//! The YAML files are read as text (there is no YAML parser among the dependencies);
//! `.ci/deploy-checks` validates them with their own tools.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use easeoff::Config;
use serde_json::Value;
use support::*;

/// The sidecar config of the Kubernetes manifests (the ConfigMap is generated from it).
const KUBERNETES_CONFIG: &str = "deploy/kubernetes/easeoff.toml";
/// The easeoff config of the docker-compose stack.
const COMPOSE_CONFIG: &str = "deploy/compose/easeoff.toml";
const DASHBOARD: &str = "deploy/grafana/easeoff.json";
const ALERT_FILES: [&str; 2] = [
    "deploy/prometheus/alerts.yml",
    "deploy/prometheus/alerts.test.yml",
];

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every shipped config, as paths relative to the repository root.
fn shipped_configs() -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(repo("config"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .map(|p| format!("config/{}", p.file_name().unwrap().to_string_lossy()))
        .collect();
    files.sort();
    for example in ["generic-api", "dynamodb", "grpc"] {
        let path = format!("config/{example}.toml");
        assert!(files.contains(&path), "{path} is missing");
    }
    files.push(COMPOSE_CONFIG.to_string());
    files.push(KUBERNETES_CONFIG.to_string());
    files
}

/// Loads a shipped config with an empty environment: every `${VAR}` needs a default.
fn load(path: &str) -> Config {
    Config::parse(&read(path), path, &|_| None).unwrap_or_else(|e| panic!("{e}"))
}

/// The value after `key:` on the first line of a YAML text that has it.
fn yaml_value<'a>(text: &'a str, key: &str) -> &'a str {
    text.lines()
        .find_map(|line| line.trim().strip_prefix(key)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("no \"{key}:\" in\n{text}"))
        .trim()
}

#[test]
fn every_shipped_config_passes_check() {
    for file in shipped_configs() {
        let out = Command::new(env!("CARGO_BIN_EXE_easeoff"))
            .arg("check")
            .arg("--config")
            .arg(repo(&file))
            .env_clear()
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "easeoff check --config {file}:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let config = load(&file);
        assert!(!config.upstreams.is_empty(), "{file}: no upstream");
    }
}

#[test]
fn environment_defaults_give_the_documented_endpoints() {
    let dynamodb = load("config/dynamodb.toml");
    assert_eq!(
        dynamodb.upstreams[0].url.to_string(),
        "https://dynamodb.us-east-1.amazonaws.com"
    );
    let region = |name: &str| (name == "AWS_REGION").then(|| "eu-west-1".to_string());
    let text = read(KUBERNETES_CONFIG);
    let in_pod = Config::parse(&text, KUBERNETES_CONFIG, &region).unwrap();
    assert_eq!(
        in_pod.upstreams[0].url.to_string(),
        "https://dynamodb.eu-west-1.amazonaws.com"
    );
    let generic = load("config/generic-api.toml");
    assert_eq!(generic.upstreams[0].listen.to_string(), "127.0.0.1:8000");
}

#[test]
fn kubernetes_manifests_match_the_sidecar_config() {
    let config = load(KUBERNETES_CONFIG);
    let deployment = read("deploy/kubernetes/deployment.yaml");
    let kustomization = read("deploy/kubernetes/kustomization.yaml");
    assert!(
        kustomization.contains("- easeoff.toml"),
        "the ConfigMap is not generated from easeoff.toml:\n{kustomization}"
    );

    let upstream = &config.upstreams[0];
    assert!(
        upstream.listen.ip().is_loopback(),
        "a sidecar listens on loopback"
    );
    let endpoint = deployment
        .lines()
        .skip_while(|line| line.trim() != "- name: AWS_ENDPOINT_URL_DYNAMODB")
        .nth(1)
        .expect("the writer has AWS_ENDPOINT_URL_DYNAMODB");
    assert_eq!(
        endpoint.trim(),
        format!("value: http://{}", upstream.listen),
        "the writer's endpoint is not easeoff's listener"
    );

    let admin = config.server.admin_listen.port();
    assert_eq!(yaml_value(&deployment, "containerPort"), admin.to_string());
    assert_eq!(
        yaml_value(&deployment, "prometheus.io/port"),
        format!("\"{admin}\"")
    );
    assert_eq!(yaml_value(&deployment, "restartPolicy"), "Always");
    assert_eq!(yaml_value(&deployment, "mountPath"), "/etc/easeoff");

    let grace: u64 = yaml_value(&deployment, "terminationGracePeriodSeconds")
        .parse()
        .unwrap();
    assert!(
        grace > config.server.shutdown_grace.as_secs(),
        "terminationGracePeriodSeconds ({grace}) must exceed shutdown_grace ({:?})",
        config.server.shutdown_grace
    );
}

#[test]
fn the_compose_stack_matches_its_config() {
    let config = load(COMPOSE_CONFIG);
    let compose = read("deploy/docker-compose.yml");
    let prometheus = read("deploy/prometheus/prometheus.yml");

    let upstream = &config.upstreams[0];
    let listen = upstream.listen.port();
    assert!(
        compose.contains(&format!("\"127.0.0.1:{listen}:{listen}\"")),
        "port {listen} is not published"
    );
    let admin = config.server.admin_listen.port();
    assert!(compose.contains(&format!("\"127.0.0.1:{admin}:{admin}\"")));
    assert!(
        prometheus.contains(&format!("\"easeoff:{admin}\"")),
        "Prometheus does not scrape easeoff:{admin}"
    );

    // The mock serves what easeoff forwards to, and Prometheus scrapes its admin port.
    let target = upstream.url.authority.as_str();
    let (host, port) = target.split_once(':').unwrap();
    assert_eq!(host, "mock-upstream");
    assert!(compose.contains(&format!("- 0.0.0.0:{port}\n")), "{target}");
    let mock_admin = compose
        .split("- --admin\n")
        .nth(1)
        .and_then(|rest| rest.lines().next())
        .and_then(|line| line.trim().strip_prefix("- 0.0.0.0:"))
        .expect("the mock has an --admin address");
    assert!(prometheus.contains(&format!("\"mock-upstream:{mock_admin}\"")));

    assert!(compose.contains("- ./compose/easeoff.toml:/etc/easeoff/easeoff.toml:ro"));
    let dockerfile = read("Dockerfile");
    assert!(dockerfile.contains("CMD [\"run\", \"--config\", \"/etc/easeoff/easeoff.toml\"]"));
    assert!(dockerfile.contains("COPY config/generic-api.toml /etc/easeoff/easeoff.toml"));
    assert!(compose.contains(&format!(
        "test: [\"CMD\", \"easeoff\", \"probe\", \"http://127.0.0.1:{admin}/readyz\"]"
    )));
    assert!(compose.contains(&format!(
        "test: [\"CMD\", \"easeoff\", \"probe\", \"http://127.0.0.1:{mock_admin}/metrics\"]"
    )));
}

#[test]
fn the_image_listens_where_docker_run_p_reaches_it_and_probes_its_admin_port() {
    let dockerfile = read("Dockerfile");
    // The shipped config with the image's environment.
    let listen = dockerfile
        .split("EASEOFF_LISTEN=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("the image sets EASEOFF_LISTEN");
    let path = "config/generic-api.toml";
    let config = Config::parse(&read(path), path, &|name| {
        (name == "EASEOFF_LISTEN").then(|| listen.to_string())
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let exposed: Vec<u16> = dockerfile
        .lines()
        .find_map(|l| l.strip_prefix("EXPOSE "))
        .expect("EXPOSE")
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    let admin = config.server.admin_listen;
    for addr in [config.upstreams[0].listen, admin] {
        assert!(
            addr.ip().is_unspecified(),
            "{addr} is not reachable with -p"
        );
        assert!(exposed.contains(&addr.port()), "{addr} is not EXPOSEd");
    }
    let health = dockerfile
        .split("HEALTHCHECK")
        .nth(1)
        .and_then(|rest| rest.split("CMD ").nth(1))
        .and_then(|rest| rest.lines().next())
        .expect("a HEALTHCHECK");
    assert_eq!(
        health,
        format!(
            "[\"easeoff\", \"probe\", \"--timeout\", \"2s\", \"http://127.0.0.1:{}/readyz\"]",
            admin.port()
        )
    );
}

/// Every `easeoff_...` name in `text`.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("easeoff_") {
        let before = rest[..at].chars().next_back();
        let name: String = rest[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            names.insert(name.clone());
        }
        rest = &rest[at + name.len()..];
    }
    names
}

/// `label="value"` matchers of the labels whose values easeoff fixes.
fn label_matchers(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for label in ["outcome", "signal", "reason", "result"] {
        let needle = format!("{label}=\"");
        let mut rest = text;
        while let Some(at) = rest.find(&needle) {
            let after = &rest[at + needle.len()..];
            let value: String = after.chars().take_while(|c| *c != '"').collect();
            let starts_word = !rest[..at]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
            if starts_word && !value.is_empty() {
                found.insert(format!("{label}=\"{value}\""));
            }
            rest = after;
        }
    }
    found
}

/// Families on a live `/metrics`, by name, with their type.
async fn exported_families() -> (BTreeMap<String, String>, String) {
    // One throttle, so the families stamped only by a throttle are shown too.
    let up = throttles_first(1, || respond(429, &[], "slow down")).await;
    let proxy = proxy_with_absent_fleet(up.addr, "").await;
    get(&format!("http://{}/", proxy.addr)).await;
    let text = metrics(proxy.admin).await;
    let families = text
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split_once(' '))
        .map(|(name, kind)| (name.to_string(), kind.trim().to_string()))
        .collect();
    (families, text)
}

/// Whether `name` is a sample name of an exported family: the family itself, or a
/// histogram's `_bucket`, `_sum` or `_count`.
fn is_exported(name: &str, families: &BTreeMap<String, String>) -> bool {
    families.contains_key(name)
        || ["_bucket", "_sum", "_count"].iter().any(|suffix| {
            name.strip_suffix(suffix)
                .and_then(|family| families.get(family))
                .is_some_and(|kind| kind == "histogram")
        })
}

/// Every PromQL text of a dashboard: panel target expressions and variable queries.
fn queries(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                match (key.as_str(), v) {
                    ("expr" | "definition", Value::String(s)) => out.push(s.clone()),
                    ("query", Value::String(s)) => out.push(s.clone()),
                    _ => queries(v, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| queries(v, out)),
        _ => {}
    }
}

#[tokio::test]
async fn dashboard_and_alerts_query_only_exported_metrics() {
    let (families, exposition) = exported_families().await;
    assert!(families.contains_key("easeoff_queue_wait_seconds"));

    let dashboard: Value = serde_json::from_str(&read(DASHBOARD))
        .unwrap_or_else(|e| panic!("{DASHBOARD} is not JSON: {e}"));
    let mut texts = Vec::new();
    queries(&dashboard, &mut texts);
    let dashboard_names: BTreeSet<String> = texts.iter().flat_map(|q| metric_names(q)).collect();
    let mut sources: Vec<(String, BTreeSet<String>, BTreeSet<String>)> = vec![(
        DASHBOARD.to_string(),
        dashboard_names.clone(),
        texts.iter().flat_map(|q| label_matchers(q)).collect(),
    )];
    for file in ALERT_FILES {
        let text = read(file);
        sources.push((file.to_string(), metric_names(&text), label_matchers(&text)));
    }
    for (file, names, matchers) in &sources {
        assert!(!names.is_empty(), "{file} queries no easeoff metric");
        for name in names {
            assert!(
                is_exported(name, &families),
                "{file} uses {name}, which easeoff does not export"
            );
        }
        for matcher in matchers {
            assert!(
                exposition.contains(matcher.as_str()),
                "{file} matches {matcher}, which /metrics never shows"
            );
        }
    }

    // What SPEC §6 asks the dashboard to show.
    for family in [
        "easeoff_upstream_interval_seconds",
        "easeoff_throttles_total",
        "easeoff_requests_total",
        "easeoff_queue_wait_seconds_bucket",
        "easeoff_queue_waiting",
        "easeoff_retries_total",
        "easeoff_retry_budget_exhausted_total",
        "easeoff_connect_backoff_seconds",
        "easeoff_upstream_pause_seconds",
        "easeoff_upstream_responses_total",
        "easeoff_upstream_duration_seconds_bucket",
        "easeoff_config_reloads_total",
    ] {
        assert!(
            dashboard_names.contains(family),
            "the dashboard has no panel on {family}"
        );
    }
}

#[test]
fn the_dashboard_works_when_provisioned() {
    let dashboard: Value = serde_json::from_str(&read(DASHBOARD)).unwrap();
    let variables = dashboard["templating"]["list"].as_array().unwrap();
    let variable = |name: &str| variables.iter().find(|v| v["name"] == name);
    assert_eq!(variable("datasource").unwrap()["type"], "datasource");
    assert_eq!(variable("upstream").unwrap()["includeAll"], true);

    // Every panel and query names its data source through the variable, so the
    // dashboard needs no import step (a `${DS_...}` input would).
    let mut panels = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        panels.push(panel);
        if let Some(nested) = panel["panels"].as_array() {
            panels.extend(nested);
        }
    }
    for panel in panels.iter().filter(|p| p["type"] != "row") {
        let title = panel["title"].as_str().unwrap();
        assert_eq!(panel["datasource"]["uid"], "${datasource}", "{title}");
        for target in panel["targets"].as_array().unwrap() {
            assert_eq!(target["datasource"]["uid"], "${datasource}", "{title}");
            // A query on per-upstream series follows the upstream variable.
            let expr = target["expr"].as_str().unwrap();
            let per_upstream = expr.contains("easeoff_") && expr.contains("upstream");
            assert!(
                !per_upstream || expr.contains("upstream=~\"$upstream\""),
                "{title}: {expr} ignores the upstream variable"
            );
        }
    }
}

#[test]
fn the_dashboard_tells_pods_apart_and_shows_the_mock_only_where_it_runs() {
    let dashboard: Value = serde_json::from_str(&read(DASHBOARD)).unwrap();
    let variables = dashboard["templating"]["list"].as_array().unwrap();
    for name in ["namespace", "instance"] {
        let variable = variables.iter().find(|v| v["name"] == name);
        assert_eq!(variable.unwrap()["includeAll"], true, "{name}");
    }
    let panels = dashboard["panels"].as_array().unwrap();
    let mut exprs = Vec::new();
    queries(&dashboard, &mut exprs);
    for expr in exprs
        .iter()
        .filter(|e| e.contains("upstream=~\"$upstream\""))
    {
        assert!(
            expr.contains("instance=~\"$instance\""),
            "{expr} ignores the pod"
        );
    }
    let top = panels.iter().find(|p| p["id"] == 2).unwrap();
    assert!(
        top["targets"][0]["expr"]
            .as_str()
            .unwrap()
            .contains("topk(1")
    );
    let mock = panels
        .iter()
        .find(|p| p["type"] == "row" && p["repeat"] == "mock")
        .expect("a mock row repeated per scraped mock");
    assert_eq!(mock["collapsed"], true);
    assert!(
        panels
            .iter()
            .filter(|p| p["type"] != "row")
            .all(|p| !p["targets"].to_string().contains("mock_")),
        "mock panels live only inside the mock row"
    );
}
