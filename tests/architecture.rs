//! ARCHITECTURE.md's module map holds: every `use crate::` and `use super::` in `src/`
//! points to a module in the same layer or below, no two modules import each other,
//! and the layer table here is the map ARCHITECTURE.md draws.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The layers, lowest first, and the modules in each (a submodule is in its nearest
/// listed ancestor's layer). ARCHITECTURE.md's map lists the same, line by line.
const LAYERS: &[(&str, &[&str])] = &[
    ("time", &["clock", "deadline"]),
    (
        "decisions",
        &[
            "attempt",
            "retry",
            "window",
            "controller",
            "sleeper",
            "throttle",
            "hints",
            "quota",
            "shed",
            "notice",
            "connect_backoff",
            "route",
            "config",
            "flag_waker",
            "fleet/share",
            "fleet/learning",
            "fleet/demand",
            "fleet/fingerprint",
            "observe",
            "spelled",
            "cost",
        ],
    ),
    ("pacing", &["pacer", "metrics"]),
    ("I/O", &["transport", "sigv4", "fleet", "trim"]),
    ("state", &["lane", "upstream"]),
    ("request", &["proxy"]),
    ("shell", &["server", "signals", "admin"]),
    (
        "tools",
        &[
            "demo",
            "simulate",
            "mock_upstream",
            "load",
            "plot",
            "status",
            "probe",
            "train",
            "cli",
            "lib",
            "main",
        ],
    ),
];

/// Module path (`fleet/share`) → file.
fn modules() -> BTreeMap<String, std::path::PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = BTreeMap::new();
    let mut dirs = vec![src.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("src/ readable") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path
                    .strip_prefix(&src)
                    .expect("under src/")
                    .with_extension("");
                let name = rel.to_string_lossy().replace('\\', "/");
                found.insert(name, path);
            }
        }
    }
    found
}

/// Whether `module` is test code (`foo/tests.rs`, `foo/tests/...`).
fn is_test(module: &str) -> bool {
    module.split('/').any(|part| part == "tests")
}

/// The paths one `use` names, its braces expanded: `a::{b, c::{d, e}}` → `a::b`,
/// `a::c::d`, `a::c::e`.
fn expand(prefix: &str, tree: &str, out: &mut Vec<String>) {
    let mut depth = 0;
    let mut start = 0;
    let mut items = Vec::new();
    for (i, c) in tree.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&tree[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&tree[start..]);
    for item in items.into_iter().map(str::trim).filter(|i| !i.is_empty()) {
        match item.find('{') {
            Some(open) => {
                let head = item[..open].trim_end_matches("::");
                let inner = &item[open + 1..item.rfind('}').expect("a closing brace")];
                expand(&format!("{prefix}{head}::"), inner, out);
            }
            None => {
                let path = item.split(" as ").next().unwrap_or(item).trim();
                out.push(format!("{prefix}{path}"));
            }
        }
    }
}

/// The modules `module`'s `use crate::` and `use super::` lines point to, its own
/// inline `mod tests` left out.
fn imports(
    module: &str,
    text: &str,
    known: &BTreeMap<String, std::path::PathBuf>,
) -> BTreeSet<String> {
    let text = text.split("#[cfg(test)]\nmod tests").next().unwrap_or(text);
    let parent: Vec<&str> = module.split('/').collect();
    let parent = &parent[..parent.len() - 1];
    let mut targets = BTreeSet::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let line = line.trim_start();
        let line = match line.split_once(' ') {
            Some((vis, rest)) if vis.starts_with("pub") => rest,
            _ => line,
        };
        let Some(start) = line.strip_prefix("use ") else {
            continue;
        };
        let mut statement = start.to_string();
        while !statement.contains(';') {
            let Some(more) = lines.next() else { break };
            statement.push_str(more);
        }
        let tree = statement.split(';').next().unwrap_or_default().trim();
        let mut paths = Vec::new();
        expand("", tree, &mut paths);
        for path in paths {
            let parts: Vec<&str> = path.split("::").map(str::trim).collect();
            let full: Vec<&str> = match parts.first() {
                Some(&"crate") => parts[1..].to_vec(),
                Some(&"super") => parent
                    .iter()
                    .copied()
                    .chain(parts[1..].iter().copied())
                    .collect(),
                _ => continue,
            };
            let target = (1..=full.len())
                .rev()
                .map(|n| full[..n].join("/"))
                .find(|candidate| known.contains_key(candidate));
            if let Some(target) = target.filter(|t| t != module) {
                targets.insert(target);
            }
        }
    }
    targets
}

/// The layer of `module`: its nearest listed ancestor's.
fn layer(module: &str) -> Option<usize> {
    let parts: Vec<&str> = module.split('/').collect();
    (1..=parts.len()).rev().find_map(|n| {
        let candidate = parts[..n].join("/");
        LAYERS
            .iter()
            .position(|(_, members)| members.contains(&candidate.as_str()))
    })
}

/// Every import edge between modules of `src/`, test code left out.
fn edges() -> BTreeSet<(String, String)> {
    let known = modules();
    let mut edges = BTreeSet::new();
    for (module, path) in &known {
        if is_test(module) {
            continue;
        }
        let text = std::fs::read_to_string(path).expect("a readable source file");
        for target in imports(module, &text, &known) {
            edges.insert((module.clone(), target));
        }
    }
    edges
}

#[test]
fn every_import_points_to_the_same_layer_or_below() {
    let edges = edges();
    assert!(edges.len() > 100, "too few imports parsed: {}", edges.len());
    let mut wrong = Vec::new();
    for module in modules().keys().filter(|m| !is_test(m)) {
        if layer(module).is_none() {
            wrong.push(format!(
                "{module} is in no layer: add it to LAYERS and ARCHITECTURE.md"
            ));
        }
    }
    for (from, to) in &edges {
        if let (Some(a), Some(b)) = (layer(from), layer(to))
            && b > a
        {
            wrong.push(format!(
                "{from} ({}) imports {to} ({}), a layer above it",
                LAYERS[a].0, LAYERS[b].0
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn no_two_modules_import_each_other() {
    let edges = edges();
    let pairs: Vec<String> = edges
        .iter()
        .filter(|(a, b)| a < b && edges.contains(&(b.clone(), a.clone())))
        .map(|(a, b)| format!("{a} <-> {b}"))
        .collect();
    assert!(
        pairs.is_empty(),
        "modules that import each other:\n{}",
        pairs.join("\n")
    );
}

#[test]
fn architecture_md_draws_the_same_layers() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/ARCHITECTURE.md"))
        .expect("ARCHITECTURE.md");
    let map = doc
        .split("\n## Modules, in layers\n")
        .nth(1)
        .and_then(|s| s.split("```\n").nth(1))
        .expect("a code block under ## Modules, in layers");
    // `name    a, b (+c), d`: one line per layer, top first; a line starting with
    // spaces goes on with the layer above.
    let mut drawn: Vec<(String, BTreeSet<String>)> = Vec::new();
    for line in map.lines() {
        let (name, rest) = if line.starts_with(' ') {
            let Some(last) = drawn.last() else { continue };
            (last.0.clone(), line)
        } else {
            let (name, rest) = line.split_once("  ").unwrap_or((line, ""));
            drawn.push((name.trim().to_string(), BTreeSet::new()));
            (name.trim().to_string(), rest)
        };
        let modules = rest.split("--").next().unwrap_or(rest);
        let entry = drawn
            .iter_mut()
            .find(|(n, _)| *n == name)
            .expect("the layer");
        for module in modules.split(',') {
            let module = module.split('(').next().unwrap_or(module).trim();
            if !module.is_empty() {
                entry.1.insert(module.to_string());
            }
        }
    }
    drawn.reverse();
    let table: Vec<(String, BTreeSet<String>)> = LAYERS
        .iter()
        .map(|(name, members)| {
            (
                name.to_string(),
                members.iter().map(|m| m.to_string()).collect(),
            )
        })
        .collect();
    assert_eq!(
        drawn, table,
        "ARCHITECTURE.md's map (left) vs LAYERS (right)"
    );
}
