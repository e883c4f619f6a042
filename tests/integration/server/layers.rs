//! The server's modules import each other without circles (issue 15).
//!
//! Reads the sources of the server's crate, `crates/server/src/`: every
//! module `m` (the file `m.rs` and the non-test files under `m/`) names
//! its siblings as `super::x` (`super::super::x` in a submodule) or
//! `crate::x`, in `use` lines or inline paths. Those names are the edges;
//! the test fails on a cycle (naming it), and on a module that reaches
//! into the crate root `lib.rs` itself (`super::App`): the root only
//! declares the modules and re-exports, so it sits above all of them. Comments and
//! an inline `#[cfg(test)] mod tests { .. }` are ignored (test code may
//! use whatever it likes).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

// The checker is the one of the top-level test (tests/integration/structure.rs).
use crate::structure::{code, find_cycle, first_ident};

/// The first path segment of every name after `prefix` in `code`:
/// `super::a::B` gives `a`; `super::{a, b::C, D}` gives `a`, `b`, `D`.
fn names_after(code: &str, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(i) = code[at..].find(prefix) {
        // `super::super::x` is also found as `super::x`: skip the inner match.
        let before = &code[..at + i];
        let rest = &code[at + i + prefix.len()..];
        at += i + prefix.len();
        if prefix == "super::" && before.ends_with("super::") {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let mut item = String::new();
            let mut items = Vec::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 1 => items.push(std::mem::take(&mut item)),
                    _ => {}
                }
                if depth == 0 {
                    break;
                }
                if depth == 1 && c != ',' {
                    item.push(c);
                }
            }
            items.push(item);
            out.extend(items.iter().map(|s| first_ident(s)).filter(|s| !s.is_empty()));
        } else {
            let name = first_ident(rest);
            if name != "super" {
                out.push(name);
            }
        }
    }
    out
}

/// Module name -> the names it uses from its parent, `server`.
fn uses() -> BTreeMap<String, BTreeSet<String>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/server/src");
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).expect("crates/server/src exists") {
        let path = entry.expect("a readable entry").path();
        if path.extension().is_none_or(|e| e != "rs") || path.file_name().is_some_and(|n| n == "lib.rs") {
            continue;
        }
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        let text = std::fs::read_to_string(&path).unwrap();
        let mut names: BTreeSet<String> = names_after(&code(&text), "super::").into_iter().collect();
        names.extend(names_after(&code(&text), "crate::"));
        let sub = dir.join(&name);
        if sub.is_dir() {
            for f in std::fs::read_dir(&sub).unwrap() {
                let f = f.unwrap().path();
                if f.file_name().is_some_and(|n| n == "tests.rs") || f.extension().is_none_or(|e| e != "rs") {
                    continue;
                }
                let text = code(&std::fs::read_to_string(&f).unwrap());
                names.extend(names_after(&text, "super::super::"));
                names.extend(names_after(&text, "crate::"));
            }
        }
        out.insert(name, names);
    }
    out
}

#[test]
fn the_server_modules_import_each_other_without_circles() {
    let uses = uses();
    assert!(uses.len() > 15, "the server's modules were found: {:?}", uses.keys());
    let modules: BTreeSet<String> = uses.keys().cloned().collect();
    let mut edges = BTreeMap::new();
    let mut root_items = Vec::new();
    for (m, names) in &uses {
        for n in names {
            if modules.contains(n) {
                if n != m {
                    edges.entry(m.clone()).or_insert_with(BTreeSet::new).insert(n.clone());
                }
            } else if n != "*" {
                root_items.push(format!("{m} uses crate::{n}"));
            }
        }
    }
    assert!(
        root_items.is_empty(),
        "modules reach into lib.rs instead of the module that owns the item: {root_items:?}"
    );
    assert!(edges.values().map(BTreeSet::len).sum::<usize>() > 20, "the imports were read: {edges:?}");
    if let Some(cycle) = find_cycle(&edges) {
        panic!("an import circle among the server's modules: {}", cycle.join(" -> "));
    }
}

#[test]
fn the_checker_sees_groups_nesting_and_cycles() {
    let names = names_after("use super::{a, b::{C, D}, e::F};\nlet x = super::g::h(); super::super::k", "super::");
    assert_eq!(names, ["a", "b", "e", "g"]);
    assert_eq!(code("use super::x; // super::y\n#[cfg(test)]\nmod tests {\nuse super::z;\n}"), "use super::x; ");
    let mut edges = BTreeMap::new();
    let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    edges.insert("a".to_string(), set(&["b"]));
    edges.insert("b".to_string(), set(&["c"]));
    edges.insert("c".to_string(), set(&[]));
    assert_eq!(find_cycle(&edges), None);
    edges.insert("c".to_string(), set(&["a"]));
    assert_eq!(find_cycle(&edges), Some(vec!["a".into(), "b".into(), "c".into(), "a".into()]));
}
