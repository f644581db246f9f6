//! ARCHITECTURE.md's module map holds: every `use crate::` and `use super::` in `src/`
//! points to a module in the same layer or below, no two modules import each other,
//! and the layer table here is the map ARCHITECTURE.md draws. Time is read directly
//! (not through `Clock`) only in the files ARCHITECTURE.md lists.

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
            "fleet/due",
            "fleet/fingerprint",
            "fleet/summary",
            "fleet/decide",
            "observe",
            "spelled",
            "cost",
            "lane/rules",
            "concurrency",
            "fair",
        ],
    ),
    ("pacing", &["pacer", "metrics", "flights", "tenants"]),
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

/// `text` without its inline `mod tests` (which comes last in a file).
fn without_tests(text: &str) -> &str {
    text.split("#[cfg(test)]\nmod tests").next().unwrap_or(text)
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

/// Every path the `use` statements of `text` name, braces expanded, its inline
/// `mod tests` left out.
fn use_paths(text: &str) -> Vec<String> {
    let mut paths = Vec::new();
    let mut lines = without_tests(text).lines();
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
        expand("", tree, &mut paths);
    }
    paths
}

/// The modules `module`'s `use crate::` and `use super::` lines point to, its own
/// inline `mod tests` left out.
fn imports(
    module: &str,
    text: &str,
    known: &BTreeMap<String, std::path::PathBuf>,
) -> BTreeSet<String> {
    let parent: Vec<&str> = module.split('/').collect();
    let parent = &parent[..parent.len() - 1];
    let mut targets = BTreeSet::new();
    for path in use_paths(text) {
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

/// What reads time without `Clock`, or names a time type other than `clock::Instant`.
const DIRECT_TIME: &[&str] = &[
    "Instant::now",
    "SystemTime::now",
    "into_std",
    "std::time::Instant",
    "tokio::time::Instant",
];

/// The files of `src/` (`proxy/connection.rs`) whose code outside tests reads time
/// directly, with the first line that does.
fn direct_time_reads() -> BTreeMap<String, String> {
    let mut found = BTreeMap::new();
    for (module, path) in modules() {
        if is_test(&module) || module == "clock" {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("a readable source file");
        let code = without_tests(&text)
            .lines()
            .filter(|line| !line.trim_start().starts_with("//"));
        let mut read = code.filter(|line| DIRECT_TIME.iter().any(|p| line.contains(p)));
        let imported = use_paths(&text)
            .into_iter()
            .find(|path| DIRECT_TIME.contains(&path.as_str()))
            .map(|path| format!("use {path}"));
        if let Some(line) = read.next().map(|l| l.trim().to_string()).or(imported) {
            found.insert(format!("{module}.rs"), line);
        }
    }
    found
}

/// The files ARCHITECTURE.md lists under "Direct reads of time": each sub-item names
/// its files in backquotes before its colon.
fn listed_time_reads() -> BTreeSet<String> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/ARCHITECTURE.md"))
        .expect("ARCHITECTURE.md");
    let list = doc
        .split("\n- Direct reads of time")
        .nth(1)
        .expect("a \"Direct reads of time\" item in ARCHITECTURE.md");
    let mut listed = BTreeSet::new();
    for line in list.lines().skip(1) {
        if !line.starts_with("  ") {
            break;
        }
        let Some(item) = line.trim_start().strip_prefix("- ") else {
            continue;
        };
        let names = item.split(": ").next().unwrap_or(item);
        for (i, part) in names.split('`').enumerate() {
            if i % 2 == 1 && part.ends_with(".rs") {
                listed.insert(part.to_string());
            }
        }
    }
    listed
}

#[test]
fn time_is_read_directly_only_where_architecture_md_lists() {
    let found = direct_time_reads();
    let listed = listed_time_reads();
    assert!(
        !listed.is_empty(),
        "no files parsed from ARCHITECTURE.md's list"
    );
    let mut wrong = Vec::new();
    for (file, line) in &found {
        if !listed.contains(file) {
            wrong.push(format!(
                "src/{file} reads time directly (`{line}`): read it through `Clock`, or list the file and why in ARCHITECTURE.md"
            ));
        }
    }
    for file in listed.iter().filter(|f| !found.contains_key(*f)) {
        wrong.push(format!(
            "ARCHITECTURE.md lists src/{file}, which no longer reads time directly"
        ));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
