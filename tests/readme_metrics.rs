//! The README's metric table and what `/metrics` exports list the same families, with
//! the same types and labels, so operators can trust the table when writing queries.

mod support;

use std::collections::BTreeMap;

use support::*;

/// Name → (type, label names in sorted order).
type Families = BTreeMap<String, (String, Vec<String>)>;

#[tokio::test]
async fn readme_metric_table_matches_the_exported_families() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let documented = readme_table(&readme);
    assert!(
        documented.len() >= 20,
        "too few rows parsed: {documented:?}"
    );

    // A spent window makes the pause the lane's, not only the request's.
    let spent = [
        ("retry-after-ms", "1"),
        ("x-ratelimit-remaining-requests", "0"),
        ("x-ratelimit-reset-requests", "1ms"),
    ];
    let up = throttles_first(1, move || respond(429, &spent, "")).await;
    // Costs in tokens with their histogram: every optional family.
    // With fairness, whose tenants' series come with the tenants.
    let lanes = "[upstream.lanes]\ncost = \"tokens\"\nmetrics_histograms = true\n\n[upstream.fairness]\nby = \"client-ip\"\n";
    let proxy = proxy_with_absent_fleet(up.addr, lanes).await;
    // One throttle with a pause, so label sets made on first use are exported too.
    get(&format!("http://{}/", proxy.addr)).await;
    let exported = scraped(&metrics(proxy.admin).await);

    assert_eq!(
        documented, exported,
        "README table (left) vs /metrics (right)"
    );
}

/// The rows of the table under `## Metrics`: `| \`name\` | type | a, b | meaning |`.
fn readme_table(readme: &str) -> Families {
    let section = readme
        .split("\n## Metrics\n")
        .nth(1)
        .expect("a ## Metrics section")
        .split("\n## ")
        .next()
        .unwrap_or_default();
    section
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let name = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
            // An empty cell: a family without labels.
            let mut labels: Vec<String> = cells[3]
                .split(',')
                .map(|l| l.trim().to_string())
                .filter(|l| !l.is_empty())
                .collect();
            labels.sort();
            Some((name.to_string(), (cells[2].to_string(), labels)))
        })
        .collect()
}

/// easeoff's families in exposition text, process metrics aside.
fn scraped(text: &str) -> Families {
    let mut families = Families::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE easeoff_") {
            let (name, kind) = rest.split_once(' ').expect("# TYPE name kind");
            families.insert(format!("easeoff_{name}"), (kind.to_string(), Vec::new()));
        }
    }
    for line in text.lines().filter(|l| l.starts_with("easeoff_")) {
        let Some((metric, labels)) = line.split_once('{') else {
            continue;
        };
        let family = families
            .keys()
            .filter(|name| metric.starts_with(name.as_str()))
            .max_by_key(|name| name.len())
            .cloned()
            .expect("a sample of a declared family");
        let (_, names) = families.get_mut(&family).expect("known family");
        for pair in labels.split("\",") {
            let Some((label, _)) = pair.split_once('=') else {
                continue;
            };
            if label != "le" && !names.iter().any(|n| n == label) {
                names.push(label.to_string());
                names.sort();
            }
        }
    }
    families
}
