//! The workspace's shape, checked from its manifests and sources (issues
//! 15, 28): the crates depend on each other only downward, as the layers of
//! docs/ARCHITECTURE.md say, and the crates below the server and the load
//! generator pull in no web, async or tokenizer crate, not even
//! indirectly; inside each crate, the top-level modules import each other
//! without circles, so do the submodules of each folder module (one level
//! down); and `serde_yaml` is named in `crates/scenario/src/yaml.rs` alone.
//!
//! A crate's top-level module is a file `src/m.rs` or a folder `src/m/`
//! (both together when both exist), `lib.rs` and `main.rs` aside. Its edges
//! are the names it uses as `crate::x` (in `use` lines, groups and inline
//! paths), or as `super::x` from a file right under `src/`
//! (`super::super::x` one folder down), where `x` is another top-level
//! module. Comments, `tests.rs` files and everything from a file's first
//! `#[cfg(test)]` on are ignored: test code may use whatever it likes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Edges that still close a circle, each with the reason it stays. The test
/// fails when one of them is gone, so the list cannot outlive the problem.
const KNOWN: &[(&str, &str, &str)] = &[];

/// Edges between the submodules of one folder module that still close a
/// circle: (folder, from, to, why). The test fails when one is gone.
const KNOWN_INSIDE: &[(&str, &str, &str, &str)] = &[];

/// The code of a file before its tests, without `//` comments.
pub(crate) fn code(text: &str) -> String {
    // Only an inline `mod tests { .. }` ends the code: `#[cfg(test)] mod
    // tests;` near the top declares a file and is followed by real imports.
    let cut = text
        .match_indices("#[cfg(test)]")
        .find(|(i, m)| text[i + m.len()..].trim_start().starts_with("mod tests {"))
        .map_or(text.len(), |(i, _)| i);
    let before_tests = &text[..cut];
    before_tests.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n")
}

/// The first path segment of every name after `crate::` in `code`:
/// `crate::a::B` gives `a`; `crate::{a, b::C}` gives `a`, `b`.
fn crate_names(code: &str) -> Vec<String> {
    // `$crate::` in a macro is the same crate; `llmsim_crate::` is not us.
    names_after(code, "crate::")
}

pub(crate) fn first_ident(s: &str) -> String {
    s.trim_start().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect()
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every crate of the workspace with its source folder: the members under
/// `crates/`, sorted, then the root package (the `llmsim` binary).
fn roots() -> Vec<(String, PathBuf)> {
    let mut out: Vec<(String, PathBuf)> = std::fs::read_dir(repo().join("crates"))
        .expect("crates/ exists")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.join("Cargo.toml").exists())
        .map(|p| (format!("llmsim-{}", p.file_name().unwrap().to_string_lossy()), p.join("src")))
        .collect();
    out.sort();
    out.push(("llmsim".to_string(), repo().join("src")));
    out
}

/// The source folder of crate `name` (`llmsim-core`, ...).
fn src_of(name: &str) -> PathBuf {
    roots().into_iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("no crate {name}")).1
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut entries: Vec<PathBuf> =
        std::fs::read_dir(dir).expect("a readable folder").map(|e| e.expect("an entry").path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out
}

/// Top-level module of the crate whose sources are in `src` -> (module it
/// uses -> the files that use it).
fn top_level_edges(src: &Path) -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let src = src.to_path_buf();
    let mut modules = BTreeSet::new();
    for entry in std::fs::read_dir(&src).expect("src exists") {
        let path = entry.expect("an entry").path();
        let stem = path.file_stem().unwrap().to_string_lossy().to_string();
        if path.is_dir() || (path.extension().is_some_and(|e| e == "rs") && stem != "lib" && stem != "main") {
            modules.insert(stem);
        }
    }
    let mut edges: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for file in rust_files(&src) {
        let rel = file.strip_prefix(&src).unwrap().to_string_lossy().replace('\\', "/");
        let top = rel.split('/').next().unwrap().trim_end_matches(".rs").to_string();
        if !modules.contains(&top) || file.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let text = code(&std::fs::read_to_string(&file).unwrap());
        // `super::` from a file right under src/ (its module's parent is the
        // crate root), one more per folder; `m/mod.rs` is module `m` itself.
        let depth = rel.matches('/').count() + 1 - usize::from(rel.ends_with("/mod.rs"));
        let mut names = crate_names(&text);
        names.extend(names_after(&text, &"super::".repeat(depth)));
        for name in names {
            if name != top && modules.contains(&name) {
                edges.entry(top.clone()).or_default().entry(name).or_default().insert(rel.clone());
            }
        }
        edges.entry(top).or_default();
    }
    edges
}

/// A cycle in `edges`, as the modules on it, if there is one.
pub(crate) fn find_cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        m: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(m.to_string(), 1);
        path.push(m.to_string());
        for next in edges.get(m).into_iter().flatten() {
            match state.get(next.as_str()).copied().unwrap_or(0) {
                1 => {
                    let start = path.iter().position(|p| p == next).unwrap();
                    let mut cycle = path[start..].to_vec();
                    cycle.push(next.clone());
                    return Some(cycle);
                }
                0 => {
                    if let Some(c) = visit(next, edges, state, path) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        path.pop();
        state.insert(m.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for m in edges.keys() {
        if state.get(m.as_str()).copied().unwrap_or(0) == 0
            && let Some(c) = visit(m, edges, &mut state, &mut Vec::new())
        {
            return Some(c);
        }
    }
    None
}

#[test]
fn the_top_level_modules_of_each_crate_import_each_other_without_circles() {
    let mut modules = 0;
    let mut imports = 0;
    let mut circles = Vec::new();
    for (name, src) in roots() {
        let edges = top_level_edges(&src);
        modules += edges.len();
        imports += edges.values().map(BTreeMap::len).sum::<usize>();
        for (from, to, why) in KNOWN {
            if edges.contains_key(*from) {
                assert!(edges[*from].contains_key(*to), "{from} no longer imports {to}: remove it from KNOWN ({why})");
            }
        }
        let graph: BTreeMap<String, BTreeSet<String>> = edges
            .iter()
            .map(|(m, to)| {
                let kept = to.keys().filter(|t| !KNOWN.iter().any(|(f, k, _)| f == m && k == t)).cloned().collect();
                (m.clone(), kept)
            })
            .collect();
        if let Some(cycle) = find_cycle(&graph) {
            let steps: Vec<String> = cycle
                .windows(2)
                .map(|w| {
                    let files = edges[&w[0]][&w[1]].iter().cloned().collect::<Vec<_>>().join(", ");
                    format!("{} -> {} ({files})", w[0], w[1])
                })
                .collect();
            circles.push(format!("in {name}: {}", steps.join("; ")));
        }
    }
    assert!(modules > 50, "the modules were found ({modules})");
    assert!(imports > 80, "the imports were read ({imports})");
    assert!(circles.is_empty(), "import circles among a crate's top-level modules:\n  {}", circles.join("\n  "));
}

#[test]
fn the_bottom_modules_import_nothing_above_them() {
    // What the engine and the inputs rest on, inside their crates: each may
    // use only the ones listed with it.
    type Rows = &'static [(&'static str, &'static [&'static str])];
    let allowed: &[(&str, Rows)] = &[
        ("llmsim-core", &[("time", &[]), ("util", &[]), ("engine", &["time", "util"])]),
        (
            "llmsim-scenario",
            &[("limits", &[]), ("yaml", &["limits"]), ("input", &["limits"]), ("trace", &["input", "limits"])],
        ),
    ];
    for (krate, modules) in allowed {
        let edges = top_level_edges(&src_of(krate));
        for (m, may) in *modules {
            let uses: Vec<&String> = edges[*m].keys().filter(|t| !may.contains(&t.as_str())).collect();
            assert!(uses.is_empty(), "{krate}: {m} imports {uses:?}, above it (it may use {may:?})");
        }
    }
}

/// The first path segment after every `prefix` in `code` that does not
/// continue a longer path: `super::a::B` gives `a`; `super::{a, b::C}`
/// gives `a`, `b`; in `super::super::x` only the outer `super::` counts.
fn names_after(code: &str, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, _) in code.match_indices(prefix) {
        let before = code[..i].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let rest = &code[i + prefix.len()..];
        match rest.strip_prefix('{') {
            Some(group) => {
                let mut depth = 1;
                let mut item = String::new();
                for c in group.chars() {
                    match c {
                        '{' => depth += 1,
                        '}' => depth -= 1,
                        ',' if depth == 1 => out.push(first_ident(&std::mem::take(&mut item))),
                        _ => {}
                    }
                    if depth == 0 {
                        break;
                    }
                    if c != ',' {
                        item.push(c);
                    }
                }
                out.push(first_ident(&item));
            }
            None => out.push(first_ident(rest)),
        }
    }
    out.retain(|s| !s.is_empty() && s != "super");
    out
}

/// The names a folder module's own file re-exports from its submodules
/// (`pub use m::{A, B};`, `pub use m::A;`, and `pub use m::*;` for the
/// items `m` declares `pub` at its top level), each with the submodule:
/// `super::A` in a sibling then means `m`.
fn reexports(parent: &str, files: &BTreeMap<String, Vec<PathBuf>>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for stmt in parent.split(';') {
        let stmt = stmt.trim();
        let Some(at) = stmt.find("use ") else { continue };
        if !stmt[..at].trim_start().starts_with("pub") {
            continue;
        }
        let path = stmt[at + 4..].trim().trim_start_matches("self::");
        let Some((module, items)) = path.split_once("::") else { continue };
        let Some(module_files) = files.get(module) else { continue };
        for item in items.trim_matches(|c| c == '{' || c == '}').split(',') {
            let item = item.split(" as ").last().unwrap_or("").trim();
            if item == "*" {
                let text = code(&std::fs::read_to_string(&module_files[0]).unwrap());
                for line in text.lines().filter_map(|l| l.strip_prefix("pub ")) {
                    let mut words = line.split_whitespace();
                    if let (Some("struct" | "enum" | "fn" | "type" | "const" | "trait" | "static"), Some(name)) =
                        (words.next(), words.next())
                    {
                        out.entry(first_ident(name)).or_insert_with(|| module.to_string());
                    }
                }
            } else if !item.is_empty() {
                out.insert(first_ident(item.split("::").next().unwrap_or("")), module.to_string());
            }
        }
    }
    out
}

/// Folder module -> submodule -> (sibling it uses -> the files that use it).
/// A submodule of `src/p/` is a file `src/p/m.rs` with the non-test files
/// under `src/p/m/`; it names a sibling as `crate::p::x`, or as `super::x`
/// (`super::super::x` one folder deeper), directly or through a name the
/// folder's own file (`src/p.rs` or `src/p/mod.rs`) re-exports from it.
#[allow(clippy::type_complexity)]
fn inner_edges(src: &Path) -> BTreeMap<String, BTreeMap<String, BTreeMap<String, BTreeSet<String>>>> {
    let src = src.to_path_buf();
    let mut out = BTreeMap::new();
    let mut folders: Vec<PathBuf> =
        std::fs::read_dir(&src).unwrap().map(|e| e.unwrap().path()).filter(|p| p.is_dir()).collect();
    folders.sort();
    for dir in folders {
        let folder = dir.file_name().unwrap().to_string_lossy().to_string();
        let mut files: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
        for file in rust_files(&dir) {
            let rel = file.strip_prefix(&dir).unwrap().to_string_lossy().replace('\\', "/");
            let top = rel.split('/').next().unwrap().trim_end_matches(".rs").to_string();
            if top == "mod" || file.file_name().is_some_and(|n| n == "tests.rs") {
                continue;
            }
            // The submodule's own file first: `pub use m::*` reads it.
            let list = files.entry(top).or_default();
            if rel.contains('/') { list.push(file) } else { list.insert(0, file) }
        }
        let parent = [src.join(format!("{folder}.rs")), dir.join("mod.rs")]
            .into_iter()
            .find(|p| p.exists())
            .map_or(String::new(), |p| code(&std::fs::read_to_string(p).unwrap()));
        let via = reexports(&parent, &files);
        let mut edges: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
        for (m, list) in &files {
            let node = edges.entry(m.clone()).or_default();
            for file in list {
                let rel = file.strip_prefix(&src).unwrap().to_string_lossy().replace('\\', "/");
                // `super::` steps from the file up to the folder's module.
                let depth = rel.matches('/').count() - usize::from(rel.ends_with("/mod.rs"));
                let text = code(&std::fs::read_to_string(file).unwrap());
                let mut names = names_after(&text, &format!("crate::{folder}::"));
                names.extend(names_after(&text, &"super::".repeat(depth)));
                for name in names {
                    let target = if files.contains_key(&name) { Some(&name) } else { via.get(&name) };
                    if let Some(t) = target.filter(|t| *t != m) {
                        node.entry(t.clone()).or_default().insert(rel.clone());
                    }
                }
            }
        }
        out.insert(folder, edges);
    }
    out
}

#[test]
fn the_submodules_of_each_folder_module_import_each_other_without_circles() {
    // Folder modules by "crate/folder".
    let all: BTreeMap<String, _> = roots()
        .iter()
        .flat_map(|(name, src)| inner_edges(src).into_iter().map(move |(f, e)| (format!("{name}/{f}"), e)))
        .collect();
    assert!(all.len() > 12, "the folder modules were found: {:?}", all.keys());
    let count: usize = all.values().flat_map(|e| e.values()).map(BTreeMap::len).sum();
    assert!(count > 100, "the imports were read: {all:?}");
    // `config/deployment.rs` takes `Check` from `config/check.rs` by `super::`;
    // `config/validate.rs` takes `ConfigError` through `config/mod.rs`'s re-export.
    let config = &all["llmsim-scenario/config"];
    assert!(config["deployment"].contains_key("check"), "{:?}", config["deployment"]);
    assert!(config["validate"].contains_key("error"), "{:?}", config["validate"]);
    for (folder, from, to, why) in KNOWN_INSIDE {
        assert!(
            all[*folder].get(*from).is_some_and(|e| e.contains_key(*to)),
            "{folder}/{from} no longer imports {folder}/{to}: remove it from KNOWN_INSIDE ({why})"
        );
    }
    let mut circles = Vec::new();
    for (folder, edges) in &all {
        let graph: BTreeMap<String, BTreeSet<String>> = edges
            .iter()
            .map(|(m, to)| {
                let known = |t: &String| KNOWN_INSIDE.iter().any(|(f, a, b, _)| f == folder && a == m && b == t);
                (m.clone(), to.keys().filter(|t| !known(t)).cloned().collect())
            })
            .collect();
        if let Some(cycle) = find_cycle(&graph) {
            let steps: Vec<String> = cycle
                .windows(2)
                .map(|w| {
                    format!(
                        "{} -> {} ({})",
                        w[0],
                        w[1],
                        edges[&w[0]][&w[1]].iter().cloned().collect::<Vec<_>>().join(", ")
                    )
                })
                .collect();
            circles.push(format!("in {folder}/: {}", steps.join("; ")));
        }
    }
    assert!(circles.is_empty(), "import circles among submodules:\n  {}", circles.join("\n  "));
}

#[test]
fn the_inner_checker_reads_super_paths_and_reexports() {
    assert_eq!(
        names_after("use super::{a, b::C}; super::super::x; my_super::y; super::d::E", "super::"),
        ["a", "b", "d"]
    );
    assert_eq!(names_after("use super::super::{k, m::N};", "super::super::"), ["k", "m"]);
    let files: BTreeMap<String, Vec<PathBuf>> = [
        ("error", vec![src_of("llmsim-scenario").join("config/error.rs")]),
        ("scenario", vec![src_of("llmsim-scenario").join("config/scenario.rs")]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let via = reexports("pub use error::ConfigError;\npub use scenario::*;\nuse nothing::X;", &files);
    assert_eq!(via.get("ConfigError").map(String::as_str), Some("error"));
    assert_eq!(via.get("Scenario").map(String::as_str), Some("scenario"));
    assert_eq!(via.get("X"), None);
}

#[test]
fn serde_yaml_is_named_only_in_the_scenario_crates_yaml_rs() {
    let mut named = Vec::new();
    for (_, src) in roots() {
        for file in rust_files(&src) {
            let text = std::fs::read_to_string(&file).unwrap();
            let code: String = text.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n");
            if code.contains("serde_yaml") {
                named.push(file.strip_prefix(repo()).unwrap().to_string_lossy().replace('\\', "/"));
            }
        }
    }
    assert_eq!(
        named,
        ["crates/scenario/src/yaml.rs"],
        "serde_yaml belongs behind llmsim-scenario's yaml.rs (use llmsim_scenario::yaml::...)"
    );
}

#[test]
fn the_checker_sees_groups_comments_and_cycles() {
    let names = crate_names("use crate::{a, b::{C, D}, e::F};\nlet x = crate::g::h(); $crate::k; my_crate::z");
    assert_eq!(names, ["a", "b", "e", "g", "k"]);
    let c = code(
        "use crate::x; // crate::y\n#[cfg(test)]\nmod tests;\nuse crate::w;\n#[cfg(test)]\nmod tests {\nuse crate::z;\n}",
    );
    assert!(c.contains("crate::x") && c.contains("crate::w"), "{c}");
    assert!(!c.contains("crate::y") && !c.contains("crate::z"), "{c}");
    let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    let mut edges = BTreeMap::new();
    edges.insert("a".to_string(), set(&["b"]));
    edges.insert("b".to_string(), set(&["c"]));
    edges.insert("c".to_string(), set(&[]));
    assert_eq!(find_cycle(&edges), None);
    edges.insert("c".to_string(), set(&["a"]));
    assert_eq!(find_cycle(&edges), Some(vec!["a".into(), "b".into(), "c".into(), "a".into()]));
}

/// The workspace's layers: what each crate may depend on among its own
/// crates (docs/ARCHITECTURE.md). A crate missing here fails the test.
const LAYERS: &[(&str, &[&str])] = &[
    ("llmsim-core", &[]),
    ("llmsim-scenario", &["llmsim-core"]),
    ("llmsim-planner", &["llmsim-core", "llmsim-scenario"]),
    ("llmsim-content", &["llmsim-core", "llmsim-scenario"]),
    ("llmsim-analysis", &["llmsim-core", "llmsim-scenario", "llmsim-planner"]),
    ("llmsim-server", &["llmsim-core", "llmsim-scenario", "llmsim-planner", "llmsim-content"]),
    ("llmsim-bench", &["llmsim-core", "llmsim-scenario", "llmsim-planner", "llmsim-content", "llmsim-analysis"]),
    (
        "llmsim",
        &[
            "llmsim-core",
            "llmsim-scenario",
            "llmsim-planner",
            "llmsim-content",
            "llmsim-analysis",
            "llmsim-server",
            "llmsim-bench",
        ],
    ),
];

/// The web stack, async runtimes and tokenizers: only the server, the load
/// generator and the binary may have them, directly or not.
const WEB: &[&str] = &["tokio", "axum", "hyper", "hyper-util", "reqwest", "tokenizers", "minijinja", "futures-util"];

/// The packages as cargo resolves them: name of each workspace crate ->
/// every package it pulls in through normal dependencies, however
/// indirectly (by name), and its direct ones.
fn resolved_graph() -> BTreeMap<String, (BTreeSet<String>, BTreeSet<String>)> {
    // The graph of this machine's platform (js-sys and the like come with
    // plotters and indicatif for wasm only).
    let rustc = std::process::Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into()))
        .arg("-vV")
        .output()
        .expect("rustc -vV runs");
    let host = String::from_utf8_lossy(&rustc.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_string))
        .expect("rustc names its host");
    let out = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--offline", "--filter-platform", &host, "--manifest-path"])
        .arg(repo().join("Cargo.toml"))
        .output()
        .expect("cargo metadata runs");
    assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("cargo metadata's JSON");
    let names: BTreeMap<&str, &str> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p["name"].as_str().unwrap()))
        .collect();
    // Package id -> the ids of its normal dependencies.
    let edges: BTreeMap<&str, Vec<&str>> = meta["resolve"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|node| {
            let deps = node["deps"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["dep_kinds"].as_array().unwrap().iter().any(|k| k["kind"].is_null()))
                .map(|d| d["pkg"].as_str().unwrap())
                .collect();
            (node["id"].as_str().unwrap(), deps)
        })
        .collect();
    let mut graph = BTreeMap::new();
    for member in meta["workspace_members"].as_array().unwrap() {
        let id = member.as_str().unwrap();
        let direct = edges[id].iter().map(|d| names[d].to_string()).collect();
        let mut reach = BTreeSet::new();
        let mut todo = vec![id];
        while let Some(n) = todo.pop() {
            for d in &edges[n] {
                if reach.insert(*d) {
                    todo.push(d);
                }
            }
        }
        graph.insert(names[id].to_string(), (direct, reach.iter().map(|d| names[d].to_string()).collect()));
    }
    graph
}

#[test]
fn the_crates_depend_on_each_other_only_down_the_layers_and_the_lower_ones_have_no_web_stack() {
    let graph = resolved_graph();
    let members: Vec<String> = roots().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        graph.keys().collect::<BTreeSet<_>>(),
        members.iter().collect(),
        "cargo's members are the crates/ folders"
    );
    assert_eq!(members.len(), LAYERS.len(), "every crate has its row in LAYERS: {members:?}");
    let mut seen_web = false;
    for name in &members {
        let may = LAYERS.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("{name} has no row in LAYERS")).1;
        let (direct, reach) = &graph[name];
        let above: Vec<&String> =
            direct.iter().filter(|d| d.starts_with("llmsim") && !may.contains(&d.as_str())).collect();
        assert!(above.is_empty(), "{name} depends on {above:?}; it may use {may:?}");
        let web: Vec<&&str> = WEB.iter().filter(|w| reach.contains(**w)).collect();
        if ["llmsim-server", "llmsim-bench", "llmsim"].contains(&name.as_str()) {
            seen_web |= !web.is_empty();
        } else {
            assert!(web.is_empty(), "{name} pulls in {web:?}: the web stack belongs to the server and the bench");
        }
    }
    assert!(seen_web, "the check reads the resolved graph (the server has tokio)");
}

/// The longest a function outside tests may be, in lines (issue 28).
const MAX_FUNCTION_LINES: usize = 150;

/// Each function of `text` (before its inline tests) longer than `max`
/// lines: (first line, name, lines). A function ends at the first line
/// that is its opening line's indentation and `}`.
fn long_functions(text: &str, max: usize) -> Vec<(usize, String, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let end = lines
        .windows(2)
        .position(|w| w[0].starts_with("#[cfg(test)]") && w[1].starts_with("mod tests {"))
        .unwrap_or(lines.len());
    let mut out = Vec::new();
    for (i, line) in lines[..end].iter().enumerate() {
        let body = line.trim_start();
        let indent = &line[..line.len() - body.len()];
        let mut words = body
            .split_whitespace()
            .skip_while(|w| w.starts_with("pub") || ["const", "async", "unsafe", "extern", "\"C\""].contains(w));
        if words.next() != Some("fn") || body.trim_end().ends_with(';') {
            continue;
        }
        let name = first_ident(words.next().unwrap_or(""));
        let close = format!("{indent}}}");
        if let Some(len) = lines[i..end].iter().position(|l| l.trim_end() == close).map(|k| k + 1)
            && len > max
        {
            out.push((i + 1, name, len));
        }
    }
    out
}

#[test]
fn no_function_outside_tests_is_over_150_lines() {
    let mut long = Vec::new();
    let mut functions = 0;
    for (_, src) in roots() {
        for file in rust_files(&src) {
            if file.file_name().is_some_and(|n| n == "tests.rs") || file.components().any(|c| c.as_os_str() == "tests")
            {
                continue;
            }
            let text = std::fs::read_to_string(&file).unwrap();
            functions += long_functions(&text, 0).len();
            for (line, name, len) in long_functions(&text, MAX_FUNCTION_LINES) {
                long.push(format!("{}:{line} {name} ({len} lines)", file.strip_prefix(repo()).unwrap().display()));
            }
        }
    }
    assert!(functions > 2000, "the functions were found ({functions})");
    assert!(
        long.is_empty(),
        "functions over {MAX_FUNCTION_LINES} lines: split them into named parts\n  {}",
        long.join("\n  ")
    );
}

#[test]
fn the_long_function_finder_measures_from_the_signature_to_the_closing_brace() {
    let text = "fn a() {\n    x();\n}\n    pub(crate) async fn b(\n        y: u32,\n    ) {\n        z();\n    }\nfn c();\n#[cfg(test)]\nmod tests {\nfn d() {\n}\n}\n";
    let all: Vec<(usize, String, usize)> = long_functions(text, 0);
    assert_eq!(all, [(1, "a".to_string(), 3), (4, "b".to_string(), 5)]);
    assert_eq!(long_functions(text, 4), [(4, "b".to_string(), 5)]);
}
