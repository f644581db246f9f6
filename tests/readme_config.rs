//! The README's configuration tables and the config schema list the same tables and
//! keys, so a key added to a `keys!` table without its README row (or a row left
//! behind by a renamed key) fails here.

use std::collections::{BTreeMap, BTreeSet};

/// Table header → key names.
type Tables = BTreeMap<String, BTreeSet<String>>;

#[test]
fn readme_config_tables_match_the_schema() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let documented = readme_tables(&readme);
    let schema: Tables = easeoff::config::ALL_SECTIONS
        .iter()
        .map(|(header, names)| {
            let names = names.iter().map(|n| n.to_string()).collect();
            (header.to_string(), names)
        })
        .collect();
    assert!(
        schema.len() >= 10,
        "too few tables in the schema: {schema:?}"
    );
    let mut wrong = Vec::new();
    for (table, keys) in &schema {
        let rows = documented.get(table);
        for key in keys
            .iter()
            .filter(|k| !rows.is_some_and(|r| r.contains(*k)))
        {
            wrong.push(format!("{table} {key}: in the schema, not in the README"));
        }
    }
    for (table, rows) in &documented {
        let keys = schema.get(table);
        for key in rows
            .iter()
            .filter(|k| !keys.is_some_and(|r| r.contains(*k)))
        {
            wrong.push(format!("{table} {key}: in the README, not in the schema"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Under `## Configuration`: a line that starts with a table header in backticks
/// (`` `[upstream.retry]` — ... ``) opens a table; its rows are `| \`key\` | ...`.
fn readme_tables(readme: &str) -> Tables {
    let section = readme
        .split("\n## Configuration\n")
        .nth(1)
        .expect("a ## Configuration section")
        .split("\n## ")
        .next()
        .unwrap_or_default();
    let mut tables = Tables::new();
    let mut current: Option<String> = None;
    for line in section.lines() {
        if let Some(rest) = line.strip_prefix("`[") {
            let header = rest.split('`').next().unwrap_or_default();
            let header = format!("[{header}");
            tables.entry(header.clone()).or_default();
            current = Some(header);
            continue;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let Some(key) = cells
            .get(1)
            .and_then(|c| c.strip_prefix('`'))
            .and_then(|c| c.strip_suffix('`'))
        else {
            continue;
        };
        let table = current.as_ref().expect("a row after a table header");
        tables
            .get_mut(table)
            .expect("the open table")
            .insert(key.to_string());
    }
    tables
}
