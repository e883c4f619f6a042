//! The crate's shape, checked from its sources (issue 15): the top-level
//! modules of `src/` import each other without circles, and `serde_yaml`
//! is named in `src/yaml.rs` alone.
//!
//! A top-level module is a file `src/m.rs` or a folder `src/m/` (both
//! together when both exist), `lib.rs` and `main.rs` aside. Its edges are
//! the names it uses as `crate::x` (in `use` lines, groups and inline
//! paths) where `x` is another top-level module. Comments, `tests.rs`
//! files and everything from a file's first `#[cfg(test)]` on are ignored:
//! test code may use whatever it likes. (The server's own modules have
//! their check in `server/layers.rs`.)

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Edges that still close a circle, each with the reason it stays. The test
/// fails when one of them is gone, so the list cannot outlive the problem.
const KNOWN: &[(&str, &str, &str)] = &[];

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
    let mut out = Vec::new();
    for (i, _) in code.match_indices("crate::") {
        // `$crate::` in a macro is the same crate; `llmsim_crate::` is not us.
        let before = code[..i].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let rest = &code[i + "crate::".len()..];
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
                    if depth >= 1 && c != ',' {
                        item.push(c);
                    }
                }
                out.push(first_ident(&item));
            }
            None => out.push(first_ident(rest)),
        }
    }
    out.retain(|s| !s.is_empty());
    out
}

pub(crate) fn first_ident(s: &str) -> String {
    s.trim_start().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect()
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
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

/// Top-level module -> (module it uses -> the files that use it).
fn top_level_edges() -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let src = src();
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
        let text = std::fs::read_to_string(&file).unwrap();
        for name in crate_names(&code(&text)) {
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
fn the_top_level_modules_import_each_other_without_circles() {
    let edges = top_level_edges();
    assert!(edges.len() > 20, "the modules were found: {:?}", edges.keys());
    assert!(edges.values().map(BTreeMap::len).sum::<usize>() > 40, "the imports were read: {edges:?}");
    for (from, to, why) in KNOWN {
        assert!(
            edges.get(*from).is_some_and(|e| e.contains_key(*to)),
            "{from} no longer imports {to}: remove it from KNOWN ({why})"
        );
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
                format!("{} -> {} ({})", w[0], w[1], edges[&w[0]][&w[1]].iter().cloned().collect::<Vec<_>>().join(", "))
            })
            .collect();
        panic!("an import circle among the top-level modules:\n  {}", steps.join("\n  "));
    }
}

#[test]
fn the_bottom_modules_import_nothing_above_them() {
    // What the engine and the inputs rest on: each may use only the ones
    // listed with it.
    let edges = top_level_edges();
    let allowed: &[(&str, &[&str])] = &[
        ("time", &[]),
        ("util", &[]),
        ("limits", &["util"]),
        ("yaml", &["limits", "util"]),
        ("trace", &["limits", "time", "util"]),
    ];
    for (m, may) in allowed {
        let uses: Vec<&String> = edges[*m].keys().filter(|t| !may.contains(&t.as_str())).collect();
        assert!(uses.is_empty(), "{m} imports {uses:?}, above it (it may use {may:?})");
    }
}

#[test]
fn serde_yaml_is_named_only_in_src_yaml_rs() {
    let src = src();
    let mut named = Vec::new();
    for file in rust_files(&src) {
        let text = std::fs::read_to_string(&file).unwrap();
        let code: String = text.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n");
        if code.contains("serde_yaml") {
            named.push(file.strip_prefix(&src).unwrap().to_string_lossy().replace('\\', "/"));
        }
    }
    assert_eq!(named, ["yaml.rs"], "serde_yaml belongs behind src/yaml.rs (use crate::yaml::...)");
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
